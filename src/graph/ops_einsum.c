/* Einsum and Det. Einsum is planned as strided views (a repeated letter in
 * one operand = a diagonal: its strides summed), a sum over the letters only
 * one operand has, then left-to-right pairwise contractions, each operand
 * copied into [batch, free, contracted] order (kl_copy_strided; size-1
 * ellipsis dims broadcast with stride 0) and multiplied with a batched GEMM
 * (kl_gemm_f32 / cblas_dgemm), then one copy into the output order. f32 and
 * f64. Det: LU with partial pivoting in double per matrix. */
#include "graph/graph_int.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* ================================================================== *
 * Einsum: the equation
 * ================================================================== */

#define ES_MAXOP 16
#define ES_NLET  (52 + KL_MAX_DIMS) /* a-z, A-Z, then the ellipsis dims */
#define ES_MAXR  (2 * KL_MAX_DIMS)

typedef struct {
    int nops;
    int n[ES_MAXOP], let[ES_MAXOP][KL_MAX_DIMS]; /* letters per operand (repeats kept) */
    int nout, out[KL_MAX_DIMS];
    int64_t size[ES_NLET];
} es_eq;

static int es_letter(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1; }

/* one term ("ij", "...ii"): letters, ellipsis expanded to rank - letters ids
 * right-aligned in a block of ell (the widest ellipsis) */
static int es_term(kl_gnode *n, const char *s, const char *end, int rank, int ell, int *let, int *nl, int *ell_rank,
                   kl_err *e) {
    int k = 0, seen_ell = 0, named = 0;
    for (const char *p = s; p < end; p++)
        if (es_letter(*p) >= 0) named++;
    for (const char *p = s; p < end; p++) {
        if (*p == ' ') continue;
        if (*p == '.') {
            if (end - p < 3 || p[1] != '.' || p[2] != '.' || seen_ell)
                return kl__fail_node(e, n, KL_EINVAL, "equation: bad ellipsis");
            seen_ell = 1;
            p += 2;
            int er = rank - named;
            if (er < 0) return kl__fail_node(e, n, KL_ESHAPE, "equation term has more letters than rank %d", rank);
            *ell_rank = er;
            if (ell >= 0)
                for (int i = 0; i < er; i++) {
                    if (k >= KL_MAX_DIMS) return kl__fail_node(e, n, KL_ESHAPE, "equation term too long");
                    let[k++] = 52 + ell - er + i;
                }
            else k += er;
            continue;
        }
        int l = es_letter(*p);
        if (l < 0) return kl__fail_node(e, n, KL_EINVAL, "equation: unexpected character '%c'", *p);
        if (k >= KL_MAX_DIMS) return kl__fail_node(e, n, KL_ESHAPE, "equation term too long");
        let[k++] = l;
    }
    if (!seen_ell) *ell_rank = 0;
    *nl = k;
    return KL_OK;
}

/* parses the equation for inputs of these ranks/dims; sizes per letter */
static int es_parse(kl_gnode *n, kl_tensor *const *in, int n_in, es_eq *q, kl_err *e) {
    const char *eq = kl_gnode_attr_str(n, "equation", NULL);
    if (!eq) return kl__fail_node(e, n, KL_EINVAL, "missing equation");
    memset(q, 0, sizeof *q);
    if (n_in > ES_MAXOP)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: more than %d operands", n->opset, ES_MAXOP);
    const char *arrow = strstr(eq, "->"), *lhs_end = arrow ? arrow : eq + strlen(eq);
    const char *terms[ES_MAXOP + 1];
    int nt = 0;
    terms[nt++] = eq;
    for (const char *p = eq; p < lhs_end; p++)
        if (*p == ',') {
            if (nt > ES_MAXOP) return kl__fail_node(e, n, KL_EINVAL, "equation has too many terms");
            terms[nt++] = p + 1;
        }
    if (nt != n_in) return kl__fail_node(e, n, KL_EINVAL, "equation has %d terms for %d inputs", nt, n_in);
    q->nops = nt;
    /* pass 1: the widest ellipsis; pass 2: the letters */
    int ell = 0, er, any_ell = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nt; i++) {
            const char *end = i + 1 < nt ? terms[i + 1] - 1 : lhs_end;
            int rc = es_term(n, terms[i], end, in[i]->rank, pass ? ell : -1, q->let[i], &q->n[i], &er, e);
            if (rc) return rc;
            if (!pass && er > ell) ell = er;
            if (strstr(terms[i], "...") && strstr(terms[i], "...") < end) any_ell = 1;
            if (pass && q->n[i] != in[i]->rank)
                return kl__fail_node(e, n, KL_ESHAPE, "equation term %d has %d indices for rank %d", i, q->n[i],
                                     in[i]->rank);
        }
    for (int l = 0; l < ES_NLET; l++) q->size[l] = -1;
    for (int i = 0; i < nt; i++)
        for (int k = 0; k < q->n[i]; k++) {
            int l = q->let[i][k];
            int64_t d = in[i]->dims[k];
            if (q->size[l] < 0 || q->size[l] == 1) q->size[l] = d;
            else if (d != 1 && d != q->size[l])
                return kl__fail_node(e, n, KL_ESHAPE, "index of size %lld and %lld", (long long)q->size[l],
                                     (long long)d);
        }
    if (arrow) {
        int r, named = 0, has = strstr(arrow + 2, "...") != NULL;
        for (const char *p = arrow + 2; *p; p++) named += es_letter(*p) >= 0;
        int rc = es_term(n, arrow + 2, arrow + strlen(arrow), named + (has ? ell : 0), ell, q->out, &q->nout, &r, e);
        if (rc) return rc;
    } else {
        /* implicit: the ellipsis dims, then the letters used once, in ASCII order */
        for (int i = 0; any_ell && i < ell; i++) q->out[q->nout++] = 52 + i;
        int cnt[52] = {0};
        for (int i = 0; i < nt; i++)
            for (int k = 0; k < q->n[i]; k++)
                if (q->let[i][k] < 52) cnt[q->let[i][k]]++;
        for (int c = 0; c < 52; c++) {
            int l = c < 26 ? 26 + c : c - 26; /* 'A'..'Z' sort before 'a'..'z' */
            if (cnt[l] == 1) {
                if (q->nout >= KL_MAX_DIMS) return kl__fail_node(e, n, KL_ESHAPE, "output rank above %d", KL_MAX_DIMS);
                q->out[q->nout++] = l;
            }
        }
    }
    for (int k = 0; k < q->nout; k++) {
        if (q->size[q->out[k]] < 0) return kl__fail_node(e, n, KL_EINVAL, "output index %d is in no input", k);
        for (int j = 0; j < k; j++)
            if (q->out[j] == q->out[k]) return kl__fail_node(e, n, KL_EINVAL, "output index repeated");
    }
    return KL_OK;
}

static int es_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_out, (void)ws;
    for (int i = 0; i < n_in; i++)
        if (in[i]->dtype != in[0]->dtype || (in[0]->dtype != KL_F32 && in[0]->dtype != KL_F64))
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: inputs must all be float32 or all float64",
                                 n->opset);
    es_eq q;
    int rc = es_parse(n, in, n_in, &q, e);
    if (rc) return rc;
    int64_t d[KL_MAX_DIMS];
    for (int k = 0; k < q.nout; k++) d[k] = q.size[q.out[k]];
    kl__set_shape(&out[0], in[0]->dtype, q.nout, d);
    return KL_OK;
}

/* ================================================================== *
 * Einsum: execution on views
 * ================================================================== */

typedef struct {
    void *data; /* owned when own != NULL */
    void *own;
    int n, let[ES_MAXR];
    int64_t dim[ES_MAXR], st[ES_MAXR];
} es_view;

typedef struct {
    kl_gnode *n;
    const es_eq *q;
    kl_dtype dt;
    size_t es;
    kl_pool *pool;
    kl_err *e;
} es_run_ctx;

/* operand i as a view with unique letters (repeats = diagonal) */
static void es_view_of(const es_eq *q, int i, const kl_tensor *t, es_view *v) {
    int64_t st[KL_MAX_DIMS];
    kl_tensor_contiguous_strides(t->rank, t->dims, st);
    memset(v, 0, sizeof *v);
    v->data = t->data;
    for (int k = 0; k < q->n[i]; k++) {
        int l = q->let[i][k], j;
        for (j = 0; j < v->n && v->let[j] != l; j++) {}
        if (j == v->n) v->let[v->n] = l, v->dim[v->n] = t->dims[k], v->st[v->n++] = 0;
        v->st[j] += st[k];
    }
}

static int es_find(const es_view *v, int l) {
    for (int j = 0; j < v->n; j++)
        if (v->let[j] == l) return j;
    return -1;
}

/* a contiguous copy of v in the letter order ord (sizes from the equation:
 * a size-1 dim of v broadcast) */
static int es_materialize(es_run_ctx *c, const es_view *v, const int *ord, int nord, es_view *out) {
    int64_t dims[ES_MAXR] = {0}, sst[ES_MAXR], dst[ES_MAXR], total = 1;
    for (int k = 0; k < nord; k++) {
        int j = es_find(v, ord[k]);
        dims[k] = c->q->size[ord[k]];
        sst[k] = j < 0 || (v->dim[j] == 1 && dims[k] != 1) ? 0 : v->st[j];
        total *= dims[k];
    }
    kl_tensor_contiguous_strides(nord, dims, dst);
    void *buf = kl_mem_alloc_e((size_t)total * c->es + 64, KL_TAG_WORKSPACE, c->e);
    if (!buf) return kl__fail_node(c->e, c->n, KL_ENOMEM, "out of memory (%lld elements)", (long long)total);
    if (total) kl_copy_strided(c->es, nord, dims, v->data, sst, buf, dst, c->pool);
    memset(out, 0, sizeof *out);
    out->data = out->own = buf;
    out->n = nord;
    for (int k = 0; k < nord; k++) out->let[k] = ord[k], out->dim[k] = dims[k], out->st[k] = dst[k];
    return KL_OK;
}

/* is letter l used by operands after i or by the output */
static int es_needed(const es_eq *q, int l, int after) {
    for (int k = 0; k < q->nout; k++)
        if (q->out[k] == l) return 1;
    for (int i = after + 1; i < q->nops; i++)
        for (int k = 0; k < q->n[i]; k++)
            if (q->let[i][k] == l) return 1;
    return 0;
}

/* sums out the letters of v that no other operand (nor the output) uses;
 * other: the view it is contracted with next (NULL = none) */
static int es_sum_private(es_run_ctx *c, es_view *v, const es_view *other, int idx) {
    int keep[ES_MAXR], priv[ES_MAXR], nk = 0, np = 0;
    for (int j = 0; j < v->n; j++) {
        int l = v->let[j];
        if (es_needed(c->q, l, idx) || (other && es_find(other, l) >= 0)) keep[nk++] = l;
        else priv[np++] = l;
    }
    if (!np) return KL_OK;
    int ord[ES_MAXR];
    memcpy(ord, keep, sizeof(int) * (size_t)nk);
    memcpy(ord + nk, priv, sizeof(int) * (size_t)np);
    es_view m;
    int rc = es_materialize(c, v, ord, nk + np, &m);
    if (rc) return rc;
    int64_t rows = 1, cols = 1;
    for (int k = 0; k < nk; k++) rows *= m.dim[k];
    for (int k = nk; k < nk + np; k++) cols *= m.dim[k];
    for (int64_t r = 0; r < rows; r++) { /* in place: row r's sum goes to element r (r <= r * cols) */
        double s = 0;
        if (c->dt == KL_F32) {
            const float *p = (const float *)m.data + r * cols;
            for (int64_t k = 0; k < cols; k++) s += p[k];
            ((float *)m.data)[r] = (float)s;
        } else {
            const double *p = (const double *)m.data + r * cols;
            for (int64_t k = 0; k < cols; k++) s += p[k];
            ((double *)m.data)[r] = s;
        }
    }
    kl_mem_free(v->own);
    *v = m;
    v->n = nk;
    int64_t st[ES_MAXR];
    kl_tensor_contiguous_strides(nk, v->dim, st);
    memcpy(v->st, st, sizeof(int64_t) * (size_t)nk);
    return KL_OK;
}

/* C[b] = A[b] (M x K) * B[b] (K x N) */
static void es_bgemm(es_run_ctx *c, int64_t nb, int64_t M, int64_t N, int64_t K, const void *A, const void *B,
                     void *C) {
    if (K == 0) {
        memset(C, 0, (size_t)(nb * M * N) * c->es);
        return;
    }
    for (int64_t b = 0; b < nb; b++) {
        if (c->dt == KL_F32)
            kl_gemm_f32(0, 0, M, N, K, 1.f, (const float *)A + b * M * K, K, (const float *)B + b * K * N, N, 0.f,
                        (float *)C + b * M * N, N, c->pool);
        else
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0,
                        (const double *)A + b * M * K, (int)K, (const double *)B + b * K * N, (int)N, 0.0,
                        (double *)C + b * M * N, (int)N);
    }
}

/* acc = acc (x) v contracted over the letters both have and nothing later needs */
static int es_contract(es_run_ctx *c, es_view *acc, es_view *v, int idx) {
    int bat[ES_MAXR], fa[ES_MAXR], fb[ES_MAXR], con[ES_MAXR], nb = 0, na = 0, nf = 0, nc = 0;
    for (int j = 0; j < acc->n; j++) {
        int l = acc->let[j];
        if (es_find(v, l) < 0) fa[na++] = l;
        else if (es_needed(c->q, l, idx)) bat[nb++] = l;
        else con[nc++] = l;
    }
    for (int j = 0; j < v->n; j++)
        if (es_find(acc, v->let[j]) < 0) fb[nf++] = v->let[j];
    int oa[ES_MAXR], ob[ES_MAXR], k = 0;
    for (int i = 0; i < nb; i++) oa[k++] = bat[i];
    for (int i = 0; i < na; i++) oa[k++] = fa[i];
    for (int i = 0; i < nc; i++) oa[k++] = con[i];
    k = 0;
    for (int i = 0; i < nb; i++) ob[k++] = bat[i];
    for (int i = 0; i < nc; i++) ob[k++] = con[i];
    for (int i = 0; i < nf; i++) ob[k++] = fb[i];
    if (nb + na + nf > ES_MAXR)
        return kl__fail_node(c->e, c->n, KL_EUNSUPPORTED, "opset %d: intermediate rank above %d", c->n->opset, ES_MAXR);
    es_view A, B;
    int rc = es_materialize(c, acc, oa, nb + na + nc, &A);
    if (rc) return rc;
    if ((rc = es_materialize(c, v, ob, nb + nc + nf, &B))) {
        kl_mem_free(A.own);
        return rc;
    }
    int64_t NB = 1, M = 1, N = 1, K = 1;
    for (int i = 0; i < nb; i++) NB *= c->q->size[bat[i]];
    for (int i = 0; i < na; i++) M *= c->q->size[fa[i]];
    for (int i = 0; i < nf; i++) N *= c->q->size[fb[i]];
    for (int i = 0; i < nc; i++) K *= c->q->size[con[i]];
    void *C = kl_mem_alloc_e((size_t)(NB * M * N) * c->es + 64, KL_TAG_WORKSPACE, c->e);
    if (!C) {
        kl_mem_free(A.own), kl_mem_free(B.own);
        return kl__fail_node(c->e, c->n, KL_ENOMEM, "out of memory");
    }
    es_bgemm(c, NB, M, N, K, A.data, B.data, C);
    kl_mem_free(A.own), kl_mem_free(B.own), kl_mem_free(acc->own), kl_mem_free(v->own);
    memset(acc, 0, sizeof *acc);
    acc->data = acc->own = C;
    for (int i = 0; i < nb; i++) acc->let[acc->n++] = bat[i];
    for (int i = 0; i < na; i++) acc->let[acc->n++] = fa[i];
    for (int i = 0; i < nf; i++) acc->let[acc->n++] = fb[i];
    for (int i = 0; i < acc->n; i++) acc->dim[i] = c->q->size[acc->let[i]];
    kl_tensor_contiguous_strides(acc->n, acc->dim, acc->st);
    return KL_OK;
}

static int es_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    (void)n_out;
    es_eq q;
    int rc = es_parse(n, in, n_in, &q, e);
    if (rc) return rc;
    es_run_ctx c = {n, &q, in[0]->dtype, kl_dtype_size(in[0]->dtype), x->pool, e};
    es_view acc, v;
    es_view_of(&q, 0, in[0], &acc);
    if (q.nops > 1) es_view_of(&q, 1, in[1], &v);
    rc = es_sum_private(&c, &acc, q.nops > 1 ? &v : NULL, 0);
    for (int i = 1; !rc && i < q.nops; i++) {
        if (i > 1) es_view_of(&q, i, in[i], &v);
        if (!(rc = es_sum_private(&c, &v, &acc, i))) rc = es_contract(&c, &acc, &v, i);
        if (rc) kl_mem_free(v.own);
    }
    if (!rc) {
        /* into the output order */
        int64_t dims[KL_MAX_DIMS], sst[KL_MAX_DIMS], dst[KL_MAX_DIMS];
        for (int k = 0; k < q.nout; k++) {
            int j = es_find(&acc, q.out[k]);
            dims[k] = q.size[q.out[k]];
            sst[k] = j < 0 || (acc.dim[j] == 1 && dims[k] != 1) ? 0 : acc.st[j];
        }
        kl_tensor_contiguous_strides(q.nout, dims, dst);
        if (kl_tensor_numel(out[0])) kl_copy_strided(c.es, q.nout, dims, acc.data, sst, out[0]->data, dst, x->pool);
    }
    kl_mem_free(acc.own);
    return rc;
}

/* ================================================================== *
 * Det
 * ================================================================== */

static int det_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out;
    const kl_tensor *X = in[0];
    if (X->dtype != KL_F32 && X->dtype != KL_F64)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %s (float32, float64)", n->opset,
                             kl_dtype_name(X->dtype));
    if (X->rank < 2 || X->dims[X->rank - 1] != X->dims[X->rank - 2])
        return kl__fail_node(e, n, KL_ESHAPE, "input must be [..., M, M]");
    kl__set_shape(&out[0], X->dtype, X->rank - 2, X->dims);
    *ws = (size_t)(X->dims[X->rank - 1] * X->dims[X->rank - 1]) * sizeof(double) + 64;
    return KL_OK;
}

static double det_lu(double *a, int64_t m) {
    double det = 1;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = k;
        for (int64_t i = k + 1; i < m; i++)
            if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
        if (a[p * m + k] == 0) return 0;
        if (p != k) {
            for (int64_t j = 0; j < m; j++) {
                double t = a[k * m + j];
                a[k * m + j] = a[p * m + j];
                a[p * m + j] = t;
            }
            det = -det;
        }
        double piv = a[k * m + k];
        det *= piv;
        for (int64_t i = k + 1; i < m; i++) {
            double f = a[i * m + k] / piv;
            for (int64_t j = k + 1; j < m; j++) a[i * m + j] -= f * a[k * m + j];
        }
    }
    return det;
}

static int det_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    (void)n, (void)n_in, (void)n_out, (void)e;
    const kl_tensor *X = in[0];
    int64_t m = X->dims[X->rank - 1], mats = kl_tensor_numel(out[0]);
    double *a = x->ws;
    for (int64_t b = 0; b < mats; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = kl__dbl_at(X, b * m * m + i);
        kl__set_dbl(out[0], b, det_lu(a, m));
    }
    return KL_OK;
}

static const char *const a_einsum[] = {"equation", NULL};
static const char *const a_none[] = {NULL};

const kl_op kl__ops_einsum[] = {
    {"Einsum", "", 12, 19, 1, ES_MAXOP, 1, 1, a_einsum, NULL, es_infer, es_run, 0},
    {"Det", "", 11, 19, 1, 1, 1, 1, a_none, NULL, det_infer, det_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
