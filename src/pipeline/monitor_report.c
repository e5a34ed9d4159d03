/* `keel monitor report --log DIR` (kl_monitor_report; docs/monitoring.md,
 * "The monitoring report"): one self-contained HTML page (inline CSS and
 * SVG, no scripts or external assets) from a prediction log: per model and
 * version, the reference profile's histograms next to the live ones and
 * the drift table with its thresholds — computed by the server's own
 * monitor (kl_monitor, fed the logged rows with their served times, one
 * window spanning them all), so the report and /monitor agree — and
 * quality (from the joined labels) and latency over time.
 * Also the reference-profile histograms the pipeline report shows
 * (kl__pl_profile_section). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include <keel/data.h>
#include <keel/profile.h>

#include "pipeline/pipeline_int.h"

const char *const kl__pl_report_css =
    "body{font-family:sans-serif;max-width:980px;margin:24px auto;padding:0 16px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}"
    "h3{font-size:15px;margin-top:20px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:"
    "13px}"
    "th{background:#f4f4f4}td.n{text-align:right;font-family:monospace}code{font-size:12px}"
    ".kpi{display:inline-block;margin:0 24px 8px 0}.kpi b{display:block;font-size:24px}"
    ".bar{display:inline-block;height:10px;background:#1f77b4}.ok{color:#2ca02c}.bad{color:#d62728}"
    "pre{background:#f8f8f8;padding:12px;white-space:pre-wrap;font-size:12px}"
    ".chain span{display:inline-block;border:1px solid #bbb;border-radius:4px;padding:4px 8px;margin:2px}"
    ".hists{display:flex;flex-wrap:wrap;gap:12px}.hist{font-size:12px}";

/* ==================================================================
 * Histograms: reference (and live) shares per bin, as inline SVG
 * ================================================================== */

static void bin_label(const kl_colprof *c, size_t i, size_t nb, char *buf, size_t n) {
    if (c->categorical) {
        snprintf(buf, n, "%s", i + 1 == nb ? "(other)" : c->top[i]);
        return;
    }
    if (i == 0) snprintf(buf, n, "< %.4g", c->edges[0]);
    else if (i + 1 == nb) snprintf(buf, n, "> %.4g", c->edges[c->nedges - 1]);
    else snprintf(buf, n, "[%.4g, %.4g)", c->edges[i - 1], c->edges[i]);
}

/* one column: a bar pair per bin, the reference's (grey) and the live one's (blue, live may be NULL),
 * counts over its nb bins as an inline SVG */
static void pl_hist_svg(kl_buf *b, const kl_colprof *c, const uint64_t *ref, const uint64_t *live, size_t nb) {
    const int W = 300, H = 110, pad = 4;
    uint64_t nr = 0, nl = 0;
    for (size_t i = 0; i < nb; i++) {
        nr += ref[i];
        nl += live ? live[i] : 0;
    }
    double mx = 0;
    for (size_t i = 0; i < nb; i++) {
        double a = nr ? (double)ref[i] / (double)nr : 0, l = live && nl ? (double)live[i] / (double)nl : 0;
        if (a > mx) mx = a;
        if (l > mx) mx = l;
    }
    kl_buf_puts(b, "<div class=\"hist\"><b>");
    kl_buf_html(b, c->name);
    kl_buf_printf(b, "</b> <span>(%s)</span><br><svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">",
                  kl_prof_role_name(c->role), W, H, W, H);
    double bw = nb ? (double)(W - 2 * pad) / (double)nb : 0;
    char lab[300];
    for (size_t i = 0; i < nb; i++) {
        double a = nr && mx > 0 ? (double)ref[i] / (double)nr / mx : 0;
        double l = live && nl && mx > 0 ? (double)live[i] / (double)nl / mx : 0;
        double x = pad + bw * (double)i, w = live ? bw * 0.45 : bw * 0.9;
        bin_label(c, i, nb, lab, sizeof lab);
        kl_buf_printf(
            b, "<rect class=\"ref\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#aaaaaa\"><title>", x,
            (H - 14) * (1 - a), w, (H - 14) * a);
        kl_buf_html(b, lab);
        kl_buf_printf(b, ": reference %.2f%%</title></rect>", nr ? 100.0 * (double)ref[i] / (double)nr : 0);
        if (live) {
            kl_buf_printf(
                b, "<rect class=\"live\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#1f77b4\"><title>",
                x + w, (H - 14) * (1 - l), w, (H - 14) * l);
            kl_buf_html(b, lab);
            kl_buf_printf(b, ": live %.2f%%</title></rect>", nl ? 100.0 * (double)live[i] / (double)nl : 0);
        }
    }
    kl_buf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\">%s</text></svg></div>", pad, H - 2,
                  live ? "grey: reference, blue: live (share of values per bin)" : "share of values per bin");
}

/* the reference counts of a profile column over its bins (numbers: bins; categories: top + other) */
static size_t ref_bins(const kl_colprof *c, uint64_t *out, size_t cap) {
    size_t nb = c->categorical ? c->ntop + 1 : c->nedges ? c->nedges + 1 : 0;
    if (nb > cap) nb = cap;
    for (size_t i = 0; i < nb; i++)
        out[i] = !c->categorical ? c->bins[i] : i + 1 == c->ntop + 1 ? c->other : c->top_count[i];
    return nb;
}

void kl__pl_profile_section(kl_buf *b, const kl_profile *p) {
    kl_buf_printf(
        b,
        "<p>Reference profile: %llu rows, %zu columns (<code>profile.json</code>, feature hash <code>%s</code>).</p>",
        (unsigned long long)p->rows, p->ncols, p->feature_hash);
    kl_buf_puts(b, "<div class=\"hists\">");
    uint64_t ref[KL_PROF_TOPK + 4];
    for (size_t i = 0; i < p->ncols; i++) {
        size_t nb = ref_bins(&p->cols[i], ref, KL_PROF_TOPK + 4);
        if (nb) pl_hist_svg(b, &p->cols[i], ref, NULL, nb);
    }
    kl_buf_puts(b, "</div>");
}

/* ==================================================================
 * The log of one model
 * ================================================================== */

typedef struct {
    kl_column **c;
    size_t n, rows;
    int at, ver, lat, rec, input, endpoint, label;
} logtab;

static int col_of(const logtab *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->c[i]->name, name)) return (int)i;
    return -1;
}

static double num_at(const logtab *t, int col, size_t r) {
    if (col < 0 || kl_column_is_null(t->c[col], r)) return NAN;
    const kl_column *c = t->c[col];
    return c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64 ? kl_column_get_f64(c, r)
                                                                  : (double)kl_column_get_i64(c, r);
}

static void fmt_time(int64_t us, char *buf, size_t n) {
    char t[40];
    kl_time_rfc3339(us, t, sizeof t);
    snprintf(buf, n, "%.19s", t);
}

/* the monitor's windows, thresholds: one window over the whole span (≥ 12 s) */
static void span_cfg(const kl_monitor_cfg *base, int64_t span_us, kl_monitor_cfg *cfg) {
    *cfg = *base;
    cfg->nwin = 1;
    int64_t s = span_us / 1000000 + 1;
    cfg->win_s[0] = 2 * s + 24; /* its 12 slots cover at least 11/12 of it: the whole span */
}

/* the thresholds the server monitored version dir with (monitor.json, kept
 * by the prediction log from config.yaml's monitor:); 1 when read */
static int served_thresholds(const char *dir, kl_monitor_cfg *c) {
    char p[4500];
    snprintf(p, sizeof p, "%s/monitor.json", dir);
    void *j = NULL;
    if (!kl_path_exists(p) || kl_json_load_file(p, &j, NULL)) return 0;
    const cJSON *t = cJSON_GetObjectItem(j, "thresholds");
    struct {
        const char *k;
        double *v;
    } d[] = {{"psi", &c->psi},
             {"js", &c->js},
             {"p_value", &c->p_value},
             {"min_expected", &c->min_expected},
             {"null_delta", &c->null_delta},
             {"unknown_ratio", &c->unknown_ratio},
             {"oob_ratio", &c->oob_ratio}};
    int ok = cJSON_IsObject(t);
    for (size_t i = 0; ok && i < sizeof d / sizeof d[0]; i++) {
        const cJSON *x = cJSON_GetObjectItem(t, d[i].k);
        if (cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble >= 0) *d[i].v = x->valuedouble;
    }
    const cJSON *ms = ok ? cJSON_GetObjectItem(t, "min_samples") : NULL;
    if (cJSON_IsNumber(ms) && ms->valuedouble >= 1 && ms->valuedouble <= 1e12)
        c->min_samples = (uint64_t)ms->valuedouble;
    cJSON_Delete(j);
    return ok;
}

/* one version: its rows fed to a monitor of its profile, the drift table and the histograms */
static void version_section(const kl_monitor_report_opts *o, const char *model, const logtab *t, int64_t version,
                            kl_buf *b) {
    char dir[4400], p[4500];
    snprintf(dir, sizeof dir, "%s/%s/versions/%lld", o->log_dir, model, (long long)version);
    kl_buf_printf(b, "<h3>Version %lld</h3>", (long long)version);
    kl_profile *prof = NULL;
    kl_features *f = NULL;
    kl_monitor *m = NULL;
    kl_err e = {0};
    snprintf(p, sizeof p, "%s/profile.json", dir);
    if (!kl_path_exists(p)) {
        kl_buf_puts(b,
                    "<p>No <code>profile.json</code> for this version in the log: no reference to compare with.</p>");
        return;
    }
    if (kl_profile_load(p, &prof, &e)) goto fail;
    snprintf(p, sizeof p, "%s/features.json", dir);
    if (kl_path_exists(p) && kl_features_load(p, &f, &e)) goto fail;
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (size_t r = 0; r < t->rows; r++)
        if ((int64_t)num_at(t, t->ver, r) == version) {
            int64_t at = (int64_t)num_at(t, t->at, r);
            if (at < t0) t0 = at;
            if (at > t1) t1 = at;
        }
    kl_monitor_cfg def, cfg;
    kl_monitor_cfg_default(&def);
    int served = !o->cfg && served_thresholds(dir, &def);
    span_cfg(o->cfg ? o->cfg : &def, t1 - t0, &cfg);
    kl_profile *ref = prof;
    prof = NULL;
    if (kl_monitor_new(ref, f, &cfg, &m, &e)) goto fail; /* takes ref */
    /* the rows: raw record (:predict), feature slots, outputs, at their served time */
    size_t width = f ? kl_features_width(f) : 0, nout = 0;
    int slot_col[4096], out_col[64];
    char name[400];
    for (size_t k = 0; k < width && k < 4096; k++) {
        snprintf(name, sizeof name, "feature.%s", kl_features_slot_name(f, k));
        slot_col[k] = col_of(t, name);
    }
    if (col_of(t, "output") >= 0) out_col[nout++] = col_of(t, "output");
    for (; nout < 64; nout++) {
        snprintf(name, sizeof name, "output[%zu]", nout);
        if ((out_col[nout] = col_of(t, name)) < 0) break;
    }
    float *slots = malloc((width ? width : 1) * sizeof *slots), outs[64];
    if (!slots) {
        kl_err_set(&e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    uint64_t fed = 0;
    for (size_t r = 0; r < t->rows; r++) {
        if ((int64_t)num_at(t, t->ver, r) != version) continue;
        int64_t now = (int64_t)num_at(t, t->at, r) * 1000;
        void *rec = NULL;
        size_t n;
        const char *ep = t->endpoint >= 0 && !kl_column_is_null(t->c[t->endpoint], r)
            ? kl_column_get_str(t->c[t->endpoint], r, &n)
            : "";
        if (!strncmp(ep, "predict", 7) && t->input >= 0 && !kl_column_is_null(t->c[t->input], r)) {
            const char *s = kl_column_get_str(t->c[t->input], r, &n);
            if (kl_json_parse_opts(s, n, "input", KL_JSON_KEEP_NUL, &rec, NULL)) rec = NULL;
        }
        int have_slots = width > 0 && width <= 4096;
        for (size_t k = 0; have_slots && k < width; k++) {
            double v = num_at(t, slot_col[k], r);
            if (isnan(v)) have_slots = 0;
            slots[k] = (float)v;
        }
        int have_outs = nout > 0;
        for (size_t k = 0; have_outs && k < nout; k++) {
            double v = num_at(t, out_col[k], r);
            if (isnan(v)) have_outs = 0;
            outs[k] = (float)v;
        }
        kl_monitor_observe(m, rec, have_slots ? slots : NULL, width, have_outs ? outs : NULL, nout, now);
        cJSON_Delete(rec);
        fed++;
    }
    free(slots);
    kl_monitor_stat *st = NULL;
    size_t nst = 0;
    if (kl_monitor_stats(m, t1 * 1000, &st, &nst, &e)) goto fail;
    const kl_monitor_cfg *g = kl_monitor_config(m);
    kl_buf_printf(b,
                  "<p>%llu logged row(s) from %s; reference %llu rows. Thresholds: PSI &ge; %g, JS &ge; %g, KS / "
                  "&chi;&sup2; p &lt; %g, null ratio above the reference's by &gt; %g, unknown categories &gt; %g, "
                  "out of range &gt; %g; tested from %llu non-null values (%s, docs/monitoring.md).</p>",
                  (unsigned long long)fed, model, (unsigned long long)kl_monitor_profile(m)->rows, g->psi, g->js,
                  g->p_value, g->null_delta, g->unknown_ratio, g->oob_ratio, (unsigned long long)g->min_samples,
                  served ? "the thresholds this version was served with" : "the server's defaults");
    kl_buf_puts(b,
                "<table class=\"drift\"><tr><th>column</th><th>role</th><th>n</th><th>null %</th><th>ref null %</th>"
                "<th>PSI</th><th>JS</th><th>KS (p)</th><th>&chi;&sup2; (p)</th><th>unknown / out of range</th>"
                "<th>drift</th></tr>");
    for (size_t i = 0; i < nst; i++) {
        const kl_monitor_stat *s = &st[i];
        char drift[200];
        kl_monitor_drift_names(s->drift, drift, sizeof drift);
        kl_buf_puts(b, "<tr><td>");
        kl_buf_html(b, s->column);
        kl_buf_printf(b, "</td><td>%s</td><td class=\"n\">%llu</td><td class=\"n\">%.2f</td><td class=\"n\">%.2f</td>",
                      kl_prof_role_name(s->role), (unsigned long long)s->n, 100 * s->null_ratio,
                      100 * s->ref_null_ratio);
        if (!s->tested) kl_buf_puts(b, "<td colspan=\"5\">too few values to test</td>");
        else if (s->categorical)
            kl_buf_printf(b,
                          "<td class=\"n\">%.4f</td><td class=\"n\">%.4f</td><td>-</td><td class=\"n\">%.3g (%.3g)</td>"
                          "<td class=\"n\">%.2f%%</td>",
                          s->psi, s->js, s->chi2, s->chi2_p, 100 * s->unknown_ratio);
        else
            kl_buf_printf(b,
                          "<td class=\"n\">%.4f</td><td class=\"n\">%.4f</td><td class=\"n\">%.4f (%.3g)</td><td>-</td>"
                          "<td class=\"n\">%.2f%%</td>",
                          s->psi, s->js, s->ks, s->ks_p, 100 * s->oob_ratio);
        kl_buf_printf(b, "<td class=\"%s\">%s</td></tr>", s->drift ? "bad" : "ok", s->drift ? drift : "none");
    }
    kl_buf_puts(b, "</table><div class=\"hists\">");
    uint64_t live[KL_PROF_TOPK + 4], rb[KL_PROF_TOPK + 4];
    const kl_profile *rp = kl_monitor_profile(m);
    for (size_t i = 0; i < nst; i++) {
        size_t nb = 0;
        if (kl_monitor_live_bins(m, t1 * 1000, 0, i, live, rb, KL_PROF_TOPK + 4, &nb) || !nb) continue;
        const kl_colprof *c = NULL;
        for (size_t k = 0; k < rp->ncols && !c; k++)
            if (!strcmp(rp->cols[k].name, st[i].column) && rp->cols[k].role == st[i].role) c = &rp->cols[k];
        if (c) pl_hist_svg(b, c, rb, live, nb);
    }
    kl_buf_puts(b, "</div>");
    free(st);
    kl_monitor_free(m);
    kl_features_free(f);
    return;
fail:
    kl_buf_puts(b, "<p class=\"bad\">Cannot compare with the reference: ");
    kl_buf_html(b, kl_err_what(&e));
    kl_buf_puts(b, "</p>");
    kl_monitor_free(m);
    kl_profile_free(prof);
    kl_features_free(f);
}

/* ==================================================================
 * Quality and latency over time
 * ================================================================== */

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a bucket width that gives at most ~48 points over the span */
static int64_t bucket_us(int64_t span_us) {
    static const int64_t steps[] = {1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (span_us / (steps[i] * 1000000) < 48) return steps[i] * 1000000;
    return 30LL * 86400 * 1000000;
}

/* the task of the latest version: meta.json output.postprocess (sigmoid, softmax; else a regression) */
static int task_of(const kl_monitor_report_opts *o, const char *model, int64_t version) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s/versions/%lld/meta.json", o->log_dir, model, (long long)version);
    void *j = NULL;
    if (!kl_path_exists(p) || kl_json_load_file(p, &j, NULL)) return 0;
    const char *pp = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "output"), "postprocess"));
    int t = pp && !strcmp(pp, "sigmoid") ? 1 : pp && !strcmp(pp, "softmax") ? 2 : 0;
    cJSON_Delete(j);
    return t;
}

typedef struct {
    uint64_t n, labelled;
    double acc, ll, brier, ae, se; /* sums over the labelled rows */
    double *lat;
    size_t nlat;
} bucket;

/* one labelled row's quality terms into q: the prediction p from the logged outputs */
static void quality_add(bucket *q, int task, const logtab *t, const int *out_col, size_t nout, size_t r) {
    double y = num_at(t, t->label, r);
    if (isnan(y)) return;
    if (task == 1) {
        double z = num_at(t, out_col[0], r), pr = 1 / (1 + exp(-z)), pc = fmin(fmax(pr, 1e-15), 1 - 1e-15);
        if (isnan(z)) return;
        q->acc += (pr >= 0.5) == (y >= 0.5);
        q->ll += -(y * log(pc) + (1 - y) * log(1 - pc));
        q->brier += (pr - y) * (pr - y);
    } else if (task == 2) {
        double mx = -INFINITY, s = 0, zk[64];
        size_t arg = 0;
        for (size_t k = 0; k < nout; k++) {
            zk[k] = num_at(t, out_col[k], r);
            if (isnan(zk[k])) return;
            if (zk[k] > mx) {
                mx = zk[k];
                arg = k;
            }
        }
        for (size_t k = 0; k < nout; k++) s += exp(zk[k] - mx);
        size_t yk = (size_t)y;
        if (y < 0 || yk >= nout) return;
        double py = fmin(fmax(exp(zk[yk] - mx) / s, 1e-15), 1 - 1e-15);
        q->acc += arg == yk;
        q->ll += -log(py);
        for (size_t k = 0; k < nout; k++) {
            double pk = exp(zk[k] - mx) / s - (k == yk);
            q->brier += pk * pk;
        }
    } else {
        double v = num_at(t, out_col[0], r);
        if (isnan(v)) return;
        q->ae += fabs(v - y);
        q->se += (v - y) * (v - y);
    }
    q->labelled++;
}

static void over_time(const kl_monitor_report_opts *o, const char *model, const logtab *t, int64_t latest, kl_buf *b) {
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (size_t r = 0; r < t->rows; r++) {
        int64_t at = (int64_t)num_at(t, t->at, r);
        if (at < t0) t0 = at;
        if (at > t1) t1 = at;
    }
    if (t0 > t1) return;
    int64_t bw = bucket_us(t1 - t0);
    size_t nbk = (size_t)((t1 - t0) / bw) + 1;
    bucket *bk = calloc(nbk, sizeof *bk);
    if (!bk) return;
    int task = task_of(o, model, latest);
    int out_col[64];
    size_t nout = 0;
    char name[40];
    if (col_of(t, "output") >= 0) out_col[nout++] = col_of(t, "output");
    for (; nout < 64; nout++) {
        snprintf(name, sizeof name, "output[%zu]", nout);
        if ((out_col[nout] = col_of(t, name)) < 0) break;
    }
    for (size_t r = 0; r < t->rows; r++) {
        bucket *q = &bk[(size_t)(((int64_t)num_at(t, t->at, r) - t0) / bw)];
        q->n++;
        double lat = num_at(t, t->lat, r);
        if (!isnan(lat) && (t->rec < 0 || num_at(t, t->rec, r) == 0)) { /* once per request */
            double *nl = realloc(q->lat, (q->nlat + 1) * sizeof *nl);
            if (nl) {
                q->lat = nl;
                q->lat[q->nlat++] = lat;
            }
        }
        if (t->label >= 0 && nout) quality_add(q, task, t, out_col, nout, r);
    }
    double *xf = calloc(nbk, sizeof *xf), *y[5];
    int64_t *xs = calloc(nbk, sizeof *xs);
    for (int k = 0; k < 5; k++) y[k] = calloc(nbk, sizeof *y[k]);
    uint64_t labelled = 0;
    int have = xf && xs && y[0] && y[1] && y[2] && y[3] && y[4];
    for (size_t i = 0; have && i < nbk; i++) {
        bucket *q = &bk[i];
        xf[i] = (double)((int64_t)i * bw) / 60e6;
        xs[i] = (int64_t)i;
        double n = (double)q->labelled;
        labelled += q->labelled;
        y[0][i] = n ? (task ? q->acc / n : q->ae / n) : NAN;
        y[1][i] = n ? (task ? q->ll / n : sqrt(q->se / n)) : NAN;
        y[2][i] = n && task ? q->brier / n : NAN;
        if (q->nlat) qsort(q->lat, q->nlat, sizeof *q->lat, cmp_dbl);
        y[3][i] = q->nlat ? q->lat[(q->nlat - 1) / 2] : NAN;
        y[4][i] = q->nlat ? q->lat[(size_t)ceil(0.99 * (double)q->nlat) - 1] : NAN;
    }
    char ts[40], lab[200];
    fmt_time(t0, ts, sizeof ts);
    snprintf(lab, sizeof lab, "minutes since %s UTC (buckets of %lld s)", ts, (long long)(bw / 1000000));
    kl_buf_printf(b,
                  "<h3>Quality over time</h3><p>%llu labelled prediction(s) (labels joined by request id, "
                  "<code>keel data join-log</code>); task: %s.</p>",
                  (unsigned long long)labelled,
                  task == 1       ? "binary (sigmoid)"
                      : task == 2 ? "classes (softmax)"
                                  : "regression");
    if (have && labelled) {
        kl_chart_series qs[3] = {{task ? "accuracy" : "MAE", xs, y[0], nbk, xf, task != 0, 1},
                                 {task ? "log-loss" : "RMSE", xs, y[1], nbk, xf, 0, 1},
                                 {"Brier score", xs, y[2], nbk, xf, 0, 1}};
        kl_chart c = {"live quality per bucket",
                      lab,
                      task ? "log-loss, Brier" : "error",
                      task ? "accuracy" : NULL,
                      qs,
                      task ? 3u : 2u,
                      640,
                      260,
                      0};
        kl_svg_chart(b, &c);
    } else {
        kl_buf_puts(b, "<p>No labels joined yet: post them to <code>POST /v2/models/M/feedback</code>.</p>");
    }
    kl_buf_puts(b, "<h3>Latency over time</h3><p>From a request's arrival to its outputs (queue and compute).</p>");
    if (have) {
        kl_chart_series ls[2] = {{"p50 ms", xs, y[3], nbk, xf, 0, 1}, {"p99 ms", xs, y[4], nbk, xf, 0, 1}};
        kl_chart c = {"latency per bucket", lab, "ms", NULL, ls, 2, 640, 260, 0};
        kl_svg_chart(b, &c);
    }
    for (size_t i = 0; i < nbk; i++) free(bk[i].lat);
    free(bk);
    free(xf);
    free(xs);
    for (int k = 0; k < 5; k++) free(y[k]);
}

/* ==================================================================
 * A model, the report
 * ================================================================== */

static int cmp_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int model_section(const kl_monitor_report_opts *o, const char *model, kl_buf *b, kl_err *e) {
    kl_join_log_opts jo = {0};
    jo.log_dir = o->log_dir;
    jo.model = model;
    jo.label = "label";
    jo.label_type = KL_COL_FLOAT64;
    jo.since_us = o->since_us;
    jo.keep_unlabelled = 1;
    kl_join_log_result res;
    logtab t = {0};
    int rc = kl_join_log_read(&jo, &t.c, &t.n, &res, e);
    kl_buf_puts(b, "<h2>Model ");
    kl_buf_html(b, model);
    kl_buf_puts(b, "</h2>");
    if (rc == KL_ENOTFOUND && !res.predictions) {
        kl_buf_puts(b, "<p>No predictions in the log for this period.</p>");
        return KL_OK;
    }
    if (rc) return rc;
    t.rows = t.n ? t.c[0]->len : 0;
    t.at = col_of(&t, "served_at");
    t.ver = col_of(&t, "model_version");
    t.lat = col_of(&t, "latency_ms");
    t.rec = col_of(&t, "record");
    t.input = col_of(&t, "input");
    t.endpoint = col_of(&t, "endpoint");
    t.label = col_of(&t, "label");
    int64_t *vers = malloc((t.rows ? t.rows : 1) * sizeof *vers);
    size_t nv = 0;
    for (size_t r = 0; vers && r < t.rows; r++) {
        int64_t v = (int64_t)num_at(&t, t.ver, r);
        size_t k = 0;
        while (k < nv && vers[k] != v) k++;
        if (k == nv) vers[nv++] = v;
    }
    if (vers) qsort(vers, nv, sizeof *vers, cmp_i64_desc);
    kl_buf_printf(b,
                  "<div class=\"kpi\"><b>%llu</b>predictions</div><div class=\"kpi\"><b>%llu</b>labelled</div>"
                  "<div class=\"kpi\"><b>%llu</b>labels</div><div class=\"kpi\"><b>%zu</b>version(s)</div>",
                  (unsigned long long)res.predictions, (unsigned long long)res.joined, (unsigned long long)res.labels,
                  nv);
    for (size_t i = 0; vers && i < nv; i++) version_section(o, model, &t, vers[i], b);
    over_time(o, model, &t, nv && vers ? vers[0] : 0, b);
    free(vers);
    for (size_t i = 0; i < t.n; i++) kl_column_free(t.c[i]);
    free(t.c);
    return KL_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* the models of a log: DIR/<model>/predictions/manifest.json */
static int log_models(const char *dir, char ***out, size_t *n, kl_err *e) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return kl_err_set(e, KL_ENOTFOUND, "%s: not a folder (the --log-predictions folder of keel serve)", dir);
    struct dirent *de;
    char p[4400];
    int rc = KL_OK;
    while ((de = readdir(d)) && !rc) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s/predictions/manifest.json", dir, de->d_name);
        if (!kl_path_exists(p)) continue;
        char **nm = realloc(*out, (*n + 1) * sizeof *nm);
        if (!nm || !(nm[*n] = strdup(de->d_name))) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        if (nm) *out = nm;
        if (!rc) (*n)++;
    }
    closedir(d);
    if (!rc && !*n)
        rc = kl_err_set(e, KL_ENOTFOUND, "%s: no prediction log in it (no <model>/predictions/manifest.json)", dir);
    if (!rc) qsort(*out, *n, sizeof **out, cmp_str);
    return rc;
}

int kl_monitor_report(const kl_monitor_report_opts *o, kl_buf *b, kl_err *e) {
    char **models = NULL;
    size_t nm = 0;
    int rc = log_models(o->log_dir, &models, &nm, e);
    if (rc) return rc;
    char ts[40], since[40];
    kl_time_rfc3339(kl_time_now_us(), ts, sizeof ts);
    kl_buf_printf(
        b,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>keel monitoring report</title>"
        "<style>%s</style></head><body><h1>keel monitoring report</h1><p>Written %s from the prediction log <code>",
        kl__pl_report_css, ts);
    kl_buf_html(b, o->log_dir);
    kl_buf_puts(b, "</code>");
    if (o->since_us) {
        fmt_time(o->since_us, since, sizeof since);
        kl_buf_printf(b, ", predictions served since %s UTC", since);
    }
    kl_buf_puts(b, ".</p>");
    for (size_t i = 0; i < nm && !rc; i++) rc = model_section(o, models[i], b, e);
    kl_buf_puts(b, "</body></html>\n");
    for (size_t i = 0; i < nm; i++) free(models[i]);
    free(models);
    if (!rc && b->failed) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    return rc;
}
