/* Unit tests of the depthwise 3x3 kernels (src/tensor/dwconv.c): every path
 * (flat stride-1 vectors for narrow planes, two-rows-per-vector stride 2,
 * the row kernel for wide planes, the AVX2 fallback under KEEL_NO_AVX512)
 * against a double-precision reference, odd sizes, pads, batch > 1, fused
 * activations, and 1 vs 2 threads bit-identical; and the short-row softmax. */
#include "../harness.h"
#include "tt.h"

#include <math.h>

static float act_ref(kl_act a, float v) {
    switch (a.kind) {
    case KL_ACT_RELU: return v > 0 ? v : 0;
    case KL_ACT_CLIP: return v < a.a ? a.a : v > a.b ? a.b : v;
    case KL_ACT_HARDSWISH: {
        float t = v / 6.0f + 0.5f;
        t = t < 0 ? 0 : t > 1 ? 1 : t;
        return v * t;
    }
    default: return v;
    }
}

static void ref_dw(const kl_conv_params *p, const float *x, const float *w, const float *b, float *y) {
    int64_t H = p->in[0], W = p->in[1], OH = p->out[0], OW = p->out[1];
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t c = 0; c < p->C; c++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = b ? b[c] : 0;
                    for (int64_t ky = 0; ky < p->k[0]; ky++)
                        for (int64_t kx = 0; kx < p->k[1]; kx++) {
                            int64_t iy = oy * p->stride[0] - p->pad_begin[0] + ky * p->dilation[0];
                            int64_t ix = ox * p->stride[1] - p->pad_begin[1] + kx * p->dilation[1];
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            acc += (double)x[((n * p->C + c) * H + iy) * W + ix] * w[(c * p->k[0] + ky) * p->k[1] + kx];
                        }
                    y[((n * p->C + c) * OH + oy) * OW + ox] = act_ref(p->act, (float)acc);
                }
}

KL_TEST(tensor_dwconv_paths) {
    kl_err e = {0};
    struct { int64_t N, C, H, W, s, pb0, pb1, pe0, pe1; kl_act_kind act; } cs[] = {
        /* stride 1, pad 1: flat vectors (W < 64) and rows (W >= 64) */
        {1, 3, 1, 1, 1, 1, 1, 1, 1, KL_ACT_NONE},
        {2, 5, 1, 5, 1, 1, 1, 1, 1, KL_ACT_RELU},
        {1, 4, 5, 1, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {3, 5, 2, 3, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {2, 7, 7, 7, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {1, 6, 14, 14, 1, 1, 1, 1, 1, KL_ACT_HARDSWISH},
        {2, 3, 13, 17, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {1, 4, 28, 28, 1, 1, 1, 1, 1, KL_ACT_RELU},
        {1, 3, 3, 40, 1, 1, 1, 1, 1, KL_ACT_NONE},
        {2, 2, 47, 9, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {1, 2, 9, 47, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {1, 2, 20, 56, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {2, 3, 6, 50, 1, 1, 1, 1, 1, KL_ACT_NONE},
        {1, 2, 5, 70, 1, 1, 1, 1, 1, KL_ACT_CLIP},
        {2, 2, 3, 64, 1, 1, 1, 1, 1, KL_ACT_RELU},
        /* stride 2 with output rows <= 8: two rows per vector */
        {2, 5, 14, 14, 2, 1, 1, 1, 1, KL_ACT_CLIP},
        {1, 3, 13, 13, 2, 1, 1, 1, 1, KL_ACT_RELU},
        {1, 3, 15, 16, 2, 1, 1, 1, 1, KL_ACT_NONE},
        {2, 4, 3, 3, 2, 1, 1, 1, 1, KL_ACT_CLIP},
        {1, 2, 1, 1, 2, 1, 1, 1, 1, KL_ACT_NONE},
        {1, 3, 9, 9, 2, 0, 0, 0, 0, KL_ACT_HARDSWISH},
        {1, 3, 10, 11, 2, 1, 0, 0, 1, KL_ACT_CLIP},
        {3, 2, 7, 4, 2, 0, 1, 1, 1, KL_ACT_RELU},
        /* stride 2, wider: the row kernel */
        {1, 3, 28, 28, 2, 1, 1, 1, 1, KL_ACT_CLIP},
        {2, 2, 19, 37, 2, 1, 1, 1, 1, KL_ACT_CLIP},
        /* other pads at stride 1 (row kernel / generic) */
        {1, 3, 9, 10, 1, 0, 0, 0, 0, KL_ACT_CLIP},
        {1, 3, 9, 10, 1, 2, 1, 0, 2, KL_ACT_NONE},
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        kl_conv_params p;
        memset(&p, 0, sizeof p);
        p.nsp = 2; p.N = cs[c].N; p.C = p.M = p.group = cs[c].C;
        p.in[0] = cs[c].H; p.in[1] = cs[c].W;
        p.k[0] = p.k[1] = 3;
        p.stride[0] = p.stride[1] = cs[c].s;
        p.pad_begin[0] = cs[c].pb0; p.pad_begin[1] = cs[c].pb1;
        p.pad_end[0] = cs[c].pe0; p.pad_end[1] = cs[c].pe1;
        p.act = (kl_act){cs[c].act, 0.0f, 0.6f};
        KT_OK(kl_conv_prepare(&p, &e), &e);
        int64_t xn = p.N * p.C * p.in[0] * p.in[1], yn = p.N * p.C * p.out[0] * p.out[1];
        float *x = tt_randn(xn, 31 + c), *w = tt_randn(p.C * 9, 32 + c), *b = tt_randn(p.C, 33 + c);
        const float *bias = c % 3 ? b : NULL;
        /* one float of slack past the end catches writes beyond the output */
        float *y1 = calloc((size_t)yn + 1, 4), *y2 = calloc((size_t)yn + 1, 4), *r = calloc((size_t)yn, 4);
        y1[yn] = y2[yn] = 12345.0f;
        KT_OK(kl_conv_f32(&p, x, w, bias, y1, NULL, tt_pool(1), &e), &e);
        KT_OK(kl_conv_f32(&p, x, w, bias, y2, NULL, tt_pool(2), &e), &e);
        ref_dw(&p, x, w, bias, r);
        double d = tt_maxdiff(y1, r, yn);
        int same = memcmp(y1, y2, (size_t)yn * 4) == 0, tail = y1[yn] == 12345.0f && y2[yn] == 12345.0f;
        free(x); free(w); free(b); free(y1); free(y2); free(r);
        KT_CHECKF(d < 1e-5, "dw case %zu (%lldx%lld s%lld) maxdiff %g", c, (long long)cs[c].H, (long long)cs[c].W,
                  (long long)cs[c].s, d);
        KT_CHECKF(same, "dw case %zu differs between 1 and 2 threads", c);
        KT_CHECKF(tail, "dw case %zu wrote past the output", c);
    }
}

/* Softmax of short rows (R = 8, 16, 24, 32: the four-rows-at-a-time path)
 * against double precision, with a NaN row, an all -inf row, a row count
 * that is not a multiple of 4, and 1 vs 2 threads bit-identical. */
KL_TEST(tensor_softmax_short_rows) {
    int64_t Rs[] = {8, 16, 24, 32};
    for (size_t ri = 0; ri < KL_ARRAY_LEN(Rs); ri++) {
        int64_t R = Rs[ri], rows = 4099, n = rows * R, dims[2] = {rows, R};
        float *x = tt_randn(n, 77 + ri), *y1 = malloc((size_t)n * 4), *y2 = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) x[i] *= 8.0f;
        for (int64_t k = 0; k < R; k++) x[5 * R + k] = -INFINITY;   /* all masked */
        x[9 * R + 3] = NAN;                                           /* NaN row */
        for (int64_t k = 0; k < R / 2; k++) x[11 * R + k] = -INFINITY; /* half masked */
        kl_softmax_f32(2, dims, x, 1, 0, y1, tt_pool(1));
        kl_softmax_f32(2, dims, x, 1, 0, y2, tt_pool(2));
        double d = 0;
        int special = 1;
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * R, *yr = y1 + r * R;
            if (r == 5 || r == 9) {
                for (int64_t k = 0; k < R; k++) special &= yr[k] != yr[k];
                continue;
            }
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < R; k++) m = xr[k] > m ? xr[k] : m;
            for (int64_t k = 0; k < R; k++) s += exp((double)xr[k] - m);
            for (int64_t k = 0; k < R; k++) {
                double ref = exp((double)xr[k] - m) / s, df = fabs(ref - yr[k]);
                if (df > d) d = df;
            }
        }
        int same = memcmp(y1, y2, (size_t)n * 4) == 0;
        free(x); free(y1); free(y2);
        KT_CHECKF(d < 1e-6, "softmax R=%lld maxdiff %g", (long long)R, d);
        KT_CHECKF(special, "softmax R=%lld: all -inf / NaN rows must give NaN", (long long)R);
        KT_CHECKF(same, "softmax R=%lld differs between 1 and 2 threads", (long long)R);
    }
}

/* Softmax of x + b (keel::AddSoftmax): b broadcast like an attention mask
 * (B*H, 1, S) with -inf entries, and a scalar-per-row b; short (16) and
 * generic (10, 40) row lengths; equal to Add then kl_softmax_f32 bit for bit. */
KL_TEST(tensor_softmax_add) {
    int64_t Rs[] = {16, 10, 40};
    for (size_t ri = 0; ri < KL_ARRAY_LEN(Rs); ri++) {
        int64_t R = Rs[ri], B = 6, M = 7, n = B * M * R, dims[3] = {B, M, R};
        float *x = tt_randn(n, 91 + ri), *m = tt_randn(B * R, 92 + ri), *s = tt_randn(B * M, 93 + ri);
        float *sum = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4), *y1 = malloc((size_t)n * 4), *y2 = malloc((size_t)n * 4);
        for (int64_t i = 0; i < B * R; i += 3) m[i] = -INFINITY;
        /* mask (B, 1, R) */
        for (int64_t i = 0; i < n; i++) sum[i] = x[i] + m[(i / (M * R)) * R + i % R];
        kl_softmax_f32(3, dims, sum, 2, 0, ref, tt_pool(1));
        int64_t xs[3] = {M * R, R, 1}, ms[3] = {R, 0, 1};
        kl_softmax_add_f32(3, dims, x, xs, m, ms, y1, tt_pool(1));
        kl_softmax_add_f32(3, dims, x, xs, m, ms, y2, tt_pool(2));
        KT_CHECKF(memcmp(y1, ref, (size_t)n * 4) == 0, "softmax_add mask R=%lld differs from add + softmax", (long long)R);
        KT_CHECKF(memcmp(y1, y2, (size_t)n * 4) == 0, "softmax_add R=%lld differs between 1 and 2 threads", (long long)R);
        /* b (B, M, 1): one value per row, and x as the broadcast operand (swapped roles) */
        for (int64_t i = 0; i < n; i++) sum[i] = s[i / R] + x[i];
        kl_softmax_f32(3, dims, sum, 2, 0, ref, tt_pool(1));
        int64_t ss[3] = {M, 1, 0};
        kl_softmax_add_f32(3, dims, s, ss, x, xs, y1, tt_pool(2));
        KT_CHECKF(memcmp(y1, ref, (size_t)n * 4) == 0, "softmax_add row bias R=%lld differs", (long long)R);
        free(x); free(m); free(s); free(sum); free(ref); free(y1); free(y2);
    }
}
