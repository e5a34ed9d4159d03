/* Private header of the feature layer: the feature set structure, the
 * transform library (one per-value evaluator shared by the offline and the
 * online path) and window aggregation over an ordered event slice. */
#ifndef KEEL_FEATURE_INT_H
#define KEEL_FEATURE_INT_H

#include <stdint.h>

#include "keel/data.h"
#include "keel/feature.h"

typedef enum {
    TF_PASSTHROUGH, TF_FILL_NULL, TF_CLIP, TF_LOG1P, TF_STANDARDIZE, TF_MINMAX, TF_BUCKETIZE,
    TF_ONEHOT, TF_INDEX, TF_HASH, TF_DATEPART, TF_TIME_SINCE, TF_RATIO, TF_DIFF, TF_WINDOW,
    TF_COUNT
} tf_kind;

typedef enum { DP_HOUR, DP_MINUTE, DP_WEEKDAY, DP_DAY_OF_YEAR, DP_DAY_OF_MONTH, DP_MONTH, DP_YEAR, DP_COUNT } dp_part;

typedef enum { WA_COUNT, WA_SUM, WA_MEAN, WA_MIN, WA_MAX, WA_LAST, WA_MEAN_INTERVAL, WA_SINCE_LAST, WA_COUNT_ } wa_agg;

/* One input of a feature. */
typedef struct {
    char *column;
    kl_col_type type;
    int nullable;     /* 1 when a fill is given (or the transform maps nulls) */
    int has_fill;
    double fill;
    int col;          /* index into kl_features.inputs */
    const kl_field *raw;  /* how a raw value of the column reads (its fcol's raw; bound after parsing) */
} fin;

/* One feature. */
typedef struct {
    char *name;
    int64_t version;
    tf_kind kind;
    kl_col_type dtype;           /* output dtype */
    fin in[2];                   /* inputs (windows: entity, time) */
    int nin;
    int has_value;               /* windows: value input */
    fin value;
    /* params */
    double lo, hi;               /* clip */
    int has_lo, has_hi;
    int64_t buckets; uint64_t seed;   /* hash */
    dp_part part;
    int64_t since_us; int has_since;  /* time_since constant reference */
    double unit_s;               /* time_since / intervals: seconds per unit */
    double on_zero;              /* ratio */
    int64_t max_size;            /* vocabulary */
    int64_t quantiles;           /* bucketize fitted */
    wa_agg agg; int64_t events; int64_t within_us; double empty;
    /* fitted state */
    int fitted;
    double mean, std, min, max;
    double *edges; size_t nedges;                /* bucketize */
    char **vocab; size_t *vocab_len; size_t nvocab;   /* onehot/index (int64 keys as decimal text) */
    void *vmap;                                  /* vocab lookup (hash map) */
    /* layout */
    size_t slot0, width;
    double cost_ns;
} feat;

/* A column the feature set reads. */
typedef struct {
    char *name;
    kl_col_type type;
    int nullable;
    const kl_field *raw;  /* its field of kl_features.raw, else dflt (set by kl__features_bind_raw) */
    kl_field dflt;        /* without a recorded field: the type's defaults (nullable, naive = UTC) */
} fcol;

/* What apply does with a row whose label is null. */
typedef enum { LABEL_DROP, LABEL_FAIL, LABEL_FILL } label_nulls;

struct kl_features {
    feat *f; size_t nf;
    fcol *inputs; size_t ninputs;
    char *label; kl_col_type label_type; int has_label;
    label_nulls label_nulls; double label_fill;   /* label: {nulls: drop|fail|fill, fill: V} */
    /* A string label's classes, sorted bytewise, learnt at fit: applied, the
     * label becomes the int32 index of its class (the model's class k is
     * classes[k]). NULL for a numeric label. */
    char **classes;
    size_t nclasses;
    size_t width;
    char **slot_names;
    int fitted;
    char hash[65];
    /* The grammar of the raw inputs: the ingest schema's fields of the input
     * columns and its null tokens, recorded at fit from the dataset's
     * manifest, so that the online path reads a raw value exactly as ingest
     * did (kl_cell_parse). NULL: every input reads with its type's defaults. */
    kl_schema *raw;
};

/* Most classes a string label may have (fit refuses more). */
#define KL_FEATURES_MAX_CLASSES 65536
static inline int kl__label_is_class(const kl_features *f) { return f->has_label && f->label_type == KL_COL_STRING; }

/* A value gathered from a column or a JSON field. */
typedef struct {
    int null;
    int64_t i;        /* integer-like types */
    double d;         /* numeric value (ints converted) */
    const char *s;    /* strings */
    size_t n;
    char num[KL_CELL_NUMBUF];  /* a JSON number read as a string field: s points here */
} fval;

/* An event of an entity's history (windows). */
typedef struct {
    int64_t ts;
    double v;
} fevent;

/* ---- transforms (transform.c) ---- */
const char *kl__tf_name(tf_kind k);
int kl__tf_parse(const char *s, tf_kind *out);
const char *kl__dp_name(dp_part p);
const char *kl__wa_name(wa_agg a);
int kl__tf_needs_fit(const feat *F);
/* Evaluates a non-window feature on its gathered inputs into out[F->width].
 * Returns KL_OK or an error for a null in a non-nullable input. */
int kl__tf_eval(const feat *F, const fval *in, double *out, kl_features_counts *c, kl_err *e);
/* Window feature: ev[0..n) are the entity's events in (ts, v) order that are
 * strictly before t; picks the window and aggregates. */
double kl__tf_window(const feat *F, const fevent *ev, size_t n, int64_t t, kl_features_counts *c);
/* Events kept per entity online (index of the first event to keep). */
size_t kl__tf_window_keep_from(const feat *F, const fevent *ev, size_t n);
int kl__fevent_cmp(const fevent *a, const fevent *b);
uint64_t kl__xxh64(const void *data, size_t len, uint64_t seed);
/* Vocabulary lookup: index or nvocab (unknown). */
size_t kl__vocab_find(const feat *F, const char *s, size_t n);
int kl__vocab_build(feat *F, kl_err *e);
/* Key bytes of a value for hashing / vocabularies: strings as is, integers as
 * decimal text. buf >= 24. */
const char *kl__fval_key(const fin *in, const fval *v, char *buf, size_t *n);
/* Value of a record field into an fval: the ingest grammar of the input's
 * raw field (kl_json_cell_parse); d: the null tokens (NULL: none). */
int kl__fval_from_json(const fin *in, const kl_dialect *d, const void *cjson_obj, fval *v, kl_err *e);
/* Whether data of column type `have` feeds an input declared `declared`
 * (the same type, or int32 data for an int64 input). */
int kl__features_type_ok(kl_col_type declared, kl_col_type have);
/* Points every input (and fin) at its field of f->raw; checks the types. */
int kl__features_bind_raw(kl_features *f, kl_err *e);
static inline const kl_dialect *kl__features_nulls(const kl_features *f) { return f->raw ? &f->raw->dialect : NULL; }
void kl__fval_from_col(const kl_column *c, size_t row, fval *v);
/* kl_features_transform_record that also gives every input column's value
 * as read (seen[f->ninputs]; a column no feature reads is left as it was;
 * strings point into obj). */
int kl__features_transform_seen(const kl_features *f, const kl_fstore *store, const void *cjson_obj, double *out,
                                kl_features_counts *counts, fval *seen, kl_err *e);
/* kl_features_apply; with_label 0: the slots only, every row (the label is
 * neither needed nor copied) — the reference profile of the fit rows. */
int kl__features_apply_slots(const kl_features *f, kl_column *const *cols, size_t ncols, int with_label, kl_pool *pool,
                             kl_column ***out, size_t *nout, kl_features_counts *counts, kl_err *e);
/* Stores a double into slot column c at row as its dtype. */
void kl__store_slot(kl_column *c, size_t row, double v);

/* ---- a byte-key hash map (fmap.c): key bytes -> uint64 ---- */
typedef struct { uint64_t h; uint64_t off; uint32_t n; uint32_t used; uint64_t v; } fmap_ent;
typedef struct { fmap_ent *e; size_t cap, len; char *pool; size_t pool_len, pool_cap; } fmap;
int kl__fmap_init(fmap *m, size_t expect);
void kl__fmap_free(fmap *m);
uint64_t *kl__fmap_get(const fmap *m, const void *k, size_t n);   /* NULL when absent */
/* Value slot of key k, inserted with value 0 when absent (*created = 1). NULL: out of memory. */
uint64_t *kl__fmap_put(fmap *m, const void *k, size_t n, int *created);
static inline const char *kl__fmap_key(const fmap *m, const fmap_ent *x) { return m->pool + x->off; }

/* ---- the value transforms of one-input kinds, shared by kl__tf_eval and
 * the typed column loops of apply.c (one implementation of each) ---- */
#include <math.h>
double kl__datepart(dp_part p, int64_t us);
static inline double kl__tf_num1(const feat *F, double x, kl_features_counts *c) {
    switch (F->kind) {
    case TF_CLIP:
        if (F->has_lo && x < F->lo) x = F->lo;
        if (F->has_hi && x > F->hi) x = F->hi;
        return x;
    case TF_LOG1P:
        if (!(x >= 0)) { if (c) c->clamped++; x = 0; }
        return log1p(x);
    case TF_STANDARDIZE: return (x - F->mean) / F->std;
    case TF_MINMAX: return F->max > F->min ? (x - F->min) / (F->max - F->min) : 0.0;
    case TF_BUCKETIZE: {
        size_t lo = 0, hi = F->nedges;   /* number of edges <= x */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (F->edges[mid] <= x) lo = mid + 1; else hi = mid;
        }
        return (double)lo;
    }
    default: return x;   /* passthrough, fill_null */
    }
}
/* datepart of t, or time_since (t - ref) in the feature's unit; t, ref in µs. */
static inline double kl__tf_time1(const feat *F, int64_t t, int64_t ref) {
    if (F->kind == TF_DATEPART) return kl__datepart(F->part, t);
    return (double)(t - ref) / (F->unit_s * 1e6);
}
static inline int kl__tf_is_num1(const feat *F) {
    return F->kind == TF_PASSTHROUGH || F->kind == TF_FILL_NULL || F->kind == TF_CLIP || F->kind == TF_LOG1P ||
           F->kind == TF_STANDARDIZE || F->kind == TF_MINMAX || F->kind == TF_BUCKETIZE;
}

/* ---- window inputs, shared by both paths ---- */
static inline int64_t kl__win_time(const feat *F, const fval *t) {
    return F->in[1].type == KL_COL_DATE ? t->i * 86400000000LL : t->i;
}
static inline double kl__win_value(const feat *F, const fval *v, kl_features_counts *c) {
    if (!F->has_value) return 0.0;
    if (v->null) { if (c) c->null_filled++; return F->value.fill; }
    return v->d;
}
/* Entity key bytes: strings as is, integers as 8 little-endian bytes. */
static inline const char *kl__entity_key(const feat *F, const fval *v, char buf[8], size_t *n) {
    if (F->in[0].type == KL_COL_STRING || F->in[0].type == KL_COL_BINARY) { *n = v->n; return v->s ? v->s : ""; }
    uint64_t u = (uint64_t)v->i;
    for (int k = 0; k < 8; k++) buf[k] = (char)(u >> (8 * k));
    *n = 8;
    return buf;
}

/* ---- offline (apply.c) ---- */
/* Columns of f->inputs found in cols by name with types checked: out[ninputs]. */
int kl__features_bind(const kl_features *f, kl_column *const *cols, size_t ncols, int need_label,
                      const kl_column **out, const kl_column **label, size_t *nrows, kl_err *e);

/* ---- spec (spec.c) ---- */
int kl__features_layout(kl_features *f, kl_err *e);
int kl__features_rehash(kl_features *f, kl_err *e);

#endif
