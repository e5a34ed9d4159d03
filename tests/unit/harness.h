/* The unit-test harness: tests register themselves with KL_TEST and run in
 * the one runner (build/keel-unit). Each prints "PASS name" or "FAIL name: why";
 * tests/run.sh counts them. Checks record the first failure and return. */
#ifndef KEEL_TEST_HARNESS_H
#define KEEL_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*kt_fn)(void);
void kt_register(const char *name, kt_fn fn, const char *file);
void kt_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int kt_failed(void);
/* A fresh temporary directory for this test (removed after a pass). */
const char *kt_tmpdir(void);
/* Path of a file inside kt_tmpdir() (static buffer, valid until the next call). */
const char *kt_path(const char *name);

#define KL_TEST(name)                                                          \
    static void name(void);                                                    \
    __attribute__((constructor)) static void kt_reg_##name(void) {             \
        kt_register(#name, name, __FILE__);                                    \
    }                                                                          \
    static void name(void)

#define KT_CHECK(cond)                                                         \
    do {                                                                       \
        if (!(cond)) { kt_fail(__FILE__, __LINE__, "check failed: %s", #cond); return; } \
    } while (0)
#define KT_CHECKF(cond, ...)                                                   \
    do {                                                                       \
        if (!(cond)) { kt_fail(__FILE__, __LINE__, __VA_ARGS__); return; }     \
    } while (0)
#define KT_EQ_INT(a, b)                                                        \
    do {                                                                       \
        long long kt_a = (long long)(a), kt_b = (long long)(b);                \
        if (kt_a != kt_b) { kt_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, kt_a, #b, kt_b); return; } \
    } while (0)
#define KT_EQ_STR(a, b)                                                        \
    do {                                                                       \
        const char *kt_a = (a), *kt_b = (b);                                   \
        if (!kt_a || !kt_b || strcmp(kt_a, kt_b) != 0) { kt_fail(__FILE__, __LINE__, "%s == \"%s\", expected \"%s\"", #a, kt_a ? kt_a : "(null)", kt_b ? kt_b : "(null)"); return; } \
    } while (0)
#define KT_NEAR(a, b, tol)                                                     \
    do {                                                                       \
        double kt_a = (double)(a), kt_b = (double)(b);                         \
        if (!(fabs(kt_a - kt_b) <= (tol))) { kt_fail(__FILE__, __LINE__, "%s == %.9g, expected %.9g (tol %g)", #a, kt_a, kt_b, (double)(tol)); return; } \
    } while (0)
/* Checks that an int-returning call succeeded; prints the kl_err on failure. */
#define KT_OK(call, errp)                                                      \
    do {                                                                       \
        int kt_rc = (call);                                                    \
        if (kt_rc != 0) { kt_fail(__FILE__, __LINE__, "%s returned %d: %s", #call, kt_rc, kl_err_what(errp)); return; } \
    } while (0)
#define KT_CONTAINS(hay, needle)                                               \
    do {                                                                       \
        const char *kt_h = (hay), *kt_n = (needle);                            \
        if (!kt_h || !strstr(kt_h, kt_n)) { kt_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", kt_h ? kt_h : "(null)", kt_n); return; } \
    } while (0)

#endif
