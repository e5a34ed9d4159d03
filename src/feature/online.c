/* The online path: one JSON record → the model's input values through the
 * same evaluator as apply (transform.c), and the online store of recent
 * events per entity for window features (in memory, persisted to SQLite),
 * filled by materialize and by appends. The window of a record sees only
 * events strictly before its timestamp, as offline. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "feature/feature_int.h"

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
    uint64_t events;
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
    pthread_rwlock_destroy(&s->lock);
    free(s);
}

uint64_t kl_fstore_entities(const kl_fstore *s) {
    uint64_t n = 0;
    for (size_t i = 0; i < s->f->nf; i++) n += s->w[i].nh;
    return n;
}
uint64_t kl_fstore_events(const kl_fstore *s) {
    uint64_t n = 0;
    for (size_t i = 0; i < s->f->nf; i++)
        for (size_t j = 0; j < s->w[i].nh; j++) n += s->w[i].h[j].n;
    return n;
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
    if (!s->path) return KL_OK;
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

int kl_fstore_open(const kl_features *f, const char *path, kl_fstore **out, kl_err *e) {
    *out = NULL;
    if (!f->fitted) return kl_err_set(e, KL_ESTATE, "features are not fitted");
    kl_fstore *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->f = f;
    pthread_rwlock_init(&s->lock, NULL);
    s->w = calloc(f->nf + 1, sizeof *s->w);
    if (!s->w || (path && !(s->path = strdup(path)))) { kl_fstore_free(s); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    struct stat sb;
    if (path && stat(path, &sb) == 0) {
        int rc = store_load(s, e);
        if (rc) { kl_fstore_free(s); return rc; }
    }
    *out = s;
    return KL_OK;
}

/* ==================================================================
 * Appends
 * ================================================================== */

static int append_vals(kl_fstore *s, size_t i, const fval *ent, const fval *tm, const fval *val, kl_err *e) {
    const feat *F = &s->f->f[i];
    if (ent->null || tm->null)
        return kl_err_set(e, KL_EINVAL, "feature %s: %s is missing or null", F->name, ent->null ? F->in[0].column : F->in[1].column);
    if (F->has_value && val->null && !F->value.has_fill)
        return kl_err_set(e, KL_EINVAL, "feature %s: %s is null and has no fill", F->name, F->value.column);
    char kb[8];
    size_t kn;
    const char *k = kl__entity_key(F, ent, kb, &kn);
    fevent x = {kl__win_time(F, tm), kl__win_value(F, val, NULL)};
    pthread_rwlock_wrlock(&s->lock);
    hist *h = get_hist(&s->w[i], k, kn, 1);
    int rc = !h || hist_add(F, h, x) ? KL_ENOMEM : KL_OK;
    if (!rc) s->events++;
    pthread_rwlock_unlock(&s->lock);
    return rc ? kl_err_set(e, rc, "out of memory") : KL_OK;
}

int kl_fstore_append_record(kl_fstore *s, const void *obj, kl_err *e) {
    if (!cJSON_IsObject((const cJSON *)obj)) return kl_err_set(e, KL_EINVAL, "record: expected a JSON object");
    for (size_t i = 0; i < s->f->nf; i++) {
        const feat *F = &s->f->f[i];
        if (F->kind != TF_WINDOW) continue;
        fval ent, tm, val = {.null = 1};
        int rc;
        const kl_dialect *nt = kl__features_nulls(s->f);
        if ((rc = kl__fval_from_json(&F->in[0], nt, obj, &ent, e)) || (rc = kl__fval_from_json(&F->in[1], nt, obj, &tm, e))) return rc;
        if (F->has_value && (rc = kl__fval_from_json(&F->value, nt, obj, &val, e))) return rc;
        if ((rc = append_vals(s, i, &ent, &tm, &val, e))) return rc;
    }
    return KL_OK;
}

int kl_fstore_append(kl_fstore *s, const char *json, size_t len, kl_err *e) {
    void *obj = NULL;
    int rc = kl_json_parse(json, len, "record", &obj, e);
    if (rc) return rc;
    rc = kl_fstore_append_record(s, obj, e);
    cJSON_Delete(obj);
    return rc;
}

static int append_row(kl_fstore *s, const kl_column **in, size_t row, kl_err *e) {
    for (size_t i = 0; i < s->f->nf; i++) {
        const feat *F = &s->f->f[i];
        if (F->kind != TF_WINDOW) continue;
        fval ent, tm, val = {.null = 1};
        kl__fval_from_col(in[F->in[0].col], row, &ent);
        kl__fval_from_col(in[F->in[1].col], row, &tm);
        if (F->has_value) kl__fval_from_col(in[F->value.col], row, &val);
        int rc = append_vals(s, i, &ent, &tm, &val, e);
        if (rc) { kl_err_prefix(e, "row %zu", row); return rc; }
    }
    return KL_OK;
}

int kl_fstore_append_columns(kl_fstore *s, kl_column *const *cols, size_t ncols, size_t row, kl_err *e) {
    const kl_column **in = calloc(s->f->ninputs + 1, sizeof *in);
    const kl_column *label = NULL;
    size_t n;
    int rc = in ? kl__features_bind(s->f, cols, ncols, 0, in, &label, &n, e) : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc && row >= n) rc = kl_err_set(e, KL_ERANGE, "row %zu of %zu", row, n);
    if (!rc) rc = append_row(s, in, row, e);
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
    for (size_t k = 0; k < n; k++)
        if ((rc = append_row(s, in, order[k].row, e))) goto done;
done:
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

int kl_features_transform_record(const kl_features *f, const kl_fstore *store, const void *obj,
                                 double *out, kl_features_counts *counts, kl_err *e) {
    return kl__features_transform_seen(f, store, obj, out, counts, NULL, e);
}

int kl__features_transform_seen(const kl_features *f, const kl_fstore *store, const void *obj, double *out,
                                kl_features_counts *counts, fval *seen, kl_err *e) {
    if (!f->fitted) return kl_err_set(e, KL_ESTATE, "features are not fitted");
    if (!cJSON_IsObject((const cJSON *)obj)) return kl_err_set(e, KL_EINVAL, "record: expected a JSON object");
    int rc;
    for (size_t i = 0; i < f->nf; i++) {
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
        if (F->kind != TF_WINDOW) {
            if ((rc = kl__tf_eval(F, in, out + F->slot0, counts, e))) return rc;
            continue;
        }
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
            return kl_err_set(e, KL_EINVAL, "feature %s: %s is missing or null", F->name, in[0].null ? F->in[0].column : F->in[1].column);
        char kb[8];
        size_t kn;
        const char *k = kl__entity_key(F, &in[0], kb, &kn);
        int64_t t = kl__win_time(F, &in[1]);
        pthread_rwlock_t *lk = (pthread_rwlock_t *)&store->lock;
        pthread_rwlock_rdlock(lk);
        const hist *h = get_hist((fwin *)&store->w[i], k, kn, 0);
        size_t n = h ? lower_ts(h->ev, h->n, t) : 0;
        out[F->slot0] = kl__tf_window(F, h ? h->ev : NULL, n, t, counts);
        pthread_rwlock_unlock(lk);
    }
    if (counts) counts->rows++;
    return KL_OK;
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
