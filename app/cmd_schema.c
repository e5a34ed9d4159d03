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
};
static const app_cmd_spec infer_spec = {
    "schema infer", "keel schema infer FILE [--out schema.yaml] [--rows N]",
    "Sniff dialect (delimiter, quote, header, line ending, BOM) and column types from a sample.",
    "Writes YAML with one entry per column: type (bool, int32/int64, float64, date, timestamp,\n"
    "category when few distinct values, string), nullable when nulls were seen, and the observed\n"
    "ranges as comments. Review it (constraints, timezone) before ingesting.",
    infer_opts, KL_ARRAY_LEN(infer_opts), 1, 1};

/* Reads up to max bytes (decompressing .gz), cut at the last newline. */
static int read_sample(const char *path, size_t max, char **out, size_t *len, kl_err *e) {
    gzFile g = gzopen(path, "rb"); /* also reads plain files */
    if (!g) return kl_err_set(e, KL_ENOTFOUND, "%s: cannot open", path);
    char *buf = malloc(max + 1);
    if (!buf) { gzclose(g); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    int n = gzread(g, buf, (unsigned)max);
    int full = n == (int)max;
    gzclose(g);
    if (n < 0) { free(buf); return kl_err_set(e, KL_EPARSE, "%s: read error", path); }
    size_t l = (size_t)n;
    if (full) {
        while (l > 0 && buf[l - 1] != '\n') l--;
        if (l == 0) l = (size_t)n;
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
    if (read_sample(a.pos[0], (size_t)16 << 20, &buf, &len, &e)) return app_fail(&e);
    kl_schema *s = NULL;
    rc = kl_schema_infer(buf, len, a.pos[0], (size_t)rows, &s, &e);
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
