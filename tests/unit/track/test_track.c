/* Unit tests of the experiment store and registry: params immutability,
 * metric NaN/Inf round trip and latest values, schema migration, the filter
 * parser (incl. error columns), alias history at time T, tamper detection. */
#include "../harness.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <keel/track.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "track/track_int.h"

/* KEEL_TEST_TRACK_URL (postgresql://user@host:port, set by
 * tests/integration/track_pg.sh): the same tests on a PostgreSQL store, a
 * fresh database per test and store, objects in NAME/objects as on SQLite. */
static const char *pg_server(void) {
    const char *u = getenv("KEEL_TEST_TRACK_URL");
    return u && *u ? u : NULL;
}

static kl_track *open_store(const char *name) {
    kl_err e = {0};
    kl_track *t = NULL;
    if (pg_server()) {
        kl_store_loc loc;
        char db[64], url[4096], *p;
        const char *base = strrchr(kt_tmpdir(), '/');
        snprintf(db, sizeof db, "kt_%.40s_%.12s", base ? base + 1 : "x", name);
        for (p = db; *p; p++)
            if (!isalnum((unsigned char)*p)) *p = '_';
        if (kl__pg_fresh_db(pg_server(), db, url, sizeof url, &e) || kl_track_store_resolve(url, "test", &loc, &e)) {
            kt_fail(__FILE__, __LINE__, "PostgreSQL store: %s", kl_err_what(&e));
            return NULL;
        }
        snprintf(loc.artifacts, sizeof loc.artifacts, "%s/objects", kt_path(name));
        if (kl_track_open_loc(&loc, 1, &t, &e)) kt_fail(__FILE__, __LINE__, "open: %s", kl_err_what(&e));
        return t;
    }
    if (kl_track_open(kt_path(name), &t, &e)) {
        kt_fail(__FILE__, __LINE__, "open: %s", kl_err_what(&e));
        return NULL;
    }
    return t;
}

KL_TEST(track_params_immutable) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    kl_track_run *r = NULL;
    KT_OK(kl_track_run_start(t, "exp", "r1", 0, &r, &e), &e);
    kl_kv p[] = {{"lr", "0.001"}, {"opt", "adam"}};
    KT_OK(kl_track_log_params(r, p, 2, &e), &e);
    KT_OK(kl_track_log_params(r, p, 1, &e), &e); /* same value: fine */
    kl_kv p2[] = {{"batch", "32"}, {"lr", "0.01"}};
    int rc = kl_track_log_params(r, p2, 2, &e);
    KT_EQ_INT(rc, KL_EEXIST);
    KT_CONTAINS(e.msg, "immutable");
    KT_CONTAINS(e.msg, "lr");
    void *j = NULL;
    KT_OK(kl_track_run_json(t, kl_track_run_id(r), &j, &e), &e);
    cJSON *params = cJSON_GetObjectItem(j, "params");
    KT_EQ_STR(cJSON_GetObjectItem(params, "lr")->valuestring, "0.001");
    KT_CHECK(cJSON_GetObjectItem(params, "batch") == NULL); /* batch rejected as a whole */
    cJSON_Delete(j);
    KT_OK(kl_track_run_end(r, KL_RUN_FINISHED, &e), &e);
    kl_track_close(t);
}

KL_TEST(track_metrics_nan_inf_roundtrip) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    kl_track_run *r = NULL;
    KT_OK(kl_track_run_start(t, NULL, NULL, 0, &r, &e), &e);
    kl_metric_point pts[] = {{"loss", 0, 0, 1.5}, {"loss", 1, 0, NAN}, {"loss", 2, 0, INFINITY}, {"loss", 3, 0, -INFINITY},
                             {"acc", 5, 0, 0.5},  {"acc", 4, 0, 0.9}};
    KT_OK(kl_track_log_metrics(r, pts, 6, &e), &e);
    int64_t *steps = NULL, *ts = NULL;
    double *v = NULL;
    size_t n = 0;
    KT_OK(kl_track_metric_history(t, kl_track_run_id(r), "loss", &steps, &ts, &v, &n, &e), &e);
    KT_EQ_INT(n, 4);
    KT_NEAR(v[0], 1.5, 0);
    KT_CHECK(isnan(v[1]));
    KT_CHECK(isinf(v[2]) && v[2] > 0);
    KT_CHECK(isinf(v[3]) && v[3] < 0);
    KT_CHECK(ts[0] > 0);
    free(steps);
    free(ts);
    free(v);
    void *j = NULL;
    KT_OK(kl_track_run_json(t, kl_track_run_id(r), &j, &e), &e);
    cJSON *m = cJSON_GetObjectItem(j, "metrics");
    KT_EQ_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "loss"), "value")->valuestring, "-Infinity");
    /* latest = highest step, not last logged */
    KT_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "acc"), "value")->valuedouble, 0.5, 0);
    KT_EQ_STR(kl_run_status_name(KL_RUN_RUNNING), cJSON_GetObjectItem(j, "status")->valuestring);
    cJSON_Delete(j);
    /* a later batch with a lower step does not move the latest value */
    kl_metric_point more[] = {{"acc", 1, 0, 0.1}};
    KT_OK(kl_track_log_metrics(r, more, 1, &e), &e);
    int64_t *ids = NULL;
    size_t nids = 0;
    KT_OK(kl_track_runs_find(t, "metrics.acc = 0.5", NULL, 0, &ids, &nids, &e), &e);
    KT_EQ_INT(nids, 1);
    free(ids);
    KT_OK(kl_track_runs_find(t, "metrics.loss = nan", NULL, 0, &ids, &nids, &e), &e);
    KT_EQ_INT(nids, 0); /* latest loss is -inf */
    free(ids);
    /* the same step logged again is appended, in order, never overwritten */
    kl_metric_point dup[] = {{"acc", 1, 0, 0.2}, {"acc", 1, 0, 0.3}};
    KT_OK(kl_track_log_metrics(r, dup, 2, &e), &e);
    KT_OK(kl_track_metric_history(t, kl_track_run_id(r), "acc", &steps, NULL, &v, &n, &e), &e);
    KT_EQ_INT(n, 5);
    KT_EQ_INT(steps[0], 1);
    KT_NEAR(v[0], 0.1, 0);
    KT_NEAR(v[1], 0.2, 0);
    KT_NEAR(v[2], 0.3, 0);
    KT_EQ_INT(steps[4], 5);
    free(steps);
    free(v);
    KT_OK(kl_track_run_end(r, KL_RUN_FINISHED, &e), &e);
    kl_track_close(t);
}

KL_TEST(track_migration_forward) {
    if (pg_server()) return; /* SQLite's user_version and file layout */
    kl_err e = {0};
    kl__track_target_version = 1; /* an old store: no registry tables */
    kl_track *t = NULL;
    int rc = kl_track_open(kt_path("old"), &t, &e);
    kl__track_target_version = KL_TRACK_SCHEMA_VERSION;
    KT_OK(rc, &e);
    kl_track_run *r = NULL;
    KT_OK(kl_track_run_start(t, "exp", "old-run", 0, &r, &e), &e);
    int64_t id = kl_track_run_id(r);
    /* rows as a version-1 keel wrote them */
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO metric_keys(id, name) VALUES(1, 'loss');"
             "INSERT INTO metrics(run_id, key_id, step, seq, ts_us, value) VALUES(%lld, 1, 1, 0, 5, 0.25);"
             "INSERT INTO metric_latest(run_id, key_id, step, ts_us, value) VALUES(%lld, 1, 1, 5, 0.25);",
             (long long)id, (long long)id);
    KT_OK(kl__track_exec(t, sql, &e), &e);
    KT_OK(kl_track_run_end(r, KL_RUN_FINISHED, &e), &e);
    void *j = NULL;
    KT_CHECK(kl_registry_json(t, NULL, &j, &e) != 0); /* no registry yet */
    kl_track_close(t);
    /* reopen: migrated to the current version, data intact */
    t = open_store("old");
    KT_CHECK(t);
    KT_OK(kl_registry_json(t, NULL, &j, &e), &e);
    cJSON_Delete(j);
    KT_OK(kl_track_run_json(t, id, &j, &e), &e);
    KT_EQ_STR(cJSON_GetObjectItem(j, "name")->valuestring, "old-run");
    KT_EQ_INT(cJSON_GetObjectItem(j, "points")->valuedouble, 1); /* counts backfilled by migration 4 */
    cJSON_Delete(j);
    int64_t *ids = NULL;
    size_t nids = 0;
    KT_OK(kl_track_runs_find(t, "metrics.loss < 0.5", NULL, 0, &ids, &nids, &e), &e);
    KT_EQ_INT(nids, 1);
    free(ids);
    kl_track_close(t);
    /* a store from a newer keel is refused */
    t = open_store("old");
    KT_CHECK(t);
    KT_OK(kl__track_exec(t, "PRAGMA user_version=99", &e), &e);
    kl_track_close(t);
    t = NULL;
    KT_CHECK(kl_track_open(kt_path("old"), &t, &e) == KL_EUNSUPPORTED && t == NULL);
    KT_CONTAINS(e.msg, "newer");
}

KL_TEST(track_filter_parser) {
    kl_err e = {0};
    char *sql = NULL;
    KT_OK(kl_track_filter_compile("metrics.val_acc > 0.9 and params.lr = \"0.001\" and tags.team = \"ads\"", &sql, &e), &e);
    KT_CONTAINS(sql, "metric_latest");
    KT_CONTAINS(sql, "params");
    KT_CONTAINS(sql, "tags");
    KT_CHECK(strstr(sql, "0.001") == NULL); /* values are bound, never spliced */
    KT_CHECK(strstr(sql, "ads") == NULL);
    free(sql);
    KT_OK(kl_track_filter_compile("(status = 'finished' or not status = \"killed\") and name like 'a%'", &sql, &e), &e);
    free(sql);
    struct {
        const char *f;
        int col;
        const char *msg;
    } bad[] = {
        {"metrics.acc >> 1", 14, "value"},
        {"metrics.acc > 0.9 and", 22, "field"},
        {"metrics.acc > 0.9 xor x = 1", 19, "'and', 'or'"},
        {"foo = 1", 1, "unknown field"},
        {"params.lr = \"0.1", 13, "unterminated"},
        {"(metrics.acc > 1", 1, "unclosed"},
        {"metrics.acc ~ 1", 13, "unexpected character"},
        {"metrics.acc = \"x\"", 15, "numbers"},
        {"", 1, "empty"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i++) {
        kl_err_clear(&e);
        int rc = kl_track_filter_compile(bad[i].f, &sql, &e);
        KT_CHECKF(rc == KL_EPARSE, "filter '%s' gave %d", bad[i].f, rc);
        KT_CHECKF(e.col == bad[i].col, "filter '%s': column %d, expected %d (%s)", bad[i].f, e.col, bad[i].col, e.msg);
        KT_CONTAINS(e.msg, bad[i].msg);
    }
}

KL_TEST(track_filter_query) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    for (int i = 0; i < 10; i++) {
        kl_track_run *r = NULL;
        char name[32], lr[32];
        snprintf(name, sizeof name, "r%d", i);
        snprintf(lr, sizeof lr, "%g", 0.001 * (i + 1));
        KT_OK(kl_track_run_start(t, i < 5 ? "a" : "b", name, 0, &r, &e), &e);
        kl_kv p[] = {{"lr", lr}};
        KT_OK(kl_track_log_params(r, p, 1, &e), &e);
        KT_OK(kl_track_set_tag(r, "team", i % 2 ? "ads" : "search", &e), &e);
        kl_metric_point m = {"val_acc", 1, 0, 0.85 + 0.01 * i};
        KT_OK(kl_track_log_metrics(r, &m, 1, &e), &e);
        KT_OK(kl_track_run_end(r, i == 9 ? KL_RUN_FAILED : KL_RUN_FINISHED, &e), &e);
    }
    int64_t *ids = NULL;
    size_t n = 0;
    KT_OK(kl_track_runs_find(t, "metrics.val_acc > 0.9 and tags.team = \"ads\"", "-metrics.val_acc", 0, &ids, &n, &e), &e);
    KT_EQ_INT(n, 2); /* i = 7, 9 (0.92, 0.94); i=5 is 0.90 exactly, not > */
    KT_EQ_INT(ids[0], 10);
    free(ids);
    KT_OK(kl_track_runs_find(t, "params.lr = \"0.003\"", NULL, 0, &ids, &n, &e), &e);
    KT_EQ_INT(n, 1);
    KT_EQ_INT(ids[0], 3);
    free(ids);
    KT_OK(kl_track_runs_find(t, "params.lr >= 0.005 and experiment = b and status != failed", "params.lr", 2, &ids, &n, &e), &e);
    KT_EQ_INT(n, 2);
    KT_EQ_INT(ids[0], 6);
    free(ids);
    kl_track_close(t);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

KL_TEST(track_registry_alias_history) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", kt_path("model"));
    mkdir(dir, 0755);
    char p[600];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    write_file(p, "weights v1");
    snprintf(p, sizeof p, "%s/meta.json", dir);
    write_file(p, "{\"inputs\":[{\"name\":\"x\",\"dtype\":\"float32\",\"shape\":[-1,4]}],\"outputs\":[{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[-1,2]}]}");
    int64_t v1 = 0, v2 = 0;
    KT_OK(kl_registry_register(t, "clf", dir, 0, NULL, &v1, &e), &e);
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    write_file(p, "weights v2");
    KT_OK(kl_registry_register(t, "clf", dir, 0, NULL, &v2, &e), &e);
    KT_EQ_INT(v1, 1);
    KT_EQ_INT(v2, 2);
    KT_OK(kl_registry_set_alias(t, "clf", "champion", 1, &e), &e);
    int64_t t1 = kl_time_now_us();
    usleep(2000);
    KT_OK(kl_registry_set_alias(t, "clf", "champion", 2, &e), &e);
    int64_t t2 = kl_time_now_us();
    usleep(2000);
    KT_OK(kl_registry_set_alias(t, "clf", "champion", 0, &e), &e);
    int64_t v = -1;
    KT_OK(kl_registry_alias_at(t, "clf", "champion", t1, &v, &e), &e);
    KT_EQ_INT(v, 1);
    KT_OK(kl_registry_alias_at(t, "clf", "champion", t2, &v, &e), &e);
    KT_EQ_INT(v, 2);
    KT_OK(kl_registry_alias_at(t, "clf", "champion", 0, &v, &e), &e);
    KT_EQ_INT(v, 0); /* removed now */
    KT_OK(kl_registry_alias_at(t, "clf", "champion", 1000, &v, &e), &e);
    KT_EQ_INT(v, 0); /* before any alias */
    KT_CHECK(kl_registry_set_alias(t, "clf", "champion", 7, &e) == KL_ENOTFOUND);
    /* signature read from meta.json */
    void *j = NULL;
    KT_OK(kl_registry_json(t, "clf", &j, &e), &e);
    char *s = cJSON_PrintUnformatted(j);
    KT_CONTAINS(s, "\"signature\":{\"inputs\":[{\"name\":\"x\"");
    free(s);
    cJSON_Delete(j);
    kl_track_close(t);
}

KL_TEST(track_registry_tamper_detected) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s", kt_path("model"));
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/sub", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    write_file(p, "the weights");
    snprintf(p, sizeof p, "%s/sub/vocab.txt", dir);
    write_file(p, "a b c");
    int64_t v = 0;
    KT_OK(kl_registry_register(t, "m", dir, 0, NULL, &v, &e), &e);
    KT_OK(kl_registry_set_alias(t, "m", "champion", v, &e), &e);
    char out[600];
    snprintf(out, sizeof out, "%s/out1", kt_tmpdir());
    KT_OK(kl_registry_resolve(t, "m@champion", out, &e), &e);
    snprintf(p, sizeof p, "%s/sub/vocab.txt", out);
    KT_CHECK(kl_path_exists(p));
    KT_OK(kl_registry_verify(t, "m", 0, NULL, &e), &e);
    /* tamper with the stored object of model.onnx */
    char hex[65], obj[1024];
    KT_OK(kl_sha256_file_hex(kt_path("model/model.onnx"), hex, &e), &e);
    snprintf(obj, sizeof obj, "%s/objects/%.2s/%s", kt_path("store"), hex, hex + 2);
    chmod(obj, 0644);
    write_file(obj, "evil weights");
    kl_buf rep;
    kl_buf_init(&rep);
    KT_CHECK(kl_registry_verify(t, "m", 0, &rep, &e) == KL_ECHECKSUM);
    KT_CONTAINS(rep.data, "model.onnx");
    KT_CHECK(strstr(rep.data, "vocab") == NULL);
    kl_buf_free(&rep);
    snprintf(out, sizeof out, "%s/out2", kt_tmpdir());
    KT_CHECK(kl_registry_resolve(t, "m/1", out, &e) == KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "model.onnx");
    snprintf(p, sizeof p, "%s/model.onnx", out);
    KT_CHECK(!kl_path_exists(p)); /* never served */
    KT_CHECK(kl_registry_is_ref("m@champion"));
    KT_CHECK(kl_registry_is_ref("m/3"));
    KT_CHECK(!kl_registry_is_ref("m"));
    kl_track_close(t);
}

KL_TEST(track_svg_chart) {
    int64_t x[] = {0, 1, 2, 3};
    double y[] = {1.0, 0.5, NAN, 0.2};
    kl_chart_series s[] = {{"run 1", x, y, 4, NULL, 0, 0}, {"run <2>", x, y, 2, NULL, 0, 0}};
    kl_buf b;
    kl_buf_init(&b);
    KT_OK(kl_track_svg_chart(&b, "loss", "step", "loss", s, 2, 640, 400), NULL);
    KT_CONTAINS(b.data, "<svg");
    KT_CONTAINS(b.data, "class=\"series\"");
    KT_CONTAINS(b.data, "run &lt;2&gt;");
    KT_CONTAINS(b.data, " M"); /* the NaN broke the line */
    kl_buf_free(&b);
}

/* the training curves' form of the one chart: a log loss axis (a grid line
 * per decade, y <= 0 not drawn), per-epoch dots, accuracy on a 0-100 % right
 * axis */
KL_TEST(track_svg_chart_log_and_right_axis) {
    int64_t x[] = {0, 10, 20, 30};
    double loss[] = {1000, 10, 0, 0.01}, acc[] = {0.1, 0.5, 0.9, 1.0};
    kl_chart_series s[] = {{"train loss", x, loss, 4, NULL, 0, 0}, {"validation accuracy", x, acc, 4, NULL, 1, 1}};
    kl_chart c = {"curves", "step", "loss (log)", "accuracy", s, 2, 770, 420, 1};
    kl_buf b;
    kl_buf_init(&b);
    KT_OK(kl_svg_chart(&b, &c), NULL);
    KT_CONTAINS(b.data, ">0.01</text>");
    KT_CONTAINS(b.data, ">1e+03</text>");
    KT_CONTAINS(b.data, ">100%</text>");
    KT_CONTAINS(b.data, "class=\"yaxis-right\"");
    KT_CHECK(strstr(b.data, "<circle") != NULL); /* the dotted series */
    const char *p = strstr(b.data, "<path class=\"series\"");
    KT_CHECK(p && strstr(p, " M") && strstr(p, " M") < strstr(p, "/>")); /* the 0 loss broke the log line */
    kl_buf_free(&b);
}

/* Threads sharing one handle, each logging its own run. */
typedef struct {
    kl_track *t;
    int64_t run_id;
    int rc;
} thr_arg;

static void *thr_log(void *p) {
    thr_arg *a = p;
    kl_err e = {0};
    kl_track_run *r = NULL;
    if ((a->rc = kl_track_run_start(a->t, "threads", NULL, 0, &r, &e))) return NULL;
    a->run_id = kl_track_run_id(r);
    kl_metric_point pts[20];
    for (int b = 0; b < 25 && !a->rc; b++) {
        for (int i = 0; i < 20; i++) pts[i] = (kl_metric_point){i % 2 ? "acc" : "loss", b * 10 + i / 2, 0, (double)i};
        a->rc = kl_track_log_metrics(r, pts, 20, &e);
    }
    kl_track_run_end(r, KL_RUN_FINISHED, &e);
    return NULL;
}

KL_TEST(track_threads_share_handle) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){t, 0, 0};
        pthread_create(&th[i], NULL, thr_log, &args[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        KT_EQ_INT(args[i].rc, 0);
        int64_t n = 0;
        KT_OK(kl_track_metric_count(t, args[i].run_id, NULL, &n, &e), &e);
        KT_EQ_INT(n, 500);
    }
    kl_track_close(t);
}

KL_TEST(track_artifacts_and_lineage) {
    kl_err e = {0};
    kl_track *t = open_store("store");
    KT_CHECK(t);
    kl_track_run *parent = NULL, *r = NULL;
    KT_OK(kl_track_run_start(t, "exp", "parent", 0, &parent, &e), &e);
    KT_OK(kl_track_run_start(t, "exp", "child", kl_track_run_id(parent), &r, &e), &e);
    kl_track_run_free(r); /* re-attached below */
    KT_CHECK(kl_track_run_start(t, "exp", "orphan", 999, &r, &e) == KL_ENOTFOUND && r == NULL);
    KT_OK(kl_track_run_attach(t, 2, &r, &e), &e);
    write_file(kt_path("report.txt"), "hello artifact");
    KT_OK(kl_track_log_artifact(r, kt_path("report.txt"), &e), &e);
    kl_track_lineage l = {"ds-7", "feat-abc", "deadbeef", "spec-1"};
    KT_OK(kl_track_set_lineage(r, &l, &e), &e);
    kl_track_lineage l2 = {NULL, NULL, NULL, "spec-2"};
    KT_OK(kl_track_set_lineage(r, &l2, &e), &e);
    KT_OK(kl_track_set_tag(r, "k", "v1", &e), &e);
    KT_OK(kl_track_set_tag(r, "k", "v2", &e), &e); /* tags are mutable */
    void *j = NULL;
    KT_OK(kl_track_run_json(t, 2, &j, &e), &e);
    cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "artifacts"), 0);
    KT_EQ_STR(cJSON_GetObjectItem(a, "path")->valuestring, "report.txt");
    KT_EQ_INT(cJSON_GetObjectItem(a, "size")->valuedouble, 14);
    char hex[65], obj[1024];
    kl_sha256_buf_hex("hello artifact", 14, hex);
    KT_EQ_STR(cJSON_GetObjectItem(a, "sha256")->valuestring, hex);
    snprintf(obj, sizeof obj, "%s/objects/%.2s/%s", kt_path("store"), hex, hex + 2);
    KT_CHECK(kl_path_exists(obj));
    cJSON *lin = cJSON_GetObjectItem(j, "lineage");
    KT_EQ_STR(cJSON_GetObjectItem(lin, "dataset_version")->valuestring, "ds-7");
    KT_EQ_STR(cJSON_GetObjectItem(lin, "code_version")->valuestring, "deadbeef");
    KT_EQ_STR(cJSON_GetObjectItem(lin, "spec_hash")->valuestring, "spec-2");
    KT_EQ_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "tags"), "k")->valuestring, "v2");
    KT_EQ_INT(cJSON_GetObjectItem(j, "parent_id")->valuedouble, 1);
    cJSON_Delete(j);
    KT_OK(kl_track_run_json(t, 1, &j, &e), &e);
    KT_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "children")), 1);
    cJSON_Delete(j);
    KT_OK(kl_track_run_end(r, KL_RUN_FAILED, &e), &e);
    KT_OK(kl_track_run_end(parent, KL_RUN_FINISHED, &e), &e);
    int64_t *ids = NULL;
    size_t n = 0;
    KT_OK(kl_track_runs_find(t, "status = failed and parent_id = 1", NULL, 0, &ids, &n, &e), &e);
    KT_EQ_INT(n, 1);
    free(ids);
    kl_track_close(t);
}

KL_TEST(track_migration_dev_layout) {
    /* a schema-1 store written by a development build: metrics as a rowid
     * table without seq; opening rebuilds it and keeps every point in order */
    if (pg_server()) return; /* SQLite's file layout */
    kl_err e = {0};
    kl__track_target_version = 1;
    kl_track *t = NULL;
    int rc = kl_track_open(kt_path("dev"), &t, &e);
    kl__track_target_version = KL_TRACK_SCHEMA_VERSION;
    KT_OK(rc, &e);
    KT_OK(kl__track_exec(t,
                         "DROP TABLE metrics;"
                         "CREATE TABLE metrics(run_id INTEGER NOT NULL, key_id INTEGER NOT NULL, step INTEGER NOT NULL,"
                         " ts_us INTEGER NOT NULL, value REAL);"
                         "INSERT INTO experiments(id, name, created_us) VALUES(1, 'e', 1);"
                         "INSERT INTO runs(id, experiment_id, name, status, start_us) VALUES(1, 1, 'r', 'finished', 1);"
                         "INSERT INTO metric_keys(id, name) VALUES(1, 'loss');"
                         "INSERT INTO metrics VALUES(1, 1, 0, 1, 0.5), (1, 1, 1, 2, 0.4), (1, 1, 1, 3, 0.3), (1, 1, 2, 4, NULL);"
                         "INSERT INTO metric_latest VALUES(1, 1, 2, 4, NULL);",
                         &e),
          &e);
    kl_track_close(t);
    t = open_store("dev");
    KT_CHECK(t);
    int64_t *steps = NULL;
    double *v = NULL;
    size_t n = 0;
    KT_OK(kl_track_metric_history(t, 1, "loss", &steps, NULL, &v, &n, &e), &e);
    KT_EQ_INT(n, 4);
    KT_NEAR(v[1], 0.4, 0);
    KT_NEAR(v[2], 0.3, 0);
    KT_CHECK(isnan(v[3]));
    free(steps);
    free(v);
    int64_t cnt = 0;
    KT_OK(kl_track_metric_count(t, 1, "loss", &cnt, &e), &e);
    KT_EQ_INT(cnt, 4);
    kl_track_close(t);
}

/* JSON text of a run, the registry and the alias history (the copy's dump). */
static char *dump_store(kl_track *t, int64_t nruns) {
    kl_buf b;
    kl_buf_init(&b);
    kl_err e = {0};
    for (int64_t id = 1; id <= nruns; id++) {
        void *j = NULL;
        if (kl_track_run_json(t, id, &j, &e)) {
            kl_buf_printf(&b, "run %lld: %s\n", (long long)id, e.msg);
            continue;
        }
        cJSON_DeleteItemFromObject(j, "host"); /* the same; kept out for clarity */
        char *s = cJSON_PrintUnformatted(j);
        kl_buf_printf(&b, "%s\n", s);
        free(s);
        cJSON_Delete(j);
        int64_t *steps = NULL, *ts = NULL;
        double *vals = NULL;
        size_t n = 0;
        if (!kl_track_metric_history(t, id, "loss", &steps, &ts, &vals, &n, &e))
            for (size_t i = 0; i < n; i++)
                kl_buf_printf(&b, "%lld %lld %.17g\n", (long long)steps[i], (long long)ts[i], vals[i]);
        free(steps);
        free(ts);
        free(vals);
    }
    void *j = NULL;
    if (!kl_registry_json(t, NULL, &j, &e)) {
        char *s = cJSON_PrintUnformatted(j);
        kl_buf_printf(&b, "%s\n", s);
        free(s);
        cJSON_Delete(j);
    }
    if (!kl_registry_history_json(t, "clf", &j, &e)) {
        char *s = cJSON_PrintUnformatted(j);
        kl_buf_printf(&b, "%s\n", s);
        free(s);
        cJSON_Delete(j);
    }
    return kl_buf_take(&b);
}

KL_TEST(track_copy_exact) {
    /* a SQLite store copied into a new store (PostgreSQL under
     * KEEL_TEST_TRACK_URL): the same dump, ids continue after the copied ones */
    kl_err e = {0};
    kl_track *a = NULL;
    KT_OK(kl_track_open(kt_path("src"), &a, &e), &e);
    kl_track_run *r = NULL, *c = NULL;
    KT_OK(kl_track_run_start(a, "exp", "parent", 0, &r, &e), &e);
    KT_OK(kl_track_run_start(a, "other", NULL, kl_track_run_id(r), &c, &e), &e);
    kl_kv p[] = {{"lr", "0.01"}, {"opt", "adam"}};
    KT_OK(kl_track_log_params(r, p, 2, &e), &e);
    kl_metric_point m[] = {{"loss", 0, 1000, 1.5},       {"loss", 1, 2000, NAN}, {"loss", 1, 3000, INFINITY},
                           {"loss", 2, 4000, -INFINITY}, {"loss", 2, 5000, 0.1}, {"acc", 7, 6000, 1.0 / 3.0}};
    KT_OK(kl_track_log_metrics(r, m, KL_ARRAY_LEN(m), &e), &e);
    KT_OK(kl_track_log_metrics(r, m, 2, &e), &e); /* repeated steps append after the earlier points */
    KT_OK(kl_track_set_tag(r, "team", "ads", &e), &e);
    kl_track_lineage lin = {"ds-1", "fh", "abc123", NULL};
    KT_OK(kl_track_set_lineage(r, &lin, &e), &e);
    write_file(kt_path("art.txt"), "artifact body");
    KT_OK(kl_track_log_artifact(c, kt_path("art.txt"), &e), &e);
    KT_OK(kl_track_run_end(c, KL_RUN_FAILED, &e), &e);
    KT_OK(kl_track_run_end(r, KL_RUN_FINISHED, &e), &e);
    char dir[512], f[600];
    snprintf(dir, sizeof dir, "%s", kt_path("model"));
    mkdir(dir, 0755);
    snprintf(f, sizeof f, "%s/model.onnx", dir);
    write_file(f, "w1");
    int64_t v = 0;
    KT_OK(kl_registry_register(a, "clf", dir, 1, "{\"inputs\":[]}", &v, &e), &e);
    write_file(f, "w2");
    KT_OK(kl_registry_register(a, "clf", dir, 0, NULL, &v, &e), &e);
    KT_OK(kl_registry_set_alias(a, "clf", "champion", 1, &e), &e);
    KT_OK(kl_registry_set_alias(a, "clf", "champion", 2, &e), &e);
    KT_OK(kl_registry_set_alias(a, "clf", "champion", 0, &e), &e);
    KT_OK(kl_registry_set_tag(a, "clf", 2, "stage", "prod", &e), &e);
    kl_track *b = open_store("copy");
    KT_CHECK(b);
    kl_track_copy_stats st;
    KT_OK(kl_track_copy(a, b, &st, &e), &e);
    KT_EQ_INT(st.runs, 2);
    KT_EQ_INT(st.points, 8);
    KT_EQ_INT(st.versions, 2);
    KT_EQ_INT(st.alias_changes, 3);
    KT_EQ_INT(st.objects, 3);
    char *da = dump_store(a, 2), *db = dump_store(b, 2);
    KT_CHECKF(da && db && !strcmp(da, db), "dumps differ:\n%s\n---\n%s", da, db);
    KT_CONTAINS(db, "1 3000 inf\n1 2000 nan\n2 4000 -inf");
    free(da);
    free(db);
    KT_OK(kl_registry_verify(b, NULL, 0, NULL, &e), &e);
    /* a second copy into the same store is refused; new ids follow the copied ones */
    KT_CHECK(kl_track_copy(a, b, &st, &e) == KL_EEXIST);
    KT_OK(kl_track_run_start(b, "exp", "next", 0, &r, &e), &e);
    KT_EQ_INT(kl_track_run_id(r), 3);
    KT_OK(kl_track_run_end(r, KL_RUN_FINISHED, &e), &e);
    KT_OK(kl_registry_register(b, "clf", dir, 0, NULL, &v, &e), &e);
    KT_EQ_INT(v, 3);
    KT_OK(kl_registry_set_alias(b, "clf", "champion", 3, &e), &e);
    kl_track_close(a);
    kl_track_close(b);
}

/* ---- claims: several workers on one study (src/track/claim.c) ---------------- */

static int64_t claim_study(kl_track *t, const char *name) {
    kl_err e = {0};
    kl_kv tags[] = {{"kind", "study"}, {"study", name}};
    int64_t root = 0;
    int created = 0;
    char rname[128];
    snprintf(rname, sizeof rname, "study:%s", name);
    if (kl_track_run_ensure(t, "tune", rname, tags, 2, KL_RUN_FINISHED, &root, &created, &e))
        kt_fail(__FILE__, __LINE__, "run_ensure: %s", kl_err_what(&e));
    return root;
}

/* ends a claimed trial as a worker does: state tag, then the run's status */
static int claim_finish(kl_track *t, int64_t run_id, const char *state, kl_err *e) {
    kl_track_run *r = NULL;
    int rc = kl_track_run_attach(t, run_id, &r, e);
    if (!rc) rc = kl_track_set_tag(r, "state", state, e);
    if (!rc) return kl_track_run_end(r, KL_RUN_FINISHED, e);
    kl_track_run_free(r);
    return rc;
}

static const char *run_tag(kl_track *t, int64_t id, const char *key, char *buf, size_t n) {
    void *j = NULL;
    kl_err e = {0};
    buf[0] = 0;
    if (kl_track_run_json(t, id, &j, &e)) return buf;
    cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "tags"), key);
    if (cJSON_IsString(v)) snprintf(buf, n, "%s", v->valuestring);
    cJSON_Delete(j);
    return buf;
}

KL_TEST(track_trial_claim_numbers_then_none_left) {
    kl_err e = {0};
    kl_track *t = open_store("claim1");
    KT_CHECK(t);
    int64_t root = claim_study(t, "s");
    kl_track_claim c[3];
    for (int i = 0; i < 3; i++) {
        KT_OK(kl_track_trial_claim(t, root, "s", 3, 30, &c[i], &e), &e);
        KT_EQ_INT(c[i].number, i);
        KT_EQ_INT((int)c[i].requeued_from, 0);
    }
    char buf[64];
    KT_EQ_STR(run_tag(t, c[1].run_id, "trial", buf, sizeof buf), "1");
    KT_EQ_STR(run_tag(t, c[1].run_id, "state", buf, sizeof buf), "running");
    kl_track_claim x;
    KT_EQ_INT(kl_track_trial_claim(t, root, "s", 3, 30, &x, &e), KL_EBUSY); /* all taken, still running */
    KT_EQ_INT(x.running, 3);
    KT_OK(claim_finish(t, c[0].run_id, "complete", &e), &e);
    KT_OK(claim_finish(t, c[1].run_id, "pruned", &e), &e);
    KT_OK(claim_finish(t, c[2].run_id, "failed", &e), &e); /* a failure of the trial itself is not re-run */
    KT_EQ_INT(kl_track_trial_claim(t, root, "s", 3, 30, &x, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "no trial left");
    /* a larger study goes on with the next number */
    KT_OK(kl_track_trial_claim(t, root, "s", 4, 30, &x, &e), &e);
    KT_EQ_INT(x.number, 3);
    KT_EQ_INT(kl_track_trial_claim(t, 0, "s", 4, 30, &x, &e), KL_EINVAL);
    kl_track_close(t);
}

KL_TEST(track_trial_claim_requeues_lost_trial) {
    kl_err e = {0};
    kl_track *t = open_store("claim2");
    KT_CHECK(t);
    int64_t root = claim_study(t, "s");
    kl_track_claim a, b, c;
    KT_OK(kl_track_trial_claim(t, root, "s", 2, 5, &a, &e), &e);
    kl_track_run *r = NULL;
    KT_OK(kl_track_run_attach(t, a.run_id, &r, &e), &e);
    kl_kv p[] = {{"lr", "0.01"}};
    KT_OK(kl_track_log_params(r, p, 1, &e), &e);
    kl_track_run_free(r);
    KT_OK(kl_track_run_heartbeat(t, a.run_id, &e), &e);
    KT_OK(kl_track_trial_claim(t, root, "s", 2, 5, &b, &e), &e);
    KT_EQ_INT(b.number, 1);
    KT_EQ_INT(b.lost_marked, 0); /* a's heartbeat is fresh */
    /* a's worker stops heartbeating: 10 s ago */
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE runs SET heartbeat_us = %lld WHERE id = %lld",
             (long long)(kl_time_now_us() - 10000000), (long long)a.run_id);
    KT_OK(kl__track_exec(t, sql, &e), &e);
    KT_OK(kl_track_trial_claim(t, root, "s", 2, 5, &c, &e), &e);
    KT_EQ_INT(c.lost_marked, 1);
    KT_EQ_INT(c.number, 0);
    KT_CHECK(c.requeued_from == a.run_id);
    char buf[128];
    KT_EQ_STR(run_tag(t, a.run_id, "state", buf, sizeof buf), "failed");
    KT_EQ_STR(run_tag(t, a.run_id, "lost", buf, sizeof buf), "1");
    KT_CONTAINS(run_tag(t, a.run_id, "error", buf, sizeof buf), "worker lost");
    void *j = NULL;
    KT_OK(kl_track_run_json(t, c.run_id, &j, &e), &e);
    KT_EQ_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "params"), "lr")->valuestring, "0.01"); /* the same point */
    KT_EQ_STR(cJSON_GetObjectItem(j, "status")->valuestring, "running");
    cJSON_Delete(j);
    KT_OK(kl_track_run_json(t, a.run_id, &j, &e), &e);
    KT_EQ_STR(cJSON_GetObjectItem(j, "status")->valuestring, "failed");
    cJSON_Delete(j);
    /* the lost worker's heartbeat now says so, and its end is not written */
    KT_EQ_INT(kl_track_run_heartbeat(t, a.run_id, &e), KL_ESTATE);
    kl_kv done[] = {{"state", "complete"}};
    KT_EQ_INT(kl_track_run_finish(t, a.run_id, KL_RUN_FINISHED, done, 1, &e), KL_ESTATE);
    KT_EQ_STR(run_tag(t, a.run_id, "state", buf, sizeof buf), "failed");
    /* the re-run's worker ends it: once */
    KT_OK(kl_track_run_finish(t, c.run_id, KL_RUN_FINISHED, done, 1, &e), &e);
    KT_EQ_STR(run_tag(t, c.run_id, "state", buf, sizeof buf), "complete");
    KT_EQ_INT(kl_track_run_finish(t, c.run_id, KL_RUN_FAILED, done, 1, &e), KL_ESTATE);
    kl_track_claim x;
    KT_EQ_INT(kl_track_trial_claim(t, root, "s", 2, 5, &x, &e), KL_EBUSY); /* b still runs */
    KT_EQ_INT(x.running, 1);
    /* trial 1 given back, then lost twice more: re-queued, re-queued, then failed for good */
    KT_OK(kl_track_trial_release(t, b.run_id, "interrupted", &e), &e);
    KT_CONTAINS(run_tag(t, b.run_id, "error", buf, sizeof buf), "interrupted (re-queued)");
    for (int k = 1; k < KL_TRACK_TRIAL_MAX_LOST; k++) {
        KT_OK(kl_track_trial_claim(t, root, "s", 2, 5, &x, &e), &e);
        KT_EQ_INT(x.number, 1);
        KT_OK(kl_track_trial_release(t, x.run_id, "interrupted", &e), &e);
    }
    KT_EQ_INT(kl_track_trial_release(t, x.run_id, "again", &e), KL_ESTATE);
    KT_EQ_INT(kl_track_trial_claim(t, root, "s", 2, 5, &x, &e), KL_ENOTFOUND);
    kl_track_close(t);
}

/* Children claim from their own handles at once until none is left; each
 * writes the numbers it got to its own file. */
#define CLAIM_KIDS 4
#define CLAIM_N 40
static void claim_child(const char *store, int64_t root, int k) {
    kl_err e = {0};
    kl_track *t = NULL;
    if (kl_track_open(store, &t, &e)) _exit(2);
    char path[64];
    snprintf(path, sizeof path, "got-%d", k);
    FILE *f = fopen(kt_path(path), "w");
    if (!f) _exit(3);
    for (int tries = 0; tries < 10000; tries++) {
        kl_track_claim c;
        int rc = kl_track_trial_claim(t, root, "s", CLAIM_N, 30, &c, &e);
        if (rc == KL_ENOTFOUND) break;
        if (rc == KL_EBUSY) {
            usleep(2000);
            continue;
        }
        if (rc || claim_finish(t, c.run_id, "complete", &e)) _exit(4);
        fprintf(f, "%d\n", c.number);
    }
    fclose(f);
    kl_track_close(t);
    _exit(0);
}

KL_TEST(track_trial_claim_concurrent_processes_no_number_twice) {
    kl_err e = {0};
    kl_track *t = open_store("claim3");
    KT_CHECK(t);
    int64_t root = claim_study(t, "s");
    char store[4096];
    snprintf(store, sizeof store, "%s", kl_track_dir(t));
    pid_t kids[CLAIM_KIDS];
    for (int k = 0; k < CLAIM_KIDS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) claim_child(store, root, k);
    }
    for (int k = 0; k < CLAIM_KIDS; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        KT_CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", k, st);
    }
    int count[CLAIM_N] = {0}, total = 0;
    for (int k = 0; k < CLAIM_KIDS; k++) {
        char path[64];
        snprintf(path, sizeof path, "got-%d", k);
        FILE *f = fopen(kt_path(path), "r");
        KT_CHECK(f);
        int n;
        while (f && fscanf(f, "%d", &n) == 1) {
            KT_CHECK(n >= 0 && n < CLAIM_N);
            if (n >= 0 && n < CLAIM_N) count[n]++;
            total++;
        }
        if (f) fclose(f);
    }
    KT_EQ_INT(total, CLAIM_N);
    for (int n = 0; n < CLAIM_N; n++) KT_CHECKF(count[n] == 1, "trial %d claimed %d times", n, count[n]);
    char filter[128];
    snprintf(filter, sizeof filter, "tags.kind = \"trial\" and tags.study = \"s\"");
    int64_t *ids = NULL;
    size_t nids = 0;
    KT_OK(kl_track_runs_find(t, filter, NULL, 0, &ids, &nids, &e), &e);
    KT_EQ_INT((int)nids, CLAIM_N);
    free(ids);
    kl_track_close(t);
}

KL_TEST(track_trial_claim_study_created_once) {
    kl_err e = {0};
    kl_track *t = open_store("claim4");
    KT_CHECK(t);
    char store[4096];
    snprintf(store, sizeof store, "%s", kl_track_dir(t));
    pid_t kids[CLAIM_KIDS];
    for (int k = 0; k < CLAIM_KIDS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            kl_track *u = NULL;
            kl_err ce = {0};
            if (kl_track_open(store, &u, &ce)) _exit(2);
            int64_t root = claim_study(u, "race");
            kl_track_close(u);
            _exit(root > 0 ? 0 : 3);
        }
    }
    for (int k = 0; k < CLAIM_KIDS; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        KT_CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", k, st);
    }
    int64_t *ids = NULL;
    size_t nids = 0;
    KT_OK(kl_track_runs_find(t, "name = \"study:race\"", NULL, 0, &ids, &nids, &e), &e);
    KT_EQ_INT((int)nids, 1);
    int64_t root = 0;
    int created = 1;
    kl_kv tags[] = {{"kind", "study"}};
    KT_OK(kl_track_run_ensure(t, "tune", "study:race", tags, 1, KL_RUN_FINISHED, &root, &created, &e), &e);
    KT_EQ_INT(created, 0);
    KT_CHECK(nids == 1 && root == ids[0]);
    free(ids);
    kl_track_close(t);
}
