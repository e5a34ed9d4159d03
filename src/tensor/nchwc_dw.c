/* NCHWc depthwise 2-D convolution, AVX-512F: group == C == M on
 * channel-blocked tensors x (N, CB, H, W, 16) -> y (N, CB, OH, OW, 16), 16
 * channels per zmm, any kernel, stride, pads and dilation.
 *
 * Direct, no padded copies: each output row takes only the kernel rows that
 * fall inside the input; the columns whose taps all lie inside run in
 * register-blocked tiles of up to 8 outputs (3x3 stride 1 and 2 load each
 * input vector of a row once and reuse it across the taps), the few border
 * columns run one output at a time with the taps restricted to the input.
 * Every output sums bias, then the taps in row-major order, whatever its
 * path. Epilogue: + residual, act (Relu/Clip in registers, others through
 * kl__act_apply_range), padding lanes forced to 0.
 *
 * Work items (n, channel block, row range) come from the shape only:
 * bit-identical results at any thread count. Plain NCHW input (plain_input)
 * takes a slow generic path. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <string.h>

/* ==================================================================
 * Shape checks and packing
 * ================================================================== */

int kl__nchwc_dw_ok(const kl_conv_params *p) {
    return p->nsp == 2 && p->group == p->C && p->C == p->M && p->C >= 1 && p->k[0] >= 1 && p->k[1] >= 1;
}

size_t kl__nchwc_dw_packed_floats(const kl_conv_params *p) {
    int64_t CB = (p->C + KL_NCHWC - 1) / KL_NCHWC;
    return (size_t)(CB * p->k[0] * p->k[1] * KL_NCHWC);
}

/* w (C, 1, KH, KW) -> [CB][KH*KW][16], zero lanes for channels >= C. */
void kl__nchwc_dw_pack(const kl_conv_params *p, const float *w, float *dst) {
    int64_t CB = (p->C + KL_NCHWC - 1) / KL_NCHWC, K = p->k[0] * p->k[1];
    for (int64_t cb = 0; cb < CB; cb++)
        for (int64_t k = 0; k < K; k++)
            for (int l = 0; l < KL_NCHWC; l++) {
                int64_t c = cb * KL_NCHWC + l;
                dst[(cb * K + k) * KL_NCHWC + l] = c < p->C ? w[c * K + k] : 0.0f;
            }
}

/* ==================================================================
 * Kernels
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    const float *x, *bias;
    float *y;
    int64_t CB, H, W, OH, OW, KH, KW, SY, SX, DY, DX, PY, PX;
    int64_t ox_lo, ox_hi;  /* columns whose taps all lie inside the input */
    int64_t rows;          /* output rows per work item */
    int plain;             /* x is plain NCHW: dw_plain_row */
    int64_t nrc;           /* row chunks per plane */
} dw_ctx;

/* One output row's context: input plane, weights of the valid kernel rows. */
typedef struct {
    const float *x;    /* input row of kernel row ky0, column 0 */
    const float *w;    /* packed weights of kernel row ky0 */
    int64_t nky;       /* valid kernel rows */
    int64_t xrs;       /* input row stride * DY (floats) between kernel rows */
    float *y;          /* output row, column 0 */
    const float *res;  /* residual row or NULL */
    __m512 bias;       /* (zmm; only in avx512f code) */
    __mmask16 mask;    /* valid lanes */
} dw_row;

__attribute__((target("avx512f"), always_inline)) static inline __m512 dw_out(const dw_row *r, const kl_act act,
                                                                               __m512 v, int64_t ox) {
    if (r->res) v = _mm512_add_ps(v, _mm512_loadu_ps(r->res + ox * KL_NCHWC));
    if (act.kind == KL_ACT_RELU) v = _mm512_max_ps(_mm512_setzero_ps(), v);
    else if (act.kind == KL_ACT_CLIP) v = _mm512_min_ps(_mm512_set1_ps(act.b), _mm512_max_ps(_mm512_set1_ps(act.a), v));
    return _mm512_maskz_mov_ps(r->mask, v);
}

/* One output at column ox with the taps restricted to the input columns. */
__attribute__((target("avx512f"))) static void dw_edge(const dw_ctx *c, const dw_row *r, int64_t ox) {
    __m512 acc = r->bias;
    int64_t ix0 = ox * c->SX - c->PX;
    for (int64_t ky = 0; ky < r->nky; ky++) {
        const float *xr = r->x + ky * r->xrs;
        const float *wr = r->w + ky * c->KW * KL_NCHWC;
        for (int64_t kx = 0; kx < c->KW; kx++) {
            int64_t ix = ix0 + kx * c->DX;
            if (ix < 0 || ix >= c->W) continue;
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(xr + ix * KL_NCHWC), _mm512_loadu_ps(wr + kx * KL_NCHWC), acc);
        }
    }
    _mm512_storeu_ps(r->y + ox * KL_NCHWC, dw_out(r, c->p->act, acc, ox));
}

/* R interior outputs from column ox. MODE 1: 3 taps per row, stride S
 * (dilation 1), each input vector loaded once; MODE 0: any kernel row. */
__attribute__((target("avx512f"), always_inline)) static inline void dw_tile(const dw_ctx *c, const dw_row *r,
                                                                              int64_t ox, const int R, const int MODE,
                                                                              const int S) {
    __m512 acc[8];
#pragma GCC unroll 8
    for (int q = 0; q < R; q++) acc[q] = r->bias;
    for (int64_t ky = 0; ky < r->nky; ky++) {
        const float *xr = r->x + ky * r->xrs + (ox * c->SX - c->PX) * KL_NCHWC;
        const float *wr = r->w + ky * c->KW * KL_NCHWC;
        if (MODE == 1) {
            const __m512 w0 = _mm512_loadu_ps(wr), w1 = _mm512_loadu_ps(wr + 16), w2 = _mm512_loadu_ps(wr + 32);
            __m512 xv[2 * 8 + 1];
#pragma GCC unroll 17
            for (int j = 0; j < (R - 1) * S + 3; j++) xv[j] = _mm512_loadu_ps(xr + j * KL_NCHWC);
#pragma GCC unroll 8
            for (int q = 0; q < R; q++) {
                acc[q] = _mm512_fmadd_ps(xv[q * S], w0, acc[q]);
                acc[q] = _mm512_fmadd_ps(xv[q * S + 1], w1, acc[q]);
                acc[q] = _mm512_fmadd_ps(xv[q * S + 2], w2, acc[q]);
            }
        } else {
            const int64_t xs = c->SX * KL_NCHWC, xd = c->DX * KL_NCHWC;
            for (int64_t kx = 0; kx < c->KW; kx++) {
                const __m512 wv = _mm512_loadu_ps(wr + kx * KL_NCHWC);
                const float *xk = xr + kx * xd;
#pragma GCC unroll 8
                for (int q = 0; q < R; q++) acc[q] = _mm512_fmadd_ps(_mm512_loadu_ps(xk + q * xs), wv, acc[q]);
            }
        }
    }
    const kl_act act = c->p->act;
#pragma GCC unroll 8
    for (int q = 0; q < R; q++) _mm512_storeu_ps(r->y + (ox + q) * KL_NCHWC, dw_out(r, act, acc[q], ox + q));
}

/* Plain NCHW input (the first conv of a network; rare): one output row, the
 * 16 channels of each tap gathered by scalar loads. r->x is unused. */
__attribute__((target("avx512f"))) static void dw_plain_row(const dw_ctx *c, const dw_row *r, int64_t n, int64_t cb,
                                                             int64_t oy) {
    const kl_conv_params *p = c->p;
    int64_t IS = c->H * c->W, nl = KL_MIN(KL_NCHWC, p->C - cb * KL_NCHWC);
    const float *xp = c->x + (n * p->C + cb * KL_NCHWC) * IS;
    const float *wp = p->packed_w + cb * c->KH * c->KW * KL_NCHWC;
    float buf[KL_NCHWC] = {0};
    for (int64_t ox = 0; ox < c->OW; ox++) {
        __m512 acc = r->bias;
        for (int64_t ky = 0; ky < c->KH; ky++) {
            int64_t iy = oy * c->SY - c->PY + ky * c->DY;
            if (iy < 0 || iy >= c->H) continue;
            for (int64_t kx = 0; kx < c->KW; kx++) {
                int64_t ix = ox * c->SX - c->PX + kx * c->DX;
                if (ix < 0 || ix >= c->W) continue;
                for (int64_t l = 0; l < nl; l++) buf[l] = xp[l * IS + iy * c->W + ix];
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(buf), _mm512_loadu_ps(wp + (ky * c->KW + kx) * KL_NCHWC), acc);
            }
        }
        _mm512_storeu_ps(r->y + ox * KL_NCHWC, dw_out(r, p->act, acc, ox));
    }
}

typedef void (*dw_fn)(const dw_ctx *c, const dw_row *r, int64_t ox);
#define KL_DW_FN(NAME, R, MODE, S)                                                                                     \
    __attribute__((target("avx512f"), noinline)) static void NAME(const dw_ctx *c, const dw_row *r, int64_t ox) {     \
        dw_tile(c, r, ox, R, MODE, S);                                                                                 \
    }
KL_DW_FN(dwg_1, 1, 0, 1) KL_DW_FN(dwg_2, 2, 0, 1) KL_DW_FN(dwg_3, 3, 0, 1) KL_DW_FN(dwg_4, 4, 0, 1)
KL_DW_FN(dwg_5, 5, 0, 1) KL_DW_FN(dwg_6, 6, 0, 1) KL_DW_FN(dwg_7, 7, 0, 1) KL_DW_FN(dwg_8, 8, 0, 1)
KL_DW_FN(dw31_1, 1, 1, 1) KL_DW_FN(dw31_2, 2, 1, 1) KL_DW_FN(dw31_3, 3, 1, 1) KL_DW_FN(dw31_4, 4, 1, 1)
KL_DW_FN(dw31_5, 5, 1, 1) KL_DW_FN(dw31_6, 6, 1, 1) KL_DW_FN(dw31_7, 7, 1, 1) KL_DW_FN(dw31_8, 8, 1, 1)
KL_DW_FN(dw32_1, 1, 1, 2) KL_DW_FN(dw32_2, 2, 1, 2) KL_DW_FN(dw32_3, 3, 1, 2) KL_DW_FN(dw32_4, 4, 1, 2)
KL_DW_FN(dw32_5, 5, 1, 2) KL_DW_FN(dw32_6, 6, 1, 2) KL_DW_FN(dw32_7, 7, 1, 2) KL_DW_FN(dw32_8, 8, 1, 2)
#undef KL_DW_FN

static const dw_fn DW_FNS[3][9] = {
    {0, dwg_1, dwg_2, dwg_3, dwg_4, dwg_5, dwg_6, dwg_7, dwg_8},
    {0, dw31_1, dw31_2, dw31_3, dw31_4, dw31_5, dw31_6, dw31_7, dw31_8},
    {0, dw32_1, dw32_2, dw32_3, dw32_4, dw32_5, dw32_6, dw32_7, dw32_8},
};

/* ==================================================================
 * Work items: (n, channel block, row chunk)
 * ================================================================== */

__attribute__((target("avx512f"))) static void dw_items(void *ctx, size_t begin, size_t end, int chunk) {
    const dw_ctx *c = ctx;
    const kl_conv_params *p = c->p;
    int64_t IS = c->H * c->W, OS = c->OH * c->OW, K = c->KH * c->KW;
    int kind = 0;
    if (c->KW == 3 && c->DX == 1 && (c->SX == 1 || c->SX == 2)) kind = (int)c->SX;
    const dw_fn *fns = DW_FNS[kind];
    kl_act act = p->act;
    int other = act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP;
    for (size_t it = begin; it < end; it++) {
        int64_t rc = (int64_t)it % c->nrc, plane = (int64_t)it / c->nrc;
        int64_t cb = plane % c->CB;
        int64_t valid = KL_MIN(KL_NCHWC, p->C - cb * KL_NCHWC);
        dw_row r;
        r.mask = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1);
        r.bias = c->bias ? _mm512_maskz_loadu_ps(r.mask, c->bias + cb * KL_NCHWC) : _mm512_setzero_ps();
        r.xrs = c->DY * c->W * KL_NCHWC;
        const float *xp = c->plain ? c->x : c->x + plane * IS * KL_NCHWC;
        const float *wp = p->packed_w + cb * K * KL_NCHWC;
        int64_t oy0 = rc * c->rows, oy1 = KL_MIN(c->OH, oy0 + c->rows);
        for (int64_t oy = oy0; oy < oy1; oy++) {
            int64_t iy0 = oy * c->SY - c->PY;
            /* kernel rows ky with 0 <= iy0 + ky*DY < H */
            int64_t ky0 = iy0 >= 0 ? 0 : (-iy0 + c->DY - 1) / c->DY;
            int64_t ky1 = c->H - iy0 <= 0 ? 0 : (c->H - iy0 + c->DY - 1) / c->DY;
            if (ky1 > c->KH) ky1 = c->KH;
            if (ky0 > ky1) ky0 = ky1;
            r.nky = ky1 - ky0;
            r.x = r.nky && !c->plain ? xp + (iy0 + ky0 * c->DY) * c->W * KL_NCHWC : c->x;
            r.w = wp + ky0 * c->KW * KL_NCHWC;
            r.y = c->y + (plane * OS + oy * c->OW) * KL_NCHWC;
            r.res = p->residual ? p->residual + (plane * OS + oy * c->OW) * KL_NCHWC : NULL;
            int64_t ox = 0;
            if (c->plain) {
                dw_plain_row(c, &r, plane / c->CB, cb, oy);
                ox = c->OW;
            }
            for (; ox < c->ox_lo; ox++) dw_edge(c, &r, ox);
            for (; ox + 8 <= c->ox_hi; ox += 8) fns[8](c, &r, ox);
            if (ox < c->ox_hi && !c->plain) {
                fns[c->ox_hi - ox](c, &r, ox);
                ox = c->ox_hi;
            }
            for (; ox < c->OW; ox++) dw_edge(c, &r, ox);
            if (other) {
                kl__act_apply_range(act, r.y, c->OW * KL_NCHWC);
                if (valid < KL_NCHWC)
                    for (int64_t q = 0; q < c->OW; q++)
                        memset(r.y + q * KL_NCHWC + valid, 0, (size_t)(KL_NCHWC - valid) * sizeof(float));
            }
        }
    }
}

/* ==================================================================
 * Entry
 * ================================================================== */

void kl__nchwc_dw_f32(const kl_conv_params *p, int plain_input, const float *x, const float *bias, float *y,
                      kl_pool *pool) {
    dw_ctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.x = x;
    c.bias = bias;
    c.y = y;
    c.CB = (p->C + KL_NCHWC - 1) / KL_NCHWC;
    c.H = p->in[0];
    c.W = p->in[1];
    c.OH = p->out[0];
    c.OW = p->out[1];
    c.KH = p->k[0];
    c.KW = p->k[1];
    c.SY = KL_MAX(1, p->stride[0]);
    c.SX = KL_MAX(1, p->stride[1]);
    c.DY = KL_MAX(1, p->dilation[0]);
    c.DX = KL_MAX(1, p->dilation[1]);
    c.PY = p->pad_begin[0];
    c.PX = p->pad_begin[1];
    c.plain = plain_input;
    if (p->N == 0 || c.OH <= 0 || c.OW <= 0) return;
    /* interior columns: ox*SX - PX >= 0 and ox*SX - PX + (KW-1)*DX <= W-1 */
    c.ox_lo = KL_MIN(c.OW, (c.PX + c.SX - 1) / c.SX);
    int64_t last = c.W - 1 + c.PX - (c.KW - 1) * c.DX;
    c.ox_hi = last < 0 ? c.ox_lo : KL_MIN(c.OW, last / c.SX + 1);
    if (c.ox_hi < c.ox_lo) c.ox_hi = c.ox_lo;
    /* about 2k output vectors (x taps) per item */
    int64_t per_row = KL_MAX(1, c.OW * c.KH * c.KW);
    c.rows = KL_MAX(1, KL_MIN(c.OH, 16384 / per_row));
    c.nrc = (c.OH + c.rows - 1) / c.rows;
    c.rows = (c.OH + c.nrc - 1) / c.nrc;   /* chunks of equal size */
    c.nrc = (c.OH + c.rows - 1) / c.rows;
    kl_pool_parallel_for(pool, (size_t)(p->N * c.CB * c.nrc), 1, dw_items, &c);
}
