/* Executor and memory planner. kl_plan_new runs shape inference for one set
 * of input shapes, constant-folds what the shapes determine, and assigns each
 * intermediate an arena offset by liveness; kl_plan_run executes the plan in
 * a caller-provided arena (tensor headers live there too: no malloc per op).
 * Nodes whose output shapes depend on run-time data switch the rest of the
 * plan to dynamic mode (inference and allocation at run time).
 *
 * Depth-first prefix: at batch N > 1 the first steps of a static plan may
 * run sample by sample (all of them for sample 0, then for sample 1, ...)
 * when they are batch-separable (ops flagged KL_OP_BCAST / KL_OP_SAMPLEWISE
 * whose batch inputs all come from the batch inputs of the graph, their
 * other inputs constants) and their activations per sample outweigh their
 * weights: one sample's activations then stay in the core's caches from one
 * layer to the next (MobileNetV2 at batch 8: 1.13-1.17x per image, batch 32
 * 1.2x; ResNet-18, whose stem and layer 1 tensors are 0.8 MB per image
 * already, within +-4 %) while the weight-heavy rest runs at the full
 * batch. The values the rest reads (and graph outputs) are written at
 * their sample's slice of their full-batch place; the prefix's other values
 * use only the first sample's share of theirs. Same bits as the full-batch
 * run (each op computes a sample alone; checked per node), at any thread
 * count. Runs with a pool of one thread only (serving workers), as the
 * per-sample ops are too small to share between threads. KEEL_SPLIT=0
 * turns it off (A/B: bench/kernels/run.sh split). */
#include "graph/graph_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_NONE, V_INPUT, V_CONST, V_ARENA, V_OUTPUT, V_DYN };

typedef struct {
    kl_tensor meta;      /* dtype/shape (data: constant data for V_CONST) */
    int kind;
    size_t offset, bytes;
    int def, last;       /* step of definition / last use */
    kl_tensor *owned;    /* folded constant owned by the plan */
    int bat, bnd;        /* split prefix: carries the batch / read after the prefix (full-batch place) */
    size_t sbytes;       /* bat: bytes of one sample */
    kl_tensor smeta;     /* bat: the shape of one sample */
} pval;

#define MAX_IO 512

struct kl_plan {
    int n_values;
    pval *v;
    int *steps;
    int n_steps;
    int dyn_from;        /* first dynamic step (n_steps when none) */
    int split_end;       /* steps [0, split_end) run sample by sample (0: none) */
    int64_t split_n;     /* the batch they split */
    int split_mt;        /* split also with a pool of several threads (forced mode) */
    int *split_vals, n_split_vals; /* the values that carry the batch there */
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
    free(p->split_vals);
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

/* Steps whose outputs nothing reads at run time (a Transpose feeding only a
 * Shape, which the plan folded) are dropped; lifetimes are recomputed over
 * the steps that remain. Static plans only. */
static int drop_dead_steps(kl_plan *p, const kl_graph *g, kl_err *e) {
    char *used = calloc((size_t)g->n_values + 1, 1);
    if (!used) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int w = p->n_steps;
    for (int s = p->n_steps - 1; s >= 0; s--) {
        const kl_gnode *n = &g->nodes[p->steps[s]];
        int keep = (n->op->flags & KL_OP_NOFOLD) != 0;
        for (int k = 0; k < n->n_out && !keep; k++) {
            int v = n->outputs[k];
            if (v >= 0 && (g->values[v].is_output || used[v])) keep = 1;
        }
        if (!keep) {
            for (int k = 0; k < n->n_out; k++)
                if (n->outputs[k] >= 0) p->v[n->outputs[k]].kind = V_NONE;
            continue;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->inputs[k] >= 0) used[n->inputs[k]] = 1;
        p->steps[--w] = p->steps[s];
    }
    free(used);
    if (w == 0) return KL_OK;
    p->n_steps -= w;
    memmove(p->steps, p->steps + w, sizeof(int) * (size_t)p->n_steps);
    p->dyn_from = p->n_steps;
    for (int s = 0; s < p->n_steps; s++) {
        const kl_gnode *n = &g->nodes[p->steps[s]];
        for (int k = 0; k < n->n_out; k++)
            if (n->outputs[k] >= 0) p->v[n->outputs[k]].def = p->v[n->outputs[k]].last = s;
        for (int k = 0; k < n->n_in; k++)
            if (n->inputs[k] >= 0 && p->v[n->inputs[k]].kind == V_ARENA) p->v[n->inputs[k]].last = s;
    }
    return KL_OK;
}

/* ---- depth-first prefix ---- */

/* -1: from KEEL_SPLIT (unset: 1), 0: never, 1: the cost rule, 2: the
 * longest separable prefix whatever it costs (unit tests), > 2: the cost
 * rule with the weights counted that many times (experiments). */
int kl_plan_split_steps(const kl_plan *p) { return p->split_end; }

static int split_mode(void) { return kl_settings_get()->plan_split; }

/* Shape of one sample of a full-batch meta (dims[0] == N). */
static void sample_meta(pval *pv, int64_t N) {
    pv->smeta = pv->meta;
    pv->smeta.dims[0] = 1;
    pv->smeta.data = NULL;
    set_contig(&pv->smeta);
    pv->sbytes = pv->meta.nbytes / (size_t)N;
}

/* Whether node n (a step of a static plan) runs sample by sample with the
 * bits of the full-batch run; its one-sample shapes and workspace. wb/ab:
 * bytes of its constant inputs, of its inputs and outputs per sample. */
static int split_node(kl_plan *p, kl_gnode *n, kl_tensor *smeta, size_t *ws, size_t *wb, size_t *ab) {
    int fl = n->op->flags;
    kl_tensor *full[MAX_IO], *one[MAX_IO];
    if (!(fl & (KL_OP_BCAST | KL_OP_SAMPLEWISE)) || n->n_in > MAX_IO || n->n_out > MAX_IO || n->n_out < 1) return 0;
    int orank = -1, nb = 0;
    *wb = *ab = 0;
    for (int k = 0; k < n->n_out; k++) {
        int v = n->outputs[k];
        if (v < 0) continue;
        pval *pv = &p->v[v];
        if ((pv->kind != V_ARENA && pv->kind != V_OUTPUT) || pv->meta.rank < 1 || pv->meta.dims[0] != p->split_n) return 0;
        if (orank < 0) orank = pv->meta.rank;
    }
    if (orank < 0) return 0;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->inputs[k];
        full[k] = one[k] = NULL;
        if (v < 0) continue;
        pval *pv = &p->v[v];
        full[k] = &pv->meta;
        if (pv->bat) {
            /* elementwise: a batch input must line its dim 0 up with the output's */
            if ((fl & KL_OP_BCAST) && pv->meta.rank != orank) return 0;
            one[k] = &pv->smeta;
            *ab += pv->sbytes;
            nb++;
            continue;
        }
        if (pv->kind != V_CONST) return 0;
        /* elementwise: a constant must not carry a dimension 0 of its own */
        if ((fl & KL_OP_BCAST) && pv->meta.rank == orank && pv->meta.dims[0] != 1) return 0;
        one[k] = &pv->meta;
        *wb += pv->meta.nbytes;
    }
    if (!nb || !kl__op_sample_ok(n, full, n->n_in)) return 0;
    memset(smeta, 0, sizeof(kl_tensor) * (size_t)n->n_out);
    *ws = 0;
    kl_err e2 = {0};
    if (n->op->infer(n, one, n->n_in, smeta, n->n_out, ws, &e2) != KL_OK) return 0;
    for (int k = 0; k < n->n_out; k++) {
        int v = n->outputs[k];
        if (v < 0) continue;
        const kl_tensor *m = &p->v[v].meta;
        if (smeta[k].dtype != m->dtype || smeta[k].rank != m->rank || smeta[k].dims[0] != 1 ||
            memcmp(smeta[k].dims + 1, m->dims + 1, sizeof(int64_t) * (size_t)(m->rank - 1)))
            return 0;
        *ab += p->v[v].meta.nbytes / (size_t)p->split_n;
    }
    return 1;
}

/* Chooses the prefix (static steps from the first on): each step must be
 * separable and, in automatic mode, read no more constant bytes than it
 * moves activation bytes per sample (weights heavier than a sample's
 * activations are better streamed once for the whole batch). */
static int plan_split(kl_plan *p, kl_graph *g, kl_err *e) {
    int mode = split_mode();
    if (!mode) return KL_OK;
    /* the batch: the symbolic first dimension of the graph inputs */
    int64_t N = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        const kl_value *val = &g->values[g->inputs[i]];
        const kl_tensor *m = &p->v[g->inputs[i]].meta;
        if (val->rank < 1 || val->dims[0] >= 0 || m->rank < 1) continue;
        if (N && m->dims[0] != N) return KL_OK;
        N = m->dims[0];
    }
    if (N < 2) return KL_OK;
    p->split_n = N;
    for (int i = 0; i < g->n_inputs; i++) {
        const kl_value *val = &g->values[g->inputs[i]];
        pval *pv = &p->v[g->inputs[i]];
        if (val->rank >= 1 && val->dims[0] < 0 && pv->meta.rank >= 1) {
            pv->bat = 1;
            sample_meta(pv, N);
        }
    }
    size_t ws_max = 0;
    int end = 0;
    kl_tensor smeta[MAX_IO];
    for (int s = 0; s < p->dyn_from; s++) {
        kl_gnode *n = &g->nodes[p->steps[s]];
        size_t ws, wb, ab;
        if (!split_node(p, n, smeta, &ws, &wb, &ab)) break;
        if (mode != 2 && wb * (size_t)(mode > 2 ? mode : 1) > ab) break;
        for (int k = 0; k < n->n_out; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            p->v[v].bat = 1;
            p->v[v].smeta = smeta[k];
            p->v[v].smeta.data = NULL;
            set_contig(&p->v[v].smeta);
            p->v[v].sbytes = p->v[v].meta.nbytes / (size_t)N;
        }
        if (ws > ws_max) ws_max = ws;
        end = s + 1;
    }
    /* values that carry the batch: those read after the prefix keep their
     * full-batch place for the whole prefix (no other prefix value may
     * share it: they are written again for every sample) */
    int nv = 0;
    for (int s = end; s < p->n_steps; s++) {
        const kl_gnode *n = &g->nodes[p->steps[s]];
        for (int k = 0; k < n->n_in; k++)
            if (n->inputs[k] >= 0) p->v[n->inputs[k]].bnd = 1;
    }
    for (int i = 0; i < g->n_values; i++) {
        pval *pv = &p->v[i];
        if (!end || !pv->bat || pv->def >= end) { pv->bat = pv->bnd = 0; continue; }
        if (pv->kind == V_ARENA && pv->bnd) pv->def = 0;
        nv++;
    }
    if (!end) return KL_OK;
    if (!(p->split_vals = malloc(sizeof(int) * (size_t)nv))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < g->n_values; i++)
        if (p->v[i].bat) p->split_vals[p->n_split_vals++] = i;
    p->split_end = end;
    p->split_mt = mode == 2;
    if (ws_max > p->ws_bytes) p->ws_bytes = ws_max;
    return KL_OK;
}

/* ---- arena offsets: greedy by size, best fit ----
 * The intervals, largest first, each go to the smallest gap (then the
 * lowest offset) that fits among the placed intervals whose lifetimes
 * overlap its own. Those are found through a segment tree over the steps
 * (the intervals live at the interval's first step) and the intervals
 * sorted by first step (those that begin later within its lifetime), so a
 * placement costs O(log n + m log m) for m overlapping intervals, not a
 * scan of all placed ones: a chain of n nodes plans in O(n log n). */

typedef struct { size_t o, e; } span;
/* Sorts spans by offset: quicksort, insertion sort below 16 (inline
 * comparisons: this runs once per placement). */
static void sort_spans(span *S, int n) {
    while (n > 16) {
        size_t piv = S[n / 2].o;
        int i = 0, j = n - 1;
        while (i <= j) {
            while (S[i].o < piv) i++;
            while (S[j].o > piv) j--;
            if (i <= j) { span t = S[i]; S[i] = S[j]; S[j] = t; i++; j--; }
        }
        /* recurse into the smaller side, loop on the larger */
        if (j + 1 < n - i) { sort_spans(S, j + 1); S += i; n -= i; }
        else { sort_spans(S + i, n - i); n = j + 1; }
    }
    for (int i = 1; i < n; i++) {
        span t = S[i];
        int j = i - 1;
        while (j >= 0 && S[j].o > t.o) { S[j + 1] = S[j]; j--; }
        S[j + 1] = t;
    }
}
typedef struct { int def, i; } defkey;
static int by_def(const void *a, const void *b) {
    const defkey *x = a, *y = b;
    return x->def != y->def ? (x->def < y->def ? -1 : 1) : (x->i > y->i) - (x->i < y->i);
}

typedef struct {
    int leaves;             /* a power of two >= the number of steps */
    int *start, *list;      /* node t's intervals: list[start[t] .. start[t+1]) */
} stree;

/* Runs body with `node` set to each canonical node of steps [lo, hi] (at most 2 log n). */
#define STREE_EACH(T, lo, hi, body) do { \
        int l_ = (lo) + (T)->leaves, r_ = (hi) + (T)->leaves + 1; \
        for (; l_ < r_; l_ >>= 1, r_ >>= 1) { \
            if (l_ & 1) { int node = l_++; body; } \
            if (r_ & 1) { int node = --r_; body; } \
        } \
    } while (0)

static int stree_build(stree *T, const interval *iv, int nv, int steps) {
    T->leaves = 1;
    while (T->leaves < steps) T->leaves <<= 1;
    T->start = calloc((size_t)T->leaves * 2 + 1, sizeof(int));
    if (!T->start) return KL_ENOMEM;
    for (int i = 0; i < nv; i++) STREE_EACH(T, iv[i].def, iv[i].last, T->start[node + 1]++);
    for (int t = 0; t < T->leaves * 2; t++) T->start[t + 1] += T->start[t];
    int *fill = calloc((size_t)T->leaves * 2, sizeof(int));
    T->list = malloc(sizeof(int) * ((size_t)T->start[T->leaves * 2] + 1));
    if (!fill || !T->list) { free(fill); return KL_ENOMEM; }
    for (int i = 0; i < nv; i++) STREE_EACH(T, iv[i].def, iv[i].last, T->list[T->start[node] + fill[node]++] = i);
    free(fill);
    return KL_OK;
}

/* Best-fit offset of b bytes among the spans S (sorted by offset; pmax[k]:
 * the largest end of S[0..k]): candidates 0 and each span's end; a
 * candidate c fits when no span meets [c, c + b); its gap is the distance to
 * the next span at or after c + b. */
static size_t best_fit(const span *S, const size_t *pmax, int m, size_t b) {
    size_t best = (size_t)-1, best_gap = (size_t)-1;
    for (int j = -1; j < m; j++) {
        size_t c = j < 0 ? 0 : S[j].e, end = c + b;
        int lo = 0, hi = m; /* first span with offset >= end */
        while (lo < hi) { int mid = (lo + hi) / 2; if (S[mid].o < end) lo = mid + 1; else hi = mid; }
        if (lo > 0 && pmax[lo - 1] > c) continue; /* a span starting before end ends after c */
        size_t gap = lo == m ? (size_t)-1 - 1 : S[lo].o - c;
        if (gap < best_gap || (gap == best_gap && c < best)) { best_gap = gap; best = c; }
    }
    return best;
}

static int place_all(kl_plan *p, interval *iv, int nv, size_t *peak, kl_err *e) {
    int rc = KL_OK;
    stree T = {0};
    defkey *bydef = malloc(sizeof(defkey) * ((size_t)nv + 1));
    int m_cap = 64;
    char *placed = calloc((size_t)nv + 1, 1);
    span *S = malloc(sizeof(span) * (size_t)m_cap);
    size_t *pmax = malloc(sizeof(size_t) * (size_t)m_cap);
    if (!bydef || !placed || !S || !pmax || stree_build(&T, iv, nv, p->n_steps + 1)) { rc = KL_ENOMEM; goto done; }
    for (int i = 0; i < nv; i++) bydef[i] = (defkey){iv[i].def, i};
    qsort(bydef, (size_t)nv, sizeof(defkey), by_def);
    for (int i = 0; i < nv; i++) {
        int m = 0;
        /* the placed intervals live at step def, then those beginning in (def, last] */
        int lo = 0, hi = nv;
        while (lo < hi) { int mid = (lo + hi) / 2; if (bydef[mid].def <= iv[i].def) lo = mid + 1; else hi = mid; }
#define ADD_SPAN(j) do { \
            if (m == m_cap) { \
                m_cap *= 2; \
                span *nS = realloc(S, sizeof(span) * (size_t)m_cap); if (nS) S = nS; \
                size_t *np = realloc(pmax, sizeof(size_t) * (size_t)m_cap); if (np) pmax = np; \
                if (!nS || !np) { rc = KL_ENOMEM; goto done; } \
            } \
            S[m].o = p->v[iv[j].v].offset; S[m].e = S[m].o + iv[j].bytes; m++; \
        } while (0)
        for (int node = iv[i].def + T.leaves; node >= 1; node >>= 1)
            for (int k = T.start[node]; k < T.start[node + 1]; k++)
                if (placed[T.list[k]]) ADD_SPAN(T.list[k]);
        for (int k = lo; k < nv && bydef[k].def <= iv[i].last; k++)
            if (placed[bydef[k].i]) ADD_SPAN(bydef[k].i);
#undef ADD_SPAN
        sort_spans(S, m);
        for (int k = 0; k < m; k++) pmax[k] = k && pmax[k - 1] > S[k].e ? pmax[k - 1] : S[k].e;
        size_t off = best_fit(S, pmax, m, iv[i].bytes);
        p->v[iv[i].v].offset = off;
        placed[i] = 1;
        if (off + iv[i].bytes > *peak) *peak = off + iv[i].bytes;
    }
done:
    free(T.start); free(T.list); free(bydef); free(placed); free(S); free(pmax);
    if (rc) kl_err_set(e, rc, "out of memory");
    return rc;
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
    if (p->dyn_from == p->n_steps && (rc = drop_dead_steps(p, g, e))) goto fail;
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
    if (p->dyn_from == p->n_steps && (rc = drop_dead_steps(p, g, e))) goto fail;
    if ((rc = plan_split(p, g, e))) goto fail;
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
    if ((rc = place_all(p, iv, nv, &peak, e))) goto fail;
    p->act_bytes = peak;
    p->ws_off = align64(peak);
    p->hdr_off = align64(p->ws_off + p->ws_bytes);
    /* the tensor headers; a prefix run sample by sample has a second set */
    p->arena_bytes = align64(p->hdr_off + sizeof(kl_tensor) * (size_t)g->n_values * (p->split_end ? 2 : 1));
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

/* The depth-first prefix: its steps for sample 0, then for sample 1, ...
 * T: the full-batch headers (data set); S, the arena's second set of
 * headers: a copy whose batch values are pointed at one sample. */
static int run_split(const kl_plan *p, kl_graph *g, char *A, const kl_tensor *T, kl_exec *x, int prof_on, kl_err *e) {
    int rc = KL_OK;
    kl_tensor *S = (kl_tensor *)(A + p->hdr_off) + g->n_values; /* the arena's second set of headers */
    double *ms = prof_on ? calloc((size_t)p->split_end, sizeof(double)) : NULL; /* per step, over the samples */
    if (prof_on && !ms) return kl_err_set(e, KL_ENOMEM, "out of memory");
    memcpy(S, T, sizeof(kl_tensor) * (size_t)g->n_values);
    for (int64_t b = 0; b < p->split_n; b++) {
        for (int i = 0; i < p->n_split_vals; i++) {
            int v = p->split_vals[i];
            const pval *pv = &p->v[v];
            S[v] = pv->smeta;
            S[v].owns = 0;
            if (pv->kind == V_ARENA && !pv->bnd) S[v].data = A + pv->offset;
            else S[v].data = T[v].data ? (char *)T[v].data + (size_t)b * pv->sbytes : NULL;
        }
        for (int s = 0; s < p->split_end; s++) {
            kl_gnode *n = &g->nodes[p->steps[s]];
            kl_tensor *in[MAX_IO], *o[MAX_IO];
            for (int k = 0; k < n->n_in; k++) in[k] = n->inputs[k] >= 0 ? &S[n->inputs[k]] : NULL;
            for (int k = 0; k < n->n_out; k++) o[k] = n->outputs[k] >= 0 ? &S[n->outputs[k]] : NULL;
            int64_t t0 = prof_on ? kl_time_mono_ns() : 0;
            if ((rc = n->op->run(n, in, n->n_in, o, n->n_out, x, e))) goto done;
            if (prof_on) ms[s] += (kl_time_mono_ns() - t0) / 1e6;
        }
    }
    /* one profile entry per step and run, with the full-batch shapes */
    for (int s = 0; prof_on && s < p->split_end; s++) {
        kl_gnode *n = &g->nodes[p->steps[s]];
        kl_tensor *in[MAX_IO], *o[MAX_IO];
        for (int k = 0; k < n->n_in; k++) in[k] = n->inputs[k] >= 0 ? (kl_tensor *)&T[n->inputs[k]] : NULL;
        for (int k = 0; k < n->n_out; k++) o[k] = n->outputs[k] >= 0 ? (kl_tensor *)&T[n->outputs[k]] : NULL;
        kl__prof_add(n, in, n->n_in, o, n->n_out, ms[s]);
    }
done:
    free(ms);
    return rc;
}

/* outputs (new tensors) or into (caller tensors, entries may be NULL = not wanted). */
static int run_impl(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in, kl_tensor **outputs,
                    kl_tensor *const *into, size_t n_out, void *arena, kl_pool *pool, kl_plan_node_fn hook,
                    void *hook_ctx, kl_err *e) {
    int rc = KL_OK;
    int prof_on = kl__prof_on();
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
    /* sample by sample on one thread only: with several, the per-sample
     * ops are too small to share (measured 0.8-0.9x at 2 threads); the
     * plan's layout serves the full-batch run as well */
    int split = p->split_end > 0 && (p->split_mt || kl_pool_threads(pool) == 1);
    for (int i = 0; split && i < g->n_inputs; i++) /* a strided input view is not cut into samples */
        if (p->v[g->inputs[i]].bat && !kl_tensor_is_contiguous(&T[g->inputs[i]])) split = 0;
    if (split && (rc = run_split(p, g, A, T, &x, prof_on, e))) goto done;
    for (int s = 0; hook && split && s < p->split_end; s++) hook(hook_ctx, p->steps[s]);
    for (int s = split ? p->split_end : 0; s < p->n_steps; s++) {
        kl_gnode *n = &g->nodes[p->steps[s]];
        kl_tensor *in[MAX_IO], *o[MAX_IO];
        for (int k = 0; k < n->n_in; k++) in[k] = n->inputs[k] >= 0 ? &T[n->inputs[k]] : NULL;
        if (s < p->dyn_from) {
            for (int k = 0; k < n->n_out; k++) o[k] = n->outputs[k] >= 0 ? &T[n->outputs[k]] : NULL;
            int64_t t0 = prof_on ? kl_time_mono_ns() : 0;
            if ((rc = n->op->run(n, in, n->n_in, o, n->n_out, &x, e))) goto done;
            if (prof_on) kl__prof_add(n, in, n->n_in, o, n->n_out, (kl_time_mono_ns() - t0) / 1e6);
            if (hook) hook(hook_ctx, p->steps[s]);
            continue;
        }
        /* dynamic step */
        kl_tensor *res[MAX_IO];
        int64_t t0 = prof_on ? kl_time_mono_ns() : 0;
        if ((rc = kl__run_node_alloc(n, in, n->n_in, res, n->n_out, pool, e))) goto done;
        if (prof_on) kl__prof_add(n, in, n->n_in, res, n->n_out, (kl_time_mono_ns() - t0) / 1e6);
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
        if (hook) hook(hook_ctx, p->steps[s]);
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
    return run_impl(p, g, inputs, n_in, outputs, NULL, n_out, arena, pool, NULL, NULL, e);
}

int kl_plan_run_into(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in,
                     kl_tensor *const *outputs, size_t n_out, void *arena, kl_pool *pool, kl_err *e) {
    return run_impl(p, g, inputs, n_in, NULL, outputs, n_out, arena, pool, NULL, NULL, e);
}

int kl_plan_run_into_hook(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in,
                          kl_tensor *const *outputs, size_t n_out, void *arena, kl_pool *pool, kl_plan_node_fn hook,
                          void *hook_ctx, kl_err *e) {
    return run_impl(p, g, inputs, n_in, NULL, outputs, n_out, arena, pool, hook, hook_ctx, e);
}
