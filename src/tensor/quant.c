/* Linear quantization kernels of ONNX QuantizeLinear / DequantizeLinear /
 * DynamicQuantizeLinear: float32 <-> int8/uint8 (and int32 -> float32), per
 * tensor or per axis, rounding half to even and saturating as the ONNX
 * reference does (x / scale in float32, rint, + zero point, clip), and the
 * quantized Add of the QDQ fusion (keel::QAdd). Parallel
 * over fixed blocks of elements: the results do not depend on the threads. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <immintrin.h>
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

/* ==================================================================
 * Quantized Add: the unfused DQ -> Add -> Q in float32
 * ================================================================== */

typedef struct {
    const void *a, *b;
    const float *f; /* the float sums (broadcast case), else NULL */
    void *y;
    int au, bu, yu;
    int32_t az, bz, yz, lo, hi;
    float as, bs, ys;
    int64_t n;
} qadd_ctx;

static inline int32_t q8_at(const void *p, int u, int64_t i) {
    return u ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

static void qadd_range(void *ctx, size_t b0, size_t b1, int chunk) {
    (void)chunk;
    const qadd_ctx *c = ctx;
    for (int64_t i = (int64_t)b0 * QBLOCK; i < KL_MIN(c->n, (int64_t)b1 * QBLOCK); i++) {
        float v = c->f
            ? c->f[i]
            : (float)(q8_at(c->a, c->au, i) - c->az) * c->as + (float)(q8_at(c->b, c->bu, i) - c->bz) * c->bs;
        float q = rintf(v / c->ys) + (float)c->yz;
        int32_t r = q < (float)c->lo ? c->lo : q > (float)c->hi ? c->hi : (int32_t)q;
        if (c->yu) ((uint8_t *)c->y)[i] = (uint8_t)r;
        else ((int8_t *)c->y)[i] = (int8_t)r;
    }
}

#define Q512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* 16 bytes at p (uint8 or int8) as floats minus the zero point */
Q512 static inline __m512 q8_ps(const void *p, int u, int32_t z, __mmask16 m) {
    __m128i b = _mm_maskz_loadu_epi8(m, p);
    __m512i v = u ? _mm512_cvtepu8_epi32(b) : _mm512_cvtepi8_epi32(b);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(z)));
}

/* The same float operations as qadd_range, 16 elements at a time. */
Q512 static void qadd_range512(void *ctx, size_t b0, size_t b1, int chunk) {
    (void)chunk;
    const qadd_ctx *c = ctx;
    __m512 as = _mm512_set1_ps(c->as), bs = _mm512_set1_ps(c->bs), ys = _mm512_set1_ps(c->ys);
    __m512 yz = _mm512_set1_ps((float)c->yz), lo = _mm512_set1_ps((float)c->lo), hi = _mm512_set1_ps((float)c->hi);
    int64_t end = KL_MIN(c->n, (int64_t)b1 * QBLOCK);
    for (int64_t i = (int64_t)b0 * QBLOCK; i < end; i += 16) {
        __mmask16 m = end - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (end - i)) - 1);
        __m512 v;
        if (c->f) v = _mm512_maskz_loadu_ps(m, c->f + i);
        else
            v = _mm512_add_ps(_mm512_mul_ps(q8_ps((const uint8_t *)c->a + i, c->au, c->az, m), as),
                              _mm512_mul_ps(q8_ps((const uint8_t *)c->b + i, c->bu, c->bz, m), bs));
        __m512 q = _mm512_add_ps(
            _mm512_roundscale_ps(_mm512_div_ps(v, ys), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), yz);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
        _mm_mask_storeu_epi8((uint8_t *)c->y + i, m, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q)));
    }
}

void kl_qadd(const void *a, int au, int32_t az, float as, const void *b, int bu, int32_t bz, float bs, const float *sum,
             void *y, int yu, int32_t yz, float ys, int32_t lo, int32_t hi, int64_t n, kl_pool *pool) {
    qadd_ctx c = {a, b, sum, y, au, bu, yu, az, bz, yz, lo, hi, as, bs, ys, n};
    if (n <= 0) return;
    kl_pool_parallel_for(pool, (size_t)((n + QBLOCK - 1) / QBLOCK), 1,
                         kl_qgemm_level() == 2 ? qadd_range512 : qadd_range, &c);
}
