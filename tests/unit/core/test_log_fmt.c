/* The log line's printf-free number and time writers (src/core/log.c):
 * every number field is written exactly as printf's "%.6g" / "%lld" would
 * (random magnitudes, request timings, rounding ties, powers of ten, signs,
 * Inf/NaN), and the cached timestamp is kl_time_rfc3339's. */
#include "../harness.h"

#include "core/core_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* 1 when kl__log_fmt_g6(x) is snprintf's "%.6g" of x (reported once) */
static int same_g6(double x, int *reported) {
    char want[64], got[64];
    snprintf(want, sizeof want, "%.6g", x);
    int n = kl__log_fmt_g6(got, x);
    got[n] = 0;
    if (!strcmp(want, got)) return 1;
    if (!(*reported)++) fprintf(stderr, "  %.17g: printf '%s', got '%s'\n", x, want, got);
    return 0;
}

KL_TEST(log_fmt_g6_is_printf) {
    int bad = 0, rep = 0;
    /* random bit patterns over every magnitude (fast path and fallback) */
    for (int i = 0; i < 300000; i++) {
        uint64_t u = rnd();
        double x;
        memcpy(&x, &u, sizeof x);
        bad += !same_g6(x, &rep);
    }
    /* request timings: ns / 1e6 (the access log's queue_ms, compute_ms, total_ms) */
    for (int i = 0; i < 300000; i++) bad += !same_g6((double)(rnd() % 20000000000ull) / 1e6, &rep);
    for (int64_t ns = 0; ns < 200000; ns++) bad += !same_g6(ns / 1e6, &rep);
    /* uniform mantissas at every decimal exponent in and around the fast range */
    for (int e = -20; e <= 24; e++)
        for (int i = 0; i < 4000; i++)
            bad += !same_g6((1.0 + (double)(rnd() >> 11) / 9007199254740992.0 * 9.0) * pow(10, e), &rep);
    /* ties and near-ties of the 6th digit, powers of ten and their neighbours */
    static const double edge[] = {0.5, 1.5, 2.5, 0.125, 1.0000005, 1.0000015, 123456.5, 999999.5, 999999.4999,
                                  99999.95, 9.999995, 0.00001, 0.0001, 0.00009999995, 1e-5, 1e-4, 1e5, 1e6,
                                  999999, 1000000, 100000, 1e15, 1e-15, 1e20, 1e-16, 5e-324, 1.7976931348623157e308,
                                  0.0, -0.0, -1.5, -0.000123456789, 3.14159265358979, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        double x = edge[i];
        bad += !same_g6(x, &rep);
        bad += !same_g6(nextafter(x, 0), &rep);
        bad += !same_g6(nextafter(x, INFINITY), &rep);
    }
    for (int k = 0; k < 100000; k++) bad += !same_g6((k + 0.5) / 1e4, &rep); /* x.5 at the 7th digit */
    KT_EQ_INT(bad, 0);
    char t[64];
    int n = kl__log_fmt_g6(t, NAN);
    t[n] = 0;
    char want[64];
    snprintf(want, sizeof want, "%.6g", NAN);
    KT_EQ_STR(t, want);
}

KL_TEST(log_fmt_line_numbers_and_time) {
    kl_buf b;
    kl_buf_init(&b);
    kl_log_field f[] = {KL_LF_INT("i", -9007199254740993.0), KL_LF_INT("z", 0), KL_LF_INT("big", 1e18),
                        KL_LF_NUM("q", 0.0123456789), KL_LF_NUM("t", 1234567.0), KL_LF_NUM("s", -2.5e-7)};
    char want[512];
    for (int fmt = 0; fmt < 2; fmt++) {
        kl_buf_reset(&b);
        int64_t t0 = kl_time_now_us();
        kl_log_format_line(&b, fmt ? KL_LOG_TEXT : KL_LOG_JSON, KL_LOG_INFO, "m", "msg", f, 6);
        int64_t t1 = kl_time_now_us();
        KT_CHECK(b.len > 27);
        /* the timestamp is kl_time_rfc3339 of a moment within the call */
        char ts[40];
        int ok = 0;
        const char *p = fmt ? b.data : strstr(b.data, "\"ts\":\"") + 6;
        for (int64_t u = t0; u <= t1 && !ok; u++) {
            kl_time_rfc3339(u, ts, sizeof ts);
            ok = !strncmp(p, ts, 27);
        }
        KT_CHECK(ok);
        if (fmt)
            snprintf(want, sizeof want, " i=%lld z=0 big=%lld q=%.6g t=%.6g s=%.6g\n", (long long)-9007199254740993.0,
                     (long long)1e18, 0.0123456789, 1234567.0, -2.5e-7);
        else
            snprintf(want, sizeof want, ",\"i\":%lld,\"z\":0,\"big\":%lld,\"q\":%.6g,\"t\":%.6g,\"s\":%.6g}\n",
                     (long long)-9007199254740993.0, (long long)1e18, 0.0123456789, 1234567.0, -2.5e-7);
        KT_CHECK(b.len >= strlen(want));
        KT_EQ_STR(b.data + b.len - strlen(want), want);
    }
    kl_buf_free(&b);
}
