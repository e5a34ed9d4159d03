/* keel core: errors, logging, the tagged caching allocator, SHA-256, the
 * thread pool, progress display, YAML/JSON spec documents, configuration
 * precedence and atomic file writes. Everything else in keel builds on this. */
#ifndef KEEL_CORE_H
#define KEEL_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Errors
 * Functions return KL_OK (0) or a negative code: a KL_E* below, or -errno
 * for system failures. The detail goes into a kl_err the caller passes
 * (may be NULL). No global error state.
 * ================================================================== */

#define KL_OK 0
enum {
    KL_EINVAL = -1001,       /* invalid argument or value */
    KL_EPARSE = -1002,       /* malformed input (CSV, Parquet, ONNX, JSON, YAML, HTTP) */
    KL_ENOMEM = -1003,       /* out of memory or over a memory budget */
    KL_ENOTFOUND = -1004,    /* file, key, model, run ... not found */
    KL_EUNSUPPORTED = -1005, /* valid but not supported (op, codec, feature) */
    KL_ESHAPE = -1006,       /* shape mismatch */
    KL_ETYPE = -1007,        /* dtype / type mismatch */
    KL_ECHECKSUM = -1008,    /* checksum / sha256 mismatch */
    KL_EEXIST = -1009,       /* already exists */
    KL_ETIMEOUT = -1010,     /* timed out */
    KL_EBUSY = -1011,        /* busy / locked / queue full */
    KL_ECANCELED = -1012,    /* cancelled / shutting down */
    KL_EUSAGE = -1013,       /* command-line usage error */
    KL_ERANGE = -1014,       /* value out of range / overflow */
    KL_ESTATE = -1015,       /* operation not valid in the current state */
    KL_EINTERNAL = -1016,    /* bug: an invariant did not hold */
};

/* Human-readable name of a code (KL_E* or -errno). Never NULL. */
const char *kl_strerror(int code);

/* Error detail. Zero-initialise ("kl_err e = {0};") or kl_err_clear(). */
typedef struct kl_err {
    int code;           /* KL_OK when no error was recorded */
    char msg[768];      /* the message proper */
    char file[256];     /* optional location: file ("" when none) */
    int line, col;      /* 1-based; 0 when unknown */
    char field[192];    /* optional field path: "train.epochs", "column item_price", "node 17 (Conv)" */
    char text[1280];    /* scratch for kl_err_what() */
} kl_err;

void kl_err_clear(kl_err *e);
/* Records code and message; returns code so callers can `return kl_err_set(...)`.
 * e may be NULL (then only the code is returned). Overwrites an earlier error. */
int kl_err_set(kl_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int kl_err_vset(kl_err *e, int code, const char *fmt, va_list ap);
/* Same with a location; file may be NULL, line/col 0 when unknown. */
int kl_err_setloc(kl_err *e, int code, const char *file, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Sets the field path of the recorded error (keeps code and message). */
void kl_err_field(kl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context to the message: "loading model.onnx: <old message>". */
void kl_err_prefix(kl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "file:line:col: field: message" (parts omitted when unknown). Valid until e changes. */
const char *kl_err_what(kl_err *e);

/* Abort only for bugs: invariants, never for bad input. */
#define KL_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) kl__assert_fail(#cond, __FILE__, __LINE__, __func__);     \
    } while (0)
void kl__assert_fail(const char *expr, const char *file, int line, const char *func)
    __attribute__((noreturn));

#define KL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ==================================================================
 * Logging
 * Text on a terminal, JSON lines otherwise (or when asked). One writer
 * lock; RFC 3339 UTC timestamps with microseconds. Writes to stderr.
 * ================================================================== */

typedef enum {
    KL_LOG_TRACE, KL_LOG_DEBUG, KL_LOG_INFO, KL_LOG_WARN, KL_LOG_ERROR, KL_LOG_OFF
} kl_log_level;

typedef enum { KL_LOG_AUTO, KL_LOG_TEXT, KL_LOG_JSON } kl_log_format;

/* Parses "trace|debug|info|warn|error|off"; KL_EINVAL otherwise. */
int kl_log_level_parse(const char *s, kl_log_level *out);
/* Parses "auto|text|json". */
int kl_log_format_parse(const char *s, kl_log_format *out);
void kl_log_set_level(kl_log_level lvl);
kl_log_level kl_log_get_level(void);
void kl_log_set_format(kl_log_format fmt);
/* Effective format (AUTO resolved against the output being a terminal). */
kl_log_format kl_log_get_format(void);
/* Output stream (default stderr). The stream is not closed by keel. */
void kl_log_set_output(FILE *f);
int kl_log_enabled(kl_log_level lvl);

void kl_log(kl_log_level lvl, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kl_vlog(kl_log_level lvl, const char *module, const char *fmt, va_list ap);

/* Structured fields: in JSON they become members, in text "key=value". */
typedef struct {
    const char *key;
    const char *str; /* string value, or NULL to use num */
    double num;
    int is_int;      /* print num as an integer */
} kl_log_field;
#define KL_LF_STR(k, v) ((kl_log_field){(k), (v) ? (v) : "", 0, 0})
#define KL_LF_NUM(k, v) ((kl_log_field){(k), NULL, (double)(v), 0})
#define KL_LF_INT(k, v) ((kl_log_field){(k), NULL, (double)(v), 1})
void kl_log_fields(kl_log_level lvl, const char *module, const char *msg,
                   const kl_log_field *fields, size_t n);
/* The line kl_log_fields writes (timestamp now, newline included), appended
 * to b instead of written: for writers that buffer lines and write them in
 * one go with kl_log_write_lines. fmt KL_LOG_AUTO: kl_log_get_format(). */
struct kl_buf;
void kl_log_format_line(struct kl_buf *b, kl_log_format fmt, kl_log_level lvl, const char *module, const char *msg,
                        const kl_log_field *fields, size_t n);
/* Writes whole formatted lines to the log output under the log lock (one
 * write, flushed; other threads' lines never interleave with them). */
void kl_log_write_lines(const char *text, size_t len);

#define KL_LOG_DEBUG_(mod, ...) kl_log(KL_LOG_DEBUG, mod, __VA_ARGS__)
#define KL_LOG_INFO_(mod, ...) kl_log(KL_LOG_INFO, mod, __VA_ARGS__)
#define KL_LOG_WARN_(mod, ...) kl_log(KL_LOG_WARN, mod, __VA_ARGS__)
#define KL_LOG_ERROR_(mod, ...) kl_log(KL_LOG_ERROR, mod, __VA_ARGS__)

/* RFC 3339 UTC with microseconds, e.g. "2026-11-29T20:51:22.123456Z". buf >= 32. */
void kl_time_rfc3339(int64_t unix_us, char *buf, size_t n);
int64_t kl_time_now_us(void);   /* wall clock, µs since epoch */
int64_t kl_time_mono_ns(void);  /* monotonic clock, ns */

/* ==================================================================
 * Memory: a tagged caching allocator with statistics and budgets
 * All large memory in keel goes through here. Blocks are 64-byte aligned.
 * Freed blocks are kept in size-class caches for reuse until kl_mem_trim().
 * ================================================================== */

typedef enum {
    KL_TAG_PARAMS, KL_TAG_GRADS, KL_TAG_OPTIMIZER, KL_TAG_ACTIVATIONS,
    KL_TAG_WORKSPACE, KL_TAG_REQUEST, KL_TAG_DATASET, KL_TAG_OTHER,
    KL_TAG_COUNT
} kl_mem_tag;

#define KL_MEM_ALIGN 64

/* KL_ASAN is 1 in an AddressSanitizer build (gcc -fsanitize=address defines
 * __SANITIZE_ADDRESS__, clang has __has_feature(address_sanitizer)). There the
 * allocator serves every block with its own malloc, so that ASan sees
 * overflows and use-after-free (see kl_mem_direct). */
#if defined(__SANITIZE_ADDRESS__)
#define KL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KL_ASAN 1
#endif
#endif
#ifndef KL_ASAN
#define KL_ASAN 0
#endif

const char *kl_mem_tag_name(kl_mem_tag tag);
int kl_mem_tag_parse(const char *name, kl_mem_tag *out);

/* NULL on failure (out of memory or over a budget; a snapshot is written when
 * a snapshot path is configured). size 0 returns a valid unique block. */
void *kl_mem_alloc(size_t size, kl_mem_tag tag);
/* As kl_mem_alloc, with the reason in e ("budget: activations would reach ..."). */
void *kl_mem_alloc_e(size_t size, kl_mem_tag tag, kl_err *e);
void *kl_mem_calloc(size_t n, size_t size, kl_mem_tag tag);
/* Keeps the tag of p (or uses tag when p is NULL). NULL on failure, p untouched. */
void *kl_mem_realloc(void *p, size_t size, kl_mem_tag tag);
void kl_mem_free(void *p);                 /* NULL is a no-op */
size_t kl_mem_size(const void *p);         /* requested size of a live block */
char *kl_mem_strdup(const char *s, kl_mem_tag tag);

typedef struct {
    uint64_t allocated;       /* bytes requested by live blocks */
    uint64_t peak_allocated;
    uint64_t reserved;        /* bytes held from the OS (live + cached + slack) */
    uint64_t peak_reserved;
    uint64_t n_allocs, n_frees;
    uint64_t cache_hits;      /* allocations served from the cache */
    uint64_t n_failed;        /* allocations refused (budget or OS) */
} kl_mem_stats;

/* tag = KL_TAG_COUNT gives the totals. Per-tag reserved counts the blocks
 * in use by that tag (cached blocks belong to no tag). */
void kl_mem_stats_get(kl_mem_tag tag, kl_mem_stats *out);
/* (reserved - allocated) / reserved over all memory; 0 when nothing reserved. */
double kl_mem_fragmentation(void);
/* Sets peaks to current values. */
void kl_mem_reset_peaks(void);

/* Total cap on reserved bytes (0 = none). */
void kl_mem_set_budget(uint64_t bytes);
/* Total cap as a fraction of physical memory (0 < frac <= 1). */
int kl_mem_set_budget_fraction(double frac, kl_err *e);
uint64_t kl_mem_get_budget(void);
/* Per-tag cap on allocated bytes (0 = none). */
void kl_mem_set_tag_budget(kl_mem_tag tag, uint64_t bytes);
uint64_t kl_mem_get_tag_budget(kl_mem_tag tag);
/* Parses "512M", "2G", "1.5GiB", "70%" (of physical memory), "0" (none). */
int kl_mem_parse_size(const char *s, uint64_t *out, kl_err *e);

/* Where a snapshot is written when an allocation is refused (NULL = none). */
void kl_mem_set_snapshot_path(const char *path);
/* Writes a JSON snapshot: totals, per tag, every segment and block with tag,
 * size and state (allocated/cached). Atomic write. */
int kl_mem_snapshot(const char *path, kl_err *e);
/* Returns cached blocks to the OS; returns the bytes released. */
uint64_t kl_mem_trim(void);
/* 1 when every block is its own malloc (the AddressSanitizer build): no size
 * classes, no slabs, no caching (cache_hits stays 0, kl_mem_trim releases
 * nothing), reserved = requested bytes + the 64-byte header of each live
 * block. Tagging, statistics, budgets and snapshots work the same. */
int kl_mem_direct(void);
uint64_t kl_mem_physical_bytes(void);

/* Arena: bump allocation out of allocator blocks, freed with one call.
 * For per-request and per-graph memory. Not thread-safe. */
typedef struct kl_arena kl_arena;
kl_arena *kl_arena_new(size_t chunk_size, kl_mem_tag tag);
void *kl_arena_alloc(kl_arena *a, size_t size);  /* 64-byte aligned; NULL on failure */
char *kl_arena_strdup(kl_arena *a, const char *s);
void kl_arena_reset(kl_arena *a);                /* keeps the first chunk */
size_t kl_arena_used(const kl_arena *a);
void kl_arena_free(kl_arena *a);

/* ==================================================================
 * SHA-256 (OpenSSL libcrypto)
 * ================================================================== */

typedef struct kl_sha256 kl_sha256;
kl_sha256 *kl_sha256_new(void);
void kl_sha256_update(kl_sha256 *h, const void *data, size_t len);
void kl_sha256_final(kl_sha256 *h, uint8_t out[32]);  /* then h may be reused */
void kl_sha256_free(kl_sha256 *h);
void kl_sha256_buf(const void *data, size_t len, uint8_t out[32]);
int kl_sha256_file(const char *path, uint8_t out[32], kl_err *e);
int kl_sha256_stream(FILE *f, uint8_t out[32], kl_err *e);
void kl_sha256_hex(const uint8_t digest[32], char hex[65]);
/* Hex digest of a buffer / file into hex[65]. */
void kl_sha256_buf_hex(const void *data, size_t len, char hex[65]);
int kl_sha256_file_hex(const char *path, char hex[65], kl_err *e);

/* ==================================================================
 * Seeded random numbers (rng.c), one implementation for the whole
 * project: kl_rng is xoshiro256** seeded through splitmix64 (training
 * init/shuffles, the image loader, the click generator); kl_splitmix64 is
 * the one-word stream (state += golden gamma) for places that give every
 * item its own cheap stream (defect images, tuning trials). Sequences are
 * part of keel's determinism contract: never change them.
 * ================================================================== */

typedef struct { uint64_t s[4]; } kl_rng;
void kl_rng_seed(kl_rng *r, uint64_t seed);
uint64_t kl_rng_next(kl_rng *r);
/* [0, 1) with 53 random bits. */
double kl_rng_uniform(kl_rng *r);
/* Standard normal by Box-Muller (one value per two uniforms; u1 clamped to 1e-300). */
double kl_rng_normal(kl_rng *r);
/* Unbiased in [0, n) by rejection; n <= 1 gives 0 without drawing. */
uint64_t kl_rng_below(kl_rng *r, uint64_t n);
/* Shuffles v[0..n) in place (Fisher–Yates from the back, one kl_rng_below per
 * position): the one permutation of every seeded shuffle in keel. */
void kl_rng_shuffle_i64(kl_rng *r, int64_t *v, int64_t n);
/* Next value of the splitmix64 stream *state (advances it). */
uint64_t kl_splitmix64(uint64_t *state);
/* [0, 1) with 53 bits from the splitmix64 stream. */
double kl_splitmix_uniform(uint64_t *state);

/* ==================================================================
 * Thread pool: fixed workers; parallel_for with static chunking so that
 * which thread computes which range never depends on scheduling.
 * ================================================================== */

typedef struct kl_pool kl_pool;
/* fn computes items [begin, end); chunk is the chunk index (0..nchunks-1). */
typedef void (*kl_range_fn)(void *ctx, size_t begin, size_t end, int chunk);

/* nthreads <= 0 means kl_threads_default(). The caller's thread is worker 0. */
int kl_pool_new(int nthreads, kl_pool **out, kl_err *e);
void kl_pool_free(kl_pool *p);
int kl_pool_threads(const kl_pool *p);
/* Splits [0, n) into min(threads, ceil(n/grain)) contiguous chunks of equal
 * size and runs them. Returns when all are done. grain 0 means 1. Safe to call
 * from several threads (a busy pool runs the caller's chunks inline, same
 * chunking) and from inside a task (runs inline). p NULL = default pool. */
void kl_pool_parallel_for(kl_pool *p, size_t n, size_t grain, kl_range_fn fn, void *ctx);
/* Number of chunks parallel_for would use for n items (for per-chunk scratch). */
int kl_pool_chunks(const kl_pool *p, size_t n, size_t grain);

/* KEEL_THREADS or the number of online cores. */
int kl_threads_default(void);
/* The process's settings from its environment, read once (on first use) by
 * core/config.c, the owner of every KEEL_* variable: modules take these
 * values and never call getenv for one. (The command line's own settings —
 * threads, log, tracking, memory — are kl_config keys, whose environment
 * layer is the same variables.) */
typedef struct {
    int threads;                /* KEEL_THREADS when 1..1024, else 0 (the online cores) */
    int avx512_allowed;         /* 0 when KEEL_NO_AVX512 is set and not "0" */
    int nchwc;                  /* 0 when KEEL_NO_NCHWC is set and not "0": no blocked-layout graph path */
    int nchwc_pool_fuse;        /* 0 when KEEL_NCHWC_POOL_FUSE=0: max pools after convs stay separate */
    int wino_pack;              /* 0 when KEEL_WINO=0: no Winograd weight form is packed */
    int wino_use;               /* KEEL_WINO: -1 automatic (unset), 0 never, 1 whenever packed */
    int plan_split;             /* KEEL_SPLIT: the planner's split mode (0 off; default 1) */
    int profile;                /* KEEL_PROFILE set and not "0": the per-op profile is printed at exit */
    int fetch_retries;          /* KEEL_FETCH_RETRIES: 0 the fetcher's default, -1 none (0 or less), else N */
    double progress_interval_s; /* KEEL_PROGRESS_INTERVAL: seconds between progress log lines (default 10) */
    const char *doctor_root;    /* KEEL_DOCTOR_ROOT: folder /proc, /sys and /dev/shm are read under; NULL */
    const char *feature_store;  /* KEEL_FEATURE_STORE: keel serve's --feature-store URL (a secret's home); NULL */
    const char *tmpdir;         /* TMPDIR when set and not empty, else "/tmp": where temporary folders go */
    /* The MPI launcher's contract (not keel settings, read here with them): */
    int mpi_launched;    /* OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or SLURM_STEP_NUM_TASKS is set */
    int mpi_local_ranks; /* OMPI_COMM_WORLD_LOCAL_SIZE, else SLURM_STEP_TASKS_PER_NODE; 0 = none */
} kl_settings;
const kl_settings *kl_settings_get(void);
/* The settings an environment (NAME=VALUE strings, NULL-terminated) gives;
 * kl_settings_get is this over the process's environment, once. */
void kl_settings_parse(kl_settings *out, char *const *envp);
/* The same settings, writable: for tests and benchmarks that compare
 * algorithms inside one process (set before the work they affect). */
kl_settings *kl_settings_mut(void);
/* A test hook's value: the integer in environment variable `name` (>= 0) in
 * the test build's binary only (build/keel-hooks, core/hooks.c), else -1 —
 * the library and the release keel never read it. */
int64_t kl__test_hook(const char *name);
/* Whether AVX-512 code paths may run: kl_settings_get()->avx512_allowed
 * (KEEL_NO_AVX512); the CPU's own support is each kernel's check. */
int kl_simd_avx512_allowed(void);
/* The environment the experiment store is found from, read by core/config.c
 * (the owner of KEEL_* and the other variables) and handed to the store
 * resolver (src/track/where.c) as values: KEEL_TRACKING,
 * KEEL_TRACKING_CEILING, XDG_DATA_HOME, and HOME (else the account's home
 * directory). Each may be NULL; the strings live as long as the environment. */
typedef struct {
    const char *tracking, *ceiling, *xdg_data_home, *home, *artifacts;
} kl_store_env;
void kl_config_store_env(kl_store_env *out);
/* Sets the thread count of the default pool (before its first use, or it is recreated). */
void kl_threads_set(int n);
/* The process-wide default pool (created on first use). */
kl_pool *kl_pool_default(void);
int kl_cpu_count(void);

/* ==================================================================
 * Progress: rate, ETA and extra fields for long work. Redraws in place on
 * a terminal (stderr), plain periodic log lines otherwise; never writes to
 * stdout.
 * ================================================================== */

typedef struct kl_progress kl_progress;
/* unit: "B" (printed as KiB/MiB...), "rows", "steps", ... total 0 = unknown. */
kl_progress *kl_progress_new(const char *label, uint64_t total, const char *unit);
void kl_progress_set_total(kl_progress *p, uint64_t total);
/* Sets absolute progress; redraws at most every 100 ms (terminal) or logs
 * every KEEL_PROGRESS_INTERVAL seconds (default 10) otherwise. Thread-safe. */
void kl_progress_update(kl_progress *p, uint64_t done);
void kl_progress_add(kl_progress *p, uint64_t delta);
/* Extra field shown after the rate, e.g. ("loss", "%.4f", loss). */
void kl_progress_field(kl_progress *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Final line (always printed), then frees. NULL is a no-op. */
void kl_progress_finish(kl_progress *p);
/* Formats a rendered line into buf (for tests and logs). */
void kl_progress_render(kl_progress *p, char *buf, size_t n);
/* Forces the mode: 1 terminal, 0 plain, -1 auto (default). */
void kl_progress_set_mode(int tty);

/* ==================================================================
 * Spec documents: YAML (libyaml) or JSON loaded into a small tree with
 * positions, and typed getters whose errors say
 *   file:line:col: train.epochs: expected an integer, got "ten"
 * ================================================================== */

typedef struct kl_doc kl_doc;
typedef struct kl_node kl_node;
typedef enum { KL_NODE_NULL, KL_NODE_SCALAR, KL_NODE_SEQ, KL_NODE_MAP } kl_node_kind;

/* Both refuse (KL_ERANGE, naming the node) a document whose aliases expand
 * it beyond KL_DOC_MAX_NODES nodes ("billion laughs": every walk of the tree
 * visits an aliased node once per alias), and an alias inside its own anchor
 * (a cycle, KL_EPARSE). A file is read with kl_read_file (its 4 GiB cap). */
#define KL_DOC_MAX_NODES 1000000
int kl_doc_load_file(const char *path, kl_doc **out, kl_err *e);
/* name is used in error locations (e.g. the file name). */
int kl_doc_load_str(const char *text, size_t len, const char *name, kl_doc **out, kl_err *e);
void kl_doc_free(kl_doc *d);
const kl_node *kl_doc_root(const kl_doc *d);  /* valid until kl_doc_free */
const char *kl_doc_name(const kl_doc *d);

/* Sets the scalar at a dotted path ("optimizer.lr", "layers.0.out"),
 * replacing what is there or creating the missing mapping keys; numeric parts
 * index existing list items. For command-line overrides (--set KEY=VALUE):
 * the node's location reads `origin` (e.g. "--set"). KL_EINVAL when the path
 * runs through a scalar or past the end of a list. */
int kl_doc_set(kl_doc *d, const char *path, const char *value, const char *origin, kl_err *e);
/* Writes the document as JSON (which kl_doc_load reads back): scalars that
 * parse as numbers, booleans or null are written bare, others as strings. */
struct kl_buf;
int kl_doc_to_json(const kl_doc *d, struct kl_buf *out);

kl_node_kind kl_node_kind_of(const kl_node *n);
const char *kl_node_kind_name(kl_node_kind k);
size_t kl_node_len(const kl_node *n);                      /* items of a seq/map */
const kl_node *kl_node_at(const kl_node *n, size_t i);     /* i-th item / value */
const char *kl_node_key_at(const kl_node *map, size_t i);  /* i-th key of a map */
const kl_node *kl_node_get(const kl_node *map, const char *key); /* NULL if absent */
/* Dotted path "train.optimizer.lr"; numeric parts index sequences. */
const kl_node *kl_node_find(const kl_node *n, const char *path);
const char *kl_node_scalar(const kl_node *n);   /* NULL unless a scalar */
int kl_node_is_quoted(const kl_node *n);
int kl_node_line(const kl_node *n);
int kl_node_col(const kl_node *n);
const char *kl_node_path(const kl_node *n);     /* "train.epochs", "layers.2.units", "" for root */
const char *kl_node_file(const kl_node *n);

/* Typed reads; errors carry file:line:col and the node's path. */
int kl_node_int(const kl_node *n, int64_t *out, kl_err *e);
int kl_node_double(const kl_node *n, double *out, kl_err *e);
int kl_node_bool(const kl_node *n, int *out, kl_err *e);
int kl_node_str(const kl_node *n, const char **out, kl_err *e); /* any scalar */
/* Field getters on a map: missing → default (or KL_ENOTFOUND when required). */
int kl_spec_int(const kl_node *map, const char *key, int64_t def, int64_t *out, kl_err *e);
int kl_spec_double(const kl_node *map, const char *key, double def, double *out, kl_err *e);
int kl_spec_bool(const kl_node *map, const char *key, int def, int *out, kl_err *e);
int kl_spec_str(const kl_node *map, const char *key, const char *def, const char **out, kl_err *e);
int kl_spec_require(const kl_node *map, const char *key, const kl_node **out, kl_err *e);
/* Unknown keys → KL_EINVAL naming the key, its position and a suggestion. */
int kl_spec_check_keys(const kl_node *map, const char *const *allowed, size_t n, kl_err *e);
/* A key that no reader looked up (kl_node_get, kl_node_at, kl_node_find,
 * kl_spec_*) below root → KL_EINVAL naming it and its position: the loader of
 * a spec calls it once it has read everything, so that a key accepted by
 * kl_spec_check_keys but ignored in this configuration is an error too. */
int kl_node_check_used(const kl_node *root, kl_err *e);
/* Error at a node's position: "file:line:col: path: msg". Returns code. */
int kl_node_error(const kl_node *n, kl_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Scalar parsing shared by all readers (strict: whole string, no overflow). */
int kl_parse_int64(const char *s, int64_t *out);
int kl_parse_double(const char *s, double *out);  /* accepts nan, inf, -inf */
int kl_parse_bool(const char *s, int *out);       /* true/false/yes/no/on/off/1/0 */

/* ==================================================================
 * JSON helpers (cJSON). Opaque here as a void* to keep cJSON out of the API
 * of callers that do not use it; include <cjson/cJSON.h> to use them.
 * ================================================================== */

/* Parses a file; errors say "file:line:col: expected ..." */
int kl_json_load_file(const char *path, void **out_cjson, kl_err *e);
/* Refuses a string with \u0000 (cJSON's C strings would cut it short). */
int kl_json_parse(const char *text, size_t len, const char *name, void **out_cjson, kl_err *e);
/* flags KL_JSON_KEEP_NUL: a string value with \u0000 is kept whole (its
 * length by kl_json_string_len); a member name with one is refused. */
#define KL_JSON_KEEP_NUL 1
int kl_json_parse_opts(const char *text, size_t len, const char *name, int flags, void **out_cjson, kl_err *e);
int kl_json_load_file_opts(const char *path, int flags, void **out_cjson, kl_err *e);
/* Writes cJSON (pretty when pretty != 0) atomically. */
int kl_json_write_file(const char *path, const void *cjson, int pretty, kl_err *e);
/* The length in bytes of a cJSON string node's value. A JSON string may hold
 * \u0000, which ends the C string early; a reader that keeps the length (the
 * serving request reader) sets KL_JSON_STRLEN in the node's type and stores
 * the length in valuedouble, unused by cJSON for strings. Other nodes: strlen. */
#define KL_JSON_STRLEN (1 << 14)
size_t kl_json_string_len(const void *cjson_string);
/* A JSON array of 1..max strings as malloc'ed copies (*out, *n; free each
 * and the array). KL_EINVAL (nothing allocated) when it is not such an
 * array, KL_ENOMEM. */
int kl_json_string_list(const void *cjson_array, int max, char ***out, int *n);

/* The fast mode of the JSON reader (core/json_doc.c; the serving request
 * path): the same cJSON tree kl_json_parse builds, with the same rules —
 * a \u0000 in a string refused unless KL_JSON_KEEP_NUL (then kept whole,
 * kl_json_string_len), always refused in a member name; numbers exactly
 * strtod's value; errors "name:line:col: malformed JSON at byte N (path):
 * why" — but every node and string comes from one bump arena freed with one
 * call (read it with the cJSON accessors; never cJSON_Delete it), numbers
 * take an exact fast path, and with KL_JSON_PACK an array of more than
 * KL_JSON_PACK_MIN numbers is one packed node read by a SIMD reader. A
 * document takes at most KL_JSON_MEM_RATIO times its text plus
 * KL_JSON_MEM_BASE bytes from the allocator (tag request: a cJSON node is
 * 64 bytes, a value at least 2 bytes of text): over it KL_ERANGE; refused by
 * the allocator (a budget): KL_ENOMEM. */
typedef struct kl_json_doc kl_json_doc;
struct cJSON;
#define KL_JSON_PACK      2
#define KL_JSON_PACK_MIN  8
#define KL_JSON_MEM_RATIO 32
#define KL_JSON_MEM_BASE  (128u << 10)
int kl_json_doc_parse(const char *text, size_t len, const char *name, int flags, kl_json_doc **out, kl_err *e);
const struct cJSON *kl_json_doc_root(const kl_json_doc *d);
void kl_json_doc_free(kl_json_doc *d);
/* A packed array node: its numbers as doubles, each exactly strtod's value
 * (valid until kl_json_doc_free); 0 when a is not one. */
int kl_json_packed(const struct cJSON *a, const double **vals, size_t *n);
/* Elements of an array node, packed or not. */
int kl_json_array_size(const struct cJSON *a);
/* The number of values of a packed array node (0: not one). */
size_t kl_json_packed_count(const struct cJSON *a);
/* A packed array's values as FP32, each exactly strtof's value of its text
 * (dst holds kl_json_packed_count(a) floats); the parsed text must still be
 * alive (a rare number is read again from it). */
void kl_json_packed_f32(const struct cJSON *a, float *dst);
/* Where the text of a number begins (the parsed text must still be alive):
 * element i of a packed array node, or a number node of a document parsed
 * with KL_JSON_PACK (i unused); NULL otherwise (INT64/UINT64 values beyond
 * 2^53 are read from it). */
const char *kl_json_number_text(const struct cJSON *a, size_t i);
/* One JSON number (the whole of s[0..len)) as FP32, exactly strtof's value;
 * KL_EPARSE when s is not a JSON number. */
int kl_parse_f32(const char *s, size_t len, float *out);
/* Whether the fast reader uses its AVX-512 path (0/1: off/on where the CPU
 * has it, for tests; -1: only ask). */
int kl_json_avx512(int on);

/* ==================================================================
 * Growable string buffer (used for JSON, HTML, SVG, messages)
 * ================================================================== */

typedef struct kl_buf {
    char *data; /* always NUL-terminated when cap > 0 */
    size_t len, cap;
    int failed; /* an allocation failed; contents truncated */
} kl_buf;

void kl_buf_init(kl_buf *b);
void kl_buf_free(kl_buf *b);
void kl_buf_reset(kl_buf *b);
int kl_buf_append(kl_buf *b, const void *data, size_t len);
int kl_buf_puts(kl_buf *b, const char *s);
int kl_buf_printf(kl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kl_buf_vprintf(kl_buf *b, const char *fmt, va_list ap);
int kl_buf_json_str(kl_buf *b, const char *s);   /* "..." with JSON escapes */
int kl_buf_json_strn(kl_buf *b, const char *s, size_t n); /* n bytes, a NUL as \u0000 */
int kl_buf_html(kl_buf *b, const char *s);       /* HTML-escaped text */
/* Takes the data (caller frees with free()); leaves b empty. */
char *kl_buf_take(kl_buf *b);

/* ==================================================================
 * Configuration precedence: defaults < spec file < KEEL_* environment <
 * command-line flags. Every value remembers where it came from.
 * ================================================================== */

typedef struct kl_config kl_config;
typedef enum { KL_CFG_STR, KL_CFG_INT, KL_CFG_DOUBLE, KL_CFG_BOOL, KL_CFG_SIZE } kl_cfg_type;
typedef enum { KL_SRC_DEFAULT, KL_SRC_FILE, KL_SRC_ENV, KL_SRC_FLAG } kl_cfg_source;

kl_config *kl_config_new(void);
void kl_config_free(kl_config *c);
/* Declares a setting. env may be NULL (then KEEL_<KEY> with '.'→'_', upper
 * case); flag may be NULL (then "--set key=value" only). def may be NULL. */
int kl_config_define(kl_config *c, const char *key, kl_cfg_type type, const char *def,
                     const char *env, const char *flag, const char *help);
/* Declares the settings every command shares: threads, log.level,
 * log.format, tracking, memory.limit, memory.snapshot. */
int kl_config_define_common(kl_config *c);
/* Loads every scalar of a spec document (as dotted keys). Declared keys are
 * type-checked; undeclared ones are kept as strings. */
int kl_config_load_doc(kl_config *c, const kl_doc *d, kl_err *e);
/* Applies KEEL_* variables of declared keys and of loaded keys. */
int kl_config_load_env(kl_config *c, kl_err *e);
/* "key=value" from --set, or a declared flag's value. */
int kl_config_set(kl_config *c, const char *key, const char *value, kl_cfg_source src,
                  const char *origin, kl_err *e);
int kl_config_set_flag(kl_config *c, const char *flag, const char *value, kl_err *e);
const char *kl_config_get(const kl_config *c, const char *key); /* NULL if unset */
int kl_config_get_int(const kl_config *c, const char *key, int64_t *out, kl_err *e);
int kl_config_get_double(const kl_config *c, const char *key, double *out, kl_err *e);
int kl_config_get_bool(const kl_config *c, const char *key, int *out, kl_err *e);
int kl_config_get_size(const kl_config *c, const char *key, uint64_t *out, kl_err *e);
/* "default", "spec.yaml:3:10", "env KEEL_THREADS", "flag --threads" */
const char *kl_config_origin(const kl_config *c, const char *key);
kl_cfg_source kl_config_source(const kl_config *c, const char *key);
/* Table (text) or {"settings":[{"key","value","source","origin"}]} (json). */
void kl_config_print(const kl_config *c, FILE *out, int json);
/* Applies the common settings to the process (log level/format, threads,
 * memory budget and snapshot path). */
int kl_config_apply_common(const kl_config *c, kl_err *e);

/* ==================================================================
 * Files and strings
 * ================================================================== */

/* Atomic file write: temp file in the same folder, fsync, rename, fsync dir. */
typedef struct kl_afile kl_afile;
int kl_afile_open(const char *path, kl_afile **out, kl_err *e);
FILE *kl_afile_stream(kl_afile *f);
int kl_afile_write(kl_afile *f, const void *data, size_t len, kl_err *e);
/* Flush, fsync, rename into place, fsync the folder; frees f. */
int kl_afile_commit(kl_afile *f, kl_err *e);
/* Removes the temp file; frees f. NULL is a no-op. */
void kl_afile_abort(kl_afile *f);
int kl_write_file_atomic(const char *path, const void *data, size_t len, kl_err *e);
/* Reads a whole regular file into a block of the core allocator (tag other;
 * NUL-terminated; caller frees with kl_mem_free). Refuses what is not a
 * regular file (a folder, FIFO, device, socket: KL_EINVAL "not a regular
 * file"; a FIFO is not waited on) and a file larger than max bytes
 * (KL_ERANGE naming the limit); KL_ENOMEM with the reason over the memory
 * budget. The one reader of whole files in keel. */
int kl_read_file_max(const char *path, uint64_t max, char **out, size_t *len, kl_err *e);
/* kl_read_file_max with the default cap KL_READ_FILE_MAX (4 GiB). */
#define KL_READ_FILE_MAX (4ull << 30)
int kl_read_file(const char *path, char **out, size_t *len, kl_err *e);
/* Copies a file (read whole, written atomically to dst). */
int kl_copy_file(const char *src, const char *dst, kl_err *e);
int kl_mkdir_p(const char *path, kl_err *e);
int kl_fsync_dir(const char *dir, kl_err *e);
int kl_path_exists(const char *path);
/* Removes a file or a folder tree (like rm -rf). */
int kl_rm_rf(const char *path, kl_err *e);

/* Signals of long-running commands (keel serve, keel ui, the pipeline's serve
 * stage). kl_signal_catch installs handlers for SIGHUP, SIGINT and SIGTERM that
 * queue the signal on a self-pipe, so it does not matter which thread the
 * kernel delivers it to (threads started before main, such as OpenBLAS's, do
 * not inherit a blocked mask, and a process-directed signal delivered to one of
 * them would otherwise take its default action and kill the process).
 * kl_signal_wait blocks until one arrives and returns its number.
 * kl_signal_release restores the default dispositions. */
int kl_signal_catch(kl_err *e);
int kl_signal_wait(void);
void kl_signal_release(void);

/* Levenshtein distance; and the closest candidate within a small distance (or NULL). */
size_t kl_edit_distance(const char *a, const char *b);
const char *kl_suggest(const char *word, const char *const *candidates, size_t n);

/* Human-readable sizes and durations into buf: "1.5 GiB", "230 ms". */
const char *kl_fmt_bytes(uint64_t bytes, char *buf, size_t n);
const char *kl_fmt_duration(double seconds, char *buf, size_t n);

/* ==================================================================
 * Manifests (manifest.c): the files of a folder with their sha256 and
 * size, one on-disk shape for datasets, feature datasets, image shards,
 * model folders, serving versions and pipeline exports:
 *   "files": {"<name>": {"sha256": "<64 hex>", "bytes": N[, "rows": N, ...]}}
 * Older shapes are read by the one compatibility reader and written back
 * in this shape by kl_manifest_write / kl_manifest_json (docs/formats.md).
 * ================================================================== */

/* How files are checked against their manifest (`--verify MODE` of train,
 * features, pipeline): the full sha256 of every file (default), only the
 * sizes, or nothing. */
typedef enum { KL_VERIFY_SHA256 = 0, KL_VERIFY_SIZE, KL_VERIFY_NONE } kl_verify_mode;
/* "sha256" | "size" | "none"; KL_EINVAL otherwise. */
int kl_verify_mode_parse(const char *s, kl_verify_mode *m, kl_err *e);
const char *kl_verify_mode_name(kl_verify_mode m);

/* Limits on what a manifest from outside may hold. */
#define KL_MANIFEST_MAX_FILES (1u << 20)
#define KL_MANIFEST_NAME_MAX  1024

typedef struct {
    char *name;      /* relative path in the folder: no "..", not absolute */
    char sha256[65]; /* lower-case hex */
    int64_t bytes;   /* -1: an old manifest did not record it */
    int64_t rows;    /* -1: none (datasets and shards record it) */
    void *extra;     /* cJSON object of the entry's other members, or NULL */
} kl_manifest_file;

typedef struct {
    kl_manifest_file *v;
    size_t n, cap;
    uint32_t *slots; /* name hash index: entry + 1, 0 = empty (nslots a power of two) */
    size_t nslots;
} kl_manifest_files;

/* Frees every entry; m is empty (and reusable) after it. */
void kl_manifest_files_free(kl_manifest_files *m);
/* Appends an entry (copies of name and extra; rows -1 when unknown); a
 * name that is not a safe relative path, a sha256 that is not 64 hex
 * digits, a duplicate name or more than KL_MANIFEST_MAX_FILES entries
 * are KL_EINVAL naming the file. */
int kl_manifest_push(kl_manifest_files *m, const char *name, const char *sha256_hex, int64_t bytes, int64_t rows,
                     const void *extra_cjson, kl_err *e);
/* Hashes dir/name and appends it with its size (rows -1). */
int kl_manifest_add(kl_manifest_files *m, const char *dir, const char *name, kl_err *e);
/* The entry named name, or NULL (borrowed: valid until m changes). */
const kl_manifest_file *kl_manifest_find(const kl_manifest_files *m, const char *name);
/* The compatibility reader: the file list of a manifest document (a cJSON
 * object) in any shape keel has written: "files" as the map above or as a
 * map name -> hex; "files" as an array of {"path"|"name"|"file", "sha256",
 * "bytes"|"size", ...}; "sha256" as a map name -> hex; "shards" as an array
 * of {"file", "sha256", "bytes", "records"}. where names the manifest in
 * errors ("dir/meta.json: files[\"x\"]: ..."); KL_ENOTFOUND when the
 * document lists no files in any of these shapes. */
int kl_manifest_files_read(const void *cjson_doc, const char *where, kl_manifest_files *out, kl_err *e);
/* Loads a manifest file (JSON, at most 1 GiB, \u0000 kept in strings) and
 * reads its files; *doc (may be NULL) gets the document for its other
 * members (cJSON_Delete it). */
int kl_manifest_files_load(const char *path, kl_manifest_files *out, void **doc, kl_err *e);
/* Sets member "files" of a cJSON object to the map above (replacing an
 * older shape, and a "sha256" map, when there). */
int kl_manifest_write(const kl_manifest_files *m, void *cjson_obj, kl_err *e);
/* Appends the map above as JSON text (entries in order, one per line,
 * indented by indent): canonical, for manifests whose hash is an id. */
int kl_manifest_json(const kl_manifest_files *m, const char *indent, struct kl_buf *b);
/* Checks dir/f->name against f: its size (KL_VERIFY_SIZE, when recorded)
 * or its sha256 and size (KL_VERIFY_SHA256). A mismatch is KL_ECHECKSUM
 * "dir/name: sha256 mismatch: the file has sha256 X (N bytes), the
 * manifest WHERE says Y (M bytes)" followed by hint (may be NULL); a
 * missing file KL_ENOTFOUND naming it and the manifest. */
int kl_manifest_file_verify(const char *dir, const kl_manifest_file *f, kl_verify_mode mode, const char *where,
                            const char *hint, kl_err *e);
/* The same check for a digest computed by the caller (a mapped file): path
 * names the file in the message; got_bytes -1 when unknown. */
int kl_manifest_digest_check(const char *path, const char *got_hex, int64_t got_bytes, const kl_manifest_file *f,
                             const char *where, const char *hint, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
