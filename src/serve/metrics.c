/* Metrics of the server in the Prometheus text exposition format (checked
 * with `promtool check metrics`): request latency histograms per model and
 * version and priority, queue and compute time, batch sizes, request results
 * by reason (per model version), queue lengths, model loads, memory in use and budgets per allocator
 * tag, process CPU. */
#include "serve_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const double lat_le[SV_LAT_BUCKETS - 1] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                  0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
static const double batch_le[SV_BATCH_BUCKETS - 1] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

static const char *const reason_names[SV_R_COUNT] = {
    "success", "bad_request", "not_found", "queue_full", "timeout", "memory_quota",
    "rate_limited", "shutting_down", "not_ready", "body_too_large", "internal", "overloaded"};

const char *kl__sv_reason_name(int r) { return r >= 0 && r < SV_R_COUNT ? reason_names[r] : "internal"; }

size_t kl__sv_metrics_latency_bounds(const double **le) {
    *le = lat_le;
    return KL_ARRAY_LEN(lat_le);
}

/* A request the server could not answer although it was well-formed and
 * within its limits: full queues, timeouts, memory quotas, shutdown, no ready
 * version, internal errors, overload shedding. A malformed request, an
 * unknown model, a body over the limit or a client over its rate limit is
 * the client's failure and spends no error budget. */
int kl__sv_reason_is_server_error(int r) {
    switch (r) {
    case SV_R_QUEUE_FULL:
    case SV_R_TIMEOUT:
    case SV_R_MEMORY:
    case SV_R_SHUTDOWN:
    case SV_R_NOT_READY:
    case SV_R_INTERNAL:
    case SV_R_OVERLOAD: return 1;
    default: return 0;
    }
}

static void hist_add(sv_hist *h, double x) {
    int i = 0;
    while (i < SV_LAT_BUCKETS - 1 && x > lat_le[i]) i++;
    h->b[i]++;
    h->count++;
    h->sum += x;
}

/* metrics lock held: the request statistics of version v of m (-1: none
 * chosen), added when new; with SV_VSTATS versions counted, the lowest
 * version's slot is reused. */
static sv_mstats *version_stats(sv_model *m, int64_t v) {
    int low = 0;
    for (int i = 0; i < m->nvst; i++) {
        if (m->vst[i].version == v) return &m->vst[i].st;
        if (m->vst[i].version < m->vst[low].version) low = i;
    }
    int i = m->nvst < SV_VSTATS ? m->nvst++ : low;
    memset(&m->vst[i], 0, sizeof m->vst[i]);
    m->vst[i].version = v;
    return &m->vst[i].st;
}

/* Records a finished request (called once per answered request). */
void kl__sv_metrics_request(kl_server *s, sv_req *r) {
    double total = (kl_time_mono_ns() - r->t_recv) * 1e-9;
    pthread_mutex_lock(&s->mx);
    if (!r->model) {
        s->http_errors[r->reason]++;
    } else {
        sv_mstats *st = version_stats(r->model, r->ver ? r->ver->version : -1);
        st->requests[r->reason]++;
        if (r->reason == SV_R_SUCCESS) hist_add(&st->latency[r->level], total);
        if (r->t_start) {
            hist_add(&st->queue, (r->t_start - r->t_enq) * 1e-9);
            hist_add(&st->compute, (r->t_end - r->t_start) * 1e-9);
        }
        if (r->batch_size > 0 && r->reason == SV_R_SUCCESS) {
            int i = 0;
            while (i < SV_BATCH_BUCKETS - 1 && r->batch_size > batch_le[i]) i++;
            st->batch[i]++;
            st->batch_count++;
            st->batch_sum += r->batch_size;
        }
    }
    pthread_mutex_unlock(&s->mx);
}

static void label(kl_buf *b, const char *v) {
    kl_buf_puts(b, "\"");
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') kl_buf_printf(b, "\\%c", *v);
        else if (*v == '\n') kl_buf_puts(b, "\\n");
        else kl_buf_append(b, v, 1);
    }
    kl_buf_puts(b, "\"");
}

static void head(kl_buf *b, const char *name, const char *type, const char *help) {
    kl_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* for the monitoring gauges (monitor.c) */
void kl__sv_metrics_label(kl_buf *b, const char *v) { label(b, v); }
void kl__sv_metrics_head(kl_buf *b, const char *name, const char *type, const char *help) { head(b, name, type, help); }

static void hist(kl_buf *b, const char *name, const char *labels, const uint64_t *bk, int nb, const double *le,
                 uint64_t count, double sum) {
    uint64_t cum = 0;
    for (int i = 0; i < nb - 1; i++) {
        cum += bk[i];
        kl_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, labels[0] ? "," : "", le[i],
                      (unsigned long long)cum);
    }
    kl_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, labels[0] ? "," : "", (unsigned long long)count);
    kl_buf_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, sum, name, labels, (unsigned long long)count);
}

#define NO_VERSION (-2)

/* model="m"[,version="v"][,priority="p"]: version -1 is "" (a request
 * answered before a version was chosen), NO_VERSION leaves it out. */
static void version_label(char *out, size_t n, const char *model, int64_t version, int level) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "model=");
    label(&b, model);
    if (version >= 0) kl_buf_printf(&b, ",version=\"%lld\"", (long long)version);
    else if (version == -1) kl_buf_puts(&b, ",version=\"\"");
    if (level > 0) kl_buf_printf(&b, ",priority=\"%d\"", level);
    snprintf(out, n, "%s", b.data ? b.data : "");
    kl_buf_free(&b);
}

static void model_label(char *out, size_t n, const char *model, int level) { version_label(out, n, model, NO_VERSION, level); }

static void cpu_seconds(double *cpu) {
    *cpu = 0;
    char *text = NULL;
    size_t len = 0;
    if (kl_read_file("/proc/self/stat", &text, &len, NULL)) return;
    const char *p = strrchr(text, ')'); /* the command name may hold spaces */
    if (p) {
        unsigned long ut = 0, st = 0;
        /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            *cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    kl_mem_free(text);
}

/* /metrics, stage by stage: metrics_snapshot (the models and queues, under
 * s->lock), then under s->mx render_versions (per version: latency, queue,
 * compute, batch histograms and request counts) and render_counters (HTTP,
 * loads, probes); render_gauges (queues, memory, budgets), render_process
 * (CPU, cores, feature store errors), then the monitor's, the prediction
 * log's and keel_ready. */
typedef struct {
    int nm;
    int qlen[256][SV_MAX_LEVELS];
    int levels[256], ready[256], running[256];
    sv_model *ms[256];
    uint64_t level_bytes[SV_MAX_LEVELS];
} metrics_snap;

static void metrics_snapshot(kl_server *s, metrics_snap *sn) {
    pthread_mutex_lock(&s->lock);
    int nm = s->nmodels;
    memcpy(sn->level_bytes, s->level_bytes, sizeof sn->level_bytes);
    if (nm > 256) nm = 256;
    for (int i = 0; i < nm; i++) {
        sn->ms[i] = s->models[i];
        memcpy(sn->qlen[i], s->models[i]->qlen, sizeof sn->qlen[i]);
        sn->levels[i] = s->models[i]->cfg.levels;
        sn->ready[i] = s->models[i]->state == SV_M_READY;
        sn->running[i] = s->models[i]->running + s->models[i]->inl_running;
    }
    sn->nm = nm;
    pthread_mutex_unlock(&s->lock);
}

/* s->mx held */
static void render_versions(kl_buf *b, const metrics_snap *sn) {
    char lb[512];
    int nm = sn->nm;
    sv_model *const *ms = sn->ms;
    const int *levels = sn->levels;
    head(b, "keel_inference_request_duration_seconds", "histogram",
         "Time from request received to response ready, successful inference requests.");
#define EACH_VERSION(i, k) for (int i = 0; i < nm; i++) for (int k = 0; k < ms[i]->nvst; k++)
    EACH_VERSION(i, k) {
        for (int l = 0; l < levels[i]; l++) {
            const sv_hist *h = &ms[i]->vst[k].st.latency[l];
            version_label(lb, sizeof lb, ms[i]->name, ms[i]->vst[k].version, l + 1);
            hist(b, "keel_inference_request_duration_seconds", lb, h->b, SV_LAT_BUCKETS, lat_le, h->count, h->sum);
        }
    }
    head(b, "keel_inference_queue_duration_seconds", "histogram", "Time requests waited in the scheduler queue.");
    EACH_VERSION(i, k) {
        const sv_hist *h = &ms[i]->vst[k].st.queue;
        version_label(lb, sizeof lb, ms[i]->name, ms[i]->vst[k].version, 0);
        hist(b, "keel_inference_queue_duration_seconds", lb, h->b, SV_LAT_BUCKETS, lat_le, h->count, h->sum);
    }
    head(b, "keel_inference_compute_duration_seconds", "histogram",
         "Model execution time of the batch a request ran in.");
    EACH_VERSION(i, k) {
        const sv_hist *h = &ms[i]->vst[k].st.compute;
        version_label(lb, sizeof lb, ms[i]->name, ms[i]->vst[k].version, 0);
        hist(b, "keel_inference_compute_duration_seconds", lb, h->b, SV_LAT_BUCKETS, lat_le, h->count, h->sum);
    }
    head(b, "keel_inference_batch_size", "histogram", "Rows of the batch each successful request ran in.");
    EACH_VERSION(i, k) {
        const sv_mstats *st = &ms[i]->vst[k].st;
        version_label(lb, sizeof lb, ms[i]->name, ms[i]->vst[k].version, 0);
        hist(b, "keel_inference_batch_size", lb, st->batch, SV_BATCH_BUCKETS, batch_le, st->batch_count, st->batch_sum);
    }
    head(b, "keel_inference_requests_total", "counter",
         "Inference requests answered (v2 infer and :predict), by model, version and result.");
    EACH_VERSION(i, k) {
        for (int r = 0; r < SV_R_COUNT; r++) {
            version_label(lb, sizeof lb, ms[i]->name, ms[i]->vst[k].version, 0);
            kl_buf_printf(b, "keel_inference_requests_total{%s,result=\"%s\"} %llu\n", lb, reason_names[r],
                          (unsigned long long)ms[i]->vst[k].st.requests[r]);
        }
    }
#undef EACH_VERSION
}

/* s->mx held */
static void render_counters(kl_buf *b, kl_server *s, const metrics_snap *sn) {
    char lb[512];
    int nm = sn->nm;
    sv_model *const *ms = sn->ms;
    head(b, "keel_http_connections_cut_total", "counter",
         "Slow clients cut: request headers late (header_timeout) or body below the minimum rate (slow_body).");
    kl_buf_printf(b, "keel_http_connections_cut_total{reason=\"header_timeout\"} %llu\n",
                  (unsigned long long)atomic_load(&s->cut_head));
    kl_buf_printf(b, "keel_http_connections_cut_total{reason=\"slow_body\"} %llu\n",
                  (unsigned long long)atomic_load(&s->cut_body));
    head(b, "keel_http_requests_failed_total", "counter", "Requests refused before reaching a model, by reason.");
    for (int r = 1; r < SV_R_COUNT; r++)
        kl_buf_printf(b, "keel_http_requests_failed_total{reason=\"%s\"} %llu\n", reason_names[r],
                      (unsigned long long)s->http_errors[r]);
    head(b, "keel_model_loads_total", "counter", "Model version loads (integrity check, load, warm-up), by result.");
    for (int i = 0; i < nm; i++) {
        model_label(lb, sizeof lb, ms[i]->name, 0);
        kl_buf_printf(b, "keel_model_loads_total{%s,result=\"success\"} %llu\n", lb,
                      (unsigned long long)ms[i]->st.load_ok);
        kl_buf_printf(b, "keel_model_loads_total{%s,result=\"failure\"} %llu\n", lb,
                      (unsigned long long)ms[i]->st.load_fail);
    }
    head(b, "keel_model_probes_total", "counter",
         "Warm-up and background health-probe inferences of the model's versions, by result.");
    for (int i = 0; i < nm; i++) {
        model_label(lb, sizeof lb, ms[i]->name, 0);
        kl_buf_printf(b, "keel_model_probes_total{%s,result=\"success\"} %llu\n", lb,
                      (unsigned long long)ms[i]->st.probe_ok);
        kl_buf_printf(b, "keel_model_probes_total{%s,result=\"failure\"} %llu\n", lb,
                      (unsigned long long)ms[i]->st.probe_fail);
    }
}

static void render_gauges(kl_buf *b, kl_server *s, const metrics_snap *sn) {
    char lb[512];
    int nm = sn->nm;
    sv_model *const *ms = sn->ms;
    const int *levels = sn->levels, *ready = sn->ready, *running = sn->running;
    const uint64_t *level_bytes = sn->level_bytes;
    const int(*qlen)[SV_MAX_LEVELS] = sn->qlen;
    head(b, "keel_queue_length", "gauge", "Requests waiting in the scheduler, by model and priority.");
    for (int i = 0; i < nm; i++)
        for (int l = 0; l < levels[i]; l++) {
            model_label(lb, sizeof lb, ms[i]->name, l + 1);
            kl_buf_printf(b, "keel_queue_length{%s} %d\n", lb, qlen[i][l]);
        }
    head(b, "keel_inference_running", "gauge", "Batches of the model being executed now.");
    for (int i = 0; i < nm; i++) {
        model_label(lb, sizeof lb, ms[i]->name, 0);
        kl_buf_printf(b, "keel_inference_running{%s} %d\n", lb, running[i]);
    }
    head(b, "keel_model_ready", "gauge", "1 when the model has a ready version.");
    for (int i = 0; i < nm; i++) {
        model_label(lb, sizeof lb, ms[i]->name, 0);
        kl_buf_printf(b, "keel_model_ready{%s} %d\n", lb, ready[i]);
    }
    head(b, "keel_memory_allocated_bytes", "gauge", "Bytes allocated through the core allocator, by tag.");
    for (int t = 0; t < KL_TAG_COUNT; t++) {
        kl_mem_stats ms;
        kl_mem_stats_get((kl_mem_tag)t, &ms);
        kl_buf_printf(b, "keel_memory_allocated_bytes{tag=\"%s\"} %llu\n", kl_mem_tag_name((kl_mem_tag)t),
                      (unsigned long long)ms.allocated);
    }
    head(b, "keel_memory_reserved_bytes", "gauge", "Bytes held from the OS by the core allocator, by tag.");
    for (int t = 0; t < KL_TAG_COUNT; t++) {
        kl_mem_stats ms;
        kl_mem_stats_get((kl_mem_tag)t, &ms);
        kl_buf_printf(b, "keel_memory_reserved_bytes{tag=\"%s\"} %llu\n", kl_mem_tag_name((kl_mem_tag)t),
                      (unsigned long long)ms.reserved);
    }
    head(b, "keel_memory_budget_bytes", "gauge",
         "Memory budgets by tag (0 = none); tag=\"total\" is the allocator cap.");
    for (int t = 0; t < KL_TAG_COUNT; t++)
        kl_buf_printf(b, "keel_memory_budget_bytes{tag=\"%s\"} %llu\n", kl_mem_tag_name((kl_mem_tag)t),
                      (unsigned long long)kl_mem_get_tag_budget((kl_mem_tag)t));
    kl_buf_printf(b, "keel_memory_budget_bytes{tag=\"total\"} %llu\n", (unsigned long long)kl_mem_get_budget());
    head(b, "keel_serving_memory_budget_bytes", "gauge", "Serving budget that priority memory shares divide.");
    kl_buf_printf(b, "keel_serving_memory_budget_bytes %llu\n", (unsigned long long)s->budget);
    head(b, "keel_serving_planned_bytes", "gauge", "Planned activation bytes of admitted requests, by priority.");
    for (int l = 0; l < SV_MAX_LEVELS; l++)
        kl_buf_printf(b, "keel_serving_planned_bytes{priority=\"%d\"} %llu\n", l + 1,
                      (unsigned long long)level_bytes[l]);
}

static void render_process(kl_buf *b, kl_server *s) {
    char lb[512];
    double cpu;
    cpu_seconds(&cpu);
    int64_t now = kl_time_mono_ns();
    pthread_mutex_lock(&s->mx);
    double util = 0;
    if (s->cpu_last_ns && now > s->cpu_last_ns) util = (cpu - s->cpu_last_s) / ((now - s->cpu_last_ns) * 1e-9);
    else if (now > s->t_start_ns) util = cpu / ((now - s->t_start_ns) * 1e-9);
    s->cpu_last_s = cpu;
    s->cpu_last_ns = now;
    pthread_mutex_unlock(&s->mx);
    head(b, "process_cpu_seconds_total", "counter", "User and system CPU time of the process.");
    kl_buf_printf(b, "process_cpu_seconds_total %.3f\n", cpu);
    head(b, "keel_process_cpu_utilisation_ratio", "gauge",
         "CPU seconds per second since the previous scrape (1 = one core busy).");
    kl_buf_printf(b, "keel_process_cpu_utilisation_ratio %.4f\n", util);
    head(b, "keel_cpu_cores", "gauge", "Online CPU cores.");
    kl_buf_printf(b, "keel_cpu_cores %d\n", kl_cpu_count());
    head(b, "keel_feature_store_errors_total", "counter",
         "Online feature store calls that failed (Redis unreachable or slow): errors, or empty windows under "
         "on_store_error: empty.");
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->nmodels && i < 256; i++) {
        model_label(lb, sizeof lb, s->models[i]->name, 0);
        kl_buf_printf(b, "keel_feature_store_errors_total{%s} %llu\n", lb,
                      (unsigned long long)kl__sv_fstore_errors(s->models[i]));
    }
    pthread_mutex_unlock(&s->lock);
}

char *kl__sv_metrics_render(kl_server *s, size_t *len) {
    kl_buf b;
    kl_buf_init(&b);
    metrics_snap sn;
    metrics_snapshot(s, &sn);
    pthread_mutex_lock(&s->mx);
    render_versions(&b, &sn);
    render_counters(&b, s, &sn);
    pthread_mutex_unlock(&s->mx);
    render_gauges(&b, s, &sn);
    render_process(&b, s);
    kl__sv_monitor_metrics(s, &b);
    if (s->plog) kl__sv_plog_metrics(s->plog, &b);
    head(&b, "keel_ready", "gauge", "1 while the server is ready (deep probe), 0 otherwise.");
    kl_buf_printf(&b, "keel_ready %d\n", kl__sv_ready(s, NULL, 0));
    *len = b.len;
    return kl_buf_take(&b);
}
