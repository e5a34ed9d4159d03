/* Tests of the NCHWc pass (src/graph/nchwc.c) and the keel::Nchwc* ops on a
 * small built CNN: a 3-channel stem conv (plain_input) -> Relu -> MaxPool ->
 * conv -> conv + residual -> Relu (also a graph output) -> a plain consumer
 * (Sigmoid) feeding a conv through ReorderInput -> blocked Add -> 1x1 conv
 * -> Clip(0, 6) -> AveragePool -> GlobalAveragePool -> Flatten -> Gemm.
 * The optimised graph must hold the blocked ops, and its outputs must match
 * the same graph optimised with KEEL_NO_NCHWC=1 within 1e-4 relative to the
 * output's largest magnitude (the blocked kernels sum the input channels in
 * another order than im2col + GEMM: float rounding only, ~1e-6 per layer),
 * at two batch sizes of one graph (symbolic batch), and be bit-identical at
 * 1 and 2 threads (and a 7x7/2 stem whose MaxPool the pass fuses into it).
 * Without AVX-512F (or KEEL_NO_AVX512=1) the pass must
 * leave the graph alone. */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void add_init(kl_graph *g, const char *name, int rank, const int64_t *dims, float scale, float shift) {
    kl_tensor *t;
    kl_tensor_new(KL_F32, rank, dims, KL_TAG_PARAMS, &t, NULL);
    for (int64_t i = 0; i < kl_tensor_numel(t); i++) ((float *)t->data)[i] = frand() * scale + shift;
    int v = kl_graph_value(g, name);
    g->values[v].init = t;
    g->values[v].dtype = KL_F32;
    g->values[v].rank = rank;
    memcpy(g->values[v].dims, dims, sizeof(int64_t) * (size_t)rank);
}

static int node(kl_graph *g, const char *op, const char *ins, const char *outs) {
    const char *iv[8], *ov[4];
    char ib[256], ob[256];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; iv[ni++] = s; }
    for (char *s = ob, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; ov[no++] = s; }
    return kl_graph_add_node(g, op, op, iv, ni, ov, no);
}
static void ints(kl_graph *g, int k, const char *name, int n, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}

static void conv(kl_graph *g, const char *x, const char *y, int64_t C, int64_t M, int64_t k, int64_t s) {
    char wn[64], bn[64], ins[256];
    snprintf(wn, sizeof wn, "%s_w", y);
    snprintf(bn, sizeof bn, "%s_b", y);
    int64_t wd[4] = {M, C, k, k};
    add_init(g, wn, 4, wd, 1.0f / sqrtf((float)(C * k * k)), 0);
    add_init(g, bn, 1, &M, 0.1f, 0);
    snprintf(ins, sizeof ins, "%s,%s,%s", x, wn, bn);
    int n = node(g, "Conv", ins, y);
    int64_t ks[2] = {k, k}, st[2] = {s, s}, pd[4] = {k / 2, k / 2, k / 2, k / 2};
    ints(g, n, "kernel_shape", 2, ks);
    ints(g, n, "strides", 2, st);
    ints(g, n, "pads", 4, pd);
}

/* Value NAME made a graph input (out 0) or output (out 1); its index. */
static int graph_io(kl_graph *g, const char *name, int out) {
    int v = kl_graph_value(g, name);
    int **list = out ? &g->outputs : &g->inputs, *n = out ? &g->n_outputs : &g->n_inputs;
    *list = realloc(*list, sizeof(int) * (size_t)(*n + 1));
    (*list)[(*n)++] = v;
    if (out) g->values[v].is_output = 1;
    else g->values[v].is_input = 1;
    return v;
}

/* A new opset-17 graph with input "x" F32 (batch, C, H, W), batch symbolic;
 * seed: the weights' random stream. */
static kl_graph *graph_x(uint64_t seed, int64_t C, int64_t H, int64_t W) {
    kl_graph *g;
    kl_graph_new(&g, NULL);
    g->opset = 17;
    rs = seed;
    int x = graph_io(g, "x", 0);
    g->values[x].dtype = KL_F32;
    g->values[x].rank = 4;
    int64_t xd[4] = {-1, C, H, W};
    memcpy(g->values[x].dims, xd, sizeof xd);
    g->values[x].dim_names[0] = strdup("batch");
    return g;
}

static kl_graph *build(void) {
    kl_graph *g = graph_x(0x9e3779b97f4a7c15ull, 3, 19, 21);
    conv(g, "x", "c1", 3, 24, 3, 1);
    node(g, "Relu", "c1", "r1");
    int mp = node(g, "MaxPool", "r1", "p1");
    int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
    ints(g, mp, "kernel_shape", 2, k3);
    ints(g, mp, "strides", 2, s2);
    ints(g, mp, "pads", 4, p1);
    conv(g, "p1", "c2", 24, 24, 3, 1);
    node(g, "Relu", "c2", "r2");
    conv(g, "r2", "c3", 24, 24, 3, 1);
    node(g, "Add", "c3,p1", "a3");
    node(g, "Relu", "a3", "r3");        /* also a graph output */
    node(g, "Sigmoid", "p1", "sg");     /* plain consumer of a blocked value */
    conv(g, "sg", "c5", 24, 24, 1, 1);  /* plain input, 24 channels: ReorderInput */
    node(g, "Add", "r3,c5", "a5");
    conv(g, "a5", "c4", 24, 40, 1, 1);
    int64_t one = 1;
    add_init(g, "lo", 0, &one, 0, 0);
    add_init(g, "hi", 0, &one, 0, 6);
    node(g, "Clip", "c4,lo,hi", "k4");
    int ap = node(g, "AveragePool", "k4", "ap");
    ints(g, ap, "kernel_shape", 2, k2);
    ints(g, ap, "strides", 2, s2);
    node(g, "GlobalAveragePool", "ap", "gp");
    node(g, "Flatten", "gp", "fl");
    int64_t wd[2] = {10, 40}, bd = 10;
    add_init(g, "fc_w", 2, wd, 0.3f, 0);
    add_init(g, "fc_b", 1, &bd, 0.1f, 0);
    int gm = node(g, "Gemm", "fl,fc_w,fc_b", "y");
    kl_gnode_attr_add(&g->nodes[gm], "transB", KL_ATTR_INT)->i = 1;
    graph_io(g, "y", 1);
    graph_io(g, "r3", 1);
    return g;
}

static int count_op(const kl_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += !g->nodes[i].dead && !strcmp(g->nodes[i].op_type, op);
    return c;
}

static int run_split(kl_graph *g, const kl_tensor *x, int mode, int threads, kl_tensor **outs, int *steps, kl_err *e);

/* runs g on x with a pool of `threads`; outs[0..1] new tensors */
static int run(kl_graph *g, const kl_tensor *x, int threads, kl_tensor **outs, kl_err *e) {
    return run_split(g, x, kl_settings_get()->plan_split, threads, outs, NULL, e);
}

static double rel_err(const kl_tensor *a, const kl_tensor *b) {
    double m = 0, d = 0;
    int64_t n = kl_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double va = ((const float *)a->data)[i], vb = ((const float *)b->data)[i];
        if (fabs(vb) > m) m = fabs(vb);
        if (fabs(va - vb) > d || va != va) d = va != va ? INFINITY : fabs(va - vb);
    }
    return m > 0 ? d / m : d;
}

/* kl_nchwc_ok() with KEEL_NO_NCHWC unset (the CPU and KEEL_NO_AVX512 decide) */
static int nchwc_possible(void) {
    int keep = kl_settings_get()->nchwc;
    kl_settings_mut()->nchwc = 1;
    int on = kl_nchwc_ok();
    kl_settings_mut()->nchwc = keep;
    return on;
}

static int optimize_mode(kl_graph *g, int blocked, kl_err *e) {
    int keep = kl_settings_get()->nchwc;
    kl_settings_mut()->nchwc = blocked;
    int rc = kl_graph_finalize(g, e);
    if (!rc) rc = kl_graph_optimize(g, 1, e);
    kl_settings_mut()->nchwc = keep;
    return rc;
}

KL_TEST(graph_nchwc_pass_cnn) {
    kl_err e = {0};
    kl_graph *gb = build(), *gp = build();
    KT_OK(optimize_mode(gb, 1, &e), &e);
    KT_OK(optimize_mode(gp, 0, &e), &e);
    int on = nchwc_possible();
    KT_EQ_INT(count_op(gp, "NchwcConv"), 0);
    if (on) {
        KT_EQ_INT(count_op(gb, "NchwcConv"), 5);
        KT_EQ_INT(count_op(gb, "Conv"), 0);
        KT_EQ_INT(count_op(gb, "NchwcMaxPool"), 1);
        KT_EQ_INT(count_op(gb, "NchwcAveragePool"), 1);
        KT_EQ_INT(count_op(gb, "NchwcGlobalAveragePool"), 1);
        KT_EQ_INT(count_op(gb, "ReorderInput"), 1);   /* in front of c5 only (c1 reads NCHW) */
        KT_EQ_INT(count_op(gb, "ReorderOutput"), 3);  /* Sigmoid, Flatten, graph output r3 */
        int plain = 0;
        for (int i = 0; i < gb->n_nodes; i++)
            if (!strcmp(gb->nodes[i].op_type, "NchwcConv")) plain += (int)kl_gnode_attr_int(&gb->nodes[i], "plain_input", 0);
        KT_EQ_INT(plain, 1);
        int r3 = kl_graph_find_value(gb, "r3");
        KT_CHECK(r3 >= 0 && gb->values[r3].is_output && gb->values[r3].producer >= 0 &&
                 !strcmp(gb->nodes[gb->values[r3].producer].op_type, "ReorderOutput"));
    } else {
        KT_EQ_INT(count_op(gb, "NchwcConv"), 0);
    }
    for (int64_t N = 1; N <= 3; N += 2) {
        int64_t xd[4] = {N, 3, 19, 21};
        kl_tensor *x;
        KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
        for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = frand();
        kl_tensor *ob1[2] = {0}, *ob2[2] = {0}, *op[2] = {0};
        KT_OK(run(gb, x, 1, ob1, &e), &e);
        KT_OK(run(gb, x, 2, ob2, &e), &e);
        KT_OK(run(gp, x, 1, op, &e), &e);
        for (int k = 0; k < 2; k++) {
            KT_CHECK(ob1[k] && op[k] && ob1[k]->rank == op[k]->rank && !memcmp(ob1[k]->dims, op[k]->dims, sizeof(int64_t) * (size_t)op[k]->rank));
            if (!ob1[k] || !op[k] || kl_tensor_numel(ob1[k]) != kl_tensor_numel(op[k])) continue;
            KT_CHECK(!memcmp(ob1[k]->data, ob2[k]->data, ob1[k]->nbytes));
            double r = rel_err(ob1[k], op[k]);
            KT_CHECKF(r <= 1e-4, "batch %lld output %d: relative error %g", (long long)N, k, r);
        }
        KT_EQ_INT((int)ob1[0]->dims[0], (int)N);
        KT_EQ_INT((int)ob1[0]->dims[1], 10);
        for (int k = 0; k < 2; k++) { kl_tensor_free(ob1[k]); kl_tensor_free(ob2[k]); kl_tensor_free(op[k]); }
        kl_tensor_free(x);
    }
    kl_graph_free(gb);
    kl_graph_free(gp);
}

/* A conv whose weight is not an initializer (training passes parameters as
 * graph inputs) stays NCHW. */
KL_TEST(graph_nchwc_pass_skips) {
    kl_err e = {0};
    kl_graph *g;
    KT_OK(kl_graph_new(&g, &e), &e);
    g->opset = 17;
    graph_io(g, "x", 0);
    graph_io(g, "w", 0);
    node(g, "Conv", "x,w", "y");        /* weight is a graph input (as in training) */
    node(g, "Relu", "y", "z");
    graph_io(g, "z", 1);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_optimize(g, 1, &e), &e);
    KT_EQ_INT(count_op(g, "NchwcConv"), 0);
    KT_EQ_INT(count_op(g, "ReorderInput"), 0);
    kl_graph_free(g);
}

/* A residual that broadcasts (a global-pooled blocked value added to a conv
 * of the same channel count): NchwcConv adds it after the conv, as Conv does. */
KL_TEST(graph_nchwc_pass_broadcast_residual) {
    kl_err e = {0};
    kl_graph *gs[2];
    for (int mode = 0; mode < 2; mode++) {
        kl_graph *g;
        KT_OK(kl_graph_new(&g, &e), &e);
        g->opset = 17;
        rs = 12345;
        graph_io(g, "x", 0);
        conv(g, "x", "ca", 16, 20, 3, 1);
        node(g, "GlobalAveragePool", "ca", "ga");
        conv(g, "x", "cb", 16, 20, 3, 1);
        node(g, "Add", "cb,ga", "s");
        node(g, "Relu", "s", "y");
        graph_io(g, "y", 1);
        KT_OK(optimize_mode(g, mode == 0, &e), &e);
        gs[mode] = g;
    }
    if (nchwc_possible()) KT_EQ_INT(count_op(gs[0], "NchwcConv"), 2);
    int64_t xd[4] = {2, 16, 9, 7};
    kl_tensor *x, *o1[2] = {0}, *o2[2] = {0}, *op[2] = {0};
    KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
    for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = frand();
    KT_OK(run(gs[0], x, 1, o1, &e), &e);
    KT_OK(run(gs[0], x, 2, o2, &e), &e);
    KT_OK(run(gs[1], x, 1, op, &e), &e);
    if (o1[0] && o2[0] && op[0]) {
        KT_EQ_INT(o1[0]->rank, 4);
        KT_CHECK(!memcmp(o1[0]->dims, op[0]->dims, sizeof(int64_t) * 4));
        KT_CHECK(!memcmp(o1[0]->data, o2[0]->data, o1[0]->nbytes));
        KT_CHECKF(rel_err(o1[0], op[0]) <= 1e-4, "relative error %g", rel_err(o1[0], op[0]));
    }
    kl_tensor_free(o1[0]); kl_tensor_free(o2[0]); kl_tensor_free(op[0]);
    kl_tensor_free(x);
    kl_graph_free(gs[0]);
    kl_graph_free(gs[1]);
}

/* auto_pad SAME_UPPER with stride 2, MaxPool with ceil_mode, a dilated conv
 * with 20 -> 18 channels (padding lanes), AveragePool counting the pads. */
KL_TEST(graph_nchwc_pass_attrs) {
    kl_err e = {0};
    kl_graph *gs[2];
    for (int mode = 0; mode < 2; mode++) {
        kl_graph *g;
        KT_OK(kl_graph_new(&g, &e), &e);
        g->opset = 17;
        rs = 777;
        graph_io(g, "x", 0);
        conv(g, "x", "c1", 16, 20, 3, 2);
        kl_gnode *c1 = &g->nodes[g->n_nodes - 1];
        for (int i = 0; i < c1->n_attrs; i++)
            if (!strcmp(c1->attrs[i].name, "pads")) c1->attrs[i].n = 0; /* pads unset: auto_pad decides */
        kl_gnode_attr_add(c1, "auto_pad", KL_ATTR_STRING)->s = strdup("SAME_UPPER");
        int mp = node(g, "MaxPool", "c1", "p1");
        int64_t k2[2] = {2, 2}, s2[2] = {2, 2}, d2[2] = {2, 2}, p2[4] = {2, 2, 2, 2}, k3[2] = {3, 3}, p1[4] = {1, 0, 1, 1};
        ints(g, mp, "kernel_shape", 2, k2);
        ints(g, mp, "strides", 2, s2);
        kl_gnode_attr_add(&g->nodes[mp], "ceil_mode", KL_ATTR_INT)->i = 1;
        int64_t wd[4] = {18, 20, 3, 3}, m18 = 18;
        add_init(g, "c2_w", 4, wd, 0.1f, 0);
        add_init(g, "c2_b", 1, &m18, 0.1f, 0);
        int c2 = node(g, "Conv", "p1,c2_w,c2_b", "c2");
        ints(g, c2, "dilations", 2, d2);
        ints(g, c2, "pads", 4, p2);
        int ap = node(g, "AveragePool", "c2", "y");
        ints(g, ap, "kernel_shape", 2, k3);
        ints(g, ap, "pads", 4, p1);
        kl_gnode_attr_add(&g->nodes[ap], "count_include_pad", KL_ATTR_INT)->i = 1;
        graph_io(g, "y", 1);
        KT_OK(optimize_mode(g, mode == 0, &e), &e);
        gs[mode] = g;
    }
    if (nchwc_possible()) {
        KT_EQ_INT(count_op(gs[0], "NchwcConv"), 2);
        KT_EQ_INT(count_op(gs[0], "NchwcMaxPool"), 1);
        KT_EQ_INT(count_op(gs[0], "NchwcAveragePool"), 1);
        KT_EQ_INT(count_op(gs[0], "ReorderInput"), 1);
    }
    int64_t xd[4] = {2, 16, 17, 12};
    kl_tensor *x, *o1[1] = {0}, *o2[1] = {0}, *op[1] = {0};
    KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
    for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = frand();
    KT_OK(run(gs[0], x, 1, o1, &e), &e);
    KT_OK(run(gs[0], x, 2, o2, &e), &e);
    KT_OK(run(gs[1], x, 1, op, &e), &e);
    if (o1[0] && o2[0] && op[0]) {
        KT_EQ_INT(o1[0]->rank, 4);
        KT_CHECK(!memcmp(o1[0]->dims, op[0]->dims, sizeof(int64_t) * 4));
        KT_EQ_INT((int)op[0]->dims[1], 18);
        KT_CHECK(!memcmp(o1[0]->data, o2[0]->data, o1[0]->nbytes));
        KT_CHECKF(rel_err(o1[0], op[0]) <= 1e-4, "relative error %g", rel_err(o1[0], op[0]));
    }
    kl_tensor_free(o1[0]); kl_tensor_free(o2[0]); kl_tensor_free(op[0]);
    kl_tensor_free(x);
    kl_graph_free(gs[0]);
    kl_graph_free(gs[1]);
}

/* A 7x7/2 stem conv (+ Relu) -> MaxPool 3x3/2 pad 1 -> conv: the pool moves
 * into the stem (_pool_* attributes, no NchwcMaxPool) unless
 * KEEL_NCHWC_POOL_FUSE=0 or the conv's output has another consumer (here a
 * second graph output); fused and separate give the same bits at batch 1
 * (the op runs conv then pool) and 3 (the fused kernel), 1 and 2 threads,
 * and match NCHW within 1e-4. */
static kl_graph *build_stem(int second_use) {
    kl_graph *g = graph_x(0x2545f4914f6cdd1dull, 3, 37, 30);
    conv(g, "x", "c1", 3, 20, 7, 2);
    node(g, "Relu", "c1", "r1");
    int mp = node(g, "MaxPool", "r1", "p1");
    int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
    ints(g, mp, "kernel_shape", 2, k3);
    ints(g, mp, "strides", 2, s2);
    ints(g, mp, "pads", 4, p1);
    conv(g, "p1", "y", 20, 24, 3, 1);
    graph_io(g, "y", 1);
    if (second_use) graph_io(g, "r1", 1);
    return g;
}

static kl_graph *stem_mode(int second_use, int blocked, const char *fuse, kl_err *e) {
    kl_graph *g = build_stem(second_use);
    int keep = kl_settings_get()->nchwc_pool_fuse;
    kl_settings_mut()->nchwc_pool_fuse = !(fuse && !strcmp(fuse, "0")); /* as KEEL_NCHWC_POOL_FUSE=fuse */
    int rc = optimize_mode(g, blocked, e);
    kl_settings_mut()->nchwc_pool_fuse = keep;
    if (rc) { kl_graph_free(g); return NULL; }
    return g;
}

KL_TEST(graph_nchwc_pass_stem_pool) {
    kl_err e = {0};
    kl_graph *gf = stem_mode(0, 1, NULL, &e), *gs = stem_mode(0, 1, "0", &e), *gp = stem_mode(0, 0, NULL, &e);
    kl_graph *g2 = stem_mode(1, 1, NULL, &e);
    KT_CHECK(gf && gs && gp && g2);
    if (!gf || !gs || !gp || !g2) return;
    if (nchwc_possible()) {
        KT_EQ_INT(count_op(gf, "NchwcMaxPool"), 0);
        KT_EQ_INT(count_op(gf, "MaxPool"), 0);
        int fused = 0;
        for (int i = 0; i < gf->n_nodes; i++)
            if (!gf->nodes[i].dead && !strcmp(gf->nodes[i].op_type, "NchwcConv")) fused += kl_gnode_attr_int(&gf->nodes[i], "_pool_kh", 0) == 3;
        KT_EQ_INT(fused, 1);
        KT_EQ_INT(count_op(gs, "NchwcMaxPool"), 1);
        KT_EQ_INT(count_op(g2, "NchwcMaxPool"), 1); /* r1 is also a graph output */
    }
    for (int64_t N = 1; N <= 3; N += 2) {
        int64_t xd[4] = {N, 3, 37, 30};
        kl_tensor *x;
        KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
        for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = frand();
        kl_tensor *f1[2] = {0}, *f2[2] = {0}, *s1[2] = {0}, *p[2] = {0};
        KT_OK(run(gf, x, 1, f1, &e), &e);
        KT_OK(run(gf, x, 2, f2, &e), &e);
        KT_OK(run(gs, x, 1, s1, &e), &e);
        KT_OK(run(gp, x, 1, p, &e), &e);
        KT_CHECK(f1[0] && f2[0] && s1[0] && p[0]);
        if (f1[0] && f2[0] && s1[0] && p[0]) {
            KT_CHECK(f1[0]->nbytes == s1[0]->nbytes && !memcmp(f1[0]->data, s1[0]->data, s1[0]->nbytes));
            KT_CHECK(!memcmp(f1[0]->data, f2[0]->data, f1[0]->nbytes));
            double r = rel_err(f1[0], p[0]);
            KT_CHECKF(r <= 1e-4, "batch %lld: relative error %g vs NCHW", (long long)N, r);
            KT_EQ_INT((int)f1[0]->dims[2], 10);
            KT_EQ_INT((int)f1[0]->dims[3], 8);
        }
        kl_tensor_free(f1[0]); kl_tensor_free(f2[0]); kl_tensor_free(s1[0]); kl_tensor_free(p[0]);
        kl_tensor_free(x);
    }
    kl_graph_free(gf); kl_graph_free(gs); kl_graph_free(gp); kl_graph_free(g2);
}

/* ================================================================== *
 * Depth-first prefix (exec.c): the first batch-separable steps of a plan
 * run sample by sample; the outputs must keep the bits of the full-batch
 * run, at 1 and 2 threads.
 * ================================================================== */

/* runs g on x (split mode `mode`, kl_settings.plan_split) with `threads`; *steps
 * (when not NULL): the plan's split steps */
static int run_split(kl_graph *g, const kl_tensor *x, int mode, int threads, kl_tensor **outs, int *steps, kl_err *e) {
    kl_pool *pool = NULL;
    kl_plan *p = NULL;
    void *arena = NULL;
    int old = kl_settings_get()->plan_split;
    kl_settings_mut()->plan_split = mode;
    int rc = kl_pool_new(threads, &pool, e);
    if (!rc) rc = kl_plan_new(g, &x, 1, &p, e);
    kl_settings_mut()->plan_split = old;
    if (!rc && steps) *steps = kl_plan_split_steps(p);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc) rc = kl_plan_run(p, g, &x, 1, outs, (size_t)g->n_outputs, arena, pool, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_pool_free(pool);
    return rc;
}

static int same_bits(kl_tensor *const *a, kl_tensor *const *b, int n) {
    for (int k = 0; k < n; k++)
        if (!a[k] || !b[k] || a[k]->nbytes != b[k]->nbytes || a[k]->rank != b[k]->rank ||
            memcmp(a[k]->dims, b[k]->dims, sizeof(int64_t) * (size_t)a[k]->rank) || memcmp(a[k]->data, b[k]->data, a[k]->nbytes))
            return 0;
    return 1;
}

/* One graph, split off / forced (the longest separable prefix: up to the
 * Flatten) / by the cost rule, batch 3 and 1: the same bits. */
static void check_split(kl_graph *g, int64_t C, int64_t H, int64_t W, int n_out, int blocked) {
    kl_err e = {0};
    for (int64_t N = 1; N <= 3; N += 2) {
        int64_t xd[4] = {N, C, H, W};
        kl_tensor *x;
        KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
        for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = frand();
        kl_tensor *ref[2] = {0}, *f1[2] = {0}, *f2[2] = {0}, *a1[2] = {0};
        int s0 = -1, s1 = -1, s2 = -1, sa = -1;
        KT_OK(run_split(g, x, 0, 1, ref, &s0, &e), &e);
        KT_OK(run_split(g, x, 2, 1, f1, &s1, &e), &e);
        KT_OK(run_split(g, x, 2, 2, f2, &s2, &e), &e);
        KT_OK(run_split(g, x, 1, 1, a1, &sa, &e), &e);
        KT_EQ_INT(s0, 0);
        if (N == 1) KT_EQ_INT(s1, 0);              /* nothing to split at batch 1 */
        else if (blocked) KT_CHECKF(s1 >= 8, "split steps %d", s1);
        KT_EQ_INT(s1, s2);
        KT_CHECK(sa <= s1);
        KT_CHECKF(same_bits(ref, f1, n_out), "batch %lld: forced split, 1 thread", (long long)N);
        KT_CHECKF(same_bits(ref, f2, n_out), "batch %lld: forced split, 2 threads", (long long)N);
        KT_CHECKF(same_bits(ref, a1, n_out), "batch %lld: split by the cost rule", (long long)N);
        for (int k = 0; k < 2; k++) { kl_tensor_free(ref[k]); kl_tensor_free(f1[k]); kl_tensor_free(f2[k]); kl_tensor_free(a1[k]); }
        kl_tensor_free(x);
    }
}

KL_TEST(graph_split_prefix_cnn) {
    kl_err e = {0};
    kl_graph *gb = build(), *gp = build();
    KT_OK(optimize_mode(gb, 1, &e), &e);
    KT_OK(optimize_mode(gp, 0, &e), &e);
    check_split(gb, 3, 19, 21, 2, nchwc_possible());
    check_split(gp, 3, 19, 21, 2, 0); /* NCHW: Conv is not marked separable, nothing splits */
    kl_graph_free(gb);
    kl_graph_free(gp);
}

/* The stem whose MaxPool the pass fuses into the conv at batch > 1 (at
 * batch 1, one sample, the conv then the pool: the same bits). */
KL_TEST(graph_split_prefix_stem) {
    kl_err e = {0};
    kl_graph *gf = stem_mode(0, 1, NULL, &e), *g2 = stem_mode(1, 1, NULL, &e);
    KT_CHECK(gf && g2);
    if (!gf || !g2) return;
    check_split(gf, 3, 37, 30, 1, 0);
    check_split(g2, 3, 37, 30, 2, 0);
    kl_graph_free(gf);
    kl_graph_free(g2);
}

/* Elementwise ops: a constant that carries its own dimension 0 (3 rows at
 * batch 3) stops the prefix; one that broadcasts along the batch does not. */
KL_TEST(graph_split_prefix_broadcast) {
    kl_err e = {0};
    for (int bad = 0; bad < 2; bad++) {
        kl_graph *g = graph_x(777, 2, 3, 4);
        int64_t cd[4] = {bad ? 3 : 1, 2, 3, 4}, ed[3] = {2, 1, 4};
        add_init(g, "c", 4, cd, 1.0f, 0);
        add_init(g, "d", 3, ed, 1.0f, 0);
        node(g, "Relu", "x", "r");
        node(g, "Mul", "r,d", "m");
        node(g, "Add", "m,c", "a");
        node(g, "Sigmoid", "a", "s");
        node(g, "Flatten", "s", "y");
        graph_io(g, "y", 1);
        graph_io(g, "m", 1);
        KT_OK(kl_graph_finalize(g, &e), &e);
        int64_t xd[4] = {3, 2, 3, 4};
        kl_tensor *x, *ref[2] = {0}, *f1[2] = {0};
        KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
        for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = frand();
        int s0 = -1, s1 = -1;
        KT_OK(run_split(g, x, 0, 1, ref, &s0, &e), &e);
        KT_OK(run_split(g, x, 2, 2, f1, &s1, &e), &e);
        KT_EQ_INT(s1, bad ? 2 : 4);
        KT_CHECK(same_bits(ref, f1, 2));
        for (int k = 0; k < 2; k++) { kl_tensor_free(ref[k]); kl_tensor_free(f1[k]); }
        kl_tensor_free(x);
        kl_graph_free(g);
    }
}
