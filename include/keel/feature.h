/* keel features: declared, pure, versioned feature transforms. A spec (YAML)
 * is fitted once on a dataset and frozen into features.json (spec + fitted
 * state + feature_hash). One executor runs the same per-value transform code
 * offline over columns (kl_features_apply) and online over one JSON record
 * (kl_features_transform_row), with per-entity windows served from an online
 * store (kl_fstore). See docs/features.md. */
#ifndef KEEL_FEATURE_H
#define KEEL_FEATURE_H

#include <stddef.h>
#include <stdint.h>

#include "keel/column.h"
#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the transform library; part of every feature_hash. Bump when
 * any transform's output changes for some input. */
#define KL_FEATURES_LIBRARY_VERSION "keel-features/1"

typedef struct kl_features kl_features;

/* ==================================================================
 * Spec, fitted state, features.json
 * ================================================================== */

/* Loads a YAML (or JSON) spec; errors carry file:line:col. Not yet fitted
 * unless no transform needs fitting (then kl_features_fit is a no-op). */
int kl_features_spec_load(const char *path, kl_features **out, kl_err *e);
int kl_features_spec_parse(const char *text, size_t len, const char *name, kl_features **out, kl_err *e);
void kl_features_free(kl_features *f);   /* NULL is a no-op */

/* Input columns the features (and the label) read: names and types. The
 * pointers are valid until kl_features_free. */
size_t kl_features_num_inputs(const kl_features *f);
const char *kl_features_input_name(const kl_features *f, size_t i);
kl_col_type kl_features_input_type(const kl_features *f, size_t i);
const char *kl_features_label(const kl_features *f);  /* NULL when none */
kl_col_type kl_features_label_type(const kl_features *f); /* the label column's type (before class indexing) */
/* A string label is a class name: fit learns the classes (sorted bytewise,
 * at most 65,536) from the label column, so it needs the label
 * (kl_features_fit_needs_label), and apply writes the int32 index of each
 * row's class. The names, index order; 0 for a numeric label. */
size_t kl_features_label_classes(const kl_features *f, const char *const **names);
int kl_features_fit_needs_label(const kl_features *f);
/* How input i reads from a raw record (:predict, features transform): its
 * name, type (the ingest schema's when recorded: "category", "timestamp" ...;
 * else the column type), whether a null is accepted, and the zone of naive
 * times (NULL: UTC or not a timestamp). Pointers valid until kl_features_free. */
typedef struct { const char *name, *type, *timezone; int nullable; } kl_features_field;
void kl_features_input_field(const kl_features *f, size_t i, kl_features_field *out);

/* Learns the fitted state (means, vocabularies, quantile edges ...) from
 * columns (matched by name; types checked). Deterministic: serial sums in
 * row order. Also measures the cost per row of each feature on these rows
 * (informational; not hashed). */
int kl_features_fit(kl_features *f, kl_column *const *cols, size_t ncols, kl_err *e);
/* Records how ingest read the raw inputs (their fields of schema s: type,
 * time zone, constraints, and its null tokens) so that the online path reads
 * a raw record exactly as ingest did; kept in features.json ("raw") and
 * covered by the hash. s NULL forgets it (inputs read with their type's
 * defaults). Fails when an input's type disagrees with the schema. */
struct kl_schema;
int kl_features_bind_schema(kl_features *f, const struct kl_schema *s, kl_err *e);
/* kl_features_bind_schema with the schema of the dataset at path (its
 * manifest; none for a lone Parquet file or clickgen:). */
int kl_features_bind_dataset(kl_features *f, const char *path, kl_err *e);
int kl_features_is_fitted(const kl_features *f);

/* features.json: {"format":"keel.features/1", "library_version", "feature_hash",
 * "features":[...spec + "state"...], "outputs":[layout], "measured":{...}}.
 * Save needs a fitted set. Load re-derives the hash from the content and
 * fails with KL_ECHECKSUM when it does not match. */
int kl_features_save(const kl_features *f, const char *path, kl_err *e);
int kl_features_load(const char *path, kl_features **out, kl_err *e);
int kl_features_load_str(const char *text, size_t len, const char *name, kl_features **out, kl_err *e);
/* Hex sha256 of the canonical spec + fitted state + library version. */
const char *kl_features_hash(const kl_features *f);
/* Canonical JSON of the features (what the hash covers); caller frees. */
char *kl_features_canonical(const kl_features *f);

/* ==================================================================
 * Output layout: a float32 vector of kl_features_width() values; one slot
 * per scalar feature, k+1 slots for a one-hot over k vocabulary entries
 * (the last one is the unknown bucket).
 * ================================================================== */

size_t kl_features_count(const kl_features *f);
/* The name of the first window feature (which needs the online store of
 * recent events per entity: kl_fstore), NULL when there is none. */
const char *kl_features_first_window(const kl_features *f);
const char *kl_features_name(const kl_features *f, size_t feature);
size_t kl_features_width(const kl_features *f);
const char *kl_features_slot_name(const kl_features *f, size_t slot);   /* "category=books" */
kl_col_type kl_features_slot_type(const kl_features *f, size_t slot);   /* declared output dtype */
size_t kl_features_slot_feature(const kl_features *f, size_t slot);

/* Counted fallbacks (unknown categories, nulls filled, divisions by zero,
 * negative log1p inputs clamped, out-of-window rows). */
typedef struct {
    uint64_t rows;
    uint64_t unknown;        /* values not in a vocabulary → unknown bucket */
    uint64_t null_filled;    /* nulls replaced by the declared fill */
    uint64_t div_zero;       /* ratio with a zero denominator → on_zero */
    uint64_t clamped;        /* log1p of a negative value → log1p(0) */
    uint64_t empty_window;   /* window with too few earlier events → empty */
    uint64_t label_dropped;  /* rows left out: null label (label nulls: drop, the default) */
} kl_features_counts;

/* ==================================================================
 * Offline: columnar apply
 * ================================================================== */

/* Computes every output slot for every row of cols (matched by name, types
 * checked). *out: kl_features_width() new columns named by slot and typed by
 * the slot dtype, plus the label column (a copy) when the spec has one, in
 * that order (*nout of them; free each with kl_column_free and the array with
 * free). Rows whose label is null are dropped (counted in label_dropped),
 * refused or filled, as the spec's label `nulls` says. Multi-threaded over rows (pool NULL = default); the result does not
 * depend on the thread count or on the order of the rows. */
int kl_features_apply(const kl_features *f, kl_column *const *cols, size_t ncols, kl_pool *pool,
                      kl_column ***out, size_t *nout, kl_features_counts *counts, kl_err *e);

/* ==================================================================
 * Feature datasets (src/feature/dataset.c)
 * ================================================================== */

/* Reads the columns the features need (and the label, when with_label and
 * the data has it) from path: a dataset folder, version folder, .parquet
 * file, or clickgen:ROWS[:SEED] (the click log, generated in memory).
 * A dataset's files are first checked against its manifest (full sha256).
 * Free with kl_features_free_columns. */
int kl_features_read_data(const char *path, const kl_features *f, int with_label, kl_column ***cols, size_t *ncols, kl_err *e);
/* The same with verify: the kl_verify_mode (keel/data.h) of that check. */
int kl_features_read_data_verify(const char *path, const kl_features *f, int with_label, int verify, kl_column ***cols,
                                 size_t *ncols, kl_err *e);
void kl_features_free_columns(kl_column **cols, size_t n);  /* NULL is a no-op */
/* Writes apply's output: out ending in .parquet = one file; else a features
 * dataset folder (features.parquet with key/value keel.feature_hash,
 * features.json, manifest.json "keel-features-dataset-1" naming source).
 * pq_write_opts: a kl_pq_write_opts (parquet.h), NULL = defaults. */
int kl_features_write(const kl_features *f, kl_column *const *cols, size_t ncols, const char *out, const char *source,
                      const void *pq_write_opts, kl_err *e);

/* Cost per row of feature i measured at fit (ns; 0 when unknown). */
double kl_features_cost_ns(const kl_features *f, size_t feature);

/* ==================================================================
 * Online: one record at a time
 * ================================================================== */

/* The online store of recent events per entity for the window features,
 * on one of two backends named by path:
 * - a file path (or NULL): in memory, loaded from that SQLite file (when it
 *   exists) and written back by kl_fstore_flush. The store records the
 *   feature_hash it was filled for; opening it with other features fails
 *   (KL_ESTATE). Transforms share a read lock, appends take the write lock.
 * - redis://[:PASSWORD@]HOST[:PORT][/DB][?timeout_ms=N&connect_timeout_ms=N
 *   &prefix=P]: the histories live in Redis (keys P<feature_hash>:<feature>:
 *   <entity>; P defaults to "keel:fs:"), shared by every process that opens
 *   it with the same features; each append is written at once, atomically
 *   (flush is a no-op). Every call is bounded by the timeouts (defaults
 *   250 ms per command, 500 ms per connect); an unreachable server fails with
 *   KL_ETIMEOUT and the next call reconnects. Open fails when it does not
 *   answer.
 * The same ordering, pruning and point-in-time rules on both. Thread-safe. */
typedef struct kl_fstore kl_fstore;
int kl_fstore_open(const kl_features *f, const char *path, kl_fstore **out, kl_err *e);
/* The same, but a server that does not answer yet does not fail the open
 * (the first call connects): for a server process that must start anyway. */
int kl_fstore_open_lazy(const kl_features *f, const char *path, kl_fstore **out, kl_err *e);
/* Whether a store name is a URL of a server backend (redis://). */
int kl_fstore_is_url(const char *path);
/* What to do when a window read fails (Redis unreachable): 0 fail with the
 * error (KL_ETIMEOUT), 1 use empty windows. Either way it is counted. */
void kl_fstore_set_on_error(kl_fstore *s, int empty);
uint64_t kl_fstore_errors(const kl_fstore *s);
/* KL_OK when the backend answers (always for the in-memory store). */
int kl_fstore_ping(kl_fstore *s, kl_err *e);
/* Checks that a record (cJSON object) carries what every window feature
 * appends (entity, time, value), appending nothing. */
int kl_fstore_check_record(kl_fstore *s, const void *cjson, kl_err *e);
void kl_fstore_free(kl_fstore *s);     /* NULL is a no-op; does not flush */
/* Adds one event (a raw record as a JSON object) to every window feature's
 * history — all or none of them. cjson: a cJSON object (void* to keep cJSON
 * out of the API). */
int kl_fstore_append(kl_fstore *s, const char *json, size_t len, kl_err *e);
int kl_fstore_append_record(kl_fstore *s, const void *cjson, kl_err *e);
/* Appends row `row` of columns (matched by name) — materialize. */
int kl_fstore_append_columns(kl_fstore *s, kl_column *const *cols, size_t ncols, size_t row, kl_err *e);
/* Writes the changed entities to the SQLite file (one transaction); a no-op
 * for Redis. */
int kl_fstore_flush(kl_fstore *s, kl_err *e);
uint64_t kl_fstore_entities(const kl_fstore *s); /* Redis: 0 (not counted) */
uint64_t kl_fstore_events(const kl_fstore *s);   /* Redis: events this handle appended */

/* Fills the store from every row of cols in time order (stable). */
int kl_features_materialize(const kl_features *f, kl_column *const *cols, size_t ncols,
                            kl_fstore *s, kl_err *e);

/* One raw record (a JSON object with the input fields) → the model's input
 * values: out[kl_features_width()] float32. Windows read store (may be NULL
 * when there are no window features) using only events strictly before the
 * record's timestamp; the record itself is not appended. counts may be NULL. */
int kl_features_transform_row(const kl_features *f, const kl_fstore *store, const char *json,
                              size_t len, float *out, kl_features_counts *counts, kl_err *e);
/* Same from a parsed cJSON object, giving the values in double (the value
 * before the cast to each slot's dtype; cast it to compare with apply). */
int kl_features_transform_record(const kl_features *f, const kl_fstore *store, const void *cjson,
                                 double *out, kl_features_counts *counts, kl_err *e);
/* Appends raw input i of a record (a cJSON object) to column c, read with
 * the same grammar as kl_features_transform_record (the recorded ingest
 * field and null tokens): c has kl_features_input_type(f, i). A missing
 * field, a null, or a value that does not read is appended as a null;
 * returns 1 for a value that did not read, else 0 (KL_ENOMEM on failure). */
int kl_features_input_append(const kl_features *f, size_t i, const void *cjson, kl_column *c);

#ifdef __cplusplus
}
#endif
#endif
