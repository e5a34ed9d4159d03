/* Error codes and the kl_err detail buffer; assertion failure; suggestions
 * ("did you mean"); human-readable sizes and durations; the kl_buf builder. */
#include "core_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *kl_strerror(int code) {
    switch (code) {
    case KL_OK: return "success";
    case KL_EINVAL: return "invalid value";
    case KL_EPARSE: return "malformed input";
    case KL_ENOMEM: return "out of memory or over budget";
    case KL_ENOTFOUND: return "not found";
    case KL_EUNSUPPORTED: return "not supported";
    case KL_ESHAPE: return "shape mismatch";
    case KL_ETYPE: return "type mismatch";
    case KL_ECHECKSUM: return "checksum mismatch";
    case KL_EEXIST: return "already exists";
    case KL_ETIMEOUT: return "timed out";
    case KL_EBUSY: return "busy";
    case KL_ECANCELED: return "cancelled";
    case KL_EUSAGE: return "usage error";
    case KL_ERANGE: return "out of range";
    case KL_ESTATE: return "invalid state";
    case KL_EINTERNAL: return "internal error";
    default:
        if (code < 0 && code > -4096) return strerror(-code);
        return "unknown error";
    }
}

void kl_err_clear(kl_err *e) {
    if (!e) return;
    e->code = KL_OK;
    e->msg[0] = e->file[0] = e->field[0] = e->text[0] = 0;
    e->line = e->col = 0;
}

int kl_err_vset(kl_err *e, int code, const char *fmt, va_list ap) {
    if (!e) return code;
    e->code = code;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    e->file[0] = e->field[0] = 0;
    e->line = e->col = 0;
    return code;
}

int kl_err_set(kl_err *e, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kl_err_vset(e, code, fmt, ap);
    va_end(ap);
    return code;
}

int kl_err_setloc(kl_err *e, int code, const char *file, int line, int col, const char *fmt, ...) {
    if (!e) return code;
    va_list ap;
    va_start(ap, fmt);
    kl_err_vset(e, code, fmt, ap);
    va_end(ap);
    snprintf(e->file, sizeof e->file, "%s", file ? file : "");
    e->line = line;
    e->col = col;
    return code;
}

void kl_err_field(kl_err *e, const char *fmt, ...) {
    if (!e) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->field, sizeof e->field, fmt, ap);
    va_end(ap);
}

void kl_err_prefix(kl_err *e, const char *fmt, ...) {
    if (!e) return;
    char pre[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old);
}

const char *kl_err_what(kl_err *e) {
    if (!e) return "(no error detail)";
    size_t n = 0, cap = sizeof e->text;
    e->text[0] = 0;
    if (e->file[0]) {
        n += (size_t)snprintf(e->text + n, cap - n, "%s", e->file);
        if (e->line > 0 && n < cap) n += (size_t)snprintf(e->text + n, cap - n, ":%d", e->line);
        if (e->line > 0 && e->col > 0 && n < cap) n += (size_t)snprintf(e->text + n, cap - n, ":%d", e->col);
        if (n < cap) n += (size_t)snprintf(e->text + n, cap - n, ": ");
    }
    if (e->field[0] && n < cap) n += (size_t)snprintf(e->text + n, cap - n, "%s: ", e->field);
    if (n < cap) {
        if (e->msg[0]) snprintf(e->text + n, cap - n, "%s", e->msg);
        else snprintf(e->text + n, cap - n, "%s", kl_strerror(e->code));
    }
    return e->text;
}

void kl__assert_fail(const char *expr, const char *file, int line, const char *func) {
    fprintf(stderr, "keel: internal error (bug): assertion '%s' failed in %s at %s:%d\n", expr, func,
            file, line);
    fflush(stderr);
    abort();
}

/* ---- suggestions ---------------------------------------------------- */

size_t kl_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return la > lb ? la : lb;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t sub = prev + (a[i - 1] != b[j - 1]);
            size_t del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    return row[lb];
}

const char *kl_suggest(const char *word, const char *const *cands, size_t n) {
    const char *best = NULL;
    size_t bestd = (size_t)-1, len = strlen(word);
    size_t limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
    for (size_t i = 0; i < n; i++) {
        if (!cands[i]) continue;
        size_t d = kl_edit_distance(word, cands[i]);
        /* a prefix of a longer candidate also counts ("--js" → "--json") */
        if (len >= 2 && strncmp(cands[i], word, len) == 0 && d > 1) d = 1;
        if (d < bestd) { bestd = d; best = cands[i]; }
    }
    return bestd <= limit ? best : NULL;
}

/* ---- formatting ------------------------------------------------------ */

const char *kl_fmt_bytes(uint64_t bytes, char *buf, size_t n) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, n, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

const char *kl_fmt_duration(double s, char *buf, size_t n) {
    if (s < 0) s = 0;
    if (s < 1e-3) snprintf(buf, n, "%.0f µs", s * 1e6);
    else if (s < 1) snprintf(buf, n, "%.1f ms", s * 1e3);
    else if (s < 60) snprintf(buf, n, "%.2f s", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), ((int)s % 3600) / 60);
    return buf;
}

/* ---- kl_buf ------------------------------------------------------------ */

void kl_buf_init(kl_buf *b) { memset(b, 0, sizeof *b); }
void kl_buf_free(kl_buf *b) { free(b->data); memset(b, 0, sizeof *b); }
void kl_buf_reset(kl_buf *b) { b->len = 0; b->failed = 0; if (b->cap) b->data[0] = 0; }

static int buf_reserve(kl_buf *b, size_t extra) {
    if (b->failed) return KL_ENOMEM;
    if (b->len + extra + 1 <= b->cap) return KL_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) { b->failed = 1; return KL_ENOMEM; }
    b->data = d;
    b->cap = cap;
    return KL_OK;
}

int kl_buf_append(kl_buf *b, const void *data, size_t len) {
    if (buf_reserve(b, len)) return KL_ENOMEM;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return KL_OK;
}

int kl_buf_puts(kl_buf *b, const char *s) { return kl_buf_append(b, s, strlen(s)); }

int kl_buf_vprintf(kl_buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return KL_EINVAL;
    if (buf_reserve(b, (size_t)n)) return KL_ENOMEM;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return KL_OK;
}

int kl_buf_printf(kl_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = kl_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

int kl_buf_json_str(kl_buf *b, const char *s) { return s ? kl_buf_json_strn(b, s, strlen(s)) : kl_buf_puts(b, "null"); }

int kl_buf_json_strn(kl_buf *b, const char *s, size_t n) {
    if (!s) return kl_buf_puts(b, "null");
    if (kl_buf_append(b, "\"", 1)) return KL_ENOMEM;
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    const unsigned char *run = p;
    for (; p < end; p++) {
        const char *esc = NULL;
        char tmp[8];
        switch (*p) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (*p < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", *p); esc = tmp; }
        }
        if (esc) {
            kl_buf_append(b, run, (size_t)(p - run));
            kl_buf_puts(b, esc);
            run = p + 1;
        }
    }
    kl_buf_append(b, run, (size_t)(p - run));
    return kl_buf_append(b, "\"", 1);
}

int kl_buf_html(kl_buf *b, const char *s) {
    const char *run = s;
    for (; *s; s++) {
        const char *esc = NULL;
        switch (*s) {
        case '<': esc = "&lt;"; break;
        case '>': esc = "&gt;"; break;
        case '&': esc = "&amp;"; break;
        case '"': esc = "&quot;"; break;
        case '\'': esc = "&#39;"; break;
        }
        if (esc) {
            kl_buf_append(b, run, (size_t)(s - run));
            kl_buf_puts(b, esc);
            run = s + 1;
        }
    }
    return kl_buf_append(b, run, (size_t)(s - run));
}

char *kl_buf_take(kl_buf *b) {
    char *d = b->data;
    if (!d) d = calloc(1, 1);
    memset(b, 0, sizeof *b);
    return d;
}
