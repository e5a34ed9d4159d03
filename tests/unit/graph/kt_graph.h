/* Test helpers for one-node (or few-node) graphs built in C: values,
 * initializers, nodes from comma-separated names, attributes, and a run
 * through the planner and executor (kl_plan_new / kl_plan_run). Used by the
 * op tests test_vision_ops.c and test_common_ops.c. */
#ifndef KT_GRAPH_H
#define KT_GRAPH_H

#include "keel/graph.h"
#include "keel/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline kl_graph *ktg_new(int opset) {
    kl_graph *g = NULL;
    kl_graph_new(&g, NULL);
    g->opset = opset;
    return g;
}

static inline int ktg_io(kl_graph *g, const char *name, int out) {
    int v = kl_graph_value(g, name);
    int **list = out ? &g->outputs : &g->inputs, *n = out ? &g->n_outputs : &g->n_inputs;
    *list = realloc(*list, sizeof(int) * (size_t)(*n + 1));
    (*list)[(*n)++] = v;
    if (out) g->values[v].is_output = 1;
    else g->values[v].is_input = 1;
    return v;
}

/* an initializer holding a copy of t */
static inline void ktg_init(kl_graph *g, const char *name, const kl_tensor *t) {
    kl_tensor *c = NULL;
    kl_tensor_new(t->dtype, t->rank, t->dims, KL_TAG_PARAMS, &c, NULL);
    memcpy(c->data, t->data, t->nbytes);
    int v = kl_graph_value(g, name);
    g->values[v].init = c;
    g->values[v].dtype = t->dtype;
    g->values[v].rank = t->rank;
    memcpy(g->values[v].dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
}

/* node with inputs/outputs given as "a,b,c" ("" between commas = omitted) */
static inline int ktg_node(kl_graph *g, const char *op, const char *ins, const char *outs) {
    const char *iv[16], *ov[8];
    char ib[512], ob[256];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s && *ib; s = t) {
        t = strchr(s, ',');
        if (t) *t++ = 0;
        iv[ni++] = s;
    }
    for (char *s = ob, *t; s; s = t) {
        t = strchr(s, ',');
        if (t) *t++ = 0;
        ov[no++] = s;
    }
    return kl_graph_add_node(g, op, op, iv, ni, ov, no);
}
static inline void ktg_attr_i(kl_graph *g, int k, const char *name, int64_t v) {
    kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INT)->i = v;
}
static inline void ktg_attr_f(kl_graph *g, int k, const char *name, float v) {
    kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_FLOAT)->f = v;
}
static inline void ktg_attr_s(kl_graph *g, int k, const char *name, const char *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_STRING);
    a->s = malloc(strlen(v) + 1);
    strcpy(a->s, v);
}
static inline void ktg_attr_ints(kl_graph *g, int k, const char *name, int n, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}
static inline void ktg_attr_floats(kl_graph *g, int k, const char *name, int n, const float *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_FLOATS);
    a->floats = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(a->floats, v, sizeof(float) * (size_t)n);
    a->n = n;
}

/* finalizes and runs g on x; outs: new tensors (caller frees) */
static inline int ktg_run(kl_graph *g, kl_tensor **x, int n_in, kl_tensor **outs, kl_err *e) {
    kl_pool *pool = NULL;
    kl_plan *p = NULL;
    void *arena = NULL;
    int rc = kl_graph_finalize(g, e);
    if (!rc) rc = kl_pool_new(2, &pool, e);
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)x, (size_t)n_in, &p, e);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc)
        rc = kl_plan_run(p, g, (const kl_tensor *const *)x, (size_t)n_in, outs, (size_t)g->n_outputs, arena, pool, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_pool_free(pool);
    return rc;
}

static inline kl_tensor *ktg_tensor(kl_dtype dt, int rank, const int64_t *dims, const void *data) {
    kl_tensor *t = NULL;
    kl_tensor_new(dt, rank, dims, KL_TAG_OTHER, &t, NULL);
    if (data && t->nbytes) memcpy(t->data, data, t->nbytes);
    return t;
}

/* element i of t as a double / set from a double, any numeric dtype */
static inline double ktg_get(const kl_tensor *t, int64_t i) {
    const void *d = t->data;
    switch (t->dtype) {
    case KL_F32: return ((const float *)d)[i];
    case KL_F64: return ((const double *)d)[i];
    case KL_F16: return kl_f16_to_f32(((const uint16_t *)d)[i]);
    case KL_BF16: return kl_bf16_to_f32(((const uint16_t *)d)[i]);
    case KL_I8: return ((const int8_t *)d)[i];
    case KL_I16: return ((const int16_t *)d)[i];
    case KL_I32: return ((const int32_t *)d)[i];
    case KL_I64: return (double)((const int64_t *)d)[i];
    case KL_U8:
    case KL_BOOL: return ((const uint8_t *)d)[i];
    case KL_U16: return ((const uint16_t *)d)[i];
    case KL_U32: return ((const uint32_t *)d)[i];
    case KL_U64: return (double)((const uint64_t *)d)[i];
    default: return NAN;
    }
}
static inline void ktg_set(kl_tensor *t, int64_t i, double v) {
    void *d = t->data;
    switch (t->dtype) {
    case KL_F32: ((float *)d)[i] = (float)v; break;
    case KL_F64: ((double *)d)[i] = v; break;
    case KL_F16: ((uint16_t *)d)[i] = kl_f32_to_f16((float)v); break;
    case KL_BF16: ((uint16_t *)d)[i] = kl_f32_to_bf16((float)v); break;
    case KL_I8: ((int8_t *)d)[i] = (int8_t)v; break;
    case KL_I16: ((int16_t *)d)[i] = (int16_t)v; break;
    case KL_I32: ((int32_t *)d)[i] = (int32_t)v; break;
    case KL_I64: ((int64_t *)d)[i] = (int64_t)v; break;
    case KL_U8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case KL_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case KL_U16: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case KL_U32: ((uint32_t *)d)[i] = (uint32_t)v; break;
    case KL_U64: ((uint64_t *)d)[i] = (uint64_t)v; break;
    default: break;
    }
}

static uint64_t ktg_rand_state = 0x9E3779B97F4A7C15ull;
static inline double ktg_rand(void) { /* [0, 1) */
    ktg_rand_state ^= ktg_rand_state << 13;
    ktg_rand_state ^= ktg_rand_state >> 7;
    ktg_rand_state ^= ktg_rand_state << 17;
    return (double)(ktg_rand_state >> 11) * 0x1.0p-53;
}

#endif
