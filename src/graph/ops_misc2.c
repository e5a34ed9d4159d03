/* Common data ops: Unique, Compress, ReverseSequence (dtype-generic, by
 * element bytes) and MeanVarianceNormalization (any float dtype via
 * doubles). Unique and Compress have data-dependent output shapes: infer
 * computes them from the values (run-time shape inference). */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEED(t)                                       \
    do {                                              \
        if (!(t) || !(t)->data) return KL__NEED_DATA; \
    } while (0)

/* ================================================================== *
 * Unique: slices along axis (or elements of the flattened input), sorted
 * ascending (lexicographically for slices) or in order of first occurrence.
 * ================================================================== */

typedef struct {
    const kl_tensor *x;
    int64_t outer, len, inner; /* slice i = x[o, i, j] for all o, j */
} uq_ctx;

static _Thread_local const uq_ctx *uq_cur;

/* compares element a with element b (flat indices) by value */
static int uq_elem_cmp(const kl_tensor *x, int64_t a, int64_t b) {
    switch (x->dtype) {
    case KL_F32:
    case KL_F64:
    case KL_F16:
    case KL_BF16: {
        double u = kl__dbl_at(x, a), v = kl__dbl_at(x, b);
        if (u != v) {
            if (u != u) return v != v ? 0 : 1; /* NaN sorts last */
            if (v != v) return -1;
            return u < v ? -1 : 1;
        }
        return 0;
    }
    case KL_U8:
    case KL_U16:
    case KL_U32:
    case KL_U64:
    case KL_BOOL: {
        uint64_t u = 0, v = 0;
        size_t es = kl_dtype_size(x->dtype);
        memcpy(&u, (const char *)x->data + a * es, es);
        memcpy(&v, (const char *)x->data + b * es, es);
        return u < v ? -1 : u > v;
    }
    default: {
        int64_t u = kl__int_at(x, a), v = kl__int_at(x, b);
        return u < v ? -1 : u > v;
    }
    }
}

static int uq_slice_cmp(const uq_ctx *c, int64_t a, int64_t b) {
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t j = 0; j < c->inner; j++) {
            int r = uq_elem_cmp(c->x, (o * c->len + a) * c->inner + j, (o * c->len + b) * c->inner + j);
            if (r) return r;
        }
    return 0;
}

static int uq_qsort_cmp(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int r = uq_slice_cmp(uq_cur, a, b);
    return r ? r : (a < b ? -1 : a > b); /* stable: first occurrence first */
}

typedef struct {
    int64_t nu;
    int64_t *first;   /* [nu]: index of the first occurrence of unique u (output order) */
    int64_t *inverse; /* [len] */
    int64_t *counts;  /* [nu] */
    void *mem;
} uq_result;

static int uq_compute(kl_gnode *n, const kl_tensor *x, uq_ctx *c, uq_result *r, kl_err *e) {
    const kl_attr *ax = kl_gnode_attr(n, "axis");
    c->x = x;
    if (ax) {
        int64_t a;
        if (kl__norm_axis(ax->i, x->rank, &a))
            return kl__fail_node(e, n, KL_EINVAL, "axis %lld out of range", (long long)ax->i);
        c->outer = 1, c->inner = 1, c->len = x->dims[a];
        for (int i = 0; i < a; i++) c->outer *= x->dims[i];
        for (int i = (int)a + 1; i < x->rank; i++) c->inner *= x->dims[i];
    } else c->outer = 1, c->inner = 1, c->len = kl_tensor_numel(x);
    int64_t L = c->len;
    int64_t *mem = kl_mem_alloc_e((size_t)(4 * L + 4) * sizeof(int64_t), KL_TAG_WORKSPACE, e);
    if (!mem) return kl__fail_node(e, n, KL_ENOMEM, "out of memory (%lld slices)", (long long)L);
    int64_t *ord = mem, *grp = mem + L; /* grp: slice -> group (in sorted order) */
    r->mem = mem, r->first = mem + 2 * L, r->counts = mem + 3 * L, r->inverse = grp;
    for (int64_t i = 0; i < L; i++) ord[i] = i;
    uq_cur = c;
    qsort(ord, (size_t)L, sizeof(int64_t), uq_qsort_cmp);
    int64_t ng = 0;
    for (int64_t k = 0; k < L; k++) {
        if (k == 0 || uq_slice_cmp(c, ord[k - 1], ord[k])) {
            r->first[ng] = ord[k];
            r->counts[ng++] = 0;
        }
        grp[ord[k]] = ng - 1;
        r->counts[ng - 1]++;
    }
    r->nu = ng;
    if (!kl_gnode_attr_int(n, "sorted", 1)) {
        /* renumber groups by first occurrence: ord reused as old -> new */
        int64_t *nf = ord, nn = 0;
        int64_t *remap = mem + 2 * L; /* first[] is rebuilt below from the remap */
        for (int64_t g = 0; g < ng; g++) nf[g] = -1;
        int64_t *cnt2 = kl_mem_alloc_e((size_t)(2 * ng + 2) * sizeof(int64_t), KL_TAG_WORKSPACE, e);
        if (!cnt2) {
            kl_mem_free(mem);
            return kl__fail_node(e, n, KL_ENOMEM, "out of memory");
        }
        for (int64_t g = 0; g < ng; g++) cnt2[g] = r->counts[g];
        for (int64_t i = 0; i < L; i++)
            if (nf[grp[i]] < 0) {
                nf[grp[i]] = nn;
                remap[nn++] = i;
            }
        for (int64_t g = 0; g < ng; g++) cnt2[ng + nf[g]] = cnt2[g];
        for (int64_t g = 0; g < ng; g++) r->counts[g] = cnt2[ng + g];
        for (int64_t i = 0; i < L; i++) grp[i] = nf[grp[i]];
        kl_mem_free(cnt2);
        r->first = remap;
    }
    return KL_OK;
}

static int uq_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)ws;
    const kl_tensor *x = in[0];
    NEED(x);
    uq_ctx c;
    uq_result r;
    int rc = uq_compute(n, x, &c, &r, e);
    if (rc) return rc;
    const kl_attr *ax = kl_gnode_attr(n, "axis");
    int64_t d[KL_MAX_DIMS];
    if (ax) {
        int64_t a;
        kl__norm_axis(ax->i, x->rank, &a);
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[a] = r.nu;
        kl__set_shape(&out[0], x->dtype, x->rank, d);
    } else kl__set_shape(&out[0], x->dtype, 1, &r.nu);
    if (n_out > 1) kl__set_shape(&out[1], KL_I64, 1, &r.nu);
    if (n_out > 2) kl__set_shape(&out[2], KL_I64, 1, &c.len);
    if (n_out > 3) kl__set_shape(&out[3], KL_I64, 1, &r.nu);
    kl_mem_free(r.mem);
    return KL_OK;
}

static int uq_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    (void)n_in, (void)x;
    uq_ctx c;
    uq_result r;
    int rc = uq_compute(n, in[0], &c, &r, e);
    if (rc) return rc;
    size_t es = kl_dtype_size(in[0]->dtype);
    for (int64_t o = 0; o < c.outer; o++)
        for (int64_t u = 0; u < r.nu; u++)
            memcpy((char *)out[0]->data + ((o * r.nu + u) * c.inner) * es,
                   (const char *)in[0]->data + ((o * c.len + r.first[u]) * c.inner) * es, (size_t)c.inner * es);
    if (n_out > 1 && out[1]) memcpy(out[1]->data, r.first, (size_t)r.nu * sizeof(int64_t));
    if (n_out > 2 && out[2]) memcpy(out[2]->data, r.inverse, (size_t)c.len * sizeof(int64_t));
    if (n_out > 3 && out[3]) memcpy(out[3]->data, r.counts, (size_t)r.nu * sizeof(int64_t));
    kl_mem_free(r.mem);
    return KL_OK;
}

/* ================================================================== *
 * Compress: the slices along axis (or elements of the flattened input)
 * whose condition is true; condition may be shorter than the axis.
 * ================================================================== */

static int cp_count(kl_gnode *n, const kl_tensor *x, const kl_tensor *cond, int64_t *axis, int64_t *cnt, kl_err *e) {
    const kl_attr *ax = kl_gnode_attr(n, "axis");
    int64_t len = kl_tensor_numel(x);
    *axis = -1;
    if (ax) {
        if (kl__norm_axis(ax->i, x->rank, axis))
            return kl__fail_node(e, n, KL_EINVAL, "axis %lld out of range", (long long)ax->i);
        len = x->dims[*axis];
    }
    if (cond->rank != 1) return kl__fail_node(e, n, KL_ESHAPE, "condition must be 1-D");
    int64_t m = kl_tensor_numel(cond);
    if (m > len)
        return kl__fail_node(e, n, KL_ESHAPE, "condition has %lld entries for %lld slices", (long long)m,
                             (long long)len);
    *cnt = 0;
    for (int64_t i = 0; i < m; i++) *cnt += kl__int_at(cond, i) != 0;
    return KL_OK;
}

static int cp_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out, (void)ws;
    NEED(in[1]);
    int64_t axis, cnt, d[KL_MAX_DIMS];
    int rc = cp_count(n, in[0], in[1], &axis, &cnt, e);
    if (rc) return rc;
    if (axis < 0) kl__set_shape(&out[0], in[0]->dtype, 1, &cnt);
    else {
        memcpy(d, in[0]->dims, sizeof(int64_t) * (size_t)in[0]->rank);
        d[axis] = cnt;
        kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, d);
    }
    return KL_OK;
}

static int cp_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    (void)n_in, (void)n_out, (void)x;
    int64_t axis, cnt, outer = 1, inner = 1, len;
    int rc = cp_count(n, in[0], in[1], &axis, &cnt, e);
    if (rc) return rc;
    if (axis < 0) len = kl_tensor_numel(in[0]);
    else {
        len = in[0]->dims[axis];
        for (int i = 0; i < axis; i++) outer *= in[0]->dims[i];
        for (int i = (int)axis + 1; i < in[0]->rank; i++) inner *= in[0]->dims[i];
    }
    size_t es = kl_dtype_size(in[0]->dtype), row = (size_t)inner * es;
    int64_t m = kl_tensor_numel(in[1]);
    char *y = out[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < m; i++)
            if (kl__int_at(in[1], i)) {
                memcpy(y, (const char *)in[0]->data + (size_t)(o * len + i) * row, row);
                y += row;
            }
    return KL_OK;
}

/* ================================================================== *
 * ReverseSequence: per batch entry b, the first sequence_lens[b] steps
 * along time_axis reversed, the rest copied.
 * ================================================================== */

static int rv_axes(kl_gnode *n, const kl_tensor *x, int *ta, int *ba, kl_err *e) {
    *ta = (int)kl_gnode_attr_int(n, "time_axis", 0);
    *ba = (int)kl_gnode_attr_int(n, "batch_axis", 1);
    if (x->rank < 2 || !((*ta == 0 && *ba == 1) || (*ta == 1 && *ba == 0)))
        return kl__fail_node(e, n, KL_EINVAL, "time_axis/batch_axis must be 0/1 or 1/0 on a rank >= 2 input");
    return KL_OK;
}

static int rv_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out, (void)ws;
    int ta, ba, rc = rv_axes(n, in[0], &ta, &ba, e);
    if (rc) return rc;
    if (in[1]->rank != 1 || in[1]->dims[0] != in[0]->dims[ba])
        return kl__fail_node(e, n, KL_ESHAPE, "sequence_lens must have one entry per batch element");
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}

static int rv_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    (void)n_in, (void)n_out, (void)x;
    int ta, ba;
    rv_axes(n, in[0], &ta, &ba, e);
    int64_t T = in[0]->dims[ta], B = in[0]->dims[ba], inner = 1;
    for (int i = 2; i < in[0]->rank; i++) inner *= in[0]->dims[i];
    size_t es = kl_dtype_size(in[0]->dtype), row = (size_t)inner * es;
    for (int64_t b = 0; b < B; b++) {
        int64_t L = kl__int_at(in[1], b);
        if (L < 0 || L > T)
            return kl__fail_node(e, n, KL_ERANGE, "sequence_lens[%lld] = %lld is not in [0, %lld]", (long long)b,
                                 (long long)L, (long long)T);
        for (int64_t t = 0; t < T; t++) {
            int64_t s = t < L ? L - 1 - t : t;
            int64_t di = ta == 0 ? t * B + b : b * T + t, si = ta == 0 ? s * B + b : b * T + s;
            memcpy((char *)out[0]->data + (size_t)di * row, (const char *)in[0]->data + (size_t)si * row, row);
        }
    }
    return KL_OK;
}

/* ================================================================== *
 * MeanVarianceNormalization: (X - mean) / (sqrt(E[X^2] - mean^2) + 1e-9)
 * over axes (default 0, 2, 3), as the ONNX function body.
 * ================================================================== */

static int mvn_mask(kl_gnode *n, const kl_tensor *x, uint32_t *mask, kl_err *e) {
    const kl_attr *a = kl_gnode_attr(n, "axes");
    static const int64_t def[3] = {0, 2, 3};
    const int64_t *ax = a ? a->ints : def;
    int na = a ? a->n : 3;
    *mask = 0;
    for (int i = 0; i < na; i++) {
        int64_t v;
        if (kl__norm_axis(ax[i], x->rank, &v))
            return kl__fail_node(e, n, KL_EINVAL, "axes[%d] = %lld is out of range for rank %d", i, (long long)ax[i],
                                 x->rank);
        *mask |= 1u << v;
    }
    return KL_OK;
}

static int mvn_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out;
    const kl_tensor *x = in[0];
    if (x->dtype != KL_F32 && x->dtype != KL_F64 && x->dtype != KL_F16 && x->dtype != KL_BF16)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %s (float types only)", n->opset,
                             kl_dtype_name(x->dtype));
    uint32_t mask;
    int rc = mvn_mask(n, x, &mask, e);
    if (rc) return rc;
    int64_t groups = 1;
    for (int i = 0; i < x->rank; i++)
        if (!(mask >> i & 1)) groups *= x->dims[i];
    kl__set_shape(&out[0], x->dtype, x->rank, x->dims);
    *ws = (size_t)(3 * groups) * sizeof(double) + 64;
    return KL_OK;
}

static int mvn_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    (void)n_in, (void)n_out;
    const kl_tensor *X = in[0];
    uint32_t mask;
    mvn_mask(n, X, &mask, e);
    int r = X->rank;
    int64_t gst[KL_MAX_DIMS], gd[KL_MAX_DIMS], groups = 1, m = kl_tensor_numel(X);
    for (int i = r - 1; i >= 0; i--) {
        gd[i] = mask >> i & 1 ? 1 : X->dims[i];
        gst[i] = groups;
        groups *= gd[i];
    }
    double *s1 = x->ws, *s2 = s1 + groups, *cnt = s2 + groups;
    memset(s1, 0, (size_t)(3 * groups) * sizeof(double));
    /* group of element i: its coordinates with the reduced axes dropped */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < m; i++) {
            int64_t rem = i, g = 0;
            for (int d = r - 1; d >= 0; d--) {
                int64_t c = rem % X->dims[d];
                rem /= X->dims[d];
                if (!(mask >> d & 1)) g += c * gst[d];
            }
            double v = kl__dbl_at(X, i);
            if (pass == 0) s1[g] += v, s2[g] += v * v, cnt[g] += 1;
            else {
                double mean = s1[g] / cnt[g], var = s2[g] / cnt[g] - mean * mean;
                kl__set_dbl(out[0], i, (v - mean) / (sqrt(var > 0 ? var : 0) + 1e-9));
            }
        }
    return KL_OK;
}

static const char *const a_unique[] = {"axis", "sorted", NULL};
static const char *const a_compress[] = {"axis", NULL};
static const char *const a_revseq[] = {"batch_axis", "time_axis", NULL};
static const char *const a_mvn[] = {"axes", NULL};

const kl_op kl__ops_misc2[] = {
    {"Unique", "", 11, 19, 1, 1, 1, 4, a_unique, NULL, uq_infer, uq_run, 0},
    {"Compress", "", 9, 19, 2, 2, 1, 1, a_compress, NULL, cp_infer, cp_run, 0},
    {"ReverseSequence", "", 10, 19, 2, 2, 1, 1, a_revseq, NULL, rv_infer, rv_run, 0},
    {"MeanVarianceNormalization", "", 9, 19, 1, 1, 1, 1, a_mvn, NULL, mvn_infer, mvn_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
