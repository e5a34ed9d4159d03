/* keel pipeline driver: reads PIPELINE.yaml, decides per stage whether its
 * cached outputs are still valid (sha256 of the code version, the stage's
 * config, the identities of the upstream outputs and the files the stage
 * reads, compared with OUT/pipeline-state.json), runs the others in order,
 * records every stage in the experiment store as a child of the pipeline's
 * run, links the lineage chain and writes report.html. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pipeline_int.h"

#ifndef KEEL_VERSION
#define KEEL_VERSION "unknown"
#define KEEL_GIT_COMMIT "unknown"
#endif

static const char *const stage_names[KL_STAGE_COUNT] = {"ingest", "validate", "features", "train", "evaluate", "export", "register", "serve"};

const char *kl_pipeline_stage_name(int s) { return s >= 0 && s < KL_STAGE_COUNT ? stage_names[s] : "?"; }

int kl_pipeline_stage_parse(const char *name) {
    for (int i = 0; i < KL_STAGE_COUNT; i++) if (!strcmp(name, stage_names[i])) return i;
    return -1;
}

/* ================================================================ helpers */

char *kl__pl_path(const pl_ctx *c, const char *p) {
    kl_buf b;
    kl_buf_init(&b);
    if (p[0] == '/') kl_buf_puts(&b, p);
    else kl_buf_printf(&b, "%s/%s", c->base, p);
    return kl_buf_take(&b);
}

cJSON *kl__pl_stage_state(const pl_ctx *c, int stage) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(c->state, "stages"), stage_names[stage]);
}

const char *kl__pl_out_str(const pl_ctx *c, int stage, const char *key) {
    cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(kl__pl_stage_state(c, stage), "out"), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

double kl__pl_out_num(const pl_ctx *c, int stage, const char *key) {
    cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(kl__pl_stage_state(c, stage), "out"), key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Canonical text of a config node (for the cache key). */
static void canon(kl_buf *b, const kl_node *n) {
    switch (kl_node_kind_of(n)) {
    case KL_NODE_MAP:
        kl_buf_puts(b, "{");
        for (size_t i = 0; i < kl_node_len(n); i++) {
            kl_buf_json_str(b, kl_node_key_at(n, i));
            kl_buf_puts(b, ":");
            canon(b, kl_node_at(n, i));
            kl_buf_puts(b, ",");
        }
        kl_buf_puts(b, "}");
        break;
    case KL_NODE_SEQ:
        kl_buf_puts(b, "[");
        for (size_t i = 0; i < kl_node_len(n); i++) { canon(b, kl_node_at(n, i)); kl_buf_puts(b, ","); }
        kl_buf_puts(b, "]");
        break;
    default:
        kl_buf_json_str(b, kl_node_scalar(n) ? kl_node_scalar(n) : "");
    }
}

static int save_state(pl_ctx *c, kl_err *e) { return kl_json_write_file(c->res->state_file, c->state, 1, e); }

static void logf_stage(pl_ctx *c, int s, const char *what, double secs, const char *note) {
    fprintf(c->log, "[%d/%d] %-9s %-8s", s + 1, KL_STAGE_COUNT, stage_names[s], what);
    if (secs >= 0) fprintf(c->log, " %7.2f s", secs);
    if (note && *note) fprintf(c->log, "  %s", note);
    fprintf(c->log, "\n");
    fflush(c->log);
}

/* A child run of the pipeline's run for a stage that is not a training run. */
static int record_stage(pl_ctx *c, int s, int cached, const char *key, double secs, const cJSON *out, int failed, kl_err *e) {
    if (!c->t) return KL_OK;
    kl_track_run *r = NULL;
    int rc = kl_track_run_start(c->t, "pipeline", stage_names[s], c->run_id, &r, e);
    if (rc) return rc;
    if (c->cfg[s] && kl_node_kind_of(c->cfg[s]) == KL_NODE_MAP) {
        kl_kv kv[32];
        size_t n = 0;
        for (size_t i = 0; i < kl_node_len(c->cfg[s]) && n < 32; i++) {
            const char *v = kl_node_scalar(kl_node_at(c->cfg[s], i));
            if (v) kv[n++] = (kl_kv){kl_node_key_at(c->cfg[s], i), v};
        }
        if (n) rc = kl_track_log_params(r, kv, n, e);
    }
    if (!rc) rc = kl_track_set_tag(r, "stage", stage_names[s], e);
    if (!rc) rc = kl_track_set_tag(r, "cached", cached ? "true" : "false", e);
    if (!rc) rc = kl_track_set_tag(r, "cache_key", key, e);
    for (cJSON *it = out ? out->child : NULL; it && !rc; it = it->next) {
        char num[64];
        const char *v = cJSON_IsString(it) ? it->valuestring : NULL;
        if (cJSON_IsNumber(it)) { snprintf(num, sizeof num, "%.17g", it->valuedouble); v = num; }
        if (v && strlen(v) < 1024) rc = kl_track_set_tag(r, it->string, v, e);
    }
    if (!rc) {
        kl_metric_point p = {"seconds", 0, 0, secs};
        rc = kl_track_log_metrics(r, &p, 1, e);
    }
    if (!rc && s == KL_STAGE_FEATURES) {
        kl_track_lineage lin = {0};
        lin.dataset_version =
            kl__pl_out_str(c, KL_STAGE_INGEST, "id")[0] ? kl__pl_out_str(c, KL_STAGE_INGEST, "id") : NULL;
        lin.feature_hash = cJSON_GetStringValue(cJSON_GetObjectItem(out, "feature_hash"));
        rc = kl_track_set_lineage(r, &lin, e);
    }
    int rc2 = kl_track_run_end(r, failed ? KL_RUN_FAILED : KL_RUN_FINISHED, rc ? NULL : e);
    return rc ? rc : rc2;
}

/* The lineage chain on the pipeline's run: dataset version -> feature hash
 * -> training run -> model version -> alias. */
static int link_lineage(pl_ctx *c, kl_track_run *r, kl_err *e) {
    kl_track_lineage lin = {0};
    const char *dv = kl__pl_out_str(c, KL_STAGE_INGEST, "id"),
               *fh = kl__pl_out_str(c, KL_STAGE_FEATURES, "feature_hash");
    lin.dataset_version = *dv ? dv : NULL;
    lin.feature_hash = *fh ? fh : NULL;
    lin.code_version = KEEL_VERSION " (" KEEL_GIT_COMMIT ")";
    int rc = kl_track_set_lineage(r, &lin, e);
    char v[256];
    double tr = kl__pl_out_num(c, KL_STAGE_TRAIN, "run_id");
    if (!rc && isfinite(tr)) { snprintf(v, sizeof v, "%.0f", tr); rc = kl_track_set_tag(r, "train_run", v, e); }
    const char *model = kl__pl_out_str(c, KL_STAGE_REGISTER, "model"),
               *alias = kl__pl_out_str(c, KL_STAGE_REGISTER, "alias");
    double ver = kl__pl_out_num(c, KL_STAGE_REGISTER, "version");
    if (!rc && *model && isfinite(ver)) { snprintf(v, sizeof v, "%s/%.0f", model, ver); rc = kl_track_set_tag(r, "model_version", v, e); }
    if (!rc && *model && *alias) { snprintf(v, sizeof v, "%s@%s", model, alias); rc = kl_track_set_tag(r, "alias", v, e); }
    if (!rc) rc = kl_track_set_tag(r, "out_dir", c->out, e);
    return rc;
}

static void fill_result(pl_ctx *c) {
    kl_pipeline_result *r = c->res;
    snprintf(r->dataset_version, sizeof r->dataset_version, "%s", kl__pl_out_str(c, KL_STAGE_INGEST, "id"));
    snprintf(r->feature_hash, sizeof r->feature_hash, "%s", kl__pl_out_str(c, KL_STAGE_FEATURES, "feature_hash"));
    double v = kl__pl_out_num(c, KL_STAGE_TRAIN, "run_id");
    r->train_run_id = isfinite(v) ? (int64_t)v : 0;
    v = kl__pl_out_num(c, KL_STAGE_REGISTER, "version");
    r->model_version = isfinite(v) ? (int64_t)v : 0;
    snprintf(r->model, sizeof r->model, "%s", kl__pl_out_str(c, KL_STAGE_REGISTER, "model"));
    if (!r->model[0]) snprintf(r->model, sizeof r->model, "%s", kl__pl_out_str(c, KL_STAGE_EXPORT, "model"));
    snprintf(r->alias, sizeof r->alias, "%s", kl__pl_out_str(c, KL_STAGE_REGISTER, "alias"));
    snprintf(r->repo, sizeof r->repo, "%s", kl__pl_out_str(c, KL_STAGE_EXPORT, "repo"));
    r->test_auc = kl__pl_out_num(c, KL_STAGE_EVALUATE, "auc");
    r->bayes_auc = kl__pl_out_num(c, KL_STAGE_EVALUATE, "reference_auc");
    r->test_accuracy = kl__pl_out_num(c, KL_STAGE_EVALUATE, "accuracy");
    v = kl__pl_out_num(c, KL_STAGE_EVALUATE, "rows");
    r->test_rows = isfinite(v) ? (int64_t)v : 0;
    for (int s = 0; s < KL_STAGE_COUNT; s++) {
        cJSON *st = kl__pl_stage_state(c, s);
        double ls = cJSON_GetNumberValue(cJSON_GetObjectItem(st, "seconds"));
        r->st[s].last_seconds = isfinite(ls) ? ls : 0;
        const char *note = cJSON_GetStringValue(cJSON_GetObjectItem(st, "note"));
        if (note && !r->st[s].note[0]) snprintf(r->st[s].note, sizeof r->st[s].note, "%s", note);
    }
}

/* ================================================================ the run */

/* ---- stage A: the file ---------------------------------------------------- */

/* Loads the pipeline file with the --set overrides and checks its shape and
 * every stage's keys before anything runs. */
static int load_file(pl_ctx *c, kl_doc **doc, kl_err *e) {
    const kl_pipeline_opts *o = c->o;
    int rc = kl_doc_load_file(o->path, doc, e);
    if (rc) return rc;
    for (int i = 0; i < o->nsets; i++) {
        const char *eq = strchr(o->sets[i], '=');
        if (!eq || eq == o->sets[i]) return kl_err_set(e, KL_EINVAL, "--set expects KEY=VALUE, got '%s'", o->sets[i]);
        char k[256];
        snprintf(k, sizeof k, "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
        if ((rc = kl_doc_set(*doc, k, eq + 1, "--set", e))) return rc;
    }
    c->root = kl_doc_root(*doc);
    static const char *top[] = {"name", "description", "out", "tracking", "stages"};
    if (kl_node_kind_of(c->root) != KL_NODE_MAP)
        return kl_node_error(c->root, e, KL_EINVAL, "a pipeline file is a map with 'stages'");
    if ((rc = kl_spec_check_keys(c->root, top, KL_ARRAY_LEN(top), e))) return rc;
    const kl_node *stages = kl_node_get(c->root, "stages");
    if (!stages || kl_node_kind_of(stages) != KL_NODE_MAP)
        return kl_node_error(stages ? stages : c->root, e, KL_EINVAL, "stages: a map of stage name -> config");
    if ((rc = kl_spec_check_keys(stages, stage_names, KL_STAGE_COUNT, e))) return rc;
    for (int s = 0; s < KL_STAGE_COUNT; s++) c->cfg[s] = kl_node_get(stages, stage_names[s]);
    static const int required[] = {KL_STAGE_INGEST, KL_STAGE_FEATURES, KL_STAGE_TRAIN};
    for (size_t i = 0; i < KL_ARRAY_LEN(required); i++)
        if (!c->cfg[required[i]])
            return kl_node_error(stages, e, KL_EINVAL, "stages.%s is required", stage_names[required[i]]);
    for (int s = 0; s < KL_STAGE_COUNT; s++) /* every stage's keys, before any stage runs */
        if (c->cfg[s] && (rc = kl__pl_stage_check_keys(c, s, e))) return rc;
    (void)kl_node_get(c->root, "description"); /* for the reader only */
    const char *name;
    if ((rc = kl_spec_str(c->root, "name", "pipeline", &name, e))) return rc;
    snprintf(c->res->name, sizeof c->res->name, "%s", name);
    return KL_OK;
}

/* ---- stage B: the folders, the selection, the state ---------------------- */

/* The file's folder (paths in the file are relative to it) and the output
 * folder (--out, else the file's out:, relative to the file), created. */
static int resolve_folders(pl_ctx *c, kl_err *e) {
    const kl_pipeline_opts *o = c->o;
    kl_pipeline_result *res = c->res;
    char *abs = realpath(o->path, NULL);
    if (!abs) return kl_err_set(e, KL_ENOTFOUND, "%s: cannot resolve the path", o->path);
    char *slash = strrchr(abs, '/');
    snprintf(c->base, sizeof c->base, "%.*s", slash && slash != abs ? (int)(slash - abs) : 1, abs);
    free(abs);
    const char *outv;
    int rc = kl_spec_str(c->root, "out", "out", &outv, e);
    if (rc) return rc;
    if (o->out_dir) {
        char cwd[4096];
        if (o->out_dir[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(c->out, sizeof c->out, "%s", o->out_dir);
        else snprintf(c->out, sizeof c->out, "%s/%s", cwd, o->out_dir);
    } else {
        char *p = kl__pl_path(c, outv);
        snprintf(c->out, sizeof c->out, "%s", p ? p : outv);
        free(p);
    }
    if ((rc = kl_mkdir_p(c->out, e))) return rc;
    snprintf(res->out_dir, sizeof res->out_dir, "%s", c->out);
    snprintf(res->state_file, sizeof res->state_file, "%s/pipeline-state.json", c->out);
    snprintf(res->report, sizeof res->report, "%s/report.html", c->out);
    return KL_OK;
}

/* --from / --only as stage indices (-1: not given). */
static int select_stages(const pl_ctx *c, int *from, int *only, kl_err *e) {
    const kl_pipeline_opts *o = c->o;
    static const char *const all = "ingest, validate, features, train, evaluate, export, register, serve";
    *from = *only = -1;
    if (o->from && (*from = kl_pipeline_stage_parse(o->from)) < 0)
        return kl_err_set(e, KL_EINVAL, "--from %s: not a stage (%s)", o->from, all);
    if (o->only && (*only = kl_pipeline_stage_parse(o->only)) < 0)
        return kl_err_set(e, KL_EINVAL, "--only %s: not a stage (%s)", o->only, all);
    if ((*from >= 0 && !c->cfg[*from]) || (*only >= 0 && !c->cfg[*only]))
        return kl_err_set(e, KL_EINVAL, "stage %s is not in %s", stage_names[*from >= 0 ? *from : *only], o->path);
    return KL_OK;
}

/* pipeline-state.json of an earlier run (unreadable: every stage runs). */
static void load_state(pl_ctx *c, kl_err *e) {
    const char *sf = c->res->state_file;
    if (kl_path_exists(sf)) {
        void *j = NULL;
        if (kl_json_load_file(sf, &j, e)) {
            kl_log(KL_LOG_WARN, "pipeline", "%s unreadable (%s); every stage runs", sf, kl_err_what(e));
            memset(e, 0, sizeof *e);
        }
        c->state = j;
    }
    if (!c->state) c->state = cJSON_CreateObject();
    if (!cJSON_GetObjectItem(c->state, "stages")) cJSON_AddObjectToObject(c->state, "stages");
    cJSON_DeleteItemFromObject(c->state, "pipeline");
    cJSON_AddStringToObject(c->state, "pipeline", c->res->name);
}

/* ---- stage C: the pipeline's run in the experiment store ----------------- */

/* The store: --tracking > KEEL_TRACKING > the file's tracking: > the nearest
 * keel-runs/ > the per-user default; the pipeline's run in it. */
static int open_run(pl_ctx *c, kl_track_run **prun, kl_err *e) {
    const kl_pipeline_opts *o = c->o;
    kl_pipeline_result *res = c->res;
    const char *trk = o->tracking, *how = "--tracking";
    char *trk_abs = NULL, how_file[4400];
    kl_store_env env;
    kl_config_store_env(&env);
    int rc;
    if (!trk && !(env.tracking && *env.tracking)) {
        const char *tv;
        if ((rc = kl_spec_str(c->root, "tracking", "", &tv, e))) return rc;
        if (*tv) {
            trk = kl_track_is_url(tv) ? tv : (trk_abs = kl__pl_path(c, tv)); /* a server URL as it is */
            snprintf(how_file, sizeof how_file, "tracking: in %s", o->path);
            how = how_file;
        }
    }
    kl_store_loc loc;
    rc = kl_track_store_resolve(trk, how, &loc, e);
    free(trk_abs);
    if (rc || (rc = kl_track_open_loc(&loc, 1, &c->t, e))) return rc;
    kl_track_redact(kl_track_dir(c->t), res->tracking, sizeof res->tracking); /* shown: no password */
    if ((rc = kl_track_run_start(c->t, "pipeline", res->name, 0, prun, e))) return rc;
    c->run_id = res->run_id = kl_track_run_id(*prun);
    kl_track_set_tag(*prun, "pipeline_file", o->path, NULL);
    fprintf(c->log, "keel pipeline %s: output %s, run %lld in %s\n", res->name, c->out, (long long)c->run_id,
            res->tracking);
    return KL_OK;
}

/* ---- stage D: each stage, run or skipped -------------------------------- */

/* The cache key of stage s: the code, the stage's config, every earlier
 * stage's output identity and the files it reads; its sha256 into hex. */
static int stage_key(pl_ctx *c, int s, const char *code, kl_buf *key, char hex[65], kl_err *e) {
    kl_pipeline_result *res = c->res;
    for (int u = 0; u < s; u++) /* inputs: every earlier stage's output identity must exist */
        if (c->cfg[u] && u != KL_STAGE_SERVE && !*kl__pl_out_str(c, u, "id")) {
            res->failed_stage = s;
            return kl_err_set(e, KL_ESTATE, "stage %s needs the outputs of stage %s, which has not run; %s",
                              stage_names[s], stage_names[u], "run without --from/--only first");
        }
    kl_buf_reset(key);
    kl_buf_printf(key, "keel-pipeline-1\ncode %s\nstage %s\nconfig ", code, stage_names[s]);
    canon(key, c->cfg[s]);
    for (int u = 0; u < s; u++)
        if (c->cfg[u]) kl_buf_printf(key, "\ninput %s %s", stage_names[u], kl__pl_out_str(c, u, "id"));
    int rc = kl__pl_stage_inputs(c, s, key, e);
    if (rc) {
        kl_err_prefix(e, "stage %s", stage_names[s]);
        res->failed_stage = s;
        return rc;
    }
    if (key->failed) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_sha256_buf_hex(key->data, key->len, hex);
    return KL_OK;
}

/* Runs stage s (its state invalid until it succeeds), records its outputs
 * in the state file and its run in the store. */
static int run_stage(pl_ctx *c, int s, const char *hex, kl_err *e) {
    kl_pipeline_result *res = c->res;
    logf_stage(c, s, "running", -1, NULL);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(c->state, "stages"), stage_names[s]);
    int rc = save_state(c, e);
    if (rc) return rc;
    cJSON *out = cJSON_CreateObject();
    int64_t t0 = kl_time_mono_ns();
    rc = kl__pl_stage_run(c, s, out, c->run_id, e);
    double secs = (double)(kl_time_mono_ns() - t0) / 1e9;
    res->st[s].seconds = secs;
    if (rc) {
        res->st[s].state = 3;
        res->failed_stage = s;
        kl_err_prefix(e, "stage %s", stage_names[s]);
        logf_stage(c, s, "FAILED", secs, kl_err_what(e));
        kl_err re = {0};
        if (s != KL_STAGE_TRAIN) record_stage(c, s, 0, hex, secs, out, 1, &re);
        cJSON_Delete(out);
        return rc;
    }
    cJSON *ent = cJSON_CreateObject();
    cJSON_AddStringToObject(ent, "key", hex);
    cJSON_AddNumberToObject(ent, "seconds", secs);
    char ts[40];
    kl_time_rfc3339(kl_time_now_us(), ts, sizeof ts);
    cJSON_AddStringToObject(ent, "finished", ts);
    const char *note = cJSON_GetStringValue(cJSON_GetObjectItem(out, "note"));
    if (note) cJSON_AddStringToObject(ent, "note", note);
    cJSON_AddItemToObject(ent, "out", out);
    cJSON_AddItemToObject(cJSON_GetObjectItem(c->state, "stages"), stage_names[s], ent);
    if ((rc = save_state(c, e))) return rc;
    res->st[s].state = 1;
    snprintf(res->st[s].note, sizeof res->st[s].note, "%s", note ? note : "");
    logf_stage(c, s, "done", secs, note);
    if (s != KL_STAGE_TRAIN && (rc = record_stage(c, s, 0, hex, secs, out, 0, e))) return rc;
    return KL_OK;
}

/* Every configured stage but serve, in order: kept (not selected), skipped
 * (cached: same key, outputs present) or run. */
static int run_stages(pl_ctx *c, int from, int only, kl_buf *key, kl_err *e) {
    kl_pipeline_result *res = c->res;
    /* the code version: the version, and the sha256 of the running keel
     * binary (any rebuild with other code invalidates the cache), else the
     * git commit it was built from */
    char code[200], exe_sha[65];
    kl_err xe = {0};
    if (!kl_sha256_file_hex("/proc/self/exe", exe_sha, &xe)) snprintf(code, sizeof code, "%s exe %s", KEEL_VERSION, exe_sha);
    else snprintf(code, sizeof code, "%s commit %s", KEEL_VERSION, KEEL_GIT_COMMIT);
    for (int s = 0; s < KL_STAGE_COUNT; s++) {
        if (!c->cfg[s]) continue;
        int selected = only >= 0 ? s == only : from >= 0 ? s >= from : 1;
        cJSON *st = kl__pl_stage_state(c, s);
        if (!selected) {
            res->st[s].state = 0;
            if (st) logf_stage(c, s, "kept", -1, "(not selected; outputs from an earlier run)");
            continue;
        }
        if (s == KL_STAGE_SERVE) continue; /* serve runs after the report */
        char hex[65];
        int rc = stage_key(c, s, code, key, hex, e);
        if (rc) return rc;
        const char *old = cJSON_GetStringValue(cJSON_GetObjectItem(st, "key"));
        int forced = c->o->force || only >= 0 || from >= 0;
        if (!forced && old && !strcmp(old, hex) && kl__pl_stage_outputs_present(c, s)) {
            res->st[s].state = 2;
            logf_stage(c, s, "skipped", -1, "(cached: inputs, config and code unchanged)");
            if ((rc = record_stage(c, s, 1, hex, 0, cJSON_GetObjectItem(st, "out"), 0, e))) return rc;
            continue;
        }
        if ((rc = run_stage(c, s, hex, e))) return rc;
    }
    return KL_OK;
}

/* ---- stage E: the report, the lineage, the run's end --------------------- */

static int finish_run(pl_ctx *c, kl_track_run **prun, int64_t t_start, kl_err *e) {
    kl_pipeline_result *res = c->res;
    fill_result(c);
    int rc;
    if (kl__pl_stage_state(c, KL_STAGE_TRAIN) && (rc = kl__pl_report_write(c, res->report, e))) {
        kl_err_prefix(e, "report");
        return rc;
    }
    if ((rc = link_lineage(c, *prun, e))) return rc;
    if (!kl__pl_stage_state(c, KL_STAGE_TRAIN)) res->report[0] = 0;
    else kl_track_log_artifact(*prun, res->report, NULL);
    res->seconds = (double)(kl_time_mono_ns() - t_start) / 1e9;
    kl_metric_point p = {"seconds", 0, 0, res->seconds};
    kl_track_log_metrics(*prun, &p, 1, NULL);
    rc = kl_track_run_end(*prun, KL_RUN_FINISHED, e);
    *prun = NULL;
    return rc;
}

/* The run, stage by stage: load_file, resolve_folders, select_stages,
 * load_state, open_run, run_stages, finish_run, then the optional serve
 * stage (blocks until SIGINT / SIGTERM). A failure ends the run FAILED with
 * the failed stage tagged; earlier outputs are kept. */
int kl_pipeline_run(const kl_pipeline_opts *o, kl_pipeline_result *res, kl_err *e) {
    pl_ctx c = {0};
    kl_doc *doc = NULL;
    kl_track_run *prun = NULL;
    kl_buf key;
    kl_buf_init(&key);
    memset(res, 0, sizeof *res);
    res->failed_stage = -1;
    res->test_auc = res->bayes_auc = res->test_accuracy = NAN;
    c.o = o;
    c.res = res;
    c.log = o->log ? o->log : stderr;
    int64_t t_start = kl_time_mono_ns();
    int from, only, rc;
    if ((rc = load_file(&c, &doc, e)) || (rc = resolve_folders(&c, e)) || (rc = select_stages(&c, &from, &only, e)))
        goto done;
    load_state(&c, e);
    if ((rc = open_run(&c, &prun, e)) || (rc = run_stages(&c, from, only, &key, e)) ||
        (rc = finish_run(&c, &prun, t_start, e)))
        goto done;
    if (o->on_done) o->on_done(res, o->ctx);
    if (c.cfg[KL_STAGE_SERVE] && (only < 0 || only == KL_STAGE_SERVE)) {
        logf_stage(&c, KL_STAGE_SERVE, "running", -1, "(until Ctrl-C)");
        if ((rc = kl__pl_stage_run(&c, KL_STAGE_SERVE, NULL, c.run_id, e))) {
            res->failed_stage = KL_STAGE_SERVE;
            kl_err_prefix(e, "stage serve");
            goto done;
        }
        res->st[KL_STAGE_SERVE].state = 1;
    }
done:
    if (prun) {
        if (rc) kl_track_set_tag(prun, "failed_stage", res->failed_stage >= 0 ? stage_names[res->failed_stage] : "setup", NULL);
        fill_result(&c);
        if (c.t) link_lineage(&c, prun, NULL);
        kl_track_run_end(prun, rc ? KL_RUN_FAILED : KL_RUN_FINISHED, NULL);
    }
    if (!res->seconds) res->seconds = (double)(kl_time_mono_ns() - t_start) / 1e9;
    kl_track_close(c.t);
    cJSON_Delete(c.state);
    kl_doc_free(doc);
    kl_buf_free(&key);
    return rc;
}
