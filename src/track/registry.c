/* The model registry: registered models with immutable, content-addressed
 * versions (sha256 verified on every read), signatures, lineage to the
 * producing run, tags, and aliases with a timestamped history. */
#include "track_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==================================================================
 * Helpers
 * ================================================================== */

static int valid_name(const char *s) {
    if (!s || !*s || strlen(s) > 200) return 0;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.')) return 0;
    return 1;
}

static int model_id(kl_track *t, const char *name, int64_t *id, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t, "SELECT id FROM models WHERE name=?", &st, e);
    if (rc) return rc;
    kl__bind_text(st, 1, name);
    int s = kl__step(st);
    if (s == KL__ROW) *id = kl__col_i64(st, 0);
    kl__free(st);
    if (s == KL__ROW) return KL_OK;
    if (s == KL__DONE) return kl__track_notfound(t, e, "model '%s' not found", name);
    return kl__track_sqlerr(t, s, e, "finding a model");
}

static int step_done(kl_track *t, kl__st *st, kl_err *e, const char *what) {
    int s = kl__step(st);
    return s == KL__DONE ? KL_OK : kl__track_sqlerr(t, s, e, what);
}

/* Files of a folder, recursively, as paths relative to it (sorted). */
typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static int strvec_push(strvec *s, const char *x) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) return KL_ENOMEM;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n] = strdup(x);
    if (!s->v[s->n]) return KL_ENOMEM;
    s->n++;
    return KL_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int walk(const char *root, const char *rel, strvec *out, kl_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) return kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    struct dirent *de;
    int rc = KL_OK;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char r2[4096], full[4096];
        snprintf(r2, sizeof r2, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        snprintf(full, sizeof full, "%s/%s", root, r2);
        struct stat sb;
        if (stat(full, &sb) != 0) {
            rc = kl_err_set(e, -errno, "%s: %s", full, strerror(errno));
            break;
        }
        if (S_ISDIR(sb.st_mode)) rc = walk(root, r2, out, e);
        else if (S_ISREG(sb.st_mode) && strvec_push(out, r2)) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    closedir(d);
    return rc;
}

/* Signature from meta.json: "signature":{...}, or "inputs"/"outputs". */
static char *signature_from_meta(const char *dir, int64_t *run_id) {
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    if (!kl_path_exists(path)) return NULL;
    void *j = NULL;
    kl_err e = {0};
    if (kl_json_load_file(path, &j, &e)) {
        kl_log(KL_LOG_WARN, "track", "%s", kl_err_what(&e));
        return NULL;
    }
    cJSON *root = j, *sig = NULL;
    char *out = NULL;
    cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "run_id");
    if (run_id && *run_id == 0 && cJSON_IsNumber(rid)) *run_id = (int64_t)rid->valuedouble;
    cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "signature");
    if (cJSON_IsObject(s)) {
        out = cJSON_PrintUnformatted(s);
    } else {
        cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs"), *o = cJSON_GetObjectItemCaseSensitive(root, "outputs");
        if (in || o) {
            sig = cJSON_CreateObject();
            if (sig) {
                if (in) cJSON_AddItemToObject(sig, "inputs", cJSON_Duplicate(in, 1));
                if (o) cJSON_AddItemToObject(sig, "outputs", cJSON_Duplicate(o, 1));
                out = cJSON_PrintUnformatted(sig);
            }
        }
    }
    cJSON_Delete(sig);
    cJSON_Delete(root);
    return out;
}

/* ==================================================================
 * Register
 * ================================================================== */

static int run_exists(kl_track *t, int64_t run_id) {
    kl__st *st = NULL;
    kl_err e = {0};
    kl__track_lock(t);
    int found = !kl__track_prep(t, "SELECT 1 FROM runs WHERE id=?", &st, &e);
    if (found) {
        kl__bind_i64(st, 1, run_id);
        found = kl__step(st) == KL__ROW;
    }
    kl__free(st);
    kl__track_unlock(t);
    return found;
}

int kl_registry_register(kl_track *t, const char *name, const char *dir, int64_t run_id, const char *signature_json,
                         int64_t *version, kl_err *e) {
    return kl_registry_register_files(t, name, dir, NULL, 0, run_id, signature_json, version, e);
}

/* The source of each registered name: dir/NAME, or the extra file given for it. */
static const char *file_source(const char *dir, const char *rel, const kl_registry_file *extra, size_t nextra,
                               char *buf, size_t n) {
    for (size_t k = 0; k < nextra; k++)
        if (!strcmp(extra[k].name, rel)) return extra[k].path;
    snprintf(buf, n, "%s/%s", dir, rel);
    return buf;
}

int kl_registry_register_files(kl_track *t, const char *name, const char *dir, const kl_registry_file *extra,
                               size_t nextra, int64_t run_id, const char *signature_json, int64_t *version, kl_err *e) {
    *version = 0;
    if (!valid_name(name)) return kl_err_set(e, KL_EINVAL, "model name '%s' is not valid (letters, digits, '_', '-', '.')", name ? name : "");
    strvec files = {0};
    char **hex = NULL;
    int64_t *sizes = NULL;
    char *sig = NULL;
    kl__st *st = NULL;
    int rc, locked = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0) return kl_err_set(e, -errno, "%s: %s", dir, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        if ((rc = walk(dir, "", &files, e))) goto fail;
    } else {
        rc = kl_err_set(e, KL_EINVAL, "%s: expected a model folder", dir);
        goto fail;
    }
    for (size_t k = 0; k < nextra; k++) { /* extra files: added, or replacing DIR's file of that name */
        struct stat xb;
        if (!extra[k].name || !*extra[k].name || strchr(extra[k].name, '/') || stat(extra[k].path, &xb) != 0 ||
            !S_ISREG(xb.st_mode)) {
            rc = kl_err_set(e, KL_EINVAL, "%s: not a file to register as %s", extra[k].path,
                            extra[k].name ? extra[k].name : "?");
            goto fail;
        }
        int have = 0;
        for (size_t i = 0; i < files.n; i++) have |= !strcmp(files.v[i], extra[k].name);
        if (!have && strvec_push(&files, extra[k].name)) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (!files.n) {
        rc = kl_err_set(e, KL_EINVAL, "%s: no files to register", dir);
        goto fail;
    }
    qsort(files.v, files.n, sizeof *files.v, cmp_str);
    int64_t given_run = run_id;
    sig = signature_from_meta(dir, &run_id);
    /* the producing run: --run must be a run of this store; meta.json's
     * run_id (a tracked keel train) is linked when it is one (a model
     * trained against another store is registered without the link) */
    if (run_id > 0 && !run_exists(t, run_id)) {
        if (given_run > 0) {
            rc = kl__track_notfound(t, e, "run %lld (the model's producing run) not found", (long long)run_id);
            goto fail;
        }
        kl_log(
            KL_LOG_WARN, "track",
            "%s/meta.json: run_id %lld is not a run of %s; the version is registered without it (--run ID links one)",
            dir, (long long)run_id, kl_track_where(t));
        run_id = 0;
    }
    if (!sig && signature_json) {
        void *j = NULL;
        if ((rc = kl_json_parse(signature_json, strlen(signature_json), "signature", &j, e))) goto fail;
        sig = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
    hex = calloc(files.n, sizeof *hex);
    sizes = calloc(files.n, sizeof *sizes);
    if (!hex || !sizes) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    /* copy the files into the object store first (outside the transaction) */
    for (size_t i = 0; i < files.n; i++) {
        char buf[4096];
        const char *p = file_source(dir, files.v[i], extra, nextra, buf, sizeof buf);
        hex[i] = malloc(65);
        if (!hex[i]) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = kl__track_put_object(t, p, hex[i], &sizes[i], e))) goto fail;
    }
    kl__track_lock(t);
    locked = 1;
    if ((rc = kl__track_begin(t, e))) goto fail;
    int64_t now = kl_time_now_us();
    if ((rc = kl__track_prep(t, "INSERT INTO models(name, created_us) VALUES(?, ?) ON CONFLICT(name) DO NOTHING", &st, e))) goto fail_tx;
    kl__bind_text(st, 1, name);
    kl__bind_i64(st, 2, now);
    if ((rc = step_done(t, st, e, "creating a model"))) goto fail_tx;
    kl__free(st);
    st = NULL;
    int64_t mid = 0;
    if ((rc = model_id(t, name, &mid, e))) goto fail_tx;
    if ((rc = kl__track_prep(t, "SELECT coalesce(max(version), 0) + 1 FROM model_versions WHERE model_id=?", &st, e))) goto fail_tx;
    kl__bind_i64(st, 1, mid);
    int64_t v = kl__step(st) == KL__ROW ? kl__col_i64(st, 0) : 1;
    kl__free(st);
    st = NULL;
    if ((rc = kl__track_prep(t, "INSERT INTO model_versions(model_id, version, created_us, run_id, signature, source) VALUES(?, ?, ?, ?, ?, ?)",
                             &st, e)))
        goto fail_tx;
    kl__bind_i64(st, 1, mid);
    kl__bind_i64(st, 2, v);
    kl__bind_i64(st, 3, now);
    if (run_id > 0) kl__bind_i64(st, 4, run_id);
    if (sig) kl__bind_text(st, 5, sig);
    char absdir[4096];
    kl__bind_text(st, 6, realpath(dir, absdir) ? absdir : dir);
    if ((rc = step_done(t, st, e, "adding a model version"))) goto fail_tx;
    kl__free(st);
    st = NULL;
    if ((rc = kl__track_prep(t, "INSERT INTO model_files(model_id, version, path, size, sha256) VALUES(?, ?, ?, ?, ?)", &st, e))) goto fail_tx;
    for (size_t i = 0; i < files.n; i++) {
        kl__bind_i64(st, 1, mid);
        kl__bind_i64(st, 2, v);
        kl__bind_text(st, 3, files.v[i]);
        kl__bind_i64(st, 4, sizes[i]);
        kl__bind_text(st, 5, hex[i]);
        if ((rc = step_done(t, st, e, "recording model files"))) goto fail_tx;
        kl__reset(st);
    }
    kl__free(st);
    st = NULL;
    if ((rc = kl__track_commit(t, e))) goto fail;
    *version = v;
    goto done;
fail_tx:
    kl__track_rollback(t);
fail:
done:
    if (locked) kl__track_unlock(t);
    kl__free(st);
    for (size_t i = 0; i < files.n; i++) {
        free(files.v[i]);
        if (hex) free(hex[i]);
    }
    free(files.v);
    free(hex);
    free(sizes);
    cJSON_free(sig);
    return rc;
}

/* ==================================================================
 * References, aliases, tags
 * ================================================================== */

int kl_registry_is_ref(const char *s) {
    if (!s || !*s || kl_path_exists(s)) return 0;
    const char *at = strchr(s, '@'), *slash = strrchr(s, '/');
    if (at) return at > s && at[1] && !strchr(at + 1, '/');
    if (slash && slash > s && slash[1]) {
        for (const char *p = slash + 1; *p; p++)
            if (!isdigit((unsigned char)*p)) return 0;
        return !memchr(s, '/', (size_t)(slash - s));
    }
    return 0;
}

static int alias_at_locked(kl_track *t, int64_t mid, const char *alias, int64_t at_us, int64_t *version, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t,
                            at_us ? "SELECT version FROM alias_history WHERE model_id=? AND alias=? AND set_us<=? ORDER BY set_us DESC, id DESC LIMIT 1"
                                  : "SELECT version FROM model_aliases WHERE model_id=? AND alias=?",
                            &st, e);
    if (rc) return rc;
    kl__bind_i64(st, 1, mid);
    kl__bind_text(st, 2, alias);
    if (at_us) kl__bind_i64(st, 3, at_us);
    int s = kl__step(st);
    *version = s == KL__ROW && !kl__col_null(st, 0) ? kl__col_i64(st, 0) : 0;
    kl__free(st);
    if (s != KL__ROW && s != KL__DONE) return kl__track_sqlerr(t, s, e, "reading an alias");
    return KL_OK;
}

int kl_registry_alias_at(kl_track *t, const char *name, const char *alias, int64_t at_us, int64_t *version, kl_err *e) {
    *version = 0;
    kl__track_lock(t);
    int64_t mid = 0;
    int rc = model_id(t, name, &mid, e);
    if (!rc) rc = alias_at_locked(t, mid, alias, at_us, version, e);
    kl__track_unlock(t);
    return rc;
}

static int version_exists(kl_track *t, int64_t mid, int64_t v, kl_err *e, const char *name) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t, "SELECT 1 FROM model_versions WHERE model_id=? AND version=?", &st, e);
    if (rc) return rc;
    kl__bind_i64(st, 1, mid);
    kl__bind_i64(st, 2, v);
    int found = kl__step(st) == KL__ROW;
    kl__free(st);
    return found ? KL_OK : kl__track_notfound(t, e, "model %s has no version %lld", name, (long long)v);
}

int kl_registry_set_alias(kl_track *t, const char *name, const char *alias, int64_t version, kl_err *e) {
    if (!valid_name(alias) || isdigit((unsigned char)alias[0]))
        return kl_err_set(e, KL_EINVAL, "alias '%s' is not valid (a name starting with a letter)", alias ? alias : "");
    kl__st *st = NULL;
    kl__track_lock(t);
    int rc = kl__track_begin(t, e);
    if (rc) {
        kl__track_unlock(t);
        return rc;
    }
    int64_t mid = 0;
    if ((rc = model_id(t, name, &mid, e))) goto fail;
    if (version > 0 && (rc = version_exists(t, mid, version, e, name))) goto fail;
    /* strictly increasing times so "at time T" is unambiguous */
    int64_t now = kl_time_now_us();
    if ((rc = kl__track_prep(t, "SELECT max(set_us) FROM alias_history WHERE model_id=? AND alias=?", &st, e))) goto fail;
    kl__bind_i64(st, 1, mid);
    kl__bind_text(st, 2, alias);
    if (kl__step(st) == KL__ROW && kl__col_i64(st, 0) >= now) now = kl__col_i64(st, 0) + 1;
    kl__free(st);
    st = NULL;
    if (version > 0) {
        if ((rc = kl__track_prep(t, "INSERT INTO model_aliases(model_id, alias, version, set_us) VALUES(?, ?, ?, ?)"
                                    " ON CONFLICT(model_id, alias) DO UPDATE SET version=excluded.version, set_us=excluded.set_us",
                                 &st, e)))
            goto fail;
        kl__bind_i64(st, 3, version);
        kl__bind_i64(st, 4, now);
    } else if ((rc = kl__track_prep(t, "DELETE FROM model_aliases WHERE model_id=? AND alias=?", &st, e))) {
        goto fail;
    }
    kl__bind_i64(st, 1, mid);
    kl__bind_text(st, 2, alias);
    if ((rc = step_done(t, st, e, "setting an alias"))) goto fail;
    kl__free(st);
    st = NULL;
    if ((rc = kl__track_prep(t, "INSERT INTO alias_history(model_id, alias, version, set_us) VALUES(?, ?, ?, ?)", &st, e))) goto fail;
    kl__bind_i64(st, 1, mid);
    kl__bind_text(st, 2, alias);
    if (version > 0) kl__bind_i64(st, 3, version);
    kl__bind_i64(st, 4, now);
    if ((rc = step_done(t, st, e, "recording alias history"))) goto fail;
    kl__free(st);
    st = NULL;
    rc = kl__track_commit(t, e);
    kl__track_unlock(t);
    return rc;
fail:
    kl__free(st);
    kl__track_rollback(t);
    kl__track_unlock(t);
    return rc;
}

int kl_registry_set_tag(kl_track *t, const char *name, int64_t version, const char *key, const char *value, kl_err *e) {
    if (!key || !*key) return kl_err_set(e, KL_EINVAL, "empty tag key");
    kl__st *st = NULL;
    kl__track_lock(t);
    int64_t mid = 0;
    int rc = model_id(t, name, &mid, e);
    if (!rc && version > 0) rc = version_exists(t, mid, version, e, name);
    if (!rc)
        rc = kl__track_prep(t,
                            value ? "INSERT INTO model_tags(model_id, version, key, value) VALUES(?, ?, ?, ?)"
                                    " ON CONFLICT(model_id, version, key) DO UPDATE SET value=excluded.value"
                                  : "DELETE FROM model_tags WHERE model_id=? AND version=? AND key=?",
                            &st, e);
    if (!rc) {
        kl__bind_i64(st, 1, mid);
        kl__bind_i64(st, 2, version);
        kl__bind_text(st, 3, key);
        if (value) kl__bind_text(st, 4, value);
        rc = step_done(t, st, e, "setting a model tag");
    }
    kl__free(st);
    kl__track_unlock(t);
    return rc;
}

int kl_registry_parse_ref(kl_track *t, const char *ref, char **name, int64_t *version, kl_err *e) {
    *name = NULL;
    *version = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", ref ? ref : "");
    char *at = strchr(buf, '@'), *slash = strrchr(buf, '/');
    const char *alias = NULL;
    int64_t v = 0;
    if (at) {
        *at = 0;
        alias = at + 1;
    } else if (slash) {
        *slash = 0;
        if (kl_parse_int64(slash + 1, &v) || v <= 0)
            return kl_err_set(e, KL_EINVAL, "model reference '%s': expected NAME/VERSION with a positive version", ref);
    }
    if (!valid_name(buf)) return kl_err_set(e, KL_EINVAL, "model reference '%s': expected NAME@ALIAS, NAME/VERSION or NAME", ref ? ref : "");
    kl__track_lock(t);
    int64_t mid = 0;
    int rc = model_id(t, buf, &mid, e);
    if (rc) goto done;
    if (alias) {
        if ((rc = alias_at_locked(t, mid, alias, 0, &v, e))) goto done;
        if (!v) {
            rc = kl__track_notfound(t, e, "model %s has no alias '%s'", buf, alias);
            goto done;
        }
    } else if (v) {
        if ((rc = version_exists(t, mid, v, e, buf))) goto done;
    } else {
        kl__st *st = NULL;
        if ((rc = kl__track_prep(t, "SELECT max(version) FROM model_versions WHERE model_id=?", &st, e))) goto done;
        kl__bind_i64(st, 1, mid);
        if (kl__step(st) == KL__ROW) v = kl__col_i64(st, 0);
        kl__free(st);
        if (!v) {
            rc = kl__track_notfound(t, e, "model %s has no versions", buf);
            goto done;
        }
    }
    *name = strdup(buf);
    *version = v;
    if (!*name) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
done:
    kl__track_unlock(t);
    return rc;
}

/* ==================================================================
 * Verify and resolve
 * ================================================================== */

typedef struct {
    char *name, *path, *sha;
    int64_t version, size;
} vfile;

static void vfiles_free(vfile *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].path);
        free(v[i].sha);
    }
    free(v);
}

static int list_files(kl_track *t, const char *name, int64_t version, vfile **out, size_t *n, kl_err *e) {
    *out = NULL;
    *n = 0;
    kl__st *st = NULL;
    vfile *v = NULL;
    size_t cnt = 0, cap = 0;
    kl__track_lock(t);
    int rc = kl__track_prep(t,
                            "SELECT m.name, f.version, f.path, f.size, f.sha256 FROM model_files f JOIN models m ON m.id = f.model_id"
                            " WHERE (?1 IS NULL OR m.name = ?1) AND (?2 = 0 OR f.version = ?2) ORDER BY m.name, f.version, f.path",
                            &st, e);
    if (rc) goto done;
    kl__bind_text(st, 1, name); /* NULL: every model */
    kl__bind_i64(st, 2, version);
    int s;
    while ((s = kl__step(st)) == KL__ROW) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            vfile *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                goto done;
            }
            v = nv;
        }
        vfile *f = &v[cnt++];
        f->name = strdup(kl__col_text(st, 0));
        f->version = kl__col_i64(st, 1);
        f->path = strdup(kl__col_text(st, 2));
        f->size = kl__col_i64(st, 3);
        f->sha = strdup(kl__col_text(st, 4));
        if (!f->name || !f->path || !f->sha) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            goto done;
        }
    }
    if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "listing model files");
done:
    kl__free(st);
    kl__track_unlock(t);
    if (rc) {
        vfiles_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return KL_OK;
}

void kl_registry_object_path(kl_track *t, const char *sha256_hex, char *buf, size_t n) {
    kl__track_object_path(t, sha256_hex, buf, n);
}

/* Copies (or only hashes, when dst is NULL) an object, checking its sha256. */
static int check_object(kl_track *t, const vfile *f, const char *dst, kl_err *e) {
    char obj[4096];
    kl__track_object_path(t, f->sha, obj, sizeof obj);
    int in = open(obj, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return kl_err_set(e, KL_ECHECKSUM, "%s/%lld: %s: object %s is missing (%s)", f->name, (long long)f->version, f->path, obj,
                          strerror(errno));
    kl_afile *af = NULL;
    int rc = KL_OK;
    if (dst && (rc = kl_afile_open(dst, &af, e))) {
        close(in);
        return rc;
    }
    kl_sha256 *h = kl_sha256_new();
    char *buf = malloc(1 << 20);
    int64_t total = 0;
    if (!h || !buf) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    for (;;) {
        ssize_t r = read(in, buf, 1 << 20);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = kl_err_set(e, -errno, "%s: %s", obj, strerror(errno));
            goto done;
        }
        if (r == 0) break;
        kl_sha256_update(h, buf, (size_t)r);
        total += r;
        if (af && (rc = kl_afile_write(af, buf, (size_t)r, e))) goto done;
    }
    uint8_t d[32];
    char hex[65];
    kl_sha256_final(h, d);
    kl_sha256_hex(d, hex);
    if (strcmp(hex, f->sha) || total != f->size) {
        rc = kl_err_set(e, KL_ECHECKSUM, "%s/%lld: %s: sha256 mismatch (expected %.12s..., got %.12s..., size %lld of %lld): object %s was modified",
                        f->name, (long long)f->version, f->path, f->sha, hex, (long long)total, (long long)f->size, obj);
        goto done;
    }
    if (af) {
        rc = kl_afile_commit(af, e);
        af = NULL;
    }
done:
    kl_afile_abort(af);
    close(in);
    kl_sha256_free(h);
    free(buf);
    return rc;
}

int kl_registry_verify(kl_track *t, const char *name, int64_t version, kl_buf *report, kl_err *e) {
    vfile *v = NULL;
    size_t n = 0;
    int rc = list_files(t, name, version, &v, &n, e);
    if (rc) return rc;
    if (!n && name) {
        int64_t mid;
        kl__track_lock(t);
        rc = model_id(t, name, &mid, e);
        if (!rc && version) rc = version_exists(t, mid, version, e, name);
        kl__track_unlock(t);
        if (rc) return rc;
    }
    int bad = 0;
    char first[768] = "";
    for (size_t i = 0; i < n; i++) {
        kl_err fe = {0};
        if (check_object(t, &v[i], NULL, &fe)) {
            if (!bad) snprintf(first, sizeof first, "%s", fe.msg);
            bad++;
            if (report) kl_buf_printf(report, "%s\n", fe.msg);
        }
    }
    vfiles_free(v, n);
    if (bad) return kl_err_set(e, KL_ECHECKSUM, "%d file(s) failed verification; first: %s", bad, first);
    return KL_OK;
}

int kl_registry_resolve(kl_track *t, const char *ref, const char *out_dir, kl_err *e) {
    char *name = NULL;
    int64_t version = 0;
    vfile *v = NULL;
    size_t n = 0;
    int rc = kl_registry_parse_ref(t, ref, &name, &version, e);
    if (rc) return rc;
    if ((rc = list_files(t, name, version, &v, &n, e))) goto done;
    if ((rc = kl_mkdir_p(out_dir, e))) goto done;
    size_t i;
    for (i = 0; i < n; i++) {
        char dst[4096];
        snprintf(dst, sizeof dst, "%s/%s", out_dir, v[i].path);
        char *slash = strrchr(dst, '/');
        *slash = 0;
        if ((rc = kl_mkdir_p(dst, e))) break;
        *slash = '/';
        if ((rc = check_object(t, &v[i], dst, e))) break;
    }
    if (rc) { /* never serve part of a tampered version */
        for (size_t j = 0; j < i; j++) {
            char dst[4096];
            snprintf(dst, sizeof dst, "%s/%s", out_dir, v[j].path);
            unlink(dst);
        }
    }
done:
    free(name);
    vfiles_free(v, n);
    if (rc) kl_err_prefix(e, "resolving %s", ref);
    return rc;
}

/* ==================================================================
 * JSON views
 * ================================================================== */

static void add_tags(kl_track *t, cJSON *into, int64_t mid, int64_t version) {
    kl__st *st = NULL;
    if (kl__track_prep(t, "SELECT key, value FROM model_tags WHERE model_id=? AND version=? ORDER BY key", &st, NULL)) return;
    kl__bind_i64(st, 1, mid);
    kl__bind_i64(st, 2, version);
    while (kl__step(st) == KL__ROW) cJSON_AddStringToObject(into, kl__col_text(st, 0), kl__col_text(st, 1));
    kl__free(st);
}

int kl_registry_json(kl_track *t, const char *name, void **out_cjson, kl_err *e) {
    *out_cjson = NULL;
    kl__st *ms = NULL, *vs = NULL, *fs = NULL, *as = NULL;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl__track_lock(t);
    int rc = kl__track_prep(t, "SELECT id, name, created_us FROM models WHERE (?1 IS NULL OR name = ?1) ORDER BY name", &ms, e);
    if (!rc) rc = kl__track_prep(t, "SELECT version, created_us, run_id, signature, source FROM model_versions WHERE model_id=? ORDER BY version", &vs, e);
    if (!rc) rc = kl__track_prep(t, "SELECT path, size, sha256 FROM model_files WHERE model_id=? AND version=? ORDER BY path", &fs, e);
    if (!rc) rc = kl__track_prep(t, "SELECT alias, version, set_us FROM model_aliases WHERE model_id=? ORDER BY alias", &as, e);
    if (rc) goto done;
    kl__bind_text(ms, 1, name); /* NULL: every model */
    while (kl__step(ms) == KL__ROW) {
        int64_t mid = kl__col_i64(ms, 0);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, m);
        cJSON_AddStringToObject(m, "name", kl__col_text(ms, 1));
        cJSON_AddNumberToObject(m, "created_us", (double)kl__col_i64(ms, 2));
        cJSON *vers = cJSON_AddArrayToObject(m, "versions");
        kl__bind_i64(vs, 1, mid);
        while (kl__step(vs) == KL__ROW) {
            cJSON *v = cJSON_CreateObject();
            cJSON_AddItemToArray(vers, v);
            int64_t ver = kl__col_i64(vs, 0);
            cJSON_AddNumberToObject(v, "version", (double)ver);
            cJSON_AddNumberToObject(v, "created_us", (double)kl__col_i64(vs, 1));
            if (kl__col_null(vs, 2)) cJSON_AddNullToObject(v, "run_id");
            else cJSON_AddNumberToObject(v, "run_id", (double)kl__col_i64(vs, 2));
            const char *sig = kl__col_text(vs, 3);
            void *sjv = NULL;
            if (sig) (void)kl_json_parse(sig, strlen(sig), "signature", &sjv, NULL); /* unparsable: null */
            cJSON *sj = sjv;
            if (sj) cJSON_AddItemToObject(v, "signature", sj);
            else cJSON_AddNullToObject(v, "signature");
            const char *src = kl__col_text(vs, 4);
            if (src) cJSON_AddStringToObject(v, "source", src);
            cJSON *files = cJSON_AddArrayToObject(v, "files");
            kl__bind_i64(fs, 1, mid);
            kl__bind_i64(fs, 2, ver);
            while (kl__step(fs) == KL__ROW) {
                cJSON *f = cJSON_CreateObject();
                cJSON_AddItemToArray(files, f);
                cJSON_AddStringToObject(f, "path", kl__col_text(fs, 0));
                cJSON_AddNumberToObject(f, "size", (double)kl__col_i64(fs, 1));
                cJSON_AddStringToObject(f, "sha256", kl__col_text(fs, 2));
            }
            kl__reset(fs);
            add_tags(t, cJSON_AddObjectToObject(v, "tags"), mid, ver);
        }
        kl__reset(vs);
        cJSON *al = cJSON_AddObjectToObject(m, "aliases");
        kl__bind_i64(as, 1, mid);
        while (kl__step(as) == KL__ROW) cJSON_AddNumberToObject(al, kl__col_text(as, 0), (double)kl__col_i64(as, 1));
        kl__reset(as);
        add_tags(t, cJSON_AddObjectToObject(m, "tags"), mid, 0);
    }
    if (name && cJSON_GetArraySize(arr) == 0) rc = kl__track_notfound(t, e, "model '%s' not found", name);
done:
    kl__free(ms);
    kl__free(vs);
    kl__free(fs);
    kl__free(as);
    kl__track_unlock(t);
    if (rc) {
        cJSON_Delete(arr);
        return rc;
    }
    *out_cjson = arr;
    return KL_OK;
}

int kl_registry_history_json(kl_track *t, const char *name, void **out_cjson, kl_err *e) {
    *out_cjson = NULL;
    kl__st *st = NULL;
    cJSON *arr = NULL;
    kl__track_lock(t);
    int64_t mid = 0;
    int rc = model_id(t, name, &mid, e);
    if (!rc) rc = kl__track_prep(t, "SELECT alias, version, set_us FROM alias_history WHERE model_id=? ORDER BY set_us, id", &st, e);
    if (!rc) {
        arr = cJSON_CreateArray();
        kl__bind_i64(st, 1, mid);
        while (kl__step(st) == KL__ROW) {
            cJSON *h = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, h);
            cJSON_AddStringToObject(h, "alias", kl__col_text(st, 0));
            if (kl__col_null(st, 1)) cJSON_AddNullToObject(h, "version");
            else cJSON_AddNumberToObject(h, "version", (double)kl__col_i64(st, 1));
            cJSON_AddNumberToObject(h, "time_us", (double)kl__col_i64(st, 2));
        }
    }
    kl__free(st);
    kl__track_unlock(t);
    if (rc) return rc;
    *out_cjson = arr;
    return KL_OK;
}
