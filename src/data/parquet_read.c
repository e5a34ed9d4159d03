/* Parquet reader, part 2: the data path. Projection and predicates, row
 * group skipping (chunk statistics) and page skipping (column index), page
 * decoding (PLAIN, dictionaries, RLE, DELTA_*, BYTE_STREAM_SPLIT; data page
 * v1 and v2; CRC checks), conversion into kl_column, exact filtering,
 * batched reads and the row-at-a-time adapter. Every read is bounds-checked:
 * a malformed file gives KL_EPARSE naming the column, never a crash. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "data/parquet_read_int.h"

typedef struct { int64_t a, b; } range;   /* rows [a, b) of a row group */
#define PQ_PREFETCH 4
typedef struct { const uint8_t *p; uint32_t n; } bref;
typedef struct dec dec;
typedef struct pq_vout pq_vout;
static void dec_free(dec *d);

struct dec {
    /* scratch, reused across pages and chunks */
    uint8_t *page; size_t page_cap;
    uint32_t *lev; size_t lev_cap;
    uint8_t *pres; size_t pres_cap;      /* per row: 1 = value present (level == max) */
    uint8_t *fx; size_t fx_cap;          /* fixed-size physical values */
    bref *br; size_t br_cap;             /* byte-array physical values */
    int64_t *tmp; size_t tmp_cap;
    uint32_t *idx; size_t idx_cap;       /* dictionary indexes */
    pq_buf scratch;                      /* built strings (DELTA_BYTE_ARRAY, BSS FLBA) */
    /* dictionary */
    uint8_t *dpage; size_t dpage_cap;
    uint8_t *dfx; size_t dfx_cap;
    bref *dbr; size_t dbr_cap;
    size_t dn;
    int has_dict;
};

/* Dictionary codes of a string column chunk (vector scans): while every
 * data page of the chunk is dictionary-encoded, rows hold codes into dict
 * instead of materialized strings. */
struct pq_vout {
    uint32_t *codes; size_t codes_cap;   /* one per row, 0 where null */
    kl_column *dict;                     /* the dictionary's values */
    int coded;                           /* codes (and dict) valid for the chunk */
};

struct pq_scan {
    size_t rg;                 /* next row group */
    size_t rg_end;             /* 0, or the row group the scan stops before (kl_pq_read_row_group) */
    size_t *need; size_t nneed;/* leaves decoded per row group (selected ∪ predicate) */
    size_t *sel_need;          /* position in need of each selected column */
    kl_column **cols;          /* decoded rows of the current row group, per need */
    uint32_t *selv; size_t nselv, capselv; int use_selv;
    int swap_ok;               /* selected leaves are distinct and not predicate-only */
    /* prefetch without predicates: up to PQ_PREFETCH row groups decoded in one
     * parallel pass (balances columns of unequal cost over the threads) */
    kl_column **slot[PQ_PREFETCH];
    size_t slot_rows[PQ_PREFETCH], slot_rg[PQ_PREFETCH], nslot, slot_at;
    size_t count, pos;         /* rows available in the current row group, next */
    int loaded;
    kl_column **rowbuf; size_t row_pos, row_n;
    dec *scratch; size_t nscratch;     /* per pool worker, reused */
    int vec;                           /* 1: vector scan (kl_pq_next_vectors) */
    size_t cur_slot;                   /* slot of s->cols (prefetch) */
    pq_vout *vout[PQ_PREFETCH];        /* vector scans: codes per slot and need */
    kl_pq_vector *vecs;                /* kl_pq_next_vectors without predicates */
    kl_column **vcols;                 /* kl_pq_next_vectors with predicates */
};

/* ==================================================================
 * Projection and predicates
 * ================================================================== */

static void scan_free(pq_reader_t *R);

static void scan_reset(pq_reader_t *R) {
    scan_free(R);
}

static void scan_free(pq_reader_t *R) {
    pq_scan *s = R->scan;
    if (s) {
        for (int k = 0; k < PQ_PREFETCH; k++) {
            if (!s->slot[k]) continue;
            for (size_t i = 0; i < s->nneed; i++) kl_column_free(s->slot[k][i]);
            free(s->slot[k]);
        }
        if (s->rowbuf) for (size_t i = 0; i < R->nsel; i++) kl_column_free(s->rowbuf[i]);
        free(s->rowbuf);
        for (int k = 0; k < PQ_PREFETCH; k++) {
            if (!s->vout[k]) continue;
            for (size_t i = 0; i < s->nneed; i++) { kl_mem_free(s->vout[k][i].codes); kl_column_free(s->vout[k][i].dict); }
            free(s->vout[k]);
        }
        if (s->vcols) for (size_t i = 0; i < R->nsel; i++) kl_column_free(s->vcols[i]);
        free(s->vcols);
        free(s->vecs);
        for (size_t i = 0; i < s->nscratch; i++) dec_free(&s->scratch[i]);
        kl_mem_free(s->scratch);
        free(s->need); free(s->sel_need); kl_mem_free(s->selv);
        free(s);
        R->scan = NULL;
    }
}

static void free_preds(pq_reader_t *R) {
    for (size_t i = 0; i < R->npreds; i++) {
        for (size_t k = 0; k < R->preds[i].n; k++) free((void *)R->preds[i].vals[k].s);
        free(R->preds[i].vals);
    }
    free(R->preds);
    R->preds = NULL;
    R->npreds = 0;
}

int kl_pq_select(kl_pq_reader *r, const char *const *names, size_t n, kl_err *e) {
    pq_reader_t *R = (pq_reader_t *)r;
    scan_reset(R);
    size_t *sel = malloc((names ? n : R->ntop) * sizeof *sel + 1);
    if (!sel) return kl_err_set(e, KL_ENOMEM, "out of memory");
    size_t k = 0;
    if (!names) {
        for (size_t i = 0; i < R->ntop; i++)
            if (kl__pq_colinfo(R, R->top[i])->supported) sel[k++] = R->top[i];
    } else {
        for (size_t j = 0; j < n; j++) {
            int i = kl_pq_find_column(r, names[j]);
            if (i < 0) {
                kl_buf b; kl_buf_init(&b);
                for (size_t q = 0; q < R->nleaves && q < 20; q++) kl_buf_printf(&b, "%s%s", q ? ", " : "", R->leaves[q].name);
                kl_err_set(e, KL_ENOTFOUND, "%s: no column \"%s\" (columns: %s)", R->name, names[j], b.data ? b.data : "");
                kl_buf_free(&b);
                free(sel);
                return KL_ENOTFOUND;
            }
            if (!kl__pq_colinfo(R, (size_t)i)->supported) {
                free(sel);
                return kl_err_set(e, KL_EUNSUPPORTED, "%s: %s", R->name, kl__pq_colinfo(R, (size_t)i)->why);
            }
            sel[k++] = (size_t)i;
        }
    }
    free(R->sel);
    R->sel = sel;
    R->nsel = k;
    return KL_OK;
}

size_t kl_pq_num_selected(const kl_pq_reader *r) { return ((const pq_reader_t *)r)->nsel; }
const kl_pq_column_info *kl_pq_selected(const kl_pq_reader *r, size_t i) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    return i < R->nsel ? kl__pq_colinfo(R, R->sel[i]) : NULL;
}

int kl_pq_filter(kl_pq_reader *r, const char *column, kl_pq_op op, const kl_pq_value *vals, size_t nvals, kl_err *e) {
    pq_reader_t *R = (pq_reader_t *)r;
    int ci = kl_pq_find_column(r, column);
    if (ci < 0) return kl_err_set(e, KL_ENOTFOUND, "%s: filter: no column \"%s\"", R->name, column);
    if ((size_t)ci >= R->nleaves)
        return kl_err_set(e, KL_EUNSUPPORTED,
                          "%s: filter: %s is a nested column; filters on nested columns are not supported", R->name,
                          column);
    pq_leaf *L = &R->leaves[ci];
    if (!L->info.supported) return kl_err_set(e, KL_EUNSUPPORTED, "%s: filter: %s", R->name, L->info.why);
    size_t want = op == KL_PQ_BETWEEN ? 2 : op == KL_PQ_IN ? nvals : 1;
    if ((op == KL_PQ_IN && nvals == 0) || nvals != want || (unsigned)op > KL_PQ_IN)
        return kl_err_set(e, KL_EINVAL, "filter on %s: wrong number of values (%zu)", column, nvals);
    int col_str = L->type == KL_COL_STRING || L->type == KL_COL_BINARY;
    for (size_t i = 0; i < nvals; i++) {
        int v_str = vals[i].type == KL_COL_STRING || vals[i].type == KL_COL_BINARY;
        if (col_str != v_str)
            return kl_err_set(e, KL_ETYPE, "filter on %s (%s): value %zu is a %s", column, kl_col_type_name(L->type), i, kl_col_type_name(vals[i].type));
    }
    pq_pred *np = realloc(R->preds, (R->npreds + 1) * sizeof *np);
    if (!np) return kl_err_set(e, KL_ENOMEM, "out of memory");
    R->preds = np;
    pq_pred *p = &R->preds[R->npreds];
    p->col = (size_t)ci;
    p->op = op;
    p->n = nvals;
    p->vals = calloc(nvals, sizeof *p->vals);
    if (!p->vals) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < nvals; i++) {
        p->vals[i] = vals[i];
        p->vals[i].s = NULL;
        if (col_str) {
            char *c = malloc(vals[i].n + 1);
            if (!c) { free(p->vals); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
            if (vals[i].n) memcpy(c, vals[i].s, vals[i].n);
            c[vals[i].n] = 0;
            p->vals[i].s = c;
        }
    }
    R->npreds++;
    scan_reset(R);
    return KL_OK;
}

void kl__pq_read_free(pq_reader_t *R) {
    scan_free(R);
    free_preds(R);
    free(R->sel);
    R->sel = NULL;
    R->nsel = 0;
}

void kl_pq_filter_clear(kl_pq_reader *r) {
    pq_reader_t *R = (pq_reader_t *)r;
    free_preds(R);
    scan_reset(R);
}

void kl_pq_scan_stats_get(const kl_pq_reader *r, kl_pq_scan_stats *out) { *out = ((const pq_reader_t *)r)->ss; }

/* Could a value in [mn, mx] satisfy p? */
static int may_match(const pq_pred *p, kl_col_type t, const kl_pq_value *mn, const kl_pq_value *mx) {
    const kl_pq_value *v = p->vals;
    switch (p->op) {
    case KL_PQ_EQ: return kl__pq_value_cmp(t, &v[0], mn) >= 0 && kl__pq_value_cmp(t, &v[0], mx) <= 0;
    case KL_PQ_LT: return kl__pq_value_cmp(t, mn, &v[0]) < 0;
    case KL_PQ_LE: return kl__pq_value_cmp(t, mn, &v[0]) <= 0;
    case KL_PQ_GT: return kl__pq_value_cmp(t, mx, &v[0]) > 0;
    case KL_PQ_GE: return kl__pq_value_cmp(t, mx, &v[0]) >= 0;
    case KL_PQ_BETWEEN: return kl__pq_value_cmp(t, mx, &v[0]) >= 0 && kl__pq_value_cmp(t, mn, &v[1]) <= 0;
    case KL_PQ_IN:
        for (size_t i = 0; i < p->n; i++)
            if (kl__pq_value_cmp(t, &v[i], mn) >= 0 && kl__pq_value_cmp(t, &v[i], mx) <= 0) return 1;
        return 0;
    }
    return 1;
}

static int row_match(const pq_pred *p, const kl_column *c, size_t i) {
    if (kl_column_is_null(c, i)) return 0;
    kl_pq_value x;
    memset(&x, 0, sizeof x);
    x.type = c->type;
    if (c->type == KL_COL_STRING || c->type == KL_COL_BINARY) x.s = kl_column_get_str(c, i, &x.n);
    else if (c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64) { x.f = kl_column_get_f64(c, i); if (isnan(x.f)) return 0; }
    else x.i = kl_column_get_i64(c, i);
    return may_match(p, c->type, &x, &x);
}

/* ==================================================================
 * Page decoding helpers
 * ================================================================== */

static uint64_t get_bits(const uint8_t *p, size_t bit, int w) {
    uint64_t v = 0;
    int got = 0;
    while (got < w) {
        size_t byte = bit >> 3;
        int off = (int)(bit & 7);
        int take = KL_MIN(8 - off, w - got);
        v |= (uint64_t)((p[byte] >> off) & ((1u << take) - 1)) << got;
        got += take;
        bit += (size_t)take;
    }
    return v;
}

static int uvar(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (p >= end) return -1;
        uint8_t c = *p++;
        v |= (uint64_t)(c & 0x7F) << s;
        if (!(c & 0x80)) { *pp = p; *out = v; return 0; }
    }
    return -1;
}

/* DELTA_BINARY_PACKED: exactly n values into out; *after = end of the data. */
static int dbp_decode(const uint8_t *p, const uint8_t *end, int64_t *out, size_t n, const uint8_t **after) {
    uint64_t bs, mbc, total, zf;
    if (uvar(&p, end, &bs) || uvar(&p, end, &mbc) || uvar(&p, end, &total) || uvar(&p, end, &zf)) return -1;
    if (bs == 0 || bs % 128 || mbc == 0 || bs % mbc || (bs / mbc) % 32 || mbc > bs) return -1;
    if (total != n) return -1;
    uint64_t vpm = bs / mbc;
    uint64_t last = (zf >> 1) ^ -(zf & 1);
    size_t got = 0;
    if (n) out[got++] = (int64_t)last;
    while (got < n) {
        uint64_t zmd;
        if (uvar(&p, end, &zmd)) return -1;
        uint64_t md = (zmd >> 1) ^ -(zmd & 1);
        if ((uint64_t)(end - p) < mbc) return -1;
        const uint8_t *widths = p;
        p += mbc;
        for (uint64_t m = 0; m < mbc && got < n; m++) {
            int w = widths[m];
            if (w > 64) return -1;
            uint64_t bytes = vpm * (uint64_t)w / 8;
            if (bytes > (uint64_t)(end - p)) {
                /* the last miniblock may be cut short: needs only the bits in use */
                uint64_t need = ((uint64_t)(n - got) * (uint64_t)w + 7) / 8;
                if (need > (uint64_t)(end - p)) return -1;
                bytes = (uint64_t)(end - p);
            }
            uint64_t cnt = KL_MIN(vpm, (uint64_t)(n - got));
            for (uint64_t i = 0; i < cnt; i++) {
                uint64_t d = w ? get_bits(p, (size_t)(i * (uint64_t)w), w) : 0;
                last = last + md + d;
                out[got++] = (int64_t)last;
            }
            p += bytes;
        }
    }
    *after = p;
    return 0;
}


static int grow_(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *q = kl_mem_realloc(*p, nc * elem, KL_TAG_DATASET); /* cached: no page faults per chunk */
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}
#define GROW(ptr, cap, need) grow_((void **)&(ptr), &(cap), (need), sizeof *(ptr))

static void dec_free(dec *d) {
    kl_mem_free(d->page); kl_mem_free(d->lev); kl_mem_free(d->pres); kl_mem_free(d->fx); kl_mem_free(d->br); kl_mem_free(d->tmp); kl_mem_free(d->idx);
    kl__pq_buf_free(&d->scratch);
    kl_mem_free(d->dpage); kl_mem_free(d->dfx); kl_mem_free(d->dbr);
    memset(d, 0, sizeof *d);
}

static size_t phys_size(const pq_leaf *L) {
    switch (L->ptype) {
    case PT_BOOLEAN: return 1;
    case PT_INT32: case PT_FLOAT: return 4;
    case PT_INT64: case PT_DOUBLE: return 8;
    case PT_INT96: return 12;
    default: return 0;
    }
}
static int is_varphys(const pq_leaf *L) { return L->ptype == PT_BYTE_ARRAY || L->ptype == PT_FLBA; }

typedef struct { const pq_reader_t *R; const pq_leaf *L; kl_err *e; const char *where; } ctxt;
#define BAD(c, ...) (kl_err_set((c)->e, KL_EPARSE, __VA_ARGS__), kl_err_prefix((c)->e, "%s: column %s%s", (c)->R->name, (c)->L->name, (c)->where), KL_EPARSE)

/* PLAIN values: nn physical values from [p, end) into fx/br. */
static int decode_plain(ctxt *c, dec *d, const uint8_t *p, const uint8_t *end, size_t nn, uint8_t **fx, bref **br) {
    const pq_leaf *L = c->L;
    size_t avail = (size_t)(end - p);
    if (L->ptype == PT_BOOLEAN) {
        if ((nn + 7) / 8 > avail) return BAD(c, "PLAIN booleans: %zu values need %zu bytes, page has %zu", nn, (nn + 7) / 8, avail);
        if (GROW(d->fx, d->fx_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        for (size_t i = 0; i < nn; i++) d->fx[i] = (p[i >> 3] >> (i & 7)) & 1;
        *fx = d->fx;
        return KL_OK;
    }
    if (L->ptype == PT_BYTE_ARRAY) {
        /* every value has a 4-byte length: a count the page cannot hold is refused before any allocation */
        if (nn > avail / 4)
            return BAD(c, "PLAIN byte arrays: %zu values need at least %zu bytes, page has %zu", nn, nn * 4, avail);
        if (GROW(d->br, d->br_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        for (size_t i = 0; i < nn; i++) {
            if (end - p < 4) return BAD(c, "PLAIN byte array %zu of %zu: truncated length", i, nn);
            uint32_t l; memcpy(&l, p, 4); p += 4;
            if (l > (size_t)(end - p)) return BAD(c, "PLAIN byte array %zu of %zu: length %u exceeds the page", i, nn, l);
            d->br[i].p = p; d->br[i].n = l;
            p += l;
        }
        *br = d->br;
        return KL_OK;
    }
    if (L->ptype == PT_FLBA) {
        size_t w = (size_t)L->type_length;
        if (nn && w * nn / nn != w) return BAD(c, "too many values");
        if (w * nn > avail) return BAD(c, "PLAIN fixed-length values: %zu × %zu bytes, page has %zu", nn, w, avail);
        if (GROW(d->br, d->br_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        for (size_t i = 0; i < nn; i++) { d->br[i].p = p + i * w; d->br[i].n = (uint32_t)w; }
        *br = d->br;
        return KL_OK;
    }
    size_t w = phys_size(L);
    if (w * nn > avail) return BAD(c, "PLAIN values: %zu × %zu bytes, page has %zu", nn, w, avail);
    *fx = (uint8_t *)p;   /* read in place */
    return KL_OK;
}

/* nn dictionary indexes into idx, each checked against the dictionary. */
static int idx_decode(ctxt *c, dec *d, const uint8_t *p, const uint8_t *end, size_t nn, uint32_t *idx) {
    if (!d->has_dict) return BAD(c, "dictionary-encoded page without a dictionary page");
    if (nn == 0) return KL_OK;
    if (p >= end) return BAD(c, "dictionary page data is empty");
    int bw = *p++;
    if (bw > 32) return BAD(c, "dictionary index bit width %d", bw);
    if (kl__pq_rle_decode(p, (size_t)(end - p), bw, idx, nn)) return BAD(c, "dictionary indexes truncated or corrupt");
    uint32_t bad = 0, dn = (uint32_t)KL_MIN(d->dn, (size_t)UINT32_MAX);
    for (size_t i = 0; i < nn; i++) bad |= idx[i] >= dn;
    if (bad)
        for (size_t i = 0; i < nn; i++)
            if (idx[i] >= d->dn) return BAD(c, "dictionary index %u out of range (dictionary has %zu entries)", idx[i], d->dn);
    return KL_OK;
}

static int decode_dict_idx(ctxt *c, dec *d, const uint8_t *p, const uint8_t *end, size_t nn, uint8_t **fx, bref **br) {
    if (GROW(d->idx, d->idx_cap, nn + 8)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
    uint32_t *idx = d->idx;
    int rc = idx_decode(c, d, p, end, nn, idx);
    if (rc || nn == 0) return rc;
    if (!fx && !br) return KL_OK;  /* indexes only (fused path) */
    if (is_varphys(c->L)) {
        if (GROW(d->br, d->br_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        for (size_t i = 0; i < nn; i++) d->br[i] = d->dbr[idx[i]];
        *br = d->br;
    } else {
        size_t w = phys_size(c->L);
        if (GROW(d->fx, d->fx_cap, nn * w + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        if (w == 8) for (size_t i = 0; i < nn; i++) memcpy(d->fx + 8 * i, d->dfx + 8 * (size_t)idx[i], 8);
        else if (w == 4) for (size_t i = 0; i < nn; i++) memcpy(d->fx + 4 * i, d->dfx + 4 * (size_t)idx[i], 4);
        else for (size_t i = 0; i < nn; i++) memcpy(d->fx + w * i, d->dfx + w * (size_t)idx[i], w);
        *fx = d->fx;
    }
    return KL_OK;
}

static int decode_values(ctxt *c, dec *d, int enc, const uint8_t *p, const uint8_t *end, size_t nn, uint8_t **fx, bref **br) {
    const pq_leaf *L = c->L;
    switch (enc) {
    case ENC_PLAIN:
        return decode_plain(c, d, p, end, nn, fx, br);
    case ENC_PLAIN_DICTIONARY: case ENC_RLE_DICTIONARY:
        return decode_dict_idx(c, d, p, end, nn, fx, br);
    case ENC_RLE: {
        if (L->ptype != PT_BOOLEAN) return BAD(c, "RLE encoding of values is only valid for booleans");
        if (end - p < 4) return BAD(c, "RLE booleans: truncated length");
        uint32_t l; memcpy(&l, p, 4); p += 4;
        if (l > (size_t)(end - p)) return BAD(c, "RLE booleans: length %u exceeds the page", l);
        if (GROW(d->idx, d->idx_cap, nn + 8) || GROW(d->fx, d->fx_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        if (kl__pq_rle_decode(p, l, 1, d->idx, nn)) return BAD(c, "RLE booleans truncated or corrupt");
        for (size_t i = 0; i < nn; i++) d->fx[i] = (uint8_t)d->idx[i];
        *fx = d->fx;
        return KL_OK;
    }
    case ENC_DELTA_BINARY_PACKED: {
        if (L->ptype != PT_INT32 && L->ptype != PT_INT64) return BAD(c, "DELTA_BINARY_PACKED on a %s column", L->info.physical);
        if (GROW(d->tmp, d->tmp_cap, nn + 1) || GROW(d->fx, d->fx_cap, nn * 8 + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        const uint8_t *after;
        if (dbp_decode(p, end, d->tmp, nn, &after)) return BAD(c, "DELTA_BINARY_PACKED data truncated or corrupt");
        if (L->ptype == PT_INT64) memcpy(d->fx, d->tmp, nn * 8);
        else for (size_t i = 0; i < nn; i++) { int32_t v = (int32_t)d->tmp[i]; memcpy(d->fx + 4 * i, &v, 4); }
        *fx = d->fx;
        return KL_OK;
    }
    case ENC_DELTA_LENGTH_BYTE_ARRAY: {
        if (L->ptype != PT_BYTE_ARRAY) return BAD(c, "DELTA_LENGTH_BYTE_ARRAY on a %s column", L->info.physical);
        if (GROW(d->tmp, d->tmp_cap, nn + 1) || GROW(d->br, d->br_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        const uint8_t *q;
        if (dbp_decode(p, end, d->tmp, nn, &q)) return BAD(c, "DELTA_LENGTH_BYTE_ARRAY lengths truncated or corrupt");
        for (size_t i = 0; i < nn; i++) {
            int64_t l = d->tmp[i];
            if (l < 0 || l > end - q) return BAD(c, "DELTA_LENGTH_BYTE_ARRAY value %zu: length %lld exceeds the page", i, (long long)l);
            d->br[i].p = q; d->br[i].n = (uint32_t)l;
            q += l;
        }
        *br = d->br;
        return KL_OK;
    }
    case ENC_DELTA_BYTE_ARRAY: {
        if (!is_varphys(L)) return BAD(c, "DELTA_BYTE_ARRAY on a %s column", L->info.physical);
        if (GROW(d->tmp, d->tmp_cap, 2 * nn + 1) || GROW(d->br, d->br_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        int64_t *pre = d->tmp, *suf = d->tmp + nn;
        const uint8_t *q, *q2;
        if (dbp_decode(p, end, pre, nn, &q)) return BAD(c, "DELTA_BYTE_ARRAY prefix lengths truncated or corrupt");
        if (dbp_decode(q, end, suf, nn, &q2)) return BAD(c, "DELTA_BYTE_ARRAY suffix lengths truncated or corrupt");
        uint64_t total = 0, prev = 0;
        const uint8_t *s = q2;
        for (size_t i = 0; i < nn; i++) {
            if (pre[i] < 0 || suf[i] < 0 || (uint64_t)pre[i] > prev) return BAD(c, "DELTA_BYTE_ARRAY value %zu: bad prefix/suffix length", i);
            if ((uint64_t)suf[i] > (uint64_t)(end - s)) return BAD(c, "DELTA_BYTE_ARRAY value %zu: suffix exceeds the page", i);
            s += suf[i];
            prev = (uint64_t)(pre[i] + suf[i]);
            total += prev;
            if (total > ((uint64_t)1 << 34)) return BAD(c, "DELTA_BYTE_ARRAY values too large");
        }
        d->scratch.len = 0;
        if (kl__pq_buf_reserve(&d->scratch, (size_t)total + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        s = q2;
        size_t off = 0, prev_off = 0;
        for (size_t i = 0; i < nn; i++) {
            memmove(d->scratch.p + off, d->scratch.p + prev_off, (size_t)pre[i]);
            memcpy(d->scratch.p + off + pre[i], s, (size_t)suf[i]);
            s += suf[i];
            prev_off = off;
            d->br[i].n = (uint32_t)(pre[i] + suf[i]);
            off += d->br[i].n;
        }
        off = 0;
        for (size_t i = 0; i < nn; i++) {
            d->br[i].p = d->scratch.p + off;
            off += d->br[i].n;
            if (L->ptype == PT_FLBA && d->br[i].n != (uint32_t)L->type_length) return BAD(c, "DELTA_BYTE_ARRAY value %zu has length %u, the column %d", i, d->br[i].n, L->type_length);
        }
        *br = d->br;
        return KL_OK;
    }
    case ENC_BYTE_STREAM_SPLIT: {
        size_t w = L->ptype == PT_FLBA ? (size_t)L->type_length : phys_size(L);
        if (L->ptype == PT_BOOLEAN || L->ptype == PT_BYTE_ARRAY || L->ptype == PT_INT96) return BAD(c, "BYTE_STREAM_SPLIT on a %s column", L->info.physical);
        if (w * nn > (size_t)(end - p)) return BAD(c, "BYTE_STREAM_SPLIT: %zu × %zu bytes, page has %zu", nn, w, (size_t)(end - p));
        uint8_t *dst;
        if (L->ptype == PT_FLBA) {
            d->scratch.len = 0;
            if (kl__pq_buf_reserve(&d->scratch, w * nn + 1) || GROW(d->br, d->br_cap, nn + 1))
                return kl_err_set(c->e, KL_ENOMEM, "out of memory");
            dst = d->scratch.p;
        } else {
            if (GROW(d->fx, d->fx_cap, w * nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
            dst = d->fx;
        }
        for (size_t k = 0; k < w; k++) {
            const uint8_t *src = p + k * nn;
            for (size_t i = 0; i < nn; i++) dst[i * w + k] = src[i];
        }
        if (L->ptype == PT_FLBA) {
            for (size_t i = 0; i < nn; i++) { d->br[i].p = dst + i * w; d->br[i].n = (uint32_t)w; }
            *br = d->br;
        } else *fx = dst;
        return KL_OK;
    }
    case ENC_BIT_PACKED: return kl_err_set(c->e, KL_EUNSUPPORTED, "%s: column %s: BIT_PACKED values are not supported", c->R->name, L->name);
    default: return BAD(c, "unknown value encoding %d", enc);
    }
}

/* ==================================================================
 * Physical → kl_column
 * ================================================================== */

static double dec_bytes(const uint8_t *p, uint32_t n) {
    /* big-endian two's complement of any length */
    if (n == 0) return 0;
    int neg = p[0] & 0x80;
    double v = 0;
    for (uint32_t i = 0; i < n; i++) v = v * 256.0 + (double)(neg ? (uint8_t)~p[i] : p[i]);
    return neg ? -(v + 1) : v;
}

static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 0x1F, m = h & 0x3FF, f;
    if (ex == 0) {
        if (m == 0) f = s;
        else { int k = -1; do { k++; m <<= 1; } while (!(m & 0x400)); f = s | (uint32_t)(112 - k) << 23 | (m & 0x3FF) << 13; }
    } else if (ex == 31) f = s | 0x7F800000u | m << 13;
    else f = s | (ex + 112) << 23 | m << 13;
    float out; memcpy(&out, &f, 4);
    return out;
}

static int64_t floordiv(int64_t a, int64_t b) { return a / b - (a % b < 0); }

/* INTERVAL (months, days, milliseconds: three little-endian uint32) as
 * DuckDB prints it: "1 year 2 months 3 days 04:05:06.007", "00:00:00". */
static size_t interval_text(const uint8_t *p, char *out, size_t cap) {
    uint32_t mo, dd, ms;
    memcpy(&mo, p, 4); memcpy(&dd, p + 4, 4); memcpy(&ms, p + 8, 4);
    size_t n = 0;
    uint32_t y = mo / 12, m = mo % 12;
#define PART(v, w) if (v) n += (size_t)snprintf(out + n, cap - n, "%s%u %s%s", n ? " " : "", v, w, v == 1 ? "" : "s")
    PART(y, "year");
    PART(m, "month");
    PART(dd, "day");
#undef PART
    if (ms || n == 0) {
        uint32_t s = ms / 1000, f = ms % 1000;
        n += (size_t)snprintf(out + n, cap - n, "%s%02u:%02u:%02u", n ? " " : "", s / 3600, s / 60 % 60, s % 60);
        if (f) {
            n += (size_t)snprintf(out + n, cap - n, ".%03u", f);
            while (out[n - 1] == '0') out[--n] = 0;
        }
    }
    return n;
}

/* Appends prow rows (levels lev, nn present values) to col. */
static int materialize(ctxt *c, kl_column *col, const uint8_t *pres, size_t prow, size_t nn,
                       const uint8_t *fx, const bref *br, int padded) {
    const pq_leaf *L = c->L;
    if (prow == 0) return KL_OK;
    if (L->kind == K_INTERVAL) {
        for (size_t r = 0, j = 0; r < prow; r++) {
            char t[96];
            int rc = nn < prow && !pres[r] ? kl_column_push_null(col)
                                           : kl_column_push_str(col, t, interval_text(br[j++].p, t, sizeof t));
            if (rc) return kl_err_set(c->e, KL_ENOMEM, "out of memory reading column %s", L->name);
        }
        return KL_OK;
    }
    size_t data = 0;
    if (L->kind == K_BYTES) for (size_t i = 0; i < nn; i++) data += br[i].n;
    if (kl_column_reserve(col, col->len + prow, col->data_len + data + 16)) return kl_err_set(c->e, KL_ENOMEM, "out of memory reading column %s", L->name);
    int has_nulls = nn < prow;
    if (has_nulls && !col->valid) {
        col->valid = kl_mem_alloc(col->cap, KL_TAG_DATASET);
        if (!col->valid) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        memset(col->valid, 1, col->len);
    }
    if (col->valid) {
        if (has_nulls) memcpy(col->valid + col->len, pres, prow);
        else memset(col->valid + col->len, 1, prow);
    }
    size_t base = col->len, j = 0;
    double scale = L->kind == K_DEC32 || L->kind == K_DEC64 || L->kind == K_DECBIN ? pow(10, L->scale) : 1;
#define PRESENT(r) (!has_nulls || pres[r])
    switch (L->kind) {
    case K_BYTES: {
        int64_t *off = col->offsets;
        size_t dl = col->data_len;
        char *dd = col->data;
        for (size_t r = 0; r < prow; r++) {
            if (PRESENT(r)) {
                const uint8_t *p = br[j].p;
                uint32_t n = br[j].n;
                if (padded && n <= 16) memcpy(dd + dl, p, 16); /* source and destination have 16 bytes of slack */
                else if (n) memcpy(dd + dl, p, n);
                dl += n;
                j++;
            }
            off[base + r + 1] = (int64_t)dl;
        }
        col->data_len = dl;
        break;
    }
    case K_BOOL: case K_I32: case K_I64: case K_F32: case K_F64: {
        size_t w = kl_col_type_size(col->type);
        char *dst = (char *)col->values + base * w;
        if (!has_nulls) memcpy(dst, fx, prow * w);
        else if (w == 8) {
            uint64_t *d8 = (uint64_t *)dst;
            for (size_t r = 0; r < prow; r++) {
                uint64_t v = 0;
                if (pres[r]) { memcpy(&v, fx + 8 * j, 8); j++; }
                d8[r] = v;
            }
        } else if (w == 4) {
            uint32_t *d4 = (uint32_t *)dst;
            for (size_t r = 0; r < prow; r++) {
                uint32_t v = 0;
                if (pres[r]) { memcpy(&v, fx + 4 * j, 4); j++; }
                d4[r] = v;
            }
        } else for (size_t r = 0; r < prow; r++) {
            if (PRESENT(r)) { dst[r] = (char)fx[j]; j++; }
            else dst[r] = 0;
        }
        break;
    }
    default: {
        for (size_t r = 0; r < prow; r++) {
            int64_t iv = 0; double dv = 0;
            if (PRESENT(r)) {
                switch (L->kind) {
                case K_U32: { uint32_t x; memcpy(&x, fx + 4 * j, 4); iv = x; break; }
                case K_TIME32MS: { int32_t x; memcpy(&x, fx + 4 * j, 4); iv = (int64_t)x * 1000; break; } /* fits */
                case K_TS_MS: { int64_t x; memcpy(&x, fx + 8 * j, 8); iv = (int64_t)((uint64_t)x * 1000u); break; } /* wraps on absurd input */
                case K_TS_NS: { int64_t x; memcpy(&x, fx + 8 * j, 8); iv = floordiv(x, 1000); break; }
                case K_INT96: {
                    int64_t ns; uint32_t jd;
                    memcpy(&ns, fx + 12 * j, 8); memcpy(&jd, fx + 12 * j + 8, 4);
                    iv = (int64_t)((uint64_t)((int64_t)jd - 2440588) * UINT64_C(86400000000) + (uint64_t)floordiv(ns, 1000));
                    break;
                }
                case K_DEC32: { int32_t x; memcpy(&x, fx + 4 * j, 4); dv = (double)x / scale; break; }
                case K_DEC64: { int64_t x; memcpy(&x, fx + 8 * j, 8); dv = (double)x / scale; break; }
                case K_DECBIN: dv = dec_bytes(br[j].p, br[j].n) / scale; break;
                case K_F16: { uint16_t h; memcpy(&h, br[j].p, 2); dv = half_to_float(h); break; }
                }
                j++;
            }
            if (col->type == KL_COL_FLOAT64) ((double *)col->values)[base + r] = dv;
            else if (col->type == KL_COL_FLOAT32) ((float *)col->values)[base + r] = (float)dv;
            else ((int64_t *)col->values)[base + r] = iv;
        }
    }
    }
#undef PRESENT
    col->len += prow;
    return KL_OK;
}

/* Keeps only the rows of col in [base, base+prow) that lie in ranges. */
static void keep_ranges(kl_column *col, size_t base, int64_t first, size_t prow, const range *rg, size_t nr) {
    size_t w = kl_col_type_size(col->type), o = base;
    int var = col->type == KL_COL_STRING || col->type == KL_COL_BINARY;
    for (size_t r = 0; r < prow; r++) {
        int64_t row = first + (int64_t)r;
        int in = 0;
        for (size_t k = 0; k < nr; k++) if (row >= rg[k].a && row < rg[k].b) { in = 1; break; }
        if (!in) continue;
        size_t src = base + r;
        if (col->valid) col->valid[o] = col->valid[src];
        if (var) {
            int64_t s0 = col->offsets[src], s1 = col->offsets[src + 1], l = s1 - s0;
            if (l) memmove(col->data + col->offsets[o], col->data + s0, (size_t)l);
            col->offsets[o + 1] = col->offsets[o] + l;
        } else if (o != src) memmove((char *)col->values + o * w, (char *)col->values + src * w, w);
        o++;
    }
    col->len = o;
    if (var) col->data_len = (size_t)col->offsets[o];
}

/* ==================================================================
 * Column chunk decoding
 * ================================================================== */

typedef struct {
    int type, has_crc;
    int32_t unc, comp; uint32_t crc;
    int32_t nv; int enc, def_enc, rep_enc;    /* v1 / dict */
    int32_t nnulls, nrows, def_len, rep_len; int is_compressed; /* v2 */
    int has_v1, has_v2, has_dict;
} page_hdr;

static void parse_dph(kl__tr *r, page_hdr *h) {
    int16_t last = 0, id; int t;
    while (kl__tr_field(r, &last, &t, &id)) {
        if (id == 1 && t == TT_I32) h->nv = (int32_t)kl__tr_int(r);
        else if (id == 2 && t == TT_I32) h->enc = (int)kl__tr_int(r);
        else if (id == 3 && t == TT_I32) h->def_enc = (int)kl__tr_int(r);
        else if (id == 4 && t == TT_I32) h->rep_enc = (int)kl__tr_int(r);
        else kl__tr_skip(r, t);
    }
}

static int parse_page_header(kl__tr *r, page_hdr *h) {
    int16_t last = 0, id; int t;
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->is_compressed = 1;
    h->def_enc = h->rep_enc = ENC_RLE;
    while (kl__tr_field(r, &last, &t, &id)) {
        if (id == 1 && t == TT_I32) h->type = (int)kl__tr_int(r);
        else if (id == 2 && t == TT_I32) h->unc = (int32_t)kl__tr_int(r);
        else if (id == 3 && t == TT_I32) h->comp = (int32_t)kl__tr_int(r);
        else if (id == 4 && t == TT_I32) {
            h->crc = (uint32_t)kl__tr_int(r);
            h->has_crc = 1;
        } else if (id == 5 && t == TT_STRUCT) {
            parse_dph(r, h);
            h->has_v1 = 1;
        } else if (id == 7 && t == TT_STRUCT) {
            parse_dph(r, h);
            h->has_dict = 1;
        } else if (id == 8 && t == TT_STRUCT) {
            h->has_v2 = 1;
            int16_t l2 = 0, i2; int t2;
            while (kl__tr_field(r, &l2, &t2, &i2)) {
                if (t2 == TT_I32) {
                    int32_t v = (int32_t)kl__tr_int(r);
                    if (i2 == 1) h->nv = v; else if (i2 == 2) h->nnulls = v; else if (i2 == 3) h->nrows = v;
                    else if (i2 == 4) h->enc = v; else if (i2 == 5) h->def_len = v; else if (i2 == 6) h->rep_len = v;
                } else if (i2 == 7 && (t2 == TT_TRUE || t2 == TT_FALSE)) h->is_compressed = t2 == TT_TRUE;
                else kl__tr_skip(r, t2);
            }
        } else kl__tr_skip(r, t);
    }
    return r->err ? -1 : 0;
}

static int read_dict(ctxt *c, dec *d, const pq_chunk *ch, const page_hdr *h, const uint8_t *src) {
    const pq_leaf *L = c->L;
    if (h->nv < 0) return BAD(c, "dictionary page has %d values", h->nv);
    if (h->enc != ENC_PLAIN && h->enc != ENC_PLAIN_DICTIONARY) return BAD(c, "dictionary page encoding %d (expected PLAIN)", h->enc);
    d->dn = 0;
    d->has_dict = 0;
    /* +16: short values are copied 16 bytes at a time */
    if (GROW(d->dpage, d->dpage_cap, (size_t)h->unc + 16)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
    int rc = kl__pq_decompress(ch->codec, src, (size_t)h->comp, d->dpage, (size_t)h->unc, c->e);
    if (rc) { kl_err_prefix(c->e, "%s: column %s: dictionary page", c->R->name, L->name); return rc; }
    size_t nn = (size_t)h->nv;
    uint8_t *fx = NULL; bref *br = NULL;
    if ((rc = decode_plain(c, d, d->dpage, d->dpage + h->unc, nn, &fx, &br))) return rc;
    if (is_varphys(L)) {
        if (GROW(d->dbr, d->dbr_cap, nn + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        memcpy(d->dbr, br, nn * sizeof *br);
    } else {
        size_t w = phys_size(L);
        if (GROW(d->dfx, d->dfx_cap, (nn + 1) * w + 1)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
        memcpy(d->dfx, fx, nn * w);
        memset(d->dfx + nn * w, 0, w);  /* entry nn: the value of null rows */
    }
    d->dn = nn;
    d->has_dict = 1;
    return KL_OK;
}

/* Rows [col->len, +n) present or null by their levels (col has room for them). */
static int set_valid_rows(kl_column *col, const uint8_t *pres, size_t n, int has_nulls) {
    if (has_nulls && !col->valid) {
        col->valid = kl_mem_alloc(col->cap, KL_TAG_DATASET);
        if (!col->valid) return KL_ENOMEM;
        memset(col->valid, 1, col->len);
    }
    if (col->valid) {
        uint8_t *v = col->valid + col->len;
        if (has_nulls) memcpy(v, pres, n);
        else memset(v, 1, n);
    }
    return KL_OK;
}


typedef struct {
    const pq_reader_t *R;
    size_t rg, leaf;
    const range *ranges; size_t nranges; int full;
    kl_column *out;
    pq_vout *vo;                         /* NULL: materialize strings */
    uint64_t pages_read, pages_skipped;
    int rc; kl_err err;
    pq_levels *lv;                       /* a leaf of a nested column: every level entry, levels kept */
} chunk_job;

/* Coded rows [0, col->len) → strings in col (a non-dictionary page follows). */
static int uncode(ctxt *c, kl_column *col, pq_vout *vo) {
    vo->coded = 0;
    size_t n = col->len;
    if (n == 0) return KL_OK;
    const kl_column *D = vo->dict;
    size_t data = 0;
    for (size_t r = 0; r < n; r++)
        if (!col->valid || col->valid[r]) data += (size_t)(D->offsets[vo->codes[r] + 1] - D->offsets[vo->codes[r]]);
    if (kl_column_reserve(col, n, data + 16)) return kl_err_set(c->e, KL_ENOMEM, "out of memory");
    size_t dl = 0;
    col->offsets[0] = 0;
    for (size_t r = 0; r < n; r++) {
        if (!col->valid || col->valid[r]) {
            int64_t a = D->offsets[vo->codes[r]], l = D->offsets[vo->codes[r] + 1] - a;
            if (l) memcpy(col->data + dl, D->data + a, (size_t)l);
            dl += (size_t)l;
        }
        col->offsets[r + 1] = (int64_t)dl;
    }
    col->data_len = dl;
    return KL_OK;
}

/* decode_chunk, one column chunk of a row group into J->out, in stages:
 *   chunk_open    the chunk's metadata, its byte range, room for the rows
 *   then page by page (chunk_page):
 *   next_page     the page header, its sizes and CRC
 *   dict_page     a dictionary page (and the codes' dictionary of J->vo)
 *   page_wanted   a data page outside the row ranges read is skipped
 *   split_v1/v2   decompression; repetition levels, definition levels, values
 *   page_levels   definition levels → present flags; a nested leaf's levels
 *   page_values   dictionary codes, the fused dictionary path, or decode + materialize
 */
typedef struct {
    chunk_job *J;
    dec *d;
    ctxt c;
    char where[64];
    const pq_leaf *L;
    const pq_chunk *ch;
    kl_column *col;
    pq_vout *vo;                         /* strings kept as dictionary codes (NULL: materialized) */
    pq_levels *lv;                       /* a nested leaf's levels (NULL: a flat leaf) */
    int max_def, bw, max_rep, rbw;       /* the levels' maxima and bit widths */
    int64_t rows, total;                 /* the row group's rows; the entries to read (rows, or level entries) */
    const uint8_t *pos, *end;            /* the next page header; the end of the chunk */
} chunk_st;

typedef struct {
    page_hdr h;
    const uint8_t *src;                  /* the page's bytes after its header */
    const uint8_t *lv_p, *rp_p;          /* definition and repetition levels (NULL: none) */
    size_t lv_len, rp_len;
    const uint8_t *vals, *vend;          /* the values section, decompressed */
    size_t n, nn;                        /* the page's level entries; the present values among them */
} page_in;

static int chunk_open(chunk_st *s) {
    const pq_reader_t *R = s->J->R;
    const pq_leaf *L = s->L;
    const pq_chunk *ch = s->ch;
    kl_err *e = s->c.e;
    if (!ch->has_meta) return BAD(&s->c, "column chunk has no metadata");
    if (ch->external) return kl_err_set(e, KL_EUNSUPPORTED, "%s: column %s: data in an external file is not supported", R->name, L->name);
    if (ch->encrypted) return kl_err_set(e, KL_EUNSUPPORTED, "%s: column %s: encrypted columns are not supported", R->name, L->name);
    if (ch->num_values < 0) return BAD(&s->c, "negative value count");
    int64_t start = ch->data_page_offset;
    if (ch->dict_page_offset > 0 && ch->dict_page_offset < start) start = ch->dict_page_offset;
    if (start < 4 || (uint64_t)start >= R->footer_start)
        return BAD(&s->c, "chunk offset %lld outside the data", (long long)start);
    /* pages are bounded by the chunk (total_compressed_size), never by the
     * next column's data */
    if (ch->total_compressed <= 0 || ch->total_compressed > (int64_t)R->footer_start - start)
        return BAD(&s->c, "chunk size %lld outside the data", (long long)ch->total_compressed);
    s->pos = R->data + start;
    s->end = R->data + start + ch->total_compressed;
#ifdef MADV_POPULATE_READ
    if (R->map) {
        /* map the chunk's pages in one call: a page fault each costs more
         * than decoding the page's values (first scan of a file) */
        uintptr_t a = (uintptr_t)s->pos & ~(uintptr_t)4095;
        (void)madvise((void *)a, (size_t)((uintptr_t)s->end - a), MADV_POPULATE_READ);
    }
#endif
    if (ch->num_values != s->rows && L->max_rep == 0)
        return BAD(&s->c, "chunk has %lld values, the row group %lld rows", (long long)ch->num_values,
                   (long long)s->rows);
    s->max_def = L->max_def;
    s->bw = pq_bit_width((uint64_t)s->max_def);
    s->max_rep = L->max_rep;
    s->rbw = pq_bit_width((uint64_t)s->max_rep);
    /* a nested leaf holds level entries (values, nulls and empty lists), a flat one rows */
    s->total = s->lv ? ch->num_values : s->rows;
    if (s->lv) {
        if (s->total > (int64_t)PQ_MAX_NESTED_VALUES)
            return kl_err_set(
                e, KL_EUNSUPPORTED,
                "%s: column %s%s: %lld values in one column chunk (keel reads at most %u in a nested column)", R->name,
                L->name, s->where, (long long)s->total, PQ_MAX_NESTED_VALUES);
        s->lv->n = 0; /* the levels grow page by page (num_values is not trusted for memory) */
    } else if (s->total > 0 && s->total <= (int64_t)1 << 31 && kl_column_reserve(s->col, (size_t)s->total, 0))
        return kl_err_set(e, KL_ENOMEM, "out of memory for %lld rows of column %s", (long long)s->total, L->name);
    return KL_OK;
}

/* The header at s->pos (done: the entries read so far, for the message); s->pos moves past the page. */
static int next_page(chunk_st *s, page_in *p, int64_t done) {
    const pq_reader_t *R = s->J->R;
    page_hdr *h = &p->h;
    if (s->pos >= s->end)
        return BAD(&s->c, "chunk ends after %lld of %lld %s", (long long)done, (long long)s->total,
                   s->lv ? "values" : "rows");
    kl__tr t = {s->pos, s->end, 0, 0};
    if (parse_page_header(&t, h))
        return BAD(&s->c, "corrupt page header at offset %lld", (long long)(s->pos - R->data));
    const uint8_t *src = t.p;
    if (h->comp < 0 || h->unc < 0 || h->comp > s->end - src)
        return BAD(&s->c, "page at offset %lld: sizes %d/%d exceed the file", (long long)(s->pos - R->data), h->comp,
                   h->unc);
    if (h->unc > (1 << 30)) return BAD(&s->c, "page of %d bytes is too large", h->unc);
    s->pos = src + h->comp;
    if (h->has_crc && kl__pq_crc32(src, (size_t)h->comp) != h->crc)
        return kl_err_set(s->c.e, KL_ECHECKSUM,
                          "%s: column %s%s: page at offset %lld: CRC mismatch (stored %08x, computed %08x)", R->name,
                          s->L->name, s->where, (long long)(src - R->data), h->crc, kl__pq_crc32(src, (size_t)h->comp));
    p->src = src;
    return KL_OK;
}

static int dict_page(chunk_st *s, const page_in *p) {
    pq_vout *vo = s->vo;
    dec *d = s->d;
    kl_column *col = s->col;
    int rc;
    if (!p->h.has_dict) return BAD(&s->c, "dictionary page without its header");
    if (vo && vo->coded && (rc = uncode(&s->c, col, vo))) return rc; /* a second dictionary */
    if ((rc = read_dict(&s->c, d, s->ch, &p->h, p->src))) return rc;
    if (vo && col->len == 0) {
        /* codes from here on while the pages stay dictionary-encoded */
        kl_column *D = vo->dict;
        size_t data = 0;
        for (size_t i = 0; i < d->dn; i++) data += d->dbr[i].n;
        kl_column_clear(D);
        if (kl_column_reserve(D, d->dn + 1, data + 1)) return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
        D->offsets[0] = 0;
        for (size_t i = 0; i < d->dn; i++) {
            if (d->dbr[i].n) memcpy(D->data + D->data_len, d->dbr[i].p, d->dbr[i].n);
            D->data_len += d->dbr[i].n;
            D->offsets[i + 1] = (int64_t)D->data_len;
        }
        D->len = d->dn;
        vo->coded = 1;
    }
    return KL_OK;
}

/* Whether a page of rows [first, first + n) meets the row ranges read; *partial: only some of its rows do. */
static int page_wanted(const chunk_job *J, int64_t first, size_t n, int *partial) {
    *partial = 0;
    if (J->full) return 1;
    int any = 0, all = 0;
    for (size_t k = 0; k < J->nranges; k++) {
        int64_t a = KL_MAX(J->ranges[k].a, first), b = KL_MIN(J->ranges[k].b, first + (int64_t)n);
        if (a < b) { any = 1; if (a == first && b == first + (int64_t)n) all = 1; }
    }
    if (!any && n > 0) return 0;
    *partial = !all;
    return 1;
}

/* Data page v1: the whole page decompressed, then [rep length][rep][def length][def] values. */
static int split_v1(chunk_st *s, page_in *p) {
    const page_hdr *h = &p->h;
    dec *d = s->d;
    kl_err *e = s->c.e;
    int rc;
    if (GROW(d->page, d->page_cap, (size_t)h->unc + 1)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if ((rc = kl__pq_decompress(s->ch->codec, p->src, (size_t)h->comp, d->page, (size_t)h->unc, e))) {
        kl_err_prefix(e, "%s: column %s%s", s->J->R->name, s->L->name, s->where);
        return rc;
    }
    const uint8_t *vals = d->page, *vend = d->page + h->unc;
    if (s->max_rep > 0) {
        if (h->rep_enc != ENC_RLE)
            return kl_err_set(e, KL_EUNSUPPORTED, "%s: column %s%s: repetition level encoding %d is not supported",
                              s->J->R->name, s->L->name, s->where, h->rep_enc);
        if (vend - vals < 4) return BAD(&s->c, "truncated repetition levels");
        uint32_t l;
        memcpy(&l, vals, 4);
        if (l > (size_t)(vend - vals - 4)) return BAD(&s->c, "repetition levels length %u exceeds the page", l);
        p->rp_p = vals + 4; p->rp_len = l;
        vals += 4 + l;
    }
    if (s->max_def > 0) {
        if (h->def_enc == ENC_RLE) {
            if (vend - vals < 4) return BAD(&s->c, "truncated definition levels");
            uint32_t l; memcpy(&l, vals, 4);
            if (l > (size_t)(vend - vals - 4)) return BAD(&s->c, "definition levels length %u exceeds the page", l);
            p->lv_p = vals + 4; p->lv_len = l;
            vals += 4 + l;
        } else if (h->def_enc == ENC_BIT_PACKED) {
            size_t l = (p->n * (size_t)s->bw + 7) / 8;
            if (l > (size_t)(vend - vals)) return BAD(&s->c, "truncated definition levels");
            p->lv_p = vals; p->lv_len = l;
            vals += l;
        } else return BAD(&s->c, "definition level encoding %d", h->def_enc);
    }
    p->vals = vals;
    p->vend = vend;
    return KL_OK;
}

/* Data page v2: the levels uncompressed before the values section, which alone may be compressed. */
static int split_v2(chunk_st *s, page_in *p) {
    const page_hdr *h = &p->h;
    dec *d = s->d;
    kl_err *e = s->c.e;
    int rc;
    if (h->rep_len < 0 || h->def_len < 0 || (int64_t)h->rep_len + h->def_len > h->comp ||
        (int64_t)h->rep_len + h->def_len > h->unc)
        return BAD(&s->c, "bad level lengths in data page v2");
    p->lv_p = p->src + h->rep_len; p->lv_len = (size_t)h->def_len;
    p->rp_p = p->src; p->rp_len = (size_t)h->rep_len;
    const uint8_t *vsrc = p->src + h->rep_len + h->def_len;
    size_t vcomp = (size_t)(h->comp - h->rep_len - h->def_len), vunc = (size_t)(h->unc - h->rep_len - h->def_len);
    if (GROW(d->page, d->page_cap, vunc + 1)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!h->is_compressed || s->ch->codec == CODEC_UNCOMPRESSED) {
        if (vcomp != vunc) return BAD(&s->c, "uncompressed v2 page: %zu bytes, header says %zu", vcomp, vunc);
        memcpy(d->page, vsrc, vcomp);
    } else if (vunc == 0 && vcomp <= 1) {
        /* empty values section */
    } else if ((rc = kl__pq_decompress(s->ch->codec, vsrc, vcomp, d->page, vunc, e))) {
        kl_err_prefix(e, "%s: column %s%s", s->J->R->name, s->L->name, s->where);
        return rc;
    }
    p->vals = d->page;
    p->vend = d->page + vunc;
    if (s->max_def == 0) p->lv_p = NULL;
    return KL_OK;
}

/* Definition levels → d->pres (present flags) and p->nn; a nested leaf keeps them in s->lv. */
static int def_levels(chunk_st *s, page_in *p) {
    dec *d = s->d;
    size_t n = p->n;
    int max_def = s->max_def, packed = p->h.type == PAGE_DATA && p->h.def_enc == ENC_BIT_PACKED;
    if (GROW(d->pres, d->pres_cap, n + 8)) return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
    uint8_t *pres = d->pres;
    if (max_def == 1 && !s->lv && !packed) {
        /* flat optional column: the levels are the flags */
        if (n && kl__pq_rle_decode_u8(p->lv_p, p->lv_len, 1, pres, n))
            return BAD(&s->c, "definition levels truncated or corrupt");
        size_t cnt = 0;
        for (size_t i = 0; i < n; i++) cnt += pres[i];
        p->nn = cnt;
        return KL_OK;
    }
    if (GROW(d->lev, d->lev_cap, n + 8)) return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
    if (packed) {
        int bw = s->bw;
        const uint8_t *lv_p = p->lv_p;
        for (size_t i = 0; i < n; i++) { /* MSB first */
            uint32_t v = 0;
            for (int b = 0; b < bw; b++) {
                size_t bit = i * (size_t)bw + (size_t)b;
                v = v << 1 | ((lv_p[bit >> 3] >> (7 - (bit & 7))) & 1);
            }
            d->lev[i] = v;
        }
    } else if (n && kl__pq_rle_decode(p->lv_p, p->lv_len, s->bw, d->lev, n))
        return BAD(&s->c, "definition levels truncated or corrupt");
    size_t nn = 0;
    for (size_t i = 0; i < n; i++) {
        if (d->lev[i] > (uint32_t)max_def)
            return BAD(&s->c, "definition level %u above the maximum %d", d->lev[i], max_def);
        pres[i] = d->lev[i] == (uint32_t)max_def;
        nn += pres[i];
    }
    if (s->lv) for (size_t i = 0; i < n; i++) s->lv->def[s->lv->n + i] = (uint8_t)d->lev[i];
    p->nn = nn;
    return KL_OK;
}

/* A nested leaf's repetition levels (0 starts a record) into s->lv. */
static int rep_levels(chunk_st *s, const page_in *p) {
    pq_levels *lv = s->lv;
    dec *d = s->d;
    size_t n = p->n;
    if (s->max_rep == 0) {
        memset(lv->rep + lv->n, 0, n);
        return KL_OK;
    }
    if (GROW(d->lev, d->lev_cap, n + 8)) return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
    if (n && kl__pq_rle_decode(p->rp_p, p->rp_len, s->rbw, d->lev, n))
        return BAD(&s->c, "repetition levels truncated or corrupt");
    for (size_t i = 0; i < n; i++) {
        if (d->lev[i] > (uint32_t)s->max_rep)
            return BAD(&s->c, "repetition level %u above the maximum %d", d->lev[i], s->max_rep);
        lv->rep[lv->n + i] = (uint8_t)d->lev[i];
    }
    return KL_OK;
}

static int page_levels(chunk_st *s, page_in *p) {
    pq_levels *lv = s->lv;
    size_t n = p->n;
    size_t lcap = lv ? lv->cap : 0;
    if (lv &&
        (GROW(lv->def, lv->cap, lv->n + n + 1) ||
         (lv->cap != lcap && !(lv->rep = kl_mem_realloc(lv->rep, lv->cap, KL_TAG_DATASET)))))
        return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
    p->nn = n;
    int rc;
    if (s->max_def > 0) {
        if ((rc = def_levels(s, p))) return rc;
    } else if (lv) memset(lv->def + lv->n, 0, n);
    if (lv) {
        if ((rc = rep_levels(s, p))) return rc;
        lv->n += n;
    }
    return KL_OK;
}

/* Dictionary codes straight into s->vo->codes from row base: strings never materialized. */
static int values_coded(chunk_st *s, const page_in *p, size_t base) {
    pq_vout *vo = s->vo;
    dec *d = s->d;
    size_t n = p->n, nn = p->nn;
    const uint8_t *pres = d->pres;
    int rc;
    if (GROW(vo->codes, vo->codes_cap, base + n + 1)) return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
    uint32_t *dst = vo->codes + base;
    if (nn == n) {
        if ((rc = idx_decode(&s->c, d, p->vals, p->vend, nn, dst))) return rc;
    } else {
        if ((rc = decode_dict_idx(&s->c, d, p->vals, p->vend, nn, NULL, NULL))) return rc;
        const uint32_t *ix = d->idx;
        for (size_t r = 0, j = 0; r < n; r++) { /* branch-free: ix has slack */
            uint32_t k = ix[j];
            dst[r] = pres[r] ? k : 0;
            j += pres[r];
        }
    }
    if ((rc = set_valid_rows(s->col, pres, n, nn < n))) return kl_err_set(s->c.e, rc, "out of memory");
    s->col->len += n;
    return KL_OK;
}

/* Dictionary entries ix[] of w bytes (a constant where it is inlined) into dst,
 * one per row; a null row (pres[r] == 0) takes entry dn, which is zero:
 * branch-free, ix has slack. */
static inline __attribute__((always_inline)) void dict_gather(char *dst, const void *dict, const uint32_t *ix,
                                                              const uint8_t *pres, size_t n, int has_nulls,
                                                              uint32_t dn, size_t w) {
    const char *dv = (const char *)dict;
    if (!has_nulls) {
        for (size_t r = 0; r < n; r++) memcpy(dst + r * w, dv + (size_t)ix[r] * w, w);
        return;
    }
    for (size_t r = 0, j = 0; r < n; r++) {
        uint32_t k = pres[r] ? ix[j] : dn;
        memcpy(dst + r * w, dv + (size_t)k * w, w);
        j += pres[r];
    }
}

/* The fused path of a fixed-width column: dictionary indexes straight into the column (w: 4 or 8 bytes). */
static int values_dict_fused(chunk_st *s, const page_in *p, size_t base, size_t w) {
    dec *d = s->d;
    kl_column *col = s->col;
    size_t n = p->n, nn = p->nn;
    const uint8_t *pres = d->pres;
    int rc;
    if ((rc = decode_dict_idx(&s->c, d, p->vals, p->vend, nn, NULL, NULL))) return rc;
    int has_nulls = nn < n;
    if ((rc = set_valid_rows(col, pres, n, has_nulls))) return kl_err_set(s->c.e, rc, "out of memory");
    char *dst = (char *)col->values + base * w;
    if (w == 8) dict_gather(dst, d->dfx, d->idx, pres, n, has_nulls, (uint32_t)d->dn, 8);
    else dict_gather(dst, d->dfx, d->idx, pres, n, has_nulls, (uint32_t)d->dn, 4);
    col->len += n;
    return KL_OK;
}

/* The page's values appended to s->col (rows [first, first + n) of the row group; partial: keep only the ranges'). */
static int page_values(chunk_st *s, const page_in *p, int64_t first, int partial) {
    kl_column *col = s->col;
    pq_vout *vo = s->vo;
    const pq_leaf *L = s->L;
    size_t n = p->n, base = col->len;
    int is_dict = p->h.enc == ENC_PLAIN_DICTIONARY || p->h.enc == ENC_RLE_DICTIONARY;
    size_t w = kl_col_type_size(col->type);
    int rc = KL_OK;
    if (vo && vo->coded && !is_dict && (rc = uncode(&s->c, col, vo))) return rc;
    if (n > 0 && (is_dict || (vo && vo->coded)) && kl_column_reserve(col, base + n, 0))
        return kl_err_set(s->c.e, KL_ENOMEM, "out of memory");
    if (vo && vo->coded && n > 0) rc = values_coded(s, p, base);
    else if (is_dict && (L->kind == K_I64 || L->kind == K_F64 || L->kind == K_I32 || L->kind == K_F32) &&
             w == phys_size(L) && n > 0)
        rc = values_dict_fused(s, p, base, w);
    else {
        uint8_t *fx = NULL; bref *br = NULL;
        rc = decode_values(&s->c, s->d, p->h.enc, p->vals, p->vend, p->nn, &fx, &br);
        if (rc == KL_OK) {
            if (L->type != col->type) rc = BAD(&s->c, "internal type mismatch");
            else rc = materialize(&s->c, col, s->d->pres, n, p->nn, fx, br, is_dict && L->kind == K_BYTES);
        }
    }
    if (rc == KL_OK && partial) keep_ranges(col, base, first, n, s->J->ranges, s->J->nranges);
    return rc;
}

/* One page of the chunk; *done counts the entries of the data pages so far, *guard the non-data pages. */
static int chunk_page(chunk_st *s, int64_t *done, int *guard) {
    page_in p = {0};
    int rc = next_page(s, &p, *done);
    if (rc) return rc;
    const page_hdr *h = &p.h;
    if (h->type == PAGE_DICT) return dict_page(s, &p);
    if (h->type != PAGE_DATA && h->type != PAGE_DATA_V2) {
        if (++*guard > 1000000) return BAD(&s->c, "too many non-data pages");
        return KL_OK; /* index pages and unknown page types are skipped */
    }
    if ((h->type == PAGE_DATA && !h->has_v1) || (h->type == PAGE_DATA_V2 && !h->has_v2))
        return BAD(&s->c, "data page without its header");
    if (h->nv < 0) return BAD(&s->c, "page has %d values", h->nv);
    p.n = (size_t)h->nv;
    if ((int64_t)p.n > s->total - *done)
        return s->lv ? BAD(&s->c, "pages hold more values (%lld+) than the chunk (%lld)",
                           (long long)(*done + (int64_t)p.n), (long long)s->total)
                     : BAD(&s->c, "pages hold more values (%lld+) than the row group has rows (%lld)",
                           (long long)(*done + (int64_t)p.n), (long long)s->rows);
    int64_t first = *done;
    *done += (int64_t)p.n;
    int partial;
    if (!page_wanted(s->J, first, p.n, &partial)) {
        s->J->pages_skipped++;
        return KL_OK;
    }
    s->J->pages_read++;
    if ((rc = h->type == PAGE_DATA ? split_v1(s, &p) : split_v2(s, &p))) return rc;
    if ((rc = page_levels(s, &p))) return rc;
    return page_values(s, &p, first, partial);
}

static int decode_chunk(chunk_job *J, dec *d) {
    const pq_reader_t *R = J->R;
    chunk_st s = {.J = J, .d = d, .L = &R->leaves[J->leaf], .ch = &R->rgs[J->rg].cols[J->leaf], .col = J->out,
                  .lv = J->lv, .rows = R->rgs[J->rg].num_rows};
    snprintf(s.where, sizeof s.where, " (row group %zu)", J->rg);
    s.c = (ctxt){R, s.L, &J->err, s.where};
    d->has_dict = 0;
    d->dn = 0;
    kl_column_clear(s.col);
    s.vo = J->vo && s.L->kind == K_BYTES && !J->lv ? J->vo : NULL;
    if (J->vo) J->vo->coded = 0;
    int rc = chunk_open(&s);
    int64_t done = 0;
    int guard = 0;
    while (rc == KL_OK && done < s.total) rc = chunk_page(&s, &done, &guard);
    return rc;
}

/* A nested column of one row group: each of its leaves decoded with its
 * levels, then assembled into JSON text per record (parquet_nested.c). */
static int decode_field(chunk_job *J, dec *d) {
    const pq_reader_t *R = J->R;
    size_t f = J->leaf - R->nleaves;
    const pq_field *F = &R->fields[f];
    pq_levels *lv = calloc(F->nleaf + 1, sizeof *lv);
    if (!lv) return kl_err_set(&J->err, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    for (size_t k = 0; k < F->nleaf && !rc; k++) {
        const pq_leaf *L = &R->leaves[F->leaf0 + k];
        if ((rc = kl_column_new(L->name, L->type, 1, 0, &lv[k].vals, &J->err))) break;
        chunk_job sj = *J;
        sj.leaf = F->leaf0 + k;
        sj.out = lv[k].vals;
        sj.vo = NULL;
        sj.lv = &lv[k];
        sj.full = 1;
        sj.pages_read = sj.pages_skipped = 0;
        rc = decode_chunk(&sj, d);
        J->pages_read += sj.pages_read;
        if (rc) J->err = sj.err;
    }
    kl_column_clear(J->out);
    if (!rc) rc = kl__pq_assemble(R, f, lv, (size_t)R->rgs[J->rg].num_rows, J->out, &J->err);
    if (!rc && !J->full) keep_ranges(J->out, 0, 0, J->out->len, J->ranges, J->nranges);
    for (size_t k = 0; k < F->nleaf; k++) kl__pq_levels_free(&lv[k]);
    free(lv);
    return rc;
}

/* Column chunks are claimed one at a time by whichever worker is free (a
 * descheduled worker does not hold back the others); each job writes only
 * its own output, so results never depend on who decoded what. Scratch
 * buffers belong to the pool chunk (one per worker), reused across calls. */
typedef struct { chunk_job *jobs; size_t n; _Atomic size_t next; dec *scratch; } chunk_run;

static void chunk_task(void *ctx, size_t begin, size_t end, int chunk) {
    chunk_run *cr = ctx;
    dec *d = &cr->scratch[chunk];
    for (;;) {
        size_t i = atomic_fetch_add(&cr->next, 1);
        if (i >= cr->n) break;
        chunk_job *J = &cr->jobs[i];
        if (J->vo) J->vo->coded = 0;
        J->rc = J->leaf >= J->R->nleaves ? decode_field(J, d) : decode_chunk(J, d);
    }
}

static int run_jobs(pq_scan *s, chunk_job *jobs, size_t n, kl_err *e) {
    size_t k = KL_MIN((size_t)kl_pool_threads(NULL), n);
    if (k > s->nscratch) {
        dec *ns = kl_mem_realloc(s->scratch, k * sizeof *ns, KL_TAG_DATASET);
        if (!ns) return kl_err_set(e, KL_ENOMEM, "out of memory");
        memset(ns + s->nscratch, 0, (k - s->nscratch) * sizeof *ns);
        s->scratch = ns;
        s->nscratch = k;
    }
    chunk_run cr = {jobs, n, 0, s->scratch};
    atomic_store(&cr.next, 0);
    kl_pool_parallel_for(NULL, k, 1, chunk_task, &cr);
    return KL_OK;
}

/* ==================================================================
 * Page index (column index + offset index) → row ranges
 * ================================================================== */

typedef struct {
    size_t n;
    uint8_t *null_page;
    bref *mn, *mx;
    int64_t *first_row;
} page_index;

static void pi_free(page_index *p) { free(p->null_page); free(p->mn); free(p->mx); free(p->first_row); memset(p, 0, sizeof *p); }

static int parse_page_index(const pq_reader_t *R, const pq_chunk *ch, page_index *pi) {
    memset(pi, 0, sizeof *pi);
    if (ch->ci_off < 4 || ch->oi_off < 4 || ch->ci_len <= 0 || ch->oi_len <= 0) return -1;
    if ((uint64_t)ch->ci_off + (uint64_t)ch->ci_len > R->footer_start || (uint64_t)ch->oi_off + (uint64_t)ch->oi_len > R->footer_start) return -1;
    kl__tr r = {R->data + ch->ci_off, R->data + ch->ci_off + ch->ci_len, 0, 0};
    int16_t last = 0, id; int t;
    size_t nmn = 0, nmx = 0, nnp = 0;
    while (kl__tr_field(&r, &last, &t, &id)) {
        if (t == TT_LIST && id >= 1 && id <= 3) {
            int et; uint32_t n;
            if (kl__tr_list(&r, &et, &n)) break;
            if (id == 1) {
                free(pi->null_page);
                pi->null_page = malloc(n + 1);
                if (!pi->null_page) return -1;
                for (uint32_t i = 0; i < n; i++) pi->null_page[i] = (uint8_t)kl__tr_bool_elem(&r);
                nnp = n;
            } else {
                bref *b = malloc((n + 1) * sizeof *b);
                if (!b) return -1;
                for (uint32_t i = 0; i < n; i++) kl__tr_bin(&r, &b[i].p, &b[i].n);
                if (id == 2) { free(pi->mn); pi->mn = b; nmn = n; } else { free(pi->mx); pi->mx = b; nmx = n; }
            }
        } else kl__tr_skip(&r, t);
    }
    if (r.err || !pi->null_page || !pi->mn || !pi->mx || nmn != nnp || nmx != nnp) { pi_free(pi); return -1; }
    pi->n = nnp;
    kl__tr o = {R->data + ch->oi_off, R->data + ch->oi_off + ch->oi_len, 0, 0};
    last = 0;
    size_t nloc = 0;
    while (kl__tr_field(&o, &last, &t, &id)) {
        if (id == 1 && t == TT_LIST) {
            int et; uint32_t n;
            if (kl__tr_list(&o, &et, &n) || et != TT_STRUCT) break;
            pi->first_row = malloc((n + 1) * sizeof *pi->first_row);
            if (!pi->first_row) break;
            for (uint32_t i = 0; i < n && !o.err; i++) {
                int16_t l2 = 0, i2; int t2;
                pi->first_row[i] = -1;
                while (kl__tr_field(&o, &l2, &t2, &i2)) {
                    if (i2 == 3 && t2 == TT_I64) pi->first_row[i] = kl__tr_int(&o);
                    else kl__tr_skip(&o, t2);
                }
            }
            nloc = n;
        } else kl__tr_skip(&o, t);
    }
    if (o.err || !pi->first_row || nloc != pi->n) { pi_free(pi); return -1; }
    return 0;
}

/* Intersects *rs with the pages of leaf (predicate p) that may match. */
static int page_ranges(const pq_reader_t *R, size_t rg, const pq_pred *p, range **rs, size_t *nr) {
    const pq_leaf *L = &R->leaves[p->col];
    const pq_chunk *ch = &R->rgs[rg].cols[p->col];
    if (L->unsigned_order || L->kind == K_DECBIN || L->kind == K_INT96 || L->kind == K_F16) return 0;
    page_index pi;
    if (parse_page_index(R, ch, &pi)) return 0;
    int64_t rows = R->rgs[rg].num_rows;
    range *keep = malloc((pi.n + 1) * sizeof *keep);
    size_t nk = 0;
    if (!keep) { pi_free(&pi); return -1; }
    for (size_t i = 0; i < pi.n; i++) {
        int64_t a = pi.first_row[i], b = i + 1 < pi.n ? pi.first_row[i + 1] : rows;
        if (a < 0 || b < a || b > rows) { free(keep); pi_free(&pi); return 0; } /* unusable index */
        int m = 1;
        if (pi.null_page[i]) m = 0;
        else {
            kl_pq_value mn, mx;
            if (kl__pq_stat_value(L, pi.mn[i].p, pi.mn[i].n, &mn) && kl__pq_stat_value(L, pi.mx[i].p, pi.mx[i].n, &mx))
                m = may_match(p, L->type, &mn, &mx);
        }
        if (m) {
            if (nk && keep[nk - 1].b == a) keep[nk - 1].b = b;
            else keep[nk++] = (range){a, b};
        }
    }
    pi_free(&pi);
    /* intersect */
    range *out = malloc((*nr + nk + 1) * sizeof *out);
    if (!out) { free(keep); return -1; }
    size_t no = 0, i = 0, j = 0;
    while (i < *nr && j < nk) {
        int64_t a = KL_MAX((*rs)[i].a, keep[j].a), b = KL_MIN((*rs)[i].b, keep[j].b);
        if (a < b) out[no++] = (range){a, b};
        if ((*rs)[i].b < keep[j].b) i++; else j++;
    }
    free(keep);
    free(*rs);
    *rs = out;
    *nr = no;
    return 0;
}

/* ==================================================================
 * The scan
 * ================================================================== */

static int scan_init(pq_reader_t *R, kl_err *e) {
    if (R->nsel == 0 && R->nleaves > 0) {
        const char *why = "";
        for (size_t i = 0; i < R->ntop && !*why; i++) why = kl__pq_colinfo(R, R->top[i])->why;
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: no readable columns selected (%s)", R->name, *why ? why : "empty selection");
    }
    pq_scan *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    R->scan = s;
    s->need = malloc((R->nsel + R->npreds + 1) * sizeof *s->need);
    s->sel_need = malloc((R->nsel + 1) * sizeof *s->sel_need);
    if (!s->need || !s->sel_need) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < R->nsel + R->npreds; i++) {
        size_t leaf = i < R->nsel ? R->sel[i] : R->preds[i - R->nsel].col;
        size_t k = 0;
        while (k < s->nneed && s->need[k] != leaf) k++;
        if (k == s->nneed) s->need[s->nneed++] = leaf;
        if (i < R->nsel) s->sel_need[i] = k;
    }
    s->swap_ok = 1;
    for (size_t i = 0; i < R->nsel; i++)
        for (size_t j = 0; j < i; j++)
            if (s->sel_need[i] == s->sel_need[j]) s->swap_ok = 0;
    s->cols = calloc(s->nneed + 1, sizeof *s->cols);
    if (!s->cols) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->slot[0] = s->cols;
    for (size_t k = 0; k < s->nneed; k++) {
        const kl_pq_column_info *ci = kl__pq_colinfo(R, s->need[k]);
        int rc = kl_column_new(ci->name, ci->type, ci->nullable, 0, &s->cols[k], e);
        if (rc) return rc;
    }
    return KL_OK;
}

static size_t pred_need(const pq_scan *s, size_t leaf) {
    for (size_t k = 0; k < s->nneed; k++) if (s->need[k] == leaf) return k;
    return 0;
}

/* Loads the next row group that may hold matching rows. 0 = loaded, 1 = end. */
static int slot_cols(pq_reader_t *R, pq_scan *s, int k, kl_err *e) {
    if (s->vec && !s->vout[k]) {
        s->vout[k] = calloc(s->nneed + 1, sizeof **s->vout);
        if (!s->vout[k]) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (size_t j = 0; j < s->nneed; j++) {
            int rc = kl_column_new("dictionary", kl__pq_colinfo(R, s->need[j])->type, 0, 0, &s->vout[k][j].dict, e);
            if (rc) return rc;
        }
    }
    if (s->slot[k]) return KL_OK;
    s->slot[k] = calloc(s->nneed + 1, sizeof **s->slot);
    if (!s->slot[k]) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t j = 0; j < s->nneed; j++) {
        const kl_pq_column_info *ci = kl__pq_colinfo(R, s->need[j]);
        int rc = kl_column_new(ci->name, ci->type, ci->nullable, 0, &s->slot[k][j], e);
        if (rc) return rc;
    }
    return KL_OK;
}

/* No predicates: serves prefetched row groups, decoding the next ones
 * PQ_PREFETCH at a time. 0 = loaded, 1 = end. */
static int load_prefetch(pq_reader_t *R, kl_err *e) {
    pq_scan *s = R->scan;
    if (s->slot_at >= s->nslot) {
        s->nslot = s->slot_at = 0;
        while (s->nslot < PQ_PREFETCH && s->rg < (s->rg_end ? s->rg_end : R->nrg)) {
            size_t g = s->rg++;
            if (R->rgs[g].num_rows == 0) { R->ss.row_groups_skipped++; continue; }
            int rc = slot_cols(R, s, (int)s->nslot, e);
            if (rc) return rc;
            s->slot_rg[s->nslot] = g;
            s->slot_rows[s->nslot] = (size_t)R->rgs[g].num_rows;
            s->nslot++;
        }
        if (s->nslot == 0) { s->loaded = 0; return 1; }
        size_t nj = s->nslot * s->nneed;
        chunk_job *jobs = calloc(nj + 1, sizeof *jobs);
        range *rs = calloc(s->nslot, sizeof *rs);
        if (!jobs || !rs) { free(jobs); free(rs); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        for (size_t k = 0; k < s->nslot; k++) {
            rs[k] = (range){0, (int64_t)s->slot_rows[k]};
            for (size_t j = 0; j < s->nneed; j++)
                jobs[k * s->nneed + j] = (chunk_job){R, s->slot_rg[k], s->need[j], &rs[k], 1, 1, s->slot[k][j],
                                                     s->vec ? &s->vout[k][j] : NULL, 0, 0, 0, {0}, NULL};
        }
        int rc = run_jobs(s, jobs, nj, e);
        if (rc) { free(jobs); free(rs); return rc; }
        for (size_t t = 0; t < nj; t++) {
            R->ss.pages_read += jobs[t].pages_read;
            if (jobs[t].rc && !rc) { rc = jobs[t].rc; if (e) *e = jobs[t].err; }
        }
        for (size_t t = 0; t < nj && !rc; t++) {
            size_t k = t / s->nneed;
            const kl_column *c = s->slot[k][t % s->nneed];
            if (c->len != s->slot_rows[k])
                rc = kl_err_set(e, KL_EPARSE, "%s: column %s (row group %zu): %zu rows decoded, expected %zu",
                                R->name, c->name, s->slot_rg[k], c->len, s->slot_rows[k]);
        }
        free(jobs);
        free(rs);
        if (rc) { s->nslot = 0; return rc; }
    }
    size_t k = s->slot_at++;
    s->cols = s->slot[k];
    s->cur_slot = k;
    s->count = s->slot_rows[k];
    s->pos = 0;
    s->use_selv = 0;
    s->loaded = 1;
    R->ss.row_groups_read++;
    R->ss.rows_scanned += s->count;
    return 0;
}

static int load_next(pq_reader_t *R, kl_err *e) {
    pq_scan *s = R->scan;
    if (R->npreds == 0) return load_prefetch(R, e);
    for (; s->rg < R->nrg; s->rg++) {
        size_t g = s->rg;
        int64_t rows = R->rgs[g].num_rows;
        int skip = rows == 0;
        for (size_t i = 0; i < R->npreds && !skip; i++) {
            const pq_pred *p = &R->preds[i];
            const pq_leaf *L = &R->leaves[p->col];
            const pq_chunk *ch = &R->rgs[g].cols[p->col];
            if (ch->stats.has_null_count && ch->stats.null_count >= rows) { skip = 1; break; }
            kl_pq_value mn, mx;
            if (kl__pq_stats_usable(R, L, &ch->stats) && kl__pq_stat_value(L, ch->stats.min, ch->stats.nmin, &mn) &&
                kl__pq_stat_value(L, ch->stats.max, ch->stats.nmax, &mx) && !may_match(p, L->type, &mn, &mx))
                skip = 1;
        }
        if (skip) { R->ss.row_groups_skipped++; continue; }
        range *rs = malloc(sizeof *rs);
        size_t nr = 1;
        if (!rs) return kl_err_set(e, KL_ENOMEM, "out of memory");
        rs[0] = (range){0, rows};
        for (size_t i = 0; i < R->npreds; i++)
            if (page_ranges(R, g, &R->preds[i], &rs, &nr)) { free(rs); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        if (nr == 0) { free(rs); R->ss.row_groups_skipped++; continue; }
        int full = nr == 1 && rs[0].a == 0 && rs[0].b == rows;
        int64_t expect = 0;
        for (size_t k = 0; k < nr; k++) expect += rs[k].b - rs[k].a;
        chunk_job *jobs = calloc(s->nneed + 1, sizeof *jobs);
        if (!jobs) { free(rs); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        for (size_t k = 0; k < s->nneed; k++) {
            jobs[k] = (chunk_job){R, g, s->need[k], rs, nr, full, s->cols[k], NULL, 0, 0, 0, {0}, NULL};
        }
        int rc = run_jobs(s, jobs, s->nneed, e);
        if (rc) { free(jobs); free(rs); return rc; }
        for (size_t k = 0; k < s->nneed; k++) {
            R->ss.pages_read += jobs[k].pages_read;
            R->ss.pages_skipped += jobs[k].pages_skipped;
            if (jobs[k].rc && !rc) { rc = jobs[k].rc; if (e) *e = jobs[k].err; }
        }
        for (size_t k = 0; k < s->nneed && !rc; k++)
            if ((int64_t)s->cols[k]->len != expect)
                rc = kl_err_set(e, KL_EPARSE, "%s: column %s (row group %zu): %zu rows decoded, expected %lld",
                                R->name, s->cols[k]->name, g, s->cols[k]->len, (long long)expect);
        free(jobs);
        free(rs);
        if (rc) return rc;
        R->ss.row_groups_read++;
        R->ss.rows_scanned += (uint64_t)expect;
        s->count = (size_t)expect;
        s->pos = 0;
        s->use_selv = 0;
        if (R->npreds) {
            if (GROW(s->selv, s->capselv, s->count + 1)) return kl_err_set(e, KL_ENOMEM, "out of memory");
            size_t m = 0;
            for (size_t i = 0; i < s->count; i++) {
                int ok = 1;
                for (size_t q = 0; q < R->npreds && ok; q++)
                    ok = row_match(&R->preds[q], s->cols[pred_need(s, R->preds[q].col)], i);
                if (ok) s->selv[m++] = (uint32_t)i;
            }
            s->nselv = m;
            s->count = m;
            s->use_selv = 1;
        }
        s->rg++;
        s->loaded = 1;
        if (s->count == 0) continue;
        return 0;
    }
    s->loaded = 0;
    return 1;
}

static int gather(kl_column *dst, const kl_column *src, const uint32_t *idx, size_t n) {
    if (n == 0) return KL_OK;
    size_t data = 0;
    int var = src->type == KL_COL_STRING || src->type == KL_COL_BINARY;
    if (var) for (size_t i = 0; i < n; i++) data += (size_t)(src->offsets[idx[i] + 1] - src->offsets[idx[i]]);
    if (kl_column_reserve(dst, dst->len + n, dst->data_len + data)) return KL_ENOMEM;
    if (src->valid) {
        if (!dst->valid) {
            dst->valid = kl_mem_alloc(dst->cap, KL_TAG_DATASET);
            if (!dst->valid) return KL_ENOMEM;
            memset(dst->valid, 1, dst->len);
        }
        for (size_t i = 0; i < n; i++) dst->valid[dst->len + i] = src->valid[idx[i]];
    } else if (dst->valid) memset(dst->valid + dst->len, 1, n);
    if (var) {
        for (size_t i = 0; i < n; i++) {
            int64_t a = src->offsets[idx[i]], l = src->offsets[idx[i] + 1] - a;
            if (l) memcpy(dst->data + dst->data_len, src->data + a, (size_t)l);
            dst->data_len += (size_t)l;
            dst->offsets[dst->len + i + 1] = (int64_t)dst->data_len;
        }
    } else {
        size_t w = kl_col_type_size(src->type);
        for (size_t i = 0; i < n; i++) memcpy((char *)dst->values + (dst->len + i) * w, (const char *)src->values + (size_t)idx[i] * w, w);
    }
    dst->len += n;
    return KL_OK;
}

static int read_batch(pq_reader_t *R, size_t max_rows, kl_column **cols, size_t *nrows, kl_err *e) {
    pq_scan *s = R->scan;
    int rc;
    for (size_t i = 0; i < R->nsel; i++) {
        const kl_pq_column_info *L = kl__pq_colinfo(R, R->sel[i]);
        if (!cols[i]) {
            if ((rc = kl_column_new(L->name, L->type, L->nullable, 0, &cols[i], e))) return rc;
        } else {
            if (cols[i]->type != L->type) return kl_err_set(e, KL_ETYPE, "%s: column %s is %s, the output column is %s", R->name, L->name, kl_col_type_name(L->type), kl_col_type_name(cols[i]->type));
            kl_column_clear(cols[i]);
            if (L->nullable) cols[i]->nullable = 1;
        }
    }
    if (max_rows == 0) return KL_OK;
    if (!s->loaded || s->pos >= s->count) {
        rc = load_next(R, e);
        if (rc < 0) return rc;
        if (rc == 1) return KL_OK;
    }
    size_t k = KL_MIN(max_rows, s->count - s->pos);
    if (!s->use_selv && s->pos == 0 && k == s->count && s->swap_ok) {
        /* the whole row group in one batch: hand the decoded buffers over */
        for (size_t i = 0; i < R->nsel; i++) {
            kl_column *a = cols[i], *b = s->cols[s->sel_need[i]], t = *a;
            char *an = a->name, *bn = b->name;
            *a = *b; a->name = an;
            *b = t; b->name = bn;
            kl_column_clear(b);
        }
        s->pos = k;
        R->ss.rows_returned += k;
        *nrows = k;
        return KL_OK;
    }
    for (size_t i = 0; i < R->nsel; i++) {
        const kl_column *src = s->cols[s->sel_need[i]];
        int q = s->use_selv ? gather(cols[i], src, s->selv + s->pos, k) : kl_column_append(cols[i], src, s->pos, s->pos + k);
        if (q) return kl_err_set(e, KL_ENOMEM, "out of memory copying column %s", src->name);
    }
    s->pos += k;
    R->ss.rows_returned += k;
    *nrows = k;
    return KL_OK;
}

int kl_pq_read_batch(kl_pq_reader *r, size_t max_rows, kl_column **cols, size_t *nrows, kl_err *e) {
    pq_reader_t *R = (pq_reader_t *)r;
    *nrows = 0;
    int rc;
    if (!R->scan && (rc = scan_init(R, e))) { scan_free(R); return rc; }
    if (R->scan->vec) return kl_err_set(e, KL_EINVAL, "%s: kl_pq_read_batch during a vector scan (kl_pq_rewind first)", R->name);
    return read_batch(R, max_rows, cols, nrows, e);
}

int kl_pq_read_row_group(kl_pq_reader *r, size_t rg, kl_column **cols, size_t *nrows, kl_err *e) {
    pq_reader_t *R = (pq_reader_t *)r;
    *nrows = 0;
    if (rg >= R->nrg) return kl_err_set(e, KL_ERANGE, "%s: row group %zu of %zu", R->name, rg, R->nrg);
    if (R->npreds) return kl_err_set(e, KL_EINVAL, "%s: kl_pq_read_row_group with predicates", R->name);
    scan_reset(R);
    int rc = scan_init(R, e);
    if (rc) {
        scan_free(R);
        return rc;
    }
    R->scan->rg = rg;
    R->scan->rg_end = rg + 1;
    rc = read_batch(R, (size_t)R->rgs[rg].num_rows, cols, nrows, e);
    scan_reset(R); /* the next read starts from the first row group again */
    return rc;
}

static void vec_from(kl_pq_vector *v, const kl_column *c, const pq_vout *vo) {
    memset(v, 0, sizeof *v);
    v->type = c->type;
    v->rows = c->len;
    v->valid = c->valid;
    if (vo && vo->coded) {
        v->codes = vo->codes;
        v->dict = vo->dict;
    } else if (c->type == KL_COL_STRING || c->type == KL_COL_BINARY) {
        v->offsets = c->offsets;
        v->data = c->data;
    } else v->values = c->values;
}

int kl_pq_next_vectors(kl_pq_reader *r, const kl_pq_vector **vecs, size_t *nrows, kl_err *e) {
    pq_reader_t *R = (pq_reader_t *)r;
    *nrows = 0;
    *vecs = NULL;
    int rc;
    if (!R->scan) {
        if ((rc = scan_init(R, e))) { scan_free(R); return rc; }
        R->scan->vec = 1;
    }
    pq_scan *s = R->scan;
    if (!s->vec) return kl_err_set(e, KL_EINVAL, "%s: kl_pq_next_vectors after row or batch reads (kl_pq_rewind first)", R->name);
    if (!s->vecs && !(s->vecs = calloc(R->nsel + 1, sizeof *s->vecs))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (R->npreds) {
        /* predicates: the batch path, one whole (filtered) row group at a time */
        if (!s->vcols && !(s->vcols = calloc(R->nsel + 1, sizeof *s->vcols))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if ((rc = read_batch(R, SIZE_MAX, s->vcols, nrows, e))) return rc;
        for (size_t i = 0; i < R->nsel && *nrows; i++) vec_from(&s->vecs[i], s->vcols[i], NULL);
    } else {
        rc = load_prefetch(R, e);
        if (rc < 0) return rc;
        if (rc == 1) return KL_OK;
        for (size_t i = 0; i < R->nsel; i++)
            vec_from(&s->vecs[i], s->cols[s->sel_need[i]], &s->vout[s->cur_slot][s->sel_need[i]]);
        *nrows = s->count;
        s->pos = s->count;
        R->ss.rows_returned += s->count;
    }
    if (*nrows) *vecs = s->vecs;
    return KL_OK;
}

void kl_pq_rewind(kl_pq_reader *r) { scan_reset((pq_reader_t *)r); }

int kl_pq_next_row(kl_pq_reader *r, kl_pq_value *row, kl_err *e) {
    pq_reader_t *R = (pq_reader_t *)r;
    int rc;
    if (!R->scan && (rc = scan_init(R, e))) { scan_free(R); return rc; }
    pq_scan *s = R->scan;
    if (!s->rowbuf) {
        s->rowbuf = calloc(R->nsel + 1, sizeof *s->rowbuf);
        if (!s->rowbuf) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    if (s->row_pos >= s->row_n) {
        size_t n;
        if ((rc = kl_pq_read_batch(r, 4096, s->rowbuf, &n, e))) return rc;
        if (n == 0) return 0;
        s->row_pos = 0;
        s->row_n = n;
    }
    size_t i = s->row_pos++;
    for (size_t j = 0; j < R->nsel; j++) {
        const kl_column *c = s->rowbuf[j];
        kl_pq_value *v = &row[j];
        memset(v, 0, sizeof *v);
        v->type = c->type;
        if (kl_column_is_null(c, i)) { v->is_null = 1; continue; }
        if (c->type == KL_COL_STRING || c->type == KL_COL_BINARY) v->s = kl_column_get_str(c, i, &v->n);
        else if (c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64) v->f = kl_column_get_f64(c, i);
        else v->i = kl_column_get_i64(c, i);
    }
    return 1;
}

int kl_pq_read_file(const char *path, const char *const *names, size_t nnames, kl_column ***cols, size_t *ncols, kl_err *e) {
    *cols = NULL;
    *ncols = 0;
    kl_pq_reader *r;
    int rc = kl_pq_open(path, &r, e);
    if (rc) return rc;
    if (names && (rc = kl_pq_select(r, names, nnames, e))) { kl_pq_close(r); return rc; }
    size_t n = kl_pq_num_selected(r);
    kl_column **out = calloc(n + 1, sizeof *out), **batch = calloc(n + 1, sizeof *batch);
    if (!out || !batch) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (size_t i = 0; i < n; i++) {
        const kl_pq_column_info *ci = kl_pq_selected(r, i);
        if ((rc = kl_column_new(ci->name, ci->type, ci->nullable, 0, &out[i], e))) goto fail;
    }
    for (;;) {
        size_t got;
        if ((rc = kl_pq_read_batch(r, 1u << 20, batch, &got, e))) goto fail;
        if (got == 0) break;
        for (size_t i = 0; i < n; i++)
            if (kl_column_append(out[i], batch[i], 0, got)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    }
    for (size_t i = 0; i < n; i++) kl_column_free(batch[i]);
    free(batch);
    kl_pq_close(r);
    *cols = out;
    *ncols = n;
    return KL_OK;
fail:
    if (batch) for (size_t i = 0; i < n; i++) kl_column_free(batch[i]);
    if (out) for (size_t i = 0; i < n; i++) kl_column_free(out[i]);
    free(batch);
    free(out);
    kl_pq_close(r);
    return rc;
}
