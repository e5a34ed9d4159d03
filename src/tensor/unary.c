/* Unary float32 kernels (activations, exp/log/erf/tanh/..., Pow with a
 * constant exponent), PRelu and the fused-activation entry points. The math
 * is written once (vmath.h, unary_impl.h) and instantiated for AVX-512,
 * AVX2 and scalar code; kl__isa_level() (pgemm.c, the one CPU dispatch)
 * picks the level per call. All levels give bit-identical results. Work is
 * split into fixed blocks of KL__ELEM_BLOCK elements, so results never
 * depend on the thread count. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>
#include <string.h>

static const char *const UN_NAMES[KL_UN_COUNT] = {
    "identity", "relu", "leaky_relu", "sigmoid", "tanh", "exp", "log", "sqrt", "neg", "abs",
    "reciprocal", "erf", "gelu", "gelu_tanh", "hardsigmoid", "hardswish", "clip", "floor", "ceil",
    "round", "sign", "sin", "cos", "softplus", "elu", "selu", "square", "silu", "mish", "celu", "softsign", "pow",
};

const char *kl_unary_name(kl_unary_op op) {
    return (unsigned)op < KL_UN_COUNT ? UN_NAMES[op] : "invalid";
}

/* Internal ops a KL_UN_POW resolves to (by its exponent). */
enum { KL__UN_POW_ONE = KL_UN_COUNT + 1, KL__UN_POW_CUBE, KL__UN_POW_HALF, KL__UN_POW_RSQRT, KL__UN_POW_GEN,
       KL__UN_POW_LIBM };

typedef struct {
    int op;          /* kl_unary_op or KL__UN_POW_* */
    float a, b;
    int odd, integral; /* KL__UN_POW_GEN: the exponent is an odd integer / an integer */
} kl__un_plan;

/* The ops with no vector form, per element with libm (any level). */
static void kl__un_libm(const kl__un_plan *p, const float *x, float *y, int64_t n) {
    switch (p->op) {
    case KL_UN_SIN: for (int64_t i = 0; i < n; i++) y[i] = sinf(x[i]); return;
    case KL_UN_COS: for (int64_t i = 0; i < n; i++) y[i] = cosf(x[i]); return;
    case KL__UN_POW_LIBM: for (int64_t i = 0; i < n; i++) y[i] = powf(x[i], p->a); return;
    default: for (int64_t i = 0; i < n; i++) y[i] = NAN; return;
    }
}

/* ---------------------------------------------------------------- AVX-512 */
#define V __m512
#define M __mmask16
#define VM_FN(name) kl__v16_##name
#define VM_ATTR __attribute__((target("avx512f"), always_inline)) static inline
#define VM_ATTR_OUTER __attribute__((target("avx512f")))
#define VI_(a) _mm512_castps_si512(a)
#define VF_(a) _mm512_castsi512_ps(a)
#define VSET(c) _mm512_set1_ps(c)
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VFMA _mm512_fmadd_ps
#define VFNMA _mm512_fnmadd_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VSQRT _mm512_sqrt_ps
#define VRINT(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VFLOOR(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define VCEIL(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
#define VAND(a, b) VF_(_mm512_and_si512(VI_(a), VI_(b)))
#define VOR(a, b) VF_(_mm512_or_si512(VI_(a), VI_(b)))
#define VXOR(a, b) VF_(_mm512_xor_si512(VI_(a), VI_(b)))
#define VANDNOT(a, b) VF_(_mm512_andnot_si512(VI_(a), VI_(b)))
#define MLT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define MLE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ)
#define MGT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define MGE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define MEQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define MNAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define MOR(a, b) ((__mmask16)((a) | (b)))
#define MAND(a, b) ((__mmask16)((a) & (b)))
#define VSEL(m, t, f) _mm512_mask_blend_ps(m, f, t)
#define VPOW2N(n)     VF_(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define VEXPB(x)      _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_and_si512(VI_(x), _mm512_set1_epi32(0x7f800000)), 23))
#define VMANT1(x) \
    VF_(_mm512_or_si512(_mm512_and_si512(VI_(x), _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f800000)))
#define VW 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VLOADT(p, k) _mm512_maskz_loadu_ps((__mmask16)((1u << (k)) - 1), p)
#define VSTORET(p, k, v) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (k)) - 1), v)
#include "unary_impl.h"
#include "unary_undef.h"

/* ------------------------------------------------------------------- AVX2 */
#define V __m256
#define M __m256
#define VM_FN(name) kl__v8_##name
#define VM_ATTR __attribute__((target("avx2,fma"), always_inline)) static inline
#define VM_ATTR_OUTER __attribute__((target("avx2,fma")))
#define VI_(a) _mm256_castps_si256(a)
#define VF_(a) _mm256_castsi256_ps(a)
#define VSET(c) _mm256_set1_ps(c)
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VFMA _mm256_fmadd_ps
#define VFNMA _mm256_fnmadd_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VSQRT _mm256_sqrt_ps
#define VRINT(a) _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VFLOOR(a) _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define VCEIL(a) _mm256_round_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
#define VAND _mm256_and_ps
#define VOR _mm256_or_ps
#define VXOR _mm256_xor_ps
#define VANDNOT _mm256_andnot_ps
#define MLT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define MLE(a, b) _mm256_cmp_ps(a, b, _CMP_LE_OQ)
#define MGT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define MGE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define MEQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define MNAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define MOR _mm256_or_ps
#define MAND _mm256_and_ps
#define VSEL(m, t, f) _mm256_blendv_ps(f, t, m)
#define VPOW2N(n)     VF_(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define VEXPB(x)      _mm256_cvtepi32_ps(_mm256_srli_epi32(_mm256_and_si256(VI_(x), _mm256_set1_epi32(0x7f800000)), 23))
#define VMANT1(x) \
    VF_(_mm256_or_si256(_mm256_and_si256(VI_(x), _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f800000)))
#define VW 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VLOADT(p, k) _mm256_maskload_ps(p, kl__tailmask(k))
#define VSTORET(p, k, v) _mm256_maskstore_ps(p, kl__tailmask(k), v)
#include "unary_impl.h"
#include "unary_undef.h"

/* ----------------------------------------------------------------- scalar */
static inline uint32_t kl__fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float kl__bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline float kl__smin(float a, float b) { return a < b ? a : b; } /* MINPS: b unless a < b */
static inline float kl__smax(float a, float b) { return a > b ? a : b; }
#define V float
#define M int
#define VM_FN(name) kl__v1_##name
#define VM_ATTR static inline
#define VM_ATTR_OUTER
#define VSET(c) ((float)(c))
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMUL(a, b) ((a) * (b))
#define VDIV(a, b) ((a) / (b))
#define VFMA(a, b, c) fmaf(a, b, c)
#define VFNMA(a, b, c) fmaf(-(a), b, c)
#define VMIN kl__smin
#define VMAX kl__smax
#define VSQRT sqrtf
#define VRINT rintf
#define VFLOOR floorf
#define VCEIL ceilf
#define VAND(a, b) kl__bitsf(kl__fbits(a) & kl__fbits(b))
#define VOR(a, b) kl__bitsf(kl__fbits(a) | kl__fbits(b))
#define VXOR(a, b) kl__bitsf(kl__fbits(a) ^ kl__fbits(b))
#define VANDNOT(a, b) kl__bitsf(~kl__fbits(a) & kl__fbits(b))
#define MLT(a, b) ((a) < (b))
#define MLE(a, b) ((a) <= (b))
#define MGT(a, b) ((a) > (b))
#define MGE(a, b) ((a) >= (b))
#define MEQ(a, b) ((a) == (b))
#define MNAN(a) ((a) != (a))
#define MOR(a, b) ((a) | (b))
#define MAND(a, b) ((a) & (b))
#define VSEL(m, t, f) ((m) ? (t) : (f))
#define VPOW2N(n) kl__bitsf((uint32_t)((int32_t)(n) + 127) << 23)
#define VEXPB(x) ((float)((kl__fbits(x) & 0x7f800000u) >> 23))
#define VMANT1(x) kl__bitsf((kl__fbits(x) & 0x007fffffu) | 0x3f800000u)
#define VW 1
#define VLOAD(p) (*(p))
#define VSTORE(p, v) (*(p) = (v))
#define VLOADT(p, k) (*(p))
#define VSTORET(p, k, v) (*(p) = (v))
#include "unary_impl.h"

/* ================================================================== *
 * Dispatch
 * ================================================================== */

static kl__un_plan un_plan(kl_unary_op op, float a, float b) {
    kl__un_plan p = {(int)op, a, b, 0, 0};
    if (op != KL_UN_POW) return p;
    if (a == 1.0f) p.op = KL_UN_IDENTITY;
    else if (a == 0.0f) p.op = KL__UN_POW_ONE;
    else if (a == 2.0f) p.op = KL_UN_SQUARE;
    else if (a == 3.0f) p.op = KL__UN_POW_CUBE;
    else if (a == 0.5f) p.op = KL__UN_POW_HALF;
    else if (a == -0.5f) p.op = KL__UN_POW_RSQRT;
    else if (a == -1.0f) p.op = KL_UN_RECIPROCAL;
    else if (!isfinite(a)) p.op = KL__UN_POW_LIBM;
    else {
        p.op = KL__UN_POW_GEN;
        p.integral = floorf(a) == a;
        p.odd = p.integral && fabsf(a) < 16777216.0f && ((int64_t)a & 1);
    }
    return p;
}

static void un_run_plan(const kl__un_plan *p, const float *x, float *y, int64_t n) {
    switch (kl__isa_level()) {
    case 2: kl__v16_run(p, x, y, n); return;
    case 1: kl__v8_run(p, x, y, n); return;
    default: kl__v1_run(p, x, y, n); return;
    }
}

typedef struct {
    kl__un_plan p;
    const float *x;
    float *y;
    int64_t n;
} un_ctx;

static void un_range(void *vc, size_t b0, size_t b1, int chunk) {
    un_ctx *c = vc;
    int64_t i0 = (int64_t)b0 * KL__ELEM_BLOCK, i1 = KL_MIN((int64_t)b1 * KL__ELEM_BLOCK, c->n);
    if (i1 > i0) un_run_plan(&c->p, c->x + i0, c->y + i0, i1 - i0);
}

void kl_unary_f32(kl_unary_op op, const float *x, float *y, int64_t n, float a, float b, kl_pool *pool) {
    if (n <= 0) return;
    un_ctx c = {un_plan(op, a, b), x, y, n};
    size_t nb = (size_t)((n + KL__ELEM_BLOCK - 1) / KL__ELEM_BLOCK);
    if (nb == 1) un_range(&c, 0, 1, 0);
    else kl_pool_parallel_for(pool, nb, 1, un_range, &c);
}

void kl_unary_row_f32(kl_unary_op op, const float *x, float *y, int64_t n, float a, float b) {
    if (n <= 0) return;
    kl__un_plan p = un_plan(op, a, b);
    un_run_plan(&p, x, y, n);
}

void kl_prelu_f32(const float *x, int64_t sx, const float *slope, int64_t ss, float *y, int64_t n) {
    switch (kl__isa_level()) {
    case 2: kl__v16_prelu(x, sx, slope, ss, y, n); return;
    case 1: kl__v8_prelu(x, sx, slope, ss, y, n); return;
    default: kl__v1_prelu(x, sx, slope, ss, y, n); return;
    }
}

/* ================================================================== *
 * Fused activations
 * ================================================================== */

static kl_unary_op act_op(kl_act_kind k) {
    switch (k) {
    case KL_ACT_RELU: return KL_UN_RELU;
    case KL_ACT_CLIP: return KL_UN_CLIP;
    case KL_ACT_LEAKY_RELU: return KL_UN_LEAKY_RELU;
    case KL_ACT_SIGMOID: return KL_UN_SIGMOID;
    case KL_ACT_TANH: return KL_UN_TANH;
    case KL_ACT_HARDSWISH: return KL_UN_HARDSWISH;
    case KL_ACT_GELU: return KL_UN_GELU;
    default: return KL_UN_IDENTITY;
    }
}

/* serial: element results do not depend on the split */
void kl__act_apply_range(kl_act act, float *y, int64_t n) {
    if (act.kind == KL_ACT_NONE) return;
    kl_unary_row_f32(act_op(act.kind), y, y, n, act.a, act.b);
}

void kl_act_apply_f32(kl_act act, float *y, int64_t n, kl_pool *pool) {
    if (act.kind == KL_ACT_NONE) return;
    kl_unary_f32(act_op(act.kind), y, y, n, act.a, act.b, pool);
}
