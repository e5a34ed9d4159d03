/* The shared FFT of the audio ops (DFT, STFT): a complex DFT of any length in
 * double precision. Powers of two run an iterative radix-2 transform over a
 * twiddle table; any other length n runs Bluestein's algorithm: with the
 * chirp w[k] = e^{-i pi k^2/n}, X[k] = w[k] * sum_j (x[j] w[j]) conj(w[k-j]),
 * a convolution done by power-of-two FFTs of length m >= 2n - 1. The inverse
 * transform is conj(DFT(conj(x))). */
#include "keel/tensor.h"

#include <math.h>
#include <string.h>

struct kl_fft {
    int64_t n, m;  /* length; the power of two the transform runs on (n itself or the Bluestein length) */
    double *tw;    /* m/2 twiddles e^{-2 pi i k/m}, interleaved */
    double *chirp; /* Bluestein: n chirp values w[k], interleaved; NULL for powers of two */
    double *bf;    /* Bluestein: FFT_m of conj(w) wrapped around (b[k] = b[m-k] = conj(w[k])) */
};

static int is_pow2(int64_t n) { return n > 0 && !(n & (n - 1)); }

static int64_t next_pow2(int64_t n) {
    int64_t m = 1;
    while (m < n) m <<= 1;
    return m;
}

/* In-place radix-2 transform of length m (a power of two), forward. */
static void radix2(int64_t m, const double *tw, double *x) {
    for (int64_t i = 1, j = 0; i < m; i++) { /* bit reversal */
        int64_t bit = m >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j |= bit;
        if (i < j) {
            double r = x[2 * i], im = x[2 * i + 1];
            x[2 * i] = x[2 * j], x[2 * i + 1] = x[2 * j + 1];
            x[2 * j] = r, x[2 * j + 1] = im;
        }
    }
    for (int64_t len = 2; len <= m; len <<= 1) {
        int64_t half = len >> 1, step = m / len;
        for (int64_t s = 0; s < m; s += len)
            for (int64_t k = 0; k < half; k++) {
                double wr = tw[2 * k * step], wi = tw[2 * k * step + 1];
                double *a = x + 2 * (s + k), *b = x + 2 * (s + k + half);
                double br = b[0] * wr - b[1] * wi, bi = b[0] * wi + b[1] * wr;
                b[0] = a[0] - br, b[1] = a[1] - bi;
                a[0] += br, a[1] += bi;
            }
    }
}

static void conj_all(int64_t n, double *x) {
    for (int64_t i = 0; i < n; i++) x[2 * i + 1] = -x[2 * i + 1];
}

/* Bluestein tables: the chirp (angle from k^2 mod 2n, exact in integers) and
 * the transform of its conjugate, wrapped around. */
static void bluestein_tables(kl_fft *f) {
    int64_t n = f->n, m = f->m;
    for (int64_t k = 0; k < n; k++) {
        int64_t q = (int64_t)((unsigned __int128)k * (unsigned __int128)k % (unsigned __int128)(2 * n));
        double a = -M_PI * (double)q / (double)n;
        f->chirp[2 * k] = cos(a), f->chirp[2 * k + 1] = sin(a);
    }
    memset(f->bf, 0, sizeof(double) * 2 * (size_t)m);
    for (int64_t k = 0; k < n; k++) {
        f->bf[2 * k] = f->chirp[2 * k], f->bf[2 * k + 1] = -f->chirp[2 * k + 1];
        if (k) f->bf[2 * (m - k)] = f->chirp[2 * k], f->bf[2 * (m - k) + 1] = -f->chirp[2 * k + 1];
    }
    radix2(m, f->tw, f->bf);
}

int kl_fft_new(int64_t n, kl_fft **out, kl_err *e) {
    *out = NULL;
    if (n < 1 || n > KL_FFT_MAX_N)
        return kl_err_set(e, KL_ERANGE, "fft: length %lld (1..%lld)", (long long)n, (long long)KL_FFT_MAX_N);
    kl_fft *f = kl_mem_alloc_e(sizeof *f, KL_TAG_WORKSPACE, e);
    if (!f) return e ? e->code : KL_ENOMEM;
    memset(f, 0, sizeof *f);
    f->n = n;
    f->m = is_pow2(n) ? n : next_pow2(2 * n - 1);
    size_t half = (size_t)(f->m > 1 ? f->m / 2 : 1);
    if (!(f->tw = kl_mem_alloc_e(sizeof(double) * 2 * half, KL_TAG_WORKSPACE, e))) goto oom;
    for (size_t k = 0; k < half; k++) {
        double a = -2.0 * M_PI * (double)k / (double)f->m;
        f->tw[2 * k] = cos(a), f->tw[2 * k + 1] = sin(a);
    }
    if (!is_pow2(n)) {
        if (!(f->chirp = kl_mem_alloc_e(sizeof(double) * 2 * (size_t)n, KL_TAG_WORKSPACE, e))) goto oom;
        if (!(f->bf = kl_mem_alloc_e(sizeof(double) * 2 * (size_t)f->m, KL_TAG_WORKSPACE, e))) goto oom;
        bluestein_tables(f);
    }
    *out = f;
    return KL_OK;
oom:
    kl_fft_free(f);
    return e ? e->code : KL_ENOMEM;
}

void kl_fft_free(kl_fft *f) {
    if (!f) return;
    kl_mem_free(f->tw);
    kl_mem_free(f->chirp);
    kl_mem_free(f->bf);
    kl_mem_free(f);
}

int64_t kl_fft_len(const kl_fft *f) { return f->n; }

size_t kl_fft_scratch_doubles(const kl_fft *f) { return f->chirp ? 2 * (size_t)f->m : 0; }

/* Forward Bluestein transform of x (n values) using a (m values of scratch). */
static void bluestein(const kl_fft *f, double *x, double *a) {
    int64_t n = f->n, m = f->m;
    const double *w = f->chirp, *b = f->bf;
    for (int64_t k = 0; k < n; k++) {
        a[2 * k] = x[2 * k] * w[2 * k] - x[2 * k + 1] * w[2 * k + 1];
        a[2 * k + 1] = x[2 * k] * w[2 * k + 1] + x[2 * k + 1] * w[2 * k];
    }
    memset(a + 2 * n, 0, sizeof(double) * 2 * (size_t)(m - n));
    radix2(m, f->tw, a);
    for (int64_t k = 0; k < m; k++) { /* times B, conjugated for the inverse transform below */
        double r = a[2 * k] * b[2 * k] - a[2 * k + 1] * b[2 * k + 1];
        double i = a[2 * k] * b[2 * k + 1] + a[2 * k + 1] * b[2 * k];
        a[2 * k] = r, a[2 * k + 1] = -i;
    }
    radix2(m, f->tw, a);
    double s = 1.0 / (double)m;
    for (int64_t k = 0; k < n; k++) { /* conj(a)/m is the convolution; times w[k] */
        double r = a[2 * k] * s, i = -a[2 * k + 1] * s;
        x[2 * k] = r * w[2 * k] - i * w[2 * k + 1];
        x[2 * k + 1] = r * w[2 * k + 1] + i * w[2 * k];
    }
}

void kl_fft_run(const kl_fft *f, int inverse, double *x, double *scratch) {
    if (inverse) conj_all(f->n, x);
    if (f->chirp) bluestein(f, x, scratch);
    else radix2(f->n, f->tw, x);
    if (inverse) conj_all(f->n, x);
}
