/* NCHWc Winograd convolution F(4x4, 3x3), AVX-512F: dense (group 1) 3x3
 * stride-1 dilation-1 convs on channel-blocked tensors x (N, CB, H, W, 16) ->
 * y (N, MB, OH, OW, 16), any pads, any C and M (see the NCHWc section of
 * include/keel/tensor.h; called by the dispatcher in nchwc_conv.c).
 *
 * Every 4x4 output tile is computed from a 6x6 input tile: V = B^T d B per
 * input channel (16 channels per vector), then for each of the 36 transform
 * positions a GEMM  Mt[tile][m] = sum_c V[tile][c] U[c][m]  (U = G g G^T,
 * transformed once at load), then Y = A^T Mt A fused with bias, residual,
 * activation and zeroed padding lanes. 36 multiplies per 16 outputs instead
 * of 144: 4x fewer FMAs than the direct kernel.
 *
 * Work runs in super-blocks of tiles (the flat tile index over images, rows
 * and columns of tiles; sizes from the shape only): phase 1 transforms the
 * super-block's input into V [pos][CB][T][16] (workspace), phase 2 runs
 * items (group of up to 4 output-channel blocks, block of tiles): for each
 * position the register-blocked GEMM micro-kernel (as nchwc_pw.c: F weight
 * vectors per input channel, P broadcast input scalars, F*P accumulators)
 * into Mt [pos][MB][T][16] (workspace), then the output transform of the
 * item's tiles (with a single group, M <= 64, there is no phase 1: each
 * item transforms its own tiles first). Slot mode (weights up to 1 MB:
 * 64 channels) instead runs items of one tile block over all groups in a
 * compact V + Mt slot per pool chunk, which stays in that core's L2 from
 * item to item. Each output is a fixed sequence of operations (channels in
 * ascending order, transforms in a fixed order) whatever the blocking, so
 * the results are bit-identical at any thread count.
 *
 * Packed weights: [groups of up to 4 output blocks][36][C][nb][16] (the
 * pointwise layout per transform position; each item streams one contiguous
 * run), zero lanes for output channels >= M. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <stdlib.h>
#include <string.h>

#define BLK KL_NCHWC
#define NPOS 36
#define TSB_BYTES ((size_t)4 << 20) /* target bytes of V + Mt per super-block */
#define SLOT_BYTES ((size_t)256 << 10) /* target bytes of V + Mt per slot (slot mode) */
#define SLOT_UMAX ((size_t)1 << 20)   /* slot mode up to this many bytes of weights */

/* ==================================================================
 * Shape checks and packing
 * ================================================================== */

static int64_t s1(int64_t v) { return v <= 0 ? 1 : v; }

int kl__nchwc_wino_ok(const kl_conv_params *p) {
    return p->nsp == 2 && p->group == 1 && p->k[0] == 3 && p->k[1] == 3 && s1(p->stride[0]) == 1 &&
           s1(p->stride[1]) == 1 && s1(p->dilation[0]) == 1 && s1(p->dilation[1]) == 1 && p->C >= 1 && p->M >= 1 &&
           kl_settings_get()->wino_pack;
}

size_t kl__nchwc_wino_packed_floats(const kl_conv_params *p) {
    int64_t MB = (p->M + BLK - 1) / BLK;
    return (size_t)(NPOS * MB * p->C * BLK);
}

/* Output blocks run in groups of at most 4 (sizes differ by at most one). */
static int64_t n_groups(int64_t MB) { return (MB + 3) / 4; }
static void grp_range(int64_t MB, int64_t g, int64_t *b0, int64_t *nb) {
    int64_t G = n_groups(MB), base = MB / G, extra = MB % G;
    *b0 = g * base + KL_MIN(g, extra);
    *nb = base + (g < extra);
}

/* G (6x3) of F(4x4, 3x3) with the interpolation points 0, 1, -1, 2, -2, inf. */
static const double Gm[6][3] = {{1.0 / 4, 0, 0},
                                {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                {0, 0, 1}};

void kl__nchwc_wino_pack(const kl_conv_params *p, const float *w, float *dst) {
    int64_t C = p->C, M = p->M, MB = (M + BLK - 1) / BLK;
    /* lanes innermost: each position's 16 lanes are one contiguous store
     * (output channel innermost scattered every float of 113 MB over its
     * own cache line at load: ResNet-18 loaded in 1.3 s instead of 0.5) */
    for (int64_t g = 0; g < n_groups(MB); g++) {
        int64_t b0, nb;
        grp_range(MB, g, &b0, &nb);
        for (int64_t c = 0; c < C; c++)
            for (int64_t f = 0; f < nb; f++) {
                float u16[NPOS][BLK];
                for (int l = 0; l < BLK; l++) {
                    int64_t m = (b0 + f) * BLK + l;
                    if (m >= M) {
                        for (int pos = 0; pos < NPOS; pos++) u16[pos][l] = 0.0f;
                        continue;
                    }
                    const float *k = w + (m * C + c) * 9;
                    double t[6][3];
                    for (int i = 0; i < 6; i++)
                        for (int j = 0; j < 3; j++)
                            t[i][j] = Gm[i][0] * k[0 * 3 + j] + Gm[i][1] * k[1 * 3 + j] + Gm[i][2] * k[2 * 3 + j];
                    for (int i = 0; i < 6; i++)
                        for (int j = 0; j < 6; j++)
                            u16[i * 6 + j][l] = (float)(t[i][0] * Gm[j][0] + t[i][1] * Gm[j][1] + t[i][2] * Gm[j][2]);
                }
                for (int pos = 0; pos < NPOS; pos++)
                    memcpy(dst + (b0 * NPOS + pos * nb) * C * BLK + (c * nb + f) * BLK, u16[pos], sizeof u16[pos]);
            }
    }
}

/* ==================================================================
 * Plan (from the shape only)
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    const float *x, *bias, *U;
    float *y, *V, *Mt;
    int64_t CB, MB, H, W, OH, OW, TY, TX, timg, ttot;
    int64_t tsb;       /* tiles per super-block (V, Mt sized for it) */
    int64_t t0, nt;    /* current super-block: first tile, tiles */
    int64_t ngrp, nblk, tb; /* phase-2 items: groups x tile blocks of tb tiles */
    int fused;         /* one group: phase 2 items transform their own input */
    int slot;          /* slot mode: items are tile blocks over all groups, V and Mt per chunk */
    int64_t nbmax;     /* most output blocks of a group */
    size_t slot_floats;
    float *slots;      /* slot k at slots + k * slot_floats */
} wctx;

/* Where an item's V and Mt live: rows [pos][block][ts][16]. */
typedef struct {
    float *V, *Mt;
    int64_t ts;    /* tiles per row */
    int64_t mrows; /* Mt blocks per position */
    int64_t mb0;   /* output block of Mt row 0 */
    int64_t g0;    /* global tile index of local tile 0 */
} wbuf;

static void plan(const kl_conv_params *p, wctx *c) {
    memset(c, 0, sizeof *c);
    c->p = p;
    c->CB = (p->C + BLK - 1) / BLK;
    c->MB = (p->M + BLK - 1) / BLK;
    c->H = p->in[0];
    c->W = p->in[1];
    c->OH = p->out[0];
    c->OW = p->out[1];
    c->TY = (c->OH + 3) / 4;
    c->TX = (c->OW + 3) / 4;
    c->timg = c->TY * c->TX;
    c->ttot = p->N * c->timg;
    /* V and Mt of a super-block: about TSB_BYTES, or as much as the
     * weights when they are larger (each tile block streams them once) */
    size_t per_tile = (size_t)(NPOS * (c->CB + c->MB) * BLK) * sizeof(float);
    size_t wbytes = kl__nchwc_wino_packed_floats(p) * sizeof(float);
    int64_t tsb = (int64_t)(KL_MAX(TSB_BYTES, wbytes) / per_tile);
    tsb = KL_MAX(1, KL_MIN(tsb, c->ttot));
    int64_t nsb = (c->ttot + tsb - 1) / KL_MAX(1, tsb);
    c->tsb = nsb ? (c->ttot + nsb - 1) / nsb : 1;
    c->ngrp = n_groups(c->MB);
    c->nbmax = (c->MB + c->ngrp - 1) / c->ngrp;
    /* slot mode when the weights are small (64 channels: 0.6 MB): each
     * chunk keeps its items' V and Mt in a compact slot of SLOT_BYTES that
     * stays in its L2 from one item to the next (at batch 8 the shared
     * super-block's lines came back from L3 for every store: 0.54 ->
     * 0.46 ms per image for 64 channels at 56x56). Larger weights keep the
     * super-blocks: every item streams all of them. */
    c->slot = wbytes <= SLOT_UMAX;
    if (c->slot) {
        size_t pt = (size_t)(NPOS * (c->CB + c->nbmax) * BLK) * sizeof(float);
        int64_t tb = KL_MIN(KL_MAX(6, (int64_t)(SLOT_BYTES / pt)), c->ttot);
        int64_t nblk = (c->ttot + tb - 1) / tb;
        while (nblk < 8 && c->ttot / (nblk + 1) >= 6) nblk++;
        c->tb = (c->ttot + nblk - 1) / nblk;
        c->nblk = (c->ttot + c->tb - 1) / c->tb;
        c->slot_floats = (size_t)(NPOS * (c->CB + c->nbmax) * c->tb * BLK);
    }
}

/* Slots of V + Mt the workspace holds in slot mode (chunks beyond them get
 * their own allocation; a variable so the unit test can lower it). */
int kl__nchwc_wino_slots = 4;

size_t kl__nchwc_wino_workspace_bytes(const kl_conv_params *p) {
    wctx c;
    plan(p, &c);
    if (c.slot) return (size_t)kl__nchwc_wino_slots * c.slot_floats * sizeof(float) + 64;
    return (size_t)(NPOS * (c.CB + c.MB) * c.tsb * BLK) * sizeof(float) + 64;
}

/* ==================================================================
 * Input transform: V[pos][cb][t][16] = (B^T d B)[pos] of the 6x6 tile
 * ================================================================== */

/* 1-D B^T of F(4, 3) on 6 points. */
#define WINO_BT(d0, d1, d2, d3, d4, d5, o)                                                            \
    do {                                                                                              \
        __m512 f4_ = _mm512_set1_ps(4.0f), f5_ = _mm512_set1_ps(5.0f), f2_ = _mm512_set1_ps(2.0f); \
        __m512 a_ = _mm512_fnmadd_ps(f4_, d2, d4);        /* d4 - 4 d2 */                           \
        __m512 b_ = _mm512_fnmadd_ps(f4_, d1, d3);        /* d3 - 4 d1 */                           \
        __m512 c_ = _mm512_sub_ps(d4, d2), e_ = _mm512_sub_ps(d3, d1);                               \
        o[0] = _mm512_add_ps(_mm512_fnmadd_ps(f5_, d2, _mm512_mul_ps(f4_, d0)), d4);                  \
        o[1] = _mm512_add_ps(a_, b_);                                                                 \
        o[2] = _mm512_sub_ps(a_, b_);                                                                 \
        o[3] = _mm512_fmadd_ps(f2_, e_, c_);                                                          \
        o[4] = _mm512_fnmadd_ps(f2_, e_, c_);                                                         \
        o[5] = _mm512_add_ps(_mm512_fnmadd_ps(f5_, d3, _mm512_mul_ps(f4_, d1)), d5);                  \
    } while (0)

__attribute__((target("avx512f"))) static void in_tile(const wctx *c, const wbuf *wb, int64_t t, int64_t cb) {
    const kl_conv_params *p = c->p;
    int64_t gt = wb->g0 + t, n = gt / c->timg, r = gt % c->timg;
    int64_t iy0 = (r / c->TX) * 4 - p->pad_begin[0], ix0 = (r % c->TX) * 4 - p->pad_begin[1];
    const float *xb = c->x + (n * c->CB + cb) * c->H * c->W * BLK;
    __m512 e[6][6];
    int colok[6];
    for (int j = 0; j < 6; j++) colok[j] = ix0 + j >= 0 && ix0 + j < c->W;
    for (int i = 0; i < 6; i++) {
        int64_t iy = iy0 + i;
        __m512 d[6];
        if (iy >= 0 && iy < c->H) {
            const float *row = xb + (iy * c->W + ix0) * BLK;
            for (int j = 0; j < 6; j++) d[j] = colok[j] ? _mm512_loadu_ps(row + j * BLK) : _mm512_setzero_ps();
        } else
            for (int j = 0; j < 6; j++) d[j] = _mm512_setzero_ps();
        WINO_BT(d[0], d[1], d[2], d[3], d[4], d[5], e[i]);
    }
    float *v = wb->V + (cb * wb->ts + t) * BLK;
    int64_t ps = c->CB * wb->ts * BLK;
    for (int j = 0; j < 6; j++) {
        __m512 o[6];
        WINO_BT(e[0][j], e[1][j], e[2][j], e[3][j], e[4][j], e[5][j], o);
        for (int i = 0; i < 6; i++) _mm512_storeu_ps(v + (i * 6 + j) * ps, o[i]);
    }
}

static void in_range(void *ctx, size_t b, size_t e, int chunk) {
    const wctx *c = ctx;
    wbuf wb = {c->V, c->Mt, c->tsb, c->MB, 0, c->t0};
    /* tile-major: a thread transforms the tiles its phase-2 items mostly
     * read (same static chunking order) */
    for (size_t i = b; i < e; i++) in_tile(c, &wb, (int64_t)i / c->CB, (int64_t)i % c->CB);
}

/* ==================================================================
 * GEMM micro-kernel per transform position
 * ================================================================== */

typedef struct {
    const float *v;  /* V at (pos, cb 0, first tile) */
    int64_t vcs;     /* V channel-block stride (tsb * 16) */
    const float *u;  /* U at (pos, group) : [C][nb][16] */
    int64_t C;
    float *m;        /* Mt at (pos, first block of the group, first tile) */
    int64_t mbs;     /* Mt block stride (tsb * 16) */
} gk;

__attribute__((target("avx512f"), always_inline)) static inline void gemm_body(const gk *k, const int F, const int P) {
    __m512 acc[4][12];
#pragma GCC unroll 4
    for (int f = 0; f < F; f++)
#pragma GCC unroll 12
        for (int q = 0; q < P; q++) acc[f][q] = _mm512_setzero_ps();
    kl__nchwc_fma_cblocks(acc, k->v, k->vcs, BLK, k->u, k->C, F, P);
#pragma GCC unroll 4
    for (int f = 0; f < F; f++)
#pragma GCC unroll 12
        for (int q = 0; q < P; q++) _mm512_storeu_ps(k->m + f * k->mbs + q * BLK, acc[f][q]);
}

typedef void (*gk_fn)(const gk *k);
#define KL_GK_FN(F, P) \
    __attribute__((target("avx512f"), noinline)) static void gk_##F##_##P(const gk *k) { gemm_body(k, F, P); }
KL__NCHWC_TILES(KL_GK_FN)
#undef KL_GK_FN

#define KL_GK_ENT(F, P) [F][P] = gk_##F##_##P,
static const gk_fn GK[5][13] = {KL__NCHWC_TILES(KL_GK_ENT)};
#undef KL_GK_ENT

/* ==================================================================
 * Output transform + epilogue
 * ================================================================== */

/* 1-D A^T of F(4, 3): 6 points -> 4. */
#define WINO_AT(m0, m1, m2, m3, m4, m5, o)                                                      \
    do {                                                                                        \
        __m512 s12_ = _mm512_add_ps(m1, m2), d12_ = _mm512_sub_ps(m1, m2);                     \
        __m512 s34_ = _mm512_add_ps(m3, m4), d34_ = _mm512_sub_ps(m3, m4);                     \
        o[0] = _mm512_add_ps(_mm512_add_ps(m0, s12_), s34_);                                   \
        o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34_, d12_);                              \
        o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34_, s12_);                              \
        o[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34_, d12_), m5);           \
    } while (0)

__attribute__((target("avx512f"))) static void out_tile(const wctx *c, const wbuf *wb, int64_t t, int64_t b) {
    const kl_conv_params *p = c->p;
    int64_t gt = wb->g0 + t, n = gt / c->timg, r = gt % c->timg;
    int64_t oy0 = (r / c->TX) * 4, ox0 = (r % c->TX) * 4;
    const float *m = wb->Mt + ((b - wb->mb0) * wb->ts + t) * BLK;
    int64_t ps = wb->mrows * wb->ts * BLK;
    __m512 h[4][6];
    for (int j = 0; j < 6; j++) {
        __m512 o[4];
        WINO_AT(_mm512_loadu_ps(m + (0 * 6 + j) * ps), _mm512_loadu_ps(m + (1 * 6 + j) * ps),
                _mm512_loadu_ps(m + (2 * 6 + j) * ps), _mm512_loadu_ps(m + (3 * 6 + j) * ps),
                _mm512_loadu_ps(m + (4 * 6 + j) * ps), _mm512_loadu_ps(m + (5 * 6 + j) * ps), o);
        for (int i = 0; i < 4; i++) h[i][j] = o[i];
    }
    int64_t lanes = KL_MIN(BLK, p->M - b * BLK);
    __mmask16 keep = (__mmask16)((1u << lanes) - 1u);
    __m512 bv = c->bias ? _mm512_maskz_loadu_ps(keep, c->bias + b * BLK) : _mm512_setzero_ps();
    int64_t ybase = (n * c->MB + b) * c->OH * c->OW;
    kl_act act = p->act;
    for (int i = 0; i < 4 && oy0 + i < c->OH; i++) {
        __m512 o[4];
        WINO_AT(h[i][0], h[i][1], h[i][2], h[i][3], h[i][4], h[i][5], o);
        for (int j = 0; j < 4 && ox0 + j < c->OW; j++) {
            int64_t yo = (ybase + (oy0 + i) * c->OW + ox0 + j) * BLK;
            __m512 v = _mm512_add_ps(o[j], bv);
            if (p->residual) v = _mm512_add_ps(v, _mm512_loadu_ps(p->residual + yo));
            switch (act.kind) {
            case KL_ACT_NONE: break;
            case KL_ACT_RELU: v = _mm512_max_ps(_mm512_setzero_ps(), v); break;
            case KL_ACT_CLIP: v = _mm512_min_ps(_mm512_set1_ps(act.b), _mm512_max_ps(_mm512_set1_ps(act.a), v)); break;
            case KL_ACT_LEAKY_RELU:
                v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_set1_ps(act.a));
                break;
            case KL_ACT_HARDSWISH: { /* as the elementwise kernel: x * relu6(x + 3) / 6 */
                __m512 hs = _mm512_max_ps(_mm512_setzero_ps(),
                                          _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_add_ps(v, _mm512_set1_ps(3.0f))));
                v = _mm512_div_ps(_mm512_mul_ps(v, hs), _mm512_set1_ps(6.0f));
                break;
            }
            default: /* sigmoid, tanh, gelu: the elementwise kernel on the 16 lanes */
                _mm512_storeu_ps(c->y + yo, v);
                kl__act_apply_range(act, c->y + yo, BLK);
                v = _mm512_loadu_ps(c->y + yo);
                break;
            }
            _mm512_storeu_ps(c->y + yo, _mm512_maskz_mov_ps(keep, v));
        }
    }
}

/* GEMM of tiles [ta, ta + n) of wb for group g (blocks b0, nb): every
 * transform position, register tiles of up to pmax tiles. */
static void gemm_group(const wctx *c, const wbuf *wb, int64_t b0, int64_t nb, int64_t ta, int64_t n) {
    int64_t pmax = kl__nchwc_pmax[nb];
    int64_t nmt = (n + pmax - 1) / pmax, base = n / nmt, extra = n % nmt;
    gk k;
    k.vcs = wb->ts * BLK;
    k.C = c->p->C;
    k.mbs = wb->ts * BLK;
    for (int pos = 0; pos < NPOS; pos++) {
        const float *vp = wb->V + (int64_t)pos * c->CB * wb->ts * BLK;
        k.u = c->U + (b0 * NPOS + pos * nb) * c->p->C * BLK;
        float *mp = wb->Mt + ((int64_t)pos * wb->mrows + b0 - wb->mb0) * wb->ts * BLK;
        for (int64_t i = 0, t = ta; i < nmt; i++) {
            int np = (int)(base + (i < extra));
            k.v = vp + t * BLK;
            k.m = mp + t * BLK;
            GK[nb][np](&k);
            t += np;
        }
    }
}

/* Phase-2 item: group g of output blocks x tile block tbi. */
static void item(const wctx *c, int64_t g, int64_t tbi) {
    int64_t b0, nb;
    grp_range(c->MB, g, &b0, &nb);
    int64_t ta = tbi * c->tb, te = KL_MIN(c->nt, ta + c->tb), n = te - ta;
    if (n <= 0) return;
    wbuf wb = {c->V, c->Mt, c->tsb, c->MB, 0, c->t0};
    if (c->fused) /* one group: the item transforms its own tiles (V stays in this core's cache) */
        for (int64_t t = ta; t < te; t++)
            for (int64_t cb = 0; cb < c->CB; cb++) in_tile(c, &wb, t, cb);
    gemm_group(c, &wb, b0, nb, ta, n);
    for (int64_t f = 0; f < nb; f++)
        for (int64_t t = ta; t < te; t++) out_tile(c, &wb, t, b0 + f);
}

static void item_range(void *ctx, size_t b, size_t e, int chunk) {
    const wctx *c = ctx;
    for (size_t i = b; i < e; i++) item(c, (int64_t)i / c->nblk, (int64_t)i % c->nblk);
}

/* Slot-mode item: tile block i, all groups, in the chunk's own V and Mt
 * (compact, reused by the chunk's next item: they stay in its L2). */
static void slot_item(const wctx *c, int64_t i, int chunk) {
    int64_t ta = i * c->tb, n = KL_MIN(c->ttot, ta + c->tb) - ta;
    if (n <= 0) return;
    float *V = c->slots + (size_t)chunk * c->slot_floats;
    wbuf wb = {V, V + NPOS * c->CB * c->tb * BLK, c->tb, c->nbmax, 0, ta};
    for (int64_t t = 0; t < n; t++)
        for (int64_t cb = 0; cb < c->CB; cb++) in_tile(c, &wb, t, cb);
    for (int64_t g = 0; g < c->ngrp; g++) {
        int64_t b0, nb;
        grp_range(c->MB, g, &b0, &nb);
        wb.mb0 = b0;
        gemm_group(c, &wb, b0, nb, 0, n);
        for (int64_t f = 0; f < nb; f++)
            for (int64_t t = 0; t < n; t++) out_tile(c, &wb, t, b0 + f);
    }
}

static void slot_range(void *ctx, size_t b, size_t e, int chunk) {
    const wctx *c = ctx;
    for (size_t i = b; i < e; i++) slot_item(c, (int64_t)i, chunk);
}

/* ==================================================================
 * Entry
 * ================================================================== */

int kl__nchwc_wino_use(const kl_conv_params *p, int plain_input) {
    if (plain_input || !kl__nchwc_wino_ok(p)) return 0;
    int use = kl_settings_get()->wino_use; /* KEEL_WINO, read once: packing and dispatch agree */
    if (use >= 0) return use;
    /* Winograd weights are 4x the direct ones (36 vs 9 per channel pair):
     * with few tiles (batch 1 at 7x7, 512 channels: 4 tiles for 37.7 MB)
     * streaming them costs more than the FMAs saved; measured crossover
     * between 9.4 MB per tile (slower, 512 ch at 7x7 batch 1) and 0.6 MB
     * (faster, 256 ch at 14x14) */
    int64_t tiles = p->N * ((p->out[0] + 3) / 4) * ((p->out[1] + 3) / 4);
    double wbytes = (double)kl__nchwc_wino_packed_floats(p) * sizeof(float);
    return p->C >= 16 && p->M >= 16 && tiles > 0 && wbytes / (double)tiles <= 4.0e6;
}

int kl__nchwc_wino_f32(const kl_conv_params *p, const float *x, const float *bias, const float *U, float *y, void *ws,
                       kl_pool *pool, kl_err *e) {
    wctx c;
    plan(p, &c);
    if (c.ttot == 0) return KL_OK;
    c.x = x;
    c.bias = bias;
    c.U = U;
    c.y = y;
    void *own = NULL;
    if (c.slot) {
        int nch = kl_pool_chunks(pool, (size_t)c.nblk, 1);
        if (!ws || nch > kl__nchwc_wino_slots) {
            if (!(own = kl_mem_alloc_e((size_t)nch * c.slot_floats * sizeof(float) + 64, KL_TAG_WORKSPACE, e)))
                return e ? e->code : KL_ENOMEM;
            ws = own;
        }
        c.slots = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
        kl_pool_parallel_for(pool, (size_t)c.nblk, 1, slot_range, &c);
        kl_mem_free(own);
        return KL_OK;
    }
    if (!ws) {
        if (!(own = kl_mem_alloc_e(kl__nchwc_wino_workspace_bytes(p), KL_TAG_WORKSPACE, e))) return e ? e->code : KL_ENOMEM;
        ws = own;
    }
    c.V = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    c.Mt = c.V + NPOS * c.CB * c.tsb * BLK;
    for (c.t0 = 0; c.t0 < c.ttot; c.t0 += c.tsb) {
        c.nt = KL_MIN(c.tsb, c.ttot - c.t0);
        c.fused = c.ngrp == 1;
        if (!c.fused) kl_pool_parallel_for(pool, (size_t)(c.nt * c.CB), 4, in_range, &c);
        /* tile blocks: V slices of a position of at most 256 KB (they stay
         * in L2 with the U slice while the micro-kernel walks the block),
         * split further while there are fewer than 8 items (4 when the
         * weights are large: every tile block streams them once) */
        int64_t tbmax = KL_MAX(16, KL_MIN(256, 65536 / p->C));
        int min_items = kl__nchwc_wino_packed_floats(p) * sizeof(float) > ((size_t)2 << 20) ? 4 : 8;
        c.nblk = (c.nt + tbmax - 1) / tbmax;
        while (c.ngrp * c.nblk < min_items && c.nt / (c.nblk + 1) >= 6) c.nblk++;
        c.tb = (c.nt + c.nblk - 1) / c.nblk;
        c.nblk = (c.nt + c.tb - 1) / c.tb;
        kl_pool_parallel_for(pool, (size_t)(c.ngrp * c.nblk), 1, item_range, &c);
    }
    kl_mem_free(own);
    return KL_OK;
}
