/* Unit tests of keel doctor: the pure parsers and evaluators with synthetic
 * input (a swappiness of 60 warns, 5 passes, ...), the three output
 * formats, and kl_doctor_run over a fake /proc + /sys tree with fake nvcc
 * and nvidia-smi programs, including the time limit on a hung program. */
#include "../harness.h"

#include <keel/doctor.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timex.h>

/* ------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------ */

static kl_doctor_status eval(const char *id, const char *text, kl_doctor_check *c) {
    kl_err e = {0};
    if (kl_doctor_eval_text(id, text, c, &e) != KL_OK) return KL_DOCTOR_NSTATUS;
    return c->status;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Creates root/rel (and its folders) with text. */
static int put(const char *root, const char *rel, const char *text) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    char *s = strrchr(p, '/');
    *s = 0;
    if (kl_mkdir_p(p, NULL) != KL_OK) return -1;
    *s = '/';
    return write_file(p, text);
}

static const char cpuinfo_x86[] =
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "model name\t: AMD EPYC 7B13\n"
    "flags\t\t: fpu sse sse2 avx f16c fma avx2 avx512f avx512bw\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: AMD EPYC 7B13\n"
    "flags\t\t: fpu sse sse2 avx f16c fma avx2 avx512f avx512bw\n";

static const char cpuinfo_old[] =
    "processor\t: 0\n"
    "model name\t: Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz\n"
    "flags\t\t: fpu sse sse2 avx avx512fp16 xavx2\n";

static const char cpuinfo_arm[] =
    "processor\t: 0\n"
    "BogoMIPS\t: 50.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
    "CPU implementer\t: 0x41\n"
    "CPU part\t: 0xd0c\n";

static const char meminfo_32g[] =
    "MemTotal:       32768000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:   30000000 kB\n"
    "SwapTotal:       4194304 kB\n"
    "SwapFree:        4194304 kB\n";

static const char mountinfo[] =
    "21 26 0:20 / /proc rw,relatime - proc proc rw\n"
    "26 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro\n"
    "30 26 252:2 / /data rw,noatime shared:2 - xfs /dev/nvme0n1 rw,attr2\n"
    "31 30 0:50 /export /data/nfs rw,relatime shared:3 master:7 - nfs4 srv:/export rw,vers=4.2\n"
    "32 26 252:3 / /mnt/my\\040disk rw,nosuid,nodev,strictatime - ext4 /dev/sdb1 rw\n"
    "33 26 252:4 / /scratch rw - ext4 /dev/sdc1 rw\n"
    "34 26 252:5 / /scratch rw,noatime - ext4 /dev/sdd1 rw\n"
    "garbage line\n";

/* ------------------------------------------------------------------
 * kernel settings
 * ------------------------------------------------------------------ */

KL_TEST(doctor_swappiness) {
    kl_doctor_check c;
    KT_EQ_INT(eval("kernel.swappiness", "60\n", &c), KL_DOCTOR_WARN);
    KT_EQ_STR(c.id, "kernel.swappiness");
    KT_EQ_STR(c.observed, "60");
    KT_EQ_STR(c.recommended, "<= 10");
    KT_CONTAINS(c.fix, "sysctl -w vm.swappiness=10");
    KT_CONTAINS(c.fix, "/etc/sysctl.d/");
    KT_CHECK(strlen(c.why) > 40);
    KT_EQ_INT(eval("kernel.swappiness", "5\n", &c), KL_DOCTOR_PASS);
    KT_EQ_STR(c.fix, "");
    KT_EQ_INT(eval("kernel.swappiness", "10", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("kernel.swappiness", "11", &c), KL_DOCTOR_WARN);
    KT_EQ_INT(eval("kernel.swappiness", NULL, &c), KL_DOCTOR_INFO);
    KT_CONTAINS(c.observed, "not readable");
    KT_EQ_INT(eval("kernel.swappiness", "sixty", &c), KL_DOCTOR_WARN);
    kl_err e = {0};
    KT_EQ_INT(kl_doctor_eval_text("no.such.check", "1", &c, &e), KL_EINVAL);
}

KL_TEST(doctor_backlogs_and_overcommit) {
    kl_doctor_check c;
    KT_EQ_INT(eval("net.somaxconn", "128\n", &c), KL_DOCTOR_WARN);
    KT_CONTAINS(c.fix, "net.core.somaxconn=4096");
    KT_EQ_INT(eval("net.somaxconn", "4096\n", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("net.tcp_max_syn_backlog", "2048\n", &c), KL_DOCTOR_WARN);
    KT_CONTAINS(c.fix, "net.ipv4.tcp_max_syn_backlog=4096");
    KT_EQ_INT(eval("net.tcp_max_syn_backlog", "65536\n", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("kernel.overcommit_memory", "0\n", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("kernel.overcommit_memory", "1\n", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("kernel.overcommit_memory", "2\n", &c), KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "strict");
    KT_CONTAINS(c.fix, "vm.overcommit_memory=0");
}

KL_TEST(doctor_thp) {
    char m[32];
    KT_OK(kl_doctor_parse_selected("always [madvise] never\n", m, sizeof m), NULL);
    KT_EQ_STR(m, "madvise");
    KT_EQ_INT(kl_doctor_parse_selected("always madvise never\n", m, sizeof m), KL_EPARSE);
    KT_EQ_INT(kl_doctor_parse_selected("[]", m, sizeof m), KL_EPARSE);
    kl_doctor_check c;
    KT_EQ_INT(eval("kernel.thp", "always [madvise] never\n", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("kernel.thp", "[always] madvise never\n", &c), KL_DOCTOR_WARN);
    KT_EQ_STR(c.observed, "always");
    KT_CONTAINS(c.fix, "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
    KT_EQ_INT(eval("kernel.thp", "always madvise [never]\n", &c), KL_DOCTOR_WARN);
    KT_EQ_INT(eval("kernel.thp", NULL, &c), KL_DOCTOR_INFO);
}

KL_TEST(doctor_parse_int) {
    int64_t v;
    KT_OK(kl_doctor_parse_int("  42\n", &v), NULL);
    KT_EQ_INT(v, 42);
    KT_OK(kl_doctor_parse_int("-1", &v), NULL);
    KT_EQ_INT(v, -1);
    KT_EQ_INT(kl_doctor_parse_int("", &v), KL_EPARSE);
    KT_EQ_INT(kl_doctor_parse_int("12abc", &v), KL_EPARSE);
    KT_EQ_INT(kl_doctor_parse_int("99999999999999999999999", &v), KL_EPARSE);
}

/* ------------------------------------------------------------------
 * limits, memory, /dev/shm, disk
 * ------------------------------------------------------------------ */

KL_TEST(doctor_nofile) {
    kl_doctor_check c;
    kl_doctor_eval_nofile(1024, 4096, &c);
    KT_EQ_STR(c.id, "limits.nofile");
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_EQ_STR(c.observed, "soft 1024, hard 4096");
    KT_CONTAINS(c.fix, "ulimit -n 65535");
    KT_CONTAINS(c.fix, "LimitNOFILE");
    KT_CONTAINS(c.fix, "limits.d");
    kl_doctor_eval_nofile(65535, 65535, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    kl_doctor_eval_nofile(1048576, UINT64_MAX, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "unlimited");
    kl_doctor_eval_nofile(256, 512, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    kl_doctor_eval_nofile(65535, 1023, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
}

KL_TEST(doctor_meminfo) {
    uint64_t v;
    KT_OK(kl_doctor_parse_meminfo(meminfo_32g, "MemTotal", &v), NULL);
    KT_EQ_INT(v, 32768000ull * 1024);
    KT_OK(kl_doctor_parse_meminfo(meminfo_32g, "SwapFree", &v), NULL);
    KT_EQ_INT(v, 4194304ull * 1024);
    KT_EQ_INT(kl_doctor_parse_meminfo(meminfo_32g, "Mem", &v), KL_ENOTFOUND);
    KT_EQ_INT(kl_doctor_parse_meminfo(meminfo_32g, "HugePages_Total", &v), KL_ENOTFOUND);
    KT_OK(kl_doctor_parse_meminfo("HugePages_Total:       7\n", "HugePages_Total", &v), NULL);
    KT_EQ_INT(v, 7); /* no kB: a count */

    kl_doctor_check c;
    KT_EQ_INT(eval("memory.total", meminfo_32g, &c), KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "available");
    KT_EQ_INT(eval("memory.total", "MemTotal: 4000000 kB\nMemAvailable: 3000000 kB\n", &c), KL_DOCTOR_WARN);
    KT_EQ_INT(eval("memory.total", "MemTotal: 32000000 kB\nMemAvailable: 1000000 kB\n", &c), KL_DOCTOR_WARN);
    KT_EQ_INT(eval("memory.total", NULL, &c), KL_DOCTOR_INFO);
    KT_EQ_INT(eval("memory.swap", meminfo_32g, &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("memory.swap", "SwapTotal: 0 kB\nSwapFree: 0 kB\n", &c), KL_DOCTOR_INFO);
    KT_EQ_STR(c.observed, "no swap");
    KT_EQ_INT(eval("memory.swap", "SwapTotal: 4194304 kB\nSwapFree: 100 kB\n", &c), KL_DOCTOR_WARN);
}

KL_TEST(doctor_shm) {
    kl_doctor_check c;
    kl_doctor_fs fs = {1, 64u << 20, 64u << 20, 4096, 4095, 0};
    kl_doctor_eval_shm(&fs, &c);
    KT_EQ_STR(c.id, "shm");
    KT_EQ_INT(c.status, KL_DOCTOR_WARN); /* Docker's 64 MiB default */
    KT_CONTAINS(c.fix, "--shm-size");
    KT_CONTAINS(c.fix, "remount,size=");
    fs = (kl_doctor_fs){1, 8ull << 30, 8ull << 30, 1000000, 999990, 0};
    kl_doctor_eval_shm(&fs, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    fs.avail = 0;
    kl_doctor_eval_shm(&fs, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "full");
    fs.avail = 4ull << 30;
    fs.ffree = 0;
    kl_doctor_eval_shm(&fs, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "inodes");
    kl_doctor_eval_shm(NULL, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
}

KL_TEST(doctor_data_dir) {
    kl_doctor_check c;
    kl_doctor_datadir d = {0};
    d.path = "/srv/it's data";
    d.probe = "/srv";
    d.owner = "alice";
    d.fs = (kl_doctor_fs){1, 100ull << 30, 50ull << 30, 1000, 900, 0};
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_STR(c.id, "disk.data_dir");
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "does not exist");
    KT_EQ_STR(c.fix, "mkdir -p '/srv/it'\\''s data' && chown 'alice' '/srv/it'\\''s data'");
    kl_doctor_eval_disk_free(&d, &c); /* measured at the parent */
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "(at /srv)");

    d.error = 13; /* EACCES */
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "cannot access");
    d.error = 0;

    d.path = d.probe = "/srv/data";
    d.exists = d.is_dir = 1;
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "not writable by alice");
    KT_CONTAINS(c.fix, "chown 'alice' '/srv/data'");
    d.writable = 1;
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    d.fs.readonly = 1;
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "read-only");
    d.fs.readonly = 0;
    d.is_dir = 0;
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);

    /* a newline in a path must not end a "#" comment of the fix script */
    d.path = "/tmp/x\nrm -rf /";
    kl_doctor_eval_data_dir(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CHECK(strchr(c.fix, '\n') == NULL);
    KT_CHECK(strchr(c.observed, '\n') == NULL);
    KT_CONTAINS(c.fix, "# /tmp/x?rm -rf / is a file");
    d.path = d.probe = "/srv/data";

    d.fs.avail = 500u << 20;
    kl_doctor_eval_disk_free(&d, &c);
    KT_EQ_STR(c.id, "disk.free");
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    d.fs.avail = 5ull << 30;
    kl_doctor_eval_disk_free(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    d.fs.avail = 50ull << 30;
    d.fs.ffree = 0;
    kl_doctor_eval_disk_free(&d, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "no free inodes");
}

KL_TEST(doctor_mountinfo) {
    kl_doctor_mount m;
    KT_OK(kl_doctor_find_mount(mountinfo, "/data/sets/x", &m), NULL);
    KT_EQ_STR(m.mount_point, "/data");
    KT_EQ_STR(m.fstype, "xfs");
    KT_EQ_STR(m.source, "/dev/nvme0n1");
    KT_EQ_STR(m.options, "rw,noatime");
    KT_EQ_STR(m.super_options, "rw,attr2");
    KT_OK(kl_doctor_find_mount(mountinfo, "/data2/x", &m), NULL); /* not /data: component boundary */
    KT_EQ_STR(m.mount_point, "/");
    KT_OK(kl_doctor_find_mount(mountinfo, "/data/nfs", &m), NULL); /* optional fields skipped */
    KT_EQ_STR(m.fstype, "nfs4");
    KT_EQ_STR(m.root, "/export");
    KT_OK(kl_doctor_find_mount(mountinfo, "/mnt/my disk/a", &m), NULL);
    KT_EQ_STR(m.mount_point, "/mnt/my disk");
    KT_OK(kl_doctor_find_mount(mountinfo, "/scratch", &m), NULL); /* the later mount wins */
    KT_EQ_STR(m.source, "/dev/sdd1");
    KT_EQ_INT(kl_doctor_find_mount("nonsense\n", "/", &m), KL_EPARSE);
    KT_EQ_INT(kl_doctor_find_mount("21 26 0:20 / /proc rw - proc proc rw\n", "/data", &m), KL_ENOTFOUND);
    KT_CHECK(kl_doctor_has_option("rw,noatime", "noatime"));
    KT_CHECK(!kl_doctor_has_option("rw,noatimex", "noatime"));
    KT_CHECK(!kl_doctor_has_option("", "rw"));

    kl_doctor_check c;
    kl_doctor_eval_mount(mountinfo, "/data/x", &c);
    KT_EQ_STR(c.id, "disk.mount");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    kl_doctor_eval_mount(mountinfo, "/home/u", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO); /* relatime */
    KT_CONTAINS(c.fix, "mount -o remount,noatime '/'");
    kl_doctor_eval_mount(mountinfo, "/mnt/my disk", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN); /* strictatime */
    KT_CONTAINS(c.fix, "'/mnt/my disk'");
    kl_doctor_eval_mount(mountinfo, "/data/nfs/a", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.fix, "network file system");
    kl_doctor_eval_mount(NULL, "/", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
}

/* ------------------------------------------------------------------
 * CPU and clock
 * ------------------------------------------------------------------ */

KL_TEST(doctor_cpuinfo) {
    kl_doctor_cpu cpu;
    KT_OK(kl_doctor_parse_cpuinfo(cpuinfo_x86, &cpu), NULL);
    KT_EQ_STR(cpu.model, "AMD EPYC 7B13");
    KT_EQ_INT(cpu.processors, 2);
    KT_CHECK(cpu.x86 && cpu.avx2 && cpu.fma && cpu.avx512f && cpu.f16c);
    KT_OK(kl_doctor_parse_cpuinfo(cpuinfo_old, &cpu), NULL);
    KT_CHECK(cpu.x86 && !cpu.avx2 && !cpu.fma && !cpu.avx512f && !cpu.f16c); /* whole words only */
    KT_OK(kl_doctor_parse_cpuinfo(cpuinfo_arm, &cpu), NULL);
    KT_CHECK(!cpu.x86 && cpu.neon);
    KT_EQ_STR(cpu.model, "CPU part 0xd0c");
    KT_EQ_INT(kl_doctor_parse_cpuinfo("", &cpu), KL_EPARSE);

    kl_doctor_check c;
    KT_EQ_INT(eval("cpu.simd", cpuinfo_x86, &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("cpu.simd", cpuinfo_old, &c), KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "avx2 NO");
    KT_CONTAINS(c.fix, "host-passthrough");
    KT_EQ_INT(eval("cpu.simd", cpuinfo_arm, &c), KL_DOCTOR_INFO);
    KT_EQ_INT(eval("cpu.model", cpuinfo_x86, &c), KL_DOCTOR_INFO);
    KT_CONTAINS(c.observed, "AMD EPYC 7B13, 2 logical CPUs");
}

KL_TEST(doctor_governor_and_clock) {
    kl_doctor_check c;
    KT_EQ_INT(eval("cpu.governor", "performance\n", &c), KL_DOCTOR_PASS);
    KT_EQ_INT(eval("cpu.governor", "powersave\n", &c), KL_DOCTOR_WARN);
    KT_EQ_STR(c.observed, "powersave");
    KT_CONTAINS(c.fix, "scaling_governor");
    KT_EQ_INT(eval("cpu.governor", NULL, &c), KL_DOCTOR_INFO);

    kl_doctor_eval_clock(TIME_OK, 0, 12000, 500, &c);
    KT_EQ_STR(c.id, "clock.sync");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "12.0 ms");
    kl_doctor_eval_clock(TIME_ERROR, STA_UNSYNC, 16000000, 16000000, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "unsynchronised");
    KT_CONTAINS(c.fix, "timedatectl set-ntp true");
    kl_doctor_eval_clock(TIME_OK, STA_UNSYNC, 100, 100, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    kl_doctor_eval_clock(-1, 0, 0, 0, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
}

/* ------------------------------------------------------------------
 * GPU
 * ------------------------------------------------------------------ */

KL_TEST(doctor_nvidia_versions) {
    char v[64];
    KT_OK(kl_doctor_parse_nvidia_version(
              "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
              "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
              v, sizeof v), NULL);
    KT_EQ_STR(v, "535.104.05");
    KT_OK(kl_doctor_parse_nvidia_version(
              "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  "
              "(dvs-builder@U16-I3-B03-4-3)  Fri Mar 14 2025\n",
              v, sizeof v), NULL);
    KT_EQ_STR(v, "570.133.20");
    KT_EQ_INT(kl_doctor_parse_nvidia_version("GCC version: 12.2\n", v, sizeof v), KL_EPARSE);
    KT_OK(kl_doctor_parse_nvcc_version("nvcc: NVIDIA (R) Cuda compiler driver\n"
                                       "Cuda compilation tools, release 12.4, V12.4.131\n",
                                       v, sizeof v), NULL);
    KT_EQ_STR(v, "12.4");
    KT_EQ_INT(kl_doctor_parse_nvcc_version("bash: nvcc: command not found\n", v, sizeof v), KL_EPARSE);

    kl_doctor_check c;
    KT_EQ_INT(eval("gpu.driver", NULL, &c), KL_DOCTOR_INFO);
    KT_EQ_INT(eval("gpu.driver", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  x\n", &c),
              KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "CUDA <= 12.2");
    KT_EQ_INT(eval("gpu.driver", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  340.108  x\n", &c),
              KL_DOCTOR_WARN);
    KT_EQ_INT(eval("gpu.driver", "hello\n", &c), KL_DOCTOR_WARN);
}

KL_TEST(doctor_cuda_table) {
    char v[16];
    const char *d;
    KT_CHECK(kl_doctor_version_cmp("535.104.05", "535.54.03") > 0);
    KT_CHECK(kl_doctor_version_cmp("535.54.03", "535.104.05") < 0);
    KT_CHECK(kl_doctor_version_cmp("570.26", "570.26.0") == 0);
    KT_CHECK(kl_doctor_version_cmp("12.10", "12.9") > 0);
    KT_OK(kl_doctor_driver_max_cuda("535.104.05", v, sizeof v), NULL);
    KT_EQ_STR(v, "12.2");
    KT_OK(kl_doctor_driver_max_cuda("550.54.14", v, sizeof v), NULL);
    KT_EQ_STR(v, "12.4");
    KT_OK(kl_doctor_driver_max_cuda("550.54.13", v, sizeof v), NULL);
    KT_EQ_STR(v, "12.3");
    KT_OK(kl_doctor_driver_max_cuda("590.48.01", v, sizeof v), NULL);
    KT_EQ_STR(v, "13.0");
    KT_EQ_INT(kl_doctor_driver_max_cuda("340.108", v, sizeof v), KL_ENOTFOUND);
    KT_EQ_INT(kl_doctor_driver_max_cuda("junk", v, sizeof v), KL_EINVAL);
    KT_OK(kl_doctor_cuda_min_driver("12.4.131", &d), NULL);
    KT_EQ_STR(d, "550.54.14");
    KT_OK(kl_doctor_cuda_min_driver("11.8", &d), NULL);
    KT_EQ_STR(d, "520.61.05");
    KT_EQ_INT(kl_doctor_cuda_min_driver("12.7", &d), KL_ENOTFOUND);
    KT_OK(kl_doctor_cuda_compat_driver(12, &d), NULL);
    KT_EQ_STR(d, "525.60.13");
    /* the table is newest first and drivers grow with toolkits */
    size_t n;
    const kl_doctor_cuda_req *t = kl_doctor_cuda_table(&n);
    KT_CHECK(n >= 20);
    for (size_t i = 0; i + 1 < n; i++) {
        KT_CHECKF(kl_doctor_version_cmp(t[i].cuda, t[i + 1].cuda) > 0, "row %zu: %s", i, t[i].cuda);
        KT_CHECKF(kl_doctor_version_cmp(t[i].min_driver, t[i + 1].min_driver) > 0, "row %zu: %s", i,
                  t[i].min_driver);
    }
}

KL_TEST(doctor_eval_cuda) {
    static const char nvcc122[] = "Cuda compilation tools, release 12.2, V12.2.140\n";
    static const char nvcc124[] = "Cuda compilation tools, release 12.4, V12.4.131\n";
    static const char nvcc140[] = "Cuda compilation tools, release 14.0, V14.0.1\n";
    kl_doctor_check c;
    kl_doctor_eval_cuda("535.104.05", nvcc122, &c);
    KT_EQ_STR(c.id, "gpu.cuda");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "CUDA 12.2");
    kl_doctor_eval_cuda("535.104.05", nvcc124, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "minor-version");
    KT_CONTAINS(c.fix, ">= 550.54.14");
    KT_CONTAINS(c.fix, "<= 12.2");
    kl_doctor_eval_cuda("470.42.01", nvcc124, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "too old");
    kl_doctor_eval_cuda(NULL, nvcc124, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
    kl_doctor_eval_cuda("550.54.14", NULL, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
    KT_CONTAINS(c.observed, "CUDA <= 12.4");
    kl_doctor_eval_cuda("590.48.01", nvcc140, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
    KT_CONTAINS(c.observed, "not in keel's table");
    kl_doctor_eval_cuda("550.54.14", "garbage", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
}

KL_TEST(doctor_nvsmi) {
    kl_doctor_gpu g[4];
    int n;
    KT_OK(kl_doctor_parse_nvsmi("NVIDIA H100 80GB HBM3, 81559 MiB, 0 MiB\n"
                                "NVIDIA H100 80GB HBM3, 81559 MiB, 70000 MiB\n", g, 4, &n), NULL);
    KT_EQ_INT(n, 2);
    KT_EQ_STR(g[0].name, "NVIDIA H100 80GB HBM3");
    KT_EQ_INT(g[0].mem_total, 81559ull << 20);
    KT_EQ_INT(g[1].mem_used, 70000ull << 20);
    KT_EQ_INT(kl_doctor_parse_nvsmi("No devices were found\n", g, 4, &n), KL_EPARSE);

    kl_doctor_check c;
    kl_doctor_eval_gpu_memory(1, 0, "NVIDIA H200, 143771 MiB, 0 MiB\n", &c);
    KT_EQ_STR(c.id, "gpu.memory");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "NVIDIA H200");
    kl_doctor_eval_gpu_memory(1, 0, "A, 1000 MiB, 10 MiB\nA, 1000 MiB, 950 MiB\n", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "2 x A");
    KT_CONTAINS(c.observed, "GPU 1 is 95% used");
    kl_doctor_eval_gpu_memory(1, 9, "NVIDIA-SMI has failed because it couldn't communicate with the "
                                    "NVIDIA driver.\n", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "exit 9");
    kl_doctor_eval_gpu_memory(1, -1, "", &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "in time");
    kl_doctor_eval_gpu_memory(0, 0, NULL, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
}

/* ------------------------------------------------------------------
 * report and formats
 * ------------------------------------------------------------------ */

static int make_report(kl_doctor_report **r) {
    kl_err e = {0};
    kl_doctor_check c;
    if (kl_doctor_report_new(r, &e)) return -1;
    kl_doctor_eval_text("kernel.swappiness", "60", &c, &e);
    kl_doctor_report_add(*r, &c, &e);
    kl_doctor_eval_text("kernel.thp", "always [madvise] never", &c, &e);
    kl_doctor_report_add(*r, &c, &e);
    kl_doctor_eval_nofile(256, 512, &c); /* fail */
    kl_doctor_report_add(*r, &c, &e);
    kl_doctor_eval_mount(mountinfo, "/home", &c); /* info with a fix */
    kl_doctor_report_add(*r, &c, &e);
    /* quotes and newlines must be escaped in JSON */
    kl_doctor_eval_gpu_memory(1, 3, "line \"one\"\tx\nline two\n", &c);
    return kl_doctor_report_add(*r, &c, &e);
}

KL_TEST(doctor_report_json) {
    kl_doctor_report *r;
    KT_OK(make_report(&r), NULL);
    KT_EQ_INT(kl_doctor_report_count(r), 5);
    KT_CHECK(kl_doctor_report_failed(r));
    KT_CHECK(kl_doctor_report_find(r, "kernel.thp") != NULL);
    KT_CHECK(kl_doctor_report_find(r, "nope") == NULL);
    KT_CHECK(kl_doctor_report_at(r, 5) == NULL);
    int k[KL_DOCTOR_NSTATUS];
    kl_doctor_report_counts(r, k);
    KT_EQ_INT(k[KL_DOCTOR_PASS], 1);
    KT_EQ_INT(k[KL_DOCTOR_WARN], 2);
    KT_EQ_INT(k[KL_DOCTOR_FAIL], 1);
    KT_EQ_INT(k[KL_DOCTOR_INFO], 1);
    kl_buf b;
    kl_buf_init(&b);
    KT_OK(kl_doctor_format_json(r, &b), NULL);
    kl_doctor_report_free(r);
    cJSON *j = cJSON_Parse(b.data);
    kl_buf_free(&b);
    KT_CHECK(j != NULL);
    cJSON *checks = cJSON_GetObjectItem(j, "checks");
    KT_EQ_INT(cJSON_GetArraySize(checks), 5);
    static const char *const fields[] = {"id", "status", "observed", "recommended", "why", "fix"};
    for (int i = 0; i < 5; i++) {
        cJSON *c = cJSON_GetArrayItem(checks, i);
        for (size_t f = 0; f < 6; f++) {
            if (!cJSON_IsString(cJSON_GetObjectItem(c, fields[f]))) {
                cJSON_Delete(j);
                KT_CHECKF(0, "check %d: field %s missing", i, fields[f]);
            }
        }
    }
    cJSON *gm = cJSON_GetArrayItem(checks, 4);
    int ok = strstr(cJSON_GetObjectItem(gm, "observed")->valuestring, "line \"one\"") != NULL;
    cJSON *sum = cJSON_GetObjectItem(j, "summary");
    int fails = cJSON_GetObjectItem(sum, "fail")->valueint;
    int warns = cJSON_GetObjectItem(sum, "warn")->valueint;
    cJSON_Delete(j);
    KT_CHECK(ok);
    KT_EQ_INT(fails, 1);
    KT_EQ_INT(warns, 2);
}

KL_TEST(doctor_report_text_and_script) {
    kl_doctor_report *r;
    KT_OK(make_report(&r), NULL);
    kl_buf t, s, col;
    kl_buf_init(&t);
    kl_buf_init(&s);
    kl_buf_init(&col);
    int rc1 = kl_doctor_format_text(r, 0, &t);
    int rc2 = kl_doctor_format_fix_script(r, &s);
    int rc3 = kl_doctor_format_text(r, 1, &col);
    kl_doctor_report_free(r);
    char *text = kl_buf_take(&t), *script = kl_buf_take(&s), *colored = kl_buf_take(&col);
    int no_ansi = !strchr(text, '\033'), ansi = strstr(colored, "\033[") != NULL;
    /* no line starts with "PASS " or "FAIL " (the test driver counts those) */
    int bad_line = strstr(text, "\nPASS ") || strstr(text, "\nFAIL ") || !strncmp(text, "PASS ", 5);
    /* copy what the checks need, then free before checking */
    char tcopy[16384], scopy[16384];
    snprintf(tcopy, sizeof tcopy, "%s", text);
    snprintf(scopy, sizeof scopy, "%s", script);
    free(text);
    free(script);
    free(colored);
    KT_EQ_INT(rc1, KL_OK);
    KT_EQ_INT(rc2, KL_OK);
    KT_EQ_INT(rc3, KL_OK);
    KT_CHECK(no_ansi);
    KT_CHECK(ansi);
    KT_CHECK(!bad_line);
    KT_CONTAINS(tcopy, "STATUS");
    KT_CONTAINS(tcopy, "kernel.swappiness");
    KT_CONTAINS(tcopy, "Checks that did not pass");
    KT_CONTAINS(tcopy, "why: ");
    KT_CONTAINS(tcopy, "fix: sysctl -w vm.swappiness=10");
    KT_CONTAINS(tcopy, "5 checks: 1 pass, 2 warn, 1 fail, 1 info");
    KT_CHECK(strncmp(scopy, "#!/bin/sh\n", 10) == 0);
    KT_CONTAINS(scopy, "\nsysctl -w vm.swappiness=10\n");
    KT_CONTAINS(scopy, "# ---- limits.nofile: fail");
    KT_CONTAINS(scopy, "\n# why: ");
    KT_CONTAINS(scopy, "\n# mount -o remount,noatime '/'\n"); /* info: commented out */
    KT_CHECK(strstr(scopy, "kernel.thp") == NULL);              /* passed: not in the script */
    /* failures come before warnings */
    KT_CHECK(strstr(scopy, "limits.nofile") < strstr(scopy, "kernel.swappiness"));
    /* the script is valid sh */
    const char *path = kt_path("fix.sh");
    KT_CHECK(write_file(path, scopy) == 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sh -n '%s'", path);
    KT_EQ_INT(system(cmd), 0);
}

KL_TEST(doctor_empty_report) {
    kl_doctor_report *r;
    KT_OK(kl_doctor_report_new(&r, NULL), NULL);
    kl_buf b;
    kl_buf_init(&b);
    KT_OK(kl_doctor_format_json(r, &b), NULL);
    cJSON *j = cJSON_Parse(b.data);
    int ok = j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "checks")) == 0;
    cJSON_Delete(j);
    kl_buf_reset(&b);
    KT_OK(kl_doctor_format_fix_script(r, &b), NULL);
    int nothing = strstr(b.data, "Nothing to fix") != NULL;
    kl_buf_free(&b);
    KT_CHECK(!kl_doctor_report_failed(r));
    kl_doctor_report_free(r);
    kl_doctor_report_free(NULL);
    KT_CHECK(ok);
    KT_CHECK(nothing);
}

/* ------------------------------------------------------------------
 * kl_doctor_run over a fake tree
 * ------------------------------------------------------------------ */

static int fake_tree(const char *root) {
    char mi[1024];
    snprintf(mi, sizeof mi, "26 1 252:1 / / rw,noatime - ext4 /dev/fake rw\n");
    return put(root, "proc/sys/vm/swappiness", "60\n") | put(root, "proc/sys/vm/overcommit_memory", "2\n") |
           put(root, "sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n") |
           put(root, "proc/sys/net/core/somaxconn", "4096\n") |
           put(root, "proc/sys/net/ipv4/tcp_max_syn_backlog", "8192\n") |
           put(root, "proc/meminfo", meminfo_32g) | put(root, "proc/cpuinfo", cpuinfo_old) |
           put(root, "proc/self/mountinfo", mi) |
           put(root, "proc/self/cgroup", "0::/keel.slice\n") |
           put(root, "sys/fs/cgroup/keel.slice/memory.max", "4294967296\n") |
           put(root, "sys/fs/cgroup/keel.slice/cpu.max", "200000 100000\n") |
           put(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n") |
           put(root, "proc/driver/nvidia/version",
               "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n") |
           put(root, "dev/shm/.keep", "");
}

static kl_doctor_status st(const kl_doctor_report *r, const char *id) {
    const kl_doctor_check *c = kl_doctor_report_find(r, id);
    return c ? c->status : KL_DOCTOR_NSTATUS;
}

KL_TEST(doctor_run_fake_root) {
    char root[1024], data[1100];
    snprintf(root, sizeof root, "%s/root", kt_tmpdir());
    snprintf(data, sizeof data, "%s/data", kt_tmpdir());
    KT_CHECK(fake_tree(root) == 0);
    KT_OK(kl_mkdir_p(data, NULL), NULL);
    kl_doctor_opts o = {0};
    o.root = root;
    o.data_dir = data;
    o.no_exec = 1;
    kl_doctor_report *r = NULL;
    kl_err e = {0};
    KT_OK(kl_doctor_run(&o, &r, &e), &e);
    size_t n = kl_doctor_report_count(r);
    kl_doctor_status s_swap = st(r, "kernel.swappiness"), s_oc = st(r, "kernel.overcommit_memory"),
                     s_thp = st(r, "kernel.thp"), s_som = st(r, "net.somaxconn"),
                     s_syn = st(r, "net.tcp_max_syn_backlog"), s_mem = st(r, "memory.total"),
                     s_simd = st(r, "cpu.simd"), s_gov = st(r, "cpu.governor"), s_drv = st(r, "gpu.driver"),
                     s_dir = st(r, "disk.data_dir"), s_mount = st(r, "disk.mount"),
                     s_cuda = st(r, "gpu.cuda"), s_gm = st(r, "gpu.memory");
    char mem_obs[400], cpu_obs[400];
    const kl_doctor_check *mc = kl_doctor_report_find(r, "memory.total");
    const kl_doctor_check *cc = kl_doctor_report_find(r, "cpu.model");
    snprintf(mem_obs, sizeof mem_obs, "%s", mc ? mc->observed : "");
    snprintf(cpu_obs, sizeof cpu_obs, "%s", cc ? cc->observed : "");
    /* ids are unique */
    int dup = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (!strcmp(kl_doctor_report_at(r, i)->id, kl_doctor_report_at(r, j)->id)) dup = 1;
    int failed = kl_doctor_report_failed(r);
    kl_doctor_report_free(r);
    KT_CHECK(n >= 19);
    KT_CHECK(!dup);
    KT_EQ_INT(s_swap, KL_DOCTOR_WARN);
    KT_EQ_INT(s_oc, KL_DOCTOR_WARN);
    KT_EQ_INT(s_thp, KL_DOCTOR_WARN);
    KT_EQ_INT(s_som, KL_DOCTOR_PASS);
    KT_EQ_INT(s_syn, KL_DOCTOR_PASS);
    KT_EQ_INT(s_mem, KL_DOCTOR_WARN); /* the 4 GiB cgroup limit, not the 32 GiB host */
    KT_CONTAINS(mem_obs, "cgroup limit 4");
    KT_CONTAINS(cpu_obs, "cgroup quota 2 CPUs");
    KT_EQ_INT(s_simd, KL_DOCTOR_WARN);
    KT_EQ_INT(s_gov, KL_DOCTOR_WARN);
    KT_EQ_INT(s_drv, KL_DOCTOR_PASS);
    KT_EQ_INT(s_dir, KL_DOCTOR_PASS);
    KT_EQ_INT(s_mount, KL_DOCTOR_PASS); /* the fake mountinfo says noatime */
    KT_EQ_INT(s_cuda, KL_DOCTOR_INFO);  /* no_exec: no nvcc */
    KT_EQ_INT(s_gm, KL_DOCTOR_INFO);
    (void)failed;

    /* a missing data folder fails, measured at its parent */
    snprintf(data, sizeof data, "%s/data/missing/deeper", kt_tmpdir());
    o.data_dir = data;
    KT_OK(kl_doctor_run(&o, &r, &e), &e);
    const kl_doctor_check *d = kl_doctor_report_find(r, "disk.data_dir");
    const kl_doctor_check *f = kl_doctor_report_find(r, "disk.free");
    int dstat = d ? (int)d->status : -1;
    char dfix[1100], fobs[500];
    snprintf(dfix, sizeof dfix, "%s", d ? d->fix : "");
    snprintf(fobs, sizeof fobs, "%s", f ? f->observed : "");
    failed = kl_doctor_report_failed(r);
    kl_doctor_report_free(r);
    KT_EQ_INT(dstat, KL_DOCTOR_FAIL);
    KT_CHECK(failed);
    KT_CONTAINS(dfix, "mkdir -p ");
    KT_CONTAINS(fobs, "/data)");
}

/* Fake nvcc and nvidia-smi on PATH; a hung nvidia-smi is cut off. */
KL_TEST(doctor_run_fake_programs) {
    char root[1024], bin[1024], p[1200], path_env[2200];
    snprintf(root, sizeof root, "%s/root", kt_tmpdir());
    snprintf(bin, sizeof bin, "%s/bin", kt_tmpdir());
    KT_CHECK(fake_tree(root) == 0);
    KT_CHECK(put(bin, "nvcc", "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                              "echo 'Cuda compilation tools, release 12.4, V12.4.131'\n") == 0);
    KT_CHECK(put(bin, "nvidia-smi", "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559 MiB, 1 MiB'\n") == 0);
    snprintf(p, sizeof p, "%s/nvcc", bin);
    chmod(p, 0755);
    snprintf(p, sizeof p, "%s/nvidia-smi", bin);
    chmod(p, 0755);
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    snprintf(path_env, sizeof path_env, "%s:/usr/bin:/bin", bin);
    setenv("PATH", path_env, 1);

    kl_doctor_opts o = {0};
    o.root = root;
    o.data_dir = kt_tmpdir();
    o.exec_timeout_ms = 300;
    kl_doctor_report *r = NULL;
    kl_err e = {0};
    int rc = kl_doctor_run(&o, &r, &e);
    kl_doctor_status s_cuda = rc ? KL_DOCTOR_NSTATUS : st(r, "gpu.cuda");
    kl_doctor_status s_gm = rc ? KL_DOCTOR_NSTATUS : st(r, "gpu.memory");
    char gm_obs[400] = "";
    if (!rc) snprintf(gm_obs, sizeof gm_obs, "%s", kl_doctor_report_find(r, "gpu.memory")->observed);
    kl_doctor_report_free(r);
    r = NULL;

    /* nvidia-smi that hangs (and a child that keeps the pipe open) */
    put(bin, "nvidia-smi", "#!/bin/sh\nsleep 30 &\nsleep 30\n");
    int64_t t0 = kl_time_mono_ns();
    int rc2 = kl_doctor_run(&o, &r, &e);
    double ms = (double)(kl_time_mono_ns() - t0) / 1e6;
    kl_doctor_status s_hung = rc2 ? KL_DOCTOR_NSTATUS : st(r, "gpu.memory");
    kl_doctor_report_free(r);

    if (saved) {
        setenv("PATH", saved, 1);
        free(saved);
    } else {
        unsetenv("PATH");
    }
    KT_EQ_INT(rc, KL_OK);
    KT_EQ_INT(s_cuda, KL_DOCTOR_PASS); /* driver 550.54.14 runs CUDA 12.4 */
    KT_EQ_INT(s_gm, KL_DOCTOR_PASS);
    KT_CONTAINS(gm_obs, "NVIDIA H100 80GB HBM3");
    KT_EQ_INT(rc2, KL_OK);
    KT_EQ_INT(s_hung, KL_DOCTOR_WARN);
    KT_CHECKF(ms < 2000, "doctor took %.0f ms with a hung nvidia-smi (limit 300 ms)", ms);
}

/* ------------------------------------------------------------------
 * multi-rank training (MPI)
 * ------------------------------------------------------------------ */

KL_TEST(doctor_mpi_present) {
    kl_doctor_check c;
    kl_doctor_eval_mpi("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", &c);
    KT_EQ_STR(c.id, "train.mpi");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "Open MPI) 4.1.4");
    kl_doctor_eval_mpi(NULL, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
    KT_CONTAINS(c.observed, "no mpirun");
    KT_CONTAINS(c.fix, "openmpi-bin");
}

KL_TEST(doctor_ranks_per_core) {
    kl_doctor_check c;
    kl_doctor_eval_ranks(2, 1, 2, &c);
    KT_EQ_STR(c.id, "train.ranks");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "2 ranks on this host x 1 thread = 2 of 2 CPUs");
    kl_doctor_eval_ranks(4, 2, 2, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_WARN);
    KT_CONTAINS(c.observed, "8 of 2 CPUs");
    KT_CONTAINS(c.fix, "--threads");
    kl_doctor_eval_ranks(0, 2, 2, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_INFO);
    KT_CONTAINS(c.observed, "not started by a launcher");
}

KL_TEST(doctor_hostfile_parse) {
    char hosts[4][256];
    int n = 0;
    KT_EQ_INT(kl_doctor_parse_hostfile(
                  "# the cluster\nnode-a slots=2\n\n  node-b slots=2 max_slots=4  # gpu box\nnode-c\n", hosts, 4, &n),
              KL_OK);
    KT_EQ_INT(n, 3);
    KT_EQ_STR(hosts[0], "node-a");
    KT_EQ_STR(hosts[1], "node-b");
    KT_EQ_STR(hosts[2], "node-c");
    KT_EQ_INT(kl_doctor_parse_hostfile("a\nb\nc\nd\ne\n", hosts, 4, &n), KL_OK);
    KT_EQ_INT(n, 4); /* at most max */
    KT_EQ_INT(kl_doctor_parse_hostfile("node-a\nnode-b slots=two\n", hosts, 4, &n), KL_EPARSE);
    KT_EQ_INT(n, 2); /* the line */
}

KL_TEST(doctor_hostfile_eval) {
    kl_doctor_check c;
    const char hosts[3][256] = {"localhost", "node-b", "nowhere.invalid"};
    int ok[3] = {KL_DOCTOR_HOST_LOCAL, KL_DOCTOR_HOST_SSH, KL_DOCTOR_HOST_SSH};
    kl_doctor_eval_hostfile("hosts", hosts, ok, 2, &c);
    KT_EQ_STR(c.id, "train.hostfile");
    KT_EQ_INT(c.status, KL_DOCTOR_PASS);
    KT_CONTAINS(c.observed, "2 hosts");
    int bad[3] = {KL_DOCTOR_HOST_LOCAL, KL_DOCTOR_HOST_NO_SSH, KL_DOCTOR_HOST_UNRESOLVED};
    kl_doctor_eval_hostfile("hosts", hosts, bad, 3, &c);
    KT_EQ_INT(c.status, KL_DOCTOR_FAIL);
    KT_CONTAINS(c.observed, "nowhere.invalid: not resolved");
    KT_CONTAINS(c.observed, "node-b: ssh port closed");
    KT_CONTAINS(c.fix, "ssh");
}
