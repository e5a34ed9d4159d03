/* Studies in the experiment store: a root run per study, a child run per
 * trial (params, intermediate values, objective, state tag), and loading a
 * study's history back for the samplers and pruners. Also parameter
 * importance for `keel tune show`. */
#include <keel/track.h>
#include <keel/tune.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kl_study {
    kl_track *t;
    const kl_tune_space *s;
    kl_tune_space *own_space; /* kl_study_find_recorded: parsed from space_text */
    int64_t root;
    kl_study_info info;
    char *name, *metric, *sampler, *space_sha, *spec, *space_text, *sets;
    kl_trial *trials;
    size_t ntrials;
};

static const char *state_names[] = {"running", "complete", "pruned", "failed"};
const char *kl_trial_state_name(kl_trial_state s) { return (unsigned)s < 4 ? state_names[s] : "?"; }

static void free_trials(kl_study *st) {
    for (size_t i = 0; i < st->ntrials; i++) { free(st->trials[i].params); free(st->trials[i].inter); }
    free(st->trials);
    st->trials = NULL;
    st->ntrials = 0;
}

void kl_study_free(kl_study *st) {
    if (!st) return;
    free_trials(st);
    free(st->name);
    free(st->metric);
    free(st->sampler);
    free(st->space_sha);
    free(st->spec);
    free(st->space_text);
    free(st->sets);
    kl_tune_space_free(st->own_space);
    free(st);
}

const kl_study_info *kl_study_get_info(const kl_study *st) { return &st->info; }

static const char *tag(cJSON *run, const char *k) {
    cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(run, "tags"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* filter strings are quoted with ""; a study name may not contain a quote */
static int check_name(const char *name, kl_err *e) {
    if (!*name || strpbrk(name, "\"\\\n"))
        return kl_err_set(e, KL_EINVAL, "study name '%s' must be non-empty without quotes or backslashes", name);
    return KL_OK;
}

static int find_root(kl_track *t, const char *name, int64_t *root, cJSON **json, kl_err *e) {
    char filter[600];
    snprintf(filter, sizeof filter, "tags.kind = \"study\" and tags.study = \"%s\"", name);
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = kl_track_runs_find(t, filter, NULL, 0, &ids, &n, e);
    if (rc) return rc;
    *root = n ? ids[0] : 0;
    free(ids);
    if (!*root) return KL_ENOTFOUND;
    void *j;
    if ((rc = kl_track_run_json(t, *root, &j, e))) return rc;
    *json = j;
    return KL_OK;
}

static int fill_info(kl_study *st, cJSON *root) {
    const char *m = tag(root, "metric"), *d = tag(root, "direction"), *sa = tag(root, "sampler"),
               *sh = tag(root, "space_sha256"), *sp = tag(root, "spec"), *tx = tag(root, "space"),
               *ss = tag(root, "sets");
    st->metric = strdup(m ? m : "");
    st->sampler = strdup(sa ? sa : "");
    st->space_sha = strdup(sh ? sh : "");
    st->spec = strdup(sp ? sp : "");
    st->space_text = strdup(tx ? tx : "");
    st->sets = strdup(ss ? ss : ""); /* studies recorded before --set: none */
    if (!st->metric || !st->sampler || !st->space_sha || !st->spec || !st->space_text || !st->sets) return KL_ENOMEM;
    st->info.sets = st->sets;
    st->info.space_text = st->space_text;
    st->info.name = st->name;
    st->info.metric = st->metric;
    st->info.minimize = d && !strcmp(d, "minimize");
    st->info.sampler = st->sampler;
    st->info.space_sha256 = st->space_sha;
    st->info.spec = st->spec;
    return KL_OK;
}

static int study_new(kl_track *t, const kl_tune_space *s, const char *name, kl_study **out, kl_err *e) {
    kl_study *st = calloc(1, sizeof *st);
    if (!st || !(st->name = strdup(name))) { free(st); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    st->t = t;
    st->s = s;
    *out = st;
    return KL_OK;
}

void kl_study_set_space(kl_study *st, const kl_tune_space *s) { st->s = s; }

int kl_study_find(kl_track *t, const char *name, const kl_tune_space *s, kl_study **out, kl_err *e) {
    *out = NULL;
    int rc = check_name(name, e);
    if (rc) return rc;
    cJSON *root = NULL;
    int64_t id;
    rc = find_root(t, name, &id, &root, e);
    if (rc == KL_ENOTFOUND)
        return kl_err_set(e, KL_ENOTFOUND, "no study named '%s' in the experiment store %s", name, kl_track_where(t));
    if (rc) return rc;
    kl_study *st;
    if ((rc = study_new(t, s, name, &st, e))) { cJSON_Delete(root); return rc; }
    st->root = id;
    if (fill_info(st, root)) { cJSON_Delete(root); kl_study_free(st); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    cJSON_Delete(root);
    *out = st;
    return KL_OK;
}

int kl_study_find_recorded(kl_track *t, const char *name, kl_study **out, kl_err *e) {
    kl_study *st = NULL;
    kl_doc *d = NULL;
    int rc = kl_study_find(t, name, NULL, &st, e);
    if (!rc) rc = kl_doc_load_str(st->space_text, strlen(st->space_text), "recorded space", &d, e);
    if (!rc) rc = kl_tune_space_parse(kl_doc_root(d), &st->own_space, e);
    kl_doc_free(d);
    if (rc) { kl_study_free(st); *out = NULL; return rc; }
    st->s = st->own_space;
    *out = st;
    return KL_OK;
}

const kl_tune_space *kl_study_space(const kl_study *st) { return st->s; }

int kl_study_list(kl_track *t, char ***names, size_t *n, kl_err *e) {
    int64_t *ids = NULL;
    size_t m = 0;
    *names = NULL;
    *n = 0;
    int rc = kl_track_runs_find(t, "tags.kind = \"study\"", "start_time", 0, &ids, &m, e);
    if (rc) return rc;
    char **out = calloc(m + 1, sizeof *out);
    size_t k = 0;
    if (!out) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < m && !rc; i++) {
        void *j;
        if ((rc = kl_track_run_json(t, ids[i], &j, e))) break;
        const char *nm = tag(j, "study");
        if (nm && !(out[k++] = strdup(nm))) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        cJSON_Delete(j);
    }
    free(ids);
    if (rc) {
        for (size_t i = 0; i < k; i++) free(out ? out[i] : NULL);
        free(out);
        return rc;
    }
    *names = out;
    *n = k;
    return KL_OK;
}

const kl_trial *kl_tune_best(const kl_trial *t, size_t n, int minimize) {
    const kl_trial *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (t[i].state == KL_TRIAL_COMPLETE && isfinite(t[i].value) &&
            (!best || (minimize ? t[i].value < best->value : t[i].value > best->value)))
            best = &t[i];
    return best;
}

/* "a=1, b=2" from the recorded "a=1\nb=2" ("none" when empty) */
static const char *sets_list(const char *sets, char *buf, size_t n) {
    if (!sets || !*sets) return "none";
    size_t k = 0;
    for (const char *p = sets; *p && k + 3 < n; p++) {
        if (*p == '\n') {
            buf[k++] = ',';
            buf[k++] = ' ';
        } else buf[k++] = *p;
    }
    buf[k] = 0;
    return buf;
}

/* An existing study's settings against this run's: a contradictory re-run
 * is KL_EINVAL naming what differs. */
static int check_same(const kl_study *st, const kl_study_info *info, kl_err *e) {
    if (strcmp(st->metric, info->metric) || st->info.minimize != info->minimize)
        return kl_err_set(e, KL_EINVAL,
                          "study '%s' optimises %s (%s); this run asks for %s (%s): to continue the study give "
                          "--metric %s --direction %s, or start a new one with --study NAME",
                          info->name, st->metric, st->info.minimize ? "minimize" : "maximize", info->metric,
                          info->minimize ? "minimize" : "maximize", st->metric,
                          st->info.minimize ? "minimize" : "maximize");
    if (strcmp(st->sets, info->sets ? info->sets : "")) {
        char was[2048], now[2048];
        return kl_err_set(e, KL_EINVAL,
                          "study '%s' was run with other --set overrides (%s; now %s): give the same ones, or use "
                          "another --study name",
                          info->name, sets_list(st->sets, was, sizeof was), sets_list(info->sets, now, sizeof now));
    }
    if (strcmp(st->space_sha, info->space_sha256))
        return kl_err_set(
            e, KL_EINVAL,
            "study '%s' was run with another search space (sha256 %.12s, now %.12s): use another --study name",
            info->name, st->space_sha, info->space_sha256);
    return KL_OK;
}

/* The root run of a new study, created once even when several workers
 * start the study at once (kl_track_run_ensure); *created 0 when another
 * process made it first. */
static int create_root(kl_track *t, const kl_study_info *info, int64_t *id, int *created, kl_err *e) {
    char rname[512];
    snprintf(rname, sizeof rname, "study:%s", info->name);
    const kl_kv kv[] = {{"kind", "study"},
                        {"study", info->name},
                        {"metric", info->metric},
                        {"direction", info->minimize ? "minimize" : "maximize"},
                        {"sampler", info->sampler},
                        {"space_sha256", info->space_sha256},
                        {"spec", info->spec ? info->spec : ""},
                        {"space", info->space_text ? info->space_text : ""},
                        {"sets", info->sets ? info->sets : ""}};
    /* the root run is a container: finished at once, whatever its trials do */
    return kl_track_run_ensure(t, "tune", rname, kv, KL_ARRAY_LEN(kv), KL_RUN_FINISHED, id, created, e);
}

int kl_study_open(kl_track *t, const kl_tune_space *s, const kl_study_info *info, kl_study **out, kl_err *e) {
    *out = NULL;
    int rc = check_name(info->name, e);
    if (rc) return rc;
    cJSON *root = NULL;
    int64_t id;
    int created = 0;
    rc = find_root(t, info->name, &id, &root, e);
    if (rc == KL_ENOTFOUND) {
        kl_err_clear(e);
        if ((rc = create_root(t, info, &id, &created, e))) return rc;
        /* created now or by another worker a moment ago: read it back */
        rc = find_root(t, info->name, &id, &root, e);
        if (rc == KL_ENOTFOUND)
            return kl_err_set(e, KL_EEXIST,
                              "run %lld is named study:%s in experiment tune but is not a study (no kind=study tag): "
                              "use another --study name",
                              (long long)id, info->name);
    }
    if (rc) return rc;
    kl_study *st;
    if ((rc = study_new(t, s, info->name, &st, e))) { cJSON_Delete(root); return rc; }
    st->root = id;
    rc = fill_info(st, root) ? kl_err_set(e, KL_ENOMEM, "out of memory") : KL_OK;
    cJSON_Delete(root);
    if (!rc && !created) rc = check_same(st, info, e);
    if (rc) { kl_study_free(st); return rc; }
    *out = st;
    return KL_OK;
}

static int cmp_trial(const void *a, const void *b) {
    return ((const kl_trial *)a)->number - ((const kl_trial *)b)->number;
}

int kl_study_load(kl_study *st, const kl_trial **out, size_t *nout, kl_err *e) {
    free_trials(st);
    char filter[600];
    snprintf(filter, sizeof filter, "tags.kind = \"trial\" and tags.study = \"%s\"", st->name);
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = kl_track_runs_find(st->t, filter, NULL, 0, &ids, &n, e);
    if (rc) return rc;
    st->trials = calloc(n + 1, sizeof *st->trials);
    if (!st->trials) { free(ids); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    void *all = NULL; /* every trial run in a few queries, whatever n */
    if (n && (rc = kl_track_runs_json(st->t, ids, n, &all, e))) { free(ids); return rc; }
    for (size_t i = 0; i < n && !rc; i++) {
        cJSON *run = cJSON_GetArrayItem(all, (int)i);
        kl_trial *t = &st->trials[st->ntrials];
        const char *num = tag(run, "trial"), *state = tag(run, "state");
        int64_t number;
        if (!num || kl_parse_int64(num, &number)) continue;
        t->number = (int)number;
        t->run_id = ids[i];
        t->state = KL_TRIAL_FAILED;
        for (int k = 0; k < 4; k++)
            if (state && !strcmp(state, state_names[k])) t->state = (kl_trial_state)k;
        cJSON *status = cJSON_GetObjectItem(run, "status");
        if (t->state == KL_TRIAL_RUNNING && cJSON_IsString(status) && strcmp(status->valuestring, "running"))
            t->state = KL_TRIAL_FAILED; /* its tune process died */
        t->params = calloc((size_t)st->s->n, sizeof *t->params);
        if (!t->params) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        cJSON *params = cJSON_GetObjectItem(run, "params");
        for (int p = 0; p < st->s->n; p++) {
            cJSON *v = cJSON_GetObjectItem(params, st->s->p[p].name);
            if (cJSON_IsString(v) && kl_tune_value_parse(&st->s->p[p], v->valuestring, &t->params[p]) != KL_OK)
                t->params[p].present = 0;
        }
        cJSON *obj = cJSON_GetObjectItem(cJSON_GetObjectItem(run, "metrics"), "objective");
        cJSON *val = cJSON_GetObjectItem(obj, "value");
        t->value = cJSON_IsNumber(val) ? val->valuedouble : NAN;
        int64_t *steps = NULL, *ts = NULL;
        double *vals = NULL;
        size_t m = 0;
        if ((rc = kl_track_metric_history(st->t, ids[i], st->metric, &steps, &ts, &vals, &m, e))) break;
        int64_t maxstep = -1;
        for (size_t k = 0; k < m; k++) if (steps[k] > maxstep) maxstep = steps[k];
        if (maxstep >= 0 && maxstep < 1000000) {
            t->ninter = (int)maxstep + 1;
            t->inter = malloc((size_t)t->ninter * sizeof(double));
            if (t->inter) {
                for (int k = 0; k < t->ninter; k++) t->inter[k] = NAN;
                for (size_t k = 0; k < m; k++) t->inter[steps[k]] = vals[k];
            } else {
                t->ninter = 0;
            }
        }
        free(steps); free(ts); free(vals);
        st->ntrials++;
    }
    free(ids);
    cJSON_Delete(all);
    if (rc) return rc;
    qsort(st->trials, st->ntrials, sizeof *st->trials, cmp_trial);
    *out = st->trials;
    *nout = st->ntrials;
    return KL_OK;
}

int kl_study_trial_claim(kl_study *st, int ntrials, double heartbeat_timeout_s, kl_study_claim *out, kl_err *e) {
    kl_track_claim c;
    int rc = kl_track_trial_claim(st->t, st->root, st->name, ntrials, heartbeat_timeout_s, &c, e);
    out->number = c.number;
    out->run_id = c.run_id;
    out->requeued = c.requeued_from != 0;
    out->lost_marked = c.lost_marked;
    return rc;
}

int kl_study_trial_params(kl_study *st, int64_t run_id, const kl_tune_value *params, kl_err *e) {
    kl_kv kv[64];
    char vals[64][96];
    size_t nkv = 0;
    for (int p = 0; p < st->s->n && nkv < 64; p++) {
        if (!params[p].present) continue;
        kl_tune_value_str(&st->s->p[p], params[p], vals[nkv], sizeof vals[nkv]);
        kv[nkv] = (kl_kv){st->s->p[p].name, vals[nkv]};
        nkv++;
    }
    if (!nkv) return KL_OK;
    kl_track_run *r;
    int rc = kl_track_run_attach(st->t, run_id, &r, e);
    if (rc) return rc;
    rc = kl_track_log_params(r, kv, nkv, e);
    kl_track_run_free(r);
    return rc;
}

int kl_study_trial_release(kl_study *st, int64_t run_id, const char *why, kl_err *e) {
    return kl_track_trial_release(st->t, run_id, why, e);
}

int kl_study_trial_heartbeat(kl_study *st, int64_t run_id, kl_err *e) {
    return kl_track_run_heartbeat(st->t, run_id, e);
}

int kl_study_trial_report(kl_study *st, int64_t run_id, int step, double value, kl_err *e) {
    kl_track_run *r;
    int rc = kl_track_run_attach(st->t, run_id, &r, e);
    if (rc) return rc;
    kl_metric_point pt = {st->metric, step, 0, value};
    rc = kl_track_log_metrics(r, &pt, 1, e);
    kl_track_run_free(r);
    return rc;
}

int kl_study_trial_set_model_dir(kl_study *st, int64_t run_id, const char *dir, kl_err *e) {
    char abs[4096];
    if (!realpath(dir, abs)) return kl_err_set(e, KL_ENOTFOUND, "%s: the trial's model folder is gone", dir);
    kl_track_run *r;
    int rc = kl_track_run_attach(st->t, run_id, &r, e);
    if (rc) return rc;
    rc = kl_track_set_tag(r, "model_dir", abs, e);
    kl_track_run_free(r);
    return rc;
}

int kl_study_trial_model_dir(kl_study *st, int64_t run_id, char *out, size_t n, kl_err *e) {
    void *j = NULL;
    int rc = kl_track_run_json(st->t, run_id, &j, e);
    if (rc) return rc;
    const char *d = tag(j, "model_dir");
    if (d) snprintf(out, n, "%s", d);
    cJSON_Delete(j);
    return d ? KL_OK : KL_ENOTFOUND;
}

int kl_study_trial_end(kl_study *st, int64_t run_id, kl_trial_state state, double value, const char *note, kl_err *e) {
    int rc = KL_OK;
    if (state == KL_TRIAL_COMPLETE) {
        kl_track_run *r;
        if ((rc = kl_track_run_attach(st->t, run_id, &r, e))) return rc;
        kl_metric_point pt = {"objective", 0, 0, value};
        rc = kl_track_log_metrics(r, &pt, 1, e);
        kl_track_run_free(r);
        if (rc) return rc;
    }
    /* the state and the end in one step, only while the trial is still this worker's */
    kl_kv tags[2] = {{"state", state_names[state]}, {state == KL_TRIAL_FAILED ? "error" : "note", note}};
    kl_run_status rs = state == KL_TRIAL_FAILED ? KL_RUN_FAILED : state == KL_TRIAL_PRUNED ? KL_RUN_KILLED : KL_RUN_FINISHED;
    return kl_track_run_finish(st->t, run_id, rs, tags, note ? 2 : 1, e);
}

/* ---- importance ------------------------------------------------------------ */

void kl_tune_importance(const kl_tune_space *s, const kl_trial *t, size_t n, double *out) {
    double total = 0;
    for (int p = 0; p < s->n; p++) {
        out[p] = 0;
        /* complete trials where p is present */
        double *v = malloc((n + 1) * sizeof *v), *x = malloc((n + 1) * sizeof *x);
        size_t m = 0;
        if (!v || !x) { free(v); free(x); continue; }
        for (size_t i = 0; i < n; i++)
            if (t[i].state == KL_TRIAL_COMPLETE && isfinite(t[i].value) && t[i].params[p].present) {
                v[m] = t[i].value;
                x[m] = s->p[p].log ? log(t[i].params[p].v) : t[i].params[p].v;
                m++;
            }
        if (m >= 3) {
            double mean = 0, ss = 0;
            for (size_t i = 0; i < m; i++) mean += v[i];
            mean /= (double)m;
            for (size_t i = 0; i < m; i++) ss += (v[i] - mean) * (v[i] - mean);
            /* groups: categorical choices, or 4 quantile bins of x */
            int ng = s->p[p].kind == KL_TUNE_CAT ? s->p[p].nchoices : 4;
            double gsum[64] = {0}, gcnt[64] = {0};
            double *sorted = malloc(m * sizeof *sorted);
            if (sorted) {
                memcpy(sorted, x, m * sizeof *sorted);
                for (size_t i = 1; i < m; i++)
                    for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                        double tmp = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = tmp;
                    }
                for (size_t i = 0; i < m; i++) {
                    int g;
                    if (s->p[p].kind == KL_TUNE_CAT) g = (int)x[i];
                    else {
                        g = 0;
                        while (g < 3 && x[i] > sorted[(size_t)((g + 1) * m / 4) - ((g + 1) * m / 4 > 0)]) g++;
                    }
                    if (g < 0 || g >= ng || g >= 64) continue;
                    gsum[g] += v[i];
                    gcnt[g] += 1;
                }
                double between = 0;
                for (int g = 0; g < ng && g < 64; g++)
                    if (gcnt[g] > 0) {
                        double gm = gsum[g] / gcnt[g];
                        between += gcnt[g] * (gm - mean) * (gm - mean);
                    }
                out[p] = ss > 0 ? between / ss : 0;
                free(sorted);
            }
        }
        total += out[p];
        free(v);
        free(x);
    }
    if (total > 0)
        for (int p = 0; p < s->n; p++) out[p] /= total;
}
