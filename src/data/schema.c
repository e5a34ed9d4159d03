/* The ingest schema: YAML (via core's kl_doc, so errors say file:line:col)
 * with a dialect section and a list of typed columns with constraints;
 * canonical JSON form for manifests and hashing; YAML output for
 * `keel schema infer`. */
#include "data_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void kl_schema_free(kl_schema *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_fields; i++) {
        kl_field *f = &s->fields[i];
        free(f->name);
        free(f->timezone);
        kl_tz_free(f->tz);
        for (size_t k = 0; k < f->n_allowed; k++) free(f->allowed[k]);
        free(f->allowed);
        free(f->note);
    }
    free(s->fields);
    free(s->note);
    free(s->dialect_note);
    free(s->name);
    free(s->sha256);
    free(s->text);
    free(s);
}

int kl_schema_find(const kl_schema *s, const char *name) {
    for (size_t i = 0; i < s->n_fields; i++)
        if (!strcmp(s->fields[i].name, name)) return (int)i;
    return -1;
}

static int one_char(const kl_node *n, char *out, int allow_empty, kl_err *e) {
    const char *v;
    int rc = kl_node_str(n, &v, e);
    if (rc) return rc;
    if (!strcmp(v, "\\t") || !strcmp(v, "tab")) { *out = '\t'; return KL_OK; }
    if (allow_empty && (!*v || !strcmp(v, "none"))) { *out = 0; return KL_OK; }
    if (strlen(v) != 1) return kl_node_error(n, e, KL_EINVAL, "expected one character, got \"%s\"", v);
    *out = v[0];
    return KL_OK;
}

/* A separator of numbers: one of , . space ' or none. */
static int num_sep(const kl_node *n, char *out, int allow_none, kl_err *e) {
    const char *v;
    int rc = kl_node_str(n, &v, e);
    if (rc) return rc;
    if (allow_none && (!*v || !strcmp(v, "none"))) { *out = 0; return KL_OK; }
    if (strlen(v) != 1 || !strchr(allow_none ? ",. '_" : ",.", v[0]))
        return kl_node_error(n, e, KL_EINVAL, "expected %s, got \"%s\"",
                             allow_none ? "one of , . ' _ space or none" : "'.' or ','", v);
    *out = v[0];
    return KL_OK;
}

static int load_delimiter(const kl_node *n, kl_dialect *d, kl_err *e) {
    const char *v;
    int rc = kl_node_str(n, &v, e);
    if (rc) return rc;
    if (!strcmp(v, "\\t") || !strcmp(v, "tab")) v = "\t";
    size_t len = strlen(v);
    if (len == 0 || len >= sizeof d->delim_s)
        return kl_node_error(n, e, KL_EINVAL, "a delimiter is 1 to %zu bytes, got \"%s\"", sizeof d->delim_s - 1, v);
    if (strchr(v, '\n') || strchr(v, '\r'))
        return kl_node_error(n, e, KL_EINVAL, "a delimiter cannot hold a line break");
    d->delim = v[0];
    d->delim_n = len > 1 ? (int)len : 0;
    memset(d->delim_s, 0, sizeof d->delim_s);
    if (len > 1) memcpy(d->delim_s, v, len);
    return KL_OK;
}

static int load_nulls(const kl_node *n, kl_dialect *d, kl_err *e) {
    int rc;
    d->n_null = 0;
    size_t cnt = kl_node_kind_of(n) == KL_NODE_SEQ ? kl_node_len(n) : 1;
    for (size_t i = 0; i < cnt; i++) {
        const kl_node *x = kl_node_kind_of(n) == KL_NODE_SEQ ? kl_node_at(n, i) : n;
        const char *v = "";
        if (kl_node_kind_of(x) != KL_NODE_NULL && (rc = kl_node_str(x, &v, e))) return rc;
        if (d->n_null >= KL_MAX_NULL_TOKENS || strlen(v) >= sizeof d->null_tokens[0])
            return kl_node_error(x, e, KL_EINVAL, "at most %d null tokens of up to 15 bytes", KL_MAX_NULL_TOKENS);
        strcpy(d->null_tokens[d->n_null++], v);
    }
    return KL_OK;
}

/* The dialect options of the CSV reader (docs/data.md "Dialect"). */
static int load_csv_options(const kl_node *m, kl_dialect *d, kl_err *e) {
    const kl_node *n;
    const char *v;
    int rc;
    int64_t iv;
    if ((n = kl_node_get(m, "escape"))) {
        if ((rc = one_char(n, &d->escape, 1, e))) return rc;
        if (d->escape == '\n' || d->escape == '\r')
            return kl_node_error(n, e, KL_EINVAL, "an escape cannot be a line break");
    }
    if ((rc = kl_spec_int(m, "header_rows", d->header_rows, &iv, e))) return rc;
    if (iv < 1 || iv > 16)
        return kl_node_error(kl_node_get(m, "header_rows"), e, KL_EINVAL, "header_rows must be 1 to 16");
    d->header_rows = (int)iv;
    if ((rc = kl_spec_int(m, "skip_rows", d->skip_rows, &iv, e))) return rc;
    if (iv < 0 || iv > 1000000)
        return kl_node_error(kl_node_get(m, "skip_rows"), e, KL_EINVAL, "skip_rows must be 0 to 1000000");
    d->skip_rows = (int)iv;
    if ((n = kl_node_get(m, "comment"))) {
        if ((rc = kl_node_str(n, &v, e))) return rc;
        if (strlen(v) >= sizeof d->comment || strchr(v, '\n') || strchr(v, '\r'))
            return kl_node_error(n, e, KL_EINVAL, "a comment prefix is up to %zu bytes on one line",
                                 sizeof d->comment - 1);
        snprintf(d->comment, sizeof d->comment, "%s", v);
    }
    if ((n = kl_node_get(m, "line_terminator"))) {
        if ((rc = kl_node_str(n, &v, e))) return rc;
        int t = !strcmp(v, "auto")                         ? KL_LT_AUTO
            : !strcasecmp(v, "lf") || !strcmp(v, "\n")     ? KL_LT_LF
            : !strcasecmp(v, "crlf") || !strcmp(v, "\r\n") ? KL_LT_CRLF
            : !strcasecmp(v, "cr") || !strcmp(v, "\r")     ? KL_LT_CR
                                                           : -1;
        if (t < 0) return kl_node_error(n, e, KL_EINVAL, "line_terminator must be auto, lf, crlf or cr, got \"%s\"", v);
        d->line_term = (kl_line_term)t;
        d->eol = t == KL_LT_CR ? '\r' : '\n';
    }
    if ((n = kl_node_get(m, "encoding"))) {
        if ((rc = kl_node_str(n, &v, e))) return rc;
        if (kl_encoding_parse(v, &d->encoding))
            return kl_node_error(n, e, KL_EINVAL,
                                 "encoding must be utf-8, utf-16le, utf-16be, latin-1 or windows-1252, got \"%s\"", v);
    }
    if ((n = kl_node_get(m, "decimal")) && (rc = num_sep(n, &d->decimal, 0, e))) return rc;
    if ((n = kl_node_get(m, "thousands")) && (rc = num_sep(n, &d->thousands, 1, e))) return rc;
    if (d->thousands && d->thousands == d->decimal)
        return kl_node_error(kl_node_get(m, "thousands"), e, KL_EINVAL, "thousands and decimal separators must differ");
    if ((rc = kl_spec_bool(m, "trim", d->trim, &d->trim, e))) return rc;
    size_t dn;
    const char *dl = kl_dialect_delim(d, &dn);
    if (d->quote && memchr(dl, d->quote, dn))
        return kl_node_error(m, e, KL_EINVAL, "the quote character is part of the delimiter");
    if (d->escape && memchr(dl, d->escape, dn))
        return kl_node_error(m, e, KL_EINVAL, "the escape character is part of the delimiter");
    return KL_OK;
}

static int load_dialect(const kl_node *m, kl_dialect *d, kl_err *e) {
    static const char *const keys[] = {"format", "delimiter", "quote", "header", "null", "max_record_bytes", "escape",
                                       "header_rows", "skip_rows", "comment", "line_terminator", "encoding", "decimal",
                                       "thousands", "trim"};
    int rc = kl_spec_check_keys(m, keys, KL_ARRAY_LEN(keys), e);
    if (rc) return rc;
    if (kl_node_kind_of(m) != KL_NODE_MAP) return kl_node_error(m, e, KL_EINVAL, "expected a map");
    const kl_node *n;
    if ((n = kl_node_get(m, "format"))) {
        const char *v;
        if ((rc = kl_node_str(n, &v, e))) return rc;
        if (!strcmp(v, "csv") || !strcmp(v, "tsv")) { d->format = KL_FMT_CSV; if (v[0] == 't') d->delim = '\t'; }
        else if (!strcmp(v, "jsonl") || !strcmp(v, "ndjson")) d->format = KL_FMT_JSONL;
        else return kl_node_error(n, e, KL_EINVAL, "format must be csv, tsv or jsonl, got \"%s\"", v);
    }
    if ((n = kl_node_get(m, "delimiter")) && (rc = load_delimiter(n, d, e))) return rc;
    if ((n = kl_node_get(m, "quote")) && (rc = one_char(n, &d->quote, 1, e))) return rc;
    if ((rc = kl_spec_bool(m, "header", d->header, &d->header, e))) return rc;
    if ((n = kl_node_get(m, "null")) && (rc = load_nulls(n, d, e))) return rc;
    int64_t mr;
    if ((rc = kl_spec_int(m, "max_record_bytes", (int64_t)d->max_record, &mr, e))) return rc;
    if (mr < 16) return kl_node_error(kl_node_get(m, "max_record_bytes"), e, KL_EINVAL, "must be at least 16");
    d->max_record = (size_t)mr;
    return load_csv_options(m, d, e);
}

/* min/max of a field: numbers for numeric types, ISO strings for date/timestamp. */
static int load_bound(const kl_node *n, kl_field *f, int is_max, kl_err *e) {
    const char *v;
    int rc = kl_node_str(n, &v, e);
    if (rc) return rc;
    int64_t iv = 0;
    double dv = 0;
    switch (f->type) {
    case KL_T_INT32: case KL_T_INT64:
        if (kl_parse_i64n(v, strlen(v), &iv)) return kl_node_error(n, e, KL_EINVAL, "expected an integer, got \"%s\"", v);
        dv = (double)iv;
        break;
    case KL_T_FLOAT32: case KL_T_FLOAT64:
        if (kl_parse_double(v, &dv)) return kl_node_error(n, e, KL_EINVAL, "expected a number, got \"%s\"", v);
        break;
    case KL_T_DATE: {
        int32_t d;
        if (kl_parse_date(v, strlen(v), &d)) return kl_node_error(n, e, KL_EINVAL, "expected a date YYYY-MM-DD, got \"%s\"", v);
        iv = d; dv = d;
        break;
    }
    case KL_T_TIMESTAMP:
        if (kl_parse_timestamp(v, strlen(v), f->tz, &iv))
            return kl_node_error(n, e, KL_EINVAL, "expected an ISO 8601 timestamp, got \"%s\"", v);
        dv = (double)iv;
        break;
    default:
        return kl_node_error(n, e, KL_EINVAL, "min/max apply to numeric, date and timestamp columns, not %s",
                             kl_type_name(f->type));
    }
    if (is_max) { f->has_max = 1; f->imax = iv; f->max = dv; }
    else { f->has_min = 1; f->imin = iv; f->min = dv; }
    return KL_OK;
}

static int load_field(const kl_node *m, kl_field *f, kl_err *e) {
    static const char *const keys[] = {"name", "type", "nullable", "min", "max", "allowed", "values",
                                       "max_length", "unique", "max_null_ratio", "timezone", "ambiguous", "description",
                                       /* the canonical JSON's spellings (manifests, features.json) */
                                       "timezone_offset_minutes", "timezone_ambiguous"};
    if (kl_node_kind_of(m) != KL_NODE_MAP)
        return kl_node_error(m, e, KL_EINVAL, "a column is a map with at least name and type");
    int rc = kl_spec_check_keys(m, keys, KL_ARRAY_LEN(keys), e);
    if (rc) return rc;
    (void)kl_node_get(m, "description"); /* for the reader only */
    f->line = kl_node_line(m);
    f->col = kl_node_col(m);
    const kl_node *n;
    const char *v;
    if ((rc = kl_spec_require(m, "name", &n, e)) || (rc = kl_node_str(n, &v, e))) return rc;
    if (!*v) return kl_node_error(n, e, KL_EINVAL, "empty column name");
    if (!(f->name = strdup(v))) return KL_ENOMEM;
    if ((rc = kl_spec_require(m, "type", &n, e)) || (rc = kl_node_str(n, &v, e))) return rc;
    if (kl_type_parse(v, &f->type)) {
        const char *s = kl_suggest(v, (const char *const[]){"int32", "int64", "float32", "float64", "bool", "string",
                                                            "category", "date", "timestamp"}, 9);
        return kl_node_error(n, e, KL_EINVAL, "unknown type \"%s\"%s%s%s", v, s ? " (did you mean '" : "",
                             s ? s : "", s ? "'?)" : "");
    }
    if ((rc = kl_spec_bool(m, "nullable", 1, &f->nullable, e))) return rc;
    if ((rc = kl_spec_bool(m, "unique", 0, &f->unique, e))) return rc;
    if ((rc = kl_spec_double(m, "max_null_ratio", 1.0, &f->max_null_ratio, e))) return rc;
    if (f->max_null_ratio < 0 || f->max_null_ratio > 1)
        return kl_node_error(kl_node_get(m, "max_null_ratio"), e, KL_EINVAL, "must be between 0 and 1");
    if ((rc = kl_spec_int(m, "max_length", 0, &f->max_length, e))) return rc;
    if (f->max_length && f->type != KL_T_STRING && f->type != KL_T_CATEGORY)
        return kl_node_error(kl_node_get(m, "max_length"), e, KL_EINVAL, "max_length applies to string columns");
    char offs[16];
    const kl_node *tzn = kl_node_get(m, "timezone"), *offn = kl_node_get(m, "timezone_offset_minutes");
    if (tzn && offn) return kl_node_error(offn, e, KL_EINVAL, "give timezone or timezone_offset_minutes, not both");
    if ((n = tzn ? tzn : offn)) {
        if (f->type != KL_T_TIMESTAMP)
            return kl_node_error(n, e, KL_EINVAL, "timezone applies to timestamp columns");
        if (offn) {
            int64_t mins;
            if ((rc = kl_node_int(offn, &mins, e))) return rc;
            if (mins < -18 * 60 || mins > 18 * 60) return kl_node_error(offn, e, KL_EINVAL, "offset beyond 18 hours");
            int64_t a = mins < 0 ? -mins : mins;
            if (mins == 0) snprintf(offs, sizeof offs, "UTC");
            else snprintf(offs, sizeof offs, "%c%02d:%02d", mins < 0 ? '-' : '+', (int)(a / 60), (int)(a % 60));
            v = offs;
        } else if ((rc = kl_node_str(n, &v, e))) {
            return rc;
        }
        kl_err te = {0};
        if (kl_tz_load(v, &f->tz, &te)) return kl_node_error(n, e, te.code, "%s", te.msg);
        if (!(f->timezone = strdup(v))) return KL_ENOMEM;
    } else if (f->type == KL_T_TIMESTAMP) {
        return kl_node_error(m, e, KL_EINVAL,
                             "timestamp column '%s' needs an explicit timezone rule (timezone: UTC, an offset or a zone like Europe/Berlin)",
                             f->name);
    }
    if (!(n = kl_node_get(m, "ambiguous"))) n = kl_node_get(m, "timezone_ambiguous");
    if (n) {
        if (!f->tz || kl_tz_is_fixed(f->tz))
            return kl_node_error(n, e, KL_EINVAL, "ambiguous applies to timestamp columns in a zone with clock changes");
        if ((rc = kl_node_str(n, &v, e))) return rc;
        int pol = !strcmp(v, "reject") ? KL_TZ_REJECT : !strcmp(v, "earliest") ? KL_TZ_EARLIEST : !strcmp(v, "latest") ? KL_TZ_LATEST : -1;
        if (pol < 0) return kl_node_error(n, e, KL_EINVAL, "ambiguous must be reject, earliest or latest, got \"%s\"", v);
        kl_tz_set_ambiguous(f->tz, pol);
        f->tz_ambiguous = pol;
    }
    if ((n = kl_node_get(m, "min")) && (rc = load_bound(n, f, 0, e))) return rc;
    if ((n = kl_node_get(m, "max")) && (rc = load_bound(n, f, 1, e))) return rc;
    if (f->has_min && f->has_max && f->min > f->max)
        return kl_node_error(kl_node_get(m, "max"), e, KL_EINVAL, "max is below min");
    const kl_node *al = kl_node_get(m, "allowed");
    if (!al) al = kl_node_get(m, "values");
    if (al) {
        if (f->type != KL_T_STRING && f->type != KL_T_CATEGORY)
            return kl_node_error(al, e, KL_EINVAL, "allowed values apply to string and category columns");
        if (kl_node_kind_of(al) != KL_NODE_SEQ) return kl_node_error(al, e, KL_EINVAL, "expected a list of values");
        f->n_allowed = kl_node_len(al);
        if (!(f->allowed = calloc(f->n_allowed + 1, sizeof *f->allowed))) return KL_ENOMEM;
        for (size_t i = 0; i < f->n_allowed; i++) {
            if ((rc = kl_node_str(kl_node_at(al, i), &v, e))) return rc;
            if (!(f->allowed[i] = strdup(v))) return KL_ENOMEM;
        }
    }
    return KL_OK;
}

int kl_schema_from_node(const kl_node *root, kl_schema **out, kl_err *e) {
    static const char *const keys[] = {"name", "description", "sha256", "dialect", "columns"};
    const kl_node *n;
    kl_schema *s = calloc(1, sizeof *s);
    int rc;
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_dialect_default(&s->dialect);
    if (kl_node_kind_of(root) != KL_NODE_MAP) { rc = kl_node_error(root, e, KL_EINVAL, "a schema is a map with 'columns'"); goto fail; }
    if ((rc = kl_spec_check_keys(root, keys, KL_ARRAY_LEN(keys), e))) goto fail;
    (void)kl_node_get(root, "description"); /* for the reader only */
    const char *v;
    if ((rc = kl_spec_str(root, "name", "", &v, e))) goto fail;
    s->name = strdup(v);
    if ((rc = kl_spec_str(root, "sha256", "", &v, e))) goto fail;
    if (*v) {
        if (strlen(v) != 64 || strspn(v, "0123456789abcdefABCDEF") != 64) {
            rc = kl_node_error(kl_node_get(root, "sha256"), e, KL_EINVAL, "expected 64 hex digits");
            goto fail;
        }
        s->sha256 = strdup(v);
    }
    if ((n = kl_node_get(root, "dialect"))) {
        s->dialect_given = 1;
        if ((rc = load_dialect(n, &s->dialect, e))) goto fail;
    }
    if ((rc = kl_spec_require(root, "columns", &n, e))) goto fail;
    if (kl_node_kind_of(n) != KL_NODE_SEQ || kl_node_len(n) == 0) {
        rc = kl_node_error(n, e, KL_EINVAL, "columns must be a non-empty list");
        goto fail;
    }
    s->n_fields = kl_node_len(n);
    if (!(s->fields = calloc(s->n_fields, sizeof *s->fields))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (size_t i = 0; i < s->n_fields; i++) {
        if ((rc = load_field(kl_node_at(n, i), &s->fields[i], e))) goto fail;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->fields[j].name, s->fields[i].name)) {
                rc = kl_node_error(kl_node_at(n, i), e, KL_EINVAL, "duplicate column '%s'", s->fields[i].name);
                goto fail;
            }
    }
    kl_buf b;
    kl_buf_init(&b);
    if ((rc = kl__schema_canonical(s, &b)) || b.failed) { kl_buf_free(&b); rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    s->text = kl_buf_take(&b);
    *out = s;
    return KL_OK;
fail:
    if (rc == KL_ENOMEM && e && !e->code) kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_schema_free(s);
    *out = NULL;
    return rc;
}

/* A schema file is written by hand (or by schema infer, then edited): a key
 * that nothing reads for its column's type is an error, not silence. */
int kl_schema_load_file(const char *path, kl_schema **out, kl_err *e) {
    kl_doc *d = NULL;
    *out = NULL;
    int rc = kl_doc_load_file(path, &d, e);
    if (rc) return rc;
    rc = kl_schema_from_node(kl_doc_root(d), out, e);
    if (!rc && (rc = kl_node_check_used(kl_doc_root(d), e))) {
        kl_schema_free(*out);
        *out = NULL;
    }
    kl_doc_free(d);
    return rc;
}

int kl_schema_load_str(const char *text, size_t len, const char *name, kl_schema **out, kl_err *e) {
    kl_doc *d = NULL;
    *out = NULL;
    int rc = kl_doc_load_str(text, len, name, &d, e);
    if (rc) return rc;
    rc = kl_schema_from_node(kl_doc_root(d), out, e);
    kl_doc_free(d);
    return rc;
}

/* ---- canonical JSON and YAML ----------------------------------------------- */

static void bound_str(const kl_field *f, int is_max, char *buf, size_t n) {
    int64_t iv = is_max ? f->imax : f->imin;
    if (f->type == KL_T_DATE) {
        int y, m, d;
        kl_civil_from_days(iv, &y, &m, &d);
        snprintf(buf, n, "%04d-%02d-%02d", y, m, d);
    } else if (f->type == KL_T_TIMESTAMP) {
        kl_time_rfc3339(iv, buf, n);
    } else if (f->type == KL_T_INT32 || f->type == KL_T_INT64) {
        snprintf(buf, n, "%lld", (long long)iv);
    } else {
        double v = is_max ? f->max : f->min;
        snprintf(buf, n, "%.15g", v);
        if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
    }
}

static int wanted(const kl_field *f, const char *const *cols, size_t ncols) {
    if (!cols) return 1;
    for (size_t k = 0; k < ncols; k++)
        if (cols[k] && !strcmp(cols[k], f->name)) return 1;
    return 0;
}

int kl_schema_json(const kl_schema *s, const char *const *cols, size_t ncols, kl_buf *b) {
    const kl_dialect *d = &s->dialect;
    char q[2] = {d->quote, 0};
    kl_buf_puts(b, "{\"columns\":[");
    for (size_t i = 0, out = 0; i < s->n_fields; i++) {
        const kl_field *f = &s->fields[i];
        char tmp[64];
        if (!wanted(f, cols, ncols)) continue;
        kl_buf_puts(b, out++ ? ",{" : "{");
        if (f->n_allowed) {
            kl_buf_puts(b, "\"allowed\":[");
            for (size_t k = 0; k < f->n_allowed; k++) {
                if (k) kl_buf_puts(b, ",");
                kl_buf_json_str(b, f->allowed[k]);
            }
            kl_buf_puts(b, "],");
        }
        if (f->has_max) { bound_str(f, 1, tmp, sizeof tmp); kl_buf_puts(b, "\"max\":"); kl_buf_json_str(b, tmp); kl_buf_puts(b, ","); }
        if (f->max_length) kl_buf_printf(b, "\"max_length\":%lld,", (long long)f->max_length);
        if (f->max_null_ratio < 1) kl_buf_printf(b, "\"max_null_ratio\":%.17g,", f->max_null_ratio);
        if (f->has_min) { bound_str(f, 0, tmp, sizeof tmp); kl_buf_puts(b, "\"min\":"); kl_buf_json_str(b, tmp); kl_buf_puts(b, ","); }
        kl_buf_puts(b, "\"name\":");
        kl_buf_json_str(b, f->name);
        kl_buf_printf(b, ",\"nullable\":%s", f->nullable ? "true" : "false");
        if (f->type == KL_T_TIMESTAMP && kl_tz_is_fixed(f->tz))
            kl_buf_printf(b, ",\"timezone_offset_minutes\":%d", kl_tz_offset(f->tz, 0) / 60);
        else if (f->type == KL_T_TIMESTAMP) {
            static const char *const amb[] = {"reject", "earliest", "latest"};
            kl_buf_printf(b, ",\"timezone\":");
            kl_buf_json_str(b, kl_tz_name(f->tz));
            kl_buf_printf(b, ",\"timezone_ambiguous\":\"%s\"", amb[f->tz_ambiguous]);
        }
        kl_buf_printf(b, ",\"type\":\"%s\"", kl_type_name(f->type));
        if (f->unique) kl_buf_puts(b, ",\"unique\":true");
        kl_buf_puts(b, "}");
    }
    kl_buf_puts(b, "],\"dialect\":{");
    /* options beyond the original dialect only when set, so that a schema without them keeps its text (and ids) */
    char one[2] = {0, 0};
    if (d->comment[0]) {
        kl_buf_puts(b, "\"comment\":");
        kl_buf_json_str(b, d->comment);
        kl_buf_puts(b, ",");
    }
    if (d->decimal && d->decimal != '.') {
        one[0] = d->decimal;
        kl_buf_puts(b, "\"decimal\":");
        kl_buf_json_str(b, one);
        kl_buf_puts(b, ",");
    }
    size_t dn;
    const char *dls = kl_dialect_delim(d, &dn);
    char dlb[sizeof d->delim_s + 1] = {0};
    memcpy(dlb, dls, dn);
    kl_buf_puts(b, "\"delimiter\":");
    kl_buf_json_str(b, dlb);
    if (d->encoding != KL_ENC_UTF8) kl_buf_printf(b, ",\"encoding\":\"%s\"", kl_encoding_name(d->encoding));
    if (d->escape) {
        one[0] = d->escape;
        kl_buf_puts(b, ",\"escape\":");
        kl_buf_json_str(b, one);
    }
    kl_buf_printf(b, ",\"format\":\"%s\",\"header\":%s", d->format == KL_FMT_JSONL ? "jsonl" : "csv",
                  d->header ? "true" : "false");
    if (d->header_rows > 1) kl_buf_printf(b, ",\"header_rows\":%d", d->header_rows);
    if (d->line_term != KL_LT_AUTO) kl_buf_printf(b, ",\"line_terminator\":\"%s\"", kl_line_term_name(d->line_term));
    kl_buf_printf(b, ",\"max_record_bytes\":%zu,\"null\":[", d->max_record);
    for (int i = 0; i < d->n_null; i++) {
        if (i) kl_buf_puts(b, ",");
        kl_buf_json_str(b, d->null_tokens[i]);
    }
    kl_buf_puts(b, "],\"quote\":");
    kl_buf_json_str(b, q);
    if (d->skip_rows) kl_buf_printf(b, ",\"skip_rows\":%d", d->skip_rows);
    if (d->thousands) { one[0] = d->thousands; kl_buf_puts(b, ",\"thousands\":"); kl_buf_json_str(b, one); }
    if (d->trim) kl_buf_puts(b, ",\"trim\":true");
    kl_buf_puts(b, "},\"name\":");
    kl_buf_json_str(b, s->name ? s->name : "");
    if (s->sha256) { kl_buf_puts(b, ",\"sha256\":"); kl_buf_json_str(b, s->sha256); }
    kl_buf_puts(b, "}");
    return b->failed ? KL_ENOMEM : KL_OK;
}

int kl__schema_canonical(const kl_schema *s, kl_buf *b) { return kl_schema_json(s, NULL, 0, b); }

/* Length of the valid UTF-8 sequence at p (up to end) and its code point;
 * 0 when the bytes there are not one (overlong, surrogate, beyond U+10FFFF,
 * cut short). */
static int utf8_seq(const unsigned char *p, const unsigned char *end, uint32_t *cp) {
    int n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc0 ? 2 : 0;
    if (!n || p[0] > 0xf4 || end - p < n) return 0;
    uint32_t v = p[0] & (0x3f >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[n] || v > 0x10ffff || (v >= 0xd800 && v < 0xe000)) return 0;
    *cp = v;
    return n;
}

/* A YAML scalar, double-quoted, that keel's loader (libyaml) always reads
 * back: quotes, backslashes and every character YAML does not allow raw
 * (C0 and C1 controls, DEL, U+FFFE/U+FFFF) are escaped; a byte that is not
 * UTF-8 (garbage input) becomes \xNN, which reads back as U+00NN, since a
 * YAML file is Unicode text and cannot hold the raw byte. */
static void yq(kl_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    kl_buf_puts(b, "\"");
    while (p < end) {
        uint32_t cp = *p;
        int n = *p < 0x80 ? 1 : utf8_seq(p, end, &cp);
        if (n == 0) { kl_buf_printf(b, "\\x%02x", *p++); continue; }
        if (cp == '"' || cp == '\\') kl_buf_printf(b, "\\%c", (int)cp);
        else if (cp == '\n') kl_buf_puts(b, "\\n");
        else if (cp == '\t') kl_buf_puts(b, "\\t");
        else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) kl_buf_printf(b, "\\x%02x", (unsigned)cp);
        else if (cp == 0xfffe || cp == 0xffff) kl_buf_printf(b, "\\u%04x", (unsigned)cp);
        else kl_buf_append(b, p, (size_t)n);
        p += n;
    }
    kl_buf_puts(b, "\"");
}

/* Each line of text as a YAML comment (control characters and bytes that are
 * not printable ASCII shown as '?': a comment must stay one valid line). */
static void comment(kl_buf *b, const char *indent, const char *text) {
    while (*text) {
        size_t n = strcspn(text, "\n");
        kl_buf_printf(b, "%s# ", indent);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)text[i];
            char ch = c >= 0x20 && c < 0x7f ? (char)c : '?';
            kl_buf_append(b, &ch, 1);
        }
        kl_buf_puts(b, "\n");
        text += n + (text[n] == '\n');
    }
}

int kl_schema_to_yaml(const kl_schema *s, kl_buf *b) {
    const kl_dialect *d = &s->dialect;
    char q[2] = {d->quote, 0};
    kl_buf_puts(b, "# keel ingest schema (review before use: types, nullability, constraints)\n");
    if (s->note) comment(b, "", s->note);
    if (s->name && *s->name) { kl_buf_puts(b, "name: "); yq(b, s->name); kl_buf_puts(b, "\n"); }
    kl_buf_puts(b, "dialect:\n");
    kl_buf_printf(b, "  format: %s\n", d->format == KL_FMT_JSONL ? "jsonl" : "csv");
    if (d->format == KL_FMT_CSV) {
        size_t dn;
        const char *dls = kl_dialect_delim(d, &dn);
        char dl[sizeof d->delim_s + 1] = {0}, one[2] = {0, 0};
        memcpy(dl, dls, dn);
        if (s->dialect_note) comment(b, "  ", s->dialect_note);
        kl_buf_puts(b, "  delimiter: ");
        yq(b, dl);
        kl_buf_puts(b, "\n");
        kl_buf_puts(b, "  quote: ");
        yq(b, q);
        if (d->escape) { one[0] = d->escape; kl_buf_puts(b, "\n  escape: "); yq(b, one); }
        kl_buf_printf(b, "\n  header: %s\n", d->header ? "true" : "false");
        if (d->header_rows > 1) kl_buf_printf(b, "  header_rows: %d\n", d->header_rows);
        if (d->skip_rows) kl_buf_printf(b, "  skip_rows: %d\n", d->skip_rows);
        if (d->comment[0]) { kl_buf_puts(b, "  comment: "); yq(b, d->comment); kl_buf_puts(b, "\n"); }
        if (d->line_term != KL_LT_AUTO) kl_buf_printf(b, "  line_terminator: %s\n", kl_line_term_name(d->line_term));
        if (d->encoding != KL_ENC_UTF8) kl_buf_printf(b, "  encoding: %s\n", kl_encoding_name(d->encoding));
        if (d->decimal && d->decimal != '.') {
            one[0] = d->decimal;
            kl_buf_puts(b, "  decimal: ");
            yq(b, one);
            kl_buf_puts(b, "\n");
        }
        if (d->thousands) { one[0] = d->thousands; kl_buf_puts(b, "  thousands: "); yq(b, one); kl_buf_puts(b, "\n"); }
        if (d->trim) kl_buf_puts(b, "  trim: true\n");
        if (!s->dialect_note)
            kl_buf_printf(b, "  # sniffed: line endings %s%s\n", d->crlf ? "CRLF" : "LF", d->bom ? ", UTF-8 BOM" : "");
    }
    kl_buf_puts(b, "  null: [");
    for (int i = 0; i < d->n_null; i++) {
        if (i) kl_buf_puts(b, ", ");
        yq(b, d->null_tokens[i]);
    }
    kl_buf_puts(b, "]\ncolumns:\n");
    for (size_t i = 0; i < s->n_fields; i++) {
        const kl_field *f = &s->fields[i];
        kl_buf_puts(b, "  - name: ");
        yq(b, f->name);
        kl_buf_printf(b, "\n    type: %s\n    nullable: %s\n", kl_type_name(f->type), f->nullable ? "true" : "false");
        if (f->type == KL_T_TIMESTAMP) { kl_buf_puts(b, "    timezone: "); yq(b, f->timezone ? f->timezone : "UTC"); kl_buf_puts(b, "\n"); }
        if (f->type == KL_T_TIMESTAMP && f->tz_ambiguous != KL_TZ_REJECT)
            kl_buf_printf(b, "    ambiguous: %s\n", f->tz_ambiguous == KL_TZ_EARLIEST ? "earliest" : "latest");
        if (f->n_allowed) {
            kl_buf_puts(b, "    values: [");
            for (size_t k = 0; k < f->n_allowed; k++) {
                if (k) kl_buf_puts(b, ", ");
                yq(b, f->allowed[k]);
            }
            kl_buf_puts(b, "]\n");
        }
        char tmp[64];
        if (f->has_min) { bound_str(f, 0, tmp, sizeof tmp); kl_buf_printf(b, "    # observed min: %s\n", tmp); }
        if (f->has_max) { bound_str(f, 1, tmp, sizeof tmp); kl_buf_printf(b, "    # observed max: %s\n", tmp); }
        if (f->note) comment(b, "    ", f->note);
    }
    return b->failed ? KL_ENOMEM : KL_OK;
}
