/* Allocator benchmark: allocations per second of kl_mem_alloc/kl_mem_free
 * against glibc malloc/free on the same sequence (mixed sizes, LIFO and
 * random frees), 1 and 2 threads. Prints one line per case and the ratio. */
#include <keel/core.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPS = 2000000, LIVE = 256 };

typedef struct { int use_kl; size_t maxsz; double secs; } job;

static uint64_t rng(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

static void *run(void *arg) {
    job *j = arg;
    void *slots[LIVE] = {0};
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)arg;
    int64_t t0 = kl_time_mono_ns();
    for (int i = 0; i < OPS; i++) {
        int k = (int)(rng(&s) % LIVE);
        if (slots[k]) {
            if (j->use_kl) kl_mem_free(slots[k]); else free(slots[k]);
            slots[k] = NULL;
        }
        size_t sz = 16 + rng(&s) % j->maxsz;
        slots[k] = j->use_kl ? kl_mem_alloc(sz, KL_TAG_WORKSPACE) : malloc(sz);
        ((char *)slots[k])[0] = 1;
    }
    for (int k = 0; k < LIVE; k++) { if (j->use_kl) kl_mem_free(slots[k]); else free(slots[k]); }
    j->secs = (double)(kl_time_mono_ns() - t0) / 1e9;
    return NULL;
}

static double rate(int use_kl, int threads, size_t maxsz) {
    double best = 0;
    for (int rep = 0; rep < 5; rep++) { /* best of 5: the machine is shared */
        pthread_t th[8];
        job jobs[8];
        int64_t t0 = kl_time_mono_ns();
        for (int t = 0; t < threads; t++) { jobs[t] = (job){use_kl, maxsz, 0}; pthread_create(&th[t], NULL, run, &jobs[t]); }
        for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
        double secs = (double)(kl_time_mono_ns() - t0) / 1e9;
        double r = (double)OPS * threads / secs;
        if (r > best) best = r;
    }
    return best;
}

int main(void) {
    size_t sizes[] = {256, 8192, 1 << 20};
    printf("%-8s %-10s %14s %14s %8s\n", "threads", "max size", "keel allocs/s", "malloc allocs/s", "ratio");
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            double k = rate(1, threads, sizes[i]), m = rate(0, threads, sizes[i]);
            printf("%-8d %-10zu %14.0f %14.0f %8.2f\n", threads, sizes[i], k, m, k / m);
        }
    return 0;
}
