/* Data-movement kernels: strided copy (the engine under views, expand, tile,
 * slice), transpose, concat, split, slice, pad, gather, tile, expand. All are
 * dtype-generic (element size in bytes) and parallel over blocks of the output. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <string.h>

/* ==================================================================
 * Strided copy
 * ================================================================== */

typedef struct {
    size_t es;
    int rank;                 /* after coalescing; the last dim is the inner loop */
    int64_t dims[KL_MAX_DIMS];
    int64_t ss[KL_MAX_DIMS], ds[KL_MAX_DIMS];
    const char *src;
    char *dst;
    int64_t outer;            /* product of dims[0..rank-2] */
} copy_ctx;

static inline void copy_elems(size_t es, char *d, int64_t dstr, const char *s, int64_t sstr, int64_t n) {
    if (dstr == 1 && sstr == 1) { memcpy(d, s, (size_t)n * es); return; }
    switch (es) {
    case 4: { uint32_t *dd = (uint32_t *)d; const uint32_t *sp = (const uint32_t *)s;
              for (int64_t i = 0; i < n; i++) dd[i * dstr] = sp[i * sstr];
              return; }
    case 8: { uint64_t *dd = (uint64_t *)d; const uint64_t *sp = (const uint64_t *)s;
              for (int64_t i = 0; i < n; i++) dd[i * dstr] = sp[i * sstr];
              return; }
    case 2: { uint16_t *dd = (uint16_t *)d; const uint16_t *sp = (const uint16_t *)s;
              for (int64_t i = 0; i < n; i++) dd[i * dstr] = sp[i * sstr];
              return; }
    case 1:
        for (int64_t i = 0; i < n; i++) d[i * dstr] = s[i * sstr];
        return;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * dstr * (int64_t)es, s + i * sstr * (int64_t)es, es);
    }
}

static void copy_range(void *vctx, size_t begin, size_t end, int chunk) {
    copy_ctx *c = vctx;
    int r = c->rank;
    int64_t inner = c->dims[r - 1];
    int64_t idx[KL_MAX_DIMS] = {0};
    int64_t rem = (int64_t)begin;
    for (int i = r - 2; i >= 0; i--) { idx[i] = rem % c->dims[i]; rem /= c->dims[i]; }
    for (size_t o = begin; o < end; o++) {
        int64_t so = 0, dof = 0;
        for (int i = 0; i < r - 1; i++) { so += idx[i] * c->ss[i]; dof += idx[i] * c->ds[i]; }
        copy_elems(c->es, c->dst + dof * (int64_t)c->es, c->ds[r - 1], c->src + so * (int64_t)c->es,
                   c->ss[r - 1], inner);
        for (int i = r - 2; i >= 0; i--) { if (++idx[i] < c->dims[i]) break; idx[i] = 0; }
    }
}

void kl_copy_strided(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *src_strides, void *dst, const int64_t *dst_strides,
                     kl_pool *pool) {
    copy_ctx c = {.es = esize, .src = src, .dst = dst};
    /* drop size-1 dims, coalesce mergeable neighbours */
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0) return;
        if (dims[i] == 1) continue;
        if (r > 0 && c.ss[r - 1] == src_strides[i] * dims[i] && c.ds[r - 1] == dst_strides[i] * dims[i]) {
            c.dims[r - 1] *= dims[i];
            c.ss[r - 1] = src_strides[i];
            c.ds[r - 1] = dst_strides[i];
            continue;
        }
        c.dims[r] = dims[i]; c.ss[r] = src_strides[i]; c.ds[r] = dst_strides[i]; r++;
    }
    if (r == 0) { memcpy(dst, src, esize); return; }
    c.rank = r;
    c.outer = 1;
    for (int i = 0; i < r - 1; i++) c.outer *= c.dims[i];
    int64_t inner = c.dims[r - 1];
    size_t grain = (size_t)(inner >= 16384 ? 1 : 16384 / inner);
    kl_pool_parallel_for(pool, (size_t)c.outer, grain, copy_range, &c);
}
