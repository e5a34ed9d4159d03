/* Optimisation passes over the graph IR, run by kl_graph_optimize before
 * the first plan: constant folding of initializer-only subgraphs,
 * Identity/Dropout elimination, Conv+BatchNormalization folding, LayerNorm
 * and GELU pattern fusion (PyTorch's decompositions), MatMul+Add ->
 * Gemm/FusedMatMul, Conv/Gemm/FusedMatMul + Relu/Clip fusion, the residual
 * Add into Conv/FusedMatMul, Add + Softmax -> keel::AddSoftmax, the QDQ
 * fusion of quantized chains into int8 ops (qdq.c, first), and last the
 * NCHWc rewrite of conv chains to channel-blocked tensors (nchwc.c). Shape
 * subgraphs that depend on input shapes (Shape -> Gather -> Concat ->
 * Reshape) are folded per input-shape signature by the planner (exec.c). */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== *
 * Helpers
 * ================================================================== */

typedef struct {
    int *start, *list; /* consumers of value v: list[start[v] .. start[v+1]) */
} uses_t;

static void uses_free(uses_t *u) { free(u->start); free(u->list); }

static int uses_build(const kl_graph *g, uses_t *u) {
    u->start = calloc((size_t)g->n_values + 2, sizeof(int));
    int total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        for (int k = 0; k < g->nodes[i].n_in; k++) if (g->nodes[i].inputs[k] >= 0) total++;
    }
    u->list = malloc(sizeof(int) * ((size_t)total + 1));
    int *fill = calloc((size_t)g->n_values + 1, sizeof(int));
    if (!u->start || !u->list || !fill) { free(fill); uses_free(u); return KL_ENOMEM; }
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        for (int k = 0; k < g->nodes[i].n_in; k++) if (g->nodes[i].inputs[k] >= 0) u->start[g->nodes[i].inputs[k] + 1]++;
    }
    for (int v = 0; v < g->n_values; v++) u->start[v + 1] += u->start[v];
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0) continue;
            /* a node using v twice is listed once (nodes are visited in
             * order: a repeat is the last entry of v's list so far) */
            if (!fill[v] || u->list[u->start[v] + fill[v] - 1] != i) u->list[u->start[v] + fill[v]++] = i;
        }
    }
    /* compact duplicates: count actual */
    int *nstart = calloc((size_t)g->n_values + 2, sizeof(int));
    if (!nstart) { free(fill); uses_free(u); return KL_ENOMEM; }
    int w = 0;
    for (int v = 0; v < g->n_values; v++) {
        nstart[v] = w;
        for (int j = 0; j < fill[v]; j++) u->list[w++] = u->list[u->start[v] + j];
    }
    nstart[g->n_values] = w;
    free(u->start);
    u->start = nstart;
    free(fill);
    return KL_OK;
}

static int n_consumers(const uses_t *u, int v) { return u->start[v + 1] - u->start[v]; }

/* The only consumer of v (node index), or -1 (none, several, or a graph output). */
static int only_consumer(const kl_graph *g, const uses_t *u, int v) {
    if (v < 0 || g->values[v].is_output || n_consumers(u, v) != 1) return -1;
    return u->list[u->start[v]];
}

int kl__is_onnx_op(const kl_gnode *n, const char *op) { return !n->dead && !strcmp(n->op_type, op) && !*n->domain; }
static int is_op(const kl_gnode *n, const char *op) { return kl__is_onnx_op(n, op); }

const kl_tensor *kl__init_of(const kl_graph *g, int v) { return v >= 0 ? g->values[v].init : NULL; }
static const kl_tensor *init_of(const kl_graph *g, int v) { return kl__init_of(g, v); }

double kl__scalar_of(const kl_graph *g, int v) {
    const kl_tensor *t = init_of(g, v);
    if (!t || kl_tensor_numel(t) != 1) return NAN;
    return kl__dbl_at(t, 0);
}

/* the other input of a binary node given one of them, or -1 */
static int other_input(const kl_gnode *n, int v) {
    if (n->n_in != 2) return -1;
    if (n->inputs[0] == v) return n->inputs[1];
    if (n->inputs[1] == v) return n->inputs[0];
    return -1;
}

static int new_init(kl_graph *g, const char *base, kl_tensor *t) {
    char name[512];
    for (int i = 0;; i++) {
        snprintf(name, sizeof name, "%s__keel%d", base, i);
        if (kl_graph_find_value(g, name) < 0) break;
    }
    int v = kl_graph_value(g, name);
    if (v < 0) return -1;
    g->values[v].init = t;
    g->values[v].dtype = t->dtype;
    g->values[v].rank = t->rank;
    for (int d = 0; d < t->rank; d++) g->values[v].dims[d] = t->dims[d];
    return v;
}

int kl__set_int_attr(kl_gnode *n, const char *name, int64_t v) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name)) { n->attrs[i].type = KL_ATTR_INT; n->attrs[i].i = v; return KL_OK; }
    kl_attr *a = kl_gnode_attr_add(n, name, KL_ATTR_INT);
    if (!a) return KL_ENOMEM;
    a->i = v;
    return KL_OK;
}
static int set_float_attr(kl_gnode *n, const char *name, float v) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name)) { n->attrs[i].type = KL_ATTR_FLOAT; n->attrs[i].f = v; return KL_OK; }
    kl_attr *a = kl_gnode_attr_add(n, name, KL_ATTR_FLOAT);
    if (!a) return KL_ENOMEM;
    a->f = v;
    return KL_OK;
}

/* ================================================================== *
 * Passes
 * ================================================================== */

/* Identity and Dropout (inference) are removed by rewiring their consumers:
 * each removed output forwards to its input (fwd), then one sweep points
 * every input at the end of its forwarding chain (O(nodes + values); a
 * rewiring scan per removed node was quadratic). */
static int pass_eliminate(kl_graph *g, int *changed, kl_err *e) {
    int *fwd = NULL, n_drop = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        if (n->dead || *n->domain) continue;
        int drop = !strcmp(n->op_type, "Identity") ||
                   (!strcmp(n->op_type, "Dropout") && (n->n_out < 2 || n->outputs[1] < 0) && (n->n_in < 3 || n->inputs[2] < 0));
        if (!drop || n->n_in < 1 || n->inputs[0] < 0 || n->outputs[0] < 0) continue;
        int x = n->inputs[0], y = n->outputs[0];
        if (g->values[y].is_output) continue; /* keep the graph output's name */
        if (!fwd) {
            if (!(fwd = malloc(sizeof(int) * ((size_t)g->n_values + 1)))) return kl_err_set(e, KL_ENOMEM, "out of memory");
            for (int v = 0; v < g->n_values; v++) fwd[v] = v;
        }
        fwd[y] = x;
        n->dead = 1;
        n_drop++;
    }
    if (!fwd) return KL_OK;
    for (int v = 0; v < g->n_values; v++) { /* resolve the chains, compressing them */
        int r = v;
        while (fwd[r] != r) r = fwd[r];
        for (int w = v; fwd[w] != r && w != r;) { int nx = fwd[w]; fwd[w] = r; w = nx; }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++) if (n->inputs[k] >= 0) n->inputs[k] = fwd[n->inputs[k]];
    }
    free(fwd);
    *changed += n_drop;
    return KL_OK;
}

/* Nodes whose inputs are all initializers become initializers. */
static int pass_fold(kl_graph *g, int *changed, kl_err *e) {
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        if (n->dead || !n->op || (n->op->flags & KL_OP_NOFOLD) || n->n_out > 8) continue;
        int ok = 1;
        kl_tensor *in[64];
        if (n->n_in > 64) continue;
        for (int k = 0; k < n->n_in && ok; k++) {
            int v = n->inputs[k];
            if (v < 0) { in[k] = NULL; continue; }
            if (!g->values[v].init) ok = 0;
            else in[k] = g->values[v].init;
        }
        if (!ok) continue;
        kl_tensor *out[8];
        kl_err e2 = {0};
        if (kl__run_node_alloc(n, in, n->n_in, out, n->n_out, NULL, &e2)) continue; /* leave it to run time */
        for (int k = 0; k < n->n_out; k++) {
            int v = n->outputs[k];
            if (v < 0) { kl_tensor_free(out[k]); continue; }
            out[k]->tag = KL_TAG_PARAMS;
            g->values[v].init = out[k];
            g->values[v].producer = -1;
        }
        n->dead = 1;
        (*changed)++;
    }
    (void)e;
    return KL_OK;
}

/* Conv -> BatchNormalization: scale the weights, shift the bias. */
static int pass_conv_bn(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!is_op(&g->nodes[i], "Conv")) continue;
        int c = g->nodes[i].outputs[0];
        int j = only_consumer(g, &u, c);
        if (j < 0 || !is_op(&g->nodes[j], "BatchNormalization") || g->nodes[j].inputs[0] != c || g->nodes[j].n_out != 1) continue;
        kl_gnode *conv = &g->nodes[i], *bn = &g->nodes[j];
        const kl_tensor *W = init_of(g, conv->inputs[1]), *B = conv->n_in > 2 ? init_of(g, conv->inputs[2]) : NULL;
        const kl_tensor *sc = init_of(g, bn->inputs[1]), *bb = init_of(g, bn->inputs[2]), *mu = init_of(g, bn->inputs[3]), *var = init_of(g, bn->inputs[4]);
        if (!W || !sc || !bb || !mu || !var || W->dtype != KL_F32 || sc->dtype != KL_F32 || bb->dtype != KL_F32 || mu->dtype != KL_F32 || var->dtype != KL_F32) continue;
        if (conv->n_in > 2 && conv->inputs[2] >= 0 && (!B || B->dtype != KL_F32)) continue;
        int64_t M = W->dims[0];
        if (kl_tensor_numel(sc) != M || kl_tensor_numel(bb) != M || kl_tensor_numel(mu) != M || kl_tensor_numel(var) != M) continue;
        if (kl_gnode_attr_int(bn, "training_mode", 0)) continue;
        float eps = kl_gnode_attr_float(bn, "epsilon", 1e-5f);
        kl_tensor *W2 = NULL, *B2 = NULL;
        if ((rc = kl_tensor_new_uninit(KL_F32, W->rank, W->dims, KL_TAG_PARAMS, &W2, e))) goto done;
        if ((rc = kl_tensor_new_uninit(KL_F32, 1, &M, KL_TAG_PARAMS, &B2, e))) { kl_tensor_free(W2); goto done; }
        int64_t per = kl_tensor_numel(W) / (M ? M : 1);
        const float *w = W->data, *s = sc->data, *b = bb->data, *m = mu->data, *v = var->data;
        float *w2 = W2->data, *b2 = B2->data;
        for (int64_t o = 0; o < M; o++) {
            float f = s[o] / sqrtf(v[o] + eps);
            for (int64_t k = 0; k < per; k++) w2[o * per + k] = w[o * per + k] * f;
            b2[o] = ((B ? ((const float *)B->data)[o] : 0.f) - m[o]) * f + b[o];
        }
        int vw = new_init(g, g->values[conv->inputs[1]].name, W2);
        if (vw < 0) { kl_tensor_free(W2); kl_tensor_free(B2); rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        int vb = new_init(g, "bn_bias", B2);
        if (vb < 0) { kl_tensor_free(B2); rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        conv = &g->nodes[i];
        bn = &g->nodes[j];
        if (conv->n_in < 3) {
            int *ni = realloc(conv->inputs, sizeof(int) * 3);
            if (!ni) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
            conv->inputs = ni;
            conv->n_in = 3;
        }
        conv->inputs[1] = vw;
        conv->inputs[2] = vb;
        conv->outputs[0] = bn->outputs[0];
        bn->dead = 1;
        (*changed)++;
    }
done:
    uses_free(&u);
    return rc;
}

/* Conv/Gemm/FusedMatMul -> Relu or Clip(const): fused activation. */
static int pass_act(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        int conv = is_op(n, "Conv"), gemm = is_op(n, "Gemm"), fmm = !n->dead && !strcmp(n->op_type, "FusedMatMul") && !strcmp(n->domain, "keel");
        int add = is_op(n, "Add");
        if ((!conv && !gemm && !fmm && !add) || kl_gnode_attr_int(n, "_act", 0)) continue;
        if (conv && g->values[n->inputs[0]].dtype != KL_F32 && g->values[n->inputs[0]].dtype != KL_DTYPE_COUNT) continue;
        int j = only_consumer(g, &u, n->outputs[0]);
        if (j < 0) continue;
        kl_gnode *a = &g->nodes[j];
        int act = 0;
        float lo = 0, hi = 0;
        if (is_op(a, "Relu")) act = 1;
        else if (is_op(a, "HardSwish") && conv) act = 3; /* Conv only, as Clip */
        else if (is_op(a, "Clip")) {
            if (a->opset < 11) { lo = kl_gnode_attr_float(a, "min", -INFINITY); hi = kl_gnode_attr_float(a, "max", INFINITY); act = 2; }
            else {
                double l = a->n_in > 1 && a->inputs[1] >= 0 ? kl__scalar_of(g, a->inputs[1]) : -INFINITY;
                double h = a->n_in > 2 && a->inputs[2] >= 0 ? kl__scalar_of(g, a->inputs[2]) : INFINITY;
                if (isnan(l) || isnan(h)) continue;
                lo = (float)l; hi = (float)h; act = 2;
            }
            if (!conv && !fmm) continue; /* Gemm and Add fuse Relu only */
        }
        if (!act) continue;
        if (kl__set_int_attr(n, "_act", act)) { uses_free(&u); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        if (act == 2 && (set_float_attr(n, "_act_a", lo) || set_float_attr(n, "_act_b", hi))) { uses_free(&u); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        n->outputs[0] = a->outputs[0];
        a->dead = 1;
        (*changed)++;
    }
    uses_free(&u);
    return KL_OK;
}

/* Add(Conv(x), r) [+ Relu fused into the Add] -> Conv(x, W, B, r) with the
 * residual and the activation in the conv's GEMM epilogue (the 4th Conv input
 * is a keel extension); the same for keel::FusedMatMul (transformer residuals). r must be computed (not a constant, which would be a
 * bias); a broadcasting r is still correct (the conv op falls back to a
 * separate Add). */
static int pass_conv_add(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *a = &g->nodes[i];
        if (!is_op(a, "Add") || a->n_in != 2 || a->inputs[0] == a->inputs[1] || kl_gnode_attr_int(a, "_act", 0) > 1)
            continue;
        for (int side = 0; side < 2; side++) {
            int cv = a->inputs[side], rv = a->inputs[1 - side];
            if (cv < 0 || rv < 0 || g->values[cv].is_output || g->values[rv].init) continue;
            int p = g->values[cv].producer;
            if (p < 0 || only_consumer(g, &u, cv) != i) continue;
            kl_gnode *c = &g->nodes[p];
            int fmm = !c->dead && !strcmp(c->op_type, "FusedMatMul") && !strcmp(c->domain, "keel");
            if ((!is_op(c, "Conv") && !fmm) || c->n_in > 3 || kl_gnode_attr_int(c, "_act", 0)) continue;
            kl_dtype dx = g->values[c->inputs[0]].dtype, dr = g->values[rv].dtype;
            if ((dx != KL_F32 && dx != KL_DTYPE_COUNT) || (dr != KL_F32 && dr != KL_DTYPE_COUNT)) continue;
            int *ni = realloc(c->inputs, sizeof(int) * 4);
            if (!ni) { uses_free(&u); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
            c->inputs = ni;
            if (c->n_in < 3) c->inputs[2] = -1;
            c->inputs[3] = rv;
            c->n_in = 4;
            if (kl_gnode_attr_int(a, "_act", 0) == 1 && kl__set_int_attr(c, "_act", 1)) {
                uses_free(&u);
                return kl_err_set(e, KL_ENOMEM, "out of memory");
            }
            c->outputs[0] = a->outputs[0];
            a->dead = 1;
            (*changed)++;
            break;
        }
    }
    uses_free(&u);
    return KL_OK;
}

/* MatMul(A, W) + b with W 2-D and b 1-D initializers -> keel::FusedMatMul
 * (a Gemm for any rank of A: one GEMM over the flattened rows, bias epilogue). */
static int pass_matmul_add(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        if (!is_op(n, "MatMul")) continue;
        const kl_tensor *W = init_of(g, n->inputs[1]);
        if (!W || W->rank != 2 || W->dtype != KL_F32) continue;
        int j = only_consumer(g, &u, n->outputs[0]);
        if (j < 0 || !is_op(&g->nodes[j], "Add")) continue;
        kl_gnode *a = &g->nodes[j];
        int bv = other_input(a, n->outputs[0]);
        const kl_tensor *B = init_of(g, bv);
        if (!B || B->dtype != KL_F32 || kl_tensor_numel(B) != W->dims[1] || (B->rank != 1 && !(B->rank == 2 && B->dims[0] == 1))) continue;
        free(n->op_type);
        free(n->domain);
        n->op_type = strdup("FusedMatMul");
        n->domain = strdup("keel");
        int *ni = realloc(n->inputs, sizeof(int) * 3);
        if (!n->op_type || !n->domain || !ni) { uses_free(&u); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        n->inputs = ni;
        n->n_in = 3;
        n->inputs[2] = bv;
        n->outputs[0] = a->outputs[0];
        n->opset = 1;
        a->dead = 1;
        (*changed)++;
    }
    uses_free(&u);
    return KL_OK;
}

/* Add(x, m) -> Softmax(last axis) -> keel::AddSoftmax(x, m): attention
 * scores plus the padding mask, softmax'ed without storing the sum. */
static int pass_add_softmax(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *a = &g->nodes[i];
        if (!is_op(a, "Add") || a->n_in != 2 || a->inputs[0] < 0 || a->inputs[1] < 0 || kl_gnode_attr_int(a, "_act", 0))
            continue;
        int j = only_consumer(g, &u, a->outputs[0]);
        if (j < 0 || !is_op(&g->nodes[j], "Softmax") || g->nodes[j].opset < 13 || kl_gnode_attr_int(&g->nodes[j], "axis", -1) != -1)
            continue;
        kl_dtype d0 = g->values[a->inputs[0]].dtype, d1 = g->values[a->inputs[1]].dtype;
        if ((d0 != KL_F32 && d0 != KL_DTYPE_COUNT) || (d1 != KL_F32 && d1 != KL_DTYPE_COUNT)) continue;
        kl_gnode *sm = &g->nodes[j];
        free(a->op_type);
        free(a->domain);
        a->op_type = strdup("AddSoftmax");
        a->domain = strdup("keel");
        if (!a->op_type || !a->domain) { uses_free(&u); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        a->opset = 1;
        a->outputs[0] = sm->outputs[0];
        sm->dead = 1;
        (*changed)++;
    }
    uses_free(&u);
    return KL_OK;
}

/* ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul(g) -> Add(b)
 * over the last axis -> LayerNormalization. */
static int last_axis_only(const kl_graph *g, const kl_gnode *n) {
    const kl_attr *a = kl_gnode_attr(n, "axes");
    if (a) return a->n == 1 && a->ints[0] == -1;
    if (n->n_in > 1 && n->inputs[1] >= 0) {
        const kl_tensor *t = init_of(g, n->inputs[1]);
        return t && kl_tensor_numel(t) == 1 && kl__int_at(t, 0) == -1;
    }
    return 0;
}

static int pass_layernorm(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        kl_gnode *rm = &g->nodes[i];
        if (!is_op(rm, "ReduceMean") || !last_axis_only(g, rm) || !kl_gnode_attr_int(rm, "keepdims", 1)) continue;
        int x = rm->inputs[0], mean = rm->outputs[0];
        int isub = only_consumer(g, &u, mean);
        if (isub < 0 || !is_op(&g->nodes[isub], "Sub") || g->nodes[isub].inputs[0] != x || g->nodes[isub].inputs[1] != mean) continue;
        int d = g->nodes[isub].outputs[0];
        if (g->values[d].is_output || n_consumers(&u, d) != 2) continue;
        int ipow = -1, idiv = -1;
        for (int k = u.start[d]; k < u.start[d + 1]; k++) {
            kl_gnode *c = &g->nodes[u.list[k]];
            if (is_op(c, "Pow") && c->inputs[0] == d && kl__scalar_of(g, c->inputs[1]) == 2.0) ipow = u.list[k];
            else if (is_op(c, "Mul") && c->inputs[0] == d && c->inputs[1] == d) ipow = u.list[k];
            else if (is_op(c, "Div") && c->inputs[0] == d) idiv = u.list[k];
        }
        if (ipow < 0 || idiv < 0) continue;
        int irm2 = only_consumer(g, &u, g->nodes[ipow].outputs[0]);
        if (irm2 < 0 || !is_op(&g->nodes[irm2], "ReduceMean") || !last_axis_only(g, &g->nodes[irm2])) continue;
        int iadd = only_consumer(g, &u, g->nodes[irm2].outputs[0]);
        if (iadd < 0 || !is_op(&g->nodes[iadd], "Add")) continue;
        double eps = kl__scalar_of(g, other_input(&g->nodes[iadd], g->nodes[irm2].outputs[0]));
        if (isnan(eps)) continue;
        int isq = only_consumer(g, &u, g->nodes[iadd].outputs[0]);
        if (isq < 0 || !is_op(&g->nodes[isq], "Sqrt") || g->nodes[idiv].inputs[1] != g->nodes[isq].outputs[0]) continue;
        if (only_consumer(g, &u, g->nodes[isq].outputs[0]) != idiv) continue;
        int imul = only_consumer(g, &u, g->nodes[idiv].outputs[0]);
        if (imul < 0 || !is_op(&g->nodes[imul], "Mul")) continue;
        int gv = other_input(&g->nodes[imul], g->nodes[idiv].outputs[0]);
        const kl_tensor *gt = init_of(g, gv);
        if (!gt || gt->dtype != KL_F32 || gt->rank != 1) continue;
        int iadd2 = only_consumer(g, &u, g->nodes[imul].outputs[0]);
        int bv = -1, y = g->nodes[imul].outputs[0];
        if (iadd2 >= 0 && is_op(&g->nodes[iadd2], "Add")) {
            bv = other_input(&g->nodes[iadd2], g->nodes[imul].outputs[0]);
            const kl_tensor *bt = init_of(g, bv);
            if (!bt || bt->dtype != KL_F32 || kl_tensor_numel(bt) != kl_tensor_numel(gt)) bv = -1;
            else y = g->nodes[iadd2].outputs[0];
        }
        int dead[9] = {i, isub, ipow, irm2, iadd, isq, idiv, imul, bv >= 0 ? iadd2 : -1};
        char nm[512];
        snprintf(nm, sizeof nm, "%s_layernorm", g->nodes[i].name);
        const char *ins[3] = {g->values[x].name, g->values[gv].name, bv >= 0 ? g->values[bv].name : ""};
        const char *outs[1] = {g->values[y].name};
        int ni = kl_graph_add_node(g, "LayerNormalization", nm, ins, bv >= 0 ? 3 : 2, outs, 1);
        if (ni < 0) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        kl_gnode *ln = &g->nodes[ni];
        ln->opset = 17;
        ln->index = g->nodes[i].index;
        if (kl__set_int_attr(ln, "axis", -1) || set_float_attr(ln, "epsilon", (float)eps)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        for (int k = 0; k < 9; k++) if (dead[k] >= 0) g->nodes[dead[k]].dead = 1;
        (*changed)++;
    }
    uses_free(&u);
    return rc;
}

/* Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(0.5) -> Gelu (com.microsoft). */
static int pass_gelu(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK, n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        kl_gnode *dv = &g->nodes[i];
        if (!is_op(dv, "Div") || fabs(kl__scalar_of(g, dv->inputs[1]) - 1.41421356) > 1e-3) continue;
        int x = dv->inputs[0];
        int ierf = only_consumer(g, &u, dv->outputs[0]);
        if (ierf < 0 || !is_op(&g->nodes[ierf], "Erf")) continue;
        int iadd = only_consumer(g, &u, g->nodes[ierf].outputs[0]);
        if (iadd < 0 || !is_op(&g->nodes[iadd], "Add") || kl__scalar_of(g, other_input(&g->nodes[iadd], g->nodes[ierf].outputs[0])) != 1.0) continue;
        int imul = only_consumer(g, &u, g->nodes[iadd].outputs[0]);
        if (imul < 0 || !is_op(&g->nodes[imul], "Mul") || other_input(&g->nodes[imul], g->nodes[iadd].outputs[0]) != x) continue;
        int ihalf = only_consumer(g, &u, g->nodes[imul].outputs[0]);
        if (ihalf < 0 || !is_op(&g->nodes[ihalf], "Mul") || kl__scalar_of(g, other_input(&g->nodes[ihalf], g->nodes[imul].outputs[0])) != 0.5) continue;
        char nm[512];
        snprintf(nm, sizeof nm, "%s_gelu", g->nodes[i].name);
        const char *ins[1] = {g->values[x].name}, *outs[1] = {g->values[g->nodes[ihalf].outputs[0]].name};
        int ni = kl_graph_add_node(g, "Gelu", nm, ins, 1, outs, 1);
        if (ni < 0) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        if (kl_gnode_set_domain(&g->nodes[ni], "com.microsoft", 1)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        g->nodes[ni].index = g->nodes[i].index;
        int dead[5] = {i, ierf, iadd, imul, ihalf};
        for (int k = 0; k < 5; k++) g->nodes[dead[k]].dead = 1;
        (*changed)++;
    }
    uses_free(&u);
    return rc;
}

/* HardSigmoid with HardSwish's slope and offset (alpha 1/6 in float32, as
 * PyTorch exports hardswish before opset 14; beta 0.5). */
static int is_hardswish_gate(const kl_gnode *n) {
    return is_op(n, "HardSigmoid") && kl_gnode_attr_float(n, "alpha", 0.2f) == (float)(1.0 / 6.0) &&
           kl_gnode_attr_float(n, "beta", 0.5f) == 0.5f;
}

/* Mul(x, Sigmoid(x)) (either order; the Sigmoid's only consumer) -> keel::Silu(x):
 * the SiLU kernel computes x * sigmoid(x) with the same bits. Mul(x,
 * HardSigmoid(x) with alpha 1/6, beta 0.5) -> HardSwish(x) (ONNX defines
 * HardSwish so; the kernel computes x * relu6(x + 3) / 6, as PyTorch's
 * hardswish), which pass_act then fuses into a Conv before it. */

static int pass_silu(kl_graph *g, int *changed, kl_err *e) {
    uses_t u;
    if (uses_build(g, &u)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK, n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        kl_gnode *sg = &g->nodes[i];
        int hs = is_hardswish_gate(sg);
        if ((!is_op(sg, "Sigmoid") && !hs) || sg->n_in != 1 || sg->n_out != 1) continue;
        int x = sg->inputs[0], s = sg->outputs[0];
        int imul = only_consumer(g, &u, s);
        if (imul < 0 || !is_op(&g->nodes[imul], "Mul") || other_input(&g->nodes[imul], s) != x) continue;
        char nm[512];
        snprintf(nm, sizeof nm, "%s_%s", sg->name, hs ? "hardswish" : "silu");
        const char *ins[1] = {g->values[x].name}, *outs[1] = {g->values[g->nodes[imul].outputs[0]].name};
        int ni = kl_graph_add_node(g, hs ? "HardSwish" : "Silu", nm, ins, 1, outs, 1);
        if (ni >= 0 && hs && g->nodes[ni].opset < 14) g->nodes[ni].opset = 14; /* HardSwish is opset 14's */
        if (ni < 0 || (!hs && kl_gnode_set_domain(&g->nodes[ni], "keel", 1))) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        g->nodes[ni].index = g->nodes[i].index;
        g->nodes[i].dead = 1;
        g->nodes[imul].dead = 1;
        (*changed)++;
    }
    uses_free(&u);
    return rc;
}

int kl_graph_optimize(kl_graph *g, int level, kl_err *e) {
    if (level <= 0) return KL_OK;
    int rc, changed = 0;
    if ((rc = pass_eliminate(g, &changed, e))) return rc;
    /* quantized chains first: folding would turn DQ(weights) into float weights */
    if ((rc = kl__pass_qdq(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_fold(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_conv_bn(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_layernorm(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_gelu(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_silu(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_matmul_add(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_act(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_add_softmax(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if ((rc = pass_conv_add(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    /* channel-blocked convolutions (after the fusions it carries along) */
    if ((rc = kl__pass_nchwc(g, &changed, e))) return rc;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    /* initializers nothing uses any more (folded weights, ...) */
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init && !g->values[v].n_uses && !g->values[v].is_output) {
            kl_tensor_free(g->values[v].init);
            g->values[v].init = NULL;
        }
    for (int i = 0; i < g->n_nodes; i++)
        if ((rc = kl__prepack_node(g, &g->nodes[i], e))) return rc;
    if (changed) kl_log(KL_LOG_DEBUG, "graph", "optimisation: %d rewrites, %d nodes left", changed, g->n_nodes);
    return KL_OK;
}
