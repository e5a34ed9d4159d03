/* keel data: validated ingestion. CSV/TSV/JSONL dialects and the record
 * parser, the schema (types, constraints, null rules) loaded from YAML,
 * value parsing against a column type, dialect/type sniffing, resumable
 * downloads, and `kl_ingest`: sources -> validated columns -> partitioned
 * Parquet + manifest.json, published atomically as a content-addressed
 * dataset version. Parquet itself and kl_column live in parquet.h/column.h. */
#ifndef KEEL_DATA_H
#define KEEL_DATA_H

#include <keel/column.h>
#include <keel/core.h>
#include <stdint.h>

struct cJSON;

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Dialect and the CSV record parser
 * ================================================================== */

typedef enum { KL_FMT_CSV, KL_FMT_JSONL } kl_src_format;

#define KL_MAX_NULL_TOKENS 8
/* Text encodings a source may be read from (transcoded to UTF-8 on read). */
typedef enum { KL_ENC_UTF8, KL_ENC_UTF16LE, KL_ENC_UTF16BE, KL_ENC_LATIN1, KL_ENC_CP1252, KL_ENC_COUNT } kl_encoding;
/* Line terminators: auto (LF, CRLF or CR-only, decided per source from its
 * first bytes), LF and CRLF (records end at LF; a CR before it is dropped),
 * CR (records end at a CR). */
typedef enum { KL_LT_AUTO, KL_LT_LF, KL_LT_CRLF, KL_LT_CR } kl_line_term;
typedef struct kl_dialect {
    kl_src_format format;
    char delim;            /* first byte of the delimiter: ',' '\t' ';' '|' */
    char delim_s[8];       /* the whole delimiter when it is longer than one byte (", " "||") */
    int delim_n;           /* its length: 0 or 1 = the single byte delim */
    char quote;            /* '"' (any byte), or 0 for none */
    char escape;           /* inside quotes, escape + c is c ('\\'); 0 = a quote is escaped by doubling (RFC 4180) */
    int header;            /* the first header_rows records (after skip_rows) hold the column names */
    int header_rows;       /* header records (default 1); names of several are joined with "_" */
    int skip_rows;         /* physical lines before the header / first record skipped (a preamble) */
    char comment[8];       /* lines starting with this are skipped ("" none) */
    kl_line_term line_term;
    char eol;              /* the record terminator byte ('\n', or '\r' for CR); resolved per source */
    kl_encoding encoding;  /* of the source; transcoded to UTF-8 before parsing */
    char decimal;          /* decimal separator of numbers ('.' or ',') */
    char thousands;        /* digit group separator of numbers (0 none, ',' '.' ' ' '\'') */
    int trim;              /* spaces and tabs around fields are dropped (not inside quotes) */
    int lenient;           /* (ingest --on-error recover, not in the schema) a stray quote is taken literally */
    int bom;               /* (sniffed) the file starts with a UTF-8 BOM; always skipped */
    int crlf;              /* (sniffed) lines end in CRLF; CR before LF is always accepted */
    int n_null;            /* unquoted fields equal to one of these are null */
    char null_tokens[KL_MAX_NULL_TOKENS][16];
    size_t max_record;     /* bytes per record; default 10 MiB */
} kl_dialect;

/* Defaults: CSV, ',', '"', doubled-quote escapes, one header row, auto line
 * terminator, UTF-8, '.' decimals, null token "", 10 MiB records. */
void kl_dialect_default(kl_dialect *d);
/* Names of encodings and line terminators, as the schema spells them. */
const char *kl_encoding_name(kl_encoding enc);
int kl_encoding_parse(const char *name, kl_encoding *out);
const char *kl_line_term_name(kl_line_term t);
/* The delimiter's bytes and length. */
static inline const char *kl_dialect_delim(const kl_dialect *d, size_t *n) {
    if (d->delim_n > 1) { *n = (size_t)d->delim_n; return d->delim_s; }
    *n = 1;
    return &d->delim;
}
/* Resolves line_term auto from the first bytes of a source into d->eol
 * (CR when the sample has CRs and no LF). */
void kl_dialect_resolve_eol(kl_dialect *d, const char *buf, size_t len);
/* Transcodes buf (in encoding enc; a UTF-16 BOM is dropped, a missing one
 * means the byte order given) to UTF-8 in memory from the core allocator
 * (tag dataset; free with kl_mem_free). KL_EPARSE for a cut UTF-16 unit or
 * an unpaired surrogate, with the byte offset in e. */
int kl_transcode_utf8(kl_encoding enc, const char *buf, size_t len, char **out, size_t *outn, kl_err *e);
/* The encoding a buffer's bytes say: a UTF-16 BOM, else UTF-8 when the
 * bytes are valid UTF-8, else windows-1252 (latin-1 when no byte is in
 * 0x80..0x9f). */
kl_encoding kl_encoding_sniff(const char *buf, size_t len);

/* One parsed record. Field i is f[i] (not NUL-terminated) of len[i] bytes;
 * quoted[i] says it was quoted. Pointers refer to the input buffer or to the
 * record's scratch (unescaped quoted fields) and are valid until the next
 * kl_csv_next on this record. */
typedef struct kl_csv_rec {
    size_t n, cap;
    const char **f;
    uint32_t *len;
    uint8_t *quoted;
    size_t *off;           /* internal: scratch offsets (SIZE_MAX = in buffer) */
    char *scratch;
    size_t slen, scap;
    int64_t lines;         /* physical lines this record spans */
    int repairs;           /* KL_CSV_REPAIR_* a lenient dialect made to read this record */
} kl_csv_rec;

/* Repairs of a lenient dialect (kl_csv_rec.repairs). */
enum { KL_CSV_REPAIR_QUOTE = 1 };

void kl_csv_rec_init(kl_csv_rec *r);
void kl_csv_rec_free(kl_csv_rec *r);

/* Outcome of kl_csv_next besides KL_OK. */
enum { KL_CSV_END = 1 };

/* Parses the record starting at buf[*pos]; on KL_OK advances *pos past its
 * line ending. Returns KL_CSV_END at the end of the buffer, KL_EPARSE for an
 * unterminated quote or a quote inside an unquoted field (with a message),
 * KL_ERANGE when the record exceeds max_record bytes; on errors *pos is set to
 * the start of the next line so parsing can go on. */
int kl_csv_next(const kl_dialect *d, const char *buf, size_t len, size_t *pos, kl_csv_rec *r, kl_err *e);

/* Header names: kl_csv_header_add appends a header record to the names
 * being built (cols[0..*nc), grown as needed; a column's parts joined with
 * "_", empty parts left out); kl_csv_header_names makes the schema's names
 * of them: an empty name is column_N (N its position from 1), a repeated one
 * gets the first free suffix _2, _3 ...; orig[i] is the header's own text.
 * Both arrays (n + 1 entries, malloc'ed strings) are freed by the caller. */
int kl_csv_header_add(kl_buf **cols, size_t *nc, const kl_csv_rec *r);
int kl_csv_header_names(const kl_buf *cols, size_t nc, char ***names, char ***orig);

/* Sniffs the dialect from the first bytes of a file: encoding (BOM, UTF-8
 * validity), line terminator (by count), then delimiter x quote x escape by
 * consistency scoring (CleverCSV's pattern score: how regular the field
 * counts are, times the share of cells of a recognisable type), a preamble
 * (lines before the first run of consistent records: skip_rows) and the
 * header (presence and rows). ev (may be NULL) gets the evidence: scores,
 * the runner-up, counts, as text lines for a schema comment. */
int kl_dialect_sniff(const char *buf, size_t len, kl_dialect *d, kl_err *e);
int kl_dialect_sniff_ex(const char *buf, size_t len, kl_dialect *d, kl_buf *ev, kl_err *e);

/* ==================================================================
 * Schema
 * ================================================================== */

typedef enum {
    KL_T_INT32, KL_T_INT64, KL_T_FLOAT32, KL_T_FLOAT64, KL_T_BOOL, KL_T_STRING,
    KL_T_CATEGORY, KL_T_DATE, KL_T_TIMESTAMP, KL_T_COUNT
} kl_type;

const char *kl_type_name(kl_type t);
int kl_type_parse(const char *name, kl_type *out);
/* The Parquet/column type that stores a schema type (category: string), and
 * the schema type a column type reads as (string for string and binary). */
kl_col_type kl_type_column(kl_type t);
kl_type kl_type_of_column(kl_col_type c);

typedef struct kl_field {
    char *name;
    kl_type type;
    int nullable;              /* default 1 */
    int has_min, has_max;
    double min, max;           /* numeric; for date/timestamp in days / µs */
    int64_t imin, imax;        /* integer/date/timestamp bounds (exact) */
    int64_t max_length;        /* strings: characters (UTF-8 code points); 0 = none */
    char **allowed;            /* allowed values (string) / fixed vocabulary (category) */
    size_t n_allowed;
    int unique;
    double max_null_ratio;     /* 1.0 = no limit */
    struct kl_tz *tz;          /* timestamp: zone of naive values (owned; NULL = UTC) */
    char *timezone;            /* as written ("UTC", "+02:00", "Europe/Berlin") */
    int tz_ambiguous;          /* KL_TZ_REJECT / EARLIEST / LATEST: naive times that occur twice */
    int line, col;             /* position in the schema file */
    char *note;                /* schema infer: what the sample showed (YAML comment lines; not loaded) */
} kl_field;

typedef struct kl_schema {
    char *name;                /* dataset name (optional) */
    kl_dialect dialect;
    int dialect_given;         /* the schema had a dialect section */
    char *sha256;              /* expected source sha256 (optional) */
    kl_field *fields;
    size_t n_fields;
    char *text;                /* canonical JSON of the schema (for the manifest and hashing) */
    char *note;                /* schema infer: how much was read (a YAML comment; not loaded) */
    char *dialect_note;        /* schema infer: the sniffer's evidence (a YAML comment; not loaded) */
} kl_schema;

int kl_schema_load_file(const char *path, kl_schema **out, kl_err *e);
int kl_schema_load_str(const char *text, size_t len, const char *name, kl_schema **out, kl_err *e);
void kl_schema_free(kl_schema *s);
/* A schema from a document node: the YAML form, or the canonical JSON that
 * manifests and features.json hold (kl_schema_json). */
int kl_schema_from_node(const kl_node *root, kl_schema **out, kl_err *e);
/* Canonical JSON of the schema (the dialect and the columns named in
 * cols[0..ncols), or every column when cols is NULL); it loads again with
 * kl_schema_load_str / kl_schema_from_node. */
int kl_schema_json(const kl_schema *s, const char *const *cols, size_t ncols, kl_buf *out);
/* Index of a field by name, -1 when absent. */
int kl_schema_find(const kl_schema *s, const char *name);
/* Sniffs dialect and column types from the first max_rows records of
 * buf (0 = 20000; SIZE_MAX = all); name labels errors and names the schema.
 * Types are chosen by majority: a column is typed when all but a small error
 * budget of its values parse (the others are listed, with their lines, in
 * the field's note: they will be rejects); the usual null tokens (NA, N/A,
 * null, NULL, -, empty) of typed columns become the dialect's null tokens;
 * timestamp offsets seen are noted. more: buf holds only part of the data
 * (the note says the ranges come from a sample). */
int kl_schema_infer(const char *buf, size_t len, const char *name, size_t max_rows, int more, kl_schema **out, kl_err *e);
/* Writes the schema as YAML (for `keel schema infer`). */
int kl_schema_to_yaml(const kl_schema *s, kl_buf *out);

/* ==================================================================
 * Value parsing (strict; used by the ingest and by tests)
 * ================================================================== */

/* Error kinds of rejected values / rows. */
typedef enum {
    KL_REJ_TYPE, KL_REJ_NULL, KL_REJ_RANGE, KL_REJ_ALLOWED, KL_REJ_LENGTH, KL_REJ_UNIQUE,
    KL_REJ_UTF8, KL_REJ_RAGGED, KL_REJ_QUOTE, KL_REJ_RECORD_SIZE, KL_REJ_JSON, KL_REJ_COUNT
} kl_reject_kind;
const char *kl_reject_kind_name(kl_reject_kind k);

/* A parsed cell: i (int types, bool, date, timestamp), d (floats), or s/n
 * (string, category). (kl_value is the graph's value, include/keel/graph.h.) */
typedef struct { int64_t i; double d; const char *s; size_t n; } kl_cell;

/* Parses text s[0..n) as field f's type and checks its constraints (not
 * uniqueness, not nullness). Returns KL_OK or the kind of failure + 1 as a
 * positive number (kind = rc - 1), with a message in msg (may be NULL). */
int kl_value_parse(const kl_field *f, const char *s, size_t n, kl_cell *v, char *msg, size_t msgn);

/* The one grammar of a raw value, shared by CSV and JSONL ingest and by the
 * online record path (`:predict`, `keel features transform`), so that a value
 * means the same thing offline and online.
 *
 * kl_cell_parse: text s[0..n) of field f (s NULL = missing); an unquoted
 * text equal to one of d's null tokens (d may be NULL: none) is null. Sets
 * *isnull; a null in a non-nullable field is a KL_REJ_NULL reject. Returns
 * KL_OK or reject kind + 1 with the reason in msg (no column prefix). */
int kl_null_token(const kl_dialect *d, const char *s, size_t n);
int kl_cell_parse(const kl_field *f, const kl_dialect *d, const char *s, size_t n, int quoted, kl_cell *v,
                  int *isnull, char *msg, size_t msgn);
/* The same for a JSON value (a cJSON node; NULL or JSON null = missing):
 * strings as their whole text (\u0000 included), quoted for string and
 * category fields (there a null token is a value; for other types a string
 * equal to a null token is null); booleans as true/false; numbers read
 * exactly as the field's type (an integer field refuses a fraction or a
 * magnitude beyond 2^53; a date or timestamp field reads a whole number as
 * days / µs since 1970-01-01 UTC; a text field takes the number's exact
 * text, written into buf: v->s may point there). */
#define KL_CELL_NUMBUF 40
int kl_json_cell_parse(const kl_field *f, const kl_dialect *d, const struct cJSON *it, char buf[KL_CELL_NUMBUF],
                       kl_cell *v, int *isnull, char *msg, size_t msgn);

/* A number written with d's separators (decimal ',', thousands '.' ...) in
 * the form the number parsers read (group separators between digits of the
 * integer part dropped, the decimal separator made '.') into nb[0..*out);
 * 0 when it needs no change or does not fit nb (then it is read as it is).
 * Used by kl_cell_parse for numeric fields and by schema infer. */
int kl_num_normalize(const kl_dialect *d, const char *s, size_t n, char *nb, size_t nbn, size_t *out);

/* Individual parsers: KL_OK, KL_EINVAL (malformed) or KL_ERANGE (overflow). */
int kl_parse_i64n(const char *s, size_t n, int64_t *out);
int kl_parse_f64n(const char *s, size_t n, double *out);
int kl_parse_booln(const char *s, size_t n, int *out);
int kl_parse_date(const char *s, size_t n, int32_t *days);
/* ISO 8601 "YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]][Z|±HH[:MM]]"; naive times are
 * in zone tz (NULL = UTC). Result in µs since the epoch, UTC. KL_EINVAL
 * (malformed), KL_ERANGE (a field out of range), KL_ENOTFOUND (a naive time
 * that does not exist in tz: skipped by a DST change) or KL_EEXIST (a naive
 * time that occurs twice in tz and tz's ambiguity policy is KL_TZ_REJECT). */
int kl_parse_timestamp(const char *s, size_t n, const struct kl_tz *tz, int64_t *us);
/* Parses "UTC", "Z", "+02:00", "-0530", "UTC+1" into minutes east of UTC. */
int kl_parse_tz(const char *s, int *minutes);

/* ---- time zones (src/data/tz.c) ----
 * UTC, fixed offsets (as kl_parse_tz) and IANA zone names read from the
 * compiled tzdata under $TZDIR or /usr/share/zoneinfo (TZif v1-v4 with the
 * POSIX TZ footer for times after the last transition). */
typedef struct kl_tz kl_tz;
enum { KL_TZ_REJECT, KL_TZ_EARLIEST, KL_TZ_LATEST };   /* naive times that occur twice */
enum { KL_TZ_OK, KL_TZ_GAP, KL_TZ_AMBIGUOUS };         /* kl_tz_to_utc results */
/* Errors: KL_EINVAL (not a zone name), KL_ENOTFOUND (no such zone), KL_EPARSE
 * (a malformed TZif file, named). The ambiguity policy starts as KL_TZ_REJECT. */
int kl_tz_load(const char *name, kl_tz **out, kl_err *e);
void kl_tz_free(kl_tz *z);
const char *kl_tz_name(const kl_tz *z);
int kl_tz_is_fixed(const kl_tz *z);    /* UTC or a fixed offset */
void kl_tz_set_ambiguous(kl_tz *z, int policy);
/* Seconds east of UTC in effect at UTC second t. */
int32_t kl_tz_offset(const kl_tz *z, int64_t t);
/* Local (naive) second -> UTC second: KL_TZ_OK, KL_TZ_GAP (no such local
 * time) or KL_TZ_AMBIGUOUS (it occurs twice; policy KL_TZ_REJECT). */
int kl_tz_to_utc(const kl_tz *z, int64_t local, int64_t *utc);
int64_t kl_days_from_civil(int64_t y, unsigned m, unsigned d);
void kl_civil_from_days(int64_t z, int *y, int *m, int *d);
/* 1 when s[0..n) is valid UTF-8; *chars gets the code point count (may be NULL). */
int kl_utf8_valid(const char *s, size_t n, size_t *chars);

/* ==================================================================
 * HyperLogLog (approximate distinct counts in the manifest)
 * ================================================================== */

#define KL_HLL_P 12
typedef struct { uint8_t reg[1 << KL_HLL_P]; } kl_hll;
void kl_hll_add_hash(kl_hll *h, uint64_t hash);
void kl_hll_merge(kl_hll *dst, const kl_hll *src);
double kl_hll_estimate(const kl_hll *h);
uint64_t kl_hash64(const void *data, size_t n);

/* ==================================================================
 * Downloads: libcurl with HTTP Range resume
 * ================================================================== */

typedef struct {
    const char *expected_sha256; /* hex or NULL */
    int retries;                 /* attempts after a dropped transfer (0: default 5; <0: none) */
    long connect_timeout_s;      /* default 30 */
    long low_speed_time_s;       /* abort when < 1 B/s for this long (default 60) */
} kl_fetch_opts;

/* Downloads url into dest: the transfer goes to dest.part (resumed with Range
 * when it exists; If-Range with the ETag remembered in dest.part.etag), then is
 * checked (Content-MD5 when the server sent one, expected sha256) and renamed
 * into place. sha256_hex (65 bytes, may be NULL) gets the file's digest. */
int kl_fetch_url(const char *url, const char *dest, const kl_fetch_opts *o, char *sha256_hex, kl_err *e);

/* ==================================================================
 * Ingest
 * ================================================================== */

typedef struct kl_ingest_opts {
    const char *const *sources; /* files, folders, globs, URLs */
    size_t n_sources;
    const char *schema_path;
    const char *out_dir;        /* dataset folder */
    double max_reject_ratio;    /* default 0 */
    const char *sha256;         /* expected sha256 of the (single) source, or NULL */
    const char *partition_by;   /* column name or NULL */
    const char *codec;          /* zstd (default), snappy, gzip, none */
    int zstd_level;             /* 0 = default */
    size_t chunk_bytes;         /* parse chunk size (default 4 MiB); fixed => deterministic */
    size_t row_group_rows;      /* default 131072 */
    const char *rejects_path;   /* where to write rejects of a failed ingest (optional) */
    int progress;               /* show progress */
    const char *keel_version;   /* recorded in the manifest (not part of the version id) */
    /* .gz/.zst sources: refuse one that decompresses to more than this many
     * bytes, or to more than max_expansion times its size on disk (default
     * KL_INGEST_MAX_DECOMPRESSED, KL_INGEST_MAX_EXPANSION; not part of the version id) */
    uint64_t max_decompressed_bytes;
    double max_expansion;
    /* What a malformed CSV row does (KL_ON_ERROR_*): reject (default: the row
     * goes to the rejects), recover (a short row is padded with nulls, a long
     * row's extra fields go to an `_extra` string column, a stray quote is
     * read literally; each repair is a warning row in the rejects file; the
     * repaired row is still validated) or fail (the first rejected row fails
     * the ingest, whatever --max-reject-ratio says). Part of the ingest key. */
    int on_error;
} kl_ingest_opts;

enum { KL_ON_ERROR_REJECT = 0, KL_ON_ERROR_RECOVER, KL_ON_ERROR_FAIL };
/* "reject" | "recover" | "fail"; KL_EINVAL otherwise. */
int kl_on_error_parse(const char *s, int *out);

#define KL_INGEST_MAX_DECOMPRESSED ((uint64_t)32 << 30) /* 32 GiB */
#define KL_INGEST_MAX_EXPANSION 1000.0

typedef struct kl_ingest_result {
    char version_id[65];
    int reused;                 /* 1: the same ingest was already published (no-op) */
    int published;              /* 1: a version is current after this call */
    int64_t rows_read, rows_accepted, rows_rejected;
    int64_t rows_repaired;      /* --on-error recover: repairs made (warning rows of the rejects file) */
    int64_t files_written, bytes_written;
    int64_t partitions_reused;
    double seconds;
    char version_dir[1024];
    /* the first errors, grouped by kind: "kind: count" lines and examples */
    char summary[4096];
} kl_ingest_result;

void kl_ingest_opts_default(kl_ingest_opts *o);
/* Returns KL_OK when a version was published (or already existed);
 * KL_EPARSE/KL_EINVAL... when the data failed validation (summary filled). */
int kl_ingest(const kl_ingest_opts *o, kl_ingest_result *res, kl_err *e);

/* kl_verify_mode (how files are checked against a manifest) is in keel/core.h. */

/* Resolves PATH (a dataset folder, a version folder or a .parquet file) to
 * the list of Parquet files (sorted) and the manifest path (or NULL). The
 * caller frees each string and the arrays with free().
 * With a manifest, every Parquet file found must be listed there and every
 * listed file must exist with its recorded size and (KL_VERIFY_SHA256) its
 * sha256: a mismatch is KL_ECHECKSUM naming the file, the expected and the
 * actual value (KL_ENOTFOUND for a listed file that is missing). */
int kl_dataset_resolve_verify(const char *path, kl_verify_mode verify, char ***files, size_t *n_files, char **manifest,
                              kl_err *e);
/* The same with the default check, KL_VERIFY_SHA256. */
int kl_dataset_resolve(const char *path, char ***files, size_t *n_files, char **manifest, kl_err *e);
/* The ingest schema a dataset was validated with (from its manifest); *out
 * is NULL (and KL_OK) for a dataset without one (a lone .parquet file, a
 * features dataset). */
int kl_dataset_schema(const char *path, kl_schema **out, kl_err *e);
/* Audits a dataset as found (`keel data validate`, the pipeline's validate
 * stage): each file its manifest lists exists with the recorded sha256, size
 * and Parquet row count, no unlisted Parquet file is present, and the files
 * hold the rows the manifest accepted. Each problem is one line ("name:
 * what") appended to problems and counted in *nproblems; *rows (may be
 * NULL) gets the rows the listed files hold. A dataset without a manifest
 * (a lone .parquet file) has none. KL_OK unless the dataset or its manifest
 * cannot be read at all. */
int kl_dataset_audit(const char *path, kl_buf *problems, int *nproblems, uint64_t *rows, kl_err *e);

/* A flat dataset folder's manifest.json (a features dataset, a prediction
 * log): the one writer of it, so that every such folder reads and validates
 * alike. A file is listed by its path relative to the folder, sha256, rows
 * and bytes (kl_dataset_file_stat measures one). kl_dataset_manifest_write
 * writes DIR/manifest.json atomically as {"format": format, <head>, "rows":
 * {"read", "accepted", "rejected": 0}, "files": [...]} where head (may be
 * NULL) is already formatted JSON members ("\"k\": v, ...", no braces);
 * rows are the sum of the files'. kl_dataset_manifest_files reads the files
 * list back (the caller frees it with kl_dataset_files_free); a folder
 * without manifest.json gives none (KL_OK). */
typedef struct {
    char *path;      /* relative to the folder; owned */
    char sha256[65];
    uint64_t rows, bytes;
} kl_dataset_file;
int kl_dataset_file_stat(const char *dir, const char *rel, uint64_t rows, kl_dataset_file *out, kl_err *e);
int kl_dataset_manifest_write(const char *dir, const char *format, const char *head, const kl_dataset_file *files,
                              size_t n, kl_err *e);
int kl_dataset_manifest_files(const char *dir, kl_dataset_file **files, size_t *n, kl_err *e);
void kl_dataset_files_free(kl_dataset_file *files, size_t n);

/* ==================================================================
 * Joining a prediction log with its labels (src/data/joinlog.c)
 * ================================================================== */

/* `keel data join-log DIR --model M --out DS`: the prediction rows of
 * DIR/M/predictions (`keel serve --log-predictions DIR`) joined by request
 * id with the labels of DIR/M/labels into one dataset folder (DS/part-00000.parquet
 * + manifest.json "keel-joined-log-1"), read by `keel features apply` and
 * `keel train` like any dataset. A label joins record 0 of the request of
 * its id (as the server's live quality does); a later label of an id
 * replaces an earlier one. Every prediction column is kept (parts of
 * several versions: the union of their columns, nulls where a part has
 * none; one name with two types is an error naming both files), plus the
 * label as column `label` of type label_type, and `labelled_at`. Both
 * datasets are checked against their manifests first (full sha256). */
typedef struct {
    const char *log_dir, *model, *out;
    const char *label;      /* the label column's name (NULL: "label") */
    kl_col_type label_type; /* int32, int64, float32, float64, bool or string */
    int64_t since_us;       /* predictions served at or after this (0: all) */
    int keep_unlabelled;    /* also the predictions without a label (label null) */
} kl_join_log_opts;
typedef struct {
    uint64_t predictions, labels, joined, unlabelled, unmatched_labels, replaced_labels;
} kl_join_log_result;
int kl_join_log(const kl_join_log_opts *o, kl_join_log_result *res, kl_err *e);
/* The joined rows in memory instead (o->out unused): *cols[*ncols], each
 * freed with kl_column_free, the array with free(). A model without a
 * labels dataset yet has no labels (not an error here). */
int kl_join_log_read(const kl_join_log_opts *o, kl_column ***cols, size_t *ncols, kl_join_log_result *res, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
