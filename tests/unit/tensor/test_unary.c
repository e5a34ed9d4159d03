/* Unit tests of the unary float32 kernels (unary.c) against a float64
 * reference: random values over several magnitudes and the special values
 * (NaN, +-inf, +-0, subnormals, the overflow edges) at the first, middle and
 * last positions of odd lengths, at every dispatch level this CPU has
 * (kl__isa_force), with the levels and 1/2-thread pools bit-identical. The
 * error is in float ulps of the reference, with an absolute floor per op
 * (docs/tensor.md states the bounds). KEEL_UNARY_REPORT=1 prints the
 * measured maxima. */
#include "../harness.h"
#include "tensor/tensor_int.h"
#include "tt.h"

#include <float.h>

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }
static double softplusd(double x) { return fmax(x, 0) + log1p(exp(-fabs(x))); }

static double ref_op(kl_unary_op op, double x, double a, double b) {
    switch (op) {
    case KL_UN_RELU: return x < 0 ? 0 : x;
    case KL_UN_LEAKY_RELU: return x < 0 ? a * x : x;
    case KL_UN_SIGMOID: return 1 / (1 + exp(-x));
    case KL_UN_SILU: return x / (1 + exp(-x));
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
    case KL_UN_HARDSIGMOID: return clampd(a * x + b, 0, 1);
    case KL_UN_HARDSWISH: return x * clampd(x / 6 + 0.5, 0, 1);
    case KL_UN_CLIP: return clampd(x, a, b);
    case KL_UN_FLOOR: return floor(x);
    case KL_UN_CEIL: return ceil(x);
    case KL_UN_ROUND: return nearbyint(x);
    case KL_UN_SIGN: return x > 0 ? 1 : x < 0 ? -1 : x;
    case KL_UN_SOFTPLUS: return softplusd(x);
    case KL_UN_ELU: return x < 0 ? a * expm1(x) : x;
    case KL_UN_SELU: return x <= 0 ? b * a * expm1(x) : b * x;
    case KL_UN_CELU: return x > 0 ? x : a * expm1(x / a);
    case KL_UN_SQUARE: return x * x;
    case KL_UN_MISH: return x * tanh(softplusd(x));
    case KL_UN_SOFTSIGN: return x / (1 + fabs(x));
    case KL_UN_POW: return pow(x, a);
    default: return NAN;
    }
}

/* float ulp at |r| (subnormal spacing below FLT_MIN) */
static double ulp_of(double r) {
    double m = fabs(r);
    if (m < FLT_MIN) return ldexp(1.0, -149);
    int e;
    frexp(m, &e);
    return ldexp(1.0, e - 24);
}

typedef struct {
    kl_unary_op op;
    float a, b;
    double max_ulp;   /* bound on |y - ref| / max(ulp(ref), floor) */
    double floor;     /* absolute floor of the error unit (0: ulps only) */
} ucase;

#define NSPEC 24
static const float SPECIAL[NSPEC] = {
    NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 1.4e-45f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
    88.72f, -88.72f, 89.0f, -89.0f, -103.9f, -110.0f, 1.0f, -1.0f, 0.5f, -3.0f, 3.0f, 1e-7f,
};

/* n values: random over magnitudes 1e-30..1e30 and [-12, 12], specials at
 * the start, middle and end */
static float *make_input(int64_t n, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        float u = tt_rand(&s), v = tt_rand(&s);
        if (i % 3 == 0) x[i] = (u < 0 ? -1.0f : 1.0f) * powf(10.0f, 30.0f * v);
        else x[i] = 12.0f * u;
    }
    for (int k = 0; k < NSPEC && k < n; k++) {
        x[k % n] = SPECIAL[k];
        x[(n / 2 + k) % n] = SPECIAL[(k + 7) % NSPEC];
        x[(n - 1 - k + n) % n] = SPECIAL[(k + 13) % NSPEC];
    }
    return x;
}

static int same_bits(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(a[i] != a[i] && b[i] != b[i])) return 0;
    return 1;
}

static void check_case(const ucase *c) {
    static const int64_t lens[] = {1, 7, 15, 16, 17, 31, 1023, 20011};
    int top = kl__isa_level(), keep = kl__isa_force;
    double worst = 0, worst_x = 0;
    for (size_t li = 0; li < KL_ARRAY_LEN(lens); li++) {
        int64_t n = lens[li];
        float *x = make_input(n, 77 + (uint64_t)li * 13 + (uint64_t)c->op), *y0 = malloc(4 * (size_t)n),
              *y = malloc(4 * (size_t)n);
        for (int lv = top; lv >= 0; lv--) {
            kl__isa_force = lv;
            kl_unary_f32(c->op, x, lv == top ? y0 : y, n, c->a, c->b, tt_pool(lv == top ? 1 : 2));
            if (lv != top)
                KT_CHECKF(same_bits(y0, y, n), "%s(a=%g): level %d differs from level %d (n=%lld)",
                          kl_unary_name(c->op), c->a, lv, top, (long long)n);
        }
        kl__isa_force = keep;
        for (int64_t i = 0; i < n; i++) {
            double r = ref_op(c->op, x[i], c->a, c->b);
            float got = y0[i];
            if (isnan(r) || isinf(r) || fabs(r) > FLT_MAX) {
                float rf = (float)r;
                int ok = isnan(r) ? isnan(got) : got == rf;
                KT_CHECKF(ok, "%s(a=%g)(%g) = %g, want %g", kl_unary_name(c->op), c->a, x[i], got, r);
                continue;
            }
            double err = fabs((double)got - r) / fmax(ulp_of(r), c->floor);
            if (isnan(got)) err = INFINITY;
            if (err > worst) { worst = err; worst_x = x[i]; }
        }
        free(x); free(y0); free(y);
    }
    if (getenv("KEEL_UNARY_REPORT"))
        printf("  %-12s a=%-5g max %.2f ulp (floor %g) at x=%.9g\n", kl_unary_name(c->op), c->a, worst, c->floor,
               worst_x);
    KT_CHECKF(worst <= c->max_ulp, "%s(a=%g): max error %.2f units at x=%.9g (bound %g)", kl_unary_name(c->op), c->a,
              worst, worst_x, c->max_ulp);
}

#define UCASE_TEST(NAME, ...)                                                  \
    KL_TEST(tensor_unary_ref_##NAME) {                                         \
        static const ucase cs[] = {__VA_ARGS__};                               \
        for (size_t k = 0; k < KL_ARRAY_LEN(cs); k++) check_case(&cs[k]);      \
    }

/* floors: FLT_MIN where a result below the normal range is flushed (exp and
 * what uses it) or its subnormal rounding shifts; 1e-36 for x sigmoid(x)
 * and mish (their exp flushes while x times it is still normal); 2^-24
 * where the formula cancels (0.5 x (1 + erf) for x < 0) so the error is
 * absolute */
#define TINY 1.17549435e-38
#define ABS24 5.9604645e-8
UCASE_TEST(sigmoid, {KL_UN_SIGMOID, 0, 0, 4, TINY})
UCASE_TEST(silu, {KL_UN_SILU, 0, 0, 4, 1e-36})
UCASE_TEST(tanh, {KL_UN_TANH, 0, 0, 4, 0})
UCASE_TEST(exp, {KL_UN_EXP, 0, 0, 2, TINY})
UCASE_TEST(log, {KL_UN_LOG, 0, 0, 2, 0})
UCASE_TEST(erf, {KL_UN_ERF, 0, 0, 64, TINY})
UCASE_TEST(gelu, {KL_UN_GELU, 0, 0, 64, ABS24})
UCASE_TEST(gelu_tanh, {KL_UN_GELU_TANH, 0, 0, 8, ABS24})
UCASE_TEST(softplus, {KL_UN_SOFTPLUS, 0, 0, 4, TINY})
UCASE_TEST(mish, {KL_UN_MISH, 0, 0, 6, 1e-36})
UCASE_TEST(elu_selu_celu, {KL_UN_ELU, 1.0f, 0, 4, 0}, {KL_UN_ELU, 0.3f, 0, 4, 0},
           {KL_UN_SELU, 1.67326319f, 1.05070102f, 4, 0}, {KL_UN_CELU, 1.0f, 0, 4, 0}, {KL_UN_CELU, 0.7f, 0, 4, 0})
UCASE_TEST(hard, {KL_UN_HARDSIGMOID, 0.2f, 0.5f, 1, 0}, {KL_UN_HARDSWISH, 0, 0, 2, 0},
           {KL_UN_HARDSIGMOID, 1.0f / 6, 0.5f, 1, 0})
UCASE_TEST(piecewise, {KL_UN_RELU, 0, 0, 0, 0}, {KL_UN_LEAKY_RELU, 0.01f, 0, 0.5, 0}, {KL_UN_CLIP, -1.5f, 6.0f, 0, 0},
           {KL_UN_CLIP, 0.0f, INFINITY, 0, 0}, {KL_UN_NEG, 0, 0, 0, 0}, {KL_UN_ABS, 0, 0, 0, 0},
           {KL_UN_FLOOR, 0, 0, 0, 0}, {KL_UN_CEIL, 0, 0, 0, 0}, {KL_UN_ROUND, 0, 0, 0, 0}, {KL_UN_SIGN, 0, 0, 0, 0})
UCASE_TEST(sqrt_recip, {KL_UN_SQRT, 0, 0, 0.5, 0}, {KL_UN_RECIPROCAL, 0, 0, 0.5, 0}, {KL_UN_SQUARE, 0, 0, 0.5, 0},
           {KL_UN_SOFTSIGN, 0, 0, 1.5, 0})
UCASE_TEST(pow_const, {KL_UN_POW, 2.0f, 0, 0.5, 0}, {KL_UN_POW, 0.5f, 0, 0.5, 0}, {KL_UN_POW, -1.0f, 0, 0.5, 0},
           {KL_UN_POW, -0.5f, 0, 1.5, 0}, {KL_UN_POW, 3.0f, 0, 1.5, 0}, {KL_UN_POW, 1.0f, 0, 0, 0},
           {KL_UN_POW, 0.0f, 0, 0, 0}, {KL_UN_POW, 1.7f, 0, 4, TINY}, {KL_UN_POW, -2.0f, 0, 4, TINY},
           {KL_UN_POW, 5.0f, 0, 4, TINY}, {KL_UN_POW, -3.0f, 0, 4, TINY}, {KL_UN_POW, 2.5f, 0, 4, TINY},
           {KL_UN_POW, 0.33f, 0, 4, TINY})

/* named special values, as libm */
KL_TEST(tensor_unary_special_values) {
    struct {
        kl_unary_op op;
        float a, x, want;
    } cs[] = {
        {KL_UN_SIGMOID, 0, -INFINITY, 0.0f},     {KL_UN_SIGMOID, 0, INFINITY, 1.0f},
        {KL_UN_TANH, 0, INFINITY, 1.0f},         {KL_UN_TANH, 0, -INFINITY, -1.0f},
        {KL_UN_EXP, 0, 89.0f, INFINITY},         {KL_UN_EXP, 0, -INFINITY, 0.0f},
        {KL_UN_LOG, 0, 0.0f, -INFINITY},         {KL_UN_LOG, 0, -0.0f, -INFINITY},
        {KL_UN_LOG, 0, INFINITY, INFINITY},      {KL_UN_ERF, 0, INFINITY, 1.0f},
        {KL_UN_ERF, 0, -INFINITY, -1.0f},        {KL_UN_SOFTPLUS, 0, INFINITY, INFINITY},
        {KL_UN_SOFTPLUS, 0, -INFINITY, 0.0f},    {KL_UN_MISH, 0, INFINITY, INFINITY},
        {KL_UN_ELU, 1, -INFINITY, -1.0f},        {KL_UN_POW, 0.5f, -0.0f, 0.0f},
        {KL_UN_POW, 0.5f, -INFINITY, INFINITY},  {KL_UN_POW, -1.0f, -0.0f, -INFINITY},
        {KL_UN_POW, 3.0f, -2.0f, -8.0f},         {KL_UN_POW, 5.0f, -2.0f, -32.0f},
        {KL_UN_POW, -2.0f, 0.0f, INFINITY},      {KL_UN_POW, 0.0f, NAN, 1.0f},
        {KL_UN_POW, 1.7f, 1.0f, 1.0f},           {KL_UN_POW, -3.0f, -0.0f, -INFINITY},
        {KL_UN_POW, 5.0f, -INFINITY, -INFINITY}, {KL_UN_POW, -3.0f, -INFINITY, -0.0f},
        {KL_UN_POW, -1.7f, 0.0f, INFINITY},      {KL_UN_POW, 2.5f, -0.0f, 0.0f},
        {KL_UN_POW, -1.7f, INFINITY, 0.0f},      {KL_UN_POW, 2.5f, -INFINITY, INFINITY},
        {KL_UN_POW, -4.0f, -2.0f, 0.0625f},      {KL_UN_POW, 5.0f, -0.0f, -0.0f},
    };
    int top = kl__isa_level(), keep = kl__isa_force;
    for (int lv = top; lv >= 0; lv--) {
        kl__isa_force = lv;
        for (size_t k = 0; k < KL_ARRAY_LEN(cs); k++) {
            float y;
            kl_unary_f32(cs[k].op, &cs[k].x, &y, 1, cs[k].a, 0, NULL);
            KT_CHECKF(y == cs[k].want && signbit(y) == signbit(cs[k].want), "level %d: %s(a=%g)(%g) = %g, want %g", lv,
                      kl_unary_name(cs[k].op), cs[k].a, cs[k].x, y, cs[k].want);
        }
        float nx = NAN, y;
        for (int op = 0; op < KL_UN_COUNT; op++) {
            if (op == KL_UN_POW) continue;
            kl_unary_f32((kl_unary_op)op, &nx, &y, 1, 0.5f, 2.0f, NULL);
            KT_CHECKF(isnan(y), "level %d: %s(nan) = %g", lv, kl_unary_name((kl_unary_op)op), y);
        }
        float lx[3] = {-1.0f, -1e-30f, -INFINITY}, ly[3];
        kl_unary_f32(KL_UN_LOG, lx, ly, 3, 0, 0, NULL);
        KT_CHECK(isnan(ly[0]) && isnan(ly[1]) && isnan(ly[2]));
        kl_unary_f32(KL_UN_POW, lx, ly, 2, 0.33f, 0, NULL); /* x < 0, non-integer exponent */
        KT_CHECK(isnan(ly[0]) && isnan(ly[1]));
    }
    kl__isa_force = keep;
}

KL_TEST(tensor_unary_prelu) {
    int top = kl__isa_level(), keep = kl__isa_force;
    static const int64_t lens[] = {1, 7, 17, 1023};
    for (size_t li = 0; li < KL_ARRAY_LEN(lens); li++) {
        int64_t n = lens[li];
        float *x = make_input(n, 5 + li), *s = tt_randn(n, 9 + li), *y0 = malloc(4 * (size_t)n),
              *y = malloc(4 * (size_t)n);
        for (int mode = 0; mode < 2; mode++) {
            int64_t ss = mode;
            for (int lv = top; lv >= 0; lv--) {
                kl__isa_force = lv;
                kl_prelu_f32(x, 1, s, ss, lv == top ? y0 : y, n);
                if (lv != top) KT_CHECKF(same_bits(y0, y, n), "prelu level %d differs (n=%lld)", lv, (long long)n);
            }
            for (int64_t i = 0; i < n; i++) {
                float sl = s[i * ss], want = x[i] < 0 ? x[i] * sl : x[i];
                KT_CHECKF(!memcmp(&want, &y0[i], 4) || (isnan(want) && isnan(y0[i])), "prelu(%g, %g) = %g", x[i], sl,
                          y0[i]);
            }
        }
        free(x); free(s); free(y0); free(y);
    }
    kl__isa_force = keep;
}
