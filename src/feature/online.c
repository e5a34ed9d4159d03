/* The online path: one JSON record → the model's input values through the
 * same evaluator as apply (transform.c), and the online store of recent
 * events per entity for window features, filled by materialize and by
 * appends, on one of two backends: in memory, persisted to SQLite (a path),
 * or Redis (redis://..., online_redis.c, shared by several processes). The
 * window of a record sees only events strictly before its timestamp, as
 * offline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "feature/fstore_int.h"

/* ==================================================================
 * The store
 * ================================================================== */

typedef struct {
    fevent *ev;
    uint32_t n, cap;
    uint8_t dirty;
} hist;

typedef struct {
    fmap map;       /* entity key → index into h */
    hist *h;
    size_t nh, caph;
} fwin;

struct kl_fstore {
    pthread_rwlock_t lock;   /* transforms read, appends and flushes write */
    const kl_features *f;
    fwin *w;        /* one per feature (used by window features) */
    char *path;
    uint64_t events;         /* kept in memory; Redis: appended by this process */
    kl__fsr *redis;          /* the Redis backend (w unused), NULL: in memory */
    int on_error_empty;      /* a failed read gives empty windows (counted) */
    _Atomic uint64_t errors; /* failed backend calls */
};

void kl_fstore_free(kl_fstore *s) {
    if (!s) return;
    for (size_t i = 0; s->w && i < s->f->nf; i++) {
        kl__fmap_free(&s->w[i].map);
        for (size_t j = 0; j < s->w[i].nh; j++) free(s->w[i].h[j].ev);
        free(s->w[i].h);
    }
    free(s->w);
    free(s->path);
    kl__fsr_free(s->redis);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}

uint64_t kl_fstore_entities(const kl_fstore *s) {
    uint64_t n = 0;
    if (s->redis) return 0; /* not counted: the histories live in Redis */
    for (size_t i = 0; i < s->f->nf; i++) n += s->w[i].nh;
    return n;
}
uint64_t kl_fstore_events(const kl_fstore *s) {
    uint64_t n = 0;
    if (s->redis) return __atomic_load_n(&s->events, __ATOMIC_RELAXED);
    for (size_t i = 0; i < s->f->nf; i++)
        for (size_t j = 0; j < s->w[i].nh; j++) n += s->w[i].h[j].n;
    return n;
}

int kl_fstore_is_url(const char *path) { return kl__fsr_is_url(path); }
void kl_fstore_set_on_error(kl_fstore *s, int empty) { s->on_error_empty = empty; }
uint64_t kl_fstore_errors(const kl_fstore *s) { return atomic_load(&((kl_fstore *)s)->errors); }
int kl_fstore_ping(kl_fstore *s, kl_err *e) {
    if (!s->redis) return KL_OK;
    int rc = kl__fsr_ping(s->redis, e);
    if (rc) atomic_fetch_add(&s->errors, 1);
    return rc;
}

static hist *get_hist(fwin *w, const char *k, size_t kn, int create) {
    if (!create) {
        const uint64_t *v = kl__fmap_get(&w->map, k, kn);
        return v ? &w->h[*v] : NULL;
    }
    int created;
    uint64_t *v = kl__fmap_put(&w->map, k, kn, &created);
    if (!v) return NULL;
    if (created) {
        if (w->nh == w->caph) {
            size_t nc = w->caph ? w->caph * 2 : 256;
            hist *nh = realloc(w->h, nc * sizeof *nh);
            if (!nh) return NULL;
            w->h = nh;
            w->caph = nc;
        }
        memset(&w->h[w->nh], 0, sizeof w->h[0]);
        *v = w->nh++;
    }
    return &w->h[*v];
}

/* Inserts an event in (ts, v) order (after equal ones) and prunes what no
 * later-or-equal-time record can need. */
static int hist_add(const feat *F, hist *h, fevent x) {
    if (h->n == h->cap) {
        uint32_t nc = h->cap ? h->cap * 2 : 4;
        fevent *ne = realloc(h->ev, nc * sizeof *ne);
        if (!ne) return KL_ENOMEM;
        h->ev = ne;
        h->cap = nc;
    }
    uint32_t i = h->n;
    while (i > 0 && kl__fevent_cmp(&x, &h->ev[i - 1]) < 0) { h->ev[i] = h->ev[i - 1]; i--; }
    h->ev[i] = x;
    h->n++;
    size_t lo = kl__tf_window_keep_from(F, h->ev, h->n);
    if (lo) {
        memmove(h->ev, h->ev + lo, (h->n - lo) * sizeof *h->ev);
        h->n -= (uint32_t)lo;
    }
    h->dirty = 1;
    return KL_OK;
}

/* ---- SQLite persistence ---- */

static int sql_err(sqlite3 *db, kl_err *e, const char *what, const char *path) {
    return kl_err_set(e, KL_EINVAL, "online store %s: %s: %s", path, what, db ? sqlite3_errmsg(db) : "cannot open");
}

static const char *schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS history(feature TEXT NOT NULL, entity BLOB NOT NULL, events BLOB NOT NULL,"
    " PRIMARY KEY(feature, entity)) WITHOUT ROWID;";

static int store_load(kl_fstore *s, kl_err *e) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = KL_OK;
    if (sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) { rc = sql_err(db, e, "open", s->path); goto done; }
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='feature_hash'", -1, &st, NULL) != SQLITE_OK) { rc = sql_err(db, e, "not a keel online store", s->path); goto done; }
    if (sqlite3_step(st) != SQLITE_ROW) { rc = kl_err_set(e, KL_EPARSE, "online store %s: no feature_hash", s->path); goto done; }
    const char *h = (const char *)sqlite3_column_text(st, 0);
    if (!h || strcmp(h, kl_features_hash(s->f))) {
        rc = kl_err_set(e, KL_ESTATE, "online store %s was filled for features %.12s, these are %.12s (materialize again)",
                        s->path, h ? h : "?", kl_features_hash(s->f));
        goto done;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT entity, events FROM history WHERE feature=?", -1, &st, NULL) != SQLITE_OK) { rc = sql_err(db, e, "prepare", s->path); goto done; }
    for (size_t i = 0; i < s->f->nf; i++) {
        const feat *F = &s->f->f[i];
        if (F->kind != TF_WINDOW) continue;
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, F->name, -1, SQLITE_STATIC);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            const void *k = sqlite3_column_blob(st, 0);
            int kn = sqlite3_column_bytes(st, 0);
            const uint8_t *b = sqlite3_column_blob(st, 1);
            int bn = sqlite3_column_bytes(st, 1);
            if (bn % 16) { rc = kl_err_set(e, KL_EPARSE, "online store %s: feature %s: corrupt history", s->path, F->name); goto done; }
            hist *hh = get_hist(&s->w[i], k ? k : "", (size_t)kn, 1);
            if (!hh) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
            uint32_t n = (uint32_t)(bn / 16);
            hh->ev = realloc(hh->ev, (n ? n : 1) * sizeof *hh->ev);
            if (!hh->ev) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
            hh->n = hh->cap = n;
            for (uint32_t j = 0; j < n; j++) {
                uint64_t a = 0, c = 0;
                for (int q = 0; q < 8; q++) { a |= (uint64_t)b[j * 16 + q] << (8 * q); c |= (uint64_t)b[j * 16 + 8 + q] << (8 * q); }
                hh->ev[j].ts = (int64_t)a;
                memcpy(&hh->ev[j].v, &c, 8);
            }
            s->events += n;
        }
        if (r != SQLITE_DONE) { rc = sql_err(db, e, "read", s->path); goto done; }
    }
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

static int flush_locked(kl_fstore *s, kl_err *e);
int kl_fstore_flush(kl_fstore *s, kl_err *e) {
    if (!s->path || s->redis) return KL_OK; /* Redis: every append is written at once */
    pthread_rwlock_wrlock(&s->lock);
    int rc = flush_locked(s, e);
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

static int flush_locked(kl_fstore *s, kl_err *e) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = KL_OK;
    uint8_t *buf = NULL;
    size_t bcap = 0;
    if (sqlite3_open(s->path, &db) != SQLITE_OK) { rc = sql_err(db, e, "open", s->path); goto done; }
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, NULL);
    if (sqlite3_exec(db, schema_sql, NULL, NULL, NULL) != SQLITE_OK) { rc = sql_err(db, e, "schema", s->path); goto done; }
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) { rc = sql_err(db, e, "begin", s->path); goto done; }
    char q[200];
    snprintf(q, sizeof q, "INSERT OR REPLACE INTO meta VALUES('feature_hash','%s')", kl_features_hash(s->f));
    if (sqlite3_exec(db, q, NULL, NULL, NULL) != SQLITE_OK) { rc = sql_err(db, e, "write", s->path); goto rollback; }
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO history VALUES(?,?,?)", -1, &st, NULL) != SQLITE_OK) { rc = sql_err(db, e, "prepare", s->path); goto rollback; }
    for (size_t i = 0; i < s->f->nf; i++) {
        const feat *F = &s->f->f[i];
        fwin *w = &s->w[i];
        if (F->kind != TF_WINDOW) continue;
        for (size_t m = 0; m < w->map.cap; m++) {
            if (!w->map.e[m].used) continue;
            hist *h = &w->h[w->map.e[m].v];
            if (!h->dirty) continue;
            size_t need = (size_t)h->n * 16 + 1;
            if (need > bcap) {
                uint8_t *nb = realloc(buf, need * 2);
                if (!nb) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto rollback; }
                buf = nb;
                bcap = need * 2;
            }
            for (uint32_t j = 0; j < h->n; j++) {
                uint64_t a = (uint64_t)h->ev[j].ts, c;
                memcpy(&c, &h->ev[j].v, 8);
                for (int b = 0; b < 8; b++) { buf[j * 16 + b] = (uint8_t)(a >> (8 * b)); buf[j * 16 + 8 + b] = (uint8_t)(c >> (8 * b)); }
            }
            sqlite3_reset(st);
            sqlite3_bind_text(st, 1, F->name, -1, SQLITE_STATIC);
            sqlite3_bind_blob(st, 2, kl__fmap_key(&w->map, &w->map.e[m]), (int)w->map.e[m].n, SQLITE_STATIC);
            sqlite3_bind_blob(st, 3, buf, (int)(h->n * 16), SQLITE_STATIC);
            if (sqlite3_step(st) != SQLITE_DONE) { rc = sql_err(db, e, "write", s->path); goto rollback; }
            h->dirty = 0;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) { rc = sql_err(db, e, "commit", s->path); goto rollback; }
    goto done;
rollback:
    sqlite3_finalize(st);
    st = NULL;
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(buf);
    return rc;
}

static int fstore_open(const kl_features *f, const char *path, int lazy, kl_fstore **out, kl_err *e) {
    *out = NULL;
    if (!f->fitted) return kl_err_set(e, KL_ESTATE, "features are not fitted");
    kl_fstore *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->f = f;
    pthread_rwlock_init(&s->lock, NULL);
    s->w = calloc(f->nf + 1, sizeof *s->w);
    if (!s->w || (path && !(s->path = strdup(path)))) { kl_fstore_free(s); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    struct stat sb;
    if (kl__fsr_is_url(path)) {
        int rc = kl__fsr_open(f, path, lazy, &s->redis, e);
        if (rc) {
            kl_fstore_free(s);
            return rc;
        }
    } else if (path && stat(path, &sb) == 0) {
        int rc = store_load(s, e);
        if (rc) { kl_fstore_free(s); return rc; }
    }
    *out = s;
    return KL_OK;
}

int kl_fstore_open(const kl_features *f, const char *path, kl_fstore **out, kl_err *e) {
    return fstore_open(f, path, 0, out, e);
}
int kl_fstore_open_lazy(const kl_features *f, const char *path, kl_fstore **out, kl_err *e) {
    return fstore_open(f, path, 1, out, e);
}

/* ==================================================================
 * Appends
 * ================================================================== */

/* One record's events, gathered before anything is appended (a bad field
 * appends nothing): one per window feature. */
typedef struct {
    fs_append a[64];
    char kb[64][KL_CELL_NUMBUF + 8]; /* entity keys that are not in the record (integers, numbers as text) */
    size_t n;
} rec_events;

static int gather_vals(kl_fstore *s, rec_events *r, size_t i, const fval *ent, const fval *tm, const fval *val,
                       kl_err *e) {
    const feat *F = &s->f->f[i];
    if (ent->null || tm->null)
        return kl_err_set(e, KL_EINVAL, "feature %s: %s is missing or null", F->name, ent->null ? F->in[0].column : F->in[1].column);
    if (F->has_value && val->null && !F->value.has_fill)
        return kl_err_set(e, KL_EINVAL, "feature %s: %s is null and has no fill", F->name, F->value.column);
    if (r->n == KL_ARRAY_LEN(r->a))
        return kl_err_set(e, KL_ERANGE, "more than %zu window features", KL_ARRAY_LEN(r->a));
    char kb[8];
    size_t kn;
    const char *k = kl__entity_key(F, ent, kb, &kn);
    if (k == kb || (k >= ent->num && k < ent->num + sizeof ent->num)) { /* copy what lives on the caller's stack */
        memcpy(r->kb[r->n], k, kn);
        k = r->kb[r->n];
    }
    r->a[r->n++] = (fs_append){i, k, kn, {kl__win_time(F, tm), kl__win_value(F, val, NULL)}};
    return KL_OK;
}

/* Appends the gathered events: in memory under the write lock, in Redis in
 * one atomic script call. */
static int commit_events(kl_fstore *s, const rec_events *r, kl_err *e) {
    if (s->redis) {
        int rc = kl__fsr_append(s->redis, r->a, r->n, e);
        if (rc) atomic_fetch_add(&s->errors, 1);
        else __atomic_fetch_add(&s->events, r->n, __ATOMIC_RELAXED); /* appends from several threads */
        return rc;
    }
    int rc = KL_OK;
    pthread_rwlock_wrlock(&s->lock);
    for (size_t j = 0; j < r->n && !rc; j++) {
        const fs_append *x = &r->a[j];
        hist *h = get_hist(&s->w[x->feat], x->key, x->kn, 1);
        rc = !h || hist_add(&s->f->f[x->feat], h, x->x) ? KL_ENOMEM : KL_OK;
        if (!rc) s->events++;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc ? kl_err_set(e, rc, "out of memory") : KL_OK;
}

static int gather_record(kl_fstore *s, const void *obj, rec_events *r, kl_err *e) {
    if (!cJSON_IsObject((const cJSON *)obj)) return kl_err_set(e, KL_EINVAL, "record: expected a JSON object");
    r->n = 0;
    /* the fvals must outlive the gathering: string keys point into them or the record */
    for (size_t i = 0; i < s->f->nf; i++) {
        const feat *F = &s->f->f[i];
        if (F->kind != TF_WINDOW) continue;
        fval ent, tm, val = {.null = 1};
        int rc;
        const kl_dialect *nt = kl__features_nulls(s->f);
        if ((rc = kl__fval_from_json(&F->in[0], nt, obj, &ent, e)) || (rc = kl__fval_from_json(&F->in[1], nt, obj, &tm, e))) return rc;
        if (F->has_value && (rc = kl__fval_from_json(&F->value, nt, obj, &val, e))) return rc;
        if ((rc = gather_vals(s, r, i, &ent, &tm, &val, e))) return rc;
    }
    return KL_OK;
}

int kl_fstore_check_record(kl_fstore *s, const void *obj, kl_err *e) {
    rec_events *r = malloc(sizeof *r);
    if (!r) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = gather_record(s, obj, r, e);
    free(r);
    return rc;
}

int kl_fstore_append_record(kl_fstore *s, const void *obj, kl_err *e) {
    rec_events *r = malloc(sizeof *r);
    if (!r) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = gather_record(s, obj, r, e);
    if (!rc) rc = commit_events(s, r, e);
    free(r);
    return rc;
}

int kl_fstore_append(kl_fstore *s, const char *json, size_t len, kl_err *e) {
    void *obj = NULL;
    int rc = kl_json_parse(json, len, "record", &obj, e);
    if (rc) return rc;
    rc = kl_fstore_append_record(s, obj, e);
    cJSON_Delete(obj);
    return rc;
}

/* Gathers row `row`'s events into r (nothing appended). */
static int gather_row(kl_fstore *s, const kl_column **in, size_t row, rec_events *r, kl_err *e) {
    r->n = 0;
    for (size_t i = 0; i < s->f->nf; i++) {
        const feat *F = &s->f->f[i];
        if (F->kind != TF_WINDOW) continue;
        fval ent, tm, val = {.null = 1};
        kl__fval_from_col(in[F->in[0].col], row, &ent);
        kl__fval_from_col(in[F->in[1].col], row, &tm);
        if (F->has_value) kl__fval_from_col(in[F->value.col], row, &val);
        int rc = gather_vals(s, r, i, &ent, &tm, &val, e);
        if (rc) { kl_err_prefix(e, "row %zu", row); return rc; }
    }
    return KL_OK;
}

static int append_row(kl_fstore *s, const kl_column **in, size_t row, rec_events *r, kl_err *e) {
    int rc = gather_row(s, in, row, r, e);
    if (!rc && (rc = commit_events(s, r, e))) kl_err_prefix(e, "row %zu", row);
    return rc;
}

/* Materialize into Redis: the events of up to MAT_BATCH rows (in time
 * order) go in one script call — one round trip per batch instead of per
 * row, the same order of appends. */
#define MAT_BATCH 256
static int materialize_redis(kl_fstore *s, const kl_column **in, const size_t *rows, size_t n, rec_events *r,
                             kl_err *e) {
    size_t cap = MAT_BATCH * KL_ARRAY_LEN(r->a), nb = 0, first = 0;
    fs_append *b = malloc(cap * sizeof *b);
    char(*kb)[KL_CELL_NUMBUF + 8] = malloc(cap * sizeof *kb);
    int rc = b && kb ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t k = 0; k < n && !rc; k++) {
        if ((rc = gather_row(s, in, rows[k], r, e))) break;
        for (size_t j = 0; j < r->n; j++) { /* keys in r's buffer move with the event */
            b[nb] = r->a[j];
            if (b[nb].key >= r->kb[0] && b[nb].key < r->kb[0] + sizeof r->kb) {
                memcpy(kb[nb], b[nb].key, b[nb].kn);
                b[nb].key = kb[nb];
            }
            nb++;
        }
        if (k + 1 - first == MAT_BATCH || k + 1 == n) {
            if ((rc = kl__fsr_append(s->redis, b, nb, e))) {
                atomic_fetch_add(&s->errors, 1);
                kl_err_prefix(e, "rows %zu..%zu (in time order; the earlier ones were appended)", first, k);
                break;
            }
            __atomic_fetch_add(&s->events, nb, __ATOMIC_RELAXED);
            nb = 0;
            first = k + 1;
        }
    }
    free(b);
    free(kb);
    return rc;
}

int kl_fstore_append_columns(kl_fstore *s, kl_column *const *cols, size_t ncols, size_t row, kl_err *e) {
    const kl_column **in = calloc(s->f->ninputs + 1, sizeof *in);
    const kl_column *label = NULL;
    size_t n;
    int rc = in ? kl__features_bind(s->f, cols, ncols, 0, in, &label, &n, e) : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc && row >= n) rc = kl_err_set(e, KL_ERANGE, "row %zu of %zu", row, n);
    rec_events *r = rc ? NULL : malloc(sizeof *r);
    if (!rc && !r) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc) rc = append_row(s, in, row, r, e);
    free(r);
    free(in);
    return rc;
}

typedef struct { int64_t ts; size_t row; } trow;
static int trow_cmp(const void *a, const void *b) {
    const trow *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

int kl_features_materialize(const kl_features *f, kl_column *const *cols, size_t ncols, kl_fstore *s, kl_err *e) {
    const kl_column **in = calloc(f->ninputs + 1, sizeof *in);
    const kl_column *label = NULL;
    trow *order = NULL;
    rec_events *r = NULL;
    size_t n = 0;
    int rc;
    if (!in) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if ((rc = kl__features_bind(f, cols, ncols, 0, in, &label, &n, e))) goto done;
    const feat *W = NULL;
    for (size_t i = 0; i < f->nf && !W; i++) if (f->f[i].kind == TF_WINDOW) W = &f->f[i];
    if (!W) goto done;
    order = kl_mem_alloc(n * sizeof *order + 1, KL_TAG_WORKSPACE);
    if (!order) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (size_t r = 0; r < n; r++) {
        fval t;
        kl__fval_from_col(in[W->in[1].col], r, &t);
        order[r] = (trow){t.null ? INT64_MIN : kl__win_time(W, &t), r};
    }
    qsort(order, n, sizeof *order, trow_cmp);
    if (!(r = malloc(sizeof *r))) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    if (s->redis) {
        size_t *rows = malloc(n * sizeof *rows + 1);
        if (!rows) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        for (size_t k = 0; k < n; k++) rows[k] = order[k].row;
        rc = materialize_redis(s, in, rows, n, r, e);
        free(rows);
        goto done;
    }
    for (size_t k = 0; k < n; k++)
        if ((rc = append_row(s, in, order[k].row, r, e))) goto done;
done:
    free(r);
    kl_mem_free(order);
    free(in);
    return rc;
}

/* ==================================================================
 * Transform one record
 * ================================================================== */

static size_t lower_ts(const fevent *ev, size_t n, int64_t t) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ev[mid].ts < t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The window reads of one record, gathered while its inputs are read. */
typedef struct {
    fs_read r[64];
    char kb[64][KL_CELL_NUMBUF + 8];
    size_t n;
} rec_reads;

static int window_read(const kl_features *f, const kl_fstore *store, const feat *F, size_t i, const fval *in,
                       rec_reads *rr, kl_err *e) {
    if (!store)
        return kl_err_set(e, KL_ESTATE,
                          "feature %s is a window over recent events, which need the online store: fill one with "
                          "'keel features materialize features.json --data DATASET --store STORE.db', then give it "
                          "(features transform --store STORE.db) or register it with the model "
                          "(keel models register DIR --features features.json --store STORE.db)",
                          F->name);
    if (store->f != f && strcmp(kl_features_hash(store->f), f->hash))
        return kl_err_set(e, KL_ESTATE, "the online store belongs to other features");
    if (in[0].null || in[1].null)
        return kl_err_set(e, KL_EINVAL, "feature %s: %s is missing or null", F->name,
                          in[0].null ? F->in[0].column : F->in[1].column);
    if (rr->n == KL_ARRAY_LEN(rr->r))
        return kl_err_set(e, KL_ERANGE, "more than %zu window features", KL_ARRAY_LEN(rr->r));
    char kb[8];
    size_t kn;
    const char *k = kl__entity_key(F, &in[0], kb, &kn);
    if (k == kb || (k >= in[0].num && k < in[0].num + sizeof in[0].num)) {
        memcpy(rr->kb[rr->n], k, kn);
        k = rr->kb[rr->n];
    }
    rr->r[rr->n++] = (fs_read){i, k, kn, kl__win_time(F, &in[1]), NULL, 0};
    return KL_OK;
}

/* Aggregates the gathered windows into out: in memory under the read lock;
 * from Redis in one pipelined round trip (a failure is an error, or empty
 * windows when the store was opened so, counted in kl_fstore_errors). */
static int window_eval(const kl_features *f, const kl_fstore *store, rec_reads *rr, double *out,
                       kl_features_counts *counts, kl_err *e) {
    if (!rr->n) return KL_OK;
    kl_fstore *s = (kl_fstore *)store;
    if (s->redis) {
        int rc = kl__fsr_read(s->redis, rr->r, rr->n, e);
        if (rc) {
            atomic_fetch_add(&s->errors, 1);
            if (!s->on_error_empty) return rc;
        }
        for (size_t j = 0; j < rr->n; j++) {
            const feat *F = &f->f[rr->r[j].feat];
            out[F->slot0] = kl__tf_window(F, rr->r[j].ev, rr->r[j].n, rr->r[j].t, counts);
        }
        kl__fsr_read_free(rr->r, rr->n);
        return KL_OK;
    }
    pthread_rwlock_rdlock(&s->lock);
    for (size_t j = 0; j < rr->n; j++) {
        const feat *F = &f->f[rr->r[j].feat];
        const hist *h = get_hist(&s->w[rr->r[j].feat], rr->r[j].key, rr->r[j].kn, 0);
        size_t n = h ? lower_ts(h->ev, h->n, rr->r[j].t) : 0;
        out[F->slot0] = kl__tf_window(F, h ? h->ev : NULL, n, rr->r[j].t, counts);
    }
    pthread_rwlock_unlock(&s->lock);
    return KL_OK;
}

int kl_features_transform_record(const kl_features *f, const kl_fstore *store, const void *obj,
                                 double *out, kl_features_counts *counts, kl_err *e) {
    return kl__features_transform_seen(f, store, obj, out, counts, NULL, e);
}

int kl__features_transform_seen(const kl_features *f, const kl_fstore *store, const void *obj, double *out,
                                kl_features_counts *counts, fval *seen, kl_err *e) {
    if (!f->fitted) return kl_err_set(e, KL_ESTATE, "features are not fitted");
    if (!cJSON_IsObject((const cJSON *)obj)) return kl_err_set(e, KL_EINVAL, "record: expected a JSON object");
    rec_reads stackrr, *rr = &stackrr;
    int rc = KL_OK;
    rr->n = 0;
    for (size_t i = 0; i < f->nf && !rc; i++) {
        const feat *F = &f->f[i];
        fval in[2];
        for (int k = 0; k < F->nin; k++)
            if ((rc = kl__fval_from_json(&F->in[k], kl__features_nulls(f), obj, &in[k], e))) { kl_err_prefix(e, "feature %s", F->name); return rc; }
        if (seen) /* the raw values as read, per input column (the live monitor) */
            for (int k = 0; k < F->nin; k++) {
                fval *sv = &seen[F->in[k].col];
                *sv = in[k];
                if (in[k].s == in[k].num) sv->s = sv->num; /* a number read as text lives in the fval */
            }
        rc = F->kind != TF_WINDOW ? kl__tf_eval(F, in, out + F->slot0, counts, e)
                                  : window_read(f, store, F, i, in, rr, e);
    }
    if (!rc) rc = window_eval(f, store, rr, out, counts, e);
    if (!rc && counts) counts->rows++;
    return rc;
}

int kl_features_transform_row(const kl_features *f, const kl_fstore *store, const char *json,
                              size_t len, float *out, kl_features_counts *counts, kl_err *e) {
    double stackbuf[64];
    double *d = f->width <= 64 ? stackbuf : malloc(f->width * sizeof *d);
    if (!d) return kl_err_set(e, KL_ENOMEM, "out of memory");
    void *obj = NULL;
    int rc = kl_json_parse(json, len, "record", &obj, e);
    if (!rc) rc = kl_features_transform_record(f, store, obj, d, counts, e);
    if (!rc) {
        for (size_t i = 0; i < f->nf; i++) {
            const feat *F = &f->f[i];
            for (size_t j = 0; j < F->width; j++) {
                double v = d[F->slot0 + j];
                float x;
                switch (F->dtype) {
                case KL_COL_INT32: x = (float)(int32_t)v; break;
                case KL_COL_INT64: x = (float)(int64_t)v; break;
                default: x = (float)v; break;
                }
                out[F->slot0 + j] = x;
            }
        }
    }
    cJSON_Delete(obj);
    if (d != stackbuf) free(d);
    return rc;
}

int kl_features_input_append(const kl_features *f, size_t i, const void *cjson, kl_column *c) {
    KL_ASSERT(i < f->ninputs && c->type == f->inputs[i].type);
    const fcol *fc = &f->inputs[i];
    fin in = {0};
    in.column = fc->name;
    in.type = fc->type;
    in.raw = fc->raw;
    fval v;
    kl_err e = {0};
    int bad = kl__fval_from_json(&in, kl__features_nulls(f), cjson, &v, &e) != KL_OK;
    if (bad || v.null) return kl_column_push_null(c) ? KL_ENOMEM : bad;
    int rc;
    switch (c->type) {
    case KL_COL_STRING: case KL_COL_BINARY: rc = kl_column_push_str(c, v.s ? v.s : "", v.n); break;
    case KL_COL_FLOAT32: case KL_COL_FLOAT64: rc = kl_column_push_f64(c, v.d); break;
    default: rc = kl_column_push_i64(c, v.i); break;
    }
    return rc ? KL_ENOMEM : 0;
}
