/* keel tensors and kernels: the kl_tensor type (dtypes, views, .npy I/O) and
 * the compute kernels the graph runtime and training build on (GEMM, conv,
 * pooling, normalisation, elementwise with NumPy broadcasting, reductions,
 * softmax, data movement, cast, resize).
 *
 * Conventions for kernels:
 * - Kernels work on raw pointers to CONTIGUOUS row-major buffers plus dims
 *   (int rank, const int64_t *dims). Shapes are validated by the caller
 *   (the graph's shape inference) unless the function returns int, in which
 *   case bad arguments give KL_E* with a message.
 * - Every kernel takes a kl_pool (NULL = default pool) and is deterministic:
 *   bit-identical results at any thread count (work is partitioned by blocks
 *   of the output whose size never depends on the thread count).
 * - Output buffers never alias inputs unless a comment says so.
 * - Dtype-generic data-movement kernels take the element size in bytes.
 */
#ifndef KEEL_TENSOR_H
#define KEEL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Dtypes
 * ================================================================== */

typedef enum {
    KL_F32, KL_F16, KL_BF16, KL_F64, KL_I8, KL_I16, KL_I32, KL_I64,
    KL_U8, KL_U16, KL_U32, KL_U64, KL_BOOL, KL_DTYPE_COUNT
} kl_dtype;

#define KL_MAX_DIMS 8

/* Bytes per element (BOOL: 1). 0 for an invalid dtype. */
size_t kl_dtype_size(kl_dtype dt);
/* Canonical name: "float32","float16","bfloat16","float64","int8",...,"bool". */
const char *kl_dtype_name(kl_dtype dt);
/* Accepts canonical names and short forms ("f32","f16","bf16","f64","i64","u8",
 * "float","double","half","long","int"...). KL_EINVAL otherwise. */
int kl_dtype_parse(const char *name, kl_dtype *out);
int kl_dtype_is_float(kl_dtype dt);   /* F32 F16 BF16 F64 */
int kl_dtype_is_int(kl_dtype dt);     /* I* and U* (not BOOL) */
int kl_dtype_is_signed(kl_dtype dt);  /* floats and I* */

/* ---- f16 / bf16 conversion (F16C when the build has it) ---- */
float kl_f16_to_f32(uint16_t h);
uint16_t kl_f32_to_f16(float f);      /* round to nearest even; overflow -> inf; NaN kept */
float kl_bf16_to_f32(uint16_t h);
uint16_t kl_f32_to_bf16(float f);     /* round to nearest even; NaN kept quiet */
void kl_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void kl_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void kl_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void kl_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

/* ==================================================================
 * Tensors
 * ================================================================== */

typedef struct kl_tensor {            /* transparent: kernels read fields directly */
    kl_dtype dtype;
    int rank;                         /* 0..KL_MAX_DIMS; rank 0 = scalar (1 element) */
    int64_t dims[KL_MAX_DIMS];
    int64_t strides[KL_MAX_DIMS];     /* in elements; contiguous row-major unless a view
                                         (may be 0 for broadcast, negative for reversed slices) */
    void *data;                       /* first element (for views: into the base buffer) */
    size_t nbytes;                    /* bytes covered by a contiguous tensor (numel*size);
                                         0 for a non-contiguous view */
    int owns;                         /* data freed by kl_tensor_free */
    kl_mem_tag tag;
} kl_tensor;

/* New contiguous tensor, zero-filled, data from kl_mem_alloc(tag). dims may be
 * NULL when rank is 0. Negative dims or overflow -> KL_ESHAPE / KL_ERANGE. */
int kl_tensor_new(kl_dtype dt, int rank, const int64_t *dims, kl_mem_tag tag,
                  kl_tensor **out, kl_err *e);
/* As kl_tensor_new without zeroing. */
int kl_tensor_new_uninit(kl_dtype dt, int rank, const int64_t *dims, kl_mem_tag tag,
                         kl_tensor **out, kl_err *e);
/* Wraps borrowed contiguous data (not freed by kl_tensor_free). */
int kl_tensor_wrap(kl_dtype dt, int rank, const int64_t *dims, void *data,
                   kl_tensor **out, kl_err *e);
/* Fills a caller-owned header (e.g. on the stack) for borrowed contiguous
 * data: no allocation, owns 0, tag KL_TAG_OTHER. dims must be valid. */
void kl_tensor_view_init(kl_tensor *t, kl_dtype dt, int rank, const int64_t *dims, void *data);
/* Frees the struct, and the data when owns. NULL is a no-op. */
void kl_tensor_free(kl_tensor *t);
int64_t kl_tensor_numel(const kl_tensor *t);
int kl_tensor_is_contiguous(const kl_tensor *t);
/* Fills strides with the contiguous row-major strides of dims. */
void kl_tensor_contiguous_strides(int rank, const int64_t *dims, int64_t *strides);
/* Product of dims (1 for rank 0). -1 on overflow or a negative dim. */
int64_t kl_shape_numel(int rank, const int64_t *dims);
/* "[2,3,4]" into buf (always terminated). Returns buf. */
const char *kl_shape_str(int rank, const int64_t *dims, char *buf, size_t n);

/* ---- Views (share data with t, owns = 0; valid while t's data lives) ---- */
/* Slice along one axis: start/end/step as Python (negatives count from the end,
 * clamped; step != 0, negative steps reverse). */
int kl_tensor_slice(const kl_tensor *t, int axis, int64_t start, int64_t end, int64_t step,
                    kl_tensor **out, kl_err *e);
/* Permutes axes: out->dims[i] = t->dims[perm[i]]. perm NULL reverses the axes. */
int kl_tensor_transpose(const kl_tensor *t, const int *perm, kl_tensor **out, kl_err *e);
/* Reshape: one dim may be -1 (inferred). A view when t's layout allows it,
 * else a new contiguous copy (owns = 1, tag of t). numel mismatch -> KL_ESHAPE. */
int kl_tensor_reshape(const kl_tensor *t, int rank, const int64_t *dims,
                      kl_tensor **out, kl_err *e);
/* A new contiguous owning copy of any (view) tensor. */
int kl_tensor_contiguous(const kl_tensor *t, kl_mem_tag tag, kl_tensor **out, kl_err *e);
/* Element read for tests / small tensors: value at a multi-index, as double. */
double kl_tensor_get_f64(const kl_tensor *t, const int64_t *idx);
/* Element i (row-major) of a contiguous tensor, as double. */
double kl_tensor_flat_f64(const kl_tensor *t, int64_t i);
/* Strided copy of any tensors of equal dtype and shape (views included). */
int kl_tensor_copy(kl_tensor *dst, const kl_tensor *src, kl_err *e);

/* ---- NumPy .npy ---- */
/* Loads .npy v1/v2/v3 (little/big endian, all dtypes above, fortran_order False).
 * Malformed headers -> KL_EPARSE naming the file and what is wrong. */
int kl_npy_load(const char *path, kl_tensor **out, kl_err *e);
int kl_npy_load_mem(const void *bytes, size_t len, const char *name, kl_tensor **out, kl_err *e);
/* Writes v1 (v2 if the header needs it), atomically. Views are written contiguously. */
int kl_npy_save(const char *path, const kl_tensor *t, kl_err *e);

/* ==================================================================
 * Fused activation (used by GEMM/conv epilogues and as a standalone pass)
 * ================================================================== */

typedef enum {
    KL_ACT_NONE, KL_ACT_RELU,
    KL_ACT_CLIP,        /* min(max(x, a), b) */
    KL_ACT_LEAKY_RELU,  /* x < 0 ? a*x : x */
    KL_ACT_SIGMOID, KL_ACT_TANH,
    KL_ACT_HARDSWISH,   /* x * clamp(x/6 + 0.5, 0, 1) */
    KL_ACT_GELU         /* erf form */
} kl_act_kind;
typedef struct { kl_act_kind kind; float a, b; } kl_act;
/* In place on n floats. */
void kl_act_apply_f32(kl_act act, float *y, int64_t n, kl_pool *pool);

/* ==================================================================
 * GEMM
 * ================================================================== */

/* C(MxN) = alpha * op(A)(MxK) * op(B)(KxN) + beta * C, row-major, op = transpose
 * when trans != 0. lda/ldb/ldc are row strides in elements (as cblas row-major).
 * beta == 0: C is not read (NaNs in C are ignored). Parallel over fixed-size
 * blocks of C (OpenBLAS itself is kept single-threaded). */
void kl_gemm_f32(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                 float *C, int64_t ldc, kl_pool *pool);
/* As kl_gemm_f32 (beta 0) then per-column bias (length N, may be NULL) and act. */
void kl_gemm_bias_act_f32(int transA, int transB, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb,
                          const float *bias, kl_act act, float *C, int64_t ldc, kl_pool *pool);

/* keel's packed GEMM for a constant right operand (weights packed once at
 * model load into the AVX-512 micro-kernel's column panels).
 * kl_gemm_packed_b_floats: floats of the packed B, 0 when the CPU lacks
 * AVX-512F (callers keep kl_gemm_*). kl_gemm_pack_b: op(B) is K x N (B is
 * N x K when transB). kl_gemm_packed_f32: C = A (M x K, row stride lda) *
 * packed B + bias (per column, may be NULL), then act; deterministic at any
 * thread count (fixed tiles of C). res: M x N residual (row stride ldc) added
 * before act, or NULL. */
size_t kl_gemm_packed_b_floats(int64_t K, int64_t N);
void kl_gemm_pack_b(int transB, int64_t K, int64_t N, const float *B, int64_t ldb, float *dst);
void kl_gemm_packed_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bp,
                        const float *bias, const float *res, kl_act act, float *C, int64_t ldc, kl_pool *pool);

/* NumPy matmul with broadcasting of batch dims; 1-D operands are promoted
 * (prepend/append 1) and the added dim removed from the result, as numpy. */
int kl_matmul_shape(int ra, const int64_t *da, int rb, const int64_t *db,
                    int *ry, int64_t *dy, kl_err *e);
int kl_matmul_f32(int ra, const int64_t *da, const float *a, int rb, const int64_t *db,
                  const float *b, float *y, kl_pool *pool, kl_err *e);

/* ==================================================================
 * Convolution (N-d: 1, 2 or 3 spatial dims), layout N C spatial...
 * ================================================================== */

typedef struct kl_conv_params {
    int nsp;                    /* spatial dims: 1..3 */
    int64_t N, C, M;            /* batch, input channels, output channels */
    int64_t group;              /* C % group == 0, M % group == 0 */
    int64_t in[3];              /* input spatial sizes */
    int64_t k[3];               /* kernel spatial sizes */
    int64_t stride[3];          /* default 1 */
    int64_t dilation[3];        /* default 1 */
    int64_t pad_begin[3], pad_end[3];
    int64_t out[3];             /* output spatial sizes: set by kl_conv_prepare */
    kl_act act;                 /* fused activation */
    const float *packed_w;      /* weights from kl_conv_pack_weights, or NULL (packed per call) */
    const float *residual;      /* (N, M, out...) added before act, or NULL */
} kl_conv_params;
/* w: (M, C/group, k...), bias: (M) or NULL, x: (N, C, in...), y: (N, M, out...). */

/* Validates p, fills p->out (floor((in + pb + pe - dil*(k-1) - 1)/stride) + 1).
 * Zero strides/dilations are taken as 1. */
int kl_conv_prepare(kl_conv_params *p, kl_err *e);
/* Workspace bytes kl_conv_f32 needs (0 for paths that need none). Independent of
 * the thread count. */
size_t kl_conv_workspace_bytes(const kl_conv_params *p);
/* ws: kl_conv_workspace_bytes(p) bytes (64-byte aligned), or NULL to let the
 * kernel allocate it (KL_TAG_WORKSPACE). Paths: 1x1 stride 1 no pad -> GEMM;
 * depthwise 2-D (group == C == M) -> direct AVX2 (kernels up to 64 taps; larger
 * ones a direct scalar loop); >= 4 groups -> one work item per group;
 * else im2col + GEMM. */
int kl_conv_f32(const kl_conv_params *p, const float *x, const float *w, const float *bias,
                float *y, void *ws, kl_pool *pool, kl_err *e);

/* Floats of the pre-packed weight layout of keel's own GEMM micro-kernel for
 * this conv (only the weight shape, groups and kernel are read), 0 when the
 * conv does not take that path (depthwise, or a CPU without AVX-512F, where
 * im2col + OpenBLAS runs). */
size_t kl_conv_packed_floats(const kl_conv_params *p);
/* Packs w (M, C/group, k...) into dst (kl_conv_packed_floats(p) floats), once
 * at model load; pass dst as p->packed_w to kl_conv_f32. */
void kl_conv_pack_weights(const kl_conv_params *p, const float *w, float *dst);

/* ONNX auto_pad: total padding for SAME_UPPER (upper != 0: extra at the end)
 * or SAME_LOWER; out = ceil(in / stride). */
void kl_auto_pad(int64_t in, int64_t k, int64_t stride, int64_t dilation, int upper,
                 int64_t *pad_begin, int64_t *pad_end);

/* ==================================================================
 * NCHWc: channel-blocked layout for 2-D convolution networks (AVX-512F)
 * ==================================================================
 * A blocked tensor holds logical (N, C, H, W) as (N, ceil(C/16), H, W, 16):
 * channel c is lane c % 16 of block c / 16. Lanes of channels >= C are zero:
 * every producer writes zeros there, consumers may rely on it. The graph pass
 * (kl_graph_optimize) rewrites Conv/pool chains to keel::Nchwc* nodes on
 * such tensors, with keel::ReorderInput/ReorderOutput at the boundaries. */
#define KL_NCHWC 16
/* The CPU has AVX-512F and KEEL_NO_NCHWC is unset (or "0"). */
int kl_nchwc_ok(void);
/* Floats of the packed weights of a 2-D conv on the blocked path (only nsp,
 * C, M, group and k are read); 0 when the blocked path does not take this
 * conv (it then stays NCHW). */
size_t kl_nchwc_conv_packed_floats(const kl_conv_params *p);
/* Packs w (M, C/group, kh, kw) into dst, once at model load. */
void kl_nchwc_conv_pack_weights(const kl_conv_params *p, const float *w, float *dst);
/* Workspace bytes of kl_nchwc_conv_f32 (independent of the thread count). */
size_t kl_nchwc_conv_workspace_bytes(const kl_conv_params *p, int plain_input);
/* y (N, ceil(M/16), OH, OW, 16) = act(conv(x) + bias + residual), the
 * weights in p->packed_w (kl_nchwc_conv_pack_weights), p->residual NULL or
 * blocked like y, bias (M) or NULL. x blocked (N, ceil(C/16), H, W, 16), or
 * plain NCHW (N, C, H, W) when plain_input (the first conv of a network).
 * Deterministic at any thread count; padding lanes of y written as 0. */
int kl_nchwc_conv_f32(const kl_conv_params *p, int plain_input, const float *x, const float *bias, float *y,
                      void *ws, kl_pool *pool, kl_err *e);
/* 1 when image n of kl_nchwc_conv_f32's output has the same bits whatever
 * p->N (the dispatcher picks the same kernel for p and for p at N = 1): a
 * batch may then run image by image (the graph executor's depth-first
 * prefix). 0 otherwise (Winograd chosen at this batch only) or unsupported. */
int kl_nchwc_conv_batch_invariant(const kl_conv_params *p, int plain_input);
/* NCHW (N, C, S) <-> blocked (N, ceil(C/16), S, 16), S = H * W. */
void kl_nchwc_reorder_in(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool);
void kl_nchwc_reorder_out(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool);

/* ==================================================================
 * Pooling, layout N C spatial...
 * ================================================================== */

typedef struct kl_pooling_params {
    int nsp;                    /* 1..3 */
    int64_t N, C;
    int64_t in[3], k[3], stride[3], dilation[3];
    int64_t pad_begin[3], pad_end[3];
    int ceil_mode;
    int count_include_pad;      /* AveragePool */
    int64_t out[3];             /* set by kl_pooling_prepare */
} kl_pooling_params;
/* Validates, fills out[] (ONNX rules incl. ceil_mode: a last window starting in
 * the end padding is dropped). */
int kl_pooling_prepare(kl_pooling_params *p, kl_err *e);
/* indices (optional, NULL): flat index into x of each max (ONNX MaxPool output 2,
 * storage_order 0). Padding is -inf. */
void kl_maxpool_f32(const kl_pooling_params *p, const float *x, float *y, int64_t *indices,
                    kl_pool *pool);
/* Divisor: window elements inside the input, or (count_include_pad) inside the
 * padded input. */
void kl_avgpool_f32(const kl_pooling_params *p, const float *x, float *y, kl_pool *pool);
/* x: (N, C, S) with S = product of spatial dims; y: (N, C). */
void kl_global_avgpool_f32(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool);
void kl_global_maxpool_f32(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool);
/* Pooling on blocked tensors (nchwc.c): p as for kl_maxpool_f32 with nsp == 2
 * and C the logical channels; x (N, ceil(C/16), H, W, 16), y (N, ceil(C/16),
 * OH, OW, 16). All 16 lanes of a block are pooled, so zero padding lanes stay
 * zero (windows never lie wholly in the padding: kl_pooling_prepare). */
void kl_nchwc_maxpool_f32(const kl_pooling_params *p, const float *x, float *y, kl_pool *pool);
void kl_nchwc_avgpool_f32(const kl_pooling_params *p, const float *x, float *y, kl_pool *pool);
/* Conv then max pooling, fused (the conv's output never goes to memory):
 * q pools p's output (q->in == p->out, q prepared by kl_pooling_prepare),
 * y (N, ceil(M/16), q->out[0], q->out[1], 16); the same bits as
 * kl_nchwc_conv_f32 then kl_nchwc_maxpool_f32. _ok: p takes the direct
 * kernel (dense, not 1x1, not a Winograd 3x3), no residual; q 2-D, no
 * dilation, ceil_mode 0, stride <= kernel <= 8, pads < kernel. ws:
 * kl_nchwc_conv_maxpool_workspace_bytes (thread-count independent) or NULL. */
int kl_nchwc_conv_maxpool_ok(const kl_conv_params *p, const kl_pooling_params *q);
size_t kl_nchwc_conv_maxpool_workspace_bytes(const kl_conv_params *p, const kl_pooling_params *q);
int kl_nchwc_conv_maxpool_f32(const kl_conv_params *p, int plain_input, const kl_pooling_params *q, const float *x,
                              const float *bias, float *y, void *ws, kl_pool *pool, kl_err *e);
/* x (N, ceil(C/16), S, 16) -> y (N, ceil(C/16), 16): the mean over S. */
void kl_nchwc_global_avgpool_f32(int64_t N, int64_t C, int64_t S, const float *x, float *y, kl_pool *pool);

/* ==================================================================
 * Normalisation
 * ================================================================== */

/* Inference BatchNorm: x, y (N, C, S); scale, bias, mean, var (C).
 * y = (x - mean) / sqrt(var + eps) * scale + bias. y may alias x. */
void kl_batchnorm_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *scale,
                      const float *bias, const float *mean, const float *var, float eps,
                      float *y, kl_pool *pool);
/* LayerNorm over the last `cols` elements of each of `rows` rows (ONNX axis:
 * rows = prod(dims[:axis]), cols = prod(dims[axis:])). scale (cols), bias (cols
 * or NULL). mean/inv_std (rows each) are optional outputs (NULL). y may alias x. */
void kl_layernorm_f32(int64_t rows, int64_t cols, const float *x, const float *scale,
                      const float *bias, float eps, float *y, float *mean, float *inv_std,
                      kl_pool *pool);
/* InstanceNorm: x, y (N, C, S); scale, bias (C); statistics per (n, c). */
void kl_instancenorm_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *scale,
                         const float *bias, float eps, float *y, kl_pool *pool);

/* ==================================================================
 * Elementwise
 * ================================================================== */

typedef enum {
    KL_UN_IDENTITY, KL_UN_RELU,
    KL_UN_LEAKY_RELU,   /* a = alpha */
    KL_UN_SIGMOID, KL_UN_TANH, KL_UN_EXP, KL_UN_LOG, KL_UN_SQRT, KL_UN_NEG, KL_UN_ABS,
    KL_UN_RECIPROCAL, KL_UN_ERF,
    KL_UN_GELU,         /* 0.5 x (1 + erf(x / sqrt 2)) */
    KL_UN_GELU_TANH,    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    KL_UN_HARDSIGMOID,  /* max(0, min(1, a*x + b)); ONNX defaults a=0.2, b=0.5 */
    KL_UN_HARDSWISH,    /* x * max(0, min(1, x/6 + 0.5)) */
    KL_UN_CLIP,         /* min(max(x, a), b) */
    KL_UN_FLOOR, KL_UN_CEIL,
    KL_UN_ROUND,        /* half to even, as ONNX Round */
    KL_UN_SIGN, KL_UN_SIN, KL_UN_COS,
    KL_UN_SOFTPLUS,     /* log(1 + exp(x)) */
    KL_UN_ELU,          /* x < 0 ? a (exp(x) - 1) : x */
    KL_UN_SELU,         /* b * (x <= 0 ? a (exp(x) - 1) : x); a = alpha, b = gamma */
    KL_UN_SQUARE,
    KL_UN_SILU,         /* x * sigmoid(x) (Mul(x, Sigmoid(x)) fused: the same bits) */
    KL_UN_MISH,         /* x * tanh(softplus(x)) */
    KL_UN_CELU,         /* x > 0 ? x : a (exp(x / a) - 1) */
    KL_UN_SOFTSIGN,     /* x / (1 + |x|) */
    KL_UN_POW,          /* x^a for a constant exponent a (C's pow for zeros, infinities, x < 0) */
    KL_UN_COUNT
} kl_unary_op;
/* y[i] = op(x[i]) for n floats; a, b: op parameters (see above). y may alias x.
 * AVX-512, AVX2 or scalar code by the CPU (bit-identical results); accuracy
 * per op in docs/tensor.md. */
void kl_unary_f32(kl_unary_op op, const float *x, float *y, int64_t n, float a, float b,
                  kl_pool *pool);
/* The same in the caller's thread (for callers that split the work themselves). */
void kl_unary_row_f32(kl_unary_op op, const float *x, float *y, int64_t n, float a, float b);
/* PRelu: y[i] = x < 0 ? x * slope : x with x[i * sx], slope[i * ss] (strides
 * 0 or 1 run vectorised); serial. */
void kl_prelu_f32(const float *x, int64_t sx, const float *slope, int64_t ss, float *y, int64_t n);
const char *kl_unary_name(kl_unary_op op);

typedef enum {
    KL_BIN_ADD, KL_BIN_SUB, KL_BIN_MUL, KL_BIN_DIV, KL_BIN_POW, KL_BIN_MIN, KL_BIN_MAX,
    KL_BIN_MOD,         /* integer: Python-style (sign of divisor); float: fmod */
    KL_BIN_PRELU,       /* a < 0 ? a * b : a */
    KL_BIN_FMOD,        /* C-style remainder (sign of dividend): fmod / % */
    /* comparisons and logic: the output is BOOL (uint8 0/1) */
    KL_BIN_EQ, KL_BIN_NE, KL_BIN_LT, KL_BIN_LE, KL_BIN_GT, KL_BIN_GE,
    KL_BIN_AND, KL_BIN_OR, KL_BIN_XOR,
    KL_BIN_COUNT
} kl_binary_op;
int kl_binary_is_compare(kl_binary_op op);   /* output dtype is BOOL */

/* NumPy broadcast of two shapes; KL_ESHAPE naming both shapes when incompatible. */
int kl_broadcast_shape(int ra, const int64_t *da, int rb, const int64_t *db,
                       int *rout, int64_t *dout, kl_err *e);
/* y = a op b with NumPy broadcasting. Inputs have dtype dt; y has dtype dt, or
 * BOOL for comparisons/logic. Supported dt: F32, F64, F16, BF16 (computed in
 * f32) and all integer types for arithmetic and comparisons; BOOL for
 * AND/OR/XOR/EQ/NE.
 * Unsupported -> KL_EUNSUPPORTED. Integer division by zero gives 0 (no trap);
 * integer DIV truncates toward zero (as C / ONNX), integer POW by repeated
 * multiplication (negative exponents give 0 unless the base is +-1).
 * Fast paths: same shape, scalar operand, row/column broadcast. */
int kl_binary(kl_binary_op op, kl_dtype dt, int ra, const int64_t *da, const void *a,
              int rb, const int64_t *db, const void *b, void *y, kl_pool *pool, kl_err *e);
/* The f32 arithmetic case (not comparisons); shapes must broadcast. */
void kl_binary_f32(kl_binary_op op, int ra, const int64_t *da, const float *a,
                   int rb, const int64_t *db, const float *b, float *y, kl_pool *pool);
/* Logical NOT on n bools. */
void kl_not_bool(const uint8_t *x, uint8_t *y, int64_t n);

/* Where: y = cond ? x : z with 3-way broadcasting; cond is BOOL (uint8), x and z
 * elements of esize bytes. Output shape = broadcast of all three (rank ry, dy). */
int kl_where(size_t esize, int rc, const int64_t *dc, const uint8_t *cond,
             int rx, const int64_t *dx, const void *x, int rz, const int64_t *dz,
             const void *z, void *y, kl_pool *pool, kl_err *e);

/* Cast n elements between any dtypes, with numpy astype semantics (float->int
 * truncates toward zero; out-of-range/NaN float->int follows the x86 conversion
 * result as numpy does; any -> BOOL is x != 0; BOOL -> number is 0/1).
 * Same dtype = copy. */
int kl_cast(kl_dtype from, const void *x, kl_dtype to, void *y, int64_t n, kl_pool *pool,
            kl_err *e);

/* ==================================================================
 * Reductions, softmax
 * ================================================================== */

typedef enum {
    KL_RED_SUM, KL_RED_MEAN, KL_RED_MAX, KL_RED_MIN, KL_RED_PROD,
    KL_RED_SUM_SQUARE, KL_RED_L1, KL_RED_L2, KL_RED_LOG_SUM, KL_RED_LOG_SUM_EXP,
    KL_RED_COUNT
} kl_reduce_op;
/* Reduces x (rank, dims) over the axes whose bit is set in axes_mask (bit i =
 * axis i). y has the keepdims shape (reduced dims = 1), which is also the layout
 * without keepdims. axes_mask 0 copies x. Summation order is fixed (pairwise
 * within fixed-size blocks), independent of the thread count. Reducing an
 * empty axis gives the identity (0, 1, -inf/+inf for max/min). */
void kl_reduce_f32(kl_reduce_op op, int rank, const int64_t *dims, const float *x,
                   uint32_t axes_mask, float *y, kl_pool *pool);
/* Integer/double reductions for shape subgraphs: SUM, MEAN, MAX, MIN, PROD on
 * F64, I32, I64. Others -> KL_EUNSUPPORTED. */
int kl_reduce(kl_reduce_op op, kl_dtype dt, int rank, const int64_t *dims, const void *x,
              uint32_t axes_mask, void *y, kl_pool *pool, kl_err *e);
/* ArgMax/ArgMin along axis; y (int64) has dims with dims[axis] = 1. NaN wins
 * (as numpy). select_last: index of the last extreme on ties. */
void kl_argmax_f32(int rank, const int64_t *dims, const float *x, int axis, int select_last,
                   int64_t *y, kl_pool *pool);
void kl_argmin_f32(int rank, const int64_t *dims, const float *x, int axis, int select_last,
                   int64_t *y, kl_pool *pool);
/* Softmax (log_softmax != 0: LogSoftmax) along one axis, numerically stable
 * (max subtracted). For opset < 13 semantics pass dims {outer, inner}, axis 1. */
void kl_softmax_f32(int rank, const int64_t *dims, const float *x, int axis, int log_softmax,
                    float *y, kl_pool *pool);
/* Softmax over the last axis of x + b (an attention mask or bias) without
 * materialising the sum. dims: the (broadcast) output shape, y contiguous;
 * element (i0, ..., i{rank-1}) of x is x[sum i_k * xstrides[k]], likewise b
 * (stride 0 = broadcast; the last strides must be 0 or 1). The same results
 * as an Add then kl_softmax_f32. */
void kl_softmax_add_f32(int rank, const int64_t *dims, const float *x, const int64_t *xstrides, const float *b,
                        const int64_t *bstrides, float *y, kl_pool *pool);

/* ==================================================================
 * Data movement (dtype-generic: esize = bytes per element)
 * ================================================================== */

/* y = x transposed: y.dims[i] = dims[perm[i]]. Blocked fast path for 2-D swaps. */
void kl_transpose(size_t esize, int rank, const int64_t *dims, const int *perm,
                  const void *x, void *y, kl_pool *pool);
/* General strided copy: dst[idx] = src[idx] over dims, strides in elements
 * (src strides may be 0 (broadcast) or negative). rank <= 2 * KL_MAX_DIMS. */
void kl_copy_strided(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *src_strides, void *dst, const int64_t *dst_strides,
                     kl_pool *pool);
/* Concat n inputs along axis. out_dims: the output shape; sizes[i]: inputs'
 * extent along axis (the other dims equal out_dims). */
void kl_concat(size_t esize, int rank, const int64_t *out_dims, int axis, int n,
               const void *const *xs, const int64_t *sizes, void *y, kl_pool *pool);
/* Split x (rank, dims) along axis into n outputs of sizes[i] (sum = dims[axis]). */
void kl_split(size_t esize, int rank, const int64_t *dims, int axis, int n,
              const int64_t *sizes, const void *x, void *const *ys, kl_pool *pool);
/* ONNX Slice normalisation: n_axes entries of starts/ends/axes/steps (axes NULL =
 * 0..n_axes-1, steps NULL = 1; negatives count from the end, clamped as ONNX).
 * Fills start[rank], step[rank], out_dims[rank] for kl_slice. Bad axis, zero
 * step, repeated axis -> KL_EINVAL. */
int kl_slice_prepare(int rank, const int64_t *dims, int n_axes, const int64_t *starts,
                     const int64_t *ends, const int64_t *axes, const int64_t *steps,
                     int64_t *start, int64_t *step, int64_t *out_dims, kl_err *e);
void kl_slice(size_t esize, int rank, const int64_t *dims, const void *x,
              const int64_t *start, const int64_t *step, const int64_t *out_dims, void *y,
              kl_pool *pool);

typedef enum { KL_PAD_CONSTANT, KL_PAD_REFLECT, KL_PAD_EDGE, KL_PAD_WRAP } kl_pad_mode;
/* pads: 2*rank entries in ONNX order (all begins, then all ends); negative pads
 * crop. value: esize bytes for CONSTANT (NULL = zeros). out dims = dims + begin + end.
 * REFLECT needs pads < dim along padded axes -> KL_EINVAL otherwise. */
int kl_pad(size_t esize, int rank, const int64_t *dims, const void *x, const int64_t *pads,
           kl_pad_mode mode, const void *value, void *y, kl_pool *pool, kl_err *e);
/* Gather along axis: y shape = dims[:axis] + idx_shape + dims[axis+1:], with the
 * nidx indices flattened. idx_dtype KL_I32 or KL_I64; negatives count from the end;
 * out of range -> KL_ERANGE naming the index. */
int kl_gather(size_t esize, int rank, const int64_t *dims, const void *x, int axis,
              kl_dtype idx_dtype, const void *idx, int64_t nidx, void *y, kl_pool *pool,
              kl_err *e);
/* Tile: out dims[i] = dims[i] * repeats[i]. */
void kl_tile(size_t esize, int rank, const int64_t *dims, const void *x, const int64_t *repeats,
             void *y, kl_pool *pool);
/* Broadcast copy of x (rx, dx) to (ry, dy) (dy must be a broadcast of dx). */
int kl_expand(size_t esize, int rx, const int64_t *dx, const void *x, int ry, const int64_t *dy,
              void *y, kl_pool *pool, kl_err *e);

/* ==================================================================
 * Quantization (quant.c) and int8 GEMM / convolution (qgemm.c, qconv.c)
 * ==================================================================
 * Linear quantization as ONNX defines it: q = saturate(rint(x / scale) + zp),
 * x = (q - zp) * scale, rint rounding half to even, saturation to the range
 * of int8 [-128, 127] or uint8 [0, 255]. Parameters are per tensor (one scale
 * and zero point) or per axis: x viewed as (outer, len, inner), parameter i
 * applies to index i of the middle axis. zp NULL means 0; zp has the dtype of
 * the quantized side (int8/uint8; int32 for DequantizeLinear of int32). */

/* x f32 (outer, len, inner) -> y (dt KL_I8 or KL_U8). per_axis: scale and zp
 * have len entries, else one. NaN quantizes to the zero point. */
void kl_quantize_f32(const float *x, int64_t outer, int64_t len, int64_t inner, const float *scale, const void *zp,
                     int per_axis, kl_dtype dt, void *y, kl_pool *pool);
/* x (dt KL_I8, KL_U8 or KL_I32) -> y f32: (x - zp) * scale. */
void kl_dequantize_f32(const void *x, kl_dtype dt, int64_t outer, int64_t len, int64_t inner, const float *scale,
                       const void *zp, int per_axis, float *y, kl_pool *pool);
/* DynamicQuantizeLinear's parameters of n floats (uint8): scale =
 * (max(0, max x) - min(0, min x)) / 255, zp = saturate(rint(-min / scale)),
 * both in float32 as the ONNX reference; an all-zero x gives scale 0, zp 0
 * (then kl_quantize_f32 maps everything to 0). NaNs are skipped. */
void kl_dynamic_quant_params(const float *x, int64_t n, float *scale, uint8_t *zp);
/* One requantized value: saturate(rint(acc * mult) + zp) clamped to
 * [lo, hi] (within the dtype's range), as float arithmetic (ONNX Runtime's
 * requantization; acc is rounded to float first). */
static inline int32_t kl_requant1(int32_t acc, float mult, int32_t zp, int32_t lo, int32_t hi) {
    float v = (float)acc * mult;
    v = __builtin_rintf(v);
    float f = v + (float)zp;
    if (!(f >= (float)lo)) f = (float)lo; /* NaN -> lo */
    if (f > (float)hi) f = (float)hi;
    return (int32_t)f;
}

/* ---- int8 GEMM: C (M x N, int32) = (A - za) (B - zb) over K ----
 * A is uint8 or int8 (int8 is shifted to uint8 by +128, za with it), B is
 * packed once (int8, or uint8 shifted to int8 by -128, zb with it) so that
 * every product is uint8 x int8: AVX-512 VNNI vpdpbusd where the CPU has it,
 * AVX2 vpmaddubsw + vpmaddwd otherwise (A split into its low 7 bits and top
 * bit, so no pair sum saturates: the results are exact), scalar code
 * without AVX2. Integer arithmetic: every level gives the same bits. The
 * zero points enter through row sums of A and column sums of B. */
/* Bytes of the packed form of B (K x N). */
size_t kl_qgemm_packed_bytes(int64_t K, int64_t N);
/* Packs B (element (k,n) at b[k*rs + n*cs]; b_unsigned: uint8 else int8)
 * with its column sums. */
void kl_qgemm_pack_b(int64_t K, int64_t N, const void *b, int b_unsigned, int64_t rs, int64_t cs, void *dst);

/* The output of an int8 GEMM: the int32 accumulator acc(m, n) (zero points
 * applied) + bias[n] goes to element m*ysm + n*ysn of
 *   c:  int32 (when c is set), or
 *   yf: float (acc + bias) * mult[n | 0] (+ fbias[n]), or
 *   y:  ydt (KL_I8/KL_U8) kl_requant1(acc + bias,
 *       mult[n | 0], yzp, lo, hi) (lo/hi: the dtype's range, or narrower for
 *       a fused Relu). */
typedef struct kl_qgemm_out {
    int32_t *c;
    const int32_t *bias;   /* per column, or NULL */
    const float *mult;     /* per column when mult_per_col, else one */
    int mult_per_col;
    void *y;
    kl_dtype ydt;
    int32_t yzp, lo, hi;
    float *yf;
    const float *fbias;    /* per column float bias of yf, or NULL */
    int64_t ysm, ysn;
    /* row segments (> 0): row m lies at (m / rseg) * rskip + (m % rseg) * ysm
     * (a batch of images stacked as GEMM rows, each image's outputs apart) */
    int64_t rseg, rskip;
} kl_qgemm_out;

/* A (M x K) at a[m*lda + k], a_unsigned: uint8 else int8; za its zero point;
 * packed_b from kl_qgemm_pack_b with its zero points zb (per column when
 * zb_per_col, else zb[0]; NULL = 0; in B's dtype). Runs over the pool; A
 * is read in place when it is uint8 with K and lda multiples of 4, else
 * copied once (KL_ENOMEM when that copy cannot be had). */
int kl_qgemm(int64_t M, int64_t N, int64_t K, const void *a, int a_unsigned, int64_t lda, int32_t za,
             const void *packed_b, const void *zb, int zb_per_col, const kl_qgemm_out *o, kl_pool *pool, kl_err *e);
/* MatMulInteger's per-row a zero points za[m] (M entries, uint8 when
 * za_unsigned): c (M x N, from kl_qgemm with za 0) -= za[m] * sum_k (b[k][n]
 * - zb[n]); b (K x N) row-major uint8/int8, zb as kl_qgemm's. */
void kl_qgemm_row_zp(int64_t M, int64_t N, int64_t K, const void *b, int b_unsigned, const void *zb, int zb_per_col,
                     const void *za, int za_unsigned, int32_t *c);
/* keel::QAdd (the QDQ fusion of DQ -> Add -> Q) on n elements of one shape:
 * y = clamp(rint(((a - az) as + (b - bz) bs) / ys) + yz, lo, hi) in float32
 * operations (those of the unfused graph); sum: when set, the float sums
 * instead of a and b (a broadcasting Add). au/bu/yu: uint8 else int8.
 * AVX-512 or scalar, the same bits. */
void kl_qadd(const void *a, int au, int32_t az, float as, const void *b, int bu, int32_t bz, float bs, const float *sum,
             void *y, int yu, int32_t yz, float ys, int32_t lo, int32_t hi, int64_t n, kl_pool *pool);
/* The dispatch level kl_qgemm runs at: 2 VNNI, 1 AVX2, 0 scalar (never above
 * kl__isa_force's level when that is set: 2 there allows VNNI). */
int kl_qgemm_level(void);

/* ---- int8 convolution (qconv.c): NCHW, the kl_conv_params geometry ----
 * x (N, C, in...) uint8/int8 with zero point xz (pads read as xz), weights
 * (M, C/group, k...) packed by kl_qconv_pack (one kl_qgemm_pack_b per group,
 * or a depthwise layout), output through o per image and group: column n =
 * output channel of the group, row m = output position; the caller's o
 * gives the per-channel arrays for channel 0 (kl_qconv offsets them by the
 * group's first channel) and ysm/ysn are ignored (NCHW output written). */
size_t kl_qconv_packed_bytes(const kl_conv_params *p);
/* KL_ENOMEM when its scratch cannot be had. */
int kl_qconv_pack(const kl_conv_params *p, const void *w, int w_unsigned, void *dst, kl_err *e);
/* Workspace bytes for kl_qconv (independent of the thread count). */
size_t kl_qconv_workspace_bytes(const kl_conv_params *p);
/* wz: weight zero points in the weights' dtype (w_unsigned: uint8; M
 * entries when wz_per_ch, else one; NULL = 0). ws: kl_qconv_workspace_bytes
 * or NULL (allocated per call). KL_ENOMEM, or KL_EUNSUPPORTED for a
 * depthwise kernel of more than 512 taps. */
int kl_qconv(const kl_conv_params *p, const void *x, int x_unsigned, int32_t xz, const void *packed_w, int w_unsigned,
             const void *wz, int wz_per_ch, const kl_qgemm_out *o, void *ws, kl_pool *pool, kl_err *e);

/* ==================================================================
 * Resize (ONNX Resize, f32): nearest, linear or cubic on any axes (scales 1
 * on unchanged axes), coordinate transformation modes below.
 * ================================================================== */

typedef enum { KL_RESIZE_NEAREST, KL_RESIZE_LINEAR, KL_RESIZE_CUBIC } kl_resize_mode;
typedef enum {
    KL_CT_HALF_PIXEL,
    KL_CT_ALIGN_CORNERS,
    KL_CT_ASYMMETRIC,
    KL_CT_PYTORCH_HALF_PIXEL,
    KL_CT_TF_HALF_PIXEL_FOR_NN,
    KL_CT_TF_CROP_AND_RESIZE,
    KL_CT_HALF_PIXEL_SYMMETRIC
} kl_resize_coord;
/* KL_NEAREST_SIMPLE: Resize-10 / Upsample (ceil when the axis shrinks,
 * floor otherwise). */
typedef enum {
    KL_NEAREST_ROUND_PREFER_FLOOR,
    KL_NEAREST_ROUND_PREFER_CEIL,
    KL_NEAREST_FLOOR,
    KL_NEAREST_CEIL,
    KL_NEAREST_SIMPLE
} kl_resize_nearest;
/* scales: per-axis output/input scale factors (NULL = out_dims/dims).
 * Nearest/linear with the first four coordinate modes or tf_half_pixel_for_nn
 * (the fast single-pass kernel). */
int kl_resize_f32(int rank, const int64_t *dims, const float *x, const int64_t *out_dims,
                  const float *scales, kl_resize_mode mode, kl_resize_coord coord,
                  kl_resize_nearest nearest, float *y, kl_pool *pool, kl_err *e);

/* Every option of ONNX Resize (opsets 10-19). */
typedef struct kl_resize_opts {
    kl_resize_mode mode;
    kl_resize_coord coord;
    kl_resize_nearest nearest;
    float cubic_a;       /* cubic coefficient (ONNX default -0.75) */
    int exclude_outside; /* weights of taps outside the input are 0, renormalised */
    float extrapolation; /* tf_crop_and_resize: value outside the input */
    int antialias;       /* linear/cubic: filter widened by 1/scale when downscaling */
    const float *roi;    /* tf_crop_and_resize: starts[rank] then ends[rank]; NULL = 0..1 */
} kl_resize_opts;
/* Resize with any options: the fast kernel above where it applies, otherwise
 * a separable pass per axis over per-axis tap tables (resize_sep.c). */
int kl_resize_ex_f32(int rank, const int64_t *dims, const float *x, const int64_t *out_dims, const float *scales,
                     const kl_resize_opts *o, float *y, kl_pool *pool, kl_err *e);

/* ==================================================================
 * FFT (fft.c): complex DFT of any length n >= 1 in double precision,
 * iterative radix-2 for powers of two, Bluestein's chirp-z transform
 * (through a power-of-two FFT of length >= 2n - 1) otherwise. Forward:
 * X[k] = sum_j x[j] e^{-2 pi i jk/n}; inverse: the same with +i, unscaled
 * (the caller divides by n). A plan holds the twiddles and, for Bluestein,
 * the chirp and its transform; it is read-only once made (shareable by
 * threads, each with its own scratch).
 * ================================================================== */

typedef struct kl_fft kl_fft;
/* KL_ERANGE for n < 1 or n > KL_FFT_MAX_N; KL_ENOMEM from the allocator. */
#define KL_FFT_MAX_N ((int64_t)1 << 28)
int kl_fft_new(int64_t n, kl_fft **out, kl_err *e);
void kl_fft_free(kl_fft *f);            /* NULL is a no-op */
int64_t kl_fft_len(const kl_fft *f);
size_t kl_fft_scratch_doubles(const kl_fft *f);
/* x: n interleaved (re, im) pairs, transformed in place; scratch: at least
 * kl_fft_scratch_doubles(f) doubles. */
void kl_fft_run(const kl_fft *f, int inverse, double *x, double *scratch);

#ifdef __cplusplus
}
#endif
#endif
