/* NCHWc pointwise (1x1) convolution, AVX-512F, group 1, on channel-blocked
 * tensors x (N, CB, H, W, 16) -> y (N, MB, OH, OW, 16): a register-blocked
 * kernel for strides 1 and 2 without pads, a generic one for the rest (pads,
 * larger strides, plain NCHW input).
 *
 * The micro-kernel (as MLAS's NCHWc pointwise kernel) keeps F output-channel
 * blocks x P output positions of accumulators in zmm registers (F*P <= 24)
 * and, for every input channel, loads F weight vectors (16 output channels
 * each) and broadcasts P input scalars against them. Padding input lanes
 * (channels >= C) are skipped; weights are packed per group of up to 4
 * output blocks as [C][nb][16] (zero lanes for output channels >= M).
 * Epilogue: + bias (at the start), + residual, activation (Relu/Clip in
 * registers, others through kl__act_apply_range), padding output lanes
 * forced to 0.
 *
 * Work items (n, position chunk, output-block group) come from the shape
 * only; every output is computed by one item with the input channels in
 * ascending order, so results are bit-identical at any thread count. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <string.h>

/* ==================================================================
 * Shape checks and packing
 * ================================================================== */

/* Only the weight shape decides (packing happens before strides and pads
 * are known): every 1x1 group-1 conv; pads, strides > 2 and plain input run
 * the generic path. */
int kl__nchwc_pw_ok(const kl_conv_params *p) {
    return p->nsp == 2 && p->group == 1 && p->k[0] == 1 && p->k[1] == 1 && p->C >= 1 && p->M >= 1;
}

size_t kl__nchwc_pw_packed_floats(const kl_conv_params *p) {
    int64_t MB = (p->M + KL_NCHWC - 1) / KL_NCHWC;
    return (size_t)(MB * p->C * KL_NCHWC);
}

/* Output blocks run in groups of at most 4 (sizes differ by at most one),
 * from the shape only: group g = blocks b0 .. b0+nb-1. */
static int64_t n_groups(int64_t MB) { return (MB + 3) / 4; }
static void grp_range(int64_t MB, int64_t g, int64_t *b0, int64_t *nb) {
    int64_t G = n_groups(MB), base = MB / G, extra = MB % G;
    *b0 = g * base + KL_MIN(g, extra);
    *nb = base + (g < extra);
}

/* w (M, C, 1, 1) -> per group [C][nb][16] at offset b0*C*16:
 * dst[b0*C*16 + (c*nb + f)*16 + l] = w[(b0+f)*16 + l][c] (0 beyond M). */
void kl__nchwc_pw_pack(const kl_conv_params *p, const float *w, float *dst) {
    int64_t MB = (p->M + KL_NCHWC - 1) / KL_NCHWC, C = p->C;
    for (int64_t g = 0; g < n_groups(MB); g++) {
        int64_t b0, nb;
        grp_range(MB, g, &b0, &nb);
        float *d = dst + b0 * C * KL_NCHWC;
        for (int64_t c = 0; c < C; c++)
            for (int64_t f = 0; f < nb; f++)
                for (int l = 0; l < KL_NCHWC; l++) {
                    int64_t m = (b0 + f) * KL_NCHWC + l;
                    d[(c * nb + f) * KL_NCHWC + l] = m < p->M ? w[m * C + c] : 0.0f;
                }
    }
}

/* ==================================================================
 * Micro-kernel
 * ================================================================== */

typedef struct {
    const float *x;    /* input of the tile's first position, channel block 0 */
    int64_t xcs;       /* input channel-block stride (H*W*16) */
    const float *w;    /* packed weights of the group ([C][nb][16]) */
    int64_t C;         /* input channels */
    float *y;          /* output of the tile's first position, first block */
    const float *res;  /* residual at the same place as y, or NULL */
    int64_t yos;       /* output block stride (OH*OW*16) */
    const float *bias; /* bias of the first output channel of the group, or NULL */
    int64_t mleft;     /* output channels from the group's first one to M */
    kl_act act;
} pw_tile;

/* F output blocks x P positions; input positions XS floats apart (16 *
 * stride). One input channel: F weight loads, P broadcasts, F*P FMAs. */
__attribute__((target("avx512f"), always_inline)) static inline void pw_body(const pw_tile *t, const int F,
                                                                             const int P, const int XS) {
    __m512 acc[4][12];
    __mmask16 mk[4];
#pragma GCC unroll 4
    for (int f = 0; f < F; f++) {
        int64_t left = t->mleft - f * KL_NCHWC;
        mk[f] = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        __m512 b = t->bias ? _mm512_maskz_loadu_ps(mk[f], t->bias + f * KL_NCHWC) : _mm512_setzero_ps();
#pragma GCC unroll 12
        for (int q = 0; q < P; q++) acc[f][q] = b;
    }
    kl__nchwc_fma_cblocks(acc, t->x, t->xcs, XS, t->w, t->C, F, P);
    const kl_act act = t->act;
    const __m512 lo = _mm512_set1_ps(act.kind == KL_ACT_CLIP ? act.a : 0.0f), hi = _mm512_set1_ps(act.b);
#pragma GCC unroll 4
    for (int f = 0; f < F; f++) {
        float *y = t->y + f * t->yos;
        const float *r = t->res ? t->res + f * t->yos : NULL;
#pragma GCC unroll 12
        for (int q = 0; q < P; q++) {
            __m512 v = acc[f][q];
            if (r) v = _mm512_add_ps(v, _mm512_loadu_ps(r + q * KL_NCHWC));
            if (act.kind == KL_ACT_RELU) v = _mm512_max_ps(lo, v);
            else if (act.kind == KL_ACT_CLIP) v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
            _mm512_storeu_ps(y + q * KL_NCHWC, _mm512_maskz_mov_ps(mk[f], v));
        }
    }
}

typedef void (*pw_fn)(const pw_tile *t);

#define KL_PW_FN(F, P)                                                                                                 \
    __attribute__((target("avx512f"), noinline)) static void pw_##F##_##P(const pw_tile *t) { pw_body(t, F, P, 16); } \
    __attribute__((target("avx512f"), noinline)) static void pw2_##F##_##P(const pw_tile *t) { pw_body(t, F, P, 32); }
KL__NCHWC_TILES(KL_PW_FN)
#undef KL_PW_FN

/* [stride 1 / 2][F][P] */
#define KL_PW_ENT(F, P) [0][F][P] = pw_##F##_##P, [1][F][P] = pw2_##F##_##P,
static const pw_fn PW_FNS[2][5][13] = {KL__NCHWC_TILES(KL_PW_ENT)};
#undef KL_PW_ENT

/* ==================================================================
 * Work items
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    const float *x, *bias;
    float *y;
    int plain;         /* x is plain NCHW (generic path only) */
    int64_t CB, MB, H, W, OH, OW, SY, SX, PY, PX;
    int64_t ngrp;      /* output-block groups (sizes differ by at most one) */
    int64_t nchunk;    /* position chunks per image */
    int64_t chunk;     /* positions (stride 1: flat) or rows (else) per chunk */
    int flat;          /* stride 1: positions are one flat run */
    int generic;       /* pads, strides > 2 or plain input: pw_generic_row */
    int wfirst;        /* items ordered (n, group, chunk): the weights of a
                          group stay in cache across its position chunks
                          (when they outweigh the input); else (n, chunk,
                          group): the input chunk stays across the groups */
} pw_ctx;

/* A run of npos output positions starting at output position o (same row
 * unless flat), input position i, output blocks b0..b0+nb-1. */
static void pw_run(const pw_ctx *c, int64_t n, int64_t b0, int64_t nb, int64_t o, int64_t i, int64_t npos) {
    const kl_conv_params *p = c->p;
    int64_t IS = c->H * c->W, OS = c->OH * c->OW;
    pw_tile t;
    t.xcs = IS * KL_NCHWC;
    t.C = p->C;
    t.yos = OS * KL_NCHWC;
    t.act = p->act;
    /* tiles of nearly equal width (no narrow tail tile) */
    int pmax = kl__nchwc_pmax[nb];
    int64_t nt = (npos + pmax - 1) / pmax, base = npos / KL_MAX(1, nt), extra = npos % KL_MAX(1, nt);
    for (int64_t ti = 0, q0 = 0; ti < nt; ti++) {
        int np = (int)(base + (ti < extra));
        t.x = c->x + (n * c->CB * IS + i + q0 * c->SX) * KL_NCHWC;
        t.w = p->packed_w + b0 * p->C * KL_NCHWC;
        int64_t yo = ((n * c->MB + b0) * OS + o + q0) * KL_NCHWC;
        t.y = c->y + yo;
        t.res = p->residual ? p->residual + yo : NULL;
        t.bias = c->bias ? c->bias + b0 * KL_NCHWC : NULL;
        t.mleft = p->M - b0 * KL_NCHWC;
        PW_FNS[c->SX == 2][nb][np](&t);
        q0 += np;
    }
    kl_act act = p->act;
    if (act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP) {
        for (int64_t b = b0; b < b0 + nb; b++) {
            float *y = c->y + ((n * c->MB + b) * OS + o) * KL_NCHWC;
            kl__act_apply_range(act, y, npos * KL_NCHWC);
            int64_t valid = p->M - b * KL_NCHWC;
            if (valid < KL_NCHWC)
                for (int64_t q = 0; q < npos; q++) memset(y + q * KL_NCHWC + valid, 0, (size_t)(KL_NCHWC - valid) * sizeof(float));
        }
    }
}

/* Generic path (pads, strides > 2, plain NCHW input): one output position
 * at a time, the F blocks of the group; positions in the padding get the
 * bias only. Same summation order as the tiles (bias, channels ascending). */
__attribute__((target("avx512f"))) static void pw_generic_row(const pw_ctx *c, int64_t n, int64_t b0, int64_t nb,
                                                               int64_t oy) {
    const kl_conv_params *p = c->p;
    int64_t IS = c->H * c->W, OS = c->OH * c->OW, C = p->C;
    const float *wg = p->packed_w + b0 * C * KL_NCHWC;
    __mmask16 mk[4];
    __m512 bv[4];
    for (int64_t f = 0; f < nb; f++) {
        int64_t left = p->M - (b0 + f) * KL_NCHWC;
        mk[f] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        bv[f] = c->bias ? _mm512_maskz_loadu_ps(mk[f], c->bias + (b0 + f) * KL_NCHWC) : _mm512_setzero_ps();
    }
    int64_t iy = oy * c->SY - c->PY;
    kl_act act = p->act;
    const __m512 lo = _mm512_set1_ps(act.kind == KL_ACT_CLIP ? act.a : 0.0f), hi = _mm512_set1_ps(act.b);
    for (int64_t ox = 0; ox < c->OW; ox++) {
        int64_t ix = ox * c->SX - c->PX;
        __m512 acc[4];
        for (int64_t f = 0; f < nb; f++) acc[f] = bv[f];
        if (iy >= 0 && iy < c->H && ix >= 0 && ix < c->W) {
            int64_t pos = iy * c->W + ix;
            for (int64_t ch = 0; ch < C; ch++) {
                float xv = c->plain ? c->x[(n * C + ch) * IS + pos]
                                    : c->x[((n * c->CB + ch / KL_NCHWC) * IS + pos) * KL_NCHWC + ch % KL_NCHWC];
                __m512 xb = _mm512_set1_ps(xv);
                for (int64_t f = 0; f < nb; f++)
                    acc[f] = _mm512_fmadd_ps(xb, _mm512_loadu_ps(wg + (ch * nb + f) * KL_NCHWC), acc[f]);
            }
        }
        for (int64_t f = 0; f < nb; f++) {
            int64_t yo = ((n * c->MB + b0 + f) * OS + oy * c->OW + ox) * KL_NCHWC;
            __m512 v = acc[f];
            if (p->residual) v = _mm512_add_ps(v, _mm512_loadu_ps(p->residual + yo));
            if (act.kind == KL_ACT_RELU) v = _mm512_max_ps(lo, v);
            else if (act.kind == KL_ACT_CLIP) v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
            _mm512_storeu_ps(c->y + yo, _mm512_maskz_mov_ps(mk[f], v));
        }
    }
    if (act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP) {
        for (int64_t b = b0; b < b0 + nb; b++) {
            float *y = c->y + ((n * c->MB + b) * OS + oy * c->OW) * KL_NCHWC;
            kl__act_apply_range(act, y, c->OW * KL_NCHWC);
            int64_t valid = p->M - b * KL_NCHWC;
            if (valid < KL_NCHWC)
                for (int64_t q = 0; q < c->OW; q++)
                    memset(y + q * KL_NCHWC + valid, 0, (size_t)(KL_NCHWC - valid) * sizeof(float));
        }
    }
}

static void pw_items(void *ctx, size_t begin, size_t end, int chunk) {
    const pw_ctx *c = ctx;
    for (size_t it = begin; it < end; it++) {
        int64_t g, pc, n = (int64_t)it / (c->ngrp * c->nchunk), r = (int64_t)it % (c->ngrp * c->nchunk);
        if (c->wfirst) { g = r / c->nchunk; pc = r % c->nchunk; }
        else { pc = r / c->ngrp; g = r % c->ngrp; }
        int64_t b0, nb;
        grp_range(c->MB, g, &b0, &nb);
        if (c->generic) {
            int64_t r0 = pc * c->chunk, r1 = KL_MIN(c->OH, r0 + c->chunk);
            for (int64_t oy = r0; oy < r1; oy++) pw_generic_row(c, n, b0, nb, oy);
        } else if (c->flat) {
            int64_t o0 = pc * c->chunk, o1 = KL_MIN(c->OH * c->OW, o0 + c->chunk);
            pw_run(c, n, b0, nb, o0, o0, o1 - o0);
        } else {
            int64_t r0 = pc * c->chunk, r1 = KL_MIN(c->OH, r0 + c->chunk);
            for (int64_t oy = r0; oy < r1; oy++)
                pw_run(c, n, b0, nb, oy * c->OW, oy * c->SY * c->W, c->OW);
        }
    }
}

/* ==================================================================
 * Entry
 * ================================================================== */

void kl__nchwc_pw_f32(const kl_conv_params *p, int plain_input, const float *x, const float *bias, float *y,
                      kl_pool *pool) {
    pw_ctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.x = x;
    c.bias = bias;
    c.y = y;
    c.CB = (p->C + KL_NCHWC - 1) / KL_NCHWC;
    c.MB = (p->M + KL_NCHWC - 1) / KL_NCHWC;
    c.H = p->in[0];
    c.W = p->in[1];
    c.OH = p->out[0];
    c.OW = p->out[1];
    c.SY = KL_MAX(1, p->stride[0]);
    c.SX = KL_MAX(1, p->stride[1]);
    c.PY = p->pad_begin[0];
    c.PX = p->pad_begin[1];
    c.plain = plain_input;
    c.generic = plain_input || c.PY || c.PX || p->pad_end[0] || p->pad_end[1] || c.SY > 2 || c.SX > 2;
    if (p->N == 0 || c.OH == 0 || c.OW == 0) return;
    c.ngrp = n_groups(c.MB);
    int64_t F = (c.MB + c.ngrp - 1) / c.ngrp, P = kl__nchwc_pmax[F];
    /* about 64k FMAs (16 lanes each) per item: positions per chunk, then
     * chunks of equal size; an even number of items when there are few (two
     * threads get equal shares) */
    int64_t per_pos = KL_MAX(1, p->C * F), want = KL_MAX(1, 65536 / per_pos);
    int64_t OS = c.OH * c.OW;
    c.flat = c.SX == 1 && c.SY == 1 && !c.generic;
    int64_t span = c.flat ? OS : c.OH, unit = c.flat ? 1 : c.OW;
    c.nchunk = KL_MAX(1, (span * unit + want - 1) / want);
    if ((p->N * c.ngrp * c.nchunk) % 2 && p->N * c.ngrp * c.nchunk < 16 && span / (c.nchunk + 1) * unit >= P)
        c.nchunk++;
    c.nchunk = KL_MIN(c.nchunk, span);
    c.chunk = (span + c.nchunk - 1) / c.nchunk;
    c.nchunk = (span + c.chunk - 1) / c.chunk;
    c.wfirst = c.MB * KL_NCHWC > c.H * c.W;   /* weight bytes > input bytes per image */
    size_t items = (size_t)(p->N * c.nchunk * c.ngrp);
    kl_pool_parallel_for(pool, items, 1, pw_items, &c);
}
