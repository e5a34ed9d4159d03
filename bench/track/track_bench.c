/* Tracking benchmarks through the C API:
 *   track_bench log DIR POINTS BATCH KEYS   log POINTS metric points in batches; prints seconds and points/s
 *   track_bench gen DIR RUNS METRICS STEPS  create RUNS runs with METRICS metrics x STEPS steps,
 *                                           3 params and 2 tags each (data for the `runs list` benchmark)
 *   track_bench list DIR FILTER LIMIT REPEAT open the store, find runs, read each found run (what
 *                                           `keel runs list` does, without process start); median ms */
#include <cjson/cJSON.h>
#include <keel/track.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sort_d(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
            double x = v[k];
            v[k] = v[k - 1];
            v[k - 1] = x;
        }
}

static int die(kl_err *e) {
    fprintf(stderr, "track_bench: %s\n", kl_err_what(e));
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: track_bench log DIR POINTS BATCH KEYS | gen DIR RUNS METRICS STEPS\n");
        return 2;
    }
    kl_err e = {0};
    kl_track *t = NULL;
    if (kl_track_open(argv[2], &t, &e)) return die(&e);
    if (!strcmp(argv[1], "list")) {
        kl_track_close(t);
        int rep = atoi(argv[5]);
        double ms[64], cms[64];
        size_t found = 0;
        if (rep < 1) rep = 1;
        if (rep > 64) rep = 64;
        for (int i = 0; i < rep; i++) {
            int64_t t0 = kl_time_mono_ns(), c0 = cpu_ns();
            int64_t *ids = NULL;
            if (kl_track_open(argv[2], &t, &e) || kl_track_runs_find(t, argv[3], NULL, atol(argv[4]), &ids, &found, &e)) return die(&e);
            for (size_t k = 0; k < found; k++) {
                void *j = NULL;
                if (kl_track_run_json(t, ids[k], &j, &e)) return die(&e);
                cJSON_Delete(j);
            }
            free(ids);
            kl_track_close(t);
            ms[i] = (double)(kl_time_mono_ns() - t0) / 1e6;
            cms[i] = (double)(cpu_ns() - c0) / 1e6;
        }
        sort_d(ms, rep);
        sort_d(cms, rep);
        printf("{\"found\":%zu,\"wall_median_ms\":%.2f,\"wall_min_ms\":%.2f,\"cpu_median_ms\":%.2f,\"cpu_min_ms\":%.2f}\n", found,
               ms[rep / 2], ms[0], cms[rep / 2], cms[0]);
        return 0;
    }
    long a = atol(argv[3]), b = atol(argv[4]), c = atol(argv[5]);
    char keys[1000][16];
    for (int k = 0; k < 1000; k++) snprintf(keys[k], sizeof keys[k], "m%d", k);
    if (!strcmp(argv[1], "log")) {
        long points = a, batch = b, nkeys = c < 1 ? 1 : c > 1000 ? 1000 : c;
        kl_track_run *r = NULL;
        if (kl_track_run_start(t, "bench", "log", 0, &r, &e)) return die(&e);
        kl_metric_point *pts = malloc((size_t)batch * sizeof *pts);
        int64_t t0 = kl_time_mono_ns(), c0 = cpu_ns();
        long done = 0, step = 0;
        while (done < points) {
            long n = points - done < batch ? points - done : batch;
            for (long i = 0; i < n; i++) {
                long k = (done + i) % nkeys;
                if (k == 0 && done + i > 0) step++;
                pts[i] = (kl_metric_point){keys[k], step, 0, sin((double)(done + i))};
            }
            if (kl_track_log_metrics(r, pts, (size_t)n, &e)) return die(&e);
            done += n;
        }
        double s = (double)(kl_time_mono_ns() - t0) / 1e9, cs = (double)(cpu_ns() - c0) / 1e9;
        int64_t cnt = 0;
        kl_track_metric_count(t, kl_track_run_id(r), NULL, &cnt, &e);
        if (kl_track_run_end(r, KL_RUN_FINISHED, &e)) return die(&e);
        printf("{\"points\":%ld,\"stored\":%lld,\"batch\":%ld,\"keys\":%ld,\"seconds\":%.3f,\"cpu_seconds\":%.3f,\"points_per_s\":%.0f}\n",
               points, (long long)cnt, batch, nkeys, s, cs, (double)points / s);
        free(pts);
    } else if (!strcmp(argv[1], "gen")) {
        long runs = a, nmet = b > 1000 ? 1000 : b, steps = c;
        kl_metric_point *pts = malloc((size_t)(nmet * steps) * sizeof *pts);
        static const char *teams[] = {"ads", "search", "feed", "infra"};
        static const char *lrs[] = {"0.001", "0.003", "0.01", "0.03", "0.1"};
        unsigned seed = 42;
        int64_t t0 = kl_time_mono_ns();
        for (long i = 0; i < runs; i++) {
            kl_track_run *r = NULL;
            char name[32];
            snprintf(name, sizeof name, "run%ld", i);
            if (kl_track_run_start(t, i % 2 ? "exp-a" : "exp-b", name, 0, &r, &e)) return die(&e);
            kl_kv p[] = {{"lr", lrs[i % 5]}, {"batch", i % 3 ? "64" : "128"}, {"optimizer", i % 4 ? "adam" : "sgd"}};
            if (kl_track_log_params(r, p, 3, &e)) return die(&e);
            if (kl_track_set_tag(r, "team", teams[i % 4], &e) || kl_track_set_tag(r, "owner", "bench", &e)) return die(&e);
            long n = 0;
            for (long s = 0; s < steps; s++)
                for (long k = 0; k < nmet; k++) {
                    seed = seed * 1103515245u + 12345u;
                    pts[n++] = (kl_metric_point){keys[k], s, 0, (double)((seed >> 8) & 0xffff) / 65536.0};
                }
            if (kl_track_log_metrics(r, pts, (size_t)n, &e)) return die(&e);
            if (kl_track_run_end(r, KL_RUN_FINISHED, &e)) return die(&e);
        }
        printf("{\"runs\":%ld,\"metrics\":%ld,\"steps\":%ld,\"seconds\":%.3f}\n", runs, nmet, steps,
               (double)(kl_time_mono_ns() - t0) / 1e9);
        free(pts);
    }
    kl_track_close(t);
    return 0;
}
