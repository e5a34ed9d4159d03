/* The SQLite engine of the statement layer (db.h): the embedded default,
 * one database file <dir>/keel.db in WAL mode with a busy timeout, its
 * schema migrations (PRAGMA user_version), and statements over
 * sqlite3_stmt. */
#include "track_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==================================================================
 * Schema and migrations (index i migrates version i to i+1)
 * ================================================================== */

static const char *const migrations[] = {
    /* 0 -> 1: the experiment store */
    "CREATE TABLE experiments(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_us INTEGER NOT NULL);"
    "CREATE TABLE runs(id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL REFERENCES experiments(id),"
    " name TEXT NOT NULL, status TEXT NOT NULL, start_us INTEGER NOT NULL, end_us INTEGER,"
    " parent_id INTEGER, pid INTEGER, pid_start INTEGER, host TEXT, heartbeat_us INTEGER);"
    "CREATE INDEX runs_status ON runs(status);"
    "CREATE INDEX runs_experiment ON runs(experiment_id);"
    "CREATE TABLE params(run_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    " PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
    "CREATE TRIGGER params_immutable BEFORE UPDATE ON params BEGIN SELECT RAISE(ABORT, 'params are immutable'); END;"
    "CREATE TABLE metric_keys(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
    /* one B-tree clustered by (run, key, step); seq orders repeated steps; NULL value = NaN */
    "CREATE TABLE metrics(run_id INTEGER NOT NULL, key_id INTEGER NOT NULL, step INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, ts_us INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, key_id, step, seq)) WITHOUT ROWID;"
    "CREATE TRIGGER metrics_append_only BEFORE UPDATE ON metrics BEGIN SELECT RAISE(ABORT, 'metric history is "
    "append-only'); END;"
    "CREATE TABLE metric_latest(run_id INTEGER NOT NULL, key_id INTEGER NOT NULL, step INTEGER NOT NULL,"
    " ts_us INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, key_id)) WITHOUT ROWID;"
    "CREATE TABLE tags(run_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    " PRIMARY KEY(run_id, key)) WITHOUT ROWID;"
    "CREATE TABLE artifacts(run_id INTEGER NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,"
    " sha256 TEXT NOT NULL, created_us INTEGER NOT NULL, PRIMARY KEY(run_id, path)) WITHOUT ROWID;"
    "CREATE TABLE lineage(run_id INTEGER PRIMARY KEY, dataset_version TEXT, feature_hash TEXT,"
    " code_version TEXT, spec_hash TEXT);",
    /* 1 -> 2: the model registry */
    "CREATE TABLE models(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_us INTEGER NOT NULL);"
    "CREATE TABLE model_versions(model_id INTEGER NOT NULL, version INTEGER NOT NULL, created_us INTEGER NOT NULL,"
    " run_id INTEGER, signature TEXT, source TEXT, PRIMARY KEY(model_id, version)) WITHOUT ROWID;"
    "CREATE TABLE model_files(model_id INTEGER NOT NULL, version INTEGER NOT NULL, path TEXT NOT NULL,"
    " size INTEGER NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY(model_id, version, path)) WITHOUT ROWID;"
    "CREATE TRIGGER model_versions_immutable BEFORE UPDATE ON model_versions BEGIN SELECT RAISE(ABORT, 'model versions "
    "are immutable'); END;"
    "CREATE TRIGGER model_versions_nodelete BEFORE DELETE ON model_versions BEGIN SELECT RAISE(ABORT, 'model versions "
    "are immutable'); END;"
    "CREATE TRIGGER model_files_immutable BEFORE UPDATE ON model_files BEGIN SELECT RAISE(ABORT, 'model files are "
    "immutable'); END;"
    "CREATE TRIGGER model_files_nodelete BEFORE DELETE ON model_files BEGIN SELECT RAISE(ABORT, 'model files are "
    "immutable'); END;"
    "CREATE TABLE model_tags(model_id INTEGER NOT NULL, version INTEGER NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(model_id, version, key)) WITHOUT ROWID;"
    "CREATE TABLE model_aliases(model_id INTEGER NOT NULL, alias TEXT NOT NULL, version INTEGER NOT NULL,"
    " set_us INTEGER NOT NULL, PRIMARY KEY(model_id, alias)) WITHOUT ROWID;"
    "CREATE TABLE alias_history(id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL, alias TEXT NOT NULL,"
    " version INTEGER, set_us INTEGER NOT NULL);"
    "CREATE INDEX alias_history_lookup ON alias_history(model_id, alias, set_us);",
    /* 2 -> 3: filters drive from the matching rows (key, value) instead of probing every run */
    "CREATE INDEX metric_latest_key_value ON metric_latest(key_id, value);"
    "CREATE INDEX params_key_value ON params(key, value);"
    "CREATE INDEX tags_key_value ON tags(key, value);"
    "CREATE INDEX runs_parent ON runs(parent_id);"
    "CREATE INDEX runs_start ON runs(start_us);",
    /* 3 -> 4: point counts kept with the latest values (no history scans to count) */
    "ALTER TABLE metric_latest ADD COLUMN n INTEGER NOT NULL DEFAULT 0;"
    "UPDATE metric_latest SET n = (SELECT count(*) FROM metrics m WHERE m.run_id = metric_latest.run_id"
    " AND m.key_id = metric_latest.key_id);",
};

/* ==================================================================
 * Errors, transactions
 * ================================================================== */

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int s_code(int rc) {
    int prim = rc & 0xff;
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED) return KL_EBUSY;
    if (prim == SQLITE_CONSTRAINT) return KL_EEXIST;
    if (prim == SQLITE_NOMEM) return KL_ENOMEM;
    if (prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB) return KL_EPARSE;
    if (prim == SQLITE_CANTOPEN || prim == SQLITE_IOERR || prim == SQLITE_FULL || prim == SQLITE_READONLY) return -EIO;
    return KL_EINTERNAL;
}

/* Records the connection's last error in t->errmsg; returns its KL_E* code. */
static int s_note(kl_track *t, int rc) {
    snprintf(t->errmsg, sizeof t->errmsg, "%s (sqlite %d)", t->db ? sqlite3_errmsg(t->db) : sqlite3_errstr(rc), rc);
    return s_code(rc);
}

static int s_err(kl_track *t, int rc, kl_err *e, const char *what) {
    int code = s_note(t, rc);
    return kl_err_set(e, code, "%s: %s", what, t->errmsg);
}

static int s_exec(kl_track *t, const char *sql, kl_err *e) {
    char *msg = NULL;
    int rc = sqlite3_exec(t->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        int c = s_code(rc);
        snprintf(t->errmsg, sizeof t->errmsg, "%s (sqlite %d)", msg ? msg : sqlite3_errstr(rc), rc);
        kl_err_set(e, c, "%s", t->errmsg);
        sqlite3_free(msg);
        return c;
    }
    return KL_OK;
}

static int s_begin(kl_track *t, int64_t scope, kl_err *e) {
    (void)scope; /* one writer at a time, whatever it writes */
    /* The busy timeout already waits; this loop covers the cases where
     * SQLite returns BUSY at once (WAL recovery, deadlock avoidance). */
    for (int attempt = 0;; attempt++) {
        int rc = sqlite3_exec(t->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK) return KL_OK;
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return s_err(t, rc, e, "begin");
        if (attempt >= 200) return s_err(t, rc, e, "begin (database stayed locked)");
        sleep_ms(5 + attempt % 50);
    }
}

static int s_commit(kl_track *t, kl_err *e) {
    for (int attempt = 0;; attempt++) {
        int rc = sqlite3_exec(t->db, "COMMIT", NULL, NULL, NULL);
        if (rc == SQLITE_OK) return KL_OK;
        if ((rc & 0xff) != SQLITE_BUSY || attempt >= 200) return s_err(t, rc, e, "commit");
        sleep_ms(5 + attempt % 50);
    }
}

static void s_rollback(kl_track *t) {
    if (!sqlite3_get_autocommit(t->db)) sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ==================================================================
 * Statements
 * ================================================================== */

typedef struct {
    kl__st base;
    sqlite3_stmt *s;
    int64_t changes;
} sst;

#define S(b) (((sst *)(b))->s)

static int s_prep_raw(kl_track *t, const char *sql, sqlite3_stmt **st, kl_err *e) {
    int rc = sqlite3_prepare_v2(t->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return s_err(t, rc, e, "preparing a query");
    }
    return KL_OK;
}

static int s_prep(kl_track *t, const char *sql, kl__st **out, kl_err *e) {
    *out = NULL;
    sst *q = calloc(1, sizeof *q);
    if (!q) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = s_prep_raw(t, sql, &q->s, e);
    if (rc) {
        free(q);
        return rc;
    }
    q->base.ops = &kl__db_sqlite;
    q->base.t = t;
    *out = &q->base;
    return KL_OK;
}

static void s_reset(kl__st *b) { sqlite3_reset(S(b)); }
static void s_clear(kl__st *b) { sqlite3_clear_bindings(S(b)); }
static void s_free(kl__st *b) {
    sqlite3_finalize(S(b));
    free(b);
}
static void s_bind_i64(kl__st *b, int i, int64_t v) { sqlite3_bind_int64(S(b), i, v); }
static void s_bind_f64(kl__st *b, int i, double v) {
    if (isnan(v)) sqlite3_bind_null(S(b), i);
    else sqlite3_bind_double(S(b), i, v);
}
static void s_bind_text(kl__st *b, int i, const char *s) {
    if (s) sqlite3_bind_text(S(b), i, s, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(S(b), i);
}
static void s_bind_null(kl__st *b, int i) { sqlite3_bind_null(S(b), i); }

static int s_step(kl__st *b) {
    int rc = sqlite3_step(S(b));
    if (rc == SQLITE_ROW) return KL__ROW;
    if (rc == SQLITE_DONE) {
        ((sst *)b)->changes = sqlite3_changes(b->t->db);
        return KL__DONE;
    }
    return s_note(b->t, rc);
}

static int s_col_kind(kl__st *b, int i) {
    switch (sqlite3_column_type(S(b), i)) {
    case SQLITE_NULL: return KL__NULL;
    case SQLITE_INTEGER: return KL__INT;
    case SQLITE_FLOAT: return KL__REAL;
    default: return KL__TEXT;
    }
}
static int64_t s_col_i64(kl__st *b, int i) { return sqlite3_column_int64(S(b), i); }
static double s_col_f64(kl__st *b, int i) {
    return sqlite3_column_type(S(b), i) == SQLITE_NULL ? NAN : sqlite3_column_double(S(b), i);
}
static const char *s_col_text(kl__st *b, int i) { return (const char *)sqlite3_column_text(S(b), i); }
static int64_t s_changes(kl__st *b) { return ((sst *)b)->changes; }

/* ==================================================================
 * Open
 * ================================================================== */

static int s_migrate(kl_track *t, kl_err *e) {
    int rc;
    int target = kl__track_target_version;
    if (target > (int)KL_ARRAY_LEN(migrations)) target = (int)KL_ARRAY_LEN(migrations);
    if ((rc = s_begin(t, 0, e))) return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = s_prep_raw(t, "PRAGMA user_version", &st, e))) goto fail;
    int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    if (v > (int)KL_ARRAY_LEN(migrations)) {
        rc = kl_err_set(e, KL_EUNSUPPORTED, "%s/keel.db: schema version %d is newer than this keel supports (%d)",
                        t->dir, v, (int)KL_ARRAY_LEN(migrations));
        goto fail;
    }
    if (v >= 1) {
        /* stores written by development builds of schema 1-2 (before the
         * history was clustered): rebuild the metrics table in place */
        if ((rc = s_prep_raw(t, "SELECT count(*) FROM pragma_table_info('metrics') WHERE name='seq'", &st, e)))
            goto fail;
        int has_seq = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
        sqlite3_finalize(st);
        if (!has_seq &&
            (rc = s_exec(t,
                         "ALTER TABLE metrics RENAME TO metrics_rowid;"
                         "DROP TRIGGER IF EXISTS metrics_append_only;"
                         "CREATE TABLE metrics(run_id INTEGER NOT NULL, key_id INTEGER NOT NULL, step INTEGER NOT NULL,"
                         " seq INTEGER NOT NULL, ts_us INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, key_id, step, "
                         "seq)) WITHOUT ROWID;"
                         "INSERT INTO metrics SELECT run_id, key_id, step,"
                         " row_number() OVER (PARTITION BY run_id, key_id, step ORDER BY rowid) - 1, ts_us, value FROM "
                         "metrics_rowid;"
                         "DROP TABLE metrics_rowid;"
                         "CREATE TRIGGER metrics_append_only BEFORE UPDATE ON metrics BEGIN SELECT RAISE(ABORT, "
                         "'metric history is append-only'); END;",
                         e))) {
            kl_err_prefix(e, "rebuilding the metric history table");
            goto fail;
        }
    }
    for (; v < target; v++) {
        if ((rc = s_exec(t, migrations[v], e))) {
            kl_err_prefix(e, "migrating the store from schema version %d to %d", v, v + 1);
            goto fail;
        }
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d", v + 1);
        if ((rc = s_exec(t, sql, e))) goto fail;
    }
    return s_commit(t, e);
fail:
    s_rollback(t);
    return rc;
}

int kl__db_sqlite_open(kl_track *t, int create, kl_err *e) {
    int rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/keel.db", t->dir);
    int s = sqlite3_open_v2(path, &t->db,
                            SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX, NULL);
    if (s != SQLITE_OK) {
        rc = s_err(t, s, e, path);
        return rc;
    }
    sqlite3_busy_timeout(t->db, 30000);
    /* WAL: readers never block the writer; switching needs a lock, retry. */
    for (int attempt = 0;; attempt++) {
        char *msg = NULL;
        s = sqlite3_exec(t->db, "PRAGMA journal_mode=WAL", NULL, NULL, &msg);
        sqlite3_free(msg);
        if (s == SQLITE_OK) break;
        if ((s & 0xff) != SQLITE_BUSY || attempt > 200) {
            rc = s_err(t, s, e, path);
            return rc;
        }
        sleep_ms(10);
    }
    /* NORMAL in WAL mode: a committed batch survives a crash of the process. */
    if ((rc = s_exec(t,
                     "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;"
                     " PRAGMA cache_size=-65536;",
                     e)))
        return rc;
    if ((rc = s_migrate(t, e))) return rc;
    return KL_OK;
}

static void s_close(kl_track *t) {
    if (t->db) sqlite3_close_v2(t->db);
    t->db = NULL;
}

const kl__dialect kl__dialect_sqlite = {
    .name = "sqlite",
    .num_open = "CAST(",
    .num_close = " AS REAL)",
    .like = "LIKE",
    .not_like = "NOT LIKE",
    .like_tail = "",
};

const kl__dbops kl__db_sqlite = {
    .name = "sqlite",
    .dialect = &kl__dialect_sqlite,
    .prep = s_prep,
    .reset = s_reset,
    .clear = s_clear,
    .free = s_free,
    .bind_i64 = s_bind_i64,
    .bind_f64 = s_bind_f64,
    .bind_text = s_bind_text,
    .bind_null = s_bind_null,
    .step = s_step,
    .col_kind = s_col_kind,
    .col_i64 = s_col_i64,
    .col_f64 = s_col_f64,
    .col_text = s_col_text,
    .changes = s_changes,
    .exec = s_exec,
    .begin = s_begin,
    .commit = s_commit,
    .rollback = s_rollback,
    .migrate = s_migrate,
    .metrics_put = kl__metrics_put_rows,
    .close = s_close,
};
