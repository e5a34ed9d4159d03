/* Dataset folders: resolving a path (dataset folder with `current`, a
 * version folder with manifest.json, or a single .parquet file) to its
 * Parquet files and manifest. */
#include "data_int.h"

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

int kl_dataset_resolve(const char *path, char ***files, size_t *n_files, char **manifest, kl_err *e) {
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
    if (kl_path_exists(mp) && manifest && !(*manifest = strdup(mp))) return kl_err_set(e, KL_ENOMEM, "out of memory");
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
    *files = v.v;
    *n_files = v.n;
    return KL_OK;
}
