/* KServe v2 tensor codec: datatypes, decoding an infer request (JSON tensors
 * with nested or flat data, or the binary tensor data extension) into
 * request tensors checked against the model's declared inputs, and encoding
 * the response (JSON data or binary_data_output). Errors name the field:
 * "inputs[0].shape: ...". */
#include "serve_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * Datatypes and tensors
 * ================================================================== */

static const char *const dt_names[SV_DTYPE_COUNT] = {
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
    "INT64", "FP16", "BF16", "FP32", "FP64", "BYTES"};
static const size_t dt_sizes[SV_DTYPE_COUNT] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 0};

const char *kl__sv_dtype_name(sv_dtype t) {
    return (int)t >= 0 && t < SV_DTYPE_COUNT ? dt_names[t] : "?";
}
size_t kl__sv_dtype_size(sv_dtype t) { return (int)t >= 0 && t < SV_DTYPE_COUNT ? dt_sizes[t] : 0; }

int kl__sv_dtype_parse(const char *name, sv_dtype *out) {
    for (int i = 0; i < SV_DTYPE_COUNT; i++)
        if (!strcmp(name, dt_names[i])) { *out = (sv_dtype)i; return KL_OK; }
    return KL_EINVAL;
}

int64_t kl__sv_numel(const sv_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

void kl__sv_tensor_release(sv_tensor *t) {
    if (!t) return;
    if (t->release) t->release(t->owner);
    else if (t->own) kl_mem_free(t->data);
    memset(t, 0, sizeof *t);
}

/* half / bfloat16 <-> float (round to nearest even) */
static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 0x1f, m = h & 0x3ff, f;
    if (ex == 0) {
        if (m == 0) f = s;
        else { /* subnormal */
            int k = -1;
            do { k++; m <<= 1; } while (!(m & 0x400));
            f = s | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ff) << 13);
        }
    } else if (ex == 31) f = s | 0x7f800000u | (m << 13);
    else f = s | ((ex + 112) << 23) | (m << 13);
    float out;
    memcpy(&out, &f, 4);
    return out;
}
static uint16_t float_to_half(float x) {
    uint32_t f;
    memcpy(&f, &x, 4);
    uint32_t s = (f >> 16) & 0x8000;
    int32_t ex = (int32_t)((f >> 23) & 0xff) - 127 + 15;
    uint32_t m = f & 0x7fffff;
    if (((f >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    if (ex >= 31) return (uint16_t)(s | 0x7c00);
    if (ex <= 0) {
        if (ex < -10) return (uint16_t)s;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ex);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(s | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fff;
    uint32_t h = s | ((uint32_t)ex << 10) | hm;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) h++;
    return (uint16_t)h;
}
static float bf16_to_float(uint16_t b) {
    uint32_t f = (uint32_t)b << 16;
    float out;
    memcpy(&out, &f, 4);
    return out;
}
static uint16_t float_to_bf16(float x) {
    uint32_t f;
    memcpy(&f, &x, 4);
    if ((f & 0x7fffffff) > 0x7f800000) return (uint16_t)((f >> 16) | 0x40);
    return (uint16_t)((f + 0x7fff + ((f >> 16) & 1)) >> 16);
}

/* ==================================================================
 * Decoding
 * ================================================================== */

typedef struct {
    sv_dtype dt;
    char *dst;
    int64_t n, cap;
    const char *field;
    kl_err *e;
} fill_ctx;

static int too_many(fill_ctx *c) {
    return kl_err_set(c->e, KL_ESHAPE, "%s.data: more values than the shape holds (%lld)", c->field, (long long)c->cap);
}

/* An INT64/UINT64 element's text read exactly (its double holds 53 bits):
 * 1 when written to p, 0 when the text is not a plain integer (its double
 * decides), -1 when it is out of the datatype's range. */
static int exact_int(const char *s, sv_dtype dt, char *p) {
    int neg = *s == '-';
    s += neg;
    if (*s < '0' || *s > '9') return 0;
    uint64_t m = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (m > (UINT64_MAX - d) / 10) return -1;
        m = m * 10 + d;
    }
    if (*s == '.' || *s == 'e' || *s == 'E') return 0;
    if (dt == SV_UINT64) {
        if (neg && m) return -1;
        memcpy(p, &m, 8);
        return 1;
    }
    if (m > (uint64_t)INT64_MAX + (uint64_t)neg) return -1;
    int64_t v = neg ? (m ? -(int64_t)(m - 1) - 1 : 0) : (int64_t)m;
    memcpy(p, &v, 8);
    return 1;
}

/* element d (number i of src, for its text) of the data */
static int put_double(fill_ctx *c, double d, const cJSON *src, size_t i) {
    if (c->n >= c->cap) return too_many(c);
    char *p = c->dst + (size_t)c->n * dt_sizes[c->dt];
    if ((c->dt == SV_INT64 || c->dt == SV_UINT64) && fabs(d) >= 9007199254740992.0) { /* 2^53: digits lost */
        const char *t = kl_json_number_text(src, i);
        int x = t ? exact_int(t, c->dt, p) : 0;
        if (x < 0) {
            size_t tl = strspn(t, "-0123456789");
            return kl_err_set(c->e, KL_EPARSE, "%s.data[%lld]: %.*s is not a valid %s", c->field, (long long)c->n,
                              (int)(tl > 40 ? 40 : tl), t, dt_names[c->dt]);
        }
        if (x > 0) { c->n++; return KL_OK; }
    }
    switch (c->dt) {
    case SV_BOOL:
        if (d != 0 && d != 1)
            return kl_err_set(c->e, KL_EPARSE, "%s.data[%lld]: expected true or false", c->field, (long long)c->n);
        *(uint8_t *)p = (uint8_t)d;
        break;
    case SV_FP32: *(float *)p = (float)d; break;
    case SV_FP64: *(double *)p = d; break;
    case SV_FP16: *(uint16_t *)p = float_to_half((float)d); break;
    case SV_BF16: *(uint16_t *)p = float_to_bf16((float)d); break;
    default: {
        static const double lo[SV_DTYPE_COUNT] = {[SV_UINT8] = 0, [SV_UINT16] = 0, [SV_UINT32] = 0, [SV_UINT64] = 0,
                                                  [SV_INT8] = -128, [SV_INT16] = -32768, [SV_INT32] = -2147483648.0,
                                                  [SV_INT64] = -9223372036854775808.0};
        static const double hi[SV_DTYPE_COUNT] = {[SV_UINT8] = 255, [SV_UINT16] = 65535, [SV_UINT32] = 4294967295.0,
                                                  [SV_UINT64] = 18446744073709551615.0, [SV_INT8] = 127,
                                                  [SV_INT16] = 32767, [SV_INT32] = 2147483647.0,
                                                  [SV_INT64] = 9223372036854775807.0};
        if (d != floor(d) || d < lo[c->dt] || d > hi[c->dt])
            return kl_err_set(c->e, KL_EPARSE, "%s.data[%lld]: %g is not a valid %s", c->field, (long long)c->n, d,
                              dt_names[c->dt]);
        switch (c->dt) {
        case SV_UINT8: *(uint8_t *)p = (uint8_t)d; break;
        case SV_UINT16: *(uint16_t *)p = (uint16_t)d; break;
        case SV_UINT32: *(uint32_t *)p = (uint32_t)d; break;
        case SV_UINT64: *(uint64_t *)p = d >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)d; break;
        case SV_INT8: *(int8_t *)p = (int8_t)d; break;
        case SV_INT16: *(int16_t *)p = (int16_t)d; break;
        case SV_INT32: *(int32_t *)p = (int32_t)d; break;
        default: *(int64_t *)p = d >= 9223372036854775807.0 ? INT64_MAX : (int64_t)d; break;
        }
    }
    }
    c->n++;
    return KL_OK;
}

static int put_value(fill_ctx *c, const cJSON *v) {
    if (c->dt == SV_BOOL && cJSON_IsBool(v)) {
        if (c->n >= c->cap) return too_many(c);
        c->dst[c->n++] = cJSON_IsTrue(v) ? 1 : 0;
        return KL_OK;
    }
    if (!cJSON_IsNumber(v))
        return kl_err_set(c->e, KL_EPARSE, "%s.data[%lld]: expected %s", c->field, (long long)c->n,
                          c->dt == SV_BOOL ? "true or false" : "a number");
    return put_double(c, v->valuedouble, v, 0);
}

static int fill(fill_ctx *c, const cJSON *arr, int depth) {
    if (depth > 32) return kl_err_set(c->e, KL_EPARSE, "%s.data: nested too deep", c->field);
    const double *vals;
    size_t n = kl_json_packed_count(arr);
    if (n && c->dt == SV_FP32) { /* a run of numbers straight to floats (exactly strtof's) */
        if ((int64_t)n > c->cap - c->n) return too_many(c);
        kl_json_packed_f32(arr, (float *)(void *)c->dst + c->n);
        c->n += (int64_t)n;
        return KL_OK;
    }
    if (kl_json_packed(arr, &vals, &n)) { /* a run of numbers: one tight loop */
        for (size_t i = 0; i < n; i++) {
            int rc = put_double(c, vals[i], arr, i);
            if (rc) return rc;
        }
        return KL_OK;
    }
    for (const cJSON *v = arr->child; v; v = v->next) {
        int rc = cJSON_IsArray(v) ? fill(c, v, depth + 1) : put_value(c, v);
        if (rc) return rc;
    }
    return KL_OK;
}

/* BYTES elements: JSON strings, stored as the binary extension's layout
 * (4-byte little-endian length + bytes per element). */
static int fill_bytes(const cJSON *arr, kl_buf *b, int64_t *n, const char *field, kl_err *e, int depth) {
    if (depth > 32) return kl_err_set(e, KL_EPARSE, "%s.data: nested too deep", field);
    const double *vals;
    size_t nv;
    if (kl_json_packed(arr, &vals, &nv))
        return kl_err_set(e, KL_EPARSE, "%s.data[%lld]: expected a string", field, (long long)*n);
    for (const cJSON *v = arr->child; v; v = v->next) {
        if (cJSON_IsArray(v)) {
            int rc = fill_bytes(v, b, n, field, e, depth + 1);
            if (rc) return rc;
            continue;
        }
        if (!cJSON_IsString(v)) return kl_err_set(e, KL_EPARSE, "%s.data[%lld]: expected a string", field, (long long)*n);
        uint32_t len = (uint32_t)kl_json_string_len(v); /* a \u0000 inside is kept */
        kl_buf_append(b, &len, 4);
        kl_buf_append(b, v->valuestring, len);
        (*n)++;
    }
    return KL_OK;
}

static int parse_priority(const cJSON *p, int *level) {
    if (cJSON_IsNumber(p)) return kl__sv_priority_number(p->valuedouble, level);
    if (cJSON_IsString(p)) return kl__sv_priority_parse(p->valuestring, level);
    return -1;
}

/* The request's "id" and "parameters" (priority, timeout, binary_data_output). */
static int decode_params(sv_req *r, const cJSON *root, kl_err *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (id) {
        if (!cJSON_IsString(id)) return kl_err_set(e, KL_EPARSE, "id: expected a string");
        size_t idn = strlen(id->valuestring);
        if (idn >= sizeof r->id) idn = sizeof r->id - 1; /* as snprintf would cut it */
        memcpy(r->id, id->valuestring, idn);
        r->id[idn] = 0;
        r->has_id = 1;
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    if (!params) return KL_OK;
    if (!cJSON_IsObject(params)) return kl_err_set(e, KL_EPARSE, "parameters: expected an object");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(params, "priority");
    if (p && parse_priority(p, &r->prio_param))
        return kl_err_set(e, KL_EINVAL, "parameters.priority: expected a level 1..%d, \"high\" or \"low\"",
                          SV_MAX_LEVELS);
    p = cJSON_GetObjectItemCaseSensitive(params, "timeout");
    if (p) {
        if (!cJSON_IsNumber(p) || p->valuedouble < 0 || p->valuedouble != floor(p->valuedouble))
            return kl_err_set(e, KL_EINVAL, "parameters.timeout: expected microseconds (a non-negative integer)");
        r->timeout_us = (int64_t)p->valuedouble;
    }
    p = cJSON_GetObjectItemCaseSensitive(params, "binary_data_output");
    if (p) {
        if (!cJSON_IsBool(p)) return kl_err_set(e, KL_EINVAL, "parameters.binary_data_output: expected true or false");
        r->all_binary = cJSON_IsTrue(p);
    }
    return KL_OK;
}

/* An input's name, datatype and shape against the model's input; *k its
 * index, *numel its element count; r->rows follows dimension 0. */
static int decode_signature(sv_req *r, const cJSON *in, const char *field, int *seen, size_t *k, int64_t *numel,
                            kl_err *e) {
    const sv_version *v = r->ver;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(in, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(in, "shape");
    if (!cJSON_IsString(nm)) return kl_err_set(e, KL_EPARSE, "%s.name: missing or not a string", field);
    for (*k = 0; *k < v->n_in; (*k)++)
        if (!strcmp(v->in[*k].name, nm->valuestring)) break;
    if (*k == v->n_in)
        return kl_err_set(e, KL_ENOTFOUND, "%s.name: model '%s' has no input '%s' (its inputs: %s%s)", field,
                          v->model->name, nm->valuestring, v->in[0].name, v->n_in > 1 ? ", ..." : "");
    if (seen[*k]++) return kl_err_set(e, KL_EINVAL, "%s.name: input '%s' given twice", field, nm->valuestring);
    const sv_io *io = &v->in[*k];
    sv_dtype dtype;
    if (!cJSON_IsString(dt) || kl__sv_dtype_parse(dt->valuestring, &dtype))
        return kl_err_set(
            e, KL_ETYPE, "%s.datatype: expected one of BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES",
            field);
    if (dtype != io->dtype)
        return kl_err_set(e, KL_ETYPE, "%s.datatype: input '%s' is %s, got %s", field, io->name, dt_names[io->dtype],
                          dt_names[dtype]);
    if (!cJSON_IsArray(sh)) return kl_err_set(e, KL_ESHAPE, "%s.shape: missing or not an array", field);
    sv_tensor *t = &r->in[*k];
    int rank = kl_json_array_size(sh);
    if (rank != io->rank)
        return kl_err_set(e, KL_ESHAPE, "%s.shape: input '%s' has rank %d, got %d", field, io->name, io->rank, rank);
    t->dtype = dtype;
    t->rank = rank;
    int d = 0;
    *numel = 1;
    for (const cJSON *x = sh->child; x; x = x->next, d++) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble) ||
            x->valuedouble > 1e12)
            return kl_err_set(e, KL_ESHAPE, "%s.shape[%d]: expected a non-negative integer", field, d);
        t->dims[d] = (int64_t)x->valuedouble;
        if (io->dims[d] >= 0 && io->dims[d] != t->dims[d])
            return kl_err_set(e, KL_ESHAPE, "%s.shape[%d]: input '%s' needs %lld, got %lld", field, d, io->name,
                              (long long)io->dims[d], (long long)t->dims[d]);
        *numel *= t->dims[d];
        if (*numel > ((int64_t)1 << 40)) return kl_err_set(e, KL_ESHAPE, "%s.shape: too many elements", field);
    }
    if (rank > 0) {
        if (r->rows < 0) r->rows = t->dims[0];
        else if (r->rows != t->dims[0]) r->rows = -2; /* inconsistent batch: not batchable */
    }
    return KL_OK;
}

/* An input's data from the binary part (parameters.binary_data_size), at
 * *bin_off of bin. */
static int decode_binary(sv_tensor *t, const cJSON *bds, int64_t numel, const char *bin, size_t bin_len,
                         size_t *bin_off, const char *field, kl_err *e) {
    if (!cJSON_IsNumber(bds) || bds->valuedouble < 0)
        return kl_err_set(e, KL_EINVAL, "%s.parameters.binary_data_size: expected a byte count", field);
    size_t nb = (size_t)bds->valuedouble;
    if (*bin_off + nb > bin_len)
        return kl_err_set(e, KL_EPARSE, "%s.parameters.binary_data_size: %zu bytes, only %zu left in the body", field,
                          nb, bin_len - *bin_off);
    if (t->dtype != SV_BYTES && nb != (size_t)numel * dt_sizes[t->dtype])
        return kl_err_set(e, KL_ESHAPE, "%s.parameters.binary_data_size: %zu bytes, shape needs %lld", field, nb,
                          (long long)numel * (long long)dt_sizes[t->dtype]);
    t->data = kl_mem_alloc(nb, KL_TAG_REQUEST);
    if (!t->data) return kl_err_set(e, KL_ENOMEM, "%s: out of memory (%zu bytes)", field, nb);
    t->own = 1;
    t->nbytes = nb;
    memcpy(t->data, bin + *bin_off, nb);
    *bin_off += nb;
    return KL_OK;
}

/* An input's data from its JSON "data" array (nested or flat; BYTES as
 * strings). */
static int decode_data(sv_tensor *t, const cJSON *data, int64_t numel, const char *field, kl_err *e) {
    int rc;
    if (!cJSON_IsArray(data)) return kl_err_set(e, KL_EPARSE, "%s.data: missing or not an array", field);
    if (t->dtype == SV_BYTES) {
        kl_buf b;
        kl_buf_init(&b);
        int64_t n = 0;
        rc = fill_bytes(data, &b, &n, field, e, 0);
        if (!rc && n != numel)
            rc = kl_err_set(e, KL_ESHAPE, "%s.data: %lld values, shape holds %lld", field, (long long)n,
                            (long long)numel);
        if (!rc) {
            t->data = kl_mem_alloc(b.len, KL_TAG_REQUEST);
            if (t->data) {
                memcpy(t->data, b.data, b.len);
                t->own = 1;
                t->nbytes = b.len;
            } else rc = kl_err_set(e, KL_ENOMEM, "%s: out of memory", field);
        }
        kl_buf_free(&b);
        return rc;
    }
    size_t nb = (size_t)numel * dt_sizes[t->dtype];
    t->data = kl_mem_alloc(nb, KL_TAG_REQUEST);
    if (!t->data) return kl_err_set(e, KL_ENOMEM, "%s: out of memory (%zu bytes)", field, nb);
    t->own = 1;
    t->nbytes = nb;
    fill_ctx fc = {t->dtype, t->data, 0, numel, field, e};
    if ((rc = fill(&fc, data, 0))) return rc;
    if (fc.n != numel)
        return kl_err_set(e, KL_ESHAPE, "%s.data: %lld values, shape [%s] holds %lld", field, (long long)fc.n, "...",
                          (long long)numel);
    return KL_OK;
}

/* "inputs": every model input once, its data from JSON or the binary part
 * (which the inputs must claim exactly). */
static int decode_inputs(sv_req *r, const cJSON *root, const char *bin, size_t bin_len, kl_err *e) {
    const sv_version *v = r->ver;
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!inputs) return kl_err_set(e, KL_EPARSE, "inputs: missing");
    if (!cJSON_IsArray(inputs)) return kl_err_set(e, KL_EPARSE, "inputs: expected an array");
    int seen[SV_MAX_IO] = {0}, idx = 0, rc;
    size_t bin_off = 0;
    r->n_in = v->n_in;
    r->rows = -1;
    for (const cJSON *in = inputs->child; in; in = in->next, idx++) {
        char field[64] = "inputs[";
        int fl = 7 + kl__sv_fmt_i64(field + 7, idx);
        field[fl] = ']';
        field[fl + 1] = 0;
        if (!cJSON_IsObject(in)) return kl_err_set(e, KL_EPARSE, "%s: expected an object", field);
        size_t k = 0;
        int64_t numel = 0;
        if ((rc = decode_signature(r, in, field, seen, &k, &numel, e))) return rc;
        const cJSON *ip = cJSON_GetObjectItemCaseSensitive(in, "parameters");
        const cJSON *bds = ip ? cJSON_GetObjectItemCaseSensitive(ip, "binary_data_size") : NULL;
        rc = bds ? decode_binary(&r->in[k], bds, numel, bin, bin_len, &bin_off, field, e)
                 : decode_data(&r->in[k], cJSON_GetObjectItemCaseSensitive(in, "data"), numel, field, e);
        if (rc) return rc;
    }
    for (size_t k = 0; k < v->n_in; k++)
        if (!seen[k]) return kl_err_set(e, KL_EINVAL, "inputs: missing input '%s'", v->in[k].name);
    if (bin_off != bin_len)
        return kl_err_set(e, KL_EPARSE, "request body: %zu bytes of binary data not claimed by any input",
                          bin_len - bin_off);
    return KL_OK;
}

/* "outputs": the model outputs asked for, in order, each in binary or JSON
 * (absent: all outputs, as parameters.binary_data_output says). */
static int decode_outputs(sv_req *r, const cJSON *root, kl_err *e) {
    const sv_version *v = r->ver;
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    r->n_out_sel = 0;
    if (!outs) {
        for (size_t k = 0; k < v->n_out; k++) {
            r->out_bin[r->n_out_sel] = r->all_binary;
            r->out_sel[r->n_out_sel++] = (int)k;
        }
        return KL_OK;
    }
    if (!cJSON_IsArray(outs)) return kl_err_set(e, KL_EPARSE, "outputs: expected an array");
    int idx = 0;
    for (const cJSON *o = outs->child; o; o = o->next, idx++) {
        const cJSON *nm = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "name") : NULL;
        if (!cJSON_IsString(nm)) return kl_err_set(e, KL_EPARSE, "outputs[%d].name: missing or not a string", idx);
        size_t k;
        for (k = 0; k < v->n_out; k++)
            if (!strcmp(v->out[k].name, nm->valuestring)) break;
        if (k == v->n_out)
            return kl_err_set(e, KL_ENOTFOUND, "outputs[%d].name: model '%s' has no output '%s'", idx, v->model->name,
                              nm->valuestring);
        if (r->n_out_sel >= SV_MAX_IO) return kl_err_set(e, KL_EINVAL, "outputs: too many");
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        const cJSON *bo = op ? cJSON_GetObjectItemCaseSensitive(op, "binary_data_output") : NULL;
        if (bo && !cJSON_IsBool(bo))
            return kl_err_set(e, KL_EINVAL, "outputs[%d].parameters.binary_data_output: expected true or false", idx);
        r->out_bin[r->n_out_sel] = bo ? cJSON_IsTrue(bo) : r->all_binary;
        r->out_sel[r->n_out_sel++] = (int)k;
    }
    return KL_OK;
}

/* A v2 infer request: the JSON part (fast reader, packed arrays) read in
 * three stages — parameters, inputs, outputs. */
int kl__sv_decode_infer(sv_req *r, const char *json, size_t json_len, const char *bin, size_t bin_len, kl_err *e) {
    kl_json_doc *doc = NULL;
    int rc = kl_json_doc_parse(json, json_len, "request body", KL_JSON_PACK | KL_JSON_KEEP_NUL, &doc, e);
    if (rc) return rc;
    const cJSON *root = kl_json_doc_root(doc);
    if (!cJSON_IsObject(root)) rc = kl_err_set(e, KL_EPARSE, "request body: expected a JSON object");
    if (!rc) rc = decode_params(r, root, e);
    if (!rc) rc = decode_inputs(r, root, bin, bin_len, e);
    if (!rc) rc = decode_outputs(r, root, e);
    kl_json_doc_free(doc);
    return rc;
}

/* ==================================================================
 * Encoding
 * ================================================================== */

static const double pow10_tab[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17,
    1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34, 1e35,
    1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44, 1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53,
    1e54, 1e55, 1e56, 1e57, 1e58, 1e59, 1e60};

static double scale10(double x, int k) { return k >= 0 ? x * pow10_tab[k] : x / pow10_tab[-k]; }

/* A float as JSON with 9 significant digits (enough to read back the same
 * float), trailing zeros dropped, in printf's %g layout ("0.123456791",
 * "1e-05", "-3.40282347e+38"); null for NaN/Inf. About 10x faster than
 * snprintf("%.9g"): the float is scaled in double arithmetic (relative error
 * ~1e-16, far below the 9-digit rounding step), so each digit is exact or the
 * last one is off by at most one unit where printf would round a tie, which
 * still reads back to the same float. Returns the length (< 24). */
int kl__sv_fmt_f32(char *out, float f) {
    char *o = out;
    if (!isfinite(f)) { memcpy(o, "null", 4); return 4; }
    double x = f;
    if (signbit(x)) { *o++ = '-'; x = -x; }
    if (x == 0) { *o++ = '0'; return (int)(o - out); }
    int e10 = (int)floor(log10(x));
    uint64_t m = (uint64_t)(scale10(x, 8 - e10) + 0.5);
    if (m < 100000000u) { e10--; m = (uint64_t)(scale10(x, 8 - e10) + 0.5); } /* log10 a hair low */
    if (m >= 1000000000u) { e10++; m = (uint64_t)(scale10(x, 8 - e10) + 0.5); }
    if (m >= 1000000000u) m = 999999999u;
    char d[9];
    for (int i = 8; i >= 0; i--) { d[i] = (char)('0' + m % 10); m /= 10; }
    int nd = 9;
    while (nd > 1 && d[nd - 1] == '0') nd--;
    if (e10 < -4 || e10 >= 9) { /* d.ddde±XX */
        *o++ = d[0];
        if (nd > 1) { *o++ = '.'; memcpy(o, d + 1, (size_t)nd - 1); o += nd - 1; }
        *o++ = 'e';
        *o++ = e10 < 0 ? '-' : '+';
        int ae = e10 < 0 ? -e10 : e10;
        if (ae >= 10) { *o++ = (char)('0' + ae / 10); *o++ = (char)('0' + ae % 10); }
        else { *o++ = '0'; *o++ = (char)('0' + ae); }
    } else if (e10 >= 0) { /* ddd.ddd */
        int ip = e10 + 1;
        for (int i = 0; i < ip; i++) *o++ = i < nd ? d[i] : '0';
        if (nd > ip) { *o++ = '.'; memcpy(o, d + ip, (size_t)(nd - ip)); o += nd - ip; }
    } else { /* 0.000ddd */
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -e10 - 1; i++) *o++ = '0';
        memcpy(o, d, (size_t)nd);
        o += nd;
    }
    return (int)(o - out);
}

static void put_num(kl_buf *b, double d, int prec) {
    if (isnan(d) || isinf(d)) { kl_buf_puts(b, "null"); return; }
    char tmp[40];
    int n = snprintf(tmp, sizeof tmp, "%.*g", prec, d);
    kl_buf_append(b, tmp, (size_t)n);
}

int kl__sv_fmt_u64(char *out, uint64_t v) {
    char tmp[20];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

int kl__sv_fmt_i64(char *out, int64_t v) {
    if (v >= 0) return kl__sv_fmt_u64(out, (uint64_t)v);
    out[0] = '-';
    return 1 + kl__sv_fmt_u64(out + 1, 0 - (uint64_t)v);
}

static void put_int(kl_buf *b, long long v) {
    char tmp[24];
    kl_buf_append(b, tmp, (size_t)kl__sv_fmt_i64(tmp, v));
}

void kl__sv_json_data(kl_buf *b, sv_dtype dt, const char *p, int64_t n) {
    kl_buf_puts(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i) kl_buf_append(b, ",", 1);
        switch (dt) {
        case SV_BOOL: kl_buf_puts(b, p[i] ? "true" : "false"); break;
        case SV_UINT8: put_int(b, ((const uint8_t *)p)[i]); break;
        case SV_UINT16: put_int(b, ((const uint16_t *)p)[i]); break;
        case SV_UINT32: put_int(b, ((const uint32_t *)p)[i]); break;
        case SV_UINT64: { char t[24]; kl_buf_append(b, t, (size_t)kl__sv_fmt_u64(t, ((const uint64_t *)p)[i])); break; }
        case SV_INT8: put_int(b, ((const int8_t *)p)[i]); break;
        case SV_INT16: put_int(b, ((const int16_t *)p)[i]); break;
        case SV_INT32: put_int(b, ((const int32_t *)p)[i]); break;
        case SV_INT64: put_int(b, (long long)((const int64_t *)p)[i]); break;
        case SV_FP16: put_num(b, half_to_float(((const uint16_t *)p)[i]), 5); break;
        case SV_BF16: put_num(b, bf16_to_float(((const uint16_t *)p)[i]), 4); break;
        case SV_FP32: {
            char tmp[32];
            kl_buf_append(b, tmp, (size_t)kl__sv_fmt_f32(tmp, ((const float *)p)[i]));
            break;
        }
        case SV_FP64: put_num(b, ((const double *)p)[i], 17); break;
        default: kl_buf_puts(b, "null"); break;
        }
    }
    kl_buf_puts(b, "]");
}

/* :predict "outputs": ["logit", "probability", "label"] (absent: the raw
 * output alone, as before); probability and label need a version whose
 * meta.json declares its post-processing (keel train writes it). */
static int predict_outputs(sv_req *r, const cJSON *o, kl_err *e) {
    static const char *const names[3] = {"logit", "probability", "label"};
    r->pred_outputs = 0;
    if (!o) return KL_OK;
    if (!cJSON_IsArray(o) || !cJSON_GetArraySize(o))
        return kl_err_set(e, KL_EINVAL, "outputs: expected a list of \"logit\", \"probability\", \"label\"");
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        int k = 0;
        while (k < 3 && !(cJSON_IsString(it) && !strcmp(it->valuestring, names[k]))) k++;
        if (k == 3) return kl_err_set(e, KL_EINVAL, "outputs: '%s' is not logit, probability or label",
                                      cJSON_IsString(it) ? it->valuestring : "(not a string)");
        r->pred_outputs |= 1 << k;
    }
    const sv_version *v = r->ver;
    if ((r->pred_outputs & (SV_PRED_PROBABILITY | SV_PRED_LABEL)) && v->post != SV_POST_SIGMOID && v->post != SV_POST_SOFTMAX)
        return kl_err_set(e, KL_EINVAL, "outputs: model '%s' version %lld %s, so it has no probability or label", r->model->name,
                          (long long)v->version, v->post == SV_POST_NONE ? "is a regression" : "declares no post-processing (meta.json output)");
    return KL_OK;
}

int kl__sv_decode_predict(sv_req *r, const char *json, size_t json_len, kl_err *e) {
    sv_version *v = r->ver;
    if (!v->feat)
        return kl_err_set(e, KL_EUNSUPPORTED, "model '%s' version %lld has no features.json: send tensors to "
                          "POST /v2/models/%s/infer", r->model->name, (long long)v->version, r->model->name);
    kl_json_doc *d = NULL;
    int rc = kl_json_doc_parse(json, json_len, "request body", KL_JSON_KEEP_NUL, &d, e);
    if (rc) return rc;
    const cJSON *inst = cJSON_GetObjectItemCaseSensitive(kl_json_doc_root(d), "instances");
    int n = cJSON_IsArray(inst) ? cJSON_GetArraySize(inst) : -1;
    if (n <= 0) {
        kl_json_doc_free(d);
        return kl_err_set(e, KL_EINVAL, "instances: expected a non-empty list of records");
    }
    if ((rc = predict_outputs(r, cJSON_GetObjectItemCaseSensitive(kl_json_doc_root(d), "outputs"), e))) {
        kl_json_doc_free(d);
        return rc;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(kl_json_doc_root(d), "id"); /* echoed; the key of feedback */
    if (id && !cJSON_IsString(id)) {
        kl_json_doc_free(d);
        return kl_err_set(e, KL_EINVAL, "id: expected a string");
    }
    if (id) {
        snprintf(r->id, sizeof r->id, "%s", id->valuestring);
        r->has_id = 1;
    }
    size_t width = kl_features_width(v->feat);
    double *tmp = malloc((width ? width : 1) * sizeof *tmp);
    sv_tensor *t = &r->in[0];
    memset(t, 0, sizeof *t);
    t->dtype = SV_FP32;
    t->rank = 2;
    t->dims[0] = n;
    t->dims[1] = (int64_t)width;
    t->nbytes = (size_t)n * width * sizeof(float);
    t->data = kl_mem_alloc(t->nbytes ? t->nbytes : 1, KL_TAG_REQUEST);
    t->own = 1;
    if (!tmp || !t->data) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory for %d records", n);
        goto done;
    }
    r->n_in = 1;
    int i = 0;
    int64_t now = v->mon ? kl_time_mono_ns() : 0; /* the monitor's clock: once per request */
    const cJSON *rec;
    cJSON_ArrayForEach(rec, inst) {
        if (!cJSON_IsObject(rec)) { rc = kl_err_set(e, KL_EINVAL, "instances[%d]: expected an object of raw fields", i); goto done; }
        if ((rc = v->mon ? kl_monitor_transform(v->mon, v->fstore, rec, tmp, now, e)
                         : kl_features_transform_record(v->feat, v->fstore, rec, tmp, NULL, e))) {
            kl_err_prefix(e, "instances[%d]", i);
            goto done;
        }
        float *row = (float *)t->data + (size_t)i * width;
        for (size_t k = 0; k < width; k++) row[k] = (float)tmp[k];
        i++;
    }
    r->rows = n;
    r->n_out_sel = 0;
    for (size_t k = 0; k < v->n_out; k++) {
        r->out_bin[r->n_out_sel] = 0;
        r->out_sel[r->n_out_sel++] = (int)k;
    }
    r->predict = 1;
done:
    free(tmp);
    kl_json_doc_free(d);
    if (rc) { kl__sv_tensor_release(t); r->n_in = 0; }
    return rc;
}

/* The first output's row of a record: a scalar when it has one value. */
static void raw_entry(kl_buf *b, int dtype, const char *p, int64_t per_row) {
    if (per_row != 1) { kl__sv_json_data(b, dtype, p, per_row); return; }
    kl_buf b1;
    kl_buf_init(&b1);
    kl__sv_json_data(&b1, dtype, p, 1);
    if (b1.len >= 2) kl_buf_append(b, b1.data + 1, b1.len - 2); /* strip the brackets */
    kl_buf_free(&b1);
}

/* {"logit": ..., "probability": p | [p...], "label": k} of one record: the
 * version's post-processing (sigmoid of one logit; softmax of K) and the
 * class it gives (probability >= 0.5; the largest). */
static void predict_entry(kl_buf *b, const sv_req *r, const float *z, int64_t k) {
    const char *sep = "{";
    if (r->pred_outputs & SV_PRED_LOGIT) {
        kl_buf_printf(b, "%s\"logit\":", sep);
        raw_entry(b, SV_FP32, (const char *)z, k);
        sep = ",";
    }
    int softmax = r->ver->post == SV_POST_SOFTMAX && k > 1;
    double mx = z[0], sum = 0;
    int64_t best = 0;
    for (int64_t i = 1; i < k; i++) if (z[i] > z[best]) best = i;
    if (softmax) { mx = z[best]; for (int64_t i = 0; i < k; i++) sum += exp((double)z[i] - mx); }
    if (r->pred_outputs & SV_PRED_PROBABILITY) {
        kl_buf_printf(b, "%s\"probability\":", sep);
        if (!softmax) kl_buf_printf(b, "%.9g", 1.0 / (1.0 + exp(-(double)z[0])));
        else
            for (int64_t i = 0; i < k; i++) kl_buf_printf(b, "%s%.9g", i ? "," : "[", exp((double)z[i] - mx) / sum);
        if (softmax) kl_buf_puts(b, "]");
        sep = ",";
    }
    if (r->pred_outputs & SV_PRED_LABEL) {
        int64_t cls = softmax ? best : (int64_t)(z[0] >= 0);
        const sv_version *v = r->ver;
        if (cls < v->nclass_names) { /* the class's name, as training's label spelt it */
            kl_buf_printf(b, "%s\"label\":", sep);
            kl_buf_json_str(b, v->class_names[cls]);
        } else {
            kl_buf_printf(b, "%s\"label\":%lld", sep, (long long)cls);
        }
    }
    kl_buf_puts(b, "}");
}

/* {"predictions":[one entry per record: the first output's row, or the
 * requested outputs of it], "model_name", "model_version", "feature_hash"} */
static int encode_predict(sv_req *r, const sv_tensor *outs, size_t n_out, int64_t row0, kl_err *e) {
    if (n_out < 1) return kl_err_set(e, KL_EINTERNAL, "no outputs");
    const sv_tensor *t = &outs[0];
    if (t->dtype == SV_BYTES || t->rank < 1) return kl_err_set(e, KL_EUNSUPPORTED, "output '%s': not a numeric batch", r->ver->out[0].name);
    int64_t per_row = kl__sv_numel(t) / (t->dims[0] ? t->dims[0] : 1);
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\"predictions\":[");
    if (r->pred_outputs && t->dtype != SV_FP32)
        return kl_err_set(e, KL_EUNSUPPORTED, "outputs: probability and label need a float32 output");
    for (int64_t i = 0; i < r->rows; i++) {
        const char *p = (const char *)t->data + (size_t)((row0 + i) * per_row) * dt_sizes[t->dtype];
        if (i) kl_buf_puts(&b, ",");
        if (r->pred_outputs) predict_entry(&b, r, (const float *)p, per_row);
        else raw_entry(&b, t->dtype, p, per_row);
    }
    kl_buf_puts(&b, "],\"model_name\":");
    kl_buf_json_str(&b, r->model->name);
    kl_buf_printf(&b, ",\"model_version\":\"%lld\",\"feature_hash\":", (long long)r->ver->version);
    kl_buf_json_str(&b, kl_features_hash(r->ver->feat));
    if (r->has_id) {
        kl_buf_puts(&b, ",\"id\":");
        kl_buf_json_str(&b, r->id);
    }
    kl_buf_puts(&b, "}");
    if (b.failed) { kl_buf_free(&b); return kl_err_set(e, KL_ENOMEM, "out of memory building the response"); }
    r->resp_header_len = -1;
    r->resp_len = b.len;
    r->resp = kl_buf_take(&b);
    return KL_OK;
}

int kl__sv_encode_infer(sv_req *r, const sv_tensor *outs, size_t n_out, int64_t row0, int64_t total_rows, kl_err *e) {
    if (r->predict) return encode_predict(r, outs, n_out, row0, e);
    kl_buf b;
    kl_buf_init(&b);
    const char *bin_ptr[SV_MAX_IO];
    size_t bin_len[SV_MAX_IO];
    int nbin = 0;
    kl_buf_puts(&b, "{\"model_name\":");
    kl_buf_json_str(&b, r->model->name);
    kl_buf_puts(&b, ",\"model_version\":\"");
    put_int(&b, (long long)r->ver->version);
    kl_buf_puts(&b, "\"");
    if (r->has_id) {
        kl_buf_puts(&b, ",\"id\":");
        kl_buf_json_str(&b, r->id);
    }
    kl_buf_puts(&b, ",\"outputs\":[");
    for (int i = 0; i < r->n_out_sel; i++) {
        int k = r->out_sel[i];
        if ((size_t)k >= n_out) { kl_buf_free(&b); return kl_err_set(e, KL_EINTERNAL, "output %d missing", k); }
        const sv_tensor *t = &outs[k];
        if (t->dtype == SV_BYTES) { kl_buf_free(&b); return kl_err_set(e, KL_EUNSUPPORTED, "BYTES outputs"); }
        int64_t dims[SV_MAX_DIMS];
        memcpy(dims, t->dims, sizeof dims);
        const char *p = t->data;
        int64_t numel = kl__sv_numel(t);
        if (total_rows != r->rows || row0 != 0) { /* a slice of a batched output */
            if (t->rank < 1 || t->dims[0] != total_rows) {
                kl_buf_free(&b);
                return kl_err_set(e, KL_EINTERNAL, "output '%s': dim 0 is not the batch", r->ver->out[k].name);
            }
            int64_t per_row = numel / (t->dims[0] ? t->dims[0] : 1);
            p += (size_t)(row0 * per_row) * dt_sizes[t->dtype];
            dims[0] = r->rows;
            numel = per_row * r->rows;
        }
        if (i) kl_buf_puts(&b, ",");
        kl_buf_puts(&b, "{\"name\":");
        kl_buf_json_str(&b, r->ver->out[k].name);
        kl_buf_puts(&b, ",\"datatype\":\"");
        kl_buf_puts(&b, dt_names[t->dtype]);
        kl_buf_puts(&b, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++) {
            if (d) kl_buf_append(&b, ",", 1);
            put_int(&b, (long long)dims[d]);
        }
        kl_buf_puts(&b, "]");
        size_t nbytes = (size_t)numel * dt_sizes[t->dtype];
        if (r->out_bin[i]) {
            kl_buf_printf(&b, ",\"parameters\":{\"binary_data_size\":%zu}}", nbytes);
            bin_ptr[nbin] = p;
            bin_len[nbin++] = nbytes;
        } else {
            kl_buf_puts(&b, ",\"data\":");
            kl__sv_json_data(&b, t->dtype, p, numel);
            kl_buf_puts(&b, "}");
        }
    }
    kl_buf_puts(&b, "]}");
    r->resp_header_len = nbin ? (int64_t)b.len : -1;
    for (int i = 0; i < nbin; i++) kl_buf_append(&b, bin_ptr[i], bin_len[i]);
    if (b.failed) { kl_buf_free(&b); return kl_err_set(e, KL_ENOMEM, "out of memory building the response"); }
    r->resp_len = b.len;
    r->resp = kl_buf_take(&b);
    return KL_OK;
}

char *kl__sv_error_json(const char *msg, size_t *len) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\"error\":");
    kl_buf_json_str(&b, msg);
    kl_buf_puts(&b, "}");
    *len = b.len;
    return kl_buf_take(&b);
}
