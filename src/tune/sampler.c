/* Samplers: random, grid and TPE (tree-structured Parzen estimators).
 *
 * TPE: the finished trials are split into the best gamma(n) = min(ceil(n/10),
 * 25) ("below") and the rest ("above"); complete trials rank first by value,
 * then pruned ones by the epochs they reached and their last value (so with
 * aggressive pruning the good estimator still has observations). Each group gets a
 * Parzen estimator: a mixture of truncated Gaussians (one per observation,
 * plus a wide prior component) in the parameter's transformed space (log for
 * log-scale, +-step/2 around integers); categoricals get a smoothed
 * categorical per observation. n_ei_candidates points are drawn from l(x)
 * (below) and the one maximising log l(x) - log g(x) is suggested.
 * Bandwidths: univariate = distance to the farther neighbour, clipped to
 * [range/min(100, 1+n), range]; multivariate = Scott's rule b n^(-1/(d+4))
 * range with b = 0.03 by default (0.2 is the textbook value; the narrower
 * kernel exploits more). The defaults (b = 0.03, 64 candidates, 8 startup
 * trials) were chosen on bench/tune at 10 and 30 seeds; see bench/README.md.
 * Grid: trial k gets the k-th distinct point of the grid (a point
 * conditions make equal to an earlier one is skipped), so workers that
 * claim distinct trial numbers never evaluate one point twice.
 * With constant_liar, RUNNING trials (parallel ones) join the "above"
 * group like pruned trials, so concurrent suggestions avoid each other.
 * Multivariate mode models the unconditional numerical parameters jointly
 * and categoricals and conditional parameters one by one. Older observations get lower weight once a
 * group has more than 25. Everything is a deterministic function of the
 * history, the seed and the trial number. */
#include <keel/tune.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kl_sampler_opts_default(kl_sampler_opts *o) {
    memset(o, 0, sizeof *o);
    o->kind = KL_SAMPLER_TPE;
    o->seed = 0;
    o->n_startup = 8;
    o->n_ei_candidates = 64;
    o->multivariate = 1;
    o->bandwidth = 0.03;
    o->grid_points = 5;
    o->constant_liar = 1;
}

int kl_sampler_kind_parse(const char *s, kl_sampler_kind *out) {
    if (!strcmp(s, "random")) *out = KL_SAMPLER_RANDOM;
    else if (!strcmp(s, "grid")) *out = KL_SAMPLER_GRID;
    else if (!strcmp(s, "tpe")) *out = KL_SAMPLER_TPE;
    else return KL_EINVAL;
    return KL_OK;
}

/* ---- random numbers ---------------------------------------------------- */

typedef struct { uint64_t s; } rng_t;
static double uniform(rng_t *r) { return kl_splitmix_uniform(&r->s); }
static double normal(rng_t *r) {
    double u1 = uniform(r), u2 = uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

/* ---- the transformed space ----------------------------------------------- */

/* Bounds in the space the estimators work in. */
static void tbounds(const kl_tune_param *p, double *lo, double *hi) {
    double half = p->kind == KL_TUNE_INT ? p->step / 2 : p->step > 0 ? p->step / 2 : 0;
    if (p->log) {
        *lo = log(p->low - half);
        *hi = log(p->high + half);
        if (p->kind == KL_TUNE_INT) { *lo = log(p->low - 0.5 > 0 ? p->low - 0.5 : p->low * 0.5); *hi = log(p->high + 0.5); }
    } else {
        *lo = p->low - half;
        *hi = p->high + half;
    }
}

static double to_t(const kl_tune_param *p, double v) { return p->log ? log(v) : v; }

/* Back from the transformed space, snapped to the parameter's grid and bounds. */
static double from_t(const kl_tune_param *p, double t) {
    double v = p->log ? exp(t) : t;
    if (p->kind == KL_TUNE_INT || p->step > 0) {
        double st = p->kind == KL_TUNE_INT ? p->step : p->step;
        v = p->low + round((v - p->low) / st) * st;
    }
    if (v < p->low) v = p->low;
    if (v > p->high) v = p->high;
    return v;
}

static int is_present(const kl_tune_space *s, int i, const kl_tune_value *vals) {
    const kl_tune_param *p = &s->p[i];
    if (p->cond < 0) return 1;
    if (!vals[p->cond].present) return 0;
    kl_tune_value want;
    if (kl_tune_value_parse(&s->p[p->cond], p->cond_value, &want)) return 0;
    return fabs(vals[p->cond].v - want.v) <= 1e-12 * (1 + fabs(want.v));
}

static double sample_random(const kl_tune_param *p, rng_t *r) {
    if (p->kind == KL_TUNE_CAT) {
        int c = (int)(uniform(r) * p->nchoices);
        return c >= p->nchoices ? p->nchoices - 1 : c;
    }
    double lo, hi;
    tbounds(p, &lo, &hi);
    return from_t(p, lo + (hi - lo) * uniform(r));
}

/* ---- Parzen estimators ------------------------------------------------- */

/* One observation-component set over the parameters of a group. */
typedef struct {
    int nobs;        /* observations; component nobs is the prior */
    double *w;       /* nobs + 1 normalised weights */
    double **mu;     /* per dim: nobs + 1 centres (numerical dims) */
    double **sig;    /* per dim: nobs + 1 widths */
    double **cat;    /* per dim: (nobs + 1) * nchoices probabilities (categorical dims) */
    double *cst;     /* per component: log weight + the x-independent terms of the numerical dims */
    double *scratch; /* nobs + 1 */
} parzen;

static void parzen_free(parzen *z, int d) {
    for (int k = 0; k < d; k++) { free(z->mu[k]); free(z->sig[k]); free(z->cat[k]); }
    free(z->mu); free(z->sig); free(z->cat); free(z->w); free(z->cst); free(z->scratch);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* obs: nobs x d values (transformed; categorical as index), in trial order. */
static int parzen_fit(parzen *z, const kl_tune_space *s, const int *dims, int d, const double *obs, int nobs,
                      int multivariate, double bw) {
    memset(z, 0, sizeof *z);
    z->nobs = nobs;
    int nk = nobs + 1;
    z->w = malloc((size_t)nk * sizeof *z->w);
    z->mu = calloc((size_t)d, sizeof *z->mu);
    z->sig = calloc((size_t)d, sizeof *z->sig);
    z->cat = calloc((size_t)d, sizeof *z->cat);
    if (!z->w || !z->mu || !z->sig || !z->cat) return KL_ENOMEM;
    /* weights: older observations fade once there are more than 25 */
    double tot = 0;
    for (int i = 0; i < nobs; i++) {
        double w = 1;
        if (nobs > 25 && i < nobs - 25) w = 1.0 / nobs + (1 - 1.0 / nobs) * (double)i / (double)(nobs - 25 > 1 ? nobs - 26 : 1);
        z->w[i] = w;
        tot += w;
    }
    z->w[nobs] = 1.0; /* the prior */
    tot += 1.0;
    for (int i = 0; i < nk; i++) z->w[i] /= tot;
    for (int k = 0; k < d; k++) {
        const kl_tune_param *p = &s->p[dims[k]];
        if (p->kind == KL_TUNE_CAT) {
            int C = p->nchoices;
            z->cat[k] = malloc((size_t)nk * (size_t)C * sizeof(double));
            if (!z->cat[k]) return KL_ENOMEM;
            for (int i = 0; i < nk; i++) {
                double *row = z->cat[k] + (size_t)i * C, sum = 0;
                for (int c = 0; c < C; c++) row[c] = 1.0 / nk;
                if (i < nobs) row[(int)obs[(size_t)i * d + k]] += 1;
                for (int c = 0; c < C; c++) sum += row[c];
                for (int c = 0; c < C; c++) row[c] /= sum;
            }
            continue;
        }
        double lo, hi;
        tbounds(p, &lo, &hi);
        double range = hi - lo;
        z->mu[k] = malloc((size_t)nk * sizeof(double));
        z->sig[k] = malloc((size_t)nk * sizeof(double));
        if (!z->mu[k] || !z->sig[k]) return KL_ENOMEM;
        for (int i = 0; i < nobs; i++) z->mu[k][i] = obs[(size_t)i * d + k];
        z->mu[k][nobs] = 0.5 * (lo + hi);
        if (multivariate) {
            double sg = bw * pow(nobs > 1 ? nobs : 1, -1.0 / (d + 4)) * range;
            for (int i = 0; i < nobs; i++) z->sig[k][i] = sg;
        } else {
            /* distance to the farther neighbour among the sorted centres and the bounds */
            double *sorted = malloc((size_t)nk * sizeof(double));
            if (!sorted) return KL_ENOMEM;
            memcpy(sorted, z->mu[k], (size_t)nk * sizeof(double));
            qsort(sorted, (size_t)nk, sizeof(double), cmp_dbl);
            for (int i = 0; i < nobs; i++) {
                double m = z->mu[k][i];
                int j = 0;
                while (j < nk - 1 && sorted[j] < m) j++;
                double left = j > 0 ? sorted[j - 1] : lo, right = j < nk - 1 ? sorted[j + 1] : hi;
                double sg = m - left > right - m ? m - left : right - m;
                z->sig[k][i] = sg;
            }
            free(sorted);
        }
        z->sig[k][nobs] = range;
        double minsig = range / (nk < 100 ? nk : 100), maxsig = range;
        for (int i = 0; i < nk; i++) {
            if (z->sig[k][i] < minsig) z->sig[k][i] = minsig;
            if (z->sig[k][i] > maxsig) z->sig[k][i] = maxsig;
        }
    }
    /* the parts of the log density that do not depend on x, once per fit */
    z->cst = malloc((size_t)nk * sizeof(double));
    z->scratch = malloc((size_t)nk * sizeof(double));
    if (!z->cst || !z->scratch) return KL_ENOMEM;
    for (int i = 0; i < nk; i++) {
        double c = log(z->w[i]);
        for (int k = 0; k < d; k++) {
            const kl_tune_param *p = &s->p[dims[k]];
            if (p->kind == KL_TUNE_CAT) continue;
            double lo, hi, mu = z->mu[k][i], sg = z->sig[k][i];
            tbounds(p, &lo, &hi);
            double mass = 0.5 * (erf((hi - mu) / (sg * M_SQRT2)) - erf((lo - mu) / (sg * M_SQRT2)));
            if (mass < 1e-300) mass = 1e-300;
            c += -log(sg) - 0.5 * log(2 * M_PI) - log(mass);
        }
        z->cst[i] = c;
    }
    return KL_OK;
}

static double parzen_logpdf(const parzen *z, const kl_tune_space *s, const int *dims, int d, const double *x) {
    int nk = z->nobs + 1;
    double best = -INFINITY, *lp = z->scratch;
    for (int i = 0; i < nk; i++) {
        double v = z->cst[i];
        for (int k = 0; k < d; k++) {
            const kl_tune_param *p = &s->p[dims[k]];
            if (p->kind == KL_TUNE_CAT) {
                v += log(z->cat[k][(size_t)i * p->nchoices + (int)x[k]]);
            } else {
                double t = (x[k] - z->mu[k][i]) / z->sig[k][i];
                v -= 0.5 * t * t;
            }
        }
        lp[i] = v;
        if (v > best) best = v;
    }
    double sum = 0;
    for (int i = 0; i < nk; i++) sum += exp(lp[i] - best);
    return best + log(sum);
}

static void parzen_sample(const parzen *z, const kl_tune_space *s, const int *dims, int d, rng_t *r, double *x) {
    int nk = z->nobs + 1;
    double u = uniform(r), acc = 0;
    int comp = nk - 1;
    for (int i = 0; i < nk; i++) {
        acc += z->w[i];
        if (u < acc) { comp = i; break; }
    }
    for (int k = 0; k < d; k++) {
        const kl_tune_param *p = &s->p[dims[k]];
        if (p->kind == KL_TUNE_CAT) {
            const double *row = z->cat[k] + (size_t)comp * p->nchoices;
            double v = uniform(r), a = 0;
            int c = p->nchoices - 1;
            for (int j = 0; j < p->nchoices; j++) {
                a += row[j];
                if (v < a) { c = j; break; }
            }
            x[k] = c;
        } else {
            double lo, hi, v;
            tbounds(p, &lo, &hi);
            int tries = 0;
            do v = z->mu[k][comp] + z->sig[k][comp] * normal(r);
            while ((v < lo || v > hi) && ++tries < 100);
            if (v < lo || v > hi) v = lo + (hi - lo) * uniform(r);
            x[k] = v;
        }
    }
}

/* ---- TPE ----------------------------------------------------------------- */

/* grp 0: complete (by value); 1: pruned (more epochs first, then by the last
 * reported value); 2: running (constant liar: always the worst). value is in
 * the minimisation sense. */
typedef struct { int grp, steps; double value; int number; int idx; } ranked;

static int cmp_rank(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->grp != y->grp) return x->grp - y->grp;
    if (x->steps != y->steps) return y->steps - x->steps;
    if (x->value != y->value) return x->value < y->value ? -1 : x->value > y->value ? 1 : isnan(x->value) - isnan(y->value);
    return x->number - y->number;
}

static int cmp_number(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    return x->number - y->number;
}

/* Suggests the params in dims (all present in the trials used) jointly. */
static int tpe_group(const kl_tune_space *s, const kl_sampler_opts *o, const kl_trial *h, size_t n, int minimize,
                     const int *dims, int d, int multivariate, rng_t *r, kl_tune_value *out) {
    /* trials where every dim is present */
    ranked *good = malloc((n + 1) * sizeof *good), *bad = malloc((n + 1) * sizeof *bad);
    double *obs = NULL, *best = NULL, *cand = NULL;
    int rc = KL_ENOMEM, ng = 0, nb = 0, nranked = 0;
    parzen lz, gz;
    memset(&lz, 0, sizeof lz);
    memset(&gz, 0, sizeof gz);
    if (!good || !bad) goto done;
    for (size_t i = 0; i < n; i++) {
        const kl_trial *t = &h[i];
        int liar = t->state == KL_TRIAL_RUNNING && o->constant_liar; /* a running trial: assumed bad */
        if (t->state != KL_TRIAL_COMPLETE && t->state != KL_TRIAL_PRUNED && !liar) continue;
        if (t->state == KL_TRIAL_COMPLETE && !isfinite(t->value)) continue;
        int ok = 1;
        for (int k = 0; k < d; k++) ok &= t->params[dims[k]].present;
        if (!ok) continue;
        ranked r = {0, 0, minimize ? t->value : -t->value, t->number, (int)i};
        if (t->state == KL_TRIAL_PRUNED) { /* ranked by how far it got, then by its last value (as Optuna) */
            r.grp = 1;
            r.value = NAN;
            for (int k = t->ninter - 1; k >= 0 && isnan(r.value); k--)
                if (!isnan(t->inter[k])) { r.steps = k + 1; r.value = minimize ? t->inter[k] : -t->inter[k]; }
        } else if (liar) {
            r.grp = 2;
        }
        nranked += r.grp < 2;
        good[ng++] = r;
    }
    qsort(good, (size_t)ng, sizeof *good, cmp_rank);
    int nbelow = (int)ceil(0.1 * ng);
    if (nbelow > 25) nbelow = 25;
    if (nbelow > nranked) nbelow = nranked;
    for (int i = nbelow; i < ng; i++) bad[nb++] = good[i];
    ng = nbelow;
    qsort(good, (size_t)ng, sizeof *good, cmp_number);
    qsort(bad, (size_t)nb, sizeof *bad, cmp_number);
    obs = malloc(((size_t)(ng > nb ? ng : nb) + 1) * (size_t)d * sizeof(double));
    best = malloc((size_t)d * sizeof(double));
    cand = malloc((size_t)d * sizeof(double));
    if (!obs || !best || !cand) goto done;
    for (int pass = 0; pass < 2; pass++) {
        ranked *src = pass ? bad : good;
        int m = pass ? nb : ng;
        for (int i = 0; i < m; i++)
            for (int k = 0; k < d; k++) {
                const kl_tune_param *p = &s->p[dims[k]];
                double v = h[src[i].idx].params[dims[k]].v;
                obs[(size_t)i * d + k] = p->kind == KL_TUNE_CAT ? v : to_t(p, v);
            }
        if ((rc = parzen_fit(pass ? &gz : &lz, s, dims, d, obs, m, multivariate, o->bandwidth > 0 ? o->bandwidth : 0.03)))
            goto done;
    }
    double best_score = -INFINITY;
    int ncand = o->n_ei_candidates > 0 ? o->n_ei_candidates : 24;
    for (int c = 0; c < ncand; c++) {
        parzen_sample(&lz, s, dims, d, r, cand);
        double sc = parzen_logpdf(&lz, s, dims, d, cand) - parzen_logpdf(&gz, s, dims, d, cand);
        if (sc > best_score || c == 0) {
            best_score = sc;
            memcpy(best, cand, (size_t)d * sizeof(double));
        }
    }
    for (int k = 0; k < d; k++) {
        const kl_tune_param *p = &s->p[dims[k]];
        out[dims[k]].present = 1;
        out[dims[k]].v = p->kind == KL_TUNE_CAT ? best[k] : from_t(p, best[k]);
    }
    rc = KL_OK;
done:
    parzen_free(&lz, lz.mu ? d : 0);
    parzen_free(&gz, gz.mu ? d : 0);
    free(good); free(bad); free(obs); free(best); free(cand);
    return rc;
}

/* ---- grid ---------------------------------------------------------------- */

static int grid_count(const kl_tune_param *p, const kl_sampler_opts *o) {
    if (p->kind == KL_TUNE_CAT) return p->nchoices;
    double st = p->kind == KL_TUNE_INT ? p->step : p->step;
    if (st > 0 && !p->log) {
        double c = floor((p->high - p->low) / st + 1e-9) + 1;
        if (c <= 1000) return (int)c;
    }
    return o->grid_points > 1 ? o->grid_points : 5;
}

static double grid_value(const kl_tune_param *p, const kl_sampler_opts *o, int i) {
    if (p->kind == KL_TUNE_CAT) return i;
    int c = grid_count(p, o);
    double st = p->kind == KL_TUNE_INT ? p->step : p->step;
    if (st > 0 && !p->log && floor((p->high - p->low) / st + 1e-9) + 1 <= 1000) return p->low + i * st;
    double lo = p->log ? log(p->low) : p->low, hi = p->log ? log(p->high) : p->high;
    double t = c > 1 ? lo + (hi - lo) * i / (c - 1) : lo;
    double v = p->log ? exp(t) : t;
    if (p->kind == KL_TUNE_INT) v = round(v);
    return v < p->low ? p->low : v > p->high ? p->high : v;
}

uint64_t kl_tune_grid_size(const kl_tune_space *s, const kl_sampler_opts *o) {
    uint64_t n = 1;
    for (int i = 0; i < s->n; i++) {
        n *= (uint64_t)grid_count(&s->p[i], o);
        if (n > (1ull << 40)) return 0;
    }
    return n;
}

static void grid_point(const kl_tune_space *s, const kl_sampler_opts *o, uint64_t idx, kl_tune_value *out) {
    for (int i = s->n - 1; i >= 0; i--) {
        int c = grid_count(&s->p[i], o);
        out[i].v = grid_value(&s->p[i], o, (int)(idx % (uint64_t)c));
        out[i].present = 1;
        idx /= (uint64_t)c;
    }
    for (int i = 0; i < s->n; i++)
        if (!is_present(s, i, out)) { out[i].present = 0; out[i].v = 0; }
}

/* A grid index is canonical when every parameter its point leaves out
 * (a condition not met) has digit 0: the one index of each distinct point.
 * The first canonical index >= idx (size when there is none), its point in
 * pt. A condition names an earlier parameter (a more significant digit),
 * so while the digits above a left-out parameter stay, it stays out: the
 * block of its non-zero digits is skipped at once. */
static uint64_t grid_next_canonical(const kl_tune_space *s, const kl_sampler_opts *o, uint64_t idx, uint64_t size,
                                    kl_tune_value *pt) {
    while (idx < size) {
        grid_point(s, o, idx, pt);
        uint64_t rest = idx, stride = 1, block = 0;
        for (int i = s->n - 1; i >= 0; i--) {
            uint64_t c = (uint64_t)grid_count(&s->p[i], o);
            if (!pt[i].present && rest % c) block = stride * c; /* the most significant one wins */
            rest /= c;
            stride *= c;
        }
        if (!block) return idx;
        idx = (idx / block + 1) * block;
    }
    return size;
}

int kl_tune_grid_nth(const kl_tune_space *s, const kl_sampler_opts *o, uint64_t k, kl_tune_value *out,
                     uint64_t *distinct) {
    uint64_t size = kl_tune_grid_size(s, o), seen = 0;
    for (uint64_t g = 0; (g = grid_next_canonical(s, o, g, size, out)) < size; g++)
        if (seen++ == k) return KL_OK;
    if (distinct) *distinct = seen;
    return KL_ENOTFOUND;
}

/* ---- entry point --------------------------------------------------------- */

int kl_tune_suggest(const kl_tune_space *s, const kl_sampler_opts *o, const kl_trial *h, size_t n, int minimize,
                    int number, kl_tune_value *out, kl_err *e) {
    rng_t r = {o->seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)number + 1) * 0xd1b54a32d192ed03ull};
    for (int i = 0; i < s->n; i++) out[i] = (kl_tune_value){0, 0};
    if (o->kind == KL_SAMPLER_GRID) { /* trial k: the k-th distinct point (workers claim numbers, never points) */
        if (!kl_tune_grid_size(s, o)) return kl_err_set(e, KL_EINVAL, "grid: the space has too many points");
        uint64_t distinct = 0;
        if (number < 0 || kl_tune_grid_nth(s, o, (uint64_t)number, out, &distinct) == KL_ENOTFOUND)
            return kl_err_set(e, KL_ENOTFOUND, "grid: all %llu points have been evaluated (trial %d)",
                              (unsigned long long)distinct, number);
        return KL_OK;
    }
    size_t finished = 0; /* startup: complete and pruned trials count (as in Optuna) */
    for (size_t i = 0; i < n; i++) finished += h[i].state == KL_TRIAL_COMPLETE || h[i].state == KL_TRIAL_PRUNED;
    int tpe = o->kind == KL_SAMPLER_TPE && finished >= (size_t)(o->n_startup > 0 ? o->n_startup : 0) && finished > 0;
    if (!tpe) {
        for (int i = 0; i < s->n; i++)
            if (is_present(s, i, out)) out[i] = (kl_tune_value){1, sample_random(&s->p[i], &r)};
        return KL_OK;
    }
    int *dims = malloc((size_t)s->n * sizeof *dims);
    if (!dims) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    if (o->multivariate) {
        int d = 0;
        for (int i = 0; i < s->n; i++)
            if (s->p[i].cond < 0 && s->p[i].kind != KL_TUNE_CAT) dims[d++] = i;
        if (d) rc = tpe_group(s, o, h, n, minimize, dims, d, 1, &r, out);
    }
    for (int i = 0; i < s->n && rc == KL_OK; i++) {
        if (o->multivariate && s->p[i].cond < 0 && s->p[i].kind != KL_TUNE_CAT) continue;
        if (!is_present(s, i, out)) continue;
        dims[0] = i;
        rc = tpe_group(s, o, h, n, minimize, dims, 1, 0, &r, out);
    }
    free(dims);
    if (rc) return kl_err_set(e, rc, "TPE: out of memory");
    return KL_OK;
}
