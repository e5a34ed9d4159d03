/* Seeded random numbers shared by the whole project (include/keel/core.h):
 * xoshiro256** (Blackman & Vigna) seeded through splitmix64, and the
 * splitmix64 stream itself. */
#include <math.h>

#include "keel/core.h"

uint64_t kl_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double kl_splitmix_uniform(uint64_t *state) { return (double)(kl_splitmix64(state) >> 11) * 0x1.0p-53; }

void kl_rng_seed(kl_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = kl_splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t kl_rng_next(kl_rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return out;
}

double kl_rng_uniform(kl_rng *r) { return (double)(kl_rng_next(r) >> 11) * 0x1.0p-53; }

double kl_rng_normal(kl_rng *r) {
    double u1 = kl_rng_uniform(r), u2 = kl_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t kl_rng_below(kl_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, v;
    do v = kl_rng_next(r); while (v >= lim);
    return v % n;
}

void kl_rng_shuffle_i64(kl_rng *r, int64_t *v, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)kl_rng_below(r, (uint64_t)i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}
