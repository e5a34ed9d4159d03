/* A small open-addressing hash map from key bytes to a uint64, used for
 * vocabularies, entity ids (offline windows) and the online store. Keys are
 * copied into one growing pool (no per-key allocation). */
#include <stdlib.h>
#include <string.h>

#include "feature/feature_int.h"

int kl__fmap_init(fmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < expect * 2) cap <<= 1;
    m->e = calloc(cap, sizeof *m->e);
    if (!m->e) return KL_ENOMEM;
    m->cap = cap;
    return KL_OK;
}

void kl__fmap_free(fmap *m) {
    if (!m) return;
    free(m->e);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static size_t find(const fmap *m, uint64_t h, const void *k, size_t n) {
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;;) {
        const fmap_ent *x = &m->e[i];
        if (!x->used) return i;
        if (x->h == h && x->n == n && memcmp(m->pool + x->off, k, n) == 0) return i;
        i = (i + 1) & mask;
    }
}

uint64_t *kl__fmap_get(const fmap *m, const void *k, size_t n) {
    if (!m->cap) return NULL;
    uint64_t h = kl__xxh64(k, n, 0);
    size_t i = find(m, h, k, n);
    return m->e[i].used ? &m->e[i].v : NULL;
}

static int grow(fmap *m) {
    size_t ncap = m->cap * 2;
    fmap_ent *ne = calloc(ncap, sizeof *ne);
    if (!ne) return KL_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].used) continue;
        size_t j = (size_t)m->e[i].h & (ncap - 1);
        while (ne[j].used) j = (j + 1) & (ncap - 1);
        ne[j] = m->e[i];
    }
    free(m->e);
    m->e = ne;
    m->cap = ncap;
    return KL_OK;
}

uint64_t *kl__fmap_put(fmap *m, const void *k, size_t n, int *created) {
    if (created) *created = 0;
    if (!m->cap && kl__fmap_init(m, 8)) return NULL;
    uint64_t h = kl__xxh64(k, n, 0);
    size_t i = find(m, h, k, n);
    if (m->e[i].used) return &m->e[i].v;
    if ((m->len + 1) * 4 > m->cap * 3) {
        if (grow(m)) return NULL;
        i = find(m, h, k, n);
    }
    if (m->pool_len + n + 1 > m->pool_cap) {
        size_t nc = m->pool_cap ? m->pool_cap * 2 : 4096;
        while (nc < m->pool_len + n + 1) nc *= 2;
        char *np = realloc(m->pool, nc);
        if (!np) return NULL;
        m->pool = np;
        m->pool_cap = nc;
    }
    memcpy(m->pool + m->pool_len, k, n);
    m->pool[m->pool_len + n] = 0;
    fmap_ent *x = &m->e[i];
    x->h = h; x->off = m->pool_len; x->n = (uint32_t)n; x->used = 1; x->v = 0;
    m->pool_len += n + 1;
    m->len++;
    if (created) *created = 1;
    return &x->v;
}
