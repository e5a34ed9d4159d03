/* Shape and data-movement operators: Reshape Flatten Transpose Squeeze
 * Unsqueeze Concat Split Slice Gather GatherElements GatherND Shape Size
 * Constant ConstantOfShape Expand Tile Range Pad EyeLike Trilu DepthToSpace
 * SpaceToDepth OneHot NonZero ScatterElements ScatterND CumSum. Dtype-generic
 * (element size); most movement goes through kl_copy_strided. */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEED(t) do { if (!(t) || !(t)->data) return KL__NEED_DATA; } while (0)

static size_t esz(const kl_tensor *t) { return kl_dtype_size(t->dtype); }

static void contig_strides(int rank, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) { st[d] = s; s *= dims[d]; }
}

/* ints of a 1-D tensor into buf (max KL_MAX_DIMS*2 entries, or n_max) */
static int read_ints(const kl_tensor *t, int64_t *buf, int n_max, int *n) {
    int64_t m = kl_tensor_numel(t);
    if (m > n_max) return KL_ERANGE;
    for (int64_t i = 0; i < m; i++) buf[i] = kl__int_at(t, i);
    *n = (int)m;
    return KL_OK;
}

static int copy_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (out[0]->data != in[0]->data)
        memcpy(out[0]->data, in[0]->data, (size_t)kl_tensor_numel(in[0]) * esz(in[0]));
    return KL_OK;
}

/* ---- Reshape ---- */
static int reshape_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[1]);
    int64_t sh[KL_MAX_DIMS];
    int r;
    if (read_ints(in[1], sh, KL_MAX_DIMS, &r)) return kl__fail_node(e, n, KL_EUNSUPPORTED, "shape of rank > %d", KL_MAX_DIMS);
    int allowzero = (int)kl_gnode_attr_int(n, "allowzero", 0);
    int64_t known = 1, neg = -1;
    for (int i = 0; i < r; i++) {
        if (sh[i] == 0 && !allowzero) {
            if (i >= in[0]->rank) return kl__fail_node(e, n, KL_ESHAPE, "shape entry %d is 0 but the input has rank %d", i, in[0]->rank);
            sh[i] = in[0]->dims[i];
        }
        if (sh[i] == -1) {
            if (neg >= 0) return kl__fail_node(e, n, KL_ESHAPE, "more than one -1 in the shape");
            neg = i;
        } else if (sh[i] < 0) return kl__fail_node(e, n, KL_ESHAPE, "negative dimension %lld", (long long)sh[i]);
        else known *= sh[i];
    }
    int64_t total = kl_tensor_numel(in[0]);
    if (neg >= 0) {
        if (known == 0 || total % known) return kl__fail_node(e, n, KL_ESHAPE, "cannot infer the -1 dimension (%lld elements)", (long long)total);
        sh[neg] = total / known;
    } else if (known != total) {
        char a[96], b[96];
        return kl__fail_node(e, n, KL_ESHAPE, "cannot reshape %s into %s", kl_shape_str(in[0]->rank, in[0]->dims, a, sizeof a), kl_shape_str(r, sh, b, sizeof b));
    }
    kl__set_shape(&out[0], in[0]->dtype, r, sh);
    return KL_OK;
}

/* ---- Flatten ---- */
static int flatten_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t ax = kl_gnode_attr_int(n, "axis", 1);
    if (ax < 0) ax += in[0]->rank;
    if (ax < 0 || ax > in[0]->rank) return kl__fail_node(e, n, KL_EINVAL, "axis %lld out of range", (long long)ax);
    int64_t d[2] = {1, 1};
    for (int i = 0; i < in[0]->rank; i++) d[i < ax ? 0 : 1] *= in[0]->dims[i];
    kl__set_shape(&out[0], in[0]->dtype, 2, d);
    return KL_OK;
}

/* ---- Squeeze / Unsqueeze ---- */
static int axes_of(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t *axes, int *na, int *given) {
    *na = 0;
    *given = 0;
    if (n->opset >= 13 || !kl_gnode_attr(n, "axes")) {
        if (n_in > 1 && in[1]) {
            if (!in[1]->data) return KL__NEED_DATA;
            if (read_ints(in[1], axes, KL_MAX_DIMS * 2, na)) return KL_ERANGE;
            *given = 1;
        }
        if (!*given && kl_gnode_attr(n, "axes")) goto attr;
        return KL_OK;
    }
attr:;
    const kl_attr *a = kl_gnode_attr(n, "axes");
    if (a->n > KL_MAX_DIMS * 2) return KL_ERANGE;
    for (int i = 0; i < a->n; i++) axes[i] = a->ints[i];
    *na = a->n;
    *given = 1;
    return KL_OK;
}

static int squeeze_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t axes[KL_MAX_DIMS * 2];
    int na, given, rc = axes_of(n, in, n_in, axes, &na, &given);
    if (rc) return rc == KL__NEED_DATA ? rc : kl__fail_node(e, n, KL_EINVAL, "bad axes");
    int drop[KL_MAX_DIMS] = {0};
    int r = in[0]->rank;
    if (!given) for (int i = 0; i < r; i++) drop[i] = in[0]->dims[i] == 1;
    for (int i = 0; i < na; i++) {
        int64_t a;
        if (kl__norm_axis(axes[i], r, &a)) return kl__fail_node(e, n, KL_EINVAL, "axis %lld out of range", (long long)axes[i]);
        if (in[0]->dims[a] != 1) return kl__fail_node(e, n, KL_ESHAPE, "cannot squeeze axis %lld of size %lld", (long long)a, (long long)in[0]->dims[a]);
        drop[a] = 1;
    }
    int64_t d[KL_MAX_DIMS];
    int o = 0;
    for (int i = 0; i < r; i++) if (!drop[i]) d[o++] = in[0]->dims[i];
    kl__set_shape(&out[0], in[0]->dtype, o, d);
    return KL_OK;
}

static int unsqueeze_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t axes[KL_MAX_DIMS * 2];
    int na, given, rc = axes_of(n, in, n_in, axes, &na, &given);
    if (rc) return rc == KL__NEED_DATA ? rc : kl__fail_node(e, n, KL_EINVAL, "bad axes");
    int r = in[0]->rank + na;
    if (r > KL_MAX_DIMS) return kl__fail_node(e, n, KL_EUNSUPPORTED, "rank %d > %d", r, KL_MAX_DIMS);
    int ins[KL_MAX_DIMS] = {0};
    for (int i = 0; i < na; i++) {
        int64_t a;
        if (kl__norm_axis(axes[i], r, &a) || ins[a]) return kl__fail_node(e, n, KL_EINVAL, "bad axis %lld", (long long)axes[i]);
        ins[a] = 1;
    }
    int64_t d[KL_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < r; i++) d[i] = ins[i] ? 1 : in[0]->dims[k++];
    kl__set_shape(&out[0], in[0]->dtype, r, d);
    return KL_OK;
}

/* ---- Transpose ---- */
static int perm_of(kl_gnode *n, int rank, int *perm, kl_err *e) {
    const kl_attr *a = kl_gnode_attr(n, "perm");
    if (!a) { for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i; return KL_OK; }
    if (a->n != rank) return kl__fail_node(e, n, KL_EINVAL, "perm has %d entries, input rank %d", a->n, rank);
    int seen[KL_MAX_DIMS] = {0};
    for (int i = 0; i < rank; i++) {
        int64_t p;
        if (kl__norm_axis(a->ints[i], rank, &p) || seen[p]) return kl__fail_node(e, n, KL_EINVAL, "bad perm");
        seen[p] = 1;
        perm[i] = (int)p;
    }
    return KL_OK;
}
static int transpose_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int perm[KL_MAX_DIMS], rc;
    if ((rc = perm_of(n, in[0]->rank, perm, e))) return rc;
    int64_t d[KL_MAX_DIMS];
    for (int i = 0; i < in[0]->rank; i++) d[i] = in[0]->dims[perm[i]];
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, d);
    return KL_OK;
}
static int transpose_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int perm[KL_MAX_DIMS], rc;
    if ((rc = perm_of(n, in[0]->rank, perm, e))) return rc;
    int64_t st[KL_MAX_DIMS], pst[KL_MAX_DIMS], ost[KL_MAX_DIMS];
    contig_strides(in[0]->rank, in[0]->dims, st);
    for (int i = 0; i < in[0]->rank; i++) pst[i] = st[perm[i]];
    contig_strides(out[0]->rank, out[0]->dims, ost);
    kl_copy_strided(esz(in[0]), out[0]->rank, out[0]->dims, in[0]->data, pst, out[0]->data, ost, x->pool);
    return KL_OK;
}

/* ---- Concat ---- */
static int concat_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int r = in[0]->rank;
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), r, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int64_t d[KL_MAX_DIMS];
    memcpy(d, in[0]->dims, sizeof d);
    d[ax] = 0;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        if (in[i]->rank != r || in[i]->dtype != in[0]->dtype) return kl__fail_node(e, n, KL_ESHAPE, "input %d rank/dtype differs", i);
        for (int k = 0; k < r; k++)
            if (k != ax && in[i]->dims[k] != in[0]->dims[k]) return kl__fail_node(e, n, KL_ESHAPE, "input %d: dim %d is %lld, expected %lld", i, k, (long long)in[i]->dims[k], (long long)in[0]->dims[k]);
        d[ax] += in[i]->dims[ax];
    }
    kl__set_shape(&out[0], in[0]->dtype, r, d);
    return KL_OK;
}
static int concat_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int r = out[0]->rank;
    int64_t ax;
    kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), r, &ax);
    int64_t ost[KL_MAX_DIMS];
    contig_strides(r, out[0]->dims, ost);
    size_t es = esz(out[0]);
    int64_t off = 0;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || !kl_tensor_numel(in[i])) continue;
        int64_t st[KL_MAX_DIMS];
        contig_strides(r, in[i]->dims, st);
        kl_copy_strided(es, r, in[i]->dims, in[i]->data, st, (char *)out[0]->data + off * ost[ax] * (int64_t)es, ost, x->pool);
        off += in[i]->dims[ax];
    }
    return KL_OK;
}

/* ---- Split ---- */
static int split_sizes(kl_gnode *n, kl_tensor *const *in, int n_in, int n_out, int64_t *ax, int64_t *sizes, kl_err *e) {
    int r = in[0]->rank;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), r, ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int64_t D = in[0]->dims[*ax];
    const kl_attr *a = kl_gnode_attr(n, "split");
    if (n_in > 1 && in[1]) {
        if (!in[1]->data) return KL__NEED_DATA;
        if (kl_tensor_numel(in[1]) != n_out) return kl__fail_node(e, n, KL_EINVAL, "split has %lld entries for %d outputs", (long long)kl_tensor_numel(in[1]), n_out);
        for (int i = 0; i < n_out; i++) sizes[i] = kl__int_at(in[1], i);
    } else if (a && a->type == KL_ATTR_INTS) {
        if (a->n != n_out) return kl__fail_node(e, n, KL_EINVAL, "split has %d entries for %d outputs", a->n, n_out);
        for (int i = 0; i < n_out; i++) sizes[i] = a->ints[i];
    } else {
        int64_t ns = kl_gnode_attr_int(n, "num_outputs", n_out);
        int64_t chunk = (D + ns - 1) / ns;
        for (int i = 0; i < n_out; i++) { sizes[i] = KL_MIN(chunk, D - chunk * i); if (sizes[i] < 0) sizes[i] = 0; }
    }
    int64_t s = 0;
    for (int i = 0; i < n_out; i++) { if (sizes[i] < 0) return kl__fail_node(e, n, KL_EINVAL, "negative split"); s += sizes[i]; }
    if (s != D) return kl__fail_node(e, n, KL_ESHAPE, "split sizes sum to %lld, axis has %lld", (long long)s, (long long)D);
    return KL_OK;
}
static int split_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t ax, sizes[64];
    if (n_out > 64) return kl__fail_node(e, n, KL_EUNSUPPORTED, "more than 64 outputs");
    int rc = split_sizes(n, in, n_in, n_out, &ax, sizes, e);
    if (rc) return rc;
    for (int i = 0; i < n_out; i++) {
        int64_t d[KL_MAX_DIMS];
        memcpy(d, in[0]->dims, sizeof d);
        d[ax] = sizes[i];
        kl__set_shape(&out[i], in[0]->dtype, in[0]->rank, d);
    }
    return KL_OK;
}
static int split_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax, sizes[64];
    int rc = split_sizes(n, in, n_in, n_out, &ax, sizes, e);
    if (rc) return rc;
    int r = in[0]->rank;
    int64_t ist[KL_MAX_DIMS];
    contig_strides(r, in[0]->dims, ist);
    size_t es = esz(in[0]);
    int64_t off = 0;
    for (int i = 0; i < n_out; i++) {
        if (out[i] && kl_tensor_numel(out[i])) {
            int64_t ost[KL_MAX_DIMS];
            contig_strides(r, out[i]->dims, ost);
            kl_copy_strided(es, r, out[i]->dims, (char *)in[0]->data + off * ist[ax] * (int64_t)es, ist, out[i]->data, ost, x->pool);
        }
        off += sizes[i];
    }
    return KL_OK;
}

/* ---- Slice ---- */
static int slice_params(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t *start, int64_t *step, int64_t *od, kl_err *e) {
    int r = in[0]->rank;
    int64_t st[KL_MAX_DIMS * 2], en[KL_MAX_DIMS * 2], ax[KL_MAX_DIMS * 2], sp[KL_MAX_DIMS * 2];
    int ns = 0, ne = 0, na = -1, nsp = -1;
    if (n->opset < 10) {
        const kl_attr *a;
        if ((a = kl_gnode_attr(n, "starts"))) { ns = KL_MIN(a->n, KL_MAX_DIMS * 2); for (int i = 0; i < ns; i++) st[i] = a->ints[i]; }
        if ((a = kl_gnode_attr(n, "ends"))) { ne = KL_MIN(a->n, KL_MAX_DIMS * 2); for (int i = 0; i < ne; i++) en[i] = a->ints[i]; }
        if ((a = kl_gnode_attr(n, "axes"))) { na = KL_MIN(a->n, KL_MAX_DIMS * 2); for (int i = 0; i < na; i++) ax[i] = a->ints[i]; }
    } else {
        for (int k = 1; k < n_in && k < 5; k++)
            if (in[k] && !in[k]->data) return KL__NEED_DATA;
        if (read_ints(in[1], st, KL_MAX_DIMS * 2, &ns) || read_ints(in[2], en, KL_MAX_DIMS * 2, &ne))
            return kl__fail_node(e, n, KL_EINVAL, "too many slice entries");
        if (n_in > 3 && in[3] && read_ints(in[3], ax, KL_MAX_DIMS * 2, &na)) return kl__fail_node(e, n, KL_EINVAL, "bad axes");
        if (n_in > 4 && in[4] && read_ints(in[4], sp, KL_MAX_DIMS * 2, &nsp)) return kl__fail_node(e, n, KL_EINVAL, "bad steps");
    }
    if (ns != ne || (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns)) return kl__fail_node(e, n, KL_EINVAL, "starts/ends/axes/steps lengths differ");
    for (int d = 0; d < r; d++) { start[d] = 0; step[d] = 1; od[d] = in[0]->dims[d]; }
    int seen[KL_MAX_DIMS] = {0};
    for (int i = 0; i < ns; i++) {
        int64_t a;
        if (kl__norm_axis(na >= 0 ? ax[i] : i, r, &a) || seen[a]) return kl__fail_node(e, n, KL_EINVAL, "bad slice axis");
        seen[a] = 1;
        int64_t D = in[0]->dims[a], s = st[i], t = en[i], p = nsp >= 0 ? sp[i] : 1;
        if (p == 0) return kl__fail_node(e, n, KL_EINVAL, "slice step 0");
        if (s < 0) s += D;
        if (t < 0) t += D;
        if (p > 0) {
            s = s < 0 ? 0 : s > D ? D : s;
            t = t < 0 ? 0 : t > D ? D : t;
            od[a] = t > s ? (t - s + p - 1) / p : 0;
        } else {
            s = s < 0 ? -1 : s > D - 1 ? D - 1 : s;
            t = t < -1 ? -1 : t > D - 1 ? D - 1 : t;
            od[a] = s > t ? (s - t + (-p) - 1) / (-p) : 0;
        }
        start[a] = s;
        step[a] = p;
    }
    return KL_OK;
}
static int slice_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t s[KL_MAX_DIMS], p[KL_MAX_DIMS], d[KL_MAX_DIMS];
    int rc = slice_params(n, in, n_in, s, p, d, e);
    if (rc) return rc;
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, d);
    return KL_OK;
}
static int slice_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t s[KL_MAX_DIMS], p[KL_MAX_DIMS], d[KL_MAX_DIMS];
    int rc = slice_params(n, in, n_in, s, p, d, e);
    if (rc) return rc;
    int r = in[0]->rank;
    int64_t ist[KL_MAX_DIMS], sst[KL_MAX_DIMS], ost[KL_MAX_DIMS], off = 0;
    contig_strides(r, in[0]->dims, ist);
    for (int i = 0; i < r; i++) { off += s[i] * ist[i]; sst[i] = ist[i] * p[i]; }
    contig_strides(r, d, ost);
    if (kl_shape_numel(r, d) == 0) return KL_OK;
    kl_copy_strided(esz(in[0]), r, d, (char *)in[0]->data + off * (int64_t)esz(in[0]), sst, out[0]->data, ost, x->pool);
    return KL_OK;
}

/* ---- Gather ---- */
static int gather_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), in[0]->rank, &ax) || in[0]->rank == 0) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int r = in[0]->rank - 1 + in[1]->rank;
    if (r > KL_MAX_DIMS) return kl__fail_node(e, n, KL_EUNSUPPORTED, "rank %d", r);
    int64_t d[KL_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < ax; i++) d[k++] = in[0]->dims[i];
    for (int i = 0; i < in[1]->rank; i++) d[k++] = in[1]->dims[i];
    for (int i = (int)ax + 1; i < in[0]->rank; i++) d[k++] = in[0]->dims[i];
    kl__set_shape(&out[0], in[0]->dtype, r, d);
    return KL_OK;
}
static int gather_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax;
    kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), in[0]->rank, &ax);
    int64_t outer = 1, inner = 1, D = in[0]->dims[ax], ni = kl_tensor_numel(in[1]);
    for (int i = 0; i < ax; i++) outer *= in[0]->dims[i];
    for (int i = (int)ax + 1; i < in[0]->rank; i++) inner *= in[0]->dims[i];
    size_t blk = (size_t)inner * esz(in[0]);
    const char *src = in[0]->data;
    char *dst = out[0]->data;
    for (int64_t j = 0; j < ni; j++) {
        int64_t id = kl__int_at(in[1], j);
        if (id < 0) id += D;
        if (id < 0 || id >= D) return kl__fail_node(e, n, KL_ERANGE, "index %lld out of range [%lld, %lld)", (long long)kl__int_at(in[1], j), (long long)-D, (long long)D);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t id = kl__int_at(in[1], j);
            if (id < 0) id += D;
            memcpy(dst + (o * ni + j) * blk, src + (o * D + id) * blk, blk);
        }
    return KL_OK;
}

/* ---- GatherElements / ScatterElements ---- */
static int idxshape_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[1]->rank != in[0]->rank || in[0]->rank == 0) return kl__fail_node(e, n, KL_ESHAPE, "indices rank differs from data rank");
    for (int i = 0; i < in[0]->rank; i++)
        if (in[1]->dims[i] > in[0]->dims[i] && i != (kl_gnode_attr_int(n, "axis", 0) + in[0]->rank) % in[0]->rank)
            return kl__fail_node(e, n, KL_ESHAPE, "indices dim %d exceeds the data", i);
    kl__set_shape(&out[0], in[0]->dtype, in[1]->rank, in[1]->dims);
    return KL_OK;
}
static int gather_el_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int r = in[0]->rank;
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), r, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis");
    int64_t ist[KL_MAX_DIMS], m = kl_tensor_numel(in[1]);
    contig_strides(r, in[0]->dims, ist);
    size_t es = esz(in[0]);
    for (int64_t i = 0; i < m; i++) {
        int64_t rem = i, off = 0;
        for (int d = r - 1; d >= 0; d--) {
            int64_t c = rem % in[1]->dims[d];
            rem /= in[1]->dims[d];
            if (d == ax) {
                c = kl__int_at(in[1], i);
                if (c < 0) c += in[0]->dims[d];
                if (c < 0 || c >= in[0]->dims[d]) return kl__fail_node(e, n, KL_ERANGE, "index out of range");
            }
            off += c * ist[d];
        }
        memcpy((char *)out[0]->data + i * (int64_t)es, (char *)in[0]->data + off * (int64_t)es, es);
    }
    return KL_OK;
}
static int scatter_el_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int r = in[0]->rank;
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), r, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis");
    const char *red = kl_gnode_attr_str(n, "reduction", "none");
    memcpy(out[0]->data, in[0]->data, (size_t)kl_tensor_numel(in[0]) * esz(in[0]));
    int64_t ost[KL_MAX_DIMS], m = kl_tensor_numel(in[1]);
    contig_strides(r, in[0]->dims, ost);
    size_t es = esz(in[0]);
    for (int64_t i = 0; i < m; i++) {
        int64_t rem = i, off = 0;
        for (int d = r - 1; d >= 0; d--) {
            int64_t c = rem % in[1]->dims[d];
            rem /= in[1]->dims[d];
            if (d == ax) {
                c = kl__int_at(in[1], i);
                if (c < 0) c += in[0]->dims[d];
                if (c < 0 || c >= in[0]->dims[d]) return kl__fail_node(e, n, KL_ERANGE, "index out of range");
            }
            off += c * ost[d];
        }
        if (!strcmp(red, "add")) kl__set_dbl(out[0], off, kl__dbl_at(out[0], off) + kl__dbl_at(in[2], i));
        else if (!strcmp(red, "mul")) kl__set_dbl(out[0], off, kl__dbl_at(out[0], off) * kl__dbl_at(in[2], i));
        else memcpy((char *)out[0]->data + off * (int64_t)es, (char *)in[2]->data + i * (int64_t)es, es);
    }
    return KL_OK;
}

/* ---- GatherND / ScatterND ---- */
static int gather_nd_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t b = kl_gnode_attr_int(n, "batch_dims", 0);
    int q = in[1]->rank, r = in[0]->rank;
    if (q < 1) return kl__fail_node(e, n, KL_ESHAPE, "indices rank 0");
    int64_t k = in[1]->dims[q - 1];
    if (k < 1 || k + b > r) return kl__fail_node(e, n, KL_ESHAPE, "bad indices last dim");
    int64_t d[KL_MAX_DIMS * 2];
    int o = 0;
    for (int i = 0; i < q - 1; i++) d[o++] = in[1]->dims[i];
    for (int i = (int)(b + k); i < r; i++) d[o++] = in[0]->dims[i];
    if (o > KL_MAX_DIMS) return kl__fail_node(e, n, KL_EUNSUPPORTED, "rank");
    kl__set_shape(&out[0], in[0]->dtype, o, d);
    return KL_OK;
}
static int gather_nd_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t b = kl_gnode_attr_int(n, "batch_dims", 0);
    int q = in[1]->rank, r = in[0]->rank;
    int64_t k = in[1]->dims[q - 1], ist[KL_MAX_DIMS];
    contig_strides(r, in[0]->dims, ist);
    int64_t bsz = 1;
    for (int i = 0; i < b; i++) bsz *= in[0]->dims[i];
    int64_t nidx = kl_tensor_numel(in[1]) / k;   /* index tuples */
    int64_t per_b = nidx / (bsz ? bsz : 1);
    int64_t slice = 1;
    for (int i = (int)(b + k); i < r; i++) slice *= in[0]->dims[i];
    size_t es = esz(in[0]);
    for (int64_t t = 0; t < nidx; t++) {
        int64_t bi = per_b ? t / per_b : 0, off = bi * (b ? ist[b - 1] : 0);
        for (int j = 0; j < k; j++) {
            int64_t c = kl__int_at(in[1], t * k + j), D = in[0]->dims[b + j];
            if (c < 0) c += D;
            if (c < 0 || c >= D) return kl__fail_node(e, n, KL_ERANGE, "index out of range");
            off += c * ist[b + j];
        }
        memcpy((char *)out[0]->data + t * slice * (int64_t)es, (char *)in[0]->data + off * (int64_t)es, (size_t)slice * es);
    }
    return KL_OK;
}
static int scatter_nd_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int q = in[1]->rank, r = in[0]->rank;
    const char *red = kl_gnode_attr_str(n, "reduction", "none");
    memcpy(out[0]->data, in[0]->data, (size_t)kl_tensor_numel(in[0]) * esz(in[0]));
    int64_t k = in[1]->dims[q - 1], ost[KL_MAX_DIMS];
    contig_strides(r, in[0]->dims, ost);
    int64_t nidx = kl_tensor_numel(in[1]) / (k ? k : 1), slice = 1;
    for (int i = (int)k; i < r; i++) slice *= in[0]->dims[i];
    size_t es = esz(in[0]);
    for (int64_t t = 0; t < nidx; t++) {
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t c = kl__int_at(in[1], t * k + j), D = in[0]->dims[j];
            if (c < 0) c += D;
            if (c < 0 || c >= D) return kl__fail_node(e, n, KL_ERANGE, "index out of range");
            off += c * ost[j];
        }
        for (int64_t s = 0; s < slice; s++) {
            double u = kl__dbl_at(in[2], t * slice + s), v = kl__dbl_at(out[0], off + s);
            if (!strcmp(red, "add")) kl__set_dbl(out[0], off + s, v + u);
            else if (!strcmp(red, "mul")) kl__set_dbl(out[0], off + s, v * u);
            else if (!strcmp(red, "max")) kl__set_dbl(out[0], off + s, v > u ? v : u);
            else if (!strcmp(red, "min")) kl__set_dbl(out[0], off + s, v < u ? v : u);
            else memcpy((char *)out[0]->data + (off + s) * (int64_t)es, (char *)in[2]->data + (t * slice + s) * (int64_t)es, es);
        }
    }
    return KL_OK;
}

/* ---- Shape / Size ---- */
static int shape_range(kl_gnode *n, int r, int64_t *s, int64_t *t) {
    int64_t a = kl_gnode_attr_int(n, "start", 0), b = kl_gnode_attr_int(n, "end", r);
    if (a < 0) a += r;
    if (b < 0) b += r;
    a = a < 0 ? 0 : a > r ? r : a;
    b = b < 0 ? 0 : b > r ? r : b;
    *s = a;
    *t = b > a ? b : a;
    return KL_OK;
}
static int shape_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t s, t;
    shape_range(n, in[0]->rank, &s, &t);
    int64_t d = t - s;
    kl__set_shape(&out[0], KL_I64, 1, &d);
    return KL_OK;
}
static int shape_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t s, t;
    shape_range(n, in[0]->rank, &s, &t);
    for (int64_t i = s; i < t; i++) ((int64_t *)out[0]->data)[i - s] = in[0]->dims[i];
    return KL_OK;
}
static int size_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl__set_shape(&out[0], KL_I64, 0, NULL);
    return KL_OK;
}
static int size_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    *(int64_t *)out[0]->data = kl_tensor_numel(in[0]);
    return KL_OK;
}

/* ---- Constant ---- */
static int constant_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    if (n->n_attrs != 1) return kl__fail_node(e, n, KL_EPARSE, "Constant needs exactly one value attribute");
    const kl_attr *a = &n->attrs[0];
    if (!strcmp(a->name, "sparse_value")) return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: sparse_value is not supported", n->opset);
    if (!strcmp(a->name, "value_string") || !strcmp(a->name, "value_strings")) return kl__fail_node(e, n, KL_EUNSUPPORTED, "string constants are not supported");
    return KL_OK;
}
static int constant_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    const kl_attr *a = &n->attrs[0];
    int64_t d = a->n;
    if (!strcmp(a->name, "value") && a->t) kl__set_shape(&out[0], a->t->dtype, a->t->rank, a->t->dims);
    else if (!strcmp(a->name, "value_float")) kl__set_shape(&out[0], KL_F32, 0, NULL);
    else if (!strcmp(a->name, "value_int")) kl__set_shape(&out[0], KL_I64, 0, NULL);
    else if (!strcmp(a->name, "value_floats")) kl__set_shape(&out[0], KL_F32, 1, &d);
    else if (!strcmp(a->name, "value_ints")) kl__set_shape(&out[0], KL_I64, 1, &d);
    else return kl__fail_node(e, n, KL_EUNSUPPORTED, "attribute %s", a->name);
    return KL_OK;
}
static int constant_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_attr *a = &n->attrs[0];
    if (!strcmp(a->name, "value")) memcpy(out[0]->data, a->t->data, (size_t)kl_tensor_numel(a->t) * esz(a->t));
    else if (!strcmp(a->name, "value_float")) *(float *)out[0]->data = a->f;
    else if (!strcmp(a->name, "value_int")) *(int64_t *)out[0]->data = a->i;
    else if (!strcmp(a->name, "value_floats")) memcpy(out[0]->data, a->floats, sizeof(float) * a->n);
    else if (!strcmp(a->name, "value_ints")) memcpy(out[0]->data, a->ints, sizeof(int64_t) * a->n);
    return KL_OK;
}

/* ---- ConstantOfShape ---- */
static int cos_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[0]);
    int64_t d[KL_MAX_DIMS];
    int r;
    if (read_ints(in[0], d, KL_MAX_DIMS, &r)) return kl__fail_node(e, n, KL_EUNSUPPORTED, "rank > %d", KL_MAX_DIMS);
    for (int i = 0; i < r; i++) if (d[i] < 0) return kl__fail_node(e, n, KL_ESHAPE, "negative dimension");
    if (kl_shape_numel(r, d) < 0) return kl__fail_node(e, n, KL_ERANGE, "dimension overflow");
    const kl_attr *a = kl_gnode_attr(n, "value");
    if (a && (!a->t || kl_tensor_numel(a->t) != 1)) return kl__fail_node(e, n, KL_EINVAL, "value must be a one-element tensor");
    kl__set_shape(&out[0], a && a->t ? a->t->dtype : KL_F32, r, d);
    return KL_OK;
}
static int cos_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_attr *a = kl_gnode_attr(n, "value");
    int64_t m = kl_tensor_numel(out[0]);
    size_t es = esz(out[0]);
    if (!a || !a->t) { memset(out[0]->data, 0, (size_t)m * es); return KL_OK; }
    for (int64_t i = 0; i < m; i++) memcpy((char *)out[0]->data + i * (int64_t)es, a->t->data, es);
    return KL_OK;
}

/* ---- Expand ---- */
static int expand_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[1]);
    int64_t sh[KL_MAX_DIMS], d[KL_MAX_DIMS];
    int r;
    if (read_ints(in[1], sh, KL_MAX_DIMS, &r)) return kl__fail_node(e, n, KL_EUNSUPPORTED, "rank > %d", KL_MAX_DIMS);
    int R = r > in[0]->rank ? r : in[0]->rank;
    for (int i = 0; i < R; i++) {
        int ia = i - (R - in[0]->rank), ib = i - (R - r);
        int64_t a = ia >= 0 ? in[0]->dims[ia] : 1, b = ib >= 0 ? sh[ib] : 1;
        if (a != b && a != 1 && b != 1) return kl__fail_node(e, n, KL_ESHAPE, "cannot expand dim %lld to %lld", (long long)a, (long long)b);
        d[i] = a == 1 ? b : a;
    }
    kl__set_shape(&out[0], in[0]->dtype, R, d);
    return KL_OK;
}
static int expand_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int R = out[0]->rank;
    int64_t ist[KL_MAX_DIMS], bst[KL_MAX_DIMS], ost[KL_MAX_DIMS];
    contig_strides(in[0]->rank, in[0]->dims, ist);
    for (int i = 0; i < R; i++) {
        int ia = i - (R - in[0]->rank);
        bst[i] = ia >= 0 && in[0]->dims[ia] != 1 ? ist[ia] : 0;
    }
    contig_strides(R, out[0]->dims, ost);
    if (kl_tensor_numel(out[0])) kl_copy_strided(esz(in[0]), R, out[0]->dims, in[0]->data, bst, out[0]->data, ost, x->pool);
    return KL_OK;
}

/* ---- Tile ---- */
static int tile_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[1]);
    if (kl_tensor_numel(in[1]) != in[0]->rank) return kl__fail_node(e, n, KL_ESHAPE, "repeats length differs from rank");
    int64_t d[KL_MAX_DIMS];
    for (int i = 0; i < in[0]->rank; i++) {
        int64_t rp = kl__int_at(in[1], i);
        if (rp < 0) return kl__fail_node(e, n, KL_EINVAL, "negative repeat");
        d[i] = in[0]->dims[i] * rp;
    }
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, d);
    return KL_OK;
}
static int tile_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int r = in[0]->rank;
    /* view output as (rep0, d0, rep1, d1, ...) and copy with 0-strides over reps */
    int64_t dims[2 * KL_MAX_DIMS], sst[2 * KL_MAX_DIMS], dst_st[2 * KL_MAX_DIMS], ist[KL_MAX_DIMS], ost[KL_MAX_DIMS];
    contig_strides(r, in[0]->dims, ist);
    contig_strides(r, out[0]->dims, ost);
    if (!kl_tensor_numel(out[0])) return KL_OK;
    if (2 * r > KL_MAX_DIMS) {
        /* generic */
        int64_t m = kl_tensor_numel(out[0]);
        size_t es = esz(in[0]);
        for (int64_t i = 0; i < m; i++) {
            int64_t rem = i, off = 0;
            for (int d = r - 1; d >= 0; d--) { int64_t c = rem % out[0]->dims[d]; rem /= out[0]->dims[d]; off += (c % in[0]->dims[d]) * ist[d]; }
            memcpy((char *)out[0]->data + i * (int64_t)es, (char *)in[0]->data + off * (int64_t)es, es);
        }
        return KL_OK;
    }
    for (int i = 0; i < r; i++) {
        dims[2 * i] = kl__int_at(in[1], i);
        dims[2 * i + 1] = in[0]->dims[i];
        sst[2 * i] = 0;
        sst[2 * i + 1] = ist[i];
        dst_st[2 * i] = ost[i] * in[0]->dims[i];
        dst_st[2 * i + 1] = ost[i];
    }
    kl_copy_strided(esz(in[0]), 2 * r, dims, in[0]->data, sst, out[0]->data, dst_st, x->pool);
    return KL_OK;
}

/* ---- Range ---- */
static int range_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[0]); NEED(in[1]); NEED(in[2]);
    if (kl_tensor_numel(in[0]) < 1 || kl_tensor_numel(in[1]) < 1 || kl_tensor_numel(in[2]) < 1) return kl__fail_node(e, n, KL_ESHAPE, "start/limit/delta must be scalars");
    double s = kl__dbl_at(in[0], 0), l = kl__dbl_at(in[1], 0), d = kl__dbl_at(in[2], 0);
    if (d == 0) return kl__fail_node(e, n, KL_EINVAL, "delta is 0");
    double c = ceil((l - s) / d);
    int64_t m = c > 0 ? (int64_t)c : 0;
    if (m > ((int64_t)1 << 40)) return kl__fail_node(e, n, KL_ERANGE, "range too large");
    kl__set_shape(&out[0], in[0]->dtype, 1, &m);
    return KL_OK;
}
static int range_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t m = out[0]->dims[0];
    if (kl_dtype_is_int(in[0]->dtype)) {
        int64_t s = kl__int_at(in[0], 0), d = kl__int_at(in[2], 0);
        for (int64_t i = 0; i < m; i++) kl__set_dbl(out[0], i, (double)(s + i * d));
        if (in[0]->dtype == KL_I64) for (int64_t i = 0; i < m; i++) ((int64_t *)out[0]->data)[i] = s + i * d;
    } else {
        double s = kl__dbl_at(in[0], 0), d = kl__dbl_at(in[2], 0);
        if (in[0]->dtype == KL_F32) { float v = (float)s, fd = (float)d; for (int64_t i = 0; i < m; i++) { ((float *)out[0]->data)[i] = v; v += fd; } }
        else for (int64_t i = 0; i < m; i++) kl__set_dbl(out[0], i, s + i * d);
    }
    return KL_OK;
}

/* ---- Pad ---- */
static int pad_params(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t *pads, kl_err *e) {
    int r = in[0]->rank;
    int np = 0;
    int64_t raw[2 * KL_MAX_DIMS];
    if (n->opset < 11) {
        const kl_attr *a = kl_gnode_attr(n, "pads");
        if (!a || a->n != 2 * r) return kl__fail_node(e, n, KL_EINVAL, "pads needs %d entries", 2 * r);
        for (int i = 0; i < 2 * r; i++) pads[i] = a->ints[i];
        return KL_OK;
    }
    if (!in[1]->data) return KL__NEED_DATA;
    if (n_in > 3 && in[3] && !in[3]->data) return KL__NEED_DATA;
    if (read_ints(in[1], raw, 2 * KL_MAX_DIMS, &np)) return kl__fail_node(e, n, KL_EINVAL, "too many pads");
    if (n_in > 3 && in[3]) {
        int na = (int)kl_tensor_numel(in[3]);
        if (np != 2 * na) return kl__fail_node(e, n, KL_EINVAL, "pads has %d entries for %d axes", np, na);
        for (int i = 0; i < 2 * r; i++) pads[i] = 0;
        for (int i = 0; i < na; i++) {
            int64_t a;
            if (kl__norm_axis(kl__int_at(in[3], i), r, &a)) return kl__fail_node(e, n, KL_EINVAL, "bad axis");
            pads[a] = raw[i];
            pads[a + r] = raw[i + na];
        }
        return KL_OK;
    }
    if (np != 2 * r) return kl__fail_node(e, n, KL_EINVAL, "pads has %d entries, rank %d", np, r);
    memcpy(pads, raw, sizeof(int64_t) * 2 * r);
    return KL_OK;
}
static int pad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t pads[2 * KL_MAX_DIMS], d[KL_MAX_DIMS];
    int rc = pad_params(n, in, n_in, pads, e);
    if (rc) return rc;
    int r = in[0]->rank;
    for (int i = 0; i < r; i++) {
        d[i] = in[0]->dims[i] + pads[i] + pads[i + r];
        if (d[i] < 0) return kl__fail_node(e, n, KL_ESHAPE, "negative output dimension");
    }
    kl__set_shape(&out[0], in[0]->dtype, r, d);
    return KL_OK;
}
/* The row kernel kl_pad takes every pad except two it refuses: reflect pads
 * as large as their axis (after cropping; NumPy reflects again) and a
 * non-constant pad of an empty axis (the constant, as ONNX Runtime). */
static int pad_by_kernel(int r, const int64_t *dims, const int64_t *pads, int md) {
    for (int i = 0; i < r && md; i++) {
        int64_t d = dims[i] + KL_MIN(pads[i], 0) + KL_MIN(pads[r + i], 0);
        if (d == 0 && (pads[i] > 0 || pads[r + i] > 0)) return 0;
        if (md == 1 && d > 1 && (pads[i] >= d || pads[r + i] >= d)) return 0;
    }
    return 1;
}

static int pad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t pads[2 * KL_MAX_DIMS];
    int rc = pad_params(n, in, n_in, pads, e);
    if (rc) return rc;
    int r = in[0]->rank;
    const char *mode = kl_gnode_attr_str(n, "mode", "constant");
    size_t es = esz(in[0]);
    double cv = n->opset < 11 ? kl_gnode_attr_float(n, "value", 0.f) : (n_in > 2 && in[2] && kl_tensor_numel(in[2]) ? kl__dbl_at(in[2], 0) : 0);
    int64_t m = kl_tensor_numel(out[0]), ist[KL_MAX_DIMS];
    contig_strides(r, in[0]->dims, ist);
    char cval[16];
    kl_tensor ct = *out[0];
    ct.data = cval;
    kl__set_dbl(&ct, 0, cv);
    int md = !strcmp(mode, "reflect") ? 1 : !strcmp(mode, "edge") ? 2 : !strcmp(mode, "wrap") ? 3 : 0;
    if (pad_by_kernel(r, in[0]->dims, pads, md)) {
        static const kl_pad_mode kmode[4] = {KL_PAD_CONSTANT, KL_PAD_REFLECT, KL_PAD_EDGE, KL_PAD_WRAP};
        return kl_pad(es, r, in[0]->dims, in[0]->data, pads, kmode[md], cval, out[0]->data, x->pool, e);
    }
    /* element by element, on the input cropped by the negative pads as
     * kl_pad does: reflect pads as large as the axis or larger (NumPy
     * reflects again), the constant for an empty axis in every mode */
    int64_t cd[KL_MAX_DIMS], base = 0;
    for (int d = 0; d < r; d++) {
        cd[d] = in[0]->dims[d] + KL_MIN(pads[d], 0) + KL_MIN(pads[r + d], 0);
        base += KL_MAX(-pads[d], 0) * ist[d];
    }
    for (int64_t i = 0; i < m; i++) {
        int64_t rem = i, off = base;
        int inside = 1;
        for (int d = r - 1; d >= 0; d--) {
            int64_t c = rem % out[0]->dims[d] - KL_MAX(pads[d], 0), D = cd[d];
            rem /= out[0]->dims[d];
            if (c < 0 || c >= D) {
                if (md == 0 || D == 0) { inside = 0; continue; }
                if (md == 1) { if (D == 1) c = 0; else { int64_t p = 2 * (D - 1); c = ((c % p) + p) % p; if (c >= D) c = p - c; } }
                else if (md == 2) c = c < 0 ? 0 : D - 1;
                else c = ((c % D) + D) % D;
            }
            off += c * ist[d];
        }
        memcpy((char *)out[0]->data + i * (int64_t)es, inside ? (char *)in[0]->data + off * (int64_t)es : cval, es);
    }
    return KL_OK;
}

/* ---- EyeLike, Trilu ---- */
static int eyelike_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_dtype dt = in[0]->dtype;
    const kl_attr *a = kl_gnode_attr(n, "dtype");
    if (a && kl_dtype_from_onnx((int)a->i, &dt)) return kl__fail_node(e, n, KL_EUNSUPPORTED, "dtype");
    if (in[0]->rank != 2) return kl__fail_node(e, n, KL_ESHAPE, "input must be 2-D");
    kl__set_shape(&out[0], dt, 2, in[0]->dims);
    return KL_OK;
}
static int eyelike_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t k = kl_gnode_attr_int(n, "k", 0), R = out[0]->dims[0], C = out[0]->dims[1];
    memset(out[0]->data, 0, (size_t)(R * C) * esz(out[0]));
    for (int64_t i = 0; i < R; i++) if (i + k >= 0 && i + k < C) kl__set_dbl(out[0], i * C + i + k, 1);
    return KL_OK;
}
static int trilu_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t k = n_in > 1 && in[1] ? kl__int_at(in[1], 0) : 0;
    int upper = (int)kl_gnode_attr_int(n, "upper", 1);
    int r = in[0]->rank;
    if (r < 2) return kl__fail_node(e, n, KL_ESHAPE, "rank < 2");
    int64_t R = in[0]->dims[r - 2], C = in[0]->dims[r - 1], m = kl_tensor_numel(in[0]);
    size_t es = esz(in[0]);
    memcpy(out[0]->data, in[0]->data, (size_t)m * es);
    for (int64_t i = 0; i < m; i++) {
        int64_t c = i % C, rr = (i / C) % (R ? R : 1);
        int keep = upper ? (c - rr >= k) : (c - rr <= k);
        if (!keep) memset((char *)out[0]->data + i * (int64_t)es, 0, es);
    }
    return KL_OK;
}

/* ---- DepthToSpace / SpaceToDepth ---- */
static int d2s_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t b = kl_gnode_attr_int(n, "blocksize", 0);
    if (in[0]->rank != 4 || b <= 0) return kl__fail_node(e, n, KL_EINVAL, "needs 4-D input and blocksize > 0");
    int64_t d[4];
    memcpy(d, in[0]->dims, sizeof d);
    if (!strcmp(n->op_type, "DepthToSpace")) {
        if (d[1] % (b * b)) return kl__fail_node(e, n, KL_ESHAPE, "channels not divisible by blocksize^2");
        d[1] /= b * b; d[2] *= b; d[3] *= b;
    } else {
        if (d[2] % b || d[3] % b) return kl__fail_node(e, n, KL_ESHAPE, "spatial dims not divisible by blocksize");
        d[1] *= b * b; d[2] /= b; d[3] /= b;
    }
    kl__set_shape(&out[0], in[0]->dtype, 4, d);
    return KL_OK;
}
static int d2s_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t b = kl_gnode_attr_int(n, "blocksize", 0);
    int crd = !strcmp(kl_gnode_attr_str(n, "mode", "DCR"), "CRD");
    /* express as a 6-D transpose */
    int64_t N = in[0]->dims[0], C = in[0]->dims[1], H = in[0]->dims[2], W = in[0]->dims[3];
    int64_t d6[6], st6[6], od[6], ost[6];
    int perm[6];
    if (!strcmp(n->op_type, "DepthToSpace")) {
        int64_t c = C / (b * b);
        if (crd) { int64_t t[6] = {N, c, b, b, H, W}; memcpy(d6, t, sizeof t); int p[6] = {0, 1, 4, 2, 5, 3}; memcpy(perm, p, sizeof p); }
        else { int64_t t[6] = {N, b, b, c, H, W}; memcpy(d6, t, sizeof t); int p[6] = {0, 3, 4, 1, 5, 2}; memcpy(perm, p, sizeof p); }
    } else {
        int64_t t[6] = {N, C, H / b, b, W / b, b};
        memcpy(d6, t, sizeof t);
        int p[6] = {0, 3, 5, 1, 2, 4};
        memcpy(perm, p, sizeof p);
    }
    contig_strides(6, d6, st6);
    int64_t pst[6];
    for (int i = 0; i < 6; i++) { od[i] = d6[perm[i]]; pst[i] = st6[perm[i]]; }
    contig_strides(6, od, ost);
    kl_copy_strided(esz(in[0]), 6, od, in[0]->data, pst, out[0]->data, ost, x->pool);
    return KL_OK;
}

/* ---- OneHot ---- */
static int onehot_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[1]);
    if (kl_tensor_numel(in[1]) < 1 || kl_tensor_numel(in[2]) != 2) return kl__fail_node(e, n, KL_ESHAPE, "depth must be a scalar and values have 2 entries");
    int64_t depth = (int64_t)kl__dbl_at(in[1], 0);
    if (depth < 0) return kl__fail_node(e, n, KL_EINVAL, "negative depth");
    int r = in[0]->rank + 1;
    if (r > KL_MAX_DIMS) return kl__fail_node(e, n, KL_EUNSUPPORTED, "rank");
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), r, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis");
    int64_t d[KL_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < r; i++) d[i] = i == ax ? depth : in[0]->dims[k++];
    kl__set_shape(&out[0], in[2]->dtype, r, d);
    return KL_OK;
}
static int onehot_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int r = out[0]->rank;
    int64_t ax;
    kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), r, &ax);
    int64_t depth = out[0]->dims[ax], outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= out[0]->dims[i];
    for (int i = (int)ax + 1; i < r; i++) inner *= out[0]->dims[i];
    int64_t m = kl_tensor_numel(out[0]);
    for (int64_t i = 0; i < m; i++) kl__set_dbl(out[0], i, kl__dbl_at(in[2], 0));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            int64_t v = (int64_t)kl__dbl_at(in[0], o * inner + j);
            if (v < 0) v += depth;
            if (v >= 0 && v < depth) kl__set_dbl(out[0], (o * depth + v) * inner + j, kl__dbl_at(in[2], 1));
        }
    return KL_OK;
}

/* ---- NonZero (data-dependent shape) ---- */
static int nonzero_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[0]);
    int64_t m = kl_tensor_numel(in[0]), c = 0;
    for (int64_t i = 0; i < m; i++) c += kl__dbl_at(in[0], i) != 0;
    int64_t d[2] = {in[0]->rank, c};
    kl__set_shape(&out[0], KL_I64, 2, d);
    return KL_OK;
}
static int nonzero_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t m = kl_tensor_numel(in[0]), c = 0, C = out[0]->dims[1];
    int r = in[0]->rank;
    int64_t *o = out[0]->data;
    for (int64_t i = 0; i < m; i++) {
        if (kl__dbl_at(in[0], i) == 0) continue;
        int64_t rem = i;
        for (int d = r - 1; d >= 0; d--) { o[d * C + c] = rem % in[0]->dims[d]; rem /= in[0]->dims[d]; }
        c++;
    }
    return KL_OK;
}

/* ---- CumSum ---- */
static int cumsum_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (kl_tensor_numel(in[1]) != 1) return kl__fail_node(e, n, KL_ESHAPE, "axis must be a scalar");
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int trilu_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (n_in > 1 && in[1] && kl_tensor_numel(in[1]) != 1) return kl__fail_node(e, n, KL_ESHAPE, "k must be a scalar");
    if (in[0]->rank < 2) return kl__fail_node(e, n, KL_ESHAPE, "rank < 2");
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int scatter_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[1]->rank != in[0]->rank && strcmp(n->op_type, "ScatterND"))
        return kl__fail_node(e, n, KL_ESHAPE, "indices rank differs");
    if (kl_tensor_numel(in[2]) != kl_tensor_numel(in[1]) && strcmp(n->op_type, "ScatterND"))
        return kl__fail_node(e, n, KL_ESHAPE, "updates and indices differ");
    if (in[2]->dtype != in[0]->dtype) return kl__fail_node(e, n, KL_ETYPE, "updates dtype differs");
    if (!strcmp(n->op_type, "ScatterND")) {
        int q = in[1]->rank;
        if (q < 1 || in[1]->dims[q - 1] > in[0]->rank) return kl__fail_node(e, n, KL_ESHAPE, "bad indices shape");
        int64_t k = in[1]->dims[q - 1], want = kl_tensor_numel(in[1]) / (k ? k : 1);
        for (int i = (int)k; i < in[0]->rank; i++) want *= in[0]->dims[i];
        if (kl_tensor_numel(in[2]) != want) return kl__fail_node(e, n, KL_ESHAPE, "updates have the wrong size");
    }
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int cumsum_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax;
    if (kl__norm_axis(kl__int_at(in[1], 0), in[0]->rank, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis");
    int excl = (int)kl_gnode_attr_int(n, "exclusive", 0), rev = (int)kl_gnode_attr_int(n, "reverse", 0);
    int64_t outer = 1, inner = 1, D = in[0]->dims[ax];
    for (int i = 0; i < ax; i++) outer *= in[0]->dims[i];
    for (int i = (int)ax + 1; i < in[0]->rank; i++) inner *= in[0]->dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = 0;
            for (int64_t k = 0; k < D; k++) {
                int64_t kk = rev ? D - 1 - k : k, idx = (o * D + kk) * inner + j;
                double v = kl__dbl_at(in[0], idx);
                if (excl) { kl__set_dbl(out[0], idx, acc); acc += v; }
                else { acc += v; kl__set_dbl(out[0], idx, acc); }
            }
        }
    return KL_OK;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const char *const no_attrs[] = {NULL};
static const char *const a_axis[] = {"axis", NULL};
static const char *const a_axes[] = {"axes", NULL};
static const char *const a_reshape[] = {"allowzero", NULL};
static const char *const a_perm[] = {"perm", NULL};
static const char *const a_split[] = {"axis", "split", "num_outputs", NULL};
static const char *const a_slice[] = {"starts", "ends", "axes", NULL};
static const char *const a_shape[] = {"start", "end", NULL};
static const char *const a_const[] = {"value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value", NULL};
static const char *const a_value[] = {"value", NULL};
static const char *const a_pad[] = {"mode", "pads", "value", NULL};
static const char *const a_eye[] = {"dtype", "k", NULL};
static const char *const a_trilu[] = {"upper", NULL};
static const char *const a_d2s[] = {"blocksize", "mode", NULL};
static const char *const a_scatter[] = {"axis", "reduction", NULL};
static const char *const a_red[] = {"reduction", NULL};
static const char *const a_gnd[] = {"batch_dims", NULL};
static const char *const a_cumsum[] = {"exclusive", "reverse", NULL};

static int need_inputs(kl_gnode *n, int since, int k, kl_err *e) {
    if (n->opset < since) return KL_OK;
    for (int i = 0; i < k; i++)
        if (i >= n->n_in || n->inputs[i] < 0) return kl__fail_node(e, n, KL_EPARSE, "opset %d: needs %d inputs", n->opset, k);
    return KL_OK;
}
static int slice_check(kl_gnode *n, const kl_graph *g, kl_err *e) { return need_inputs(n, 10, 3, e); }
static int unsqueeze_check(kl_gnode *n, const kl_graph *g, kl_err *e) { return need_inputs(n, 13, 2, e); }

static int pad_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    if (need_inputs(n, 11, 2, e)) return e ? e->code : KL_EPARSE;
    const char *m = kl_gnode_attr_str(n, "mode", "constant");
    if (strcmp(m, "constant") && strcmp(m, "reflect") && strcmp(m, "edge") && strcmp(m, "wrap"))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: Pad mode '%s' is not supported", n->opset, m);
    return KL_OK;
}

const kl_op kl__ops_shape[] = {
    {"Reshape", "", 5, 17, 2, 2, 1, 1, a_reshape, NULL, reshape_infer, copy_run, 0},
    {"Flatten", "", 1, 17, 1, 1, 1, 1, a_axis, NULL, flatten_infer, copy_run, 0},
    {"Squeeze", "", 1, 17, 1, 2, 1, 1, a_axes, NULL, squeeze_infer, copy_run, 0},
    {"Unsqueeze", "", 1, 17, 1, 2, 1, 1, a_axes, unsqueeze_check, unsqueeze_infer, copy_run, 0},
    {"Transpose", "", 1, 17, 1, 1, 1, 1, a_perm, NULL, transpose_infer, transpose_run, 0},
    {"Concat", "", 4, 17, 1, -1, 1, 1, a_axis, NULL, concat_infer, concat_run, 0},
    {"Split", "", 2, 17, 1, 2, 1, -1, a_split, NULL, split_infer, split_run, 0},
    {"Slice", "", 1, 17, 1, 5, 1, 1, a_slice, slice_check, slice_infer, slice_run, 0},
    {"Gather", "", 1, 17, 2, 2, 1, 1, a_axis, NULL, gather_infer, gather_run, 0},
    {"GatherElements", "", 11, 17, 2, 2, 1, 1, a_axis, NULL, idxshape_infer, gather_el_run, 0},
    {"ScatterElements", "", 11, 17, 3, 3, 1, 1, a_scatter, NULL, scatter_infer, scatter_el_run, 0},
    {"Scatter", "", 9, 10, 3, 3, 1, 1, a_axis, NULL, scatter_infer, scatter_el_run, 0}, /* deprecated ScatterElements */
    {"GatherND", "", 11, 17, 2, 2, 1, 1, a_gnd, NULL, gather_nd_infer, gather_nd_run, 0},
    {"ScatterND", "", 11, 17, 3, 3, 1, 1, a_red, NULL, scatter_infer, scatter_nd_run, 0},
    {"Shape", "", 1, 17, 1, 1, 1, 1, a_shape, NULL, shape_infer, shape_run, KL_OP_SHAPE_ONLY},
    {"Size", "", 1, 17, 1, 1, 1, 1, no_attrs, NULL, size_infer, size_run, KL_OP_SHAPE_ONLY},
    {"Constant", "", 1, 17, 0, 0, 1, 1, a_const, constant_check, constant_infer, constant_run, 0},
    {"ConstantOfShape", "", 9, 17, 1, 1, 1, 1, a_value, NULL, cos_infer, cos_run, 0},
    {"Expand", "", 8, 17, 2, 2, 1, 1, no_attrs, NULL, expand_infer, expand_run, 0},
    {"Tile", "", 6, 17, 2, 2, 1, 1, no_attrs, NULL, tile_infer, tile_run, 0},
    {"Range", "", 11, 17, 3, 3, 1, 1, no_attrs, NULL, range_infer, range_run, 0},
    {"Pad", "", 2, 17, 1, 4, 1, 1, a_pad, pad_check, pad_infer, pad_run, 0},
    {"EyeLike", "", 9, 17, 1, 1, 1, 1, a_eye, NULL, eyelike_infer, eyelike_run, 0},
    {"Trilu", "", 14, 17, 1, 2, 1, 1, a_trilu, NULL, trilu_infer, trilu_run, 0},
    {"DepthToSpace", "", 1, 17, 1, 1, 1, 1, a_d2s, NULL, d2s_infer, d2s_run, 0},
    {"SpaceToDepth", "", 1, 17, 1, 1, 1, 1, a_d2s, NULL, d2s_infer, d2s_run, 0},
    {"OneHot", "", 9, 17, 3, 3, 1, 1, a_axis, NULL, onehot_infer, onehot_run, 0},
    {"NonZero", "", 9, 17, 1, 1, 1, 1, no_attrs, NULL, nonzero_infer, nonzero_run, 0},
    {"CumSum", "", 11, 17, 2, 2, 1, 1, a_cumsum, NULL, cumsum_infer, cumsum_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
