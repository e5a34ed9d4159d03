/* keel pipeline: raw data to a served model in one declared file. Stages
 * ingest -> validate -> features -> train -> evaluate -> export -> register
 * (-> serve) run in-process through the library, each cached by a content
 * hash of its inputs, its config and the keel code version (state file
 * OUT/pipeline-state.json), each recorded in the experiment store and linked
 * into one lineage chain (dataset version -> feature hash -> run -> model
 * version -> alias); a self-contained report.html at the end. See
 * docs/pipeline.md. */
#ifndef KEEL_PIPELINE_H
#define KEEL_PIPELINE_H

#include <stdint.h>
#include <stdio.h>

#include "keel/core.h"
#include "keel/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    KL_STAGE_INGEST, KL_STAGE_VALIDATE, KL_STAGE_FEATURES, KL_STAGE_TRAIN, KL_STAGE_EVALUATE,
    KL_STAGE_EXPORT, KL_STAGE_REGISTER, KL_STAGE_SERVE, KL_STAGE_COUNT
};
const char *kl_pipeline_stage_name(int stage);
int kl_pipeline_stage_parse(const char *name);   /* -1 when unknown */


typedef struct {
    int state;                  /* 0 not selected, 1 ran, 2 skipped (cached), 3 failed */
    double seconds;             /* this run (0 when skipped) */
    double last_seconds;        /* the run whose outputs are current */
    char note[256];             /* one line: what it produced */
} kl_pipeline_stage_result;

typedef struct kl_pipeline_result {
    kl_pipeline_stage_result st[KL_STAGE_COUNT];
    char name[128];
    char out_dir[4096], report[4200], repo[4200], state_file[4200];
    char tracking[4096];
    char dataset_version[72], feature_hash[72];
    int64_t run_id, train_run_id, model_version;
    char model[128], alias[128];
    double test_auc, bayes_auc, test_accuracy;   /* NaN when unknown */
    int64_t test_rows;
    int failed_stage;           /* -1 when none */
    double seconds;
} kl_pipeline_result;

typedef struct {
    const char *path;           /* pipeline.yaml */
    const char *out_dir;        /* overrides the file's `out:` (relative to the cwd) */
    const char *from;           /* run this stage and every later one, cached or not */
    const char *only;           /* run only this stage (its inputs from the state file) */
    int force;                  /* ignore the cache */
    const char *const *sets;    /* "key=value" overrides of the file (--set) */
    int nsets;
    /* experiment store (--tracking); NULL = KEEL_TRACKING, else the file's `tracking:`,
     * else the nearest keel-runs/ or the per-user default (kl_track_store_resolve) */
    const char *tracking;
    int quiet;                  /* no progress lines from the stages */
    int verify;                 /* kl_verify_mode (keel/data.h) of the datasets the stages read
                                   against their manifests: 0 = full sha256 (default) */
    FILE *log;                  /* one line per stage (NULL = stderr) */
    /* Called once the stages before serve are done (the summary can be
     * printed before the serve stage blocks); may be NULL. */
    void (*on_done)(const kl_pipeline_result *r, void *ctx);
    void *ctx;
} kl_pipeline_opts;

/* Runs the pipeline. On a stage failure returns its error (prefixed with the
 * stage name) with res->failed_stage set; earlier outputs and their state
 * stay, so the next run resumes at the failed stage. */
int kl_pipeline_run(const kl_pipeline_opts *o, kl_pipeline_result *res, kl_err *e);

/* ==================================================================
 * The monitoring report (src/pipeline/monitor_report.c)
 * ================================================================== */

/* `keel monitor report --log DIR`: a self-contained HTML page (appended to
 * html) from a prediction log (keel serve --log-predictions DIR): per model
 * and version the reference histograms (profile.json kept in the log) next
 * to the live ones, the drift table with its thresholds (the server's
 * monitor fed the logged rows: the same statistics as /monitor), quality
 * (labels joined by request id) and latency over time. KL_ENOTFOUND when
 * DIR holds no prediction log. */
typedef struct {
    const char *log_dir;
    int64_t since_us;          /* only predictions served at or after (0: all) */
    const kl_monitor_cfg *cfg; /* thresholds (NULL: the defaults) */
} kl_monitor_report_opts;
int kl_monitor_report(const kl_monitor_report_opts *o, kl_buf *html, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
