/* The SVG line chart of keel (keel runs plot, keel ui, a training run's
 * curves.svg, study histories, the pipeline report): axes with "nice" ticks
 * (or one line per decade on a log axis), an optional right axis for
 * fractions (accuracy), one path per series (NaN/Inf points break the line),
 * dots where asked, a legend. Self-contained SVG, no scripts or external
 * styles. */
#include "track_int.h"

#include <math.h>
#include <string.h>

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* A "nice" step (1, 2, 5 x 10^k) giving about n ticks over [lo, hi]. */
static double nice_step(double lo, double hi, int n) {
    double range = hi - lo;
    if (!(range > 0)) return 1;
    double raw = range / n, mag = pow(10, floor(log10(raw))), r = raw / mag;
    double m = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
    return m * mag;
}

static void fmt_tick(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    double a = fabs(v);
    if (a != 0 && (a >= 1e6 || a < 1e-3)) snprintf(buf, n, "%.2g", v);
    else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        if (dec > 6) dec = 6;
        snprintf(buf, n, "%.*f", dec, v);
    }
}

#define XV(sr, i) ((sr).xf ? (sr).xf[i] : (double)(sr).x[i])

/* The plotted value of point i of a series (NaN when it is not drawn). */
static double plot_y(const kl_chart *c, const kl_chart_series *sr, size_t i) {
    double y = sr->y[i];
    if (!isfinite(y)) return NAN;
    if (c->logy && !sr->right) return y > 0 ? log10(y) : NAN;
    return y;
}

typedef struct {
    double ml, mr, mt, mb, pw, ph; /* margins, plot size */
    double x0, x1, y0, y1, xstep, ystep;
    int width, height, right;
} frame;

#define PX(f, x)  ((f)->ml + ((x) - (f)->x0) / ((f)->x1 - (f)->x0) * (f)->pw)
#define PY(f, y)  ((f)->mt + (f)->ph - ((y) - (f)->y0) / ((f)->y1 - (f)->y0) * (f)->ph)
#define PYR(f, y) ((f)->mt + (f)->ph - (y) * (f)->ph) /* the right axis: 0..1 */

/* Layout and data ranges (finite points; left-axis series for y). */
static void frame_of(const kl_chart *c, frame *f) {
    memset(f, 0, sizeof *f);
    for (size_t s = 0; s < c->nseries; s++) f->right |= c->series[s].right;
    f->width = c->width < 200 ? 200 : c->width;
    f->height = c->height < 150 ? 150 : c->height;
    f->ml = 70, f->mr = f->right ? 60 : 20, f->mt = c->title ? 34 : 16;
    f->mb = 48 + 18.0 * (double)((c->nseries + 2) / 3);
    f->pw = f->width - f->ml - f->mr, f->ph = f->height - f->mt - f->mb;
    if (f->ph < 40) {
        f->height += (int)(40 - f->ph);
        f->ph = 40;
    }
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int real_x = 0;
    for (size_t s = 0; s < c->nseries; s++) {
        const kl_chart_series *sr = &c->series[s];
        real_x |= sr->xf != NULL;
        for (size_t i = 0; i < sr->n; i++) {
            double y = plot_y(c, sr, i), x = XV(*sr, i);
            if (isnan(y)) continue;
            xmin = fmin(xmin, x), xmax = fmax(xmax, x);
            if (!sr->right) ymin = fmin(ymin, y), ymax = fmax(ymax, y);
        }
    }
    if (!(xmin <= xmax)) xmin = 0, xmax = 1;
    if (!(ymin <= ymax)) ymin = 0, ymax = 1;
    if (xmax == xmin) xmin -= 1, xmax += 1;
    if (ymax == ymin) {
        double d = c->logy ? 1 : fabs(ymin) > 0 ? fabs(ymin) * 0.1 : 1;
        ymin -= d, ymax += d;
    }
    f->ystep = c->logy ? 1 : nice_step(ymin, ymax, 5);
    f->xstep = nice_step(xmin, xmax, 6);
    if (f->xstep < 1 && !real_x) f->xstep = 1; /* steps are integers */
    f->y0 = floor(ymin / f->ystep) * f->ystep, f->y1 = ceil(ymax / f->ystep) * f->ystep;
    f->x0 = xmin, f->x1 = xmax;
}

static void text_el(kl_buf *out, const char *attrs, const char *s) {
    kl_buf_printf(out, "<text %s>", attrs);
    kl_buf_html(out, s);
    kl_buf_puts(out, "</text>\n");
}

/* Grid, ticks and their labels, axes and axis labels. */
static void axes(kl_buf *out, const kl_chart *c, const frame *f) {
    char lab[64], at[160];
    kl_buf_puts(out, "<g class=\"yaxis\">\n");
    for (int k = 0; k < 200; k++) {
        double v = f->y0 + k * f->ystep;
        if (v > f->y1 + f->ystep * 1e-9) break;
        double py = PY(f, v);
        if (c->logy) snprintf(lab, sizeof lab, "%.3g", pow(10, v));
        else fmt_tick(lab, sizeof lab, v, f->ystep);
        kl_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>", f->ml, py,
                      f->ml + f->pw, py);
        kl_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>", f->ml - 5, py,
                      f->ml, py);
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", f->ml - 8, py + 4, lab);
    }
    kl_buf_puts(out, "</g>\n");
    if (f->right) {
        kl_buf_puts(out, "<g class=\"yaxis-right\">\n");
        for (int k = 0; k <= 5; k++)
            kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\">%d%%</text>\n", f->ml + f->pw + 6, PYR(f, k / 5.0) + 4,
                          20 * k);
        kl_buf_puts(out, "</g>\n");
    }
    kl_buf_puts(out, "<g class=\"xaxis\">\n");
    double xs = ceil(f->x0 / f->xstep) * f->xstep;
    for (int k = 0; k < 200; k++) {
        double v = xs + k * f->xstep;
        if (v > f->x1 + f->xstep * 1e-9) break;
        double px = PX(f, v), yb = f->mt + f->ph;
        fmt_tick(lab, sizeof lab, v, f->xstep);
        kl_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>", px, yb, px,
                      yb + 5);
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px, yb + 18, lab);
    }
    kl_buf_puts(out, "</g>\n");
    kl_buf_printf(out, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                  f->ml, f->mt, f->ml, f->mt + f->ph);
    kl_buf_printf(out, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                  f->ml, f->mt + f->ph, f->ml + f->pw, f->mt + f->ph);
    if (c->xlabel) {
        snprintf(at, sizeof at, "x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\"", f->ml + f->pw / 2, f->mt + f->ph + 34);
        text_el(out, at, c->xlabel);
    }
    if (c->ylabel) {
        snprintf(at, sizeof at, "x=\"14\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.1f)\"",
                 f->mt + f->ph / 2, f->mt + f->ph / 2);
        text_el(out, at, c->ylabel);
    }
    if (f->right && c->ylabel_right) {
        double rx = f->width - 8.0;
        snprintf(at, sizeof at, "x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(90 %.1f %.1f)\"", rx,
                 f->mt + f->ph / 2, rx, f->mt + f->ph / 2);
        text_el(out, at, c->ylabel_right);
    }
}

/* One series: a path through its drawn points, and dots (always for a
 * series of one point). */
static void series_path(kl_buf *out, const kl_chart *c, const frame *f, size_t s) {
    const kl_chart_series *sr = &c->series[s];
    const char *color = palette[s % KL_ARRAY_LEN(palette)];
    kl_buf_printf(out, "<path class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" d=\"", color);
    int pen = 0;
    size_t drawn = 0;
    for (size_t i = 0; i < sr->n; i++) {
        double y = plot_y(c, sr, i);
        if (isnan(y)) {
            pen = 0;
            continue;
        }
        kl_buf_printf(out, "%s%.1f %.1f", pen ? " L" : (drawn ? " M" : "M"), PX(f, XV(*sr, i)),
                      sr->right ? PYR(f, y) : PY(f, y));
        pen = 1;
        drawn++;
    }
    if (!drawn) kl_buf_printf(out, "M%.1f %.1f", f->ml, f->mt + f->ph);
    kl_buf_puts(out, "\"/>\n");
    if (!sr->dots && drawn != 1) return;
    for (size_t i = 0; i < sr->n; i++) {
        double y = plot_y(c, sr, i);
        if (!isnan(y))
            kl_buf_printf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"/>\n", PX(f, XV(*sr, i)),
                          sr->right ? PYR(f, y) : PY(f, y), drawn == 1 ? "3" : "2.5", color);
    }
}

/* Three entries per row under the plot. */
static void legend(kl_buf *out, const kl_chart *c, const frame *f) {
    kl_buf_puts(out, "<g class=\"legend\">\n");
    for (size_t s = 0; s < c->nseries; s++) {
        double lx = f->ml + (double)(s % 3) * (f->pw / 3), ly = f->mt + f->ph + 48 + 18.0 * (double)(s / 3);
        kl_buf_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>", lx, ly - 6,
                      palette[s % KL_ARRAY_LEN(palette)]);
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\">", lx + 20, ly);
        kl_buf_html(out, c->series[s].label ? c->series[s].label : "");
        kl_buf_puts(out, "</text>\n");
    }
    kl_buf_puts(out, "</g>\n");
}

int kl_svg_chart(kl_buf *out, const kl_chart *c) {
    frame f;
    frame_of(c, &f);
    kl_buf_printf(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
        "font-family=\"sans-serif\" font-size=\"11\">\n",
        f.width, f.height, f.width, f.height);
    kl_buf_printf(out, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", f.width, f.height);
    if (c->title) {
        char at[96];
        snprintf(at, sizeof at, "x=\"%d\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\"",
                 f.width / 2);
        text_el(out, at, c->title);
    }
    axes(out, c, &f);
    for (size_t s = 0; s < c->nseries; s++) series_path(out, c, &f, s);
    legend(out, c, &f);
    kl_buf_puts(out, "</svg>\n");
    return out->failed ? KL_ENOMEM : KL_OK;
}

int kl_track_svg_chart(kl_buf *out, const char *title, const char *xlabel, const char *ylabel,
                       const kl_chart_series *series, size_t nseries, int width, int height) {
    kl_chart c = {title, xlabel, ylabel, NULL, series, nseries, width, height, 0};
    return kl_svg_chart(out, &c);
}
