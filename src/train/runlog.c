/* keel train -> experiment store: when kl_train_opts.tracking is set, the
 * training run is a run of the store (include/keel/track.h): params from the
 * spec, the final metrics, the artifacts of the model folder, and the
 * lineage (dataset version, feature hash, spec hash, code version). The
 * per-epoch metrics are logged by the training loop as each epoch ends (one
 * transaction per epoch), so a killed run keeps them; the store marks it
 * killed on its next open. */
#include <stdlib.h>
#include <string.h>

#include "train/runlog.h"

#ifndef KEEL_VERSION
#define KEEL_VERSION "unknown"
#define KEEL_GIT_COMMIT "unknown"
#endif

static const char *const loss_names[] = {"cross_entropy", "bce_with_logits", "mse"};
static const char *const opt_names[] = {"sgd", "adamw"};
static const char *const sched_names[] = {"constant", "cosine", "exponential", "step"};

int tr_runlog_start(const kl_train_opts *o, const tr_spec *s, const char *spec_path, kl_track **tp, kl_track_run **rp, kl_err *e) {
    *tp = NULL;
    *rp = NULL;
    kl_track *t = NULL;
    kl_track_run *r = NULL;
    int rc = kl_track_open(o->tracking, &t, e);
    if (rc) return rc;
    const char *base = strrchr(spec_path, '/');
    if ((rc = kl_track_run_start(t, o->experiment ? o->experiment : "train", o->run_name ? o->run_name : base ? base + 1 : spec_path,
                                 o->parent_run, &r, e)))
        goto fail;
    char v[16][64];
    int n = 0;
    kl_kv kv[16];
#define P(k, ...) do { snprintf(v[n], sizeof v[n], __VA_ARGS__); kv[n].key = k; kv[n].value = v[n]; n++; } while (0)
    P("seed", "%llu", (unsigned long long)s->seed);
    P("layers", "%d", s->nlayers);
    P("loss", "%s", loss_names[s->loss]);
    P("optimizer", "%s", opt_names[s->opt]);
    P("lr", "%g", s->lr);
    P("weight_decay", "%g", s->wd);
    P("schedule", "%s", sched_names[s->sched]);
    P("epochs", "%lld", (long long)s->epochs);
    P("batch_size", "%lld", (long long)s->batch);
    P("precision", "%s", s->fp16 ? "fp16" : "fp32");
    P("grad_clip", "%g", s->clip);
#undef P
    char spec_hash[65];
    kl_sha256_buf_hex(s->text, strlen(s->text), spec_hash);
    kl_track_lineage lin = {0};
    lin.spec_hash = spec_hash;
    lin.code_version = KEEL_VERSION " (" KEEL_GIT_COMMIT ")";
    if ((rc = kl_track_log_params(r, kv, (size_t)n, e)) || (rc = kl_track_set_lineage(r, &lin, e)) ||
        (rc = kl_track_set_tag(r, "out_dir", o->out_dir, e)) || (rc = kl_track_set_tag(r, "spec", spec_path, e)))
        goto fail;
    *tp = t;
    *rp = r;
    return KL_OK;
fail:
    if (r) kl_track_run_end(r, KL_RUN_FAILED, NULL);
    kl_track_close(t);
    return rc;
}

int tr_runlog_finish(kl_track *t, kl_track_run *r, const tr_spec *s, const char *out_dir, const tr_dsinfo *dsi,
                     const kl_metric_point *pts, size_t npts, kl_err *e) {
    static const char *files[] = {"model.onnx", "meta.json", "card.md", "metrics.csv", "curves.svg", "spec.yaml", "features.json"};
    int rc = npts ? kl_track_log_metrics(r, pts, npts, e) : KL_OK;
    if (!rc && s->ds) {
        kl_track_lineage lin = {0};
        lin.dataset_version = dsi->dataset_version[0] ? dsi->dataset_version : dsi->manifest_sha[0] ? dsi->manifest_sha : NULL;
        lin.feature_hash = dsi->feature_hash[0] ? dsi->feature_hash : NULL;
        rc = kl_track_set_lineage(r, &lin, e);
        if (!rc && lin.dataset_version) rc = kl_track_set_tag(r, "dataset_version", lin.dataset_version, e);
        if (!rc && lin.feature_hash) rc = kl_track_set_tag(r, "feature_hash", lin.feature_hash, e);
        if (!rc) rc = kl_track_set_tag(r, "dataset", s->ds->path, e);
    }
    char p[4096];
    for (size_t i = 0; i < KL_ARRAY_LEN(files) && !rc; i++) {
        snprintf(p, sizeof p, "%s/%s", out_dir, files[i]);
        if (kl_path_exists(p)) rc = kl_track_log_artifact(r, p, e);
    }
    int rc2 = kl_track_run_end(r, rc ? KL_RUN_FAILED : KL_RUN_FINISHED, rc ? NULL : e);
    kl_track_close(t);
    return rc ? rc : rc2;
}

void tr_runlog_fail(kl_track *t, kl_track_run *r) {
    if (r) kl_track_run_end(r, KL_RUN_FAILED, NULL);
    kl_track_close(t);
}
