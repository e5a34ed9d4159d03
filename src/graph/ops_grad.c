/* Gradient operators (domain ai.keel.grad) that kl_graph_autodiff appends
 * to a graph, and the training-mode forward operators (domain
 * ai.keel.train: losses, seeded Dropout). Each has shape inference, so the
 * planner sizes gradients and workspaces before the first step, and runs in
 * float32 (fast: keel's GEMM, fixed blocks) and float64 (finite-difference
 * checks). Kernels: grad_gen.h (instantiated here for both types), conv and
 * pooling gradients: grad_conv.c. */
#include "graph/graph_int.h"
#include "graph/grad_int.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define R float
#define FN(x) x##_f32
#include "graph/grad_gen.h"
#undef R
#undef FN
#define R double
#define FN(x) x##_f64
#include "graph/grad_gen.h"
#undef R
#undef FN

/* ================================================================== *
 * Helpers
 * ================================================================== */

int kl__need_float(kl_gnode *n, const kl_tensor *t, const char *what, kl_err *e) {
    if (!t) return kl__fail_node(e, n, KL_EINVAL, "%s is missing", what);
    if (t->dtype != KL_F32 && t->dtype != KL_F64)
        return kl__fail_node(e, n, KL_ETYPE, "%s is %s (float32 or float64 needed)", what, kl_dtype_name(t->dtype));
    return KL_OK;
}

int kl__same_dtype(kl_gnode *n, const kl_tensor *a, const char *an, const kl_tensor *b, const char *bn, kl_err *e) {
    if (a->dtype != b->dtype)
        return kl__fail_node(e, n, KL_ETYPE, "%s is %s but %s is %s", an, kl_dtype_name(a->dtype), bn, kl_dtype_name(b->dtype));
    return KL_OK;
}

int kl__same_shape(kl_gnode *n, const kl_tensor *a, const char *an, const kl_tensor *b, const char *bn, kl_err *e) {
    if (a->rank != b->rank || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank)) {
        char x[96], y[96];
        return kl__fail_node(e, n, KL_ESHAPE, "%s has shape %s but %s has shape %s", an, kl_shape_str(a->rank, a->dims, x, sizeof x),
                             bn, kl_shape_str(b->rank, b->dims, y, sizeof y));
    }
    return KL_OK;
}

/* OpenBLAS stays single-threaded (keel's pool parallelises; its own threads
 * would make dgemm's summation order depend on them). */
extern void openblas_set_num_threads(int);
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_init(void) { openblas_set_num_threads(1); }
void kl__blas_single(void) { pthread_once(&blas_once, blas_init); }

/* C = alpha op(A) op(B) + beta C in the tensor's dtype (f32: keel's GEMM). */
void kl__gemm_dt(kl_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                 const void *B, int64_t ldb, double beta, void *C, int64_t ldc, kl_pool *pool) {
    if (M <= 0 || N <= 0) return;
    if (dt == KL_F32) {
        if (K <= 0) {
            float *c = C;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) c[i * ldc + j] = beta == 0 ? 0 : (float)beta * c[i * ldc + j];
            return;
        }
        kl_gemm_f32(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc, pool);
        return;
    }
    if (K <= 0) {
        double *c = C;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    kl__blas_single();
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* Float32 GEMM through keel's packed AVX-512 micro-kernel with op(B)
 * packed per call (the weights change every step; packing is O(K N) against
 * O(M N K) of work) and op(A) transposed into the workspace when needed;
 * kl_gemm_f32 (OpenBLAS tiles) when the CPU lacks AVX-512F or ws is short.
 * C = alpha op(A) op(B). Deterministic at any thread count. */
static size_t al64(size_t x) { return (x + 63) & ~(size_t)63; }
size_t kl__gemm_fast_ws(int ta, int64_t M, int64_t N, int64_t K) {
    size_t nf = M > 0 && N > 0 && K > 0 ? kl_gemm_packed_b_floats(K, N) : 0;
    if (!nf) return 0;
    return al64(nf * sizeof(float)) + (ta ? al64((size_t)(M * K) * sizeof(float)) : 0) + 64;
}
void kl__gemm_fast_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float *C, int64_t ldc, void *ws, size_t ws_bytes, kl_pool *pool) {
    size_t need = kl__gemm_fast_ws(ta, M, N, K);
    if (M <= 0 || N <= 0) return;
    if (!need || !ws || ws_bytes < need || K <= 0) {
        kl__gemm_dt(KL_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0, C, ldc, pool);
        return;
    }
    float *P = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    const float *a = A;
    int64_t la = lda;
    if (ta) { /* A is K x M: A' = A^T (M x K) */
        float *t = P + al64(kl_gemm_packed_b_floats(K, N) * sizeof(float)) / sizeof(float);
        for (int64_t k0 = 0; k0 < K; k0 += 32)
            for (int64_t m0 = 0; m0 < M; m0 += 32)
                for (int64_t k = k0; k < KL_MIN(k0 + 32, K); k++)
                    for (int64_t m = m0; m < KL_MIN(m0 + 32, M); m++) t[m * K + k] = A[k * lda + m];
        a = t;
        la = K;
    }
    kl_gemm_pack_b(tb, K, N, B, ldb, P);
    kl_gemm_packed_f32(M, N, K, a, la, P, NULL, NULL, (kl_act){KL_ACT_NONE, 0, 0}, C, ldc, pool);
    if (alpha != 1.f)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] *= alpha;
}

/* Forward Gemm of training graphs (ops_nn.c branches here): B is a graph
 * input (a parameter that changes every step), so it cannot be pre-packed
 * at load; packing it per call into the workspace and running keel's packed
 * kernel (bias and activation in its epilogue) beats the OpenBLAS path. */
static int gemm_train_ok(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t M, int64_t N) {
    if (in[0]->dtype != KL_F32 || in[1]->dtype != KL_F32 || in[1]->data || n->priv || M < 16) return 0;
    if (kl_gnode_attr_int(n, "transA", 0) || kl_gnode_attr_float(n, "alpha", 1.f) != 1.f) return 0;
    const kl_tensor *c = n_in > 2 ? in[2] : NULL;
    if (c && (kl_gnode_attr_float(n, "beta", 1.f) != 1.f || c->dtype != KL_F32 ||
              !((c->rank == 1 && c->dims[0] == N) || (c->rank == 2 && c->dims[0] == 1 && c->dims[1] == N))))
        return 0;
    return 1;
}
size_t kl__gemm_train_ws(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t M, int64_t N, int64_t K) {
    return gemm_train_ok(n, in, n_in, M, N) ? kl__gemm_fast_ws(0, M, N, K) : 0;
}
int kl__gemm_train_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *y, int64_t M, int64_t N, int64_t K, kl_act act, kl_exec *x) {
    kl_tensor meta = *in[1];
    kl_tensor *ins[3] = {in[0], &meta, n_in > 2 ? in[2] : NULL};
    meta.data = NULL; /* the plan-time view: B not constant */
    size_t need = kl__gemm_fast_ws(0, M, N, K);
    if (!gemm_train_ok(n, ins, n_in, M, N) || !need || x->ws_bytes < need) return 0;
    float *P = (float *)(((uintptr_t)x->ws + 63) & ~(uintptr_t)63);
    kl_gemm_pack_b((int)kl_gnode_attr_int(n, "transB", 0), K, N, in[1]->data, in[1]->dims[1], P);
    kl_gemm_packed_f32(M, N, K, in[0]->data, K, P, n_in > 2 && in[2] ? in[2]->data : NULL, NULL, act, y->data, N, x->pool);
    return 1;
}

/* Forward MatMul of training graphs with a non-constant 2-D f32 B (a
 * transposed Linear weight): one packed GEMM over A's rows. */
static int matmul_train_ok(kl_gnode *n, kl_tensor *const *in, int64_t *rows) {
    const kl_tensor *A = in[0], *B = in[1];
    if (A->dtype != KL_F32 || B->dtype != KL_F32 || B->data || n->priv || B->rank != 2 || A->rank < 2) return 0;
    int64_t K = B->dims[0];
    *rows = K ? kl_tensor_numel(A) / K : 0;
    return *rows >= 16 && A->dims[A->rank - 1] == K;
}
size_t kl__matmul_train_ws(kl_gnode *n, kl_tensor *const *in) {
    int64_t rows;
    return strcmp(n->op_type, "MatMul") || !matmul_train_ok(n, in, &rows) ? 0 : kl__gemm_fast_ws(0, rows, in[1]->dims[1], in[1]->dims[0]);
}
int kl__matmul_train_run(kl_gnode *n, kl_tensor *const *in, kl_tensor *y, kl_exec *x) {
    kl_tensor meta = *in[1];
    kl_tensor *ins[2] = {in[0], &meta};
    int64_t rows;
    meta.data = NULL;
    if (!matmul_train_ok(n, ins, &rows)) return 0;
    int64_t K = in[1]->dims[0], N = in[1]->dims[1];
    size_t need = kl__gemm_fast_ws(0, rows, N, K);
    if (!need || x->ws_bytes < need) return 0;
    kl__gemm_fast_f32(0, 0, rows, N, K, 1.f, in[0]->data, K, in[1]->data, N, y->data, N, x->ws, x->ws_bytes, x->pool);
    return 1;
}

/* MatMulT(A, B) attrs transA, transB, alpha: C = alpha op(A) op(B), 2-D
 * (the gradient GEMMs of Gemm). */
static int mmt_dims(kl_gnode *n, kl_tensor *const *in, int64_t *M, int64_t *N, int64_t *K, kl_err *e) {
    int ta = (int)kl_gnode_attr_int(n, "transA", 0), tb = (int)kl_gnode_attr_int(n, "transB", 0);
    if (in[0]->rank != 2 || in[1]->rank != 2) return kl__fail_node(e, n, KL_ESHAPE, "A and B must be 2-D");
    *M = ta ? in[0]->dims[1] : in[0]->dims[0];
    *K = ta ? in[0]->dims[0] : in[0]->dims[1];
    int64_t K2 = tb ? in[1]->dims[1] : in[1]->dims[0];
    *N = tb ? in[1]->dims[0] : in[1]->dims[1];
    if (*K != K2) return kl__fail_node(e, n, KL_ESHAPE, "inner dimensions %lld and %lld differ", (long long)*K, (long long)K2);
    return KL_OK;
}
static int mmt_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    int64_t M, N, K;
    if ((rc = kl__need_float(n, in[0], "A", e)) || (rc = kl__same_dtype(n, in[0], "A", in[1], "B", e)) || (rc = mmt_dims(n, in, &M, &N, &K, e)))
        return rc;
    int64_t d[2] = {M, N};
    kl__set_shape(&out[0], in[0]->dtype, 2, d);
    if (in[0]->dtype == KL_F32) *ws = kl__gemm_fast_ws((int)kl_gnode_attr_int(n, "transA", 0), M, N, K);
    return KL_OK;
}
static int mmt_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int ta = (int)kl_gnode_attr_int(n, "transA", 0), tb = (int)kl_gnode_attr_int(n, "transB", 0);
    float alpha = kl_gnode_attr_float(n, "alpha", 1.f);
    int64_t M, N, K;
    int rc = mmt_dims(n, in, &M, &N, &K, e);
    if (rc) return rc;
    int64_t lda = in[0]->dims[1], ldb = in[1]->dims[1];
    if (in[0]->dtype == KL_F32) kl__gemm_fast_f32(ta, tb, M, N, K, alpha, in[0]->data, lda, in[1]->data, ldb, out[0]->data, N, x->ws, x->ws_bytes, x->pool);
    else kl__gemm_dt(KL_F64, ta, tb, M, N, K, alpha, in[0]->data, lda, in[1]->data, ldb, 0, out[0]->data, N, x->pool);
    return KL_OK;
}

static int like_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = kl__need_float(n, in[0], "input", e))) return rc;
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}

/* dy-typed output with the shape of input 1 (the forward value). */
static int grad_like_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = kl__need_float(n, in[0], "the gradient", e))) return rc;
    kl__set_shape(&out[0], in[0]->dtype, in[1]->rank, in[1]->dims);
    return KL_OK;
}

/* ================================================================== *
 * OnesLike, ZerosLike, ReshapeLike, SumToShape
 * ================================================================== */

static int ones_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t m = kl_tensor_numel(out[0]);
    int one = !strcmp(n->op_type, "OnesLike");
    if (out[0]->dtype == KL_F32) for (int64_t i = 0; i < m; i++) ((float *)out[0]->data)[i] = (float)one;
    else for (int64_t i = 0; i < m; i++) ((double *)out[0]->data)[i] = one;
    return KL_OK;
}

static int reshape_like_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = grad_like_infer(n, in, n_in, out, n_out, ws, e))) return rc;
    if (kl_tensor_numel(in[0]) != kl_tensor_numel(in[1])) {
        char a[96], b[96];
        return kl__fail_node(e, n, KL_ESHAPE, "gradient %s does not reshape to %s", kl_shape_str(in[0]->rank, in[0]->dims, a, sizeof a),
                             kl_shape_str(in[1]->rank, in[1]->dims, b, sizeof b));
    }
    return KL_OK;
}
static int reshape_like_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    size_t nb = (size_t)kl_tensor_numel(in[0]) * kl_dtype_size(in[0]->dtype);
    if (nb && out[0]->data != in[0]->data) memcpy(out[0]->data, in[0]->data, nb);
    return KL_OK;
}

static int sum_to_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = grad_like_infer(n, in, n_in, out, n_out, ws, e))) return rc;
    const kl_tensor *d = in[0], *o = in[1];
    int ok = o->rank <= d->rank || kl_tensor_numel(o) == kl_tensor_numel(d);
    for (int i = 0; ok && i < o->rank && i < d->rank; i++) {
        int64_t od = o->dims[o->rank - 1 - i], dd = d->dims[d->rank - 1 - i];
        if (od != 1 && od != dd) ok = 0;
    }
    if (!ok) {
        char a[96], b[96];
        return kl__fail_node(e, n, KL_ESHAPE, "gradient %s does not reduce to %s", kl_shape_str(d->rank, d->dims, a, sizeof a),
                             kl_shape_str(o->rank, o->dims, b, sizeof b));
    }
    return KL_OK;
}
static int sum_to_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    double scale = kl_gnode_attr_float(n, "scale", 1.f);
    const kl_tensor *d = in[0];
    kl_tensor *o = out[0];
    if (kl_tensor_numel(d) == kl_tensor_numel(o) && scale == 1) return reshape_like_run(n, in, n_in, out, n_out, x, e);
    if (d->dtype == KL_F32) sum_to_shape_f32((float)scale, d->rank, d->dims, d->data, o->rank, o->dims, o->data);
    else sum_to_shape_f64(scale, d->rank, d->dims, d->data, o->rank, o->dims, o->data);
    return KL_OK;
}

/* ExpandLike(dy, x) attr axes (the reduced axes; absent = all), mean:
 * gradient of ReduceSum/ReduceMean: dy broadcast back to x's shape
 * (divided by the reduced count when mean). */
static uint32_t expand_mask(kl_gnode *n, int r) {
    const kl_attr *ax = kl_gnode_attr(n, "axes");
    uint32_t m = 0;
    if (!ax || !ax->n) return r ? (uint32_t)((1u << r) - 1) : 0;
    for (int i = 0; i < ax->n; i++) {
        int64_t a;
        if (!kl__norm_axis(ax->ints[i], r, &a)) m |= 1u << a;
    }
    return m;
}
static int expand_like_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = grad_like_infer(n, in, n_in, out, n_out, ws, e))) return rc;
    uint32_t m = expand_mask(n, in[1]->rank);
    int64_t kept = 1;
    for (int i = 0; i < in[1]->rank; i++) kept *= m & (1u << i) ? 1 : in[1]->dims[i];
    if (kl_tensor_numel(in[0]) != kept) return kl__fail_node(e, n, KL_ESHAPE, "gradient has %lld elements, the reduction gives %lld", (long long)kl_tensor_numel(in[0]), (long long)kept);
    return KL_OK;
}
static int expand_like_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *X = in[1];
    int r = X->rank;
    uint32_t m = expand_mask(n, r);
    int64_t st[KL_MAX_DIMS], s = 1, cnt = 1, idx[KL_MAX_DIMS] = {0};
    for (int i = r - 1; i >= 0; i--) {
        if (m & (1u << i)) { st[i] = 0; cnt *= X->dims[i]; }
        else { st[i] = s; s *= X->dims[i]; }
    }
    double sc = kl_gnode_attr_int(n, "mean", 0) && cnt ? 1.0 / (double)cnt : 1.0;
    int64_t tot = kl_tensor_numel(X);
    for (int64_t i = 0; i < tot; i++) {
        int64_t o = 0;
        for (int d = 0; d < r; d++) o += idx[d] * st[d];
        if (X->dtype == KL_F32) ((float *)out[0]->data)[i] = (float)(((const float *)in[0]->data)[o] * sc);
        else ((double *)out[0]->data)[i] = ((const double *)in[0]->data)[o] * sc;
        for (int d = r - 1; d >= 0; d--) { if (++idx[d] < X->dims[d]) break; idx[d] = 0; }
    }
    return KL_OK;
}

/* ConcatGrad(dy, x0, x1, ...) attrs axis, index: the slice of dy that
 * Concat took from input `index` (the inputs give the offsets). */
static int concat_grad_geo(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t *ax, int64_t *off, kl_err *e) {
    int64_t idx = kl_gnode_attr_int(n, "index", 0);
    const kl_tensor *dy = in[0];
    if (idx < 0 || idx >= n_in - 1) return kl__fail_node(e, n, KL_EINVAL, "index %lld out of range", (long long)idx);
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), dy->rank, ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    *off = 0;
    for (int64_t k = 0; k < idx; k++) *off += in[1 + k]->dims[*ax];
    const kl_tensor *x = in[1 + idx];
    if (x->rank != dy->rank || *off + x->dims[*ax] > dy->dims[*ax]) return kl__fail_node(e, n, KL_ESHAPE, "input does not fit the gradient");
    return KL_OK;
}
static int concat_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t ax, off;
    int rc;
    if ((rc = kl__need_float(n, in[0], "the gradient", e)) || (rc = concat_grad_geo(n, in, n_in, &ax, &off, e))) return rc;
    const kl_tensor *x = in[1 + kl_gnode_attr_int(n, "index", 0)];
    kl__set_shape(&out[0], in[0]->dtype, x->rank, x->dims);
    return KL_OK;
}
static int concat_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax, off;
    int rc = concat_grad_geo(n, in, n_in, &ax, &off, e);
    if (rc) return rc;
    const kl_tensor *dy = in[0];
    size_t es = kl_dtype_size(dy->dtype);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= dy->dims[i];
    for (int i = (int)ax + 1; i < dy->rank; i++) inner *= dy->dims[i];
    int64_t D = dy->dims[ax], d = out[0]->dims[ax];
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out[0]->data + (size_t)(o * d * inner) * es, (const char *)dy->data + (size_t)((o * D + off) * inner) * es, (size_t)(d * inner) * es);
    return KL_OK;
}

/* ================================================================== *
 * Pointwise gradients: ReluGrad(dy, x) SigmoidGrad(dy, y) TanhGrad(dy, y)
 * GeluGrad(dy, x) ErfGrad(dy, x)
 * ================================================================== */

static int pw_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if (in[0]->dtype == KL_F16 || in[0]->dtype == KL_BF16) { /* fp16 training: through f32 in the workspace */
        if ((rc = kl__same_dtype(n, in[0], "the gradient", in[1], "the forward value", e)) ||
            (rc = kl__same_shape(n, in[0], "the gradient", in[1], "the forward value", e)))
            return rc;
        kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
        *ws = (size_t)kl_tensor_numel(in[0]) * 3 * sizeof(float) + 128;
        return KL_OK;
    }
    if ((rc = kl__need_float(n, in[0], "the gradient", e)) || (rc = kl__same_dtype(n, in[0], "the gradient", in[1], "the forward value", e)) ||
        (rc = kl__same_shape(n, in[0], "the gradient", in[1], "the forward value", e)))
        return rc;
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int pw_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const char *t = n->op_type;
    int kind = !strcmp(t, "ReluGrad") ? PW_RELU : !strcmp(t, "SigmoidGrad") ? PW_SIGMOID : !strcmp(t, "TanhGrad") ? PW_TANH :
               !strcmp(t, "GeluGrad") ? PW_GELU : PW_ERF;
    int64_t m = kl_tensor_numel(in[0]);
    if (in[0]->dtype == KL_F16 || in[0]->dtype == KL_BF16) {
        float *a = x->ws, *b = a + m + 16, *c = b + m + 16;
        int rc;
        if ((rc = kl_cast(in[0]->dtype, in[0]->data, KL_F32, a, m, x->pool, e)) || (rc = kl_cast(in[1]->dtype, in[1]->data, KL_F32, b, m, x->pool, e)))
            return rc;
        pointwise_grad_f32(kind, m, a, b, c, x->pool);
        return kl_cast(KL_F32, c, out[0]->dtype, out[0]->data, m, x->pool, e);
    }
    if (in[0]->dtype == KL_F32) pointwise_grad_f32(kind, m, in[0]->data, in[1]->data, out[0]->data, x->pool);
    else pointwise_grad_f64(kind, m, in[0]->data, in[1]->data, out[0]->data, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * SoftmaxGrad(dy, y), LogSoftmaxGrad(dy, y) (attr axis, opset-13 semantics)
 * ================================================================== */

static int softmax_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax;
    const kl_tensor *y = in[1];
    int r = y->rank;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), r, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int64_t outer = 1, inner = 1, D = r ? y->dims[ax] : 1;
    int coerce = (int)kl_gnode_attr_int(n, "coerce", 0); /* opset < 13: 2-D at axis */
    for (int i = 0; i < r; i++) {
        if (i < ax) outer *= y->dims[i];
        else if (i > ax) inner *= y->dims[i];
    }
    if (coerce) { D *= inner; inner = 1; }
    int lg = !strcmp(n->op_type, "LogSoftmaxGrad");
    if (y->dtype == KL_F32) softmax_grad_f32(lg, outer, D, inner, in[0]->data, y->data, out[0]->data);
    else softmax_grad_f64(lg, outer, D, inner, in[0]->data, y->data, out[0]->data);
    return KL_OK;
}

/* ================================================================== *
 * MatMulGrad(dy, A, B) attr input (0: dA, 1: dB). B 2-D (any rank A), or A
 * and B of one rank >= 2 with equal batch dims.
 * ================================================================== */

static int mm_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    const kl_tensor *dy = in[0], *A = in[1], *B = in[2];
    if ((rc = kl__need_float(n, dy, "the gradient", e)) || (rc = kl__same_dtype(n, dy, "the gradient", A, "A", e)) ||
        (rc = kl__same_dtype(n, A, "A", B, "B", e)))
        return rc;
    int ok = (B->rank == 2 && A->rank >= 1) || (A->rank == B->rank && A->rank >= 2);
    if (ok && B->rank > 2)
        for (int i = 0; i < A->rank - 2; i++) if (A->dims[i] != B->dims[i]) ok = 0;
    if (!ok) return kl__fail_node(e, n, KL_EUNSUPPORTED, "MatMul gradient needs a 2-D B or equal batch dims (A rank %d, B rank %d)", A->rank, B->rank);
    int r;
    int64_t d[KL_MAX_DIMS];
    if (kl_matmul_shape(A->rank, A->dims, B->rank, B->dims, &r, d, NULL) || r != dy->rank ||
        memcmp(d, dy->dims, sizeof(int64_t) * (size_t)r))
        return kl__fail_node(e, n, KL_ESHAPE, "gradient shape does not match the MatMul output");
    int which = (int)kl_gnode_attr_int(n, "input", 0);
    const kl_tensor *t = which ? B : A;
    kl__set_shape(&out[0], dy->dtype, t->rank, t->dims);
    if (dy->dtype == KL_F32) {
        int64_t K = A->dims[A->rank - 1], N = B->dims[B->rank - 1], rows = K ? kl_tensor_numel(A) / K : 0;
        if (B->rank > 2) rows = A->rank >= 2 ? A->dims[A->rank - 2] : 1;
        *ws = which ? kl__gemm_fast_ws(1, K, N, rows) : kl__gemm_fast_ws(0, rows, K, N);
    }
    return KL_OK;
}
static int mm_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *dy = in[0], *A = in[1], *B = in[2];
    int which = (int)kl_gnode_attr_int(n, "input", 0);
    kl_dtype dt = dy->dtype;
    size_t es = kl_dtype_size(dt);
    if (B->rank == 2) {
        int64_t K = B->dims[0], N = B->dims[1], rows = K ? kl_tensor_numel(A) / K : 0;
        if (dt == KL_F32) {
            if (!which) kl__gemm_fast_f32(0, 1, rows, K, N, 1, dy->data, N, B->data, N, out[0]->data, K, x->ws, x->ws_bytes, x->pool);
            else kl__gemm_fast_f32(1, 0, K, N, rows, 1, A->data, K, dy->data, N, out[0]->data, N, x->ws, x->ws_bytes, x->pool);
            return KL_OK;
        }
        if (!which) kl__gemm_dt(dt, 0, 1, rows, K, N, 1, dy->data, N, B->data, N, 0, out[0]->data, K, x->pool);
        else kl__gemm_dt(dt, 1, 0, K, N, rows, 1, A->data, K, dy->data, N, 0, out[0]->data, N, x->pool);
        return KL_OK;
    }
    int r = A->rank;
    int64_t M = A->dims[r - 2], K = A->dims[r - 1], N = B->dims[r - 1], batch = 1;
    for (int i = 0; i < r - 2; i++) batch *= A->dims[i];
    for (int64_t b = 0; b < batch; b++) {
        const char *dyb = (const char *)dy->data + (size_t)(b * M * N) * es, *Ab = (const char *)A->data + (size_t)(b * M * K) * es,
                   *Bb = (const char *)B->data + (size_t)(b * K * N) * es;
        if (!which) kl__gemm_dt(dt, 0, 1, M, K, N, 1, dyb, N, Bb, N, 0, (char *)out[0]->data + (size_t)(b * M * K) * es, K, x->pool);
        else kl__gemm_dt(dt, 1, 0, K, N, M, 1, Ab, K, dyb, N, 0, (char *)out[0]->data + (size_t)(b * K * N) * es, N, x->pool);
    }
    return KL_OK;
}

/* ================================================================== *
 * GatherGrad(dy, data, indices): d(data) of Gather axis 0 (embedding)
 * ================================================================== */

static int gather_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = grad_like_infer(n, in, n_in, out, n_out, ws, e))) return rc;
    if (in[1]->rank < 1) return kl__fail_node(e, n, KL_ESHAPE, "data must have rank >= 1");
    int64_t D = kl_tensor_numel(in[1]) / (in[1]->dims[0] ? in[1]->dims[0] : 1);
    if (kl_tensor_numel(in[0]) != kl_tensor_numel(in[2]) * D) return kl__fail_node(e, n, KL_ESHAPE, "gradient size does not match indices x row");
    *ws = (size_t)kl_tensor_numel(in[2]) * sizeof(int64_t);
    return KL_OK;
}
static int gather_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t V = in[1]->dims[0], ni = kl_tensor_numel(in[2]), D = V ? kl_tensor_numel(in[1]) / V : 0;
    int64_t *idx = x->ws;
    for (int64_t i = 0; i < ni; i++) {
        int64_t v = kl__int_at(in[2], i);
        if (v < 0) v += V;
        if (v < 0 || v >= V) return kl__fail_node(e, n, KL_ERANGE, "index %lld at position %lld outside [0, %lld)", (long long)kl__int_at(in[2], i), (long long)i, (long long)V);
        idx[i] = v;
    }
    if (in[0]->dtype == KL_F32) embedding_grad_f32(ni, D, V, idx, in[0]->data, out[0]->data, x->pool);
    else embedding_grad_f64(ni, D, V, idx, in[0]->data, out[0]->data, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * Losses (ai.keel.train forward, ai.keel.grad backward)
 * CrossEntropyLoss(logits[B,K], labels int[B], weight[K]?) attr label_smoothing
 * BCEWithLogitsLoss(z, t), MSELoss(z, t): scalar means.
 * *Grad(dloss, <forward inputs>) -> d(input 0) (MSELossGrad also d(t)).
 * ================================================================== */

static int ce_check(kl_gnode *n, kl_tensor *const *in, int n_in, int off, kl_err *e) {
    int rc;
    const kl_tensor *z = in[off], *y = in[off + 1], *w = n_in > off + 2 ? in[off + 2] : NULL;
    if ((rc = kl__need_float(n, z, "logits", e))) return rc;
    if (z->rank != 2) return kl__fail_node(e, n, KL_ESHAPE, "logits must be 2-D (batch, classes), got rank %d", z->rank);
    if (y->dtype != KL_I64 && y->dtype != KL_I32) return kl__fail_node(e, n, KL_ETYPE, "labels are %s (int64 or int32 needed)", kl_dtype_name(y->dtype));
    if (kl_tensor_numel(y) != z->dims[0]) return kl__fail_node(e, n, KL_ESHAPE, "%lld labels for a batch of %lld", (long long)kl_tensor_numel(y), (long long)z->dims[0]);
    if (w) {
        if ((rc = kl__same_dtype(n, z, "logits", w, "weight", e))) return rc;
        if (kl_tensor_numel(w) != z->dims[1]) return kl__fail_node(e, n, KL_ESHAPE, "weight has %lld entries for %lld classes", (long long)kl_tensor_numel(w), (long long)z->dims[1]);
    }
    return KL_OK;
}
static int ce_labels(kl_gnode *n, const kl_tensor *y, int64_t K, int64_t *lab, kl_err *e) {
    int64_t B = kl_tensor_numel(y);
    for (int64_t r = 0; r < B; r++) {
        lab[r] = kl__int_at(y, r);
        if (lab[r] < 0 || lab[r] >= K) return kl__fail_node(e, n, KL_ERANGE, "label %lld at row %lld outside [0, %lld)", (long long)lab[r], (long long)r, (long long)K);
    }
    return KL_OK;
}
static int ce_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = ce_check(n, in, n_in, 0, e))) return rc;
    kl__set_shape(&out[0], in[0]->dtype, 0, NULL);
    *ws = (size_t)in[0]->dims[0] * sizeof(int64_t);
    return KL_OK;
}
static int ce_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t B = in[0]->dims[0], K = in[0]->dims[1];
    int64_t *lab = x->ws;
    int rc = ce_labels(n, in[1], K, lab, e);
    if (rc) return rc;
    double eps = kl_gnode_attr_float(n, "label_smoothing", 0.f);
    const kl_tensor *w = n_in > 2 ? in[2] : NULL;
    if (in[0]->dtype == KL_F32) ((float *)out[0]->data)[0] = (float)ce_f32(B, K, in[0]->data, lab, eps, w ? w->data : NULL, 1, NULL);
    else ((double *)out[0]->data)[0] = ce_f64(B, K, in[0]->data, lab, eps, w ? w->data : NULL, 1, NULL);
    return KL_OK;
}
static int ce_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = ce_check(n, in, n_in, 1, e)) || (rc = kl__same_dtype(n, in[0], "the loss gradient", in[1], "logits", e))) return rc;
    if (kl_tensor_numel(in[0]) != 1) return kl__fail_node(e, n, KL_ESHAPE, "the loss gradient must have one element");
    kl__set_shape(&out[0], in[1]->dtype, 2, in[1]->dims);
    *ws = (size_t)in[1]->dims[0] * sizeof(int64_t);
    return KL_OK;
}
static int ce_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t B = in[1]->dims[0], K = in[1]->dims[1];
    int64_t *lab = x->ws;
    int rc = ce_labels(n, in[2], K, lab, e);
    if (rc) return rc;
    double eps = kl_gnode_attr_float(n, "label_smoothing", 0.f), s = kl__dbl_at(in[0], 0);
    const kl_tensor *w = n_in > 3 ? in[3] : NULL;
    if (in[1]->dtype == KL_F32) ce_f32(B, K, in[1]->data, lab, eps, w ? w->data : NULL, s, out[0]->data);
    else ce_f64(B, K, in[1]->data, lab, eps, w ? w->data : NULL, s, out[0]->data);
    return KL_OK;
}

static int zt_check(kl_gnode *n, kl_tensor *const *in, int off, kl_err *e) {
    int rc;
    if ((rc = kl__need_float(n, in[off], "input", e)) || (rc = kl__same_dtype(n, in[off], "input", in[off + 1], "target", e)) ||
        (rc = kl__same_shape(n, in[off], "input", in[off + 1], "target", e)))
        return rc;
    return KL_OK;
}
static int zt_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = zt_check(n, in, 0, e))) return rc;
    kl__set_shape(&out[0], in[0]->dtype, 0, NULL);
    return KL_OK;
}
static int zt_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t m = kl_tensor_numel(in[0]);
    int bce = !strcmp(n->op_type, "BCEWithLogitsLoss");
    if (in[0]->dtype == KL_F32)
        ((float *)out[0]->data)[0] = (float)(bce ? bce_f32(m, in[0]->data, in[1]->data, 1, NULL, NULL) : mse_f32(m, in[0]->data, in[1]->data, 1, NULL, NULL));
    else
        ((double *)out[0]->data)[0] = bce ? bce_f64(m, in[0]->data, in[1]->data, 1, NULL, NULL) : mse_f64(m, in[0]->data, in[1]->data, 1, NULL, NULL);
    return KL_OK;
}
static int zt_grad_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = zt_check(n, in, 1, e)) || (rc = kl__same_dtype(n, in[0], "the loss gradient", in[1], "input", e))) return rc;
    if (kl_tensor_numel(in[0]) != 1) return kl__fail_node(e, n, KL_ESHAPE, "the loss gradient must have one element");
    for (int k = 0; k < n_out; k++) kl__set_shape(&out[k], in[1]->dtype, in[1]->rank, in[1]->dims);
    return KL_OK;
}
static int zt_grad_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t m = kl_tensor_numel(in[1]);
    double s = kl__dbl_at(in[0], 0);
    void *dz = out[0] ? out[0]->data : NULL, *dt = n_out > 1 && out[1] ? out[1]->data : NULL;
    if (!strcmp(n->op_type, "BCEWithLogitsLossGrad")) {
        if (in[1]->dtype == KL_F32) bce_f32(m, in[1]->data, in[2]->data, s, dz, dt);
        else bce_f64(m, in[1]->data, in[2]->data, s, dz, dt);
        return KL_OK;
    }
    if (in[1]->dtype == KL_F32) mse_f32(m, in[1]->data, in[2]->data, s, dz, dt);
    else mse_f64(m, in[1]->data, in[2]->data, s, dz, dt);
    return KL_OK;
}

/* ================================================================== *
 * ai.keel.train::Dropout(x, seed int64 scalar) attr ratio -> (y, mask)
 * mask from a counter-based generator keyed by the seed: element i is kept
 * when hash(seed, i) >= ratio (24-bit uniform), so any thread split and any
 * resume give the same mask. y = x * mask / (1 - ratio).
 * ai.keel.grad::DropoutGrad(dy, mask) attr ratio -> dy * mask / (1 - ratio).
 * ================================================================== */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint8_t kl__dropout_keep(uint64_t seed, uint64_t i, float ratio) {
    uint64_t h = mix64(seed * 0x9E3779B97F4A7C15ull + mix64(i + 0x632BE59BD9B4E019ull));
    return (float)(h >> 40) * 0x1.0p-24f >= ratio;
}

typedef struct { const kl_tensor *x, *dy; const uint8_t *mask_in; kl_tensor *y; uint8_t *mask; uint64_t seed; float ratio; double scale; } drop_job;

static void drop_range(void *ctx, size_t b, size_t en, int chunk) {
    const drop_job *j = ctx;
    if (j->mask) /* forward */
        for (size_t i = b; i < en; i++) j->mask[i] = kl__dropout_keep(j->seed, i, j->ratio);
    const uint8_t *m = j->mask ? j->mask : j->mask_in;
    const kl_tensor *src = j->mask ? j->x : j->dy;
    if (src->dtype == KL_F32) {
        const float *x = src->data;
        float *y = j->y->data, sc = (float)j->scale;
        for (size_t i = b; i < en; i++) y[i] = m[i] ? x[i] * sc : 0.f;
    } else if (src->dtype == KL_F64) {
        const double *x = src->data;
        double *y = j->y->data;
        for (size_t i = b; i < en; i++) y[i] = m[i] ? x[i] * j->scale : 0.0;
    } else {
        for (size_t i = b; i < en; i++) kl__set_dbl(j->y, (int64_t)i, m[i] ? kl__dbl_at(src, (int64_t)i) * j->scale : 0.0);
    }
}

static int drop_check(kl_gnode *n, kl_err *e) {
    float r = kl_gnode_attr_float(n, "ratio", 0.5f);
    if (!(r >= 0.f && r < 1.f)) return kl__fail_node(e, n, KL_EINVAL, "ratio %g outside [0, 1)", (double)r);
    return KL_OK;
}
static int tdrop_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = drop_check(n, e))) return rc;
    if (in[0]->dtype != KL_F32 && in[0]->dtype != KL_F64 && in[0]->dtype != KL_F16 && in[0]->dtype != KL_BF16)
        return kl__fail_node(e, n, KL_ETYPE, "input is %s (a float type needed)", kl_dtype_name(in[0]->dtype));
    if (n_in > 1 && in[1] && (kl_tensor_numel(in[1]) != 1 || (in[1]->dtype != KL_I64 && in[1]->dtype != KL_U64 && in[1]->dtype != KL_I32)))
        return kl__fail_node(e, n, KL_ETYPE, "seed must be one int64");
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    if (n_out > 1) kl__set_shape(&out[1], KL_BOOL, in[0]->rank, in[0]->dims);
    else *ws = (size_t)kl_tensor_numel(in[0]);
    return KL_OK;
}
static int tdrop_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    float ratio = kl_gnode_attr_float(n, "ratio", 0.5f);
    int64_t m = kl_tensor_numel(in[0]);
    drop_job j = {in[0], NULL, NULL, out[0], n_out > 1 && out[1] ? out[1]->data : x->ws,
                  n_in > 1 && in[1] ? (uint64_t)kl__int_at(in[1], 0) : 0, ratio, 1.0 / (1.0 - ratio)};
    if (m < 32768) drop_range(&j, 0, (size_t)m, 0);
    else kl_pool_parallel_for(x->pool, (size_t)m, 16384, drop_range, &j);
    return KL_OK;
}
static int dropg_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = drop_check(n, e)) || (rc = kl__same_shape(n, in[0], "the gradient", in[1], "the mask", e))) return rc;
    if (in[1]->dtype != KL_BOOL) return kl__fail_node(e, n, KL_ETYPE, "mask is %s (bool needed)", kl_dtype_name(in[1]->dtype));
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int dropg_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    float ratio = kl_gnode_attr_float(n, "ratio", 0.5f);
    int64_t m = kl_tensor_numel(in[0]);
    drop_job j = {NULL, in[0], in[1]->data, out[0], NULL, 0, ratio, 1.0 / (1.0 - ratio)};
    if (m < 32768) drop_range(&j, 0, (size_t)m, 0);
    else kl_pool_parallel_for(x->pool, (size_t)m, 16384, drop_range, &j);
    return KL_OK;
}

/* ================================================================== *
 * Registries
 * ================================================================== */

static const char *const no_attrs[] = {NULL};
static const char *const a_scale[] = {"scale", NULL};
static const char *const a_axis[] = {"axis", "coerce", NULL};
static const char *const a_input[] = {"input", NULL};
static const char *const a_mmt[] = {"transA", "transB", "alpha", NULL};
static const char *const a_concat[] = {"axis", "index", NULL};
static const char *const a_expand[] = {"axes", "mean", NULL};
static const char *const a_ratio[] = {"ratio", NULL};
static const char *const a_ce[] = {"label_smoothing", NULL};


const kl_op kl__ops_grad[] = {
    KL__GOP("OnesLike", 1, 1, 1, 1, no_attrs, like_infer, ones_run),
    KL__GOP("ZerosLike", 1, 1, 1, 1, no_attrs, like_infer, ones_run),
    KL__GOP("ReshapeLike", 2, 2, 1, 1, no_attrs, reshape_like_infer, reshape_like_run),
    KL__GOP("SumToShape", 2, 2, 1, 1, a_scale, sum_to_infer, sum_to_run),
    KL__GOP("ExpandLike", 2, 2, 1, 1, a_expand, expand_like_infer, expand_like_run),
    KL__GOP("ConcatGrad", 2, -1, 1, 1, a_concat, concat_grad_infer, concat_grad_run),
    KL__GOP("ReluGrad", 2, 2, 1, 1, no_attrs, pw_infer, pw_run),
    KL__GOP("SigmoidGrad", 2, 2, 1, 1, no_attrs, pw_infer, pw_run),
    KL__GOP("TanhGrad", 2, 2, 1, 1, no_attrs, pw_infer, pw_run),
    KL__GOP("GeluGrad", 2, 2, 1, 1, no_attrs, pw_infer, pw_run),
    KL__GOP("ErfGrad", 2, 2, 1, 1, no_attrs, pw_infer, pw_run),
    KL__GOP("SoftmaxGrad", 2, 2, 1, 1, a_axis, pw_infer, softmax_grad_run),
    KL__GOP("LogSoftmaxGrad", 2, 2, 1, 1, a_axis, pw_infer, softmax_grad_run),
    KL__GOP("MatMulGrad", 3, 3, 1, 1, a_input, mm_grad_infer, mm_grad_run),
    KL__GOP("MatMulT", 2, 2, 1, 1, a_mmt, mmt_infer, mmt_run),
    KL__GOP("GatherGrad", 3, 3, 1, 1, no_attrs, gather_grad_infer, gather_grad_run),
    KL__GOP("CrossEntropyLossGrad", 3, 4, 1, 1, a_ce, ce_grad_infer, ce_grad_run),
    KL__GOP("BCEWithLogitsLossGrad", 3, 3, 1, 2, no_attrs, zt_grad_infer, zt_grad_run),
    KL__GOP("MSELossGrad", 3, 3, 1, 2, no_attrs, zt_grad_infer, zt_grad_run),
    KL__GOP("DropoutGrad", 2, 2, 1, 1, a_ratio, dropg_infer, dropg_run),
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};

#define TOP(name, mi, ma, mo, xo, attrs, inf, run, fl) {name, KL__TRAIN_DOMAIN, 1, 1000, mi, ma, mo, xo, attrs, NULL, inf, run, fl}

const kl_op kl__ops_train[] = {
    TOP("CrossEntropyLoss", 2, 3, 1, 1, a_ce, ce_infer, ce_run, 0),
    TOP("BCEWithLogitsLoss", 2, 2, 1, 1, no_attrs, zt_infer, zt_run, 0),
    TOP("MSELoss", 2, 2, 1, 1, no_attrs, zt_infer, zt_run, 0),
    TOP("Dropout", 1, 2, 1, 2, a_ratio, tdrop_infer, tdrop_run, KL_OP_NOFOLD),
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
