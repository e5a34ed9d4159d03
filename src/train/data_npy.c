/* Training data from .npy X/y files: read by the tensor layer's reader
 * (kl_npy_load_mem, the one .npy parser) and converted to the double arrays
 * of a training source (tr_array), as data_pq.c does for Parquet. .npy files
 * are written by kl_npy_save only (keel eval --logits included). */
#include <stdlib.h>
#include <string.h>

#include "keel/tensor.h"
#include "train/train_int.h"
#include "train/train_data.h"

static int from_tensor(const kl_tensor *t, tr_array *out, kl_err *e) {
    int64_t n = kl_tensor_numel(t);
    out->rank = t->rank;
    for (int d = 0; d < t->rank; d++) out->dims[d] = t->dims[d];
    out->n = n;
    out->is_int = !kl_dtype_is_float(t->dtype);
    out->f = kl_mem_alloc_e((size_t)(n ? n : 1) * sizeof(double), KL_TAG_DATASET, e);
    if (!out->f) return KL_ENOMEM;
    for (int64_t i = 0; i < n; i++) out->f[i] = kl_tensor_flat_f64(t, i);
    return KL_OK;
}

/* The tensor kl_npy_load(_mem) returned with rc, as doubles in out; t is freed. */
static int take_tensor(int rc, kl_tensor *t, tr_array *out, kl_err *e) {
    if (rc) return rc;
    rc = from_tensor(t, out, e);
    kl_tensor_free(t);
    if (rc) kl__train_array_free(out);
    return rc;
}

int kl__train_npy_read_mem(const void *bytes, size_t len, const char *name, tr_array *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    kl_tensor *t = NULL;
    int rc = kl_npy_load_mem(bytes, len, name, &t, e);
    return take_tensor(rc, t, out, e);
}

int kl__train_npy_read(const char *path, tr_array *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    kl_tensor *t = NULL;
    int rc = kl_npy_load(path, &t, e);
    return take_tensor(rc, t, out, e);
}

void kl__train_array_free(tr_array *a) {
    if (a) { kl_mem_free(a->f); a->f = NULL; }
}
