/* The experiment store: opening (WAL, busy timeout, forward schema
 * migrations, stale-run detection), runs and their params, metrics
 * (history + latest value, batched), tags, artifacts and lineage, and the
 * read side used by the commands and the UI. */
#include "track_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int kl__track_target_version = KL_TRACK_SCHEMA_VERSION;

/* ==================================================================
 * Schema and migrations (index i migrates version i to i+1)
 * ================================================================== */

/* ==================================================================
 * SQLite helpers
 * ================================================================== */

/* ==================================================================
 * The statement layer's entry points (the engine is t->ops)
 * ================================================================== */

int kl__track_sqlerr(kl_track *t, int rc, kl_err *e, const char *what) {
    return kl_err_set(e, rc < 0 ? rc : KL_EINTERNAL, "%s: %s", what,
                      t->errmsg[0] ? t->errmsg : "unknown database error");
}

int kl__track_exec(kl_track *t, const char *sql, kl_err *e) { return t->ops->exec(t, sql, e); }

int kl__track_prep(kl_track *t, const char *sql, kl__st **st, kl_err *e) { return t->ops->prep(t, sql, st, e); }

int kl__track_cached(kl_track *t, const char *sql, kl__st **st, kl_err *e) {
    size_t i;
    for (i = 0; i < KL_ARRAY_LEN(t->cache) && t->cache[i].sql; i++)
        if (t->cache[i].sql == sql) {
            *st = t->cache[i].st;
            t->ops->reset(*st);
            t->ops->clear(*st);
            return KL_OK;
        }
    int rc = kl__track_prep(t, sql, st, e);
    if (rc || i == KL_ARRAY_LEN(t->cache)) return rc ? rc : kl_err_set(e, KL_EINTERNAL, "statement cache full");
    t->cache[i].sql = sql;
    t->cache[i].st = *st;
    return KL_OK;
}

int kl__track_begin(kl_track *t, kl_err *e) { return t->ops->begin(t, 0, e); }

int kl__track_begin_run(kl_track *t, int64_t run_id, kl_err *e) { return t->ops->begin(t, run_id, e); }

int kl__track_commit(kl_track *t, kl_err *e) {
    int rc = t->ops->commit(t, e);
    if (rc) kl__track_rollback(t);
    return rc;
}

static void keycache_clear(kl_track *t);

void kl__track_rollback(kl_track *t) {
    t->ops->rollback(t);
    keycache_clear(t); /* ids created in the rolled-back transaction are gone */
}

void kl__track_lock(kl_track *t) { pthread_mutex_lock(&t->mu); }
void kl__track_unlock(kl_track *t) { pthread_mutex_unlock(&t->mu); }

void kl__json_num(void *obj, const char *name, double v) {
    if (isnan(v)) cJSON_AddStringToObject(obj, name, "NaN");
    else if (isinf(v)) cJSON_AddStringToObject(obj, name, v > 0 ? "Infinity" : "-Infinity");
    else cJSON_AddNumberToObject(obj, name, v);
}


/* ==================================================================
 * Status names
 * ================================================================== */

static const char *const status_names[] = {"running", "finished", "failed", "killed"};

const char *kl_run_status_name(kl_run_status s) {
    return (unsigned)s < KL_ARRAY_LEN(status_names) ? status_names[s] : "unknown";
}

int kl_run_status_parse(const char *s, kl_run_status *out) {
    for (size_t i = 0; i < KL_ARRAY_LEN(status_names); i++)
        if (s && !strcmp(s, status_names[i])) {
            *out = (kl_run_status)i;
            return KL_OK;
        }
    return KL_EINVAL;
}

/* ==================================================================
 * Processes: liveness with pid-reuse protection
 * ================================================================== */

/* Start time of a process (clock ticks since boot), 0 when it does not exist. */
static int64_t proc_start_time(int64_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    /* fields after the name: state(3) ... starttime(22) */
    int field = 2;
    while (*p && field < 22) {
        if (*p == ' ') field++;
        p++;
    }
    /* a zombie is dead for our purpose */
    const char *st = strrchr(buf, ')');
    if (st && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X')) return 0;
    return strtoll(p, NULL, 10);
}

static int proc_alive(int64_t pid, int64_t start) {
    if (pid <= 0) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    int64_t s = proc_start_time(pid);
    if (s == 0) return access("/proc/self/stat", R_OK) == 0 ? 0 : 1; /* no /proc: trust kill() */
    return start == 0 || s == start;
}

/* Marks running runs whose process is gone as killed. */
static int mark_stale(kl_track *t, kl_err *e) {
    kl__st *st = NULL, *up = NULL;
    int rc = KL_OK;
    int64_t now = kl_time_now_us();
    int64_t dead[256];
    int64_t dead_hb[256];
    size_t nd = 0;
    if ((rc = kl__track_prep(t, "SELECT id, pid, pid_start, host, heartbeat_us FROM runs WHERE status='running'", &st, e)))
        goto fail;
    while (kl__step(st) == KL__ROW && nd < KL_ARRAY_LEN(dead)) {
        int64_t id = kl__col_i64(st, 0), pid = kl__col_i64(st, 1);
        int64_t pstart = kl__col_i64(st, 2), hb = kl__col_i64(st, 4);
        const char *host = kl__col_text(st, 3);
        int alive;
        if (host && !strcmp(host, t->host)) alive = proc_alive(pid, pstart);
        else alive = now - hb < (int64_t)KL_TRACK_STALE_S * 1000000;
        if (!alive) {
            dead[nd] = id;
            dead_hb[nd++] = hb;
        }
    }
    kl__free(st);
    st = NULL;
    if (!nd) return KL_OK;
    if ((rc = kl__track_begin(t, e))) goto fail;
    if ((rc = kl__track_prep(t, "UPDATE runs SET status='killed', end_us=? WHERE id=? AND status='running'", &up, e))) {
        kl__track_rollback(t);
        goto fail;
    }
    for (size_t i = 0; i < nd; i++) {
        kl__bind_i64(up, 1, dead_hb[i]);
        kl__bind_i64(up, 2, dead[i]);
        int s = kl__step(up);
        kl__reset(up);
        if (s != KL__DONE) {
            rc = kl__track_sqlerr(t, s, e, "marking stale runs");
            kl__track_rollback(t);
            goto fail;
        }
        t->stale_marked += (int)kl__changes(up);
    }
    rc = kl__track_commit(t, e);
    if (!rc && t->stale_marked) kl_log(KL_LOG_INFO, "track", "marked %d run(s) of dead processes killed", t->stale_marked);
fail:
    kl__free(st);
    kl__free(up);
    return rc;
}

/* ==================================================================
 * Open / close
 * ================================================================== */

int kl_track_open(const char *dir, kl_track **out, kl_err *e) {
    *out = NULL;
    kl_store_loc loc;
    int rc = kl_track_store_resolve(dir, NULL, &loc, e);
    return rc ? rc : kl_track_open_loc(&loc, 1, out, e);
}

/* The object folder of a store: <dir>/objects for SQLite; for a server
 * store the folder given by --artifacts / KEEL_ARTIFACTS (none: artifacts
 * and registrations are refused with a message saying so). */
static int objects_dir(kl_track *t, const kl_store_loc *loc, int pg, kl_err *e) {
    char path[4096];
    if (pg && !loc->artifacts[0]) return KL_OK;
    if (pg) snprintf(path, sizeof path, "%s", loc->artifacts);
    else snprintf(path, sizeof path, "%s/objects", loc->dir);
    t->objects = strdup(path);
    if (!t->objects) return kl_err_set(e, KL_ENOMEM, "out of memory");
    return pg ? KL_OK : kl_mkdir_p(path, e);
}

int kl_track_open_loc(const kl_store_loc *loc, int create, kl_track **out, kl_err *e) {
    *out = NULL;
    int rc;
    const char *dir = loc->dir;
    int pg = kl__is_pg_url(dir);
    char path[4096], shown[4096];
    snprintf(path, sizeof path, "%s/keel.db", dir);
    kl__url_redact(dir, shown, sizeof shown);
    if (!pg && !create && !kl_path_exists(path))
        return kl_err_set(e, KL_ENOTFOUND, "no experiment store at %s (%s): nothing has been recorded there yet", dir,
                          loc->how);
    kl_track *t = calloc(1, sizeof *t);
    if (!t) return kl_err_set(e, KL_ENOMEM, "out of memory");
    pthread_mutex_init(&t->mu, NULL);
    t->dir = strdup(dir);
    size_t wl = strlen(shown) + strlen(loc->how) + 4;
    t->where = malloc(wl);
    if (!t->dir || !t->where) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    snprintf(t->where, wl, "%s (%s)", shown, loc->how);
    if (gethostname(t->host, sizeof t->host - 1) != 0) strcpy(t->host, "localhost");
    if ((rc = objects_dir(t, loc, pg, e))) goto fail;
    t->ops = pg ? &kl__db_pg : &kl__db_sqlite;
    if ((rc = pg ? kl__db_pg_open(t, create, e) : kl__db_sqlite_open(t, create, e))) goto fail;
    if (kl__track_target_version == KL_TRACK_SCHEMA_VERSION && (rc = mark_stale(t, e))) goto fail;
    *out = t;
    return KL_OK;
fail:
    kl_err_prefix(e, "tracking store %s (%s)", shown, loc->how);
    kl_track_close(t);
    return rc;
}

int kl__track_notfound(const kl_track *t, kl_err *e, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kl_err_set(e, KL_ENOTFOUND, "%s in the experiment store %s", msg, t->where);
}

static void keycache_clear(kl_track *t) {
    for (size_t i = 0; i < t->capkeys; i++) free(t->keys[i].key);
    free(t->keys);
    t->keys = NULL;
    t->nkeys = t->capkeys = 0;
}

void kl_track_close(kl_track *t) {
    if (!t) return;
    kl__free(t->st_metric_ins);
    kl__free(t->st_key_ins);
    kl__free(t->st_key_get);
    kl__free(t->st_heartbeat);
    for (size_t i = 0; i < KL_ARRAY_LEN(t->cache); i++) kl__free(t->cache[i].st);
    if (t->ops) t->ops->close(t);
    keycache_clear(t);
    pthread_mutex_destroy(&t->mu);
    free(t->dir);
    free(t->where);
    free(t->objects);
    free(t->latest_one);
    free(t);
}

const char *kl_track_dir(const kl_track *t) { return t->dir; }
const char *kl_track_where(const kl_track *t) { return t->where; }
int kl_track_stale_marked(const kl_track *t) { return t->stale_marked; }

/* ==================================================================
 * Metric keys: name -> id, cached in an open-addressing table
 * ================================================================== */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    return h;
}

static kl__keyent *keycache_find(kl_track *t, const char *key) {
    if (!t->capkeys) return NULL;
    size_t mask = t->capkeys - 1;
    for (size_t i = hash_str(key) & mask;; i = (i + 1) & mask) {
        if (!t->keys[i].key) return NULL;
        if (!strcmp(t->keys[i].key, key)) return &t->keys[i];
    }
}

static kl__keyent *keycache_add(kl_track *t, const char *key, int64_t id) {
    if ((t->nkeys + 1) * 2 > t->capkeys) {
        size_t ncap = t->capkeys ? t->capkeys * 2 : 64;
        kl__keyent *nk = calloc(ncap, sizeof *nk);
        if (!nk) return NULL;
        for (size_t i = 0; i < t->capkeys; i++) {
            if (!t->keys[i].key) continue;
            size_t j = hash_str(t->keys[i].key) & (ncap - 1);
            while (nk[j].key) j = (j + 1) & (ncap - 1);
            nk[j] = t->keys[i];
        }
        free(t->keys);
        t->keys = nk;
        t->capkeys = ncap;
    }
    size_t mask = t->capkeys - 1, i = hash_str(key) & mask;
    while (t->keys[i].key) i = (i + 1) & mask;
    t->keys[i].key = strdup(key);
    if (!t->keys[i].key) return NULL;
    t->keys[i].id = id;
    t->keys[i].gen = 0;
    t->nkeys++;
    return &t->keys[i];
}

/* Inside a write transaction: the entry of a metric key, created when new. */
static int metric_key(kl_track *t, const char *key, kl__keyent **out, kl_err *e) {
    kl__keyent *k = keycache_find(t, key);
    if (k) {
        *out = k;
        return KL_OK;
    }
    int rc;
    if (!t->st_key_ins &&
        (rc = kl__track_prep(t, "INSERT INTO metric_keys(name) VALUES(?) ON CONFLICT DO NOTHING", &t->st_key_ins, e)))
        return rc;
    if (!t->st_key_get && (rc = kl__track_prep(t, "SELECT id FROM metric_keys WHERE name=?", &t->st_key_get, e))) return rc;
    kl__bind_text(t->st_key_ins, 1, key);
    int s = kl__step(t->st_key_ins);
    kl__reset(t->st_key_ins);
    if (s != KL__DONE) return kl__track_sqlerr(t, s, e, "adding a metric key");
    kl__bind_text(t->st_key_get, 1, key);
    s = kl__step(t->st_key_get);
    int64_t id = s == KL__ROW ? kl__col_i64(t->st_key_get, 0) : -1;
    kl__reset(t->st_key_get);
    if (id < 0) return kl__track_sqlerr(t, s, e, "looking up a metric key");
    k = keycache_add(t, key, id);
    if (!k) return kl_err_set(e, KL_ENOMEM, "out of memory");
    *out = k;
    return KL_OK;
}

/* ==================================================================
 * Runs
 * ================================================================== */

static int experiment_id(kl_track *t, const char *name, int64_t *id, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t, "INSERT INTO experiments(name, created_us) VALUES(?, ?) ON CONFLICT(name) DO NOTHING", &st, e);
    if (rc) return rc;
    kl__bind_text(st, 1, name);
    kl__bind_i64(st, 2, kl_time_now_us());
    int s = kl__step(st);
    kl__free(st);
    if (s != KL__DONE) return kl__track_sqlerr(t, s, e, "creating an experiment");
    if ((rc = kl__track_prep(t, "SELECT id FROM experiments WHERE name=?", &st, e))) return rc;
    kl__bind_text(st, 1, name);
    s = kl__step(st);
    if (s == KL__ROW) *id = kl__col_i64(st, 0);
    kl__free(st);
    return s == KL__ROW ? KL_OK : kl__track_sqlerr(t, s, e, "finding an experiment");
}

int kl__run_insert(kl_track *t, const char *experiment, const char *run_name, int64_t parent_id, int64_t *id,
                   kl_err *e) {
    kl__st *st = NULL;
    int64_t exp_id = 0;
    int rc = experiment_id(t, experiment && *experiment ? experiment : "default", &exp_id, e);
    if (rc) return rc;
    if (parent_id > 0) {
        if ((rc = kl__track_prep(t, "SELECT 1 FROM runs WHERE id=?", &st, e))) return rc;
        kl__bind_i64(st, 1, parent_id);
        int found = kl__step(st) == KL__ROW;
        kl__free(st);
        st = NULL;
        if (!found) return kl__track_notfound(t, e, "parent run %lld not found", (long long)parent_id);
    }
    if ((rc = kl__track_prep(
             t,
             "INSERT INTO runs(experiment_id, name, status, start_us, parent_id, pid, pid_start, host, heartbeat_us)"
             " VALUES(?, ?, 'running', ?, ?, ?, ?, ?, ?) RETURNING id",
             &st, e)))
        return rc;
    int64_t now = kl_time_now_us();
    kl__bind_i64(st, 1, exp_id);
    kl__bind_text(st, 2, run_name ? run_name : "");
    kl__bind_i64(st, 3, now);
    if (parent_id > 0) kl__bind_i64(st, 4, parent_id);
    else kl__bind_null(st, 4);
    kl__bind_i64(st, 5, (int64_t)getpid());
    kl__bind_i64(st, 6, proc_start_time(getpid()));
    kl__bind_text(st, 7, t->host);
    kl__bind_i64(st, 8, now);
    int s = kl__step(st);
    if (s == KL__ROW) *id = kl__col_i64(st, 0);
    kl__free(st);
    if (s != KL__ROW) return kl__track_sqlerr(t, s, e, "starting a run");
    if (!run_name || !*run_name) {
        char sql[128];
        snprintf(sql, sizeof sql, "UPDATE runs SET name='run-%lld' WHERE id=%lld", (long long)*id, (long long)*id);
        if ((rc = kl__track_exec(t, sql, e))) return rc;
    }
    return KL_OK;
}

int kl_track_run_start(kl_track *t, const char *experiment, const char *run_name, int64_t parent_id,
                       kl_track_run **out, kl_err *e) {
    *out = NULL;
    kl_track_run *r = calloc(1, sizeof *r);
    if (!r) return kl_err_set(e, KL_ENOMEM, "out of memory");
    r->t = t;
    int rc;
    kl__track_lock(t);
    if ((rc = kl__track_begin(t, e))) goto fail_unlocked_tx;
    if ((rc = kl__run_insert(t, experiment, run_name, parent_id, &r->id, e))) goto fail;
    r->last_hb_us = kl_time_now_us();
    if ((rc = kl__track_commit(t, e))) goto fail_unlocked_tx;
    kl__track_unlock(t);
    *out = r;
    return KL_OK;
fail:
    kl__track_rollback(t);
fail_unlocked_tx:
    kl__track_unlock(t);
    free(r);
    return rc;
}

int kl_track_run_attach(kl_track *t, int64_t run_id, kl_track_run **out, kl_err *e) {
    *out = NULL;
    kl__st *st = NULL;
    kl__track_lock(t);
    int rc = kl__track_prep(t, "SELECT status FROM runs WHERE id=?", &st, e);
    int found = 0;
    if (!rc) {
        kl__bind_i64(st, 1, run_id);
        found = kl__step(st) == KL__ROW;
        kl__free(st);
    }
    kl__track_unlock(t);
    if (rc) return rc;
    if (!found) return kl__track_notfound(t, e, "run %lld not found", (long long)run_id);
    kl_track_run *r = calloc(1, sizeof *r);
    if (!r) return kl_err_set(e, KL_ENOMEM, "out of memory");
    r->t = t;
    r->id = run_id;
    *out = r;
    return KL_OK;
}

int64_t kl_track_run_id(const kl_track_run *r) { return r->id; }

void kl_track_run_free(kl_track_run *r) { free(r); }

int kl_track_run_set_status(kl_track *t, int64_t run_id, kl_run_status status, kl_err *e) {
    kl__st *st = NULL;
    kl__track_lock(t);
    int rc = kl__track_prep(t, "UPDATE runs SET status=?, end_us=? WHERE id=?", &st, e);
    if (!rc) {
        kl__bind_text(st, 1, kl_run_status_name(status));
        if (status == KL_RUN_RUNNING) kl__bind_null(st, 2);
        else kl__bind_i64(st, 2, kl_time_now_us());
        kl__bind_i64(st, 3, run_id);
        int s = kl__step(st);
        if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "setting the run status");
        else if (kl__changes(st) == 0) rc = kl__track_notfound(t, e, "run %lld not found", (long long)run_id);
    }
    kl__free(st);
    kl__track_unlock(t);
    return rc;
}

int kl_track_run_end(kl_track_run *r, kl_run_status status, kl_err *e) {
    if (!r) return kl_err_set(e, KL_EINVAL, "no run");
    int rc = kl_track_run_set_status(r->t, r->id, status, e);
    free(r);
    return rc;
}

/* ==================================================================
 * Params, metrics, tags
 * ================================================================== */

int kl_track_log_params(kl_track_run *r, const kl_kv *params, size_t n, kl_err *e) {
    kl_track *t = r->t;
    kl__st *ins = NULL, *get = NULL;
    int rc;
    kl__track_lock(t);
    if ((rc = kl__track_begin_run(t, r->id, e))) {
        kl__track_unlock(t);
        return rc;
    }
    if ((rc = kl__track_prep(t, "INSERT INTO params(run_id, key, value) VALUES(?, ?, ?) ON CONFLICT(run_id, key) DO NOTHING", &ins, e)))
        goto fail;
    if ((rc = kl__track_prep(t, "SELECT value FROM params WHERE run_id=? AND key=?", &get, e))) goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!params[i].key || !*params[i].key || !params[i].value) {
            rc = kl_err_set(e, KL_EINVAL, "param %zu: empty key or missing value", i);
            goto fail;
        }
        kl__bind_i64(ins, 1, r->id);
        kl__bind_text(ins, 2, params[i].key);
        kl__bind_text(ins, 3, params[i].value);
        int s = kl__step(ins);
        kl__reset(ins);
        if (s != KL__DONE) {
            rc = kl__track_sqlerr(t, s, e, "logging params");
            goto fail;
        }
        if (kl__changes(ins) == 0) {
            kl__bind_i64(get, 1, r->id);
            kl__bind_text(get, 2, params[i].key);
            int differs = kl__step(get) == KL__ROW && strcmp(kl__col_text(get, 0), params[i].value);
            if (differs) {
                rc = kl_err_set(e, KL_EEXIST, "run %lld: param %s is already %s; params are immutable (got %s)",
                                (long long)r->id, params[i].key, kl__col_text(get, 0), params[i].value);
                kl_err_field(e, "params.%s", params[i].key);
                kl__reset(get);
                goto fail;
            }
            kl__reset(get);
        }
    }
    kl__free(ins);
    kl__free(get);
    rc = kl__track_commit(t, e);
    kl__track_unlock(t);
    return rc;
fail:
    kl__free(ins);
    kl__free(get);
    kl__track_rollback(t);
    kl__track_unlock(t);
    return rc;
}

/* The history rows of a batch, columns apart (what an engine's bulk put takes). */
typedef struct {
    int64_t *key_id, *step, *ts;
    double *value;
    uint8_t *inserted;
} batch_cols;

static void batch_free(batch_cols *c) {
    free(c->key_id);
    free(c->step);
    free(c->ts);
    free(c->value);
    free(c->inserted);
}

/* Stage 1: key ids (created when new), timestamps, and per key the batch's
 * latest point and count; touched[] gets the first index of each key. */
static int batch_keys(kl_track *t, const kl_metric_point *pts, size_t n, int64_t now, batch_cols *c, size_t **touched,
                      size_t *ntouched, kl_err *e) {
    uint64_t gen = ++t->gen;
    size_t cap = 0;
    c->key_id = malloc(n * sizeof *c->key_id);
    c->step = malloc(n * sizeof *c->step);
    c->ts = malloc(n * sizeof *c->ts);
    c->value = malloc(n * sizeof *c->value);
    c->inserted = calloc(n, 1);
    if (!c->key_id || !c->step || !c->ts || !c->value || !c->inserted) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!pts[i].key || !*pts[i].key) return kl_err_set(e, KL_EINVAL, "metric point %zu: empty key", i);
        kl__keyent *k = NULL;
        int rc = metric_key(t, pts[i].key, &k, e);
        if (rc) return rc;
        if (k->gen != gen) {
            if (*ntouched == cap) {
                cap = cap ? cap * 2 : 16;
                size_t *nt = realloc(*touched, cap * sizeof *nt);
                if (!nt) return kl_err_set(e, KL_ENOMEM, "out of memory");
                *touched = nt;
            }
            /* keep the index, not the entry: the cache may grow and move */
            (*touched)[(*ntouched)++] = i;
            k->gen = gen;
            k->idx = i;
            k->cnt = 1;
        } else {
            if (pts[i].step >= pts[k->idx].step) k->idx = i;
            k->cnt++;
        }
        c->key_id[i] = k->id;
        c->step[i] = pts[i].step;
        c->ts[i] = pts[i].ts_us ? pts[i].ts_us : now;
        c->value[i] = pts[i].value;
    }
    return KL_OK;
}

/* Stage 2: rows that cannot collide with a logged point: each key's steps
 * rising through the batch from above the latest step in the store
 * (metric_latest keeps the largest). inserted[i] = 2 marks them; an engine
 * may write those without a conflict check. */
typedef struct {
    int64_t id;
    kl__keyent *k;
} key_ref;

static int cmp_key_ref(const void *a, const void *b) {
    int64_t x = ((const key_ref *)a)->id, y = ((const key_ref *)b)->id;
    return x < y ? -1 : x > y;
}

static int batch_fresh(kl_track *t, int64_t run_id, const kl_metric_point *pts, batch_cols *c, size_t n,
                       const size_t *touched, size_t ntouched, kl_err *e) {
    static const char *const q = "SELECT key_id, step FROM metric_latest WHERE run_id=?";
    key_ref *refs = malloc((ntouched ? ntouched : 1) * sizeof *refs);
    if (!refs) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t j = 0; j < ntouched; j++) {
        kl__keyent *k = keycache_find(t, pts[touched[j]].key);
        k->above = INT64_MIN;
        k->fresh = 1;
        refs[j] = (key_ref){k->id, k};
    }
    qsort(refs, ntouched, sizeof *refs, cmp_key_ref);
    kl__st *st = NULL;
    int rc = kl__track_cached(t, q, &st, e), s = KL__DONE;
    if (!rc) { /* the store's latest step of each key of the run (one query) */
        kl__bind_i64(st, 1, run_id);
        while ((s = kl__step(st)) == KL__ROW) {
            key_ref want = {kl__col_i64(st, 0), NULL}, *hit = bsearch(&want, refs, ntouched, sizeof *refs, cmp_key_ref);
            if (hit) hit->k->above = kl__col_i64(st, 1);
        }
        kl__reset(st);
        if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "reading latest metrics");
    }
    free(refs);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        kl__keyent *k = keycache_find(t, pts[i].key);
        if (!k->fresh || c->step[i] <= k->above) {
            k->fresh = 0; /* from here on this key's rows are checked */
            continue;
        }
        k->above = c->step[i];
        c->inserted[i] = 2;
    }
    return KL_OK;
}

/* SQLite's bulk put: one cached statement per row (seq 0; a step logged
 * before is left for the append stage). */
int kl__metrics_put_rows(kl_track *t, int64_t run_id, const int64_t *key_id, const int64_t *step, const int64_t *ts,
                         const double *value, size_t n, uint8_t *inserted, kl_err *e) {
    int rc;
    if (!t->st_metric_ins &&
        (rc = kl__track_prep(t,
                             "INSERT INTO metrics(run_id, key_id, step, seq, ts_us, value) VALUES(?, ?, ?, 0, ?, ?) ON "
                             "CONFLICT DO NOTHING",
                             &t->st_metric_ins, e)))
        return rc;
    kl__st *ins = t->st_metric_ins;
    for (size_t i = 0; i < n; i++) {
        kl__bind_i64(ins, 1, run_id);
        kl__bind_i64(ins, 2, key_id[i]);
        kl__bind_i64(ins, 3, step[i]);
        kl__bind_i64(ins, 4, ts[i]);
        kl__bind_f64(ins, 5, value[i]);
        int s = kl__step(ins);
        kl__reset(ins);
        if (s != KL__DONE) return kl__track_sqlerr(t, s, e, "logging metrics");
        inserted[i] = kl__changes(ins) > 0; /* a fresh row (2) is checked all the same */
    }
    return KL_OK;
}

/* Stage 3: points whose step was logged before (in the store or earlier in
 * the batch) go after it, in batch order. */
static int batch_append(kl_track *t, int64_t run_id, const batch_cols *c, size_t n, kl_err *e) {
    static const char *const again =
        "INSERT INTO metrics(run_id, key_id, step, seq, ts_us, value)"
        " SELECT ?1, ?2, ?3, max(seq) + 1, ?4, ?5 FROM metrics WHERE run_id=?1 AND key_id=?2 AND step=?3";
    for (size_t i = 0; i < n; i++) {
        if (c->inserted[i]) continue;
        kl__st *st2 = NULL;
        int rc = kl__track_cached(t, again, &st2, e);
        if (rc) return rc;
        kl__bind_i64(st2, 1, run_id);
        kl__bind_i64(st2, 2, c->key_id[i]);
        kl__bind_i64(st2, 3, c->step[i]);
        kl__bind_i64(st2, 4, c->ts[i]);
        kl__bind_f64(st2, 5, c->value[i]);
        int s = kl__step(st2);
        kl__reset(st2);
        if (s != KL__DONE) return kl__track_sqlerr(t, s, e, "logging metrics");
    }
    return KL_OK;
}

/* Stage 4: the latest value and the point count of each touched key, up
 * to LATEST_ROWS keys per statement (a multi-row upsert both dialects
 * share; each key once per statement). */
#define LATEST_ROWS 256

static int latest_chunk(kl_track *t, int64_t run_id, const kl_metric_point *pts, const batch_cols *c,
                        const size_t *touched, size_t m, kl_buf *sql, kl_err *e) {
    kl_buf_reset(sql);
    kl_buf_puts(sql, "INSERT INTO metric_latest(run_id, key_id, step, ts_us, value, n) VALUES");
    for (size_t j = 0; j < m; j++) kl_buf_puts(sql, j ? ", (?, ?, ?, ?, ?, ?)" : " (?, ?, ?, ?, ?, ?)");
    kl_buf_puts(
        sql,
        " ON CONFLICT(run_id, key_id) DO UPDATE SET n = metric_latest.n + excluded.n,"
        " step = CASE WHEN excluded.step >= metric_latest.step THEN excluded.step ELSE metric_latest.step END,"
        " ts_us = CASE WHEN excluded.step >= metric_latest.step THEN excluded.ts_us ELSE metric_latest.ts_us END,"
        " value = CASE WHEN excluded.step >= metric_latest.step THEN excluded.value ELSE metric_latest.value END");
    if (sql->failed) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl__st *up = NULL;
    int rc = m == 1 ? kl__track_cached(t, t->latest_one ? t->latest_one : (t->latest_one = strdup(sql->data)), &up, e)
                    : kl__track_prep(t, sql->data, &up, e);
    if (rc) return rc;
    for (size_t j = 0; j < m; j++) {
        kl__keyent *k = keycache_find(t, pts[touched[j]].key);
        size_t i = k->idx;
        int p = (int)j * 6;
        kl__bind_i64(up, p + 1, run_id);
        kl__bind_i64(up, p + 2, k->id);
        kl__bind_i64(up, p + 3, c->step[i]);
        kl__bind_i64(up, p + 4, c->ts[i]);
        kl__bind_f64(up, p + 5, c->value[i]);
        kl__bind_i64(up, p + 6, k->cnt);
    }
    int s = kl__step(up);
    if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "updating latest metrics");
    if (m == 1) kl__reset(up);
    else kl__free(up);
    return rc;
}

static int batch_latest(kl_track *t, int64_t run_id, const kl_metric_point *pts, const batch_cols *c,
                        const size_t *touched, size_t ntouched, kl_err *e) {
    kl_buf sql;
    kl_buf_init(&sql);
    int rc = KL_OK;
    for (size_t off = 0; off < ntouched && !rc; off += LATEST_ROWS)
        rc = latest_chunk(t, run_id, pts, c, touched + off, ntouched - off < LATEST_ROWS ? ntouched - off : LATEST_ROWS,
                          &sql, e);
    kl_buf_free(&sql);
    return rc;
}

static int log_metrics_once(kl_track_run *r, const kl_metric_point *pts, size_t n, kl_err *e) {
    kl_track *t = r->t;
    int rc;
    kl__track_lock(t);
    if ((rc = kl__track_begin_run(t, r->id, e))) {
        kl__track_unlock(t);
        return rc;
    }
    int64_t now = kl_time_now_us();
    batch_cols c = {0};
    size_t *touched = NULL, ntouched = 0;
    if ((rc = batch_keys(t, pts, n, now, &c, &touched, &ntouched, e))) goto fail;
    if ((rc = batch_fresh(t, r->id, pts, &c, n, touched, ntouched, e))) goto fail;
    if ((rc = t->ops->metrics_put(t, r->id, c.key_id, c.step, c.ts, c.value, n, c.inserted, e))) goto fail;
    if ((rc = batch_append(t, r->id, &c, n, e))) goto fail;
    if ((rc = batch_latest(t, r->id, pts, &c, touched, ntouched, e))) goto fail;
    if (now - r->last_hb_us > 1000000) {
        if (!t->st_heartbeat && (rc = kl__track_prep(t, "UPDATE runs SET heartbeat_us=? WHERE id=?", &t->st_heartbeat, e))) goto fail;
        kl__bind_i64(t->st_heartbeat, 1, now);
        kl__bind_i64(t->st_heartbeat, 2, r->id);
        kl__step(t->st_heartbeat);
        kl__reset(t->st_heartbeat);
        r->last_hb_us = now;
    }
    free(touched);
    batch_free(&c);
    rc = kl__track_commit(t, e);
    kl__track_unlock(t);
    return rc;
fail:
    free(touched);
    batch_free(&c);
    kl__track_rollback(t);
    kl__track_unlock(t);
    return rc;
}

int kl_track_log_metrics(kl_track_run *r, const kl_metric_point *pts, size_t n, kl_err *e) {
    if (n == 0) return KL_OK;
    /* a server may abort a batch that crossed another writer's new metric
     * keys (a deadlock, KL_EBUSY): the batch was rolled back; send it again */
    int rc = KL_EBUSY;
    for (int attempt = 0; attempt < 4 && rc == KL_EBUSY; attempt++) rc = log_metrics_once(r, pts, n, e);
    return rc;
}

int kl__tag_put(kl_track *t, int64_t run_id, const char *key, const char *value, kl_err *e) {
    if (!key || !*key) return kl_err_set(e, KL_EINVAL, "empty tag key");
    kl__st *st = NULL;
    int rc = kl__track_prep(t,
                            value ? "INSERT INTO tags(run_id, key, value) VALUES(?, ?, ?) ON CONFLICT(run_id, key) DO UPDATE SET value=excluded.value"
                                  : "DELETE FROM tags WHERE run_id=? AND key=?",
                            &st, e);
    if (!rc) {
        kl__bind_i64(st, 1, run_id);
        kl__bind_text(st, 2, key);
        if (value) kl__bind_text(st, 3, value);
        int s = kl__step(st);
        if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "setting a tag");
    }
    kl__free(st);
    return rc;
}

int kl_track_set_tag(kl_track_run *r, const char *key, const char *value, kl_err *e) {
    kl_track *t = r->t;
    kl__track_lock(t);
    int rc = kl__tag_put(t, r->id, key, value, e);
    kl__track_unlock(t);
    return rc;
}

/* ==================================================================
 * Lineage
 * ================================================================== */

static int git_commit(char *out, size_t n) {
    FILE *p = popen("git rev-parse HEAD 2>/dev/null", "r");
    if (!p) return -1;
    char buf[128] = {0};
    char *ok = fgets(buf, sizeof buf, p);
    int st = pclose(p);
    if (!ok || st != 0) return -1;
    buf[strcspn(buf, "\r\n")] = 0;
    if (strlen(buf) < 7) return -1;
    snprintf(out, n, "%s", buf);
    return 0;
}

int kl_track_set_lineage(kl_track_run *r, const kl_track_lineage *l, kl_err *e) {
    kl_track *t = r->t;
    char commit[128];
    const char *code = l ? l->code_version : NULL;
    if (!code && !r->lineage_set && git_commit(commit, sizeof commit) == 0) code = commit;
    kl__st *st = NULL;
    kl__track_lock(t);
    int rc = kl__track_prep(
        t,
        "INSERT INTO lineage(run_id, dataset_version, feature_hash, code_version, spec_hash) VALUES(?1, ?2, ?3, ?4, ?5)"
        " ON CONFLICT(run_id) DO UPDATE SET dataset_version=coalesce(?2, lineage.dataset_version),"
        " feature_hash=coalesce(?3, lineage.feature_hash), code_version=coalesce(?4, lineage.code_version),"
        " spec_hash=coalesce(?5, lineage.spec_hash)",
        &st, e);
    if (!rc) {
        kl__bind_i64(st, 1, r->id);
        const char *v[4] = {l ? l->dataset_version : NULL, l ? l->feature_hash : NULL, code, l ? l->spec_hash : NULL};
        for (int i = 0; i < 4; i++)
            if (v[i]) kl__bind_text(st, i + 2, v[i]);
        int s = kl__step(st);
        if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "setting lineage");
    }
    kl__free(st);
    kl__track_unlock(t);
    if (!rc) r->lineage_set = 1;
    return rc;
}

/* ==================================================================
 * Object store and artifacts
 * ================================================================== */

void kl__track_object_path(const kl_track *t, const char *hex, char *buf, size_t n) {
    snprintf(buf, n, "%s/%.2s/%s", t->objects ? t->objects : "(no --artifacts folder)", hex, hex + 2);
}

int kl__track_need_objects(const kl_track *t, kl_err *e) {
    if (t->objects) return KL_OK;
    return kl_err_set(
        e, KL_EUSAGE,
        "the experiment store %s keeps no files itself: give --artifacts DIR (a folder every machine of the team "
        "mounts) or KEEL_ARTIFACTS for its artifacts and model files",
        t->where);
}

int kl__track_put_object(kl_track *t, const char *path, char hex[65], int64_t *size, kl_err *e) {
    char tmp[4096], dst[4096], dir[4096];
    int in = -1, out = -1, rc = KL_OK;
    kl_sha256 *h = NULL;
    char *buf = NULL;
    tmp[0] = 0;
    if ((rc = kl__track_need_objects(t, e)) || (rc = kl_mkdir_p(t->objects, e))) return rc;
    in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0) return kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", t->objects);
    out = mkstemp(tmp);
    if (out < 0) {
        rc = kl_err_set(e, -errno, "%s: %s", tmp, strerror(errno));
        tmp[0] = 0;
        goto fail;
    }
    h = kl_sha256_new();
    buf = malloc(1 << 20);
    if (!h || !buf) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    int64_t total = 0;
    for (;;) {
        ssize_t r = read(in, buf, 1 << 20);
        if (r < 0) {
            if (errno == EINTR) continue;
            rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
            goto fail;
        }
        if (r == 0) break;
        kl_sha256_update(h, buf, (size_t)r);
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0) {
                if (errno == EINTR) continue;
                rc = kl_err_set(e, -errno, "%s: %s", tmp, strerror(errno));
                goto fail;
            }
            off += w;
        }
        total += r;
    }
    uint8_t d[32];
    kl_sha256_final(h, d);
    kl_sha256_hex(d, hex);
    if (fsync(out) != 0) {
        rc = kl_err_set(e, -errno, "%s: fsync: %s", tmp, strerror(errno));
        goto fail;
    }
    fchmod(out, 0444);
    close(out);
    out = -1;
    snprintf(dir, sizeof dir, "%s/%.2s", t->objects, hex);
    if ((rc = kl_mkdir_p(dir, e))) goto fail;
    kl__track_object_path(t, hex, dst, sizeof dst);
    char have[65];
    kl_err ign = {0};
    if (kl_path_exists(dst) && kl_sha256_file_hex(dst, have, &ign) == 0 && !strcmp(have, hex)) {
        unlink(tmp); /* identical content already stored */
    } else if (rename(tmp, dst) != 0) {
        rc = kl_err_set(e, -errno, "%s: %s", dst, strerror(errno));
        goto fail;
    } else {
        kl_fsync_dir(dir, NULL);
    }
    tmp[0] = 0;
    *size = total;
fail:
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (tmp[0]) unlink(tmp);
    kl_sha256_free(h);
    free(buf);
    return rc;
}

int kl_track_log_artifact_as(kl_track_run *r, const char *path, const char *name, kl_err *e) {
    kl_track *t = r->t;
    char hex[65];
    int64_t size = 0;
    int rc = kl__track_put_object(t, path, hex, &size, e);
    if (rc) return rc;
    if (!name) {
        name = strrchr(path, '/');
        name = name ? name + 1 : path;
    }
    kl__st *st = NULL;
    kl__track_lock(t);
    rc = kl__track_prep(t,
                        "INSERT INTO artifacts(run_id, path, size, sha256, created_us) VALUES(?, ?, ?, ?, ?)"
                        " ON CONFLICT(run_id, path) DO UPDATE SET size=excluded.size, sha256=excluded.sha256, created_us=excluded.created_us",
                        &st, e);
    if (!rc) {
        kl__bind_i64(st, 1, r->id);
        kl__bind_text(st, 2, name);
        kl__bind_i64(st, 3, size);
        kl__bind_text(st, 4, hex);
        kl__bind_i64(st, 5, kl_time_now_us());
        int s = kl__step(st);
        if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "recording an artifact");
    }
    kl__free(st);
    kl__track_unlock(t);
    return rc;
}

int kl_track_log_artifact(kl_track_run *r, const char *path, kl_err *e) { return kl_track_log_artifact_as(r, path, NULL, e); }

/* ==================================================================
 * Queries
 * ================================================================== */

int kl_track_runs_find(kl_track *t, const char *filter, const char *sort_key, int64_t limit, int64_t **ids, size_t *n,
                       kl_err *e) {
    *ids = NULL;
    *n = 0;
    kl_buf sql;
    kl_buf_init(&sql);
    kl__binds b = {0};
    kl__st *st = NULL;
    int64_t *v = NULL;
    size_t nv = 0, cap = 0;
    int rc;
    kl_buf_puts(&sql, "SELECT r.id FROM runs r JOIN experiments x ON x.id = r.experiment_id");
    if (filter && *filter) {
        kl_buf_puts(&sql, " WHERE ");
        if ((rc = kl__filter_sql(t->ops->dialect, filter, &sql, &b, e))) goto fail;
    }
    kl_buf_puts(&sql, " ORDER BY ");
    if ((rc = kl__sort_sql(t->ops->dialect, sort_key && *sort_key ? sort_key : "-start_time", &sql, &b, e))) goto fail;
    kl_buf_puts(&sql, ", r.id DESC");
    if (limit > 0) kl_buf_printf(&sql, " LIMIT %lld", (long long)limit);
    if (sql.failed) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    kl__track_lock(t);
    rc = kl__track_prep(t, sql.data, &st, e);
    if (!rc) kl__binds_apply(&b, st, 1);
    int s = KL__DONE;
    while (!rc && (s = kl__step(st)) == KL__ROW) {
        if (nv == cap) {
            cap = cap ? cap * 2 : 256;
            int64_t *nvv = realloc(v, cap * sizeof *v);
            if (!nvv) {
                rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                break;
            }
            v = nvv;
        }
        v[nv++] = kl__col_i64(st, 0);
    }
    if (!rc && s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "listing runs");
    kl__track_unlock(t);
    if (rc) goto fail;
    *ids = v;
    *n = nv;
    v = NULL;
fail:
    free(v);
    kl__free(st);
    kl_buf_free(&sql);
    kl__binds_free(&b);
    return rc;
}

int kl_track_filter_compile(const char *filter, char **sql, kl_err *e) {
    *sql = NULL;
    kl_buf b;
    kl_buf_init(&b);
    kl__binds binds = {0};
    int rc = kl__filter_sql(&kl__dialect_sqlite, filter, &b, &binds, e);
    kl__binds_free(&binds);
    if (rc) {
        kl_buf_free(&b);
        return rc;
    }
    *sql = kl_buf_take(&b);
    return *sql ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
}

static void add_text(cJSON *o, const char *name, kl__st *st, int col) {
    if (kl__col_null(st, col)) cJSON_AddNullToObject(o, name);
    else cJSON_AddStringToObject(o, name, kl__col_text(st, col));
}

static void add_int(cJSON *o, const char *name, kl__st *st, int col) {
    if (kl__col_null(st, col)) cJSON_AddNullToObject(o, name);
    else cJSON_AddNumberToObject(o, name, (double)kl__col_i64(st, col));
}

/* Everything of a set of runs but their rows, in one query (one round trip
 * to a server): part 0 params, 1 latest metrics, 2 tags, 3 artifacts, 4
 * lineage, 5 child runs; by run, then part, each part in its order (name,
 * then id). %s is the run id list. Columns: rid, part, name, v1, v2, v3,
 * i1, i2, i3, f. */
static const char *const run_parts_fmt =
    "SELECT run_id AS rid, 0 AS part, key AS name, value AS v1, CAST(NULL AS TEXT) AS v2, CAST(NULL AS TEXT) AS v3,"
    " CAST(NULL AS BIGINT) AS i1, CAST(NULL AS BIGINT) AS i2, CAST(NULL AS BIGINT) AS i3, CAST(NULL AS DOUBLE "
    "PRECISION) AS f"
    " FROM params WHERE run_id IN (%1$s)"
    " UNION ALL SELECT l.run_id, 1, k.name, NULL, NULL, NULL, l.step, l.ts_us, l.n, l.value FROM metric_latest l"
    " JOIN metric_keys k ON k.id = l.key_id WHERE l.run_id IN (%1$s)"
    " UNION ALL SELECT run_id, 2, key, value, NULL, NULL, NULL, NULL, NULL, NULL FROM tags WHERE run_id IN (%1$s)"
    " UNION ALL SELECT run_id, 3, path, sha256, NULL, NULL, size, NULL, NULL, NULL FROM artifacts WHERE run_id IN "
    "(%1$s)"
    " UNION ALL SELECT run_id, 4, dataset_version, feature_hash, code_version, spec_hash, NULL, NULL, NULL, NULL FROM "
    "lineage"
    " WHERE run_id IN (%1$s)"
    " UNION ALL SELECT parent_id, 5, substr(name, 1, 0), NULL, NULL, NULL, id, NULL, NULL, NULL FROM runs"
    " WHERE parent_id IN (%1$s)"
    " ORDER BY rid, part, name, i1";

static const char *const run_rows_fmt =
    "SELECT r.id, x.name, r.name, r.status, r.start_us, r.end_us, r.parent_id, r.pid, r.host, r.heartbeat_us"
    " FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE r.id IN (%s)";

/* A run being read: its object and the containers its parts go into. */
typedef struct {
    int64_t id;
    cJSON *o, *into[6];
    int64_t points;
} run_obj;

static void part_row(kl__st *st, run_obj *r) {
    int part = (int)kl__col_i64(st, 1);
    const char *name = kl__col_text(st, 2);
    cJSON *o = r->into[part], *m;
    switch (part) {
    case 0:
    case 2: cJSON_AddStringToObject(o, name, kl__col_text(st, 3)); break;
    case 1:
        if (!(m = cJSON_AddObjectToObject(o, name))) return;
        cJSON_AddNumberToObject(m, "step", (double)kl__col_i64(st, 6));
        cJSON_AddNumberToObject(m, "ts_us", (double)kl__col_i64(st, 7));
        kl__json_num(m, "value", kl__col_f64(st, 9));
        r->points += kl__col_i64(st, 8);
        break;
    case 3:
        if (!(m = cJSON_CreateObject())) return;
        cJSON_AddStringToObject(m, "path", name);
        cJSON_AddNumberToObject(m, "size", (double)kl__col_i64(st, 6));
        cJSON_AddStringToObject(m, "sha256", kl__col_text(st, 3));
        cJSON_AddItemToArray(o, m);
        break;
    case 4:
        add_text(o, "dataset_version", st, 2);
        add_text(o, "feature_hash", st, 3);
        add_text(o, "code_version", st, 4);
        add_text(o, "spec_hash", st, 5);
        break;
    case 5: cJSON_AddItemToArray(o, cJSON_CreateNumber((double)kl__col_i64(st, 6))); break;
    }
}

static size_t first_run(const run_obj *v, size_t n, int64_t id) {
    for (size_t i = 0; i < n; i++)
        if (v[i].id == id) return i;
    return n;
}

/* The run row's attributes, then the (empty) containers of its parts. */
static int run_row(kl__st *st, run_obj *r) {
    cJSON *o = r->o = cJSON_CreateObject();
    if (!o) return KL_ENOMEM;
    add_int(o, "id", st, 0);
    add_text(o, "experiment", st, 1);
    add_text(o, "name", st, 2);
    add_text(o, "status", st, 3);
    add_int(o, "start_us", st, 4);
    add_int(o, "end_us", st, 5);
    add_int(o, "parent_id", st, 6);
    add_int(o, "pid", st, 7);
    add_text(o, "host", st, 8);
    add_int(o, "heartbeat_us", st, 9);
    const char *names[6] = {"params", "metrics", "tags", "artifacts", "lineage", "children"};
    for (int k = 0; k < 6; k++)
        if (!(r->into[k] =
                  k == 3 || k == 5 ? cJSON_AddArrayToObject(o, names[k]) : cJSON_AddObjectToObject(o, names[k])))
            return KL_ENOMEM;
    return KL_OK;
}

/* Reads the runs v[0..n) (ids set) with two queries. */
static int read_runs(kl_track *t, run_obj *v, size_t n, kl_err *e) {
    kl_buf list, sql;
    kl_buf_init(&list);
    kl_buf_init(&sql);
    for (size_t i = 0; i < n; i++) kl_buf_printf(&list, i ? ", ?%zu" : "?%zu", i + 1);
    kl__st *st = NULL;
    int rc = KL_OK, s;
    for (int q = 0; q < 2 && !rc; q++) {
        kl_buf_reset(&sql);
        kl_buf_printf(&sql, q ? run_parts_fmt : run_rows_fmt, list.data);
        if (list.failed || sql.failed) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        if ((rc = kl__track_prep(t, sql.data, &st, e))) break;
        for (size_t i = 0; i < n; i++) kl__bind_i64(st, (int)i + 1, v[i].id);
        size_t from = 0; /* rows come by run: the first entry of the run (an id may be asked twice) */
        while (!rc && (s = kl__step(st)) == KL__ROW) {
            int64_t id = kl__col_i64(st, 0);
            if (from >= n || v[from].id != id) from = first_run(v, n, id);
            for (size_t i = from; i < n && !rc; i++) {
                if (v[i].id != id) continue;
                if (q == 0 && run_row(st, &v[i])) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                if (q == 1 && v[i].o) part_row(st, &v[i]);
            }
        }
        if (!rc && s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "reading runs");
        kl__free(st);
        st = NULL;
        for (size_t i = 0; !rc && q == 0 && i < n; i++)
            if (!v[i].o) rc = kl__track_notfound(t, e, "run %lld not found", (long long)v[i].id);
    }
    for (size_t i = 0; !rc && i < n; i++) cJSON_AddNumberToObject(v[i].o, "points", (double)v[i].points);
    kl_buf_free(&list);
    kl_buf_free(&sql);
    return rc;
}

#define READ_RUNS 200 /* runs per pair of queries */

int kl_track_runs_json(kl_track *t, const int64_t *ids, size_t n, void **out_cjson, kl_err *e) {
    *out_cjson = NULL;
    cJSON *arr = cJSON_CreateArray();
    run_obj *v = calloc(READ_RUNS, sizeof *v);
    int rc = arr && v ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
    kl__track_lock(t);
    for (size_t off = 0; off < n && !rc; off += READ_RUNS) {
        size_t m = n - off < READ_RUNS ? n - off : READ_RUNS;
        memset(v, 0, READ_RUNS * sizeof *v);
        for (size_t i = 0; i < m; i++) v[i].id = ids[off + i];
        rc = read_runs(t, v, m, e);
        for (size_t i = 0; i < m; i++) {
            if (!rc) cJSON_AddItemToArray(arr, v[i].o);
            else cJSON_Delete(v[i].o);
        }
    }
    kl__track_unlock(t);
    free(v);
    if (rc) {
        cJSON_Delete(arr);
        return rc;
    }
    *out_cjson = arr;
    return KL_OK;
}

int kl_track_run_json(kl_track *t, int64_t run_id, void **out_cjson, kl_err *e) {
    *out_cjson = NULL;
    void *arr = NULL;
    int rc = kl_track_runs_json(t, &run_id, 1, &arr, e);
    if (rc) return rc;
    *out_cjson = cJSON_DetachItemFromArray(arr, 0);
    cJSON_Delete(arr);
    return KL_OK;
}

int kl_track_metric_history(kl_track *t, int64_t run_id, const char *key, int64_t **steps, int64_t **ts_us, double **values,
                            size_t *n, kl_err *e) {
    *steps = NULL;
    if (ts_us) *ts_us = NULL;
    *values = NULL;
    *n = 0;
    kl__st *st = NULL;
    int64_t *sv = NULL, *tv = NULL;
    double *vv = NULL;
    size_t cnt = 0, cap = 0;
    kl__track_lock(t);
    int rc = kl__track_prep(t,
                            "SELECT m.step, m.ts_us, m.value FROM metrics m WHERE m.run_id=?1"
                            " AND m.key_id=(SELECT id FROM metric_keys WHERE name=?2) ORDER BY m.step, m.seq",
                            &st, e);
    if (rc) goto fail;
    kl__bind_i64(st, 1, run_id);
    kl__bind_text(st, 2, key);
    int s;
    while ((s = kl__step(st)) == KL__ROW) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 256;
            int64_t *a = realloc(sv, cap * sizeof *a);
            if (a) sv = a;
            int64_t *b = realloc(tv, cap * sizeof *b);
            if (b) tv = b;
            double *c = realloc(vv, cap * sizeof *c);
            if (c) vv = c;
            if (!a || !b || !c) {
                rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                goto fail;
            }
        }
        sv[cnt] = kl__col_i64(st, 0);
        tv[cnt] = kl__col_i64(st, 1);
        vv[cnt] = kl__col_f64(st, 2);
        cnt++;
    }
    if (s != KL__DONE) {
        rc = kl__track_sqlerr(t, s, e, "reading metric history");
        goto fail;
    }
    kl__free(st);
    kl__track_unlock(t);
    *steps = sv;
    if (ts_us) *ts_us = tv;
    else free(tv);
    *values = vv;
    *n = cnt;
    return KL_OK;
fail:
    kl__free(st);
    kl__track_unlock(t);
    free(sv);
    free(tv);
    free(vv);
    return rc;
}

void kl_track_strv_free(char **v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

int kl_track_metric_keys(kl_track *t, int64_t run_id, char ***keys, size_t *n, kl_err *e) {
    *keys = NULL;
    *n = 0;
    kl__st *st = NULL;
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    kl__track_lock(t);
    int rc = kl__track_prep(t,
                            "SELECT k.name FROM metric_latest l JOIN metric_keys k ON k.id = l.key_id WHERE l.run_id=? ORDER BY k.name",
                            &st, e);
    if (rc) goto fail;
    kl__bind_i64(st, 1, run_id);
    int s;
    while ((s = kl__step(st)) == KL__ROW) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                goto fail;
            }
            v = nv;
        }
        v[cnt] = strdup(kl__col_text(st, 0));
        if (!v[cnt]) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            goto fail;
        }
        cnt++;
    }
    if (s != KL__DONE) {
        rc = kl__track_sqlerr(t, s, e, "reading metric keys");
        goto fail;
    }
    kl__free(st);
    kl__track_unlock(t);
    *keys = v;
    *n = cnt;
    return KL_OK;
fail:
    kl__free(st);
    kl__track_unlock(t);
    kl_track_strv_free(v, cnt);
    return rc;
}

int kl_track_metric_count(kl_track *t, int64_t run_id, const char *key, int64_t *out, kl_err *e) {
    *out = 0;
    kl__st *st = NULL;
    kl__track_lock(t);
    int rc = kl__track_prep(t,
                            key ? "SELECT coalesce(sum(n), 0) FROM metric_latest WHERE run_id=?1 AND key_id=(SELECT id FROM metric_keys WHERE name=?2)"
                                : "SELECT coalesce(sum(n), 0) FROM metric_latest WHERE run_id=?1",
                            &st, e);
    if (!rc) {
        kl__bind_i64(st, 1, run_id);
        if (key) kl__bind_text(st, 2, key);
        int s = kl__step(st);
        if (s == KL__ROW) *out = kl__col_i64(st, 0);
        else rc = kl__track_sqlerr(t, s, e, "counting metrics");
    }
    kl__free(st);
    kl__track_unlock(t);
    return rc;
}
