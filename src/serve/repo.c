/* The model repository: REPO/<model>/<version>/model.onnx with an optional
 * per-model config.yaml (batching, instances, priority levels and queue
 * policies, memory quota, version policy) and per-version meta.json (sha256
 * of every file) and features.json. A scan loads new or changed versions —
 * integrity check, session load, warm-up on synthetic inputs — outside the
 * server lock and swaps the version list atomically; replaced versions drain
 * through their reference counts. A refused version never replaces the one
 * that is serving. */
#include "serve_int.h"

#include <math.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ==================================================================
 * config.yaml
 * ================================================================== */

void kl__sv_cfg_default(sv_model_cfg *c) {
    memset(c, 0, sizeof *c);
    c->max_batch = SV_BATCH_DEFAULT_MAX;
    c->dynamic_batching = 1;
    c->max_queue_delay_us = SV_BATCH_DEFAULT_DELAY_US;
    c->instances = 1;
    c->levels = 1;
    c->default_level = 0;
    c->policy = SV_POLICY_LATEST;
    c->latest_n = 1;
    c->monitor_on = 1;
    kl_monitor_cfg_default(&c->monitor);
    c->fb_horizon_s = 3600;
    c->fb_capacity = 0; /* feedback is asked for: monitor: {feedback_capacity: N} */
    kl__sv_alert_cfg_default(&c->alert);
    for (int i = 0; i < SV_MAX_LEVELS; i++) {
        c->level[i].allow_timeout_override = 1;
        c->level[i].memory_share = 1.0;
        c->level[i].reserve_instances = SV_RESERVE_DEFAULT;
        c->level[i].shed_busy_us = SV_SHED_BUSY_DEFAULT_US;
    }
}

static int parse_level(const kl_node *n, sv_level_cfg *l, kl_err *e) {
    static const char *const keys[] = {"max_queue_size", "default_timeout_us", "allow_timeout_override",
                                       "rate_limit", "memory_share", "reserve_instances", "max_batch_size", "nice",
                                       "shed_busy_us"};
    if (kl_node_kind_of(n) != KL_NODE_MAP) return kl_node_error(n, e, KL_EINVAL, "expected a map");
    int rc = kl_spec_check_keys(n, keys, KL_ARRAY_LEN(keys), e);
    if (rc) return rc;
    if ((rc = kl_spec_int(n, "max_queue_size", l->max_queue, &l->max_queue, e))) return rc;
    if ((rc = kl_spec_int(n, "default_timeout_us", l->default_timeout_us, &l->default_timeout_us, e))) return rc;
    if ((rc = kl_spec_bool(n, "allow_timeout_override", l->allow_timeout_override, &l->allow_timeout_override, e)))
        return rc;
    if ((rc = kl_spec_double(n, "rate_limit", l->rate_limit, &l->rate_limit, e))) return rc;
    if ((rc = kl_spec_double(n, "memory_share", l->memory_share, &l->memory_share, e))) return rc;
    int64_t v;
    if ((rc = kl_spec_int(n, "reserve_instances", l->reserve_instances, &v, e))) return rc;
    if (v < 0 || v > 64) return kl_node_error(kl_node_get(n, "reserve_instances"), e, KL_EINVAL, "must be 0..64");
    l->reserve_instances = (int)v;
    if ((rc = kl_spec_int(n, "max_batch_size", l->max_batch, &v, e))) return rc;
    if (v < 0 || v > 65536) return kl_node_error(kl_node_get(n, "max_batch_size"), e, KL_EINVAL, "must be 0..65536");
    l->max_batch = (int)v;
    if ((rc = kl_spec_int(n, "nice", l->nice, &v, e))) return rc;
    if (v < 0 || v > 19) return kl_node_error(kl_node_get(n, "nice"), e, KL_EINVAL, "must be 0..19");
    l->nice = (int)v;
    if ((rc = kl_spec_int(n, "shed_busy_us", l->shed_busy_us, &l->shed_busy_us, e))) return rc;
    if (l->max_queue < 0 || l->default_timeout_us < 0 || l->rate_limit < 0 || l->shed_busy_us < 0)
        return kl_node_error(n, e, KL_EINVAL, "queue policy values must not be negative");
    if (l->memory_share < 0 || l->memory_share > 1)
        return kl_node_error(n, e, KL_EINVAL, "memory_share must be within 0..1, got %g", l->memory_share);
    return KL_OK;
}

/* on_store_error: fail | empty — what :predict does when the online store
 * does not answer */
static int parse_on_store_error(const kl_node *root, sv_model_cfg *c, kl_err *e) {
    const kl_node *n = kl_node_get(root, "on_store_error");
    if (!n) return KL_OK;
    const char *v = NULL;
    int rc = kl_node_str(n, &v, e);
    if (rc) return rc;
    if (v && !strcmp(v, "fail")) c->on_store_error_empty = 0;
    else if (v && !strcmp(v, "empty")) c->on_store_error_empty = 1;
    else return kl_node_error(n, e, KL_EINVAL, "on_store_error: expected fail or empty");
    return KL_OK;
}

int kl__sv_cfg_parse(const char *text, size_t len, const char *name, sv_model_cfg *c, kl_err *e) {
    static const char *const keys[] = {
        "max_batch_size", "dynamic_batching",     "instances",    "priority_levels", "default_priority",
        "queue_policy",   "default_queue_policy", "memory_quota", "version_policy",  "on_store_error", "monitor"};
    kl_doc *d = NULL;
    kl__sv_cfg_default(c);
    int rc = kl_doc_load_str(text, len, name, &d, e);
    if (rc) return rc;
    const kl_node *root = kl_doc_root(d);
    int64_t v;
    if (!root || kl_node_kind_of(root) == KL_NODE_NULL) goto done;
    if (kl_node_kind_of(root) != KL_NODE_MAP) { rc = kl_node_error(root, e, KL_EINVAL, "expected a map"); goto done; }
    if ((rc = kl_spec_check_keys(root, keys, KL_ARRAY_LEN(keys), e))) goto done;
    if ((rc = kl_spec_int(root, "max_batch_size", c->max_batch, &v, e))) goto done;
    if (v < 0 || v > 65536) { rc = kl_node_error(kl_node_get(root, "max_batch_size"), e, KL_EINVAL, "must be 0..65536"); goto done; }
    c->max_batch = (int)v;
    if ((rc = kl_spec_int(root, "instances", 1, &v, e))) goto done;
    if (v < 1 || v > 64) { rc = kl_node_error(kl_node_get(root, "instances"), e, KL_EINVAL, "must be 1..64"); goto done; }
    c->instances = (int)v;
    if ((rc = kl_spec_int(root, "priority_levels", 1, &v, e))) goto done;
    if (v < 1 || v > SV_MAX_LEVELS) {
        rc = kl_node_error(kl_node_get(root, "priority_levels"), e, KL_EINVAL, "must be 1..%d", SV_MAX_LEVELS);
        goto done;
    }
    c->levels = (int)v;
    if ((rc = kl_spec_int(root, "default_priority", c->levels, &v, e))) goto done;
    if (v < 1 || v > c->levels) {
        rc = kl_node_error(kl_node_get(root, "default_priority"), e, KL_EINVAL, "must be 1..%d", c->levels);
        goto done;
    }
    c->default_level = (int)v - 1;
    /* batching: on by default (kl__sv_cfg_default); `dynamic_batching: false`
     * or `max_batch_size: 0` (without dynamic_batching) turn it off */
    const kl_node *n = kl_node_get(root, "dynamic_batching");
    if (!n && c->max_batch == 0) c->dynamic_batching = 0;
    if (n) {
        static const char *const dk[] = {"max_queue_delay_us", "preferred_batch_sizes"};
        c->dynamic_batching = 1;
        if (kl_node_kind_of(n) == KL_NODE_MAP) {
            if ((rc = kl_spec_check_keys(n, dk, 2, e))) goto done;
            if ((rc = kl_spec_int(n, "max_queue_delay_us", c->max_queue_delay_us, &c->max_queue_delay_us, e)))
                goto done;
            if (c->max_queue_delay_us < 0 || c->max_queue_delay_us > 60000000) {
                rc = kl_node_error(kl_node_get(n, "max_queue_delay_us"), e, KL_EINVAL, "must be 0..60000000 (µs)");
                goto done;
            }
            const kl_node *p = kl_node_get(n, "preferred_batch_sizes");
            if (p) {
                if (kl_node_kind_of(p) != KL_NODE_SEQ) { rc = kl_node_error(p, e, KL_EINVAL, "expected a list"); goto done; }
                for (size_t i = 0; i < kl_node_len(p) && c->n_preferred < 8; i++) {
                    if ((rc = kl_node_int(kl_node_at(p, i), &v, e))) goto done;
                    c->preferred[c->n_preferred++] = (int)v;
                }
            }
        } else if (kl_node_kind_of(n) != KL_NODE_NULL) {
            int on;
            if ((rc = kl_node_bool(n, &on, e))) goto done;
            c->dynamic_batching = on;
        }
        if (c->dynamic_batching && c->max_batch == 0) c->max_batch = SV_BATCH_DEFAULT_MAX;
        /* off: max_batch_size (unless given) reads 0, requests run as sent */
        if (!c->dynamic_batching && !kl_node_get(root, "max_batch_size")) c->max_batch = 0;
    }
    n = kl_node_get(root, "default_queue_policy");
    if (n) {
        sv_level_cfg l = c->level[0];
        if ((rc = parse_level(n, &l, e))) goto done;
        for (int i = 0; i < SV_MAX_LEVELS; i++) c->level[i] = l;
    }
    n = kl_node_get(root, "queue_policy");
    if (n) {
        if (kl_node_kind_of(n) == KL_NODE_SEQ) {
            for (size_t i = 0; i < kl_node_len(n) && i < SV_MAX_LEVELS; i++)
                if ((rc = parse_level(kl_node_at(n, i), &c->level[i], e))) goto done;
        } else if (kl_node_kind_of(n) == KL_NODE_MAP) {
            for (size_t i = 0; i < kl_node_len(n); i++) {
                int64_t lv;
                if (kl_parse_int64(kl_node_key_at(n, i), &lv) || lv < 1 || lv > c->levels) {
                    rc = kl_node_error(kl_node_at(n, i), e, KL_EINVAL, "queue_policy key '%s' is not a level 1..%d",
                                       kl_node_key_at(n, i), c->levels);
                    goto done;
                }
                if ((rc = parse_level(kl_node_at(n, i), &c->level[lv - 1], e))) goto done;
            }
        } else {
            rc = kl_node_error(n, e, KL_EINVAL, "expected a list or a map of levels");
            goto done;
        }
    }
    n = kl_node_get(root, "memory_quota");
    if (n) {
        const char *s;
        if ((rc = kl_node_str(n, &s, e))) goto done;
        if ((rc = kl_mem_parse_size(s, &c->memory_quota, e))) { kl_node_error(n, e, rc, "%s", e ? e->msg : ""); goto done; }
    }
    if ((rc = parse_on_store_error(root, c, e))) goto done;
    n = kl_node_get(root, "version_policy");
    if (n) {
        const char *s = kl_node_scalar(n);
        if (s && !strcmp(s, "all")) c->policy = SV_POLICY_ALL;
        else if (kl_node_kind_of(n) == KL_NODE_MAP && kl_node_get(n, "latest")) {
            c->policy = SV_POLICY_LATEST;
            if ((rc = kl_spec_int(n, "latest", 1, &v, e))) goto done;
            if (v < 1 || v > SV_MAX_VERSIONS) { rc = kl_node_error(n, e, KL_EINVAL, "latest must be 1..%d", SV_MAX_VERSIONS); goto done; }
            c->latest_n = (int)v;
        } else if (kl_node_kind_of(n) == KL_NODE_MAP && kl_node_get(n, "specific")) {
            const kl_node *p = kl_node_get(n, "specific");
            c->policy = SV_POLICY_SPECIFIC;
            if (kl_node_kind_of(p) != KL_NODE_SEQ) { rc = kl_node_error(p, e, KL_EINVAL, "expected a list of versions"); goto done; }
            for (size_t i = 0; i < kl_node_len(p) && c->n_specific < SV_MAX_VERSIONS; i++)
                if ((rc = kl_node_int(kl_node_at(p, i), &c->specific[c->n_specific++], e))) goto done;
        } else {
            rc = kl_node_error(n, e, KL_EINVAL, "expected 'all', {latest: N} or {specific: [versions]}");
            goto done;
        }
    }
    if ((n = kl_node_get(root, "monitor")) && (rc = kl__sv_monitor_cfg_parse(n, c, e))) goto done;
    rc = kl_node_check_used(root, e); /* e.g. version_policy {latest, specific}: one is read, the other refused */
done:
    kl_doc_free(d);
    return rc;
}

/* ==================================================================
 * Versions
 * ================================================================== */

void kl__sv_version_ref(sv_version *v) { atomic_fetch_add(&v->refs, 1); }

static void version_free(sv_version *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n_in; i++) kl__sv_tensor_release(&v->warm[i]);
    kl__sb_free(v->sess);
    kl__sv_monitor_free(v);
    kl_fstore_free(v->fstore);
    kl_features_free(v->feat);
    for (int i = 0; i < v->nclass_names; i++) free(v->class_names[i]);
    free(v->class_names);
    free(v);
}

void kl__sv_version_unref(sv_version *v) {
    if (v && atomic_fetch_sub(&v->refs, 1) == 1) {
        kl_log(KL_LOG_INFO, "serve", "model %s version %lld drained and freed", v->model->name, (long long)v->version);
        version_free(v);
    }
}

static void file_sig(const char *dir, const char *name, kl_buf *b) {
    char p[1400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (stat(p, &st)) { kl_buf_printf(b, "%s:-;", name); return; }
    kl_buf_printf(b, "%s:%lld:%lld.%09ld;", name, (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

static void version_sig(const char *dir, char *out, size_t n) {
    kl_buf b;
    kl_buf_init(&b);
    file_sig(dir, "model.onnx", &b);
    file_sig(dir, "meta.json", &b);
    file_sig(dir, "features.json", &b);
    file_sig(dir, "profile.json", &b);
    snprintf(out, n, "%s", b.data ? b.data : "");
    kl_buf_free(&b);
}

/* output.class_names: K names when the model's label was a string (the
 * index order of its outputs); anything else leaves labels as indices. */
static void read_class_names(const cJSON *o, sv_version *v) {
    (void)kl_json_string_list(cJSON_GetObjectItemCaseSensitive(o, "class_names"), 65536, &v->class_names,
                              &v->nclass_names);
}

/* meta.json "output": {"postprocess": "softmax"|"sigmoid"|"none", "classes": K,
 * "class_names": [...]} (keel train writes it): what :predict's probability and
 * label mean. */
static void read_postprocess(const cJSON *root, sv_version *v) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "output");
    read_class_names(o, v);
    const char *pp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "postprocess"));
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "classes");
    v->post = !pp ? -1 : !strcmp(pp, "softmax") ? SV_POST_SOFTMAX : !strcmp(pp, "sigmoid") ? SV_POST_SIGMOID
            : !strcmp(pp, "none") ? SV_POST_NONE : -1;
    v->nclasses = cJSON_IsNumber(k) && k->valuedouble >= 1 && k->valuedouble <= 1e6 ? (int)k->valuedouble : 0;
}

/* meta.json "final_metrics": the version's quality on its validation rows
 * (val_accuracy, val_auc, val_mae, val_rmse; keel train writes the ones of
 * its task), the reference the live quality is compared with, and
 * "data": {"val_rows"}: how many rows it was measured on. */
static void read_quality_ref(const cJSON *root, sv_version *v) {
    static const char *const keys[SV_QREF_COUNT] = {"val_accuracy", "val_auc", "val_mae", "val_rmse"};
    const cJSON *fm = cJSON_GetObjectItemCaseSensitive(root, "final_metrics");
    for (int k = 0; k < SV_QREF_COUNT; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(fm, keys[k]);
        if (cJSON_IsNumber(x) && isfinite(x->valuedouble)) v->qref[k] = x->valuedouble;
    }
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "data"), "val_rows");
    if (cJSON_IsNumber(n) && n->valuedouble >= 1 && n->valuedouble <= 1e15) v->qref_n = (uint64_t)n->valuedouble;
}

static int check_integrity(const char *dir, sv_version *v, int *nchecked, kl_err *e) {
    char p[1400];
    *nchecked = 0;
    snprintf(p, sizeof p, "%s/meta.json", dir);
    if (!kl_path_exists(p)) return KL_OK;
    void *j = NULL;
    int rc = kl_json_load_file(p, &j, e);
    if (rc) return rc;
    cJSON *root = j;
    read_postprocess(root, v);
    read_quality_ref(root, v);
    /* every file meta.json lists (any shape keel wrote: kl_manifest_files_read), by sha256 and size */
    kl_manifest_files m;
    rc = kl_manifest_files_read(root, p, &m, e);
    if (rc == KL_ENOTFOUND) {
        kl_err_clear(e);
        rc = KL_OK;
    } /* a version without a files list: nothing to check */
    for (size_t i = 0; !rc && i < m.n; i++, (*nchecked)++)
        rc = kl_manifest_file_verify(dir, &m.v[i], KL_VERIFY_SHA256, p, NULL, e);
    kl_manifest_files_free(&m);
    cJSON_Delete(root);
    return rc;
}

int kl__sv_version_probe(kl_server *s, sv_version *v, kl_err *e) {
    /* the first compute time of a model decides inline batches or workers
     * until real batches tell: its first run pays one-time costs (weight
     * packing, planning), so the second one is timed */
    int64_t none = 0, dt = 0;
    int rc = KL_OK, runs = v->model && !atomic_load(&v->model->row_ns) ? 2 : 1;
    for (int k = 0; k < runs && !rc; k++) {
        sv_tensor out[SV_MAX_IO];
        memset(out, 0, sizeof out);
        int64_t t0 = kl_time_mono_ns();
        rc = kl__sb_run(v->sess, v->warm, v->n_in, out, v->n_out, e);
        dt = kl_time_mono_ns() - t0;
        for (size_t i = 0; i < v->n_out && !rc; i++) kl__sv_tensor_release(&out[i]);
    }
    if (!rc && v->model) atomic_compare_exchange_strong(&v->model->row_ns, &none, dt > 0 ? dt : 1);
    if (v->model) {
        pthread_mutex_lock(&s->mx);
        if (rc) v->model->st.probe_fail++;
        else v->model->st.probe_ok++;
        pthread_mutex_unlock(&s->mx);
    }
    pthread_mutex_lock(&s->lock);
    v->probe_ok = rc == KL_OK;
    v->probe_ns = kl_time_mono_ns();
    snprintf(v->probe_err, sizeof v->probe_err, "%s", rc ? (e ? e->msg : kl_strerror(rc)) : "");
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Loads version ver of m from dir; cfg: the configuration it will serve under (for the log). */
static int version_load(kl_server *s, sv_model *m, const sv_model_cfg *cfg, const char *dir, int64_t ver,
                        sv_version **out, kl_err *e) {
    *out = NULL;
    sv_version *v = calloc(1, sizeof *v);
    if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
    v->model = m;
    v->version = ver;
    atomic_init(&v->refs, 1);
    snprintf(v->dir, sizeof v->dir, "%s", dir);
    version_sig(dir, v->sig, sizeof v->sig);
    int nchecked = 0;
    v->post = -1;
    for (int k = 0; k < SV_QREF_COUNT; k++) v->qref[k] = NAN;
    int rc = check_integrity(dir, v, &nchecked, e);
    if (rc) goto fail;
    char p[1400];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    int threads = kl__sv_threads_per_worker(&s->o);
    if ((rc = kl__sb_load(p, threads, &v->sess, e))) goto fail;
    if ((rc = kl__sb_describe(v->sess, v->in, &v->n_in, v->out, &v->n_out, e))) goto fail;
    if (v->n_in == 0 || v->n_out == 0) { rc = kl_err_set(e, KL_EUNSUPPORTED, "%s: model has no inputs or outputs", p); goto fail; }
    v->batchable = 1;
    for (size_t i = 0; i < v->n_in; i++) {
        sv_io *io = &v->in[i];
        if (io->rank < 1 || io->dims[0] >= 0) v->batchable = 0;
        if (io->dtype == SV_BYTES) { rc = kl_err_set(e, KL_EUNSUPPORTED, "input '%s': BYTES inputs", io->name); goto fail; }
        sv_tensor *t = &v->warm[i];
        t->dtype = io->dtype;
        t->rank = io->rank;
        for (int d = 0; d < io->rank; d++) t->dims[d] = io->dims[d] < 0 ? 1 : io->dims[d];
        t->nbytes = (size_t)kl__sv_numel(t) * kl__sv_dtype_size(t->dtype);
        t->data = kl_mem_calloc(1, t->nbytes ? t->nbytes : 1, KL_TAG_WORKSPACE);
        if (!t->data) { rc = kl_err_set(e, KL_ENOMEM, "warm-up input '%s': out of memory", io->name); goto fail; }
        t->own = 1;
    }
    for (size_t i = 0; i < v->n_out; i++)
        if (v->out[i].rank < 1 || v->out[i].dims[0] >= 0) v->batchable = 0;
    /* features.json: what :predict runs before the model (and its online store) */
    snprintf(p, sizeof p, "%s/features.json", dir);
    if (kl_path_exists(p)) {
        if ((rc = kl_features_load(p, &v->feat, e))) goto fail;
        if ((rc = kl__sv_fstore_open(s, v, cfg, e))) goto fail;
        if (v->n_in != 1 || v->in[0].rank != 2 || v->in[0].dtype != SV_FP32 ||
            (v->in[0].dims[1] >= 0 && (size_t)v->in[0].dims[1] != kl_features_width(v->feat))) {
            rc = kl_err_set(e, KL_ESHAPE, "%s/features.json: %zu feature values per record, but the model's input is not "
                            "one FP32 [batch, %zu] tensor", dir, kl_features_width(v->feat), kl_features_width(v->feat));
            goto fail;
        }
    }
    kl__sv_monitor_load(v, cfg);
    if (s->plog) v->plog = kl__sv_plog_schema_of(s->plog, v);
    int64_t t0 = kl_time_mono_ns();
    if ((rc = kl__sv_version_probe(s, v, e))) { kl_err_prefix(e, "warm-up inference"); goto fail; }
    char batching[96];
    if (sv_version_batches(cfg, v))
        snprintf(batching, sizeof batching, "dynamic batching: up to %d rows, %lld us delay", cfg->max_batch,
                 (long long)cfg->max_queue_delay_us);
    else
        snprintf(batching, sizeof batching, "no dynamic batching: %s", v->batchable ? "off in config.yaml"
                                                                                     : "no free batch dimension");
    kl_log(KL_LOG_INFO, "serve", "model %s version %lld ready (%s, %zu input(s), warm-up %.2f ms%s; %s)", m->name,
           (long long)ver, nchecked ? "sha256 verified" : "no meta.json", v->n_in, (kl_time_mono_ns() - t0) / 1e6,
           v->batchable ? ", batchable" : "", batching);
    *out = v;
    return KL_OK;
fail:
    version_free(v);
    return rc;
}

/* ==================================================================
 * Scanning
 * ================================================================== */

sv_model *kl__sv_model_find(kl_server *s, const char *name) {
    for (int i = 0; i < s->nmodels; i++)
        if (!strcmp(s->models[i]->name, name)) return s->models[i];
    return NULL;
}

static sv_model *model_get(kl_server *s, const char *name) {
    pthread_mutex_lock(&s->lock);
    sv_model *m = kl__sv_model_find(s, name);
    if (!m) {
        if (s->nmodels == s->capmodels) {
            int cap = s->capmodels ? 2 * s->capmodels : 16;
            sv_model **nm = realloc(s->models, sizeof *nm * (size_t)cap);
            if (!nm) { pthread_mutex_unlock(&s->lock); return NULL; }
            s->models = nm;
            s->capmodels = cap;
        }
        m = calloc(1, sizeof *m);
        if (m) {
            snprintf(m->name, sizeof m->name, "%s", name);
            kl__sv_cfg_default(&m->cfg);
            m->state = SV_M_UNAVAILABLE;
            snprintf(m->reason, sizeof m->reason, "loading");
            s->models[s->nmodels++] = m;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return m;
}

void kl__sv_model_free(sv_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nver; i++) kl__sv_version_unref(m->ver[i]);
    free(m);
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void count_load(kl_server *s, sv_model *m, int ok) {
    pthread_mutex_lock(&s->mx);
    if (ok) m->st.load_ok++;
    else m->st.load_fail++;
    pthread_mutex_unlock(&s->mx);
}

/* Replaces the version list (and config) of m, and the list of refused
 * versions (nref of ref; NULL: none); unreferences what dropped out. */
static void swap_versions(kl_server *s, sv_model *m, sv_version **nv, int n, const sv_model_cfg *cfg, const char *reason,
                          const sv_refused *ref, int nref) {
    sv_version *old[SV_MAX_VERSIONS];
    int nold = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < m->nver; i++) old[nold++] = m->ver[i];
    for (int i = 0; i < nold; i++) { /* their feature store errors keep counting for the model */
        int kept = 0;
        for (int j = 0; j < n; j++) kept |= nv[j] == old[i];
        if (!kept && old[i]->fstore) m->fstore_errors_gone += kl_fstore_errors(old[i]->fstore);
    }
    for (int i = 0; i < n; i++) m->ver[i] = nv[i];
    m->nver = n;
    m->nrefused = ref ? nref : 0;
    if (ref) memcpy(m->refused, ref, (size_t)nref * sizeof *ref);
    if (cfg) m->cfg = *cfg;
    for (int i = 0; i < n && cfg; i++)
        if (nv[i]->fstore) kl_fstore_set_on_error(nv[i]->fstore, cfg->on_store_error_empty);
    m->state = n ? SV_M_READY : SV_M_UNAVAILABLE;
    snprintf(m->reason, sizeof m->reason, "%s", n ? "" : reason);
    pthread_cond_broadcast(&s->qcond);
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < nold; i++) kl__sv_version_unref(old[i]);
}

static int scan_model(kl_server *s, sv_model *m, const char *mdir, kl_err *e) {
    char p[1400];
    sv_model_cfg cfg;
    kl__sv_cfg_default(&cfg);
    int rc = KL_OK;
    snprintf(p, sizeof p, "%s/config.yaml", mdir);
    if (kl_path_exists(p)) {
        char *text = NULL;
        size_t len = 0;
        rc = kl_read_file(p, &text, &len, e);
        if (!rc) rc = kl__sv_cfg_parse(text, len, p, &cfg, e);
        kl_mem_free(text);
        if (rc) {
            kl_log(KL_LOG_ERROR, "serve", "model %s: %s (keeping the current configuration)", m->name, kl_err_what(e));
            count_load(s, m, 0);
            pthread_mutex_lock(&s->lock);
            int has = m->nver > 0;
            if (!has) { m->state = SV_M_UNAVAILABLE; snprintf(m->reason, sizeof m->reason, "%s", kl_err_what(e)); }
            pthread_mutex_unlock(&s->lock);
            return rc;
        }
    }
    /* versions on disk */
    int64_t found[256];
    int nfound = 0;
    DIR *dd = opendir(mdir);
    if (!dd) return kl_err_set(e, -errno, "%s: %s", mdir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(dd)) && nfound < 256) {
        int64_t v;
        if (de->d_name[0] == '.' || kl_parse_int64(de->d_name, &v) || v < 0) continue;
        snprintf(p, sizeof p, "%s/%s/model.onnx", mdir, de->d_name);
        if (kl_path_exists(p)) found[nfound++] = v;
    }
    closedir(dd);
    qsort(found, (size_t)nfound, sizeof found[0], cmp_desc);
    int64_t want[SV_MAX_VERSIONS];
    int nwant = 0;
    for (int i = 0; i < nfound && nwant < SV_MAX_VERSIONS; i++) {
        int keep = 0;
        if (cfg.policy == SV_POLICY_ALL) keep = 1;
        else if (cfg.policy == SV_POLICY_LATEST) keep = nwant < cfg.latest_n;
        else
            for (int j = 0; j < cfg.n_specific; j++) keep |= cfg.specific[j] == found[i];
        if (keep) want[nwant++] = found[i];
    }
    /* current versions (referenced while we work) */
    sv_version *cur[SV_MAX_VERSIONS];
    int ncur = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < m->nver; i++) { cur[ncur++] = m->ver[i]; kl__sv_version_ref(m->ver[i]); }
    pthread_mutex_unlock(&s->lock);

    sv_version *nv[SV_MAX_VERSIONS];
    int n = 0, nref = 0;
    sv_refused *ref = calloc(SV_MAX_VERSIONS, sizeof *ref);
    if (!ref) {
        for (int j = 0; j < ncur; j++) kl__sv_version_unref(cur[j]);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    char reason[512] = "no version folder with a model.onnx";
    if (nwant == 0 && nfound > 0) snprintf(reason, sizeof reason, "the version policy selects none of the %d version(s)", nfound);
    for (int i = 0; i < nwant; i++) {
        char vdir[1200], sig[512];
        snprintf(vdir, sizeof vdir, "%s/%lld", mdir, (long long)want[i]);
        version_sig(vdir, sig, sizeof sig);
        sv_version *have = NULL;
        for (int j = 0; j < ncur; j++)
            if (cur[j]->version == want[i]) have = cur[j];
        if (have && !strcmp(have->sig, sig)) { kl__sv_version_ref(have); nv[n++] = have; continue; }
        sv_version *v = NULL;
        kl_err le = {0};
        int lrc = version_load(s, m, &cfg, vdir, want[i], &v, &le);
        count_load(s, m, lrc == KL_OK);
        if (lrc) {
            kl_log(KL_LOG_ERROR, "serve", "model %s version %lld refused: %s%s", m->name, (long long)want[i],
                   kl_err_what(&le), have ? " (the loaded copy keeps serving)" : "");
            snprintf(reason, sizeof reason, "version %lld: %s", (long long)want[i], kl_err_what(&le));
            if (!rc) { rc = lrc; if (e) *e = le; }
            if (have) { kl__sv_version_ref(have); nv[n++] = have; }
            else {
                ref[nref].version = want[i];
                snprintf(ref[nref++].reason, sizeof ref->reason, "%s", kl_err_what(&le));
            }
            continue;
        }
        nv[n++] = v;
    }
    /* a refused newer version must not take away the serving older one */
    if (n == 0 && ncur > 0 && nwant > 0) {
        for (int j = 0; j < ncur && n < SV_MAX_VERSIONS; j++) { kl__sv_version_ref(cur[j]); nv[n++] = cur[j]; }
        kl_log(KL_LOG_WARN, "serve", "model %s: no new version could be loaded; the current one(s) keep serving", m->name);
    }
    swap_versions(s, m, nv, n, &cfg, reason, ref, nref);
    free(ref);
    for (int j = 0; j < ncur; j++) kl__sv_version_unref(cur[j]);
    return rc;
}

int kl__sv_repo_scan(kl_server *s, const char *only, kl_err *e) {
    pthread_mutex_lock(&s->scan_lock);
    int rc = KL_OK, found_only = 0;
    char **names = NULL;
    int nnames = 0, cap = 0;
    DIR *d = opendir(s->repo);
    if (!d) {
        rc = kl_err_set(e, -errno, "%s: %s", s->repo, strerror(errno));
        goto done;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        char p[1400];
        struct stat st;
        if (de->d_name[0] == '.' || strlen(de->d_name) >= SV_NAME_MAX) continue;
        snprintf(p, sizeof p, "%s/%s", s->repo, de->d_name);
        if (stat(p, &st) || !S_ISDIR(st.st_mode)) continue;
        if (nnames == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, sizeof *nn * (size_t)cap);
            if (!nn) break;
            names = nn;
        }
        names[nnames++] = strdup(de->d_name);
    }
    closedir(d);
    for (int i = 0; i < nnames; i++) {
        if (only && strcmp(only, names[i])) continue;
        found_only |= only != NULL;
        sv_model *m = model_get(s, names[i]);
        if (!m) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        pthread_mutex_lock(&s->lock);
        if (only) m->unloaded = 0;
        int skip = m->unloaded;
        pthread_mutex_unlock(&s->lock);
        if (skip) continue;
        char mdir[1400];
        snprintf(mdir, sizeof mdir, "%s/%s", s->repo, names[i]);
        kl_err me = {0};
        int mrc = scan_model(s, m, mdir, &me);
        if (mrc && !rc) { rc = mrc; if (e) *e = me; }
    }
    /* models whose folder disappeared */
    pthread_mutex_lock(&s->lock);
    int nm = s->nmodels;
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < nm; i++) {
        sv_model *m = s->models[i];
        if (only && strcmp(only, m->name)) continue;
        int present = 0;
        for (int j = 0; j < nnames; j++) present |= !strcmp(names[j], m->name);
        if (!present && m->state != SV_M_UNLOADED) swap_versions(s, m, NULL, 0, NULL, "removed from the repository", NULL, 0);
    }
    if (only && !found_only) rc = kl_err_set(e, KL_ENOTFOUND, "no model '%s' in repository %s", only, s->repo);
done:
    for (int i = 0; i < nnames; i++) free(names[i]);
    free(names);
    pthread_mutex_unlock(&s->scan_lock);
    return rc;
}

int kl__sv_repo_unload(kl_server *s, const char *name, kl_err *e) {
    pthread_mutex_lock(&s->scan_lock);
    pthread_mutex_lock(&s->lock);
    sv_model *m = kl__sv_model_find(s, name);
    if (m) m->unloaded = 1;
    pthread_mutex_unlock(&s->lock);
    int rc = KL_OK;
    if (!m) rc = kl_err_set(e, KL_ENOTFOUND, "unknown model '%s'", name);
    else {
        swap_versions(s, m, NULL, 0, NULL, "unloaded", NULL, 0);
        pthread_mutex_lock(&s->lock);
        m->state = SV_M_UNLOADED;
        pthread_mutex_unlock(&s->lock);
        kl_log(KL_LOG_INFO, "serve", "model %s unloaded (queued requests finish)", name);
    }
    pthread_mutex_unlock(&s->scan_lock);
    return rc;
}
