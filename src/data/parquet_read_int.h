/* Private to the Parquet reader (parquet_meta.c, parquet_read.c). */
#ifndef KEEL_PARQUET_READ_INT_H
#define KEEL_PARQUET_READ_INT_H

#include "data/parquet_int.h"

/* How a leaf's physical values become kl_column values. */
enum { K_BOOL = 1, K_I32, K_U32, K_I64, K_F32, K_F64, K_TS_MS, K_TS_NS, K_TIME32MS,
       K_INT96, K_DEC32, K_DEC64, K_DECBIN, K_F16, K_BYTES, K_INTERVAL };

typedef struct {
    const uint8_t *name; uint32_t name_len;
    int ptype, type_length, rep, num_children, has_children, conv, scale, precision;
    int logical, unit, utc, bit_width, is_signed;
    int group_kind;      /* LIST or MAP annotation of a group (G_LIST, G_MAP), else 0 */
} pq_schema_el;

/* Nested columns: a top-level group (or repeated field) is one column whose
 * rows are JSON text assembled from its leaves' repetition and definition
 * levels (parquet_nested.c). */
enum { G_LIST = 1, G_MAP = 2 };
#define PQ_MAX_REP 16                    /* levels of repetition a nested column may have */
#define PQ_MAX_NESTED_VALUES (1u << 27)  /* level entries per column chunk of a nested column */
typedef struct {
    int def, rep;        /* definition / repetition level at this element (inclusive) */
    int leaf;            /* leaf index for a primitive, else -1 */
    int first_leaf, nleaves; /* leaves of the subtree (contiguous) */
    uint32_t end;        /* index after the subtree in the schema array */
} pq_node;

typedef struct {
    char *name;
    kl_pq_column_info info;
    char logicalbuf[48], whybuf[200];
    uint32_t el;         /* schema element of the top-level node */
    size_t leaf0, nleaf; /* its leaves */
} pq_field;

typedef struct {
    char *name;
    kl_pq_column_info info;
    char logicalbuf[48], whybuf[200];
    kl_col_type type;
    int ptype, type_length, max_def, max_rep, kind, scale, unsigned_order;
    int field;           /* nested field it belongs to, or -1 */
} pq_leaf;

typedef struct {
    int has_minmax, legacy, has_null_count;
    const uint8_t *min, *max; uint32_t nmin, nmax;
    int64_t null_count;
} pq_stats;

typedef struct {
    int has_meta, external, encrypted;
    int ptype, codec;
    int64_t num_values, total_uncompressed, total_compressed, data_page_offset, dict_page_offset;
    pq_stats stats;
    int64_t ci_off, ci_len, oi_off, oi_len;
} pq_chunk;

typedef struct { int64_t num_rows; pq_chunk *cols; } pq_rowgroup;

typedef struct {
    size_t col;          /* leaf index */
    kl_pq_op op;
    kl_pq_value *vals;   /* owned copies (strings too) */
    size_t n;
} pq_pred;

typedef struct pq_scan pq_scan;

typedef struct {
    const uint8_t *data; size_t len;
    void *map;
    char *name;
    size_t footer_start;
    pq_schema_el *schema; uint32_t nschema;
    pq_node *nodes;                      /* one per schema element */
    pq_leaf *leaves; size_t nleaves, capleaves;
    /* columns: leaves are 0..nleaves-1, nested fields nleaves..nleaves+nfields-1 */
    pq_field *fields; size_t nfields;
    size_t *top; size_t ntop;            /* top-level columns in schema order */
    pq_rowgroup *rgs; size_t nrg;
    int64_t num_rows;
    char **kv; size_t nkv;
    char *created_by;
    /* selection, predicates, scan state */
    size_t *sel; size_t nsel;
    pq_pred *preds; size_t npreds;
    pq_scan *scan;
    kl_pq_scan_stats ss;
} pq_reader_t;

/* Column index (leaf or nested field) → its description. */
const kl_pq_column_info *kl__pq_colinfo(const pq_reader_t *R, size_t col);
/* Levels and values of one leaf chunk of a nested field. */
typedef struct {
    kl_column *vals;     /* one entry per level entry, present where def == max_def */
    uint8_t *def, *rep;  /* core allocator */
    size_t n, cap;
} pq_levels;
void kl__pq_levels_free(pq_levels *l);
/* Assembles rows records of field f from its leaves' levels (lv[k]: leaf
 * leaf0 + k) into out (a STRING column of JSON text). */
int kl__pq_assemble(const pq_reader_t *R, size_t f, pq_levels *lv, size_t rows, kl_column *out, kl_err *e);
/* One leaf value as JSON (json = 1) or text (kl_pq_format_value). */
int kl__pq_stat_value(const pq_leaf *L, const uint8_t *b, uint32_t n, kl_pq_value *v);
int kl__pq_stats_usable(const pq_reader_t *R, const pq_leaf *L, const pq_stats *s);
int kl__pq_value_cmp(kl_col_type t, const kl_pq_value *a, const kl_pq_value *b);
void kl__pq_read_free(pq_reader_t *R); /* scan, predicates, selection */

#endif
