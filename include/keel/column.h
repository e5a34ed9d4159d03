/* keel columns: one typed, growable column of rows with an optional validity
 * mask. The in-memory unit exchanged by ingestion, the Parquet writer and
 * reader, features and training. Transparent: readers use the fields. */
#ifndef KEEL_COLUMN_H
#define KEEL_COLUMN_H

#include <stddef.h>
#include <stdint.h>

#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KL_COL_BOOL,      /* values: uint8 0/1 */
    KL_COL_INT32,     /* values: int32 */
    KL_COL_INT64,     /* values: int64 */
    KL_COL_FLOAT32,   /* values: float */
    KL_COL_FLOAT64,   /* values: double */
    KL_COL_STRING,    /* offsets/data, UTF-8 */
    KL_COL_DATE,      /* values: int32 days since 1970-01-01 */
    KL_COL_TIMESTAMP, /* values: int64 µs since epoch, UTC */
    /* Extension (reader): raw bytes (Parquet BYTE_ARRAY without a string
     * annotation, FIXED_LEN_BYTE_ARRAY, UUID); same layout as STRING. */
    KL_COL_BINARY,
    /* A list per row (written to Parquet as a 3-level LIST): offsets[len+1]
     * index the rows of child, the elements (a column of a scalar type with
     * its own validity: null elements); a null row has no elements. With
     * list_size > 0 (FixedSizeList) every non-null row has list_size
     * elements. Built with kl_column_new_list; not a schema type name. */
    KL_COL_LIST,
    /* A struct per row (written to Parquet as a group): fields[nfields],
     * columns of scalar types with len rows each, always nullable (written
     * OPTIONAL); a null row is null in every field. Built with
     * kl_column_new_struct; not a schema type name. */
    KL_COL_STRUCT,
    KL_COL_TYPE_COUNT
} kl_col_type;
/* Further reader mappings (no extra types): DECIMAL → FLOAT64 (value /
 * 10^scale, documented in docs/parquet.md); INT96 and TIMESTAMP(MILLIS|NANOS)
 * → TIMESTAMP µs (nanoseconds truncated toward −∞); INT8/INT16/UINT8/UINT16 →
 * INT32; UINT32 → INT64; UINT64 → INT64 (bit pattern); TIME → INT64 µs. */

typedef struct kl_column {
    char *name; kl_col_type type; int nullable;
    size_t len, cap;          /* rows */
    void *values;             /* len elements (BOOL: uint8 0/1); unused for STRING */
    uint8_t *valid;           /* NULL = no nulls; else one byte per row, 1 = present */
    int64_t *offsets;         /* STRING/BINARY: len+1 offsets into data; LIST: into child */
    char *data; size_t data_len, data_cap;
    struct kl_column *child;   /* LIST: the elements (owned) */
    int32_t list_size;         /* LIST: > 0 for a FixedSizeList of that many elements */
    struct kl_column **fields; /* STRUCT: the fields (owned) */
    size_t nfields;
} kl_column;

/* A new empty column; cap_rows is the initial capacity (0 is fine). Memory
 * through the core allocator (tag dataset). */
int kl_column_new(const char *name, kl_col_type t, int nullable, size_t cap_rows, kl_column **out, kl_err *e);
/* A new empty LIST column of elem (a scalar type) elements; elem_nullable:
 * elements may be null; list_size > 0: a FixedSizeList. Rows are built by
 * pushing a row's elements into c->child, then kl_column_list_end (or
 * kl_column_push_null for a null row). */
int kl_column_new_list(const char *name, kl_col_type elem, int nullable, int elem_nullable, int32_t list_size,
                       kl_column **out, kl_err *e);
/* Closes row c->len of a LIST column: its elements are those pushed into
 * c->child since the previous row. KL_ESHAPE when a FixedSizeList row has
 * another number of elements (they are dropped again); KL_ENOMEM. */
int kl_column_list_end(kl_column *c);
/* Packs n >= 1 numeric columns (BOOL, INT32, INT64, FLOAT32, FLOAT64) of
 * one length into a new FixedSizeList column of n elem (FLOAT32 or
 * FLOAT64) elements per row: row i holds the n values of row i, a null value
 * a null element. Floats round to elem; an integer that elem cannot hold
 * exactly is refused (KL_ERANGE naming column and row). KL_ETYPE naming a
 * column of another type, KL_ESHAPE for another length, KL_ENOMEM. */
int kl_column_pack_list(const char *name, kl_column *const *cols, size_t n, kl_col_type elem, kl_column **out,
                        kl_err *e);
/* A new empty STRUCT column of n >= 1 fields (names distinct, scalar
 * types). A row is built by pushing one value (or null) into each field,
 * then kl_column_struct_end; kl_column_push_null(c) pushes a null row. */
int kl_column_new_struct(const char *name, int nullable, const char *const *names, const kl_col_type *types, size_t n,
                         kl_column **out, kl_err *e);
/* Closes row c->len of a STRUCT column. KL_ESHAPE when a field has not
 * exactly one more row (the row is not added); KL_ENOMEM. */
int kl_column_struct_end(kl_column *c);
void kl_column_free(kl_column *c);        /* NULL is a no-op */
void kl_column_clear(kl_column *c);       /* len 0, keeps capacity; valid reset to NULL */
/* Grows capacity to at least rows (and data bytes for STRING/BINARY). */
int kl_column_reserve(kl_column *c, size_t rows, size_t data_bytes);

/* Appends. KL_EINVAL for a null into a non-nullable column; KL_ENOMEM. */
int kl_column_push_null(kl_column *c);
int kl_column_push_i64(kl_column *c, int64_t v);  /* INT32/INT64/DATE/TIMESTAMP/BOOL */
int kl_column_push_f64(kl_column *c, double v);   /* FLOAT32/FLOAT64 */
int kl_column_push_str(kl_column *c, const char *s, size_t n); /* STRING/BINARY */

/* Appends rows [from, to) of src (same type; LIST: same element type and
 * list_size) to dst. KL_ETYPE, KL_EINVAL (nulls
 * into a non-nullable column), KL_ENOMEM. */
int kl_column_append(kl_column *dst, const kl_column *src, size_t from, size_t to);

/* Readers of one row. is_null: 1 when row i is null. */
static inline int kl_column_is_null(const kl_column *c, size_t i) {
    return c->valid != NULL && c->valid[i] == 0;
}
int64_t kl_column_get_i64(const kl_column *c, size_t i);  /* integer-like types (and BOOL) */
double kl_column_get_f64(const kl_column *c, size_t i);   /* any numeric type */
const char *kl_column_get_str(const kl_column *c, size_t i, size_t *n); /* STRING/BINARY */
/* Number of null rows. */
size_t kl_column_null_count(const kl_column *c);
/* Bytes per value (0 for STRING/BINARY). */
size_t kl_col_type_size(kl_col_type t);

const char *kl_col_type_name(kl_col_type t);               /* "bool","int32",...,"timestamp","binary","list" */
int kl_col_type_parse(const char *name, kl_col_type *out); /* the scalar names above (not "list") */

#ifdef __cplusplus
}
#endif
#endif
