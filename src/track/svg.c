/* SVG line charts for metric curves (keel runs plot, keel ui): axes with
 * "nice" ticks, one polyline path per series (NaN/Inf points break the
 * line), a legend. Self-contained SVG, no scripts or external styles. */
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

int kl_track_svg_chart(kl_buf *out, const char *title, const char *xlabel, const char *ylabel, const kl_chart_series *series,
                       size_t nseries, int width, int height) {
    if (width < 200) width = 200;
    if (height < 150) height = 150;
    const double ml = 70, mr = 20, mt = title ? 34 : 16, mb = 48 + 18.0 * (double)((nseries + 2) / 3);
    double pw = width - ml - mr, ph = height - mt - mb;
    if (ph < 40) {
        height += (int)(40 - ph);
        ph = 40;
    }
    /* data range over finite points */
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    size_t npts = 0;
    for (size_t s = 0; s < nseries; s++)
        for (size_t i = 0; i < series[s].n; i++) {
            double y = series[s].y[i], x = XV(series[s], i);
            if (!isfinite(y)) continue;
            xmin = fmin(xmin, x);
            xmax = fmax(xmax, x);
            ymin = fmin(ymin, y);
            ymax = fmax(ymax, y);
            npts++;
        }
    if (!npts) {
        xmin = 0;
        xmax = 1;
        ymin = 0;
        ymax = 1;
    }
    if (xmax == xmin) {
        xmin -= 1;
        xmax += 1;
    }
    if (ymax == ymin) {
        double d = fabs(ymin) > 0 ? fabs(ymin) * 0.1 : 1;
        ymin -= d;
        ymax += d;
    }
    double ystep = nice_step(ymin, ymax, 5), xstep = nice_step(xmin, xmax, 6);
    int real_x = 0;
    for (size_t s = 0; s < nseries; s++) real_x |= series[s].xf != NULL;
    if (xstep < 1 && !real_x) xstep = 1; /* steps are integers */
    double y0 = floor(ymin / ystep) * ystep, y1 = ceil(ymax / ystep) * ystep;
    double x0 = xmin, x1 = xmax;
#define PX(x) (ml + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (mt + ph - ((y) - y0) / (y1 - y0) * ph)
    kl_buf_printf(out,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"sans-serif\" font-size=\"11\">\n",
                  width, height, width, height);
    kl_buf_printf(out, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", width, height);
    if (title) {
        kl_buf_printf(out, "<text x=\"%d\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">", width / 2);
        kl_buf_html(out, title);
        kl_buf_puts(out, "</text>\n");
    }
    /* grid and y ticks */
    kl_buf_puts(out, "<g class=\"yaxis\">\n");
    for (int k = 0; k < 200; k++) {
        double v = y0 + k * ystep;
        if (v > y1 + ystep * 1e-9) break;
        double py = PY(v);
        char lab[64];
        fmt_tick(lab, sizeof lab, v, ystep);
        kl_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>", ml, py, ml + pw, py);
        kl_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>", ml - 5, py, ml, py);
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ml - 8, py + 4, lab);
    }
    kl_buf_puts(out, "</g>\n<g class=\"xaxis\">\n");
    double xs = ceil(x0 / xstep) * xstep;
    for (int k = 0; k < 200; k++) {
        double v = xs + k * xstep;
        if (v > x1 + xstep * 1e-9) break;
        double px = PX(v);
        char lab[64];
        fmt_tick(lab, sizeof lab, v, xstep);
        kl_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>", px, mt + ph, px, mt + ph + 5);
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px, mt + ph + 18, lab);
    }
    kl_buf_puts(out, "</g>\n");
    /* axes */
    kl_buf_printf(out, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", ml, mt, ml, mt + ph);
    kl_buf_printf(out, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", ml, mt + ph, ml + pw,
                  mt + ph);
    if (xlabel) {
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", ml + pw / 2, mt + ph + 34);
        kl_buf_html(out, xlabel);
        kl_buf_puts(out, "</text>\n");
    }
    if (ylabel) {
        kl_buf_printf(out, "<text x=\"14\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.1f)\">", mt + ph / 2, mt + ph / 2);
        kl_buf_html(out, ylabel);
        kl_buf_puts(out, "</text>\n");
    }
    /* series */
    for (size_t s = 0; s < nseries; s++) {
        const char *color = palette[s % KL_ARRAY_LEN(palette)];
        kl_buf_printf(out, "<path class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" d=\"", color);
        int pen = 0;
        size_t drawn = 0;
        for (size_t i = 0; i < series[s].n; i++) {
            double y = series[s].y[i];
            if (!isfinite(y)) {
                pen = 0;
                continue;
            }
            kl_buf_printf(out, "%s%.1f %.1f", pen ? " L" : (drawn ? " M" : "M"), PX(XV(series[s], i)), PY(y));
            pen = 1;
            drawn++;
        }
        if (!drawn) kl_buf_printf(out, "M%.1f %.1f", ml, mt + ph);
        kl_buf_puts(out, "\"/>\n");
        if (drawn == 1) { /* a single point: show it */
            for (size_t i = 0; i < series[s].n; i++)
                if (isfinite(series[s].y[i]))
                    kl_buf_printf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(XV(series[s], i)), PY(series[s].y[i]),
                                  color);
        }
    }
    /* legend: three entries per row under the plot */
    kl_buf_puts(out, "<g class=\"legend\">\n");
    for (size_t s = 0; s < nseries; s++) {
        double lx = ml + (double)(s % 3) * (pw / 3), ly = mt + ph + 48 + 18.0 * (double)(s / 3);
        kl_buf_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>", lx, ly - 6, palette[s % KL_ARRAY_LEN(palette)]);
        kl_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\">", lx + 20, ly);
        kl_buf_html(out, series[s].label ? series[s].label : "");
        kl_buf_puts(out, "</text>\n");
    }
    kl_buf_puts(out, "</g>\n</svg>\n");
#undef PX
#undef PY
    return out->failed ? KL_ENOMEM : KL_OK;
}
