/* Int8 convolution (QLinearConv, ConvInteger, fused QDQ convs) on NCHW
 * tensors with the kl_conv_params geometry (1-3 spatial dims, groups,
 * strides, dilations, asymmetric pads):
 *   - depthwise (group == C == M): a direct kernel per channel plane over a
 *     zero-point-padded int16 copy of the plane (x - xz), int32 sums in tap
 *     order;
 *   - otherwise per image and group an im2col into rows of output positions
 *     (uint8, pads = the zero point, K rounded up to 4) and kl__qgemm with
 *     the weights packed once (kl_qgemm_pack_b per group), output channel =
 *     GEMM column, written straight into the NCHW output.
 * Integer sums are exact, so the results do not depend on the path's
 * blocking or the thread count. */
#include "keel/tensor.h"
#include "tensor_int.h"

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
void kl_qconv_pack(const kl_conv_params *p, const void *w, int w_unsigned, void *dst) {
    qgeo g;
    geo_of(p, &g);
    if (is_dw(p)) {
        int16_t *d = dst;
        for (int64_t i = 0; i < p->M * g.kvol; i++)
            d[i] = w_unsigned ? (int16_t)((const uint8_t *)w)[i] : (int16_t)((const int8_t *)w)[i];
        return;
    }
    int64_t K = group_k(p, &g), Mg = p->M / p->group;
    size_t gb = kl_qgemm_packed_bytes(K, Mg);
    for (int64_t gi = 0; gi < p->group; gi++)
        kl_qgemm_pack_b(K, Mg, (const char *)w + gi * Mg * K, w_unsigned, 1, K, (char *)dst + gi * gb);
}

size_t kl_qconv_workspace_bytes(const kl_conv_params *p) {
    qgeo g;
    geo_of(p, &g);
    if (is_dw(p)) return 0; /* per-chunk planes come from the allocator */
    return (size_t)(g.ovol * round4(group_k(p, &g))) + 64;
}

/* ==================================================================
 * im2col: row = output position, k = (c, kd, kh, kw), uint8 (int8 input
 * flipped by 0x80), pads = the zero point, [K, Kp) zero
 * ================================================================== */

typedef struct {
    const qgeo *g;
    const uint8_t *x; /* the group's first channel plane */
    int64_t Cg, Kp;
    uint8_t flip, padv;
    uint8_t *a;
} i2c;

static void im2col_rows(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const i2c *c = ctx;
    const qgeo *g = c->g;
    for (size_t pos = b; pos < e; pos++) {
        int64_t o2 = (int64_t)pos % g->out[2], o1 = (int64_t)pos / g->out[2] % g->out[1],
                o0 = (int64_t)pos / (g->out[2] * g->out[1]);
        uint8_t *d = c->a + (int64_t)pos * c->Kp;
        int64_t k = 0;
        for (int64_t ch = 0; ch < c->Cg; ch++) {
            const uint8_t *xp = c->x + ch * g->ivol;
            for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
                int64_t i0 = o0 * g->s[0] - g->pb[0] + k0 * g->d[0];
                for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                    int64_t i1 = o1 * g->s[1] - g->pb[1] + k1 * g->d[1];
                    int row_ok = i0 >= 0 && i0 < g->in[0] && i1 >= 0 && i1 < g->in[1];
                    const uint8_t *xr = xp + (i0 * g->in[1] + i1) * g->in[2];
                    for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                        int64_t i2 = o2 * g->s[2] - g->pb[2] + k2 * g->d[2];
                        d[k++] = row_ok && i2 >= 0 && i2 < g->in[2] ? (uint8_t)(xr[i2] ^ c->flip) : c->padv;
                    }
                }
            }
        }
        for (; k < c->Kp; k++) d[k] = 0;
    }
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

static int run_dw(const kl_conv_params *p, const qgeo *g, const void *x, int x_unsigned, int32_t xz,
                  const void *packed_w, const void *wz, int wz_per_ch, int w_unsigned, const kl_qgemm_out *o,
                  kl_pool *pool, kl_err *e) {
    if (g->kvol > 512)
        return kl_err_set(e, KL_EUNSUPPORTED, "int8 depthwise conv: kernel of %lld taps (at most 512)",
                          (long long)g->kvol);
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

/* o for image n, group gi: per-channel arrays from the group's first
 * channel, NCHW output (row = position, column = channel). */
static kl_qgemm_out group_out(const kl_conv_params *p, const qgeo *g, const kl_qgemm_out *o, int64_t n, int64_t gi) {
    kl_qgemm_out r = *o;
    int64_t Mg = p->M / p->group, c0 = gi * Mg, off = (n * p->M + c0) * g->ovol;
    if (r.bias) r.bias += c0;
    if (r.mult && r.mult_per_col) r.mult += c0;
    if (r.fbias) r.fbias += c0;
    if (r.c) r.c += off;
    if (r.yf) r.yf += off;
    if (r.y) r.y = (char *)r.y + off;
    r.ysm = 1, r.ysn = g->ovol;
    return r;
}

int kl_qconv(const kl_conv_params *p, const void *x, int x_unsigned, int32_t xz, const void *packed_w, int w_unsigned,
             const void *wz, int wz_per_ch, const kl_qgemm_out *o, void *ws, kl_pool *pool, kl_err *e) {
    qgeo g;
    geo_of(p, &g);
    if (p->N <= 0 || g.ovol <= 0 || p->M <= 0) return KL_OK;
    if (is_dw(p)) return run_dw(p, &g, x, x_unsigned, xz, packed_w, wz, wz_per_ch, w_unsigned, o, pool, e);
    int64_t K = group_k(p, &g), Kp = round4(K), Mg = p->M / p->group, Cg = p->C / p->group;
    size_t gb = kl_qgemm_packed_bytes(K, Mg);
    void *own = NULL;
    if (!ws) {
        ws = own = kl_mem_alloc_e(kl_qconv_workspace_bytes(p), KL_TAG_WORKSPACE, e);
        if (!ws) return KL_ENOMEM;
    }
    int esz = 1;
    int32_t za = x_unsigned ? xz : xz + 128;
    int rc = KL_OK;
    for (int64_t n = 0; n < p->N && !rc; n++)
        for (int64_t gi = 0; gi < p->group && !rc; gi++) {
            i2c c = {&g,
                     (const uint8_t *)x + (n * p->C + gi * Cg) * g.ivol * esz,
                     Cg,
                     Kp,
                     (uint8_t)(x_unsigned ? 0 : 0x80),
                     (uint8_t)za,
                     ws};
            kl_pool_parallel_for(pool, (size_t)g.ovol, 64, im2col_rows, &c);
            kl_qgemm_out go = group_out(p, &g, o, n, gi);
            const void *wzg = wz && wz_per_ch ? (const char *)wz + gi * Mg : wz;
            rc = kl__qgemm(g.ovol, Mg, K, ws, 1, Kp, 1, za, (const char *)packed_w + gi * gb, wzg, wz_per_ch, &go, pool,
                           e);
        }
    kl_mem_free(own);
    return rc;
}
