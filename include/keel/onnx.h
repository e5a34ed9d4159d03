/* keel onnx: loading and saving ONNX models (protobuf, via protobuf-c code generated at
 * build time from Debian's onnx.proto) into the graph IR and back, and ONNX TensorProto
 * (.pb) files as used by the ONNX backend test suite. */
#ifndef KEEL_ONNX_H
#define KEEL_ONNX_H

#include "keel/core.h"
#include "keel/graph.h"
#include "keel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default-domain opsets the loader accepts (the op registry further limits
 * each op to the versions whose semantics it implements). */
#define KL_ONNX_OPSET_MIN 1
#define KL_ONNX_OPSET_MAX 17

/* Parses a model file; external data files are resolved relative to it. */
int kl_onnx_load(const char *path, kl_graph **out, kl_err *e);
/* Parses a model from memory. base_dir resolves external data (NULL: refused);
 * name is used in messages. */
int kl_onnx_load_mem(const void *buf, size_t len, const char *name, const char *base_dir, kl_graph **out,
                     kl_err *e);
/* Writes g as an ONNX model (ir_version 8), atomically (temp + fsync +
 * rename): initializers as raw_data TensorProtos, graph inputs/outputs with
 * their dtype and dims (dim_names / unknown dims as dim_param), nodes with
 * their domains and attributes, one opset import per domain used (the
 * default domain at g->opset, 17 when unset). g need not be finalized; dead
 * nodes are skipped. */
int kl_onnx_save(const kl_graph *g, const char *path, kl_err *e);
/* As kl_onnx_save into a malloc'd buffer (caller frees). */
int kl_onnx_save_mem(const kl_graph *g, void **buf, size_t *len, kl_err *e);
/* Reads a serialized TensorProto file; *name (malloc'd, may be NULL) gets its name. */
int kl_onnx_tensor_load(const char *path, kl_tensor **out, char **name, kl_err *e);
int kl_onnx_tensor_load_mem(const void *buf, size_t len, kl_tensor **out, char **name, kl_err *e);
/* Reads a tensor file by extension: .npy (NumPy) or anything else as a
 * serialized ONNX TensorProto (.pb). */
int kl_onnx_tensor_read(const char *path, kl_tensor **out, kl_err *e);
/* A serialized value of kind KL_VAL_* (keel/graph.h): a TensorProto, or a
 * SequenceProto / OptionalProto of tensors (and of sequences) as a
 * sequence/optional value (kl_seq_new). */
int kl_onnx_value_load(const char *path, int kind, kl_tensor **out, kl_err *e);
/* Maps an ONNX TensorProto data_type to a kl_dtype (KL_EUNSUPPORTED otherwise). */
int kl_onnx_dtype(int onnx_type, kl_dtype *out, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
