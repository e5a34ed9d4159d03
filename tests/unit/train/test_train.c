/* Training engine: spec errors (line, layer, suggestion), shape inference,
 * optimizer semantics, schedules, clipping, safetensors round trip and
 * bit-identical training at 1 and 2 threads. */
#include <stdlib.h>

#include "../harness.h"
#include "train/train_int.h"

static int spec_err(const char *text, kl_err *e) {
    tr_spec *s = NULL;
    tr_model *m = NULL;
    int rc = tr_spec_load_str(text, "t.yaml", &s, e);
    if (!rc) rc = tr_model_new(s, &m, e);
    tr_model_free(m);
    tr_spec_free(s);
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
    KT_OK(tr_spec_load_str(t, "t.yaml", &s, &e), &e);
    KT_OK(tr_model_new(s, &m, &e), &e);
    KT_EQ_INT(m->out_numel, 5);
    KT_EQ_INT(m->L[5].dims[1], 6);
    KT_EQ_INT(m->nparams, 8 * 3 * 9 + 8 + 16 + 8 * 8 * 9 + 8 + 16 + 8 * 5 + 5);
    tr_model_free(m);
    tr_spec_free(s);
}

KL_TEST(train_sgd_and_adamw_semantics) {
    tr_spec s = {0};
    s.opt = TR_OPT_SGD; s.momentum = 0.9; s.wd = 0.1; s.nesterov = 1;
    tr_optim o;
    kl_err e = {0};
    KT_OK(tr_optim_init(&o, &s, 1, &e), &e);
    float p = 1, g = 0.5f;
    tr_optim_step(&o, &s, &p, &g, 0.1); /* d = 0.5 + 0.1 = 0.6; buf = 0.6; d = 0.6 + 0.9*0.6 = 1.14 */
    KT_NEAR(p, 1 - 0.1 * 1.14, 1e-6);
    tr_optim_free(&o);
    s.opt = TR_OPT_ADAMW; s.beta1 = 0.9; s.beta2 = 0.999; s.adam_eps = 1e-8; s.wd = 0.01;
    KT_OK(tr_optim_init(&o, &s, 1, &e), &e);
    p = 1;
    tr_optim_step(&o, &s, &p, &g, 0.01); /* p*(1-1e-4) - 0.01 * m_hat/(sqrt(v_hat)+eps) = 0.9999 - 0.01 */
    KT_NEAR(p, 0.9999 - 0.01, 1e-6);
    tr_optim_free(&o);
}

KL_TEST(train_schedules_and_clip) {
    tr_spec s = {0};
    s.lr = 1; s.sched = TR_SCHED_COSINE; s.warmup = 10; s.min_lr = 0;
    KT_NEAR(tr_sched_lr(&s, 0, 0, 110), 0.1, 1e-12);
    KT_NEAR(tr_sched_lr(&s, 10, 0, 110), 1, 1e-12);
    KT_NEAR(tr_sched_lr(&s, 60, 0, 110), 0.5, 1e-12);
    s.warmup = 0; s.sched = TR_SCHED_STEP; s.gamma = 0.5; s.step_size = 2;
    KT_NEAR(tr_sched_lr(&s, 0, 5, 0), 0.25, 1e-12);
    s.sched = TR_SCHED_EXPONENTIAL;
    KT_NEAR(tr_sched_lr(&s, 0, 3, 0), 0.125, 1e-12);
    float g[2] = {3, 4};
    double n = tr_clip_grad(g, 2, 1.0);
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
    KT_OK(tr_safetensors_write(kt_path("x.safetensors"), t, 2, "{\"k\":\"v\"}", &e), &e);
    st_ctx c = {0};
    char *meta = NULL;
    KT_OK(tr_safetensors_read(kt_path("x.safetensors"), st_cb, &c, &meta, &e), &e);
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
    int rc = tr_spec_load_str(t, "t.yaml", &s, e);
    if (!rc) rc = tr_model_new(s, &m, e);
    if (!rc) rc = kl_pool_new(threads, &pool, e);
    if (!rc) rc = tr_step_prepare(m, 130, &act, &ws, e);
    if (!rc) rc = tr_model_alloc(m, 130, e);
    if (!rc) rc = tr_optim_init(&o, s, m->nparams, e);
    if (!rc) {
        m->pool = pool;
        kl_rng r;
        kl_rng_seed(&r, 7);
        tr_model_init(m, &r);
        float *x = malloc(130 * 72 * 4);
        int64_t y[130];
        for (int i = 0; i < 130 * 72; i++) x[i] = (float)kl_rng_normal(&r);
        for (int i = 0; i < 130; i++) y[i] = i % 3;
        for (int step = 0; step < 5 && !rc; step++) {
            double loss;
            rc = tr_step_run(m, x, y, NULL, 130, step, 1.0f, &loss, e);
            tr_clip_grad(m->grads, m->nparams, 1.0);
            tr_optim_step(&o, s, m->params, m->grads, 0.01);
        }
        memcpy(out_params, m->params, (size_t)(m->nparams + m->nbuf) * 4);
        *np = m->nparams + m->nbuf;
        free(x);
    }
    tr_optim_free(&o);
    kl_pool_free(pool);
    tr_model_free(m);
    tr_spec_free(s);
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
