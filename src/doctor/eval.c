/* keel doctor: evaluators. Each turns the input of one check (a file's text
 * or values the caller read) into a result: status, observed and
 * recommended values, why it matters and the command that fixes it. No
 * system access here, so tests can feed synthetic input. */
#include "doctor_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timex.h>

#define GiB (1024.0 * 1024.0 * 1024.0)
#define MiB (1024.0 * 1024.0)

/* ==================================================================
 * Field setters
 * ================================================================== */

void kl__doctor_init(kl_doctor_check *c, const char *id) {
    memset(c, 0, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    c->status = KL_DOCTOR_INFO;
}

#define SETTER(name, field)                                                    \
    void name(kl_doctor_check *c, const char *fmt, ...) {                      \
        va_list ap;                                                            \
        va_start(ap, fmt);                                                     \
        vsnprintf(c->field, sizeof c->field, fmt, ap);                         \
        va_end(ap);                                                            \
    }
SETTER(kl__doctor_observed, observed)
SETTER(kl__doctor_recommended, recommended)
SETTER(kl__doctor_why, why)
SETTER(kl__doctor_fix, fix)

void kl__doctor_shell_quote(const char *s, char *out, size_t n) {
    size_t o = 0;
    if (n < 3) { if (n) out[0] = 0; return; }
    out[o++] = '\'';
    for (; *s && o + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(out + o, "'\\''", 4);
            o += 4;
        } else {
            out[o++] = *s;
        }
    }
    out[o++] = '\'';
    out[o] = 0;
}

static const char *bytes(uint64_t v, char *buf, size_t n) { return kl_fmt_bytes(v, buf, n); }

/* s with control characters replaced by '?': for paths shown in observed
 * values and in "#" comments of fixes, where a newline would end the
 * comment and turn the rest of a path into a command. */
static const char *safe(const char *s, char *buf, size_t n) {
    size_t i = 0;
    for (; s && s[i] && i + 1 < n; i++) buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    buf[i] = 0;
    return buf;
}

/* ==================================================================
 * Kernel settings read as one integer
 * ================================================================== */

typedef struct {
    const char *id, *path, *sysctl;
    int64_t want;     /* threshold */
    int at_most;      /* 1: pass when value <= want; 0: when >= want */
    const char *why;
} sysctl_spec;

static const sysctl_spec sysctls[] = {
    {"kernel.swappiness", "/proc/sys/vm/swappiness", "vm.swappiness", 10, 1,
     "How eagerly the kernel swaps out anonymous memory (model weights, optimizer "
     "state, feature caches) instead of dropping page cache. At the default 60 a "
     "long-running trainer or server that streams a dataset through the page cache "
     "gets its weights paged out, and the next step or request waits on disk for "
     "them; 10 or less keeps them resident."},
    {"net.somaxconn", "/proc/sys/net/core/somaxconn", "net.core.somaxconn", 4096, 0,
     "The cap on every listen() backlog. When a burst of clients connects to "
     "`keel serve` faster than it accepts, connections beyond the backlog are "
     "dropped and the clients retry after a 1 s SYN timeout: a p99 latency cliff "
     "under load."},
    {"net.tcp_max_syn_backlog", "/proc/sys/net/ipv4/tcp_max_syn_backlog",
     "net.ipv4.tcp_max_syn_backlog", 4096, 0,
     "How many half-open connections (SYN received, handshake not finished) the "
     "kernel queues per listener. A burst of new connections to `keel serve` "
     "beyond it is dropped or answered with SYN cookies, and clients see 1-3 s "
     "connect times under load."},
};

static void sysctl_fix(kl_doctor_check *c, const char *name, long long v) {
    kl__doctor_fix(c,
                   "sysctl -w %s=%lld\n"
                   "echo '%s = %lld' >> /etc/sysctl.d/90-keel.conf   # persistent",
                   name, v, name, v);
}

static void eval_sysctl(const sysctl_spec *s, const char *text, kl_doctor_check *c) {
    kl__doctor_recommended(c, "%s %lld", s->at_most ? "<=" : ">=", (long long)s->want);
    kl__doctor_why(c, "%s", s->why);
    int64_t v;
    if (!text) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "not readable (%s)", s->path);
        return;
    }
    if (kl_doctor_parse_int(text, &v) != KL_OK) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "unparseable value in %s", s->path);
        return;
    }
    kl__doctor_observed(c, "%lld", (long long)v);
    int ok = s->at_most ? v <= s->want : v >= s->want;
    c->status = ok ? KL_DOCTOR_PASS : KL_DOCTOR_WARN;
    if (!ok) sysctl_fix(c, s->sysctl, (long long)s->want);
}

static void eval_overcommit(const char *text, kl_doctor_check *c) {
    kl__doctor_recommended(c, "0 (heuristic) or 1 (always)");
    kl__doctor_why(c,
                   "Mode 2 (strict accounting) refuses allocations beyond swap plus "
                   "vm.overcommit_ratio%% of RAM even when the memory is never touched: "
                   "large mmaps of datasets and weights, reserved arenas and fork() of a "
                   "big process (data-loader workers) fail with ENOMEM while memory is "
                   "free. 0, the default, or 1 lets them through.");
    int64_t v;
    if (!text) {
        kl__doctor_observed(c, "not readable (/proc/sys/vm/overcommit_memory)");
        return;
    }
    if (kl_doctor_parse_int(text, &v) != KL_OK) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "unparseable value");
        return;
    }
    const char *mode = v == 0 ? "heuristic" : v == 1 ? "always" : v == 2 ? "strict" : "unknown";
    kl__doctor_observed(c, "%lld (%s)", (long long)v, mode);
    if (v == 0 || v == 1) {
        c->status = KL_DOCTOR_PASS;
    } else {
        c->status = KL_DOCTOR_WARN;
        sysctl_fix(c, "vm.overcommit_memory", 0);
    }
}

static void eval_thp(const char *text, kl_doctor_check *c) {
    char mode[32];
    kl__doctor_recommended(c, "madvise");
    kl__doctor_why(c,
                   "Transparent huge pages. With 'always' every large anonymous mapping "
                   "gets 2 MiB pages and khugepaged compacts memory in the background: "
                   "stalls of tens of milliseconds in a server and memory bloat from "
                   "partly used huge pages. With 'never' even large tensor buffers that "
                   "ask for huge pages (madvise) get 4 KiB pages and more TLB misses. "
                   "'madvise' gives huge pages only to the regions that ask.");
    if (!text) {
        kl__doctor_observed(c, "not available (no /sys/kernel/mm/transparent_hugepage)");
        return;
    }
    if (kl_doctor_parse_selected(text, mode, sizeof mode) != KL_OK) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "unparseable mode list");
        return;
    }
    kl__doctor_observed(c, "%s", mode);
    if (strcmp(mode, "madvise") == 0) {
        c->status = KL_DOCTOR_PASS;
        return;
    }
    c->status = KL_DOCTOR_WARN;
    kl__doctor_fix(c, "%s",
                   "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled\n"
                   "# persistent: add transparent_hugepage=madvise to GRUB_CMDLINE_LINUX "
                   "in /etc/default/grub, then update-grub");
}

/* ==================================================================
 * Memory
 * ================================================================== */

void kl__doctor_eval_memory(const char *text, uint64_t cg_limit, kl_doctor_check *c) {
    uint64_t total = 0, avail = 0;
    char a[32], b[32], l[32];
    kl__doctor_init(c, "memory.total");
    kl__doctor_recommended(c, ">= 8 GiB, >= 10%% available");
    kl__doctor_why(c,
                   "Training holds parameters, gradients, optimizer state and activations "
                   "in memory, serving holds every loaded model, and the loader keeps "
                   "prefetched batches; when they do not fit the run swaps or the OOM "
                   "killer ends it. keel's memory budgets (memory.limit, e.g. 70%%) are a "
                   "share of this total.");
    if (!text || kl_doctor_parse_meminfo(text, "MemTotal", &total) != KL_OK) {
        kl__doctor_observed(c, "not readable (/proc/meminfo)");
        return;
    }
    int have_avail = kl_doctor_parse_meminfo(text, "MemAvailable", &avail) == KL_OK;
    if (have_avail)
        kl__doctor_observed(c, "%s total, %s available", bytes(total, a, sizeof a),
                            bytes(avail, b, sizeof b));
    else
        kl__doctor_observed(c, "%s total", bytes(total, a, sizeof a));
    int limited = cg_limit && cg_limit < total;
    if (limited) {
        size_t o = strlen(c->observed);
        snprintf(c->observed + o, sizeof c->observed - o, "; cgroup limit %s", bytes(cg_limit, l, sizeof l));
        total = cg_limit;
        if (have_avail && avail > total) avail = total;
    }
    c->status = KL_DOCTOR_PASS;
    if ((double)total < 8 * GiB && limited) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "# raise the container's memory limit (docker run --memory=16g; "
                          "Kubernetes: resources.limits.memory)");
    } else if ((double)total < 8 * GiB) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "# add memory (or use a larger machine); meanwhile lower batch sizes "
                          "and loader prefetch");
    } else if (have_avail && avail * 10 < total) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "# most memory is in use: find the largest processes with\n"
                          "# ps -eo pid,rss,comm --sort=-rss | head");
    }
}

static void eval_swap(const char *text, kl_doctor_check *c) {
    uint64_t total = 0, freeb = 0;
    char a[32], b[32];
    kl__doctor_recommended(c, "optional; if present, used < 50%% with vm.swappiness <= 10");
    kl__doctor_why(c,
                   "Swap lets the kernel push out cold pages at a memory spike instead of "
                   "killing a process; with a low swappiness it is a safety net, not a "
                   "slowdown. Heavily used swap means working sets are being paged: "
                   "training steps and requests then run orders of magnitude slower.");
    if (!text || kl_doctor_parse_meminfo(text, "SwapTotal", &total) != KL_OK) {
        kl__doctor_observed(c, "not readable (/proc/meminfo)");
        return;
    }
    if (kl_doctor_parse_meminfo(text, "SwapFree", &freeb) != KL_OK || freeb > total) freeb = total;
    if (total == 0) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "no swap");
        return;
    }
    uint64_t used = total - freeb;
    kl__doctor_observed(c, "%s total, %s used", bytes(total, a, sizeof a), bytes(used, b, sizeof b));
    if (used * 2 > total && (double)used > 256 * MiB) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "# find the processes holding swap:\n"
                          "# grep VmSwap /proc/[0-9]*/status | sort -k2 -n | tail");
    } else {
        c->status = KL_DOCTOR_PASS;
    }
}

/* ==================================================================
 * CPU
 * ================================================================== */

void kl__doctor_eval_cpu_model(const char *text, int usable, double quota, kl_doctor_check *c) {
    kl_doctor_cpu cpu;
    kl__doctor_init(c, "cpu.model");
    c->status = KL_DOCTOR_INFO;
    kl__doctor_recommended(c, ">= 4 cores for loader + compute threads");
    kl__doctor_why(c,
                   "keel's thread pool, data-loader workers and server workers size "
                   "themselves from the CPUs this process may use (KEEL_THREADS "
                   "overrides); the kernels' speed depends on the model's SIMD units.");
    if (!text || kl_doctor_parse_cpuinfo(text, &cpu) != KL_OK) {
        kl__doctor_observed(c, "not readable (/proc/cpuinfo)");
        return;
    }
    kl__doctor_observed(c, "%s, %d logical CPUs", cpu.model[0] ? cpu.model : "unknown model",
                        cpu.processors);
    size_t o = strlen(c->observed);
    if (usable > 0 && usable != cpu.processors && o < sizeof c->observed)
        o += (size_t)snprintf(c->observed + o, sizeof c->observed - o, ", %d usable (affinity)", usable);
    if (quota > 0 && o < sizeof c->observed)
        snprintf(c->observed + o, sizeof c->observed - o, ", cgroup quota %.2g CPUs", quota);
}

static void eval_simd(const char *text, kl_doctor_check *c) {
    kl_doctor_cpu cpu;
    kl__doctor_recommended(c, "avx2 fma (f16c, avx512f used when present)");
    kl__doctor_why(c,
                   "keel's GEMM, convolution and elementwise kernels have AVX2+FMA paths "
                   "(F16C converts float16, AVX-512F widens them when present); without "
                   "AVX2/FMA they fall back to code several times slower. A hypervisor "
                   "may hide these flags from a VM.");
    if (!text || kl_doctor_parse_cpuinfo(text, &cpu) != KL_OK) {
        kl__doctor_observed(c, "not readable (/proc/cpuinfo)");
        return;
    }
    if (!cpu.x86) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "not x86 (NEON %s): portable kernels", cpu.neon ? "yes" : "no");
        return;
    }
    kl__doctor_observed(c, "avx2 %s, fma %s, f16c %s, avx512f %s", cpu.avx2 ? "yes" : "NO",
                        cpu.fma ? "yes" : "NO", cpu.f16c ? "yes" : "no", cpu.avx512f ? "yes" : "no");
    if (cpu.avx2 && cpu.fma) {
        c->status = KL_DOCTOR_PASS;
    } else {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "# use a CPU with AVX2 and FMA (Intel Haswell / AMD Zen or newer);\n"
                          "# in a VM expose the host CPU (QEMU: -cpu host; libvirt: "
                          "<cpu mode='host-passthrough'/>)");
    }
}

static void eval_governor(const char *text, kl_doctor_check *c) {
    kl__doctor_recommended(c, "performance");
    kl__doctor_why(c,
                   "Governors other than performance lower the clock when idle and raise "
                   "it only after they see load: short inference bursts and benchmarks "
                   "run at a low frequency, so latency is higher and noisier and runs "
                   "are not comparable.");
    if (!text) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "not exposed (VM, container or fixed clock)");
        return;
    }
    char g[64];
    size_t n = strcspn(text, " \t\r\n");
    if (n == 0) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "empty");
        return;
    }
    snprintf(g, sizeof g, "%.*s", (int)KL_MIN(n, sizeof g - 1), text);
    kl__doctor_observed(c, "%s", g);
    if (strcmp(g, "performance") == 0) {
        c->status = KL_DOCTOR_PASS;
        return;
    }
    c->status = KL_DOCTOR_WARN;
    kl__doctor_fix(c, "%s",
                   "for g in /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor; do "
                   "echo performance > \"$g\"; done\n"
                   "# or: cpupower frequency-set -g performance");
}

/* ==================================================================
 * GPU driver
 * ================================================================== */

static void eval_driver(const char *text, kl_doctor_check *c) {
    char ver[64], cuda[16];
    kl__doctor_recommended(c, "optional (keel runs on the CPU); for GPUs one that supports your CUDA");
    kl__doctor_why(c,
                   "CUDA programs talk to the GPU through the NVIDIA kernel driver; its "
                   "version bounds the newest CUDA toolkit and runtime that work on this "
                   "machine (see the table in docs/doctor.md).");
    if (!text) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "no NVIDIA driver loaded");
        return;
    }
    if (kl_doctor_parse_nvidia_version(text, ver, sizeof ver) != KL_OK) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "unrecognised /proc/driver/nvidia/version");
        return;
    }
    size_t n;
    const kl_doctor_cuda_req *t = kl_doctor_cuda_table(&n);
    int rc = kl_doctor_driver_max_cuda(ver, cuda, sizeof cuda);
    if (rc == KL_OK) {
        c->status = KL_DOCTOR_PASS;
        if (strcmp(cuda, t[0].cuda) == 0)
            kl__doctor_observed(c, "%s (supports CUDA %s and later)", ver, cuda);
        else
            kl__doctor_observed(c, "%s (supports CUDA <= %s)", ver, cuda);
    } else {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "%s (older than CUDA %s needs)", ver, t[n - 1].cuda);
        kl__doctor_fix(c, "# install a current NVIDIA driver (Debian: apt-get install "
                          "nvidia-driver; Ubuntu: ubuntu-drivers install)");
    }
}

int kl_doctor_eval_text(const char *id, const char *text, kl_doctor_check *out, kl_err *e) {
    if (!id || !out) return kl_err_set(e, KL_EINVAL, "doctor: id and out are required");
    kl__doctor_init(out, id);
    for (size_t i = 0; i < KL_ARRAY_LEN(sysctls); i++)
        if (strcmp(id, sysctls[i].id) == 0) {
            eval_sysctl(&sysctls[i], text, out);
            return KL_OK;
        }
    if (strcmp(id, "kernel.overcommit_memory") == 0) eval_overcommit(text, out);
    else if (strcmp(id, "kernel.thp") == 0) eval_thp(text, out);
    else if (strcmp(id, "memory.total") == 0) kl__doctor_eval_memory(text, 0, out);
    else if (strcmp(id, "memory.swap") == 0) eval_swap(text, out);
    else if (strcmp(id, "cpu.model") == 0) kl__doctor_eval_cpu_model(text, 0, 0, out);
    else if (strcmp(id, "cpu.simd") == 0) eval_simd(text, out);
    else if (strcmp(id, "cpu.governor") == 0) eval_governor(text, out);
    else if (strcmp(id, "gpu.driver") == 0) eval_driver(text, out);
    else return kl_err_set(e, KL_EINVAL, "doctor: '%s' is not a check read from one file", id);
    return KL_OK;
}

/* ==================================================================
 * Limits, /dev/shm, data folder, mounts
 * ================================================================== */

static const char *limit_str(uint64_t v, char *buf, size_t n) {
    if (v == UINT64_MAX) snprintf(buf, n, "unlimited");
    else snprintf(buf, n, "%llu", (unsigned long long)v);
    return buf;
}

void kl_doctor_eval_nofile(uint64_t soft, uint64_t hard, kl_doctor_check *c) {
    char a[32], b[32];
    kl__doctor_init(c, "limits.nofile");
    kl__doctor_observed(c, "soft %s, hard %s", limit_str(soft, a, sizeof a), limit_str(hard, b, sizeof b));
    kl__doctor_recommended(c, ">= 65535 (soft and hard); fails below 1024 hard");
    kl__doctor_why(c,
                   "Every client connection, dataset shard, memory-mapped file and log "
                   "needs a file descriptor. A server with thousands of keep-alive "
                   "clients or a loader over many shards hits EMFILE (\"Too many open "
                   "files\") at the soft limit; a process may raise its soft limit only "
                   "up to the hard one.");
    if (hard < 1024) c->status = KL_DOCTOR_FAIL;
    else if (soft < 65535 || hard < 65535) c->status = KL_DOCTOR_WARN;
    else c->status = KL_DOCTOR_PASS;
    if (c->status != KL_DOCTOR_PASS)
        kl__doctor_fix(c, "%s",
                       "ulimit -n 65535   # this shell and its children (needs hard >= 65535)\n"
                       "printf '%s\\n' '* soft nofile 65535' '* hard nofile 65535' >> "
                       "/etc/security/limits.d/90-keel.conf   # new logins\n"
                       "# systemd services: LimitNOFILE=65535 in the [Service] section, "
                       "then systemctl daemon-reload");
}

void kl_doctor_eval_shm(const kl_doctor_fs *fs, kl_doctor_check *c) {
    char a[32], b[32];
    kl__doctor_init(c, "shm");
    kl__doctor_recommended(c, ">= 1 GiB, not full, free inodes");
    kl__doctor_why(c,
                   "Multi-process data loading and shared-memory tensors pass batches "
                   "between processes through files in /dev/shm. When it is full or out "
                   "of inodes, workers die with 'No space left on device' or SIGBUS in "
                   "the middle of an epoch. Containers default to a 64 MiB /dev/shm, far "
                   "too small.");
    static const char remount[] =
        "mount -o remount,size=8G /dev/shm\n"
        "# containers: docker run --shm-size=8g ...; Kubernetes: an emptyDir with "
        "medium: Memory mounted at /dev/shm";
    if (!fs || !fs->present) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "missing (/dev/shm does not exist)");
        kl__doctor_fix(c, "%s",
                       "mkdir -p /dev/shm && mount -t tmpfs -o size=8G,mode=1777 tmpfs /dev/shm\n"
                       "# containers: docker run --shm-size=8g ...");
        return;
    }
    uint64_t used_inodes = fs->files >= fs->ffree ? fs->files - fs->ffree : 0;
    if (fs->files)
        kl__doctor_observed(c, "%s, %s free, %llu of %llu inodes used", bytes(fs->size, a, sizeof a),
                            bytes(fs->avail, b, sizeof b), (unsigned long long)used_inodes,
                            (unsigned long long)fs->files);
    else
        kl__doctor_observed(c, "%s, %s free", bytes(fs->size, a, sizeof a), bytes(fs->avail, b, sizeof b));
    if (fs->readonly) {
        c->status = KL_DOCTOR_FAIL;
        strncat(c->observed, ", read-only", sizeof c->observed - strlen(c->observed) - 1);
        kl__doctor_fix(c, "%s", "mount -o remount,rw /dev/shm");
    } else if (fs->avail == 0 || (fs->files && fs->ffree == 0)) {
        c->status = KL_DOCTOR_FAIL;
        strncat(c->observed, fs->avail == 0 ? " (full)" : " (no free inodes)",
                sizeof c->observed - strlen(c->observed) - 1);
        kl__doctor_fix(c,
                       "# remove stale files left by crashed workers (check first): ls -la /dev/shm\n%s",
                       remount);
    } else if ((double)fs->size < 1 * GiB || fs->avail * 10 < fs->size ||
               (fs->files && fs->ffree * 10 < fs->files)) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "%s", remount);
    } else {
        c->status = KL_DOCTOR_PASS;
    }
}

void kl_doctor_eval_data_dir(const kl_doctor_datadir *d, kl_doctor_check *c) {
    char q[1200], oq[200];
    kl__doctor_init(c, "disk.data_dir");
    kl__doctor_recommended(c, "an existing folder writable by this user");
    kl__doctor_why(c,
                   "Datasets, checkpoints, runs and model versions are written under the "
                   "data folder (--data-dir). keel writes atomically, through a temporary "
                   "file renamed in the same folder, so the folder must exist and be "
                   "writable.");
    char shown[1024];
    const char *raw = d && d->path ? d->path : ".";
    const char *path = safe(raw, shown, sizeof shown);
    kl__doctor_shell_quote(raw, q, sizeof q);
    oq[0] = 0;
    if (d && d->owner && *d->owner && strcmp(d->owner, "root") != 0)
        kl__doctor_shell_quote(d->owner, oq, sizeof oq);
    c->status = KL_DOCTOR_FAIL;
    if (d && !d->exists && d->error) {
        kl__doctor_observed(c, "%s: cannot access (%s)", path, strerror(d->error));
        kl__doctor_fix(c, "# make %s reachable for this user (search permission on its parents), "
                          "or pass another --data-dir", path);
    } else if (!d || !d->exists) {
        kl__doctor_observed(c, "%s: does not exist", path);
        if (oq[0]) kl__doctor_fix(c, "mkdir -p %s && chown %s %s", q, oq, q);
        else kl__doctor_fix(c, "mkdir -p %s", q);
    } else if (!d->is_dir) {
        kl__doctor_observed(c, "%s: not a folder", path);
        kl__doctor_fix(c, "# %s is a file: pass another --data-dir", path);
    } else if (d->fs.present && d->fs.readonly) {
        kl__doctor_observed(c, "%s: read-only file system", path);
        kl__doctor_fix(c, "# %s is on a read-only file system: pass another --data-dir "
                          "or remount it read-write", path);
    } else if (!d->writable) {
        kl__doctor_observed(c, "%s: not writable by %s", path, d->owner ? d->owner : "this user");
        if (oq[0]) kl__doctor_fix(c, "chown %s %s", oq, q);
        else kl__doctor_fix(c, "# make %s writable for this user, or pass another --data-dir", path);
    } else {
        c->status = KL_DOCTOR_PASS;
        kl__doctor_observed(c, "%s (writable)", path);
    }
}

void kl_doctor_eval_disk_free(const kl_doctor_datadir *d, kl_doctor_check *c) {
    char a[32], b[32], where[600] = "";
    kl__doctor_init(c, "disk.free");
    kl__doctor_recommended(c, ">= 20 GiB free (fails below 1 GiB)");
    kl__doctor_why(c,
                   "Ingested datasets, checkpoints (parameters plus optimizer state, "
                   "every N steps) and model versions need room; running out mid-write "
                   "loses the step and leaves a partial file to clean up. Below 1 GiB "
                   "even a small run fails.");
    if (!d || !d->fs.present) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "unknown (no existing folder to measure)");
        return;
    }
    char shown[512];
    const char *probe = safe(d->probe ? d->probe : ".", shown, sizeof shown);
    if (d->probe && d->path && strcmp(d->probe, d->path) != 0)
        snprintf(where, sizeof where, " (at %s)", probe);
    double pct = d->fs.size ? 100.0 * (double)d->fs.avail / (double)d->fs.size : 0.0;
    kl__doctor_observed(c, "%s free of %s (%.0f%%)%s", bytes(d->fs.avail, a, sizeof a),
                        bytes(d->fs.size, b, sizeof b), pct, where);
    if ((double)d->fs.avail < 1 * GiB || (d->fs.files && d->fs.ffree == 0)) {
        c->status = KL_DOCTOR_FAIL;
        if (d->fs.files && d->fs.ffree == 0)
            strncat(c->observed, ", no free inodes", sizeof c->observed - strlen(c->observed) - 1);
    } else if ((double)d->fs.avail < 20 * GiB) {
        c->status = KL_DOCTOR_WARN;
    } else {
        c->status = KL_DOCTOR_PASS;
        return;
    }
    kl__doctor_fix(c,
                   "# free space (largest folders: du -xsh %s/* | sort -h | tail) "
                   "or pass --data-dir on a larger disk",
                   probe);
}

static const char *const network_fs[] = {
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "davfs", "fuse.s3fs", "fuse.gcsfuse",
};

void kl_doctor_eval_mount(const char *mountinfo, const char *path, kl_doctor_check *c) {
    kl_doctor_mount m;
    char q[1200];
    kl__doctor_init(c, "disk.mount");
    kl__doctor_recommended(c, "local file system, noatime");
    kl__doctor_why(c,
                   "With strict atime every read of a dataset shard or model file also "
                   "writes its inode, turning a read-only epoch into a stream of small "
                   "writes; relatime (the usual default) limits that to once a day per "
                   "file, noatime removes it. A network file system adds a round trip to "
                   "every small read: copy datasets to local disk for training.");
    if (!mountinfo) {
        kl__doctor_observed(c, "not readable (/proc/self/mountinfo)");
        return;
    }
    int rc = kl_doctor_find_mount(mountinfo, path ? path : "/", &m);
    if (rc != KL_OK) {
        kl__doctor_observed(c, "no mount found for %s", path ? path : "/");
        return;
    }
    char mp[512], ty[64], op[512], src[256];
    kl__doctor_observed(c, "%s: %s (%s) from %s", safe(m.mount_point, mp, sizeof mp),
                        safe(m.fstype, ty, sizeof ty), safe(m.options, op, sizeof op),
                        safe(m.source, src, sizeof src));
    kl__doctor_shell_quote(m.mount_point, q, sizeof q);
    for (size_t i = 0; i < KL_ARRAY_LEN(network_fs); i++)
        if (strcmp(m.fstype, network_fs[i]) == 0) {
            c->status = KL_DOCTOR_WARN;
            kl__doctor_fix(c, "# %s is a network file system: pass --data-dir on a local disk "
                              "and copy datasets there",
                           mp);
            return;
        }
    int memfs = strcmp(m.fstype, "tmpfs") == 0 || strcmp(m.fstype, "ramfs") == 0;
    if (memfs || kl_doctor_has_option(m.options, "noatime")) {
        c->status = KL_DOCTOR_PASS;
        return;
    }
    c->status = kl_doctor_has_option(m.options, "relatime") ? KL_DOCTOR_INFO : KL_DOCTOR_WARN;
    kl__doctor_fix(c,
                   "mount -o remount,noatime %s\n"
                   "# persistent: add noatime to the options of %s in /etc/fstab",
                   q, mp);
}

/* ==================================================================
 * Clock
 * ================================================================== */

static const char *usec_str(long us, char *buf, size_t n) {
    if (us < 1000) snprintf(buf, n, "%ld us", us);
    else if (us < 1000000) snprintf(buf, n, "%.1f ms", (double)us / 1e3);
    else snprintf(buf, n, "%.1f s", (double)us / 1e6);
    return buf;
}

void kl_doctor_eval_clock(int rc, int status, long maxerror_us, long esterror_us, kl_doctor_check *c) {
    char a[32], b[32];
    kl__doctor_init(c, "clock.sync");
    kl__doctor_recommended(c, "synchronised by NTP (chrony or systemd-timesyncd)");
    kl__doctor_why(c,
                   "Run records, model versions, metrics and logs are ordered by wall-clock "
                   "time, and TLS certificate checks on downloads depend on it. An "
                   "unsynchronised clock drifts by seconds a day: events from different "
                   "machines interleave wrongly and certificates look expired or not yet "
                   "valid.");
    if (rc < 0) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "unknown (adjtimex: %s)", strerror(-rc));
        return;
    }
    if (rc == TIME_ERROR || (status & STA_UNSYNC)) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "unsynchronised (max error %s)", usec_str(maxerror_us, a, sizeof a));
        kl__doctor_fix(c, "%s",
                       "timedatectl set-ntp true\n"
                       "# or: apt-get install chrony && systemctl enable --now chrony");
        return;
    }
    c->status = KL_DOCTOR_PASS;
    kl__doctor_observed(c, "synchronised (max error %s, estimated %s)", usec_str(maxerror_us, a, sizeof a),
                        usec_str(esterror_us, b, sizeof b));
}

/* ==================================================================
 * multi-rank training (MPI)
 * ================================================================== */

void kl_doctor_eval_mpi(const char *out, kl_doctor_check *c) {
    kl__doctor_init(c, "train.mpi");
    kl__doctor_recommended(c, "Open MPI (mpirun) for data-parallel training");
    kl__doctor_why(c,
                   "`mpirun -np N keel train` trains one model over N ranks (docs/training.md, "
                   "\"Data-parallel training on MPI\"); one-process training does not need it.");
    if (!out) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "no mpirun on PATH");
        kl__doctor_fix(c, "apt-get install openmpi-bin libopenmpi-dev   # only for multi-rank training");
        return;
    }
    size_t n = strcspn(out, "\n");
    c->status = KL_DOCTOR_PASS;
    kl__doctor_observed(c, "%.*s", (int)(n < 120 ? n : 120), out);
}

void kl_doctor_eval_hostfile(const char *path, const char (*hosts)[256], const int *state, int n, kl_doctor_check *c) {
    kl__doctor_init(c, "train.hostfile");
    kl__doctor_recommended(c, "every host resolves; remote ones answer on ssh (port 22)");
    kl__doctor_why(c,
                   "mpirun starts the ranks of other hosts over ssh and they exchange gradients over TCP: "
                   "a host that does not resolve or answer stops a multi-host training before its first step.");
    int bad = 0, no_ssh = 0;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (state[i] == KL_DOCTOR_HOST_LOCAL || state[i] == KL_DOCTOR_HOST_SSH) continue;
        bad++;
        no_ssh += state[i] == KL_DOCTOR_HOST_NO_SSH;
        if (o < sizeof c->observed)
            o += (size_t)snprintf(c->observed + o, sizeof c->observed - o, "%s%s: %s", o ? "; " : "", hosts[i],
                                  state[i] == KL_DOCTOR_HOST_NO_SSH ? "ssh port closed" : "not resolved");
    }
    if (!bad) {
        c->status = KL_DOCTOR_PASS;
        kl__doctor_observed(c, "%s: %d hosts, all reachable", path, n);
        return;
    }
    c->status = KL_DOCTOR_FAIL;
    kl__doctor_fix(c, "# %s: fix the names in the hostfile or DNS/hosts%s", path,
                   no_ssh ? "\n# start sshd on the hosts whose ssh port is closed (apt-get install openssh-server)"
                          : "");
}

void kl_doctor_eval_ranks(int ranks, int threads, int cpus, kl_doctor_check *c) {
    kl__doctor_init(c, "train.ranks");
    kl__doctor_recommended(c, "ranks on a host x threads per rank <= its CPUs");
    kl__doctor_why(c,
                   "each rank of a data-parallel run has its own thread pool (--threads is per rank) and "
                   "every step waits for the slowest rank: ranks that share cores slow down all of them.");
    if (ranks <= 0) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "not started by a launcher (%d threads, %d CPUs)", threads, cpus);
        kl__doctor_fix(c, "# `mpirun -np N keel doctor --threads T` checks a multi-rank layout");
        return;
    }
    long use = (long)ranks * threads;
    kl__doctor_observed(c, "%d ranks on this host x %d thread%s = %ld of %d CPUs", ranks, threads,
                        threads == 1 ? "" : "s", use, cpus);
    if (cpus > 0 && use > cpus) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_fix(c, "mpirun -np %d keel train ... --threads %d   # or fewer ranks per host", ranks,
                       cpus / ranks > 0 ? cpus / ranks : 1);
        return;
    }
    c->status = KL_DOCTOR_PASS;
}

/* ==================================================================
 * CUDA toolkit and GPU memory
 * ================================================================== */

void kl_doctor_eval_cuda(const char *driver, const char *nvcc_output, kl_doctor_check *c) {
    char cuda[32], maxc[16];
    const char *min = NULL, *compat = NULL;
    kl__doctor_init(c, "gpu.cuda");
    kl__doctor_recommended(c, "optional; a toolkit the driver supports");
    kl__doctor_why(c,
                   "nvcc builds CUDA code against a toolkit version; the program then "
                   "needs a driver at least as new as that toolkit's minimum (or, with "
                   "CUDA minor-version compatibility, the major's minimum, without PTX "
                   "JIT). Otherwise it fails at start with 'CUDA driver version is "
                   "insufficient for CUDA runtime version'.");
    int have_max = driver && kl_doctor_driver_max_cuda(driver, maxc, sizeof maxc) == KL_OK;
    if (!nvcc_output) {
        c->status = KL_DOCTOR_INFO;
        if (driver && have_max)
            kl__doctor_observed(c, "no toolkit (nvcc not found); the driver runs CUDA <= %s programs", maxc);
        else
            kl__doctor_observed(c, "no CUDA toolkit (nvcc not found)");
        return;
    }
    if (kl_doctor_parse_nvcc_version(nvcc_output, cuda, sizeof cuda) != KL_OK) {
        char first[120];
        snprintf(first, sizeof first, "%.*s", (int)strcspn(nvcc_output, "\n"), nvcc_output);
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "nvcc gave no version: %s", first[0] ? first : "(no output)");
        return;
    }
    if (!driver) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, "CUDA %s toolkit, no driver (build-only machine)", cuda);
        return;
    }
    int major = atoi(cuda);
    int have_compat = kl_doctor_cuda_compat_driver(major, &compat) == KL_OK;
    if (kl_doctor_cuda_min_driver(cuda, &min) == KL_OK) {
        if (kl_doctor_version_cmp(driver, min) >= 0) {
            c->status = KL_DOCTOR_PASS;
            kl__doctor_observed(c, "CUDA %s, driver %s (needs >= %s)", cuda, driver, min);
            return;
        }
        c->status = KL_DOCTOR_WARN;
        if (have_compat && kl_doctor_version_cmp(driver, compat) >= 0)
            kl__doctor_observed(c, "CUDA %s, driver %s: minor-version compatibility only (full "
                                   "support needs >= %s)", cuda, driver, min);
        else
            kl__doctor_observed(c, "CUDA %s, driver %s too old (needs >= %s)", cuda, driver, min);
        if (have_max)
            kl__doctor_fix(c, "# upgrade the NVIDIA driver to >= %s, or use a CUDA toolkit <= %s", min, maxc);
        else
            kl__doctor_fix(c, "# upgrade the NVIDIA driver to >= %s", min);
        return;
    }
    /* A toolkit keel's table does not know (newer than it, or very old). */
    if (have_compat && kl_doctor_version_cmp(driver, compat) < 0) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "CUDA %s, driver %s older than CUDA %d.x needs (>= %s)", cuda, driver,
                            major, compat);
        kl__doctor_fix(c, "# upgrade the NVIDIA driver to >= %s", compat);
        return;
    }
    c->status = KL_DOCTOR_INFO;
    kl__doctor_observed(c, "CUDA %s, driver %s (version not in keel's table)", cuda, driver);
}

void kl_doctor_eval_gpu_memory(int have_driver, int exit_status, const char *output, kl_doctor_check *c) {
    kl_doctor_gpu g[16];
    int n = 0;
    char a[32], b[32];
    kl__doctor_init(c, "gpu.memory");
    kl__doctor_recommended(c, "GPU memory free for keel (< 80%% used by others)");
    kl__doctor_why(c,
                   "The GPUs nvidia-smi lists and how much of their memory other processes "
                   "already hold: a model or batch that needs more than what is free fails "
                   "with out-of-memory on the device.");
    if (!output) {
        c->status = KL_DOCTOR_INFO;
        kl__doctor_observed(c, have_driver ? "nvidia-smi not found" : "no NVIDIA GPU (no nvidia-smi)");
        return;
    }
    if (exit_status == -1) {
        c->status = KL_DOCTOR_WARN;
        kl__doctor_observed(c, "nvidia-smi did not answer in time");
        kl__doctor_fix(c, "# a hung nvidia-smi usually means a wedged driver or GPU: check dmesg for "
                          "NVRM/Xid errors");
        return;
    }
    if (exit_status != 0 || kl_doctor_parse_nvsmi(output, g, (int)KL_ARRAY_LEN(g), &n) != KL_OK || n == 0) {
        char first[160];
        snprintf(first, sizeof first, "%.*s", (int)strcspn(output, "\n"), output);
        c->status = KL_DOCTOR_WARN;
        if (exit_status != 0)
            kl__doctor_observed(c, "nvidia-smi failed (exit %d): %s", exit_status, first);
        else
            kl__doctor_observed(c, "nvidia-smi listed no GPUs%s%s", first[0] ? ": " : "", first);
        kl__doctor_fix(c, "# check that the driver matches the kernel module (dmesg | grep -i nvrm; "
                          "nvidia-smi)");
        return;
    }
    int same = 1, busy = -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(g[i].name, g[0].name) != 0 || g[i].mem_total != g[0].mem_total) same = 0;
        if (g[i].mem_total && g[i].mem_used * 10 > g[i].mem_total * 8 && busy < 0) busy = i;
    }
    if (n == 1) {
        kl__doctor_observed(c, "%s: %s, %s used", g[0].name, bytes(g[0].mem_total, a, sizeof a),
                            bytes(g[0].mem_used, b, sizeof b));
    } else if (same) {
        uint64_t used = 0;
        for (int i = 0; i < n; i++) used += g[i].mem_used;
        kl__doctor_observed(c, "%d x %s: %s each, %s used in all", n, g[0].name,
                            bytes(g[0].mem_total, a, sizeof a), bytes(used, b, sizeof b));
    } else {
        size_t o = 0;
        for (int i = 0; i < n && o < sizeof c->observed; i++) {
            int w = snprintf(c->observed + o, sizeof c->observed - o, "%s%d: %s %s (%s used)",
                             i ? "; " : "", i, g[i].name, bytes(g[i].mem_total, a, sizeof a),
                             bytes(g[i].mem_used, b, sizeof b));
            if (w < 0) break;
            o += (size_t)w;
        }
    }
    if (busy >= 0) {
        c->status = KL_DOCTOR_WARN;
        size_t o = strlen(c->observed);
        if (o < sizeof c->observed)
            snprintf(c->observed + o, sizeof c->observed - o, "; GPU %d is %.0f%% used", busy,
                     100.0 * (double)g[busy].mem_used / (double)g[busy].mem_total);
        kl__doctor_fix(c, "%s",
                       "# see which processes hold GPU memory:\n"
                       "# nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv");
    } else {
        c->status = KL_DOCTOR_PASS;
    }
}
