/* Unit tests of the Parquet writer and reader: round trips of every type ×
 * codec × nullability × dictionary/plain × page version, statistics,
 * predicates with row-group and page skipping, the row adapter, projection
 * errors, corruption (CRC, truncation) and the RLE/bit-packed hybrid. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "../harness.h"
#include "data/parquet_int.h"
#include "keel/parquet.h"
#include "pq_footer.h"

static const kl_col_type all_types[] = {KL_COL_BOOL, KL_COL_INT32, KL_COL_INT64, KL_COL_FLOAT32, KL_COL_FLOAT64,
                                        KL_COL_STRING, KL_COL_DATE, KL_COL_TIMESTAMP, KL_COL_BINARY};
#define NT (sizeof all_types / sizeof all_types[0])

static uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

/* columns of every type; low cardinality when lowcard (dictionary pays) */
static int make_cols(kl_column **c, size_t rows, int nullable, int lowcard, uint64_t seed, kl_err *e) {
    uint64_t s = seed | 1;
    for (size_t t = 0; t < NT; t++) {
        char name[32];
        snprintf(name, sizeof name, "c_%s", kl_col_type_name(all_types[t]));
        int rc = kl_column_new(name, all_types[t], nullable, 0, &c[t], e);
        if (rc) return rc;
        for (size_t i = 0; i < rows; i++) {
            uint64_t x = rnd(&s);
            if (lowcard) x %= 37;
            if (nullable && rnd(&s) % 5 == 0) { kl_column_push_null(c[t]); continue; }
            switch (all_types[t]) {
            case KL_COL_FLOAT32: case KL_COL_FLOAT64: kl_column_push_f64(c[t], ((double)(int64_t)x) / 7.0); break;
            case KL_COL_STRING: case KL_COL_BINARY: {
                char b[40];
                int n = snprintf(b, sizeof b, "v%llu", (unsigned long long)(x % 100000));
                kl_column_push_str(c[t], b, (size_t)n);
                break;
            }
            case KL_COL_DATE: kl_column_push_i64(c[t], (int64_t)(x % 50000) - 20000); break;
            default: kl_column_push_i64(c[t], (int64_t)x); break;
            }
        }
    }
    return KL_OK;
}

static int cols_equal(const kl_column *a, const kl_column *b, char *why, size_t n) {
    if (a->type != b->type || a->len != b->len) { snprintf(why, n, "%s: type/len %d/%zu vs %d/%zu", a->name, a->type, a->len, b->type, b->len); return 0; }
    for (size_t i = 0; i < a->len; i++) {
        if (kl_column_is_null(a, i) != kl_column_is_null(b, i)) { snprintf(why, n, "%s row %zu: null mismatch", a->name, i); return 0; }
        if (kl_column_is_null(a, i)) continue;
        int eq;
        if (a->type == KL_COL_STRING || a->type == KL_COL_BINARY) {
            size_t la, lb;
            const char *pa = kl_column_get_str(a, i, &la), *pb = kl_column_get_str(b, i, &lb);
            eq = la == lb && memcmp(pa, pb, la) == 0;
        } else if (a->type == KL_COL_FLOAT32 || a->type == KL_COL_FLOAT64) eq = kl_column_get_f64(a, i) == kl_column_get_f64(b, i);
        else eq = kl_column_get_i64(a, i) == kl_column_get_i64(b, i);
        if (!eq) { snprintf(why, n, "%s row %zu differs", a->name, i); return 0; }
    }
    return 1;
}

KL_TEST(parquet_roundtrip_matrix) {
    kl_err e = {0};
    const kl_pq_codec codecs[] = {KL_PQ_UNCOMPRESSED, KL_PQ_SNAPPY, KL_PQ_GZIP, KL_PQ_ZSTD, KL_PQ_LZ4_RAW};
    for (size_t ci = 0; ci < 5; ci++)
        for (int nullable = 0; nullable < 2; nullable++)
            for (int dict = 0; dict < 2; dict++)
                for (int v2 = 0; v2 < 2; v2++) {
                    if (v2 && ci % 2) continue;
                    kl_column *c[NT];
                    KT_OK(make_cols(c, 1500, nullable, dict, ci * 31 + (size_t)nullable, &e), &e);
                    kl_pq_write_opts o;
                    kl_pq_write_opts_default(&o);
                    o.codec = codecs[ci];
                    o.dictionary = dict;
                    o.data_page_v2 = v2;
                    o.page_bytes = 2048;     /* several pages */
                    o.row_group_rows = 600;  /* several row groups */
                    const char *path = kt_path("rt.parquet");
                    kl_pq_file_info info;
                    KT_OK(kl_pq_write_file(path, c, NT, &o, &info, &e), &e);
                    KT_EQ_INT(info.rows, 1500);
                    KT_EQ_INT(info.row_groups, 3);
                    KT_EQ_INT(info.cols[1].stats.null_count, kl_column_null_count(c[1]));
                    kl_pq_file_info_clear(&info);
                    kl_column **back; size_t nb;
                    KT_OK(kl_pq_read_file(path, NULL, 0, &back, &nb, &e), &e);
                    KT_EQ_INT(nb, NT);
                    for (size_t t = 0; t < NT; t++) {
                        char why[200];
                        KT_CHECKF(cols_equal(c[t], back[t], why, sizeof why), "%s codec=%s nullable=%d dict=%d v2=%d: %s",
                                  kl_col_type_name(all_types[t]), kl_pq_codec_name(codecs[ci]), nullable, dict, v2, why);
                        KT_EQ_STR(back[t]->name, c[t]->name);
                    }
                    for (size_t t = 0; t < NT; t++) { kl_column_free(c[t]); kl_column_free(back[t]); }
                    free(back);
                }
}

KL_TEST(parquet_stats_and_metadata) {
    kl_err e = {0};
    kl_column *a, *s;
    KT_OK(kl_column_new("a", KL_COL_INT64, 1, 0, &a, &e), &e);
    KT_OK(kl_column_new("s", KL_COL_STRING, 0, 0, &s, &e), &e);
    for (int i = 0; i < 100; i++) {
        if (i % 10 == 0) kl_column_push_null(a); else kl_column_push_i64(a, i - 50);
        char b[16]; int n = snprintf(b, sizeof b, "k%02d", 99 - i);
        kl_column_push_str(s, b, (size_t)n);
    }
    kl_column *cols[2] = {a, s};
    kl_pq_writer *w;
    const char *path = kt_path("st.parquet");
    KT_OK(kl_pq_writer_open(path, cols, 2, NULL, &w, &e), &e);
    KT_OK(kl_pq_writer_set_kv(w, "keel.schema", "{\"x\":1}", &e), &e);
    KT_OK(kl_pq_writer_write(w, cols, 2, &e), &e);
    KT_CHECK(!kl_path_exists(path));   /* nothing visible before close */
    kl_pq_file_info info;
    KT_OK(kl_pq_writer_close(w, &info, &e), &e);
    KT_CHECK(kl_path_exists(path));
    KT_EQ_INT(info.cols[0].stats.null_count, 10);
    KT_EQ_INT(info.cols[0].stats.min.i, -49);
    KT_EQ_INT(info.cols[0].stats.max.i, 49);
    KT_EQ_STR(info.cols[1].stats.min.s, "k00");
    KT_EQ_STR(info.cols[1].stats.max.s, "k99");
    kl_pq_file_info_clear(&info);
    kl_pq_reader *r;
    KT_OK(kl_pq_open(path, &r, &e), &e);
    KT_EQ_INT(kl_pq_num_rows(r), 100);
    KT_EQ_INT(kl_pq_num_columns(r), 2);
    KT_EQ_STR(kl_pq_kv(r, "keel.schema"), "{\"x\":1}");
    KT_CONTAINS(kl_pq_created_by(r), "keel");
    KT_EQ_INT(kl_pq_column(r, 1)->type, KL_COL_STRING);
    KT_EQ_STR(kl_pq_column(r, 1)->logical, "STRING");
    KT_EQ_INT(kl_pq_column(r, 0)->nullable, 1);
    kl_pq_col_stats st;
    KT_OK(kl_pq_stats(r, 0, 0, &st, &e), &e);
    KT_EQ_INT(st.null_count, 10);
    KT_CHECK(st.has_min_max && st.min.i == -49 && st.max.i == 49);
    KT_OK(kl_pq_stats(r, (size_t)-1, 1, &st, &e), &e);
    KT_CHECK(st.min.n == 3 && memcmp(st.min.s, "k00", 3) == 0);
    kl_pq_close(r);
    /* abort leaves nothing */
    KT_OK(kl_pq_writer_open(kt_path("ab.parquet"), cols, 1, NULL, &w, &e), &e);
    KT_OK(kl_pq_writer_write(w, cols, 1, &e), &e);
    kl_pq_writer_abort(w);
    KT_CHECK(!kl_path_exists(kt_path("ab.parquet")));
    kl_column_free(a);
    kl_column_free(s);
}

KL_TEST(parquet_filters_skip_row_groups_and_pages) {
    kl_err e = {0};
    kl_column *id, *cat, *price, *day;
    const size_t N = 100000;
    KT_OK(kl_column_new("id", KL_COL_INT64, 0, N, &id, &e), &e);
    KT_OK(kl_column_new("cat", KL_COL_STRING, 0, N, &cat, &e), &e);
    KT_OK(kl_column_new("price", KL_COL_FLOAT64, 1, N, &price, &e), &e);
    KT_OK(kl_column_new("day", KL_COL_DATE, 0, N, &day, &e), &e);
    static const char *cats[] = {"a", "b", "c", "d"};
    for (size_t i = 0; i < N; i++) {
        kl_column_push_i64(id, (int64_t)i);
        kl_column_push_str(cat, cats[(i / 7) % 4], 1);
        if (i % 13 == 0) kl_column_push_null(price); else kl_column_push_f64(price, (double)(i % 1000));
        kl_column_push_i64(day, (int64_t)(i / 1000));
    }
    kl_column *cols[4] = {id, cat, price, day};
    kl_pq_write_opts o;
    kl_pq_write_opts_default(&o);
    o.row_group_rows = 20000;
    o.page_bytes = 8192;
    const char *path = kt_path("f.parquet");
    KT_OK(kl_pq_write_file(path, cols, 4, &o, NULL, &e), &e);

    kl_pq_reader *r;
    KT_OK(kl_pq_open(path, &r, &e), &e);
    kl_pq_value bt[2] = {kl_pq_int(KL_COL_INT64, 30000), kl_pq_int(KL_COL_INT64, 30999)};
    KT_OK(kl_pq_filter(r, "id", KL_PQ_BETWEEN, bt, 2, &e), &e);
    const char *sel[2] = {"cat", "price"};
    KT_OK(kl_pq_select(r, sel, 2, &e), &e);
    kl_column *out[2] = {0, 0};
    size_t total = 0, n;
    do {
        KT_OK(kl_pq_read_batch(r, 300, out, &n, &e), &e);
        total += n;
    } while (n);
    KT_EQ_INT(total, 1000);
    kl_pq_scan_stats ss;
    kl_pq_scan_stats_get(r, &ss);
    KT_EQ_INT(ss.row_groups_read, 1);
    KT_EQ_INT(ss.row_groups_skipped, 4);
    KT_CHECK(ss.pages_skipped > 0);
    KT_CHECK(ss.rows_scanned < 20000);

    /* several predicates, the row adapter: cat IN (b, d) AND price > 500 AND day < 10 */
    kl_pq_filter_clear(r);
    kl_pq_value in[2] = {kl_pq_str("b", 1), kl_pq_str("d", 1)};
    kl_pq_value gt = kl_pq_dbl(500), lt = kl_pq_int(KL_COL_DATE, 10);
    KT_OK(kl_pq_filter(r, "cat", KL_PQ_IN, in, 2, &e), &e);
    KT_OK(kl_pq_filter(r, "price", KL_PQ_GT, &gt, 1, &e), &e);
    KT_OK(kl_pq_filter(r, "day", KL_PQ_LT, &lt, 1, &e), &e);
    const char *sel2[3] = {"id", "cat", "price"};
    KT_OK(kl_pq_select(r, sel2, 3, &e), &e);
    size_t want = 0;
    for (size_t i = 0; i < N; i++)
        if (((i / 7) % 4 == 1 || (i / 7) % 4 == 3) && i % 13 != 0 && (double)(i % 1000) > 500 && i / 1000 < 10) want++;
    kl_pq_value row[3];
    size_t got = 0;
    int rc;
    while ((rc = kl_pq_next_row(r, row, &e)) == 1) {
        size_t i = (size_t)row[0].i;
        KT_CHECK(row[1].n == 1 && row[1].s[0] == cats[(i / 7) % 4][0]);
        KT_CHECK(!row[2].is_null && row[2].f > 500);
        got++;
    }
    KT_EQ_INT(rc, 0);
    KT_EQ_INT(got, want);

    /* wrong filter types and names */
    kl_pq_value sv = kl_pq_str("x", 1);
    KT_EQ_INT(kl_pq_filter(r, "id", KL_PQ_EQ, &sv, 1, &e), KL_ETYPE);
    KT_EQ_INT(kl_pq_filter(r, "nope", KL_PQ_EQ, &gt, 1, &e), KL_ENOTFOUND);
    const char *bad[1] = {"nope"};
    KT_EQ_INT(kl_pq_select(r, bad, 1, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "columns: id, cat, price, day");
    kl_column_free(out[0]);
    kl_column_free(out[1]);
    kl_pq_close(r);
    for (int j = 0; j < 4; j++) kl_column_free(cols[j]);
}

KL_TEST(parquet_corrupt_files_fail_cleanly) {
    kl_err e = {0};
    kl_column *c[NT];
    KT_OK(make_cols(c, 2000, 1, 0, 7, &e), &e);
    const char *path = kt_path("c.parquet");
    KT_OK(kl_pq_write_file(path, c, NT, NULL, NULL, &e), &e);
    for (size_t t = 0; t < NT; t++) kl_column_free(c[t]);
    char *buf; size_t len;
    KT_OK(kl_read_file(path, &buf, &len, &e), &e);
    /* flipped byte in the first data page → CRC error */
    buf[200] ^= 0x55;
    kl_pq_reader *r;
    KT_OK(kl_pq_open_mem(buf, len, "flipped", &r, &e), &e);
    kl_column *out[NT] = {0};
    size_t n;
    int rc = kl_pq_read_batch(r, 100000, out, &n, &e);
    KT_CHECK(rc == KL_ECHECKSUM || rc == KL_EPARSE);
    kl_pq_close(r);
    for (size_t t = 0; t < NT; t++) kl_column_free(out[t]);
    buf[200] ^= 0x55;
    /* every truncation and many single-byte corruptions: errors, never crashes */
    for (size_t cut = 0; cut < len; cut += 97) {
        if (kl_pq_open_mem(buf, cut, "cut", &r, &e) == 0) { KT_CHECK(0); kl_pq_close(r); }
    }
    uint64_t s = 99;
    for (int k = 0; k < 300; k++) {
        size_t at = (size_t)(rnd(&s) % len);
        char old = buf[at];
        buf[at] = (char)rnd(&s);
        if (kl_pq_open_mem(buf, len, "mut", &r, &e) == 0) {
            kl_column *o2[NT] = {0};
            while (kl_pq_read_batch(r, 4096, o2, &n, &e) == 0 && n) {}
            for (size_t t = 0; t < NT; t++) kl_column_free(o2[t]);
            kl_pq_close(r);
        }
        buf[at] = old;
    }
    kl_mem_free(buf);
    KT_EQ_INT(kl_pq_open(kt_path("missing.parquet"), &r, &e), KL_ENOTFOUND);
    KT_CHECK(r == NULL);
}

/* The footer's num_rows must be the sum of the row groups' counts: every
 * consumer sizes its buffers from it (issue 22: 1 of 20000 aborted training,
 * 19000 of 20000 wrote past its buffer). */
KL_TEST(parquet_footer_num_rows_must_match_row_groups) {
    kl_err e = {0};
    kl_column *c[NT];
    KT_OK(make_cols(c, 20000, 1, 0, 3, &e), &e);
    kl_pq_write_opts o;
    kl_pq_write_opts_default(&o);
    o.row_group_rows = 7000;
    const char *path = kt_path("rows.parquet");
    KT_OK(kl_pq_write_file(path, c, NT, &o, NULL, &e), &e);
    for (size_t t = 0; t < NT; t++) kl_column_free(c[t]);
    char *buf; size_t len;
    KT_OK(kl_read_file(path, &buf, &len, &e), &e);
    kl_pq_reader *r = NULL;
    KT_OK(kl_pq_open_mem(buf, len, "good.parquet", &r, &e), &e);
    KT_EQ_INT(kl_pq_num_rows(r), 20000);
    KT_EQ_INT(kl_pq_num_row_groups(r), 3);
    kl_pq_close(r);
    static const int64_t lies[] = {1, 19000, 20001, 0, 1ll << 40};
    for (size_t k = 0; k < KL_ARRAY_LEN(lies); k++) {
        char *p2; size_t n2;
        KT_CHECK(kt_pq_patch_num_rows(buf, len, lies[k], &p2, &n2) == 0);
        int rc = kl_pq_open_mem(p2, n2, "lying.parquet", &r, &e);
        free(p2);
        KT_EQ_INT(rc, KL_EPARSE);
        KT_CHECK(r == NULL);
        char want[64];
        snprintf(want, sizeof want, "%lld rows", (long long)lies[k]);
        KT_CONTAINS(e.msg, "lying.parquet");
        KT_CONTAINS(e.msg, want);
        KT_CONTAINS(e.msg, "20000");
    }
    kl_mem_free(buf);
    /* the same through kl_pq_open: the error names the path */
    KT_CHECK(kt_pq_set_num_rows(path, 19000) == 0);
    KT_EQ_INT(kl_pq_open(path, &r, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, path);
}

KL_TEST(parquet_rle_hybrid) {
    uint64_t s = 5;
    for (int bw = 0; bw <= 20; bw++) {
        size_t n = 1000 + (size_t)bw * 37;
        uint32_t *v = malloc(n * sizeof *v), *w = malloc(n * sizeof *w);
        uint32_t mask = bw == 32 ? 0xFFFFFFFFu : ((1u << bw) - 1);
        for (size_t i = 0; i < n; i++) v[i] = (i / 50) % 2 ? (uint32_t)(i / 100) & mask : (uint32_t)rnd(&s) & mask;
        pq_buf b = {0};
        kl__pq_rle_encode(&b, v, n, bw);
        KT_CHECK(kl__pq_rle_decode(b.p, b.len, bw, w, n) == 0);
        KT_CHECK(memcmp(v, w, n * sizeof *v) == 0);
        KT_CHECK(kl__pq_rle_decode(b.p, b.len / 2, bw, w, n) != 0 || bw == 0 || b.len < 4);
        kl__pq_buf_free(&b);
        free(v); free(w);
    }
}

/* Every parquet-testing file (data/ and bad_data/) read in full: under
 * `make test-unit SANITIZE=address,undefined` this is the ASan check that no
 * file crashes the reader. Values are compared with DuckDB in
 * tests/integration/parquet_interop.py. */
#include <dirent.h>

/* The corpus lives in the repository (tests/data/parquet-testing, Apache-2.0);
 * the unit runner starts in the repository root (tests/run.sh). */
static const char *testing_dir(void) {
    static char buf[1024];
    const char *src = getenv("KEEL_SRC");
    snprintf(buf, sizeof buf, "%s/tests/data/parquet-testing", src && *src ? src : ".");
    return kl_path_exists(buf) ? buf : NULL;
}

KL_TEST(parquet_testing_files_no_crash) {
    const char *dir = testing_dir();
    KT_CHECKF(dir != NULL, "tests/data/parquet-testing not found (KEEL_SRC=%s)", getenv("KEEL_SRC") ? getenv("KEEL_SRC") : "");
    const char *subs[2] = {"data", "bad_data"};
    int nread = 0, nfail = 0;
    for (int k = 0; k < 2; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, subs[k]);
        DIR *d = opendir(path);
        KT_CHECKF(d != NULL, "cannot open %s", path);
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l < 8 || strcmp(de->d_name + l - 8, ".parquet")) continue;
            char f[1500];
            snprintf(f, sizeof f, "%s/%s", path, de->d_name);
            kl_err e = {0};
            kl_column **cols = NULL; size_t n = 0;
            int rc = kl_pq_read_file(f, NULL, 0, &cols, &n, &e);
            if (rc == 0) {
                nread++;
                for (size_t i = 0; i < n; i++) kl_column_free(cols[i]);
                free(cols);
            } else {
                nfail++;
                KT_CHECKF(e.msg[0] != 0, "%s: error %d without a message", f, rc);
            }
        }
        closedir(d);
    }
    KT_CHECKF(nread >= 36 && nfail >= 8, "read %d files, %d failed cleanly", nread, nfail);
}
