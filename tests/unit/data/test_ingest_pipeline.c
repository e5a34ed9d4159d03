/* Unit tests of kl_ingest as a library call (so the sanitizer runs of the
 * unit tests cover the threaded pipeline): streaming and partitioned paths,
 * idempotent re-run, determinism across chunkings' thread use, rejects. */
#include "../harness.h"
#include "../kt_ingest.h"

#include <cjson/cJSON.h>
#include <keel/clickgen.h>
#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *SCHEMA =
    "name: clicks\n"
    "columns:\n"
    "  - {name: user_id, type: int64, nullable: false, min: 1}\n"
    "  - {name: item_price, type: float64, min: 0}\n"
    "  - {name: ts, type: timestamp, timezone: UTC}\n"
    "  - {name: category, type: category}\n"
    "  - {name: clicked, type: bool}\n";

static int setup(char *csv, char *schema, size_t n, kl_err *e) {
    snprintf(csv, n, "%s", kt_path("clicks.csv"));
    int rc = kl_clickgen_write_csv(csv, 20000, 5, e);
    if (rc) return rc;
    snprintf(schema, n, "%s", kt_path("clicks.yaml"));
    return kl_write_file_atomic(schema, SCHEMA, strlen(SCHEMA), e);
}

KL_TEST(ingest_pipeline_streaming_and_rerun) {
    char csv[512], schema[512], out[512];
    kl_err e = {0};
    KT_OK(setup(csv, schema, sizeof csv, &e), &e);
    snprintf(out, sizeof out, "%s", kt_path("ds"));
    const char *srcs[] = {csv};
    kl_ingest_opts o;
    kt_ingest_opts(&o, srcs, schema, out);
    o.chunk_bytes = 64 << 10; /* many chunks and several part files */
    kl_ingest_result r;
    KT_OK(kl_ingest(&o, &r, &e), &e);
    KT_EQ_INT(r.rows_accepted, 20000);
    KT_EQ_INT(r.rows_rejected, 0);
    KT_CHECK(r.files_written > 1);
    KT_EQ_INT(r.reused, 0);
    char id[65];
    memcpy(id, r.version_id, 65);
    KT_OK(kl_ingest(&o, &r, &e), &e);
    KT_EQ_INT(r.reused, 1);
    KT_EQ_STR(r.version_id, id);
    /* partitioned (all rows in memory, gathered per partition) */
    char out2[512];
    snprintf(out2, sizeof out2, "%s", kt_path("dsp"));
    o.out_dir = out2;
    o.partition_by = "category";
    KT_OK(kl_ingest(&o, &r, &e), &e);
    KT_EQ_INT(r.rows_accepted, 20000);
    KT_EQ_INT(r.files_written, 6);
    char **files = NULL, *manifest = NULL;
    size_t nf = 0;
    KT_OK(kl_dataset_resolve(out2, &files, &nf, &manifest, &e), &e);
    KT_EQ_INT(nf, 6);
    KT_CHECK(manifest != NULL);
    KT_CONTAINS(files[0], "category=");
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    free(manifest);
}

KL_TEST(ingest_pipeline_rejects_fail) {
    char csv[512], schema[512];
    kl_err e = {0};
    snprintf(csv, sizeof csv, "%s", kt_path("bad.csv"));
    const char *text = "user_id,item_price,ts,category,clicked\n"
                       "1,2.5,2023-11-01 00:00:00,books,0\n"
                       "2,N/A,2023-11-01 00:00:00,books,0\n"
                       "0,2.5,2023-11-01 00:00:00,books,0\n";
    KT_OK(kl_write_file_atomic(csv, text, strlen(text), &e), &e);
    snprintf(schema, sizeof schema, "%s", kt_path("s.yaml"));
    KT_OK(kl_write_file_atomic(schema, SCHEMA, strlen(SCHEMA), &e), &e);
    const char *srcs[] = {csv};
    kl_ingest_opts o;
    kl_ingest_opts_default(&o);
    o.sources = srcs;
    o.n_sources = 1;
    o.schema_path = schema;
    o.out_dir = kt_path("dbad");
    kl_ingest_result r;
    int rc = kl_ingest(&o, &r, &e);
    KT_EQ_INT(rc, KL_EPARSE);
    KT_EQ_INT(r.rows_rejected, 2);
    KT_CONTAINS(r.summary, "bad.csv:3: column item_price: 'N/A' is not a float64");
    KT_CONTAINS(r.summary, "bad.csv:4: column user_id: 0 is outside [1,");
    KT_CHECK(!kl_path_exists(kt_path("dbad")));
}

static int copy_file(const char *from, const char *to, kl_err *e) {
    char *b = NULL;
    size_t n = 0;
    int rc = kl_read_file(from, &b, &n, e);
    if (!rc) rc = kl_write_file_atomic(to, b, n, e);
    kl_mem_free(b);
    return rc;
}

/* Changes one byte in the middle of a file (its size stays). */
static int flip_middle_byte(const char *path, kl_err *e) {
    char *b = NULL;
    size_t n = 0;
    int rc = kl_read_file(path, &b, &n, e);
    if (rc) return rc;
    b[n / 2] ^= 1;
    rc = kl_write_file_atomic(path, b, n, e);
    kl_mem_free(b);
    return rc;
}

/* The click log ingested into kt_path(name) (out) in several part files. */
static int ingest_parts(const char *name, char *out, size_t n, kl_ingest_result *r, kl_err *e) {
    static char csv[512], schema[512];
    int rc = setup(csv, schema, sizeof csv, e);
    snprintf(out, n, "%s", kt_path(name));
    const char *srcs[] = {csv};
    kl_ingest_opts o;
    kt_ingest_opts(&o, srcs, schema, out);
    o.chunk_bytes = 64 << 10;
    return rc ? rc : kl_ingest(&o, r, e);
}

static int resolve(const char *dir, kl_verify_mode m, kl_err *e) {
    char **files = NULL, *manifest = NULL;
    size_t nf = 0;
    int rc = kl_dataset_resolve_verify(dir, m, &files, &nf, &manifest, e);
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    free(manifest);
    return rc;
}

/* Issue 22: a part file replaced by another valid one went unnoticed by
 * every reader. Opening a dataset checks its files against the manifest:
 * sha256 (default), size, or none. */
KL_TEST(dataset_resolve_verifies_files_against_manifest) {
    char out[512];
    kl_err e = {0};
    kl_ingest_result r;
    KT_OK(ingest_parts("dsv", out, sizeof out, &r, &e), &e);
    KT_CHECK(r.files_written > 1);
    KT_OK(resolve(out, KL_VERIFY_SHA256, &e), &e);
    char p0[1200], p1[1200], keep[1200], extra[1200];
    snprintf(p0, sizeof p0, "%s/part-00000.parquet", r.version_dir);
    snprintf(p1, sizeof p1, "%s/part-00001.parquet", r.version_dir);
    snprintf(keep, sizeof keep, "%s", kt_path("part0.keep"));
    KT_OK(copy_file(p0, keep, &e), &e);
    /* the same size, one byte changed: sha256 refuses, size and none accept */
    KT_OK(flip_middle_byte(p0, &e), &e);
    KT_EQ_INT(resolve(out, KL_VERIFY_SHA256, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "part-00000.parquet: sha256 ");
    KT_CONTAINS(e.msg, " bytes)");
    KT_CONTAINS(e.msg, "the manifest");
    KT_OK(resolve(out, KL_VERIFY_SIZE, &e), &e);
    KT_OK(resolve(out, KL_VERIFY_NONE, &e), &e);
    /* another valid part file in its place: the size tells already */
    KT_OK(copy_file(p1, p0, &e), &e);
    KT_EQ_INT(resolve(out, KL_VERIFY_SIZE, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "part-00000.parquet");
    KT_CONTAINS(e.msg, "bytes");
    KT_EQ_INT(resolve(out, KL_VERIFY_SHA256, &e), KL_ECHECKSUM);
    KT_OK(copy_file(keep, p0, &e), &e);
    KT_OK(resolve(out, KL_VERIFY_SHA256, &e), &e);
    /* a file added, a file missing */
    snprintf(extra, sizeof extra, "%s/part-99999.parquet", r.version_dir);
    KT_OK(copy_file(p1, extra, &e), &e);
    KT_EQ_INT(resolve(out, KL_VERIFY_SIZE, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "part-99999.parquet: not listed in");
    KT_OK(resolve(out, KL_VERIFY_NONE, &e), &e);
    KT_CHECK(unlink(extra) == 0);
    KT_CHECK(unlink(p1) == 0);
    KT_EQ_INT(resolve(out, KL_VERIFY_SIZE, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "part-00001.parquet: listed in");
    /* kl_verify_mode_parse */
    kl_verify_mode m;
    KT_OK(kl_verify_mode_parse("size", &m, &e), &e);
    KT_EQ_INT(m, KL_VERIFY_SIZE);
    KT_CHECK(kl_verify_mode_parse("md5", &m, &e) == KL_EINVAL);
    KT_EQ_STR(kl_verify_mode_name(KL_VERIFY_NONE), "none");
}

/* The one manifest shape (files: name -> {sha256, bytes, rows}); a dataset
 * published before it (files as a list of {path, sha256, rows, bytes}) still
 * verifies, audits and is reused, and tampering is named in both shapes. */
KL_TEST(dataset_manifest_old_shape_still_reads) {
    char out[512], mp[1200];
    kl_err e = {0};
    kl_ingest_result r;
    KT_OK(ingest_parts("dso", out, sizeof out, &r, &e), &e);
    int64_t nfiles = r.files_written;
    KT_CHECK(nfiles > 1);
    snprintf(mp, sizeof mp, "%s/manifest.json", r.version_dir);
    void *j = NULL;
    KT_OK(kl_json_load_file_opts(mp, KL_JSON_KEEP_NUL, &j, &e), &e);
    cJSON *fs = cJSON_GetObjectItem(j, "files"), *f;
    KT_CHECK(cJSON_IsObject(fs) &&
             cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(fs, "part-00000.parquet"), "rows")));
    /* rewrite it in the old shape */
    cJSON *arr = cJSON_CreateArray();
    cJSON_ArrayForEach(f, fs) {
        cJSON *x = cJSON_Duplicate(f, 1);
        cJSON_AddStringToObject(x, "path", f->string);
        cJSON_AddItemToArray(arr, x);
    }
    cJSON_ReplaceItemInObject(j, "files", arr);
    KT_OK(kl_json_write_file(mp, j, 1, &e), &e);
    cJSON_Delete(j);
    KT_OK(resolve(out, KL_VERIFY_SHA256, &e), &e);
    kl_buf pb;
    kl_buf_init(&pb);
    int np = -1;
    uint64_t rows = 0;
    KT_OK(kl_dataset_audit(out, &pb, &np, &rows, &e), &e);
    KT_CHECKF(np == 0, "problems: %s", pb.data);
    KT_EQ_INT(rows, 20000);
    /* the same ingest again: the old-shape version is reused, its files counted */
    KT_OK(ingest_parts("dso", out, sizeof out, &r, &e), &e);
    KT_EQ_INT(r.reused, 1);
    KT_EQ_INT(r.files_written, nfiles);
    /* tampering: named by the open and by the audit */
    char p1[1200];
    snprintf(p1, sizeof p1, "%s/part-00001.parquet", r.version_dir);
    KT_OK(flip_middle_byte(p1, &e), &e);
    KT_EQ_INT(resolve(out, KL_VERIFY_SHA256, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "part-00001.parquet: sha256 mismatch: the file has sha256 ");
    KT_CONTAINS(e.msg, "manifest.json says ");
    KT_OK(kl_dataset_audit(out, &pb, &np, &rows, &e), &e);
    KT_EQ_INT(np, 1);
    KT_CONTAINS(pb.data, "part-00001.parquet: sha256 mismatch");
    kl_buf_free(&pb);
}
