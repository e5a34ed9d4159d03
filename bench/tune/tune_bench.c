/* keel's samplers on the standard test functions: for each function, seeds
 * 0..S-1, N trials each; prints per function the median (over seeds) of the
 * best value found, as JSON lines, plus the sampler time per trial at the
 * end of a long study. Usage: tune_bench [sampler] [trials] [seeds] [multivariate] [candidates] */
#include <keel/tune.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "functions.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *sampler = argc > 1 ? argv[1] : "tpe";
    int trials = argc > 2 ? atoi(argv[2]) : 50, seeds = argc > 3 ? atoi(argv[3]) : 10;
    kl_sampler_opts o;
    kl_sampler_opts_default(&o);
    if (argc > 4) o.multivariate = atoi(argv[4]);
    if (argc > 5) o.n_ei_candidates = atoi(argv[5]);
    if (argc > 6) o.n_startup = atoi(argv[6]);
    if (argc > 7) o.bandwidth = atof(argv[7]);
    if (kl_sampler_kind_parse(sampler, &o.kind)) { fprintf(stderr, "unknown sampler %s\n", sampler); return 2; }
    for (size_t f = 0; f < sizeof bench_fns / sizeof *bench_fns; f++) {
        const bench_fn *bf = &bench_fns[f];
        kl_doc *d;
        kl_err e = {0};
        kl_tune_space *s;
        if (kl_doc_load_str(bf->space_yaml, strlen(bf->space_yaml), bf->name, &d, &e) ||
            kl_tune_space_parse(kl_doc_root(d), &s, &e)) {
            fprintf(stderr, "%s\n", kl_err_what(&e));
            return 1;
        }
        kl_doc_free(d);
        double *bests = malloc((size_t)seeds * sizeof *bests);
        kl_trial *h = calloc((size_t)trials, sizeof *h);
        for (int seed = 0; seed < seeds; seed++) {
            o.seed = (uint64_t)seed;
            double best = INFINITY;
            for (int t = 0; t < trials; t++) {
                h[t].number = t;
                h[t].params = calloc((size_t)s->n, sizeof(kl_tune_value));
                if (kl_tune_suggest(s, &o, h, (size_t)t, 1, t, h[t].params, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
                double x[8];
                for (int i = 0; i < s->n; i++) x[i] = h[t].params[i].v;
                h[t].value = bf->f(x, (unsigned long long)seed * 1000003ull + (unsigned long long)t);
                h[t].state = KL_TRIAL_COMPLETE;
                if (h[t].value < best) best = h[t].value;
            }
            bests[seed] = best;
            for (int t = 0; t < trials; t++) free(h[t].params);
        }
        qsort(bests, (size_t)seeds, sizeof *bests, cmp);
        double med = seeds % 2 ? bests[seeds / 2] : 0.5 * (bests[seeds / 2 - 1] + bests[seeds / 2]);
        printf("{\"function\":\"%s\",\"sampler\":\"keel-%s\",\"trials\":%d,\"seeds\":%d,\"median_best\":%.6g,\"optimum\":%g}\n",
               bf->name, sampler, trials, seeds, med, bf->optimum);
        fflush(stdout);
        free(bests);
        free(h);
        kl_tune_space_free(s);
    }
    /* sampler time per trial with 1000 finished trials (hartmann6 space) */
    {
        const bench_fn *bf = &bench_fns[1];
        kl_doc *d;
        kl_err e = {0};
        kl_tune_space *s;
        kl_doc_load_str(bf->space_yaml, strlen(bf->space_yaml), bf->name, &d, &e);
        kl_tune_space_parse(kl_doc_root(d), &s, &e);
        kl_doc_free(d);
        int n = 1000;
        kl_trial *h = calloc((size_t)n + 1, sizeof *h);
        o.seed = 1;
        for (int t = 0; t <= n; t++) {
            h[t].number = t;
            h[t].params = calloc((size_t)s->n, sizeof(kl_tune_value));
        }
        int64_t t0 = 0;
        struct timespec c0, c1;
        for (int t = 0; t <= n; t++) {
            if (t == n) { t0 = kl_time_mono_ns(); clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0); }
            kl_tune_suggest(s, &o, h, (size_t)t, 1, t, h[t].params, &e);
            double x[8];
            for (int i = 0; i < s->n; i++) x[i] = h[t].params[i].v;
            h[t].value = bf->f(x, (unsigned long long)t);
            h[t].state = KL_TRIAL_COMPLETE;
        }
        double ms = (double)(kl_time_mono_ns() - t0) / 1e6;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
        printf("{\"overhead_ms_per_trial_at_1000\":%.3f,\"overhead_cpu_ms\":%.3f}\n", ms, cpu);
        for (int t = 0; t <= n; t++) free(h[t].params);
        free(h);
        kl_tune_space_free(s);
    }
    return 0;
}
