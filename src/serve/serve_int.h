/* Private header of the serving layer: request tensors and the KServe v2
 * codec, the runtime adapter, the model repository (models, versions,
 * config.yaml), the scheduler queues and the metrics. Included only inside
 * src/serve/ (and by its unit tests). */
#ifndef KEEL_SERVE_INT_H
#define KEEL_SERVE_INT_H

#include <keel/feature.h>
#include <keel/profile.h>
#include <keel/serve.h>

#include <pthread.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdint.h>

#define SV_MAX_LEVELS 8
#define SV_MAX_IO 16
#define SV_MAX_VERSIONS 16
#define SV_MAX_DIMS 8
#define SV_MAX_BATCH_REQS 256
#define SV_NAME_MAX 128

/* ==================================================================
 * Tensors of requests and responses (codec.c)
 * ================================================================== */

typedef enum {
    SV_BOOL, SV_UINT8, SV_UINT16, SV_UINT32, SV_UINT64, SV_INT8, SV_INT16, SV_INT32,
    SV_INT64, SV_FP16, SV_BF16, SV_FP32, SV_FP64, SV_BYTES, SV_DTYPE_COUNT
} sv_dtype;

const char *kl__sv_dtype_name(sv_dtype t);          /* KServe name: "FP32" */
int kl__sv_dtype_parse(const char *name, sv_dtype *out); /* KL_EINVAL when unknown */
size_t kl__sv_dtype_size(sv_dtype t);               /* 0 for BYTES */

typedef struct sv_tensor {
    sv_dtype dtype;
    int rank;
    int64_t dims[SV_MAX_DIMS];
    void *data;            /* row-major contiguous */
    size_t nbytes;
    void *owner;           /* released with release(owner) when set */
    void (*release)(void *owner);
    int own;               /* data is a kl_mem block freed on release */
} sv_tensor;

int64_t kl__sv_numel(const sv_tensor *t);
void kl__sv_tensor_release(sv_tensor *t);  /* frees what it owns; leaves it empty */

/* Declared input/output of a model version. dims -1 = symbolic. */
typedef struct {
    char name[SV_NAME_MAX];
    sv_dtype dtype;
    int rank;
    int64_t dims[SV_MAX_DIMS];
} sv_io;

/* ==================================================================
 * Runtime adapter (backend.c): the only file that talks to runtime.h
 * ================================================================== */

typedef struct sb_session sb_session;
int kl__sb_available(void);
int kl__sb_load(const char *path, int threads, sb_session **out, kl_err *e);
void kl__sb_free(sb_session *s);
int kl__sb_describe(sb_session *s, sv_io *in, size_t *n_in, sv_io *out, size_t *n_out, kl_err *e);
/* out[] are filled with new tensors (release with kl__sv_tensor_release). */
int kl__sb_run(sb_session *s, const sv_tensor *in, size_t n_in, sv_tensor *out, size_t n_out, kl_err *e);
int kl__sb_plan_bytes(sb_session *s, const sv_tensor *in, size_t n_in, uint64_t *bytes, kl_err *e);

/* ==================================================================
 * Configuration of a model (config.yaml) (repo.c)
 * ================================================================== */

typedef struct {
    int64_t max_queue;          /* 0 = unlimited */
    int64_t default_timeout_us; /* 0 = none */
    int allow_timeout_override; /* a request may ask for a shorter timeout */
    double rate_limit;          /* requests/s of this level; 0 = none */
    double memory_share;        /* share of the serving budget (0..1]; 1 = all */
    int reserve_instances;      /* instances this level leaves to higher levels while they
                                   have recent traffic (SV_RESERVE_WINDOW_NS); top level: unused */
    int max_batch;              /* rows of a batch of this level; 0 = the model's max_batch */
    int nice;                   /* a worker runs this level's batches this much nicer (0..19) */
    int64_t shed_busy_us;       /* answer this level 503 before decoding while a higher level has
                                   recent traffic and the HTTP loop reading it has not been idle
                                   for this long (the loops are saturated); 0 = never */
} sv_level_cfg;

/* A higher level's traffic is recent while it has requests queued or
 * running, or had one arrive within this window. */
#define SV_RESERVE_WINDOW_NS 1000000000LL
#define SV_RESERVE_DEFAULT 1
#define SV_SHED_BUSY_DEFAULT_US 2000

typedef enum { SV_POLICY_LATEST, SV_POLICY_SPECIFIC, SV_POLICY_ALL } sv_policy;

/* The alert-only thresholds of a model's monitor: block (docs/monitoring.md,
 * "Alert rules"): the SLOs the burn-rate alerts defend and the live-quality
 * drops; the drift thresholds are the kl_monitor_cfg the server flags with. */
typedef struct {
    double slo_availability;   /* percent of requests not failed by the server (default 99.9) */
    double slo_latency_s;      /* a successful request is fast under this (a histogram bound; default 0.25) */
    double slo_latency_target; /* percent of successful requests that are fast (default 99) */
    double accuracy_drop;      /* live accuracy below the reference by more, and significantly (default 0.02) */
    double auc_drop;           /* live AUC below the reference by more (default 0.03) */
    double rmse_rise;          /* live RMSE above the reference by more than this share (default 0.1) */
    double quality_p_value;    /* one-sided level of the accuracy drop's two-proportion z-test (default 0.01) */
    int64_t min_labels;        /* labelled predictions a window needs before its quality alerts (default 200) */
    int64_t alert_for_s;       /* how long a drift or quality condition holds before it fires (default 600) */
} sv_alert_cfg;
void kl__sv_alert_cfg_default(sv_alert_cfg *a);

/* Dynamic batching is on by default (no config.yaml, or one without
 * `dynamic_batching`) for every version that can batch (sv_version.batchable):
 * at most SV_BATCH_DEFAULT_MAX rows, the oldest request waiting at most
 * SV_BATCH_DEFAULT_DELAY_US for company (an HTTP loop's batch runs at once
 * when every connection of the loop has its request queued). */
#define SV_BATCH_DEFAULT_MAX 32
#define SV_BATCH_DEFAULT_DELAY_US 500

typedef struct {
    int max_batch;              /* rows per run; 0 = requests run as sent */
    int dynamic_batching;       /* on unless config.yaml turns it off (or max_batch_size: 0);
                                   a version batches only when it is also batchable */
    int64_t max_queue_delay_us;
    int preferred[8];
    int n_preferred;
    int instances;              /* concurrent runs of one version */
    int levels;                 /* priority levels, 1 = highest */
    int default_level;          /* 0-based (config.yaml's default_priority - 1) */
    sv_level_cfg level[SV_MAX_LEVELS];
    uint64_t memory_quota;      /* planned in-flight bytes of this model; 0 = none */
    sv_policy policy;
    int latest_n;
    int64_t specific[SV_MAX_VERSIONS];
    int n_specific;
    int on_store_error_empty; /* on_store_error: empty (windows read as empty, counted) | fail (503) */
    int monitor_on; /* monitor: (monitor.c): on by default for versions with a profile.json */
    kl_monitor_cfg monitor;
    int64_t fb_horizon_s; /* monitor.feedback_horizon: predictions kept for labels (feedback.c) */
    int64_t fb_capacity;  /* monitor.feedback_capacity: at most this many (0: no feedback) */
    sv_alert_cfg alert;   /* monitor.slo_* and the quality drops: what `keel monitor rules` alerts on (rules.c) */
} sv_model_cfg;

void kl__sv_cfg_default(sv_model_cfg *c);
/* Parses config.yaml text (name for error positions). */
int kl__sv_cfg_parse(const char *text, size_t len, const char *name, sv_model_cfg *c, kl_err *e);

/* ==================================================================
 * Metrics (metrics.c)
 * ================================================================== */

#define SV_LAT_BUCKETS 16
#define SV_BATCH_BUCKETS 10
typedef struct {
    uint64_t b[SV_LAT_BUCKETS]; /* cumulative at render time; stored per bucket */
    uint64_t count;
    double sum;
} sv_hist;

enum {
    SV_R_SUCCESS, SV_R_BAD_REQUEST, SV_R_NOT_FOUND, SV_R_QUEUE_FULL, SV_R_TIMEOUT,
    SV_R_MEMORY, SV_R_RATE, SV_R_SHUTDOWN, SV_R_NOT_READY, SV_R_TOO_LARGE, SV_R_INTERNAL, SV_R_OVERLOAD,
    SV_R_COUNT
};
const char *kl__sv_reason_name(int r);

#define SV_VSTATS 16 /* versions of a model with request metrics (the lowest goes when more come) */

typedef struct {
    sv_hist latency[SV_MAX_LEVELS];
    sv_hist queue, compute;
    uint64_t batch[SV_BATCH_BUCKETS];
    uint64_t batch_count;
    double batch_sum;
    uint64_t requests[SV_R_COUNT];
    uint64_t load_ok, load_fail;
    uint64_t probe_ok, probe_fail; /* warm-up and background health inferences */
} sv_mstats;

/* ==================================================================
 * Repository: models and versions (repo.c)
 * ================================================================== */

typedef struct sv_model sv_model;

/* The reference quality of a version (meta.json final_metrics): what the
 * live quality is compared with (keel_model_quality{window="reference"}). */
enum { SV_QREF_ACCURACY, SV_QREF_AUC, SV_QREF_MAE, SV_QREF_RMSE, SV_QREF_COUNT };

typedef struct sv_version {
    sv_model *model;
    int64_t version;
    char dir[1024];
    char sig[512];          /* sizes and mtimes of the files: detects changes */
    sb_session *sess;
    sv_io in[SV_MAX_IO], out[SV_MAX_IO];
    size_t n_in, n_out;
    int batchable;          /* every input and output has a symbolic dim 0 */
    atomic_int refs;
    sv_tensor warm[SV_MAX_IO]; /* synthetic warm-up / probe inputs */
    int64_t probe_ns;       /* last probe (monotonic); guarded by server lock */
    int probe_ok;
    char probe_err[256];
    kl_features *feat;      /* features.json of the version (NULL: none); :predict runs it */
    int post;               /* meta.json output.postprocess: SV_POST_NONE, _SIGMOID, _SOFTMAX (-1: not declared) */
    int nclasses;
    char **class_names; /* meta.json output.class_names: class k's name (NULL: labels are indices) */
    int nclass_names;
    kl_fstore *fstore;      /* features.db next to it: recent events for entity windows */
    kl_monitor *mon;        /* live profiles against profile.json (monitor.c); NULL: not monitored, why in mon_off */
    char mon_off[256];
    kl_monitor_cfg mcfg;    /* the windows and thresholds it was loaded with */
    struct sv_feedback *fb; /* predictions waiting for labels (feedback.c); NULL: feedback off */
    double qref[SV_QREF_COUNT]; /* meta.json final_metrics on the validation rows, SV_QREF_* (NaN: absent) */
    uint64_t qref_n;            /* meta.json data.val_rows: the labels qref was measured on (0: unknown) */
    const struct sv_plog_schema *plog; /* its layout in the prediction log (predlog.c); NULL: not logged */
} sv_version;

enum { SV_M_READY, SV_M_UNAVAILABLE, SV_M_UNLOADED };

typedef struct sv_req sv_req;
typedef struct sv_loop sv_loop;

/* A version a scan refused, with the reason (repository index) */
typedef struct {
    int64_t version;
    char reason[512];
} sv_refused;

struct sv_model {
    char name[SV_NAME_MAX];
    sv_model_cfg cfg;
    sv_version *ver[SV_MAX_VERSIONS]; /* ready versions, highest first */
    int nver;
    int state;
    char reason[512];
    sv_refused refused[SV_MAX_VERSIONS]; /* versions the last scan refused (not serving), listed by the index */
    int nrefused;
    int unloaded;           /* explicitly unloaded: scans skip it until load */
    /* scheduler (server lock) */
    sv_req *qhead[SV_MAX_LEVELS], *qtail[SV_MAX_LEVELS];
    int qlen[SV_MAX_LEVELS];
    int64_t qrows[SV_MAX_LEVELS]; /* batch rows queued per level */
    int running;                /* batches on workers (bounded by cfg.instances) */
    int lrun[SV_MAX_LEVELS];    /* of them, batches of each level */
    int64_t last_arrival[SV_MAX_LEVELS]; /* monotonic ns of each level's latest request */
    int inl_running;            /* batches on HTTP loops (one per loop at most) */
    double tokens[SV_MAX_LEVELS];
    int64_t tok_ns[SV_MAX_LEVELS];
    uint64_t inflight_bytes;
    _Atomic int64_t row_ns;       /* moving average of compute time per batch row (0 = none yet) */
    /* metrics (metrics lock): loads and probes in st, requests per version
     * in vst (version -1: answered before a version was chosen) */
    sv_mstats st;
    struct { int64_t version; sv_mstats st; } vst[SV_VSTATS];
    int nvst;
    uint64_t fstore_errors_gone; /* feature store errors of versions swapped out (server lock) */
};

/* Whether v's requests are batched under its model's configuration c:
 * c batches (dynamic_batching, max_batch > 0) and v is batchable. */
static inline int sv_version_batches(const sv_model_cfg *c, const sv_version *v) {
    return v->batchable && c->dynamic_batching && c->max_batch > 0;
}
void kl__sv_version_ref(sv_version *v);
void kl__sv_version_unref(sv_version *v);

/* ==================================================================
 * Requests (http.c, sched.c)
 * ================================================================== */

enum { SV_Q_NEW, SV_Q_QUEUED, SV_Q_RUNNING, SV_Q_DONE };

/* A client connection as the slow-client guard sees it (http.c). Written by
 * the connection's HTTP thread, read by the guard thread. */
enum { SV_C_NEW, SV_C_IDLE, SV_C_HEAD, SV_C_BODY, SV_C_BUSY, SV_C_CUT };
typedef struct sv_conn {
    struct sv_conn *next, *prev;   /* server conn list (conn_lock) */
    int fd;
    int bad_uri;                   /* the current request's target failed kl__sv_http_check_uri */
    char bad_uri_why[160];
    atomic_int state;              /* SV_C_* */
    _Atomic int64_t since;         /* monotonic ns: when the state began */
    _Atomic int64_t bytes;         /* body bytes received (SV_C_BODY) */
} sv_conn;

struct sv_req {
    sv_req *next, *prev;
    kl_server *srv;
    struct MHD_Connection *conn;
    int route, method_ok;
    char model_name[SV_NAME_MAX];
    int64_t want_version;   /* -1 = latest */
    /* body */
    char *body;
    size_t body_len, body_cap;
    int too_large;
    int refuse;             /* answer this status once the body is in (read and dropped); 0 none */
    int refuse_reason;      /* SV_R_* of it */
    int close;              /* answer with Connection: close */
    size_t dropped;         /* body bytes read and dropped (refused, too large) */
    char refuse_msg[200];
    int64_t header_len;     /* Inference-Header-Content-Length; -1 none */
    /* parsed inference request */
    char id[256];
    int has_id;
    char rid[32];
    sv_model *model;
    sv_version *ver;        /* referenced while the request lives */
    int level;              /* 0-based */
    int prio_param;         /* 0-based level from the request body (sv_priority_*); -1 = none */
    int64_t timeout_us;     /* from the request parameters; -1 = none */
    int all_binary;         /* request parameter binary_data_output */
    sv_tensor in[SV_MAX_IO];
    size_t n_in;
    int64_t rows;
    int out_sel[SV_MAX_IO]; /* model output indices to return, in order */
    int out_bin[SV_MAX_IO];
    int n_out_sel;
    int64_t t_recv, t_enq, t_start, t_end, deadline; /* monotonic ns */
    uint64_t plan_bytes;
    int batch_size;
    /* state and answer */
    int qstate;
    int suspended;
    int status;
    int reason;             /* SV_R_* */
    int retry_after;        /* seconds; 0 = no header */
    char *resp;             /* malloc'd */
    size_t resp_len;
    int64_t resp_header_len; /* binary extension: JSON part length; -1 none */
    int counted;
    int in_infer;           /* counted in ninfer */
    int predict;            /* a v1 :predict request: records in, {"predictions"} out */
    int pred_outputs;       /* :predict "outputs": SV_PRED_* bits (0: the raw output, as before) */
    sv_conn *sc;            /* the connection (slow-client guard); NULL when untracked */
    sv_loop *loop;          /* the HTTP loop of the connection */
    int inl;                /* runs on its loop's thread (small enough), not on a worker */
    int held;               /* inline, connection not suspended: libmicrohttpd calls the handler
                               again each round until the answer is there (no epoll_ctl pair) */
    int counted_wait;       /* counted in loop->nwait */
    int64_t loop_idle_ns;   /* its loop's idle_ns when admission looked (kl__sv_sched_admit) */
};

/* An HTTP loop (http.c): one thread running one libmicrohttpd daemon (all
 * loops listen on the same port with SO_REUSEPORT) and, after each round of
 * network events, the batches of its inline models' requests. */
struct sv_loop {
    kl_server *s;
    struct MHD_Daemon *d;
    pthread_t t;
    int have_thread;
    int wake_fd;                /* eventfd: wakes the loop (answers from workers, stop, quiesce) */
    atomic_int stop;
    atomic_int quiesce_req;     /* 1: asked, 2: done */
    int resumed;                /* connections resumed on the loop's thread since its last MHD_run */
    int nconn;                  /* open connections (loop thread only) */
    atomic_int load;            /* nconn + connections handed to it not yet added (read by the acceptors) */
    /* connections accepted by another loop for this one (keel's own
     * listening socket, several loops): added to its daemon on its thread */
    pthread_mutex_t aq_lock;
    int aq_init;
    atomic_int naq;
    int aq_fd[64];
    struct sockaddr_storage aq_addr[64];
    socklen_t aq_len[64];
    int64_t last_accept_ns;     /* a busy loop tries the listening socket every few ms */
    int64_t idle_ns;            /* when the loop last had a round with nothing to do (shed_busy_us) */
    int nwait;                  /* of them, with a request in the scheduler (loop thread only) */
    int nheld;                  /* of them, held (sv_req.held) and not answered yet (loop thread only) */
    /* access log lines of this loop's requests not written yet: written in
     * one go (http.c's loop_log_flush) once the oldest is SV_LOG_FLUSH_NS old (a
     * sleeping loop wakes for it), at SV_LOG_FLUSH_BYTES, and when the loop
     * stops (SIGTERM drain included) */
    kl_buf log;
    int64_t log_since;          /* monotonic ns of the oldest buffered line */
    int log_fmt;                /* kl_log_format resolved for the buffered lines */
};
#define SV_LOG_FLUSH_NS 2000000LL
#define SV_LOG_FLUSH_BYTES 16384

/* ==================================================================
 * The server
 * ================================================================== */

/* What the scheduler needs from the transport that feeds it (http.c sets
 * it before the scheduler starts): the scheduler calls these, never the
 * HTTP layer's functions or state. */
typedef struct {
    /* r is answered (status and body set): mark it done and get the answer
     * on its way (resume its connection, or wake the loop that holds it) */
    void (*deliver)(sv_req *r);
    /* whether the calling thread is the HTTP loop r came in on */
    int (*on_own_loop)(const sv_req *r);
    /* whether every connection of loop lp has its request in the scheduler
     * (no more can come to it: its batch need not wait for company) */
    int (*loop_all_waiting)(const sv_loop *lp);
} sv_transport;

struct kl_server {
    kl_serve_opts o;
    sv_transport io;
    char repo[1024], host[256], snapdir[1024];
    sv_loop *loops;             /* --http-threads of them */
    int nloops;
    /* with several loops keel listens itself and hands each new connection
     * to the loop with the fewest (SO_REUSEPORT's hash of the address gives
     * 16 connections an 8/8 split only 1 time in 5; a 9/7 one costs a
     * second 8-row GEMM tile per batch on one loop); -1: libmicrohttpd listens */
    int lfd;
    atomic_int lfd_off;         /* quiesced: the loops no longer poll or accept it */
    int port;
    pthread_mutex_t lock;       /* models, versions, queues, states */
    pthread_cond_t qcond;       /* work for the workers */
    pthread_cond_t dcond;       /* drain progress */
    pthread_cond_t rcond;       /* reaper wake-up */
    pthread_cond_t pcond;       /* prober wake-up */
    pthread_mutex_t scan_lock;  /* one repository scan at a time */
    pthread_mutex_t mx;         /* metrics */
    sv_model **models;
    int nmodels, capmodels;
    int nqueued;                /* over all models */
    int nrunning;               /* batches running */
    atomic_int nlive;           /* request contexts alive (accepted, not completed) */
    atomic_int ninfer;          /* inference requests admitted and not yet completed */
    int nidle;                  /* workers waiting for work (untimed) */
    int ntimed;                 /* workers waiting for a batch to fill (max_queue_delay_us) */
    sv_model *timed_model;      /* ... for this model and level: arrivals that do not */
    int timed_level;            /* complete that batch need not wake anyone */
    atomic_int draining;
    int stop;                   /* workers exit */
    pthread_t *workers;
    int nworkers;
    pthread_t reaper, prober;
    int have_reaper, have_prober;
    int started;
    uint64_t level_bytes[SV_MAX_LEVELS]; /* planned in-flight bytes per level */
    uint64_t budget;
    atomic_uint_fast64_t next_rid;
    uint64_t http_errors[SV_R_COUNT]; /* requests not tied to a model (mx) */
    int64_t t_start_ns;
    /* slow-client guard (http.c) */
    pthread_mutex_t conn_lock;
    pthread_cond_t gcond;
    sv_conn *conns;
    pthread_t guard;
    int have_guard, guard_stop;
    atomic_uint_fast64_t cut_head, cut_body;  /* connections cut: headers late, body too slow */
    double cpu_last_s;
    int64_t cpu_last_ns;
    int64_t inline_ns;          /* inline batches of models below this compute time; 0 = off */
    struct sv_plog *plog;       /* --log-predictions (predlog.c); NULL: off */
};

/* feedback.c: labels joined with served predictions (docs/monitoring.md, "Feedback") */
typedef struct sv_feedback sv_feedback;
typedef struct {
    int classifier;
    uint64_t n;                                                     /* labelled predictions in the window */
    double auc, accuracy, log_loss, brier, mae, rmse;               /* NaN: not defined here */
    uint64_t auc_n, auc_pos;                                        /* the scored labels auc is of, positives */
    uint64_t matched, unmatched, late, duplicate, invalid, pending; /* since start; pending: predictions held */
} sv_quality;
sv_feedback *kl__sv_feedback_new(const sv_version *v, int64_t horizon_s, size_t capacity);
void kl__sv_feedback_free(sv_feedback *f);
size_t kl__sv_feedback_bytes(const sv_feedback *f); /* at most */
void kl__sv_feedback_record(sv_feedback *f, const char *id, int64_t now_ns, const float *out, size_t k);
/* labels posted at now_ns: the answer into b; returns the HTTP status */
int kl__sv_feedback_post(sv_feedback *f, const char *body, size_t len, int64_t now_ns, kl_buf *b);
int kl__sv_feedback_quality(sv_feedback *f, int64_t now_ns, int64_t window_s, sv_quality *q);

/* monitor.c: monitoring against the version's profile.json (docs/monitoring.md) */
int kl__sv_monitor_cfg_parse(const kl_node *n, sv_model_cfg *c, kl_err *e); /* config.yaml monitor: */
void kl__sv_monitor_load(sv_version *v, const sv_model_cfg *cfg);           /* sets v->mon or v->mon_off */
void kl__sv_monitor_free(sv_version *v);
/* (:predict records go through kl_monitor_transform in codec.c) */
/* hot path: after a successful run of requests rq[0..n) of v with outputs out */
void kl__sv_monitor_batch(sv_version *v, sv_req *const *rq, int n, const sv_tensor *out);
/* GET .../monitor: the body into b; returns the HTTP status */
int kl__sv_monitor_json(kl_server *s, const char *model, int64_t want_version, kl_buf *b);
/* POST .../feedback */
int kl__sv_monitor_feedback(kl_server *s, const char *model, int64_t want_version, const char *body, size_t len,
                            kl_buf *b);
void kl__sv_monitor_metrics(kl_server *s, kl_buf *b);

/* predlog.c: the prediction log, `--log-predictions DIR` (docs/monitoring.md, "Prediction log") */
typedef struct sv_plog sv_plog;
typedef struct sv_plog_schema sv_plog_schema;
int kl__sv_plog_open(const kl_serve_opts *o, sv_plog **out, kl_err *e); /* starts its writer thread */
/* Writes what is queued and gathered, stops the thread, frees p (NULL: a no-op). */
void kl__sv_plog_close(sv_plog *p);
/* At version load: v's layout (owned by p, deduplicated). */
const sv_plog_schema *kl__sv_plog_schema_of(sv_plog *p, const sv_version *v);
/* Hot path, after a successful run of rq[0..n) with outputs out and before
 * they are answered: one queue entry per request (a :predict body is taken
 * from its request); a full queue drops (counted), never waits. */
void kl__sv_plog_batch(sv_plog *p, sv_req *const *rq, int n, const sv_tensor *out);
/* Labels posted to v (POST .../feedback): the body is copied into the queue. */
void kl__sv_plog_labels(sv_plog *p, const sv_version *v, const char *body, size_t len);
void kl__sv_plog_metrics(const sv_plog *p, kl_buf *b);
/* The text spans off[i], len[i] of the elements of a :predict body's
 * top-level "instances" array (JSON the decoder accepted; bounded by n):
 * 1 when there are exactly rows of them, else 0 (the log prints the records). */
int kl__sv_plog_record_spans(const char *s, size_t n, int64_t rows, size_t *off, size_t *len);
/* metrics.c: a Prometheus label value (quoted, escaped) and a family's HELP/TYPE lines */
void kl__sv_metrics_label(kl_buf *b, const char *v);
void kl__sv_metrics_head(kl_buf *b, const char *name, const char *type, const char *help);
/* the upper bounds of the latency histograms' buckets (le="..." as "%g"), +Inf not included */
size_t kl__sv_metrics_latency_bounds(const double **le);
/* the request results (keel_inference_requests_total's result label) that spend the availability
 * error budget: failures of the server, not of the request (rules.c) */
int kl__sv_reason_is_server_error(int reason);
/* lock held: the version want (-1: the latest) of m; NULL when none (http.c) */
sv_version *kl__sv_pick_version(sv_model *m, int64_t want);

/* repo.c */
int kl__sv_repo_scan(kl_server *s, const char *only_model, kl_err *e);
int kl__sv_repo_unload(kl_server *s, const char *model, kl_err *e);
sv_model *kl__sv_model_find(kl_server *s, const char *name); /* lock held */
/* Runs the warm-up inference of v; records the probe result. */
int kl__sv_version_probe(kl_server *s, sv_version *v, kl_err *e);
void kl__sv_model_free(sv_model *m);

/* http_parse.c: the HTTP request handling keel owns, as pure functions
 * (fuzz/fuzz_http.c). */
enum {
    SV_RT_NONE,
    SV_RT_LIVE,
    SV_RT_READY,
    SV_RT_SERVER,
    SV_RT_MODEL_META,
    SV_RT_MODEL_READY,
    SV_RT_INFER,
    SV_RT_REPO_INDEX,
    SV_RT_REPO_LOAD,
    SV_RT_REPO_UNLOAD,
    SV_RT_METRICS,
    SV_RT_PREDICT,
    SV_RT_NOT_FOUND,
    SV_RT_BAD_TARGET,
    SV_RT_EVENTS,   /* POST .../events (fstore.c) */
    SV_RT_MONITOR,  /* GET .../monitor (monitor.c) */
    SV_RT_FEEDBACK  /* POST .../feedback (feedback.c) */
};
/* The route of a (percent-decoded) path; sets r->model_name, want_version
 * and method_ok. SV_RT_BAD_TARGET: a control character in it. */
int kl__sv_route(const char *url, const char *method, sv_req *r);
/* The raw request target (before percent-decoding): KL_EPARSE, with the
 * reason in why, when it holds a control character or a space, raw or
 * percent-encoded (%00 would cut the decoded path short). */
int kl__sv_http_check_uri(const char *raw, char *why, size_t n);
/* A request header as libmicrohttpd gave it; folded: it came from an
 * obs-fold continuation line (http.c detects it). */
typedef struct {
    const char *key, *value;
    int folded;
} sv_http_hdr;
#define SV_HTTP_MAX_HEADERS 256
/* A body over --max-body is read and dropped before the 413 (so the client
 * sees it) up to this size; a larger Content-Length is answered at once. */
#define SV_DISCARD_MAX (64u << 20)
/* The header rules against request smuggling (RFC 9112): KL_EPARSE, with
 * the reason in why, for a header name that is not a token (whitespace
 * before the colon), obs-fold, a control character in a value, more than
 * one Content-Length (even identical ones), Transfer-Encoding, Host,
 * Inference-Header-Content-Length or X-Priority, a Content-Length that is
 * not 1..19 digits, a Transfer-Encoding other than "chunked", both
 * Content-Length and Transfer-Encoding, more than SV_HTTP_MAX_HEADERS. */
int kl__sv_http_check_headers(const sv_http_hdr *h, size_t nh, char *why, size_t n);
/* Inference-Header-Content-Length: the JSON part's length, within body_len. */
int kl__sv_http_header_len(const char *hl, size_t body_len, size_t *json_len);
/* The priority grammar, one for the X-Priority header, the v2 body's
 * parameters.priority (the header serves :predict too): a level 1..SV_MAX_LEVELS in plain
 * digits (1 = highest), or the words "high" (level 1) and "low" (the model's
 * lowest level) in any case; a JSON body may give the level as a number
 * (kl__sv_priority_number: an integer 1..SV_MAX_LEVELS). *level is 0-based, as
 * everywhere inside serve (SV_LEVEL_LOWEST for "low"); -1 when the text is
 * none of these. kl__sv_priority_level: the level a request runs at for model
 * config c — asked (0-based; -1 = not asked: the model's default_priority)
 * capped at the model's lowest level. */
#define SV_LEVEL_LOWEST SV_MAX_LEVELS
int kl__sv_priority_parse(const char *s, int *level);
int kl__sv_priority_number(double v, int *level);
int kl__sv_priority_level(const sv_model_cfg *c, int asked);

/* codec.c */
/* Parses a KServe v2 infer request (JSON, or JSON + binary tail) into r->in,
 * checked against the version's inputs; 400-style errors name the field. */
int kl__sv_decode_infer(sv_req *r, const char *json, size_t json_len, const char *bin,
                    size_t bin_len, kl_err *e);
enum { SV_POST_NONE, SV_POST_SIGMOID, SV_POST_SOFTMAX };
enum { SV_PRED_LOGIT = 1, SV_PRED_PROBABILITY = 2, SV_PRED_LABEL = 4 };

/* Parses a :predict request {"instances":[{...raw fields...}]} through the
 * version's features.json (the same code as offline feature computation)
 * into r->in; errors name the instance and field. */
int kl__sv_decode_predict(sv_req *r, const char *json, size_t json_len, kl_err *e);
/* Builds the response of r from outputs (rows [row0, row0+rows) of each). */
int kl__sv_encode_infer(sv_req *r, const sv_tensor *outs, size_t n_out, int64_t row0,
                    int64_t total_rows, kl_err *e);
/* A float as JSON: 9 significant digits (reads back exactly), %g layout,
 * "null" for NaN/Inf; writes < 24 bytes, returns the length. */
int kl__sv_fmt_f32(char *out, float f);
/* v in decimal (no NUL); returns the length (<= 20). printf's %lld/%llu
 * without the format parsing: a handful of these per request. */
int kl__sv_fmt_u64(char *out, uint64_t v);
int kl__sv_fmt_i64(char *out, int64_t v);
/* {"error": msg} */
char *kl__sv_error_json(const char *msg, size_t *len);
/* n values of dtype dt at p as a JSON array (BYTES: nulls) */
void kl__sv_json_data(kl_buf *b, sv_dtype dt, const char *p, int64_t n);

/* sched.c */
/* Admission — the one place a request is let in or refused — at three
 * stages: SV_ADMIT_HEADER, before the body is decoded when X-Priority gave
 * the level (queue full, then shedding: a refused request costs its read,
 * not its decode); SV_ADMIT_DECODED, after the decode when the level came
 * with the body or is the default (shedding); SV_ADMIT_QUEUE, at submit
 * (shutdown, the level's rate limit → 429, queue full, memory shares and the
 * model's quota → 503 with an allocator snapshot; admitted planned bytes are
 * reserved). Lock held for HEADER and DECODED (kl__sv_sched_submit takes it for
 * QUEUE). r->model and r->level set; r->loop_idle_ns is when its HTTP loop
 * last had a round with nothing to do (0: not on a loop). Returns 0 when
 * admitted, else the HTTP status with *v filled in. */
typedef enum { SV_ADMIT_HEADER, SV_ADMIT_DECODED, SV_ADMIT_QUEUE } sv_admit_stage;
typedef struct {
    int status, reason, retry_after; /* retry_after in s; 0: the 503 default */
    int snapshot;                    /* a memory refusal: write an allocator snapshot */
    char msg[768];
} sv_verdict;
int kl__sv_sched_admit(kl_server *s, sv_req *r, sv_admit_stage stage, sv_verdict *v);
/* Queues r (or answers it at once when SV_ADMIT_QUEUE refuses it); 0 = queued. */
int kl__sv_sched_submit(kl_server *s, sv_req *r);
/* The queue timeout (µs, 0 = none) of a request of level lc that asked for
 * req_us (-1: no `timeout` parameter; 0: none asked). A request may only
 * lower its level's default_timeout_us, and only when the level allows it
 * (allow_timeout_override); asking for none (0) keeps the default. */
int64_t kl__sv_sched_timeout_us(const sv_level_cfg *lc, int64_t req_us);
/* Whether r (decoded, level set) runs on its HTTP loop's thread: called on
 * that thread; its estimated compute is below s->inline_ns and it is of its
 * model's top level. The caller sets r->inl from it before submitting. */
int kl__sv_sched_can_inline(kl_server *s, const sv_req *r);
/* lock held: whether a worker may start a batch of level l (0-based) of m
 * at time now: m is below its instances and, for l > 0 while a higher level
 * has recent traffic, fewer than instances minus level l's
 * reserve_instances (at most instances - 1) batches of m run. When only the window keeps
 * it back, *retry_at (if not NULL) gets when the window ends. */
int kl__sv_sched_level_may_run(const sv_model *m, int l, int64_t now, int64_t *retry_at);
/* lock held: whether a level above l of m has recent traffic (queued,
 * running, or arrived within SV_RESERVE_WINDOW_NS); *until (if not NULL)
 * gets when the arrival window ends (0 while requests are queued or run). */
int kl__sv_sched_higher_active(const sv_model *m, int l, int64_t now, int64_t *until);
/* A held request whose connection closed: taken out of its queue (or left
 * alone when it has been answered meanwhile). */
void kl__sv_sched_cancel(kl_server *s, sv_req *r);
int kl__sv_sched_start(kl_server *s, kl_err *e);
void kl__sv_sched_stop(kl_server *s);
/* lock held: answers every queued request with 503 (why) */
void kl__sv_sched_flush(kl_server *s, const char *why);
/* On HTTP loop lp's thread: runs the queued batches of lp's inline requests
 * (those whose estimated compute is below s->inline_ns), wakes workers for the rest;
 * *wait_until (monotonic ns, 0 = none) is when a batch waiting for its
 * max_queue_delay_us is due. Returns the number of batches run. */
int kl__sv_sched_inline(kl_server *s, sv_loop *lp, int64_t *wait_until);
/* The scheduling state of r (SV_Q_*): read and written with acquire/release
 * (a held request is answered by its loop after another thread set it). */
static inline int sv_qstate(const sv_req *r) { return __atomic_load_n(&r->qstate, __ATOMIC_ACQUIRE); }
/* Sets r's answer and hands it to the transport (sv_transport.deliver). */
void kl__sv_req_finish(sv_req *r, int status, int reason, const char *msg);

/* metrics.c */
void kl__sv_metrics_request(kl_server *s, sv_req *r);
char *kl__sv_metrics_render(kl_server *s, size_t *len);

/* http.c */
#define SV_MAX_LOOPS 64
/* The number of HTTP loops of o: http_threads, or (0) one per core of the
 * thread-count setting (kl_threads_default: --threads, KEEL_THREADS, the
 * online cores), at most SV_MAX_LOOPS. */
int kl__sv_http_loops(const kl_serve_opts *o);
/* sched.c: the inference workers of o (workers, or 0: the thread-count
 * setting, like the HTTP loops) and the intra-op threads of each session run
 * (threads_per_worker, or 0: SV_THREADS_PER_WORKER) — the one place either
 * default is decided. */
#define SV_THREADS_PER_WORKER 1
int kl__sv_workers(const kl_serve_opts *o);
int kl__sv_threads_per_worker(const kl_serve_opts *o);
/* Deep readiness: not draining and every model's versions probed fine
 * recently. reason (may be NULL) says why not. */
int kl__sv_ready(kl_server *s, char *reason, size_t n);

/* ==================================================================
 * The online feature store of the versions (fstore.c)
 * ================================================================== */

/* Opens v->fstore (--feature-store, else DIR/features.db) under cfg. */
int kl__sv_fstore_open(kl_server *s, sv_version *v, const sv_model_cfg *cfg, kl_err *e);
/* 1 when every served version's shared store answers; else 0 and why. */
int kl__sv_fstore_ready(kl_server *s, char *reason, size_t n);
/* POST /v2/models/M/events: appends the body's records to v's store. */
int kl__sv_events_append(sv_version *v, const char *body, size_t len, int *appended, kl_err *e);
/* The model's feature store errors (server lock held). */
uint64_t kl__sv_fstore_errors(const sv_model *m);

#endif
