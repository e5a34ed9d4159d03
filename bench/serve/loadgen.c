/* bench/serve/loadgen.c: an open-loop HTTP/1.1 load generator for keel serve
 * benchmarks (not part of libkeel; built by the bench scripts with
 * `cc -O2 -o build/loadgen bench/serve/loadgen.c -lm`).
 *
 * Unlike wrk (closed loop: each connection sends its next request when the
 * last one is answered, so a slow or shedding server changes the offered
 * load), loadgen sends at a fixed target rate for D seconds whatever the
 * server does: request i is *scheduled* at t0 + i/rate (uniform) or at the
 * arrival times of a Poisson process (--poisson), and its latency is measured
 * from that scheduled time. When no connection is free the request waits in
 * the client and that wait counts (no coordinated omission); loadgen opens
 * new keep-alive connections up to --max-conns. Each request gets a class
 * (--class NAME:SHARE:HEADER, e.g. 20 % "X-Priority: 1") drawn by a seeded
 * RNG, so a run is reproducible.
 *
 *   loadgen --url http://127.0.0.1:8000/v2/models/m/infer --rate 300 --duration 10
 *           --body body.bin [--header-len N] [--content-type T] [--poisson] [--seed 1]
 *           [--conns 8] [--max-conns 256] [--drain 10] [--timeout 10]
 *           [--class 'high:0.2:X-Priority: 1' --class 'low:0.8:X-Priority: 2'] [--json]
 *
 * --header-len N adds `Inference-Header-Content-Length: N` (KServe binary
 * extension: the body is N bytes of JSON then the tensor bytes). Shares are
 * normalised; without --class all requests are one class "all". After the
 * schedule ends loadgen waits up to --drain seconds for answers; a request
 * with no answer --timeout seconds after its scheduled time counts as a
 * timeout. Output per class: scheduled, sent, answered, 2xx, counts by HTTP
 * status, connection errors (refused/reset/closed mid-answer), timeouts,
 * latency p50/p90/p99/p99.9/max of the 2xx answers (ms), the mean wait
 * in the client before sending, and the achieved send rate.
 * Exit 0 on a completed run (whatever the server answered), 1 on a bad
 * URL/body, 2 on usage errors.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLASSES 8

/* ---------------------------------------------------------------- util */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(int code, const char *fmt, const char *arg) {
    fprintf(stderr, "loadgen: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(code);
}

static uint64_t rng_state;
static double rng_uniform(void) { /* splitmix64 -> (0, 1] */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 1.0) / 9007199254740992.0;
}

/* ---------------------------------------------------------------- classes */

typedef struct {
    char name[64];
    double share;
    char *req;          /* head + body */
    size_t req_len;
    /* results */
    int64_t scheduled, sent, answered, ok, conn_err, timeouts;
    int64_t status[600];
    int64_t *lat;       /* ns, 2xx only */
    int64_t nlat, caplat;
    double wait_sum;    /* ns waited in the client before the send began */
    int64_t first_send, last_send;
} klass;

static klass cls[MAX_CLASSES];
static int ncls;

/* ---------------------------------------------------------------- requests */

typedef struct {
    int cls;
    int64_t sched;      /* scheduled send time */
} req;

/* FIFO of scheduled requests not yet on a connection */
static req *pend;
static size_t pend_head, pend_tail, pend_cap;

static void pend_push(req r) {
    if (pend_tail == pend_cap) {
        if (pend_head > 0) {
            memmove(pend, pend + pend_head, (pend_tail - pend_head) * sizeof *pend);
            pend_tail -= pend_head;
            pend_head = 0;
        } else {
            pend_cap = pend_cap ? 2 * pend_cap : 1024;
            pend = realloc(pend, pend_cap * sizeof *pend);
            if (!pend) die(1, "%s", "out of memory");
        }
    }
    pend[pend_tail++] = r;
}

/* ---------------------------------------------------------------- connections */

enum { C_CONNECTING, C_IDLE, C_BUSY };

typedef struct {
    int fd, state, used;
    req cur;
    size_t woff;        /* bytes of the request written */
    char *rbuf;
    size_t rlen, rcap;
} conn;

static conn *conns;
static int nconns, capconns, nopen;
static struct sockaddr_storage addr;
static socklen_t addrlen;
static int epfd;

static int conn_open(void) {
    int i;
    for (i = 0; i < nconns; i++)
        if (!conns[i].used) break;
    if (i == nconns) {
        if (nconns == capconns) return -1;
        nconns++;
    }
    conn *c = &conns[i];
    memset(c, 0, sizeof *c);
    c->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, addrlen) && errno != EINPROGRESS) {
        close(c->fd);
        return -1;
    }
    c->used = 1;
    c->state = C_CONNECTING;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u32 = (uint32_t)i};
    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    nopen++;
    return i;
}

static void conn_close(conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->rbuf);
    c->rbuf = NULL;
    c->used = 0;
    nopen--;
}

static void want_write(conn *c, int i, int on) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0), .data.u32 = (uint32_t)i};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* the request on c failed (connection error): counted, connection dropped */
static void conn_fail(conn *c) {
    if (c->state == C_BUSY) cls[c->cur.cls].conn_err++;
    conn_close(c);
}

static void lat_add(klass *k, int64_t v) {
    if (k->nlat == k->caplat) {
        k->caplat = k->caplat ? 2 * k->caplat : 4096;
        k->lat = realloc(k->lat, (size_t)k->caplat * sizeof *k->lat);
        if (!k->lat) die(1, "%s", "out of memory");
    }
    k->lat[k->nlat++] = v;
}

/* writes what it can of c's request; 0 ok, -1 error */
static int conn_write(conn *c, int i) {
    klass *k = &cls[c->cur.cls];
    while (c->woff < k->req_len) {
        ssize_t n = send(c->fd, k->req + c->woff, k->req_len - c->woff, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) { want_write(c, i, 1); return 0; }
            if (errno == EINTR) continue;
            return -1;
        }
        c->woff += (size_t)n;
    }
    want_write(c, i, 0);
    return 0;
}

static int conn_send(conn *c, int i, req r) {
    klass *k = &cls[r.cls];
    int64_t t = now_ns();
    c->cur = r;
    c->state = C_BUSY;
    c->woff = 0;
    c->rlen = 0;
    k->sent++;
    k->wait_sum += (double)(t - r.sched);
    if (!k->first_send) k->first_send = t;
    k->last_send = t;
    return conn_write(c, i);
}

/* case-insensitive header lookup in head[0..n) (after the status line) */
static const char *find_header(const char *head, size_t n, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = head; p && p < head + n;) {
        const char *eol = memmem(p, (size_t)(head + n - p), "\r\n", 2);
        if (!eol) break;
        if ((size_t)(eol - p) > nl && !strncasecmp(p, name, nl) && p[nl] == ':') {
            p += nl + 1;
            while (*p == ' ' || *p == '\t') p++;
            return p;
        }
        p = eol + 2;
    }
    return NULL;
}

/* reads c's answer; returns 1 when a whole answer was handled, 0 when more
 * is needed, -1 on error/EOF */
static int conn_read(conn *c) {
    for (;;) {
        if (c->rcap - c->rlen < 65536) {
            c->rcap = c->rcap ? 2 * c->rcap : 131072;
            c->rbuf = realloc(c->rbuf, c->rcap);
            if (!c->rbuf) die(1, "%s", "out of memory");
        }
        ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen - 1, 0);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) return -1;
        c->rlen += (size_t)n;
    }
    if (c->state != C_BUSY) return c->rlen ? -1 : 0; /* unasked bytes */
    c->rbuf[c->rlen] = 0;
    char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t hlen = (size_t)(end - c->rbuf) + 4;
    int status = 0;
    if (sscanf(c->rbuf, "HTTP/1.%*d %d", &status) != 1) return -1;
    const char *cl = find_header(c->rbuf, hlen, "Content-Length");
    if (!cl) return -1; /* keel always sends one */
    size_t blen = strtoull(cl, NULL, 10);
    if (c->rlen < hlen + blen) return 0;
    int64_t t = now_ns();
    klass *k = &cls[c->cur.cls];
    k->answered++;
    k->status[status > 0 && status < 600 ? status : 0]++;
    if (status >= 200 && status < 300) {
        k->ok++;
        lat_add(k, t - c->cur.sched);
    }
    const char *cn = find_header(c->rbuf, hlen, "Connection");
    int close_it = (cn && !strncasecmp(cn, "close", 5)) || c->woff < k->req_len || c->rlen > hlen + blen;
    c->state = C_IDLE;
    c->rlen = 0;
    return close_it ? 2 : 1;
}

/* ---------------------------------------------------------------- output */

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const klass *k, double p) { /* nearest rank, ms */
    if (!k->nlat) return 0;
    int64_t i = (int64_t)ceil(p / 100.0 * (double)k->nlat) - 1;
    if (i < 0) i = 0;
    if (i >= k->nlat) i = k->nlat - 1;
    return (double)k->lat[i] / 1e6;
}

static void report(int json, double rate, double dur, int poisson, uint64_t seed, int maxc) {
    if (json) printf("{\"rate\": %g, \"duration_s\": %g, \"schedule\": \"%s\", \"seed\": %llu, \"max_conns_used\": %d, \"classes\": [",
                     rate, dur, poisson ? "poisson" : "uniform", (unsigned long long)seed, maxc);
    else printf("target %.1f req/s for %.1f s (%s, seed %llu), %d connections used at most\n", rate, dur,
                poisson ? "poisson" : "uniform", (unsigned long long)seed, maxc);
    for (int i = 0; i < ncls; i++) {
        klass *k = &cls[i];
        qsort(k->lat, (size_t)k->nlat, sizeof *k->lat, cmp64);
        double span = (double)(k->last_send - k->first_send) / 1e9;
        double srate = span > 0 ? (double)(k->sent - 1) / span : 0;
        double wait = k->sent ? k->wait_sum / (double)k->sent / 1e6 : 0;
        if (json) {
            printf("%s{\"name\": \"%s\", \"share\": %g, \"scheduled\": %lld, \"sent\": %lld, \"answered\": %lld, "
                   "\"ok\": %lld, \"conn_errors\": %lld, \"timeouts\": %lld, \"send_rate\": %.2f, "
                   "\"client_wait_ms_mean\": %.3f, \"status\": {",
                   i ? ", " : "", k->name, k->share, (long long)k->scheduled, (long long)k->sent,
                   (long long)k->answered, (long long)k->ok, (long long)k->conn_err, (long long)k->timeouts, srate, wait);
            int first = 1;
            for (int s = 0; s < 600; s++)
                if (k->status[s]) { printf("%s\"%d\": %lld", first ? "" : ", ", s, (long long)k->status[s]); first = 0; }
            printf("}, \"latency_ms\": {\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p99.9\": %.3f, \"max\": %.3f}}",
                   pct(k, 50), pct(k, 90), pct(k, 99), pct(k, 99.9), pct(k, 100));
        } else {
            printf("%-8s scheduled %lld sent %lld (%.1f/s) answered %lld 2xx %lld conn_err %lld timeouts %lld", k->name,
                   (long long)k->scheduled, (long long)k->sent, srate, (long long)k->answered, (long long)k->ok,
                   (long long)k->conn_err, (long long)k->timeouts);
            for (int s = 0; s < 600; s++)
                if (k->status[s] && (s < 200 || s >= 300)) printf(" %d:%lld", s, (long long)k->status[s]);
            printf("\n         latency ms (2xx) p50 %.3f p90 %.3f p99 %.3f p99.9 %.3f max %.3f; client wait mean %.3f ms\n",
                   pct(k, 50), pct(k, 90), pct(k, 99), pct(k, 99.9), pct(k, 100), wait);
        }
    }
    if (json) printf("]}\n");
}

/* ---------------------------------------------------------------- main */

static void usage(void) {
    fprintf(stderr, "usage: loadgen --url http://HOST:PORT/PATH --rate R --duration S --body FILE [--header-len N]\n"
                    "               [--content-type T] [--poisson] [--seed N] [--conns N] [--max-conns N] [--drain S]\n"
                    "               [--timeout S] [--class 'NAME:SHARE:Header: value' ...] [--json]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *url = NULL, *body_path = NULL, *ctype = NULL;
    double rate = 0, dur = 0, drain = 10, tmo = 10;
    long header_len = -1;
    int poisson = 0, json = 0, init_conns = 8, max_conns = 256;
    uint64_t seed = 1;
    const char *class_spec[MAX_CLASSES];
    int nspec = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && ++i)
        if (OPT("--url")) url = v;
        else if (OPT("--rate")) rate = atof(v);
        else if (OPT("--duration")) dur = atof(v);
        else if (OPT("--body")) body_path = v;
        else if (OPT("--header-len")) header_len = atol(v);
        else if (OPT("--content-type")) ctype = v;
        else if (OPT("--seed")) seed = strtoull(v, NULL, 10);
        else if (OPT("--conns")) init_conns = atoi(v);
        else if (OPT("--max-conns")) max_conns = atoi(v);
        else if (OPT("--drain")) drain = atof(v);
        else if (OPT("--timeout")) tmo = atof(v);
        else if (OPT("--class")) { if (nspec == MAX_CLASSES) usage(); class_spec[nspec++] = v; }
        else if (!strcmp(a, "--poisson")) poisson = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else usage();
#undef OPT
    }
    if (!url || !body_path || rate <= 0 || dur <= 0 || max_conns < 1 || init_conns < 0) usage();
    if (init_conns > max_conns) init_conns = max_conns;
    rng_state = seed;

    /* URL: http://host:port/path */
    if (strncmp(url, "http://", 7)) die(1, "only http:// URLs: %s", url);
    char host[256], port[16] = "80";
    const char *hp = url + 7, *path = strchr(hp, '/');
    size_t hl = path ? (size_t)(path - hp) : strlen(hp);
    if (!path) path = "/";
    if (hl >= sizeof host) die(1, "host too long: %s", url);
    memcpy(host, hp, hl);
    host[hl] = 0;
    char *colon = strrchr(host, ':');
    if (colon) { snprintf(port, sizeof port, "%s", colon + 1); *colon = 0; }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai)) die(1, "cannot resolve %s", host);
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);

    /* body */
    FILE *f = fopen(body_path, "rb");
    if (!f) die(1, "cannot read %s", body_path);
    struct stat st;
    fstat(fileno(f), &st);
    size_t blen = (size_t)st.st_size;
    char *body = malloc(blen + 1);
    if (!body || fread(body, 1, blen, f) != blen) die(1, "cannot read %s", body_path);
    fclose(f);
    if (!ctype) ctype = header_len >= 0 ? "application/octet-stream" : "application/json";

    /* classes */
    if (!nspec) class_spec[nspec++] = "all:1:";
    double total = 0;
    for (int i = 0; i < nspec; i++) {
        klass *k = &cls[ncls++];
        const char *s = class_spec[i], *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2 || (size_t)(c1 - s) >= sizeof k->name) die(2, "bad --class '%s' (NAME:SHARE:HEADER)", s);
        memcpy(k->name, s, (size_t)(c1 - s));
        k->share = atof(c1 + 1);
        if (k->share < 0) die(2, "bad share in '%s'", s);
        total += k->share;
        const char *hdr = c2 + 1;
        char head[2048];
        char extra[256] = "";
        if (header_len >= 0) snprintf(extra, sizeof extra, "Inference-Header-Content-Length: %ld\r\n", header_len);
        int n = snprintf(head, sizeof head,
                         "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s%s\r\n",
                         path, host, port, ctype, blen, extra, hdr, *hdr ? "\r\n" : "");
        if (n < 0 || (size_t)n >= sizeof head) die(2, "header too long in '%s'", s);
        k->req_len = (size_t)n + blen;
        k->req = malloc(k->req_len);
        if (!k->req) die(1, "%s", "out of memory");
        memcpy(k->req, head, (size_t)n);
        memcpy(k->req + n, body, blen);
    }
    if (total <= 0) die(2, "%s", "class shares sum to 0");

    epfd = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &tev);
    capconns = max_conns;
    conns = calloc((size_t)capconns, sizeof *conns);
    for (int i = 0; i < init_conns; i++) conn_open();
    int maxused = 0;

    /* the run */
    int64_t t0 = now_ns() + 100000000LL; /* 100 ms to connect */
    int64_t tend = t0 + (int64_t)(dur * 1e9), next = t0, hard_end = tend + (int64_t)(drain * 1e9);
    int64_t ival = (int64_t)(1e9 / rate);
    struct epoll_event evs[256];
    for (;;) {
        int64_t t = now_ns();
        /* schedule everything due */
        while (next <= t && next < tend) {
            double u = rng_uniform() * total;
            int c = 0;
            while (c < ncls - 1 && u > cls[c].share) { u -= cls[c].share; c++; }
            cls[c].scheduled++;
            pend_push((req){c, next});
            next += poisson ? (int64_t)(-log(rng_uniform()) * 1e9 / rate) : ival;
        }
        /* hand pending requests to idle connections, open more when none */
        int busy = 0;
        for (int i = 0; i < nconns && pend_head < pend_tail; i++) {
            conn *c = &conns[i];
            if (c->used && c->state == C_IDLE && conn_send(c, i, pend[pend_head++])) conn_fail(c);
        }
        int connecting = 0;
        for (int i = 0; i < nconns; i++) {
            if (conns[i].used && conns[i].state == C_CONNECTING) connecting++;
            if (conns[i].used && conns[i].state == C_BUSY) busy++;
        }
        while ((int)(pend_tail - pend_head) > connecting && nopen < max_conns) {
            if (conn_open() < 0) break;
            connecting++;
        }
        if (busy > maxused) maxused = busy;
        /* client-side timeouts */
        int64_t lim = (int64_t)(tmo * 1e9);
        for (int i = 0; i < nconns; i++) {
            conn *c = &conns[i];
            if (c->used && c->state == C_BUSY && t - c->cur.sched > lim) {
                cls[c->cur.cls].timeouts++;
                conn_close(c);
            }
        }
        while (pend_head < pend_tail && t - pend[pend_head].sched > lim) cls[pend[pend_head++].cls].timeouts++;
        if (next >= tend && pend_head == pend_tail && !busy) break;
        if (t > hard_end) {
            for (int i = 0; i < nconns; i++)
                if (conns[i].used && conns[i].state == C_BUSY) { cls[conns[i].cur.cls].timeouts++; conn_close(&conns[i]); }
            while (pend_head < pend_tail) cls[pend[pend_head++].cls].timeouts++;
            break;
        }
        /* wait for the network or the next scheduled send */
        int64_t wake = next < tend ? next : t + 10000000LL;
        struct itimerspec its = {.it_value = {.tv_sec = wake / 1000000000LL, .tv_nsec = wake % 1000000000LL}};
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        int n = epoll_wait(epfd, evs, 256, 20);
        for (int e = 0; e < n; e++) {
            uint32_t id = evs[e].data.u32;
            if (id == UINT32_MAX) {
                uint64_t x;
                if (read(tfd, &x, sizeof x) < 0) { /* nothing to do */ }
                continue;
            }
            conn *c = &conns[id];
            if (!c->used) continue;
            uint32_t ev = evs[e].events;
            if (c->state == C_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err || (ev & (EPOLLERR | EPOLLHUP))) { conn_close(c); continue; }
                if (ev & EPOLLOUT) {
                    c->state = C_IDLE;
                    want_write(c, (int)id, 0);
                    if (pend_head < pend_tail && conn_send(c, (int)id, pend[pend_head++])) conn_fail(c);
                }
                continue;
            }
            if ((ev & EPOLLOUT) && c->state == C_BUSY && c->woff < cls[c->cur.cls].req_len) {
                if (conn_write(c, (int)id)) { conn_fail(c); continue; }
            }
            if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) {
                int r = conn_read(c);
                if (r < 0) conn_fail(c);
                else if (r == 2) conn_close(c);
                else if (r == 1 && pend_head < pend_tail && conn_send(c, (int)id, pend[pend_head++])) conn_fail(c);
            }
        }
    }
    report(json, rate, dur, poisson, seed, maxused);
    return 0;
}
