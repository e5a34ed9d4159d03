/* keel train -> experiment store: when kl_train_opts.tracking is set, the
 * training run is a run of the store (include/keel/track.h): params (the
 * resolved spec in full: every key under its dotted name, each layer's
 * sizes), the final metrics, the artifacts of the model folder, and the
 * lineage (dataset version, feature hash, spec hash, code version). The
 * per-epoch metrics are logged by the training loop as each epoch ends (one
 * transaction per epoch), so a killed run keeps them; the store marks it
 * killed on its next open. */
#include <stdarg.h>
#include <stdio.h>
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

/* ---- params: the resolved spec in full, under the spec's own dotted keys
 * (the names --set and keel tune use: optimizer.lr, layers.0.out), with
 * every default filled in and each layer's resolved sizes ---------------- */

typedef struct {
    kl_kv *kv;
    char **owned;
    size_t n, cap;
    int oom;
} params;

static void padd(params *p, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void padd(params *p, const char *key, const char *fmt, ...) {
    if (p->oom) return;
    if (p->n == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        kl_kv *nkv = realloc(p->kv, nc * sizeof *nkv);
        if (nkv) p->kv = nkv;
        char **no = nkv ? realloc(p->owned, nc * 2 * sizeof *no) : NULL;
        if (!nkv || !no) {
            p->oom = 1;
            return;
        }
        p->owned = no;
        p->cap = nc;
    }
    char val[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof val, fmt, ap);
    va_end(ap);
    char *k = strdup(key), *v = strdup(val);
    if (!k || !v) {
        free(k);
        free(v);
        p->oom = 1;
        return;
    }
    p->owned[2 * p->n] = k;
    p->owned[2 * p->n + 1] = v;
    p->kv[p->n++] = (kl_kv){k, v};
}

static void params_free(params *p) {
    for (size_t i = 0; i < 2 * p->n; i++) free(p->owned[i]);
    free(p->owned);
    free(p->kv);
}

/* the shortest of %.15g / %.17g that reads back as the same double */
static const char *num(double v, char *buf, size_t n) {
    snprintf(buf, n, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
    return buf;
}

static const char *dims_text(int rank, const int64_t *d, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static void layer_params(params *p, const tr_layer *l, int i) {
    const tr_lspec *L = &l->sp;
    char k[96], a[64], b[64];
#define LK(name) (snprintf(k, sizeof k, "layers.%d.%s", i, name), k)
    padd(p, LK("type"), "%s", kl__train_ltype_name(L->type));
    padd(p, LK("name"), "%s", L->name);
    if (L->in_name[0][0] && L->type != TR_L_ADD) padd(p, LK("input"), "%s", L->in_name[0]);
    switch (L->type) {
    case TR_L_LINEAR:
        padd(p, LK("in"), "%lld", (long long)(l->w_n / L->out));
        padd(p, LK("out"), "%lld", (long long)L->out);
        padd(p, LK("bias"), "%s", L->bias ? "true" : "false");
        break;
    case TR_L_CONV2D:
        padd(p, LK("in"), "%lld", (long long)(l->w_n / (L->out * L->k[0] * L->k[1])));
        padd(p, LK("out"), "%lld", (long long)L->out);
        padd(p, LK("bias"), "%s", L->bias ? "true" : "false");
        __attribute__((fallthrough)); /* kernel, stride, padding */
    case TR_L_MAXPOOL2D:
    case TR_L_AVGPOOL2D:
        padd(p, LK("kernel"), "%s", dims_text(2, L->k, a, sizeof a));
        padd(p, LK("stride"), "%s", dims_text(2, L->s, a, sizeof a));
        padd(p, LK("padding"), "%s", dims_text(2, L->p, a, sizeof a));
        break;
    case TR_L_BATCHNORM2D:
        padd(p, LK("momentum"), "%s", num(L->momentum, a, sizeof a));
        __attribute__((fallthrough));
    case TR_L_LAYERNORM: padd(p, LK("eps"), "%s", num(L->eps, a, sizeof a)); break;
    case TR_L_DROPOUT: padd(p, LK("p"), "%s", num(L->p_drop, a, sizeof a)); break;
    case TR_L_EMBEDDING:
        padd(p, LK("num"), "%lld", (long long)L->num);
        padd(p, LK("dim"), "%lld", (long long)L->out);
        break;
    case TR_L_ADD: padd(p, LK("inputs"), "[%s, %s]", L->in_name[0], L->in_name[1]); break;
    default: break;
    }
    padd(p, LK("shape"), "%s", dims_text(l->rank, l->dims, b, sizeof b)); /* per-sample output */
    if (l->w_n + l->b_n > 0) padd(p, LK("parameters"), "%lld", (long long)(l->w_n + l->b_n));
#undef LK
}

static void spec_params(params *p, const tr_spec *s, const tr_model *m) {
    char a[64];
    /* short names kept from the first runs (filters like params.lr) */
    padd(p, "seed", "%llu", (unsigned long long)s->seed);
    padd(p, "layers", "%d", s->nlayers);
    padd(p, "loss", "%s", loss_names[s->loss]);
    padd(p, "optimizer", "%s", opt_names[s->opt]);
    padd(p, "lr", "%g", s->lr);
    padd(p, "weight_decay", "%g", s->wd);
    padd(p, "schedule", "%s", sched_names[s->sched]);
    padd(p, "epochs", "%lld", (long long)s->epochs);
    padd(p, "batch_size", "%lld", (long long)s->batch);
    padd(p, "precision", "%s", s->fp16 ? "fp16" : "fp32");
    padd(p, "grad_clip", "%g", s->clip);
    /* the resolved spec */
    padd(p, "input.shape", "%s", dims_text(s->in_rank, s->in_dims, a, sizeof a));
    padd(p, "input.dtype", "%s", s->in_int ? "int64" : "float32");
    for (int i = 0; i < m->n; i++) layer_params(p, &m->L[i], i);
    padd(p, "model.parameters", "%lld", (long long)m->nparams);
    padd(p, "loss.type", "%s", loss_names[s->loss]);
    padd(p, "loss.label_smoothing", "%s", num(s->label_smoothing, a, sizeof a));
    if (s->classes) padd(p, "loss.classes", "%lld", (long long)s->classes);
    if (s->nclass_w) {
        char w[4096];
        size_t k = 0;
        for (int i = 0; i < s->nclass_w && k < sizeof w - 40; i++)
            k += (size_t)snprintf(w + k, sizeof w - k, "%s%s", i ? ", " : "", num(s->class_w[i], a, sizeof a));
        padd(p, "loss.class_weights", "[%s]", w);
    }
    padd(p, "optimizer.type", "%s", opt_names[s->opt]);
    padd(p, "optimizer.lr", "%s", num(s->lr, a, sizeof a));
    padd(p, "optimizer.weight_decay", "%s", num(s->wd, a, sizeof a));
    if (s->opt == TR_OPT_SGD) {
        padd(p, "optimizer.momentum", "%s", num(s->momentum, a, sizeof a));
        padd(p, "optimizer.dampening", "%s", num(s->dampening, a, sizeof a));
        padd(p, "optimizer.nesterov", "%s", s->nesterov ? "true" : "false");
    } else {
        char b2[64];
        padd(p, "optimizer.betas", "[%s, %s]", num(s->beta1, a, sizeof a), num(s->beta2, b2, sizeof b2));
        padd(p, "optimizer.eps", "%s", num(s->adam_eps, a, sizeof a));
    }
    padd(p, "schedule.type", "%s", sched_names[s->sched]);
    padd(p, "schedule.warmup_steps", "%lld", (long long)s->warmup);
    if (s->sched != TR_SCHED_CONSTANT) padd(p, "schedule.min_lr", "%s", num(s->min_lr, a, sizeof a));
    if (s->sched == TR_SCHED_EXPONENTIAL || s->sched == TR_SCHED_STEP)
        padd(p, "schedule.gamma", "%s", num(s->gamma, a, sizeof a));
    if (s->sched == TR_SCHED_STEP) padd(p, "schedule.step_size", "%lld", (long long)s->step_size);
    padd(p, "train.epochs", "%lld", (long long)s->epochs);
    padd(p, "train.batch_size", "%lld", (long long)s->batch);
    padd(p, "train.max_steps", "%lld", (long long)s->max_steps);
    padd(p, "train.grad_clip", "%s", num(s->clip, a, sizeof a));
    padd(p, "train.val_fraction", "%s", num(s->val_fraction, a, sizeof a));
    padd(p, "train.shuffle", "%s", s->shuffle ? "true" : "false");
    padd(p, "train.drop_last", "%s", s->drop_last ? "true" : "false");
    padd(p, "train.checkpoint_every", "%lld", (long long)s->ckpt_every);
    padd(p, "train.precision", "%s", s->fp16 ? "fp16" : "fp32");
    padd(p, "train.deterministic", "%s", s->deterministic ? "true" : "false");
    padd(p, "train.distributed.micro_batches", "%lld", (long long)s->micro_batches);
    padd(p, "train.distributed.bucket_mb", "%s", num(s->bucket_mb, a, sizeof a));
    padd(p, "train.distributed.first_bucket_mb", "%s", num(s->first_bucket_mb, a, sizeof a));
    padd(p, "train.distributed.check_every", "%lld", (long long)s->check_every);
    padd(p, "train.distributed.timeout", "%s", num(s->dist_timeout, a, sizeof a));
    if (s->patience) {
        padd(p, "train.early_stopping.patience", "%lld", (long long)s->patience);
        padd(p, "train.early_stopping.monitor", "%s", s->monitor);
        padd(p, "train.early_stopping.min_delta", "%s", num(s->min_delta, a, sizeof a));
    }
    if (s->init_path) padd(p, "train.init", "%s", s->init_path);
    if (s->x_path) padd(p, "data.x", "%s", s->x_path);
    if (s->y_path) padd(p, "data.y", "%s", s->y_path);
    if (s->val_x) padd(p, "data.val_x", "%s", s->val_x);
    if (s->val_y) padd(p, "data.val_y", "%s", s->val_y);
    if (s->shards) padd(p, "data.shards", "%s", s->shards);
    if (s->val_shards) padd(p, "data.val_shards", "%s", s->val_shards);
    if (s->ds) padd(p, "data.dataset", "%s", s->ds->path);
}

int kl__train_runlog_start(const kl_train_opts *o, const tr_spec *s, const tr_model *m, const char *spec_path,
                        kl_track **tp, kl_track_run **rp, kl_err *e) {
    *tp = NULL;
    *rp = NULL;
    kl_track *t = NULL;
    kl_track_run *r = NULL;
    params p = {0};
    kl_store_loc loc;
    int rc = kl_track_store_resolve(o->tracking, o->tracking_how, &loc, e);
    if (rc || (rc = kl_track_open_loc(&loc, 1, &t, e))) return rc;
    const char *base = strrchr(spec_path, '/');
    if ((rc = kl_track_run_start(t, o->experiment ? o->experiment : "train", o->run_name ? o->run_name : base ? base + 1 : spec_path,
                                 o->parent_run, &r, e)))
        goto fail;
    spec_params(&p, s, m);
    if (p.oom) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    char spec_hash[65];
    kl_sha256_buf_hex(s->text, strlen(s->text), spec_hash);
    kl_track_lineage lin = {0};
    lin.spec_hash = spec_hash;
    lin.code_version = KEEL_VERSION " (" KEEL_GIT_COMMIT ")";
    if ((rc = kl_track_log_params(r, p.kv, p.n, e)) || (rc = kl_track_set_lineage(r, &lin, e)) ||
        (rc = kl_track_set_tag(r, "out_dir", o->out_dir, e)) || (rc = kl_track_set_tag(r, "spec", spec_path, e)))
        goto fail;
    params_free(&p);
    *tp = t;
    *rp = r;
    return KL_OK;
fail:
    params_free(&p);
    if (r) kl_track_run_end(r, KL_RUN_FAILED, NULL);
    kl_track_close(t);
    return rc;
}

int kl__train_runlog_finish(kl_track *t, kl_track_run *r, const tr_spec *s, const char *out_dir, const tr_dsinfo *dsi,
                     const kl_metric_point *pts, size_t npts, kl_err *e) {
    static const char *files[] = {"model.onnx", "meta.json", "card.md",       "metrics.csv",
                                  "curves.svg", "spec.yaml", "features.json", "profile.json"};
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

void kl__train_runlog_fail(kl_track *t, kl_track_run *r) {
    if (r) kl_track_run_end(r, KL_RUN_FAILED, NULL);
    kl_track_close(t);
}
