/* Depthwise 2-D convolution (group == C == M): a direct AVX-512 3x3 kernel
 * (stride 1 or 2) and an AVX2 fallback for any kernel/stride/dilation, with
 * bias and the fused activation. Called by the conv driver (conv.c) through
 * kl__dwconv2d_f32. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <stdlib.h>
#include <string.h>

/* Normalised 3-D view of the spatial parameters (leading unit dim). */
typedef struct {
    int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
} sp3;

static void to_sp3(const kl_conv_params *p, sp3 *o) {
    o->in[0] = o->k[0] = o->s[0] = o->d[0] = o->out[0] = 1;
    o->pb[0] = 0;
    for (int i = 0; i < 2; i++) {
        o->in[i + 1] = p->in[i];
        o->k[i + 1] = p->k[i];
        o->s[i + 1] = p->stride[i];
        o->d[i + 1] = p->dilation[i];
        o->pb[i + 1] = p->pad_begin[i];
        o->out[i + 1] = p->out[i];
    }
}

/* ==================================================================
 * Depthwise 2-D direct
 * ================================================================== */

typedef struct flatmask flatmask;
typedef struct {
    const kl_conv_params *p;
    const sp3 *s;
    const float *x, *w, *bias;
    float *y;
    const flatmask *fm;  /* flat 3x3 kernel: per-vector column masks (NULL: other paths) */
    int path;            /* DW_* */
} dw_ctx;

enum { DW_GENERIC, DW_ROWS, DW_FLAT, DW_PAIRS };

/* Generic direct depthwise (any kernel/stride/dilation); used when the padded
 * scratch cannot be allocated. */
static void dw_plane_generic(const dw_ctx *c, size_t pl) {
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], OH = s->out[1], OW = s->out[2];
    int64_t KH = s->k[1], KW = s->k[2], SY = s->s[1], SX = s->s[2], DY = s->d[1], DX = s->d[2];
    int64_t PY = s->pb[1], PX = s->pb[2];
    int64_t ch = (int64_t)pl % c->p->C;
    const float *x = c->x + (int64_t)pl * H * W;
    const float *w = c->w + ch * KH * KW;
    float *y = c->y + (int64_t)pl * OH * OW;
    float b = c->bias ? c->bias[ch] : 0.0f;
    for (int64_t oy = 0; oy < OH; oy++) {
        float *acc = y + oy * OW;
        for (int64_t ox = 0; ox < OW; ox++) acc[ox] = b;
        for (int64_t ky = 0; ky < KH; ky++) {
            int64_t iy = oy * SY - PY + ky * DY;
            if (iy < 0 || iy >= H) continue;
            const float *xr = x + iy * W;
            for (int64_t kx = 0; kx < KW; kx++) {
                float wv = w[ky * KW + kx];
                int64_t off = kx * DX - PX;
                int64_t lo = off >= 0 ? 0 : (-off + SX - 1) / SX;
                int64_t hi = W - off <= 0 ? 0 : (W - off + SX - 1) / SX;
                if (hi > OW) hi = OW;
                for (int64_t ox = lo; ox < hi; ox++) acc[ox] += wv * xr[ox * SX + off];
            }
        }
        kl__act_apply_range(c->p->act, acc, OW);
    }
}

/* Fast path: the plane is copied into a zero-padded scratch, de-interleaved
 * into SX phase planes (column ox*SX + kx*DX lives in phase (kx*DX) % SX at
 * column ox + (kx*DX) / SX), so every tap is a contiguous 8-wide load. All
 * outputs go through the same FMA sequence (bias, then taps in order). */
static void dw_plane_fast(const dw_ctx *c, size_t pl, float *scratch, int64_t pw) {
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], OH = s->out[1], OW = s->out[2];
    int64_t KH = s->k[1], KW = s->k[2], SY = s->s[1], SX = s->s[2], DY = s->d[1], DX = s->d[2];
    int64_t PY = s->pb[1], PX = s->pb[2];
    int64_t HP = (OH - 1) * SY + (KH - 1) * DY + 1;  /* padded rows needed */
    int64_t ch = (int64_t)pl % c->p->C;
    const float *x = c->x + (int64_t)pl * H * W;
    const float *w = c->w + ch * KH * KW;
    float *y = c->y + (int64_t)pl * OH * OW;
    /* phase planes: SX planes of HP rows x pw columns */
    for (int64_t r = 0; r < HP; r++) {
        int64_t iy = r - PY;
        if (SX == 2 && iy >= 0 && iy < H) {
            /* de-interleave even/odd columns 8 at a time where both phases are interior */
            float *d0 = scratch + r * pw, *d1 = scratch + (HP + r) * pw;
            const float *xr = x + iy * W;
            int64_t j = 0;
            for (; j < pw; j++) {
                int64_t i0 = 2 * j - PX;
                if (i0 >= 0 && i0 + 16 <= W) break;
                d0[j] = (i0 >= 0 && i0 < W) ? xr[i0] : 0.0f;
                d1[j] = (i0 + 1 >= 0 && i0 + 1 < W) ? xr[i0 + 1] : 0.0f;
            }
            for (; j + 8 <= pw && 2 * j - PX + 16 <= W; j += 8) {
                const float *p0 = xr + 2 * j - PX;
                __m256 v0 = _mm256_loadu_ps(p0), v1 = _mm256_loadu_ps(p0 + 8);
                __m256 ev = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0));
                __m256 od = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
                _mm256_storeu_ps(d0 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
                _mm256_storeu_ps(d1 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
            }
            for (; j < pw; j++) {
                int64_t i0 = 2 * j - PX;
                d0[j] = (i0 >= 0 && i0 < W) ? xr[i0] : 0.0f;
                d1[j] = (i0 + 1 >= 0 && i0 + 1 < W) ? xr[i0 + 1] : 0.0f;
            }
            continue;
        }
        for (int64_t ph = 0; ph < SX; ph++) {
            float *d = scratch + (ph * HP + r) * pw;
            if (iy < 0 || iy >= H) { memset(d, 0, (size_t)pw * sizeof(float)); continue; }
            const float *xr = x + iy * W;
            /* columns j with 0 <= j*SX + ph - PX < W */
            int64_t off = ph - PX;
            int64_t j0 = off >= 0 ? 0 : (-off + SX - 1) / SX;
            int64_t j1 = W - off <= 0 ? 0 : (W - off + SX - 1) / SX;
            if (j1 > pw) j1 = pw;
            if (j0 > j1) j0 = j1;
            for (int64_t j = 0; j < j0; j++) d[j] = 0.0f;
            if (SX == 1) memcpy(d + j0, xr + j0 + off, (size_t)(j1 - j0) * sizeof(float));
            else
                for (int64_t j = j0; j < j1; j++) d[j] = xr[j * SX + off];
            for (int64_t j = j1; j < pw; j++) d[j] = 0.0f;
        }
    }
    /* tap k = (ky, kx): offset into the phase planes relative to (oy*SY row, ox col) */
    __m256 wv[64];
    int64_t toff[64];
    int nt = 0;
    for (int64_t ky = 0; ky < KH; ky++)
        for (int64_t kx = 0; kx < KW; kx++, nt++) {
            int64_t q = kx * DX;
            wv[nt] = _mm256_set1_ps(w[ky * KW + kx]);
            toff[nt] = ((q % SX) * HP + ky * DY) * pw + q / SX;
        }
    __m256 vb = _mm256_set1_ps(c->bias ? c->bias[ch] : 0.0f);
    kl_act act = c->p->act;
    __m256 lo = _mm256_set1_ps(act.a), hi = _mm256_set1_ps(act.b), zero = _mm256_setzero_ps();
    for (int64_t oy = 0; oy < OH; oy++) {
        float *yr = y + oy * OW;
        const float *base = scratch + oy * SY * pw;
        int64_t ox = 0;
        for (; ox + 16 <= OW; ox += 16) {
            __m256 a0 = vb, a1 = vb;
            for (int t = 0; t < nt; t++) {
                const float *src = base + ox + toff[t];
                a0 = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(src), a0);
                a1 = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(src + 8), a1);
            }
            if (act.kind == KL_ACT_RELU) { a0 = _mm256_max_ps(zero, a0); a1 = _mm256_max_ps(zero, a1); }
            else if (act.kind == KL_ACT_CLIP) {
                a0 = _mm256_min_ps(hi, _mm256_max_ps(lo, a0));
                a1 = _mm256_min_ps(hi, _mm256_max_ps(lo, a1));
            }
            _mm256_storeu_ps(yr + ox, a0);
            _mm256_storeu_ps(yr + ox + 8, a1);
        }
        for (; ox < OW; ox += 8) {
            __m256 acc = vb;
            for (int t = 0; t < nt; t++) acc = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(base + ox + toff[t]), acc);
            if (act.kind == KL_ACT_RELU) acc = _mm256_max_ps(zero, acc);
            else if (act.kind == KL_ACT_CLIP) acc = _mm256_min_ps(hi, _mm256_max_ps(lo, acc));
            if (ox + 8 <= OW) _mm256_storeu_ps(yr + ox, acc);
            else _mm256_maskstore_ps(yr + ox, kl__tailmask(OW - ox), acc);
        }
        if (act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP)
            kl__act_apply_range(act, yr, OW);
    }
}

/* Phase-plane width (columns) and total scratch floats of the fast path. */
static void dw_scratch_dims(const sp3 *s, int64_t *pw, int64_t *floats) {
    int64_t OW = s->out[2], KW = s->k[2], SX = s->s[2], DX = s->d[2];
    int64_t OH = s->out[1], KH = s->k[1], SY = s->s[1], DY = s->d[1];
    int64_t HP = (OH - 1) * SY + (KH - 1) * DY + 1;
    /* 8-wide loads may run up to 7 columns past the last output */
    *pw = ((OW + 7) / 8) * 8 + ((KW - 1) * DX) / SX + 1;
    *floats = SX * HP * *pw + 16;
}

/* AVX-512 direct depthwise 3x3, stride 1 or 2, dilation 1, any padding up
 * to 2: no scratch copy. Each output row is built 16 columns at a time from
 * the (up to 3) valid input rows; lanes whose input column falls in the
 * padding are masked to zero (interior vectors use plain loads; stride 2
 * de-interleaves two loads with one permute). Taps in the same order for
 * every output (bias, then row-major taps), so results do not depend on the
 * vector position or the thread count. */
#define DW3_MAX_VEC 64
static int dw3_ok(const sp3 *s) {
    return s->out[2] <= 16 * DW3_MAX_VEC && s->in[0] == 1 && s->k[1] == 3 && s->k[2] == 3 && s->d[1] == 1 && s->d[2] == 1 &&
           (s->s[2] == 1 || s->s[2] == 2) && s->s[1] == s->s[2] && s->pb[1] <= 2 && s->pb[2] <= 2;
}

/* Lane t of the tap vector reads row xr at column ix + t*S (S = 1 or 2);
 * lanes outside [0, W) or t >= nv are zero. */
static uint32_t dw3_mask(int64_t ix, int64_t S, int64_t W, int64_t nv) {
    uint32_t m = 0;
    for (int64_t t = 0; t < nv; t++)
        if (ix + S * t >= 0 && ix + S * t < W) m |= 1u << (S * t);
    return m;
}

__attribute__((target("avx512f"), always_inline)) static inline __m512 dw3_tap_edge(const float *xr, int64_t ix, int64_t S,
                                                                                    uint32_t m) {
    const char *b0 = (const char *)((uintptr_t)xr + (uintptr_t)(ix * 4));
    if (S == 1) return _mm512_maskz_loadu_ps((__mmask16)m, b0);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps((__mmask16)m, b0), ev,
                                  _mm512_maskz_loadu_ps((__mmask16)(m >> 16), b0 + 64));
}

__attribute__((target("avx512f"))) static void dw3_plane(const dw_ctx *c, size_t pl) {
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], OH = s->out[1], OW = s->out[2], S = s->s[2];
    int64_t PY = s->pb[1], PX = s->pb[2];
    int64_t ch = (int64_t)pl % c->p->C;
    const float *x = c->x + (int64_t)pl * H * W;
    const float *w = c->w + ch * 9;
    float *y = c->y + (int64_t)pl * OH * OW;
    const __m512 w0 = _mm512_set1_ps(w[0]), w1 = _mm512_set1_ps(w[1]), w2 = _mm512_set1_ps(w[2]);
    const __m512 w3 = _mm512_set1_ps(w[3]), w4 = _mm512_set1_ps(w[4]), w5 = _mm512_set1_ps(w[5]);
    const __m512 w6 = _mm512_set1_ps(w[6]), w7 = _mm512_set1_ps(w[7]), w8 = _mm512_set1_ps(w[8]);
    __m512 vb = _mm512_set1_ps(c->bias ? c->bias[ch] : 0.0f);
    kl_act act = c->p->act;
    __m512 lo = _mm512_set1_ps(act.kind == KL_ACT_RELU ? 0.0f : act.a), hi = _mm512_set1_ps(act.b);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    /* interior vectors: ox in [ox_lo, ox_hi) with all 16 lanes and taps inside the row */
    int64_t ox_lo = (PX + S - 1) / S;
    int64_t ox_hi_in = W - 2 + PX - S * 15 - 1;  /* last lane's rightmost tap < W */
    /* lane masks of the edge vectors, per vector and kx (the same for every row) */
    uint32_t em[DW3_MAX_VEC][3];
    for (int64_t v = 0; v * 16 < OW; v++)
        for (int kx = 0; kx < 3; kx++) em[v][kx] = dw3_mask(v * 16 * S - PX + kx, S, W, KL_MIN(16, OW - v * 16));
    for (int64_t oy = 0; oy < OH; oy++) {
        float *yr = y + oy * OW;
        int64_t iy0 = oy * S - PY;
        const float *r0 = iy0 >= 0 && iy0 < H ? x + iy0 * W : NULL;
        const float *r1 = iy0 + 1 >= 0 && iy0 + 1 < H ? x + (iy0 + 1) * W : NULL;
        const float *r2 = iy0 + 2 >= 0 && iy0 + 2 < H ? x + (iy0 + 2) * W : NULL;
        for (int64_t ox = 0; ox < OW; ox += 16) {
            int64_t nv = KL_MIN(16, OW - ox), ix = ox * S - PX;
            __mmask16 om = (__mmask16)(nv >= 16 ? 0xFFFF : (1u << nv) - 1);
            __m512 acc = vb;
            if (nv == 16 && ox >= ox_lo && ox * S <= ox_hi_in) {
                if (S == 1) {
#define KL_DW_ROW(r, wa, wb, wc)                                                                                       \
    if (r) {                                                                                                           \
        acc = _mm512_fmadd_ps(wa, _mm512_loadu_ps(r + ix), acc);                                                       \
        acc = _mm512_fmadd_ps(wb, _mm512_loadu_ps(r + ix + 1), acc);                                                   \
        acc = _mm512_fmadd_ps(wc, _mm512_loadu_ps(r + ix + 2), acc);                                                   \
    }
                    KL_DW_ROW(r0, w0, w1, w2) KL_DW_ROW(r1, w3, w4, w5) KL_DW_ROW(r2, w6, w7, w8)
#undef KL_DW_ROW
                } else {
#define KL_DW_ROW(r, wa, wb, wc)                                                                                       \
    if (r) {                                                                                                           \
        __m512 a = _mm512_loadu_ps(r + ix), b = _mm512_loadu_ps(r + ix + 16);                                         \
        __m512 a2 = _mm512_loadu_ps(r + ix + 2), b2 = _mm512_loadu_ps(r + ix + 18);                                    \
        acc = _mm512_fmadd_ps(wa, _mm512_permutex2var_ps(a, ev, b), acc);                                              \
        acc = _mm512_fmadd_ps(wb, _mm512_permutex2var_ps(a, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), b), acc);       \
        acc = _mm512_fmadd_ps(wc, _mm512_permutex2var_ps(a2, ev, b2), acc);                                            \
    }
                    KL_DW_ROW(r0, w0, w1, w2) KL_DW_ROW(r1, w3, w4, w5) KL_DW_ROW(r2, w6, w7, w8)
#undef KL_DW_ROW
                }
            } else {
#define KL_DW_ROW(r, wa, wb, wc)                                                                                       \
    if (r) {                                                                                                           \
        acc = _mm512_fmadd_ps(wa, dw3_tap_edge(r, ix, S, em[ox / 16][0]), acc);                                        \
        acc = _mm512_fmadd_ps(wb, dw3_tap_edge(r, ix + 1, S, em[ox / 16][1]), acc);                                    \
        acc = _mm512_fmadd_ps(wc, dw3_tap_edge(r, ix + 2, S, em[ox / 16][2]), acc);                                    \
    }
                KL_DW_ROW(r0, w0, w1, w2) KL_DW_ROW(r1, w3, w4, w5) KL_DW_ROW(r2, w6, w7, w8)
#undef KL_DW_ROW
            }
            if (act.kind == KL_ACT_RELU) acc = _mm512_max_ps(lo, acc);
            else if (act.kind == KL_ACT_CLIP) acc = _mm512_min_ps(hi, _mm512_max_ps(lo, acc));
            if (nv == 16) _mm512_storeu_ps(yr + ox, acc);
            else _mm512_mask_storeu_ps(yr + ox, om, acc);
        }
        if (act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP)
            kl__act_apply_range(act, yr, OW);
    }
}

/* ==================================================================
 * AVX-512 3x3 'same' stride 1 (pad 1 on every side): flat vectors
 * ================================================================== */

/* The plane (H x W, output the same size) is one flat array; a vector holds
 * 16 consecutive outputs whatever rows they fall in, so narrow planes (7x7,
 * 14x14) waste no lanes (used for W < 64: faster than the row kernel at 56).
 * Tap (ky, kx) of output j reads input j + (ky-1)*W + (kx-1); lanes whose
 * column would wrap into the neighbouring row or whose row lies outside the
 * plane are masked (per-vector masks, computed once per call). */
struct flatmask {
    uint16_t m[9];  /* lanes read by tap ky*3 + kx */
};

static int flat_ok(const sp3 *s) {
    return s->in[0] == 1 && s->k[1] == 3 && s->k[2] == 3 && s->s[1] == 1 && s->s[2] == 1 && s->d[1] == 1 &&
           s->d[2] == 1 && s->pb[1] == 1 && s->pb[2] == 1 && s->out[1] == s->in[1] && s->out[2] == s->in[2];
}

/* lanes t with 0 <= base + t < n */
static inline uint32_t range_bits(int64_t base, int64_t n) {
    int64_t lo = base < 0 ? -base : 0, hi = n - base < 16 ? n - base : 16;
    if (hi <= lo) return 0;
    return (uint32_t)(((1ull << hi) - 1) & ~((1ull << lo) - 1));
}

static void flat_masks(int64_t H, int64_t W, flatmask *m) {
    int64_t HW = H * W, nvec = (HW + 15) / 16, c = 0; /* column of the vector's first lane */
    for (int64_t v = 0; v < nvec; v++) {
        uint32_t z0 = 0, z2 = 0, lanes = range_bits(v * 16, HW);
        for (int64_t t = (W - c) % W; t < 16; t += W) z0 |= 1u << t;
        for (int64_t t = (W - 1 - c) % W; t < 16; t += W) z2 |= 1u << t;
        for (int ky = 0; ky < 3; ky++) {
            uint32_t r = range_bits(v * 16 + (ky - 1) * W, HW) & lanes;
            m[v].m[3 * ky] = (uint16_t)(r & ~z0);
            m[v].m[3 * ky + 1] = (uint16_t)r;
            m[v].m[3 * ky + 2] = (uint16_t)(r & ~z2);
        }
        c = (c + 16) % W;
    }
}

/* One vector: bias, then the taps in row-major order. Masked-off lanes are
 * never read (their addresses may lie outside the plane). */
#define KL_DW_FLAT_VEC(acc, j, mk)                                                                                      \
    do {                                                                                                               \
        const char *b_ = (const char *)(x + (j));                                                                      \
        acc = vb;                                                                                                      \
        for (int k_ = 0; k_ < 9; k_++)                                                                                 \
            acc = _mm512_fmadd_ps(wv[k_], _mm512_maskz_loadu_ps((mk)[k_], b_ + toff[k_]), acc);                          \
    } while (0)

__attribute__((target("avx512f"))) static void dw3_flat_plane(const dw_ctx *c, size_t pl) {
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], HW = H * W, nvec = (HW + 15) / 16;
    int64_t ch = (int64_t)pl % c->p->C;
    const float *x = c->x + (int64_t)pl * HW;
    const float *w = c->w + ch * 9;
    float *y = c->y + (int64_t)pl * HW;
    __m512 wv[9];
    int64_t toff[9];
    for (int k = 0; k < 9; k++) {
        wv[k] = _mm512_set1_ps(w[k]);
        toff[k] = ((k / 3 - 1) * W + (k % 3 - 1)) * (int64_t)sizeof(float);
    }
    const __m512 vb = _mm512_set1_ps(c->bias ? c->bias[ch] : 0.0f);
    kl_act act = c->p->act;
    const __m512 lo = _mm512_set1_ps(act.kind == KL_ACT_RELU ? 0.0f : act.a), hi = _mm512_set1_ps(act.b);
    const flatmask *fm = c->fm;
    int64_t v = 0;
    for (; v + 2 <= nvec; v += 2) {
        __m512 a0, a1;
        KL_DW_FLAT_VEC(a0, v * 16, fm[v].m);
        KL_DW_FLAT_VEC(a1, v * 16 + 16, fm[v + 1].m);
        if (act.kind == KL_ACT_RELU) { a0 = _mm512_max_ps(lo, a0); a1 = _mm512_max_ps(lo, a1); }
        else if (act.kind == KL_ACT_CLIP) {
            a0 = _mm512_min_ps(hi, _mm512_max_ps(lo, a0));
            a1 = _mm512_min_ps(hi, _mm512_max_ps(lo, a1));
        }
        _mm512_storeu_ps(y + v * 16, a0);
        _mm512_mask_storeu_ps(y + v * 16 + 16, (__mmask16)range_bits(v * 16 + 16, HW), a1);
    }
    if (v < nvec) {
        __m512 a0;
        KL_DW_FLAT_VEC(a0, v * 16, fm[v].m);
        if (act.kind == KL_ACT_RELU) a0 = _mm512_max_ps(lo, a0);
        else if (act.kind == KL_ACT_CLIP) a0 = _mm512_min_ps(hi, _mm512_max_ps(lo, a0));
        _mm512_mask_storeu_ps(y + v * 16, (__mmask16)range_bits(v * 16, HW), a0);
    }
    if (act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP) kl__act_apply_range(act, y, HW);
}

/* ==================================================================
 * AVX-512 3x3 stride 2, output rows of at most 8: two rows per vector
 * ================================================================== */

/* Lanes 0..7 hold output row oy, lanes 8..15 row oy + 1 (up to OW used in
 * each half). Tap (ky, kx) loads 16 input columns from input rows 2*oy + ky -
 * 1 and the row two below, keeps the even ones (one permute for both rows),
 * and the two output rows, contiguous in y, are stored with one masked store
 * after moving lanes 8.. down to OW... Any padding up to 1 at the start;
 * rows/columns outside the input are masked. */
static int pairs_ok(const sp3 *s) {
    return s->in[0] == 1 && s->k[1] == 3 && s->k[2] == 3 && s->s[1] == 2 && s->s[2] == 2 && s->d[1] == 1 &&
           s->d[2] == 1 && s->pb[1] <= 1 && s->pb[2] <= 1 && s->out[2] <= 8;
}

__attribute__((target("avx512f"))) static void dw3_pairs_plane(const dw_ctx *c, size_t pl) {
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], OH = s->out[1], OW = s->out[2], PY = s->pb[1], PX = s->pb[2];
    int64_t ch = (int64_t)pl % c->p->C;
    const float *x = c->x + (int64_t)pl * H * W;
    const float *w = c->w + ch * 9;
    float *y = c->y + (int64_t)pl * OH * OW;
    __m512 wv[9];
    for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(w[k]);
    const __m512 vb = _mm512_set1_ps(c->bias ? c->bias[ch] : 0.0f);
    kl_act act = c->p->act;
    const __m512 lo = _mm512_set1_ps(act.kind == KL_ACT_RELU ? 0.0f : act.a), hi = _mm512_set1_ps(act.b);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    /* compaction: lanes 0..OW-1 stay, lanes 8..8+OW-1 move to OW.. */
    int32_t pk[16];
    for (int t = 0; t < 16; t++) pk[t] = t < OW ? t : t < 2 * OW ? 8 + t - OW : 0;
    const __m512i pidx = _mm512_loadu_si512(pk);
    /* column masks per kx over the 16 loaded columns ix .. ix + 15 (ix = kx - PX):
     * bit 2t for output column t < OW with 0 <= ix + 2t < W */
    uint32_t cm[3];
    for (int kx = 0; kx < 3; kx++) {
        cm[kx] = 0;
        for (int64_t t = 0; t < OW; t++) {
            int64_t col = kx - PX + 2 * t;
            if (col >= 0 && col < W) cm[kx] |= 1u << (2 * t);
        }
    }
    for (int64_t oy = 0; oy < OH; oy += 2) {
        int two = oy + 1 < OH;
        __m512 acc = vb;
        for (int ky = 0; ky < 3; ky++) {
            int64_t ra = 2 * oy + ky - PY, rb = ra + 2;
            int va = ra >= 0 && ra < H, vbv = two && rb >= 0 && rb < H;
            const char *pa = (const char *)(x + (va ? ra : 0) * W), *pb = (const char *)(x + (vbv ? rb : 0) * W);
            for (int kx = 0; kx < 3; kx++) {
                int64_t off = (kx - PX) * 4;
                __m512 a = _mm512_maskz_loadu_ps((__mmask16)(va ? cm[kx] : 0), pa + off);
                __m512 bb = _mm512_maskz_loadu_ps((__mmask16)(vbv ? cm[kx] : 0), pb + off);
                acc = _mm512_fmadd_ps(wv[3 * ky + kx], _mm512_permutex2var_ps(a, ev, bb), acc);
            }
        }
        if (act.kind == KL_ACT_RELU) acc = _mm512_max_ps(lo, acc);
        else if (act.kind == KL_ACT_CLIP) acc = _mm512_min_ps(hi, _mm512_max_ps(lo, acc));
        acc = _mm512_permutexvar_ps(pidx, acc);
        int64_t n = (two ? 2 : 1) * OW;
        _mm512_mask_storeu_ps(y + oy * OW, (__mmask16)((1u << n) - 1), acc);
    }
    if (act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP)
        kl__act_apply_range(act, y, OH * OW);
}

static void dw_planes(void *vc, size_t p0, size_t p1, int chunk) {
    dw_ctx *c = vc;
    int64_t pw = 0, nf = 0;
    float stackbuf[16384];  /* 64 KiB: planes up to ~112x112 need no allocation */
    float *scratch = NULL, *heap = NULL;
    switch (c->path) {
    case DW_FLAT: for (size_t pl = p0; pl < p1; pl++) dw3_flat_plane(c, pl); return;
    case DW_PAIRS: for (size_t pl = p0; pl < p1; pl++) dw3_pairs_plane(c, pl); return;
    case DW_ROWS: for (size_t pl = p0; pl < p1; pl++) dw3_plane(c, pl); return;
    default: break;
    }
    int fast = c->s->k[1] * c->s->k[2] <= 64;
    if (fast) {
        dw_scratch_dims(c->s, &pw, &nf);
        if (nf <= (int64_t)KL_ARRAY_LEN(stackbuf)) scratch = stackbuf;
        else scratch = heap = kl_mem_alloc((size_t)nf * sizeof(float), KL_TAG_WORKSPACE);
    }
    for (size_t pl = p0; pl < p1; pl++) {
        if (scratch) dw_plane_fast(c, pl, scratch, pw);
        else dw_plane_generic(c, pl);
    }
    kl_mem_free(heap);
}

void kl__dwconv2d_f32(const kl_conv_params *p, const float *x, const float *w, const float *bias, float *y,
                      kl_pool *pool) {
    sp3 s;
    to_sp3(p, &s);
    dw_ctx c = {p, &s, x, w, bias, y, NULL, DW_GENERIC};
    flatmask fm_stack[1024], *fm_heap = NULL;
    if (kl__pgemm_ok()) {
        /* rows of 64+: the row kernel (unmasked interior loads) measured faster (112: 0.12 vs 0.15 ms) */
        if (flat_ok(&s) && s.in[2] < 64) {
            int64_t nvec = (s.in[1] * s.in[2] + 15) / 16;
            flatmask *fm = nvec <= (int64_t)KL_ARRAY_LEN(fm_stack) ? fm_stack
                           : (fm_heap = kl_mem_alloc((size_t)nvec * sizeof(flatmask), KL_TAG_WORKSPACE));
            if (fm) {
                flat_masks(s.in[1], s.in[2], fm);
                c.fm = fm;
                c.path = DW_FLAT;
            }
        } else if (pairs_ok(&s)) c.path = DW_PAIRS;
    }
    if (c.path == DW_GENERIC && dw3_ok(&s) && kl__pgemm_ok()) c.path = DW_ROWS;
    kl_pool_parallel_for(pool, (size_t)(p->N * p->C), 1, dw_planes, &c);
    kl_mem_free(fm_heap);
}
