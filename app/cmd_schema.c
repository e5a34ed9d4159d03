/* keel schema infer FILE [--out schema.yaml]: sniff the dialect and column
 * types of a CSV/TSV/JSONL sample and write an ingest schema for review;
 * keel schema check SCHEMA.yaml: validate a schema file. */
#include "app.h"

#include <keel/data.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const app_opt infer_opts[] = {
    {"out", 'o', 1, "PATH", "write the schema here (default: stdout)", 0},
    {"rows", 0, 1, "N", "records to sample (default 20000)", 0},
    {"scan", 0, 1, "sample|full", "sample: the first --rows records of the first 16 MiB (default); full: the whole file", 0},
};
static const app_cmd_spec infer_spec = {
    "schema infer", "keel schema infer FILE [--out schema.yaml] [--rows N] [--scan sample|full]",
    "Sniff dialect (delimiter, quote, header, line ending, BOM) and column types from a sample.",
    "Writes YAML with one entry per column: type (bool, int32/int64, float64, date, timestamp,\n"
    "category when few distinct values, string) chosen by majority (up to 1% of the values may\n"
    "fail to parse: they are listed with their lines and will be rejects), nullable when nulls\n"
    "were seen (the usual null tokens NA, N/A, null, NULL, - of typed columns join the dialect's),\n"
    "and as comments the observed ranges, the offsets of timestamps and whether a sample or the\n"
    "whole file was read. Review it (constraints, timezone) before ingesting.",
    infer_opts, KL_ARRAY_LEN(infer_opts), 1, 1};

/* Reads up to max bytes (decompressing .gz) into a buffer that grows as
 * the data comes, cut at the last newline when more follows (*more). */
static int read_sample(const char *path, size_t max, char **out, size_t *len, int *more, kl_err *e) {
    gzFile g = gzopen(path, "rb"); /* also reads plain files */
    if (!g) return kl_err_set(e, KL_ENOTFOUND, "%s: cannot open", path);
    size_t cap = 1 << 20, l = 0;
    char *buf = malloc(cap + 1);
    int rc = KL_OK;
    *more = 0;
    while (buf) {
        if (l == max) { char c; *more = gzread(g, &c, 1) == 1; break; }
        if (l == cap) {
            cap = cap * 2 < max ? cap * 2 : max;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
        unsigned want = (unsigned)KL_MIN(cap - l, (size_t)1 << 30);
        int n = gzread(g, buf + l, want);
        if (n < 0) { rc = kl_err_set(e, KL_EPARSE, "%s: read error", path); break; }
        if (n == 0) break;
        l += (size_t)n;
    }
    gzclose(g);
    if (!buf) return kl_err_set(e, KL_ENOMEM, "%s: out of memory reading %zu bytes", path, l);
    if (rc) { free(buf); return rc; }
    if (*more) {
        size_t k = l;
        while (k > 0 && buf[k - 1] != '\n') k--;
        if (k) l = k;
    }
    buf[l] = 0;
    *out = buf;
    *len = l;
    return KL_OK;
}

static int infer(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&infer_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t rows;
    if ((rc = app_get_int(&a, &infer_spec, "rows", 20000, &rows)) >= 0) return rc;
    kl_err e = {0};
    char *buf = NULL;
    size_t len = 0;
    const char *scan = app_get(&a, "scan") ? app_get(&a, "scan") : "sample";
    int full = !strcmp(scan, "full");
    if (!full && strcmp(scan, "sample")) return app_usage_error(&infer_spec, "--scan takes sample or full, not '%s'", scan);
    if (full && app_get(&a, "rows")) return app_usage_error(&infer_spec, "--scan full reads every record: no --rows");
    int more = 0;
    if (read_sample(a.pos[0], full ? (size_t)64 << 30 : (size_t)16 << 20, &buf, &len, &more, &e)) return app_fail(&e);
    kl_schema *s = NULL;
    rc = kl_schema_infer(buf, len, a.pos[0], full ? SIZE_MAX : (size_t)rows, more, &s, &e);
    free(buf);
    if (rc) return app_fail(&e);
    kl_buf b;
    kl_buf_init(&b);
    kl_schema_to_yaml(s, &b);
    kl_schema_free(s);
    const char *outp = app_get(&a, "out");
    if (outp) {
        rc = kl_write_file_atomic(outp, b.data, b.len, &e);
        kl_buf_free(&b);
        if (rc) return app_fail(&e);
        fprintf(stderr, "wrote %s (review it before ingesting)\n", outp);
        return APP_EXIT_OK;
    }
    fputs(b.data, stdout);
    kl_buf_free(&b);
    return APP_EXIT_OK;
}

static const app_opt check_opts[] = {
    {"json", 0, 0, NULL, "print the canonical schema as JSON", 0},
};
static const app_cmd_spec check_spec = {"schema check", "keel schema check SCHEMA.yaml [--json]",
                                        "Validate an ingest schema (errors name file:line:col).", NULL, check_opts,
                                        KL_ARRAY_LEN(check_opts), 1, 1};

static int check(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&check_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_schema *s;
    if (kl_schema_load_file(a.pos[0], &s, &e)) return app_fail(&e);
    if (app_flag(&a, "json")) printf("%s\n", s->text);
    else printf("%s: ok (%zu columns)\n", a.pos[0], s->n_fields);
    kl_schema_free(s);
    return APP_EXIT_OK;
}

int cmd_schema(int argc, char **argv) {
    static const app_command sub[] = {
        {"infer", "sniff dialect and types of a file and write a schema for review", infer},
        {"check", "validate a schema file", check},
    };
    return app_dispatch("schema", sub, KL_ARRAY_LEN(sub), argc, argv);
}
