/* Private helpers shared by the tensor kernels (not part of the public API). */
#ifndef KEEL_TENSOR_INT_H
#define KEEL_TENSOR_INT_H

#include "keel/tensor.h"

/* Block sizes independent of the thread count: work items for parallel_for. */
#define KL__ELEM_BLOCK 4096

#endif
