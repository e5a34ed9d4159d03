/* JSON helpers on cJSON: parse with a file:line:col error, atomic write. */
#include "core_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int json_loc(const char *text, const char *stop, const char *name, const char *what, kl_err *e) {
    int line = 1, col = 1;
    for (const char *p = text; p < stop; p++) {
        if (*p == '\n') { line++; col = 1; }
        else col++;
    }
    return kl_err_setloc(e, KL_EPARSE, name, line, col, "%s", what);
}

int kl_json_parse(const char *text, size_t len, const char *name, void **out, kl_err *e) {
    *out = NULL;
    /* cJSON keeps strings as C strings: a \u0000 would cut one short and
     * lose the rest without a word, so it is refused here (a backslash
     * occurs only inside strings in valid JSON; an escaped one is skipped) */
    for (const char *p = len ? memchr(text, '\\', len) : NULL, *end = text + len; p && end - p >= 2;
         p = end - p > 2 ? memchr(p + 2, '\\', (size_t)(end - p - 2)) : NULL) {
        if (p[1] == 'u' && end - p >= 6 && !memcmp(p + 2, "0000", 4))
            return json_loc(text, p, name, "\\u0000 (a NUL character) in a string is not supported", e);
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) return json_loc(text, end && end >= text && end <= text + len ? end : text, name, "malformed JSON", e);
    *out = j;
    return KL_OK;
}

size_t kl_json_string_len(const void *node) {
    const cJSON *n = node;
    if (!n || !n->valuestring) return 0;
    return n->type & KL_JSON_STRLEN ? (size_t)n->valuedouble : strlen(n->valuestring);
}

int kl_json_load_file(const char *path, void **out, kl_err *e) {
    char *text;
    size_t len;
    *out = NULL;
    int rc = kl_read_file(path, &text, &len, e);
    if (rc) return rc;
    rc = kl_json_parse(text, len, path, out, e);
    kl_mem_free(text);
    return rc;
}

int kl_json_write_file(const char *path, const void *cjson, int pretty, kl_err *e) {
    char *s = pretty ? cJSON_Print((const cJSON *)cjson) : cJSON_PrintUnformatted((const cJSON *)cjson);
    if (!s) return kl_err_set(e, KL_ENOMEM, "%s: out of memory while formatting JSON", path);
    kl_afile *f;
    int rc = kl_afile_open(path, &f, e);
    if (rc == KL_OK) {
        rc = kl_afile_write(f, s, strlen(s), e);
        if (rc == KL_OK) rc = kl_afile_write(f, "\n", 1, e);
        if (rc == KL_OK) rc = kl_afile_commit(f, e);
        else kl_afile_abort(f);
    }
    free(s);
    return rc;
}
