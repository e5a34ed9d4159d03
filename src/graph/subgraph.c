/* Subgraphs (the GRAPH attributes of If, Loop and Scan): binding a
 * subgraph's outer-scope reads to its node as implicit inputs
 * (kl_gnode_bind_subgraphs), and running a subgraph with the executor
 * (kl__sub_run: one plan per set of input shapes, reused while an
 * iteration's shapes stay the same, one arena reused across iterations, so
 * a loop's memory does not grow with its trip count). */
#include "graph/graph_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- binding ---- */

/* 1 when sub defines value v (input, initializer or node output). */
static char *defined_values(const kl_graph *sub) {
    char *def = calloc((size_t)sub->n_values + 1, 1);
    if (!def) return NULL;
    for (int i = 0; i < sub->n_values; i++) def[i] = sub->values[i].init || sub->values[i].is_input;
    for (int i = 0; i < sub->n_nodes; i++)
        for (int k = 0; k < sub->nodes[i].n_out; k++)
            if (sub->nodes[i].outputs[k] >= 0) def[sub->nodes[i].outputs[k]] = 1;
    return def;
}

/* Appends to names[*n] the values sub reads but does not define (node
 * inputs, then graph outputs), skipping those already listed. */
static int free_names(const kl_graph *sub, char ***names, int *n, int *cap, kl_err *e) {
    char *def = defined_values(sub);
    if (!def) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    for (int i = 0; i <= sub->n_nodes && !rc; i++) {
        const int *vs = i < sub->n_nodes ? sub->nodes[i].inputs : sub->outputs;
        int nv = i < sub->n_nodes ? sub->nodes[i].n_in : sub->n_outputs;
        for (int k = 0; k < nv; k++) {
            int v = vs[k];
            if (v < 0 || def[v]) continue;
            def[v] = 1; /* listed once */
            const char *nm = sub->values[v].name;
            int seen = 0;
            for (int j = 0; j < *n && !seen; j++) seen = !strcmp((*names)[j], nm);
            if (seen) continue;
            if (*n == *cap) {
                int nc = *cap ? *cap * 2 : 8;
                char **nn = realloc(*names, sizeof(char *) * (size_t)nc);
                if (!nn) {
                    rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                    break;
                }
                *names = nn;
                *cap = nc;
            }
            (*names)[*n] = (char *)nm;
            (*n)++;
        }
    }
    free(def);
    return rc;
}

static int append_int(int **list, int n, int v) {
    int *nl = realloc(*list, sizeof(int) * (size_t)(n + 2));
    if (!nl) return -1;
    nl[n] = v;
    *list = nl;
    return 0;
}

/* Makes name an outer input of sub (a placeholder when sub defines that
 * name itself, so that positions still line up with the node's inputs). */
static int bind_outer(kl_graph *sub, const char *name, int slot, kl_err *e) {
    int v = kl_graph_find_value(sub, name);
    char ph[64];
    if (v >= 0 && (sub->values[v].init || sub->values[v].is_input || sub->values[v].producer >= 0)) {
        snprintf(ph, sizeof ph, "\x01outer-%d", slot);
        name = ph;
    }
    if ((v = kl_graph_value(sub, name)) < 0 || append_int(&sub->inputs, sub->n_inputs, v))
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    sub->values[v].is_input = 1;
    sub->n_inputs++;
    sub->n_outer++;
    return KL_OK;
}

int kl_gnode_bind_subgraphs(kl_graph *g, int node, kl_err *e) {
    kl_gnode *n = &g->nodes[node];
    char **names = NULL;
    int nn = 0, cap = 0, rc = KL_OK;
    char d[300];
    for (int i = 0; i < n->n_attrs && !rc; i++)
        if (n->attrs[i].type == KL_ATTR_GRAPH && n->attrs[i].g) {
            kl_graph *sub = n->attrs[i].g;
            for (int v = 0; v < sub->n_values; v++) sub->values[v].producer = -1;
            rc = free_names(sub, &names, &nn, &cap, e);
        }
    /* the outer values first (their names live in the subgraphs) */
    for (int j = 0; j < nn && !rc; j++) {
        int v = kl_graph_value(g, names[j]);
        n = &g->nodes[node];
        if (v < 0 || append_int(&n->inputs, n->n_in, v)) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        n->n_in++;
        n->n_implicit++;
    }
    n = &g->nodes[node];
    for (int i = 0; i < n->n_attrs && !rc; i++) {
        kl_graph *sub = n->attrs[i].type == KL_ATTR_GRAPH ? n->attrs[i].g : NULL;
        if (!sub) continue;
        /* a name this subgraph defines but another reads from outside */
        char *def = defined_values(sub);
        if (!def) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        for (int v = 0; v < sub->n_values; v++)
            sub->values[v].producer = def[v] && !sub->values[v].is_input && !sub->values[v].init ? 0 : -1;
        free(def);
        for (int j = 0; j < nn && !rc; j++) rc = bind_outer(sub, names[j], j, e);
        if (!rc) rc = kl_graph_finalize(sub, e);
        if (rc) kl_err_prefix(e, "%s subgraph '%s'", kl_gnode_desc(n, d, sizeof d), n->attrs[i].name);
    }
    free(names);
    return rc;
}

/* ---- running ---- */

void kl__sub_init(kl__sub *r, kl_graph *g, kl_pool *pool) {
    memset(r, 0, sizeof *r);
    r->g = g;
    r->pool = pool;
}

void kl__sub_free(kl__sub *r) {
    kl_plan_free(r->plan);
    kl_mem_free(r->arena);
    memset(r, 0, sizeof *r);
}

/* 1 when the plan was made for these input shapes and dtypes. */
static int plan_fits(const kl__sub *r, kl_tensor *const *in) {
    if (!r->plan) return 0;
    for (int i = 0; i < r->g->n_inputs; i++) {
        const kl_tensor *m = kl_plan_value(r->plan, r->g->inputs[i]);
        if (!m || m->dtype != in[i]->dtype || m->rank != in[i]->rank ||
            memcmp(m->dims, in[i]->dims, sizeof(int64_t) * (size_t)m->rank))
            return 0;
    }
    return 1;
}

int kl__sub_run(kl__sub *r, kl_tensor *const *in, kl_tensor **out, kl_err *e) {
    kl_graph *g = r->g;
    int rc;
    for (int i = 0; i < g->n_outputs; i++) out[i] = NULL;
    for (int i = 0; i < g->n_inputs; i++)
        if (!in[i]) return kl_err_set(e, KL_EINVAL, "subgraph input '%s' has no value", g->values[g->inputs[i]].name);
    if (!plan_fits(r, in)) {
        kl_plan_free(r->plan);
        r->plan = NULL;
        if ((rc = kl_plan_new(g, (const kl_tensor *const *)in, (size_t)g->n_inputs, &r->plan, e))) return rc;
        size_t need = kl_plan_arena_bytes(r->plan);
        if (need > r->arena_bytes) {
            kl_mem_free(r->arena);
            r->arena_bytes = 0;
            if (!(r->arena = kl_mem_alloc_e(need ? need : 64, KL_TAG_ACTIVATIONS, e))) return KL_ENOMEM;
            r->arena_bytes = need;
        }
    }
    return kl_plan_run(r->plan, g, (const kl_tensor *const *)in, (size_t)g->n_inputs, out, (size_t)g->n_outputs,
                       r->arena, r->pool, e);
}
