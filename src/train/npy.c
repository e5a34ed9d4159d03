/* Training data from .npy: the tensor layer's reader (kl_npy_load_mem, the
 * one .npy parser) and a conversion to double features / labels. */
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

int tr_npy_read_mem(const void *bytes, size_t len, const char *name, tr_array *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    kl_tensor *t = NULL;
    int rc = kl_npy_load_mem(bytes, len, name, &t, e);
    if (rc) return rc;
    rc = from_tensor(t, out, e);
    kl_tensor_free(t);
    if (rc) tr_array_free(out);
    return rc;
}

int tr_npy_read(const char *path, tr_array *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    rc = tr_npy_read_mem(buf, len, path, out, e);
    kl_mem_free(buf);
    return rc;
}

void tr_array_free(tr_array *a) {
    if (a) { kl_mem_free(a->f); a->f = NULL; }
}

int tr_file_sha256(const char *path, char hex[65], kl_err *e) { return kl_sha256_file_hex(path, hex, e); }

int tr_npy_write_f32(const char *path, int rank, const int64_t *dims, const float *data, kl_err *e) {
    char hdr[256], shape[160] = "";
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s", (long long)dims[i], (rank > 1 && i < rank - 1) ? " " : "");
        n *= dims[i];
    }
    if (rank > 1) shape[strlen(shape) - 1] = 0;
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
    int total = 10 + hl + 1, pad = (64 - total % 64) % 64;
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_append(&b, "\x93NUMPY\x01\x00", 8);
    uint16_t l = (uint16_t)(hl + pad + 1);
    kl_buf_append(&b, &l, 2);
    kl_buf_append(&b, hdr, (size_t)hl);
    for (int i = 0; i < pad; i++) kl_buf_append(&b, " ", 1);
    kl_buf_append(&b, "\n", 1);
    kl_buf_append(&b, data, (size_t)n * 4);
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}
