/* Unit tests of the NCHWc dense conv kernel (src/tensor/nchwc_conv.c):
 * kl_nchwc_conv_f32 on blocked (N, CB, H, W, 16) data against kl_conv_f32 on
 * the same data in NCHW (converted by a scalar reorder of the test's own),
 * over odd shapes (C, M not multiples of 16, 1x1, 3x3, 5x5, 7x7/2 plain input,
 * strides 1-3, dilation, asymmetric pads, batch > 1), fused residual and every
 * activation kind; padding lanes of y must be exactly 0 and the result
 * bit-identical with 1-, 2- and 3-thread pools. Without AVX-512F the
 * blocked path reports 0 packed floats (the conv stays NCHW). */
#include "../harness.h"
#include "tt.h"
#include "tensor/tensor_int.h"

/* nchwc_conv.c: outputs of at least this many bytes use streaming stores. */
extern size_t kl__nchwc_stream_bytes;

/* One case: returns a message on failure, NULL on success. */
typedef struct {
    int64_t N, C, M, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    int plain, res, bias;
    kl_act_kind act;
} ncase;

static int run_case(const ncase *cs, int idx, char *msg, size_t msz) {
    kl_err e = {0};
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = cs->N; p.C = cs->C; p.M = cs->M; p.group = 1;
    p.in[0] = cs->H; p.in[1] = cs->W;
    p.k[0] = cs->kh; p.k[1] = cs->kw;
    p.stride[0] = cs->sh; p.stride[1] = cs->sw;
    p.dilation[0] = cs->dh; p.dilation[1] = cs->dw;
    p.pad_begin[0] = cs->pt; p.pad_begin[1] = cs->pl; p.pad_end[0] = cs->pb; p.pad_end[1] = cs->pr;
    p.act = (kl_act){cs->act, -0.25f, 0.5f};
    if (cs->act == KL_ACT_LEAKY_RELU) p.act.a = 0.1f;
    if (kl_conv_prepare(&p, &e) != KL_OK) {
        snprintf(msg, msz, "case %d: prepare: %s", idx, e.msg);
        return 1;
    }
    int64_t OH = p.out[0], OW = p.out[1], S = cs->H * cs->W, OS = OH * OW;
    int64_t CB = (p.C + 15) / 16, MB = (p.M + 15) / 16;
    int64_t xn = p.N * p.C * S, wn = p.M * p.C * p.k[0] * p.k[1], yn = p.N * p.M * OS, ybn = p.N * MB * OS * 16;
    float *x = tt_randn(xn, 11 + idx), *w = tt_randn(wn, 12 + idx), *b = tt_randn(p.M, 13 + idx);
    float *res = cs->res ? tt_randn(yn, 14 + idx) : NULL;
    float *xb = tt_to_blocked(x, p.N, p.C, S), *rb = res ? tt_to_blocked(res, p.N, p.M, OS) : NULL;
    float *ref = calloc((size_t)yn, 4), *refb = NULL;
    /* 64-byte aligned like arena tensors (streaming stores need it) */
    float *y1 = kl_mem_alloc((size_t)ybn * 4, KL_TAG_OTHER), *y2 = kl_mem_alloc((size_t)ybn * 4, KL_TAG_OTHER);
    float *y3 = kl_mem_alloc((size_t)ybn * 4, KL_TAG_OTHER);
    for (int64_t i = 0; i < ybn; i++) y1[i] = y2[i] = y3[i] = NAN;  /* every element must be written */
    const float *bias = cs->bias ? b : NULL;
    int fail = 0;
    p.residual = res;
    if (kl_conv_f32(&p, x, w, bias, ref, NULL, tt_pool(1), &e) != KL_OK) {
        snprintf(msg, msz, "case %d: reference: %s", idx, e.msg);
        fail = 1;
        goto done;
    }
    refb = tt_to_blocked(ref, p.N, p.M, OS);
    size_t pf = kl_nchwc_conv_packed_floats(&p);
    /* 1x1: the pointwise kernel's layout (nchwc_pw.c); k x k with C < 16
     * (the stem): C input rows per tap instead of 16 */
    size_t want = p.k[0] * p.k[1] == 1 ? (size_t)(MB * p.C * 16)
                                       : (size_t)(MB * CB * p.k[0] * p.k[1] * (p.C < 16 ? p.C : 16) * 16);
    if (kl__nchwc_wino_ok(&p)) want += kl__nchwc_wino_packed_floats(&p); /* + Winograd form (nchwc_wino.c) */
    if (pf != want) {
        snprintf(msg, msz, "case %d: packed floats %zu", idx, pf);
        fail = 1;
        goto done;
    }
    float *pw = kl_mem_alloc(pf * sizeof(float), KL_TAG_PARAMS);
    kl_nchwc_conv_pack_weights(&p, w, pw);
    p.packed_w = pw;
    p.residual = rb;
    size_t wsb = kl_nchwc_conv_workspace_bytes(&p, cs->plain);
    void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
    int rc1 = kl_nchwc_conv_f32(&p, cs->plain, cs->plain ? x : xb, bias, y1, ws, tt_pool(1), &e);
    int rc2 = rc1 == KL_OK ? kl_nchwc_conv_f32(&p, cs->plain, cs->plain ? x : xb, bias, y2, ws, tt_pool(2), &e) : rc1;
    /* 3 threads: rows split at other places (tiles change, bits must not) */
    if (rc2 == KL_OK) rc2 = kl_nchwc_conv_f32(&p, cs->plain, cs->plain ? x : xb, bias, y3, ws, tt_pool(3), &e);
    kl_mem_free(pw);
    kl_mem_free(ws);
    if (rc1 != KL_OK || rc2 != KL_OK) {
        snprintf(msg, msz, "case %d: nchwc conv: %s", idx, e.msg);
        fail = 1;
        goto done;
    }
    double tol = 2e-5 * (1 + (double)(p.C * p.k[0] * p.k[1]) / 64.0), md = 0;
    int64_t bad = tt_cmp_blocked(y1, refb, ybn, OS, MB, p.M, &md);
    if (bad >= 0) {
        snprintf(msg, msz, "case %d: padding lane %lld = %g (must be 0)", idx, (long long)bad, y1[bad]);
        fail = 1;
    } else if (!(md <= tol)) {
        snprintf(msg, msz, "case %d (N%lld C%lld M%lld %lldx%lld k%lldx%lld s%lld,%lld plain %d act %d): maxdiff %g > %g",
                 idx, (long long)p.N, (long long)p.C, (long long)p.M, (long long)cs->H, (long long)cs->W,
                 (long long)cs->kh, (long long)cs->kw, (long long)cs->sh, (long long)cs->sw, cs->plain, cs->act, md,
                 tol);
        fail = 1;
    } else if (memcmp(y1, y2, (size_t)ybn * 4) || memcmp(y1, y3, (size_t)ybn * 4)) {
        snprintf(msg, msz, "case %d: 1, 2 and 3 threads differ", idx);
        fail = 1;
    }
done:
    free(x); free(w); free(b); free(res); free(xb); free(rb); free(ref); free(refb); kl_mem_free(y1); kl_mem_free(y2); kl_mem_free(y3);
    return fail;
}

static kl_conv_params dense_params(int64_t C, int64_t M, int64_t k) {
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = 1; p.C = C; p.M = M; p.group = 1;
    p.in[0] = p.in[1] = 8; p.k[0] = p.k[1] = k;
    return p;
}

KL_TEST(tensor_nchwc_conv_vs_nchw) {
    kl_conv_params d = dense_params(16, 16, 3);
    if (!kl_nchwc_conv_packed_floats(&d)) {
        /* no AVX-512F (or KEEL_NO_AVX512): the blocked path must be off everywhere */
        KT_CHECK(kl_gemm_packed_b_floats(4, 4) == 0);
        return;
    }
    static const ncase cs[] = {
        /* N  C   M   H   W  kh kw sh sw dh dw pt pl pb pr plain res bias act */
        {1, 16, 16, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, KL_ACT_NONE},
        {1, 5, 7, 9, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},     /* C, M < 16 */
        {2, 20, 33, 11, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_CLIP},  /* stride 2, batch 2 */
        {1, 64, 64, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},  /* ResNet-like */
        {1, 40, 80, 9, 23, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, KL_ACT_NONE},   /* 1x1 */
        {3, 33, 50, 13, 11, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, 1, 0, KL_ACT_RELU},  /* 1x1 stride 2, no bias */
        {1, 3, 64, 37, 41, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 0, 1, KL_ACT_RELU},   /* stem, plain input */
        {2, 3, 20, 23, 21, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 1, 1, KL_ACT_CLIP},   /* stem, batch 2, residual */
        {1, 3, 32, 30, 30, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 1, 0, 1, KL_ACT_CLIP},   /* MobileNet stem: pad end only */
        {1, 19, 17, 12, 15, 3, 3, 1, 1, 1, 1, 2, 0, 1, 3, 0, 1, 1, KL_ACT_RELU},  /* asymmetric pads */
        {1, 7, 9, 15, 17, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 0, 1, 1, KL_ACT_RELU},    /* dilation 2 */
        {1, 5, 11, 9, 40, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_NONE},    /* stride 3 */
        {1, 4, 9, 10, 9, 5, 5, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, KL_ACT_NONE},     /* 5x5/2 plain */
        {1, 6, 10, 8, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, KL_ACT_RELU},     /* plain stride 1 */
        {1, 300, 40, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},   /* several channel chunks */
        {1, 520, 70, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_CLIP},
        {1, 16, 100, 4, 30, 3, 1, 1, 2, 1, 1, 1, 0, 1, 0, 0, 1, 1, KL_ACT_NONE},  /* 3x1, mixed strides */
        {1, 17, 24, 2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},    /* all columns are border */
        {1, 17, 24, 6, 7, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 1, KL_ACT_NONE},    /* 5x5, every column border */
        {1, 8, 16, 5, 5, 3, 3, 1, 1, 1, 1, 3, 3, 3, 3, 0, 0, 1, KL_ACT_CLIP},     /* rows/cols entirely padding */
        {1, 24, 40, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_LEAKY_RELU},
        {1, 24, 40, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_SIGMOID},
        {1, 24, 40, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, KL_ACT_TANH},
        {1, 24, 40, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_HARDSWISH},
        {1, 24, 40, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, KL_ACT_GELU},
        {4, 48, 130, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},   /* batch 4, 9 output blocks */
        {1, 20, 36, 13, 12, 9, 9, 1, 1, 1, 1, 4, 4, 4, 4, 0, 1, 1, KL_ACT_RELU},   /* 81 taps: no gather tiles */
        {2, 18, 40, 9, 17, 9, 9, 2, 1, 1, 1, 4, 3, 2, 5, 1, 0, 1, KL_ACT_CLIP},   /* 81 taps, plain, asymmetric */
        {1, 32, 48, 10, 11, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3, 0, 1, 1, KL_ACT_RELU},   /* 1x7 */
        {1, 32, 48, 10, 11, 7, 1, 1, 1, 1, 1, 3, 0, 3, 0, 0, 1, 0, KL_ACT_NONE},   /* 7x1 */
        {1, 96, 96, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},    /* 6 blocks: groups 3 + 3 */
        {1, 16, 16, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_HARDSWISH}, /* 4x4 image */
        /* weight prefetch: next chunk, next group, next image's first group; input-row prefetch */
        {2, 300, 80, 10, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},  /* 3 chunks x 2 groups, stride 2 */
        {1, 256, 96, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, KL_ACT_RELU},   /* layer4-like 7x7, 2 chunks */
        {2, 40, 20, 19, 33, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 0, 1, KL_ACT_NONE},  /* plain, 40 channel planes */
    };
    char msg[512];
    int wino = kl_settings_get()->wino_use;
    kl_settings_mut()->wino_use = 0; /* the direct kernel (Winograd: test_nchwc_wino.c) */
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        int f = run_case(&cs[c], (int)c, msg, sizeof msg);
        KT_CHECKF(!f, "%s", msg);
    }
    /* the streaming-store path of large outputs, on small ones */
    size_t keep = kl__nchwc_stream_bytes;
    kl__nchwc_stream_bytes = 0;
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c += 3) {
        int f = run_case(&cs[c], (int)c, msg, sizeof msg);
        KT_CHECKF(!f, "streaming stores: %s", msg);
    }
    kl__nchwc_stream_bytes = keep;
    kl_settings_mut()->wino_use = wino;
}

KL_TEST(tensor_nchwc_conv_support) {
    kl_conv_params p = dense_params(32, 32, 3);
    size_t dense = kl_nchwc_conv_packed_floats(&p);
    if (!dense) return;  /* no AVX-512F: checked in tensor_nchwc_conv_vs_nchw */
    KT_EQ_INT((long long)dense, 2 * 2 * 9 * 256 + 36 * 2 * 32 * 16); /* direct + Winograd (3x3 stride 1) */
    p.stride[0] = p.stride[1] = 2;
    KT_EQ_INT((long long)kl_nchwc_conv_packed_floats(&p), 2 * 2 * 9 * 256);
    p.stride[0] = p.stride[1] = 1;
    p.group = 2;  /* grouped (not depthwise): stays NCHW */
    KT_EQ_INT((long long)kl_nchwc_conv_packed_floats(&p), 0);
    p.nsp = 1;
    p.group = 1;
    KT_EQ_INT((long long)kl_nchwc_conv_packed_floats(&p), 0);
    /* unpacked weights are an error, not a crash */
    kl_conv_params q = dense_params(16, 16, 3);
    kl_err e = {0};
    KT_OK(kl_conv_prepare(&q, &e), &e);
    float x[8 * 8 * 16] = {0}, y[8 * 8 * 16];
    KT_CHECK(kl_nchwc_conv_f32(&q, 0, x, NULL, y, NULL, NULL, &e) == KL_EINVAL);
}
