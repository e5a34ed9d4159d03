/* One dispatch level of the unary kernels (included by unary.c once per
 * level after the primitives of vmath.h are defined, plus VW (lanes),
 * VLOAD/VSTORE and the tail forms VLOADT(p, k)/VSTORET(p, k, v) for k < VW
 * elements). Defines VM_FN(run) (kl__un_plan over n contiguous floats, tail
 * through masked loads/stores so every element runs the same vector code)
 * and VM_FN(prelu). */
#include "vmath.h"

VM_ATTR V VM_FN(pow_half)(V v) {
    /* sqrt, with pow's +0 for -0 and +inf for -inf */
    return VSEL(MEQ(v, VSET(-INFINITY)), VSET(INFINITY), VADD(VSQRT(v), VSET(0.0f)));
}

VM_ATTR_OUTER static void VM_FN(run)(const kl__un_plan *p, const float *x, float *y, int64_t n) {
    const V a = VSET(p->a), b = VSET(p->b);
    const int odd = p->odd, integral = p->integral;
    int64_t i = 0;
    (void)a; (void)b; (void)odd; (void)integral;
#define VM_CASE(OP, EXPR)                                                                   \
    case OP:                                                                                \
        for (; i + VW <= n; i += VW) { V v = VLOAD(x + i); VSTORE(y + i, (EXPR)); }          \
        if (i < n) { V v = VLOADT(x + i, n - i); VSTORET(y + i, n - i, (EXPR)); }             \
        return;
    switch (p->op) {
        VM_CASE(KL_UN_IDENTITY, v)
        VM_CASE(KL_UN_RELU, VMAX(VSET(0.0f), v))
        VM_CASE(KL_UN_LEAKY_RELU, VSEL(MLT(v, VSET(0.0f)), VMUL(v, a), v))
        VM_CASE(KL_UN_SIGMOID, VM_FN(sigmoid)(v))
        VM_CASE(KL_UN_SILU, VMUL(v, VM_FN(sigmoid)(v)))
        VM_CASE(KL_UN_TANH, VM_FN(tanh)(v))
        VM_CASE(KL_UN_EXP, VM_FN(exp)(v))
        VM_CASE(KL_UN_LOG, VM_FN(log)(v))
        VM_CASE(KL_UN_SQRT, VSQRT(v))
        VM_CASE(KL_UN_NEG, VXOR(v, VSET(-0.0f)))
        VM_CASE(KL_UN_ABS, VANDNOT(VSET(-0.0f), v))
        VM_CASE(KL_UN_RECIPROCAL, VDIV(VSET(1.0f), v))
        VM_CASE(KL_UN_ERF, VM_FN(erf)(v))
        VM_CASE(KL_UN_GELU, VM_FN(gelu)(v))
        VM_CASE(KL_UN_GELU_TANH, VM_FN(gelu_tanh)(v))
        VM_CASE(KL_UN_HARDSIGMOID, VMAX(VSET(0.0f), VMIN(VSET(1.0f), VFMA(v, a, b))))
        /* x * relu6(x + 3) / 6 (exact near the kink at -3), x itself from 3 on
     * (no overflow of x * 6) */
        VM_CASE(KL_UN_HARDSWISH,
                VSEL(MGE(v, VSET(3.0f)), v,
                     VDIV(VMUL(v, VMAX(VSET(0.0f), VMIN(VSET(6.0f), VADD(v, VSET(3.0f))))), VSET(6.0f))))
        VM_CASE(KL_UN_CLIP, VMIN(b, VMAX(a, v)))
        VM_CASE(KL_UN_FLOOR, VFLOOR(v))
        VM_CASE(KL_UN_CEIL, VCEIL(v))
        VM_CASE(KL_UN_ROUND, VRINT(v))
        VM_CASE(KL_UN_SIGN, VSEL(MGT(v, VSET(0.0f)), VSET(1.0f), VSEL(MLT(v, VSET(0.0f)), VSET(-1.0f), v)))
        VM_CASE(KL_UN_SOFTPLUS, VM_FN(softplus)(v))
        VM_CASE(KL_UN_ELU, VSEL(MLT(v, VSET(0.0f)), VMUL(a, VM_FN(expm1neg)(v)), v))
        VM_CASE(KL_UN_SELU, VMUL(b, VSEL(MLE(v, VSET(0.0f)), VMUL(a, VM_FN(expm1neg)(v)), v)))
        VM_CASE(KL_UN_CELU, VSEL(MGT(v, VSET(0.0f)), v, VMUL(a, VM_FN(expm1neg)(VDIV(v, a)))))
        VM_CASE(KL_UN_SQUARE, VMUL(v, v))
        VM_CASE(KL_UN_MISH, VM_FN(mish)(v))
        VM_CASE(KL_UN_SOFTSIGN, VDIV(v, VADD(VSET(1.0f), VANDNOT(VSET(-0.0f), v))))
        VM_CASE(KL__UN_POW_ONE, ((void)v, VSET(1.0f)))
        VM_CASE(KL__UN_POW_CUBE, VMUL(VMUL(v, v), v))
        VM_CASE(KL__UN_POW_HALF, VM_FN(pow_half)(v))
        VM_CASE(KL__UN_POW_RSQRT, VDIV(VSET(1.0f), VM_FN(pow_half)(v)))
        VM_CASE(KL__UN_POW_GEN, VM_FN(powc)(v, a, odd, integral))
    default: break;
    }
#undef VM_CASE
    /* ops without a vector form (sin, cos, pow with a non-finite exponent) */
    kl__un_libm(p, x, y, n);
}

/* y = x < 0 ? x * s : x, x and s read with strides (0 or 1 on the vector path). */
VM_ATTR_OUTER static void VM_FN(prelu)(const float *x, int64_t sx, const float *s, int64_t ss, float *y, int64_t n) {
    int64_t i = 0;
#define VM_PRELU(SLOPE)                                                                                   \
    for (; i + VW <= n; i += VW) {                                                                        \
        V v = VLOAD(x + i), sl = (SLOPE);                                                                 \
        VSTORE(y + i, VSEL(MLT(v, VSET(0.0f)), VMUL(v, sl), v));                                          \
    }
    if (sx == 1 && ss == 1) {
        VM_PRELU(VLOAD(s + i))
    } else if (sx == 1 && ss == 0) {
        V s0 = VSET(s[0]);
        VM_PRELU(s0)
    }
#undef VM_PRELU
    for (; i < n; i++) {
        float v = x[i * sx], sl = s[i * ss];
        y[i] = v < 0 ? v * sl : v;
    }
}
