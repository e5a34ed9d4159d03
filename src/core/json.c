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

/* The first \u0000 escape in text, or NULL (a backslash occurs only inside
 * strings in valid JSON; an escaped one is skipped). */
static const char *find_nul_escape(const char *text, size_t len) {
    for (const char *p = len ? memchr(text, '\\', len) : NULL, *end = text + len; p && end - p >= 2;
         p = end - p > 2 ? memchr(p + 2, '\\', (size_t)(end - p - 2)) : NULL) {
        if (p[1] == 'u' && end - p >= 6 && !memcmp(p + 2, "0000", 4)) return p;
    }
    return NULL;
}

/* KL_JSON_KEEP_NUL: cJSON keeps strings as C strings, so the text is
 * rewritten for it with an escape of our own that has no NUL: U+0001 (raw
 * or \u0001) becomes \u0001\u0001 and \u0000 becomes \u0001\u0002; after
 * parsing, every string is decoded back in place and its length recorded
 * (KL_JSON_STRLEN). Offsets in errors are those of the rewritten text, so
 * the caller's own text is named only when the rewrite is not needed. */
static int nul_rewrite(const char *t, size_t n, kl_buf *b) {
    for (size_t i = 0; i < n; i++) {
        if (t[i] == 1) { kl_buf_puts(b, "\\u0001\\u0001"); continue; }
        if (t[i] != '\\' || i + 1 >= n) { kl_buf_append(b, t + i, 1); continue; }
        if (t[i + 1] == 'u' && i + 5 < n && !memcmp(t + i + 2, "000", 3) && (t[i + 5] == '0' || t[i + 5] == '1')) {
            kl_buf_puts(b, t[i + 5] == '0' ? "\\u0001\\u0002" : "\\u0001\\u0001");
            i += 5;
            continue;
        }
        kl_buf_append(b, t + i, 2);
        i++;
    }
    return b->failed ? KL_ENOMEM : KL_OK;
}

/* Decodes a rewritten string in place; returns its length. */
static size_t nul_decode(char *s) {
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (*p == 1 && (p[1] == 1 || p[1] == 2)) { *o++ = p[1] == 1 ? 1 : 0; p++; }
        else *o++ = *p;
    }
    *o = 0;
    return (size_t)(o - s);
}

static int nul_restore(cJSON *n, const char **bad_key) {
    for (; n; n = n->next) {
        if (n->string && strchr(n->string, 1)) {
            size_t l = nul_decode(n->string);
            if (strlen(n->string) != l) { *bad_key = n->string; return -1; }
        }
        if (cJSON_IsString(n) && n->valuestring) {
            size_t l = nul_decode(n->valuestring);
            n->type |= KL_JSON_STRLEN;
            n->valuedouble = (double)l;
        }
        if (n->child && nul_restore(n->child, bad_key)) return -1;
    }
    return 0;
}

static int parse_keep_nul(const char *text, size_t len, const char *name, void **out, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    if (nul_rewrite(text, len, &b)) { kl_buf_free(&b); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    const char *end = NULL, *bad = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(b.data, b.len, &end, 0);
    int rc = KL_OK;
    if (!j) rc = json_loc(b.data, end && end >= b.data && end <= b.data + b.len ? end : b.data, name, "malformed JSON", e);
    else if (nul_restore(j, &bad)) {
        rc = kl_err_set(e, KL_EPARSE, "%s%s\\u0000 (a NUL character) in a member name is not supported", name ? name : "",
                        name ? ": " : "");
        cJSON_Delete(j);
        j = NULL;
    }
    kl_buf_free(&b);
    *out = j;
    return rc;
}

int kl_json_parse(const char *text, size_t len, const char *name, void **out, kl_err *e) {
    return kl_json_parse_opts(text, len, name, 0, out, e);
}

int kl_json_parse_opts(const char *text, size_t len, const char *name, int flags, void **out, kl_err *e) {
    *out = NULL;
    const char *nul = find_nul_escape(text, len);
    if (nul && (flags & KL_JSON_KEEP_NUL)) return parse_keep_nul(text, len, name, out, e);
    if (nul) return json_loc(text, nul, name, "\\u0000 (a NUL character) in a string is not supported", e);
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

int kl_json_string_list(const void *array, int max, char ***out, int *n) {
    const cJSON *a = array;
    int k = cJSON_GetArraySize(a);
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(a) || k < 1 || k > max) return KL_EINVAL;
    for (const cJSON *c = a->child; c; c = c->next)
        if (!cJSON_IsString(c)) return KL_EINVAL;
    char **v = calloc((size_t)k, sizeof *v);
    if (!v) return KL_ENOMEM;
    int i = 0;
    for (const cJSON *c = a->child; c; c = c->next, i++)
        if (!(v[i] = strdup(c->valuestring))) {
            while (i--) free(v[i]);
            free(v);
            return KL_ENOMEM;
        }
    *out = v;
    *n = k;
    return KL_OK;
}

int kl_json_load_file(const char *path, void **out, kl_err *e) { return kl_json_load_file_opts(path, 0, out, e); }

int kl_json_load_file_opts(const char *path, int flags, void **out, kl_err *e) {
    char *text;
    size_t len;
    *out = NULL;
    int rc = kl_read_file(path, &text, &len, e);
    if (rc) return rc;
    rc = kl_json_parse_opts(text, len, path, flags, out, e);
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
