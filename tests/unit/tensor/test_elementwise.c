/* Unit tests of elementwise kernels (unary accuracy vs libm, binary ops with
 * NumPy broadcasting for several dtypes, where, cast), reductions, arg
 * extrema and softmax, with 1- vs 2-thread determinism checks. */
#include "../harness.h"
#include "tt.h"

static double ref_unary(kl_unary_op op, double x, double a, double b) {
    switch (op) {
    case KL_UN_IDENTITY: return x;
    case KL_UN_RELU: return x > 0 ? x : 0;
    case KL_UN_LEAKY_RELU: return x < 0 ? a * x : x;
    case KL_UN_SIGMOID: return 1 / (1 + exp(-x));
    case KL_UN_TANH: return tanh(x);
    case KL_UN_EXP: return exp(x);
    case KL_UN_LOG: return log(x);
    case KL_UN_SQRT: return sqrt(x);
    case KL_UN_NEG: return -x;
    case KL_UN_ABS: return fabs(x);
    case KL_UN_RECIPROCAL: return 1 / x;
    case KL_UN_ERF: return erf(x);
    case KL_UN_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case KL_UN_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case KL_UN_HARDSIGMOID: return fmax(0, fmin(1, a * x + b));
    case KL_UN_HARDSWISH: return x * fmax(0, fmin(1, x / 6 + 0.5));
    case KL_UN_CLIP: return fmin(fmax(x, a), b);
    case KL_UN_FLOOR: return floor(x);
    case KL_UN_CEIL: return ceil(x);
    case KL_UN_ROUND: return nearbyint(x);
    case KL_UN_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case KL_UN_SIN: return sin(x);
    case KL_UN_COS: return cos(x);
    case KL_UN_SOFTPLUS: return log1p(exp(x));
    case KL_UN_ELU: return x < 0 ? a * (exp(x) - 1) : x;
    case KL_UN_SELU: return x <= 0 ? b * a * (exp(x) - 1) : b * x;
    case KL_UN_SQUARE: return x * x;
    default: return NAN;
    }
}

KL_TEST(tensor_unary_accuracy) {
    int64_t n = 20011;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *y2 = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1);
    x[5] = 0.0f; x[6] = -1e-5f; x[7] = 2.5f; x[8] = -2.5f; x[9] = 0.5f; x[10] = 1e-30f;
    for (int op = 0; op < KL_UN_COUNT; op++) {
        float a = op == KL_UN_HARDSIGMOID ? 0.2f : op == KL_UN_CLIP ? -1.5f : op == KL_UN_SELU ? 1.67326f : 0.1f;
        float b = op == KL_UN_HARDSIGMOID ? 0.5f : op == KL_UN_CLIP ? 2.0f : op == KL_UN_SELU ? 1.0507f : 0;
        kl_unary_f32((kl_unary_op)op, x, y, n, a, b, tt_pool(1));
        kl_unary_f32((kl_unary_op)op, x, y2, n, a, b, tt_pool(2));
        KT_CHECKF(memcmp(y, y2, sizeof(float) * n) == 0, "%s not deterministic", kl_unary_name((kl_unary_op)op));
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double xv = x[i];
            if ((op == KL_UN_LOG || op == KL_UN_SQRT) && xv <= 0) continue;
            if (op == KL_UN_RECIPROCAL && fabs(xv) < 1e-3) continue;
            double r = ref_unary((kl_unary_op)op, xv, a, b);
            /* relative error with an absolute floor (1e-6 of the function scale) */
            double err = fabs(y[i] - r) / fmax(fabs(r), 1e-6);
            if (op == KL_UN_EXP || op == KL_UN_SOFTPLUS) err = fabs(y[i] - r) / fmax(fabs(r), 1e-30);
            /* 0.5 x (1 + erf(x)) cancels for x << 0 in float (as in every f32
             * implementation of this form): absolute error below 1 */
            if (op == KL_UN_GELU || op == KL_UN_GELU_TANH) err = fabs(y[i] - r) / fmax(fabs(r), 1.0);
            if (err > worst) worst = err;
        }
        /* documented accuracy: ~1e-6 relative for the vector math */
        KT_CHECKF(worst < 4e-6, "%s: max rel error %g", kl_unary_name((kl_unary_op)op), worst);
    }
    /* NaN passes through */
    float nx[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN}, ny[8];
    kl_unary_f32(KL_UN_TANH, nx, ny, 8, 0, 0, NULL);
    KT_CHECK(isnan(ny[0]));
    kl_unary_f32(KL_UN_ERF, nx, ny, 8, 0, 0, NULL);
    KT_CHECK(isnan(ny[3]));
    kl_unary_f32(KL_UN_EXP, (float[]){-100, 100, 0}, ny, 3, 0, 0, NULL);
    KT_CHECK(ny[0] == 0 && isinf(ny[1]) && ny[2] == 1);
    free(x); free(y); free(y2);
}

/* Reference broadcast binary over doubles. */
static void ref_bcast_index(int r, const int64_t *od, int ra, const int64_t *da, int64_t o, int64_t *ia) {
    int64_t idx[8], rem = o, off = 0, s = 1;
    for (int i = r - 1; i >= 0; i--) { idx[i] = rem % od[i]; rem /= od[i]; }
    for (int i = ra - 1; i >= 0; i--) {
        int j = i + (r - ra);
        off += (da[i] == 1 ? 0 : idx[j]) * s;
        s *= da[i];
    }
    *ia = off;
}

KL_TEST(tensor_binary_broadcast) {
    kl_err e = {0};
    struct { int ra; int64_t da[4]; int rb; int64_t db[4]; } cs[] = {
        {2, {3, 4}, 2, {3, 4}}, {2, {3, 4}, 0, {0}}, {0, {0}, 3, {2, 3, 4}}, {3, {2, 3, 4}, 1, {4}},
        {3, {2, 3, 1}, 2, {1, 5}}, {4, {2, 1, 3, 1}, 3, {4, 1, 5}}, {1, {1}, 2, {5000, 3}},
        {2, {1, 20000}, 2, {2, 1}}, {3, {8, 1, 9}, 3, {1, 7, 1}},
    };
    kl_binary_op ops[] = {KL_BIN_ADD, KL_BIN_SUB, KL_BIN_MUL, KL_BIN_DIV, KL_BIN_MAX, KL_BIN_MIN, KL_BIN_POW, KL_BIN_LT, KL_BIN_EQ, KL_BIN_PRELU};
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        int r;
        int64_t od[8];
        KT_OK(kl_broadcast_shape(cs[c].ra, cs[c].da, cs[c].rb, cs[c].db, &r, od, &e), &e);
        int64_t na = kl_shape_numel(cs[c].ra, cs[c].da), nb = kl_shape_numel(cs[c].rb, cs[c].db), n = kl_shape_numel(r, od);
        float *a = tt_randn(na, 31 + c), *b = tt_randn(nb, 32 + c), *y = malloc(4 * (size_t)n), *y2 = malloc(4 * (size_t)n);
        for (int64_t i = 0; i < nb; i++) if (fabsf(b[i]) < 0.05f) b[i] = 0.5f;
        for (size_t k = 0; k < KL_ARRAY_LEN(ops); k++) {
            float *pa = a;
            float *absa = NULL;
            if (ops[k] == KL_BIN_POW) {  /* positive bases */
                absa = malloc(4 * (size_t)na);
                for (int64_t i = 0; i < na; i++) absa[i] = fabsf(a[i]) + 0.1f;
                pa = absa;
            }
            KT_OK(kl_binary(ops[k], KL_F32, cs[c].ra, cs[c].da, pa, cs[c].rb, cs[c].db, b, y, tt_pool(1), &e), &e);
            KT_OK(kl_binary(ops[k], KL_F32, cs[c].ra, cs[c].da, pa, cs[c].rb, cs[c].db, b, y2, tt_pool(2), &e), &e);
            int cmp = kl_binary_is_compare(ops[k]);
            KT_CHECK(memcmp(y, y2, (size_t)n * (cmp ? 1 : 4)) == 0);
            for (int64_t o = 0; o < n; o++) {
                int64_t ia, ib;
                ref_bcast_index(r, od, cs[c].ra, cs[c].da, o, &ia);
                ref_bcast_index(r, od, cs[c].rb, cs[c].db, o, &ib);
                double u = pa[ia], v = b[ib], ref;
                switch (ops[k]) {
                case KL_BIN_ADD: ref = (float)(u + v); break;
                case KL_BIN_SUB: ref = (float)(u - v); break;
                case KL_BIN_MUL: ref = (float)(u * v); break;
                case KL_BIN_DIV: ref = (float)(u / v); break;
                case KL_BIN_MAX: ref = fmax(u, v); break;
                case KL_BIN_MIN: ref = fmin(u, v); break;
                case KL_BIN_POW: ref = pow(u, v); break;
                case KL_BIN_LT: ref = u < v; break;
                case KL_BIN_EQ: ref = u == v; break;
                default: ref = u < 0 ? (float)(u * v) : u; break;
                }
                double got = cmp ? ((uint8_t *)y)[o] : y[o];
                KT_CHECKF(fabs(got - ref) <= 1e-6 * fmax(1, fabs(ref)), "case %zu op %d at %lld: %g vs %g", c, (int)ops[k],
                          (long long)o, got, ref);
            }
            free(absa);
        }
        free(a); free(b); free(y); free(y2);
    }
    KT_EQ_INT(kl_broadcast_shape(2, (int64_t[]){3, 4}, 1, (int64_t[]){3}, NULL, NULL, &e), KL_ESHAPE);
    KT_CONTAINS(e.msg, "[3,4]");
}

KL_TEST(tensor_binary_int_dtypes) {
    kl_err e = {0};
    int64_t a[6] = {7, -7, 5, INT64_MIN, 0, 9}, b[6] = {2, 2, 0, -1, 3, -4}, y[6];
    int64_t d6[1] = {6};
    KT_OK(kl_binary(KL_BIN_DIV, KL_I64, 1, d6, a, 1, d6, b, y, NULL, &e), &e);
    KT_EQ_INT(y[0], 3); KT_EQ_INT(y[1], -3); KT_EQ_INT(y[2], 0); KT_EQ_INT(y[3], INT64_MIN); KT_EQ_INT(y[5], -2);
    KT_OK(kl_binary(KL_BIN_MOD, KL_I64, 1, d6, a, 1, d6, b, y, NULL, &e), &e);
    KT_EQ_INT(y[0], 1); KT_EQ_INT(y[1], 1); KT_EQ_INT(y[5], -3);
    KT_OK(kl_binary(KL_BIN_FMOD, KL_I64, 1, d6, a, 1, d6, b, y, NULL, &e), &e);
    KT_EQ_INT(y[1], -1); KT_EQ_INT(y[5], 1);
    int32_t p[3] = {2, -3, 5}, q[3] = {10, 3, 0}, py[3];
    int64_t d3[1] = {3};
    KT_OK(kl_binary(KL_BIN_POW, KL_I32, 1, d3, p, 1, d3, q, py, NULL, &e), &e);
    KT_EQ_INT(py[0], 1024); KT_EQ_INT(py[1], -27); KT_EQ_INT(py[2], 1);
    uint8_t u[3] = {250, 3, 4}, v[1] = {10}, uy[3];
    KT_OK(kl_binary(KL_BIN_ADD, KL_U8, 1, d3, u, 0, NULL, v, uy, NULL, &e), &e);
    KT_EQ_INT(uy[0], 4); KT_EQ_INT(uy[1], 13);
    uint16_t w[2] = {65535, 2}, wy[2];
    int64_t d2[1] = {2};
    KT_OK(kl_binary(KL_BIN_MUL, KL_U16, 1, d2, w, 1, d2, w, wy, NULL, &e), &e);
    KT_EQ_INT(wy[0], 1); KT_EQ_INT(wy[1], 4);
    uint8_t t1[4] = {1, 0, 1, 0}, t2[4] = {1, 1, 0, 0}, ty[4];
    int64_t d4[1] = {4};
    KT_OK(kl_binary(KL_BIN_XOR, KL_BOOL, 1, d4, t1, 1, d4, t2, ty, NULL, &e), &e);
    KT_EQ_INT(ty[0], 0); KT_EQ_INT(ty[1], 1); KT_EQ_INT(ty[2], 1); KT_EQ_INT(ty[3], 0);
    kl_not_bool(t1, ty, 4);
    KT_EQ_INT(ty[0], 0); KT_EQ_INT(ty[1], 1);
    double da[2] = {1.5, -2}, dy[2];
    uint8_t cy[2];
    KT_OK(kl_binary(KL_BIN_MUL, KL_F64, 1, d2, da, 1, d2, da, dy, NULL, &e), &e);
    KT_NEAR(dy[0], 2.25, 0);
    KT_OK(kl_binary(KL_BIN_GE, KL_F64, 1, d2, da, 0, NULL, &da[1], cy, NULL, &e), &e);
    KT_EQ_INT(cy[0], 1); KT_EQ_INT(cy[1], 1);
    KT_EQ_INT(kl_binary(KL_BIN_ADD, KL_BOOL, 1, d2, t1, 1, d2, t2, ty, NULL, &e), KL_EUNSUPPORTED);
    KT_EQ_INT(kl_binary(KL_BIN_ADD, KL_F16, 1, d2, t1, 1, d2, t2, ty, NULL, &e), KL_EUNSUPPORTED);
    /* float NaN propagation in min/max */
    float fa[2] = {NAN, 1}, fb[2] = {1, NAN}, fy[2];
    KT_OK(kl_binary(KL_BIN_MAX, KL_F32, 1, d2, fa, 1, d2, fb, fy, NULL, &e), &e);
    KT_CHECK(isnan(fy[0]) && isnan(fy[1]));
}

KL_TEST(tensor_where_cast) {
    kl_err e = {0};
    uint8_t c[3] = {1, 0, 1};
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, z[1] = {-1}, y[6];
    KT_OK(kl_where(4, 1, (int64_t[]){3}, c, 2, (int64_t[]){2, 3}, x, 0, NULL, z, y, NULL, &e), &e);
    KT_NEAR(y[0], 1, 0); KT_NEAR(y[1], -1, 0); KT_NEAR(y[5], 6, 0); KT_NEAR(y[4], -1, 0);
    int64_t i8[2] = {1, 2}, o8[4], iz[1] = {0};
    KT_OK(kl_where(8, 2, (int64_t[]){2, 1}, (uint8_t[]){0, 1}, 1, (int64_t[]){2}, i8, 0, NULL, iz, o8, NULL, &e), &e);
    KT_EQ_INT(o8[0], 0); KT_EQ_INT(o8[1], 0); KT_EQ_INT(o8[2], 1); KT_EQ_INT(o8[3], 2);
    KT_EQ_INT(kl_where(4, 1, (int64_t[]){3}, c, 1, (int64_t[]){2}, x, 0, NULL, z, y, NULL, &e), KL_ESHAPE);
    /* casts */
    float f[6] = {1.7f, -1.7f, 300.0f, -1.0f, NAN, 0.0f};
    int32_t i32[6];
    uint8_t u8[6], b[6];
    int64_t i64[6];
    KT_OK(kl_cast(KL_F32, f, KL_I32, i32, 6, NULL, &e), &e);
    KT_EQ_INT(i32[0], 1); KT_EQ_INT(i32[1], -1); KT_EQ_INT(i32[2], 300); KT_EQ_INT(i32[4], INT32_MIN);
    KT_OK(kl_cast(KL_F32, f, KL_U8, u8, 6, NULL, &e), &e);
    KT_EQ_INT(u8[2], 44); KT_EQ_INT(u8[3], 255);
    KT_OK(kl_cast(KL_F32, f, KL_BOOL, b, 6, NULL, &e), &e);
    KT_EQ_INT(b[0], 1); KT_EQ_INT(b[4], 1); KT_EQ_INT(b[5], 0);
    KT_OK(kl_cast(KL_F32, f, KL_I64, i64, 6, NULL, &e), &e);
    KT_EQ_INT(i64[1], -1); KT_EQ_INT(i64[4], INT64_MIN);
    int64_t big[2] = {(1LL << 40) + 1, -5};
    double dd[2];
    float ff[2];
    uint16_t hh[2];
    KT_OK(kl_cast(KL_I64, big, KL_F64, dd, 2, NULL, &e), &e);
    KT_NEAR(dd[0], 1099511627777.0, 0);
    KT_OK(kl_cast(KL_I64, big, KL_F32, ff, 2, NULL, &e), &e);
    KT_NEAR(ff[1], -5, 0);
    KT_OK(kl_cast(KL_I64, big, KL_F16, hh, 2, NULL, &e), &e);
    KT_NEAR(kl_f16_to_f32(hh[1]), -5, 0);
    int8_t s8[2];
    KT_OK(kl_cast(KL_I64, big, KL_I8, s8, 2, NULL, &e), &e);
    KT_EQ_INT(s8[0], 1); KT_EQ_INT(s8[1], -5);
    uint8_t bb[2] = {1, 0};
    float bf[2];
    KT_OK(kl_cast(KL_BOOL, bb, KL_F32, bf, 2, NULL, &e), &e);
    KT_NEAR(bf[0], 1, 0); KT_NEAR(bf[1], 0, 0);
    /* big cast, deterministic and equal to the scalar conversion */
    int64_t n = 30000;
    float *src = tt_randn(n, 77);
    uint16_t *h1 = malloc(2 * (size_t)n), *h2 = malloc(2 * (size_t)n);
    KT_OK(kl_cast(KL_F32, src, KL_F16, h1, n, tt_pool(1), &e), &e);
    KT_OK(kl_cast(KL_F32, src, KL_F16, h2, n, tt_pool(2), &e), &e);
    int ok = memcmp(h1, h2, 2 * (size_t)n) == 0 && h1[12345] == kl_f32_to_f16(src[12345]);
    free(src); free(h1); free(h2);
    KT_CHECK(ok);
}

/* ==================================================================
 * Reductions, argmax, softmax
 * ================================================================== */

KL_TEST(tensor_reduce) {
    int64_t d[4] = {3, 4, 5, 6};
    int64_t n = 360;
    float *x = tt_randn(n, 41);
    for (int64_t i = 0; i < n; i++) x[i] += 1.5f;  /* positive for log-sum/prod sanity */
    uint32_t masks[] = {1, 2, 4, 8, 0xf, 0x5, 0xa, 0x6, 0xc, 0x9};
    for (size_t m = 0; m < KL_ARRAY_LEN(masks); m++)
        for (int op = 0; op < KL_RED_COUNT; op++) {
            int64_t od[4], no = 1;
            for (int i = 0; i < 4; i++) { od[i] = (masks[m] >> i & 1) ? 1 : d[i]; no *= od[i]; }
            float *y = malloc(4 * (size_t)no), *y2 = malloc(4 * (size_t)no);
            kl_reduce_f32((kl_reduce_op)op, 4, d, x, masks[m], y, tt_pool(1));
            kl_reduce_f32((kl_reduce_op)op, 4, d, x, masks[m], y2, tt_pool(2));
            int same = memcmp(y, y2, 4 * (size_t)no) == 0;
            double worst = 0;
            for (int64_t o = 0; o < no; o++) {
                int64_t oi[4], rem = o;
                for (int i = 3; i >= 0; i--) { oi[i] = rem % od[i]; rem /= od[i]; }
                double acc = op == KL_RED_PROD ? 1 : (op == KL_RED_MAX ? -INFINITY : op == KL_RED_MIN ? INFINITY : 0);
                double mx = -INFINITY;
                int64_t cnt = 0;
                for (int pass = 0; pass < 2; pass++)
                    for (int64_t i = 0; i < n; i++) {
                        int64_t ii[4], r2 = i, match = 1;
                        for (int k = 3; k >= 0; k--) { ii[k] = r2 % d[k]; r2 /= d[k]; }
                        for (int k = 0; k < 4; k++) if (!(masks[m] >> k & 1) && ii[k] != oi[k]) match = 0;
                        if (!match) continue;
                        double v = x[i];
                        if (pass == 0) { if (v > mx) mx = v; continue; }
                        cnt++;
                        switch (op) {
                        case KL_RED_SUM: case KL_RED_MEAN: case KL_RED_LOG_SUM: acc += v; break;
                        case KL_RED_MAX: acc = fmax(acc, v); break;
                        case KL_RED_MIN: acc = fmin(acc, v); break;
                        case KL_RED_PROD: acc *= v; break;
                        case KL_RED_SUM_SQUARE: case KL_RED_L2: acc += v * v; break;
                        case KL_RED_L1: acc += fabs(v); break;
                        case KL_RED_LOG_SUM_EXP: acc += exp(v - mx); break;
                        }
                    }
                if (op == KL_RED_MEAN) acc /= (double)cnt;
                if (op == KL_RED_L2) acc = sqrt(acc);
                if (op == KL_RED_LOG_SUM) acc = log(acc);
                if (op == KL_RED_LOG_SUM_EXP) acc = mx + log(acc);
                double err = fabs(y[o] - acc) / fmax(1, fabs(acc));
                if (isinf((float)acc) && isinf(y[o])) err = 0;
                if (err > worst) worst = err;
            }
            free(y); free(y2);
            KT_CHECKF(worst < 2e-5, "reduce op %d mask %#x: rel err %g", op, masks[m], worst);
            KT_CHECKF(same, "reduce op %d mask %#x not deterministic", op, masks[m]);
        }
    free(x);
    kl_err e = {0};
    int64_t xi[6] = {1, 2, 3, 4, 5, 6}, yi[3];
    KT_OK(kl_reduce(KL_RED_PROD, KL_I64, 2, (int64_t[]){2, 3}, xi, 1, yi, NULL, &e), &e);
    KT_EQ_INT(yi[0], 4); KT_EQ_INT(yi[2], 18);
    KT_OK(kl_reduce(KL_RED_MAX, KL_I64, 2, (int64_t[]){2, 3}, xi, 2, yi, NULL, &e), &e);
    KT_EQ_INT(yi[0], 3); KT_EQ_INT(yi[1], 6);
    KT_EQ_INT(kl_reduce(KL_RED_L2, KL_I64, 2, (int64_t[]){2, 3}, xi, 2, yi, NULL, &e), KL_EUNSUPPORTED);
}

KL_TEST(tensor_argmax_softmax) {
    float x[2 * 3 * 4] = {1, 5, 5, 0, 2, 2, 2, 2, -1, -3, -3, 9, 0, 0, 7, 7, 4, 1, 1, 4, 3, 3, 3, 3};
    int64_t d[3] = {2, 3, 4}, y[8];
    kl_argmax_f32(3, d, x, 2, 0, y, NULL);
    KT_EQ_INT(y[0], 1); KT_EQ_INT(y[1], 0); KT_EQ_INT(y[2], 3); KT_EQ_INT(y[3], 2);
    kl_argmax_f32(3, d, x, -1, 1, y, NULL);
    KT_EQ_INT(y[0], 2); KT_EQ_INT(y[1], 3); KT_EQ_INT(y[3], 3);
    kl_argmin_f32(3, d, x, 1, 0, y, NULL);
    KT_EQ_INT(y[0], 2); KT_EQ_INT(y[1], 2); KT_EQ_INT(y[3], 0); KT_EQ_INT(y[4], 0);
    /* softmax over each axis vs reference */
    int64_t sd[3] = {3, 37, 5}, n = 555;
    float *s = tt_randn(n, 51), *o = malloc(4 * (size_t)n), *o2 = malloc(4 * (size_t)n);
    for (int64_t i = 0; i < n; i++) s[i] *= 30;
    for (int ax = 0; ax < 3; ax++)
        for (int lg = 0; lg < 2; lg++) {
            kl_softmax_f32(3, sd, s, ax, lg, o, tt_pool(1));
            kl_softmax_f32(3, sd, s, ax, lg, o2, tt_pool(2));
            KT_CHECK(memcmp(o, o2, 4 * (size_t)n) == 0);
            int64_t outer = 1, inner = 1, R = sd[ax];
            for (int i = 0; i < ax; i++) outer *= sd[i];
            for (int i = ax + 1; i < 3; i++) inner *= sd[i];
            for (int64_t a = 0; a < outer; a++)
                for (int64_t b = 0; b < inner; b++) {
                    double m = -INFINITY, sum = 0;
                    for (int64_t r = 0; r < R; r++) m = fmax(m, s[(a * R + r) * inner + b]);
                    for (int64_t r = 0; r < R; r++) sum += exp(s[(a * R + r) * inner + b] - m);
                    for (int64_t r = 0; r < R; r++) {
                        double v = s[(a * R + r) * inner + b];
                        double ref = lg ? v - m - log(sum) : exp(v - m) / sum;
                        KT_NEAR(o[(a * R + r) * inner + b], ref, lg ? 1e-4 : 1e-6);
                    }
                }
        }
    free(s); free(o); free(o2);
}
