/* Control-flow operators with subgraphs: If (1-17), Loop (1-17), Scan (8,
 * 9-17; the semantics of opset 16, unchanged until 19). Their subgraphs are
 * keel graphs bound to the node (kl_gnode_bind_subgraphs: outer-scope values arrive as the node's implicit
 * inputs) and run by the same executor (kl__sub_run: planned once per set of
 * iteration shapes, one arena reused across iterations). Their output
 * shapes may depend on the data (the branch taken, the trip count): Loop,
 * and If and Scan unless their subgraphs' plans fix the shapes (both
 * branches alike; Scan's states keeping theirs), run as dynamic steps that
 * allocate their outputs (KL_OP_ALLOCS); static ones write into their
 * planned places; Loop's scan
 * outputs are gathered per iteration and stacked at the end, Scan's are
 * written into their place as each iteration ends. Sequence and optional
 * values (kl_seq_new) travel through them as bytes. */
#include "graph/graph_int.h"

#include <stdlib.h>
#include <string.h>

/* A Loop without a trip count stops by its condition alone: past this many
 * iterations it is refused (a model that never stops would hang the run). */
#define LOOP_MAX_ITERS ((int64_t)1 << 31)

static kl_graph *sub_of(const kl_gnode *n, const char *name) {
    const kl_attr *a = kl_gnode_attr(n, name);
    return a && a->type == KL_ATTR_GRAPH ? a->g : NULL;
}

static int n_explicit(const kl_gnode *n) { return n->n_in - n->n_implicit; }

/* A new contiguous copy of t. */
static int dup_tensor(const kl_tensor *t, kl_tensor **out, kl_err *e) {
    int rc = kl_tensor_new_uninit(t->dtype, t->rank, t->dims, KL_TAG_ACTIVATIONS, out, e);
    if (!rc && (*out)->nbytes) memcpy((*out)->data, t->data, (*out)->nbytes);
    return rc;
}

/* A graph output of 0 iterations: the declared dtype (f32 when unknown)
 * with the stacking axis 0 (its declared dims after it where known). */
static int empty_stack(const kl_graph *sub, int o, kl_tensor **out, kl_err *e) {
    const kl_value *v = &sub->values[sub->outputs[o]];
    int64_t dims[KL_MAX_DIMS] = {0};
    int rank = 1;
    for (int d = 0; v->rank >= 0 && d < v->rank && rank < KL_MAX_DIMS; d++)
        dims[rank++] = v->dims[d] < 0 ? 0 : v->dims[d];
    return kl_tensor_new(v->dtype == KL_DTYPE_COUNT ? KL_F32 : v->dtype, rank, dims, KL_TAG_ACTIVATIONS, out, e);
}

static int need_data(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    return KL__NEED_DATA;
}


/* Hands the subgraph's outputs to the node's (omitted ones freed). */
static void give_outputs(const kl_gnode *n, kl_tensor **res, kl_tensor *const *out, int n_out) {
    for (int k = 0; k < n_out; k++) {
        if (n->outputs[k] < 0 || !out[k] || !res[k]) { /* omitted */
        } else if (out[k]->owns) {                     /* a dynamic step's empty tensor */
            kl__tensor_move(out[k], res[k]);
            res[k] = NULL;
            continue;
        } else if (out[k]->nbytes == res[k]->nbytes && out[k]->dtype == res[k]->dtype && res[k]->nbytes) {
            memcpy(out[k]->data, res[k]->data,
                   res[k]->nbytes); /* a static step's planned place (shapes checked by static_check) */
        }
        kl_tensor_free(res[k]);
        res[k] = NULL;
    }
}

/* A static step's outputs (planned by infer) must get results of exactly
 * the planned shapes. */
static int static_check(const kl_gnode *n, kl_tensor **res, kl_tensor *const *out, int n_out, kl_err *e) {
    for (int k = 0; k < n_out; k++) {
        if (n->outputs[k] < 0 || !out[k] || out[k]->owns || !res[k]) continue;
        if (out[k]->dtype != res[k]->dtype || out[k]->rank != res[k]->rank ||
            memcmp(out[k]->dims, res[k]->dims, sizeof(int64_t) * (size_t)out[k]->rank)) {
            char a[96], b[96];
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: output %d is %s, planned %s", n->opset, k,
                                 kl_shape_str(res[k]->rank, res[k]->dims, a, sizeof a),
                                 kl_shape_str(out[k]->rank, out[k]->dims, b, sizeof b));
        }
    }
    return KL_OK;
}

/* The output shapes of subgraph g for inputs of these shapes when its plan
 * fixes them all (meta[i]: output i); 0 when some depend on data. */
static int sub_shapes(kl_graph *g, kl_tensor *const *in, kl_tensor *meta) {
    kl_plan *p = NULL;
    kl_err e2 = {0};
    int ok = kl_plan_new(g, (const kl_tensor *const *)in, (size_t)g->n_inputs, &p, &e2) == KL_OK;
    for (int k = 0; ok && k < g->n_outputs; k++) {
        const kl_tensor *m = kl_plan_value(p, g->outputs[k]);
        if (!m) ok = 0;
        else kl__set_shape(&meta[k], m->dtype, m->rank, m->dims);
    }
    kl_plan_free(p);
    return ok;
}

/* ================================================================== *
 * If(cond) then_branch / else_branch
 * ================================================================== */

static int if_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    const char *names[2] = {"then_branch", "else_branch"};
    for (int i = 0; i < 2; i++) {
        kl_graph *b = sub_of(n, names[i]);
        if (!b) return kl__fail_node(e, n, KL_EPARSE, "opset %d: no %s graph", n->opset, names[i]);
        if (b->n_inputs != b->n_outer)
            return kl__fail_node(e, n, KL_EPARSE, "opset %d: %s takes inputs", n->opset, names[i]);
        if (b->n_outputs != n->n_out)
            return kl__fail_node(e, n, KL_EPARSE, "opset %d: %s has %d outputs, the node %d", n->opset, names[i],
                                 b->n_outputs, n->n_out);
    }
    return KL_OK;
}

/* Static when both branches' plans give the same dtypes and shapes. */
static int if_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_graph *t = sub_of(n, "then_branch"), *f = sub_of(n, "else_branch");
    kl_tensor *mt = calloc((size_t)n_out + 1, sizeof(kl_tensor)), *mf = calloc((size_t)n_out + 1, sizeof(kl_tensor));
    int ok = mt && mf && sub_shapes(t, in + n_explicit(n), mt) && sub_shapes(f, in + n_explicit(n), mf);
    for (int k = 0; ok && k < n_out; k++) {
        ok = mt[k].dtype == mf[k].dtype && mt[k].rank == mf[k].rank &&
            !memcmp(mt[k].dims, mf[k].dims, sizeof(int64_t) * (size_t)mt[k].rank);
        out[k] = mt[k];
    }
    free(mt);
    free(mf);
    return ok ? KL_OK : KL__NEED_DATA;
}

static int if_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    if (kl_tensor_numel(in[0]) != 1)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: cond has %lld elements, not 1", n->opset,
                             (long long)kl_tensor_numel(in[0]));
    const char *which = kl__int_at(in[0], 0) ? "then_branch" : "else_branch";
    kl__sub r;
    kl__sub_init(&r, sub_of(n, which), x->pool);
    kl_tensor *res[512];
    if (n_out > 512) return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: %d outputs", n->opset, n_out);
    int rc = kl__sub_run(&r, in + n_explicit(n), res, e);
    kl__sub_free(&r);
    if (rc) {
        char d[300];
        kl_err_prefix(e, "%s %s", kl_gnode_desc(n, d, sizeof d), which);
        return rc;
    }
    if ((rc = static_check(n, res, out, n_out, e))) {
        for (int k = 0; k < n_out; k++) kl_tensor_free(res[k]);
        return rc;
    }
    give_outputs(n, res, out, n_out);
    return KL_OK;
}

/* ================================================================== *
 * Loop(M?, cond?, v_initial...) body(iter, cond, v...) -> (cond, v..., scan...)
 * ================================================================== */

static int loop_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    kl_graph *b = sub_of(n, "body");
    int N = n_explicit(n) - 2;
    if (!b) return kl__fail_node(e, n, KL_EPARSE, "opset %d: no body graph", n->opset);
    if (N < 0)
        return kl__fail_node(e, n, KL_EPARSE, "opset %d: %d inputs, Loop takes M, cond and the carried values",
                             n->opset, n_explicit(n));
    if (b->n_inputs - b->n_outer != N + 2)
        return kl__fail_node(e, n, KL_EPARSE,
                             "opset %d: body takes %d inputs, the loop carries %d (+ iteration, condition)", n->opset,
                             b->n_inputs - b->n_outer, N);
    if (b->n_outputs < N + 1 || n->n_out > b->n_outputs - 1)
        return kl__fail_node(e, n, KL_EPARSE,
                             "opset %d: body gives %d outputs for %d carried values and %d node outputs", n->opset,
                             b->n_outputs, N, n->n_out);
    return KL_OK;
}

/* Scan outputs of a Loop: one tensor per iteration, stacked at the end. */
typedef struct {
    kl_tensor **t;
    int64_t n, cap;
} stack_list;

static int stack_push(stack_list *s, kl_tensor *t, kl_err *e) {
    if (s->n == s->cap) {
        int64_t nc = s->cap ? s->cap * 2 : 16;
        kl_tensor **nt = realloc(s->t, sizeof(kl_tensor *) * (size_t)nc);
        if (!nt) {
            kl_tensor_free(t);
            return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        s->t = nt;
        s->cap = nc;
    }
    s->t[s->n++] = t;
    return KL_OK;
}

static int stack_join(const kl_gnode *n, const stack_list *s, kl_tensor **out, kl_err *e) {
    const kl_tensor *f = s->t[0];
    if (f->rank >= KL_MAX_DIMS)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: scan output of rank %d", n->opset, f->rank);
    int64_t dims[KL_MAX_DIMS];
    dims[0] = s->n;
    memcpy(dims + 1, f->dims, sizeof(int64_t) * (size_t)f->rank);
    for (int64_t i = 1; i < s->n; i++)
        if (s->t[i]->dtype != f->dtype || s->t[i]->rank != f->rank ||
            memcmp(s->t[i]->dims, f->dims, sizeof(int64_t) * (size_t)f->rank)) {
            char a[96], b[96];
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: scan output is %s at iteration 0, %s at iteration %lld",
                                 n->opset, kl_shape_str(f->rank, f->dims, a, sizeof a),
                                 kl_shape_str(s->t[i]->rank, s->t[i]->dims, b, sizeof b), (long long)i);
        }
    int rc = kl_tensor_new_uninit(f->dtype, f->rank + 1, dims, KL_TAG_ACTIVATIONS, out, e);
    for (int64_t i = 0; !rc && i < s->n && f->nbytes; i++)
        memcpy((char *)(*out)->data + (size_t)i * f->nbytes, s->t[i]->data, f->nbytes);
    return rc;
}

typedef struct {
    kl__sub r;
    kl_tensor **bin, **bout, **carry;
    char *owned;
    stack_list *scans;
    kl_tensor *iter, *cond;
    int N, K;
} loop_state;

static void loop_state_free(loop_state *s) {
    kl__sub_free(&s->r);
    for (int j = 0; s->carry && j < s->N; j++)
        if (s->owned[j]) kl_tensor_free(s->carry[j]);
    for (int k = 0; s->scans && k < s->K; k++) {
        for (int64_t i = 0; i < s->scans[k].n; i++) kl_tensor_free(s->scans[k].t[i]);
        free(s->scans[k].t);
    }
    kl_tensor_free(s->iter);
    kl_tensor_free(s->cond);
    free(s->bin);
    free(s->bout);
    free(s->carry);
    free(s->owned);
    free(s->scans);
}

/* One iteration: runs the body, takes the condition, the carried values
 * and the scan outputs. */
static int loop_step(kl_gnode *n, loop_state *s, int *cond, kl_err *e) {
    int rc = kl__sub_run(&s->r, s->bin, s->bout, e);
    if (rc) return rc;
    const kl_tensor *c = s->bout[0];
    if (kl_tensor_numel(c) != 1)
        rc = kl__fail_node(e, n, KL_ESHAPE, "opset %d: body condition has %lld elements", n->opset,
                           (long long)kl_tensor_numel(c));
    else *cond = kl__int_at(c, 0) != 0;
    kl_tensor_free(s->bout[0]);
    for (int j = 0; j < s->N; j++) {
        if (s->owned[j]) kl_tensor_free(s->carry[j]);
        s->carry[j] = s->bout[1 + j];
        s->owned[j] = 1;
        s->bin[2 + j] = s->carry[j];
    }
    for (int k = 0; k < s->K; k++) {
        kl_tensor *t = s->bout[1 + s->N + k];
        if (!rc) rc = stack_push(&s->scans[k], t, e);
        else kl_tensor_free(t);
    }
    return rc;
}

static int loop_outputs(kl_gnode *n, loop_state *s, kl_tensor *const *dst, int n_out, kl_err *e) {
    int rc = KL_OK;
    kl_tensor *out[512] = {0};
    if (n_out > 512) return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: %d outputs", n->opset, n_out);
    for (int k = 0; k < n_out && !rc; k++) {
        if (n->outputs[k] < 0) continue;
        if (k < s->N) {
            if (s->owned[k]) {
                out[k] = s->carry[k];
                s->owned[k] = 0;
            } else rc = dup_tensor(s->carry[k], &out[k], e);
        } else {
            const stack_list *l = &s->scans[k - s->N];
            rc = l->n ? stack_join(n, l, &out[k], e) : empty_stack(s->r.g, 1 + k, &out[k], e);
        }
    }
    if (!rc) give_outputs(n, out, dst, n_out);
    for (int k = 0; k < n_out; k++) kl_tensor_free(out[k]);
    return rc;
}

static int loop_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                    kl_err *e) {
    kl_graph *b = sub_of(n, "body");
    loop_state s;
    memset(&s, 0, sizeof s);
    s.N = n_explicit(n) - 2;
    s.K = b->n_outputs - 1 - s.N;
    const kl_tensor *M = in[0], *C = in[1];
    if ((M && kl_tensor_numel(M) != 1) || (C && kl_tensor_numel(C) != 1))
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: the trip count and the condition must have one element",
                             n->opset);
    int64_t trip = M ? kl__int_at(M, 0) : -1;
    int cond = C ? kl__int_at(C, 0) != 0 : 1, rc;
    kl__sub_init(&s.r, b, x->pool);
    s.bin = calloc((size_t)b->n_inputs + 1, sizeof(kl_tensor *));
    s.bout = calloc((size_t)b->n_outputs + 1, sizeof(kl_tensor *));
    s.carry = calloc((size_t)s.N + 1, sizeof(kl_tensor *));
    s.owned = calloc((size_t)s.N + 1, 1);
    s.scans = calloc((size_t)s.K + 1, sizeof(stack_list));
    if (!s.bin || !s.bout || !s.carry || !s.owned || !s.scans) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = kl_tensor_new(KL_I64, 0, NULL, KL_TAG_ACTIVATIONS, &s.iter, e)) ||
        (rc = kl_tensor_new(KL_BOOL, 0, NULL, KL_TAG_ACTIVATIONS, &s.cond, e)))
        goto done;
    s.bin[0] = s.iter;
    s.bin[1] = s.cond;
    for (int j = 0; j < s.N; j++) {
        if (!in[2 + j]) {
            rc = kl__fail_node(e, n, KL_EPARSE, "opset %d: carried value %d has no initial value", n->opset, j);
            goto done;
        }
        s.carry[j] = in[2 + j];
        s.bin[2 + j] = s.carry[j];
    }
    for (int j = 0; j < n->n_implicit; j++) s.bin[2 + s.N + j] = in[n_explicit(n) + j];
    for (int64_t i = 0; (trip < 0 || i < trip) && cond; i++) {
        if (trip < 0 && i >= LOOP_MAX_ITERS) {
            rc = kl__fail_node(e, n, KL_ERANGE, "opset %d: no trip count and still running after %lld iterations",
                               n->opset, (long long)i);
            goto done;
        }
        *(int64_t *)s.iter->data = i;
        *(uint8_t *)s.cond->data = (uint8_t)cond;
        if ((rc = loop_step(n, &s, &cond, e))) {
            char d[300];
            kl_err_prefix(e, "%s body, iteration %lld", kl_gnode_desc(n, d, sizeof d), (long long)i);
            goto done;
        }
    }
    rc = loop_outputs(n, &s, out, n_out, e);
done:
    loop_state_free(&s);
    return rc;
}

/* ================================================================== *
 * Scan(initial states..., scan inputs...) body(states..., slices...) ->
 * (states..., scan outputs...) (opset 9+: axes and directions per input
 * and output)
 * ================================================================== */

typedef struct {
    int N, M, K;
    int64_t T;
    int64_t in_axis[64], out_axis[64];
    int in_rev[64], out_rev[64];
} scan_shape;

static int scan_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    kl_graph *b = sub_of(n, "body");
    int64_t M = kl_gnode_attr_int(n, "num_scan_inputs", -1);
    if (!b) return kl__fail_node(e, n, KL_EPARSE, "opset %d: no body graph", n->opset);
    if (M < 1 || M > n_explicit(n) || M > 64)
        return kl__fail_node(e, n, KL_EPARSE, "opset %d: num_scan_inputs %lld for %d inputs", n->opset, (long long)M,
                             n_explicit(n));
    int lens = n->opset < 9; /* Scan 8: sequence_lens first */
    int N = n_explicit(n) - lens - (int)M;
    if (N < 0 || b->n_inputs - b->n_outer != n_explicit(n) - lens)
        return kl__fail_node(e, n, KL_EPARSE, "opset %d: body takes %d inputs, the node gives %d", n->opset,
                             b->n_inputs - b->n_outer, n_explicit(n) - lens);
    if (b->n_outputs != n->n_out || b->n_outputs < N || b->n_outputs - N > 64)
        return kl__fail_node(e, n, KL_EPARSE, "opset %d: body gives %d outputs, the node has %d (%d states)", n->opset,
                             b->n_outputs, n->n_out, N);
    const char *lists[4] = {"scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"};
    if (lens) lists[1] = "directions";
    for (int i = lens; i < 4 - 2 * lens; i++) {
        const kl_attr *a = kl_gnode_attr(n, lists[i]);
        int want = i < 2 ? (int)M : b->n_outputs - N;
        if (a && a->n != want)
            return kl__fail_node(e, n, KL_EPARSE, "opset %d: %s has %d entries, not %d", n->opset, lists[i], a->n,
                                 want);
        for (int k = 0; a && i % 2 && k < a->n; k++)
            if (a->ints[k] != 0 && a->ints[k] != 1)
                return kl__fail_node(e, n, KL_EPARSE, "opset %d: %s must be 0 or 1", n->opset, lists[i]);
    }
    return KL_OK;
}

static int64_t attr_at(const kl_gnode *n, const char *name, int k) {
    const kl_attr *a = kl_gnode_attr(n, name);
    return a && k < a->n ? a->ints[k] : 0;
}

/* The scan's length and each input's axis and direction. */
static int scan_plan(kl_gnode *n, kl_tensor *const *in, scan_shape *sh, kl_err *e) {
    kl_graph *b = sub_of(n, "body");
    sh->M = (int)kl_gnode_attr_int(n, "num_scan_inputs", 1);
    sh->N = n_explicit(n) - sh->M;
    sh->K = b->n_outputs - sh->N;
    sh->T = -1;
    for (int j = 0; j < sh->M; j++) {
        const kl_tensor *x = in[sh->N + j];
        if (!x || (x->rank < 1))
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: scan input %d needs rank >= 1", n->opset, j);
        if (kl__norm_axis(attr_at(n, "scan_input_axes", j), x->rank, &sh->in_axis[j]))
            return kl__fail_node(e, n, KL_EINVAL, "opset %d: scan input %d: axis %lld out of range", n->opset, j,
                                 (long long)attr_at(n, "scan_input_axes", j));
        sh->in_rev[j] = (int)attr_at(n, "scan_input_directions", j);
        int64_t t = x->dims[sh->in_axis[j]];
        if (sh->T >= 0 && t != sh->T)
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: scan inputs have lengths %lld and %lld", n->opset,
                                 (long long)sh->T, (long long)t);
        sh->T = t;
    }
    for (int k = 0; k < sh->K; k++) sh->out_rev[k] = (int)attr_at(n, "scan_output_directions", k);
    return KL_OK;
}

/* dst = src[..., t, ...] along axis (dst preallocated with that axis removed) */
static void take_slice(const kl_tensor *src, int axis, int64_t t, kl_tensor *dst) {
    int64_t outer = 1, inner = 1, T = src->dims[axis];
    for (int d = 0; d < axis; d++) outer *= src->dims[d];
    for (int d = axis + 1; d < src->rank; d++) inner *= src->dims[d];
    size_t rb = (size_t)inner * kl_dtype_size(src->dtype);
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)dst->data + (size_t)o * rb, (const char *)src->data + ((size_t)(o * T + t)) * rb, rb);
}

/* dst[..., t, ...] = src along axis of dst */
static void put_slice(kl_tensor *dst, int axis, int64_t t, const kl_tensor *src) {
    int64_t outer = 1, inner = 1, T = dst->dims[axis];
    for (int d = 0; d < axis; d++) outer *= dst->dims[d];
    for (int d = axis + 1; d < dst->rank; d++) inner *= dst->dims[d];
    size_t rb = (size_t)inner * kl_dtype_size(dst->dtype);
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)dst->data + ((size_t)(o * T + t)) * rb, (const char *)src->data + (size_t)o * rb, rb);
}

/* The scan output k's tensor, made when its first slice is known. */
static int scan_out_new(kl_gnode *n, scan_shape *sh, int k, const kl_tensor *s, kl_tensor **out, kl_err *e) {
    int64_t ax;
    if (s->rank >= KL_MAX_DIMS)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: scan output of rank %d", n->opset, s->rank);
    if (kl__norm_axis(attr_at(n, "scan_output_axes", k), s->rank + 1, &ax))
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: scan output %d: axis %lld out of range", n->opset, k,
                             (long long)attr_at(n, "scan_output_axes", k));
    sh->out_axis[k] = ax;
    int64_t dims[KL_MAX_DIMS];
    for (int d = 0, r = 0; d <= s->rank; d++) dims[d] = d == ax ? sh->T : s->dims[r++];
    return kl_tensor_new_uninit(s->dtype, s->rank + 1, dims, KL_TAG_ACTIVATIONS, out, e);
}

static int scan_iter(kl_gnode *n, scan_shape *sh, loop_state *s, kl_tensor *const *in, kl_tensor **slices,
                     kl_tensor **res, int64_t t, kl_err *e) {
    for (int j = 0; j < sh->M; j++)
        take_slice(in[sh->N + j], (int)sh->in_axis[j], sh->in_rev[j] ? sh->T - 1 - t : t, slices[j]);
    int rc = kl__sub_run(&s->r, s->bin, s->bout, e);
    if (rc) return rc;
    for (int j = 0; j < sh->N; j++) {
        if (s->owned[j]) kl_tensor_free(s->carry[j]);
        s->carry[j] = s->bout[j];
        s->owned[j] = 1;
        s->bin[j] = s->carry[j];
    }
    for (int k = 0; k < sh->K && !rc; k++) {
        const kl_tensor *o = s->bout[sh->N + k];
        if (!res[sh->N + k]) rc = scan_out_new(n, sh, k, o, &res[sh->N + k], e);
        kl_tensor *r = res[sh->N + k];
        if (!rc &&
            (r->dtype != o->dtype || r->rank != o->rank + 1 || kl_tensor_numel(r) != kl_tensor_numel(o) * sh->T)) {
            char a[96];
            rc = kl__fail_node(e, n, KL_ESHAPE, "opset %d: scan output %d changes shape (%s) at iteration %lld",
                               n->opset, k, kl_shape_str(o->rank, o->dims, a, sizeof a), (long long)t);
        }
        if (!rc) put_slice(r, (int)sh->out_axis[k], sh->out_rev[k] ? sh->T - 1 - t : t, o);
    }
    for (int k = 0; k < sh->K; k++) {
        kl_tensor_free(s->bout[sh->N + k]);
        s->bout[sh->N + k] = NULL;
    }
    return rc;
}

/* The scan over in (N states, M scan inputs, then the outer values) into
 * res (N final states, K scan outputs; new tensors). */
static int scan_exec(kl_gnode *n, scan_shape *sh, kl_tensor *const *in, kl_tensor **res, kl_pool *pool, kl_err *e) {
    kl_graph *b = sub_of(n, "body");
    loop_state s;
    memset(&s, 0, sizeof s);
    kl_tensor **slices = NULL;
    int rc = KL_OK, nx = sh->N + sh->M, n_res = sh->N + sh->K;
    s.N = sh->N;
    kl__sub_init(&s.r, b, pool);
    s.bin = calloc((size_t)b->n_inputs + 1, sizeof(kl_tensor *));
    s.bout = calloc((size_t)b->n_outputs + 1, sizeof(kl_tensor *));
    s.carry = calloc((size_t)sh->N + 1, sizeof(kl_tensor *));
    s.owned = calloc((size_t)sh->N + 1, 1);
    slices = calloc((size_t)sh->M + 1, sizeof(kl_tensor *));
    if (!s.bin || !s.bout || !s.carry || !s.owned || !slices) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    for (int j = 0; j < sh->N; j++) s.bin[j] = s.carry[j] = in[j];
    for (int j = 0; j < sh->M && !rc; j++) {
        const kl_tensor *x = in[sh->N + j];
        int64_t dims[KL_MAX_DIMS];
        for (int d = 0, r = 0; d < x->rank; d++)
            if (d != sh->in_axis[j]) dims[r++] = x->dims[d];
        rc = kl_tensor_new_uninit(x->dtype, x->rank - 1, dims, KL_TAG_ACTIVATIONS, &slices[j], e);
        s.bin[sh->N + j] = slices[j];
    }
    for (int j = 0; j < n->n_implicit; j++) s.bin[nx + j] = in[nx + j];
    for (int64_t t = 0; !rc && t < sh->T; t++)
        if ((rc = scan_iter(n, sh, &s, in, slices, res, t, e))) {
            char d[300];
            kl_err_prefix(e, "%s body, iteration %lld", kl_gnode_desc(n, d, sizeof d), (long long)t);
        }
    for (int k = 0; !rc && k < n_res; k++) {
        if (k < sh->N) {
            if (s.owned[k]) {
                res[k] = s.carry[k];
                s.owned[k] = 0;
            } else rc = dup_tensor(s.carry[k], &res[k], e);
        } else if (!res[k]) {
            rc = empty_stack(b, k, &res[k], e);
        }
    }
done:
    if (rc)
        for (int k = 0; k < n_res; k++) {
            kl_tensor_free(res[k]);
            res[k] = NULL;
        }
    for (int j = 0; slices && j < sh->M; j++) kl_tensor_free(slices[j]);
    free(slices);
    loop_state_free(&s);
    return rc;
}

/* Scan 8: sequence_lens?, states and scan inputs with a batch dimension
 * first (scanned along dimension 1): the scan per batch row. */
static int scan8_run(kl_gnode *n, kl_tensor *const *in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    kl_graph *b = sub_of(n, "body");
    scan_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.M = (int)kl_gnode_attr_int(n, "num_scan_inputs", 1);
    sh.N = n_explicit(n) - 1 - sh.M;
    sh.K = b->n_outputs - sh.N;
    int nx = sh.N + sh.M, rc = KL_OK;
    int64_t B = -1;
    for (int k = 1; k <= nx; k++) {
        const kl_tensor *t = in[k];
        int need = k > sh.N ? 2 : 1;
        if (!t || t->rank < need || (B >= 0 && t->dims[0] != B))
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: input %d needs the batch dimension first%s", n->opset, k,
                                 k > sh.N ? " and the sequence second" : "");
        B = t->dims[0];
    }
    sh.T = in[1 + sh.N]->dims[1];
    for (int j = 0; j < sh.M; j++) {
        if (in[1 + sh.N + j]->dims[1] != sh.T)
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: scan inputs of different lengths", n->opset);
        sh.in_rev[j] = (int)attr_at(n, "directions", j);
    }
    for (int64_t r = 0; in[0] && r < kl_tensor_numel(in[0]); r++)
        if (kl__int_at(in[0], r) != sh.T)
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: sequence_lens %lld shorter than the sequence (%lld)",
                                 n->opset, (long long)kl__int_at(in[0], r), (long long)sh.T);
    kl_tensor views[64], *vin[64 + 512], *res[128], *full[128] = {0};
    if (nx > 64 || n->n_implicit > 512 || n_out > 128 || sh.N + sh.K > 128)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: too many inputs or outputs", n->opset);
    for (int j = 0; j < n->n_implicit; j++) vin[nx + j] = in[1 + nx + j];
    for (int64_t r = 0; r < B && !rc; r++) {
        for (int k = 0; k < nx; k++) { /* row r of input 1 + k */
            const kl_tensor *t = in[1 + k];
            views[k] = *t;
            views[k].rank = t->rank - 1;
            memmove(views[k].dims, t->dims + 1, sizeof(int64_t) * (size_t)views[k].rank);
            kl_tensor_contiguous_strides(views[k].rank, views[k].dims, views[k].strides);
            views[k].nbytes = (size_t)kl_tensor_numel(&views[k]) * kl_dtype_size(t->dtype);
            views[k].data = (char *)t->data + (size_t)r * views[k].nbytes;
            views[k].owns = 0;
            vin[k] = &views[k];
        }
        memset(res, 0, sizeof res);
        if ((rc = scan_exec(n, &sh, vin, res, x->pool, e))) break;
        for (int k = 0; k < sh.N + sh.K && !rc; k++) {
            const kl_tensor *o = res[k];
            if (!full[k]) {
                int64_t dims[KL_MAX_DIMS];
                if (o->rank >= KL_MAX_DIMS) {
                    rc = kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: output rank %d", n->opset, o->rank);
                    break;
                }
                dims[0] = B;
                memcpy(dims + 1, o->dims, sizeof(int64_t) * (size_t)o->rank);
                if ((rc = kl_tensor_new_uninit(o->dtype, o->rank + 1, dims, KL_TAG_ACTIVATIONS, &full[k], e))) break;
            }
            if (o->dtype != full[k]->dtype || (int64_t)o->nbytes * B != (int64_t)full[k]->nbytes) {
                rc =
                    kl__fail_node(e, n, KL_ESHAPE, "opset %d: output %d changes shape between batch rows", n->opset, k);
                break;
            }
            if (o->nbytes) memcpy((char *)full[k]->data + (size_t)r * o->nbytes, o->data, o->nbytes);
        }
        for (int k = 0; k < sh.N + sh.K; k++) kl_tensor_free(res[k]);
    }
    for (int k = 0; !rc && k < n_out; k++) {
        if (!full[k]) {
            int64_t z = 0;
            rc = kl_tensor_new(KL_F32, 1, &z, KL_TAG_ACTIVATIONS, &full[k], e);
        }
    }
    if (!rc) give_outputs(n, full, out, n_out);
    for (int k = 0; k < 128; k++) kl_tensor_free(full[k]);
    return rc;
}

/* Scan 9+ is static when the body's plan for one iteration's shapes fixes
 * its outputs and keeps the states' shapes. */
static int scan_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    scan_shape sh;
    kl_err e2 = {0};
    kl_graph *b = sub_of(n, "body");
    if (n->opset < 9 || scan_plan(n, in, &sh, &e2) || b->n_inputs > 512) return KL__NEED_DATA;
    kl_tensor slices[64], *bin[512];
    kl_tensor *meta = calloc((size_t)b->n_outputs + 1, sizeof(kl_tensor));
    if (!meta) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int nx = sh.N + sh.M;
    for (int j = 0; j < nx; j++) {
        if (j < sh.N) {
            bin[j] = in[j];
            continue;
        }
        const kl_tensor *x = in[j];
        int64_t dims[KL_MAX_DIMS];
        for (int d = 0, r = 0; d < x->rank; d++)
            if (d != sh.in_axis[j - sh.N]) dims[r++] = x->dims[d];
        memset(&slices[j - sh.N], 0, sizeof(kl_tensor));
        kl__set_shape(&slices[j - sh.N], x->dtype, x->rank - 1, dims);
        bin[j] = &slices[j - sh.N];
    }
    for (int j = 0; j < n->n_implicit; j++) bin[nx + j] = in[nx + j];
    int ok = sub_shapes(b, bin, meta);
    for (int k = 0; ok && k < sh.N; k++) /* a state keeps its shape */
        ok = meta[k].dtype == in[k]->dtype && meta[k].rank == in[k]->rank &&
            !memcmp(meta[k].dims, in[k]->dims, sizeof(int64_t) * (size_t)in[k]->rank);
    for (int k = 0; ok && k < n_out; k++) {
        if (k < sh.N) {
            out[k] = meta[k];
            continue;
        }
        int64_t ax, dims[KL_MAX_DIMS];
        const kl_tensor *m = &meta[k];
        ok = m->rank < KL_MAX_DIMS && !kl__norm_axis(attr_at(n, "scan_output_axes", k - sh.N), m->rank + 1, &ax);
        for (int d = 0, r = 0; ok && d <= m->rank; d++) dims[d] = d == ax ? sh.T : m->dims[r++];
        if (ok) kl__set_shape(&out[k], m->dtype, m->rank + 1, dims);
    }
    free(meta);
    return ok ? KL_OK : KL__NEED_DATA;
}

static int scan_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                    kl_err *e) {
    if (n->opset < 9) return scan8_run(n, in, out, n_out, x, e);
    scan_shape sh;
    int rc = scan_plan(n, in, &sh, e);
    if (rc) return rc;
    kl_tensor **res = calloc((size_t)n_out + 1, sizeof(kl_tensor *));
    if (!res) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!(rc = scan_exec(n, &sh, in, res, x->pool, e)) && !(rc = static_check(n, res, out, n_out, e)))
        give_outputs(n, res, out, n_out);
    for (int k = 0; k < n_out; k++) kl_tensor_free(res[k]);
    free(res);
    return rc;
}

static const char *const a_if[] = {"then_branch", "else_branch", NULL};
static const char *const a_loop[] = {"body", NULL};
static const char *const a_scan[] = {
    "body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions",
    NULL};
static const char *const a_scan8[] = {"body", "num_scan_inputs", "directions", NULL};

const kl_op kl__ops_control[] = {
    {"If", "", 1, 17, 1, 1, 1, -1, a_if, if_check, if_infer, if_run, KL_OP_SUBGRAPH | KL_OP_ALLOCS},
    {"Loop", "", 1, 17, 0, -1, 0, -1, a_loop, loop_check, need_data, loop_run, KL_OP_SUBGRAPH | KL_OP_ALLOCS},
    {"Scan", "", 8, 8, 0, -1, 1, -1, a_scan8, scan_check, need_data, scan_run, KL_OP_SUBGRAPH | KL_OP_ALLOCS},
    {"Scan", "", 9, 17, 1, -1, 1, -1, a_scan, scan_check, scan_infer, scan_run, KL_OP_SUBGRAPH | KL_OP_ALLOCS},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
