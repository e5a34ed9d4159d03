/* NCHWc (channel-blocked) dense 2-D convolution: weight packing and the
 * direct AVX-512 kernel of the blocked path (see the NCHWc section of
 * include/keel/tensor.h).
 *
 * Layouts: x blocked (N, CB, H, W, 16) or plain NCHW (plain_input, the first
 * conv of a network); y and the residual blocked (N, MB, OH, OW, 16); packed
 * weights [MB][CB][KH][KW][ic 16][oc 16] (zero for channels >= C or >= M;
 * [ic C] instead of [ic 16] when C < 16, see tap_ic).
 *
 * Kernel (as MLAS's NCHWc kernels): an output tile is FB blocks of 16 output
 * channels (one zmm each) times NT consecutive output positions of one row,
 * FB * NT accumulators; for every input channel of every kernel tap, FB weight
 * vectors are loaded and each of the NT input scalars is broadcast and FMA'd
 * into them. No im2col, no padded copies: taps falling into the padding are
 * skipped (rows per output row; columns by running the border positions one at
 * a time with their own kw range, the interior in tiles of NT). Input channels
 * are processed in chunks whose weights stay in L2; between chunks the partial
 * sums live in y, and bias + residual + activation (+ zeroing the padding
 * lanes) are applied when the last chunk is stored.
 *
 * Work items: output rows (image, group of up to 4 output-channel blocks,
 * row), fixed from the shape; every output element is computed by one item
 * with the same sequence of FMAs whatever the tiling around it (input
 * channels, taps, lanes in ascending order): the same bits at any thread
 * count. Only on CPUs with AVX-512F (kl_nchwc_conv_packed_floats is 0
 * otherwise, or with KEEL_NO_AVX512=1, and the conv stays NCHW).
 *
 * Dispatch point: kl_nchwc_conv_f32 picks a kernel per conv shape; the
 * depthwise and 1x1 kernels of the MobileNet branch plug in there (see
 * "Dispatcher" below). */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>
#include <string.h>

#define BLK KL_NCHWC
#define FBMAX 4     /* output-channel blocks per tile */
#define NTMAX 8     /* output positions per tile (upper bound over FB) */
#define GMAX_TAPS 64 /* kernels up to this many taps use gather tiles at the borders */
#ifndef L2_BUDGET
#define L2_BUDGET (320 * 1024) /* bytes of weights per input-channel chunk */
#endif

/* Output positions per tile for FB blocks: FB * NT accumulators + FB weight
 * vectors + a broadcast register stay within the 32 zmm registers. */
static const int nt_max[FBMAX + 1] = {0, 8, 8, 8, 6};

/* Outputs of at least this many bytes are written with streaming stores (a
 * variable so the unit test can lower it; not for tuning). */
size_t kl__nchwc_stream_bytes = (size_t)48 << 20;

/* ==================================================================
 * Support and packing
 * ================================================================== */

static int is_dense(const kl_conv_params *p) { return p->nsp == 2 && p->group == 1 && p->C > 0 && p->M > 0; }

/* Input channels stored per tap in the packed weights: 16, or C when C < 16
 * (the first conv, C = 3): the 3 used rows of a tap are then adjacent
 * instead of 1 KB apart, where the 49 taps x 4 output blocks of the 7x7 stem
 * mapped onto a few L1 sets and missed the L1. Same values, same FMAs. */
static int64_t tap_ic(const kl_conv_params *p) { return p->C < BLK ? p->C : BLK; }

/* Floats of the direct kernel's packed weights; 3x3 stride-1 convs keep the
 * Winograd form (nchwc_wino.c) after them. */
static size_t direct_floats(const kl_conv_params *p) {
    int64_t CB = (p->C + BLK - 1) / BLK, MB = (p->M + BLK - 1) / BLK;
    return (size_t)(MB * CB * p->k[0] * p->k[1] * tap_ic(p) * BLK);
}

size_t kl_nchwc_conv_packed_floats(const kl_conv_params *p) {
    if (!kl__pgemm_ok() || !p || p->nsp != 2 || p->k[0] <= 0 || p->k[1] <= 0) return 0;
    if (kl__nchwc_pw_ok(p)) return kl__nchwc_pw_packed_floats(p);   /* 1x1: nchwc_pw.c */
    if (is_dense(p)) return direct_floats(p) + (kl__nchwc_wino_ok(p) ? kl__nchwc_wino_packed_floats(p) : 0);
    if (kl__nchwc_dw_ok(p)) return kl__nchwc_dw_packed_floats(p);   /* depthwise: nchwc_dw.c */
    return 0;
}

void kl_nchwc_conv_pack_weights(const kl_conv_params *p, const float *w, float *dst) {
    if (kl__nchwc_pw_ok(p)) { kl__nchwc_pw_pack(p, w, dst); return; }
    if (!is_dense(p)) { if (kl__nchwc_dw_ok(p)) kl__nchwc_dw_pack(p, w, dst); return; }
    int64_t C = p->C, M = p->M, KH = p->k[0], KW = p->k[1];
    int64_t CB = (C + BLK - 1) / BLK, MB = (M + BLK - 1) / BLK, TI = tap_ic(p);
    for (int64_t ob = 0; ob < MB; ob++)
        for (int64_t cb = 0; cb < CB; cb++)
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++) {
                    float *d = dst + (((ob * CB + cb) * KH + kh) * KW + kw) * TI * BLK;
                    for (int ic = 0; ic < TI; ic++)
                        for (int oc = 0; oc < BLK; oc++) {
                            int64_t m = ob * BLK + oc, c = cb * BLK + ic;
                            d[ic * BLK + oc] = (m < M && c < C) ? w[((m * C + c) * KH + kh) * KW + kw] : 0.0f;
                        }
                }
    if (kl__nchwc_wino_ok(p)) kl__nchwc_wino_pack(p, w, dst + direct_floats(p));
}

size_t kl_nchwc_conv_workspace_bytes(const kl_conv_params *p, int plain_input) {
    return is_dense(p) && kl__pgemm_ok() && kl__nchwc_wino_use(p, plain_input) ? kl__nchwc_wino_workspace_bytes(p) : 0;
}

/* ==================================================================
 * Tile kernel
 * ================================================================== */

typedef struct {
    const float *x;      /* input at (first channel of the chunk, first valid kh, kw) of position 0 */
    const float *w;      /* weights at (ob0, cb0, kh0, kw0) */
    float *y;            /* output at (ob0, oy, ox0) */
    const float *res;    /* residual at the same offset, or NULL */
    const float *bias;   /* bias at channel ob0 * 16 (M - ob0 * 16 valid), or NULL */
    int64_t ncb;         /* channel blocks in the chunk */
    int64_t cvalid;      /* channels left from the chunk's first one (nic = min(16, cvalid - 16 cb)) */
    int64_t nkh, nkw;    /* valid taps */
    int64_t xs_cb, xs_c, xs_kh, xs_kw, xs_p; /* input steps: channel block, channel, kh, kw, position */
    int64_t ws_ob, ws_cb, ws_kh, ws_kw;      /* weight steps */
    int64_t ys_ob;                           /* output step per channel block */
    int64_t mleft;       /* output channels from ob0 * 16 to M */
    int first, last;     /* first chunk (accumulators start at 0), last chunk (epilogue) */
    int stream;          /* final stores bypass the caches (outputs far larger than the caches) */
    kl_act act;
    const char *pf;      /* next weights to prefetch into L2 (block 0; block f at + f * ws_ob floats), or NULL */
    int64_t pf_n;        /* lines per block to prefetch in this call (PF_LINES per tap step at most) */
    const char *xq;      /* next input lines to prefetch (the next output row's new input rows), or NULL */
    int64_t xn, xr, xlr, xjump; /* lines in this call, left in the current region, per region, bytes to the next */
} targs;

/* Weight prefetch: while a channel chunk runs, the weights of the next one
 * (next chunk of the group, or the next group's first) are prefetched into
 * L2, PF_LINES lines per block per tap step, so the first tile pass over a
 * chunk does not wait on DRAM (at batch 1 the weights of layer 4 are read
 * once per image: 9.4 MB per 512->512 conv). No effect on the results. */
#ifndef PF_LINES
#define PF_LINES 2
#endif

__attribute__((target("avx512f"), always_inline)) static inline void
pf_step(const char **pf, int64_t *left, const int FB, int64_t ob_bytes) {
    if (*left <= 0) return;
    #pragma GCC unroll 4
    for (int f = 0; f < FB; f++)
        #pragma GCC unroll 4
        for (int l = 0; l < PF_LINES; l++) _mm_prefetch(*pf + f * ob_bytes + l * 64, _MM_HINT_T1);
    *pf += PF_LINES * 64;
    *left -= PF_LINES;
}

/* Input prefetch (contiguous tiles): while an output row runs, the input
 * rows the next one adds are prefetched, XPF_LINES lines per tap step,
 * region by region (one per channel block, or channel of a plain input).
 * Large batches read every activation from DRAM, where the 3 x 3 stride-2
 * convs waited on their input rows. */
#ifndef XPF_LINES
#define XPF_LINES 4
#endif
__attribute__((always_inline)) static inline void xpf_step(const targs *a, const char **xq, int64_t *xn, int64_t *xr) {
    if (*xn <= 0) return;
    #pragma GCC unroll 4
    for (int l = 0; l < XPF_LINES; l++) {
        _mm_prefetch(*xq, _MM_HINT_T0);
        *xq += 64;
        if (--*xr == 0) { *xq += a->xjump; *xr = a->xlr; }
    }
    *xn -= XPF_LINES;
}

__attribute__((target("avx512f"))) static void epilogue_slow(const targs *a, float *yp, __mmask16 keep) {
    kl_act_apply_f32(a->act, yp, BLK, NULL);
    __m512 v = _mm512_maskz_loadu_ps(keep, yp);
    _mm512_storeu_ps(yp, v);
}

/* Epilogue of a tile: the last chunk adds bias and residual, applies the
 * activation and zeroes the padding lanes; earlier chunks store the partial
 * sums. yp / rp: output and residual address of each position. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_store(const targs *a, __m512 acc[FBMAX][NTMAX], const int FB, const int NT, float *const *yp,
           const float *const *rp) {
    if (!a->last) {
        #pragma GCC unroll 8
        for (int f = 0; f < FB; f++)
            #pragma GCC unroll 8
            for (int j = 0; j < NT; j++) _mm512_storeu_ps(yp[j] + f * a->ys_ob, acc[f][j]);
        return;
    }
    #pragma GCC unroll 8
    for (int f = 0; f < FB; f++) {
        int64_t lanes = KL_MIN(BLK, a->mleft - f * BLK);
        __mmask16 keep = (__mmask16)((1u << lanes) - 1u);
        __m512 bv = a->bias ? _mm512_maskz_loadu_ps(keep, a->bias + f * BLK) : _mm512_setzero_ps();
        #pragma GCC unroll 8
        for (int j = 0; j < NT; j++) {
            float *y = yp[j] + f * a->ys_ob;
            __m512 v = _mm512_add_ps(acc[f][j], bv);
            if (a->res) v = _mm512_add_ps(v, _mm512_loadu_ps(rp[j] + f * a->ys_ob));
            switch (a->act.kind) {
            case KL_ACT_NONE: break;
            case KL_ACT_RELU: v = _mm512_max_ps(_mm512_setzero_ps(), v); break;
            case KL_ACT_CLIP:
                v = _mm512_min_ps(_mm512_set1_ps(a->act.b), _mm512_max_ps(_mm512_set1_ps(a->act.a), v));
                break;
            case KL_ACT_LEAKY_RELU:
                v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v,
                                       _mm512_set1_ps(a->act.a));
                break;
            case KL_ACT_HARDSWISH: { /* as the elementwise kernel: x * relu6(x + 3) / 6 */
                __m512 h = _mm512_max_ps(_mm512_setzero_ps(),
                                         _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_add_ps(v, _mm512_set1_ps(3.0f))));
                v = _mm512_div_ps(_mm512_mul_ps(v, h), _mm512_set1_ps(6.0f));
                break;
            }
            default: /* sigmoid, tanh, gelu: the elementwise kernel on the 16 lanes */ _mm512_storeu_ps(y, v); epilogue_slow(a, y, keep); continue;
            }
            if (a->stream) _mm512_stream_ps(y, _mm512_maskz_mov_ps(keep, v));
            else _mm512_storeu_ps(y, _mm512_maskz_mov_ps(keep, v));
        }
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
tile_load(const targs *a, __m512 acc[FBMAX][NTMAX], const int FB, const int NT, float *const *yp) {
    #pragma GCC unroll 8
    for (int f = 0; f < FB; f++)
        #pragma GCC unroll 8
        for (int j = 0; j < NT; j++)
            acc[f][j] = a->first ? _mm512_setzero_ps() : _mm512_loadu_ps(yp[j] + f * a->ys_ob);
}

/* Contiguous tile: FB blocks x NT consecutive positions of one row whose
 * valid taps are the same. PS: position step in floats (0: runtime
 * a->xs_p); CS1: channel step is 1 (blocked input). */
__attribute__((target("avx512f"), always_inline)) static inline void
tile(const targs *a, const int FB, const int NT, const int64_t PS, const int CS1) {
    __m512 acc[FBMAX][NTMAX];
    float *yp[NTMAX];
    const float *rp[NTMAX];
    const int64_t ps = PS ? PS : a->xs_p, cs = CS1 ? 1 : a->xs_c;
    const char *pf = a->pf, *xq = a->xq;
    int64_t pfl = a->pf ? a->pf_n : 0, obb = a->ws_ob * (int64_t)sizeof(float);
    int64_t xn = a->xq ? a->xn : 0, xr = a->xr;
    #pragma GCC unroll 8
    for (int j = 0; j < NT; j++) {
        yp[j] = a->y + j * BLK;
        rp[j] = a->res ? a->res + j * BLK : NULL;
    }
    tile_load(a, acc, FB, NT, yp);
    for (int64_t cb = 0; cb < a->ncb; cb++) {
        int64_t nic = KL_MIN(BLK, a->cvalid - cb * BLK);
        const float *xc = a->x + cb * a->xs_cb, *wc = a->w + cb * a->ws_cb;
        for (int64_t kh = 0; kh < a->nkh; kh++) {
            const float *xk = xc + kh * a->xs_kh, *wk = wc + kh * a->ws_kh;
            for (int64_t kw = 0; kw < a->nkw; kw++) {
                const float *xp = xk + kw * a->xs_kw, *wp = wk + kw * a->ws_kw;
                pf_step(&pf, &pfl, FB, obb);
                xpf_step(a, &xq, &xn, &xr);
                for (int64_t ic = 0; ic < nic; ic++) {
                    __m512 wv[FBMAX];
                    #pragma GCC unroll 8
                    for (int f = 0; f < FB; f++) wv[f] = _mm512_loadu_ps(wp + f * a->ws_ob + ic * BLK);
                    #pragma GCC unroll 8
                    for (int j = 0; j < NT; j++) {
                        __m512 b = _mm512_set1_ps(xp[ic * cs + j * ps]);
                        #pragma GCC unroll 8
                        for (int f = 0; f < FB; f++) acc[f][j] = _mm512_fmadd_ps(wv[f], b, acc[f][j]);
                    }
                }
            }
        }
    }
    tile_store(a, acc, FB, NT, yp, rp);
}

/* Gather tile: FB blocks x NT arbitrary positions (borders, short rows,
 * small images) sharing their valid taps, each tap's input address per
 * position from a table. Same FMA order as the contiguous tile (channel
 * block, tap, channel). CS1: channel step 1 (blocked input), else a->xs_c
 * (plain input). */
typedef struct {
    const float *const *tab;  /* [ntap][NT] input address at the chunk's first channel */
    const int64_t *tw;        /* [ntap] weight offset of the tap */
    int ntap;
    float *yp[NTMAX];
    const float *rp[NTMAX];
} gargs;

__attribute__((target("avx512f"), always_inline)) static inline void
gtile(const targs *a, const gargs *g, const int FB, const int NT, const int CS1) {
    __m512 acc[FBMAX][NTMAX];
    const int64_t cs = CS1 ? 1 : a->xs_c;
    const char *pf = a->pf;
    int64_t pfl = a->pf ? a->pf_n : 0, obb = a->ws_ob * (int64_t)sizeof(float);
    tile_load(a, acc, FB, NT, g->yp);
    for (int64_t cb = 0; cb < a->ncb; cb++) {
        int64_t nic = KL_MIN(BLK, a->cvalid - cb * BLK), xo = cb * a->xs_cb;
        const float *wc = a->w + cb * a->ws_cb;
        for (int u = 0; u < g->ntap; u++) {
            const float *px[NTMAX];
            #pragma GCC unroll 8
            for (int j = 0; j < NT; j++) px[j] = g->tab[u * NT + j] + xo;
            const float *wp = wc + g->tw[u];
            pf_step(&pf, &pfl, FB, obb);
            for (int64_t ic = 0; ic < nic; ic++) {
                __m512 wv[FBMAX];
                #pragma GCC unroll 8
                for (int f = 0; f < FB; f++) wv[f] = _mm512_loadu_ps(wp + f * a->ws_ob + ic * BLK);
                #pragma GCC unroll 8
                for (int j = 0; j < NT; j++) {
                    __m512 b = _mm512_set1_ps(px[j][ic * cs]);
                    #pragma GCC unroll 8
                    for (int f = 0; f < FB; f++) acc[f][j] = _mm512_fmadd_ps(wv[f], b, acc[f][j]);
                }
            }
        }
    }
    tile_store(a, acc, FB, NT, g->yp, g->rp);
}

typedef void (*tile_fn)(const targs *a);

/* Variants: 0 blocked stride 1, 1 blocked stride 2, 2 plain stride 2,
 * 3 any (runtime steps). */
#define NVAR 4
typedef void (*gtile_fn)(const targs *a, const gargs *g);
#define TILE_VARIANT(FB, NT)                                                                               \
    __attribute__((target("avx512f"))) static void g_##FB##_##NT(const targs *a, const gargs *g) { gtile(a, g, FB, NT, 1); } \
    __attribute__((target("avx512f"))) static void h_##FB##_##NT(const targs *a, const gargs *g) { gtile(a, g, FB, NT, 0); } \
    __attribute__((target("avx512f"))) static void t0_##FB##_##NT(const targs *a) { tile(a, FB, NT, 16, 1); } \
    __attribute__((target("avx512f"))) static void t1_##FB##_##NT(const targs *a) { tile(a, FB, NT, 32, 1); } \
    __attribute__((target("avx512f"))) static void t2_##FB##_##NT(const targs *a) { tile(a, FB, NT, 2, 0); }  \
    __attribute__((target("avx512f"))) static void t3_##FB##_##NT(const targs *a) { tile(a, FB, NT, 0, 0); }
#define TILE_ROW(FB)                                                                                      \
    TILE_VARIANT(FB, 1) TILE_VARIANT(FB, 2) TILE_VARIANT(FB, 3) TILE_VARIANT(FB, 4) TILE_VARIANT(FB, 5) \
    TILE_VARIANT(FB, 6)
TILE_ROW(1)
TILE_ROW(2)
TILE_ROW(3)
TILE_ROW(4)
TILE_VARIANT(1, 7)
TILE_VARIANT(1, 8)
TILE_VARIANT(2, 7)
TILE_VARIANT(2, 8)
TILE_VARIANT(3, 7)
TILE_VARIANT(3, 8)

#define TV(V, FB)                                                                                                  \
    {t##V##_##FB##_1, t##V##_##FB##_2, t##V##_##FB##_3, t##V##_##FB##_4, t##V##_##FB##_5, t##V##_##FB##_6, \
     t##V##_##FB##_7, t##V##_##FB##_8}
#define g_4_7 NULL
#define g_4_8 NULL
#define h_4_7 NULL
#define h_4_8 NULL
#define t0_4_7 NULL
#define t0_4_8 NULL
#define t1_4_7 NULL
#define t1_4_8 NULL
#define t2_4_7 NULL
#define t2_4_8 NULL
#define t3_4_7 NULL
#define t3_4_8 NULL
static const tile_fn tiles[NVAR][FBMAX][NTMAX] = {
    {TV(0, 1), TV(0, 2), TV(0, 3), TV(0, 4)},
    {TV(1, 1), TV(1, 2), TV(1, 3), TV(1, 4)},
    {TV(2, 1), TV(2, 2), TV(2, 3), TV(2, 4)},
    {TV(3, 1), TV(3, 2), TV(3, 3), TV(3, 4)},
};
#define GV(G, FB) {G##_##FB##_1, G##_##FB##_2, G##_##FB##_3, G##_##FB##_4, G##_##FB##_5, G##_##FB##_6, G##_##FB##_7, G##_##FB##_8}
/* [plain input][FB - 1][NT - 1] */
static const gtile_fn gtiles[2][FBMAX][NTMAX] = {{GV(g, 1), GV(g, 2), GV(g, 3), GV(g, 4)},
                                                 {GV(h, 1), GV(h, 2), GV(h, 3), GV(h, 4)}};

/* ==================================================================
 * General k x k kernel: work items and rows
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    int plain;
    const float *x, *bias;
    float *y;
    int64_t CB, MB, ngroups, cchunk;
    int stream;
    int var;
    /* fused max pooling (kl_nchwc_conv_maxpool_f32): conv rows go to a ring
     * of ring_k rows per chunk ([block][ring_k][OW][16]), the pool reads them */
    const kl_pooling_params *q;
    int64_t ring_k;
    size_t ring_floats;
    float *rings;
} gctx;

/* Valid tap range [t0, t1) of output coordinate o: o * s - pad + t * d in [0, n). */
static void tap_range(int64_t o, int64_t s, int64_t pad, int64_t d, int64_t k, int64_t n, int64_t *t0, int64_t *t1) {
    int64_t b = o * s - pad, a = 0, e = k;
    while (a < k && b + a * d < 0) a++;
    while (e > a && b + (e - 1) * d >= n) e--;
    *t0 = a;
    *t1 = e;
}

/* First output-channel block and block count of group grp. */
static void group_blocks(const gctx *g, int64_t grp, int64_t *ob0, int64_t *fb) {
    /* groups of balanced sizes: MB = 6 -> 3 + 3 (24 accumulators each), not 4 + 2 */
    int64_t fbase = g->MB / g->ngroups, fextra = g->MB % g->ngroups;
    *fb = fbase + (grp < fextra);
    *ob0 = grp * fbase + KL_MIN(grp, fextra);
}

/* Output rows [oy0, oy1) of image n for channel-block group grp; pf_next:
 * the caller runs the next group (grp + 1, or group 0 of the next image)
 * right after, so its first chunk's weights are prefetched during the last. */
static void general_rows(const gctx *g, int64_t n, int64_t grp, int64_t oy0, int64_t oy1, int pf_next, float *ring) {
    const kl_conv_params *p = g->p;
    int64_t fb, ob0;
    group_blocks(g, grp, &ob0, &fb);
    int64_t H = p->in[0], W = p->in[1], KH = p->k[0], KW = p->k[1], OH = p->out[0], OW = p->out[1];
    int64_t sh = p->stride[0], sw = p->stride[1], dh = p->dilation[0], dw = p->dilation[1];
    int64_t ph = p->pad_begin[0], pw = p->pad_begin[1];
    targs a;
    memset(&a, 0, sizeof a);
    if (g->plain) {
        a.xs_cb = BLK * H * W; a.xs_c = H * W; a.xs_kh = dh * W; a.xs_kw = dw; a.xs_p = sw;
    } else {
        a.xs_cb = H * W * BLK; a.xs_c = 1; a.xs_kh = dh * W * BLK; a.xs_kw = dw * BLK; a.xs_p = sw * BLK;
    }
    int64_t TI = tap_ic(p);
    a.ws_kw = TI * BLK;
    a.ws_cb = KH * KW * a.ws_kw;
    a.ws_ob = g->CB * a.ws_cb;
    a.ws_kh = KW * a.ws_kw;
    a.ys_ob = (ring ? g->ring_k : OH) * OW * BLK;
    a.mleft = p->M - ob0 * BLK;
    a.act = p->act;
    a.bias = g->bias ? g->bias + ob0 * BLK : NULL;
    a.stream = ring ? 0 : g->stream;
    const tile_fn *tf = tiles[g->var][fb - 1];
    const gtile_fn *gf = gtiles[g->plain][fb - 1];
    int ntm = nt_max[fb], gather = KH * KW <= GMAX_TAPS;
    const float *tab[GMAX_TAPS * NTMAX];
    int64_t tw[GMAX_TAPS];
    gargs ga;
    memset(&ga, 0, sizeof ga);
    ga.tab = tab;
    ga.tw = tw;
    int64_t xpos = g->plain ? 1 : BLK; /* floats per input position */
    float *yitem = ring ? ring : g->y + (n * g->MB + ob0) * OH * OW * BLK;
    int64_t rk = ring ? g->ring_k : 0;
#define YAT(oy, ox) (yitem + ((rk ? (oy) % rk : (oy)) * OW + (ox)) * BLK)
    const float *ritem = p->residual ? p->residual + (n * g->MB + ob0) * OH * OW * BLK : NULL;
    for (int64_t cb0 = 0; cb0 < g->CB; cb0 += g->cchunk) {
        a.ncb = KL_MIN(g->cchunk, g->CB - cb0);
        a.cvalid = p->C - cb0 * BLK;
        a.first = cb0 == 0;
        a.last = cb0 + a.ncb >= g->CB;
        const float *xn = g->plain ? g->x + (n * p->C + cb0 * BLK) * H * W : g->x + (n * g->CB + cb0) * H * W * BLK;
        const float *wn = p->packed_w + (ob0 * g->CB + cb0) * a.ws_cb;
        /* the next chunk's weights, prefetched over this chunk's tiles */
        int64_t pf_total = 0, pfo = 0;
        const char *pf_base = NULL;
        if (cb0 + a.ncb < g->CB) {
            pf_base = (const char *)(wn + a.ncb * a.ws_cb);
            pf_total = KL_MIN(g->cchunk, g->CB - cb0 - a.ncb) * a.ws_cb * (int64_t)sizeof(float) / 64;
        } else if (pf_next) {
            int64_t ob1, fb1;
            group_blocks(g, (grp + 1) % g->ngroups, &ob1, &fb1);
            pf_base = (const char *)(p->packed_w + ob1 * g->CB * a.ws_cb);
            pf_total = KL_MIN(g->cchunk, g->CB) * a.ws_cb * (int64_t)sizeof(float) / 64;
        }
        /* Rectangles of output positions sharing their valid taps: runs of
         * rows with one kh range times runs of columns with one kw range.
         * A rectangle runs as contiguous tiles along its rows, or, when its
         * rows are short (borders, small images), as gather tiles over all
         * its positions (no tap of a gather tile is padding). */
        for (int64_t ra = oy0, rb; ra < oy1; ra = rb) {
            int64_t kh0, kh1, t0, t1;
            tap_range(ra, sh, ph, dh, KH, H, &kh0, &kh1);
            for (rb = ra + 1; rb < oy1; rb++) {
                tap_range(rb, sh, ph, dh, KH, H, &t0, &t1);
                if (t0 != kh0 || t1 != kh1) break;
            }
            for (int64_t ca = 0, cbn; ca < OW; ca = cbn) {
                int64_t kw0, kw1;
                tap_range(ca, sw, pw, dw, KW, W, &kw0, &kw1);
                for (cbn = ca + 1; cbn < OW; cbn++) {
                    tap_range(cbn, sw, pw, dw, KW, W, &t0, &t1);
                    if (t0 != kw0 || t1 != kw1) break;
                }
                int64_t L = cbn - ca, R = rb - ra;
                if (kh1 <= kh0 || kw1 <= kw0 || L >= ntm || R == 1 || !gather) {
                    /* contiguous tiles along each row, balanced sizes */
                    a.nkh = KL_MAX(0, kh1 - kh0);
                    a.nkw = KL_MAX(0, kw1 - kw0);
                    a.w = wn + (a.nkh > 0 ? kh0 : 0) * a.ws_kh + (a.nkw > 0 ? kw0 : 0) * a.ws_kw;
                    int64_t nti = (L + ntm - 1) / ntm;
                    for (int64_t oy = ra; oy < rb; oy++) {
                        int64_t iy = a.nkh > 0 ? oy * sh - ph + kh0 * dh : 0;
                        /* the input rows the next output row adds (approximately: the last sh of its window) */
                        int64_t xtot = 0, xc = 0, xlr = 1, xstride = 0;
                        const char *xbase = NULL;
                        if (oy + 1 < oy1) {
                            int64_t r1 = KL_MIN(H, (oy + 1) * sh - ph + (KH - 1) * dh + 1), r0 = KL_MAX(0, r1 - sh);
                            int64_t lr = (r1 - r0) * W * xpos * (int64_t)sizeof(float) / 64;
                            if (r1 > r0 && lr > 0) {
                                xlr = lr;
                                int64_t nreg = g->plain ? KL_MIN(p->C - cb0 * BLK, a.ncb * BLK) : a.ncb;
                                xbase = (const char *)(xn + r0 * W * xpos);
                                xstride = (g->plain ? a.xs_c : a.xs_cb) * (int64_t)sizeof(float);
                                xtot = nreg * xlr;
                            }
                        }
                        a.xlr = xlr;
                        a.xjump = xstride - xlr * 64;
                        for (int64_t t = 0, ox = ca; t < nti; t++) {
                            int64_t nt = L / nti + (t < L % nti);
                            int64_t ix = a.nkw > 0 ? ox * sw - pw + kw0 * dw : 0;
                            a.x = xn + (iy * W + ix) * xpos;
                            a.y = YAT(oy, ox);
                            a.res = ritem ? ritem + (oy * OW + ox) * BLK : NULL;
                            a.pf = pf_base ? pf_base + pfo * 64 : NULL;
                            a.pf_n = KL_MIN(pf_total - pfo, PF_LINES * a.ncb * a.nkh * a.nkw);
                            pfo += a.pf_n;
                            a.xq = xc < xtot ? xbase + xc / xlr * xstride + xc % xlr * 64 : NULL; /* xlr >= 1 */
                            a.xr = xlr - xc % xlr;
                            a.xn = KL_MIN(xtot - xc, XPF_LINES * a.ncb * a.nkh * a.nkw);
                            xc += a.xn;
                            tf[nt - 1](&a);
                            ox += nt;
                        }
                    }
                    continue;
                }
                /* gather tiles over the R x L positions, balanced sizes */
                int64_t P = R * L, nti = (P + ntm - 1) / ntm, ntap = (kh1 - kh0) * (kw1 - kw0);
                ga.ntap = (int)ntap;
                a.w = wn;
                a.res = ritem;
                for (int64_t kh = kh0, u = 0; kh < kh1; kh++)
                    for (int64_t kw = kw0; kw < kw1; kw++) tw[u++] = (kh * KW + kw) * a.ws_kw;
                for (int64_t t = 0, i = 0; t < nti; t++) {
                    int64_t nt = P / nti + (t < P % nti);
                    for (int64_t j = 0; j < nt; j++, i++) {
                        int64_t oy = ra + i / L, ox = ca + i % L;
                        ga.yp[j] = YAT(oy, ox);
                        ga.rp[j] = ritem ? ritem + (oy * OW + ox) * BLK : NULL;
                        int64_t u = 0;
                        for (int64_t kh = kh0; kh < kh1; kh++)
                            for (int64_t kw = kw0; kw < kw1; kw++, u++) {
                                int64_t iy = oy * sh - ph + kh * dh, ix = ox * sw - pw + kw * dw;
                                tab[u * nt + j] = xn + (iy * W + ix) * xpos;
                            }
                    }
                    a.xq = NULL;
                    a.pf = pf_base ? pf_base + pfo * 64 : NULL;
                    a.pf_n = KL_MIN(pf_total - pfo, PF_LINES * a.ncb * ntap);
                    pfo += a.pf_n;
                    gf[nt - 1](&a, &ga);
                }
            }
        }
    }
}

#undef YAT

static void general_range(void *ctx, size_t b, size_t e, int chunk) {
    /* Work items are output rows (n, grp, oy); a chunk's consecutive rows of
     * one (n, grp) run together so the weights of a channel chunk are
     * fetched once for all of them. Every output element gets the same
     * sequence of FMAs whatever the rows around it (input chunks, channel
     * blocks, taps and channels in ascending order in every tile kind), so
     * the bits do not depend on how the rows are split over threads. */
    const gctx *g = (const gctx *)ctx;
    int64_t OH = g->p->out[0];
    for (int64_t i = (int64_t)b; i < (int64_t)e;) {
        int64_t ng = i / OH, oy0 = i % OH, oy1 = KL_MIN(OH, oy0 + ((int64_t)e - i));
        general_rows(g, ng / g->ngroups, ng % g->ngroups, oy0, oy1, i + (oy1 - oy0) < (int64_t)e, NULL);
        i += oy1 - oy0;
    }
    if (g->stream) _mm_sfence(); /* streamed stores visible before the pool's join */
}

static int general_conv(const kl_conv_params *p, int plain, const float *x, const float *bias, float *y,
                        kl_pool *pool) {
    gctx g;
    memset(&g, 0, sizeof g);
    g.p = p; g.plain = plain; g.x = x; g.bias = bias; g.y = y;
    g.CB = (p->C + BLK - 1) / BLK;
    g.MB = (p->M + BLK - 1) / BLK;
    g.ngroups = (g.MB + FBMAX - 1) / FBMAX;
    int64_t OH = p->out[0], KH = p->k[0], KW = p->k[1];
    g.cchunk = KL_MAX(1, L2_BUDGET / (FBMAX * KH * KW * BLK * BLK * (int64_t)sizeof(float)));
    int64_t sw = p->stride[1];
    /* outputs of tens of MB (large batches) are not read back from the
     * caches anyway: streaming stores save the read-for-ownership */
    size_t ybytes = (size_t)(p->N * g.MB * OH * p->out[1] * BLK) * sizeof(float);
    g.stream = ybytes >= kl__nchwc_stream_bytes && ((uintptr_t)y & 63) == 0;
    if (!plain && sw == 1) g.var = 0;
    else if (!plain && sw == 2) g.var = 1;
    else if (plain && sw == 2) g.var = 2;
    else g.var = 3;
    kl_pool_parallel_for(pool, (size_t)(p->N * g.ngroups * OH), 1, general_range, &g);
    return KL_OK;
}

/* ==================================================================
 * Conv + max pooling fused
 * ================================================================== */

/* Work items: pooled rows (image, group, pooled row). A chunk's run of
 * pooled rows of one (image, group) computes the conv rows they need once,
 * in order, into its ring (a row shared by two chunks is computed by both,
 * with the same bits), and pools each pooled row as soon as its last conv
 * row is there: the conv output never goes to memory (ResNet's stem: 3.2 MB
 * per image written and read back by the pool). Max over the window in
 * (row, column) order from -inf, as kl_nchwc_maxpool_f32. */
__attribute__((target("avx512f"))) static void pool_row(const gctx *g, const float *ring, int64_t n, int64_t ob0,
                                                         int64_t fb, int64_t py) {
    const kl_pooling_params *q = g->q;
    int64_t OW = g->p->out[1], OH = g->p->out[0], PH = q->out[0], PW = q->out[1];
    int64_t ra = KL_MAX(0, py * q->stride[0] - q->pad_begin[0]), rb = KL_MIN(OH, py * q->stride[0] - q->pad_begin[0] + q->k[0]);
    for (int64_t f = 0; f < fb; f++) {
        const float *rf = ring + f * g->ring_k * OW * BLK;
        float *y = g->y + (((n * g->MB + ob0 + f) * PH + py) * PW) * BLK;
        for (int64_t px = 0; px < PW; px++) {
            int64_t bx = px * q->stride[1] - q->pad_begin[1];
            int64_t ca = KL_MAX(0, bx), cb = KL_MIN(OW, bx + q->k[1]);
            __m512 acc = _mm512_set1_ps(-INFINITY);
            for (int64_t r = ra; r < rb; r++) {
                const float *row = rf + (r % g->ring_k) * OW * BLK;
                for (int64_t cx = ca; cx < cb; cx++) acc = kl__max_nan512(acc, _mm512_loadu_ps(row + cx * BLK));
            }
            _mm512_storeu_ps(y + px * BLK, acc);
        }
    }
}

static void pool_rows(const gctx *g, int64_t n, int64_t grp, int64_t py0, int64_t py1, float *ring) {
    const kl_pooling_params *q = g->q;
    int64_t OH = g->p->out[0], fb, ob0;
    group_blocks(g, grp, &ob0, &fb);
    int64_t next = KL_MAX(0, py0 * q->stride[0] - q->pad_begin[0]);
    for (int64_t py = py0; py < py1; py++) {
        int64_t ra = KL_MAX(0, py * q->stride[0] - q->pad_begin[0]);
        int64_t rb = KL_MIN(OH, py * q->stride[0] - q->pad_begin[0] + q->k[0]);
        if (rb > next) { /* as many rows as the ring holds above the first one still needed */
            int64_t re = KL_MIN(OH, ra + g->ring_k);
            if (py + 1 == py1) re = rb; /* the chunk's last pooled row: no more */
            general_rows(g, n, grp, next, re, 0, ring);
            next = re;
        }
        pool_row(g, ring, n, ob0, fb, py);
    }
}

static void pool_range(void *ctx, size_t b, size_t e, int chunk) {
    const gctx *g = (const gctx *)ctx;
    int64_t PH = g->q->out[0];
    float *ring = g->rings + (size_t)chunk * g->ring_floats;
    for (int64_t i = (int64_t)b; i < (int64_t)e;) {
        int64_t ng = i / PH, py0 = i % PH, py1 = KL_MIN(PH, py0 + ((int64_t)e - i));
        pool_rows(g, ng / g->ngroups, ng % g->ngroups, py0, py1, ring);
        i += py1 - py0;
    }
}

/* Ring slots the workspace holds (more chunks allocate their own; a
 * variable so the unit test can lower it). */
int kl__nchwc_pool_slots = 4;

int kl_nchwc_conv_maxpool_ok(const kl_conv_params *p, const kl_pooling_params *q) {
    if (!p || !q || !kl_nchwc_conv_packed_floats(p) || !is_dense(p) || kl__nchwc_pw_ok(p) || kl__nchwc_wino_ok(p)) return 0;
    if (p->residual || q->nsp != 2 || q->ceil_mode || q->in[0] != p->out[0] || q->in[1] != p->out[1]) return 0;
    for (int i = 0; i < 2; i++)
        if (q->dilation[i] != 1 || q->stride[i] < 1 || q->stride[i] > q->k[i] || q->k[i] > 8 || q->pad_begin[i] < 0 ||
            q->pad_begin[i] >= q->k[i] || q->pad_end[i] < 0 || q->pad_end[i] >= q->k[i] || q->out[i] <= 0)
            return 0;
    return 1;
}

/* Conv rows a ring holds: the pool window and RING_EXTRA more, so the
 * direct kernel runs several rows per call (tiles over more rows at the
 * borders, input prefetch of the next row). */
#define RING_EXTRA 4
static int64_t ring_rows(const kl_pooling_params *q) { return q->k[0] + RING_EXTRA; }
static size_t ring_floats(const kl_conv_params *p, const kl_pooling_params *q) {
    return (size_t)(FBMAX * BLK * ring_rows(q) * p->out[1]);
}

size_t kl_nchwc_conv_maxpool_workspace_bytes(const kl_conv_params *p, const kl_pooling_params *q) {
    return kl_nchwc_conv_maxpool_ok(p, q) ? (size_t)kl__nchwc_pool_slots * ring_floats(p, q) * sizeof(float) + 64 : 0;
}

int kl_nchwc_conv_maxpool_f32(const kl_conv_params *p, int plain_input, const kl_pooling_params *q, const float *x,
                              const float *bias, float *y, void *ws, kl_pool *pool, kl_err *e) {
    if (!p || !q || !x || !y) return kl_err_set(e, KL_EINVAL, "nchwc conv+maxpool: NULL argument");
    if (!kl_nchwc_conv_maxpool_ok(p, q)) return kl_err_set(e, KL_EUNSUPPORTED, "nchwc conv+maxpool: not supported for this conv and pool");
    if (!p->packed_w) return kl_err_set(e, KL_EINVAL, "nchwc conv+maxpool: weights not packed (p->packed_w NULL)");
    if (p->N <= 0) return KL_OK;
    gctx g;
    memset(&g, 0, sizeof g);
    g.p = p; g.plain = plain_input; g.x = x; g.bias = bias; g.y = y; g.q = q;
    g.CB = (p->C + BLK - 1) / BLK;
    g.MB = (p->M + BLK - 1) / BLK;
    g.ngroups = (g.MB + FBMAX - 1) / FBMAX;
    g.cchunk = KL_MAX(1, L2_BUDGET / (FBMAX * p->k[0] * p->k[1] * BLK * BLK * (int64_t)sizeof(float)));
    int64_t sw = p->stride[1];
    if (!plain_input && sw == 1) g.var = 0;
    else if (!plain_input && sw == 2) g.var = 1;
    else if (plain_input && sw == 2) g.var = 2;
    else g.var = 3;
    g.ring_k = ring_rows(q);
    g.ring_floats = ring_floats(p, q);
    size_t items = (size_t)(p->N * g.ngroups * q->out[0]);
    int nch = kl_pool_chunks(pool, items, 1);
    void *own = NULL;
    if (!ws || nch > kl__nchwc_pool_slots) {
        if (!(own = kl_mem_alloc_e((size_t)nch * g.ring_floats * sizeof(float) + 64, KL_TAG_WORKSPACE, e)))
            return e ? e->code : KL_ENOMEM;
        ws = own;
    }
    g.rings = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    kl_pool_parallel_for(pool, items, 1, pool_range, &g);
    kl_mem_free(own);
    return KL_OK;
}

/* ==================================================================
 * Dispatcher
 * ================================================================== */

/* Every kernel computes each output of image n by a fixed sequence that
 * does not depend on the other images (the work items and the blocking only
 * group outputs); only the choice of Winograd depends on the batch. */
int kl_nchwc_conv_batch_invariant(const kl_conv_params *p, int plain_input) {
    if (!p || !kl_nchwc_conv_packed_floats(p)) return 0;
    if (kl__nchwc_pw_ok(p) || !is_dense(p)) return 1;
    kl_conv_params one = *p;
    one.N = 1;
    return kl__nchwc_wino_use(p, plain_input) == kl__nchwc_wino_use(&one, plain_input);
}

/* 1 when the n floats at x are all finite: v - v is 0 for a finite v and
 * NaN for a NaN or an infinity, and a sum of them stays NaN. */
__attribute__((target("avx512f"))) static int all_finite(const float *x, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_add_ps(a0, _mm512_sub_ps(v0, v0));
        a1 = _mm512_add_ps(a1, _mm512_sub_ps(v1, v1));
    }
    for (; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps((__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1), x + i);
        a0 = _mm512_add_ps(a0, _mm512_sub_ps(v, v));
    }
    a0 = _mm512_add_ps(a0, a1);
    return _mm512_cmp_ps_mask(a0, a0, _CMP_UNORD_Q) == 0;
}

int kl_nchwc_conv_f32(const kl_conv_params *p, int plain_input, const float *x, const float *bias, float *y,
                      void *ws, kl_pool *pool, kl_err *e) {
    if (!p || !x || !y) return kl_err_set(e, KL_EINVAL, "nchwc conv: NULL argument");
    if (!kl_nchwc_conv_packed_floats(p))
        return kl_err_set(e, KL_EUNSUPPORTED, "nchwc conv: not supported for this conv (nsp %d, group %lld)", p->nsp,
                          (long long)p->group);
    if (!p->packed_w) return kl_err_set(e, KL_EINVAL, "nchwc conv: weights not packed (p->packed_w NULL)");
    if (p->N <= 0 || p->out[0] <= 0 || p->out[1] <= 0) return KL_OK;
    /* 1x1, depthwise (group == C == M), Winograd 3x3 stride 1, else the
     * direct kernel */
    if (kl__nchwc_pw_ok(p)) { kl__nchwc_pw_f32(p, plain_input, x, bias, y, pool); return KL_OK; }
    if (!is_dense(p)) { kl__nchwc_dw_f32(p, plain_input, x, bias, y, pool); return KL_OK; }
    /* Winograd mixes the 6x6 inputs of a tile: a NaN or an infinity would
     * reach all 16 outputs of the tile (inf - inf), so an input with one
     * runs the direct kernel, whose outputs see their own window only (as
     * ONNX defines the conv) */
    if (kl__nchwc_wino_use(p, plain_input) &&
        all_finite(x, (size_t)(p->N * ((p->C + BLK - 1) / BLK) * p->in[0] * p->in[1] * BLK)))
        return kl__nchwc_wino_f32(p, x, bias, p->packed_w + direct_floats(p), y, ws, pool, e);
    return general_conv(p, plain_input, x, bias, y, pool);
}
