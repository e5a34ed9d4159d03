/* kl_column: typed growable columns with an optional validity mask (see
 * include/keel/column.h). Memory through the core allocator, tag dataset. */
#include <stdlib.h>
#include <string.h>

#include "keel/column.h"

static const char *const type_names[KL_COL_TYPE_COUNT] = {
    "bool", "int32", "int64", "float32", "float64", "string", "date", "timestamp", "binary", "list", "struct",
};

const char *kl_col_type_name(kl_col_type t) {
    return (unsigned)t < KL_COL_TYPE_COUNT ? type_names[t] : "?";
}

int kl_col_type_parse(const char *name, kl_col_type *out) {
    for (int i = 0; i < KL_COL_TYPE_COUNT; i++)
        if (i != KL_COL_LIST && i != KL_COL_STRUCT && name && strcmp(name, type_names[i]) == 0) {
            *out = (kl_col_type)i;
            return KL_OK;
        }
    return KL_EINVAL;
}

size_t kl_col_type_size(kl_col_type t) {
    switch (t) {
    case KL_COL_BOOL: return 1;
    case KL_COL_INT32: case KL_COL_DATE: case KL_COL_FLOAT32: return 4;
    case KL_COL_INT64: case KL_COL_TIMESTAMP: case KL_COL_FLOAT64: return 8;
    default: return 0;
    }
}

static int is_varlen(kl_col_type t) { return t == KL_COL_STRING || t == KL_COL_BINARY; }
/* Types whose rows are len+1 offsets (into data, or into child for LIST). */
static int has_offsets(kl_col_type t) { return is_varlen(t) || t == KL_COL_LIST; }

static int column_new(const char *name, kl_col_type t, int nullable, size_t cap_rows, kl_column **out, kl_err *e);

int kl_column_new(const char *name, kl_col_type t, int nullable, size_t cap_rows, kl_column **out, kl_err *e) {
    *out = NULL;
    if ((unsigned)t >= KL_COL_TYPE_COUNT) return kl_err_set(e, KL_EINVAL, "column %s: bad type %d", name ? name : "?", (int)t);
    if (t == KL_COL_LIST || t == KL_COL_STRUCT)
        return kl_err_set(e, KL_EINVAL, "column %s: a %s column is made by kl_column_new_%s", name ? name : "?",
                          kl_col_type_name(t), kl_col_type_name(t));
    return column_new(name, t, nullable, cap_rows, out, e);
}

int kl_column_new_list(const char *name, kl_col_type elem, int nullable, int elem_nullable, int32_t list_size,
                       kl_column **out, kl_err *e) {
    *out = NULL;
    if ((unsigned)elem >= KL_COL_TYPE_COUNT || elem == KL_COL_LIST)
        return kl_err_set(e, KL_EINVAL, "column %s: list elements must be of a scalar type", name ? name : "?");
    if (list_size < 0)
        return kl_err_set(e, KL_EINVAL, "column %s: negative list size %d", name ? name : "?", (int)list_size);
    kl_column *c;
    int rc = column_new(name, KL_COL_LIST, nullable, 0, &c, e);
    if (rc) return rc;
    if ((rc = column_new("element", elem, elem_nullable, 0, &c->child, e))) {
        kl_column_free(c);
        return rc;
    }
    c->list_size = list_size;
    *out = c;
    return KL_OK;
}

int kl_column_new_struct(const char *name, int nullable, const char *const *names, const kl_col_type *types, size_t n,
                         kl_column **out, kl_err *e) {
    *out = NULL;
    if (n == 0) return kl_err_set(e, KL_EINVAL, "column %s: a struct needs at least one field", name ? name : "?");
    for (size_t j = 0; j < n; j++) {
        if ((unsigned)types[j] >= KL_COL_TYPE_COUNT || types[j] == KL_COL_LIST || types[j] == KL_COL_STRUCT)
            return kl_err_set(e, KL_EINVAL, "column %s: field %s: struct fields must be of a scalar type",
                              name ? name : "?", names[j]);
        for (size_t k = 0; k < j; k++)
            if (!strcmp(names[j], names[k]))
                return kl_err_set(e, KL_EINVAL, "column %s: duplicate field name \"%s\"", name ? name : "?", names[j]);
    }
    kl_column *c;
    int rc = column_new(name, KL_COL_STRUCT, nullable, 0, &c, e);
    if (rc) return rc;
    c->fields = calloc(n, sizeof *c->fields);
    if (!c->fields) {
        kl_column_free(c);
        return kl_err_set(e, KL_ENOMEM, "column %s: out of memory", name);
    }
    c->nfields = n;
    for (size_t j = 0; j < n; j++)
        if ((rc = column_new(names[j], types[j], 1, 0, &c->fields[j], e))) {
            kl_column_free(c);
            return rc;
        }
    *out = c;
    return KL_OK;
}

static int column_new(const char *name, kl_col_type t, int nullable, size_t cap_rows, kl_column **out, kl_err *e) {
    kl_column *c = calloc(1, sizeof *c);
    if (!c) return kl_err_set(e, KL_ENOMEM, "column: out of memory");
    c->name = strdup(name ? name : "");
    c->type = t;
    c->nullable = nullable != 0;
    if (!c->name) { free(c); return kl_err_set(e, KL_ENOMEM, "column: out of memory"); }
    if (has_offsets(t)) {
        c->offsets = kl_mem_alloc(sizeof(int64_t), KL_TAG_DATASET);
        if (!c->offsets) { kl_column_free(c); return kl_err_set(e, KL_ENOMEM, "column %s: out of memory", name); }
        c->offsets[0] = 0;
    }
    if (cap_rows && kl_column_reserve(c, cap_rows, 0) != KL_OK) {
        kl_column_free(c);
        return kl_err_set(e, KL_ENOMEM, "column %s: out of memory for %zu rows", name, cap_rows);
    }
    *out = c;
    return KL_OK;
}

void kl_column_free(kl_column *c) {
    if (!c) return;
    free(c->name);
    kl_mem_free(c->values);
    kl_mem_free(c->valid);
    kl_mem_free(c->offsets);
    kl_mem_free(c->data);
    kl_column_free(c->child);
    for (size_t j = 0; c->fields && j < c->nfields; j++) kl_column_free(c->fields[j]);
    free(c->fields);
    free(c);
}

void kl_column_clear(kl_column *c) {
    c->len = 0;
    c->data_len = 0;
    if (c->valid) { kl_mem_free(c->valid); c->valid = NULL; }
    if (c->offsets) c->offsets[0] = 0;
    if (c->child) kl_column_clear(c->child);
    for (size_t j = 0; c->fields && j < c->nfields; j++) kl_column_clear(c->fields[j]);
}

static void *grow(void *p, size_t bytes) {
    return kl_mem_realloc(p, bytes ? bytes : 1, KL_TAG_DATASET);
}

int kl_column_reserve(kl_column *c, size_t rows, size_t data_bytes) {
    if (rows > c->cap) {
        size_t ncap = c->cap ? c->cap : 16;
        while (ncap < rows) ncap *= 2;
        if (has_offsets(c->type)) {
            int64_t *o = grow(c->offsets, (ncap + 1) * sizeof(int64_t));
            if (!o) return KL_ENOMEM;
            c->offsets = o;
        } else {
            void *v = grow(c->values, ncap * kl_col_type_size(c->type));
            if (!v) return KL_ENOMEM;
            c->values = v;
        }
        if (c->valid) {
            uint8_t *m = grow(c->valid, ncap);
            if (!m) return KL_ENOMEM;
            c->valid = m;
        }
        c->cap = ncap;
    }
    if (is_varlen(c->type) && data_bytes > c->data_cap) {
        size_t ncap = c->data_cap ? c->data_cap : 64;
        while (ncap < data_bytes) ncap *= 2;
        char *d = grow(c->data, ncap);
        if (!d) return KL_ENOMEM;
        c->data = d;
        c->data_cap = ncap;
    }
    return KL_OK;
}

static int room(kl_column *c) {
    return c->len < c->cap ? KL_OK : kl_column_reserve(c, c->len + 1, 0);
}

/* Marks row c->len (about to be appended) present or not. */
static int set_valid(kl_column *c, int present) {
    if (!c->valid) {
        if (present) return KL_OK;
        c->valid = kl_mem_alloc(c->cap ? c->cap : 1, KL_TAG_DATASET);
        if (!c->valid) return KL_ENOMEM;
        memset(c->valid, 1, c->len);
    }
    c->valid[c->len] = (uint8_t)(present != 0);
    return KL_OK;
}

/* Drops the rows of scalar column c from n on. */
static void truncate_rows(kl_column *c, size_t n) {
    if (c->len <= n) return;
    c->len = n;
    if (is_varlen(c->type)) c->data_len = (size_t)c->offsets[n];
}

int kl_column_push_null(kl_column *c) {
    if (!c->nullable) return KL_EINVAL;
    int rc = room(c);
    if (rc) return rc;
    for (size_t j = 0; j < c->nfields; j++) /* a null struct row is null in every field */
        if (c->fields[j]->len == c->len && (rc = kl_column_push_null(c->fields[j]))) return rc;
    if ((rc = set_valid(c, 0))) return rc;
    if (c->type == KL_COL_LIST) { /* no elements: any pushed since the last row are dropped */
        truncate_rows(c->child, (size_t)c->offsets[c->len]);
        c->offsets[c->len + 1] = c->offsets[c->len];
    } else if (is_varlen(c->type)) c->offsets[c->len + 1] = (int64_t)c->data_len;
    else memset((char *)c->values + c->len * kl_col_type_size(c->type), 0, kl_col_type_size(c->type));
    c->len++;
    return KL_OK;
}

int kl_column_push_i64(kl_column *c, int64_t v) {
    int rc = room(c);
    if (rc) return rc;
    switch (c->type) {
    case KL_COL_BOOL: ((uint8_t *)c->values)[c->len] = v != 0; break;
    case KL_COL_INT32: case KL_COL_DATE: ((int32_t *)c->values)[c->len] = (int32_t)v; break;
    case KL_COL_INT64: case KL_COL_TIMESTAMP: ((int64_t *)c->values)[c->len] = v; break;
    case KL_COL_FLOAT32: ((float *)c->values)[c->len] = (float)v; break;
    case KL_COL_FLOAT64: ((double *)c->values)[c->len] = (double)v; break;
    default: return KL_ETYPE;
    }
    if ((rc = set_valid(c, 1))) return rc;
    c->len++;
    return KL_OK;
}

int kl_column_push_f64(kl_column *c, double v) {
    int rc = room(c);
    if (rc) return rc;
    switch (c->type) {
    case KL_COL_FLOAT32: ((float *)c->values)[c->len] = (float)v; break;
    case KL_COL_FLOAT64: ((double *)c->values)[c->len] = v; break;
    default: return KL_ETYPE;
    }
    if ((rc = set_valid(c, 1))) return rc;
    c->len++;
    return KL_OK;
}

int kl_column_push_str(kl_column *c, const char *s, size_t n) {
    if (!is_varlen(c->type)) return KL_ETYPE;
    int rc = kl_column_reserve(c, c->len + 1, c->data_len + n);
    if (rc) return rc;
    if ((rc = set_valid(c, 1))) return rc;
    if (n) memcpy(c->data + c->data_len, s, n);
    c->data_len += n;
    c->offsets[c->len + 1] = (int64_t)c->data_len;
    c->len++;
    return KL_OK;
}

int kl_column_struct_end(kl_column *c) {
    if (c->type != KL_COL_STRUCT) return KL_ETYPE;
    for (size_t j = 0; j < c->nfields; j++)
        if (c->fields[j]->len != c->len + 1) {
            for (size_t k = 0; k < c->nfields; k++) truncate_rows(c->fields[k], c->len);
            return KL_ESHAPE;
        }
    int rc = room(c);
    if (rc) return rc;
    if ((rc = set_valid(c, 1))) return rc;
    c->len++;
    return KL_OK;
}

int kl_column_list_end(kl_column *c) {
    if (c->type != KL_COL_LIST) return KL_ETYPE;
    int64_t from = c->offsets[c->len], n = (int64_t)c->child->len - from;
    if (c->list_size > 0 && n != c->list_size) {
        c->child->len = (size_t)from; /* drop the row's elements */
        if (c->child->offsets) c->child->data_len = (size_t)c->child->offsets[from];
        return KL_ESHAPE;
    }
    int rc = room(c);
    if (rc) return rc;
    if ((rc = set_valid(c, 1))) return rc;
    c->offsets[c->len + 1] = (int64_t)c->child->len;
    c->len++;
    return KL_OK;
}

static int is_packable(kl_col_type t) {
    return t == KL_COL_BOOL || t == KL_COL_INT32 || t == KL_COL_INT64 || t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64;
}

/* The checks of kl_column_pack_list before anything is built. */
static int pack_check(const char *name, kl_column *const *cols, size_t n, kl_col_type elem, kl_err *e) {
    if (n == 0 || n > INT32_MAX) return kl_err_set(e, KL_EINVAL, "column %s: a list of %zu columns", name, n);
    if (elem != KL_COL_FLOAT32 && elem != KL_COL_FLOAT64)
        return kl_err_set(e, KL_ETYPE, "column %s: lists of %s are not packed (float32 or float64)", name,
                          kl_col_type_name(elem));
    for (size_t j = 0; j < n; j++) {
        if (!is_packable(cols[j]->type))
            return kl_err_set(e, KL_ETYPE, "column %s: %s is %s, not a number", name, cols[j]->name,
                              kl_col_type_name(cols[j]->type));
        if (cols[j]->len != cols[0]->len)
            return kl_err_set(e, KL_ESHAPE, "column %s: %s has %zu rows, %s %zu", name, cols[j]->name, cols[j]->len,
                              cols[0]->name, cols[0]->len);
    }
    return KL_OK;
}

/* Row i of numeric column s as an elem value; KL_ERANGE for an integer elem cannot hold exactly. */
static int pack_value(const kl_column *s, size_t i, kl_col_type elem, double *v) {
    if (s->type == KL_COL_FLOAT32 || s->type == KL_COL_FLOAT64) {
        *v = kl_column_get_f64(s, i);
        return KL_OK;
    }
    int64_t x = kl_column_get_i64(s, i);
    double d = elem == KL_COL_FLOAT32 ? (double)(float)x : (double)x;
    if (d != (double)x || d >= 9223372036854775808.0 || (int64_t)d != x) return KL_ERANGE;
    *v = d;
    return KL_OK;
}

int kl_column_pack_list(const char *name, kl_column *const *cols, size_t n, kl_col_type elem, kl_column **out,
                        kl_err *e) {
    *out = NULL;
    int rc = pack_check(name, cols, n, elem, e);
    if (rc) return rc;
    int nulls = 0;
    for (size_t j = 0; j < n; j++) nulls |= cols[j]->valid != NULL;
    kl_column *c;
    if ((rc = kl_column_new_list(name, elem, 0, nulls, (int32_t)n, &c, e))) return rc;
    size_t rows = cols[0]->len;
    if (rows && (size_t)-1 / rows < n) {
        kl_column_free(c);
        return kl_err_set(e, KL_ERANGE, "column %s: too many elements", name);
    }
    if (kl_column_reserve(c, rows, 0) || kl_column_reserve(c->child, rows * n, 0)) {
        kl_column_free(c);
        return kl_err_set(e, KL_ENOMEM, "column %s: out of memory for %zu rows of %zu", name, rows, n);
    }
    for (size_t i = 0; i < rows && !rc; i++) {
        for (size_t j = 0; j < n && !rc; j++) {
            double v;
            if (kl_column_is_null(cols[j], i)) rc = kl_column_push_null(c->child);
            else if (pack_value(cols[j], i, elem, &v)) {
                rc = kl_err_set(e, KL_ERANGE, "column %s: %s row %zu: %lld is not exact as %s", name, cols[j]->name, i,
                                (long long)kl_column_get_i64(cols[j], i), kl_col_type_name(elem));
                kl_column_free(c);
                return rc;
            } else rc = kl_column_push_f64(c->child, v);
        }
        if (!rc) rc = kl_column_list_end(c);
    }
    if (rc) {
        kl_column_free(c);
        return kl_err_set(e, rc, "column %s: out of memory for %zu rows", name, rows);
    }
    *out = c;
    return KL_OK;
}

int64_t kl_column_get_i64(const kl_column *c, size_t i) {
    switch (c->type) {
    case KL_COL_BOOL: return ((const uint8_t *)c->values)[i];
    case KL_COL_INT32: case KL_COL_DATE: return ((const int32_t *)c->values)[i];
    case KL_COL_INT64: case KL_COL_TIMESTAMP: return ((const int64_t *)c->values)[i];
    case KL_COL_FLOAT32: return (int64_t)((const float *)c->values)[i];
    case KL_COL_FLOAT64: return (int64_t)((const double *)c->values)[i];
    default: return 0;
    }
}

double kl_column_get_f64(const kl_column *c, size_t i) {
    switch (c->type) {
    case KL_COL_FLOAT32: return ((const float *)c->values)[i];
    case KL_COL_FLOAT64: return ((const double *)c->values)[i];
    case KL_COL_STRING: case KL_COL_BINARY: return 0;
    default: return (double)kl_column_get_i64(c, i);
    }
}

const char *kl_column_get_str(const kl_column *c, size_t i, size_t *n) {
    if (!is_varlen(c->type)) { if (n) *n = 0; return ""; }
    if (n) *n = (size_t)(c->offsets[i + 1] - c->offsets[i]);
    return c->data ? c->data + c->offsets[i] : "";
}

size_t kl_column_null_count(const kl_column *c) {
    if (!c->valid) return 0;
    size_t k = 0;
    for (size_t i = 0; i < c->len; i++) k += c->valid[i] == 0;
    return k;
}

/* Appends rows [a, b) of src to dst. */
int kl_column_append(kl_column *dst, const kl_column *src, size_t a, size_t b) {
    if (dst->type != src->type) return KL_ETYPE;
    if (src->type == KL_COL_LIST && (dst->child->type != src->child->type || dst->list_size != src->list_size))
        return KL_ETYPE;
    if (src->type == KL_COL_STRUCT) {
        if (dst->nfields != src->nfields) return KL_ETYPE;
        for (size_t j = 0; j < src->nfields; j++)
            if (dst->fields[j]->type != src->fields[j]->type || strcmp(dst->fields[j]->name, src->fields[j]->name))
                return KL_ETYPE;
    }
    if (!dst->nullable && src->valid) for (size_t i = a; i < b; i++) if (!src->valid[i]) return KL_EINVAL;
    size_t n = b - a;
    if (!n) return KL_OK;
    size_t data = 0;
    if (is_varlen(src->type)) data = (size_t)(src->offsets[b] - src->offsets[a]);
    int rc = kl_column_reserve(dst, dst->len + n, dst->data_len + data);
    if (rc) return rc;
    if (src->valid && !dst->valid) {
        dst->valid = kl_mem_alloc(dst->cap, KL_TAG_DATASET);
        if (!dst->valid) return KL_ENOMEM;
        memset(dst->valid, 1, dst->len);
    }
    if (dst->valid) {
        if (src->valid) memcpy(dst->valid + dst->len, src->valid + a, n);
        else memset(dst->valid + dst->len, 1, n);
    }
    if (src->type == KL_COL_STRUCT) {
        for (size_t j = 0; j < src->nfields; j++)
            if ((rc = kl_column_append(dst->fields[j], src->fields[j], a, b))) return rc;
    } else if (src->type == KL_COL_LIST) {
        int64_t e0 = src->offsets[a], base = (int64_t)dst->child->len;
        rc = kl_column_append(dst->child, src->child, (size_t)e0, (size_t)src->offsets[b]);
        if (rc) return rc;
        for (size_t i = 1; i <= n; i++) dst->offsets[dst->len + i] = src->offsets[a + i] - e0 + base;
    } else if (is_varlen(src->type)) {
        if (data) memcpy(dst->data + dst->data_len, src->data + src->offsets[a], data);
        int64_t delta = (int64_t)dst->data_len - src->offsets[a];
        for (size_t i = 1; i <= n; i++) dst->offsets[dst->len + i] = src->offsets[a + i] + delta;
        dst->data_len += data;
    } else {
        size_t w = kl_col_type_size(src->type);
        memcpy((char *)dst->values + dst->len * w, (const char *)src->values + a * w, n * w);
    }
    dst->len += n;
    return KL_OK;
}

