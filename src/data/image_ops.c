/* Image transforms for the loader: exact box-filter (area) resize, the fused
 * resize + crop + flip + normalise + HWC->CHW pass that writes straight into
 * a batch slot, camera undistortion with OpenCV's model and fixed-point
 * bilinear remap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keel/loader.h"

/* ================================================================ area weights */

/* Per output index: the source taps [start, start+n) and their weights
 * (overlap of the output cell with each source pixel / cell width). */
typedef struct { int start, n, off; } tap;
typedef struct { tap *t; float *w; } taps;

static void taps_free(taps *t) { free(t->t); free(t->w); }

/* Taps for outputs [o0, o0+on) of a src -> dst resize along one axis. */
static int taps_make(int src, int dst, int o0, int on, taps *out) {
    double scale = (double)src / dst;
    int maxn = (int)ceil(scale) + 2;
    out->t = malloc((size_t)on * sizeof *out->t);
    out->w = malloc((size_t)on * (size_t)maxn * sizeof *out->w);
    if (!out->t || !out->w) { taps_free(out); return KL_ENOMEM; }
    int off = 0;
    for (int i = 0; i < on; i++) {
        double a = (double)(o0 + i) * scale, b = (double)(o0 + i + 1) * scale;
        int j0 = (int)floor(a), j1 = (int)ceil(b);
        if (j1 > src) j1 = src;
        if (j0 >= j1) j0 = j1 - 1;
        tap *t = &out->t[i];
        t->start = j0; t->n = 0; t->off = off;
        double sum = 0;
        for (int j = j0; j < j1; j++) {
            double ov = fmin(b, j + 1.0) - fmax(a, (double)j);
            if (ov <= 1e-12) { if (t->n == 0) t->start = j + 1; continue; }
            out->w[off + t->n++] = (float)ov;
            sum += ov;
        }
        for (int k = 0; k < t->n; k++) out->w[off + k] = (float)(out->w[off + k] / sum);
        off += t->n;
    }
    return KL_OK;
}

/* ================================================================ resample */

/* The one resampling loop behind both public entry points. Vertical pass
 * into a float row (only the columns the window needs), then horizontal.
 * u8 != NULL: write rounded uint8 HWC; else normalised float CHW (flip). */
static int resample(const uint8_t *src, int sw, int sh, int c, int rw, int rh, int x0, int y0, int cw, int ch, int flip,
                    const kl_img_norm *norm, uint8_t *u8, float *f32, float *scratch, kl_err *e) {
    if (!src || sw < 1 || sh < 1 || c < 1 || c > 4 || rw < 1 || rh < 1 || cw < 1 || ch < 1 || x0 < 0 || y0 < 0 || x0 + cw > rw || y0 + ch > rh)
        return kl_err_set(e, KL_EINVAL, "resize %dx%dx%d -> %dx%d, window (%d,%d) %dx%d: invalid geometry", sw, sh, c, rw, rh, x0, y0, cw, ch);
    taps tx = {0}, ty = {0};
    float *own = NULL;
    int rc = KL_OK;
    if (taps_make(sw, rw, x0, cw, &tx) || taps_make(sh, rh, y0, ch, &ty)) { rc = kl_err_set(e, KL_ENOMEM, "resize: out of memory"); goto done; }
    if (!scratch && !(scratch = own = malloc(kl_img_scratch_floats(sw, c) * sizeof(float)))) { rc = kl_err_set(e, KL_ENOMEM, "resize: out of memory"); goto done; }
    float sc[4], bi[4];
    for (int k = 0; k < c; k++) {
        float m = norm && k < norm->c ? norm->mean[k] : 0.f, s = norm && k < norm->c && norm->std[k] != 0 ? norm->std[k] : 1.f;
        sc[k] = 1.f / (255.f * s);
        bi[k] = -m / s;
    }
    int cs = tx.t[0].start, ce = tx.t[cw - 1].start + tx.t[cw - 1].n; /* source columns used */
    if (cs > tx.t[cw - 1].start) cs = tx.t[cw - 1].start;
    if (tx.t[0].start + tx.t[0].n > ce) ce = tx.t[0].start + tx.t[0].n;
    size_t plane = (size_t)cw * (size_t)ch;
    for (int oy = 0; oy < ch; oy++) {
        const tap *t = &ty.t[oy];
        float *row = scratch;
        const float *w = ty.w + t->off;
        size_t a = (size_t)cs * (size_t)c, b = (size_t)ce * (size_t)c;
        const uint8_t *s0 = src + (size_t)t->start * (size_t)sw * (size_t)c;
        for (size_t i = a; i < b; i++) row[i] = w[0] * (float)s0[i];
        for (int k = 1; k < t->n; k++) {
            const uint8_t *sk = s0 + (size_t)k * (size_t)sw * (size_t)c;
            float wk = w[k];
            for (size_t i = a; i < b; i++) row[i] += wk * (float)sk[i];
        }
        if (c == 3 && !u8) { /* the common case, unrolled over channels */
            float *o0 = f32 + (size_t)oy * (size_t)cw, *o1 = o0 + plane, *o2 = o1 + plane;
            for (int ox = 0; ox < cw; ox++) {
                const tap *u = &tx.t[ox];
                const float *wx = tx.w + u->off, *r = row + (size_t)u->start * 3;
                float a = 0, g = 0, d = 0;
                for (int k = 0; k < u->n; k++, r += 3) { a += wx[k] * r[0]; g += wx[k] * r[1]; d += wx[k] * r[2]; }
                int dx = flip ? cw - 1 - ox : ox;
                o0[dx] = a * sc[0] + bi[0]; o1[dx] = g * sc[1] + bi[1]; o2[dx] = d * sc[2] + bi[2];
            }
            continue;
        }
        for (int ox = 0; ox < cw; ox++) {
            const tap *u = &tx.t[ox];
            const float *wx = tx.w + u->off;
            const float *r = row + (size_t)u->start * (size_t)c;
            float v[4] = {0, 0, 0, 0};
            for (int k = 0; k < u->n; k++)
                for (int q = 0; q < c; q++) v[q] += wx[k] * r[k * c + q];
            if (u8) {
                uint8_t *d = u8 + ((size_t)oy * (size_t)cw + (size_t)ox) * (size_t)c;
                for (int q = 0; q < c; q++) { float x = v[q] + 0.5f; d[q] = x >= 255.f ? 255 : x <= 0 ? 0 : (uint8_t)x; }
            } else {
                size_t dx = (size_t)(flip ? cw - 1 - ox : ox), o = (size_t)oy * (size_t)cw + dx;
                for (int q = 0; q < c; q++) f32[(size_t)q * plane + o] = v[q] * sc[q] + bi[q];
            }
        }
    }
done:
    free(own);
    taps_free(&tx);
    taps_free(&ty);
    return rc;
}

size_t kl_img_scratch_floats(int sw, int c) { return (size_t)(sw > 0 ? sw : 1) * (size_t)(c > 0 ? c : 1); }

int kl_img_resize_area(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, kl_err *e) {
    return resample(src, sw, sh, c, dw, dh, 0, 0, dw, dh, 0, NULL, dst, NULL, NULL, e);
}

int kl_img_resize_crop_chw(const uint8_t *src, int sw, int sh, int c, int rw, int rh, int x0, int y0, int cw, int ch,
                           int flip, const kl_img_norm *norm, float *out, float *scratch, kl_err *e) {
    return resample(src, sw, sh, c, rw, rh, x0, y0, cw, ch, flip, norm, NULL, out, scratch, e);
}

void kl_img_fit_shorter(int w, int h, int shorter, int mult, int *ow, int *oh) {
    int W, H;
    if (w <= h) { W = shorter; H = (int)lround((double)h * shorter / w); }
    else { H = shorter; W = (int)lround((double)w * shorter / h); }
    if (mult > 1) {
        W = (int)lround((double)W / mult) * mult;
        H = (int)lround((double)H / mult) * mult;
        if (W < mult) W = mult;
        if (H < mult) H = mult;
    }
    *ow = W < 1 ? 1 : W;
    *oh = H < 1 ? 1 : H;
}

/* ================================================================ undistortion */

struct kl_undistort_map {
    int w, h;
    int32_t *xy;   /* (h, w, 2): source position in 1/32 pixel */
};

enum { TAB_BITS = 5, TAB = 1 << TAB_BITS };

int kl_undistort_map_new(const kl_camera *cam, int w, int h, kl_undistort_map **out, kl_err *e) {
    *out = NULL;
    if (!cam || w < 1 || h < 1 || !(cam->fx > 0) || !(cam->fy > 0))
        return kl_err_set(e, KL_EINVAL, "undistort: need fx, fy > 0 and a size (got %dx%d)", w, h);
    if ((uint64_t)w * (uint64_t)h > (1ull << 28)) return kl_err_set(e, KL_ERANGE, "undistort: %dx%d is too large", w, h);
    kl_undistort_map *m = calloc(1, sizeof *m);
    if (m) m->xy = kl_mem_alloc((size_t)w * (size_t)h * 2 * sizeof(int32_t), KL_TAG_WORKSPACE);
    if (!m || !m->xy) { free(m); return kl_err_set(e, KL_ENOMEM, "undistort: out of memory"); }
    m->w = w; m->h = h;
    double sx = cam->w > 0 ? (double)w / cam->w : 1, sy = cam->h > 0 ? (double)h / cam->h : 1;
    double fx = cam->fx * sx, fy = cam->fy * sy, cx = cam->cx * sx, cy = cam->cy * sy;
    for (int v = 0; v < h; v++) {
        for (int u = 0; u < w; u++) {
            double x = (u - cx) / fx, y = (v - cy) / fy;
            double x2 = x * x, y2 = y * y, r2 = x2 + y2, xy2 = 2 * x * y;
            double kr = 1 + (cam->k2 * r2 + cam->k1) * r2;
            double mx = fx * (x * kr + cam->p1 * xy2 + cam->p2 * (r2 + 2 * x2)) + cx;
            double my = fy * (y * kr + cam->p1 * (r2 + 2 * y2) + cam->p2 * xy2) + cy;
            double qx = fmax(fmin(mx * TAB, 1e9), -1e9), qy = fmax(fmin(my * TAB, 1e9), -1e9);
            int32_t *d = m->xy + ((size_t)v * (size_t)w + (size_t)u) * 2;
            d[0] = (int32_t)lrint(qx);
            d[1] = (int32_t)lrint(qy);
        }
    }
    *out = m;
    return KL_OK;
}

void kl_undistort_map_free(kl_undistort_map *m) {
    if (!m) return;
    kl_mem_free(m->xy);
    free(m);
}

void kl_undistort_map_at(const kl_undistort_map *m, int x, int y, double *sx, double *sy) {
    const int32_t *d = m->xy + ((size_t)y * (size_t)m->w + (size_t)x) * 2;
    *sx = (double)d[0] / TAB;
    *sy = (double)d[1] / TAB;
}

/* Bilinear in fixed point as cv2.remap(INTER_LINEAR) on uint8: weights
 * (32-a)(32-b)*32 ... sum to 32768; result rounded half up. */
int kl_img_undistort(const kl_undistort_map *m, const uint8_t *src, int w, int h, int c, uint8_t *dst, kl_err *e) {
    if (!m || m->w != w || m->h != h || c < 1 || c > 4)
        return kl_err_set(e, KL_EINVAL, "undistort: map is %dx%d, image %dx%dx%d", m ? m->w : 0, m ? m->h : 0, w, h, c);
    for (int v = 0; v < h; v++) {
        for (int u = 0; u < w; u++) {
            const int32_t *d = m->xy + ((size_t)v * (size_t)w + (size_t)u) * 2;
            int X = d[0] >> TAB_BITS, Y = d[1] >> TAB_BITS, a = d[0] & (TAB - 1), b = d[1] & (TAB - 1);
            uint8_t *o = dst + ((size_t)v * (size_t)w + (size_t)u) * (size_t)c;
            if (X >= w || X + 1 < 0 || Y >= h || Y + 1 < 0) { memset(o, 0, (size_t)c); continue; }
            int wt[4] = {(TAB - a) * (TAB - b) * 32, a * (TAB - b) * 32, (TAB - a) * b * 32, a * b * 32};
            int px[4] = {X, X + 1, X, X + 1}, py[4] = {Y, Y, Y + 1, Y + 1};
            for (int q = 0; q < c; q++) {
                int32_t s = 0;
                for (int k = 0; k < 4; k++)
                    if (px[k] >= 0 && px[k] < w && py[k] >= 0 && py[k] < h) s += wt[k] * src[((size_t)py[k] * (size_t)w + (size_t)px[k]) * (size_t)c + (size_t)q];
                o[q] = (uint8_t)((s + (1 << 14)) >> 15);
            }
        }
    }
    return KL_OK;
}
