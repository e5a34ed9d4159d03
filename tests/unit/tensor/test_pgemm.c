/* Unit tests of keel's packed GEMM (AVX-512 micro-kernel, pgemm.c) through
 * its public entries: kl_gemm_packed_f32 with a pre-packed B, and convolution
 * with pre-packed weights and a fused residual, against naive double-precision
 * references over odd shapes (sizes not multiples of the 8 x 32 block, k
 * longer than one k block, strides, pads, dilations, groups), plus
 * bit-identical results with a 1-thread and a 2-thread pool. On a CPU without
 * AVX-512F the packed entries report 0 floats and the conv checks run the
 * OpenBLAS path (residual unfused). */
#include "../harness.h"
#include "tt.h"

static float act1(kl_act a, float v) {
    if (a.kind == KL_ACT_RELU) return v > 0 ? v : 0;
    if (a.kind == KL_ACT_CLIP) return v < a.a ? a.a : v > a.b ? a.b : v;
    if (a.kind == KL_ACT_LEAKY_RELU) return v < 0 ? a.a * v : v;
    return v;
}

KL_TEST(tensor_pgemm_packed_b_vs_ref) {
    int Ms[] = {1, 3, 8, 13, 37};
    int Ns[] = {1, 17, 32, 33, 100};
    int Ks[] = {1, 5, 256, 257, 600};
    int ncase = 0;
    for (int mi = 0; mi < 5; mi++)
        for (int ni = 0; ni < 5; ni++)
            for (int ki = 0; ki < 5; ki++) {
                int M = Ms[mi], N = Ns[ni], K = Ks[ki], tb = (mi + ni + ki) % 2;
                size_t nf = kl_gemm_packed_b_floats(K, N);
                if (!nf) continue;  /* no AVX-512F: nothing to test here */
                ncase++;
                int lda = K + (ki % 2) * 3;
                float *A = tt_randn((int64_t)M * lda, 100 + mi), *B = tt_randn((int64_t)K * N, 200 + ni);
                float *bias = tt_randn(N, 300 + ki);
                float *bp = kl_mem_alloc(nf * sizeof(float), KL_TAG_PARAMS);
                kl_gemm_pack_b(tb, K, N, B, tb ? K : N, bp);
                kl_act act = {(kl_act_kind)((mi + ki) % 3), -0.25f, 0.5f};
                const float *bb = (ni + ki) % 2 ? bias : NULL;
                float *res = (mi + ni) % 2 ? tt_randn((int64_t)M * N, 400 + mi) : NULL;
                float *c1 = calloc((size_t)M * N, 4), *c2 = calloc((size_t)M * N, 4);
                kl_gemm_packed_f32(M, N, K, A, lda, bp, bb, res, act, c1, N, tt_pool(1));
                kl_gemm_packed_f32(M, N, K, A, lda, bp, bb, res, act, c2, N, tt_pool(2));
                double md = 0;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double s = (bb ? bb[j] : 0) + (res ? res[i * N + j] : 0);
                        for (int k = 0; k < K; k++) s += (double)A[i * lda + k] * (tb ? B[j * K + k] : B[k * N + j]);
                        double d = fabs(act1(act, (float)s) - c1[i * N + j]);
                        if (d > md) md = d;
                    }
                int same = !memcmp(c1, c2, (size_t)M * N * 4);
                free(A); free(B); free(bias); free(res); free(c1); free(c2); kl_mem_free(bp);
                KT_CHECKF(md < 1e-4 * (1 + K / 64.0), "M=%d N=%d K=%d tb=%d maxdiff %g", M, N, K, tb, md);
                KT_CHECKF(same, "M=%d N=%d K=%d: 1 and 2 threads differ", M, N, K);
            }
    if (kl_gemm_packed_b_floats(4, 4)) KT_CHECK(ncase == 125);
}

/* Naive conv + residual + act in double. */
static void ref_conv_res(const kl_conv_params *p, const float *x, const float *w, const float *b, const float *res,
                         float *y) {
    int64_t Cg = p->C / p->group, Mg = p->M / p->group, OH = p->out[0], OW = p->out[1];
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t g = m / Mg;
                    double s = b ? b[m] : 0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t ky = 0; ky < p->k[0]; ky++)
                            for (int64_t kx = 0; kx < p->k[1]; kx++) {
                                int64_t iy = oy * p->stride[0] - p->pad_begin[0] + ky * p->dilation[0];
                                int64_t ix = ox * p->stride[1] - p->pad_begin[1] + kx * p->dilation[1];
                                if (iy < 0 || iy >= p->in[0] || ix < 0 || ix >= p->in[1]) continue;
                                s += (double)x[((n * p->C + g * Cg + c) * p->in[0] + iy) * p->in[1] + ix] *
                                     w[((m * Cg + c) * p->k[0] + ky) * p->k[1] + kx];
                            }
                    int64_t o = ((n * p->M + m) * OH + oy) * OW + ox;
                    if (res) s += res[o];
                    y[o] = act1(p->act, (float)s);
                }
}

KL_TEST(tensor_pgemm_conv_packed_residual) {
    kl_err e = {0};
    struct { int64_t N, C, M, G, H, W, k, s, d, p; kl_act_kind act; int res; } cs[] = {
        {1, 3, 5, 1, 9, 13, 3, 1, 1, 1, KL_ACT_RELU, 1},     /* M < 8, odd sizes */
        {2, 13, 19, 1, 11, 10, 3, 2, 1, 1, KL_ACT_CLIP, 1},  /* stride 2, batch 2 */
        {1, 40, 12, 1, 7, 7, 3, 1, 1, 1, KL_ACT_NONE, 0},    /* K = 360 > one k block */
        {1, 7, 9, 1, 15, 17, 3, 1, 2, 2, KL_ACT_RELU, 1},    /* dilation 2 */
        {1, 6, 10, 2, 9, 9, 3, 1, 1, 1, KL_ACT_RELU, 1},     /* 2 groups */
        {1, 12, 12, 4, 8, 11, 3, 2, 1, 0, KL_ACT_NONE, 1},   /* 4 groups, no pad */
        {1, 33, 17, 1, 6, 50, 1, 1, 1, 0, KL_ACT_RELU, 1},   /* pointwise, rows cross panels */
        {1, 9, 16, 1, 13, 13, 1, 2, 1, 0, KL_ACT_NONE, 0},   /* 1x1 stride 2 */
        {1, 3, 8, 1, 23, 21, 7, 2, 1, 3, KL_ACT_RELU, 0},    /* stem-like 7x7/2 */
        {1, 5, 7, 1, 12, 15, 3, 2, 2, 2, KL_ACT_RELU, 1},    /* stride 2 + dilation 2: phase planes */
        {1, 4, 9, 1, 10, 9, 5, 2, 1, 1, KL_ACT_NONE, 1},     /* 5x5/2, even and odd extents */
        {1, 5, 11, 1, 9, 40, 3, 3, 1, 1, KL_ACT_NONE, 1},    /* stride 3 (gather path) */
        {1, 300, 24, 1, 5, 5, 3, 1, 1, 1, KL_ACT_RELU, 1},   /* K = 2700 */
        {3, 16, 40, 1, 7, 7, 3, 1, 1, 1, KL_ACT_RELU, 1},    /* batch 3 7x7: panels cross images */
        {2, 8, 300, 1, 5, 5, 3, 1, 1, 1, KL_ACT_NONE, 1},    /* M > one tile: B pre-packed, batch 2 */
        {1, 70, 520, 1, 3, 3, 3, 1, 1, 1, KL_ACT_CLIP, 1},   /* M split over tiles, K = 630 */
        {4, 6, 10, 2, 3, 5, 1, 1, 1, 0, KL_ACT_CLIP, 1},     /* pointwise, 2 groups, 15 px: 3 images a panel */
        {3, 9, 16, 1, 13, 11, 1, 2, 1, 0, KL_ACT_RELU, 1},   /* 1x1 stride 2, batch 3 */
        {2, 3, 8, 1, 23, 21, 7, 2, 1, 3, KL_ACT_RELU, 1},    /* stem-like 7x7/2, batch 2 */
        {5, 12, 12, 3, 6, 9, 3, 2, 1, 1, KL_ACT_NONE, 1},    /* 3 groups, stride 2, batch 5 */
        {2, 200, 64, 1, 30, 34, 3, 1, 1, 1, KL_ACT_RELU, 1}, /* many column tiles, 2 k blocks */
        {1, 5, 12, 1, 6, 7, 3, 1, 1, 1, KL_ACT_LEAKY_RELU, 1}, /* unfused act on grid segments */
        {3, 5, 12, 1, 5, 5, 3, 1, 1, 1, KL_ACT_LEAKY_RELU, 1}, /* unfused act across images */
        {6, 8, 16, 1, 14, 14, 3, 1, 1, 1, KL_ACT_RELU, 1},   /* batch 6 of small images: image slots, 2 rounds */
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = cs[c].N; p.C = cs[c].C; p.M = cs[c].M; p.group = cs[c].G;
        p.in[0] = cs[c].H; p.in[1] = cs[c].W;
        p.k[0] = p.k[1] = cs[c].k;
        p.stride[0] = p.stride[1] = cs[c].s;
        p.dilation[0] = p.dilation[1] = cs[c].d;
        p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = cs[c].p;
        p.act = (kl_act){cs[c].act, -0.5f, 0.75f};
        KT_OK(kl_conv_prepare(&p, &e), &e);
        int64_t xn = p.N * p.C * p.in[0] * p.in[1], wn = p.M * (p.C / p.group) * p.k[0] * p.k[1];
        int64_t yn = p.N * p.M * p.out[0] * p.out[1];
        float *x = tt_randn(xn, 7 + c), *w = tt_randn(wn, 8 + c), *b = tt_randn(p.M, 9 + c);
        float *res = cs[c].res ? tt_randn(yn, 10 + c) : NULL;
        float *y1 = calloc((size_t)yn, 4), *y2 = calloc((size_t)yn, 4), *y3 = calloc((size_t)yn, 4);
        float *r = calloc((size_t)yn, 4);
        size_t pf = kl_conv_packed_floats(&p);
        float *pw = pf ? kl_mem_alloc(pf * sizeof(float), KL_TAG_PARAMS) : NULL;
        if (pw) kl_conv_pack_weights(&p, w, pw);
        p.residual = res;
        /* weights packed per call, then pre-packed at 1 and 2 threads */
        KT_OK(kl_conv_f32(&p, x, w, b, y1, NULL, tt_pool(1), &e), &e);
        p.packed_w = pw;
        KT_OK(kl_conv_f32(&p, x, w, b, y2, NULL, tt_pool(1), &e), &e);
        size_t wsb = kl_conv_workspace_bytes(&p);
        void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
        KT_OK(kl_conv_f32(&p, x, w, b, y3, ws, tt_pool(2), &e), &e);
        ref_conv_res(&p, x, w, b, res, r);
        double d = tt_maxdiff(y1, r, yn);
        int same = !memcmp(y1, y2, (size_t)yn * 4) && !memcmp(y2, y3, (size_t)yn * 4);
        kl_mem_free(ws); kl_mem_free(pw);
        free(x); free(w); free(b); free(res); free(y1); free(y2); free(y3); free(r);
        KT_CHECKF(d < 2e-4, "conv case %zu maxdiff %g", c, d);
        KT_CHECKF(same, "conv case %zu: packed/unpacked or 1/2 threads differ", c);
    }
}
