/* Private to src/track: the store handle, the statement layer shared by the
 * store, the registry and the filter compiler over its two SQL engines
 * (SQLite, embedded; PostgreSQL, a server by URL), and the object store. */
#ifndef KEEL_TRACK_INT_H
#define KEEL_TRACK_INT_H

#include <keel/track.h>
#include <pthread.h>
#include <sqlite3.h>

#include "track/db.h"

/* Metric-key cache entry (key -> id), plus per-batch scratch. */
typedef struct {
    char *key;
    int64_t id;
    uint64_t gen; /* batch generation that last touched it */
    size_t idx;   /* index of the batch's latest point for this key */
    int64_t cnt;  /* points of this key in the batch */
    int64_t above; /* batch scratch: rows above this step cannot collide */
    int fresh;
} kl__keyent;

struct kl_track {
    const kl__dbops *ops; /* the engine: kl__db_sqlite or kl__db_pg */
    sqlite3 *db;          /* SQLite engine */
    void *pg;             /* PostgreSQL engine: its connection state (db_pg.c) */
    char *dir;            /* the folder, or the URL of a server store */
    char *where;          /* "DIR (how it was chosen)" for messages (a URL without its password) */
    char *objects;        /* the content-addressed object folder (NULL: none given for a server store) */
    char host[256];
    pthread_mutex_t mu;
    char errmsg[640]; /* the engine's last error: "message (sqlite 19)" */
    int stale_marked;
    /* cached statements */
    kl__st *st_metric_ins, *st_key_ins, *st_key_get, *st_heartbeat;
    struct {
        const char *sql; /* a static string: cached by address */
        kl__st *st;
    } cache[32];
    char *latest_one; /* the one-key latest upsert's SQL: cached by this address */
    kl__keyent *keys;
    size_t nkeys, capkeys;
    uint64_t gen;
};

struct kl_track_run {
    kl_track *t;
    int64_t id;
    int64_t last_hb_us;
    int lineage_set;
};

/* Schema version a new store is migrated to (tests lower it to build an
 * old store, then reopen to check the forward migration). */
extern int kl__track_target_version;

/* The engine's last error as a keel error: "what: message (engine code)". */
int kl__track_sqlerr(kl_track *t, int rc, kl_err *e, const char *what);
/* KL_ENOTFOUND with the message and "in the experiment store DIR (how it
 * was chosen)" after it: every "not found" names where it looked. */
int kl__track_notfound(const kl_track *t, kl_err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int kl__track_exec(kl_track *t, const char *sql, kl_err *e);
int kl__track_prep(kl_track *t, const char *sql, kl__st **st, kl_err *e);
/* A prepared statement cached on the handle for a static SQL string; reset
 * and unbound. Do not free it. */
int kl__track_cached(kl_track *t, const char *sql, kl__st **st, kl_err *e);
/* A write transaction; writers are serialized on both engines (SQLite:
 * BEGIN IMMEDIATE, retried while the database is busy; PostgreSQL: BEGIN and
 * a transaction advisory lock), so read-then-write steps inside one (next
 * version number, repeated-step sequence, a claim) are atomic. */
int kl__track_begin(kl_track *t, kl_err *e);
/* The same for the writers of one run (params, metrics): on PostgreSQL
 * other runs' writers do not wait (SQLite: kl__track_begin). */
int kl__track_begin_run(kl_track *t, int64_t run_id, kl_err *e);
int kl__track_commit(kl_track *t, kl_err *e);
void kl__track_rollback(kl_track *t);
void kl__track_lock(kl_track *t);
void kl__track_unlock(kl_track *t);

/* Inside a write transaction: inserts a running run of this process
 * (experiment created when new; run_name NULL or "" = "run-<id>"). */
int kl__run_insert(kl_track *t, const char *experiment, const char *run_name, int64_t parent_id, int64_t *id,
                   kl_err *e);
/* Sets (value NULL: deletes) a tag of a run, in the caller's transaction or alone. */
int kl__tag_put(kl_track *t, int64_t run_id, const char *key, const char *value, kl_err *e);

/* Object store: copies a file in (sha256 computed while copying); an
 * existing object that no longer matches its name is replaced. */
int kl__track_put_object(kl_track *t, const char *path, char hex[65], int64_t *size, kl_err *e);
void kl__track_object_path(const kl_track *t, const char *hex, char *buf, size_t n);
/* KL_EUSAGE naming the store when it has no object folder (a server store
 * opened without --artifacts). */
int kl__track_need_objects(const kl_track *t, kl_err *e);

/* A bound value of a compiled filter. */
typedef struct {
    int is_num;
    double num;
    char *str;
} kl__bind;
typedef struct {
    kl__bind *v;
    size_t n, cap;
} kl__binds;
void kl__binds_free(kl__binds *b);
void kl__binds_apply(const kl__binds *b, kl__st *st, int first);
/* Appends the SQL of filter (over runs r, experiments x) in dialect d to sql. */
int kl__filter_sql(const kl__dialect *d, const char *filter, kl_buf *sql, kl__binds *b, kl_err *e);
/* Appends the ORDER BY expression of a sort key ("-metrics.acc", "name desc"). */
int kl__sort_sql(const kl__dialect *d, const char *key, kl_buf *sql, kl__binds *b, kl_err *e);

void kl__json_num(void *obj, const char *name, double v); /* non-finite as strings */

#endif
