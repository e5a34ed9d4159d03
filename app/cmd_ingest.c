/* keel ingest SOURCE... --schema SCHEMA.yaml --out DATASET_DIR: validated
 * ingestion of CSV/TSV/JSONL files, folders, globs or URLs into a
 * partitioned Parquet dataset version, published atomically. */
#include "app.h"

#include <keel/data.h>
#include <stdlib.h>
#include <string.h>

#ifndef KEEL_VERSION
#define KEEL_VERSION "unknown"
#endif

static const app_opt opts[] = {
    {"schema", 's', 1, "SCHEMA.yaml", "column types, constraints and dialect (required)", 0},
    {"out", 'o', 1, "DATASET_DIR", "dataset folder (versions/<id>/, current) (required)", 0},
    {"max-reject-ratio", 0, 1, "R", "largest share of rejected rows that still succeeds (default 0)", 0},
    {"sha256", 0, 1, "HEX", "expected sha256 of the (single) source file", 0},
    {"partition-by", 0, 1, "COL", "hive partitioning by a date, timestamp (by day) or category column", 0},
    {"codec", 0, 1, "CODEC", "zstd (default), snappy, gzip, none", 0},
    {"zstd-level", 0, 1, "N", "zstd level (default 3)", 0},
    {"row-group-rows", 0, 1, "N", "Parquet row group size in rows (default: the writer's, 131072)", 0},
    {"rejects", 0, 1, "PATH", "also write the rejects of a failed ingest here (JSON lines)", 0},
    {"chunk-size", 0, 1, "SIZE", "parse chunk size (default 4M; part of the ingest identity)", 0},
    {"max-decompressed", 0, 1, "SIZE", "refuse a .gz/.zst source that decompresses to more (default 32G)", 0},
    {"max-expansion", 0, 1, "R",
     "refuse a .gz/.zst source that decompresses to more than R times its size (default 1000)", 0},
    {"on-error", 0, 1, "MODE",
     "a malformed CSV row: reject (default), recover (pad / _extra / literal quote, noted) or fail", 0},
    {"progress", 0, 0, NULL, "show parsing progress (stderr)", 0},
    {"json", 0, 0, NULL, "machine-readable result", 0},
};
static const app_cmd_spec spec = {
    "ingest",
    "keel ingest SOURCE... --schema SCHEMA.yaml --out DATASET_DIR [--max-reject-ratio R] [--sha256 HEX]\n"
    "       [--partition-by COL] [--codec zstd|snappy|gzip|none] [--rejects PATH]\n"
    "       [--on-error reject|recover|fail] [--json]",
    "Validate CSV/TSV/JSONL sources against a schema and publish them as a Parquet dataset version.",
    "SOURCE: a file (optionally .gz/.zst), a folder, a glob, or an http(s) URL (downloaded with\n"
    "resume). Every value is parsed against its column's type and constraints; rejected rows go\n"
    "to rejects.jsonl. If the share of rejected rows exceeds --max-reject-ratio, or a column's\n"
    "null ratio exceeds its max_null_ratio, nothing is published and a summary of the first\n"
    "errors by kind is printed. --on-error recover loads a ragged row (padded with nulls, extra\n"
    "fields in an _extra column) and a stray quote (read literally), each repair a warning row\n"
    "in rejects.jsonl; --on-error fail fails on the first rejected row. Re-running the same\n"
    "ingest reports the existing version; an interrupted ingest resumes, reusing the Parquet\n"
    "files it had finished.",
    opts, KL_ARRAY_LEN(opts), 1, -1};

int cmd_ingest(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_ingest_opts o;
    kl_ingest_opts_default(&o);
    o.sources = (const char *const *)a.pos;
    o.n_sources = (size_t)a.npos;
    o.schema_path = app_get(&a, "schema");
    o.out_dir = app_get(&a, "out");
    if (!o.schema_path) return app_usage_error(&spec, "--schema is required");
    if (!o.out_dir) return app_usage_error(&spec, "--out is required");
    if ((rc = app_get_double(&a, &spec, "max-reject-ratio", 0, &o.max_reject_ratio)) >= 0) return rc;
    if (o.max_reject_ratio < 0 || o.max_reject_ratio > 1) return app_usage_error(&spec, "--max-reject-ratio must be in [0, 1]");
    o.sha256 = app_get(&a, "sha256");
    if (o.sha256 && (strlen(o.sha256) != 64 || strspn(o.sha256, "0123456789abcdefABCDEF") != 64))
        return app_usage_error(&spec, "--sha256 expects 64 hex digits");
    o.partition_by = app_get(&a, "partition-by");
    if (app_get(&a, "codec")) o.codec = app_get(&a, "codec");
    int64_t lvl;
    if ((rc = app_get_int(&a, &spec, "zstd-level", 0, &lvl)) >= 0) return rc;
    o.zstd_level = (int)lvl;
    o.rejects_path = app_get(&a, "rejects");
    int64_t rg;
    if ((rc = app_get_int(&a, &spec, "row-group-rows", 0, &rg)) >= 0) return rc;
    if (rg < 0) return app_usage_error(&spec, "--row-group-rows must be positive");
    o.row_group_rows = (size_t)rg;
    kl_err e = {0};
    if (app_get(&a, "chunk-size")) {
        uint64_t cs;
        if (kl_mem_parse_size(app_get(&a, "chunk-size"), &cs, &e) || cs < 4096)
            return app_usage_error(&spec, "--chunk-size: expected a size of at least 4K");
        o.chunk_bytes = (size_t)cs;
    }
    if (app_get(&a, "max-decompressed")) {
        uint64_t md;
        if (kl_mem_parse_size(app_get(&a, "max-decompressed"), &md, &e) || md == 0)
            return app_usage_error(&spec, "--max-decompressed: expected a size (e.g. 64G)");
        o.max_decompressed_bytes = md;
    }
    if ((rc = app_get_double(&a, &spec, "max-expansion", KL_INGEST_MAX_EXPANSION, &o.max_expansion)) >= 0) return rc;
    if (!(o.max_expansion >= 1)) return app_usage_error(&spec, "--max-expansion must be at least 1");
    o.keel_version = KEEL_VERSION;
    o.progress = app_flag(&a, "progress");
    if (app_get(&a, "on-error") && kl_on_error_parse(app_get(&a, "on-error"), &o.on_error))
        return app_usage_error(&spec, "--on-error: expected reject, recover or fail");
    int json = app_flag(&a, "json");
    kl_ingest_result res;
    rc = kl_ingest(&o, &res, &e);
    if (json) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_printf(&b, "{\"ok\": %s, \"version_id\": ", rc ? "false" : "true");
        if (rc) kl_buf_puts(&b, "null"); else kl_buf_json_str(&b, res.version_id);
        kl_buf_printf(&b,
                      ", \"reused\": %s, \"rows_read\": %lld, \"rows_accepted\": %lld, \"rows_rejected\": %lld, "
                      "\"rows_repaired\": %lld, "
                      "\"files\": %lld, \"bytes\": %lld, \"partitions_reused\": %lld, \"seconds\": %.3f, \"path\": ",
                      res.reused ? "true" : "false", (long long)res.rows_read, (long long)res.rows_accepted,
                      (long long)res.rows_rejected, (long long)res.rows_repaired, (long long)res.files_written,
                      (long long)res.bytes_written, (long long)res.partitions_reused, res.seconds);
        if (rc) kl_buf_puts(&b, "null"); else kl_buf_json_str(&b, res.version_dir);
        kl_buf_puts(&b, ", \"error\": ");
        if (rc) kl_buf_json_str(&b, kl_err_what(&e)); else kl_buf_puts(&b, "null");
        kl_buf_puts(&b, ", \"summary\": ");
        kl_buf_json_str(&b, res.summary);
        kl_buf_puts(&b, "}\n");
        fputs(b.data ? b.data : "", stdout);
        kl_buf_free(&b);
        if (rc) fprintf(stderr, "keel: error: %s\n", kl_err_what(&e));
        return rc ? APP_EXIT_FAIL : APP_EXIT_OK;
    }
    if (rc) {
        if (res.summary[0]) fprintf(stderr, "%s", res.summary);
        return app_fail(&e);
    }
    if (res.reused)
        printf("already published: version %s (%lld rows); nothing to do\n", res.version_id, (long long)res.rows_accepted);
    else {
        char bb[32], tb[32];
        printf("published version %s\n  %lld rows accepted, %lld rejected, %lld files, %s, %s%s\n", res.version_id,
               (long long)res.rows_accepted, (long long)res.rows_rejected, (long long)res.files_written,
               kl_fmt_bytes((uint64_t)res.bytes_written, bb, sizeof bb), kl_fmt_duration(res.seconds, tb, sizeof tb),
               res.partitions_reused ? " (resumed)" : "");
        if (res.rows_repaired)
            printf("  %lld repairs (--on-error recover), listed as warnings in the rejects file\n",
                   (long long)res.rows_repaired);
        if (res.rows_rejected || res.rows_repaired) printf("  rejects: %s/rejects.jsonl\n", res.version_dir);
    }
    printf("%s\n", res.version_dir);
    return APP_EXIT_OK;
}
