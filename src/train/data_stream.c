/* The epoch order of a Parquet training source read by row group
 * (docs/training.md, "Parquet by row group"), so that a rank decodes only the
 * row groups holding its rows and holds a few of them at a time, never the
 * dataset. The order is a function of (seed, epoch) and of the spec only
 * (batch_size, drop_last, train.distributed.micro_batches), never of the rank
 * count:
 *   1. the units (row groups with training rows) in a permutation of (seed,
 *      epoch), each unit's rows in a permutation of (seed, epoch, unit) (no
 *      shuffle: file order), concatenated: the sequence Q of the epoch's rows;
 *   2. Q is cut into S = micro_batches streams, consecutive stretches; stream
 *      k holds exactly the rows that leaf k (rows [kL, kL + L) of every
 *      global batch, L = ceil(B / S)) takes over the epoch's steps, so the
 *      epoch holds every row once (drop_last: the tail of Q is not used);
 *   3. batch b's leaf k is stream k's next rows.
 * A rank whose rows are the leaves of a block of streams (the deterministic
 * mode's leaves, or a fast-mode rank's B / N rows when S / N is whole) reads
 * only the row groups of its stretch of Q, about 1 / N of them (a row group
 * cut by a stream boundary is decoded by both neighbours). Decoded units are
 * kept in a small LRU cache (cfg.cache units). */
#include <stdlib.h>
#include <string.h>

#include "train/train_data.h"

typedef struct {
    int64_t unit; /* -1: empty */
    int64_t perm_epoch;
    tr_rowset rs;
    int64_t *rowid, *perm;
    uint64_t tick;
} st_entry;

struct tr_stream {
    tr_pqs *src;
    tr_stream_cfg c;
    int64_t U, ntr, L, full, rem;
    int64_t *useq, *upre; /* this epoch's unit order and prefix sums of its rows */
    int64_t *ck, *start;  /* per stream: rows per full batch, first row in Q */
    int64_t epoch;
    st_entry *ent;
    uint64_t tick;
    int last; /* entry of the last row */
    tr_stream_stats stats;
};

static uint64_t epoch_key(const tr_stream *st, int64_t epoch, uint64_t what) {
    return st->c.seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch * 0xD1B54A32D192ED03ull + what * 0x94D049BB133111EBull +
        0x5eed;
}

static void shuffle(int64_t *v, int64_t n, uint64_t key) {
    kl_rng r;
    kl_rng_seed(&r, key);
    kl_rng_shuffle_i64(&r, v, n);
}

static void rowset_free(tr_rowset *rs) {
    kl_mem_free(rs->x);
    kl_mem_free(rs->yi);
    kl_mem_free(rs->yf);
    memset(rs, 0, sizeof *rs);
}

void kl__train_stream_free(tr_stream *st) {
    if (!st) return;
    for (int i = 0; st->ent && i < st->c.cache; i++) {
        rowset_free(&st->ent[i].rs);
        free(st->ent[i].rowid);
        free(st->ent[i].perm);
    }
    free(st->ent);
    free(st->useq);
    free(st->upre);
    free(st->ck);
    free(st->start);
    free(st);
}

/* Rows per stream: leaf k's rows in a full batch (ck) and in the last one. */
static void streams_plan(tr_stream *st) {
    int64_t B = st->c.B, S = st->c.streams, L = st->L, at = 0;
    for (int64_t k = 0; k < S; k++) {
        st->ck[k] = KL_MAX(0, KL_MIN(L, B - k * L));
        int64_t last = KL_MAX(0, KL_MIN(L, st->rem - k * L));
        st->start[k] = at;
        at += st->full * st->ck[k] + last;
    }
}

int kl__train_stream_new(tr_pqs *src, const tr_stream_cfg *cfg, tr_stream **out, kl_err *e) {
    *out = NULL;
    tr_stream *st = calloc(1, sizeof *st);
    if (!st) return kl_err_set(e, KL_ENOMEM, "out of memory");
    st->src = src;
    st->c = *cfg;
    if (st->c.streams < 1) st->c.streams = 1;
    if (st->c.cache < 2) st->c.cache = 2;
    st->U = kl__train_pqs_units(src);
    st->ntr = kl__train_pqs_rows(src);
    st->L = (cfg->B + st->c.streams - 1) / st->c.streams;
    st->full = st->ntr / cfg->B;
    st->rem = cfg->drop_last ? 0 : st->ntr % cfg->B;
    st->epoch = -1;
    st->last = -1;
    st->useq = malloc((size_t)(st->U + 1) * 8);
    st->upre = malloc((size_t)(st->U + 2) * 8);
    st->ck = calloc((size_t)st->c.streams, 8);
    st->start = calloc((size_t)st->c.streams, 8);
    st->ent = calloc((size_t)st->c.cache, sizeof *st->ent);
    if (!st->useq || !st->upre || !st->ck || !st->start || !st->ent) {
        kl__train_stream_free(st);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < st->c.cache; i++) st->ent[i].unit = -1;
    streams_plan(st);
    *out = st;
    return KL_OK;
}

/* The unit order of an epoch and its prefix sums. */
static void epoch_set(tr_stream *st, int64_t epoch) {
    for (int64_t u = 0; u < st->U; u++) st->useq[u] = u;
    if (st->c.shuffle) shuffle(st->useq, st->U, epoch_key(st, epoch, 0));
    st->upre[0] = 0;
    for (int64_t j = 0; j < st->U; j++) st->upre[j + 1] = st->upre[j] + kl__train_pqs_unit_rows(st->src, st->useq[j]);
    st->epoch = epoch;
}

/* Unit u decoded (the cache's entry), its rows in the epoch's order. */
static int unit_get(tr_stream *st, int64_t u, st_entry **out, kl_err *e) {
    int at = -1, old = 0;
    if (st->last >= 0 && st->ent[st->last].unit == u) at = st->last;
    for (int i = 0; at < 0 && i < st->c.cache; i++) {
        if (st->ent[i].unit == u) at = i;
        else if (st->ent[i].tick < st->ent[old].tick) old = i;
    }
    st_entry *en;
    int64_t n = kl__train_pqs_unit_rows(st->src, u);
    if (at < 0) { /* decode it into the least recently used entry */
        at = old;
        en = &st->ent[at];
        rowset_free(&en->rs);
        free(en->rowid);
        free(en->perm);
        en->unit = -1;
        en->rowid = malloc((size_t)(n + 1) * 8);
        en->perm = malloc((size_t)(n + 1) * 8);
        if (!en->rowid || !en->perm) return kl_err_set(e, KL_ENOMEM, "out of memory");
        tr_array X, Y;
        int rc = kl__train_pqs_read(st->src, u, &X, &Y, en->rowid, e);
        if (!rc && (rc = st->c.conv(st->c.ctx, &X, &Y, &en->rs, e))) { /* its rows are numbered within the unit */
            char where[600];
            kl__train_pqs_unit_name(st->src, u, where, sizeof where);
            kl_err_prefix(e, "%s, its training rows in file order", where);
        }
        if (rc) return rc;
        if (en->rs.n != n)
            return kl_err_set(e, KL_EINTERNAL, "row group unit %lld: %lld rows, %lld expected", (long long)u,
                              (long long)en->rs.n, (long long)n);
        en->unit = u;
        en->perm_epoch = -1;
    }
    en = &st->ent[at];
    if (en->perm_epoch != st->epoch) {
        for (int64_t i = 0; i < n; i++) en->perm[i] = i;
        if (st->c.shuffle) shuffle(en->perm, n, epoch_key(st, st->epoch, (uint64_t)u + 1));
        en->perm_epoch = st->epoch;
    }
    en->tick = ++st->tick;
    st->last = at;
    *out = en;
    return KL_OK;
}

/* Position q of Q: its unit (binary search over the prefix sums) and row. */
static void q_locate(const tr_stream *st, int64_t q, int64_t *unit, int64_t *off) {
    int64_t lo = 0, hi = st->U - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (st->upre[mid] <= q) lo = mid;
        else hi = mid - 1;
    }
    *unit = st->useq[lo];
    *off = q - st->upre[lo];
}

int kl__train_stream_rows(tr_stream *st, int64_t epoch, int64_t P0, int64_t n, float *x, int64_t *yi, float *yf,
                          kl_err *e) {
    if (st->epoch != epoch) epoch_set(st, epoch);
    int64_t B = st->c.B, L = st->L, F = st->c.F, K = st->c.K;
    for (int64_t r = 0; r < n; r++) {
        int64_t P = P0 + r, b = P / B, p = P % B, k = p / L, i = p % L;
        int64_t q = st->start[k] + b * st->ck[k] + i, u, off;
        if (q < 0 || q >= st->upre[st->U])
            return kl_err_set(e, KL_EINTERNAL, "epoch %lld: row %lld of the order is beyond its %lld rows",
                              (long long)epoch, (long long)P, (long long)st->upre[st->U]);
        q_locate(st, q, &u, &off);
        st_entry *en = NULL;
        int rc = unit_get(st, u, &en, e);
        if (rc) return rc;
        int64_t j = en->perm[off];
        memcpy(x + r * F, en->rs.x + j * F, (size_t)F * 4);
        if (yi && en->rs.yi) yi[r] = en->rs.yi[j];
        if (yf && en->rs.yf) memcpy(yf + r * K, en->rs.yf + j * K, (size_t)K * 4);
        double g = (double)en->rowid[j] + 1;
        st->stats.taken++;
        st->stats.sum += g;
        st->stats.sumsq += g * g;
    }
    return KL_OK;
}

int kl__train_stream_cache_grow(tr_stream *st, int cache, kl_err *e) {
    if (cache <= st->c.cache) return KL_OK;
    st_entry *ent = realloc(st->ent, (size_t)cache * sizeof *ent);
    if (!ent) return kl_err_set(e, KL_ENOMEM, "out of memory");
    memset(ent + st->c.cache, 0, (size_t)(cache - st->c.cache) * sizeof *ent);
    for (int i = st->c.cache; i < cache; i++) ent[i].unit = -1;
    st->ent = ent;
    st->c.cache = cache;
    return KL_OK;
}

void kl__train_stream_stats_get(const tr_stream *st, tr_stream_stats *out) {
    *out = st->stats;
    int64_t rows, units;
    kl__train_pqs_decoded(st->src, &rows, &units);
    out->rows_decoded = (double)rows;
    out->units_decoded = (double)units;
}
