/* Where the experiment store lives: the one resolver every command uses
 * (the caller's folder, else KEEL_TRACKING, else the nearest keel-runs/ in
 * the current folder or a parent, else the per-user default), and the text
 * that says which rule chose it, for every "not found". */
#include "track_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* 1 when dir is one of the colon-separated folders of ceiling. */
static int is_ceiling(const char *dir, const char *ceiling) {
    if (!ceiling) return 0;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    for (const char *p = ceiling; *p;) {
        size_t n = strcspn(p, ":");
        size_t m = n;
        while (m > 1 && p[m - 1] == '/') m--;
        if (m && m == dl && !strncmp(p, dir, dl)) return 1;
        p += n;
        if (*p == ':') p++;
    }
    return 0;
}

/* The nearest DIR/keel-runs folder from cwd upwards, stopping at a ceiling. */
static int find_nearest(const char *cwd, const char *ceiling, char *out, size_t n) {
    char d[4096];
    if (!cwd || cwd[0] != '/' || strlen(cwd) >= sizeof d) return 0;
    snprintf(d, sizeof d, "%s", cwd);
    for (;;) {
        size_t len = strlen(d);
        while (len > 1 && d[len - 1] == '/') d[--len] = 0;
        if (is_ceiling(d, ceiling)) return 0;
        char p[4200];
        snprintf(p, sizeof p, "%s%skeel-runs", d, len == 1 ? "" : "/");
        if (is_dir(p) && strlen(p) < n) {
            snprintf(out, n, "%s", p);
            return 1;
        }
        if (len == 1) return 0;
        char *slash = strrchr(d, '/');
        if (slash == d) d[1] = 0;
        else *slash = 0;
    }
}

static void set_exists(kl_store_loc *o) {
    char p[4200];
    if (kl__is_pg_url(o->dir)) { /* a server: whether keel wrote there is known when it is opened */
        o->exists = 1;
        return;
    }
    snprintf(p, sizeof p, "%s/keel.db", o->dir);
    o->exists = kl_path_exists(p);
}

int kl_track_store_resolve_in(const char *given, const char *how, const char *env_tracking, const char *cwd,
                              const char *ceiling, const char *xdg_data_home, const char *home, kl_store_loc *o,
                              kl_err *e) {
    memset(o, 0, sizeof *o);
    const char *explicit_dir = given && *given ? given : env_tracking && *env_tracking ? env_tracking : NULL;
    if (explicit_dir) {
        if (strlen(explicit_dir) >= sizeof o->dir)
            return kl_err_set(e, KL_EINVAL, "experiment store path too long: %.64s...", explicit_dir);
        snprintf(o->dir, sizeof o->dir, "%s", explicit_dir);
        o->rule = given && *given ? KL_STORE_GIVEN : KL_STORE_ENV;
        snprintf(o->how, sizeof o->how, "%s", o->rule == KL_STORE_ENV ? "KEEL_TRACKING" : how && *how ? how : "given");
        set_exists(o);
        return KL_OK;
    }
    if (find_nearest(cwd, ceiling, o->dir, sizeof o->dir)) {
        o->rule = KL_STORE_NEAREST;
        snprintf(o->how, sizeof o->how, "the nearest keel-runs/ folder from %s", cwd);
        set_exists(o);
        return KL_OK;
    }
    o->rule = KL_STORE_USER;
    if (xdg_data_home && xdg_data_home[0] == '/' && strlen(xdg_data_home) < sizeof o->dir - 16) {
        snprintf(o->dir, sizeof o->dir, "%s/keel/runs", xdg_data_home);
        snprintf(o->how, sizeof o->how,
                 "the per-user default $XDG_DATA_HOME/keel/runs: no keel-runs/ folder in %s or above",
                 cwd ? cwd : "the current folder");
    } else if (home && home[0] == '/' && strlen(home) < sizeof o->dir - 32) {
        snprintf(o->dir, sizeof o->dir, "%s/.local/share/keel/runs", home);
        snprintf(o->how, sizeof o->how,
                 "the per-user default ~/.local/share/keel/runs: no keel-runs/ folder in %s or above",
                 cwd ? cwd : "the current folder");
    } else {
        return kl_err_set(
            e, KL_ENOTFOUND,
            "no experiment store: no keel-runs/ folder in %s or above, and no home folder for the per-user "
            "default (XDG_DATA_HOME and HOME unset); give --tracking DIR or KEEL_TRACKING",
            cwd ? cwd : "the current folder");
    }
    set_exists(o);
    return KL_OK;
}

int kl_track_store_resolve(const char *given, const char *how, kl_store_loc *out, kl_err *e) {
    char cwd[4096];
    kl_store_env env;
    kl_config_store_env(&env);
    int rc = kl_track_store_resolve_in(given, how, env.tracking, getcwd(cwd, sizeof cwd) ? cwd : NULL, env.ceiling,
                                       env.xdg_data_home, env.home, out, e);
    if (!rc && env.artifacts && *env.artifacts) snprintf(out->artifacts, sizeof out->artifacts, "%s", env.artifacts);
    return rc;
}
