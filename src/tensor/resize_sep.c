/* ONNX Resize (f32), the general path: every mode and coordinate
 * transformation of opsets 10-19 (cubic with cubic_coeff_a and
 * exclude_outside, antialias, tf_crop_and_resize with extrapolation_value,
 * half_pixel_symmetric) as the ONNX reference defines them. Stages: one tap
 * table per axis (for each output index: the input indices, edge-clamped,
 * and their weights; or "extrapolate"), then one separable pass per changed
 * axis (ping-pong buffers from the core allocator), shrinking axes first. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>
#include <string.h>

typedef struct {
    int64_t in, out, ntap;
    int64_t *idx; /* out * ntap */
    float *w;     /* out * ntap */
    uint8_t *ext; /* out: 1 = extrapolation value */
} rs_axis;

/* the input coordinate of output index o (ONNX's x_original) */
static double rs_coord(const kl_resize_opts *o, int64_t xo, int64_t in, int64_t on, double sc, double len, double r0,
                       double r1) {
    double x = (double)xo;
    switch (o->coord) {
    case KL_CT_ALIGN_CORNERS: return len == 1 ? 0 : x * (double)(in - 1) / (len - 1);
    case KL_CT_ASYMMETRIC: return x / sc;
    case KL_CT_PYTORCH_HALF_PIXEL: return len > 1 ? (x + 0.5) / sc - 0.5 : 0;
    case KL_CT_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / sc;
    case KL_CT_TF_CROP_AND_RESIZE:
        return (len > 1 ? x * (r1 - r0) * (double)(in - 1) / (len - 1) : (r1 - r0) * (double)(in - 1) / 2) +
            r0 * (double)(in - 1);
    case KL_CT_HALF_PIXEL_SYMMETRIC: {
        double adj = (double)on / len, center = (double)in / 2;
        return center * (1 - adj) + (x + 0.5) / sc - 0.5;
    }
    default: return (x + 0.5) / sc - 0.5;
    }
}

static double rs_cubic(double x, double a) {
    x = fabs(x);
    if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0;
}

static int64_t rs_nearest(const kl_resize_opts *o, double xo, double sc) {
    switch (o->nearest) {
    case KL_NEAREST_FLOOR: return (int64_t)floor(xo);
    case KL_NEAREST_CEIL: return (int64_t)ceil(xo);
    case KL_NEAREST_SIMPLE: return (int64_t)(sc < 1 ? ceil(xo) : floor(xo));
    case KL_NEAREST_ROUND_PREFER_CEIL: return (int64_t)(xo - floor(xo) == 0.5 ? ceil(xo) : round(xo));
    default: return (int64_t)(xo - floor(xo) == 0.5 ? floor(xo) : round(xo));
    }
}

/* taps of a linear/cubic filter: the ONNX reference's neighbours (base =
 * the index left of x, ratio in (0, 1]) and its (antialiased) weights */
static void rs_filter_taps(const kl_resize_opts *o, rs_axis *a, int64_t j, double xo, double seff, int64_t start) {
    double base = ceil(xo) - 1, ratio = xo - base, sum = 0;
    int64_t *ix = a->idx + j * a->ntap;
    float *w = a->w + j * a->ntap;
    for (int64_t t = 0; t < a->ntap; t++) {
        int64_t i = (int64_t)base + start + t;
        double arg = seff * ((double)(start + t) - ratio);
        double c = o->mode == KL_RESIZE_CUBIC ? rs_cubic(arg, o->cubic_a) : fmax(0.0, 1 - fabs(arg));
        if (o->exclude_outside && (i < 0 || i >= a->in)) c = 0;
        w[t] = (float)c;
        sum += c;
        ix[t] = i < 0 ? 0 : i >= a->in ? a->in - 1 : i;
    }
    for (int64_t t = 0; t < a->ntap; t++) w[t] = (float)(sum != 0 ? (double)w[t] / sum : 0);
}

/* fills a (idx/w/ext allocated by the caller for ntap taps) */
static void rs_axis_fill(const kl_resize_opts *o, rs_axis *a, double sc, double len, double seff, int64_t start,
                         double r0, double r1) {
    for (int64_t j = 0; j < a->out; j++) {
        double xo = rs_coord(o, j, a->in, a->out, sc, len, r0, r1);
        a->ext[j] = o->coord == KL_CT_TF_CROP_AND_RESIZE && (xo < 0 || xo > (double)(a->in - 1));
        if (o->mode == KL_RESIZE_NEAREST) {
            int64_t r = rs_nearest(o, xo, sc);
            a->idx[j] = r < 0 ? 0 : r >= a->in ? a->in - 1 : r;
            a->w[j] = 1;
        } else rs_filter_taps(o, a, j, xo, seff, start);
    }
}

static int rs_axis_identity(const rs_axis *a) {
    if (a->in != a->out) return 0;
    for (int64_t j = 0; j < a->out; j++) {
        if (a->ext[j]) return 0;
        for (int64_t t = 0; t < a->ntap; t++) {
            float w = a->w[j * a->ntap + t];
            if (w != 0 && (w != 1 || a->idx[j * a->ntap + t] != j)) return 0;
        }
    }
    return 1;
}

typedef struct {
    const rs_axis *a;
    const float *x;
    float *y;
    int64_t inner;
    float extr;
} rs_pass;

static void rs_pass_rows(void *vc, size_t r0, size_t r1, int chunk) {
    (void)chunk;
    const rs_pass *p = vc;
    const rs_axis *a = p->a;
    int64_t inner = p->inner;
    for (size_t row = r0; row < r1; row++) {
        int64_t b = (int64_t)row / a->out, j = (int64_t)row % a->out;
        float *y = p->y + (int64_t)row * inner;
        if (a->ext[j]) {
            for (int64_t k = 0; k < inner; k++) y[k] = p->extr;
            continue;
        }
        const int64_t *ix = a->idx + j * a->ntap;
        const float *w = a->w + j * a->ntap;
        const float *xb = p->x + b * a->in * inner;
        if (inner == 1) {
            float acc = 0;
            for (int64_t t = 0; t < a->ntap; t++) acc += w[t] * xb[ix[t]];
            y[0] = acc;
            continue;
        }
        for (int64_t k = 0; k < inner; k++) y[k] = 0;
        for (int64_t t = 0; t < a->ntap; t++) {
            if (w[t] == 0) continue;
            const float *xs = xb + ix[t] * inner;
            float wt = w[t];
            for (int64_t k = 0; k < inner; k++) y[k] += wt * xs[k];
        }
    }
}

/* number of taps and the first offset of the filter along one axis */
static void rs_support(const kl_resize_opts *o, double sc, double *seff, int64_t *start, int64_t *ntap) {
    if (o->mode == KL_RESIZE_NEAREST) {
        *seff = 1;
        *start = 0;
        *ntap = 1;
        return;
    }
    double radius = o->mode == KL_RESIZE_CUBIC ? 2 : 1;
    *seff = o->antialias && sc < 1 ? sc : 1;
    *start = (int64_t)floor(-radius / *seff) + 1;
    *ntap = 2 - 2 * *start;
}

int kl_resize_ex_f32(int rank, const int64_t *dims, const float *x, const int64_t *out_dims, const float *scales,
                     const kl_resize_opts *o, float *y, kl_pool *pool, kl_err *e) {
    if (rank < 1 || rank > KL_MAX_DIMS) return kl_err_set(e, KL_ESHAPE, "resize: rank %d not supported", rank);
    int fast = o->mode != KL_RESIZE_CUBIC && !o->exclude_outside && o->coord != KL_CT_TF_CROP_AND_RESIZE &&
        o->coord != KL_CT_HALF_PIXEL_SYMMETRIC;
    if (fast && o->antialias && o->mode == KL_RESIZE_LINEAR)
        for (int i = 0; i < rank; i++) {
            double sc = scales && scales[i] > 0 ? scales[i] : dims[i] ? (double)out_dims[i] / (double)dims[i] : 1;
            if (sc < 1) fast = 0;
        }
    if (fast) return kl_resize_f32(rank, dims, x, out_dims, scales, o->mode, o->coord, o->nearest, y, pool, e);
    int64_t numel_out = 1, cur = 1, peak = 1;
    for (int i = 0; i < rank; i++) {
        if (out_dims[i] < 0 || dims[i] < 0) return kl_err_set(e, KL_ESHAPE, "resize: negative dimension");
        if (out_dims[i] > 0 && dims[i] == 0) return kl_err_set(e, KL_ESHAPE, "resize: empty input axis %d", i);
        numel_out *= out_dims[i];
        cur *= dims[i];
    }
    if (numel_out == 0) return KL_OK;
    /* tap tables */
    rs_axis ax[KL_MAX_DIMS];
    int64_t tab = 0, ntaps[KL_MAX_DIMS], starts[KL_MAX_DIMS];
    double seffs[KL_MAX_DIMS], scs[KL_MAX_DIMS];
    for (int i = 0; i < rank; i++) {
        scs[i] = scales && scales[i] > 0 ? scales[i] : (double)out_dims[i] / (double)dims[i];
        rs_support(o, scs[i], &seffs[i], &starts[i], &ntaps[i]);
        if (ntaps[i] > (int64_t)1 << 20)
            return kl_err_set(e, KL_ERANGE, "resize: axis %d filter of %lld taps", i, (long long)ntaps[i]);
        tab += out_dims[i] * ntaps[i];
    }
    size_t tbytes = (size_t)tab * (sizeof(int64_t) + sizeof(float)) + (size_t)numel_out + 64;
    char *tmem = kl_mem_alloc_e(tbytes, KL_TAG_WORKSPACE, e);
    if (!tmem) return e ? e->code : KL_ENOMEM;
    int64_t *ip = (int64_t *)tmem;
    float *wp = (float *)(ip + tab);
    uint8_t *ep = (uint8_t *)(wp + tab);
    for (int i = 0; i < rank; i++) {
        ax[i] = (rs_axis){dims[i], out_dims[i], ntaps[i], ip, wp, ep};
        ip += out_dims[i] * ntaps[i];
        wp += out_dims[i] * ntaps[i];
        ep += out_dims[i];
        double r0 = o->roi ? o->roi[i] : 0, r1 = o->roi ? o->roi[rank + i] : 1;
        double len = scales && scales[i] > 0 ? (double)dims[i] * scs[i] : (double)out_dims[i];
        rs_axis_fill(o, &ax[i], scs[i], len, seffs[i], starts[i], r0, r1);
    }
    /* the axes to resample, shrinking ones first */
    int order[KL_MAX_DIMS], np = 0;
    for (int i = 0; i < rank; i++)
        if (!rs_axis_identity(&ax[i])) order[np++] = i;
    for (int a = 1; a < np; a++)
        for (int b = a; b > 0 && scs[order[b]] < scs[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int64_t shape[KL_MAX_DIMS];
    memcpy(shape, dims, sizeof(int64_t) * (size_t)rank);
    for (int k = 0; k + 1 < np; k++) {
        cur = cur / shape[order[k]] * out_dims[order[k]];
        shape[order[k]] = out_dims[order[k]];
        if (cur > peak) peak = cur;
    }
    float *buf[2] = {NULL, NULL};
    if (np > 1) {
        buf[0] = kl_mem_alloc_e((size_t)peak * sizeof(float), KL_TAG_WORKSPACE, e);
        buf[1] = np > 2 ? kl_mem_alloc_e((size_t)peak * sizeof(float), KL_TAG_WORKSPACE, e) : NULL;
        if (!buf[0] || (np > 2 && !buf[1])) {
            kl_mem_free(buf[0]);
            kl_mem_free(buf[1]);
            kl_mem_free(tmem);
            return e ? e->code : KL_ENOMEM;
        }
    }
    if (np == 0) memcpy(y, x, (size_t)numel_out * sizeof(float));
    memcpy(shape, dims, sizeof(int64_t) * (size_t)rank);
    const float *src = x;
    for (int k = 0; k < np; k++) {
        int i = order[k];
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < i; d++) outer *= shape[d];
        for (int d = i + 1; d < rank; d++) inner *= shape[d];
        float *dst = k == np - 1 ? y : buf[k & 1];
        rs_pass p = {&ax[i], src, dst, inner, o->extrapolation};
        size_t rows = (size_t)(outer * out_dims[i]);
        kl_pool_parallel_for(pool, rows, (size_t)KL_MAX(1, 4096 / KL_MAX(1, inner * ax[i].ntap)), rs_pass_rows, &p);
        shape[i] = out_dims[i];
        src = dst;
    }
    kl_mem_free(buf[0]);
    kl_mem_free(buf[1]);
    kl_mem_free(tmem);
    return KL_OK;
}
