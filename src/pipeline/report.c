/* keel pipeline report: OUT/report.html, one self-contained page (inline
 * CSS, SVG charts from the tracking layer's chart code, no scripts or
 * external assets): data quality, features, training curves, evaluation
 * (confusion matrix, ROC), model card, lineage and timings per stage. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_int.h"


static cJSON *load_json(const char *dir, const char *name) {
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    void *j = NULL;
    kl_err e = {0};
    if (!kl_path_exists(p) || kl_json_load_file(p, &j, &e)) return NULL;
    return j;
}

static void cell_json(kl_buf *b, const cJSON *v) {
    kl_buf_puts(b, "<td class=\"n\">");
    if (cJSON_IsNumber(v)) kl_buf_printf(b, "%.6g", v->valuedouble);
    else if (cJSON_IsString(v)) kl_buf_html(b, v->valuestring);
    else if (cJSON_IsBool(v)) kl_buf_puts(b, cJSON_IsTrue(v) ? "true" : "false");
    kl_buf_puts(b, "</td>");
}

/* ================================================================ sections */

static void sec_data(pl_ctx *c, kl_buf *b) {
    cJSON *v = load_json(c->out, "validate.json");
    kl_buf_puts(b, "<h2>Data quality</h2>");
    if (!v) { kl_buf_puts(b, "<p>No validate stage output.</p>"); return; }
    cJSON *rows = cJSON_GetObjectItem(v, "rows");
    kl_buf_printf(b, "<p>Dataset version <code>%s</code>: %.0f rows read, %.0f accepted, %.0f rejected. Validation: ",
                  cJSON_GetStringValue(cJSON_GetObjectItem(v, "version_id")), cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "read")),
                  cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "accepted")), cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "rejected")));
    kl_buf_puts(b, cJSON_IsTrue(cJSON_GetObjectItem(v, "ok")) ? "<b class=\"ok\">passed</b> (file sha256 and row counts match the manifest).</p>" : "<b class=\"bad\">failed</b>.</p>");
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(v, "problems")) { kl_buf_puts(b, "<p class=\"bad\">"); kl_buf_html(b, it->valuestring); kl_buf_puts(b, "</p>"); }
    kl_buf_puts(b, "<table><tr><th>column</th><th>type</th><th>rows</th><th>nulls</th><th>null %</th><th>min</th><th>max</th><th>distinct (approx.)</th></tr>");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(v, "columns")) {
        double r = cJSON_GetNumberValue(cJSON_GetObjectItem(it, "rows")), n = cJSON_GetNumberValue(cJSON_GetObjectItem(it, "nulls"));
        kl_buf_puts(b, "<tr><td>");
        kl_buf_html(b, cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")));
        kl_buf_puts(b, "</td><td>");
        kl_buf_html(b, cJSON_GetStringValue(cJSON_GetObjectItem(it, "type")));
        kl_buf_printf(b, "</td><td class=\"n\">%.0f</td><td class=\"n\">%.0f</td><td class=\"n\">%.2f <span class=\"bar\" style=\"width:%.0fpx\"></span></td>", r, n,
                      r > 0 ? 100 * n / r : 0, r > 0 ? 200 * n / r : 0);
        cell_json(b, cJSON_GetObjectItem(it, "min"));
        cell_json(b, cJSON_GetObjectItem(it, "max"));
        cell_json(b, cJSON_GetObjectItem(it, "distinct_approx"));
        kl_buf_puts(b, "</tr>");
    }
    kl_buf_puts(b, "</table>");
    cJSON_Delete(v);
}

static void sec_features(pl_ctx *c, kl_buf *b) {
    const char *dir = kl__pl_out_str(c, KL_STAGE_FEATURES, "dir");
    cJSON *f = load_json(dir, "features.json");
    kl_buf_puts(b, "<h2>Features</h2>");
    if (!f) { kl_buf_puts(b, "<p>No features output.</p>"); return; }
    kl_buf_printf(
        b,
        "<p>Feature hash <code>%s</code>; %.0f output values per row; fitted on %.0f of %.0f rows. Fallbacks over all "
        "rows: "
        "unknown categories %.0f, nulls filled %.0f, zero denominators %.0f, clamped %.0f, empty windows %.0f.</p>",
        cJSON_GetStringValue(cJSON_GetObjectItem(f, "feature_hash")),
        cJSON_GetNumberValue(cJSON_GetObjectItem(f, "width")), kl__pl_out_num(c, KL_STAGE_FEATURES, "fit_rows"),
        kl__pl_out_num(c, KL_STAGE_FEATURES, "rows"), kl__pl_out_num(c, KL_STAGE_FEATURES, "unknown"),
        kl__pl_out_num(c, KL_STAGE_FEATURES, "null_filled"), kl__pl_out_num(c, KL_STAGE_FEATURES, "div_zero"),
        kl__pl_out_num(c, KL_STAGE_FEATURES, "clamped"), kl__pl_out_num(c, KL_STAGE_FEATURES, "empty_window"));
    kl_buf_puts(b, "<table><tr><th>feature</th><th>transform</th><th>inputs</th><th>dtype</th><th>cost / row (ns)</th></tr>");
    cJSON *it, *cost = cJSON_GetObjectItem(cJSON_GetObjectItem(f, "measured"), "cost_ns");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(f, "features")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
        kl_buf_puts(b, "<tr><td>");
        kl_buf_html(b, name);
        kl_buf_puts(b, "</td><td>");
        kl_buf_html(b, cJSON_GetStringValue(cJSON_GetObjectItem(it, "transform")));
        const char *agg = cJSON_GetStringValue(cJSON_GetObjectItem(it, "agg"));
        if (agg) { kl_buf_puts(b, " ("); kl_buf_html(b, agg); kl_buf_puts(b, ")"); }
        kl_buf_puts(b, "</td><td>");
        cJSON *in;
        int k = 0;
        cJSON_ArrayForEach(in, cJSON_GetObjectItem(it, "inputs")) {
            const char *col = cJSON_GetStringValue(cJSON_GetObjectItem(in, "column"));
            if (col) { kl_buf_puts(b, k++ ? ", " : ""); kl_buf_html(b, col); }
        }
        static const char *const roles[] = {"entity", "time", "value"};   /* window features */
        for (int r = 0; r < 3; r++) {
            const char *col = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(it, roles[r]), "column"));
            if (col) { kl_buf_printf(b, "%s%s ", k++ ? ", " : "", roles[r]); kl_buf_html(b, col); }
        }
        kl_buf_puts(b, "</td><td>");
        kl_buf_html(b, cJSON_GetStringValue(cJSON_GetObjectItem(it, "dtype")));
        kl_buf_puts(b, "</td>");
        cell_json(b, cJSON_GetObjectItem(cost, name ? name : ""));
        kl_buf_puts(b, "</tr>");
    }
    kl_buf_puts(b, "</table>");
    cJSON_Delete(f);
    char pp[4400];
    snprintf(pp, sizeof pp, "%s/profile.json", dir);
    kl_profile *prof = NULL;
    if (kl_path_exists(pp) && !kl_profile_load(pp, &prof, NULL)) kl__pl_profile_section(b, prof);
    kl_profile_free(prof);
}

/* Per-epoch train/validation loss and validation accuracy from metrics.csv. */
static void sec_training(pl_ctx *c, kl_buf *b) {
    const char *dir = kl__pl_out_str(c, KL_STAGE_TRAIN, "dir");
    char p[4600];
    snprintf(p, sizeof p, "%s/metrics.csv", dir);
    char *txt = NULL;
    size_t len;
    kl_err e = {0};
    kl_buf_puts(b, "<h2>Training</h2>");
    if (kl_read_file(p, &txt, &len, &e)) { kl_buf_puts(b, "<p>No metrics.csv.</p>"); return; }
    enum { MAXE = 4096 };
    int64_t *x[3];
    double *y[3];
    size_t n[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) { x[k] = calloc(MAXE, sizeof *x[k]); y[k] = calloc(MAXE, sizeof *y[k]); }
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        long long step, epoch;
        char split[32];
        double loss, acc = NAN;
        int got = sscanf(line, "%lld,%lld,%31[^,],%lf,%lf", &step, &epoch, split, &loss, &acc);
        if (got < 4 || !x[0] || !x[1] || !x[2] || !y[0] || !y[1] || !y[2]) continue;
        int k = !strcmp(split, "train") ? 0 : !strcmp(split, "val") ? 1 : -1;
        if (k < 0 || n[k] >= MAXE) continue;
        x[k][n[k]] = epoch + 1; y[k][n[k]++] = loss;
        if (k == 1 && got == 5 && n[2] < MAXE) { x[2][n[2]] = epoch + 1; y[2][n[2]++] = acc; }
    }
    kl_buf_puts(b, "<p>Training ");
    kl_buf_html(b,
                cJSON_GetStringValue(
                    cJSON_GetObjectItem(cJSON_GetObjectItem(kl__pl_stage_state(c, KL_STAGE_TRAIN), "out"), "note")));
    kl_buf_puts(b, ". Curves of the run's metrics.csv; the exported weights are the best epoch by validation loss.</p>");
    kl_chart_series loss[2] = {{"train loss", x[0], y[0], n[0], NULL, 0, 0},
                               {"validation loss", x[1], y[1], n[1], NULL, 0, 0}};
    kl_track_svg_chart(b, "loss per epoch", "epoch", "loss", loss, 2, 460, 300);
    if (n[2]) {
        kl_chart_series acc = {"validation accuracy", x[2], y[2], n[2], NULL, 0, 0};
        kl_track_svg_chart(b, "validation accuracy per epoch", "epoch", "accuracy", &acc, 1, 460, 300);
    }
    for (int k = 0; k < 3; k++) { free(x[k]); free(y[k]); }
    kl_mem_free(txt);
}

/* A regression model's errors beside the mean predictor's (the baseline it
 * must beat), from keel eval's mae/rmse/r2/baseline. */
static void sec_eval_regression(kl_buf *b, const cJSON *v) {
    double mae = cJSON_GetNumberValue(cJSON_GetObjectItem(v, "mae")),
           rmse = cJSON_GetNumberValue(cJSON_GetObjectItem(v, "rmse"));
    if (!isfinite(rmse)) return;
    const cJSON *bl = cJSON_GetObjectItem(v, "baseline");
    double r2 = cJSON_GetNumberValue(cJSON_GetObjectItem(v, "r2"));
    double bmae = cJSON_GetNumberValue(cJSON_GetObjectItem(bl, "mae")),
           brmse = cJSON_GetNumberValue(cJSON_GetObjectItem(bl, "rmse"));
    kl_buf_printf(b, "<div class=\"kpi\">MAE<b>%.4g</b></div><div class=\"kpi\">RMSE<b>%.4g</b></div>", mae, rmse);
    if (isfinite(r2)) kl_buf_printf(b, "<div class=\"kpi\">R&sup2;<b>%.4f</b></div>", r2);
    kl_buf_puts(b, "<h3>Regression errors</h3><table><tr><th></th><th>MAE</th><th>RMSE</th></tr>");
    kl_buf_printf(b, "<tr><th>model</th><td>%.6g</td><td>%.6g</td></tr>", mae, rmse);
    if (isfinite(brmse))
        kl_buf_printf(b, "<tr><th>mean predictor (%.6g)</th><td>%.6g</td><td>%.6g</td></tr>",
                      cJSON_GetNumberValue(cJSON_GetObjectItem(bl, "mean")), bmae, brmse);
    kl_buf_puts(b,
                "</table><p>The mean predictor always answers the mean of these labels: a model that does not beat it "
                "has learnt nothing.</p>");
}

static void sec_eval(pl_ctx *c, kl_buf *b) {
    cJSON *v = load_json(c->out, "eval.json");
    kl_buf_puts(b, "<h2>Evaluation</h2>");
    if (!v) { kl_buf_puts(b, "<p>No evaluate stage output.</p>"); return; }
    double auc = cJSON_GetNumberValue(cJSON_GetObjectItem(v, "auc")), ra = cJSON_GetNumberValue(cJSON_GetObjectItem(v, "reference_auc"));
    kl_buf_printf(b, "<p>%.0f rows of the <b>%s</b> split (never seen in training or feature fitting).</p>", cJSON_GetNumberValue(cJSON_GetObjectItem(v, "rows")),
                  cJSON_GetStringValue(cJSON_GetObjectItem(v, "split")) ? cJSON_GetStringValue(cJSON_GetObjectItem(v, "split")) : "?");
    if (isfinite(auc)) kl_buf_printf(b, "<div class=\"kpi\">test AUC<b>%.4f</b></div>", auc);
    if (isfinite(ra)) kl_buf_printf(b, "<div class=\"kpi\">Bayes-optimal AUC<b>%.4f</b></div><div class=\"kpi\">gap<b>%.4f</b></div>", ra, ra - auc);
    sec_eval_regression(b, v);
    double acc = cJSON_GetNumberValue(cJSON_GetObjectItem(v, "accuracy"));
    if (isfinite(acc)) kl_buf_printf(b, "<div class=\"kpi\">accuracy<b>%.2f %%</b></div>", 100 * acc);
    kl_buf_printf(b, "<div class=\"kpi\">loss<b>%.4f</b></div>", cJSON_GetNumberValue(cJSON_GetObjectItem(v, "loss")));
    if (isfinite(ra)) kl_buf_puts(b, "<p>The Bayes-optimal AUC is the AUC of the click log generator's true click probability on the same rows: no model can do better on average.</p>");
    cJSON *cm = cJSON_GetObjectItem(v, "confusion");
    int C = cJSON_GetArraySize(cm);
    if (C > 0 && C <= 32) {
        kl_buf_puts(b, "<h3>Confusion matrix</h3><table><tr><th>true \\ predicted</th>");
        for (int j = 0; j < C; j++) kl_buf_printf(b, "<th>%d</th>", j);
        kl_buf_puts(b, "</tr>");
        for (int i = 0; i < C; i++) {
            kl_buf_printf(b, "<tr><th>%d</th>", i);
            for (int j = 0; j < C; j++) cell_json(b, cJSON_GetArrayItem(cJSON_GetArrayItem(cm, i), j));
            kl_buf_puts(b, "</tr>");
        }
        kl_buf_puts(b, "</table>");
    }
    cJSON *roc = cJSON_GetObjectItem(v, "roc");
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(roc, "fpr"));
    if (n > 1) {
        double *fx = calloc((size_t)n, sizeof *fx), *ty = calloc((size_t)n, sizeof *ty);
        int64_t *dummy = calloc((size_t)n, sizeof *dummy);
        if (fx && ty && dummy) {
            for (int i = 0; i < n; i++) {
                fx[i] = cJSON_GetArrayItem(cJSON_GetObjectItem(roc, "fpr"), i)->valuedouble;
                ty[i] = cJSON_GetArrayItem(cJSON_GetObjectItem(roc, "tpr"), i)->valuedouble;
            }
            static const double dx[2] = {0, 1}, dy[2] = {0, 1};
            static const int64_t dd[2] = {0, 0};
            kl_chart_series s[2] = {{"model", dummy, ty, (size_t)n, fx, 0, 0}, {"chance", dd, dy, 2, dx, 0, 0}};
            kl_buf_puts(b, "<h3>ROC curve</h3>");
            kl_track_svg_chart(b, "ROC (test split)", "false positive rate", "true positive rate", s, 2, 460, 400);
        }
        free(fx); free(ty); free(dummy);
    }
    cJSON_Delete(v);
}

static void sec_card(pl_ctx *c, kl_buf *b) {
    char p[4600], *txt = NULL;
    size_t len;
    kl_err e = {0};
    snprintf(p, sizeof p, "%s/card.md", kl__pl_out_str(c, KL_STAGE_TRAIN, "dir"));
    kl_buf_puts(b, "<h2>Model card</h2>");
    if (kl_read_file(p, &txt, &len, &e)) { kl_buf_puts(b, "<p>No card.md.</p>"); return; }
    kl_buf_puts(b, "<pre>");
    kl_buf_html(b, txt);
    kl_buf_puts(b, "</pre>");
    kl_mem_free(txt);
}

static void chain_item(kl_buf *b, const char *what, const char *val) {
    kl_buf_printf(b, "<span>%s<br><code>", what);
    kl_buf_html(b, val && *val ? val : "-");
    kl_buf_puts(b, "</code></span> &rarr; ");
}

static void sec_lineage(pl_ctx *c, kl_buf *b) {
    kl_pipeline_result *r = c->res;
    char v[300];
    kl_buf_puts(b, "<h2>Lineage</h2><p class=\"chain\">");
    chain_item(b, "dataset version", r->dataset_version);
    chain_item(b, "feature hash", r->feature_hash);
    snprintf(v, sizeof v, "run %lld", (long long)r->train_run_id);
    chain_item(b, "training run", v);
    snprintf(v, sizeof v, "%s/%lld", r->model, (long long)r->model_version);
    chain_item(b, "model version", r->model_version ? v : "");
    snprintf(v, sizeof v, "%s@%s", r->model, r->alias);
    kl_buf_printf(b, "<span>alias<br><code>");
    kl_buf_html(b, r->alias[0] ? v : "-");
    kl_buf_puts(b, "</code></span></p><p>Experiment store <code>");
    kl_buf_html(b, r->tracking);
    kl_buf_printf(b, "</code>, pipeline run %lld (each stage a child run). Model repository <code>", (long long)r->run_id);
    kl_buf_html(b, r->repo);
    kl_buf_puts(b, "</code>.</p>");
}

static void sec_timings(pl_ctx *c, kl_buf *b) {
    static const char *const word[] = {"not selected", "ran", "cached", "failed"};
    double mx = 0;
    for (int s = 0; s < KL_STAGE_COUNT; s++) mx = fmax(mx, c->res->st[s].last_seconds);
    kl_buf_puts(b, "<h2>Timings per stage</h2><table><tr><th>stage</th><th>this run</th><th>seconds (this run)</th><th>seconds (run that made the outputs)</th><th></th><th>output</th></tr>");
    for (int s = 0; s < KL_STAGE_COUNT; s++) {
        const kl_pipeline_stage_result *st = &c->res->st[s];
        if (!c->cfg[s] || s == KL_STAGE_SERVE) continue;
        kl_buf_printf(b, "<tr><td>%s</td><td>%s</td><td class=\"n\">%.2f</td><td class=\"n\">%.2f</td><td><span class=\"bar\" style=\"width:%.0fpx\"></span></td><td>",
                      kl_pipeline_stage_name(s), word[st->state], st->seconds, st->last_seconds, mx > 0 ? 160 * st->last_seconds / mx : 0);
        kl_buf_html(b, st->note);
        kl_buf_puts(b, "</td></tr>");
    }
    kl_buf_puts(b, "</table>");
}

int kl__pl_report_write(pl_ctx *c, const char *path, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    char ts[40];
    kl_time_rfc3339(kl_time_now_us(), ts, sizeof ts);
    kl_buf_printf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>keel pipeline report: ");
    kl_buf_html(&b, c->res->name);
    kl_buf_printf(&b, "</title><style>%s</style></head><body><h1>keel pipeline report: ", kl__pl_report_css);
    kl_buf_html(&b, c->res->name);
    kl_buf_printf(&b, "</h1><p>Written %s; output folder <code>", ts);
    kl_buf_html(&b, c->out);
    kl_buf_puts(&b, "</code>.</p>");
    sec_data(c, &b);
    sec_features(c, &b);
    sec_training(c, &b);
    sec_eval(c, &b);
    sec_card(c, &b);
    sec_lineage(c, &b);
    sec_timings(c, &b);
    kl_buf_puts(&b, "</body></html>\n");
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}
