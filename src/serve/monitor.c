/* Monitoring inside the server (docs/monitoring.md): the `monitor:` block of
 * a model's config.yaml, the live monitor of each version that has a
 * profile.json (the feature layer's kl_monitor), the request-path hooks (raw
 * records and feature rows of :predict, input rows of v2 infer, the outputs
 * of every successful request), GET /v2/models/M[/versions/V]/monitor and
 * the drift gauges of /metrics. */
#include "serve_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * config.yaml: monitor: {enabled, windows, psi, js, p_value, min_samples,
 * min_expected, null_delta, unknown_ratio, oob_ratio, feedback_*, and the
 * alert thresholds slo_*, *_drop, rmse_rise, min_labels, alert_for}
 * ================================================================== */

static const char *const sv_qref_metric[SV_QREF_COUNT] = {"accuracy", "auc", "mae", "rmse"};

void kl__sv_alert_cfg_default(sv_alert_cfg *a) {
    a->slo_availability = 99.9;
    a->slo_latency_s = 0.25;
    a->slo_latency_target = 99;
    a->accuracy_drop = 0.02;
    a->auc_drop = 0.03;
    a->rmse_rise = 0.1;
    a->quality_p_value = 0.01;
    a->min_labels = 200;
    a->alert_for_s = 600;
}

/* slo_latency must be a bound of the latency histograms (the rules read its bucket) */
static int check_latency_bound(const kl_node *n, double x, kl_err *e) {
    const double *le;
    size_t nb = kl__sv_metrics_latency_bounds(&le);
    char list[256] = "";
    for (size_t i = 0; i < nb; i++) {
        if (le[i] == x) return KL_OK;
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%g", i ? ", " : "", le[i]);
    }
    return kl_node_error(n, e, KL_EINVAL, "%g s is not a bound of the latency histogram (%s)", x, list);
}

/* the alert thresholds of the block (rules.c reads them) */
static int alert_cfg_parse(const kl_node *n, sv_alert_cfg *a, kl_err *e) {
    struct {
        const char *k;
        double *v;
        double lo, hi;
    } d[] = {{"slo_availability", &a->slo_availability, 50, 99.9999},
             {"slo_latency", &a->slo_latency_s, 0, 1e6},
             {"slo_latency_target", &a->slo_latency_target, 50, 99.9999},
             {"accuracy_drop", &a->accuracy_drop, 0, 1},
             {"auc_drop", &a->auc_drop, 0, 1},
             {"rmse_rise", &a->rmse_rise, 0, 100},
             {"quality_p_value", &a->quality_p_value, 1e-9, 0.5}};
    int rc;
    for (size_t i = 0; i < KL_ARRAY_LEN(d); i++) {
        if ((rc = kl_spec_double(n, d[i].k, *d[i].v, d[i].v, e))) return rc;
        if (!(*d[i].v >= d[i].lo && *d[i].v <= d[i].hi))
            return kl_node_error(kl_node_get(n, d[i].k), e, KL_EINVAL, "must be within %g..%g", d[i].lo, d[i].hi);
    }
    if (kl_node_get(n, "slo_latency") && (rc = check_latency_bound(kl_node_get(n, "slo_latency"), a->slo_latency_s, e)))
        return rc;
    if ((rc = kl_spec_int(n, "min_labels", a->min_labels, &a->min_labels, e))) return rc;
    if (a->min_labels < 1 || a->min_labels > 1000000000)
        return kl_node_error(kl_node_get(n, "min_labels"), e, KL_EINVAL, "must be within 1..1e9");
    const kl_node *af = kl_node_get(n, "alert_for");
    if (af) {
        const char *s = kl_node_scalar(af);
        int64_t v = 0;
        if (!s || (strcmp(s, "0") && kl_monitor_parse_window(s, &v)))
            return kl_node_error(af, e, KL_EINVAL, "'%s' is not a duration (0, 90s, 10m, 1h)", s ? s : "?");
        a->alert_for_s = v;
    }
    return KL_OK;
}

int kl__sv_monitor_cfg_parse(const kl_node *n, sv_model_cfg *c, kl_err *e) {
    static const char *const keys[] = {"enabled",
                                       "windows",
                                       "psi",
                                       "js",
                                       "p_value",
                                       "min_samples",
                                       "min_expected",
                                       "null_delta",
                                       "unknown_ratio",
                                       "oob_ratio",
                                       "feedback_horizon",
                                       "feedback_capacity",
                                       "slo_availability",
                                       "slo_latency",
                                       "slo_latency_target",
                                       "accuracy_drop",
                                       "quality_p_value",
                                       "auc_drop",
                                       "rmse_rise",
                                       "min_labels",
                                       "alert_for"};
    kl_monitor_cfg *m = &c->monitor;
    int rc;
    if (kl_node_kind_of(n) != KL_NODE_MAP) {
        int on;
        if ((rc = kl_node_bool(n, &on, e)))
            return kl_node_error(n, e, KL_EINVAL, "monitor: expected a map or true/false");
        c->monitor_on = on;
        return KL_OK;
    }
    if ((rc = kl_spec_check_keys(n, keys, KL_ARRAY_LEN(keys), e))) return rc;
    if ((rc = kl_spec_bool(n, "enabled", 1, &c->monitor_on, e))) return rc;
    const kl_node *w = kl_node_get(n, "windows");
    if (w) {
        if (kl_node_kind_of(w) != KL_NODE_SEQ || kl_node_len(w) < 1 || kl_node_len(w) > KL_MON_MAX_WINDOWS)
            return kl_node_error(w, e, KL_EINVAL, "windows: expected a list of 1..%d durations (5m, 1h, 24h)",
                                 KL_MON_MAX_WINDOWS);
        m->nwin = (int)kl_node_len(w);
        for (int i = 0; i < m->nwin; i++) {
            const char *s = kl_node_scalar(kl_node_at(w, (size_t)i));
            if (!s || kl_monitor_parse_window(s, &m->win_s[i]) || m->win_s[i] < KL_MON_SLOTS)
                return kl_node_error(kl_node_at(w, (size_t)i), e, KL_EINVAL,
                                     "windows: '%s' is not a duration of at least %ds (90s, 5m, 1h, 2d)", s ? s : "?",
                                     KL_MON_SLOTS);
        }
    }
    struct {
        const char *k;
        double *v;
        double lo, hi;
    } d[] = {{"psi", &m->psi, 0, 100},
             {"js", &m->js, 0, 1},
             {"p_value", &m->p_value, 0, 1},
             {"min_expected", &m->min_expected, 0, 1e6},
             {"null_delta", &m->null_delta, 0, 1},
             {"unknown_ratio", &m->unknown_ratio, 0, 1},
             {"oob_ratio", &m->oob_ratio, 0, 1}};
    for (size_t i = 0; i < KL_ARRAY_LEN(d); i++) {
        if ((rc = kl_spec_double(n, d[i].k, *d[i].v, d[i].v, e))) return rc;
        if (!(*d[i].v >= d[i].lo && *d[i].v <= d[i].hi))
            return kl_node_error(kl_node_get(n, d[i].k), e, KL_EINVAL, "%s: must be within %g..%g", d[i].k, d[i].lo,
                                 d[i].hi);
    }
    const kl_node *fh = kl_node_get(n, "feedback_horizon");
    if (fh) {
        const char *s = kl_node_scalar(fh);
        if (!s || kl_monitor_parse_window(s, &c->fb_horizon_s))
            return kl_node_error(fh, e, KL_EINVAL, "feedback_horizon: '%s' is not a duration (90s, 5m, 1h, 2d)",
                                 s ? s : "?");
    }
    if ((rc = kl_spec_int(n, "feedback_capacity", c->fb_capacity, &c->fb_capacity, e))) return rc;
    if (c->fb_capacity < 0 || c->fb_capacity > 10000000)
        return kl_node_error(kl_node_get(n, "feedback_capacity"), e, KL_EINVAL,
                             "feedback_capacity: 0..10000000 (0: off)");
    int64_t ms;
    if ((rc = kl_spec_int(n, "min_samples", (int64_t)m->min_samples, &ms, e))) return rc;
    if (ms < 1 || ms > 1000000000)
        return kl_node_error(kl_node_get(n, "min_samples"), e, KL_EINVAL, "min_samples: 1..1e9");
    m->min_samples = (uint64_t)ms;
    return alert_cfg_parse(n, &c->alert, e);
}

/* ==================================================================
 * Per version
 * ================================================================== */

void kl__sv_monitor_load(sv_version *v, const sv_model_cfg *cfg) {
    char p[1400];
    snprintf(p, sizeof p, "%s/profile.json", v->dir);
    v->mcfg = cfg->monitor;
    if (!cfg->monitor_on) {
        snprintf(v->mon_off, sizeof v->mon_off, "monitor: enabled: false in config.yaml");
        return;
    }
    if (cfg->fb_capacity > 0 && !(v->fb = kl__sv_feedback_new(v, cfg->fb_horizon_s, (size_t)cfg->fb_capacity))) {
        kl_log(KL_LOG_WARN, "serve", "model %s version %lld: feedback off: out of memory", v->model->name,
               (long long)v->version);
    }
    if (!kl_path_exists(p)) {
        snprintf(v->mon_off, sizeof v->mon_off,
                 "no profile.json in the version (made before profiles, or without "
                 "features fit / training): it serves unmonitored");
        return;
    }
    kl_err e = {0};
    kl_profile *prof = NULL;
    int unread = kl_profile_load(p, &prof, &e) != KL_OK;
    if (unread || kl_monitor_new(prof, v->feat, &cfg->monitor, &v->mon, &e)) {
        /* a broken profile (or one over the memory cap) turns monitoring off, never the version */
        snprintf(v->mon_off, sizeof v->mon_off, "%s: %s", unread ? "profile.json unreadable" : "monitor not started",
                 e.msg);
        kl_log(KL_LOG_WARN, "serve", "model %s version %lld: monitoring off: %s", v->model->name, (long long)v->version,
               v->mon_off);
        return;
    }
    size_t maxb = 0;
    kl_monitor_bytes(v->mon, &maxb);
    kl_log(KL_LOG_INFO, "serve", "model %s version %lld: monitoring %zu columns against profile.json (at most %.1f MB)",
           v->model->name, (long long)v->version, kl_monitor_profile(v->mon)->ncols, (double)maxb / 1e6);
}

void kl__sv_monitor_free(sv_version *v) {
    kl_monitor_free(v->mon);
    v->mon = NULL;
    kl__sv_feedback_free(v->fb);
    v->fb = NULL;
}

/* after a successful run: the input rows of v2 requests (the feature slots
 * when the version has features.json; :predict rows were seen when decoded)
 * and the first output's rows of every request */
void kl__sv_monitor_batch(sv_version *v, sv_req *const *rq, int n, const sv_tensor *out) {
    int64_t now = kl_time_mono_ns(), row0 = 0, total = 0;
    for (int k = 0; k < n; k++) total += rq[k]->rows;
    if (v->fb && out[0].dtype == SV_FP32 && out[0].rank >= 1 && out[0].dims[0] == total && total > 0) {
        size_t per = (size_t)(kl__sv_numel(&out[0]) / total);
        for (int k = 0; k < n; k++) { /* the first row of each request, under its id */
            const sv_req *r = rq[k];
            if (r->rows > 0)
                kl__sv_feedback_record(v->fb, r->has_id ? r->id : r->rid, now,
                                   (const float *)out[0].data + (size_t)row0 * per, per);
            row0 += r->rows;
        }
        row0 = 0;
    }
    if (!v->mon) return;
    size_t width = v->feat ? kl_features_width(v->feat) : 0;
    int outs = kl_monitor_has_outputs(v->mon) && out[0].dtype == SV_FP32 && out[0].rank >= 1 &&
        out[0].dims[0] == total && total > 0;
    size_t per = outs ? (size_t)(kl__sv_numel(&out[0]) / total) : 0;
    for (int k = 0; k < n; k++) {
        const sv_req *r = rq[k];
        const sv_tensor *t = &r->in[0];
        int slots = !r->predict && width && t->dtype == SV_FP32 && t->rank == 2 && (size_t)t->dims[1] == width &&
            t->dims[0] == r->rows;
        for (int64_t i = 0; (slots || outs) && i < r->rows; i++)
            kl_monitor_observe(v->mon, NULL, slots ? (const float *)t->data + i * width : NULL, width,
                               outs ? (const float *)out[0].data + (size_t)(row0 + i) * per : NULL, per, now);
        row0 += r->rows;
    }
}

/* ==================================================================
 * GET /v2/models/M[/versions/V]/monitor
 * ================================================================== */

/* the version asked for, referenced; NULL with a 404 body in b */
static sv_version *find_version(kl_server *s, const char *model, int64_t want, kl_buf *b) {
    pthread_mutex_lock(&s->lock);
    sv_model *m = kl__sv_model_find(s, model);
    sv_version *v = m ? kl__sv_pick_version(m, want) : NULL;
    if (v) kl__sv_version_ref(v);
    pthread_mutex_unlock(&s->lock);
    if (v) return v;
    kl_buf_puts(b, "{\"error\":");
    char msg[300];
    if (!m) snprintf(msg, sizeof msg, "unknown model '%s'", model);
    else snprintf(msg, sizeof msg, "model '%s' has no %s loaded", model, want >= 0 ? "such version" : "ready version");
    kl_buf_json_str(b, msg);
    kl_buf_puts(b, "}");
    return NULL;
}

static void qnum(kl_buf *b, const char *k, double x) {
    kl_buf_printf(b, ",\"%s\":", k);
    if (isfinite(x)) kl_buf_printf(b, "%.6g", x);
    else kl_buf_puts(b, "null");
}

/* ,"quality":{...}: live quality from the labels joined so far, per window */
static void quality_json(const sv_version *v, kl_buf *b) {
    int64_t now = kl_time_mono_ns();
    sv_quality q;
    kl_buf_puts(b, ",\"quality\":{\"windows\":{");
    for (int w = 0; w < v->mcfg.nwin; w++) {
        char wn[24];
        kl_monitor_window_name(v->mcfg.win_s[w], wn, sizeof wn);
        kl__sv_feedback_quality(v->fb, now, v->mcfg.win_s[w], &q);
        kl_buf_printf(b, "%s\"%s\":{\"n\":%llu", w ? "," : "", wn, (unsigned long long)q.n);
        if (q.classifier) {
            qnum(b, "auc", q.auc);
            qnum(b, "accuracy", q.accuracy);
            qnum(b, "log_loss", q.log_loss);
            qnum(b, "brier", q.brier);
        } else {
            qnum(b, "mae", q.mae);
            qnum(b, "rmse", q.rmse);
        }
        kl_buf_puts(b, "}");
    }
    kl_buf_printf(b,
                  "},\"task\":\"%s\",\"labels\":{\"matched\":%llu,\"unmatched\":%llu,\"late\":%llu,"
                  "\"duplicate\":%llu,\"invalid\":%llu},\"pending\":%llu,\"memory_max_bytes\":%zu}",
                  v->post == SV_POST_SIGMOID       ? "binary"
                      : v->post == SV_POST_SOFTMAX ? "multiclass"
                                                   : "regression",
                  (unsigned long long)q.matched, (unsigned long long)q.unmatched, (unsigned long long)q.late,
                  (unsigned long long)q.duplicate, (unsigned long long)q.invalid, (unsigned long long)q.pending,
                  kl__sv_feedback_bytes(v->fb));
}

int kl__sv_monitor_feedback(kl_server *s, const char *model, int64_t want, const char *body, size_t len, kl_buf *b) {
    sv_version *v = find_version(s, model, want, b);
    if (!v) return 404;
    int st;
    if (!v->fb && s->plog && v->plog) { /* no joining in the server, but the labels go to the log */
        void *doc = NULL;
        kl_err e = {0};
        if (kl_json_parse_opts(body, len, "request body", 0, &doc, &e)) {
            kl_buf_puts(b, "{\"error\":");
            kl_buf_json_str(b, e.msg);
            kl_buf_puts(b, "}");
            st = 400;
        } else {
            cJSON_Delete(doc);
            kl_buf_puts(b, "{\"logged\":true}");
            st = 200;
        }
    } else if (!v->fb) {
        kl_buf_printf(b,
                      "{\"error\":\"model '%s' version %lld takes no feedback (monitor: feedback_capacity: 0 or "
                      "enabled: false in config.yaml)\"}",
                      model, (long long)v->version);
        st = 400;
    } else {
        st = kl__sv_feedback_post(v->fb, body, len, kl_time_mono_ns(), b);
    }
    if (st == 200 && s->plog) kl__sv_plog_labels(s->plog, v, body, len);
    kl__sv_version_unref(v);
    return st;
}

int kl__sv_monitor_json(kl_server *s, const char *model, int64_t want, kl_buf *b) {
    sv_version *v = find_version(s, model, want, b);
    if (!v) return 404;
    kl_buf_puts(b, "{\"model_name\":");
    kl_buf_json_str(b, model);
    kl_buf_printf(b, ",\"model_version\":\"%lld\",\"monitoring\":%s", (long long)v->version, v->mon ? "true" : "false");
    int status = 200;
    if (!v->mon) {
        kl_buf_puts(b, ",\"reason\":");
        kl_buf_json_str(b, v->mon_off);
    } else {
        kl_err e = {0};
        kl_buf_puts(b, ",\"monitor\":");
        if (kl_monitor_json(v->mon, kl_time_mono_ns(), b, &e)) {
            kl_buf_reset(b);
            kl_buf_puts(b, "{\"error\":");
            kl_buf_json_str(b, e.msg);
            status = 500;
        }
    }
    if (status == 200 && v->fb) quality_json(v, b);
    kl_buf_puts(b, "}");
    kl__sv_version_unref(v);
    return b->failed ? 500 : status;
}

/* ==================================================================
 * /metrics: keel_feature_drift, keel_feature_null_ratio, keel_prediction_drift
 * ================================================================== */


typedef struct {
    const char *name;
    size_t off;
    int num, cat;
} stat_field;
static const stat_field FIELDS[] = {
    {"psi", offsetof(kl_monitor_stat, psi), 1, 1},
    {"js", offsetof(kl_monitor_stat, js), 1, 1},
    {"ks", offsetof(kl_monitor_stat, ks), 1, 0},
    {"ks_p_value", offsetof(kl_monitor_stat, ks_p), 1, 0},
    {"oob_ratio", offsetof(kl_monitor_stat, oob_ratio), 1, 0},
    {"chi2", offsetof(kl_monitor_stat, chi2), 0, 1},
    {"chi2_p_value", offsetof(kl_monitor_stat, chi2_p), 0, 1},
    {"unknown_ratio", offsetof(kl_monitor_stat, unknown_ratio), 0, 1},
};

/* the labels model, version, feature|output (+ source), window of one stat */
static void stat_labels(kl_buf *b, const char *model, int64_t ver, const kl_monitor_stat *st) {
    char w[24];
    kl_monitor_window_name(st->window_s, w, sizeof w);
    kl_buf_puts(b, "model=");
    kl__sv_metrics_label(b, model);
    kl_buf_printf(b, ",version=\"%lld\",%s=", (long long)ver, st->role == KL_PROF_OUTPUT ? "output" : "feature");
    kl__sv_metrics_label(b, st->column);
    if (st->role != KL_PROF_OUTPUT) kl_buf_printf(b, ",source=\"%s\"", kl_prof_role_name(st->role));
    kl_buf_printf(b, ",window=\"%s\"", w);
}

typedef struct {
    const char *model;
    int64_t ver;
    kl_monitor_stat *st;
    size_t n;
} vstats;

/* name{model, version, feature|output (+ source), window} = the non-null values the window holds */
static void window_samples(kl_buf *b, const vstats *vs, int nv, const char *name, int outputs, const char *help) {
    kl__sv_metrics_head(b, name, "gauge", help);
    for (int i = 0; i < nv; i++)
        for (size_t k = 0; k < vs[i].n; k++) {
            const kl_monitor_stat *st = &vs[i].st[k];
            if ((st->role == KL_PROF_OUTPUT) != outputs) continue;
            kl_buf_printf(b, "%s{", name);
            stat_labels(b, vs[i].model, vs[i].ver, st);
            kl_buf_printf(b, "} %llu\n", (unsigned long long)(st->n - st->nulls));
        }
}

/* keel_feature_null_ratio{..., window="reference"}: the column's null share on the fit rows */
static void null_reference(kl_buf *b, const char *model, int64_t ver, const kl_monitor_stat *st) {
    kl_buf_puts(b, "keel_feature_null_ratio{model=");
    kl__sv_metrics_label(b, model);
    kl_buf_printf(b, ",version=\"%lld\",feature=", (long long)ver);
    kl__sv_metrics_label(b, st->column);
    kl_buf_printf(b, ",source=\"%s\",window=\"reference\"} %.6g\n", kl_prof_role_name(st->role), st->ref_null_ratio);
}

static void render_family(kl_buf *b, const vstats *vs, int nv, const char *name, int outputs) {
    for (int i = 0; i < nv; i++)
        for (size_t k = 0; k < vs[i].n; k++) {
            const kl_monitor_stat *st = &vs[i].st[k];
            if ((st->role == KL_PROF_OUTPUT) != outputs || !st->tested || st->temporal) continue;
            for (size_t f = 0; f < KL_ARRAY_LEN(FIELDS); f++) {
                if (!(st->categorical ? FIELDS[f].cat : FIELDS[f].num)) continue;
                double x = *(const double *)((const char *)st + FIELDS[f].off);
                if (!isfinite(x)) continue;
                kl_buf_printf(b, "%s{", name);
                stat_labels(b, vs[i].model, vs[i].ver, st);
                kl_buf_printf(b, ",stat=\"%s\"} %.6g\n", FIELDS[f].name, x);
            }
        }
}

/* The standard error of (reference AUC - live AUC): the live AUC's from its
 * class counts, plus the reference's, of its validation rows with the live
 * class balance (meta.json records no class counts); NaN without a live AUC. */
static double auc_se(const sv_version *v, const sv_quality *q) {
    if (!isfinite(q->auc) || !q->auc_n) return NAN;
    double pos = (double)q->auc_pos, neg = (double)(q->auc_n - q->auc_pos), live = kl_stat_auc_se(q->auc, pos, neg);
    double ref = NAN, nr = (double)v->qref_n, pi = pos / (double)q->auc_n;
    if (isfinite(v->qref[SV_QREF_AUC]) && v->qref_n) ref = kl_stat_auc_se(v->qref[SV_QREF_AUC], nr * pi, nr * (1 - pi));
    return isfinite(ref) ? sqrt(live * live + ref * ref) : live;
}

/* keel_model_quality{metric, window}, keel_model_quality_samples{window},
 * keel_feedback_labels_total{result} */
static void quality_metrics(kl_buf *b, sv_version *const *vers, char (*names)[SV_NAME_MAX], int nv, int64_t now) {
    kl_buf nb; /* keel_model_quality_samples, from the same sv_quality */
    kl_buf_init(&nb);
    kl__sv_metrics_head(b, "keel_model_quality", "gauge",
                    "Live quality from labels joined with served predictions (POST .../feedback), per window: auc, "
                    "accuracy, log_loss, brier (classifiers), mae, rmse (regression); window=\"reference\": the "
                    "validation rows' (meta.json final_metrics).");
    for (int i = 0; i < nv; i++) {
        const sv_version *v = vers[i];
        for (int w = 0; v->fb && w < v->mcfg.nwin; w++) {
            sv_quality q;
            char wn[24];
            kl_monitor_window_name(v->mcfg.win_s[w], wn, sizeof wn);
            kl__sv_feedback_quality(v->fb, now, v->mcfg.win_s[w], &q);
            kl_buf_puts(&nb, "keel_model_quality_samples{model="); /* the family after this one */
            kl__sv_metrics_label(&nb, names[i]);
            kl_buf_printf(&nb, ",version=\"%lld\",window=\"%s\"} %llu\n", (long long)v->version, wn,
                          (unsigned long long)q.n);
            const struct {
                const char *k;
                double x;
            } mt[] = {{"auc", q.auc},     {"accuracy", q.accuracy}, {"log_loss", q.log_loss},
                      {"brier", q.brier}, {"mae", q.mae},           {"rmse", q.rmse},
                      {"auc_se", auc_se(v, &q)}};
            for (size_t k = 0; k < KL_ARRAY_LEN(mt); k++) {
                if (!isfinite(mt[k].x)) continue;
                kl_buf_puts(b, "keel_model_quality{model=");
                kl__sv_metrics_label(b, names[i]);
                kl_buf_printf(b, ",version=\"%lld\",metric=\"%s\",window=\"%s\"} %.6g\n", (long long)v->version,
                              mt[k].k, wn, mt[k].x);
            }
        }
        if (v->fb && v->qref_n) { /* how many validation rows the reference is of */
            kl_buf_puts(&nb, "keel_model_quality_samples{model=");
            kl__sv_metrics_label(&nb, names[i]);
            kl_buf_printf(&nb, ",version=\"%lld\",window=\"reference\"} %llu\n", (long long)v->version,
                          (unsigned long long)v->qref_n);
        }
        for (int k = 0; v->fb && k < SV_QREF_COUNT; k++) { /* the validation rows' (meta.json final_metrics) */
            if (!isfinite(v->qref[k])) continue;
            kl_buf_puts(b, "keel_model_quality{model=");
            kl__sv_metrics_label(b, names[i]);
            kl_buf_printf(b, ",version=\"%lld\",metric=\"%s\",window=\"reference\"} %.6g\n", (long long)v->version,
                          sv_qref_metric[k], v->qref[k]);
        }
    }
    kl__sv_metrics_head(b, "keel_model_quality_samples", "gauge",
                    "Labelled predictions in the window that keel_model_quality is computed from; "
                    "window=\"reference\": the validation rows of the reference (meta.json data.val_rows).");
    kl_buf_append(b, nb.data ? nb.data : "", nb.len);
    if (nb.failed) b->failed = 1;
    kl_buf_free(&nb);
    kl__sv_metrics_head(
        b, "keel_feedback_labels_total", "counter",
        "Labels posted to .../feedback: matched with a served prediction, unmatched (no prediction of that id "
        "held), late (older than the horizon), duplicate, invalid.");
    for (int i = 0; i < nv; i++) {
        const sv_version *v = vers[i];
        if (!v->fb) continue;
        sv_quality q;
        kl__sv_feedback_quality(v->fb, now, 0, &q);
        const struct {
            const char *k;
            uint64_t x;
        } rs[] = {{"matched", q.matched},
                  {"unmatched", q.unmatched},
                  {"late", q.late},
                  {"duplicate", q.duplicate},
                  {"invalid", q.invalid}};
        for (size_t k = 0; k < KL_ARRAY_LEN(rs); k++) {
            kl_buf_puts(b, "keel_feedback_labels_total{model=");
            kl__sv_metrics_label(b, names[i]);
            kl_buf_printf(b, ",version=\"%lld\",result=\"%s\"} %llu\n", (long long)v->version, rs[k].k,
                          (unsigned long long)rs[k].x);
        }
    }
}

void kl__sv_monitor_metrics(kl_server *s, kl_buf *b) {
    sv_version *vers[256];
    char names[256][SV_NAME_MAX];
    int nv = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->nmodels; i++)
        for (int j = 0; j < s->models[i]->nver && nv < 256; j++)
            if (s->models[i]->ver[j]->mon || s->models[i]->ver[j]->fb) {
                vers[nv] = s->models[i]->ver[j];
                snprintf(names[nv], SV_NAME_MAX, "%s", s->models[i]->name);
                kl__sv_version_ref(vers[nv++]);
            }
    pthread_mutex_unlock(&s->lock);
    vstats vs[256];
    int64_t now = kl_time_mono_ns();
    for (int i = 0; i < nv; i++) {
        kl_err e = {0};
        vs[i] = (vstats){names[i], vers[i]->version, NULL, 0};
        if (vers[i]->mon) kl_monitor_stats(vers[i]->mon, now, &vs[i].st, &vs[i].n, &e);
    }
    kl__sv_metrics_head(b, "keel_feature_drift", "gauge",
                    "Drift of a raw input (source=input) or feature slot (source=feature) against the version's "
                    "profile.json, per window: psi, js, ks, ks_p_value, oob_ratio (numbers), chi2, chi2_p_value, "
                    "unknown_ratio (categories); windows with at least min_samples values.");
    render_family(b, vs, nv, "keel_feature_drift", 0);
    window_samples(b, vs, nv, "keel_feature_window_samples", 0,
                   "Non-null values of a raw input or feature slot in the window (the statistics are computed from "
                   "min_samples on; alert rules require it).");
    kl__sv_metrics_head(
        b, "keel_feature_null_ratio", "gauge",
        "Share of null or missing values of a raw input per window; window=\"reference\": the fit rows'.");
    for (int i = 0; i < nv; i++)
        for (size_t k = 0; k < vs[i].n; k++) {
            const kl_monitor_stat *st = &vs[i].st[k];
            if (st->role != KL_PROF_INPUT) continue;
            if (st->window == 0) null_reference(b, vs[i].model, vs[i].ver, st);
            if (!st->n) continue;
            kl_buf_puts(b, "keel_feature_null_ratio{");
            stat_labels(b, vs[i].model, vs[i].ver, st);
            kl_buf_printf(b, "} %.6g\n", st->null_ratio);
        }
    kl__sv_metrics_head(
        b, "keel_feature_drift_detected", "gauge",
        "1 when a statistic of the input or feature passes its threshold in the window (monitor: in config.yaml).");
    for (int i = 0; i < nv; i++)
        for (size_t k = 0; k < vs[i].n; k++) {
            const kl_monitor_stat *st = &vs[i].st[k];
            if (st->role == KL_PROF_OUTPUT || !st->n) continue;
            kl_buf_puts(b, "keel_feature_drift_detected{");
            stat_labels(b, vs[i].model, vs[i].ver, st);
            kl_buf_printf(b, "} %d\n", st->drift ? 1 : 0);
        }
    kl__sv_metrics_head(
        b, "keel_prediction_drift", "gauge",
        "Drift of a model output against its distribution on the validation rows (profile.json), per window.");
    render_family(b, vs, nv, "keel_prediction_drift", 1);
    window_samples(b, vs, nv, "keel_prediction_window_samples", 1, "Values of a model output in the window.");
    kl__sv_metrics_head(
        b, "keel_feature_fallback_ratio", "gauge",
        "Fallbacks of the feature transforms per :predict row (unknown, null_filled, div_zero, clamped, "
        "empty_window), per window; the reference's on the fit rows with window=\"reference\".");
    for (int i = 0; i < nv; i++)
        for (int w = 0; vers[i]->mon && w < vers[i]->mcfg.nwin; w++) {
            kl_monitor_fallbacks fb;
            char wn[24];
            if (kl_monitor_fallback_stats(vers[i]->mon, now, w, &fb)) continue;
            kl_monitor_window_name(vers[i]->mcfg.win_s[w], wn, sizeof wn);
            for (int k = 0; k < KL_MON_FALLBACKS; k++)
                for (int ref = 0; ref < 2 && (w == 0 || !ref); ref++) {
                    double x = ref ? fb.ref_ratio[k] : fb.ratio[k];
                    if (!isfinite(x)) continue;
                    kl_buf_puts(b, "keel_feature_fallback_ratio{model=");
                    kl__sv_metrics_label(b, names[i]);
                    kl_buf_printf(b, ",version=\"%lld\",kind=\"%s\",window=\"%s\"} %.6g\n", (long long)vers[i]->version,
                                  kl_monitor_fallback_name(k), ref ? "reference" : wn, x);
                }
        }
    quality_metrics(b, vers, names, nv, now);
    kl__sv_metrics_head(b, "keel_monitor_memory_bytes", "gauge", "Bytes the live monitor of a version holds.");
    for (int i = 0; i < nv; i++) {
        if (!vers[i]->mon) continue;
        kl_buf_puts(b, "keel_monitor_memory_bytes{model=");
        kl__sv_metrics_label(b, vs[i].model);
        kl_buf_printf(b, ",version=\"%lld\"} %zu\n", (long long)vs[i].ver, kl_monitor_bytes(vers[i]->mon, NULL));
    }
    for (int i = 0; i < nv; i++) {
        free(vs[i].st);
        kl__sv_version_unref(vers[i]);
    }
}
