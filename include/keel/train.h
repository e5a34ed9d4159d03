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
} kl_train_opts;

/* Trains SPEC into opts->out_dir. Spec errors name the line / layer; data
 * errors (NaN, labels out of range) name the row. */
int kl_train_run(const char *spec_path, const kl_train_opts *opts, kl_err *e);

/* Checks a spec (and the data it names, when present) without training. */
int kl_train_check(const char *spec_path, kl_err *e);

/* Evaluates a trained model folder on X/y .npy files: accuracy, AUC (binary),
 * loss and the confusion matrix, printed to out (json: one JSON object).
 * logits_out (may be NULL): writes the model outputs (rows, outputs) as .npy.
 * The forward is the training graph's eval mode (the graph model.onnx holds). */
int kl_train_eval(const char *dir, const char *x_path, const char *y_path, int json,
                  const char *logits_out, FILE *out, kl_err *e);

/* The same on an image shard set (keel pack), transformed as the model's
 * spec says for evaluation (centre crop, no flip). */
int kl_train_eval_shards(const char *dir, const char *shards, int json, const char *logits_out, FILE *out, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
