/* Copying a whole store into an empty one (`keel runs migrate`), on either
 * engine: every table row for row with its ids (runs, metric history in
 * order, params, tags, lineage, the registry with alias history), in one
 * transaction on the destination, then every object the rows name, each
 * verified against its sha256 while it is copied. */
#include "track_int.h"

#include <stdlib.h>
#include <string.h>

/* Schema version 4, in dependency order; the key columns order the copy. */
static const struct {
    const char *table, *cols, *order;
} tables[] = {
    {"experiments", "id, name, created_us", "id"},
    {"runs", "id, experiment_id, name, status, start_us, end_us, parent_id, pid, pid_start, host, heartbeat_us", "id"},
    {"params", "run_id, key, value", "run_id, key"},
    {"metric_keys", "id, name", "id"},
    {"metrics", "run_id, key_id, step, seq, ts_us, value", "run_id, key_id, step, seq"},
    {"metric_latest", "run_id, key_id, step, ts_us, value, n", "run_id, key_id"},
    {"tags", "run_id, key, value", "run_id, key"},
    {"artifacts", "run_id, path, size, sha256, created_us", "run_id, path"},
    {"lineage", "run_id, dataset_version, feature_hash, code_version, spec_hash", "run_id"},
    {"models", "id, name, created_us", "id"},
    {"model_versions", "model_id, version, created_us, run_id, signature, source", "model_id, version"},
    {"model_files", "model_id, version, path, size, sha256", "model_id, version, path"},
    {"model_tags", "model_id, version, key, value", "model_id, version, key"},
    {"model_aliases", "model_id, alias, version, set_us", "model_id, alias"},
    {"alias_history", "id, model_id, alias, version, set_us", "id"},
};

static int ncols(const char *cols) {
    int n = 1;
    for (const char *p = cols; *p; p++) n += *p == ',';
    return n;
}

/* A column value of a source row, kept until its rows are sent. */
typedef struct {
    int kind;
    int64_t i;
    double f;
    char *s;
} cval;

static int read_value(kl__st *src, int i, cval *v) {
    v->kind = src->ops->col_kind(src, i);
    v->s = NULL;
    if (v->kind == KL__INT) v->i = kl__col_i64(src, i);
    else if (v->kind == KL__REAL) v->f = kl__col_f64(src, i);
    else if (v->kind == KL__TEXT && !(v->s = strdup(kl__col_text(src, i)))) return KL_ENOMEM;
    return KL_OK;
}

static void bind_value(kl__st *dst, int p, const cval *v) {
    switch (v->kind) {
    case KL__NULL: kl__bind_null(dst, p); break;
    case KL__INT: kl__bind_i64(dst, p, v->i); break;
    case KL__REAL: kl__bind_f64(dst, p, v->f); break;
    default: kl__bind_text(dst, p, v->s);
    }
}

/* The insert of rows rows of table k (a multi-row VALUES both dialects share). */
static int insert_sql(int k, int n, int rows, kl_buf *sql) {
    kl_buf_reset(sql);
    kl_buf_printf(sql, "INSERT INTO %s(%s) VALUES", tables[k].table, tables[k].cols);
    for (int r = 0; r < rows; r++) {
        kl_buf_puts(sql, r ? ", (" : " (");
        for (int i = 0; i < n; i++) kl_buf_puts(sql, i ? ", ?" : "?");
        kl_buf_puts(sql, ")");
    }
    return sql->failed ? KL_ENOMEM : KL_OK;
}

#define COPY_ROWS 200 /* rows per insert: 200 x 11 columns stays under SQLite's 32766 parameters */

/* Sends m gathered rows: the prepared full-size insert, or one for the tail. */
static int send_rows(kl_track *to, int k, int n, cval *v, int m, kl__st *full, kl_buf *sql, kl_err *e) {
    kl__st *d = full;
    int rc = KL_OK;
    if (m < COPY_ROWS) {
        if (insert_sql(k, n, m, sql)) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        if (!rc) rc = kl__track_prep(to, sql->data, &d, e);
    }
    if (!rc) {
        for (int i = 0; i < m * n; i++) bind_value(d, i + 1, &v[i]);
        int x = kl__step(d);
        if (x != KL__DONE) rc = kl__track_sqlerr(to, x, e, tables[k].table);
    }
    if (d && d != full) kl__free(d);
    else if (d) kl__reset(full);
    for (int i = 0; i < m * n; i++) {
        free(v[i].s);
        v[i].s = NULL;
    }
    return rc;
}

static int copy_table(kl_track *from, kl_track *to, int k, int64_t *rows, kl_err *e) {
    char sel[512];
    int n = ncols(tables[k].cols);
    snprintf(sel, sizeof sel, "SELECT %s FROM %s ORDER BY %s", tables[k].cols, tables[k].table, tables[k].order);
    kl__st *s = NULL, *full = NULL;
    kl_buf sql;
    kl_buf_init(&sql);
    cval *v = calloc((size_t)COPY_ROWS * (size_t)n, sizeof *v);
    int rc = v ? kl__track_prep(from, sel, &s, e) : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc && insert_sql(k, n, COPY_ROWS, &sql)) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc) rc = kl__track_prep(to, sql.data, &full, e);
    int r = KL__DONE, m = 0;
    while (!rc && (r = kl__step(s)) == KL__ROW) {
        for (int i = 0; i < n && !rc; i++)
            if (read_value(s, i, &v[m * n + i])) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        m++;
        (*rows)++;
        if (!rc && m == COPY_ROWS) {
            rc = send_rows(to, k, n, v, m, full, &sql, e);
            m = 0;
        }
    }
    if (!rc && r != KL__DONE) rc = kl__track_sqlerr(from, r, e, tables[k].table);
    if (!rc && m) rc = send_rows(to, k, n, v, m, full, &sql, e);
    for (int i = 0; v && i < COPY_ROWS * n; i++) free(v[i].s);
    free(v);
    kl__free(s);
    kl__free(full);
    kl_buf_free(&sql);
    if (rc) kl_err_prefix(e, "copying table %s", tables[k].table);
    return rc;
}

static int count_rows(kl_track *t, const char *sql, int64_t *n, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t, sql, &st, e);
    if (rc) return rc;
    int r = kl__step(st);
    if (r == KL__ROW) *n = kl__col_i64(st, 0);
    else rc = kl__track_sqlerr(t, r, e, "counting rows");
    kl__free(st);
    return rc;
}

/* Every object the source's rows name, copied into the destination's
 * object folder and checked against its name. */
static int copy_objects(kl_track *from, kl_track *to, int64_t *nobj, kl_err *e) {
    kl__st *st = NULL;
    int rc =
        kl__track_prep(from, "SELECT sha256 FROM artifacts UNION SELECT sha256 FROM model_files ORDER BY 1", &st, e);
    if (rc) return rc;
    if (from->objects && to->objects && !strcmp(from->objects, to->objects)) { /* a shared folder: nothing to copy */
        kl__free(st);
        return KL_OK;
    }
    int r;
    while (!rc && (r = kl__step(st)) == KL__ROW) {
        const char *want = kl__col_text(st, 0);
        char src[4096], got[65];
        int64_t size = 0;
        if ((rc = kl__track_need_objects(from, e)) || (rc = kl__track_need_objects(to, e))) break;
        kl__track_object_path(from, want, src, sizeof src);
        if ((rc = kl__track_put_object(to, src, got, &size, e))) break;
        if (strcmp(got, want))
            rc = kl_err_set(e, KL_ECHECKSUM, "object %s: sha256 mismatch (its content hashes to %.12s...)", src, got);
        (*nobj)++;
    }
    if (!rc && r != KL__DONE) rc = kl__track_sqlerr(from, r, e, "listing objects");
    kl__free(st);
    return rc;
}

int kl_track_copy(kl_track *from, kl_track *to, kl_track_copy_stats *stats, kl_err *e) {
    kl_track_copy_stats z = {0};
    if (!stats) stats = &z;
    memset(stats, 0, sizeof *stats);
    int64_t have = 0;
    kl__track_lock(from);
    kl__track_lock(to);
    int rc = count_rows(
        to, "SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM models) + (SELECT count(*) FROM experiments)",
        &have, e);
    if (!rc && have)
        rc =
            kl_err_set(e, KL_EEXIST,
                       "the destination store %s is not empty (%lld runs, models and experiments); copy into a new one",
                       to->where, (long long)have);
    if (!rc) rc = copy_objects(from, to, &stats->objects, e);
    if (!rc) rc = kl__track_begin(to, e);
    for (int k = 0; !rc && k < (int)KL_ARRAY_LEN(tables); k++) {
        int64_t n = 0;
        if ((rc = copy_table(from, to, k, &n, e))) break;
        if (!strcmp(tables[k].table, "runs")) stats->runs = n;
        else if (!strcmp(tables[k].table, "metrics")) stats->points = n;
        else if (!strcmp(tables[k].table, "model_versions")) stats->versions = n;
        else if (!strcmp(tables[k].table, "alias_history")) stats->alias_changes = n;
        stats->rows += n;
    }
    /* ids given explicitly: the next generated ones continue after them */
    if (!rc && to->ops->dialect->after_copy) rc = kl__track_exec(to, to->ops->dialect->after_copy, e);
    if (!rc) rc = kl__track_commit(to, e);
    else kl__track_rollback(to);
    kl__track_unlock(to);
    kl__track_unlock(from);
    if (rc) kl_err_prefix(e, "copying %s to %s", from->where, to->where);
    return rc;
}
