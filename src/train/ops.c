/* Training kernels: instantiates ops_gen.h for float (training) and double
 * (finite-difference gradient checks), plus the seeded RNG. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "train/train_int.h"

#define GEMM_ROWS 64

int64_t tr_conv_ws_elems(const tr_conv *p) {
    int64_t K = p->C * p->kh * p->kw, NP = p->N * p->OH * p->OW;
    return K * NP + p->M * NP;
}

#define R float
#define FN(x) x##_f32
#define GEMM cblas_sgemm
#include "train/ops_gen.h"
#undef R
#undef FN
#undef GEMM

#define R double
#define FN(x) x##_f64
#define GEMM cblas_dgemm
#include "train/ops_gen.h"
#undef R
#undef FN
#undef GEMM

/* ---------------------------------------------------------------- RNG */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
void tr_rng_seed(tr_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
uint64_t tr_rng_next(tr_rng *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}
double tr_rng_uniform(tr_rng *r) { return (double)(tr_rng_next(r) >> 11) * 0x1.0p-53; }
double tr_rng_normal(tr_rng *r) {
    double u1 = tr_rng_uniform(r), u2 = tr_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
uint64_t tr_rng_below(tr_rng *r, uint64_t n) {
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, x;
    do x = tr_rng_next(r); while (x >= lim);
    return x % n;
}
