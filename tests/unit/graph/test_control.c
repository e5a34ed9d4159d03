/* Dropout with training_mode, and the control-flow ops If, Loop and Scan
 * with subgraphs built through the graph API (kl_gnode_bind_subgraphs:
 * outer-scope values as implicit inputs), against hand-computed ONNX
 * semantics: a branch per condition with different output shapes, a loop
 * with a trip count and a data-dependent condition, carried values, scan
 * outputs stacked, zero iterations, a loop whose memory per iteration does
 * not grow, Scan with a negative axis, reversed input and output, and the
 * errors (node, op and opset named; a run-time refusal names the file). */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/onnx.h"
#include "keel/runtime.h"
#include "keel/tensor.h"

#include <stdlib.h>
#include <string.h>

static kl_graph *graph_new(int opset) {
    kl_graph *g;
    kl_graph_new(&g, NULL);
    g->opset = opset;
    return g;
}

static int graph_io(kl_graph *g, const char *name, int out) {
    int v = kl_graph_value(g, name);
    int **list = out ? &g->outputs : &g->inputs, *n = out ? &g->n_outputs : &g->n_inputs;
    *list = realloc(*list, sizeof(int) * (size_t)(*n + 1));
    (*list)[(*n)++] = v;
    if (out) g->values[v].is_output = 1;
    else g->values[v].is_input = 1;
    return v;
}

static void init_scalar(kl_graph *g, const char *name, kl_dtype dt, double v) {
    kl_tensor *t;
    kl_tensor_new(dt, 0, NULL, KL_TAG_PARAMS, &t, NULL);
    if (dt == KL_F32) *(float *)t->data = (float)v;
    else if (dt == KL_I64) *(int64_t *)t->data = (int64_t)v;
    else *(uint8_t *)t->data = v != 0;
    int x = kl_graph_value(g, name);
    g->values[x].init = t;
    g->values[x].dtype = dt;
    g->values[x].rank = 0;
}

/* a node "op" with comma-separated inputs/outputs ("" = omitted) */
static int node(kl_graph *g, const char *op, const char *name, const char *ins, const char *outs) {
    const char *iv[16], *ov[8];
    char ib[256], ob[256];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s && *ins; s = t) {
        t = strchr(s, ',');
        if (t) *t++ = 0;
        iv[ni++] = s;
    }
    for (char *s = ob, *t; s; s = t) {
        t = strchr(s, ',');
        if (t) *t++ = 0;
        ov[no++] = s;
    }
    return kl_graph_add_node(g, op, name, iv, ni, ov, no);
}
static void attr_i(kl_graph *g, int k, const char *name, int64_t v) {
    kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INT)->i = v;
}
static void attr_ints(kl_graph *g, int k, const char *name, int n, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)(n + 1));
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}
static void attr_g(kl_graph *g, int k, const char *name, kl_graph *sub) {
    kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_GRAPH)->g = sub;
}

static int run(kl_graph *g, kl_tensor **x, int n_in, kl_tensor **outs, kl_err *e) {
    kl_pool *pool = NULL;
    kl_plan *p = NULL;
    void *arena = NULL;
    int rc = kl_pool_new(2, &pool, e);
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)x, (size_t)n_in, &p, e);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc)
        rc = kl_plan_run(p, g, (const kl_tensor *const *)x, (size_t)n_in, outs, (size_t)g->n_outputs, arena, pool, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_pool_free(pool);
    return rc;
}

static kl_tensor *vec(int64_t n, const float *v) {
    kl_tensor *t;
    kl_tensor_new(KL_F32, 1, &n, KL_TAG_OTHER, &t, NULL);
    if (v) memcpy(t->data, v, t->nbytes);
    return t;
}
static kl_tensor *scalar(kl_dtype dt, double v) {
    kl_tensor *t;
    kl_tensor_new(dt, 0, NULL, KL_TAG_OTHER, &t, NULL);
    if (dt == KL_I64) *(int64_t *)t->data = (int64_t)v;
    else if (dt == KL_F32) *(float *)t->data = (float)v;
    else *(uint8_t *)t->data = v != 0;
    return t;
}
static float at(const kl_tensor *t, int64_t i) { return ((const float *)t->data)[i]; }

/* ---- Dropout ---- */

/* Dropout(x, ratio, training_mode) opset 13 -> (y, mask) */
static kl_graph *dropout_graph(float ratio, int train, int64_t seed) {
    kl_graph *g = graph_new(13);
    graph_io(g, "x", 0);
    init_scalar(g, "ratio", KL_F32, ratio);
    init_scalar(g, "train", KL_BOOL, train);
    int k = node(g, "Dropout", "drop", "x,ratio,train", "y,mask");
    if (seed >= 0) attr_i(g, k, "seed", seed);
    graph_io(g, "y", 1);
    graph_io(g, "mask", 1);
    return g;
}

KL_TEST(graph_dropout_training_mode) {
    kl_err e = {0};
    float xs[1000];
    for (int i = 0; i < 1000; i++) xs[i] = (float)i - 500.f;
    kl_tensor *x = vec(1000, xs), *o[2], *o2[2];
    /* ratio 0 in training mode, and training_mode false: a copy, mask all true */
    for (int c = 0; c < 2; c++) {
        kl_graph *g = dropout_graph(c ? 0.5f : 0.f, !c, -1);
        KT_OK(kl_graph_finalize(g, &e), &e);
        KT_OK(run(g, &x, 1, o, &e), &e);
        for (int i = 0; i < 1000; i++) {
            KT_CHECK(at(o[0], i) == xs[i]);
            KT_CHECK(((uint8_t *)o[1]->data)[i] == 1);
        }
        kl_tensor_free(o[0]);
        kl_tensor_free(o[1]);
        kl_graph_free(g);
    }
    /* ratio 0.5 in training mode: y = x * mask / 0.5, the same mask on every run */
    kl_graph *g = dropout_graph(0.5f, 1, 7);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(run(g, &x, 1, o, &e), &e);
    KT_OK(run(g, &x, 1, o2, &e), &e);
    int kept = 0;
    for (int i = 0; i < 1000; i++) {
        uint8_t m = ((uint8_t *)o[1]->data)[i];
        kept += m;
        KT_CHECK(m == ((uint8_t *)o2[1]->data)[i]);
        KT_CHECK(at(o[0], i) == (m ? xs[i] * 2.f : 0.f));
    }
    KT_CHECKF(kept > 430 && kept < 570, "%d of 1000 kept at ratio 0.5", kept);
    for (int k = 0; k < 2; k++) {
        kl_tensor_free(o[k]);
        kl_tensor_free(o2[k]);
    }
    kl_graph_free(g);
    /* another seed, another mask */
    g = dropout_graph(0.5f, 1, 8);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(run(g, &x, 1, o2, &e), &e);
    kl_graph *g7 = dropout_graph(0.5f, 1, 7);
    KT_OK(kl_graph_finalize(g7, &e), &e);
    KT_OK(run(g7, &x, 1, o, &e), &e);
    KT_CHECK(memcmp(o[1]->data, o2[1]->data, 1000) != 0);
    for (int k = 0; k < 2; k++) {
        kl_tensor_free(o[k]);
        kl_tensor_free(o2[k]);
    }
    kl_graph_free(g);
    kl_graph_free(g7);
    /* ratio 1 in training mode: an error naming the node and the opset */
    g = dropout_graph(1.f, 1, 7);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_CHECK(run(g, &x, 1, o, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'drop' (Dropout)");
    KT_CONTAINS(kl_err_what(&e), "opset 13");
    kl_graph_free(g);
    kl_tensor_free(x);
}

/* A refusal met only at run time names the model file, node, op and opset. */
KL_TEST(graph_dropout_runtime_refusal_names_file) {
    kl_err e = {0};
    kl_graph *g = graph_new(13);
    int v = graph_io(g, "x", 0);
    g->values[v].dtype = KL_I32;
    g->values[v].rank = 1;
    g->values[v].dims[0] = 4;
    init_scalar(g, "ratio", KL_F32, 0.5);
    graph_io(g, "t", 0);
    g->values[kl_graph_find_value(g, "t")].dtype = KL_BOOL;
    g->values[kl_graph_find_value(g, "t")].rank = 0;
    node(g, "Dropout", "drop", "x,ratio,t", "y");
    graph_io(g, "y", 1);
    KT_OK(kl_graph_finalize(g, &e), &e);
    const char *path = kt_path("drop.onnx");
    KT_OK(kl_onnx_save(g, path, &e), &e);
    kl_graph_free(g);
    kl_session *s = NULL;
    kl_session_opts so = {1, 1};
    KT_OK(kl_session_load(path, &so, &s, &e), &e);
    int64_t four = 4;
    kl_tensor *in[2], *out = NULL;
    kl_tensor_new(KL_I32, 1, &four, KL_TAG_OTHER, &in[0], NULL);
    in[1] = scalar(KL_BOOL, 1);
    KT_CHECK(kl_session_run(s, (const kl_tensor *const *)in, 2, &out, 1, &e) == KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), path);
    KT_CONTAINS(kl_err_what(&e), "'drop' (Dropout)");
    KT_CONTAINS(kl_err_what(&e), "opset 13");
    /* training_mode false: a copy */
    *(uint8_t *)in[1]->data = 0;
    KT_OK(kl_session_run(s, (const kl_tensor *const *)in, 2, &out, 1, &e), &e);
    KT_EQ_INT(out->dtype, KL_I32);
    kl_tensor_free(out);
    kl_tensor_free(in[0]);
    kl_tensor_free(in[1]);
    kl_session_free(s);
}

/* ---- If ---- */

/* If(c) then: y = x + one (x, one from the outer graph); else: y = Concat(x, x) */
static kl_graph *if_graph(void) {
    kl_graph *g = graph_new(16);
    graph_io(g, "c", 0);
    graph_io(g, "x", 0);
    init_scalar(g, "one", KL_F32, 1);
    kl_graph *t = graph_new(16), *f = graph_new(16);
    node(t, "Add", "add", "x,one", "ty");
    graph_io(t, "ty", 1);
    int k = node(f, "Concat", "cat", "x,x", "fy");
    attr_i(f, k, "axis", -1);
    graph_io(f, "fy", 1);
    int n = node(g, "If", "if0", "c", "y");
    attr_g(g, n, "then_branch", t);
    attr_g(g, n, "else_branch", f);
    graph_io(g, "y", 1);
    return g;
}

KL_TEST(graph_if_branches_outer_scope) {
    kl_err e = {0};
    kl_graph *g = if_graph();
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_EQ_INT(g->nodes[0].n_implicit, 2); /* x, one */
    KT_OK(kl_graph_finalize(g, &e), &e);
    float xs[3] = {1, -2, 3};
    kl_tensor *in[2] = {scalar(KL_BOOL, 1), vec(3, xs)}, *y;
    KT_OK(run(g, in, 2, &y, &e), &e);
    KT_EQ_INT(y->rank, 1);
    KT_EQ_INT(y->dims[0], 3);
    for (int i = 0; i < 3; i++) KT_CHECK(at(y, i) == xs[i] + 1);
    kl_tensor_free(y);
    *(uint8_t *)in[0]->data = 0;
    KT_OK(run(g, in, 2, &y, &e), &e);
    KT_EQ_INT(y->dims[0], 6);
    for (int i = 0; i < 6; i++) KT_CHECK(at(y, i) == xs[i % 3]);
    kl_tensor_free(y);
    /* cond with two elements: an error naming the node, op and opset */
    kl_tensor_free(in[0]);
    in[0] = vec(2, NULL);
    in[0]->dtype = KL_BOOL;
    KT_CHECK(run(g, in, 2, &y, &e) == KL_ESHAPE);
    KT_CONTAINS(kl_err_what(&e), "'if0' (If)");
    KT_CONTAINS(kl_err_what(&e), "opset 16");
    kl_tensor_free(in[0]);
    kl_tensor_free(in[1]);
    kl_graph_free(g);
}

/* ---- Loop ---- */

/* Loop(M, cond, s0) body(i, c, s): s' = s + x * float(i); c' = i < stop;
 * scan output s' */
static kl_graph *loop_graph(int64_t stop, int with_scan) {
    kl_graph *g = graph_new(16);
    graph_io(g, "M", 0);
    graph_io(g, "s0", 0);
    graph_io(g, "x", 0);
    init_scalar(g, "stop", KL_I64, (double)stop);
    init_scalar(g, "true", KL_BOOL, 1);
    kl_graph *b = graph_new(16);
    graph_io(b, "i", 0);
    graph_io(b, "cin", 0);
    graph_io(b, "s", 0);
    int k = node(b, "Cast", "cast", "i", "fi");
    attr_i(b, k, "to", 1);
    node(b, "Mul", "mul", "x,fi", "xi");
    node(b, "Add", "add", "s,xi", "s1");
    node(b, "Less", "less", "i,stop", "cout");
    node(b, "Identity", "copy", "s1", "scan");
    graph_io(b, "cout", 1);
    graph_io(b, "s1", 1);
    if (with_scan) graph_io(b, "scan", 1);
    int n = node(g, "Loop", "loop0", "M,true,s0", with_scan ? "s_final,scans" : "s_final");
    attr_g(g, n, "body", b);
    graph_io(g, "s_final", 1);
    if (with_scan) graph_io(g, "scans", 1);
    return g;
}

KL_TEST(graph_loop_carried_scan_condition) {
    kl_err e = {0};
    kl_graph *g = loop_graph(3, 1);
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    float s0[2] = {1, 2}, x[2] = {10, 100};
    kl_tensor *in[3] = {scalar(KL_I64, 10), vec(2, s0), vec(2, x)}, *o[2];
    /* the condition stops it: iterations 0..3 (i < 3 is false after i = 3) */
    KT_OK(run(g, in, 3, o, &e), &e);
    KT_EQ_INT(o[1]->rank, 2);
    KT_EQ_INT(o[1]->dims[0], 4);
    KT_EQ_INT(o[1]->dims[1], 2);
    float acc[2] = {1, 2};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) {
            acc[j] += x[j] * (float)i;
            KT_CHECK(at(o[1], i * 2 + j) == acc[j]);
        }
    KT_CHECK(at(o[0], 0) == acc[0] && at(o[0], 1) == acc[1]);
    kl_tensor_free(o[0]);
    kl_tensor_free(o[1]);
    /* the trip count stops it: M = 2 */
    *(int64_t *)in[0]->data = 2;
    KT_OK(run(g, in, 3, o, &e), &e);
    KT_EQ_INT(o[1]->dims[0], 2);
    KT_CHECK(at(o[0], 0) == 1 + 10 && at(o[0], 1) == 2 + 100);
    kl_tensor_free(o[0]);
    kl_tensor_free(o[1]);
    /* zero iterations: the initial value, an empty scan output */
    *(int64_t *)in[0]->data = 0;
    KT_OK(run(g, in, 3, o, &e), &e);
    KT_CHECK(at(o[0], 0) == 1 && at(o[0], 1) == 2);
    KT_EQ_INT(kl_tensor_numel(o[1]), 0);
    KT_EQ_INT(o[1]->dims[0], 0);
    kl_tensor_free(o[0]);
    kl_tensor_free(o[1]);
    for (int i = 0; i < 3; i++) kl_tensor_free(in[i]);
    kl_graph_free(g);
}

/* A long loop without scan outputs: the memory a run holds does not grow
 * with the trip count (one plan and arena for all iterations). */
KL_TEST(graph_loop_memory_flat) {
    kl_err e = {0};
    kl_graph *g = loop_graph((int64_t)1 << 40, 0);
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    float s0[2] = {0, 0}, x[2] = {1, 1};
    uint64_t peak[2];
    for (int r = 0; r < 2; r++) {
        int64_t iters = r ? 3000 : 30;
        kl_tensor *in[3] = {scalar(KL_I64, (double)iters), vec(2, s0), vec(2, x)}, *o;
        kl_mem_reset_peaks();
        kl_mem_stats st0, st;
        kl_mem_stats_get(KL_TAG_COUNT, &st0);
        KT_OK(run(g, in, 3, &o, &e), &e);
        kl_mem_stats_get(KL_TAG_COUNT, &st);
        peak[r] = st.peak_allocated - st0.allocated;
        KT_CHECK(at(o, 0) == (float)(iters * (iters - 1) / 2));
        kl_tensor_free(o);
        for (int i = 0; i < 3; i++) kl_tensor_free(in[i]);
    }
    KT_CHECKF(peak[1] <= peak[0] + 1024, "peak %llu bytes at 3000 iterations, %llu at 30", (unsigned long long)peak[1],
              (unsigned long long)peak[0]);
    kl_graph_free(g);
}

/* ---- Scan ---- */

/* Scan opset 11: state sum (2), scan input X [2, 3] along axis -1 reversed;
 * body: sum' = sum + x_t; outputs sum', scan output sum' along axis 0
 * written in reverse order. */
KL_TEST(graph_scan_axes_directions) {
    kl_err e = {0};
    kl_graph *g = graph_new(11);
    graph_io(g, "s0", 0);
    graph_io(g, "X", 0);
    kl_graph *b = graph_new(11);
    graph_io(b, "s", 0);
    graph_io(b, "xt", 0);
    node(b, "Add", "add", "s,xt", "s1");
    node(b, "Identity", "id", "s1", "o");
    graph_io(b, "s1", 1);
    graph_io(b, "o", 1);
    int n = node(g, "Scan", "scan0", "s0,X", "sf,Y");
    attr_g(g, n, "body", b);
    attr_i(g, n, "num_scan_inputs", 1);
    int64_t ax[1] = {-1}, dir[1] = {1}, oax[1] = {0}, odir[1] = {1};
    attr_ints(g, n, "scan_input_axes", 1, ax);
    attr_ints(g, n, "scan_input_directions", 1, dir);
    attr_ints(g, n, "scan_output_axes", 1, oax);
    attr_ints(g, n, "scan_output_directions", 1, odir);
    graph_io(g, "sf", 1);
    graph_io(g, "Y", 1);
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    float s0[2] = {0, 100};
    int64_t xd[2] = {2, 3};
    kl_tensor *in[2] = {vec(2, s0), NULL}, *o[2];
    kl_tensor_new(KL_F32, 2, xd, KL_TAG_OTHER, &in[1], NULL);
    for (int i = 0; i < 6; i++) ((float *)in[1]->data)[i] = (float)(i + 1); /* [[1,2,3],[4,5,6]] */
    KT_OK(run(g, in, 2, o, &e), &e);
    /* columns taken 2, 1, 0: sums [3,106], [5,111], [6,115]; written at rows 2, 1, 0 */
    const float want[6] = {6, 115, 5, 111, 3, 106};
    KT_EQ_INT(o[1]->rank, 2);
    KT_EQ_INT(o[1]->dims[0], 3);
    KT_EQ_INT(o[1]->dims[1], 2);
    for (int i = 0; i < 6; i++) KT_CHECKF(at(o[1], i) == want[i], "Y[%d] = %g, expected %g", i, at(o[1], i), want[i]);
    KT_CHECK(at(o[0], 0) == 6 && at(o[0], 1) == 115);
    kl_tensor_free(o[0]);
    kl_tensor_free(o[1]);
    /* an axis out of range: an error naming the node, op and opset */
    g->nodes[0].attrs[2].ints[0] = 2;
    KT_CHECK(run(g, in, 2, o, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'scan0' (Scan)");
    KT_CONTAINS(kl_err_what(&e), "opset 11");
    kl_tensor_free(in[0]);
    kl_tensor_free(in[1]);
    kl_graph_free(g);
}

/* A body taking the wrong number of inputs is refused when the graph is
 * finalized, naming the node. */
KL_TEST(graph_loop_body_arity_error) {
    kl_err e = {0};
    kl_graph *g = graph_new(16);
    graph_io(g, "M", 0);
    graph_io(g, "s0", 0);
    kl_graph *b = graph_new(16);
    graph_io(b, "i", 0);
    node(b, "Identity", "id", "i", "o");
    graph_io(b, "o", 1);
    int n = node(g, "Loop", "badloop", "M,,s0", "s");
    attr_g(g, n, "body", b);
    graph_io(g, "s", 1);
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_CHECK(kl_graph_finalize(g, &e) == KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "'badloop' (Loop)");
    KT_CONTAINS(kl_err_what(&e), "opset 16");
    kl_graph_free(g);
}

/* Scan opset 8: batch first, scanned along dimension 1, per-row; the
 * sequence_lens input omitted; directions reverse. X = [[1,2,3],[4,5,6]]
 * (B 2, T 3, 1): row sums taken from the end: [3,5,6], [6,11,15]. */
KL_TEST(graph_scan8_batch_rows) {
    kl_err e = {0};
    kl_graph *g = graph_new(8);
    graph_io(g, "s0", 0);
    graph_io(g, "X", 0);
    kl_graph *b = graph_new(8);
    graph_io(b, "s", 0);
    graph_io(b, "xt", 0);
    node(b, "Add", "add", "s,xt", "s1");
    node(b, "Identity", "id", "s1", "o");
    graph_io(b, "s1", 1);
    graph_io(b, "o", 1);
    int n = node(g, "Scan", "scan8", ",s0,X", "sf,Y");
    attr_g(g, n, "body", b);
    attr_i(g, n, "num_scan_inputs", 1);
    int64_t dir[1] = {1};
    attr_ints(g, n, "directions", 1, dir);
    graph_io(g, "sf", 1);
    graph_io(g, "Y", 1);
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    int64_t sd[2] = {2, 1}, xd[3] = {2, 3, 1};
    kl_tensor *in[2], *o[2];
    kl_tensor_new(KL_F32, 2, sd, KL_TAG_OTHER, &in[0], NULL);
    kl_tensor_new(KL_F32, 3, xd, KL_TAG_OTHER, &in[1], NULL);
    for (int i = 0; i < 6; i++) ((float *)in[1]->data)[i] = (float)(i + 1);
    KT_OK(run(g, in, 2, o, &e), &e);
    const float want[6] = {3, 5, 6, 6, 11, 15};
    KT_EQ_INT(o[1]->rank, 3);
    KT_EQ_INT(o[1]->dims[0], 2);
    KT_EQ_INT(o[1]->dims[1], 3);
    for (int i = 0; i < 6; i++) KT_CHECKF(at(o[1], i) == want[i], "Y[%d] = %g, expected %g", i, at(o[1], i), want[i]);
    KT_CHECK(at(o[0], 0) == 6 && at(o[0], 1) == 15);
    kl_tensor_free(o[0]);
    kl_tensor_free(o[1]);
    kl_tensor_free(in[0]);
    kl_tensor_free(in[1]);
    kl_graph_free(g);
}

/* A value of the top graph read two levels down: Loop body -> If branch.
 * The If's free name becomes the body's, then the Loop's implicit input.
 * Loop(M = 4, s0 = 0): s' = i is odd ? s + x : s - one  (x, one outer) */
KL_TEST(graph_nested_subgraph_outer_scope) {
    kl_err e = {0};
    kl_graph *g = graph_new(16);
    graph_io(g, "M", 0);
    graph_io(g, "x", 0);
    init_scalar(g, "s0", KL_F32, 0);
    init_scalar(g, "one", KL_F32, 1);
    init_scalar(g, "two", KL_I64, 2);
    init_scalar(g, "true", KL_BOOL, 1);
    kl_graph *b = graph_new(16);
    graph_io(b, "i", 0);
    graph_io(b, "cin", 0);
    graph_io(b, "s", 0);
    node(b, "Mod", "mod", "i,two", "r");
    int k = node(b, "Cast", "odd", "r", "c");
    attr_i(b, k, "to", 9);
    kl_graph *t = graph_new(16), *f = graph_new(16);
    node(t, "Add", "plus", "s,x", "ty");
    graph_io(t, "ty", 1);
    node(f, "Sub", "minus", "s,one", "fy");
    graph_io(f, "fy", 1);
    int n = node(b, "If", "branch", "c", "s1");
    attr_g(b, n, "then_branch", t);
    attr_g(b, n, "else_branch", f);
    KT_OK(kl_gnode_bind_subgraphs(b, n, &e), &e);
    node(b, "Identity", "keep", "cin", "cout");
    graph_io(b, "cout", 1);
    graph_io(b, "s1", 1);
    n = node(g, "Loop", "outer", "M,true,s0", "sf");
    attr_g(g, n, "body", b);
    graph_io(g, "sf", 1);
    KT_OK(kl_gnode_bind_subgraphs(g, n, &e), &e);
    KT_EQ_INT(b->n_outer, 3); /* two, x, one: the If's (x, one) and the body's own (two) */
    KT_OK(kl_graph_finalize(g, &e), &e);
    kl_tensor *in[2] = {scalar(KL_I64, 4), scalar(KL_F32, 10)}, *o;
    KT_OK(run(g, in, 2, &o, &e), &e);
    KT_CHECKF(at(o, 0) == -1 + 10 - 1 + 10, "got %g", at(o, 0)); /* i = 0: -1, 1: +10, 2: -1, 3: +10 */
    kl_tensor_free(o);
    kl_tensor_free(in[0]);
    kl_tensor_free(in[1]);
    kl_graph_free(g);
}

/* Shape inference where static: a Scan whose body fixes its shapes and an
 * If whose branches agree plan statically (their outputs get planned
 * places); an If whose branches differ, and a Loop, plan dynamically. */
KL_TEST(graph_control_static_plans) {
    kl_err e = {0};
    kl_graph *g = graph_new(16);
    graph_io(g, "c", 0);
    graph_io(g, "x", 0);
    kl_graph *t = graph_new(16), *f = graph_new(16);
    node(t, "Relu", "relu", "x", "ty");
    graph_io(t, "ty", 1);
    node(f, "Neg", "neg", "x", "fy");
    graph_io(f, "fy", 1);
    int n = node(g, "If", "same", "c", "y");
    attr_g(g, n, "then_branch", t);
    attr_g(g, n, "else_branch", f);
    graph_io(g, "y", 1);
    KT_OK(kl_gnode_bind_subgraphs(g, n, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    float xs[3] = {-1, 2, -3};
    kl_tensor *in[2] = {scalar(KL_BOOL, 0), vec(3, xs)}, *y;
    kl_plan *p = NULL;
    KT_OK(kl_plan_new(g, (const kl_tensor *const *)in, 2, &p, &e), &e);
    KT_CHECK(!kl_plan_is_dynamic(p));
    KT_CHECK(kl_plan_value(p, kl_graph_find_value(g, "y"))->dims[0] == 3);
    kl_plan_free(p);
    KT_OK(run(g, in, 2, &y, &e), &e);
    KT_CHECK(at(y, 0) == 1 && at(y, 1) == -2 && at(y, 2) == 3);
    kl_tensor_free(y);
    kl_graph_free(g);
    /* branches of different shapes: dynamic */
    g = if_graph();
    KT_OK(kl_gnode_bind_subgraphs(g, 0, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_plan_new(g, (const kl_tensor *const *)in, 2, &p, &e), &e);
    KT_CHECK(kl_plan_is_dynamic(p));
    kl_plan_free(p);
    kl_graph_free(g);
    kl_tensor_free(in[0]);
    kl_tensor_free(in[1]);
}
