/* The keel command: the command table, option parsing shared by every
 * subcommand, exit codes. One file per command: app/cmd_<name>.c. */
#ifndef KEEL_APP_H
#define KEEL_APP_H

#include <keel/core.h>
#include <keel/track.h>

enum { APP_EXIT_OK = 0, APP_EXIT_FAIL = 1, APP_EXIT_USAGE = 2 };

/* An option of a command. name is the long name without dashes. */
typedef struct {
    const char *name;
    char short_name;     /* 0 when none */
    int has_arg;         /* 1: takes a value (--name V or --name=V); 0: a switch */
    const char *metavar; /* "DIR" */
    const char *help;
    int repeat;          /* may be given several times (values collected) */
} app_opt;

#define APP_MAX_OPTS 48
#define APP_MAX_VALUES 64
typedef struct {
    const app_opt *opts;
    size_t nopts;
    const char *value[APP_MAX_OPTS]; /* last value (or "1" for a switch); NULL when absent */
    const char *multi[APP_MAX_VALUES]; /* values of repeatable options, in order */
    int multi_opt[APP_MAX_VALUES];     /* option index of each multi value */
    int nmulti;
    const char *pos[APP_MAX_VALUES];   /* positional arguments */
    int npos;
} app_args;

/* What a command says about itself for --help. */
typedef struct {
    const char *name;      /* "doctor", or "runs list" for a subcommand */
    const char *synopsis;  /* "keel doctor [--json] [--data-dir DIR]" */
    const char *summary;   /* one line */
    const char *details;   /* paragraphs after the options; may be NULL */
    const app_opt *opts;
    size_t nopts;
    int min_pos, max_pos;  /* positional argument counts (max -1 = any) */
} app_cmd_spec;

/* Parses argv[1..] (argv[0] is the command name). Returns -1 when parsing
 * succeeded, otherwise the exit code to return at once: 0 after printing
 * --help, 2 after printing a usage error (unknown option with a "did you
 * mean", missing value, wrong number of arguments). */
int app_parse(const app_cmd_spec *spec, int argc, char **argv, app_args *a);
const char *app_get(const app_args *a, const char *name);           /* NULL if absent */
int app_flag(const app_args *a, const char *name);                  /* 1 if given */
/* Values of a repeatable option, in order; returns the count. */
int app_get_all(const app_args *a, const char *name, const char **out, int max);
/* Integer / double option with a default. Returns -1 when fine (like
 * app_parse), or 2 after printing a usage error when malformed. */
int app_get_int(const app_args *a, const app_cmd_spec *spec, const char *name, int64_t def, int64_t *out);
int app_get_double(const app_args *a, const app_cmd_spec *spec, const char *name, double def, double *out);
/* --verify sha256|size|none of the commands that read a dataset (train,
 * eval, features, pipeline): how its files are checked against manifest.json.
 * APP_OPT_VERIFY is the option's table entry. Returns -1 when fine (*mode
 * set, default sha256), or 2 after a usage error. */
#define APP_OPT_VERIFY {"verify", 0, 1, "MODE", "check the dataset's files against its manifest: sha256 (default), size or none", 0}
int app_get_verify(const app_args *a, const app_cmd_spec *spec, int *mode);
void app_print_help(const app_cmd_spec *spec, FILE *out);
/* Prints "keel NAME: message" and "Try 'keel NAME --help'." to stderr; returns 2. */
int app_usage_error(const app_cmd_spec *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "keel: error: <kl_err_what>" to stderr; returns 1. */
int app_fail(kl_err *e);
/* Dispatches to a subcommand from a table ("keel runs list"). */
typedef struct {
    const char *name;
    const char *summary;
    int (*fn)(int argc, char **argv);
} app_command;
int app_dispatch(const char *prefix, const app_command *cmds, size_t n, int argc, char **argv);
void app_print_commands(const char *prefix, const app_command *cmds, size_t n, FILE *out);

/* "2026-11-29 20:51:22" (UTC) from µs since the epoch; "-" when not positive. */
void app_fmt_time(double us, char *buf, size_t n);
/* A number member of a cJSON object, NaN when absent or not a number. */
struct cJSON;
double app_jnum(const struct cJSON *o, const char *key);

/* The process-wide settings (common settings already applied). */
kl_config *app_config(void);

/* The experiment store of every command, found by kl_track_store_resolve:
 * --tracking, else KEEL_TRACKING, else the nearest keel-runs/ in the current
 * folder or a parent, else the per-user default. */
int app_store_resolve(kl_store_loc *loc, kl_err *e);
/* Opens it; create 0 for read-only commands: a missing store is an error
 * naming the folder and the rule that chose it, and nothing is created. */
int app_store_open(int create, kl_track **t, kl_err *e);
/* For list commands: as app_store_open(0, ...), but no store yet is not an
 * error: *t stays NULL (the command prints an empty result) after a note on
 * stderr naming where it looked and why there. */
int app_store_open_list(kl_track **t, kl_err *e);

/* The commands (one file each). */
int cmd_version(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_ingest(int argc, char **argv);
int cmd_schema(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_ui(int argc, char **argv);
int cmd_features(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_pipeline(int argc, char **argv);
int cmd_loader(int argc, char **argv);
int cmd_datagen(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_monitor(int argc, char **argv);
int cmd_monitor_report(int argc, char **argv); /* app/cmd_monitor_report.c */

#endif
