/* safetensors files (8-byte little-endian header length, JSON header,
 * raw little-endian tensors) for checkpoints and weight exchange; written
 * atomically with a PATH.sha256 beside them. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"

int kl__train_safetensors_write(const char *path, const tr_st_entry *t, int n, const char *meta_json, kl_err *e) {
    kl_buf h;
    kl_buf_init(&h);
    kl_buf_puts(&h, "{");
    if (meta_json) kl_buf_printf(&h, "\"__metadata__\":%s", meta_json);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t cnt = 1;
        kl_buf_printf(&h, "%s", (i || meta_json) ? "," : "");
        kl_buf_json_str(&h, t[i].name);
        kl_buf_puts(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].rank; d++) { kl_buf_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].dims[d]); cnt *= t[i].dims[d]; }
        kl_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + (uint64_t)cnt * 4));
        off += (uint64_t)cnt * 4;
    }
    kl_buf_puts(&h, "}");
    while (h.len % 8) kl_buf_puts(&h, " ");
    if (h.failed) { kl_buf_free(&h); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    kl_afile *f = NULL;
    kl_sha256 *sh = kl_sha256_new();
    int rc = kl_afile_open(path, &f, e);
    if (rc) goto done;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    kl_sha256_update(sh, len8, 8);
    kl_sha256_update(sh, h.data, h.len);
    if ((rc = kl_afile_write(f, len8, 8, e)) || (rc = kl_afile_write(f, h.data, h.len, e))) goto done;
    for (int i = 0; i < n; i++) {
        int64_t cnt = 1;
        for (int d = 0; d < t[i].rank; d++) cnt *= t[i].dims[d];
        kl_sha256_update(sh, t[i].data, (size_t)cnt * 4);
        if ((rc = kl_afile_write(f, t[i].data, (size_t)cnt * 4, e))) goto done;
    }
    rc = kl_afile_commit(f, e);
    f = NULL;
    if (rc) goto done;
    {
        uint8_t dg[32];
        char hex[65], line[400];
        kl_sha256_final(sh, dg);
        kl_sha256_hex(dg, hex);
        const char *base = strrchr(path, '/');
        snprintf(line, sizeof line, "%s  %s\n", hex, base ? base + 1 : path);
        char sp[4200];
        snprintf(sp, sizeof sp, "%s.sha256", path);
        rc = kl_write_file_atomic(sp, line, strlen(line), e);
    }
done:
    kl_afile_abort(f);
    kl_sha256_free(sh);
    kl_buf_free(&h);
    return rc;
}

/* Bytes per element of a safetensors dtype; 0 when unknown. */
static size_t st_dtype_size(const char *dt) {
    static const struct { const char *n; size_t sz; } T[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < KL_ARRAY_LEN(T); i++) if (!strcmp(dt, T[i].n)) return T[i].sz;
    return 0;
}

/* A JSON number that is a whole value in [0, 2^53]; -1 otherwise. */
static int64_t st_uint(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d) return -1;
    return (int64_t)d;
}

/* One header entry: dtype known, shape of whole numbers, offsets inside the
 * data and exactly numel * dtype size bytes long. */
static int st_entry(const char *name, const cJSON *it, size_t dlen, int *rank, int64_t *dims, size_t *a, size_t *b, kl_err *e) {
    const char *tn = it->string ? it->string : "?";
    cJSON *dt = cJSON_GetObjectItem(it, "dtype"), *sh = cJSON_GetObjectItem(it, "shape"), *of = cJSON_GetObjectItem(it, "data_offsets");
    if (!cJSON_IsObject(it) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': bad header entry (needs dtype, shape, data_offsets)", name, tn);
    size_t es = st_dtype_size(dt->valuestring);
    if (!es) return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': unknown dtype '%s'", name, tn, dt->valuestring);
    *rank = cJSON_GetArraySize(sh);
    if (*rank > 8) return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': rank %d above 8", name, tn, *rank);
    uint64_t numel = 1;
    for (int d = 0; d < *rank; d++) {
        int64_t v = st_uint(cJSON_GetArrayItem(sh, d));
        if (v < 0) return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': shape[%d] is not a whole number >= 0", name, tn, d);
        dims[d] = v;
        if (v && numel > (UINT64_MAX / es) / (uint64_t)v) return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': shape overflows", name, tn);
        numel *= (uint64_t)v;
    }
    int64_t oa = st_uint(cJSON_GetArrayItem(of, 0)), ob = st_uint(cJSON_GetArrayItem(of, 1));
    if (oa < 0 || ob < oa || (uint64_t)ob > dlen) return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': offsets beyond the file", name, tn);
    if ((uint64_t)(ob - oa) != numel * es)
        return kl_err_set(e, KL_EPARSE, "%s: tensor '%s': %lld bytes for %llu elements of %s", name, tn, (long long)(ob - oa),
                          (unsigned long long)numel, dt->valuestring);
    *a = (size_t)oa;
    *b = (size_t)ob;
    return KL_OK;
}

int kl__train_safetensors_read_mem(const void *bytes, size_t len, const char *name, tr_st_fn fn, void *ctx,
                                char **meta_out, kl_err *e) {
    const unsigned char *buf = bytes;
    cJSON *j = NULL;
    int rc = KL_OK;
    if (meta_out) *meta_out = NULL;
    uint64_t hl = 0;
    if (len < 8) return kl_err_set(e, KL_EPARSE, "%s: not a safetensors file (%zu bytes)", name, len);
    for (int i = 0; i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
    if (hl > len - 8) return kl_err_set(e, KL_EPARSE, "%s: header length %llu beyond the file", name, (unsigned long long)hl);
    void *jv = NULL;
    if ((rc = kl_json_parse((const char *)buf + 8, (size_t)hl, name, &jv, e))) return rc; /* the core reader: errors say where */
    j = jv;
    if (!cJSON_IsObject(j)) { rc = kl_err_set(e, KL_EPARSE, "%s: header is not a JSON object", name); goto done; }
    const char *data = (const char *)buf + 8 + hl;
    size_t dlen = len - 8 - (size_t)hl;
    for (cJSON *it = j->child; it; it = it->next) {
        if (it->string && !strcmp(it->string, "__metadata__")) {
            if (meta_out && !*meta_out) *meta_out = cJSON_PrintUnformatted(it);
            continue;
        }
        int rank = 0;
        int64_t dims[8];
        size_t a = 0, b = 0;
        if ((rc = st_entry(name, it, dlen, &rank, dims, &a, &b, e))) goto done;
        if ((rc = fn(ctx, it->string, cJSON_GetObjectItem(it, "dtype")->valuestring, rank, dims, data + a, b - a, e))) goto done;
    }
done:
    cJSON_Delete(j);
    if (rc && meta_out) { free(*meta_out); *meta_out = NULL; }
    return rc;
}

int kl__train_safetensors_read(const char *path, tr_st_fn fn, void *ctx, char **meta_out, kl_err *e) {
    char *buf = NULL;
    size_t len = 0;
    if (meta_out) *meta_out = NULL;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    rc = kl__train_safetensors_read_mem(buf, len, path, fn, ctx, meta_out, e);
    kl_mem_free(buf);
    return rc;
}
