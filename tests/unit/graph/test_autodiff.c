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
    if (domain && *domain) { free(g->nodes[k].domain); g->nodes[k].domain = strdup(domain); g->nodes[k].opset = 1; }
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
