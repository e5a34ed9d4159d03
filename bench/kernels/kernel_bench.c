/* Kernel benchmark: SGEMM GFLOP/s (keel's pooled GEMM vs OpenBLAS's own
 * threading, same run) and per-layer conv times of ResNet-18 and MobileNetV2
 * (batch 1, 224x224) at 1 and 2 threads, and the NCHWc (channel-blocked)
 * conv kernel against the NCHW path per ResNet-18 layer (batch 1 or B, the two
 * paths interleaved in one loop). Medians of several runs.
 * Usage: kernel_bench [gemm|conv|nchwc|mobile|wino|all] [iters] [batch (nchwc, mobile)];
 * mobile: MobileNetV2's depthwise and 1x1 layers, NCHWc vs NCHW. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel/core.h"
#include "keel/tensor.h"

extern void openblas_set_num_threads(int);

#include "bench_util.h"

static void bench_gemm(int iters) {
    int sizes[] = {2048, 512};
    printf("## SGEMM (row-major NN, median of %d)\n", iters);
    printf("| size | threads | keel GFLOP/s | OpenBLAS GFLOP/s | keel/OpenBLAS |\n|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int n = sizes[si];
        float *A = rnd((size_t)n * n), *B = rnd((size_t)n * n), *C = rnd((size_t)n * n);
        double flops = 2.0 * n * (double)n * n;
        for (int th = 1; th <= 2; th++) {
            kl_pool *pool;
            kl_pool_new(th, &pool, NULL);
            double tk[64], to[64];
            kl_gemm_f32(0, 0, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n, pool); /* warm-up, sets BLAS to 1 thread */
            for (int i = 0; i < iters; i++) {
                double t0 = now_s();
                kl_gemm_f32(0, 0, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n, pool);
                tk[i] = now_s() - t0;
            }
            openblas_set_num_threads(th);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
            for (int i = 0; i < iters; i++) {
                double t0 = now_s();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
                to[i] = now_s() - t0;
            }
            openblas_set_num_threads(1);
            double k = flops / median(tk, iters) * 1e-9, o = flops / median(to, iters) * 1e-9;
            printf("| %d³ | %d | %.1f | %.1f | %.2f |\n", n, th, k, o, k / o);
            kl_pool_free(pool);
        }
        kl_mem_free(A); kl_mem_free(B); kl_mem_free(C);
    }
    /* batch-1 fully connected shapes (M = 1) */
    printf("\n| GEMV-like M=1 (N x K) | threads | keel µs | OpenBLAS µs |\n|---|---|---|---|\n");
    int fc[][2] = {{1000, 512}, {1000, 1280}, {2048, 2048}};
    for (size_t f = 0; f < 3; f++) {
        int N = fc[f][0], K = fc[f][1];
        float *A = rnd((size_t)K), *B = rnd((size_t)K * N), *C = rnd((size_t)N);
        for (int th = 1; th <= 2; th++) {
            kl_pool *pool;
            kl_pool_new(th, &pool, NULL);
            double tk[200], to[200];
            int it = 100;
            for (int i = 0; i < it; i++) {
                double t0 = now_s();
                kl_gemm_f32(0, 1, 1, N, K, 1.0f, A, K, B, K, 0.0f, C, N, pool);
                tk[i] = now_s() - t0;
            }
            openblas_set_num_threads(th);
            for (int i = 0; i < it; i++) {
                double t0 = now_s();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
                to[i] = now_s() - t0;
            }
            openblas_set_num_threads(1);
            printf("| %d x %d | %d | %.1f | %.1f |\n", N, K, th, median(tk, it) * 1e6, median(to, it) * 1e6);
            kl_pool_free(pool);
        }
        kl_mem_free(A); kl_mem_free(B); kl_mem_free(C);
    }
}

/* Every conv of the network (reps = how many times the shape occurs). */
typedef struct { const char *name; int C, M, G, H, k, s, reps; } layer;

static const layer RESNET18[] = {
    {"conv1 7x7/2 3->64 @224", 3, 64, 1, 224, 7, 2, 1},
    {"layer1 3x3 64->64 @56", 64, 64, 1, 56, 3, 1, 4},
    {"layer2.0 3x3/2 64->128 @56", 64, 128, 1, 56, 3, 2, 1},
    {"layer2 3x3 128->128 @28", 128, 128, 1, 28, 3, 1, 3},
    {"layer2.ds 1x1/2 64->128 @56", 64, 128, 1, 56, 1, 2, 1},
    {"layer3.0 3x3/2 128->256 @28", 128, 256, 1, 28, 3, 2, 1},
    {"layer3 3x3 256->256 @14", 256, 256, 1, 14, 3, 1, 3},
    {"layer3.ds 1x1/2 128->256 @28", 128, 256, 1, 28, 1, 2, 1},
    {"layer4.0 3x3/2 256->512 @14", 256, 512, 1, 14, 3, 2, 1},
    {"layer4 3x3 512->512 @7", 512, 512, 1, 7, 3, 1, 3},
    {"layer4.ds 1x1/2 256->512 @14", 256, 512, 1, 14, 1, 2, 1},
};

static const layer MOBILENETV2[] = {
    {"conv 3x3/2 3->32 @224", 3, 32, 1, 224, 3, 2, 1},
    {"dw 3x3 32 @112", 32, 32, 32, 112, 3, 1, 1},
    {"pw 32->16 @112", 32, 16, 1, 112, 1, 1, 1},
    {"pw 16->96 @112", 16, 96, 1, 112, 1, 1, 1},
    {"dw 3x3/2 96 @112", 96, 96, 96, 112, 3, 2, 1},
    {"pw 96->24 @56", 96, 24, 1, 56, 1, 1, 1},
    {"pw 24->144 @56", 24, 144, 1, 56, 1, 1, 2},
    {"dw 3x3 144 @56", 144, 144, 144, 56, 3, 1, 1},
    {"pw 144->24 @56", 144, 24, 1, 56, 1, 1, 1},
    {"dw 3x3/2 144 @56", 144, 144, 144, 56, 3, 2, 1},
    {"pw 144->32 @28", 144, 32, 1, 28, 1, 1, 1},
    {"pw 32->192 @28", 32, 192, 1, 28, 1, 1, 3},
    {"dw 3x3 192 @28", 192, 192, 192, 28, 3, 1, 2},
    {"pw 192->32 @28", 192, 32, 1, 28, 1, 1, 2},
    {"dw 3x3/2 192 @28", 192, 192, 192, 28, 3, 2, 1},
    {"pw 192->64 @14", 192, 64, 1, 14, 1, 1, 1},
    {"pw 64->384 @14", 64, 384, 1, 14, 1, 1, 4},
    {"dw 3x3 384 @14", 384, 384, 384, 14, 3, 1, 4},
    {"pw 384->64 @14", 384, 64, 1, 14, 1, 1, 3},
    {"pw 384->96 @14", 384, 96, 1, 14, 1, 1, 1},
    {"pw 96->576 @14", 96, 576, 1, 14, 1, 1, 3},
    {"dw 3x3 576 @14", 576, 576, 576, 14, 3, 1, 2},
    {"pw 576->96 @14", 576, 96, 1, 14, 1, 1, 2},
    {"dw 3x3/2 576 @14", 576, 576, 576, 14, 3, 2, 1},
    {"pw 576->160 @7", 576, 160, 1, 7, 1, 1, 1},
    {"pw 160->960 @7", 160, 960, 1, 7, 1, 1, 3},
    {"dw 3x3 960 @7", 960, 960, 960, 7, 3, 1, 3},
    {"pw 960->160 @7", 960, 160, 1, 7, 1, 1, 2},
    {"pw 960->320 @7", 960, 320, 1, 7, 1, 1, 1},
    {"pw 320->1280 @7", 320, 1280, 1, 7, 1, 1, 1},
};

/* MobileNetV2's depthwise and 1x1 layers (and ResNet-18's 1x1/2
 * downsamples) on the blocked path (nchwc_dw.c / nchwc_pw.c through
 * kl_nchwc_conv_f32) vs today's NCHW path (dwconv.c, packed GEMM), batch B,
 * Clip(0, 6) fused; 1 thread median CPU time and 2 threads best wall time,
 * the two paths alternating in one loop. */
static void bench_mobile(int iters, int batch) {
    printf("\n## MobileNetV2 depthwise / 1x1 layers: NCHWc vs NCHW (batch %d, %d runs: 1 thread median CPU time, 2 "
           "threads best wall time; bias + Clip(0,6))\n", batch, iters);
    printf("| layer | reps | GFLOP | NCHW 1t CPU ms | NCHWc 1t CPU ms | NCHW 2t ms | NCHWc 2t ms | NCHWc/NCHW 1t | "
           "NCHWc/NCHW 2t |\n|---|---|---|---|---|---|---|---|---|\n");
    double tot[2][4] = {{0}};
    const layer extra[] = {
        {"resnet layer2.ds 1x1/2 64->128 @56", 64, 128, 1, 56, 1, 2, 1},
        {"resnet layer3.ds 1x1/2 128->256 @28", 128, 256, 1, 28, 1, 2, 1},
        {"resnet layer4.ds 1x1/2 256->512 @14", 256, 512, 1, 14, 1, 2, 1},
    };
    size_t nm = sizeof MOBILENETV2 / sizeof *MOBILENETV2;
    for (size_t i = 0; i < nm + 3; i++) {
        const layer *L = i < nm ? &MOBILENETV2[i] : &extra[i - nm];
        int dw = L->G > 1 && L->G == L->C && L->C == L->M;
        if (!dw && (L->G != 1 || L->k != 1)) continue;
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = batch; p.C = L->C; p.M = L->M; p.group = L->G;
        p.in[0] = p.in[1] = L->H;
        p.k[0] = p.k[1] = L->k;
        p.stride[0] = p.stride[1] = L->s;
        p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = L->k / 2;
        p.act = (kl_act){KL_ACT_CLIP, 0.0f, 6.0f};
        kl_conv_prepare(&p, NULL);
        size_t pfb = kl_nchwc_conv_packed_floats(&p);
        if (!pfb) {
            printf("| %s | NCHWc not available (no AVX-512F?) |\n", L->name);
            continue;
        }
        int64_t CB = (p.C + 15) / 16, MB = (p.M + 15) / 16, S = L->H * L->H, OS = p.out[0] * p.out[1];
        size_t xn = (size_t)(batch * p.C * S), xbn = (size_t)(batch * CB * S * 16);
        size_t wn = (size_t)(p.M * (p.C / p.group) * L->k * L->k);
        size_t yn = (size_t)(batch * p.M * OS), ybn = (size_t)(batch * MB * OS * 16);
        float *x = rnd(xn), *xb = rnd(xbn), *w = rnd(wn), *b = rnd((size_t)p.M), *y = rnd(yn), *yb = rnd(ybn);
        size_t pf = kl_conv_packed_floats(&p);
        float *pw = pf ? kl_mem_alloc(pf * sizeof(float), KL_TAG_PARAMS) : NULL;
        if (pw) kl_conv_pack_weights(&p, w, pw);
        float *pwb = kl_mem_alloc(pfb * sizeof(float), KL_TAG_PARAMS);
        kl_nchwc_conv_pack_weights(&p, w, pwb);
        kl_conv_params pb = p;
        pb.packed_w = pwb;
        p.packed_w = pw;
        size_t wsb = kl_conv_workspace_bytes(&p), wsbb = kl_nchwc_conv_workspace_bytes(&pb, 0);
        void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
        void *wsB = wsbb ? kl_mem_alloc(wsbb, KL_TAG_WORKSPACE) : NULL;
        double gf = 2.0 * (double)wn * (double)OS * batch * 1e-9, r[4];
        for (int th = 1; th <= 2; th++) {
            kl_pool *pool;
            kl_pool_new(th, &pool, NULL);
            double t0s[256], t1s[256];
            kl_conv_f32(&p, x, w, b, y, ws, pool, NULL);
            kl_nchwc_conv_f32(&pb, 0, xb, b, yb, wsB, pool, NULL);
            for (int it = 0; it < iters; it++) {
                double a0 = now_s(), c0 = cpu_s();
                kl_conv_f32(&p, x, w, b, y, ws, pool, NULL);
                double a1 = now_s(), c1 = cpu_s();
                kl_nchwc_conv_f32(&pb, 0, xb, b, yb, wsB, pool, NULL);
                double a2 = now_s(), c2 = cpu_s();
                t0s[it] = th == 1 ? c1 - c0 : a1 - a0;
                t1s[it] = th == 1 ? c2 - c1 : a2 - a1;
            }
            /* 1 thread: median CPU time; 2 threads: best wall time (least
             * disturbed by other load on the shared machine) */
            r[(th - 1) * 2] = th == 1 ? median(t0s, iters) * 1e3 : minv(t0s, iters) * 1e3;
            r[(th - 1) * 2 + 1] = th == 1 ? median(t1s, iters) * 1e3 : minv(t1s, iters) * 1e3;
            kl_pool_free(pool);
        }
        printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", L->name, L->reps, gf, r[0], r[1], r[2],
               r[3], r[1] / r[0], r[3] / r[2]);
        if (i < nm)
            for (int k = 0; k < 4; k++) tot[dw][k] += r[k] * L->reps;
        kl_mem_free(x); kl_mem_free(xb); kl_mem_free(w); kl_mem_free(b); kl_mem_free(y); kl_mem_free(yb);
        kl_mem_free(pw); kl_mem_free(pwb); kl_mem_free(ws); kl_mem_free(wsB);
    }
    for (int d = 0; d < 2; d++)
        printf("| **all MobileNetV2 %s convs** (sum x reps) | | | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
               d ? "depthwise" : "1x1", tot[d][0], tot[d][1], tot[d][2], tot[d][3], tot[d][1] / tot[d][0],
               tot[d][3] / tot[d][2]);
}

static void bench_layers(const char *model, const layer *L, size_t n, int iters) {
    printf("\n## %s conv layers (batch 1, median of %d, bias + ReLU fused)\n", model, iters);
    printf("| layer | reps | GFLOP | 1 thread CPU ms | 1 thread ms | 2 threads ms | 1t CPU GFLOP/s |\n|---|---|---|---|---|---|---|\n");
    double tot_cpu = 0, tot1 = 0, tot2 = 0;
    for (size_t i = 0; i < n; i++) {
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = 1; p.C = L[i].C; p.M = L[i].M; p.group = L[i].G;
        p.in[0] = p.in[1] = L[i].H;
        p.k[0] = p.k[1] = L[i].k;
        p.stride[0] = p.stride[1] = L[i].s;
        p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = L[i].k / 2;
        p.act.kind = KL_ACT_RELU;
        kl_conv_prepare(&p, NULL);
        size_t xn = (size_t)p.C * L[i].H * L[i].H, wn = (size_t)p.M * (p.C / p.group) * L[i].k * L[i].k;
        size_t yn = (size_t)p.M * p.out[0] * p.out[1];
        float *x = rnd(xn), *w = rnd(wn), *b = rnd((size_t)p.M), *y = rnd(yn);
        /* weights packed once, as a session does at load */
        size_t pf = kl_conv_packed_floats(&p);
        float *pw = pf ? kl_mem_alloc(pf * sizeof(float), KL_TAG_PARAMS) : NULL;
        if (pw) kl_conv_pack_weights(&p, w, pw);
        p.packed_w = pw;
        size_t wsb = kl_conv_workspace_bytes(&p);
        void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
        double gf = 2.0 * (double)wn * (double)(p.out[0] * p.out[1]) * 1e-9, ms[2], cpu_ms = 0;
        for (int th = 1; th <= 2; th++) {
            kl_pool *pool;
            kl_pool_new(th, &pool, NULL);
            double t[256];
            kl_conv_f32(&p, x, w, b, y, ws, pool, NULL);
            double tc[256];
            for (int it = 0; it < iters; it++) {
                double t0 = now_s(), c0 = cpu_s();
                kl_conv_f32(&p, x, w, b, y, ws, pool, NULL);
                t[it] = now_s() - t0;
                tc[it] = cpu_s() - c0;
            }
            ms[th - 1] = median(t, iters) * 1e3;
            if (th == 1) cpu_ms = median(tc, iters) * 1e3;
            kl_pool_free(pool);
        }
        printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.1f |\n", L[i].name, L[i].reps, gf, cpu_ms, ms[0], ms[1],
               gf / cpu_ms * 1e3);
        tot_cpu += cpu_ms * L[i].reps;
        tot1 += ms[0] * L[i].reps;
        tot2 += ms[1] * L[i].reps;
        kl_mem_free(x); kl_mem_free(w); kl_mem_free(b); kl_mem_free(y); kl_mem_free(ws); kl_mem_free(pw);
    }
    printf("| **all convs of the network** (sum x reps) | | | %.2f | %.2f | %.2f | |\n", tot_cpu, tot1, tot2);
}

/* Blocked (NCHWc) vs NCHW per dense layer: 1 thread CPU time (thread CPU
 * clock, robust to other load) and 2 threads wall time, medians; the two paths
 * alternate within one loop so they see the same machine state. The first
 * layer (C = 3) takes plain NCHW input on the blocked path, as in a network. */
static void bench_nchwc(const char *model, const layer *L, size_t n, int iters, int batch) {
    printf("\n## %s dense conv layers: NCHWc vs NCHW (batch %d, %d runs: 1 thread median CPU time, 2 threads best "
           "wall time; bias + ReLU fused)\n",
           model, batch, iters);
    printf("| layer | reps | GFLOP | NCHW 1t CPU ms | NCHWc 1t CPU ms | NCHWc 1t GFLOP/s | NCHW 2t min ms | NCHWc 2t min ms | "
           "NCHWc/NCHW 1t | NCHWc/NCHW 2t |\n|---|---|---|---|---|---|---|---|---|---|\n");
    double tot[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        if (L[i].G != 1) continue;
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = batch; p.C = L[i].C; p.M = L[i].M; p.group = 1;
        p.in[0] = p.in[1] = L[i].H;
        p.k[0] = p.k[1] = L[i].k;
        p.stride[0] = p.stride[1] = L[i].s;
        p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = L[i].k / 2;
        p.act.kind = KL_ACT_RELU;
        kl_conv_prepare(&p, NULL);
        size_t pfb = kl_nchwc_conv_packed_floats(&p);
        if (!pfb) {
            printf("| %s | NCHWc not available (no AVX-512F?) |\n", L[i].name);
            continue;
        }
        int plain = p.C == 3;
        int64_t CB = (p.C + 15) / 16, MB = (p.M + 15) / 16, S = L[i].H * L[i].H, OS = p.out[0] * p.out[1];
        size_t xn = (size_t)(batch * p.C * S), xbn = (size_t)(batch * CB * S * 16);
        size_t wn = (size_t)(p.M * p.C * L[i].k * L[i].k);
        size_t yn = (size_t)(batch * p.M * OS), ybn = (size_t)(batch * MB * OS * 16);
        float *x = rnd(xn), *xb = rnd(xbn), *w = rnd(wn), *b = rnd((size_t)p.M), *y = rnd(yn), *yb = rnd(ybn);
        size_t pf = kl_conv_packed_floats(&p);
        float *pw = pf ? kl_mem_alloc(pf * sizeof(float), KL_TAG_PARAMS) : NULL;
        if (pw) kl_conv_pack_weights(&p, w, pw);
        float *pwb = kl_mem_alloc(pfb * sizeof(float), KL_TAG_PARAMS);
        kl_nchwc_conv_pack_weights(&p, w, pwb);
        kl_conv_params pb = p;
        pb.packed_w = pwb;
        p.packed_w = pw;
        size_t wsb = kl_conv_workspace_bytes(&p), wsbb = kl_nchwc_conv_workspace_bytes(&pb, plain);
        void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
        void *wsB = wsbb ? kl_mem_alloc(wsbb, KL_TAG_WORKSPACE) : NULL;
        double gf = 2.0 * (double)wn * (double)OS * batch * 1e-9, r[4];
        for (int th = 1; th <= 2; th++) {
            kl_pool *pool;
            kl_pool_new(th, &pool, NULL);
            double t0s[64], t1s[64];
            kl_conv_f32(&p, x, w, b, y, ws, pool, NULL);
            kl_nchwc_conv_f32(&pb, plain, plain ? x : xb, b, yb, wsB, pool, NULL);
            for (int it = 0; it < iters; it++) {
                double a0 = now_s(), c0 = cpu_s();
                kl_conv_f32(&p, x, w, b, y, ws, pool, NULL);
                double a1 = now_s(), c1 = cpu_s();
                kl_nchwc_conv_f32(&pb, plain, plain ? x : xb, b, yb, wsB, pool, NULL);
                double a2 = now_s(), c2 = cpu_s();
                t0s[it] = th == 1 ? c1 - c0 : a1 - a0;
                t1s[it] = th == 1 ? c2 - c1 : a2 - a1;
            }
            /* 1 thread: median CPU time; 2 threads: best wall time (the
             * moments the shared machine gave both cores) */
            r[(th - 1) * 2] = (th == 1 ? median(t0s, iters) : minv(t0s, iters)) * 1e3;
            r[(th - 1) * 2 + 1] = (th == 1 ? median(t1s, iters) : minv(t1s, iters)) * 1e3;
            kl_pool_free(pool);
        }
        printf("| %s | %d | %.3f | %.3f | %.3f | %.1f | %.3f | %.3f | %.2f | %.2f |\n", L[i].name, L[i].reps, gf, r[0],
               r[1], gf / r[1] * 1e3, r[2], r[3], r[1] / r[0], r[3] / r[2]);
        for (int k = 0; k < 4; k++) tot[k] += r[k] * L[i].reps;
        kl_mem_free(x); kl_mem_free(xb); kl_mem_free(w); kl_mem_free(b); kl_mem_free(y); kl_mem_free(yb);
        kl_mem_free(pw); kl_mem_free(pwb); kl_mem_free(ws); kl_mem_free(wsB);
    }
    printf("| **all dense convs** (sum x reps) | | | %.2f | %.2f | | %.2f | %.2f | %.2f | %.2f |\n", tot[0], tot[1],
           tot[2], tot[3], tot[1] / tot[0], tot[3] / tot[2]);
}

/* Winograd F(4x4, 3x3) (nchwc_wino.c) vs the direct blocked kernel on the
 * 3x3 stride-1 layers, same packed weights (both forms), the two paths
 * alternating: 1 thread median CPU time, 2 threads best wall time. */
static void bench_wino(const char *model, const layer *L, size_t n, int iters, int batch) {
    printf("\n## %s 3x3 stride-1 layers: NCHWc direct vs Winograd F(4x4,3x3) (batch %d, %d runs; bias + ReLU)\n",
           model, batch, iters);
    printf("| layer | reps | direct 1t CPU ms | wino 1t CPU ms | wino/direct 1t | direct 2t min ms | wino 2t min ms | "
           "wino/direct 2t | auto |\n|---|---|---|---|---|---|---|---|---|\n");
    double tot[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        if (L[i].G != 1 || L[i].k != 3 || L[i].s != 1) continue;
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = batch; p.C = L[i].C; p.M = L[i].M; p.group = 1;
        p.in[0] = p.in[1] = L[i].H;
        p.k[0] = p.k[1] = 3;
        p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
        p.act.kind = KL_ACT_RELU;
        kl_conv_prepare(&p, NULL);
        size_t pfb = kl_nchwc_conv_packed_floats(&p);
        if (!pfb) {
            printf("| %s | NCHWc not available (no AVX-512F?) |\n", L[i].name);
            continue;
        }
        int keep = kl_settings_get()->wino_use;
        size_t wsb = kl_nchwc_conv_workspace_bytes(&p, 0);
        kl_settings_mut()->wino_use = 1;
        size_t wsw = kl_nchwc_conv_workspace_bytes(&p, 0);
        kl_settings_mut()->wino_use = keep;
        int autow = wsb > 0;
        int64_t CB = (p.C + 15) / 16, MB = (p.M + 15) / 16, S = L[i].H * L[i].H, OS = p.out[0] * p.out[1];
        size_t xbn = (size_t)(batch * CB * S * 16), wn = (size_t)(p.M * p.C * 9), ybn = (size_t)(batch * MB * OS * 16);
        float *xb = rnd(xbn), *w = rnd(wn), *b = rnd((size_t)p.M), *yb = rnd(ybn);
        float *pwb = kl_mem_alloc(pfb * sizeof(float), KL_TAG_PARAMS);
        kl_nchwc_conv_pack_weights(&p, w, pwb);
        p.packed_w = pwb;
        void *ws = kl_mem_alloc(KL_MAX(wsw, 64), KL_TAG_WORKSPACE);
        double r[4];
        for (int th = 1; th <= 2; th++) {
            kl_pool *pool;
            kl_pool_new(th, &pool, NULL);
            double t0s[64], t1s[64];
            for (int it = -1; it < iters; it++) {
                kl_settings_mut()->wino_use = 0;
                double a0 = now_s(), c0 = cpu_s();
                kl_nchwc_conv_f32(&p, 0, xb, b, yb, ws, pool, NULL);
                double a1 = now_s(), c1 = cpu_s();
                kl_settings_mut()->wino_use = 1;
                kl_nchwc_conv_f32(&p, 0, xb, b, yb, ws, pool, NULL);
                double a2 = now_s(), c2 = cpu_s();
                if (it < 0) continue;
                t0s[it] = th == 1 ? c1 - c0 : a1 - a0;
                t1s[it] = th == 1 ? c2 - c1 : a2 - a1;
            }
            kl_settings_mut()->wino_use = keep;
            r[(th - 1) * 2] = (th == 1 ? median(t0s, iters) : minv(t0s, iters)) * 1e3;
            r[(th - 1) * 2 + 1] = (th == 1 ? median(t1s, iters) : minv(t1s, iters)) * 1e3;
            kl_pool_free(pool);
        }
        printf("| %s | %d | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f | %s |\n", L[i].name, L[i].reps, r[0], r[1],
               r[1] / r[0], r[2], r[3], r[3] / r[2], autow ? "wino" : "direct");
        for (int k = 0; k < 4; k++) tot[k] += r[k] * L[i].reps;
        kl_mem_free(xb); kl_mem_free(w); kl_mem_free(b); kl_mem_free(yb); kl_mem_free(pwb); kl_mem_free(ws);
    }
    printf("| **all 3x3/1 convs** (sum x reps) | | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | |\n", tot[0], tot[1],
           tot[1] / tot[0], tot[2], tot[3], tot[3] / tot[2]);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    int iters = argc > 2 ? atoi(argv[2]) : 9;
    if (iters < 1) iters = 1;
    if (iters > 64) iters = 64;
    if (!strcmp(what, "gemm") || !strcmp(what, "all")) bench_gemm(iters);
    if (!strcmp(what, "conv") || !strcmp(what, "all")) {
        bench_layers("ResNet-18", RESNET18, sizeof RESNET18 / sizeof *RESNET18, iters * 2);
        bench_layers("MobileNetV2", MOBILENETV2, sizeof MOBILENETV2 / sizeof *MOBILENETV2, iters * 4);
    }
    if (!strcmp(what, "mobile")) {
        int batch = argc > 3 ? atoi(argv[3]) : 1;
        bench_mobile(batch > 1 ? KL_MAX(5, iters / 2) : KL_MIN(iters * 4, 256), batch < 1 ? 1 : batch);
    }
    if (!strcmp(what, "nchwc") || !strcmp(what, "all")) {
        int batch = argc > 3 ? atoi(argv[3]) : 1;
        if (batch < 1) batch = 1;
        bench_nchwc("ResNet-18", RESNET18, sizeof RESNET18 / sizeof *RESNET18, batch > 1 ? KL_MAX(3, iters / 3) : iters * 2,
                    batch);
    }
    if (!strcmp(what, "wino")) {
        int batch = argc > 3 ? atoi(argv[3]) : 1;
        if (batch < 1) batch = 1;
        bench_wino("ResNet-18", RESNET18, sizeof RESNET18 / sizeof *RESNET18, batch > 1 ? KL_MAX(3, iters / 3) : iters * 2,
                   batch);
    }
    return 0;
}
