/* Helpers shared by the kernel benchmarks (kernel_bench.c, layer_bench.c):
 * clocks, median/min of timings, deterministic test data. */
#ifndef KEEL_BENCH_KERNELS_BENCH_UTIL_H
#define KEEL_BENCH_KERNELS_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "keel/core.h"

static inline double now_s(void) { return (double)kl_time_mono_ns() * 1e-9; }
/* CPU time of the calling thread: robust to other load on a shared machine
 * (meaningful for 1-thread runs, which execute on the caller's thread). */
static inline double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* sorts v */
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline double minv(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* n floats in [-0.5, 0.5), the same every run (seed 42) */
static inline float *rnd(size_t n) {
    float *p = kl_mem_alloc(n * sizeof(float), KL_TAG_OTHER);
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

#endif
