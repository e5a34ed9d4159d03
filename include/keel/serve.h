/* keel serve: the production inference server. A model repository
 * (REPO/<model>/<version>/model.onnx + config.yaml, meta.json, features.json)
 * served over HTTP/1.1 with the KServe v2 (Open Inference Protocol) REST API,
 * the binary tensor extension, priority scheduling with dynamic batching,
 * per-level queue limits, timeouts, rate limits and memory quotas, a deep
 * readiness probe, Prometheus metrics and graceful drain on shutdown.
 * See docs/serving.md. */
#ifndef KEEL_SERVE_H
#define KEEL_SERVE_H

#include <keel/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_server kl_server;

typedef struct {
    const char *repo;          /* model repository folder (required) */
    const char *host;          /* bind address; NULL = "127.0.0.1" */
    int port;                  /* 0 = pick a free port (kl_server_port says which) */
    int workers;               /* inference workers; 0 = the thread-count setting (kl_threads_default) */
    int threads_per_worker;    /* intra-op threads of each session run; 0 = 1 (the default) */
    int http_threads;          /* HTTP event loops (one libmicrohttpd daemon each); 0 = one per core
                                  of the thread-count setting (kl_threads_default), at most 64 */
    uint64_t max_body;         /* request body limit in bytes; 0 = 64 MiB */
    double exit_timeout_s;     /* drain limit on shutdown; <= 0 = 30 s */
    double probe_interval_s;   /* background health probe period; <= 0 = 10 s */
    int conn_timeout_s;        /* idle connection timeout; 0 = 30 s */
    double header_timeout_s;   /* slow clients: a request's line and headers must arrive within
                                  this (and a new connection's first request); <= 0 = 10 s */
    double min_body_rate;      /* slow clients: a body must arrive at this many bytes/s on
                                  average after a header_timeout_s grace; 0 = 1024, < 0 = off */
    uint64_t memory_budget;    /* serving memory budget for priority quotas; 0 = the
                                  core allocator budget, else 80 % of physical memory */
    const char *snapshot_dir;  /* where memory-quota snapshots go; NULL = $TMPDIR or /tmp */
    int access_log;            /* one log line per inference request (default on: pass 1) */
    int64_t inline_us;         /* requests whose estimated compute (the model's recent time per
                                  row) is under this run on their HTTP loop's thread, batched per
                                  round of network events (no hand-off to a worker: two thread
                                  wake-ups less per batch); 0 = 500 us, < 0 = never */
    int hold_inline;           /* an inline request's connection stays active while it waits
                                  (libmicrohttpd calls the handler again each round) instead of
                                  being suspended and resumed (two epoll_ctl calls and an empty
                                  recv per request); 0 = on, < 0 = suspend as for worker requests */
    const char *feature_store; /* online store of the versions' window features, shared by replicas
                                  (redis://HOST:PORT/DB); NULL = each version's features.db */
    /* The prediction log (docs/monitoring.md, "Prediction log"): every answered inference request
     * and posted label appended to Parquet datasets DIR/<model>/{predictions,labels}/ by a
     * background thread; NULL = off */
    const char *log_predictions;
    int64_t log_queue;         /* entries its queue holds; a full queue drops (counted); 0 = 65536 */
    int64_t log_queue_bytes;   /* ... and bytes; 0 = 256 MiB */
    double log_rotate_s;       /* a part never spans a period of this length (UTC); 0 = 3600 (by hour) */
    double log_flush_s;        /* gathered rows are written as a part at least this often; 0 = 60 s */
} kl_serve_opts;

/* Loads the repository (integrity checks, warm-up) and prepares the server.
 * Models that fail to load are reported in the log and in the repository
 * index; they do not make kl_server_new fail. */
int kl_server_new(const kl_serve_opts *o, kl_server **out, kl_err *e);
/* Binds and starts the HTTP daemon, the workers and the probe thread. */
int kl_server_start(kl_server *s, kl_err *e);
/* The bound port (after start). */
int kl_server_port(const kl_server *s);
/* Rescans the repository (new versions are loaded, checked and warmed up
 * before being swapped in; removed ones drain). Thread-safe (SIGHUP). */
int kl_server_rescan(kl_server *s, kl_err *e);
/* Graceful shutdown: readiness false at once, new inference refused with 503,
 * queued and running requests finish (up to exit_timeout_s), then the daemon
 * stops. Returns KL_OK when everything drained, KL_ETIMEOUT otherwise. */
int kl_server_shutdown(kl_server *s, kl_err *e);
/* Frees (stops first when still running). NULL is a no-op. */
void kl_server_free(kl_server *s);

/* Prometheus rules for model `model` of repository `repo` (keel monitor
 * rules; docs/monitoring.md, "Alert rules"): alerting rules on feature and
 * prediction drift, data quality and live quality with the thresholds of
 * REPO/MODEL/config.yaml's monitor: block (defaults where absent), and
 * multi-window, multi-burn-rate alerts of an availability and a latency SLO
 * with their recording rules. */
typedef struct {
    const char *repo;  /* model repository (REPO/<model>/[config.yaml]) */
    const char *model; /* the model's folder name, as served */
    double slo;        /* availability objective in percent; 0 = config.yaml's slo_availability (99.9) */
} kl_rules_opts;
/* Appends the rules YAML to out. KL_ENOTFOUND (no such model folder),
 * KL_EINVAL (a bad objective or model name), config.yaml's errors with
 * their file:line:col, KL_ENOMEM. */
int kl_serve_rules(const kl_rules_opts *o, kl_buf *out, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
