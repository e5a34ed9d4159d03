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
#endif
