/* Prometheus rules for one served model (`keel monitor rules`,
 * docs/monitoring.md "Alert rules"): alerts on feature drift, data quality
 * (nulls, unknown categories, out-of-range values), prediction drift and live
 * quality against the version's reference, from the thresholds of the
 * model's config.yaml `monitor:` block — the same values the server flags
 * with — and the multi-window, multi-burn-rate alerts of an availability and
 * a latency SLO (Google SRE workbook, "Alerting on SLOs"), with the
 * recording rules they read. Every drift alert also requires the window to
 * hold min_samples values (keel_feature_window_samples). */
#include "serve_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ==================================================================
 * Text helpers: PromQL strings, YAML scalars, durations
 * ================================================================== */

/* "s" as a PromQL (and YAML double-quoted) string: backslash and quote escaped */
static void quoted(kl_buf *b, const char *s) {
    kl_buf_puts(b, "\"");
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') kl_buf_printf(b, "\\%c", *s);
        else kl_buf_append(b, s, 1);
    }
    kl_buf_puts(b, "\"");
}

/* A model name goes into PromQL strings inside YAML block scalars: control
 * characters (a newline ends the scalar) are refused. */
static int check_name(const char *model, kl_err *e) {
    if (!*model || strlen(model) >= SV_NAME_MAX || model[0] == '.' || strchr(model, '/'))
        return kl_err_set(e, KL_EINVAL, "'%s' is not a model name (a folder of the repository)", model);
    for (const unsigned char *p = (const unsigned char *)model; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return kl_err_set(e, KL_EINVAL, "model name with a control character (byte 0x%02x) cannot go into rules",
                              *p);
    return KL_OK;
}

static void duration(int64_t s, char *buf, size_t n) { kl_monitor_window_name(s, buf, n); }

/* ==================================================================
 * Rule emitters
 * ================================================================== */

typedef struct {
    kl_buf *b;
    const char *model;
    char sel[SV_NAME_MAX * 2 + 16]; /* model="M" */
    const sv_model_cfg *cfg;
} rules_ctx;

/* - alert: NAME, its expression (a block scalar: lines indented), for, labels, annotations */
static void alert(rules_ctx *x, const char *name, const char *expr, int64_t for_s, const char *severity,
                  const char *summary, const char *description) {
    kl_buf *b = x->b;
    kl_buf_printf(b, "      - alert: %s\n        expr: |-\n", name);
    for (const char *p = expr; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        kl_buf_puts(b, "          ");
        kl_buf_append(b, p, n);
        kl_buf_puts(b, "\n");
        p += n + (nl ? 1 : 0);
    }
    if (for_s > 0) {
        char d[24];
        duration(for_s, d, sizeof d);
        kl_buf_printf(b, "        for: %s\n", d);
    }
    kl_buf_printf(b, "        labels:\n          severity: %s\n          keel_model: ", severity);
    quoted(b, x->model);
    kl_buf_puts(b, "\n        annotations:\n          summary: ");
    quoted(b, summary);
    kl_buf_puts(b, "\n          description: ");
    quoted(b, description);
    kl_buf_puts(b, "\n");
}

static void record(rules_ctx *x, const char *name, const char *expr) {
    kl_buf_printf(x->b, "      - record: %s\n        expr: |-\n", name);
    for (const char *p = expr; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        kl_buf_puts(x->b, "          ");
        kl_buf_append(x->b, p, n);
        kl_buf_puts(x->b, "\n");
        p += n + (nl ? 1 : 0);
    }
}

static void group(rules_ctx *x, const char *what) {
    kl_buf_puts(x->b, "  - name: ");
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "keel-%s-%s", x->model, what);
    quoted(x->b, b.data ? b.data : "");
    kl_buf_free(&b);
    kl_buf_puts(x->b, "\n    rules:\n");
}

/* ==================================================================
 * Drift and data quality (the server's statistics against profile.json)
 * ================================================================== */

typedef struct {
    const char *alert, *stat, *op, *what;
    double threshold;
} drift_rule;

/* NAME: FAMILY{model, stat} OP threshold, in windows holding min_samples values */
static void drift_alert(rules_ctx *x, const drift_rule *r, int outputs) {
    const char *family = outputs ? "keel_prediction_drift" : "keel_feature_drift";
    const char *samples = outputs ? "keel_prediction_window_samples" : "keel_feature_window_samples";
    const char *on = outputs ? "model, version, output, window" : "model, version, feature, source, window";
    const char *col = outputs ? "{{ $labels.output }}" : "{{ $labels.feature }} ({{ $labels.source }})";
    char expr[4096], sum[256], desc[512];
    snprintf(expr, sizeof expr, "%s{%s, stat=\"%s\"} %s %.6g\nand on(%s)\n%s{%s} >= %llu", family, x->sel, r->stat,
             r->op, r->threshold, on, samples, x->sel, (unsigned long long)x->cfg->monitor.min_samples);
    snprintf(sum, sizeof sum, "%s of %s: %s", outputs ? "Prediction drift" : "Feature drift", col, r->what);
    snprintf(desc, sizeof desc,
             "%s of %s over the last {{ $labels.window }} is {{ $value }} (alert when %s %.6g; version "
             "{{ $labels.version }}, against its profile.json; at least %llu values in the window).",
             r->stat, col, r->op, r->threshold, (unsigned long long)x->cfg->monitor.min_samples);
    alert(x, r->alert, expr, x->cfg->alert.alert_for_s, "ticket", sum, desc);
}

/* the live null share above the fit rows' by more than null_delta */
static void null_alert(rules_ctx *x) {
    char expr[4096], desc[512];
    snprintf(expr, sizeof expr,
             "(\n  keel_feature_null_ratio{%s, window!=\"reference\"}\n  - ignoring(window) group_left\n"
             "  keel_feature_null_ratio{%s, window=\"reference\"}\n) > %.6g\nand on(model, version, feature, source, "
             "window)\nkeel_feature_window_samples{%s} >= %llu",
             x->sel, x->sel, x->cfg->monitor.null_delta, x->sel, (unsigned long long)x->cfg->monitor.min_samples);
    snprintf(desc, sizeof desc,
             "The null share of input {{ $labels.feature }} over the last {{ $labels.window }} is {{ $value }} above "
             "the training rows' (alert above %.6g; version {{ $labels.version }}).",
             x->cfg->monitor.null_delta);
    alert(x, "KeelFeatureNullRatio", expr, x->cfg->alert.alert_for_s, "ticket",
          "Nulls rising in input {{ $labels.feature }}", desc);
}

static void drift_group(rules_ctx *x) {
    const kl_monitor_cfg *m = &x->cfg->monitor;
    const drift_rule feat[] = {
        {"KeelFeatureDriftPSI", "psi", ">=", "population stability index", m->psi},
        {"KeelFeatureDriftJS", "js", ">=", "Jensen-Shannon distance", m->js},
        {"KeelFeatureDriftKS", "ks_p_value", "<", "Kolmogorov-Smirnov test", m->p_value},
        {"KeelFeatureDriftChi2", "chi2_p_value", "<", "chi-squared test", m->p_value},
        {"KeelFeatureUnknownCategories", "unknown_ratio", ">", "categories the training data never had",
         m->unknown_ratio},
        {"KeelFeatureOutOfRange", "oob_ratio", ">", "values outside the training range", m->oob_ratio},
    };
    const drift_rule pred[] = {
        {"KeelPredictionDriftPSI", "psi", ">=", "population stability index", m->psi},
        {"KeelPredictionDriftJS", "js", ">=", "Jensen-Shannon distance", m->js},
        {"KeelPredictionDriftKS", "ks_p_value", "<", "Kolmogorov-Smirnov test", m->p_value},
    };
    group(x, "drift");
    for (size_t i = 0; i < KL_ARRAY_LEN(feat); i++) drift_alert(x, &feat[i], 0);
    null_alert(x);
    for (size_t i = 0; i < KL_ARRAY_LEN(pred); i++) drift_alert(x, &pred[i], 1);
}

/* ==================================================================
 * Live quality (labels joined by POST .../feedback) against the reference
 * ================================================================== */

/* reference - live of a quality metric, per window (labels model, version, metric, window) */
static void drop_expr(char *buf, size_t n, const char *sel, const char *metric, const char *indent) {
    snprintf(buf, n,
             "%s(\n%s  keel_model_quality{%s, metric=\"%s\", window=\"reference\"}\n%s  - ignoring(window) "
             "group_right\n%s  keel_model_quality{%s, metric=\"%s\", window!=\"reference\"}\n%s)",
             indent, indent, sel, metric, indent, indent, sel, metric, indent);
}

/* A quality drop alert: (ref - live) of metric past drop, and significant —
 * that difference over its standard error (se: PromQL dividing the drop,
 * from "/" on) above z, the one-sided normal quantile of quality_p_value
 * (2.33 at 0.01) — with at least min_labels labels. The reference is a
 * sample too: without its variance a small validation split would flag
 * same-distribution traffic. */
static void drop_alert(rules_ctx *x, const char *name, const char *metric, const char *what, double drop,
                       const char *se) {
    const sv_alert_cfg *a = &x->cfg->alert;
    double p = a->quality_p_value, z = sqrt(kl_stat_chi2_quantile(2 * p, 1));
    char d0[1536], d1[1536], expr[8192], desc[640], sum[SV_NAME_MAX + 64];
    drop_expr(d0, sizeof d0, x->sel, metric, "");
    drop_expr(d1, sizeof d1, x->sel, metric, "  ");
    snprintf(expr, sizeof expr,
             "%s > %.6g\nand on(model, version, window)\n(\n%s\n%s\n) > %.4f\nand on(model, version, window)\n"
             "keel_model_quality_samples{%s, window!=\"reference\"} >= %lld",
             d0, drop, d1, se, z, x->sel, (long long)a->min_labels);
    snprintf(desc, sizeof desc,
             "%s on the labels of the last {{ $labels.window }} is {{ $value }} below the validation rows' "
             "(meta.json; alert above %.6g when significant at p < %g, z > %.4f, with at least %lld labels; version "
             "{{ $labels.version }}).",
             what, drop, p, z, (long long)a->min_labels);
    snprintf(sum, sizeof sum, "%s of model %s dropping", what, x->model);
    alert(x, name, expr, a->alert_for_s, "ticket", sum, desc);
}

/* Accuracy: a two-proportion z-test of the live accuracy (n labels) against
 * the reference's (its validation rows, keel_model_quality_samples{window=
 * "reference"}): se = sqrt(ref (1 - ref) (1/n + 1/n_ref)). */
static void accuracy_alert(rules_ctx *x) {
    char ref[640], se[2048];
    snprintf(ref, sizeof ref, "keel_model_quality{%s, metric=\"accuracy\", window=\"reference\"}", x->sel);
    snprintf(se, sizeof se,
             "  / on(model, version, window)\n  sqrt(\n    (\n"
             "      1 / keel_model_quality_samples{%s, window!=\"reference\"}\n      + ignoring(window) group_left\n"
             "      1 / keel_model_quality_samples{%s, window=\"reference\"}\n    )\n    * on(model, version) "
             "group_left()\n    (%s * (1 - %s))\n  )",
             x->sel, x->sel, ref, ref);
    drop_alert(x, "KeelModelAccuracyDrop", "accuracy", "Accuracy", x->cfg->alert.accuracy_drop, se);
}

/* AUC: se is the standard error of the difference the server computes
 * (metric="auc_se": Hanley & McNeil's, live class counts, the reference's
 * validation rows at the live class balance). */
static void auc_alert(rules_ctx *x) {
    char se[1024];
    snprintf(se, sizeof se, "  / ignoring(metric)\n  keel_model_quality{%s, metric=\"auc_se\", window!=\"reference\"}",
             x->sel);
    drop_alert(x, "KeelModelAUCDrop", "auc", "AUC", x->cfg->alert.auc_drop, se);
}

static void quality_group(rules_ctx *x) {
    const sv_alert_cfg *a = &x->cfg->alert;
    char expr[4096], desc[512], sum[SV_NAME_MAX + 64];
    group(x, "quality");
    accuracy_alert(x);
    auc_alert(x);
    snprintf(expr, sizeof expr,
             "(\n  keel_model_quality{%s, metric=\"rmse\", window!=\"reference\"}\n  / ignoring(window) group_left\n"
             "  keel_model_quality{%s, metric=\"rmse\", window=\"reference\"}\n) > %.6g\nand on(model, version, "
             "window)\nkeel_model_quality_samples{%s, window!=\"reference\"} >= %lld",
             x->sel, x->sel, 1 + a->rmse_rise, x->sel, (long long)a->min_labels);
    snprintf(desc, sizeof desc,
             "RMSE on the labels of the last {{ $labels.window }} is {{ $value }} times the validation rows' "
             "(meta.json; alert above %.6g, at least %lld labels; version {{ $labels.version }}).",
             1 + a->rmse_rise, (long long)a->min_labels);
    snprintf(sum, sizeof sum, "RMSE of model %s rising", x->model);
    alert(x, "KeelModelRMSERise", expr, a->alert_for_s, "ticket", sum, desc);
}

/* ==================================================================
 * SLOs: availability and latency, multi-window multi-burn-rate
 * (SRE workbook, ch. 5, "Alerting on SLOs", table 5-8)
 * ================================================================== */

static const char *const SLO_WINDOWS[] = {"5m", "30m", "1h", "2h", "6h", "1d", "3d"};

static const struct {
    double burn;
    const char *lng, *shrt, *severity;
} BURNS[] = {
    {14.4, "1h", "5m", "page"}, {6, "6h", "30m", "page"}, {3, "1d", "2h", "ticket"}, {1, "3d", "6h", "ticket"}};

/* result=~"a|b|..." of the server errors (with_success: and success) */
static void results_re(char *buf, size_t n, int with_success) {
    size_t l = 0;
    buf[0] = 0;
    for (int r = 0; r < SV_R_COUNT; r++)
        if (kl__sv_reason_is_server_error(r) || (with_success && r == SV_R_SUCCESS))
            l += (size_t)snprintf(buf + l, l < n ? n - l : 0, "%s%s", l ? "|" : "", kl__sv_reason_name(r));
}

static void slo_records(rules_ctx *x) {
    char bad[256], all[256], expr[2048], name[128], le[32];
    results_re(bad, sizeof bad, 0);
    results_re(all, sizeof all, 1);
    snprintf(le, sizeof le, "%g", x->cfg->alert.slo_latency_s); /* as metrics.c prints the bucket bound */
    for (size_t i = 0; i < KL_ARRAY_LEN(SLO_WINDOWS); i++) {
        const char *w = SLO_WINDOWS[i];
        snprintf(name, sizeof name, "model:keel_inference_errors:ratio_rate%s", w);
        snprintf(expr, sizeof expr,
                 "sum by (model) (rate(keel_inference_requests_total{%s, result=~\"%s\"}[%s]))\n"
                 "/\nsum by (model) (rate(keel_inference_requests_total{%s, result=~\"%s\"}[%s]))",
                 x->sel, bad, w, x->sel, all, w);
        record(x, name, expr);
    }
    for (size_t i = 0; i < KL_ARRAY_LEN(SLO_WINDOWS); i++) {
        const char *w = SLO_WINDOWS[i];
        snprintf(name, sizeof name, "model:keel_inference_slow:ratio_rate%s", w);
        snprintf(expr, sizeof expr,
                 "1 - (\n  sum by (model) (rate(keel_inference_request_duration_seconds_bucket{%s, le=\"%s\"}[%s]))\n"
                 "  /\n  sum by (model) (rate(keel_inference_request_duration_seconds_count{%s}[%s]))\n)",
                 x->sel, le, w, x->sel, w);
        record(x, name, expr);
    }
}

/* one alert per severity: (long > burn x budget and short > burn x budget) or ... */
static void burn_alert(rules_ctx *x, const char *name, const char *series, double budget, const char *severity,
                       const char *summary, const char *what) {
    kl_buf e;
    kl_buf_init(&e);
    char burns[128] = "";
    for (size_t i = 0; i < KL_ARRAY_LEN(BURNS); i++) {
        if (strcmp(BURNS[i].severity, severity)) continue;
        if (e.len) kl_buf_puts(&e, "\nor\n");
        kl_buf_printf(&e, "(\n  %s%s{%s} > (%g * %.6g)\n  and\n  %s%s{%s} > (%g * %.6g)\n)", series, BURNS[i].lng,
                      x->sel, BURNS[i].burn, budget, series, BURNS[i].shrt, x->sel, BURNS[i].burn, budget);
        size_t l = strlen(burns);
        snprintf(burns + l, sizeof burns - l, "%s%gx over %s and %s", l ? ", " : "", BURNS[i].burn, BURNS[i].lng,
                 BURNS[i].shrt);
    }
    char desc[512];
    snprintf(desc, sizeof desc,
             "%s of model %s spend the error budget (%.6g of requests) too fast: %s. Burn rates of the SRE "
             "workbook, table 5-8.",
             what, x->model, budget, burns);
    alert(x, name, e.data ? e.data : "", 0, severity, summary, desc);
    kl_buf_free(&e);
}

static void slo_group(rules_ctx *x, double slo) {
    const sv_alert_cfg *a = &x->cfg->alert;
    double avail_budget = 1 - slo / 100, lat_budget = 1 - a->slo_latency_target / 100;
    char sum[SV_NAME_MAX + 96], what[128], expr[640];
    group(x, "slo");
    slo_records(x);
    snprintf(sum, sizeof sum, "Model %s failing requests (availability SLO %.6g%%)", x->model, slo);
    burn_alert(x, "KeelAvailabilityBudgetBurn", "model:keel_inference_errors:ratio_rate", avail_budget, "page", sum,
               "Server errors");
    burn_alert(x, "KeelAvailabilityBudgetBurn", "model:keel_inference_errors:ratio_rate", avail_budget, "ticket", sum,
               "Server errors");
    snprintf(sum, sizeof sum, "Model %s slow (latency SLO %.6g%% under %g s)", x->model, a->slo_latency_target,
             a->slo_latency_s);
    snprintf(what, sizeof what, "Successful requests slower than %g s", a->slo_latency_s);
    burn_alert(x, "KeelLatencyBudgetBurn", "model:keel_inference_slow:ratio_rate", lat_budget, "page", sum, what);
    burn_alert(x, "KeelLatencyBudgetBurn", "model:keel_inference_slow:ratio_rate", lat_budget, "ticket", sum, what);
    snprintf(expr, sizeof expr, "keel_model_ready{%s} == 0", x->sel);
    snprintf(sum, sizeof sum, "Model %s has no ready version", x->model);
    alert(x, "KeelModelNotReady", expr, 300, "page", sum,
          "No version of the model passes its health probe or is loaded (GET /v2/repository/index says why).");
}

/* ==================================================================
 * Entry point
 * ================================================================== */

static int load_cfg(const char *mdir, sv_model_cfg *cfg, kl_err *e) {
    char p[1400];
    kl__sv_cfg_default(cfg);
    snprintf(p, sizeof p, "%s/config.yaml", mdir);
    if (!kl_path_exists(p)) return KL_OK;
    char *text = NULL;
    size_t len = 0;
    int rc = kl_read_file(p, &text, &len, e);
    if (!rc) rc = kl__sv_cfg_parse(text, len, p, cfg, e);
    kl_mem_free(text);
    return rc;
}

int kl_serve_rules(const kl_rules_opts *o, kl_buf *b, kl_err *e) {
    KL_ASSERT(o && o->repo && o->model && b);
    int rc = check_name(o->model, e);
    if (rc) return rc;
    if (!(o->slo == 0 || (o->slo >= 50 && o->slo <= 99.9999)))
        return kl_err_set(e, KL_EINVAL, "--slo %g: an availability objective in percent, 50..99.9999", o->slo);
    char mdir[1400];
    snprintf(mdir, sizeof mdir, "%s/%s", o->repo, o->model);
    struct stat sb;
    if (stat(mdir, &sb) || !S_ISDIR(sb.st_mode))
        return kl_err_set(e, KL_ENOTFOUND, "%s: no model '%s' in repository %s", mdir, o->model, o->repo);
    sv_model_cfg cfg;
    if ((rc = load_cfg(mdir, &cfg, e))) return rc;
    rules_ctx x = {b, o->model, "", &cfg};
    kl_buf sel;
    kl_buf_init(&sel);
    kl_buf_puts(&sel, "model=");
    quoted(&sel, o->model);
    snprintf(x.sel, sizeof x.sel, "%s", sel.data ? sel.data : "");
    kl_buf_free(&sel);
    double slo = o->slo > 0 ? o->slo : cfg.alert.slo_availability;
    kl_buf_printf(b,
                  "# Prometheus rules for keel model %s (keel monitor rules; docs/monitoring.md, \"Alert rules\").\n"
                  "# Thresholds: %s/config.yaml monitor: (defaults where absent); availability SLO %.6g%%.\n"
                  "groups:\n",
                  o->model, mdir, slo);
    if (cfg.monitor_on) drift_group(&x);
    else kl_buf_puts(b, "  # no drift or data-quality rules: monitor: enabled: false in config.yaml\n");
    if (cfg.monitor_on && cfg.fb_capacity > 0) quality_group(&x);
    else kl_buf_puts(b, "  # no live-quality rules: monitor: feedback_capacity is 0 (no labels are joined)\n");
    slo_group(&x, slo);
    return b->failed ? kl_err_set(e, KL_ENOMEM, "out of memory for the rules") : KL_OK;
}
