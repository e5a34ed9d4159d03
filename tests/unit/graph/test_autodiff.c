/* Tests of kl_graph_autodiff and the gradient ops: every rule against
 * central finite differences in float64 through the graph executor
 * (kl_plan_new + kl_plan_run), float32 runs bit-identical at 1 and 2
 * threads, kl_plan_run_into, and the errors (no rule, shape mismatch). */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/tensor.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- builders */

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1.0p-52 - 1.0;
}

static int g_input(kl_graph *g, const char *name) {
    int v = kl_graph_value(g, name);
    g->values[v].is_input = 1;
    g->inputs = realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
    g->inputs[g->n_inputs++] = v;
    return v;
}
static void g_output(kl_graph *g, const char *name) {
    int v = kl_graph_value(g, name);
    g->values[v].is_output = 1;
    g->outputs = realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    g->outputs[g->n_outputs++] = v;
}
static int g_node(kl_graph *g, const char *domain, const char *op, const char *ins, const char *outs) {
    /* ins/outs: comma-separated names ("" entries = omitted) */
    const char *iv[16], *ov[16];
    char ib[512], ob[512];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; iv[ni++] = s; }
    for (char *s = ob, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; ov[no++] = s; }
    int k = kl_graph_add_node(g, op, op, iv, ni, ov, no);
    if (domain && *domain) kl_gnode_set_domain(&g->nodes[k], domain, 1);
    return k;
}
static void a_int(kl_graph *g, int k, const char *name, int64_t v) { kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INT)->i = v; }
static void a_float(kl_graph *g, int k, const char *name, float v) { kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_FLOAT)->f = v; }
static void a_ints(kl_graph *g, int k, const char *name, int n, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}
static void a_str(kl_graph *g, int k, const char *name, const char *s) { kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_STRING)->s = strdup(s); }

static kl_graph *new_graph(void) {
    kl_graph *g;
    kl_err e;
    if (kl_graph_new(&g, &e)) return NULL;
    g->opset = 17;
    return g;
}

/* Random float tensor (f64 or f32) of the given shape; scale multiplies. */
static kl_tensor *rnd(kl_dtype dt, int rank, const int64_t *dims, double scale, double shift) {
    kl_tensor *t;
    kl_err e;
    if (kl_tensor_new(dt, rank, dims, KL_TAG_OTHER, &t, &e)) return NULL;
    int64_t n = kl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = urand() * scale + shift;
        if (dt == KL_F64) ((double *)t->data)[i] = v;
        else ((float *)t->data)[i] = (float)v;
    }
    return t;
}
static kl_tensor *labels(int64_t B, int64_t K) {
    kl_tensor *t;
    kl_err e;
    int64_t d[1] = {B};
    if (kl_tensor_new(KL_I64, 1, d, KL_TAG_OTHER, &t, &e)) return NULL;
    for (int64_t i = 0; i < B; i++) ((int64_t *)t->data)[i] = (int64_t)((urand() + 1) * 0.5 * (double)K) % K;
    return t;
}

/* ---------------------------------------------------------------- gradcheck */

/* Runs p over ins; returns output 0 (the loss) as double; outs optional. */
static int run_loss(kl_plan *p, kl_graph *g, kl_tensor **ins, int n_in, void *arena, double *loss, kl_tensor **outs, kl_err *e) {
    kl_tensor *o[64] = {0};
    int rc = kl_plan_run(p, g, (const kl_tensor *const *)ins, (size_t)n_in, o, (size_t)g->n_outputs, arena, NULL, e);
    if (rc) return rc;
    *loss = o[0]->dtype == KL_F64 ? ((double *)o[0]->data)[0] : ((float *)o[0]->data)[0];
    for (int i = 0; i < g->n_outputs; i++) {
        if (outs) outs[i] = o[i];
        else kl_tensor_free(o[i]);
    }
    return KL_OK;
}

/* Loss = graph output 0. Differentiates w.r.t. the inputs named in wrt
 * (comma separated), compares every gradient (up to ~40 sampled elements
 * per tensor) with central differences. Frees g and ins. */
static void gradcheck(const char *tname, kl_graph *g, kl_tensor **ins, int n_in, const char *wrt, double tol) {
    kl_err e;
    int w[16], gr[16], nw = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", wrt);
    for (char *s = buf, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; w[nw++] = kl_graph_find_value(g, s); }
    int loss = g->outputs[0];
    int rc = kl_graph_autodiff(g, loss, w, nw, gr, &e);
    if (!rc) rc = kl_graph_finalize(g, &e);
    kl_plan *p = NULL;
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)ins, (size_t)n_in, &p, &e);
    void *arena = NULL;
    kl_tensor *outs[64] = {0};
    double l0 = 0;
    if (!rc) {
        arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
        rc = run_loss(p, g, ins, n_in, arena, &l0, outs, &e);
    }
    if (rc) kt_fail(__FILE__, __LINE__, "%s: %s", tname, kl_err_what(&e));
    for (int i = 0; !rc && i < nw && !kt_failed(); i++) {
        int gi = -1;
        for (int k = 0; k < g->n_outputs; k++) if (g->outputs[k] == gr[i]) gi = k;
        int ii = -1;
        for (int k = 0; k < g->n_inputs; k++) if (g->inputs[k] == w[i]) ii = k;
        kl_tensor *x = ins[ii], *gt = outs[gi];
        int64_t n = kl_tensor_numel(x), step = n > 40 ? n / 40 : 1;
        if (kl_tensor_numel(gt) != n) { kt_fail(__FILE__, __LINE__, "%s: grad of %s has %lld elements, expected %lld", tname, g->values[w[i]].name, (long long)kl_tensor_numel(gt), (long long)n); break; }
        for (int64_t j = 0; j < n && !kt_failed(); j += step) {
            double *xv = (double *)x->data + j, keep = *xv, h = 1e-6 * (fabs(keep) > 1 ? fabs(keep) : 1), lp, lm;
            *xv = keep + h;
            rc = run_loss(p, g, ins, n_in, arena, &lp, NULL, &e);
            *xv = keep - h;
            if (!rc) rc = run_loss(p, g, ins, n_in, arena, &lm, NULL, &e);
            *xv = keep;
            if (rc) { kt_fail(__FILE__, __LINE__, "%s: %s", tname, kl_err_what(&e)); break; }
            double num = (lp - lm) / (2 * h), an = ((double *)gt->data)[j];
            double sc = fabs(num) > fabs(an) ? fabs(num) : fabs(an);
            if (sc < 1) sc = 1;
            if (fabs(num - an) > tol * sc)
                kt_fail(__FILE__, __LINE__, "%s: d loss / d %s[%lld]: autodiff %.10g, finite differences %.10g", tname, g->values[w[i]].name,
                        (long long)j, an, num);
        }
    }
    for (int i = 0; i < 64; i++) kl_tensor_free(outs[i]);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_graph_free(g);
    for (int i = 0; i < n_in; i++) kl_tensor_free(ins[i]);
}

/* ---------------------------------------------------------------- MLP */

/* x(B,In) -Gemm(W1 (H,In) transB, b1)-> Relu -Flatten-> MatMul(W2 (H,K)) + b2 -> CE */
static kl_graph *mlp_graph(int smoothing, int weighted) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "W1"); g_input(g, "b1"); g_input(g, "W2"); g_input(g, "b2"); g_input(g, "y");
    if (weighted) g_input(g, "cw");
    int k = g_node(g, "", "Gemm", "x,W1,b1", "h");
    a_int(g, k, "transB", 1);
    g_node(g, "", "Relu", "h", "r");
    k = g_node(g, "", "Flatten", "r", "f");
    a_int(g, k, "axis", 1);
    g_node(g, "", "MatMul", "f,W2", "m");
    g_node(g, "", "Add", "m,b2", "z");
    k = g_node(g, "ai.keel.train", "CrossEntropyLoss", weighted ? "z,y,cw" : "z,y", "loss");
    if (smoothing) a_float(g, k, "label_smoothing", 0.1f);
    g_output(g, "loss");
    return g;
}

static void mlp_inputs(kl_dtype dt, int64_t B, int64_t In, int64_t H, int64_t K, int weighted, kl_tensor **ins) {
    int64_t dx[2] = {B, In}, dw1[2] = {H, In}, db1[1] = {H}, dw2[2] = {H, K}, db2[1] = {K};
    ins[0] = rnd(dt, 2, dx, 1, 0);
    ins[1] = rnd(dt, 2, dw1, 0.5, 0);
    ins[2] = rnd(dt, 1, db1, 0.5, 0.1);
    ins[3] = rnd(dt, 2, dw2, 0.5, 0);
    ins[4] = rnd(dt, 1, db2, 0.5, 0);
    ins[5] = labels(B, K);
    if (weighted) ins[6] = rnd(dt, 1, db2, 0.4, 1.0);
}

KL_TEST(graph_autodiff_mlp_ce) {
    kl_tensor *ins[8];
    mlp_inputs(KL_F64, 5, 7, 6, 4, 0, ins);
    gradcheck("mlp", mlp_graph(0, 0), ins, 6, "x,W1,b1,W2,b2", 1e-6);
}

KL_TEST(graph_autodiff_mlp_ce_smoothing_weights) {
    kl_tensor *ins[8];
    mlp_inputs(KL_F64, 6, 5, 4, 3, 1, ins);
    gradcheck("mlp_w", mlp_graph(1, 1), ins, 7, "W1,b1,W2,b2", 1e-6);
}

/* Gemm with transA, alpha, beta and a full C; Sub/Mul/Div with broadcasting; Tanh/Sigmoid/Exp/Neg */
KL_TEST(graph_autodiff_gemm_variants_arith) {
    kl_graph *g = new_graph();
    g_input(g, "A"); g_input(g, "B"); g_input(g, "C"); g_input(g, "s"); g_input(g, "t");
    int k = g_node(g, "", "Gemm", "A,B,C", "y");
    a_int(g, k, "transA", 1); a_int(g, k, "transB", 1); a_float(g, k, "alpha", 0.7f); a_float(g, k, "beta", 1.3f);
    g_node(g, "", "Tanh", "y", "y1");
    g_node(g, "", "Mul", "y1,s", "y2");      /* s: (1, N) */
    g_node(g, "", "Sigmoid", "y2", "y3");
    g_node(g, "", "Div", "y3,t", "y4");      /* t: (N) positive */
    g_node(g, "", "Sub", "y4,y1", "y5");
    g_node(g, "", "Exp", "y5", "y6");
    g_node(g, "", "Neg", "y6", "y7");
    g_node(g, "", "Erf", "y7", "y8");
    g_node(g, "", "ReduceSum", "y8", "loss");
    a_int(g, g->n_nodes - 1, "keepdims", 0);
    g_output(g, "loss");
    kl_tensor *ins[5];
    int64_t da[2] = {4, 3}, db[2] = {5, 4}, dc[2] = {3, 5}, ds[2] = {1, 5}, dt[1] = {5};
    ins[0] = rnd(KL_F64, 2, da, 1, 0); ins[1] = rnd(KL_F64, 2, db, 1, 0); ins[2] = rnd(KL_F64, 2, dc, 1, 0);
    ins[3] = rnd(KL_F64, 2, ds, 1, 0); ins[4] = rnd(KL_F64, 1, dt, 0.5, 2);
    (void)a_ints; (void)a_str;
    gradcheck("gemm_arith", g, ins, 5, "A,B,C,s,t", 1e-6);
}

/* ---------------------------------------------------------------- f32, threads, run_into */

/* Plans g (after autodiff w.r.t. wrt) and runs it with the given pool into
 * freshly allocated outputs (kl_plan_run_into). */
static int run_f32(kl_graph *g, kl_tensor **ins, int n_in, kl_pool *pool, kl_tensor **outs, kl_err *e) {
    kl_plan *p;
    int rc = kl_plan_new(g, (const kl_tensor *const *)ins, (size_t)n_in, &p, e);
    if (rc) return rc;
    for (int i = 0; i < g->n_outputs; i++) {
        const kl_tensor *m = kl_plan_value(p, g->outputs[i]);
        kl_tensor_new(m->dtype, m->rank, m->dims, KL_TAG_GRADS, &outs[i], e);
    }
    void *arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    rc = kl_plan_run_into(p, g, (const kl_tensor *const *)ins, (size_t)n_in, outs, (size_t)g->n_outputs, arena, pool, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    return rc;
}

KL_TEST(graph_autodiff_f32_threads_bitident) {
    kl_err e;
    kl_tensor *ins[8], *ins64[8], *o1[16] = {0}, *o2[16] = {0}, *o64[16] = {0};
    uint64_t seed = rng_state;
    mlp_inputs(KL_F32, 96, 300, 200, 10, 0, ins);
    rng_state = seed;
    mlp_inputs(KL_F64, 96, 300, 200, 10, 0, ins64);
    kl_graph *g = mlp_graph(0, 0), *g64 = mlp_graph(0, 0);
    const char *names[4] = {"W1", "b1", "W2", "b2"};
    int w[4], gr[4], w64[4];
    for (int i = 0; i < 4; i++) { w[i] = kl_graph_find_value(g, names[i]); w64[i] = kl_graph_find_value(g64, names[i]); }
    KT_OK(kl_graph_autodiff(g, g->outputs[0], w, 4, gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_autodiff(g64, g64->outputs[0], w64, 4, gr, &e), &e);
    KT_OK(kl_graph_finalize(g64, &e), &e);
    kl_pool *p1, *p2;
    KT_OK(kl_pool_new(1, &p1, &e), &e);
    KT_OK(kl_pool_new(2, &p2, &e), &e);
    KT_OK(run_f32(g, ins, 6, p1, o1, &e), &e);
    KT_OK(run_f32(g, ins, 6, p2, o2, &e), &e);
    KT_OK(run_f32(g64, ins64, 6, p2, o64, &e), &e);
    KT_EQ_INT(g->n_outputs, 5);
    for (int i = 0; i < g->n_outputs; i++) {
        KT_CHECK(o1[i]->nbytes == o2[i]->nbytes);
        KT_CHECKF(!memcmp(o1[i]->data, o2[i]->data, o1[i]->nbytes), "output %d differs between 1 and 2 threads", i);
        int64_t n = kl_tensor_numel(o1[i]);
        double mx = 0, err = 0;
        for (int64_t j = 0; j < n; j++) {
            double a = ((float *)o1[i]->data)[j], b = ((double *)o64[i]->data)[j];
            if (fabs(b) > mx) mx = fabs(b);
            if (fabs(a - b) > err) err = fabs(a - b);
        }
        KT_CHECKF(err <= 1e-4 * (mx > 1 ? mx : 1), "output %d: f32 vs f64 max error %g (scale %g)", i, err, mx);
    }
    KT_EQ_STR(g->values[g->outputs[1]].name, "W1_grad");
    for (int i = 0; i < 16; i++) { kl_tensor_free(o1[i]); kl_tensor_free(o2[i]); kl_tensor_free(o64[i]); }
    for (int i = 0; i < 6; i++) { kl_tensor_free(ins[i]); kl_tensor_free(ins64[i]); }
    kl_pool_free(p1);
    kl_pool_free(p2);
    kl_graph_free(g);
    kl_graph_free(g64);
}

KL_TEST(graph_autodiff_run_into_checks) {
    kl_err e;
    kl_tensor *ins[8], *outs[8] = {0};
    mlp_inputs(KL_F32, 4, 3, 5, 2, 0, ins);
    kl_graph *g = mlp_graph(0, 0);
    int w = kl_graph_find_value(g, "W2"), gr;
    KT_OK(kl_graph_autodiff(g, g->outputs[0], &w, 1, &gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    kl_plan *p;
    KT_OK(kl_plan_new(g, (const kl_tensor *const *)ins, 6, &p, &e), &e);
    void *arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    int64_t bad[2] = {2, 5};
    KT_OK(kl_tensor_new(KL_F32, 2, bad, KL_TAG_GRADS, &outs[1], &e), &e);
    int rc = kl_plan_run_into(p, g, (const kl_tensor *const *)ins, 6, outs, 2, arena, NULL, &e);
    KT_EQ_INT(rc, KL_ESHAPE);
    KT_CONTAINS(e.msg, "W2_grad");
    kl_tensor_free(outs[1]);
    int64_t good[2] = {5, 2};
    KT_OK(kl_tensor_new(KL_F32, 2, good, KL_TAG_GRADS, &outs[1], &e), &e);
    KT_OK(kl_plan_run_into(p, g, (const kl_tensor *const *)ins, 6, outs, 2, arena, NULL, &e), &e); /* loss not wanted */
    kl_tensor *ref[2] = {0};
    KT_OK(kl_plan_run(p, g, (const kl_tensor *const *)ins, 6, ref, 2, arena, NULL, &e), &e);
    KT_CHECK(!memcmp(ref[1]->data, outs[1]->data, ref[1]->nbytes));
    kl_tensor_free(ref[0]); kl_tensor_free(ref[1]); kl_tensor_free(outs[1]);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_graph_free(g);
    for (int i = 0; i < 6; i++) kl_tensor_free(ins[i]);
}

KL_TEST(graph_autodiff_errors) {
    kl_err e;
    kl_graph *g = new_graph();
    g_input(g, "x");
    g_node(g, "", "Cos", "x", "c");
    g_node(g, "", "ReduceSum", "c", "loss");
    g_output(g, "loss");
    int w = kl_graph_find_value(g, "x"), gr;
    int rc = kl_graph_autodiff(g, g->outputs[0], &w, 1, &gr, &e);
    KT_EQ_INT(rc, KL_EUNSUPPORTED);
    KT_CONTAINS(e.msg, "'Cos'");
    KT_CONTAINS(e.msg, "no gradient rule for operator Cos");
    KT_EQ_INT(gr, -1);
    kl_graph_free(g);
    /* labels of the wrong length: the planner names the loss node */
    kl_tensor *ins[8];
    mlp_inputs(KL_F64, 4, 3, 5, 2, 0, ins);
    kl_tensor_free(ins[5]);
    ins[5] = labels(3, 2);
    g = mlp_graph(0, 0);
    w = kl_graph_find_value(g, "W1");
    KT_OK(kl_graph_autodiff(g, g->outputs[0], &w, 1, &gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    kl_plan *p = NULL;
    rc = kl_plan_new(g, (const kl_tensor *const *)ins, 6, &p, &e);
    KT_EQ_INT(rc, KL_ESHAPE);
    KT_CONTAINS(e.msg, "CrossEntropyLoss");
    KT_CONTAINS(e.msg, "3 labels for a batch of 4");
    kl_graph_free(g);
    for (int i = 0; i < 6; i++) kl_tensor_free(ins[i]);
    /* a label out of range: a run-time error naming the node and row */
    mlp_inputs(KL_F64, 4, 3, 5, 2, 0, ins);
    ((int64_t *)ins[5]->data)[2] = 7;
    g = mlp_graph(0, 0);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_plan_new(g, (const kl_tensor *const *)ins, 6, &p, &e), &e);
    void *arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    kl_tensor *o[1] = {0};
    rc = kl_plan_run(p, g, (const kl_tensor *const *)ins, 6, o, 1, arena, NULL, &e);
    KT_EQ_INT(rc, KL_ERANGE);
    KT_CONTAINS(e.msg, "label 7 at row 2 outside [0, 2)");
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_graph_free(g);
    for (int i = 0; i < 6; i++) kl_tensor_free(ins[i]);
}

/* ---------------------------------------------------------------- CNN ops */

/* conv(pad 1)-bn(train)-relu-maxpool-flatten-gemm-CE */
KL_TEST(graph_autodiff_cnn_conv_bn_pool_ce) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "W1"); g_input(g, "b1"); g_input(g, "gs"); g_input(g, "gb"); g_input(g, "rm"); g_input(g, "rv");
    g_input(g, "Wf"); g_input(g, "bf"); g_input(g, "y");
    int64_t p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2}, s2[2] = {2, 2};
    int k = g_node(g, "", "Conv", "x,W1,b1", "c1");
    a_ints(g, k, "pads", 4, p1);
    k = g_node(g, "", "BatchNormalization", "c1,gs,gb,rm,rv", "bn,rm_out,rv_out");
    a_int(g, k, "training_mode", 1); a_float(g, k, "momentum", 0.9f);
    g_node(g, "", "Relu", "bn", "r");
    k = g_node(g, "", "MaxPool", "r", "mp");
    a_ints(g, k, "kernel_shape", 2, k2); a_ints(g, k, "strides", 2, s2);
    g_node(g, "", "Flatten", "mp", "f");
    k = g_node(g, "", "Gemm", "f,Wf,bf", "z");
    a_int(g, k, "transB", 1);
    g_node(g, "ai.keel.train", "CrossEntropyLoss", "z,y", "loss");
    g_output(g, "loss"); g_output(g, "rm_out"); g_output(g, "rv_out");
    kl_tensor *ins[10];
    int64_t dx[4] = {3, 2, 6, 6}, dw[4] = {4, 2, 3, 3}, dc[1] = {4}, dwf[2] = {3, 36}, dbf[1] = {3};
    ins[0] = rnd(KL_F64, 4, dx, 1, 0); ins[1] = rnd(KL_F64, 4, dw, 0.5, 0); ins[2] = rnd(KL_F64, 1, dc, 0.2, 0);
    ins[3] = rnd(KL_F64, 1, dc, 0.3, 1); ins[4] = rnd(KL_F64, 1, dc, 0.3, 0); ins[5] = rnd(KL_F64, 1, dc, 0.1, 0);
    ins[6] = rnd(KL_F64, 1, dc, 0.1, 1); ins[7] = rnd(KL_F64, 2, dwf, 0.3, 0); ins[8] = rnd(KL_F64, 1, dbf, 0.1, 0);
    ins[9] = labels(3, 3);
    gradcheck("cnn", g, ins, 10, "x,W1,b1,gs,gb,Wf,bf", 1e-6);
}

/* grouped/strided/dilated conv with asymmetric pads, average pools, sigmoid,
 * global average pool, softmax, MSE */
static void conv_variants(int cip) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "W"); g_input(g, "b"); g_input(g, "t");
    int64_t pads[4] = {1, 0, 2, 1}, st[2] = {2, 1}, dl[2] = {1, 2}, k3[2] = {3, 3}, s2[2] = {2, 2}, pp[4] = {1, 1, 1, 1};
    int k = g_node(g, "", "Conv", "x,W,b", "c");
    a_ints(g, k, "pads", 4, pads); a_ints(g, k, "strides", 2, st); a_ints(g, k, "dilations", 2, dl); a_int(g, k, "group", 2);
    k = g_node(g, "", "AveragePool", "c", "ap");
    a_ints(g, k, "kernel_shape", 2, k3); a_ints(g, k, "strides", 2, s2); a_ints(g, k, "pads", 4, pp); a_int(g, k, "count_include_pad", cip);
    g_node(g, "", "Sigmoid", "ap", "sg");
    g_node(g, "", "GlobalAveragePool", "sg", "gp");
    k = g_node(g, "", "Flatten", "gp", "f");
    k = g_node(g, "", "Softmax", "f", "sm");
    a_int(g, k, "axis", -1);
    g_node(g, "ai.keel.train", "MSELoss", "sm,t", "loss");
    g_output(g, "loss");
    kl_tensor *ins[4];
    int64_t dx[4] = {2, 4, 9, 8}, dw[4] = {6, 2, 3, 2}, db[1] = {6}, dt[2] = {2, 6};
    ins[0] = rnd(KL_F64, 4, dx, 1, 0); ins[1] = rnd(KL_F64, 4, dw, 1, 0); ins[2] = rnd(KL_F64, 1, db, 0.5, 0); ins[3] = rnd(KL_F64, 2, dt, 0.2, 0.2);
    gradcheck(cip ? "conv_variants_cip" : "conv_variants", g, ins, 4, "x,W,b,t", 1e-6);
}
KL_TEST(graph_autodiff_conv_groups_stride_dilation_avgpool) { conv_variants(0); }
KL_TEST(graph_autodiff_avgpool_count_include_pad) { conv_variants(1); }

/* embedding (Gather) - LayerNorm - GELU as the trainer emits it (Div, Erf, Add,
 * Mul, Mul with constants) - Tanh - MatMul - BCEWithLogits */
KL_TEST(graph_autodiff_embedding_layernorm_gelu_bce) {
    kl_graph *g = new_graph();
    g_input(g, "idx"); g_input(g, "E"); g_input(g, "ls"); g_input(g, "lb"); g_input(g, "W"); g_input(g, "t");
    double c2 = sqrt(2.0), c1 = 1.0, ch = 0.5;
    const char *cn[3] = {"gelu_sqrt2", "gelu_one", "gelu_half"};
    double cv[3] = {c2, c1, ch};
    for (int i = 0; i < 3; i++) {
        int v = kl_graph_value(g, cn[i]);
        kl_err e;
        kl_tensor_new(KL_F64, 0, NULL, KL_TAG_PARAMS, &g->values[v].init, &e);
        ((double *)g->values[v].init->data)[0] = cv[i];
    }
    g_node(g, "", "Gather", "E,idx", "emb");                 /* (B, T, D) */
    int k = g_node(g, "", "LayerNormalization", "emb,ls,lb", "ln");
    a_int(g, k, "axis", -1);
    g_node(g, "", "Div", "ln,gelu_sqrt2", "g1");
    g_node(g, "", "Erf", "g1", "g2");
    g_node(g, "", "Add", "g2,gelu_one", "g3");
    g_node(g, "", "Mul", "ln,g3", "g4");
    g_node(g, "", "Mul", "g4,gelu_half", "gl");
    g_node(g, "", "Tanh", "gl", "th");
    g_node(g, "", "MatMul", "th,W", "z");                   /* (B, T, 1) */
    g_node(g, "ai.keel.train", "BCEWithLogitsLoss", "z,t", "loss");
    g_output(g, "loss");
    kl_tensor *ins[6];
    int64_t di[2] = {2, 3}, de[2] = {5, 4}, dd[1] = {4}, dw[2] = {4, 1}, dt[3] = {2, 3, 1};
    kl_err e;
    kl_tensor_new(KL_I64, 2, di, KL_TAG_OTHER, &ins[0], &e);
    int64_t iv[6] = {0, 3, 4, 3, 1, 0};
    memcpy(ins[0]->data, iv, sizeof iv);
    ins[1] = rnd(KL_F64, 2, de, 1, 0); ins[2] = rnd(KL_F64, 1, dd, 0.3, 1); ins[3] = rnd(KL_F64, 1, dd, 0.3, 0);
    ins[4] = rnd(KL_F64, 2, dw, 1, 0); ins[5] = rnd(KL_F64, 3, dt, 0.5, 0.5);
    gradcheck("emb_ln_gelu", g, ins, 6, "E,ls,lb,W,t", 1e-6);
}

/* ---------------------------------------------------------------- shape ops, softmax, dropout, cast */

/* Transpose - Unsqueeze - Squeeze - Identity - LogSoftmax - Softmax - ReduceMean(axes) - Sub - ReduceSum */
KL_TEST(graph_autodiff_shape_ops_softmax_reduce) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "w"); g_input(g, "b");
    int64_t perm[3] = {2, 0, 1}, ax0[1] = {0}, ax1[1] = {1};
    int k = g_node(g, "", "Transpose", "x", "t");
    a_ints(g, k, "perm", 3, perm);
    kl_err e;
    int av = kl_graph_value(g, "ax0");
    int64_t one = 1;
    kl_tensor_new(KL_I64, 1, &one, KL_TAG_PARAMS, &g->values[av].init, &e);
    ((int64_t *)g->values[av].init->data)[0] = 0;
    g_node(g, "", "Unsqueeze", "t,ax0", "u");
    g_node(g, "", "Squeeze", "u,ax0", "s");
    g_node(g, "", "Identity", "s", "i");
    k = g_node(g, "", "LogSoftmax", "i", "ls");
    a_int(g, k, "axis", 1);
    k = g_node(g, "", "Softmax", "ls", "sm");
    a_int(g, k, "axis", -1);
    g_node(g, "", "Mul", "sm,w", "mw");
    k = g_node(g, "", "ReduceMean", "mw", "rm");
    a_ints(g, k, "axes", 1, ax1); a_int(g, k, "keepdims", 0);
    g_node(g, "", "Sub", "rm,b", "d");          /* (4,3) - (2,1,3) broadcast */
    g_node(g, "", "Mul", "d,d", "d2");
    k = g_node(g, "", "ReduceSum", "d2", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    (void)ax0;
    kl_tensor *ins[3];
    int64_t dx[3] = {2, 3, 4}, dw[3] = {4, 2, 3}, db[3] = {2, 1, 3};
    ins[0] = rnd(KL_F64, 3, dx, 1, 0); ins[1] = rnd(KL_F64, 3, dw, 1, 0); ins[2] = rnd(KL_F64, 3, db, 1, 0);
    gradcheck("shape_softmax", g, ins, 3, "x,w,b", 1e-6);
}

static kl_graph *dropout_graph(float ratio) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "seed"); g_input(g, "w");
    int k = g_node(g, "ai.keel.train", "Dropout", "x,seed", "dr");
    a_float(g, k, "ratio", ratio);
    g_node(g, "", "Mul", "dr,w", "m");
    g_node(g, "", "Tanh", "m", "th");
    k = g_node(g, "", "ReduceSum", "th", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    return g;
}
static kl_tensor *seed_tensor(int64_t s) {
    kl_tensor *t;
    kl_err e;
    kl_tensor_new(KL_I64, 0, NULL, KL_TAG_OTHER, &t, &e);
    ((int64_t *)t->data)[0] = s;
    return t;
}

KL_TEST(graph_autodiff_dropout) {
    kl_tensor *ins[3];
    int64_t d[2] = {6, 5};
    ins[0] = rnd(KL_F64, 2, d, 1, 0); ins[1] = seed_tensor(1234); ins[2] = rnd(KL_F64, 2, d, 1, 0);
    gradcheck("dropout", dropout_graph(0.3f), ins, 3, "x,w", 1e-6);
    /* mask statistics, scaling, and bit-identity at 1 and 2 threads (f32, big) */
    kl_err e;
    int64_t big[2] = {512, 384};
    kl_tensor *in2[3] = {rnd(KL_F32, 2, big, 1, 2), seed_tensor(99), rnd(KL_F32, 2, big, 0, 1)}, *o1[4] = {0}, *o2[4] = {0};
    kl_graph *g = dropout_graph(0.25f);
    int w = kl_graph_find_value(g, "x"), gr;
    KT_OK(kl_graph_autodiff(g, g->outputs[0], &w, 1, &gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    kl_pool *p1, *p2;
    KT_OK(kl_pool_new(1, &p1, &e), &e);
    KT_OK(kl_pool_new(2, &p2, &e), &e);
    KT_OK(run_f32(g, in2, 3, p1, o1, &e), &e);
    KT_OK(run_f32(g, in2, 3, p2, o2, &e), &e);
    KT_CHECK(!memcmp(o1[1]->data, o2[1]->data, o1[1]->nbytes));
    int64_t n = kl_tensor_numel(in2[0]), kept = 0;
    const float *gx = o1[1]->data, *xv = in2[0]->data;
    for (int64_t i = 0; i < n; i++) {
        /* d/dx tanh(x * mask / 0.75) = mask / 0.75 * (1 - tanh^2) */
        if (gx[i] != 0) kept++;
        double t = tanh(xv[i] / 0.75);
        KT_CHECKF(gx[i] == 0 || fabs(gx[i] - (1 - t * t) / 0.75) < 1e-5, "element %lld", (long long)i);
    }
    KT_CHECKF(fabs((double)kept / (double)n - 0.75) < 0.01, "kept fraction %g", (double)kept / (double)n);
    /* another seed gives another mask */
    kl_tensor_free(in2[1]);
    in2[1] = seed_tensor(100);
    kl_tensor *o3[4] = {0};
    KT_OK(run_f32(g, in2, 3, p2, o3, &e), &e);
    KT_CHECK(memcmp(o1[1]->data, o3[1]->data, o1[1]->nbytes) != 0);
    for (int i = 0; i < 4; i++) { kl_tensor_free(o1[i]); kl_tensor_free(o2[i]); kl_tensor_free(o3[i]); }
    for (int i = 0; i < 3; i++) kl_tensor_free(in2[i]);
    kl_pool_free(p1);
    kl_pool_free(p2);
    kl_graph_free(g);
}

/* f32 -> Cast(f16) -> Relu -> Cast(f32) -> Mul w -> ReduceSum: the gradient
 * is cast back through f16 (w holds f16-exact values). */
KL_TEST(graph_autodiff_cast_f16) {
    kl_err e;
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "w");
    int k = g_node(g, "", "Cast", "x", "h");
    a_int(g, k, "to", 10); /* FLOAT16 */
    g_node(g, "", "Relu", "h", "r");
    k = g_node(g, "", "Cast", "r", "f");
    a_int(g, k, "to", 1);
    g_node(g, "", "Mul", "f,w", "m");
    k = g_node(g, "", "ReduceSum", "m", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    int64_t d[1] = {64};
    kl_tensor *ins[2] = {rnd(KL_F32, 1, d, 1, 0), rnd(KL_F32, 1, d, 1, 0)}, *o[3] = {0};
    for (int i = 0; i < 64; i++) ((float *)ins[1]->data)[i] = (float)((i % 9) - 4) * 0.25f;
    int w = kl_graph_find_value(g, "x"), gr;
    KT_OK(kl_graph_autodiff(g, g->outputs[0], &w, 1, &gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(run_f32(g, ins, 2, NULL, o, &e), &e);
    KT_EQ_INT(o[1]->dtype, KL_F32);
    for (int i = 0; i < 64; i++) {
        float x = ((float *)ins[0]->data)[i], want = kl_f16_to_f32(kl_f32_to_f16(x)) > 0 ? ((float *)ins[1]->data)[i] : 0.f;
        KT_CHECKF(((float *)o[1]->data)[i] == want, "element %d: %g, expected %g", i, ((float *)o[1]->data)[i], want);
    }
    for (int i = 0; i < 3; i++) kl_tensor_free(o[i]);
    kl_tensor_free(ins[0]); kl_tensor_free(ins[1]);
    kl_graph_free(g);
}

/* ---------------------------------------------------------------- f32 CNN: fast paths vs f64, threads */

/* conv(pad 1) - relu - maxpool 2x2 - conv(stride 2, groups 2) - bn(train) - relu - GAP - flatten - gemm - CE */
static kl_graph *cnn32_graph(void) {
    kl_graph *g = new_graph();
    const char *in[] = {"x", "W1", "b1", "W2", "b2", "gs", "gb", "rm", "rv", "Wf", "bf", "y"};
    for (int i = 0; i < 12; i++) g_input(g, in[i]);
    int64_t p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
    int k = g_node(g, "", "Conv", "x,W1,b1", "c1");
    a_ints(g, k, "pads", 4, p1);
    g_node(g, "", "Relu", "c1", "r1");
    k = g_node(g, "", "MaxPool", "r1", "p1");
    a_ints(g, k, "kernel_shape", 2, k2); a_ints(g, k, "strides", 2, k2);
    k = g_node(g, "", "Conv", "p1,W2,b2", "c2");
    a_ints(g, k, "pads", 4, p1); a_ints(g, k, "strides", 2, k2); a_int(g, k, "group", 2);
    k = g_node(g, "", "BatchNormalization", "c2,gs,gb,rm,rv", "bn");
    a_int(g, k, "training_mode", 1);
    g_node(g, "", "Relu", "bn", "r2");
    g_node(g, "", "GlobalAveragePool", "r2", "gp");
    g_node(g, "", "Flatten", "gp", "f");
    k = g_node(g, "", "Gemm", "f,Wf,bf", "z");
    a_int(g, k, "transB", 1);
    g_node(g, "ai.keel.train", "CrossEntropyLoss", "z,y", "loss");
    g_output(g, "loss");
    return g;
}
static void cnn32_inputs(kl_dtype dt, kl_tensor **ins) {
    int64_t dx[4] = {11, 4, 12, 12}, w1[4] = {8, 4, 3, 3}, c8[1] = {8}, w2[4] = {6, 4, 3, 3}, c6[1] = {6}, wf[2] = {5, 6}, c5[1] = {5};
    ins[0] = rnd(dt, 4, dx, 1, 0); ins[1] = rnd(dt, 4, w1, 0.4, 0); ins[2] = rnd(dt, 1, c8, 0.1, 0); ins[3] = rnd(dt, 4, w2, 0.4, 0);
    ins[4] = rnd(dt, 1, c6, 0.1, 0); ins[5] = rnd(dt, 1, c6, 0.2, 1); ins[6] = rnd(dt, 1, c6, 0.2, 0); ins[7] = rnd(dt, 1, c6, 0, 0);
    ins[8] = rnd(dt, 1, c6, 0, 1); ins[9] = rnd(dt, 2, wf, 0.5, 0); ins[10] = rnd(dt, 1, c5, 0.1, 0); ins[11] = labels(11, 5);
}

KL_TEST(graph_autodiff_cnn_f32_fast_paths) {
    kl_err e;
    kl_tensor *i32[12], *i64[12], *o1[16] = {0}, *o2[16] = {0}, *o64[16] = {0};
    uint64_t seed = rng_state;
    cnn32_inputs(KL_F32, i32);
    rng_state = seed;
    cnn32_inputs(KL_F64, i64);
    const char *names[] = {"x", "W1", "b1", "W2", "b2", "gs", "gb", "Wf", "bf"};
    kl_graph *g = cnn32_graph(), *g64 = cnn32_graph();
    int w[9], w64[9], gr[9];
    for (int i = 0; i < 9; i++) { w[i] = kl_graph_find_value(g, names[i]); w64[i] = kl_graph_find_value(g64, names[i]); }
    KT_OK(kl_graph_autodiff(g, g->outputs[0], w, 9, gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_autodiff(g64, g64->outputs[0], w64, 9, gr, &e), &e);
    KT_OK(kl_graph_finalize(g64, &e), &e);
    kl_pool *p1, *p2;
    KT_OK(kl_pool_new(1, &p1, &e), &e);
    KT_OK(kl_pool_new(2, &p2, &e), &e);
    KT_OK(run_f32(g, i32, 12, p1, o1, &e), &e);
    KT_OK(run_f32(g, i32, 12, p2, o2, &e), &e);
    KT_OK(run_f32(g64, i64, 12, p2, o64, &e), &e);
    for (int i = 0; i < g->n_outputs; i++) {
        KT_CHECKF(!memcmp(o1[i]->data, o2[i]->data, o1[i]->nbytes), "output %d differs between 1 and 2 threads", i);
        int64_t n = kl_tensor_numel(o1[i]);
        double mx = 0, err = 0;
        for (int64_t j = 0; j < n; j++) {
            double a = ((float *)o1[i]->data)[j], b = ((double *)o64[i]->data)[j];
            if (fabs(b) > mx) mx = fabs(b);
            if (fabs(a - b) > err) err = fabs(a - b);
        }
        KT_CHECKF(err <= 2e-4 * (mx > 0.01 ? mx : 0.01), "output %d (%s): f32 vs f64 max error %g (scale %g)", i,
                  g->values[g->outputs[i]].name, err, mx);
    }
    for (int i = 0; i < 16; i++) { kl_tensor_free(o1[i]); kl_tensor_free(o2[i]); kl_tensor_free(o64[i]); }
    for (int i = 0; i < 12; i++) { kl_tensor_free(i32[i]); kl_tensor_free(i64[i]); }
    kl_pool_free(p1);
    kl_pool_free(p2);
    kl_graph_free(g);
    kl_graph_free(g64);
}

KL_TEST(graph_autodiff_cnn32_graph_fd) {
    kl_tensor *ins[12];
    cnn32_inputs(KL_F64, ins);
    gradcheck("cnn32", cnn32_graph(), ins, 12, "x,W1,b1,W2,b2,gs,gb,Wf,bf", 1e-6);
}

/* kl_graph_autodiff_seed: d(loss) from a graph input (loss scaling) */
KL_TEST(graph_autodiff_seed_loss_scale) {
    kl_err e;
    kl_tensor *ins[8], *o1[8] = {0}, *o2[8] = {0};
    mlp_inputs(KL_F32, 8, 6, 5, 3, 0, ins);
    kl_graph *g = mlp_graph(0, 0), *g2 = mlp_graph(0, 0);
    int sv = g_input(g2, "scale");
    ins[6] = seed_tensor(0);
    kl_tensor_free(ins[6]);
    KT_OK(kl_tensor_new(KL_F32, 0, NULL, KL_TAG_OTHER, &ins[6], &e), &e);
    ((float *)ins[6]->data)[0] = 1024.f;
    int w[2] = {kl_graph_find_value(g, "W1"), kl_graph_find_value(g, "b2")}, w2[2] = {kl_graph_find_value(g2, "W1"), kl_graph_find_value(g2, "b2")}, gr[2];
    KT_OK(kl_graph_autodiff(g, g->outputs[0], w, 2, gr, &e), &e);
    KT_OK(kl_graph_autodiff_seed(g2, g2->outputs[0], sv, w2, 2, gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_finalize(g2, &e), &e);
    KT_OK(run_f32(g, ins, 6, NULL, o1, &e), &e);
    KT_OK(run_f32(g2, ins, 7, NULL, o2, &e), &e);
    for (int i = 1; i < 3; i++)
        for (int64_t j = 0; j < kl_tensor_numel(o1[i]); j++)
            KT_CHECK(((float *)o2[i]->data)[j] == 1024.f * ((float *)o1[i]->data)[j]);
    for (int i = 0; i < 8; i++) { kl_tensor_free(o1[i]); kl_tensor_free(o2[i]); }
    for (int i = 0; i < 7; i++) kl_tensor_free(ins[i]);
    kl_graph_free(g);
    kl_graph_free(g2);
}

/* 2x2 max-pool backward (the SIMD path: 17 windows per row, odd sizes) after
 * a ReLU (ties between zeros): f32 equals f64 exactly, and f64 against
 * finite differences. */
static kl_graph *pool2_graph(void) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "w");
    int64_t k2[2] = {2, 2};
    g_node(g, "", "Relu", "x", "r");
    int k = g_node(g, "", "MaxPool", "r", "p");
    a_ints(g, k, "kernel_shape", 2, k2); a_ints(g, k, "strides", 2, k2);
    g_node(g, "", "Mul", "p,w", "m");
    k = g_node(g, "", "ReduceSum", "m", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    return g;
}
KL_TEST(graph_autodiff_maxpool2_simd_ties) {
    kl_err e;
    int64_t dx[4] = {2, 3, 9, 35}, dw[4] = {2, 3, 4, 17};
    uint64_t seed = rng_state;
    kl_tensor *i32[2] = {rnd(KL_F32, 4, dx, 1, 0), rnd(KL_F32, 4, dw, 1, 0)};
    rng_state = seed;
    kl_tensor *i64[2] = {rnd(KL_F64, 4, dx, 1, 0), rnd(KL_F64, 4, dw, 1, 0)};
    /* exact f32 values in both */
    for (int t = 0; t < 2; t++)
        for (int64_t i = 0; i < kl_tensor_numel(i64[t]); i++) ((double *)i64[t]->data)[i] = ((float *)i32[t]->data)[i];
    kl_graph *g = pool2_graph(), *g64 = pool2_graph();
    int w = kl_graph_find_value(g, "x"), w64 = kl_graph_find_value(g64, "x"), gr;
    KT_OK(kl_graph_autodiff(g, g->outputs[0], &w, 1, &gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_autodiff(g64, g64->outputs[0], &w64, 1, &gr, &e), &e);
    KT_OK(kl_graph_finalize(g64, &e), &e);
    kl_tensor *o[4] = {0}, *o64[4] = {0};
    KT_OK(run_f32(g, i32, 2, NULL, o, &e), &e);
    KT_OK(run_f32(g64, i64, 2, NULL, o64, &e), &e);
    int64_t n = kl_tensor_numel(o[1]), nz = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = ((float *)o[1]->data)[i];
        KT_CHECKF(a == (float)((double *)o64[1]->data)[i], "element %lld: %g vs %g", (long long)i, a, ((double *)o64[1]->data)[i]);
        nz += a != 0;
    }
    KT_CHECK(nz > 300 && nz <= 2 * 3 * 4 * 17); /* at most one cell per window (windows of zeros: ReLU stops it) */
    for (int i = 0; i < 4; i++) { kl_tensor_free(o[i]); kl_tensor_free(o64[i]); }
    kl_tensor_free(i32[0]); kl_tensor_free(i32[1]);
    kl_graph_free(g);
    kl_graph_free(g64);
    gradcheck("maxpool2", pool2_graph(), i64, 2, "x,w", 1e-6);
}

/* Concat (axis 1, an input used twice) */
KL_TEST(graph_autodiff_concat) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "y"); g_input(g, "w");
    int k = g_node(g, "", "Concat", "x,y,x", "c");   /* (2,3,4) + (2,5,4) + (2,3,4) -> (2,11,4) */
    a_int(g, k, "axis", 1);
    g_node(g, "", "Tanh", "c", "t");
    g_node(g, "", "Mul", "t,w", "m");
    k = g_node(g, "", "ReduceSum", "m", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    kl_tensor *ins[3];
    int64_t dx[3] = {2, 3, 4}, dy[3] = {2, 5, 4}, dw[3] = {2, 11, 4};
    ins[0] = rnd(KL_F64, 3, dx, 1, 0); ins[1] = rnd(KL_F64, 3, dy, 1, 0); ins[2] = rnd(KL_F64, 3, dw, 1, 0);
    gradcheck("concat", g, ins, 3, "x,y,w", 1e-6);
}

/* rank-3 linear as the trainer emits it (Transpose(W) -> MatMul -> Add bias)
 * in float32 (packed forward MatMul and gradient GEMMs) vs float64, and 1 vs
 * 2 threads bit-identical */
static kl_graph *lin3_graph(void) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "W"); g_input(g, "b"); g_input(g, "W2");
    int64_t perm[2] = {1, 0};
    int k = g_node(g, "", "Transpose", "W", "Wt");
    a_ints(g, k, "perm", 2, perm);
    g_node(g, "", "MatMul", "x,Wt", "mm");
    g_node(g, "", "Add", "mm,b", "h");
    g_node(g, "", "Tanh", "h", "t");
    g_node(g, "", "MatMul", "t,W2", "z");
    k = g_node(g, "", "ReduceMean", "z", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    return g;
}
KL_TEST(graph_autodiff_linear_rank3_f32) {
    kl_err e;
    int64_t dx[3] = {4, 9, 40}, dw[2] = {48, 40}, db[1] = {48}, dw2[2] = {48, 24};
    uint64_t seed = rng_state;
    kl_tensor *i32[4] = {rnd(KL_F32, 3, dx, 1, 0), rnd(KL_F32, 2, dw, 0.2, 0), rnd(KL_F32, 1, db, 0.1, 0), rnd(KL_F32, 2, dw2, 0.2, 0)};
    rng_state = seed;
    kl_tensor *i64[4] = {rnd(KL_F64, 3, dx, 1, 0), rnd(KL_F64, 2, dw, 0.2, 0), rnd(KL_F64, 1, db, 0.1, 0), rnd(KL_F64, 2, dw2, 0.2, 0)};
    kl_graph *g = lin3_graph(), *g64 = lin3_graph();
    const char *names[] = {"x", "W", "b", "W2"};
    int w[4], w64[4], gr[4];
    for (int i = 0; i < 4; i++) { w[i] = kl_graph_find_value(g, names[i]); w64[i] = kl_graph_find_value(g64, names[i]); }
    KT_OK(kl_graph_autodiff(g, g->outputs[0], w, 4, gr, &e), &e);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_autodiff(g64, g64->outputs[0], w64, 4, gr, &e), &e);
    KT_OK(kl_graph_finalize(g64, &e), &e);
    kl_pool *p1, *p2;
    KT_OK(kl_pool_new(1, &p1, &e), &e);
    KT_OK(kl_pool_new(2, &p2, &e), &e);
    kl_tensor *o1[8] = {0}, *o2[8] = {0}, *o64[8] = {0};
    KT_OK(run_f32(g, i32, 4, p1, o1, &e), &e);
    KT_OK(run_f32(g, i32, 4, p2, o2, &e), &e);
    KT_OK(run_f32(g64, i64, 4, p2, o64, &e), &e);
    for (int i = 0; i < g->n_outputs; i++) {
        KT_CHECKF(!memcmp(o1[i]->data, o2[i]->data, o1[i]->nbytes), "output %d differs between 1 and 2 threads", i);
        double mx = 0, err = 0;
        for (int64_t j = 0; j < kl_tensor_numel(o1[i]); j++) {
            double a = ((float *)o1[i]->data)[j], b = ((double *)o64[i]->data)[j];
            if (fabs(b) > mx) mx = fabs(b);
            if (fabs(a - b) > err) err = fabs(a - b);
        }
        KT_CHECKF(err <= 1e-4 * (mx > 0.01 ? mx : 0.01), "output %d: f32 vs f64 max error %g (scale %g)", i, err, mx);
    }
    for (int i = 0; i < 8; i++) { kl_tensor_free(o1[i]); kl_tensor_free(o2[i]); kl_tensor_free(o64[i]); }
    for (int i = 0; i < 4; i++) { kl_tensor_free(i32[i]); kl_tensor_free(i64[i]); }
    kl_pool_free(p1);
    kl_pool_free(p2);
    kl_graph_free(g);
    kl_graph_free(g64);
}

/* ReLU -> MaxPool 3x3/2 pad 1 (generic path, fused with the ReLU gradient) */
KL_TEST(graph_autodiff_relu_maxpool3_fused) {
    kl_graph *g = new_graph();
    g_input(g, "x"); g_input(g, "w");
    int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
    g_node(g, "", "Relu", "x", "r");
    int k = g_node(g, "", "MaxPool", "r", "p");
    a_ints(g, k, "kernel_shape", 2, k3); a_ints(g, k, "strides", 2, s2); a_ints(g, k, "pads", 4, p1);
    g_node(g, "", "Mul", "p,w", "m");
    k = g_node(g, "", "ReduceSum", "m", "loss");
    a_int(g, k, "keepdims", 0);
    g_output(g, "loss");
    kl_tensor *ins[2];
    int64_t dx[4] = {2, 3, 7, 8}, dw[4] = {2, 3, 4, 4};
    ins[0] = rnd(KL_F64, 4, dx, 1, 0); ins[1] = rnd(KL_F64, 4, dw, 1, 0);
    gradcheck("relu_maxpool3", g, ins, 2, "x,w", 1e-6);
}
