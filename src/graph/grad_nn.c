/* Training paths of the NN operators: the float64 forward of Conv,
 * MaxPool, AveragePool, GlobalAveragePool, BatchNormalization and
 * LayerNormalization (finite-difference checks; ops_nn.c branches here on
 * the dtype), BatchNormalization in training mode (f32 and f64), and their
 * gradient ops in ai.keel.grad: ConvGrad, MaxPoolGrad, AveragePoolGrad,
 * GlobalAveragePoolGrad, BatchNormalizationGrad, LayerNormalizationGrad.
 * Kernels: grad_nn_gen.h. */
#include "graph/grad_int.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Geometry of a conv / pool over 1-3 spatial dims (missing dims are 1). */
typedef struct {
    int nsp;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
    int64_t isz, osz, ksz;
    int cip;            /* AveragePool count_include_pad */
} geo;

#include <immintrin.h>

/* 2x2/2 max-pool backward, 8 windows per step (AVX2): deinterleave the two
 * input rows, pick the first maximum (NaN wins) with compares and blends,
 * write the 4 cells of each window. Returns the windows done. */
static int64_t maxpool2_simd_core(const float *r0, const float *r1, const float *dy, float *w0, float *w1, int64_t OW, int relu, int tail) {
    int64_t ow = 0;
    for (; ow + 8 <= OW; ow += 8) {
        __m256 x0 = _mm256_loadu_ps(r0 + 2 * ow), x1 = _mm256_loadu_ps(r0 + 2 * ow + 8);
        __m256 y0 = _mm256_loadu_ps(r1 + 2 * ow), y1 = _mm256_loadu_ps(r1 + 2 * ow + 8);
        __m256 a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x0, x1, 0x88)), 0xD8));
        __m256 b = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(x0, x1, 0xDD)), 0xD8));
        __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(y0, y1, 0x88)), 0xD8));
        __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(y0, y1, 0xDD)), 0xD8));
        __m256 g = _mm256_loadu_ps(dy + ow);
        __m256 mb = _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
        __m256 m1 = _mm256_blendv_ps(a, b, mb);
        __m256 mc = _mm256_or_ps(_mm256_cmp_ps(c, m1, _CMP_GT_OQ), _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
        __m256 m2 = _mm256_blendv_ps(m1, c, mc);
        __m256 me = _mm256_or_ps(_mm256_cmp_ps(e, m2, _CMP_GT_OQ), _mm256_cmp_ps(e, e, _CMP_UNORD_Q));
        if (relu) g = _mm256_and_ps(g, _mm256_cmp_ps(_mm256_blendv_ps(m2, e, me), _mm256_setzero_ps(), _CMP_GT_OQ));
        __m256 s3 = me, s2 = _mm256_andnot_ps(me, mc), s1 = _mm256_andnot_ps(_mm256_or_ps(me, mc), mb);
        __m256 s0 = _mm256_andnot_ps(_mm256_or_ps(_mm256_or_ps(me, mc), mb), _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
        __m256 ga = _mm256_and_ps(s0, g), gb = _mm256_and_ps(s1, g), gc = _mm256_and_ps(s2, g), ge = _mm256_and_ps(s3, g);
        __m256 lo = _mm256_unpacklo_ps(ga, gb), hi = _mm256_unpackhi_ps(ga, gb);
        _mm256_storeu_ps(w0 + 2 * ow, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(w0 + 2 * ow + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        lo = _mm256_unpacklo_ps(gc, ge);
        hi = _mm256_unpackhi_ps(gc, ge);
        _mm256_storeu_ps(w1 + 2 * ow, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(w1 + 2 * ow + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    if (ow < OW && !tail) { /* the last < 8 windows through a zero-padded copy */
        float a0[16] = {0}, a1[16] = {0}, g[8] = {0}, b0[16], b1[16];
        int64_t r = OW - ow;
        memcpy(a0, r0 + 2 * ow, sizeof(float) * (size_t)(2 * r));
        memcpy(a1, r1 + 2 * ow, sizeof(float) * (size_t)(2 * r));
        memcpy(g, dy + ow, sizeof(float) * (size_t)r);
        maxpool2_simd_core(a0, a1, g, b0, b1, 8, relu, 1);
        memcpy(w0 + 2 * ow, b0, sizeof(float) * (size_t)(2 * r));
        memcpy(w1 + 2 * ow, b1, sizeof(float) * (size_t)(2 * r));
        ow = OW;
    }
    return ow;
}
static int64_t maxpool2_simd_f32(const float *r0, const float *r1, const float *dy, float *w0, float *w1, int64_t OW, int relu) {
    return maxpool2_simd_core(r0, r1, dy, w0, w1, OW, relu, 0);
}

#define R float
#define FN(x) x##_f32
#define DT KL_F32
#define MAXPOOL2_SIMD maxpool2_simd_f32
#include "graph/grad_nn_gen.h"
#undef MAXPOOL2_SIMD
#undef R
#undef FN
#undef DT
#define R double
#define FN(x) x##_f64
#define DT KL_F64
#define MAXPOOL2_SIMD(r0, r1, dy, w0, w1, OW, relu) 0
#include "graph/grad_nn_gen.h"
#undef MAXPOOL2_SIMD
#undef R
#undef FN
#undef DT

/* ================================================================== *
 * Geometry from attributes
 * ================================================================== */

/* Parsed with the spatial dims at 0..nsp-1; moved to the END of the 3 slots
 * (leading dims of size 1) so the kernels' innermost loop runs along the
 * last spatial dim (contiguous rows). */
static void geo_finish(geo *p) {
    int off = 3 - p->nsp;
    int64_t *arr[7] = {p->in, p->k, p->s, p->d, p->pb, p->pe, p->out};
    for (int a = 0; a < 7; a++) {
        for (int i = p->nsp - 1; i >= 0; i--) arr[a][i + off] = arr[a][i];
        for (int i = 0; i < off; i++) arr[a][i] = (a == 4 || a == 5) ? 0 : 1;
    }
    p->isz = p->in[0] * p->in[1] * p->in[2];
    p->osz = p->out[0] * p->out[1] * p->out[2];
    p->ksz = p->k[0] * p->k[1] * p->k[2];
}

/* attrs strides/dilations/pads/auto_pad of n; k[] already set. */
static int geo_attrs(kl_gnode *n, geo *p, kl_err *e) {
    const kl_attr *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations"), *pd = kl_gnode_attr(n, "pads");
    int nsp = p->nsp;
    for (int i = 0; i < nsp; i++) {
        p->s[i] = st && st->n == nsp ? st->ints[i] : 1;
        p->d[i] = dl && dl->n == nsp ? dl->ints[i] : 1;
        p->pb[i] = pd && pd->n == 2 * nsp ? pd->ints[i] : 0;
        p->pe[i] = pd && pd->n == 2 * nsp ? pd->ints[i + nsp] : 0;
        if (p->s[i] <= 0 || p->d[i] <= 0 || p->k[i] <= 0 || p->pb[i] < 0 || p->pe[i] < 0)
            return kl__fail_node(e, n, KL_EINVAL, "kernel/strides/dilations must be positive, pads non-negative");
    }
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int i = 0; i < nsp; i++) kl_auto_pad(p->in[i], p->k[i], p->s[i], p->d[i], ap[5] == 'U', &p->pb[i], &p->pe[i]);
    else if (!strcmp(ap, "VALID"))
        for (int i = 0; i < nsp; i++) p->pb[i] = p->pe[i] = 0;
    return KL_OK;
}

/* Conv geometry from X (N, C, in...) and W (M, C/G, k...). */
static int conv_geo(kl_gnode *n, const kl_tensor *X, const kl_tensor *W, geo *p, kl_err *e) {
    memset(p, 0, sizeof *p);
    if (X->rank < 3 || X->rank > 5 || W->rank != X->rank)
        return kl__fail_node(e, n, KL_ESHAPE, "input rank %d / weight rank %d (need 3-5, equal)", X->rank, W->rank);
    p->nsp = X->rank - 2;
    p->N = X->dims[0]; p->C = X->dims[1]; p->M = W->dims[0];
    p->G = kl_gnode_attr_int(n, "group", 1);
    if (p->G <= 0 || p->C % p->G || p->M % p->G || W->dims[1] != p->C / p->G)
        return kl__fail_node(e, n, KL_ESHAPE, "channels %lld, weight %lldx%lld, group %lld do not match", (long long)p->C,
                             (long long)W->dims[0], (long long)W->dims[1], (long long)p->G);
    for (int i = 0; i < p->nsp; i++) { p->in[i] = X->dims[2 + i]; p->k[i] = W->dims[2 + i]; }
    int rc = geo_attrs(n, p, e);
    if (rc) return rc;
    for (int i = 0; i < p->nsp; i++) {
        int64_t span = p->in[i] + p->pb[i] + p->pe[i] - p->d[i] * (p->k[i] - 1) - 1;
        if (span < 0) return kl__fail_node(e, n, KL_ESHAPE, "kernel larger than the padded input");
        p->out[i] = span / p->s[i] + 1;
    }
    geo_finish(p);
    return KL_OK;
}

/* Pool geometry from X and kernel_shape (output sizes by kl_pooling_prepare:
 * ONNX rules incl. ceil_mode). GlobalAveragePool: kernel = input. */
static int pool_geo(kl_gnode *n, const kl_tensor *X, int global, geo *p, kl_err *e) {
    memset(p, 0, sizeof *p);
    if (X->rank < 3 || X->rank > 5) return kl__fail_node(e, n, KL_ESHAPE, "input rank %d (need 3-5)", X->rank);
    p->nsp = X->rank - 2;
    p->N = X->dims[0]; p->C = p->M = X->dims[1]; p->G = 1;
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape");
    if (!global && (!ks || ks->n != p->nsp)) return kl__fail_node(e, n, KL_EINVAL, "kernel_shape needs %d entries", p->nsp);
    for (int i = 0; i < p->nsp; i++) { p->in[i] = X->dims[2 + i]; p->k[i] = global ? p->in[i] : ks->ints[i]; }
    if (global) {
        for (int i = 0; i < p->nsp; i++) { p->s[i] = p->d[i] = 1; p->out[i] = 1; }
        p->cip = 1;
        geo_finish(p);
        return KL_OK;
    }
    int rc = geo_attrs(n, p, e);
    if (rc) return rc;
    kl_pooling_params pp;
    memset(&pp, 0, sizeof pp);
    pp.nsp = p->nsp; pp.N = p->N; pp.C = p->C;
    for (int i = 0; i < p->nsp; i++) {
        pp.in[i] = p->in[i]; pp.k[i] = p->k[i]; pp.stride[i] = p->s[i]; pp.dilation[i] = p->d[i];
        pp.pad_begin[i] = p->pb[i]; pp.pad_end[i] = p->pe[i];
    }
    pp.ceil_mode = (int)kl_gnode_attr_int(n, "ceil_mode", 0);
    p->cip = pp.count_include_pad = (int)kl_gnode_attr_int(n, "count_include_pad", 0);
    if ((rc = kl_pooling_prepare(&pp, e))) { char m[600]; snprintf(m, sizeof m, "%s", e ? e->msg : ""); return kl__fail_node(e, n, rc, "%s", m); }
    for (int i = 0; i < p->nsp; i++) p->out[i] = pp.out[i];
    geo_finish(p);
    return KL_OK;
}

/* (N, channels, out...) of rank nsp + 2. */
static void geo_out_dims(const geo *p, int64_t ch, int64_t *d) {
    d[0] = p->N;
    d[1] = ch;
    for (int i = 0; i < p->nsp; i++) d[2 + i] = p->out[3 - p->nsp + i];
}

static size_t conv_ws(const geo *p, size_t es) { return (size_t)((p->C * p->ksz + p->M) * p->N * p->osz) * es + 64; }

/* ================================================================== *
 * Fast float32 conv backward
 * dW: images in a fixed number of blocks (independent of the thread
 * count); per image an im2col that stays in cache and one GEMM with dy as
 * it lies (N, M, P), accumulated in image order into the block's partial;
 * the partials are summed in block order. dX: for stride 1 a forward conv
 * of dy with the flipped, transposed weights through keel's fast conv
 * kernel; otherwise GEMM + col2im per image block. dB: sums of dy.
 * ================================================================== */

#define CG_BLOCKS 8


static int64_t cg_blocks(const geo *p) { return p->N < CG_BLOCKS ? p->N : CG_BLOCKS; }
/* per block: cols, partial dW, then (packed kernel) packed cols^T of one
 * group and a dW_g temporary */
static size_t cg_pk(const geo *p) { return kl_gemm_packed_b_floats(p->osz, p->M / p->G); }
static size_t cg_cols(const geo *p) {
    size_t pk = cg_pk(p);
    return (size_t)(p->C * p->ksz * p->osz) + (pk ? pk + 16 + (size_t)(p->M / p->G * p->C / p->G * p->ksz) + 16 : 0);
}
static size_t cg_wsz(const geo *p) { return (size_t)(p->M * (p->C / p->G) * p->ksz); }

/* dX through the forward conv: stride 1, pads within d*(k-1). */
static int cg_dx_by_conv(const geo *p) {
    for (int i = 3 - p->nsp; i < 3; i++)
        if (p->s[i] != 1 || p->pb[i] > p->d[i] * (p->k[i] - 1) || p->pe[i] > p->d[i] * (p->k[i] - 1)) return 0;
    return 1;
}
static void cg_dx_params(const geo *p, kl_conv_params *q) {
    memset(q, 0, sizeof *q);
    q->nsp = p->nsp;
    q->N = p->N; q->C = p->M; q->M = p->C; q->group = p->G;
    for (int i = 0; i < p->nsp; i++) {
        int j = 3 - p->nsp + i;
        q->in[i] = p->out[j]; q->k[i] = p->k[j]; q->stride[i] = 1; q->dilation[i] = p->d[j];
        q->pad_begin[i] = p->d[j] * (p->k[j] - 1) - p->pb[j];
        q->pad_end[i] = p->d[j] * (p->k[j] - 1) - p->pe[j];
    }
}

static size_t al64(size_t x) { return (x + 63) & ~(size_t)63; }

/* Workspace bytes of conv_bwd_fast. */
static size_t cg_ws_bytes(const geo *p, int want_dx) {
    size_t nb = (size_t)cg_blocks(p);
    size_t w = nb * al64((cg_cols(p) + cg_wsz(p)) * sizeof(float));
    if (want_dx) {
        size_t d = 0;
        if (cg_dx_by_conv(p)) {
            kl_conv_params q;
            cg_dx_params(p, &q);
            kl_err e;
            if (kl_conv_prepare(&q, &e) == KL_OK) d = al64(cg_wsz(p) * sizeof(float)) + al64(kl_conv_workspace_bytes(&q));
            else d = nb * al64(cg_cols(p) * sizeof(float));
        } else {
            d = nb * al64(cg_cols(p) * sizeof(float));
        }
        if (d > w) w = d;
    }
    return w + 64;
}

typedef struct { const geo *p; const float *x, *w, *dy; float *dx; char *ws; int64_t per; kl_pool *pool; } cg_job;

static void cg_dw_blocks(void *ctx, size_t b0, size_t b1, int chunk) {
    const cg_job *j = ctx;
    const geo *p = j->p;
    int64_t Kg = p->C / p->G * p->ksz, Mg = p->M / p->G, P = p->osz;
    size_t stride = al64((cg_cols(p) + cg_wsz(p)) * sizeof(float));
    geo one = *p;
    one.N = 1;
    for (size_t b = b0; b < b1; b++) {
        float *cols = (float *)(j->ws + b * stride), *dwb = cols + cg_cols(p);
        int64_t n0 = (int64_t)b * j->per, n1 = KL_MIN(n0 + j->per, p->N);
        size_t pk = cg_pk(p);
        float *packed = cols + p->C * p->ksz * P, *tmp = packed + (pk ? pk + 16 : 0);
        packed = (float *)(((uintptr_t)packed + 63) & ~(uintptr_t)63);
        for (int64_t n = n0; n < n1; n++) {
            i2c_job_f32 ij = {&one, j->x + n * p->C * p->isz, cols, NULL};
            im2col_rows_f32(&ij, 0, (size_t)(p->C * p->ksz), 0);
            if (pk) { /* keel's packed kernel: dW_g^T (Kg x Mg) = cols_g (Kg x P) dy_g^T (P x Mg);
                       * packing dy_g^T (P x Mg) is smaller than cols_g^T */
                for (int64_t g = 0; g < p->G; g++) {
                    float *dst = dwb + g * Mg * Kg;
                    kl_gemm_pack_b(1, P, Mg, j->dy + (n * p->M + g * Mg) * P, P, packed);
                    kl_gemm_packed_f32(Kg, Mg, P, cols + g * Kg * P, P, packed, NULL, NULL, (kl_act){KL_ACT_NONE, 0, 0},
                                       n == n0 ? dst : tmp, Mg, j->pool);
                    if (n != n0)
                        for (int64_t i = 0; i < Mg * Kg; i++) dst[i] += tmp[i];
                }
                continue;
            }
            for (int64_t g = 0; g < p->G; g++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Mg, (int)Kg, (int)P, 1.f, j->dy + (n * p->M + g * Mg) * P, (int)P,
                            cols + g * Kg * P, (int)P, n == n0 ? 0.f : 1.f, dwb + g * Mg * Kg, (int)Kg);
        }
    }
}

static void cg_dx_blocks(void *ctx, size_t b0, size_t b1, int chunk) {
    const cg_job *j = ctx;
    const geo *p = j->p;
    int64_t Kg = p->C / p->G * p->ksz, Mg = p->M / p->G, P = p->osz;
    size_t stride = al64(cg_cols(p) * sizeof(float));
    geo one = *p;
    one.N = 1;
    for (size_t b = b0; b < b1; b++) {
        float *cols = (float *)(j->ws + b * stride);
        int64_t n0 = (int64_t)b * j->per, n1 = KL_MIN(n0 + j->per, p->N);
        for (int64_t n = n0; n < n1; n++) {
            for (int64_t g = 0; g < p->G; g++)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)Kg, (int)P, (int)Mg, 1.f, j->w + g * Mg * Kg, (int)Kg,
                            j->dy + (n * p->M + g * Mg) * P, (int)P, 0.f, cols + g * Kg * P, (int)P);
            i2c_job_f32 ij = {&one, NULL, cols, j->dx + n * p->C * p->isz};
            col2im_planes_f32(&ij, 0, (size_t)p->C, 0);
        }
    }
}

static int conv_bwd_fast(kl_gnode *n, const geo *p, const float *x, const float *w, const float *dy, float *dx, float *dw, float *db,
                         void *ws, kl_pool *pool, kl_err *e) {
    kl__blas_single();
    int64_t nb = cg_blocks(p), per = (p->N + nb - 1) / nb;
    nb = per ? (p->N + per - 1) / per : 0;
    cg_job j = {p, x, w, dy, dx, ws, per, pool};
    if (db) /* 8 lanes (vectorised), combined in a fixed order */
        for (int64_t m = 0; m < p->M; m++) {
            float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t i = 0; i < p->N; i++) {
                const float *r = dy + (i * p->M + m) * p->osz;
                int64_t k = 0;
                for (; k + 8 <= p->osz; k += 8)
                    for (int t = 0; t < 8; t++) l[t] += r[k + t];
                for (; k < p->osz; k++) l[k & 7] += r[k];
            }
            db[m] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        }
    if (dw && nb) {
        kl_pool_parallel_for(pool, (size_t)nb, 1, cg_dw_blocks, &j);
        size_t stride = al64((cg_cols(p) + cg_wsz(p)) * sizeof(float)) / sizeof(float);
        float *part = (float *)ws + cg_cols(p);
        int64_t wsz = (int64_t)cg_wsz(p);
        for (int64_t b = 1; b < nb; b++) /* block partials in block order */
            for (int64_t i = 0; i < wsz; i++) part[i] += part[b * (int64_t)stride + i];
        if (cg_pk(p)) { /* partials are dW_g^T (Kg x Mg) */
            int64_t Kg = p->C / p->G * p->ksz, Mg = p->M / p->G;
            for (int64_t g = 0; g < p->G; g++)
                for (int64_t k = 0; k < Kg; k++)
                    for (int64_t m = 0; m < Mg; m++) dw[(g * Mg + m) * Kg + k] = part[g * Mg * Kg + k * Mg + m];
        } else {
            memcpy(dw, part, sizeof(float) * (size_t)wsz);
        }
    }
    if (!dx || !nb) return KL_OK;
    if (cg_dx_by_conv(p)) {
        kl_conv_params q;
        cg_dx_params(p, &q);
        if (kl_conv_prepare(&q, e) == KL_OK) {
            /* W (M, C/G, k) -> W' (C, M/G, k) flipped */
            int64_t Cg = p->C / p->G, Mg = p->M / p->G, K = p->ksz;
            float *wt = ws;
            for (int64_t g = 0; g < p->G; g++)
                for (int64_t ml = 0; ml < Mg; ml++)
                    for (int64_t c = 0; c < Cg; c++) {
                        const float *src = w + ((g * Mg + ml) * Cg + c) * K;
                        float *dst = wt + ((g * Cg + c) * Mg + ml) * K;
                        for (int64_t k = 0; k < K; k++) dst[k] = src[K - 1 - k];
                    }
            void *cws = (char *)ws + al64(cg_wsz(p) * sizeof(float));
            int rc = kl_conv_f32(&q, dy, wt, NULL, dx, kl_conv_workspace_bytes(&q) ? cws : NULL, pool, e);
            if (rc) return kl__fail_node(e, n, rc, "input gradient conv failed");
            return KL_OK;
        }
    }
    kl_pool_parallel_for(pool, (size_t)nb, 1, cg_dx_blocks, &j);
    return KL_OK;
}

/* ================================================================== *
 * Float64 forward paths (called from ops_nn.c)
 * ================================================================== */

int kl__conv64_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    geo p;
    int rc;
    if ((rc = kl__same_dtype(n, in[0], "X", in[1], "W", e)) || (rc = conv_geo(n, in[0], in[1], &p, e))) return rc;
    if (n_in > 3 && in[3]) return kl__fail_node(e, n, KL_EUNSUPPORTED, "fused residual input in float64");
    if (kl_gnode_attr_int(n, "_act", 0)) return kl__fail_node(e, n, KL_EUNSUPPORTED, "fused activation in float64");
    if (n_in > 2 && in[2] && (in[2]->dtype != KL_F64 || kl_tensor_numel(in[2]) != p.M))
        return kl__fail_node(e, n, KL_ESHAPE, "bias must be float64 with %lld entries", (long long)p.M);
    int64_t d[5];
    geo_out_dims(&p, p.M, d);
    kl__set_shape(&out[0], KL_F64, p.nsp + 2, d);
    *ws = conv_ws(&p, sizeof(double));
    return KL_OK;
}
int kl__conv64_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    geo p;
    int rc = conv_geo(n, in[0], in[1], &p, e);
    if (rc) return rc;
    conv_fwd_f64(&p, in[0]->data, in[1]->data, n_in > 2 && in[2] ? in[2]->data : NULL, out[0]->data, x->ws, x->pool);
    return KL_OK;
}

int kl__pool64_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    geo p;
    int global = !strncmp(n->op_type, "Global", 6), rc;
    if ((rc = pool_geo(n, in[0], global, &p, e))) return rc;
    if (n_out > 1) return kl__fail_node(e, n, KL_EUNSUPPORTED, "MaxPool indices in float64");
    int64_t d[5];
    geo_out_dims(&p, p.C, d);
    kl__set_shape(&out[0], KL_F64, p.nsp + 2, d);
    return KL_OK;
}
int kl__pool64_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    geo p;
    int global = !strncmp(n->op_type, "Global", 6), rc;
    if ((rc = pool_geo(n, in[0], global, &p, e))) return rc;
    pool_f64(&p, strstr(n->op_type, "Max") != NULL, in[0]->data, out[0]->data, NULL, NULL, x->pool);
    return KL_OK;
}

/* BatchNormalization: training mode (any float dtype) and float64 eval. */
static int bn_check(kl_gnode *n, kl_tensor *const *in, int off, kl_err *e) {
    int rc;
    const kl_tensor *X = in[off];
    if ((rc = kl__need_float(n, X, "X", e))) return rc;
    if (X->rank < 2) return kl__fail_node(e, n, KL_ESHAPE, "input rank < 2");
    for (int i = off + 1; i < off + 5; i++) {
        if (!in[i]) continue;
        if ((rc = kl__same_dtype(n, X, "X", in[i], "a per-channel input", e))) return rc;
        if (kl_tensor_numel(in[i]) != X->dims[1]) return kl__fail_node(e, n, KL_ESHAPE, "input %d must have %lld entries", i - off, (long long)X->dims[1]);
    }
    return KL_OK;
}
int kl__bn_ext_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc = bn_check(n, in, 0, e);
    if (rc) return rc;
    int train = (int)kl_gnode_attr_int(n, "training_mode", 0);
    if (!train && n_out > 1) return kl__fail_node(e, n, KL_EINVAL, "running statistics outputs need training_mode=1");
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    for (int k = 1; k < n_out; k++) kl__set_shape(&out[k], in[0]->dtype, 1, &in[0]->dims[1]);
    return KL_OK;
}
static int64_t spatial(const kl_tensor *X) {
    int64_t S = 1;
    for (int i = 2; i < X->rank; i++) S *= X->dims[i];
    return S;
}
int kl__bn_ext_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *X = in[0];
    int train = (int)kl_gnode_attr_int(n, "training_mode", 0);
    double eps = kl_gnode_attr_float(n, "epsilon", 1e-5f), mom = kl_gnode_attr_float(n, "momentum", 0.9f);
    int unb = (int)kl_gnode_attr_int(n, "_unbiased_var", 0);
    void *rm = n_out > 1 && out[1] ? out[1]->data : NULL, *rv = n_out > 2 && out[2] ? out[2]->data : NULL;
    if (X->dtype == KL_F32) {
        bn_job_f32 j = {X->dims[0], X->dims[1], spatial(X), X->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data, NULL,
                        out[0]->data, rm, rv, NULL, NULL, NULL, eps, mom, train, unb};
        kl_pool_parallel_for(x->pool, (size_t)j.C, 1, bn_fwd_ch_f32, &j);
    } else {
        bn_job_f64 j = {X->dims[0], X->dims[1], spatial(X), X->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data, NULL,
                        out[0]->data, rm, rv, NULL, NULL, NULL, eps, mom, train, unb};
        kl_pool_parallel_for(x->pool, (size_t)j.C, 1, bn_fwd_ch_f64, &j);
    }
    return KL_OK;
}

static int ln_dims(kl_gnode *n, const kl_tensor *X, int64_t *rows, int64_t *cols, int64_t *axis, kl_err *e) {
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), X->rank, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    *rows = *cols = 1;
    for (int i = 0; i < X->rank; i++) { if (i < ax) *rows *= X->dims[i]; else *cols *= X->dims[i]; }
    if (axis) *axis = ax;
    return KL_OK;
}
int kl__ln64_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t rows = 0, cols = 0, ax = 0;
    int rc = ln_dims(n, in[0], &rows, &cols, &ax, e);
    if (rc) return rc;
    for (int i = 1; i < n_in && i < 3; i++) {
        if (!in[i]) continue;
        if ((rc = kl__same_dtype(n, in[0], "X", in[i], i == 1 ? "scale" : "bias", e))) return rc;
        if (kl_tensor_numel(in[i]) != cols) return kl__fail_node(e, n, KL_ESHAPE, "scale/bias must have %lld entries", (long long)cols);
    }
    kl__set_shape(&out[0], KL_F64, in[0]->rank, in[0]->dims);
    int64_t d[KL_MAX_DIMS];
    for (int i = 0; i < in[0]->rank; i++) d[i] = i < ax ? in[0]->dims[i] : 1;
    for (int k = 1; k < n_out; k++) kl__set_shape(&out[k], KL_F64, in[0]->rank, d);
    return KL_OK;
}
int kl__ln64_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t rows = 0, cols = 0;
    int rc = ln_dims(n, in[0], &rows, &cols, NULL, e);
    if (rc) return rc;
    ln_fwd_f64(rows, cols, in[0]->data, in[1]->data, n_in > 2 && in[2] ? in[2]->data : NULL, kl_gnode_attr_float(n, "epsilon", 1e-5f),
               out[0]->data, n_out > 1 && out[1] ? out[1]->data : NULL, n_out > 2 && out[2] ? out[2]->data : NULL);
    return KL_OK;
}

/* ================================================================== *
 * Gradient ops
 * ================================================================== */

/* ConvGrad(dy, X, W) -> dW, dB?, dX? (attrs of the forward Conv). */
static int conv_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    geo p;
    int rc;
    const kl_tensor *dy = in[0], *X = in[1], *W = in[2];
    if ((rc = kl__need_float(n, dy, "the gradient", e)) || (rc = kl__same_dtype(n, dy, "the gradient", X, "X", e)) ||
        (rc = kl__same_dtype(n, X, "X", W, "W", e)) || (rc = conv_geo(n, X, W, &p, e)))
        return rc;
    int64_t d[5];
    geo_out_dims(&p, p.M, d);
    if (dy->rank != p.nsp + 2 || memcmp(dy->dims, d, sizeof(int64_t) * (size_t)dy->rank))
        return kl__fail_node(e, n, KL_ESHAPE, "gradient shape does not match the Conv output");
    kl__set_shape(&out[0], dy->dtype, W->rank, W->dims);
    if (n_out > 1) kl__set_shape(&out[1], dy->dtype, 1, &p.M);
    if (n_out > 2) kl__set_shape(&out[2], dy->dtype, X->rank, X->dims);
    *ws = dy->dtype == KL_F32 ? cg_ws_bytes(&p, n_out > 2 && n->outputs[2] >= 0) : conv_ws(&p, kl_dtype_size(dy->dtype));
    return KL_OK;
}
static int conv_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    geo p;
    int rc = conv_geo(n, in[1], in[2], &p, e);
    if (rc) return rc;
    void *dw = out[0] ? out[0]->data : NULL, *db = n_out > 1 && out[1] ? out[1]->data : NULL, *dx = n_out > 2 && out[2] ? out[2]->data : NULL;
    if (in[0]->dtype == KL_F32) return conv_bwd_fast(n, &p, in[1]->data, in[2]->data, in[0]->data, dx, dw, db, x->ws, x->pool, e);
    else conv_bwd_f64(&p, in[1]->data, in[2]->data, in[0]->data, dx, dw, db, x->ws, x->pool);
    return KL_OK;
}

/* MaxPoolGrad / AveragePoolGrad / GlobalAveragePoolGrad (dy, X) -> dX.
 * MaxPoolGrad _relu=1: X is a ReLU's output read only by the pool, and the
 * output is the gradient of the ReLU's input (one pass instead of two). */
static int pool_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    geo p;
    int rc, global = !strncmp(n->op_type, "Global", 6);
    if ((rc = kl__need_float(n, in[0], "the gradient", e)) || (rc = kl__same_dtype(n, in[0], "the gradient", in[1], "X", e)) ||
        (rc = pool_geo(n, in[1], global, &p, e)))
        return rc;
    int64_t d[5];
    geo_out_dims(&p, p.C, d);
    if (in[0]->rank != p.nsp + 2 || memcmp(in[0]->dims, d, sizeof(int64_t) * (size_t)in[0]->rank))
        return kl__fail_node(e, n, KL_ESHAPE, "gradient shape does not match the pool output");
    kl__set_shape(&out[0], in[0]->dtype, in[1]->rank, in[1]->dims);
    return KL_OK;
}
static int pool_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    geo p;
    int rc, global = !strncmp(n->op_type, "Global", 6), max = !strncmp(n->op_type, "MaxPool", 7);
    if (max && kl_gnode_attr_int(n, "_relu", 0)) max = 2;
    if ((rc = pool_geo(n, in[1], global, &p, e))) return rc;
    if (global) {
        int64_t NC = p.N * p.C, S = p.isz;
        if (in[0]->dtype == KL_F32) {
            const float *dy = in[0]->data;
            float *dx = out[0]->data, inv = 1.f / (float)S;
            for (int64_t i = 0; i < NC; i++) for (int64_t s = 0; s < S; s++) dx[i * S + s] = dy[i] * inv;
        } else {
            const double *dy = in[0]->data;
            double *dx = out[0]->data;
            for (int64_t i = 0; i < NC; i++) for (int64_t s = 0; s < S; s++) dx[i * S + s] = dy[i] / (double)S;
        }
        return KL_OK;
    }
    if (in[0]->dtype == KL_F32) pool_f32(&p, max, in[1]->data, NULL, in[0]->data, out[0]->data, x->pool);
    else pool_f64(&p, max, in[1]->data, NULL, in[0]->data, out[0]->data, x->pool);
    return KL_OK;
}

/* BatchNormalizationGrad(dy, X, scale, mean, var) attrs epsilon,
 * training_mode -> dX?, dScale?, dB? (training: batch statistics recomputed
 * from X; eval: the running statistics mean/var). */
static int bn_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = kl__need_float(n, in[0], "the gradient", e)) || (rc = kl__same_dtype(n, in[0], "the gradient", in[1], "X", e)) ||
        (rc = kl__same_shape(n, in[0], "the gradient", in[1], "X", e)))
        return rc;
    kl_tensor *chk[5] = {in[1], in[2], NULL, n_in > 3 ? in[3] : NULL, n_in > 4 ? in[4] : NULL};
    if ((rc = bn_check(n, chk, 0, e))) return rc;
    if (!kl_gnode_attr_int(n, "training_mode", 0) && (n_in < 5 || !in[3] || !in[4]))
        return kl__fail_node(e, n, KL_EINVAL, "eval-mode gradient needs the running mean and variance");
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    for (int k = 1; k < n_out; k++) kl__set_shape(&out[k], in[0]->dtype, 1, &in[1]->dims[1]);
    return KL_OK;
}
static int bn_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *X = in[1];
    int train = (int)kl_gnode_attr_int(n, "training_mode", 0);
    double eps = kl_gnode_attr_float(n, "epsilon", 1e-5f);
    void *mean = n_in > 3 && in[3] ? in[3]->data : NULL, *var = n_in > 4 && in[4] ? in[4]->data : NULL;
    void *dx = out[0] ? out[0]->data : NULL, *dg = n_out > 1 && out[1] ? out[1]->data : NULL, *db = n_out > 2 && out[2] ? out[2]->data : NULL;
    if (X->dtype == KL_F32) {
        bn_job_f32 j = {X->dims[0], X->dims[1], spatial(X), X->data, in[2]->data, NULL, mean, var, in[0]->data, NULL, NULL, NULL,
                        dx, dg, db, eps, 0, train, 0};
        kl_pool_parallel_for(x->pool, (size_t)j.C, 1, bn_bwd_ch_f32, &j);
    } else {
        bn_job_f64 j = {X->dims[0], X->dims[1], spatial(X), X->data, in[2]->data, NULL, mean, var, in[0]->data, NULL, NULL, NULL,
                        dx, dg, db, eps, 0, train, 0};
        kl_pool_parallel_for(x->pool, (size_t)j.C, 1, bn_bwd_ch_f64, &j);
    }
    return KL_OK;
}

/* LayerNormalizationGrad(dy, X, scale) attrs axis, epsilon -> dX?, dScale?, dB?. */
static int ln_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    int64_t rows = 0, cols = 0;
    if ((rc = kl__need_float(n, in[0], "the gradient", e)) || (rc = kl__same_dtype(n, in[0], "the gradient", in[1], "X", e)) ||
        (rc = kl__same_dtype(n, in[1], "X", in[2], "scale", e)) || (rc = kl__same_shape(n, in[0], "the gradient", in[1], "X", e)) ||
        (rc = ln_dims(n, in[1], &rows, &cols, NULL, e)))
        return rc;
    if (kl_tensor_numel(in[2]) != cols) return kl__fail_node(e, n, KL_ESHAPE, "scale must have %lld entries", (long long)cols);
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    for (int k = 1; k < n_out; k++) kl__set_shape(&out[k], in[0]->dtype, in[2]->rank, in[2]->dims);
    return KL_OK;
}
static int ln_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t rows = 0, cols = 0;
    int rc = ln_dims(n, in[1], &rows, &cols, NULL, e);
    if (rc) return rc;
    double eps = kl_gnode_attr_float(n, "epsilon", 1e-5f);
    void *dx = out[0] ? out[0]->data : NULL, *dg = n_out > 1 && out[1] ? out[1]->data : NULL, *db = n_out > 2 && out[2] ? out[2]->data : NULL;
    if (in[0]->dtype == KL_F32) ln_bwd_f32(rows, cols, in[1]->data, in[2]->data, in[0]->data, eps, dx, dg, db, x->pool);
    else ln_bwd_f64(rows, cols, in[1]->data, in[2]->data, in[0]->data, eps, dx, dg, db, x->pool);
    return KL_OK;
}

static const char *const a_conv[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", NULL};
static const char *const a_pool[] = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides", "storage_order", "_relu", NULL};
static const char *const a_bn[] = {"epsilon", "momentum", "training_mode", NULL};
static const char *const a_ln[] = {"axis", "epsilon", "stash_type", NULL};
static const char *const no_attrs[] = {NULL};


const kl_op kl__ops_grad_nn[] = {
    KL__GOP("ConvGrad", 3, 3, 1, 3, a_conv, conv_grad_infer, conv_grad_run),
    KL__GOP("MaxPoolGrad", 2, 2, 1, 1, a_pool, pool_grad_infer, pool_grad_run),
    KL__GOP("AveragePoolGrad", 2, 2, 1, 1, a_pool, pool_grad_infer, pool_grad_run),
    KL__GOP("GlobalAveragePoolGrad", 2, 2, 1, 1, no_attrs, pool_grad_infer, pool_grad_run),
    KL__GOP("BatchNormalizationGrad", 3, 5, 1, 3, a_bn, bn_grad_infer, bn_grad_run),
    KL__GOP("LayerNormalizationGrad", 3, 3, 1, 3, a_ln, ln_grad_infer, ln_grad_run),
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
