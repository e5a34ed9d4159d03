/* The pictures of a study, shared by `keel tune show` (files) and `keel ui`
 * (inline): the optimisation history (a line chart through the track
 * module's chart code) and parallel coordinates. Self-contained SVG. */
#include <keel/track.h>
#include <keel/tune.h>

#include <math.h>
#include <stdlib.h>

int kl_tune_svg_history(kl_buf *b, const kl_trial *t, size_t n, int minimize, const char *metric) {
    int64_t *xs = malloc((n + 1) * sizeof *xs), *xb = malloc((n + 1) * sizeof *xb);
    double *ys = malloc((n + 1) * sizeof *ys), *yb = malloc((n + 1) * sizeof *yb);
    int rc = KL_ENOMEM;
    if (xs && xb && ys && yb) {
        size_t m = 0;
        double run = NAN;
        for (size_t i = 0; i < n; i++) {
            if (t[i].state != KL_TRIAL_COMPLETE || !isfinite(t[i].value)) continue;
            xs[m] = xb[m] = t[i].number;
            ys[m] = t[i].value;
            if (isnan(run) || (minimize ? t[i].value < run : t[i].value > run)) run = t[i].value;
            yb[m] = run;
            m++;
        }
        kl_chart_series ser[2] = {{"trial value", xs, ys, m, NULL, 0, 0}, {"best so far", xb, yb, m, NULL, 0, 0}};
        rc = kl_track_svg_chart(b, "optimisation history", "trial", metric, ser, 2, 800, 420);
    }
    free(xs); free(xb); free(ys); free(yb);
    return rc;
}

/* Parallel coordinates: one vertical axis per parameter and one for the
 * value; each complete trial is a polyline, darker for better values. */
void kl_tune_svg_parallel(kl_buf *b, const kl_tune_space *s, const kl_trial *t, size_t n, int minimize, const char *metric) {
    int W = 160 * (s->n + 1) + 80, H = 420, top = 40, bot = 360;
    kl_buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    kl_buf_puts(b, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"14\">parallel coordinates</text>\n");
    double vmin = INFINITY, vmax = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (t[i].state == KL_TRIAL_COMPLETE && isfinite(t[i].value)) {
            if (t[i].value < vmin) vmin = t[i].value;
            if (t[i].value > vmax) vmax = t[i].value;
        }
    for (int p = 0; p <= s->n; p++) {
        int x = 60 + 160 * p;
        kl_buf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n", x, top, x, bot);
        kl_buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", x, bot + 20);
        kl_buf_html(b, p < s->n ? s->p[p].name : metric);
        kl_buf_puts(b, "</text>\n");
        /* the axis range: high at the top, low at the bottom (choices listed for categoricals) */
        const kl_tune_param *pp = p < s->n ? &s->p[p] : NULL;
        if (pp && pp->kind == KL_TUNE_CAT) {
            for (int k = 0; k < pp->nchoices; k++) {
                double f = pp->nchoices > 1 ? (double)k / (pp->nchoices - 1) : 0.5;
                kl_buf_printf(b, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" fill=\"#666\">", x + 4, bot - f * (bot - top) + 3);
                kl_buf_html(b, pp->choices[k]);
                kl_buf_puts(b, "</text>\n");
            }
            continue;
        }
        double lo = pp ? pp->low : vmin, hi = pp ? pp->high : vmax;
        if (!isfinite(lo) || !isfinite(hi)) continue;
        kl_buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\" fill=\"#666\">%.4g</text>\n", x, top - 6, hi);
        kl_buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\" fill=\"#666\">%.4g</text>\n", x, bot + 34, lo);
    }
    for (size_t i = 0; i < n; i++) {
        const kl_trial *x = &t[i];
        if (x->state != KL_TRIAL_COMPLETE || !isfinite(x->value)) continue;
        double q = vmax > vmin ? (x->value - vmin) / (vmax - vmin) : 1;
        if (minimize) q = 1 - q; /* 1 = best */
        kl_buf_puts(b, "<polyline fill=\"none\" stroke-width=\"1.5\" ");
        kl_buf_printf(b, "stroke=\"rgb(%d,%d,%d)\" stroke-opacity=\"%.2f\" points=\"", (int)(220 - 190 * q), (int)(220 - 120 * q), 255, 0.3 + 0.7 * q);
        for (int p = 0; p <= s->n; p++) {
            double f;
            if (p == s->n) f = vmax > vmin ? (x->value - vmin) / (vmax - vmin) : 0.5;
            else if (!x->params[p].present) continue;
            else {
                const kl_tune_param *pp = &s->p[p];
                double v = x->params[p].v, lo = pp->low, hi = pp->high;
                if (pp->kind == KL_TUNE_CAT) { lo = 0; hi = pp->nchoices - 1; }
                if (pp->log) { v = log(v); lo = log(lo); hi = log(hi); }
                f = hi > lo ? (v - lo) / (hi - lo) : 0.5;
            }
            kl_buf_printf(b, "%d,%.1f ", 60 + 160 * p, bot - f * (bot - top));
        }
        kl_buf_puts(b, "\"/>\n");
    }
    kl_buf_puts(b, "</svg>\n");
}

