/* The unit-test runner: runs every registered KL_TEST (or those whose name
 * contains one of the arguments), prints PASS/FAIL lines and a summary. */
#include "harness.h"

#include <keel/core.h>

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct { const char *name; kt_fn fn; const char *file; } kt_case;
static kt_case *cases;
static size_t ncases, capcases;
static int cur_failed;
static char cur_msg[2048];
static char tmpdir[512];
static char pathbuf[1024];

void kt_register(const char *name, kt_fn fn, const char *file) {
    if (ncases == capcases) {
        capcases = capcases ? capcases * 2 : 64;
        cases = realloc(cases, capcases * sizeof *cases);
        if (!cases) abort();
    }
    cases[ncases++] = (kt_case){name, fn, file};
}

void kt_fail(const char *file, int line, const char *fmt, ...) {
    if (cur_failed) return;
    cur_failed = 1;
    int n = snprintf(cur_msg, sizeof cur_msg, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cur_msg + n, sizeof cur_msg - (size_t)n, fmt, ap);
    va_end(ap);
}

int kt_failed(void) { return cur_failed; }

const char *kt_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("KEEL_TEST_TMP");
        snprintf(tmpdir, sizeof tmpdir, "%s/keel-unit-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) { perror("mkdtemp"); abort(); }
    }
    return tmpdir;
}

const char *kt_path(const char *name) {
    snprintf(pathbuf, sizeof pathbuf, "%s/%s", kt_tmpdir(), name);
    return pathbuf;
}

static int cmp_case(const void *a, const void *b) {
    const kt_case *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv) {
    int list = argc > 1 && strcmp(argv[1], "--list") == 0;
    qsort(cases, ncases, sizeof *cases, cmp_case);
    kl_log_set_level(KL_LOG_WARN);
    /* the unit tests pick the Winograd algorithm themselves, whatever
     * KEEL_WINO says (kl_settings.wino_use) */
    kl_settings_mut()->wino_pack = 1;
    kl_settings_mut()->wino_use = -1;
    int passed = 0, failed = 0;
    for (size_t i = 0; i < ncases; i++) {
        int want = argc <= 1 || list;
        for (int a = 1 + list; a < argc && !want; a++) want = strstr(cases[i].name, argv[a]) != NULL;
        if (!want) continue;
        if (list) { printf("%s\n", cases[i].name); continue; }
        cur_failed = 0;
        cur_msg[0] = 0;
        tmpdir[0] = 0;
        int64_t t0 = kl_time_mono_ns();
        cases[i].fn();
        double ms = (double)(kl_time_mono_ns() - t0) / 1e6;
        if (cur_failed) {
            failed++;
            printf("FAIL %s: %s\n", cases[i].name, cur_msg);
        } else {
            passed++;
            printf("PASS %s (%.1f ms)\n", cases[i].name, ms);
            if (tmpdir[0]) kl_rm_rf(tmpdir, NULL);
        }
        fflush(stdout);
    }
    if (!list) printf("unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
