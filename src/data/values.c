/* Strict value parsing for ingestion: integers with overflow checks, floats
 * (exact fast path, strtod otherwise), booleans, ISO dates and timestamps
 * with a timezone rule, UTF-8 validation, constraint checks of a schema
 * field, the one grammar of a raw cell (null tokens, nullability, then the
 * type) shared by CSV/JSONL ingest and the online record path of the feature
 * layer, and HyperLogLog for approximate distinct counts. */
#include "data_int.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

static const char *const type_names[KL_T_COUNT] = {"int32", "int64", "float32", "float64", "bool",
                                                    "string", "category", "date", "timestamp"};

const char *kl_type_name(kl_type t) { return (unsigned)t < KL_T_COUNT ? type_names[t] : "?"; }

int kl_type_parse(const char *name, kl_type *out) {
    for (int i = 0; i < KL_T_COUNT; i++)
        if (!strcmp(name, type_names[i])) { *out = (kl_type)i; return KL_OK; }
    static const struct { const char *a; kl_type t; } alias[] = {
        {"int", KL_T_INT64}, {"integer", KL_T_INT64}, {"float", KL_T_FLOAT64}, {"double", KL_T_FLOAT64},
        {"boolean", KL_T_BOOL}, {"str", KL_T_STRING}, {"text", KL_T_STRING}, {"datetime", KL_T_TIMESTAMP}};
    for (size_t i = 0; i < KL_ARRAY_LEN(alias); i++)
        if (!strcmp(name, alias[i].a)) { *out = alias[i].t; return KL_OK; }
    return KL_EINVAL;
}

kl_col_type kl_type_column(kl_type t) {
    switch (t) {
    case KL_T_INT32: return KL_COL_INT32;
    case KL_T_INT64: return KL_COL_INT64;
    case KL_T_FLOAT32: return KL_COL_FLOAT32;
    case KL_T_FLOAT64: return KL_COL_FLOAT64;
    case KL_T_BOOL: return KL_COL_BOOL;
    case KL_T_DATE: return KL_COL_DATE;
    case KL_T_TIMESTAMP: return KL_COL_TIMESTAMP;
    default: return KL_COL_STRING;
    }
}

kl_type kl_type_of_column(kl_col_type c) {
    switch (c) {
    case KL_COL_INT32: return KL_T_INT32;
    case KL_COL_INT64: return KL_T_INT64;
    case KL_COL_FLOAT32: return KL_T_FLOAT32;
    case KL_COL_FLOAT64: return KL_T_FLOAT64;
    case KL_COL_BOOL: return KL_T_BOOL;
    case KL_COL_DATE: return KL_T_DATE;
    case KL_COL_TIMESTAMP: return KL_T_TIMESTAMP;
    default: return KL_T_STRING;
    }
}

static const char *const rej_names[KL_REJ_COUNT] = {
    "type", "null", "range", "allowed", "length", "unique", "utf8", "ragged", "quote", "record_size", "json"};
const char *kl_reject_kind_name(kl_reject_kind k) { return (unsigned)k < KL_REJ_COUNT ? rej_names[k] : "?"; }

/* ---- numbers -------------------------------------------------------------- */

int kl_parse_i64n(const char *s, size_t n, int64_t *out) {
    if (n == 0) return KL_EINVAL;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-' || s[0] == '+') { neg = s[0] == '-'; i = 1; }
    if (i == n) return KL_EINVAL;
    uint64_t v = 0;
    for (; i < n; i++) {
        unsigned c = (unsigned)(s[i] - '0');
        if (c > 9) return KL_EINVAL;
        if (v > (UINT64_MAX - c) / 10) return KL_ERANGE;
        v = v * 10 + c;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return KL_ERANGE;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return KL_ERANGE;
        *out = (int64_t)v;
    }
    return KL_OK;
}

static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int slow_double(const char *s, size_t n, double *out) {
    char tmp[128];
    char *b = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!b) return KL_ENOMEM;
    memcpy(b, s, n);
    b[n] = 0;
    for (size_t i = 0; i < n; i++) /* strtod accepts hex floats and spaces; we do not */
        if (b[i] == 'x' || b[i] == 'X' || b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
            if (b != tmp) free(b);
            return KL_EINVAL;
        }
    int rc = kl_parse_double(b, out);
    if (b != tmp) free(b);
    return rc;
}

int kl_parse_f64n(const char *s, size_t n, double *out) {
    if (n == 0) return KL_EINVAL;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-' || s[0] == '+') { neg = s[0] == '-'; i = 1; }
    uint64_t m = 0;
    int digits = 0, exp10 = 0, any = 0;
    while (i < n && (unsigned)(s[i] - '0') <= 9) {
        if (digits < 19) { m = m * 10 + (unsigned)(s[i] - '0'); if (m) digits++; }
        else exp10++;
        any = 1;
        i++;
    }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && (unsigned)(s[i] - '0') <= 9) {
            if (digits < 19) { m = m * 10 + (unsigned)(s[i] - '0'); if (m) digits++; exp10--; }
            any = 1;
            i++;
        }
    }
    if (!any) return slow_double(s, n, out); /* nan, inf, or garbage */
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0, ev = 0, edig = 0;
        if (i < n && (s[i] == '-' || s[i] == '+')) { eneg = s[i] == '-'; i++; }
        while (i < n && (unsigned)(s[i] - '0') <= 9) {
            if (ev < 100000) ev = ev * 10 + (s[i] - '0');
            edig = 1;
            i++;
        }
        if (!edig) return KL_EINVAL;
        exp10 += eneg ? -ev : ev;
    }
    if (i != n) return KL_EINVAL;
    if (m < (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        double v = (double)m;
        v = exp10 < 0 ? v / pow10_tab[-exp10] : v * pow10_tab[exp10];
        *out = neg ? -v : v;
        return KL_OK;
    }
    int rc = slow_double(s, n, out);
    if (rc == KL_OK && isinf(*out)) return KL_ERANGE;
    return rc;
}

int kl_parse_booln(const char *s, size_t n, int *out) {
    static const char *const t[] = {"true", "t", "1", "yes", "y"}, *const f[] = {"false", "f", "0", "no", "n"};
    for (size_t k = 0; k < 5; k++) {
        if (strlen(t[k]) == n && !strncasecmp(s, t[k], n)) { *out = 1; return KL_OK; }
        if (strlen(f[k]) == n && !strncasecmp(s, f[k], n)) { *out = 0; return KL_OK; }
    }
    return KL_EINVAL;
}

/* ---- dates and times ------------------------------------------------------ */

/* Howard Hinnant's days_from_civil / civil_from_days. */
int64_t kl_days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void kl_civil_from_days(int64_t z, int *yy, int *mm, int *dd) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t y = (int64_t)yoe + era * 400;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    const unsigned d = doy - (153 * mp + 2) / 5 + 1;
    const unsigned m = mp < 10 ? mp + 3 : mp - 9;
    *yy = (int)(y + (m <= 2));
    *mm = (int)m;
    *dd = (int)d;
}

static int num(const char *s, size_t n, size_t *i, int width, int *out) {
    int v = 0;
    for (int k = 0; k < width; k++) {
        if (*i >= n) return -1;
        unsigned c = (unsigned)(s[*i] - '0');
        if (c > 9) return -1;
        v = v * 10 + (int)c;
        (*i)++;
    }
    *out = v;
    return 0;
}

static int days_in_month(int y, int m) {
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return dm[m - 1];
}

static int parse_ymd(const char *s, size_t n, size_t *i, int64_t *days) {
    int y, m, d;
    if (num(s, n, i, 4, &y) || *i >= n || s[*i] != '-') return KL_EINVAL;
    (*i)++;
    if (num(s, n, i, 2, &m) || *i >= n || s[*i] != '-') return KL_EINVAL;
    (*i)++;
    if (num(s, n, i, 2, &d)) return KL_EINVAL;
    if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m)) return KL_ERANGE;
    *days = kl_days_from_civil(y, (unsigned)m, (unsigned)d);
    return KL_OK;
}

int kl_parse_date(const char *s, size_t n, int32_t *days) {
    size_t i = 0;
    int64_t d;
    int rc = parse_ymd(s, n, &i, &d);
    if (rc) return rc;
    if (i != n) return KL_EINVAL;
    *days = (int32_t)d;
    return KL_OK;
}

/* "Z", "+02:00", "-0530", "+02" at s[*i..n) */
static int parse_offset(const char *s, size_t n, size_t *i, int *minutes) {
    if (*i >= n) return KL_EINVAL;
    if (s[*i] == 'Z' || s[*i] == 'z') { (*i)++; *minutes = 0; return KL_OK; }
    if (s[*i] != '+' && s[*i] != '-') return KL_EINVAL;
    int neg = s[*i] == '-', h, m = 0;
    (*i)++;
    if (num(s, n, i, 1, &h)) return KL_EINVAL;
    if (*i < n && (unsigned)(s[*i] - '0') <= 9) h = h * 10 + (s[(*i)++] - '0');
    if (*i < n && s[*i] == ':') (*i)++;
    if (*i < n && num(s, n, i, 2, &m)) return KL_EINVAL;
    if (h > 18 || m > 59) return KL_ERANGE;
    *minutes = (neg ? -1 : 1) * (h * 60 + m);
    return KL_OK;
}

int kl_parse_tz(const char *s, int *minutes) {
    size_t n = strlen(s), i = 0;
    if (!strcasecmp(s, "UTC") || !strcasecmp(s, "GMT") || !strcmp(s, "Z") || !strcasecmp(s, "Etc/UTC")) {
        *minutes = 0;
        return KL_OK;
    }
    if (n > 3 && (!strncasecmp(s, "UTC", 3) || !strncasecmp(s, "GMT", 3))) i = 3;
    int rc = parse_offset(s, n, &i, minutes);
    if (rc) return rc;
    return i == n ? KL_OK : KL_EINVAL;
}

int kl_parse_timestamp(const char *s, size_t n, const kl_tz *tz, int64_t *us) {
    size_t i = 0;
    int64_t days;
    int rc = parse_ymd(s, n, &i, &days);
    if (rc) return rc;
    int hh = 0, mi = 0, ss = 0, off = 0, has_off = 0;
    int64_t frac = 0;
    if (i < n && (s[i] == 'T' || s[i] == 't' || s[i] == ' ')) {
        i++;
        if (num(s, n, &i, 2, &hh) || i >= n || s[i] != ':') return KL_EINVAL;
        i++;
        if (num(s, n, &i, 2, &mi)) return KL_EINVAL;
        if (i < n && s[i] == ':') {
            i++;
            if (num(s, n, &i, 2, &ss)) return KL_EINVAL;
            if (i < n && (s[i] == '.' || s[i] == ',')) {
                i++;
                int k = 0;
                while (i < n && (unsigned)(s[i] - '0') <= 9) {
                    if (k < 6) { frac = frac * 10 + (s[i] - '0'); k++; }
                    i++;
                }
                if (k == 0) return KL_EINVAL;
                for (; k < 6; k++) frac *= 10;
            }
        }
        if (hh > 23 || mi > 59 || ss > 60) return KL_ERANGE;
        if (i < n) {
            rc = parse_offset(s, n, &i, &off);
            if (rc) return rc;
            has_off = 1;
        }
    }
    if (i != n) return KL_EINVAL;
    int64_t secs = days * 86400 + hh * 3600 + mi * 60 + ss;
    if (has_off) secs -= (int64_t)off * 60;
    else {
        switch (kl_tz_to_utc(tz, secs, &secs)) {
        case KL_TZ_GAP: return KL_ENOTFOUND;
        case KL_TZ_AMBIGUOUS: return KL_EEXIST;
        default: break;
        }
    }
    *us = secs * 1000000 + frac;
    return KL_OK;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

int kl_utf8_valid(const char *str, size_t n, size_t *chars) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, c = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
            c += 8;
        }
        if (i >= n) break;
        unsigned char b = s[i];
        if (b < 0x80) { i++; c++; continue; }
        size_t len;
        uint32_t cp;
        if ((b & 0xE0) == 0xC0) { len = 2; cp = b & 0x1F; }
        else if ((b & 0xF0) == 0xE0) { len = 3; cp = b & 0x0F; }
        else if ((b & 0xF8) == 0xF0) { len = 4; cp = b & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
        c++;
    }
    if (chars) *chars = c;
    return 1;
}

/* ---- one value against a field ------------------------------------------- */

#define REJ(kind, ...) do { KL__MSG(msg, msgn, __VA_ARGS__); return (int)(kind) + 1; } while (0)

static int check_allowed(const kl_field *f, const char *s, size_t n) {
    for (size_t k = 0; k < f->n_allowed; k++)
        if ((!n || f->allowed[k][0] == s[0]) && strnlen(f->allowed[k], n + 1) == n && !memcmp(f->allowed[k], s, n)) return 1;
    return 0;
}

/* The constraints of field f on a parsed value v; s[0..shown) is its text for
 * the messages (NULL: a JSON number, printed from v). Floats are rounded to
 * float32 here for float32 fields. */
static int check_value(const kl_field *f, kl_cell *v, const char *s, int shown, char *msg, size_t msgn) {
    char num[KL_CELL_NUMBUF];
#define SHOW_NUMBER() /* a JSON number's text, for a message only */                     \
    do {                                                                                 \
        if (s) break;                                                                    \
        if (f->type == KL_T_FLOAT32 || f->type == KL_T_FLOAT64) snprintf(num, sizeof num, "%.17g", v->d); \
        else snprintf(num, sizeof num, "%lld", (long long)v->i);                         \
        s = num;                                                                         \
        shown = (int)strlen(num);                                                        \
    } while (0)
#define REJ_SHOWN(kind, ...) do { SHOW_NUMBER(); REJ(kind, __VA_ARGS__); } while (0)
    switch (f->type) {
    case KL_T_INT32:
    case KL_T_INT64:
        if (f->type == KL_T_INT32 && (v->i < INT32_MIN || v->i > INT32_MAX))
            REJ_SHOWN(KL_REJ_RANGE, "'%.*s' overflows %s", shown, s, kl_type_name(f->type));
        if ((f->has_min && v->i < f->imin) || (f->has_max && v->i > f->imax))
            REJ_SHOWN(KL_REJ_RANGE, "%lld is outside [%lld, %lld]", (long long)v->i,
                (long long)(f->has_min ? f->imin : INT64_MIN), (long long)(f->has_max ? f->imax : INT64_MAX));
        break;
    case KL_T_FLOAT32:
    case KL_T_FLOAT64:
        if (f->type == KL_T_FLOAT32 && isfinite(v->d) && fabs(v->d) > FLT_MAX)
            REJ_SHOWN(KL_REJ_RANGE, "'%.*s' overflows %s", shown, s, kl_type_name(f->type));
        if (f->type == KL_T_FLOAT32) v->d = (float)v->d;
        if ((f->has_min && !(v->d >= f->min)) || (f->has_max && !(v->d <= f->max)))
            REJ_SHOWN(KL_REJ_RANGE, "%.*s is outside [%g, %g]", shown, s, f->has_min ? f->min : -INFINITY,
                f->has_max ? f->max : INFINITY);
        break;
    case KL_T_DATE:
    case KL_T_TIMESTAMP:
        if ((f->has_min && v->i < f->imin) || (f->has_max && v->i > f->imax))
            REJ_SHOWN(KL_REJ_RANGE, "%.*s is outside the allowed %s", shown, s, f->type == KL_T_DATE ? "dates" : "times");
        break;
    default:
        break;
    }
    return KL_OK;
#undef REJ_SHOWN
#undef SHOW_NUMBER
}

/* A number written with the dialect's separators (decimal ',', thousands
 * '.' ' ' '\'' ...) in the form the number parsers read: group separators
 * between digits of the integer part dropped, the decimal separator made
 * '.'. 0 when the text needs no change or does not fit nb (then it is read
 * as it is); the parsers then decide whether it is a number. */
int kl_num_normalize(const kl_dialect *d, const char *s, size_t n, char *nb, size_t nbn, size_t *out) {
    const char dec = d->decimal ? d->decimal : '.', th = d->thousands;
    if (n >= nbn) return 0;
    size_t o = 0;
    int frac = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int digit_before = i > 0 && (unsigned)(s[i - 1] - '0') <= 9,
            digit_after = i + 1 < n && (unsigned)(s[i + 1] - '0') <= 9;
        if (th && c == th && !frac && digit_before && digit_after) continue;
        if (c == dec && !frac) { nb[o++] = '.'; frac = 1; continue; }
        if (c == '.' && dec != '.') { /* a '.' that is no separator here: not a number */
            nb[0] = 'x';
            *out = 1;
            return 1;
        }
        if (c == 'e' || c == 'E') frac = 1;
        nb[o++] = c;
    }
    *out = o;
    return 1;
}

static int value_parse(const kl_field *f, const kl_dialect *d, const char *s, size_t n, kl_cell *v, char *msg,
                       size_t msgn) {
    int rc;
    const int shown = n > 40 ? 40 : (int)n;
    const char *ns = s; /* the number's text in the parsers' form */
    size_t nn = n;
    char nb[128];
    if (d && (d->thousands || (d->decimal && d->decimal != '.')) && f->type <= KL_T_FLOAT64 &&
        kl_num_normalize(d, s, n, nb, sizeof nb, &nn))
        ns = nb;
    switch (f->type) {
    case KL_T_INT32:
    case KL_T_INT64:
        rc = kl_parse_i64n(ns, nn, &v->i);
        if (rc == KL_ERANGE) REJ(KL_REJ_RANGE, "'%.*s' overflows %s", shown, s, kl_type_name(f->type));
        if (rc) REJ(KL_REJ_TYPE, "'%.*s' is not an %s", shown, s, kl_type_name(f->type));
        break;
    case KL_T_FLOAT32:
    case KL_T_FLOAT64:
        rc = kl_parse_f64n(ns, nn, &v->d);
        if (rc == KL_ERANGE) REJ(KL_REJ_RANGE, "'%.*s' overflows %s", shown, s, kl_type_name(f->type));
        if (rc) REJ(KL_REJ_TYPE, "'%.*s' is not a %s", shown, s, kl_type_name(f->type));
        break;
    case KL_T_BOOL: {
        int b;
        if (kl_parse_booln(s, n, &b)) REJ(KL_REJ_TYPE, "'%.*s' is not a bool", shown, s);
        v->i = b;
        return KL_OK;
    }
    case KL_T_DATE: {
        int32_t d;
        rc = kl_parse_date(s, n, &d);
        if (rc) REJ(KL_REJ_TYPE, "'%.*s' is not a date (YYYY-MM-DD)", shown, s);
        v->i = d;
        break;
    }
    case KL_T_TIMESTAMP:
        rc = kl_parse_timestamp(s, n, f->tz, &v->i);
        if (rc == KL_ENOTFOUND) REJ(KL_REJ_TYPE, "'%.*s' does not exist in %s (skipped when clocks go forward)", shown, s, kl_tz_name(f->tz));
        if (rc == KL_EEXIST)
            REJ(KL_REJ_TYPE, "'%.*s' occurs twice in %s (clocks go back; set the column's ambiguous: earliest or latest)", shown, s,
                kl_tz_name(f->tz));
        if (rc) REJ(KL_REJ_TYPE, "'%.*s' is not a timestamp (ISO 8601)", shown, s);
        break;
    case KL_T_STRING:
    case KL_T_CATEGORY: {
        size_t chars;
        if (!kl_utf8_valid(s, n, &chars)) REJ(KL_REJ_UTF8, "invalid UTF-8");
        if (f->max_length && (int64_t)chars > f->max_length)
            REJ(KL_REJ_LENGTH, "%zu characters, more than max_length %lld", chars, (long long)f->max_length);
        if (f->n_allowed && !check_allowed(f, s, n))
            REJ(KL_REJ_ALLOWED, "'%.*s' is not one of the allowed values", shown, s);
        v->s = s;
        v->n = n;
        return KL_OK;
    }
    default:
        REJ(KL_REJ_TYPE, "unknown type");
    }
    return check_value(f, v, s, shown, msg, msgn);
}

int kl_value_parse(const kl_field *f, const char *s, size_t n, kl_cell *v, char *msg, size_t msgn) {
    return value_parse(f, NULL, s, n, v, msg, msgn);
}

/* ---- one raw cell: the grammar shared by ingest and the online path ----- */

int kl_null_token(const kl_dialect *d, const char *s, size_t n) {
    if (!d || n >= sizeof d->null_tokens[0]) return 0;
    for (int k = 0; k < d->n_null; k++) {
        const char *t = d->null_tokens[k];
        if (t[n] == 0 && (n == 0 || (t[0] == s[0] && !memcmp(t, s, n) && !memchr(t, 0, n)))) return 1;
    }
    return 0;
}

int kl_cell_parse(const kl_field *f, const kl_dialect *d, const char *s, size_t n, int quoted, kl_cell *v,
                  int *isnull, char *msg, size_t msgn) {
    *isnull = !s || (!quoted && kl_null_token(d, s, n));
    if (*isnull) {
        if (!f->nullable) REJ(KL_REJ_NULL, "null in a non-nullable column");
        return KL_OK;
    }
    return value_parse(f, d, s, n, v, msg, msgn);
}

static int is_text_type(kl_type t) { return t == KL_T_STRING || t == KL_T_CATEGORY; }

/* Years 0000-9999 in days since the epoch: [-719528, 2932897). */
#define DAYS_MIN (-719528LL)
#define DAYS_END 2932897LL

/* A JSON number of a non-text field: read as the field's type directly (the
 * same value as printing it exactly and parsing the text, without either). */
static int json_number(const kl_field *f, double x, kl_cell *v, char *msg, size_t msgn) {
    switch (f->type) {
    case KL_T_FLOAT32:
    case KL_T_FLOAT64:
        v->d = x;
        break;
    case KL_T_DATE:
    case KL_T_TIMESTAMP: { /* days / µs since 1970-01-01 (UTC) */
        const char *unit = f->type == KL_T_DATE ? "days" : "µs";
        if (x != floor(x) || fabs(x) > 9007199254740992.0) REJ(KL_REJ_TYPE, "%.17g is not a whole number of %s", x, unit);
        v->i = (int64_t)x;
        int64_t days = f->type == KL_T_DATE ? v->i : (int64_t)floor(x / 86400e6);
        if (days < DAYS_MIN || days >= DAYS_END)
            REJ(KL_REJ_RANGE, "%.17g %s since 1970-01-01 is outside the years 0000-9999", x, unit);
        break;
    }
    default: /* integers and bools */
        if (x != floor(x)) REJ(KL_REJ_TYPE, "%.17g is not an integer", x);
        if (fabs(x) > 9007199254740992.0) REJ(KL_REJ_RANGE, "%.17g is beyond 2^53 (not exact in JSON; quote it)", x);
        v->i = (int64_t)x;
        if (f->type == KL_T_BOOL) {
            if (v->i != 0 && v->i != 1) REJ(KL_REJ_TYPE, "'%lld' is not a bool", (long long)v->i);
            return KL_OK;
        }
        break;
    }
    return check_value(f, v, NULL, 0, msg, msgn);
}

int kl_json_cell_parse(const kl_field *f, const kl_dialect *d, const cJSON *it, char buf[KL_CELL_NUMBUF], kl_cell *v,
                       int *isnull, char *msg, size_t msgn) {
    *isnull = 0;
    if (!it || cJSON_IsNull(it)) return kl_cell_parse(f, d, NULL, 0, 0, v, isnull, msg, msgn);
    if (cJSON_IsString(it)) /* whole length, a \u0000 inside kept; quoted for text fields only */
        return kl_cell_parse(f, d, it->valuestring, kl_json_string_len(it), is_text_type(f->type), v, isnull, msg, msgn);
    if (cJSON_IsBool(it)) {
        const char *t = cJSON_IsTrue(it) ? "true" : "false";
        return kl_cell_parse(f, d, t, strlen(t), 1, v, isnull, msg, msgn);
    }
    if (cJSON_IsNumber(it)) {
        if (!is_text_type(f->type)) return json_number(f, it->valuedouble, v, msg, msgn);
        snprintf(buf, KL_CELL_NUMBUF, "%.17g", it->valuedouble); /* a number in a text field: its exact text */
        return kl_cell_parse(f, d, buf, strlen(buf), 1, v, isnull, msg, msgn);
    }
    REJ(KL_REJ_TYPE, "expected a scalar, got %s", cJSON_IsArray(it) ? "an array" : "an object");
}

/* ---- hashing and HyperLogLog ---------------------------------------------- */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
    return h;
}

uint64_t kl_hash64(const void *data, size_t n) {
    /* 8 bytes at a time, murmur3 finaliser: enough mixing for HLL and sets */
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix64(h ^ w) + 0x9E3779B97F4A7C15ull;
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = mix64(h ^ w ^ ((uint64_t)n << 56));
    }
    return mix64(h);
}

void kl_hll_add_hash(kl_hll *h, uint64_t x) {
    unsigned idx = (unsigned)(x >> (64 - KL_HLL_P));
    uint64_t w = (x << KL_HLL_P) | (1ull << (KL_HLL_P - 1));
    uint8_t rank = (uint8_t)(__builtin_clzll(w) + 1);
    if (rank > h->reg[idx]) h->reg[idx] = rank;
}

void kl_hll_merge(kl_hll *dst, const kl_hll *src) {
    for (size_t i = 0; i < sizeof dst->reg; i++)
        if (src->reg[i] > dst->reg[i]) dst->reg[i] = src->reg[i];
}

double kl_hll_estimate(const kl_hll *h) {
    const double m = (double)(1 << KL_HLL_P);
    double sum = 0;
    int zeros = 0;
    for (size_t i = 0; i < sizeof h->reg; i++) {
        sum += ldexp(1.0, -h->reg[i]);
        zeros += h->reg[i] == 0;
    }
    double est = 0.7213 / (1 + 1.079 / m) * m * m / sum;
    if (est <= 2.5 * m && zeros) est = m * log(m / zeros);
    return est;
}
