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
    int64_t dims[KL__MAX_COPY_DIMS];
    int64_t ss[KL__MAX_COPY_DIMS], ds[KL__MAX_COPY_DIMS];
    const char *src;
    char *dst;
    int64_t outer;            /* product of dims[0..rank-2] */
    /* blocked 2-D transpose: axis q has src stride 1, the last axis dst stride 1 */
    int q;
    int64_t tq, tl;           /* tile counts along q and the last axis */
} copy_ctx;

#define TBLK 32

static inline void copy_elems(size_t es, char *d, int64_t dstr, const char *s, int64_t sstr, int64_t n) {
    if (dstr == 1 && sstr == 1) { memcpy(d, s, (size_t)n * es); return; }
    switch (es) {
    case 4: {
        uint32_t *dd = (uint32_t *)d;
        const uint32_t *sp = (const uint32_t *)s;
        for (int64_t i = 0; i < n; i++) dd[i * dstr] = sp[i * sstr];
        return;
    }
    case 8: {
        uint64_t *dd = (uint64_t *)d;
        const uint64_t *sp = (const uint64_t *)s;
        for (int64_t i = 0; i < n; i++) dd[i * dstr] = sp[i * sstr];
        return;
    }
    case 2: {
        uint16_t *dd = (uint16_t *)d;
        const uint16_t *sp = (const uint16_t *)s;
        for (int64_t i = 0; i < n; i++) dd[i * dstr] = sp[i * sstr];
        return;
    }
    case 1:
        for (int64_t i = 0; i < n; i++) d[i * dstr] = s[i * sstr];
        return;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * dstr * (int64_t)es, s + i * sstr * (int64_t)es, es);
    }
}

/* Short contiguous rows (attention heads: 16 or 64 floats): AVX copies
 * inline instead of a memcpy call per row. */
static inline void copy_short_row(char *d, const char *s, size_t bytes) {
    size_t i = 0;
    for (; i + 32 <= bytes; i += 32) _mm256_storeu_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
    if (i < bytes) memcpy(d + i, s + i, bytes - i);
}

static void copy_range(void *vctx, size_t begin, size_t end, int chunk) {
    copy_ctx *c = vctx;
    int r = c->rank;
    int64_t inner = c->dims[r - 1];
    int64_t idx[KL__MAX_COPY_DIMS] = {0};
    int64_t rem = (int64_t)begin, so = 0, dof = 0;
    for (int i = r - 2; i >= 0; i--) { idx[i] = rem % c->dims[i]; rem /= c->dims[i]; }
    for (int i = 0; i < r - 1; i++) { so += idx[i] * c->ss[i]; dof += idx[i] * c->ds[i]; }
    size_t row_bytes = (size_t)inner * c->es;
    int short_rows = c->ss[r - 1] == 1 && c->ds[r - 1] == 1 && row_bytes <= 512;
    for (size_t o = begin; o < end; o++) {
        if (short_rows) copy_short_row(c->dst + dof * (int64_t)c->es, c->src + so * (int64_t)c->es, row_bytes);
        else
            copy_elems(c->es, c->dst + dof * (int64_t)c->es, c->ds[r - 1], c->src + so * (int64_t)c->es,
                       c->ss[r - 1], inner);
        /* next row: carry through the outer indices, offsets updated incrementally */
        for (int i = r - 2; i >= 0; i--) {
            so += c->ss[i];
            dof += c->ds[i];
            if (++idx[i] < c->dims[i]) break;
            so -= c->ss[i] * c->dims[i];
            dof -= c->ds[i] * c->dims[i];
            idx[i] = 0;
        }
    }
}

/* Items: (other dims) x tq x tl tiles. */
static void tile_range(void *vctx, size_t begin, size_t end, int chunk) {
    copy_ctx *c = vctx;
    int r = c->rank, q = c->q;
    size_t es = c->es;
    for (size_t it = begin; it < end; it++) {
        int64_t rem = (int64_t)it;
        int64_t tl = rem % c->tl; rem /= c->tl;
        int64_t tq = rem % c->tq; rem /= c->tq;
        int64_t so = 0, dof = 0;
        for (int i = r - 2; i >= 0; i--) {
            if (i == q) continue;
            int64_t ix = rem % c->dims[i];
            rem /= c->dims[i];
            so += ix * c->ss[i];
            dof += ix * c->ds[i];
        }
        int64_t a0 = tq * TBLK, a1 = KL_MIN(a0 + TBLK, c->dims[q]);
        int64_t b0 = tl * TBLK, b1 = KL_MIN(b0 + TBLK, c->dims[r - 1]);
        int64_t sl = c->ss[r - 1], dq = c->ds[q];
        if (es == 4) {
            const uint32_t *S = (const uint32_t *)c->src + so;
            uint32_t *D = (uint32_t *)c->dst + dof;
            for (int64_t b = b0; b < b1; b++)
                for (int64_t a = a0; a < a1; a++) D[a * dq + b] = S[a + b * sl];
        } else {
            for (int64_t b = b0; b < b1; b++)
                for (int64_t a = a0; a < a1; a++)
                    memcpy(c->dst + (dof + a * dq + b) * (int64_t)es, c->src + (so + a + b * sl) * (int64_t)es, es);
        }
    }
}

void kl_copy_strided(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *src_strides, void *dst, const int64_t *dst_strides,
                     kl_pool *pool) {
    copy_ctx c = {.es = esize, .src = src, .dst = dst};
    KL_ASSERT(rank <= KL__MAX_COPY_DIMS);
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
    /* transpose-like: inner dst-contiguous axis reads with a stride while another
     * axis is src-contiguous -> blocked tiles */
    c.q = -1;
    if (r >= 2 && c.ds[r - 1] == 1 && c.ss[r - 1] != 1 && inner >= 4)
        for (int i = 0; i < r - 1; i++)
            if (c.ss[i] == 1 && c.dims[i] >= 4) c.q = i;
    if (c.q >= 0) {
        c.tq = (c.dims[c.q] + TBLK - 1) / TBLK;
        c.tl = (inner + TBLK - 1) / TBLK;
        int64_t items = c.outer / c.dims[c.q] * c.tq * c.tl;
        kl_pool_parallel_for(pool, (size_t)items, 4, tile_range, &c);
        return;
    }
    size_t grain = (size_t)(inner >= 16384 ? 1 : 16384 / inner);
    kl_pool_parallel_for(pool, (size_t)c.outer, grain, copy_range, &c);
}

/* ==================================================================
 * Transpose, concat, split, slice
 * ================================================================== */

void kl_transpose(size_t esize, int rank, const int64_t *dims, const int *perm, const void *x, void *y,
                  kl_pool *pool) {
    int64_t st[KL_MAX_DIMS], od[KL_MAX_DIMS], ss[KL_MAX_DIMS], ds[KL_MAX_DIMS];
    kl_tensor_contiguous_strides(rank, dims, st);
    for (int i = 0; i < rank; i++) { od[i] = dims[perm[i]]; ss[i] = st[perm[i]]; }
    kl_tensor_contiguous_strides(rank, od, ds);
    kl_copy_strided(esize, rank, od, x, ss, y, ds, pool);
}

void kl_concat(size_t esize, int rank, const int64_t *out_dims, int axis, int n, const void *const *xs,
               const int64_t *sizes, void *y, kl_pool *pool) {
    if (axis < 0) axis += rank;
    int64_t ds[KL_MAX_DIMS], d[KL_MAX_DIMS], ss[KL_MAX_DIMS], off = 0;
    kl_tensor_contiguous_strides(rank, out_dims, ds);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < rank; k++) d[k] = out_dims[k];
        d[axis] = sizes[i];
        kl_tensor_contiguous_strides(rank, d, ss);
        if (sizes[i] > 0)
            kl_copy_strided(esize, rank, d, xs[i], ss, (char *)y + off * ds[axis] * (int64_t)esize, ds, pool);
        off += sizes[i];
    }
}

void kl_split(size_t esize, int rank, const int64_t *dims, int axis, int n, const int64_t *sizes, const void *x,
              void *const *ys, kl_pool *pool) {
    if (axis < 0) axis += rank;
    int64_t ss[KL_MAX_DIMS], d[KL_MAX_DIMS], ds[KL_MAX_DIMS], off = 0;
    kl_tensor_contiguous_strides(rank, dims, ss);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < rank; k++) d[k] = dims[k];
        d[axis] = sizes[i];
        kl_tensor_contiguous_strides(rank, d, ds);
        if (sizes[i] > 0)
            kl_copy_strided(esize, rank, d, (const char *)x + off * ss[axis] * (int64_t)esize, ss, ys[i], ds, pool);
        off += sizes[i];
    }
}

int kl_slice_prepare(int rank, const int64_t *dims, int n_axes, const int64_t *starts, const int64_t *ends,
                     const int64_t *axes, const int64_t *steps, int64_t *start, int64_t *step, int64_t *out_dims,
                     kl_err *e) {
    int seen[KL_MAX_DIMS] = {0};
    for (int i = 0; i < rank; i++) { start[i] = 0; step[i] = 1; out_dims[i] = dims[i]; }
    for (int j = 0; j < n_axes; j++) {
        int64_t ax = axes ? axes[j] : j;
        if (ax < 0) ax += rank;
        if (ax < 0 || ax >= rank) return kl_err_set(e, KL_EINVAL, "slice: axis %lld out of range for rank %d", (long long)(axes ? axes[j] : j), rank);
        if (seen[ax]++) return kl_err_set(e, KL_EINVAL, "slice: axis %lld repeated", (long long)ax);
        int64_t st = steps ? steps[j] : 1, d = dims[ax];
        if (st == 0) return kl_err_set(e, KL_EINVAL, "slice: step 0 on axis %lld", (long long)ax);
        int64_t s = starts[j], en = ends[j];
        if (s < 0) s += d;
        if (en < 0) en += d;
        int64_t n;
        if (st > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            en = en < 0 ? 0 : en > d ? d : en;
            n = en > s ? (en - s + st - 1) / st : 0;
        } else {
            s = s < 0 ? -1 : s > d - 1 ? d - 1 : s;
            en = en < -1 ? -1 : en > d - 1 ? d - 1 : en;
            /* ends = INT_MIN-ish means "to the beginning" */
            if (ends[j] < -d) en = -1;
            n = s > en ? (s - en + (-st) - 1) / (-st) : 0;
        }
        start[ax] = n > 0 ? s : 0;
        step[ax] = st;
        out_dims[ax] = n;
    }
    return KL_OK;
}

void kl_slice(size_t esize, int rank, const int64_t *dims, const void *x, const int64_t *start, const int64_t *step,
              const int64_t *out_dims, void *y, kl_pool *pool) {
    int64_t st[KL_MAX_DIMS], ss[KL_MAX_DIMS], ds[KL_MAX_DIMS], off = 0;
    kl_tensor_contiguous_strides(rank, dims, st);
    kl_tensor_contiguous_strides(rank, out_dims, ds);
    for (int i = 0; i < rank; i++) {
        if (out_dims[i] == 0) return;
        ss[i] = st[i] * step[i];
        off += start[i] * st[i];
    }
    kl_copy_strided(esize, rank, out_dims, (const char *)x + off * (int64_t)esize, ss, y, ds, pool);
}

/* ==================================================================
 * Pad
 * ================================================================== */

typedef struct {
    size_t es;
    int rank;
    const int64_t *dims, *pads;
    int64_t od[KL_MAX_DIMS], ist[KL_MAX_DIMS];
    kl_pad_mode mode;
    const char *x, *val;
    char *y;
    int64_t rows;
} pad_ctx;

/* Source index for output index o along an axis (-1: constant). */
static inline int64_t pad_src(int64_t o, int64_t d, int64_t pb, kl_pad_mode m) {
    int64_t i = o - pb;
    if (i >= 0 && i < d) return i;
    if (d == 0) return -1;
    switch (m) {
    case KL_PAD_EDGE: return i < 0 ? 0 : d - 1;
    case KL_PAD_WRAP: return ((i % d) + d) % d;
    case KL_PAD_REFLECT: {
        if (d == 1) return 0;
        int64_t p = 2 * (d - 1);
        i = ((i % p) + p) % p;
        return i < d ? i : p - i;
    }
    default: return -1;
    }
}

static void pad_rows(void *vc, size_t r0, size_t r1, int chunk) {
    pad_ctx *c = vc;
    int r = c->rank;
    size_t es = c->es;
    int64_t ow = c->od[r - 1], iw = c->dims[r - 1], pb = c->pads[r - 1];
    for (size_t row = r0; row < r1; row++) {
        int64_t rem = (int64_t)row, so = 0;
        int cst = 0;
        for (int i = r - 2; i >= 0; i--) {
            int64_t o = rem % c->od[i];
            rem /= c->od[i];
            int64_t s = pad_src(o, c->dims[i], c->pads[i], c->mode);
            if (s < 0) cst = 1;
            so += s * c->ist[i];
        }
        char *y = c->y + (int64_t)row * ow * (int64_t)es;
        if (cst) {
            for (int64_t j = 0; j < ow; j++) memcpy(y + j * (int64_t)es, c->val, es);
            continue;
        }
        const char *x = c->x + so * (int64_t)es;
        int64_t lo = KL_MIN(KL_MAX(pb, 0), ow), hi = KL_MIN(pb + iw, ow);
        for (int64_t j = 0; j < lo; j++) {
            int64_t s = pad_src(j, iw, pb, c->mode);
            memcpy(y + j * (int64_t)es, s < 0 ? c->val : x + s * (int64_t)es, es);
        }
        if (hi > lo) memcpy(y + lo * (int64_t)es, x + (lo - pb) * (int64_t)es, (size_t)(hi - lo) * es);
        for (int64_t j = KL_MAX(hi, lo); j < ow; j++) {
            int64_t s = pad_src(j, iw, pb, c->mode);
            memcpy(y + j * (int64_t)es, s < 0 ? c->val : x + s * (int64_t)es, es);
        }
    }
}

int kl_pad(size_t esize, int rank, const int64_t *dims, const void *x, const int64_t *pads, kl_pad_mode mode,
           const void *value, void *y, kl_pool *pool, kl_err *e) {
    static const char zeros[16] = {0};
    if (esize > 16) return kl_err_set(e, KL_EINVAL, "pad: element size %zu too large", esize);
    pad_ctx c = {.es = esize, .rank = rank, .dims = dims, .pads = pads, .mode = mode, .x = x,
                 .val = value ? value : zeros, .y = y};
    /* negative pads crop: handle by slicing the input view first */
    int64_t st[KL_MAX_DIMS], d2[KL_MAX_DIMS], p2[KL_MAX_DIMS * 2], off = 0;
    kl_tensor_contiguous_strides(rank, dims, st);
    for (int i = 0; i < rank; i++) {
        int64_t b = pads[i], en = pads[rank + i];
        d2[i] = dims[i];
        if (b < 0) { off += -b * st[i]; d2[i] += b; b = 0; }
        if (en < 0) { d2[i] += en; en = 0; }
        if (d2[i] < 0) return kl_err_set(e, KL_EINVAL, "pad: negative pads larger than axis %d", i);
        if (mode == KL_PAD_REFLECT && (b > 0 || en > 0) && (b >= d2[i] || en >= d2[i]) && d2[i] > 1)
            return kl_err_set(e, KL_EINVAL, "pad: reflect pads (%lld, %lld) must be smaller than axis %d size %lld",
                              (long long)b, (long long)en, i, (long long)d2[i]);
        if ((mode != KL_PAD_CONSTANT) && d2[i] == 0 && (b > 0 || en > 0))
            return kl_err_set(e, KL_EINVAL, "pad: cannot %s-pad empty axis %d", mode == KL_PAD_EDGE ? "edge" : "reflect", i);
        p2[i] = b;
        p2[rank + i] = en;
        c.od[i] = d2[i] + b + en;
    }
    c.dims = d2;
    c.pads = p2;
    c.x = (const char *)x + off * (int64_t)esize;
    for (int i = 0; i < rank; i++) c.ist[i] = st[i];
    if (rank == 0) { memcpy(y, x, esize); return KL_OK; }
    int64_t rows = 1;
    for (int i = 0; i < rank - 1; i++) rows *= c.od[i];
    if (rows == 0 || c.od[rank - 1] == 0) return KL_OK;
    kl_pool_parallel_for(pool, (size_t)rows, (size_t)KL_MAX(1, 4096 / c.od[rank - 1]), pad_rows, &c);
    return KL_OK;
}

/* ==================================================================
 * Gather, tile, expand
 * ================================================================== */

typedef struct {
    size_t es;
    int64_t outer, nidx, inner, d;
    const char *x;
    const void *idx;
    int i64;
    char *y;
} gather_ctx;

static void gather_range(void *vc, size_t b0, size_t b1, int chunk) {
    gather_ctx *c = vc;
    size_t row = (size_t)c->inner * c->es;
    for (size_t it = b0; it < b1; it++) {
        int64_t o = (int64_t)it / c->nidx, j = (int64_t)it % c->nidx;
        int64_t v = c->i64 ? ((const int64_t *)c->idx)[j] : ((const int32_t *)c->idx)[j];
        if (v < 0) v += c->d;
        memcpy(c->y + (int64_t)it * (int64_t)row, c->x + (o * c->d + v) * (int64_t)row, row);
    }
}

int kl_gather(size_t esize, int rank, const int64_t *dims, const void *x, int axis, kl_dtype idx_dtype,
              const void *idx, int64_t nidx, void *y, kl_pool *pool, kl_err *e) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return kl_err_set(e, KL_EINVAL, "gather: axis out of range for rank %d", rank);
    if (idx_dtype != KL_I32 && idx_dtype != KL_I64)
        return kl_err_set(e, KL_ETYPE, "gather: indices must be int32 or int64, not %s", kl_dtype_name(idx_dtype));
    gather_ctx c = {.es = esize, .outer = 1, .nidx = nidx, .inner = 1, .d = dims[axis], .x = x, .idx = idx,
                    .i64 = idx_dtype == KL_I64, .y = y};
    for (int i = 0; i < axis; i++) c.outer *= dims[i];
    for (int i = axis + 1; i < rank; i++) c.inner *= dims[i];
    for (int64_t j = 0; j < nidx; j++) {
        int64_t v = c.i64 ? ((const int64_t *)idx)[j] : ((const int32_t *)idx)[j];
        if (v < -c.d || v >= c.d)
            return kl_err_set(e, KL_ERANGE, "gather: index %lld (position %lld) out of range for axis %d of size %lld",
                              (long long)v, (long long)j, axis, (long long)c.d);
    }
    size_t items = (size_t)(c.outer * nidx);
    if (items && c.inner)
        kl_pool_parallel_for(pool, items, (size_t)KL_MAX(1, 4096 / KL_MAX(1, c.inner)), gather_range, &c);
    return KL_OK;
}

void kl_tile(size_t esize, int rank, const int64_t *dims, const void *x, const int64_t *repeats, void *y,
             kl_pool *pool) {
    /* output viewed as (r0, d0, r1, d1, ...): src strides (0, s0, 0, s1, ...) */
    int64_t st[KL_MAX_DIMS], od[KL__MAX_COPY_DIMS], ss[KL__MAX_COPY_DIMS], ds[KL__MAX_COPY_DIMS];
    kl_tensor_contiguous_strides(rank, dims, st);
    for (int i = 0; i < rank; i++) {
        od[2 * i] = repeats[i];
        od[2 * i + 1] = dims[i];
        ss[2 * i] = 0;
        ss[2 * i + 1] = st[i];
    }
    int64_t s = 1;
    for (int i = 2 * rank - 1; i >= 0; i--) { ds[i] = s; s *= od[i]; }
    if (rank == 0) { memcpy(y, x, esize); return; }
    kl_copy_strided(esize, 2 * rank, od, x, ss, y, ds, pool);
}

int kl_expand(size_t esize, int rx, const int64_t *dx, const void *x, int ry, const int64_t *dy, void *y,
              kl_pool *pool, kl_err *e) {
    char a[128], b[128];
    if (rx > ry) goto bad;
    int64_t st[KL_MAX_DIMS], ss[KL_MAX_DIMS], ds[KL_MAX_DIMS];
    kl_tensor_contiguous_strides(rx, dx, st);
    for (int i = 0; i < ry; i++) {
        int j = i - (ry - rx);
        int64_t d = j >= 0 ? dx[j] : 1;
        if (d != dy[i] && d != 1) goto bad;
        ss[i] = (j >= 0 && d != 1) ? st[j] : 0;
    }
    kl_tensor_contiguous_strides(ry, dy, ds);
    if (ry == 0) { memcpy(y, x, esize); return KL_OK; }
    kl_copy_strided(esize, ry, dy, x, ss, y, ds, pool);
    return KL_OK;
bad:
    return kl_err_set(e, KL_ESHAPE, "expand: %s cannot be broadcast to %s", kl_shape_str(rx, dx, a, sizeof a),
                      kl_shape_str(ry, dy, b, sizeof b));
}
