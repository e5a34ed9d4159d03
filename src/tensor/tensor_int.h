/* Private helpers shared by the tensor kernels: block sizes, AVX2 vector math
 * (exp, tanh, erf, sigmoid) with scalar twins that give the same results. */
#ifndef KEEL_TENSOR_INT_H
#define KEEL_TENSOR_INT_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "keel/tensor.h"

/* Block sizes independent of the thread count: work items for parallel_for. */
#define KL__ELEM_BLOCK 8192
/* Internal rank limit of the strided copier (tile needs 2 * KL_MAX_DIMS). */
#define KL__MAX_COPY_DIMS (2 * KL_MAX_DIMS)

/* ==================================================================
 * Vector math (Cephes-style exp, rational tanh/erf as in Eigen)
 * The scalar versions run the same 8-lane code on a broadcast value so
 * every element gets identical results whatever its position.
 * ================================================================== */

static inline __m256 kl__exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365478515625f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), x0 = x;
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
    fx = _mm256_floor_ps(fx);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, z, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_cvttps_epi32(fx);
    n = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(n));
    /* below the normal range: exp underflows to (almost) 0; keep it exact 0 */
    y = _mm256_andnot_ps(under, y);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), over);
    return _mm256_blendv_ps(y, x0, nan);
}

static inline __m256 kl__sigmoid256(__m256 x) {
    __m256 e = kl__exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 kl__tanh256(__m256 a) {
    /* tanh(x) = sign(x) * (1 - 2 / (exp(2|x|) + 1)) for |x| >= 0.5; odd
     * Taylor polynomial to x^15 (error < 1e-8 relative) below. */
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, a);
    __m256 s = _mm256_and_ps(sign, a);
    __m256 e = kl__exp256(_mm256_mul_ps(_mm256_min_ps(ax, _mm256_set1_ps(20.0f)), _mm256_set1_ps(2.0f)));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    __m256 x2 = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(-0.00145583438705131826f);            /* x^15 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.00359212803657248102f));  /* x^13 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.00886323552990219656f)); /* x^11 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.0218694885361552028f));   /* x^9 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.0539682539682539683f));  /* x^7 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.133333333333333333f));    /* x^5 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.333333333333333333f));
    p = _mm256_mul_ps(p, x2);
    __m256 small = _mm256_fmadd_ps(p, a, a);
    __m256 m = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
    __m256 r = _mm256_blendv_ps(_mm256_or_ps(big, s), small, m);
    /* NaN in -> NaN out */
    return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

static inline __m256 kl__erf256(__m256 a) {
    /* Rational approximation on [-4, 4] (Eigen / TensorFlow fast erf). */
    __m256 x = _mm256_min_ps(_mm256_max_ps(a, _mm256_set1_ps(-4.0f)), _mm256_set1_ps(4.0f));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-1.60960333262415e-02f));
    p = _mm256_mul_ps(x, p);
    __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.42647390514189e-02f));
    __m256 r = _mm256_div_ps(p, q);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-1.0f)), _mm256_set1_ps(1.0f));
    /* |erf| rounds to 1 in float beyond ~3.86: return exactly +-1 there */
    __m256 sat = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a), _mm256_set1_ps(3.86f), _CMP_GE_OQ);
    r = _mm256_blendv_ps(r, _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(_mm256_set1_ps(-0.0f), a)), sat);
    return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

static inline float kl__exp1(float x) { return _mm256_cvtss_f32(kl__exp256(_mm256_set1_ps(x))); }
static inline float kl__tanh1(float x) { return _mm256_cvtss_f32(kl__tanh256(_mm256_set1_ps(x))); }
static inline float kl__erf1(float x) { return _mm256_cvtss_f32(kl__erf256(_mm256_set1_ps(x))); }
static inline float kl__sigmoid1(float x) { return _mm256_cvtss_f32(kl__sigmoid256(_mm256_set1_ps(x))); }

/* Loads/stores n < 8 floats (tail handling with a mask). */
static inline __m256i kl__tailmask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Applies a fused activation to n floats (serial; callers parallelise). */
void kl__act_apply_range(kl_act act, float *y, int64_t n);

/* Row-sum of n floats in a fixed order (8 lanes x 4 accumulators). */
float kl__sum_f32(const float *x, int64_t n);

/* GEMM (beta 0) with bias per column, or per row when bias_rows, then act. */
void kl__gemm_ex(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float *C, int64_t ldc, const float *bias, int bias_rows, kl_act act, kl_pool *pool);
void kl__gemm_serial(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int bias_rows,
                     kl_act act);

/* Depthwise 2-D conv (dwconv.c): p->nsp == 2, group == C == M, already
 * prepared; bias (C) may be NULL; p->residual must be NULL. */
void kl__dwconv2d_f32(const kl_conv_params *p, const float *x, const float *w, const float *bias, float *y,
                      kl_pool *pool);

/* ==================================================================
 * Packed SGEMM (pgemm.c): keel's AVX-512 micro-kernel, MR x NR blocks
 * ================================================================== */

#define KL__MR 8
#define KL__NR 32
#define KL__KC 256   /* k rows per block (packed A is k-block major) */

typedef struct kl__pgemm {
    int64_t M, N, K;
    const float *ap;             /* A packed (k-block major, see kl__pgemm_pack_a) or NULL: raw a, lda */
    const float *a;
    int64_t lda;
    const float *bp;             /* B packed ([N/NR][K][NR]) or NULL: raw b, ldb */
    const float *b;
    int64_t ldb;
    const int32_t *boff;         /* with ap: B(k, j) at b[boff[k] + j] (implicit-GEMM conv) */
    float *c;
    int64_t ldc;
    const float *bias;           /* per column (N), or per row (M) when bias_rows; may be NULL */
    int bias_rows;
    const float *res;            /* residual added before act (M x N, ldr); may be NULL */
    int64_t ldr;
    kl_act act;
    /* column segments (only kl__pgemm_kblock): > 0: column j of C and R lies
     * at + (j / cseg) * cskip (a batch of images side by side in one GEMM);
     * only the first cvalid (0: all) columns of a segment are written (the
     * padded-width grid of an implicit-GEMM conv, cskip = OW - WP) */
    int64_t cseg, cskip, cvalid;
} kl__pgemm;

/* 1 when the CPU has AVX-512F (and KEEL_NO_AVX512 is unset): the packed paths run. */
int kl__pgemm_ok(void);
/* The vector level of the kernels that have all three (unary.c): 2 AVX-512F
 * (kl__pgemm_ok), 1 AVX2+FMA, 0 scalar; never above kl__isa_force when that
 * is >= 0 (tests force each level; -1 = the CPU's). */
extern int kl__isa_force;
int kl__isa_level(void);
size_t kl__pgemm_packed_a_floats(int64_t M, int64_t K);
size_t kl__pgemm_packed_b_floats(int64_t K, int64_t N);
/* Element (i,k) of A at a[i*rs + k*ks]; (k,j) of B at b[k*rs + j*cs]. */
void kl__pgemm_pack_a(int64_t M, int64_t K, const float *a, int64_t rs, int64_t ks, float *dst);
void kl__pgemm_pack_b(int64_t K, int64_t N, const float *b, int64_t rs, int64_t cs, float *dst);
/* Runs C = A B + epilogue over fixed tiles (serial: in the caller's thread). */
void kl__pgemm_run(const kl__pgemm *g, kl_pool *pool, int serial);

/* One k block of a rectangle of C with B packed for that block only (conv tiles
 * pack their own input patch): see pgemm.c. */
void kl__pgemm_kblock(const kl__pgemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k0, int64_t kc,
                      const float *bblk, int64_t pstride);

/* ==================================================================
 * NCHWc depthwise and pointwise kernels (nchwc_dw.c, nchwc_pw.c),
 * AVX-512F only (callers check kl_nchwc_ok), called by the blocked-conv
 * dispatcher (nchwc_conv.c). x, y, p->residual blocked (N, ceil(C/16), H,
 * W, 16); bias (M) or NULL; p prepared (p->out set), p->packed_w from the
 * matching _pack. Deterministic at any thread count.
 * ================================================================== */

/* _ok, _packed_floats and _pack read only the weight shape (nsp, C, M,
 * group, k), as kl_nchwc_conv_packed_floats. plain_input: x is plain NCHW
 * (N, C, H, W) (the first conv of a network; a slow generic path).
 * Depthwise: nsp 2, group == C == M; any kernel, stride, pads, dilation.
 * Packed weights [ceil(C/16)][KH*KW][16]. */
int kl__nchwc_dw_ok(const kl_conv_params *p);
size_t kl__nchwc_dw_packed_floats(const kl_conv_params *p);
void kl__nchwc_dw_pack(const kl_conv_params *p, const float *w, float *dst);
void kl__nchwc_dw_f32(const kl_conv_params *p, int plain_input, const float *x, const float *bias, float *y,
                      kl_pool *pool);

/* Pointwise: nsp 2, 1x1, group 1: the register-blocked kernel for strides 1
 * and 2 without pads, a generic path for pads, other strides, plain input.
 * Packed weights ceil(M/16) * C * 16 floats (groups of up to 4 output
 * blocks, [C][nb][16]). */
int kl__nchwc_pw_ok(const kl_conv_params *p);
size_t kl__nchwc_pw_packed_floats(const kl_conv_params *p);
void kl__nchwc_pw_pack(const kl_conv_params *p, const float *w, float *dst);
void kl__nchwc_pw_f32(const kl_conv_params *p, int plain_input, const float *x, const float *bias, float *y,
                      kl_pool *pool);

/* The register tiles of kl__nchwc_fma_cblocks that the 1x1 kernel and the
 * Winograd GEMM instantiate: F output blocks x P positions with F*P + F + 1
 * <= 32 zmm registers; X(F, P) for each, and the most P for each F. */
#define KL__NCHWC_TILES(X)                                                                                    \
    X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(1, 5) X(1, 6) X(1, 7) X(1, 8) X(1, 9) X(1, 10) X(1, 11) X(1, 12)        \
    X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(2, 5) X(2, 6) X(2, 7) X(2, 8) X(2, 9) X(2, 10) X(2, 11) X(2, 12)        \
    X(3, 1) X(3, 2) X(3, 3) X(3, 4) X(3, 5) X(3, 6) X(3, 7) X(3, 8)                                           \
    X(4, 1) X(4, 2) X(4, 3) X(4, 4) X(4, 5) X(4, 6)
static const int kl__nchwc_pmax[5] = {0, 12, 12, 8, 6};

/* NaN and the AVX min/max instructions: MAXPS/MINPS return their second
 * operand when either is NaN. Activations put the input second
 * (max(zero, x), min(hi, max(lo, x))) so that a NaN comes through, as ONNX
 * and NumPy define Relu/Clip. A running max (pools) must keep a NaN from
 * either side: kl__max_nan512(acc, v) is acc once acc is NaN, v when v is
 * NaN, else max(acc, v). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 kl__max_nan512(__m512 acc, __m512 v) {
    return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

/* The reduction of the blocked 1x1 conv (nchwc_pw.c) and of the Winograd
 * GEMM (nchwc_wino.c): acc[f][q] += sum over c < C of x[c][q] * w[c][f] for F
 * output blocks x P positions (compile-time, F <= 4, P <= 12). x: blocked
 * input, channel blocks xcs floats apart, positions xs floats apart within a
 * block; w: [C][F][16]. One input channel: F weight loads, P broadcasts, F*P
 * FMAs, in channel order (deterministic). */
__attribute__((target("avx512f"), always_inline)) static inline void
kl__nchwc_fma_cblocks(__m512 acc[4][12], const float *x, int64_t xcs, const int xs, const float *w, int64_t C,
                      const int F, const int P) {
    for (int64_t c0 = 0; c0 < C; c0 += KL_NCHWC, x += xcs) {
        int nl = (int)(C - c0 < KL_NCHWC ? C - c0 : KL_NCHWC);
        const float *xl = x;
#pragma GCC unroll 4
        for (int l = 0; l < nl; l++, xl++, w += F * KL_NCHWC) {
            __m512 wv[4];
#pragma GCC unroll 4
            for (int f = 0; f < F; f++) wv[f] = _mm512_loadu_ps(w + f * KL_NCHWC);
#pragma GCC unroll 12
            for (int q = 0; q < P; q++) {
                __m512 xb = _mm512_set1_ps(xl[q * xs]);
#pragma GCC unroll 4
                for (int f = 0; f < F; f++) acc[f][q] = _mm512_fmadd_ps(xb, wv[f], acc[f][q]);
            }
        }
    }
}

/* Winograd F(4x4, 3x3) (nchwc_wino.c): dense 3x3 stride-1 dilation-1 convs
 * (any pads, C, M) on blocked input. _ok/_packed_floats/_pack read the
 * weight shape and stride/dilation (zero taken as 1); _ok is 0 for every
 * conv when KEEL_WINO=0 (kl_settings.wino_pack: no Winograd form packed).
 * Packed weights [groups of up to 4 output blocks][36][C][nb][16]. _use: the
 * dispatcher takes this path for p (shape rule; kl_settings.wino_use
 * overrides: -1 auto, 0 never, 1 always). _workspace_bytes: from p's
 * prepared shape. U: the packed weights. Deterministic at any thread count. */
/* Slots of V + Mt kl__nchwc_wino_workspace_bytes provides in slot mode
 * (more chunks allocate their own; tests lower it). */
extern int kl__nchwc_wino_slots;
int kl__nchwc_wino_ok(const kl_conv_params *p);
size_t kl__nchwc_wino_packed_floats(const kl_conv_params *p);
void kl__nchwc_wino_pack(const kl_conv_params *p, const float *w, float *dst);
int kl__nchwc_wino_use(const kl_conv_params *p, int plain_input);
size_t kl__nchwc_wino_workspace_bytes(const kl_conv_params *p);
int kl__nchwc_wino_f32(const kl_conv_params *p, const float *x, const float *bias, const float *U, float *y, void *ws,
                       kl_pool *pool, kl_err *e);

/* kl_qgemm, where a_padded says every row of A holds round4(K) readable
 * bytes at stride lda (a multiple of 4; the bytes past K may be anything):
 * then uint8 A is read in place (qconv.c's im2col rows). */
int kl__qgemm(int64_t M, int64_t N, int64_t K, const void *a, int a_unsigned, int64_t lda, int a_padded, int32_t za,
              const void *packed_b, const void *zb, int zb_per_col, const kl_qgemm_out *o, kl_pool *pool, kl_err *e);

/* 1: int8 depthwise convs always take the direct int16 kernel (tests run
 * both paths), else the exact float path where its taps allow (qconv.c). */
extern int kl__qconv_dw_direct;

#endif
