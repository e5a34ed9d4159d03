/* The tagged caching allocator: size classes, slab segments for small
 * blocks and one mapping per large block, freed blocks cached for reuse,
 * per-tag statistics, budgets with a JSON snapshot on refusal, trim.
 * Also the bump arena built on top of it.
 *
 * Layout: every block is preceded by a 64-byte header, so the user pointer
 * is 64-byte aligned and kl_mem_free finds its class without a lookup.
 * Small classes (block <= SLAB_MAX) are carved from slab segments of
 * 256 KiB..4 MiB; larger blocks get a mapping each. reserved counts whole
 * segments; allocated counts requested bytes of live blocks.
 *
 * Under AddressSanitizer (KL_ASAN) none of that: every block is its own
 * malloc of header + requested bytes, freed with free, so that ASan's
 * redzones sit right after the requested bytes and a freed block is
 * quarantined instead of reused; the header's padding is poisoned. The
 * statistics, budgets and snapshots keep working on these blocks (see the
 * "direct blocks" section). */
#include "core_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sanitizer/asan_interface.h> /* no-op macros outside ASan builds */

#define HDR 64
#define MAGIC_LIVE 0x6b6c4d31u /* "klM1" */
#define MAGIC_FREE 0x6b6c4d30u
#define SMALL_LINEAR 16        /* classes 0..15: 64..1024 in steps of 64 */
#define STEPS 8                /* classes per power of two above 1024 */
#define NCLASSES (SMALL_LINEAR + STEPS * 40)
#define SLAB_MAX (256u << 10)  /* blocks up to 256 KiB live in slabs */
#define DIRECT KL_ASAN         /* every block its own malloc (see the header comment) */

typedef struct seg seg;
typedef struct blk {
    uint32_t magic;
    uint16_t cls;
    uint8_t tag;
    uint8_t pad0;
    uint64_t req;   /* requested bytes (live blocks) */
    union {
        seg *sg;
        struct blk *prev; /* direct blocks: the list of live blocks */
    };
    struct blk *next; /* free-list link (cached blocks); direct: live list */
    char pad[HDR - 32];
} blk;
_Static_assert(sizeof(blk) == HDR, "block header must be 64 bytes");

struct seg {
    seg *prev, *next; /* the segments of this class (guarded by the class lock) */
    char *base;
    size_t size;      /* mapped bytes */
    uint32_t cls, nblocks, nfree;
    int large, dying;
    seg *dead_next;   /* trim's list of segments to unmap */
};

typedef struct {
    pthread_mutex_t mu;
    blk *free;
    uint64_t ncached;
    seg *segs;
} klass;

static klass classes[NCLASSES];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

typedef struct {
    _Atomic uint64_t allocated, peak_allocated, reserved, peak_reserved;
    _Atomic uint64_t n_failed;
} stats_t;
static stats_t tag_stats[KL_TAG_COUNT];
static stats_t total;
static _Atomic uint64_t budget_total;
static _Atomic uint64_t budget_tag[KL_TAG_COUNT];
static pthread_mutex_t snap_mu = PTHREAD_MUTEX_INITIALIZER;
static char snap_path[1024];

static const char *tag_names[KL_TAG_COUNT] = {"params",    "grads",   "optimizer", "activations",
                                              "workspace", "request", "dataset",   "other"};

const char *kl_mem_tag_name(kl_mem_tag t) { return (unsigned)t < KL_TAG_COUNT ? tag_names[t] : "?"; }

int kl_mem_tag_parse(const char *name, kl_mem_tag *out) {
    for (int i = 0; i < KL_TAG_COUNT; i++)
        if (strcmp(name, tag_names[i]) == 0) { *out = (kl_mem_tag)i; return KL_OK; }
    return KL_EINVAL;
}


/* ---- per-thread state ------------------------------------------------------
 * Each thread keeps a small cache of free blocks per small class (no lock on
 * the fast path) and its own event counters (allocs, frees, cache hits),
 * summed over all threads when statistics are read. Byte counters stay
 * global atomics so that peaks are exact. */

#define NTC 56            /* classes with blocks <= 32 KiB are thread-cached */
#define TC_BYTES (256u << 10)

typedef struct tstate {
    struct tstate *next;
    blk *head[NTC];
    uint32_t count[NTC];
    _Atomic uint64_t n_allocs[KL_TAG_COUNT], n_frees[KL_TAG_COUNT], hits[KL_TAG_COUNT];
} tstate;

static pthread_mutex_t ts_mu = PTHREAD_MUTEX_INITIALIZER;
static tstate *ts_all;      /* live threads' states */
static tstate ts_retired;   /* counters of threads that exited */
static pthread_key_t ts_key;
static _Thread_local tstate *ts_me;

static void tc_flush(tstate *t);
static void init_classes(void);

static void ts_exit(void *arg) {
    tstate *t = arg;
    tc_flush(t);
    pthread_mutex_lock(&ts_mu);
    for (tstate **pp = &ts_all; *pp; pp = &(*pp)->next)
        if (*pp == t) { *pp = t->next; break; }
    for (int i = 0; i < KL_TAG_COUNT; i++) {
        ts_retired.n_allocs[i] += t->n_allocs[i];
        ts_retired.n_frees[i] += t->n_frees[i];
        ts_retired.hits[i] += t->hits[i];
    }
    pthread_mutex_unlock(&ts_mu);
    free(t);
    ts_me = NULL;
}

static tstate *ts_get(void) {
    if (ts_me) return ts_me;
    pthread_once(&init_once, init_classes);
    tstate *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    pthread_mutex_lock(&ts_mu);
    t->next = ts_all;
    ts_all = t;
    pthread_mutex_unlock(&ts_mu);
    pthread_setspecific(ts_key, t);
    ts_me = t;
    return t;
}

/* owner-only increment: a plain load and store, read racily-but-atomically by stats */
static inline void bump(_Atomic uint64_t *c) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void init_classes(void) {
    for (int i = 0; i < NCLASSES; i++) pthread_mutex_init(&classes[i].mu, NULL);
    pthread_key_create(&ts_key, ts_exit);
}

/* ---- size classes ------------------------------------------------------ */

static int size_class(size_t s, size_t *bsize) {
    if (s <= 1024) {
        size_t i = s ? (s + 63) / 64 - 1 : 0;
        *bsize = (i + 1) * 64;
        return (int)i;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(s - 1)); /* 2^k < s <= 2^(k+1) */
    size_t base = (size_t)1 << k, step = base / STEPS;
    size_t m = (s - base + step - 1) / step; /* 1..STEPS */
    int idx = SMALL_LINEAR + (k - 10) * STEPS + (int)(m - 1);
    if (idx >= NCLASSES) return -1;
    *bsize = base + m * step;
    return idx;
}

static size_t class_size(int c) {
    if (c < SMALL_LINEAR) return (size_t)(c + 1) * 64;
    int k = 10 + (c - SMALL_LINEAR) / STEPS, m = (c - SMALL_LINEAR) % STEPS + 1;
    size_t base = (size_t)1 << k;
    return base + (size_t)m * (base / STEPS);
}

static uint32_t tc_limit(size_t bsize) {
    size_t n = TC_BYTES / (bsize + HDR);
    return n < 8 ? 8 : n > 64 ? 64 : (uint32_t)n;
}

static size_t slab_bytes(size_t bsize) {
    size_t s = (bsize + HDR) * 16;
    if (s < (256u << 10)) s = 256u << 10;
    if (s > (4u << 20)) s = 4u << 20;
    return (s + 4095) & ~(size_t)4095;
}

/* ---- statistics -------------------------------------------------------- */

static void peak_update(_Atomic uint64_t *peak, uint64_t v) {
    uint64_t p = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {}
}

static void stat_alloc(tstate *t, int tag, uint64_t req, uint64_t blockbytes, int hit) {
    stats_t *s[2] = {&tag_stats[tag], &total};
    for (int i = 0; i < 2; i++) {
        uint64_t a = atomic_fetch_add_explicit(&s[i]->allocated, req, memory_order_relaxed) + req;
        peak_update(&s[i]->peak_allocated, a);
    }
    if (t) {
        bump(&t->n_allocs[tag]);
        if (hit) bump(&t->hits[tag]);
    } else {
        atomic_fetch_add(&ts_retired.n_allocs[tag], 1);
        if (hit) atomic_fetch_add(&ts_retired.hits[tag], 1);
    }
    /* per tag, "reserved" is the block bytes in use by that tag */
    uint64_t r = atomic_fetch_add_explicit(&tag_stats[tag].reserved, blockbytes, memory_order_relaxed) + blockbytes;
    peak_update(&tag_stats[tag].peak_reserved, r);
}

static void stat_free(tstate *t, int tag, uint64_t req, uint64_t blockbytes) {
    atomic_fetch_sub_explicit(&tag_stats[tag].allocated, req, memory_order_relaxed);
    atomic_fetch_sub_explicit(&total.allocated, req, memory_order_relaxed);
    if (t) bump(&t->n_frees[tag]);
    else atomic_fetch_add(&ts_retired.n_frees[tag], 1);
    atomic_fetch_sub_explicit(&tag_stats[tag].reserved, blockbytes, memory_order_relaxed);
}

/* Sums the per-thread event counters of one tag (or all when tag is KL_TAG_COUNT). */
static void sum_events(int tag, uint64_t *allocs, uint64_t *frees, uint64_t *hits) {
    *allocs = *frees = *hits = 0;
    pthread_mutex_lock(&ts_mu);
    for (int i = 0; i < KL_TAG_COUNT; i++) {
        if (tag != KL_TAG_COUNT && tag != i) continue;
        *allocs += ts_retired.n_allocs[i];
        *frees += ts_retired.n_frees[i];
        *hits += ts_retired.hits[i];
        for (tstate *t = ts_all; t; t = t->next) {
            *allocs += atomic_load_explicit(&t->n_allocs[i], memory_order_relaxed);
            *frees += atomic_load_explicit(&t->n_frees[i], memory_order_relaxed);
            *hits += atomic_load_explicit(&t->hits[i], memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&ts_mu);
}

void kl_mem_stats_get(kl_mem_tag tag, kl_mem_stats *o) {
    stats_t *s = (unsigned)tag < KL_TAG_COUNT ? &tag_stats[tag] : &total;
    o->allocated = s->allocated;
    o->peak_allocated = s->peak_allocated;
    o->reserved = s->reserved;
    o->peak_reserved = s->peak_reserved;
    uint64_t a, f, h;
    sum_events((unsigned)tag < KL_TAG_COUNT ? (int)tag : KL_TAG_COUNT, &a, &f, &h);
    o->n_allocs = a;
    o->n_frees = f;
    o->cache_hits = h;
    o->n_failed = s->n_failed;
}

double kl_mem_fragmentation(void) {
    uint64_t r = total.reserved, a = total.allocated;
    if (r == 0) return 0.0;
    return a >= r ? 0.0 : (double)(r - a) / (double)r;
}

void kl_mem_reset_peaks(void) {
    for (int i = 0; i < KL_TAG_COUNT; i++) {
        tag_stats[i].peak_allocated = (uint64_t)tag_stats[i].allocated;
        tag_stats[i].peak_reserved = (uint64_t)tag_stats[i].reserved;
    }
    total.peak_allocated = (uint64_t)total.allocated;
    total.peak_reserved = (uint64_t)total.reserved;
}

/* ---- budgets ----------------------------------------------------------- */

uint64_t kl_mem_physical_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), ps = sysconf(_SC_PAGESIZE);
    return pages > 0 && ps > 0 ? (uint64_t)pages * (uint64_t)ps : 0;
}

void kl_mem_set_budget(uint64_t bytes) { budget_total = bytes; }
uint64_t kl_mem_get_budget(void) { return budget_total; }
void kl_mem_set_tag_budget(kl_mem_tag t, uint64_t bytes) {
    if ((unsigned)t < KL_TAG_COUNT) budget_tag[t] = bytes;
}
uint64_t kl_mem_get_tag_budget(kl_mem_tag t) { return (unsigned)t < KL_TAG_COUNT ? budget_tag[t] : 0; }

int kl_mem_set_budget_fraction(double frac, kl_err *e) {
    if (!(frac > 0 && frac <= 1))
        return kl_err_set(e, KL_EINVAL, "memory budget fraction %g is not in (0, 1]", frac);
    budget_total = (uint64_t)((double)kl_mem_physical_bytes() * frac);
    return KL_OK;
}

int kl_mem_parse_size(const char *s, uint64_t *out, kl_err *e) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || v != v)
        return kl_err_set(e, KL_EINVAL, "'%s' is not a size (like 512M, 2G, 70%%)", s);
    while (*end == ' ') end++;
    double mul = 1;
    if (*end == '%') {
        if (end[1] || v > 100) return kl_err_set(e, KL_EINVAL, "'%s' is not a percentage of memory", s);
        *out = (uint64_t)((double)kl_mem_physical_bytes() * v / 100.0);
        return KL_OK;
    }
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return kl_err_set(e, KL_EINVAL, "'%s' is not a size (like 512M, 2G, 70%%)", s);
    if (v * mul > 1.8e19) return kl_err_set(e, KL_ERANGE, "size '%s' is too large", s);
    *out = (uint64_t)(v * mul);
    return KL_OK;
}

void kl_mem_set_snapshot_path(const char *path) {
    pthread_mutex_lock(&snap_mu);
    snprintf(snap_path, sizeof snap_path, "%s", path ? path : "");
    pthread_mutex_unlock(&snap_mu);
}

/* ---- segments ---------------------------------------------------------- */

static void *os_map(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Caller holds the class lock. */
static void seg_link(klass *k, seg *s) {
    s->prev = NULL;
    s->next = k->segs;
    if (k->segs) k->segs->prev = s;
    k->segs = s;
    uint64_t r = atomic_fetch_add(&total.reserved, s->size) + s->size;
    peak_update(&total.peak_reserved, r);
}

/* Caller holds the class lock; the mapping is released later with seg_unmap. */
static void seg_unlink(klass *k, seg *s) {
    if (s->prev) s->prev->next = s->next;
    else k->segs = s->next;
    if (s->next) s->next->prev = s->prev;
}

static void seg_unmap(seg *s) {
    atomic_fetch_sub(&total.reserved, s->size);
    munmap(s->base, s->size);
    free(s);
}

/* Reserves budget for n more bytes; 0 when it fits. */
static int budget_take(uint64_t n) {
    uint64_t b = budget_total;
    if (!b) return 0;
    return total.reserved + n > b;
}

/* Creates a segment for class c (caller holds the class lock); for a slab
 * all blocks go to the free list. Returns NULL on OS failure. */
static seg *seg_new(int c, size_t bsize) {
    seg *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cls = (uint32_t)c;
    s->large = bsize > SLAB_MAX;
    s->size = s->large ? ((bsize + HDR + 4095) & ~(size_t)4095) : slab_bytes(bsize);
    s->base = os_map(s->size);
    if (!s->base) { free(s); return NULL; }
    s->nblocks = s->large ? 1 : (uint32_t)(s->size / (bsize + HDR));
    s->nfree = s->nblocks;
    klass *k = &classes[c];
    for (uint32_t i = s->nblocks; i-- > 0;) {
        blk *b = (blk *)(s->base + (size_t)i * (bsize + HDR));
        b->magic = MAGIC_FREE;
        b->cls = (uint16_t)c;
        b->tag = 0xff;
        b->sg = s;
        b->next = k->free;
        k->free = b;
        k->ncached++;
    }
    seg_link(k, s);
    return s;
}

/* ---- direct blocks (AddressSanitizer builds) --------------------------
 * One malloc per block: header + requested bytes, so the byte after the
 * request is ASan's redzone. The header's padding (the 32 bytes just before
 * the user pointer) is poisoned, so an underflow is caught too. Live blocks
 * are kept on one list for snapshots. Compiled in every build (the poison
 * macros are no-ops without ASan); used only when DIRECT. */

static pthread_mutex_t direct_mu = PTHREAD_MUTEX_INITIALIZER;
static blk *direct_live;

int kl_mem_direct(void) { return DIRECT; }

static blk *direct_new(size_t size, int tag) {
    void *m = NULL;
    if (posix_memalign(&m, HDR, HDR + size) != 0) return NULL;
    blk *b = m;
    memset(b, 0, HDR);
    b->magic = MAGIC_LIVE;
    b->tag = (uint8_t)tag;
    b->req = size;
    pthread_mutex_lock(&direct_mu);
    b->next = direct_live;
    if (direct_live) direct_live->prev = b;
    direct_live = b;
    pthread_mutex_unlock(&direct_mu);
    uint64_t r = atomic_fetch_add(&total.reserved, HDR + size) + HDR + size;
    peak_update(&total.peak_reserved, r);
    ASAN_POISON_MEMORY_REGION(b->pad, sizeof b->pad);
    return b;
}

static void direct_free(blk *b) {
    pthread_mutex_lock(&direct_mu);
    if (b->prev) b->prev->next = b->next;
    else direct_live = b->next;
    if (b->next) b->next->prev = b->prev;
    pthread_mutex_unlock(&direct_mu);
    atomic_fetch_sub(&total.reserved, HDR + b->req);
    b->magic = MAGIC_FREE;
    ASAN_UNPOISON_MEMORY_REGION(b->pad, sizeof b->pad);
    free(b);
}

/* The snapshot's "segments" of a direct build: one per live block. */
static void direct_snapshot(kl_buf *b) {
    int first = 1;
    pthread_mutex_lock(&direct_mu);
    for (blk *h = direct_live; h; h = h->next) {
        kl_buf_printf(b, "%s\n {\"address\":\"%p\",\"size\":%llu,\"kind\":\"malloc\",\"block_size\":%llu,\"blocks\":["
                         "{\"offset\":%d,\"size\":%llu,\"requested\":%llu,\"tag\":\"%s\",\"state\":\"allocated\"}]}",
                      first ? "" : ",", (void *)h, (unsigned long long)(HDR + h->req), (unsigned long long)h->req, HDR,
                      (unsigned long long)h->req, (unsigned long long)h->req, kl_mem_tag_name((kl_mem_tag)h->tag));
        first = 0;
    }
    pthread_mutex_unlock(&direct_mu);
}

/* ---- snapshot ---------------------------------------------------------- */

static void snap_stats(kl_buf *b, const stats_t *s, int tag) {
    uint64_t na, nf, nh;
    sum_events(tag, &na, &nf, &nh);
    kl_buf_printf(b,
                  "{\"allocated\":%llu,\"peak_allocated\":%llu,\"reserved\":%llu,\"peak_reserved\":%llu,"
                  "\"allocs\":%llu,\"frees\":%llu,\"cache_hits\":%llu,\"failed\":%llu}",
                  (unsigned long long)s->allocated, (unsigned long long)s->peak_allocated,
                  (unsigned long long)s->reserved, (unsigned long long)s->peak_reserved,
                  (unsigned long long)na, (unsigned long long)nf,
                  (unsigned long long)nh, (unsigned long long)s->n_failed);
}

static int snapshot_to(const char *path, const char *reason, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    char ts[40];
    kl_time_rfc3339(kl_time_now_us(), ts, sizeof ts);
    kl_buf_printf(&b, "{\n\"time\":\"%s\",\n\"reason\":", ts);
    kl_buf_json_str(&b, reason ? reason : "requested");
    kl_buf_printf(&b, ",\n\"budget\":%llu,\n\"fragmentation\":%.6f,\n\"totals\":",
                  (unsigned long long)budget_total, kl_mem_fragmentation());
    snap_stats(&b, &total, KL_TAG_COUNT);
    kl_buf_puts(&b, ",\n\"tags\":{");
    for (int t = 0; t < KL_TAG_COUNT; t++) {
        kl_buf_printf(&b, "%s\n \"%s\":", t ? "," : "", tag_names[t]);
        snap_stats(&b, &tag_stats[t], t);
        if (budget_tag[t]) {
            b.len--; /* reopen the object */
            kl_buf_printf(&b, ",\"budget\":%llu}", (unsigned long long)budget_tag[t]);
        }
    }
    kl_buf_puts(&b, "},\n\"segments\":[");
    if (DIRECT) direct_snapshot(&b);
    int first = 1;
    /* one class at a time: each segment is consistent, and no thread ever
     * holds more than one class lock */
    for (int c = 0; c < NCLASSES; c++) {
        pthread_mutex_lock(&classes[c].mu);
        for (seg *s = classes[c].segs; s; s = s->next) {
            size_t bs = class_size((int)s->cls);
            kl_buf_printf(&b, "%s\n {\"address\":\"%p\",\"size\":%zu,\"kind\":\"%s\",\"block_size\":%zu,\"blocks\":[",
                          first ? "" : ",", (void *)s->base, s->size, s->large ? "large" : "slab", bs);
            first = 0;
            int bfirst = 1;
            for (uint32_t i = 0; i < s->nblocks;) {
                blk *h = (blk *)(s->base + (size_t)i * (bs + HDR));
                if (h->magic == MAGIC_LIVE) {
                    kl_buf_printf(&b, "%s{\"offset\":%zu,\"size\":%zu,\"requested\":%llu,\"tag\":\"%s\",\"state\":\"allocated\"}",
                                  bfirst ? "" : ",", (size_t)i * (bs + HDR) + HDR, bs,
                                  (unsigned long long)h->req, kl_mem_tag_name((kl_mem_tag)h->tag));
                    i++;
                } else {
                    uint32_t j = i;
                    while (j < s->nblocks && ((blk *)(s->base + (size_t)j * (bs + HDR)))->magic != MAGIC_LIVE) j++;
                    kl_buf_printf(&b, "%s{\"offset\":%zu,\"size\":%zu,\"count\":%u,\"state\":\"cached\"}",
                                  bfirst ? "" : ",", (size_t)i * (bs + HDR) + HDR, bs, j - i);
                    i = j;
                }
                bfirst = 0;
            }
            kl_buf_puts(&b, "]}");
        }
        pthread_mutex_unlock(&classes[c].mu);
    }
    kl_buf_puts(&b, "\n]\n}\n");
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory while writing the memory snapshot")
                      : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

int kl_mem_snapshot(const char *path, kl_err *e) {
    pthread_once(&init_once, init_classes);
    return snapshot_to(path, NULL, e);
}

/* ---- alloc / free ------------------------------------------------------ */

static void *refuse(kl_mem_tag tag, kl_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void *refuse(kl_mem_tag tag, kl_err *e, int code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&tag_stats[tag].n_failed, 1);
    atomic_fetch_add(&total.n_failed, 1);
    char path[1024];
    pthread_mutex_lock(&snap_mu);
    snprintf(path, sizeof path, "%s", snap_path);
    pthread_mutex_unlock(&snap_mu);
    if (path[0]) {
        kl_err se = {0};
        if (snapshot_to(path, msg, &se) == KL_OK) {
            kl_err_set(e, code, "%s; memory snapshot written to %s", msg, path);
        } else {
            kl_err_set(e, code, "%s; writing the memory snapshot failed: %s", msg, kl_err_what(&se));
        }
    } else {
        kl_err_set(e, code, "%s", msg);
    }
    errno = ENOMEM;
    return NULL;
}

static void *refuse_budget(int tag, kl_err *e, uint64_t need, size_t size) {
    char b1[32], b2[32], b3[32], b4[32];
    return refuse(tag, e, KL_ENOMEM, "memory budget exceeded: %s reserved + %s for a %s block (tag %s) > budget %s",
                  kl_fmt_bytes(total.reserved, b1, sizeof b1), kl_fmt_bytes(need, b2, sizeof b2),
                  kl_fmt_bytes(size, b3, sizeof b3), tag_names[tag], kl_fmt_bytes(budget_total, b4, sizeof b4));
}

static void *refuse_os(int tag, kl_err *e, size_t size) {
    char b1[32];
    return refuse(tag, e, KL_ENOMEM, "the operating system refused %s (tag %s)", kl_fmt_bytes(size, b1, sizeof b1),
                  tag_names[tag]);
}

/* DIRECT: the budget holds header + requested bytes per block. */
static void *direct_alloc(tstate *t, size_t size, int tag, kl_err *e) {
    if (budget_take(HDR + size)) return refuse_budget(tag, e, HDR + size, size);
    blk *b = direct_new(size, tag);
    if (!b) return refuse_os(tag, e, size);
    stat_alloc(t, tag, size, HDR + size, 0);
    return (char *)b + HDR;
}

void *kl_mem_alloc_e(size_t size, kl_mem_tag tag, kl_err *e) {
    pthread_once(&init_once, init_classes);
    if ((unsigned)tag >= KL_TAG_COUNT) tag = KL_TAG_OTHER;
    size_t bsize;
    int c = size_class(size, &bsize);
    char b1[32], b2[32], b3[32];
    if (c < 0) return refuse(tag, e, KL_ENOMEM, "allocation of %zu bytes is too large", size);
    uint64_t tb = budget_tag[tag];
    if (tb && tag_stats[tag].allocated + size > tb)
        return refuse(tag, e, KL_ENOMEM, "memory budget of tag %s exceeded: %s in use + %s requested > %s",
                      tag_names[tag], kl_fmt_bytes(tag_stats[tag].allocated, b1, sizeof b1),
                      kl_fmt_bytes(size, b2, sizeof b2), kl_fmt_bytes(tb, b3, sizeof b3));
    tstate *t = ts_get();
    if (DIRECT) return direct_alloc(t, size, tag, e);
    if (t && c < NTC && t->head[c]) { /* fast path: this thread's cache */
        blk *b = t->head[c];
        t->head[c] = b->next;
        t->count[c]--;
        b->magic = MAGIC_LIVE;
        b->tag = (uint8_t)tag;
        b->req = size;
        b->next = NULL;
        stat_alloc(t, tag, size, bsize + HDR, 1);
        return (char *)b + HDR;
    }
    klass *k = &classes[c];
    int hit = 1;
    pthread_mutex_lock(&k->mu);
    if (!k->free) {
        hit = 0;
        size_t need = bsize > SLAB_MAX ? ((bsize + HDR + 4095) & ~(size_t)4095) : slab_bytes(bsize);
        if (budget_take(need)) {
            pthread_mutex_unlock(&k->mu);
            kl_mem_trim();
            pthread_mutex_lock(&k->mu);
            if (!k->free && budget_take(need)) {
                pthread_mutex_unlock(&k->mu);
                return refuse_budget(tag, e, need, size);
            }
        }
        if (!k->free && !seg_new(c, bsize)) {
            pthread_mutex_unlock(&k->mu);
            kl_mem_trim();
            pthread_mutex_lock(&k->mu);
            if (!k->free && !seg_new(c, bsize)) {
                pthread_mutex_unlock(&k->mu);
                return refuse_os(tag, e, size);
            }
        }
    }
    blk *b = k->free;
    k->free = b->next;
    k->ncached--;
    b->sg->nfree--;
    if (t && c < NTC) { /* refill this thread's cache with a few more */
        uint32_t want = tc_limit(bsize) / 2;
        while (k->free && t->count[c] < want) {
            blk *x = k->free;
            k->free = x->next;
            k->ncached--;
            x->sg->nfree--;
            x->next = t->head[c];
            t->head[c] = x;
            t->count[c]++;
        }
    }
    b->magic = MAGIC_LIVE;
    b->tag = (uint8_t)tag;
    b->req = size;
    b->next = NULL;
    pthread_mutex_unlock(&k->mu);
    stat_alloc(t, tag, size, bsize + HDR, hit);
    return (char *)b + HDR;
}

void *kl_mem_alloc(size_t size, kl_mem_tag tag) { return kl_mem_alloc_e(size, tag, NULL); }

void *kl_mem_calloc(size_t n, size_t size, kl_mem_tag tag) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = kl_mem_alloc(n * size, tag);
    if (p) memset(p, 0, n * size);
    return p;
}

static blk *hdr_of(const void *p) {
    blk *b = (blk *)((char *)p - HDR);
    KL_ASSERT(b->magic == MAGIC_LIVE); /* double free or not from kl_mem_alloc */
    return b;
}

size_t kl_mem_size(const void *p) { return p ? hdr_of(p)->req : 0; }

/* Returns n blocks from the head of a thread cache list to the global class list. */
static void tc_release(tstate *t, int c, uint32_t n) {
    klass *k = &classes[c];
    pthread_mutex_lock(&k->mu);
    while (n-- && t->head[c]) {
        blk *b = t->head[c];
        t->head[c] = b->next;
        t->count[c]--;
        b->next = k->free;
        k->free = b;
        k->ncached++;
        b->sg->nfree++;
    }
    pthread_mutex_unlock(&k->mu);
}

static void tc_flush(tstate *t) {
    for (int c = 0; c < NTC; c++)
        if (t->head[c]) tc_release(t, c, t->count[c]);
}

void kl_mem_free(void *p) {
    if (!p) return;
    blk *b = hdr_of(p);
    int c = b->cls, tag = b->tag;
    uint64_t req = b->req;
    tstate *t = ts_get();
    if (DIRECT) {
        direct_free(b);
        stat_free(t, tag, req, HDR + req);
        return;
    }
    size_t bs = class_size(c);
    b->magic = MAGIC_FREE;
    b->tag = 0xff;
    if (t && c < NTC) {
        b->next = t->head[c];
        t->head[c] = b;
        if (++t->count[c] > tc_limit(bs)) tc_release(t, c, t->count[c] / 2);
    } else {
        klass *k = &classes[c];
        pthread_mutex_lock(&k->mu);
        b->next = k->free;
        k->free = b;
        k->ncached++;
        b->sg->nfree++;
        pthread_mutex_unlock(&k->mu);
    }
    stat_free(t, tag, req, bs + HDR);
}

void *kl_mem_realloc(void *p, size_t size, kl_mem_tag tag) {
    if (!p) return kl_mem_alloc(size, tag);
    blk *b = hdr_of(p);
    size_t bs = class_size(b->cls);
    if (!DIRECT && size <= bs && size >= bs / 2) { /* DIRECT: always a new block, so ASan sees the new end */
        int t = b->tag;
        uint64_t old = b->req;
        b->req = size;
        if (size > old) {
            uint64_t d = size - old;
            peak_update(&tag_stats[t].peak_allocated, atomic_fetch_add(&tag_stats[t].allocated, d) + d);
            peak_update(&total.peak_allocated, atomic_fetch_add(&total.allocated, d) + d);
        } else {
            atomic_fetch_sub(&tag_stats[t].allocated, old - size);
            atomic_fetch_sub(&total.allocated, old - size);
        }
        return p;
    }
    void *q = kl_mem_alloc(size, (kl_mem_tag)b->tag);
    if (!q) return NULL;
    memcpy(q, p, b->req < size ? b->req : size);
    kl_mem_free(p);
    return q;
}

char *kl_mem_strdup(const char *s, kl_mem_tag tag) {
    size_t n = strlen(s) + 1;
    char *d = kl_mem_alloc(n, tag);
    if (d) memcpy(d, s, n);
    return d;
}

uint64_t kl_mem_trim(void) {
    pthread_once(&init_once, init_classes);
    if (DIRECT) return 0; /* nothing is cached */
    if (ts_me) tc_flush(ts_me); /* other threads keep their (small) caches */
    uint64_t released = 0;
    for (int c = 0; c < NCLASSES; c++) {
        klass *k = &classes[c];
        seg *dead = NULL;
        pthread_mutex_lock(&k->mu);
        /* unlink every cached block of a fully free segment */
        for (blk **pp = &k->free; *pp;) {
            blk *b = *pp;
            seg *s = b->sg;
            if (s->nfree == s->nblocks) {
                if (!s->dying) { s->dying = 1; s->dead_next = dead; dead = s; seg_unlink(k, s); }
                *pp = b->next;
                k->ncached--;
            } else {
                pp = &b->next;
            }
        }
        pthread_mutex_unlock(&k->mu);
        while (dead) {
            seg *s = dead;
            dead = s->dead_next;
            released += s->size;
            seg_unmap(s);
        }
    }
    return released;
}

/* ---- arena ------------------------------------------------------------- */

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    char pad[KL_MEM_ALIGN - 3 * sizeof(size_t)];
} chunk;

struct kl_arena {
    chunk *head;
    size_t chunk_size, used_total;
    kl_mem_tag tag;
};

kl_arena *kl_arena_new(size_t chunk_size, kl_mem_tag tag) {
    kl_arena *a = kl_mem_calloc(1, sizeof *a, tag);
    if (!a) return NULL;
    a->chunk_size = chunk_size ? chunk_size : 64 * 1024;
    a->tag = tag;
    return a;
}

/* DIRECT: every allocation gets a chunk of exactly its size, so that ASan
 * sees an overflow from one object into the next. */
void *kl_arena_alloc(kl_arena *a, size_t size) {
    size_t want = size;
    size = (size + KL_MEM_ALIGN - 1) & ~(size_t)(KL_MEM_ALIGN - 1);
    chunk *c = a->head;
    if (DIRECT) {
        chunk *n = kl_mem_alloc(sizeof(chunk) + want, a->tag);
        if (!n) return NULL;
        n->size = n->used = want;
        n->next = c;
        a->head = n;
        a->used_total += size;
        return n + 1;
    }
    if (!c || c->size - c->used < size) {
        size_t cs = size > a->chunk_size ? size : a->chunk_size;
        chunk *n = kl_mem_alloc(sizeof(chunk) + cs, a->tag);
        if (!n) return NULL;
        n->size = cs;
        n->used = 0;
        n->next = c;
        a->head = c = n;
    }
    void *p = (char *)(c + 1) + c->used;
    c->used += size;
    a->used_total += size;
    return p;
}

char *kl_arena_strdup(kl_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = kl_arena_alloc(a, n);
    if (d) memcpy(d, s, n);
    return d;
}

size_t kl_arena_used(const kl_arena *a) { return a->used_total; }

void kl_arena_reset(kl_arena *a) {
    chunk *c = a->head;
    while (c && (c->next || DIRECT)) {
        chunk *n = c->next;
        kl_mem_free(c);
        c = n;
    }
    a->head = c;
    if (c) c->used = 0;
    a->used_total = 0;
}

void kl_arena_free(kl_arena *a) {
    if (!a) return;
    chunk *c = a->head;
    while (c) {
        chunk *n = c->next;
        kl_mem_free(c);
        c = n;
    }
    kl_mem_free(a);
}
