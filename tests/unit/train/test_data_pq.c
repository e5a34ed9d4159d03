/* Training on Parquet (src/train/data_pq.c): the spec's data.dataset source
 * through the data layer's reader: default feature columns, fraction and
 * column splits, the reference column, and errors naming the column/row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "keel/parquet.h"
#include "train/train_data.h"
#include "../data/pq_footer.h"

/* x1 float64, x2 int32, s string (not a feature), day int64, y bool, __ref float64;
 * x1 of row null_row is null when null_row >= 0. */
static const char *write_pq(const char *name, int rows, int null_row) {
    const char *p = kt_path(name);
    kl_column *c[6] = {0};
    kl_err e = {0};
    kl_column_new("x1", KL_COL_FLOAT64, 1, 0, &c[0], &e);
    kl_column_new("x2", KL_COL_INT32, 0, 0, &c[1], &e);
    kl_column_new("s", KL_COL_STRING, 0, 0, &c[2], &e);
    kl_column_new("day", KL_COL_INT64, 0, 0, &c[3], &e);
    kl_column_new("y", KL_COL_BOOL, 0, 0, &c[4], &e);
    kl_column_new("__ref", KL_COL_FLOAT64, 0, 0, &c[5], &e);
    for (int i = 0; i < rows; i++) {
        if (i == null_row) kl_column_push_null(c[0]); else kl_column_push_f64(c[0], i * 0.5);
        kl_column_push_i64(c[1], i);
        kl_column_push_str(c[2], "a", 1);
        kl_column_push_i64(c[3], i % 5);
        kl_column_push_i64(c[4], i % 3 == 0);
        kl_column_push_f64(c[5], i % 3 == 0 ? 0.9 : 0.1);
    }
    int rc = kl_pq_write_file(p, c, 6, NULL, NULL, &e);
    for (int i = 0; i < 6; i++) kl_column_free(c[i]);
    return rc ? NULL : p;
}

static int parse(const char *yaml, tr_dsrc **d, kl_err *e) {
    kl_doc *doc = NULL;
    int rc = kl_doc_load_str(yaml, strlen(yaml), "spec.yaml", &doc, e);
    if (!rc) rc = kl__train_dsrc_parse(kl_doc_root(doc), d, e);
    kl_doc_free(doc);
    return rc;
}

KL_TEST(train_pq_default_features_and_fraction_split) {
    const char *p = write_pq("pq_a.parquet", 100, -1);
    KT_CHECK(p != NULL);
    char y[512];
    snprintf(y, sizeof y, "{dataset: %s, label: y, exclude: [day], split: {train: 0.8, val: 0.1, test: 0.1, shuffle: false}}", p);
    tr_dsrc *d = NULL;
    kl_err e = {0};
    KT_OK(parse(y, &d, &e), &e);
    tr_array X, Y;
    tr_dsinfo info;
    KT_OK(kl__train_dsrc_load(d, TR_PART_TRAIN, &X, &Y, &info, &e), &e);
    KT_EQ_INT(info.nnames, 2);                 /* x1, x2: not s (string), day (excluded), y, __ref */
    KT_EQ_STR(info.names[0], "x1");
    KT_EQ_STR(info.names[1], "x2");
    KT_EQ_INT(X.dims[0], 80);
    KT_EQ_INT(X.dims[1], 2);
    KT_NEAR(X.f[79 * 2 + 1], 79, 0);           /* contiguous: the first 80 rows */
    KT_EQ_INT(info.rows_part[TR_PART_TEST], 10);
    KT_CHECK(strlen(info.manifest_sha) == 64);
    kl__train_array_free(&X); kl__train_array_free(&Y); kl__train_dsinfo_free(&info);
    d->ref_col = strdup("__ref");
    KT_OK(kl__train_dsrc_load(d, TR_PART_TEST, &X, &Y, &info, &e), &e);
    KT_EQ_INT(X.dims[0], 10);
    KT_NEAR(X.f[1], 90, 0);                    /* the last 10 rows */
    KT_NEAR(info.ref[0], 0.9, 0);              /* row 90: 90 % 3 == 0 */
    KT_NEAR(Y.f[0], 1, 0);
    kl__train_array_free(&X); kl__train_array_free(&Y); kl__train_dsinfo_free(&info);
    kl__train_dsrc_free(d);
}

KL_TEST(train_pq_column_split_and_seeded_split) {
    const char *p = write_pq("pq_b.parquet", 100, -1);
    char y[512];
    snprintf(y, sizeof y, "{dataset: %s, label: y, features: [x2], split: {column: day, train: [0, 1, 2], val: [3], test: [4]}}", p);
    tr_dsrc *d = NULL;
    kl_err e = {0};
    KT_OK(parse(y, &d, &e), &e);
    tr_array X, Y;
    KT_OK(kl__train_dsrc_load(d, TR_PART_VAL, &X, &Y, NULL, &e), &e);
    KT_EQ_INT(X.dims[0], 20);
    for (int64_t i = 0; i < X.dims[0]; i++) KT_EQ_INT((int64_t)X.f[i] % 5, 3);
    kl__train_array_free(&X); kl__train_array_free(&Y);
    kl__train_dsrc_free(d);
    snprintf(y, sizeof y, "{dataset: %s, label: y, split: {train: 0.5, test: 0.5, seed: 7}}", p);
    KT_OK(parse(y, &d, &e), &e);
    tr_dsinfo i1, i2;
    KT_OK(kl__train_dsrc_load(d, TR_PART_TRAIN, &X, &Y, &i1, &e), &e);
    double first = X.f[0];
    kl__train_array_free(&X); kl__train_array_free(&Y);
    KT_OK(kl__train_dsrc_load(d, TR_PART_TRAIN, &X, &Y, &i2, &e), &e);
    KT_NEAR(X.f[0], first, 0);                 /* the seeded draw is deterministic */
    KT_EQ_INT(i1.rows_part[0] + i1.rows_part[2], 100);
    KT_CHECK(i1.rows_part[0] > 30 && i1.rows_part[0] < 70);
    kl__train_array_free(&X); kl__train_array_free(&Y); kl__train_dsinfo_free(&i1); kl__train_dsinfo_free(&i2);
    kl__train_dsrc_free(d);
}

KL_TEST(train_pq_errors_name_column_and_row) {
    const char *p = write_pq("pq_c.parquet", 20, 7);
    char y[512];
    tr_dsrc *d = NULL;
    kl_err e = {0};
    tr_array X, Y;
    snprintf(y, sizeof y, "{dataset: %s, label: y}", p);
    KT_OK(parse(y, &d, &e), &e);
    KT_CHECK(kl__train_dsrc_load(d, TR_PART_ALL, &X, &Y, NULL, &e) == KL_EINVAL);
    KT_CONTAINS(e.msg, "row 7");
    KT_CONTAINS(e.msg, "'x1' is null");
    kl__train_dsrc_free(d);
    snprintf(y, sizeof y, "{dataset: %s, label: y, features: [s]}", p);
    KT_OK(parse(y, &d, &e), &e);
    KT_CHECK(kl__train_dsrc_load(d, TR_PART_ALL, &X, &Y, NULL, &e) == KL_ETYPE);
    KT_CONTAINS(e.msg, "'s' is string");
    kl__train_dsrc_free(d);
    snprintf(y, sizeof y, "{dataset: %s, label: nope}", p);
    KT_OK(parse(y, &d, &e), &e);
    KT_CHECK(kl__train_dsrc_load(d, TR_PART_ALL, &X, &Y, NULL, &e) == KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "label column 'nope' not found");
    kl__train_dsrc_free(d);
    snprintf(y, sizeof y, "{dataset: %s, label: y, split: {train: 0.9, test: 0.5}}", p);
    KT_CHECK(parse(y, &d, &e) == KL_EINVAL);
    KT_CONTAINS(e.msg, "sum to at most 1");
}

/* A footer whose num_rows disagrees with its row groups (issue 22: 1 of
 * 20000 rows aborted in the allocator, 19000 of 20000 wrote past X and Y and
 * returned 0): the load fails naming the file and both counts. */
KL_TEST(train_pq_footer_row_count_lie_is_refused) {
    static const int64_t lies[] = {1, 19000};
    for (size_t k = 0; k < KL_ARRAY_LEN(lies); k++) {
        char name[64];
        snprintf(name, sizeof name, "pq_lie%zu.parquet", k);
        const char *p0 = write_pq(name, 20000, -1);
        KT_CHECK(p0 != NULL);
        char p[4096];
        snprintf(p, sizeof p, "%s", p0);
        KT_CHECK(kt_pq_set_num_rows(p, lies[k]) == 0);
        char y[4300];
        snprintf(y, sizeof y, "{dataset: %s, label: y}", p);
        tr_dsrc *d = NULL;
        kl_err e = {0};
        KT_OK(parse(y, &d, &e), &e);
        tr_array X, Y;
        tr_dsinfo info;
        int rc = kl__train_dsrc_load(d, TR_PART_ALL, &X, &Y, &info, &e);
        kl__train_dsrc_free(d);
        if (rc == 0) { kl__train_array_free(&X); kl__train_array_free(&Y); kl__train_dsinfo_free(&info); }
        KT_EQ_INT(rc, KL_EPARSE);
        KT_CONTAINS(e.msg, name);
        KT_CONTAINS(e.msg, "20000");
    }
}
