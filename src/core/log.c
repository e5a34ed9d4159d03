/* Logging: levels, text on a terminal and JSON lines otherwise, one writer
 * lock, RFC 3339 UTC timestamps. Also the wall and monotonic clocks. */
#include "core_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int log_level = KL_LOG_INFO;
static _Atomic int log_format = KL_LOG_AUTO;
static FILE *log_out; /* NULL = stderr */

static const char *level_names[] = {"trace", "debug", "info", "warn", "error", "off"};

void kl__log_lock(void) { pthread_mutex_lock(&log_mu); }
void kl__log_unlock(void) { pthread_mutex_unlock(&log_mu); }
FILE *kl__log_stream(void) { return log_out ? log_out : stderr; }

int64_t kl_time_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t kl_time_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kl_time_rfc3339(int64_t us, char *buf, size_t n) {
    time_t s = (time_t)(us / 1000000);
    int64_t frac = us % 1000000;
    if (frac < 0) { frac += 1000000; s -= 1; }
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long long)frac);
}

int kl_log_level_parse(const char *s, kl_log_level *out) {
    for (int i = 0; i <= KL_LOG_OFF; i++)
        if (strcasecmp(s, level_names[i]) == 0) { *out = (kl_log_level)i; return KL_OK; }
    if (strcasecmp(s, "warning") == 0) { *out = KL_LOG_WARN; return KL_OK; }
    return KL_EINVAL;
}

int kl_log_format_parse(const char *s, kl_log_format *out) {
    if (strcasecmp(s, "auto") == 0) *out = KL_LOG_AUTO;
    else if (strcasecmp(s, "text") == 0) *out = KL_LOG_TEXT;
    else if (strcasecmp(s, "json") == 0) *out = KL_LOG_JSON;
    else return KL_EINVAL;
    return KL_OK;
}

void kl_log_set_level(kl_log_level lvl) { log_level = lvl; }
kl_log_level kl_log_get_level(void) { return (kl_log_level)log_level; }
void kl_log_set_format(kl_log_format f) { log_format = f; }
void kl_log_set_output(FILE *f) {
    pthread_mutex_lock(&log_mu);
    log_out = f;
    pthread_mutex_unlock(&log_mu);
}

kl_log_format kl_log_get_format(void) {
    int f = log_format;
    if (f != KL_LOG_AUTO) return (kl_log_format)f;
    return isatty(fileno(kl__log_stream())) ? KL_LOG_TEXT : KL_LOG_JSON;
}

int kl_log_enabled(kl_log_level lvl) { return (int)lvl >= log_level && lvl < KL_LOG_OFF; }

/* ---- the line formatter's time and number writers -------------------------
 * printf-free (a served request writes one line; snprintf's timestamp, three
 * %.6g and three %lld cost ~2 us of its ~40), each writing exactly what the
 * printf form it replaces writes. */

/* kl_time_rfc3339 of us into ts (>= 28 bytes): the "YYYY-MM-DDTHH:MM:SS."
 * part is formatted once per second and thread, the microseconds each time */
static void fmt_ts(char *ts, size_t n, int64_t us) {
    static _Thread_local int64_t sec = INT64_MIN;
    static _Thread_local char pre[24];
    int64_t s = us / 1000000, frac = us % 1000000;
    if (frac < 0) { frac += 1000000; s -= 1; }
    if (s != sec) {
        char full[40];
        kl_time_rfc3339(s * 1000000, full, sizeof full);
        if (strlen(full) != 27 || n < 28) { kl_time_rfc3339(us, ts, n); return; } /* years beyond 4 digits */
        memcpy(pre, full, 20);
        sec = s;
    }
    memcpy(ts, pre, 20);
    for (int i = 25; i >= 20; i--) { ts[i] = (char)('0' + frac % 10); frac /= 10; }
    ts[26] = 'Z';
    ts[27] = 0;
}

/* v in decimal ("%lld"); returns the length */
static int fmt_i64(char *out, long long v) {
    char d[24];
    int n = 0, len = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do { d[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) out[len++] = '-';
    while (n) out[len++] = d[--n];
    return len;
}

static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* x * 10^k, one rounding (|k| <= 22: the power is exact) */
static double scale10(double x, int k) { return k >= 0 ? x * pow10_exact[k] : x / pow10_exact[-k]; }

/* "%.6g": six significant digits (x scaled by an exact power of ten, one
 * rounding: ~1e-10 from the exact decimal value, so a digit is printf's unless
 * the value is within 1e-6 of a rounding tie, which goes to snprintf, as do
 * magnitudes outside 1e-15..1e20, Inf and NaN), trailing zeros dropped,
 * exponent form below 1e-4 and from 1e6 */
int kl__log_fmt_g6(char *out, double x) {
    const double x0 = x;
    char *o = out;
    if (!isfinite(x)) goto slow;
    if (signbit(x)) { *o++ = '-'; x = -x; }
    if (x == 0) { *o++ = '0'; return (int)(o - out); }
    if (x < 1e-15 || x >= 1e20) goto slow;
    int e10 = (int)floor(log10(x));
    double m = scale10(x, 5 - e10);
    if (m < 1e5) m = scale10(x, 5 - --e10); /* log10 a hair off */
    else if (m >= 1e6) m = scale10(x, 5 - ++e10);
    if (m < 1e5 || m >= 1e6) goto slow;
    double fl = floor(m), f = m - fl;
    if (fabs(f - 0.5) < 1e-6) goto slow;
    int64_t r = (int64_t)fl + (f > 0.5);
    if (r == 1000000) { r = 100000; e10++; }
    char d[6];
    for (int i = 5; i >= 0; i--) { d[i] = (char)('0' + r % 10); r /= 10; }
    int nd = 6;
    while (nd > 1 && d[nd - 1] == '0') nd--;
    if (e10 < -4 || e10 >= 6) { /* d.ddde+XX */
        *o++ = d[0];
        if (nd > 1) { *o++ = '.'; memcpy(o, d + 1, (size_t)nd - 1); o += nd - 1; }
        *o++ = 'e';
        *o++ = e10 < 0 ? '-' : '+';
        int ae = e10 < 0 ? -e10 : e10;
        *o++ = (char)('0' + ae / 10);
        *o++ = (char)('0' + ae % 10);
    } else if (e10 >= 0) { /* ddd.ddd */
        memcpy(o, d, (size_t)e10 + 1);
        o += e10 + 1;
        if (nd > e10 + 1) { *o++ = '.'; memcpy(o, d + e10 + 1, (size_t)(nd - e10 - 1)); o += nd - e10 - 1; }
    } else { /* 0.000ddd */
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -e10 - 1; i++) *o++ = '0';
        memcpy(o, d, (size_t)nd);
        o += nd;
    }
    return (int)(o - out);
slow:
    return snprintf(out, 32, "%.6g", x0);
}

static void put_field_num(kl_buf *b, const kl_log_field *f) {
    char t[32];
    int n = f->is_int ? fmt_i64(t, (long long)f->num) : kl__log_fmt_g6(t, f->num);
    kl_buf_append(b, t, (size_t)n);
}

void kl_log_format_line(kl_buf *bp, kl_log_format fmt, kl_log_level lvl, const char *module, const char *msg,
                        const kl_log_field *fields, size_t nf) {
    char ts[40];
    fmt_ts(ts, sizeof ts, kl_time_now_us());
    kl_buf b = *bp;
    if (fmt == KL_LOG_AUTO) fmt = kl_log_get_format();
    int json = fmt == KL_LOG_JSON;
    if (json) {
        kl_buf_puts(&b, "{\"ts\":\"");
        kl_buf_puts(&b, ts);
        kl_buf_puts(&b, "\",\"level\":\"");
        kl_buf_puts(&b, level_names[lvl]);
        kl_buf_puts(&b, "\",\"module\":");
        kl_buf_json_str(&b, module ? module : "keel");
        kl_buf_puts(&b, ",\"msg\":");
        kl_buf_json_str(&b, msg);
        for (size_t i = 0; i < nf; i++) {
            kl_buf_puts(&b, ",");
            kl_buf_json_str(&b, fields[i].key);
            kl_buf_puts(&b, ":");
            if (fields[i].str) kl_buf_json_str(&b, fields[i].str);
            else if (fields[i].num != fields[i].num) kl_buf_puts(&b, "\"NaN\"");
            else put_field_num(&b, &fields[i]);
        }
        kl_buf_puts(&b, "}\n");
    } else {
        static const char *tags[] = {"TRACE", "DEBUG", "INFO ", "WARN ", "ERROR", "OFF  "};
        kl_buf_printf(&b, "%s %s [%s] %s", ts, tags[lvl], module ? module : "keel", msg);
        for (size_t i = 0; i < nf; i++) {
            if (fields[i].str) {
                int q = strpbrk(fields[i].str, " \t\"=") != NULL || !fields[i].str[0];
                kl_buf_printf(&b, " %s=", fields[i].key);
                if (q) kl_buf_json_str(&b, fields[i].str);
                else kl_buf_puts(&b, fields[i].str);
            } else {
                kl_buf_puts(&b, " ");
                kl_buf_puts(&b, fields[i].key);
                kl_buf_puts(&b, "=");
                put_field_num(&b, &fields[i]);
            }
        }
        kl_buf_puts(&b, "\n");
    }
    *bp = b;
}

void kl_log_write_lines(const char *text, size_t len) {
    if (!text || !len) return;
    pthread_mutex_lock(&log_mu);
    FILE *out = kl__log_stream();
    kl__progress_clear_line(out);
    fwrite(text, 1, len, out);
    kl__progress_redraw_line(out);
    fflush(out);
    pthread_mutex_unlock(&log_mu);
}

static void emit(kl_log_level lvl, const char *module, const char *msg, const kl_log_field *fields,
                 size_t nf) {
    kl_buf b;
    kl_buf_init(&b);
    kl_log_format_line(&b, KL_LOG_AUTO, lvl, module, msg, fields, nf);
    kl_log_write_lines(b.data, b.len);
    kl_buf_free(&b);
}

void kl_vlog(kl_log_level lvl, const char *module, const char *fmt, va_list ap) {
    if (!kl_log_enabled(lvl)) return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    emit(lvl, module, msg, NULL, 0);
}

void kl_log(kl_log_level lvl, const char *module, const char *fmt, ...) {
    if (!kl_log_enabled(lvl)) return;
    va_list ap;
    va_start(ap, fmt);
    kl_vlog(lvl, module, fmt, ap);
    va_end(ap);
}

void kl_log_fields(kl_log_level lvl, const char *module, const char *msg, const kl_log_field *f,
                   size_t n) {
    if (!kl_log_enabled(lvl)) return;
    emit(lvl, module, msg, f, n);
}
