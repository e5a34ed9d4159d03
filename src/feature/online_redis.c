/* The Redis backend of the online store (redis://host:port/N): each window
 * feature's per-entity history is a sorted set whose members all have score
 * 0, so Redis orders them bytewise — a member is the event's time and value
 * in order-preserving big-endian bytes (the (ts, value) order of
 * kl__fevent_cmp) and a sequence suffix that keeps equal events apart. One
 * Lua script (SCRIPT LOAD once per connection, then EVALSHA) appends a
 * record's events and prunes each history as kl__tf_window_keep_from does,
 * atomically, so any number of keel processes sharing the server compute
 * the same windows. Connections come from a small pool; every connect and
 * command has a timeout, a broken connection is dropped and the next call
 * reconnects (after a short back-off when the server was just found down). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "feature/fstore_int.h"

#define FSR_POOL       16
#define FSR_SIGN       0x8000000000000000ULL
#define FSR_BACKOFF_NS 100000000LL /* after a failed connect, fail fast for 100 ms */

struct kl__fsr {
    const kl_features *f;
    char host[256], pass[256], prefix[128];
    char name[400]; /* redis://host:port/N (no password) */
    int port, db;
    int connect_ms, timeout_ms;
    char sha[48];       /* of the append script (SCRIPT LOAD answers it) */
    pthread_mutex_t mu; /* the pool */
    redisContext *pool[FSR_POOL];
    int npool;
    _Atomic int64_t down_until; /* monotonic ns: connects fail fast before it */
};

/* KEYS[i]: one history; ARGV[3i-2]: the event (16 bytes: time, value),
 * ARGV[3i-1]: events kept before the newest time, ARGV[3i]: within in µs as
 * 8 big-endian bytes (all zero: no time limit). Equal events get a growing
 * 8-hex-digit suffix. Pruning keeps every event at the newest time, the
 * `events` before it, and of those only the ones at or after newest - within. */
static const char append_lua[] =
    "local function sub(a, b)\n"
    "  local r, borrow = {}, 0\n"
    "  for i = 8, 1, -1 do\n"
    "    local d = a:byte(i) - b:byte(i) - borrow\n"
    "    if d < 0 then d = d + 256; borrow = 1 else borrow = 0 end\n"
    "    r[i] = string.char(d)\n"
    "  end\n"
    "  if borrow == 1 then return string.rep('\\0', 8) end\n"
    "  return table.concat(r)\n"
    "end\n"
    "local zero = string.rep('\\0', 8)\n"
    "local top = string.rep('\\255', 8)\n"
    "for i = 1, #KEYS do\n"
    "  local k, p = KEYS[i], ARGV[3 * i - 2]\n"
    "  local events, within = tonumber(ARGV[3 * i - 1]), ARGV[3 * i]\n"
    "  local seq = 0\n"
    "  local last = redis.call('ZREVRANGEBYLEX', k, '[' .. p .. top, '[' .. p, 'LIMIT', 0, 1)\n"
    "  if #last > 0 then seq = tonumber(string.sub(last[1], 17), 16) + 1 end\n"
    "  redis.call('ZADD', k, 0, p .. string.format('%08x', seq))\n"
    "  local newest = string.sub(redis.call('ZRANGE', k, -1, -1)[1], 1, 8)\n"
    "  local lo = redis.call('ZLEXCOUNT', k, '-', '(' .. newest) - events\n"
    "  if lo < 0 then lo = 0 end\n"
    "  if within ~= zero then\n"
    "    local c = redis.call('ZLEXCOUNT', k, '-', '(' .. sub(newest, within))\n"
    "    if c > lo then lo = c end\n"
    "  end\n"
    "  if lo > 0 then redis.call('ZREMRANGEBYRANK', k, 0, lo - 1) end\n"
    "end\n"
    "return #KEYS\n";

/* ==================================================================
 * Encoding
 * ================================================================== */

static void be64(uint64_t u, char *p) {
    for (int i = 0; i < 8; i++) p[i] = (char)(u >> (56 - 8 * i));
}
static uint64_t rd_be64(const char *p) {
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = u << 8 | (uint8_t)p[i];
    return u;
}
/* the bits of v ordered as kl__fevent_cmp orders values (dkey) */
static uint64_t vkey(double v) {
    int64_t b;
    memcpy(&b, &v, 8);
    if (b < 0) b = (int64_t)((uint64_t)b ^ 0x7fffffffffffffffULL);
    return (uint64_t)b ^ FSR_SIGN;
}
static double vkey_inv(uint64_t u) {
    int64_t b = (int64_t)(u ^ FSR_SIGN);
    if (b < 0) b = (int64_t)((uint64_t)b ^ 0x7fffffffffffffffULL);
    double v;
    memcpy(&v, &b, 8);
    return v;
}
void kl__fsr_encode(fevent x, char out[16]) {
    be64((uint64_t)x.ts ^ FSR_SIGN, out);
    be64(vkey(x.v), out + 8);
}
fevent kl__fsr_decode(const char in[16]) {
    return (fevent){(int64_t)(rd_be64(in) ^ FSR_SIGN), vkey_inv(rd_be64(in + 8))};
}

/* keel:fs:<feature_hash 16>:<feature>:<entity bytes> (prefix from the URL) */
static char *key_of(const kl__fsr *r, const feat *F, const char *k, size_t kn, size_t *len) {
    size_t pn = strlen(r->prefix), fn = strlen(F->name);
    char *b = malloc(pn + 16 + 2 + fn + kn + 1);
    if (!b) return NULL;
    memcpy(b, r->prefix, pn);
    memcpy(b + pn, kl_features_hash(r->f), 16);
    b[pn + 16] = ':';
    memcpy(b + pn + 17, F->name, fn);
    b[pn + 17 + fn] = ':';
    if (kn) memcpy(b + pn + 18 + fn, k, kn);
    *len = pn + 18 + fn + kn;
    return b;
}

/* ==================================================================
 * URL
 * ================================================================== */

int kl__fsr_is_url(const char *name) { return name && !strncmp(name, "redis://", 8); }

static int url_int(const char *v, size_t n, int lo, int hi, int *out) {
    char b[16];
    if (!n || n >= sizeof b) return -1;
    memcpy(b, v, n);
    b[n] = 0;
    int64_t x;
    if (kl_parse_int64(b, &x) || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

/* redis://[:PASSWORD@]HOST[:PORT][/DB][?timeout_ms=N&connect_timeout_ms=N&prefix=P] */
static int url_parse(kl__fsr *r, const char *url, kl_err *e) {
    const char *p = url + 8, *end = p + strcspn(p, "/?");
    const char *at = memchr(p, '@', (size_t)(end - p));
    r->port = 6379;
    r->connect_ms = 500;
    r->timeout_ms = 250;
    snprintf(r->prefix, sizeof r->prefix, "keel:fs:");
    if (at) {
        const char *pw = memchr(p, ':', (size_t)(at - p));
        pw = pw ? pw + 1 : p;
        if ((size_t)(at - pw) >= sizeof r->pass) return kl_err_set(e, KL_EINVAL, "%s: password too long", url);
        memcpy(r->pass, pw, (size_t)(at - pw));
        p = at + 1;
    }
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *hend = colon ? colon : end;
    if (hend == p || (size_t)(hend - p) >= sizeof r->host)
        return kl_err_set(e, KL_EINVAL, "%s: expected redis://HOST[:PORT][/DB]", url);
    memcpy(r->host, p, (size_t)(hend - p));
    if (colon && url_int(colon + 1, (size_t)(end - colon - 1), 1, 65535, &r->port))
        return kl_err_set(e, KL_EINVAL, "%s: port: expected 1..65535", url);
    p = end;
    if (*p == '/') {
        size_t n = strcspn(p + 1, "?");
        if (n && url_int(p + 1, n, 0, 1000000, &r->db))
            return kl_err_set(e, KL_EINVAL, "%s: database: expected a number", url);
        p += 1 + n;
    }
    if (*p == '?') p++;
    while (*p) {
        size_t n = strcspn(p, "&"), kn = strcspn(p, "=");
        if (kn >= n) return kl_err_set(e, KL_EINVAL, "%s: expected KEY=VALUE in the query", url);
        const char *v = p + kn + 1;
        size_t vn = n - kn - 1;
        int bad = 0;
        if (kn == 10 && !strncmp(p, "timeout_ms", kn)) bad = url_int(v, vn, 1, 600000, &r->timeout_ms);
        else if (kn == 18 && !strncmp(p, "connect_timeout_ms", kn)) bad = url_int(v, vn, 1, 600000, &r->connect_ms);
        else if (kn == 6 && !strncmp(p, "prefix", kn) && vn < sizeof r->prefix) {
            memcpy(r->prefix, v, vn);
            r->prefix[vn] = 0;
        } else
            return kl_err_set(e, KL_EINVAL, "%s: unknown parameter '%.*s' (timeout_ms, connect_timeout_ms, prefix)",
                              url, (int)kn, p);
        if (bad) return kl_err_set(e, KL_EINVAL, "%s: %.*s: expected 1..600000 (ms)", url, (int)kn, p);
        p += n + (p[n] == '&');
    }
    snprintf(r->name, sizeof r->name, "redis://%s:%d/%d", r->host, r->port, r->db);
    return KL_OK;
}

/* ==================================================================
 * Connections
 * ================================================================== */

static int down(kl__fsr *r, kl_err *e, const char *what, const char *why) {
    return kl_err_set(e, KL_ETIMEOUT, "online store %s: %s: %s", r->name, what, why);
}

/* one command on a fresh connection; the reply is checked for an error */
static int setup_cmd(kl__fsr *r, redisContext *c, kl_err *e, const char *what, int argc, const char **argv,
                     const size_t *len) {
    redisReply *y = redisCommandArgv(c, argc, argv, len);
    if (!y) return down(r, e, what, c->errstr);
    int rc = KL_OK;
    if (y->type == REDIS_REPLY_ERROR) rc = kl_err_set(e, KL_EINVAL, "online store %s: %s: %s", r->name, what, y->str);
    else if (!strcmp(what, "SCRIPT LOAD") && y->type == REDIS_REPLY_STRING && y->len < (int)sizeof r->sha) {
        pthread_mutex_lock(&r->mu);
        memcpy(r->sha, y->str, (size_t)y->len);
        r->sha[y->len] = 0;
        pthread_mutex_unlock(&r->mu);
    }
    freeReplyObject(y);
    return rc;
}

static int connect_one(kl__fsr *r, redisContext **out, kl_err *e) {
    *out = NULL;
    int64_t now = kl_time_mono_ns();
    if (now < atomic_load(&r->down_until)) return down(r, e, "connect", "the server was unreachable moments ago");
    struct timeval ct = {r->connect_ms / 1000, (r->connect_ms % 1000) * 1000};
    struct timeval tt = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(r->host, r->port, ct);
    if (!c || c->err) {
        int rc = down(r, e, "connect", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        atomic_store(&r->down_until, kl_time_mono_ns() + FSR_BACKOFF_NS);
        return rc;
    }
    redisSetTimeout(c, tt);
    redisEnableKeepAlive(c);
    int rc = KL_OK;
    if (r->pass[0]) {
        const char *av[] = {"AUTH", r->pass};
        size_t al[] = {4, strlen(r->pass)};
        rc = setup_cmd(r, c, e, "AUTH", 2, av, al);
    }
    char db[16];
    snprintf(db, sizeof db, "%d", r->db);
    const char *sv[] = {"SELECT", db};
    size_t sl[] = {6, strlen(db)};
    if (!rc && r->db) rc = setup_cmd(r, c, e, "SELECT", 2, sv, sl);
    const char *lv[] = {"SCRIPT", "LOAD", append_lua};
    size_t ll[] = {6, 4, sizeof append_lua - 1};
    if (!rc) rc = setup_cmd(r, c, e, "SCRIPT LOAD", 3, lv, ll);
    if (rc) {
        redisFree(c);
        return rc;
    }
    *out = c;
    return KL_OK;
}

/* *fresh: 1 when the connection was just made (0: from the pool, maybe
 * stale after a server restart) */
static int acquire(kl__fsr *r, redisContext **out, int *fresh, kl_err *e) {
    pthread_mutex_lock(&r->mu);
    redisContext *c = r->npool ? r->pool[--r->npool] : NULL;
    pthread_mutex_unlock(&r->mu);
    *fresh = !c;
    if (c) {
        *out = c;
        return KL_OK;
    }
    return connect_one(r, out, e);
}

/* The connection was closed under it (server restarted or gone), not slow. */
static int conn_lost(const redisContext *c, int err_no) {
    return c->err == REDIS_ERR_EOF || (c->err == REDIS_ERR_IO && err_no != EAGAIN && err_no != EWOULDBLOCK);
}

/* Back to the pool, unless it broke (then the next call reconnects); a lost
 * connection drops the idle ones too (they went with the same server). */
static void release(kl__fsr *r, redisContext *c, int lost) {
    if (!c) return;
    redisContext *drop[FSR_POOL];
    int ndrop = 0;
    pthread_mutex_lock(&r->mu);
    if (!c->err && r->npool < FSR_POOL) {
        r->pool[r->npool++] = c;
        c = NULL;
    } else if (lost) {
        while (r->npool) drop[ndrop++] = r->pool[--r->npool];
    }
    pthread_mutex_unlock(&r->mu);
    if (c) redisFree(c);
    while (ndrop) redisFree(drop[--ndrop]);
}

/* a reply of a broken connection (timeout, reset): the error, the connection dropped */
static int io_err(kl__fsr *r, redisContext *c, kl_err *e, const char *what) {
    int rc =
        down(r, e, what,
             c->err == REDIS_ERR_IO || c->err == REDIS_ERR_EOF ? "no answer in time or connection lost" : c->errstr);
    if (!c->err) c->err = REDIS_ERR_OTHER;
    return rc;
}

/* ==================================================================
 * Open, append, read, ping
 * ================================================================== */

int kl__fsr_open(const kl_features *f, const char *url, int lazy, kl__fsr **out, kl_err *e) {
    *out = NULL;
    kl__fsr *r = calloc(1, sizeof *r);
    if (!r) return kl_err_set(e, KL_ENOMEM, "out of memory");
    r->f = f;
    pthread_mutex_init(&r->mu, NULL);
    int rc = url_parse(r, url, e);
    redisContext *c = NULL;
    if (!rc && !lazy) rc = connect_one(r, &c, e);
    if (rc) {
        kl__fsr_free(r);
        return rc;
    }
    release(r, c, 0);
    *out = r;
    return KL_OK;
}

void kl__fsr_free(kl__fsr *r) {
    if (!r) return;
    for (int i = 0; i < r->npool; i++) redisFree(r->pool[i]);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

const char *kl__fsr_name(const kl__fsr *r) { return r->name; }

int kl__fsr_ping(kl__fsr *r, kl_err *e) {
    for (int attempt = 0;; attempt++) {
        redisContext *c;
        int fresh, rc = acquire(r, &c, &fresh, e);
        if (rc) return rc;
        redisReply *y = redisCommand(c, "PING");
        int lost = !y && conn_lost(c, errno);
        if (!y) rc = io_err(r, c, e, "PING");
        else if (y->type == REDIS_REPLY_ERROR)
            rc = kl_err_set(e, KL_ETIMEOUT, "online store %s: PING: %s", r->name, y->str);
        freeReplyObject(y);
        release(r, c, lost);
        if (!(lost && !fresh && attempt == 0)) return rc; /* a stale pooled connection: once more, fresh */
    }
}

/* EVALSHA sha N key... (event, events, within)... ; NOSCRIPT (a flushed
 * script cache) loads the script again and retries once */
int kl__fsr_append(kl__fsr *r, const fs_append *a, size_t n, kl_err *e) {
    if (!n) return KL_OK;
    size_t argc = 3 + 4 * n;
    const char **av = calloc(argc, sizeof *av);
    size_t *al = calloc(argc, sizeof *al);
    char *keys[64] = {0}, **kp = n <= 64 ? keys : calloc(n, sizeof *kp);
    char(*buf)[2][24] = calloc(n, sizeof *buf);
    char nk[24], sha[48];
    int rc = KL_OK;
    if (!av || !al || !kp || !buf) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&r->mu);
    memcpy(sha, r->sha, sizeof sha);
    pthread_mutex_unlock(&r->mu);
    snprintf(nk, sizeof nk, "%zu", n);
    av[0] = "EVALSHA", al[0] = 7;
    av[1] = sha, al[1] = strlen(sha);
    av[2] = nk, al[2] = strlen(nk);
    for (size_t i = 0; i < n; i++) {
        const feat *F = &r->f->f[a[i].feat];
        if (!(kp[i] = key_of(r, F, a[i].key, a[i].kn, &al[3 + i]))) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            goto done;
        }
        av[3 + i] = kp[i];
        size_t j = 3 + n + 3 * i;
        kl__fsr_encode(a[i].x, buf[i][0]);
        av[j] = buf[i][0], al[j] = 16;
        snprintf(buf[i][1], sizeof buf[i][1], "%lld", (long long)F->events);
        av[j + 1] = buf[i][1], al[j + 1] = strlen(buf[i][1]);
        be64(F->within_us > 0 ? (uint64_t)F->within_us : 0, buf[i][0] + 16);
        av[j + 2] = buf[i][0] + 16, al[j + 2] = 8;
    }
    redisContext *c = NULL;
    for (int attempt = 0; attempt < 2 && !rc; attempt++) {
        int fresh;
        if ((rc = acquire(r, &c, &fresh, e))) break;
        if (attempt) { /* the connection's SCRIPT LOAD refreshed the sha */
            pthread_mutex_lock(&r->mu);
            memcpy(sha, r->sha, sizeof sha);
            pthread_mutex_unlock(&r->mu);
            al[1] = strlen(sha);
        }
        redisReply *y = redisCommandArgv(c, (int)argc, av, al);
        int noscript = 0, lost = !y && conn_lost(c, errno);
        /* not retried: whether a lost connection ran the script is unknown */
        if (!y) rc = io_err(r, c, e, "append");
        else if (y->type == REDIS_REPLY_ERROR) {
            noscript = !strncmp(y->str, "NOSCRIPT", 8);
            if (!noscript) rc = kl_err_set(e, KL_EINVAL, "online store %s: append: %s", r->name, y->str);
            else c->err = REDIS_ERR_OTHER; /* reconnect: SCRIPT LOAD again */
        }
        freeReplyObject(y);
        release(r, c, lost);
        c = NULL;
        if (!noscript) break;
        if (attempt) rc = kl_err_set(e, KL_EINVAL, "online store %s: append: the script is not loaded", r->name);
    }
done:
    if (kp)
        for (size_t i = 0; i < n; i++) free(kp[i]);
    if (kp != keys) free(kp);
    free(buf);
    free(av);
    free(al);
    return rc;
}

void kl__fsr_read_free(fs_read *rd, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(rd[i].ev);
        rd[i].ev = NULL;
        rd[i].n = 0;
    }
}

/* a reply of ZREVRANGEBYLEX (newest first) → ev in time order */
static int decode_window(kl__fsr *r, const redisReply *y, fs_read *rd, kl_err *e) {
    if (y->type == REDIS_REPLY_ERROR) return kl_err_set(e, KL_EINVAL, "online store %s: read: %s", r->name, y->str);
    if (y->type != REDIS_REPLY_ARRAY)
        return kl_err_set(e, KL_EPARSE, "online store %s: read: unexpected reply", r->name);
    rd->ev = malloc((y->elements ? y->elements : 1) * sizeof *rd->ev);
    if (!rd->ev) return kl_err_set(e, KL_ENOMEM, "out of memory");
    rd->n = y->elements;
    for (size_t j = 0; j < y->elements; j++) {
        const redisReply *m = y->element[j];
        if (m->type != REDIS_REPLY_STRING || m->len < 16)
            return kl_err_set(e, KL_EPARSE, "online store %s: a history member is not a keel event", r->name);
        rd->ev[y->elements - 1 - j] = kl__fsr_decode(m->str);
    }
    return KL_OK;
}

/* One pipelined try; *lost: the connection was closed under it. */
static int read_once(kl__fsr *r, redisContext *c, fs_read *rd, size_t n, int *lost, kl_err *e) {
    int rc = KL_OK;
    *lost = 0;
    for (size_t i = 0; i < n; i++) {
        const feat *F = &r->f->f[rd[i].feat];
        size_t kn;
        char *k = key_of(r, F, rd[i].key, rd[i].kn, &kn), hi[9], lim[24];
        if (!k) {
            c->err = REDIS_ERR_OTHER; /* replies of the commands sent so far are pending */
            return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        hi[0] = '(';
        be64((uint64_t)rd[i].t ^ FSR_SIGN, hi + 1);
        snprintf(lim, sizeof lim, "%lld", (long long)F->events);
        const char *av[] = {"ZREVRANGEBYLEX", k, hi, "-", "LIMIT", "0", lim};
        size_t al[] = {14, kn, 9, 1, 5, 1, strlen(lim)};
        redisAppendCommandArgv(c, 7, av, al);
        free(k);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *y = NULL;
        if (redisGetReply(c, (void **)&y) != REDIS_OK || !y) {
            *lost = conn_lost(c, errno);
            rc = io_err(r, c, e, "read");
            break;
        }
        if (!rc) rc = decode_window(r, y, &rd[i], e);
        freeReplyObject(y);
    }
    if (rc) kl__fsr_read_free(rd, n);
    return rc;
}

/* A read is retried once on a fresh connection when a pooled one turns out
 * closed (the server restarted while it was idle). */
int kl__fsr_read(kl__fsr *r, fs_read *rd, size_t n, kl_err *e) {
    if (!n) return KL_OK;
    for (int attempt = 0;; attempt++) {
        redisContext *c;
        int fresh, lost, rc = acquire(r, &c, &fresh, e);
        if (rc) return rc;
        rc = read_once(r, c, rd, n, &lost, e);
        release(r, c, lost);
        if (!(rc && lost && !fresh && attempt == 0)) return rc;
    }
}
