/* keel data head|show|stats|validate|report PATH: look at a dataset (folder
 * with `current`, a version folder, or one .parquet file) through keel's
 * Parquet reader; `keel data gen-clicks` writes the deterministic click log
 * used by tests and benchmarks. */
#include "app.h"

#include <cjson/cJSON.h>
#include <keel/clickgen.h>
#include <keel/column.h>
#include <keel/data.h>
#include <keel/feature.h>
#include <keel/parquet.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * Shared: resolve, scan, format
 * ================================================================== */

typedef struct {
    char **files;
    size_t nfiles;
    char *manifest_path;
    cJSON *manifest;
} dset;

static void dset_free(dset *d) {
    for (size_t i = 0; i < d->nfiles; i++) free(d->files[i]);
    free(d->files);
    free(d->manifest_path);
    cJSON_Delete(d->manifest);
}

static int dset_open(const char *path, dset *d, kl_err *e) {
    memset(d, 0, sizeof *d);
    /* keel data inspects a dataset as found: `data validate` reports every
     * mismatch with the manifest itself */
    int rc = kl_dataset_resolve_verify(path, KL_VERIFY_NONE, &d->files, &d->nfiles, &d->manifest_path, e);
    if (rc) return rc;
    if (d->manifest_path && (rc = kl_json_load_file_opts(d->manifest_path, KL_JSON_KEEP_NUL, (void **)&d->manifest, e))) { dset_free(d); return rc; }
    return KL_OK;
}

/* A column keel cannot read is never left out silently: without skip the
 * read fails naming it and the reason; with skip each one is named on
 * stderr ("skipped column ..."), once per name. */
typedef struct { int skip; char **said; size_t nsaid; } unreadable;

static void unreadable_free(unreadable *u) {
    for (size_t i = 0; i < u->nsaid; i++) free(u->said[i]);
    free(u->said);
}

static int check_readable(kl_pq_reader *r, const char *file, unreadable *u, kl_err *e) {
    for (size_t t = 0; t < kl_pq_num_top(r); t++) {
        const kl_pq_column_info *ci = kl_pq_column(r, kl_pq_top(r, t));
        if (ci->supported) continue;
        if (!u || !u->skip)
            return kl_err_set(e, KL_EUNSUPPORTED,
                              "%s: cannot read column %s: %s (--skip-unreadable reads the other columns)", file,
                              ci->name, ci->why);
        size_t k = 0;
        while (k < u->nsaid && strcmp(u->said[k], ci->name)) k++;
        if (k < u->nsaid) continue;
        char **ns = realloc(u->said, (u->nsaid + 1) * sizeof *ns);
        if (!ns || !(ns[u->nsaid] = strdup(ci->name))) {
            if (ns) u->said = ns;
            return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        u->said = ns;
        u->nsaid++;
        fprintf(stderr, "keel: skipped column %s: %s\n", ci->name, ci->why);
    }
    return KL_OK;
}

/* file opened for a scan of every column, after check_readable */
static int open_scan(const char *file, unreadable *u, kl_pq_reader **r, kl_err *e) {
    int rc = kl_pq_open(file, r, e);
    if (rc) return rc;
    if ((rc = check_readable(*r, file, u, e)) || (rc = kl_pq_select(*r, NULL, 0, e))) {
        kl_pq_close(*r);
        *r = NULL;
        return rc;
    }
    return KL_OK;
}

/* Calls fn for every batch of every file (all readable columns; r describes them). */
typedef int (*batch_fn)(void *ctx, kl_pq_reader *r, kl_column **cols, size_t ncols, size_t nrows, kl_err *e);

static int scan(dset *d, size_t max_rows, unreadable *u, batch_fn fn, void *ctx, kl_err *e) {
    size_t done = 0;
    for (size_t fi = 0; fi < d->nfiles && done < max_rows; fi++) {
        kl_pq_reader *r;
        int rc = open_scan(d->files[fi], u, &r, e);
        if (rc) return rc;
        size_t nc = kl_pq_num_selected(r);
        kl_column **cols = calloc(nc ? nc : 1, sizeof *cols);
        if (!cols) { kl_pq_close(r); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        for (;;) {
            size_t n = 0, want = KL_MIN((size_t)65536, max_rows - done);
            if (want == 0) break;
            if ((rc = kl_pq_read_batch(r, want, cols, &n, e))) { kl_err_prefix(e, "%s", d->files[fi]); break; }
            if (n == 0) break;
            if ((rc = fn(ctx, r, cols, nc, n, e))) break;
            done += n;
        }
        for (size_t i = 0; i < nc; i++) kl_column_free(cols[i]);
        free(cols);
        kl_pq_close(r);
        if (rc) return rc;
    }
    return KL_OK;
}

/* A string value as text, whole: a NUL byte is written as \0. */
static void put_text(kl_buf *b, const char *s, size_t n) {
    for (const char *z; n && (z = memchr(s, 0, n)); n -= (size_t)(z - s) + 1, s = z + 1) {
        kl_buf_append(b, s, (size_t)(z - s));
        kl_buf_puts(b, "\\0");
    }
    kl_buf_append(b, s, n);
}

/* put_text into a fixed buffer (cut to fit). */
static void text_into(char *dst, size_t dn, const char *s, size_t n) {
    kl_buf t;
    kl_buf_init(&t);
    put_text(&t, s, n);
    snprintf(dst, dn, "%s", t.data ? t.data : "");
    kl_buf_free(&t);
}

/* Bytes of a STRING/BINARY value as kl_pq_format_value prints them (binary as base64, UUID canonical). */
static void fmt_bytes(kl_buf *b, const char *s, size_t n, kl_col_type t, const kl_pq_column_info *ci, int json) {
    int64_t off[2] = {0, (int64_t)n};
    kl_column c;
    memset(&c, 0, sizeof c);
    c.type = t == KL_COL_BINARY ? t : KL_COL_STRING; /* bools' min/max are their text */
    c.len = 1;
    c.offsets = off;
    c.data = (char *)s;
    kl_pq_format_value(b, &c, 0, ci, json);
}

static int is_float(kl_col_type t) { return t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64; }

static int is_numeric(kl_col_type t) {
    return t == KL_COL_INT32 || t == KL_COL_INT64 || t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64 || t == KL_COL_DATE ||
           t == KL_COL_TIMESTAMP;
}

/* ==================================================================
 * head
 * ================================================================== */

#define SKIP_UNREADABLE_HELP "leave out columns keel cannot read, naming each on stderr (default: fail naming them)"
#define OPT_SKIP_UNREADABLE {"skip-unreadable", 0, 0, NULL, SKIP_UNREADABLE_HELP, 0}
static const app_opt head_opts[] = {
    {"rows", 'n', 1, "N", "rows to print (default 10)", 0},
    {"json", 0, 0, NULL, "JSON lines, one object per row", 0},
    OPT_SKIP_UNREADABLE,
};
static const app_cmd_spec head_spec = {"data head", "keel data head PATH [-n N] [--json] [--skip-unreadable]",
                                       "Print the first rows of a dataset or Parquet file.",
                                       "Values print as JSON would hold them: binary as base64, UUIDs canonical,\n"
                                       "nested columns (LIST, MAP, STRUCT) as JSON values. A column keel cannot\n"
                                       "read fails the command with its name and the reason, unless\n"
                                       "--skip-unreadable is given.",
                                       head_opts, KL_ARRAY_LEN(head_opts), 1, 1};

typedef struct { int json, header_done; } head_ctx;

static int head_batch(void *ctx, kl_pq_reader *r, kl_column **cols, size_t nc, size_t n, kl_err *e) {
    head_ctx *h = ctx;
    kl_buf b;
    kl_buf_init(&b);
    if (!h->json && !h->header_done) {
        for (size_t j = 0; j < nc; j++) kl_buf_printf(&b, "%s%s", j ? "\t" : "", cols[j]->name);
        kl_buf_puts(&b, "\n");
        h->header_done = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (h->json) kl_buf_puts(&b, "{");
        for (size_t j = 0; j < nc; j++) {
            if (h->json) {
                if (j) kl_buf_puts(&b, ", ");
                kl_buf_json_str(&b, cols[j]->name);
                kl_buf_puts(&b, ": ");
            } else if (j) kl_buf_puts(&b, "\t");
            kl_pq_format_value(&b, cols[j], i, kl_pq_selected(r, j), h->json);
        }
        kl_buf_puts(&b, h->json ? "}\n" : "\n");
    }
    fputs(b.data ? b.data : "", stdout);
    kl_buf_free(&b);
    return KL_OK;
}

static int head(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&head_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t n;
    if ((rc = app_get_int(&a, &head_spec, "rows", 10, &n)) >= 0) return rc;
    kl_err e = {0};
    dset d;
    if (dset_open(a.pos[0], &d, &e)) return app_fail(&e);
    head_ctx h = {app_flag(&a, "json"), 0};
    unreadable u = {app_flag(&a, "skip-unreadable"), NULL, 0};
    rc = scan(&d, n < 0 ? 0 : (size_t)n, &u, head_batch, &h, &e);
    unreadable_free(&u);
    dset_free(&d);
    return rc ? app_fail(&e) : APP_EXIT_OK;
}

/* ==================================================================
 * show
 * ================================================================== */

static const app_opt show_opts[] = {{"json", 0, 0, NULL, "machine-readable output", 0}};
static const app_cmd_spec show_spec = {"data show", "keel data show PATH [--json]",
                                       "Describe a dataset version or Parquet file: version, sources, files, schema.",
                                       NULL, show_opts, KL_ARRAY_LEN(show_opts), 1, 1};

static int show(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&show_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    dset d;
    if (dset_open(a.pos[0], &d, &e)) return app_fail(&e);
    int json = app_flag(&a, "json");
    kl_buf b;
    kl_buf_init(&b);
    uint64_t total = 0;
    kl_buf_puts(&b, json ? "{\"files\": [" : "");
    if (d.manifest && !json) {
        cJSON *m = d.manifest, *rows = cJSON_GetObjectItem(m, "rows");
        kl_buf_printf(&b, "version   %s\nkeel      %s\nrows      %.0f accepted, %.0f rejected\npartition %s\ncodec     %s\nsources:\n",
                      cJSON_GetStringValue(cJSON_GetObjectItem(m, "version_id")),
                      cJSON_GetStringValue(cJSON_GetObjectItem(m, "keel_version")),
                      cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "accepted")),
                      cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "rejected")),
                      cJSON_IsString(cJSON_GetObjectItem(m, "partition_by")) ? cJSON_GetObjectItem(m, "partition_by")->valuestring : "(none)",
                      cJSON_GetStringValue(cJSON_GetObjectItem(m, "codec")));
        cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(m, "sources"))
            kl_buf_printf(&b, "  %s  sha256 %s  %.0f bytes\n", cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")),
                          cJSON_GetStringValue(cJSON_GetObjectItem(s, "sha256")), cJSON_GetNumberValue(cJSON_GetObjectItem(s, "bytes")));
    }
    if (!json) kl_buf_puts(&b, "files:\n");
    kl_pq_reader *first = NULL;
    for (size_t i = 0; i < d.nfiles; i++) {
        kl_pq_reader *r;
        if ((rc = kl_pq_open(d.files[i], &r, &e))) goto fail;
        total += kl_pq_num_rows(r);
        if (json) {
            kl_buf_puts(&b, i ? ", {\"path\": " : "{\"path\": ");
            kl_buf_json_str(&b, d.files[i]);
            kl_buf_printf(&b, ", \"rows\": %llu, \"row_groups\": %zu}", (unsigned long long)kl_pq_num_rows(r), kl_pq_num_row_groups(r));
        } else {
            kl_buf_printf(&b, "  %s  %llu rows, %zu row groups\n", d.files[i], (unsigned long long)kl_pq_num_rows(r),
                          kl_pq_num_row_groups(r));
        }
        if (!first) first = r;
        else kl_pq_close(r);
    }
    if (json) kl_buf_printf(&b, "], \"rows\": %llu, \"columns\": [", (unsigned long long)total);
    else kl_buf_printf(&b, "rows      %llu\ncreated by %s\ncolumns:\n", (unsigned long long)total, kl_pq_created_by(first));
    for (size_t j = 0; j < kl_pq_num_top(first); j++) {
        const kl_pq_column_info *ci = kl_pq_column(first, kl_pq_top(first, j));
        const char *type = ci->nested ? "json" : ci->is_unsigned ? "uint64" : kl_col_type_name(ci->type);
        if (json) {
            kl_buf_puts(&b, j ? ", {\"name\": " : "{\"name\": ");
            kl_buf_json_str(&b, ci->name);
            kl_buf_printf(&b, ", \"type\": \"%s\", \"nullable\": %s, \"physical\": \"%s\", \"logical\": ", type,
                          ci->nullable ? "true" : "false", ci->physical);
            kl_buf_json_str(&b, ci->logical ? ci->logical : "");
            kl_buf_printf(&b, ", \"nested\": %s, \"readable\": %s", ci->nested ? "true" : "false",
                          ci->supported ? "true" : "false");
            if (!ci->supported) {
                kl_buf_puts(&b, ", \"why\": ");
                kl_buf_json_str(&b, ci->why);
            }
            kl_buf_puts(&b, "}");
        } else {
            kl_buf_printf(&b, "  %-20s %-10s %s%s%s%s", ci->name, type, ci->physical,
                          ci->logical && *ci->logical ? "/" : "", ci->logical ? ci->logical : "",
                          ci->nullable ? "" : " not null");
            if (!ci->supported) kl_buf_printf(&b, "  (not readable: %s)", ci->why);
            kl_buf_puts(&b, "\n");
        }
    }
    if (json) {
        kl_buf_puts(&b, "], \"manifest\": ");
        char *raw = NULL;
        size_t rawn = 0;
        if (d.manifest && !kl_read_file(d.manifest_path, &raw, &rawn, NULL) && memmem(raw, rawn, "\\u0000", 6)) {
            /* cJSON would print a string with \u0000 cut short: the file's own text (its newlines are whitespace) */
            for (size_t k = 0; k < rawn; k++) if (raw[k] == '\n') raw[k] = ' ';
            kl_buf_append(&b, raw, rawn);
        } else if (d.manifest) {
            char *m = cJSON_PrintUnformatted(d.manifest);
            kl_buf_puts(&b, m ? m : "null");
            free(m);
        } else kl_buf_puts(&b, "null");
        kl_mem_free(raw);
        kl_buf_puts(&b, "}\n");
    }
    kl_pq_close(first);
    fputs(b.data ? b.data : "", stdout);
    kl_buf_free(&b);
    dset_free(&d);
    return APP_EXIT_OK;
fail:
    kl_pq_close(first);
    kl_buf_free(&b);
    dset_free(&d);
    return app_fail(&e);
}

/* ==================================================================
 * stats (and the data the report needs)
 * ================================================================== */

typedef struct { char *s; size_t len; int64_t n; } topv; /* s may hold NUL bytes */

typedef struct {
    char *name;
    kl_col_type type;
    kl_pq_column_info ci; /* what kl_pq_format_value needs: is_unsigned, nested, logical */
    char logical[48];
    int64_t rows, nulls;
    int has;
    double dmin, dmax;   /* float columns; others too, for the report's histograms */
    int64_t imin, imax;  /* integer, date and timestamp columns: exact */
    char *smin, *smax;   /* may hold NUL bytes: lengths below */
    size_t smin_n, smax_n;
    kl_hll hll;
    double *vals;        /* numeric values (report histograms) */
    size_t nvals, capvals;
    topv *top;           /* strings/bools: value counts (capped) */
    size_t ntop, captop;
} cstat;

typedef struct {
    cstat *c;
    size_t nc;
    int keep_values;
} stats_ctx;

static int top_add(cstat *c, const char *s, size_t n) {
    for (size_t k = 0; k < c->ntop; k++)
        if (c->top[k].len == n && !memcmp(c->top[k].s, s, n)) { c->top[k].n++; return KL_OK; }
    if (c->ntop >= 5000) return KL_OK;
    if (c->ntop == c->captop) {
        size_t nc = c->captop ? c->captop * 2 : 16;
        topv *t = realloc(c->top, nc * sizeof *t);
        if (!t) return KL_ENOMEM;
        c->top = t;
        c->captop = nc;
    }
    if (!(c->top[c->ntop].s = malloc(n + 1))) return KL_ENOMEM;
    memcpy(c->top[c->ntop].s, s, n);
    c->top[c->ntop].s[n] = 0;
    c->top[c->ntop].len = n;
    c->top[c->ntop++].n = 1;
    return KL_OK;
}

static int top_add_n(cstat *c, const char *s, size_t n, int64_t times) {
    for (size_t k = 0; k < c->ntop; k++)
        if (c->top[k].len == n && !memcmp(c->top[k].s, s, n)) { c->top[k].n += times; return KL_OK; }
    size_t before = c->ntop;
    int rc = top_add(c, s, n);
    if (rc == KL_OK && c->ntop > before) c->top[c->ntop - 1].n = times;
    return rc;
}

static int stats_setup(stats_ctx *s, kl_pq_reader *r, kl_err *e) {
    size_t nc = kl_pq_num_selected(r);
    if (!s->c) {
        s->nc = nc;
        if (!(s->c = calloc(nc ? nc : 1, sizeof *s->c))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (size_t j = 0; j < nc; j++) {
            const kl_pq_column_info *ci = kl_pq_selected(r, j);
            cstat *c = &s->c[j];
            c->name = strdup(ci->name);
            c->type = ci->type;
            c->ci = *ci;
            snprintf(c->logical, sizeof c->logical, "%s", ci->logical ? ci->logical : "");
            c->ci.name = c->name;
            c->ci.logical = c->logical;
            c->ci.why = c->ci.physical = "";
        }
    }
    if (nc != s->nc) return kl_err_set(e, KL_ESHAPE, "files of the dataset have different columns");
    return KL_OK;
}

/* One present numeric value. */
static int stat_num(const stats_ctx *s, cstat *c, kl_col_type t, double v, int64_t iv, kl_err *e) {
    if (t != KL_COL_FLOAT32 && t != KL_COL_FLOAT64) {
        v = (double)iv;
        kl_hll_add_hash(&c->hll, kl_hash64(&iv, sizeof iv));
    } else {
        kl_hll_add_hash(&c->hll, kl_hash64(&v, sizeof v));
    }
    if (c->ci.is_unsigned) {
        v = (double)(uint64_t)iv;
        if (!c->has || (uint64_t)iv < (uint64_t)c->imin) c->imin = iv;
        if (!c->has || (uint64_t)iv > (uint64_t)c->imax) c->imax = iv;
    } else if (t != KL_COL_FLOAT32 && t != KL_COL_FLOAT64) {
        if (!c->has || iv < c->imin) c->imin = iv;
        if (!c->has || iv > c->imax) c->imax = iv;
    }
    if (!isnan(v)) {
        if (!c->has || v < c->dmin) c->dmin = v;
        if (!c->has || v > c->dmax) c->dmax = v;
        c->has = 1;
    }
    if (s->keep_values && isfinite(v)) {
        if (c->nvals == c->capvals) {
            size_t ncap = c->capvals ? c->capvals * 2 : 65536;
            double *nv = realloc(c->vals, ncap * sizeof *nv);
            if (!nv) return kl_err_set(e, KL_ENOMEM, "out of memory");
            c->vals = nv;
            c->capvals = ncap;
        }
        c->vals[c->nvals++] = v;
    }
    return KL_OK;
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn) {
    int r = memcmp(a, b, KL_MIN(an, bn));
    return r ? r : (an < bn ? -1 : an > bn);
}

static int set_bytes(char **dst, size_t *dn, const char *s, size_t n) {
    char *z = malloc(n + 1);
    if (!z) return KL_ENOMEM;
    memcpy(z, s, n);
    z[n] = 0;
    free(*dst);
    *dst = z;
    *dn = n;
    return KL_OK;
}

/* A present string (or bool as text) seen `times` times. */
static int stat_str(const stats_ctx *s, cstat *c, kl_col_type t, const char *sv, size_t sl, int64_t times, kl_err *e) {
    kl_hll_add_hash(&c->hll, kl_hash64(sv, sl));
    if ((s->keep_values || t == KL_COL_BOOL) && top_add_n(c, sv, sl, times)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!c->has || cmp_bytes(sv, sl, c->smin, c->smin_n) < 0) {
        if (set_bytes(&c->smin, &c->smin_n, sv, sl)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    if (!c->has || cmp_bytes(sv, sl, c->smax, c->smax_n) > 0) {
        if (set_bytes(&c->smax, &c->smax_n, sv, sl)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    c->has = 1;
    return KL_OK;
}

static int stats_batch(void *ctx, kl_pq_reader *r, kl_column **cols, size_t nc, size_t n, kl_err *e) {
    stats_ctx *s = ctx;
    int rc;
    if ((rc = stats_setup(s, r, e))) return rc;
    for (size_t j = 0; j < nc; j++) {
        cstat *c = &s->c[j];
        const kl_column *col = cols[j];
        c->rows += (int64_t)n;
        for (size_t i = 0; i < n; i++) {
            if (kl_column_is_null(col, i)) { c->nulls++; continue; }
            if (is_numeric(col->type)) rc = stat_num(s, c, col->type, kl_column_get_f64(col, i), is_float(col->type) ? 0 : kl_column_get_i64(col, i), e);
            else if (col->type == KL_COL_BOOL) rc = stat_str(s, c, col->type, kl_column_get_i64(col, i) ? "true" : "false", kl_column_get_i64(col, i) ? 4 : 5, 1, e);
            else {
                size_t sl;
                const char *sv = kl_column_get_str(col, i, &sl);
                rc = stat_str(s, c, col->type, sv, sl, 1, e);
            }
            if (rc) return rc;
        }
    }
    return KL_OK;
}

/* stats over vector scans (kl_pq_next_vectors): dictionary-coded strings are
 * counted per code and each distinct value is looked at once per row group. */
static int stats_vectors(stats_ctx *s, const kl_pq_vector *v, size_t nc, size_t n, kl_err *e) {
    int rc = KL_OK;
    for (size_t j = 0; j < nc && !rc; j++) {
        cstat *c = &s->c[j];
        const kl_pq_vector *x = &v[j];
        c->rows += (int64_t)n;
        if (x->codes) {
            size_t nd = x->dict->len;
            int64_t *cnt = calloc(nd + 1, sizeof *cnt);
            if (!cnt) return kl_err_set(e, KL_ENOMEM, "out of memory");
            for (size_t i = 0; i < n; i++) {
                if (x->valid && !x->valid[i]) c->nulls++;
                else cnt[x->codes[i]]++;
            }
            for (size_t k = 0; k < nd && !rc; k++) {
                if (!cnt[k]) continue;
                size_t sl;
                const char *sv = kl_column_get_str(x->dict, k, &sl);
                rc = stat_str(s, c, x->type, sv, sl, cnt[k], e);
            }
            free(cnt);
            continue;
        }
        kl_column col; /* a view of the vector for the getters */
        memset(&col, 0, sizeof col);
        col.type = x->type;
        col.len = n;
        col.values = (void *)x->values;
        col.offsets = (int64_t *)x->offsets;
        col.data = (char *)x->data;
        for (size_t i = 0; i < n && !rc; i++) {
            if (x->valid && !x->valid[i]) { c->nulls++; continue; }
            if (is_numeric(x->type)) rc = stat_num(s, c, x->type, kl_column_get_f64(&col, i), is_float(x->type) ? 0 : kl_column_get_i64(&col, i), e);
            else if (x->type == KL_COL_BOOL) rc = stat_str(s, c, x->type, kl_column_get_i64(&col, i) ? "true" : "false", kl_column_get_i64(&col, i) ? 4 : 5, 1, e);
            else {
                size_t sl;
                const char *sv = kl_column_get_str(&col, i, &sl);
                rc = stat_str(s, c, x->type, sv, sl, 1, e);
            }
        }
    }
    return rc;
}

static int stats_scan(dset *d, stats_ctx *s, unreadable *u, kl_err *e) {
    for (size_t fi = 0; fi < d->nfiles; fi++) {
        kl_pq_reader *r;
        int rc = open_scan(d->files[fi], u, &r, e);
        if (rc) return rc;
        size_t nc = kl_pq_num_selected(r);
        rc = stats_setup(s, r, e);
        while (!rc) {
            const kl_pq_vector *v;
            size_t n;
            if ((rc = kl_pq_next_vectors(r, &v, &n, e))) { kl_err_prefix(e, "%s", d->files[fi]); break; }
            if (n == 0) break;
            rc = stats_vectors(s, v, nc, n, e);
        }
        kl_pq_close(r);
        if (rc) return rc;
    }
    return KL_OK;
}

static void stats_free(stats_ctx *s) {
    for (size_t j = 0; j < s->nc; j++) {
        cstat *c = &s->c[j];
        free(c->name); free(c->smin); free(c->smax); free(c->vals);
        for (size_t k = 0; k < c->ntop; k++) free(c->top[k].s);
        free(c->top);
    }
    free(s->c);
}

/* A value of an integer, date or timestamp column (int64 all the way: a
 * double would round 9999-12-31T23:59:59.999999Z up to year 10000). */
static void fmt_int(kl_col_type t, int64_t v, char *buf, size_t n) {
    if (t == KL_COL_DATE) {
        int y, m, d;
        kl_civil_from_days(v, &y, &m, &d);
        snprintf(buf, n, "%04d-%02d-%02d", y, m, d);
    } else if (t == KL_COL_TIMESTAMP) kl_time_rfc3339(v, buf, n);
    else snprintf(buf, n, "%lld", (long long)v);
}

/* fmt_int for a column (UINT64 unsigned). */
static void fmt_cint(const cstat *c, int64_t v, char *buf, size_t n) {
    if (c->ci.is_unsigned) snprintf(buf, n, "%llu", (unsigned long long)(uint64_t)v);
    else fmt_int(c->type, v, buf, n);
}

static const char *stat_type(const cstat *c) {
    return c->ci.nested ? "json" : c->ci.is_unsigned ? "uint64" : kl_col_type_name(c->type);
}

static void fmt_num(kl_col_type t, double v, char *buf, size_t n) { (void)t; snprintf(buf, n, "%.10g", v); } /* floats */

static const app_opt stats_opts[] = {{"json", 0, 0, NULL, "machine-readable output", 0}, OPT_SKIP_UNREADABLE};
static const app_cmd_spec stats_spec = {
    "data stats",
    "keel data stats PATH [--json] [--skip-unreadable]",
    "Per-column statistics (rows, nulls, min, max, approximate distinct) by a full scan.",
    NULL,
    stats_opts,
    KL_ARRAY_LEN(stats_opts),
    1,
    1};

static int stats(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&stats_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    dset d;
    if (dset_open(a.pos[0], &d, &e)) return app_fail(&e);
    stats_ctx s = {0};
    unreadable u = {app_flag(&a, "skip-unreadable"), NULL, 0};
    rc = stats_scan(&d, &s, &u, &e);
    unreadable_free(&u);
    dset_free(&d);
    if (rc) { stats_free(&s); return app_fail(&e); }
    int json = app_flag(&a, "json");
    kl_buf b;
    kl_buf_init(&b);
    if (json) kl_buf_puts(&b, "{\"columns\": [");
    else kl_buf_printf(&b, "%-20s %-10s %10s %10s %26s %26s %10s\n", "column", "type", "rows", "nulls", "min", "max", "distinct~");
    for (size_t j = 0; j < s.nc; j++) {
        cstat *c = &s.c[j];
        char mn[64] = "", mx[64] = "";
        int minmax = c->has && !c->ci.nested; /* the order of JSON texts means nothing */
        if (minmax) {
            if (is_float(c->type)) {
                fmt_num(c->type, c->dmin, mn, sizeof mn);
                fmt_num(c->type, c->dmax, mx, sizeof mx);
            } else if (is_numeric(c->type)) {
                fmt_cint(c, c->imin, mn, sizeof mn);
                fmt_cint(c, c->imax, mx, sizeof mx);
            } else if (c->type == KL_COL_BINARY) {
                kl_buf t; kl_buf_init(&t);
                fmt_bytes(&t, c->smin, c->smin_n, c->type, &c->ci, 0);
                snprintf(mn, sizeof mn, "%s", t.data ? t.data : "");
                kl_buf_reset(&t);
                fmt_bytes(&t, c->smax, c->smax_n, c->type, &c->ci, 0);
                snprintf(mx, sizeof mx, "%s", t.data ? t.data : "");
                kl_buf_free(&t);
            } else {
                text_into(mn, sizeof mn, c->smin, c->smin_n);
                text_into(mx, sizeof mx, c->smax, c->smax_n);
            }
        }
        double dist = c->has ? kl_hll_estimate(&c->hll) : 0;
        if (json) {
            kl_buf_puts(&b, j ? ", {\"name\": " : "{\"name\": ");
            kl_buf_json_str(&b, c->name);
            kl_buf_printf(&b, ", \"type\": \"%s\", \"rows\": %lld, \"nulls\": %lld, \"min\": ", stat_type(c),
                          (long long)c->rows, (long long)c->nulls);
            /* strings whole (a NUL as \u0000), not cut to the table width; binary as base64 */
            int str = minmax && !is_numeric(c->type);
            if (str) fmt_bytes(&b, c->smin, c->smin_n, c->type, &c->ci, 1);
            else if (minmax) kl_buf_json_str(&b, mn);
            else kl_buf_puts(&b, "null");
            kl_buf_puts(&b, ", \"max\": ");
            if (str) fmt_bytes(&b, c->smax, c->smax_n, c->type, &c->ci, 1);
            else if (minmax) kl_buf_json_str(&b, mx);
            else kl_buf_puts(&b, "null");
            kl_buf_printf(&b, ", \"distinct_approx\": %.0f}", dist);
        } else {
            kl_buf_printf(&b, "%-20s %-10s %10lld %10lld %26s %26s %10.0f\n", c->name, stat_type(c),
                          (long long)c->rows, (long long)c->nulls, mn, mx, dist);
        }
    }
    if (json) kl_buf_puts(&b, "]}\n");
    fputs(b.data ? b.data : "", stdout);
    kl_buf_free(&b);
    stats_free(&s);
    return APP_EXIT_OK;
}

/* ==================================================================
 * groupby: SELECT key, count(*), count/sum/min/max(value) GROUP BY key
 * ================================================================== */

static const app_opt groupby_opts[] = {
    {"by", 0, 1, "COL", "group key column (string, bool, integer, date, timestamp); omit for one group", 0},
    {"sum", 0, 1, "COL", "numeric column to aggregate (count, sum, mean, min, max)", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec groupby_spec = {"data groupby", "keel data groupby PATH [--by COL] [--sum COL] [--json]",
                                          "Grouped aggregation by a parallel vector scan (dictionary-coded keys are "
                                          "aggregated on their codes); sums are identical at any thread count.",
                                          NULL, groupby_opts, KL_ARRAY_LEN(groupby_opts), 1, 1};

static void put_jnum(kl_buf *b, double v) {
    if (isfinite(v)) kl_buf_printf(b, "%.17g", v);
    else kl_buf_puts(b, "null");
}

static void groupby_key(const kl_pq_group *g, kl_col_type t, int uns, int uuid, char *buf, size_t n) {
    if (g->key.is_null) snprintf(buf, n, "NULL");
    else if (t == KL_COL_BINARY) {
        kl_pq_column_info ci = {0};
        ci.logical = uuid ? "UUID" : "";
        kl_buf b;
        kl_buf_init(&b);
        fmt_bytes(&b, g->key.s, g->key.n, t, &ci, 0);
        snprintf(buf, n, "%s", b.data ? b.data : "");
        kl_buf_free(&b);
    }
    else if (t == KL_COL_STRING) snprintf(buf, n, "%.*s", (int)KL_MIN(g->key.n, n - 1), g->key.s);
    else if (uns) snprintf(buf, n, "%llu", (unsigned long long)(uint64_t)g->key.i);
    else if (t == KL_COL_BOOL) snprintf(buf, n, "%s", g->key.i ? "true" : "false");
    else if (t == KL_COL_DATE || t == KL_COL_TIMESTAMP) fmt_int(t, g->key.i, buf, n);
    else snprintf(buf, n, "%lld", (long long)g->key.i);
}

static int groupby(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&groupby_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    dset d;
    if (dset_open(a.pos[0], &d, &e)) return app_fail(&e);
    const char *by = app_get(&a, "by"), *sum = app_get(&a, "sum");
    kl_pq_groups g = {0};
    kl_col_type kt = KL_COL_STRING;
    int kuns = 0, kuuid = 0;
    for (size_t fi = 0; fi < d.nfiles && rc < 0; fi++) {
        kl_pq_reader *r;
        if (kl_pq_open(d.files[fi], &r, &e)) { rc = app_fail(&e); break; }
        if (by && kl_pq_find_column(r, by) >= 0) {
            const kl_pq_column_info *ci = kl_pq_column(r, (size_t)kl_pq_find_column(r, by));
            kt = ci->type;
            kuns = ci->is_unsigned;
            kuuid = ci->logical && !strcmp(ci->logical, "UUID");
        }
        if (kl_pq_group_by(r, by, sum, &g, &e)) {
            if (!strstr(kl_err_what(&e), d.files[fi])) kl_err_prefix(&e, "%s", d.files[fi]);
            rc = app_fail(&e);
        }
        kl_pq_close(r);
    }
    dset_free(&d);
    if (rc >= 0) { kl_pq_groups_clear(&g); return rc; }
    int json = app_flag(&a, "json");
    kl_buf b;
    kl_buf_init(&b);
    if (json) kl_buf_printf(&b, "{\"rows\": %llu, \"groups\": [", (unsigned long long)g.rows);
    else if (sum) kl_buf_printf(&b, "%-24s %12s %12s %18s %14s %14s %14s\n", by ? by : "", "rows", "count", "sum", "mean", "min", "max");
    else kl_buf_printf(&b, "%-24s %12s\n", by ? by : "", "rows");
    for (size_t i = 0; i < g.n; i++) {
        const kl_pq_group *x = &g.g[i];
        char k[256];
        groupby_key(x, kt, kuns, kuuid, k, sizeof k);
        double mean = x->count ? x->sum / (double)x->count : NAN;
        if (json) {
            kl_buf_puts(&b, i ? ", {\"key\": " : "{\"key\": ");
            if (!by || x->key.is_null) kl_buf_puts(&b, "null");
            else if (kt == KL_COL_BOOL || kt == KL_COL_INT32 || kt == KL_COL_INT64) kl_buf_puts(&b, k);
            else kl_buf_json_str(&b, k);
            kl_buf_printf(&b, ", \"rows\": %llu", (unsigned long long)x->rows);
            if (sum) {
                kl_buf_printf(&b, ", \"count\": %llu, \"sum\": ", (unsigned long long)x->count);
                put_jnum(&b, x->sum);
                kl_buf_puts(&b, ", \"mean\": ");
                put_jnum(&b, mean);
                kl_buf_puts(&b, ", \"min\": ");
                put_jnum(&b, x->min);
                kl_buf_puts(&b, ", \"max\": ");
                put_jnum(&b, x->max);
            }
            kl_buf_puts(&b, "}");
        } else if (sum) {
            kl_buf_printf(&b, "%-24s %12llu %12llu %18.6f %14.6g %14.6g %14.6g\n", by ? k : "(all)", (unsigned long long)x->rows,
                          (unsigned long long)x->count, x->sum, mean, x->min, x->max);
        } else kl_buf_printf(&b, "%-24s %12llu\n", by ? k : "(all)", (unsigned long long)x->rows);
    }
    if (json) kl_buf_puts(&b, "]}\n");
    fputs(b.data ? b.data : "", stdout);
    kl_buf_free(&b);
    kl_pq_groups_clear(&g);
    return APP_EXIT_OK;
}

/* ==================================================================
 * validate
 * ================================================================== */

static const app_opt validate_opts[] = {{"json", 0, 0, NULL, "machine-readable output", 0}};
static const app_cmd_spec validate_spec = {
    "data validate", "keel data validate PATH [--json]",
    "Check a dataset: every file's sha256, rows and readability against manifest.json.",
    "For a dataset version: each file listed in the manifest exists with the recorded sha256,\n"
    "row count and size, no unlisted Parquet files are present, the total matches the accepted\n"
    "rows, and every page decodes. For a single .parquet file: every page decodes.",
    validate_opts, KL_ARRAY_LEN(validate_opts), 1, 1};

static int count_batch(void *ctx, kl_pq_reader *r, kl_column **cols, size_t nc, size_t n, kl_err *e) {
    *(uint64_t *)ctx += n;
    return KL_OK;
}

static int validate(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&validate_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    dset d;
    if (dset_open(a.pos[0], &d, &e)) return app_fail(&e);
    kl_buf prob;
    kl_buf_init(&prob);
    int nprob = 0;
    uint64_t rows = 0;
    if (d.manifest && kl_dataset_audit(a.pos[0], &prob, &nprob, NULL, &e)) {
        kl_buf_printf(&prob, "%s\n", kl_err_what(&e));
        nprob++;
    }
    if (scan(&d, SIZE_MAX, NULL, count_batch, &rows, &e)) { kl_buf_printf(&prob, "%s\n", kl_err_what(&e)); nprob++; }
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_printf(&b, "{\"ok\": %s, \"files\": %zu, \"rows\": %llu, \"problems\": ", nprob ? "false" : "true", d.nfiles,
                      (unsigned long long)rows);
        kl_buf_json_str(&b, prob.data ? prob.data : "");
        kl_buf_puts(&b, "}\n");
        fputs(b.data, stdout);
        kl_buf_free(&b);
    } else if (nprob) {
        fprintf(stderr, "%s", prob.data);
        fprintf(stderr, "keel: error: %s: %d problem%s\n", a.pos[0], nprob, nprob == 1 ? "" : "s");
    } else {
        printf("ok: %zu files, %llu rows%s\n", d.nfiles, (unsigned long long)rows, d.manifest ? ", hashes match the manifest" : "");
    }
    kl_buf_free(&prob);
    dset_free(&d);
    return nprob ? APP_EXIT_FAIL : APP_EXIT_OK;
}

/* ==================================================================
 * report
 * ================================================================== */

static const app_opt report_opts[] = {
    {"out", 'o', 1, "report.html", "output file (required)", 0},
    {"max-rows", 0, 1, "N", "rows to scan (default all)", 0},
};
static const app_cmd_spec report_spec = {
    "data report", "keel data report PATH --out report.html [--max-rows N]",
    "Write a self-contained HTML data-quality page: histograms, top values, null ratios, rejects.", NULL,
    report_opts, KL_ARRAY_LEN(report_opts), 1, 1};

/* The schema type of a column from the manifest ("category", ...), else the Parquet-level type. */
static const char *type_label(const dset *d, const cstat *c) {
    if (d->manifest) {
        cJSON *col;
        cJSON_ArrayForEach(col, cJSON_GetObjectItem(d->manifest, "columns")) {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(col, "name"));
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(col, "type"));
            if (n && t && !strcmp(n, c->name)) return t;
        }
    }
    return kl_col_type_name(c->type);
}

static int cmp_top(const void *a, const void *b) {
    const topv *x = a, *y = b;
    return x->n != y->n ? (x->n < y->n ? 1 : -1) : strcmp(x->s, y->s);
}

static void svg_hist(kl_buf *b, const cstat *c) {
    enum { BINS = 30, W = 420, H = 140 };
    int64_t cnt[BINS] = {0}, mx = 0;
    double lo = c->dmin, hi = c->dmax, w = (hi - lo) / BINS;
    for (size_t i = 0; i < c->nvals; i++) {
        int k = w > 0 ? (int)((c->vals[i] - lo) / w) : 0;
        if (k >= BINS) k = BINS - 1;
        if (k < 0) k = 0;
        cnt[k]++;
    }
    for (int k = 0; k < BINS; k++) if (cnt[k] > mx) mx = cnt[k];
    kl_buf_printf(b, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, H + 20, W, H + 20);
    for (int k = 0; k < BINS; k++) {
        double bh = mx ? (double)cnt[k] / (double)mx * H : 0;
        kl_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4c78a8\"><title>%lld</title></rect>",
                      k * (double)W / BINS + 0.5, H - bh, (double)W / BINS - 1, bh, (long long)cnt[k]);
    }
    char l[64], r[64];
    if (is_float(c->type)) { fmt_num(c->type, lo, l, sizeof l); fmt_num(c->type, hi, r, sizeof r); }
    else { fmt_int(c->type, c->imin, l, sizeof l); fmt_int(c->type, c->imax, r, sizeof r); }
    kl_buf_puts(b, "<text x=\"0\" y=\"155\" font-size=\"11\">");
    kl_buf_html(b, l);
    kl_buf_printf(b, "</text><text x=\"%d\" y=\"155\" font-size=\"11\" text-anchor=\"end\">", W);
    kl_buf_html(b, r);
    kl_buf_puts(b, "</text></svg>");
}

static int report(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&report_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *outp = app_get(&a, "out");
    if (!outp) return app_usage_error(&report_spec, "--out is required");
    int64_t maxr;
    if ((rc = app_get_int(&a, &report_spec, "max-rows", INT64_MAX, &maxr)) >= 0) return rc;
    kl_err e = {0};
    dset d;
    if (dset_open(a.pos[0], &d, &e)) return app_fail(&e);
    stats_ctx s = {0};
    s.keep_values = 1;
    if (scan(&d, (size_t)maxr, NULL, stats_batch, &s, &e)) { stats_free(&s); dset_free(&d); return app_fail(&e); }
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>keel data report</title><style>"
                    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
                    "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}"
                    ".col{display:inline-block;vertical-align:top;margin:0 2em 2em 0;padding:1em;border:1px solid #ddd;border-radius:6px}"
                    ".bar{background:#f58518;height:10px;display:inline-block}.warn{color:#b00}</style></head><body>");
    kl_buf_puts(&b, "<h1>Data report: ");
    kl_buf_html(&b, a.pos[0]);
    kl_buf_puts(&b, "</h1>");
    if (d.manifest) {
        cJSON *m = d.manifest, *rows = cJSON_GetObjectItem(m, "rows");
        kl_buf_printf(&b, "<p>version <code>%s</code> &middot; %.0f rows accepted &middot; %.0f rejected</p>",
                      cJSON_GetStringValue(cJSON_GetObjectItem(m, "version_id")),
                      cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "accepted")),
                      cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "rejected")));
    }
    kl_buf_puts(&b, "<h2>Null ratios</h2><table><tr><th>column</th><th>type</th><th>nulls</th><th>ratio</th><th></th></tr>");
    for (size_t j = 0; j < s.nc; j++) {
        cstat *c = &s.c[j];
        double r = c->rows ? (double)c->nulls / (double)c->rows : 0;
        kl_buf_puts(&b, "<tr><td>");
        kl_buf_html(&b, c->name);
        kl_buf_printf(&b, "</td><td>%s</td><td>%lld</td><td>%.2f%%</td><td><span class=\"bar\" style=\"width:%.0fpx\"></span></td></tr>",
                      type_label(&d, c), (long long)c->nulls, r * 100, r * 200);
    }
    kl_buf_puts(&b, "</table><h2>Columns</h2>");
    for (size_t j = 0; j < s.nc; j++) {
        cstat *c = &s.c[j];
        kl_buf_puts(&b, "<div class=\"col\"><h3>");
        kl_buf_html(&b, c->name);
        kl_buf_printf(&b, " <small>%s</small></h3><p>%lld rows, %lld nulls, ~%.0f distinct</p>", type_label(&d, c),
                      (long long)c->rows, (long long)c->nulls, c->has ? kl_hll_estimate(&c->hll) : 0.0);
        if (is_numeric(c->type) && c->nvals) svg_hist(&b, c);
        else if (c->ntop) {
            qsort(c->top, c->ntop, sizeof *c->top, cmp_top);
            int64_t mx = c->top[0].n, nonnull = c->rows - c->nulls;
            kl_buf_puts(&b, "<table><tr><th>top values</th><th>count</th><th></th></tr>");
            for (size_t k = 0; k < c->ntop && k < 10; k++) {
                kl_buf_puts(&b, "<tr><td>");
                kl_buf tv;
                kl_buf_init(&tv);
                put_text(&tv, c->top[k].s, c->top[k].len);
                kl_buf_html(&b, tv.data ? tv.data : "");
                kl_buf_free(&tv);
                kl_buf_printf(&b, "</td><td>%lld (%.1f%%)</td><td><svg width=\"160\" height=\"12\"><rect width=\"%.1f\" height=\"12\" fill=\"#4c78a8\"/></svg></td></tr>",
                              (long long)c->top[k].n, nonnull ? 100.0 * (double)c->top[k].n / (double)nonnull : 0,
                              160.0 * (double)c->top[k].n / (double)mx);
            }
            kl_buf_puts(&b, "</table>");
        }
        kl_buf_puts(&b, "</div>");
    }
    kl_buf_puts(&b, "<h2>Rejects</h2>");
    cJSON *rej = d.manifest ? cJSON_GetObjectItem(d.manifest, "rejects") : NULL;
    if (!rej || !cJSON_GetArraySize(rej)) kl_buf_puts(&b, "<p>No rejected rows.</p>");
    else {
        kl_buf_puts(&b, "<table><tr><th>kind</th><th>rows</th></tr>");
        cJSON *k;
        cJSON_ArrayForEach(k, rej) kl_buf_printf(&b, "<tr><td class=\"warn\">%s</td><td>%.0f</td></tr>", k->string, k->valuedouble);
        kl_buf_puts(&b, "</table>");
        char p[4300];
        snprintf(p, sizeof p, "%s", d.manifest_path);
        *strrchr(p, '/') = 0;
        strcat(p, "/rejects.jsonl");
        char *txt = NULL;
        size_t tl;
        if (kl_read_file(p, &txt, &tl, NULL) == KL_OK) {
            kl_buf_puts(&b, "<h3>First rejected rows</h3><table><tr><th>where</th><th>error</th><th>raw</th></tr>");
            char *line = txt;
            for (int n = 0; n < 20 && line && *line; n++) {
                char *nl = strchr(line, '\n');
                if (nl) *nl = 0;
                void *ov = NULL;
                (void)kl_json_parse(line, strlen(line), p, &ov, NULL); /* a line that does not parse is skipped */
                cJSON *o = ov;
                if (o) {
                    char where[512];
                    snprintf(where, sizeof where, "%s:%.0f", cJSON_GetStringValue(cJSON_GetObjectItem(o, "source")),
                             cJSON_GetNumberValue(cJSON_GetObjectItem(o, "line")));
                    kl_buf_puts(&b, "<tr><td>");
                    kl_buf_html(&b, where);
                    kl_buf_puts(&b, "</td><td>");
                    kl_buf_html(&b, cJSON_GetStringValue(cJSON_GetObjectItem(o, "error")));
                    kl_buf_puts(&b, "</td><td><code>");
                    kl_buf_html(&b, cJSON_GetStringValue(cJSON_GetObjectItem(o, "raw")));
                    kl_buf_puts(&b, "</code></td></tr>");
                    cJSON_Delete(o);
                }
                line = nl ? nl + 1 : NULL;
            }
            kl_buf_puts(&b, "</table>");
            kl_mem_free(txt);
        }
    }
    kl_buf_puts(&b, "</body></html>\n");
    stats_free(&s);
    dset_free(&d);
    if (b.failed) { kl_buf_free(&b); kl_err_set(&e, KL_ENOMEM, "out of memory"); return app_fail(&e); }
    rc = kl_write_file_atomic(outp, b.data, b.len, &e);
    kl_buf_free(&b);
    if (rc) return app_fail(&e);
    printf("wrote %s\n", outp);
    return APP_EXIT_OK;
}

/* ==================================================================
 * gen-clicks
 * ================================================================== */

static const app_opt gen_opts[] = {
    {"rows", 'n', 1, "N", "rows (default 50000)", 0},
    {"seed", 0, 1, "S", "seed (default 42)", 0},
};
static const app_cmd_spec gen_spec = {"data gen-clicks", "keel data gen-clicks OUT.csv [--rows N] [--seed S]",
                                      "Write the deterministic synthetic click log (tests, benchmarks).", NULL, gen_opts,
                                      KL_ARRAY_LEN(gen_opts), 1, 1};

static int gen_clicks(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&gen_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t rows, seed;
    if ((rc = app_get_int(&a, &gen_spec, "rows", 50000, &rows)) >= 0) return rc;
    if ((rc = app_get_int(&a, &gen_spec, "seed", 42, &seed)) >= 0) return rc;
    kl_err e = {0};
    if (kl_clickgen_write_csv(a.pos[0], (uint64_t)rows, (uint64_t)seed, &e)) return app_fail(&e);
    return APP_EXIT_OK;
}

/* ==================================================================
 * join-log
 * ================================================================== */

static const app_opt join_opts[] = {
    {"model", 0, 1, "M", "the model whose log is joined (DIR/M/predictions, DIR/M/labels)", 0},
    {"out", 'o', 1, "DS", "the output dataset folder (new, or an earlier join-log output: replaced)", 0},
    {"features", 0, 1, "F", "features.json the model was trained with: names and types the label as its label", 0},
    {"label", 0, 1, "NAME", "the label column's name (default: the features' label, else label)", 0},
    {"label-type", 0, 1, "T", "int32, int64, float32, float64, bool or string (default: the features', else float64)",
     0},
    {"since", 0, 1, "T", "only predictions served at or after T (ISO 8601, e.g. 2026-01-31T00:00Z)", 0},
    {"all", 0, 0, NULL, "keep predictions without a label too (label null)", 0},
    {"json", 0, 0, NULL, "print the counts as JSON", 0},
};
static const app_cmd_spec join_spec = {
    "data join-log",
    "keel data join-log DIR --model M --out DS [--features F] [--label NAME] [--since T] [--all]",
    "Join a prediction log (keel serve --log-predictions DIR) with its feedback labels by request id.",
    "The result is a dataset (part-00000.parquet + manifest.json) with every logged column (request_id,\n"
    "served_at, model_version, the raw inputs, feature.<slot>, output ...) and the label: keel features\n"
    "apply F --data DS and keel train read it. A label joins record 0 of its request; a later label of\n"
    "an id replaces an earlier one.",
    join_opts,
    KL_ARRAY_LEN(join_opts),
    1,
    1};

/* the label's name and type: the options, else the features', else label / float64 */
static int join_label(const app_args *a, kl_join_log_opts *o, char **name, kl_err *e) {
    const char *fp = app_get(a, "features"), *lt = app_get(a, "label-type");
    o->label = app_get(a, "label");
    o->label_type = KL_COL_FLOAT64;
    if (fp) {
        kl_features *f = NULL;
        int rc = kl_features_load(fp, &f, e);
        if (rc) return rc;
        if (kl_features_label(f)) {
            if (!o->label && !(*name = strdup(kl_features_label(f)))) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            o->label_type = kl_features_label_type(f);
        }
        kl_features_free(f);
        if (rc) return rc;
        if (!o->label) o->label = *name;
    }
    if (lt &&
        (kl_col_type_parse(lt, &o->label_type) || o->label_type == KL_COL_DATE || o->label_type == KL_COL_TIMESTAMP ||
         o->label_type == KL_COL_BINARY))
        return kl_err_set(e, KL_EINVAL,
                          "--label-type: expected int32, int64, float32, float64, bool or string, got '%s'", lt);
    return KL_OK;
}

static int join_log(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&join_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_join_log_opts o = {0};
    o.log_dir = a.pos[0];
    o.model = app_get(&a, "model");
    o.out = app_get(&a, "out");
    o.keep_unlabelled = app_flag(&a, "all");
    if (!o.model) return app_usage_error(&join_spec, "--model is required");
    if (!o.out) return app_usage_error(&join_spec, "--out is required");
    const char *since = app_get(&a, "since");
    if (since && kl_parse_timestamp(since, strlen(since), NULL, &o.since_us))
        return app_usage_error(&join_spec, "--since: expected an ISO 8601 time, got '%s'", since);
    kl_err e = {0};
    char *lname = NULL;
    kl_join_log_result res;
    rc = join_label(&a, &o, &lname, &e);
    if (!rc) rc = kl_join_log(&o, &res, &e);
    free(lname);
    if (rc) return app_fail(&e);
    if (app_flag(&a, "json"))
        printf("{\"predictions\":%llu,\"labels\":%llu,\"joined\":%llu,\"unlabelled\":%llu,\"unmatched_labels\":%llu,"
               "\"replaced_labels\":%llu}\n",
               (unsigned long long)res.predictions, (unsigned long long)res.labels, (unsigned long long)res.joined,
               (unsigned long long)res.unlabelled, (unsigned long long)res.unmatched_labels,
               (unsigned long long)res.replaced_labels);
    else
        printf("%s: %llu prediction(s), %llu label(s): %llu joined, %llu without a label, %llu label(s) without a "
               "prediction, %llu replaced by a later one\n",
               o.out, (unsigned long long)res.predictions, (unsigned long long)res.labels,
               (unsigned long long)res.joined, (unsigned long long)res.unlabelled,
               (unsigned long long)res.unmatched_labels, (unsigned long long)res.replaced_labels);
    return APP_EXIT_OK;
}

int cmd_data(int argc, char **argv) {
    static const app_command sub[] = {
        {"head", "print the first rows", head},
        {"show", "describe a dataset version or Parquet file", show},
        {"stats", "per-column statistics by a full scan", stats},
        {"groupby", "count, sum, mean, min, max of a column by a key", groupby},
        {"validate", "check hashes, row counts and readability against the manifest", validate},
        {"report", "self-contained HTML data-quality report", report},
        {"gen-clicks", "write the deterministic synthetic click log", gen_clicks},
        {"join-log", "join a prediction log with its feedback labels into a dataset", join_log},
    };
    return app_dispatch("data", sub, KL_ARRAY_LEN(sub), argc, argv);
}
