/* Grouped aggregation over Parquet vector scans (kl_pq_group_by):
 * SELECT key, count(*), count(v), sum(v), min(v), max(v) GROUP BY key.
 * Dictionary-coded string keys are aggregated on their codes (one partial
 * per dictionary entry per row group), then each distinct string is looked
 * up once; other keys go through a hash table per row. Partials combine in
 * row-group order, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "data/parquet_int.h"
#include "keel/data.h"

typedef struct {
    kl_pq_group *g; size_t n, cap;
    uint32_t *slot; size_t nslot;      /* open addressing: group index + 1, 0 = empty */
    uint64_t *hash;                    /* per group */
    kl_buf keys;                       /* string key bytes */
    size_t *key_off;                   /* per group: offset of its bytes in keys */
    /* per row group partials of coded keys */
    uint64_t *prow, *pcnt; double *psum, *pmin, *pmax; size_t pcap;
    double *tmp; size_t tmp_cap;       /* values converted to double */
    kl_col_type key_type, value_type;  /* of the first call (later calls must match) */
    int has_key, has_value;
    int value_unsigned;                /* UINT64 values (the INT64 bit pattern) */
} agg;

static uint64_t key_hash(const kl_pq_value *k) {
    if (k->is_null) return 0x9E3779B97F4A7C15ull;
    if (k->type == KL_COL_STRING || k->type == KL_COL_BINARY) return kl_hash64(k->s, k->n);
    return kl_hash64(&k->i, sizeof k->i);
}

static int key_eq(const agg *a, size_t gi, const kl_pq_value *k) {
    const kl_pq_value *x = &a->g[gi].key;
    if (x->is_null || k->is_null) return x->is_null == k->is_null;
    if (k->type == KL_COL_STRING || k->type == KL_COL_BINARY)
        return x->n == k->n && (k->n == 0 || !memcmp(a->keys.data + a->key_off[gi], k->s, k->n));
    return x->i == k->i;
}

static int rehash(agg *a) {
    size_t ns = a->nslot ? a->nslot * 2 : 64;
    uint32_t *s = calloc(ns, sizeof *s);
    if (!s) return KL_ENOMEM;
    for (size_t i = 0; i < a->n; i++) {
        size_t h = (size_t)a->hash[i] & (ns - 1);
        while (s[h]) h = (h + 1) & (ns - 1);
        s[h] = (uint32_t)i + 1;
    }
    free(a->slot);
    a->slot = s;
    a->nslot = ns;
    return KL_OK;
}

/* Index of k's group, created when new; -1 when out of memory. */
static long find_group(agg *a, const kl_pq_value *k) {
    uint64_t hv = key_hash(k);
    if (a->nslot) {
        for (size_t h = (size_t)hv & (a->nslot - 1);; h = (h + 1) & (a->nslot - 1)) {
            uint32_t s = a->slot[h];
            if (!s) break;
            if (a->hash[s - 1] == hv && key_eq(a, s - 1, k)) return (long)s - 1;
        }
    }
    if (a->n + 1 > a->nslot / 2 && rehash(a)) return -1;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        kl_pq_group *g = realloc(a->g, nc * sizeof *g);
        if (!g) return -1;
        a->g = g;
        uint64_t *hs = realloc(a->hash, nc * sizeof *hs);
        if (!hs) return -1;
        a->hash = hs;
        size_t *ko = realloc(a->key_off, nc * sizeof *ko);
        if (!ko) return -1;
        a->key_off = ko;
        a->cap = nc;
    }
    size_t gi = a->n;
    kl_pq_group *g = &a->g[gi];
    memset(g, 0, sizeof *g);
    g->key = *k;
    g->min = g->max = NAN;
    a->key_off[gi] = a->keys.len;
    if (!k->is_null && (k->type == KL_COL_STRING || k->type == KL_COL_BINARY)) {
        if (kl_buf_append(&a->keys, k->s ? k->s : "", k->n)) return -1;
        g->key.s = NULL; /* pointed at the buffer when done (it may move) */
    }
    a->hash[gi] = hv;
    size_t h = (size_t)hv & (a->nslot - 1);
    while (a->slot[h]) h = (h + 1) & (a->nslot - 1);
    a->slot[h] = (uint32_t)gi + 1;
    a->n++;
    return (long)gi;
}

static inline void add_value(kl_pq_group *g, double x) {
    g->count++;
    if (isnan(x)) return;
    g->sum += x;
    if (!(x >= g->min)) g->min = x;  /* also when min is still NaN */
    if (!(x <= g->max)) g->max = x;
}

/* The value vector as doubles (NULL when it already is float64). */
static const double *as_double(agg *a, const kl_pq_vector *v, size_t n) {
    if (v->type == KL_COL_FLOAT64) return v->values;
    if (n > a->tmp_cap) {
        double *t = kl_mem_realloc(a->tmp, n * sizeof *t, KL_TAG_WORKSPACE);
        if (!t) return NULL;
        a->tmp = t;
        a->tmp_cap = n;
    }
    kl_column c;
    memset(&c, 0, sizeof c);
    c.type = v->type;
    c.values = (void *)v->values;
    c.len = n;
    if (a->value_unsigned) for (size_t i = 0; i < n; i++) a->tmp[i] = (double)((const uint64_t *)v->values)[i];
    else for (size_t i = 0; i < n; i++) a->tmp[i] = kl_column_get_f64(&c, i);
    return a->tmp;
}

static kl_pq_value row_key(const kl_pq_vector *k, size_t i) {
    kl_pq_value x;
    memset(&x, 0, sizeof x);
    x.type = k->type;
    if (k->valid && !k->valid[i]) { x.is_null = 1; return x; }
    if (k->codes) {
        const kl_column *d = k->dict;
        x.s = d->data + d->offsets[k->codes[i]];
        x.n = (size_t)(d->offsets[k->codes[i] + 1] - d->offsets[k->codes[i]]);
    } else if (k->offsets) {
        x.s = k->data + k->offsets[i];
        x.n = (size_t)(k->offsets[i + 1] - k->offsets[i]);
    } else {
        kl_column c;
        memset(&c, 0, sizeof c);
        c.type = k->type;
        c.values = (void *)k->values;
        c.len = i + 1;
        x.i = kl_column_get_i64(&c, i);
    }
    return x;
}

/* Dictionary-coded key: partials per code, then one lookup per used code. */
static int agg_coded(agg *a, const kl_pq_vector *k, const kl_pq_vector *v, const double *x, size_t n) {
    size_t nd = k->dict->len;
    if (nd + 1 > a->pcap) {
        size_t c = nd + 1;
        free(a->prow); free(a->pcnt); free(a->psum); free(a->pmin); free(a->pmax);
        a->prow = malloc(c * sizeof *a->prow); a->pcnt = malloc(c * sizeof *a->pcnt);
        a->psum = malloc(c * sizeof *a->psum); a->pmin = malloc(c * sizeof *a->pmin); a->pmax = malloc(c * sizeof *a->pmax);
        a->pcap = c;
        if (!a->prow || !a->pcnt || !a->psum || !a->pmin || !a->pmax) { a->pcap = 0; return KL_ENOMEM; }
    }
    /* code nd = the null key */
    memset(a->prow, 0, (nd + 1) * sizeof *a->prow);
    memset(a->pcnt, 0, (nd + 1) * sizeof *a->pcnt);
    memset(a->psum, 0, (nd + 1) * sizeof *a->psum);
    for (size_t c = 0; c <= nd; c++) a->pmin[c] = a->pmax[c] = NAN;
    const uint32_t *codes = k->codes;
    const uint8_t *kv = k->valid, *vv = v ? v->valid : NULL;
    if (!kv && !v) {
        for (size_t i = 0; i < n; i++) a->prow[codes[i]]++;
    } else {
        uint64_t *prow = a->prow, *pcnt = a->pcnt;
        double *psum = a->psum, *pmin = a->pmin, *pmax = a->pmax;
        for (size_t i = 0; i < n; i++) {
            size_t c = kv && !kv[i] ? nd : codes[i];
            prow[c]++;
            if (!x || (vv && !vv[i])) continue;
            double y = x[i];
            pcnt[c]++;
            if (isnan(y)) continue;
            psum[c] += y;
            if (!(y >= pmin[c])) pmin[c] = y;  /* NaN start: the first value wins */
            if (!(y <= pmax[c])) pmax[c] = y;
        }
    }
    /* merge in order of first appearance within the row group */
    size_t left = 0;
    for (size_t c = 0; c <= nd; c++) left += a->prow[c] != 0;
    for (size_t i = 0; i < n && left; i++) {
        size_t c = kv && !kv[i] ? nd : codes[i];
        if (a->prow[c] == 0) continue;
        kl_pq_value key = row_key(k, i);
        long gi = find_group(a, &key);
        if (gi < 0) return KL_ENOMEM;
        kl_pq_group *g = &a->g[gi];
        g->rows += a->prow[c];
        g->count += a->pcnt[c];
        g->sum += a->psum[c];
        if (!isnan(a->pmin[c]) && (isnan(g->min) || a->pmin[c] < g->min)) g->min = a->pmin[c];
        if (!isnan(a->pmax[c]) && (isnan(g->max) || a->pmax[c] > g->max)) g->max = a->pmax[c];
        a->prow[c] = 0;
        left--;
    }
    return KL_OK;
}

static void agg_free(agg *a) {
    free(a->g); free(a->slot); free(a->hash); free(a->key_off);
    kl_buf_free(&a->keys);
    free(a->prow); free(a->pcnt); free(a->psum); free(a->pmin); free(a->pmax);
    kl_mem_free(a->tmp);
}

int kl_pq_group_by(kl_pq_reader *r, const char *key, const char *value, kl_pq_groups *out, kl_err *e) {
    const char *names[2];
    size_t nn = 0;
    int ki = -1, vi = -1;
    if (key) { ki = (int)nn; names[nn++] = key; }
    if (value) { vi = (int)nn; names[nn++] = value; }
    int rc;
    agg *a = out->priv;
    if (!a) {
        memset(out, 0, sizeof *out);
        if (!(a = calloc(1, sizeof *a))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        kl_buf_init(&a->keys);
        out->priv = a;
        a->has_key = key != NULL;
        a->has_value = value != NULL;
    } else if (a->has_key != (key != NULL) || a->has_value != (value != NULL)) {
        rc = kl_err_set(e, KL_EINVAL, "group by: key/value differ from the earlier call");
        goto fail;
    }
    int first = out->n == 0 && out->rows == 0;
    if (nn == 0) {
        /* counts only, no key: any one column gives the row count */
        if (kl_pq_num_columns(r) == 0) { rc = kl_err_set(e, KL_EINVAL, "group by: the file has no columns"); goto fail; }
        if ((rc = kl_pq_select(r, NULL, 0, e))) goto fail;
        if (kl_pq_num_selected(r) > 1) {
            names[0] = kl_pq_selected(r, 0)->name;
            if ((rc = kl_pq_select(r, names, 1, e))) goto fail;
        }
    } else if ((rc = kl_pq_select(r, names, nn, e))) goto fail;
    if (ki >= 0) {
        kl_col_type t = kl_pq_selected(r, (size_t)ki)->type;
        if (t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64) { rc = kl_err_set(e, KL_ETYPE, "group by %s: a %s column cannot be a group key", key, kl_col_type_name(t)); goto fail; }
        if (!first && t != a->key_type) { rc = kl_err_set(e, KL_ETYPE, "group by %s: %s here, %s in the earlier files", key, kl_col_type_name(t), kl_col_type_name(a->key_type)); goto fail; }
        a->key_type = t;
    }
    if (vi >= 0) {
        kl_col_type t = kl_pq_selected(r, (size_t)vi)->type;
        if (t == KL_COL_STRING || t == KL_COL_BINARY) { rc = kl_err_set(e, KL_ETYPE, "group by: value column %s is %s, not numeric", value, kl_col_type_name(t)); goto fail; }
        a->value_type = t;
        a->value_unsigned = kl_pq_selected(r, (size_t)vi)->is_unsigned;
    }
    kl_pq_rewind(r);
    for (;;) {
        const kl_pq_vector *vec;
        size_t n;
        if ((rc = kl_pq_next_vectors(r, &vec, &n, e))) goto fail;
        if (n == 0) break;
        out->rows += n;
        const kl_pq_vector *kv = ki >= 0 ? &vec[ki] : NULL, *vv = vi >= 0 ? &vec[vi] : NULL;
        const double *x = NULL;
        if (vv && !(x = as_double(a, vv, n))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
        if (kv && kv->codes) {
            if ((rc = agg_coded(a, kv, vv, x, n))) { kl_err_set(e, rc, "out of memory"); goto fail; }
            continue;
        }
        if (!kv) {
            kl_pq_value nokey;
            memset(&nokey, 0, sizeof nokey);
            nokey.is_null = 1;
            long gi = a->n ? 0 : find_group(a, &nokey);
            if (gi < 0) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
            kl_pq_group *g = &a->g[gi];
            g->rows += n;
            if (x) for (size_t i = 0; i < n; i++) if (!vv->valid || vv->valid[i]) add_value(g, x[i]);
            continue;
        }
        long last = -1;
        kl_pq_value lastk;
        memset(&lastk, 0, sizeof lastk);
        for (size_t i = 0; i < n; i++) {
            kl_pq_value k = row_key(kv, i);
            /* runs of one key (sorted or partitioned data) skip the hash */
            long gi = last >= 0 && k.is_null == lastk.is_null && k.n == lastk.n && k.i == lastk.i &&
                      (!k.n || !memcmp(k.s, lastk.s, k.n)) ? last : find_group(a, &k);
            if (gi < 0) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
            kl_pq_group *g = &a->g[gi];
            g->rows++;
            if (x && (!vv->valid || vv->valid[i])) add_value(g, x[i]);
            last = gi;
            lastk = k;
        }
    }
    kl_pq_rewind(r);
    for (size_t i = 0; i < a->n; i++) {
        kl_pq_value *k = &a->g[i].key;
        if (!k->is_null && (k->type == KL_COL_STRING || k->type == KL_COL_BINARY)) k->s = a->keys.data ? a->keys.data + a->key_off[i] : "";
        else k->s = NULL;
    }
    out->n = a->n;
    out->g = a->g;
    return KL_OK;
fail:
    kl_pq_rewind(r);
    kl_pq_groups_clear(out);
    return rc;
}

void kl_pq_groups_clear(kl_pq_groups *g) {
    if (!g) return;
    if (g->priv) { agg_free(g->priv); free(g->priv); }
    memset(g, 0, sizeof *g);
}
