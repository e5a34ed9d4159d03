/* Unit tests of the Parquet scan fast paths: vector scans (kl_pq_next_vectors)
 * against batch reads over every type × nullability × dictionary/plain × page
 * version × page size, dictionary codes with a dictionary that falls back to
 * PLAIN mid-chunk (hand-built file), all-null pages, kl_pq_group_by against
 * a naive aggregation and across thread counts, and the bit-unpacking, level
 * and CRC fast paths against simple references (every bit width, odd counts,
 * truncated groups); kl_pq_read_row_group (one row group, decoded alone). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../harness.h"
#include "data/parquet_int.h"
#include "keel/parquet.h"

static uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

static const kl_col_type types[] = {KL_COL_BOOL, KL_COL_INT32, KL_COL_INT64, KL_COL_FLOAT32, KL_COL_FLOAT64,
                                    KL_COL_STRING, KL_COL_DATE, KL_COL_TIMESTAMP, KL_COL_BINARY};
#define NTYPES (sizeof types / sizeof types[0])

/* Columns of every type; null_pct % nulls, in runs (whole null pages) when
 * runs; low cardinality when lowcard. */
static int make_cols(kl_column **c, size_t rows, int null_pct, int runs, int lowcard, uint64_t seed, kl_err *e) {
    uint64_t s = seed | 1;
    for (size_t t = 0; t < NTYPES; t++) {
        char name[32];
        snprintf(name, sizeof name, "c%zu_%s", t, kl_col_type_name(types[t]));
        int rc = kl_column_new(name, types[t], null_pct > 0, 0, &c[t], e);
        if (rc) return rc;
        for (size_t i = 0; i < rows; i++) {
            uint64_t x = rnd(&s);
            if (lowcard) x %= 23;
            int null = runs ? (int)((i / 500) % 100) < null_pct : (int)(rnd(&s) % 100) < null_pct;
            if (null) { kl_column_push_null(c[t]); continue; }
            switch (types[t]) {
            case KL_COL_FLOAT32: case KL_COL_FLOAT64: kl_column_push_f64(c[t], (double)(int64_t)(x % 100000) / 8.0); break;
            case KL_COL_STRING: case KL_COL_BINARY: {
                char b[40];
                int n = snprintf(b, sizeof b, "s%llu", (unsigned long long)(x % 5000));
                kl_column_push_str(c[t], b, (size_t)(x % 17 == 0 ? 0 : n));
                break;
            }
            case KL_COL_BOOL: kl_column_push_i64(c[t], (int64_t)(x & 1)); break;
            case KL_COL_DATE: kl_column_push_i64(c[t], (int64_t)(x % 50000) - 20000); break;
            case KL_COL_INT32: kl_column_push_i64(c[t], (int32_t)x); break;
            default: kl_column_push_i64(c[t], (int64_t)x); break;
            }
        }
    }
    return KL_OK;
}

static void free_cols(kl_column **c, size_t n) { for (size_t i = 0; i < n; i++) kl_column_free(c[i]); }

/* Row i of vector v equals row i of column c? */
static int vec_row_eq(const kl_pq_vector *v, size_t i, const kl_column *c, size_t ci) {
    int vnull = v->valid && !v->valid[i];
    if (vnull != kl_column_is_null(c, ci)) return 0;
    if (vnull) return 1;
    if (c->type == KL_COL_STRING || c->type == KL_COL_BINARY) {
        size_t n;
        const char *s = kl_column_get_str(c, ci, &n), *p;
        size_t m;
        if (v->codes) {
            if (v->codes[i] >= v->dict->len) return 0;
            p = kl_column_get_str(v->dict, v->codes[i], &m);
        } else {
            p = v->data + v->offsets[i];
            m = (size_t)(v->offsets[i + 1] - v->offsets[i]);
        }
        return m == n && (n == 0 || !memcmp(p, s, n));
    }
    size_t w = kl_col_type_size(c->type);
    return !memcmp((const char *)v->values + i * w, (const char *)c->values + ci * w, w);
}

/* Reads path by vectors and by kl_pq_read_file; 0 when equal. *coded counts
 * vectors that came as dictionary codes. */
static int compare_scan(const char *path, char *why, size_t nwhy, size_t *coded) {
    kl_err e = {0};
    kl_column **ref = NULL;
    size_t nref = 0;
    if (kl_pq_read_file(path, NULL, 0, &ref, &nref, &e)) { snprintf(why, nwhy, "read_file: %s", kl_err_what(&e)); return -1; }
    kl_pq_reader *r;
    if (kl_pq_open(path, &r, &e)) { snprintf(why, nwhy, "open: %s", kl_err_what(&e)); return -1; }
    int bad = 0;
    size_t at = 0;
    for (int pass = 0; pass < 2 && !bad; pass++) { /* twice: buffers are reused */
        at = 0;
        kl_pq_rewind(r);
        for (;;) {
            const kl_pq_vector *v;
            size_t n;
            if (kl_pq_next_vectors(r, &v, &n, &e)) { snprintf(why, nwhy, "vectors: %s", kl_err_what(&e)); bad = 1; break; }
            if (!n) break;
            for (size_t j = 0; j < nref && !bad; j++) {
                if (v[j].rows != n || v[j].type != ref[j]->type) { snprintf(why, nwhy, "column %zu: rows/type", j); bad = 1; break; }
                if (v[j].codes && coded && pass == 0) (*coded)++;
                for (size_t i = 0; i < n; i++)
                    if (!vec_row_eq(&v[j], i, ref[j], at + i)) { snprintf(why, nwhy, "%s row %zu differs", ref[j]->name, at + i); bad = 1; break; }
            }
            at += n;
        }
        if (!bad && nref && at != ref[0]->len) { snprintf(why, nwhy, "%zu rows, expected %zu", at, ref[0]->len); bad = 1; }
    }
    /* mixing modes without a rewind is an error, after one it works */
    if (!bad) {
        kl_pq_rewind(r);
        const kl_pq_vector *v;
        size_t n;
        kl_column *b[16] = {0};
        if (kl_pq_next_vectors(r, &v, &n, &e)) bad = 1;
        else if (n && kl_pq_read_batch(r, 10, b, &n, &e) == 0) { snprintf(why, nwhy, "batch read during a vector scan accepted"); bad = 1; }
        kl_pq_rewind(r);
        if (!bad && kl_pq_read_batch(r, 10, b, &n, &e)) { snprintf(why, nwhy, "batch after rewind: %s", kl_err_what(&e)); bad = 1; }
        for (size_t j = 0; j < 16; j++) kl_column_free(b[j]);
    }
    kl_pq_close(r);
    free_cols(ref, nref);
    free(ref);
    return bad ? -1 : 0;
}

KL_TEST(parquet_scan_vectors_match_batches) {
    kl_err e = {0};
    kl_column *c[NTYPES];
    size_t coded_total = 0;
    static const struct { int null_pct, runs, lowcard, dict, v2; uint64_t page; kl_pq_codec codec; } cases[] = {
        {0, 0, 1, 1, 0, 1 << 20, KL_PQ_ZSTD}, {10, 0, 1, 1, 0, 700, KL_PQ_ZSTD}, {10, 0, 1, 1, 1, 700, KL_PQ_SNAPPY},
        {30, 1, 0, 1, 1, 1500, KL_PQ_UNCOMPRESSED}, {10, 0, 0, 0, 0, 999, KL_PQ_GZIP}, {100, 0, 1, 1, 0, 800, KL_PQ_ZSTD},
        {50, 1, 1, 1, 1, 300, KL_PQ_LZ4_RAW},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t rows = 5003;
        KT_OK(make_cols(c, rows, cases[k].null_pct, cases[k].runs, cases[k].lowcard, 7 + k, &e), &e);
        kl_pq_write_opts o;
        kl_pq_write_opts_default(&o);
        o.dictionary = cases[k].dict;
        o.data_page_v2 = cases[k].v2;
        o.page_bytes = cases[k].page;
        o.codec = cases[k].codec;
        o.row_group_rows = 1200;
        const char *p = kt_path("v.parquet");
        KT_OK(kl_pq_write_file(p, c, NTYPES, &o, NULL, &e), &e);
        free_cols(c, NTYPES);
        char why[200] = "";
        for (int threads = 1; threads <= 3; threads += 2) {
            kl_threads_set(threads);
            KT_CHECKF(compare_scan(p, why, sizeof why, &coded_total) == 0, "case %zu, %d threads: %s", k, threads, why);
        }
        kl_threads_set(0);
    }
    KT_CHECK(coded_total > 0); /* the dictionary cases did hand out codes */
}

/* ---- a hand-built file: one optional string column whose chunk has a
 * dictionary page, dictionary-coded pages, a PLAIN page, a second dictionary
 * and more coded pages (writers fall back to PLAIN when a dictionary grows
 * too large; a second dictionary is unusual but seen) ---- */

static void plain_strings(pq_buf *b, const char *const *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t l = (uint32_t)strlen(v[i]);
        pq_buf_put(b, &l, 4);
        pq_buf_put(b, v[i], l);
    }
}

static void levels(pq_buf *b, const uint32_t *lev, size_t n) {
    pq_buf t = {0};
    kl__pq_rle_encode(&t, lev, n, 1);
    uint32_t l = (uint32_t)t.len;
    pq_buf_put(b, &l, 4);
    pq_buf_put(b, t.p, t.len);
    kl__pq_buf_free(&t);
}

static void page(pq_buf *f, int type, const pq_buf *body, int32_t nv, int enc) {
    pq_buf h = {0};
    kl__tw w;
    kl__tw_init(&w, &h);
    kl__tw_i32(&w, 1, type);
    kl__tw_i32(&w, 2, (int32_t)body->len);
    kl__tw_i32(&w, 3, (int32_t)body->len);
    kl__tw_i32(&w, 4, (int32_t)kl__pq_crc32(body->p, body->len));
    kl__tw_begin(&w, type == PAGE_DICT ? 7 : 5);
    kl__tw_i32(&w, 1, nv);
    kl__tw_i32(&w, 2, enc);
    if (type == PAGE_DATA) {
        kl__tw_i32(&w, 3, ENC_RLE);
        kl__tw_i32(&w, 4, ENC_RLE);
    }
    kl__tw_end(&w);
    kl__tw_end(&w);
    pq_buf_put(f, h.p, h.len);
    pq_buf_put(f, body->p, body->len);
    kl__pq_buf_free(&h);
}

/* rows: expected values (NULL = null), written as described above. */
static int write_fallback_file(const char *path, const char **rows, size_t *nrows) {
    static const char *d1[] = {"red", "green", "blue"}, *d2[] = {"cyan", "", "magenta", "yellow"};
    static const char *plain[] = {"plain-a", "plain-bb", "", "plain-a"};
    pq_buf f = {0}, b = {0};
    pq_buf_put(&f, "PAR1", 4);
    int64_t chunk_start = (int64_t)f.len;
    size_t nr = 0;
    /* dictionary 1 */
    plain_strings(&b, d1, 3);
    page(&f, PAGE_DICT, &b, 3, ENC_PLAIN);
    int64_t first_data = (int64_t)f.len;
    /* two coded pages of 37 rows (bit width 2), every 5th null */
    for (int pg = 0; pg < 2; pg++) {
        uint32_t lev[37], idx[37];
        size_t ni = 0;
        for (int i = 0; i < 37; i++) {
            lev[i] = (i % 5) != 4;
            if (lev[i]) { idx[ni] = (uint32_t)(i * 7 + pg) % 3; rows[nr++] = d1[idx[ni]]; ni++; }
            else rows[nr++] = NULL;
        }
        b.len = 0;
        levels(&b, lev, 37);
        pq_buf_byte(&b, 2);
        kl__pq_rle_encode(&b, idx, ni, 2);
        page(&f, PAGE_DATA, &b, 37, ENC_RLE_DICTIONARY);
    }
    /* a PLAIN page */
    {
        uint32_t lev[6] = {1, 0, 1, 1, 0, 1};
        size_t k = 0;
        for (int i = 0; i < 6; i++) rows[nr++] = lev[i] ? plain[k++] : NULL;
        b.len = 0;
        levels(&b, lev, 6);
        plain_strings(&b, plain, 4);
        page(&f, PAGE_DATA, &b, 6, ENC_PLAIN);
    }
    /* dictionary 2 and a coded page (bit width 3, width larger than needed) */
    b.len = 0;
    plain_strings(&b, d2, 4);
    page(&f, PAGE_DICT, &b, 4, ENC_PLAIN);
    {
        uint32_t lev[20], idx[20];
        size_t ni = 0;
        for (int i = 0; i < 20; i++) {
            lev[i] = i != 3;
            if (lev[i]) { idx[ni] = (uint32_t)(i % 4); rows[nr++] = d2[idx[ni]]; ni++; }
            else rows[nr++] = NULL;
        }
        b.len = 0;
        levels(&b, lev, 20);
        pq_buf_byte(&b, 3);
        kl__pq_rle_encode(&b, idx, ni, 3);
        page(&f, PAGE_DATA, &b, 20, ENC_RLE_DICTIONARY);
    }
    int64_t chunk_len = (int64_t)f.len - chunk_start;
    /* footer */
    pq_buf fb = {0};
    kl__tw t;
    kl__tw_init(&t, &fb);
    kl__tw_i32(&t, 1, 1);
    kl__tw_list(&t, 2, TT_STRUCT, 2);
    kl__tw_elem_begin(&t);
    kl__tw_bin(&t, 4, "schema", 6);
    kl__tw_i32(&t, 5, 1);
    kl__tw_end(&t);
    kl__tw_elem_begin(&t);
    kl__tw_i32(&t, 1, PT_BYTE_ARRAY);
    kl__tw_i32(&t, 3, REP_OPTIONAL);
    kl__tw_bin(&t, 4, "s", 1);
    kl__tw_i32(&t, 6, CT_UTF8);
    kl__tw_end(&t);
    kl__tw_i64(&t, 3, (int64_t)nr);
    kl__tw_list(&t, 4, TT_STRUCT, 1);
    kl__tw_elem_begin(&t);
    kl__tw_list(&t, 1, TT_STRUCT, 1);
    kl__tw_elem_begin(&t);
    kl__tw_i64(&t, 2, chunk_start);
    kl__tw_begin(&t, 3);
    kl__tw_i32(&t, 1, PT_BYTE_ARRAY);
    kl__tw_list(&t, 2, TT_I32, 3);
    kl__tw_elem_i32(&t, ENC_PLAIN);
    kl__tw_elem_i32(&t, ENC_RLE);
    kl__tw_elem_i32(&t, ENC_RLE_DICTIONARY);
    kl__tw_list(&t, 3, TT_BINARY, 1);
    kl__tw_elem_bin(&t, "s", 1);
    kl__tw_i32(&t, 4, CODEC_UNCOMPRESSED);
    kl__tw_i64(&t, 5, (int64_t)nr);
    kl__tw_i64(&t, 6, chunk_len);
    kl__tw_i64(&t, 7, chunk_len);
    kl__tw_i64(&t, 9, first_data);
    kl__tw_i64(&t, 11, chunk_start);
    kl__tw_end(&t);
    kl__tw_end(&t);
    kl__tw_i64(&t, 2, chunk_len);
    kl__tw_i64(&t, 3, (int64_t)nr);
    kl__tw_end(&t);
    kl__tw_end(&t);
    pq_buf_put(&f, fb.p, fb.len);
    uint32_t fl = (uint32_t)fb.len;
    pq_buf_put(&f, &fl, 4);
    pq_buf_put(&f, "PAR1", 4);
    FILE *fp = fopen(path, "wb");
    int rc = fp && fwrite(f.p, 1, f.len, fp) == f.len ? 0 : -1;
    if (fp) fclose(fp);
    kl__pq_buf_free(&f);
    kl__pq_buf_free(&b);
    kl__pq_buf_free(&fb);
    *nrows = nr;
    return rc;
}

KL_TEST(parquet_scan_dictionary_fallback_mid_chunk) {
    const char *rows[200];
    size_t nr = 0;
    const char *p = kt_path("fallback.parquet");
    KT_CHECK(write_fallback_file(p, rows, &nr) == 0);
    KT_EQ_INT(nr, 37 * 2 + 6 + 20);
    kl_err e = {0};
    /* the batch path */
    kl_column **c = NULL;
    size_t nc = 0;
    KT_OK(kl_pq_read_file(p, NULL, 0, &c, &nc, &e), &e);
    KT_EQ_INT(nc, 1);
    KT_EQ_INT(c[0]->len, nr);
    for (size_t i = 0; i < nr; i++) {
        KT_EQ_INT(kl_column_is_null(c[0], i), rows[i] == NULL);
        if (!rows[i]) continue;
        size_t n;
        const char *s = kl_column_get_str(c[0], i, &n);
        KT_CHECKF(n == strlen(rows[i]) && !memcmp(s, rows[i], n), "row %zu", i);
    }
    kl_column_free(c[0]);
    free(c);
    /* the vector path: strings (the chunk is not all dictionary-coded) */
    char why[200] = "";
    size_t coded = 0;
    KT_CHECKF(compare_scan(p, why, sizeof why, &coded) == 0, "%s", why);
    KT_EQ_INT(coded, 0);
    /* group by over it */
    kl_pq_reader *r;
    KT_OK(kl_pq_open(p, &r, &e), &e);
    kl_pq_groups g = {0};
    KT_OK(kl_pq_group_by(r, "s", NULL, &g, &e), &e);
    uint64_t total = 0, nulls = 0, red = 0;
    for (size_t i = 0; i < g.n; i++) {
        total += g.g[i].rows;
        if (g.g[i].key.is_null) nulls = g.g[i].rows;
        else if (g.g[i].key.n == 3 && !memcmp(g.g[i].key.s, "red", 3)) red = g.g[i].rows;
    }
    uint64_t want_nulls = 0, want_red = 0;
    for (size_t i = 0; i < nr; i++) { want_nulls += !rows[i]; want_red += rows[i] && !strcmp(rows[i], "red"); }
    KT_EQ_INT(total, nr);
    KT_EQ_INT(nulls, want_nulls);
    KT_EQ_INT(red, want_red);
    KT_CHECK(g.g[0].key.n == strlen(rows[0]) && !memcmp(g.g[0].key.s, rows[0], g.g[0].key.n)); /* first appearance order */
    kl_pq_groups_clear(&g);
    kl_pq_close(r);
}

/* ---- group by ---- */

typedef struct { char key[48]; int null; uint64_t rows, count; double sum, mn, mx; } ref_group;

static int ref_find(ref_group *g, size_t *n, const char *k, int null) {
    for (size_t i = 0; i < *n; i++) if (g[i].null == null && (null || !strcmp(g[i].key, k))) return (int)i;
    snprintf(g[*n].key, sizeof g[*n].key, "%s", null ? "" : k);
    g[*n].null = null;
    g[*n].rows = g[*n].count = 0;
    g[*n].sum = 0;
    g[*n].mn = g[*n].mx = NAN;
    return (int)(*n)++;
}

static int key_text(const kl_pq_value *v, char *buf, size_t n) {
    if (v->type == KL_COL_STRING || v->type == KL_COL_BINARY) return snprintf(buf, n, "%.*s", (int)v->n, v->s ? v->s : "");
    return snprintf(buf, n, "%lld", (long long)v->i);
}

KL_TEST(parquet_scan_group_by_matches_naive) {
    kl_err e = {0};
    kl_column *c[NTYPES];
    KT_OK(make_cols(c, 9000, 15, 0, 1, 99, &e), &e);
    kl_pq_write_opts o;
    kl_pq_write_opts_default(&o);
    o.row_group_rows = 2000;
    o.page_bytes = 2000;
    const char *p = kt_path("g.parquet");
    KT_OK(kl_pq_write_file(p, c, NTYPES, &o, NULL, &e), &e);
    /* keys: string (dictionary), int64, bool, none; values: float64, int32, none */
    static const int keys[] = {5, 2, 0, 8, -1}, vals[] = {4, 1, 3, -1};
    for (size_t ki = 0; ki < sizeof keys / sizeof keys[0]; ki++)
        for (size_t vi = 0; vi < sizeof vals / sizeof vals[0]; vi++) {
            const kl_column *K = keys[ki] >= 0 ? c[keys[ki]] : NULL, *V = vals[vi] >= 0 ? c[vals[vi]] : NULL;
            static ref_group ref[12000];
            size_t nref = 0;
            for (size_t i = 0; i < 9000; i++) {
                char kb[48] = "";
                int null = K ? kl_column_is_null(K, i) : 1;
                if (K && !null) {
                    if (K->type == KL_COL_STRING || K->type == KL_COL_BINARY) {
                        size_t n;
                        const char *s = kl_column_get_str(K, i, &n);
                        snprintf(kb, sizeof kb, "%.*s", (int)n, s);
                    } else snprintf(kb, sizeof kb, "%lld", (long long)kl_column_get_i64(K, i));
                }
                ref_group *g = &ref[ref_find(ref, &nref, kb, null)];
                g->rows++;
                if (V && !kl_column_is_null(V, i)) {
                    double x = kl_column_get_f64(V, i);
                    g->count++;
                    g->sum += x;
                    if (isnan(g->mn) || x < g->mn) g->mn = x;
                    if (isnan(g->mx) || x > g->mx) g->mx = x;
                }
            }
            kl_pq_groups res[2] = {{0}};
            for (int t = 0; t < 2; t++) {
                kl_threads_set(t ? 4 : 1);
                kl_pq_reader *r;
                KT_OK(kl_pq_open(p, &r, &e), &e);
                KT_OK(kl_pq_group_by(r, K ? K->name : NULL, V ? V->name : NULL, &res[t], &e), &e);
                kl_pq_close(r);
            }
            kl_threads_set(0);
            KT_EQ_INT(res[0].n, nref);
            KT_EQ_INT(res[0].rows, 9000);
            for (size_t i = 0; i < nref; i++) {
                const kl_pq_group *g = &res[0].g[i];
                char kb[48] = "";
                if (!g->key.is_null) key_text(&g->key, kb, sizeof kb);
                KT_CHECKF(g->key.is_null == ref[i].null && (g->key.is_null || !strcmp(kb, ref[i].key)),
                          "key %zu/%zu group %zu: \"%s\" vs \"%s\"", ki, vi, i, kb, ref[i].key);
                KT_EQ_INT(g->rows, ref[i].rows);
                KT_EQ_INT(g->count, ref[i].count);
                KT_NEAR(g->sum, ref[i].sum, 1e-9 * (1 + fabs(ref[i].sum)));
                KT_CHECK((isnan(g->min) && isnan(ref[i].mn)) || g->min == ref[i].mn);
                KT_CHECK((isnan(g->max) && isnan(ref[i].mx)) || g->max == ref[i].mx);
                /* identical at any thread count, to the bit */
                KT_CHECK(res[1].g[i].rows == g->rows && !memcmp(&res[1].g[i].sum, &g->sum, sizeof g->sum));
            }
            kl_pq_groups_clear(&res[0]);
            kl_pq_groups_clear(&res[1]);
        }
    /* errors: a float key, a string value, an unknown column */
    kl_pq_reader *r;
    KT_OK(kl_pq_open(p, &r, &e), &e);
    kl_pq_groups g = {0};
    KT_CHECK(kl_pq_group_by(r, c[4]->name, NULL, &g, &e) == KL_ETYPE);
    KT_CHECK(kl_pq_group_by(r, NULL, c[5]->name, &g, &e) == KL_ETYPE);
    KT_CHECK(kl_pq_group_by(r, "nope", NULL, &g, &e) == KL_ENOTFOUND);
    KT_CHECK(g.n == 0 && g.g == NULL);
    /* with a predicate: only matching rows */
    kl_pq_value lim = kl_pq_dbl(100.0);
    KT_OK(kl_pq_filter(r, c[4]->name, KL_PQ_LT, &lim, 1, &e), &e);
    KT_OK(kl_pq_group_by(r, NULL, c[4]->name, &g, &e), &e);
    uint64_t want = 0;
    for (size_t i = 0; i < 9000; i++) want += !kl_column_is_null(c[4], i) && kl_column_get_f64(c[4], i) < 100.0;
    KT_EQ_INT(g.rows, want);
    KT_EQ_INT(g.g[0].count, want);
    kl_pq_groups_clear(&g);
    kl_pq_filter_clear(r);
    /* accumulating over two files (here the same one twice) */
    KT_OK(kl_pq_group_by(r, c[5]->name, c[4]->name, &g, &e), &e);
    size_t n1 = g.n;
    double s1 = g.g[0].sum;
    uint64_t r1 = g.g[0].rows;
    KT_OK(kl_pq_group_by(r, c[5]->name, c[4]->name, &g, &e), &e);
    KT_EQ_INT(g.n, n1);
    KT_EQ_INT(g.rows, 18000);
    KT_EQ_INT(g.g[0].rows, 2 * r1);
    KT_NEAR(g.g[0].sum, 2 * s1, 1e-9 * fabs(s1));
    for (size_t i = 0; i < g.n; i++) KT_CHECK(g.g[i].key.is_null || g.g[i].key.s != NULL);
    KT_CHECK(kl_pq_group_by(r, c[2]->name, c[4]->name, &g, &e) == KL_ETYPE); /* another key type */
    KT_CHECK(g.n == 0 && g.priv == NULL);
    kl_pq_groups_clear(&g);
    kl_pq_close(r);
    free_cols(c, NTYPES);
}

/* ---- bit unpacking, levels, CRC ---- */

static uint32_t ref_bits(const uint8_t *p, size_t i, int bw) {
    uint64_t v = 0;
    for (int b = 0; b < bw; b++) {
        size_t bit = i * (size_t)bw + (size_t)b;
        v |= (uint64_t)((p[bit >> 3] >> (bit & 7)) & 1) << b;
    }
    return (uint32_t)v;
}

KL_TEST(parquet_scan_bitunpack_every_width) {
    uint64_t s = 12345;
    uint8_t buf[4096];
    static uint32_t out[4096], vals[4096];
    static uint8_t out8[4096];
    for (int bw = 0; bw <= 32; bw++) {
        for (size_t count = 0; count < 300; count += 1 + count / 3) {
            /* one bit-packed run of ceil(count/8) groups, exact bytes (no slack) */
            size_t groups = (count + 7) / 8, bytes = groups * (size_t)bw;
            size_t hl = 0;
            uint64_t h = (uint64_t)groups << 1 | 1;
            do { buf[hl++] = (uint8_t)((h & 0x7F) | (h > 0x7F ? 0x80 : 0)); h >>= 7; } while (h);
            for (size_t i = 0; i < bytes; i++) buf[hl + i] = (uint8_t)rnd(&s);
            if (count == 0) continue;
            KT_CHECKF(kl__pq_rle_decode(buf, hl + bytes, bw, out, count) == 0, "bw %d count %zu", bw, count);
            for (size_t i = 0; i < count; i++)
                KT_CHECKF(out[i] == (bw ? ref_bits(buf + hl, i, bw) : 0), "bw %d count %zu value %zu: %u vs %u", bw, count, i, out[i], ref_bits(buf + hl, i, bw));
            if (bw <= 8) {
                KT_CHECKF(kl__pq_rle_decode_u8(buf, hl + bytes, bw, out8, count) == 0, "u8 bw %d count %zu", bw, count);
                for (size_t i = 0; i < count; i++) KT_CHECKF(out8[i] == out[i], "u8 bw %d count %zu value %zu", bw, count, i);
            }
            /* a truncated last group decodes what its bytes hold, and no more */
            if (bw > 0 && bytes > 1) {
                size_t have = (bytes - 1) * 8 / (size_t)bw;
                if (have < count && have > 0) {
                    KT_CHECK(kl__pq_rle_decode(buf, hl + bytes - 1, bw, out, count) == -1);
                    KT_CHECK(kl__pq_rle_decode(buf, hl + bytes - 1, bw, out, have) == 0);
                    for (size_t i = 0; i < have; i++) KT_CHECK(out[i] == ref_bits(buf + hl, i, bw));
                }
            }
        }
        /* the encoder's mixed runs round-trip through both decoders */
        if (bw == 0) continue;
        for (size_t i = 0; i < 4096; i++) {
            uint64_t x = rnd(&s);
            vals[i] = (uint32_t)((i / 50) % 3 == 0 ? (uint32_t)(i / 50) : (uint32_t)x) & (bw == 32 ? 0xFFFFFFFFu : ((1u << bw) - 1));
        }
        pq_buf b = {0};
        kl__pq_rle_encode(&b, vals, 4001, bw);
        KT_CHECK(kl__pq_rle_decode(b.p, b.len, bw, out, 4001) == 0);
        KT_CHECK(!memcmp(out, vals, 4001 * sizeof *out));
        if (bw <= 8) {
            KT_CHECK(kl__pq_rle_decode_u8(b.p, b.len, bw, out8, 4001) == 0);
            for (size_t i = 0; i < 4001; i++) KT_CHECK(out8[i] == vals[i]);
        }
        kl__pq_buf_free(&b);
    }
    /* a run value wider than the bit width is corrupt */
    uint8_t bad[] = {2 << 1, 0x07};
    KT_CHECK(kl__pq_rle_decode_u8(bad, sizeof bad, 1, out8, 2) == -1);
}

KL_TEST(parquet_scan_crc_matches_zlib) {
    uint64_t s = 777;
    static uint8_t buf[70000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rnd(&s);
    for (size_t n = 0; n < 600; n++)
        for (size_t off = 0; off < 3; off++)
            KT_CHECKF(kl__pq_crc32(buf + off, n) == (uint32_t)crc32(0, buf + off, (uInt)n), "n %zu off %zu", n, off);
    KT_CHECK(kl__pq_crc32(buf, sizeof buf) == (uint32_t)crc32(0, buf, (uInt)sizeof buf));
    KT_CHECK(kl__pq_crc32(buf + 1, 65537) == (uint32_t)crc32(0, buf + 1, 65537));
}

static int cell_eq(const kl_column *a, size_t i, const kl_column *b, size_t j) {
    if (kl_column_is_null(a, i) || kl_column_is_null(b, j)) return kl_column_is_null(a, i) == kl_column_is_null(b, j);
    if (a->type == KL_COL_STRING || a->type == KL_COL_BINARY) {
        size_t la, lb;
        const char *x = kl_column_get_str(a, i, &la), *y = kl_column_get_str(b, j, &lb);
        return la == lb && !memcmp(x, y, la);
    }
    if (a->type == KL_COL_FLOAT32 || a->type == KL_COL_FLOAT64)
        return kl_column_get_f64(a, i) == kl_column_get_f64(b, j);
    return kl_column_get_i64(a, i) == kl_column_get_i64(b, j);
}

/* kl_pq_read_row_group: row group g alone equals rows [g * 1200, ...) of the
 * columns written, in any order of groups (the last one short), decoding that
 * group only; a group past the end is refused with its count. */
KL_TEST(parquet_read_row_group_random_access) {
    kl_err e = {0};
    kl_column *c[NTYPES];
    size_t rows = 5003, rg_rows = 1200;
    KT_OK(make_cols(c, rows, 10, 0, 1, 99, &e), &e);
    kl_pq_write_opts o;
    kl_pq_write_opts_default(&o);
    o.row_group_rows = rg_rows;
    const char *p = kt_path("rg.parquet");
    KT_OK(kl_pq_write_file(p, c, NTYPES, &o, NULL, &e), &e);
    kl_pq_reader *r;
    KT_OK(kl_pq_open(p, &r, &e), &e);
    size_t nrg = kl_pq_num_row_groups(r);
    KT_CHECK(nrg == 5);
    static const size_t order[] = {3, 0, 4, 4, 1, 2};
    uint64_t pages[5] = {0};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        size_t g = order[k], got = 0;
        kl_column *out[NTYPES] = {0};
        kl_pq_scan_stats s0, s1;
        kl_pq_scan_stats_get(r, &s0);
        KT_OK(kl_pq_read_row_group(r, g, out, &got, &e), &e);
        kl_pq_scan_stats_get(r, &s1);
        pages[g] = s1.pages_read - s0.pages_read;
        size_t want = g == nrg - 1 ? rows - g * rg_rows : rg_rows;
        KT_CHECKF(got == want, "row group %zu: %zu rows, want %zu", g, got, want);
        for (size_t t = 0; t < NTYPES && got == want; t++)
            for (size_t i = 0; i < got; i++) {
                if (!cell_eq(out[t], i, c[t], g * rg_rows + i)) {
                    KT_CHECKF(0, "row group %zu, column %zu, row %zu differs", g, t, i);
                    break;
                }
            }
        free_cols(out, NTYPES);
    }
    /* only the group asked for is decoded: the first costs what the fourth does (not four groups' pages) */
    KT_CHECKF(pages[0] > 0 && pages[0] == pages[3], "pages decoded: group 0 %llu, group 3 %llu",
              (unsigned long long)pages[0], (unsigned long long)pages[3]);
    size_t got = 0;
    kl_column *out[NTYPES] = {0};
    KT_CHECK(kl_pq_read_row_group(r, nrg, out, &got, &e) == KL_ERANGE && strstr(e.msg, "row group 5 of 5"));
    free_cols(out, NTYPES);
    kl_pq_close(r);
    free_cols(c, NTYPES);
}
