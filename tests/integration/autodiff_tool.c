/* Driver of tests/integration/autodiff_torch.py: builds a fixed model as a
 * keel graph (the same one the Python test builds in PyTorch 1.13), reads
 * its inputs and parameters from DIR/<name>.npy, runs kl_graph_autodiff and
 * the executor, and writes DIR/keel_<output>.npy (the loss, BatchNorm running
 * statistics and every parameter gradient). Usage: autodiff-tool cnn|mlp DIR */
#include "keel/graph.h"
#include "keel/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kl_graph *g;
static int node(const char *dom, const char *op, const char *ins, const char *outs) {
    const char *iv[8], *ov[8];
    char ib[256], ob[256];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; iv[ni++] = s; }
    for (char *s = ob, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; ov[no++] = s; }
    int k = kl_graph_add_node(g, op, op, iv, ni, ov, no);
    if (dom) kl_gnode_set_domain(&g->nodes[k], dom, 1);
    return k;
}
static void ai(int k, const char *n, int64_t v) { kl_gnode_attr_add(&g->nodes[k], n, KL_ATTR_INT)->i = v; }
static void af(int k, const char *n, float v) { kl_gnode_attr_add(&g->nodes[k], n, KL_ATTR_FLOAT)->f = v; }
static void ais(int k, const char *n, int c, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], n, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)c);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)c);
    a->n = c;
}
static void output(const char *name) {
    int v = kl_graph_value(g, name);
    g->values[v].is_output = 1;
    g->outputs = realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    g->outputs[g->n_outputs++] = v;
}
static void scalar_init(const char *name, kl_dtype dt, double v) {
    kl_err e;
    int i = kl_graph_value(g, name);
    kl_tensor_new(dt, 0, NULL, KL_TAG_PARAMS, &g->values[i].init, &e);
    if (dt == KL_F64) ((double *)g->values[i].init->data)[0] = v;
    else ((float *)g->values[i].init->data)[0] = (float)v;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: autodiff-tool cnn|mlp DIR\n"); return 2; }
    kl_err e;
    int cnn = !strcmp(argv[1], "cnn");
    const char *dir = argv[2];
    const char *cnn_in[] = {"x", "W1", "b1", "gs", "gb", "rm", "rv", "W2", "b2", "Wf", "bf", "y", NULL};
    const char *cnn_p[] = {"W1", "b1", "gs", "gb", "W2", "b2", "Wf", "bf", NULL};
    const char *mlp_in[] = {"x", "W1", "b1", "ls", "lb", "W2", "b2", "cw", "y", NULL};
    const char *mlp_p[] = {"x", "W1", "b1", "ls", "lb", "W2", "b2", NULL};
    const char *const *ins = cnn ? cnn_in : mlp_in, *const *ps = cnn ? cnn_p : mlp_p;
    kl_tensor *in[16];
    int n_in = 0;
    char path[1024];
    kl_graph_new(&g, &e);
    g->opset = 17;
    for (; ins[n_in]; n_in++) {
        snprintf(path, sizeof path, "%s/%s.npy", dir, ins[n_in]);
        if (kl_npy_load(path, &in[n_in], &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        int v = kl_graph_value(g, ins[n_in]);
        g->values[v].is_input = 1;
        g->inputs = realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
        g->inputs[g->n_inputs++] = v;
    }
    kl_dtype dt = in[0]->dtype;
    int64_t p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
    if (cnn) {
        int k = node(NULL, "Conv", "x,W1,b1", "c1");
        ais(k, "pads", 4, p1);
        k = node(NULL, "BatchNormalization", "c1,gs,gb,rm,rv", "bn,rm_out,rv_out");
        ai(k, "training_mode", 1); af(k, "momentum", 0.9f); af(k, "epsilon", 1e-5f);
        ai(k, "_unbiased_var", 1); /* PyTorch's running_var */
        node(NULL, "Relu", "bn", "r1");
        k = node(NULL, "MaxPool", "r1", "p1");
        ais(k, "kernel_shape", 2, k2); ais(k, "strides", 2, k2);
        k = node(NULL, "Conv", "p1,W2,b2", "c2");
        ais(k, "pads", 4, p1); ais(k, "strides", 2, k2);
        node(NULL, "Relu", "c2", "r2");
        node(NULL, "GlobalAveragePool", "r2", "gp");
        k = node(NULL, "Flatten", "gp", "f");
        k = node(NULL, "Gemm", "f,Wf,bf", "z");
        ai(k, "transB", 1);
        k = node("ai.keel.train", "CrossEntropyLoss", "z,y", "loss");
        af(k, "label_smoothing", 0.1f);
        output("loss"); output("rm_out"); output("rv_out");
    } else {
        scalar_init("gelu_sqrt2", dt, 1.4142135623730951);
        scalar_init("gelu_one", dt, 1.0);
        scalar_init("gelu_half", dt, 0.5);
        int k = node(NULL, "Gemm", "x,W1,b1", "h");
        ai(k, "transB", 1);
        k = node(NULL, "LayerNormalization", "h,ls,lb", "ln");
        ai(k, "axis", -1); af(k, "epsilon", 1e-5f);
        node(NULL, "Div", "ln,gelu_sqrt2", "g1");
        node(NULL, "Erf", "g1", "g2");
        node(NULL, "Add", "g2,gelu_one", "g3");
        node(NULL, "Mul", "ln,g3", "g4");
        node(NULL, "Mul", "g4,gelu_half", "gl");
        k = node(NULL, "Gemm", "gl,W2,b2", "z");
        ai(k, "transB", 1);
        node("ai.keel.train", "CrossEntropyLoss", "z,y,cw", "loss");
        output("loss");
    }
    int w[16], gr[16], nw = 0;
    for (; ps[nw]; nw++) w[nw] = kl_graph_find_value(g, ps[nw]);
    kl_plan *p;
    if (kl_graph_autodiff(g, g->outputs[0], w, nw, gr, &e) || kl_graph_finalize(g, &e) ||
        kl_plan_new(g, (const kl_tensor *const *)in, (size_t)n_in, &p, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    void *arena = kl_mem_alloc(kl_plan_arena_bytes(p), KL_TAG_ACTIVATIONS);
    kl_tensor *out[32] = {0};
    if (kl_plan_run(p, g, (const kl_tensor *const *)in, (size_t)n_in, out, (size_t)g->n_outputs, arena, NULL, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    for (int i = 0; i < g->n_outputs; i++) {
        snprintf(path, sizeof path, "%s/keel_%s.npy", dir, g->values[g->outputs[i]].name);
        if (kl_npy_save(path, out[i], &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        kl_tensor_free(out[i]);
    }
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_graph_free(g);
    for (int i = 0; i < n_in; i++) kl_tensor_free(in[i]);
    return 0;
}
