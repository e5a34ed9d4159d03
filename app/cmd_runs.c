/* keel runs: list (filter, sort, limit), show, compare (differences
 * highlighted), plot (SVG line chart), export (CSV/JSON), end, and simulate
 * (a synthetic training run logging through the batch API: demos, tests,
 * benchmarks), where (which store, and why). The store is found by
 * app_store_open (--tracking, KEEL_TRACKING, the nearest keel-runs/, the
 * per-user default). */
#include "app.h"

#include <cjson/cJSON.h>
#include <keel/track.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ==================================================================
 * Shared helpers
 * ================================================================== */

/* Every command here reads an existing store, except simulate (creates it). */
static int open_store(kl_track **t, kl_err *e) { return app_store_open(0, t, e); }

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double run_seconds(const cJSON *r) {
    double s = app_jnum(r, "start_us"), en = app_jnum(r, "end_us");
    if (isnan(en)) en = app_jnum(r, "heartbeat_us");
    return isnan(en) || isnan(s) ? NAN : (en - s) / 1e6;
}

/* Text of a metric value in a run JSON ("-" when absent). */
static void metric_text(const cJSON *run, const char *key, char *buf, size_t n) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "metrics"), key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "value");
    if (cJSON_IsNumber(v)) snprintf(buf, n, "%.6g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, n, "%s", v->valuestring);
    else snprintf(buf, n, "-");
}

static int parse_id(const char *s, int64_t *id, kl_err *e) {
    if (kl_parse_int64(s, id) || *id <= 0) return kl_err_set(e, KL_EINVAL, "'%s' is not a run id", s);
    return KL_OK;
}

/* Prints a filter error with a caret under the column. */
static int filter_fail(const char *filter, kl_err *e) {
    int rc = app_fail(e);
    if (e->code == KL_EPARSE && e->col > 0 && filter) {
        fprintf(stderr, "  %s\n  %*s^\n", filter, e->col - 1, "");
    }
    return rc;
}

/* metrics.K keys named in an expression (for table columns). */
static int metric_keys_in(const char *s, char keys[][128], int max) {
    int n = 0;
    while (s && (s = strstr(s, "metrics.")) && n < max) {
        s += 8;
        size_t l = 0;
        while (s[l] && (isalnum((unsigned char)s[l]) || s[l] == '_' || s[l] == '.' || s[l] == '/' || s[l] == '-') && l < 127) l++;
        if (l) {
            int dup = 0;
            for (int i = 0; i < n; i++)
                if (strlen(keys[i]) == l && !strncmp(keys[i], s, l)) dup = 1;
            if (!dup) {
                memcpy(keys[n], s, l);
                keys[n++][l] = 0;
            }
        }
        s += l;
    }
    return n;
}

/* ==================================================================
 * runs list
 * ================================================================== */

static const app_opt list_opts[] = {
    {"filter", 'f', 1, "EXPR", "e.g. 'metrics.val_acc > 0.9 and params.lr = \"0.001\" and tags.team = \"ads\"'", 0},
    {"sort", 's', 1, "KEY", "start_time (default, newest first), metrics.K, params.K, name...; '-KEY' or 'KEY desc' descending", 0},
    {"limit", 'n', 1, "N", "at most N runs (default 100; 0 = all)", 0},
    {"metric", 'm', 1, "KEY", "also show this metric as a column", 1},
    {"json", 0, 0, NULL, "machine-readable output (full runs)", 0},
};
static const app_cmd_spec list_spec = {
    "runs list", "keel runs list [--filter EXPR] [--sort KEY] [--limit N] [--json]", "List runs of the experiment store.",
    "Filter fields: metrics.KEY (latest value), params.KEY, tags.KEY, and the attributes id, name,\n"
    "status, experiment, parent_id, start_time, end_time (µs since epoch), duration (s).\n"
    "Operators: = != < <= > >= like, not like; combine with and, or, not and parentheses.\n"
    "Values: numbers, \"strings\" or 'strings', nan, inf. Syntax errors name the column.",
    list_opts, KL_ARRAY_LEN(list_opts), 0, 0};

static int runs_list(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&list_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t limit;
    if ((rc = app_get_int(&a, &list_spec, "limit", 100, &limit)) >= 0) return rc;
    const char *filter = app_get(&a, "filter"), *sort = app_get(&a, "sort");
    kl_err e = {0};
    kl_track *t = NULL;
    int64_t *ids = NULL;
    size_t n = 0;
    if (app_store_open_list(&t, &e)) return app_fail(&e);
    if (t && kl_track_runs_find(t, filter, sort, limit, &ids, &n, &e)) {
        kl_track_close(t);
        return filter_fail(e.col && filter && strstr(e.msg, "filter") ? filter : NULL, &e);
    }
    char keys[16][128];
    int nk = metric_keys_in(filter, keys, 16);
    nk += metric_keys_in(sort, keys + nk, 16 - nk);
    const char *extra[APP_MAX_VALUES];
    int ne = app_get_all(&a, "metric", extra, APP_MAX_VALUES);
    for (int i = 0; i < ne && nk < 16; i++) snprintf(keys[nk++], 128, "%s", extra[i]);
    int json = app_flag(&a, "json");
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        printf("%-6s %-16s %-20s %-9s %-19s %9s", "ID", "EXPERIMENT", "NAME", "STATUS", "STARTED", "DURATION");
        for (int k = 0; k < nk; k++) printf(" %14.14s", keys[k]);
        printf("\n");
    }
    void *all = NULL; /* every listed run in a few queries (one round trip each on a server) */
    if (n && kl_track_runs_json(t, ids, n, &all, &e)) {
        rc = app_fail(&e);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        cJSON *j = cJSON_DetachItemFromArray(all, 0);
        if (json) {
            cJSON_AddItemToArray(arr, j);
            continue;
        }
        char st[32], dur[32], mv[64];
        app_fmt_time(app_jnum(j, "start_us"), st, sizeof st);
        double secs = run_seconds(j);
        if (isnan(secs)) snprintf(dur, sizeof dur, "-");
        else kl_fmt_duration(secs, dur, sizeof dur);
        printf("%-6.0f %-16.16s %-20.20s %-9s %-19s %9s", app_jnum(j, "id"), jstr(j, "experiment"), jstr(j, "name"), jstr(j, "status"), st, dur);
        for (int k = 0; k < nk; k++) {
            metric_text(j, keys[k], mv, sizeof mv);
            printf(" %14.14s", mv);
        }
        printf("\n");
        cJSON_Delete(j);
    }
    if (json) {
        char *s = cJSON_Print(arr);
        if (s) printf("%s\n", s);
        cJSON_free(s);
    }
    rc = APP_EXIT_OK;
done:
    cJSON_Delete(all);
    cJSON_Delete(arr);
    free(ids);
    kl_track_close(t);
    return rc;
}

/* ==================================================================
 * runs show
 * ================================================================== */

static const app_opt show_opts[] = {{"json", 0, 0, NULL, "machine-readable output", 0}};
static const app_cmd_spec show_spec = {"runs show", "keel runs show ID [--json]",
                                       "Show a run: status, times, params, latest metrics, tags, artifacts, lineage.", NULL,
                                       show_opts, KL_ARRAY_LEN(show_opts), 1, 1};

static void print_kv_section(const char *title, const cJSON *obj) {
    printf("%s:\n", title);
    if (!cJSON_GetArraySize(obj)) printf("  (none)\n");
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        if (cJSON_IsString(it)) printf("  %-24s %s\n", it->string, it->valuestring);
        else if (cJSON_IsNull(it)) continue;
    }
}

static int runs_show(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&show_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    int64_t id;
    if (parse_id(a.pos[0], &id, &e)) return app_usage_error(&show_spec, "%s", e.msg);
    kl_track *t = NULL;
    void *j = NULL;
    if (open_store(&t, &e) || kl_track_run_json(t, id, &j, &e)) {
        kl_track_close(t);
        return app_fail(&e);
    }
    if (app_flag(&a, "json")) {
        char *s = cJSON_Print(j);
        printf("%s\n", s);
        cJSON_free(s);
    } else {
        char st[32], en[32], dur[32];
        app_fmt_time(app_jnum(j, "start_us"), st, sizeof st);
        app_fmt_time(app_jnum(j, "end_us"), en, sizeof en);
        double secs = run_seconds(j);
        if (isnan(secs)) snprintf(dur, sizeof dur, "-");
        else kl_fmt_duration(secs, dur, sizeof dur);
        printf("run %.0f  %s\n", app_jnum(j, "id"), jstr(j, "name"));
        printf("  experiment  %s\n  status      %s\n  started     %s\n  ended       %s\n  duration    %s\n", jstr(j, "experiment"),
               jstr(j, "status"), st, en, dur);
        if (!isnan(app_jnum(j, "parent_id"))) printf("  parent      %.0f\n", app_jnum(j, "parent_id"));
        printf("  process     %.0f on %s\n", app_jnum(j, "pid"), jstr(j, "host") ? jstr(j, "host") : "?");
        print_kv_section("params", cJSON_GetObjectItem(j, "params"));
        printf("metrics (latest):\n");
        const cJSON *m, *ms = cJSON_GetObjectItem(j, "metrics");
        if (!cJSON_GetArraySize(ms)) printf("  (none)\n");
        cJSON_ArrayForEach(m, ms) {
            char v[64];
            metric_text(j, m->string, v, sizeof v);
            int64_t cnt = 0;
            kl_track_metric_count(t, id, m->string, &cnt, &e);
            printf("  %-24s %-14s step %-8.0f (%lld points)\n", m->string, v, app_jnum(m, "step"), (long long)cnt);
        }
        print_kv_section("tags", cJSON_GetObjectItem(j, "tags"));
        printf("artifacts:\n");
        const cJSON *art, *arts = cJSON_GetObjectItem(j, "artifacts");
        if (!cJSON_GetArraySize(arts)) printf("  (none)\n");
        cJSON_ArrayForEach(art, arts) printf("  %-24s %10.0f  sha256 %.16s...\n", jstr(art, "path"), app_jnum(art, "size"), jstr(art, "sha256"));
        print_kv_section("lineage", cJSON_GetObjectItem(j, "lineage"));
        const cJSON *kids = cJSON_GetObjectItem(j, "children");
        if (cJSON_GetArraySize(kids)) {
            printf("child runs:");
            const cJSON *k;
            cJSON_ArrayForEach(k, kids) printf(" %.0f", k->valuedouble);
            printf("\n");
        }
    }
    cJSON_Delete(j);
    kl_track_close(t);
    return APP_EXIT_OK;
}

/* ==================================================================
 * runs compare
 * ================================================================== */

static const app_opt cmp_opts[] = {{"json", 0, 0, NULL, "machine-readable output", 0},
                                   {"all", 'a', 0, NULL, "show equal rows too (default: all rows, differing ones marked)", 0},
                                   {"diff", 'd', 0, NULL, "only rows that differ", 0}};
static const app_cmd_spec cmp_spec = {"runs compare", "keel runs compare ID ID... [--diff] [--json]",
                                      "Params and latest metrics of runs side by side; rows that differ are marked '*' (and highlighted on a terminal).",
                                      NULL, cmp_opts, KL_ARRAY_LEN(cmp_opts), 2, -1};

/* Collects the union of keys of runs[i].section, sorted. */
static cJSON *key_union(cJSON **runs, int n, const char *section) {
    cJSON *keys = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(runs[i], section)) if (!cJSON_GetObjectItemCaseSensitive(keys, it->string))
            cJSON_AddTrueToObject(keys, it->string);
    }
    return keys;
}

static int runs_compare(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&cmp_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    cJSON *runs[APP_MAX_VALUES] = {0};
    int n = a.npos;
    if (open_store(&t, &e)) return app_fail(&e);
    rc = APP_EXIT_OK;
    for (int i = 0; i < n; i++) {
        int64_t id;
        void *j = NULL;
        if (parse_id(a.pos[i], &id, &e) || kl_track_run_json(t, id, &j, &e)) {
            rc = app_fail(&e);
            goto done;
        }
        runs[i] = j;
    }
    int json = app_flag(&a, "json"), only_diff = app_flag(&a, "diff");
    int color = !json && isatty(1);
    cJSON *out = json ? cJSON_CreateObject() : NULL;
    if (json) {
        cJSON *ids = cJSON_AddArrayToObject(out, "runs");
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(app_jnum(runs[i], "id")));
    } else {
        printf("  %-28s", "");
        for (int i = 0; i < n; i++) printf(" %-16.0f", app_jnum(runs[i], "id"));
        printf("\n");
    }
    static const char *const sections[] = {"attributes", "params", "metrics", "tags"};
    for (size_t s = 0; s < KL_ARRAY_LEN(sections); s++) {
        cJSON *keys;
        if (s == 0) {
            keys = cJSON_CreateObject();
            cJSON_AddTrueToObject(keys, "experiment");
            cJSON_AddTrueToObject(keys, "name");
            cJSON_AddTrueToObject(keys, "status");
            cJSON_AddTrueToObject(keys, "duration");
        } else {
            keys = key_union(runs, n, sections[s]);
        }
        cJSON *jsec = json ? cJSON_AddObjectToObject(out, sections[s]) : NULL;
        if (!json && cJSON_GetArraySize(keys)) printf("%s:\n", sections[s]);
        const cJSON *k;
        cJSON_ArrayForEach(k, keys) {
            char vals[APP_MAX_VALUES][64];
            for (int i = 0; i < n; i++) {
                if (s == 0) {
                    if (!strcmp(k->string, "duration")) {
                        double d = run_seconds(runs[i]);
                        if (isnan(d)) snprintf(vals[i], 64, "-");
                        else kl_fmt_duration(d, vals[i], 64);
                    } else snprintf(vals[i], 64, "%s", jstr(runs[i], k->string) ? jstr(runs[i], k->string) : "-");
                } else if (s == 2) {
                    metric_text(runs[i], k->string, vals[i], 64);
                } else {
                    const char *v = jstr(cJSON_GetObjectItem(runs[i], sections[s]), k->string);
                    snprintf(vals[i], 64, "%s", v ? v : "-");
                }
            }
            int differs = 0;
            for (int i = 1; i < n; i++)
                if (strcmp(vals[i], vals[0])) differs = 1;
            if (s == 0 && !strcmp(k->string, "duration")) differs = 0; /* always differs a little */
            if (json) {
                cJSON *row = cJSON_AddObjectToObject(jsec, k->string);
                cJSON *va = cJSON_AddArrayToObject(row, "values");
                for (int i = 0; i < n; i++) cJSON_AddItemToArray(va, cJSON_CreateString(vals[i]));
                cJSON_AddBoolToObject(row, "differs", differs);
                continue;
            }
            if (only_diff && !differs) continue;
            printf("%s%c %-28.28s", differs && color ? "\033[1;33m" : "", differs ? '*' : ' ', k->string);
            for (int i = 0; i < n; i++) printf(" %-16.16s", vals[i]);
            printf("%s\n", differs && color ? "\033[0m" : "");
        }
        cJSON_Delete(keys);
    }
    if (json) {
        char *str = cJSON_Print(out);
        printf("%s\n", str);
        cJSON_free(str);
        cJSON_Delete(out);
    }
done:
    for (int i = 0; i < n; i++) cJSON_Delete(runs[i]);
    kl_track_close(t);
    return rc;
}

/* ==================================================================
 * runs plot
 * ================================================================== */

static const app_opt plot_opts[] = {
    {"metric", 'm', 1, "KEY", "metric to plot (required)", 0},
    {"out", 'o', 1, "FILE.svg", "output file (default: METRIC.svg; '-' = stdout)", 0},
    {"width", 0, 1, "PX", "width (default 800)", 0},
    {"height", 0, 1, "PX", "height (default 480)", 0},
};
static const app_cmd_spec plot_spec = {"runs plot", "keel runs plot ID... --metric KEY [--out FILE.svg]",
                                       "Plot a metric's history of one or more runs as an SVG line chart.", NULL, plot_opts,
                                       KL_ARRAY_LEN(plot_opts), 1, -1};

static int runs_plot(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&plot_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *metric = app_get(&a, "metric");
    if (!metric) return app_usage_error(&plot_spec, "--metric is required");
    int64_t w, h;
    if ((rc = app_get_int(&a, &plot_spec, "width", 800, &w)) >= 0) return rc;
    if ((rc = app_get_int(&a, &plot_spec, "height", 480, &h)) >= 0) return rc;
    char defout[256];
    snprintf(defout, sizeof defout, "%s.svg", metric);
    for (char *p = defout; *p; p++)
        if (*p == '/') *p = '_';
    const char *out = app_get(&a, "out") ? app_get(&a, "out") : defout;
    kl_err e = {0};
    kl_track *t = NULL;
    kl_chart_series ser[APP_MAX_VALUES] = {{0}};
    char labels[APP_MAX_VALUES][128];
    int n = a.npos;
    kl_buf svg;
    kl_buf_init(&svg);
    if (open_store(&t, &e)) return app_fail(&e);
    rc = APP_EXIT_OK;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t id;
        void *j = NULL;
        if (parse_id(a.pos[i], &id, &e) || kl_track_run_json(t, id, &j, &e)) {
            rc = app_fail(&e);
            goto done;
        }
        snprintf(labels[i], sizeof labels[i], "%lld %s", (long long)id, jstr(j, "name"));
        cJSON_Delete(j);
        int64_t *steps = NULL;
        double *vals = NULL;
        size_t cnt = 0;
        if (kl_track_metric_history(t, id, metric, &steps, NULL, &vals, &cnt, &e)) {
            rc = app_fail(&e);
            goto done;
        }
        ser[i].label = labels[i];
        ser[i].x = steps;
        ser[i].y = vals;
        ser[i].n = cnt;
        total += cnt;
    }
    if (!total) {
        kl_err_set(&e, KL_ENOTFOUND, "no points of metric '%s' in the given runs", metric);
        rc = app_fail(&e);
        goto done;
    }
    if (kl_track_svg_chart(&svg, metric, "step", metric, ser, (size_t)n, (int)w, (int)h)) {
        kl_err_set(&e, KL_ENOMEM, "out of memory");
        rc = app_fail(&e);
        goto done;
    }
    if (!strcmp(out, "-")) fwrite(svg.data, 1, svg.len, stdout);
    else if (kl_write_file_atomic(out, svg.data, svg.len, &e)) rc = app_fail(&e);
    else fprintf(stderr, "wrote %s (%zu points, %d run%s)\n", out, total, n, n == 1 ? "" : "s");
done:
    for (int i = 0; i < n; i++) {
        free((void *)ser[i].x);
        free((void *)ser[i].y);
    }
    kl_buf_free(&svg);
    kl_track_close(t);
    return rc;
}

/* ==================================================================
 * runs export
 * ================================================================== */

static const app_opt export_opts[] = {
    {"format", 0, 1, "csv|json", "output format (default csv)", 0},
    {"filter", 'f', 1, "EXPR", "only runs matching (see 'keel runs list --help')", 0},
    {"out", 'o', 1, "FILE", "output file (default stdout)", 0},
    {"history", 0, 0, NULL, "export every metric point (run_id,key,step,ts_us,value) instead of one row per run", 0},
};
static const app_cmd_spec export_spec = {"runs export", "keel runs export [--format csv|json] [--filter EXPR] [--out FILE] [--history]",
                                         "Export runs (attributes, params, latest metrics, tags) as CSV or JSON.", NULL, export_opts,
                                         KL_ARRAY_LEN(export_opts), 0, 0};

static void csv_field(kl_buf *b, const char *s) {
    if (!s) return;
    if (!strpbrk(s, ",\"\n\r")) {
        kl_buf_puts(b, s);
        return;
    }
    kl_buf_puts(b, "\"");
    for (; *s; s++) {
        if (*s == '"') kl_buf_puts(b, "\"");
        kl_buf_append(b, s, 1);
    }
    kl_buf_puts(b, "\"");
}

static int runs_export(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&export_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *fmt = app_get(&a, "format") ? app_get(&a, "format") : "csv";
    if (strcmp(fmt, "csv") && strcmp(fmt, "json")) return app_usage_error(&export_spec, "--format must be csv or json, got '%s'", fmt);
    const char *filter = app_get(&a, "filter");
    kl_err e = {0};
    kl_track *t = NULL;
    int64_t *ids = NULL;
    size_t n = 0;
    cJSON **runs = NULL;
    kl_buf b;
    kl_buf_init(&b);
    if (open_store(&t, &e)) return app_fail(&e);
    if (kl_track_runs_find(t, filter, "id", 0, &ids, &n, &e)) {
        kl_track_close(t);
        return filter_fail(filter, &e);
    }
    rc = APP_EXIT_OK;
    runs = calloc(n ? n : 1, sizeof *runs);
    for (size_t i = 0; i < n; i++)
        if (kl_track_run_json(t, ids[i], (void **)&runs[i], &e)) {
            rc = app_fail(&e);
            goto done;
        }
    int json = !strcmp(fmt, "json");
    if (app_flag(&a, "history")) {
        if (!json) kl_buf_puts(&b, "run_id,key,step,ts_us,value\n");
        else kl_buf_puts(&b, "[");
        int first = 1;
        for (size_t i = 0; i < n; i++) {
            const cJSON *m;
            cJSON_ArrayForEach(m, cJSON_GetObjectItem(runs[i], "metrics")) {
                int64_t *st = NULL, *ts = NULL;
                double *v = NULL;
                size_t cnt = 0;
                if (kl_track_metric_history(t, ids[i], m->string, &st, &ts, &v, &cnt, &e)) {
                    rc = app_fail(&e);
                    goto done;
                }
                for (size_t k = 0; k < cnt; k++) {
                    char val[40];
                    if (isnan(v[k])) snprintf(val, sizeof val, json ? "\"NaN\"" : "NaN");
                    else if (isinf(v[k])) snprintf(val, sizeof val, json ? "\"%sInfinity\"" : "%sInfinity", v[k] < 0 ? "-" : "");
                    else snprintf(val, sizeof val, "%.17g", v[k]);
                    if (json) {
                        kl_buf_printf(&b, "%s\n{\"run_id\":%lld,\"key\":", first ? "" : ",", (long long)ids[i]);
                        kl_buf_json_str(&b, m->string);
                        kl_buf_printf(&b, ",\"step\":%lld,\"ts_us\":%lld,\"value\":%s}", (long long)st[k], (long long)ts[k], val);
                    } else {
                        kl_buf_printf(&b, "%lld,", (long long)ids[i]);
                        csv_field(&b, m->string);
                        kl_buf_printf(&b, ",%lld,%lld,%s\n", (long long)st[k], (long long)ts[k], val);
                    }
                    first = 0;
                }
                free(st);
                free(ts);
                free(v);
            }
        }
        if (json) kl_buf_puts(&b, "\n]\n");
    } else if (json) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(arr, runs[i]);
            runs[i] = NULL;
        }
        char *s = cJSON_Print(arr);
        kl_buf_puts(&b, s);
        kl_buf_puts(&b, "\n");
        cJSON_free(s);
        cJSON_Delete(arr);
    } else {
        cJSON *pk = key_union(runs, (int)n, "params"), *mk = key_union(runs, (int)n, "metrics"), *tk = key_union(runs, (int)n, "tags");
        kl_buf_puts(&b, "id,experiment,name,status,start_us,end_us,parent_id");
        const cJSON *k;
        cJSON_ArrayForEach(k, pk) {
            kl_buf_puts(&b, ",params.");
            kl_buf_puts(&b, k->string);
        }
        cJSON_ArrayForEach(k, mk) {
            kl_buf_puts(&b, ",metrics.");
            kl_buf_puts(&b, k->string);
        }
        cJSON_ArrayForEach(k, tk) {
            kl_buf_puts(&b, ",tags.");
            kl_buf_puts(&b, k->string);
        }
        kl_buf_puts(&b, "\n");
        for (size_t i = 0; i < n; i++) {
            cJSON *r = runs[i];
            kl_buf_printf(&b, "%.0f,", app_jnum(r, "id"));
            csv_field(&b, jstr(r, "experiment"));
            kl_buf_puts(&b, ",");
            csv_field(&b, jstr(r, "name"));
            kl_buf_printf(&b, ",%s,%.0f,", jstr(r, "status"), app_jnum(r, "start_us"));
            if (!isnan(app_jnum(r, "end_us"))) kl_buf_printf(&b, "%.0f", app_jnum(r, "end_us"));
            kl_buf_puts(&b, ",");
            if (!isnan(app_jnum(r, "parent_id"))) kl_buf_printf(&b, "%.0f", app_jnum(r, "parent_id"));
            cJSON_ArrayForEach(k, pk) {
                kl_buf_puts(&b, ",");
                csv_field(&b, jstr(cJSON_GetObjectItem(r, "params"), k->string));
            }
            cJSON_ArrayForEach(k, mk) {
                kl_buf_puts(&b, ",");
                const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(r, "metrics"), k->string), "value");
                if (cJSON_IsNumber(v)) kl_buf_printf(&b, "%.17g", v->valuedouble);
                else if (cJSON_IsString(v)) kl_buf_puts(&b, v->valuestring);
            }
            cJSON_ArrayForEach(k, tk) {
                kl_buf_puts(&b, ",");
                csv_field(&b, jstr(cJSON_GetObjectItem(r, "tags"), k->string));
            }
            kl_buf_puts(&b, "\n");
        }
        cJSON_Delete(pk);
        cJSON_Delete(mk);
        cJSON_Delete(tk);
    }
    const char *out = app_get(&a, "out");
    if (b.failed) {
        kl_err_set(&e, KL_ENOMEM, "out of memory");
        rc = app_fail(&e);
    } else if (out && strcmp(out, "-")) {
        if (kl_write_file_atomic(out, b.data, b.len, &e)) rc = app_fail(&e);
    } else {
        fwrite(b.data, 1, b.len, stdout);
    }
done:
    for (size_t i = 0; i < n; i++) cJSON_Delete(runs ? runs[i] : NULL);
    free(runs);
    free(ids);
    kl_buf_free(&b);
    kl_track_close(t);
    return rc;
}

/* ==================================================================
 * runs end
 * ================================================================== */

static const app_opt end_opts[] = {{"status", 0, 1, "STATUS", "finished (default), failed or killed", 0}};
static const app_cmd_spec end_spec = {"runs end", "keel runs end ID [--status STATUS]", "Set the final status of a run.", NULL, end_opts,
                                      KL_ARRAY_LEN(end_opts), 1, 1};

static int runs_end(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&end_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_run_status s = KL_RUN_FINISHED;
    if (app_get(&a, "status") && kl_run_status_parse(app_get(&a, "status"), &s))
        return app_usage_error(&end_spec, "unknown status '%s'", app_get(&a, "status"));
    kl_err e = {0};
    int64_t id;
    if (parse_id(a.pos[0], &id, &e)) return app_usage_error(&end_spec, "%s", e.msg);
    kl_track *t = NULL;
    if (open_store(&t, &e) || kl_track_run_set_status(t, id, s, &e)) {
        kl_track_close(t);
        return app_fail(&e);
    }
    kl_track_close(t);
    return APP_EXIT_OK;
}

/* ==================================================================
 * runs simulate
 * ================================================================== */

static const app_opt sim_opts[] = {
    {"experiment", 'e', 1, "NAME", "experiment (default 'default')", 0},
    {"name", 0, 1, "NAME", "run name", 0},
    {"parent", 0, 1, "ID", "parent run", 0},
    {"steps", 0, 1, "N", "steps to log (default 100)", 0},
    {"metrics", 0, 1, "K", "metrics per step (default 2: loss, acc; then m2, m3...)", 0},
    {"batch", 0, 1, "N", "points per batch / transaction (default 1000)", 0},
    {"duration", 0, 1, "SECONDS", "log for this long instead of --steps", 0},
    {"param", 'p', 1, "KEY=VALUE", "log a param", 1},
    {"tag", 't', 1, "KEY=VALUE", "set a tag", 1},
    {"artifact", 0, 1, "FILE", "log a file as an artifact", 1},
    {"seed", 0, 1, "N", "seed of the synthetic curves (default: run id)", 0},
    {"status", 0, 1, "STATUS", "final status (default finished)", 0},
    {"progress", 0, 0, NULL, "print 'committed N' to stdout after every batch", 0},
    {"json", 0, 0, NULL, "print a JSON summary", 0},
};
static const app_cmd_spec sim_spec = {
    "runs simulate", "keel runs simulate [--experiment E] [--steps N | --duration S] [--metrics K] [--batch N] [--param K=V]...",
    "Log a synthetic training run through the batch API (demo data, tests, benchmarks).",
    "Batches that fail because the store is locked are retried and counted as lock_errors.", sim_opts, KL_ARRAY_LEN(sim_opts), 0, 0};

static int kv_split(const char *s, char *k, size_t kn, const char **v) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s) return -1;
    snprintf(k, kn, "%.*s", (int)(eq - s), s);
    *v = eq + 1;
    return 0;
}

static int runs_simulate(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&sim_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t steps, nmet, batch, parent, seed;
    double duration;
    if ((rc = app_get_int(&a, &sim_spec, "steps", 100, &steps)) >= 0) return rc;
    if ((rc = app_get_int(&a, &sim_spec, "metrics", 2, &nmet)) >= 0) return rc;
    if ((rc = app_get_int(&a, &sim_spec, "batch", 1000, &batch)) >= 0) return rc;
    if ((rc = app_get_int(&a, &sim_spec, "parent", 0, &parent)) >= 0) return rc;
    if ((rc = app_get_int(&a, &sim_spec, "seed", -1, &seed)) >= 0) return rc;
    if ((rc = app_get_double(&a, &sim_spec, "duration", 0, &duration)) >= 0) return rc;
    if (nmet < 1 || nmet > 10000 || batch < 1) return app_usage_error(&sim_spec, "--metrics must be 1..10000 and --batch >= 1");
    kl_run_status fin = KL_RUN_FINISHED;
    if (app_get(&a, "status") && kl_run_status_parse(app_get(&a, "status"), &fin))
        return app_usage_error(&sim_spec, "unknown status '%s'", app_get(&a, "status"));
    kl_err e = {0};
    kl_track *t = NULL;
    kl_track_run *r = NULL;
    kl_metric_point *pts = NULL;
    char **names = NULL;
    if (app_store_open(1, &t, &e) ||
        kl_track_run_start(t, app_get(&a, "experiment"), app_get(&a, "name"), parent, &r, &e)) {
        kl_track_close(t);
        return app_fail(&e);
    }
    int64_t id = kl_track_run_id(r);
    if (seed < 0) seed = id;
    const char *vals[APP_MAX_VALUES];
    char key[256];
    const char *v;
    int np = app_get_all(&a, "param", vals, APP_MAX_VALUES);
    for (int i = 0; i < np; i++) {
        kl_kv kv;
        if (kv_split(vals[i], key, sizeof key, &v)) {
            rc = app_usage_error(&sim_spec, "--param expects KEY=VALUE, got '%s'", vals[i]);
            goto fail;
        }
        kv.key = key;
        kv.value = v;
        if (kl_track_log_params(r, &kv, 1, &e)) goto fail_err;
    }
    int nt = app_get_all(&a, "tag", vals, APP_MAX_VALUES);
    for (int i = 0; i < nt; i++) {
        if (kv_split(vals[i], key, sizeof key, &v)) {
            rc = app_usage_error(&sim_spec, "--tag expects KEY=VALUE, got '%s'", vals[i]);
            goto fail;
        }
        if (kl_track_set_tag(r, key, v, &e)) goto fail_err;
    }
    int nart = app_get_all(&a, "artifact", vals, APP_MAX_VALUES);
    for (int i = 0; i < nart; i++)
        if (kl_track_log_artifact(r, vals[i], &e)) goto fail_err;
    kl_track_lineage lin = {0};
    if (kl_track_set_lineage(r, &lin, &e)) goto fail_err;
    names = calloc((size_t)nmet, sizeof *names);
    pts = malloc((size_t)batch * sizeof *pts);
    if (!names || !pts) {
        kl_err_set(&e, KL_ENOMEM, "out of memory");
        goto fail_err;
    }
    for (int64_t k = 0; k < nmet; k++) {
        char nm[32];
        if (k == 0) snprintf(nm, sizeof nm, "loss");
        else if (k == 1) snprintf(nm, sizeof nm, "acc");
        else snprintf(nm, sizeof nm, "m%lld", (long long)k);
        names[k] = strdup(nm);
    }
    int progress = app_flag(&a, "progress");
    int64_t t0 = kl_time_mono_ns(), points = 0, batches = 0, lock_errors = 0, step = 0;
    double rate = 0.02 + 0.01 * (double)(seed % 7);
    size_t nb = 0;
    for (;;) {
        int done_steps = duration > 0 ? (kl_time_mono_ns() - t0) / 1e9 >= duration : step >= steps;
        /* fill a batch */
        if (!done_steps) {
            for (int64_t k = 0; k < nmet; k++) {
                double x = (double)step, noise = 0.02 * sin((double)(step * 7 + k * 13 + seed));
                double val = k == 0 ? exp(-rate * x) + 0.1 + noise : k == 1 ? 1 - 0.5 * exp(-rate * x) + noise : sin(x / 10 + (double)k);
                pts[nb++] = (kl_metric_point){names[k], step, 0, val};
                if (nb == (size_t)batch) break;
            }
            step++;
        }
        if (nb == (size_t)batch || (done_steps && nb)) {
            for (;;) {
                int lrc = kl_track_log_metrics(r, pts, nb, &e);
                if (!lrc) break;
                if (lrc != KL_EBUSY) goto fail_err;
                lock_errors++;
            }
            points += (int64_t)nb;
            batches++;
            nb = 0;
            if (progress) {
                printf("committed %lld\n", (long long)points);
                fflush(stdout);
            }
        }
        if (done_steps && !nb) break;
    }
    double secs = (double)(kl_time_mono_ns() - t0) / 1e9;
    if (kl_track_run_end(r, fin, &e)) {
        r = NULL;
        goto fail_err;
    }
    r = NULL;
    if (app_flag(&a, "json"))
        printf("{\"run_id\":%lld,\"points\":%lld,\"batches\":%lld,\"steps\":%lld,\"seconds\":%.3f,\"points_per_s\":%.0f,\"lock_errors\":%lld}\n",
               (long long)id, (long long)points, (long long)batches, (long long)step, secs, secs > 0 ? (double)points / secs : 0,
               (long long)lock_errors);
    else
        printf("run %lld: %lld points in %lld batches, %.3f s (%.0f points/s), %lld lock errors\n", (long long)id, (long long)points,
               (long long)batches, secs, secs > 0 ? (double)points / secs : 0, (long long)lock_errors);
    rc = APP_EXIT_OK;
    goto out;
fail_err:
    rc = app_fail(&e);
fail:
    if (r) kl_track_run_end(r, KL_RUN_FAILED, NULL);
out:
    if (names)
        for (int64_t k = 0; k < nmet; k++) free(names[k]);
    free(names);
    free(pts);
    kl_track_close(t);
    return rc;
}

/* ==================================================================
 * Dispatch
 * ================================================================== */

/* ==================================================================
 * runs where
 * ================================================================== */

static const app_cmd_spec where_spec = {
    "runs where",
    "keel runs where [--json]",
    "Print the experiment store every command here uses, and the rule that chose it.",
    "Rules, first match wins: --tracking DIR; KEEL_TRACKING; the nearest folder named keel-runs\n"
    "in the current folder or a parent (the search never enters a folder listed in the\n"
    "colon-separated KEEL_TRACKING_CEILING, nor goes above it); the per-user default\n"
    "$XDG_DATA_HOME/keel/runs, else ~/.local/share/keel/runs. Nothing is created.",
    show_opts, KL_ARRAY_LEN(show_opts), 0, 0};

static int runs_where(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&where_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    static const char *const rules[] = {"flag", "env", "nearest", "user"};
    kl_store_loc loc;
    kl_err e = {0};
    if (app_store_resolve(&loc, &e)) return app_fail(&e);
    char shown[4096];
    kl_track_redact(loc.dir, shown, sizeof shown);
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"dir\":");
        kl_buf_json_str(&b, shown);
        kl_buf_printf(&b, ",\"rule\":\"%s\",\"how\":", rules[loc.rule]);
        kl_buf_json_str(&b, loc.how);
        kl_buf_printf(&b, ",\"exists\":%s}\n", loc.exists ? "true" : "false");
        fputs(b.data, stdout);
        kl_buf_free(&b);
    } else {
        printf("%s\n  chosen by: %s\n  %s\n", shown, loc.how,
               loc.exists ? "exists" : "not created yet (keel train, tune, pipeline or models register create it)");
    }
    return APP_EXIT_OK;
}

static const app_opt migrate_opts[] = {
    {"from", 0, 1, "PATH_OR_URL", "the store to copy (a folder or a postgresql:// URL)", 0},
    {"to", 0, 1, "URL", "the new store (a postgresql:// URL, or a folder); must be empty", 0},
    {"from-artifacts", 0, 1, "DIR", "object folder of a PostgreSQL source (default: --artifacts / KEEL_ARTIFACTS)", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec migrate_spec = {
    "runs migrate",
    "keel runs migrate --from PATH_OR_URL --to URL [--artifacts DIR] [--json]",
    "Copy a whole experiment store into a new one, exactly.",
    "Every run (ids kept), param, metric point (history in order), tag, artifact record and\n"
    "lineage, and the whole registry (versions, files, signatures, tags, aliases and their\n"
    "history) are copied in one transaction; the destination must be empty. The files the\n"
    "store names (artifacts, model files) are copied into the destination's object folder\n"
    "(--artifacts DIR for a PostgreSQL destination), each checked against its sha256.\n"
    "Example: keel runs migrate --from ./keel-runs --to postgresql://keel@db:5432/keel --artifacts /shared/keel",
    migrate_opts,
    KL_ARRAY_LEN(migrate_opts),
    0,
    0};

static int runs_migrate(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&migrate_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *from = app_get(&a, "from"), *to = app_get(&a, "to");
    if (!from || !to) return app_usage_error(&migrate_spec, "--from and --to are required");
    kl_err e = {0};
    kl_store_loc lf, lt;
    kl_track *tf = NULL, *tt = NULL;
    kl_track_copy_stats st;
    if ((rc = kl_track_store_resolve(from, "--from", &lf, &e)) || (rc = kl_track_store_resolve(to, "--to", &lt, &e)))
        return app_fail(&e);
    kl_store_loc here;
    if (!app_store_resolve(&here, &e) && here.artifacts[0]) { /* --artifacts / KEEL_ARTIFACTS: the destination's */
        snprintf(lt.artifacts, sizeof lt.artifacts, "%s", here.artifacts);
        snprintf(lf.artifacts, sizeof lf.artifacts, "%s", here.artifacts);
    }
    const char *fa = app_get(&a, "from-artifacts");
    if (fa) snprintf(lf.artifacts, sizeof lf.artifacts, "%s", fa);
    if ((rc = kl_track_open_loc(&lf, 0, &tf, &e)) || (rc = kl_track_open_loc(&lt, 1, &tt, &e)) ||
        (rc = kl_track_copy(tf, tt, &st, &e))) {
        kl_track_close(tf);
        kl_track_close(tt);
        return app_fail(&e);
    }
    if (app_flag(&a, "json"))
        printf(
            "{\"runs\":%lld,\"points\":%lld,\"versions\":%lld,\"alias_changes\":%lld,\"objects\":%lld,\"rows\":%lld}\n",
            (long long)st.runs, (long long)st.points, (long long)st.versions, (long long)st.alias_changes,
            (long long)st.objects, (long long)st.rows);
    else
        printf(
            "copied %lld runs, %lld metric points, %lld model versions, %lld alias changes, %lld objects (%lld rows)\n"
            "  from %s\n  to   %s\n",
            (long long)st.runs, (long long)st.points, (long long)st.versions, (long long)st.alias_changes,
            (long long)st.objects, (long long)st.rows, kl_track_where(tf), kl_track_where(tt));
    kl_track_close(tf);
    kl_track_close(tt);
    return APP_EXIT_OK;
}

int cmd_runs(int argc, char **argv) {
    static const app_command sub[] = {
        {"list", "list runs (filter, sort, limit)", runs_list},
        {"show", "show one run", runs_show},
        {"compare", "params and metrics of runs side by side", runs_compare},
        {"plot", "SVG line chart of a metric over steps", runs_plot},
        {"export", "export runs as CSV or JSON", runs_export},
        {"end", "set the final status of a run", runs_end},
        {"simulate", "log a synthetic run (demos, tests, benchmarks)", runs_simulate},
        {"where", "which experiment store, and the rule that chose it", runs_where},
        {"migrate", "copy a whole store into a new one (SQLite or PostgreSQL), ids and history kept", runs_migrate},
    };
    return app_dispatch("runs", sub, KL_ARRAY_LEN(sub), argc, argv);
}
