/* keel Parquet: a writer (PLAIN / RLE_DICTIONARY, definition levels, page and
 * row-group statistics, zstd/snappy/gzip/lz4_raw/none; list and struct
 * columns) and a reader (every
 * standard encoding and codec, data page v1 and v2, CRCs, statistics based
 * row-group and page skipping, projection, batched columnar reads into
 * kl_column and a row-at-a-time adapter; nested LIST/MAP/STRUCT columns read
 * as JSON text; columns it cannot read named with the reason). See
 * docs/parquet.md. */
#ifndef KEEL_PARQUET_H
#define KEEL_PARQUET_H

#include <stddef.h>
#include <stdint.h>

#include "keel/column.h"
#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Values and statistics
 * ================================================================== */

typedef enum { KL_PQ_UNCOMPRESSED, KL_PQ_SNAPPY, KL_PQ_GZIP, KL_PQ_ZSTD, KL_PQ_LZ4_RAW } kl_pq_codec; /* written */
const char *kl_pq_codec_name(kl_pq_codec c);             /* "none","snappy","gzip","zstd","lz4_raw" */
int kl_pq_codec_parse(const char *s, kl_pq_codec *out);  /* also "uncompressed" */

/* One scalar. Integer-like types (BOOL, INT32, INT64, DATE, TIMESTAMP) use i,
 * FLOAT32/FLOAT64 use f, STRING/BINARY use s/n (not NUL-terminated in
 * general; owned by whoever returned it). */
typedef struct {
    kl_col_type type;
    int is_null;
    int64_t i;
    double f;
    const char *s;
    size_t n;
} kl_pq_value;

static inline kl_pq_value kl_pq_int(kl_col_type t, int64_t v) { kl_pq_value x = {t, 0, v, 0, 0, 0}; return x; }
static inline kl_pq_value kl_pq_dbl(double v) { kl_pq_value x = {KL_COL_FLOAT64, 0, 0, v, 0, 0}; return x; }
static inline kl_pq_value kl_pq_str(const char *s, size_t n) { kl_pq_value x = {KL_COL_STRING, 0, 0, 0, s, n}; return x; }

typedef struct {
    int has_min_max;      /* min/max valid (not when all values are null / unknown) */
    int has_null_count;
    kl_pq_value min, max; /* strings point into the owner (file info or reader) */
    uint64_t null_count;
    uint64_t num_values;  /* rows including nulls */
} kl_pq_col_stats;

/* ==================================================================
 * Writer
 * ================================================================== */

typedef struct {
    kl_pq_codec codec;        /* default ZSTD */
    int zstd_level;           /* default 3 */
    uint64_t row_group_rows;  /* cut a row group at this many rows (default 131072; 0 = no limit) */
    uint64_t row_group_bytes; /* ... or at this many uncompressed bytes (default 128 MiB; 0 = no limit) */
    uint64_t page_bytes;      /* target uncompressed data-page size (default 1 MiB) */
    int dictionary;           /* 1 (default): RLE_DICTIONARY when it pays (strings, low cardinality); 0: PLAIN */
    int page_stats;           /* 1 (default): statistics in page headers and a column/offset index */
    int data_page_v2;         /* 0 (default): data page v1 */
} kl_pq_write_opts;
void kl_pq_write_opts_default(kl_pq_write_opts *o);

typedef struct {
    char *name;
    kl_col_type type;
    kl_pq_col_stats stats;    /* over the whole file */
} kl_pq_file_col;

typedef struct {
    uint64_t rows;
    uint64_t bytes;           /* file size */
    uint64_t row_groups;
    size_t ncols;
    kl_pq_file_col *cols;     /* owned; kl_pq_file_info_clear frees */
} kl_pq_file_info;
void kl_pq_file_info_clear(kl_pq_file_info *info);

typedef struct kl_pq_writer kl_pq_writer;
/* schema_cols gives names, types and nullability (their rows are ignored).
 * Writes to a temporary file next to path; nothing is visible at path until
 * kl_pq_writer_close succeeds. */
int kl_pq_writer_open(const char *path, kl_column *const *schema_cols, size_t ncols,
                      const kl_pq_write_opts *o, kl_pq_writer **out, kl_err *e);
/* Adds a key/value pair to the file metadata (before close). */
int kl_pq_writer_set_kv(kl_pq_writer *w, const char *key, const char *value, kl_err *e);
/* A batch: ncols columns in schema order, all of the same length, matching
 * types. The writer buffers and cuts row groups by rows/bytes. */
int kl_pq_writer_write(kl_pq_writer *w, kl_column *const *cols, size_t ncols, kl_err *e);
/* Flushes, writes the footer, fsyncs and renames into place. info may be
 * NULL. Frees w (also on failure, after removing the temp file). */
int kl_pq_writer_close(kl_pq_writer *w, kl_pq_file_info *info, kl_err *e);
/* Removes the temp file and frees w. NULL is a no-op. */
void kl_pq_writer_abort(kl_pq_writer *w);
/* One call: open, write, close. */
int kl_pq_write_file(const char *path, kl_column *const *cols, size_t ncols,
                     const kl_pq_write_opts *o, kl_pq_file_info *info, kl_err *e);

/* ==================================================================
 * Reader
 * ================================================================== */

typedef struct {
    const char *name;         /* top-level name (a dotted path for nested leaves) */
    kl_col_type type;         /* keel type it reads into */
    int nullable;
    int supported;            /* 0: unsupported; reading it fails with why */
    const char *why;          /* reason when !supported, else "" */
    const char *physical;     /* "INT32", "BYTE_ARRAY", ... ("group" for a nested column) */
    const char *logical;      /* "DATE", "DECIMAL(9,2)", "STRING", "UINT64", "UUID", "LIST", "MAP", "STRUCT", "" ... */
    int nested;               /* 1: a top-level LIST/MAP/STRUCT (or repeated) column, read as
                               * a STRING column of JSON text, one JSON value per row */
    int inner;                /* 1: a leaf inside a nested column (read through that column) */
    int is_unsigned;          /* 1: UINT64, read into INT64 as the bit pattern (print and
                               * compare as unsigned: kl_pq_format_value does) */
} kl_pq_column_info;

typedef struct kl_pq_reader kl_pq_reader;
/* Maps the file, reads and validates the footer and schema. */
int kl_pq_open(const char *path, kl_pq_reader **out, kl_err *e);
/* Same over a caller-owned buffer that must outlive the reader (fuzzing). */
int kl_pq_open_mem(const void *data, size_t len, const char *name, kl_pq_reader **out, kl_err *e);
void kl_pq_close(kl_pq_reader *r);        /* NULL is a no-op */

uint64_t kl_pq_num_rows(const kl_pq_reader *r);
size_t kl_pq_num_row_groups(const kl_pq_reader *r);
uint64_t kl_pq_row_group_rows(const kl_pq_reader *r, size_t rg);
size_t kl_pq_num_columns(const kl_pq_reader *r);  /* leaf columns */
const kl_pq_column_info *kl_pq_column(const kl_pq_reader *r, size_t i); /* i < kl_pq_num_all_columns */
/* Columns by index: 0 .. kl_pq_num_columns-1 are the leaf columns (nested
 * leaves included, marked inner), then the nested top-level columns. */
size_t kl_pq_num_all_columns(const kl_pq_reader *r);
/* Top-level columns in schema order (flat leaves and nested columns): what
 * a default selection reads and what `keel data show` lists. Returns the
 * column index (for kl_pq_column) of the i-th, or (size_t)-1. */
size_t kl_pq_num_top(const kl_pq_reader *r);
size_t kl_pq_top(const kl_pq_reader *r, size_t i);
int kl_pq_find_column(const kl_pq_reader *r, const char *name); /* index (leaf or nested column) or -1 */
const char *kl_pq_created_by(const kl_pq_reader *r);           /* "" when absent */
/* Value of a key in the file's key/value metadata, or NULL. */
const char *kl_pq_kv(const kl_pq_reader *r, const char *key);
/* Statistics of column col in row group rg (rg = (size_t)-1: whole file,
 * combined). KL_ENOTFOUND when the file has none. */
int kl_pq_stats(const kl_pq_reader *r, size_t rg, size_t col, kl_pq_col_stats *out, kl_err *e);

/* Projection: read only these columns, in this order (NULL/0 = every
 * supported top-level column, nested ones included). An unsupported or
 * unknown name → clear error. Resets the read position. */
int kl_pq_select(kl_pq_reader *r, const char *const *names, size_t n, kl_err *e);
size_t kl_pq_num_selected(const kl_pq_reader *r);
const kl_pq_column_info *kl_pq_selected(const kl_pq_reader *r, size_t i);

/* Predicates (ANDed). Row groups and pages whose statistics exclude the
 * predicate are skipped; the remaining rows are filtered exactly, so a read
 * returns exactly the matching rows. Nulls never match. The predicate column
 * need not be selected. vals: 1 value (EQ/LT/LE/GT/GE), 2 (BETWEEN,
 * inclusive), n (IN). Values are compared in the column's type (ints and
 * floats convert). Resets the read position. */
typedef enum { KL_PQ_EQ, KL_PQ_LT, KL_PQ_LE, KL_PQ_GT, KL_PQ_GE, KL_PQ_BETWEEN, KL_PQ_IN } kl_pq_op;
int kl_pq_filter(kl_pq_reader *r, const char *column, kl_pq_op op,
                 const kl_pq_value *vals, size_t nvals, kl_err *e);
void kl_pq_filter_clear(kl_pq_reader *r);

/* Skipping counters of the reads so far (for tests and `keel data`). */
typedef struct {
    uint64_t row_groups_read, row_groups_skipped;
    uint64_t pages_read, pages_skipped;
    uint64_t rows_scanned, rows_returned;
} kl_pq_scan_stats;
void kl_pq_scan_stats_get(const kl_pq_reader *r, kl_pq_scan_stats *out);

/* Batched read of the selected columns: up to max_rows rows into cols[0..
 * kl_pq_num_selected-1]. A NULL cols[i] is created by the reader (caller frees
 * with kl_column_free); an existing one is cleared and refilled (it must be
 * the one the reader created or of the same type). *nrows = 0 at the end. */
int kl_pq_read_batch(kl_pq_reader *r, size_t max_rows, kl_column **cols, size_t *nrows, kl_err *e);
/* Exactly row group rg of the selected columns into cols (as
 * kl_pq_read_batch fills them; *nrows = its rows): random access for a
 * reader that needs some row groups only (training data sharded by row
 * group). Resets the read position; predicates are refused. */
int kl_pq_read_row_group(kl_pq_reader *r, size_t rg, kl_column **cols, size_t *nrows, kl_err *e);
/* Back to the first row (also ends a vector scan). */
void kl_pq_rewind(kl_pq_reader *r);

/* Vector scan, the fast path for aggregations: the selected columns one
 * row group at a time, decoded in parallel (column chunks of several row
 * groups claimed by the pool's workers; results identical at any thread
 * count) into buffers the reader reuses, with no copy into kl_column.
 * String columns whose pages are all dictionary-encoded come as codes into
 * the chunk's dictionary, so group-bys count codes and touch each distinct
 * string once per row group. A reader does either vector scans or
 * batch/row reads until kl_pq_rewind. Predicates (kl_pq_filter) apply: the
 * vectors then hold the matching rows. */
typedef struct {
    kl_col_type type;
    size_t rows;
    const uint8_t *valid;     /* NULL: no nulls; else one byte per row, 1 = present */
    const void *values;       /* fixed-width types: rows values laid out as in
                               * kl_column (0 where null); NULL for strings */
    const int64_t *offsets;   /* STRING/BINARY without codes: rows+1 offsets into data */
    const char *data;
    const uint32_t *codes;    /* STRING/BINARY, dictionary-coded: one code per row
                               * (0 where null), each < dict->len; else NULL */
    const kl_column *dict;    /* with codes: the dictionary values (no nulls) */
} kl_pq_vector;
/* *vecs: kl_pq_num_selected vectors of *nrows rows each, valid until the
 * next call, kl_pq_rewind, kl_pq_select/filter or kl_pq_close. *nrows = 0
 * (and *vecs NULL) at the end. */
int kl_pq_next_vectors(kl_pq_reader *r, const kl_pq_vector **vecs, size_t *nrows, kl_err *e);

/* Grouped aggregation over the selected rows (predicates apply):
 *   SELECT key, count(*), count(value), sum(value), min(value), max(value)
 *   GROUP BY key
 * key: a STRING/BINARY/BOOL/INT32/INT64/DATE/TIMESTAMP column, or NULL for
 * one group of all rows; value: a numeric column, or NULL (counts only).
 * Groups come in order of first appearance; nulls form their own group
 * (key.is_null). NaN values are skipped by sum/min/max but counted. The sums
 * are the same at any thread count. Changes the reader's selection.
 * out: zeroed ({0}) for a new aggregation, or the result of an earlier call
 * with the same key and value (another file of a dataset): the rows are
 * added to it. On failure out is cleared. kl_pq_groups_clear frees. */
typedef struct {
    kl_pq_value key;          /* strings owned by the kl_pq_groups */
    uint64_t rows;            /* count(*) */
    uint64_t count;           /* non-null values */
    double sum, min, max;     /* over non-null, non-NaN values (min/max NaN when none) */
} kl_pq_group;
typedef struct {
    size_t n;
    kl_pq_group *g;
    uint64_t rows;            /* rows aggregated */
    void *priv;               /* owned state (hash table, key bytes) */
} kl_pq_groups;
int kl_pq_group_by(kl_pq_reader *r, const char *key, const char *value, kl_pq_groups *out, kl_err *e);
void kl_pq_groups_clear(kl_pq_groups *g);

/* Row at a time: fills row[0..nselected-1] (strings point into the reader,
 * valid until the next call). Returns 1 for a row, 0 at the end, <0 error. */
int kl_pq_next_row(kl_pq_reader *r, kl_pq_value *row, kl_err *e);

/* Appends row i of c (a column read from a column described by ci; ci may
 * be NULL) to b: json = 1 as a JSON value (strings quoted, dates and
 * timestamps as quoted ISO-8601, binary as quoted base64, UUID canonical
 * 8-4-4-4-12, UINT64 unsigned, nested columns as their JSON, a
 * KL_COL_LIST row as a JSON array of its elements and a KL_COL_STRUCT row
 * as a JSON object of its fields (in both modes), NaN and
 * infinities quoted, NULL as null); json = 0 as text (the same without
 * quotes, a NUL byte in a string as \0, NULL as NULL). */
void kl_pq_format_value(kl_buf *b, const kl_column *c, size_t i, const kl_pq_column_info *ci, int json);

/* Reads every selected row of a file into new columns (*cols: malloc'ed array
 * of *ncols columns; free each with kl_column_free and the array with free).
 * names NULL = all supported columns. */
int kl_pq_read_file(const char *path, const char *const *names, size_t nnames,
                    kl_column ***cols, size_t *ncols, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
