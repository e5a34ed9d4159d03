/* The Parquet writer: buffers batches of kl_columns into row groups (cut by
 * rows or bytes), encodes each column chunk (PLAIN or RLE_DICTIONARY values,
 * RLE definition levels, data page v1 or v2, page statistics, CRCs) in
 * parallel — a list column as a 3-level LIST with repetition levels, a
 * struct column as one chunk per field — compresses pages, then writes the
 * column and offset indexes and the Thrift footer. The file appears at its path only on a successful close
 * (temp file + fsync + rename). */
#include <math.h>
#include <stdlib.h>

#include "data/parquet_int.h"

/* ==================================================================
 * Options and names
 * ================================================================== */

const char *kl_pq_codec_name(kl_pq_codec c) {
    static const char *n[] = {"none", "snappy", "gzip", "zstd", "lz4_raw"};
    return (unsigned)c < 5 ? n[c] : "?";
}

int kl_pq_codec_parse(const char *s, kl_pq_codec *out) {
    if (!s) return KL_EINVAL;
    if (!strcmp(s, "uncompressed")) { *out = KL_PQ_UNCOMPRESSED; return KL_OK; }
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, kl_pq_codec_name((kl_pq_codec)i))) { *out = (kl_pq_codec)i; return KL_OK; }
    return KL_EINVAL;
}

void kl_pq_write_opts_default(kl_pq_write_opts *o) {
    memset(o, 0, sizeof *o);
    o->codec = KL_PQ_ZSTD;
    o->zstd_level = 3;
    o->row_group_rows = 131072;
    o->row_group_bytes = 128u << 20;
    o->page_bytes = 1u << 20;
    o->dictionary = 1;
    o->page_stats = 1;
}

static int codec_id(kl_pq_codec c) {
    switch (c) {
    case KL_PQ_SNAPPY: return CODEC_SNAPPY;
    case KL_PQ_GZIP: return CODEC_GZIP;
    case KL_PQ_ZSTD: return CODEC_ZSTD;
    case KL_PQ_LZ4_RAW: return CODEC_LZ4_RAW;
    default: return CODEC_UNCOMPRESSED;
    }
}

static int phys_type(kl_col_type t) {
    switch (t) {
    case KL_COL_BOOL: return PT_BOOLEAN;
    case KL_COL_INT32: case KL_COL_DATE: return PT_INT32;
    case KL_COL_INT64: case KL_COL_TIMESTAMP: return PT_INT64;
    case KL_COL_FLOAT32: return PT_FLOAT;
    case KL_COL_FLOAT64: return PT_DOUBLE;
    default: return PT_BYTE_ARRAY;
    }
}

static int is_var(kl_col_type t) { return t == KL_COL_STRING || t == KL_COL_BINARY; }

/* The type of c's Parquet leaf: the element type of a list. */
static kl_col_type leaf_type(const kl_column *c) { return c->type == KL_COL_LIST ? c->child->type : c->type; }

/* Plain bytes of rows [a, b) of c (row-group sizing). */
static uint64_t rows_bytes(const kl_column *c, size_t a, size_t b) {
    if (c->type == KL_COL_STRUCT) {
        uint64_t n = b - a;
        for (size_t j = 0; j < c->nfields; j++) n += rows_bytes(c->fields[j], a, b);
        return n;
    }
    if (c->type == KL_COL_LIST)
        return 4 * (uint64_t)(b - a) + rows_bytes(c->child, (size_t)c->offsets[a], (size_t)c->offsets[b]);
    if (is_var(c->type)) return (uint64_t)(c->offsets[b] - c->offsets[a]) + 4 * (uint64_t)(b - a);
    return kl_col_type_size(c->type) * (uint64_t)(b - a);
}

void kl_pq_file_info_clear(kl_pq_file_info *info) {
    if (!info) return;
    for (size_t i = 0; i < info->ncols; i++) {
        free(info->cols[i].name);
        if (is_var(info->cols[i].type) || is_var(info->cols[i].stats.min.type)) { /* a list: its leaf's */
            free((void *)info->cols[i].stats.min.s);
            free((void *)info->cols[i].stats.max.s);
        }
    }
    free(info->cols);
    memset(info, 0, sizeof *info);
}

/* ==================================================================
 * Statistics
 * ================================================================== */

typedef struct {
    int has;            /* min/max set */
    int64_t imin, imax;
    double fmin, fmax;
    const char *smin, *smax; size_t nmin, nmax;
    uint64_t nulls;
} wstats;

static int strcmp_n(const char *a, size_t na, const char *b, size_t nb) {
    int c = memcmp(a, b, KL_MIN(na, nb));
    if (c) return c;
    return na < nb ? -1 : na > nb;
}

/* Adds non-null row i of c. */
static inline void stats_add(wstats *s, const kl_column *c, size_t i) {
    switch (c->type) {
    case KL_COL_FLOAT32: case KL_COL_FLOAT64: {
        double v = kl_column_get_f64(c, i);
        if (isnan(v)) return;
        if (!s->has) { s->fmin = s->fmax = v; s->has = 1; return; }
        if (v < s->fmin) s->fmin = v;
        if (v > s->fmax) s->fmax = v;
        return;
    }
    case KL_COL_STRING: case KL_COL_BINARY: {
        size_t n;
        const char *p = kl_column_get_str(c, i, &n);
        if (!s->has) { s->smin = s->smax = p; s->nmin = s->nmax = n; s->has = 1; return; }
        if (strcmp_n(p, n, s->smin, s->nmin) < 0) { s->smin = p; s->nmin = n; }
        if (strcmp_n(p, n, s->smax, s->nmax) > 0) { s->smax = p; s->nmax = n; }
        return;
    }
    default: {
        int64_t v = kl_column_get_i64(c, i);
        if (!s->has) { s->imin = s->imax = v; s->has = 1; return; }
        if (v < s->imin) s->imin = v;
        if (v > s->imax) s->imax = v;
    }
    }
}

/* Statistics of rows [from, to) of c, with typed fast paths. */
static void stats_range(wstats *s, const kl_column *c, size_t from, size_t to) {
    const uint8_t *ok = c->valid;
    if (c->type == KL_COL_INT64 || c->type == KL_COL_TIMESTAMP || c->type == KL_COL_FLOAT64) {
        const int64_t *iv = c->values;
        const double *dv = c->values;
        int fl = c->type == KL_COL_FLOAT64;
        for (size_t i = from; i < to; i++) {
            if (ok && !ok[i]) { s->nulls++; continue; }
            if (fl) {
                double v = dv[i];
                if (isnan(v)) continue;
                if (!s->has) { s->fmin = s->fmax = v; s->has = 1; continue; }
                if (v < s->fmin) s->fmin = v;
                if (v > s->fmax) s->fmax = v;
            } else {
                int64_t v = iv[i];
                if (!s->has) { s->imin = s->imax = v; s->has = 1; continue; }
                if (v < s->imin) s->imin = v;
                if (v > s->imax) s->imax = v;
            }
        }
        return;
    }
    for (size_t i = from; i < to; i++) {
        if (ok && !ok[i]) s->nulls++;
        else stats_add(s, c, i);
    }
}

/* Plain encoding of the min (which=0) or max (1) into buf; returns its length. */
static size_t stats_bytes(const wstats *s, kl_col_type t, int which, uint8_t *buf, const char **ptr) {
    *ptr = (const char *)buf;
    switch (phys_type(t)) {
    case PT_BOOLEAN: buf[0] = (uint8_t)(which ? s->imax : s->imin); return 1;
    case PT_INT32: { int32_t v = (int32_t)(which ? s->imax : s->imin); memcpy(buf, &v, 4); return 4; }
    case PT_INT64: { int64_t v = which ? s->imax : s->imin; memcpy(buf, &v, 8); return 8; }
    case PT_FLOAT: {
        float v = (float)(which ? s->fmax : s->fmin);
        if (v == 0) v = which ? 0.0f : -0.0f;
        memcpy(buf, &v, 4);
        return 4;
    }
    case PT_DOUBLE: {
        double v = which ? s->fmax : s->fmin;
        if (v == 0) v = which ? 0.0 : -0.0;
        memcpy(buf, &v, 8);
        return 8;
    }
    default:
        *ptr = which ? s->smax : s->smin;
        return which ? s->nmax : s->nmin;
    }
}

/* Serializes a Statistics struct (fields only + STOP) as a nested struct. */
static void write_stats(kl__tw *w, int16_t id, const wstats *s, kl_col_type t) {
    kl__tw_begin(w, id);
    uint8_t b1[8], b2[8];
    const char *pmin, *pmax;
    size_t nmin = 0, nmax = 0;
    if (s->has) {
        nmin = stats_bytes(s, t, 0, b1, &pmin);
        nmax = stats_bytes(s, t, 1, b2, &pmax);
        if (!is_var(t)) {
            kl__tw_bin(w, 1, pmax, nmax);
            kl__tw_bin(w, 2, pmin, nmin);
        }
    }
    kl__tw_i64(w, 3, (int64_t)s->nulls);
    if (s->has) {
        kl__tw_bin(w, 5, pmax, nmax);
        kl__tw_bin(w, 6, pmin, nmin);
    }
    kl__tw_end(w);
}

/* ==================================================================
 * Dictionary building (open addressing hash over values)
 * ================================================================== */

typedef struct {
    uint32_t *slots;  /* index+1, 0 = empty */
    size_t mask;
    uint32_t *rows;   /* first row of each dictionary entry */
    size_t n, cap;
    size_t bytes;     /* plain size of the dictionary */
} dict;

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { uint64_t x; memcpy(&x, s + i, 8); h = (h ^ x) * 0x100000001b3ull; h ^= h >> 29; }
    for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 32; h *= 0xd6e8feb86659fd93ull; h ^= h >> 32;
    return h;
}

static int value_eq(const kl_column *c, size_t a, size_t b) {
    size_t w0 = kl_col_type_size(c->type);
    if (w0 == 8) return ((const uint64_t *)c->values)[a] == ((const uint64_t *)c->values)[b];
    if (w0 == 4) return ((const uint32_t *)c->values)[a] == ((const uint32_t *)c->values)[b];
    if (is_var(c->type)) {
        size_t na, nb;
        const char *pa = kl_column_get_str(c, a, &na), *pb = kl_column_get_str(c, b, &nb);
        return na == nb && memcmp(pa, pb, na) == 0;
    }
    size_t w = kl_col_type_size(c->type);
    return memcmp((const char *)c->values + a * w, (const char *)c->values + b * w, w) == 0;
}

static uint64_t mix64(uint64_t h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
    return h;
}

static uint64_t value_hash(const kl_column *c, size_t i) {
    size_t w0 = kl_col_type_size(c->type);
    if (w0 == 8) return mix64(((const uint64_t *)c->values)[i]);
    if (w0 == 4) return mix64(((const uint32_t *)c->values)[i]);
    if (is_var(c->type)) { size_t n; const char *p = kl_column_get_str(c, i, &n); return hash_bytes(p, n); }
    size_t w = kl_col_type_size(c->type);
    return hash_bytes((const char *)c->values + i * w, w);
}

#define DICT_MAX_BYTES (1u << 20)
#define DICT_MAX_ENTRIES 65536u

/* Builds idx[] (one per non-null row, in order) or returns 0 when a
 * dictionary does not pay. */
static int dict_build(const kl_column *c, size_t rows, dict *d, uint32_t *idx, size_t *nidx) {
    memset(d, 0, sizeof *d);
    size_t nslots = 1024;
    d->slots = kl_mem_calloc(nslots, sizeof *d->slots, KL_TAG_WORKSPACE);
    d->mask = nslots - 1;
    d->cap = 256;
    d->rows = kl_mem_alloc(d->cap * sizeof *d->rows, KL_TAG_WORKSPACE);
    if (!d->slots || !d->rows) return 0;
    size_t k = 0, w = kl_col_type_size(c->type);
    for (size_t i = 0; i < rows; i++) {
        if (kl_column_is_null(c, i)) continue;
        uint64_t h = value_hash(c, i);
        size_t s = h & d->mask;
        uint32_t id;
        for (;;) {
            uint32_t v = d->slots[s];
            if (!v) {
                if (d->n >= DICT_MAX_ENTRIES) return 0;
                if (d->n == d->cap) {
                    uint32_t *nr = kl_mem_realloc(d->rows, 2 * d->cap * sizeof *nr, KL_TAG_WORKSPACE);
                    if (!nr) return 0;
                    d->rows = nr; d->cap *= 2;
                }
                d->rows[d->n] = (uint32_t)i;
                id = (uint32_t)d->n++;
                d->slots[s] = id + 1;
                size_t n = w;
                if (is_var(c->type)) { kl_column_get_str(c, i, &n); n += 4; }
                d->bytes += n;
                if (d->bytes > DICT_MAX_BYTES) return 0;
                if (d->n * 2 > d->mask) { /* grow and rehash */
                    size_t ns = (d->mask + 1) * 2;
                    uint32_t *sl = kl_mem_calloc(ns, sizeof *sl, KL_TAG_WORKSPACE);
                    if (!sl) return 0;
                    for (size_t j = 0; j < d->n; j++) {
                        size_t q = value_hash(c, d->rows[j]) & (ns - 1);
                        while (sl[q]) q = (q + 1) & (ns - 1);
                        sl[q] = (uint32_t)j + 1;
                    }
                    kl_mem_free(d->slots);
                    d->slots = sl;
                    d->mask = ns - 1;
                }
                break;
            }
            if (value_eq(c, d->rows[v - 1], i)) { id = v - 1; break; }
            s = (s + 1) & d->mask;
        }
        idx[k++] = id;
        /* mostly distinct values: a dictionary will not pay, stop early */
        if (k == 16384 && d->n > 12000) return 0;
    }
    *nidx = k;
    /* pays when dictionary + indexes are clearly smaller than plain values */
    size_t plain = 0;
    if (is_var(c->type)) plain = (size_t)(c->offsets[rows] - c->offsets[0]) + 4 * k;
    else plain = w * k;
    int bw = pq_bit_width(d->n ? d->n - 1 : 0);
    size_t est = d->bytes + (k * (size_t)bw + 7) / 8 + 16;
    return d->n > 0 && est * 4 < plain * 3;
}

static void dict_free(dict *d) { kl_mem_free(d->slots); kl_mem_free(d->rows); memset(d, 0, sizeof *d); }

/* ==================================================================
 * Column chunk encoding
 * ================================================================== */

typedef struct {
    int64_t rel_off;     /* from the start of the chunk */
    int32_t size;        /* header + compressed data */
    int64_t first_row;
} page_loc;

typedef struct {
    int rc; kl_err err;
    pq_buf bytes;         /* the encoded chunk: [dict page] data pages */
    int has_dict;
    int64_t data_rel;     /* offset of the first data page in bytes */
    int64_t num_values, unc_size;
    wstats st;            /* chunk statistics (strings point into the buffered column) */
    pq_buf stats_ser;     /* the serialized Statistics struct */
    pq_buf ci;            /* serialized ColumnIndex */
    page_loc *pages; size_t npages;
} chunk_out;

typedef struct {
    int64_t data_page_offset, dict_page_offset, num_values, unc, comp;
    int has_dict;
    pq_buf stats_ser, ci, oi;
    int64_t ci_off, oi_off;
} chunk_meta;

typedef struct { int64_t rows, unc, comp, offset; chunk_meta *cols; } rg_meta;

/* A Parquet leaf: column col, or field field (>= 0) of the struct column col. */
typedef struct {
    size_t col;
    int field;
} leaf_ref;

struct kl_pq_writer {
    kl_afile *f;
    char *path;
    kl_pq_write_opts o;
    size_t ncols;
    size_t nleaf; /* Parquet leaf columns: one per column, one per field of a struct */
    leaf_ref *leaf;
    kl_column **buf;         /* buffered rows of the current row group */
    uint64_t buf_bytes;
    uint64_t offset;
    uint64_t total_rows;
    rg_meta *rgs; size_t nrg, caprg;
    char **kv; size_t nkv;
    kl_pq_file_info info;    /* file statistics being accumulated */
    kl_pq_col_stats *fst;    /* = info.cols[i].stats */
};

static void plain_values(pq_buf *b, const kl_column *c, size_t from, size_t to) {
    size_t w = kl_col_type_size(c->type);
    switch (c->type) {
    case KL_COL_BOOL: {
        uint8_t acc = 0; int nb = 0;
        for (size_t i = from; i < to; i++) {
            if (kl_column_is_null(c, i)) continue;
            acc |= (uint8_t)(((const uint8_t *)c->values)[i] & 1) << nb;
            if (++nb == 8) { pq_buf_byte(b, acc); acc = 0; nb = 0; }
        }
        if (nb) pq_buf_byte(b, acc);
        return;
    }
    case KL_COL_STRING: case KL_COL_BINARY:
        for (size_t i = from; i < to; i++) {
            if (kl_column_is_null(c, i)) continue;
            size_t n;
            const char *p = kl_column_get_str(c, i, &n);
            uint32_t l = (uint32_t)n;
            pq_buf_put(b, &l, 4);
            pq_buf_put(b, p, n);
        }
        return;
    default:
        if (!c->valid) { pq_buf_put(b, (const char *)c->values + from * w, (to - from) * w); return; }
        for (size_t i = from; i < to; i++)
            if (c->valid[i]) pq_buf_put(b, (const char *)c->values + i * w, w);
    }
}

typedef struct {
    const kl_pq_write_opts *o;
    int nullable;
    size_t cap_pages; /* of out->pages, ci_nullpage, ci_nulls */
    uint8_t *ci_nullpage; uint64_t *ci_nulls;
    pq_buf ci_min, ci_max;  /* concatenated [u32 len][bytes] */
    size_t ci_n;
    int asc, desc;
    wstats prev;
} page_ctx;

static void ci_add(page_ctx *pc, const wstats *s, kl_col_type t) {
    uint8_t b1[8], b2[8];
    const char *pmin = "", *pmax = "";
    size_t nmin = 0, nmax = 0;
    if (s->has) { nmin = stats_bytes(s, t, 0, b1, &pmin); nmax = stats_bytes(s, t, 1, b2, &pmax); }
    uint32_t l = (uint32_t)nmin;
    pq_buf_put(&pc->ci_min, &l, 4); pq_buf_put(&pc->ci_min, pmin, nmin);
    l = (uint32_t)nmax;
    pq_buf_put(&pc->ci_max, &l, 4); pq_buf_put(&pc->ci_max, pmax, nmax);
    if (s->has && pc->prev.has) {
        int cmin, cmax;
        if (is_var(t)) { cmin = strcmp_n(s->smin, s->nmin, pc->prev.smin, pc->prev.nmin); cmax = strcmp_n(s->smax, s->nmax, pc->prev.smax, pc->prev.nmax); }
        else if (t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64) { cmin = (s->fmin > pc->prev.fmin) - (s->fmin < pc->prev.fmin); cmax = (s->fmax > pc->prev.fmax) - (s->fmax < pc->prev.fmax); }
        else { cmin = (s->imin > pc->prev.imin) - (s->imin < pc->prev.imin); cmax = (s->imax > pc->prev.imax) - (s->imax < pc->prev.imax); }
        if (cmin < 0 || cmax < 0) pc->asc = 0;
        if (cmin > 0 || cmax > 0) pc->desc = 0;
    }
    if (s->has) pc->prev = *s;
}

/* One data page to be written: RLE-encoded levels (NULL when the column
 * has none), the encoded values and what the header says about them. */
typedef struct {
    const pq_buf *rep, *def, *vals;
    size_t nvalues; /* level entries (= rows for a flat column) */
    size_t nrows;
    size_t nnulls;    /* entries without a value */
    int enc;          /* of the values */
    size_t first_row; /* in the row group */
    const wstats *ps; /* page statistics */
    kl_col_type type; /* of the values */
} page_in;

/* Room for one more page in the page table of out / pc. */
static int page_room(chunk_out *out, page_ctx *pc, kl_err *e) {
    if (out->npages < pc->cap_pages) return KL_OK;
    size_t nc = pc->cap_pages ? 2 * pc->cap_pages : 16;
    page_loc *pl = realloc(out->pages, nc * sizeof *pl);
    if (pl) out->pages = pl;
    uint8_t *np = realloc(pc->ci_nullpage, nc);
    if (np) pc->ci_nullpage = np;
    uint64_t *nn = realloc(pc->ci_nulls, nc * sizeof *nn);
    if (nn) pc->ci_nulls = nn;
    if (!pl || !np || !nn) return kl_err_set(e, KL_ENOMEM, "out of memory");
    pc->cap_pages = nc;
    return KL_OK;
}

/* Appends a level run with its 4-byte length (data page v1). */
static void put_levels_v1(pq_buf *page, const pq_buf *lev) {
    if (!lev) return;
    uint32_t l = (uint32_t)lev->len;
    pq_buf_put(page, &l, 4);
    pq_buf_put(page, lev->p, lev->len);
}

/* Compresses p's page (v1: levels and values; v2: values only, levels
 * stored uncompressed in front), appends header and data to out and
 * records the page in the page table and column index. page/comp/hdr are
 * scratch buffers. */
static int put_page(const kl_pq_write_opts *o, chunk_out *out, page_ctx *pc, const page_in *p, pq_buf *page,
                    pq_buf *comp, pq_buf *hdr, kl_err *e) {
    int codec = codec_id(o->codec), rc;
    size_t rl = p->rep ? p->rep->len : 0, dl = p->def ? p->def->len : 0, unc;
    page->len = 0;
    comp->len = 0;
    if (!o->data_page_v2) {
        put_levels_v1(page, p->rep);
        put_levels_v1(page, p->def);
        pq_buf_put(page, p->vals->p, p->vals->len);
        if (page->failed) return kl_err_set(e, KL_ENOMEM, "out of memory");
        unc = page->len;
        if ((rc = kl__pq_compress(codec, o->zstd_level, page->p, page->len, comp, e))) return rc;
    } else {
        if (p->rep) pq_buf_put(comp, p->rep->p, rl);
        if (p->def) pq_buf_put(comp, p->def->p, dl);
        if ((rc = kl__pq_compress(codec, o->zstd_level, p->vals->p, p->vals->len, comp, e))) return rc;
        unc = rl + dl + p->vals->len;
    }
    if (unc > INT32_MAX || comp->len > INT32_MAX || p->nvalues > INT32_MAX)
        return kl_err_set(e, KL_ERANGE,
                          "a data page of %zu values and %zu bytes is over the format's 2^31 limit (a row too large?)",
                          p->nvalues, unc);
    if ((rc = page_room(out, pc, e))) return rc;
    kl__tw w;
    hdr->len = 0;
    kl__tw_init(&w, hdr);
    kl__tw_i32(&w, 1, o->data_page_v2 ? PAGE_DATA_V2 : PAGE_DATA);
    kl__tw_i32(&w, 2, (int32_t)unc);
    kl__tw_i32(&w, 3, (int32_t)comp->len);
    kl__tw_i32(&w, 4, (int32_t)kl__pq_crc32(comp->p, comp->len));
    if (!o->data_page_v2) {
        kl__tw_begin(&w, 5);
        kl__tw_i32(&w, 1, (int32_t)p->nvalues);
        kl__tw_i32(&w, 2, p->enc);
        kl__tw_i32(&w, 3, ENC_RLE);
        kl__tw_i32(&w, 4, ENC_RLE);
        if (o->page_stats) write_stats(&w, 5, p->ps, p->type);
        kl__tw_end(&w);
    } else {
        kl__tw_begin(&w, 8);
        kl__tw_i32(&w, 1, (int32_t)p->nvalues);
        kl__tw_i32(&w, 2, (int32_t)p->nnulls);
        kl__tw_i32(&w, 3, (int32_t)p->nrows);
        kl__tw_i32(&w, 4, p->enc);
        kl__tw_i32(&w, 5, (int32_t)dl);
        kl__tw_i32(&w, 6, (int32_t)rl);
        if (o->page_stats) write_stats(&w, 8, p->ps, p->type);
        kl__tw_end(&w);
    }
    kl__tw_end(&w);
    page_loc *pl = &out->pages[out->npages];
    pl->rel_off = (int64_t)out->bytes.len;
    pl->size = (int32_t)(hdr->len + comp->len);
    pl->first_row = (int64_t)p->first_row;
    pc->ci_nullpage[out->npages] = p->nvalues > 0 && p->nnulls == p->nvalues;
    pc->ci_nulls[out->npages] = p->nnulls;
    ci_add(pc, p->ps, p->type);
    out->npages++;
    pq_buf_put(&out->bytes, hdr->p, hdr->len);
    pq_buf_put(&out->bytes, comp->p, comp->len);
    out->unc_size += (int64_t)(hdr->len + unc);
    return KL_OK;
}

/* The chunk's serialized Statistics and (with page statistics) its
 * ColumnIndex, from out->st and the pages in pc. */
static void chunk_indexes(const kl_pq_write_opts *o, chunk_out *out, page_ctx *pc, kl_col_type t) {
    kl__tw w;
    kl__tw_init(&w, &out->stats_ser);
    write_stats(&w, 12, &out->st, t);
    if (o->page_stats) {
        kl__tw_init(&w, &out->ci);
        kl__tw_list(&w, 1, TT_TRUE, (uint32_t)out->npages);
        for (size_t p = 0; p < out->npages; p++) kl__tw_elem_bool(&w, pc->ci_nullpage[p]);
        pq_buf *mm[2] = {&pc->ci_min, &pc->ci_max};
        for (int m = 0; m < 2; m++) {
            kl__tw_list(&w, (int16_t)(2 + m), TT_BINARY, (uint32_t)out->npages);
            size_t off = 0;
            for (size_t p = 0; p < out->npages; p++) {
                uint32_t l;
                memcpy(&l, mm[m]->p + off, 4);
                kl__tw_elem_bin(&w, mm[m]->p + off + 4, l);
                off += 4 + l;
            }
        }
        kl__tw_i32(&w, 4, pc->asc ? 1 : pc->desc ? 2 : 0);
        kl__tw_list(&w, 5, TT_I64, (uint32_t)out->npages);
        for (size_t p = 0; p < out->npages; p++) kl__tw_elem_i32(&w, (int64_t)pc->ci_nulls[p]);
        kl__tw_end(&w);
    }
}

/* Encodes one column chunk of rows [0, rows) of c; parent: the struct c is
 * a field of, or NULL. */
static void encode_chunk(const kl_pq_write_opts *o, const kl_column *c, const kl_column *parent, int nullable,
                         size_t rows, chunk_out *out) {
    kl_err *e = &out->err;
    int codec = codec_id(o->codec);
    dict d;
    memset(&d, 0, sizeof d);
    uint32_t *idx = NULL, *lv = NULL;
    size_t nidx = 0;
    pq_buf vals = {0}, lev = {0}, page = {0}, comp = {0}, hdr = {0};
    page_ctx pc;
    memset(&pc, 0, sizeof pc);
    pc.asc = pc.desc = 1;
    int rc = KL_OK;
    out->num_values = (int64_t)rows;
    /* definition levels: a struct field's count the struct (when nullable) and the field */
    uint32_t maxdef = parent ? (uint32_t)(parent->nullable != 0) + 1 : (uint32_t)(nullable != 0);

    /* output: roughly the plain size, compressed */
    kl__pq_buf_reserve(&out->bytes, rows * (kl_col_type_size(c->type) ? kl_col_type_size(c->type) : 8) / 2 + 4096);
    /* chunk statistics */
    stats_range(&out->st, c, 0, rows);

    /* dictionary */
    int use_dict = 0;
    if (o->dictionary && c->type != KL_COL_BOOL && rows > 0) {
        idx = kl_mem_alloc((rows ? rows : 1) * sizeof *idx, KL_TAG_WORKSPACE);
        if (!idx) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        use_dict = dict_build(c, rows, &d, idx, &nidx);
    }
    int bw = use_dict ? pq_bit_width(d.n ? d.n - 1 : 0) : 0;
    if (use_dict) {
        for (size_t j = 0; j < d.n; j++) plain_values(&vals, c, d.rows[j], d.rows[j] + 1);
        comp.len = 0;
        if ((rc = kl__pq_compress(codec, o->zstd_level, vals.p, vals.len, &comp, e))) goto done;
        kl__tw w;
        hdr.len = 0;
        kl__tw_init(&w, &hdr);
        kl__tw_i32(&w, 1, PAGE_DICT);
        kl__tw_i32(&w, 2, (int32_t)vals.len);
        kl__tw_i32(&w, 3, (int32_t)comp.len);
        kl__tw_i32(&w, 4, (int32_t)kl__pq_crc32(comp.p, comp.len));
        kl__tw_begin(&w, 7);
        kl__tw_i32(&w, 1, (int32_t)d.n);
        kl__tw_i32(&w, 2, ENC_PLAIN);
        kl__tw_end(&w);
        kl__tw_end(&w);
        pq_buf_put(&out->bytes, hdr.p, hdr.len);
        pq_buf_put(&out->bytes, comp.p, comp.len);
        out->unc_size += (int64_t)(hdr.len + vals.len);
        out->has_dict = 1;
        vals.len = 0;
    }
    out->data_rel = (int64_t)out->bytes.len;

    /* pages */
    size_t w8 = kl_col_type_size(c->type);
    uint64_t pb = o->page_bytes ? o->page_bytes : (1u << 20);
    size_t max_rows = (size_t)KL_MAX(pb / 8, 1);
    lv = kl_mem_alloc((KL_MIN(rows, max_rows) + 8) * sizeof *lv, KL_TAG_WORKSPACE);
    if (!lv) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    size_t row = 0, ix = 0;
    do {
        /* pick the page's rows */
        size_t end = row;
        uint64_t bytes = 0;
        while (end < rows && end - row < max_rows && bytes < pb) {
            if (use_dict) bytes += (uint64_t)(bw + 1) / 8 + 1;
            else if (is_var(c->type)) { size_t n; kl_column_get_str(c, end, &n); bytes += n + 4; }
            else bytes += w8 ? w8 : 1;
            end++;
        }
        size_t prow = end - row;
        wstats ps;
        memset(&ps, 0, sizeof ps);
        stats_range(&ps, c, row, end);
        /* levels */
        lev.len = 0;
        if (maxdef) {
            for (size_t i = row; i < end; i++)
                lv[i - row] = !kl_column_is_null(c, i)       ? maxdef
                    : parent && kl_column_is_null(parent, i) ? 0
                                                             : maxdef - 1;
            kl__pq_rle_encode(&lev, lv, prow, pq_bit_width(maxdef));
        }
        /* values */
        vals.len = 0;
        size_t nn = prow - ps.nulls;
        if (use_dict) {
            pq_buf_byte(&vals, (uint8_t)bw);
            kl__pq_rle_encode(&vals, idx + ix, nn, bw);
            ix += nn;
        } else {
            plain_values(&vals, c, row, end);
        }
        page_in pin = {NULL,
                       maxdef ? &lev : NULL,
                       &vals,
                       prow,
                       prow,
                       ps.nulls,
                       use_dict ? ENC_RLE_DICTIONARY : ENC_PLAIN,
                       row,
                       &ps,
                       c->type};
        if ((rc = put_page(o, out, &pc, &pin, &page, &comp, &hdr, e))) goto done;
        row = end;
    } while (row < rows);
    if (out->bytes.failed || pc.ci_min.failed || pc.ci_max.failed) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }

    chunk_indexes(o, out, &pc, c->type);
done:
    out->rc = rc;
    dict_free(&d);
    kl_mem_free(idx); kl_mem_free(lv);
    free(pc.ci_nullpage); free(pc.ci_nulls);
    kl__pq_buf_free(&pc.ci_min);
    kl__pq_buf_free(&pc.ci_max);
    kl__pq_buf_free(&vals);
    kl__pq_buf_free(&lev);
    kl__pq_buf_free(&page);
    kl__pq_buf_free(&comp);
    kl__pq_buf_free(&hdr);
}

/* ==================================================================
 * List columns: a 3-level LIST of one leaf with repetition and
 * definition levels (max rep 1; max def = list nullable + 1 + element
 * nullable). Dictionary off: the leaf is PLAIN. Pages split only between
 * rows, so every page starts at repetition level 0.
 * ================================================================== */

/* Growable level arrays of one page. */
typedef struct {
    uint32_t *rep, *def;
    size_t cap;
} levels;

static int levels_room(levels *L, size_t n) {
    if (n <= L->cap) return KL_OK;
    size_t nc = L->cap ? L->cap : 1024;
    while (nc < n) nc *= 2;
    uint32_t *r = kl_mem_realloc(L->rep, nc * sizeof *r, KL_TAG_WORKSPACE);
    if (r) L->rep = r;
    uint32_t *d = kl_mem_realloc(L->def, nc * sizeof *d, KL_TAG_WORKSPACE);
    if (d) L->def = d;
    if (!r || !d) return KL_ENOMEM;
    L->cap = nc;
    return KL_OK;
}

/* Level entries of list row i: one for a null or empty list, else one per element. */
static size_t list_entries(const kl_column *c, size_t i) {
    int64_t n = c->offsets[i + 1] - c->offsets[i];
    return kl_column_is_null(c, i) || n == 0 ? 1 : (size_t)n;
}

/* The levels of rows [from, to) of c into L (sized by the caller). */
static size_t list_levels(const kl_column *c, size_t from, size_t to, levels *L) {
    uint32_t nl = c->nullable != 0, dmax = nl + 1 + (c->child->nullable != 0);
    size_t k = 0;
    for (size_t i = from; i < to; i++) {
        int64_t a = c->offsets[i], b = c->offsets[i + 1];
        if (kl_column_is_null(c, i) || a == b) {
            L->rep[k] = 0;
            L->def[k++] = kl_column_is_null(c, i) ? 0 : nl;
            continue;
        }
        for (int64_t j = a; j < b; j++) {
            L->rep[k] = j != a;
            L->def[k++] = kl_column_is_null(c->child, (size_t)j) ? dmax - 1 : dmax;
        }
    }
    return k;
}

/* Plain size of elements [a, b) of the leaf column v. */
static uint64_t leaf_bytes(const kl_column *v, size_t a, size_t b) {
    if (is_var(v->type)) return (uint64_t)(v->offsets[b] - v->offsets[a]) + 4 * (uint64_t)(b - a);
    return (uint64_t)KL_MAX(kl_col_type_size(v->type), 1) * (b - a);
}

/* Statistics of the elements of rows [from, to); nulls counts every level
 * entry without a value (null elements, null and empty lists). */
static void list_stats(wstats *s, const kl_column *c, size_t from, size_t to, size_t entries) {
    size_t a = (size_t)c->offsets[from], b = (size_t)c->offsets[to];
    stats_range(s, c->child, a, b);
    size_t present = (b - a) - (size_t)s->nulls;
    s->nulls = entries - present;
}

/* Encodes one column chunk of list rows [0, rows) of c. */
static void encode_list_chunk(const kl_pq_write_opts *o, const kl_column *c, size_t rows, chunk_out *out) {
    kl_err *e = &out->err;
    const kl_column *v = c->child;
    levels L = {0};
    pq_buf rep = {0}, def = {0}, vals = {0}, page = {0}, comp = {0}, hdr = {0};
    page_ctx pc;
    memset(&pc, 0, sizeof pc);
    pc.asc = pc.desc = 1;
    int rc = KL_OK, dbw = pq_bit_width((uint64_t)(c->nullable != 0) + 1 + (v->nullable != 0));
    uint64_t pb = o->page_bytes ? o->page_bytes : (1u << 20), max_entries = KL_MAX(pb / 8, 1), total = 0;
    size_t row = 0;
    out->data_rel = 0;
    do {
        /* the page's rows: at least one, then up to the byte and entry targets */
        size_t end = row, entries = 0;
        uint64_t bytes = 0;
        while (end < rows && (end == row || (bytes < pb && entries < max_entries))) {
            entries += list_entries(c, end);
            bytes += leaf_bytes(v, (size_t)c->offsets[end], (size_t)c->offsets[end + 1]) + 1;
            end++;
        }
        if (levels_room(&L, entries)) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory for %zu levels", entries);
            goto done;
        }
        list_levels(c, row, end, &L);
        rep.len = def.len = vals.len = 0;
        kl__pq_rle_encode(&rep, L.rep, entries, 1);
        kl__pq_rle_encode(&def, L.def, entries, dbw);
        plain_values(&vals, v, (size_t)c->offsets[row], (size_t)c->offsets[end]);
        wstats ps;
        memset(&ps, 0, sizeof ps);
        list_stats(&ps, c, row, end, entries);
        page_in pin = {&rep, &def, &vals, entries, end - row, (size_t)ps.nulls, ENC_PLAIN, row, &ps, v->type};
        if ((rc = put_page(o, out, &pc, &pin, &page, &comp, &hdr, e))) goto done;
        total += entries;
        row = end;
    } while (row < rows);
    out->num_values = (int64_t)total;
    list_stats(&out->st, c, 0, rows, (size_t)total);
    if (out->bytes.failed || pc.ci_min.failed || pc.ci_max.failed || rep.failed || def.failed || vals.failed) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    chunk_indexes(o, out, &pc, v->type);
done:
    out->rc = rc;
    kl_mem_free(L.rep);
    kl_mem_free(L.def);
    free(pc.ci_nullpage);
    free(pc.ci_nulls);
    kl__pq_buf_free(&pc.ci_min);
    kl__pq_buf_free(&pc.ci_max);
    kl__pq_buf_free(&rep);
    kl__pq_buf_free(&def);
    kl__pq_buf_free(&vals);
    kl__pq_buf_free(&page);
    kl__pq_buf_free(&comp);
    kl__pq_buf_free(&hdr);
}

/* ==================================================================
 * Writer: buffering and row groups
 * ================================================================== */

static int wr(kl_pq_writer *w, const void *d, size_t n, kl_err *e) {
    int rc = kl_afile_write(w->f, d, n, e);
    if (rc == KL_OK) w->offset += n;
    return rc;
}

/* Encoding tasks: ngroups row groups × ncols columns, one chunk each. */
typedef struct { kl_pq_writer *w; kl_column *const *src; chunk_out *outs; size_t rows; } enc_ctx;

static void enc_task(void *ctx, size_t begin, size_t end, int chunk) {
    enc_ctx *x = ctx;
    const kl_pq_writer *w = x->w;
    for (size_t t = begin; t < end; t++) {
        size_t g = t / w->nleaf;
        const leaf_ref *L = &w->leaf[t % w->nleaf];
        const kl_column *c = x->src[g * w->ncols + L->col];
        if (L->field >= 0) encode_chunk(&w->o, c->fields[L->field], c, 1, x->rows, &x->outs[t]);
        else if (c->type == KL_COL_LIST) encode_list_chunk(&w->o, c, x->rows, &x->outs[t]);
        else encode_chunk(&w->o, c, NULL, w->buf[L->col]->nullable, x->rows, &x->outs[t]);
    }
}

static void stats_merge(kl_pq_col_stats *f, const wstats *s, kl_col_type t, uint64_t rows) {
    f->has_null_count = 1;
    f->null_count += s->nulls;
    f->num_values += rows;
    if (!s->has) return;
    f->min.type = f->max.type = t;
    if (is_var(t)) {
        if (!f->has_min_max || strcmp_n(s->smin, s->nmin, f->min.s, f->min.n) < 0) {
            char *p = malloc(s->nmin + 1);
            if (!p) return;
            memcpy(p, s->smin, s->nmin); p[s->nmin] = 0;
            free((void *)f->min.s); f->min.s = p; f->min.n = s->nmin;
        }
        if (!f->has_min_max || strcmp_n(s->smax, s->nmax, f->max.s, f->max.n) > 0) {
            char *p = malloc(s->nmax + 1);
            if (!p) return;
            memcpy(p, s->smax, s->nmax); p[s->nmax] = 0;
            free((void *)f->max.s); f->max.s = p; f->max.n = s->nmax;
        }
    } else if (t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64) {
        if (!f->has_min_max || s->fmin < f->min.f) f->min.f = s->fmin;
        if (!f->has_min_max || s->fmax > f->max.f) f->max.f = s->fmax;
    } else {
        if (!f->has_min_max || s->imin < f->min.i) f->min.i = s->imin;
        if (!f->has_min_max || s->imax > f->max.i) f->max.i = s->imax;
    }
    f->has_min_max = 1;
}

/* Encodes and writes one row group from src (the buffer, or views of a
 * caller's batch) of rows rows. */
/* Writes one encoded row group (outs: ncols chunks) and records its metadata;
 * frees the chunk buffers. */
static int emit_rg(kl_pq_writer *w, kl_column *const *src, size_t rows, chunk_out *outs, kl_err *e) {
    int rc = KL_OK;
    if (w->nrg == w->caprg) {
        size_t nc = w->caprg ? w->caprg * 2 : 8;
        rg_meta *nr = realloc(w->rgs, nc * sizeof *nr);
        if (!nr) return kl_err_set(e, KL_ENOMEM, "out of memory");
        w->rgs = nr; w->caprg = nc;
    }
    rg_meta *rg = &w->rgs[w->nrg];
    memset(rg, 0, sizeof *rg);
    rg->cols = calloc(w->nleaf, sizeof *rg->cols);
    if (!rg->cols) return kl_err_set(e, KL_ENOMEM, "out of memory");
    w->nrg++;
    rg->rows = (int64_t)rows;
    rg->offset = (int64_t)w->offset;


    for (size_t j = 0; j < w->nleaf && rc == KL_OK; j++) {
        chunk_out *o = &outs[j];
        const leaf_ref *L = &w->leaf[j];
        if (o->rc) {
            rc = o->rc;
            if (e) *e = o->err;
            kl_err_prefix(e, "column %s", w->buf[L->col]->name);
            break;
        }
        chunk_meta *m = &rg->cols[j];
        int64_t base = (int64_t)w->offset;
        m->has_dict = o->has_dict;
        m->dict_page_offset = o->has_dict ? base : -1;
        m->data_page_offset = base + o->data_rel;
        m->num_values = o->num_values;
        m->unc = o->unc_size;
        m->comp = (int64_t)o->bytes.len;
        m->stats_ser = o->stats_ser; memset(&o->stats_ser, 0, sizeof o->stats_ser);
        m->ci = o->ci; memset(&o->ci, 0, sizeof o->ci);
        if (w->o.page_stats) {
            kl__tw t;
            kl__tw_init(&t, &m->oi);
            kl__tw_list(&t, 1, TT_STRUCT, (uint32_t)o->npages);
            for (size_t p = 0; p < o->npages; p++) {
                kl__tw_elem_begin(&t);
                kl__tw_i64(&t, 1, base + o->pages[p].rel_off);
                kl__tw_i32(&t, 2, o->pages[p].size);
                kl__tw_i64(&t, 3, o->pages[p].first_row);
                kl__tw_end(&t);
            }
            kl__tw_end(&t);
        }
        rg->unc += m->unc;
        rg->comp += m->comp;
        if (L->field < 0) stats_merge(&w->fst[L->col], &o->st, leaf_type(w->buf[L->col]), rows);
        rc = wr(w, o->bytes.p, o->bytes.len, e);
    }
    for (size_t j = 0; j < w->nleaf; j++) {
        kl__pq_buf_free(&outs[j].bytes);
        kl__pq_buf_free(&outs[j].stats_ser);
        kl__pq_buf_free(&outs[j].ci);
        free(outs[j].pages);
        memset(&outs[j], 0, sizeof outs[j]);
    }
    w->total_rows += rows;
    return rc;
}

/* Encodes ngroups row groups of rows rows each (src: ngroups × ncols columns)
 * in parallel, then writes them in order. */
static int write_rgs(kl_pq_writer *w, kl_column *const *src, size_t ngroups, size_t rows, kl_err *e) {
    if (rows == 0 || ngroups == 0) return KL_OK;
    size_t nt = ngroups * w->nleaf;
    chunk_out *outs = calloc(nt, sizeof *outs);
    if (!outs) return kl_err_set(e, KL_ENOMEM, "out of memory");
    enc_ctx x = {w, src, outs, rows};
    kl_pool_parallel_for(NULL, nt, 1, enc_task, &x);
    int rc = KL_OK;
    for (size_t g = 0; g < ngroups; g++) {
        if (rc == KL_OK) rc = emit_rg(w, src + g * w->ncols, rows, outs + g * w->nleaf, e);
        else
            for (size_t j = 0; j < w->nleaf; j++) {
                chunk_out *o = &outs[g * w->nleaf + j];
                kl__pq_buf_free(&o->bytes);
                kl__pq_buf_free(&o->stats_ser);
                kl__pq_buf_free(&o->ci);
                free(o->pages);
            }
    }
    free(outs);
    return rc;
}

static int flush_rg(kl_pq_writer *w, kl_err *e) {
    int rc = write_rgs(w, w->buf, 1, w->buf[0]->len, e);
    for (size_t j = 0; j < w->ncols; j++) kl_column_clear(w->buf[j]);
    w->buf_bytes = 0;
    return rc;
}

/* A view of rows [at, at+n) of c (no copy). */
static kl_column view_of(const kl_column *c, size_t at, size_t n) {
    kl_column v = *c;
    size_t wsz = kl_col_type_size(c->type);
    v.len = v.cap = n;
    if (c->values) v.values = (char *)c->values + at * wsz;
    if (c->valid) v.valid = c->valid + at;
    if (c->offsets) v.offsets = c->offsets + at;
    return v;
}

/* A list column's shape: elements present, offsets from 0 and never
 * decreasing, within the elements, FixedSizeList rows of their size. */
static int list_check(const char *path, const kl_column *c, kl_err *e) {
    if (!c->child || !c->offsets || c->child->type == KL_COL_LIST || (unsigned)c->child->type >= KL_COL_TYPE_COUNT)
        return kl_err_set(e, KL_EINVAL, "%s: column %s: a list column without scalar elements", path, c->name);
    for (size_t i = 0; i < c->len; i++) {
        int64_t a = c->offsets[i], b = c->offsets[i + 1];
        if (a < 0 || b < a || (uint64_t)b > c->child->len)
            return kl_err_set(e, KL_EINVAL, "%s: column %s: row %zu: list offsets %lld..%lld outside the %zu elements",
                              path, c->name, i, (long long)a, (long long)b, c->child->len);
        if (c->list_size > 0 && !kl_column_is_null(c, i) && b - a != c->list_size)
            return kl_err_set(e, KL_ESHAPE, "%s: column %s: row %zu has %lld elements, the fixed size is %d", path,
                              c->name, i, (long long)(b - a), (int)c->list_size);
    }
    return KL_OK;
}

/* A struct column's shape: scalar fields of its length. */
static int struct_check(const char *path, const kl_column *c, kl_err *e) {
    if (!c->fields || c->nfields == 0)
        return kl_err_set(e, KL_EINVAL, "%s: column %s: a struct without fields", path, c->name);
    for (size_t j = 0; j < c->nfields; j++) {
        const kl_column *f = c->fields[j];
        if ((unsigned)f->type >= KL_COL_TYPE_COUNT || f->type == KL_COL_LIST || f->type == KL_COL_STRUCT)
            return kl_err_set(e, KL_EINVAL, "%s: column %s: field %s is not of a scalar type", path, c->name, f->name);
        if (f->len != c->len)
            return kl_err_set(e, KL_ESHAPE, "%s: column %s: field %s has %zu rows, the struct %zu", path, c->name,
                              f->name, f->len, c->len);
    }
    return KL_OK;
}

/* An empty column of the type and shape of s (the writer's buffer). */
static int new_like(const kl_column *s, kl_column **out, kl_err *e) {
    if (s->type == KL_COL_LIST)
        return kl_column_new_list(s->name, s->child->type, s->nullable, s->child->nullable, s->list_size, out, e);
    if (s->type != KL_COL_STRUCT) return kl_column_new(s->name, s->type, s->nullable, 0, out, e);
    const char **names = calloc(s->nfields, sizeof *names);
    kl_col_type *types = calloc(s->nfields, sizeof *types);
    int rc = names && types ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t j = 0; !rc && j < s->nfields; j++) {
        names[j] = s->fields[j]->name;
        types[j] = s->fields[j]->type;
    }
    if (!rc) rc = kl_column_new_struct(s->name, s->nullable, names, types, s->nfields, out, e);
    free(names);
    free(types);
    return rc;
}

/* The Parquet leaves of the schema, in order. */
static int map_leaves(kl_pq_writer *w, kl_err *e) {
    size_t n = 0;
    for (size_t j = 0; j < w->ncols; j++) n += w->buf[j]->type == KL_COL_STRUCT ? w->buf[j]->nfields : 1;
    if (n > INT32_MAX) return kl_err_set(e, KL_ERANGE, "%s: %zu leaf columns", w->path, n);
    w->leaf = calloc(n, sizeof *w->leaf);
    if (!w->leaf) return kl_err_set(e, KL_ENOMEM, "out of memory");
    w->nleaf = 0;
    for (size_t j = 0; j < w->ncols; j++) {
        size_t nf = w->buf[j]->type == KL_COL_STRUCT ? w->buf[j]->nfields : 0;
        if (!nf) w->leaf[w->nleaf++] = (leaf_ref){j, -1};
        for (size_t f = 0; f < nf; f++) w->leaf[w->nleaf++] = (leaf_ref){j, (int)f};
    }
    return KL_OK;
}

int kl_pq_writer_open(const char *path, kl_column *const *schema, size_t ncols,
                      const kl_pq_write_opts *o, kl_pq_writer **out, kl_err *e) {
    *out = NULL;
    if (ncols == 0) return kl_err_set(e, KL_EINVAL, "%s: a Parquet file needs at least one column", path);
    kl_pq_writer *w = calloc(1, sizeof *w);
    if (!w) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    if (o) w->o = *o; else kl_pq_write_opts_default(&w->o);
    if (w->o.codec > KL_PQ_LZ4_RAW) { rc = kl_err_set(e, KL_EINVAL, "%s: unknown codec %d", path, (int)w->o.codec); goto fail; }
    w->ncols = ncols;
    w->path = strdup(path);
    w->buf = calloc(ncols, sizeof *w->buf);
    w->info.cols = calloc(ncols, sizeof *w->info.cols);
    w->fst = calloc(ncols, sizeof *w->fst);
    if (!w->path || !w->buf || !w->info.cols || !w->fst) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    w->info.ncols = ncols;
    for (size_t j = 0; j < ncols; j++) {
        const kl_column *s = schema[j];
        if ((unsigned)s->type >= KL_COL_TYPE_COUNT) { rc = kl_err_set(e, KL_EINVAL, "column %s: bad type", s->name); goto fail; }
        if (s->type == KL_COL_LIST && (rc = list_check(path, s, e))) goto fail;
        for (size_t k = 0; k < j; k++)
            if (!strcmp(schema[k]->name, s->name)) { rc = kl_err_set(e, KL_EINVAL, "%s: duplicate column name \"%s\"", path, s->name); goto fail; }
        if (s->type == KL_COL_STRUCT && (rc = struct_check(path, s, e))) goto fail;
        if ((rc = new_like(s, &w->buf[j], e))) goto fail;
        w->info.cols[j].name = strdup(s->name);
        w->info.cols[j].type = s->type;
        if (!w->info.cols[j].name) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    }
    if ((rc = map_leaves(w, e))) goto fail;
    if ((rc = kl_afile_open(path, &w->f, e))) goto fail;
    if ((rc = wr(w, "PAR1", 4, e))) goto fail;
    *out = w;
    return KL_OK;
fail:
    kl_pq_writer_abort(w);
    return rc;
}

int kl_pq_writer_set_kv(kl_pq_writer *w, const char *key, const char *value, kl_err *e) {
    char **nk = realloc(w->kv, (w->nkv + 1) * 2 * sizeof *nk);
    if (!nk) return kl_err_set(e, KL_ENOMEM, "out of memory");
    w->kv = nk;
    w->kv[2 * w->nkv] = strdup(key);
    w->kv[2 * w->nkv + 1] = strdup(value ? value : "");
    w->nkv++;
    return KL_OK;
}

int kl_pq_writer_write(kl_pq_writer *w, kl_column *const *cols, size_t ncols, kl_err *e) {
    if (ncols != w->ncols) return kl_err_set(e, KL_ESHAPE, "%s: batch has %zu columns, schema has %zu", w->path, ncols, w->ncols);
    int in_place = 1; /* whole row groups of the batch may be encoded from views */
    size_t n = cols[0]->len;
    for (size_t j = 0; j < ncols; j++) {
        const kl_column *c = cols[j], *s = w->buf[j];
        if (c->type != s->type)
            return kl_err_set(e, KL_ETYPE, "%s: column %s is %s, schema says %s", w->path, s->name, kl_col_type_name(c->type), kl_col_type_name(s->type));
        if (c->len != n)
            return kl_err_set(e, KL_ESHAPE, "%s: column %s has %zu rows, column %s has %zu", w->path, c->name, c->len, cols[0]->name, n);
        if (!s->nullable && c->valid && kl_column_null_count(c))
            return kl_err_set(e, KL_EINVAL, "%s: column %s is not nullable but the batch has nulls", w->path, s->name);
        int rc = c->type == KL_COL_LIST ? list_check(w->path, c, e)
            : c->type == KL_COL_STRUCT  ? struct_check(w->path, c, e)
                                        : KL_OK;
        if (rc) return rc;
        if (s->type == KL_COL_STRUCT) {
            int same = c->nfields == s->nfields;
            for (size_t f = 0; same && f < s->nfields; f++)
                same = c->fields[f]->type == s->fields[f]->type && !strcmp(c->fields[f]->name, s->fields[f]->name);
            if (!same)
                return kl_err_set(e, KL_ETYPE, "%s: column %s: the batch's struct fields differ from the schema's",
                                  w->path, s->name);
            in_place = 0; /* the fields are separate columns: no views */
        }
        if (s->type == KL_COL_LIST && (c->child->type != s->child->type || c->list_size != s->list_size))
            return kl_err_set(e, KL_ETYPE,
                              "%s: column %s holds lists of %s (size %d), the schema lists of %s (size %d)", w->path,
                              s->name, kl_col_type_name(c->child->type), (int)c->list_size,
                              kl_col_type_name(s->child->type), (int)s->list_size);
        if (s->type == KL_COL_LIST && !s->child->nullable && c->child->valid && kl_column_null_count(c->child))
            return kl_err_set(e, KL_EINVAL,
                              "%s: column %s: the elements are not nullable but the batch has null elements", w->path,
                              s->name);
    }
    uint64_t rg_rows = w->o.row_group_rows ? w->o.row_group_rows : UINT64_MAX;
    uint64_t rg_bytes = w->o.row_group_bytes ? w->o.row_group_bytes : UINT64_MAX;
    size_t at = 0;
    kl_column *views = NULL, **vp = NULL;
    while (at < n) {
        size_t have = w->buf[0]->len;
        if (in_place && have == 0 && rg_rows != UINT64_MAX && (uint64_t)(n - at) >= rg_rows) {
            /* whole row groups inside the batch: encode up to 4 in place, in parallel */
            size_t ng = 0, rr = (size_t)rg_rows;
            while (ng < 4 && (uint64_t)(n - at) >= (uint64_t)(ng + 1) * rg_rows) {
                uint64_t bytes = 0;
                size_t a = at + ng * rr;
                for (size_t j = 0; j < ncols; j++) bytes += rows_bytes(cols[j], a, a + rr);
                if (bytes > rg_bytes) break;
                ng++;
            }
            if (ng > 0) {
                if (!views) {
                    views = calloc(4 * ncols, sizeof *views);
                    vp = calloc(4 * ncols, sizeof *vp);
                    if (!views || !vp) { free(views); free(vp); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
                }
                for (size_t g = 0; g < ng; g++)
                    for (size_t j = 0; j < ncols; j++) {
                        views[g * ncols + j] = view_of(cols[j], at + g * rr, rr);
                        vp[g * ncols + j] = &views[g * ncols + j];
                    }
                int rc = write_rgs(w, vp, ng, rr, e);
                if (rc) { free(views); free(vp); return rc; }
                at += ng * rr;
                continue;
            }
        }
        size_t take = (size_t)KL_MIN((uint64_t)(n - at), rg_rows - have);
        take = KL_MIN(take, (size_t)65536);
        uint64_t bytes = 0;
        for (size_t j = 0; j < ncols; j++) {
            const kl_column *c = cols[j];
            bytes += rows_bytes(c, at, at + take);
            if (kl_column_append(w->buf[j], c, at, at + take)) {
                free(views); free(vp);
                return kl_err_set(e, KL_ENOMEM, "%s: out of memory buffering column %s", w->path, c->name);
            }
        }
        w->buf_bytes += bytes;
        at += take;
        if (w->buf[0]->len >= rg_rows || w->buf_bytes >= rg_bytes) {
            int rc = flush_rg(w, e);
            if (rc) { free(views); free(vp); return rc; }
        }
    }
    free(views);
    free(vp);
    return KL_OK;
}

/* The schema element of a leaf of type ty. */
static void write_leaf_elem(kl__tw *t, kl_col_type ty, int nullable, const char *name) {
    kl__tw_elem_begin(t);
    kl__tw_i32(t, 1, phys_type(ty));
    kl__tw_i32(t, 3, nullable ? REP_OPTIONAL : REP_REQUIRED);
    kl__tw_bin(t, 4, name, strlen(name));
    switch (ty) {
    case KL_COL_STRING:
        kl__tw_i32(t, 6, CT_UTF8);
        kl__tw_begin(t, 10);
        kl__tw_begin(t, 1);
        kl__tw_end(t);
        kl__tw_end(t);
        break;
    case KL_COL_DATE:
        kl__tw_i32(t, 6, CT_DATE);
        kl__tw_begin(t, 10);
        kl__tw_begin(t, 6);
        kl__tw_end(t);
        kl__tw_end(t);
        break;
    case KL_COL_TIMESTAMP:
        kl__tw_i32(t, 6, CT_TIMESTAMP_MICROS);
        kl__tw_begin(t, 10);
        kl__tw_begin(t, 8);
        kl__tw_bool(t, 1, 1);
        kl__tw_begin(t, 2);
        kl__tw_begin(t, 2);
        kl__tw_end(t);
        kl__tw_end(t);
        kl__tw_end(t);
        kl__tw_end(t);
        break;
    default: break;
    }
    kl__tw_end(t);
}

/* A group element: name, repetition, children and (list) the LIST annotation. */
static void write_group_elem(kl__tw *t, int rep, const char *name, size_t nchildren, int list) {
    kl__tw_elem_begin(t);
    kl__tw_i32(t, 3, rep);
    kl__tw_bin(t, 4, name, strlen(name));
    kl__tw_i32(t, 5, (int32_t)nchildren);
    if (list) {
        kl__tw_i32(t, 6, CT_LIST);
        kl__tw_begin(t, 10);
        kl__tw_begin(t, 3);
        kl__tw_end(t);
        kl__tw_end(t);
    }
    kl__tw_end(t);
}

/* The schema elements of column c: one leaf, or for a list the 3-level
 * form: <optional|required> group c (LIST) { repeated group list {
 * <optional|required> element } }. */
static void write_schema_elems(kl__tw *t, const kl_column *c) {
    if (c->type == KL_COL_STRUCT) { /* a group of optional fields */
        write_group_elem(t, c->nullable ? REP_OPTIONAL : REP_REQUIRED, c->name, c->nfields, 0);
        for (size_t j = 0; j < c->nfields; j++) write_leaf_elem(t, c->fields[j]->type, 1, c->fields[j]->name);
        return;
    }
    if (c->type != KL_COL_LIST) {
        write_leaf_elem(t, c->type, c->nullable, c->name);
        return;
    }
    write_group_elem(t, c->nullable ? REP_OPTIONAL : REP_REQUIRED, c->name, 1, 1);
    write_group_elem(t, REP_REPEATED, "list", 1, 0);
    write_leaf_elem(t, c->child->type, c->child->nullable, "element");
}

/* Number of schema elements of column c. */
static uint32_t schema_elems(const kl_column *c) {
    return c->type == KL_COL_LIST ? 3 : c->type == KL_COL_STRUCT ? 1 + (uint32_t)c->nfields : 1;
}

static void free_meta(kl_pq_writer *w) {
    for (size_t r = 0; r < w->nrg; r++) {
        for (size_t j = 0; j < w->nleaf; j++) {
            kl__pq_buf_free(&w->rgs[r].cols[j].stats_ser);
            kl__pq_buf_free(&w->rgs[r].cols[j].ci);
            kl__pq_buf_free(&w->rgs[r].cols[j].oi);
        }
        free(w->rgs[r].cols);
    }
    free(w->rgs);
    w->rgs = NULL;
    w->nrg = 0;
}

static void writer_free(kl_pq_writer *w) {
    if (w->buf) for (size_t j = 0; j < w->ncols; j++) kl_column_free(w->buf[j]);
    free(w->buf);
    free_meta(w);
    free(w->leaf);
    for (size_t i = 0; i < 2 * w->nkv; i++) free(w->kv[i]);
    free(w->kv);
    for (size_t j = 0; j < w->info.ncols; j++) w->info.cols[j].stats = w->fst ? w->fst[j] : w->info.cols[j].stats;
    kl_pq_file_info_clear(&w->info);
    free(w->fst);
    free(w->path);
    free(w);
}

void kl_pq_writer_abort(kl_pq_writer *w) {
    if (!w) return;
    kl_afile_abort(w->f);
    writer_free(w);
}

int kl_pq_writer_close(kl_pq_writer *w, kl_pq_file_info *info, kl_err *e) {
    if (info) memset(info, 0, sizeof *info);
    int rc = flush_rg(w, e);
    if (rc) goto fail;
    /* column indexes, then offset indexes */
    for (size_t r = 0; r < w->nrg && !rc; r++)
        for (size_t j = 0; j < w->nleaf && !rc; j++) {
            chunk_meta *m = &w->rgs[r].cols[j];
            m->ci_off = m->ci.len ? (int64_t)w->offset : -1;
            if (m->ci.len) rc = wr(w, m->ci.p, m->ci.len, e);
        }
    for (size_t r = 0; r < w->nrg && !rc; r++)
        for (size_t j = 0; j < w->nleaf && !rc; j++) {
            chunk_meta *m = &w->rgs[r].cols[j];
            m->oi_off = m->oi.len ? (int64_t)w->offset : -1;
            if (m->oi.len) rc = wr(w, m->oi.p, m->oi.len, e);
        }
    if (rc) goto fail;

    /* footer */
    pq_buf fb = {0};
    kl__tw t;
    kl__tw_init(&t, &fb);
    kl__tw_i32(&t, 1, 2);
    uint32_t nel = 1;
    for (size_t j = 0; j < w->ncols; j++) nel += schema_elems(w->buf[j]);
    kl__tw_list(&t, 2, TT_STRUCT, nel);
    kl__tw_elem_begin(&t);
    kl__tw_bin(&t, 4, "schema", 6);
    kl__tw_i32(&t, 5, (int32_t)w->ncols);
    kl__tw_end(&t);
    for (size_t j = 0; j < w->ncols; j++) write_schema_elems(&t, w->buf[j]);
    kl__tw_i64(&t, 3, (int64_t)w->total_rows);
    kl__tw_list(&t, 4, TT_STRUCT, (uint32_t)w->nrg);
    for (size_t r = 0; r < w->nrg; r++) {
        rg_meta *g = &w->rgs[r];
        kl__tw_elem_begin(&t);
        kl__tw_list(&t, 1, TT_STRUCT, (uint32_t)w->nleaf);
        for (size_t j = 0; j < w->nleaf; j++) {
            chunk_meta *m = &g->cols[j];
            const leaf_ref *L = &w->leaf[j];
            const kl_column *c = w->buf[L->col], *lc = L->field >= 0 ? c->fields[L->field] : c;
            kl__tw_elem_begin(&t);
            kl__tw_i64(&t, 2, m->has_dict ? m->dict_page_offset : m->data_page_offset);
            kl__tw_begin(&t, 3);
            kl__tw_i32(&t, 1, phys_type(leaf_type(lc)));
            kl__tw_list(&t, 2, TT_I32, m->has_dict ? 3 : 2);
            kl__tw_elem_i32(&t, ENC_PLAIN);
            kl__tw_elem_i32(&t, ENC_RLE);
            if (m->has_dict) kl__tw_elem_i32(&t, ENC_RLE_DICTIONARY);
            if (L->field >= 0) {
                kl__tw_list(&t, 3, TT_BINARY, 2);
                kl__tw_elem_bin(&t, c->name, strlen(c->name));
                kl__tw_elem_bin(&t, lc->name, strlen(lc->name));
            } else if (c->type == KL_COL_LIST) {
                kl__tw_list(&t, 3, TT_BINARY, 3);
                kl__tw_elem_bin(&t, c->name, strlen(c->name));
                kl__tw_elem_bin(&t, "list", 4);
                kl__tw_elem_bin(&t, "element", 7);
            } else {
                kl__tw_list(&t, 3, TT_BINARY, 1);
                kl__tw_elem_bin(&t, c->name, strlen(c->name));
            }
            kl__tw_i32(&t, 4, codec_id(w->o.codec));
            kl__tw_i64(&t, 5, m->num_values);
            kl__tw_i64(&t, 6, m->unc);
            kl__tw_i64(&t, 7, m->comp);
            kl__tw_i64(&t, 9, m->data_page_offset);
            if (m->has_dict) kl__tw_i64(&t, 11, m->dict_page_offset);
            kl__tw_field(&t, 12, TT_STRUCT);
            /* the serialized Statistics begins with its own field header: skip it */
            {
                kl__tr rr = {m->stats_ser.p, m->stats_ser.p + m->stats_ser.len, 0, 0};
                int16_t last = 0, id; int ty;
                kl__tr_field(&rr, &last, &ty, &id);
                pq_buf_put(&fb, rr.p, (size_t)(rr.end - rr.p));
            }
            kl__tw_end(&t);
            if (m->oi.len) {
                kl__tw_i64(&t, 4, m->oi_off);
                kl__tw_i32(&t, 5, (int32_t)m->oi.len);
            }
            if (m->ci.len) {
                kl__tw_i64(&t, 6, m->ci_off);
                kl__tw_i32(&t, 7, (int32_t)m->ci.len);
            }
            kl__tw_end(&t);
        }
        kl__tw_i64(&t, 2, g->unc);
        kl__tw_i64(&t, 3, g->rows);
        kl__tw_i64(&t, 5, g->offset);
        kl__tw_i64(&t, 6, g->comp);
        kl__tw_field(&t, 7, TT_I16);
        kl__tw_elem_i32(&t, (int64_t)r);
        kl__tw_end(&t);
    }
    if (w->nkv) {
        kl__tw_list(&t, 5, TT_STRUCT, (uint32_t)w->nkv);
        for (size_t i = 0; i < w->nkv; i++) {
            kl__tw_elem_begin(&t);
            kl__tw_bin(&t, 1, w->kv[2 * i], strlen(w->kv[2 * i]));
            kl__tw_bin(&t, 2, w->kv[2 * i + 1], strlen(w->kv[2 * i + 1]));
            kl__tw_end(&t);
        }
    }
    static const char created[] = "keel version " KL_PQ_VERSION;
    kl__tw_bin(&t, 6, created, strlen(created));
    kl__tw_list(&t, 7, TT_STRUCT, (uint32_t)w->nleaf);
    for (size_t j = 0; j < w->nleaf; j++) {
        kl__tw_elem_begin(&t);
        kl__tw_begin(&t, 1);
        kl__tw_end(&t);
        kl__tw_end(&t);
    }
    kl__tw_end(&t);
    if (fb.failed) {
        kl__pq_buf_free(&fb);
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    uint32_t flen = (uint32_t)fb.len;
    rc = wr(w, fb.p, fb.len, e);
    kl__pq_buf_free(&fb);
    if (!rc) rc = wr(w, &flen, 4, e);
    if (!rc) rc = wr(w, "PAR1", 4, e);
    if (rc) goto fail;
    uint64_t size = w->offset;
    kl_afile *f = w->f;
    w->f = NULL;
    if ((rc = kl_afile_commit(f, e))) goto fail;
    if (info) {
        *info = w->info;
        for (size_t j = 0; j < w->ncols; j++) info->cols[j].stats = w->fst[j];
        info->rows = w->total_rows;
        info->bytes = size;
        info->row_groups = w->nrg;
        memset(&w->info, 0, sizeof w->info);
        free(w->fst);
        w->fst = NULL;
    }
    writer_free(w);
    return KL_OK;
fail:
    kl_pq_writer_abort(w);
    return rc;
}

int kl_pq_write_file(const char *path, kl_column *const *cols, size_t ncols,
                     const kl_pq_write_opts *o, kl_pq_file_info *info, kl_err *e) {
    kl_pq_writer *w;
    int rc = kl_pq_writer_open(path, cols, ncols, o, &w, e);
    if (rc) return rc;
    if ((rc = kl_pq_writer_write(w, cols, ncols, e))) { kl_pq_writer_abort(w); return rc; }
    return kl_pq_writer_close(w, info, e);
}
