/* safetensors files (8-byte little-endian header length, JSON header,
 * raw little-endian tensors) for checkpoints and weight exchange; written
 * atomically with a PATH.sha256 beside them. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"

int tr_safetensors_write(const char *path, const tr_st_entry *t, int n, const char *meta_json, kl_err *e) {
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

int tr_safetensors_read(const char *path, tr_st_fn fn, void *ctx, char **meta_out, kl_err *e) {
    char *buf = NULL;
    size_t len = 0;
    cJSON *j = NULL;
    if (meta_out) *meta_out = NULL;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    uint64_t hl = 0;
    if (len < 8) { rc = kl_err_set(e, KL_EPARSE, "%s: not a safetensors file (%zu bytes)", path, len); goto done; }
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(uint8_t)buf[i] << (8 * i);
    if (hl > len - 8) { rc = kl_err_set(e, KL_EPARSE, "%s: header length %llu beyond the file", path, (unsigned long long)hl); goto done; }
    j = cJSON_ParseWithLength(buf + 8, (size_t)hl);
    if (!cJSON_IsObject(j)) { rc = kl_err_set(e, KL_EPARSE, "%s: header is not a JSON object", path); goto done; }
    const char *data = buf + 8 + hl;
    size_t dlen = len - 8 - (size_t)hl;
    for (cJSON *it = j->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            if (meta_out) *meta_out = cJSON_PrintUnformatted(it);
            continue;
        }
        cJSON *dt = cJSON_GetObjectItem(it, "dtype"), *sh = cJSON_GetObjectItem(it, "shape"), *of = cJSON_GetObjectItem(it, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || cJSON_GetArraySize(of) != 2 || cJSON_GetArraySize(sh) > 8) {
            rc = kl_err_set(e, KL_EPARSE, "%s: tensor '%s': bad header entry", path, it->string); goto done;
        }
        int64_t dims[8];
        int rank = cJSON_GetArraySize(sh);
        for (int d = 0; d < rank; d++) dims[d] = (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
        double a = cJSON_GetArrayItem(of, 0)->valuedouble, b = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (a < 0 || b < a || b > (double)dlen) { rc = kl_err_set(e, KL_EPARSE, "%s: tensor '%s': offsets beyond the file", path, it->string); goto done; }
        if ((rc = fn(ctx, it->string, dt->valuestring, rank, dims, data + (size_t)a, (size_t)(b - a), e))) goto done;
    }
done:
    cJSON_Delete(j);
    kl_mem_free(buf);
    return rc;
}
