/* keel graph IR: values (dtype + possibly symbolic shape), nodes with ONNX
 * operator semantics and attributes, initializers as kl_tensor; topological
 * order, validation against the op registry, shape inference, optimisation
 * passes. Loaded from ONNX by src/onnx, built directly by training, executed
 * by the runtime (include/keel/runtime.h). */
#ifndef KEEL_GRAPH_H
#define KEEL_GRAPH_H

#include "keel/core.h"
#include "keel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KL_ATTR_UNDEF, KL_ATTR_FLOAT, KL_ATTR_INT, KL_ATTR_STRING, KL_ATTR_TENSOR,
    KL_ATTR_FLOATS, KL_ATTR_INTS, KL_ATTR_STRINGS, KL_ATTR_GRAPH, KL_ATTR_OTHER
} kl_attr_type;

typedef struct kl_attr {
    char *name;
    kl_attr_type type;
    float f;
    int64_t i;
    char *s;            /* STRING (NUL-terminated copy) */
    kl_tensor *t;       /* TENSOR (owned) */
    float *floats;      /* FLOATS */
    int64_t *ints;      /* INTS */
    char **strings;     /* STRINGS */
    int n;              /* element count of FLOATS/INTS/STRINGS */
    struct kl_graph *g; /* GRAPH (owned): a subgraph (If branch, Loop/Scan body), finalized
                           by kl_gnode_bind_subgraphs */
} kl_attr;

typedef struct kl_value {
    char *name;
    kl_dtype dtype;     /* KL_DTYPE_COUNT when unknown */
    int rank;           /* -1 when unknown */
    int64_t dims[KL_MAX_DIMS];     /* -1 when symbolic/unknown */
    char *dim_names[KL_MAX_DIMS];  /* symbolic name or NULL */
    kl_tensor *init;    /* initializer / constant data (owned), else NULL */
    int producer;       /* node index, -1 for graph inputs and initializers */
    int is_input, is_output;
    int n_uses;         /* consumer count (set by kl_graph_finalize) */
    int kind;           /* KL_VAL_TENSOR, or a sequence/optional value (dtype uint8, rank 1: see kl_seq_new) */
} kl_value;

struct kl_op;
typedef struct kl_gnode {
    char *name;         /* may be "" */
    char *op_type;
    char *domain;       /* "" = ai.onnx */
    int *inputs;        /* value indices; -1 = omitted optional input */
    int n_in;           /* including the n_implicit ones */
    int n_implicit;     /* the last n_implicit inputs: outer-scope values its subgraphs read */
    int *outputs;       /* value indices; -1 = omitted optional output */
    int n_out;
    kl_attr *attrs;
    int n_attrs;
    int opset;          /* opset of the node's domain */
    const struct kl_op *op; /* registry entry (set by kl_graph_finalize) */
    int index;          /* original index in the model (for messages) */
    int dead;           /* removed by a pass */
    void *priv;         /* op-private prepared data (packed weights), freed by priv_free */
    void (*priv_free)(void *);
} kl_gnode;

typedef struct kl_graph {
    char *name;
    kl_value *values;
    int n_values, cap_values;
    kl_gnode *nodes;     /* in topological order after kl_graph_finalize */
    int n_nodes, cap_nodes;
    int *inputs;        /* graph inputs (not initializers) */
    int n_inputs;       /* including the n_outer ones */
    int n_outer;        /* a subgraph: the last n_outer inputs are bound to the enclosing
                           node's implicit inputs (outer-scope values), in that order */
    int *outputs;
    int n_outputs;
    int opset;          /* default-domain opset */
    char *producer;     /* producer_name + version, may be NULL */
    int *vindex;        /* name -> value: open addressing, slot = value + 1 (0 empty); graph.c */
    int vindex_cap;     /* slots (a power of two, at most half full) */
} kl_graph;

/* ---- Sequence and optional values ----
 * ONNX seq(tensor), optional(tensor) and optional(seq) values are carried
 * as one self-contained uint8 tensor of rank 1 (a header, an entry per
 * element: dtype, shape, offset, size, then the elements' data, 8-byte
 * aligned; an element may itself be such a value), so that the executor
 * plans, copies, carries and frees them as bytes. Readers validate the
 * layout: values may come from users. */
enum { KL_VAL_TENSOR = 0, KL_VAL_SEQUENCE = 1, KL_VAL_OPTIONAL = 2 };
/* A new value of kind holding copies of elems[0..n) (an optional: n 0 or 1;
 * elem: the element dtype of an empty sequence, KL_DTYPE_COUNT unknown). */
int kl_seq_new(int kind, kl_dtype elem, const kl_tensor *const *elems, int64_t n, kl_tensor **out, kl_err *e);
/* Validates v as a value: its kind, element dtype and count (any may be NULL). */
int kl_seq_check(const kl_tensor *v, int *kind, kl_dtype *elem, int64_t *count, kl_err *e);
/* Element i as a view into v (valid while v lives). */
int kl_seq_at(const kl_tensor *v, int64_t i, kl_tensor *view, kl_err *e);
/* 1 when v is laid out as a sequence/optional value (its magic). */
int kl_seq_is_value(const kl_tensor *v);

/* ONNX TensorProto.DataType numbers (the graph's Cast/ConstantOfShape
 * attributes, the loader's tensors): KL_EUNSUPPORTED for a type keel has no
 * kl_dtype for (STRING, COMPLEX*), and the type's ONNX name for errors. */
int kl_dtype_from_onnx(int onnx_type, kl_dtype *out);
const char *kl_onnx_type_name(int onnx_type);

int kl_graph_new(kl_graph **out, kl_err *e);
void kl_graph_free(kl_graph *g);
/* Index of the value called name, creating it (unknown type) when absent; -1 on OOM. */
int kl_graph_value(kl_graph *g, const char *name);
int kl_graph_find_value(const kl_graph *g, const char *name); /* -1 when absent */
/* Renames value v (its name must not be taken by another value); KL_ENOMEM
 * leaves it unchanged. The only way to change a value's name: the name
 * index stays true. */
int kl_graph_value_rename(kl_graph *g, int v, const char *name);
/* Appends a node; returns its index or -1 on OOM. Inputs/outputs by name ("" = omitted). */
int kl_graph_add_node(kl_graph *g, const char *op_type, const char *name, const char *const *inputs,
                      int n_in, const char *const *outputs, int n_out);
kl_attr *kl_gnode_attr_add(kl_gnode *n, const char *name, kl_attr_type type);
/* Moves n into domain ("" = ai.onnx) at that domain's opset; KL_ENOMEM leaves n unchanged. */
int kl_gnode_set_domain(kl_gnode *n, const char *domain, int opset);
const kl_attr *kl_gnode_attr(const kl_gnode *n, const char *name);
int64_t kl_gnode_attr_int(const kl_gnode *n, const char *name, int64_t def);
float kl_gnode_attr_float(const kl_gnode *n, const char *name, float def);
const char *kl_gnode_attr_str(const kl_gnode *n, const char *name, const char *def);
/* "node 17 'conv1' (Conv)" into buf. */
const char *kl_gnode_desc(const kl_gnode *n, char *buf, size_t len);

/* Binds the subgraphs (GRAPH attributes) of node `node` of g to g: the
 * values each subgraph reads without defining them (outer-scope names, its
 * nested subgraphs' included) are appended, as one list in first-use order,
 * to the node's inputs (n_implicit) and to every subgraph's inputs (n_outer),
 * so the executor passes them by position; then finalizes each subgraph.
 * Call once per node, after its attributes are set and before g's finalize. */
int kl_gnode_bind_subgraphs(kl_graph *g, int node, kl_err *e);

/* Checks ops against the registry (op type, opset, attributes), dangling
 * inputs, duplicate producers and cycles; sorts nodes topologically; counts
 * uses. Errors name the node. */
int kl_graph_finalize(kl_graph *g, kl_err *e);
/* Optimisation passes (constant folding, eliminations, fusions). level 0: none. */
int kl_graph_optimize(kl_graph *g, int level, kl_err *e);
/* Op registry lookup (NULL when unsupported). */
const struct kl_op *kl_op_find(const char *domain, const char *op_type);
/* Number of registered op types (for reports). */
int kl_op_count(void);
const char *kl_op_name(int i);

/* ---- Execution plans ----
 * A plan fixes, for one set of concrete input shapes, the output shape of
 * every value, constant-folds what the shapes determine (Shape -> Gather ->
 * Concat -> Reshape chains), and gives every intermediate an offset in one
 * arena by liveness (greedy best fit, largest first). Nodes whose output
 * shape depends on run-time data (NonZero, ...) and everything after them
 * run in dynamic mode (shapes inferred and memory allocated at run time).
 * A plan is immutable: concurrent runs share it, each with its own arena. */
typedef struct kl_plan kl_plan;
int kl_plan_new(kl_graph *g, const kl_tensor *const *inputs, size_t n_in, kl_plan **out, kl_err *e);
void kl_plan_free(kl_plan *p);
/* Bytes of the arena a run needs (activations + workspace + headers). */
uint64_t kl_plan_arena_bytes(const kl_plan *p);
/* Bytes of planned activations alone (the planned peak). */
uint64_t kl_plan_activation_bytes(const kl_plan *p);
/* Sum of all intermediate sizes (what a planner-less runtime would hold). */
uint64_t kl_plan_naive_bytes(const kl_plan *p);
int kl_plan_is_dynamic(const kl_plan *p);
/* Steps the plan runs sample by sample at the start (its depth-first
 * prefix at batch > 1, run so with a pool of one thread, see exec.c; 0:
 * none). KEEL_SPLIT=0 turns it off. */
int kl_plan_split_steps(const kl_plan *p);
/* Runs the plan. arena: kl_plan_arena_bytes(p) bytes, 64-byte aligned.
 * outputs[i] are new tensors (caller frees). pool NULL = default pool. */
int kl_plan_run(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in, kl_tensor **outputs,
                size_t n_out, void *arena, kl_pool *pool, kl_err *e);
/* Shape of value v under the plan (NULL when not planned / dynamic). */
const kl_tensor *kl_plan_value(const kl_plan *p, int v);
/* As kl_plan_run, but writes the outputs into caller tensors that already
 * have the planned dtype and shape (e.g. views into a trainer's gradient
 * block): no allocation per output. outputs[i] NULL: output i is not wanted.
 * The inputs must have the shapes the plan was made for (KL_ESHAPE naming the
 * input otherwise); an output tensor of another dtype/shape -> KL_ETYPE /
 * KL_ESHAPE naming the output. */
int kl_plan_run_into(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in,
                     kl_tensor *const *outputs, size_t n_out, void *arena, kl_pool *pool, kl_err *e);
/* As kl_plan_run_into, calling hook(ctx, node) on the calling thread after
 * each node of g has run (a per-sample prefix: after all its samples): an
 * output of a static plan (kl_plan_is_dynamic 0) written in place is final
 * once the node producing it has run, so a trainer can start sending a
 * gradient while the rest of the backward pass runs. */
typedef void (*kl_plan_node_fn)(void *ctx, int node);
int kl_plan_run_into_hook(const kl_plan *p, kl_graph *g, const kl_tensor *const *inputs, size_t n_in,
                          kl_tensor *const *outputs, size_t n_out, void *arena, kl_pool *pool, kl_plan_node_fn hook,
                          void *hook_ctx, kl_err *e);

/* ---- Autodiff ----
 * Appends to g the nodes computing d(loss)/d(wrt[i]) for a float value
 * `loss` with one element (f32 or f64): reverse-mode, one gradient rule per
 * op, contributions of several consumers summed in node order. grads[i]
 * receives the index of the new value "<name of wrt[i]>_grad", which is made
 * a graph output (wrt values off the loss path get zeros). Gradient ops live
 * in domain "ai.keel.grad" (ops_grad.c), training-mode forward ops in
 * "ai.keel.train" (ops_grad.c); standard ops (Mul, Transpose, ...) are used where
 * they compute a gradient exactly. A node on the path whose op has no
 * gradient rule -> KL_EUNSUPPORTED naming the node and op type. wrt values
 * should be graph inputs (trainable parameters are passed as graph INPUTS,
 * never initializers, so they are never constant-folded or pre-packed).
 * Finalizes g first (validation, topological order); call kl_graph_finalize
 * again after it (and before planning). */
int kl_graph_autodiff(kl_graph *g, int loss, const int *wrt, int n_wrt, int *grads, kl_err *e);
/* As kl_graph_autodiff with d(loss) taken from value seed (e.g. a graph
 * input holding the loss scale of mixed-precision training; the loss's
 * shape and dtype) instead of ones. seed -1: ones. */
int kl_graph_autodiff_seed(kl_graph *g, int loss, int seed, const int *wrt, int n_wrt, int *grads, kl_err *e);
/* 1 when kl_graph_autodiff has a gradient rule for (domain, op_type). */
int kl_graph_has_grad(const char *domain, const char *op_type);

/* ---- Profiling ----
 * Wall time per executed node, aggregated per node and per op kind (Conv
 * split into depthwise / 1x1 / kxk and strided), process-wide. Off unless
 * enabled here or by KEEL_PROFILE=1 (which also prints the per-kind table to
 * stderr at exit). When on, each node costs two clock reads and a mutex. */
void kl_graph_profile_enable(int on);
void kl_graph_profile_reset(void);
/* Appends the report: op kinds by time, then the top nodes (top < 0: all,
 * 0: none); json: {"runs","total_ms_per_run","kinds":[...],"nodes":[...]}
 * (all nodes). KL_ENOMEM on allocation failure. */
int kl_graph_profile_report(kl_buf *out, int top, int json);

#ifdef __cplusplus
}
#endif
#endif
