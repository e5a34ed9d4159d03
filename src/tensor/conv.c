/* Convolution (1-3 spatial dims, NC...): pointwise as plain GEMM, a direct
 * path for depthwise 2-D kernels, im2col + GEMM otherwise; bias and the fused
 * activation are applied in the GEMM epilogue. 1-D and 2-D problems run as
 * 3-D problems with leading unit dims. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <stdatomic.h>
#include <string.h>

/* ==================================================================
 * Parameters
 * ================================================================== */

/* Normalised 3-D view of the spatial parameters. */
typedef struct {
    int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
    int64_t in_vol, k_vol, out_vol;
} sp3;

static void to_sp3(int nsp, const int64_t *in, const int64_t *k, const int64_t *s, const int64_t *d,
                   const int64_t *pb, const int64_t *out, sp3 *o) {
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        int j = i - off;
        o->in[i] = j >= 0 ? in[j] : 1;
        o->k[i] = j >= 0 ? k[j] : 1;
        o->s[i] = j >= 0 ? s[j] : 1;
        o->d[i] = j >= 0 ? d[j] : 1;
        o->pb[i] = j >= 0 ? pb[j] : 0;
        o->out[i] = j >= 0 ? out[j] : 1;
    }
    o->in_vol = o->in[0] * o->in[1] * o->in[2];
    o->k_vol = o->k[0] * o->k[1] * o->k[2];
    o->out_vol = o->out[0] * o->out[1] * o->out[2];
}

void kl_auto_pad(int64_t in, int64_t k, int64_t stride, int64_t dilation, int upper, int64_t *pad_begin,
                 int64_t *pad_end) {
    if (stride < 1) stride = 1;
    if (dilation < 1) dilation = 1;
    int64_t out = (in + stride - 1) / stride;
    int64_t total = (out - 1) * stride + (k - 1) * dilation + 1 - in;
    if (total < 0) total = 0;
    *pad_begin = upper ? total / 2 : total - total / 2;
    *pad_end = total - *pad_begin;
}

int kl_conv_prepare(kl_conv_params *p, kl_err *e) {
    if (p->nsp < 1 || p->nsp > 3) return kl_err_set(e, KL_EUNSUPPORTED, "conv: %d spatial dims (1..3 supported)", p->nsp);
    if (p->N < 0 || p->C <= 0 || p->M <= 0) return kl_err_set(e, KL_ESHAPE, "conv: bad batch/channels N=%lld C=%lld M=%lld",
                                                             (long long)p->N, (long long)p->C, (long long)p->M);
    if (p->group <= 0) p->group = 1;
    if (p->C % p->group || p->M % p->group)
        return kl_err_set(e, KL_ESHAPE, "conv: channels C=%lld M=%lld not divisible by group %lld", (long long)p->C,
                          (long long)p->M, (long long)p->group);
    for (int i = 0; i < p->nsp; i++) {
        if (p->stride[i] <= 0) p->stride[i] = 1;
        if (p->dilation[i] <= 0) p->dilation[i] = 1;
        if (p->k[i] <= 0 || p->in[i] < 0 || p->pad_begin[i] < 0 || p->pad_end[i] < 0)
            return kl_err_set(e, KL_ESHAPE, "conv: bad kernel/input/pads at spatial axis %d", i);
        int64_t span = p->dilation[i] * (p->k[i] - 1) + 1;
        int64_t o = (p->in[i] + p->pad_begin[i] + p->pad_end[i] - span) / p->stride[i] + 1;
        if (p->in[i] + p->pad_begin[i] + p->pad_end[i] < span || o <= 0)
            return kl_err_set(e, KL_ESHAPE, "conv: kernel %lld (dilation %lld) larger than padded input %lld at spatial axis %d",
                              (long long)p->k[i], (long long)p->dilation[i],
                              (long long)(p->in[i] + p->pad_begin[i] + p->pad_end[i]), i);
        p->out[i] = o;
    }
    return KL_OK;
}

static int is_pointwise(const kl_conv_params *p) {
    for (int i = 0; i < p->nsp; i++)
        if (p->k[i] != 1 || p->stride[i] != 1 || p->pad_begin[i] || p->pad_end[i]) return 0;
    return 1;
}

static int is_depthwise2d(const kl_conv_params *p) {
    return p->nsp == 2 && p->group == p->C && p->M == p->C;
}

/* Many groups: one work item per group (im2col + serial GEMM), each with its
 * own slice of the workspace. */
#define GROUP_PARALLEL_MIN 4

static int use_packed(const kl_conv_params *p) { return !is_depthwise2d(p) && kl__pgemm_ok(); }

size_t kl_conv_packed_floats(const kl_conv_params *p) {
    if (!use_packed(p) || p->group <= 0 || p->C % p->group || p->M % p->group) return 0;
    int64_t kv = 1;
    for (int i = 0; i < p->nsp; i++) kv *= p->k[i];
    return (size_t)p->group * kl__pgemm_packed_a_floats(p->M / p->group, p->C / p->group * kv);
}

void kl_conv_pack_weights(const kl_conv_params *p, const float *w, float *dst) {
    int64_t kv = 1;
    for (int i = 0; i < p->nsp; i++) kv *= p->k[i];
    int64_t G = p->group, Mg = p->M / G, Kg = p->C / G * kv;
    size_t per = kl__pgemm_packed_a_floats(Mg, Kg);
    for (int64_t g = 0; g < G; g++) kl__pgemm_pack_a(Mg, Kg, w + g * Mg * Kg, Kg, 1, dst + (size_t)g * per);
}


/* ==================================================================
 * im2col
 * ================================================================== */

typedef struct {
    const sp3 *s;
    const float *x;   /* (Cg, in_vol) */
    float *col;       /* (Cg * k_vol, out_vol) */
} i2c_ctx;

static void im2col_rows(void *vc, size_t r0, size_t r1, int chunk) {
    i2c_ctx *c = vc;
    const sp3 *s = c->s;
    for (size_t r = r0; r < r1; r++) {
        int64_t kk = (int64_t)r % s->k_vol, ch = (int64_t)r / s->k_vol;
        int64_t kx = kk % s->k[2], ky = (kk / s->k[2]) % s->k[1], kz = kk / (s->k[2] * s->k[1]);
        const float *xc = c->x + ch * s->in_vol;
        float *dst = c->col + (int64_t)r * s->out_vol;
        /* valid ox range: 0 <= ox*s - pb + kx*d < in */
        int64_t off_x = kx * s->d[2] - s->pb[2];
        int64_t lo = off_x >= 0 ? 0 : (-off_x + s->s[2] - 1) / s->s[2];
        int64_t hi = s->in[2] - off_x <= 0 ? 0 : (s->in[2] - off_x + s->s[2] - 1) / s->s[2];
        if (hi > s->out[2]) hi = s->out[2];
        if (lo > hi) lo = hi;
        for (int64_t oz = 0; oz < s->out[0]; oz++) {
            int64_t iz = oz * s->s[0] - s->pb[0] + kz * s->d[0];
            for (int64_t oy = 0; oy < s->out[1]; oy++) {
                int64_t iy = oy * s->s[1] - s->pb[1] + ky * s->d[1];
                float *d = dst + (oz * s->out[1] + oy) * s->out[2];
                if (iz < 0 || iz >= s->in[0] || iy < 0 || iy >= s->in[1]) {
                    memset(d, 0, (size_t)s->out[2] * sizeof(float));
                    continue;
                }
                const float *xr = xc + (iz * s->in[1] + iy) * s->in[2] + off_x;
                for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0;
                if (s->s[2] == 1) memcpy(d + lo, xr + lo, (size_t)(hi - lo) * sizeof(float));
                else if (s->s[2] == 2)
                    for (int64_t ox = lo; ox < hi; ox++) d[ox] = xr[ox * 2];
                else
                    for (int64_t ox = lo; ox < hi; ox++) d[ox] = xr[ox * s->s[2]];
                for (int64_t ox = hi; ox < s->out[2]; ox++) d[ox] = 0;
            }
        }
    }
}

/* ==================================================================
 * Grouped (many groups): parallel over groups
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    const sp3 *s;
    const float *x, *w, *bias;
    float *y, *col;
    int64_t n;
} grp_ctx;

static void grp_range(void *vc, size_t g0, size_t g1, int chunk) {
    grp_ctx *c = vc;
    const kl_conv_params *p = c->p;
    const sp3 *s = c->s;
    int64_t G = p->group, Cg = p->C / G, Mg = p->M / G, rows = Cg * s->k_vol;
    for (size_t gi = g0; gi < g1; gi++) {
        int64_t g = (int64_t)gi;
        float *col = c->col + g * rows * s->out_vol;
        i2c_ctx ic = {s, c->x + (c->n * p->C + g * Cg) * s->in_vol, col};
        im2col_rows(&ic, 0, (size_t)rows, 0);
        kl__gemm_serial(0, 0, Mg, s->out_vol, rows, 1.0f, c->w + g * Mg * rows, rows, col, s->out_vol, 0.0f,
                        c->y + (c->n * p->M + g * Mg) * s->out_vol, s->out_vol, c->bias ? c->bias + g * Mg : NULL, 1,
                        p->act);
    }
}

/* ==================================================================
 * Packed path (AVX-512): one parallel region of tiles per conv (per image
 * for the implicit GEMM, after that image's padding pass). The GEMM output
 * of a group (output channels x columns) is cut into tiles of (channel block
 * x column block) whose sizes depend only on the shape; the threads claim
 * tiles from a counter. A tile runs keel's micro-kernel against the
 * pre-packed weights, k block by k block, and writes y with bias, residual
 * and activation fused in the last k block's epilogue, while the data is in
 * cache (no output pass). B, by conv kind:
 *   pointwise: x read in place (columns = one image's pixels);
 *   2-D stride 1/2 (k > 1): the implicit GEMM below (columns = the padded-
 *     width grid of one image; its pad columns dropped by the store);
 *   else (strided 1x1, 3-D, strides > 2, or a batch of small images): the
 *     images side by side as columns (column segments in the store), each
 *     tile packing its own im2col block (padding as masked-off lanes) on its
 *     stack, or, when channels are split over tiles, B packed once first.
 * Every output element is computed by one tile with k in ascending order:
 * bit-identical at any thread count.
 * ================================================================== */

/* Implicit GEMM for stride-1 and stride-2 2-D convs: the input is copied
 * once into zero-padded planes; over the padded-width output grid (OH x WP)
 * B(k, j) = xp[koff[k] + j], so the micro-kernel reads B straight from the
 * padded input (no packing); the grid's pad columns are dropped by the
 * kernel's store (column segments of WP, OW valid). Stride 1: one plane
 * (HP x WP) per channel, koff[k] = c*HP*WP + ky*dy*WP + kx*dx. Stride 2 (per
 * axis): each channel is split into its SY*SX phases (even/odd rows x
 * even/odd columns of the padded input), each an HP x WP plane, so tap
 * (ty, tx) = (ky*dy, kx*dx) reads phase (ty%SY, tx%SX) at offset
 * (ty/SY)*WP + tx/SX: a stride-1 read again (no gathers). */
static int implicit_dims(const kl_conv_params *p, const sp3 *s, int64_t *HP, int64_t *WP) {
    if (p->nsp > 2 || s->s[0] != 1 || s->s[1] < 1 || s->s[1] > 2 || s->s[2] < 1 || s->s[2] > 2 || is_pointwise(p))
        return 0;
    if (s->k_vol == 1 && (s->s[1] != 1 || s->s[2] != 1)) return 0; /* strided 1x1: a gather of 1/4 of the input */
    if (s->s[1] == 1 && s->s[2] == 1) {
        *HP = s->in[1] + s->pb[1] + (p->nsp == 2 ? p->pad_end[0] : 0);
        *WP = s->in[2] + s->pb[2] + p->pad_end[p->nsp - 1];
    } else {
        *HP = s->out[1] + (s->k[1] - 1) * s->d[1] / s->s[1];
        *WP = s->out[2] + (s->k[2] - 1) * s->d[2] / s->s[2];
    }
    return (p->C / p->group) * s->s[1] * s->s[2] * *HP * *WP + 64 < INT32_MAX;
}

typedef struct {
    const sp3 *s;
    const float *x;
    float *xp;
    int64_t HP, WP;
} pad_ctx;

static void pad_planes(void *vc, size_t c0, size_t c1, int chunk) {
    pad_ctx *c = vc;
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], PY = s->pb[1], PX = s->pb[2], SY = s->s[1], SX = s->s[2];
    int64_t plane = c->HP * c->WP;
    for (size_t ch = c0; ch < c1; ch++) {
        const float *src = c->x + (int64_t)ch * s->in_vol;
        if (SY == 1 && SX == 1) {
            float *d = c->xp + (int64_t)ch * plane;
            memset(d, 0, (size_t)(PY * c->WP) * sizeof(float));
            for (int64_t r = 0; r < H; r++) {
                float *dr = d + (PY + r) * c->WP;
                for (int64_t t = 0; t < PX; t++) dr[t] = 0.0f;
                memcpy(dr + PX, src + r * W, (size_t)W * sizeof(float));
                for (int64_t t = PX + W; t < c->WP; t++) dr[t] = 0.0f;
            }
            memset(d + (PY + H) * c->WP, 0, (size_t)((c->HP - PY - H) * c->WP) * sizeof(float));
            continue;
        }
        /* phase (py, px), row r, column q = padded input (r*SY + py, q*SX + px) */
        for (int64_t py = 0; py < SY; py++)
            for (int64_t px = 0; px < SX; px++) {
                float *d = c->xp + ((int64_t)ch * SY * SX + py * SX + px) * plane;
                for (int64_t r = 0; r < c->HP; r++) {
                    float *dr = d + r * c->WP;
                    int64_t iy = r * SY + py - PY;
                    if (iy < 0 || iy >= H) {
                        memset(dr, 0, (size_t)c->WP * sizeof(float));
                        continue;
                    }
                    const float *sr = src + iy * W;
                    for (int64_t q = 0; q < c->WP; q++) {
                        int64_t ix = q * SX + px - PX;
                        dr[q] = ix >= 0 && ix < W ? sr[ix] : 0.0f;
                    }
                }
            }
    }
}


#define FZ_KC KL__KC       /* k rows per packed block (= packed A's blocks) */
#define FZ_NB 128          /* max columns per tile (stack: FZ_KC x FZ_NB floats) */
#define FZ_MB 512          /* max output channels per tile */
#define FZ_MIN_TILES 16    /* split tiles until there are this many (load balance) */

typedef struct {
    const kl_conv_params *p;
    sp3 s;                 /* spatial view (pointwise: flattened to 1-D) */
    const float *x, *pw, *bias, *res;
    float *y;
    int64_t G, Cg, Mg, Kg, per_a;
    int64_t cols;          /* columns per group: N * out_vol (images side by side) */
    int64_t mb, nb, tm, tn;
    float *bpk;            /* B packed for all columns when tm > 1: [G][panel][Kg][NR] */
    int imp;               /* B read in place, per image: 1 the OH x WP grid of
                            * padded planes (one image at a time), 2 pointwise: x */
    int64_t nimg, n0;      /* images per tile region, the first one */
    int64_t slots;         /* imp 1: images processed at once, each whole by one
                            * thread with its own padded planes (small images
                            * in a batch); 1 = one image at a time, tiles in
                            * parallel */
    int64_t HP, WP, cplane;
    const float *xp;       /* 1: padded planes [C][phase][HP][WP] + 64; 2: x */
    int32_t *koff;         /* Kg offsets into a group's planes */
    int64_t npanel;
    size_t ntiles;
    _Atomic size_t next;
} fz_ctx;

/* Bits lo..hi-1 of a 64-bit lane mask. */
static inline uint64_t lane_bits(int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 64) hi = 64;
    if (hi <= lo) return 0;
    return (hi == 64 ? ~(uint64_t)0 : (((uint64_t)1 << hi) - 1)) & ~(((uint64_t)1 << lo) - 1);
}

/* Packs rows [k0, k0 + kc) x columns [j0, j1) of the im2col matrix of one
 * group (xg: (Cg, in_vol) of image 0, images xstride apart; column j is
 * position j % out_vol of image j / out_vol) into dst: panel (j - j0) / NR
 * at dst + that * pstride, as [kc][NR]. A panel is cut into runs of
 * consecutive ox (same image, oz, oy); each packed row is built in two
 * registers from masked loads (stride 1), two loads + an even-lane permute
 * (stride 2) or gathers (other strides), lanes outside the input staying zero
 * (padding). Masked-off lanes are never read. */
__attribute__((target("avx512f"))) static void pack_block(const sp3 *s, const float *xg, int64_t xstride,
                                                         int64_t k0, int64_t kc, int64_t j0, int64_t j1, float *dst,
                                                         int64_t pstride) {
    int64_t OW = s->out[2], OHW = s->out[1] * OW, W = s->in[2], sx = s->s[2];
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t jp = j0; jp < j1; jp += KL__NR) {
        int64_t n = KL_MIN(KL__NR, j1 - jp);
        float *d = dst + (jp - j0) / KL__NR * pstride;
        int64_t rz[KL__NR], ry[KL__NR], rx[KL__NR], rl[KL__NR], ro[KL__NR], ri[KL__NR];
        int nrun = 0;
        for (int64_t j = jp; j < jp + n;) {
            int64_t img = j / s->out_vol, jj = j % s->out_vol;
            int64_t oz = jj / OHW, oy = (jj % OHW) / OW, ox = jj % OW;
            int64_t len = KL_MIN(OW - ox, jp + n - j);
            ri[nrun] = img * xstride;
            rz[nrun] = oz * s->s[0] - s->pb[0];
            ry[nrun] = oy * s->s[1] - s->pb[1];
            rx[nrun] = ox * sx - s->pb[2];
            rl[nrun] = len;
            ro[nrun] = j - jp;
            nrun++;
            j += len;
        }
        int64_t ch = k0 / s->k_vol, kk = k0 % s->k_vol;
        int64_t kx = kk % s->k[2], ky = (kk / s->k[2]) % s->k[1], kz = kk / (s->k[2] * s->k[1]);
        for (int64_t k = 0; k < kc; k++) {
            const float *xc = xg + ch * s->in_vol;
            __m512 v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
            int64_t tz = kz * s->d[0], ty = ky * s->d[1], tx = kx * s->d[2];
            for (int r = 0; r < nrun; r++) {
                int64_t iz = rz[r] + tz, iy = ry[r] + ty;
                if (iz < 0 || iz >= s->in[0] || iy < 0 || iy >= s->in[1]) continue;
                const float *xr = xc + ri[r] + (iz * s->in[1] + iy) * W;
                int64_t ix = rx[r] + tx; /* input column of lane ro[r] */
                int64_t lo, hi;
                if (sx == 1) {
                    lo = ix >= 0 ? 0 : -ix;
                    hi = W - ix;
                } else if (sx == 2) {
                    lo = ix >= 0 ? 0 : (-ix + 1) >> 1;
                    hi = W - ix <= 0 ? 0 : (W - ix + 1) >> 1;
                } else {
                    lo = ix >= 0 ? 0 : (-ix + sx - 1) / sx;
                    hi = W - ix <= 0 ? 0 : (W - ix + sx - 1) / sx;
                }
                if (hi > rl[r]) hi = rl[r];
                if (lo >= hi) continue;
                uint32_t m = (uint32_t)lane_bits(ro[r] + lo, ro[r] + hi);
                /* lane t reads xr[ix + (t - ro)*sx]: base = xr + ix - ro*sx (never
                 * dereferenced outside the valid lanes) */
                uintptr_t base = (uintptr_t)xr + (uintptr_t)((ix - ro[r] * sx) * (int64_t)sizeof(float));
                if (sx == 1) {
                    v0 = _mm512_mask_loadu_ps(v0, (__mmask16)m, (const void *)base);
                    v1 = _mm512_mask_loadu_ps(v1, (__mmask16)(m >> 16), (const void *)(base + 64));
                } else if (sx == 2) {
                    /* elements 2t of the 64 floats from base, for the valid lanes t */
                    uint64_t em = lane_bits(2 * (ro[r] + lo), 2 * (ro[r] + hi) - 1);
                    if (m & 0xFFFF) {
                        __m512 a = _mm512_maskz_loadu_ps((__mmask16)em, (const void *)base);
                        __m512 b = _mm512_maskz_loadu_ps((__mmask16)(em >> 16), (const void *)(base + 64));
                        v0 = _mm512_mask_mov_ps(v0, (__mmask16)m, _mm512_permutex2var_ps(a, ev, b));
                    }
                    if (m >> 16) {
                        __m512 a = _mm512_maskz_loadu_ps((__mmask16)(em >> 32), (const void *)(base + 128));
                        __m512 b = _mm512_maskz_loadu_ps((__mmask16)(em >> 48), (const void *)(base + 192));
                        v1 = _mm512_mask_mov_ps(v1, (__mmask16)(m >> 16), _mm512_permutex2var_ps(a, ev, b));
                    }
                } else {
                    __m512i i0 = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sx));
                    __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32((int)(16 * sx)));
                    v0 = _mm512_mask_i32gather_ps(v0, (__mmask16)m, i0, (const void *)base, 4);
                    v1 = _mm512_mask_i32gather_ps(v1, (__mmask16)(m >> 16), i1, (const void *)base, 4);
                }
            }
            _mm512_store_ps(d + k * KL__NR, v0);
            _mm512_store_ps(d + k * KL__NR + 16, v1);
            if (++kx == s->k[2]) {
                kx = 0;
                if (++ky == s->k[1]) {
                    ky = 0;
                    if (++kz == s->k[0]) { kz = 0; ch++; }
                }
            }
        }
    }
}

static int64_t rup(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* Tile sizes from the shape only (never the thread count): all the output
 * channels of a group (up to FZ_MB) and up to FZ_NB columns, split (columns
 * first, channels when columns run out) until there are FZ_MIN_TILES. */
static void fz_plan(fz_ctx *c) {
    int64_t cols = c->cols;
    int64_t tn = (cols + FZ_NB - 1) / FZ_NB;
    int64_t nb = rup((cols + tn - 1) / tn, KL__NR);
    int64_t mb = KL_MIN(rup(c->Mg, KL__MR), FZ_MB);
    /* weights larger than the im2col matrix: split the channels (B is then
     * packed once in a pre-pass, or read in place, A read once); else split
     * the columns (each tile packs its own B, A re-read from cache) */
    int m_first = c->Mg > cols;
    for (;;) {
        int64_t tiles = c->nimg * c->G * ((c->Mg + mb - 1) / mb) * ((cols + nb - 1) / nb);
        if (tiles >= FZ_MIN_TILES) break;
        if (m_first && mb >= 64) mb = rup(mb / 2, KL__MR);
        else if (nb >= 64) nb = rup(nb / 2, KL__NR);
        else if (mb >= 64) mb = rup(mb / 2, KL__MR);
        else break;
    }
    c->mb = mb;
    c->nb = nb;
    c->tm = (c->Mg + mb - 1) / mb;
    c->tn = (cols + nb - 1) / nb;
    c->ntiles = (size_t)(c->nimg * c->G * c->tm * c->tn);
    c->npanel = (cols + KL__NR - 1) / KL__NR;
}

/* Pre-pass when output channels are split over tiles (few columns): B packed
 * once per (group, panel) instead of once per tile. */
static void fz_pack_range(void *vc, size_t b, size_t e, int chunk) {
    fz_ctx *c = vc;
    for (size_t t = b; t < e; t++) {
        int64_t g = (int64_t)t / c->npanel, q = (int64_t)t % c->npanel;
        int64_t j0 = q * KL__NR, j1 = KL_MIN(c->cols, j0 + KL__NR);
        pack_block(&c->s, c->x + g * c->Cg * c->s.in_vol, c->p->C * c->s.in_vol, 0, c->Kg, j0, j1,
                   c->bpk + (g * c->npanel + q) * c->Kg * KL__NR, 0);
    }
}

static void fz_tile_imp(fz_ctx *c, size_t t) {
    const kl_conv_params *p = c->p;
    int64_t per = c->tm * c->tn, ng = (int64_t)t / per, r = (int64_t)t % per;
    int64_t n = c->n0 + ng / c->G, g = ng % c->G, tj = r / c->tm, ti = r % c->tm;
    int64_t i0 = ti * c->mb, i1 = KL_MIN(c->Mg, i0 + c->mb);
    int64_t j0 = tj * c->nb, j1 = KL_MIN(c->cols, j0 + c->nb);
    int64_t ov = c->s.out_vol, yo = (n * p->M + g * c->Mg) * ov;
    /* 1: xp holds image n only */
    int64_t xo = c->imp == 1 ? g * c->Cg * c->cplane : (n * p->C + g * c->Cg) * c->cplane;
    kl__pgemm pg = {.M = c->Mg, .N = c->cols, .K = c->Kg, .ap = c->pw + g * c->per_a,
                    .b = c->xp + xo, .boff = c->imp == 1 ? c->koff : NULL,
                    .ldb = c->cplane, .c = c->y + yo, .ldc = ov,
                    .bias = c->bias ? c->bias + g * c->Mg : NULL, .bias_rows = 1,
                    .res = c->res ? c->res + yo : NULL, .ldr = ov, .act = p->act,
                    .cseg = c->imp == 1 ? c->WP : 0, .cskip = c->s.out[2] - c->WP, .cvalid = c->s.out[2]};
    for (int64_t k0 = 0; k0 < c->Kg; k0 += FZ_KC)
        kl__pgemm_kblock(&pg, i0, i1, j0, j1, k0, KL_MIN(FZ_KC, c->Kg - k0), NULL, 0);
}

static void fz_tile(fz_ctx *c, size_t t) {
    const kl_conv_params *p = c->p;
    if (c->imp) {
        fz_tile_imp(c, t);
        return;
    }
    int64_t per_g = c->tm * c->tn, g = (int64_t)t / per_g, r = (int64_t)t % per_g;
    int64_t tj = r / c->tm, ti = r % c->tm;
    int64_t i0 = ti * c->mb, i1 = KL_MIN(c->Mg, i0 + c->mb);
    int64_t j0 = tj * c->nb, j1 = KL_MIN(c->cols, j0 + c->nb);
    int64_t ov = c->s.out_vol, yo = g * c->Mg * ov;
    kl__pgemm pg = {.M = c->Mg, .N = c->cols, .K = c->Kg, .ap = c->pw + g * c->per_a, .c = c->y + yo, .ldc = ov,
                    .bias = c->bias ? c->bias + g * c->Mg : NULL, .bias_rows = 1,
                    .res = c->res ? c->res + yo : NULL, .ldr = ov, .act = p->act,
                    .cseg = p->N > 1 ? ov : 0, .cskip = (p->M - 1) * ov};
    if (c->bpk) {
        const float *bp = c->bpk + (g * c->npanel + j0 / KL__NR) * c->Kg * KL__NR;
        for (int64_t k0 = 0; k0 < c->Kg; k0 += FZ_KC)
            kl__pgemm_kblock(&pg, i0, i1, j0, j1, k0, KL_MIN(FZ_KC, c->Kg - k0), bp + k0 * KL__NR, c->Kg * KL__NR);
        return;
    }
    const float *xg = c->x + g * c->Cg * c->s.in_vol;
    _Alignas(64) float bblk[FZ_KC * FZ_NB];
    for (int64_t k0 = 0; k0 < c->Kg; k0 += FZ_KC) {
        int64_t kc = KL_MIN(FZ_KC, c->Kg - k0);
        pack_block(&c->s, xg, p->C * c->s.in_vol, k0, kc, j0, j1, bblk, kc * KL__NR);
        kl__pgemm_kblock(&pg, i0, i1, j0, j1, k0, kc, bblk, kc * KL__NR);
    }
}

static void fz_worker(void *vc, size_t b, size_t e, int chunk) {
    fz_ctx *c = vc;
    for (;;) {
        size_t t = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (t >= c->ntiles) break;
        fz_tile(c, t);
    }
}

/* Slot mode of the implicit GEMM: slot sl pads and computes images sl,
 * sl + slots, ... on its own planes, every tile of an image in order. */
typedef struct {
    const fz_ctx *c;
    int64_t slot_floats;
} slot_ctx;

static void slot_images(void *vc, size_t s0, size_t s1, int chunk) {
    const slot_ctx *sc = vc;
    const fz_ctx *c = sc->c;
    const kl_conv_params *p = c->p;
    for (size_t sl = s0; sl < s1; sl++) {
        fz_ctx cs;
        memcpy(&cs, c, sizeof cs);
        float *xp = (float *)c->xp + (int64_t)sl * sc->slot_floats;
        cs.xp = xp;
        for (int64_t n = (int64_t)sl; n < p->N; n += c->slots) {
            pad_ctx pc = {&c->s, c->x + n * p->C * c->s.in_vol, xp, c->HP, c->WP};
            pad_planes(&pc, 0, (size_t)p->C, 0);
            cs.n0 = n;
            atomic_init(&cs.next, 0);
            fz_worker(&cs, 0, 1, 0);
        }
    }
}

/* The GEMM view and tile plan of a conv (shape only). */
static void fz_setup(const kl_conv_params *p, const sp3 *s, fz_ctx *c) {
    c->p = p;
    c->s = *s;
    c->G = p->group;
    c->Cg = p->C / c->G;
    c->Mg = p->M / c->G;
    c->Kg = c->Cg * s->k_vol;
    c->per_a = (int64_t)kl__pgemm_packed_a_floats(c->Mg, c->Kg);
    if (is_pointwise(p)) {
        /* 1x1, stride 1, no pads: the spatial volume is one row */
        memset(&c->s, 0, sizeof c->s);
        for (int i = 0; i < 3; i++) c->s.in[i] = c->s.out[i] = c->s.k[i] = c->s.s[i] = c->s.d[i] = 1;
        c->s.in[2] = c->s.out[2] = s->out_vol;
        c->s.in_vol = c->s.out_vol = s->out_vol;
        c->s.k_vol = 1;
    }
    c->cols = p->N * c->s.out_vol;
    int64_t HP, WP;
    c->nimg = 1;
    if (is_pointwise(p)) {
        /* in place even when a batch of small images would pack tighter:
         * packing costs more than the spare columns (measured) */
        c->imp = 2;
        c->nimg = p->N;
        c->cplane = s->in_vol;
        c->cols = s->out_vol;
        c->s.out[2] = c->WP = s->out_vol;
    } else if (implicit_dims(p, s, &HP, &WP)) {
        /* in place from padded planes, one image per tile: unless a batch of
         * small images packs tighter side by side (7x7: 63 of 64 grid columns
         * hold 49 outputs) */
        int64_t grid = s->out[1] * WP;
        if (p->N == 1 || (double)rup(grid, KL__NR) <= 1.15 * (double)s->out_vol) {
            c->imp = 1;
            /* an image with too little work for a parallel region of its own
             * (a batch of 28x28 / 14x14 images with few channels: one region
             * per image kept the other threads waiting): whole images in
             * parallel instead, a fixed number of slots of padded planes */
            double img_macs = (double)(p->M / p->group) * (double)grid * (double)(p->C / p->group * s->k_vol);
            c->slots = p->N > 1 && img_macs < 8e6 ? KL_MIN(p->N, 4) : 1;
            c->HP = HP;
            c->WP = WP;
            c->cplane = s->s[1] * s->s[2] * HP * WP;
            c->cols = grid;
        }
    }
    fz_plan(c);
}

/* Workspace floats: packed weights (unless pre-packed), then the B pre-pack. */
static size_t fz_ws_floats(const kl_conv_params *p, const fz_ctx *c, size_t *bpk_at) {
    size_t at = p->packed_w ? 0 : (kl_conv_packed_floats(p) + 15) / 16 * 16;
    *bpk_at = at;
    if (c->imp == 2) return at;
    if (c->imp) return at + (size_t)KL_MAX(c->slots, 1) * (size_t)(p->C * c->cplane + 64) + (size_t)c->Kg + 16;
    return at + (c->tm > 1 ? (size_t)(c->G * c->npanel * c->Kg * KL__NR) : 0);
}

static int conv_packed(const kl_conv_params *p, const sp3 *s, const float *x, const float *w, const float *bias,
                       float *y, void *ws, kl_pool *pool, kl_err *e) {
    fz_ctx c;
    memset(&c, 0, sizeof c);
    fz_setup(p, s, &c);
    c.x = x;
    c.bias = bias;
    c.res = p->residual;
    c.y = y;
    size_t bpk_at, need = fz_ws_floats(p, &c, &bpk_at);
    void *own = NULL;
    if (!ws && need && !(ws = own = kl_mem_alloc_e(need * sizeof(float), KL_TAG_WORKSPACE, e)))
        return e ? e->code : KL_ENOMEM;
    c.pw = p->packed_w;
    if (!c.pw) {
        kl_conv_pack_weights(p, w, ws);
        c.pw = ws;
    }
    size_t workers = KL_MIN((size_t)kl_pool_threads(pool), c.ntiles);
    if (c.imp == 1) {
        /* image by image: its padded planes stay in cache for its tiles */
        int64_t SY = s->s[1], SX = s->s[2], HW = c.HP * c.WP;
        float *xp = (float *)ws + bpk_at;
        int64_t slot_floats = p->C * c.cplane + 64;
        c.xp = xp;
        c.koff = (int32_t *)(xp + c.slots * slot_floats);
        int64_t k = 0;
        for (int64_t ch = 0; ch < c.Cg; ch++)
            for (int64_t ky = 0; ky < s->k[1]; ky++)
                for (int64_t kx = 0; kx < s->k[2]; kx++) {
                    int64_t ty = ky * s->d[1], tx = kx * s->d[2];
                    c.koff[k++] = (int32_t)(ch * c.cplane + ((ty % SY) * SX + tx % SX) * HW + ty / SY * c.WP + tx / SX);
                }
        for (int64_t sl = 0; sl < c.slots; sl++) memset(xp + sl * slot_floats + p->C * c.cplane, 0, 64 * sizeof(float));
        if (c.slots > 1) {
            slot_ctx sc = {&c, slot_floats};
            kl_pool_parallel_for(pool, (size_t)c.slots, 1, slot_images, &sc);
            kl_mem_free(own);
            return KL_OK;
        }
        for (int64_t n = 0; n < p->N; n++) {
            pad_ctx pc = {s, x + n * p->C * s->in_vol, xp, c.HP, c.WP};
            kl_pool_parallel_for(pool, (size_t)p->C, 4, pad_planes, &pc);
            c.n0 = n;
            atomic_init(&c.next, 0);
            if (workers <= 1) fz_worker(&c, 0, 1, 0);
            else kl_pool_parallel_for(pool, workers, 1, fz_worker, &c);
        }
        kl_mem_free(own);
        return KL_OK;
    }
    if (c.imp == 2) c.xp = x;
    else if (c.tm > 1) {
        c.bpk = (float *)ws + bpk_at;
        kl_pool_parallel_for(pool, (size_t)(c.G * c.npanel), 1, fz_pack_range, &c);
    }
    atomic_init(&c.next, 0);
    if (workers <= 1) fz_worker(&c, 0, 1, 0);
    else kl_pool_parallel_for(pool, workers, 1, fz_worker, &c);
    kl_mem_free(own);
    return KL_OK;
}

size_t kl_conv_workspace_bytes(const kl_conv_params *p) {
    sp3 s;
    if (p->N == 0) return 0; /* an empty batch runs nothing (kl_conv_f32) */
    to_sp3(p->nsp, p->in, p->k, p->stride, p->dilation, p->pad_begin, p->out, &s);
    if (use_packed(p)) {
        fz_ctx c;
        size_t at;
        memset(&c, 0, sizeof c);
        fz_setup(p, &s, &c);
        return fz_ws_floats(p, &c, &at) * sizeof(float);
    }
    if (is_pointwise(p) || is_depthwise2d(p)) return 0;
    int64_t groups = p->group >= GROUP_PARALLEL_MIN ? p->group : 1;
    return (size_t)(groups * (p->C / p->group) * s.k_vol * s.out_vol) * sizeof(float);
}

/* Residual + activation after a path without a fused residual. */
typedef struct {
    const float *r;
    float *y;
    int64_t n;
    kl_act act;
} res_ctx;

static void res_range(void *vc, size_t b0, size_t b1, int chunk) {
    res_ctx *c = vc;
    for (size_t b = b0; b < b1; b++) {
        int64_t i0 = (int64_t)b * KL__ELEM_BLOCK, i1 = KL_MIN(c->n, i0 + KL__ELEM_BLOCK);
        for (int64_t i = i0; i < i1; i++) c->y[i] += c->r[i];
        kl__act_apply_range(c->act, c->y + i0, i1 - i0);
    }
}

/* ==================================================================
 * Entry
 * ================================================================== */

int kl_conv_f32(const kl_conv_params *p, const float *x, const float *w, const float *bias, float *y, void *ws,
                kl_pool *pool, kl_err *e) {
    sp3 s;
    void *own = NULL;
    int rc = KL_OK;
    to_sp3(p->nsp, p->in, p->k, p->stride, p->dilation, p->pad_begin, p->out, &s);
    int64_t G = p->group, Cg = p->C / G, Mg = p->M / G;
    if (p->N == 0) return KL_OK;
    if (use_packed(p)) return conv_packed(p, &s, x, w, bias, y, ws, pool, e);
    if (p->residual) {
        /* unfused: conv without act, then + residual and act */
        kl_conv_params q = *p;
        q.residual = NULL;
        q.act = (kl_act){KL_ACT_NONE, 0, 0};
        if ((rc = kl_conv_f32(&q, x, w, bias, y, ws, pool, e))) return rc;
        res_ctx rcx = {p->residual, y, p->N * p->M * s.out_vol, p->act};
        kl_pool_parallel_for(pool, (size_t)((rcx.n + KL__ELEM_BLOCK - 1) / KL__ELEM_BLOCK), 1, res_range, &rcx);
        return KL_OK;
    }
    if (is_depthwise2d(p)) {
        kl__dwconv2d_f32(p, x, w, bias, y, pool);
        return KL_OK;
    }
    if (is_pointwise(p)) {
        for (int64_t n = 0; n < p->N; n++)
            for (int64_t g = 0; g < G; g++)
                kl__gemm_ex(0, 0, Mg, s.out_vol, Cg, w + g * Mg * Cg, Cg, x + (n * p->C + g * Cg) * s.in_vol, s.in_vol,
                            y + (n * p->M + g * Mg) * s.out_vol, s.out_vol, bias ? bias + g * Mg : NULL, 1, p->act, pool);
        return KL_OK;
    }
    size_t need = kl_conv_workspace_bytes(p);
    if (!ws) {
        ws = own = kl_mem_alloc_e(need, KL_TAG_WORKSPACE, e);
        if (!ws) return e ? e->code : KL_ENOMEM;
    }
    float *col = ws;
    int64_t rows = Cg * s.k_vol;
    if (G >= GROUP_PARALLEL_MIN) {
        grp_ctx gc = {p, &s, x, w, bias, y, col, 0};
        for (int64_t n = 0; n < p->N; n++) {
            gc.n = n;
            kl_pool_parallel_for(pool, (size_t)G, 1, grp_range, &gc);
        }
        kl_mem_free(own);
        return rc;
    }
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t g = 0; g < G; g++) {
            i2c_ctx c = {&s, x + (n * p->C + g * Cg) * s.in_vol, col};
            kl_pool_parallel_for(pool, (size_t)rows, (size_t)KL_MAX(1, 4096 / KL_MAX(1, s.out_vol)), im2col_rows, &c);
            kl__gemm_ex(0, 0, Mg, s.out_vol, rows, w + g * Mg * rows, rows, col, s.out_vol,
                        y + (n * p->M + g * Mg) * s.out_vol, s.out_vol, bias ? bias + g * Mg : NULL, 1, p->act, pool);
        }
    kl_mem_free(own);
    return rc;
}

/* ==================================================================
 * Pooling
 * ================================================================== */

int kl_pooling_prepare(kl_pooling_params *p, kl_err *e) {
    if (p->nsp < 1 || p->nsp > 3) return kl_err_set(e, KL_EUNSUPPORTED, "pool: %d spatial dims (1..3 supported)", p->nsp);
    if (p->N < 0 || p->C < 0) return kl_err_set(e, KL_ESHAPE, "pool: bad N/C");
    for (int i = 0; i < p->nsp; i++) {
        if (p->stride[i] <= 0) p->stride[i] = 1;
        if (p->dilation[i] <= 0) p->dilation[i] = 1;
        if (p->k[i] <= 0 || p->in[i] < 0 || p->pad_begin[i] < 0 || p->pad_end[i] < 0)
            return kl_err_set(e, KL_ESHAPE, "pool: bad kernel/input/pads at spatial axis %d", i);
        if (p->pad_begin[i] >= p->k[i] * p->dilation[i] || p->pad_end[i] >= p->k[i] * p->dilation[i])
            return kl_err_set(e, KL_ESHAPE, "pool: padding %lld/%lld not smaller than the kernel %lld at spatial axis %d",
                              (long long)p->pad_begin[i], (long long)p->pad_end[i], (long long)p->k[i], i);
        int64_t span = p->dilation[i] * (p->k[i] - 1) + 1;
        int64_t num = p->in[i] + p->pad_begin[i] + p->pad_end[i] - span;
        if (num < 0) return kl_err_set(e, KL_ESHAPE, "pool: kernel larger than padded input at spatial axis %d", i);
        int64_t o = (p->ceil_mode ? (num + p->stride[i] - 1) / p->stride[i] : num / p->stride[i]) + 1;
        if (p->ceil_mode && (o - 1) * p->stride[i] >= p->in[i] + p->pad_begin[i]) o--;
        p->out[i] = o;
    }
    return KL_OK;
}

typedef struct {
    const kl_pooling_params *p;
    sp3 s;
    int64_t pe[3];
    const float *x;
    float *y;
    int64_t *idx;
    int avg;
} pool_ctx;

/* 2-D (and 1-D) fast path without indices: per output row, accumulate
 * window rows with vectorisable loops over the valid output columns. */
static void pool_plane_2d(const pool_ctx *c, size_t pl) {
    const sp3 *s = &c->s;
    int64_t H = s->in[1], W = s->in[2], OH = s->out[1], OW = s->out[2];
    int64_t KH = s->k[1], KW = s->k[2], SY = s->s[1], SX = s->s[2], DY = s->d[1], DX = s->d[2];
    int64_t PY = s->pb[1], PX = s->pb[2];
    const float *x = c->x + (int64_t)pl * H * W;
    float *y = c->y + (int64_t)pl * OH * OW;
    for (int64_t oy = 0; oy < OH; oy++) {
        float *acc = y + oy * OW;
        float init = c->avg ? 0.0f : -INFINITY;
        for (int64_t ox = 0; ox < OW; ox++) acc[ox] = init;
        int64_t nky = 0, nky_pad = 0;
        for (int64_t ky = 0; ky < KH; ky++) {
            int64_t iy = oy * SY - PY + ky * DY;
            if (iy < H + c->pe[1]) nky_pad++;
            if (iy < 0 || iy >= H) continue;
            nky++;
            const float *xr = x + iy * W;
            for (int64_t kx = 0; kx < KW; kx++) {
                int64_t off = kx * DX - PX;
                int64_t lo = off >= 0 ? 0 : (-off + SX - 1) / SX;
                int64_t hi = W - off <= 0 ? 0 : (W - off + SX - 1) / SX;
                if (hi > OW) hi = OW;
                const float *xs = xr + off;
                if (c->avg) {
                    if (SX == 1) for (int64_t ox = lo; ox < hi; ox++) acc[ox] += xs[ox];
                    else for (int64_t ox = lo; ox < hi; ox++) acc[ox] += xs[ox * SX];
                } else {
                    if (SX == 1)
                        for (int64_t ox = lo; ox < hi; ox++) { float v = xs[ox]; acc[ox] = acc[ox] >= v || acc[ox] != acc[ox] ? acc[ox] : v; }
                    else if (SX == 2)
                        for (int64_t ox = lo; ox < hi; ox++) { float v = xs[2 * ox]; acc[ox] = acc[ox] >= v || acc[ox] != acc[ox] ? acc[ox] : v; }
                    else
                        for (int64_t ox = lo; ox < hi; ox++) { float v = xs[ox * SX]; acc[ox] = acc[ox] >= v || acc[ox] != acc[ox] ? acc[ox] : v; }
                }
            }
        }
        if (c->avg)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t nkx = 0, nkx_pad = 0;
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t ix = ox * SX - PX + kx * DX;
                    if (ix < W + c->pe[2]) nkx_pad++;
                    if (ix >= 0 && ix < W) nkx++;
                }
                int64_t div = c->p->count_include_pad ? nky_pad * nkx_pad : nky * nkx;
                acc[ox] = div > 0 ? acc[ox] / (float)div : 0.0f;
            }
    }
}

static void pool_planes(void *vc, size_t p0, size_t p1, int chunk) {
    pool_ctx *c = vc;
    const sp3 *s = &c->s;
    if (!c->idx && s->in[0] == 1 && s->k[0] == 1 && s->out[0] == 1) {
        for (size_t pl = p0; pl < p1; pl++) pool_plane_2d(c, pl);
        return;
    }
    for (size_t pl = p0; pl < p1; pl++) {
        const float *x = c->x + (int64_t)pl * s->in_vol;
        float *y = c->y + (int64_t)pl * s->out_vol;
        int64_t *ix = c->idx ? c->idx + (int64_t)pl * s->out_vol : NULL;
        for (int64_t oz = 0; oz < s->out[0]; oz++)
            for (int64_t oy = 0; oy < s->out[1]; oy++)
                for (int64_t ox = 0; ox < s->out[2]; ox++) {
                    int64_t o[3] = {oz, oy, ox}, b[3], lo[3], hi[3];
                    int64_t padded = 1;
                    for (int i = 0; i < 3; i++) {
                        b[i] = o[i] * s->s[i] - s->pb[i];
                        int64_t endp = b[i] + (s->k[i] - 1) * s->d[i] + 1;
                        int64_t lim = s->in[i] + c->pe[i];
                        int64_t cnt = 0;
                        for (int64_t k = 0; k < s->k[i]; k++) {
                            int64_t q = b[i] + k * s->d[i];
                            if (q < lim) cnt++;
                        }
                        (void)endp;
                        padded *= cnt;
                        lo[i] = 0;
                        hi[i] = s->k[i];
                    }
                    float best = -INFINITY, sum = 0;
                    int64_t bi = -1, n = 0;
                    for (int64_t kz = lo[0]; kz < hi[0]; kz++) {
                        int64_t iz = b[0] + kz * s->d[0];
                        if (iz < 0 || iz >= s->in[0]) continue;
                        for (int64_t ky = lo[1]; ky < hi[1]; ky++) {
                            int64_t iy = b[1] + ky * s->d[1];
                            if (iy < 0 || iy >= s->in[1]) continue;
                            const float *xr = x + (iz * s->in[1] + iy) * s->in[2];
                            for (int64_t kx = lo[2]; kx < hi[2]; kx++) {
                                int64_t ixx = b[2] + kx * s->d[2];
                                if (ixx < 0 || ixx >= s->in[2]) continue;
                                float v = xr[ixx];
                                if (c->avg) { sum += v; n++; }
                                else if (bi < 0 || v > best || (v != v && best == best)) {
                                    best = v;
                                    bi = (iz * s->in[1] + iy) * s->in[2] + ixx;
                                }
                            }
                        }
                    }
                    int64_t oi = (oz * s->out[1] + oy) * s->out[2] + ox;
                    if (c->avg) {
                        int64_t div = c->p->count_include_pad ? padded : n;
                        y[oi] = div > 0 ? sum / (float)div : 0.0f;
                    } else {
                        y[oi] = best;
                        if (ix) ix[oi] = bi < 0 ? 0 : (int64_t)pl * s->in_vol + bi;
                    }
                }
    }
}

static void pool_run(const kl_pooling_params *p, const float *x, float *y, int64_t *idx, int avg, kl_pool *pool) {
    pool_ctx c = {.p = p, .x = x, .y = y, .idx = idx, .avg = avg};
    to_sp3(p->nsp, p->in, p->k, p->stride, p->dilation, p->pad_begin, p->out, &c.s);
    int off = 3 - p->nsp;
    for (int i = 0; i < 3; i++) c.pe[i] = i - off >= 0 ? p->pad_end[i - off] : 0;
    size_t planes = (size_t)(p->N * p->C);
    if (planes == 0) return;
    kl_pool_parallel_for(pool, planes, (size_t)KL_MAX(1, 4096 / KL_MAX(1, c.s.out_vol * c.s.k_vol)), pool_planes, &c);
}

void kl_maxpool_f32(const kl_pooling_params *p, const float *x, float *y, int64_t *indices, kl_pool *pool) {
    pool_run(p, x, y, indices, 0, pool);
}

void kl_avgpool_f32(const kl_pooling_params *p, const float *x, float *y, kl_pool *pool) {
    pool_run(p, x, y, NULL, 1, pool);
}

typedef struct {
    int64_t S;
    const float *x;
    float *y;
    int avg;
} gp_ctx;

static void gp_rows(void *vc, size_t r0, size_t r1, int chunk) {
    gp_ctx *c = vc;
    for (size_t r = r0; r < r1; r++) {
        const float *x = c->x + (int64_t)r * c->S;
        if (c->avg) c->y[r] = c->S ? kl__sum_f32(x, c->S) / (float)c->S : 0.0f;
        else {
            float m = -INFINITY;
            for (int64_t i = 0; i < c->S; i++) if (x[i] > m || x[i] != x[i]) { m = x[i]; if (m != m) break; }
            c->y[r] = m;
        }
    }
}

void kl_global_avgpool_f32(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool) {
    gp_ctx c = {S, x, y, 1};
    kl_pool_parallel_for(pool, (size_t)(N * C), (size_t)KL_MAX(1, 16384 / KL_MAX(1, S)), gp_rows, &c);
}

void kl_global_maxpool_f32(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool) {
    gp_ctx c = {S, x, y, 0};
    kl_pool_parallel_for(pool, (size_t)(N * C), (size_t)KL_MAX(1, 16384 / KL_MAX(1, S)), gp_rows, &c);
}
