/* Unit tests: a JSONL string with \u0000 keeps its whole value through
 * ingest (Parquet string length, manifest vocabulary and min/max), and the
 * JSON reader (kl_json_parse_opts with KL_JSON_KEEP_NUL) gives the lengths. */
#include "../harness.h"
#include "../kt_ingest.h"

#include <cjson/cJSON.h>
#include <keel/column.h>
#include <keel/core.h>
#include <keel/data.h>
#include <keel/parquet.h>
#include <stdlib.h>

KL_TEST(json_keep_nul_lengths) {
    const char *t = "{\"a\": \"x\\u0000y\", \"b\": \"\\u0001\\u0000\\\\u0000\", \"c\": \"plain\"}";
    void *j = NULL;
    kl_err e = {0};
    KT_CHECK(kl_json_parse(t, strlen(t), "t.json", &j, &e) != 0); /* the default still refuses */
    KT_CONTAINS(kl_err_what(&e), "t.json:1:");
    KT_OK(kl_json_parse_opts(t, strlen(t), "t.json", KL_JSON_KEEP_NUL, &j, &e), &e);
    const cJSON *a = cJSON_GetObjectItem(j, "a"), *b = cJSON_GetObjectItem(j, "b"), *c = cJSON_GetObjectItem(j, "c");
    KT_CHECK(cJSON_IsString(a) && cJSON_IsString(b) && cJSON_IsString(c));
    KT_EQ_INT(kl_json_string_len(a), 3);
    KT_CHECK(!memcmp(a->valuestring, "x\0y", 3));
    KT_EQ_INT(kl_json_string_len(b), 8);
    KT_CHECK(!memcmp(b->valuestring, "\x01\0\\u0000", 8));
    KT_EQ_INT(kl_json_string_len(c), 5);
    cJSON_Delete(j);
    const char *k = "{\"a\\u0000\": 1}";
    KT_CHECK(kl_json_parse_opts(k, strlen(k), "k.json", KL_JSON_KEEP_NUL, &j, &e) != 0);
    KT_CONTAINS(kl_err_what(&e), "member name");
}

KL_TEST(ingest_jsonl_nul_kept_whole) {
    kl_err e = {0};
    const char *jl = "{\"id\": 1, \"s\": \"a\\u0000b\", \"c\": \"x\\u0000y\"}\n"
                     "{\"id\": 2, \"s\": \"z\", \"c\": \"x\"}\n";
    const char *schema = "columns:\n  - {name: id, type: int64}\n  - {name: s, type: string}\n  - {name: c, type: category}\n";
    char src[512], sp[512], out[512];
    snprintf(src, sizeof src, "%s", kt_path("nul.jsonl"));
    snprintf(sp, sizeof sp, "%s", kt_path("nul.yaml"));
    snprintf(out, sizeof out, "%s", kt_path("dnul"));
    KT_OK(kl_write_file_atomic(src, jl, strlen(jl), &e), &e);
    KT_OK(kl_write_file_atomic(sp, schema, strlen(schema), &e), &e);
    const char *srcs[] = {src};
    kl_ingest_opts o;
    kt_ingest_opts(&o, srcs, sp, out);
    kl_ingest_result r;
    KT_OK(kl_ingest(&o, &r, &e), &e);
    KT_EQ_INT(r.rows_accepted, 2);
    char **files = NULL, *manifest = NULL;
    size_t nf = 0;
    KT_OK(kl_dataset_resolve(out, &files, &nf, &manifest, &e), &e);
    KT_EQ_INT(nf, 1);
    kl_pq_reader *pr;
    KT_OK(kl_pq_open(files[0], &pr, &e), &e);
    KT_OK(kl_pq_select(pr, NULL, 0, &e), &e);
    kl_column *cols[3] = {0};
    size_t n = 0;
    KT_OK(kl_pq_read_batch(pr, 10, cols, &n, &e), &e);
    KT_EQ_INT(n, 2);
    size_t l;
    const char *v = kl_column_get_str(cols[1], 0, &l);
    KT_EQ_INT(l, 3);
    KT_CHECK(!memcmp(v, "a\0b", 3));
    v = kl_column_get_str(cols[2], 0, &l);
    KT_EQ_INT(l, 3);
    KT_CHECK(!memcmp(v, "x\0y", 3));
    for (int i = 0; i < 3; i++) kl_column_free(cols[i]);
    kl_pq_close(pr);
    char *m = NULL;
    size_t ml = 0;
    KT_OK(kl_read_file(manifest, &m, &ml, &e), &e);
    KT_CONTAINS(m, "\"x\\u0000y\"");        /* the vocabulary */
    KT_CONTAINS(m, "\"max\": \"z\"");
    KT_CONTAINS(m, "\"min\": \"a\\u0000b\""); /* min of s, whole */
    kl_mem_free(m);
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    free(manifest);
}
