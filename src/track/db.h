/* Private to src/track: the statement layer. The store, the registry and
 * the studies are written once against it; each SQL engine (db_sqlite.c:
 * embedded SQLite, db_pg.c: PostgreSQL over libpq) implements it as a table
 * of functions (kl__dbops). SQL text is shared: it is written with SQLite's
 * placeholders (? and ?N), which the PostgreSQL engine renumbers to $N; the
 * few places where the dialects differ take their fragment from kl__dialect,
 * and the schema has one migration list per engine. */
#ifndef KEEL_TRACK_DB_H
#define KEEL_TRACK_DB_H

#include <keel/core.h>
#include <stdint.h>

typedef struct kl_track kl_track;

/* A prepared statement of either engine (its first member). */
typedef struct kl__st kl__st;

/* Result of kl__step: a row, done, or a negative KL_E* code (the engine's
 * message is kept in t->errmsg for kl__track_sqlerr). */
#define KL__ROW  1
#define KL__DONE 0

/* Column kinds (what kl__col_kind reports; the store copy binds by them). */
enum { KL__NULL, KL__INT, KL__REAL, KL__TEXT };

/* The SQL fragments where the dialects differ. */
typedef struct {
    const char *name;     /* "sqlite", "postgresql" */
    const char *num_open; /* text -> number, SQLite's lenient CAST (a non-number is 0) */
    const char *num_close;
    const char *like; /* case-insensitive ASCII LIKE without an escape character */
    const char *not_like;
    const char *like_tail; /* after the pattern */
    /* after rows were inserted with explicit ids (a store copy): SQL that
     * moves the id generators past them (NULL: nothing to do) */
    const char *after_copy;
} kl__dialect;

typedef struct kl__dbops {
    const char *name; /* "sqlite", "postgresql" */
    const kl__dialect *dialect;
    int (*prep)(kl_track *t, const char *sql, kl__st **out, kl_err *e);
    void (*reset)(kl__st *st); /* keeps the bindings (as sqlite3_reset) */
    void (*clear)(kl__st *st); /* unbinds (NULL) */
    void (*free)(kl__st *st);
    void (*bind_i64)(kl__st *st, int i, int64_t v);
    void (*bind_f64)(kl__st *st, int i, double v);       /* NaN binds NULL */
    void (*bind_text)(kl__st *st, int i, const char *s); /* copied; NULL binds NULL */
    void (*bind_null)(kl__st *st, int i);
    int (*step)(kl__st *st);
    int (*col_kind)(kl__st *st, int i);
    int64_t (*col_i64)(kl__st *st, int i);
    double (*col_f64)(kl__st *st, int i);
    const char *(*col_text)(kl__st *st, int i);
    int64_t (*changes)(kl__st *st); /* rows changed by the last step of st */
    int (*exec)(kl_track *t, const char *sql, kl_err *e);
    /* scope 0: every writer of the store waits; a run id: only writers of
     * that run (its params and metric history) */
    int (*begin)(kl_track *t, int64_t scope, kl_err *e);
    int (*commit)(kl_track *t, kl_err *e);
    void (*rollback)(kl_track *t);
    int (*migrate)(kl_track *t, kl_err *e);
    /* Inside a write transaction: inserts metric history rows with seq 0,
     * skipping a (key, step) already there; inserted[i] = 1 for each row
     * written. Rows marked inserted[i] = 2 on entry cannot collide (they
     * may be written without a conflict check) and end as 1. (SQLite: a
     * cached statement per row; PostgreSQL: thousands of rows per
     * statement.) */
    int (*metrics_put)(kl_track *t, int64_t run_id, const int64_t *key_id, const int64_t *step, const int64_t *ts,
                       const double *value, size_t n, uint8_t *inserted, kl_err *e);
    void (*close)(kl_track *t);
} kl__dbops;

struct kl__st {
    const kl__dbops *ops;
    kl_track *t;
};

extern const kl__dbops kl__db_sqlite, kl__db_pg;
extern const kl__dialect kl__dialect_sqlite;

int kl__metrics_put_rows(kl_track *t, int64_t run_id, const int64_t *key_id, const int64_t *step, const int64_t *ts,
                         const double *value, size_t n, uint8_t *inserted, kl_err *e);

/* Opens the engine of t (t->dir, t->where set); creates the schema when create. */
int kl__db_sqlite_open(kl_track *t, int create, kl_err *e);
int kl__db_pg_open(kl_track *t, int create, kl_err *e);
/* Tests: a fresh empty database name on server (postgresql://user@host:port);
 * its URL in url. */
int kl__pg_fresh_db(const char *server, const char *name, char *url, size_t n, kl_err *e);
/* 1 when s names a PostgreSQL server (postgresql:// or postgres://). */
int kl__is_pg_url(const char *s);
/* The URL with its password replaced by "***", for messages. */
void kl__url_redact(const char *url, char *out, size_t n);

static inline void kl__reset(kl__st *st) { st->ops->reset(st); }
static inline void kl__free(kl__st *st) {
    if (st) st->ops->free(st);
}
static inline void kl__bind_i64(kl__st *st, int i, int64_t v) { st->ops->bind_i64(st, i, v); }
static inline void kl__bind_f64(kl__st *st, int i, double v) { st->ops->bind_f64(st, i, v); }
static inline void kl__bind_text(kl__st *st, int i, const char *s) { st->ops->bind_text(st, i, s); }
static inline void kl__bind_null(kl__st *st, int i) { st->ops->bind_null(st, i); }
static inline int kl__step(kl__st *st) { return st->ops->step(st); }
static inline int kl__col_null(kl__st *st, int i) { return st->ops->col_kind(st, i) == KL__NULL; }
static inline int64_t kl__col_i64(kl__st *st, int i) { return st->ops->col_i64(st, i); }
static inline double kl__col_f64(kl__st *st, int i) { return st->ops->col_f64(st, i); }
static inline const char *kl__col_text(kl__st *st, int i) { return st->ops->col_text(st, i); }
static inline int64_t kl__changes(kl__st *st) { return st->ops->changes(st); }

#endif
