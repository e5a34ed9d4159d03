/* HTTP front of the server on libmicrohttpd: routing of the KServe v2 REST
 * API (health, server/model metadata and readiness, infer with JSON or the
 * binary tensor extension, repository index/load/unload), /metrics, the
 * :predict hook, body limits, and the decoupling of connections from
 * inference: an infer request's connection is suspended while the request
 * waits in the scheduler and resumed when its answer is ready; the
 * slow-client guard (connections that trickle their headers or body are cut),
 * and the HTTP event loop: with one HTTP thread keel runs libmicrohttpd's
 * epoll loop itself, and after each round of network events runs the batches
 * of small models on that thread (everything that arrived in the round is
 * one batch; no hand-off to a worker). Also the server's life cycle (new, start, rescan, shutdown with drain, free). */
#include "serve_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The HTTP loop of the calling thread (NULL elsewhere). */
static _Thread_local sv_loop *sv_cur_loop;

/* Wakes loop lp (an eventfd write). */
static void sv_loop_wake(sv_loop *lp);

static void req_resume(sv_req *r);
/* Writes loop lp's buffered access log lines (its thread, or after it stopped). */
static void loop_log_flush(sv_loop *lp);
static void http_stop(kl_server *s);

/* ==================================================================
 * Responses
 * ================================================================== */

static void log_request(kl_server *s, sv_req *r);

static enum MHD_Result send_body(kl_server *s, struct MHD_Connection *c, sv_req *r, int status, char *body, size_t len,
                                 const char *ctype, int retry_after, int64_t header_len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    char tmp[32];
    if (retry_after > 0) {
        snprintf(tmp, sizeof tmp, "%d", retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, tmp);
    }
    if (header_len >= 0) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)header_len);
        MHD_add_response_header(resp, "Inference-Header-Content-Length", tmp);
    }
    if (atomic_load(&s->draining) || (r && r->close)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(kl_server *s, struct MHD_Connection *c, sv_req *r, int status, kl_buf *b) {
    size_t len = b->len;
    char *body = kl_buf_take(b);
    if (!body) { body = strdup("{}"); len = 2; }
    return send_body(s, c, r, status, body, len, "application/json", 0, -1);
}

/* v2 infer and :predict: both are inference requests, logged and counted alike */
static int inference_route(const sv_req *r) { return r->route == SV_RT_INFER || r->route == SV_RT_PREDICT; }

/* An error answer that is not an inference result: logged and counted. */
static enum MHD_Result send_error(kl_server *s, struct MHD_Connection *c, sv_req *r, int status, int reason,
                                  int retry_after, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result send_error(kl_server *s, struct MHD_Connection *c, sv_req *r, int status, int reason,
                                  int retry_after, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len;
    char *body = kl__sv_error_json(msg, &len);
    r->status = status;
    r->reason = reason;
    if (inference_route(r) && !r->counted) { r->counted = 1; kl__sv_metrics_request(s, r); }
    if (inference_route(r)) log_request(s, r);
    if (status == 503 && retry_after <= 0) retry_after = 1;
    return send_body(s, c, r, status, body, len, "application/json", retry_after, -1);
}

/* ==================================================================
 * Readiness
 * ================================================================== */

int kl__sv_ready(kl_server *s, char *reason, size_t n) {
    if (reason && n) reason[0] = 0;
    if (atomic_load(&s->draining)) {
        if (reason) snprintf(reason, n, "shutting down");
        return 0;
    }
    double iv = s->o.probe_interval_s > 0 ? s->o.probe_interval_s : 10;
    int64_t now = kl_time_mono_ns(), stale = (int64_t)((3 * iv + 10) * 1e9);
    int ok = 1;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->nmodels && ok; i++) {
        sv_model *m = s->models[i];
        if (m->unloaded) continue;
        if (m->state != SV_M_READY) {
            ok = 0;
            if (reason) snprintf(reason, n, "model %s is not ready: %s", m->name, m->reason);
            break;
        }
        for (int j = 0; j < m->nver; j++) {
            sv_version *v = m->ver[j];
            if (!v->probe_ok || now - v->probe_ns > stale) {
                ok = 0;
                if (reason)
                    snprintf(reason, n, "model %s version %lld: %s", m->name, (long long)v->version,
                             v->probe_ok ? "no recent health probe" : v->probe_err);
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (ok) ok = kl__sv_fstore_ready(s, reason, n);
    return ok;
}

/* ==================================================================
 * Metadata and repository endpoints
 * ================================================================== */

static void io_json(kl_buf *b, const sv_io *io, size_t n) {
    kl_buf_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        kl_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        kl_buf_json_str(b, io[i].name);
        kl_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[", kl__sv_dtype_name(io[i].dtype));
        for (int d = 0; d < io[i].rank; d++) kl_buf_printf(b, d ? ",%lld" : "%lld", (long long)io[i].dims[d]);
        kl_buf_puts(b, "]}");
    }
    kl_buf_puts(b, "]");
}

/* lock held: the version r asks for (or the latest); NULL when none */
sv_version *kl__sv_pick_version(sv_model *m, int64_t want) {
    for (int i = 0; i < m->nver; i++)
        if (want < 0 || m->ver[i]->version == want) return m->ver[i];
    return NULL;
}

/* ,"predict":{"fields":[the raw record :predict takes: name, type, nullable,
 * timezone], "outputs":[what it can answer]} of a version with features */
static void predict_meta(kl_buf *b, const sv_version *v) {
    kl_buf_puts(b, ",\"predict\":{\"fields\":[");
    for (size_t i = 0; i < kl_features_num_inputs(v->feat); i++) {
        kl_features_field fd;
        kl_features_input_field(v->feat, i, &fd);
        kl_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        kl_buf_json_str(b, fd.name);
        kl_buf_printf(b, ",\"type\":\"%s\",\"nullable\":%s", fd.type, fd.nullable ? "true" : "false");
        if (fd.timezone) { kl_buf_puts(b, ",\"timezone\":"); kl_buf_json_str(b, fd.timezone); }
        kl_buf_puts(b, "}");
    }
    int classify = v->post == SV_POST_SIGMOID || v->post == SV_POST_SOFTMAX;
    kl_buf_printf(b, "],\"outputs\":[\"logit\"%s]", classify ? ",\"probability\",\"label\"" : "");
    if (classify) kl_buf_printf(b, ",\"classes\":%d", v->nclasses);
    if (classify && v->nclass_names) {
        kl_buf_puts(b, ",\"class_names\":[");
        for (int i = 0; i < v->nclass_names; i++) {
            if (i) kl_buf_puts(b, ",");
            kl_buf_json_str(b, v->class_names[i]);
        }
        kl_buf_puts(b, "]");
    }
    kl_buf_puts(b, "}");
}

/* POST /v2/models/M[/versions/V]/events: raw records appended to the
 * version's online store (no prediction); answered on the HTTP thread
 * (bounded by the store's timeouts). */
static enum MHD_Result events(kl_server *s, struct MHD_Connection *c, sv_req *r) {
    if (atomic_load(&s->draining)) return send_error(s, c, r, 503, SV_R_SHUTDOWN, 5, "server is shutting down");
    pthread_mutex_lock(&s->lock);
    sv_model *m = kl__sv_model_find(s, r->model_name);
    sv_version *v = m ? kl__sv_pick_version(m, r->want_version) : NULL;
    if (v) kl__sv_version_ref(v);
    pthread_mutex_unlock(&s->lock);
    if (!v)
        return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0,
                          m ? "model '%s' has no such version loaded" : "unknown model '%s'", r->model_name);
    kl_err e = {0};
    int n = 0,
        rc = r->body_len ? kl__sv_events_append(v, r->body, r->body_len, &n, &e)
                         : kl_err_set(&e, KL_EINVAL, "request body: empty (expected JSON records)");
    int64_t ver = v->version;
    kl__sv_version_unref(v);
    if (rc == KL_ETIMEOUT) return send_error(s, c, r, 503, SV_R_NOT_READY, 1, "feature store unavailable: %s", e.msg);
    if (rc == KL_ENOMEM) return send_error(s, c, r, 503, SV_R_MEMORY, 1, "%s", e.msg);
    if (rc == KL_ERANGE) return send_error(s, c, r, 413, SV_R_TOO_LARGE, 0, "%s", e.msg);
    if (rc) return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0, "%s", e.msg);
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\"model_name\":");
    kl_buf_json_str(&b, r->model_name);
    kl_buf_printf(&b, ",\"model_version\":\"%lld\",\"appended\":%d}", (long long)ver, n);
    return send_json(s, c, r, 200, &b);
}

static enum MHD_Result model_meta(kl_server *s, struct MHD_Connection *c, sv_req *r, int ready_only) {
    pthread_mutex_lock(&s->lock);
    sv_model *m = kl__sv_model_find(s, r->model_name);
    if (!m) {
        pthread_mutex_unlock(&s->lock);
        return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0, "unknown model '%s'", r->model_name);
    }
    sv_version *v = kl__sv_pick_version(m, r->want_version);
    if (!v && r->want_version >= 0 && m->nver > 0) { /* an unknown version: 404, as for infer and metadata */
        pthread_mutex_unlock(&s->lock);
        return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0, "model '%s' has no version %lld loaded", r->model_name,
                          (long long)r->want_version);
    }
    kl_buf b;
    kl_buf_init(&b);
    if (ready_only) {
        int ok = v && v->probe_ok;
        kl_buf_puts(&b, "{\"name\":");
        kl_buf_json_str(&b, m->name);
        if (v) kl_buf_printf(&b, ",\"version\":\"%lld\"", (long long)v->version);
        kl_buf_printf(&b, ",\"ready\":%s", ok ? "true" : "false");
        if (!ok) {
            kl_buf_puts(&b, ",\"reason\":");
            kl_buf_json_str(&b, !v ? m->reason : v->probe_err);
        }
        kl_buf_puts(&b, "}");
        pthread_mutex_unlock(&s->lock);
        return send_json(s, c, r, ok ? 200 : 503, &b);
    }
    if (!v) {
        char reason[600];
        snprintf(reason, sizeof reason, "%s", m->reason);
        pthread_mutex_unlock(&s->lock);
        kl_buf_free(&b);
        return send_error(s, c, r, 503, SV_R_NOT_READY, 5, "model '%s' is not ready: %s", r->model_name, reason);
    }
    kl_buf_puts(&b, "{\"name\":");
    kl_buf_json_str(&b, m->name);
    kl_buf_puts(&b, ",\"versions\":[");
    for (int i = 0; i < m->nver; i++) kl_buf_printf(&b, i ? ",\"%lld\"" : "\"%lld\"", (long long)m->ver[i]->version);
    kl_buf_puts(&b, "],\"platform\":\"onnx\",\"inputs\":");
    io_json(&b, v->in, v->n_in);
    kl_buf_puts(&b, ",\"outputs\":");
    io_json(&b, v->out, v->n_out);
    /* dynamic_batching: whether this version's requests are batched (the
     * configuration's, default on, and the version can batch) */
    int batches = sv_version_batches(&m->cfg, v);
    kl_buf_printf(&b,
                  ",\"parameters\":{\"max_batch_size\":%d,\"dynamic_batching\":%s,\"max_queue_delay_us\":%lld,"
                  "\"priority_levels\":%d,\"default_priority\":%d,\"instances\":%d}",
                  m->cfg.max_batch, batches ? "true" : "false", batches ? (long long)m->cfg.max_queue_delay_us : 0LL,
                  m->cfg.levels, m->cfg.default_level + 1, m->cfg.instances);
    if (v->feat) predict_meta(&b, v);
    kl_buf_puts(&b, "}");
    pthread_mutex_unlock(&s->lock);
    return send_json(s, c, r, 200, &b);
}

static enum MHD_Result repo_index(kl_server *s, struct MHD_Connection *c, sv_req *r) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "[");
    int first = 1;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->nmodels; i++) {
        sv_model *m = s->models[i];
        static const char *const st[] = {"READY", "UNAVAILABLE", "UNLOADED"};
        int nref = m->state == SV_M_UNLOADED ? 0 : m->nrefused;
        if (m->nver == 0 && nref == 0) { /* no version to list: the model's state */
            kl_buf_puts(&b, first ? "{\"name\":" : ",{\"name\":");
            kl_buf_json_str(&b, m->name);
            kl_buf_printf(&b, ",\"state\":\"%s\",\"reason\":", st[m->state]);
            kl_buf_json_str(&b, m->reason);
            kl_buf_puts(&b, "}");
            first = 0;
        }
        for (int j = 0; j < m->nver; j++) {
            kl_buf_puts(&b, first ? "{\"name\":" : ",{\"name\":");
            kl_buf_json_str(&b, m->name);
            kl_buf_printf(&b, ",\"version\":\"%lld\",\"state\":\"READY\",\"reason\":\"\"}", (long long)m->ver[j]->version);
            first = 0;
        }
        for (int j = 0; j < nref; j++) { /* refused by the last scan, not serving */
            kl_buf_puts(&b, first ? "{\"name\":" : ",{\"name\":");
            kl_buf_json_str(&b, m->name);
            kl_buf_printf(&b, ",\"version\":\"%lld\",\"state\":\"UNAVAILABLE\",\"reason\":", (long long)m->refused[j].version);
            kl_buf_json_str(&b, m->refused[j].reason);
            kl_buf_puts(&b, "}");
            first = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    kl_buf_puts(&b, "]");
    return send_json(s, c, r, 200, &b);
}

/* load/unload run on their own thread (a load verifies and warms up) while
 * the connection is suspended. */
static void *repo_job(void *arg) {
    sv_req *r = arg;
    kl_server *s = r->srv;
    kl_err e = {0};
    int rc =
        r->route == SV_RT_REPO_LOAD ? kl__sv_repo_scan(s, r->model_name, &e) : kl__sv_repo_unload(s, r->model_name, &e);
    if (!rc) {
        r->resp = strdup("{}");
        r->resp_len = 2;
        r->resp_header_len = -1;
        kl__sv_req_finish(r, 200, SV_R_SUCCESS, NULL);
    } else {
        /* r is not ours after this call */
        kl__sv_req_finish(r, rc == KL_ENOTFOUND ? 404 : 400, rc == KL_ENOTFOUND ? SV_R_NOT_FOUND : SV_R_BAD_REQUEST,
                      kl_err_what(&e));
    }
    return NULL;
}

/* ==================================================================
 * Inference
 * ================================================================== */

/* Sends the answer of r (the scheduler is done with it). */
static enum MHD_Result answer(kl_server *s, struct MHD_Connection *c, sv_req *r) {
    if (r->counted_wait) { r->loop->nwait--; r->counted_wait = 0; }
    if (r->held) { r->loop->nheld--; r->held = 0; }
    if (!r->counted) { r->counted = 1; kl__sv_metrics_request(s, r); }
    if (inference_route(r)) log_request(s, r);
    char *body = r->resp;
    size_t len = r->resp_len;
    r->resp = NULL;
    if (!body) { body = strdup("{}"); len = 2; }
    return send_body(s, c, r, r->status ? r->status : 500, body, len,
                     r->resp_header_len >= 0 ? "application/octet-stream" : "application/json", r->retry_after,
                     r->resp_header_len);
}

/* The scheduler's admission of r at an HTTP stage (before or right after
 * the decode): 0 when admitted; else the refusal is sent and *res is the
 * handler's result. */
static int refused(kl_server *s, struct MHD_Connection *c, sv_req *r, sv_admit_stage stage, enum MHD_Result *res) {
    sv_verdict v;
    r->loop_idle_ns = r->loop ? r->loop->idle_ns : 0;
    pthread_mutex_lock(&s->lock);
    int st = kl__sv_sched_admit(s, r, stage, &v);
    pthread_mutex_unlock(&s->lock);
    if (st) *res = send_error(s, c, r, v.status, v.reason, v.retry_after, "%s", v.msg);
    return st != 0;
}

static enum MHD_Result infer(kl_server *s, struct MHD_Connection *c, sv_req *r) {
    if (atomic_load(&s->draining))
        return send_error(s, c, r, 503, SV_R_SHUTDOWN, 5, "server is shutting down");
    atomic_fetch_add(&s->ninfer, 1);
    r->in_infer = 1;
    pthread_mutex_lock(&s->lock);
    sv_model *m = kl__sv_model_find(s, r->model_name);
    if (!m) {
        pthread_mutex_unlock(&s->lock);
        return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0, "unknown model '%s'", r->model_name);
    }
    r->model = m;
    sv_version *v = kl__sv_pick_version(m, r->want_version);
    if (!v) {
        char reason[600];
        snprintf(reason, sizeof reason, "%s", m->reason);
        int has_any = m->nver > 0;
        pthread_mutex_unlock(&s->lock);
        if (r->want_version >= 0 && has_any)
            return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0, "model '%s' has no version %lld loaded", r->model_name,
                              (long long)r->want_version);
        return send_error(s, c, r, 503, SV_R_NOT_READY, 5, "model '%s' is not ready: %s", r->model_name, reason);
    }
    kl__sv_version_ref(v);
    r->ver = v;
    int levels = m->cfg.levels;
    int quota = m->cfg.memory_quota > 0;
    for (int l = 0; l < levels; l++) quota |= m->cfg.level[l].memory_share < 1;
    pthread_mutex_unlock(&s->lock);

    /* body: JSON, or JSON header + binary tensors */
    size_t json_len = r->body_len;
    const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    if (hl && kl__sv_http_header_len(hl, r->body_len, &json_len))
        return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0,
                          "Inference-Header-Content-Length: '%s' is not a length within the %zu-byte body", hl, r->body_len);
    if (!r->body_len) return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0, "request body: empty (expected a JSON object)");
    int asked = -1;
    enum MHD_Result res;
    const char *ph = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Priority");
    if (ph && kl__sv_priority_parse(ph, &asked))
        return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0, "X-Priority: expected a level 1..%d, high or low, got '%s'",
                          levels, ph);
    int hdr_prio = asked >= 0; /* the header's level wins over the body's */
    if (hdr_prio) {            /* refuse a full or shed level before paying for the JSON decode */
        r->level = kl__sv_priority_level(&m->cfg, asked);
        if (refused(s, c, r, SV_ADMIT_HEADER, &res)) return res;
    }
    kl_err e = {0};
    int rc = r->predict ? kl__sv_decode_predict(r, r->body, r->body_len, &e)
                        : kl__sv_decode_infer(r, r->body, json_len, r->body + json_len, r->body_len - json_len, &e);
    if (rc) {
        if (rc == KL_ENOMEM) return send_error(s, c, r, 503, SV_R_MEMORY, 1, "%s", e.msg);
        if (rc == KL_ERANGE)
            return send_error(s, c, r, 413, SV_R_TOO_LARGE, 0, "%s", e.msg); /* over KL_JSON_MEM_RATIO */
        if (rc == KL_ETIMEOUT) /* the online feature store did not answer (on_store_error: fail) */
            return send_error(s, c, r, 503, SV_R_NOT_READY, 1, "feature store unavailable: %s", e.msg);
        return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0, "%s", e.msg);
    }
    /* the decoded tensors hold the data now (a logged :predict keeps its
     * body: the prediction log takes it, kl__sv_plog_batch) */
    if (!(r->predict && v->plog)) {
        kl_mem_free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
    }
    if (!hdr_prio) { /* the level came with the body (or is the default): its decode is paid, its run is not */
        r->level = kl__sv_priority_level(&m->cfg, r->prio_param);
        if (r->level > 0 && refused(s, c, r, SV_ADMIT_DECODED, &res)) return res;
    }
    if (r->rows == -2 && v->batchable)
        return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0, "inputs: dimension 0 (the batch) differs between inputs");
    if (quota) {
        uint64_t bytes = 0;
        if (kl__sb_plan_bytes(v->sess, r->in, r->n_in, &bytes, &e) == KL_OK) {
            for (size_t i = 0; i < r->n_in; i++) bytes += r->in[i].nbytes;
            r->plan_bytes = bytes ? bytes : 1;
        }
    }
    if (r->loop) { r->loop->nwait++; r->counted_wait = 1; }
    r->inl = kl__sv_sched_can_inline(s, r);
    if (r->inl && s->o.hold_inline >= 0) {
        /* runs on this thread after this round of network events: the
         * connection is not suspended (suspend + resume cost two epoll_ctl
         * calls and a recv that finds nothing); libmicrohttpd calls this
         * handler again each round, which answers once the batch has run */
        r->held = 1;
        r->loop->nheld++;
        kl__sv_sched_submit(s, r);
        if (sv_qstate(r) == SV_Q_DONE) return answer(s, c, r); /* refused at once */
        return MHD_YES;
    }
    MHD_suspend_connection(c);
    r->suspended = 1;
    kl__sv_sched_submit(s, r);
    return MHD_YES;
}

/* sv_transport.deliver: a held request may be answered and freed by its
 * loop as soon as it is marked done, so what the wake-up needs is read
 * before; a held one is sent by its loop's next handler call */
static void deliver(sv_req *r) {
    int held = r->held;
    sv_loop *lp = r->loop;
    __atomic_store_n(&r->qstate, SV_Q_DONE, __ATOMIC_RELEASE);
    if (held) {
        if (lp != sv_cur_loop) sv_loop_wake(lp);
        return;
    }
    req_resume(r);
}

static int on_own_loop(const sv_req *r) { return sv_cur_loop && r->loop == sv_cur_loop; }

static int loop_all_waiting(const sv_loop *lp) { return lp->nwait >= lp->nconn; }

static void req_resume(sv_req *r) {
    if (!r->suspended) return; /* held requests: kl__sv_req_finish wakes their loop */
    /* r may be answered and freed by its loop as soon as it is resumed: read it first */
    sv_loop *lp = r->loop;
    MHD_resume_connection(r->conn);
    /* libmicrohttpd has no thread of its own to wake: the connection's loop
     * is woken, unless this is that loop (its next MHD_run picks it up) */
    if (lp && lp != sv_cur_loop) sv_loop_wake(lp);
    else if (lp) lp->resumed = 1;
}

static void log_request(kl_server *s, sv_req *r) {
    if (!s->o.access_log || !kl_log_enabled(KL_LOG_INFO)) return;
    char shapes[256] = "", ver[24] = "";
    size_t off = 0; /* "[1,784],[1,3]" without printf (a line per request) */
    for (size_t i = 0; i < r->n_in && off < sizeof shapes - 40; i++) {
        if (i) shapes[off++] = ',';
        shapes[off++] = '[';
        for (int d = 0; d < r->in[i].rank && off < sizeof shapes - 24; d++) {
            if (d) shapes[off++] = ',';
            off += (size_t)kl__sv_fmt_i64(shapes + off, r->in[i].dims[d]);
        }
        shapes[off++] = ']';
        shapes[off] = 0;
    }
    if (r->ver) ver[kl__sv_fmt_i64(ver, r->ver->version)] = 0;
    double qms = r->t_start ? (r->t_start - r->t_enq) / 1e6 : r->t_enq ? (kl_time_mono_ns() - r->t_enq) / 1e6 : 0;
    double cms = r->t_start ? (r->t_end - r->t_start) / 1e6 : 0;
    kl_log_field f[] = {KL_LF_STR("request_id", r->has_id ? r->id : r->rid),
                        KL_LF_STR("model", r->model_name),
                        (kl_log_field){"version", ver, 0, 0},
                        KL_LF_INT("priority", r->level + 1),
                        (kl_log_field){"input_shapes", shapes, 0, 0},
                        KL_LF_INT("batch_size", r->batch_size),
                        KL_LF_NUM("queue_ms", qms),
                        KL_LF_NUM("compute_ms", cms),
                        KL_LF_NUM("total_ms", (kl_time_mono_ns() - r->t_recv) / 1e6),
                        KL_LF_INT("status", r->status),
                        KL_LF_STR("result", kl__sv_reason_name(r->reason))};
    kl_log_level lvl = r->status >= 500 && r->reason == SV_R_INTERNAL ? KL_LOG_ERROR : KL_LOG_INFO;
    sv_loop *lp = sv_cur_loop;
    if (!lp || !kl_log_enabled(lvl)) { kl_log_fields(lvl, "serve", "request", f, KL_ARRAY_LEN(f)); return; }
    /* on an HTTP loop: buffered, written a round of requests at a time (a
     * write per request, and the terminal check of the log format per
     * line, cost ~10 us of CPU per request) */
    if (!lp->log.len) {
        lp->log_since = kl_time_mono_ns();
        lp->log_fmt = (int)kl_log_get_format();
    }
    kl_log_format_line(&lp->log, (kl_log_format)lp->log_fmt, lvl, "serve", "request", f, KL_ARRAY_LEN(f));
    if (lp->log.len >= SV_LOG_FLUSH_BYTES || lp->log.failed) loop_log_flush(lp);
}

static void loop_log_flush(sv_loop *lp) {
    if (lp->log.len) kl_log_write_lines(lp->log.data, lp->log.len);
    if (lp->log.failed) kl_buf_free(&lp->log);
    else kl_buf_reset(&lp->log);
}

/* ==================================================================
 * Slow-client guard
 *
 * libmicrohttpd's connection timeout is an idle timeout: every byte resets
 * it, so a client trickling one byte a second holds a connection forever.
 * Each connection is tracked here from accept to close with its state
 * (new, idle between requests, receiving the head, receiving the body,
 * busy) and when the state began; a guard thread cuts (shutdown(2), then
 * libmicrohttpd closes it) a connection whose request line and headers take
 * longer than --header-timeout (a new connection's first request included),
 * whose body falls below --min-body-rate bytes/s on average after that
 * grace, or that trickles a request line for longer than --conn-timeout.
 * Requests in the scheduler (busy) are never cut.
 * ================================================================== */

static sv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Called by the connection's HTTP thread only. */
static void conn_state(sv_conn *sc, int st) {
    if (!sc || atomic_load_explicit(&sc->state, memory_order_relaxed) == SV_C_CUT) return;
    atomic_store_explicit(&sc->since, kl_time_mono_ns(), memory_order_relaxed);
    atomic_store_explicit(&sc->bytes, 0, memory_order_relaxed);
    atomic_store_explicit(&sc->state, st, memory_order_release);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    kl_server *s = cls;
    sv_conn *sc = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(sc = calloc(1, sizeof *sc))) return; /* untracked: only the idle timeout applies */
        sc->fd = ci->connect_fd;
        atomic_init(&sc->state, SV_C_NEW);
        atomic_init(&sc->since, kl_time_mono_ns());
        atomic_init(&sc->bytes, 0);
        if (sv_cur_loop) { sv_cur_loop->nconn++; if (s->lfd < 0) atomic_fetch_add(&sv_cur_loop->load, 1); }
        pthread_mutex_lock(&s->conn_lock);
        sc->next = s->conns;
        if (s->conns) s->conns->prev = sc;
        s->conns = sc;
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = sc;
        return;
    }
    if (!sc) return;
    if (sv_cur_loop) { sv_cur_loop->nconn--; atomic_fetch_sub(&sv_cur_loop->load, 1); }
    /* unlinked before libmicrohttpd closes the socket: the guard never shuts a reused fd */
    pthread_mutex_lock(&s->conn_lock);
    if (sc->prev) sc->prev->next = sc->next;
    else s->conns = sc->next;
    if (sc->next) sc->next->prev = sc->prev;
    pthread_mutex_unlock(&s->conn_lock);
    *socket_context = NULL;
    free(sc);
}

/* The request line has arrived: the headers' deadline starts. The raw
 * target is checked here, before libmicrohttpd percent-decodes it (a %00
 * would cut the path the handler sees). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    sv_conn *sc = conn_of(c);
    conn_state(sc, SV_C_HEAD);
    if (sc) sc->bad_uri = kl__sv_http_check_uri(uri, sc->bad_uri_why, sizeof sc->bad_uri_why) != KL_OK;
    return NULL;
}

/* ==================================================================
 * Request headers: what libmicrohttpd parsed, checked by
 * kl__sv_http_check_headers (http_parse.c)
 * ================================================================== */

typedef struct {
    sv_http_hdr h[SV_HTTP_MAX_HEADERS + 1];
    size_t n;
} hdr_list;

/* Whether header (k, v) came from an obs-fold continuation line.
 * libmicrohttpd 0.9.7x parses the head in place: a value begins right
 * after its name's NUL (where the colon was) and the blanks after it, and
 * it appends a continuation line to the *name*, which moves the name
 * elsewhere in the connection's pool: the value is then not where the name
 * ends (checked by the integration test serve_smuggling.py). */
static int hdr_folded(const char *k, const char *v) {
#if MHD_VERSION <= 0x00097600
    const char *e = k + strlen(k) + 1;
    if (!v || v < e || v - e > 4096) return v != NULL;
    for (const char *q = e; q < v; q++)
        if (*q != ' ' && *q != '\t') return 1;
#else
    (void)k;
    (void)v;
#endif
    return 0;
}

static enum MHD_Result collect_hdr(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    hdr_list *l = cls;
    (void)kind;
    if (l->n < KL_ARRAY_LEN(l->h)) l->h[l->n++] = (sv_http_hdr){key, value, hdr_folded(key, value)};
    return MHD_YES;
}

/* At the first call of a request: its target and headers break a rule
 * (why says which). Such a request is answered 400 with Connection: close:
 * what follows on the connection is never read as a request. */
static int request_bad(struct MHD_Connection *c, sv_req *r, char *why, size_t n) {
    if (r->sc && r->sc->bad_uri) {
        snprintf(why, n, "%s", r->sc->bad_uri_why);
        return 1;
    }
    if (r->route == SV_RT_BAD_TARGET) {
        snprintf(why, n, "request target: a control character after percent-decoding");
        return 1;
    }
    hdr_list l; /* (6 KiB of the loop thread's stack) */
    l.n = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_hdr, &l);
    return kl__sv_http_check_headers(l.h, l.n, why, n) != KL_OK;
}

static void *guard_main(void *arg) {
    kl_server *s = arg;
    int64_t head_ns = (int64_t)(s->o.header_timeout_s * 1e9), idle_ns = (int64_t)s->o.conn_timeout_s * 1000000000LL;
    double rate = s->o.min_body_rate;
    pthread_mutex_lock(&s->conn_lock);
    while (!s->guard_stop) {
        int64_t now = kl_time_mono_ns();
        for (sv_conn *c = s->conns; c; c = c->next) {
            int st = atomic_load_explicit(&c->state, memory_order_acquire);
            int64_t age = now - atomic_load_explicit(&c->since, memory_order_relaxed);
            int64_t got = atomic_load_explicit(&c->bytes, memory_order_relaxed);
            int body = 0;
            if (st == SV_C_NEW || st == SV_C_HEAD) {
                if (age <= head_ns) continue;
            } else if (st == SV_C_IDLE) {
                if (age <= idle_ns) continue;
            } else if (st == SV_C_BODY && rate > 0) {
                if (age <= head_ns + (int64_t)((double)got / rate * 1e9)) continue;
                body = 1;
            } else {
                continue;
            }
            if (!atomic_compare_exchange_strong(&c->state, &st, SV_C_CUT)) continue; /* it moved on meanwhile */
            shutdown(c->fd, SHUT_RDWR);
            atomic_fetch_add(body ? &s->cut_body : &s->cut_head, 1);
            if (body)
                kl_log(KL_LOG_WARN, "serve", "slow client: connection cut after %.1f s with %lld body bytes (below %.0f bytes/s)",
                       age / 1e9, (long long)got, rate);
            else
                kl_log(KL_LOG_WARN, "serve", "slow client: connection cut, request %s not complete after %.1f s",
                       st == SV_C_IDLE ? "line" : "headers", age / 1e9);
        }
        struct timespec ts;
        int64_t w = kl_time_mono_ns() + 200000000; /* 200 ms */
        ts.tv_sec = (time_t)(w / 1000000000);
        ts.tv_nsec = (long)(w % 1000000000);
        pthread_cond_timedwait(&s->gcond, &s->conn_lock, &ts);
    }
    pthread_mutex_unlock(&s->conn_lock);
    return NULL;
}

/* ==================================================================
 * The access handler
 * ================================================================== */

/* A request refused before its body is read (over --max-body, or no memory
 * for it): the body is read and dropped, then the answer goes out, so that
 * the client, still sending, reads it (closing a socket with unread data
 * makes the kernel send a reset, and the client loses the answer). */
static void refuse(sv_req *r, int status, int reason, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void refuse(sv_req *r, int status, int reason, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->refuse_msg, sizeof r->refuse_msg, fmt, ap);
    va_end(ap);
    r->refuse = status;
    r->refuse_reason = reason;
    kl_mem_free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
}

static enum MHD_Result drop_upload(sv_req *r, size_t *upload_size) {
    r->dropped += *upload_size;
    *upload_size = 0;
    if (r->sc) atomic_store_explicit(&r->sc->bytes, (int64_t)r->dropped, memory_order_relaxed); /* the slow-body guard */
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    kl_server *s = cls;
    sv_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = c;
        r->loop = sv_cur_loop;
        r->t_recv = kl_time_mono_ns();
        r->timeout_us = -1;
        r->prio_param = -1;
        r->resp_header_len = -1;
        r->rid[0] = 'r';
        r->rid[1 + kl__sv_fmt_u64(r->rid + 1, atomic_fetch_add(&s->next_rid, 1))] = 0;
        r->route = kl__sv_route(url, method, r);
        r->sc = conn_of(c);
        conn_state(r->sc, SV_C_BODY); /* the headers are in */
        atomic_fetch_add(&s->nlive, 1);
        *con_cls = r;
        char why[200];
        if (request_bad(c, r, why, sizeof why)) {
            r->close = 1;
            return send_error(s, c, r, 400, SV_R_BAD_REQUEST, 0, "%s", why);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        int64_t n;
        if (cl && !kl_parse_int64(cl, &n) && n > 0) {
            if ((uint64_t)n > s->o.max_body) {
                r->too_large = 1;
                if ((uint64_t)n > SV_DISCARD_MAX) { /* not worth reading: answered now, the connection closed */
                    r->close = 1;
                    return send_error(s, c, r, 413, SV_R_TOO_LARGE, 0, "request body of %lld bytes is over the limit of %llu",
                                      (long long)n, (unsigned long long)s->o.max_body);
                }
                refuse(r, 413, SV_R_TOO_LARGE, "request body of %lld bytes is over the limit of %llu", (long long)n,
                       (unsigned long long)s->o.max_body);
                return MHD_YES;
            }
            kl_err me = {0};
            r->body = kl_mem_alloc_e((size_t)n + 1, KL_TAG_REQUEST, &me);
            if (!r->body) {
                refuse(r, 503, SV_R_MEMORY, "no memory for a %lld-byte body (%s)", (long long)n, kl_err_what(&me));
                return MHD_YES;
            }
            r->body_cap = (size_t)n + 1;
        }
        return MHD_YES;
    }
    int q = sv_qstate(r);
    if (q == SV_Q_DONE) return answer(s, c, r); /* resumed, or a held request's batch has run */
    if (q != SV_Q_NEW) return MHD_YES;           /* held, still in the scheduler */
    if (*upload_size) {
        if (r->too_large || r->refuse) return drop_upload(r, upload_size);
        size_t need = r->body_len + *upload_size;
        if (need > s->o.max_body) {
            r->too_large = 1;
            return drop_upload(r, upload_size);
        }
        if (need + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap * 2 : 16384;
            while (cap < need + 1) cap *= 2;
            if (cap > s->o.max_body + 1) cap = s->o.max_body + 1;
            char *nb = kl_mem_realloc(r->body, cap, KL_TAG_REQUEST);
            if (!nb) {
                refuse(r, 503, SV_R_MEMORY, "no memory for a body of more than %zu bytes", r->body_len);
                return drop_upload(r, upload_size);
            }
            r->body = nb;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload, *upload_size);
        r->body_len += *upload_size;
        r->body[r->body_len] = 0;
        *upload_size = 0;
        if (r->sc) atomic_store_explicit(&r->sc->bytes, (int64_t)r->body_len, memory_order_relaxed);
        return MHD_YES;
    }
    conn_state(r->sc, SV_C_BUSY); /* the whole request is in */
    if (r->refuse) return send_error(s, c, r, r->refuse, r->refuse_reason, 0, "%s", r->refuse_msg);
    if (r->too_large)
        return send_error(s, c, r, 413, SV_R_TOO_LARGE, 0, "request body is over the limit of %llu bytes",
                          (unsigned long long)s->o.max_body);
    if (r->route == SV_RT_NOT_FOUND) return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0, "no such endpoint: %s %s", method, url);
    if (!r->method_ok) {
        return send_error(s, c, r, 405, SV_R_BAD_REQUEST, 0, "method %s is not allowed on %s", method, url);
    }
    kl_buf b;
    kl_buf_init(&b);
    switch (r->route) {
    case SV_RT_LIVE:
        kl_buf_puts(&b, "{\"live\":true}");
        return send_json(s, c, r, 200, &b);
    case SV_RT_READY: {
        char why[800];
        int ok = kl__sv_ready(s, why, sizeof why);
        kl_buf_printf(&b, "{\"ready\":%s", ok ? "true" : "false");
        if (!ok) { kl_buf_puts(&b, ",\"reason\":"); kl_buf_json_str(&b, why); }
        kl_buf_puts(&b, "}");
        if (ok) return send_json(s, c, r, 200, &b);
        size_t len = b.len;
        return send_body(s, c, r, 503, kl_buf_take(&b), len, "application/json", 1, -1);
    }
    case SV_RT_SERVER:
        kl_buf_puts(&b, "{\"name\":\"keel\",\"version\":\"2\",\"extensions\":[\"binary_tensor_data\",\"model_repository\","
                        "\"priorities\",\"dynamic_batching\",\"metrics\"]}");
        return send_json(s, c, r, 200, &b);
    case SV_RT_METRICS: {
        size_t len;
        char *body = kl__sv_metrics_render(s, &len);
        return send_body(s, c, r, 200, body, len, "text/plain; version=0.0.4; charset=utf-8", 0, -1);
    }
    case SV_RT_MONITOR: {
        int st = kl__sv_monitor_json(s, r->model_name, r->want_version, &b);
        return send_json(s, c, r, st, &b);
    }
    case SV_RT_FEEDBACK: {
        int st = kl__sv_monitor_feedback(s, r->model_name, r->want_version, r->body, r->body_len, &b);
        return send_json(s, c, r, st, &b);
    }
    case SV_RT_MODEL_META: return model_meta(s, c, r, 0);
    case SV_RT_MODEL_READY: return model_meta(s, c, r, 1);
    case SV_RT_REPO_INDEX: return repo_index(s, c, r);
    case SV_RT_REPO_LOAD:
    case SV_RT_REPO_UNLOAD: {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        MHD_suspend_connection(c);
        r->suspended = 1;
        if (pthread_create(&t, &at, repo_job, r)) {
            pthread_attr_destroy(&at);
            kl__sv_req_finish(r, 500, SV_R_INTERNAL, "could not start the repository job");
            return MHD_YES;
        }
        pthread_attr_destroy(&at);
        return MHD_YES;
    }
    case SV_RT_PREDICT: r->predict = 1; r->want_version = -1; return infer(s, c, r); /* latest version */
    case SV_RT_INFER: return infer(s, c, r);
    case SV_RT_EVENTS: return events(s, c, r);
    default: return send_error(s, c, r, 404, SV_R_NOT_FOUND, 0, "no such endpoint: %s %s", method, url);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    kl_server *s = cls;
    sv_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    conn_state(conn_of(c), SV_C_IDLE); /* keep-alive: waiting for the next request */
    if (r->held) { /* the client went away while its request was held: out of the queue first */
        kl__sv_sched_cancel(s, r);
        r->loop->nheld--;
    }
    int q = sv_qstate(r);
    if (q == SV_Q_QUEUED || q == SV_Q_RUNNING) {
        /* cannot happen: a suspended connection is not terminated before it
         * is resumed, a held one runs on this thread outside libmicrohttpd */
        kl_log(KL_LOG_ERROR, "serve", "request %s completed while in the scheduler", r->rid);
    }
    if (r->counted_wait) r->loop->nwait--; /* answered without the last handler call (client gone) */
    for (size_t i = 0; i < SV_MAX_IO; i++) /* (the empty ones need no clearing: r is freed) */
        if (r->in[i].data || r->in[i].release) kl__sv_tensor_release(&r->in[i]);
    if (r->ver) kl__sv_version_unref(r->ver);
    int r_in_infer = r->in_infer;
    kl_mem_free(r->body);
    free(r->resp);
    free(r);
    if (r_in_infer) atomic_fetch_sub(&s->ninfer, 1);
    atomic_fetch_sub(&s->nlive, 1);
    if (atomic_load(&s->draining)) { /* the drain waits for these */
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->dcond);
        pthread_mutex_unlock(&s->lock);
    }
}

/* ==================================================================
 * Daemon
 * ================================================================== */

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    kl_log(KL_LOG_DEBUG, "serve", "microhttpd: %s", msg);
}

static void sv_loop_wake(sv_loop *lp) {
    uint64_t one = 1;
    if (lp->wake_fd >= 0 && write(lp->wake_fd, &one, sizeof one) < 0) { /* full counter: a wake-up is pending */ }
}

/* ==================================================================
 * Balanced accept (several loops)
 * ================================================================== */

/* On loop lp's thread: the connections other loops accepted for it. */
static void take_handed(sv_loop *lp) {
    if (!atomic_load_explicit(&lp->naq, memory_order_acquire)) return;
    int fd[64];
    struct sockaddr_storage addr[64];
    socklen_t len[64];
    pthread_mutex_lock(&lp->aq_lock);
    int n = atomic_load(&lp->naq);
    memcpy(fd, lp->aq_fd, (size_t)n * sizeof *fd);
    memcpy(addr, lp->aq_addr, (size_t)n * sizeof *addr);
    memcpy(len, lp->aq_len, (size_t)n * sizeof *len);
    atomic_store(&lp->naq, 0);
    pthread_mutex_unlock(&lp->aq_lock);
    for (int i = 0; i < n; i++) {
        /* counted in load when handed; on_connection counts nconn */
        if (MHD_add_connection(lp->d, fd[i], (const struct sockaddr *)&addr[i], len[i]) != MHD_YES) /* closed by it */
            atomic_fetch_sub(&lp->load, 1);
    }
}

/* On loop lp's thread: accepts what is pending on keel's listening socket
 * and gives each connection to the loop with the fewest (this one on a tie). */
static void accept_new(kl_server *s, sv_loop *lp) {
    lp->last_accept_ns = kl_time_mono_ns();
    for (int k = 0; k < 64 && !atomic_load(&s->lfd_off); k++) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd = accept4(s->lfd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN (another loop took it), or an error libmicrohttpd would also just skip */
        sv_loop *to = lp;
        int best = atomic_load(&lp->load);
        for (int i = 0; i < s->nloops; i++) {
            int l = atomic_load(&s->loops[i].load);
            if (l < best) { best = l; to = &s->loops[i]; }
        }
        atomic_fetch_add(&to->load, 1);
        if (to == lp) {
            if (MHD_add_connection(lp->d, fd, (const struct sockaddr *)&addr, len) != MHD_YES) atomic_fetch_sub(&lp->load, 1);
            continue;
        }
        pthread_mutex_lock(&to->aq_lock);
        int n = atomic_load(&to->naq);
        if (n < (int)KL_ARRAY_LEN(to->aq_fd)) {
            to->aq_fd[n] = fd;
            to->aq_addr[n] = addr;
            to->aq_len[n] = len;
            atomic_store_explicit(&to->naq, n + 1, memory_order_release);
        }
        pthread_mutex_unlock(&to->aq_lock);
        if (n < (int)KL_ARRAY_LEN(to->aq_fd)) {
            sv_loop_wake(to);
        } else { /* its hand-over queue is full: this loop serves it */
            atomic_fetch_sub(&to->load, 1);
            atomic_fetch_add(&lp->load, 1);
            if (MHD_add_connection(lp->d, fd, (const struct sockaddr *)&addr, len) != MHD_YES) atomic_fetch_sub(&lp->load, 1);
        }
    }
}

/* An HTTP loop: libmicrohttpd's epoll set and the loop's eventfd are polled
 * here (libmicrohttpd runs without threads of its own); after libmicrohttpd
 * has handled a round of events (requests decoded and queued, resumed
 * connections answered), the queued batches of this loop's requests to
 * inline models run on this thread and their connections are resumed; the
 * loop then goes straight back to libmicrohttpd to send the answers. */
static void *loop_main(void *arg) {
    sv_loop *lp = arg;
    kl_server *s = lp->s;
    sv_cur_loop = lp;
    lp->idle_ns = kl_time_mono_ns();
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(lp->d, MHD_DAEMON_INFO_EPOLL_FD);
    int mfd = di ? di->epoll_fd : -1;
    while (!atomic_load(&lp->stop)) {
        lp->resumed = 0;
        if (s->lfd >= 0) take_handed(lp);
        MHD_run(lp->d);
        if (atomic_load(&lp->quiesce_req) == 1) { /* the listening socket is closed on this thread */
            MHD_socket ls = MHD_quiesce_daemon(lp->d);
            if (ls != MHD_INVALID_SOCKET) close(ls);
            pthread_mutex_lock(&s->lock);
            atomic_store(&lp->quiesce_req, 2);
            pthread_cond_broadcast(&s->dcond);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        int64_t due = 0;
        /* answers to send (run here, or refused while libmicrohttpd ran): no waiting */
        if (kl__sv_sched_inline(s, lp, &due) > 0 || lp->resumed) {
            int64_t now = kl_time_mono_ns();
            if (lp->log.len && now - lp->log_since >= SV_LOG_FLUSH_NS) loop_log_flush(lp);
            /* a loop that never sleeps still takes new connections (every
             * 20 ms: an accept4 that finds nothing costs ~1 % of the CPU
             * at every 5 ms under the MLP bench's load) */
            if (s->lfd >= 0 && now - lp->last_accept_ns > 20000000 && !atomic_load(&s->lfd_off)) accept_new(s, lp);
            continue;
        }
        int64_t now = kl_time_mono_ns(), wait_ns = 1000000000LL;
        lp->idle_ns = now; /* a round with nothing to do: the loop is not saturated */
        if (lp->log.len && now - lp->log_since >= SV_LOG_FLUSH_NS) loop_log_flush(lp);
        MHD_UNSIGNED_LONG_LONG to;
        /* held requests keep libmicrohttpd's timeout at 0 (it calls their
         * handler each round): while their batch waits for its delay the
         * loop sleeps until then, or until the network or a wake-up */
        if (!(lp->nheld > 0 && due) && MHD_get_timeout(lp->d, &to) == MHD_YES && (int64_t)to * 1000000 < wait_ns)
            wait_ns = (int64_t)to * 1000000;
        if (due && due - now < wait_ns) wait_ns = due > now ? due - now : 0;
        /* buffered lines go out once the oldest is SV_LOG_FLUSH_NS old: a
         * sleeping loop wakes for them, so that a few ms of requests take
         * one write (a write each time the loop slept cost ~1 us a request) */
        if (lp->log.len && lp->log_since + SV_LOG_FLUSH_NS - now < wait_ns)
            wait_ns = lp->log_since + SV_LOG_FLUSH_NS > now ? lp->log_since + SV_LOG_FLUSH_NS - now : 0;
        int lon = s->lfd >= 0 && !atomic_load(&s->lfd_off);
        struct pollfd pf[3] = {{mfd, POLLIN, 0}, {lp->wake_fd, POLLIN, 0}, {lon ? s->lfd : -1, POLLIN, 0}};
        struct timespec ts = {(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
        int pr = ppoll(pf, 3, &ts, NULL);
        lp->idle_ns = kl_time_mono_ns(); /* slept until now: not saturated */
        if (pr > 0) {
            if (pf[1].revents & POLLIN) {
                uint64_t v;
                if (read(lp->wake_fd, &v, sizeof v) < 0) { /* EAGAIN: nothing left */ }
            }
            if (lon && (pf[2].revents & POLLIN)) accept_new(s, lp);
        }
    }
    loop_log_flush(lp);
    return NULL;
}

/* Starts loop lp's daemon on addr (port 0: a free one, then all loops share it). */
static int loop_daemon(kl_server *s, sv_loop *lp, const struct sockaddr *addr, int ipv6, kl_err *e) {
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    if (ipv6) flags |= MHD_USE_IPv6;
    if (s->lfd >= 0) flags |= MHD_USE_NO_LISTEN_SOCKET; /* keel accepts (accept_new) */
    struct MHD_OptionItem ops[] = {
        {s->lfd >= 0 ? MHD_OPTION_LISTENING_ADDRESS_REUSE : MHD_OPTION_SOCK_ADDR, 0, (void *)addr},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, s},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, s},
        {MHD_OPTION_CONNECTION_TIMEOUT, s->o.conn_timeout_s, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, 4096, NULL},
        {MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL},
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
        {MHD_OPTION_END, 0, NULL}};
    lp->s = s;
    pthread_mutex_init(&lp->aq_lock, NULL);
    lp->aq_init = 1;
    lp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (lp->wake_fd < 0) return kl_err_set(e, -errno, "eventfd: %s", strerror(errno));
    lp->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
    if (!lp->d) return kl_err_set(e, KL_EBUSY, "cannot listen on %s:%d (in use, or not an address of this machine)", s->host,
                                  s->o.port);
    atomic_store(&lp->stop, 0);
    atomic_store(&lp->quiesce_req, 0);
    return KL_OK;
}

int kl__sv_http_loops(const kl_serve_opts *o) {
    int n = o->http_threads > 0 ? o->http_threads : kl_threads_default();
    return n < 1 ? 1 : n > SV_MAX_LOOPS ? SV_MAX_LOOPS : n;
}

static int http_start(kl_server *s, kl_err *e) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int grc = getaddrinfo(s->host, port, &hints, &ai);
    if (grc || !ai) return kl_err_set(e, KL_EINVAL, "--host %s: %s", s->host, gai_strerror(grc));
    int n = kl__sv_http_loops(&s->o), rc = KL_OK;
    s->loops = calloc((size_t)n, sizeof *s->loops);
    if (!s->loops) { freeaddrinfo(ai); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    for (int i = 0; i < n; i++) s->loops[i].wake_fd = -1;
    s->nloops = n;
    struct sockaddr_storage addr;
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    socklen_t alen = ai->ai_addrlen;
    int ipv6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    s->lfd = -1;
    atomic_store(&s->lfd_off, 0);
    if (n > 1) { /* keel listens and balances the loops (accept_new) */
        int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
            (ipv6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one)) ||
            bind(fd, (struct sockaddr *)&addr, alen) || listen(fd, 1024)) {
            int err = errno;
            if (fd >= 0) close(fd);
            rc = kl_err_set(e, KL_EBUSY, "cannot listen on %s:%d: %s", s->host, s->o.port, strerror(err));
        } else {
            struct sockaddr_storage got;
            socklen_t gl = sizeof got;
            s->lfd = fd;
            s->port = s->o.port;
            if (!getsockname(fd, (struct sockaddr *)&got, &gl))
                s->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                          : ((struct sockaddr_in *)&got)->sin_port);
        }
    }
    for (int i = 0; i < n && !rc; i++) {
        rc = loop_daemon(s, &s->loops[i], (struct sockaddr *)&addr, ipv6, e);
        if (!rc && i == 0 && s->lfd < 0) { /* the port libmicrohttpd got */
            const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->loops[0].d, MHD_DAEMON_INFO_BIND_PORT);
            s->port = info ? info->port : s->o.port;
        }
    }
    s->inline_ns = s->o.inline_us < 0 ? 0 : (s->o.inline_us ? s->o.inline_us : 500) * 1000;
    for (int i = 0; i < n && !rc; i++) {
        int prc = pthread_create(&s->loops[i].t, NULL, loop_main, &s->loops[i]);
        if (prc) rc = kl_err_set(e, -prc, "starting HTTP loop %d: %s", i, strerror(prc));
        else s->loops[i].have_thread = 1;
    }
    if (!rc) {
        s->guard_stop = 0;
        int prc = pthread_create(&s->guard, NULL, guard_main, s);
        if (prc) rc = kl_err_set(e, -prc, "starting the slow-client guard: %s", strerror(prc));
        else s->have_guard = 1;
    }
    if (rc) http_stop(s);
    return rc;
}

/* Stops accepting connections; each loop closes its listening socket on its own thread. */
static void http_quiesce(kl_server *s) {
    if (s->lfd >= 0 && !atomic_exchange(&s->lfd_off, 1)) {
        /* the loops stop polling it; it stops listening (closed at stop, after the loops) */
        for (int i = 0; i < s->nloops; i++) sv_loop_wake(&s->loops[i]);
        shutdown(s->lfd, SHUT_RDWR);
    }
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->nloops; i++) {
        sv_loop *lp = &s->loops[i];
        if (!lp->have_thread) continue;
        atomic_store(&lp->quiesce_req, 1);
        sv_loop_wake(lp);
        int64_t until = kl_time_mono_ns() + 2000000000LL;
        while (atomic_load(&lp->quiesce_req) != 2 && kl_time_mono_ns() < until) {
            struct timespec ts;
            int64_t w = kl_time_mono_ns() + 10000000;
            ts.tv_sec = (time_t)(w / 1000000000);
            ts.tv_nsec = (long)(w % 1000000000);
            pthread_cond_timedwait(&s->dcond, &s->lock, &ts);
        }
    }
    pthread_mutex_unlock(&s->lock);
}

static void http_stop(kl_server *s) {
    if (s->have_guard) {
        pthread_mutex_lock(&s->conn_lock);
        s->guard_stop = 1;
        pthread_cond_signal(&s->gcond);
        pthread_mutex_unlock(&s->conn_lock);
        pthread_join(s->guard, NULL);
        s->have_guard = 0;
    }
    for (int i = 0; i < s->nloops; i++) {
        sv_loop *lp = &s->loops[i];
        if (lp->have_thread) {
            atomic_store(&lp->stop, 1);
            sv_loop_wake(lp);
            pthread_join(lp->t, NULL);
            lp->have_thread = 0;
        }
    }
    s->inline_ns = 0;
    for (int i = 0; i < s->nloops; i++) {
        sv_loop *lp = &s->loops[i];
        if (lp->d) MHD_stop_daemon(lp->d); /* may answer (and log) requests still open */
        loop_log_flush(lp);
        kl_buf_free(&lp->log);
        if (lp->wake_fd >= 0) close(lp->wake_fd);
        if (lp->aq_init) {
            for (int k = 0; k < atomic_load(&lp->naq); k++) close(lp->aq_fd[k]); /* handed, never added */
            pthread_mutex_destroy(&lp->aq_lock);
        }
    }
    free(s->loops);
    s->loops = NULL;
    s->nloops = 0;
    if (s->lfd >= 0) close(s->lfd);
    s->lfd = -1;
}

/* ==================================================================
 * Server life cycle
 * ================================================================== */

int kl_server_new(const kl_serve_opts *o, kl_server **out, kl_err *e) {
    *out = NULL;
    if (!o || !o->repo) return kl_err_set(e, KL_EINVAL, "no model repository given");
    if (!kl_path_exists(o->repo)) return kl_err_set(e, KL_ENOTFOUND, "model repository %s does not exist", o->repo);
    kl_server *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->lfd = -1;
    s->o = *o;
    snprintf(s->repo, sizeof s->repo, "%s", o->repo);
    snprintf(s->host, sizeof s->host, "%s", o->host ? o->host : "127.0.0.1");
    snprintf(s->snapdir, sizeof s->snapdir, "%s", o->snapshot_dir ? o->snapshot_dir : kl_settings_get()->tmpdir);
    if (!s->o.max_body) s->o.max_body = 64u << 20;
    if (s->o.exit_timeout_s <= 0) s->o.exit_timeout_s = 30;
    if (s->o.probe_interval_s <= 0) s->o.probe_interval_s = 10;
    if (s->o.conn_timeout_s <= 0) s->o.conn_timeout_s = 30;
    if (s->o.header_timeout_s <= 0) s->o.header_timeout_s = 10;
    if (s->o.min_body_rate == 0) s->o.min_body_rate = 1024;
    s->budget = o->memory_budget ? o->memory_budget : kl_mem_get_budget();
    if (!s->budget) s->budget = (uint64_t)(kl_mem_physical_bytes() * 0.8);
    s->t_start_ns = kl_time_mono_ns();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->scan_lock, NULL);
    pthread_mutex_init(&s->mx, NULL);
    pthread_cond_init(&s->qcond, &ca);
    pthread_cond_init(&s->dcond, &ca);
    pthread_cond_init(&s->rcond, &ca);
    pthread_cond_init(&s->pcond, &ca);
    pthread_mutex_init(&s->conn_lock, NULL);
    pthread_cond_init(&s->gcond, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&s->draining, 0);
    atomic_init(&s->next_rid, 1);
    if (!kl__sb_available())
        kl_log(KL_LOG_WARN, "serve", "this build has no ONNX runtime: models will be listed as unavailable");
    /* before the scan: versions get their layouts */
    int prc = o->log_predictions ? kl__sv_plog_open(&s->o, &s->plog, e) : KL_OK;
    if (prc) {
        kl_server_free(s);
        return prc;
    }
    kl_err se = {0};
    if (kl__sv_repo_scan(s, NULL, &se) && se.code != KL_OK) {
        if (!s->nmodels && (se.code == KL_ENOTFOUND || se.code < 0) && !kl_path_exists(s->repo)) {
            kl_server_free(s);
            if (e) *e = se;
            return se.code;
        }
        /* per-model failures are logged and listed; the server still starts */
    }
    *out = s;
    return KL_OK;
}

int kl_server_start(kl_server *s, kl_err *e) {
    s->io = (sv_transport){deliver, on_own_loop, loop_all_waiting};
    int rc = kl__sv_sched_start(s, e);
    if (rc) return rc;
    rc = http_start(s, e);
    if (rc) { kl__sv_sched_stop(s); return rc; }
    s->started = 1;
    kl_log(KL_LOG_INFO, "serve", "%d HTTP loop(s), %d inference worker(s), access log %s", s->nloops, s->nworkers,
           s->o.access_log ? "on" : "off");
    return KL_OK;
}

int kl_server_port(const kl_server *s) { return s->port; }

int kl_server_rescan(kl_server *s, kl_err *e) {
    kl_log(KL_LOG_INFO, "serve", "rescanning repository %s", s->repo);
    return kl__sv_repo_scan(s, NULL, e);
}

int kl_server_shutdown(kl_server *s, kl_err *e) {
    if (!s->started) return KL_OK;
    atomic_store(&s->draining, 1);
    int64_t t0 = kl_time_mono_ns(), deadline = t0 + (int64_t)(s->o.exit_timeout_s * 1e9);
    int rc = KL_OK;
    pthread_mutex_lock(&s->lock);
    kl_log(KL_LOG_INFO, "serve", "shutting down: %d queued, %d running batch(es); draining up to %.0f s", s->nqueued,
           s->nrunning, s->o.exit_timeout_s);
    while ((s->nqueued || s->nrunning || atomic_load(&s->ninfer) > 0) && kl_time_mono_ns() < deadline) {
        struct timespec ts;
        int64_t w = kl_time_mono_ns() + 50000000;
        ts.tv_sec = (time_t)(w / 1000000000);
        ts.tv_nsec = (long)(w % 1000000000);
        pthread_cond_timedwait(&s->dcond, &s->lock, &ts);
    }
    if (s->nqueued || s->nrunning) {
        rc = kl_err_set(e, KL_ETIMEOUT, "exit timeout: %d request(s) still queued, %d batch(es) running", s->nqueued,
                        s->nrunning);
        kl__sv_sched_flush(s, "server is shutting down (exit timeout reached before this request ran)");
    }
    pthread_mutex_unlock(&s->lock);
    kl__sv_sched_stop(s); /* running batches finish */
    /* stop accepting connections; requests already on open connections (even
     * half uploaded) are answered (503) before the daemon stops: wait until no
     * request has been in progress for 100 ms (at most 3 s) */
    http_quiesce(s);
    pthread_mutex_lock(&s->lock);
    int64_t grace = kl_time_mono_ns() + 3000000000LL, idle_since = 0;
    for (;;) {
        int64_t now = kl_time_mono_ns();
        if (now >= grace) break;
        if (atomic_load(&s->nlive) > 0) idle_since = 0;
        else if (!idle_since) idle_since = now;
        else if (now - idle_since >= 100000000LL) break;
        struct timespec ts;
        int64_t w = now + 10000000;
        ts.tv_sec = (time_t)(w / 1000000000);
        ts.tv_nsec = (long)(w % 1000000000);
        pthread_cond_timedwait(&s->dcond, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
    http_stop(s);
    s->started = 0;
    /* every request is answered: what the prediction log holds goes out */
    kl__sv_plog_close(s->plog);
    s->plog = NULL;
    kl_log(KL_LOG_INFO, "serve", "stopped after draining for %.2f s", (kl_time_mono_ns() - t0) / 1e9);
    return rc;
}

void kl_server_free(kl_server *s) {
    if (!s) return;
    if (s->started) kl_server_shutdown(s, NULL);
    kl__sv_sched_stop(s);
    http_stop(s);
    for (int i = 0; i < s->nmodels; i++) kl__sv_model_free(s->models[i]);
    free(s->models);
    kl__sv_plog_close(s->plog); /* after the versions: none points at its layouts any more */
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->scan_lock);
    pthread_mutex_destroy(&s->mx);
    pthread_cond_destroy(&s->qcond);
    pthread_cond_destroy(&s->dcond);
    pthread_cond_destroy(&s->rcond);
    pthread_cond_destroy(&s->pcond);
    pthread_mutex_destroy(&s->conn_lock);
    pthread_cond_destroy(&s->gcond);
    free(s);
}
