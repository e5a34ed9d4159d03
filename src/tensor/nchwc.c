/* NCHWc (channel-blocked) layout helpers: the availability check of the
 * blocked conv path, the reorders between NCHW and (N, C/16, H, W, 16), and
 * the pooling kernels on blocked tensors (2-D max/average pooling, global
 * average pooling). The blocked convolution itself is nchwc_conv.c.
 *
 * All kernels are memory-bound: one AVX-512 vector holds the 16 channels of
 * a block at one spatial position; the reorders transpose 16x16 tiles in
 * registers. Work items are fixed by the shape (never the thread count), and
 * every output element is computed by one item in a fixed order, so results
 * are bit-identical at any thread count. Without AVX-512F (or with
 * KEEL_NO_AVX512=1) plain C loops give the same results. */
#include "tensor/tensor_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kl_nchwc_ok(void) {
    return kl_settings_get()->nchwc && kl__pgemm_ok();
}

static int64_t cblocks(int64_t C) { return (C + KL_NCHWC - 1) / KL_NCHWC; }

/* ================================================================== *
 * Reorders
 * ================================================================== */

#define RTILE 256   /* spatial positions per work item (16 KB of a block) */

typedef struct {
    int64_t N, C, CB, S, tiles;
    const float *x;
    float *y;
} reorder_ctx;

__attribute__((target("avx512f"))) static inline void tr16(__m512 *r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4q + m]: column m (mod 4) of rows 4q..4q+3 in each 128-bit lane */
    for (int q = 0; q < 4; q++) {
        __m512d a0 = _mm512_castps_pd(t[4 * q]), a1 = _mm512_castps_pd(t[4 * q + 1]);
        __m512d a2 = _mm512_castps_pd(t[4 * q + 2]), a3 = _mm512_castps_pd(t[4 * q + 3]);
        u[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    for (int m = 0; m < 4; m++) {
        __m512 a = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), b = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
        __m512 c = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd), d = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
        r[m] = _mm512_shuffle_f32x4(a, b, 0x88);
        r[m + 8] = _mm512_shuffle_f32x4(a, b, 0xdd);
        r[m + 4] = _mm512_shuffle_f32x4(c, d, 0x88);
        r[m + 12] = _mm512_shuffle_f32x4(c, d, 0xdd);
    }
}

__attribute__((target("avx512f"))) static void rin_avx512(void *vc, size_t i0, size_t i1, int chunk) {
    const reorder_ctx *c = vc;
    for (size_t it = i0; it < i1; it++) {
        int64_t t = (int64_t)it % c->tiles, nb = (int64_t)it / c->tiles, n = nb / c->CB, cb = nb % c->CB;
        int64_t cv = KL_MIN(KL_NCHWC, c->C - cb * KL_NCHWC);
        int64_t s1 = KL_MIN(c->S, (t + 1) * RTILE);
        const float *x = c->x + (n * c->C + cb * KL_NCHWC) * c->S;
        float *y = c->y + (n * c->CB + cb) * c->S * KL_NCHWC;
        for (int64_t s0 = t * RTILE; s0 < s1; s0 += 16) {
            int64_t sv = KL_MIN(16, s1 - s0);
            __mmask16 m = (__mmask16)((1u << sv) - 1);
            __m512 r[16];
            if (sv == 16 && cv == 16)
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(x + i * c->S + s0);
            else
                for (int i = 0; i < 16; i++) r[i] = i < cv ? _mm512_maskz_loadu_ps(m, x + i * c->S + s0) : _mm512_setzero_ps();
            tr16(r);
            for (int64_t j = 0; j < sv; j++) _mm512_storeu_ps(y + (s0 + j) * KL_NCHWC, r[j]);
        }
    }
}

__attribute__((target("avx512f"))) static void rout_avx512(void *vc, size_t i0, size_t i1, int chunk) {
    const reorder_ctx *c = vc;
    for (size_t it = i0; it < i1; it++) {
        int64_t t = (int64_t)it % c->tiles, nb = (int64_t)it / c->tiles, n = nb / c->CB, cb = nb % c->CB;
        int64_t cv = KL_MIN(KL_NCHWC, c->C - cb * KL_NCHWC);
        int64_t s1 = KL_MIN(c->S, (t + 1) * RTILE);
        const float *x = c->x + (n * c->CB + cb) * c->S * KL_NCHWC;
        float *y = c->y + (n * c->C + cb * KL_NCHWC) * c->S;
        for (int64_t s0 = t * RTILE; s0 < s1; s0 += 16) {
            int64_t sv = KL_MIN(16, s1 - s0);
            __mmask16 m = (__mmask16)((1u << sv) - 1);
            __m512 r[16];
            for (int j = 0; j < 16; j++) r[j] = j < sv ? _mm512_loadu_ps(x + (s0 + j) * KL_NCHWC) : _mm512_setzero_ps();
            tr16(r);
            if (sv == 16)
                for (int64_t i = 0; i < cv; i++) _mm512_storeu_ps(y + i * c->S + s0, r[i]);
            else
                for (int64_t i = 0; i < cv; i++) _mm512_mask_storeu_ps(y + i * c->S + s0, m, r[i]);
        }
    }
}

static void rin_c(void *vc, size_t i0, size_t i1, int chunk) {
    const reorder_ctx *c = vc;
    for (size_t it = i0; it < i1; it++) {
        int64_t t = (int64_t)it % c->tiles, nb = (int64_t)it / c->tiles, n = nb / c->CB, cb = nb % c->CB;
        int64_t cv = KL_MIN(KL_NCHWC, c->C - cb * KL_NCHWC);
        int64_t s1 = KL_MIN(c->S, (t + 1) * RTILE);
        const float *x = c->x + (n * c->C + cb * KL_NCHWC) * c->S;
        float *y = c->y + (n * c->CB + cb) * c->S * KL_NCHWC;
        for (int64_t s = t * RTILE; s < s1; s++)
            for (int64_t i = 0; i < KL_NCHWC; i++) y[s * KL_NCHWC + i] = i < cv ? x[i * c->S + s] : 0.0f;
    }
}

static void rout_c(void *vc, size_t i0, size_t i1, int chunk) {
    const reorder_ctx *c = vc;
    for (size_t it = i0; it < i1; it++) {
        int64_t t = (int64_t)it % c->tiles, nb = (int64_t)it / c->tiles, n = nb / c->CB, cb = nb % c->CB;
        int64_t cv = KL_MIN(KL_NCHWC, c->C - cb * KL_NCHWC);
        int64_t s1 = KL_MIN(c->S, (t + 1) * RTILE);
        const float *x = c->x + (n * c->CB + cb) * c->S * KL_NCHWC;
        float *y = c->y + (n * c->C + cb * KL_NCHWC) * c->S;
        for (int64_t i = 0; i < cv; i++)
            for (int64_t s = t * RTILE; s < s1; s++) y[i * c->S + s] = x[s * KL_NCHWC + i];
    }
}

static void reorder(int out, int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool) {
    if (N <= 0 || C <= 0 || S <= 0) return;
    reorder_ctx c = {N, C, cblocks(C), S, (S + RTILE - 1) / RTILE, x, y};
    size_t items = (size_t)(N * c.CB * c.tiles);
    kl_range_fn fn = kl__pgemm_ok() ? (out ? rout_avx512 : rin_avx512) : (out ? rout_c : rin_c);
    kl_pool_parallel_for(pool, items, 4, fn, &c);
}

void kl_nchwc_reorder_in(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool) {
    reorder(0, N, C, S, x, y, pool);
}

void kl_nchwc_reorder_out(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool) {
    reorder(1, N, C, S, x, y, pool);
}

/* ================================================================== *
 * 2-D pooling on blocked tensors
 * ================================================================== */

typedef struct {
    const kl_pooling_params *p;
    int64_t CB;
    const float *x;
    float *y;
    int avg;
} bpool_ctx;

/* Divisor of an average window starting at b (valid taps, or taps inside the
 * padded extent lim = in + pad_end when count_include_pad), as kl_avgpool_f32. */
static void win_counts(int64_t b, int64_t k, int64_t d, int64_t in, int64_t lim, int64_t *valid, int64_t *padded) {
    *valid = *padded = 0;
    for (int64_t t = 0; t < k; t++) {
        int64_t q = b + t * d;
        if (q < lim) (*padded)++;
        if (q >= 0 && q < in) (*valid)++;
    }
}

/* Interior columns [ox4, hi) of one output row, four outputs at a time:
 * sum (avg, divided by dv) or max over the valid rows ky0..ky1 and every kx
 * tap. Returns the first column not done. */
__attribute__((target("avx512f"), always_inline)) static inline int64_t
interior4(int avg, const float *x, float *y, int64_t ox4, int64_t hi, int64_t ky0, int64_t ky1, int64_t by, int64_t W,
          int64_t KW, int64_t SX, int64_t DY, int64_t DX, int64_t PX, __m512 init, __m512 dv) {
#define KL_BP_COMB(a, v) (avg ? _mm512_add_ps((a), (v)) : kl__max_nan512((a), (v)))
    for (; ox4 + 4 <= hi; ox4 += 4) {
        __m512 a0 = init, a1 = init, a2 = init, a3 = init;
        for (int64_t ky = ky0; ky < ky1; ky++) {
            const float *q = x + ((by + ky * DY) * W + ox4 * SX - PX) * KL_NCHWC;
            for (int64_t kx = 0; kx < KW; kx++, q += DX * KL_NCHWC) {
                a0 = KL_BP_COMB(a0, _mm512_loadu_ps(q));
                a1 = KL_BP_COMB(a1, _mm512_loadu_ps(q + SX * KL_NCHWC));
                a2 = KL_BP_COMB(a2, _mm512_loadu_ps(q + 2 * SX * KL_NCHWC));
                a3 = KL_BP_COMB(a3, _mm512_loadu_ps(q + 3 * SX * KL_NCHWC));
            }
        }
#undef KL_BP_COMB
        if (avg) {
            a0 = _mm512_div_ps(a0, dv);
            a1 = _mm512_div_ps(a1, dv);
            a2 = _mm512_div_ps(a2, dv);
            a3 = _mm512_div_ps(a3, dv);
        }
        float *yo = y + ox4 * KL_NCHWC;
        _mm512_storeu_ps(yo, a0);
        _mm512_storeu_ps(yo + KL_NCHWC, a1);
        _mm512_storeu_ps(yo + 2 * KL_NCHWC, a2);
        _mm512_storeu_ps(yo + 3 * KL_NCHWC, a3);
    }
    return ox4;
}

__attribute__((target("avx512f"))) static void bpool_avx512(void *vc, size_t i0, size_t i1, int chunk) {
    const bpool_ctx *c = vc;
    const kl_pooling_params *p = c->p;
    int64_t H = p->in[0], W = p->in[1], OH = p->out[0], OW = p->out[1];
    int64_t KH = p->k[0], KW = p->k[1], SY = p->stride[0], SX = p->stride[1], DY = p->dilation[0], DX = p->dilation[1];
    for (size_t it = i0; it < i1; it++) {
        int64_t oy = (int64_t)it % OH, nb = (int64_t)it / OH;
        const float *x = c->x + nb * H * W * KL_NCHWC;
        float *y = c->y + (nb * OH + oy) * OW * KL_NCHWC;
        int64_t by = oy * SY - p->pad_begin[0], vy, py;
        win_counts(by, KH, DY, H, H + p->pad_end[0], &vy, &py);
        /* interior columns (every kx tap inside the row), four outputs at a
         * time with the valid rows only: the same taps in the same order as
         * the edge loop below, without the bounds tests */
        int64_t ky0 = 0, ky1 = KH, PX = p->pad_begin[1];
        while (ky0 < KH && by + ky0 * DY < 0) ky0++;
        while (ky1 > ky0 && by + (ky1 - 1) * DY >= H) ky1--;
        int64_t lo = (PX + SX - 1) / SX, last = W - 1 - (KW - 1) * DX + PX;
        int64_t hi = last < 0 ? 0 : KL_MIN(OW, last / SX + 1);
        __m512 init = c->avg ? _mm512_setzero_ps() : _mm512_set1_ps(-INFINITY);
        __m512 dv = _mm512_set1_ps((float)((p->count_include_pad ? py : vy) * KW));
        int64_t ox4 = lo;
        if (hi > lo && (c->avg ? (p->count_include_pad ? py : vy) > 0 : ky1 > ky0))
            ox4 = c->avg ? interior4(1, x, y, lo, hi, ky0, ky1, by, W, KW, SX, DY, DX, PX, init, dv)
                         : interior4(0, x, y, lo, hi, ky0, ky1, by, W, KW, SX, DY, DX, PX, init, dv);
        for (int64_t ox = 0; ox < OW; ox++) {
            if (ox == lo && ox4 > lo) { ox = ox4 - 1; continue; } /* done above */
            int64_t bx = ox * SX - p->pad_begin[1];
            __m512 acc = init;
            for (int64_t ky = 0; ky < KH; ky++) {
                int64_t iy = by + ky * DY;
                if (iy < 0 || iy >= H) continue;
                const float *xr = x + iy * W * KL_NCHWC;
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t ix = bx + kx * DX;
                    if (ix < 0 || ix >= W) continue;
                    __m512 v = _mm512_loadu_ps(xr + ix * KL_NCHWC);
                    acc = c->avg ? _mm512_add_ps(acc, v) : kl__max_nan512(acc, v);
                }
            }
            if (c->avg) {
                int64_t vx, px;
                win_counts(bx, KW, DX, W, W + p->pad_end[1], &vx, &px);
                int64_t div = p->count_include_pad ? py * px : vy * vx;
                acc = div > 0 ? _mm512_div_ps(acc, _mm512_set1_ps((float)div)) : _mm512_setzero_ps();
            }
            _mm512_storeu_ps(y + ox * KL_NCHWC, acc);
        }
    }
}

static void bpool_c(void *vc, size_t i0, size_t i1, int chunk) {
    const bpool_ctx *c = vc;
    const kl_pooling_params *p = c->p;
    int64_t H = p->in[0], W = p->in[1], OH = p->out[0], OW = p->out[1];
    int64_t KH = p->k[0], KW = p->k[1], SY = p->stride[0], SX = p->stride[1], DY = p->dilation[0], DX = p->dilation[1];
    for (size_t it = i0; it < i1; it++) {
        int64_t oy = (int64_t)it % OH, nb = (int64_t)it / OH;
        const float *x = c->x + nb * H * W * KL_NCHWC;
        float *y = c->y + (nb * OH + oy) * OW * KL_NCHWC;
        int64_t by = oy * SY - p->pad_begin[0], vy, py;
        win_counts(by, KH, DY, H, H + p->pad_end[0], &vy, &py);
        for (int64_t ox = 0; ox < OW; ox++) {
            int64_t bx = ox * SX - p->pad_begin[1];
            float acc[KL_NCHWC];
            for (int l = 0; l < KL_NCHWC; l++) acc[l] = c->avg ? 0.0f : -INFINITY;
            for (int64_t ky = 0; ky < KH; ky++) {
                int64_t iy = by + ky * DY;
                if (iy < 0 || iy >= H) continue;
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t ix = bx + kx * DX;
                    if (ix < 0 || ix >= W) continue;
                    const float *v = x + (iy * W + ix) * KL_NCHWC;
                    for (int l = 0; l < KL_NCHWC; l++)
                        acc[l] = c->avg ? acc[l] + v[l] : (acc[l] > v[l] || acc[l] != acc[l] ? acc[l] : v[l]);
                }
            }
            if (c->avg) {
                int64_t vx, px;
                win_counts(bx, KW, DX, W, W + p->pad_end[1], &vx, &px);
                int64_t div = p->count_include_pad ? py * px : vy * vx;
                for (int l = 0; l < KL_NCHWC; l++) acc[l] = div > 0 ? acc[l] / (float)div : 0.0f;
            }
            memcpy(y + ox * KL_NCHWC, acc, sizeof acc);
        }
    }
}

static void bpool_run(const kl_pooling_params *p, const float *x, float *y, int avg, kl_pool *pool) {
    KL_ASSERT(p->nsp == 2);
    bpool_ctx c = {p, cblocks(p->C), x, y, avg};
    size_t rows = (size_t)(p->N * c.CB * p->out[0]);
    if (!rows || p->out[1] <= 0) return;
    size_t per_row = (size_t)KL_MAX(1, p->out[1] * p->k[0] * p->k[1]);
    kl_pool_parallel_for(pool, rows, KL_MAX(1, 2048 / per_row), kl__pgemm_ok() ? bpool_avx512 : bpool_c, &c);
}

void kl_nchwc_maxpool_f32(const kl_pooling_params *p, const float *x, float *y, kl_pool *pool) {
    bpool_run(p, x, y, 0, pool);
}

void kl_nchwc_avgpool_f32(const kl_pooling_params *p, const float *x, float *y, kl_pool *pool) {
    bpool_run(p, x, y, 1, pool);
}

/* ================================================================== *
 * Global average pooling
 * ================================================================== */

typedef struct {
    int64_t S;
    const float *x;
    float *y;
} gap_ctx;

/* Four accumulators over s mod 4, combined as (a0 + a1) + (a2 + a3). */
__attribute__((target("avx512f"))) static void gap_avx512(void *vc, size_t i0, size_t i1, int chunk) {
    const gap_ctx *c = vc;
    for (size_t it = i0; it < i1; it++) {
        const float *x = c->x + (int64_t)it * c->S * KL_NCHWC;
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int64_t s = 0;
        for (; s + 4 <= c->S; s += 4)
            for (int j = 0; j < 4; j++) a[j] = _mm512_add_ps(a[j], _mm512_loadu_ps(x + (s + j) * KL_NCHWC));
        for (; s < c->S; s++) a[s & 3] = _mm512_add_ps(a[s & 3], _mm512_loadu_ps(x + s * KL_NCHWC));
        __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
        _mm512_storeu_ps(c->y + (int64_t)it * KL_NCHWC, _mm512_div_ps(sum, _mm512_set1_ps((float)c->S)));
    }
}

static void gap_c(void *vc, size_t i0, size_t i1, int chunk) {
    const gap_ctx *c = vc;
    for (size_t it = i0; it < i1; it++) {
        const float *x = c->x + (int64_t)it * c->S * KL_NCHWC;
        for (int l = 0; l < KL_NCHWC; l++) {
            float a[4] = {0, 0, 0, 0};
            for (int64_t s = 0; s < c->S; s++) a[s & 3] += x[s * KL_NCHWC + l];
            c->y[(int64_t)it * KL_NCHWC + l] = ((a[0] + a[1]) + (a[2] + a[3])) / (float)c->S;
        }
    }
}

void kl_nchwc_global_avgpool_f32(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool) {
    size_t items = (size_t)(N * cblocks(C));
    if (!items) return;
    if (S <= 0) {
        memset(y, 0, items * KL_NCHWC * sizeof(float));
        return;
    }
    gap_ctx c = {S, x, y};
    kl_pool_parallel_for(pool, items, (size_t)KL_MAX(1, 4096 / S), kl__pgemm_ok() ? gap_avx512 : gap_c, &c);
}
