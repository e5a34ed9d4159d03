/* Tests of the FFT (src/tensor/fft.c): every length 1..80 and some larger
 * ones (powers of two, primes, products of odd primes) against a direct DFT
 * in long double, forward and inverse, a round trip, the length bounds, and
 * that a plan is reusable (same bits on a second run). */
#include "../harness.h"

#include "keel/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fs = 0x2545f4914f6cdd1dull;
static double frand(void) {
    fs ^= fs << 13;
    fs ^= fs >> 7;
    fs ^= fs << 17;
    return (double)(fs >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

/* max |fft - direct| over the largest |direct| (and 1) */
static double fft_error(int64_t n, int inverse) {
    kl_fft *f = NULL;
    kl_err e = {0};
    if (kl_fft_new(n, &f, &e)) return INFINITY;
    double *x = malloc(sizeof(double) * 2 * (size_t)n), *y = malloc(sizeof(double) * 2 * (size_t)n);
    double *s = malloc(sizeof(double) * (kl_fft_scratch_doubles(f) + 1));
    for (int64_t i = 0; i < 2 * n; i++) x[i] = y[i] = frand();
    kl_fft_run(f, inverse, y, s);
    double err = 0, big = 1;
    long double sg = inverse ? 1.0L : -1.0L, *ct = malloc(sizeof(long double) * 2 * (size_t)n);
    for (int64_t q = 0; q < n; q++) { /* e^{sg 2 pi i q/n} */
        long double a = sg * 2.0L * 3.14159265358979323846264338327950288L * (long double)q / (long double)n;
        ct[2 * q] = cosl(a), ct[2 * q + 1] = sinl(a);
    }
    for (int64_t k = 0; k < n; k++) {
        long double re = 0, im = 0;
        for (int64_t j = 0; j < n; j++) {
            long double c = ct[2 * ((j * k) % n)], sn = ct[2 * ((j * k) % n) + 1];
            re += x[2 * j] * c - x[2 * j + 1] * sn;
            im += x[2 * j] * sn + x[2 * j + 1] * c;
        }
        err = fmax(err, fmax(fabs((double)(re - y[2 * k])), fabs((double)(im - y[2 * k + 1]))));
        big = fmax(big, fmax(fabs((double)re), fabs((double)im)));
    }
    free(x), free(y), free(s), free(ct);
    kl_fft_free(f);
    return err / big;
}

KL_TEST(tensor_fft_matches_direct_dft) {
    for (int64_t n = 1; n <= 80; n++) {
        KT_CHECKF(fft_error(n, 0) < 1e-13, "n=%lld forward: %g", (long long)n, fft_error(n, 0));
        KT_CHECKF(fft_error(n, 1) < 1e-13, "n=%lld inverse: %g", (long long)n, fft_error(n, 1));
    }
    const int64_t big[] = {256, 400, 512, 997, 1000, 1024, 1031, 2187};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        KT_CHECKF(fft_error(big[i], 0) < 1e-12, "n=%lld: %g", (long long)big[i], fft_error(big[i], 0));
}

KL_TEST(tensor_fft_round_trip_and_reuse) {
    const int64_t ns[] = {1, 2, 7, 64, 100, 127};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        int64_t n = ns[t];
        kl_fft *f = NULL;
        kl_err e = {0};
        KT_OK(kl_fft_new(n, &f, &e), &e);
        KT_EQ_INT(kl_fft_len(f), n);
        double *x = malloc(sizeof(double) * 2 * (size_t)n), *y = malloc(sizeof(double) * 2 * (size_t)n);
        double *z = malloc(sizeof(double) * 2 * (size_t)n),
               *s = malloc(sizeof(double) * (kl_fft_scratch_doubles(f) + 1));
        for (int64_t i = 0; i < 2 * n; i++) x[i] = y[i] = z[i] = frand();
        kl_fft_run(f, 0, y, s);
        kl_fft_run(f, 0, z, s);
        KT_CHECK(!memcmp(y, z, sizeof(double) * 2 * (size_t)n));
        kl_fft_run(f, 1, y, s);
        for (int64_t i = 0; i < 2 * n; i++) KT_NEAR(y[i] / (double)n, x[i], 1e-13);
        free(x), free(y), free(z), free(s);
        kl_fft_free(f);
    }
}

KL_TEST(tensor_fft_length_bounds) {
    kl_fft *f = (kl_fft *)1;
    kl_err e = {0};
    KT_EQ_INT(kl_fft_new(0, &f, &e), KL_ERANGE);
    KT_CHECK(f == NULL);
    KT_EQ_INT(kl_fft_new(-5, &f, &e), KL_ERANGE);
    KT_EQ_INT(kl_fft_new(KL_FFT_MAX_N + 1, &f, &e), KL_ERANGE);
    KT_CONTAINS(kl_err_what(&e), "fft: length");
    kl_fft_free(NULL);
}
