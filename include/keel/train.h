/* keel training engine: model specs (YAML) -> layers over one parameter
 * block -> forward/backward (a tape of kernels that map 1:1 to ONNX ops) ->
 * losses, optimizers (PyTorch semantics), schedules -> checkpoints
 * (safetensors) -> artifacts (model.onnx, meta.json, card.md, metrics.csv,
 * curves.svg). Deterministic at any thread count. See docs/training.md. */
#ifndef KEEL_TRAIN_H
#define KEEL_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the per-epoch callback sees (NaN where there is no such value). */
typedef struct {
    int64_t epoch;              /* 0-based, the epoch just finished */
    int64_t step;               /* optimizer steps so far */
    double train_loss;          /* mean training loss of the epoch */
    double val_loss, val_accuracy; /* on the validation split (NaN without one / for regression) */
} kl_train_epoch;

/* Called after every epoch (after validation). Returns 0 to go on, non-zero
 * to stop training now: the run then ends with KL_OK having written only
 * metrics.csv (and its checkpoints), not the model artifacts. */
typedef int (*kl_train_epoch_fn)(void *ctx, const kl_train_epoch *ep);

enum { KL_TRAIN_DIST_AUTO = 0, KL_TRAIN_DIST_MPI = 1, KL_TRAIN_DIST_OFF = 2 };

typedef struct {
    const char *out_dir;        /* artifacts folder (created) */
    int resume;                 /* continue from the newest valid checkpoint in out_dir */
    int memory_report;          /* print the memory plan (to report) */
    uint64_t memory_limit;      /* 0 = none; the plan above it fails before training */
    int64_t max_steps;          /* 0 = spec / epochs */
    int quiet;                  /* no progress line */
    FILE *report;               /* where the memory report and summary go (NULL = stdout) */
    int json;                   /* summary as JSON */
    const char *const *sets;    /* "key=value" overrides of spec keys (--set), applied before parsing */
    int nsets;
    /* Experiment store (include/keel/track.h): when tracking is set, the run
     * is logged there (params, per-epoch metrics, final metrics, artifacts,
     * lineage tags). NULL = not logged. */
    const char *tracking;
    const char *tracking_how;   /* the rule that chose it, for messages (NULL = "given"; kl_store_loc.how) */
    const char *experiment;     /* NULL = "train" */
    const char *run_name;       /* NULL = the spec's file name */
    int64_t parent_run;         /* 0 = none */
    int64_t *run_id_out;        /* may be NULL: the logged run's id */
    kl_train_epoch_fn on_epoch; /* NULL = none (keel tune reports and prunes through it) */
    void *on_epoch_ctx;
    int verify;                 /* kl_verify_mode (keel/data.h) of a Parquet dataset's files
                                   against its manifest: 0 = full sha256 (default) */
    int distributed;            /* KL_TRAIN_DIST_AUTO: data-parallel on MPI when a launcher (mpirun, srun)
                                   started keel; _MPI: required; _OFF: one process (docs/training.md) */
    int dist_no_allreduce;      /* benchmark baseline only: skip the gradient all-reduce (the ranks
                                   diverge; the weight check is off) */
} kl_train_opts;

/* Trains SPEC into opts->out_dir. Spec errors name the line / layer; data
 * errors (NaN, labels out of range) name the row. */
int kl_train_run(const char *spec_path, const kl_train_opts *opts, kl_err *e);

/* Checks a spec (and the data it names, when present) without training. */
int kl_train_check(const char *spec_path, kl_err *e);
/* The loss a spec trains with: "cross_entropy", "bce_with_logits" or "mse"
 * (a static string), for choices that depend on it (keel tune's metric). */
int kl_train_spec_loss(const char *spec_path, const char **loss, kl_err *e);

/* Evaluates a trained model folder on X/y .npy files: accuracy, AUC (binary),
 * loss and the confusion matrix, printed to out (json: one JSON object).
 * logits_out (may be NULL): writes the model outputs (rows, outputs) as .npy.
 * The forward is the training graph's eval mode (the graph model.onnx holds). */
int kl_train_eval(const char *dir, const char *x_path, const char *y_path, int json,
                  const char *logits_out, FILE *out, kl_err *e);

/* Evaluation source and options: .npy X/y, or the model's Parquet source
 * (its spec's data.dataset as recorded in meta.json, or `dataset`) and one
 * of its splits. */
typedef struct {
    const char *x_path, *y_path;  /* .npy pair, or NULL: the Parquet source */
    const char *shards;           /* or an image shard set (keel pack), centre-cropped as the spec says */
    const char *dataset;          /* overrides the recorded dataset path (NULL = meta.json's) */
    const char *split;            /* train | val | test (default) | all */
    const char *logits_out;       /* may be NULL */
    int roc_points;               /* at most this many ROC points (0 = 101) */
    int with_roc;                 /* kl_train_eval_print --json: include the ROC points */
    const char *reference_column; /* Parquet source: also the AUC of this score column on the same
                                     rows ("reference_auc"), e.g. the generator's true probability */
    int has_threshold;            /* binary: also the metrics at this probability threshold */
    double threshold;             /* ("at_threshold"; the F1-optimal one is always reported) */
    int verify;                   /* Parquet source: kl_verify_mode (keel/data.h), 0 = full sha256 */
} kl_eval_opts;

/* Evaluates a model folder; *out_cjson (a cJSON object, caller frees with
 * cJSON_Delete) = {"rows","loss","accuracy","auc" (binary),"roc":{"fpr",
 * "tpr","threshold"} (binary),"confusion":[[..]] (rows: true class),
 * "dataset","split","dataset_version","feature_hash","reference_auc" (Parquet source),
 * classification: "per_class":[{class,precision,recall,f1,support}],"macro_f1";
 * binary: "brier","ece","reliability":[{lo,hi,count,mean_probability,
 * fraction_positive}],"pr":{"precision","recall","threshold"},"average_precision",
 * "best_f1_threshold" and "at_threshold" ({threshold,precision,recall,f1,accuracy});
 * regression (mse loss): "mae","rmse","r2","baseline":{predictor,mean,mae,rmse}}. */
int kl_train_evaluate(const char *dir, const kl_eval_opts *o, void **out_cjson, kl_err *e);
/* The same, printed (json: one line). */
int kl_train_eval_print(const char *dir, const kl_eval_opts *o, int json, FILE *out, kl_err *e);
/* The same on an image shard set (keel pack), transformed as the model's
 * spec says for evaluation (centre crop, no flip). */
int kl_train_eval_shards(const char *dir, const char *shards, int json, const char *logits_out, FILE *out, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
