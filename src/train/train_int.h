/* Private header of the training engine: the model spec, the model (layers
 * over one parameter block, built as a graph in keel's IR), the training step
 * (one planned graph with autodiff), optimizers, schedules, checkpoints, ONNX
 * export and the training loop. */
#ifndef KEEL_TRAIN_INT_H
#define KEEL_TRAIN_INT_H

#include <stdint.h>
#include <stdio.h>

#include "keel/core.h"
#include "keel/graph.h"
#include "keel/train.h"
#include "train/dist.h"

/* ================================================================ shapes */

typedef struct {
    int64_t N, C, H, W, M, kh, kw, sh, sw, ph, pw, OH, OW;
} tr_conv;
typedef struct {
    int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW;
} tr_pool2;


/* ================================================================ spec */

typedef enum {
    TR_L_LINEAR, TR_L_CONV2D, TR_L_BATCHNORM2D, TR_L_LAYERNORM, TR_L_DROPOUT, TR_L_EMBEDDING,
    TR_L_MAXPOOL2D, TR_L_AVGPOOL2D, TR_L_GAP, TR_L_FLATTEN, TR_L_RELU, TR_L_GELU, TR_L_SIGMOID,
    TR_L_TANH, TR_L_SOFTMAX, TR_L_ADD, TR_L_COUNT
} tr_ltype;

typedef enum { TR_LOSS_CE, TR_LOSS_BCE, TR_LOSS_MSE } tr_loss_kind;
typedef enum { TR_OPT_SGD, TR_OPT_ADAMW } tr_opt_kind;
typedef enum { TR_SCHED_CONSTANT, TR_SCHED_COSINE, TR_SCHED_EXPONENTIAL, TR_SCHED_STEP } tr_sched_kind;

#define TR_MAX_LAYERS 128
#define TR_NAME 64

typedef struct {
    tr_ltype type;
    char name[TR_NAME];
    char in_name[2][TR_NAME];   /* "" = previous layer (or the input) */
    int line;                   /* spec line */
    int64_t out, in;            /* linear (in 0 = inferred), conv channels, embedding dim */
    int64_t num;                /* embedding rows */
    int64_t k[2], s[2], p[2];   /* kernel, stride, padding */
    int bias;
    double eps, momentum, p_drop;
} tr_lspec;

/* data.image: how the loader makes the model's (C, size, size) input. */
typedef struct {
    int given, size, resize, multiple, crop /* kl_crop_mode */, flip, workers, prefetch;
    float mean[4], std[4];
    int undistort; double cam[10];   /* fx fy cx cy k1 k2 p1 p2 width height */
} tr_image_spec;

typedef struct {
    char *path;                 /* spec file */
    uint64_t seed;
    int in_rank; int64_t in_dims[3]; int in_int;  /* per-sample input shape; ints (embedding) */
    int nlayers; tr_lspec layers[TR_MAX_LAYERS];
    /* loss */
    tr_loss_kind loss; double label_smoothing; int nclass_w; float class_w[1024];
    int64_t classes;            /* 0 = from the output size */
    /* optimizer */
    tr_opt_kind opt; double lr, momentum, dampening, wd, beta1, beta2, adam_eps; int nesterov;
    /* schedule */
    tr_sched_kind sched; int64_t warmup; double min_lr, gamma; int64_t step_size;
    /* train */
    int64_t epochs, batch, max_steps, ckpt_every, patience, log_every;
    double clip, val_fraction, min_delta;
    int shuffle, drop_last;
    int deterministic;                  /* train.deterministic: the same weights at any number of ranks */
    int64_t micro_batches, check_every; /* train.distributed (src/train/parallel.c) */
    double bucket_mb, first_bucket_mb, dist_timeout;
    char monitor[32];           /* val_loss | val_acc */
    int fp16;                   /* train.precision: fp16 (mixed precision, loss scaling) */
    double ls_init, ls_growth, ls_backoff, ls_min; int64_t ls_interval;
    /* data */
    char *x_path, *y_path, *val_x, *val_y;
    struct tr_dsrc *ds;         /* data.dataset (Parquet) source, or NULL (train_data.h) */
    char *shards, *val_shards;  /* image shard sets (src/train/images.c) */
    tr_image_spec img;          /* data.image */
    char *init_path;            /* train.init: initial weights (safetensors) */
    char *text;                 /* spec file contents (for meta.json) */
} tr_spec;

int kl__train_spec_load(const char *path, tr_spec **out, kl_err *e);
/* As kl__train_spec_load with "key=value" overrides applied to the document first;
 * the recorded spec text is then the overridden document as JSON. */
int kl__train_spec_load_set(const char *path, const char *const *sets, int nsets, tr_spec **out, kl_err *e);
int kl__train_spec_load_str(const char *text, const char *name, tr_spec **out, kl_err *e);
void kl__train_spec_free(tr_spec *s);
const char *kl__train_ltype_name(tr_ltype t);

/* ================================================================ model */

typedef struct {
    tr_lspec sp;
    int in[2];                  /* producer layer index, -1 = model input */
    int rank; int64_t dims[3];  /* per-sample output shape */
    int64_t w_off, b_off, w_n, b_n; /* offsets into the parameter block (-1 none) */
    int64_t buf_off;            /* running mean (C) then var (C) in the buffer block */
    tr_conv cv; tr_pool2 pl;    /* conv / pooling geometry */
} tr_layer;

typedef struct {
    const char *tag_name;
    uint64_t bytes;
} tr_mem_part;

/* The eval-mode forward as a graph (src/train/graph.c): built on first use,
 * one plan (and arena) for the full batch and one for a shorter last batch. */
typedef struct {
    kl_graph *g;
    kl_plan *plan[2];
    int64_t planB[2];
    void *arena[2];
    kl_tensor *in;       /* (n_in): the batch, then views of the parameters */
    int n_in;
    int64_t *ids;               /* integer inputs (embedding) converted from the float batch */
    int out_v, loss_v;          /* values "output", "loss" */
} tr_evalg;

typedef struct tr_model {
    tr_spec *spec;              /* borrowed */
    int n; tr_layer L[TR_MAX_LAYERS];
    int64_t nparams, nbuf;
    float *params, *grads, *bufs; /* (nparams), (nparams), (nbuf) */
    int64_t B;                  /* planned batch */
    int64_t in_numel, out_numel;
    float *out;                 /* (B, out_numel): the eval forward's output rows */
    kl_rng drop_rng;            /* unused since dropout is keyed by step (kept in checkpoints) */
    kl_pool *pool;              /* the pool the graph runs on; NULL: the process pool (--threads / KEEL_THREADS) */
    int fp16;                   /* activations and gradients at float16 precision */
    int f64;                    /* graphs built in float64 (whole-model gradient checks) */
    tr_evalg ev;                /* eval forward through the graph executor */
    struct tr_stepg *st;        /* the training step as one plan (step.c) */
    void *arena;                /* the step's arena (eval plans use it too when it is large enough) */
    uint64_t arena_bytes;
} tr_model;

/* Builds the model from a spec: shapes, parameter layout (no memory). */
int kl__train_model_new(tr_spec *s, tr_model **out, kl_err *e);
void kl__train_model_free(tr_model *m);
/* Memory plan for batch B: bytes of params (+ buffers), gradients and
 * optimizer state in bytes[0..2]; bytes[3..4] (activations, workspace) come
 * from the step's plan (kl__train_step_prepare). */
void kl__train_model_plan(const tr_model *m, int64_t B, int opt_slots, uint64_t bytes[5]);
/* Allocates parameters, gradients, buffers, the step's arena (when
 * prepared) and the output rows for B. */
int kl__train_model_alloc(tr_model *m, int64_t B, kl_err *e);
/* PyTorch default initialisation from rng. */
void kl__train_model_init(tr_model *m, kl_rng *rng);
/* Eval-mode forward and loss through the model's graph (kl_plan); returns
 * the output (B, out_numel) (valid until the next call), NULL with e set on
 * failure; *loss: the batch's mean loss against yi (CE) or yf. */
const float *kl__train_model_eval(tr_model *m, const float *x, const int64_t *yi, const float *yf, int64_t B,
                                  double *loss, kl_err *e);
void kl__train_eval_free(tr_model *m);
/* Builds the model's graph. TR_G_EVAL (finalized): inputs "input" then every
 * parameter and buffer by its checkpoint name, output "output". TR_G_TRAIN
 * (not finalized: autodiff extends it): the same inputs, then "labels" (CE)
 * or "targets", one "<layer>.seed" per dropout layer, "loss_scale" (fp16);
 * BatchNormalization in training mode (outputs "<bn>.running_mean_new",
 * "<bn>.running_var_new"), seeded ai.keel.train::Dropout, the loss op
 * (output "loss"; "loss_scaled" = loss * loss_scale in fp16 mode).
 * params_init: parameters as initializers wrapping the parameter block (for
 * export) instead of graph inputs. TR_G_EVAL_LOSS: TR_G_EVAL plus the
 * labels/targets input and the "loss" output (eval-mode loss). */
enum { TR_G_EVAL, TR_G_EVAL_LOSS, TR_G_TRAIN };
#define TR_TRAIN_DOMAIN "ai.keel.train"
int kl__train_graph_build(tr_model *m, int mode, int params_init, kl_graph **out, kl_err *e);
/* The training step on the graph (step.c). kl__train_step_prepare (before
 * kl__train_model_alloc): builds the train-mode graph, appends the gradients
 * (kl_graph_autodiff) and plans it for batch B; gives the planned activation
 * and workspace bytes (KL_EUNSUPPORTED naming the node when an op has no
 * gradient rule). kl__train_step_run: one forward + loss +
 * backward; the gradients land in m->grads, the BatchNorm running statistics
 * in m->bufs; *loss is the unscaled batch loss. scale: the fp16 loss scale
 * (1 otherwise); step keys the dropout masks. */
typedef struct tr_stepg tr_stepg;
int kl__train_step_prepare(tr_model *m, int64_t B, uint64_t *act_bytes, uint64_t *ws_bytes, kl_err *e);
uint64_t kl__train_step_arena_bytes(const tr_model *m);
int kl__train_step_nodes(const tr_model *m);
/* Calls fn(ctx, node) after each node of the step's plan run (NULL: none);
 * with a hook the fp16 rounding of the gradients is the hook's job. */
void kl__train_step_set_hook(tr_model *m, kl_plan_node_fn fn, void *ctx);
/* node_of_ref[r]: the graph node writing tensor ref r's gradient (-1: none,
 * e.g. a buffer, or zeros off the loss path). */
void kl__train_step_grad_producers(const tr_model *m, int *node_of_ref, int nref);
int kl__train_step_run(tr_model *m, const float *x, const int64_t *yi, const float *yf, int64_t B, int64_t step,
                    float scale, double *loss, kl_err *e);
void kl__train_step_free(tr_model *m);
/* Rounds n floats to float16 precision in place (F16C); overflow -> inf. */
void kl__train_round_f16(float *x, int64_t n);
/* Parameter names and tensors, for checkpoints and export. */
typedef struct { char name[96]; float *data; int rank; int64_t dims[4]; int64_t n; int buffer; } tr_tensor_ref;
int kl__train_model_tensors(tr_model *m, tr_tensor_ref *out, int max);

/* ================================================================ optim */

typedef struct {
    tr_opt_kind kind;
    int64_t n;
    float *m, *v;               /* momentum / exp_avg, exp_avg_sq */
    int64_t t;                  /* steps taken */
    int has_buf;                /* SGD: momentum buffer initialised */
} tr_optim;

int kl__train_optim_init(tr_optim *o, const tr_spec *s, int64_t n, kl_err *e);
void kl__train_optim_free(tr_optim *o);
int kl__train_optim_slots(const tr_spec *s);
void kl__train_optim_step(tr_optim *o, const tr_spec *s, float *p, const float *g, double lr);
double kl__train_sched_lr(const tr_spec *s, int64_t step, int64_t epoch, int64_t total_steps);
/* Scales g to max_norm when the global norm is above; returns the norm. */
double kl__train_clip_grad(float *g, int64_t n, double max_norm);

/* ================================================================ checkpoints */

typedef struct { const char *name; const float *data; int rank; int64_t dims[4]; } tr_st_entry;
/* Writes a safetensors file atomically (F32 tensors; metadata: string pairs
 * given as a JSON object text) and PATH.sha256. */
int kl__train_safetensors_write(const char *path, const tr_st_entry *t, int n, const char *meta_json,
                         kl_err *e);
/* Reads a safetensors file; calls back per tensor. meta_out: the
 * __metadata__ object as JSON text (caller frees). */
typedef int (*tr_st_fn)(void *ctx, const char *name, const char *dtype, int rank,
                        const int64_t *dims, const void *data, size_t nbytes, kl_err *e);
int kl__train_safetensors_read(const char *path, tr_st_fn fn, void *ctx, char **meta_out, kl_err *e);
/* The same over bytes in memory (NAME for messages). Every entry is checked
 * before fn sees it: known dtype, rank <= 8, whole-number shape, offsets in
 * the data, and data_offsets spanning exactly numel * dtype size bytes. */
int kl__train_safetensors_read_mem(const void *bytes, size_t len, const char *name, tr_st_fn fn, void *ctx,
                                char **meta_out, kl_err *e);

/* ================================================================ export */

/* Writes the eval-mode forward graph (parameters as initializers) as ONNX
 * opset 17 with kl_onnx_save (src/train/graph.c). */
int kl__train_export_onnx(tr_model *m, const char *path, kl_err *e);

/* Evaluation metrics into a cJSON object (src/train/metrics.c): regression
 * (pred and y of n values), per-class precision/recall/F1 from a C x C
 * confusion matrix (rows: true class), and binary calibration, PR curve and
 * thresholds from scores (logits) and labels (threshold < 0: none given). */
struct cJSON;
void kl__eval_regression(const float *pred, const float *y, int64_t n, struct cJSON *j);
void kl__eval_classes(const int64_t *cm, int64_t C, struct cJSON *j);
int kl__eval_binary(const double *score, const uint8_t *pos, int64_t n, double threshold, int npts, struct cJSON *j);

/* ================================================================ data-parallel step (parallel.c) */

typedef struct tr_par tr_par;
/* Rows [off, off + cnt) of the current global batch. */
typedef int (*tr_rows_fn)(void *ctx, int64_t off, int64_t cnt, const float **x, const int64_t **yi, const float **yf,
                          kl_err *e);
/* Rows per leaf: what the step is planned for (B at one process, not deterministic). */
int64_t kl__train_par_leaf_rows(const tr_spec *s, int world, int64_t B);
/* Memory the step's reduction adds to the gradient block (tagged grads). */
uint64_t kl__train_par_bytes(const tr_spec *s, int world, int64_t nparams, int64_t nbuf);
int kl__train_par_check(const tr_spec *s, int world, int images, kl_err *e);
int kl__train_par_new(tr_model *m, const tr_spec *s, tr_dist *d, int64_t B, int no_allreduce, tr_par **out, kl_err *e);
/* The step's gradients (m->grads), running statistics (m->bufs) and loss of
 * the global batch of nb rows, the same on every rank. */
int kl__train_par_grads(tr_par *p, int64_t nb, int64_t step, float scale, tr_rows_fn get, void *ctx, double *loss,
                        kl_err *e);
/* Every rank's weights hash the same; otherwise an error naming the step. */
int kl__train_par_same_weights(tr_par *p, int64_t step, kl_err *e);
double kl__train_par_compute_s(const tr_par *p);
/* Bytes the reduction allocated beyond the gradient block (fast mode: the
 * running statistics' and the loss's vector; the buckets are ranges of the
 * gradient block itself; deterministic mode: the tree vectors). */
uint64_t kl__train_par_alloc_bytes(const tr_par *p);
/* Fast mode, image shards: each rank's rows are its loader's batch, its share of nb (kl__train_par_rank_share). */
void kl__train_par_even(tr_par *p);
/* Rank rank's rows of an nb-row global batch whose rows are dealt to the
 * world ranks in turn (the image loader's sharding): the shares differ by
 * one row at most. */
int64_t kl__train_par_rank_share(int64_t nb, int rank, int world);
void kl__train_par_free(tr_par *p);

#endif
