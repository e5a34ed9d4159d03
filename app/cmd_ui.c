/* keel ui: a read-only web UI over the experiment store, served by keel
 * itself on libmicrohttpd (no scripts or styles from the network): runs
 * table with filtering and sorting, run page (params, tags, lineage,
 * artifacts, SVG metric charts), compare view with overlaid curves, models
 * with versions, aliases and alias history, tuning studies (trials, best,
 * the same history and parallel-coordinates SVG as `keel tune show`). Prints its URL; stops cleanly
 * on SIGINT/SIGTERM. */
#include "app.h"

#include <cjson/cJSON.h>
#include <keel/track.h>
#include <keel/tune.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct {
    kl_track *t;
} ui_ctx;

/* ==================================================================
 * HTML helpers
 * ================================================================== */

static const char *css =
    "body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#fafafa}"
    "header{background:#123;color:#fff;padding:10px 20px}header a{color:#fff;margin-right:18px;text-decoration:none;font-weight:600}"
    "main{padding:16px 20px}table{border-collapse:collapse;background:#fff;margin:8px 0 16px}"
    "th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:13px}th{background:#eef}"
    "th a{color:#123;text-decoration:none}tr.diff td{background:#fff3c4}.status-running{color:#06c}"
    ".status-finished{color:#080}.status-failed,.status-killed{color:#c00}.err{color:#c00;font-family:monospace;white-space:pre}"
    "input[type=text]{width:520px;font-family:monospace}.charts{display:flex;flex-wrap:wrap;gap:12px}"
    ".charts svg{border:1px solid #ddd}tr.best td{background:#e6f4e6}.state-pruned{color:#a60}.state-failed{color:#c00}h2{font-size:18px;margin:18px 0 6px}code{font-size:12px}";

static void page_start(kl_buf *b, const char *title) {
    kl_buf_puts(b, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>");
    kl_buf_html(b, title);
    kl_buf_printf(b, " - keel</title><style>%s</style></head><body><header><a href=\"/\">keel</a><a href=\"/runs\">Runs</a>"
                     "<a href=\"/models\">Models</a><a href=\"/studies\">Studies</a></header><main>\n<h1>",
                  css);
    kl_buf_html(b, title);
    kl_buf_puts(b, "</h1>\n");
}

static void page_end(kl_buf *b) { kl_buf_puts(b, "</main></body></html>\n"); }

static void url_enc(kl_buf *b, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-_.~", c)) kl_buf_append(b, s, 1);
        else {
            char x[3] = {'%', hex[c >> 4], hex[c & 15]};
            kl_buf_append(b, x, 3);
        }
    }
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void metric_cell(kl_buf *b, const cJSON *run, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(run, "metrics"), key), "value");
    if (cJSON_IsNumber(v)) kl_buf_printf(b, "%.6g", v->valuedouble);
    else if (cJSON_IsString(v)) kl_buf_html(b, v->valuestring);
    else kl_buf_puts(b, "-");
}

static void kv_table(kl_buf *b, const char *title, const cJSON *obj) {
    kl_buf_printf(b, "<h2>%s</h2><table class=\"%s\"><tr><th>key</th><th>value</th></tr>", title, title);
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        if (!cJSON_IsString(it)) continue;
        kl_buf_puts(b, "<tr><td>");
        kl_buf_html(b, it->string);
        kl_buf_puts(b, "</td><td>");
        kl_buf_html(b, it->valuestring);
        kl_buf_puts(b, "</td></tr>");
    }
    kl_buf_puts(b, "</table>\n");
}

/* History of a metric, decimated to at most max points for drawing. */
static int history(kl_track *t, int64_t id, const char *key, int64_t **x, double **y, size_t *n, size_t max) {
    kl_err e = {0};
    if (kl_track_metric_history(t, id, key, x, NULL, y, n, &e)) return -1;
    if (*n > max) {
        size_t stride = (*n + max - 1) / max, m = 0;
        for (size_t i = 0; i < *n; i += stride, m++) {
            (*x)[m] = (*x)[i];
            (*y)[m] = (*y)[i];
        }
        (*x)[m] = (*x)[*n - 1];
        (*y)[m] = (*y)[*n - 1];
        *n = m + 1;
    }
    return 0;
}

/* One chart per metric key over several runs. */
static void charts(kl_buf *b, kl_track *t, const int64_t *ids, cJSON **runs, int n) {
    cJSON *keys = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(runs[i], "metrics")) if (!cJSON_GetObjectItemCaseSensitive(keys, m->string))
            cJSON_AddTrueToObject(keys, m->string);
    }
    kl_buf_puts(b, "<h2>Metrics</h2><div class=\"charts\">\n");
    const cJSON *k;
    cJSON_ArrayForEach(k, keys) {
        kl_chart_series s[64];
        char labels[64][96];
        int ns = 0;
        for (int i = 0; i < n && ns < 64; i++) {
            int64_t *x = NULL;
            double *y = NULL;
            size_t cnt = 0;
            if (history(t, ids[i], k->string, &x, &y, &cnt, 2000)) continue;
            snprintf(labels[ns], sizeof labels[ns], "%lld %s", (long long)ids[i], jstr(runs[i], "name"));
            s[ns] = (kl_chart_series){labels[ns], x, y, cnt, NULL, 0, 0};
            ns++;
        }
        kl_track_svg_chart(b, k->string, "step", k->string, s, (size_t)ns, 560, 340);
        for (int i = 0; i < ns; i++) {
            free((void *)s[i].x);
            free((void *)s[i].y);
        }
    }
    kl_buf_puts(b, "</div>\n");
    cJSON_Delete(keys);
}

/* ==================================================================
 * Pages
 * ================================================================== */

static int page_runs(ui_ctx *c, struct MHD_Connection *conn, kl_buf *b) {
    const char *filter = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "filter");
    const char *sort = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "sort");
    const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    int64_t limit = 200;
    if (lim) kl_parse_int64(lim, &limit);
    if (filter && !*filter) filter = NULL;
    if (sort && !*sort) sort = NULL;
    page_start(b, "Runs");
    kl_buf_puts(b, "<form method=\"get\" action=\"/runs\" id=\"filter-form\"><input type=\"text\" name=\"filter\" id=\"filter\" placeholder=\""
                   "metrics.val_acc &gt; 0.9 and params.lr = &quot;0.001&quot;\" value=\"");
    kl_buf_html(b, filter ? filter : "");
    kl_buf_puts(b, "\">");
    if (sort) {
        kl_buf_puts(b, "<input type=\"hidden\" name=\"sort\" value=\"");
        kl_buf_html(b, sort);
        kl_buf_puts(b, "\">");
    }
    kl_buf_puts(b, " <button type=\"submit\">Filter</button></form>\n");
    kl_err e = {0};
    int64_t *ids = NULL;
    size_t n = 0;
    if (kl_track_runs_find(c->t, filter, sort, limit, &ids, &n, &e)) {
        kl_buf_puts(b, "<p class=\"err\" id=\"filter-error\">");
        kl_buf_html(b, kl_err_what(&e));
        if (e.col > 0 && filter) {
            kl_buf_puts(b, "\n");
            kl_buf_html(b, filter);
            kl_buf_printf(b, "\n%*s^", e.col - 1, "");
        }
        kl_buf_puts(b, "</p>");
        page_end(b);
        return MHD_HTTP_BAD_REQUEST;
    }
    cJSON **runs = calloc(n ? n : 1, sizeof *runs);
    cJSON *keys = cJSON_CreateObject();
    int nkeys = 0;
    for (size_t i = 0; i < n; i++) {
        kl_track_run_json(c->t, ids[i], (void **)&runs[i], &e);
        const cJSON *m;
        if (runs[i])
            cJSON_ArrayForEach(m, cJSON_GetObjectItem(runs[i], "metrics")) if (nkeys < 10 && !cJSON_GetObjectItemCaseSensitive(keys, m->string)) {
                cJSON_AddTrueToObject(keys, m->string);
                nkeys++;
            }
    }
    kl_buf_printf(b, "<p>%zu run%s</p><form method=\"get\" action=\"/compare\"><table id=\"runs\"><tr><th></th>", n, n == 1 ? "" : "s");
    static const char *const cols[][2] = {{"id", "ID"}, {"experiment", "Experiment"}, {"name", "Name"}, {"status", "Status"},
                                          {"start_time", "Started"}, {"duration", "Duration"}};
    for (size_t i = 0; i < KL_ARRAY_LEN(cols) + (size_t)nkeys; i++) {
        char key[300], label[300];
        if (i < KL_ARRAY_LEN(cols)) {
            snprintf(key, sizeof key, "%s", cols[i][0]);
            snprintf(label, sizeof label, "%s", cols[i][1]);
        } else {
            const cJSON *k = cJSON_GetArrayItem(keys, (int)(i - KL_ARRAY_LEN(cols)));
            snprintf(key, sizeof key, "metrics.%s", k->string);
            snprintf(label, sizeof label, "%s", k->string);
        }
        /* clicking sorts; clicking the sorted column again reverses */
        int cur_desc = sort && sort[0] == '-' && !strcmp(sort + 1, key);
        int cur_asc = sort && !strcmp(sort, key);
        kl_buf_puts(b, "<th><a class=\"sort\" href=\"/runs?sort=");
        if (!cur_desc && (cur_asc || !strcmp(key, "start_time"))) kl_buf_puts(b, "-");
        url_enc(b, key);
        if (filter) {
            kl_buf_puts(b, "&amp;filter=");
            url_enc(b, filter);
        }
        kl_buf_puts(b, "\">");
        kl_buf_html(b, label);
        kl_buf_printf(b, "%s</a></th>", cur_asc ? " &#9650;" : cur_desc ? " &#9660;" : "");
    }
    kl_buf_puts(b, "</tr>\n");
    for (size_t i = 0; i < n; i++) {
        cJSON *r = runs[i];
        if (!r) continue;
        char st[40], dur[40];
        app_fmt_time(app_jnum(r, "start_us"), st, sizeof st);
        double en = app_jnum(r, "end_us");
        if (isnan(en)) en = app_jnum(r, "heartbeat_us");
        kl_fmt_duration((en - app_jnum(r, "start_us")) / 1e6, dur, sizeof dur);
        kl_buf_printf(b, "<tr class=\"run\"><td><input type=\"checkbox\" name=\"ids\" value=\"%.0f\"></td><td><a href=\"/run/%.0f\">%.0f</a></td><td>",
                      app_jnum(r, "id"), app_jnum(r, "id"), app_jnum(r, "id"));
        kl_buf_html(b, jstr(r, "experiment"));
        kl_buf_printf(b, "</td><td><a href=\"/run/%.0f\">", app_jnum(r, "id"));
        kl_buf_html(b, jstr(r, "name"));
        kl_buf_printf(b, "</a></td><td class=\"status-%s\">%s</td><td>%s</td><td>%s</td>", jstr(r, "status"), jstr(r, "status"), st, dur);
        const cJSON *k;
        cJSON_ArrayForEach(k, keys) {
            kl_buf_puts(b, "<td>");
            metric_cell(b, r, k->string);
            kl_buf_puts(b, "</td>");
        }
        kl_buf_puts(b, "</tr>\n");
    }
    kl_buf_puts(b, "</table><button type=\"submit\" id=\"compare\">Compare selected</button></form>\n");
    for (size_t i = 0; i < n; i++) cJSON_Delete(runs[i]);
    free(runs);
    free(ids);
    cJSON_Delete(keys);
    page_end(b);
    return MHD_HTTP_OK;
}

static int page_run(ui_ctx *c, int64_t id, kl_buf *b) {
    kl_err e = {0};
    void *j = NULL;
    if (kl_track_run_json(c->t, id, &j, &e)) {
        page_start(b, "Run not found");
        kl_buf_puts(b, "<p class=\"err\">");
        kl_buf_html(b, kl_err_what(&e));
        kl_buf_puts(b, "</p>");
        page_end(b);
        return MHD_HTTP_NOT_FOUND;
    }
    cJSON *r = j;
    char title[300], st[40], en[40];
    snprintf(title, sizeof title, "Run %lld: %s", (long long)id, jstr(r, "name"));
    page_start(b, title);
    app_fmt_time(app_jnum(r, "start_us"), st, sizeof st);
    app_fmt_time(app_jnum(r, "end_us"), en, sizeof en);
    kl_buf_puts(b, "<table id=\"attributes\"><tr><th>experiment</th><td>");
    kl_buf_html(b, jstr(r, "experiment"));
    kl_buf_printf(b, "</td></tr><tr><th>status</th><td class=\"status-%s\">%s</td></tr><tr><th>started</th><td>%s</td></tr>"
                     "<tr><th>ended</th><td>%s</td></tr>",
                  jstr(r, "status"), jstr(r, "status"), st, en);
    if (!isnan(app_jnum(r, "parent_id")))
        kl_buf_printf(b, "<tr><th>parent</th><td><a href=\"/run/%.0f\">%.0f</a></td></tr>", app_jnum(r, "parent_id"), app_jnum(r, "parent_id"));
    const cJSON *kids = cJSON_GetObjectItem(r, "children"), *kid;
    if (cJSON_GetArraySize(kids)) {
        kl_buf_puts(b, "<tr><th>child runs</th><td id=\"children\">");
        cJSON_ArrayForEach(kid, kids) kl_buf_printf(b, "<a href=\"/run/%.0f\">%.0f</a> ", kid->valuedouble, kid->valuedouble);
        kl_buf_puts(b, "</td></tr>");
    }
    kl_buf_puts(b, "</table>\n");
    kv_table(b, "params", cJSON_GetObjectItem(r, "params"));
    kl_buf_puts(b, "<h2>latest metrics</h2><table id=\"metrics\"><tr><th>key</th><th>value</th><th>step</th></tr>");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(r, "metrics")) {
        kl_buf_puts(b, "<tr><td>");
        kl_buf_html(b, m->string);
        kl_buf_puts(b, "</td><td>");
        metric_cell(b, r, m->string);
        kl_buf_printf(b, "</td><td>%.0f</td></tr>", app_jnum(m, "step"));
    }
    kl_buf_puts(b, "</table>\n");
    kv_table(b, "tags", cJSON_GetObjectItem(r, "tags"));
    kv_table(b, "lineage", cJSON_GetObjectItem(r, "lineage"));
    kl_buf_puts(b, "<h2>artifacts</h2><table id=\"artifacts\"><tr><th>path</th><th>size</th><th>sha256</th></tr>");
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(r, "artifacts")) {
        kl_buf_puts(b, "<tr><td>");
        kl_buf_html(b, jstr(a, "path"));
        kl_buf_printf(b, "</td><td>%.0f</td><td><code>%s</code></td></tr>", app_jnum(a, "size"), jstr(a, "sha256"));
    }
    kl_buf_puts(b, "</table>\n");
    charts(b, c->t, &id, &r, 1);
    cJSON_Delete(r);
    page_end(b);
    return MHD_HTTP_OK;
}

typedef struct {
    int64_t ids[64];
    int n;
} id_list;

static enum MHD_Result collect_ids(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    id_list *l = cls;
    if (strcmp(key, "ids") || !value) return MHD_YES;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", value);
    char *save = NULL;
    for (char *p = strtok_r(buf, ", ", &save); p && l->n < 64; p = strtok_r(NULL, ", ", &save)) {
        int64_t id;
        if (!kl_parse_int64(p, &id) && id > 0) l->ids[l->n++] = id;
    }
    return MHD_YES;
}

static int page_compare(ui_ctx *c, struct MHD_Connection *conn, kl_buf *b) {
    id_list l = {{0}, 0};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_ids, &l);
    page_start(b, "Compare runs");
    if (l.n < 1) {
        kl_buf_puts(b, "<p class=\"err\">select runs to compare (ids=1,2,...)</p>");
        page_end(b);
        return MHD_HTTP_BAD_REQUEST;
    }
    cJSON *runs[64] = {0};
    kl_err e = {0};
    int n = 0;
    int64_t ids[64];
    for (int i = 0; i < l.n; i++) {
        void *j = NULL;
        if (kl_track_run_json(c->t, l.ids[i], &j, &e) == 0) {
            ids[n] = l.ids[i];
            runs[n++] = j;
        }
    }
    kl_buf_puts(b, "<table id=\"compare-table\"><tr><th></th>");
    for (int i = 0; i < n; i++) {
        kl_buf_printf(b, "<th><a href=\"/run/%lld\">%lld ", (long long)ids[i], (long long)ids[i]);
        kl_buf_html(b, jstr(runs[i], "name"));
        kl_buf_puts(b, "</a></th>");
    }
    kl_buf_puts(b, "</tr>\n");
    static const char *const sections[] = {"params", "metrics", "tags"};
    for (size_t s = 0; s < KL_ARRAY_LEN(sections); s++) {
        cJSON *keys = cJSON_CreateObject();
        for (int i = 0; i < n; i++) {
            const cJSON *it;
            cJSON_ArrayForEach(it, cJSON_GetObjectItem(runs[i], sections[s])) if (!cJSON_GetObjectItemCaseSensitive(keys, it->string))
                cJSON_AddTrueToObject(keys, it->string);
        }
        const cJSON *k;
        cJSON_ArrayForEach(k, keys) {
            kl_buf cells;
            kl_buf_init(&cells);
            char first[128] = "";
            int differs = 0;
            for (int i = 0; i < n; i++) {
                kl_buf v;
                kl_buf_init(&v);
                if (s == 1) metric_cell(&v, runs[i], k->string);
                else {
                    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(runs[i], sections[s]), k->string);
                    kl_buf_html(&v, cJSON_IsString(x) ? x->valuestring : "-");
                }
                if (i == 0) snprintf(first, sizeof first, "%s", v.data ? v.data : "");
                else if (strcmp(first, v.data ? v.data : "")) differs = 1;
                kl_buf_printf(&cells, "<td>%s</td>", v.data ? v.data : "");
                kl_buf_free(&v);
            }
            kl_buf_printf(b, "<tr%s><th>%s.", differs ? " class=\"diff\"" : "", sections[s]);
            kl_buf_html(b, k->string);
            kl_buf_printf(b, "</th>%s</tr>\n", cells.data ? cells.data : "");
            kl_buf_free(&cells);
        }
        cJSON_Delete(keys);
    }
    kl_buf_puts(b, "</table>\n");
    charts(b, c->t, ids, runs, n);
    for (int i = 0; i < n; i++) cJSON_Delete(runs[i]);
    page_end(b);
    return MHD_HTTP_OK;
}

static int page_models(ui_ctx *c, const char *name, kl_buf *b) {
    kl_err e = {0};
    void *j = NULL;
    if (kl_registry_json(c->t, name, &j, &e)) {
        page_start(b, "Model not found");
        kl_buf_puts(b, "<p class=\"err\">");
        kl_buf_html(b, kl_err_what(&e));
        kl_buf_puts(b, "</p>");
        page_end(b);
        return MHD_HTTP_NOT_FOUND;
    }
    if (!name) {
        page_start(b, "Models");
        kl_buf_puts(b, "<table id=\"models\"><tr><th>name</th><th>versions</th><th>aliases</th><th>latest</th></tr>\n");
        const cJSON *m;
        cJSON_ArrayForEach(m, (cJSON *)j) {
            kl_buf_puts(b, "<tr class=\"model\"><td><a href=\"/models/");
            url_enc(b, jstr(m, "name"));
            kl_buf_puts(b, "\">");
            kl_buf_html(b, jstr(m, "name"));
            cJSON *vs = cJSON_GetObjectItem(m, "versions");
            kl_buf_printf(b, "</a></td><td>%d</td><td>", cJSON_GetArraySize(vs));
            const cJSON *al;
            cJSON_ArrayForEach(al, cJSON_GetObjectItem(m, "aliases")) {
                kl_buf_html(b, al->string);
                kl_buf_printf(b, "=%.0f ", al->valuedouble);
            }
            char ts[40];
            app_fmt_time(app_jnum(cJSON_GetArrayItem(vs, cJSON_GetArraySize(vs) - 1), "created_us"), ts, sizeof ts);
            kl_buf_printf(b, "</td><td>%s</td></tr>\n", ts);
        }
        kl_buf_puts(b, "</table>\n");
    } else {
        cJSON *m = cJSON_GetArrayItem(j, 0);
        char title[300];
        snprintf(title, sizeof title, "Model %s", name);
        page_start(b, title);
        kl_buf_puts(b, "<h2>versions</h2><table id=\"versions\"><tr><th>version</th><th>aliases</th><th>created</th><th>run</th>"
                       "<th>signature</th><th>files</th></tr>\n");
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(m, "versions")) {
            double ver = app_jnum(v, "version");
            char ts[40];
            app_fmt_time(app_jnum(v, "created_us"), ts, sizeof ts);
            kl_buf_printf(b, "<tr class=\"version\"><td>%.0f</td><td>", ver);
            const cJSON *al;
            cJSON_ArrayForEach(al, cJSON_GetObjectItem(m, "aliases")) if (al->valuedouble == ver) {
                kl_buf_puts(b, "<b class=\"alias\">@");
                kl_buf_html(b, al->string);
                kl_buf_puts(b, "</b> ");
            }
            kl_buf_printf(b, "</td><td>%s</td><td>", ts);
            if (!isnan(app_jnum(v, "run_id"))) kl_buf_printf(b, "<a href=\"/run/%.0f\">%.0f</a>", app_jnum(v, "run_id"), app_jnum(v, "run_id"));
            kl_buf_puts(b, "</td><td><code>");
            const cJSON *sig = cJSON_GetObjectItem(v, "signature");
            if (cJSON_IsObject(sig)) {
                char *s = cJSON_PrintUnformatted(sig);
                kl_buf_html(b, s);
                cJSON_free(s);
            }
            kl_buf_puts(b, "</code></td><td>");
            const cJSON *f;
            cJSON_ArrayForEach(f, cJSON_GetObjectItem(v, "files")) {
                kl_buf_html(b, jstr(f, "path"));
                kl_buf_printf(b, " (%.0f B, <code>%.12s</code>)<br>", app_jnum(f, "size"), jstr(f, "sha256"));
            }
            kl_buf_puts(b, "</td></tr>\n");
        }
        kl_buf_puts(b, "</table>\n<h2>alias history</h2><table id=\"alias-history\"><tr><th>time (UTC)</th><th>alias</th><th>version</th></tr>");
        void *h = NULL;
        if (!kl_registry_history_json(c->t, name, &h, &e)) {
            const cJSON *x;
            cJSON_ArrayForEach(x, (cJSON *)h) {
                char ts[40];
                kl_time_rfc3339((int64_t)app_jnum(x, "time_us"), ts, sizeof ts);
                kl_buf_printf(b, "<tr><td>%s</td><td>", ts);
                kl_buf_html(b, jstr(x, "alias"));
                if (isnan(app_jnum(x, "version"))) kl_buf_puts(b, "</td><td>(removed)</td></tr>");
                else kl_buf_printf(b, "</td><td>%.0f</td></tr>", app_jnum(x, "version"));
            }
            cJSON_Delete(h);
        }
        kl_buf_puts(b, "</table>\n");
    }
    cJSON_Delete(j);
    page_end(b);
    return MHD_HTTP_OK;
}

/* ==================================================================
 * Studies (keel tune)
 * ================================================================== */

static void study_href(kl_buf *b, const char *name) {
    kl_buf_puts(b, "<a href=\"/study/");
    url_enc(b, name);
    kl_buf_puts(b, "\">");
    kl_buf_html(b, name);
    kl_buf_puts(b, "</a>");
}

static void trial_params(kl_buf *b, const kl_tune_space *s, const kl_trial *t) {
    for (int p = 0; p < s->n; p++) {
        char val[96];
        kl_buf_puts(b, "<td>");
        if (t->params[p].present) kl_buf_html(b, kl_tune_value_str(&s->p[p], t->params[p], val, sizeof val));
        kl_buf_puts(b, "</td>");
    }
}

static int page_studies(ui_ctx *c, kl_buf *b) {
    kl_err e = {0};
    char **names = NULL;
    size_t n = 0;
    page_start(b, "Studies");
    if (kl_study_list(c->t, &names, &n, &e)) {
        kl_buf_puts(b, "<p class=\"err\">");
        kl_buf_html(b, kl_err_what(&e));
        kl_buf_puts(b, "</p>");
        page_end(b);
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    kl_buf_printf(b, "<p>%zu stud%s (keel tune)</p><table id=\"studies\"><tr><th>study</th><th>metric</th><th>direction</th>"
                     "<th>sampler</th><th>trials</th><th>complete</th><th>pruned</th><th>failed</th><th>best</th><th>best trial</th></tr>\n",
                  n, n == 1 ? "y" : "ies");
    for (size_t i = 0; i < n; i++) {
        kl_study *st = NULL;
        const kl_trial *t = NULL;
        size_t nt = 0;
        kl_buf_puts(b, "<tr class=\"study\"><td>");
        study_href(b, names[i]);
        kl_buf_puts(b, "</td>");
        if (kl_study_find_recorded(c->t, names[i], &st, &e) || kl_study_load(st, &t, &nt, &e)) {
            kl_buf_puts(b, "<td colspan=\"9\" class=\"err\">");
            kl_buf_html(b, kl_err_what(&e));
            kl_buf_puts(b, "</td></tr>\n");
            kl_study_free(st);
            continue;
        }
        const kl_study_info *info = kl_study_get_info(st);
        int cnt[4] = {0};
        for (size_t k = 0; k < nt; k++) cnt[t[k].state]++;
        const kl_trial *best = kl_tune_best(t, nt, info->minimize);
        kl_buf_puts(b, "<td>");
        kl_buf_html(b, info->metric);
        kl_buf_printf(b, "</td><td>%s</td><td>", info->minimize ? "minimize" : "maximize");
        kl_buf_html(b, info->sampler);
        kl_buf_printf(b, "</td><td>%zu</td><td>%d</td><td>%d</td><td>%d</td>", nt, cnt[KL_TRIAL_COMPLETE], cnt[KL_TRIAL_PRUNED],
                      cnt[KL_TRIAL_FAILED]);
        if (best) kl_buf_printf(b, "<td>%.6g</td><td><a href=\"/run/%lld\">%d</a></td></tr>\n", best->value, (long long)best->run_id, best->number);
        else kl_buf_puts(b, "<td>-</td><td>-</td></tr>\n");
        kl_study_free(st);
    }
    kl_buf_puts(b, "</table>\n");
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    page_end(b);
    return MHD_HTTP_OK;
}

static int page_study(ui_ctx *c, const char *name, kl_buf *b) {
    kl_err e = {0};
    kl_study *st = NULL;
    const kl_trial *t = NULL;
    size_t n = 0;
    if (kl_study_find_recorded(c->t, name, &st, &e) || kl_study_load(st, &t, &n, &e)) {
        page_start(b, "Study not found");
        kl_buf_puts(b, "<p class=\"err\">");
        kl_buf_html(b, kl_err_what(&e));
        kl_buf_puts(b, "</p>");
        page_end(b);
        int code = e.code == KL_ENOTFOUND ? MHD_HTTP_NOT_FOUND : MHD_HTTP_INTERNAL_SERVER_ERROR;
        kl_study_free(st);
        return code;
    }
    const kl_study_info *info = kl_study_get_info(st);
    const kl_tune_space *s = kl_study_space(st);
    char title[400];
    snprintf(title, sizeof title, "Study %s", name);
    page_start(b, title);
    kl_buf_puts(b, "<table id=\"study-attributes\"><tr><th>metric</th><td>");
    kl_buf_html(b, info->metric);
    kl_buf_printf(b, " (%s)</td></tr><tr><th>sampler</th><td>", info->minimize ? "minimize" : "maximize");
    kl_buf_html(b, info->sampler);
    kl_buf_puts(b, "</td></tr><tr><th>spec</th><td><code>");
    kl_buf_html(b, info->spec);
    kl_buf_printf(b, "</code></td></tr><tr><th>trials</th><td>%zu</td></tr></table>\n", n);
    const kl_trial *best = kl_tune_best(t, n, info->minimize);
    kl_buf_puts(b, "<h2>best trial</h2>");
    if (best) {
        kl_buf_printf(b, "<table id=\"best\"><tr><th>trial</th><td><a href=\"/run/%lld\">%d</a></td></tr><tr><th>", (long long)best->run_id,
                      best->number);
        kl_buf_html(b, info->metric);
        kl_buf_printf(b, "</th><td>%.6g</td></tr>", best->value);
        for (int p = 0; p < s->n; p++) {
            char val[96];
            if (!best->params[p].present) continue;
            kl_buf_puts(b, "<tr><th>");
            kl_buf_html(b, s->p[p].name);
            kl_buf_puts(b, "</th><td>");
            kl_buf_html(b, kl_tune_value_str(&s->p[p], best->params[p], val, sizeof val));
            kl_buf_puts(b, "</td></tr>");
        }
        kl_buf_puts(b, "</table>\n");
    } else {
        kl_buf_puts(b, "<p>no trial has completed</p>\n");
    }
    kl_buf_puts(b, "<h2>pictures</h2><div class=\"charts\">\n");
    kl_tune_svg_history(b, t, n, info->minimize, info->metric);
    kl_tune_svg_parallel(b, s, t, n, info->minimize, info->metric);
    kl_buf_puts(b, "</div>\n<h2>parameter importance</h2><table id=\"importance\"><tr><th>parameter</th><th>share of variance</th></tr>");
    double *imp = calloc((size_t)s->n + 1, sizeof *imp);
    if (imp) {
        kl_tune_importance(s, t, n, imp);
        for (int p = 0; p < s->n; p++) {
            kl_buf_puts(b, "<tr><td>");
            kl_buf_html(b, s->p[p].name);
            kl_buf_printf(b, "</td><td>%.1f %%</td></tr>", 100 * imp[p]);
        }
        free(imp);
    }
    kl_buf_puts(b, "</table>\n<h2>trials</h2><table id=\"trials\"><tr><th>trial</th><th>state</th><th>value</th><th>epochs</th>");
    for (int p = 0; p < s->n; p++) {
        kl_buf_puts(b, "<th>");
        kl_buf_html(b, s->p[p].name);
        kl_buf_puts(b, "</th>");
    }
    kl_buf_puts(b, "</tr>\n");
    for (size_t i = 0; i < n; i++) {
        const kl_trial *x = &t[i];
        kl_buf_printf(b, "<tr class=\"trial%s\"><td><a href=\"/run/%lld\">%d</a></td><td class=\"state-%s\">%s</td><td>", x == best ? " best" : "",
                      (long long)x->run_id, x->number, kl_trial_state_name(x->state), kl_trial_state_name(x->state));
        if (x->state == KL_TRIAL_COMPLETE && isfinite(x->value)) kl_buf_printf(b, "%.6g", x->value);
        else kl_buf_puts(b, "-");
        kl_buf_printf(b, "</td><td>%d</td>", x->ninter);
        trial_params(b, s, x);
        kl_buf_puts(b, "</tr>\n");
    }
    kl_buf_puts(b, "</table>\n");
    kl_study_free(st);
    page_end(b);
    return MHD_HTTP_OK;
}

/* ==================================================================
 * Server
 * ================================================================== */

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method, const char *version,
                              const char *upload_data, size_t *upload_size, void **req_cls) {
    ui_ctx *c = cls;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        static const char msg[] = "read-only UI: only GET\n";
        struct MHD_Response *r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
        MHD_destroy_response(r);
        return ret;
    }
    kl_buf b;
    kl_buf_init(&b);
    int status;
    const char *ctype = "text/html; charset=utf-8";
    int64_t id;
    if (!strcmp(url, "/") || !strcmp(url, "/runs")) status = page_runs(c, conn, &b);
    else if (!strncmp(url, "/run/", 5) && !kl_parse_int64(url + 5, &id)) status = page_run(c, id, &b);
    else if (!strcmp(url, "/compare")) status = page_compare(c, conn, &b);
    else if (!strcmp(url, "/models") || !strcmp(url, "/models/")) status = page_models(c, NULL, &b);
    else if (!strncmp(url, "/models/", 8)) status = page_models(c, url + 8, &b);
    else if (!strcmp(url, "/studies") || !strcmp(url, "/studies/")) status = page_studies(c, &b);
    else if (!strncmp(url, "/study/", 7)) status = page_study(c, url + 7, &b);
    else if (!strcmp(url, "/healthz")) {
        kl_buf_puts(&b, "ok\n");
        ctype = "text/plain";
        status = MHD_HTTP_OK;
    } else {
        page_start(&b, "Not found");
        page_end(&b);
        status = MHD_HTTP_NOT_FOUND;
    }
    size_t len = b.len;
    char *data = kl_buf_take(&b);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data ? data : (void *)"", data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static const app_opt ui_opts[] = {
    {"port", 'p', 1, "PORT", "port (default 5050; 0 = any free port)", 0},
    {"host", 0, 1, "ADDR", "address to listen on (default 127.0.0.1)", 0},
};
static const app_cmd_spec ui_spec = {"ui", "keel ui [--port P] [--host 127.0.0.1]",
                                     "Serve a read-only web UI over the runs and models of the store.",
                                     "Prints the URL on stdout. Pages: / (runs, filter and sort), /run/ID, /compare?ids=1,2,\n"
                                     "/models, /models/NAME, /studies, /study/NAME (keel tune). Stops on SIGINT or SIGTERM.",
                                     ui_opts, KL_ARRAY_LEN(ui_opts), 0, 0};

int cmd_ui(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&ui_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t port;
    if ((rc = app_get_int(&a, &ui_spec, "port", 5050, &port)) >= 0) return rc;
    if (port < 0 || port > 65535) return app_usage_error(&ui_spec, "--port must be 0..65535");
    const char *host = app_get(&a, "host") ? app_get(&a, "host") : "127.0.0.1";
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, "0", &hints, &ai) != 0 || !ai) return app_usage_error(&ui_spec, "cannot resolve --host %s", host);
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    int v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6) ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    kl_err e = {0};
    ui_ctx c = {0};
    if (app_store_open(0, &c.t, &e)) return app_fail(&e);
    /* block the stop signals in every thread; this one waits for them */
    kl_err se = {0};
    if (kl_signal_catch(&se)) { kl_track_close(c.t); return app_fail(&se); }
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
                                            (uint16_t)port, NULL, NULL, handle, &c, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!d) {
        kl_err_set(&e, KL_EBUSY, "cannot listen on %s:%lld (in use or not permitted)", host, (long long)port);
        kl_track_close(c.t);
        return app_fail(&e);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned real_port = info ? info->port : (unsigned)port;
    printf("keel ui: http://%s%s%s:%u/\n", v6 ? "[" : "", host, v6 ? "]" : "", real_port);
    fflush(stdout);
    kl_log(KL_LOG_INFO, "ui", "serving %s on port %u (store %s)", host, real_port, kl_track_where(c.t));
    int sig;
    while ((sig = kl_signal_wait()) == SIGHUP) {}   /* nothing to reload */
    kl_log(KL_LOG_INFO, "ui", "stopping (signal %d)", sig);
    MHD_stop_daemon(d);
    kl_track_close(c.t);
    return APP_EXIT_OK;
}
