/* Private declarations shared by the autodiff files of the graph module:
 * autodiff.c (rules), ops_grad.c (ai.keel.grad / ai.keel.train ops),
 * ops_f64.c (float64 and training-mode paths of the standard NN ops, called
 * from a dtype branch in ops_nn.c). */
#ifndef KEEL_GRAPH_GRAD_INT_H
#define KEEL_GRAPH_GRAD_INT_H

#include "graph/graph_int.h"

#define KL__GRAD_DOMAIN "ai.keel.grad"
/* A registry entry of a gradient op (never constant-folded). */
#define KL__GOP(name, mi, ma, mo, xo, attrs, inf, run) {name, KL__GRAD_DOMAIN, 1, 1000, mi, ma, mo, xo, attrs, NULL, inf, run, KL_OP_NOFOLD}
#define KL__TRAIN_DOMAIN "ai.keel.train"

/* KL_ETYPE naming the node unless t is float32/float64. */
int kl__need_float(kl_gnode *n, const kl_tensor *t, const char *what, kl_err *e);
int kl__same_dtype(kl_gnode *n, const kl_tensor *a, const char *an, const kl_tensor *b, const char *bn, kl_err *e);
int kl__same_shape(kl_gnode *n, const kl_tensor *a, const char *an, const kl_tensor *b, const char *bn, kl_err *e);
/* Sets OpenBLAS to one thread once (before any direct cblas call). */
void kl__blas_single(void);
/* C = alpha op(A) op(B) + beta C for dt f32 (keel's GEMM, deterministic) or f64 (cblas_dgemm). */
void kl__gemm_dt(kl_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                 const void *B, int64_t ldb, double beta, void *C, int64_t ldc, kl_pool *pool);

/* Float32 GEMM C = alpha op(A) op(B) through keel's packed micro-kernel
 * (op(B) packed per call into ws, op(A) transposed there when ta);
 * kl__gemm_fast_ws: bytes ws needs (0: the OpenBLAS path is used). */
size_t kl__gemm_fast_ws(int ta, int64_t M, int64_t N, int64_t K);
void kl__gemm_fast_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float *C, int64_t ldc, void *ws, size_t ws_bytes, kl_pool *pool);

/* Forward Gemm with a non-constant f32 B (training): workspace bytes, and
 * the run (returns 1 when it handled the node, 0 to take the usual path). */
size_t kl__gemm_train_ws(kl_gnode *n, kl_tensor *const *in, int n_in, int64_t M, int64_t N, int64_t K);
int kl__gemm_train_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *y, int64_t M, int64_t N, int64_t K, kl_act act, kl_exec *x);

/* Forward MatMul with a non-constant 2-D f32 B (training): ws bytes / run. */
size_t kl__matmul_train_ws(kl_gnode *n, kl_tensor *const *in);
int kl__matmul_train_run(kl_gnode *n, kl_tensor *const *in, kl_tensor *y, kl_exec *x);

/* ai.keel.train::Dropout's mask bit of element i for this seed (1 = kept). */
uint8_t kl__dropout_keep(uint64_t seed, uint64_t i, float ratio);

/* Float64 / training-mode paths of standard ops (grad_nn.c), called from a
 * dtype branch in ops_nn.c. */
int kl__conv64_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e);
int kl__conv64_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e);
int kl__pool64_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e);
int kl__pool64_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e);
int kl__bn_ext_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e);
int kl__bn_ext_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e);
int kl__ln64_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e);
int kl__ln64_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e);

#endif
