/* Int8 convolution (QLinearConv, ConvInteger, fused QDQ convs) on NCHW
 * tensors with the kl_conv_params geometry (1-3 spatial dims, groups,
 * strides, dilations, asymmetric pads):
 *   - depthwise (group == C == M): a direct kernel per channel plane over a
 *     zero-point-padded int16 copy of the plane (x - xz), int32 sums in tap
 *     order;
 *   - otherwise per image: one strided copy into a zero-point-padded NHWC
 *     image (uint8; int8 flipped by 0x80), then per group an im2col whose
 *     rows are output positions and k = (tap, channel) — one memcpy of the
 *     group's channels per tap (none at all for a 1x1 stride-1 conv: the
 *     NHWC image is the A matrix) — and kl__qgemm with the weights packed
 *     once in that k order (kl_qgemm_pack_b per group), writing rows of
 *     output channels (the vector epilogue) into an NHWC buffer that one
 *     strided copy turns into the NCHW output.
 * Integer sums are exact, so the results do not depend on the path's
 * blocking or the thread count. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <immintrin.h>
#include <string.h>

/* ---- geometry, padded to 3 spatial dims ---- */
typedef struct {
    int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
    int64_t ivol, kvol, ovol;
} qgeo;

static void geo_of(const kl_conv_params *p, qgeo *g) {
    g->ivol = g->kvol = g->ovol = 1;
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - p->nsp); /* leading dims of size 1 */
        int on = j >= 0;
        g->in[i] = on ? p->in[j] : 1;
        g->k[i] = on ? p->k[j] : 1;
        g->s[i] = on && p->stride[j] > 0 ? p->stride[j] : 1;
        g->d[i] = on && p->dilation[j] > 0 ? p->dilation[j] : 1;
        g->pb[i] = on ? p->pad_begin[j] : 0;
        g->out[i] = on ? p->out[j] : 1;
        g->ivol *= g->in[i], g->kvol *= g->k[i], g->ovol *= g->out[i];
    }
}

int kl__qconv_dw_direct = 0;

static int is_dw(const kl_conv_params *p) { return p->group == p->C && p->group == p->M && p->group > 1; }
static int64_t round4(int64_t k) { return (k + 3) / 4 * 4; }

static int64_t group_k(const kl_conv_params *p, const qgeo *g) { return p->C / p->group * g->kvol; }

size_t kl_qconv_packed_bytes(const kl_conv_params *p) {
    qgeo g;
    geo_of(p, &g);
    if (is_dw(p)) return (size_t)(p->M * g.kvol) * 2 + 64; /* int16 (w - 0) per channel and tap */
    return (size_t)p->group * kl_qgemm_packed_bytes(group_k(p, &g), p->M / p->group);
}

/* Weights (M, C/group, k...). Depthwise: int16 copies; else per group
 * B (K x Mg) with B[k][n] = w[(g*Mg + n)*K + k]. */
int kl_qconv_pack(const kl_conv_params *p, const void *w, int w_unsigned, void *dst, kl_err *e) {
    qgeo g;
    geo_of(p, &g);
    if (is_dw(p)) {
        int16_t *d = dst;
        for (int64_t i = 0; i < p->M * g.kvol; i++)
            d[i] = w_unsigned ? (int16_t)((const uint8_t *)w)[i] : (int16_t)((const int8_t *)w)[i];
        return KL_OK;
    }
    int64_t K = group_k(p, &g), Mg = p->M / p->group, Cg = p->C / p->group;
    size_t gb = kl_qgemm_packed_bytes(K, Mg);
    /* w (M, Cg, taps) -> (M, taps, Cg): k = tap * Cg + c, the im2col order */
    uint8_t *t = kl_mem_alloc_e((size_t)(p->M * K), KL_TAG_WORKSPACE, e);
    if (!t) return KL_ENOMEM;
    for (int64_t m = 0; m < p->M; m++)
        for (int64_t c = 0; c < Cg; c++)
            for (int64_t k = 0; k < g.kvol; k++)
                t[(m * g.kvol + k) * Cg + c] = ((const uint8_t *)w)[(m * Cg + c) * g.kvol + k];
    for (int64_t gi = 0; gi < p->group; gi++)
        kl_qgemm_pack_b(K, Mg, t + gi * Mg * K, w_unsigned, 1, K, (char *)dst + gi * gb);
    kl_mem_free(t);
    return KL_OK;
}

/* The padded NHWC image: every tap of every output inside it. */
static void padded_dims(const qgeo *g, int64_t *pd) {
    for (int i = 0; i < 3; i++) {
        int64_t need = (g->out[i] - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1;
        pd[i] = KL_MAX(need, g->in[i] + g->pb[i]);
    }
}

/* 1x1, stride 1, no padding, one group, C a multiple of 4: A is the image. */
static int direct_a(const kl_conv_params *p, const qgeo *g) {
    return g->kvol == 1 && p->group == 1 && p->C % 4 == 0 && g->s[0] * g->s[1] * g->s[2] == 1 &&
        g->pb[0] + g->pb[1] + g->pb[2] == 0 && g->out[0] * g->out[1] * g->out[2] == g->ivol;
}

/* y[p * ldy + c] = x[c * ldx + p] for c < C, p < P (bytes, or 4-byte
 * elements): 32 x 32 tiles. */
typedef struct {
    const void *x;
    void *y;
    int64_t C, P, ldx, ldy;
    size_t es;
} tctx;

/* A 16 x 16 byte block: y[p * ldy + c] = x[c * ldx + p], in four zmm
 * registers (four channel rows each) and two VBMI byte permutes per output
 * register (four positions of 16 channels). */
#define VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))
VBMI_TARGET static void t16x16(const uint8_t *x, int64_t ldx, uint8_t *y, int64_t ldy) {
    __m512i z[4];
    for (int q = 0; q < 4; q++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(x + (4 * q) * ldx)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(x + (4 * q + 1) * ldx)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(x + (4 * q + 2) * ldx)), 2);
        z[q] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(x + (4 * q + 3) * ldx)), 3);
    }
    for (int k = 0; k < 4; k++) { /* positions 4k .. 4k+3 */
        uint8_t idx[64];
        for (int j = 0; j < 64; j++) {
            int pl = j / 16, c = j % 16 % 8;
            idx[j] = (uint8_t)((c / 4) * 64 + (c % 4) * 16 + 4 * k + pl);
        }
        __m512i ix = _mm512_loadu_si512(idx);
        __m512i lo = _mm512_permutex2var_epi8(z[0], ix, z[1]), hi = _mm512_permutex2var_epi8(z[2], ix, z[3]);
        __m512i o = _mm512_mask_blend_epi8((__mmask64)0xFF00FF00FF00FF00ull, lo, hi);
        for (int pl = 0; pl < 4; pl++)
            _mm_storeu_si128((__m128i *)(void *)(y + (4 * k + pl) * ldy), _mm512_extracti32x4_epi32(o, pl));
    }
}

static int vbmi_ok(void) {
    static int vbmi = -1; /* probed once, by whichever thread comes first: atomic */
    int v = __atomic_load_n(&vbmi, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = kl__pgemm_ok() && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
        __atomic_store_n(&vbmi, v, __ATOMIC_RELAXED);
    }
    return v;
}

static void transpose_tiles(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const tctx *t = ctx;
    int64_t tp = (t->P + 31) / 32;
    int fast = t->es == 1 && vbmi_ok();
    for (size_t it = b; it < e; it++) {
        int64_t c0 = (int64_t)it / tp * 32, p0 = (int64_t)it % tp * 32;
        int64_t c1 = KL_MIN(t->C, c0 + 32), p1 = KL_MIN(t->P, p0 + 32);
        if (fast) { /* full 16 x 16 blocks in registers, the edges by bytes */
            const uint8_t *x = t->x;
            uint8_t *y = t->y;
            for (int64_t cc = c0; cc < c1; cc += 16)
                for (int64_t pp = p0; pp < p1; pp += 16) {
                    if (c1 - cc >= 16 && p1 - pp >= 16) {
                        t16x16(x + cc * t->ldx + pp, t->ldx, y + pp * t->ldy + cc, t->ldy);
                        continue;
                    }
                    for (int64_t p = pp; p < KL_MIN(p1, pp + 16); p++)
                        for (int64_t c = cc; c < KL_MIN(c1, cc + 16); c++) y[p * t->ldy + c] = x[c * t->ldx + p];
                }
            continue;
        }
        if (t->es == 1) {
            const uint8_t *x = t->x;
            uint8_t *y = t->y;
            for (int64_t p = p0; p < p1; p++)
                for (int64_t c = c0; c < c1; c++) y[p * t->ldy + c] = x[c * t->ldx + p];
        } else {
            const uint32_t *x = t->x;
            uint32_t *y = t->y;
            for (int64_t p = p0; p < p1; p++)
                for (int64_t c = c0; c < c1; c++) y[p * t->ldy + c] = x[c * t->ldx + p];
        }
    }
}


/* kl_pool_parallel_for with items claimed from a counter in runs of
 * grain: a worker slowed down (a busy core) takes fewer. Each item is
 * computed whole by one worker, so results do not depend on who took it. */
typedef struct {
    kl_range_fn fn;
    void *ctx;
    size_t n, grain, next;
} claim;

static void claim_run(void *ctx, size_t b, size_t e, int chunk) {
    (void)b, (void)e;
    claim *c = ctx;
    for (;;) {
        size_t i = __atomic_fetch_add(&c->next, c->grain, __ATOMIC_RELAXED);
        if (i >= c->n) break;
        c->fn(c->ctx, i, KL_MIN(c->n, i + c->grain), chunk);
    }
}

static void claim_for(kl_pool *pool, size_t n, size_t grain, kl_range_fn fn, void *ctx) {
    claim c = {fn, ctx, n, grain ? grain : 1, 0};
    kl_pool_parallel_for(pool, (size_t)kl_pool_chunks(pool, (n + c.grain - 1) / c.grain, 1), 1, claim_run, &c);
}

/* Workspace layout for nb images at once (as many as fit QCONV_BATCH_BYTES,
 * at least one): padded images, im2col rows, NHWC int32/float output. */
#define QCONV_BATCH_BYTES ((int64_t)48 << 20)

typedef struct {
    int64_t nb, pimg, pa, pt; /* images per batch; bytes per image of each buffer */
    size_t img, a, t, total;
} qws;

static qws ws_layout(const kl_conv_params *p, const qgeo *g) {
    int64_t pd[3];
    padded_dims(g, pd);
    qws w;
    w.pimg = pd[0] * pd[1] * pd[2] * p->C;
    w.pa = direct_a(p, g) ? 0 : g->ovol * round4(group_k(p, g));
    w.pt = g->ovol * p->M * 4;
    w.nb = KL_MAX(1, KL_MIN(p->N, QCONV_BATCH_BYTES / KL_MAX(1, w.pimg + w.pa + w.pt)));
    w.img = (size_t)(w.nb * w.pimg + 64 + 63) / 64 * 64;
    w.a = (size_t)(w.nb * w.pa + 63) / 64 * 64;
    w.t = (size_t)(w.nb * w.pt);
    w.total = w.img + w.a + w.t + 64;
    return w;
}

#define DW_FLOAT_TAPS 258
static size_t dwf_bytes(const kl_conv_params *p, const qgeo *g, size_t *bx, size_t *bw);

size_t kl_qconv_workspace_bytes(const kl_conv_params *p) {
    qgeo g;
    geo_of(p, &g);
    if (is_dw(p)) { /* the float path's buffers (the direct kernel's planes come from the allocator) */
        size_t bx, bw;
        return g.kvol <= DW_FLOAT_TAPS ? dwf_bytes(p, &g, &bx, &bw) : 0;
    }
    return ws_layout(p, &g).total;
}

/* ==================================================================
 * im2col over the padded NHWC image: row = output position, k = (tap,
 * channel of the group), [K, Kp) zero
 * ================================================================== */

typedef struct {
    const qgeo *g;
    const uint8_t *img; /* padded NHWC images (pimg bytes apart), channels C; the group's first channel */
    int64_t pd[3], C, Cg, Kp, pimg;
    uint8_t *a; /* rows of all images: image i's positions from i * ovol */
} i2c;

/* n bytes (a channel run of one tap): 64-byte vector moves, a masked tail. */
__attribute__((target("avx512f,avx512bw"))) static inline void copy_run512(uint8_t *d, const uint8_t *s, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) _mm512_storeu_si512(d + i, _mm512_loadu_si512(s + i));
    if (i < n) {
        __mmask64 m = (__mmask64)(~0ull >> (64 - (n - i)));
        _mm512_mask_storeu_epi8(d + i, m, _mm512_maskz_loadu_epi8(m, s + i));
    }
}

/* The rows [b, e) of the im2col matrix: each output position's receptive
 * field, group channels contiguous, zero-padded to Kp. wide: the runs are
 * copied with AVX-512 masked moves (the caller is compiled for it). */
static inline __attribute__((always_inline)) void im2col_body(const i2c *c, size_t b, size_t e, int wide) {
    const qgeo *g = c->g;
    for (size_t pos = b; pos < e; pos++) {
        int64_t lp = (int64_t)pos % g->ovol, o2 = lp % g->out[2], o1 = lp / g->out[2] % g->out[1],
                o0 = lp / (g->out[2] * g->out[1]);
        const uint8_t *im = c->img + (int64_t)pos / g->ovol * c->pimg;
        uint8_t *d = c->a + (int64_t)pos * c->Kp;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++)
            for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                const uint8_t *row =
                    im + ((o0 * g->s[0] + k0 * g->d[0]) * c->pd[1] + o1 * g->s[1] + k1 * g->d[1]) * c->pd[2] * c->C;
                for (int64_t k2 = 0; k2 < g->k[2]; k2++, d += c->Cg) {
                    const uint8_t *src = row + (o2 * g->s[2] + k2 * g->d[2]) * c->C;
                    if (wide) copy_run512(d, src, c->Cg);
                    else memcpy(d, src, (size_t)c->Cg);
                }
            }
        int64_t used = g->kvol * c->Cg;
        memset(c->a + (int64_t)pos * c->Kp + used, 0, (size_t)(c->Kp - used));
    }
}

__attribute__((target("avx512f,avx512bw"))) static void im2col_rows512(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    im2col_body(ctx, b, e, 1);
}

static void im2col_rows(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    im2col_body(ctx, b, e, 0);
}

/* ==================================================================
 * Depthwise: one work item per (image, channel)
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    const qgeo *g;
    const void *x;
    int x_unsigned;
    int32_t xz;
    const int16_t *w;
    const void *wz;
    int wz_per_ch;
    int w_unsigned;
    const kl_qgemm_out *o;
    int16_t **planes; /* per chunk: the padded plane */
    int64_t pd[3];    /* padded plane dims */
} dwc;

static void dw_store(const kl_qgemm_out *o, int64_t idx, int64_t ch, int32_t v) {
    if (o->bias) v = (int32_t)((uint32_t)v + (uint32_t)o->bias[ch]);
    float mult = o->mult ? o->mult[o->mult_per_col ? ch : 0] : 1.0f;
    if (o->c) o->c[idx] = v;
    else if (o->yf) o->yf[idx] = (float)v * mult + (o->fbias ? o->fbias[ch] : 0.0f);
    else {
        int32_t q = kl_requant1(v, mult, o->yzp, o->lo, o->hi);
        if (o->ydt == KL_I8) ((int8_t *)o->y)[idx] = (int8_t)q;
        else ((uint8_t *)o->y)[idx] = (uint8_t)q;
    }
}

static void dw_planes(void *ctx, size_t b, size_t e, int chunk) {
    const dwc *c = ctx;
    const qgeo *g = c->g;
    int16_t *pl = c->planes[chunk];
    int64_t C = c->p->C, pvol = c->pd[0] * c->pd[1] * c->pd[2];
    for (size_t item = b; item < e; item++) {
        int64_t ch = (int64_t)item % C;
        const void *xp = (const char *)c->x + (int64_t)item * g->ivol;
        /* padded copy of x - xz (pads 0) */
        memset(pl, 0, (size_t)pvol * sizeof(int16_t));
        for (int64_t i0 = 0; i0 < g->in[0]; i0++)
            for (int64_t i1 = 0; i1 < g->in[1]; i1++) {
                int16_t *d = pl + ((i0 + g->pb[0]) * c->pd[1] + i1 + g->pb[1]) * c->pd[2] + g->pb[2];
                int64_t src = (i0 * g->in[1] + i1) * g->in[2];
                if (c->x_unsigned)
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++)
                        d[i2] = (int16_t)(((const uint8_t *)xp)[src + i2] - c->xz);
                else
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++) d[i2] = (int16_t)(((const int8_t *)xp)[src + i2] - c->xz);
            }
        int32_t wz = !c->wz ? 0
            : c->w_unsigned ? ((const uint8_t *)c->wz)[c->wz_per_ch ? ch : 0]
                            : ((const int8_t *)c->wz)[c->wz_per_ch ? ch : 0];
        int16_t wk[512];
        int64_t kv = g->kvol;
        for (int64_t t = 0; t < kv; t++) wk[t] = (int16_t)(c->w[ch * kv + t] - wz);
        int64_t obase = (int64_t)item * g->ovol;
        for (int64_t o0 = 0; o0 < g->out[0]; o0++)
            for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
                int32_t acc[256];
                for (int64_t o2s = 0; o2s < g->out[2]; o2s += 256) {
                    int64_t n2 = KL_MIN(256, g->out[2] - o2s);
                    memset(acc, 0, sizeof acc);
                    int64_t t = 0;
                    for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                        for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                            const int16_t *r = pl +
                                ((o0 * g->s[0] + k0 * g->d[0]) * c->pd[1] + o1 * g->s[1] + k1 * g->d[1]) * c->pd[2];
                            for (int64_t k2 = 0; k2 < g->k[2]; k2++, t++) {
                                int32_t wv = wk[t];
                                const int16_t *rr = r + o2s * g->s[2] + k2 * g->d[2];
                                if (g->s[2] == 1)
                                    for (int64_t j = 0; j < n2; j++) acc[j] += (int32_t)rr[j] * wv;
                                else
                                    for (int64_t j = 0; j < n2; j++) acc[j] += (int32_t)rr[j * g->s[2]] * wv;
                            }
                        }
                    int64_t ob = obase + (o0 * g->out[1] + o1) * g->out[2] + o2s;
                    for (int64_t j = 0; j < n2; j++) dw_store(c->o, ob + j, ch, acc[j]);
                }
            }
    }
}

/* Depthwise through the float kernel: (x - xz) and (w - wz) are integers of
 * at most 255 in magnitude, so with at most DW_FLOAT_TAPS taps every product
 * and partial sum is an integer below 2^24 and float arithmetic is exact in
 * any order: kl_conv_f32's depthwise kernels give the int32 sums,
 * requantized per channel here. */

typedef struct {
    const kl_conv_params *p;
    const qgeo *g;
    const void *x;
    int x_unsigned;
    int32_t xz;
    float *xf;
    const float *acc;
    const kl_qgemm_out *o;
} dwf;

static void dwf_in(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const dwf *c = ctx;
    int64_t i0 = (int64_t)b * 4096, i1 = KL_MIN((int64_t)e * 4096, c->p->N * c->p->C * c->g->ivol);
    if (c->x_unsigned)
        for (int64_t i = i0; i < i1; i++) c->xf[i] = (float)(((const uint8_t *)c->x)[i] - c->xz);
    else
        for (int64_t i = i0; i < i1; i++) c->xf[i] = (float)(((const int8_t *)c->x)[i] - c->xz);
}

/* S float sums (exact integers) of channel ch -> bytes: + bias, float32
 * requantization as kl_requant1, 16 at a time. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void dw_row_bytes512(const kl_qgemm_out *o, const float *a,
                                                                                 int64_t S, int64_t ch, void *y) {
    __m512i bias = _mm512_set1_epi32(o->bias ? o->bias[ch] : 0);
    __m512 mult = _mm512_set1_ps(o->mult ? o->mult[o->mult_per_col ? ch : 0] : 1.0f);
    __m512 zp = _mm512_set1_ps((float)o->yzp), lo = _mm512_set1_ps((float)o->lo), hi = _mm512_set1_ps((float)o->hi);
    for (int64_t j = 0; j < S; j += 16) {
        __mmask16 m = S - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (S - j)) - 1);
        __m512i v = _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_maskz_loadu_ps(m, a + j)), bias);
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), mult);
        f = _mm512_add_ps(_mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zp);
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
        _mm_mask_storeu_epi8((uint8_t *)y + j, m, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(f)));
    }
}

/* one (image, channel) plane of sums to the output */
static void dwf_out(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const dwf *c = ctx;
    int64_t S = c->g->ovol;
    int vec = c->o->y && kl__pgemm_ok();
    for (size_t item = b; item < e; item++) {
        int64_t ch = (int64_t)item % c->p->M;
        const float *a = c->acc + (int64_t)item * S;
        if (vec) dw_row_bytes512(c->o, a, S, ch, (uint8_t *)c->o->y + (int64_t)item * S);
        else
            for (int64_t j = 0; j < S; j++) dw_store(c->o, (int64_t)item * S + j, ch, (int32_t)a[j]);
    }
}

/* Bytes of run_dw_float's buffers: (x - xz), (w - wz), the sums. */
static size_t dwf_bytes(const kl_conv_params *p, const qgeo *g, size_t *bx, size_t *bw) {
    *bx = ((size_t)(p->N * p->C * g->ivol) * 4 + 63) / 64 * 64;
    *bw = ((size_t)(p->M * g->kvol) * 4 + 63) / 64 * 64;
    return *bx + *bw + (size_t)(p->N * p->M * g->ovol) * 4 + 64;
}

static int run_dw_float(const kl_conv_params *p, const qgeo *g, const void *x, int x_unsigned, int32_t xz,
                        const int16_t *w16, const void *wz, int wz_per_ch, int w_unsigned, const kl_qgemm_out *o,
                        void *ws, kl_pool *pool, kl_err *e) {
    int64_t nx = p->N * p->C * g->ivol;
    size_t bx, bw, total = dwf_bytes(p, g, &bx, &bw);
    char *own = NULL, *buf = ws;
    if (!buf && !(buf = own = kl_mem_alloc_e(total, KL_TAG_WORKSPACE, e))) return KL_ENOMEM;
    float *xf = (float *)buf, *wf = (float *)(buf + bx), *yf = (float *)(buf + bx + bw);
    dwf c = {p, g, x, x_unsigned, xz, xf, yf, o};
    kl_pool_parallel_for(pool, (size_t)((nx + 4095) / 4096), 4, dwf_in, &c);
    for (int64_t ch = 0; ch < p->M; ch++) {
        int64_t zi = wz_per_ch ? ch : 0;
        int32_t z = !wz ? 0 : w_unsigned ? ((const uint8_t *)wz)[zi] : ((const int8_t *)wz)[zi];
        for (int64_t t = 0; t < g->kvol; t++) wf[ch * g->kvol + t] = (float)(w16[ch * g->kvol + t] - z);
    }
    kl_conv_params q = *p;
    q.packed_w = NULL, q.residual = NULL, q.act = (kl_act){KL_ACT_NONE, 0, 0};
    int rc = kl_conv_f32(&q, xf, wf, NULL, yf, NULL, pool, e);
    if (!rc) kl_pool_parallel_for(pool, (size_t)(p->N * p->M), 1, dwf_out, &c);
    kl_mem_free(own);
    return rc;
}

static int run_dw(const kl_conv_params *p, const qgeo *g, const void *x, int x_unsigned, int32_t xz,
                  const void *packed_w, const void *wz, int wz_per_ch, int w_unsigned, const kl_qgemm_out *o, void *ws,
                  kl_pool *pool, kl_err *e) {
    if (g->kvol > 512)
        return kl_err_set(e, KL_EUNSUPPORTED, "int8 depthwise conv: kernel of %lld taps (at most 512)",
                          (long long)g->kvol);
    if (g->kvol <= DW_FLOAT_TAPS && !kl__qconv_dw_direct)
        return run_dw_float(p, g, x, x_unsigned, xz, packed_w, wz, wz_per_ch, w_unsigned, o, ws, pool, e);
    dwc c = {p, g, x, x_unsigned, xz, packed_w, wz, wz_per_ch, w_unsigned, o, NULL, {0}};
    for (int i = 0; i < 3; i++) {
        /* every tap of every output lies inside the padded plane */
        int64_t need = (g->out[i] - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1;
        c.pd[i] = KL_MAX(need, g->in[i] + g->pb[i]);
    }
    size_t items = (size_t)(p->N * p->C);
    int nch = kl_pool_chunks(pool, items, 1);
    size_t pbytes = ((size_t)(c.pd[0] * c.pd[1] * c.pd[2]) * sizeof(int16_t) + 63) / 64 * 64;
    char *buf = kl_mem_alloc_e(pbytes * (size_t)nch + sizeof(int16_t *) * (size_t)nch, KL_TAG_WORKSPACE, e);
    if (!buf) return KL_ENOMEM;
    int16_t **planes = (int16_t **)(buf + pbytes * (size_t)nch);
    for (int i = 0; i < nch; i++) planes[i] = (int16_t *)(buf + pbytes * (size_t)i);
    c.planes = planes;
    kl_pool_parallel_for(pool, items, 1, dw_planes, &c);
    kl_mem_free(buf);
    return KL_OK;
}

/* ==================================================================
 * Entry
 * ================================================================== */

/* The input rows of images n0.. into their padded NHWC images: item =
 * (image, input row), each a serial tile transpose (one parallel region
 * for the whole batch), int8 flipped to uint8. */
typedef struct {
    const qgeo *g;
    const uint8_t *x;
    uint8_t *img;
    int64_t C, pimg, pd[3];
    int flip;
} prep;

static void prep_rows(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const prep *c = ctx;
    const qgeo *g = c->g;
    int64_t rows = g->in[0] * g->in[1];
    for (size_t it = b; it < e; it++) {
        int64_t im = (int64_t)it / rows, r = (int64_t)it % rows, i0 = r / g->in[1], i1 = r % g->in[1];
        uint8_t *d =
            c->img + im * c->pimg + (((i0 + g->pb[0]) * c->pd[1] + i1 + g->pb[1]) * c->pd[2] + g->pb[2]) * c->C;
        tctx t = {c->x + im * c->C * g->ivol + r * g->in[2], d, c->C, g->in[2], g->ivol, c->C, 1};
        transpose_tiles(&t, 0, (size_t)((c->C + 31) / 32 * ((g->in[2] + 31) / 32)), 0);
        if (c->flip)
            for (int64_t i = 0; i < g->in[2] * c->C; i++) d[i] ^= 0x80;
    }
}

/* Unpadded images: one transpose each (the rows of prep_rows are contiguous). */
static void prep_images(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const prep *c = ctx;
    for (size_t im = b; im < e; im++) {
        uint8_t *d = c->img + (int64_t)im * c->pimg;
        tctx t = {c->x + (int64_t)im * c->C * c->g->ivol, d, c->C, c->g->ivol, c->g->ivol, c->C, 1};
        transpose_tiles(&t, 0, (size_t)((c->C + 31) / 32 * ((c->g->ivol + 31) / 32)), 0);
        if (c->flip)
            for (int64_t i = 0; i < c->pimg; i++) d[i] ^= 0x80;
    }
}

/* NHWC int32/float rows of images n0.. -> their NCHW outputs, one item per image */
typedef struct {
    const void *t;
    void *y;
    int64_t S, M;
} unprep;

static void unprep_images(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const unprep *c = ctx;
    for (size_t i = b; i < e; i++) {
        tctx t = {(const char *)c->t + (int64_t)i * c->S * c->M * 4,
                  (char *)c->y + (int64_t)i * c->S * c->M * 4,
                  c->S,
                  c->M,
                  c->M,
                  c->S,
                  4};
        transpose_tiles(&t, 0, (size_t)((c->S + 31) / 32 * ((c->M + 31) / 32)), 0);
    }
}

/* o for images n0.. (nb rows of ovol positions stacked), group gi:
 * per-channel arrays from the group's first channel; bytes go straight
 * into the NCHW output (rows = positions, one row segment per image;
 * columns = channels: the GEMM's column store), int32/float rows of M
 * channels into the NHWC buffer t (transposed afterwards). */
static kl_qgemm_out group_out(const kl_conv_params *p, const qgeo *g, const kl_qgemm_out *o, void *t, int64_t n0,
                              int64_t gi) {
    kl_qgemm_out r = *o;
    int64_t Mg = p->M / p->group, c0 = gi * Mg;
    if (r.bias) r.bias += c0;
    if (r.mult && r.mult_per_col) r.mult += c0;
    if (r.fbias) r.fbias += c0;
    if (!o->c && !o->yf) {
        r.y = (char *)o->y + (n0 * p->M + c0) * g->ovol;
        r.ysm = 1, r.ysn = g->ovol, r.rseg = g->ovol, r.rskip = p->M * g->ovol;
        return r;
    }
    char *tc = (char *)t + (size_t)c0 * 4;
    if (r.c) r.c = (int32_t *)tc;
    else r.yf = (float *)tc;
    r.ysm = p->M, r.ysn = 1, r.rseg = 0;
    return r;
}

int kl_qconv(const kl_conv_params *p, const void *x, int x_unsigned, int32_t xz, const void *packed_w, int w_unsigned,
             const void *wz, int wz_per_ch, const kl_qgemm_out *o, void *ws, kl_pool *pool, kl_err *e) {
    qgeo g;
    geo_of(p, &g);
    if (p->N <= 0 || g.ovol <= 0 || p->M <= 0) return KL_OK;
    if (is_dw(p)) return run_dw(p, &g, x, x_unsigned, xz, packed_w, wz, wz_per_ch, w_unsigned, o, ws, pool, e);
    int64_t K = group_k(p, &g), Kp = round4(K), Mg = p->M / p->group, Cg = p->C / p->group, pd[3];
    size_t gb = kl_qgemm_packed_bytes(K, Mg);
    padded_dims(&g, pd);
    qws L = ws_layout(p, &g);
    void *own = NULL;
    if (!ws) {
        ws = own = kl_mem_alloc_e(L.total, KL_TAG_WORKSPACE, e);
        if (!ws) return KL_ENOMEM;
    }
    uint8_t *img = ws, *a = img + L.img;
    void *t = (char *)ws + L.img + L.a;
    int32_t za = x_unsigned ? xz : xz + 128;
    int direct = direct_a(p, &g);
    int rc = KL_OK;
    for (int64_t n0 = 0; n0 < p->N && !rc; n0 += L.nb) {
        int64_t nb = KL_MIN(L.nb, p->N - n0), rows = nb * g.ovol;
        /* the images, NCHW -> padded NHWC (pads = the zero point, in the uint8 domain) */
        if (L.pimg != p->C * g.ivol) memset(img, (uint8_t)za, (size_t)(nb * L.pimg));
        prep pr = {&g, (const uint8_t *)x + n0 * p->C * g.ivol, img, p->C, L.pimg, {pd[0], pd[1], pd[2]}, !x_unsigned};
        if (L.pimg == p->C * g.ivol) { /* unpadded: the images are one C x (nb positions) transpose per image */
            claim_for(pool, (size_t)nb, 1, prep_images, &pr);
        } else claim_for(pool, (size_t)(nb * g.in[0] * g.in[1]), 4, prep_rows, &pr);
        for (int64_t gi = 0; gi < p->group && !rc; gi++) {
            const uint8_t *arows = img;
            int64_t lda = p->C;
            if (!direct) {
                i2c c = {&g, img + gi * Cg, {pd[0], pd[1], pd[2]}, p->C, Cg, Kp, L.pimg, a};
                claim_for(pool, (size_t)rows, 64, kl__pgemm_ok() ? im2col_rows512 : im2col_rows, &c);
                arows = a, lda = Kp;
            }
            kl_qgemm_out go = group_out(p, &g, o, t, n0, gi);
            const void *wzg = wz && wz_per_ch ? (const char *)wz + gi * Mg : wz;
            rc = kl__qgemm(rows, Mg, K, arows, 1, lda, 1, za, (const char *)packed_w + gi * gb, wzg, wz_per_ch, &go,
                           pool, e);
        }
        if (!rc && (o->c || o->yf)) { /* NHWC t -> NCHW outputs */
            unprep u = {t, o->c ? (void *)(o->c + n0 * p->M * g.ovol) : (void *)(o->yf + n0 * p->M * g.ovol), g.ovol,
                        p->M};
            kl_pool_parallel_for(pool, (size_t)nb, 1, unprep_images, &u);
        }
    }
    kl_mem_free(own);
    return rc;
}
