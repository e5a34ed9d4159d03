/* Unit tests of the int8 kernels: quantize/dequantize (per tensor and per
 * axis, ties to even, saturation, NaN), DynamicQuantizeLinear's parameters
 * (the ONNX test case), the int8 GEMM against an int64 reference at every
 * dispatch level this CPU has (scalar, AVX2, VNNI) with odd sizes, both
 * signednesses, zero points and every output form, 1 and 2 threads
 * bit-identical, and the int8 convolution (groups, depthwise, strides,
 * pads, dilation) against a direct reference. */
#include "../harness.h"
#include "tensor/tensor_int.h"
#include "tt.h"

#include <stdint.h>

static uint64_t rng = 12345;
static uint32_t rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

/* the ONNX definition, written independently of the kernels */
static int32_t ref_requant(int64_t acc, float mult, int32_t zp, int32_t lo, int32_t hi) {
    float v = (float)(int32_t)acc * mult;
    double r = nearbyint((double)v) + zp;
    return r < lo ? lo : r > hi ? hi : (int32_t)r;
}

KL_TEST(tensor_quant_linear) {
    /* ties go to even, saturation, NaN to the zero point */
    float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 1000.f, -1000.f, NAN, 0.49f, 127.4f};
    float s = 1.0f;
    uint8_t zu = 128;
    int8_t zs = -3;
    uint8_t yu[10];
    int8_t ys[10];
    kl_quantize_f32(x, 1, 1, 10, &s, &zu, 0, KL_U8, yu, NULL);
    uint8_t eu[] = {128, 130, 130, 128, 126, 255, 0, 128, 128, 255};
    for (int i = 0; i < 10; i++) KT_EQ_INT(yu[i], eu[i]);
    kl_quantize_f32(x, 1, 1, 10, &s, &zs, 0, KL_I8, ys, NULL);
    int8_t es[] = {-3, -1, -1, -3, -5, 127, -128, -3, -3, 124};
    for (int i = 0; i < 10; i++) KT_EQ_INT(ys[i], es[i]);
    /* per axis 1 of (2, 3, 4), against x / s[c] rounded */
    float xa[24], sc[3] = {0.1f, 0.25f, 3.0f};
    int8_t za[3] = {0, 5, -7}, qa[24];
    float da[24];
    for (int i = 0; i < 24; i++) xa[i] = (float)(i * 7 % 11) - 5.3f;
    kl_quantize_f32(xa, 2, 3, 4, sc, za, 1, KL_I8, qa, NULL);
    kl_dequantize_f32(qa, KL_I8, 2, 3, 4, sc, za, 1, da, NULL);
    for (int i = 0; i < 24; i++) {
        int c = i / 4 % 3;
        double q = nearbyint((double)(xa[i] / sc[c])) + za[c];
        q = q < -128 ? -128 : q > 127 ? 127 : q;
        KT_EQ_INT(qa[i], (int)q);
        KT_CHECK(da[i] == (float)((q - za[c]) * sc[c]));
    }
    /* int32 dequantization */
    int32_t xi[3] = {-2147483647, 0, 1000000007};
    float di[3], s2 = 0.5f;
    kl_dequantize_f32(xi, KL_I32, 1, 1, 3, &s2, NULL, 0, di, NULL);
    for (int i = 0; i < 3; i++) KT_CHECK(di[i] == (float)((double)xi[i] * 0.5));
}

KL_TEST(tensor_quant_dynamic) {
    /* onnx backend test_dynamicquantizelinear */
    float x[] = {0, 2, -3, -2.5f, 1.34f, 0.5f};
    float s;
    uint8_t z, y[6];
    kl_dynamic_quant_params(x, 6, &s, &z);
    KT_CHECK(s == 0.019607844f);
    KT_EQ_INT(z, 153);
    kl_quantize_f32(x, 1, 1, 6, &s, &z, 0, KL_U8, y, NULL);
    uint8_t e[] = {153, 255, 0, 26, 221, 179};
    for (int i = 0; i < 6; i++) KT_EQ_INT(y[i], e[i]);
    float zero[4] = {0};
    kl_dynamic_quant_params(zero, 4, &s, &z);
    KT_CHECK(s == 0.0f && z == 0);
    kl_quantize_f32(zero, 1, 1, 4, &s, &z, 0, KL_U8, y, NULL);
    for (int i = 0; i < 4; i++) KT_EQ_INT(y[i], 0);
}

/* one GEMM case against the int64 reference at every level */
static void gemm_case(int64_t M, int64_t N, int64_t K, int au, int bu, int zb_col, int out_kind) {
    uint8_t *a = malloc((size_t)(M * K + 1)), *b = malloc((size_t)(K * N + 1));
    for (int64_t i = 0; i < M * K; i++) a[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < K * N; i++) b[i] = (uint8_t)rnd();
    uint8_t zbv[300];
    for (int i = 0; i < 300; i++) zbv[i] = (uint8_t)(rnd() % 7 + (bu ? 125 : 253));
    int32_t za = au ? (int32_t)(rnd() % 256) : (int32_t)(rnd() % 256) - 128;
    int32_t *bias = malloc((size_t)N * 4);
    float *mult = malloc((size_t)N * 4), *fb = malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++)
        bias[n] = (int32_t)(rnd() % 2001) - 1000, mult[n] = 1e-4f * (float)(rnd() % 100 + 1), fb[n] = 0.25f * (float)n;
    void *pb = malloc(kl_qgemm_packed_bytes(K, N));
    kl_qgemm_pack_b(K, N, b, bu, N, 1, pb);
    int64_t *ref = malloc((size_t)(M * N) * 8);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            int64_t s = 0;
            int32_t zb = bu ? zbv[zb_col ? n : 0] : (int8_t)zbv[zb_col ? n : 0];
            for (int64_t k = 0; k < K; k++) {
                int32_t av = au ? a[m * K + k] : (int8_t)a[m * K + k];
                int32_t bv = bu ? b[k * N + n] : (int8_t)b[k * N + n];
                s += (int64_t)(av - za) * (bv - zb);
            }
            ref[m * N + n] = s + bias[n];
        }
    int32_t *c = malloc((size_t)(M * N) * 4), *c2 = malloc((size_t)(M * N) * 4);
    float *yf = (float *)c;
    int lv = kl_qgemm_level();
    for (int f = 0; f <= lv; f++) {
        for (int th = 1; th <= 2; th++) {
            kl__isa_force = f == 2 ? -1 : f;
            memset(c, 0x5a, (size_t)(M * N) * 4);
            kl_qgemm_out o = {0};
            o.bias = bias, o.ysm = N, o.ysn = 1;
            if (out_kind == 4) /* uint8 column by column (a conv's NCHW output): y[m + n * M] */
                o.y = c, o.ydt = KL_U8, o.mult = mult, o.mult_per_col = 1, o.yzp = 7, o.lo = 0, o.hi = 255, o.ysm = 1,
                o.ysn = M;
            else if (out_kind == 0) o.c = c;
            else if (out_kind == 1) o.yf = yf, o.mult = mult, o.mult_per_col = 1, o.fbias = fb;
            else
                o.y = c, o.ydt = out_kind == 2 ? KL_U8 : KL_I8, o.mult = mult, o.mult_per_col = 0,
                o.yzp = out_kind == 2 ? 7 : -3, o.lo = out_kind == 2 ? 7 : -128, o.hi = out_kind == 2 ? 255 : 127;
            kl_err e = {0};
            int rc = kl_qgemm(M, N, K, a, au, K, za, pb, zbv, zb_col, &o, tt_pool(th), &e);
            kl__isa_force = -1;
            KT_EQ_INT(rc, 0);
            for (int64_t i = 0; i < M * N; i++) {
                int64_t n = i % N;
                if (out_kind == 0)
                    KT_CHECKF(c[i] == (int32_t)ref[i], "level %d M%lld N%lld K%lld: c[%lld] %d != %lld", f,
                              (long long)M, (long long)N, (long long)K, (long long)i, c[i], (long long)ref[i]);
                else if (out_kind == 1) KT_CHECK(yf[i] == (float)(int32_t)ref[i] * mult[n] + fb[n]);
                else if (out_kind == 4)
                    KT_CHECKF(((uint8_t *)c)[i / N + n * M] == ref_requant(ref[i], mult[n], 7, 0, 255),
                              "level %d M%lld N%lld: column store at %lld", f, (long long)M, (long long)N,
                              (long long)i);
                else if (out_kind == 2)
                    KT_CHECKF(((uint8_t *)c)[i] == ref_requant(ref[i], mult[0], 7, 7, 255), "level %d i %lld", f,
                              (long long)i);
                else KT_CHECK(((int8_t *)c)[i] == ref_requant(ref[i], mult[0], -3, -128, 127));
            }
            if (th == 1) memcpy(c2, c, (size_t)(M * N) * 4);
            else KT_CHECK(!memcmp(c, c2, (size_t)(M * N) * (out_kind >= 2 ? 1 : 4)));
        }
    }
    free(a), free(b), free(bias), free(mult), free(fb), free(pb), free(ref), free(c), free(c2);
}

KL_TEST(tensor_qgemm_vs_ref) {
    int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {8, 32, 4}, {17, 45, 33}, {70, 131, 65}, {9, 257, 300}, {130, 64, 27}};
    for (size_t s = 0; s < KL_ARRAY_LEN(shapes); s++)
        for (int au = 0; au < 2; au++)
            for (int bu = 0; bu < 2; bu++)
                for (int kind = 0; kind < 5; kind++) {
                    gemm_case(shapes[s][0], shapes[s][1], shapes[s][2], au, bu, (int)(s + kind) % 2, kind);
                    if (kt_failed()) return;
                }
}

/* a saturating case: products of 255 x -128 pairs (the AVX2 split must stay exact) */
KL_TEST(tensor_qgemm_extremes) {
    int64_t M = 5, N = 40, K = 64;
    uint8_t a[5 * 64], b[64 * 40];
    memset(a, 255, sizeof a);
    memset(b, 0x80, sizeof b); /* int8 -128 */
    void *pb = malloc(kl_qgemm_packed_bytes(K, N));
    kl_qgemm_pack_b(K, N, b, 0, N, 1, pb);
    int32_t c[5 * 40];
    for (int f = 0; f <= kl_qgemm_level(); f++) {
        kl__isa_force = f == 2 ? -1 : f;
        kl_qgemm_out o = {0};
        o.c = c, o.ysm = N, o.ysn = 1;
        KT_OK(kl_qgemm(M, N, K, a, 1, K, 0, pb, NULL, 0, &o, NULL, NULL), NULL);
        kl__isa_force = -1;
        for (int i = 0; i < 5 * 40; i++) KT_EQ_INT(c[i], 255 * -128 * 64);
    }
    free(pb);
}

static void conv_case(int64_t N, int64_t C, int64_t M, int64_t group, int64_t H, int64_t W, int64_t k, int64_t s,
                      int64_t d, int64_t pad, int xu, int wu) {
    kl_conv_params p = {0};
    p.nsp = 2, p.N = N, p.C = C, p.M = M, p.group = group, p.in[0] = H, p.in[1] = W;
    p.k[0] = p.k[1] = k, p.stride[0] = p.stride[1] = s, p.dilation[0] = p.dilation[1] = d;
    p.pad_begin[0] = p.pad_begin[1] = pad, p.pad_end[0] = pad ? pad + 1 : 0, p.pad_end[1] = pad;
    kl_err e = {0};
    KT_OK(kl_conv_prepare(&p, &e), &e);
    int64_t OH = p.out[0], OW = p.out[1], Cg = C / group, Mg = M / group;
    int64_t nx = N * C * H * W, nw = M * Cg * k * k, ny = N * M * OH * OW;
    uint8_t *x = malloc((size_t)nx), *w = malloc((size_t)nw);
    for (int64_t i = 0; i < nx; i++) x[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < nw; i++) w[i] = (uint8_t)rnd();
    int32_t xz = xu ? 131 : -5;
    uint8_t wz[64];
    for (int i = 0; i < 64; i++) wz[i] = (uint8_t)(wu ? 120 + i % 9 : i % 5);
    void *pw = malloc(kl_qconv_packed_bytes(&p));
    KT_OK(kl_qconv_pack(&p, w, wu, pw, &e), &e);
    int32_t *y = malloc((size_t)ny * 4), *y2 = malloc((size_t)ny * 4);
    memset(y2, 0, (size_t)ny * 4);
    /* 1 and 2 threads; depthwise convs also through the direct int16 kernel */
    for (int run = 0; run < 3; run++) {
        kl_qgemm_out o = {0};
        o.c = run == 0 ? y : y2;
        kl__qconv_dw_direct = run == 2;
        int rc = kl_qconv(&p, x, xu, xz, pw, wu, wz, 1, &o, NULL, tt_pool(run == 1 ? 2 : 1), &e);
        kl__qconv_dw_direct = 0;
        KT_OK(rc, &e);
        KT_CHECK(run == 0 || !memcmp(y, y2, (size_t)ny * 4));
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t g = m / Mg, acc = 0;
                    int32_t wzm = wu ? wz[m] : (int8_t)wz[m];
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < k; kh++)
                            for (int64_t kw = 0; kw < k; kw++) {
                                int64_t ih = oh * s - pad + kh * d, iw = ow * s - pad + kw * d;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue; /* (xz - xz) = 0 */
                                uint8_t xb = x[((n * C + g * Cg + c) * H + ih) * W + iw];
                                uint8_t wb = w[((m * Cg + c) * k + kh) * k + kw];
                                int32_t xv = xu ? xb : (int8_t)xb, wv = wu ? wb : (int8_t)wb;
                                acc += (int64_t)(xv - xz) * (wv - wzm);
                            }
                    int64_t i = ((n * M + m) * OH + oh) * OW + ow;
                    KT_CHECKF(y[i] == acc, "conv N%lld C%lld M%lld g%lld k%lld s%lld: y[%lld] = %d, expected %lld",
                              (long long)N, (long long)C, (long long)M, (long long)group, (long long)k, (long long)s,
                              (long long)i, y[i], (long long)acc);
                }
    free(x), free(w), free(pw), free(y), free(y2);
}

KL_TEST(tensor_qconv_vs_ref) {
    for (int xu = 0; xu < 2; xu++)
        for (int wu = 0; wu < 2; wu++) {
            conv_case(2, 3, 5, 1, 9, 7, 3, 1, 1, 1, xu, wu);
            conv_case(1, 8, 12, 4, 11, 10, 3, 2, 1, 1, xu, wu);
            conv_case(2, 16, 16, 16, 9, 9, 3, 2, 1, 1, xu, wu);
            conv_case(1, 6, 6, 6, 8, 13, 5, 1, 2, 2, xu, wu);
            conv_case(1, 7, 33, 1, 6, 5, 1, 1, 1, 0, xu, wu);
            conv_case(3, 8, 20, 1, 5, 6, 1, 1, 1, 0, xu, wu);  /* 1x1: the image is A */
            conv_case(2, 32, 40, 1, 8, 9, 3, 1, 1, 0, xu, wu); /* 32 x 32 transpose tiles */
            conv_case(1, 64, 16, 1, 8, 8, 1, 1, 1, 0, xu, wu);
            if (kt_failed()) return;
        }
}
