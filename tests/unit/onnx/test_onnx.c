/* Unit tests of the ONNX loader, graph IR and session: malformed models give
 * errors naming the node (never a crash), dynamic batch with plan caching,
 * shape/dtype checks, concurrent runs, external data, memory planning. */
#include "../harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "keel/graph.h"
#include "keel/onnx.h"
#include "keel/runtime.h"
#include "onnx/onnx.pb-c.h"

/* ---- building small models with the generated protobuf-c API ---- */

typedef struct {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto os, *osp[1];
    Onnx__NodeProto nodes[8], *np[8];
    Onnx__ValueInfoProto vi[4], *in[2], *out[2];
    Onnx__TypeProto tp[4];
    Onnx__TypeProto__Tensor tt[4];
    Onnx__TensorShapeProto sh[4];
    Onnx__TensorShapeProto__Dimension dims[4][4], *dp[4][4];
    Onnx__TensorProto init[2], *ip[2];
} mb;

static void vinfo(mb *b, int k, const char *name, int rank, const int64_t *d, const char *sym0) {
    onnx__value_info_proto__init(&b->vi[k]);
    onnx__type_proto__init(&b->tp[k]);
    onnx__type_proto__tensor__init(&b->tt[k]);
    onnx__tensor_shape_proto__init(&b->sh[k]);
    b->vi[k].name = (char *)name;
    b->vi[k].type = &b->tp[k];
    b->tp[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    b->tp[k].tensor_type = &b->tt[k];
    b->tt[k].has_elem_type = 1;
    b->tt[k].elem_type = 1;
    b->tt[k].shape = &b->sh[k];
    b->sh[k].n_dim = (size_t)rank;
    b->sh[k].dim = b->dp[k];
    for (int i = 0; i < rank; i++) {
        onnx__tensor_shape_proto__dimension__init(&b->dims[k][i]);
        b->dp[k][i] = &b->dims[k][i];
        if (i == 0 && sym0) {
            b->dims[k][i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            b->dims[k][i].dim_param = (char *)sym0;
        } else {
            b->dims[k][i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            b->dims[k][i].dim_value = d[i];
        }
    }
}

static char *names[8][3];
static void node(mb *b, int k, const char *op, const char *name, const char *i0, const char *i1, const char *o) {
    onnx__node_proto__init(&b->nodes[k]);
    b->np[k] = &b->nodes[k];
    b->nodes[k].op_type = (char *)op;
    b->nodes[k].name = (char *)name;
    names[k][0] = (char *)i0;
    names[k][1] = (char *)i1;
    names[k][2] = (char *)o;
    b->nodes[k].n_input = i1 ? 2 : 1;
    b->nodes[k].input = names[k];
    b->nodes[k].n_output = 1;
    b->nodes[k].output = &names[k][2];
}

/* x [N,3] (symbolic N) -> nodes -> y; initializer "w" = [1,2,3] (f32, raw_data) */
static float wdata[3] = {1, 2, 3};
static void model(mb *b, int n_nodes, int opset) {
    onnx__model_proto__init(&b->m);
    onnx__graph_proto__init(&b->g);
    onnx__operator_set_id_proto__init(&b->os);
    b->os.has_version = 1;
    b->os.version = opset;
    b->osp[0] = &b->os;
    b->m.n_opset_import = 1;
    b->m.opset_import = b->osp;
    b->m.has_ir_version = 1;
    b->m.ir_version = 8;
    b->m.graph = &b->g;
    b->g.name = "t";
    b->g.n_node = (size_t)n_nodes;
    b->g.node = b->np;
    int64_t d[2] = {1, 3};
    vinfo(b, 0, "x", 2, d, "N");
    vinfo(b, 1, "y", 2, d, "N");
    b->in[0] = &b->vi[0];
    b->out[0] = &b->vi[1];
    b->g.n_input = 1;
    b->g.input = b->in;
    b->g.n_output = 1;
    b->g.output = b->out;
    onnx__tensor_proto__init(&b->init[0]);
    static int64_t wd[1] = {3};
    b->init[0].name = "w";
    b->init[0].n_dims = 1;
    b->init[0].dims = wd;
    b->init[0].has_data_type = 1;
    b->init[0].data_type = 1;
    b->init[0].has_raw_data = 1;
    b->init[0].raw_data.len = sizeof wdata;
    b->init[0].raw_data.data = (uint8_t *)wdata;
    b->ip[0] = &b->init[0];
    b->g.n_initializer = 1;
    b->g.initializer = b->ip;
}

static uint8_t *pack(mb *b, size_t *len) {
    *len = onnx__model_proto__get_packed_size(&b->m);
    uint8_t *buf = malloc(*len + 1);
    onnx__model_proto__pack(&b->m, buf);
    return buf;
}

static int load(mb *b, kl_session **s, kl_err *e) {
    size_t len;
    uint8_t *buf = pack(b, &len);
    int rc = kl_session_load_mem(buf, len, "test.onnx", NULL, s, e);
    free(buf);
    return rc;
}

/* ---- tests ---- */

KL_TEST(onnx_load_corrupt_and_truncated) {
    mb b;
    model(&b, 1, 13);
    node(&b, 0, "Add", "add0", "x", "w", "y");
    size_t len;
    uint8_t *buf = pack(&b, &len);
    kl_err e = {0};
    kl_session *s = NULL;
    for (size_t cut = 1; cut < len; cut += 7) {
        int rc = kl_session_load_mem(buf, cut, "cut.onnx", NULL, &s, &e);
        if (rc == KL_OK) { kl_session_free(s); s = NULL; continue; } /* a prefix may still parse */
        KT_CHECK(s == NULL);
    }
    uint8_t junk[64];
    for (int i = 0; i < 64; i++) junk[i] = (uint8_t)(i * 37 + 11);
    KT_CHECK(kl_session_load_mem(junk, sizeof junk, "junk.onnx", NULL, &s, &e) != KL_OK);
    KT_CHECK(s == NULL);
    free(buf);
}

KL_TEST(onnx_load_unsupported_op_names_node) {
    mb b;
    model(&b, 1, 13);
    node(&b, 0, "FancyOp", "fancy", "x", "w", "y");
    kl_err e = {0};
    kl_session *s = NULL;
    KT_EQ_INT(load(&b, &s, &e), KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "node 0 'fancy' (FancyOp)");
    KT_CONTAINS(kl_err_what(&e), "opset 13");
    /* opset out of range */
    model(&b, 1, 99);
    node(&b, 0, "Add", "add0", "x", "w", "y");
    kl_err_clear(&e);
    KT_EQ_INT(load(&b, &s, &e), KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "opset 99");
    /* an op at an opset it does not implement */
    model(&b, 1, 13);
    node(&b, 0, "HardSwish", "hs", "x", NULL, "y");
    kl_err_clear(&e);
    KT_EQ_INT(load(&b, &s, &e), KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "HardSwish at opset 13 is not supported (supported: opsets 14-17)");
    model(&b, 1, 13);
    node(&b, 0, "Resize", "rs", "x", NULL, "y");
    Onnx__AttributeProto at, *atp = &at;
    onnx__attribute_proto__init(&at);
    at.name = "mode";
    at.has_type = 1;
    at.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    at.has_s = 1;
    at.s.data = (uint8_t *)"lanczos"; /* cubic, the example before, is supported now */
    at.s.len = 7;
    b.nodes[0].n_attribute = 1;
    b.nodes[0].attribute = &atp;
    kl_err_clear(&e);
    KT_EQ_INT(load(&b, &s, &e), KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "node 0 'rs' (Resize)");
    KT_CONTAINS(kl_err_what(&e), "lanczos");
}

KL_TEST(onnx_load_cycle_and_dangling) {
    mb b;
    model(&b, 2, 13);
    node(&b, 0, "Add", "a", "x", "t2", "t1");
    node(&b, 1, "Relu", "b", "t1", NULL, "t2");
    b.out[0]->name = "t2";
    kl_err e = {0};
    kl_session *s = NULL;
    KT_EQ_INT(load(&b, &s, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "cycle");
    model(&b, 1, 13);
    node(&b, 0, "Add", "a", "x", "nowhere", "y");
    kl_err_clear(&e);
    KT_EQ_INT(load(&b, &s, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "node 0 'a' (Add)");
    KT_CONTAINS(kl_err_what(&e), "nowhere");
    /* raw_data of the wrong size */
    model(&b, 1, 13);
    node(&b, 0, "Add", "a", "x", "w", "y");
    b.init[0].raw_data.len = 8;
    kl_err_clear(&e);
    KT_EQ_INT(load(&b, &s, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "initializer 'w'");
}

static kl_tensor *mk(int64_t n, float base) {
    int64_t d[2] = {n, 3};
    kl_tensor *t = NULL;
    kl_tensor_new(KL_F32, 2, d, KL_TAG_OTHER, &t, NULL);
    for (int64_t i = 0; i < n * 3; i++) ((float *)t->data)[i] = base + (float)i;
    return t;
}

KL_TEST(onnx_session_dynamic_batch_and_checks) {
    mb b;
    model(&b, 2, 13);
    node(&b, 0, "Add", "a", "x", "w", "t");
    node(&b, 1, "Relu", "r", "t", NULL, "y");
    kl_err e = {0};
    kl_session *s = NULL;
    KT_OK(load(&b, &s, &e), &e);
    KT_EQ_INT(kl_session_num_inputs(s), 1);
    KT_EQ_STR(kl_session_input(s, 0)->dim_names[0], "N");
    KT_EQ_INT(kl_session_input(s, 0)->dims[0], -1);
    for (int64_t n = 1; n <= 5; n += 2) {
        kl_tensor *x = mk(n, -3), *y = NULL;
        KT_OK(kl_session_run(s, (const kl_tensor *const *)&x, 1, &y, 1, &e), &e);
        KT_EQ_INT(y->dims[0], n);
        for (int64_t i = 0; i < n * 3; i++) {
            float want = -3.f + (float)i + wdata[i % 3];
            KT_NEAR(((float *)y->data)[i], want > 0 ? want : 0, 0);
        }
        kl_tensor_free(x);
        kl_tensor_free(y);
    }
    /* wrong trailing dim, wrong dtype */
    int64_t d[2] = {2, 4};
    kl_tensor *bad = NULL, *y = NULL;
    kl_tensor_new(KL_F32, 2, d, KL_TAG_OTHER, &bad, NULL);
    KT_EQ_INT(kl_session_run(s, (const kl_tensor *const *)&bad, 1, &y, 1, &e), KL_ESHAPE);
    KT_CONTAINS(kl_err_what(&e), "input 'x'");
    KT_CHECK(y == NULL);
    kl_tensor_free(bad);
    d[1] = 3;
    kl_tensor_new(KL_F64, 2, d, KL_TAG_OTHER, &bad, NULL);
    KT_EQ_INT(kl_session_run(s, (const kl_tensor *const *)&bad, 1, &y, 1, &e), KL_ETYPE);
    kl_tensor_free(bad);
    uint64_t bytes = 0;
    kl_tensor *x = mk(64, 0);
    KT_OK(kl_session_plan_bytes(s, (const kl_tensor *const *)&x, 1, &bytes, &e), &e);
    KT_CHECK(bytes > 0); /* Add+Relu fuse into one node writing the output: only headers/workspace */
    kl_tensor_free(x);
    kl_session_free(s);
}

typedef struct { kl_session *s; int fails; int id; } thr_ctx;
static void *worker(void *arg) {
    thr_ctx *c = arg;
    for (int it = 0; it < 40; it++) {
        int64_t n = 1 + (c->id + it) % 4;
        kl_tensor *x = mk(n, (float)c->id), *y = NULL;
        kl_err e = {0};
        if (kl_session_run(c->s, (const kl_tensor *const *)&x, 1, &y, 1, &e)) c->fails++;
        else
            for (int64_t i = 0; i < n * 3; i++) {
                float want = (float)c->id + (float)i + wdata[i % 3];
                if (((float *)y->data)[i] != (want > 0 ? want : 0)) { c->fails++; break; }
            }
        kl_tensor_free(x);
        kl_tensor_free(y);
    }
    return NULL;
}

KL_TEST(onnx_session_concurrent_runs) {
    mb b;
    model(&b, 2, 13);
    node(&b, 0, "Add", "a", "x", "w", "t");
    node(&b, 1, "Relu", "r", "t", NULL, "y");
    kl_err e = {0};
    kl_session *s = NULL;
    KT_OK(load(&b, &s, &e), &e);
    pthread_t th[4];
    thr_ctx c[4];
    for (int i = 0; i < 4; i++) { c[i].s = s; c[i].fails = 0; c[i].id = i; pthread_create(&th[i], NULL, worker, &c[i]); }
    int fails = 0;
    for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); fails += c[i].fails; }
    KT_EQ_INT(fails, 0);
    kl_session_free(s);
}

KL_TEST(onnx_planner_reuses_memory) {
    mb b;
    model(&b, 5, 13);
    node(&b, 0, "Relu", "r0", "x", NULL, "t0");
    node(&b, 1, "Neg", "r1", "t0", NULL, "t1");
    node(&b, 2, "Relu", "r2", "t1", NULL, "t2");
    node(&b, 3, "Neg", "r3", "t2", NULL, "t3");
    node(&b, 4, "Relu", "r4", "t3", NULL, "y");
    kl_graph *g = NULL;
    size_t len;
    uint8_t *buf = pack(&b, &len);
    kl_err e = {0};
    KT_OK(kl_onnx_load_mem(buf, len, "chain.onnx", NULL, &g, &e), &e);
    free(buf);
    kl_tensor *x = mk(256, 0);
    kl_plan *p = NULL;
    KT_OK(kl_plan_new(g, (const kl_tensor *const *)&x, 1, &p, &e), &e);
    /* 4 intermediates of 3 KiB, at most 2 alive at once */
    KT_EQ_INT(kl_plan_naive_bytes(p), 4 * 3072);
    KT_EQ_INT(kl_plan_activation_bytes(p), 2 * 3072);
    kl_plan_free(p);
    kl_tensor_free(x);
    kl_graph_free(g);
}

/* A step whose output only feeds a Shape (folded by the plan) is dropped:
 * PyTorch's attention exports a Transpose of K used only for its shape. */
KL_TEST(onnx_planner_drops_dead_steps) {
    mb b;
    model(&b, 3, 13);
    node(&b, 0, "Transpose", "t", "x", NULL, "xt");
    node(&b, 1, "Shape", "s", "xt", NULL, "shp");
    node(&b, 2, "Reshape", "r", "x", "shp", "y");
    kl_graph *g = NULL;
    size_t len;
    uint8_t *buf = pack(&b, &len);
    kl_err e = {0};
    KT_OK(kl_onnx_load_mem(buf, len, "dead.onnx", NULL, &g, &e), &e);
    free(buf);
    kl_tensor *x = mk(64, 1), *y = NULL;
    kl_plan *p = NULL;
    KT_OK(kl_plan_new(g, (const kl_tensor *const *)&x, 1, &p, &e), &e);
    KT_EQ_INT(kl_plan_naive_bytes(p), 0); /* the transposed copy is never made */
    void *arena = kl_mem_alloc(kl_plan_arena_bytes(p), KL_TAG_ACTIVATIONS);
    KT_OK(kl_plan_run(p, g, (const kl_tensor *const *)&x, 1, &y, 1, arena, NULL, &e), &e);
    KT_EQ_INT(y->rank, 2);
    KT_EQ_INT(y->dims[0], 3);
    KT_EQ_INT(y->dims[1], 64);
    KT_CHECK(memcmp(y->data, x->data, x->nbytes) == 0);
    kl_mem_free(arena);
    kl_tensor_free(y);
    kl_plan_free(p);
    kl_tensor_free(x);
    kl_graph_free(g);
}

KL_TEST(onnx_external_data_bounds) {
    mb b;
    model(&b, 1, 13);
    node(&b, 0, "Add", "a", "x", "w", "y");
    const char *dir = kt_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/w.bin", dir);
    FILE *f = fopen(path, "wb");
    float pad[4] = {9, 1, 2, 3};
    fwrite(pad, sizeof pad, 1, f);
    fclose(f);
    Onnx__StringStringEntryProto kv[3], *kvp[3];
    const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {"w.bin", "4", "12"};
    for (int i = 0; i < 3; i++) {
        onnx__string_string_entry_proto__init(&kv[i]);
        kv[i].key = (char *)keys[i];
        kv[i].value = (char *)vals[i];
        kvp[i] = &kv[i];
    }
    b.init[0].has_raw_data = 0;
    b.init[0].n_external_data = 3;
    b.init[0].external_data = kvp;
    b.init[0].has_data_location = 1;
    b.init[0].data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    size_t len;
    uint8_t *buf = pack(&b, &len);
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    f = fopen(path, "wb");
    fwrite(buf, len, 1, f);
    fclose(f);
    free(buf);
    kl_err e = {0};
    kl_session *s = NULL;
    KT_OK(kl_session_load(path, NULL, &s, &e), &e);
    kl_tensor *x = mk(1, 0), *y = NULL;
    KT_OK(kl_session_run(s, (const kl_tensor *const *)&x, 1, &y, 1, &e), &e);
    KT_NEAR(((float *)y->data)[2], 2 + 3, 0);
    kl_tensor_free(x);
    kl_tensor_free(y);
    kl_session_free(s);
    /* beyond the end of the file; and escaping the model folder */
    vals[1] = "8";
    kv[1].value = (char *)vals[1];
    buf = pack(&b, &len);
    f = fopen(path, "wb");
    fwrite(buf, len, 1, f);
    fclose(f);
    free(buf);
    KT_EQ_INT(kl_session_load(path, NULL, &s, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "beyond the file end");
    kv[0].value = "../w.bin";
    kv[1].value = "4";
    buf = pack(&b, &len);
    f = fopen(path, "wb");
    fwrite(buf, len, 1, f);
    fclose(f);
    free(buf);
    KT_EQ_INT(kl_session_load(path, NULL, &s, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "leaves the model folder");
}

/* A model refused by the memory budget says so (naming the limit, KL_ENOMEM),
 * not "corrupt"; a truncated one still says corrupt. */
KL_TEST(onnx_load_budget_refusal_names_limit) {
    mb b;
    model(&b, 1, 13);
    node(&b, 0, "Identity", "id0", "x", NULL, "y");
    enum { NW = 1 << 20 };
    float *big = calloc(NW, sizeof *big);
    KT_CHECK(big);
    static int64_t bd[1] = {NW};
    b.init[0].dims = bd;
    b.init[0].raw_data.len = NW * sizeof *big;
    b.init[0].raw_data.data = (uint8_t *)big;
    size_t len;
    uint8_t *buf = pack(&b, &len);
    free(big);
    kl_err e = {0};
    kl_graph *g = NULL;
    KT_OK(kl_onnx_load_mem(buf, len, "big.onnx", NULL, &g, &e), &e); /* a valid model */
    kl_graph_free(g);
    g = NULL;
    kl_mem_trim();
    kl_mem_stats s;
    kl_mem_stats_get(KL_TAG_COUNT, &s);
    kl_mem_set_budget(s.reserved + (1u << 20)); /* the 4 MiB of weights do not fit */
    e = (kl_err){0};
    int rc = kl_onnx_load_mem(buf, len, "big.onnx", NULL, &g, &e);
    kl_mem_set_budget(0);
    KT_EQ_INT(rc, KL_ENOMEM);
    KT_CHECK(g == NULL);
    KT_CONTAINS(e.msg, "memory limit");
    KT_CONTAINS(e.msg, "big.onnx");
    KT_CONTAINS(e.msg, "needs at least");
    KT_CHECK(!strstr(e.msg, "corrupt"));
    /* truncated, no budget: still a corrupt file */
    e = (kl_err){0};
    KT_EQ_INT(kl_onnx_load_mem(buf, len / 2, "cut.onnx", NULL, &g, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "corrupt");
    KT_CONTAINS(e.msg, "cut.onnx");
    free(buf);
}

/* A model importing only another domain (ai.onnx.preview.training, as the
 * optimizer node tests) loads with opset 0; a default-domain node in it is
 * refused naming the node, not run at an invented opset. */
KL_TEST(onnx_load_only_non_default_domain) {
    mb b;
    kl_session *s = NULL;
    kl_err e = {0};
    model(&b, 1, 1);
    b.os.domain = "ai.onnx.preview.training";
    node(&b, 0, "Relu", "r", "x", NULL, "y");
    KT_EQ_INT(load(&b, &s, &e), KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "node 0 (Relu)");
    KT_CONTAINS(kl_err_what(&e), "no default-domain");
    /* no opset import at all: still refused at the model level */
    model(&b, 1, 1);
    b.m.n_opset_import = 0;
    node(&b, 0, "Relu", "r", "x", NULL, "y");
    kl_err_clear(&e);
    KT_EQ_INT(load(&b, &s, &e), KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "imports no default-domain");
}
