/* Linear quantization kernels of ONNX QuantizeLinear / DequantizeLinear /
 * DynamicQuantizeLinear: float32 <-> int8/uint8 (and int32 -> float32), per
 * tensor or per axis, rounding half to even and saturating as the ONNX
 * reference does (x / scale in float32, rint, + zero point, clip). Parallel
 * over fixed blocks of elements: the results do not depend on the threads. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>

/* Elements per work item. */
#define QBLOCK 16384

typedef struct {
    const void *x;
    void *y;
    kl_dtype dt;
    int64_t len, inner, n;
    const float *scale;
    const void *zp;
    int per_axis;
} qctx;

static inline int32_t zp_at(const void *zp, kl_dtype dt, int64_t i) {
    if (!zp) return 0;
    switch (dt) {
    case KL_I8: return ((const int8_t *)zp)[i];
    case KL_U8: return ((const uint8_t *)zp)[i];
    default: return ((const int32_t *)zp)[i];
    }
}

/* The parameter index of flat element i. */
static inline int64_t param_of(const qctx *c, int64_t i) { return c->per_axis ? i / c->inner % c->len : 0; }

/* saturate(rint(v / s) + zp) in float32, as numpy's clip(rint(x / s) + zp) */
static inline int32_t quant1(float v, float s, int32_t zp, int32_t lo, int32_t hi) {
    float q = rintf(v / s) + (float)zp;
    if (q != q) return zp; /* NaN */
    if (q < (float)lo) return lo;
    if (q > (float)hi) return hi;
    return (int32_t)q;
}

static void quant_range(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const qctx *c = ctx;
    const float *x = c->x;
    int64_t i0 = (int64_t)b * QBLOCK, i1 = KL_MIN(c->n, (int64_t)e * QBLOCK);
    int s8 = c->dt == KL_I8;
    int32_t lo = s8 ? -128 : 0, hi = s8 ? 127 : 255;
    for (int64_t i = i0; i < i1;) {
        /* a run of elements sharing one parameter */
        int64_t p = param_of(c, i), end = c->per_axis ? KL_MIN(i1, (i / c->inner + 1) * c->inner) : i1;
        float s = c->scale[p];
        int32_t z = zp_at(c->zp, c->dt, p);
        if (s8)
            for (int64_t j = i; j < end; j++) ((int8_t *)c->y)[j] = (int8_t)quant1(x[j], s, z, lo, hi);
        else
            for (int64_t j = i; j < end; j++) ((uint8_t *)c->y)[j] = (uint8_t)quant1(x[j], s, z, lo, hi);
        i = end;
    }
}

void kl_quantize_f32(const float *x, int64_t outer, int64_t len, int64_t inner, const float *scale, const void *zp,
                     int per_axis, kl_dtype dt, void *y, kl_pool *pool) {
    KL_ASSERT(dt == KL_I8 || dt == KL_U8);
    qctx c = {x, y, dt, len, inner, outer * len * inner, scale, zp, per_axis};
    if (c.n <= 0) return;
    kl_pool_parallel_for(pool, (size_t)((c.n + QBLOCK - 1) / QBLOCK), 1, quant_range, &c);
}

static void dequant_range(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const qctx *c = ctx;
    float *y = c->y;
    int64_t i0 = (int64_t)b * QBLOCK, i1 = KL_MIN(c->n, (int64_t)e * QBLOCK);
    for (int64_t i = i0; i < i1;) {
        int64_t p = param_of(c, i), end = c->per_axis ? KL_MIN(i1, (i / c->inner + 1) * c->inner) : i1;
        float s = c->scale[p];
        int32_t z = zp_at(c->zp, c->dt, p);
        /* (x - zp) is exact in float for 8-bit x; int32 x as the reference's int32 difference */
        switch (c->dt) {
        case KL_I8:
            for (int64_t j = i; j < end; j++) y[j] = (float)(((const int8_t *)c->x)[j] - z) * s;
            break;
        case KL_U8:
            for (int64_t j = i; j < end; j++) y[j] = (float)(((const uint8_t *)c->x)[j] - z) * s;
            break;
        default:
            for (int64_t j = i; j < end; j++)
                y[j] = (float)((double)(int32_t)((uint32_t)((const int32_t *)c->x)[j] - (uint32_t)z) * s);
            break;
        }
        i = end;
    }
}

void kl_dequantize_f32(const void *x, kl_dtype dt, int64_t outer, int64_t len, int64_t inner, const float *scale,
                       const void *zp, int per_axis, float *y, kl_pool *pool) {
    KL_ASSERT(dt == KL_I8 || dt == KL_U8 || dt == KL_I32);
    qctx c = {x, y, dt, len, inner, outer * len * inner, scale, zp, per_axis};
    if (c.n <= 0) return;
    kl_pool_parallel_for(pool, (size_t)((c.n + QBLOCK - 1) / QBLOCK), 1, dequant_range, &c);
}

void kl_dynamic_quant_params(const float *x, int64_t n, float *scale, uint8_t *zp) {
    float mn = 0.0f, mx = 0.0f; /* the range always includes 0 */
    for (int64_t i = 0; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    float s = (mx - mn) / 255.0f;
    *scale = s;
    if (!(s > 0.0f) || isinf(s)) {
        *zp = 0;
        return;
    }
    *zp = (uint8_t)quant1(-mn, s, 0, 0, 255); /* rint(0 - min / scale), saturated */
}
