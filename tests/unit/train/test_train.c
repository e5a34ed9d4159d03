/* Training engine: spec errors (line, layer, suggestion), shape inference,
 * optimizer semantics, schedules, clipping, safetensors round trip and
 * bit-identical training at 1 and 2 threads. */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "keel/tensor.h"
#include "train/train_data.h"
#include "train/train_int.h"

static int spec_err(const char *text, kl_err *e) {
    tr_spec *s = NULL;
    tr_model *m = NULL;
    int rc = kl__train_spec_load_str(text, "t.yaml", &s, e);
    if (!rc) rc = kl__train_model_new(s, &m, e);
    kl__train_model_free(m);
    kl__train_spec_free(s);
    return rc;
}

KL_TEST(train_spec_unknown_key_suggests) {
    kl_err e = {0};
    int rc = spec_err("input: {shape: [4]}\nlayers:\n  - {type: linear, out: 3, bais: false}\n", &e);
    KT_CHECK(rc != 0);
    KT_CONTAINS(kl_err_what(&e), "bais");
    KT_CONTAINS(kl_err_what(&e), "bias");
    KT_CONTAINS(kl_err_what(&e), "t.yaml:3");
    rc = spec_err("input: {shape: [4]}\nlayers:\n  - {type: linaer, out: 3}\n", &e);
    KT_CHECK(rc != 0);
    KT_CONTAINS(kl_err_what(&e), "did you mean 'linear'");
    rc = spec_err("input: {shape: [4]}\nlayers:\n  - {type: linear, out: three}\n", &e);
    KT_CHECK(rc != 0);
    KT_CONTAINS(kl_err_what(&e), "three");
}

/* A key its section accepts but this configuration never reads is refused,
 * naming it: momentum means nothing to adamw, gamma nothing to cosine. */
KL_TEST(train_spec_key_ignored_by_its_setting_is_refused) {
    kl_err e = {0};
    const char *base = "input: {shape: [4]}\nlayers:\n  - {type: linear, out: 3}\n";
    const char *bad[] = {"optimizer: {type: adamw, lr: 0.01, momentum: 0.9}\n",
                         "momentum",
                         "optimizer: {type: sgd, lr: 0.01, betas: [0.9, 0.99]}\n",
                         "betas",
                         "schedule: {type: cosine, gamma: 0.5}\n",
                         "gamma",
                         "schedule: {type: exponential, step_size: 3}\n",
                         "step_size",
                         "train: {epochs: 1, loss_scale: {init: 8}}\n",
                         "loss_scale",
                         "description: a model\nfoo: 1\n",
                         "foo"};
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i += 2) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", base, bad[i]);
        KT_EQ_INT(spec_err(text, &e), KL_EINVAL);
        KT_CONTAINS(kl_err_what(&e), bad[i + 1]);
        KT_CONTAINS(kl_err_what(&e), i + 2 < KL_ARRAY_LEN(bad) ? "t.yaml:4" : "t.yaml:5");
    }
    char ok[512];
    snprintf(ok, sizeof ok,
             "%sdescription: a model\noptimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
             "schedule: {type: step, gamma: 0.5, step_size: 2}\ntrain: {epochs: 1, precision: fp16, loss_scale: {init: "
             "8}}\n",
             base);
    KT_EQ_INT(spec_err(ok, &e), 0);
}

/* fuzz_spec found it: a layer map without 'type' crashed the parser (strcmp of NULL) */
KL_TEST(train_spec_layer_without_type) {
    kl_err e = {0};
    int rc = spec_err("input: {shape: [4]}\nlayers:\n  - {type: linear, out: 8}\n  - {tye: linear, out: 3}\n", &e);
    KT_EQ_INT(rc, KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "t.yaml:4");
    KT_CONTAINS(kl_err_what(&e), "layers.1");
    KT_CONTAINS(kl_err_what(&e), "needs a 'type'");
}

KL_TEST(train_spec_shape_mismatch_names_layer) {
    kl_err e = {0};
    int rc = spec_err("input: {shape: [4]}\nlayers:\n  - {type: linear, out: 8}\n  - {type: linear, in: 7, out: 3, name: head}\n", &e);
    KT_EQ_INT(rc, KL_ESHAPE);
    KT_CONTAINS(kl_err_what(&e), "t.yaml:4");
    KT_CONTAINS(kl_err_what(&e), "layer head (linear)");
    rc = spec_err("input: {shape: [16]}\nlayers:\n  - {type: conv2d, out: 4, kernel: 3}\n", &e);
    KT_EQ_INT(rc, KL_ESHAPE);
    KT_CONTAINS(kl_err_what(&e), "(C, H, W)");
    rc = spec_err("input: {shape: [1, 8, 8]}\nlayers:\n  - {type: conv2d, out: 4, kernel: 3, name: c}\n  - {type: add, inputs: [input, c]}\n", &e);
    KT_EQ_INT(rc, KL_ESHAPE);
    KT_CONTAINS(kl_err_what(&e), "differ in shape");
    rc = spec_err("input: {shape: [4]}\nlayers:\n  - {type: linear, out: 3}\nloss: {class_weights: [1, 2]}\n", &e);
    KT_CHECK(rc != 0);
    KT_CONTAINS(kl_err_what(&e), "class_weights");
}

KL_TEST(train_model_shapes) {
    kl_err e = {0};
    tr_spec *s = NULL;
    tr_model *m = NULL;
    const char *t = "input: {shape: [3, 12, 12]}\nlayers:\n  - {type: conv2d, out: 8, kernel: 3, padding: 1, name: c1}\n"
                    "  - {type: batchnorm2d}\n  - {type: relu, name: r1}\n  - {type: conv2d, out: 8, kernel: 3, padding: 1}\n"
                    "  - {type: add, inputs: [r1, l3]}\n  - {type: maxpool2d, kernel: 2}\n  - {type: avgpool2d, kernel: 3, stride: 1, padding: 1}\n"
                    "  - {type: global_avgpool}\n  - {type: layernorm}\n  - {type: gelu}\n  - {type: linear, out: 5}\n";
    KT_OK(kl__train_spec_load_str(t, "t.yaml", &s, &e), &e);
    KT_OK(kl__train_model_new(s, &m, &e), &e);
    KT_EQ_INT(m->out_numel, 5);
    KT_EQ_INT(m->L[5].dims[1], 6);
    KT_EQ_INT(m->nparams, 8 * 3 * 9 + 8 + 16 + 8 * 8 * 9 + 8 + 16 + 8 * 5 + 5);
    kl__train_model_free(m);
    kl__train_spec_free(s);
}

KL_TEST(train_sgd_and_adamw_semantics) {
    tr_spec s = {0};
    s.opt = TR_OPT_SGD; s.momentum = 0.9; s.wd = 0.1; s.nesterov = 1;
    tr_optim o;
    kl_err e = {0};
    KT_OK(kl__train_optim_init(&o, &s, 1, &e), &e);
    float p = 1, g = 0.5f;
    kl__train_optim_step(&o, &s, &p, &g, 0.1); /* d = 0.5 + 0.1 = 0.6; buf = 0.6; d = 0.6 + 0.9*0.6 = 1.14 */
    KT_NEAR(p, 1 - 0.1 * 1.14, 1e-6);
    kl__train_optim_free(&o);
    s.opt = TR_OPT_ADAMW; s.beta1 = 0.9; s.beta2 = 0.999; s.adam_eps = 1e-8; s.wd = 0.01;
    KT_OK(kl__train_optim_init(&o, &s, 1, &e), &e);
    p = 1;
    kl__train_optim_step(&o, &s, &p, &g, 0.01); /* p*(1-1e-4) - 0.01 * m_hat/(sqrt(v_hat)+eps) = 0.9999 - 0.01 */
    KT_NEAR(p, 0.9999 - 0.01, 1e-6);
    kl__train_optim_free(&o);
}

KL_TEST(train_schedules_and_clip) {
    tr_spec s = {0};
    s.lr = 1; s.sched = TR_SCHED_COSINE; s.warmup = 10; s.min_lr = 0;
    KT_NEAR(kl__train_sched_lr(&s, 0, 0, 110), 0.1, 1e-12);
    KT_NEAR(kl__train_sched_lr(&s, 10, 0, 110), 1, 1e-12);
    KT_NEAR(kl__train_sched_lr(&s, 60, 0, 110), 0.5, 1e-12);
    s.warmup = 0; s.sched = TR_SCHED_STEP; s.gamma = 0.5; s.step_size = 2;
    KT_NEAR(kl__train_sched_lr(&s, 0, 5, 0), 0.25, 1e-12);
    s.sched = TR_SCHED_EXPONENTIAL;
    KT_NEAR(kl__train_sched_lr(&s, 0, 3, 0), 0.125, 1e-12);
    float g[2] = {3, 4};
    double n = kl__train_clip_grad(g, 2, 1.0);
    KT_NEAR(n, 5, 1e-9);
    KT_NEAR(g[0], 0.6, 1e-5);
    KT_NEAR(g[1], 0.8, 1e-5);
}

typedef struct { int n; float sum; } st_ctx;
static int st_cb(void *ctx, const char *name, const char *dtype, int rank, const int64_t *dims, const void *data, size_t nb, kl_err *e) {
    st_ctx *c = ctx;
    c->n++;
    for (size_t i = 0; i < nb / 4; i++) c->sum += ((const float *)data)[i];
    return KL_OK;
}

KL_TEST(train_safetensors_round_trip) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {7, 8};
    tr_st_entry t[2] = {{"a", a, 2, {2, 3}}, {"b", b, 1, {2}}};
    kl_err e = {0};
    KT_OK(kl__train_safetensors_write(kt_path("x.safetensors"), t, 2, "{\"k\":\"v\"}", &e), &e);
    st_ctx c = {0};
    char *meta = NULL;
    KT_OK(kl__train_safetensors_read(kt_path("x.safetensors"), st_cb, &c, &meta, &e), &e);
    KT_EQ_INT(c.n, 2);
    KT_NEAR(c.sum, 36, 0);
    KT_CONTAINS(meta, "\"k\":\"v\"");
    free(meta);
    KT_CHECK(kl_path_exists(kt_path("x.safetensors.sha256")));
}

/* Trains a small CNN+MLP with dropout and batchnorm for a few steps. */
static int train_steps(int threads, float *out_params, int64_t *np, kl_err *e) {
    const char *t = "seed: 7\ninput: {shape: [2, 6, 6]}\nlayers:\n  - {type: conv2d, out: 4, kernel: 3, padding: 1}\n"
                    "  - {type: batchnorm2d}\n  - {type: relu}\n  - {type: maxpool2d, kernel: 2}\n  - {type: flatten}\n"
                    "  - {type: dropout, p: 0.3}\n  - {type: linear, out: 70}\n  - {type: tanh}\n  - {type: linear, out: 3}\n";
    tr_spec *s = NULL;
    tr_model *m = NULL;
    kl_pool *pool = NULL;
    tr_optim o = {0};
    uint64_t act, ws;
    int rc = kl__train_spec_load_str(t, "t.yaml", &s, e);
    if (!rc) rc = kl__train_model_new(s, &m, e);
    if (!rc) rc = kl_pool_new(threads, &pool, e);
    if (!rc) rc = kl__train_step_prepare(m, 130, &act, &ws, e);
    if (!rc) rc = kl__train_model_alloc(m, 130, e);
    if (!rc) rc = kl__train_optim_init(&o, s, m->nparams, e);
    if (!rc) {
        m->pool = pool;
        kl_rng r;
        kl_rng_seed(&r, 7);
        kl__train_model_init(m, &r);
        float *x = malloc(130 * 72 * 4);
        int64_t y[130];
        for (int i = 0; i < 130 * 72; i++) x[i] = (float)kl_rng_normal(&r);
        for (int i = 0; i < 130; i++) y[i] = i % 3;
        for (int step = 0; step < 5 && !rc; step++) {
            double loss;
            rc = kl__train_step_run(m, x, y, NULL, 130, step, 1.0f, &loss, e);
            kl__train_clip_grad(m->grads, m->nparams, 1.0);
            kl__train_optim_step(&o, s, m->params, m->grads, 0.01);
        }
        memcpy(out_params, m->params, (size_t)(m->nparams + m->nbuf) * 4);
        *np = m->nparams + m->nbuf;
        free(x);
    }
    kl__train_optim_free(&o);
    kl_pool_free(pool);
    kl__train_model_free(m);
    kl__train_spec_free(s);
    return rc;
}

KL_TEST(train_bit_identical_at_1_and_2_threads) {
    static float p1[20000], p2[20000];
    int64_t n1 = 0, n2 = 0;
    kl_err e = {0};
    KT_OK(train_steps(1, p1, &n1, &e), &e);
    KT_OK(train_steps(2, p2, &n2, &e), &e);
    KT_EQ_INT(n1, n2);
    KT_CHECK(n1 > 1000 && n1 < 20000);
    KT_CHECK(memcmp(p1, p2, (size_t)n1 * 4) == 0);
}

/* ---- hostile .npy / safetensors files (issue 22, fuzz_npy, fuzz_safetensors) ---- */

static const char *write_bytes(const char *name, const void *b, size_t n) {
    kl_err e = {0};
    const char *p = kt_path(name);
    return kl_write_file_atomic(p, b, n, &e) ? NULL : p;
}

/* A v1 .npy with header text h (unpadded) and n data bytes of zeros. */
static const char *write_npy(const char *name, const char *h, size_t n) {
    static char buf[512];
    size_t hl = strlen(h);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)hl; buf[9] = 0;
    memcpy(buf + 10, h, hl);
    memset(buf + 10 + hl, 0, n);
    return write_bytes(name, buf, 10 + hl + n);
}

/* The training reader used to multiply the shape without overflow checks
 * (2^62 x 4 wrapped to 0 elements and was accepted) and to dereference a
 * missing ':' after 'fortran_order' (crash); it now reads through the tensor
 * layer's kl_npy_load_mem. */
KL_TEST(train_npy_reader_refuses_overflow_and_cut_header) {
    kl_err e = {0};
    tr_array a;
    const char *p = write_npy("ov.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n", 16);
    KT_CHECK(kl__train_npy_read(p, &a, &e) != 0);
    KT_CHECK(a.f == NULL);
    p = write_npy("cut.npy", "{'descr': '<f4', 'shape': (1,), 'fortran_order'", 0);
    KT_CHECK(kl__train_npy_read(p, &a, &e) != 0);
    KT_CONTAINS(e.msg, "cut.npy");
    /* what the tensor layer reads, the training path reads: big-endian, v2, ints */
    int64_t dims[2] = {2, 3};
    kl_tensor *t = NULL;
    KT_OK(kl_tensor_new(KL_I16, 2, dims, KL_TAG_OTHER, &t, &e), &e);
    for (int i = 0; i < 6; i++) ((int16_t *)t->data)[i] = (int16_t)(i - 2);
    p = kt_path("i2.npy");
    KT_OK(kl_npy_save(p, t, &e), &e);
    kl_tensor_free(t);
    KT_OK(kl__train_npy_read(p, &a, &e), &e);
    KT_EQ_INT(a.rank, 2);
    KT_EQ_INT(a.dims[1], 3);
    KT_EQ_INT(a.is_int, 1);
    KT_NEAR(a.f[0], -2, 0);
    KT_NEAR(a.f[5], 3, 0);
    kl__train_array_free(&a);
}

static int st_count(void *ctx, const char *name, const char *dtype, int rank, const int64_t *dims, const void *data,
                    size_t nbytes, kl_err *e) {
    (void)name; (void)dtype; (void)rank; (void)dims; (void)data; (void)nbytes; (void)e;
    ++*(int *)ctx;
    return KL_OK;
}

/* A safetensors entry whose shape disagrees with its data_offsets, or whose
 * shape is not whole numbers, or whose dtype is unknown, is refused by the
 * reader before any consumer sees it (it was passed on). */
KL_TEST(train_safetensors_reader_checks_entries) {
    static const char *bad[] = {
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1000000],\"data_offsets\":[0,8]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1e300,-1.5],\"data_offsets\":[0,4]}}",
        "{\"x\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8.5]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
        "{\"x\":[1,2]}",
    };
    static const char *why[] = {"8 bytes for 1000000 elements", "shape[0]", "unknown dtype", "offsets", "shape[0]", "bad header entry"};
    kl_err e = {0};
    for (size_t k = 0; k < KL_ARRAY_LEN(bad); k++) {
        char buf[256];
        size_t hl = strlen(bad[k]);
        for (int i = 0; i < 8; i++) buf[i] = (char)((uint64_t)hl >> (8 * i));
        memcpy(buf + 8, bad[k], hl);
        memset(buf + 8 + hl, 0, 16);
        const char *p = write_bytes("bad.safetensors", buf, 8 + hl + 16);
        int n = 0;
        KT_CHECK(kl__train_safetensors_read(p, st_count, &n, NULL, &e) == KL_EPARSE);
        KT_EQ_INT(n, 0);
        KT_CONTAINS(e.msg, why[k]);
    }
}
