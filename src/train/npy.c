/* Minimal .npy reader for training data (v1/v2/v3, little-endian numeric
 * dtypes, C order) converting to float32 features or int64/float labels.
 * Stop-gap until the tensor layer's kl_npy_load lands; then this becomes a
 * thin conversion over it. */
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"
#include "train/train_data.h"

int tr_npy_read(const char *path, tr_array *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6)) { rc = kl_err_set(e, KL_EPARSE, "%s: not a .npy file", path); goto done; }
    int major = (uint8_t)buf[6];
    size_t hl, ho;
    if (major == 1) { hl = (uint8_t)buf[8] | (size_t)(uint8_t)buf[9] << 8; ho = 10; }
    else { hl = (uint8_t)buf[8] | (size_t)(uint8_t)buf[9] << 8 | (size_t)(uint8_t)buf[10] << 16 | (size_t)(uint8_t)buf[11] << 24; ho = 12; }
    if (ho + hl > len) { rc = kl_err_set(e, KL_EPARSE, "%s: header beyond the file", path); goto done; }
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%.*s", (int)KL_MIN(hl, sizeof hdr - 1), buf + ho);
    char *d = strstr(hdr, "'descr'"), *f = strstr(hdr, "'fortran_order'"), *s = strstr(hdr, "'shape'");
    if (!d || !f || !s) { rc = kl_err_set(e, KL_EPARSE, "%s: header lacks descr/fortran_order/shape", path); goto done; }
    if (strncmp(strchr(f, ':') + 1, " False", 6) && strncmp(strchr(f, ':') + 1, "False", 5)) { rc = kl_err_set(e, KL_EUNSUPPORTED, "%s: fortran_order arrays are not supported", path); goto done; }
    char *q = strchr(d + 7, '\'');
    if (!q) { rc = kl_err_set(e, KL_EPARSE, "%s: bad descr", path); goto done; }
    char descr[16];
    snprintf(descr, sizeof descr, "%.*s", (int)strcspn(q + 1, "'"), q + 1);
    struct { const char *n; int kind; int size; } types[] = {
        {"<f4", 'f', 4}, {"<f8", 'f', 8}, {"<i8", 'i', 8}, {"<i4", 'i', 4}, {"<i2", 'i', 2}, {"|i1", 'i', 1},
        {"|u1", 'u', 1}, {"<u2", 'u', 2}, {"<u4", 'u', 4}, {"<u8", 'u', 8}, {"|b1", 'u', 1}};
    int ti = -1;
    for (size_t i = 0; i < KL_ARRAY_LEN(types); i++)
        if (!strcmp(descr, types[i].n)) ti = (int)i;
    if (ti < 0) { rc = kl_err_set(e, KL_EUNSUPPORTED, "%s: dtype '%s' is not supported (float/int little-endian)", path, descr); goto done; }
    char *p = strchr(s, '(');
    if (!p) { rc = kl_err_set(e, KL_EPARSE, "%s: bad shape", path); goto done; }
    p++;
    int64_t n = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || out->rank >= 8) { rc = kl_err_set(e, KL_EPARSE, "%s: bad shape", path); goto done; }
        out->dims[out->rank++] = v;
        n *= v;
        p = end;
    }
    size_t es = (size_t)types[ti].size;
    if (ho + hl + (size_t)n * es > len) { rc = kl_err_set(e, KL_EPARSE, "%s: %lld elements need %zu bytes, the file has %zu", path, (long long)n, (size_t)n * es, len - ho - hl); goto done; }
    out->n = n;
    out->is_int = types[ti].kind != 'f';
    out->f = kl_mem_alloc_e((size_t)(n ? n : 1) * sizeof(double), KL_TAG_DATASET, e);
    if (!out->f) { rc = KL_ENOMEM; goto done; }
    const unsigned char *src = (const unsigned char *)buf + ho + hl;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *x = src + (size_t)i * es;
        double v = 0;
        switch (ti) {
        case 0: { float t; memcpy(&t, x, 4); v = t; break; }
        case 1: memcpy(&v, x, 8); break;
        case 2: { int64_t t; memcpy(&t, x, 8); v = (double)t; break; }
        case 3: { int32_t t; memcpy(&t, x, 4); v = t; break; }
        case 4: { int16_t t; memcpy(&t, x, 2); v = t; break; }
        case 5: v = (int8_t)x[0]; break;
        case 6: case 10: v = x[0]; break;
        case 7: { uint16_t t; memcpy(&t, x, 2); v = t; break; }
        case 8: { uint32_t t; memcpy(&t, x, 4); v = t; break; }
        case 9: { uint64_t t; memcpy(&t, x, 8); v = (double)t; break; }
        }
        out->f[i] = v;
    }
done:
    kl_mem_free(buf);
    if (rc) { kl_mem_free(out->f); out->f = NULL; }
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
