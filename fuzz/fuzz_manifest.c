/* libFuzzer target of the manifest reader (core/manifest.c): the input is a
 * manifest document (JSON text) in any shape. An accepted file list must
 * write back (kl_manifest_json and kl_manifest_write) to a document that
 * reads to the same list, and every listed name must be found. Any crash,
 * leak, sanitizer report or round-trip difference is a finding.
 * Run: make fuzz FUZZ=fuzz_manifest FUZZ_SECONDS=300 (seeds: fuzz/corpus/fuzz_manifest). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keel/core.h"

static int same_entry(const kl_manifest_file *a, const kl_manifest_file *b) {
    if (strcmp(a->name, b->name) || strcmp(a->sha256, b->sha256) || a->bytes != b->bytes || a->rows != b->rows) return 0;
    return (!a->extra && !b->extra) || cJSON_Compare(a->extra, b->extra, 1);
}

static void same_list(const kl_manifest_files *a, const char *text, size_t len) {
    void *j = NULL;
    kl_manifest_files b = {0};
    kl_err e = {0};
    if (kl_json_parse_opts(text, len, "rt", KL_JSON_KEEP_NUL, &j, &e) || kl_manifest_files_read(j, "rt", &b, &e)) abort();
    if (b.n != a->n) abort();
    for (size_t i = 0; i < a->n; i++)
        if (!same_entry(&a->v[i], &b.v[i]) || kl_manifest_find(&b, a->v[i].name) != &b.v[i]) abort();
    kl_manifest_files_free(&b);
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    void *j = NULL;
    kl_manifest_files m = {0};
    kl_err e = {0};
    if (kl_json_parse_opts((const char *)data, size, "fuzz", KL_JSON_KEEP_NUL, &j, &e) == KL_OK &&
        kl_manifest_files_read(j, "fuzz", &m, &e) == KL_OK) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"files\": ");
        if (kl_manifest_json(&m, "", &b) == KL_OK) {
            kl_buf_puts(&b, "}");
            if (!b.failed) same_list(&m, b.data, b.len);
        }
        kl_buf_free(&b);
        if (kl_manifest_write(&m, j, &e) == KL_OK) {
            char *t = cJSON_PrintUnformatted(j);
            if (t) same_list(&m, t, strlen(t));
            free(t);
        }
    }
    kl_manifest_files_free(&m);
    cJSON_Delete(j);
    return 0;
}
