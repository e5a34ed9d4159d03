/* Speed of a training step (forward + autodiff backward) through the graph
 * executor, float32: (a) MLP 784-512-512-10 batch 128, (b) CNN
 * conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10 on 28x28 batch 64 (the issue 4
 * benchmark shapes), and keel's SGEMM rate on the MLP's GEMM shapes in the
 * same run (argv: threads, iterations, mlp|cnn|all). Prints median ms per step, samples/s, GFLOP/s and the ratio of
 * the MLP step's GEMM flop rate to SGEMM. Build: bench/autodiff/run.sh. */
#include "keel/graph.h"
#include "keel/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t st = 88172645463325252ull;
static float ur(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (float)((double)(st >> 11) * 0x1.0p-52 - 1.0); }

static int inp(kl_graph *g, const char *name) {
    int v = kl_graph_value(g, name);
    g->values[v].is_input = 1;
    g->inputs = realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
    g->inputs[g->n_inputs++] = v;
    return v;
}
static int nd(kl_graph *g, const char *dom, const char *op, int ni, const char **ins, const char *out) {
    const char *o[1] = {out};
    int k = kl_graph_add_node(g, op, out, ins, ni, o, 1);
    if (dom) { free(g->nodes[k].domain); g->nodes[k].domain = strdup(dom); g->nodes[k].opset = 1; }
    return k;
}
static void ai(kl_graph *g, int k, const char *n, int64_t v) { kl_gnode_attr_add(&g->nodes[k], n, KL_ATTR_INT)->i = v; }
static void ais(kl_graph *g, int k, const char *n, int c, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], n, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)c); memcpy(a->ints, v, sizeof(int64_t) * (size_t)c); a->n = c;
}
static kl_tensor *tn(int r, const int64_t *d, float sc) {
    kl_tensor *t; kl_err e;
    kl_tensor_new(KL_F32, r, d, KL_TAG_PARAMS, &t, &e);
    for (int64_t i = 0; i < kl_tensor_numel(t); i++) ((float *)t->data)[i] = ur() * sc;
    return t;
}
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static double time_graph(kl_graph *g, kl_tensor **ins, int n_in, const char **wrt, int nw, kl_pool *pool, int iters) {
    kl_err e;
    int w[16], gr[16];
    for (int i = 0; i < nw; i++) w[i] = kl_graph_find_value(g, wrt[i]);
    if (kl_graph_autodiff(g, g->outputs[0], w, nw, gr, &e) || kl_graph_finalize(g, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
    kl_plan *p;
    if (kl_plan_new(g, (const kl_tensor *const *)ins, (size_t)n_in, &p, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
    kl_tensor *outs[32] = {0};
    for (int i = 0; i < g->n_outputs; i++) {
        const kl_tensor *m = kl_plan_value(p, g->outputs[i]);
        kl_tensor_new(m->dtype, m->rank, m->dims, KL_TAG_GRADS, &outs[i], &e);
    }
    void *arena = kl_mem_alloc(kl_plan_arena_bytes(p), KL_TAG_ACTIVATIONS);
    double t[200];
    for (int it = -3; it < iters; it++) {
        int64_t t0 = kl_time_mono_ns();
        if (kl_plan_run_into(p, g, (const kl_tensor *const *)ins, (size_t)n_in, outs, (size_t)g->n_outputs, arena, pool, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
        if (it >= 0) t[it] = (kl_time_mono_ns() - t0) / 1e6;
    }
    qsort(t, (size_t)iters, sizeof(double), cmpd);
    fprintf(stderr, "  arena %.1f MB (activations %.1f MB)\n", kl_plan_arena_bytes(p) / 1e6, kl_plan_activation_bytes(p) / 1e6);
    kl_mem_free(arena);
    for (int i = 0; i < 32; i++) kl_tensor_free(outs[i]);
    kl_plan_free(p);
    return t[iters / 2];
}

static kl_graph *mlp(void) {
    kl_graph *g; kl_err e;
    kl_graph_new(&g, &e); g->opset = 17;
    const char *names[] = {"x", "W1", "b1", "W2", "b2", "W3", "b3", "y"};
    for (int i = 0; i < 8; i++) inp(g, names[i]);
    const char *a1[] = {"x", "W1", "b1"}, *a2[] = {"h1"}, *a3[] = {"r1", "W2", "b2"}, *a4[] = {"h2"}, *a5[] = {"r2", "W3", "b3"}, *a6[] = {"z", "y"};
    ai(g, nd(g, NULL, "Gemm", 3, a1, "h1"), "transB", 1);
    nd(g, NULL, "Relu", 1, a2, "r1");
    ai(g, nd(g, NULL, "Gemm", 3, a3, "h2"), "transB", 1);
    nd(g, NULL, "Relu", 1, a4, "r2");
    ai(g, nd(g, NULL, "Gemm", 3, a5, "z"), "transB", 1);
    nd(g, "ai.keel.train", "CrossEntropyLoss", 2, a6, "loss");
    int v = kl_graph_value(g, "loss");
    g->values[v].is_output = 1; g->outputs = malloc(sizeof(int)); g->outputs[0] = v; g->n_outputs = 1;
    return g;
}

static kl_graph *cnn(void) {
    kl_graph *g; kl_err e;
    kl_graph_new(&g, &e); g->opset = 17;
    const char *names[] = {"x", "C1", "c1", "C2", "c2", "F1", "f1", "F2", "f2", "y"};
    for (int i = 0; i < 10; i++) inp(g, names[i]);
    int64_t p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
    const char *a1[] = {"x", "C1", "c1"}, *r1[] = {"h1"}, *m1[] = {"q1"}, *a2[] = {"p1", "C2", "c2"}, *r2[] = {"h2"}, *m2[] = {"q2"},
               *fl[] = {"p2"}, *a3[] = {"fl", "F1", "f1"}, *r3[] = {"h3"}, *a4[] = {"q3", "F2", "f2"}, *a5[] = {"z", "y"};
    ais(g, nd(g, NULL, "Conv", 3, a1, "h1"), "pads", 4, p1);
    nd(g, NULL, "Relu", 1, r1, "q1");
    int k = nd(g, NULL, "MaxPool", 1, m1, "p1"); ais(g, k, "kernel_shape", 2, k2); ais(g, k, "strides", 2, k2);
    ais(g, nd(g, NULL, "Conv", 3, a2, "h2"), "pads", 4, p1);
    nd(g, NULL, "Relu", 1, r2, "q2");
    k = nd(g, NULL, "MaxPool", 1, m2, "p2"); ais(g, k, "kernel_shape", 2, k2); ais(g, k, "strides", 2, k2);
    nd(g, NULL, "Flatten", 1, fl, "fl");
    ai(g, nd(g, NULL, "Gemm", 3, a3, "h3"), "transB", 1);
    nd(g, NULL, "Relu", 1, r3, "q3");
    ai(g, nd(g, NULL, "Gemm", 3, a4, "z"), "transB", 1);
    nd(g, "ai.keel.train", "CrossEntropyLoss", 2, a5, "loss");
    int v = kl_graph_value(g, "loss");
    g->values[v].is_output = 1; g->outputs = malloc(sizeof(int)); g->outputs[0] = v; g->n_outputs = 1;
    return g;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, iters = argc > 2 ? atoi(argv[2]) : 30;
    const char *which = argc > 3 ? argv[3] : "all";
    if (iters > 200) iters = 200;
    kl_err e;
    kl_pool *pool;
    kl_pool_new(threads, &pool, &e);
    kl_tensor *lab;
    /* (a) MLP */
    int64_t B = 128, dx[2] = {B, 784}, w1[2] = {512, 784}, b1[1] = {512}, w2[2] = {512, 512}, w3[2] = {10, 512}, b3[1] = {10};
    kl_tensor_new(KL_I64, 1, &B, KL_TAG_OTHER, &lab, &e);
    for (int i = 0; i < B; i++) ((int64_t *)lab->data)[i] = i % 10;
    kl_tensor *mi[8] = {tn(2, dx, 1), tn(2, w1, 0.05f), tn(1, b1, 0.05f), tn(2, w2, 0.05f), tn(1, b1, 0.05f), tn(2, w3, 0.05f), tn(1, b3, 0.05f), lab};
    const char *mw[] = {"W1", "b1", "W2", "b2", "W3", "b3"};
    printf("threads %d\n", threads);
    double ms = 0;
    if (strcmp(which, "cnn")) {
    ms = time_graph(mlp(), mi, 8, mw, 6, pool, iters);
    double fl = 2.0 * B * (784.0 * 512 + 512.0 * 512 + 512.0 * 10) * 3 - 2.0 * B * 784 * 512; /* fwd + dW + dX (not dX of layer 1) */
    /* SGEMM rate on the same shapes (keel's GEMM), same pool */
    float *A = kl_mem_alloc(sizeof(float) * 1024 * 1024, KL_TAG_OTHER), *Bm = kl_mem_alloc(sizeof(float) * 1024 * 1024, KL_TAG_OTHER),
          *C = kl_mem_alloc(sizeof(float) * 1024 * 1024, KL_TAG_OTHER);
    for (int i = 0; i < 1024 * 1024; i++) { A[i] = ur(); Bm[i] = ur(); }
    double tg[64];
    for (int it = -2; it < 21; it++) {
        int64_t t0 = kl_time_mono_ns();
        kl_gemm_f32(0, 1, B, 512, 784, 1, A, 784, Bm, 784, 0, C, 512, pool);   /* fwd 1 */
        kl_gemm_f32(0, 1, B, 512, 512, 1, A, 512, Bm, 512, 0, C, 512, pool);   /* fwd 2 */
        kl_gemm_f32(1, 0, 512, 784, B, 1, A, 512, Bm, 784, 0, C, 784, pool);   /* dW 1 */
        kl_gemm_f32(1, 0, 512, 512, B, 1, A, 512, Bm, 512, 0, C, 512, pool);   /* dW 2 */
        kl_gemm_f32(0, 0, B, 512, 512, 1, A, 512, Bm, 512, 0, C, 512, pool);   /* dX 2 */
        if (it >= 0) tg[it] = (kl_time_mono_ns() - t0) / 1e6;
    }
    qsort(tg, 21, sizeof(double), cmpd);
    double gfl = 2.0 * B * (784.0 * 512 * 2 + 512.0 * 512 * 3);
    double sg = gfl / tg[10] / 1e6;
    printf("mlp  784-512-512-10 b128: %.3f ms/step  %.0f samples/s  %.1f GFLOP/s  (keel SGEMM on these shapes %.1f GFLOP/s: %.0f %%)\n",
           ms, B / ms * 1e3, fl / ms / 1e6, sg, 100.0 * (fl / ms / 1e6) / sg);
    }
    if (!strcmp(which, "mlp")) return 0;
    /* (b) CNN */
    int64_t Bc = 64, cx[4] = {Bc, 1, 28, 28}, c1[4] = {32, 1, 3, 3}, cb1[1] = {32}, c2[4] = {64, 32, 3, 3}, cb2[1] = {64}, f1[2] = {128, 3136},
            fb1[1] = {128}, f2[2] = {10, 128}, fb2[1] = {10};
    kl_tensor *lab2;
    kl_tensor_new(KL_I64, 1, &Bc, KL_TAG_OTHER, &lab2, &e);
    for (int i = 0; i < Bc; i++) ((int64_t *)lab2->data)[i] = i % 10;
    kl_tensor *ci[10] = {tn(4, cx, 1), tn(4, c1, 0.3f), tn(1, cb1, 0.1f), tn(4, c2, 0.05f), tn(1, cb2, 0.1f), tn(2, f1, 0.02f), tn(1, fb1, 0.1f),
                         tn(2, f2, 0.1f), tn(1, fb2, 0.1f), lab2};
    const char *cw[] = {"C1", "c1", "C2", "c2", "F1", "f1", "F2", "f2"};
    ms = time_graph(cnn(), ci, 10, cw, 8, pool, iters);
    printf("cnn  conv32-pool-conv64-pool-fc128-fc10 b64: %.3f ms/step  %.0f samples/s\n", ms, Bc / ms * 1e3);
    return 0;
}
