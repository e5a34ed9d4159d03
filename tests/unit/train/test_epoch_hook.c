/* The per-epoch hook of kl_train_run (kl_train_opts.on_epoch, used by keel
 * tune): called once per epoch in order with the epoch's losses and
 * validation accuracy; a non-zero return stops training at once, leaving
 * metrics.csv but no model artifacts. */
#include <keel/tensor.h>
#include <keel/train.h>
#include <math.h>
#include <stdlib.h>

#include "../harness.h"

typedef struct { int calls, stop_after; int64_t last_epoch; int ordered, sane; } hook_log;

static int hook(void *ctx, const kl_train_epoch *ep) {
    hook_log *h = ctx;
    h->ordered &= ep->epoch == h->last_epoch + 1;
    h->last_epoch = ep->epoch;
    h->sane &= isfinite(ep->train_loss) && isfinite(ep->val_loss) && ep->val_accuracy >= 0 && ep->val_accuracy <= 1 && ep->step > 0;
    h->calls++;
    return h->stop_after > 0 && h->calls >= h->stop_after;
}

static int write_data(char *spec, size_t n, kl_err *e) {
    int64_t dx[2] = {60, 4}, dy[1] = {60};
    kl_tensor *x = NULL, *y = NULL;
    int rc = kl_tensor_new(KL_F32, 2, dx, KL_TAG_OTHER, &x, e);
    if (!rc) rc = kl_tensor_new(KL_I64, 1, dy, KL_TAG_OTHER, &y, e);
    if (!rc) {
        float *xv = x->data;
        int64_t *yv = y->data;
        for (int i = 0; i < 60; i++) {
            yv[i] = i % 3;
            for (int k = 0; k < 4; k++) xv[i * 4 + k] = (float)((k == yv[i]) + 0.1 * ((i * 7 + k * 3) % 5));
        }
        char xp[512], yp[512];
        snprintf(xp, sizeof xp, "%s", kt_path("hook_x.npy"));
        snprintf(yp, sizeof yp, "%s", kt_path("hook_y.npy"));
        rc = kl_npy_save(xp, x, e);
        if (!rc) rc = kl_npy_save(yp, y, e);
        snprintf(spec, n, "seed: 3\ninput: {shape: [4]}\nlayers:\n  - {type: linear, out: 8}\n  - {type: relu}\n  - {type: linear, out: 3}\n"
                          "loss: {type: cross_entropy}\noptimizer: {type: adamw, lr: 0.01}\n"
                          "train: {epochs: 5, batch_size: 16, val_fraction: 0.25}\ndata: {x: %s, y: %s}\n", xp, yp);
    }
    kl_tensor_free(x);
    kl_tensor_free(y);
    return rc;
}

/* Trains spec into a fresh folder under the test dir with the hook logging into h. */
static int run_with_hook(const char *spec, const char *name, FILE *rep, hook_log *h, char *out, size_t n, kl_err *e) {
    snprintf(out, n, "%s", kt_path(name));
    kl_train_opts o = {0};
    o.out_dir = out;
    o.quiet = 1;
    o.report = rep;
    o.on_epoch = hook;
    o.on_epoch_ctx = h;
    return kl_train_run(spec, &o, e);
}

KL_TEST(train_epoch_hook_reports_and_stops) {
    kl_err e = {0};
    char text[2048], sp[512], out[512], p[600];
    KT_OK(write_data(text, sizeof text, &e), &e);
    snprintf(sp, sizeof sp, "%s", kt_path("hook_spec.yaml"));
    KT_OK(kl_write_file_atomic(sp, text, strlen(text), &e), &e);
    FILE *rep = fopen(kt_path("hook_report.txt"), "w");
    KT_CHECK(rep);
    /* runs to the end: one call per epoch */
    hook_log h = {0, 0, -1, 1, 1};
    KT_OK(run_with_hook(sp, "hook_full", rep, &h, out, sizeof out, &e), &e);
    KT_EQ_INT(h.calls, 5);
    KT_CHECK(h.ordered && h.sane);
    snprintf(p, sizeof p, "%s/model.onnx", out);
    KT_CHECK(kl_path_exists(p));
    /* stopped after the second epoch: metrics only */
    hook_log s = {0, 2, -1, 1, 1};
    KT_OK(run_with_hook(sp, "hook_stopped", rep, &s, out, sizeof out, &e), &e);
    KT_EQ_INT(s.calls, 2);
    KT_CHECK(s.ordered && s.sane);
    snprintf(p, sizeof p, "%s/model.onnx", out);
    KT_CHECK(!kl_path_exists(p));
    snprintf(p, sizeof p, "%s/metrics.csv", out);
    char *csv = NULL;
    size_t len = 0;
    KT_OK(kl_read_file(p, &csv, &len, &e), &e);
    int vals = 0;
    for (char *q = csv; (q = strstr(q, ",val,")); q++) vals++;
    KT_EQ_INT(vals, 2);
    kl_mem_free(csv);
    fclose(rep);
}
