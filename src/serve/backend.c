/* The serving layer's adapter to the ONNX runtime (include/keel/runtime.h):
 * load a session, describe its inputs/outputs, run it on request tensors,
 * plan its activation bytes. This is the only file of src/serve/ that uses
 * runtime.h and tensor.h; when the runtime is not part of the build yet the
 * adapter reports KL_EUNSUPPORTED for every model (the server still starts,
 * answers health, metrics and repository calls, and lists the models as
 * unavailable with that reason). */
#include "serve_int.h"

#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<keel/runtime.h>) && __has_include(<keel/tensor.h>)
#define SB_HAVE_RUNTIME 1
#endif
#endif

#ifdef SB_HAVE_RUNTIME
#include <keel/runtime.h>
#include <keel/tensor.h>

struct sb_session {
    kl_session *s;
};

int kl__sb_available(void) { return 1; }

static int to_sv(kl_dtype t, sv_dtype *out) {
    switch (t) {
    case KL_F32: *out = SV_FP32; return 0;
    case KL_F16: *out = SV_FP16; return 0;
    case KL_BF16: *out = SV_BF16; return 0;
    case KL_F64: *out = SV_FP64; return 0;
    case KL_I8: *out = SV_INT8; return 0;
    case KL_I16: *out = SV_INT16; return 0;
    case KL_I32: *out = SV_INT32; return 0;
    case KL_I64: *out = SV_INT64; return 0;
    case KL_U8: *out = SV_UINT8; return 0;
    case KL_U16: *out = SV_UINT16; return 0;
    case KL_U32: *out = SV_UINT32; return 0;
    case KL_U64: *out = SV_UINT64; return 0;
    case KL_BOOL: *out = SV_BOOL; return 0;
    default: return -1;
    }
}

static int to_kl(sv_dtype t, kl_dtype *out) {
    static const int map[SV_DTYPE_COUNT] = {
        [SV_BOOL] = KL_BOOL, [SV_UINT8] = KL_U8, [SV_UINT16] = KL_U16, [SV_UINT32] = KL_U32,
        [SV_UINT64] = KL_U64, [SV_INT8] = KL_I8, [SV_INT16] = KL_I16, [SV_INT32] = KL_I32,
        [SV_INT64] = KL_I64, [SV_FP16] = KL_F16, [SV_BF16] = KL_BF16, [SV_FP32] = KL_F32,
        [SV_FP64] = KL_F64, [SV_BYTES] = -1};
    if ((int)t < 0 || t >= SV_DTYPE_COUNT || map[t] < 0) return -1;
    *out = (kl_dtype)map[t];
    return 0;
}

int kl__sb_load(const char *path, int threads, sb_session **out, kl_err *e) {
    *out = NULL;
    sb_session *b = calloc(1, sizeof *b);
    if (!b) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_session_opts o = {0};
    o.threads = threads;
    o.opt_level = 1;
    int rc = kl_session_load(path, &o, &b->s, e);
    if (rc) { free(b); return rc; }
    *out = b;
    return KL_OK;
}

void kl__sb_free(sb_session *b) {
    if (!b) return;
    kl_session_free(b->s);
    free(b);
}

static int describe(const kl_value_info *vi, sv_io *io, const char *what, size_t i, kl_err *e) {
    memset(io, 0, sizeof *io);
    snprintf(io->name, sizeof io->name, "%s", vi->name ? vi->name : "");
    if (to_sv(vi->dtype, &io->dtype))
        return kl_err_set(e, KL_EUNSUPPORTED, "%s %zu (%s): dtype %s cannot be served", what, i,
                          io->name, kl_dtype_name(vi->dtype));
    if (vi->rank < 0 || vi->rank > SV_MAX_DIMS)
        return kl_err_set(e, KL_EUNSUPPORTED, "%s %zu (%s): rank %d", what, i, io->name, vi->rank);
    io->rank = vi->rank;
    for (int d = 0; d < vi->rank; d++) io->dims[d] = vi->dims[d] < 0 ? -1 : vi->dims[d];
    return KL_OK;
}

int kl__sb_describe(sb_session *b, sv_io *in, size_t *n_in, sv_io *out, size_t *n_out, kl_err *e) {
    size_t ni = kl_session_num_inputs(b->s), no = kl_session_num_outputs(b->s);
    if (ni > SV_MAX_IO || no > SV_MAX_IO)
        return kl_err_set(e, KL_EUNSUPPORTED, "model has %zu inputs and %zu outputs (at most %d each)",
                          ni, no, SV_MAX_IO);
    for (size_t i = 0; i < ni; i++) {
        int rc = describe(kl_session_input(b->s, i), &in[i], "input", i, e);
        if (rc) return rc;
    }
    for (size_t i = 0; i < no; i++) {
        int rc = describe(kl_session_output(b->s, i), &out[i], "output", i, e);
        if (rc) return rc;
    }
    *n_in = ni;
    *n_out = no;
    return KL_OK;
}

static void release_kl(void *t) { kl_tensor_free((kl_tensor *)t); }

static int wrap_inputs(const sv_tensor *in, size_t n_in, kl_tensor **kin, kl_err *e) {
    for (size_t i = 0; i < n_in; i++) {
        kl_dtype dt;
        if (to_kl(in[i].dtype, &dt))
            return kl_err_set(e, KL_ETYPE, "input %zu: datatype %s is not supported by the runtime", i,
                              kl__sv_dtype_name(in[i].dtype));
        int rc = kl_tensor_wrap(dt, in[i].rank, in[i].dims, in[i].data, &kin[i], e);
        if (rc) return rc;
    }
    return KL_OK;
}

int kl__sb_run(sb_session *b, const sv_tensor *in, size_t n_in, sv_tensor *out, size_t n_out, kl_err *e) {
    kl_tensor *kin[SV_MAX_IO] = {0}, *kout[SV_MAX_IO] = {0};
    int rc = wrap_inputs(in, n_in, kin, e);
    if (rc) goto fail;
    rc = kl_session_run(b->s, (const kl_tensor *const *)kin, n_in, kout, n_out, e);
    if (rc) goto fail;
    for (size_t i = 0; i < n_out; i++) {
        kl_tensor *t = kout[i];
        sv_tensor *o = &out[i];
        memset(o, 0, sizeof *o);
        if (!t || to_sv(t->dtype, &o->dtype) || t->rank > SV_MAX_DIMS || !kl_tensor_is_contiguous(t)) {
            rc = kl_err_set(e, KL_EINTERNAL, "output %zu: unexpected tensor from the runtime", i);
            for (size_t j = 0; j < i; j++) kl__sv_tensor_release(&out[j]);
            goto fail;
        }
        o->rank = t->rank;
        memcpy(o->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
        o->data = t->data;
        o->nbytes = (size_t)kl_tensor_numel(t) * kl_dtype_size(t->dtype);
        o->owner = t;
        o->release = release_kl;
        kout[i] = NULL;
    }
    rc = KL_OK;
fail:
    for (size_t i = 0; i < n_in; i++) kl_tensor_free(kin[i]);
    for (size_t i = 0; i < n_out; i++) kl_tensor_free(kout[i]);
    return rc;
}

int kl__sb_plan_bytes(sb_session *b, const sv_tensor *in, size_t n_in, uint64_t *bytes, kl_err *e) {
    kl_tensor *kin[SV_MAX_IO] = {0};
    *bytes = 0;
    int rc = wrap_inputs(in, n_in, kin, e);
    if (!rc) rc = kl_session_plan_bytes(b->s, (const kl_tensor *const *)kin, n_in, bytes, e);
    for (size_t i = 0; i < n_in; i++) kl_tensor_free(kin[i]);
    return rc;
}

#else /* no runtime in this build */

int kl__sb_available(void) { return 0; }

int kl__sb_load(const char *path, int threads, sb_session **out, kl_err *e) {
    *out = NULL;
    return kl_err_set(e, KL_EUNSUPPORTED,
                      "%s: the ONNX runtime (include/keel/runtime.h) is not part of this build", path);
}
void kl__sb_free(sb_session *s) { (void)s; }
int kl__sb_describe(sb_session *s, sv_io *in, size_t *n_in, sv_io *out, size_t *n_out, kl_err *e) {
    return kl_err_set(e, KL_EUNSUPPORTED, "no ONNX runtime in this build");
}
int kl__sb_run(sb_session *s, const sv_tensor *in, size_t n_in, sv_tensor *out, size_t n_out, kl_err *e) {
    return kl_err_set(e, KL_EUNSUPPORTED, "no ONNX runtime in this build");
}
int kl__sb_plan_bytes(sb_session *s, const sv_tensor *in, size_t n_in, uint64_t *bytes, kl_err *e) {
    *bytes = 0;
    return kl_err_set(e, KL_EUNSUPPORTED, "no ONNX runtime in this build");
}

#endif
