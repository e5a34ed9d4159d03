/* Unit test of the server's threads end to end (so that the sanitizer
 * builds, TSan above all, see them): a real kl_server on a tiny Relu model
 * (an ONNX file written here byte by byte), two HTTP loops, two workers;
 * client threads post KServe v2 requests over keep-alive connections, half
 * at priority 1 (batched inline on the HTTP loops) and half at priority 2
 * (batched on the workers), and every answer is checked; then the drain. */
#include "../harness.h"

#include <keel/serve.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ==================================================================
 * A minimal protobuf writer for the ONNX file
 * ================================================================== */

typedef struct {
    unsigned char b[1024];
    size_t n;
} pb;

static void pb_varint(pb *p, uint64_t v) {
    while (v >= 0x80) { p->b[p->n++] = (unsigned char)(v | 0x80); v >>= 7; }
    p->b[p->n++] = (unsigned char)v;
}
static void pb_int(pb *p, int field, uint64_t v) { pb_varint(p, (uint64_t)field << 3); pb_varint(p, v); }
static void pb_bytes(pb *p, int field, const void *d, size_t n) {
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, n);
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void pb_str(pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
static void pb_msg(pb *p, int field, const pb *m) { pb_bytes(p, field, m->b, m->n); }

/* ValueInfoProto name: FP32 [N, 4] */
static void value_info(pb *out, const char *name) {
    pb d0 = {0}, d1 = {0}, shape = {0}, tt = {0}, type = {0}, vi = {0};
    pb_str(&d0, 2, "N");      /* Dimension.dim_param */
    pb_int(&d1, 1, 4);        /* Dimension.dim_value */
    pb_msg(&shape, 1, &d0);   /* TensorShapeProto.dim */
    pb_msg(&shape, 1, &d1);
    pb_int(&tt, 1, 1);        /* TypeProto.Tensor.elem_type = FLOAT */
    pb_msg(&tt, 2, &shape);   /* .shape */
    pb_msg(&type, 1, &tt);    /* TypeProto.tensor_type */
    pb_str(&vi, 1, name);     /* ValueInfoProto.name */
    pb_msg(&vi, 2, &type);    /* .type */
    *out = vi;
}

static int write_relu_onnx(const char *path) {
    pb node = {0}, graph = {0}, in = {0}, out = {0}, opset = {0}, model = {0};
    pb_str(&node, 1, "x");    /* NodeProto.input */
    pb_str(&node, 2, "y");    /* .output */
    pb_str(&node, 4, "Relu"); /* .op_type */
    value_info(&in, "x");
    value_info(&out, "y");
    pb_msg(&graph, 1, &node); /* GraphProto.node */
    pb_str(&graph, 2, "relu");
    pb_msg(&graph, 11, &in);  /* .input */
    pb_msg(&graph, 12, &out); /* .output */
    pb_int(&opset, 2, 13);    /* OperatorSetIdProto.version */
    pb_int(&model, 1, 7);     /* ModelProto.ir_version */
    pb_msg(&model, 7, &graph);
    pb_msg(&model, 8, &opset);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(model.b, 1, model.n, f);
    return fclose(f) || w != model.n ? -1 : 0;
}

/* ==================================================================
 * Clients
 * ================================================================== */

typedef struct {
    int port, prio, n, ok;
    int *until;      /* when set: requests until *until becomes 1 (n counts them) */
    char why[256];
} client;

/* Reads one HTTP response (headers + Content-Length body) into buf. */
static int read_response(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0) return -1;
        n += (size_t)r;
        buf[n] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) continue;
        const char *cl = strcasestr(buf, "content-length:");
        if (!cl) return -1;
        size_t want = (size_t)(end + 4 - buf) + (size_t)atol(cl + 15);
        if (n >= want) return 0;
        if (want >= cap) return -1;
    }
}

static void *client_main(void *arg) {
    client *c = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)c->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        snprintf(c->why, sizeof c->why, "connect failed");
        if (fd >= 0) close(fd);
        return NULL;
    }
    char body[256], req[512], resp[4096];
    for (int i = 0; c->until ? !__atomic_load_n(c->until, __ATOMIC_ACQUIRE) : i < c->n; i++) {
        if (c->until) c->n = i + 1;
        /* rows: [-1, i, -3, 4] -> relu [0, i, 0, 4] */
        int bl = snprintf(body, sizeof body,
                          "{\"id\":\"c%d-%d\",\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,4],"
                          "\"data\":[-1,%d,-3,4]}]}", c->prio, i, i);
        int rl = snprintf(req, sizeof req,
                          "POST /v2/models/relu/infer HTTP/1.1\r\nHost: t\r\nX-Priority: %d\r\nContent-Length: %d\r\n\r\n%s",
                          c->prio, bl, body);
        if (send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl || read_response(fd, resp, sizeof resp)) {
            snprintf(c->why, sizeof c->why, "request %d: no answer", i);
            break;
        }
        char want[64];
        snprintf(want, sizeof want, "\"data\":[0,%d,0,4]", i);
        if (strncmp(resp, "HTTP/1.1 200", 12) || !strstr(resp, want)) {
            snprintf(c->why, sizeof c->why, "request %d: %.200s", i, resp);
            break;
        }
        __atomic_fetch_add(&c->ok, 1, __ATOMIC_RELEASE); /* read by a waiting test while this runs */
    }
    close(fd);
    return NULL;
}

/* A repository kt_tmpdir()/NAME with the relu model (and config.yaml when
 * cfg is given), served by a started server with options o (repo set
 * here); NULL with e set when any step fails. */
static kl_server *relu_server(const char *name, const char *cfg, kl_serve_opts o, kl_err *e) {
    static char repo[1100]; /* o.repo outlives the call (the tests run one at a time) */
    char dir[1024], p[1200];
    snprintf(repo, sizeof repo, "%s/%s", kt_tmpdir(), name);
    snprintf(dir, sizeof dir, "%s/relu/1", repo);
    if (kl_mkdir_p(dir, e)) return NULL;
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    if (write_relu_onnx(p)) { kl_err_set(e, KL_EINVAL, "cannot write %s", p); return NULL; }
    snprintf(p, sizeof p, "%s/relu/config.yaml", repo);
    if (cfg && kl_write_file_atomic(p, cfg, strlen(cfg), e)) return NULL;
    o.repo = repo;
    kl_server *s = NULL;
    if (kl_server_new(&o, &s, e)) return NULL;
    if (kl_server_start(s, e)) { kl_server_free(s); return NULL; }
    return s;
}

KL_TEST(serve_loops_inline_and_workers_answer_all) {
    kl_err e = {0};
    /* every request must be answered: no shedding on saturation (a slow,
     * sanitized build keeps the loops busy for milliseconds) */
    const char *cfg = "max_batch_size: 16\ndynamic_batching:\n  max_queue_delay_us: 200\npriority_levels: 2\n"
                      "default_priority: 1\ninstances: 2\nqueue_policy:\n  2: {shed_busy_us: 0}\n";
    kl_serve_opts o = {0};
    o.workers = 2;
    o.http_threads = 2;
    o.probe_interval_s = 0.2;
    kl_server *s = relu_server("repo", cfg, o, &e);
    KT_CHECKF(s, "relu server: %s", e.msg);
    client c[6];
    pthread_t t[6];
    for (int i = 0; i < 6; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].port = kl_server_port(s);
        c[i].prio = 1 + i % 2;
        c[i].n = 40;
        pthread_create(&t[i], NULL, client_main, &c[i]);
    }
    for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
    int rc = kl_server_shutdown(s, &e);
    kl_server_free(s);
    KT_EQ_INT(rc, KL_OK);
    for (int i = 0; i < 6; i++) {
        if (c[i].ok != c[i].n) kt_fail(__FILE__, __LINE__, "client %d (priority %d): %d of %d answered: %s", i, c[i].prio,
                                       c[i].ok, c[i].n, c[i].why);
    }
}

/* ==================================================================
 * Held inline requests (the connection stays active while the request
 * waits): a request that times out in the queue (answered from the
 * reaper's thread), and a client that goes away while its request waits
 * ================================================================== */

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) { close(fd); fd = -1; }
    return fd;
}

static int send_infer(int fd, int i) {
    char body[256], req[512];
    int bl = snprintf(body, sizeof body,
                      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[-1,%d,-3,4]}]}", i);
    int rl = snprintf(req, sizeof req, "POST /v2/models/relu/infer HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s", bl,
                      body);
    return send(fd, req, (size_t)rl, MSG_NOSIGNAL) == rl ? 0 : -1;
}

KL_TEST(serve_loop_held_request_client_gone_and_timeout) {
    kl_err e = {0};
    /* a batch waits up to 3 s for more rows while some connection of the loop is idle */
    const char *cfg = "max_batch_size: 16\ndynamic_batching:\n  max_queue_delay_us: 3000000\npriority_levels: 2\ndefault_priority: 1\n"
                      "queue_policy:\n  1: {default_timeout_us: 300000}\n";
    kl_serve_opts o = {0};
    o.workers = 1;
    o.http_threads = 1;
    o.inline_us = 1000000; /* inline whatever the warm-up's time per row was */
    kl_server *s = relu_server("repo2", cfg, o, &e);
    KT_CHECKF(s, "relu server: %s", e.msg);
    int port = kl_server_port(s);
    char resp[4096];
    /* A's request times out in the queue (B idle keeps the batch waiting):
     * 503 from the reaper's thread, sent by the loop */
    int a = connect_to(port), b = connect_to(port);
    KT_CHECK(a >= 0 && b >= 0);
    usleep(100000); /* both accepted by the loop */
    int64_t t0 = kl_time_mono_ns();
    KT_CHECK(send_infer(a, 1) == 0);
    KT_CHECK(read_response(a, resp, sizeof resp) == 0);
    double secs = (kl_time_mono_ns() - t0) / 1e9;
    KT_CHECKF(!strncmp(resp, "HTTP/1.1 503", 12) && strstr(resp, "timed out"), "after %.2f s: %.300s", secs, resp);
    KT_CHECKF(secs < 2.0, "timeout answer after %.2f s", secs);
    /* A sends again and goes away while its request is held (the loop
     * notices when the timeout's answer cannot be sent); B's request then
     * is the loop's only one and runs at once */
    KT_CHECK(send_infer(a, 2) == 0);
    usleep(50000);
    close(a);
    usleep(600000);
    t0 = kl_time_mono_ns();
    KT_CHECK(send_infer(b, 3) == 0);
    KT_CHECK(read_response(b, resp, sizeof resp) == 0);
    secs = (kl_time_mono_ns() - t0) / 1e9;
    KT_CHECKF(!strncmp(resp, "HTTP/1.1 200", 12) && strstr(resp, "\"data\":[0,3,0,4]"), "after %.2f s: %.400s", (kl_time_mono_ns() - t0) / 1e9, resp);
    KT_CHECKF(secs < 2.0, "answer after %.2f s", secs);
    close(b);
    int rc = kl_server_shutdown(s, &e);
    kl_server_free(s);
    KT_EQ_INT(rc, KL_OK);
}

/* ==================================================================
 * With several loops keel accepts and gives each new connection to the
 * loop with the fewest: 9 connections split 5/4 (the kernel's
 * SO_REUSEPORT hash gave 9/7-or-worse splits of 16 most of the time)
 * ================================================================== */

#include "serve/serve_int.h"

KL_TEST(serve_loops_balance_connections) {
    kl_err e = {0};
    kl_serve_opts o = {0};
    o.workers = 1;
    o.http_threads = 2;
    kl_server *s = relu_server("repo3", NULL, o, &e);
    KT_CHECKF(s, "relu server: %s", e.msg);
    int fd[9], ok = 0;
    for (int i = 0; i < 9; i++) {
        fd[i] = connect_to(kl_server_port(s));
        /* one request each, answered: the connection is in a loop */
        if (fd[i] >= 0 && !send_infer(fd[i], i)) {
            char buf[2048];
            ssize_t n = recv(fd[i], buf, sizeof buf - 1, 0);
            if (n > 0) { buf[n] = 0; ok += strstr(buf, " 200 ") != NULL; }
        }
    }
    KT_EQ_INT(ok, 9);
    int l0 = atomic_load(&s->loops[0].load), l1 = atomic_load(&s->loops[1].load);
    KT_CHECKF(l0 + l1 == 9 && abs(l0 - l1) <= 1, "connections per loop: %d and %d", l0, l1);
    KT_CHECKF(s->lfd >= 0, "keel listens itself with 2 loops (lfd %d)", s->lfd);
    for (int i = 0; i < 9; i++)
        if (fd[i] >= 0) close(fd[i]);
    int rc = kl_server_shutdown(s, &e);
    kl_server_free(s);
    KT_EQ_INT(rc, KL_OK);
}

/* ==================================================================
 * Reserved instances: with 2 workers and a flood of priority-2 requests
 * (8 clients) while priority-1 traffic goes on, priority 2 never holds more
 * than instances - reserve_instances (default 1) = 1 worker, so a
 * priority-1 request always finds one; both levels are answered in full
 * (without the reserve, 2 priority-2 batches at once show up most runs)
 * ================================================================== */

typedef struct {
    kl_server *s;
    int stop;
    int max_low, max_all, samples;
} lrun_watch;

static void *watch_main(void *arg) {
    lrun_watch *w = arg;
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&w->s->lock);
        sv_model *m = kl__sv_model_find(w->s, "relu");
        if (m) {
            if (m->lrun[1] > w->max_low) w->max_low = m->lrun[1];
            if (m->running > w->max_all) w->max_all = m->running;
            w->samples++;
        }
        pthread_mutex_unlock(&w->s->lock);
        usleep(50);
    }
    return NULL;
}

/* threads of this process whose nice value (/proc/self/task/T/stat field
 * 19) differs from the main thread's; -1 when /proc cannot be read */
static int task_nice(const char *tid) {
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/self/task/%s/stat", tid);
    FILE *f = fopen(p, "r");
    if (!f) return -100;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *q = strrchr(buf, ')'); /* after the command name: field 3 on */
    int field = 2, v = -100;
    for (char *t = q ? strtok(q + 1, " ") : NULL; t; t = strtok(NULL, " "))
        if (++field == 19) { v = atoi(t); break; }
    return v;
}

static int threads_nicer_than_main(void) {
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    int base = task_nice(self), n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d || base == -100) { if (d) closedir(d); return -1; }
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.' && task_nice(de->d_name) != base) n++;
    closedir(d);
    return n;
}

KL_TEST(serve_sched_reserve_leaves_a_worker_for_high_priority) {
    kl_err e = {0};
    /* level 2 also runs its batches 5 nicer (where the process may lower
     * a thread's nice value again): after the flood no thread stays nicer */
    /* the reserve alone: no shedding on saturation (every request must be answered) */
    const char *cfg = "priority_levels: 2\ndefault_priority: 2\ninstances: 2\nqueue_policy:\n  2: {nice: 5, shed_busy_us: 0}\n";
    kl_serve_opts o = {0};
    o.workers = 2;
    o.http_threads = 1;
    o.inline_us = -1; /* every request on the workers */
    kl_server *s = relu_server("repo4", cfg, o, &e);
    KT_CHECKF(s, "relu server: %s", e.msg);
    int stop = 0;
    client hi = {.port = kl_server_port(s), .prio = 1, .until = &stop}, lo[8];
    pthread_t th, tl[8], tw;
    lrun_watch w = {.s = s};
    pthread_create(&th, NULL, client_main, &hi);
    for (int i = 0; i < 5000 && !__atomic_load_n(&hi.ok, __ATOMIC_ACQUIRE); i++) usleep(1000); /* priority 1 is recent */
    pthread_create(&tw, NULL, watch_main, &w);
    for (int i = 0; i < 8; i++) {
        memset(&lo[i], 0, sizeof lo[i]);
        lo[i].port = kl_server_port(s);
        lo[i].prio = 2;
        lo[i].n = 100;
        pthread_create(&tl[i], NULL, client_main, &lo[i]);
    }
    for (int i = 0; i < 8; i++) pthread_join(tl[i], NULL);
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tw, NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    /* priority 2 alone at the end: a worker's last run was a nicer one */
    client last = {.port = kl_server_port(s), .prio = 2, .n = 20};
    client_main(&last);
    int nicer = threads_nicer_than_main();
    int rc = kl_server_shutdown(s, &e);
    kl_server_free(s);
    KT_EQ_INT(rc, KL_OK);
    for (int i = 0; i < 8; i++)
        KT_CHECKF(lo[i].ok == lo[i].n, "low client %d: %d of %d answered: %s", i, lo[i].ok, lo[i].n, lo[i].why);
    KT_CHECKF(hi.ok == hi.n && hi.n > 0, "high client: %d of %d answered: %s", hi.ok, hi.n, hi.why);
    KT_CHECKF(last.ok == last.n, "last low client: %d of %d answered: %s", last.ok, last.n, last.why);
    KT_CHECKF(nicer == 0, "%d threads still nicer than the main thread after the flood", nicer);
    KT_CHECKF(w.samples > 0 && w.max_low == 1, "priority-2 batches at once: at most %d (want 1) in %d samples", w.max_low,
              w.samples);
}

/* ==================================================================
 * Deep readiness: ready only while every version's last warm-up or
 * health probe succeeded, recently; a failed probe (here: the probe
 * inputs made the wrong shape) makes the server and the model not ready
 * with the runtime's error as the reason, a good one makes them ready
 * again, and a probe older than 3 intervals + 10 s counts as none
 * ================================================================== */

KL_TEST(serve_ready_follows_the_health_probe) {
    kl_err e = {0};
    kl_serve_opts o = {0};
    o.workers = 1;
    o.probe_interval_s = 600; /* the background prober stays out of the way: probes run here */
    kl_server *s = relu_server("repo5", NULL, o, &e);
    KT_CHECKF(s, "relu server: %s", e.msg);
    char why[800];
    KT_CHECKF(kl__sv_ready(s, why, sizeof why), "not ready at start: %s", why);
    pthread_mutex_lock(&s->lock);
    sv_version *v = kl__sv_model_find(s, "relu")->ver[0];
    kl__sv_version_ref(v);
    pthread_mutex_unlock(&s->lock);
    v->warm[0].dims[1] = 2; /* the model takes [N, 4]: the probe inference fails */
    v->warm[0].nbytes = 2 * sizeof(float);
    kl_err pe = {0};
    KT_CHECK(kl__sv_version_probe(s, v, &pe) != KL_OK);
    KT_CHECK(!kl__sv_ready(s, why, sizeof why));
    KT_CONTAINS(why, "model relu version 1");
    KT_CONTAINS(why, pe.msg);
    v->warm[0].dims[1] = 4;
    v->warm[0].nbytes = 4 * sizeof(float);
    KT_OK(kl__sv_version_probe(s, v, &e), &e);
    KT_CHECKF(kl__sv_ready(s, why, sizeof why), "not ready after a good probe: %s", why);
    pthread_mutex_lock(&s->lock);
    v->probe_ns -= (int64_t)((3 * 600 + 11) * 1e9); /* the last probe is stale */
    pthread_mutex_unlock(&s->lock);
    KT_CHECK(!kl__sv_ready(s, why, sizeof why));
    KT_CONTAINS(why, "no recent health probe");
    KT_OK(kl__sv_version_probe(s, v, &e), &e);
    KT_CHECK(kl__sv_ready(s, NULL, 0));
    size_t len = 0;
    char *m = kl__sv_metrics_render(s, &len);
    KT_CONTAINS(m, "keel_model_probes_total{model=\"relu\",result=\"failure\"} 1\n");
    free(m);
    kl__sv_version_unref(v);
    int rc = kl_server_shutdown(s, &e);
    kl_server_free(s);
    KT_EQ_INT(rc, KL_OK);
}
