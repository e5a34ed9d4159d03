/* Operators of the NCHWc (channel-blocked) path, domain "keel", made by the
 * NCHWc pass (nchwc.c) only: ReorderInput / ReorderOutput between NCHW and
 * the blocked layout (N, ceil(C/16), H, W, 16), NchwcConv (a 2-D Conv on
 * blocked tensors, weights packed at model load into n->priv, fused bias,
 * residual and activation) and the blocked pools NchwcMaxPool,
 * NchwcAveragePool, NchwcGlobalAveragePool. Blocked values are plain 5-D
 * float32 tensors to the executor and the planner; their padding lanes
 * (channels >= C) are zero. */
#include "graph/graph_int.h"

#include <stdlib.h>
#include <string.h>

static int64_t cblocks(int64_t C) { return (C + KL_NCHWC - 1) / KL_NCHWC; }

static int need_blocked(kl_gnode *n, const kl_tensor *t, const char *what, kl_err *e) {
    if (t->dtype != KL_F32) return kl__fail_node(e, n, KL_ETYPE, "%s must be float32", what);
    if (t->rank != 5 || t->dims[4] != KL_NCHWC) return kl__fail_node(e, n, KL_ESHAPE, "%s must be blocked (N, C/16, H, W, 16)", what);
    return KL_OK;
}

/* ================================================================== *
 * Reorders
 * ================================================================== */

static int rin_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    const kl_tensor *X = in[0];
    if (X->dtype != KL_F32) return kl__fail_node(e, n, KL_ETYPE, "input must be float32, not %s", kl_dtype_name(X->dtype));
    if (X->rank != 4) return kl__fail_node(e, n, KL_ESHAPE, "input rank %d, expected 4 (N, C, H, W)", X->rank);
    int64_t d[5] = {X->dims[0], cblocks(X->dims[1]), X->dims[2], X->dims[3], KL_NCHWC};
    kl__set_shape(&out[0], KL_F32, 5, d);
    return KL_OK;
}
static int rin_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *X = in[0];
    kl_nchwc_reorder_in(X->dims[0], X->dims[1], X->dims[2] * X->dims[3], X->data, out[0]->data, x->pool);
    return KL_OK;
}

static int rout_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    const kl_tensor *X = in[0];
    if ((rc = need_blocked(n, X, "input", e))) return rc;
    int64_t C = kl_gnode_attr_int(n, "channels", 0);
    if (C <= 0 || cblocks(C) != X->dims[1])
        return kl__fail_node(e, n, KL_ESHAPE, "channels %lld do not match %lld blocks", (long long)C, (long long)X->dims[1]);
    int64_t d[4] = {X->dims[0], C, X->dims[2], X->dims[3]};
    kl__set_shape(&out[0], KL_F32, 4, d);
    return KL_OK;
}
static int rout_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *Y = out[0];
    kl_nchwc_reorder_out(Y->dims[0], Y->dims[1], Y->dims[2] * Y->dims[3], in[0]->data, Y->data, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * NchwcConv(X, W, B?, R?)
 * ================================================================== */

static int nconv_params(kl_gnode *n, kl_tensor *const *in, int n_in, kl_conv_params *p, int *plain, kl_err *e) {
    const kl_tensor *X = in[0], *W = in[1];
    int rc;
    memset(p, 0, sizeof *p);
    *plain = (int)kl_gnode_attr_int(n, "plain_input", 0);
    if (W->dtype != KL_F32 || W->rank != 4) return kl__fail_node(e, n, KL_ESHAPE, "weight must be 4-D float32");
    if (*plain) {
        if (X->dtype != KL_F32 || X->rank != 4) return kl__fail_node(e, n, KL_ESHAPE, "input must be 4-D float32 (plain_input)");
    } else if ((rc = need_blocked(n, X, "input", e))) return rc;
    p->nsp = 2;
    p->N = X->dims[0];
    p->M = W->dims[0];
    p->group = kl_gnode_attr_int(n, "group", 1);
    if (p->group <= 0 || p->M % p->group) return kl__fail_node(e, n, KL_ESHAPE, "group %lld does not divide %lld", (long long)p->group, (long long)p->M);
    p->C = W->dims[1] * p->group;
    if (*plain ? X->dims[1] != p->C : X->dims[1] != cblocks(p->C))
        return kl__fail_node(e, n, KL_ESHAPE, "input has %lld %s, the weight needs %lld channels", (long long)X->dims[1],
                             *plain ? "channels" : "channel blocks", (long long)p->C);
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape"), *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations"),
                  *pd = kl_gnode_attr(n, "pads");
    for (int i = 0; i < 2; i++) {
        p->in[i] = X->dims[2 + i];
        p->k[i] = W->dims[2 + i];
        if (ks && ks->n == 2 && ks->ints[i] != p->k[i]) return kl__fail_node(e, n, KL_ESHAPE, "kernel_shape differs from the weight shape");
        p->stride[i] = st && st->n == 2 ? st->ints[i] : 1;
        p->dilation[i] = dl && dl->n == 2 ? dl->ints[i] : 1;
        p->pad_begin[i] = pd && pd->n == 4 ? pd->ints[i] : 0;
        p->pad_end[i] = pd && pd->n == 4 ? pd->ints[i + 2] : 0;
        if (p->stride[i] <= 0 || p->dilation[i] <= 0) return kl__fail_node(e, n, KL_EINVAL, "strides/dilations must be positive");
    }
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int i = 0; i < 2; i++) kl_auto_pad(p->in[i], p->k[i], p->stride[i], p->dilation[i], ap[5] == 'U', &p->pad_begin[i], &p->pad_end[i]);
    else if (!strcmp(ap, "VALID"))
        for (int i = 0; i < 2; i++) p->pad_begin[i] = p->pad_end[i] = 0;
    if (n_in > 2 && in[2] && (in[2]->dtype != KL_F32 || in[2]->rank != 1 || in[2]->dims[0] != p->M))
        return kl__fail_node(e, n, KL_ESHAPE, "bias must have %lld float32 entries", (long long)p->M);
    int act = (int)kl_gnode_attr_int(n, "_act", 0);
    if (act == 1) p->act.kind = KL_ACT_RELU;
    else if (act == 3) p->act.kind = KL_ACT_HARDSWISH;
    else if (act == 2) { p->act.kind = KL_ACT_CLIP; p->act.a = kl_gnode_attr_float(n, "_act_a", 0); p->act.b = kl_gnode_attr_float(n, "_act_b", 6); }
    p->packed_w = n->priv;
    if ((rc = kl_conv_prepare(p, e))) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, rc, "%s", m);
    }
    if (!kl_nchwc_conv_packed_floats(p)) return kl__fail_node(e, n, KL_EUNSUPPORTED, "this convolution has no blocked kernel");
    return KL_OK;
}

/* Output shape, and whether a residual R has it (epilogue) or broadcasts to
 * it (the pass only gives a residual with the conv's channel count, so a
 * blocked broadcast is the NCHW one). */
static int nconv_shape(kl_gnode *n, const kl_conv_params *p, const kl_tensor *R, int64_t *d, int *same, kl_err *e) {
    int64_t cd[5] = {p->N, cblocks(p->M), p->out[0], p->out[1], KL_NCHWC};
    memcpy(d, cd, sizeof cd);
    *same = 1;
    if (!R) return KL_OK;
    int rc;
    if ((rc = need_blocked(n, R, "residual", e))) return rc;
    *same = !memcmp(R->dims, cd, sizeof cd);
    if (*same) return KL_OK;
    int r;
    if (R->dims[1] != cd[1] || kl_broadcast_shape(5, cd, 5, R->dims, &r, d, e))
        return kl__fail_node(e, n, KL_ESHAPE, "residual [%lld,%lld,%lld,%lld,16] does not broadcast to the output",
                             (long long)R->dims[0], (long long)R->dims[1], (long long)R->dims[2], (long long)R->dims[3]);
    return KL_OK;
}

/* workspace layout: [conv ws][packed weights when not prepacked][conv result when R broadcasts] */
static size_t a64(size_t x) { return (x + 63) & ~(size_t)63; }

/* A max pooling fused by the NCHWc pass (_pool_kh > 0): q over the conv's
 * output; *fuse: the fused kernel runs (kl_nchwc_conv_maxpool_f32), else the
 * conv writes its output to the workspace and kl_nchwc_maxpool_f32 pools it
 * (batch 1, where the conv output stays in the caches anyway and the
 * separate pool was as fast: the same bits either way). */
static int npool_fused(kl_gnode *n, const kl_conv_params *p, kl_pooling_params *q, int *fuse, kl_err *e) {
    *fuse = 0;
    if (kl_gnode_attr_int(n, "_pool_kh", 0) <= 0) return 0;
    memset(q, 0, sizeof *q);
    q->nsp = 2;
    q->N = p->N;
    q->C = p->M;
    static const char *const ka[2] = {"_pool_kh", "_pool_kw"}, *const sa[2] = {"_pool_sh", "_pool_sw"},
                             *const pb[2] = {"_pool_pt", "_pool_pl"}, *const pe[2] = {"_pool_pb", "_pool_pr"};
    for (int i = 0; i < 2; i++) {
        q->in[i] = p->out[i];
        q->k[i] = kl_gnode_attr_int(n, ka[i], 1);
        q->stride[i] = kl_gnode_attr_int(n, sa[i], 1);
        q->dilation[i] = 1;
        q->pad_begin[i] = kl_gnode_attr_int(n, pb[i], 0);
        q->pad_end[i] = kl_gnode_attr_int(n, pe[i], 0);
        if (q->k[i] <= 0 || q->stride[i] <= 0) return kl__fail_node(e, n, KL_EINVAL, "fused pool: kernel/strides must be positive");
    }
    int rc;
    if ((rc = kl_pooling_prepare(q, e))) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, rc, "fused pool: %s", m);
    }
    *fuse = p->N > 1 && kl_nchwc_conv_maxpool_ok(p, q);
    return 1;
}

static int nconv_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_conv_params p;
    int rc, plain, same;
    if ((rc = nconv_params(n, in, n_in, &p, &plain, e))) return rc;
    int64_t d[5];
    if ((rc = nconv_shape(n, &p, n_in > 3 ? in[3] : NULL, d, &same, e))) return rc;
    kl_pooling_params q;
    int fuse, pooled = npool_fused(n, &p, &q, &fuse, e);
    if (pooled < 0) return pooled;
    if (pooled) {
        if (!same) return kl__fail_node(e, n, KL_EINVAL, "fused pool with a broadcast residual");
        int64_t pd[5] = {p.N, cblocks(p.M), q.out[0], q.out[1], KL_NCHWC};
        kl__set_shape(&out[0], KL_F32, 5, pd);
        if (fuse) *ws = a64(kl_nchwc_conv_maxpool_workspace_bytes(&p, &q));
        else *ws = a64(kl_nchwc_conv_workspace_bytes(&p, plain)) + a64((size_t)(p.N * cblocks(p.M) * p.out[0] * p.out[1] * KL_NCHWC) * sizeof(float));
        if (!n->priv) *ws += a64(kl_nchwc_conv_packed_floats(&p) * sizeof(float));
        return KL_OK;
    }
    kl__set_shape(&out[0], KL_F32, 5, d);
    *ws = a64(kl_nchwc_conv_workspace_bytes(&p, plain));
    if (!n->priv) *ws += a64(kl_nchwc_conv_packed_floats(&p) * sizeof(float));
    if (!same) *ws += (size_t)(p.N * cblocks(p.M) * p.out[0] * p.out[1] * KL_NCHWC) * sizeof(float);
    return KL_OK;
}

static int nconv_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    kl_conv_params p;
    int rc, plain, same;
    if ((rc = nconv_params(n, in, n_in, &p, &plain, e))) return rc;
    const kl_tensor *R = n_in > 3 ? in[3] : NULL;
    int64_t d[5];
    if ((rc = nconv_shape(n, &p, R, d, &same, e))) return rc;
    kl_pooling_params q;
    int fuse, pooled = npool_fused(n, &p, &q, &fuse, e);
    if (pooled < 0) return pooled;
    size_t cw = fuse ? kl_nchwc_conv_maxpool_workspace_bytes(&p, &q) : kl_nchwc_conv_workspace_bytes(&p, plain);
    char *ws = x->ws, *rest = ws + a64(cw);
    if (!n->priv) { /* not prepacked (a graph built without kl_graph_optimize's prepack) */
        float *pk = (float *)rest;
        kl_nchwc_conv_pack_weights(&p, in[1]->data, pk);
        p.packed_w = pk;
        rest += a64(kl_nchwc_conv_packed_floats(&p) * sizeof(float));
    }
    const float *bias = n_in > 2 && in[2] ? in[2]->data : NULL;
    if (pooled) {
        if (!same || R) return kl__fail_node(e, n, KL_EINVAL, "fused pool with a residual");
        if (fuse) return kl_nchwc_conv_maxpool_f32(&p, plain, &q, in[0]->data, bias, out[0]->data, cw ? ws : NULL, x->pool, e);
        float *tmp = (float *)rest; /* the conv's output, then the pool */
        if ((rc = kl_nchwc_conv_f32(&p, plain, in[0]->data, bias, tmp, cw ? ws : NULL, x->pool, e))) return rc;
        kl_nchwc_maxpool_f32(&q, tmp, out[0]->data, x->pool);
        return KL_OK;
    }
    if (same) {
        p.residual = R ? R->data : NULL;
        return kl_nchwc_conv_f32(&p, plain, in[0]->data, bias, out[0]->data, cw ? ws : NULL, x->pool, e);
    }
    float *tmp = (float *)rest;
    kl_act act = p.act;
    p.act = (kl_act){KL_ACT_NONE, 0, 0};
    if ((rc = kl_nchwc_conv_f32(&p, plain, in[0]->data, bias, tmp, cw ? ws : NULL, x->pool, e))) return rc;
    int64_t cd[5] = {p.N, cblocks(p.M), p.out[0], p.out[1], KL_NCHWC};
    if ((rc = kl_binary(KL_BIN_ADD, KL_F32, 5, cd, tmp, 5, R->dims, R->data, out[0]->data, x->pool, e))) return rc;
    if (act.kind != KL_ACT_NONE) kl_act_apply_f32(act, out[0]->data, kl_tensor_numel(out[0]), x->pool);
    return KL_OK;
}

static void packed_free(void *p) { kl_mem_free(p); }

int kl__nchwc_prepack(kl_graph *g, kl_gnode *n, kl_err *e) {
    const kl_tensor *W = g->values[n->inputs[1]].init;
    if (!W || W->dtype != KL_F32 || W->rank != 4 || !kl_tensor_is_contiguous(W)) return KL_OK;
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2;
    p.M = W->dims[0];
    p.group = kl_gnode_attr_int(n, "group", 1);
    if (p.group <= 0 || p.M % p.group) return KL_OK;
    p.C = W->dims[1] * p.group;
    p.k[0] = W->dims[2];
    p.k[1] = W->dims[3];
    const kl_attr *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations");
    for (int i = 0; i < 2; i++) { /* as nconv_params: the packed form depends on them (Winograd) */
        p.stride[i] = st && st->n == 2 ? st->ints[i] : 1;
        p.dilation[i] = dl && dl->n == 2 ? dl->ints[i] : 1;
    }
    size_t nf = kl_nchwc_conv_packed_floats(&p);
    if (!nf) return KL_OK;
    float *pk = kl_mem_alloc_e(nf * sizeof(float), KL_TAG_PARAMS, e);
    if (!pk) return e ? e->code : KL_ENOMEM;
    kl_nchwc_conv_pack_weights(&p, W->data, pk);
    n->priv = pk;
    n->priv_free = packed_free;
    return KL_OK;
}

/* ================================================================== *
 * Pools
 * ================================================================== */

static int npool_params(kl_gnode *n, const kl_tensor *X, kl_pooling_params *p, kl_err *e) {
    int rc;
    if ((rc = need_blocked(n, X, "input", e))) return rc;
    memset(p, 0, sizeof *p);
    p->nsp = 2;
    p->N = X->dims[0];
    p->C = X->dims[1] * KL_NCHWC;
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape"), *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations"),
                  *pd = kl_gnode_attr(n, "pads");
    if (!ks || ks->n != 2) return kl__fail_node(e, n, KL_EINVAL, "kernel_shape needs 2 entries");
    for (int i = 0; i < 2; i++) {
        p->in[i] = X->dims[2 + i];
        p->k[i] = ks->ints[i];
        p->stride[i] = st && st->n == 2 ? st->ints[i] : 1;
        p->dilation[i] = dl && dl->n == 2 ? dl->ints[i] : 1;
        p->pad_begin[i] = pd && pd->n == 4 ? pd->ints[i] : 0;
        p->pad_end[i] = pd && pd->n == 4 ? pd->ints[i + 2] : 0;
        if (p->k[i] <= 0 || p->stride[i] <= 0 || p->dilation[i] <= 0) return kl__fail_node(e, n, KL_EINVAL, "kernel/strides/dilations must be positive");
    }
    p->ceil_mode = (int)kl_gnode_attr_int(n, "ceil_mode", 0);
    p->count_include_pad = (int)kl_gnode_attr_int(n, "count_include_pad", 0);
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int i = 0; i < 2; i++) kl_auto_pad(p->in[i], p->k[i], p->stride[i], p->dilation[i], ap[5] == 'U', &p->pad_begin[i], &p->pad_end[i]);
    else if (!strcmp(ap, "VALID"))
        for (int i = 0; i < 2; i++) p->pad_begin[i] = p->pad_end[i] = 0;
    if ((rc = kl_pooling_prepare(p, e))) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, rc, "%s", m);
    }
    return KL_OK;
}

static int npool_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_pooling_params p;
    int rc;
    if ((rc = npool_params(n, in[0], &p, e))) return rc;
    int64_t d[5] = {p.N, in[0]->dims[1], p.out[0], p.out[1], KL_NCHWC};
    kl__set_shape(&out[0], KL_F32, 5, d);
    return KL_OK;
}
static int npool_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    kl_pooling_params p;
    int rc;
    if ((rc = npool_params(n, in[0], &p, e))) return rc;
    if (!strcmp(n->op_type, "NchwcMaxPool")) kl_nchwc_maxpool_f32(&p, in[0]->data, out[0]->data, x->pool);
    else kl_nchwc_avgpool_f32(&p, in[0]->data, out[0]->data, x->pool);
    return KL_OK;
}

static int ngap_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = need_blocked(n, in[0], "input", e))) return rc;
    int64_t d[5] = {in[0]->dims[0], in[0]->dims[1], 1, 1, KL_NCHWC};
    kl__set_shape(&out[0], KL_F32, 5, d);
    return KL_OK;
}
static int ngap_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *X = in[0];
    kl_nchwc_global_avgpool_f32(X->dims[0], X->dims[1] * KL_NCHWC, X->dims[2] * X->dims[3], X->data, out[0]->data, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const char *const no_attrs[] = {NULL};
static const char *const a_rout[] = {"channels", NULL};
static const char *const a_nconv[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "_act", "_act_a", "_act_b",
                                      "plain_input", "_pool_kh", "_pool_kw", "_pool_sh", "_pool_sw", "_pool_pt", "_pool_pl",
                                      "_pool_pb", "_pool_pr", NULL};
static const char *const a_npool[] = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides",
                                      "storage_order", NULL};

/* An NchwcConv runs sample by sample with the same bits only when its
 * kernel choice does not depend on the batch (Winograd: weight bytes per
 * tile); the other blocked ops compute each image alone. */
int kl__op_sample_ok(kl_gnode *n, kl_tensor *const *in, int n_in) {
    if (strcmp(n->op->name, "NchwcConv") || strcmp(n->op->domain, "keel")) return 1;
    kl_conv_params p;
    int plain;
    if (nconv_params(n, in, n_in, &p, &plain, NULL)) return 0;
    return kl_nchwc_conv_batch_invariant(&p, plain);
}

const kl_op kl__ops_nchwc[] = {
    {"ReorderInput", "keel", 1, 1, 1, 1, 1, 1, no_attrs, NULL, rin_infer, rin_run, KL_OP_SAMPLEWISE},
    {"ReorderOutput", "keel", 1, 1, 1, 1, 1, 1, a_rout, NULL, rout_infer, rout_run, KL_OP_SAMPLEWISE},
    {"NchwcConv", "keel", 1, 1, 2, 4, 1, 1, a_nconv, NULL, nconv_infer, nconv_run, KL_OP_SAMPLEWISE},
    {"NchwcMaxPool", "keel", 1, 1, 1, 1, 1, 1, a_npool, NULL, npool_infer, npool_run, KL_OP_SAMPLEWISE},
    {"NchwcAveragePool", "keel", 1, 1, 1, 1, 1, 1, a_npool, NULL, npool_infer, npool_run, KL_OP_SAMPLEWISE},
    {"NchwcGlobalAveragePool", "keel", 1, 1, 1, 1, 1, 1, no_attrs, NULL, ngap_infer, ngap_run, KL_OP_SAMPLEWISE},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
