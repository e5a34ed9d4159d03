/* Private header of keel pipeline: the run context shared by the driver
 * (pipeline.c), the stages (stages.c) and the report (report.c). */
#ifndef KEEL_PIPELINE_INT_H
#define KEEL_PIPELINE_INT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "keel/core.h"
#include "keel/pipeline.h"
#include "keel/track.h"

typedef struct {
    const kl_pipeline_opts *o;
    kl_pipeline_result *res;
    const kl_node *root;            /* the pipeline file */
    const kl_node *cfg[KL_STAGE_COUNT]; /* each stage's config (NULL = stage absent) */
    char base[4096];                /* folder of the pipeline file */
    char out[4096];                 /* output folder (absolute) */
    cJSON *state;                   /* pipeline-state.json: {"stages": {name: {...}}} */
    kl_track *t;
    int64_t run_id;                 /* the pipeline's run */
    FILE *log;
} pl_ctx;

/* A path from the pipeline file, relative to its folder (caller frees). */
char *kl__pl_path(const pl_ctx *c, const char *p);
/* The state entry of a stage (NULL when it has not run) and its outputs. */
cJSON *kl__pl_stage_state(const pl_ctx *c, int stage);
const char *kl__pl_out_str(const pl_ctx *c, int stage, const char *key); /* "" when absent */
double kl__pl_out_num(const pl_ctx *c, int stage, const char *key);      /* NaN when absent */

/* Runs one stage; fills out (its outputs: identity strings and numbers)
 * and extra input hashes into key_in (already holding the config). A stage
 * adds the hashes of the files it reads (spec files, sources) to key_in
 * through kl__pl_stage_inputs before it runs, so a skip can be decided. */
int kl__pl_stage_inputs(pl_ctx *c, int stage, kl_buf *key_in, kl_err *e);
/* The stage's config keys against those it reads (unknown → KL_EINVAL with a
 * suggestion); run for every stage when the file is loaded. */
int kl__pl_stage_check_keys(const pl_ctx *c, int stage, kl_err *e);
int kl__pl_stage_run(pl_ctx *c, int stage, cJSON *out, int64_t stage_run, kl_err *e);
/* Paths that must exist for a cached stage's outputs to be reused. */
int kl__pl_stage_outputs_present(const pl_ctx *c, int stage);

/* report.html from the state and the stage outputs. */
int kl__pl_report_write(pl_ctx *c, const char *path, kl_err *e);

/* monitor_report.c: the reports' stylesheet; the reference profile's
 * histograms (the pipeline report's features section) */
extern const char *const kl__pl_report_css;
void kl__pl_profile_section(kl_buf *b, const kl_profile *p);

#endif
