/* Option parsing shared by every keel command: --name V, --name=V, -x V,
 * switches, repeatable options, positional arguments, --help, and usage
 * errors with a "did you mean" suggestion (exit 2). */
#include "app.h"

#include <cjson/cJSON.h>
#include <keel/data.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int find_opt(const app_cmd_spec *s, const char *name, size_t len) {
    for (size_t i = 0; i < s->nopts; i++)
        if (strlen(s->opts[i].name) == len && !strncmp(s->opts[i].name, name, len)) return (int)i;
    return -1;
}

int app_usage_error(const app_cmd_spec *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "keel %s: ", s->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'keel %s --help'.\n", s->name);
    va_end(ap);
    return APP_EXIT_USAGE;
}

int app_fail(kl_err *e) {
    fprintf(stderr, "keel: error: %s\n", kl_err_what(e));
    return APP_EXIT_FAIL;
}

void app_print_help(const app_cmd_spec *s, FILE *out) {
    fprintf(out, "Usage: %s\n\n%s\n", s->synopsis, s->summary);
    if (s->nopts) {
        fprintf(out, "\nOptions:\n");
        for (size_t i = 0; i < s->nopts; i++) {
            const app_opt *o = &s->opts[i];
            char left[96];
            int n = 0;
            if (o->short_name) n = snprintf(left, sizeof left, "-%c, ", o->short_name);
            snprintf(left + n, sizeof left - (size_t)n, "--%s%s%s", o->name, o->has_arg ? " " : "",
                     o->has_arg ? (o->metavar ? o->metavar : "VALUE") : "");
            fprintf(out, "  %-28s %s%s\n", left, o->help ? o->help : "", o->repeat ? " (repeatable)" : "");
        }
    }
    fprintf(out, "  %-28s %s\n", "-h, --help", "show this help");
    if (s->details) fprintf(out, "\n%s\n", s->details);
}

int app_parse(const app_cmd_spec *s, int argc, char **argv, app_args *a) {
    memset(a, 0, sizeof *a);
    a->opts = s->opts;
    a->nopts = s->nopts;
    KL_ASSERT(s->nopts <= APP_MAX_OPTS);
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (only_pos || arg[0] != '-' || !arg[1]) {
            if (a->npos >= APP_MAX_VALUES) return app_usage_error(s, "too many arguments");
            a->pos[a->npos++] = arg;
            continue;
        }
        if (!strcmp(arg, "--")) { only_pos = 1; continue; }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            app_print_help(s, stdout);
            return APP_EXIT_OK;
        }
        int idx = -1;
        const char *val = NULL;
        if (arg[1] == '-') {
            const char *name = arg + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            idx = find_opt(s, name, len);
            if (idx < 0) {
                const char *cands[APP_MAX_OPTS + 1];
                char word[128];
                snprintf(word, sizeof word, "%.*s", (int)len, name);
                for (size_t k = 0; k < s->nopts; k++) cands[k] = s->opts[k].name;
                cands[s->nopts] = "help";
                const char *sug = kl_suggest(word, cands, s->nopts + 1);
                if (sug) return app_usage_error(s, "unknown option --%s (did you mean --%s?)", word, sug);
                return app_usage_error(s, "unknown option --%s", word);
            }
            if (eq) {
                if (!s->opts[idx].has_arg) return app_usage_error(s, "option --%s takes no value", s->opts[idx].name);
                val = eq + 1;
            }
        } else {
            for (size_t k = 0; k < s->nopts; k++)
                if (s->opts[k].short_name == arg[1]) idx = (int)k;
            if (idx < 0 || arg[2]) return app_usage_error(s, "unknown option %s", arg);
        }
        const app_opt *o = &s->opts[idx];
        if (o->has_arg && !val) {
            if (i + 1 >= argc) return app_usage_error(s, "option --%s needs a value (%s)", o->name, o->metavar ? o->metavar : "VALUE");
            val = argv[++i];
        }
        if (!o->has_arg) val = "1";
        a->value[idx] = val;
        if (o->repeat) {
            if (a->nmulti >= APP_MAX_VALUES) return app_usage_error(s, "option --%s given too many times", o->name);
            a->multi[a->nmulti] = val;
            a->multi_opt[a->nmulti++] = idx;
        }
    }
    if (a->npos < s->min_pos) return app_usage_error(s, "missing argument (usage: %s)", s->synopsis);
    if (s->max_pos >= 0 && a->npos > s->max_pos)
        return app_usage_error(s, "unexpected argument '%s'", a->pos[s->max_pos]);
    return -1;
}

static int opt_index(const app_args *a, const char *name) {
    for (size_t i = 0; i < a->nopts; i++)
        if (!strcmp(a->opts[i].name, name)) return (int)i;
    KL_ASSERT(!"option not declared in the command spec");
    return -1;
}

const char *app_get(const app_args *a, const char *name) { return a->value[opt_index(a, name)]; }
int app_flag(const app_args *a, const char *name) { return a->value[opt_index(a, name)] != NULL; }

int app_get_all(const app_args *a, const char *name, const char **out, int max) {
    int idx = opt_index(a, name), n = 0;
    for (int i = 0; i < a->nmulti && n < max; i++)
        if (a->multi_opt[i] == idx) out[n++] = a->multi[i];
    return n;
}

int app_get_int(const app_args *a, const app_cmd_spec *s, const char *name, int64_t def, int64_t *out) {
    const char *v = app_get(a, name);
    if (!v) { *out = def; return -1; }
    if (kl_parse_int64(v, out)) return app_usage_error(s, "--%s: expected an integer, got '%s'", name, v);
    return -1;
}

int app_get_double(const app_args *a, const app_cmd_spec *s, const char *name, double def, double *out) {
    const char *v = app_get(a, name);
    if (!v) { *out = def; return -1; }
    if (kl_parse_double(v, out)) return app_usage_error(s, "--%s: expected a number, got '%s'", name, v);
    return -1;
}

int app_get_verify(const app_args *a, const app_cmd_spec *s, int *mode) {
    const char *v = app_get(a, "verify");
    kl_verify_mode m = KL_VERIFY_SHA256;
    kl_err e = {0};
    if (v && kl_verify_mode_parse(v, &m, &e)) return app_usage_error(s, "%s", e.msg);
    *mode = (int)m;
    return -1;
}

void app_print_commands(const char *prefix, const app_command *cmds, size_t n, FILE *out) {
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %s%s%-*s %s\n", prefix ? prefix : "", prefix ? " " : "", 12, cmds[i].name, cmds[i].summary);
}

int app_dispatch(const char *prefix, const app_command *cmds, size_t n, int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        FILE *out = argc < 2 ? stderr : stdout;
        fprintf(out, "Usage: keel %s COMMAND [options]\n\nCommands:\n", prefix);
        app_print_commands(NULL, cmds, n, out);
        return argc < 2 ? APP_EXIT_USAGE : APP_EXIT_OK;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    const char *cands[64];
    for (size_t i = 0; i < n && i < 64; i++) cands[i] = cmds[i].name;
    const char *sug = kl_suggest(argv[1], cands, n < 64 ? n : 64);
    if (sug) fprintf(stderr, "keel %s: unknown command '%s' (did you mean '%s'?)\n", prefix, argv[1], sug);
    else fprintf(stderr, "keel %s: unknown command '%s'\n", prefix, argv[1]);
    fprintf(stderr, "Try 'keel %s --help'.\n", prefix);
    return APP_EXIT_USAGE;
}

void app_fmt_time(double us, char *buf, size_t n) {
    if (!(us > 0)) {
        snprintf(buf, n, "-");
        return;
    }
    char r[40];
    kl_time_rfc3339((int64_t)us, r, sizeof r);
    snprintf(buf, n, "%.10s %.8s", r, r + 11);
}

double app_jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

int app_store_resolve(kl_store_loc *loc, kl_err *e) {
    kl_config *c = app_config();
    const char *given = NULL;
    if (c && kl_config_source(c, "tracking") == KL_SRC_FLAG) given = kl_config_get(c, "tracking");
    return kl_track_store_resolve(given, "--tracking", loc, e); /* --artifacts: KEEL_ARTIFACTS (main.c) */
}

int app_store_open(int create, kl_track **t, kl_err *e) {
    kl_store_loc loc;
    *t = NULL;
    int rc = app_store_resolve(&loc, e);
    return rc ? rc : kl_track_open_loc(&loc, create, t, e);
}

int app_store_open_list(kl_track **t, kl_err *e) {
    kl_store_loc loc;
    *t = NULL;
    int rc = app_store_resolve(&loc, e);
    if (rc) return rc;
    if (!loc.exists) {
        fprintf(stderr, "keel: no experiment store at %s (%s): nothing recorded yet\n", loc.dir, loc.how);
        return KL_OK;
    }
    rc = kl_track_open_loc(&loc, 0, t, e);
    if (rc == KL_ENOTFOUND) { /* a server database keel has not written to yet: an empty list */
        fprintf(stderr, "keel: %s\n", kl_err_what(e));
        kl_err_clear(e);
        return KL_OK;
    }
    return rc;
}
