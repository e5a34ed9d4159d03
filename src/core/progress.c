/* Progress display for long work: rate, ETA and extra fields. On a terminal
 * one line on stderr is redrawn in place (and cleared around log lines); on
 * anything else a plain log line is written every KEEL_PROGRESS_INTERVAL
 * seconds. Nothing goes to stdout, so piped output is never corrupted. */
#include "core_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FIELDS 8

struct kl_progress {
    pthread_mutex_t mu;
    char label[64], unit[16];
    uint64_t total, done;
    int64_t t0, last_draw, last_log;
    double interval_s;
    int tty;
    char keys[MAX_FIELDS][24], vals[MAX_FIELDS][48];
    int nfields;
};

static int mode_override = -1;
static kl_progress *active; /* drawn on the terminal; guarded by the log lock */
static char active_line[512];

void kl_progress_set_mode(int tty) { mode_override = tty; }

void kl__progress_clear_line(FILE *out) {
    if (active && active_line[0]) fputs("\r\033[2K", out);
}

void kl__progress_redraw_line(FILE *out) {
    if (active && active_line[0]) fputs(active_line, out);
}

kl_progress *kl_progress_new(const char *label, uint64_t total, const char *unit) {
    kl_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total;
    p->t0 = p->last_log = kl_time_mono_ns();
    p->tty = mode_override >= 0 ? mode_override : isatty(fileno(kl__log_stream()));
    p->interval_s = kl_settings_get()->progress_interval_s;
    return p;
}

void kl_progress_set_total(kl_progress *p, uint64_t total) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->total = total;
    pthread_mutex_unlock(&p->mu);
}

static void fmt_amount(const char *unit, double v, char *buf, size_t n) {
    if (strcmp(unit, "B") == 0) kl_fmt_bytes((uint64_t)v, buf, n);
    else if (v >= 1e9) snprintf(buf, n, "%.2fG %s", v / 1e9, unit);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM %s", v / 1e6, unit);
    else if (v >= 1e4) snprintf(buf, n, "%.1fk %s", v / 1e3, unit);
    else snprintf(buf, n, "%.0f %s", v, unit);
}

/* caller holds p->mu */
static void render(kl_progress *p, int64_t now, char *buf, size_t n) {
    double el = (double)(now - p->t0) / 1e9;
    double rate = el > 0 ? (double)p->done / el : 0;
    char a[32], t[32], r[32], eta[32], dur[32];
    fmt_amount(p->unit, (double)p->done, a, sizeof a);
    fmt_amount(p->unit, rate, r, sizeof r);
    size_t k = 0;
    if (p->total) {
        fmt_amount(p->unit, (double)p->total, t, sizeof t);
        double pct = 100.0 * (double)p->done / (double)p->total;
        k += (size_t)snprintf(buf + k, n - k, "%s %5.1f%% %s/%s %s/s", p->label, pct > 100 ? 100 : pct, a, t, r);
        if (rate > 0 && p->done < p->total) {
            kl_fmt_duration((double)(p->total - p->done) / rate, eta, sizeof eta);
            if (k < n) k += (size_t)snprintf(buf + k, n - k, " ETA %s", eta);
        }
    } else {
        k += (size_t)snprintf(buf + k, n - k, "%s %s %s/s", p->label, a, r);
    }
    if (k < n) k += (size_t)snprintf(buf + k, n - k, " elapsed %s", kl_fmt_duration(el, dur, sizeof dur));
    for (int i = 0; i < p->nfields && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, " %s=%s", p->keys[i], p->vals[i]);
}

void kl_progress_render(kl_progress *p, char *buf, size_t n) {
    pthread_mutex_lock(&p->mu);
    render(p, kl_time_mono_ns(), buf, n);
    pthread_mutex_unlock(&p->mu);
}

static void show(kl_progress *p, int final) {
    int64_t now = kl_time_mono_ns();
    char line[480];
    if (p->tty) {
        if (!final && now - p->last_draw < 100000000) return;
        p->last_draw = now;
        render(p, now, line, sizeof line);
        kl__log_lock();
        FILE *out = kl__log_stream();
        fprintf(out, "\r\033[2K%s%s", line, final ? "\n" : "");
        fflush(out);
        if (final) {
            if (active == p) { active = NULL; active_line[0] = 0; }
        } else {
            active = p;
            snprintf(active_line, sizeof active_line, "%s", line);
        }
        kl__log_unlock();
    } else {
        if (!final && (double)(now - p->last_log) / 1e9 < p->interval_s) return;
        p->last_log = now;
        render(p, now, line, sizeof line);
        kl_log(KL_LOG_INFO, "progress", "%s%s", line, final ? " (done)" : "");
    }
}

void kl_progress_update(kl_progress *p, uint64_t done) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->done = done;
    show(p, 0);
    pthread_mutex_unlock(&p->mu);
}

void kl_progress_add(kl_progress *p, uint64_t delta) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->done += delta;
    show(p, 0);
    pthread_mutex_unlock(&p->mu);
}

void kl_progress_field(kl_progress *p, const char *key, const char *fmt, ...) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    int i;
    for (i = 0; i < p->nfields; i++)
        if (strcmp(p->keys[i], key) == 0) break;
    if (i == p->nfields) {
        if (p->nfields == MAX_FIELDS) { pthread_mutex_unlock(&p->mu); return; }
        snprintf(p->keys[p->nfields++], sizeof p->keys[0], "%s", key);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->vals[i], sizeof p->vals[i], fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&p->mu);
}

void kl_progress_finish(kl_progress *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    show(p, 1);
    pthread_mutex_unlock(&p->mu);
    kl__log_lock();
    if (active == p) { active = NULL; active_line[0] = 0; }
    kl__log_unlock();
    pthread_mutex_destroy(&p->mu);
    free(p);
}
