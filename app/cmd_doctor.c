/* keel doctor: is this machine ready for AI work? Runs the read-only checks
 * of src/doctor/ and prints a table, JSON or a fix script for review.
 * Exit status 1 only when a check fails. */
#include "app.h"

#include <keel/doctor.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const app_opt opts[] = {
    {"json", 0, 0, NULL, "machine-readable output", 0},
    {"fix-script", 0, 0, NULL, "print a shell script of the fixes for review (never run)", 0},
    {"data-dir", 0, 1, "DIR", "data folder to check (default: the current folder)", 0},
    {"hostfile", 0, 1, "FILE", "also check every host of an MPI hostfile (resolves; local, or ssh answers)", 0},
};

static const char details[] = "Checks kernel settings (swappiness, overcommit, transparent huge pages,\n"
                              "listen backlogs), the open-files limit, /dev/shm, memory and swap, the data\n"
                              "folder (exists, writable, free space, mount options), the CPU (model, AVX2/\n"
                              "FMA/F16C/AVX-512F, frequency governor), multi-rank training (mpirun, ranks x\n"
                              "threads per host under a launcher, the hosts of --hostfile), clock\n"
                              "synchronisation and the NVIDIA driver, CUDA toolkit and GPU memory. Nothing\n"
                              "is changed.\n"
                              "\n"
                              "Each check is pass, warn, fail or info. Exit status: 0 when no check fails\n"
                              "(warnings included), 1 when one fails (e.g. a missing or unwritable data\n"
                              "folder, under 1 GiB free, a full /dev/shm), 2 for a usage error.\n"
                              "\n"
                              "KEEL_DOCTOR_ROOT=DIR reads /proc, /sys and /dev/shm under DIR (for tests).\n"
                              "See docs/doctor.md for every check and the driver/CUDA table.";

static const app_cmd_spec spec = {"doctor",
                                  "keel doctor [--json | --fix-script] [--data-dir DIR] [--hostfile FILE]",
                                  "Check whether this machine is ready for AI work.",
                                  details,
                                  opts,
                                  KL_ARRAY_LEN(opts),
                                  0,
                                  0};

static int use_color(void) {
    const char *nc = getenv("NO_COLOR");
    const char *term = getenv("TERM");
    if (nc && *nc) return 0;
    if (term && strcmp(term, "dumb") == 0) return 0;
    return isatty(STDOUT_FILENO);
}

int cmd_doctor(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int json = app_flag(&a, "json"), script = app_flag(&a, "fix-script");
    if (json && script) return app_usage_error(&spec, "--json and --fix-script cannot be combined");
    const char *dir = app_get(&a, "data-dir");
    if (dir && !*dir) return app_usage_error(&spec, "--data-dir needs a folder");

    kl_err e = {0};
    kl_doctor_opts o = {0};
    o.data_dir = dir;
    o.hostfile = app_get(&a, "hostfile");
    kl_doctor_report *r = NULL;
    if ((rc = kl_doctor_run(&o, &r, &e)) != KL_OK) return app_fail(&e);

    kl_buf b;
    kl_buf_init(&b);
    if (json) rc = kl_doctor_format_json(r, &b);
    else if (script) rc = kl_doctor_format_fix_script(r, &b);
    else rc = kl_doctor_format_text(r, use_color(), &b);
    int failed = kl_doctor_report_failed(r);
    kl_doctor_report_free(r);
    if (rc != KL_OK) {
        kl_buf_free(&b);
        kl_err_set(&e, rc, "doctor: out of memory while formatting the report");
        return app_fail(&e);
    }
    fwrite(b.data, 1, b.len, stdout);
    kl_buf_free(&b);
    if (fflush(stdout) != 0) return APP_EXIT_FAIL;
    return failed ? APP_EXIT_FAIL : APP_EXIT_OK;
}
