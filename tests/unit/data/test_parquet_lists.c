/* Unit tests of list columns (KL_COL_LIST) and of the Parquet writer's
 * 3-level LIST encoding: building rows (FixedSizeList lengths enforced,
 * appends), and round trips through keel's own reader (which returns a
 * nested column as JSON text) of every element type × codec × page version
 * × nullability of lists and elements, with empty lists, null lists, null
 * elements and lists longer than a page; pages split only between rows
 * (every data page starts at repetition level 0 and the page row counts add
 * up); mismatched batches refused. */
#include <math.h>
#include <stdlib.h>

#include "../harness.h"
#include "data/parquet_int.h"
#include "keel/parquet.h"

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const kl_col_type elem_types[] = {KL_COL_BOOL,   KL_COL_INT32, KL_COL_INT64,     KL_COL_FLOAT32, KL_COL_FLOAT64,
                                         KL_COL_STRING, KL_COL_DATE,  KL_COL_TIMESTAMP, KL_COL_BINARY};
#define NE (sizeof elem_types / sizeof elem_types[0])

static int push_elem(kl_column *v, uint64_t x) {
    switch (v->type) {
    case KL_COL_FLOAT32:
    case KL_COL_FLOAT64: return kl_column_push_f64(v, (double)(int64_t)(x % 100000) / 8.0 - 999.5);
    case KL_COL_STRING:
    case KL_COL_BINARY: {
        char b[48];
        int n = snprintf(b, sizeof b, "e%llu \"q\"", (unsigned long long)(x % 1000));
        return kl_column_push_str(v, b, (size_t)(x % 9 == 0 ? 0 : n));
    }
    case KL_COL_DATE: return kl_column_push_i64(v, (int64_t)(x % 50000) - 20000);
    case KL_COL_BOOL: return kl_column_push_i64(v, (int64_t)(x >> 7) & 1);
    default: return kl_column_push_i64(v, (int64_t)(x >> 3) - (int64_t)(x >> 2));
    }
}

/* A list column of rows rows: lengths 0..7, now and then a long one
 * (long_len elements), nulls and null elements when allowed. */
static int make_list(kl_column **out, const char *name, kl_col_type t, int nullable, int elem_nullable, size_t rows,
                     size_t long_len, uint64_t seed, kl_err *e) {
    uint64_t s = seed | 1;
    int rc = kl_column_new_list(name, t, nullable, elem_nullable, 0, out, e);
    if (rc) return rc;
    kl_column *c = *out;
    for (size_t i = 0; i < rows; i++) {
        uint64_t x = rnd(&s);
        if (nullable && x % 6 == 0) {
            if ((rc = kl_column_push_null(c))) return rc;
            continue;
        }
        size_t n = i % 97 == 50 ? long_len : (size_t)(x >> 9) % 8;
        for (size_t k = 0; k < n; k++) {
            uint64_t y = rnd(&s);
            rc = elem_nullable && y % 5 == 0 ? kl_column_push_null(c->child) : push_elem(c->child, y);
            if (rc) return rc;
        }
        if ((rc = kl_column_list_end(c))) return rc;
    }
    return KL_OK;
}

/* Row i of a written list column and row i of what the reader returned
 * (JSON text) hold the same JSON. */
static int row_matches(const kl_column *w, const kl_column *r, size_t i, char *why, size_t n) {
    if (kl_column_is_null(w, i) || kl_column_is_null(r, i)) {
        if (kl_column_is_null(w, i) == kl_column_is_null(r, i)) return 1;
        snprintf(why, n, "%s row %zu: null mismatch", w->name, i);
        return 0;
    }
    kl_buf a, b;
    kl_buf_init(&a);
    kl_buf_init(&b);
    kl_pq_format_value(&a, w, i, NULL, 1);
    size_t rn;
    const char *rs = kl_column_get_str(r, i, &rn);
    kl_buf_append(&b, rs, rn);
    int ok = a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
    if (!ok)
        snprintf(why, n, "%s row %zu: wrote %.*s, read %.*s", w->name, i, (int)KL_MIN(a.len, 200), a.data,
                 (int)KL_MIN(b.len, 200), b.data);
    kl_buf_free(&a);
    kl_buf_free(&b);
    return ok;
}

KL_TEST(parquet_list_column_build) {
    kl_err e = {0};
    kl_column *c, *d, *f;
    kl_col_type t;
    KT_CHECK(kl_col_type_parse("list", &t) != KL_OK); /* not a schema type name */
    KT_EQ_STR(kl_col_type_name(KL_COL_LIST), "list");
    KT_CHECK(kl_column_new("x", KL_COL_LIST, 1, 0, &c, &e) == KL_EINVAL);
    KT_CHECK(kl_column_new("x", KL_COL_STRUCT, 1, 0, &c, &e) == KL_EINVAL);
    KT_CHECK(kl_column_new_list("x", KL_COL_LIST, 1, 1, 0, &c, &e) == KL_EINVAL);
    KT_OK(kl_column_new_list("x", KL_COL_INT64, 1, 1, 0, &c, &e), &e);
    KT_OK(kl_column_push_i64(c->child, 1), &e);
    KT_OK(kl_column_push_null(c->child), &e);
    KT_OK(kl_column_list_end(c), &e);           /* [1, null] */
    KT_OK(kl_column_push_i64(c->child, 9), &e); /* pending, then dropped by the null row */
    KT_OK(kl_column_push_null(c), &e);          /* null */
    KT_OK(kl_column_list_end(c), &e);           /* [] */
    KT_CHECK(kl_column_push_i64(c, 3) == KL_ETYPE);
    KT_EQ_INT(c->len, 3);
    KT_EQ_INT(c->offsets[3], 2);
    kl_buf b;
    kl_buf_init(&b);
    for (size_t i = 0; i < 3; i++) {
        kl_pq_format_value(&b, c, i, NULL, 1);
        kl_buf_puts(&b, ";");
    }
    KT_EQ_STR(b.data, "[1,null];null;[];");
    /* FixedSizeList: a row of another length is refused and dropped */
    KT_OK(kl_column_new_list("f", KL_COL_FLOAT32, 0, 0, 2, &f, &e), &e);
    KT_OK(kl_column_push_f64(f->child, 0.5), &e);
    KT_CHECK(kl_column_list_end(f) == KL_ESHAPE);
    KT_EQ_INT(f->len, 0);
    KT_EQ_INT(f->child->len, 0);
    KT_OK(kl_column_push_f64(f->child, 0.5), &e);
    KT_OK(kl_column_push_f64(f->child, -2), &e);
    KT_OK(kl_column_list_end(f), &e);
    KT_CHECK(kl_column_push_null(f) == KL_EINVAL); /* not nullable */
    /* append: offsets rebased onto the destination's elements */
    KT_OK(kl_column_new_list("x", KL_COL_INT64, 1, 1, 0, &d, &e), &e);
    KT_OK(kl_column_append(d, c, 0, 3), &e);
    KT_OK(kl_column_append(d, c, 0, 1), &e);
    KT_CHECK(kl_column_append(d, f, 0, 1) == KL_ETYPE);
    kl_buf_reset(&b);
    for (size_t i = 0; i < d->len; i++) {
        kl_pq_format_value(&b, d, i, NULL, 0);
        kl_buf_puts(&b, ";");
    }
    KT_EQ_STR(b.data, "[1,null];NULL;[];[1,null];");
    KT_EQ_INT(d->child->len, 4);
    kl_column_clear(d);
    KT_EQ_INT(d->child->len, 0);
    kl_buf_free(&b);
    kl_column_free(c);
    kl_column_free(d);
    kl_column_free(f);
}

KL_TEST(parquet_list_roundtrip_matrix) {
    kl_err e = {0};
    const kl_pq_codec codecs[] = {KL_PQ_UNCOMPRESSED, KL_PQ_SNAPPY, KL_PQ_GZIP, KL_PQ_ZSTD, KL_PQ_LZ4_RAW};
    for (size_t ci = 0; ci < 5; ci++)
        for (int v2 = 0; v2 < 2; v2++) {
            /* every element type, each in the four nullability combinations, and a flat column */
            kl_column *c[4 * NE + 1];
            size_t nc = 0;
            for (size_t t = 0; t < NE; t++)
                for (int nl = 0; nl < 2; nl++)
                    for (int ne = 0; ne < 2; ne++) {
                        char name[64];
                        snprintf(name, sizeof name, "l_%s_%d%d", kl_col_type_name(elem_types[t]), nl, ne);
                        KT_OK(make_list(&c[nc++], name, elem_types[t], nl, ne, 700, 300,
                                        ci * 131 + t * 7 + (size_t)(2 * nl + ne), &e),
                              &e);
                    }
            KT_OK(kl_column_new("flat", KL_COL_INT64, 0, 0, &c[nc], &e), &e);
            for (size_t i = 0; i < 700; i++) kl_column_push_i64(c[nc], (int64_t)i);
            nc++;
            kl_pq_write_opts o;
            kl_pq_write_opts_default(&o);
            o.codec = codecs[ci];
            o.data_page_v2 = v2;
            o.page_bytes = 1024;    /* several pages; the long lists are longer than one */
            o.row_group_rows = 300; /* several row groups */
            const char *path = kt_path("lists.parquet");
            kl_pq_file_info info;
            KT_OK(kl_pq_write_file(path, c, nc, &o, &info, &e), &e);
            KT_EQ_INT(info.rows, 700);
            KT_EQ_INT(info.row_groups, 3);
            KT_EQ_INT(info.cols[0].type, KL_COL_LIST);
            kl_pq_file_info_clear(&info);
            kl_pq_reader *r;
            KT_OK(kl_pq_open(path, &r, &e), &e);
            KT_EQ_INT(kl_pq_num_top(r), nc);
            const kl_pq_column_info *ci0 = kl_pq_column(r, kl_pq_top(r, 0));
            KT_CHECK(ci0->nested);
            KT_EQ_STR(ci0->logical, "LIST");
            kl_pq_close(r);
            kl_column **back;
            size_t nb;
            KT_OK(kl_pq_read_file(path, NULL, 0, &back, &nb, &e), &e);
            KT_EQ_INT(nb, nc);
            for (size_t j = 0; j + 1 < nc; j++) {
                KT_EQ_STR(back[j]->name, c[j]->name);
                KT_EQ_INT(back[j]->len, 700);
                char why[512];
                for (size_t i = 0; i < 700; i++)
                    if (!row_matches(c[j], back[j], i, why, sizeof why)) {
                        KT_CHECKF(0, "codec=%s v2=%d: %s", kl_pq_codec_name(codecs[ci]), v2, why);
                        break;
                    }
            }
            KT_EQ_INT(kl_column_get_i64(back[nc - 1], 699), 699);
            for (size_t j = 0; j < nc; j++) {
                kl_column_free(c[j]);
                kl_column_free(back[j]);
            }
            free(back);
        }
}

/* Walks the data pages (v2, uncompressed) of the first column chunk of
 * path: counts them, sums their num_rows and checks that each one's
 * repetition levels start with 0. */
static int walk_pages(const char *path, size_t *npages, int64_t *rows, int *bad_start, kl_err *e) {
    size_t len;
    char *buf;
    int rc = kl_read_file_max(path, 1u << 26, &buf, &len, e);
    if (rc) return rc;
    const uint8_t *p = (const uint8_t *)buf + 4, *end = (const uint8_t *)buf + len - 8;
    *npages = 0, *rows = 0, *bad_start = 0;
    while (p < end) {
        kl__tr r = {p, end, 0, 0};
        int16_t last = 0, id;
        int ty, ptype = -1;
        int64_t comp = 0, nrows = 0, replen = 0, deflen = 0;
        while (kl__tr_field(&r, &last, &ty, &id)) {
            if (id == 1 && ty == TT_I32) ptype = (int)kl__tr_int(&r);
            else if (id == 3 && ty == TT_I32) comp = kl__tr_int(&r);
            else if (id == 8 && ty == TT_STRUCT) {
                int16_t l2 = 0, i2;
                int t2;
                while (kl__tr_field(&r, &l2, &t2, &i2)) {
                    if (i2 == 3 && t2 == TT_I32) nrows = kl__tr_int(&r);
                    else if (i2 == 5 && t2 == TT_I32) deflen = kl__tr_int(&r);
                    else if (i2 == 6 && t2 == TT_I32) replen = kl__tr_int(&r);
                    else kl__tr_skip(&r, t2);
                }
            } else kl__tr_skip(&r, ty);
        }
        if (r.err || ptype != PAGE_DATA_V2) break; /* past the chunk */
        const uint8_t *d = r.p;
        /* the first run of the RLE/bit-packed hybrid (bit width 1) */
        uint8_t h = replen > 0 ? d[0] : 0xff;
        int first = replen < 2 ? -1 : (h & 1) ? (d[1] & 1) : d[1];
        if (first != 0) (*bad_start)++;
        (void)deflen;
        (*npages)++;
        *rows += nrows;
        p = r.p + comp;
    }
    kl_mem_free(buf);
    return KL_OK;
}

KL_TEST(parquet_list_pages_split_between_rows) {
    kl_err e = {0};
    kl_column *c;
    /* rows of up to 7 elements and every 97th of 2000: pages of 512 bytes cut between rows */
    KT_OK(make_list(&c, "v", KL_COL_INT64, 1, 1, 1000, 2000, 7, &e), &e);
    kl_pq_write_opts o;
    kl_pq_write_opts_default(&o);
    o.codec = KL_PQ_UNCOMPRESSED;
    o.data_page_v2 = 1;
    o.page_bytes = 512;
    o.row_group_rows = 0;
    const char *path = kt_path("pages.parquet");
    KT_OK(kl_pq_write_file(path, &c, 1, &o, NULL, &e), &e);
    size_t np;
    int64_t rows;
    int bad;
    KT_OK(walk_pages(path, &np, &rows, &bad, &e), &e);
    KT_CHECKF(np > 20, "%zu pages", np);
    KT_EQ_INT(rows, 1000);
    KT_EQ_INT(bad, 0);
    /* a page target of 1 byte: one row per page, still read back whole */
    o.page_bytes = 1;
    KT_OK(kl_pq_write_file(path, &c, 1, &o, NULL, &e), &e);
    KT_OK(walk_pages(path, &np, &rows, &bad, &e), &e);
    KT_EQ_INT(np, 1000);
    KT_EQ_INT(rows, 1000);
    KT_EQ_INT(bad, 0);
    kl_column **back;
    size_t nb;
    char why[512];
    KT_OK(kl_pq_read_file(path, NULL, 0, &back, &nb, &e), &e);
    for (size_t i = 0; i < 1000; i++)
        if (!row_matches(c, back[0], i, why, sizeof why)) {
            KT_CHECKF(0, "%s", why);
            break;
        }
    kl_column_free(back[0]);
    free(back);
    kl_column_free(c);
}

KL_TEST(parquet_list_batches_checked) {
    kl_err e = {0};
    kl_column *s, *b, *f;
    KT_OK(kl_column_new_list("v", KL_COL_FLOAT32, 1, 0, 3, &s, &e), &e);
    KT_OK(kl_column_new_list("v", KL_COL_FLOAT64, 1, 0, 3, &b, &e), &e);
    kl_pq_writer *w;
    KT_OK(kl_pq_writer_open(kt_path("chk.parquet"), &s, 1, NULL, &w, &e), &e);
    KT_CHECK(kl_pq_writer_write(w, &b, 1, &e) == KL_ETYPE);
    KT_CONTAINS(kl_err_what(&e), "lists of float64");
    /* null elements into a list of non-nullable elements */
    KT_OK(kl_column_new_list("v", KL_COL_FLOAT32, 1, 1, 3, &f, &e), &e);
    f->list_size = 3;
    kl_column_push_f64(f->child, 1);
    kl_column_push_null(f->child);
    kl_column_push_f64(f->child, 2);
    KT_OK(kl_column_list_end(f), &e);
    KT_CHECK(kl_pq_writer_write(w, &f, 1, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "null elements");
    /* a FixedSizeList of 3 floats: written and read back */
    for (int i = 0; i < 4; i++) {
        if (i == 2) {
            KT_OK(kl_column_push_null(s), &e);
            continue;
        }
        for (int k = 0; k < 3; k++) kl_column_push_f64(s->child, i * 3 + k + 0.25);
        KT_OK(kl_column_list_end(s), &e);
    }
    KT_OK(kl_pq_writer_write(w, &s, 1, &e), &e);
    KT_OK(kl_pq_writer_close(w, NULL, &e), &e);
    kl_column **back;
    size_t nb;
    KT_OK(kl_pq_read_file(kt_path("chk.parquet"), NULL, 0, &back, &nb, &e), &e);
    KT_EQ_INT(back[0]->len, 4);
    size_t n;
    const char *j1 = kl_column_get_str(back[0], 1, &n);
    KT_CHECKF(n == 16 && !memcmp(j1, "[3.25,4.25,5.25]", 16), "row 1: %.*s", (int)n, j1);
    KT_CHECK(kl_column_is_null(back[0], 2));
    kl_column_free(back[0]);
    free(back);
    kl_column_free(s);
    kl_column_free(b);
    kl_column_free(f);
}

KL_TEST(parquet_list_pack_columns) {
    kl_err e = {0};
    kl_column *c[3], *s, *l;
    KT_OK(kl_column_new("a", KL_COL_FLOAT64, 1, 0, &c[0], &e), &e);
    KT_OK(kl_column_new("b", KL_COL_INT32, 0, 0, &c[1], &e), &e);
    KT_OK(kl_column_new("c", KL_COL_INT64, 0, 0, &c[2], &e), &e);
    kl_column_push_f64(c[0], 0.1);
    kl_column_push_null(c[0]);
    kl_column_push_i64(c[1], 7);
    kl_column_push_i64(c[1], -3);
    kl_column_push_i64(c[2], 1 << 24);
    kl_column_push_i64(c[2], (1 << 24) + 1); /* not exact as float32 */
    KT_CHECK(kl_column_pack_list("v", c, 3, KL_COL_FLOAT32, &l, &e) == KL_ERANGE);
    KT_CONTAINS(kl_err_what(&e), "c row 1: 16777217 is not exact as float32");
    KT_OK(kl_column_pack_list("v", c, 3, KL_COL_FLOAT64, &l, &e), &e);
    kl_buf b;
    kl_buf_init(&b);
    for (size_t i = 0; i < l->len; i++) {
        kl_pq_format_value(&b, l, i, NULL, 1);
        kl_buf_puts(&b, ";");
    }
    KT_EQ_STR(b.data, "[0.1,7,16777216];[null,-3,16777217];");
    KT_EQ_INT(l->list_size, 3);
    kl_column_free(l);
    KT_OK(kl_column_pack_list("v", c, 2, KL_COL_FLOAT32, &l, &e), &e);
    KT_CHECK(fabs(((const float *)l->child->values)[0] - 0.1f) == 0);
    kl_column_free(l);
    KT_OK(kl_column_new("s", KL_COL_STRING, 0, 0, &s, &e), &e);
    kl_column *bad[2] = {c[1], s};
    KT_CHECK(kl_column_pack_list("v", bad, 2, KL_COL_FLOAT32, &l, &e) == KL_ETYPE);
    KT_CONTAINS(kl_err_what(&e), "s is string, not a number");
    kl_column_push_str(s, "x", 1);
    KT_CHECK(kl_column_pack_list("v", c, 3, KL_COL_INT32, &l, &e) == KL_ETYPE);
    kl_column_push_i64(c[1], 1);
    KT_CHECK(kl_column_pack_list("v", c, 3, KL_COL_FLOAT64, &l, &e) == KL_ESHAPE);
    kl_buf_free(&b);
    for (int i = 0; i < 3; i++) kl_column_free(c[i]);
    kl_column_free(s);
}

KL_TEST(parquet_list_bad_offsets_refused) {
    kl_err e = {0};
    kl_column *c;
    KT_OK(kl_column_new_list("v", KL_COL_INT32, 0, 0, 0, &c, &e), &e);
    for (int i = 0; i < 3; i++) {
        kl_column_push_i64(c->child, i);
        KT_OK(kl_column_list_end(c), &e);
    }
    c->offsets[2] = 7; /* beyond the 3 elements */
    KT_CHECK(kl_pq_write_file(kt_path("bad.parquet"), &c, 1, NULL, NULL, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "row 1: list offsets 1..7 outside the 3 elements");
    c->offsets[2] = 2;
    c->list_size = 2; /* rows of 1 element in a FixedSizeList of 2 */
    KT_CHECK(kl_pq_write_file(kt_path("bad.parquet"), &c, 1, NULL, NULL, &e) == KL_ESHAPE);
    KT_CONTAINS(kl_err_what(&e), "row 0 has 1 elements, the fixed size is 2");
    KT_CHECK(!kl_path_exists(kt_path("bad.parquet")));
    kl_column_free(c);
}

/* A struct column of five fields; null rows and null fields when asked. */
static int make_struct(kl_column **out, const char *name, int nullable, size_t rows, uint64_t seed, kl_err *e) {
    static const char *names[] = {"a", "b", "c", "d", "e"};
    static const kl_col_type types[] = {KL_COL_INT64, KL_COL_STRING, KL_COL_FLOAT64, KL_COL_BOOL, KL_COL_DATE};
    int rc = kl_column_new_struct(name, nullable, names, types, 5, out, e);
    uint64_t s = seed | 1;
    for (size_t i = 0; i < rows && !rc; i++) {
        if (nullable && rnd(&s) % 6 == 0) {
            rc = kl_column_push_null(*out);
            continue;
        }
        for (size_t j = 0; j < 5 && !rc; j++) {
            uint64_t x = rnd(&s) % 40; /* low cardinality: the dictionary pays */
            rc = x % 7 == 0 ? kl_column_push_null((*out)->fields[j]) : push_elem((*out)->fields[j], x);
        }
        if (!rc) rc = kl_column_struct_end(*out);
    }
    return rc ? kl_err_set(e, rc, "building struct %s", name) : KL_OK;
}

KL_TEST(parquet_struct_roundtrip) {
    kl_err e = {0};
    kl_column *c;
    static const char *nm[] = {"x", "x"};
    static const kl_col_type ty[] = {KL_COL_INT32, KL_COL_INT32};
    KT_CHECK(kl_column_new_struct("s", 1, nm, ty, 2, &c, &e) == KL_EINVAL); /* duplicate field */
    KT_OK(kl_column_new_struct("s", 1, nm, ty, 1, &c, &e), &e);
    KT_CHECK(kl_column_struct_end(c) == KL_ESHAPE); /* no value in x */
    kl_column_push_i64(c->fields[0], 4);
    KT_OK(kl_column_struct_end(c), &e);
    KT_OK(kl_column_push_null(c), &e);
    KT_EQ_INT(c->fields[0]->len, 2);
    KT_CHECK(kl_column_is_null(c->fields[0], 1));
    kl_column_free(c);
    const kl_pq_codec codecs[] = {KL_PQ_UNCOMPRESSED, KL_PQ_ZSTD, KL_PQ_SNAPPY};
    for (size_t ci = 0; ci < 3; ci++)
        for (int v2 = 0; v2 < 2; v2++)
            for (int dict = 0; dict < 2; dict++) {
                kl_column *cols[3];
                KT_OK(make_struct(&cols[0], "s_n", 1, 900, ci * 5 + (size_t)v2, &e), &e);
                KT_OK(make_struct(&cols[1], "s", 0, 900, ci * 7 + (size_t)dict, &e), &e);
                KT_OK(make_list(&cols[2], "l", KL_COL_INT64, 1, 1, 900, 50, ci, &e), &e);
                kl_pq_write_opts o;
                kl_pq_write_opts_default(&o);
                o.codec = codecs[ci];
                o.data_page_v2 = v2;
                o.dictionary = dict;
                o.page_bytes = 512;
                o.row_group_rows = 400;
                const char *path = kt_path("struct.parquet");
                KT_OK(kl_pq_write_file(path, cols, 3, &o, NULL, &e), &e);
                kl_column **back;
                size_t nb;
                KT_OK(kl_pq_read_file(path, NULL, 0, &back, &nb, &e), &e);
                KT_EQ_INT(nb, 3);
                char why[512];
                for (size_t j = 0; j < 3; j++)
                    for (size_t i = 0; i < 900; i++)
                        if (!row_matches(cols[j], back[j], i, why, sizeof why)) {
                            KT_CHECKF(0, "codec=%s v2=%d dict=%d: %s", kl_pq_codec_name(codecs[ci]), v2, dict, why);
                            break;
                        }
                for (size_t j = 0; j < 3; j++) {
                    kl_column_free(cols[j]);
                    kl_column_free(back[j]);
                }
                free(back);
            }
}
