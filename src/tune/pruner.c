/* Pruners on intermediate values reported each step (epoch): median (stop a
 * trial whose value is worse than the median of the other trials at the same
 * step) and successive halving (ASHA: at rungs min_resource * eta^k only the
 * best 1/eta of the trials that reached the rung go on). */
#include <keel/tune.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kl_pruner_opts_default(kl_pruner_opts *o) {
    memset(o, 0, sizeof *o);
    o->kind = KL_PRUNER_NONE;
    o->n_startup_trials = 5;
    o->n_warmup_steps = 0;
    o->min_resource = 1;
    o->reduction_factor = 3;
}

int kl_pruner_kind_parse(const char *s, kl_pruner_kind *out) {
    if (!strcmp(s, "none")) *out = KL_PRUNER_NONE;
    else if (!strcmp(s, "median")) *out = KL_PRUNER_MEDIAN;
    else if (!strcmp(s, "asha") || !strcmp(s, "halving")) *out = KL_PRUNER_ASHA;
    else return KL_EINVAL;
    return KL_OK;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double at(const kl_trial *t, int step) {
    return step < t->ninter ? t->inter[step] : NAN;
}

/* best value so far (minimisation sense) of a trial up to step */
static double best_upto(const kl_trial *t, int step, int minimize) {
    double b = NAN;
    for (int i = 0; i <= step && i < t->ninter; i++) {
        double v = t->inter[i];
        if (isnan(v)) continue;
        if (!minimize) v = -v;
        if (isnan(b) || v < b) b = v;
    }
    return b;
}

int kl_tune_should_prune(const kl_pruner_opts *o, const kl_trial *h, size_t n, const kl_trial *cur, int step,
                         int minimize) {
    double mine = at(cur, step);
    if (isnan(mine)) return 0;
    if (!minimize) mine = -mine;
    if (o->kind == KL_PRUNER_MEDIAN) {
        if (step < o->n_warmup_steps) return 0;
        size_t done = 0;
        for (size_t i = 0; i < n; i++) done += h[i].state == KL_TRIAL_COMPLETE && h[i].number != cur->number;
        if (done < (size_t)o->n_startup_trials) return 0;
        double *v = malloc((n + 1) * sizeof *v);
        if (!v) return 0;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            const kl_trial *t = &h[i];
            if (t->number == cur->number || t->state == KL_TRIAL_RUNNING || t->state == KL_TRIAL_FAILED) continue;
            double b = best_upto(t, step, minimize);
            if (!isnan(b)) v[m++] = b;
        }
        int prune = 0;
        if (m > 0) {
            qsort(v, m, sizeof *v, cmp_dbl);
            double med = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
            prune = best_upto(cur, step, minimize) > med;
        }
        free(v);
        return prune;
    }
    if (o->kind == KL_PRUNER_ASHA) {
        int eta = o->reduction_factor > 1 ? o->reduction_factor : 3;
        long rung = o->min_resource > 0 ? o->min_resource : 1;
        /* is step (1-based resource step+1) a rung? */
        while (rung < step + 1) rung *= eta;
        if (rung != step + 1) return 0;
        double *v = malloc((n + 1) * sizeof *v);
        if (!v) return 0;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            const kl_trial *t = &h[i];
            if (t->number == cur->number || t->state == KL_TRIAL_FAILED) continue;
            double x = at(t, step);
            if (!isnan(x)) v[m++] = minimize ? x : -x;
        }
        v[m++] = mine;
        qsort(v, m, sizeof *v, cmp_dbl);
        size_t keep = m / (size_t)eta;
        int prune = 0;
        if (m >= (size_t)eta) prune = keep == 0 || mine > v[keep - 1];
        free(v);
        return prune;
    }
    return 0;
}
