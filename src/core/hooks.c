/* Test hooks: kl__test_hook reads a KEEL_TEST_* style variable only in the
 * test build's binary (build/keel-hooks, this file compiled with
 * -DKEEL_TEST_HOOKS and linked ahead of libkeel.a); in the library and the
 * release keel it always answers "unset", so no test-only variable changes
 * what a user's run does. */
#include "core_int.h"

#include <stdlib.h>

int64_t kl__test_hook(const char *name) {
#ifdef KEEL_TEST_HOOKS
    const char *v = getenv(name);
    char *end;
    long long n = v && *v ? strtoll(v, &end, 10) : -1;
    return v && *v && !*end && n >= 0 ? (int64_t)n : -1;
#else
    (void)name;
    return -1;
#endif
}
