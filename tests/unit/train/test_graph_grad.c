/* Whole-model gradient checks: the trainer's own train-mode graph (as
 * src/train/graph.c builds it from a spec: BatchNorm with batch statistics,
 * seeded dropout, the loss op) extended by kl_graph_autodiff, built in
 * float64 and run through the executor, against central finite differences
 * of the loss for a spread of entries of every parameter. Covers every
 * layer type and the three losses (the graph helper checks rule by rule). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "keel/graph.h"
#include "train/train_int.h"

typedef struct {
    kl_graph *g;
    kl_plan *plan;
    void *arena;
    kl_tensor **in;
    int n_in, loss_out;
} gc;

static double run_loss(gc *c, kl_tensor **outs, kl_err *e) {
    int n_out = c->g->n_outputs;
    kl_tensor *tmp[256];
    kl_tensor **o = outs ? outs : tmp;
    if (kl_plan_run(c->plan, c->g, (const kl_tensor *const *)c->in, (size_t)c->n_in, o, (size_t)n_out, c->arena, NULL, e)) return NAN;
    double l = ((double *)o[c->loss_out]->data)[0];
    if (!outs)
        for (int i = 0; i < n_out; i++) kl_tensor_free(o[i]);
    return l;
}

/* Checks d loss / d every parameter of the spec's model at batch B; returns
 * the number of entries checked (-1 on a setup error, with e set). */
static int check_spec(const char *text, int64_t B, double *worst, kl_err *e) {
    tr_spec *s = NULL;
    tr_model *m = NULL;
    gc c = {0};
    int checked = -1, wrt[512], grads[512], nw = 0, is_p[512] = {0};
    kl_tensor *outs[256] = {0};
    *worst = 0;
    if (kl__train_spec_load_str(text, "gc.yaml", &s, e) || kl__train_model_new(s, &m, e)) goto done;
    m->f64 = 1;
    if (kl__train_graph_build(m, TR_G_TRAIN, 0, &c.g, e)) goto done;
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
    c.n_in = c.g->n_inputs;
    c.in = calloc((size_t)c.n_in, sizeof *c.in);
    kl_rng r;
    kl_rng_seed(&r, 11);
    for (int i = 0; i < c.n_in; i++) {
        const kl_value *v = &c.g->values[c.g->inputs[i]];
        int64_t d[KL_MAX_DIMS];
        for (int k = 0; k < v->rank; k++) d[k] = v->dims[k] < 0 ? B : v->dims[k];
        if (kl_tensor_new(v->dtype, v->rank, d, KL_TAG_OTHER, &c.in[i], e)) goto done;
        kl_tensor *t = c.in[i];
        int64_t n = kl_tensor_numel(t);
        int ref = -1;
        for (int k = 0; k < nt; k++) if (!strcmp(refs[k].name, v->name)) ref = k;
        if (!strcmp(v->name, "labels")) for (int64_t k = 0; k < n; k++) ((int64_t *)t->data)[k] = k % m->out_numel;
        else if (!strcmp(v->name, "targets")) for (int64_t k = 0; k < n; k++) ((double *)t->data)[k] = s->loss == TR_LOSS_BCE ? (double)(k % 2) : kl_rng_normal(&r);
        else if (strstr(v->name, ".seed")) ((int64_t *)t->data)[0] = 12345;
        else if (v->dtype == KL_I64) for (int64_t k = 0; k < n; k++) ((int64_t *)t->data)[k] = (int64_t)kl_rng_below(&r, 7);
        else if (ref >= 0 && strstr(v->name, "running_var")) for (int64_t k = 0; k < n; k++) ((double *)t->data)[k] = 1;
        else if (ref >= 0 && strstr(v->name, "running_mean")) {}
        else for (int64_t k = 0; k < n; k++) ((double *)t->data)[k] = 0.5 * kl_rng_normal(&r);
        if (ref >= 0 && !refs[ref].buffer) { is_p[nw] = i; wrt[nw++] = c.g->inputs[i]; }
    }
    int lv = kl_graph_find_value(c.g, "loss");
    if (kl_graph_autodiff(c.g, lv, wrt, nw, grads, e) || kl_graph_finalize(c.g, e)) goto done;
    for (int i = 0; i < c.g->n_outputs; i++) if (c.g->outputs[i] == lv) c.loss_out = i;
    if (kl_plan_new(c.g, (const kl_tensor *const *)c.in, (size_t)c.n_in, &c.plan, e)) goto done;
    c.arena = kl_mem_alloc(kl_plan_arena_bytes(c.plan) + 64, KL_TAG_OTHER);
    if (isnan(run_loss(&c, outs, e))) goto done;
    checked = 0;
    for (int w = 0; w < nw; w++) {
        int go = -1;
        for (int i = 0; i < c.g->n_outputs; i++) if (c.g->outputs[i] == grads[w]) go = i;
        KL_ASSERT(go >= 0);
        double *p = c.in[is_p[w]]->data, *an = outs[go]->data;
        int64_t n = kl_tensor_numel(c.in[is_p[w]]);
        for (int64_t j = 0; j < n; j += n / 5 + 1) {
            double keep = p[j], h = 1e-6;
            p[j] = keep + h;
            double lp = run_loss(&c, NULL, e);
            p[j] = keep - h;
            double lm = run_loss(&c, NULL, e);
            p[j] = keep;
            double fd = (lp - lm) / (2 * h), err = fabs(fd - an[j]) / (1e-4 + fabs(fd) + fabs(an[j]));
            if (err > *worst) *worst = err;
            if (err > 1e-5) fprintf(stderr, "gradcheck: %s[%lld]: analytic %.9g, finite differences %.9g\n", c.g->values[wrt[w]].name, (long long)j, an[j], fd);
            checked++;
        }
    }
done:
    for (int i = 0; i < 256; i++) kl_tensor_free(outs[i]);
    if (c.in)
        for (int i = 0; i < c.n_in; i++) kl_tensor_free(c.in[i]);
    free(c.in);
    kl_mem_free(c.arena);
    kl_plan_free(c.plan);
    kl_graph_free(c.g);
    kl__train_model_free(m);
    kl__train_spec_free(s);
    return checked;
}

KL_TEST(train_graph_gradcheck_cnn_ce) {
    const char *t = "seed: 1\ninput: {shape: [2, 6, 6]}\nlayers:\n"
                    "  - {type: conv2d, out: 3, kernel: 3, padding: 1}\n  - {type: batchnorm2d}\n  - {type: relu}\n"
                    "  - {type: maxpool2d, kernel: 2}\n  - {type: flatten}\n  - {type: dropout, p: 0.25}\n"
                    "  - {type: linear, out: 8}\n  - {type: layernorm}\n  - {type: gelu}\n  - {type: linear, out: 4}\n"
                    "loss: {type: cross_entropy, label_smoothing: 0.1, class_weights: [1, 2, 0.5, 1]}\n";
    kl_err e = {0};
    double worst;
    int n = check_spec(t, 5, &worst, &e);
    KT_OK(n < 0 ? e.code : KL_OK, &e);
    KT_CHECK(n >= 40);
    KT_CHECK(worst < 1e-5);
}

KL_TEST(train_graph_gradcheck_pool_mse) {
    const char *t = "seed: 2\ninput: {shape: [3, 7, 7]}\nlayers:\n"
                    "  - {type: conv2d, out: 4, kernel: 3, stride: 2, padding: 1}\n  - {type: tanh}\n"
                    "  - {type: avgpool2d, kernel: 2, stride: 1}\n  - {type: global_avgpool}\n"
                    "  - {type: linear, out: 3}\n  - {type: sigmoid}\n  - {type: linear, out: 2}\n"
                    "loss: {type: mse}\n";
    kl_err e = {0};
    double worst;
    int n = check_spec(t, 4, &worst, &e);
    KT_OK(n < 0 ? e.code : KL_OK, &e);
    KT_CHECK(n >= 20);
    KT_CHECK(worst < 1e-5);
}

KL_TEST(train_graph_gradcheck_embedding_bce) {
    const char *t = "seed: 3\ninput: {shape: [4], dtype: int64}\nlayers:\n"
                    "  - {type: embedding, name: emb, num: 7, dim: 5}\n  - {type: linear, out: 5}\n  - {type: tanh, name: t}\n"
                    "  - {type: add, inputs: [emb, t]}\n  - {type: softmax}\n  - {type: flatten}\n  - {type: linear, out: 2}\n"
                    "loss: {type: bce_with_logits}\n";
    kl_err e = {0};
    double worst;
    int n = check_spec(t, 3, &worst, &e);
    KT_OK(n < 0 ? e.code : KL_OK, &e);
    KT_CHECK(n >= 20);
    KT_CHECK(worst < 1e-5);
}
