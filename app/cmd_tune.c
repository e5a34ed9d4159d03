/* keel tune: hyperparameter search over a training spec. This file reads the
 * command line, opens the study and hands the trials to the tune module's
 * orchestrator (kl_tune_run, src/tune/run.c: sampler, cache, pruner, forked
 * trials) with kl_train_run as the trainer of a trial; re-running the same
 * command continues the study. `keel tune show STUDY` reports it;
 * `keel tune register STUDY --name N` registers the best trial's model. */
#include "app.h"

#include <keel/track.h>
#include <keel/train.h>
#include <keel/tune.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ==================================================================
 * The trainer of a trial (kl_tune_run_opts.train): kl_train_run
 * ================================================================== */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { (void)sig; interrupted = 1; }

/* the metric a trial reports, from one epoch's values (NaN = not there) */
static double epoch_metric(const char *metric, const kl_train_epoch *ep) {
    if (!strcmp(metric, "val_accuracy") || !strcmp(metric, "val_acc")) return ep->val_accuracy;
    if (!strcmp(metric, "val_loss")) return ep->val_loss;
    if (!strcmp(metric, "train_loss")) return ep->train_loss;
    return NAN;
}

typedef struct {
    const char *spec, *metric;
    int verify; /* --verify: how every trial checks a Parquet dataset against its manifest */
} trainer;

typedef struct {
    const char *metric;
    kl_tune_value_fn fn;
    void *ctx;
} epoch_io;

static int on_epoch(void *ctx, const kl_train_epoch *ep) {
    epoch_io *io = ctx;
    double v = epoch_metric(io->metric, ep);
    return isnan(v) ? 0 : io->fn(io->ctx, (int)ep->epoch, v);
}

static int train_trial(void *ctx, const char *const *sets, int nsets, const char *dir, FILE *report,
                       kl_tune_value_fn on_value, void *value_ctx, kl_err *e) {
    const trainer *tr = ctx;
    epoch_io io = {tr->metric, on_value, value_ctx};
    kl_train_opts o = {0};
    o.out_dir = dir;
    o.quiet = 1;
    o.report = report;
    o.sets = sets;
    o.nsets = nsets;
    o.on_epoch = on_epoch;
    o.on_epoch_ctx = &io;
    o.verify = tr->verify;
    return kl_train_run(tr->spec, &o, e);
}

/* ==================================================================
 * keel tune SPEC --space SPACE --trials N
 * ================================================================== */

static const app_opt run_opts[] = {
    {"space", 0, 1, "SPACE.yaml", "the search space (required)", 0},
    {"trials", 'n', 1, "N", "trials in the study in all (default 20); re-running continues up to N", 0},
    {"parallel", 'p', 1, "P",
     "trials at once: 1 (default) in this process, P > 1 in forked processes with threads/P threads each", 0},
    {"timeout", 0, 1, "SECONDS", "start no new trial after this long", 0},
    {"heartbeat-timeout", 0, 1, "SECONDS",
     "several workers on one study: a trial whose worker sent no heartbeat for this long is failed and re-queued "
     "(default 30)",
     0},
    {"study", 0, 1, "NAME", "study name (default: SPEC's name and the space's hash)", 0},
    {"metric", 0, 1, "NAME",
     "per-epoch metric: val_accuracy, val_loss or train_loss (default: val_loss for an mse loss, else val_accuracy)",
     0},
    {"direction", 0, 1, "maximize|minimize", "default: maximize for accuracy/auc metrics, else minimize", 0},
    {"sampler", 0, 1, "tpe|random|grid", "default tpe", 0},
    {"pruner", 0, 1, "none|median|asha", "early stopping of bad trials on the per-epoch metric (default none)", 0},
    {"prune-min-epochs", 0, 1, "N",
     "no trial is pruned before N epochs (asha: the first rung; median: warm-up; default 1)", 0},
    {"seed", 0, 1, "N", "sampler seed (default 0)", 0},
    {"out", 'o', 1, "DIR", "trial artifacts (default tune-<study>): trial-N/ keeps each complete trial's model", 0},
    {"set", 0, 1, "KEY=VALUE", "override a spec key in every trial, as keel train --set (not a key of the space)", 1},
    {"json", 0, 0, NULL, "summary as JSON", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec run_spec = {
    "tune",
    "keel tune SPEC.yaml --space SPACE.yaml [--trials N] [--parallel P] [--timeout S] [options]",
    "Search hyperparameters of a training spec; a resumable study in the experiment store.",
    "The space maps spec keys (dotted paths, e.g. optimizer.lr, layers.0.out) to\n"
    "  {type: float|int|categorical, low, high, log, step, choices, when: {param: value}}.\n"
    "Each trial trains SPEC with --set key=value overrides through the training library (in this\n"
    "process, or forked ones with --parallel); the pruner can stop it after any epoch. Its objective\n"
    "is the best value of "
    "--metric over its epochs. A configuration already evaluated is not trained again.\n"
    "--set KEY=VALUE overrides the spec in every trial (the same parser as keel train); the\n"
    "study records them, and a re-run must give the same ones. Each complete trial keeps its\n"
    "exported model in OUT/trial-N, so the best one can be registered.\n"
    "Several workers (processes or machines on one store) may run the same command at once: each\n"
    "claims its trials in the store, and a trial whose worker died is re-queued after\n"
    "--heartbeat-timeout.\n"
    "\n"
    "Commands:\n"
    "  show         print a study and draw its history (keel tune show STUDY)\n"
    "  register     register the best trial's model (keel tune register STUDY --name N)",
    run_opts, KL_ARRAY_LEN(run_opts), 1, 1};

/* The run's summary: text, or --json. APP_EXIT_OK when a trial completed. */
static int print_summary(const app_args *a, const char *name, const char *metric, int minimize, const kl_tune_space *s,
                         const kl_tune_run_result *res) {
    const kl_trial *best = kl_tune_best(res->trials, res->n, minimize);
    int ncomplete = 0, npruned = 0, nfailed = 0;
    for (size_t i = 0; i < res->n; i++) {
        ncomplete += res->trials[i].state == KL_TRIAL_COMPLETE;
        npruned += res->trials[i].state == KL_TRIAL_PRUNED;
        nfailed += res->trials[i].state == KL_TRIAL_FAILED;
    }
    char desc[1024] = "";
    if (best) kl_tune_params_str(s, best->params, desc, sizeof desc);
    if (!app_flag(a, "json")) {
        printf("study %s: %zu trials (%d complete, %d pruned, %d failed), %d trained now\n", name, res->n, ncomplete,
               npruned, nfailed, res->launched);
        if (best) printf("best: trial %d, %s = %.6g [%s]\n", best->number, metric, best->value, desc);
        printf("details: keel tune show %s\n", name);
        return best ? APP_EXIT_OK : APP_EXIT_FAIL;
    }
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\"study\":");
    kl_buf_json_str(&b, name);
    kl_buf_printf(&b,
                  ",\"metric\":\"%s\",\"direction\":\"%s\",\"trials\":%zu,\"complete\":%d,\"pruned\":%d,\"failed\":%d,"
                  "\"launched\":%d,\"seconds\":%.3f,\"train_seconds\":%.3f,\"train_cpu_seconds\":%.3f",
                  metric, minimize ? "minimize" : "maximize", res->n, ncomplete, npruned, nfailed, res->launched,
                  res->seconds, res->train_seconds, res->train_cpu_seconds);
    if (best) {
        kl_buf_printf(&b, ",\"best\":{\"number\":%d,\"value\":%.17g,\"params\":{", best->number, best->value);
        int first = 1;
        for (int p = 0; p < s->n; p++) {
            if (!best->params[p].present) continue;
            char val[96];
            kl_buf_printf(&b, "%s", first ? "" : ",");
            kl_buf_json_str(&b, s->p[p].name);
            kl_buf_puts(&b, ":");
            kl_buf_json_str(&b, kl_tune_value_str(&s->p[p], best->params[p], val, sizeof val));
            first = 0;
        }
        kl_buf_puts(&b, "}}");
    }
    kl_buf_puts(&b, "}\n");
    fputs(b.data, stdout);
    kl_buf_free(&b);
    return best ? APP_EXIT_OK : APP_EXIT_FAIL;
}

/* The objective and the search of keel tune: --metric (default from the
 * spec's loss), --direction, --sampler, --pruner, --prune-min-epochs. -1
 * when they are fine, else the exit code. */
typedef struct {
    const char *metric, *sampler;
    int minimize;
    kl_sampler_opts so;
    kl_pruner_opts po;
} search;

static int parse_search(const app_args *a, const char *spec_arg, int64_t seed, search *q) {
    int rc;
    const char *metric = app_get(a, "metric");
    if (!metric) { /* from the loss: accuracy means nothing for a regression */
        const char *loss = NULL;
        kl_err le = {0};
        if (kl_train_spec_loss(spec_arg, &loss, &le)) return app_fail(&le);
        metric = strcmp(loss, "mse") ? "val_accuracy" : "val_loss";
        fprintf(stderr, "metric: %s (the default for a %s loss; --metric to choose)\n", metric, loss);
    }
    const char *dir = app_get(a, "direction");
    int minimize = !(strstr(metric, "acc") || strstr(metric, "auc"));
    if (dir) {
        if (!strcmp(dir, "minimize") || !strcmp(dir, "min")) minimize = 1;
        else if (!strcmp(dir, "maximize") || !strcmp(dir, "max")) minimize = 0;
        else return app_usage_error(&run_spec, "--direction must be maximize or minimize");
    }
    kl_sampler_opts_default(&q->so);
    q->so.seed = (uint64_t)seed;
    const char *sampler = app_get(a, "sampler") ? app_get(a, "sampler") : "tpe";
    if (kl_sampler_kind_parse(sampler, &q->so.kind))
        return app_usage_error(&run_spec, "unknown sampler '%s' (tpe, random, grid)", sampler);
    kl_pruner_opts_default(&q->po);
    if (app_get(a, "pruner") && kl_pruner_kind_parse(app_get(a, "pruner"), &q->po.kind))
        return app_usage_error(&run_spec, "unknown pruner '%s' (none, median, asha)", app_get(a, "pruner"));
    int64_t min_epochs;
    if ((rc = app_get_int(a, &run_spec, "prune-min-epochs", 1, &min_epochs)) >= 0) return rc;
    if (min_epochs < 1 || min_epochs > 100000) return app_usage_error(&run_spec, "--prune-min-epochs must be in 1..100000");
    q->po.min_resource = (int)min_epochs;
    q->po.n_warmup_steps = (int)min_epochs - 1;
    q->metric = metric;
    q->sampler = sampler;
    q->minimize = minimize;
    return -1;
}

/* tune run's stages: options (parse_search), the space, the fixed overrides
 * (fixed_overrides), the study's name (study_name) and folder, the study in
 * the store, then kl_tune_run with the trainer as its callback and the summary. */

/* --set KEY=VALUE overrides, never a parameter of the space, as lines in text (n bytes). */
static int fixed_overrides(const char *const *sets, int nsets, const kl_tune_space *s, const char *space_path,
                           char *text, size_t n, kl_err *e) {
    size_t stl = 0;
    for (int i = 0; i < nsets; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i]) return kl_err_set(e, KL_EINVAL, "--set expects KEY=VALUE, got '%s'", sets[i]);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        if (kl_tune_space_find(s, key) >= 0)
            return kl_err_set(e, KL_EINVAL, "--set %s: %s is a parameter of the search space %s (the trials choose it)",
                              sets[i], key, space_path);
        if (stl < n) stl += (size_t)snprintf(text + stl, n - stl, "%s%s", i ? "\n" : "", sets[i]);
    }
    if (stl >= n) return kl_err_set(e, KL_EINVAL, "--set: the overrides are too long");
    return KL_OK;
}

/* --study, or the spec's file name and the sha256 of the space (and of the --set overrides when any). */
static int study_name(const app_args *a, const char *spec, const char *space_text, size_t space_len,
                      const char *sets_text, char *name, size_t n, kl_err *e) {
    char name_sha[65];
    kl_sha256_buf_hex(space_text, space_len, name_sha);
    if (sets_text[0]) {
        kl_buf nb;
        kl_buf_init(&nb);
        kl_buf_printf(&nb, "%.*s\n--set\n%s", (int)space_len, space_text, sets_text);
        if (nb.failed) {
            kl_buf_free(&nb);
            return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        kl_sha256_buf_hex(nb.data, nb.len, name_sha);
        kl_buf_free(&nb);
    }
    if (app_get(a, "study")) snprintf(name, n, "%s", app_get(a, "study"));
    else {
        const char *b = strrchr(spec, '/');
        b = b ? b + 1 : spec;
        snprintf(name, n, "%.*s-%.8s", (int)strcspn(b, "."), b, name_sha);
    }
    return KL_OK;
}

static int tune_run(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&run_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *spec_arg = a.pos[0], *space_path = app_get(&a, "space");
    if (!space_path) return app_usage_error(&run_spec, "--space SPACE.yaml is required");
    int64_t trials, parallel, seed;
    double timeout;
    if ((rc = app_get_int(&a, &run_spec, "trials", 20, &trials)) >= 0) return rc;
    if ((rc = app_get_int(&a, &run_spec, "parallel", 1, &parallel)) >= 0) return rc;
    if ((rc = app_get_int(&a, &run_spec, "seed", 0, &seed)) >= 0) return rc;
    if ((rc = app_get_double(&a, &run_spec, "timeout", 0, &timeout)) >= 0) return rc;
    double hb_timeout;
    if ((rc = app_get_double(&a, &run_spec, "heartbeat-timeout", 30, &hb_timeout)) >= 0) return rc;
    if (!(hb_timeout >= 0.5 && hb_timeout <= 86400))
        return app_usage_error(&run_spec, "--heartbeat-timeout must be in 0.5..86400 seconds");
    int verify = 0;
    if ((rc = app_get_verify(&a, &run_spec, &verify)) >= 0) return rc;
    if (trials < 1 || trials > 100000) return app_usage_error(&run_spec, "--trials must be in 1..100000");
    if (parallel < 1 || parallel > 64) return app_usage_error(&run_spec, "--parallel must be in 1..64");
    search q;
    if ((rc = parse_search(&a, spec_arg, seed, &q)) >= 0) return rc;
    const char *metric = q.metric, *sampler = q.sampler;
    int minimize = q.minimize;

    kl_err e = {0};
    char spec[4096];
    if (!realpath(spec_arg, spec)) {
        kl_err_set(&e, -errno, "%s: %s", spec_arg, strerror(errno));
        return app_fail(&e);
    }
    char *space_text = NULL;
    size_t space_len;
    kl_tune_space *s = NULL;
    kl_track *t = NULL;
    kl_study *st = NULL;
    kl_tune_run_result res = {0};
    const char *sets[APP_MAX_VALUES];
    int exit_code = APP_EXIT_FAIL;
    if ((rc = kl_read_file(space_path, &space_text, &space_len, &e)) || (rc = kl_tune_space_load(space_path, &s, &e)))
        goto done;
    char sets_text[8192] = "";
    int nsets = app_get_all(&a, "set", sets, APP_MAX_VALUES);
    if ((rc = fixed_overrides(sets, nsets, s, space_path, sets_text, sizeof sets_text, &e))) goto done;
    /* a spec key that does not exist is caught by the first trial; check the spec loads at all */
    char sha[65], name[256], outdir[1024];
    kl_sha256_buf_hex(space_text, space_len, sha);
    if ((rc = study_name(&a, spec, space_text, space_len, sets_text, name, sizeof name, &e))) goto done;
    snprintf(outdir, sizeof outdir, "%s", app_get(&a, "out") ? app_get(&a, "out") : "");
    if (!outdir[0]) snprintf(outdir, sizeof outdir, "tune-%s", name);
    if ((rc = kl_mkdir_p(outdir, &e))) goto done;
    if ((rc = app_store_open(1, &t, &e))) goto done;
    kl_study_info info = {name, metric, minimize, sampler, sha, spec, space_text, sets_text};
    if ((rc = kl_study_open(t, s, &info, &st, &e))) goto done;
    trainer tr = {spec, metric, verify};
    kl_tune_run_opts ro = {st,     s,    metric, minimize, &q.so,       &q.po, (size_t)trials, (int)parallel, timeout,
                           outdir, sets, nsets,  0,        hb_timeout,  train_trial, &tr, &interrupted, stderr};
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if ((rc = kl_tune_run(&ro, &res, &e))) goto done;
    exit_code = print_summary(&a, name, metric, minimize, s, &res);
    if (exit_code != APP_EXIT_OK) kl_err_set(&e, KL_ENOTFOUND, "no trial completed");
done:
    kl_tune_run_result_free(&res);
    kl_study_free(st);
    kl_track_close(t);
    kl_tune_space_free(s);
    kl_mem_free(space_text);
    if (rc || exit_code != APP_EXIT_OK) return app_fail(&e);
    return exit_code;
}

/* ==================================================================
 * keel tune show STUDY
 * ================================================================== */

static const app_opt show_opts[] = {
    {"json", 0, 0, NULL, "machine-readable output", 0},
    {"out", 'o', 1, "DIR", "where history.svg and parallel.svg go (default tune-<study>)", 0},
};
static const app_cmd_spec show_spec = {
    "tune show", "keel tune show STUDY [--json] [--out DIR]",
    "Best trial, trials table, parameter importance, and the pictures (optimisation history, parallel coordinates).",
    "Parameter importance: the share of the objective's variance over complete trials that each\n"
    "parameter explains alone (correlation ratio over 4 quantile bins, or per choice), normalised\n"
    "to sum to 1. A simple screening measure: it ignores interactions.",
    show_opts, KL_ARRAY_LEN(show_opts), 1, 1};

static int tune_show(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&show_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    kl_study *st = NULL;
    double *imp = NULL;
    kl_buf b;
    kl_buf_init(&b);
    if ((rc = app_store_open(0, &t, &e))) goto done;
    if ((rc = kl_study_find_recorded(t, a.pos[0], &st, &e))) goto done;
    const kl_study_info *info = kl_study_get_info(st);
    const kl_tune_space *s = kl_study_space(st);
    const kl_trial *tr;
    size_t n;
    if ((rc = kl_study_load(st, &tr, &n, &e))) goto done;
    int minimize = info->minimize;
    const kl_trial *best = kl_tune_best(tr, n, minimize);
    imp = calloc((size_t)s->n, sizeof *imp);
    if (!imp) { rc = kl_err_set(&e, KL_ENOMEM, "out of memory"); goto done; }
    kl_tune_importance(s, tr, n, imp);
    /* pictures */
    char outdir[1024];
    snprintf(outdir, sizeof outdir, "%s", app_get(&a, "out") ? app_get(&a, "out") : "");
    if (!outdir[0]) snprintf(outdir, sizeof outdir, "tune-%s", info->name);
    if ((rc = kl_mkdir_p(outdir, &e))) goto done;
    for (int pic = 0; pic < 2 && !rc; pic++) {
        kl_buf svg;
        kl_buf_init(&svg);
        char path[1100];
        if (pic == 0) rc = kl_tune_svg_history(&svg, tr, n, minimize, info->metric);
        else kl_tune_svg_parallel(&svg, s, tr, n, minimize, info->metric);
        if (!rc && svg.failed) rc = KL_ENOMEM;
        if (rc) kl_err_set(&e, rc, "drawing the study: out of memory");
        snprintf(path, sizeof path, "%s/%s.svg", outdir, pic ? "parallel" : "history");
        if (!rc) rc = kl_write_file_atomic(path, svg.data, svg.len, &e);
        kl_buf_free(&svg);
    }
    if (rc) goto done;
    if (app_flag(&a, "json")) {
        kl_buf_puts(&b, "{\"study\":");
        kl_buf_json_str(&b, info->name);
        kl_buf_printf(&b, ",\"metric\":\"%s\",\"direction\":\"%s\",\"sampler\":\"%s\",\"sets\":[", info->metric,
                      minimize ? "minimize" : "maximize", info->sampler);
        for (const char *p = info->sets ? info->sets : ""; *p;) {
            size_t l = strcspn(p, "\n");
            char one[512];
            snprintf(one, sizeof one, "%.*s", (int)(l < sizeof one ? l : sizeof one - 1), p);
            if (p != info->sets) kl_buf_puts(&b, ",");
            kl_buf_json_str(&b, one);
            p += l + (p[l] == '\n');
        }
        kl_buf_puts(&b, "],\"best\":");
        if (best) kl_buf_printf(&b, "{\"number\":%d,\"value\":%.17g}", best->number, best->value);
        else kl_buf_puts(&b, "null");
        kl_buf_puts(&b, ",\"importance\":{");
        for (int p = 0; p < s->n; p++) {
            kl_buf_printf(&b, "%s", p ? "," : "");
            kl_buf_json_str(&b, s->p[p].name);
            kl_buf_printf(&b, ":%.4f", imp[p]);
        }
        kl_buf_puts(&b, "},\"trials\":[");
        for (size_t i = 0; i < n; i++) {
            kl_buf_printf(&b, "%s{\"number\":%d,\"state\":\"%s\",\"value\":", i ? "," : "", tr[i].number, kl_trial_state_name(tr[i].state));
            if (tr[i].state == KL_TRIAL_COMPLETE && isfinite(tr[i].value)) kl_buf_printf(&b, "%.17g", tr[i].value);
            else kl_buf_puts(&b, "null");
            kl_buf_printf(&b, ",\"epochs\":%d,\"params\":{", tr[i].ninter);
            int first = 1;
            for (int p = 0; p < s->n; p++) {
                if (!tr[i].params[p].present) continue;
                char val[96];
                kl_buf_printf(&b, "%s", first ? "" : ",");
                kl_buf_json_str(&b, s->p[p].name);
                kl_buf_puts(&b, ":");
                kl_buf_json_str(&b, kl_tune_value_str(&s->p[p], tr[i].params[p], val, sizeof val));
                first = 0;
            }
            kl_buf_puts(&b, "}}");
        }
        kl_buf_printf(&b, "],\"pictures\":[\"%s/history.svg\",\"%s/parallel.svg\"]}\n", outdir, outdir);
        fputs(b.data, stdout);
    } else {
        printf("study %s: %s (%s), sampler %s, %zu trials\n", info->name, info->metric, minimize ? "minimize" : "maximize",
               info->sampler, n);
        if (info->sets && *info->sets) { /* the fixed overrides of every trial, one per line */
            printf("--set:");
            for (const char *p = info->sets; *p;) {
                size_t l = strcspn(p, "\n");
                printf(" %.*s", (int)l, p);
                p += l + (p[l] == '\n');
            }
            printf("\n");
        }
        if (best) {
            char desc[1024];
            kl_tune_params_str(s, best->params, desc, sizeof desc);
            printf("best: trial %d, %s = %.6g [%s]\n\n", best->number, info->metric, best->value, desc);
        }
        printf("%6s  %-9s %12s %6s  %s\n", "TRIAL", "STATE", "VALUE", "EPOCHS", "PARAMS");
        for (size_t i = 0; i < n; i++) {
            char desc[1024], val[32] = "-";
            kl_tune_params_str(s, tr[i].params, desc, sizeof desc);
            if (tr[i].state == KL_TRIAL_COMPLETE && isfinite(tr[i].value)) snprintf(val, sizeof val, "%.6g", tr[i].value);
            printf("%6d  %-9s %12s %6d  %s%s\n", tr[i].number, kl_trial_state_name(tr[i].state), val, tr[i].ninter, desc,
                   best == &tr[i] ? "  <- best" : "");
        }
        printf("\nparameter importance (share of variance explained):\n");
        for (int p = 0; p < s->n; p++) printf("  %-24s %5.1f%%\n", s->p[p].name, 100 * imp[p]);
        printf("\npictures: %s/history.svg, %s/parallel.svg\n", outdir, outdir);
    }
done:
    kl_buf_free(&b);
    free(imp);
    kl_study_free(st);
    kl_track_close(t);
    if (rc) return app_fail(&e);
    return APP_EXIT_OK;
}

/* ==================================================================
 * keel tune register STUDY --name N [--alias A]
 * ================================================================== */

static const app_opt reg_opts[] = {
    {"name", 'n', 1, "NAME", "registered model name (required)", 0},
    {"alias", 'a', 1, "ALIAS", "also point this alias at the new version", 1},
    {"trial", 0, 1, "N", "register this trial instead of the best one", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec reg_spec = {
    "tune register",
    "keel tune register STUDY --name NAME [--alias A]... [--trial N] [--json]",
    "Register the best trial's model (or --trial N's) as a new version, linked to the trial's run.",
    "The model is the one the trial exported (its folder is recorded with the trial). The\n"
    "version is tagged with the study, the trial and its objective.",
    reg_opts, KL_ARRAY_LEN(reg_opts), 1, 1};

static int tune_register(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&reg_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *model = app_get(&a, "name");
    if (!model) return app_usage_error(&reg_spec, "--name is required");
    int64_t want;
    if ((rc = app_get_int(&a, &reg_spec, "trial", -1, &want)) >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    kl_study *st = NULL;
    const kl_trial *tr = NULL, *pick = NULL;
    size_t n = 0;
    char dir[4096];
    int64_t v = 0;
    if ((rc = app_store_open(0, &t, &e)) || (rc = kl_study_find_recorded(t, a.pos[0], &st, &e)) ||
        (rc = kl_study_load(st, &tr, &n, &e)))
        goto done;
    const kl_study_info *info = kl_study_get_info(st);
    if (want >= 0) {
        for (size_t i = 0; i < n; i++)
            if (tr[i].number == want) pick = &tr[i];
        if (!pick) {
            rc = kl_err_set(&e, KL_ENOTFOUND, "study %s has no trial %lld", info->name, (long long)want);
            goto done;
        }
        if (pick->state != KL_TRIAL_COMPLETE) {
            rc = kl_err_set(&e, KL_ESTATE, "trial %d of study %s is %s: only a complete trial has a model",
                            pick->number, info->name, kl_trial_state_name(pick->state));
            goto done;
        }
    } else if (!(pick = kl_tune_best(tr, n, info->minimize))) {
        rc = kl_err_set(&e, KL_ENOTFOUND, "study %s has no complete trial yet", info->name);
        goto done;
    }
    if ((rc = kl_study_trial_model_dir(st, pick->run_id, dir, sizeof dir, &e))) {
        if (rc == KL_ENOTFOUND)
            kl_err_set(&e, KL_ENOTFOUND,
                       "trial %d of study %s (run %lld) has no recorded model folder (a study run by an older keel); "
                       "register its folder with keel models register DIR --name %s --run %lld",
                       pick->number, info->name, (long long)pick->run_id, model, (long long)pick->run_id);
        goto done;
    }
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/model.onnx", dir);
    if (!kl_path_exists(mp)) {
        rc = kl_err_set(
            &e, KL_ENOTFOUND,
            "trial %d of study %s: %s is gone (the trial folders keep the models; re-run the study into a new --out)",
            pick->number, info->name, mp);
        goto done;
    }
    if ((rc = kl_registry_register(t, model, dir, pick->run_id, NULL, &v, &e))) goto done;
    char num[32], val[64];
    snprintf(num, sizeof num, "%d", pick->number);
    snprintf(val, sizeof val, "%.15g", pick->value); /* the shortest text that reads back the same */
    if (strtod(val, NULL) != pick->value) snprintf(val, sizeof val, "%.17g", pick->value);
    if ((rc = kl_registry_set_tag(t, model, v, "study", info->name, &e)) ||
        (rc = kl_registry_set_tag(t, model, v, "trial", num, &e)) ||
        (rc = kl_registry_set_tag(t, model, v, info->metric, val, &e)))
        goto done;
    const char *al[APP_MAX_VALUES];
    int na = app_get_all(&a, "alias", al, APP_MAX_VALUES);
    for (int i = 0; i < na && !rc; i++) rc = kl_registry_set_alias(t, model, al[i], v, &e);
    if (rc) goto done;
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"name\":");
        kl_buf_json_str(&b, model);
        kl_buf_printf(&b, ",\"version\":%lld,\"run_id\":%lld,\"study\":", (long long)v, (long long)pick->run_id);
        kl_buf_json_str(&b, info->name);
        kl_buf_printf(&b, ",\"trial\":%d,\"metric\":\"%s\",\"value\":%.17g,\"dir\":", pick->number, info->metric,
                      pick->value);
        kl_buf_json_str(&b, dir);
        kl_buf_puts(&b, "}\n");
        fputs(b.data, stdout);
        kl_buf_free(&b);
    } else {
        printf("registered %s version %lld (from run %lld: study %s trial %d, %s = %.6g)\n", model, (long long)v,
               (long long)pick->run_id, info->name, pick->number, info->metric, pick->value);
    }
done:
    kl_study_free(st);
    kl_track_close(t);
    return rc ? app_fail(&e) : APP_EXIT_OK;
}

int cmd_tune(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "show")) return tune_show(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "register")) return tune_register(argc - 1, argv + 1);
    return tune_run(argc, argv);
}
