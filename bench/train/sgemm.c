/* SGEMM rate of this machine (OpenBLAS, row-major, N x N x N, given threads):
 * prints the median GFLOP/s of a few runs. Usage: sgemm N THREADS REPS */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024, th = argc > 2 ? atoi(argv[2]) : 1, reps = argc > 3 ? atoi(argv[3]) : 5;
    openblas_set_num_threads(th);
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.2f; }
    double g[64];
    if (reps > 64) reps = 64;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    for (int r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        g[r] = 2.0 * n * n * (double)n / s / 1e9;
    }
    qsort(g, (size_t)reps, sizeof(double), cmp);
    printf("%.1f\n", g[reps / 2]);
    free(a); free(b); free(c);
    return 0;
}
