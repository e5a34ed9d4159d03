/* ONNX Resize (f32), the fast path: nearest and (multi-)linear interpolation
 * on any axes, with the half_pixel / align_corners / asymmetric /
 * pytorch_half_pixel / tf_half_pixel_for_nn coordinate transformations.
 * Per-axis index/weight tables, then one pass over output rows. The other
 * modes (cubic, antialias, tf_crop_and_resize, exclude_outside) are the
 * separable kernel in resize_sep.c. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>
#include <string.h>

typedef struct {
    int rank;
    const int64_t *dims, *od;
    int64_t ist[KL_MAX_DIMS];
    int64_t *i0[KL_MAX_DIMS], *i1[KL_MAX_DIMS];
    float *w[KL_MAX_DIMS];
    int interp[KL_MAX_DIMS];        /* linear along this axis */
    int nlin;
    int ident_last;                 /* the last axis maps output j to input j */
    const float *x;
    float *y;
} rs_ctx;

/* Corners of one output row over the leading axes (all but the last): the
 * input offset and the product of the weights (axis order) of each
 * combination of low/high taps on the linear ones; returns their count. */
static int rs_corners(const rs_ctx *c, const int64_t *o, int64_t *off, float *wt) {
    int r = c->rank, nl = c->nlin - c->interp[r - 1], nc = 1 << nl;
    for (int m = 0; m < nc; m++) {
        int64_t at = 0;
        float w = 1;
        int b = 0;
        for (int i = 0; i < r - 1; i++) {
            if (c->interp[i]) {
                int hi = (m >> b++) & 1;
                float wi = c->w[i][o[i]];
                at += (hi ? c->i1[i][o[i]] : c->i0[i][o[i]]) * c->ist[i];
                w *= hi ? wi : 1.0f - wi;
            } else at += c->i0[i][o[i]] * c->ist[i];
        }
        off[m] = at, wt[m] = w;
    }
    return nc;
}

/* Output rows r0..r1: the corners once per row, then along the last axis
 * one tap (a copy where the axis is unchanged) or two. The sums run in the
 * order of the n-linear formula (low taps of the last axis first). */
static void rs_rows(void *vc, size_t r0, size_t r1, int chunk) {
    rs_ctx *c = vc;
    int r = c->rank, last = c->interp[r - 1];
    int64_t ow = c->od[r - 1], coff[1 << (KL_MAX_DIMS - 1)];
    float cw[1 << (KL_MAX_DIMS - 1)];
    const int64_t *i0 = c->i0[r - 1], *i1 = c->i1[r - 1];
    const float *w = c->w[r - 1];
    for (size_t row = r0; row < r1; row++) {
        int64_t o[KL_MAX_DIMS], rem = (int64_t)row;
        for (int i = r - 2; i >= 0; i--) { o[i] = rem % c->od[i]; rem /= c->od[i]; }
        int nc = rs_corners(c, o, coff, cw);
        float *y = c->y + (int64_t)row * ow;
        if (c->nlin == 0) {
            const float *xr = c->x + coff[0];
            if (c->ident_last) memcpy(y, xr, (size_t)ow * sizeof(float));
            else for (int64_t j = 0; j < ow; j++) y[j] = xr[i0[j]];
        } else if (!last) {
            for (int64_t j = 0; j < ow; j++) {
                float acc = 0;
                for (int m = 0; m < nc; m++) acc += cw[m] * c->x[coff[m] + i0[j]];
                y[j] = acc;
            }
        } else {
            for (int64_t j = 0; j < ow; j++) {
                float acc = 0, wj = w[j], lo = 1.0f - wj;
                for (int m = 0; m < nc; m++) acc += cw[m] * lo * c->x[coff[m] + i0[j]];
                for (int m = 0; m < nc; m++) acc += cw[m] * wj * c->x[coff[m] + i1[j]];
                y[j] = acc;
            }
        }
    }
}

int kl_resize_f32(int rank, const int64_t *dims, const float *x, const int64_t *out_dims, const float *scales,
                  kl_resize_mode mode, kl_resize_coord coord, kl_resize_nearest nearest, float *y, kl_pool *pool,
                  kl_err *e) {
    rs_ctx c;
    memset(&c, 0, sizeof c);
    if (rank < 1 || rank > KL_MAX_DIMS) return kl_err_set(e, KL_ESHAPE, "resize: rank %d not supported", rank);
    if (mode == KL_RESIZE_CUBIC || coord == KL_CT_TF_CROP_AND_RESIZE || coord == KL_CT_HALF_PIXEL_SYMMETRIC) {
        kl_resize_opts o = {mode, coord, nearest, -0.75f, 0, 0.f, 0, NULL};
        return kl_resize_ex_f32(rank, dims, x, out_dims, scales, &o, y, pool, e);
    }
    c.rank = rank;
    c.dims = dims;
    c.od = out_dims;
    c.x = x;
    c.y = y;
    kl_tensor_contiguous_strides(rank, dims, c.ist);
    int64_t tot = 0;
    for (int i = 0; i < rank; i++) {
        if (out_dims[i] < 0 || dims[i] < 0) return kl_err_set(e, KL_ESHAPE, "resize: negative dimension");
        if (out_dims[i] > 0 && dims[i] == 0) return kl_err_set(e, KL_ESHAPE, "resize: empty input axis %d", i);
        tot += out_dims[i];
    }
    for (int i = 0; i < rank; i++) if (out_dims[i] == 0) return KL_OK;
    /* index/weight tables: on the stack for the usual sizes */
    int64_t istack[2 * 2048];
    float wstack[2048];
    int64_t *ibuf = istack, *iheap = NULL;
    float *wbuf = wstack, *wheap = NULL;
    if (tot > 2048) {
        ibuf = iheap = kl_mem_alloc_e((size_t)(2 * tot) * sizeof(int64_t), KL_TAG_WORKSPACE, e);
        wbuf = wheap = kl_mem_alloc_e((size_t)tot * sizeof(float), KL_TAG_WORKSPACE, e);
        if (!iheap || !wheap) {
            kl_mem_free(iheap);
            kl_mem_free(wheap);
            return e ? e->code : KL_ENOMEM;
        }
    }
    int64_t pos = 0;
    for (int i = 0; i < rank; i++) {
        int64_t in = dims[i], on = out_dims[i];
        double sc = scales && scales[i] > 0 ? scales[i] : (double)on / (double)in;
        /* ONNX's length_resized: in * scale when scales were given (not the
         * floored output size), as the reference implementation */
        double len = scales && scales[i] > 0 ? (double)in * sc : (double)on;
        c.i0[i] = ibuf + 2 * pos;
        c.i1[i] = ibuf + 2 * pos + on;
        c.w[i] = wbuf + pos;
        pos += on;
        c.interp[i] = mode == KL_RESIZE_LINEAR && !(in == on && (sc == 1.0 || !scales));
        if (c.interp[i]) c.nlin++;
        for (int64_t o = 0; o < on; o++) {
            double xo;
            switch (coord) {
            case KL_CT_ALIGN_CORNERS: xo = len == 1 ? 0 : (double)o * (double)(in - 1) / (len - 1); break;
            case KL_CT_ASYMMETRIC: xo = (double)o / sc; break;
            case KL_CT_PYTORCH_HALF_PIXEL: xo = len > 1 ? ((double)o + 0.5) / sc - 0.5 : 0; break;
            case KL_CT_TF_HALF_PIXEL_FOR_NN: xo = ((double)o + 0.5) / sc; break;
            default: xo = ((double)o + 0.5) / sc - 0.5; break;
            }
            if (mode == KL_RESIZE_NEAREST || !c.interp[i]) {
                double r;
                if (!c.interp[i] && mode == KL_RESIZE_LINEAR) r = (double)o;
                else switch (nearest) {
                case KL_NEAREST_FLOOR: r = floor(xo); break;
                case KL_NEAREST_CEIL: r = ceil(xo); break;
                case KL_NEAREST_SIMPLE: r = sc < 1 ? ceil(xo) : floor(xo); break;
                case KL_NEAREST_ROUND_PREFER_CEIL: r = (xo - floor(xo) == 0.5) ? ceil(xo) : round(xo); break;
                default: r = (xo - floor(xo) == 0.5) ? floor(xo) : round(xo); break;
                }
                int64_t ri = r < 0 ? 0 : r > (double)(in - 1) ? in - 1 : (int64_t)r;
                c.i0[i][o] = c.i1[i][o] = ri;
                c.w[i][o] = 0;
            } else {
                double xc = xo < 0 ? 0 : xo > (double)(in - 1) ? (double)(in - 1) : xo;
                int64_t a = (int64_t)floor(xc);
                c.i0[i][o] = a;
                c.i1[i][o] = a + 1 < in ? a + 1 : in - 1;
                c.w[i][o] = (float)(xc - (double)a);
            }
        }
    }
    int64_t rows = 1;
    for (int i = 0; i < rank - 1; i++) rows *= out_dims[i];
    c.ident_last = !c.interp[rank - 1] && dims[rank - 1] == out_dims[rank - 1];
    for (int64_t j = 0; c.ident_last && j < out_dims[rank - 1]; j++) c.ident_last = c.i0[rank - 1][j] == j;
    kl_pool_parallel_for(pool, (size_t)rows, (size_t)KL_MAX(1, 2048 / KL_MAX(1, out_dims[rank - 1])), rs_rows, &c);
    kl_mem_free(iheap);
    kl_mem_free(wheap);
    return KL_OK;
}
