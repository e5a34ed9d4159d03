/* keel serve REPO: the production inference server (KServe v2 REST on
 * libmicrohttpd). Prints the listening address, rescans the repository on
 * SIGHUP, drains and exits on SIGTERM/SIGINT. See docs/serving.md. */
#include "app.h"

#include <keel/feature.h>
#include <keel/serve.h>
#include <keel/track.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ==================================================================
 * Registry references: keel serve name@alias | name/3 | name
 * The version is materialised (sha256-verified by the registry) into a
 * private repository folder REPO/<name>/<version>/; SIGHUP re-resolves the
 * reference, so moving the alias swaps the served version (the new one is
 * verified and warmed up before it serves; the old one drains).
 * ================================================================== */

typedef struct {
    const char *ref;
    char repo[1024];
    char *name;
    int64_t version;
} reg_src;

static int reg_resolve(reg_src *r, kl_err *e) {
    kl_track *t = NULL;
    char *name = NULL, dir[1400];
    int64_t version = 0;
    int rc = app_store_open(0, &t, e);
    if (!rc) rc = kl_registry_parse_ref(t, r->ref, &name, &version, e);
    if (!rc && r->name && !strcmp(name, r->name) && version == r->version) goto done; /* unchanged */
    if (!rc) {
        snprintf(dir, sizeof dir, "%s/%s/%lld", r->repo, name, (long long)version);
        kl_rm_rf(dir, NULL);
        rc = kl_registry_resolve(t, r->ref, dir, e);
    }
    if (!rc) {
        if (r->name) { /* the previous version leaves the repository (it drains in the server) */
            snprintf(dir, sizeof dir, "%s/%s/%lld", r->repo, r->name, (long long)r->version);
            kl_rm_rf(dir, NULL);
        }
        free(r->name);
        r->name = name;
        r->version = version;
        name = NULL;
        kl_log(KL_LOG_INFO, "serve", "%s resolved to %s version %lld (sha256 verified)", r->ref, r->name,
               (long long)r->version);
    }
done:
    if (rc) kl_err_prefix(e, "%s", r->ref);
    free(name);
    kl_track_close(t);
    return rc;
}

static const app_opt opts[] = {
    {"host", 0, 1, "ADDR", "bind address (default 127.0.0.1)", 0},
    {"port", 'p', 1, "N", "port; 0 picks a free one (default 8000)", 0},
    {"workers", 0, 1, "N", "inference workers (default: the thread count: --threads, KEEL_THREADS, cores)", 0},
    {"threads-per-worker", 0, 1, "N", "intra-op threads of each inference (default 1)", 0},
    {"http-threads", 0, 1, "N",
     "HTTP event loops on the same port (default: one per core, the global --threads; max 64)", 0},
    {"inline-us", 0, 1, "US",
     "requests estimated under US µs of compute run on the HTTP thread (default 500; 0 = never)", 0},
    {"suspend-inline", 0, 0, NULL,
     "suspend an inline request's connection while it waits, as for worker requests (default: keep it active; fewer "
     "syscalls)",
     0},
    {"max-body", 0, 1, "BYTES", "request body limit, e.g. 64M (default 64 MiB); larger bodies get 413", 0},
    {"exit-timeout", 0, 1, "S", "drain limit on SIGTERM/SIGINT in seconds (default 30)", 0},
    {"probe-interval", 0, 1, "S", "background health probe period in seconds (default 10)", 0},
    {"conn-timeout", 0, 1, "S", "idle connection timeout in seconds (default 30)", 0},
    {"header-timeout", 0, 1, "S", "slow clients: request line + headers must arrive within S seconds (default 10)", 0},
    {"min-body-rate", 0, 1, "BYTES",
     "slow clients: a body must keep this many bytes/s after the header timeout (default 1024; 0 = off)", 0},
    {"memory-budget", 0, 1, "SIZE",
     "serving budget that priority memory shares divide (default: --memory-limit, else 80% of RAM)", 0},
    {"snapshot-dir", 0, 1, "DIR", "where memory-quota refusals write allocator snapshots (default $TMPDIR)", 0},
    {"no-access-log", 0, 0, NULL, "no log line per inference request", 0},
    {"feature-store", 0, 1, "URL",
     "online store of window features shared by replicas: redis://HOST:PORT/DB (KEEL_FEATURE_STORE; default: each "
     "version's features.db)",
     0},
    {"log-predictions", 0, 1, "DIR",
     "append every served request and posted label to Parquet datasets DIR/<model>/{predictions,labels} (off the "
     "request path)",
     0},
    {"log-queue", 0, 1, "N", "entries the prediction log queue holds; when full it drops, counted (default 65536)", 0},
    {"log-queue-bytes", 0, 1, "SIZE", "... and bytes (default 256M)", 0},
    {"log-rotate", 0, 1, "S", "a prediction log part never spans a period of S seconds (default 3600: by hour)", 0},
    {"log-flush", 0, 1, "S", "gathered prediction log rows are written as a part at least every S seconds (default 60)",
     0},
    {"json", 0, 0, NULL, "print the listening address as JSON", 0},
};
static const app_cmd_spec spec = {
    "serve",
    "keel serve REPO [--host 127.0.0.1] [--port 8000] [--workers N] [--threads-per-worker N] [--max-body BYTES]\n"
    "                  [--exit-timeout S] [--memory-limit SIZE] ...",
    "Serve the models of a repository over the KServe v2 REST protocol.",
    "REPO holds REPO/<model>/<version>/model.onnx with optional config.yaml (per model),\n"
    "or is a registry reference (name@alias or name/3; the store as for keel runs where): the version\n"
    "is verified and served, and SIGHUP re-resolves the alias. A version folder may also hold\n"
    "meta.json (sha256 of the files; checked before a version is served) and features.json.\n"
    "Endpoints: /v2/health/live, /v2/health/ready (deep probe), /v2, /v2/models/M[/versions/V][/ready],\n"
    "POST /v2/models/M[/versions/V]/infer (JSON or binary tensor extension), POST /v2/repository/index,\n"
    "POST /v2/repository/models/M/load|unload, POST /v1/models/M:predict (raw\n"
    "records through the version's features.json), POST /v2/models/M/events (raw records appended\n"
    "to the online store of its window features), GET /metrics (Prometheus).\n"
    "Signals: SIGHUP rescans the repository; SIGTERM/SIGINT drain (queued and running requests\n"
    "finish, up to --exit-timeout; what is left then gets 503) and exit 0.\n"
    "Global --memory-limit caps the allocator (see 'keel --help').",
    opts,
    KL_ARRAY_LEN(opts),
    1,
    1};

/* --log-predictions and its limits; -1 when they are fine, else the exit code */
static int log_options(const app_args *a, kl_serve_opts *o) {
    int rc;
    int64_t v;
    double d;
    kl_err e = {0};
    o->log_predictions = app_get(a, "log-predictions");
    if (o->log_predictions && !*o->log_predictions)
        return app_usage_error(&spec, "--log-predictions: expected a folder");
    if ((rc = app_get_int(a, &spec, "log-queue", 65536, &v)) >= 0) return rc;
    if (v < 1 || v > 100000000) return app_usage_error(&spec, "--log-queue must be 1..100000000");
    o->log_queue = v;
    const char *qb = app_get(a, "log-queue-bytes");
    uint64_t bytes = 0;
    if (qb && (kl_mem_parse_size(qb, &bytes, &e) || bytes < 4096))
        return app_usage_error(&spec, "--log-queue-bytes: %s", e.code ? kl_err_what(&e) : "must be at least 4K");
    o->log_queue_bytes = (int64_t)bytes;
    if ((rc = app_get_double(a, &spec, "log-rotate", 3600, &d)) >= 0) return rc;
    if (!(d >= 1 && d <= 86400 * 31)) return app_usage_error(&spec, "--log-rotate must be 1..2678400 seconds");
    o->log_rotate_s = d;
    if ((rc = app_get_double(a, &spec, "log-flush", 60, &d)) >= 0) return rc;
    if (!(d >= 0.1 && d <= 86400)) return app_usage_error(&spec, "--log-flush must be 0.1..86400 seconds");
    o->log_flush_s = d;
    return -1;
}

int cmd_serve(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_serve_opts o = {0};
    o.repo = a.pos[0];
    reg_src reg = {0};
    kl_err re = {0};
    if (kl_registry_is_ref(o.repo)) {
        reg.ref = o.repo;
        snprintf(reg.repo, sizeof reg.repo, "%s/keel-serve-%d", kl_settings_get()->tmpdir, (int)getpid());
        if (kl_mkdir_p(reg.repo, &re) || reg_resolve(&reg, &re)) {
            kl_rm_rf(reg.repo, NULL);
            free(reg.name);
            return app_fail(&re);
        }
        o.repo = reg.repo;
    }
    o.host = app_get(&a, "host");
    o.access_log = !app_flag(&a, "no-access-log");
    o.snapshot_dir = app_get(&a, "snapshot-dir");
    o.feature_store = app_get(&a, "feature-store");
    if (o.feature_store && !kl_fstore_is_url(o.feature_store))
        return app_usage_error(&spec, "--feature-store: expected redis://HOST:PORT/DB, got '%s'", o.feature_store);
    if (!o.feature_store && (o.feature_store = kl_settings_get()->feature_store) && !kl_fstore_is_url(o.feature_store))
        return app_usage_error(&spec, "KEEL_FEATURE_STORE: expected redis://HOST:PORT/DB"); /* may hold a password */
    int64_t v;
    double d;
    if ((rc = app_get_int(&a, &spec, "port", 8000, &v)) >= 0) return rc;
    if (v < 0 || v > 65535) return app_usage_error(&spec, "--port must be 0..65535");
    o.port = (int)v;
    if ((rc = app_get_int(&a, &spec, "workers", 0, &v)) >= 0) return rc;
    if (v < 0 || v > 1024) return app_usage_error(&spec, "--workers must be 0..1024");
    o.workers = (int)v;
    if ((rc = app_get_int(&a, &spec, "threads-per-worker", 0, &v)) >= 0) return rc; /* absent: the library's default */
    if (app_get(&a, "threads-per-worker") && (v < 1 || v > 256))
        return app_usage_error(&spec, "--threads-per-worker must be 1..256");
    o.threads_per_worker = (int)v;
    /* absent: 0, one loop per core of the thread-count setting (the library's default) */
    if ((rc = app_get_int(&a, &spec, "http-threads", 0, &v)) >= 0) return rc;
    if (app_get(&a, "http-threads") && (v < 1 || v > 64)) return app_usage_error(&spec, "--http-threads must be 1..64");
    o.http_threads = (int)v;
    if ((rc = app_get_int(&a, &spec, "inline-us", 500, &v)) >= 0) return rc;
    if (v < 0 || v > 10000000) return app_usage_error(&spec, "--inline-us must be 0..10000000");
    o.inline_us = v ? v : -1;
    o.hold_inline = app_flag(&a, "suspend-inline") ? -1 : 0;
    if ((rc = app_get_int(&a, &spec, "conn-timeout", 30, &v)) >= 0) return rc;
    if (v < 1) return app_usage_error(&spec, "--conn-timeout must be at least 1");
    o.conn_timeout_s = (int)v;
    if ((rc = app_get_double(&a, &spec, "header-timeout", 10, &d)) >= 0) return rc;
    if (d <= 0) return app_usage_error(&spec, "--header-timeout must be positive");
    o.header_timeout_s = d;
    if ((rc = app_get_double(&a, &spec, "min-body-rate", 1024, &d)) >= 0) return rc;
    if (d < 0) return app_usage_error(&spec, "--min-body-rate must not be negative");
    o.min_body_rate = d > 0 ? d : -1;
    if ((rc = app_get_double(&a, &spec, "exit-timeout", 30, &d)) >= 0) return rc;
    if (d <= 0) return app_usage_error(&spec, "--exit-timeout must be positive");
    o.exit_timeout_s = d;
    if ((rc = app_get_double(&a, &spec, "probe-interval", 10, &d)) >= 0) return rc;
    if (d <= 0) return app_usage_error(&spec, "--probe-interval must be positive");
    o.probe_interval_s = d;
    kl_err e = {0};
    const char *mb = app_get(&a, "max-body");
    if (mb && (kl_mem_parse_size(mb, &o.max_body, &e) || o.max_body == 0))
        return app_usage_error(&spec, "--max-body: %s", e.code ? kl_err_what(&e) : "must be positive");
    if ((rc = log_options(&a, &o)) >= 0) return rc;
    const char *bud = app_get(&a, "memory-budget");
    if (bud && kl_mem_parse_size(bud, &o.memory_budget, &e)) return app_usage_error(&spec, "--memory-budget: %s", kl_err_what(&e));

    /* SIGHUP/SIGTERM/SIGINT are queued by a handler and taken by this thread
     * (kl_signal_wait), whichever thread the kernel delivers them to */
    signal(SIGPIPE, SIG_IGN);
    if (kl_signal_catch(&e)) return app_fail(&e);

    kl_server *s = NULL;
    int rc2 = kl_server_new(&o, &s, &e);
    if (!rc2 && (rc2 = kl_server_start(s, &e))) kl_server_free(s);
    if (rc2) {
        if (reg.ref) kl_rm_rf(reg.repo, NULL);
        free(reg.name);
        return app_fail(&e);
    }
    const char *host = o.host ? o.host : "127.0.0.1";
    int ipv6 = strchr(host, ':') != NULL;
    if (app_flag(&a, "json"))
        printf("{\"host\":\"%s\",\"port\":%d,\"url\":\"http://%s%s%s:%d\"}\n", host, kl_server_port(s), ipv6 ? "[" : "",
               host, ipv6 ? "]" : "", kl_server_port(s));
    else
        printf("keel serve: listening on http://%s%s%s:%d\n", ipv6 ? "[" : "", host, ipv6 ? "]" : "", kl_server_port(s));
    fflush(stdout);
    for (;;) {
        int sig = kl_signal_wait();
        if (sig == SIGHUP) {
            kl_err_clear(&re);
            if (reg.ref && reg_resolve(&reg, &re))
                kl_log(KL_LOG_ERROR, "serve", "%s (the current version keeps serving)",
                       kl_err_what(&re)); /* names the reference */
            kl_err_clear(&re);
            if (kl_server_rescan(s, &re)) kl_log(KL_LOG_WARN, "serve", "rescan: %s", kl_err_what(&re));
            continue;
        }
        kl_log(KL_LOG_INFO, "serve", "%s received", sig == SIGINT ? "SIGINT" : "SIGTERM");
        kl_err se = {0};
        /* a drain cut short by --exit-timeout is logged (the cut requests got
         * 503s); the exit is still a clean, requested one: 0 */
        if (kl_server_shutdown(s, &se)) kl_log(KL_LOG_ERROR, "serve", "%s", kl_err_what(&se));
        break;
    }
    kl_server_free(s);
    if (reg.ref) kl_rm_rf(reg.repo, NULL);
    free(reg.name);
    return APP_EXIT_OK;
}
