/* Reverse-mode automatic differentiation on the graph IR: kl_graph_autodiff
 * walks the forward nodes in reverse topological order and appends, per
 * node, the gradient nodes its rule emits (ai.keel.grad ops from
 * ops_grad.c, or standard ops such as Gemm/Mul where they compute the
 * gradient exactly). Several consumers of one value contribute gradients
 * that are summed with Add in node order (deterministic). The backward nodes
 * read forward values (activations, weights), so the memory planner keeps
 * exactly those alive until their last backward use. */
#include "graph/grad_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== *
 * State and emission helpers
 * ================================================================== */

typedef struct {
    kl_graph *g;
    int nv0;            /* values before autodiff (only these get gradients) */
    int **contrib;      /* per value: gradient contributions (value indices) */
    int *n_contrib, *cap_contrib;
    int *final;         /* per value: summed gradient, -2 not yet summed */
    char *needs;        /* per value: depends on a wrt value */
    char *is_wrt;       /* per value: listed in wrt (its gradient is an output) */
    int tmp;            /* name counter */
    kl_err *e;
} ad;

static int oom(ad *a) { return kl_err_set(a->e, KL_ENOMEM, "out of memory"); }

static kl_gnode *node(ad *a, int ni) { return &a->g->nodes[ni]; }
static int in_v(ad *a, int ni, int k) { kl_gnode *n = node(a, ni); return k < n->n_in ? n->inputs[k] : -1; }
static int out_v(ad *a, int ni, int k) { kl_gnode *n = node(a, ni); return k < n->n_out ? n->outputs[k] : -1; }

/* Appends node op (domain "" = ONNX, opset 17) reading values ins (-1 =
 * omitted) and writing n_out fresh values named after base; want[k] == 0
 * omits output k (want NULL: all). Returns the node index (outs filled) or
 * a negative error. */
static int emit(ad *a, const char *domain, const char *op, const int *ins, int n_in, int n_out, const int *want, int *outs,
                int base) {
    kl_graph *g = a->g;
    const char *in_names[33], *out_names[8];
    char buf[8][256];
    KL_ASSERT(n_in <= 33 && n_out <= 8);
    for (int k = 0; k < n_in; k++) in_names[k] = ins[k] >= 0 ? g->values[ins[k]].name : "";
    for (int k = 0; k < n_out; k++) {
        out_names[k] = "";
        if (want && !want[k] && k > 0) continue; /* output 0 is required by every op */
        do snprintf(buf[k], sizeof buf[k], "%.200s_grad%d", base >= 0 ? g->values[base].name : "", a->tmp++);
        while (kl_graph_find_value(g, buf[k]) >= 0);
        out_names[k] = buf[k];
    }
    int ni = kl_graph_add_node(g, op, "", in_names, n_in, out_names, n_out);
    if (ni < 0) return oom(a);
    kl_gnode *n = node(a, ni);
    if (kl_gnode_set_domain(n, domain, *domain ? 1 : 17)) return oom(a);
    char nm[300];
    snprintf(nm, sizeof nm, "grad/%s", op);
    free(n->name);
    if (!(n->name = strdup(nm))) return oom(a);
    for (int k = 0; k < n_out; k++) outs[k] = n->outputs[k];
    return ni;
}

/* One-output helper: returns the new value or a negative error. */
static int emit1(ad *a, const char *domain, const char *op, const int *ins, int n_in, int base, int *ni_out) {
    int o;
    int ni = emit(a, domain, op, ins, n_in, 1, NULL, &o, base);
    if (ni < 0) return ni;
    if (ni_out) *ni_out = ni;
    return o;
}

static int set_int(ad *a, int ni, const char *name, int64_t v) {
    kl_attr *at = kl_gnode_attr_add(node(a, ni), name, KL_ATTR_INT);
    if (!at) return oom(a);
    at->i = v;
    return KL_OK;
}
static int set_float(ad *a, int ni, const char *name, float v) {
    kl_attr *at = kl_gnode_attr_add(node(a, ni), name, KL_ATTR_FLOAT);
    if (!at) return oom(a);
    at->f = v;
    return KL_OK;
}
static int set_ints(ad *a, int ni, const char *name, const int64_t *v, int cnt) {
    kl_attr *at = kl_gnode_attr_add(node(a, ni), name, KL_ATTR_INTS);
    if (!at) return oom(a);
    at->ints = malloc(sizeof(int64_t) * (size_t)(cnt ? cnt : 1));
    if (!at->ints) return oom(a);
    memcpy(at->ints, v, sizeof(int64_t) * (size_t)cnt);
    at->n = cnt;
    return KL_OK;
}
/* Copies the named attributes (when present) of node src to node dst. */
static int copy_attrs(ad *a, int src, int dst, const char *const *names) {
    for (const char *const *nm = names; *nm; nm++) {
        const kl_attr *s = kl_gnode_attr(node(a, src), *nm);
        if (!s) continue;
        kl_attr sa = *s; /* node(a, src) stays valid: no node is added here */
        int rc = KL_OK;
        switch (sa.type) {
        case KL_ATTR_INT: rc = set_int(a, dst, *nm, sa.i); break;
        case KL_ATTR_FLOAT: rc = set_float(a, dst, *nm, sa.f); break;
        case KL_ATTR_INTS: rc = set_ints(a, dst, *nm, sa.ints, sa.n); break;
        case KL_ATTR_STRING: {
            kl_attr *at = kl_gnode_attr_add(node(a, dst), *nm, KL_ATTR_STRING);
            if (!at || !(at->s = strdup(sa.s ? sa.s : ""))) return oom(a);
            break;
        }
        default: break;
        }
        if (rc) return rc;
    }
    return KL_OK;
}

/* Records value c as a gradient contribution to value v. */
static int contrib(ad *a, int v, int c) {
    if (v < 0 || v >= a->nv0 || c < 0) return c < 0 ? c : KL_OK;
    if (a->n_contrib[v] == a->cap_contrib[v]) {
        int nc = a->cap_contrib[v] ? 2 * a->cap_contrib[v] : 2;
        int *p = realloc(a->contrib[v], sizeof(int) * (size_t)nc);
        if (!p) return oom(a);
        a->contrib[v] = p;
        a->cap_contrib[v] = nc;
    }
    a->contrib[v][a->n_contrib[v]++] = c;
    return KL_OK;
}

/* The summed gradient of v (-1 when none reaches it), summing in the order
 * the contributions were made. */
static int grad_of(ad *a, int v) {
    if (v < 0 || v >= a->nv0) return -1;
    if (a->final[v] != -2) return a->final[v];
    int n = a->n_contrib[v];
    if (!n) return a->final[v] = -1;
    int acc = a->contrib[v][0];
    for (int i = 1; i < n; i++) {
        int ins[2] = {acc, a->contrib[v][i]};
        acc = emit1(a, "", "Add", ins, 2, v, NULL);
        if (acc < 0) return acc;
    }
    return a->final[v] = acc;
}

/* ================================================================== *
 * Gradient rules
 * ================================================================== */

/* A rule reads the forward node ni, its output gradients dy[] (-1 = none)
 * and want[k] (input k needs a gradient), and calls contrib() for each
 * input it differentiates. Node pointers are refetched after every emit
 * (adding nodes may move the node array). */
typedef int (*rule_fn)(ad *a, int ni, const int *dy, const int *want);

#define G KL__GRAD_DOMAIN

static int r_gemm(ad *a, int ni, const int *dy, const int *want) {
    kl_gnode *n = node(a, ni);
    int ta = (int)kl_gnode_attr_int(n, "transA", 0), tb = (int)kl_gnode_attr_int(n, "transB", 0);
    float alpha = kl_gnode_attr_float(n, "alpha", 1.f), beta = kl_gnode_attr_float(n, "beta", 1.f);
    int A = in_v(a, ni, 0), B = in_v(a, ni, 1), C = in_v(a, ni, 2), rc, k;
    if (want[0]) {
        int ins[2] = {ta ? B : dy[0], ta ? dy[0] : B}, g;
        if ((g = emit1(a, G, "MatMulT", ins, 2, A, &k)) < 0) return g;
        if ((rc = set_int(a, k, "transA", ta ? tb : 0)) || (rc = set_int(a, k, "transB", ta ? 1 : !tb))) return rc;
        if (alpha != 1.f && (rc = set_float(a, k, "alpha", alpha))) return rc;
        if ((rc = contrib(a, A, g))) return rc;
    }
    if (want[1]) {
        int ins[2] = {tb ? dy[0] : A, tb ? A : dy[0]}, g;
        if ((g = emit1(a, G, "MatMulT", ins, 2, B, &k)) < 0) return g;
        if ((rc = set_int(a, k, "transA", tb ? 1 : !ta)) || (rc = set_int(a, k, "transB", tb ? ta : 0))) return rc;
        if (alpha != 1.f && (rc = set_float(a, k, "alpha", alpha))) return rc;
        if ((rc = contrib(a, B, g))) return rc;
    }
    if (C >= 0 && want[2]) {
        int ins[2] = {dy[0], C}, g;
        if ((g = emit1(a, G, "SumToShape", ins, 2, C, &k)) < 0) return g;
        if (beta != 1.f && (rc = set_float(a, k, "scale", beta))) return rc;
        if ((rc = contrib(a, C, g))) return rc;
    }
    return KL_OK;
}

static int r_matmul(ad *a, int ni, const int *dy, const int *want) {
    int ins[3] = {dy[0], in_v(a, ni, 0), in_v(a, ni, 1)}, rc;
    for (int w = 0; w < 2; w++) {
        if (!want[w]) continue;
        int k, g = emit1(a, G, "MatMulGrad", ins, 3, ins[1 + w], &k);
        if (g < 0) return g;
        if ((rc = set_int(a, k, "input", w)) || (rc = contrib(a, ins[1 + w], g))) return rc;
    }
    return KL_OK;
}

/* Add/Sub/Mul/Div with NumPy broadcasting. */
static int r_arith(ad *a, int ni, const int *dy, const int *want) {
    const char *op = node(a, ni)->op_type;
    int A = in_v(a, ni, 0), B = in_v(a, ni, 1), Y = out_v(a, ni, 0), rc, k;
    int mul = !strcmp(op, "Mul"), div = !strcmp(op, "Div"), sub = !strcmp(op, "Sub");
    int t = -1; /* Div: dy / B */
    for (int w = 0; w < 2; w++) {
        if (!want[w]) continue;
        int x = w ? B : A, src = dy[0];
        float scale = 1.f;
        if (mul) {
            int ins[2] = {dy[0], w ? A : B};
            if ((src = emit1(a, "", "Mul", ins, 2, x, NULL)) < 0) return src;
        } else if (div) {
            if (t < 0) {
                int ins[2] = {dy[0], B};
                if ((t = emit1(a, "", "Div", ins, 2, A, NULL)) < 0) return t;
            }
            src = t;
            if (w) {
                int ins[2] = {t, Y};
                if ((src = emit1(a, "", "Mul", ins, 2, x, NULL)) < 0) return src;
                scale = -1.f;
            }
        } else if (sub && w) {
            scale = -1.f;
        }
        int ins[2] = {src, x}, g = emit1(a, G, "SumToShape", ins, 2, x, &k);
        if (g < 0) return g;
        if (scale != 1.f && (rc = set_float(a, k, "scale", scale))) return rc;
        if ((rc = contrib(a, x, g))) return rc;
    }
    return KL_OK;
}

/* dx = op(dy, ref) with ref = the forward input (use_y 0) or output (1). */
static int unary(ad *a, int ni, const int *dy, const char *domain, const char *op, int use_y) {
    int X = in_v(a, ni, 0), ins[2] = {dy[0], use_y ? out_v(a, ni, 0) : X};
    int g = emit1(a, domain, op, ins, 2, X, NULL);
    if (g < 0) return g;
    return contrib(a, X, g);
}
static int r_relu(ad *a, int ni, const int *dy, const int *want) { return unary(a, ni, dy, G, "ReluGrad", 0); }
static int r_sigmoid(ad *a, int ni, const int *dy, const int *want) { return unary(a, ni, dy, G, "SigmoidGrad", 1); }
static int r_tanh(ad *a, int ni, const int *dy, const int *want) { return unary(a, ni, dy, G, "TanhGrad", 1); }
static int r_erf(ad *a, int ni, const int *dy, const int *want) { return unary(a, ni, dy, G, "ErfGrad", 0); }
static int r_exp(ad *a, int ni, const int *dy, const int *want) { return unary(a, ni, dy, "", "Mul", 1); }
static int r_reshape(ad *a, int ni, const int *dy, const int *want) { return unary(a, ni, dy, G, "ReshapeLike", 0); }
static int r_gelu(ad *a, int ni, const int *dy, const int *want) {
    const char *ap = kl_gnode_attr_str(node(a, ni), "approximate", "none");
    if (strcmp(ap, "none")) {
        char d[300];
        return kl_err_set(a->e, KL_EUNSUPPORTED, "%s: no gradient rule for approximate='%s'", kl_gnode_desc(node(a, ni), d, sizeof d), ap);
    }
    return unary(a, ni, dy, G, "GeluGrad", 0);
}
static int r_copy(ad *a, int ni, const int *dy, const int *want) {
    int X = in_v(a, ni, 0), g = emit1(a, "", "Identity", dy, 1, X, NULL);
    if (g < 0) return g;
    return contrib(a, X, g);
}
static int r_neg(ad *a, int ni, const int *dy, const int *want) {
    int X = in_v(a, ni, 0), g = emit1(a, "", "Neg", dy, 1, X, NULL);
    if (g < 0) return g;
    return contrib(a, X, g);
}
static int r_softmax(ad *a, int ni, const int *dy, const int *want) {
    kl_gnode *n = node(a, ni);
    int lg = !strcmp(n->op_type, "LogSoftmax"), old = n->opset < 13, k, rc;
    int64_t axis = kl_gnode_attr_int(n, "axis", old ? 1 : -1);
    int X = in_v(a, ni, 0), ins[2] = {dy[0], out_v(a, ni, 0)};
    int g = emit1(a, G, lg ? "LogSoftmaxGrad" : "SoftmaxGrad", ins, 2, X, &k);
    if (g < 0) return g;
    if ((rc = set_int(a, k, "axis", axis)) || (old && (rc = set_int(a, k, "coerce", 1)))) return rc;
    return contrib(a, X, g);
}
static int r_transpose(ad *a, int ni, const int *dy, const int *want) {
    const kl_attr *p = kl_gnode_attr(node(a, ni), "perm");
    int64_t inv[KL_MAX_DIMS];
    int np = p ? p->n : 0, k, rc;
    if (np > KL_MAX_DIMS) np = KL_MAX_DIMS;
    for (int i = 0; i < np; i++)
        if (p->ints[i] >= 0 && p->ints[i] < np) inv[p->ints[i]] = i;
    int X = in_v(a, ni, 0), g = emit1(a, "", "Transpose", dy, 1, X, &k);
    if (g < 0) return g;
    if (np && (rc = set_ints(a, k, "perm", inv, np))) return rc; /* no perm: reversal, its own inverse */
    return contrib(a, X, g);
}
static int r_gather(ad *a, int ni, const int *dy, const int *want) {
    if (kl_gnode_attr_int(node(a, ni), "axis", 0) != 0) {
        char d[300];
        return kl_err_set(a->e, KL_EUNSUPPORTED, "%s: gradient of Gather is implemented for axis 0 (embedding) only", kl_gnode_desc(node(a, ni), d, sizeof d));
    }
    int X = in_v(a, ni, 0), ins[3] = {dy[0], X, in_v(a, ni, 1)};
    int g = emit1(a, G, "GatherGrad", ins, 3, X, NULL);
    if (g < 0) return g;
    return contrib(a, X, g);
}
static int r_dropout_inf(ad *a, int ni, const int *dy, const int *want) {
    /* ONNX Dropout in inference mode (the only one the runtime runs): identity */
    return r_copy(a, ni, dy, want);
}
static int r_ce(ad *a, int ni, const int *dy, const int *want) {
    static const char *const at[] = {"label_smoothing", NULL};
    kl_gnode *n = node(a, ni);
    int ins[4] = {dy[0], in_v(a, ni, 0), in_v(a, ni, 1), n->n_in > 2 ? in_v(a, ni, 2) : -1}, k, rc;
    int g = emit1(a, G, "CrossEntropyLossGrad", ins, ins[3] >= 0 ? 4 : 3, ins[1], &k);
    if (g < 0) return g;
    if ((rc = copy_attrs(a, ni, k, at))) return rc;
    return contrib(a, ins[1], g);
}
/* BCEWithLogitsLoss / MSELoss: d(input) and d(target). */
static int r_zt(ad *a, int ni, const int *dy, const int *want) {
    int ins[3] = {dy[0], in_v(a, ni, 0), in_v(a, ni, 1)}, outs[2], rc;
    int k = emit(a, G, strcmp(node(a, ni)->op_type, "MSELoss") ? "BCEWithLogitsLossGrad" : "MSELossGrad", ins, 3, 2, want, outs, ins[1]);
    if (k < 0) return k;
    if (want[0] && (rc = contrib(a, ins[1], outs[0]))) return rc;
    if (want[1] && (rc = contrib(a, ins[2], outs[1]))) return rc;
    return KL_OK;
}

/* ReduceSum / ReduceMean: dy broadcast back (axes from the attribute, or
 * from a constant axes input at opsets where axes is an input). */
static int r_reduce(ad *a, int ni, const int *dy, const int *want) {
    kl_gnode *n = node(a, ni);
    int mean = !strcmp(n->op_type, "ReduceMean"), k, rc;
    int axes_input = mean ? n->opset >= 18 : n->opset >= 13;
    int64_t axes[KL_MAX_DIMS * 2];
    int na = 0;
    char d[300];
    if (axes_input && n->n_in > 1 && n->inputs[1] >= 0) {
        const kl_tensor *t = a->g->values[n->inputs[1]].init;
        if (!t) return kl_err_set(a->e, KL_EUNSUPPORTED, "%s: gradient needs constant axes", kl_gnode_desc(n, d, sizeof d));
        na = (int)kl_tensor_numel(t);
        if (na > 2 * KL_MAX_DIMS) na = 2 * KL_MAX_DIMS;
        for (int i = 0; i < na; i++) axes[i] = ((const int64_t *)t->data)[i];
        if (t->dtype != KL_I64) return kl_err_set(a->e, KL_EUNSUPPORTED, "%s: axes must be int64", kl_gnode_desc(n, d, sizeof d));
    } else if (!axes_input) {
        const kl_attr *at = kl_gnode_attr(n, "axes");
        if (at) { na = at->n > 2 * KL_MAX_DIMS ? 2 * KL_MAX_DIMS : at->n; memcpy(axes, at->ints, sizeof(int64_t) * (size_t)na); }
    }
    if (!na && kl_gnode_attr_int(n, "noop_with_empty_axes", 0)) return r_copy(a, ni, dy, want);
    int X = in_v(a, ni, 0), ins[2] = {dy[0], X};
    int g = emit1(a, G, "ExpandLike", ins, 2, X, &k);
    if (g < 0) return g;
    if ((na && (rc = set_ints(a, k, "axes", axes, na))) || (mean && (rc = set_int(a, k, "mean", 1)))) return rc;
    return contrib(a, X, g);
}

static int fused(ad *a, int ni) {
    kl_gnode *n = node(a, ni);
    if (!kl_gnode_attr(n, "_act") && n->n_in <= 3) return KL_OK;
    char d[300];
    return kl_err_set(a->e, KL_EUNSUPPORTED, "%s: no gradient rule for a fused node (run autodiff before kl_graph_optimize)", kl_gnode_desc(n, d, sizeof d));
}

static int r_conv(ad *a, int ni, const int *dy, const int *want) {
    static const char *const at[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", NULL};
    int rc = fused(a, ni);
    if (rc) return rc;
    int X = in_v(a, ni, 0), W = in_v(a, ni, 1), B = in_v(a, ni, 2), ins[3] = {dy[0], X, W}, outs[3];
    int w3[3] = {want[1], B >= 0 && want[2], want[0]};
    int k = emit(a, G, "ConvGrad", ins, 3, 3, w3, outs, W >= 0 ? W : X);
    if (k < 0) return k;
    if ((rc = copy_attrs(a, ni, k, at))) return rc;
    if (w3[0] && (rc = contrib(a, W, outs[0]))) return rc;
    if (w3[1] && (rc = contrib(a, B, outs[1]))) return rc;
    if (w3[2] && (rc = contrib(a, X, outs[2]))) return rc;
    return KL_OK;
}

/* MaxPool of a ReLU output that nothing else reads: the pool's gradient
 * rule also takes the ReLU's (MaxPoolGrad _relu=1 writes the gradient of the
 * ReLU's input; the ReLU then gets no gradient of its own). */
static int relu_only_feeds(ad *a, int X, int wrt_x) {
    kl_graph *g = a->g;
    if (wrt_x || X < 0 || X >= a->nv0 || g->values[X].is_output || g->values[X].n_uses != 1) return -1;
    int p = g->values[X].producer;
    if (p < 0) return -1;
    kl_gnode *r = &g->nodes[p];
    if (*r->domain || strcmp(r->op_type, "Relu") || r->n_in != 1 || r->inputs[0] < 0) return -1;
    return r->inputs[0];
}

static int r_pool(ad *a, int ni, const int *dy, const int *want) {
    static const char *const at[] = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides", NULL};
    char op[64];
    snprintf(op, sizeof op, "%sGrad", node(a, ni)->op_type);
    int X = in_v(a, ni, 0), ins[2] = {dy[0], X}, k, rc;
    int H = !strcmp(op, "MaxPoolGrad") ? relu_only_feeds(a, X, a->is_wrt[X]) : -1;
    int g = emit1(a, G, op, ins, 2, H >= 0 ? H : X, &k);
    if (g < 0) return g;
    if (strncmp(op, "Global", 6) && (rc = copy_attrs(a, ni, k, at))) return rc;
    if (H >= 0) {
        if ((rc = set_int(a, k, "_relu", 1))) return rc;
        return a->needs[H] ? contrib(a, H, g) : KL_OK;
    }
    return contrib(a, X, g);
}

static int r_bn(ad *a, int ni, const int *dy, const int *want) {
    static const char *const at[] = {"epsilon", "training_mode", NULL};
    int ins[5] = {dy[0], in_v(a, ni, 0), in_v(a, ni, 1), in_v(a, ni, 3), in_v(a, ni, 4)}, outs[3], rc;
    int k = emit(a, G, "BatchNormalizationGrad", ins, 5, 3, want, outs, ins[1]);
    if (k < 0) return k;
    if ((rc = copy_attrs(a, ni, k, at))) return rc;
    for (int i = 0; i < 3; i++)
        if (want[i] && (rc = contrib(a, in_v(a, ni, i), outs[i]))) return rc;
    return KL_OK;
}

static int r_ln(ad *a, int ni, const int *dy, const int *want) {
    static const char *const at[] = {"axis", "epsilon", NULL};
    int ins[3] = {dy[0], in_v(a, ni, 0), in_v(a, ni, 1)}, outs[3], rc;
    int w3[3] = {want[0], want[1], in_v(a, ni, 2) >= 0 && want[2]};
    int k = emit(a, G, "LayerNormalizationGrad", ins, 3, 3, w3, outs, ins[1]);
    if (k < 0) return k;
    if ((rc = copy_attrs(a, ni, k, at))) return rc;
    for (int i = 0; i < 3; i++)
        if (w3[i] && (rc = contrib(a, in_v(a, ni, i), outs[i]))) return rc;
    return KL_OK;
}

/* ai.keel.train::Dropout: dy * mask / (1 - ratio); the mask output is added
 * to the forward node when the graph omitted it. */
static int r_dropout(ad *a, int ni, const int *dy, const int *want) {
    kl_gnode *n = node(a, ni);
    int mask = n->n_out > 1 ? n->outputs[1] : -1, k, rc;
    if (mask < 0) {
        char nm[300];
        int t = 0;
        do snprintf(nm, sizeof nm, "%.200s_mask%d", a->g->values[n->outputs[0]].name, t++);
        while (kl_graph_find_value(a->g, nm) >= 0);
        if ((mask = kl_graph_value(a->g, nm)) < 0) return oom(a);
        n = node(a, ni);
        int *no = realloc(n->outputs, sizeof(int) * 2);
        if (!no) return oom(a);
        n->outputs = no;
        n->outputs[1] = mask;
        n->n_out = 2;
    }
    float ratio = kl_gnode_attr_float(n, "ratio", 0.5f);
    int X = in_v(a, ni, 0), ins[2] = {dy[0], mask};
    int g = emit1(a, G, "DropoutGrad", ins, 2, X, &k);
    if (g < 0) return g;
    if ((rc = set_float(a, k, "ratio", ratio))) return rc;
    return contrib(a, X, g);
}

/* Cast (f32 <-> f16 ...): the gradient is cast back to the input's type. */
static int r_cast(ad *a, int ni, const int *dy, const int *want) {
    int X = in_v(a, ni, 0), ins[2] = {dy[0], X};
    int g = emit1(a, "", "CastLike", ins, 2, X, NULL);
    if (g < 0) return g;
    return contrib(a, X, g);
}

/* Concat: each input gets its slice of dy (ConcatGrad reads all inputs'
 * shapes for the offsets). */
static int r_concat(ad *a, int ni, const int *dy, const int *want) {
    int nin = node(a, ni)->n_in, rc;
    int64_t axis = kl_gnode_attr_int(node(a, ni), "axis", 0);
    if (nin > 31) {
        char d[300];
        return kl_err_set(a->e, KL_EUNSUPPORTED, "%s: gradient of Concat with more than 31 inputs", kl_gnode_desc(node(a, ni), d, sizeof d));
    }
    int ins[32];
    ins[0] = dy[0];
    for (int k = 0; k < nin; k++) ins[1 + k] = in_v(a, ni, k);
    for (int k = 0; k < nin; k++) {
        if (!want[k]) continue;
        int kk, o, x = ins[1 + k];
        o = emit1(a, G, "ConcatGrad", ins, nin + 1, x, &kk);
        if (o < 0) return o;
        if ((rc = set_int(a, kk, "axis", axis)) || (rc = set_int(a, kk, "index", k)) || (rc = contrib(a, x, o))) return rc;
    }
    return KL_OK;
}

typedef struct {
    const char *domain, *op;
    rule_fn fn;
    unsigned diff;      /* bit k: input k is differentiable */
} rule;

static const rule rules[] = {
    {"", "Gemm", r_gemm, 7},
    {"", "MatMul", r_matmul, 3},
    {"", "Add", r_arith, 3}, {"", "Sub", r_arith, 3}, {"", "Mul", r_arith, 3}, {"", "Div", r_arith, 3},
    {"", "Relu", r_relu, 1}, {"", "Sigmoid", r_sigmoid, 1}, {"", "Tanh", r_tanh, 1}, {"", "Erf", r_erf, 1},
    {"", "Exp", r_exp, 1}, {"", "Neg", r_neg, 1}, {"", "Identity", r_copy, 1},
    {"", "Gelu", r_gelu, 1}, {"com.microsoft", "Gelu", r_gelu, 1},
    {"", "Softmax", r_softmax, 1}, {"", "LogSoftmax", r_softmax, 1},
    {"", "Flatten", r_reshape, 1}, {"", "Reshape", r_reshape, 1}, {"", "Squeeze", r_reshape, 1},
    {"", "Unsqueeze", r_reshape, 1}, {"", "Transpose", r_transpose, 1},
    {"", "Gather", r_gather, 1},
    {"", "Concat", r_concat, 0x7fffffffu},
    {"", "Conv", r_conv, 7}, {"", "MaxPool", r_pool, 1}, {"", "AveragePool", r_pool, 1},
    {"", "GlobalAveragePool", r_pool, 1}, {"", "BatchNormalization", r_bn, 7}, {"", "LayerNormalization", r_ln, 7},
    {"", "ReduceSum", r_reduce, 1}, {"", "ReduceMean", r_reduce, 1},
    {"", "Dropout", r_dropout_inf, 1},
    {"", "Cast", r_cast, 1},
    {KL__TRAIN_DOMAIN, "Dropout", r_dropout, 1},
    {KL__TRAIN_DOMAIN, "CrossEntropyLoss", r_ce, 1},
    {KL__TRAIN_DOMAIN, "BCEWithLogitsLoss", r_zt, 3},
    {KL__TRAIN_DOMAIN, "MSELoss", r_zt, 3},
};

static const rule *find_rule(const char *domain, const char *op) {
    for (size_t i = 0; i < KL_ARRAY_LEN(rules); i++)
        if (!strcmp(rules[i].op, op) && !strcmp(rules[i].domain, domain ? domain : "")) return &rules[i];
    return NULL;
}

int kl_graph_has_grad(const char *domain, const char *op_type) { return find_rule(domain, op_type) != NULL; }

/* ================================================================== *
 * kl_graph_autodiff
 * ================================================================== */

int kl_graph_autodiff(kl_graph *g, int loss, const int *wrt, int n_wrt, int *grads, kl_err *e) {
    return kl_graph_autodiff_seed(g, loss, -1, wrt, n_wrt, grads, e);
}

int kl_graph_autodiff_seed(kl_graph *g, int loss, int seed_v, const int *wrt, int n_wrt, int *grads, kl_err *e) {
    int rc = KL_OK;
    ad a;
    memset(&a, 0, sizeof a);
    a.g = g;
    a.e = e;
    char *onpath = NULL;
    for (int i = 0; i < n_wrt; i++) grads[i] = -1;
    if ((rc = kl_graph_finalize(g, e))) return rc;
    if (loss < 0 || loss >= g->n_values) return kl_err_set(e, KL_EINVAL, "autodiff: loss value %d does not exist", loss);
    for (int i = 0; i < n_wrt; i++) {
        if (wrt[i] < 0 || wrt[i] >= g->n_values) return kl_err_set(e, KL_EINVAL, "autodiff: wrt value %d does not exist", wrt[i]);
        for (int j = 0; j < i; j++)
            if (wrt[j] == wrt[i]) return kl_err_set(e, KL_EINVAL, "autodiff: '%s' is listed twice", g->values[wrt[i]].name);
        if (g->values[wrt[i]].init && !g->values[wrt[i]].is_input)
            kl_log(KL_LOG_DEBUG, "graph", "autodiff: '%s' is an initializer (it may be constant-folded); pass parameters as graph inputs",
                   g->values[wrt[i]].name);
    }
    int nv = a.nv0 = g->n_values, nf = g->n_nodes;
    a.contrib = calloc((size_t)nv + 1, sizeof(int *));
    a.n_contrib = calloc((size_t)nv + 1, sizeof(int));
    a.cap_contrib = calloc((size_t)nv + 1, sizeof(int));
    a.final = malloc(sizeof(int) * ((size_t)nv + 1));
    a.needs = calloc((size_t)nv + 1, 1);
    a.is_wrt = calloc((size_t)nv + 1, 1);
    onpath = calloc((size_t)nv + 1, 1);
    if (!a.contrib || !a.n_contrib || !a.cap_contrib || !a.final || !a.needs || !a.is_wrt || !onpath) { rc = oom(&a); goto done; }
    for (int i = 0; i < nv; i++) a.final[i] = -2;
    /* values that depend on a wrt value (through differentiable inputs) */
    for (int i = 0; i < n_wrt; i++) a.needs[wrt[i]] = a.is_wrt[wrt[i]] = 1;
    for (int ni = 0; ni < nf; ni++) {
        kl_gnode *n = &g->nodes[ni];
        const rule *r = find_rule(n->domain, n->op_type);
        int dep = 0;
        for (int k = 0; k < n->n_in; k++)
            if (n->inputs[k] >= 0 && a.needs[n->inputs[k]] && (!r || (k < 32 && (r->diff >> k) & 1))) dep = 1;
        if (dep)
            for (int k = 0; k < n->n_out; k++)
                if (n->outputs[k] >= 0) a.needs[n->outputs[k]] = 1;
    }
    /* values the loss depends on */
    onpath[loss] = 1;
    for (int ni = nf - 1; ni >= 0; ni--) {
        kl_gnode *n = &g->nodes[ni];
        int on = 0;
        for (int k = 0; k < n->n_out; k++)
            if (n->outputs[k] >= 0 && onpath[n->outputs[k]]) on = 1;
        if (on)
            for (int k = 0; k < n->n_in; k++)
                if (n->inputs[k] >= 0) onpath[n->inputs[k]] = 1;
    }
    if (seed_v >= g->n_values) { rc = kl_err_set(e, KL_EINVAL, "autodiff: seed value %d does not exist", seed_v); goto done; }
    if (a.needs[loss]) {
        int seed = seed_v >= 0 ? emit1(&a, "", "Identity", &seed_v, 1, loss, NULL) : emit1(&a, G, "OnesLike", &loss, 1, loss, NULL);
        if (seed < 0) { rc = seed; goto done; }
        if ((rc = contrib(&a, loss, seed))) goto done;
    }
    for (int ni = nf - 1; ni >= 0; ni--) {
        kl_gnode *n = &g->nodes[ni];
        int dy[16], want[32], any_dy = 0, any_want = 0;
        int has_contrib = 0;
        for (int k = 0; k < n->n_out; k++)
            if (n->outputs[k] >= 0 && a.n_contrib[n->outputs[k]]) has_contrib = 1;
        if (!has_contrib) continue;
        const rule *r = find_rule(n->domain, n->op_type);
        if (n->n_out > 16 || n->n_in > 32) {
            char d[300];
            rc = kl_err_set(e, KL_EUNSUPPORTED, "%s: autodiff handles up to 32 inputs and 16 outputs per node", kl_gnode_desc(n, d, sizeof d));
            goto done;
        }
        for (int k = 0; k < n->n_in; k++) {
            int v = n->inputs[k];
            want[k] = v >= 0 && a.needs[v] && onpath[v] && (!r || (k < 32 && (r->diff >> k) & 1));
            any_want |= want[k];
        }
        for (int k = n->n_in; k < 32; k++) want[k] = 0;
        if (!any_want) continue;
        if (!r) {
            char d[300];
            rc = kl_err_set(e, KL_EUNSUPPORTED, "%s: no gradient rule for operator %s%s%s", kl_gnode_desc(n, d, sizeof d),
                            *n->domain ? n->domain : "", *n->domain ? "::" : "", n->op_type);
            goto done;
        }
        int nout = n->n_out;
        for (int k = 0; k < nout; k++) {
            dy[k] = grad_of(&a, out_v(&a, ni, k));
            if (dy[k] < -1) { rc = dy[k]; goto done; }
            if (dy[k] >= 0) any_dy = 1;
        }
        if (!any_dy) continue;
        if (dy[0] < 0) {
            char d[300];
            rc = kl_err_set(e, KL_EUNSUPPORTED, "%s: gradient through output 1+ only is not supported", kl_gnode_desc(&g->nodes[ni], d, sizeof d));
            goto done;
        }
        if ((rc = r->fn(&a, ni, dy, want))) goto done;
    }
    /* name the gradients and make them graph outputs */
    for (int i = 0; i < n_wrt; i++) {
        int w = wrt[i], gv = grad_of(&a, w);
        if (gv < -1) { rc = gv; goto done; }
        if (gv < 0 && (gv = emit1(&a, G, "ZerosLike", &w, 1, w, NULL)) < 0) { rc = gv; goto done; }
        char nm[512];
        snprintf(nm, sizeof nm, "%s_grad", g->values[w].name);
        int ex = kl_graph_find_value(g, nm);
        if (ex >= 0 && ex != gv) { rc = kl_err_set(e, KL_EEXIST, "autodiff: a value named '%s' already exists", nm); goto done; }
        if (kl_graph_value_rename(g, gv, nm)) { rc = oom(&a); goto done; }
        int *no = realloc(g->outputs, sizeof(int) * ((size_t)g->n_outputs + 1));
        if (!no) { rc = oom(&a); goto done; }
        g->outputs = no;
        g->outputs[g->n_outputs++] = gv;
        g->values[gv].is_output = 1;
        grads[i] = gv;
    }
done:
    if (a.contrib)
        for (int i = 0; i < nv; i++) free(a.contrib[i]);
    free(a.contrib);
    free(a.n_contrib);
    free(a.cap_contrib);
    free(a.final);
    free(a.needs);
    free(a.is_wrt);
    free(onpath);
    if (rc)
        for (int i = 0; i < n_wrt; i++) grads[i] = -1;
    return rc;
}
