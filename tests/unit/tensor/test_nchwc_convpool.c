/* Unit tests of the fused NCHWc conv + max pooling (kl_nchwc_conv_maxpool_f32
 * in src/tensor/nchwc_conv.c): bit-identical to kl_nchwc_conv_f32 followed
 * by kl_nchwc_maxpool_f32 over plain and blocked inputs, strides 1 and 2,
 * pools 3x3/2 pad 1 (ResNet's stem), 2x2/2, 3x3/1, asymmetric pads and odd
 * sizes, batch 1 and 3, with 1, 2 and 3 threads and a one-slot workspace
 * (chunks beyond it allocate their own rings); which convs and pools the
 * fused path takes. */
#include "../harness.h"
#include "tt.h"
#include "tensor/tensor_int.h"

extern int kl__nchwc_pool_slots;

typedef struct {
    int64_t N, C, M, H, W, k, s, cpad;  /* conv: square kernel k, stride s, pads cpad */
    int64_t pk, ps, pt, pl, pb, pr;     /* pool: kernel, stride, pads */
    int plain;
} pcase;

static int run_pcase(const pcase *cs, int idx, char *msg, size_t msz) {
    kl_err e = {0};
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = cs->N; p.C = cs->C; p.M = cs->M; p.group = 1;
    p.in[0] = cs->H; p.in[1] = cs->W;
    p.k[0] = p.k[1] = cs->k;
    p.stride[0] = p.stride[1] = cs->s;
    for (int i = 0; i < 2; i++) p.pad_begin[i] = p.pad_end[i] = cs->cpad;
    p.act = (kl_act){KL_ACT_RELU, 0, 0};
    if (kl_conv_prepare(&p, &e) != KL_OK) { snprintf(msg, msz, "case %d: conv prepare: %s", idx, e.msg); return 1; }
    kl_pooling_params q;
    memset(&q, 0, sizeof q);
    q.nsp = 2; q.N = p.N; q.C = p.M;
    q.in[0] = p.out[0]; q.in[1] = p.out[1];
    q.k[0] = q.k[1] = cs->pk;
    q.stride[0] = q.stride[1] = cs->ps;
    q.dilation[0] = q.dilation[1] = 1;
    q.pad_begin[0] = cs->pt; q.pad_begin[1] = cs->pl; q.pad_end[0] = cs->pb; q.pad_end[1] = cs->pr;
    if (kl_pooling_prepare(&q, &e) != KL_OK) { snprintf(msg, msz, "case %d: pool prepare: %s", idx, e.msg); return 1; }
    if (!kl_nchwc_conv_maxpool_ok(&p, &q)) { snprintf(msg, msz, "case %d: not a fused conv + pool", idx); return 1; }
    int64_t S = cs->H * cs->W, OS = p.out[0] * p.out[1], PS = q.out[0] * q.out[1], MB = (p.M + 15) / 16;
    float *x = tt_randn(p.N * p.C * S, 31 + idx), *w = tt_randn(p.M * p.C * cs->k * cs->k, 32 + idx);
    float *b = tt_randn(p.M, 33 + idx);
    float *xb = cs->plain ? NULL : tt_to_blocked(x, p.N, p.C, S);
    float *pw = kl_mem_alloc(kl_nchwc_conv_packed_floats(&p) * sizeof(float), KL_TAG_PARAMS);
    kl_nchwc_conv_pack_weights(&p, w, pw);
    p.packed_w = pw;
    size_t yn = (size_t)(p.N * MB * PS * 16);
    float *conv = kl_mem_alloc((size_t)(p.N * MB * OS * 16) * 4, KL_TAG_OTHER), *ref = kl_mem_alloc(yn * 4, KL_TAG_OTHER);
    float *y[4];
    for (int i = 0; i < 4; i++) {
        y[i] = kl_mem_alloc(yn * 4, KL_TAG_OTHER);
        for (size_t j = 0; j < yn; j++) y[i][j] = NAN; /* every element must be written */
    }
    const float *xin = cs->plain ? x : xb;
    int fail = 0;
    size_t wsb = kl_nchwc_conv_maxpool_workspace_bytes(&p, &q);
    void *ws = kl_mem_alloc(wsb, KL_TAG_WORKSPACE), *ws1 = NULL;
    int rc = kl_nchwc_conv_f32(&p, cs->plain, xin, b, conv, NULL, tt_pool(1), &e);
    if (rc == KL_OK) kl_nchwc_maxpool_f32(&q, conv, ref, tt_pool(1));
    if (rc == KL_OK) rc = kl_nchwc_conv_maxpool_f32(&p, cs->plain, &q, xin, b, y[0], ws, tt_pool(1), &e);
    if (rc == KL_OK) rc = kl_nchwc_conv_maxpool_f32(&p, cs->plain, &q, xin, b, y[1], ws, tt_pool(2), &e);
    if (rc == KL_OK) rc = kl_nchwc_conv_maxpool_f32(&p, cs->plain, &q, xin, b, y[2], NULL, tt_pool(3), &e);
    if (rc == KL_OK) {
        int keep = kl__nchwc_pool_slots;
        kl__nchwc_pool_slots = 1;
        ws1 = kl_mem_alloc(kl_nchwc_conv_maxpool_workspace_bytes(&p, &q), KL_TAG_WORKSPACE);
        rc = kl_nchwc_conv_maxpool_f32(&p, cs->plain, &q, xin, b, y[3], ws1, tt_pool(3), &e);
        kl__nchwc_pool_slots = keep;
    }
    if (rc != KL_OK) {
        snprintf(msg, msz, "case %d: %s", idx, e.msg);
        fail = 1;
    }
    for (int i = 0; i < 4 && !fail; i++)
        if (memcmp(y[i], ref, yn * 4)) {
            snprintf(msg, msz, "case %d (N%lld C%lld M%lld %lldx%lld k%lld s%lld, pool %lld/%lld): run %d differs from conv then maxpool (max diff %g)",
                     idx, (long long)p.N, (long long)p.C, (long long)p.M, (long long)cs->H, (long long)cs->W, (long long)cs->k,
                     (long long)cs->s, (long long)cs->pk, (long long)cs->ps, i, tt_maxdiff(y[i], ref, (int64_t)yn));
            fail = 1;
        }
    free(x); free(w); free(b); free(xb);
    kl_mem_free(pw); kl_mem_free(conv); kl_mem_free(ref); kl_mem_free(ws); kl_mem_free(ws1);
    for (int i = 0; i < 4; i++) kl_mem_free(y[i]);
    return fail;
}

KL_TEST(tensor_nchwc_convpool_vs_separate) {
    if (!tt_nchwc_on()) return; /* no AVX-512F: the blocked path is off (test_nchwc_conv.c checks that) */
    static const pcase cases[] = {
        /* N  C   M   H   W  k  s cpad pk ps pt pl pb pr plain */
        {1, 3, 64, 40, 36, 7, 2, 3, 3, 2, 1, 1, 1, 1, 1},   /* ResNet's stem, small image */
        {3, 3, 64, 23, 29, 7, 2, 3, 3, 2, 1, 1, 1, 1, 1},   /* odd sizes, batch 3 */
        {2, 3, 20, 17, 17, 3, 2, 1, 2, 2, 0, 0, 0, 0, 1},   /* 2x2/2 pool, 2 output blocks */
        {1, 20, 70, 15, 13, 3, 2, 1, 3, 1, 1, 1, 1, 1, 0},  /* blocked input, 5 blocks (2 groups), 3x3/1 pool */
        {2, 16, 32, 12, 14, 5, 1, 2, 3, 2, 0, 1, 2, 1, 0},  /* 5x5 stride 1 (direct), asymmetric pool pads */
        {1, 8, 16, 9, 9, 7, 2, 3, 3, 3, 1, 1, 1, 1, 1},     /* pool stride 3 = kernel */
    };
    char msg[512];
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        int f = run_pcase(&cases[i], (int)i, msg, sizeof msg);
        KT_CHECKF(!f, "%s", msg);
    }
}

KL_TEST(tensor_nchwc_convpool_support) {
    if (!tt_nchwc_on()) return;
    kl_err e = {0};
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = 1; p.C = 3; p.M = 64; p.group = 1; p.k[0] = p.k[1] = 7;
    p.in[0] = p.in[1] = 224; p.stride[0] = p.stride[1] = 2;
    for (int i = 0; i < 2; i++) p.pad_begin[i] = p.pad_end[i] = 3;
    KT_OK(kl_conv_prepare(&p, &e), &e);
    kl_pooling_params q;
    memset(&q, 0, sizeof q);
    q.nsp = 2; q.N = 1; q.C = 64; q.in[0] = q.in[1] = 112; q.k[0] = q.k[1] = 3; q.stride[0] = q.stride[1] = 2;
    q.dilation[0] = q.dilation[1] = 1;
    for (int i = 0; i < 2; i++) q.pad_begin[i] = q.pad_end[i] = 1;
    KT_OK(kl_pooling_prepare(&q, &e), &e);
    KT_CHECK(kl_nchwc_conv_maxpool_ok(&p, &q));
    KT_CHECK(kl_nchwc_conv_maxpool_workspace_bytes(&p, &q) > 0);
    q.dilation[0] = 2;
    KT_CHECK(!kl_nchwc_conv_maxpool_ok(&p, &q));      /* dilated pool */
    q.dilation[0] = 1; q.ceil_mode = 1;
    KT_CHECK(!kl_nchwc_conv_maxpool_ok(&p, &q));      /* ceil mode */
    q.ceil_mode = 0; q.in[0] = 111;
    KT_CHECK(!kl_nchwc_conv_maxpool_ok(&p, &q));      /* not the conv's output */
    q.in[0] = 112;
    float r = 0;
    p.residual = &r;
    KT_CHECK(!kl_nchwc_conv_maxpool_ok(&p, &q));      /* residual */
    p.residual = NULL;
    p.C = 16; p.k[0] = p.k[1] = 3; p.stride[0] = p.stride[1] = 1; p.in[0] = p.in[1] = 112;
    for (int i = 0; i < 2; i++) p.pad_begin[i] = p.pad_end[i] = 1;
    KT_OK(kl_conv_prepare(&p, &e), &e);
    KT_CHECK(!kl_nchwc_conv_maxpool_ok(&p, &q));      /* a Winograd 3x3 conv */
}
