/* The NCHWc pass (last of kl_graph_optimize, before weight prepacking):
 * rewrites 2-D float32 Conv nodes with constant weights that the blocked
 * kernels take (kl_nchwc_conv_packed_floats > 0) to keel::NchwcConv on
 * channel-blocked tensors (N, ceil(C/16), H, W, 16), and the pools after
 * them to keel::NchwcMaxPool / NchwcAveragePool / NchwcGlobalAveragePool.
 * Relu, Clip (min <= 0 <= max: zero padding lanes stay zero) and Add of two
 * blocked tensors with the same channel count run unchanged on the 5-D
 * tensors. keel::ReorderInput goes in front of a conv whose input is plain
 * (except a first conv with fewer than 16 channels, which reads NCHW itself:
 * plain_input=1), keel::ReorderOutput in front of every other consumer of a
 * blocked value and of graph outputs (which keep their names). A MaxPool
 * right after a direct-kernel NchwcConv (ResNet's stem) moves into it
 * (_pool_* attributes: kl_nchwc_conv_maxpool_f32; KEEL_NCHWC_POOL_FUSE=0
 * keeps it separate). Shapes are
 * left to the planner, so symbolic batch sizes work as before.
 * Off when kl_nchwc_ok() is 0 (no AVX-512F, KEEL_NO_AVX512=1 or
 * KEEL_NO_NCHWC=1). Training graphs never reach it (the trainer does not call
 * kl_graph_optimize), float64 convs are never rewritten. */
#include "graph/graph_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEEL_NCHWC_POOL_FUSE=0: keep max pools after convs separate (A/B runs). */
static int pool_fuse_off(void) { return !kl_settings_get()->nchwc_pool_fuse; }

typedef struct {
    kl_graph *g;
    int cap;          /* size of the per-value arrays */
    int64_t *chans;   /* > 0: value is blocked with that many channels */
    int *rin, *rout;  /* blocked twin of a plain value / plain twin of a blocked one, -1 */
    int n_orig;       /* nodes before the pass (new reorder nodes are appended) */
    int v_orig;       /* values before the pass (their n_uses are the finalize's) */
    int *prod;        /* the node writing blocked value v (mark_blocked_output), -1 */
} nctx;

/* A new value named after base; -1 on OOM. */
static int new_value(nctx *c, const char *base, const char *suffix) {
    char name[512];
    for (int i = 0;; i++) {
        if (i) snprintf(name, sizeof name, "%s%s%d", base, suffix, i);
        else snprintf(name, sizeof name, "%s%s", base, suffix);
        if (kl_graph_find_value(c->g, name) < 0) break;
    }
    int v = kl_graph_value(c->g, name);
    if (v < 0 || v >= c->cap) return -1;
    c->g->values[v].dtype = KL_F32;
    c->g->values[v].rank = -1;
    return v;
}

/* Appends keel::<op>(from) -> to; returns KL_OK or KL_ENOMEM. */
static int add_reorder(nctx *c, const char *op, int from, int to, int64_t channels) {
    kl_graph *g = c->g;
    char nm[512];
    snprintf(nm, sizeof nm, "%s_%s", g->values[from].name, op);
    const char *ins[1] = {g->values[from].name}, *outs[1] = {g->values[to].name};
    int ni = kl_graph_add_node(g, op, nm, ins, 1, outs, 1);
    if (ni < 0 || kl_gnode_set_domain(&g->nodes[ni], "keel", 1)) return KL_ENOMEM;
    if (channels > 0 && kl__set_int_attr(&g->nodes[ni], "channels", channels)) return KL_ENOMEM;
    return KL_OK;
}

/* The blocked twin of plain value v with C channels (one ReorderInput per value). */
static int blocked_of(nctx *c, int v, int64_t C) {
    if (c->rin[v] >= 0) return c->rin[v];
    int b = new_value(c, c->g->values[v].name, "_nchwc");
    if (b < 0 || add_reorder(c, "ReorderInput", v, b, 0)) return -1;
    c->rin[v] = b;
    c->chans[b] = C;
    return b;
}

/* The plain twin of blocked value v (one ReorderOutput per value). */
static int plain_of(nctx *c, int v) {
    if (c->rout[v] >= 0) return c->rout[v];
    int p = new_value(c, c->g->values[v].name, "_nchw");
    if (p < 0 || add_reorder(c, "ReorderOutput", v, p, c->chans[v])) return -1;
    c->rout[v] = p;
    return p;
}

/* Node i now produces a blocked output 0 with C channels. A graph output
 * keeps its name and plain layout: the node writes a blocked twin that later
 * consumers read, and a ReorderOutput fills the graph output. */
static int mark_blocked_output(nctx *c, int i, int64_t C) {
    kl_graph *g = c->g;
    int y = g->nodes[i].outputs[0];
    if (!g->values[y].is_output) {
        c->chans[y] = C;
        c->prod[y] = i;
        return KL_OK;
    }
    int b = new_value(c, g->values[y].name, "_nchwc");
    if (b < 0) return KL_ENOMEM;
    g->nodes[i].outputs[0] = b;
    for (int j = i + 1; j < c->n_orig; j++) {
        kl_gnode *n = &g->nodes[j];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++) if (n->inputs[k] == y) n->inputs[k] = b;
    }
    c->chans[b] = C;
    c->rout[b] = y;
    c->prod[b] = i;
    return add_reorder(c, "ReorderOutput", b, y, C);
}

/* Conv parameters the pass can know (weights only); 0 when not a candidate. */
static int conv_candidate(const kl_graph *g, const kl_gnode *n, kl_conv_params *p) {
    if (!kl__is_onnx_op(n, "Conv") || n->n_in < 2 || n->n_out != 1) return 0;
    const kl_tensor *W = kl__init_of(g, n->inputs[1]);
    if (!W || W->dtype != KL_F32 || W->rank != 4 || !kl_tensor_is_contiguous(W)) return 0;
    if (n->n_in > 2 && n->inputs[2] >= 0) {
        const kl_value *b = &g->values[n->inputs[2]];
        if (b->dtype != KL_F32 && b->dtype != KL_DTYPE_COUNT) return 0;
    }
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") && strcmp(ap, "SAME_UPPER") && strcmp(ap, "SAME_LOWER") && strcmp(ap, "VALID")) return 0;
    memset(p, 0, sizeof *p);
    p->nsp = 2;
    p->M = W->dims[0];
    p->group = kl_gnode_attr_int(n, "group", 1);
    if (p->group <= 0 || p->M % p->group) return 0;
    p->C = W->dims[1] * p->group;
    p->k[0] = W->dims[2];
    p->k[1] = W->dims[3];
    return kl_nchwc_conv_packed_floats(p) > 0;
}

/* Clip with constant bounds around 0 (keeps zero lanes zero). */
static int clip_zero_safe(const kl_graph *g, const kl_gnode *n) {
    double lo, hi;
    if (n->opset < 11) {
        lo = kl_gnode_attr_float(n, "min", -INFINITY);
        hi = kl_gnode_attr_float(n, "max", INFINITY);
    } else {
        lo = n->n_in > 1 && n->inputs[1] >= 0 ? kl__scalar_of(g, n->inputs[1]) : -INFINITY;
        hi = n->n_in > 2 && n->inputs[2] >= 0 ? kl__scalar_of(g, n->inputs[2]) : INFINITY;
    }
    return !isnan(lo) && !isnan(hi) && lo <= 0 && hi >= 0;
}

/* MaxPool/AveragePool on a blocked input: 2-D, no indices output, every
 * window with at least one input element (pads smaller than the window). */
static int pool_candidate(const kl_gnode *n) {
    int mx = kl__is_onnx_op(n, "MaxPool"), av = kl__is_onnx_op(n, "AveragePool");
    if (!mx && !av) return 0;
    if (n->n_out > 1 && n->outputs[1] >= 0) return 0;
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape"), *pd = kl_gnode_attr(n, "pads"), *dl = kl_gnode_attr(n, "dilations");
    if (!ks || ks->n != 2) return 0;
    if (pd && pd->n == 4)
        for (int i = 0; i < 4; i++) {
            int64_t d = dl && dl->n == 2 ? dl->ints[i % 2] : 1;
            if (pd->ints[i] < 0 || pd->ints[i] >= (ks->ints[i % 2] - 1) * d + 1) return 0;
        }
    return 1;
}

/* MaxPool node i reading blocked value x: the NchwcConv producing x when
 * the pool can run inside it (kl_nchwc_conv_maxpool_f32): x read by the
 * pool only, not a graph output, no residual, a conv on the direct kernel
 * (not 1x1, not a 3x3 stride-1 one: Winograd), a 2-D pool without
 * dilation, ceil mode or auto_pad, stride <= kernel <= 8, pads < kernel.
 * -1 otherwise. Shapes are checked again at run time (the op falls back to
 * the conv and the pool one after the other). */
static int fusable_conv(const nctx *cx, int i, int x) {
    const kl_graph *g = cx->g;
    const kl_gnode *pn = &g->nodes[i];
    if (!kl__is_onnx_op(pn, "MaxPool") || g->values[x].is_output || pool_fuse_off()) return -1;
    const kl_attr *ks = kl_gnode_attr(pn, "kernel_shape"), *st = kl_gnode_attr(pn, "strides"), *dl = kl_gnode_attr(pn, "dilations"),
                  *pd = kl_gnode_attr(pn, "pads");
    if (!ks || ks->n != 2 || (st && st->n != 2) || (pd && pd->n != 4) || (dl && dl->n != 2)) return -1;
    if (kl_gnode_attr_int(pn, "ceil_mode", 0) || strcmp(kl_gnode_attr_str(pn, "auto_pad", "NOTSET"), "NOTSET")) return -1;
    for (int d = 0; d < 2; d++) {
        int64_t k = ks->ints[d], s = st ? st->ints[d] : 1;
        if ((dl && dl->ints[d] != 1) || s < 1 || s > k || k > 8) return -1;
        if (pd && (pd->ints[d] < 0 || pd->ints[d] >= k || pd->ints[d + 2] < 0 || pd->ints[d + 2] >= k)) return -1;
    }
    /* x read by the pool only: the finalize's use count (the pass keeps
     * it: a consumer rewired to a plain twin leaves a ReorderOutput reading
     * x); values the pass made are twins read by a reorder too. The
     * producer from the pass's own record (a scan of all nodes per pool was
     * quadratic). */
    if (x >= cx->v_orig || g->values[x].n_uses != 1) return -1;
    int prod = cx->prod[x];
    if (prod < 0) return -1;
    const kl_gnode *c = &g->nodes[prod];
    if (strcmp(c->op_type, "NchwcConv") || strcmp(c->domain, "keel") || (c->n_in > 3 && c->inputs[3] >= 0)) return -1;
    if (kl_gnode_attr(c, "_pool_kh")) return -1; /* pools one output already */
    if (kl_gnode_attr_int(c, "group", 1) != 1) return -1;
    const kl_tensor *W = kl__init_of(g, c->inputs[1]);
    if (!W || W->rank != 4) return -1;
    const kl_attr *cst = kl_gnode_attr(c, "strides"), *cdl = kl_gnode_attr(c, "dilations");
    int s1 = 1;
    for (int d = 0; d < 2; d++) s1 = s1 && (!cst || cst->ints[d] == 1) && (!cdl || cdl->ints[d] == 1);
    if (W->dims[2] == 1 && W->dims[3] == 1) return -1;
    if (W->dims[2] == 3 && W->dims[3] == 3 && s1) return -1;
    return prod;
}

/* Moves MaxPool i into conv j (attrs _pool_*), j now writing the pool's output. */
static int fuse_pool(kl_graph *g, int i, int j) {
    kl_gnode *pn = &g->nodes[i], *c = &g->nodes[j];
    const kl_attr *ks = kl_gnode_attr(pn, "kernel_shape"), *st = kl_gnode_attr(pn, "strides"), *pd = kl_gnode_attr(pn, "pads");
    int64_t v[8] = {ks->ints[0], ks->ints[1], st ? st->ints[0] : 1, st ? st->ints[1] : 1, pd ? pd->ints[0] : 0, pd ? pd->ints[1] : 0,
                    pd ? pd->ints[2] : 0, pd ? pd->ints[3] : 0};
    static const char *const names[8] = {"_pool_kh", "_pool_kw", "_pool_sh", "_pool_sw", "_pool_pt", "_pool_pl", "_pool_pb", "_pool_pr"};
    for (int k = 0; k < 8; k++)
        if (kl__set_int_attr(c, names[k], v[k])) return KL_ENOMEM;
    c->outputs[0] = pn->outputs[0];
    pn->dead = 1;
    return KL_OK;
}

static int rename_op(kl_gnode *n, const char *op) {
    char *t = strdup(op);
    if (!t) return KL_ENOMEM;
    free(n->op_type);
    n->op_type = t;
    return kl_gnode_set_domain(n, "keel", 1);
}

int kl__pass_nchwc(kl_graph *g, int *changed, kl_err *e) {
    if (!kl_nchwc_ok()) return KL_OK;
    /* is there anything to do? (no allocation for graphs without convs) */
    int any = 0;
    for (int i = 0; i < g->n_nodes && !any; i++) {
        kl_conv_params p;
        any = conv_candidate(g, &g->nodes[i], &p);
    }
    if (!any) return KL_OK;
    nctx c = {.g = g, .n_orig = g->n_nodes, .v_orig = g->n_values};
    /* values added: per node at most one per input (reorders) plus one output twin */
    int extra = 0;
    for (int i = 0; i < g->n_nodes; i++) extra += g->nodes[i].n_in + 2;
    c.cap = g->n_values + extra + 1;
    c.chans = calloc((size_t)c.cap, sizeof(int64_t));
    c.rin = malloc(sizeof(int) * (size_t)c.cap);
    c.rout = malloc(sizeof(int) * (size_t)c.cap);
    c.prod = malloc(sizeof(int) * (size_t)c.cap);
    int rc = KL_OK, n_conv = 0;
    if (!c.chans || !c.rin || !c.rout || !c.prod) { rc = KL_ENOMEM; goto done; }
    for (int v = 0; v < c.cap; v++) c.rin[v] = c.rout[v] = c.prod[v] = -1;
    for (int i = 0; i < c.n_orig; i++) {
        kl_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        kl_conv_params p;
        int x = n->n_in > 0 ? n->inputs[0] : -1;
        int64_t cx = x >= 0 ? c.chans[x] : 0;
        if (conv_candidate(g, n, &p)) {
            int r = n->n_in > 3 ? n->inputs[3] : -1;
            if (x >= 0 && (cx == 0 || cx == p.C) && (r < 0 || c.chans[r] == p.M)) {
                int plain = 0;
                if (cx == 0) {
                    if (p.C < KL_NCHWC) plain = 1;
                    else {
                        int b = blocked_of(&c, x, p.C);
                        if (b < 0) { rc = KL_ENOMEM; goto done; }
                        g->nodes[i].inputs[0] = b;
                    }
                }
                n = &g->nodes[i];
                if (rename_op(n, "NchwcConv") || (plain && kl__set_int_attr(n, "plain_input", 1))) { rc = KL_ENOMEM; goto done; }
                if ((rc = mark_blocked_output(&c, i, p.M))) goto done;
                n_conv++;
                (*changed)++;
                continue;
            }
        } else if (cx > 0 && n->n_out >= 1 && n->outputs[0] >= 0) {
            const char *to = NULL;
            int pass = 0;
            if (pool_candidate(n)) to = kl__is_onnx_op(n, "MaxPool") ? "NchwcMaxPool" : "NchwcAveragePool";
            else if (kl__is_onnx_op(n, "GlobalAveragePool")) to = "NchwcGlobalAveragePool";
            else if (kl__is_onnx_op(n, "Relu") && n->n_out == 1) pass = 1;
            else if (kl__is_onnx_op(n, "Clip") && n->n_out == 1 && clip_zero_safe(g, n)) pass = 1;
            else if (kl__is_onnx_op(n, "Add") && n->n_in == 2 && n->n_out == 1 && n->inputs[1] >= 0 && c.chans[n->inputs[1]] == cx &&
                     kl_gnode_attr_int(n, "_act", 0) <= 1)
                pass = 1;
            int j = to && !strcmp(to, "NchwcMaxPool") ? fusable_conv(&c, i, x) : -1;
            if (j >= 0) { /* the conv pools its own output */
                if ((rc = fuse_pool(g, i, j))) goto done;
                if ((rc = mark_blocked_output(&c, j, cx))) goto done;
                (*changed)++;
                continue;
            }
            if (to || pass) {
                if (to) {
                    if (rename_op(n, to)) { rc = KL_ENOMEM; goto done; }
                    if (!strcmp(to, "NchwcMaxPool")) /* a 2nd (omitted) output is not taken */
                        g->nodes[i].n_out = 1;
                    (*changed)++;
                }
                if ((rc = mark_blocked_output(&c, i, cx))) goto done;
                continue;
            }
        }
        /* any other consumer reads the plain layout */
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0 || !c.chans[v]) continue;
            int pv = plain_of(&c, v);
            if (pv < 0) { rc = KL_ENOMEM; goto done; }
            g->nodes[i].inputs[k] = pv;
        }
    }
    if (n_conv) kl_log(KL_LOG_DEBUG, "graph", "nchwc: %d convolutions on blocked tensors", n_conv);
done:
    free(c.chans);
    free(c.rin);
    free(c.rout);
    free(c.prod);
    if (rc == KL_ENOMEM) return kl_err_set(e, KL_ENOMEM, "out of memory (NCHWc pass)");
    return rc;
}
