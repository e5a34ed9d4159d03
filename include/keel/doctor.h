/* keel doctor: read-only checks of whether this machine is ready for AI work
 * (kernel settings, limits, /dev/shm, memory, disk, CPU, clock, GPU). Each
 * check reports pass/warn/fail/info with the observed value, the recommended
 * value, why it matters and the exact command that would fix it. Nothing on
 * the machine is changed; the fix script is printed for review, never run.
 *
 * The readers are split in two so that tests can feed synthetic input:
 * pure parsers and evaluators that take file contents as strings, and
 * kl_doctor_run(), which reads the real files (optionally under a root
 * prefix, e.g. a fake /proc tree) and calls them. */
#ifndef KEEL_DOCTOR_H
#define KEEL_DOCTOR_H

#include <keel/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Checks and reports
 * ================================================================== */

typedef enum {
    KL_DOCTOR_PASS,
    KL_DOCTOR_WARN,
    KL_DOCTOR_FAIL,
    KL_DOCTOR_INFO,
    KL_DOCTOR_NSTATUS
} kl_doctor_status;

/* "pass", "warn", "fail", "info". */
const char *kl_doctor_status_name(kl_doctor_status s);

/* One check. All strings are NUL-terminated (possibly empty), ASCII. */
typedef struct {
    char id[48];            /* "kernel.swappiness" */
    kl_doctor_status status;
    char observed[384];     /* "60" */
    char recommended[192];  /* "<= 10" */
    char why[640];          /* one paragraph */
    char fix[1024];         /* shell lines (may be several, "#" comments); "" when nothing to do */
} kl_doctor_check;

typedef struct {
    const char *data_dir;  /* folder for datasets and checkpoints; NULL = "." */
    const char *root;      /* prefix for /proc, /sys, /dev/shm and /usr/local/cuda;
                              NULL = $KEEL_DOCTOR_ROOT, or "" (the real ones) */
    int exec_timeout_ms;   /* limit per external program (nvcc, nvidia-smi); <= 0 = 2000 */
    int no_exec;           /* 1: run no external programs */
    const char *hostfile;  /* an MPI hostfile: is every host reachable (train.hostfile); NULL = no check */
} kl_doctor_opts;

typedef struct kl_doctor_report kl_doctor_report;

/* Runs every check (read-only). Fails only for bad options or out of memory;
 * a failing check is a result, not an error. o may be NULL (defaults). */
int kl_doctor_run(const kl_doctor_opts *o, kl_doctor_report **out, kl_err *e);
/* An empty report, to which checks are added (for tests and callers that
 * assemble their own). */
int kl_doctor_report_new(kl_doctor_report **out, kl_err *e);
int kl_doctor_report_add(kl_doctor_report *r, const kl_doctor_check *c, kl_err *e);
void kl_doctor_report_free(kl_doctor_report *r); /* NULL is a no-op */

size_t kl_doctor_report_count(const kl_doctor_report *r);
/* i-th check (NULL when out of range); valid until kl_doctor_report_free. */
const kl_doctor_check *kl_doctor_report_at(const kl_doctor_report *r, size_t i);
/* The check with this id, or NULL. */
const kl_doctor_check *kl_doctor_report_find(const kl_doctor_report *r, const char *id);
/* counts[KL_DOCTOR_PASS] ... counts[KL_DOCTOR_INFO]. */
void kl_doctor_report_counts(const kl_doctor_report *r, int counts[KL_DOCTOR_NSTATUS]);
/* 1 when at least one check failed (the command then exits 1). */
int kl_doctor_report_failed(const kl_doctor_report *r);

/* Output, appended to b. Text: an aligned table (status, id, observed,
 * recommended), then why/fix of every check that did not pass, then the
 * summary; ANSI colours when color != 0. JSON:
 * {"checks":[{"id","status","observed","recommended","why","fix"}...],
 *  "summary":{"pass":N,"warn":N,"fail":N,"info":N}}.
 * Fix script: "#!/bin/sh", then per warn/fail check with a fix a comment
 * block (id, observed, why) and its commands. Returns KL_OK or KL_ENOMEM. */
int kl_doctor_format_text(const kl_doctor_report *r, int color, kl_buf *b);
int kl_doctor_format_json(const kl_doctor_report *r, kl_buf *b);
int kl_doctor_format_fix_script(const kl_doctor_report *r, kl_buf *b);

/* ==================================================================
 * Evaluators: one check from its input, no system access. These are what
 * kl_doctor_run calls; tests call them with synthetic input.
 * ================================================================== */

/* Checks whose input is the text of one file; text NULL = the file is
 * absent or unreadable. Ids and their files (under the root prefix):
 *   kernel.swappiness        /proc/sys/vm/swappiness
 *   kernel.overcommit_memory /proc/sys/vm/overcommit_memory
 *   kernel.thp               /sys/kernel/mm/transparent_hugepage/enabled
 *   net.somaxconn            /proc/sys/net/core/somaxconn
 *   net.tcp_max_syn_backlog  /proc/sys/net/ipv4/tcp_max_syn_backlog
 *   memory.total, memory.swap  /proc/meminfo
 *   cpu.model, cpu.simd      /proc/cpuinfo
 *   cpu.governor             /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor
 *   gpu.driver               /proc/driver/nvidia/version
 * KL_EINVAL for another id. */
int kl_doctor_eval_text(const char *id, const char *text, kl_doctor_check *out, kl_err *e);

/* limits.nofile: RLIMIT_NOFILE soft and hard (UINT64_MAX = unlimited). */
void kl_doctor_eval_nofile(uint64_t soft, uint64_t hard, kl_doctor_check *out);

/* Space and inodes of a file system (from statvfs), in bytes / counts. */
typedef struct {
    int present;            /* 0: the folder does not exist */
    uint64_t size, avail;   /* bytes: total, available to unprivileged users */
    uint64_t files, ffree;  /* inodes: total, free (files 0 = not reported) */
    int readonly;
} kl_doctor_fs;

/* shm: /dev/shm. */
void kl_doctor_eval_shm(const kl_doctor_fs *fs, kl_doctor_check *out);

/* The data folder as found on disk. */
typedef struct {
    const char *path;       /* as given */
    int exists, is_dir, writable;
    int error;              /* errno of stat() when it failed otherwise than
                               ENOENT/ENOTDIR (e.g. EACCES); 0 otherwise */
    const char *probe;      /* folder whose file system was measured: path, or
                               its nearest existing parent when path is missing */
    kl_doctor_fs fs;        /* of probe */
    const char *owner;      /* user name for the fix (chown); may be NULL */
} kl_doctor_datadir;

/* disk.data_dir (exists, is a folder, writable) and disk.free (>= 1 GiB
 * free or it fails; >= 20 GiB recommended). */
void kl_doctor_eval_data_dir(const kl_doctor_datadir *d, kl_doctor_check *out);
void kl_doctor_eval_disk_free(const kl_doctor_datadir *d, kl_doctor_check *out);
/* disk.mount: options of the mount holding path (an absolute, resolved
 * path), from the text of /proc/self/mountinfo (NULL = unreadable). */
void kl_doctor_eval_mount(const char *mountinfo, const char *path, kl_doctor_check *out);

/* clock.sync from adjtimex(): its return value (TIME_ERROR = 5 means
 * unsynchronised), status flags (STA_UNSYNC = 0x40) and maxerror (µs).
 * rc < 0: adjtimex failed (errno -rc). */
void kl_doctor_eval_clock(int rc, int status, long maxerror_us, long esterror_us,
                          kl_doctor_check *out);

/* train.mpi: the output of `mpirun --version` (NULL = no mpirun on PATH),
 * for data-parallel keel train (docs/training.md). */
void kl_doctor_eval_mpi(const char *mpirun_output, kl_doctor_check *out);
/* train.hostfile (keel doctor --hostfile FILE): what each host of an MPI
 * hostfile answered: a local address (no ssh needed), ssh's port open,
 * closed, or the name did not resolve. */
enum { KL_DOCTOR_HOST_LOCAL, KL_DOCTOR_HOST_SSH, KL_DOCTOR_HOST_NO_SSH, KL_DOCTOR_HOST_UNRESOLVED };
void kl_doctor_eval_hostfile(const char *path, const char (*hosts)[256], const int *state, int n, kl_doctor_check *out);
/* train.ranks: ranks of this job on this host (0 = not started by a
 * launcher), threads per rank and the CPUs this process may use: more
 * rank x thread than CPUs oversubscribes the cores. */
void kl_doctor_eval_ranks(int local_ranks, int threads, int cpus, kl_doctor_check *out);

/* gpu.cuda: driver version ("535.104.05", NULL = no driver) and the output
 * of `nvcc --version` (NULL = no nvcc). */
void kl_doctor_eval_cuda(const char *driver, const char *nvcc_output, kl_doctor_check *out);

/* gpu.memory: exit status and output of `nvidia-smi --query-gpu=name,
 * memory.total,memory.used --format=csv,noheader` (output NULL = no
 * nvidia-smi; exit_status -1 = timed out); have_driver: gpu.driver found one. */
void kl_doctor_eval_gpu_memory(int have_driver, int exit_status, const char *output,
                               kl_doctor_check *out);

/* ==================================================================
 * Parsers (pure)
 * ================================================================== */

/* The first integer in text after leading white space ("60\n" -> 60). */
int kl_doctor_parse_int(const char *text, int64_t *out);
/* The [selected] word of a sysfs choice list: "always [madvise] never" ->
 * "madvise". KL_EPARSE when there is none. */
int kl_doctor_parse_selected(const char *text, char *out, size_t n);
/* A /proc/meminfo field ("MemTotal:  16384 kB") in bytes; KL_ENOTFOUND when absent. */
int kl_doctor_parse_meminfo(const char *text, const char *key, uint64_t *bytes);

typedef struct {
    char model[128];        /* "model name" (x86) or "CPU part"/"Hardware" (ARM) */
    int processors;         /* number of "processor" entries */
    int x86;                /* a "flags" line was found */
    int avx2, fma, avx512f, f16c;
    int neon;               /* "Features" has asimd or neon */
} kl_doctor_cpu;
/* /proc/cpuinfo; flags are read from the first processor. */
int kl_doctor_parse_cpuinfo(const char *text, kl_doctor_cpu *out);

typedef struct {
    char mount_point[512];
    char root[512];         /* folder of the file system mounted there */
    char fstype[64];
    char source[256];
    char options[512];      /* per-mount options: "rw,noatime" */
    char super_options[512];
} kl_doctor_mount;
/* The mount that contains path (the longest mount point that is a prefix of
 * path at a '/' boundary; a later line wins for the same mount point).
 * Octal escapes (\040) are decoded. KL_ENOTFOUND / KL_EPARSE. */
int kl_doctor_find_mount(const char *mountinfo, const char *path, kl_doctor_mount *out);
/* 1 when the comma-separated list has this option. */
int kl_doctor_has_option(const char *options, const char *opt);

/* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ..." -> "535.104.05". */
int kl_doctor_parse_nvidia_version(const char *text, char *out, size_t n);
/* "Cuda compilation tools, release 12.2, V12.2.140" -> "12.2". */
int kl_doctor_parse_nvcc_version(const char *text, char *out, size_t n);

typedef struct {
    char name[128];
    uint64_t mem_total, mem_used; /* bytes */
} kl_doctor_gpu;
/* nvidia-smi CSV lines "NVIDIA H100 80GB HBM3, 81559 MiB, 0 MiB"; *n = GPUs
 * found (at most max). KL_EPARSE when a line is malformed. */
int kl_doctor_parse_nvsmi(const char *text, kl_doctor_gpu *gpus, int max, int *n);

/* An MPI hostfile ("node-a slots=2 max_slots=4", '#' comments): the host
 * names in order, at most max. KL_EPARSE for a malformed line (*n = its number). */
int kl_doctor_parse_hostfile(const char *text, char (*hosts)[256], int max, int *n);

/* Compares dotted numeric versions ("535.104.05" vs "535.54.03"): <0, 0, >0.
 * Missing parts count as 0. */
int kl_doctor_version_cmp(const char *a, const char *b);

/* The CUDA toolkit -> minimum Linux x86_64 driver table (from NVIDIA's CUDA
 * toolkit release notes), newest first. */
typedef struct {
    const char *cuda;        /* "12.4" */
    const char *min_driver;  /* "550.54.14" */
} kl_doctor_cuda_req;
const kl_doctor_cuda_req *kl_doctor_cuda_table(size_t *n);
/* Minimum driver for a toolkit version ("12.4" or "12.4.131"); KL_ENOTFOUND
 * when the version is not in the table. */
int kl_doctor_cuda_min_driver(const char *cuda, const char **min_driver);
/* Minimum driver for CUDA minor-version compatibility within a major
 * ("12" -> "525.60.13"); KL_ENOTFOUND when unknown. */
int kl_doctor_cuda_compat_driver(int major, const char **min_driver);
/* The newest CUDA version a driver supports ("550.54.14" -> "12.4");
 * KL_ENOTFOUND when the driver is older than the table. */
int kl_doctor_driver_max_cuda(const char *driver, char *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
