/* Unit tests of the compute kernels against naive reference loops: GEMM,
 * matmul, conv (pointwise, depthwise, grouped, dilated, 1-D/3-D, fused act),
 * pooling, normalisation. Each also checks bit-identical results with a
 * 1-thread and a 2-thread pool. Tolerances are stated per check. */
#include "../harness.h"
#include "tt.h"

/* ==================================================================
 * GEMM / matmul
 * ================================================================== */

static void ref_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)(alpha * s + (beta == 0 ? 0 : beta * C[i * ldc + j]));
        }
}

KL_TEST(tensor_gemm_vs_ref) {
    int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {1, 1000, 64}, {70, 1, 33}, {4, 900, 300}, {2, 1, 5}, {65, 33, 129}, {300, 520, 40}, {17, 700, 300}, {600, 8, 200}};
    for (size_t s = 0; s < KL_ARRAY_LEN(shapes); s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                if ((ta || tb) && (double)M * N * K > 2e6) continue; /* keep sanitizer runs fast */
                float *A = tt_randn((int64_t)M * K, 1 + s), *B = tt_randn((int64_t)K * N, 2 + s);
                float *C1 = tt_randn((int64_t)M * N, 3), *C2 = tt_randn((int64_t)M * N, 3), *R = tt_randn((int64_t)M * N, 3);
                int lda = ta ? M : K, ldb = tb ? K : N;
                ref_gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, R, N);
                kl_gemm_f32(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C1, N, tt_pool(1));
                kl_gemm_f32(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C2, N, tt_pool(2));
                double d = tt_maxdiff(C1, R, (int64_t)M * N);
                int same = memcmp(C1, C2, sizeof(float) * (size_t)M * N) == 0;
                free(A); free(B); free(C1); free(C2); free(R);
                KT_CHECKF(d < 1e-4 * sqrt((double)K), "gemm %dx%dx%d ta=%d tb=%d maxdiff %g", M, N, K, ta, tb, d);
                KT_CHECKF(same, "gemm %dx%dx%d not bit-identical at 1 and 2 threads", M, N, K);
            }
    /* beta 0 ignores NaN in C; bias+act epilogue */
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1}, C[4] = {NAN, NAN, NAN, NAN};
    kl_gemm_f32(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2, NULL);
    KT_NEAR(C[0], 4, 0); KT_NEAR(C[1], 5, 0); KT_NEAR(C[3], 11, 0);
    float bias[2] = {-10, 0.5f};
    kl_gemm_bias_act_f32(0, 0, 2, 2, 3, A, 3, B, 2, bias, (kl_act){KL_ACT_RELU, 0, 0}, C, 2, NULL);
    KT_NEAR(C[0], 0, 0); KT_NEAR(C[1], 5.5, 0); KT_NEAR(C[2], 0, 0); KT_NEAR(C[3], 11.5, 0);
}

KL_TEST(tensor_matmul_broadcast) {
    kl_err e = {0};
    struct { int ra; int64_t da[4]; int rb; int64_t db[4]; int ry; int64_t dy[4]; } cs[] = {
        {3, {2, 3, 4}, 2, {4, 5}, 3, {2, 3, 5}},
        {2, {3, 4}, 3, {2, 4, 5}, 3, {2, 3, 5}},
        {4, {2, 1, 3, 4}, 3, {3, 4, 6}, 4, {2, 3, 3, 6}},
        {1, {4}, 2, {4, 5}, 1, {5}},
        {3, {2, 3, 4}, 1, {4}, 2, {2, 3}},
        {1, {4}, 1, {4}, 0, {0}},
        {3, {2, 200, 300}, 3, {2, 300, 150}, 3, {2, 200, 150}},   /* few large products */
        {3, {6, 20, 30}, 3, {1, 30, 15}, 3, {6, 20, 15}},        /* shared B, broadcast */
        {3, {64, 16, 16}, 3, {64, 16, 16}, 3, {64, 16, 16}},     /* attention heads: small-product kernel */
        {3, {7, 5, 13}, 3, {7, 13, 37}, 3, {7, 5, 37}},          /* small, N tail (32 + 5) */
        {4, {2, 3, 3, 20}, 4, {2, 3, 20, 9}, 4, {2, 3, 3, 9}},   /* small, N = 8 + 1 */
        {3, {5, 4, 70}, 3, {5, 70, 64}, 3, {5, 4, 64}},          /* small, N = 64 */
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        int ry;
        int64_t dy[8];
        KT_OK(kl_matmul_shape(cs[c].ra, cs[c].da, cs[c].rb, cs[c].db, &ry, dy, &e), &e);
        KT_EQ_INT(ry, cs[c].ry);
        for (int i = 0; i < ry; i++) KT_EQ_INT(dy[i], cs[c].dy[i]);
        int64_t na = kl_shape_numel(cs[c].ra, cs[c].da), nb = kl_shape_numel(cs[c].rb, cs[c].db), ny = kl_shape_numel(ry, dy);
        float *a = tt_randn(na, 5), *b = tt_randn(nb, 6), *y = calloc((size_t)ny, 4), *y2 = calloc((size_t)ny, 4), *r = calloc((size_t)ny, 4);
        KT_OK(kl_matmul_f32(cs[c].ra, cs[c].da, a, cs[c].rb, cs[c].db, b, y, tt_pool(1), &e), &e);
        KT_OK(kl_matmul_f32(cs[c].ra, cs[c].da, a, cs[c].rb, cs[c].db, b, y2, tt_pool(2), &e), &e);
        /* reference: promote to 4-D */
        int64_t A4[4] = {1, 1, 1, 1}, B4[4] = {1, 1, 1, 1};
        int ra = cs[c].ra, rb = cs[c].rb;
        if (ra == 1) { A4[2] = 1; A4[3] = cs[c].da[0]; } else for (int i = 0; i < ra; i++) A4[4 - ra + i] = cs[c].da[i];
        if (rb == 1) { B4[2] = cs[c].db[0]; B4[3] = 1; } else for (int i = 0; i < rb; i++) B4[4 - rb + i] = cs[c].db[i];
        int64_t M = A4[2], K = A4[3], N = B4[3], o = 0;
        for (int64_t i0 = 0; i0 < KL_MAX(A4[0], B4[0]); i0++)
            for (int64_t i1 = 0; i1 < KL_MAX(A4[1], B4[1]); i1++)
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double s = 0;
                        for (int64_t k = 0; k < K; k++) {
                            int64_t ia = (((A4[0] > 1 ? i0 : 0) * A4[1] + (A4[1] > 1 ? i1 : 0)) * M + m) * K + k;
                            int64_t ib = (((B4[0] > 1 ? i0 : 0) * B4[1] + (B4[1] > 1 ? i1 : 0)) * K + k) * N + n;
                            s += (double)a[ia] * b[ib];
                        }
                        r[o++] = (float)s;
                    }
        double d = tt_maxdiff(y, r, ny);
        int same = memcmp(y, y2, (size_t)ny * 4) == 0;
        free(a); free(b); free(y); free(y2); free(r);
        KT_CHECKF(d < 2e-6 * (double)K + 1e-6, "matmul case %zu maxdiff %g", c, d);
        KT_CHECK(same);
    }
    int ry;
    int64_t dy[8];
    KT_EQ_INT(kl_matmul_shape(2, (int64_t[]){3, 4}, 2, (int64_t[]){5, 6}, &ry, dy, &e), KL_ESHAPE);
    KT_CONTAINS(e.msg, "[3,4]");
}

/* ==================================================================
 * Convolution
 * ================================================================== */

static void ref_conv(const kl_conv_params *p, const float *x, const float *w, const float *b, float *y) {
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0}, out[3] = {1, 1, 1};
    int off = 3 - p->nsp;
    for (int i = 0; i < p->nsp; i++) {
        in[off + i] = p->in[i]; k[off + i] = p->k[i]; s[off + i] = p->stride[i]; d[off + i] = p->dilation[i];
        pb[off + i] = p->pad_begin[i]; out[off + i] = p->out[i];
    }
    int64_t Cg = p->C / p->group, Mg = p->M / p->group;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++) {
            int64_t g = m / Mg;
            for (int64_t oz = 0; oz < out[0]; oz++)
                for (int64_t oy = 0; oy < out[1]; oy++)
                    for (int64_t ox = 0; ox < out[2]; ox++) {
                        double acc = b ? b[m] : 0;
                        for (int64_t c = 0; c < Cg; c++)
                            for (int64_t kz = 0; kz < k[0]; kz++)
                                for (int64_t ky = 0; ky < k[1]; ky++)
                                    for (int64_t kx = 0; kx < k[2]; kx++) {
                                        int64_t iz = oz * s[0] - pb[0] + kz * d[0], iy = oy * s[1] - pb[1] + ky * d[1],
                                                ix = ox * s[2] - pb[2] + kx * d[2];
                                        if (iz < 0 || iz >= in[0] || iy < 0 || iy >= in[1] || ix < 0 || ix >= in[2]) continue;
                                        acc += (double)x[(((n * p->C + g * Cg + c) * in[0] + iz) * in[1] + iy) * in[2] + ix] *
                                               w[(((m * Cg + c) * k[0] + kz) * k[1] + ky) * k[2] + kx];
                                    }
                        float v = (float)acc;
                        if (p->act.kind == KL_ACT_RELU) v = v > 0 ? v : 0;
                        if (p->act.kind == KL_ACT_CLIP) v = v < p->act.a ? p->act.a : v > p->act.b ? p->act.b : v;
                        y[(((n * p->M + m) * out[0] + oz) * out[1] + oy) * out[2] + ox] = v;
                    }
        }
}

KL_TEST(tensor_conv_vs_ref) {
    kl_err e = {0};
    struct { int nsp; int64_t N, C, M, G, in[3], k[3], s[3], d[3], pb[3], pe[3]; kl_act_kind act; } cs[] = {
        {2, 1, 3, 8, 1, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_NONE},
        {2, 2, 8, 16, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, KL_ACT_RELU},       /* pointwise */
        {2, 1, 8, 16, 1, {7, 7}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, KL_ACT_NONE},       /* 1x1 stride 2 */
        {2, 2, 16, 16, 16, {10, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_CLIP},    /* depthwise 3x3 */
        {2, 1, 12, 12, 12, {11, 12}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_RELU},   /* depthwise s2 */
        {2, 1, 8, 8, 8, {13, 13}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, KL_ACT_NONE},      /* depthwise 5x5 */
        {2, 1, 8, 8, 8, {13, 13}, {5, 5}, {2, 2}, {1, 1}, {1, 2}, {2, 1}, KL_ACT_NONE},      /* dw 5x5 s2 asym */
        {2, 1, 8, 8, 8, {21, 45}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_RELU},     /* dw s2 wide rows */
        {2, 1, 4, 4, 4, {9, 50}, {5, 5}, {2, 2}, {2, 2}, {2, 3}, {3, 2}, KL_ACT_NONE},      /* dw s2 dilated */
        {2, 2, 6, 6, 6, {17, 40}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, KL_ACT_NONE},      /* dw no pad */
        {2, 1, 2, 2, 2, {130, 131}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_NONE},    /* dw big plane (heap scratch) */
        {2, 1, 8, 12, 4, {8, 8}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, KL_ACT_NONE},       /* grouped dilated */
        {2, 2, 16, 32, 8, {9, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_RELU},     /* 8 groups, batch 2 */
        {2, 1, 6, 6, 2, {9, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, KL_ACT_NONE},       /* 2 groups */
        {2, 1, 8, 16, 4, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, KL_ACT_RELU},       /* grouped 1x1 */
        {2, 1, 3, 4, 1, {15, 15}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, KL_ACT_RELU},      /* resnet stem-like */
        {2, 1, 4, 6, 1, {6, 8}, {2, 3}, {3, 2}, {1, 1}, {0, 1}, {2, 0}, KL_ACT_NONE},        /* odd strides/pads */
        {1, 2, 3, 5, 1, {20}, {4}, {2}, {2}, {1}, {3}, KL_ACT_NONE},                         /* 1-D */
        {3, 1, 2, 3, 1, {5, 6, 4}, {3, 2, 3}, {1, 2, 1}, {1, 1, 1}, {1, 0, 1}, {1, 1, 0}, KL_ACT_NONE}, /* 3-D */
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = cs[c].nsp; p.N = cs[c].N; p.C = cs[c].C; p.M = cs[c].M; p.group = cs[c].G;
        for (int i = 0; i < p.nsp; i++) {
            p.in[i] = cs[c].in[i]; p.k[i] = cs[c].k[i]; p.stride[i] = cs[c].s[i]; p.dilation[i] = cs[c].d[i];
            p.pad_begin[i] = cs[c].pb[i]; p.pad_end[i] = cs[c].pe[i];
        }
        p.act = (kl_act){cs[c].act, -0.5f, 0.75f};
        KT_OK(kl_conv_prepare(&p, &e), &e);
        int64_t xin = p.N * p.C, wn = p.M * (p.C / p.group), yn = p.N * p.M;
        for (int i = 0; i < p.nsp; i++) { xin *= p.in[i]; wn *= p.k[i]; yn *= p.out[i]; }
        float *x = tt_randn(xin, 11 + c), *w = tt_randn(wn, 12 + c), *b = tt_randn(p.M, 13 + c);
        float *y1 = calloc((size_t)yn, 4), *y2 = calloc((size_t)yn, 4), *r = calloc((size_t)yn, 4);
        KT_OK(kl_conv_f32(&p, x, w, c % 2 ? b : NULL, y1, NULL, tt_pool(1), &e), &e);
        size_t wsb = kl_conv_workspace_bytes(&p);
        void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
        KT_OK(kl_conv_f32(&p, x, w, c % 2 ? b : NULL, y2, ws, tt_pool(2), &e), &e);
        kl_mem_free(ws);
        ref_conv(&p, x, w, c % 2 ? b : NULL, r);
        double d = tt_maxdiff(y1, r, yn);
        int same = memcmp(y1, y2, (size_t)yn * 4) == 0;
        free(x); free(w); free(b); free(y1); free(y2); free(r);
        KT_CHECKF(d < 1e-4, "conv case %zu maxdiff %g", c, d);
        KT_CHECKF(same, "conv case %zu differs between 1 and 2 threads", c);
    }
    /* an empty batch (fuzz finding: the workspace size divided by zero columns) */
    kl_conv_params z = {.nsp = 2, .N = 0, .C = 1, .M = 56, .group = 1, .in = {45, 5}, .k = {3, 3}, .stride = {42, 2}};
    KT_OK(kl_conv_prepare(&z, &e), &e);
    KT_EQ_INT((long long)kl_conv_workspace_bytes(&z), 0);
    KT_OK(kl_conv_f32(&z, NULL, NULL, NULL, NULL, NULL, tt_pool(2), &e), &e);
    kl_conv_params p = {.nsp = 2, .N = 1, .C = 3, .M = 4, .group = 2, .in = {5, 5}, .k = {3, 3}};
    KT_EQ_INT(kl_conv_prepare(&p, &e), KL_ESHAPE);
    kl_conv_params q = {.nsp = 2, .N = 1, .C = 4, .M = 4, .group = 1, .in = {2, 2}, .k = {3, 3}};
    KT_EQ_INT(kl_conv_prepare(&q, &e), KL_ESHAPE);
    KT_CONTAINS(e.msg, "larger than padded input");
    int64_t pb, pe;
    kl_auto_pad(7, 3, 2, 1, 1, &pb, &pe);
    KT_EQ_INT(pb, 1); KT_EQ_INT(pe, 1);
    kl_auto_pad(6, 3, 2, 1, 1, &pb, &pe);
    KT_EQ_INT(pb, 0); KT_EQ_INT(pe, 1);
    kl_auto_pad(6, 3, 2, 1, 0, &pb, &pe);
    KT_EQ_INT(pb, 1); KT_EQ_INT(pe, 0);
}

/* ==================================================================
 * Pooling
 * ================================================================== */

KL_TEST(tensor_pooling) {
    kl_err e = {0};
    /* MaxPool 3x3 s2 p1 on 1x1x5x5 */
    float x[25];
    for (int i = 0; i < 25; i++) x[i] = (float)((i * 7) % 25);
    kl_pooling_params p = {.nsp = 2, .N = 1, .C = 1, .in = {5, 5}, .k = {3, 3}, .stride = {2, 2},
                           .pad_begin = {1, 1}, .pad_end = {1, 1}};
    KT_OK(kl_pooling_prepare(&p, &e), &e);
    KT_EQ_INT(p.out[0], 3);
    float y[9], y2[9];
    int64_t idx[9];
    kl_maxpool_f32(&p, x, y, idx, tt_pool(1));
    kl_maxpool_f32(&p, x, y2, NULL, tt_pool(2));
    KT_CHECK(memcmp(y, y2, sizeof y) == 0);
    for (int oy = 0; oy < 3; oy++)
        for (int ox = 0; ox < 3; ox++) {
            float m = -INFINITY;
            for (int ky = 0; ky < 3; ky++)
                for (int kx = 0; kx < 3; kx++) {
                    int iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
                    if (iy >= 0 && iy < 5 && ix >= 0 && ix < 5 && x[iy * 5 + ix] > m) m = x[iy * 5 + ix];
                }
            KT_NEAR(y[oy * 3 + ox], m, 0);
            KT_NEAR(x[idx[oy * 3 + ox]], m, 0);
        }
    /* AvgPool with and without count_include_pad */
    kl_pooling_params a = p;
    kl_avgpool_f32(&a, x, y, NULL);
    KT_NEAR(y[0], (x[0] + x[1] + x[5] + x[6]) / 4, 1e-6);
    a.count_include_pad = 1;
    kl_avgpool_f32(&a, x, y, NULL);
    KT_NEAR(y[0], (x[0] + x[1] + x[5] + x[6]) / 9, 1e-6);
    /* ceil_mode: 4x4, k3 s2 -> 2x2 (floor 1x1); the ONNX maxpool_2d_ceil case */
    kl_pooling_params c = {.nsp = 2, .N = 1, .C = 1, .in = {4, 4}, .k = {3, 3}, .stride = {2, 2}, .ceil_mode = 1};
    KT_OK(kl_pooling_prepare(&c, &e), &e);
    KT_EQ_INT(c.out[0], 2);
    float xc[16], yc[4];
    for (int i = 0; i < 16; i++) xc[i] = (float)(i + 1);
    kl_maxpool_f32(&c, xc, yc, NULL, NULL);
    KT_NEAR(yc[0], 11, 0); KT_NEAR(yc[1], 12, 0); KT_NEAR(yc[2], 15, 0); KT_NEAR(yc[3], 16, 0);
    c.ceil_mode = 0;
    KT_OK(kl_pooling_prepare(&c, &e), &e);
    KT_EQ_INT(c.out[0], 1);
    /* 1-D with dilation */
    kl_pooling_params d = {.nsp = 1, .N = 1, .C = 1, .in = {6}, .k = {2}, .stride = {1}, .dilation = {2}};
    KT_OK(kl_pooling_prepare(&d, &e), &e);
    KT_EQ_INT(d.out[0], 4);
    float xd[6] = {1, 5, 2, 0, 3, 9}, yd[4];
    kl_maxpool_f32(&d, xd, yd, NULL, NULL);
    KT_NEAR(yd[0], 2, 0); KT_NEAR(yd[1], 5, 0); KT_NEAR(yd[2], 3, 0); KT_NEAR(yd[3], 9, 0);
    /* global */
    float g[2 * 3 * 7], ga[6], gm[6];
    for (int i = 0; i < 42; i++) g[i] = (float)(i % 11) - 3.0f;
    kl_global_avgpool_f32(2, 3, 7, g, ga, NULL);
    kl_global_maxpool_f32(2, 3, 7, g, gm, NULL);
    for (int r = 0; r < 6; r++) {
        double s = 0;
        float m = -INFINITY;
        for (int i = 0; i < 7; i++) { s += g[r * 7 + i]; if (g[r * 7 + i] > m) m = g[r * 7 + i]; }
        KT_NEAR(ga[r], s / 7, 1e-6);
        KT_NEAR(gm[r], m, 0);
    }
    kl_pooling_params bad = {.nsp = 2, .N = 1, .C = 1, .in = {2, 2}, .k = {3, 3}};
    KT_EQ_INT(kl_pooling_prepare(&bad, &e), KL_ESHAPE);
}

/* ==================================================================
 * Normalisation
 * ================================================================== */

KL_TEST(tensor_norms) {
    int64_t N = 2, C = 3, S = 37;
    float *x = tt_randn(N * C * S, 21), *y = malloc(sizeof(float) * N * C * S), *y2 = malloc(sizeof(float) * N * C * S);
    float sc[3] = {0.5f, 1.5f, -1}, bi[3] = {0.1f, 0, 2}, mean[3] = {0.2f, -0.1f, 0}, var[3] = {1, 0.5f, 2};
    kl_batchnorm_f32(N, C, S, x, sc, bi, mean, var, 1e-5f, y, NULL);
    for (int64_t i = 0; i < N * C * S; i++) {
        int64_t c = (i / S) % C;
        KT_NEAR(y[i], (x[i] - mean[c]) / sqrt(var[c] + 1e-5) * sc[c] + bi[c], 1e-5);
    }
    kl_instancenorm_f32(N, C, S, x, sc, bi, 1e-5f, y, tt_pool(1));
    kl_instancenorm_f32(N, C, S, x, sc, bi, 1e-5f, y2, tt_pool(2));
    KT_CHECK(memcmp(y, y2, sizeof(float) * N * C * S) == 0);
    for (int64_t r = 0; r < N * C; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < S; i++) m += x[r * S + i];
        m /= S;
        for (int64_t i = 0; i < S; i++) v += (x[r * S + i] - m) * (x[r * S + i] - m);
        v /= S;
        for (int64_t i = 0; i < S; i++)
            KT_NEAR(y[r * S + i], (x[r * S + i] - m) / sqrt(v + 1e-5) * sc[r % C] + bi[r % C], 1e-5);
    }
    /* layer norm over the last 37 with per-element scale/bias */
    float *lsc = tt_randn(S, 22), *lbi = tt_randn(S, 23), mo[6], io[6];
    kl_layernorm_f32(N * C, S, x, lsc, lbi, 1e-5f, y, mo, io, tt_pool(1));
    kl_layernorm_f32(N * C, S, x, lsc, NULL, 1e-5f, y2, NULL, NULL, tt_pool(2));
    for (int64_t r = 0; r < N * C; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < S; i++) m += x[r * S + i];
        m /= S;
        for (int64_t i = 0; i < S; i++) v += (x[r * S + i] - m) * (x[r * S + i] - m);
        v /= S;
        KT_NEAR(mo[r], m, 1e-6);
        KT_NEAR(io[r], 1 / sqrt(v + 1e-5), 1e-4);
        for (int64_t i = 0; i < S; i++) {
            double ref = (x[r * S + i] - m) / sqrt(v + 1e-5) * lsc[i];
            KT_NEAR(y[r * S + i], ref + lbi[i], 1e-5);
            KT_NEAR(y2[r * S + i], ref, 1e-5);
        }
    }
    free(x); free(y); free(y2); free(lsc); free(lbi);
}

/* Naive pooling reference (2-D) for random configurations. */
static void ref_pool2d(const kl_pooling_params *p, const float *x, float *y, int avg) {
    for (int64_t pl = 0; pl < p->N * p->C; pl++)
        for (int64_t oy = 0; oy < p->out[0]; oy++)
            for (int64_t ox = 0; ox < p->out[1]; ox++) {
                double s = 0, m = -INFINITY;
                int64_t n = 0, np = 0;
                for (int64_t ky = 0; ky < p->k[0]; ky++)
                    for (int64_t kx = 0; kx < p->k[1]; kx++) {
                        int64_t iy = oy * p->stride[0] - p->pad_begin[0] + ky * p->dilation[0];
                        int64_t ix = ox * p->stride[1] - p->pad_begin[1] + kx * p->dilation[1];
                        if (iy < p->in[0] + p->pad_end[0] && ix < p->in[1] + p->pad_end[1]) np++;
                        if (iy < 0 || iy >= p->in[0] || ix < 0 || ix >= p->in[1]) continue;
                        double v = x[(pl * p->in[0] + iy) * p->in[1] + ix];
                        s += v; n++;
                        if (v > m) m = v;
                    }
                double r = avg ? s / (double)(p->count_include_pad ? np : n) : m;
                y[(pl * p->out[0] + oy) * p->out[1] + ox] = (float)r;
            }
}

KL_TEST(tensor_pooling_random) {
    kl_err e = {0};
    uint64_t seed = 99;
    for (int t = 0; t < 60; t++) {
        kl_pooling_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = 1; p.C = 3;
        for (int i = 0; i < 2; i++) {
            p.k[i] = 1 + (int64_t)((tt_rand(&seed) + 1) * 2);       /* 1..4 */
            p.stride[i] = 1 + (int64_t)((tt_rand(&seed) + 1) * 1.5); /* 1..3 */
            p.dilation[i] = t % 3 == 0 ? 2 : 1;
            p.in[i] = p.k[i] * p.dilation[i] + 3 + (int64_t)((tt_rand(&seed) + 1) * 8);
            p.pad_begin[i] = (int64_t)((tt_rand(&seed) + 1) * 0.5 * (double)p.k[i]) % p.k[i];
            p.pad_end[i] = (int64_t)((tt_rand(&seed) + 1) * 0.5 * (double)p.k[i]) % p.k[i];
        }
        p.ceil_mode = t % 2;
        p.count_include_pad = (t / 2) % 2;
        KT_OK(kl_pooling_prepare(&p, &e), &e);
        int64_t xn = p.C * p.in[0] * p.in[1], yn = p.C * p.out[0] * p.out[1];
        float *x = tt_randn(xn, 100 + t), *y = malloc(4 * (size_t)yn), *r = malloc(4 * (size_t)yn), *y2 = malloc(4 * (size_t)yn);
        int64_t *ix = malloc(8 * (size_t)yn);
        for (int avg = 0; avg < 2; avg++) {
            if (avg) kl_avgpool_f32(&p, x, y, tt_pool(1));
            else kl_maxpool_f32(&p, x, y, NULL, tt_pool(1));
            ref_pool2d(&p, x, r, avg);
            double d = tt_maxdiff(y, r, yn);
            if (!avg) { kl_maxpool_f32(&p, x, y2, ix, tt_pool(2)); d = fmax(d, tt_maxdiff(y2, r, yn)); }
            KT_CHECKF(d < 1e-6, "pool case %d avg=%d maxdiff %g", t, avg, d);
        }
        free(x); free(y); free(r); free(y2); free(ix);
    }
}

KL_TEST(tensor_pooling_3d) {
    kl_err e = {0};
    float x[64], y[8], ya[8];
    for (int i = 0; i < 64; i++) x[i] = (float)i;
    kl_pooling_params p = {.nsp = 3, .N = 1, .C = 1, .in = {4, 4, 4}, .k = {2, 2, 2}, .stride = {2, 2, 2}};
    KT_OK(kl_pooling_prepare(&p, &e), &e);
    KT_EQ_INT(p.out[0] * p.out[1] * p.out[2], 8);
    kl_maxpool_f32(&p, x, y, NULL, NULL);
    kl_avgpool_f32(&p, x, ya, NULL);
    for (int oz = 0; oz < 2; oz++)
        for (int oy = 0; oy < 2; oy++)
            for (int ox = 0; ox < 2; ox++) {
                int o = (oz * 2 + oy) * 2 + ox, base = (oz * 2) * 16 + (oy * 2) * 4 + ox * 2;
                KT_NEAR(y[o], base + 16 + 4 + 1, 0);
                KT_NEAR(ya[o], base + (16 + 4 + 1) / 2.0, 1e-6);
            }
}
