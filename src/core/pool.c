/* The thread pool: fixed workers, parallel_for with static chunking. Which
 * chunk covers which items depends only on n, grain and the thread count,
 * never on scheduling, so kernels that write disjoint outputs per chunk (or
 * reduce per chunk and combine in chunk order) are deterministic. */
#include "core_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One parallel_for call. Lives on the caller's stack; the caller returns
 * only after every worker that picked it up has left it (active == 0). */
typedef struct job {
    kl_range_fn fn;
    void *ctx;
    size_t n, chunk;
    int nchunks;
    _Atomic int next_chunk; /* chunks are claimed by index; a chunk's range is fixed */
    _Atomic int pending;    /* chunks not yet finished */
    _Atomic int active;     /* workers inside the job (changed under the pool lock) */
} job;

struct kl_pool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t run_mu; /* one parallel_for at a time */
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    _Atomic uint64_t gen;   /* bumped for each job */
    _Atomic int stop;
    job *cur;               /* the current job (guarded by mu) */
};

static _Thread_local int in_task;

static void run_chunks(kl_pool *p, job *j) {
    for (;;) {
        int c = atomic_fetch_add(&j->next_chunk, 1);
        if (c >= j->nchunks) break;
        size_t b = (size_t)c * j->chunk, e = b + j->chunk;
        if (e > j->n) e = j->n;
        if (b < e) j->fn(j->ctx, b, e, c);
        if (atomic_fetch_sub(&j->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker(void *arg) {
    kl_pool *p = arg;
    uint64_t seen = 0;
    in_task = 1;
    for (;;) {
        /* spin briefly for low latency between back-to-back kernels, then sleep */
        for (int spins = 0; atomic_load(&p->gen) == seen && !atomic_load(&p->stop) && spins < 20000; spins++) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
        if (atomic_load(&p->stop)) { pthread_mutex_unlock(&p->mu); break; }
        seen = atomic_load(&p->gen);
        job *j = p->cur;
        if (j) atomic_fetch_add(&j->active, 1);
        pthread_mutex_unlock(&p->mu);
        if (!j) continue;
        run_chunks(p, j);
        pthread_mutex_lock(&p->mu);
        if (atomic_fetch_sub(&j->active, 1) == 1) pthread_cond_broadcast(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

int kl_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int kl_pool_new(int nthreads, kl_pool **out, kl_err *e) {
    *out = NULL;
    if (nthreads <= 0) nthreads = kl_threads_default();
    if (nthreads > 1024) return kl_err_set(e, KL_EINVAL, "thread count %d is too large", nthreads);
    kl_pool *p = calloc(1, sizeof *p);
    if (!p) return kl_err_set(e, KL_ENOMEM, "out of memory");
    p->nthreads = nthreads;
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) { free(p); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        for (int i = 0; i < nthreads - 1; i++) {
            int rc = pthread_create(&p->threads[i], NULL, worker, p);
            if (rc) {
                p->nthreads = i + 1;
                kl_pool_free(p);
                return kl_err_set(e, -rc, "cannot start thread %d: %s", i + 1, strerror(rc));
            }
        }
    }
    *out = p;
    return KL_OK;
}

void kl_pool_free(kl_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->run_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

int kl_pool_threads(const kl_pool *p) { return p ? p->nthreads : kl_pool_threads(kl_pool_default()); }

static void plan(int threads, size_t n, size_t grain, int *nchunks, size_t *chunk) {
    if (grain == 0) grain = 1;
    size_t max_chunks = (n + grain - 1) / grain;
    size_t k = (size_t)threads < max_chunks ? (size_t)threads : max_chunks;
    if (k == 0) k = 1;
    *chunk = (n + k - 1) / k;
    *nchunks = (int)k;
}

int kl_pool_chunks(const kl_pool *p, size_t n, size_t grain) {
    if (!p) p = kl_pool_default();
    int k;
    size_t c;
    plan(p->nthreads, n, grain, &k, &c);
    return k;
}

void kl_pool_parallel_for(kl_pool *p, size_t n, size_t grain, kl_range_fn fn, void *ctx) {
    if (n == 0) return;
    if (!p) p = kl_pool_default();
    int k;
    size_t chunk;
    plan(p->nthreads, n, grain, &k, &chunk);
    /* inline: one chunk, nested call, or the pool is busy with another caller */
    if (k == 1 || in_task || pthread_mutex_trylock(&p->run_mu) != 0) {
        for (int c = 0; c < k; c++) {
            size_t b = (size_t)c * chunk, e = b + chunk;
            if (e > n) e = n;
            if (b < e) fn(ctx, b, e, c);
        }
        return;
    }
    job j = {.fn = fn, .ctx = ctx, .n = n, .chunk = chunk, .nchunks = k};
    atomic_store(&j.next_chunk, 0);
    atomic_store(&j.pending, k);
    atomic_store(&j.active, 0);
    pthread_mutex_lock(&p->mu);
    p->cur = &j;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    in_task = 1;
    run_chunks(p, &j);
    in_task = 0;
    for (int spins = 0; atomic_load(&j.pending) > 0 && spins < 200000; spins++) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&j.pending) > 0 || atomic_load(&j.active) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    p->cur = NULL;
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->run_mu);
}

/* ---- the default pool ---------------------------------------------------- */

static pthread_mutex_t def_mu = PTHREAD_MUTEX_INITIALIZER;
static kl_pool *def_pool;
static int def_threads;

int kl_threads_default(void) {
    if (def_threads > 0) return def_threads;
    int env = kl_settings_get()->threads;
    return env > 0 ? env : kl_cpu_count();
}

void kl_threads_set(int n) {
    pthread_mutex_lock(&def_mu);
    def_threads = n > 0 ? n : 0;
    if (def_pool && def_pool->nthreads != kl_threads_default()) {
        kl_pool_free(def_pool);
        def_pool = NULL;
    }
    pthread_mutex_unlock(&def_mu);
}

kl_pool *kl_pool_default(void) {
    pthread_mutex_lock(&def_mu);
    if (!def_pool) {
        if (kl_pool_new(kl_threads_default(), &def_pool, NULL) != KL_OK) def_pool = NULL;
        if (!def_pool) KL_ASSERT(kl_pool_new(1, &def_pool, NULL) == KL_OK);
    }
    kl_pool *p = def_pool;
    pthread_mutex_unlock(&def_mu);
    return p;
}
