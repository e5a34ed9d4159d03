/* The float32 math of the unary kernels (exp, expm1, log, log1p, tanh, erf,
 * sigmoid and the activations built on them), written once over a small set
 * of vector primitives and instantiated three times by unary.c: AVX-512
 * (16 lanes), AVX2 (8 lanes) and scalar (1 lane). Every level runs the same
 * IEEE operations in the same order (fma where the others fma, MINPS/MAXPS
 * operand semantics in the scalar min/max), so the three give bit-identical
 * results and an element's value never depends on the dispatch level, the
 * thread count or its position (vector body or tail).
 *
 * Before including, define: V (vector), M (lane mask), VM_FN(name) (the
 * level's function name), VM_ATTR (function attributes), and the
 * primitives:
 *   VSET(c) VADD VSUB VMUL VDIV VFMA(a,b,c)=a*b+c VFNMA(a,b,c)=c-a*b
 *   VMIN(a,b) VMAX(a,b) (a NaN in either gives b, as MINPS/MAXPS)
 *   VSQRT VRINT (nearest even) VFLOOR VCEIL
 *   VAND VOR VXOR VANDNOT(a,b)=~a&b (bitwise on the float bits)
 *   MLT MLE MGT MGE MEQ (ordered: false on NaN) MNAN(a) MOR MAND
 *   VSEL(m, t, f) (m ? t : f per lane)
 *   VPOW2N(n): 2^n for integer-valued n in [-126, 127]
 *   VEXPB(x): the biased exponent field of x as a float; VMANT1(x): x's
 *   significand with exponent 0 (in [1, 2)) */

/* exp(hi + lo) (lo: a low-order part, 0 for plain exp): Cephes range
 * reduction hi + lo = n ln2 + r (|r| <= ln2/2, ln2 in two parts, lo added
 * to r after the exact steps) and its degree-5 polynomial; 2^n applied in
 * two factors (finite up to FLT_MAX, overflow gives inf); results below the
 * normal range (x < -87.34) are 0, as keel's exp always gave; NaN stays NaN. */
VM_ATTR V VM_FN(exp_parts)(V hi, V lo) {
    V x0 = VADD(hi, lo);
    M out = MOR(MOR(MLT(x0, VSET(-104.0f)), MGT(x0, VSET(88.8f))), MNAN(x0));
    V x = VMIN(VSET(88.8f), VMAX(VSET(-104.0f), x0));
    x = VSEL(MNAN(x0), VSET(0.0f), x);
    V h = VSEL(out, x, hi), l = VSEL(out, VSET(0.0f), lo);
    V n = VRINT(VMUL(x, VSET(1.44269504088896341f)));
    V r = VFNMA(n, VSET(0.693359375f), h);
    r = VFNMA(n, VSET(-2.12194440e-4f), r);
    r = VADD(r, l);
    V z = VMUL(r, r);
    V y = VSET(1.9875691500E-4f);
    y = VFMA(y, r, VSET(1.3981999507E-3f));
    y = VFMA(y, r, VSET(8.3334519073E-3f));
    y = VFMA(y, r, VSET(4.1665795894E-2f));
    y = VFMA(y, r, VSET(1.6666665459E-1f));
    y = VFMA(y, r, VSET(5.0000001201E-1f));
    y = VFMA(y, z, VADD(r, VSET(1.0f)));
    V n1 = VFLOOR(VMUL(n, VSET(0.5f)));
    y = VMUL(VMUL(y, VPOW2N(n1)), VPOW2N(VSUB(n, n1)));
    y = VSEL(MLT(x0, VSET(-87.3365478515625f)), VSET(0.0f), y);
    return VSEL(MNAN(x0), x0, y);
}

VM_ATTR V VM_FN(exp)(V x) { return VM_FN(exp_parts)(x, VSET(0.0f)); }

/* expm1(x) for x <= 0 (and NaN): 2^n (1 + p) - 1 as fma(2^n, p, 2^n - 1),
 * with p = expm1(r) from the same polynomial, so small |x| keeps its
 * relative accuracy (n = 0: the result is p); x < -30 gives -1. Lanes with
 * x > 0 are garbage (callers select them away). */
VM_ATTR V VM_FN(expm1neg)(V x0) {
    V x = VMIN(VSET(0.0f), VMAX(VSET(-30.0f), x0));
    x = VSEL(MNAN(x0), VSET(0.0f), x);
    V n = VRINT(VMUL(x, VSET(1.44269504088896341f)));
    V r = VFNMA(n, VSET(0.693359375f), x);
    r = VFNMA(n, VSET(-2.12194440e-4f), r);
    V z = VMUL(r, r);
    V y = VSET(1.9875691500E-4f);
    y = VFMA(y, r, VSET(1.3981999507E-3f));
    y = VFMA(y, r, VSET(8.3334519073E-3f));
    y = VFMA(y, r, VSET(4.1665795894E-2f));
    y = VFMA(y, r, VSET(1.6666665459E-1f));
    y = VFMA(y, r, VSET(5.0000001201E-1f));
    V p = VFMA(y, z, r);
    V s = VPOW2N(n);
    V e = VFMA(s, p, VSUB(s, VSET(1.0f)));
    return VSEL(MNAN(x0), x0, e);
}

/* log(x) for x > 0 finite as hi + lo: hi = e * 0.693359375 (exact), lo
 * the rest (Cephes logf: significand in [sqrt(1/2), sqrt 2), degree-8
 * polynomial, the low part of ln2); subnormals scaled by 2^23 first. */
VM_ATTR V VM_FN(log_parts)(V x0, V *lo) {
    M den = MLT(x0, VSET(1.17549435e-38f));
    V x = VSEL(den, VMUL(x0, VSET(8388608.0f)), x0);
    V e = VSUB(VEXPB(x), VSEL(den, VSET(150.0f), VSET(127.0f)));
    V m = VMANT1(x);
    M big = MGT(m, VSET(1.41421356237f));
    m = VSEL(big, VMUL(m, VSET(0.5f)), m);
    e = VSEL(big, VADD(e, VSET(1.0f)), e);
    V f = VSUB(m, VSET(1.0f));
    V z = VMUL(f, f);
    V y = VSET(7.0376836292E-2f);
    y = VFMA(y, f, VSET(-1.1514610310E-1f));
    y = VFMA(y, f, VSET(1.1676998740E-1f));
    y = VFMA(y, f, VSET(-1.2420140846E-1f));
    y = VFMA(y, f, VSET(1.4249322787E-1f));
    y = VFMA(y, f, VSET(-1.6668057665E-1f));
    y = VFMA(y, f, VSET(2.0000714765E-1f));
    y = VFMA(y, f, VSET(-2.4999993993E-1f));
    y = VFMA(y, f, VSET(3.3333331174E-1f));
    y = VMUL(VMUL(y, f), z);
    y = VFMA(e, VSET(-2.12194440e-4f), y);
    y = VFNMA(z, VSET(0.5f), y);
    *lo = VADD(f, y);
    return VMUL(e, VSET(0.693359375f));
}

/* log(x): log_parts summed once; log(0) = -inf, log(x < 0) = NaN, log(inf)
 * = inf, NaN stays NaN. */
VM_ATTR V VM_FN(log)(V x0) {
    V lo, hi = VM_FN(log_parts)(x0, &lo);
    V r = VADD(hi, lo);
    r = VSEL(MEQ(x0, VSET(INFINITY)), x0, r);
    r = VSEL(MEQ(x0, VSET(0.0f)), VSET(-INFINITY), r);
    return VSEL(MOR(MLT(x0, VSET(0.0f)), MNAN(x0)), VSET(NAN), r);
}

/* log(1 + u) for u >= 0 (and NaN, inf): log(w) * u / (w - 1) with w = 1 + u
 * (w - 1 is exact, the quotient corrects w's rounding); u where w == 1. */
VM_ATTR V VM_FN(log1p_pos)(V u) {
    V w = VADD(VSET(1.0f), u);
    V d = VSUB(w, VSET(1.0f));
    V r = VDIV(VMUL(VM_FN(log)(w), u), d);
    r = VSEL(MEQ(u, VSET(INFINITY)), u, r);
    return VSEL(MEQ(d, VSET(0.0f)), u, r);
}

VM_ATTR V VM_FN(sigmoid)(V x) {
    V e = VM_FN(exp)(VXOR(x, VSET(-0.0f)));
    return VDIV(VSET(1.0f), VADD(VSET(1.0f), e));
}

/* tanh(x) = -t / (t + 2) with t = expm1(-2|x|), sign of x restored: no
 * cancellation near 0, exactly +-1 from |x| ~ 9, NaN stays NaN. */
VM_ATTR V VM_FN(tanh)(V x) {
    V s = VAND(x, VSET(-0.0f));
    V ax = VXOR(x, s);
    V t = VM_FN(expm1neg)(VMUL(ax, VSET(-2.0f)));
    V r = VDIV(VXOR(t, VSET(-0.0f)), VADD(t, VSET(2.0f)));
    return VOR(r, s);
}

/* erf: the rational approximation on [-4, 4] of Eigen / TensorFlow, +-1
 * beyond |x| = 3.86 (where erf rounds to 1 in float), NaN stays NaN. */
VM_ATTR V VM_FN(erf)(V a) {
    V x = VMIN(VSET(4.0f), VMAX(VSET(-4.0f), a));
    V x2 = VMUL(x, x);
    V p = VSET(-2.72614225801306e-10f);
    p = VFMA(x2, p, VSET(2.77068142495902e-08f));
    p = VFMA(x2, p, VSET(-2.10102402082508e-06f));
    p = VFMA(x2, p, VSET(-5.69250639462346e-05f));
    p = VFMA(x2, p, VSET(-7.34990630326855e-04f));
    p = VFMA(x2, p, VSET(-2.95459980854025e-03f));
    p = VFMA(x2, p, VSET(-1.60960333262415e-02f));
    p = VMUL(x, p);
    V q = VSET(-1.45660718464996e-05f);
    q = VFMA(x2, q, VSET(-2.13374055278905e-04f));
    q = VFMA(x2, q, VSET(-1.68282697438203e-03f));
    q = VFMA(x2, q, VSET(-7.37332916720468e-03f));
    q = VFMA(x2, q, VSET(-1.42647390514189e-02f));
    V r = VMIN(VSET(1.0f), VMAX(VSET(-1.0f), VDIV(p, q)));
    M sat = MGE(VANDNOT(VSET(-0.0f), a), VSET(3.86f));
    r = VSEL(sat, VOR(VSET(1.0f), VAND(VSET(-0.0f), a)), r);
    return VSEL(MNAN(a), a, r);
}

/* softplus(x) = max(x, 0) + log1p(exp(-|x|)): no overflow, exact x for large x. */
VM_ATTR V VM_FN(softplus)(V x) {
    V u = VM_FN(exp)(VOR(x, VSET(-0.0f)));
    return VADD(VMAX(VSET(0.0f), x), VM_FN(log1p_pos)(u));
}

/* mish(x) = x tanh(softplus(x)) = x n / (n + 2), n = e (e + 2), e = exp(x);
 * x itself above 20 (tanh(softplus) rounds to 1 there). */
VM_ATTR V VM_FN(mish)(V x) {
    V e = VM_FN(exp)(VMIN(VSET(20.0f), x));
    V n = VMUL(e, VADD(e, VSET(2.0f)));
    V t = VDIV(n, VADD(n, VSET(2.0f)));
    return VMUL(x, VSEL(MGT(x, VSET(20.0f)), VSET(1.0f), t));
}

VM_ATTR V VM_FN(gelu)(V x) {
    V h = VMUL(VSET(0.5f), x);
    return VFMA(h, VM_FN(erf)(VMUL(x, VSET(0.70710678118654752f))), h);
}

VM_ATTR V VM_FN(gelu_tanh)(V x) {
    V x3 = VMUL(VMUL(x, x), x);
    V in = VMUL(VSET(0.79788456080286536f), VFMA(x3, VSET(0.044715f), x));
    V h = VMUL(VSET(0.5f), x);
    return VFMA(h, VM_FN(tanh)(in), h);
}

/* x^p for a constant p that is not one of the special exponents unary.c
 * handles directly: exp(p log|x|) with log|x| = hi + lo and the product's
 * rounding error (an fma) carried into exp's reduction, so the error stays
 * a few ulps however large p log|x| is; the sign of x for odd integer p,
 * NaN for x < 0 finite and non-integer p, zeros and infinities of x as C's
 * pow. odd: p is an odd integer; integral: p is an integer. */
VM_ATTR V VM_FN(powc)(V x, V p, int odd, int integral) {
    V ax = VANDNOT(VSET(-0.0f), x);
    V lo, hi = VM_FN(log_parts)(ax, &lo);
    V a = VMUL(p, hi);
    V s = VFMA(p, lo, VFMA(p, hi, VXOR(a, VSET(-0.0f))));
    V r = VM_FN(exp_parts)(a, s);
    M pos = MGT(p, VSET(0.0f));
    r = VSEL(MEQ(ax, VSET(0.0f)), VSEL(pos, VSET(0.0f), VSET(INFINITY)), r);
    r = VSEL(MEQ(ax, VSET(INFINITY)), VSEL(pos, VSET(INFINITY), VSET(0.0f)), r);
    r = VSEL(MNAN(x), x, r);
    if (odd) r = VOR(r, VAND(x, VSET(-0.0f)));
    if (!integral) r = VSEL(MAND(MLT(x, VSET(0.0f)), MGT(x, VSET(-INFINITY))), VSET(NAN), r);
    return VSEL(MEQ(x, VSET(1.0f)), VSET(1.0f), r);
}
