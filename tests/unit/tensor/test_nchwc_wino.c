/* Unit tests of the NCHWc Winograd F(4x4, 3x3) path (src/tensor/nchwc_wino.c)
 * through kl_nchwc_conv_f32 with the Winograd path forced on: against
 * kl_conv_f32 (NCHW) on the same data within an explicit tolerance, over
 * C, M in {3, 16, 24, 64, 70}, H/W in {1, 2, 5, 7, 8, 14, 15}, pads 0 / 1 /
 * asymmetric, batch 1 and 3, bias, residual and every activation kind;
 * padding lanes of y exactly 0, and bit-identical results with 1, 2 and 3
 * threads (and with a one-slot workspace: slot mode's own allocation). Also: which convs get the Winograd form, the automatic choice,
 * and that the direct kernel gives the same result within tolerance. */
#include "../harness.h"
#include "tt.h"
#include "tensor/tensor_int.h"

#include <math.h>

typedef struct {
    int64_t N, C, M, H, W, pt, pl, pb, pr;
    int res, bias;
    kl_act_kind act;
} wcase;

/* Runs one case with Winograd forced (wino 1) or off (0); y1 gets the
 * blocked result (ybn floats, caller frees with kl_mem_free); *maxd the max
 * abs difference to the NCHW reference. Returns a failure message or NULL. */
static int run_wcase(const wcase *cs, int idx, int wino, float **yout, double *maxd, char *msg, size_t msz) {
    kl_err e = {0};
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = cs->N; p.C = cs->C; p.M = cs->M; p.group = 1;
    p.in[0] = cs->H; p.in[1] = cs->W;
    p.k[0] = p.k[1] = 3;
    p.pad_begin[0] = cs->pt; p.pad_begin[1] = cs->pl; p.pad_end[0] = cs->pb; p.pad_end[1] = cs->pr;
    p.act = (kl_act){cs->act, -0.25f, 0.5f};
    if (cs->act == KL_ACT_LEAKY_RELU) p.act.a = 0.1f;
    *yout = NULL;
    if (kl_conv_prepare(&p, &e) != KL_OK) {
        snprintf(msg, msz, "case %d: prepare: %s", idx, e.msg);
        return 1;
    }
    int64_t OH = p.out[0], OW = p.out[1], S = cs->H * cs->W, OS = OH * OW, MB = (p.M + 15) / 16;
    int64_t xn = p.N * p.C * S, wn = p.M * p.C * 9, yn = p.N * p.M * OS, ybn = p.N * MB * OS * 16;
    float *x = tt_randn(xn, 21 + idx), *w = tt_randn(wn, 22 + idx), *b = tt_randn(p.M, 23 + idx);
    float *res = cs->res ? tt_randn(yn, 24 + idx) : NULL;
    float *xb = tt_to_blocked(x, p.N, p.C, S), *rb = res ? tt_to_blocked(res, p.N, p.M, OS) : NULL;
    float *ref = calloc((size_t)(yn > 0 ? yn : 1), 4), *refb = NULL, *pw = NULL;
    float *y1 = kl_mem_alloc((size_t)(ybn + 16) * 4, KL_TAG_OTHER), *y2 = kl_mem_alloc((size_t)(ybn + 16) * 4, KL_TAG_OTHER);
    float *y3 = kl_mem_alloc((size_t)(ybn + 16) * 4, KL_TAG_OTHER), *y4 = kl_mem_alloc((size_t)(ybn + 16) * 4, KL_TAG_OTHER);
    void *ws = NULL, *ws1 = NULL;
    for (int64_t i = 0; i < ybn + 16; i++) y1[i] = y2[i] = y3[i] = y4[i] = NAN;  /* every element must be written */
    const float *bias = cs->bias ? b : NULL;
    int fail = 0, keep = kl_settings_get()->wino_use;
    kl_settings_mut()->wino_use = wino;
    p.residual = res;
    if (kl_conv_f32(&p, x, w, bias, ref, NULL, tt_pool(1), &e) != KL_OK) {
        snprintf(msg, msz, "case %d: reference: %s", idx, e.msg);
        fail = 1;
        goto done;
    }
    refb = tt_to_blocked(ref, p.N, p.M, OS);
    size_t pf = kl_nchwc_conv_packed_floats(&p);
    if (!kl__nchwc_wino_ok(&p) || pf < kl__nchwc_wino_packed_floats(&p) || kl__nchwc_wino_use(&p, 0) != wino) {
        snprintf(msg, msz, "case %d: not a Winograd conv (packed floats %zu)", idx, pf);
        fail = 1;
        goto done;
    }
    pw = kl_mem_alloc(pf * sizeof(float), KL_TAG_PARAMS);
    kl_nchwc_conv_pack_weights(&p, w, pw);
    p.packed_w = pw;
    p.residual = rb;
    size_t wsb = kl_nchwc_conv_workspace_bytes(&p, 0);
    if (wino && !wsb) {
        snprintf(msg, msz, "case %d: no workspace", idx);
        fail = 1;
        goto done;
    }
    ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
    int rc = kl_nchwc_conv_f32(&p, 0, xb, bias, y1, ws, tt_pool(1), &e);
    if (rc == KL_OK) rc = kl_nchwc_conv_f32(&p, 0, xb, bias, y2, ws, tt_pool(2), &e);
    if (rc == KL_OK) rc = kl_nchwc_conv_f32(&p, 0, xb, bias, y3, NULL, tt_pool(3), &e); /* own workspace */
    if (rc == KL_OK) { /* a workspace of one slot, 3 chunks: slot mode allocates its own slots */
        int ks = kl__nchwc_wino_slots;
        kl__nchwc_wino_slots = 1;
        ws1 = kl_mem_alloc(kl_nchwc_conv_workspace_bytes(&p, 0), KL_TAG_WORKSPACE);
        rc = kl_nchwc_conv_f32(&p, 0, xb, bias, y4, ws1, tt_pool(3), &e);
        kl__nchwc_wino_slots = ks;
    }
    if (rc != KL_OK) {
        snprintf(msg, msz, "case %d: nchwc conv: %s", idx, e.msg);
        fail = 1;
        goto done;
    }
    /* F(4x4, 3x3) rounding: a few ulp of the sum of |terms| (inputs, weights
     * in [-1, 1]), growing with the 9 C taps */
    double tol = 4e-6 * (double)(p.C * 9 + 8), md = 0;
    int64_t bad = tt_cmp_blocked(y1, refb, ybn, OS, MB, p.M, &md);
    for (int64_t i = ybn; i < ybn + 16 && bad < 0; i++)
        if (!isnan(y1[i])) bad = i;
    *maxd = md;
    if (bad >= 0) {
        snprintf(msg, msz, "case %d: %s %lld = %g", idx, bad >= ybn ? "written past the end" : "padding lane (must be 0)",
                 (long long)bad, y1[bad]);
        fail = 1;
    } else if (!(md <= tol)) {
        snprintf(msg, msz, "case %d (N%lld C%lld M%lld %lldx%lld pads %lld,%lld,%lld,%lld act %d wino %d): maxdiff %g > %g",
                 idx, (long long)p.N, (long long)p.C, (long long)p.M, (long long)cs->H, (long long)cs->W,
                 (long long)cs->pt, (long long)cs->pl, (long long)cs->pb, (long long)cs->pr, cs->act, wino, md, tol);
        fail = 1;
    } else if (memcmp(y1, y2, (size_t)ybn * 4) || memcmp(y1, y3, (size_t)ybn * 4) || memcmp(y1, y4, (size_t)ybn * 4)) {
        snprintf(msg, msz, "case %d: 1, 2 and 3 threads differ", idx);
        fail = 1;
    }
done:
    kl_settings_mut()->wino_use = keep;
    free(x); free(w); free(b); free(res); free(xb); free(rb); free(ref); free(refb);
    kl_mem_free(pw); kl_mem_free(ws); kl_mem_free(ws1); kl_mem_free(y2); kl_mem_free(y3); kl_mem_free(y4);
    if (fail) kl_mem_free(y1);
    else *yout = y1;
    return fail;
}

KL_TEST(tensor_nchwc_wino_vs_nchw) {
    if (!tt_nchwc_on()) {  /* no AVX-512F / KEEL_NO_AVX512: the blocked path is off */
        KT_CHECK(kl_gemm_packed_b_floats(4, 4) == 0);
        return;
    }
    static const int64_t chans[] = {3, 16, 24, 64, 70};
    static const int64_t sizes[] = {1, 2, 5, 7, 8, 14, 15};
    static const kl_act_kind acts[] = {KL_ACT_NONE, KL_ACT_RELU, KL_ACT_CLIP, KL_ACT_LEAKY_RELU,
                                       KL_ACT_SIGMOID, KL_ACT_TANH, KL_ACT_HARDSWISH, KL_ACT_GELU};
    char msg[512];
    int idx = 0;
    double worst = 0;
    /* a spread of the C x M x H x W x pad x batch grid (not the full product:
     * the unit run stays short) */
    for (int ci = 0; ci < 5; ci++)
        for (int mi = 0; mi < 5; mi++)
            for (int hi = 0; hi < 7; hi++) {
                if ((ci + 2 * mi + 3 * hi) % 4) continue;
                int64_t H = sizes[hi], W = sizes[(hi + ci + mi) % 7];
                int pad = (ci + mi + hi) % 2 || H < 3 || W < 3;
                wcase c = {(ci + hi) % 3 == 0 ? 3 : 1, chans[ci], chans[mi], H, W, pad, pad, pad, pad,
                           (mi + hi) % 2, (ci + hi) % 3 != 1, acts[idx % 8]};
                float *y;
                double md;
                int f = run_wcase(&c, idx++, 1, &y, &md, msg, sizeof msg);
                KT_CHECKF(!f, "%s", msg);
                kl_mem_free(y);
                if (md > worst) worst = md;
            }
    static const wcase extra[] = {
        /* N  C   M   H   W  pt pl pb pr res bias act */
        {1, 64, 64, 56, 56, 1, 1, 1, 1, 1, 1, KL_ACT_RELU},    /* ResNet layer 1 */
        {2, 128, 128, 28, 28, 1, 1, 1, 1, 0, 1, KL_ACT_RELU},  /* layer 2, batch 2 */
        {1, 256, 256, 14, 14, 1, 1, 1, 1, 1, 1, KL_ACT_RELU},  /* layer 3 */
        {2, 512, 96, 7, 7, 1, 1, 1, 1, 1, 1, KL_ACT_RELU},     /* layer 4-like, 6 blocks */
        {1, 19, 17, 12, 15, 2, 0, 1, 3, 1, 1, KL_ACT_RELU},    /* asymmetric pads */
        {1, 8, 16, 5, 5, 3, 3, 3, 3, 0, 1, KL_ACT_CLIP},       /* tiles entirely padding */
        {3, 70, 40, 9, 10, 0, 0, 0, 0, 1, 0, KL_ACT_NONE},     /* no pads, no bias */
        {1, 40, 200, 6, 6, 1, 1, 1, 1, 1, 1, KL_ACT_RELU},     /* 13 output blocks */
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(extra); i++) {
        float *y;
        double md;
        int f = run_wcase(&extra[i], idx++, 1, &y, &md, msg, sizeof msg);
        KT_CHECKF(!f, "%s", msg);
        kl_mem_free(y);
        if (md > worst) worst = md;
    }
    if (getenv("KEEL_TEST_VERBOSE")) fprintf(stderr, "winograd max abs error vs NCHW: %g\n", worst);
}

/* Winograd and the direct kernel agree within the tolerance on the same case. */
KL_TEST(tensor_nchwc_wino_vs_direct) {
    if (!tt_nchwc_on()) return;
    wcase c = {2, 48, 40, 11, 13, 1, 1, 1, 1, 1, 1, KL_ACT_NONE};
    float *yw, *yd;
    double mw, mdd;
    char msg[512];
    int f = run_wcase(&c, 100, 1, &yw, &mw, msg, sizeof msg);
    KT_CHECKF(!f, "%s", msg);
    if (f) return;
    f = run_wcase(&c, 100, 0, &yd, &mdd, msg, sizeof msg);
    KT_CHECKF(!f, "%s", msg);
    if (!f) {
        int64_t n = 2 * 3 * 11 * 13 * 16;
        KT_CHECK(tt_maxdiff(yw, yd, n) <= 4e-6 * (48 * 9 + 8) * 2);
        KT_CHECK(memcmp(yw, yd, (size_t)n * 4) != 0); /* really two paths */
        kl_mem_free(yd);
    }
    kl_mem_free(yw);
}

/* Which convs carry the Winograd form and take the path. */
KL_TEST(tensor_nchwc_wino_support) {
    if (!tt_nchwc_on()) return;
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = 1; p.C = 64; p.M = 64; p.group = 1; p.k[0] = p.k[1] = 3;
    p.in[0] = p.in[1] = 56; p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
    kl_err e = {0};
    KT_OK(kl_conv_prepare(&p, &e), &e);
    KT_CHECK(kl__nchwc_wino_ok(&p));
    KT_EQ_INT((long long)kl__nchwc_wino_packed_floats(&p), 36 * 64 * 64);
    KT_CHECK(kl__nchwc_wino_use(&p, 1) == 0);          /* never with plain input */
    p.stride[0] = 2;
    KT_CHECK(!kl__nchwc_wino_ok(&p));
    p.stride[0] = 1; p.dilation[1] = 2;
    KT_CHECK(!kl__nchwc_wino_ok(&p));
    p.dilation[1] = 1; p.k[1] = 5;
    KT_CHECK(!kl__nchwc_wino_ok(&p));
    p.k[1] = 3; p.group = 2;
    KT_CHECK(!kl__nchwc_wino_ok(&p));
}
