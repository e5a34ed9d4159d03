/* keel models: the model registry. register DIR --name N, list, show,
 * verify (sha256 of every stored file), alias (champion, any name; history
 * kept), history (alias changes; "what was champion at time T"), resolve
 * (materialize a verified version: NAME@ALIAS or NAME/VERSION), tag. */
#include "app.h"

#include <cjson/cJSON.h>
#include <keel/data.h>
#include <keel/feature.h>
#include <keel/profile.h>
#include <keel/track.h>
#include <stdlib.h>
#include <string.h>

/* Every command here reads an existing store, except register (creates it). */
static int open_store(kl_track **t, kl_err *e) { return app_store_open(0, t, e); }

static void print_json(const cJSON *j) {
    char *s = cJSON_Print(j);
    if (s) printf("%s\n", s);
    cJSON_free(s);
}

/* ==================================================================
 * register
 * ================================================================== */

static const app_opt reg_opts[] = {
    {"name", 'n', 1, "NAME", "registered model name (required)", 0},
    {"run", 0, 1, "ID", "run that produced the model (default: run_id in meta.json)", 0},
    {"signature", 0, 1, "JSON", "signature when DIR has no meta.json: {\"inputs\":[...],\"outputs\":[...]}", 0},
    {"features", 0, 1, "FILE",
     "features.json to register with the model (what :predict runs before it; default DIR/features.json)", 0},
    {"store", 0, 1, "FILE|URL",
     "online store of the window features (keel features materialize) to register as features.db; a redis:// URL is "
     "checked, not bundled",
     0},
    {"alias", 'a', 1, "ALIAS", "also point this alias at the new version", 1},
    {"tag", 't', 1, "KEY=VALUE", "tag the new version", 1},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec reg_spec = {
    "models register",
    "keel models register DIR --name NAME [--features FILE] [--store FILE] [--run ID] [--alias A]... [--tag K=V]...",
    "Store the files of DIR as a new immutable version of a registered model.",
    "Files are copied into the content-addressed object store (sha256). The signature (inputs and\n"
    "outputs with dtypes and shapes) is read from DIR/meta.json when present, and so is the run\n"
    "that trained it (meta.json's run_id, written by a tracked keel train; --run overrides).\n"
    "--features and --store bundle the features and the online store of their window features\n"
    "as features.json and features.db, the layout keel serve's :predict reads (what keel\n"
    "pipeline's export stage writes). Window features without a store are refused. --store\n"
    "redis://HOST:PORT/DB names a shared store instead: it must answer, nothing is bundled, and\n"
    "the version is served with keel serve --feature-store URL.",
    reg_opts, KL_ARRAY_LEN(reg_opts), 1, 1};

/* What :predict will need from this version: features.json (given or in
 * DIR) with window features needs features.db beside it (given or in DIR),
 * filled for those features and, when meta.json names the feature hash the
 * model was trained on, the same features. */
static int check_features(const char *dir, const char *features, const char *store, const char *name, kl_err *e) {
    char fp[4200], sp[4200];
    snprintf(fp, sizeof fp, "%s/features.json", dir);
    if (!features && !kl_path_exists(fp)) {
        if (store)
            return kl_err_set(e, KL_EINVAL, "--store %s: the model has no features.json (give it with --features)",
                              store);
        return KL_OK;
    }
    const char *fpath = features ? features : fp;
    snprintf(sp, sizeof sp, "%s/features.db", dir);
    const char *spath = store ? store : kl_path_exists(sp) ? sp : NULL;
    kl_features *f = NULL;
    kl_fstore *fs = NULL;
    void *mj = NULL;
    int rc = kl_features_load(fpath, &f, e);
    if (rc) return rc;
    const char *win = kl_features_first_window(f);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/meta.json", dir);
    if (kl_path_exists(mp) && !kl_json_load_file(mp, &mj, NULL)) {
        const cJSON *fh = cJSON_GetObjectItem(cJSON_GetObjectItem(mj, "data"), "feature_hash");
        if (cJSON_IsString(fh) && strcmp(fh->valuestring, kl_features_hash(f))) {
            rc = kl_err_set(e, KL_ESTATE,
                            "%s: feature hash %.12s, but the model in %s was trained on features %.12s (meta.json)",
                            fpath, kl_features_hash(f), dir, fh->valuestring);
            goto done;
        }
    }
    if (win && !spath) {
        rc = kl_err_set(
            e, KL_EINVAL,
            "%s: feature %s is a window over recent events, which :predict reads from the online store; fill "
            "one with 'keel features materialize %s --data DATASET --store STORE.db' and register it with the "
            "model: keel models register %s --name %s --features %s --store STORE.db",
            fpath, win, fpath, dir, name, fpath);
        goto done;
    }
    if (spath) {
        if (!kl_fstore_is_url(spath) && !kl_path_exists(spath)) {
            rc = kl_err_set(e, KL_ENOTFOUND, "--store %s: no such file", spath);
            goto done;
        }
        if ((rc = kl_fstore_open(f, spath, &fs, e))) goto done; /* a store filled for these features */
    }
done:
    cJSON_Delete(mj);
    kl_fstore_free(fs);
    kl_features_free(f);
    return rc;
}

static int models_register(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&reg_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *name = app_get(&a, "name");
    if (!name) return app_usage_error(&reg_spec, "--name is required");
    int64_t run;
    if ((rc = app_get_int(&a, &reg_spec, "run", 0, &run)) >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    int64_t v = 0;
    const char *features = app_get(&a, "features"), *store = app_get(&a, "store");
    kl_registry_file extra[3];
    size_t nextra = 0;
    char prof[1024], own[4200];
    if (features) extra[nextra++] = (kl_registry_file){"features.json", features};
    if (features) { /* its reference profile travels with it unless DIR has one (training's, with the outputs) */
        kl_profile_path_for(features, prof, sizeof prof);
        snprintf(own, sizeof own, "%s/profile.json", a.pos[0]);
        if (kl_path_exists(prof) && !kl_path_exists(own)) extra[nextra++] = (kl_registry_file){"profile.json", prof};
    }
    if (store && !kl_fstore_is_url(store)) extra[nextra++] = (kl_registry_file){"features.db", store};
    if (check_features(a.pos[0], features, store, name, &e)) return app_fail(&e);
    if (app_store_open(1, &t, &e) ||
        kl_registry_register_files(t, name, a.pos[0], extra, nextra, run, app_get(&a, "signature"), &v, &e))
        goto fail;
    const char *vals[APP_MAX_VALUES];
    int na = app_get_all(&a, "alias", vals, APP_MAX_VALUES);
    for (int i = 0; i < na; i++)
        if (kl_registry_set_alias(t, name, vals[i], v, &e)) goto fail;
    int nt = app_get_all(&a, "tag", vals, APP_MAX_VALUES);
    for (int i = 0; i < nt; i++) {
        const char *eq = strchr(vals[i], '=');
        if (!eq || eq == vals[i]) {
            kl_track_close(t);
            return app_usage_error(&reg_spec, "--tag expects KEY=VALUE, got '%s'", vals[i]);
        }
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - vals[i]), vals[i]);
        if (kl_registry_set_tag(t, name, v, key, eq + 1, &e)) goto fail;
    }
    /* the run it came from, as recorded with the version */
    int64_t from_run = 0;
    void *mj = NULL;
    if (!kl_registry_json(t, name, &mj, &e)) {
        const cJSON *vv;
        const cJSON *vs = cJSON_GetObjectItem(cJSON_GetArrayItem(mj, 0), "versions");
        cJSON_ArrayForEach(vv, vs) {
            if (app_jnum(vv, "version") == (double)v && cJSON_IsNumber(cJSON_GetObjectItem(vv, "run_id")))
                from_run = (int64_t)app_jnum(vv, "run_id");
        }
    }
    cJSON_Delete(mj);
    if (app_flag(&a, "json")) {
        printf("{\"name\":\"%s\",\"version\":%lld,\"run_id\":", name, (long long)v);
        if (from_run) printf("%lld}\n", (long long)from_run);
        else printf("null}\n");
    } else if (from_run) {
        printf("registered %s version %lld (from run %lld)\n", name, (long long)v, (long long)from_run);
    } else {
        printf("registered %s version %lld\n", name, (long long)v);
    }
    kl_track_close(t);
    return APP_EXIT_OK;
fail:
    kl_track_close(t);
    return app_fail(&e);
}

/* ==================================================================
 * list / show
 * ================================================================== */

static const app_opt list_opts[] = {{"json", 0, 0, NULL, "machine-readable output", 0}};
static const app_cmd_spec list_spec = {"models list", "keel models list [--json]", "List registered models, their versions and aliases.",
                                       NULL, list_opts, KL_ARRAY_LEN(list_opts), 0, 0};
static const app_cmd_spec show_spec = {"models show", "keel models show NAME[/VERSION|@ALIAS] [--json]",
                                       "Show a model: versions (files, sha256, signature, producing run), aliases, tags.", NULL,
                                       list_opts, KL_ARRAY_LEN(list_opts), 1, 1};

static void aliases_of(const cJSON *m, double version, char *buf, size_t n) {
    buf[0] = 0;
    const cJSON *al;
    size_t len = 0;
    cJSON_ArrayForEach(al, cJSON_GetObjectItem(m, "aliases")) if (al->valuedouble == version && len < n) len +=
        (size_t)snprintf(buf + len, n - len, "%s@%s", len ? ", " : "", al->string);
}

static int models_list(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&list_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    void *j = NULL;
    if (app_store_open_list(&t, &e) || (t && kl_registry_json(t, NULL, &j, &e))) {
        kl_track_close(t);
        return app_fail(&e);
    }
    if (!j) j = cJSON_CreateArray(); /* no store yet: no models */
    if (app_flag(&a, "json")) print_json(j);
    else {
        printf("%-24s %8s %-20s %s\n", "NAME", "VERSIONS", "CREATED", "ALIASES");
        const cJSON *m;
        cJSON_ArrayForEach(m, (cJSON *)j) {
            char c[40], al[512] = "";
            size_t len = 0;
            app_fmt_time(cJSON_GetObjectItem(m, "created_us")->valuedouble, c, sizeof c);
            const cJSON *x;
            cJSON_ArrayForEach(x, cJSON_GetObjectItem(m, "aliases")) if (len < sizeof al) len +=
                (size_t)snprintf(al + len, sizeof al - len, "%s%s=%g", len ? " " : "", x->string, x->valuedouble);
            printf("%-24s %8d %-20s %s\n", cJSON_GetObjectItem(m, "name")->valuestring, cJSON_GetArraySize(cJSON_GetObjectItem(m, "versions")),
                   c, al);
        }
    }
    cJSON_Delete(j);
    kl_track_close(t);
    return APP_EXIT_OK;
}

/* the summary of a version's reference profile (docs/monitoring.md) */
static void show_profile(kl_track *t, const char *sha) {
    char path[4096];
    kl_registry_object_path(t, sha, path, sizeof path);
    kl_profile *p = NULL;
    kl_err e = {0};
    if (kl_profile_load(path, &p, &e)) {
        printf("  profile    unreadable: %s\n", e.msg);
        return;
    }
    kl_buf b;
    kl_buf_init(&b);
    kl_profile_summary(p, &b);
    for (char *l = b.data, *nl; l && *l; l = nl ? nl + 1 : l + strlen(l)) {
        nl = strchr(l, '\n');
        printf("  %.*s\n", nl ? (int)(nl - l) : (int)strlen(l), l);
    }
    kl_buf_free(&b);
    kl_profile_free(p);
}

static int models_show(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&show_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    void *j = NULL;
    char *name = NULL;
    int64_t only = 0;
    if (open_store(&t, &e)) return app_fail(&e);
    if (strchr(a.pos[0], '@') || strchr(a.pos[0], '/')) {
        if (kl_registry_parse_ref(t, a.pos[0], &name, &only, &e)) goto fail;
    } else if (!(name = strdup(a.pos[0]))) {
        kl_err_set(&e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    if (kl_registry_json(t, name, &j, &e)) goto fail;
    cJSON *m = cJSON_GetArrayItem(j, 0);
    if (only) { /* keep only the asked version */
        cJSON *vs = cJSON_GetObjectItem(m, "versions");
        for (int i = cJSON_GetArraySize(vs) - 1; i >= 0; i--)
            if (cJSON_GetObjectItem(cJSON_GetArrayItem(vs, i), "version")->valuedouble != (double)only) cJSON_DeleteItemFromArray(vs, i);
    }
    if (app_flag(&a, "json")) print_json(m);
    else {
        printf("model %s\n", name);
        const cJSON *tg;
        cJSON_ArrayForEach(tg, cJSON_GetObjectItem(m, "tags")) printf("  tag %s = %s\n", tg->string, tg->valuestring);
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(m, "versions")) {
            char c[40], al[256];
            double ver = cJSON_GetObjectItem(v, "version")->valuedouble;
            app_fmt_time(cJSON_GetObjectItem(v, "created_us")->valuedouble, c, sizeof c);
            aliases_of(m, ver, al, sizeof al);
            printf("version %.0f  created %s%s%s\n", ver, c, al[0] ? "  " : "", al);
            const cJSON *run = cJSON_GetObjectItem(v, "run_id");
            if (cJSON_IsNumber(run)) printf("  run        %.0f\n", run->valuedouble);
            const cJSON *src = cJSON_GetObjectItem(v, "source");
            if (cJSON_IsString(src)) printf("  source     %s\n", src->valuestring);
            const cJSON *sig = cJSON_GetObjectItem(v, "signature");
            if (cJSON_IsObject(sig)) {
                char *s = cJSON_PrintUnformatted(sig);
                printf("  signature  %s\n", s);
                cJSON_free(s);
            }
            cJSON_ArrayForEach(tg, cJSON_GetObjectItem(v, "tags")) printf("  tag        %s = %s\n", tg->string, tg->valuestring);
            const cJSON *f;
            cJSON_ArrayForEach(f, cJSON_GetObjectItem(v, "files"))
                printf("  file       %-28s %10.0f  %.16s...\n", cJSON_GetObjectItem(f, "path")->valuestring,
                       cJSON_GetObjectItem(f, "size")->valuedouble, cJSON_GetObjectItem(f, "sha256")->valuestring);
            cJSON_ArrayForEach(f, cJSON_GetObjectItem(v, "files"))
                if (!strcmp(cJSON_GetObjectItem(f, "path")->valuestring, "profile.json"))
                    show_profile(t, cJSON_GetObjectItem(f, "sha256")->valuestring);
        }
    }
    cJSON_Delete(j);
    free(name);
    kl_track_close(t);
    return APP_EXIT_OK;
fail:
    cJSON_Delete(j);
    free(name);
    kl_track_close(t);
    return app_fail(&e);
}

/* ==================================================================
 * verify
 * ================================================================== */

static const app_cmd_spec verify_spec = {"models verify", "keel models verify [NAME[/VERSION]] [--json]",
                                         "Check the sha256 of every stored file of a model (or of all models).",
                                         "Exit 0 when every file matches, 1 when a file is tampered or missing (each is named).",
                                         list_opts, KL_ARRAY_LEN(list_opts), 0, 1};

static int models_verify(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&verify_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    char *name = NULL;
    int64_t v = 0;
    kl_buf rep;
    kl_buf_init(&rep);
    if (open_store(&t, &e)) return app_fail(&e);
    if (a.npos && strchr(a.pos[0], '/')) {
        if (kl_registry_parse_ref(t, a.pos[0], &name, &v, &e)) {
            kl_track_close(t);
            return app_fail(&e);
        }
    } else if (a.npos) {
        name = strdup(a.pos[0]);
    }
    int vr = kl_registry_verify(t, name, v, &rep, &e);
    if (app_flag(&a, "json")) {
        printf("{\"ok\":%s,\"problems\":[", vr ? "false" : "true");
        char *line = rep.data, *save = NULL;
        int first = 1;
        for (char *l = line ? strtok_r(line, "\n", &save) : NULL; l; l = strtok_r(NULL, "\n", &save)) {
            kl_buf b;
            kl_buf_init(&b);
            kl_buf_json_str(&b, l);
            printf("%s%s", first ? "" : ",", b.data);
            kl_buf_free(&b);
            first = 0;
        }
        printf("]}\n");
        rc = vr ? APP_EXIT_FAIL : APP_EXIT_OK;
        if (vr && vr != KL_ECHECKSUM) rc = app_fail(&e);
    } else if (vr == KL_ECHECKSUM) {
        /* one line per bad file, then the summary */
        fprintf(stderr, "%s", rep.data ? rep.data : "");
        char *colon = strchr(e.msg, ';');
        if (colon) *colon = 0;
        rc = app_fail(&e);
    } else if (vr) {
        rc = app_fail(&e);
    } else {
        printf("ok: every file of %s matches its sha256\n", name ? a.pos[0] : "every model");
        rc = APP_EXIT_OK;
    }
    kl_buf_free(&rep);
    free(name);
    kl_track_close(t);
    return rc;
}

/* ==================================================================
 * alias / history / resolve / tag
 * ================================================================== */

static const app_opt alias_opts[] = {{"delete", 'd', 0, NULL, "remove the alias (no VERSION)", 0}};
static const app_cmd_spec alias_spec = {"models alias", "keel models alias NAME ALIAS VERSION | keel models alias NAME ALIAS --delete",
                                        "Point an alias (champion, challenger, any name) at a version; one version per alias.",
                                        "Every change is kept with its time: see 'keel models history NAME'.", alias_opts,
                                        KL_ARRAY_LEN(alias_opts), 2, 3};

static int models_alias(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&alias_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t v = 0;
    int del = app_flag(&a, "delete");
    if (del && a.npos != 2) return app_usage_error(&alias_spec, "--delete takes no VERSION");
    if (!del && (a.npos != 3 || kl_parse_int64(a.pos[2], &v) || v <= 0))
        return app_usage_error(&alias_spec, "expected NAME ALIAS VERSION (a positive version number)");
    kl_err e = {0};
    kl_track *t = NULL;
    if (open_store(&t, &e) || kl_registry_set_alias(t, a.pos[0], a.pos[1], v, &e)) {
        kl_track_close(t);
        return app_fail(&e);
    }
    if (del) printf("%s@%s removed\n", a.pos[0], a.pos[1]);
    else printf("%s@%s -> version %lld\n", a.pos[0], a.pos[1], (long long)v);
    kl_track_close(t);
    return APP_EXIT_OK;
}

static const app_opt hist_opts[] = {
    {"at", 0, 1, "TIME", "which version each alias pointed to at TIME (RFC 3339 UTC, or µs since epoch)", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec hist_spec = {"models history", "keel models history NAME [--at TIME] [--json]",
                                       "Alias history of a model: every change with its time.", NULL, hist_opts,
                                       KL_ARRAY_LEN(hist_opts), 1, 1};

/* An ISO 8601 time (naive = UTC; the one timestamp grammar of ingest) or µs. */
static int parse_time(const char *s, int64_t *us) {
    if (!kl_parse_int64(s, us)) return 0;
    return kl_parse_timestamp(s, strlen(s), NULL, us) ? -1 : 0;
}

static int models_history(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&hist_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    void *j = NULL;
    int64_t at = 0;
    if (app_get(&a, "at") && parse_time(app_get(&a, "at"), &at))
        return app_usage_error(&hist_spec, "--at expects an RFC 3339 time (2026-11-29T21:04:14Z) or µs since epoch");
    if (open_store(&t, &e) || kl_registry_history_json(t, a.pos[0], &j, &e)) {
        kl_track_close(t);
        return app_fail(&e);
    }
    int json = app_flag(&a, "json");
    if (at) {
        /* the version of each alias at that time */
        cJSON *res = cJSON_CreateObject();
        const cJSON *h;
        cJSON_ArrayForEach(h, (cJSON *)j) {
            const char *al = cJSON_GetObjectItem(h, "alias")->valuestring;
            if (cJSON_GetObjectItem(res, al)) continue;
            int64_t v = 0;
            if (kl_registry_alias_at(t, a.pos[0], al, at, &v, &e)) {
                cJSON_Delete(res);
                cJSON_Delete(j);
                kl_track_close(t);
                return app_fail(&e);
            }
            if (v) cJSON_AddNumberToObject(res, al, (double)v);
            else cJSON_AddNullToObject(res, al);
        }
        if (json) print_json(res);
        else {
            const cJSON *x;
            cJSON_ArrayForEach(x, res) {
                if (cJSON_IsNumber(x)) printf("%s@%s -> version %.0f\n", a.pos[0], x->string, x->valuedouble);
                else printf("%s@%s -> (none)\n", a.pos[0], x->string);
            }
        }
        cJSON_Delete(res);
    } else if (json) {
        print_json(j);
    } else {
        printf("%-28s %-16s %s\n", "TIME (UTC)", "ALIAS", "VERSION");
        const cJSON *h;
        cJSON_ArrayForEach(h, (cJSON *)j) {
            char ts[40];
            kl_time_rfc3339((int64_t)cJSON_GetObjectItem(h, "time_us")->valuedouble, ts, sizeof ts);
            const cJSON *v = cJSON_GetObjectItem(h, "version");
            if (cJSON_IsNumber(v)) printf("%-28s %-16s %.0f\n", ts, cJSON_GetObjectItem(h, "alias")->valuestring, v->valuedouble);
            else printf("%-28s %-16s (removed)\n", ts, cJSON_GetObjectItem(h, "alias")->valuestring);
        }
    }
    cJSON_Delete(j);
    kl_track_close(t);
    return APP_EXIT_OK;
}

static const app_cmd_spec resolve_spec = {"models resolve", "keel models resolve NAME@ALIAS|NAME/VERSION|NAME OUT_DIR",
                                          "Write the files of a version to OUT_DIR, verifying each sha256 (a tampered file is never written).",
                                          NULL, NULL, 0, 2, 2};

static int models_resolve(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&resolve_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    if (open_store(&t, &e) || kl_registry_resolve(t, a.pos[0], a.pos[1], &e)) {
        kl_track_close(t);
        return app_fail(&e);
    }
    printf("%s -> %s\n", a.pos[0], a.pos[1]);
    kl_track_close(t);
    return APP_EXIT_OK;
}

static const app_opt tag_opts[] = {{"delete", 'd', 0, NULL, "remove the tag", 0}};
static const app_cmd_spec tag_spec = {"models tag", "keel models tag NAME[/VERSION] KEY [VALUE] [--delete]",
                                      "Set (or remove) a tag of a model or of one of its versions.", NULL, tag_opts,
                                      KL_ARRAY_LEN(tag_opts), 2, 3};

static int models_tag(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&tag_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int del = app_flag(&a, "delete");
    if (del != (a.npos == 2)) return app_usage_error(&tag_spec, "give VALUE, or --delete without VALUE");
    kl_err e = {0};
    kl_track *t = NULL;
    char *name = NULL;
    int64_t v = 0;
    if (open_store(&t, &e)) return app_fail(&e);
    if (strchr(a.pos[0], '/') || strchr(a.pos[0], '@')) rc = kl_registry_parse_ref(t, a.pos[0], &name, &v, &e);
    else rc = (name = strdup(a.pos[0])) ? KL_OK : kl_err_set(&e, KL_ENOMEM, "out of memory");
    if (!rc) rc = kl_registry_set_tag(t, name, v, a.pos[1], del ? NULL : a.pos[2], &e);
    free(name);
    kl_track_close(t);
    return rc ? app_fail(&e) : APP_EXIT_OK;
}

int cmd_models(int argc, char **argv) {
    static const app_command sub[] = {
        {"register", "store a model folder as a new immutable version", models_register},
        {"list", "registered models", models_list},
        {"show", "versions, files, signature, aliases of a model", models_show},
        {"verify", "check the sha256 of stored files", models_verify},
        {"alias", "point an alias at a version", models_alias},
        {"history", "alias history (and --at TIME)", models_history},
        {"resolve", "write a verified version to a folder", models_resolve},
        {"tag", "tag a model or a version", models_tag},
    };
    return app_dispatch("models", sub, KL_ARRAY_LEN(sub), argc, argv);
}
