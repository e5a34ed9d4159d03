/* Graph IR: values, nodes, attributes; validation against the op registry,
 * topological sort with cycle and dangling-input detection; small helpers
 * shared by the op implementations. */
#include "graph/graph_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== *
 * Construction
 * ================================================================== */

int kl_graph_new(kl_graph **out, kl_err *e) {
    *out = calloc(1, sizeof(kl_graph));
    if (!*out) return kl_err_set(e, KL_ENOMEM, "out of memory");
    return KL_OK;
}

static void attr_clear(kl_attr *a) {
    free(a->name);
    free(a->s);
    kl_tensor_free(a->t);
    free(a->floats);
    free(a->ints);
    if (a->strings)
        for (int i = 0; i < a->n; i++) free(a->strings[i]);
    free(a->strings);
    kl_graph_free(a->g);
}

void kl_graph_free(kl_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) {
        kl_value *v = &g->values[i];
        free(v->name);
        for (int d = 0; d < KL_MAX_DIMS; d++) free(v->dim_names[d]);
        kl_tensor_free(v->init);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        free(n->name);
        free(n->op_type);
        free(n->domain);
        free(n->inputs);
        free(n->outputs);
        for (int k = 0; k < n->n_attrs; k++) attr_clear(&n->attrs[k]);
        free(n->attrs);
        if (n->priv_free) n->priv_free(n->priv);
        else free(n->priv);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->name);
    free(g->producer);
    free(g->vindex);
    free(g);
}

/* ---- the name index: value names -> value, open addressing with linear
 * probing (slots hold value + 1, 0 = empty), at most half full; lookups and
 * inserts O(1) on average, so loading n nodes is O(n) (a scan per name was
 * O(n^2): 29 s for a 64k-node chain). */

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The slot holding name, or the empty slot where it would go. */
static size_t index_slot(const kl_graph *g, const char *name) {
    size_t mask = (size_t)g->vindex_cap - 1, i = (size_t)name_hash(name) & mask;
    while (g->vindex[i] && strcmp(g->values[g->vindex[i] - 1].name, name)) i = (i + 1) & mask;
    return i;
}

static int index_grow(kl_graph *g) {
    int cap = g->vindex_cap ? g->vindex_cap * 2 : 128;
    int *old = g->vindex, ocap = g->vindex_cap;
    if (cap <= 0 || !(g->vindex = calloc((size_t)cap, sizeof(int)))) { g->vindex = old; return KL_ENOMEM; }
    g->vindex_cap = cap;
    for (int i = 0; i < ocap; i++)
        if (old[i]) g->vindex[index_slot(g, g->values[old[i] - 1].name)] = old[i];
    free(old);
    return KL_OK;
}

/* Removes value v's entry (its name is still g->values[v].name): backward
 * shift, so that no probe sequence is cut. */
static void index_remove(kl_graph *g, int v) {
    size_t mask = (size_t)g->vindex_cap - 1, i = index_slot(g, g->values[v].name);
    if (g->vindex[i] != v + 1) return;
    for (size_t j = (i + 1) & mask; g->vindex[j]; j = (j + 1) & mask) {
        size_t home = (size_t)name_hash(g->values[g->vindex[j] - 1].name) & mask;
        /* the entry at j may move to i when its home is not in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) { g->vindex[i] = g->vindex[j]; i = j; }
    }
    g->vindex[i] = 0;
}

int kl_graph_find_value(const kl_graph *g, const char *name) {
    if (!g->vindex_cap) return -1;
    int s = g->vindex[index_slot(g, name)];
    return s - 1;
}

int kl_graph_value(kl_graph *g, const char *name) {
    int v = kl_graph_find_value(g, name);
    if (v >= 0) return v;
    if (g->n_values == INT32_MAX / 4) return -1;
    if ((size_t)(g->n_values + 1) * 2 > (size_t)g->vindex_cap && index_grow(g)) return -1;
    if (g->n_values == g->cap_values) {
        int nc = g->cap_values ? g->cap_values * 2 : 64;
        kl_value *nv = realloc(g->values, sizeof(kl_value) * nc);
        if (!nv) return -1;
        g->values = nv;
        g->cap_values = nc;
    }
    kl_value *val = &g->values[g->n_values];
    memset(val, 0, sizeof *val);
    val->name = strdup(name);
    if (!val->name) return -1;
    val->dtype = KL_DTYPE_COUNT;
    val->rank = -1;
    val->producer = -1;
    g->vindex[index_slot(g, name)] = g->n_values + 1;
    return g->n_values++;
}

int kl_graph_value_rename(kl_graph *g, int v, const char *name) {
    char *s = strdup(name);
    if (!s) return KL_ENOMEM;
    KL_ASSERT(kl_graph_find_value(g, name) < 0 || kl_graph_find_value(g, name) == v);
    index_remove(g, v);
    free(g->values[v].name);
    g->values[v].name = s;
    g->vindex[index_slot(g, s)] = v + 1;
    return KL_OK;
}

int kl_graph_add_node(kl_graph *g, const char *op_type, const char *name, const char *const *inputs, int n_in,
                      const char *const *outputs, int n_out) {
    if (g->n_nodes == g->cap_nodes) {
        int nc = g->cap_nodes ? g->cap_nodes * 2 : 64;
        kl_gnode *nn = realloc(g->nodes, sizeof(kl_gnode) * nc);
        if (!nn) return -1;
        g->nodes = nn;
        g->cap_nodes = nc;
    }
    kl_gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op_type = strdup(op_type);
    n->name = strdup(name ? name : "");
    n->domain = strdup("");
    n->inputs = malloc(sizeof(int) * (n_in + 1));
    n->outputs = malloc(sizeof(int) * (n_out + 1));
    n->index = g->n_nodes;
    n->opset = g->opset;
    g->n_nodes++;
    if (!n->op_type || !n->name || !n->domain || !n->inputs || !n->outputs) return -1;
    n->n_in = n_in;
    n->n_out = n_out;
    for (int i = 0; i < n_in; i++) {
        if (!inputs[i] || !*inputs[i]) { n->inputs[i] = -1; continue; }
        int v = kl_graph_value(g, inputs[i]);
        if (v < 0) return -1;
        n = &g->nodes[g->n_nodes - 1];
        n->inputs[i] = v;
    }
    for (int i = 0; i < n_out; i++) {
        if (!outputs[i] || !*outputs[i]) { n->outputs[i] = -1; continue; }
        int v = kl_graph_value(g, outputs[i]);
        if (v < 0) return -1;
        n->outputs[i] = v;
    }
    return g->n_nodes - 1;
}

int kl_gnode_set_domain(kl_gnode *n, const char *domain, int opset) {
    char *d = strdup(domain);
    if (!d) return KL_ENOMEM;
    free(n->domain);
    n->domain = d;
    n->opset = opset;
    return KL_OK;
}

kl_attr *kl_gnode_attr_add(kl_gnode *n, const char *name, kl_attr_type type) {
    kl_attr *na = realloc(n->attrs, sizeof(kl_attr) * (n->n_attrs + 1));
    if (!na) return NULL;
    n->attrs = na;
    kl_attr *a = &na[n->n_attrs];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    if (!a->name) return NULL;
    a->type = type;
    n->n_attrs++;
    return a;
}

const kl_attr *kl_gnode_attr(const kl_gnode *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}
int64_t kl_gnode_attr_int(const kl_gnode *n, const char *name, int64_t def) {
    const kl_attr *a = kl_gnode_attr(n, name);
    return a && a->type == KL_ATTR_INT ? a->i : def;
}
float kl_gnode_attr_float(const kl_gnode *n, const char *name, float def) {
    const kl_attr *a = kl_gnode_attr(n, name);
    if (a && a->type == KL_ATTR_FLOAT) return a->f;
    if (a && a->type == KL_ATTR_INT) return (float)a->i;
    return def;
}
const char *kl_gnode_attr_str(const kl_gnode *n, const char *name, const char *def) {
    const kl_attr *a = kl_gnode_attr(n, name);
    return a && a->type == KL_ATTR_STRING ? a->s : def;
}

const char *kl_gnode_desc(const kl_gnode *n, char *buf, size_t len) {
    if (n->name && *n->name) snprintf(buf, len, "node %d '%s' (%s)", n->index, n->name, n->op_type);
    else snprintf(buf, len, "node %d (%s)", n->index, n->op_type);
    return buf;
}

int kl__fail_node(kl_err *e, const kl_gnode *n, int code, const char *fmt, ...) {
    char d[300], m[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    kl_gnode_desc(n, d, sizeof d);
    kl_err_set(e, code, "%s: %s", d, m);
    return code;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const kl_op *const tables[] = {kl__ops_elem,   kl__ops_nn,      kl__ops_shape,   kl__ops_misc, kl__ops_grad,
                                      kl__ops_grad_nn, kl__ops_train,  kl__ops_nchwc,   kl__ops_vision, kl__ops_einsum,
                                      kl__ops_misc2,  kl__ops_random,  kl__ops_control, kl__ops_rnn,  kl__ops_seq,
                                      kl__ops_audio,  kl__ops_quant};

const kl_op *kl_op_find(const char *domain, const char *op_type) {
    for (size_t t = 0; t < KL_ARRAY_LEN(tables); t++)
        for (const kl_op *o = tables[t]; o->name; o++)
            if (!strcmp(o->name, op_type) && !strcmp(o->domain ? o->domain : "", domain ? domain : "")) return o;
    return NULL;
}

int kl_op_count(void) {
    int c = 0;
    for (size_t t = 0; t < KL_ARRAY_LEN(tables); t++)
        for (const kl_op *o = tables[t]; o->name; o++) {
            int dup = 0;
            for (size_t t2 = 0; t2 <= t && !dup; t2++)
                for (const kl_op *p = tables[t2]; p->name && p != o; p++)
                    if (!strcmp(p->name, o->name)) { dup = 1; break; }
            c += !dup;
        }
    return c;
}

const char *kl_op_name(int i) {
    int c = 0;
    for (size_t t = 0; t < KL_ARRAY_LEN(tables); t++)
        for (const kl_op *o = tables[t]; o->name; o++) {
            int dup = 0;
            for (size_t t2 = 0; t2 <= t && !dup; t2++)
                for (const kl_op *p = tables[t2]; p->name && p != o; p++)
                    if (!strcmp(p->name, o->name)) { dup = 1; break; }
            if (!dup && c++ == i) return o->name;
        }
    return NULL;
}

/* Picks the registry entry for (domain, op, opset): several entries may
 * share a name with different opset ranges. */
static const kl_op *op_for(const kl_gnode *n, const kl_op **any) {
    *any = NULL;
    for (size_t t = 0; t < KL_ARRAY_LEN(tables); t++)
        for (const kl_op *o = tables[t]; o->name; o++) {
            if (strcmp(o->name, n->op_type) || strcmp(o->domain ? o->domain : "", n->domain)) continue;
            *any = o;
            if (n->opset >= o->since && n->opset <= o->until) return o;
        }
    return NULL;
}

/* n->op when it is still the entry for n (each finalize checks every node
 * again: a registry scan per node each time was a third of planning). */
static int op_still(const kl_gnode *n) {
    const kl_op *o = n->op;
    return o && !strcmp(o->name, n->op_type) && !strcmp(o->domain ? o->domain : "", n->domain) &&
           n->opset >= o->since && n->opset <= o->until;
}

static int check_node(kl_graph *g, kl_gnode *n, kl_err *e) {
    const kl_op *any = NULL;
    const kl_op *o = op_still(n) ? n->op : op_for(n, &any);
    if (!o) {
        if (!any)
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "unsupported operator %s%s%s (opset %d)",
                                 *n->domain ? n->domain : "", *n->domain ? "::" : "", n->op_type, n->opset);
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "operator %s at opset %d is not supported (supported: opsets %d-%d)",
                             n->op_type, n->opset, any->since, any->until);
    }
    int n_in = n->n_in - n->n_implicit; /* the implicit (outer-scope) inputs are not the op's */
    if (n_in < o->min_in || (o->max_in >= 0 && n_in > o->max_in))
        return kl__fail_node(e, n, KL_EPARSE, "%d inputs, %s takes %d to %d", n_in, n->op_type, o->min_in, o->max_in);
    if (n->n_out < o->min_out || (o->max_out >= 0 && n->n_out > o->max_out))
        return kl__fail_node(e, n, KL_EPARSE, "%d outputs, %s gives %d to %d", n->n_out, n->op_type, o->min_out, o->max_out);
    for (int k = 0; k < n->n_in && k < o->min_in; k++)
        if (n->inputs[k] < 0) return kl__fail_node(e, n, KL_EPARSE, "required input %d is empty", k);
    /* output 0 is required unless the op declares none required (Loop, RNN/GRU/LSTM: Y may be omitted) */
    for (int k = 0; k < n->n_out && k < o->min_out; k++)
        if (n->outputs[k] < 0) return kl__fail_node(e, n, KL_EPARSE, "required output %d is empty", k);
    for (int i = 0; i < n->n_attrs; i++) {
        kl_attr *a = &n->attrs[i];
        if (a->type == KL_ATTR_GRAPH && (!(o->flags & KL_OP_SUBGRAPH) || !a->g))
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: graph attribute '%s' is not supported", n->opset,
                                 a->name);
        if (!o->attrs) continue;
        int ok = 0;
        for (const char *const *an = o->attrs; *an; an++)
            if (!strcmp(*an, a->name)) { ok = 1; break; }
        if (!ok) return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: unsupported attribute '%s'", n->opset, a->name);
    }
    n->op = o;
    if (o->check) return o->check(n, g, e);
    return KL_OK;
}

/* ================================================================== *
 * Finalize: registry check, producers, dangling inputs, topological sort
 * ================================================================== */

int kl_graph_finalize(kl_graph *g, kl_err *e) {
    int rc = KL_OK;
    int *order = NULL, *indeg = NULL, *queue = NULL;
    kl_gnode *sorted = NULL;
    /* the live nodes first (passes mark nodes dead) */
    int m = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) {
            kl_gnode *n = &g->nodes[i];
            free(n->name); free(n->op_type); free(n->domain); free(n->inputs); free(n->outputs);
            for (int k = 0; k < n->n_attrs; k++) attr_clear(&n->attrs[k]);
            free(n->attrs);
            if (n->priv_free) n->priv_free(n->priv);
            else free(n->priv);
            continue;
        }
        g->nodes[m++] = g->nodes[i];
    }
    g->n_nodes = m;
    for (int i = 0; i < g->n_values; i++) {
        g->values[i].producer = -1;
        g->values[i].n_uses = 0;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        if ((rc = check_node(g, n, e))) goto done;
        for (int k = 0; k < n->n_out; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            kl_value *val = &g->values[v];
            if (val->producer >= 0 || val->init || val->is_input) {
                rc = kl__fail_node(e, n, KL_EPARSE, "output '%s' is already produced elsewhere", val->name);
                goto done;
            }
            val->producer = i;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kl_gnode *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            kl_value *val = &g->values[v];
            if (val->producer < 0 && !val->init && !val->is_input) {
                rc = kl__fail_node(e, n, KL_EPARSE, "input '%s' is not produced by any node, input or initializer", val->name);
                goto done;
            }
            val->n_uses++;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        kl_value *val = &g->values[g->outputs[i]];
        if (val->producer < 0 && !val->init && !val->is_input) {
            rc = kl_err_set(e, KL_EPARSE, "graph output '%s' is not produced by any node", val->name);
            goto done;
        }
        val->n_uses++;
    }
    /* Kahn's algorithm, stable (keeps the model's order where possible) */
    int N = g->n_nodes;
    indeg = calloc(N + 1, sizeof(int));
    queue = malloc(sizeof(int) * (N + 1));
    order = malloc(sizeof(int) * (N + 1));
    if (!indeg || !queue || !order) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < N; i++) {
        kl_gnode *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->inputs[k] >= 0 && g->values[n->inputs[k]].producer >= 0) indeg[i]++;
    }
    /* consumers via a simple scan (graphs are small enough: O(N * E) avoided by CSR) */
    int *cstart = calloc(g->n_values + 1, sizeof(int)), *clist = NULL;
    if (!cstart) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    int total = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].inputs[k] >= 0) { cstart[g->nodes[i].inputs[k] + 1]++; total++; }
    for (int v = 0; v < g->n_values; v++) cstart[v + 1] += cstart[v];
    clist = malloc(sizeof(int) * (total + 1));
    int *fill = calloc(g->n_values + 1, sizeof(int));
    if (!clist || !fill) { free(cstart); free(clist); free(fill); rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0) clist[cstart[v] + fill[v]++] = i;
        }
    /* min-heap would keep exact model order; a FIFO over ready nodes in index order is close enough */
    int qh = 0, qt = 0, no = 0;
    char *done_ = calloc(N + 1, 1);
    if (!done_) { free(cstart); free(clist); free(fill); rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < N; i++)
        if (!indeg[i]) queue[qt++] = i;
    while (qh < qt) {
        int i = queue[qh++];
        order[no++] = i;
        kl_gnode *n = &g->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            for (int c = cstart[v]; c < cstart[v + 1]; c++) {
                int j = clist[c];
                /* a node may use the same value twice: decrement once per use */
                if (--indeg[j] == 0) queue[qt++] = j;
            }
        }
    }
    free(cstart); free(clist); free(fill);
    if (no != N) {
        int bad = -1;
        for (int i = 0; i < N; i++) if (indeg[i] > 0) { bad = i; break; }
        free(done_);
        rc = kl__fail_node(e, &g->nodes[bad], KL_EPARSE, "the graph has a cycle through this node");
        goto done;
    }
    free(done_);
    sorted = malloc(sizeof(kl_gnode) * (N + 1));
    if (!sorted) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < N; i++) sorted[i] = g->nodes[order[i]];
    memcpy(g->nodes, sorted, sizeof(kl_gnode) * N);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].outputs[k] >= 0) g->values[g->nodes[i].outputs[k]].producer = i;
done:
    free(sorted);
    free(order);
    free(indeg);
    free(queue);
    return rc;
}

/* ================================================================== *
 * Helpers for ops
 * ================================================================== */

void kl__set_shape(kl_tensor *t, kl_dtype dt, int rank, const int64_t *dims) {
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    for (int i = rank; i < KL_MAX_DIMS; i++) t->dims[i] = 1;
}

int64_t kl__int_at(const kl_tensor *t, int64_t i) {
    const void *d = t->data;
    switch (t->dtype) {
    case KL_I64: return ((const int64_t *)d)[i];
    case KL_I32: return ((const int32_t *)d)[i];
    case KL_I16: return ((const int16_t *)d)[i];
    case KL_I8: return ((const int8_t *)d)[i];
    case KL_U8: case KL_BOOL: return ((const uint8_t *)d)[i];
    case KL_U16: return ((const uint16_t *)d)[i];
    case KL_U32: return ((const uint32_t *)d)[i];
    case KL_U64: return (int64_t)((const uint64_t *)d)[i];
    case KL_F32: return (int64_t)((const float *)d)[i];
    case KL_F64: return (int64_t)((const double *)d)[i];
    case KL_F16: return (int64_t)kl_f16_to_f32(((const uint16_t *)d)[i]);
    case KL_BF16: return (int64_t)kl_bf16_to_f32(((const uint16_t *)d)[i]);
    default: return 0;
    }
}

double kl__dbl_at(const kl_tensor *t, int64_t i) {
    const void *d = t->data;
    switch (t->dtype) {
    case KL_F32: return ((const float *)d)[i];
    case KL_F64: return ((const double *)d)[i];
    case KL_F16: return kl_f16_to_f32(((const uint16_t *)d)[i]);
    case KL_BF16: return kl_bf16_to_f32(((const uint16_t *)d)[i]);
    case KL_U64: return (double)((const uint64_t *)d)[i];
    default: return (double)kl__int_at(t, i);
    }
}

void kl__set_dbl(kl_tensor *t, int64_t i, double v) {
    void *d = t->data;
    switch (t->dtype) {
    case KL_F32: ((float *)d)[i] = (float)v; break;
    case KL_F64: ((double *)d)[i] = v; break;
    case KL_F16: ((uint16_t *)d)[i] = kl_f32_to_f16((float)v); break;
    case KL_BF16: ((uint16_t *)d)[i] = kl_f32_to_bf16((float)v); break;
    case KL_I64: ((int64_t *)d)[i] = (int64_t)v; break;
    case KL_I32: ((int32_t *)d)[i] = (int32_t)v; break;
    case KL_I16: ((int16_t *)d)[i] = (int16_t)v; break;
    case KL_I8: ((int8_t *)d)[i] = (int8_t)v; break;
    case KL_U8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case KL_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case KL_U16: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case KL_U32: ((uint32_t *)d)[i] = (uint32_t)v; break;
    case KL_U64: ((uint64_t *)d)[i] = (uint64_t)v; break;
    default: break;
    }
}

/* The one table of ONNX TensorProto.DataType numbers: initializers, value
 * infos (src/onnx) and the Cast/ConstantOfShape attributes read through it. */
static const struct { const char *name; int dtype; } onnx_types[] = {
    {"UNDEFINED", -1}, {"FLOAT", KL_F32},   {"UINT8", KL_U8},     {"INT8", KL_I8},        {"UINT16", KL_U16},
    {"INT16", KL_I16}, {"INT32", KL_I32},   {"INT64", KL_I64},    {"STRING", -1},         {"BOOL", KL_BOOL},
    {"FLOAT16", KL_F16}, {"DOUBLE", KL_F64}, {"UINT32", KL_U32}, {"UINT64", KL_U64},     {"COMPLEX64", -1},
    {"COMPLEX128", -1}, {"BFLOAT16", KL_BF16}};

int kl_dtype_from_onnx(int t, kl_dtype *out) {
    if (t < 0 || t >= (int)KL_ARRAY_LEN(onnx_types) || onnx_types[t].dtype < 0) return KL_EUNSUPPORTED;
    *out = (kl_dtype)onnx_types[t].dtype;
    return KL_OK;
}

const char *kl_onnx_type_name(int t) {
    return t >= 0 && t < (int)KL_ARRAY_LEN(onnx_types) ? onnx_types[t].name : "unknown";
}

int kl__norm_axis(int64_t axis, int rank, int64_t *out) {
    int64_t r = rank ? rank : 1;
    if (axis < -r || axis >= r) return KL_EINVAL;
    *out = axis < 0 ? axis + r : axis;
    return KL_OK;
}

void kl__tensor_move(kl_tensor *dst, kl_tensor *res) {
    kl_tensor t = *dst;
    *dst = *res;
    *res = t;
    kl_tensor_free(res);
}

/* A KL_OP_ALLOCS node: its run fills the empty tensors it is given. */
static int run_allocs(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor **out, int n_out, kl_pool *pool,
                      kl_err *e) {
    int64_t zero = 0;
    int rc = KL_OK;
    for (int i = 0; i < n_out && !rc; i++) rc = kl_tensor_new(KL_F32, 1, &zero, KL_TAG_ACTIVATIONS, &out[i], e);
    kl_exec x = {pool, NULL, 0};
    if (!rc) rc = n->op->run(n, in, n_in, out, n_out, &x, e);
    if (rc)
        for (int i = 0; i < n_out; i++) {
            kl_tensor_free(out[i]);
            out[i] = NULL;
        }
    return rc;
}

int kl__run_node_alloc(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor **out, int n_out, kl_pool *pool,
                       kl_err *e) {
    kl_tensor meta[16];
    size_t ws = 0;
    int rc;
    void *wsp = NULL;
    for (int i = 0; i < n_out; i++) out[i] = NULL;
    if (n->op->flags & KL_OP_ALLOCS) return run_allocs(n, in, n_in, out, n_out, pool, e);
    if (n_out > 16) return kl__fail_node(e, n, KL_EUNSUPPORTED, "too many outputs");
    memset(meta, 0, sizeof meta);
    if ((rc = n->op->infer(n, in, n_in, meta, n_out, &ws, e))) {
        if (rc == KL__NEED_DATA) rc = kl__fail_node(e, n, KL_EINTERNAL, "shape needs unknown data");
        return rc;
    }
    for (int i = 0; i < n_out; i++) {
        if (n->outputs[i] < 0 && meta[i].rank == 0 && meta[i].dtype == 0) { /* omitted */ }
        if ((rc = kl_tensor_new_uninit(meta[i].dtype, meta[i].rank, meta[i].dims, KL_TAG_ACTIVATIONS, &out[i], e))) {
            kl_err_prefix(e, "%s", n->op_type);
            goto fail;
        }
    }
    if (ws && !(wsp = kl_mem_alloc_e(ws, KL_TAG_WORKSPACE, e))) { rc = KL_ENOMEM; goto fail; }
    kl_exec x = {pool, wsp, ws};
    rc = n->op->run(n, in, n_in, out, n_out, &x, e);
    kl_mem_free(wsp);
    if (rc) goto fail;
    return KL_OK;
fail:
    for (int i = 0; i < n_out; i++) { kl_tensor_free(out[i]); out[i] = NULL; }
    return rc;
}
