/* Unit tests of the ONNX writer (kl_onnx_save): a graph built with the IR
 * API, with a view (non-contiguous) initializer, attributes of several
 * kinds and a symbolic batch dimension, is written, loaded back and run. */
#include "../harness.h"

#include <stdlib.h>
#include <string.h>

#include "keel/graph.h"
#include "keel/onnx.h"
#include "keel/runtime.h"

static int add_in(kl_graph *g, const char *name, int64_t d1) {
    int v = kl_graph_value(g, name);
    g->inputs = realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
    g->inputs[g->n_inputs++] = v;
    kl_value *val = &g->values[v];
    val->is_input = 1;
    val->dtype = KL_F32;
    val->rank = 2;
    val->dims[0] = -1;
    val->dim_names[0] = strdup("N");
    val->dims[1] = d1;
    return v;
}

KL_TEST(onnx_save_round_trip) {
    kl_err e = {0};
    kl_graph *g = NULL;
    KT_OK(kl_graph_new(&g, &e), &e);
    g->opset = 17;
    g->name = strdup("saved");
    g->producer = strdup("keel-test 1.0");
    add_in(g, "x", 3);
    /* w = [1, 2, 3] (contiguous); W2 = transpose of a (3, 4) tensor: a (4, 3) view */
    int64_t d1[1] = {3}, d34[2] = {3, 4};
    kl_tensor *w = NULL, *base = NULL, *wt = NULL;
    KT_OK(kl_tensor_new(KL_F32, 1, d1, KL_TAG_OTHER, &w, &e), &e);
    KT_OK(kl_tensor_new(KL_F32, 2, d34, KL_TAG_OTHER, &base, &e), &e);
    for (int i = 0; i < 3; i++) ((float *)w->data)[i] = (float)(i + 1);
    for (int i = 0; i < 12; i++) ((float *)base->data)[i] = (float)i * 0.25f - 1;
    KT_OK(kl_tensor_transpose(base, NULL, &wt, &e), &e);
    KT_CHECK(!kl_tensor_is_contiguous(wt));
    int vw = kl_graph_value(g, "w"), vW = kl_graph_value(g, "W2");
    g->values[vw].init = w;
    g->values[vW].init = wt;
    const char *i1[2] = {"x", "w"}, *o1[1] = {"t"}, *i2[2] = {"t", "W2"}, *o2[1] = {"y"};
    KT_CHECK(kl_graph_add_node(g, "Add", "add0", i1, 2, o1, 1) >= 0);
    int gi = kl_graph_add_node(g, "Gemm", "gemm0", i2, 2, o2, 1);
    KT_CHECK(gi >= 0);
    kl_gnode_attr_add(&g->nodes[gi], "transB", KL_ATTR_INT)->i = 1;
    kl_gnode_attr_add(&g->nodes[gi], "alpha", KL_ATTR_FLOAT)->f = 0.5f;
    int vy = kl_graph_value(g, "y");
    g->outputs = malloc(sizeof(int));
    g->outputs[g->n_outputs++] = vy;
    g->values[vy].is_output = 1;
    g->values[vy].dtype = KL_F32;
    g->values[vy].rank = 2;
    g->values[vy].dims[0] = -1;
    g->values[vy].dim_names[0] = strdup("N");
    g->values[vy].dims[1] = 4;
    const char *path = kt_path("saved.onnx");
    KT_OK(kl_onnx_save(g, path, &e), &e);
    /* loads back: names, opset, producer, symbolic dim, initializer data */
    kl_graph *h = NULL;
    KT_OK(kl_onnx_load(path, &h, &e), &e);
    KT_EQ_INT(h->opset, 17);
    KT_EQ_STR(h->producer, "keel-test 1.0");
    KT_EQ_STR(h->name, "saved");
    KT_EQ_INT(h->n_inputs, 1);
    KT_EQ_STR(h->values[h->inputs[0]].dim_names[0], "N");
    KT_EQ_INT(h->n_nodes, 2);
    KT_EQ_STR(h->nodes[1].name, "gemm0");
    KT_NEAR(kl_gnode_attr_float(&h->nodes[1], "alpha", 0), 0.5, 0);
    int hv = kl_graph_find_value(h, "W2");
    KT_CHECK(hv >= 0 && h->values[hv].init && h->values[hv].init->dims[0] == 4);
    for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < 3; c++) KT_NEAR(((float *)h->values[hv].init->data)[r * 3 + c], ((float *)base->data)[c * 4 + r], 0);
    kl_graph_free(h);
    /* runs: y = 0.5 * (x + w) W2^T */
    kl_session *s = NULL;
    KT_OK(kl_session_load(path, NULL, &s, &e), &e);
    int64_t dx[2] = {2, 3};
    kl_tensor *x = NULL, *y = NULL;
    KT_OK(kl_tensor_new(KL_F32, 2, dx, KL_TAG_OTHER, &x, &e), &e);
    for (int i = 0; i < 6; i++) ((float *)x->data)[i] = (float)i - 2;
    KT_OK(kl_session_run(s, (const kl_tensor *const *)&x, 1, &y, 1, &e), &e);
    KT_EQ_INT(y->dims[0], 2);
    KT_EQ_INT(y->dims[1], 4);
    for (int n = 0; n < 2; n++)
        for (int o = 0; o < 4; o++) {
            double want = 0;
            for (int k = 0; k < 3; k++) want += (((float *)x->data)[n * 3 + k] + (k + 1.0)) * ((float *)base->data)[k * 4 + o];
            KT_NEAR(((float *)y->data)[n * 4 + o], 0.5 * want, 1e-5);
        }
    kl_tensor_free(x);
    kl_tensor_free(y);
    kl_session_free(s);
    /* an attribute kind the writer cannot express is an error naming the node */
    kl_gnode_attr_add(&g->nodes[0], "sub", KL_ATTR_GRAPH);
    void *buf = NULL;
    size_t len = 0;
    KT_CHECK(kl_onnx_save_mem(g, &buf, &len, &e) == KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "add0");
    KT_CHECK(buf == NULL);
    kl_graph_free(g);
    kl_tensor_free(base);
}
