/* kl_tensor basics: dtypes, f16/bf16 conversion, creation, views (slice,
 * transpose, reshape), contiguous copies and element access. */
#include "keel/tensor.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * Dtypes
 * ================================================================== */

static const struct { const char *name; size_t size; } DT[KL_DTYPE_COUNT] = {
    [KL_F32] = {"float32", 4}, [KL_F16] = {"float16", 2}, [KL_BF16] = {"bfloat16", 2},
    [KL_F64] = {"float64", 8}, [KL_I8] = {"int8", 1},     [KL_I16] = {"int16", 2},
    [KL_I32] = {"int32", 4},   [KL_I64] = {"int64", 8},   [KL_U8] = {"uint8", 1},
    [KL_U16] = {"uint16", 2},  [KL_U32] = {"uint32", 4},  [KL_U64] = {"uint64", 8},
    [KL_BOOL] = {"bool", 1},
};

size_t kl_dtype_size(kl_dtype dt) {
    return (unsigned)dt < KL_DTYPE_COUNT ? DT[dt].size : 0;
}

const char *kl_dtype_name(kl_dtype dt) {
    return (unsigned)dt < KL_DTYPE_COUNT ? DT[dt].name : "invalid";
}

int kl_dtype_parse(const char *name, kl_dtype *out) {
    static const struct { const char *s; kl_dtype d; } alias[] = {
        {"f32", KL_F32}, {"float", KL_F32}, {"f16", KL_F16}, {"half", KL_F16},
        {"bf16", KL_BF16}, {"f64", KL_F64}, {"double", KL_F64}, {"i8", KL_I8},
        {"i16", KL_I16}, {"i32", KL_I32}, {"int", KL_I32}, {"i64", KL_I64},
        {"long", KL_I64}, {"u8", KL_U8}, {"u16", KL_U16}, {"u32", KL_U32},
        {"u64", KL_U64}, {"b8", KL_BOOL}, {"boolean", KL_BOOL},
    };
    if (!name) return KL_EINVAL;
    for (int i = 0; i < KL_DTYPE_COUNT; i++)
        if (strcmp(name, DT[i].name) == 0) { *out = (kl_dtype)i; return KL_OK; }
    for (size_t i = 0; i < KL_ARRAY_LEN(alias); i++)
        if (strcmp(name, alias[i].s) == 0) { *out = alias[i].d; return KL_OK; }
    return KL_EINVAL;
}

int kl_dtype_is_float(kl_dtype dt) {
    return dt == KL_F32 || dt == KL_F16 || dt == KL_BF16 || dt == KL_F64;
}
int kl_dtype_is_int(kl_dtype dt) {
    return (dt >= KL_I8 && dt <= KL_I64) || (dt >= KL_U8 && dt <= KL_U64);
}
int kl_dtype_is_signed(kl_dtype dt) {
    return kl_dtype_is_float(dt) || (dt >= KL_I8 && dt <= KL_I64);
}

/* ==================================================================
 * f16 / bf16
 * ================================================================== */

float kl_f16_to_f32(uint16_t h) {
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) u = s;
        else { float f = (float)m * 0x1p-24f; memcpy(&u, &f, 4); u |= s; }
    } else if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    float f; memcpy(&f, &u, 4); return f;
#endif
}

uint16_t kl_f32_to_f16(float f) {
#ifdef __F16C__
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000; int32_t e = (int32_t)((u >> 23) & 0xff); uint32_t m = u & 0x7fffff;
    if (e == 255) return (uint16_t)(s | 0x7c00 | (m ? 0x200 | (m >> 13) : 0));
    e -= 112;
    if (e >= 31) return (uint16_t)(s | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)s;
        m |= 0x800000; int sh = 14 - e; uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(s | r);
#endif
}

float kl_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}

uint16_t kl_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

void kl_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = kl_f16_to_f32(src[i]);
}

void kl_f32_to_f16_n(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = kl_f32_to_f16(src[i]);
}

void kl_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kl_bf16_to_f32(src[i]);
}

void kl_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kl_f32_to_bf16(src[i]);
}

/* ==================================================================
 * Shapes
 * ================================================================== */

int64_t kl_shape_numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] && n > INT64_MAX / dims[i]) return -1;
        n *= dims[i];
    }
    return n;
}

void kl_tensor_contiguous_strides(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) { strides[i] = s; s *= dims[i] > 0 ? dims[i] : 1; }
}

const char *kl_shape_str(int rank, const int64_t *dims, char *buf, size_t n) {
    size_t o = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    o += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

/* ==================================================================
 * Creation
 * ================================================================== */

static int check_shape(kl_dtype dt, int rank, const int64_t *dims, int64_t *numel, kl_err *e) {
    if ((unsigned)dt >= KL_DTYPE_COUNT) return kl_err_set(e, KL_ETYPE, "invalid dtype %d", (int)dt);
    if (rank < 0 || rank > KL_MAX_DIMS)
        return kl_err_set(e, KL_ESHAPE, "rank %d out of range 0..%d", rank, KL_MAX_DIMS);
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0) return kl_err_set(e, KL_ESHAPE, "negative dimension %lld at axis %d", (long long)dims[i], i);
    int64_t n = kl_shape_numel(rank, dims);
    if (n < 0 || (uint64_t)n > (uint64_t)(SIZE_MAX / 2) / kl_dtype_size(dt))
        return kl_err_set(e, KL_ERANGE, "tensor size overflows");
    *numel = n;
    return KL_OK;
}

void kl_tensor_view_init(kl_tensor *t, kl_dtype dt, int rank, const int64_t *dims, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    kl_tensor_contiguous_strides(rank, t->dims, t->strides);
    t->nbytes = (size_t)kl_shape_numel(rank, t->dims) * kl_dtype_size(dt);
    t->data = data;
    t->tag = KL_TAG_OTHER;
}

static kl_tensor *alloc_struct(kl_dtype dt, int rank, const int64_t *dims) {
    kl_tensor *t = calloc(1, sizeof *t);
    if (t) kl_tensor_view_init(t, dt, rank, dims, NULL);
    return t;
}

static int tensor_new(kl_dtype dt, int rank, const int64_t *dims, kl_mem_tag tag, int zero,
                      kl_tensor **out, kl_err *e) {
    int64_t n;
    *out = NULL;
    int rc = check_shape(dt, rank, dims, &n, e);
    if (rc) return rc;
    kl_tensor *t = alloc_struct(dt, rank, dims);
    if (!t) return kl_err_set(e, KL_ENOMEM, "out of memory");
    t->data = kl_mem_alloc_e(t->nbytes, tag, e);
    if (!t->data) { free(t); return e ? e->code : KL_ENOMEM; }
    if (zero) memset(t->data, 0, t->nbytes);
    t->owns = 1;
    t->tag = tag;
    *out = t;
    return KL_OK;
}

int kl_tensor_new(kl_dtype dt, int rank, const int64_t *dims, kl_mem_tag tag, kl_tensor **out, kl_err *e) {
    return tensor_new(dt, rank, dims, tag, 1, out, e);
}

int kl_tensor_new_uninit(kl_dtype dt, int rank, const int64_t *dims, kl_mem_tag tag, kl_tensor **out, kl_err *e) {
    return tensor_new(dt, rank, dims, tag, 0, out, e);
}

int kl_tensor_wrap(kl_dtype dt, int rank, const int64_t *dims, void *data, kl_tensor **out, kl_err *e) {
    int64_t n;
    *out = NULL;
    int rc = check_shape(dt, rank, dims, &n, e);
    if (rc) return rc;
    kl_tensor *t = alloc_struct(dt, rank, dims);
    if (!t) return kl_err_set(e, KL_ENOMEM, "out of memory");
    t->data = data;
    *out = t;
    return KL_OK;
}

void kl_tensor_free(kl_tensor *t) {
    if (!t) return;
    if (t->owns) kl_mem_free(t->data);
    free(t);
}

int64_t kl_tensor_numel(const kl_tensor *t) {
    return kl_shape_numel(t->rank, t->dims);
}

int kl_tensor_is_contiguous(const kl_tensor *t) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        if (t->dims[i] == 1) continue;
        if (t->dims[i] == 0) return 1;
        if (t->strides[i] != s) return 0;
        s *= t->dims[i];
    }
    return 1;
}

/* ==================================================================
 * Views
 * ================================================================== */

static kl_tensor *view_of(const kl_tensor *t) {
    kl_tensor *v = malloc(sizeof *v);
    if (!v) return NULL;
    *v = *t;
    v->owns = 0;
    return v;
}

static void fix_nbytes(kl_tensor *v) {
    v->nbytes = kl_tensor_is_contiguous(v) ? (size_t)kl_tensor_numel(v) * kl_dtype_size(v->dtype) : 0;
}

int kl_tensor_slice(const kl_tensor *t, int axis, int64_t start, int64_t end, int64_t step,
                    kl_tensor **out, kl_err *e) {
    *out = NULL;
    if (axis < 0) axis += t->rank;
    if (axis < 0 || axis >= t->rank) return kl_err_set(e, KL_EINVAL, "slice axis %d out of range for rank %d", axis, t->rank);
    if (step == 0) return kl_err_set(e, KL_EINVAL, "slice step 0");
    int64_t d = t->dims[axis], s, en, n;
    if (step > 0) {
        s = start < 0 ? start + d : start; s = s < 0 ? 0 : s > d ? d : s;
        en = end < 0 ? end + d : end; en = en < 0 ? 0 : en > d ? d : en;
        n = en > s ? (en - s + step - 1) / step : 0;
    } else {
        s = start < 0 ? start + d : start; s = s < -1 ? -1 : s > d - 1 ? d - 1 : s;
        en = end < 0 ? end + d : end; en = en < -1 ? -1 : en > d - 1 ? d - 1 : en;
        n = s > en ? (s - en + (-step) - 1) / (-step) : 0;
    }
    kl_tensor *v = view_of(t);
    if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (n > 0) v->data = (char *)t->data + (ptrdiff_t)(s * t->strides[axis]) * (ptrdiff_t)kl_dtype_size(t->dtype);
    v->dims[axis] = n;
    v->strides[axis] = t->strides[axis] * step;
    fix_nbytes(v);
    *out = v;
    return KL_OK;
}

int kl_tensor_transpose(const kl_tensor *t, const int *perm, kl_tensor **out, kl_err *e) {
    *out = NULL;
    int p[KL_MAX_DIMS], seen[KL_MAX_DIMS] = {0};
    for (int i = 0; i < t->rank; i++) {
        p[i] = perm ? perm[i] : t->rank - 1 - i;
        if (p[i] < 0) p[i] += t->rank;
        if (p[i] < 0 || p[i] >= t->rank || seen[p[i]]++)
            return kl_err_set(e, KL_EINVAL, "invalid permutation for rank %d", t->rank);
    }
    kl_tensor *v = view_of(t);
    if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int i = 0; i < t->rank; i++) { v->dims[i] = t->dims[p[i]]; v->strides[i] = t->strides[p[i]]; }
    fix_nbytes(v);
    *out = v;
    return KL_OK;
}

/* Tries to express the reshape as a view; returns 1 and fills strides on success. */
static int reshape_strides(const kl_tensor *t, int rank, const int64_t *dims, int64_t *ns) {
    /* Group old dims and new dims into chunks with equal products; each old chunk
     * must be contiguous within itself. */
    int i = 0, j = 0;
    int orank = t->rank;
    while (i < orank || j < rank) {
        /* skip size-1 dims */
        if (j < rank && dims[j] == 1) { ns[j] = 1; j++; continue; }
        if (i < orank && t->dims[i] == 1) { i++; continue; }
        if (i >= orank || j >= rank) return 0;
        int i0 = i, j0 = j;
        int64_t po = t->dims[i++], pn = dims[j++];
        while (po != pn) {
            if (po < pn) { if (i >= orank) return 0; po *= t->dims[i++]; }
            else { if (j >= rank) return 0; pn *= dims[j++]; }
        }
        for (int k = i0; k < i - 1; k++)
            if (t->dims[k] != 1 && t->strides[k] != t->strides[k + 1] * t->dims[k + 1]) {
                /* allow interior size-1 dims */
                int kk = k + 1; int64_t st = t->strides[kk] * t->dims[kk];
                while (kk < i - 1 && t->dims[kk] == 1) { kk++; st = t->strides[kk] * t->dims[kk]; }
                if (t->strides[k] != st) return 0;
            }
        int64_t st = t->strides[i - 1];
        for (int k = j - 1; k >= j0; k--) { ns[k] = st; st *= dims[k]; }
    }
    return 1;
}

int kl_tensor_reshape(const kl_tensor *t, int rank, const int64_t *dims, kl_tensor **out, kl_err *e) {
    *out = NULL;
    if (rank < 0 || rank > KL_MAX_DIMS) return kl_err_set(e, KL_ESHAPE, "reshape: rank %d out of range", rank);
    int64_t nd[KL_MAX_DIMS], known = 1, n = kl_tensor_numel(t);
    int infer = -1;
    for (int i = 0; i < rank; i++) {
        nd[i] = dims[i];
        if (dims[i] == -1) {
            if (infer >= 0) return kl_err_set(e, KL_ESHAPE, "reshape: more than one -1");
            infer = i;
        } else if (dims[i] < 0) return kl_err_set(e, KL_ESHAPE, "reshape: negative dimension");
        else known *= dims[i];
    }
    if (infer >= 0) {
        if (known == 0 || n % known) goto mismatch;
        nd[infer] = n / known;
    }
    if (kl_shape_numel(rank, nd) != n) goto mismatch;
    kl_tensor *v = view_of(t);
    if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
    v->rank = rank;
    for (int i = 0; i < rank; i++) v->dims[i] = nd[i];
    if (n == 0 || reshape_strides(t, rank, nd, v->strides)) {
        if (n == 0) kl_tensor_contiguous_strides(rank, nd, v->strides);
        fix_nbytes(v);
        *out = v;
        return KL_OK;
    }
    free(v);
    kl_tensor *c;
    int rc = kl_tensor_contiguous(t, t->tag, &c, e);
    if (rc) return rc;
    c->rank = rank;
    for (int i = 0; i < rank; i++) c->dims[i] = nd[i];
    kl_tensor_contiguous_strides(rank, nd, c->strides);
    *out = c;
    return KL_OK;
mismatch: {
        char a[128], b[128];
        return kl_err_set(e, KL_ESHAPE, "reshape: cannot reshape %s (%lld elements) to %s",
                          kl_shape_str(t->rank, t->dims, a, sizeof a), (long long)n,
                          kl_shape_str(rank, dims, b, sizeof b));
    }
}

int kl_tensor_copy(kl_tensor *dst, const kl_tensor *src, kl_err *e) {
    if (dst->dtype != src->dtype) return kl_err_set(e, KL_ETYPE, "copy: dtype %s vs %s", kl_dtype_name(dst->dtype), kl_dtype_name(src->dtype));
    if (dst->rank != src->rank) goto shape;
    for (int i = 0; i < src->rank; i++) if (dst->dims[i] != src->dims[i]) goto shape;
    kl_copy_strided(kl_dtype_size(src->dtype), src->rank, src->dims, src->data, src->strides,
                    dst->data, dst->strides, NULL);
    return KL_OK;
shape: {
        char a[128], b[128];
        return kl_err_set(e, KL_ESHAPE, "copy: shape %s vs %s", kl_shape_str(dst->rank, dst->dims, a, sizeof a),
                          kl_shape_str(src->rank, src->dims, b, sizeof b));
    }
}

int kl_tensor_contiguous(const kl_tensor *t, kl_mem_tag tag, kl_tensor **out, kl_err *e) {
    kl_tensor *c;
    *out = NULL;
    int rc = kl_tensor_new_uninit(t->dtype, t->rank, t->dims, tag, &c, e);
    if (rc) return rc;
    rc = kl_tensor_copy(c, t, e);
    if (rc) { kl_tensor_free(c); return rc; }
    *out = c;
    return KL_OK;
}

/* The value at p of a dtype, as double (NaN for a dtype without one). */
static double value_f64(kl_dtype dt, const char *p) {
    switch (dt) {
    case KL_F32: { float v; memcpy(&v, p, 4); return v; }
    case KL_F16: { uint16_t v; memcpy(&v, p, 2); return kl_f16_to_f32(v); }
    case KL_BF16: { uint16_t v; memcpy(&v, p, 2); return kl_bf16_to_f32(v); }
    case KL_F64: { double v; memcpy(&v, p, 8); return v; }
    case KL_I8: return *(const int8_t *)p;
    case KL_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case KL_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case KL_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case KL_U8: case KL_BOOL: return *(const uint8_t *)p;
    case KL_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case KL_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case KL_U64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return NAN;
    }
}

double kl_tensor_get_f64(const kl_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->rank; i++) off += idx[i] * t->strides[i];
    return value_f64(t->dtype, (const char *)t->data + off * (int64_t)kl_dtype_size(t->dtype));
}

double kl_tensor_flat_f64(const kl_tensor *t, int64_t i) {
    return value_f64(t->dtype, (const char *)t->data + (size_t)i * kl_dtype_size(t->dtype));
}
