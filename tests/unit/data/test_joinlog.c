/* Unit tests: the flat dataset manifest (kl_dataset_manifest_write /
 * kl_dataset_manifest_files, the one writer of features datasets and the
 * prediction log: a round trip, the resolver checks it, malformed entries are
 * errors naming the file and entry) and kl_join_log_read (labels joined by
 * request id to record 0, the latest label of an id wins, a label that is not
 * an integer for an int32 label is an error naming the request). */
#include "../harness.h"

#include <keel/column.h>
#include <keel/core.h>
#include <keel/data.h>
#include <keel/parquet.h>
#include <stdlib.h>
#include <string.h>

static kl_column *col_str(const char *name, const char *const *v, size_t n) {
    kl_column *c = NULL;
    kl_column_new(name, KL_COL_STRING, 1, n, &c, NULL);
    for (size_t i = 0; i < n; i++) kl_column_push_str(c, v[i], strlen(v[i]));
    return c;
}

static kl_column *col_i64(const char *name, kl_col_type t, const int64_t *v, size_t n) {
    kl_column *c = NULL;
    kl_column_new(name, t, 1, n, &c, NULL);
    for (size_t i = 0; i < n; i++) kl_column_push_i64(c, v[i]);
    return c;
}

static kl_column *col_f64(const char *name, const double *v, size_t n) {
    kl_column *c = NULL;
    kl_column_new(name, KL_COL_FLOAT64, 1, n, &c, NULL);
    for (size_t i = 0; i < n; i++) kl_column_push_f64(c, v[i]);
    return c;
}

/* writes cols as dir/rel and lists it in dir's manifest */
static void write_part(const char *dir, const char *rel, kl_column **cols, size_t nc) {
    kl_err e = {0};
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    *strrchr(p, '/') = 0;
    KT_OK(kl_mkdir_p(p, &e), &e);
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    KT_OK(kl_pq_write_file(p, cols, nc, NULL, NULL, &e), &e);
    kl_dataset_file f;
    KT_OK(kl_dataset_file_stat(dir, rel, cols[0]->len, &f, &e), &e);
    KT_OK(kl_dataset_manifest_write(dir, "keel-prediction-log-1", "\"model\": \"m\"", &f, 1, &e), &e);
    free(f.path);
    for (size_t i = 0; i < nc; i++) kl_column_free(cols[i]);
}

KL_TEST(dataset_manifest_round_trip) {
    kl_err e = {0};
    char dir[600];
    snprintf(dir, sizeof dir, "%s", kt_path("flat"));
    const char *ids[] = {"a", "b"};
    kl_column *c[1] = {col_str("request_id", ids, 2)};
    write_part(dir, "part-0.parquet", c, 1);
    kl_dataset_file *f = NULL;
    size_t n = 0;
    KT_OK(kl_dataset_manifest_files(dir, &f, &n, &e), &e);
    KT_EQ_INT(n, 1);
    KT_EQ_STR(f[0].path, "part-0.parquet");
    KT_EQ_INT(f[0].rows, 2);
    KT_EQ_INT(strlen(f[0].sha256), 64);
    kl_dataset_files_free(f, n);
    char **files = NULL, *manifest = NULL;
    size_t nf = 0;
    KT_OK(kl_dataset_resolve(dir, &files, &nf, &manifest, &e), &e); /* sha256 checked */
    KT_EQ_INT(nf, 1);
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    free(manifest);
    /* malformed entries: errors naming the manifest and the entry */
    const char *bad[] = {"{\"files\": [{\"path\": \"../x\", \"sha256\": \"00\"}]}",
                         "{\"files\": [{\"path\": \"x.parquet\", \"sha256\": \"zz\", \"rows\": 1, \"bytes\": 1}]}",
                         "{\"files\": 7}",
                         "{\"files\": [{\"path\": \"x.parquet\", \"sha256\": "
                         "\"0000000000000000000000000000000000000000000000000000000000000000\", "
                         "\"rows\": -1, \"bytes\": 1}]}"};
    const char *why[] = {"not a relative path", "sha256", "neither a map nor a list", "whole numbers"};
    char mp[700];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    for (int i = 0; i < 4; i++) {
        KT_OK(kl_write_file_atomic(mp, bad[i], strlen(bad[i]), &e), &e);
        kl_err_clear(&e);
        int rc = kl_dataset_manifest_files(dir, &f, &n, &e);
        KT_CHECKF(rc == KL_EPARSE, "case %d: rc %d: %s", i, rc, kl_err_what(&e));
        KT_CONTAINS(kl_err_what(&e), "manifest.json");
        KT_CONTAINS(kl_err_what(&e), why[i]);
        KT_CHECK(f == NULL && n == 0);
    }
}

KL_TEST(join_log_labels_by_request_id) {
    kl_err e = {0};
    char log[600], pdir[700], ldir[700];
    snprintf(log, sizeof log, "%s", kt_path("plog"));
    snprintf(pdir, sizeof pdir, "%s/m/predictions", log);
    snprintf(ldir, sizeof ldir, "%s/m/labels", log);
    /* predictions: a (one record), b (two records), c (unlabelled) */
    const char *pid[] = {"a", "b", "b", "c"};
    int64_t rec[] = {0, 0, 1, 0}, at[] = {10, 20, 20, 30}, ver[] = {1, 1, 1, 1};
    double out[] = {0.5, -1, 2, 3};
    kl_column *pc[5] = {col_str("request_id", pid, 4), col_i64("record", KL_COL_INT32, rec, 4),
                        col_i64("served_at", KL_COL_TIMESTAMP, at, 4), col_i64("model_version", KL_COL_INT64, ver, 4),
                        col_f64("output", out, 4)};
    write_part(pdir, "hour=x/part-0.parquet", pc, 5);
    /* labels: a twice (the later one, 0, wins), b, and z (no prediction) */
    const char *lid[] = {"a", "b", "a", "z"};
    int64_t lat[] = {100, 110, 120, 130};
    double lab[] = {1, 1, 0, 1};
    kl_column *lc[4] = {col_str("request_id", lid, 4), col_i64("received_at", KL_COL_TIMESTAMP, lat, 4),
                        col_f64("label", lab, 4), NULL};
    kl_column_new("label_text", KL_COL_STRING, 1, 4, &lc[3], &e); /* numeric labels: no text */
    for (int i = 0; i < 4; i++) kl_column_push_null(lc[3]);
    write_part(ldir, "part-0.parquet", lc, 4);
    kl_join_log_opts o = {0};
    o.log_dir = log;
    o.model = "m";
    o.label = "clicked";
    o.label_type = KL_COL_INT32;
    kl_join_log_result res;
    kl_column **c = NULL;
    size_t nc = 0;
    KT_OK(kl_join_log_read(&o, &c, &nc, &res, &e), &e);
    KT_EQ_INT(res.predictions, 4);
    KT_EQ_INT(res.labels, 4);
    KT_EQ_INT(res.joined, 2);
    KT_EQ_INT(res.unlabelled, 2); /* b's record 1 and c */
    KT_EQ_INT(res.replaced_labels, 1);
    KT_EQ_INT(res.unmatched_labels, 1);
    KT_EQ_INT(nc, 7);
    KT_EQ_STR(c[5]->name, "clicked");
    KT_EQ_INT(c[5]->type, KL_COL_INT32);
    KT_EQ_INT(c[0]->len, 2);
    size_t l;
    KT_CHECK(!strncmp(kl_column_get_str(c[0], 0, &l), "a", l) && kl_column_get_i64(c[5], 0) == 0);
    KT_CHECK(!strncmp(kl_column_get_str(c[0], 1, &l), "b", l) && kl_column_get_i64(c[5], 1) == 1);
    KT_EQ_INT(kl_column_get_i64(c[6], 0), 120); /* labelled_at: the winning label's */
    for (size_t i = 0; i < nc; i++) kl_column_free(c[i]);
    free(c);
    /* all predictions, label null where none */
    o.keep_unlabelled = 1;
    KT_OK(kl_join_log_read(&o, &c, &nc, &res, &e), &e);
    KT_EQ_INT(c[0]->len, 4);
    KT_CHECK(kl_column_is_null(c[5], 3));
    for (size_t i = 0; i < nc; i++) kl_column_free(c[i]);
    free(c);
    /* a label 0.5 cannot be an int32: an error naming the request */
    const char *lid2[] = {"a"};
    int64_t lat2[] = {200};
    double lab2[] = {0.5};
    kl_column *lc2[4] = {col_str("request_id", lid2, 1), col_i64("received_at", KL_COL_TIMESTAMP, lat2, 1),
                         col_f64("label", lab2, 1), NULL};
    kl_column_new("label_text", KL_COL_STRING, 1, 1, &lc2[3], &e);
    kl_column_push_null(lc2[3]);
    char ldir2[800];
    snprintf(ldir2, sizeof ldir2, "%s/m/labels", log);
    char p[900];
    snprintf(p, sizeof p, "%s/part-0.parquet", ldir2);
    remove(p);
    write_part(ldir2, "part-1.parquet", lc2, 4);
    o.keep_unlabelled = 0;
    kl_err_clear(&e);
    KT_CHECK(kl_join_log_read(&o, &c, &nc, &res, &e) == KL_ETYPE);
    KT_CONTAINS(kl_err_what(&e), "label of request a");
    KT_CONTAINS(kl_err_what(&e), "int32");
}
