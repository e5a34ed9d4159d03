/* The model: layers built from a spec with shape inference (errors name the
 * layer and its spec line), one parameter block, one gradient block, the
 * per-batch memory planned up front in one activations block, PyTorch default
 * initialisation, and the forward/backward tape over the kernels in ops.c. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"
#ifdef __F16C__
#include <immintrin.h>
#endif

void tr_round_f16(float *x, int64_t n) {
    int64_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
#else
    for (; i < n; i++) x[i] = (float)(_Float16)x[i];
#endif
}

static int64_t numel_of(int rank, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    return n;
}

static const char *shape_s(int rank, const int64_t *d, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < rank && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

#define LERR(L, ...) layer_err(e, s, L, __VA_ARGS__)
static int layer_err(kl_err *e, const tr_spec *s, const tr_lspec *L, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int layer_err(kl_err *e, const tr_spec *s, const tr_lspec *L, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kl_err_setloc(e, KL_ESHAPE, s->path, L->line, 0, "layer %s (%s): %s", L->name, tr_ltype_name(L->type), msg);
    kl_err_field(e, "layers.%s", L->name);
    return KL_ESHAPE;
}

int tr_model_new(tr_spec *s, tr_model **out, kl_err *e) {
    *out = NULL;
    tr_model *m = calloc(1, sizeof *m);
    if (!m) return kl_err_set(e, KL_ENOMEM, "out of memory");
    m->spec = s;
    m->n = s->nlayers;
    m->in_numel = numel_of(s->in_rank, s->in_dims);
    char b1[64], b2[64];
    int rc = KL_OK;
    for (int i = 0; i < m->n; i++) {
        tr_layer *l = &m->L[i];
        tr_lspec *L = &l->sp;
        *L = s->layers[i];
        l->w_off = l->b_off = -1;
        int nin = L->type == TR_L_ADD ? 2 : 1;
        for (int k = 0; k < nin; k++) {
            if (!L->in_name[k][0]) { l->in[k] = i - 1; continue; }
            l->in[k] = -2;
            if (!strcmp(L->in_name[k], "input")) l->in[k] = -1;
            for (int j = 0; j < i; j++)
                if (!strcmp(m->L[j].sp.name, L->in_name[k])) l->in[k] = j;
            if (l->in[k] == -2) { rc = LERR(L, "input '%s' is not an earlier layer (or 'input')", L->in_name[k]); goto fail; }
        }
        int r = l->in[0] < 0 ? s->in_rank : m->L[l->in[0]].rank;
        const int64_t *d = l->in[0] < 0 ? s->in_dims : m->L[l->in[0]].dims;
        const char *src = l->in[0] < 0 ? "input" : m->L[l->in[0]].sp.name;
        if (s->in_int && l->in[0] == -1 && L->type != TR_L_EMBEDDING) { rc = LERR(L, "the int64 input feeds only an embedding"); goto fail; }
        l->rank = r;
        memcpy(l->dims, d, sizeof l->dims);
        switch (L->type) {
        case TR_L_LINEAR: {
            int64_t In = d[r - 1];
            if (L->in && L->in != In) { rc = LERR(L, "in: %lld, but '%s' gives shape %s (last dim %lld)", (long long)L->in, src, shape_s(r, d, b1, sizeof b1), (long long)In); goto fail; }
            l->dims[r - 1] = L->out;
            l->w_n = L->out * In; l->b_n = L->bias ? L->out : 0;
            break;
        }
        case TR_L_CONV2D: case TR_L_MAXPOOL2D: case TR_L_AVGPOOL2D: case TR_L_BATCHNORM2D: case TR_L_GAP:
            if (r != 3) { rc = LERR(L, "needs a (C, H, W) input, but '%s' gives shape %s", src, shape_s(r, d, b1, sizeof b1)); goto fail; }
            if (L->type == TR_L_BATCHNORM2D) { l->w_n = l->b_n = d[0]; break; }
            if (L->type == TR_L_GAP) { l->rank = 1; l->dims[0] = d[0]; break; }
            {
                int64_t oh = (d[1] + 2 * L->p[0] - L->k[0]) / L->s[0] + 1, ow = (d[2] + 2 * L->p[1] - L->k[1]) / L->s[1] + 1;
                if (d[1] + 2 * L->p[0] < L->k[0] || d[2] + 2 * L->p[1] < L->k[1] || oh < 1 || ow < 1) {
                    rc = LERR(L, "kernel %lldx%lld does not fit input %s from '%s'", (long long)L->k[0], (long long)L->k[1], shape_s(r, d, b1, sizeof b1), src);
                    goto fail;
                }
                l->dims[1] = oh; l->dims[2] = ow;
                if (L->type == TR_L_CONV2D) {
                    l->dims[0] = L->out;
                    l->w_n = L->out * d[0] * L->k[0] * L->k[1]; l->b_n = L->bias ? L->out : 0;
                    l->cv = (tr_conv){0, d[0], d[1], d[2], L->out, L->k[0], L->k[1], L->s[0], L->s[1], L->p[0], L->p[1], oh, ow};
                } else {
                    l->pl = (tr_pool2){0, d[0], d[1], d[2], L->k[0], L->k[1], L->s[0], L->s[1], L->p[0], L->p[1], oh, ow};
                }
            }
            break;
        case TR_L_LAYERNORM: l->w_n = l->b_n = d[r - 1]; break;
        case TR_L_EMBEDDING:
            if (l->in[0] != -1 || !s->in_int) { rc = LERR(L, "an embedding reads the model input with input.dtype int64"); goto fail; }
            if (r > 2) { rc = LERR(L, "input of rank %d; an embedding takes (T) indices per sample", r); goto fail; }
            l->dims[r] = L->out; l->rank = r + 1;
            l->w_n = L->num * L->out;
            break;
        case TR_L_FLATTEN: l->rank = 1; l->dims[0] = numel_of(r, d); break;
        case TR_L_ADD: {
            int r2 = l->in[1] < 0 ? s->in_rank : m->L[l->in[1]].rank;
            const int64_t *d2 = l->in[1] < 0 ? s->in_dims : m->L[l->in[1]].dims;
            if (r2 != r || memcmp(d, d2, sizeof(int64_t) * (size_t)r)) {
                rc = LERR(L, "inputs '%s' %s and '%s' %s differ in shape", L->in_name[0], shape_s(r, d, b1, sizeof b1), L->in_name[1], shape_s(r2, d2, b2, sizeof b2));
                goto fail;
            }
            break;
        }
        default: break;
        }
        if (l->w_n) { l->w_off = m->nparams; m->nparams += l->w_n; }
        if (l->b_n) { l->b_off = m->nparams; m->nparams += l->b_n; }
        if (L->type == TR_L_BATCHNORM2D) { l->buf_off = m->nbuf; m->nbuf += 2 * d[0]; }
    }
    {
        tr_layer *last = &m->L[m->n - 1];
        m->out_numel = numel_of(last->rank, last->dims);
        if (s->loss == TR_LOSS_CE) {
            if (last->rank != 1) { rc = layer_err(e, s, &last->sp, "cross_entropy needs (classes) logits per sample, the model gives %s", shape_s(last->rank, last->dims, b1, sizeof b1)); goto fail; }
            if (s->classes && s->classes != last->dims[0]) { rc = layer_err(e, s, &last->sp, "loss.classes is %lld but the model gives %lld logits", (long long)s->classes, (long long)last->dims[0]); goto fail; }
            if (s->nclass_w && s->nclass_w != last->dims[0]) { rc = layer_err(e, s, &last->sp, "loss.class_weights has %d entries for %lld classes", s->nclass_w, (long long)last->dims[0]); goto fail; }
            if (last->sp.type == TR_L_SOFTMAX) { rc = layer_err(e, s, &last->sp, "cross_entropy takes logits: remove the final softmax"); goto fail; }
        }
    }
    *out = m;
    return KL_OK;
fail:
    free(m);
    return rc;
}

/* Per-batch memory of each layer, in floats (idx/ids counted as bytes/4). */
typedef struct { int64_t y, save, invstd, idx, ids; } lmem;
static lmem layer_mem(const tr_model *m, const tr_layer *l, int64_t B) {
    lmem r = {0};
    int64_t n = B * numel_of(l->rank, l->dims);
    r.y = n;
    switch (l->sp.type) {
    case TR_L_BATCHNORM2D: r.save = n; r.invstd = l->dims[0]; break;
    case TR_L_LAYERNORM: r.save = n; r.invstd = n / l->dims[l->rank - 1]; break;
    case TR_L_DROPOUT: r.save = n; break;
    case TR_L_MAXPOOL2D: r.idx = n; break;
    case TR_L_EMBEDDING: r.ids = 2 * B * m->in_numel; break;
    default: break;
    }
    return r;
}
static int64_t al16(int64_t x) { return (x + 15) & ~(int64_t)15; }

static int64_t ws_for(const tr_model *m, int64_t B) {
    int64_t ws = 0;
    for (int i = 0; i < m->n; i++)
        if (m->L[i].sp.type == TR_L_CONV2D) {
            tr_conv c = m->L[i].cv;
            c.N = B;
            ws = KL_MAX(ws, tr_conv_ws_elems(&c));
        }
    return ws;
}

static int64_t act_floats(const tr_model *m, int64_t B) {
    int64_t t = 0;
    for (int i = 0; i < m->n; i++) {
        lmem r = layer_mem(m, &m->L[i], B);
        t += 2 * al16(r.y) + al16(r.save) + al16(r.invstd) + al16(r.idx) + al16(r.ids);
    }
    return t;
}

void tr_model_plan(const tr_model *m, int64_t B, int opt_slots, uint64_t bytes[5]) {
    bytes[0] = (uint64_t)(m->nparams + m->nbuf) * 4;
    bytes[1] = (uint64_t)m->nparams * 4;
    bytes[2] = (uint64_t)m->nparams * 4 * (uint64_t)opt_slots;
    bytes[3] = (uint64_t)act_floats(m, B) * 4;
    bytes[4] = (uint64_t)ws_for(m, B) * 4;
}

static void *zalloc(size_t n, kl_mem_tag tag, kl_err *e) {
    void *p = kl_mem_alloc_e(n ? n : 64, tag, e);
    if (p) memset(p, 0, n ? n : 64);
    return p;
}

int tr_model_alloc(tr_model *m, int64_t B, kl_err *e) {
    openblas_set_num_threads(1); /* parallelism (and determinism) come from fixed GEMM blocks on the keel pool */
    m->B = B;
    m->params = zalloc((size_t)(m->nparams + m->nbuf) * 4, KL_TAG_PARAMS, e);
    if (!m->params) return KL_ENOMEM;
    m->bufs = m->params + m->nparams;
    m->grads = zalloc((size_t)m->nparams * 4, KL_TAG_GRADS, e);
    if (!m->grads) return KL_ENOMEM;
    if (m->st) { /* the step runs on the graph: its planned arena, and the output rows for the eval forward */
        m->arena_bytes = tr_step_arena_bytes(m);
        m->arena = zalloc((size_t)m->arena_bytes, KL_TAG_ACTIVATIONS, e);
        m->act_bytes = (uint64_t)(B * m->out_numel) * 4;
        m->act_block = zalloc((size_t)m->act_bytes, KL_TAG_ACTIVATIONS, e);
        if (!m->arena || !m->act_block) return KL_ENOMEM;
        m->L[m->n - 1].y = m->act_block;
        return KL_OK;
    }
    m->ws_elems = ws_for(m, B);
    m->ws = zalloc((size_t)m->ws_elems * 4, KL_TAG_WORKSPACE, e);
    if (!m->ws) return KL_ENOMEM;
    int64_t nf = act_floats(m, B);
    m->act_bytes = (uint64_t)nf * 4;
    m->act_block = zalloc((size_t)nf * 4, KL_TAG_ACTIVATIONS, e);
    if (!m->act_block) return KL_ENOMEM;
    float *p = m->act_block;
    for (int i = 0; i < m->n; i++) {
        tr_layer *l = &m->L[i];
        lmem r = layer_mem(m, l, B);
        l->y = p; p += al16(r.y);
        l->dy = p; p += al16(r.y);
        l->save = r.save ? p : NULL; p += al16(r.save);
        l->invstd = r.invstd ? p : NULL; p += al16(r.invstd);
        l->idx = r.idx ? (int32_t *)p : NULL; p += al16(r.idx);
        l->ids = r.ids ? (int64_t *)p : NULL; p += al16(r.ids);
    }
    tr_rng_seed(&m->drop_rng, m->spec->seed ^ 0x64726f706f7574ull);
    return KL_OK;
}

void tr_model_free(tr_model *m) {
    if (!m) return;
    tr_eval_free(m);
    tr_step_free(m);
    kl_mem_free(m->arena);
    kl_mem_free(m->params); kl_mem_free(m->grads); kl_mem_free(m->ws); kl_mem_free(m->act_block);
    free(m);
}

void tr_model_init(tr_model *m, tr_rng *rng) {
    for (int i = 0; i < m->n; i++) {
        tr_layer *l = &m->L[i];
        float *w = l->w_off >= 0 ? m->params + l->w_off : NULL, *b = l->b_off >= 0 ? m->params + l->b_off : NULL;
        switch (l->sp.type) {
        case TR_L_LINEAR: case TR_L_CONV2D: {
            int64_t fan_in = l->w_n / l->sp.out;
            double bound = 1.0 / sqrt((double)fan_in); /* kaiming_uniform(a=sqrt(5)) */
            for (int64_t k = 0; k < l->w_n; k++) w[k] = (float)((2 * tr_rng_uniform(rng) - 1) * bound);
            for (int64_t k = 0; k < l->b_n; k++) b[k] = (float)((2 * tr_rng_uniform(rng) - 1) * bound);
            break;
        }
        case TR_L_BATCHNORM2D: case TR_L_LAYERNORM:
            for (int64_t k = 0; k < l->w_n; k++) { w[k] = 1; b[k] = 0; }
            if (l->sp.type == TR_L_BATCHNORM2D)
                for (int64_t k = 0; k < l->w_n; k++) { m->bufs[l->buf_off + k] = 0; m->bufs[l->buf_off + l->w_n + k] = 1; }
            break;
        case TR_L_EMBEDDING:
            for (int64_t k = 0; k < l->w_n; k++) w[k] = (float)tr_rng_normal(rng);
            break;
        default: break;
        }
    }
}

static const float *in_ptr(const tr_model *m, int k, const float *x) { return k < 0 ? x : m->L[k].y; }

const float *tr_model_forward(tr_model *m, const float *x, int64_t B, int train) {
    kl_pool *pool = m->pool;
    for (int i = 0; i < m->n; i++) {
        tr_layer *l = &m->L[i];
        const float *xi = in_ptr(m, l->in[0], x);
        const float *w = l->w_off >= 0 ? m->params + l->w_off : NULL, *b = l->b_off >= 0 ? m->params + l->b_off : NULL;
        int r_in = l->in[0] < 0 ? m->spec->in_rank : m->L[l->in[0]].rank;
        const int64_t *d_in = l->in[0] < 0 ? m->spec->in_dims : m->L[l->in[0]].dims;
        int64_t n_in = B * numel_of(r_in, d_in), n_out = B * numel_of(l->rank, l->dims);
        int64_t last = l->dims[l->rank - 1];
        switch (l->sp.type) {
        case TR_L_LINEAR:
            tr_linear_fwd_f32(n_in / d_in[r_in - 1], d_in[r_in - 1], l->sp.out, xi, w, b, l->y, pool);
            break;
        case TR_L_CONV2D: l->cv.N = B; tr_conv_fwd_f32(&l->cv, xi, w, b, l->y, m->ws, pool); break;
        case TR_L_MAXPOOL2D: l->pl.N = B; tr_maxpool_fwd_f32(&l->pl, xi, l->y, l->idx); break;
        case TR_L_AVGPOOL2D: l->pl.N = B; tr_avgpool_fwd_f32(&l->pl, xi, l->y); break;
        case TR_L_GAP: tr_gap_fwd_f32(B * d_in[0], d_in[1] * d_in[2], xi, l->y); break;
        case TR_L_BATCHNORM2D: {
            float *rm = m->bufs + l->buf_off, *rv = rm + l->dims[0];
            if (train)
                tr_bn_train_fwd_f32(B, l->dims[0], l->dims[1] * l->dims[2], xi, w, b, (float)l->sp.eps, (float)l->sp.momentum, rm, rv, l->save, l->invstd, l->y);
            else
                tr_bn_eval_fwd_f32(B, l->dims[0], l->dims[1] * l->dims[2], xi, w, b, rm, rv, (float)l->sp.eps, l->y);
            break;
        }
        case TR_L_LAYERNORM: tr_ln_fwd_f32(n_out / last, last, xi, w, b, (float)l->sp.eps, l->save, l->invstd, l->y); break;
        case TR_L_DROPOUT:
            if (train && l->sp.p_drop > 0) {
                float keep = (float)(1.0 / (1.0 - l->sp.p_drop));
                for (int64_t k = 0; k < n_out; k++) {
                    l->save[k] = tr_rng_uniform(&m->drop_rng) >= l->sp.p_drop ? keep : 0.0f;
                    l->y[k] = xi[k] * l->save[k];
                }
            } else memcpy(l->y, xi, (size_t)n_out * 4);
            break;
        case TR_L_EMBEDDING:
            for (int64_t k = 0; k < n_in; k++) l->ids[k] = (int64_t)xi[k];
            tr_embed_fwd_f32(n_in, l->sp.out, l->ids, w, l->y);
            break;
        case TR_L_FLATTEN: memcpy(l->y, xi, (size_t)n_out * 4); break;
        case TR_L_RELU: tr_act_fwd_f32(TR_ACT_RELU, n_out, xi, l->y); break;
        case TR_L_GELU: tr_act_fwd_f32(TR_ACT_GELU, n_out, xi, l->y); break;
        case TR_L_SIGMOID: tr_act_fwd_f32(TR_ACT_SIGMOID, n_out, xi, l->y); break;
        case TR_L_TANH: tr_act_fwd_f32(TR_ACT_TANH, n_out, xi, l->y); break;
        case TR_L_SOFTMAX: tr_softmax_fwd_f32(n_out / last, last, xi, l->y); break;
        case TR_L_ADD: {
            const float *x2 = in_ptr(m, l->in[1], x);
            for (int64_t k = 0; k < n_out; k++) l->y[k] = xi[k] + x2[k];
            break;
        }
        default: break;
        }
        if (m->fp16) tr_round_f16(l->y, n_out); /* activations stored at float16 precision */
    }
    return m->L[m->n - 1].y;
}

/* Ops whose backward can write dx instead of adding to it. */
static int can_overwrite(const tr_layer *l) {
    tr_ltype t = l->sp.type;
    if (t == TR_L_MAXPOOL2D) /* non-overlapping 2x2 windows tiling the input */
        return l->pl.kh == 2 && l->pl.kw == 2 && l->pl.sh == 2 && l->pl.sw == 2 && l->pl.ph == 0 && l->pl.pw == 0 &&
               l->pl.H == 2 * l->pl.OH && l->pl.W == 2 * l->pl.OW;
    return t == TR_L_LINEAR || t == TR_L_RELU || t == TR_L_DROPOUT || t == TR_L_FLATTEN;
}

void tr_model_backward(tr_model *m, const float *x, const float *dout, int64_t B) {
    kl_pool *pool = m->pool;
    /* A layer's gradient buffer is zeroed lazily, except when its only
     * consumer overwrites it (Linear, ReLU, Dropout, Flatten). */
    int ncons[TR_MAX_LAYERS] = {0}, ready[TR_MAX_LAYERS] = {0};
    for (int i = 0; i < m->n; i++)
        for (int k = 0; k < (m->L[i].sp.type == TR_L_ADD ? 2 : 1); k++)
            if (m->L[i].in[k] >= 0) ncons[m->L[i].in[k]]++;
    memcpy(m->L[m->n - 1].dy, dout, (size_t)(B * m->out_numel) * 4);
    for (int i = m->n - 1; i >= 0; i--) {
        tr_layer *l = &m->L[i];
        if (m->fp16) tr_round_f16(l->dy, B * numel_of(l->rank, l->dims)); /* gradients at float16 precision */
        const float *xi = in_ptr(m, l->in[0], x);
        float *dx = l->in[0] >= 0 ? m->L[l->in[0]].dy : NULL;
        int ow = 0; /* overwrite dx */
        for (int k = 0; k < (l->sp.type == TR_L_ADD ? 2 : 1); k++) {
            int j = l->in[k];
            if (j < 0 || ready[j]) continue;
            if (ncons[j] == 1 && can_overwrite(l)) ow = 1;
            else memset(m->L[j].dy, 0, (size_t)(B * numel_of(m->L[j].rank, m->L[j].dims)) * 4);
            ready[j] = 1;
        }
        const float *w = l->w_off >= 0 ? m->params + l->w_off : NULL;
        float *gw = l->w_off >= 0 ? m->grads + l->w_off : NULL, *gb = l->b_off >= 0 ? m->grads + l->b_off : NULL;
        int r_in = l->in[0] < 0 ? m->spec->in_rank : m->L[l->in[0]].rank;
        const int64_t *d_in = l->in[0] < 0 ? m->spec->in_dims : m->L[l->in[0]].dims;
        int64_t n_in = B * numel_of(r_in, d_in), n_out = B * numel_of(l->rank, l->dims);
        int64_t last = l->dims[l->rank - 1];
        switch (l->sp.type) {
        case TR_L_LINEAR:
            tr_linear_bwd_f32(n_in / d_in[r_in - 1], d_in[r_in - 1], l->sp.out, xi, w, l->dy, dx, gw, gb, ow, pool);
            break;
        case TR_L_CONV2D: l->cv.N = B; tr_conv_bwd_f32(&l->cv, xi, w, l->dy, dx, gw, gb, m->ws, pool); break;
        case TR_L_MAXPOOL2D:
            if (dx && ow) { /* every input element belongs to exactly one window */
                int64_t P = l->pl.OH * l->pl.OW, HW = l->pl.H * l->pl.W, Wd = l->pl.W;
                for (int64_t nc = 0; nc < B * l->pl.C; nc++) {
                    float *d = dx + nc * HW;
                    for (int64_t oh = 0; oh < l->pl.OH; oh++)
                        for (int64_t owi = 0; owi < l->pl.OW; owi++) {
                            int64_t o = nc * P + oh * l->pl.OW + owi, a = 2 * oh * Wd + 2 * owi;
                            d[a] = d[a + 1] = d[a + Wd] = d[a + Wd + 1] = 0;
                            d[l->idx[o]] = l->dy[o];
                        }
                }
            } else if (dx) { l->pl.N = B; tr_maxpool_bwd_f32(&l->pl, l->idx, l->dy, dx); }
            break;
        case TR_L_AVGPOOL2D: if (dx) { l->pl.N = B; tr_avgpool_bwd_f32(&l->pl, l->dy, dx); } break;
        case TR_L_GAP: if (dx) tr_gap_bwd_f32(B * d_in[0], d_in[1] * d_in[2], l->dy, dx); break;
        case TR_L_BATCHNORM2D: tr_bn_bwd_f32(B, l->dims[0], l->dims[1] * l->dims[2], l->save, l->invstd, w, l->dy, dx, gw, gb); break;
        case TR_L_LAYERNORM: tr_ln_bwd_f32(n_out / last, last, l->save, l->invstd, w, l->dy, dx, gw, gb); break;
        case TR_L_DROPOUT:
            if (dx) {
                if (ow && l->sp.p_drop > 0) for (int64_t k = 0; k < n_out; k++) dx[k] = l->dy[k] * l->save[k];
                else if (ow) memcpy(dx, l->dy, (size_t)n_out * 4);
                else if (l->sp.p_drop > 0) for (int64_t k = 0; k < n_out; k++) dx[k] += l->dy[k] * l->save[k];
                else for (int64_t k = 0; k < n_out; k++) dx[k] += l->dy[k];
            }
            break;
        case TR_L_EMBEDDING:
            memset(gw, 0, (size_t)l->w_n * 4);
            tr_embed_bwd_f32(n_in, l->sp.out, l->ids, l->dy, gw);
            break;
        case TR_L_FLATTEN:
            if (dx && ow) memcpy(dx, l->dy, (size_t)n_out * 4);
            else if (dx) for (int64_t k = 0; k < n_out; k++) dx[k] += l->dy[k];
            break;
        case TR_L_RELU:
            if (dx && ow) for (int64_t k = 0; k < n_out; k++) dx[k] = l->y[k] > 0 ? l->dy[k] : 0.0f;
            else if (dx) tr_act_bwd_f32(TR_ACT_RELU, n_out, xi, l->y, l->dy, dx);
            break;
        case TR_L_GELU: if (dx) tr_act_bwd_f32(TR_ACT_GELU, n_out, xi, l->y, l->dy, dx); break;
        case TR_L_SIGMOID: if (dx) tr_act_bwd_f32(TR_ACT_SIGMOID, n_out, xi, l->y, l->dy, dx); break;
        case TR_L_TANH: if (dx) tr_act_bwd_f32(TR_ACT_TANH, n_out, xi, l->y, l->dy, dx); break;
        case TR_L_SOFTMAX: if (dx) tr_softmax_bwd_f32(n_out / last, last, l->y, l->dy, dx); break;
        case TR_L_ADD: {
            float *dx2 = l->in[1] >= 0 ? m->L[l->in[1]].dy : NULL;
            if (dx) for (int64_t k = 0; k < n_out; k++) dx[k] += l->dy[k];
            if (dx2) for (int64_t k = 0; k < n_out; k++) dx2[k] += l->dy[k];
            break;
        }
        default: break;
        }
    }
    if (m->fp16) tr_round_f16(m->grads, m->nparams);
}

int tr_model_tensors(tr_model *m, tr_tensor_ref *out, int max) {
    int n = 0;
    for (int i = 0; i < m->n && n + 4 <= max; i++) {
        tr_layer *l = &m->L[i];
        const tr_lspec *L = &l->sp;
        if (l->w_off >= 0) {
            tr_tensor_ref *t = &out[n++];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s.weight", L->name);
            t->data = m->params ? m->params + l->w_off : NULL; t->n = l->w_n;
            if (L->type == TR_L_LINEAR) { t->rank = 2; t->dims[0] = L->out; t->dims[1] = l->w_n / L->out; }
            else if (L->type == TR_L_CONV2D) { t->rank = 4; t->dims[0] = L->out; t->dims[1] = l->cv.C; t->dims[2] = L->k[0]; t->dims[3] = L->k[1]; }
            else if (L->type == TR_L_EMBEDDING) { t->rank = 2; t->dims[0] = L->num; t->dims[1] = L->out; }
            else { t->rank = 1; t->dims[0] = l->w_n; }
        }
        if (l->b_off >= 0) {
            tr_tensor_ref *t = &out[n++];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s.bias", L->name);
            t->data = m->params ? m->params + l->b_off : NULL; t->n = l->b_n; t->rank = 1; t->dims[0] = l->b_n;
        }
        if (L->type == TR_L_BATCHNORM2D) {
            for (int k = 0; k < 2; k++) {
                tr_tensor_ref *t = &out[n++];
                memset(t, 0, sizeof *t);
                snprintf(t->name, sizeof t->name, "%s.%s", L->name, k ? "running_var" : "running_mean");
                t->data = m->bufs ? m->bufs + l->buf_off + k * l->dims[0] : NULL; t->n = l->dims[0]; t->rank = 1; t->dims[0] = l->dims[0]; t->buffer = 1;
            }
        }
    }
    return n;
}
