/* Unit tests of the NCHWc depthwise and pointwise kernels (src/tensor/
 * nchwc_dw.c, nchwc_pw.c) against kl_conv_f32 (NCHW) on data reordered to
 * and from the blocked layout by a scalar helper: channel counts that are not
 * multiples of 16, strides 1 and 2, pads, dilation, batch > 1, bias,
 * residual + Clip(0, 6), the generic activation epilogue, padding lanes
 * written as 0, nothing written past the output, and bit-identical results
 * at 1 and 2 threads; the generic paths (1x1 with pads or stride 3, plain
 * NCHW input) too. The kernels need AVX-512F: without it (or under
 * KEEL_NO_AVX512) the blocked path is never taken and the cases only check
 * the packed sizes. */
#include "../harness.h"
#include "tt.h"
#include "tensor/tensor_int.h"

#include <math.h>

/* ==================================================================
 * Scalar reorder blocked (N, CB, S, 16) -> NCHW (N, C, S) (tt_to_blocked:
 * the other way)
 * ================================================================== */

static void from_blocked(const float *x, int64_t N, int64_t C, int64_t S, float *y) {
    int64_t CB = (C + 15) / 16;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) y[(n * C + c) * S + s] = x[((n * CB + c / 16) * S + s) * 16 + c % 16];
}

/* 1 when every padding lane (channel >= C) of blocked x is +0. */
static int pad_lanes_zero(const float *x, int64_t N, int64_t C, int64_t S) {
    int64_t CB = (C + 15) / 16;
    for (int64_t n = 0; n < N; n++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t c = C; c < CB * 16; c++) {
                float v = x[((n * CB + CB - 1) * S + s) * 16 + c % 16];
                if (v != 0.0f || signbit(v)) return 0;
            }
    return 1;
}

/* ==================================================================
 * One case: reference NCHW conv vs the blocked kernel at 1 and 2 threads
 * ================================================================== */

typedef struct {
    double maxdiff;
    int same, tail, pads;
} outcome;

static void run_case(kl_conv_params *p, int dw, int plain, int with_bias, int with_res, uint64_t seed, outcome *o) {
    kl_err e = {0};
    memset(o, 0, sizeof *o);
    int64_t S = p->in[0] * p->in[1], OS = p->out[0] * p->out[1];
    int64_t wn = p->M * (p->C / p->group) * p->k[0] * p->k[1];
    int64_t xn = p->N * p->C * S, yn = p->N * p->M * OS, MB = (p->M + 15) / 16, ybn = p->N * MB * OS * 16;
    float *x = tt_randn(xn, seed), *w = tt_randn(wn, seed + 1), *b = tt_randn(p->M, seed + 2);
    float *res = with_res ? tt_randn(yn, seed + 3) : NULL;
    for (int64_t i = 0; i < yn && res; i++) res[i] *= 4.0f;
    float *ref = calloc((size_t)yn, 4), *got = calloc((size_t)yn, 4);
    kl_conv_params q = *p;
    q.packed_w = NULL;
    q.residual = res;
    if (kl_conv_f32(&q, x, w, with_bias ? b : NULL, ref, NULL, tt_pool(1), &e)) {
        o->maxdiff = INFINITY;
        goto done;
    }
    float *xb = tt_to_blocked(x, p->N, p->C, S), *rb = res ? tt_to_blocked(res, p->N, p->M, OS) : NULL;
    size_t pf = dw ? kl__nchwc_dw_packed_floats(p) : kl__nchwc_pw_packed_floats(p);
    float *pw = malloc(pf * sizeof(float));
    if (dw) kl__nchwc_dw_pack(p, w, pw);
    else kl__nchwc_pw_pack(p, w, pw);
    float *y1 = malloc((size_t)(ybn + 1) * 4), *y2 = malloc((size_t)(ybn + 1) * 4);
    for (int64_t i = 0; i <= ybn; i++) y1[i] = y2[i] = NAN;
    y1[ybn] = y2[ybn] = 12345.0f;
    kl_conv_params r = *p;
    r.packed_w = pw;
    r.residual = rb;
    const float *xin = plain ? x : xb;
    if (dw) {
        kl__nchwc_dw_f32(&r, plain, xin, with_bias ? b : NULL, y1, tt_pool(1));
        kl__nchwc_dw_f32(&r, plain, xin, with_bias ? b : NULL, y2, tt_pool(2));
    } else {
        kl__nchwc_pw_f32(&r, plain, xin, with_bias ? b : NULL, y1, tt_pool(1));
        kl__nchwc_pw_f32(&r, plain, xin, with_bias ? b : NULL, y2, tt_pool(2));
    }
    from_blocked(y1, p->N, p->M, OS, got);
    o->maxdiff = tt_maxdiff(ref, got, yn);
    o->same = memcmp(y1, y2, (size_t)ybn * 4) == 0;
    o->tail = y1[ybn] == 12345.0f && y2[ybn] == 12345.0f;
    o->pads = pad_lanes_zero(y1, p->N, p->M, OS);
    free(xb); free(rb); free(pw); free(y1); free(y2);
done:
    free(x); free(w); free(b); free(res); free(ref); free(got);
}

static int blocked_ok(void) { return kl__pgemm_ok(); }

/* ==================================================================
 * Depthwise
 * ================================================================== */

KL_TEST(tensor_nchwc_dw_vs_nchw) {
    kl_err e = {0};
    struct {
        int64_t N, C, H, W, kh, kw, sy, sx, dy, dx, pt, pl, pb, pr;
        kl_act act;
        int bias, res, plain;
    } cs[] = {
        /* MobileNetV2 shapes (reduced planes), 3x3 stride 1 and 2, pad 1 */
        {1, 32, 20, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        {2, 24, 17, 19, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        {1, 20, 14, 14, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, {KL_ACT_RELU, 0, 0}, 1, 0, 0},
        {3, 3, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_NONE, 0, 0}, 0, 0, 0},
        /* residual + Clip(0,6) (residual scaled so the clip bites) */
        {2, 33, 9, 23, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_CLIP, 0, 6}, 1, 1, 0},
        /* Clip with min > 0: padding lanes must still be 0 */
        {1, 5, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_CLIP, 0.25f, 0.5f}, 1, 0, 0},
        /* generic epilogue (HardSwish, Sigmoid) */
        {1, 18, 8, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_HARDSWISH, 0, 0}, 1, 1, 0},
        {2, 7, 5, 9, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_SIGMOID, 0, 0}, 1, 0, 0},
        /* other kernels, strides, dilation, asymmetric pads, tiny planes */
        {1, 17, 13, 15, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, {KL_ACT_RELU, 0, 0}, 1, 0, 0},
        {2, 16, 9, 12, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, {KL_ACT_NONE, 0, 0}, 1, 1, 0},
        {1, 40, 6, 30, 1, 7, 1, 3, 1, 1, 0, 3, 0, 2, {KL_ACT_CLIP, -1, 1}, 1, 0, 0},
        {1, 9, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_RELU, 0, 0}, 1, 0, 0},
        {1, 4, 1, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, {KL_ACT_NONE, 0, 0}, 1, 0, 0},
        {1, 21, 4, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, {KL_ACT_NONE, 0, 0}, 0, 0, 0},
        {1, 19, 10, 10, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        {1, 3, 11, 26, 3, 3, 1, 2, 1, 3, 1, 0, 2, 1, {KL_ACT_RELU, 0, 0}, 1, 0, 0},
        {1, 48, 30, 30, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        /* plain NCHW input (the generic path) */
        {2, 19, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, {KL_ACT_CLIP, 0, 6}, 1, 1, 1},
        {1, 3, 8, 7, 5, 3, 1, 1, 1, 2, 2, 1, 0, 1, {KL_ACT_HARDSWISH, 0, 0}, 1, 0, 1},
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2;
        p.N = cs[c].N;
        p.C = p.M = p.group = cs[c].C;
        p.in[0] = cs[c].H; p.in[1] = cs[c].W;
        p.k[0] = cs[c].kh; p.k[1] = cs[c].kw;
        p.stride[0] = cs[c].sy; p.stride[1] = cs[c].sx;
        p.dilation[0] = cs[c].dy; p.dilation[1] = cs[c].dx;
        p.pad_begin[0] = cs[c].pt; p.pad_begin[1] = cs[c].pl;
        p.pad_end[0] = cs[c].pb; p.pad_end[1] = cs[c].pr;
        p.act = cs[c].act;
        KT_OK(kl_conv_prepare(&p, &e), &e);
        KT_CHECKF(kl__nchwc_dw_ok(&p), "dw case %zu not taken", c);
        KT_EQ_INT((long long)kl__nchwc_dw_packed_floats(&p), (long long)((p.C + 15) / 16 * 16 * p.k[0] * p.k[1]));
        if (!blocked_ok()) continue;
        outcome o;
        run_case(&p, 1, cs[c].plain, cs[c].bias, cs[c].res, 100 + c * 7, &o);
        KT_CHECKF(o.maxdiff < 2e-5, "dw case %zu (C %lld %lldx%lld k%lldx%lld s%lld) maxdiff %g", c,
                  (long long)p.C, (long long)p.in[0], (long long)p.in[1], (long long)p.k[0], (long long)p.k[1],
                  (long long)p.stride[0], o.maxdiff);
        KT_CHECKF(o.same, "dw case %zu differs between 1 and 2 threads", c);
        KT_CHECKF(o.tail, "dw case %zu wrote past the output", c);
        KT_CHECKF(o.pads, "dw case %zu: padding lanes not 0", c);
    }
    /* not depthwise */
    kl_conv_params g;
    memset(&g, 0, sizeof g);
    g.nsp = 2; g.N = 1; g.C = 8; g.M = 16; g.group = 8; g.k[0] = g.k[1] = 3;
    KT_CHECK(!kl__nchwc_dw_ok(&g));
}

/* ==================================================================
 * Pointwise
 * ================================================================== */

KL_TEST(tensor_nchwc_pw_vs_nchw) {
    kl_err e = {0};
    struct {
        int64_t N, C, M, H, W, sy, sx, pt, pl, pb, pr;
        kl_act act;
        int bias, res, plain;
    } cs[] = {
        /* MobileNetV2-like (reduced planes): every output-group size 1..4 and tails */
        {1, 32, 16, 12, 12, 1, 1, 0, 0, 0, 0, {KL_ACT_NONE, 0, 0}, 1, 0, 0},
        {1, 16, 96, 11, 13, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        {2, 96, 24, 9, 9, 1, 1, 0, 0, 0, 0, {KL_ACT_NONE, 0, 0}, 1, 1, 0},
        {1, 24, 144, 7, 8, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        {1, 144, 32, 5, 5, 1, 1, 0, 0, 0, 0, {KL_ACT_NONE, 0, 0}, 1, 0, 0},
        {1, 160, 960, 3, 3, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        {1, 320, 1280, 2, 2, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        /* channels not multiples of 16, residual + Clip(0,6), batch > 1 */
        {3, 17, 33, 6, 7, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 1, 0},
        {2, 40, 72, 10, 3, 1, 1, 0, 0, 0, 0, {KL_ACT_RELU, 0, 0}, 0, 1, 0},
        {1, 3, 5, 4, 4, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0.25f, 0.5f}, 1, 0, 0},
        /* stride 2 (ResNet downsample), and 2 in one direction only */
        {1, 64, 128, 14, 14, 2, 2, 0, 0, 0, 0, {KL_ACT_NONE, 0, 0}, 1, 0, 0},
        {2, 24, 40, 9, 11, 2, 2, 0, 0, 0, 0, {KL_ACT_RELU, 0, 0}, 1, 1, 0},
        {1, 20, 36, 7, 9, 2, 1, 0, 0, 0, 0, {KL_ACT_NONE, 0, 0}, 1, 0, 0},
        {1, 20, 36, 7, 30, 1, 2, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 1, 0},
        /* generic epilogue */
        {1, 12, 20, 5, 6, 1, 1, 0, 0, 0, 0, {KL_ACT_SIGMOID, 0, 0}, 1, 1, 0},
        {2, 33, 70, 6, 5, 2, 2, 0, 0, 0, 0, {KL_ACT_HARDSWISH, 0, 0}, 1, 0, 0},
        /* a big plane (several position chunks per image) */
        {1, 32, 48, 40, 40, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 0, 0},
        /* many input channels */
        {1, 400, 40, 5, 6, 1, 1, 0, 0, 0, 0, {KL_ACT_CLIP, 0, 6}, 1, 1, 0},
        {2, 600, 20, 5, 30, 2, 2, 0, 0, 0, 0, {KL_ACT_RELU, 0, 0}, 0, 0, 0},
        {1, 1000, 70, 4, 7, 1, 1, 0, 0, 0, 0, {KL_ACT_HARDSWISH, 0, 0}, 1, 1, 0},
        /* the generic path: pads, stride 3, plain NCHW input */
        {2, 20, 40, 7, 8, 1, 1, 1, 0, 2, 1, {KL_ACT_CLIP, 0.5f, 6}, 1, 1, 0},
        {1, 33, 17, 10, 11, 3, 3, 0, 0, 0, 0, {KL_ACT_RELU, 0, 0}, 1, 0, 0},
        {2, 3, 24, 9, 6, 2, 2, 0, 0, 0, 0, {KL_ACT_SIGMOID, 0, 0}, 1, 1, 1},
        {1, 21, 70, 5, 5, 1, 1, 1, 1, 1, 1, {KL_ACT_NONE, 0, 0}, 0, 0, 1},
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2;
        p.N = cs[c].N;
        p.C = cs[c].C;
        p.M = cs[c].M;
        p.group = 1;
        p.in[0] = cs[c].H; p.in[1] = cs[c].W;
        p.k[0] = p.k[1] = 1;
        p.stride[0] = cs[c].sy; p.stride[1] = cs[c].sx;
        p.pad_begin[0] = cs[c].pt; p.pad_begin[1] = cs[c].pl;
        p.pad_end[0] = cs[c].pb; p.pad_end[1] = cs[c].pr;
        p.act = cs[c].act;
        KT_OK(kl_conv_prepare(&p, &e), &e);
        KT_CHECKF(kl__nchwc_pw_ok(&p), "pw case %zu not taken", c);
        KT_EQ_INT((long long)kl__nchwc_pw_packed_floats(&p), (long long)((p.M + 15) / 16 * 16 * p.C));
        if (!blocked_ok()) continue;
        outcome o;
        run_case(&p, 0, cs[c].plain, cs[c].bias, cs[c].res, 300 + c * 7, &o);
        KT_CHECKF(o.maxdiff < 5e-5, "pw case %zu (%lld->%lld %lldx%lld s%lld,%lld) maxdiff %g", c, (long long)p.C,
                  (long long)p.M, (long long)p.in[0], (long long)p.in[1], (long long)p.stride[0],
                  (long long)p.stride[1], o.maxdiff);
        KT_CHECKF(o.same, "pw case %zu differs between 1 and 2 threads", c);
        KT_CHECKF(o.tail, "pw case %zu wrote past the output", c);
        KT_CHECKF(o.pads, "pw case %zu: padding lanes not 0", c);
    }
    /* taken by the weight shape only (any stride / pads): not 3x3, groups, 1-D */
    kl_conv_params g;
    memset(&g, 0, sizeof g);
    g.nsp = 2; g.N = 1; g.C = 8; g.M = 16; g.group = 1; g.k[0] = g.k[1] = 1;
    KT_CHECK(kl__nchwc_pw_ok(&g));
    g.k[0] = 3;
    KT_CHECK(!kl__nchwc_pw_ok(&g));
    g.k[0] = 1; g.group = 2;
    KT_CHECK(!kl__nchwc_pw_ok(&g));
    g.group = 1; g.nsp = 1;
    KT_CHECK(!kl__nchwc_pw_ok(&g));
}
