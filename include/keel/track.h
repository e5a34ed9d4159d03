/* keel track: the experiment store (experiments, runs, params, metrics,
 * tags, artifacts, lineage) and the model registry (registered models,
 * immutable content-addressed versions, signatures, tags, aliases with
 * history), embedded in SQLite under one folder:
 *
 *   <dir>/keel.db              SQLite database (WAL mode)
 *   <dir>/objects/ab/cdef...   content-addressed files (sha256), read-only
 *
 * or on a PostgreSQL server named by a URL in place of the folder
 * (postgresql://user@host:port/db, postgres://...), its files in the
 * content-addressed folder kl_store_loc.artifacts (--artifacts,
 * KEEL_ARTIFACTS: a path every machine mounts).
 *
 * The folder is found by kl_track_store_resolve: the caller's (--tracking),
 * else KEEL_TRACKING, else the nearest keel-runs/ in the current folder or a
 * parent, else the per-user default ($XDG_DATA_HOME/keel/runs or
 * ~/.local/share/keel/runs).
 * A kl_track handle may be shared by threads (calls are serialized); several
 * processes may write to the same store at once (WAL, busy timeout, retry). */
#ifndef KEEL_TRACK_H
#define KEEL_TRACK_H

#include <keel/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Store and runs
 * ================================================================== */

typedef struct kl_track kl_track;
typedef struct kl_track_run kl_track_run;

typedef enum { KL_RUN_RUNNING, KL_RUN_FINISHED, KL_RUN_FAILED, KL_RUN_KILLED } kl_run_status;
const char *kl_run_status_name(kl_run_status s);
int kl_run_status_parse(const char *s, kl_run_status *out);

/* Current schema version (PRAGMA user_version of keel.db). */
#define KL_TRACK_SCHEMA_VERSION 4

/* Where the store is and which rule chose it. */
typedef enum {
    KL_STORE_GIVEN,   /* the caller's folder (--tracking, a pipeline's tracking:) */
    KL_STORE_ENV,     /* KEEL_TRACKING */
    KL_STORE_NEAREST, /* the nearest keel-runs/ in the current folder or a parent */
    KL_STORE_USER,    /* the per-user default */
} kl_store_rule;
typedef struct {
    char dir[4096];
    kl_store_rule rule;
    /* how it was chosen: "--tracking", "KEEL_TRACKING", "the nearest keel-runs/ folder from /a/b", ... */
    char how[4352];
    int exists; /* dir/keel.db exists (a server URL: 1, checked when opened) */
    /* the object folder of a server store (--artifacts, KEEL_ARTIFACTS; "" = none) */
    char artifacts[4096];
} kl_store_loc;
/* The one resolver of the store's folder, the same from every folder and
 * command: given (how: what gave it, e.g. "--tracking"; NULL = "given"),
 * else KEEL_TRACKING, else the nearest folder named keel-runs in the current
 * folder or a parent (as git finds .git; the search never enters a folder of
 * the colon-separated KEEL_TRACKING_CEILING or anything above it), else
 * $XDG_DATA_HOME/keel/runs (an absolute XDG_DATA_HOME), else
 * $HOME/.local/share/keel/runs. Creates nothing. KL_ENOTFOUND only when no
 * rule applies (no home folder). */
int kl_track_store_resolve(const char *given, const char *how, kl_store_loc *out, kl_err *e);
/* The same with every input explicit (tests): env_tracking, the current
 * folder, ceiling, XDG_DATA_HOME and HOME as given (NULL = unset). */
int kl_track_store_resolve_in(const char *given, const char *how, const char *env_tracking, const char *cwd,
                              const char *ceiling, const char *xdg_data_home, const char *home, kl_store_loc *out,
                              kl_err *e);

/* Opens (creating and migrating when needed) the store in dir (NULL: found
 * by kl_track_store_resolve). Marks runs of dead processes killed (same
 * host: pid no longer alive; other hosts: no heartbeat for
 * KL_TRACK_STALE_S seconds). */
#define KL_TRACK_STALE_S 900
int kl_track_open(const char *dir, kl_track **out, kl_err *e);
/* Opens the store at loc; create 0 (read-only commands): a store that does
 * not exist is KL_ENOTFOUND naming the folder and the rule that chose it,
 * and nothing is created. */
int kl_track_open_loc(const kl_store_loc *loc, int create, kl_track **out, kl_err *e);
void kl_track_close(kl_track *t); /* NULL is a no-op; does not end open runs */
const char *kl_track_dir(const kl_track *t);
/* "DIR (how it was chosen)", for messages; valid until kl_track_close. */
const char *kl_track_where(const kl_track *t);
/* Runs marked killed by the stale check of the last open. */
int kl_track_stale_marked(const kl_track *t);

/* Copies every run, metric point, param, tag, artifact, lineage record and
 * the whole registry (versions, files, tags, aliases and their history)
 * from one store into an empty one, ids kept, in one transaction on the
 * destination; the objects the rows name are copied into the destination's
 * object folder and verified against their sha256. A destination that is
 * not empty is KL_EEXIST. Works between any two engines. */
typedef struct {
    int64_t rows, runs, points, versions, alias_changes, objects;
} kl_track_copy_stats;
int kl_track_copy(kl_track *from, kl_track *to, kl_track_copy_stats *stats, kl_err *e);
/* The store's name for messages: a URL with its password replaced by ***. */
void kl_track_redact(const char *dir, char *out, size_t n);
/* 1 when s names a server store (postgresql://..., postgres://...), not a folder. */
int kl_track_is_url(const char *s);

/* Starts a run in experiment (created when new; NULL = "default"). run_name
 * may be NULL (then "run-<id>"); parent_id 0 = no parent. */
int kl_track_run_start(kl_track *t, const char *experiment, const char *run_name, int64_t parent_id,
                       kl_track_run **out, kl_err *e);
/* Re-attaches to an existing running run (for processes that continue one). */
int kl_track_run_attach(kl_track *t, int64_t run_id, kl_track_run **out, kl_err *e);
int64_t kl_track_run_id(const kl_track_run *r);

typedef struct {
    const char *key;
    const char *value;
} kl_kv;

/* Params are immutable: writing a key again with the same value is a no-op,
 * with a different value KL_EEXIST (the whole batch is rejected). */
int kl_track_log_params(kl_track_run *r, const kl_kv *params, size_t n, kl_err *e);

/* A metric point; ts_us 0 = now. value may be NaN or +-Inf. */
typedef struct {
    const char *key;
    int64_t step;
    int64_t ts_us;
    double value;
} kl_metric_point;
/* Appends a batch in one transaction (history + latest value per key). */
int kl_track_log_metrics(kl_track_run *r, const kl_metric_point *pts, size_t n, kl_err *e);

/* Copies a file into the object store and records (path, size, sha256);
 * name is the path recorded (NULL: the file's base name). */
int kl_track_log_artifact(kl_track_run *r, const char *path, kl_err *e);
int kl_track_log_artifact_as(kl_track_run *r, const char *path, const char *name, kl_err *e);
/* Tags are mutable (value NULL deletes). */
int kl_track_set_tag(kl_track_run *r, const char *key, const char *value, kl_err *e);

/* Lineage of a run. NULL fields are left unchanged; code_version NULL on
 * the first call records the git commit of the working directory when there
 * is one. */
typedef struct {
    const char *dataset_version;
    const char *feature_hash;
    const char *code_version;
    const char *spec_hash;
} kl_track_lineage;
int kl_track_set_lineage(kl_track_run *r, const kl_track_lineage *l, kl_err *e);

/* Ends the run with a final status and frees the handle (always freed). */
int kl_track_run_end(kl_track_run *r, kl_run_status status, kl_err *e);
/* Frees the handle without ending the run (it stays running until a stale
 * check or another process ends it). NULL is a no-op. */
void kl_track_run_free(kl_track_run *r);
/* Sets the status of any run by id (e.g. `keel runs end`). */
int kl_track_run_set_status(kl_track *t, int64_t run_id, kl_run_status status, kl_err *e);

/* ==================================================================
 * Several workers on one study (keel tune on several machines or
 * processes; src/track/claim.c). A study is a root run; its trials are
 * child runs tagged kind=trial, study=NAME, trial=N (0-based), state
 * (running, complete, pruned, failed); a trial lost by its worker also has
 * lost=1, and its re-run requeued_from=<the lost run's id>.
 * ================================================================== */

/* Starts a run named run_name in experiment with the given tags and
 * status, unless a run of that name is already there: in one write
 * transaction, so two processes creating it at once end with one run.
 * *id: the run (the existing one when *created is 0). */
int kl_track_run_ensure(kl_track *t, const char *experiment, const char *run_name, const kl_kv *tags, size_t ntags,
                        kl_run_status status, int64_t *id, int *created, kl_err *e);

/* Updates a running run's heartbeat time (its own short transaction).
 * KL_ESTATE when the run is no longer running (another process ended it,
 * e.g. a claim that found its heartbeat too old). */
int kl_track_run_heartbeat(kl_track *t, int64_t run_id, kl_err *e);

/* Ends a run that is still running with the given status and last tags,
 * in one transaction: KL_ESTATE, and nothing written, when it is no longer
 * running (a claim marked the trial lost meanwhile). */
int kl_track_run_finish(kl_track *t, int64_t run_id, kl_run_status status, const kl_kv *tags, size_t ntags,
                        kl_err *e);

/* A worker gives a running trial back (it was interrupted, not at fault):
 * failed as lost (tags state=failed, error="WHY (re-queued)", lost=1), so
 * the next claim runs its number again. KL_ESTATE when it is no longer
 * running. */
int kl_track_trial_release(kl_track *t, int64_t run_id, const char *why, kl_err *e);

typedef struct {
    int number;            /* the claimed trial number (-1: none) */
    int64_t run_id;        /* its new trial run: running, tags kind, study, trial, state=running */
    int64_t requeued_from; /* a re-queued trial: the lost run whose number and params it re-runs; 0 = fresh */
    int lost_marked;       /* trials this claim marked failed (worker lost) */
    int running;           /* the study's trials running (before this claim's own) */
} kl_track_claim;
/* A trial number lost this many times is not re-queued again (the
 * configuration may be what kills its workers): it counts as failed. */
#define KL_TRACK_TRIAL_MAX_LOST 3
/* Claims the next trial of the study with root run `root` in one write
 * transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock on the
 * root run's id): first marks failed ("worker lost", tag lost=1) every
 * trial still running whose heartbeat is older than heartbeat_timeout_s
 * (or whose run ended without its state, e.g. marked killed), then picks
 * the lowest number of a lost trial not yet re-run (its params copied to
 * the new run; not after KL_TRACK_TRIAL_MAX_LOST losses of that number),
 * else the lowest number below ntrials with no run, and
 * creates its run. KL_EBUSY when no number is free but trials are still
 * running (claim again later: one may be lost); KL_ENOTFOUND when none is
 * left (every number below ntrials is complete, pruned, failed or cached). */
int kl_track_trial_claim(kl_track *t, int64_t root, const char *study, int ntrials, double heartbeat_timeout_s,
                         kl_track_claim *out, kl_err *e);

/* ==================================================================
 * Queries
 * ================================================================== */

/* Run ids matching a filter expression (NULL/"" = all), sorted by sort_key
 * ("start_time" default; "metrics.loss", "params.lr", "name", "-metrics.acc"
 * or "metrics.acc desc" for descending), at most limit (0 = no limit).
 * Filter syntax errors are KL_EPARSE with e->col the 1-based column.
 * ids is malloc'ed (caller frees). */
int kl_track_runs_find(kl_track *t, const char *filter, const char *sort_key, int64_t limit,
                       int64_t **ids, size_t *n, kl_err *e);

/* A run as a cJSON object (caller frees with cJSON_Delete):
 * {"id","experiment","name","status","start_us","end_us","parent_id",
 *  "pid","host","params":{k:v},"metrics":{k:{"step","ts_us","value"}},
 *  "tags":{k:v},"artifacts":[{"path","size","sha256"}],
 *  "lineage":{"dataset_version","feature_hash","code_version","spec_hash"},
 *  "children":[ids],"points":N (metric points in the history)}
 * Non-finite metric values are the strings "NaN", "Infinity", "-Infinity". */
int kl_track_run_json(kl_track *t, int64_t run_id, void **out_cjson, kl_err *e);

/* The same for several runs at once (a few queries, whatever n): a cJSON
 * array in the order of ids; a missing run is KL_ENOTFOUND. */
int kl_track_runs_json(kl_track *t, const int64_t *ids, size_t n, void **out_cjson, kl_err *e);

/* Metric history of one run and key, in (step, insertion) order. Arrays
 * malloc'ed (caller frees each). */
int kl_track_metric_history(kl_track *t, int64_t run_id, const char *key, int64_t **steps,
                            int64_t **ts_us, double **values, size_t *n, kl_err *e);
/* Metric keys of a run (sorted; a malloc'ed array of malloc'ed strings;
 * free with kl_track_strv_free). */
int kl_track_metric_keys(kl_track *t, int64_t run_id, char ***keys, size_t *n, kl_err *e);
void kl_track_strv_free(char **v, size_t n);
/* Number of metric points in the history of a run (key NULL = all keys). */
int kl_track_metric_count(kl_track *t, int64_t run_id, const char *key, int64_t *out, kl_err *e);

/* Compiles a filter into an SQL boolean expression over runs r with bound
 * parameters (exposed for tests). *sql malloc'ed. */
int kl_track_filter_compile(const char *filter, char **sql, kl_err *e);

/* ==================================================================
 * Charts: the one SVG line chart of keel — `keel runs plot`, `keel ui`, the
 * training run's curves.svg, study histories (`keel tune show`) and the
 * pipeline report
 * ================================================================== */

typedef struct {
    const char *label;
    const int64_t *x;  /* steps */
    const double *y;   /* NaN/Inf points (and, on a log axis, y <= 0) break the line */
    size_t n;
    const double *xf;  /* when non-NULL: real x values instead of steps (ROC curves) */
    int right;         /* plotted on the right axis: a fraction 0..1 shown as 0-100 % (accuracy) */
    int dots;          /* a dot at every point (per-epoch values among per-step ones) */
} kl_chart_series;
typedef struct {
    const char *title, *xlabel, *ylabel; /* each may be NULL */
    const char *ylabel_right;            /* the right axis' label when a series is on it */
    const kl_chart_series *series;
    size_t nseries;
    int width, height; /* at least 200 x 150 */
    int logy;          /* left axis log10 (one grid line per decade) */
} kl_chart;
/* Appends an <svg> element: axes with ticks, one path per series
 * (class="series"), legend. kl_track_svg_chart: the plain form. */
int kl_svg_chart(kl_buf *out, const kl_chart *c);
int kl_track_svg_chart(kl_buf *out, const char *title, const char *xlabel, const char *ylabel,
                       const kl_chart_series *series, size_t nseries, int width, int height);

/* ==================================================================
 * Model registry
 * ================================================================== */

/* Registers the files of dir (recursively) as a new immutable version of
 * model name (created when new). run_id 0 = no producing run. The signature
 * comes from dir/meta.json ("inputs"/"outputs", or "signature":{...}) when
 * present, else from signature_json (may be NULL). *version gets the number. */
int kl_registry_register(kl_track *t, const char *name, const char *dir, int64_t run_id,
                         const char *signature_json, int64_t *version, kl_err *e);
/* A file registered with a version from outside its folder, under name (a
 * plain file name): e.g. {"features.json", path} and {"features.db", path},
 * what keel serve's :predict reads beside model.onnx. */
typedef struct {
    const char *name;
    const char *path;
} kl_registry_file;
/* kl_registry_register plus extra files (each replaces dir's file of the
 * same name, if any). */
int kl_registry_register_files(kl_track *t, const char *name, const char *dir, const kl_registry_file *extra,
                               size_t nextra, int64_t run_id, const char *signature_json, int64_t *version, kl_err *e);
/* Sets alias (e.g. "champion") of a model to version (0 removes it). The
 * history keeps every change with its time. */
int kl_registry_set_alias(kl_track *t, const char *name, const char *alias, int64_t version, kl_err *e);
/* The version an alias pointed to at time at_us (0 = now); 0 when none. */
int kl_registry_alias_at(kl_track *t, const char *name, const char *alias, int64_t at_us,
                         int64_t *version, kl_err *e);
/* Tags of a model (version 0) or of a version. value NULL deletes. */
int kl_registry_set_tag(kl_track *t, const char *name, int64_t version, const char *key,
                        const char *value, kl_err *e);
/* "name@alias", "name/3", "name" (latest version) -> name and version. */
int kl_registry_parse_ref(kl_track *t, const char *ref, char **name, int64_t *version, kl_err *e);
/* 1 when s looks like a registry reference (name@alias or name/N) and is
 * not an existing path. */
int kl_registry_is_ref(const char *s);
/* Verifies the sha256 of every file of a version (version 0 = all versions);
 * problems (one line per bad file: "name/3: model.onnx: sha256 mismatch")
 * are appended to report; returns KL_ECHECKSUM when any file is bad. */
int kl_registry_verify(kl_track *t, const char *name, int64_t version, kl_buf *report, kl_err *e);
/* Materializes a version into out_dir (created; files written atomically),
 * verifying every file's sha256 as it is copied. A tampered or missing
 * object is KL_ECHECKSUM naming the file; nothing is served then (files
 * already written to out_dir are removed). */
int kl_registry_resolve(kl_track *t, const char *ref, const char *out_dir, kl_err *e);
/* Models as JSON: [{"name","created_us","versions":[{"version","created_us",
 * "run_id","signature","files":[{"path","size","sha256"}],"tags":{}}],
 * "aliases":{alias:version},"tags":{}}] (name NULL = all models). */
int kl_registry_json(kl_track *t, const char *name, void **out_cjson, kl_err *e);
/* Where the store keeps the object of a registered file (its sha256 from
 * kl_registry_json), to read it in place (unverified: kl_registry_verify
 * checks it). */
void kl_registry_object_path(kl_track *t, const char *sha256_hex, char *buf, size_t n);
/* Alias history: [{"alias","version" (null when removed),"time_us"}]. */
int kl_registry_history_json(kl_track *t, const char *name, void **out_cjson, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
