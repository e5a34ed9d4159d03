/* Mergeable sketches of a column (include/keel/profile.h): the
 * relative-error quantile sketch (log-spaced buckets), fixed-bin histograms
 * over quantile edges, and exact category counts with a cap. Used by the
 * reference profile (profile.c) and, for bins, by the live monitor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature_int.h"
#include "keel/profile.h"

/* ==================================================================
 * Quantile sketch
 * ================================================================== */

static double qs_gamma(void) { return (1.0 + KL_QS_ALPHA) / (1.0 - KL_QS_ALPHA); }

int32_t kl_qs_index(double a) {
    if (a > KL_QS_MAX_ABS) a = KL_QS_MAX_ABS;
    return (int32_t)ceil(log(a) / log(qs_gamma()));
}

void kl_qs_init(kl_qsketch *q) { memset(q, 0, sizeof *q); }

void kl_qs_free(kl_qsketch *q) {
    if (!q) return;
    kl_mem_free(q->pos.c);
    kl_mem_free(q->neg.c);
    memset(q, 0, sizeof *q);
}

/* makes side s hold index i (grows the dense range) */
static int side_reserve(kl_qs_side *s, int32_t i) {
    if (s->n && i >= s->lo && i < s->lo + (int32_t)s->n) return KL_OK;
    int32_t lo = s->n ? (i < s->lo ? i : s->lo) : i;
    int32_t hi = s->n ? (i >= s->lo + (int32_t)s->n ? i + 1 : s->lo + (int32_t)s->n) : i + 1;
    /* grow by a margin so that a slowly widening range does not copy per value */
    int32_t want = hi - lo, margin = want / 4 + 8;
    if (s->n) {
        if (lo < s->lo) lo -= margin;
        else hi += margin;
    }
    uint64_t *c = kl_mem_alloc((size_t)(hi - lo) * sizeof *c, KL_TAG_OTHER);
    if (!c) return KL_ENOMEM;
    memset(c, 0, (size_t)(hi - lo) * sizeof *c);
    if (s->n) memcpy(c + (s->lo - lo), s->c, s->n * sizeof *c);
    kl_mem_free(s->c);
    s->c = c;
    s->lo = lo;
    s->n = (uint32_t)(hi - lo);
    return KL_OK;
}

static int side_add(kl_qs_side *s, int32_t i, uint64_t w) {
    int rc = side_reserve(s, i);
    if (rc) return rc;
    s->c[i - s->lo] += w;
    return KL_OK;
}

int kl_qs_add(kl_qsketch *q, double x, uint64_t w) {
    if (isnan(x) || !w) return KL_OK;
    double a = fabs(x);
    q->count += w;
    if (a < KL_QS_MIN_ABS) { q->zero += w; return KL_OK; }
    if (a > KL_QS_MAX_ABS) q->clamped += w;
    return side_add(x > 0 ? &q->pos : &q->neg, kl_qs_index(a), w);
}

static int side_merge(kl_qs_side *a, const kl_qs_side *b) {
    for (uint32_t k = 0; k < b->n; k++) {
        if (!b->c[k]) continue;
        int rc = side_add(a, b->lo + (int32_t)k, b->c[k]);
        if (rc) return rc;
    }
    return KL_OK;
}

int kl_qs_merge(kl_qsketch *a, const kl_qsketch *b) {
    int rc = side_merge(&a->pos, &b->pos);
    if (!rc) rc = side_merge(&a->neg, &b->neg);
    if (rc) return rc;
    a->count += b->count;
    a->zero += b->zero;
    a->clamped += b->clamped;
    return KL_OK;
}

/* the value bucket i stands for: the midpoint in relative terms, 2 g^i / (g + 1) */
static double qs_value(int32_t i) { return 2.0 * pow(qs_gamma(), i) / (qs_gamma() + 1.0); }

double kl_qs_quantile(const kl_qsketch *q, double p) {
    if (!q->count) return NAN;
    if (p < 0) p = 0;
    if (p > 1) p = 1;
    uint64_t rank = (uint64_t)floor(p * (double)(q->count - 1)), seen = 0;
    /* negatives, largest magnitude first */
    for (uint32_t k = q->neg.n; k-- > 0;) {
        seen += q->neg.c[k];
        if (seen > rank) return -qs_value(q->neg.lo + (int32_t)k);
    }
    seen += q->zero;
    if (seen > rank) return 0.0;
    for (uint32_t k = 0; k < q->pos.n; k++) {
        seen += q->pos.c[k];
        if (seen > rank) return qs_value(q->pos.lo + (int32_t)k);
    }
    return q->pos.n ? qs_value(q->pos.lo + (int32_t)q->pos.n - 1) : 0.0;
}

/* ==================================================================
 * Histogram bins
 * ================================================================== */

size_t kl_hist_bin(const double *e, size_t n, double x) {
    size_t lo = 0; /* number of edges <= x */
    if (n <= 16) { /* the profile's (<= KL_PROF_BINS + 2 edges): a count without branches */
        for (size_t i = 0; i < n; i++) lo += e[i] <= x;
    } else {
        size_t hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (e[mid] <= x) lo = mid + 1; else hi = mid;
        }
    }
    return lo == n && x == e[n - 1] ? n - 1 : lo;
}

size_t kl_hist_edges(const double *v, size_t n, int nb, double *edges) {
    size_t m = 0;
    if (!n) return 0;
    for (int k = 0; k <= nb; k++) {
        double x = v[(size_t)((double)k * (double)(n - 1) / nb)];
        if (!m || x > edges[m - 1]) edges[m++] = x;
    }
    /* the largest value gets a bin of its own: a column of few distinct
     * values (a one-hot slot: 0 and 1) keeps each in its own bin */
    edges[m] = nextafter(edges[m - 1], INFINITY);
    return m + 1;
}

/* ==================================================================
 * Category counts
 * ================================================================== */

struct kl_catcount {
    fmap m;
    size_t cap;
    uint64_t total, overflow;
};

int kl_catcount_new(size_t cap, kl_catcount **out) {
    kl_catcount *c = calloc(1, sizeof *c);
    if (!c || kl__fmap_init(&c->m, 64)) { free(c); *out = NULL; return KL_ENOMEM; }
    c->cap = cap;
    *out = c;
    return KL_OK;
}

void kl_catcount_free(kl_catcount *c) {
    if (!c) return;
    kl__fmap_free(&c->m);
    free(c);
}

int kl_catcount_add(kl_catcount *c, const char *key, size_t n, uint64_t w) {
    c->total += w;
    uint64_t *v = kl__fmap_get(&c->m, key, n);
    if (!v) {
        if (c->m.len >= c->cap) { c->overflow += w; return KL_OK; }
        if (!(v = kl__fmap_put(&c->m, key, n, NULL))) return KL_ENOMEM;
    }
    *v += w;
    return KL_OK;
}

int kl_catcount_merge(kl_catcount *a, const kl_catcount *b) {
    for (size_t i = 0; i < b->m.cap; i++) {
        const fmap_ent *x = &b->m.e[i];
        if (!x->used) continue;
        int rc = kl_catcount_add(a, kl__fmap_key(&b->m, x), x->n, x->v);
        if (rc) return rc;
    }
    a->total += b->overflow;
    a->overflow += b->overflow;
    return KL_OK;
}

uint64_t kl_catcount_total(const kl_catcount *c) { return c->total; }
size_t kl_catcount_distinct(const kl_catcount *c) { return c->m.len; }
uint64_t kl_catcount_overflow(const kl_catcount *c) { return c->overflow; }

typedef struct { const char *k; size_t n; uint64_t c; } topent;

static int top_cmp(const void *a, const void *b) {
    const topent *x = a, *y = b;
    if (x->c != y->c) return x->c > y->c ? -1 : 1;
    size_t m = x->n < y->n ? x->n : y->n;
    int r = memcmp(x->k, y->k, m);
    return r ? r : (x->n > y->n) - (x->n < y->n);
}

size_t kl_catcount_top(const kl_catcount *c, size_t k, const char **keys, size_t *lens, uint64_t *counts) {
    topent *t = malloc((c->m.len ? c->m.len : 1) * sizeof *t);
    if (!t) return 0;
    size_t n = 0;
    for (size_t i = 0; i < c->m.cap; i++) {
        const fmap_ent *x = &c->m.e[i];
        if (x->used) t[n++] = (topent){kl__fmap_key(&c->m, x), x->n, x->v};
    }
    qsort(t, n, sizeof *t, top_cmp);
    if (n > k) n = k;
    for (size_t i = 0; i < n; i++) {
        keys[i] = t[i].k;
        if (lens) lens[i] = t[i].n;
        counts[i] = t[i].c;
    }
    free(t);
    return n;
}
