/* Dataset folders: resolving a path (dataset folder with `current`, a
 * version folder with manifest.json, or a single .parquet file) to its
 * Parquet files and manifest, verifying the files against the manifest
 * (sha256 or size) so that every reader of a dataset reads what was
 * published, and the ingest schema its manifest records. */
#include "data_int.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct { char **v; size_t n, cap; } strvec;

static int sv_push(strvec *s, const char *p) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, nc * sizeof *v);
        if (!v) return KL_ENOMEM;
        s->v = v;
        s->cap = nc;
    }
    if (!(s->v[s->n] = strdup(p))) return KL_ENOMEM;
    s->n++;
    return KL_OK;
}

static int walk(const char *dir, strvec *out) {
    DIR *d = opendir(dir);
    if (!d) return -errno;
    struct dirent *de;
    int rc = KL_OK;
    while ((de = readdir(d)) && !rc) {
        if (de->d_name[0] == '.') continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st)) continue;
        if (S_ISDIR(st.st_mode)) rc = walk(p, out);
        else if (strlen(de->d_name) > 8 && !strcmp(de->d_name + strlen(de->d_name) - 8, ".parquet")) rc = sv_push(out, p);
    }
    closedir(d);
    return rc;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* ================================================================ verification */

int kl_verify_mode_parse(const char *s, kl_verify_mode *m, kl_err *e) {
    static const char *const names[] = {"sha256", "size", "none"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) { *m = (kl_verify_mode)i; return KL_OK; }
    return kl_err_set(e, KL_EINVAL, "--verify %s: expected sha256, size or none", s ? s : "");
}

const char *kl_verify_mode_name(kl_verify_mode m) {
    return m == KL_VERIFY_SIZE ? "size" : m == KL_VERIFY_NONE ? "none" : "sha256";
}

/* One listed file at dir/rel: its size and (sha256 mode) its hash. */
static int verify_one(const char *dir, const char *mpath, const cJSON *f, kl_verify_mode mode, kl_err *e) {
    const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(f, "path"));
    const char *sha = cJSON_GetStringValue(cJSON_GetObjectItem(f, "sha256"));
    const cJSON *by = cJSON_GetObjectItem(f, "bytes");
    size_t rl = rel ? strlen(rel) : 0;
    if (!rl || rel[0] == '/' || !strncmp(rel, "../", 3) || strstr(rel, "/../") || !strcmp(rel, "..") ||
        (rl >= 3 && !strcmp(rel + rl - 3, "/..")))
        return kl_err_set(e, KL_EPARSE, "%s: a files entry has no valid path", mpath);
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    if (stat(p, &st)) return kl_err_set(e, KL_ENOTFOUND, "%s: listed in %s but missing (%s)", p, mpath, strerror(errno));
    int size_ok = !cJSON_IsNumber(by) || (double)st.st_size == by->valuedouble;
    if (mode == KL_VERIFY_SIZE) {
        if (!size_ok)
            return kl_err_set(e, KL_ECHECKSUM, "%s: %lld bytes, the manifest %s says %.0f (changed after the dataset was published; --verify none skips this check)",
                              p, (long long)st.st_size, mpath, by->valuedouble);
        return KL_OK;
    }
    if (!sha) return kl_err_set(e, KL_EPARSE, "%s: the files entry of %s has no sha256", mpath, rel);
    char hex[65];
    int rc = kl_sha256_file_hex(p, hex, e);
    if (rc) return rc;
    if (strcmp(hex, sha) || !size_ok)
        return kl_err_set(e, KL_ECHECKSUM, "%s: sha256 %s (%lld bytes), the manifest %s says %s (%.0f bytes) (changed after the dataset was published; --verify none skips this check)",
                          p, hex, (long long)st.st_size, mpath, sha, cJSON_IsNumber(by) ? by->valuedouble : (double)st.st_size);
    return KL_OK;
}

static int cmp_rel(const void *key, const void *el) { return strcmp((const char *)key, *(char *const *)el); }

/* Every Parquet file found under dir (sorted, full paths) is listed in the
 * manifest and matches it; every listed file exists. */
static int verify_files(const char *dir, const char *mpath, char **files, size_t n, kl_verify_mode mode, kl_err *e) {
    if (mode == KL_VERIFY_NONE) return KL_OK;
    void *mj = NULL;
    int rc = kl_json_load_file_opts(mpath, KL_JSON_KEEP_NUL, &mj, e); /* column stats may hold \u0000 */
    if (rc) return rc;
    cJSON *m = mj, *list = cJSON_GetObjectItem(m, "files"), *f;
    size_t dl = strlen(dir) + 1, listed = 0;
    unsigned char *seen = calloc(n ? n : 1, 1);
    if (!seen) { cJSON_Delete(m); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    if (!cJSON_IsArray(list)) rc = kl_err_set(e, KL_EPARSE, "%s: no files list", mpath);
    char **rels = calloc(n ? n : 1, sizeof *rels);
    if (!rc && !rels) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) rels[i] = files[i] + dl; /* same prefix: still sorted */
    cJSON_ArrayForEach(f, list) {
        if (rc) break;
        if ((rc = verify_one(dir, mpath, f, mode, e))) break;
        const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(f, "path"));
        char **hit = bsearch(rel, rels, n, sizeof *rels, cmp_rel);
        if (hit) seen[hit - rels] = 1;
        listed++;
    }
    for (size_t i = 0; !rc && i < n; i++)
        if (!seen[i]) rc = kl_err_set(e, KL_ECHECKSUM, "%s: not listed in %s (added after the dataset was published; --verify none skips this check)", files[i], mpath);
    free(rels);
    free(seen);
    cJSON_Delete(m);
    (void)listed;
    return rc;
}

/* ================================================================ resolving */

int kl_dataset_resolve(const char *path, char ***files, size_t *n_files, char **manifest, kl_err *e) {
    return kl_dataset_resolve_verify(path, KL_VERIFY_SHA256, files, n_files, manifest, e);
}

int kl_dataset_resolve_verify(const char *path, kl_verify_mode verify, char ***files, size_t *n_files, char **manifest,
                              kl_err *e) {
    *files = NULL;
    *n_files = 0;
    if (manifest) *manifest = NULL;
    struct stat st;
    if (stat(path, &st)) return kl_err_set(e, KL_ENOTFOUND, "%s: %s", path, strerror(errno));
    strvec v = {0};
    char dir[4200];
    int rc;
    if (!S_ISDIR(st.st_mode)) {
        if ((rc = sv_push(&v, path))) return kl_err_set(e, rc, "out of memory");
        *files = v.v;
        *n_files = 1;
        return KL_OK;
    }
    snprintf(dir, sizeof dir, "%s", path);
    char cur[4300];
    snprintf(cur, sizeof cur, "%s/current", path);
    char *id = NULL;
    size_t idn;
    if (kl_read_file(cur, &id, &idn, NULL) == KL_OK) {
        id[strcspn(id, "\r\n")] = 0;
        if (strlen(id) != 64 || strspn(id, "0123456789abcdef") != 64) {
            kl_mem_free(id);
            return kl_err_set(e, KL_EPARSE, "%s: malformed pointer file", cur);
        }
        snprintf(dir, sizeof dir, "%s/versions/%s", path, id);
        kl_mem_free(id);
    }
    char mp[4300];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    int has_manifest = kl_path_exists(mp);
    if (has_manifest && manifest && !(*manifest = strdup(mp))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    rc = walk(dir, &v);
    if (rc) {
        for (size_t i = 0; i < v.n; i++) free(v.v[i]);
        free(v.v);
        if (manifest) { free(*manifest); *manifest = NULL; }
        return kl_err_set(e, rc, "%s: %s", dir, rc == KL_ENOMEM ? "out of memory" : strerror(-rc));
    }
    if (v.n == 0) {
        free(v.v);
        if (manifest) { free(*manifest); *manifest = NULL; }
        return kl_err_set(e, KL_ENOTFOUND, "%s: no .parquet files (not a dataset?)", path);
    }
    qsort(v.v, v.n, sizeof *v.v, cmp);
    if (has_manifest && (rc = verify_files(dir, mp, v.v, v.n, verify, e))) {
        for (size_t i = 0; i < v.n; i++) free(v.v[i]);
        free(v.v);
        if (manifest) { free(*manifest); *manifest = NULL; }
        return rc;
    }
    *files = v.v;
    *n_files = v.n;
    return KL_OK;
}

int kl_dataset_schema(const char *path, kl_schema **out, kl_err *e) {
    *out = NULL;
    char **files = NULL, *manifest = NULL;
    size_t n = 0;
    /* the schema only: the reader that follows verifies the files */
    int rc = kl_dataset_resolve_verify(path, KL_VERIFY_NONE, &files, &n, &manifest, e);
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
    if (rc || !manifest) { free(manifest); return rc; }
    kl_doc *d = NULL;
    rc = kl_doc_load_file(manifest, &d, e);
    const kl_node *s = rc ? NULL : kl_node_get(kl_doc_root(d), "schema");
    if (s && kl_node_kind_of(s) == KL_NODE_MAP && (rc = kl_schema_from_node(s, out, e)))
        kl_err_prefix(e, "%s: schema", manifest);
    kl_doc_free(d);
    free(manifest);
    return rc;
}

/* ============================================== flat dataset manifests */

int kl_dataset_file_stat(const char *dir, const char *rel, uint64_t rows, kl_dataset_file *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    if (stat(p, &st)) return kl_err_set(e, -errno, "%s: %s", p, strerror(errno));
    int rc = kl_sha256_file_hex(p, out->sha256, e);
    if (rc) return rc;
    if (!(out->path = strdup(rel))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    out->rows = rows;
    out->bytes = (uint64_t)st.st_size;
    return KL_OK;
}

int kl_dataset_manifest_write(const char *dir, const char *format, const char *head, const kl_dataset_file *files,
                              size_t n, kl_err *e) {
    uint64_t rows = 0;
    for (size_t i = 0; i < n; i++) rows += files[i].rows;
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\n  \"format\": ");
    kl_buf_json_str(&b, format);
    if (head && *head) kl_buf_printf(&b, ",\n  %s", head);
    kl_buf_printf(&b, ",\n  \"rows\": {\"read\": %llu, \"accepted\": %llu, \"rejected\": 0},\n  \"files\": [",
                  (unsigned long long)rows, (unsigned long long)rows);
    for (size_t i = 0; i < n; i++) {
        kl_buf_puts(&b, i ? ",\n    {\"path\": " : "\n    {\"path\": ");
        kl_buf_json_str(&b, files[i].path);
        kl_buf_printf(&b, ", \"sha256\": \"%s\", \"rows\": %llu, \"bytes\": %llu}", files[i].sha256,
                      (unsigned long long)files[i].rows, (unsigned long long)files[i].bytes);
    }
    kl_buf_puts(&b, n ? "\n  ]\n}\n" : "]\n}\n");
    char p[4300];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(p, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

void kl_dataset_files_free(kl_dataset_file *files, size_t n) {
    for (size_t i = 0; files && i < n; i++) free(files[i].path);
    free(files);
}

/* one entry of a manifest's files list, checked (the manifest is outside input) */
static int manifest_file(const char *mp, const cJSON *f, size_t i, kl_dataset_file *out, kl_err *e) {
    const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(f, "path"));
    const char *sha = cJSON_GetStringValue(cJSON_GetObjectItem(f, "sha256"));
    const cJSON *rows = cJSON_GetObjectItem(f, "rows"), *by = cJSON_GetObjectItem(f, "bytes");
    if (!rel || !*rel || rel[0] == '/' || strstr(rel, ".."))
        return kl_err_set(e, KL_EPARSE, "%s: files[%zu]: no valid path", mp, i);
    if (!sha || strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
        return kl_err_set(e, KL_EPARSE, "%s: files[%zu] (%s): sha256 is not 64 hex digits", mp, i, rel);
    if (!cJSON_IsNumber(rows) || rows->valuedouble < 0 || rows->valuedouble > 9e15 || !cJSON_IsNumber(by) ||
        by->valuedouble < 0 || by->valuedouble > 9e15)
        return kl_err_set(e, KL_EPARSE, "%s: files[%zu] (%s): rows and bytes must be counts", mp, i, rel);
    if (!(out->path = strdup(rel))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    memcpy(out->sha256, sha, 65);
    out->rows = (uint64_t)rows->valuedouble;
    out->bytes = (uint64_t)by->valuedouble;
    return KL_OK;
}

int kl_dataset_manifest_files(const char *dir, kl_dataset_file **files, size_t *n, kl_err *e) {
    *files = NULL;
    *n = 0;
    char mp[4300];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    if (!kl_path_exists(mp)) return KL_OK;
    void *mj = NULL;
    int rc = kl_json_load_file_opts(mp, 0, &mj, e);
    if (rc) return rc;
    const cJSON *list = cJSON_GetObjectItem((cJSON *)mj, "files"), *f;
    kl_dataset_file *v = NULL;
    size_t k = 0;
    if (!cJSON_IsArray(list)) rc = kl_err_set(e, KL_EPARSE, "%s: no files list", mp);
    else if (!(v = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *v)))
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc) cJSON_ArrayForEach(f, list) {
            if ((rc = manifest_file(mp, f, k, &v[k], e))) break;
            k++;
        }
    cJSON_Delete(mj);
    if (rc) { kl_dataset_files_free(v, k); return rc; }
    *files = v;
    *n = k;
    return KL_OK;
}
