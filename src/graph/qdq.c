/* The QDQ fusion pass: quantized graphs in QDQ form (ONNX Runtime's
 * quantizer with QuantFormat.QDQ: DequantizeLinear in front of each float
 * op, QuantizeLinear after it) become int8 ops on the int8 kernels:
 *   DQ(x) + DQ(W const) [+ DQ(int32 bias const)] -> Conv -> [Relu|Clip] -> Q
 *     => QLinearConv (per-channel weight scales and zero points)
 *   DQ(a) + DQ(B const 2-D) -> MatMul -> [Relu|Clip] -> Q  => QLinearMatMul
 *   DQ(a) + DQ(W const) [+ DQ(int32 bias)] -> Gemm -> [Relu|Clip] -> Q
 *     => QLinearMatMul with a transposed copy of W and a 9th (bias) input
 *   DQ(a) + DQ(b) -> Add -> [Relu|Clip] -> Q  => keel::QAdd (broadcasting)
 * A Relu or Clip with constant bounds between the op and the Q becomes
 * clamps in the quantized domain (_qlo/_qhi: Q is monotone, so
 * Q(clip(v)) = clamp(Q(v), Q(lo), Q(hi)) exactly). A bias is fused only
 * when its scale is x_scale * w_scale[c] (in float32) and its zero point 0,
 * as the quantizer writes it. DequantizeLinear nodes left without consumers
 * are removed. Everything else (other ops, float-output chains, biases of
 * another scale) stays as it is and runs in float. Runs first in
 * kl_graph_optimize, before constant folding would turn DQ(W) into float
 * weights. The int8 ops' semantics (requantization in float32 as ONNX
 * Runtime) are in ops_quant.c. */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    kl_graph *g;
    int *prod;  /* value -> producing live node, -1 */
    int *nuse;  /* value -> live consumer count */
    int *first; /* value -> its first live consumer, -1 */
    int qcount; /* fusions */
    int nv;     /* values when the lists were built */
} qctx;

static int qctx_build(qctx *c, kl_graph *g) {
    c->g = g;
    c->nv = g->n_values;
    c->prod = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    c->nuse = calloc((size_t)g->n_values + 1, sizeof(int));
    c->first = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!c->prod || !c->nuse || !c->first) return KL_ENOMEM;
    for (int v = 0; v < g->n_values; v++) c->prod[v] = c->first[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kl_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_out; k++)
            if (n->outputs[k] >= 0) c->prod[n->outputs[k]] = i;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->inputs[k];
            if (v < 0 || c->first[v] == i) continue; /* a node reading v twice is one consumer */
            if (c->first[v] < 0) c->first[v] = i;
            c->nuse[v]++;
        }
    }
    return KL_OK;
}

static void qctx_free(qctx *c) {
    free(c->prod);
    free(c->nuse);
    free(c->first);
}

/* The constant behind v: an initializer or a Constant node's value. */
static const kl_tensor *const_of(const qctx *c, int v) {
    if (v < 0) return NULL;
    if (c->g->values[v].init) return c->g->values[v].init;
    int p = v < c->nv ? c->prod[v] : -1;
    if (p < 0 || !kl__is_onnx_op(&c->g->nodes[p], "Constant")) return NULL;
    const kl_attr *a = kl_gnode_attr(&c->g->nodes[p], "value");
    return a && a->type == KL_ATTR_TENSOR ? a->t : NULL;
}

/* A DequantizeLinear producing v: its node, input, scale and zero point
 * (constants; zp may be absent). count: allowed scale lengths (1 or count)
 * along axis want_axis (when count > 1). */
typedef struct {
    int node, x, scale, zp;
    const kl_tensor *s, *z;
    int per_axis;
} dqinfo;

static int dq_of(const qctx *c, int v, int64_t count, int want_axis, int rank, dqinfo *d) {
    int p = v >= 0 && v < c->nv ? c->prod[v] : -1;
    if (p < 0) return 0;
    const kl_gnode *n = &c->g->nodes[p];
    if (!kl__is_onnx_op(n, "DequantizeLinear") || n->n_in < 2 || n->inputs[0] < 0) return 0;
    d->node = p, d->x = n->inputs[0], d->scale = n->inputs[1], d->zp = n->n_in > 2 ? n->inputs[2] : -1;
    d->s = const_of(c, d->scale), d->z = d->zp >= 0 ? const_of(c, d->zp) : NULL;
    if (!d->s || d->s->dtype != KL_F32 || d->s->rank > 1 || (d->zp >= 0 && !d->z)) return 0;
    int64_t cnt = kl_tensor_numel(d->s);
    d->per_axis = cnt > 1;
    if (d->per_axis) {
        int64_t ax = kl_gnode_attr_int(n, "axis", 1);
        if (ax < 0) ax += rank;
        if (count <= 1 || cnt != count || ax != want_axis) return 0;
    }
    if (d->z &&
        (kl_tensor_numel(d->z) != cnt || !(d->z->dtype == KL_I8 || d->z->dtype == KL_U8 || d->z->dtype == KL_I32)))
        return 0;
    return 1;
}

/* A per-tensor quantized activation: DQ of a non-constant int8/uint8 value. */
static int act_dq(const qctx *c, int v, dqinfo *d) {
    if (!dq_of(c, v, 1, 0, 0, d) || d->per_axis) return 0;
    const kl_value *x = &c->g->values[d->x];
    return !const_of(c, d->x) && (x->dtype == KL_I8 || x->dtype == KL_U8 || x->dtype == KL_DTYPE_COUNT);
}

/* The Q that ends the chain from v: v's only consumer (v no graph output),
 * through an optional Relu / Clip with constant bounds. q: the Q node; act:
 * the activation node or -1; lo/hi the bounds in the Q's domain. */
typedef struct {
    int node, act, scale, zp;
    int32_t lo, hi;
    int s8; /* the Q's output is int8 */
} qinfo;

/* v's only consumer, -1 when it has several or none or is a graph output
 * (the consumer lists are those at the start of the pass: fused chains
 * only ever remove consumers of the values they own). */
static int only_use(const qctx *c, int v) {
    if (v < 0 || v >= c->nv || c->g->values[v].is_output || c->nuse[v] != 1) return -1;
    return c->first[v];
}

/* Q(v) of one float value through the Q node's parameters. */
static int32_t q_value(const kl_tensor *s, const kl_tensor *z, float v) {
    uint8_t out8 = 0;
    int8_t outs = 0;
    int sgn = z && z->dtype == KL_I8;
    kl_quantize_f32(&v, 1, 1, 1, s->data, z ? z->data : NULL, 0, sgn ? KL_I8 : KL_U8, sgn ? (void *)&outs : &out8,
                    NULL);
    return sgn ? outs : out8;
}

static int q_after(const qctx *c, int v, qinfo *q) {
    int u = only_use(c, v);
    if (u < 0) return 0;
    const kl_gnode *n = &c->g->nodes[u];
    float amin = -INFINITY, amax = INFINITY;
    q->act = -1;
    if (kl__is_onnx_op(n, "Relu") || kl__is_onnx_op(n, "Clip")) {
        if (n->n_out != 1) return 0;
        if (!strcmp(n->op_type, "Relu")) amin = 0;
        else if (n->opset < 11) {
            amin = kl_gnode_attr_float(n, "min", -INFINITY), amax = kl_gnode_attr_float(n, "max", INFINITY);
        } else {
            const kl_tensor *lo = n->n_in > 1 ? const_of(c, n->inputs[1]) : NULL;
            const kl_tensor *hi = n->n_in > 2 ? const_of(c, n->inputs[2]) : NULL;
            if ((n->n_in > 1 && n->inputs[1] >= 0 && (!lo || lo->dtype != KL_F32 || kl_tensor_numel(lo) != 1)) ||
                (n->n_in > 2 && n->inputs[2] >= 0 && (!hi || hi->dtype != KL_F32 || kl_tensor_numel(hi) != 1)))
                return 0;
            if (lo) amin = *(const float *)lo->data;
            if (hi) amax = *(const float *)hi->data;
        }
        q->act = u;
        u = only_use(c, n->outputs[0]);
        if (u < 0) return 0;
        n = &c->g->nodes[u];
    }
    if (!kl__is_onnx_op(n, "QuantizeLinear") || n->n_in < 2 || n->n_out != 1) return 0;
    q->node = u, q->scale = n->inputs[1], q->zp = n->n_in > 2 ? n->inputs[2] : -1;
    const kl_tensor *s = const_of(c, q->scale), *z = q->zp >= 0 ? const_of(c, q->zp) : NULL;
    if (!s || s->dtype != KL_F32 || kl_tensor_numel(s) != 1 || (q->zp >= 0 && (!z || kl_tensor_numel(z) != 1)))
        return 0;
    if (z && z->dtype != KL_I8 && z->dtype != KL_U8) return 0;
    int sgn = z && z->dtype == KL_I8;
    q->s8 = sgn;
    q->lo = sgn ? -128 : 0, q->hi = sgn ? 127 : 255;
    if (amin > -INFINITY) q->lo = q_value(s, z, amin);
    if (amax < INFINITY) q->hi = q_value(s, z, amax);
    return q->lo <= q->hi;
}

/* A bias DQ of an int32 constant whose scale is xs * ws[c] bitwise and zero point 0. */
static int bias_ok(const qctx *c, int v, const dqinfo *x, const dqinfo *w, int64_t M, dqinfo *b) {
    if (!dq_of(c, v, M, 0, 1, b)) return 0;
    const kl_tensor *bt = const_of(c, b->x);
    if (!bt || bt->dtype != KL_I32 || kl_tensor_numel(bt) != M || bt->rank != 1) return 0;
    if (b->z) {
        for (int64_t i = 0; i < kl_tensor_numel(b->z); i++)
            if (kl__int_at(b->z, i) != 0) return 0;
    }
    const float *bs = b->s->data, *ws = w->s->data, xs = *(const float *)x->s->data;
    for (int64_t i = 0; i < M; i++) {
        float want = xs * ws[w->per_axis ? i : 0], got = bs[b->per_axis ? i : 0];
        if (memcmp(&want, &got, sizeof want)) return 0;
    }
    return 1;
}

/* ---- rewriting ---- */

static const char *vname(const qctx *c, int v) { return v >= 0 ? c->g->values[v].name : ""; }

/* A zero point input for an absent one: a new uint8/int8 zero initializer. */
static int zero_zp(qctx *c, const char *base, kl_dtype dt, int *out) {
    kl_tensor *t = NULL;
    if (kl_tensor_new(dt, 0, NULL, KL_TAG_PARAMS, &t, NULL)) return KL_ENOMEM;
    char name[512];
    for (int i = 0;; i++) {
        snprintf(name, sizeof name, "%s_zp__keel%d", base, i);
        if (kl_graph_find_value(c->g, name) < 0) break;
    }
    int v = kl_graph_value(c->g, name);
    if (v < 0) {
        kl_tensor_free(t);
        return KL_ENOMEM;
    }
    c->g->values[v].init = t, c->g->values[v].dtype = dt, c->g->values[v].rank = 0;
    *out = v;
    return KL_OK;
}

/* The zp value of a DQ/Q, or a zero one of the input's dtype. */
static int zp_or_zero(qctx *c, int zp, int x, const char *base, int *out) {
    if (zp >= 0) {
        *out = zp;
        return KL_OK;
    }
    kl_dtype dt = x >= 0 && c->g->values[x].dtype == KL_I8 ? KL_I8 : KL_U8;
    return zero_zp(c, base, dt, out);
}

static int copy_attrs(kl_gnode *to, const kl_gnode *from, const char *const *names) {
    for (const char *const *nm = names; *nm; nm++) {
        const kl_attr *a = kl_gnode_attr(from, *nm);
        if (!a) continue;
        kl_attr *b = kl_gnode_attr_add(to, a->name, a->type);
        if (!b) return KL_ENOMEM;
        b->i = a->i, b->f = a->f, b->n = a->n;
        if (a->type == KL_ATTR_INTS) {
            b->ints = malloc(sizeof(int64_t) * (size_t)(a->n ? a->n : 1));
            if (!b->ints) return KL_ENOMEM;
            memcpy(b->ints, a->ints, sizeof(int64_t) * (size_t)a->n);
        } else if (a->type == KL_ATTR_STRING) {
            if (!(b->s = strdup(a->s ? a->s : ""))) return KL_ENOMEM;
        }
    }
    return KL_OK;
}

/* Adds op (ins, the q's output), marks the old nodes dead, sets the clamps. */
static int emit(qctx *c, int old, const char *op, const char *dom, const char **ins, int nin, const qinfo *q,
                const char *const *attrs, kl_err *e) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s_int8", c->g->nodes[old].name);
    const char *outs[1] = {vname(c, c->g->nodes[q->node].outputs[0])};
    int ni = kl_graph_add_node(c->g, op, nm, ins, nin, outs, 1);
    if (ni < 0) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_gnode *n = &c->g->nodes[ni], *o = &c->g->nodes[old];
    n->index = o->index;
    int full_lo = q->s8 ? -128 : 0, full_hi = q->s8 ? 127 : 255;
    if (kl_gnode_set_domain(n, dom, *dom ? 1 : 13) || (attrs && copy_attrs(n, o, attrs)) ||
        (q->lo > full_lo && kl__set_int_attr(n, "_qlo", q->lo)) ||
        (q->hi < full_hi && kl__set_int_attr(n, "_qhi", q->hi)))
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    c->g->nodes[old].dead = 1;
    c->g->nodes[q->node].dead = 1;
    if (q->act >= 0) c->g->nodes[q->act].dead = 1;
    c->qcount++;
    return KL_OK;
}

static const char *const conv_attrs[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", NULL};

static int fuse_conv(qctx *c, int i, kl_err *e) {
    const kl_gnode *n = &c->g->nodes[i];
    dqinfo x, w, b;
    qinfo q;
    if (n->n_in < 2 || !act_dq(c, n->inputs[0], &x)) return KL_OK;
    const kl_tensor *W = NULL;
    int wv = n->inputs[1];
    int p = wv >= 0 ? c->prod[wv] : -1;
    if (p >= 0 && kl__is_onnx_op(&c->g->nodes[p], "DequantizeLinear")) W = const_of(c, c->g->nodes[p].inputs[0]);
    if (!W || (W->dtype != KL_I8 && W->dtype != KL_U8) || W->rank < 3) return KL_OK;
    int64_t M = W->dims[0];
    if (!dq_of(c, wv, M, 0, W->rank, &w)) return KL_OK;
    int has_b = n->n_in > 2 && n->inputs[2] >= 0;
    if (has_b && !bias_ok(c, n->inputs[2], &x, &w, M, &b)) return KL_OK;
    if (!q_after(c, n->outputs[0], &q)) return KL_OK;
    int xz, wz, yz, rc;
    const char *base = n->name;
    if ((rc = zp_or_zero(c, x.zp, x.x, base, &xz)) || (rc = zp_or_zero(c, w.zp, w.x, base, &wz)) ||
        (rc = zp_or_zero(c, q.zp, -1, base, &yz)))
        return kl_err_set(e, rc, "out of memory");
    n = &c->g->nodes[i];
    const char *ins[9] = {vname(c, x.x),     vname(c, x.scale), vname(c, xz),
                          vname(c, w.x),     vname(c, w.scale), vname(c, wz),
                          vname(c, q.scale), vname(c, yz),      has_b ? vname(c, b.x) : ""};
    return emit(c, i, "QLinearConv", "", ins, has_b ? 9 : 8, &q, conv_attrs, e);
}

/* MatMul (B [K, N] per column: axis 1) and Gemm (transA 0, alpha = beta = 1;
 * W [N, K] with transB (per row: axis 0) or [K, N]). */
static int fuse_matmul(qctx *c, int i, int gemm, kl_err *e) {
    const kl_gnode *n = &c->g->nodes[i];
    dqinfo x, w, b;
    qinfo q;
    if (n->n_in < 2 || !act_dq(c, n->inputs[0], &x)) return KL_OK;
    int tb = gemm ? (int)kl_gnode_attr_int(n, "transB", 0) : 0;
    if (gemm &&
        (kl_gnode_attr_int(n, "transA", 0) || kl_gnode_attr_float(n, "alpha", 1) != 1.0f ||
         kl_gnode_attr_float(n, "beta", 1) != 1.0f))
        return KL_OK;
    int wv = n->inputs[1], p = wv >= 0 ? c->prod[wv] : -1;
    const kl_tensor *W =
        p >= 0 && kl__is_onnx_op(&c->g->nodes[p], "DequantizeLinear") ? const_of(c, c->g->nodes[p].inputs[0]) : NULL;
    if (!W || (W->dtype != KL_I8 && W->dtype != KL_U8) || W->rank != 2 || !kl_tensor_is_contiguous(W)) return KL_OK;
    int64_t K = tb ? W->dims[1] : W->dims[0], N = tb ? W->dims[0] : W->dims[1];
    if (!dq_of(c, wv, N, tb ? 0 : 1, 2, &w)) return KL_OK;
    int has_b = gemm && n->n_in > 2 && n->inputs[2] >= 0;
    if (has_b && !bias_ok(c, n->inputs[2], &x, &w, N, &b)) return KL_OK;
    if (!q_after(c, n->outputs[0], &q)) return KL_OK;
    int wq = w.x, xz, wz, yz, rc;
    if (tb) { /* a [K, N] copy of W */
        kl_tensor *t = NULL;
        int64_t d[2] = {K, N};
        if (kl_tensor_new(W->dtype, 2, d, KL_TAG_PARAMS, &t, e)) return KL_ENOMEM;
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) ((int8_t *)t->data)[k * N + j] = ((const int8_t *)W->data)[j * K + k];
        char name[512];
        for (int s = 0;; s++) {
            snprintf(name, sizeof name, "%s_t__keel%d", vname(c, w.x), s);
            if (kl_graph_find_value(c->g, name) < 0) break;
        }
        wq = kl_graph_value(c->g, name);
        if (wq < 0) {
            kl_tensor_free(t);
            return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        c->g->values[wq].init = t, c->g->values[wq].dtype = t->dtype, c->g->values[wq].rank = 2;
        c->g->values[wq].dims[0] = K, c->g->values[wq].dims[1] = N;
    }
    const char *base = c->g->nodes[i].name;
    if ((rc = zp_or_zero(c, x.zp, x.x, base, &xz)) || (rc = zp_or_zero(c, w.zp, w.x, base, &wz)) ||
        (rc = zp_or_zero(c, q.zp, -1, base, &yz)))
        return kl_err_set(e, rc, "out of memory");
    const char *ins[9] = {vname(c, x.x),     vname(c, x.scale), vname(c, xz),
                          vname(c, wq),      vname(c, w.scale), vname(c, wz),
                          vname(c, q.scale), vname(c, yz),      has_b ? vname(c, b.x) : ""};
    return emit(c, i, "QLinearMatMul", "", ins, has_b ? 9 : 8, &q, NULL, e);
}

static int fuse_add(qctx *c, int i, kl_err *e) {
    const kl_gnode *n = &c->g->nodes[i];
    dqinfo a, b;
    qinfo q;
    if (n->n_in != 2 || !act_dq(c, n->inputs[0], &a) || !act_dq(c, n->inputs[1], &b)) return KL_OK;
    if (!q_after(c, n->outputs[0], &q)) return KL_OK;
    int az, bz, yz, rc;
    const char *base = n->name;
    if ((rc = zp_or_zero(c, a.zp, a.x, base, &az)) || (rc = zp_or_zero(c, b.zp, b.x, base, &bz)) ||
        (rc = zp_or_zero(c, q.zp, -1, base, &yz)))
        return kl_err_set(e, rc, "out of memory");
    const char *ins[8] = {vname(c, a.x),     vname(c, a.scale), vname(c, az),      vname(c, b.x),
                          vname(c, b.scale), vname(c, bz),      vname(c, q.scale), vname(c, yz)};
    return emit(c, i, "QAdd", "keel", ins, 8, &q, NULL, e);
}

/* DequantizeLinear nodes whose output nothing reads any more. */
static void drop_unused_dq(kl_graph *g) {
    int *use = calloc((size_t)g->n_values + 1, sizeof(int));
    if (!use) return; /* they stay: correct, only unused */
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            for (int k = 0; k < g->nodes[i].n_in; k++)
                if (g->nodes[i].inputs[k] >= 0) use[g->nodes[i].inputs[k]]++;
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        if (kl__is_onnx_op(n, "DequantizeLinear") && n->outputs[0] >= 0 && !use[n->outputs[0]] &&
            !g->values[n->outputs[0]].is_output)
            n->dead = 1;
    }
    free(use);
}

int kl__pass_qdq(kl_graph *g, int *changed, kl_err *e) {
    int has_dq = 0;
    for (int i = 0; i < g->n_nodes && !has_dq; i++) has_dq = kl__is_onnx_op(&g->nodes[i], "DequantizeLinear");
    if (!has_dq) return KL_OK;
    qctx c = {0};
    int rc = qctx_build(&c, g);
    if (rc) {
        qctx_free(&c);
        return kl_err_set(e, rc, "out of memory");
    }
    int n0 = g->n_nodes;
    for (int i = 0; i < n0 && !rc; i++) {
        const kl_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        if (kl__is_onnx_op(n, "Conv")) rc = fuse_conv(&c, i, e);
        else if (kl__is_onnx_op(n, "MatMul")) rc = fuse_matmul(&c, i, 0, e);
        else if (kl__is_onnx_op(n, "Gemm")) rc = fuse_matmul(&c, i, 1, e);
        else if (kl__is_onnx_op(n, "Add")) rc = fuse_add(&c, i, e);
    }
    if (c.qcount) drop_unused_dq(g);
    *changed += c.qcount;
    qctx_free(&c);
    return rc;
}
