/* Sequence and optional values (ONNX seq(tensor), optional(tensor),
 * optional(seq)) as the executor carries them: one self-contained byte
 * tensor (uint8, rank 1) holding a header, an entry per element (dtype,
 * shape, offset, size) and the elements' data, so that every executor path
 * (planning, copies, Loop/If carries, graph inputs and outputs) moves it as
 * plain bytes and frees it as one tensor. An element may itself be such a
 * value (optional(seq)). Every reader validates the layout (kl_seq_check):
 * values arrive from users (serving, files). */
#include "keel/graph.h"

#include <stdlib.h>
#include <string.h>

#define MAGIC "KLSEQV1"

typedef struct {
    char magic[8];
    int32_t kind; /* KL_VAL_SEQUENCE / KL_VAL_OPTIONAL */
    int32_t elem; /* element dtype (KL_DTYPE_COUNT: unknown / nested values) */
    int64_t count;
} seq_hdr;

typedef struct {
    int32_t dtype, rank;
    int64_t dims[KL_MAX_DIMS];
    uint64_t offset, nbytes; /* from the start of the value */
} seq_ent;

static size_t al8(size_t x) { return (x + 7) & ~(size_t)7; }

int kl_seq_new(int kind, kl_dtype elem, const kl_tensor *const *elems, int64_t n, kl_tensor **out, kl_err *e) {
    *out = NULL;
    if (kind != KL_VAL_SEQUENCE && kind != KL_VAL_OPTIONAL)
        return kl_err_set(e, KL_EINVAL, "not a sequence or optional kind");
    if (n < 0 || (kind == KL_VAL_OPTIONAL && n > 1) || n > ((int64_t)1 << 32))
        return kl_err_set(e, KL_ERANGE, "%lld elements", (long long)n);
    size_t bytes = sizeof(seq_hdr) + (size_t)n * sizeof(seq_ent);
    for (int64_t i = 0; i < n; i++) {
        if (!kl_tensor_is_contiguous(elems[i]))
            return kl_err_set(e, KL_EINVAL, "element %lld is not contiguous", (long long)i);
        bytes += al8((size_t)kl_tensor_numel(elems[i]) * kl_dtype_size(elems[i]->dtype));
    }
    int64_t nb = (int64_t)bytes;
    int rc = kl_tensor_new(KL_U8, 1, &nb, KL_TAG_ACTIVATIONS, out, e);
    if (rc) return rc;
    char *b = (*out)->data;
    seq_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, sizeof h.magic);
    h.kind = kind;
    h.elem = n ? (int32_t)elems[0]->dtype : (int32_t)elem;
    h.count = n;
    memcpy(b, &h, sizeof h);
    size_t off = sizeof(seq_hdr) + (size_t)n * sizeof(seq_ent);
    for (int64_t i = 0; i < n; i++) {
        const kl_tensor *t = elems[i];
        seq_ent en;
        memset(&en, 0, sizeof en);
        en.dtype = (int32_t)t->dtype;
        en.rank = t->rank;
        memcpy(en.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
        en.offset = off;
        en.nbytes = (uint64_t)kl_tensor_numel(t) * kl_dtype_size(t->dtype);
        memcpy(b + sizeof(seq_hdr) + (size_t)i * sizeof(seq_ent), &en, sizeof en);
        if (en.nbytes) memcpy(b + off, t->data, en.nbytes);
        off += al8(en.nbytes);
    }
    return KL_OK;
}

int kl_seq_check(const kl_tensor *v, int *kind, kl_dtype *elem, int64_t *count, kl_err *e) {
    seq_hdr h;
    if (!v || v->dtype != KL_U8 || v->rank != 1 || !kl_tensor_is_contiguous(v) || (size_t)v->dims[0] < sizeof h)
        return kl_err_set(e, KL_ETYPE, "not a sequence or optional value");
    size_t len = (size_t)v->dims[0];
    const char *b = v->data;
    memcpy(&h, b, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof h.magic) || (h.kind != KL_VAL_SEQUENCE && h.kind != KL_VAL_OPTIONAL) ||
        h.count < 0 || (h.kind == KL_VAL_OPTIONAL && h.count > 1) ||
        (uint64_t)h.count > (len - sizeof h) / sizeof(seq_ent) || h.elem < 0 || h.elem > KL_DTYPE_COUNT)
        return kl_err_set(e, KL_EINVAL, "not a valid sequence or optional value (%zu bytes)", len);
    for (int64_t i = 0; i < h.count; i++) {
        seq_ent en;
        memcpy(&en, b + sizeof h + (size_t)i * sizeof en, sizeof en);
        int64_t numel = 1;
        int bad = en.dtype < 0 || en.dtype >= KL_DTYPE_COUNT || en.rank < 0 || en.rank > KL_MAX_DIMS;
        for (int d = 0; !bad && d < en.rank; d++) {
            bad = en.dims[d] < 0 || (en.dims[d] && numel > INT64_MAX / 16 / en.dims[d]);
            numel *= bad ? 1 : en.dims[d];
        }
        if (bad || en.nbytes != (uint64_t)numel * kl_dtype_size((kl_dtype)en.dtype) || en.offset > len ||
            len - en.offset < en.nbytes)
            return kl_err_set(e, KL_EINVAL, "sequence element %lld: bad entry", (long long)i);
    }
    if (kind) *kind = h.kind;
    if (elem) *elem = (kl_dtype)h.elem;
    if (count) *count = h.count;
    return KL_OK;
}

int kl_seq_at(const kl_tensor *v, int64_t i, kl_tensor *view, kl_err *e) {
    int64_t n;
    int rc = kl_seq_check(v, NULL, NULL, &n, e);
    if (rc) return rc;
    if (i < 0 || i >= n) return kl_err_set(e, KL_ERANGE, "element %lld of %lld", (long long)i, (long long)n);
    seq_ent en;
    memcpy(&en, (const char *)v->data + sizeof(seq_hdr) + (size_t)i * sizeof en, sizeof en);
    memset(view, 0, sizeof *view);
    view->dtype = (kl_dtype)en.dtype;
    view->rank = en.rank;
    memcpy(view->dims, en.dims, sizeof(int64_t) * (size_t)en.rank);
    kl_tensor_contiguous_strides(view->rank, view->dims, view->strides);
    view->nbytes = (size_t)en.nbytes;
    view->data = (char *)v->data + en.offset;
    view->owns = 0;
    return KL_OK;
}

int kl_seq_is_value(const kl_tensor *v) {
    return v && v->dtype == KL_U8 && v->rank == 1 && (size_t)v->dims[0] >= sizeof(seq_hdr) && v->data &&
        !memcmp(v->data, MAGIC, 8);
}
