/* Values of columns read from Parquet as JSON or text: the one formatter
 * behind `keel data head` and the JSON of nested columns (parquet_nested.c).
 * Strings whole (a NUL byte escaped, never a cut), binary as base64, UUID
 * canonical, UINT64 unsigned, floats in their shortest round-trip form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/data.h"
#include "keel/parquet.h"

/* A string as text: a NUL byte is written as \0. */
static void put_text(kl_buf *b, const char *s, size_t n) {
    for (const char *z; n && (z = memchr(s, 0, n)); n -= (size_t)(z - s) + 1, s = z + 1) {
        kl_buf_append(b, s, (size_t)(z - s));
        kl_buf_puts(b, "\\0");
    }
    kl_buf_append(b, s, n);
}

static void put_base64(kl_buf *b, const unsigned char *p, size_t n) {
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        q[0] = T[v >> 18 & 63];
        q[1] = T[v >> 12 & 63];
        q[2] = i + 1 < n ? T[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? T[v & 63] : '=';
        kl_buf_append(b, q, 4);
    }
}

static void put_uuid(kl_buf *b, const unsigned char *p) {
    for (int k = 0; k < 16; k++) kl_buf_printf(b, "%s%02x", k == 4 || k == 6 || k == 8 || k == 10 ? "-" : "", p[k]);
}

static void put_float(kl_buf *b, kl_col_type t, double v, int json) {
    if (!isfinite(v)) { kl_buf_printf(b, json ? "\"%g\"" : "%g", v); return; }
    char s[40];
    int prec = t == KL_COL_FLOAT32 ? 6 : 15;
    for (;; prec++) { /* shortest text that reads back as the same value */
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (prec >= 17 || (t == KL_COL_FLOAT32 ? (float)strtod(s, NULL) == (float)v : strtod(s, NULL) == v)) break;
    }
    kl_buf_puts(b, s);
}

void kl_pq_format_value(kl_buf *b, const kl_column *c, size_t i, const kl_pq_column_info *ci, int json) {
    if (kl_column_is_null(c, i)) { kl_buf_puts(b, json ? "null" : "NULL"); return; }
    const char *q = json ? "\"" : "";
    switch (c->type) {
    case KL_COL_BOOL: kl_buf_puts(b, kl_column_get_i64(c, i) ? "true" : "false"); return;
    case KL_COL_INT32: kl_buf_printf(b, "%lld", (long long)kl_column_get_i64(c, i)); return;
    case KL_COL_INT64:
        if (ci && ci->is_unsigned) kl_buf_printf(b, "%llu", (unsigned long long)(uint64_t)kl_column_get_i64(c, i));
        else kl_buf_printf(b, "%lld", (long long)kl_column_get_i64(c, i));
        return;
    case KL_COL_FLOAT32: case KL_COL_FLOAT64: put_float(b, c->type, kl_column_get_f64(c, i), json); return;
    case KL_COL_DATE: {
        int y, m, d;
        kl_civil_from_days(kl_column_get_i64(c, i), &y, &m, &d);
        kl_buf_printf(b, "%s%04d-%02d-%02d%s", q, y, m, d, q);
        return;
    }
    case KL_COL_TIMESTAMP: {
        char t[64];
        kl_time_rfc3339(kl_column_get_i64(c, i), t, sizeof t);
        kl_buf_printf(b, "%s%s%s", q, t, q);
        return;
    }
    case KL_COL_STRUCT: /* a JSON object of the fields, in either mode */
        kl_buf_puts(b, "{");
        for (size_t j = 0; j < c->nfields; j++) {
            if (j) kl_buf_puts(b, ",");
            kl_buf_json_str(b, c->fields[j]->name);
            kl_buf_puts(b, ":");
            kl_pq_format_value(b, c->fields[j], i, NULL, 1);
        }
        kl_buf_puts(b, "}");
        return;
    case KL_COL_LIST: /* a JSON array of the elements, in either mode */
        kl_buf_puts(b, "[");
        for (int64_t k = c->offsets[i]; k < c->offsets[i + 1]; k++) {
            if (k > c->offsets[i]) kl_buf_puts(b, ",");
            kl_pq_format_value(b, c->child, (size_t)k, NULL, 1);
        }
        kl_buf_puts(b, "]");
        return;
    case KL_COL_BINARY: {
        size_t n;
        const unsigned char *s = (const unsigned char *)kl_column_get_str(c, i, &n);
        kl_buf_puts(b, q);
        if (ci && ci->logical && !strcmp(ci->logical, "UUID") && n == 16) put_uuid(b, s);
        else put_base64(b, s, n);
        kl_buf_puts(b, q);
        return;
    }
    default: {
        size_t n;
        const char *s = kl_column_get_str(c, i, &n);
        if (ci && ci->nested) kl_buf_append(b, s, n); /* JSON already */
        else if (json) kl_buf_json_strn(b, s, n);     /* whole: a NUL is \u0000 */
        else put_text(b, s, n);
    }
    }
}
