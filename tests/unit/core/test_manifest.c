/* Unit tests of core/manifest.c: the one manifest shape round trip, every
 * older shape read by the compatibility reader, tampering named, bounds
 * and malformed JSON named with the manifest's path. */
#include "../harness.h"

#include <cjson/cJSON.h>
#include <keel/core.h>
#include <stdlib.h>

static void put(const char *name, const char *text) {
    kl_err e = {0};
    (void)kl_write_file_atomic(kt_path(name), text, strlen(text), &e);
}

static int read_text(const char *json, kl_manifest_files *m, kl_err *e) {
    void *j = NULL;
    int rc = kl_json_parse(json, strlen(json), "t.json", &j, e);
    if (!rc) rc = kl_manifest_files_read(j, "t.json", m, e);
    cJSON_Delete(j);
    return rc;
}

#define HEX_A "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" /* sha256("a") */

KL_TEST(manifest_round_trip) {
    kl_err e = {0};
    put("a.bin", "a");
    kl_manifest_files m = {0}, r = {0};
    KT_OK(kl_manifest_add(&m, kt_tmpdir(), "a.bin", &e), &e);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "part", "p=1");
    KT_OK(kl_manifest_push(&m, "sub/b.parquet", HEX_A, 1, 7, x, &e), &e);
    cJSON_Delete(x);
    KT_EQ_STR(m.v[0].sha256, HEX_A);
    KT_EQ_INT(m.v[0].bytes, 1);
    /* the text writer and the cJSON writer give the same document */
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\"files\": ");
    KT_OK(kl_manifest_json(&m, "", &b), &e);
    kl_buf_puts(&b, "}");
    KT_CONTAINS(b.data, "\"a.bin\": {\"sha256\": \"" HEX_A "\", \"bytes\": 1}");
    KT_OK(read_text(b.data, &r, &e), &e);
    KT_EQ_INT(r.n, 2);
    const kl_manifest_file *f = kl_manifest_find(&r, "sub/b.parquet");
    KT_CHECK(f && f->rows == 7 && f->bytes == 1 && !strcmp(f->sha256, HEX_A));
    KT_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(f->extra, "part")), "p=1");
    cJSON *doc = cJSON_CreateObject();
    KT_OK(kl_manifest_write(&r, doc, &e), &e);
    char *t = cJSON_PrintUnformatted(doc);
    kl_manifest_files r2 = {0};
    KT_OK(read_text(t, &r2, &e), &e);
    KT_EQ_INT(r2.n, 2);
    KT_CHECK(kl_manifest_find(&r2, "a.bin")->bytes == 1 && kl_manifest_find(&r2, "sub/b.parquet")->rows == 7);
    KT_CHECK(!kl_manifest_find(&r2, "c"));
    free(t);
    cJSON_Delete(doc);
    kl_buf_free(&b);
    KT_OK(kl_manifest_file_verify(kt_tmpdir(), kl_manifest_find(&r, "a.bin"), KL_VERIFY_SHA256, "t.json", NULL, &e),
          &e);
    kl_manifest_files_free(&m);
    kl_manifest_files_free(&r);
    kl_manifest_files_free(&r2);
}

/* Every shape keel wrote before reads to the same list; writing it back
 * gives the one shape. */
KL_TEST(manifest_old_shapes_read) {
    static const char *const shapes[] = {
        "{\"files\": {\"a.bin\": \"" HEX_A "\"}}",                                       /* train.c meta.json */
        "{\"files\": [{\"path\": \"a.bin\", \"sha256\": \"" HEX_A "\", \"bytes\": 1}]}", /* datasets */
        "{\"files\": [{\"name\": \"a.bin\", \"sha256\": \"" HEX_A "\"}]}",               /* serving versions */
        "{\"sha256\": {\"a.bin\": \"" HEX_A "\"}}",                                      /* serving versions */
        "{\"shards\": [{\"file\": \"a.bin\", \"records\": 3, \"bytes\": 1, \"sha256\": \"" HEX_A "\"}]}", /* pack.c */
        "{\"files\": {\"a.bin\": {\"sha256\": \"CA978112CA1BBDCAFAC231B39A23DC4DA786EFF8147C4E72B9807785AFEE48BB\"}}}",
    };
    kl_err e = {0};
    put("a.bin", "a");
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++) {
        kl_manifest_files m = {0};
        KT_OK(read_text(shapes[i], &m, &e), &e);
        KT_EQ_INT(m.n, 1);
        KT_EQ_STR(m.v[0].name, "a.bin");
        KT_EQ_STR(m.v[0].sha256, HEX_A);
        KT_OK(kl_manifest_file_verify(kt_tmpdir(), &m.v[0], KL_VERIFY_SHA256, "t.json", NULL, &e), &e);
        void *j = NULL;
        KT_OK(kl_json_parse(shapes[i], strlen(shapes[i]), "t.json", &j, &e), &e);
        KT_OK(kl_manifest_write(&m, j, &e), &e);
        cJSON *fs = cJSON_GetObjectItem(j, "files");
        KT_CHECKF(cJSON_IsObject(fs) && cJSON_IsObject(cJSON_GetObjectItem(fs, "a.bin")) &&
                      !cJSON_GetObjectItem(j, "sha256"),
                  "shape %zu not rewritten", i);
        KT_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(fs, "a.bin"), "sha256")), HEX_A);
        cJSON_Delete(j);
        kl_manifest_files_free(&m);
    }
}

KL_TEST(manifest_tamper_named) {
    kl_err e = {0};
    put("a.bin", "a");
    kl_manifest_files m = {0};
    KT_OK(kl_manifest_add(&m, kt_tmpdir(), "a.bin", &e), &e);
    put("a.bin", "b");
    int rc = kl_manifest_file_verify(kt_tmpdir(), &m.v[0], KL_VERIFY_SHA256, "x/manifest.json", "(hint)", &e);
    KT_EQ_INT(rc, KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "a.bin: sha256 mismatch: the file has sha256 ");
    KT_CONTAINS(e.msg, "(1 bytes), the manifest x/manifest.json says " HEX_A " (1 bytes) (hint)");
    KT_OK(kl_manifest_file_verify(kt_tmpdir(), &m.v[0], KL_VERIFY_SIZE, "x/manifest.json", NULL, &e), &e);
    put("a.bin", "bb");
    e = (kl_err){0};
    KT_EQ_INT(kl_manifest_file_verify(kt_tmpdir(), &m.v[0], KL_VERIFY_SIZE, "m", NULL, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "a.bin: size mismatch: the file has 2 bytes, the manifest m says 1");
    KT_OK(kl_manifest_file_verify(kt_tmpdir(), &m.v[0], KL_VERIFY_NONE, "m", NULL, &e), &e);
    remove(kt_path("a.bin"));
    KT_EQ_INT(kl_manifest_file_verify(kt_tmpdir(), &m.v[0], KL_VERIFY_SIZE, "m", NULL, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "a.bin: listed in m but missing");
    kl_manifest_files_free(&m);
}

/* Malformed lists are errors naming the manifest and the entry. */
KL_TEST(manifest_bad_input_named) {
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"files\": {\"../x\": {\"sha256\": \"" HEX_A "\"}}}",
         "t.json: files[\"../x\"]: manifest file '../x': not a relative"},
        {"{\"files\": {\"/etc/passwd\": \"" HEX_A "\"}}", "not a relative path"},
        {"{\"files\": {\"a/./b\": \"" HEX_A "\"}}", "not a relative path"},
        {"{\"files\": {\"a\": {\"sha256\": \"abc\"}}}",
         "t.json: files[\"a\"]: manifest file 'a': sha256 is not 64 hex"},
        {"{\"files\": {\"a\": {\"bytes\": 1}}}", "t.json: files[\"a\"]: no sha256"},
        {"{\"files\": {\"a\": {\"sha256\": \"" HEX_A "\", \"bytes\": -1}}}",
         "files[\"a\"]: bytes and rows must be whole"},
        {"{\"files\": {\"a\": {\"sha256\": \"" HEX_A "\", \"bytes\": 1.5}}}", "whole numbers"},
        {"{\"files\": {\"a\": 3}}", "files[\"a\"]: expected an object"},
        {"{\"files\": [{\"sha256\": \"" HEX_A "\"}]}", "t.json: files[0]: no file name"},
        {"{\"files\": [7]}", "t.json: files[0]: expected an object"},
        {"{\"files\": [{\"path\": \"a\", \"sha256\": \"" HEX_A "\"}, {\"path\": \"a\", \"sha256\": \"" HEX_A "\"}]}",
         "files[1]: manifest file 'a': listed twice"},
        {"{\"files\": {\"a\": {\"sha256\": \"" HEX_A "\", \"bytes\": 1, \"bytes\": 2}}}",
         "t.json: files[\"a\"]: a member is given twice"},
        {"{\"files\": {\"a\": {\"sha256\": \"" HEX_A "\", \"p\": {\"k\": 1, \"k\": 2}}}}", "a member is given twice"},
        {"{\"files\": {\"a\": {\"sha256\": \"" HEX_A "\", \"p\": [[[[[[[[[[1]]]]]]]]]]}}}", "nested too deep"},
        {"{\"files\": 3}", "t.json: \"files\" is neither a map nor a list"},
        {"{\"rows\": 3}", "t.json: no files list"},
        {"[1]", "t.json: not a JSON object"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i++) {
        kl_err e = {0};
        kl_manifest_files m = {0};
        KT_CHECKF(read_text(bad[i].json, &m, &e) == KL_EPARSE || i == KL_ARRAY_LEN(bad) - 2, "case %zu: not EPARSE", i);
        KT_CONTAINS(e.msg, bad[i].msg);
        KT_CHECK(m.n == 0 && !m.v);
    }
    /* a file: malformed JSON names the path and the place */
    kl_err e = {0};
    kl_manifest_files m = {0};
    put("bad.json", "{\"files\": {\"a\": ");
    KT_EQ_INT(kl_manifest_files_load(kt_path("bad.json"), &m, NULL, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "bad.json:1:");
    /* a \u0000 (kept by the loader for column statistics) in a name or a member: refused, not cut short */
    put("nul.json", "{\"files\": [{\"path\": \"a\\u0000/../x\", \"sha256\": \"" HEX_A "\"}]}");
    KT_EQ_INT(kl_manifest_files_load(kt_path("nul.json"), &m, NULL, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "nul.json: files[0]: a string holds \\u0000");
    put("nul.json", "{\"files\": {\"a\": {\"sha256\": \"" HEX_A "\", \"partition\": {\"k\": \"v\\u0000w\"}}}}");
    KT_EQ_INT(kl_manifest_files_load(kt_path("nul.json"), &m, NULL, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "files[\"a\"]: a string holds");
    void *doc = NULL;
    put("ok.json", "{\"format\": \"x\", \"files\": {\"a\": \"" HEX_A "\"}}");
    KT_OK(kl_manifest_files_load(kt_path("ok.json"), &m, &doc, &e), &e);
    KT_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "format")), "x");
    cJSON_Delete(doc);
    kl_manifest_files_free(&m);
}

/* More than KL_MANIFEST_MAX_FILES entries are refused, not grown without bound. */
KL_TEST(manifest_bounded) {
    kl_err e = {0};
    kl_manifest_files m = {0};
    char name[32];
    int rc = KL_OK;
    for (unsigned i = 0; i <= KL_MANIFEST_MAX_FILES && !rc; i++) {
        snprintf(name, sizeof name, "f%u", i);
        rc = kl_manifest_push(&m, name, HEX_A, 1, -1, NULL, &e);
    }
    KT_EQ_INT(rc, KL_EINVAL);
    KT_EQ_INT(m.n, KL_MANIFEST_MAX_FILES);
    KT_CONTAINS(e.msg, "more than");
    kl_manifest_files_free(&m);
    char longname[KL_MANIFEST_NAME_MAX + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    KT_EQ_INT(kl_manifest_push(&m, longname, HEX_A, 1, -1, NULL, &e), KL_EINVAL);
}
