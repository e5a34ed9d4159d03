/* The AddressSanitizer build sees memory errors inside blocks of the core
 * allocator and its arenas (kl_mem_direct): a child process makes the error
 * and the parent checks that ASan reported it. Registered only in ASan
 * builds (CI runs the unit tests under ASan through .ci/run); in the normal
 * build the slab allocator does not detect these errors by design. */
#include "../harness.h"

#include <keel/core.h>

#if KL_ASAN
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*bad_fn)(void);

/* Runs fn in a child with stderr to a file; returns the report (static buffer)
 * or NULL when the child exited 0 (the error went unseen). */
static const char *child_report(bad_fn fn, int *died) {
    static char rep[16384];
    const char *path = kt_path("asan.txt");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    *died = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(rep, 1, sizeof rep - 1, f) : 0;
    if (f) fclose(f);
    rep[n] = 0;
    return rep;
}

static void overflow(void) {
    volatile char *p = kl_mem_alloc(100, KL_TAG_DATASET);
    p[100] = 1; /* one byte past the request */
}

static void use_after_free(void) {
    volatile char *p = kl_mem_alloc(5000, KL_TAG_ACTIVATIONS);
    p[0] = 1;
    kl_mem_free((void *)p);
    p[10] = 2;
}

static void underflow(void) {
    volatile char *p = kl_mem_alloc(64, KL_TAG_PARAMS);
    p[-1] = 1; /* into the block header's poisoned padding */
}

static void realloc_shrunk(void) {
    volatile char *p = kl_mem_alloc(1000, KL_TAG_OTHER);
    p = kl_mem_realloc((void *)p, 900, KL_TAG_OTHER);
    p[900] = 1; /* past the new size, inside the old one */
}

static void arena_overflow(void) {
    kl_arena *a = kl_arena_new(4096, KL_TAG_REQUEST);
    volatile char *x = kl_arena_alloc(a, 10);
    kl_arena_alloc(a, 10);
    x[10] = 1; /* into the next object's room in a caching build */
}

#define EXPECT_REPORT(fn, what)                                                \
    do {                                                                       \
        int died;                                                              \
        const char *r = child_report(fn, &died);                               \
        KT_CHECKF(died, #fn ": the child exited 0, ASan saw nothing");         \
        KT_CONTAINS(r, what);                                                  \
    } while (0)

KL_TEST(mem_asan_overflow_reported) {
    KT_CHECK(kl_mem_direct());
    EXPECT_REPORT(overflow, "heap-buffer-overflow");
    EXPECT_REPORT(realloc_shrunk, "heap-buffer-overflow");
}

KL_TEST(mem_asan_use_after_free_reported) { EXPECT_REPORT(use_after_free, "heap-use-after-free"); }

KL_TEST(mem_asan_underflow_reported) { EXPECT_REPORT(underflow, "use-after-poison"); }

KL_TEST(mem_asan_arena_overflow_reported) { EXPECT_REPORT(arena_overflow, "heap-buffer-overflow"); }
#endif
