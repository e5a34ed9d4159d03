/* Normalisation kernels: inference BatchNorm, LayerNorm, InstanceNorm.
 * Statistics are computed per row/plane in a fixed order (two passes). */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>

/* Sum of n floats: 4 x 8-lane accumulators, combined in a fixed order. */
float kl__sum_f32(const float *x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a0 = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float t[8];
    _mm256_storeu_ps(t, a0);
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

/* Sum of squared deviations from m. */
static float sqdev_f32(const float *x, int64_t n, float m) {
    __m256 vm = _mm256_set1_ps(m), a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm), d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
        a0 = _mm256_fmadd_ps(d0, d0, a0);
        a1 = _mm256_fmadd_ps(d1, d1, a1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        a0 = _mm256_fmadd_ps(d0, d0, a0);
    }
    a0 = _mm256_add_ps(a0, a1);
    float t[8];
    _mm256_storeu_ps(t, a0);
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < n; i++) { float d = x[i] - m; s += d * d; }
    return s;
}

/* ==================================================================
 * BatchNorm (inference)
 * ================================================================== */

typedef struct {
    int64_t C, S;
    const float *x, *scale, *bias, *mean, *var;
    float eps;
    float *y;
} bn_ctx;

static void bn_planes(void *vc, size_t p0, size_t p1, int chunk) {
    bn_ctx *c = vc;
    for (size_t pl = p0; pl < p1; pl++) {
        int64_t ch = (int64_t)pl % c->C;
        float a = c->scale[ch] / sqrtf(c->var[ch] + c->eps);
        float b = c->bias[ch] - c->mean[ch] * a;
        const float *x = c->x + (int64_t)pl * c->S;
        float *y = c->y + (int64_t)pl * c->S;
        for (int64_t i = 0; i < c->S; i++) y[i] = x[i] * a + b;
    }
}

void kl_batchnorm_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *scale, const float *bias,
                      const float *mean, const float *var, float eps, float *y, kl_pool *pool) {
    bn_ctx c = {C, S, x, scale, bias, mean, var, eps, y};
    if (N * C == 0) return;
    kl_pool_parallel_for(pool, (size_t)(N * C), (size_t)KL_MAX(1, 16384 / KL_MAX(1, S)), bn_planes, &c);
}

/* ==================================================================
 * LayerNorm / InstanceNorm
 * ================================================================== */

typedef struct {
    int64_t cols, C;
    const float *x, *scale, *bias;
    float eps;
    float *y, *mean, *inv;
    int instance;
} ln_ctx;

static void ln_rows(void *vc, size_t r0, size_t r1, int chunk) {
    ln_ctx *c = vc;
    int64_t n = c->cols;
    for (size_t r = r0; r < r1; r++) {
        const float *x = c->x + (int64_t)r * n;
        float *y = c->y + (int64_t)r * n;
        float m = n ? kl__sum_f32(x, n) / (float)n : 0.0f;
        float var = n ? sqdev_f32(x, n, m) / (float)n : 0.0f;
        float inv = 1.0f / sqrtf(var + c->eps);
        if (c->mean) c->mean[r] = m;
        if (c->inv) c->inv[r] = inv;
        if (c->instance) {
            int64_t ch = (int64_t)r % c->C;
            float a = c->scale[ch] * inv, b = c->bias[ch] - m * a;
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * a + b;
        } else if (c->bias) {
            /* AVX2, the same operations as the scalar tail (no FMA contraction) */
            __m256 vm = _mm256_set1_ps(m), vi = _mm256_set1_ps(inv);
            int64_t i = 0;
            for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi),
                                                                    _mm256_loadu_ps(c->scale + i)),
                                                      _mm256_loadu_ps(c->bias + i)));
            for (; i < n; i++) y[i] = (x[i] - m) * inv * c->scale[i] + c->bias[i];
        } else {
            for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * inv * c->scale[i];
        }
    }
}

void kl_layernorm_f32(int64_t rows, int64_t cols, const float *x, const float *scale, const float *bias, float eps,
                      float *y, float *mean, float *inv_std, kl_pool *pool) {
    ln_ctx c = {cols, 1, x, scale, bias, eps, y, mean, inv_std, 0};
    if (rows <= 0) return;
    kl_pool_parallel_for(pool, (size_t)rows, (size_t)KL_MAX(1, 8192 / KL_MAX(1, cols)), ln_rows, &c);
}

void kl_instancenorm_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *scale, const float *bias,
                         float eps, float *y, kl_pool *pool) {
    ln_ctx c = {S, C, x, scale, bias, eps, y, NULL, NULL, 1};
    if (N * C <= 0) return;
    kl_pool_parallel_for(pool, (size_t)(N * C), (size_t)KL_MAX(1, 8192 / KL_MAX(1, S)), ln_rows, &c);
}
