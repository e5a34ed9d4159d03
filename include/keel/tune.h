/* keel tune: search spaces, samplers (random, grid, TPE) and pruners
 * (median, successive halving). Pure functions of the study history and a
 * seed: the same history and trial number give the same suggestion in any
 * process, which makes studies resumable and parallel trials reproducible. */
#ifndef KEEL_TUNE_H
#define KEEL_TUNE_H

#include <keel/core.h>
#include <signal.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- search space ------------------------------------------------------ */

typedef enum { KL_TUNE_FLOAT, KL_TUNE_INT, KL_TUNE_CAT } kl_tune_kind;

typedef struct {
    char *name;
    kl_tune_kind kind;
    double low, high;   /* FLOAT and INT bounds (inclusive) */
    double step;        /* INT: step (>= 1); FLOAT: 0, or a step for a discretised float */
    int log;            /* sample on a log scale (low > 0) */
    char **choices;     /* CAT: the choices as written */
    int nchoices;
    int cond;           /* index of the parameter this one depends on, or -1 */
    char *cond_value;   /* present only when that parameter's value (as text) equals this */
} kl_tune_param;

typedef struct {
    kl_tune_param *p;
    int n;
} kl_tune_space;

/* YAML: a mapping name -> {type: float|int|categorical, low, high, log, step,
 * choices: [...], when: {param: value}}. Parameters a condition refers to must
 * come earlier. Errors name the line and the parameter. */
int kl_tune_space_load(const char *path, kl_tune_space **out, kl_err *e);
int kl_tune_space_parse(const kl_node *map, kl_tune_space **out, kl_err *e);
void kl_tune_space_free(kl_tune_space *s);
int kl_tune_space_find(const kl_tune_space *s, const char *name);

/* A value of one parameter in one trial: numeric value, or the choice index
 * of a categorical (as a double). */
typedef struct {
    int present;
    double v;
} kl_tune_value;

/* Formats a value as text ("0.001", "64", "relu"). */
const char *kl_tune_value_str(const kl_tune_param *p, kl_tune_value v, char *buf, size_t n);
/* Parses text into a value of p; KL_EINVAL when outside the space. */
int kl_tune_value_parse(const kl_tune_param *p, const char *text, kl_tune_value *out);

/* ---- trials ------------------------------------------------------------ */

typedef enum { KL_TRIAL_RUNNING, KL_TRIAL_COMPLETE, KL_TRIAL_PRUNED, KL_TRIAL_FAILED } kl_trial_state;

typedef struct {
    int number;
    kl_trial_state state;
    double value;           /* final objective (COMPLETE) */
    kl_tune_value *params;  /* space->n values */
    double *inter;          /* intermediate values by step (NaN = not reported) */
    int ninter;
    int64_t run_id;         /* its run in the experiment store (0 = not stored) */
} kl_trial;

/* The best COMPLETE trial with a finite value, NULL when there is none. */
const kl_trial *kl_tune_best(const kl_trial *t, size_t n, int minimize);

/* ---- samplers ---------------------------------------------------------- */

typedef enum { KL_SAMPLER_RANDOM, KL_SAMPLER_GRID, KL_SAMPLER_TPE } kl_sampler_kind;

typedef struct {
    kl_sampler_kind kind;
    uint64_t seed;
    int n_startup;          /* TPE: random trials first (default 8) */
    int n_ei_candidates;    /* TPE: candidates drawn from l(x) (default 64) */
    int multivariate;       /* TPE: one joint estimator over the unconditional numerical parameters */
    double bandwidth;       /* TPE multivariate: kernel width factor (default 0.03) */
    int grid_points;        /* GRID: points per float parameter without a step (default 5) */
    int constant_liar;      /* TPE: RUNNING trials in the history count as bad ones, so parallel
                               suggestions spread out instead of repeating (default 1) */
} kl_sampler_opts;

void kl_sampler_opts_default(kl_sampler_opts *o);
int kl_sampler_kind_parse(const char *s, kl_sampler_kind *out);

/* Suggests the parameters of trial `number` from the finished trials in
 * history (any order; RUNNING ones are ignored, except by TPE with
 * constant_liar, which counts them as the worst). GRID ignores the history:
 * trial k gets the k-th distinct grid point (kl_tune_grid_nth), so distinct
 * trial numbers never repeat a point. minimize: 1 to minimise, 0 to
 * maximise. out has space->n values. KL_ENOTFOUND when a grid is exhausted. */
int kl_tune_suggest(const kl_tune_space *s, const kl_sampler_opts *o, const kl_trial *history, size_t n,
                    int minimize, int number, kl_tune_value *out, kl_err *e);
/* Number of grid points (0 when the space has too many), counting the
 * combinations a condition makes equal. */
uint64_t kl_tune_grid_size(const kl_tune_space *s, const kl_sampler_opts *o);
/* The k-th distinct grid point (in grid order) into out; KL_ENOTFOUND when
 * there are fewer, with *distinct (may be NULL) the number there are. */
int kl_tune_grid_nth(const kl_tune_space *s, const kl_sampler_opts *o, uint64_t k, kl_tune_value *out,
                     uint64_t *distinct);

/* ---- pruners ----------------------------------------------------------- */

typedef enum { KL_PRUNER_NONE, KL_PRUNER_MEDIAN, KL_PRUNER_ASHA } kl_pruner_kind;

typedef struct {
    kl_pruner_kind kind;
    int n_startup_trials;   /* MEDIAN: finished trials before pruning starts (default 5) */
    int n_warmup_steps;     /* MEDIAN: steps of a trial before it may be pruned (default 0) */
    int min_resource;       /* ASHA: steps at the first rung (default 1) */
    int reduction_factor;   /* ASHA: eta (default 3) */
} kl_pruner_opts;

void kl_pruner_opts_default(kl_pruner_opts *o);
int kl_pruner_kind_parse(const char *s, kl_pruner_kind *out);
/* 1 when `current`, having reported its value for `step` (0-based), should
 * stop now, judged against the other trials in history. */
int kl_tune_should_prune(const kl_pruner_opts *o, const kl_trial *history, size_t n, const kl_trial *current,
                         int step, int minimize);

/* ---- studies in the experiment store ------------------------------------
 * A study is a root run (experiment "tune", tags kind=study, study=NAME and
 * its settings); each trial is a child run (tags kind=trial, study, trial=N,
 * state) with the parameters as params, the intermediate values as metric
 * `metric` by step and the final value as metric "objective". */

struct kl_track;
typedef struct kl_study kl_study;

typedef struct {
    const char *name;
    const char *metric;     /* e.g. "val_accuracy" */
    int minimize;
    const char *sampler;    /* recorded: "tpe", "random", "grid" */
    const char *space_sha256;
    const char *spec;       /* the training spec's path (recorded) */
    const char *space_text; /* the search space file (recorded, so `tune show` needs nothing else) */
    const char *sets;       /* fixed --set overrides of every trial, one KEY=VALUE per line ("" or NULL = none) */
} kl_study_info;

/* Opens the study NAME, creating it when new. An existing study whose metric,
 * direction, space or fixed --set overrides differ is KL_EINVAL (a
 * contradictory re-run). */
int kl_study_open(struct kl_track *t, const kl_tune_space *s, const kl_study_info *info, kl_study **out, kl_err *e);
/* Opens an existing study for reading (KL_ENOTFOUND when there is none); s may
 * be NULL and set later (e.g. parsed from the recorded space_text). */
int kl_study_find(struct kl_track *t, const char *name, const kl_tune_space *s, kl_study **out, kl_err *e);
void kl_study_set_space(kl_study *st, const kl_tune_space *s);
/* kl_study_find, with the space parsed from the recorded space file (owned
 * by the study; kl_study_space returns it). For readers: tune show, the UI. */
int kl_study_find_recorded(struct kl_track *t, const char *name, kl_study **out, kl_err *e);
const kl_tune_space *kl_study_space(const kl_study *st);
/* Names of all studies in the store, oldest first; free each and the array. */
int kl_study_list(struct kl_track *t, char ***names, size_t *n, kl_err *e);
void kl_study_free(kl_study *st);
const kl_study_info *kl_study_get_info(const kl_study *st); /* valid until kl_study_free */
/* All trials, by number (params parsed against the space; trials of a dead
 * tune process count as FAILED). Valid until the next load or kl_study_free. */
int kl_study_load(kl_study *st, const kl_trial **trials, size_t *n, kl_err *e);
/* Claims the study's next trial for this worker (kl_track_trial_claim:
 * one write transaction, so workers on any machines never get one number
 * twice): a trial lost by its worker (no heartbeat for heartbeat_timeout_s)
 * re-queued with its params, else the next fresh number below ntrials.
 * KL_EBUSY: none free now but some still running elsewhere (claim again
 * later); KL_ENOTFOUND: none left. */
typedef struct {
    int number;
    int64_t run_id;  /* the trial's run (running, state=running) */
    int requeued;    /* a lost trial run again: its params are recorded already */
    int lost_marked; /* trials this claim marked failed (worker lost) */
} kl_study_claim;
int kl_study_trial_claim(kl_study *st, int ntrials, double heartbeat_timeout_s, kl_study_claim *out, kl_err *e);
/* Records a claimed trial's parameters. */
int kl_study_trial_params(kl_study *st, int64_t run_id, const kl_tune_value *params, kl_err *e);
/* Gives an interrupted trial back: failed as lost ("WHY (re-queued)"), so
 * the next claim of any worker runs its number again. */
int kl_study_trial_release(kl_study *st, int64_t run_id, const char *why, kl_err *e);
/* The trial's heartbeat (a worker's thread, every few seconds while it
 * runs); KL_ESTATE when another worker has marked it lost. */
int kl_study_trial_heartbeat(kl_study *st, int64_t run_id, kl_err *e);
int kl_study_trial_report(kl_study *st, int64_t run_id, int step, double value, kl_err *e);
/* The folder a trial's model was exported to (keel tune register registers
 * the best one from it): recorded as the trial's tag model_dir (absolute). */
int kl_study_trial_set_model_dir(kl_study *st, int64_t run_id, const char *dir, kl_err *e);
/* The recorded model folder of a trial into out; KL_ENOTFOUND when none. */
int kl_study_trial_model_dir(kl_study *st, int64_t run_id, char *out, size_t n, kl_err *e);
/* Ends a trial: state, final value (COMPLETE), and an optional note (error
 * or cache origin). KL_ESTATE, and no state or end recorded, when the trial
 * is no longer running (another worker marked it lost). */
int kl_study_trial_end(kl_study *st, int64_t run_id, kl_trial_state state, double value, const char *note, kl_err *e);
const char *kl_trial_state_name(kl_trial_state s);

/* Parameter importance: the share of the objective's variance explained by
 * each parameter alone (correlation ratio over quantile bins for numbers,
 * per choice for categoricals), normalised to sum to 1. out has space->n. */
void kl_tune_importance(const kl_tune_space *s, const kl_trial *t, size_t n, double *out);

/* ---- running a study (src/tune/run.c) ----------------------------------------- */

/* After each epoch of a trial: the study metric's value (the trainer skips
 * epochs without one). A non-zero return stops the trial now (pruned, or
 * the run was stopped). */
typedef int (*kl_tune_value_fn)(void *ctx, int epoch, double value);
/* The trainer of a trial: train with the overrides sets (KEY=VALUE, the
 * fixed ones first, then the trial's parameters), artifacts in dir, its own
 * output to report, on_value after every epoch. The tune module knows no
 * training library; `keel tune` passes kl_train_run. */
typedef int (*kl_tune_train_fn)(void *ctx, const char *const *sets, int nsets, const char *dir, FILE *report,
                                kl_tune_value_fn on_value, void *value_ctx, kl_err *e);
typedef struct {
    kl_study *study; /* opened on space (kl_study_open) */
    const kl_tune_space *space;
    const char *metric; /* the per-epoch metric the objective is the best of */
    int minimize;
    const kl_sampler_opts *sampler;
    const kl_pruner_opts *pruner;
    size_t trials;           /* the study's trials in all (recorded ones count) */
    int parallel;            /* trials at once: 1 in this process, 2..64 in forked ones */
    double timeout_s;        /* start no new trial after this long; <= 0 none */
    const char *out_dir;     /* trial-N/ (a complete trial's model) and trial-N.log */
    const char *const *sets; /* fixed overrides of every trial */
    int nsets;
    int threads_per_trial; /* a forked trial's threads; 0 = the thread count / parallel */
    double heartbeat_timeout_s; /* another worker's trial with no heartbeat for this long is lost (<= 0: 30) */
    kl_tune_train_fn train;
    void *train_ctx;
    volatile sig_atomic_t *stop; /* non-zero (a signal handler): end the running trials as interrupted */
    FILE *progress;              /* a line per trial started and ended; NULL quiet */
} kl_tune_run_opts;
typedef struct {
    kl_trial *trials; /* the whole history, recorded trials first */
    size_t n;
    int launched;                                     /* trained in this run (not cached) */
    double seconds, train_seconds, train_cpu_seconds; /* wall; trials' wall (fork to exit) and CPU, summed */
} kl_tune_run_result;
/* Runs the study up to o->trials trials: sampler, cached configurations,
 * pruner, everything recorded in the study (running it again continues).
 * KL_ECANCELED when stopped, KL_ENOTFOUND when a trial never reported the
 * metric; res holds the history in every case (kl_tune_run_result_free). */
int kl_tune_run(const kl_tune_run_opts *o, kl_tune_run_result *res, kl_err *e);
void kl_tune_run_result_free(kl_tune_run_result *r);
/* "name=value, ..." of the present parameters of v. */
void kl_tune_params_str(const kl_tune_space *s, const kl_tune_value *v, char *out, size_t n);

/* ---- pictures (keel tune show and keel ui draw the same SVG) --------------- */

/* Optimisation history: each complete trial's value and the best so far. */
int kl_tune_svg_history(kl_buf *b, const kl_trial *t, size_t n, int minimize, const char *metric);
/* Parallel coordinates: an axis per parameter and one for the value; a
 * polyline per complete trial, darker for better values. */
void kl_tune_svg_parallel(kl_buf *b, const kl_tune_space *s, const kl_trial *t, size_t n, int minimize, const char *metric);

#ifdef __cplusplus
}
#endif
#endif
