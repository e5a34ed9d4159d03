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

/* Binds column i of a source row to parameter i + 1 of the insert, by kind. */
static void copy_value(kl__st *src, kl__st *dst, int i) {
    switch (src->ops->col_kind(src, i)) {
    case KL__NULL: kl__bind_null(dst, i + 1); break;
    case KL__INT: kl__bind_i64(dst, i + 1, kl__col_i64(src, i)); break;
    case KL__REAL: kl__bind_f64(dst, i + 1, kl__col_f64(src, i)); break;
    default: kl__bind_text(dst, i + 1, kl__col_text(src, i));
    }
}

static int copy_table(kl_track *from, kl_track *to, int k, int64_t *rows, kl_err *e) {
    char sel[512], ins[768];
    int n = ncols(tables[k].cols);
    snprintf(sel, sizeof sel, "SELECT %s FROM %s ORDER BY %s", tables[k].cols, tables[k].table, tables[k].order);
    int w = snprintf(ins, sizeof ins, "INSERT INTO %s(%s) VALUES(", tables[k].table, tables[k].cols);
    for (int i = 0; i < n; i++) w += snprintf(ins + w, sizeof ins - (size_t)w, "%s?", i ? ", " : "");
    snprintf(ins + w, sizeof ins - (size_t)w, ")");
    kl__st *s = NULL, *d = NULL;
    int rc = kl__track_prep(from, sel, &s, e);
    if (!rc) rc = kl__track_prep(to, ins, &d, e);
    int r;
    while (!rc && (r = kl__step(s)) == KL__ROW) {
        for (int i = 0; i < n; i++) copy_value(s, d, i);
        int x = kl__step(d);
        kl__reset(d);
        if (x != KL__DONE) rc = kl__track_sqlerr(to, x, e, tables[k].table);
        (*rows)++;
    }
    if (!rc && r != KL__DONE) rc = kl__track_sqlerr(from, r, e, tables[k].table);
    kl__free(s);
    kl__free(d);
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
    int rc = kl__track_prep(from, "SELECT sha256 FROM artifacts UNION SELECT sha256 FROM model_files ORDER BY 1", &st, e);
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
        if (strcmp(got, want)) rc = kl_err_set(e, KL_ECHECKSUM, "object %s: sha256 mismatch (its content hashes to %.12s...)", src, got);
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
    int rc = count_rows(to, "SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM models) + (SELECT count(*) FROM experiments)",
                        &have, e);
    if (!rc && have)
        rc = kl_err_set(e, KL_EEXIST, "the destination store %s is not empty (%lld runs, models and experiments); copy into a new one",
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
