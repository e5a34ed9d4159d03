/* keel doctor, private: helpers shared by the files of src/doctor/ (check
 * field setters, whole-file reading of /proc, bounded external programs,
 * shell quoting). Included only inside src/doctor/. */
#ifndef KEEL_DOCTOR_INT_H
#define KEEL_DOCTOR_INT_H

#include <keel/doctor.h>

/* Clears c and sets its id; status starts as info. */
void kl__doctor_init(kl_doctor_check *c, const char *id);
/* printf into one field of c (truncated to the field). */
void kl__doctor_observed(kl_doctor_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl__doctor_recommended(kl_doctor_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl__doctor_why(kl_doctor_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl__doctor_fix(kl_doctor_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* memory.total with the cgroup memory limit (0 = none) and cpu.model with
 * the CPUs in this process's affinity mask and the cgroup CPU quota (0 =
 * unknown / none): containers see the host's totals in /proc. */
void kl__doctor_eval_memory(const char *meminfo, uint64_t cg_limit, kl_doctor_check *c);
void kl__doctor_eval_cpu_model(const char *cpuinfo, int usable, double quota, kl_doctor_check *c);

/* Looks name up in $PATH; 1 and the full path in out when found. */
int kl__doctor_which(const char *name, char *out, size_t n);

/* Runs argv[0] (a full path) with stdin from /dev/null and stdout+stderr
 * captured, killing its process group after timeout_ms. *status: the exit
 * status, 128+signal when killed by a signal, -1 when it timed out. *out:
 * NUL-terminated output (free() it), at most 64 KiB. Returns 0 or -errno
 * when it could not be started. */
int kl__doctor_exec(char *const argv[], int timeout_ms, char **out, int *status);

/* s as one single-quoted shell word ('it'\''s'), truncated to n. */
void kl__doctor_shell_quote(const char *s, char *out, size_t n);

#endif
