/* keel runtime: the session API of the ONNX runtime. A session holds one
 * loaded, optimised graph; kl_session_run executes it with memory planned
 * per input-shape signature (one arena per concurrent run). Used by the
 * `keel run/inspect/bench` commands, serving, training and features. */
#ifndef KEEL_RUNTIME_H
#define KEEL_RUNTIME_H

#include "keel/core.h"
#include "keel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_session kl_session;

typedef struct {
    int threads;   /* 0 = default */
    int opt_level; /* 0 none, 1 default */
} kl_session_opts;

typedef struct {
    const char *name;
    kl_dtype dtype;
    int rank;
    int64_t dims[KL_MAX_DIMS];         /* -1 symbolic */
    const char *dim_names[KL_MAX_DIMS]; /* NULL when fixed */
} kl_value_info;

/* Loads an ONNX model (opset 11-17). Unsupported op/opset/attribute, corrupt
 * protobuf, cycles, dangling inputs -> error naming the node. o may be NULL. */
int kl_session_load(const char *onnx_path, const kl_session_opts *o, kl_session **out, kl_err *e);
/* Same from memory; name is used in messages; external data is resolved
 * relative to the current directory (or refused when name is NULL). */
int kl_session_load_mem(const void *bytes, size_t len, const char *name, const kl_session_opts *o,
                        kl_session **out, kl_err *e);
void kl_session_free(kl_session *s);

size_t kl_session_num_inputs(const kl_session *s);
size_t kl_session_num_outputs(const kl_session *s);
const kl_value_info *kl_session_input(const kl_session *s, size_t i);  /* valid until free */
const kl_value_info *kl_session_output(const kl_session *s, size_t i); /* valid until free */

/* Thread-safe: concurrent runs on one session each use their own arena.
 * outputs[i] are new tensors the caller frees with kl_tensor_free.
 * Shape/dtype mismatch -> KL_ESHAPE/KL_ETYPE naming the input. */
int kl_session_run(kl_session *s, const kl_tensor *const *inputs, size_t n_in, kl_tensor **outputs,
                   size_t n_out, kl_err *e);

/* Planned activation bytes for the given input shapes (for memory quotas). */
int kl_session_plan_bytes(kl_session *s, const kl_tensor *const *inputs, size_t n_in, uint64_t *bytes,
                          kl_err *e);

/* ---- extensions ---- */

/* The graph the session runs (after optimisation); valid until free. */
struct kl_graph;
const struct kl_graph *kl_session_graph(const kl_session *s);
/* Index of the input / output with this name, or -1. */
int kl_session_input_index(const kl_session *s, const char *name);
int kl_session_output_index(const kl_session *s, const char *name);

#ifdef __cplusplus
}
#endif
#endif
