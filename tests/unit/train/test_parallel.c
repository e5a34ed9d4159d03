/* The data-parallel step's use of the plan's node hook (src/train/parallel.c,
 * kl_plan_run_into_hook): every trainable tensor's gradient has a producing
 * node, the hook runs after it, and the gradient is already final there (it
 * equals what the whole run leaves), so a bucket's all-reduce may start
 * while the rest of the backward pass runs; the hook changes no result. */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "train/train_int.h"

typedef struct {
    tr_model *m;
    tr_tensor_ref refs[64];
    int nt, node_of[64], seen[64];
    float *snap; /* each gradient as it was right after its producing node */
} hook_rec;

static void record(void *ctx, int node) {
    hook_rec *h = ctx;
    for (int r = 0; r < h->nt; r++)
        if (h->node_of[r] == node) {
            int64_t off = h->refs[r].data - h->m->params;
            memcpy(h->snap + off, h->m->grads + off, (size_t)h->refs[r].n * 4);
            h->seen[r]++;
        }
}

KL_TEST(train_step_hook_gradients_final_at_their_node) {
    const char *t =
        "seed: 5\ninput: {shape: [2, 6, 6]}\nlayers:\n  - {type: conv2d, out: 4, kernel: 3, padding: 1}\n"
        "  - {type: batchnorm2d}\n  - {type: relu}\n  - {type: maxpool2d, kernel: 2}\n  - {type: flatten}\n"
        "  - {type: dropout, p: 0.3}\n  - {type: linear, out: 20}\n  - {type: gelu}\n  - {type: linear, out: 3}\n";
    kl_err e = {0};
    tr_spec *s = NULL;
    tr_model *m = NULL;
    uint64_t act, ws;
    KT_OK(kl__train_spec_load_str(t, "t.yaml", &s, &e), &e);
    KT_OK(kl__train_model_new(s, &m, &e), &e);
    KT_OK(kl__train_step_prepare(m, 16, &act, &ws, &e), &e);
    KT_OK(kl__train_model_alloc(m, 16, &e), &e);
    kl_rng r;
    kl_rng_seed(&r, 5);
    kl__train_model_init(m, &r);
    float x[16 * 72];
    int64_t y[16];
    for (int i = 0; i < 16 * 72; i++) x[i] = (float)kl_rng_normal(&r);
    for (int i = 0; i < 16; i++) y[i] = i % 3;
    static hook_rec h;
    memset(&h, 0, sizeof h);
    h.m = m;
    h.nt = kl__train_model_tensors(m, h.refs, 64);
    kl__train_step_grad_producers(m, h.node_of, h.nt);
    h.snap = calloc((size_t)m->nparams + 1, 4);
    float *plain = calloc((size_t)m->nparams + 1, 4);
    double l0, l1;
    KT_OK(kl__train_step_run(m, x, y, NULL, 16, 0, 1.0f, &l0, &e), &e); /* without the hook */
    memcpy(plain, m->grads, (size_t)m->nparams * 4);
    memset(m->grads, 0, (size_t)m->nparams * 4);
    kl__train_step_set_hook(m, record, &h);
    KT_OK(kl__train_step_run(m, x, y, NULL, 16, 0, 1.0f, &l1, &e), &e);
    kl__train_step_set_hook(m, NULL, NULL);
    KT_CHECK(l0 == l1);
    KT_CHECK(!memcmp(plain, m->grads, (size_t)m->nparams * 4)); /* the hook changes nothing */
    int trainable = 0;
    for (int i = 0; i < h.nt; i++) {
        if (h.refs[i].buffer) continue;
        trainable++;
        KT_CHECKF(h.node_of[i] >= 0, "%s: no producing node", h.refs[i].name);
        KT_CHECKF(h.seen[i] == 1, "%s: hook after its node %d times", h.refs[i].name, h.seen[i]);
        int64_t off = h.refs[i].data - m->params;
        KT_CHECKF(!memcmp(h.snap + off, m->grads + off, (size_t)h.refs[i].n * 4), "%s: not final at its node",
                  h.refs[i].name);
    }
    KT_EQ_INT(trainable, 8); /* conv w/b, bn gamma/beta, two linears w/b */
    free(h.snap);
    free(plain);
    kl__train_model_free(m);
    kl__train_spec_free(s);
}
