/* keel doctor: kl_doctor_run. Reads the system (files under /proc and /sys,
 * statvfs, getrlimit, adjtimex, and the external programs nvcc and
 * nvidia-smi with a time limit) and hands each input to its evaluator.
 * Read-only: nothing on the machine is changed. */
#include "doctor_int.h"

#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/timex.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ==================================================================
 * Files and programs
 * ================================================================== */

int kl__doctor_which(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (1) {
        size_t l = strcspn(path, ":");
        char cand[PATH_MAX];
        if (l == 0) snprintf(cand, sizeof cand, "./%s", name);
        else snprintf(cand, sizeof cand, "%.*s/%s", (int)l, path, name);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
            snprintf(out, n, "%s", cand);
            return 1;
        }
        if (!path[l]) return 0;
        path += l + 1;
    }
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kl__doctor_exec(char *const argv[], int timeout_ms, char **out, int *status) {
    enum { MAX_OUT = 64 * 1024 };
    *out = NULL;
    *status = -1;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return -errno;
    char *buf = malloc(MAX_OUT + 1);
    if (!buf) {
        close(pfd[0]);
        close(pfd[1]);
        return -ENOMEM;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0); /* own process group: killed as a whole on timeout */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        free(buf);
        return -rc;
    }
    int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 2000);
    size_t len = 0;
    int timed_out = 0, eof = 0, st = 0, reaped = 0;
    while (!eof) {
        int64_t left = deadline - mono_ms();
        if (left <= 0) { timed_out = 1; break; }
        struct pollfd p = {pfd[0], POLLIN, 0};
        int pr = poll(&p, 1, (int)left);
        if (pr < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pr == 0) { timed_out = 1; break; }
        char tmp[4096];
        ssize_t r = read(pfd[0], tmp, sizeof tmp);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            break;
        }
        if (r == 0) { eof = 1; break; }
        size_t take = KL_MIN((size_t)r, (size_t)MAX_OUT - len);
        memcpy(buf + len, tmp, take);
        len += take;
    }
    close(pfd[0]);
    /* Output closed: wait for the exit, still within the deadline. */
    while (!timed_out && !reaped) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) { reaped = 1; break; }
        if (w < 0 && errno != EINTR) { reaped = 1; st = 0; break; }
        if (mono_ms() >= deadline) { timed_out = 1; break; }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (timed_out) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        *status = -1;
    } else if (WIFEXITED(st)) {
        *status = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        *status = 128 + WTERMSIG(st);
    } else {
        *status = 0;
    }
    buf[len] = 0;
    *out = buf;
    return 0;
}

/* ==================================================================
 * Reading the system
 * ================================================================== */

typedef struct {
    char root[PATH_MAX];
    int timeout_ms, no_exec;
} ctx;

static void rpath(const ctx *x, const char *p, char *out, size_t n) {
    int w = snprintf(out, n, "%s%s", x->root, p);
    if (w < 0 || (size_t)w >= n) out[0] = 0; /* too long: reads fail as "absent" */
}

/* Text of root-relative file p, or NULL. kl_mem_free() it. */
static char *rread(const ctx *x, const char *p) {
    char path[PATH_MAX + 256];
    char *t;
    rpath(x, p, path, sizeof path);
    return kl_read_file(path, &t, NULL, NULL) == KL_OK ? t : NULL;
}

static void fs_of(const char *path, kl_doctor_fs *fs) {
    struct statvfs v;
    memset(fs, 0, sizeof *fs);
    if (statvfs(path, &v) != 0) return;
    uint64_t frsize = v.f_frsize ? v.f_frsize : v.f_bsize;
    fs->present = 1;
    fs->size = (uint64_t)v.f_blocks * frsize;
    fs->avail = (uint64_t)v.f_bavail * frsize;
    fs->files = (uint64_t)v.f_files;
    fs->ffree = (uint64_t)v.f_favail;
    fs->readonly = (v.f_flag & ST_RDONLY) != 0;
}

/* cgroup v2 folder of this process ("/sys/fs/cgroup/<path>"), 1 when found. */
static int cgroup_dir(const ctx *x, char *out, size_t n) {
    char *t = rread(x, "/proc/self/cgroup");
    if (!t) return 0;
    int found = 0;
    for (char *line = t; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (strncmp(line, "0::", 3) == 0) {
            const char *p = line + 3;
            snprintf(out, n, "/sys/fs/cgroup%s", strcmp(p, "/") == 0 ? "" : p);
            found = 1;
            break;
        }
        line = nl ? nl + 1 : NULL;
    }
    kl_mem_free(t);
    return found;
}

/* Reads a cgroup v2 control file of this process's cgroup. */
static char *cgroup_read(const ctx *x, const char *file) {
    char dir[PATH_MAX], p[PATH_MAX + 64];
    if (!cgroup_dir(x, dir, sizeof dir)) return NULL;
    if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p) return NULL;
    return rread(x, p);
}

static uint64_t cgroup_mem_limit(const ctx *x) {
    char *t = cgroup_read(x, "memory.max");
    int64_t v = 0;
    if (t && kl_doctor_parse_int(t, &v) != KL_OK) v = 0; /* "max" */
    kl_mem_free(t);
    return v > 0 ? (uint64_t)v : 0;
}

static double cgroup_cpu_quota(const ctx *x) {
    char *t = cgroup_read(x, "cpu.max");
    double q = 0;
    long long quota, period;
    if (t && sscanf(t, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0)
        q = (double)quota / (double)period;
    kl_mem_free(t);
    return q;
}

static int affinity_cpus(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set);
}

static void user_name(char *out, size_t n) {
    struct passwd pw, *res = NULL;
    char buf[2048];
    out[0] = 0;
    if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name)
        snprintf(out, n, "%s", res->pw_name);
    else
        snprintf(out, n, "%u", (unsigned)geteuid());
}

/* The nearest existing ancestor of a missing path (".", "/" at worst). */
static void existing_parent(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    for (;;) {
        size_t l = strlen(out);
        while (l > 1 && out[l - 1] == '/') out[--l] = 0;
        char *s = strrchr(out, '/');
        if (!s) { snprintf(out, n, "."); return; }
        if (s == out) { out[1] = 0; return; }
        *s = 0;
        struct stat st;
        if (stat(out, &st) == 0) return;
    }
}

/* Runs a program found at path with args; output NULL when not run. */
static char *run_prog(const ctx *x, const char *path, const char *a1, const char *a2, const char *a3,
                      int *status) {
    char *argv[5] = {(char *)path, (char *)a1, (char *)a2, (char *)a3, NULL};
    char *out = NULL;
    if (kl__doctor_exec(argv, x->timeout_ms, &out, status) != 0) return NULL;
    return out;
}

/* ==================================================================
 * kl_doctor_run
 * ================================================================== */

static int add(kl_doctor_report *r, const kl_doctor_check *c, kl_err *e);

/* What a hostfile's host answers: an address of this machine (binding it
 * works: mpirun starts those ranks itself), else ssh's port within 1 s. */
static int host_state(const char *host) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, "22", &hints, &ai) != 0 || !ai) return KL_DOCTOR_HOST_UNRESOLVED;
    int state = KL_DOCTOR_HOST_NO_SSH;
    for (struct addrinfo *a = ai; a && state != KL_DOCTOR_HOST_LOCAL; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        struct sockaddr_storage ss;
        memcpy(&ss, a->ai_addr, a->ai_addrlen);
        if (ss.ss_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = 0;
        else if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
        if (bind(fd, (struct sockaddr *)&ss, a->ai_addrlen) == 0) state = KL_DOCTOR_HOST_LOCAL;
        close(fd);
    }
    for (struct addrinfo *a = ai; a && state == KL_DOCTOR_HOST_NO_SSH; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) state = KL_DOCTOR_HOST_SSH;
        else if (errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof err;
            if (poll(&pf, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && !err)
                state = KL_DOCTOR_HOST_SSH;
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return state;
}

/* train.hostfile: every host of the given MPI hostfile */
static int hostfile_check(kl_doctor_report *r, const char *path, kl_doctor_check *c, kl_err *e) {
    char *text = NULL, (*hosts)[256] = calloc(256, 256);
    int n = 0, state[256], rc;
    if (!hosts) return kl_err_set(e, KL_ENOMEM, "doctor: out of memory");
    if ((rc = kl_read_file_max(path, 1 << 20, &text, NULL, e))) {
        free(hosts);
        kl_err_prefix(e, "--hostfile");
        return rc;
    }
    rc = kl_doctor_parse_hostfile(text, hosts, 256, &n);
    kl_mem_free(text);
    if (rc) {
        free(hosts);
        return kl_err_set(e, KL_EPARSE, "--hostfile %s:%d: not an MPI hostfile line (\"HOST [slots=N] [max_slots=N]\")",
                          path, n);
    }
    for (int i = 0; i < n; i++) state[i] = host_state(hosts[i]);
    kl_doctor_eval_hostfile(path, (const char(*)[256])hosts, state, n, c);
    free(hosts);
    return add(r, c, e);
}

static int add(kl_doctor_report *r, const kl_doctor_check *c, kl_err *e) {
    return kl_doctor_report_add(r, c, e);
}

/* eval_text on a root-relative file. */
static int add_file_check(kl_doctor_report *r, const ctx *x, const char *id, const char *file, kl_err *e) {
    kl_doctor_check c;
    char *t = rread(x, file);
    int rc = kl_doctor_eval_text(id, t, &c, e);
    kl_mem_free(t);
    return rc ? rc : add(r, &c, e);
}

/* kernel and network settings */
static int check_kernel(kl_doctor_report *r, const ctx *x, kl_err *e) {
    int rc;
    if ((rc = add_file_check(r, x, "kernel.swappiness", "/proc/sys/vm/swappiness", e))) return rc;
    if ((rc = add_file_check(r, x, "kernel.overcommit_memory", "/proc/sys/vm/overcommit_memory", e))) return rc;
    if ((rc = add_file_check(r, x, "kernel.thp", "/sys/kernel/mm/transparent_hugepage/enabled", e))) return rc;
    if ((rc = add_file_check(r, x, "net.somaxconn", "/proc/sys/net/core/somaxconn", e))) return rc;
    if ((rc = add_file_check(r, x, "net.tcp_max_syn_backlog", "/proc/sys/net/ipv4/tcp_max_syn_backlog", e)))
        return rc;
    return KL_OK;
}

/* the open-files limit */
static int check_limits(kl_doctor_report *r, kl_err *e) {
    kl_doctor_check c;
    struct rlimit rlim;
    if (getrlimit(RLIMIT_NOFILE, &rlim) == 0) {
        uint64_t soft = rlim.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rlim.rlim_cur;
        uint64_t hard = rlim.rlim_max == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rlim.rlim_max;
        kl_doctor_eval_nofile(soft, hard, &c);
    } else {
        kl_doctor_eval_nofile(UINT64_MAX, UINT64_MAX, &c);
        c.status = KL_DOCTOR_INFO;
        kl__doctor_observed(&c, "unknown (getrlimit: %s)", strerror(errno));
        c.fix[0] = 0;
    }
    return add(r, &c, e);
}

/* /dev/shm */
static int check_shm(kl_doctor_report *r, const ctx *x, kl_err *e) {
    kl_doctor_check c;
    char p[PATH_MAX + 16];
    kl_doctor_fs fs;
    rpath(x, "/dev/shm", p, sizeof p);
    fs_of(p, &fs);
    kl_doctor_eval_shm(&fs, &c);
    return add(r, &c, e);
}

/* memory and swap */
static int check_memory(kl_doctor_report *r, const ctx *x, kl_err *e) {
    kl_doctor_check c;
    int rc;
    char *meminfo = rread(x, "/proc/meminfo");
    kl__doctor_eval_memory(meminfo, cgroup_mem_limit(x), &c);
    if ((rc = add(r, &c, e))) goto fail;
    if ((rc = kl_doctor_eval_text("memory.swap", meminfo, &c, e)) || (rc = add(r, &c, e))) goto fail;
    rc = KL_OK;
fail:
    kl_mem_free(meminfo);
    return rc;
}

/* the data folder: existence, space, mount */
static int check_data_dir(kl_doctor_report *r, const ctx *x, const kl_doctor_opts *o, kl_err *e) {
    kl_doctor_check c;
    int rc;
    char *mountinfo = NULL;
    kl_doctor_datadir d;
    char probe[PATH_MAX], owner[256], real[PATH_MAX];
    struct stat st;
    memset(&d, 0, sizeof d);
    d.path = o->data_dir && *o->data_dir ? o->data_dir : ".";
    user_name(owner, sizeof owner);
    d.owner = owner;
    if (stat(d.path, &st) == 0) {
        d.exists = 1;
        d.is_dir = S_ISDIR(st.st_mode);
        d.writable = d.is_dir && faccessat(AT_FDCWD, d.path, W_OK | X_OK, AT_EACCESS) == 0;
        snprintf(probe, sizeof probe, "%s", d.path);
    } else {
        if (errno != ENOENT && errno != ENOTDIR) d.error = errno;
        existing_parent(d.path, probe, sizeof probe);
    }
    d.probe = probe;
    fs_of(probe, &d.fs);
    kl_doctor_eval_data_dir(&d, &c);
    if ((rc = add(r, &c, e))) goto fail;
    kl_doctor_eval_disk_free(&d, &c);
    if ((rc = add(r, &c, e))) goto fail;
    mountinfo = rread(x, "/proc/self/mountinfo");
    if (!realpath(probe, real)) snprintf(real, sizeof real, "/");
    kl_doctor_eval_mount(mountinfo, real, &c);
    if ((rc = add(r, &c, e))) goto fail;
    rc = KL_OK;
fail:
    kl_mem_free(mountinfo);
    return rc;
}

/* CPU: model, SIMD, governor */
static int check_cpu(kl_doctor_report *r, const ctx *x, kl_err *e) {
    kl_doctor_check c;
    int rc;
    char *cpuinfo = rread(x, "/proc/cpuinfo");
    kl__doctor_eval_cpu_model(cpuinfo, affinity_cpus(), cgroup_cpu_quota(x), &c);
    if ((rc = add(r, &c, e))) goto fail;
    if ((rc = kl_doctor_eval_text("cpu.simd", cpuinfo, &c, e)) || (rc = add(r, &c, e))) goto fail;
    if ((rc = add_file_check(r, x, "cpu.governor", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", e)))
        goto fail;
    rc = KL_OK;
fail:
    kl_mem_free(cpuinfo);
    return rc;
}

/* multi-rank training: mpirun, and the layout when a launcher started keel doctor */
static int check_ranks(kl_doctor_report *r, const ctx *x, kl_err *e) {
    kl_doctor_check c;
    int rc;
    char path[PATH_MAX + 64];
    char *mv = NULL;
    int st = 0;
    if (!x->no_exec && kl__doctor_which("mpirun", path, sizeof path))
        mv = run_prog(x, path, "--version", NULL, NULL, &st);
    kl_doctor_eval_mpi(mv && st == 0 ? mv : NULL, &c);
    free(mv);
    if ((rc = add(r, &c, e))) return rc;
    kl_doctor_eval_ranks(kl_settings_get()->mpi_local_ranks, kl_threads_default(), affinity_cpus(), &c);
    return add(r, &c, e);
}

/* the clock */
static int check_clock(kl_doctor_report *r, kl_err *e) {
    kl_doctor_check c;
    struct timex tx;
    memset(&tx, 0, sizeof tx); /* modes 0: read only */
    int t = adjtimex(&tx);
    if (t < 0) t = -errno;
    kl_doctor_eval_clock(t, tx.status, tx.maxerror, tx.esterror, &c);
    return add(r, &c, e);
}

/* GPU: driver, CUDA, memory */
static int check_gpu(kl_doctor_report *r, const ctx *x, kl_err *e) {
    kl_doctor_check c;
    int rc;
    char driver[64] = "";
    char *nvver = rread(x, "/proc/driver/nvidia/version");
    if ((rc = kl_doctor_eval_text("gpu.driver", nvver, &c, e)) || (rc = add(r, &c, e))) goto fail;
    if (nvver && kl_doctor_parse_nvidia_version(nvver, driver, sizeof driver) != KL_OK) driver[0] = 0;
    {
        char path[PATH_MAX + 64];
        char *nvcc_out = NULL;
        int st = 0, found = 0;
        if (!x->no_exec) {
            found = kl__doctor_which("nvcc", path, sizeof path);
            if (!found) {
                rpath(x, "/usr/local/cuda/bin/nvcc", path, sizeof path);
                found = access(path, X_OK) == 0;
            }
        }
        if (found) {
            nvcc_out = run_prog(x, path, "--version", NULL, NULL, &st);
            if (nvcc_out && st == -1) {
                free(nvcc_out);
                nvcc_out = strdup("nvcc did not answer in time");
            }
        }
        kl_doctor_eval_cuda(driver[0] ? driver : NULL, nvcc_out, &c);
        free(nvcc_out);
        if ((rc = add(r, &c, e))) goto fail;

        char *smi_out = NULL;
        st = 0;
        if (!x->no_exec && kl__doctor_which("nvidia-smi", path, sizeof path))
            smi_out = run_prog(x, path, "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader",
                               NULL, &st);
        kl_doctor_eval_gpu_memory(nvver != NULL, st, smi_out, &c);
        free(smi_out);
        if ((rc = add(r, &c, e))) goto fail;
    }
    rc = KL_OK;
fail:
    kl_mem_free(nvver);
    return rc;
}

/* The report, check by check: check_kernel, check_limits, check_shm,
 * check_memory, check_data_dir, check_cpu, check_ranks, the hostfile's
 * (--hostfile), check_clock, check_gpu. */
int kl_doctor_run(const kl_doctor_opts *o, kl_doctor_report **out, kl_err *e) {
    kl_doctor_opts def = {0};
    kl_doctor_report *r = NULL;
    kl_doctor_check c; /* the hostfile check */
    int rc;
    ctx *x = calloc(1, sizeof *x);
    *out = NULL;
    if (!o) o = &def;
    if (!x) return kl_err_set(e, KL_ENOMEM, "doctor: out of memory");
    const char *root = o->root ? o->root : kl_settings_get()->doctor_root;
    if (root && strlen(root) >= sizeof x->root - 64) {
        rc = kl_err_set(e, KL_EINVAL, "doctor: root prefix too long");
        goto fail;
    }
    snprintf(x->root, sizeof x->root, "%s", root ? root : "");
    size_t rl = strlen(x->root);
    while (rl > 0 && x->root[rl - 1] == '/') x->root[--rl] = 0; /* "/" and "" mean the real tree */
    x->timeout_ms = o->exec_timeout_ms > 0 ? o->exec_timeout_ms : 2000;
    x->no_exec = o->no_exec;
    if ((rc = kl_doctor_report_new(&r, e)) != KL_OK) goto fail;

    if ((rc = check_kernel(r, x, e))) goto fail;
    if ((rc = check_limits(r, e))) goto fail;
    if ((rc = check_shm(r, x, e))) goto fail;
    if ((rc = check_memory(r, x, e))) goto fail;
    if ((rc = check_data_dir(r, x, o, e))) goto fail;
    if ((rc = check_cpu(r, x, e))) goto fail;
    if ((rc = check_ranks(r, x, e))) goto fail;
    if (o->hostfile && (rc = hostfile_check(r, o->hostfile, &c, e))) goto fail;
    if ((rc = check_clock(r, e))) goto fail;
    if ((rc = check_gpu(r, x, e))) goto fail;
    *out = r;
    r = NULL;
    rc = KL_OK;
fail:
    free(x);
    kl_doctor_report_free(r);
    return rc;
}
