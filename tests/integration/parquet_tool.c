/* parquet-tool: the test and benchmark driver of keel's Parquet layer (built
 * as build/parquet-tool by mk/parquet.mk). Prints values as JSON so that the
 * interop tests can compare keel with DuckDB (tests/integration/parquet_*.py).
 *   dump FILE... [--cols a,b]   one JSON line per file: columns, rows, values
 *   write OUT [--codec C] [--dict 0|1] [--rows N] [--v2] [--page-bytes B]
 *         [--rg-rows R] [--seed S] [--lists] [--structs]  writes the all-types test
 *         table (--lists / --structs: plus list / struct columns, printed as JSON
 *         text, type "json"), prints its JSON
 *   meta FILE                   metadata and statistics as JSON
 *   gen OUT.parquet --rows N [--codec C]   the click log, timed write
 *   scan FILE... [--threads T] [--reps R] [--warmup W]  sum(item_price), count by
 *                               category over the files (kl_pq_group_by), timed
 *   clickcsv OUT.csv [--rows N] [--seed S] the benchmark click log as CSV */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/clickgen.h"
#include "keel/parquet.h"

static kl_buf out;

static void put_value(const kl_column *c, size_t i) {
    if (kl_column_is_null(c, i)) { kl_buf_puts(&out, "null"); return; }
    switch (c->type) {
    case KL_COL_LIST:
    case KL_COL_STRUCT: { /* the JSON text of the row, as a string */
        kl_buf j;
        kl_buf_init(&j);
        kl_pq_format_value(&j, c, i, NULL, 1);
        kl_buf_json_strn(&out, j.data ? j.data : "", j.len);
        kl_buf_free(&j);
        return;
    }
    case KL_COL_BOOL: kl_buf_puts(&out, kl_column_get_i64(c, i) ? "true" : "false"); return;
    case KL_COL_FLOAT32: case KL_COL_FLOAT64: {
        double v = kl_column_get_f64(c, i);
        if (isnan(v)) kl_buf_puts(&out, "\"NaN\"");
        else if (isinf(v)) kl_buf_puts(&out, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        else kl_buf_printf(&out, "%.17g", v);
        return;
    }
    case KL_COL_STRING: {
        size_t n;
        const char *s = kl_column_get_str(c, i, &n);
        kl_buf_json_strn(&out, s, n); /* whole: a NUL is \u0000 */
        return;
    }
    case KL_COL_BINARY: {
        size_t n;
        const unsigned char *s = (const unsigned char *)kl_column_get_str(c, i, &n);
        kl_buf_puts(&out, "\"");
        for (size_t k = 0; k < n; k++) kl_buf_printf(&out, "%02x", s[k]);
        kl_buf_puts(&out, "\"");
        return;
    }
    default: kl_buf_printf(&out, "%lld", (long long)kl_column_get_i64(c, i));
    }
}

static void put_columns(kl_column **cols, size_t n) {
    size_t rows = n ? cols[0]->len : 0;
    kl_buf_printf(&out, "\"rows\":%zu,\"columns\":[", rows);
    for (size_t j = 0; j < n; j++) {
        kl_buf_printf(&out, "%s{\"name\":", j ? "," : "");
        kl_buf_json_str(&out, cols[j]->name);
        kl_buf_printf(&out, ",\"type\":\"%s\"}",
                      cols[j]->type == KL_COL_LIST || cols[j]->type == KL_COL_STRUCT ? "json"
                                                                                     : kl_col_type_name(cols[j]->type));
    }
    kl_buf_puts(&out, "],\"data\":[");
    for (size_t j = 0; j < n; j++) {
        kl_buf_puts(&out, j ? ",[" : "[");
        for (size_t i = 0; i < rows; i++) {
            if (i) kl_buf_puts(&out, ",");
            put_value(cols[j], i);
        }
        kl_buf_puts(&out, "]");
    }
    kl_buf_puts(&out, "]");
}

static void flush_out(void) {
    fwrite(out.data, 1, out.len, stdout);
    kl_buf_reset(&out);
}

static const char *opt(int argc, char **argv, const char *name, const char *def) {
    for (int i = 0; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}
static int flag(int argc, char **argv, const char *name) {
    for (int i = 0; i < argc; i++) if (!strcmp(argv[i], name)) return 1;
    return 0;
}

static int cmd_dump(int argc, char **argv) {
    const char *cols = opt(argc, argv, "--cols", NULL);
    char *names[256]; size_t nn = 0;
    char *dup = cols ? strdup(cols) : NULL;
    if (dup) for (char *t = strtok(dup, ","); t && nn < 256; t = strtok(NULL, ",")) names[nn++] = t;
    int bad = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--cols")) { i++; continue; }
        kl_err e = {0};
        kl_column **c = NULL; size_t n = 0;
        kl_buf_puts(&out, "{\"file\":");
        kl_buf_json_str(&out, argv[i]);
        int rc = kl_pq_read_file(argv[i], dup ? (const char *const *)names : NULL, nn, &c, &n, &e);
        if (rc) {
            kl_buf_puts(&out, ",\"ok\":false,\"error\":");
            kl_buf_json_str(&out, kl_err_what(&e));
            bad = 1;
        } else {
            kl_buf_puts(&out, ",\"ok\":true,");
            put_columns(c, n);
            /* columns keel cannot read, and why */
            kl_pq_reader *r;
            if (kl_pq_open(argv[i], &r, &e) == 0) {
                kl_buf_puts(&out, ",\"unsupported\":[");
                int first = 1;
                kl_buf why;
                kl_buf_init(&why);
                for (size_t k = 0; k < kl_pq_num_top(r); k++) {
                    const kl_pq_column_info *ci = kl_pq_column(r, kl_pq_top(r, k));
                    if (ci->supported) continue;
                    if (!first) { kl_buf_puts(&out, ","); kl_buf_puts(&why, ","); }
                    kl_buf_json_str(&out, ci->name);
                    kl_buf_json_str(&why, ci->why);
                    first = 0;
                }
                kl_buf_printf(&out, "],\"why\":[%s]", why.data ? why.data : "");
                kl_buf_free(&why);
                kl_pq_close(r);
            }
            for (size_t k = 0; k < n; k++) kl_column_free(c[k]);
            free(c);
        }
        kl_buf_puts(&out, "}\n");
        flush_out();
    }
    free(dup);
    return bad;
}

/* One element of a list column of the test table: floats are multiples of
 * 1/8 (their JSON text is the same in every reader), int64 the full range. */
static int push_elem(kl_column *v, uint64_t x) {
    switch (v->type) {
    case KL_COL_BOOL: return kl_column_push_i64(v, (int64_t)(x >> 11) & 1);
    case KL_COL_INT32: return kl_column_push_i64(v, (int32_t)(x >> 5));
    case KL_COL_INT64: return kl_column_push_i64(v, (int64_t)(x >> 1) - (int64_t)(x >> 2));
    case KL_COL_FLOAT32:
    case KL_COL_FLOAT64: return kl_column_push_f64(v, (double)((int64_t)(x % 200001) - 100000) / 8.0);
    default: {
        char b[48];
        int n = snprintf(b, sizeof b, "el %llu \"q\" \\ δ", (unsigned long long)(x % 10000));
        return kl_column_push_str(v, b, (size_t)(x % 13 == 0 ? 0 : n));
    }
    }
}

/* The list columns of the test table: nullable lists and elements or not,
 * empty lists, lists of hundreds of elements (longer than a small page),
 * and a FixedSizeList<float32>[4] (an embedding). */
static int make_lists(size_t rows, uint64_t seed, kl_column **c, size_t *nc, kl_err *e) {
    static const struct {
        const char *name;
        kl_col_type t;
        int nullable, elem_nullable, size;
    } spec[] = {
        {"l_i64", KL_COL_INT64, 1, 1, 0},   {"l_f64", KL_COL_FLOAT64, 0, 1, 0}, {"l_s", KL_COL_STRING, 1, 0, 0},
        {"l_i32", KL_COL_INT32, 0, 0, 0},   {"l_b", KL_COL_BOOL, 1, 1, 0},      {"emb", KL_COL_FLOAT32, 0, 0, 4},
        {"emb_n", KL_COL_FLOAT32, 1, 1, 4},
    };
    uint64_t x = seed * 0xD1B54A32D192ED03ull + 7;
    for (size_t j = 0; j < sizeof spec / sizeof spec[0]; j++) {
        int rc = kl_column_new_list(spec[j].name, spec[j].t, spec[j].nullable, spec[j].elem_nullable, spec[j].size,
                                    &c[*nc], e);
        if (rc) return rc;
        kl_column *col = c[(*nc)++];
        for (size_t i = 0; i < rows; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (spec[j].nullable && x % 7 == 0) {
                if ((rc = kl_column_push_null(col))) break;
                continue;
            }
            size_t n = spec[j].size ? (size_t)spec[j].size : i % 211 == 100 ? 300 + x % 200 : (size_t)(x >> 20) % 6;
            for (size_t k = 0; k < n && !rc; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                rc = spec[j].elem_nullable && x % 5 == 0 ? kl_column_push_null(col->child) : push_elem(col->child, x);
            }
            if (rc || (rc = kl_column_list_end(col))) break;
        }
        if (rc) return kl_err_set(e, rc, "column %s: cannot build row", spec[j].name);
    }
    return KL_OK;
}

/* The struct columns of the test table: a nullable struct of four fields
 * and a required one of two; fields null now and then. */
static int make_structs(size_t rows, uint64_t seed, kl_column **c, size_t *nc, kl_err *e) {
    static const char *n1[] = {"id", "name", "score", "ok"}, *n2[] = {"x", "y"};
    static const kl_col_type t1[] = {KL_COL_INT64, KL_COL_STRING, KL_COL_FLOAT64, KL_COL_BOOL},
                             t2[] = {KL_COL_INT32, KL_COL_FLOAT32};
    int rc = kl_column_new_struct("st_n", 1, n1, t1, 4, &c[*nc], e);
    if (!rc) rc = kl_column_new_struct("st", 0, n2, t2, 2, &c[*nc + 1], e);
    if (rc) return rc;
    *nc += 2;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 11;
    for (int k = 2; k >= 1 && !rc; k--) {
        kl_column *col = c[*nc - k];
        for (size_t i = 0; i < rows && !rc; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (col->nullable && x % 6 == 0) {
                rc = kl_column_push_null(col);
                continue;
            }
            for (size_t j = 0; j < col->nfields && !rc; j++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                rc = x % 9 == 0 ? kl_column_push_null(col->fields[j]) : push_elem(col->fields[j], x);
            }
            if (!rc) rc = kl_column_struct_end(col);
        }
    }
    return rc ? kl_err_set(e, rc, "cannot build the struct columns") : KL_OK;
}

/* The all-types test table: every type, nullable and not, edge values. */
static int make_table(size_t rows, uint64_t seed, kl_column **c, size_t *nc, kl_err *e) {
    static const struct { const char *name; kl_col_type t; } spec[] = {
        {"b", KL_COL_BOOL}, {"i32", KL_COL_INT32}, {"i64", KL_COL_INT64}, {"f32", KL_COL_FLOAT32},
        {"f64", KL_COL_FLOAT64}, {"s", KL_COL_STRING}, {"d", KL_COL_DATE}, {"ts", KL_COL_TIMESTAMP},
        {"cat", KL_COL_STRING}, {"small", KL_COL_INT64},
    };
    size_t ns = sizeof spec / sizeof spec[0], k = 0;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int nullable = 0; nullable < 2; nullable++)
        for (size_t j = 0; j < ns; j++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", spec[j].name, nullable ? "_n" : "");
            int rc = kl_column_new(name, spec[j].t, nullable, rows, &c[k], e);
            if (rc) return rc;
            kl_column *col = c[k++];
            for (size_t i = 0; i < rows; i++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                if (nullable && (x % 7 == 0 || (i / 1000) % 5 == 3)) { kl_column_push_null(col); continue; }
                int64_t v = (int64_t)(x >> 1);
                switch (spec[j].t) {
                case KL_COL_BOOL: kl_column_push_i64(col, (int64_t)(x >> 20) & 1); break;
                case KL_COL_INT32: kl_column_push_i64(col, i == 0 ? INT32_MIN : i == 1 ? INT32_MAX : (int32_t)v); break;
                case KL_COL_INT64:
                    if (!strncmp(spec[j].name, "small", 5)) kl_column_push_i64(col, (int64_t)(x % 50) - 10);
                    else kl_column_push_i64(col, i == 0 ? INT64_MIN : i == 1 ? INT64_MAX : v);
                    break;
                case KL_COL_FLOAT32: kl_column_push_f64(col, i == 0 ? -0.0 : i == 1 ? INFINITY : (double)(float)((double)(v % 2000000) / 1000.0)); break;
                case KL_COL_FLOAT64: kl_column_push_f64(col, i == 0 ? -INFINITY : i == 1 ? 1e308 : (double)v / 3e15); break;
                case KL_COL_STRING:
                    if (!strncmp(spec[j].name, "cat", 3)) {
                        static const char *cats[] = {"alpha", "beta", "gamma", "δέλτα", ""};
                        kl_column_push_str(col, cats[x % 5], strlen(cats[x % 5]));
                    } else {
                        char buf[64];
                        int n = snprintf(buf, sizeof buf, "row %zu \"q\" \\ %llx", i, (unsigned long long)(x % 100000));
                        kl_column_push_str(col, buf, (size_t)(i % 11 == 0 ? 0 : n));
                    }
                    break;
                case KL_COL_DATE: kl_column_push_i64(col, (int64_t)(x % 40000) - 10000); break;
                case KL_COL_TIMESTAMP: kl_column_push_i64(col, (int64_t)(x % 4000000000000000ull) - 1000000000000000ll); break;
                default: break;
                }
            }
        }
    *nc = k;
    return KL_OK;
}

static int parse_opts(int argc, char **argv, kl_pq_write_opts *o) {
    kl_pq_write_opts_default(o);
    const char *codec = opt(argc, argv, "--codec", "zstd");
    if (kl_pq_codec_parse(codec, &o->codec)) { fprintf(stderr, "bad codec %s\n", codec); return 2; }
    o->dictionary = atoi(opt(argc, argv, "--dict", "1"));
    o->data_page_v2 = flag(argc, argv, "--v2");
    if (opt(argc, argv, "--page-bytes", NULL)) o->page_bytes = strtoull(opt(argc, argv, "--page-bytes", NULL), NULL, 10);
    if (opt(argc, argv, "--rg-rows", NULL)) o->row_group_rows = strtoull(opt(argc, argv, "--rg-rows", NULL), NULL, 10);
    return 0;
}

static int cmd_write(int argc, char **argv) {
    kl_pq_write_opts o;
    if (argc < 3 || parse_opts(argc, argv, &o)) return 2;
    size_t rows = strtoull(opt(argc, argv, "--rows", "3000"), NULL, 10);
    uint64_t seed = strtoull(opt(argc, argv, "--seed", "1"), NULL, 10);
    kl_column *c[64]; size_t n = 0;
    kl_err e = {0};
    kl_pq_file_info info;
    if (make_table(rows, seed, c, &n, &e) || (flag(argc, argv, "--lists") && make_lists(rows, seed, c, &n, &e)) ||
        (flag(argc, argv, "--structs") && make_structs(rows, seed, c, &n, &e)) ||
        kl_pq_write_file(argv[2], c, n, &o, &info, &e)) {
        fprintf(stderr, "parquet-tool write: %s\n", kl_err_what(&e));
        return 1;
    }
    kl_buf_puts(&out, "{\"file\":");
    kl_buf_json_str(&out, argv[2]);
    kl_buf_printf(&out, ",\"ok\":true,\"row_groups\":%llu,\"bytes\":%llu,", (unsigned long long)info.row_groups, (unsigned long long)info.bytes);
    put_columns(c, n);
    kl_buf_puts(&out, "}\n");
    flush_out();
    for (size_t k = 0; k < n; k++) kl_column_free(c[k]);
    kl_pq_file_info_clear(&info);
    return 0;
}

static void put_stat_value(const kl_pq_value *v) {
    if (v->type == KL_COL_STRING || v->type == KL_COL_BINARY) { char *z = strndup(v->s, v->n); kl_buf_json_str(&out, z); free(z); }
    else if (v->type == KL_COL_FLOAT32 || v->type == KL_COL_FLOAT64) kl_buf_printf(&out, "%.17g", v->f);
    else kl_buf_printf(&out, "%lld", (long long)v->i);
}

static int cmd_meta(int argc, char **argv) {
    kl_err e = {0};
    kl_pq_reader *r;
    if (argc < 3 || kl_pq_open(argv[2], &r, &e)) { fprintf(stderr, "parquet-tool meta: %s\n", kl_err_what(&e)); return 1; }
    kl_buf_printf(&out, "{\"rows\":%llu,\"row_groups\":%zu,\"created_by\":", (unsigned long long)kl_pq_num_rows(r), kl_pq_num_row_groups(r));
    kl_buf_json_str(&out, kl_pq_created_by(r));
    kl_buf_puts(&out, ",\"columns\":[");
    for (size_t i = 0; i < kl_pq_num_columns(r); i++) {
        const kl_pq_column_info *ci = kl_pq_column(r, i);
        kl_buf_printf(&out, "%s{\"name\":", i ? "," : "");
        kl_buf_json_str(&out, ci->name);
        kl_buf_printf(&out, ",\"type\":\"%s\",\"physical\":\"%s\",\"logical\":\"%s\",\"nullable\":%d,\"supported\":%d",
                      kl_col_type_name(ci->type), ci->physical, ci->logical, ci->nullable, ci->supported);
        kl_pq_col_stats st;
        if (kl_pq_stats(r, (size_t)-1, i, &st, &e) == 0) {
            kl_buf_printf(&out, ",\"null_count\":%llu", (unsigned long long)st.null_count);
            if (st.has_min_max) { kl_buf_puts(&out, ",\"min\":"); put_stat_value(&st.min); kl_buf_puts(&out, ",\"max\":"); put_stat_value(&st.max); }
        }
        kl_buf_puts(&out, "}");
    }
    kl_buf_puts(&out, "]}\n");
    flush_out();
    kl_pq_close(r);
    return 0;
}

static double now_s(void) { return (double)kl_time_mono_ns() / 1e9; }

static int cmd_gen(int argc, char **argv) {
    kl_pq_write_opts o;
    if (argc < 3 || parse_opts(argc, argv, &o)) return 2;
    size_t rows = strtoull(opt(argc, argv, "--rows", "2000000"), NULL, 10);
    kl_column *c[5];
    kl_err e = {0};
    if (kl_clickgen_columns(rows, 42, c, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
    int reps = atoi(opt(argc, argv, "--reps", "1"));
    double best = 1e9, times[32];
    kl_pq_file_info info = {0};
    int warm = atoi(opt(argc, argv, "--warmup", "1"));  /* untimed runs first, like the DuckDB side */
    for (int k = -warm; k < reps && k < 32; k++) {
        double t0 = now_s();
        kl_pq_file_info_clear(&info);
        if (kl_pq_write_file(argv[2], c, 5, &o, &info, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
        if (k < 0) continue;
        times[k] = now_s() - t0;
        if (times[k] < best) best = times[k];
    }
    printf("{\"rows\":%zu,\"bytes\":%llu,\"seconds\":[", rows, (unsigned long long)info.bytes);
    for (int k = 0; k < reps && k < 32; k++) printf("%s%.4f", k ? "," : "", times[k]);
    printf("]}\n");
    kl_pq_file_info_clear(&info);
    for (int j = 0; j < 5; j++) kl_column_free(c[j]);
    return 0;
}

static int cmd_clickcsv(int argc, char **argv) {
    if (argc < 3) return 2;
    kl_err e = {0};
    double t0 = now_s();
    if (kl_clickgen_write_csv(argv[2], strtoull(opt(argc, argv, "--rows", "2000000"), NULL, 10),
                              strtoull(opt(argc, argv, "--seed", "42"), NULL, 10), &e)) {
        fprintf(stderr, "%s\n", kl_err_what(&e));
        return 1;
    }
    printf("{\"seconds\":%.3f}\n", now_s() - t0);
    return 0;
}

/* The benchmark query: SELECT category, count(*), sum(item_price) GROUP BY
 * category, through kl_pq_group_by (vector scan, dictionary codes). */
static int cmd_scan(int argc, char **argv) {
    if (argc < 3) return 2;
    int threads = atoi(opt(argc, argv, "--threads", "0"));
    if (threads > 0) kl_threads_set(threads);
    int reps = atoi(opt(argc, argv, "--reps", "1"));
    double sum = 0;
    kl_pq_groups g = {0};
    printf("{\"seconds\":[");
    int warm = atoi(opt(argc, argv, "--warmup", "1"));  /* untimed runs first, like the DuckDB side */
    for (int k = -warm; k < reps; k++) {
        double t0 = now_s();
        kl_err e = {0};
        kl_pq_groups_clear(&g);
        for (int i = 2; i < argc; i++) {
            if (!strncmp(argv[i], "--", 2)) { i++; continue; } /* every option takes a value */
            kl_pq_reader *r;
            if (kl_pq_open(argv[i], &r, &e) || kl_pq_group_by(r, "category", "item_price", &g, &e)) {
                fprintf(stderr, "%s\n", kl_err_what(&e));
                return 1;
            }
            kl_pq_close(r);
        }
        if (k >= 0) printf("%s%.4f", k ? "," : "", now_s() - t0);
    }
    sum = 0;
    for (size_t i = 0; i < g.n; i++) sum += g.g[i].sum;
    printf("],\"sum\":%.6f,\"counts\":{", sum);
    for (size_t i = 0; i < g.n; i++) printf("%s\"%.*s\":%llu", i ? "," : "", (int)g.g[i].key.n, g.g[i].key.s ? g.g[i].key.s : "", (unsigned long long)g.g[i].rows);
    printf("}}\n");
    kl_pq_groups_clear(&g);
    return 0;
}

int main(int argc, char **argv) {
    kl_buf_init(&out);
    if (argc < 2) { fprintf(stderr, "usage: parquet-tool dump|write|meta|gen|scan ...\n"); return 2; }
    int rc;
    if (!strcmp(argv[1], "dump")) rc = cmd_dump(argc, argv);
    else if (!strcmp(argv[1], "write")) rc = cmd_write(argc, argv);
    else if (!strcmp(argv[1], "meta")) rc = cmd_meta(argc, argv);
    else if (!strcmp(argv[1], "gen")) rc = cmd_gen(argc, argv);
    else if (!strcmp(argv[1], "scan")) rc = cmd_scan(argc, argv);
    else if (!strcmp(argv[1], "clickcsv")) rc = cmd_clickcsv(argc, argv);
    else { fprintf(stderr, "parquet-tool: unknown command %s\n", argv[1]); rc = 2; }
    kl_buf_free(&out);
    return rc;
}
