/* Logging: levels, text on a terminal and JSON lines otherwise, one writer
 * lock, RFC 3339 UTC timestamps. Also the wall and monotonic clocks. */
#include "core_int.h"

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

int kl_log_init_from_env(kl_err *e) {
    const char *lv = getenv("KEEL_LOG_LEVEL"), *fm = getenv("KEEL_LOG_FORMAT");
    kl_log_level l;
    kl_log_format f;
    if (lv && *lv) {
        if (kl_log_level_parse(lv, &l))
            return kl_err_set(e, KL_EINVAL, "KEEL_LOG_LEVEL: '%s' is not one of trace, debug, info, warn, error, off", lv);
        kl_log_set_level(l);
    }
    if (fm && *fm) {
        if (kl_log_format_parse(fm, &f))
            return kl_err_set(e, KL_EINVAL, "KEEL_LOG_FORMAT: '%s' is not one of auto, text, json", fm);
        kl_log_set_format(f);
    }
    return KL_OK;
}

void kl_log_format_line(kl_buf *bp, kl_log_format fmt, kl_log_level lvl, const char *module, const char *msg,
                        const kl_log_field *fields, size_t nf) {
    char ts[40];
    kl_time_rfc3339(kl_time_now_us(), ts, sizeof ts);
    kl_buf b = *bp;
    if (fmt == KL_LOG_AUTO) fmt = kl_log_get_format();
    int json = fmt == KL_LOG_JSON;
    if (json) {
        kl_buf_printf(&b, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":", ts, level_names[lvl]);
        kl_buf_json_str(&b, module ? module : "keel");
        kl_buf_puts(&b, ",\"msg\":");
        kl_buf_json_str(&b, msg);
        for (size_t i = 0; i < nf; i++) {
            kl_buf_puts(&b, ",");
            kl_buf_json_str(&b, fields[i].key);
            kl_buf_puts(&b, ":");
            if (fields[i].str) kl_buf_json_str(&b, fields[i].str);
            else if (fields[i].num != fields[i].num) kl_buf_puts(&b, "\"NaN\"");
            else if (fields[i].is_int) kl_buf_printf(&b, "%lld", (long long)fields[i].num);
            else kl_buf_printf(&b, "%.6g", fields[i].num);
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
            } else if (fields[i].is_int) {
                kl_buf_printf(&b, " %s=%lld", fields[i].key, (long long)fields[i].num);
            } else {
                kl_buf_printf(&b, " %s=%.6g", fields[i].key, fields[i].num);
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
