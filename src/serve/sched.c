/* The scheduler: per-model, per-priority FIFO queues with strict priority
 * between levels, admission control (shutdown, rate limits → 429, queue
 * limits → 503, memory quotas → 503 + allocator snapshot), queue timeouts
 * (answered 503, never executed), dynamic batching (same model version,
 * concatenated along dim 0 up to max_batch_size or max_queue_delay_us, split
 * back per request), a fixed pool of inference workers, inline execution of
 * small models' batches on the HTTP loop thread, instances that lower
 * levels leave idle for higher ones (reserve_instances) and their nicer
 * model runs (nice), the reaper that expires queued requests and the
 * background health prober. */
#include "serve_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Estimated compute time of rows rows of model m (its recent time per row). */
static int64_t est_ns(const sv_model *m, int64_t rows) {
    return atomic_load_explicit(&m->row_ns, memory_order_relaxed) * (rows > 0 ? rows : 1);
}

static void abs_time(struct timespec *ts, int64_t mono_deadline_ns) {
    /* condition variables use CLOCK_MONOTONIC (set in kl_server_new) */
    ts->tv_sec = (time_t)(mono_deadline_ns / 1000000000);
    ts->tv_nsec = (long)(mono_deadline_ns % 1000000000);
}

/* ==================================================================
 * Finishing a request
 * ================================================================== */

void kl__sv_req_finish(sv_req *r, int status, int reason, const char *msg) {
    r->status = status;
    r->reason = reason;
    if (msg) {
        free(r->resp);
        r->resp = kl__sv_error_json(msg, &r->resp_len);
        r->resp_header_len = -1;
    }
    if (status == 503 && !r->retry_after) r->retry_after = 1;
    r->srv->io.deliver(r);
}

/* lock held: removes r from its queue */
static void unqueue(kl_server *s, sv_req *r) {
    sv_model *m = r->model;
    int l = r->level;
    if (r->prev) r->prev->next = r->next;
    else m->qhead[l] = r->next;
    if (r->next) r->next->prev = r->prev;
    else m->qtail[l] = r->prev;
    r->next = r->prev = NULL;
    m->qlen[l]--;
    m->qrows[l] -= r->rows > 0 ? r->rows : 1;
    s->nqueued--;
}

/* lock held: gives back the planned bytes of r */
static void release_bytes(kl_server *s, sv_req *r) {
    if (!r->plan_bytes) return;
    s->level_bytes[r->level] -= r->plan_bytes;
    r->model->inflight_bytes -= r->plan_bytes;
    r->plan_bytes = 0;
}

/* ==================================================================
 * Admission
 * ================================================================== */

static int64_t snapshot_ns;

static void write_snapshot(kl_server *s, char *path, size_t n) {
    static atomic_int seq;
    int64_t now = kl_time_mono_ns();
    path[0] = 0;
    /* at most one snapshot a second under overload */
    int64_t last = __atomic_load_n(&snapshot_ns, __ATOMIC_RELAXED);
    if (last && now - last < 1000000000LL) return;
    __atomic_store_n(&snapshot_ns, now, __ATOMIC_RELAXED);
    snprintf(path, n, "%s/keel-serve-memory-%d-%d.json", s->snapdir, (int)getpid(), atomic_fetch_add(&seq, 1));
    kl_err e = {0};
    if (kl_mem_snapshot(path, &e)) {
        kl_log(KL_LOG_WARN, "serve", "memory snapshot: %s", kl_err_what(&e));
        path[0] = 0;
    }
}

int kl__sv_sched_can_inline(kl_server *s, const sv_req *r) {
    return s->inline_ns > 0 && r->level == 0 && s->io.on_own_loop(r) && est_ns(r->model, r->rows) < s->inline_ns;
}

void kl__sv_sched_cancel(kl_server *s, sv_req *r) {
    pthread_mutex_lock(&s->lock);
    if (sv_qstate(r) == SV_Q_QUEUED) {
        unqueue(s, r);
        release_bytes(s, r);
        __atomic_store_n(&r->qstate, SV_Q_DONE, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&s->dcond);
    }
    pthread_mutex_unlock(&s->lock);
}

int64_t kl__sv_sched_timeout_us(const sv_level_cfg *lc, int64_t req_us) {
    int64_t to = lc->default_timeout_us;
    /* 0 asks for no timeout: that would raise a default, never lower it */
    if (req_us > 0 && lc->allow_timeout_override && (to == 0 || req_us < to)) to = req_us;
    return to;
}

/* ==================================================================
 * Admission: the one place a request is let in or refused
 * ================================================================== */

static int verdict(sv_verdict *v, int status, int reason, int retry_after, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int verdict(sv_verdict *v, int status, int reason, int retry_after, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->status = status;
    v->reason = reason;
    v->retry_after = retry_after;
    return status;
}

/* the level's queue is at its max_queue */
static int queue_full(const sv_model *m, const sv_req *r, sv_verdict *v) {
    int64_t maxq = m->cfg.level[r->level].max_queue;
    if (maxq <= 0 || m->qlen[r->level] < maxq) return 0;
    return verdict(v, 503, SV_R_QUEUE_FULL, 1, "model '%s' priority %d: queue full (%lld requests)", m->name,
                   r->level + 1, (long long)maxq);
}

/* shed before the decode (or the run) because the HTTP loop reading it is
 * saturated — it has not had a round with nothing to do for the level's
 * shed_busy_us — while a higher level has recent traffic: a shed request
 * costs its read and a 503, and the loop's time goes to the higher levels */
static int shed(const sv_model *m, const sv_req *r, int64_t now, sv_verdict *v) {
    int lvl = r->level;
    if (lvl <= 0 || lvl >= SV_MAX_LEVELS || !r->loop_idle_ns) return 0;
    int64_t busy = m->cfg.level[lvl].shed_busy_us;
    if (busy <= 0 || now - r->loop_idle_ns < busy * 1000 || !kl__sv_sched_higher_active(m, lvl, now, NULL)) return 0;
    return verdict(v, 503, SV_R_OVERLOAD, 1,
                   "model '%s' priority %d: shed, the server is saturated while higher priorities have traffic",
                   m->name, lvl + 1);
}

/* token bucket of the level's rate_limit (burst: one second of it, at least 1) */
static int over_rate(sv_model *m, const sv_req *r, int64_t now, sv_verdict *v) {
    const sv_level_cfg *lc = &m->cfg.level[r->level];
    int l = r->level;
    if (lc->rate_limit <= 0) return 0;
    double burst = lc->rate_limit < 1 ? 1 : lc->rate_limit;
    if (!m->tok_ns[l]) {
        m->tokens[l] = burst;
        m->tok_ns[l] = now;
    }
    m->tokens[l] += (double)(now - m->tok_ns[l]) * 1e-9 * lc->rate_limit;
    if (m->tokens[l] > burst) m->tokens[l] = burst;
    m->tok_ns[l] = now;
    if (m->tokens[l] >= 1) {
        m->tokens[l] -= 1;
        return 0;
    }
    return verdict(v, 429, SV_R_RATE, 1, "model '%s' priority %d: over its rate limit of %g requests/s", m->name,
                   r->level + 1, lc->rate_limit);
}

/* the level's memory_share of the budget and the model's memory_quota, in
 * planned bytes in flight; admitted bytes are reserved (release_bytes) */
static int over_memory(kl_server *s, sv_model *m, sv_req *r, sv_verdict *v) {
    const sv_level_cfg *lc = &m->cfg.level[r->level];
    if (!r->plan_bytes) return 0;
    uint64_t lim = (uint64_t)(lc->memory_share * (double)s->budget);
    if (lc->memory_share < 1 && s->level_bytes[r->level] + r->plan_bytes > lim) {
        v->snapshot = 1;
        return verdict(v, 503, SV_R_MEMORY, 0,
                       "priority %d: memory quota exceeded (%llu planned bytes in flight + %llu > %.0f%% of %llu)",
                       r->level + 1, (unsigned long long)s->level_bytes[r->level], (unsigned long long)r->plan_bytes,
                       lc->memory_share * 100, (unsigned long long)s->budget);
    }
    if (m->cfg.memory_quota && m->inflight_bytes + r->plan_bytes > m->cfg.memory_quota) {
        v->snapshot = 1;
        return verdict(v, 503, SV_R_MEMORY, 0,
                       "model '%s': memory quota exceeded (%llu planned bytes in flight + %llu > %llu)", m->name,
                       (unsigned long long)m->inflight_bytes, (unsigned long long)r->plan_bytes,
                       (unsigned long long)m->cfg.memory_quota);
    }
    s->level_bytes[r->level] += r->plan_bytes;
    m->inflight_bytes += r->plan_bytes;
    return 0;
}

int kl__sv_sched_admit(kl_server *s, sv_req *r, sv_admit_stage stage, sv_verdict *v) {
    sv_model *m = r->model;
    int64_t now = kl_time_mono_ns();
    v->snapshot = 0;
    if (stage == SV_ADMIT_QUEUE && atomic_load(&s->draining))
        return verdict(v, 503, SV_R_SHUTDOWN, 5, "server is shutting down");
    switch (stage) {
    case SV_ADMIT_HEADER: return queue_full(m, r, v) ? v->status : shed(m, r, now, v);
    case SV_ADMIT_DECODED: return shed(m, r, now, v);
    case SV_ADMIT_QUEUE:
        if (over_rate(m, r, now, v) || queue_full(m, r, v)) return v->status;
        return over_memory(s, m, r, v);
    }
    return 0;
}

int kl__sv_sched_submit(kl_server *s, sv_req *r) {
    sv_model *m = r->model;
    sv_verdict v;
    pthread_mutex_lock(&s->lock);
    const sv_level_cfg *lc = &m->cfg.level[r->level];
    int64_t now = kl_time_mono_ns();
    if (kl__sv_sched_admit(s, r, SV_ADMIT_QUEUE, &v)) goto reject;
    /* timeout: the level's default, or the request's when allowed */
    int64_t to = kl__sv_sched_timeout_us(lc, r->timeout_us);
    r->deadline = to > 0 ? now + to * 1000 : 0;
    r->t_enq = now;
    m->last_arrival[r->level] = now;
    r->qstate = SV_Q_QUEUED;
    r->prev = m->qtail[r->level];
    r->next = NULL;
    if (m->qtail[r->level]) m->qtail[r->level]->next = r;
    else m->qhead[r->level] = r;
    m->qtail[r->level] = r;
    m->qlen[r->level]++;
    m->qrows[r->level] += r->rows > 0 ? r->rows : 1;
    s->nqueued++;
    /* small enough to run on its HTTP loop's thread (a hand-off to a worker
     * costs two thread wake-ups, tens of µs on a busy or virtualised machine,
     * more than such a run): the loop runs it after this round of events.
     * A worker already waits for this model and level's batch to fill: wake
     * it only when the batch is complete (every wake-up is a context switch) */
    int wake = 1;
    /* only the top priority level runs inline: a batch on the loop delays
     * every request the loop has not read yet, higher ones included */
    if (r->inl) wake = 0;
    /* a level held back by its reserve: no worker may take it now */
    else if (!kl__sv_sched_level_may_run(m, r->level, now, NULL)) wake = 0;
    else if (s->ntimed > 0 && s->timed_model == m && s->timed_level == r->level) {
        int64_t rows = m->qrows[r->level];
        wake = rows >= m->cfg.max_batch;
        for (int i = 0; i < m->cfg.n_preferred; i++) wake |= rows == m->cfg.preferred[i];
    }
    if (wake) pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->lock);
    return 0;
reject:
    r->plan_bytes = 0;
    pthread_mutex_unlock(&s->lock);
    if (v.snapshot) {
        char path[1200];
        write_snapshot(s, path, sizeof path);
        if (path[0]) {
            size_t n = strlen(v.msg);
            snprintf(v.msg + n, sizeof v.msg - n, "; allocator snapshot: %s", path);
            kl_log(KL_LOG_WARN, "serve", "%s", v.msg);
        }
    }
    if (v.retry_after) r->retry_after = v.retry_after;
    kl__sv_req_finish(r, v.status, v.reason, v.msg);
    return -1;
}

/* ==================================================================
 * Reserved instances: lower levels leave some of a model's instances to
 * higher levels while those have recent traffic, so that a high-priority
 * request finds a free worker instead of waiting behind a low batch
 * ================================================================== */

int kl__sv_sched_level_may_run(const sv_model *m, int l, int64_t now, int64_t *retry_at) {
    const sv_model_cfg *c = &m->cfg;
    if (m->running >= c->instances) return 0;
    int res = l > 0 && l < SV_MAX_LEVELS ? c->level[l].reserve_instances : 0;
    if (res > c->instances - 1) res = c->instances - 1;
    if (res <= 0) return 1;
    /* res instances stay idle for the higher levels: a batch of level l
     * starts only while fewer than instances - res batches run */
    if (m->running < c->instances - res) return 1;
    int64_t until = 0;
    if (!kl__sv_sched_higher_active(m, l, now, &until)) return 1;
    if (until && retry_at && (!*retry_at || until < *retry_at)) *retry_at = until;
    return 0;
}

int kl__sv_sched_higher_active(const sv_model *m, int l, int64_t now, int64_t *until) {
    int64_t u = 0;
    for (int h = 0; h < l && h < SV_MAX_LEVELS; h++) {
        if (m->qlen[h] > 0 || m->lrun[h] > 0) { if (until) *until = 0; return 1; }
        if (m->last_arrival[h] && now - m->last_arrival[h] < SV_RESERVE_WINDOW_NS &&
            m->last_arrival[h] + SV_RESERVE_WINDOW_NS > u)
            u = m->last_arrival[h] + SV_RESERVE_WINDOW_NS;
    }
    if (until) *until = u;
    return u != 0;
}

/* ==================================================================
 * Per-level niceness: a worker runs a lower level's batch at a higher nice
 * value, so that the kernel gives the cores to the HTTP loops and to
 * higher-level batches first. Going back down needs CAP_SYS_NICE or
 * RLIMIT_NICE; probed once, the knob does nothing without it.
 * ================================================================== */

static atomic_int nice_ok; /* 0: not probed yet, 1: a thread may lower its nice value back, -1: may not */

static void *nice_probe(void *arg) {
    (void)arg;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)tid), ok = -1;
    if (!errno && base < 19 && !setpriority(PRIO_PROCESS, (id_t)tid, base + 1) &&
        !setpriority(PRIO_PROCESS, (id_t)tid, base))
        ok = 1;
    atomic_store(&nice_ok, ok);
    return NULL; /* the probe thread ends here, nicer or not */
}

static _Thread_local int nice_worker, nice_base, nice_cur, nice_want; /* nice_want: of the batch picked */

/* on a worker: its nice value becomes its start value + want (at most 19);
 * only around the model run (never while it may hold the server lock).
 * Probed on a throw-away thread the first time a level asks for it, so a
 * server without `nice` never calls setpriority (a seccomp filter without
 * @resources, as in deploy/systemd, would kill it) */
static void worker_nice(int want) {
    if (!nice_worker || want == nice_cur) return;
    int ok = atomic_load_explicit(&nice_ok, memory_order_relaxed);
    if (!ok) {
        pthread_t pt;
        if (!pthread_create(&pt, NULL, nice_probe, NULL)) pthread_join(pt, NULL);
        else atomic_store(&nice_ok, -1);
        ok = atomic_load(&nice_ok);
        static atomic_int warned;
        if (ok < 0 && !atomic_exchange(&warned, 1))
            kl_log(KL_LOG_WARN, "serve", "queue policy 'nice' ignored: this process may not lower a thread's nice "
                   "value again (needs CAP_SYS_NICE or RLIMIT_NICE, e.g. systemd LimitNICE=+0)");
    }
    if (ok < 0) return;
    int v = nice_base + want > 19 ? 19 : nice_base + want;
    if (!setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), v)) nice_cur = want;
}

static int same_shape_tail(const sv_req *a, const sv_req *b) {
    for (size_t i = 0; i < a->n_in; i++) {
        if (a->in[i].rank != b->in[i].rank) return 0;
        for (int d = 1; d < a->in[i].rank; d++)
            if (a->in[i].dims[d] != b->in[i].dims[d]) return 0;
    }
    return 1;
}

static void execute(kl_server *s, sv_req **rq, int n) {
    sv_version *v = rq[0]->ver;
    kl__sv_version_ref(v); /* answered requests may drop theirs before we are done */
    sv_tensor in[SV_MAX_IO], out[SV_MAX_IO];
    void *cat[SV_MAX_IO] = {0};
    memset(out, 0, sizeof out);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += rq[i]->rows > 0 ? rq[i]->rows : 0;
    kl_err e = {0};
    int rc = KL_OK;
    if (n == 1) {
        memcpy(in, rq[0]->in, sizeof(sv_tensor) * v->n_in);
        if (rq[0]->rows > 0) total = rq[0]->rows;
    } else {
        for (size_t i = 0; i < v->n_in && !rc; i++) {
            size_t bytes = 0;
            for (int k = 0; k < n; k++) bytes += rq[k]->in[i].nbytes;
            cat[i] = kl_mem_alloc(bytes ? bytes : 1, KL_TAG_REQUEST);
            if (!cat[i]) { rc = kl_err_set(&e, KL_ENOMEM, "batch input '%s': out of memory", v->in[i].name); break; }
            size_t off = 0;
            for (int k = 0; k < n; k++) {
                memcpy((char *)cat[i] + off, rq[k]->in[i].data, rq[k]->in[i].nbytes);
                off += rq[k]->in[i].nbytes;
            }
            in[i] = rq[0]->in[i];
            in[i].dims[0] = total;
            in[i].data = cat[i];
            in[i].nbytes = bytes;
            in[i].own = 0;
            in[i].release = NULL;
        }
    }
    int64_t t0 = kl_time_mono_ns();
    for (int k = 0; k < n; k++) rq[k]->t_start = t0;
    worker_nice(nice_want);
    if (!rc) rc = kl__sb_run(v->sess, in, v->n_in, out, v->n_out, &e);
    int64_t t1 = kl_time_mono_ns();
    worker_nice(0);
    if (!rc && total > 0) { /* moving average (1/8) of the time per row: decides inline or worker */
        sv_model *m = v->model;
        int64_t avg = atomic_load_explicit(&m->row_ns, memory_order_relaxed), dt = (t1 - t0) / total;
        if (avg && dt > 4 * avg) dt = 4 * avg; /* a run the machine preempted must not move a model off its loop at once */
        atomic_store_explicit(&m->row_ns, avg ? avg + (dt - avg) / 8 : dt, memory_order_relaxed);
    }
    if (rc && n > 1 && rc != KL_ENOMEM) {
        /* one request's data (an index out of range, a shape only it has)
         * must not fail the requests batched with it: each runs alone and
         * only the guilty one is answered with the error */
        for (size_t i = 0; i < v->n_out; i++) kl__sv_tensor_release(&out[i]);
        for (size_t i = 0; i < v->n_in; i++) kl_mem_free(cat[i]);
        kl_log(KL_LOG_INFO, "serve", "model %s version %lld: a batch of %d requests failed (%s); running them one by one",
               v->model->name, (long long)v->version, n, e.msg);
        for (int k = 0; k < n; k++) execute(s, &rq[k], 1);
        kl__sv_version_unref(v);
        return;
    }
    /* give back the planned bytes before answering: an answered request may be freed at once */
    pthread_mutex_lock(&s->lock);
    for (int k = 0; k < n; k++) release_bytes(s, rq[k]);
    pthread_mutex_unlock(&s->lock);
    /* the monitor and the prediction log read the requests before they are
     * answered: an answered request may be freed at once (kl__sv_req_finish) */
    if (!rc && (v->mon || v->fb)) kl__sv_monitor_batch(v, rq, n, out);
    if (!rc && s->plog) kl__sv_plog_batch(s->plog, rq, n, out);
    int64_t row0 = 0;
    for (int k = 0; k < n; k++) {
        sv_req *r = rq[k];
        r->t_end = t1;
        r->batch_size = (int)total;
        if (rc) {
            /* the request's own data is at fault (a shape, a type, an index out of range): 400 */
            int bad = rc == KL_ESHAPE || rc == KL_ETYPE || rc == KL_EINVAL || rc == KL_ERANGE;
            char msg[900];
            snprintf(msg, sizeof msg, "%s%s", bad ? "" : "inference failed: ", e.msg);
            if (!bad) kl_log(KL_LOG_ERROR, "serve", "model %s version %lld: %s", v->model->name, (long long)v->version, e.msg);
            kl__sv_req_finish(r, bad ? 400 : rc == KL_ENOMEM ? 503 : 500,
                          bad ? SV_R_BAD_REQUEST : rc == KL_ENOMEM ? SV_R_MEMORY : SV_R_INTERNAL, msg);
            continue;
        }
        kl_err ee = {0};
        int erc = kl__sv_encode_infer(r, out, v->n_out, n == 1 ? 0 : row0, n == 1 ? r->rows : total, &ee);
        row0 += r->rows;
        if (erc) kl__sv_req_finish(r, 500, SV_R_INTERNAL, ee.msg);
        else kl__sv_req_finish(r, 200, SV_R_SUCCESS, NULL);
    }
    for (size_t i = 0; i < v->n_out; i++) kl__sv_tensor_release(&out[i]);
    for (size_t i = 0; i < v->n_in; i++) kl_mem_free(cat[i]);
    kl__sv_version_unref(v);
}

/* whether r is for loop lp (an inline request of it) or, lp NULL, for the workers */
static int mine(const sv_req *r, const sv_loop *lp) { return lp ? r->inl && r->loop == lp : !r->inl; }

/* the first request of a queue that is lp's (or the workers') */
static sv_req *first_of(sv_req *r, const sv_loop *lp) {
    while (r && !mine(r, lp)) r = r->next;
    return r;
}

/* lock held: the next batch to run (0 requests = nothing runnable): for a
 * worker (lp NULL) among the requests that do not run inline, for HTTP loop
 * lp among its own inline requests */
static int pick(kl_server *s, sv_loop *lp, sv_req **rq, int64_t *wait_until, sv_model **wait_model, int *wait_level,
                int64_t *retry_at) {
    sv_model *best = NULL;
    sv_req *h = NULL;
    int bl = 0;
    int64_t bt = 0, now = kl_time_mono_ns();
    *wait_until = 0;
    for (int i = 0; i < s->nmodels; i++) {
        sv_model *m = s->models[i];
        /* instances bound the workers' runs; inline ones are one per loop at most */
        if (!lp && m->running >= m->cfg.instances) continue;
        for (int l = 0; l < SV_MAX_LEVELS; l++) {
            sv_req *f = first_of(m->qhead[l], lp);
            if (!f) continue;
            /* strict priority: when the model's top waiting level is held
             * back by its reserve, nothing lower of the model runs either */
            if (!lp && !kl__sv_sched_level_may_run(m, l, now, retry_at)) break;
            if (!best || l < bl || (l == bl && f->t_enq < bt)) { best = m; bl = l; bt = f->t_enq; h = f; }
            break;
        }
    }
    if (!best) return 0;
    int n = 1;
    rq[0] = h;
    const sv_model_cfg *c = &best->cfg;
    int maxb = c->max_batch; /* a level may run smaller batches than the model */
    if (c->level[bl].max_batch > 0 && c->level[bl].max_batch < maxb) maxb = c->level[bl].max_batch;
    if (c->dynamic_batching && maxb > 0 && h->ver->batchable && h->rows > 0) {
        int64_t rows = h->rows;
        int pn = 0; /* requests of the longest prefix whose rows are a preferred batch size */
        for (int i = 0; i < c->n_preferred; i++) pn |= rows == c->preferred[i];
        for (sv_req *r = h->next; r && n < SV_MAX_BATCH_REQS; r = r->next) {
            if (!mine(r, lp) || (lp && est_ns(best, rows + r->rows) > s->inline_ns) || r->ver != h->ver || r->rows <= 0 || rows + r->rows > maxb || !same_shape_tail(h, r)) continue;
            rq[n++] = r;
            rows += r->rows;
            for (int i = 0; i < c->n_preferred; i++)
                if (rows == c->preferred[i]) pn = n;
        }
        int preferred = rows >= maxb;
        /* below the maximum, the largest preferred size that the queue
         * forms runs at once (as Triton's batcher does); the requests after
         * it wait for company or their delay */
        if (!preferred && pn) { n = pn; preferred = 1; }
        int64_t due = h->t_enq + c->max_queue_delay_us * 1000;
        /* an HTTP loop whose every connection has its request in the
         * scheduler waits for nobody: no more requests can come to it */
        if (lp && s->io.loop_all_waiting(lp)) preferred = 1;
        if (!preferred && c->max_queue_delay_us > 0 && kl_time_mono_ns() < due && !atomic_load(&s->draining)) {
            *wait_until = due;
            *wait_model = best;
            *wait_level = bl;
            return 0;
        }
    }
    for (int i = 0; i < n; i++) { unqueue(s, rq[i]); rq[i]->qstate = SV_Q_RUNNING; }
    if (lp) best->inl_running++;
    else { best->running++; best->lrun[bl]++; }
    s->nrunning++;
    return n;
}

/* lock held: a queued request that a worker could run now (its model below
 * its instances, not an inline one): only then is waking an idle worker worth
 * a context switch */
static int runnable(const kl_server *s) {
    if (!s->nqueued || !s->nidle) return 0;
    int64_t now = kl_time_mono_ns();
    for (int i = 0; i < s->nmodels; i++) {
        const sv_model *m = s->models[i];
        if (m->running >= m->cfg.instances) continue;
        for (int l = 0; l < SV_MAX_LEVELS; l++)
            if (first_of(m->qhead[l], NULL)) {
                if (kl__sv_sched_level_may_run(m, l, now, NULL)) return 1;
                break;
            }
    }
    return 0;
}

static void *worker_main(void *arg) {
    kl_server *s = arg;
    sv_req *rq[SV_MAX_BATCH_REQS];
    errno = 0;
    nice_base = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (errno) nice_base = 0;
    nice_worker = 1;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->stop) break;
        int64_t wait_until = 0, retry_at = 0;
        sv_model *wm = NULL;
        int wl = 0;
        int n = pick(s, NULL, rq, &wait_until, &wm, &wl, &retry_at);
        if (!n) {
            if (!wait_until && retry_at) {
                /* a level held back only by its reserve's window: look
                 * again when the window ends (an idle worker meanwhile) */
                struct timespec ts;
                abs_time(&ts, retry_at);
                s->nidle++;
                pthread_cond_timedwait(&s->qcond, &s->lock, &ts);
                s->nidle--;
            } else if (wait_until) {
                struct timespec ts;
                abs_time(&ts, wait_until);
                s->ntimed++;
                s->timed_model = wm;
                s->timed_level = wl;
                pthread_cond_timedwait(&s->qcond, &s->lock, &ts);
                s->ntimed--;
            } else {
                s->nidle++;
                pthread_cond_wait(&s->qcond, &s->lock);
                s->nidle--;
            }
            continue;
        }
        if (runnable(s)) pthread_cond_signal(&s->qcond); /* more work than this batch */
        sv_model *m = rq[0]->model;
        int lvl = rq[0]->level;
        nice_want = m->cfg.level[lvl].nice;
        pthread_mutex_unlock(&s->lock);
        execute(s, rq, n);
        pthread_mutex_lock(&s->lock);
        m->running--;
        m->lrun[lvl]--;
        s->nrunning--;
        pthread_cond_broadcast(&s->dcond);
        if (runnable(s)) pthread_cond_signal(&s->qcond); /* this one loops to pick too */
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ==================================================================
 * Inline batches on the HTTP loop thread
 * ================================================================== */

int kl__sv_sched_inline(kl_server *s, sv_loop *lp, int64_t *wait_until) {
    sv_req *rq[SV_MAX_BATCH_REQS];
    int ran = 0;
    *wait_until = 0;
    pthread_mutex_lock(&s->lock);
    int64_t t0 = kl_time_mono_ns();
    while (!s->stop) {
        int64_t wu = 0;
        sv_model *wm = NULL;
        int wl = 0;
        int n = pick(s, lp, rq, &wu, &wm, &wl, NULL);
        if (!n) { *wait_until = wu; break; }
        sv_model *m = rq[0]->model;
        pthread_mutex_unlock(&s->lock);
        execute(s, rq, n);
        pthread_mutex_lock(&s->lock);
        m->inl_running--;
        s->nrunning--;
        pthread_cond_broadcast(&s->dcond);
        ran++;
        /* back to the network after a while: the answers go out, new requests come in */
        if (kl_time_mono_ns() - t0 > 2 * s->inline_ns) break;
    }
    pthread_mutex_unlock(&s->lock);
    return ran;
}

/* ==================================================================
 * Reaper: queue timeouts
 * ================================================================== */

static void *reaper_main(void *arg) {
    kl_server *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        int64_t now = kl_time_mono_ns(), next = now + 20000000; /* 20 ms */
        for (int i = 0; i < s->nmodels; i++) {
            sv_model *m = s->models[i];
            for (int l = 0; l < SV_MAX_LEVELS; l++) {
                sv_req *r = m->qhead[l];
                while (r) {
                    sv_req *nx = r->next;
                    if (r->deadline && now >= r->deadline) {
                        unqueue(s, r);
                        release_bytes(s, r);
                        char msg[256];
                        snprintf(msg, sizeof msg, "timed out after %.0f us in the queue of model '%s' (not executed)",
                                 (now - r->t_enq) / 1e3, m->name);
                        kl__sv_req_finish(r, 503, SV_R_TIMEOUT, msg);
                        pthread_cond_broadcast(&s->dcond);
                    } else if (r->deadline && r->deadline < next) {
                        next = r->deadline;
                    }
                    r = nx;
                }
            }
        }
        struct timespec ts;
        abs_time(&ts, next);
        pthread_cond_timedwait(&s->rcond, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* lock held: answers everything still queued (shutdown timed out) */
void kl__sv_sched_flush(kl_server *s, const char *why) {
    for (int i = 0; i < s->nmodels; i++) {
        sv_model *m = s->models[i];
        for (int l = 0; l < SV_MAX_LEVELS; l++)
            while (m->qhead[l]) {
                sv_req *r = m->qhead[l];
                unqueue(s, r);
                release_bytes(s, r);
                kl__sv_req_finish(r, 503, SV_R_SHUTDOWN, why);
            }
    }
}

/* ==================================================================
 * Prober: background health inference
 * ================================================================== */

static void *prober_main(void *arg) {
    kl_server *s = arg;
    double iv = s->o.probe_interval_s > 0 ? s->o.probe_interval_s : 10;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        struct timespec ts;
        abs_time(&ts, kl_time_mono_ns() + (int64_t)(iv * 1e9));
        pthread_cond_timedwait(&s->pcond, &s->lock, &ts);
        if (s->stop) break;
        sv_version *vs[256];
        int n = 0;
        for (int i = 0; i < s->nmodels; i++)
            for (int j = 0; j < s->models[i]->nver && n < 256; j++) {
                vs[n] = s->models[i]->ver[j];
                kl__sv_version_ref(vs[n++]);
            }
        pthread_mutex_unlock(&s->lock);
        for (int i = 0; i < n; i++) {
            kl_err e = {0};
            if (kl__sv_version_probe(s, vs[i], &e))
                kl_log(KL_LOG_ERROR, "serve", "health probe of model %s version %lld failed: %s", vs[i]->model->name,
                       (long long)vs[i]->version, kl_err_what(&e));
            kl__sv_version_unref(vs[i]);
        }
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ==================================================================
 * Start / stop
 * ================================================================== */

int kl__sv_workers(const kl_serve_opts *o) {
    int n = o->workers > 0 ? o->workers : kl_threads_default();
    return n < 1 ? 1 : n;
}

int kl__sv_threads_per_worker(const kl_serve_opts *o) {
    return o->threads_per_worker > 0 ? o->threads_per_worker : SV_THREADS_PER_WORKER;
}

int kl__sv_sched_start(kl_server *s, kl_err *e) {
    int n = kl__sv_workers(&s->o);
    s->workers = calloc((size_t)n, sizeof *s->workers);
    if (!s->workers) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&s->workers[i], NULL, worker_main, s);
        if (rc) { kl__sv_sched_stop(s); return kl_err_set(e, -rc, "starting worker %d: %s", i, strerror(rc)); }
        s->nworkers++;
    }
    int rc = pthread_create(&s->reaper, NULL, reaper_main, s);
    if (!rc) { s->have_reaper = 1; rc = pthread_create(&s->prober, NULL, prober_main, s); }
    if (!rc) s->have_prober = 1;
    if (rc) { kl__sv_sched_stop(s); return kl_err_set(e, -rc, "starting scheduler threads: %s", strerror(rc)); }
    return KL_OK;
}

void kl__sv_sched_stop(kl_server *s) {
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->qcond);
    pthread_cond_broadcast(&s->rcond);
    pthread_cond_broadcast(&s->pcond);
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < s->nworkers; i++) pthread_join(s->workers[i], NULL);
    s->nworkers = 0;
    free(s->workers);
    s->workers = NULL;
    if (s->have_reaper) pthread_join(s->reaper, NULL);
    if (s->have_prober) pthread_join(s->prober, NULL);
    s->have_reaper = s->have_prober = 0;
}
