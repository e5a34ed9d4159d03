/* Training data arrays (private to src/train). */
#ifndef KEEL_TRAIN_DATA_H
#define KEEL_TRAIN_DATA_H
#include <stdint.h>
#include "keel/core.h"
typedef struct {
    int rank; int64_t dims[8]; int64_t n;
    int is_int;
    double *f;   /* n values, as double (exact for the ints training uses) */
} tr_array;
/* Reads .npy through the tensor layer's reader (kl_npy_load_mem) into doubles
 * (src/train/data_npy.c). */
int kl__train_npy_read(const char *path, tr_array *out, kl_err *e);
int kl__train_npy_read_mem(const void *bytes, size_t len, const char *name, tr_array *out, kl_err *e);
void kl__train_array_free(tr_array *a);

/* A Parquet training source (spec `data: {dataset: ..., label: ...}`), read
 * through the data layer's Parquet reader (src/train/data_pq.c). */
enum { TR_PART_TRAIN, TR_PART_VAL, TR_PART_TEST, TR_PART_ALL };
typedef struct tr_dsrc {
    char *path;                 /* dataset folder, version folder or .parquet file */
    char *label;
    char **features; int nfeatures;   /* none = every numeric column but label/exclude/split column
                                         and columns named "__*" (reference columns) */
    char **exclude; int nexclude;
    int has_split;
    char *split_col;            /* split by this column's values ... */
    char **vals[3]; int nvals[3];     /* train / val / test values (as text) */
    double frac[3];             /* ... or by fractions of the rows */
    int shuffle;                /* fractions: seeded per-row draw (1) or contiguous in row order (0) */
    uint64_t seed;
    char *ref_col;              /* eval only: a reference score column read along (not a feature) */
    int verify;                 /* kl_verify_mode of the files against the manifest (0 = sha256) */
} tr_dsrc;

/* What was read: the feature columns used and the dataset's identity. */
typedef struct {
    char **names; int nnames;   /* feature columns, in X's column order */
    char dataset_version[72];   /* manifest version_id, else "" */
    char manifest_sha[65];      /* sha256 of manifest.json (or of the single file), "" when none */
    char feature_hash[72];      /* when the dataset is a feature output, else "" */
    char features_json[4096];   /* features.json beside the manifest, "" when none */
    int64_t rows_total, rows_part[3];
    double *ref;                /* ref_col's values of the rows read (when ref_col) */
    char **classes;
    int nclasses; /* the manifest's label_classes: class k's name (a string label), else none */
} tr_dsinfo;

struct kl_node;
int kl__train_dsrc_parse(const struct kl_node *data, tr_dsrc **out, kl_err *e);
void kl__train_dsrc_free(tr_dsrc *d);
/* Reads part (TR_PART_*) of the source: X (rows, features) and y (rows) as
 * doubles. Nulls, non-numeric and missing columns are errors naming the
 * column (and the row). info may be NULL. */
int kl__train_dsrc_load(const tr_dsrc *d, int part, tr_array *X, tr_array *Y, tr_dsinfo *info, kl_err *e);
void kl__train_dsinfo_free(tr_dsinfo *i);

/* The same source by row group (docs/training.md, "Parquet by row group"):
 * its units are the row groups holding rows of the part, each read on its
 * own (kl_pq_read_row_group) with the checks of kl__train_dsrc_load. Only for a
 * source whose split is a per-row rule of the dataset row (no split column)
 * and without a reference column (kl__train_dsrc_streamable). */
typedef struct tr_pqs tr_pqs;
int kl__train_dsrc_streamable(const tr_dsrc *d);
/* Opens the source and counts each row group's rows of part (footers only). */
int kl__train_pqs_open(const tr_dsrc *d, int part, tr_pqs **out, tr_dsinfo *info, kl_err *e);
void kl__train_pqs_close(tr_pqs *st);
int64_t kl__train_pqs_units(const tr_pqs *st);
int64_t kl__train_pqs_unit_rows(const tr_pqs *st, int64_t u); /* rows of the part in unit u */
int64_t kl__train_pqs_rows(const tr_pqs *st);                 /* rows of the part in all */
/* "FILE: row group G (file rows a..b, dataset rows c..d)", for messages */
void kl__train_pqs_unit_name(const tr_pqs *st, int64_t u, char *buf, size_t n);
/* Unit u's rows of the part, in file order, as kl__train_dsrc_load gives them;
 * rowid (kl__train_pqs_unit_rows entries, or NULL): each one's dataset row. */
int kl__train_pqs_read(tr_pqs *st, int64_t u, tr_array *X, tr_array *Y, int64_t *rowid, kl_err *e);
/* Rows and row groups decoded so far. */
void kl__train_pqs_decoded(const tr_pqs *st, int64_t *rows, int64_t *units);

/* The epoch order over a tr_pqs source (src/train/data_stream.c): rows at
 * positions of the epoch's global batches, decoding the row groups they are
 * in. A unit's rows as the trainer uses them: */
typedef struct {
    int64_t n;
    float *x;    /* (n, F) */
    int64_t *yi; /* cross_entropy labels, or NULL */
    float *yf;   /* other targets (n, K), or NULL */
} tr_rowset;
/* Checks and converts a unit's arrays (frees X and Y), as the whole arrays are. */
typedef int (*tr_rowset_conv)(void *ctx, tr_array *X, tr_array *Y, tr_rowset *out, kl_err *e);
typedef struct {
    uint64_t seed;
    int shuffle, drop_last;
    int64_t B;       /* the global batch */
    int64_t streams; /* S: train.distributed.micro_batches */
    int cache;       /* decoded units kept */
    int64_t F, K;    /* floats per input row, per target row */
    tr_rowset_conv conv;
    void *ctx;
} tr_stream_cfg;
typedef struct {
    double taken, sum, sumsq;           /* rows given out; sums of (dataset row + 1) and its square */
    double rows_decoded, units_decoded; /* row groups decoded and their rows */
} tr_stream_stats;
typedef struct tr_stream tr_stream;
int kl__train_stream_new(tr_pqs *src, const tr_stream_cfg *cfg, tr_stream **out, kl_err *e);
void kl__train_stream_free(tr_stream *st);
/* Rows at positions [P0, P0 + n) of epoch's order (batch b holds positions
 * [b * B, b * B + its rows)) into x (n, F) and yi or yf. */
int kl__train_stream_rows(tr_stream *st, int64_t epoch, int64_t P0, int64_t n, float *x, int64_t *yi, float *yf,
                          kl_err *e);
void kl__train_stream_stats_get(const tr_stream *st, tr_stream_stats *out);
/* Keeps up to cache decoded units from now on (a pass over every stream in
 * turn, as an evaluation of the training rows, needs one per stream). */
int kl__train_stream_cache_grow(tr_stream *st, int cache, kl_err *e);
#endif
