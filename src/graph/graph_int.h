/* Private header of the graph module: the op registry entry, the per-run
 * execution context and helpers shared by the op files (ops_*.c), the
 * passes and the executor. */
#ifndef KEEL_GRAPH_INT_H
#define KEEL_GRAPH_INT_H

#include "keel/graph.h"
#include "keel/tensor.h"

/* Returned by an op's infer when it needs the value (not only the shape) of
 * an input that is unknown at planning time: the executor then infers that
 * node's output shapes at run time. */
#define KL__NEED_DATA 1

typedef struct kl_exec {
    kl_pool *pool;
    void *ws;          /* workspace of at least the bytes infer asked for */
    size_t ws_bytes;
} kl_exec;

/* in[i]: NULL for an omitted optional input; in[i]->data NULL when the value
 * is unknown (planning). infer sets dtype/rank/dims of out[0..n_out) (the
 * executor fills strides/data) and the workspace bytes run needs. */
typedef int (*kl_infer_fn)(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out,
                           size_t *ws, kl_err *e);
typedef int (*kl_run_fn)(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out,
                         kl_exec *x, kl_err *e);
typedef int (*kl_check_fn)(kl_gnode *n, const kl_graph *g, kl_err *e);

typedef struct kl_op {
    const char *name;
    const char *domain;      /* "" = ai.onnx */
    int since, until;        /* opset versions whose semantics are implemented */
    int min_in, max_in, min_out, max_out;
    const char *const *attrs; /* accepted attribute names (NULL-terminated); NULL = any */
    kl_check_fn check;       /* attribute value validation (may be NULL) */
    kl_infer_fn infer;
    kl_run_fn run;
    int flags;
} kl_op;

#define KL_OP_NOFOLD 1       /* never constant-fold (random ops) */
#define KL_OP_SHAPE_ONLY 2   /* output depends on input shapes only (Shape, Size): folded per plan */
/* Batch-separable ops (the executor may run a batch sample by sample, see
 * exec.c's depth-first prefix; set only where checked):
 * KL_OP_BCAST: elementwise with broadcasting (each output element reads only
 * the input elements broadcast to it);
 * KL_OP_SAMPLEWISE: output sample b (dim 0) reads only sample b of the
 * inputs that carry the batch, the other inputs are parameters (weights). */
#define KL_OP_BCAST 4
#define KL_OP_SAMPLEWISE 8
/* Takes GRAPH attributes (subgraphs); input counts exclude the implicit ones. */
#define KL_OP_SUBGRAPH 16
/* Output shapes known only by running (control flow): infer returns
 * KL__NEED_DATA, and run, on a dynamic step, gets empty owned tensors and
 * replaces each wanted one's contents (shape and data) with its result. */
#define KL_OP_ALLOCS 32

/* Registry tables defined in the ops_*.c files. */
extern const kl_op kl__ops_elem[];
extern const kl_op kl__ops_nn[];
extern const kl_op kl__ops_shape[];
extern const kl_op kl__ops_misc[];
extern const kl_op kl__ops_grad[];  /* ai.keel.grad (ops_grad.c) */
extern const kl_op kl__ops_train[]; /* ai.keel.train (ops_grad.c) */
extern const kl_op kl__ops_grad_nn[]; /* ai.keel.grad conv/pool/norm gradients (grad_nn.c) */
extern const kl_op kl__ops_nchwc[];   /* keel:: NCHWc blocked ops (ops_nchwc.c) */
extern const kl_op kl__ops_vision[];  /* Resize, Upsample, detection ops (ops_vision.c) */
extern const kl_op kl__ops_einsum[];  /* Einsum, Det (ops_einsum.c) */
extern const kl_op kl__ops_misc2[];   /* Unique, Compress, ReverseSequence, MVN (ops_misc2.c) */
extern const kl_op kl__ops_random[];  /* Random*, Bernoulli, ai.onnx.preview.training (ops_random.c) */
extern const kl_op kl__ops_control[]; /* If, Loop, Scan (ops_control.c) */
extern const kl_op kl__ops_rnn[];     /* RNN, GRU, LSTM (ops_rnn.c) */
extern const kl_op kl__ops_seq[];     /* sequence and optional ops (ops_seq.c) */
extern const kl_op kl__ops_audio[];   /* DFT, STFT, window ops, MelWeightMatrix (ops_audio.c) */
extern const kl_op kl__ops_quant[];   /* quantized ops and keel::QConv/QGemm (ops_quant.c) */

/* Packs the constant weights of n for keel's GEMM micro-kernel into n->priv
 * (Conv; Gemm/FusedMatMul with a constant B). No-op where no packed path
 * applies. (ops_nn.c) */
int kl__prepack_node(kl_graph *g, kl_gnode *n, kl_err *e);
/* Conv geometry of n from X = in[0], W = in[1] (its shape only), the
 * attributes (kernel_shape, strides, dilations, pads, auto_pad, group) and
 * a bias in[2] of M entries when n_in > 2; kl_conv_prepare'd, packed_w =
 * n->priv. Errors name the node. (ops_nn.c) */
int kl__conv_params(kl_gnode *n, kl_tensor *const *in, int n_in, kl_conv_params *p, kl_err *e);
/* Packs the constant weights of a quantized op (QLinearConv, ConvInteger,
 * QLinearMatMul/MatMulInteger with a 2-D B, keel::QConv/QGemm) into n->priv
 * (ops_quant.c); called by kl__prepack_node. */
int kl__quant_prepack(kl_graph *g, kl_gnode *n, kl_err *e);
/* keel::NchwcConv: weights packed for the blocked kernel into n->priv (ops_nchwc.c). */
int kl__nchwc_prepack(kl_graph *g, kl_gnode *n, kl_err *e);
/* 0 when a KL_OP_SAMPLEWISE node, run sample by sample, would not give the
 * bits of the run over the whole batch (in: the full-batch shapes), e.g. an
 * NchwcConv whose kernel choice depends on the batch (ops_nchwc.c). */
int kl__op_sample_ok(kl_gnode *n, kl_tensor *const *in, int n_in);
/* The QDQ fusion pass (qdq.c): DQ -> Conv/MatMul/Gemm/Add -> Q chains to
 * the int8 ops; run by kl_graph_optimize before constant folding. */
int kl__pass_qdq(kl_graph *g, int *changed, kl_err *e);
/* The NCHWc pass (nchwc.c): run by kl_graph_optimize after the fusions. */
int kl__pass_nchwc(kl_graph *g, int *changed, kl_err *e);
/* Pass helpers (passes.c): a live node of the default ONNX domain with this
 * op type; the initializer of value v or NULL; the value of a one-element
 * initializer as double, NAN when v is not one; set (or add) an int attr. */
int kl__is_onnx_op(const kl_gnode *n, const char *op);
const kl_tensor *kl__init_of(const kl_graph *g, int v);
double kl__scalar_of(const kl_graph *g, int v);
int kl__set_int_attr(kl_gnode *n, const char *name, int64_t v);

/* ---- helpers (graph.c) ---- */
void kl__set_shape(kl_tensor *t, kl_dtype dt, int rank, const int64_t *dims);
int kl__fail_node(kl_err *e, const kl_gnode *n, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Integer value i of a (small) int tensor of any integer dtype. */
int64_t kl__int_at(const kl_tensor *t, int64_t i);
double kl__dbl_at(const kl_tensor *t, int64_t i);
void kl__set_dbl(kl_tensor *t, int64_t i, double v);
/* ONNX TensorProto data_type -> kl_dtype; KL_EUNSUPPORTED otherwise. */
int kl__norm_axis(int64_t axis, int rank, int64_t *out);
/* Runs one node standalone, allocating outputs (constant folding, dynamic steps). */
int kl__run_node_alloc(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor **out, int n_out, kl_pool *pool,
                       kl_err *e);

/* A KL_OP_ALLOCS run's result res into the executor's empty tensor dst:
 * contents swapped, res (now the empty one) freed. (graph.c) */
void kl__tensor_move(kl_tensor *dst, kl_tensor *res);

/* ---- subgraph.c: running a bound subgraph (If/Loop/Scan) ----
 * One plan per set of input shapes (kept while an iteration's shapes stay
 * the same) and one arena, reused across iterations. Not shared between
 * threads: each run of the node has its own. */
typedef struct kl__sub {
    kl_graph *g;
    kl_pool *pool;
    kl_plan *plan;
    void *arena;
    size_t arena_bytes;
} kl__sub;
void kl__sub_init(kl__sub *r, kl_graph *g, kl_pool *pool);
void kl__sub_free(kl__sub *r);
/* in: g->n_inputs tensors (formal inputs, then the outer values); out:
 * g->n_outputs new tensors (the caller frees them). */
int kl__sub_run(kl__sub *r, kl_tensor *const *in, kl_tensor **out, kl_err *e);

/* ---- profile.c: per-node timing (keel bench --profile, KEEL_PROFILE=1) ---- */
int kl__prof_on(void);
void kl__prof_add(const kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, double ms);

#endif
