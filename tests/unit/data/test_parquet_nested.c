/* Unit tests of nested Parquet columns on hand-built files (schemas DuckDB
 * does not write; tests/integration/parquet_wild.py compares what it does
 * write with DuckDB): the legacy 2-level LIST forms (repeated primitive,
 * a repeated group named "array"), a bare repeated top-level field,
 * MAP_KEY_VALUE maps, a STRUCT with a repeated field; and malformed levels
 * (a record that starts with repetition level 1, too few records, a level
 * above the maximum), which must fail with KL_EPARSE naming the column. */
#include <stdlib.h>

#include "../harness.h"
#include "data/parquet_int.h"
#include "keel/parquet.h"

typedef struct {
    const char *name;
    int ptype;
    int rep;
    int nchildren;
    int conv;
} el_t; /* ptype -1: group */
typedef struct {
    size_t n; /* level entries */
    const uint32_t *rep, *def;
    int max_rep, max_def;
    const int32_t *vals;      /* the present values (def == max_def), in order */
    const char *path;         /* dotted path of the leaf */
} leaf_t;

static void rle_levels(pq_buf *b, const uint32_t *lev, size_t n, int maxv) {
    pq_buf t = {0};
    kl__pq_rle_encode(&t, lev, n, pq_bit_width((uint64_t)maxv));
    uint32_t l = (uint32_t)t.len;
    pq_buf_put(b, &l, 4);
    pq_buf_put(b, t.p, t.len);
    kl__pq_buf_free(&t);
}

/* One row group of rows records; one uncompressed v1 page per leaf. */
static int write_nested(const char *path, const el_t *els, size_t nel, int ntop, const leaf_t *lf, size_t nleaf,
                        int64_t rows) {
    pq_buf f = {0}, b = {0}, fb = {0};
    int64_t start[8], len[8];
    pq_buf_put(&f, "PAR1", 4);
    for (size_t k = 0; k < nleaf; k++) {
        const leaf_t *L = &lf[k];
        size_t nv = 0;
        for (size_t i = 0; i < L->n; i++) nv += L->def[i] == (uint32_t)L->max_def;
        b.len = 0;
        if (L->max_rep) rle_levels(&b, L->rep, L->n, L->max_rep);
        if (L->max_def) rle_levels(&b, L->def, L->n, L->max_def);
        pq_buf_put(&b, L->vals, nv * 4);
        start[k] = (int64_t)f.len;
        pq_buf h = {0};
        kl__tw w;
        kl__tw_init(&w, &h);
        kl__tw_i32(&w, 1, PAGE_DATA);
        kl__tw_i32(&w, 2, (int32_t)b.len);
        kl__tw_i32(&w, 3, (int32_t)b.len);
        kl__tw_begin(&w, 5);
        kl__tw_i32(&w, 1, (int32_t)L->n);
        kl__tw_i32(&w, 2, ENC_PLAIN);
        kl__tw_i32(&w, 3, ENC_RLE);
        kl__tw_i32(&w, 4, ENC_RLE);
        kl__tw_end(&w);
        kl__tw_end(&w);
        pq_buf_put(&f, h.p, h.len);
        pq_buf_put(&f, b.p, b.len);
        kl__pq_buf_free(&h);
        len[k] = (int64_t)f.len - start[k];
    }
    kl__tw t;
    kl__tw_init(&t, &fb);
    kl__tw_i32(&t, 1, 1);
    kl__tw_list(&t, 2, TT_STRUCT, (uint32_t)nel + 1);
    kl__tw_elem_begin(&t);
    kl__tw_bin(&t, 4, "schema", 6);
    kl__tw_i32(&t, 5, ntop);
    kl__tw_end(&t);
    for (size_t i = 0; i < nel; i++) {
        const el_t *E = &els[i];
        kl__tw_elem_begin(&t);
        if (E->ptype >= 0) kl__tw_i32(&t, 1, E->ptype);
        kl__tw_i32(&t, 3, E->rep);
        kl__tw_bin(&t, 4, E->name, strlen(E->name));
        if (E->ptype < 0) kl__tw_i32(&t, 5, E->nchildren);
        if (E->conv >= 0) kl__tw_i32(&t, 6, E->conv);
        kl__tw_end(&t);
    }
    kl__tw_i64(&t, 3, rows);
    kl__tw_list(&t, 4, TT_STRUCT, 1);
    kl__tw_elem_begin(&t);
    kl__tw_list(&t, 1, TT_STRUCT, (uint32_t)nleaf);
    int64_t total = 0;
    for (size_t k = 0; k < nleaf; k++) {
        kl__tw_elem_begin(&t);
        kl__tw_i64(&t, 2, start[k]);
        kl__tw_begin(&t, 3);
        kl__tw_i32(&t, 1, PT_INT32);
        kl__tw_list(&t, 2, TT_I32, 2);
        kl__tw_elem_i32(&t, ENC_PLAIN);
        kl__tw_elem_i32(&t, ENC_RLE);
        kl__tw_list(&t, 3, TT_BINARY, 1);
        kl__tw_elem_bin(&t, lf[k].path, strlen(lf[k].path));
        kl__tw_i32(&t, 4, CODEC_UNCOMPRESSED);
        kl__tw_i64(&t, 5, (int64_t)lf[k].n);
        kl__tw_i64(&t, 6, len[k]);
        kl__tw_i64(&t, 7, len[k]);
        kl__tw_i64(&t, 9, start[k]);
        kl__tw_end(&t);
        kl__tw_end(&t);
        total += len[k];
    }
    kl__tw_i64(&t, 2, total);
    kl__tw_i64(&t, 3, rows);
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
    return rc;
}

/* Reads column name of path; each row's JSON (or "NULL") joined by " | " into out. */
static int read_json(const char *path, const char *name, char *out, size_t n, kl_err *e) {
    kl_column **c = NULL;
    size_t nc = 0;
    const char *names[1] = {name};
    int rc = kl_pq_read_file(path, names, 1, &c, &nc, e);
    if (rc) return rc;
    kl_buf b;
    kl_buf_init(&b);
    kl_pq_column_info ci = {0};
    ci.nested = 1;
    for (size_t i = 0; i < c[0]->len; i++) {
        if (i) kl_buf_puts(&b, " | ");
        kl_pq_format_value(&b, c[0], i, &ci, 0);
    }
    snprintf(out, n, "%s", b.data ? b.data : "");
    kl_buf_free(&b);
    kl_column_free(c[0]);
    free(c);
    return KL_OK;
}

KL_TEST(parquet_nested_legacy_two_level_list) {
    /* optional group a (LIST) { repeated int32 element; }: [1,2] [] null [3] */
    static const el_t els[] = {{"a", -1, REP_OPTIONAL, 1, CT_LIST}, {"element", PT_INT32, REP_REPEATED, 0, -1}};
    static const uint32_t rep[] = {0, 1, 0, 0, 0}, def[] = {2, 2, 1, 0, 2};
    static const int32_t v[] = {1, 2, 3};
    leaf_t L = {5, rep, def, 1, 2, v, "a.element"};
    const char *p = kt_path("legacy2.parquet");
    KT_CHECK(write_nested(p, els, 2, 1, &L, 1, 4) == 0);
    char got[256];
    kl_err e = {0};
    KT_OK(read_json(p, "a", got, sizeof got, &e), &e);
    KT_EQ_STR(got, "[1,2] | [] | NULL | [3]");
}

KL_TEST(parquet_nested_legacy_array_group) {
    /* optional group b (LIST) { repeated group array { required int32 x; } }: elements are structs */
    static const el_t els[] = {
        {"b", -1, REP_OPTIONAL, 1, CT_LIST}, {"array", -1, REP_REPEATED, 1, -1}, {"x", PT_INT32, REP_REQUIRED, 0, -1}};
    static const uint32_t rep[] = {0, 1, 0}, def[] = {2, 2, 1};
    static const int32_t v[] = {7, 8};
    leaf_t L = {3, rep, def, 1, 2, v, "b.array.x"};
    const char *p = kt_path("legacy_array.parquet");
    KT_CHECK(write_nested(p, els, 3, 1, &L, 1, 2) == 0);
    char got[256];
    kl_err e = {0};
    KT_OK(read_json(p, "b", got, sizeof got, &e), &e);
    KT_EQ_STR(got, "[{\"x\":7},{\"x\":8}] | []");
}

KL_TEST(parquet_nested_bare_repeated_and_struct) {
    /* repeated int32 r; required group s { repeated int32 y; optional int32 z; } */
    static const el_t els[] = {{"r", PT_INT32, REP_REPEATED, 0, -1}, {"s", -1, REP_REQUIRED, 2, -1},
                               {"y", PT_INT32, REP_REPEATED, 0, -1}, {"z", PT_INT32, REP_OPTIONAL, 0, -1}};
    static const uint32_t rr[] = {0, 1, 0, 0}, rd[] = {1, 1, 0, 1};
    static const int32_t rv[] = {1, 2, 3};
    static const uint32_t yr[] = {0, 0, 1, 0}, yd[] = {0, 1, 1, 1};
    static const int32_t yv[] = {4, 5, 6};
    static const uint32_t zr[] = {0, 0, 0}, zd[] = {1, 0, 1};
    static const int32_t zv[] = {9, 10};
    leaf_t L[3] = {{4, rr, rd, 1, 1, rv, "r"}, {4, yr, yd, 1, 1, yv, "s.y"}, {3, zr, zd, 0, 1, zv, "s.z"}};
    const char *p = kt_path("bare.parquet");
    KT_CHECK(write_nested(p, els, 4, 2, L, 3, 3) == 0);
    char got[256];
    kl_err e = {0};
    KT_OK(read_json(p, "r", got, sizeof got, &e), &e);
    KT_EQ_STR(got, "[1,2] | [] | [3]");
    KT_OK(read_json(p, "s", got, sizeof got, &e), &e);
    KT_EQ_STR(got, "{\"y\":[],\"z\":9} | {\"y\":[4,5],\"z\":null} | {\"y\":[6],\"z\":10}");
    /* the default selection reads both, in schema order */
    kl_pq_reader *r;
    KT_OK(kl_pq_open(p, &r, &e), &e);
    KT_EQ_INT(kl_pq_num_selected(r), 2);
    KT_EQ_STR(kl_pq_selected(r, 0)->name, "r");
    KT_EQ_INT(kl_pq_selected(r, 1)->nested, 1);
    KT_EQ_STR(kl_pq_selected(r, 1)->logical, "STRUCT");
    kl_pq_close(r);
}

KL_TEST(parquet_nested_map_key_value) {
    /* optional group m (MAP) { repeated group map (MAP_KEY_VALUE) { required int32 key; optional int32 value; } } */
    static const el_t els[] = {{"m", -1, REP_OPTIONAL, 1, CT_MAP}, {"map", -1, REP_REPEATED, 2, CT_MAP_KEY_VALUE},
                               {"key", PT_INT32, REP_REQUIRED, 0, -1}, {"value", PT_INT32, REP_OPTIONAL, 0, -1}};
    static const uint32_t kr[] = {0, 1, 0, 0}, kd[] = {2, 2, 1, 0};
    static const int32_t kv[] = {1, 2};
    static const uint32_t vr[] = {0, 1, 0, 0}, vd[] = {3, 2, 1, 0};
    static const int32_t vv[] = {10};
    leaf_t L[2] = {{4, kr, kd, 1, 2, kv, "m.map.key"}, {4, vr, vd, 1, 3, vv, "m.map.value"}};
    const char *p = kt_path("map.parquet");
    KT_CHECK(write_nested(p, els, 4, 1, L, 2, 3) == 0);
    char got[256];
    kl_err e = {0};
    KT_OK(read_json(p, "m", got, sizeof got, &e), &e);
    KT_EQ_STR(got, "{\"1\":10,\"2\":null} | {} | NULL");
}

KL_TEST(parquet_nested_with_a_filter) {
    /* required int32 id; optional group m (LIST) { repeated group list { optional int32 element; } }:
     * a predicate on id keeps the matching records of the nested column */
    static const el_t els[] = {{"id", PT_INT32, REP_REQUIRED, 0, -1}, {"m", -1, REP_OPTIONAL, 1, CT_LIST},
                               {"list", -1, REP_REPEATED, 1, -1}, {"element", PT_INT32, REP_OPTIONAL, 0, -1}};
    static const uint32_t z[] = {0, 0, 0, 0};
    static const int32_t ids[] = {1, 2, 3, 4};
    static const uint32_t er[] = {0, 1, 0, 0, 0, 1}, ed[] = {3, 2, 1, 0, 3, 3};
    static const int32_t ev[] = {10, 30, 31};
    leaf_t L[2] = {{4, z, z, 0, 0, ids, "id"}, {6, er, ed, 1, 3, ev, "m.list.element"}};
    const char *p = kt_path("filter.parquet");
    KT_CHECK(write_nested(p, els, 4, 2, L, 2, 4) == 0);
    kl_err e = {0};
    kl_pq_reader *r;
    KT_OK(kl_pq_open(p, &r, &e), &e);
    const char *names[] = {"m", "id"};
    KT_OK(kl_pq_select(r, names, 2, &e), &e);
    kl_pq_value v = kl_pq_int(KL_COL_INT32, 2);
    KT_OK(kl_pq_filter(r, "id", KL_PQ_GE, &v, 1, &e), &e);
    KT_CHECK(kl_pq_filter(r, "m", KL_PQ_GE, &v, 1, &e) == KL_EUNSUPPORTED);
    kl_column *c[2] = {0};
    size_t n = 0;
    KT_OK(kl_pq_read_batch(r, 100, c, &n, &e), &e);
    KT_EQ_INT(n, 3);
    kl_buf b;
    kl_buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        kl_pq_format_value(&b, c[0], i, kl_pq_selected(r, 0), 1);
        kl_buf_puts(&b, ";");
    }
    KT_EQ_STR(b.data, "[];null;[30,31];"); /* record 1 ([10,null]) filtered out */
    KT_EQ_INT(kl_column_get_i64(c[1], 0), 2);
    kl_buf_free(&b);
    kl_column_free(c[0]);
    kl_column_free(c[1]);
    kl_pq_close(r);
}

KL_TEST(parquet_nested_malformed_levels) {
    static const el_t els[] = {{"a", -1, REP_OPTIONAL, 1, CT_LIST}, {"element", PT_INT32, REP_REPEATED, 0, -1}};
    static const int32_t v[] = {1, 2, 3, 4, 5};
    static const uint32_t d5[] = {2, 2, 2, 2, 2};
    struct { uint32_t rep[5]; int64_t rows; uint32_t maxrep; const char *what; } bad[] = {
        {{1, 1, 0, 0, 0}, 3, 1, "records"},            /* starts inside a list */
        {{0, 1, 0, 1, 1}, 3, 1, "records"},            /* 2 records, the row group says 3 */
        {{0, 0, 0, 0, 0}, 3, 1, "beyond"},             /* 5 records, the row group says 3 */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        leaf_t L = {5, bad[k].rep, d5, 1, 2, v, "a.element"};
        const char *p = kt_path("malformed.parquet");
        KT_CHECK(write_nested(p, els, 2, 1, &L, 1, bad[k].rows) == 0);
        char got[256];
        kl_err e = {0};
        int rc = read_json(p, "a", got, sizeof got, &e);
        KT_CHECKF(rc == KL_EPARSE && strstr(kl_err_what(&e), "column a") && strstr(kl_err_what(&e), bad[k].what),
                  "case %zu: rc %d: %s", k, rc, kl_err_what(&e));
    }
    /* a definition level above the maximum */
    static const uint32_t r0[] = {0, 0}, dbad[] = {2, 3};
    leaf_t L = {2, r0, dbad, 1, 3, v, "a.element"};
    const char *p = kt_path("malformed2.parquet");
    KT_CHECK(write_nested(p, els, 2, 1, &L, 1, 2) == 0);
    /* the file's schema says max_def 2: level 3 is out of range (written with a 2-bit width) */
    char got[256];
    kl_err e = {0};
    int rc = read_json(p, "a", got, sizeof got, &e);
    KT_CHECKF(rc == KL_EPARSE && strstr(kl_err_what(&e), "a.element"), "rc %d: %s", rc, kl_err_what(&e));
}
