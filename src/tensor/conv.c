/* Convolution (1-3 spatial dims, NC...): pointwise as plain GEMM, a direct
 * path for depthwise 2-D kernels, im2col + GEMM otherwise; bias and the fused
 * activation are applied in the GEMM epilogue. 1-D and 2-D problems run as
 * 3-D problems with leading unit dims. */
#include "keel/tensor.h"
#include "tensor_int.h"

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

size_t kl_conv_workspace_bytes(const kl_conv_params *p) {
    if (is_pointwise(p) || is_depthwise2d(p)) return 0;
    sp3 s;
    to_sp3(p->nsp, p->in, p->k, p->stride, p->dilation, p->pad_begin, p->out, &s);
    return (size_t)((p->C / p->group) * s.k_vol * s.out_vol) * sizeof(float);
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
 * Depthwise 2-D direct
 * ================================================================== */

typedef struct {
    const kl_conv_params *p;
    const sp3 *s;
    const float *x, *w, *bias;
    float *y;
} dw_ctx;

static void dw_planes(void *vc, size_t p0, size_t p1, int chunk) {
    dw_ctx *c = vc;
    const sp3 *s = c->s;
    int64_t H = s->in[1], W = s->in[2], OH = s->out[1], OW = s->out[2];
    int64_t KH = s->k[1], KW = s->k[2], SY = s->s[1], SX = s->s[2], DY = s->d[1], DX = s->d[2];
    int64_t PY = s->pb[1], PX = s->pb[2];
    for (size_t pl = p0; pl < p1; pl++) {
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
                    if (SX == 1) {
                        const float *xs = xr + off;
                        for (int64_t ox = lo; ox < hi; ox++) acc[ox] += wv * xs[ox];
                    } else if (SX == 2) {
                        const float *xs = xr + off;
                        for (int64_t ox = lo; ox < hi; ox++) acc[ox] += wv * xs[2 * ox];
                    } else {
                        for (int64_t ox = lo; ox < hi; ox++) acc[ox] += wv * xr[ox * SX + off];
                    }
                }
            }
            kl__act_apply_range(c->p->act, acc, OW);
        }
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
    if (is_depthwise2d(p)) {
        dw_ctx c = {p, &s, x, w, bias, y};
        kl_pool_parallel_for(pool, (size_t)(p->N * p->C), 1, dw_planes, &c);
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

static void pool_planes(void *vc, size_t p0, size_t p1, int chunk) {
    pool_ctx *c = vc;
    const sp3 *s = &c->s;
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
