/* Drift statistics between a reference and a live distribution given as
 * counts over the same bins (include/keel/profile.h): PSI, Jensen-Shannon
 * distance, the binned two-sample Kolmogorov-Smirnov statistic with its
 * asymptotic p-value, and Pearson's chi-squared with pooled small bins and
 * its p-value (regularised incomplete gamma). Definitions and sources:
 * docs/monitoring.md. */
#include <math.h>
#include <stdlib.h>

#include "keel/profile.h"

static uint64_t sum(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

static double prop(uint64_t c, uint64_t tot) {
    double x = tot ? (double)c / (double)tot : 0.0;
    return x < KL_STAT_EPS ? KL_STAT_EPS : x;
}

double kl_stat_psi(const uint64_t *p, const uint64_t *q, size_t n) {
    uint64_t sp = sum(p, n), sq = sum(q, n);
    if (!sp || !sq) return NAN;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double a = prop(p[i], sp), b = prop(q[i], sq);
        s += (b - a) * log(b / a);
    }
    return s;
}

double kl_stat_js(const uint64_t *p, const uint64_t *q, size_t n) {
    uint64_t sp = sum(p, n), sq = sum(q, n);
    if (!sp || !sq) return NAN;
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double a = (double)p[i] / (double)sp, b = (double)q[i] / (double)sq, m = 0.5 * (a + b);
        if (a > 0) d += 0.5 * a * log2(a / m);
        if (b > 0) d += 0.5 * b * log2(b / m);
    }
    return d > 0 ? sqrt(d) : 0.0;
}

double kl_stat_ks(const uint64_t *p, const uint64_t *q, size_t n) {
    uint64_t sp = sum(p, n), sq = sum(q, n);
    if (!sp || !sq) return NAN;
    double fa = 0, fb = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        fa += (double)p[i] / (double)sp;
        fb += (double)q[i] / (double)sq;
        if (fabs(fa - fb) > d) d = fabs(fa - fb);
    }
    return d;
}

/* Q_KS(lambda) = 2 sum_{j>=1} (-1)^(j-1) exp(-2 j^2 lambda^2) */
static double q_ks(double lambda) {
    if (lambda < 1e-3) return 1.0;
    double s = 0, sign = 1, prev = 0;
    for (int j = 1; j <= 100; j++) {
        double t = sign * exp(-2.0 * j * j * lambda * lambda);
        s += t;
        if (fabs(t) <= 1e-10 * fabs(s) || fabs(t) <= 1e-300 || fabs(t) == prev) break;
        prev = fabs(t);
        sign = -sign;
    }
    s *= 2;
    return s < 0 ? 0 : s > 1 ? 1 : s;
}

double kl_stat_ks_pvalue(double d, uint64_t n, uint64_t m) {
    if (!n || !m || isnan(d)) return NAN;
    double ne = (double)n * (double)m / ((double)n + (double)m), sn = sqrt(ne);
    return q_ks((sn + 0.12 + 0.11 / sn) * d);
}

double kl_stat_chi2(const uint64_t *p, const uint64_t *q, size_t n, double min_expected, int *dof) {
    *dof = 0;
    uint64_t sp = sum(p, n), sq = sum(q, n);
    if (!sp || !sq || !n) return NAN;
    double x2 = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (size_t i = 0; i < n; i++) {
        double e = ((double)p[i] + 0.5) / ((double)sp + 0.5 * (double)n) * (double)sq;
        if (e < min_expected) {
            pool_e += e;
            pool_o += (double)q[i];
            continue;
        }
        x2 += ((double)q[i] - e) * ((double)q[i] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        x2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    *dof = bins - 1;
    return *dof > 0 ? x2 : NAN;
}

/* regularised gamma P(a, x) by its series, Q(a, x) by Lentz's continued
 * fraction (Numerical Recipes 6.2) */
static double gamma_p_series(double a, double x) {
    double ap = a, del = 1.0 / a, s = del;
    for (int k = 0; k < 1000; k++) {
        ap += 1;
        del *= x / ap;
        s += del;
        if (fabs(del) < fabs(s) * 1e-15) break;
    }
    return s * exp(-x + a * log(x) - lgamma(a));
}

static double gamma_q_cf(double a, double x) {
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double kl_stat_chi2_pvalue(double x, int dof) {
    if (dof <= 0 || isnan(x)) return NAN;
    if (x <= 0) return 1.0;
    double a = 0.5 * dof, y = 0.5 * x;
    return y < a + 1 ? 1.0 - gamma_p_series(a, y) : gamma_q_cf(a, y);
}

double kl_stat_chi2_quantile(double p, int dof) {
    if (dof <= 0 || !(p > 0 && p < 1)) return NAN;
    double lo = 0, hi = dof + 10.0;
    while (kl_stat_chi2_pvalue(hi, dof) > p && hi < 1e7) hi *= 2;
    for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; i++) { /* the tail falls with x: bisect */
        double mid = 0.5 * (lo + hi);
        if (kl_stat_chi2_pvalue(mid, dof) > p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* With nothing changed, PSI over k bins of n live and m reference values is
 * about (1/n + 1/m) X, X chi-squared with k - 1 degrees of freedom
 * (Yurdakul 2018), and the JS divergence in nats 1/8 of it (the quadratic
 * term of KL against the mixture), so the squared JS distance in bits is
 * (1/n + 1/m) X / (8 ln 2). Each stays under its threshold t with
 * probability 1 - alpha once (1/n + 1/m) q <= t, q the 1 - alpha quantile of
 * X: n >= 1 / (t / q - 1/m). */
uint64_t kl_stat_min_samples(int k, uint64_t m, double psi, double js, double alpha) {
    if (k < 2 || m == 0) return UINT64_MAX;
    double q = kl_stat_chi2_quantile(alpha, k - 1);
    double t[2] = {psi, 8 * M_LN2 * js * js}, need = 0;
    for (int i = 0; i < 2; i++) {
        double room = t[i] / q - 1.0 / (double)m;
        if (!(room > 0)) return UINT64_MAX; /* the reference alone is that noisy */
        if (1 / room > need) need = 1 / room;
    }
    return need >= 1e18 ? UINT64_MAX : (uint64_t)ceil(need);
}
