/* Unit tests of the NCHWc layout helpers (src/tensor/nchwc.c): reorders in
 * and out (odd channel counts, spatial sizes not a multiple of the 16x16
 * tile, padding lanes zero, round trip exact), blocked max/average pooling
 * (pads, strides, dilations, ceil_mode, count_include_pad) and global
 * average pooling against the NCHW kernels, and 1 vs 2 threads
 * bit-identical. Under KEEL_NO_AVX512=1 the plain C paths run the same
 * checks. */
#include "../harness.h"
#include "tt.h"

#include <math.h>

static int64_t cb_of(int64_t C) { return (C + 15) / 16; }

/* reference reorder: blocked index of (n, c, s) */
static int64_t bidx(int64_t C, int64_t S, int64_t n, int64_t c, int64_t s) {
    return ((n * cb_of(C) + c / 16) * S + s) * 16 + c % 16;
}

KL_TEST(tensor_nchwc_reorder) {
    struct { int64_t N, C, S; } cs[] = {{1, 1, 1}, {1, 3, 50}, {2, 16, 16}, {1, 17, 33}, {3, 40, 7}, {1, 64, 300}, {2, 35, 257}, {1, 96, 49}};
    for (size_t t = 0; t < KL_ARRAY_LEN(cs); t++) {
        int64_t N = cs[t].N, C = cs[t].C, S = cs[t].S, nb = N * cb_of(C) * S * 16, np = N * C * S;
        float *x = tt_randn(np, 7 + t), *y1 = malloc(sizeof(float) * nb), *y2 = malloc(sizeof(float) * nb);
        float *z1 = malloc(sizeof(float) * np), *z2 = malloc(sizeof(float) * np);
        for (int64_t i = 0; i < nb; i++) y1[i] = y2[i] = NAN; /* every lane must be written */
        kl_nchwc_reorder_in(N, C, S, x, y1, tt_pool(1));
        kl_nchwc_reorder_in(N, C, S, x, y2, tt_pool(2));
        KT_CHECK(!memcmp(y1, y2, sizeof(float) * nb));
        int bad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < cb_of(C) * 16; c++)
                for (int64_t s = 0; s < S; s++) {
                    float want = c < C ? x[(n * C + c) * S + s] : 0.0f;
                    int64_t bi = ((n * cb_of(C) + c / 16) * S + s) * 16 + c % 16;
                    if (memcmp(&y1[bi], &want, sizeof want)) bad++;
                }
        KT_CHECKF(!bad, "reorder_in N%lld C%lld S%lld: %d wrong", (long long)N, (long long)C, (long long)S, bad);
        kl_nchwc_reorder_out(N, C, S, y1, z1, tt_pool(1));
        kl_nchwc_reorder_out(N, C, S, y1, z2, tt_pool(2));
        KT_CHECK(!memcmp(z1, x, sizeof(float) * np));
        KT_CHECK(!memcmp(z2, x, sizeof(float) * np));
        KT_EQ_INT(bidx(C, S, 0, 0, 0), 0);
        free(x); free(y1); free(y2); free(z1); free(z2);
    }
}

static void blocked(int64_t N, int64_t C, int64_t S, const float *x, float *y) { kl_nchwc_reorder_in(N, C, S, x, y, NULL); }

KL_TEST(tensor_nchwc_pool) {
    kl_err e = {0};
    struct { int64_t N, C, H, W, k0, k1, s0, s1, d0, d1, pb0, pb1, pe0, pe1; int ceil, cip; } cs[] = {
        {1, 64, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0},  /* ResNet stem */
        {2, 3, 7, 9, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0},
        {1, 20, 9, 8, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1, 0},      /* ceil_mode */
        {1, 17, 10, 11, 3, 2, 1, 2, 2, 1, 1, 0, 2, 1, 0, 1},    /* dilation, asymmetric pads */
        {2, 33, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},      /* count_include_pad */
        {1, 5, 5, 13, 5, 1, 3, 1, 1, 1, 2, 0, 2, 0, 1, 1},
    };
    for (size_t t = 0; t < KL_ARRAY_LEN(cs); t++) {
        kl_pooling_params p = {.nsp = 2, .N = cs[t].N, .C = cs[t].C, .in = {cs[t].H, cs[t].W}, .k = {cs[t].k0, cs[t].k1},
                               .stride = {cs[t].s0, cs[t].s1}, .dilation = {cs[t].d0, cs[t].d1}, .pad_begin = {cs[t].pb0, cs[t].pb1},
                               .pad_end = {cs[t].pe0, cs[t].pe1}, .ceil_mode = cs[t].ceil, .count_include_pad = cs[t].cip};
        KT_OK(kl_pooling_prepare(&p, &e), &e);
        int64_t N = p.N, C = p.C, S = p.in[0] * p.in[1], OS = p.out[0] * p.out[1], CB = cb_of(C);
        float *x = tt_randn(N * C * S, 100 + t), *xb = malloc(sizeof(float) * N * CB * S * 16);
        float *ref = malloc(sizeof(float) * N * C * OS), *yb1 = malloc(sizeof(float) * N * CB * OS * 16);
        float *yb2 = malloc(sizeof(float) * N * CB * OS * 16), *got = malloc(sizeof(float) * N * C * OS);
        blocked(N, C, S, x, xb);
        for (int avg = 0; avg < 2; avg++) {
            if (avg) {
                kl_avgpool_f32(&p, x, ref, NULL);
                kl_nchwc_avgpool_f32(&p, xb, yb1, tt_pool(1));
                kl_nchwc_avgpool_f32(&p, xb, yb2, tt_pool(2));
            } else {
                kl_maxpool_f32(&p, x, ref, NULL, NULL);
                kl_nchwc_maxpool_f32(&p, xb, yb1, tt_pool(1));
                kl_nchwc_maxpool_f32(&p, xb, yb2, tt_pool(2));
            }
            KT_CHECK(!memcmp(yb1, yb2, sizeof(float) * N * CB * OS * 16));
            int bad = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = C; c < CB * 16; c++)
                    for (int64_t s = 0; s < OS; s++) bad += yb1[((n * CB + c / 16) * OS + s) * 16 + c % 16] != 0.0f;
            KT_CHECKF(!bad, "case %zu avg %d: %d padding lanes not zero", t, avg, bad);
            kl_nchwc_reorder_out(N, C, OS, yb1, got, NULL);
            /* max: exact; average: the same taps summed in the same order */
            KT_CHECKF(tt_maxdiff(got, ref, N * C * OS) <= (avg ? 1e-6 : 0), "case %zu avg %d: max diff %g", t, avg,
                      tt_maxdiff(got, ref, N * C * OS));
        }
        free(x); free(xb); free(ref); free(yb1); free(yb2); free(got);
    }
}

KL_TEST(tensor_nchwc_global_avgpool) {
    struct { int64_t N, C, S; } cs[] = {{1, 512, 49}, {2, 3, 1}, {3, 40, 7}, {1, 1280, 49}, {2, 17, 130}};
    for (size_t t = 0; t < KL_ARRAY_LEN(cs); t++) {
        int64_t N = cs[t].N, C = cs[t].C, S = cs[t].S, CB = cb_of(C);
        float *x = tt_randn(N * C * S, 300 + t), *xb = malloc(sizeof(float) * N * CB * S * 16);
        float *ref = malloc(sizeof(float) * N * C), *y1 = malloc(sizeof(float) * N * CB * 16), *y2 = malloc(sizeof(float) * N * CB * 16);
        float *got = malloc(sizeof(float) * N * C);
        blocked(N, C, S, x, xb);
        kl_global_avgpool_f32(N, C, S, x, ref, NULL);
        kl_nchwc_global_avgpool_f32(N, C, S, xb, y1, tt_pool(1));
        kl_nchwc_global_avgpool_f32(N, C, S, xb, y2, tt_pool(2));
        KT_CHECK(!memcmp(y1, y2, sizeof(float) * N * CB * 16));
        int bad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = C; c < CB * 16; c++) bad += y1[(n * CB + c / 16) * 16 + c % 16] != 0.0f;
        KT_CHECK(!bad);
        kl_nchwc_reorder_out(N, C, 1, y1, got, NULL);
        /* another summation order than the NCHW kernel: rounding only */
        KT_CHECKF(tt_maxdiff(got, ref, N * C) <= 1e-6, "case %zu: max diff %g", t, tt_maxdiff(got, ref, N * C));
        free(x); free(xb); free(ref); free(y1); free(y2); free(got);
    }
}

KL_TEST(tensor_nchwc_ok_env) {
    kl_settings s;
    char *off[] = {"KEEL_NO_NCHWC=1", NULL}, *zero[] = {"KEEL_NO_NCHWC=0", NULL}, *none[] = {NULL};
    kl_settings_parse(&s, off);
    KT_EQ_INT(s.nchwc, 0);
    kl_settings_parse(&s, zero);
    KT_EQ_INT(s.nchwc, 1);
    kl_settings_parse(&s, none);
    KT_EQ_INT(s.nchwc, 1);
    int keep = kl_settings_get()->nchwc;
    kl_settings_mut()->nchwc = 0;
    KT_EQ_INT(kl_nchwc_ok(), 0);
    kl_settings_mut()->nchwc = keep;
}
