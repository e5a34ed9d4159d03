/* keel pipeline run PIPELINE.yaml: raw data to a served model, every stage
 * cached by content hash, recorded in the experiment store and linked into
 * one lineage chain; prints a summary with the key numbers and paths. */
#include "app.h"

#include <keel/pipeline.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const app_opt run_opts[] = {
    {"from", 0, 1, "STAGE", "run STAGE and every later stage even when cached (earlier outputs are reused)", 0},
    {"only", 0, 1, "STAGE", "run only STAGE (its inputs come from the state file)", 0},
    {"force", 'f', 0, NULL, "run every stage, ignoring the cache", 0},
    {"out", 'o', 1, "DIR", "output folder (default: the file's out:, relative to the file)", 0},
    {"set", 0, 1, "KEY=VALUE", "override a key of the file, e.g. --set stages.ingest.source=/data/clicks.csv", 1},
    {"quiet", 'q', 0, NULL, "no progress lines from the stages", 0},
    {"json", 0, 0, NULL, "summary as JSON", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec run_spec = {
    "pipeline run",
    "keel pipeline run PIPELINE.yaml [--from STAGE | --only STAGE] [--force] [--out DIR] [--set KEY=VALUE]... [--json]",
    "run the stages ingest -> validate -> features -> train -> evaluate -> export -> register (-> serve)",
    "A stage whose inputs, config and keel code version are unchanged is skipped (its\n"
    "outputs are reused; state in OUT/pipeline-state.json). A failing stage stops the run\n"
    "with its error; earlier outputs stay and the next run resumes there. Every stage is\n"
    "a run in the experiment store (--tracking, KEEL_TRACKING, the file's tracking:, else\n"
    "as 'keel runs where' says), children of the pipeline's run, which carries the\n"
    "lineage: dataset version -> feature hash -> training\n"
    "run -> model version -> alias. OUT/report.html holds the data quality, features,\n"
    "curves, evaluation, model card, lineage and timings. See docs/pipeline.md.",
    run_opts, KL_ARRAY_LEN(run_opts), 1, 1};

static const char *const state_word[] = {"-", "ran", "cached", "FAILED"};

static void jstr(const char *k, const char *v, int comma) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_json_str(&b, v ? v : "");
    printf("%s\"%s\": %s", comma ? ", " : "", k, b.data ? b.data : "\"\"");
    kl_buf_free(&b);
}

static void jnum(const char *k, double v) {
    if (isfinite(v)) printf(", \"%s\": %.6g", k, v);
    else printf(", \"%s\": null", k);
}

static void summary_json(const kl_pipeline_result *r, int rc, kl_err *e) {
    printf("{\"ok\": %s", rc ? "false" : "true");
    jstr("pipeline", r->name, 1);
    jstr("out", r->out_dir, 1);
    jstr("report", r->report, 1);
    jstr("repo", r->repo, 1);
    jstr("tracking", r->tracking, 1);
    jstr("dataset_version", r->dataset_version, 1);
    jstr("feature_hash", r->feature_hash, 1);
    printf(", \"run_id\": %lld, \"train_run_id\": %lld, \"model_version\": %lld", (long long)r->run_id, (long long)r->train_run_id, (long long)r->model_version);
    jstr("model", r->model, 1);
    jstr("alias", r->alias, 1);
    jnum("test_auc", r->test_auc);
    jnum("bayes_auc", r->bayes_auc);
    jnum("test_accuracy", r->test_accuracy);
    printf(", \"test_rows\": %lld, \"seconds\": %.3f, \"stages\": {", (long long)r->test_rows, r->seconds);
    int first = 1;
    for (int s = 0; s < KL_STAGE_COUNT; s++) {
        printf("%s\"%s\": {\"state\": \"%s\", \"seconds\": %.3f, \"last_seconds\": %.3f", first ? "" : ", ", kl_pipeline_stage_name(s),
               r->st[s].state == 0 ? "not run" : state_word[r->st[s].state], r->st[s].seconds, r->st[s].last_seconds);
        jstr("note", r->st[s].note, 1);
        printf("}");
        first = 0;
    }
    printf("}");
    if (rc) {
        jstr("failed_stage", r->failed_stage >= 0 ? kl_pipeline_stage_name(r->failed_stage) : "setup", 1);
        jstr("error", kl_err_what(e), 1);
    }
    printf("}\n");
}

static void summary_text(const kl_pipeline_result *r, void *ctx) {
    printf("\n== keel pipeline %s: done in %.1f s ==\n", r->name, r->seconds);
    printf("stage       state    seconds (last run)\n");
    for (int s = 0; s < KL_STAGE_COUNT; s++) {
        if (!r->st[s].state && !r->st[s].last_seconds) continue;
        printf("%-11s %-8s %7.2f (%.2f)  %s\n", kl_pipeline_stage_name(s), state_word[r->st[s].state], r->st[s].seconds, r->st[s].last_seconds, r->st[s].note);
    }
    if (isfinite(r->test_auc)) {
        printf("\ntest AUC            %.4f  (%lld rows", r->test_auc, (long long)r->test_rows);
        if (isfinite(r->test_accuracy)) printf(", accuracy %.2f%%", 100 * r->test_accuracy);
        printf(")\n");
    }
    if (isfinite(r->bayes_auc)) printf("Bayes-optimal AUC   %.4f  (the generator's true click probability on the same rows; gap %.4f)\n", r->bayes_auc, r->bayes_auc - r->test_auc);
    printf("\nlineage: dataset %.12s -> features %.12s -> run %lld", r->dataset_version, r->feature_hash, (long long)r->train_run_id);
    if (r->model_version) printf(" -> model %s/%lld", r->model, (long long)r->model_version);
    if (r->alias[0]) printf(" -> %s@%s", r->model, r->alias);
    printf("\n");
    if (r->report[0]) printf("report:     %s\n", r->report);
    if (r->repo[0]) printf("model repo: %s   (keel serve %s)\n", r->repo, r->repo);
    printf("runs:       %s   (pipeline run %lld; keel ui --tracking %s)\n", r->tracking, (long long)r->run_id, r->tracking);
}

static int run(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&run_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    if (app_get(&a, "from") && app_get(&a, "only")) return app_usage_error(&run_spec, "--from and --only exclude each other");
    const char *names[2] = {app_get(&a, "from"), app_get(&a, "only")};
    for (int i = 0; i < 2; i++)
        if (names[i] && kl_pipeline_stage_parse(names[i]) < 0)
            return app_usage_error(&run_spec, "--%s %s: not a stage (ingest, validate, features, train, evaluate, export, register, serve)", i ? "only" : "from", names[i]);
    const char *sets[APP_MAX_VALUES];
    kl_pipeline_opts o = {0};
    o.path = a.pos[0];
    o.from = app_get(&a, "from");
    o.only = app_get(&a, "only");
    o.force = app_flag(&a, "force");
    o.out_dir = app_get(&a, "out");
    o.nsets = app_get_all(&a, "set", sets, APP_MAX_VALUES);
    o.sets = sets;
    o.quiet = app_flag(&a, "quiet");
    if ((rc = app_get_verify(&a, &run_spec, &o.verify)) >= 0) return rc;
    if (app_config() && kl_config_source(app_config(), "tracking") == KL_SRC_FLAG)
        o.tracking = kl_config_get(app_config(), "tracking");
    int json = app_flag(&a, "json");
    o.log = json ? stderr : stdout;
    if (!json) o.on_done = summary_text;
    kl_err e = {0};
    kl_pipeline_result r;
    rc = kl_pipeline_run(&o, &r, &e);
    if (json) {
        summary_json(&r, rc, &e);
        return rc ? APP_EXIT_FAIL : APP_EXIT_OK;
    }
    if (rc) {
        if (r.failed_stage >= 0)
            fprintf(stderr, "keel pipeline: stopped at stage %s; the outputs of the stages before it are kept, and the next run resumes there\n",
                    kl_pipeline_stage_name(r.failed_stage));
        return app_fail(&e);
    }
    return APP_EXIT_OK;
}

int cmd_pipeline(int argc, char **argv) {
    static const app_command sub[] = {
        {"run", "run a pipeline file (cached stages are skipped)", run},
    };
    return app_dispatch("pipeline", sub, KL_ARRAY_LEN(sub), argc, argv);
}
