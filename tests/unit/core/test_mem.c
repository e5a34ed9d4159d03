/* Allocator accounting: stats add up under random alloc/free sequences,
 * budgets refuse and snapshot, trim releases, fragmentation formula, arena.
 * Where the caching build and the direct (ASan) build differ, each test
 * checks what its build does (kl_mem_direct). */
#include "../harness.h"

#include <cjson/cJSON.h>
#include <keel/core.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

KL_TEST(mem_stats_add_up_random) {
    kl_mem_trim();
    kl_mem_stats t0, g0[KL_TAG_COUNT];
    kl_mem_stats_get(KL_TAG_COUNT, &t0);
    for (int t = 0; t < KL_TAG_COUNT; t++) kl_mem_stats_get((kl_mem_tag)t, &g0[t]);
    enum { N = 4000 };
    static void *p[N];
    static size_t sz[N];
    static int tg[N];
    uint64_t s = 88172645463325252ull, live[KL_TAG_COUNT] = {0};
    int64_t allocs = 0, frees = 0;
    for (int it = 0; it < 40000; it++) {
        int i = (int)(rng(&s) % N);
        if (p[i]) {
            KT_EQ_INT(kl_mem_size(p[i]), sz[i]);
            KT_CHECK(((unsigned char *)p[i])[0] == (unsigned char)i);
            kl_mem_free(p[i]);
            live[tg[i]] -= sz[i];
            p[i] = NULL;
            frees++;
        } else {
            uint64_t r = rng(&s);
            sz[i] = r % 7 == 0 ? (size_t)(r % (3u << 20)) : (size_t)(r % 5000);
            tg[i] = (int)(rng(&s) % KL_TAG_COUNT);
            p[i] = kl_mem_alloc(sz[i], (kl_mem_tag)tg[i]);
            KT_CHECK(p[i] != NULL);
            KT_CHECK(((uintptr_t)p[i] & (KL_MEM_ALIGN - 1)) == 0);
            if (!sz[i]) { kl_mem_free(p[i]); p[i] = NULL; frees++; allocs++; continue; } /* size 0 is valid */
            memset(p[i], 0, sz[i] < 256 ? sz[i] : 256);
            ((unsigned char *)p[i])[0] = (unsigned char)i;
            ((unsigned char *)p[i])[sz[i] - 1] = 1; /* the whole block is writable */
            live[tg[i]] += sz[i];
            allocs++;
        }
    }
    kl_mem_stats t1;
    kl_mem_stats_get(KL_TAG_COUNT, &t1);
    uint64_t sum = 0;
    for (int t = 0; t < KL_TAG_COUNT; t++) {
        kl_mem_stats g;
        kl_mem_stats_get((kl_mem_tag)t, &g);
        KT_EQ_INT(g.allocated - g0[t].allocated, live[t]);
        sum += g.allocated;
    }
    KT_EQ_INT(t1.allocated, sum);
    KT_EQ_INT(t1.n_allocs - t0.n_allocs, allocs);
    KT_EQ_INT(t1.n_frees - t0.n_frees, frees);
    KT_CHECK(t1.reserved >= t1.allocated);
    KT_CHECK(t1.peak_allocated >= t1.allocated);
    if (kl_mem_direct()) KT_EQ_INT(t1.cache_hits, t0.cache_hits); /* every block a fresh malloc */
    else KT_CHECK(t1.cache_hits > t0.cache_hits);
    double f = kl_mem_fragmentation();
    KT_NEAR(f, (double)(t1.reserved - t1.allocated) / (double)t1.reserved, 1e-12);
    for (int i = 0; i < N; i++) kl_mem_free(p[i]), p[i] = NULL;
    kl_mem_stats_get(KL_TAG_COUNT, &t1);
    KT_EQ_INT(t1.allocated, t0.allocated);
    uint64_t before = t1.reserved;
    uint64_t rel = kl_mem_trim();
    kl_mem_stats_get(KL_TAG_COUNT, &t1);
    if (kl_mem_direct()) { /* freed blocks went back at once: nothing to trim */
        KT_EQ_INT(rel, 0);
        KT_EQ_INT(t1.reserved, t0.reserved);
    } else {
        KT_CHECK(rel > 0);
    }
    KT_EQ_INT(before - t1.reserved, rel);
}

KL_TEST(mem_cache_reuses_blocks) {
    void *a = kl_mem_alloc(100000, KL_TAG_WORKSPACE);
    KT_CHECK(a);
    kl_mem_free(a);
    kl_mem_stats s0, s1;
    kl_mem_stats_get(KL_TAG_COUNT, &s0);
    void *b = kl_mem_alloc(99000, KL_TAG_ACTIVATIONS); /* same size class */
    kl_mem_stats_get(KL_TAG_COUNT, &s1);
    KT_CHECK(b != NULL);
    if (kl_mem_direct()) { /* no cache: a new block of header + request */
        KT_EQ_INT(s1.cache_hits, s0.cache_hits);
        KT_EQ_INT(s1.reserved - s0.reserved, 99000 + KL_MEM_ALIGN);
    } else {
        KT_CHECK(b == a);
        KT_EQ_INT(s1.cache_hits - s0.cache_hits, 1);
        KT_EQ_INT(s1.reserved, s0.reserved);
    }
    kl_mem_free(b);
}

KL_TEST(mem_fragmentation_formula) {
    kl_mem_trim();
    kl_mem_stats s;
    kl_mem_stats_get(KL_TAG_COUNT, &s);
    void *big = kl_mem_alloc(10u << 20, KL_TAG_PARAMS); /* a large block: its own mapping */
    KT_CHECK(big);
    kl_mem_stats a;
    kl_mem_stats_get(KL_TAG_COUNT, &a);
    KT_CHECK(a.reserved - s.reserved >= (10u << 20));
    KT_CHECK(a.reserved - s.reserved <= (10u << 20) + (10u << 20) / 8 + 8192);
    kl_mem_free(big);
    kl_mem_stats_get(KL_TAG_COUNT, &a);
    /* freed but cached: reserved stays, allocated drops, fragmentation rises;
     * direct: the block is returned at once */
    if (kl_mem_direct()) KT_EQ_INT(a.reserved, s.reserved);
    else KT_CHECK(a.reserved > a.allocated);
    if (a.reserved) KT_NEAR(kl_mem_fragmentation(), (double)(a.reserved - a.allocated) / (double)a.reserved, 1e-12);
    else KT_NEAR(kl_mem_fragmentation(), 0.0, 0.0); /* direct, nothing live */
    kl_mem_trim();
}

KL_TEST(mem_budget_refuses_and_snapshots) {
    kl_mem_trim();
    kl_mem_stats s;
    kl_mem_stats_get(KL_TAG_COUNT, &s);
    const char *snap = kt_path("snap.json");
    kl_mem_set_snapshot_path(snap);
    kl_mem_set_budget(s.reserved + (8u << 20));
    void *a = kl_mem_alloc(4u << 20, KL_TAG_ACTIVATIONS);
    KT_CHECK(a != NULL);
    kl_err e = {0};
    void *b = kl_mem_alloc_e(6u << 20, KL_TAG_ACTIVATIONS, &e);
    kl_mem_set_budget(0);
    kl_mem_set_snapshot_path(NULL);
    kl_mem_free(a);
    KT_CHECK(b == NULL);
    KT_EQ_INT(e.code, KL_ENOMEM);
    KT_CONTAINS(e.msg, "budget");
    KT_CONTAINS(e.msg, snap);
    void *j = NULL;
    KT_OK(kl_json_load_file(snap, &j, &e), &e);
    cJSON *root = j;
    KT_CHECK(cJSON_GetObjectItem(root, "totals") != NULL);
    cJSON *segs = cJSON_GetObjectItem(root, "segments");
    KT_CHECK(cJSON_IsArray(segs) && cJSON_GetArraySize(segs) > 0);
    int found = 0;
    cJSON *sg;
    cJSON_ArrayForEach(sg, segs) {
        cJSON *bl;
        cJSON_ArrayForEach(bl, cJSON_GetObjectItem(sg, "blocks")) {
            cJSON *tag = cJSON_GetObjectItem(bl, "tag");
            cJSON *req = cJSON_GetObjectItem(bl, "requested");
            if (tag && !strcmp(tag->valuestring, "activations") && req && req->valuedouble == (double)(4u << 20)) found = 1;
        }
    }
    cJSON_Delete(root);
    KT_CHECK(found);
}

KL_TEST(mem_tag_budget) {
    kl_mem_stats s;
    kl_mem_stats_get(KL_TAG_REQUEST, &s);
    kl_mem_set_tag_budget(KL_TAG_REQUEST, s.allocated + 1000);
    void *a = kl_mem_alloc(900, KL_TAG_REQUEST);
    void *b = kl_mem_alloc(200, KL_TAG_REQUEST);
    void *c = kl_mem_alloc(200, KL_TAG_OTHER);
    kl_mem_set_tag_budget(KL_TAG_REQUEST, 0);
    KT_CHECK(a && !b && c);
    kl_mem_free(a);
    kl_mem_free(c);
}

KL_TEST(mem_parse_size) {
    uint64_t v;
    KT_OK(kl_mem_parse_size("512M", &v, NULL), &(kl_err){0});
    KT_EQ_INT(v, 512ull << 20);
    KT_OK(kl_mem_parse_size("1.5GiB", &v, NULL), &(kl_err){0});
    KT_EQ_INT(v, 3ull << 29);
    KT_OK(kl_mem_parse_size("4096", &v, NULL), &(kl_err){0});
    KT_EQ_INT(v, 4096);
    KT_OK(kl_mem_parse_size("50%", &v, NULL), &(kl_err){0});
    KT_EQ_INT(v, kl_mem_physical_bytes() / 2);
    kl_err e = {0};
    KT_CHECK(kl_mem_parse_size("lots", &v, &e) == KL_EINVAL);
    KT_CONTAINS(e.msg, "lots");
    KT_CHECK(kl_mem_parse_size("5X", &v, NULL) == KL_EINVAL);
}

KL_TEST(mem_realloc_keeps_data) {
    char *p = kl_mem_alloc(10, KL_TAG_OTHER);
    memcpy(p, "abcdefghi", 10);
    p = kl_mem_realloc(p, 100000, KL_TAG_OTHER);
    KT_CHECK(p && !strcmp(p, "abcdefghi"));
    KT_EQ_INT(kl_mem_size(p), 100000);
    p = kl_mem_realloc(p, 60000, KL_TAG_OTHER);
    KT_CHECK(p && !strcmp(p, "abcdefghi"));
    kl_mem_free(p);
    kl_mem_free(NULL);
}

KL_TEST(mem_arena) {
    kl_arena *a = kl_arena_new(1024, KL_TAG_REQUEST);
    KT_CHECK(a);
    char *x = kl_arena_alloc(a, 10), *y = kl_arena_alloc(a, 5000), *z = kl_arena_strdup(a, "hello");
    KT_CHECK(x && y && z && !strcmp(z, "hello"));
    KT_CHECK(((uintptr_t)y & 63) == 0);
    KT_CHECK(kl_arena_used(a) >= 5010);
    kl_arena_reset(a);
    KT_EQ_INT(kl_arena_used(a), 0);
    kl_arena_free(a);
    kl_arena_free(NULL);
}

typedef struct { int id; int fails; } thr_arg;
#include <pthread.h>
static void *churn(void *p) {
    thr_arg *t = p;
    uint64_t s = 12345 + (uint64_t)t->id;
    void *keep[64] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = (int)(rng(&s) % 64);
        if (keep[k]) { kl_mem_free(keep[k]); keep[k] = NULL; }
        else if (!(keep[k] = kl_mem_alloc(rng(&s) % 20000, (kl_mem_tag)(t->id % KL_TAG_COUNT)))) t->fails++;
    }
    for (int k = 0; k < 64; k++) kl_mem_free(keep[k]);
    return NULL;
}

KL_TEST(mem_threads) {
    kl_mem_stats s0, s1;
    kl_mem_stats_get(KL_TAG_COUNT, &s0);
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) { args[i] = (thr_arg){i, 0}; pthread_create(&th[i], NULL, churn, &args[i]); }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    kl_mem_stats_get(KL_TAG_COUNT, &s1);
    for (int i = 0; i < 4; i++) KT_EQ_INT(args[i].fails, 0);
    KT_EQ_INT(s1.allocated, s0.allocated);
    KT_EQ_INT(s1.n_allocs - s0.n_allocs, s1.n_frees - s0.n_frees);
}
