/* NumPy .npy reading (format versions 1.0, 2.0, 3.0; little and big endian;
 * C order) and writing (atomic, version 1.0 unless the header needs 2.0). */
#include "keel/tensor.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *code; kl_dtype dt; } DESCR[] = {
    {"f4", KL_F32}, {"f2", KL_F16}, {"f8", KL_F64}, {"i1", KL_I8}, {"i2", KL_I16}, {"i4", KL_I32},
    {"i8", KL_I64}, {"u1", KL_U8},  {"u2", KL_U16}, {"u4", KL_U32}, {"u8", KL_U64}, {"b1", KL_BOOL},
};

/* ==================================================================
 * Header parsing: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * ================================================================== */

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && isspace((unsigned char)*p)) p++;
    return p;
}

/* Finds the value after 'key': in the dict text; NULL when missing, or when
 * the header ends before the value (callers read at least one byte of it). */
static const char *find_key(const char *h, const char *end, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = h; p + kl + 2 <= end; p++) {
        if ((*p == '\'' || *p == '"') && p[kl + 1] == *p && memcmp(p + 1, key, kl) == 0) {
            const char *q = skip_ws(p + kl + 2, end);
            if (q < end && *q == ':') {
                const char *v = skip_ws(q + 1, end);
                return v < end ? v : NULL;
            }
        }
    }
    return NULL;
}

static int parse_header(const char *name, const char *h, size_t hl, kl_dtype *dt, int *swap, int *rank, int64_t *dims,
                        kl_err *e) {
    const char *end = h + hl;
    const char *p = skip_ws(h, end);
    if (p >= end || *p != '{') return kl_err_set(e, KL_EPARSE, "%s: npy header is not a dict", name);
    /* descr */
    const char *d = find_key(h, end, "descr");
    if (!d) return kl_err_set(e, KL_EPARSE, "%s: npy header has no 'descr'", name);
    if (*d != '\'' && *d != '"') return kl_err_set(e, KL_EPARSE, "%s: npy 'descr' is not a simple dtype string (structured arrays are not supported)", name);
    char q = *d++;
    const char *de = memchr(d, q, (size_t)(end - d));
    if (!de || de - d < 2 || de - d > 8) return kl_err_set(e, KL_EPARSE, "%s: npy 'descr' is malformed", name);
    char bo = d[0];
    char code[8] = {0};
    memcpy(code, d + 1, (size_t)(de - d - 1));
    if (bo != '<' && bo != '>' && bo != '|' && bo != '=')
        return kl_err_set(e, KL_EPARSE, "%s: npy 'descr' '%.*s' has no byte order", name, (int)(de - d), d);
    int found = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(DESCR); i++)
        if (strcmp(code, DESCR[i].code) == 0) { *dt = DESCR[i].dt; found = 1; }
    if (!found) return kl_err_set(e, KL_EUNSUPPORTED, "%s: npy dtype '%.*s' is not supported", name, (int)(de - d), d);
    *swap = bo == '>' && kl_dtype_size(*dt) > 1;
    /* fortran_order */
    const char *f = find_key(h, end, "fortran_order");
    if (!f) return kl_err_set(e, KL_EPARSE, "%s: npy header has no 'fortran_order'", name);
    if ((size_t)(end - f) >= 4 && memcmp(f, "True", 4) == 0)
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: npy fortran_order True is not supported", name);
    if ((size_t)(end - f) < 5 || memcmp(f, "False", 5) != 0)
        return kl_err_set(e, KL_EPARSE, "%s: npy 'fortran_order' is not True/False", name);
    /* shape */
    const char *s = find_key(h, end, "shape");
    if (!s) return kl_err_set(e, KL_EPARSE, "%s: npy header has no 'shape'", name);
    if (*s != '(') return kl_err_set(e, KL_EPARSE, "%s: npy 'shape' is not a tuple", name);
    s++;
    int r = 0;
    for (;;) {
        s = skip_ws(s, end);
        if (s >= end) return kl_err_set(e, KL_EPARSE, "%s: npy 'shape' tuple is not closed", name);
        if (*s == ')') break;
        if (!isdigit((unsigned char)*s)) return kl_err_set(e, KL_EPARSE, "%s: npy 'shape' has a non-integer entry", name);
        if (r >= KL_MAX_DIMS) return kl_err_set(e, KL_EUNSUPPORTED, "%s: npy rank above %d", name, KL_MAX_DIMS);
        int64_t v = 0;
        while (s < end && isdigit((unsigned char)*s)) {
            if (v > (INT64_MAX - 9) / 10) return kl_err_set(e, KL_ERANGE, "%s: npy dimension overflows", name);
            v = v * 10 + (*s++ - '0');
        }
        while (s < end && (*s == 'L' || *s == 'l')) s++;
        dims[r++] = v;
        s = skip_ws(s, end);
        if (s < end && *s == ',') s++;
        else if (s < end && *s != ')') return kl_err_set(e, KL_EPARSE, "%s: npy 'shape' is malformed", name);
    }
    *rank = r;
    return KL_OK;
}

int kl_npy_load_mem(const void *bytes, size_t len, const char *name, kl_tensor **out, kl_err *e) {
    const unsigned char *b = bytes;
    *out = NULL;
    if (!name) name = "(memory)";
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return kl_err_set(e, KL_EPARSE, "%s: not a .npy file (bad magic)", name);
    int major = b[6];
    size_t hl, ho;
    if (major == 1) { hl = (size_t)b[8] | (size_t)b[9] << 8; ho = 10; }
    else if (major == 2 || major == 3) {
        if (len < 12) return kl_err_set(e, KL_EPARSE, "%s: truncated .npy header", name);
        hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        ho = 12;
    } else return kl_err_set(e, KL_EUNSUPPORTED, "%s: .npy format version %d.%d is not supported", name, major, b[7]);
    if (hl > len - ho) return kl_err_set(e, KL_EPARSE, "%s: .npy header length %zu exceeds the file", name, hl);
    kl_dtype dt = KL_F32;
    int swap = 0, rank = 0;
    int64_t dims[KL_MAX_DIMS];
    int rc = parse_header(name, (const char *)b + ho, hl, &dt, &swap, &rank, dims, e);
    if (rc) return rc;
    int64_t n = kl_shape_numel(rank, dims);
    size_t es = kl_dtype_size(dt);
    size_t off = ho + hl;
    if (n < 0 || (uint64_t)n > (len - off) / es)
        return kl_err_set(e, KL_EPARSE, "%s: .npy data is truncated (%zu bytes for %lld elements of %s)", name, len - off,
                          (long long)n, kl_dtype_name(dt));
    if ((size_t)n * es != len - off)
        return kl_err_set(e, KL_EPARSE, "%s: .npy has %zu trailing bytes after the data", name, len - off - (size_t)n * es);
    kl_tensor *t;
    rc = kl_tensor_new_uninit(dt, rank, dims, KL_TAG_OTHER, &t, e);
    if (rc) return rc;
    memcpy(t->data, b + off, t->nbytes);
    if (swap) {
        unsigned char *p = t->data;
        for (int64_t i = 0; i < n; i++, p += es)
            for (size_t k = 0; k < es / 2; k++) { unsigned char tmp = p[k]; p[k] = p[es - 1 - k]; p[es - 1 - k] = tmp; }
    }
    if (dt == KL_BOOL) {
        unsigned char *p = t->data;
        for (int64_t i = 0; i < n; i++) p[i] = p[i] != 0;
    }
    *out = t;
    return KL_OK;
}

int kl_npy_load(const char *path, kl_tensor **out, kl_err *e) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    rc = kl_npy_load_mem(buf, len, path, out, e);
    kl_mem_free(buf);
    return rc;
}

int kl_npy_save(const char *path, const kl_tensor *t, kl_err *e) {
    const char *code = NULL;
    for (size_t i = 0; i < KL_ARRAY_LEN(DESCR); i++) if (DESCR[i].dt == t->dtype) code = DESCR[i].code;
    if (!code) return kl_err_set(e, KL_EUNSUPPORTED, "%s: dtype %s cannot be stored in .npy", path, kl_dtype_name(t->dtype));
    char dict[512];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                      kl_dtype_size(t->dtype) == 1 ? '|' : '<', code);
    for (int i = 0; i < t->rank; i++)
        dl += snprintf(dict + dl, sizeof dict - (size_t)dl, "%s%lld%s", i ? ", " : "", (long long)t->dims[i],
                       t->rank == 1 ? "," : "");
    dl += snprintf(dict + dl, sizeof dict - (size_t)dl, "), }");
    /* header: magic(6) ver(2) len(2) dict, spaces, '\n'; total multiple of 64 */
    size_t total = 10 + (size_t)dl + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t hl = padded - 10;
    int64_t n = kl_tensor_numel(t);
    size_t es = kl_dtype_size(t->dtype), data = (size_t)n * es;
    kl_err ae = {0};
    char *buf = kl_mem_alloc_e(padded + data, KL_TAG_WORKSPACE, &ae);
    if (!buf) return kl_err_set(e, KL_ENOMEM, "%s: %s", path, ae.msg);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + 10, dict, (size_t)dl);
    memset(buf + 10 + dl, ' ', hl - (size_t)dl - 1);
    buf[padded - 1] = '\n';
    if (n > 0) {
        if (kl_tensor_is_contiguous(t)) memcpy(buf + padded, t->data, data);
        else {
            int64_t ds[KL_MAX_DIMS];
            kl_tensor_contiguous_strides(t->rank, t->dims, ds);
            kl_copy_strided(es, t->rank, t->dims, t->data, t->strides, buf + padded, ds, NULL);
        }
    }
    int rc = kl_write_file_atomic(path, buf, padded + data, e);
    kl_mem_free(buf);
    return rc;
}
