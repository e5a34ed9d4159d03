/* Dataset folders: resolving a path (dataset folder with `current`, a
 * version folder with manifest.json, or a single .parquet file) to its
 * Parquet files and manifest, verifying the files against the manifest
 * (sha256 or size) so that every reader of a dataset reads what was
 * published, the ingest schema its manifest records, and the audit of a
 * dataset against its manifest (keel data validate, the pipeline). */
#include "data_int.h"

#include <cjson/cJSON.h>
#include <keel/parquet.h>

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

#define CHANGED_HINT "(changed after the dataset was published; --verify none skips this check)"

/* Every Parquet file found under dir (sorted, full paths) is listed in the
 * manifest and matches it; every listed file exists. */
static int verify_files(const char *dir, const char *mpath, char **files, size_t n, kl_verify_mode mode, kl_err *e) {
    if (mode == KL_VERIFY_NONE) return KL_OK;
    kl_manifest_files m;
    int rc = kl_manifest_files_load(mpath, &m, NULL, e);
    for (size_t i = 0; !rc && i < m.n; i++) rc = kl_manifest_file_verify(dir, &m.v[i], mode, mpath, CHANGED_HINT, e);
    size_t dl = strlen(dir) + 1;
    for (size_t i = 0; !rc && i < n; i++)
        if (!kl_manifest_find(&m, files[i] + dl))
            rc = kl_err_set(
                e, KL_ECHECKSUM,
                "%s: not listed in %s (added after the dataset was published; --verify none skips this check)",
                files[i], mpath);
    kl_manifest_files_free(&m);
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

/* ================================================================ audit */

/* One listed file: its sha256 and size, then (when it is there) its Parquet
 * row count. */
static void audit_file(const char *dir, const char *mpath, const kl_manifest_file *f, kl_buf *pb, int *np,
                       uint64_t *rows) {
    kl_err fe = {0};
    char p[4400];
    kl_pq_reader *r = NULL;
    snprintf(p, sizeof p, "%s/%s", dir, f->name);
    int rc = kl_manifest_file_verify(dir, f, KL_VERIFY_SHA256, mpath, NULL, &fe);
    if (rc) {
        kl_buf_printf(pb, "%s\n", kl_err_what(&fe));
        (*np)++;
        kl_err_clear(&fe);
    }
    if (rc == KL_ENOTFOUND) return;
    if (kl_pq_open(p, &r, &fe)) {
        kl_buf_printf(pb, "%s\n", kl_err_what(&fe));
        (*np)++;
        return;
    }
    uint64_t n = kl_pq_num_rows(r);
    kl_pq_close(r);
    *rows += n;
    if (f->rows >= 0 && (uint64_t)f->rows == n) return;
    if (f->rows >= 0)
        kl_buf_printf(pb, "%s: %llu rows, the manifest says %lld\n", f->name, (unsigned long long)n,
                      (long long)f->rows);
    else kl_buf_printf(pb, "%s: the manifest %s records no row count\n", f->name, mpath);
    (*np)++;
}

int kl_dataset_audit(const char *path, kl_buf *pb, int *np, uint64_t *rows_out, kl_err *e) {
    char **files = NULL, *mpath = NULL;
    size_t nfiles = 0;
    uint64_t rows = 0;
    void *doc = NULL;
    kl_manifest_files m = {0};
    *np = 0;
    int rc = kl_dataset_resolve_verify(path, KL_VERIFY_NONE, &files, &nfiles, &mpath, e);
    if (!rc && mpath) rc = kl_manifest_files_load(mpath, &m, &doc, e);
    if (!rc && mpath) {
        char dir[4400];
        snprintf(dir, sizeof dir, "%s", mpath);
        *strrchr(dir, '/') = 0;
        size_t dl = strlen(dir) + 1;
        for (size_t i = 0; i < m.n; i++) audit_file(dir, mpath, &m.v[i], pb, np, &rows);
        for (size_t i = 0; i < nfiles; i++)
            if (!kl_manifest_find(&m, files[i] + dl)) {
                kl_buf_printf(pb, "%s: not listed in %s\n", files[i] + dl, mpath);
                (*np)++;
            }
        const cJSON *acc = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "rows"), "accepted");
        if (cJSON_IsNumber(acc) && acc->valuedouble != (double)rows) {
            kl_buf_printf(pb, "the files hold %llu rows, the manifest accepted %.0f\n", (unsigned long long)rows,
                          acc->valuedouble);
            (*np)++;
        }
    }
    if (rows_out) *rows_out = rows;
    kl_manifest_files_free(&m);
    cJSON_Delete(doc);
    for (size_t i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(mpath);
    return rc;
}

/* ============================================== flat dataset manifests */

/* (the shape and its checks are core/manifest.c's: this is the flat dataset
 * folder's document around the files map) */

int kl_dataset_file_stat(const char *dir, const char *rel, uint64_t rows, kl_dataset_file *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    kl_manifest_files m = {0};
    int rc = kl_manifest_add(&m, dir, rel, e);
    if (!rc && !(out->path = strdup(rel))) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc) {
        memcpy(out->sha256, m.v[0].sha256, sizeof out->sha256);
        out->rows = rows;
        out->bytes = (uint64_t)m.v[0].bytes;
    }
    kl_manifest_files_free(&m);
    return rc;
}

int kl_dataset_manifest_write(const char *dir, const char *format, const char *head, const kl_dataset_file *files,
                              size_t n, kl_err *e) {
    uint64_t rows = 0;
    kl_manifest_files m = {0};
    int rc = KL_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        rows += files[i].rows;
        rc = kl_manifest_push(&m, files[i].path, files[i].sha256, (int64_t)files[i].bytes, (int64_t)files[i].rows,
                              NULL, e);
    }
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\n  \"format\": ");
    kl_buf_json_str(&b, format);
    if (head && *head) kl_buf_printf(&b, ",\n  %s", head);
    kl_buf_printf(&b, ",\n  \"rows\": {\"read\": %llu, \"accepted\": %llu, \"rejected\": 0},\n  \"files\": ",
                  (unsigned long long)rows, (unsigned long long)rows);
    if (!rc && (rc = kl_manifest_json(&m, "  ", &b))) rc = kl_err_set(e, rc, "out of memory");
    kl_buf_puts(&b, "\n}\n");
    char p[4300];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    if (!rc) rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(p, b.data, b.len, e);
    kl_buf_free(&b);
    kl_manifest_files_free(&m);
    return rc;
}

void kl_dataset_files_free(kl_dataset_file *files, size_t n) {
    for (size_t i = 0; files && i < n; i++) free(files[i].path);
    free(files);
}

int kl_dataset_manifest_files(const char *dir, kl_dataset_file **files, size_t *n, kl_err *e) {
    *files = NULL;
    *n = 0;
    char mp[4300];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    if (!kl_path_exists(mp)) return KL_OK;
    kl_manifest_files m = {0};
    int rc = kl_manifest_files_load(mp, &m, NULL, e);
    kl_dataset_file *v = rc ? NULL : calloc(m.n + 1, sizeof *v);
    if (!rc && !v) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    size_t k = 0;
    for (; !rc && k < m.n; k++) {
        const kl_manifest_file *f = &m.v[k];
        if (f->rows < 0 || f->bytes < 0) {
            rc = kl_err_set(e, KL_EPARSE, "%s: files[\"%s\"]: rows and bytes must be counts", mp, f->name);
            break;
        }
        if (!(v[k].path = strdup(f->name))) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        memcpy(v[k].sha256, f->sha256, sizeof v[k].sha256);
        v[k].rows = (uint64_t)f->rows;
        v[k].bytes = (uint64_t)f->bytes;
    }
    kl_manifest_files_free(&m);
    if (rc) {
        kl_dataset_files_free(v, k);
        return rc;
    }
    *files = v;
    *n = k;
    return KL_OK;
}
