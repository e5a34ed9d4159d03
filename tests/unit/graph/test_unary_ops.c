/* The graph's float32 unary ops, PRelu and Pow with one exponent run the
 * tensor kernels (kl_unary_f32 / kl_prelu_f32): each op as a one-node graph
 * gives the kernel's bits with the ONNX default attributes, on sizes that
 * split over threads and odd tails. The optimiser fuses Mul(x, Sigmoid(x))
 * (either operand order) into keel::Silu with the same bits as unfused, and
 * leaves it alone when the Sigmoid's output has another consumer. */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int graph_io(kl_graph *g, const char *name, int out) {
    int v = kl_graph_value(g, name);
    int **list = out ? &g->outputs : &g->inputs, *n = out ? &g->n_outputs : &g->n_inputs;
    *list = realloc(*list, sizeof(int) * (size_t)(*n + 1));
    (*list)[(*n)++] = v;
    if (out) g->values[v].is_output = 1;
    else g->values[v].is_input = 1;
    return v;
}

static void init_f32(kl_graph *g, const char *name, int rank, const int64_t *dims, const float *data) {
    kl_tensor *t;
    kl_tensor_new(KL_F32, rank, dims, KL_TAG_PARAMS, &t, NULL);
    memcpy(t->data, data, t->nbytes);
    int v = kl_graph_value(g, name);
    g->values[v].init = t;
    g->values[v].dtype = KL_F32;
    g->values[v].rank = rank;
    memcpy(g->values[v].dims, dims, sizeof(int64_t) * (size_t)rank);
}

static int node2(kl_graph *g, const char *op, const char *a, const char *b, const char *out) {
    const char *iv[2] = {a, b}, *ov[1] = {out};
    return kl_graph_add_node(g, op, op, iv, b ? 2 : 1, ov, 1);
}

static int run(kl_graph *g, kl_tensor *x, kl_tensor **outs, kl_err *e) {
    kl_pool *pool = NULL;
    kl_plan *p = NULL;
    void *arena = NULL;
    int rc = kl_pool_new(2, &pool, e);
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)&x, 1, &p, e);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc) rc = kl_plan_run(p, g, (const kl_tensor *const *)&x, 1, outs, (size_t)g->n_outputs, arena, pool, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_pool_free(pool);
    return rc;
}

static kl_tensor *input(int64_t n, uint64_t seed) {
    kl_tensor *x;
    int64_t d[2] = {1, n};
    kl_tensor_new(KL_F32, 2, d, KL_TAG_OTHER, &x, NULL);
    float *p = x->data;
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((s >> 40) & 0xffffff) / 16777216.0f * 16.0f - 8.0f;
    }
    static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 100.0f, -100.0f};
    for (size_t k = 0; k < sizeof sp / sizeof *sp && (int64_t)k < n; k++) p[(int64_t)k * (n / 8 + 1) % n] = sp[k];
    return x;
}

static int same_bits(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(a[i] != a[i] && b[i] != b[i])) return 0;
    return 1;
}

KL_TEST(graph_unary_ops_bind_tensor_kernels) {
    struct { const char *op, *domain; kl_unary_op k; float a, b; } cs[] = {
        {"Sigmoid", "", KL_UN_SIGMOID, 0, 0}, {"Tanh", "", KL_UN_TANH, 0, 0}, {"Exp", "", KL_UN_EXP, 0, 0},
        {"Log", "", KL_UN_LOG, 0, 0}, {"Erf", "", KL_UN_ERF, 0, 0}, {"Gelu", "com.microsoft", KL_UN_GELU, 0, 0},
        {"HardSigmoid", "", KL_UN_HARDSIGMOID, 0.2f, 0.5f}, {"HardSwish", "", KL_UN_HARDSWISH, 0, 0},
        {"Softplus", "", KL_UN_SOFTPLUS, 0, 0}, {"Mish", "", KL_UN_MISH, 0, 0}, {"Elu", "", KL_UN_ELU, 1, 0},
        {"Selu", "", KL_UN_SELU, 1.67326319217681884765625f, 1.05070102214813232421875f},
        {"Celu", "", KL_UN_CELU, 1, 0}, {"LeakyRelu", "", KL_UN_LEAKY_RELU, 0.01f, 0}, {"Relu", "", KL_UN_RELU, 0, 0},
        {"Sqrt", "", KL_UN_SQRT, 0, 0}, {"Reciprocal", "", KL_UN_RECIPROCAL, 0, 0}, {"Neg", "", KL_UN_NEG, 0, 0},
        {"Abs", "", KL_UN_ABS, 0, 0}, {"Floor", "", KL_UN_FLOOR, 0, 0}, {"Ceil", "", KL_UN_CEIL, 0, 0},
        {"Round", "", KL_UN_ROUND, 0, 0}, {"Softsign", "", KL_UN_SOFTSIGN, 0, 0}, {"Sign", "", KL_UN_SIGN, 0, 0},
    };
    kl_err e = {0};
    static const int64_t sizes[] = {1, 17, 40001};
    for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
        for (size_t si = 0; si < 3; si++) {
            int64_t n = sizes[si];
            kl_graph *g;
            KT_OK(kl_graph_new(&g, NULL), &e);
            g->opset = strcmp(cs[c].op, "Mish") ? 17 : 18;
            graph_io(g, "x", 0);
            int k = node2(g, cs[c].op, "x", NULL, "y");
            if (*cs[c].domain) kl_gnode_set_domain(&g->nodes[k], cs[c].domain, 1);
            graph_io(g, "y", 1);
            KT_OK(kl_graph_finalize(g, &e), &e);
            kl_tensor *x = input(n, 3 + c), *y = NULL;
            KT_OK(run(g, x, &y, &e), &e);
            float *want = malloc(sizeof(float) * (size_t)n);
            kl_unary_f32(cs[c].k, x->data, want, n, cs[c].a, cs[c].b, NULL);
            KT_CHECKF(same_bits(y->data, want, n), "%s (n=%lld) is not the tensor kernel's result", cs[c].op,
                      (long long)n);
            free(want);
            kl_tensor_free(x);
            kl_tensor_free(y);
            kl_graph_free(g);
        }
}

/* PRelu with a per-channel slope [C, 1] over [C, S]; Pow with one exponent */
KL_TEST(graph_prelu_pow_bind_tensor_kernels) {
    kl_err e = {0};
    int64_t C = 3, S = 4099, d[2] = {C, S}, ds[2] = {C, 1}, one = 1;
    float slope[3] = {0.25f, -0.5f, 2.0f};
    static const float exps[] = {2.0f, 0.5f, -1.0f, 3.0f, 1.7f, -0.5f};
    for (int t = 0; t < 1 + (int)(sizeof exps / sizeof *exps); t++) {
        kl_graph *g;
        KT_OK(kl_graph_new(&g, NULL), &e);
        g->opset = 17;
        graph_io(g, "x", 0);
        if (t == 0) init_f32(g, "s", 2, ds, slope), node2(g, "PRelu", "x", "s", "y");
        else init_f32(g, "p", 0, &one, &exps[t - 1]), node2(g, "Pow", "x", "p", "y");
        graph_io(g, "y", 1);
        KT_OK(kl_graph_finalize(g, &e), &e);
        kl_tensor *x = input(C * S, 11 + t), *y = NULL;
        x->dims[0] = C; x->dims[1] = S; x->strides[0] = S; x->strides[1] = 1;
        KT_OK(run(g, x, &y, &e), &e);
        float *want = malloc(sizeof(float) * (size_t)(C * S));
        if (t == 0)
            for (int64_t c = 0; c < C; c++) kl_prelu_f32((float *)x->data + c * S, 1, &slope[c], 0, want + c * S, S);
        else kl_unary_f32(KL_UN_POW, x->data, want, C * S, exps[t - 1], 0, NULL);
        KT_CHECKF(same_bits(y->data, want, C * S), "%s %g is not the tensor kernel's result", t ? "Pow" : "PRelu",
                  t ? exps[t - 1] : 0);
        (void)d;
        free(want);
        kl_tensor_free(x);
        kl_tensor_free(y);
        kl_graph_free(g);
    }
}

static int count_op(const kl_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += !g->nodes[i].dead && !strcmp(g->nodes[i].op_type, op);
    return c;
}

KL_TEST(graph_silu_fusion) {
    kl_err e = {0};
    for (int form = 0; form < 3; form++) {
        /* 0: Mul(x, s), 1: Mul(s, x), 2: s also a graph output (no fusion) */
        kl_tensor *y[2][2] = {{NULL, NULL}, {NULL, NULL}};
        kl_tensor *x = input(20011, 5);
        for (int opt = 0; opt < 2; opt++) {
            kl_graph *g;
            KT_OK(kl_graph_new(&g, NULL), &e);
            g->opset = 17;
            graph_io(g, "x", 0);
            node2(g, "Sigmoid", "x", NULL, "s");
            node2(g, "Mul", form == 1 ? "s" : "x", form == 1 ? "x" : "s", "y");
            graph_io(g, "y", 1);
            if (form == 2) graph_io(g, "s", 1);
            KT_OK(kl_graph_finalize(g, &e), &e);
            if (opt) {
                KT_OK(kl_graph_optimize(g, 1, &e), &e);
                KT_EQ_INT(count_op(g, "Silu"), form == 2 ? 0 : 1);
                KT_EQ_INT(count_op(g, "Mul"), form == 2 ? 1 : 0);
            }
            KT_OK(run(g, x, y[opt], &e), &e);
            kl_graph_free(g);
        }
        KT_CHECKF(same_bits(y[0][0]->data, y[1][0]->data, 20011), "form %d: fused SiLU differs from Mul(x, Sigmoid(x))",
                  form);
        float *want = malloc(sizeof(float) * 20011);
        kl_unary_f32(KL_UN_SILU, x->data, want, 20011, 0, 0, NULL);
        KT_CHECK(same_bits(want, y[1][0]->data, 20011));
        free(want);
        for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) kl_tensor_free(y[i][j]);
        kl_tensor_free(x);
    }
}
