/* JSON helpers on cJSON: parse with a file:line:col error, atomic write. */
#include "core_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int kl_json_parse(const char *text, size_t len, const char *name, void **out, kl_err *e) {
    *out = NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        int line = 1, col = 1;
        const char *stop = end && end >= text && end <= text + len ? end : text;
        for (const char *p = text; p < stop; p++) {
            if (*p == '\n') { line++; col = 1; }
            else col++;
        }
        return kl_err_setloc(e, KL_EPARSE, name, line, col, "malformed JSON");
    }
    *out = j;
    return KL_OK;
}

int kl_json_load_file(const char *path, void **out, kl_err *e) {
    char *text;
    size_t len;
    *out = NULL;
    int rc = kl_read_file(path, &text, &len, e);
    if (rc) return rc;
    rc = kl_json_parse(text, len, path, out, e);
    free(text);
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
