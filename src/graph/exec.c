/* Executor and memory planner. kl_plan_new runs shape inference for one set
 * of input shapes, constant-folds what the shapes determine, and assigns each
 * intermediate an arena offset by liveness; kl_plan_run executes the plan in
 * a caller-provided arena (tensor headers live there too: no malloc per op).
 * Nodes whose output shapes depend on run-time data switch the rest of the
 * plan to dynamic mode (inference and allocation at run time). */
#include "graph/graph_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- KEEL_PROFILE=1: time per op type, printed to stderr at exit ---- */
#define PROF_MAX 128
static struct { char op[48]; double ms; long calls; } prof[PROF_MAX];
static int prof_n, prof_on = -1;
static pthread_mutex_t prof_mu = PTHREAD_MUTEX_INITIALIZER;

static void prof_print(void) {
    double tot = 0;
    for (int i = 0; i < prof_n; i++) tot += prof[i].ms;
    fprintf(stderr, "keel profile: %-24s %10s %8s %6s\n", "op", "ms", "calls", "%");
    for (int i = 0; i < prof_n; i++) {
        int best = i;
        for (int j = i + 1; j < prof_n; j++) if (prof[j].ms > prof[best].ms) best = j;
        if (best != i) { __typeof__(prof[0]) t = prof[i]; prof[i] = prof[best]; prof[best] = t; }
        fprintf(stderr, "keel profile: %-24s %10.2f %8ld %5.1f%%\n", prof[i].op, prof[i].ms, prof[i].calls, tot > 0 ? 100 * prof[i].ms / tot : 0);
    }
}

static int profiling(void) {
    if (prof_on < 0) {
        const char *v = getenv("KEEL_PROFILE");
        prof_on = v && *v && strcmp(v, "0");
        if (prof_on) atexit(prof_print);
    }
    return prof_on;
}

static void prof_add(const char *op, double ms) {
    pthread_mutex_lock(&prof_mu);
    int i;
    for (i = 0; i < prof_n; i++) if (!strcmp(prof[i].op, op)) break;
    if (i == prof_n && prof_n < PROF_MAX) { snprintf(prof[i].op, sizeof prof[i].op, "%s", op); prof_n++; }
    if (i < PROF_MAX) { prof[i].ms += ms; prof[i].calls++; }
    pthread_mutex_unlock(&prof_mu);
}

enum { V_NONE, V_INPUT, V_CONST, V_ARENA, V_OUTPUT, V_DYN };

typedef struct {
    kl_tensor meta;      /* dtype/shape (data: constant data for V_CONST) */
    int kind;
    size_t offset, bytes;
    int def, last;       /* step of definition / last use */
    kl_tensor *owned;    /* folded constant owned by the plan */
} pval;

#define MAX_IO 512

struct kl_plan {
    int n_values;
    pval *v;
    int *steps;
    int n_steps;
    int dyn_from;        /* first dynamic step (n_steps when none) */
    size_t act_bytes, naive_bytes, ws_off, ws_bytes, hdr_off, arena_bytes;
};

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static void set_contig(kl_tensor *t) {
    kl_tensor_contiguous_strides(t->rank, t->dims, t->strides);
    int64_t n = kl_shape_numel(t->rank, t->dims);
    t->nbytes = (size_t)(n < 0 ? 0 : n) * kl_dtype_size(t->dtype);
}

void kl_plan_free(kl_plan *p) {
    if (!p) return;
    if (p->v)
        for (int i = 0; i < p->n_values; i++) kl_tensor_free(p->v[i].owned);
    free(p->v);
    free(p->steps);
    free(p);
}

uint64_t kl_plan_arena_bytes(const kl_plan *p) { return p->arena_bytes; }
uint64_t kl_plan_activation_bytes(const kl_plan *p) { return p->act_bytes; }
uint64_t kl_plan_naive_bytes(const kl_plan *p) { return p->naive_bytes; }
int kl_plan_is_dynamic(const kl_plan *p) { return p->dyn_from < p->n_steps; }
const kl_tensor *kl_plan_value(const kl_plan *p, int v) {
    if (v < 0 || v >= p->n_values || p->v[v].kind == V_NONE || p->v[v].kind == V_DYN) return NULL;
    return &p->v[v].meta;
}

typedef struct { int v; size_t bytes; int def, last; } interval;
static int by_size_desc(const void *a, const void *b) {
    const interval *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->def - y->def;
}

int kl_plan_new(kl_graph *g, const kl_tensor *const *inputs, size_t n_in, kl_plan **out, kl_err *e) {
    *out = NULL;
    int rc = KL_OK;
    interval *iv = NULL;
    kl_plan *p = calloc(1, sizeof *p);
    if (!p) return kl_err_set(e, KL_ENOMEM, "out of memory");
    p->n_values = g->n_values;
    p->v = calloc((size_t)g->n_values + 1, sizeof(pval));
    p->steps = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
    if (!p->v || !p->steps) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    if (n_in != (size_t)g->n_inputs) { rc = kl_err_set(e, KL_EINVAL, "%zu inputs given, the model has %d", n_in, g->n_inputs); goto fail; }
    for (int i = 0; i < g->n_values; i++) {
        kl_value *val = &g->values[i];
        p->v[i].def = p->v[i].last = -1;
        if (val->init) {
            p->v[i].kind = V_CONST;
            p->v[i].meta = *val->init;
            p->v[i].meta.owns = 0;
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        pval *pv = &p->v[g->inputs[i]];
        pv->kind = V_INPUT;
        kl__set_shape(&pv->meta, inputs[i]->dtype, inputs[i]->rank, inputs[i]->dims);
        pv->meta.data = NULL;
        set_contig(&pv->meta);
    }
    p->dyn_from = -1;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kl_gnode *n = &g->nodes[ni];
        kl_tensor *in[MAX_IO], meta[MAX_IO];
        if (n->n_in > MAX_IO || n->n_out > MAX_IO) { rc = kl__fail_node(e, n, KL_EUNSUPPORTED, "more than %d inputs/outputs", MAX_IO); goto fail; }
        int known = 1, dyn_in = 0;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->inputs[k];
            if (v < 0) { in[k] = NULL; continue; }
            pval *pv = &p->v[v];
            if (pv->kind == V_DYN) dyn_in = 1;
            if (pv->kind != V_CONST) known = 0;
            in[k] = &pv->meta;
        }
        if (p->dyn_from >= 0 || dyn_in) {
            if (p->dyn_from < 0) p->dyn_from = p->n_steps;
            p->steps[p->n_steps++] = ni;
            for (int k = 0; k < n->n_out; k++)
                if (n->outputs[k] >= 0) p->v[n->outputs[k]].kind = V_DYN, p->v[n->outputs[k]].def = p->n_steps - 1;
            goto uses;
        }
        if ((known && !(n->op->flags & KL_OP_NOFOLD)) || ((n->op->flags & KL_OP_SHAPE_ONLY) && !dyn_in)) {
            kl_tensor *outs[MAX_IO];
            if ((rc = kl__run_node_alloc(n, in, n->n_in, outs, n->n_out, NULL, e))) goto fail;
            for (int k = 0; k < n->n_out; k++) {
                if (n->outputs[k] < 0) { kl_tensor_free(outs[k]); continue; }
                pval *pv = &p->v[n->outputs[k]];
                pv->kind = V_CONST;
                pv->owned = outs[k];
                pv->meta = *outs[k];
                pv->meta.owns = 0;
            }
            continue;
        }
        memset(meta, 0, sizeof(kl_tensor) * (size_t)(n->n_out ? n->n_out : 1));
        size_t ws = 0;
        rc = n->op->infer(n, in, n->n_in, meta, n->n_out, &ws, e);
        if (rc == KL__NEED_DATA) {
            rc = KL_OK;
            if (kl_log_enabled(KL_LOG_DEBUG)) {
                char d[300];
                kl_log(KL_LOG_DEBUG, "graph", "plan: %s needs run-time data for its output shape; dynamic from here", kl_gnode_desc(n, d, sizeof d));
            }
            p->dyn_from = p->n_steps;
            p->steps[p->n_steps++] = ni;
            for (int k = 0; k < n->n_out; k++)
                if (n->outputs[k] >= 0) p->v[n->outputs[k]].kind = V_DYN, p->v[n->outputs[k]].def = p->n_steps - 1;
            goto uses;
        }
        if (rc) goto fail;
        if (ws > p->ws_bytes) p->ws_bytes = ws;
        p->steps[p->n_steps++] = ni;
        for (int k = 0; k < n->n_out; k++) {
            if (n->outputs[k] < 0) continue;
            pval *pv = &p->v[n->outputs[k]];
            pv->meta = meta[k];
            pv->meta.data = NULL;
            pv->meta.owns = 0;
            set_contig(&pv->meta);
            if (kl_shape_numel(pv->meta.rank, pv->meta.dims) < 0) { rc = kl__fail_node(e, n, KL_ERANGE, "output %d: dimension overflow", k); goto fail; }
            pv->kind = g->values[n->outputs[k]].is_output ? V_OUTPUT : V_ARENA;
            pv->bytes = align64(pv->meta.nbytes);
            pv->def = pv->last = p->n_steps - 1;
        }
    uses:
        for (int k = 0; k < n->n_in; k++) {
            int v = n->inputs[k];
            if (v >= 0 && (p->v[v].kind == V_ARENA || p->v[v].kind == V_DYN)) p->v[v].last = p->n_steps - 1;
        }
    }
    if (p->dyn_from < 0) p->dyn_from = p->n_steps;
    /* graph outputs produced dynamically live to the end */
    /* ---- offsets: greedy by size over lifetimes ---- */
    int nv = 0;
    iv = malloc(sizeof(interval) * ((size_t)g->n_values + 1));
    if (!iv) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < g->n_values; i++)
        if (p->v[i].kind == V_ARENA) {
            iv[nv].v = i; iv[nv].bytes = p->v[i].bytes; iv[nv].def = p->v[i].def; iv[nv].last = p->v[i].last;
            p->naive_bytes += p->v[i].bytes;
            nv++;
        }
    qsort(iv, (size_t)nv, sizeof(interval), by_size_desc);
    size_t peak = 0;
    for (int i = 0; i < nv; i++) {
        /* placed intervals overlapping in time, sorted by offset: find the smallest gap that fits */
        size_t best = (size_t)-1, best_gap = (size_t)-1;
        /* collect overlapping placed ones */
        size_t cand_off = 0;
        /* simple O(n^2) scan: try offset 0 and the end of every overlapping interval */
        for (int j = -1; j < i; j++) {
            if (j >= 0 && !(iv[j].def <= iv[i].last && iv[i].def <= iv[j].last)) continue;
            cand_off = j < 0 ? 0 : p->v[iv[j].v].offset + iv[j].bytes;
            size_t end = cand_off + iv[i].bytes, next = (size_t)-1;
            int ok = 1;
            for (int k = 0; k < i && ok; k++) {
                if (!(iv[k].def <= iv[i].last && iv[i].def <= iv[k].last)) continue;
                size_t o = p->v[iv[k].v].offset, oe = o + iv[k].bytes;
                if (o < end && cand_off < oe) ok = 0;
                else if (o >= end && o < next) next = o;
            }
            if (!ok) continue;
            size_t gap = next == (size_t)-1 ? (size_t)-1 - 1 : next - cand_off;
            if (gap < best_gap || (gap == best_gap && cand_off < best)) { best_gap = gap; best = cand_off; }
        }
        p->v[iv[i].v].offset = best;
        if (best + iv[i].bytes > peak) peak = best + iv[i].bytes;
    }
    p->act_bytes = peak;
    p->ws_off = align64(peak);
    p->hdr_off = align64(p->ws_off + p->ws_bytes);
    p->arena_bytes = align64(p->hdr_off + sizeof(kl_tensor) * (size_t)g->n_values);
    free(iv);
    *out = p;
    return KL_OK;
fail:
    free(iv);
    kl_plan_free(p);
    return rc;
}

/* into[i]: the caller's tensor for graph output i when it matches the plan,
 * else an error naming the output. */
static int check_into(const kl_plan *p, const kl_graph *g, size_t i, const kl_tensor *t, kl_err *e) {
    int v = g->outputs[i];
    const kl_tensor *m = &p->v[v].meta;
    char a[96], b[96];
    if (p->v[v].kind == V_DYN) return KL_OK; /* checked after the run */
    if (t->dtype != m->dtype)
        return kl_err_set(e, KL_ETYPE, "output %zu '%s': caller tensor is %s, the plan gives %s", i, g->values[v].name,
                          kl_dtype_name(t->dtype), kl_dtype_name(m->dtype));
    if (t->rank != m->rank || memcmp(t->dims, m->dims, sizeof(int64_t) * (size_t)m->rank))
        return kl_err_set(e, KL_ESHAPE, "output %zu '%s': caller tensor has shape %s, the plan gives %s", i,
                          g->values[v].name, kl_shape_str(t->rank, t->dims, a, sizeof a), kl_shape_str(m->rank, m->dims, b, sizeof b));
    if (!kl_tensor_is_contiguous(t) || (!t->data && kl_tensor_numel(t)))
        return kl_err_set(e, KL_EINVAL, "output %zu '%s': caller tensor is not contiguous", i, g->values[v].name);
    return KL_OK;
}

/* outputs (new tensors) or into (caller tensors, entries may be NULL = not wanted). */
static int run_impl(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in, kl_tensor **outputs,
                    kl_tensor *const *into, size_t n_out, void *arena, kl_pool *pool, kl_err *e) {
    int rc = KL_OK;
    profiling();
    char *A = arena;
    kl_tensor *T = (kl_tensor *)(A + p->hdr_off);
    kl_tensor **outs = calloc((size_t)g->n_values + 1, sizeof(kl_tensor *)); /* new tensors: outputs and dynamic values */
    char *direct = calloc((size_t)g->n_values + 1, 1); /* V_OUTPUT written straight into a caller tensor */
    if (!outs || !direct) { free(outs); free(direct); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    if (n_in != (size_t)g->n_inputs) { rc = kl_err_set(e, KL_EINVAL, "%zu inputs given, the model has %d", n_in, g->n_inputs); goto done; }
    if (outputs)
        for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
    for (int i = 0; i < g->n_values; i++) {
        const pval *pv = &p->v[i];
        T[i] = pv->meta;
        T[i].owns = 0;
        switch (pv->kind) {
        case V_ARENA: T[i].data = A + pv->offset; break;
        case V_OUTPUT: {
            if (into) {
                size_t k;
                for (k = 0; k < n_out && (int)k < g->n_outputs; k++)
                    if (g->outputs[k] == i && into[k]) break;
                if (k < n_out && (int)k < g->n_outputs) {
                    if ((rc = check_into(p, g, k, into[k], e))) goto done;
                    T[i].data = into[k]->data;
                    direct[i] = 1;
                    break;
                }
            }
            if ((rc = kl_tensor_new_uninit(pv->meta.dtype, pv->meta.rank, pv->meta.dims, KL_TAG_ACTIVATIONS, &outs[i], e))) goto done;
            T[i].data = outs[i]->data;
            break;
        }
        default: break;
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const kl_tensor *m = &p->v[g->inputs[i]].meta, *t = inputs[i];
        if (into && (t->dtype != m->dtype || t->rank != m->rank || memcmp(t->dims, m->dims, sizeof(int64_t) * (size_t)t->rank))) {
            char a[96], b[96];
            rc = kl_err_set(e, KL_ESHAPE, "input %d '%s' is %s %s, the plan was made for %s %s", i, g->values[g->inputs[i]].name,
                            kl_dtype_name(t->dtype), kl_shape_str(t->rank, t->dims, a, sizeof a), kl_dtype_name(m->dtype),
                            kl_shape_str(m->rank, m->dims, b, sizeof b));
            goto done;
        }
        T[g->inputs[i]] = *inputs[i];
        T[g->inputs[i]].owns = 0;
    }
    kl_exec x = {pool, A + p->ws_off, p->ws_bytes};
    for (int s = 0; s < p->n_steps; s++) {
        kl_gnode *n = &g->nodes[p->steps[s]];
        kl_tensor *in[MAX_IO], *o[MAX_IO];
        for (int k = 0; k < n->n_in; k++) in[k] = n->inputs[k] >= 0 ? &T[n->inputs[k]] : NULL;
        if (s < p->dyn_from) {
            for (int k = 0; k < n->n_out; k++) o[k] = n->outputs[k] >= 0 ? &T[n->outputs[k]] : NULL;
            int64_t t0 = prof_on ? kl_time_mono_ns() : 0;
            if ((rc = n->op->run(n, in, n->n_in, o, n->n_out, &x, e))) goto done;
            if (prof_on) prof_add(n->op_type, (kl_time_mono_ns() - t0) / 1e6);
            continue;
        }
        /* dynamic step */
        kl_tensor *res[MAX_IO];
        if ((rc = kl__run_node_alloc(n, in, n->n_in, res, n->n_out, pool, e))) goto done;
        for (int k = 0; k < n->n_out; k++) {
            int v = n->outputs[k];
            if (v < 0) { kl_tensor_free(res[k]); continue; }
            outs[v] = res[k];
            T[v] = *res[k];
            T[v].owns = 0;
        }
        /* free dynamic values whose last use was this step (graph outputs kept) */
        for (int k = 0; k < n->n_in; k++) {
            int v = n->inputs[k];
            if (v >= 0 && p->v[v].kind == V_DYN && p->v[v].last == s && !g->values[v].is_output && outs[v]) {
                kl_tensor_free(outs[v]);
                outs[v] = NULL;
            }
        }
    }
    if (into) {
        /* copy what was not written in place: constants, inputs, dynamic values, repeated outputs */
        for (size_t i = 0; i < n_out && (int)i < g->n_outputs; i++) {
            int v = g->outputs[i];
            if (!into[i] || (direct[v] && T[v].data == into[i]->data)) continue;
            const kl_tensor *src = &T[v];
            char a[96], b[96];
            if (src->dtype != into[i]->dtype || src->rank != into[i]->rank ||
                memcmp(src->dims, into[i]->dims, sizeof(int64_t) * (size_t)src->rank)) {
                rc = kl_err_set(e, KL_ESHAPE, "output %zu '%s': caller tensor is %s %s, the run gave %s %s", i, g->values[v].name,
                                kl_dtype_name(into[i]->dtype), kl_shape_str(into[i]->rank, into[i]->dims, a, sizeof a),
                                kl_dtype_name(src->dtype), kl_shape_str(src->rank, src->dims, b, sizeof b));
                goto done;
            }
            size_t nb = (size_t)kl_tensor_numel(src) * kl_dtype_size(src->dtype);
            if (src->data && nb) memmove(into[i]->data, src->data, nb);
        }
        goto done;
    }
    /* hand out the graph outputs */
    for (size_t i = 0; i < n_out && (int)i < g->n_outputs; i++) {
        int v = g->outputs[i];
        if (outs[v]) {
            outputs[i] = outs[v];
            outs[v] = NULL;
        } else {
            /* constant, input, or an output listed twice: copy */
            const kl_tensor *src = &T[v];
            if ((rc = kl_tensor_new_uninit(src->dtype, src->rank, src->dims, KL_TAG_ACTIVATIONS, &outputs[i], e))) goto done;
            if (src->data && outputs[i]->nbytes) memcpy(outputs[i]->data, src->data, outputs[i]->nbytes);
        }
    }
done:
    for (int i = 0; i < g->n_values; i++) kl_tensor_free(outs[i]);
    free(outs);
    free(direct);
    if (rc && outputs)
        for (size_t i = 0; i < n_out; i++) { kl_tensor_free(outputs[i]); outputs[i] = NULL; }
    return rc;
}

int kl_plan_run(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in, kl_tensor **outputs,
                size_t n_out, void *arena, kl_pool *pool, kl_err *e) {
    return run_impl(p, g, inputs, n_in, outputs, NULL, n_out, arena, pool, e);
}

int kl_plan_run_into(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in,
                     kl_tensor *const *outputs, size_t n_out, void *arena, kl_pool *pool, kl_err *e) {
    return run_impl(p, g, inputs, n_in, NULL, outputs, n_out, arena, pool, e);
}
