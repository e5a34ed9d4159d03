/* Shared helpers of the tensor unit tests: deterministic random data, error
 * measures and a 1-thread and a 2-thread pool for determinism checks. */
#ifndef KEEL_TEST_TENSOR_TT_H
#define KEEL_TEST_TENSOR_TT_H

#include <stdlib.h>
#include <string.h>

#include "keel/tensor.h"

static inline float tt_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static inline float *tt_randn(int64_t n, uint64_t seed) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) p[i] = tt_rand(&s);
    return p;
}

static inline double tt_maxdiff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (a[i] != a[i] || b[i] != b[i]) d = (a[i] != a[i] && b[i] != b[i]) ? 0 : INFINITY;
        if (d > m) m = d;
    }
    return m;
}

/* Pools with 1 to 4 threads (created once, never freed: process lifetime). */
static inline kl_pool *tt_pool(int threads) {
    static kl_pool *pools[4];
    kl_pool **pp = &pools[(threads < 1 ? 1 : threads > 4 ? 4 : threads) - 1];
    if (!*pp) kl_pool_new(threads < 1 ? 1 : threads > 4 ? 4 : threads, pp, NULL);
    return *pp;
}

/* Whether the channel-blocked (NCHWc) conv path is on: AVX-512F present and
 * KEEL_NO_AVX512 unset (tests of that path return early when it is off). */
static inline int tt_nchwc_on(void) {
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = 1; p.C = p.M = 16; p.group = 1; p.k[0] = p.k[1] = 3;
    return kl_nchwc_conv_packed_floats(&p) > 0;
}

/* Scalar reference reorder NCHW (N, C, S) -> blocked (N, ceil(C/16), S, 16),
 * padding lanes 0 (one float of slack at the end); the caller frees it. */
static inline float *tt_to_blocked(const float *x, int64_t N, int64_t C, int64_t S) {
    int64_t CB = (C + 15) / 16;
    float *y = calloc((size_t)(N * CB * S * 16 + 1), sizeof(float));
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) y[((n * CB + c / 16) * S + s) * 16 + c % 16] = x[(n * C + c) * S + s];
    return y;
}

/* Checks a blocked result y (n floats, (N, MB, S, 16)) of M channels
 * against the blocked reference ref: returns the index of the first padding
 * lane that is not +0 (or -1), and in *maxd the largest |y - ref| over the
 * real lanes before it (NaN when either side has one there). */
static inline int64_t tt_cmp_blocked(const float *y, const float *ref, int64_t n, int64_t S, int64_t MB, int64_t M,
                                     double *maxd) {
    double md = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t lane = i % 16, blk = (i / 16 / S) % MB;
        if (blk * 16 + lane >= M) {
            if (y[i] != 0.0f || signbit(y[i])) { *maxd = md; return i; }
            continue;
        }
        double d = fabs((double)y[i] - (double)ref[i]);
        if (!(d <= md)) md = d; /* NaN propagates */
    }
    *maxd = md;
    return -1;
}

#endif
