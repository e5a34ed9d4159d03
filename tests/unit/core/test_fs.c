/* Whole-file reads (kl_read_file / kl_read_file_max): what is not a regular
 * file is refused at once (a FIFO is not waited on, /dev/zero not read until
 * memory runs out), sizes are capped, the buffer comes from the core
 * allocator and counts against its budget. Each read that could hang runs in
 * a child with a deadline, so a regression fails instead of hanging. */
#include "../harness.h"

#include <keel/core.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { int rc; char msg[400]; } read_result;

/* kl_read_file(path) in a child, 5 s at most; rc 1 = timed out (killed). */
static read_result read_bounded(const char *path) {
    read_result r = {0};
    int pfd[2];
    if (pipe(pfd) != 0) { r.rc = 2; return r; }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        alarm(5);
        char *buf = NULL;
        size_t len = 0;
        kl_err e = {0};
        read_result c = {0};
        c.rc = kl_read_file(path, &buf, &len, &e);
        snprintf(c.msg, sizeof c.msg, "%s", kl_err_what(&e));
        if (write(pfd[1], &c, sizeof c) != (ssize_t)sizeof c) _exit(3);
        _exit(0);
    }
    close(pfd[1]);
    ssize_t n = read(pfd[0], &r, sizeof r);
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (n != (ssize_t)sizeof r) { memset(&r, 0, sizeof r); r.rc = 1; snprintf(r.msg, sizeof r.msg, "child died (signal %d)", WIFSIGNALED(st) ? WTERMSIG(st) : 0); }
    return r;
}

KL_TEST(fs_read_refuses_dev_zero) {
    int64_t t0 = kl_time_mono_ns();
    read_result r = read_bounded("/dev/zero");
    KT_CHECKF(r.rc == KL_EINVAL, "rc %d: %s", r.rc, r.msg);
    KT_CONTAINS(r.msg, "/dev/zero");
    KT_CONTAINS(r.msg, "not a regular file");
    KT_CHECK(kl_time_mono_ns() - t0 < 2000000000ll);
}

KL_TEST(fs_read_refuses_fifo) {
    const char *p = kt_path("pipe");
    KT_CHECK(mkfifo(p, 0600) == 0);
    read_result r = read_bounded(p); /* no writer: a blocking open would wait forever */
    KT_CHECKF(r.rc == KL_EINVAL, "rc %d: %s", r.rc, r.msg);
    KT_CONTAINS(r.msg, "not a regular file");
    KT_CONTAINS(r.msg, "FIFO");
}

KL_TEST(fs_read_refuses_folder) {
    read_result r = read_bounded(kt_tmpdir());
    KT_CHECKF(r.rc == KL_EINVAL, "rc %d: %s", r.rc, r.msg);
    KT_CONTAINS(r.msg, kt_tmpdir());
    KT_CONTAINS(r.msg, "not a regular file");
}

KL_TEST(fs_read_size_cap) {
    kl_err e = {0};
    const char *p = kt_path("ten-k");
    static char data[10000];
    memset(data, 'x', sizeof data);
    KT_OK(kl_write_file_atomic(p, data, sizeof data, &e), &e);
    char *buf = NULL;
    size_t len = 0;
    KT_EQ_INT(kl_read_file_max(p, 9999, &buf, &len, &e), KL_ERANGE);
    KT_CHECK(buf == NULL);
    KT_CONTAINS(e.msg, p);
    KT_CONTAINS(e.msg, "limit");
    KT_OK(kl_read_file_max(p, 10000, &buf, &len, &e), &e); /* exactly the cap */
    KT_EQ_INT(len, 10000);
    KT_CHECK(buf[9999] == 'x' && buf[10000] == 0);
    kl_mem_free(buf);
    /* a file whose size fstat does not tell (procfs says 0): the cap holds while reading */
    e = (kl_err){0};
    KT_EQ_INT(kl_read_file_max("/proc/self/maps", 16, &buf, &len, &e), KL_ERANGE);
    KT_CONTAINS(e.msg, "limit");
    KT_OK(kl_read_file("/proc/self/maps", &buf, &len, &e), &e);
    KT_CHECK(len > 16 && strlen(buf) == len);
    kl_mem_free(buf);
}

KL_TEST(fs_read_through_allocator_budget) {
    kl_err e = {0};
    const char *p = kt_path("four-m");
    size_t n = 4u << 20;
    char *data = calloc(1, n);
    KT_CHECK(data);
    int rc = kl_write_file_atomic(p, data, n, &e);
    free(data);
    KT_OK(rc, &e);
    char *buf = NULL;
    size_t len = 0;
    KT_OK(kl_read_file(p, &buf, &len, &e), &e);
    KT_CHECK(kl_mem_size(buf) >= n + 1); /* a block of the core allocator (asserts otherwise) */
    kl_mem_free(buf);
    kl_mem_trim();
    kl_mem_stats s;
    kl_mem_stats_get(KL_TAG_COUNT, &s);
    kl_mem_set_budget(s.reserved + (1u << 20));
    rc = kl_read_file(p, &buf, &len, &e);
    kl_mem_set_budget(0);
    KT_EQ_INT(rc, KL_ENOMEM);
    KT_CHECK(buf == NULL);
    KT_CONTAINS(e.msg, p);
    KT_CONTAINS(e.msg, "budget");
}
