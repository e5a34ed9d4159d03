/* Configuration precedence: defaults < spec file < KEEL_* environment <
 * command-line flags. Every value keeps its source and origin so
 * `keel config show` can say where each effective value came from. */
#include "core_int.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *key, *value, *origin, *env, *flag, *help;
    kl_cfg_type type;
    kl_cfg_source src;
    int declared;
} entry;

struct kl_config {
    entry *v;
    size_t n, cap;
};

static const char *src_names[] = {"default", "file", "env", "flag"};

kl_config *kl_config_new(void) { return calloc(1, sizeof(kl_config)); }

void kl_config_free(kl_config *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        entry *x = &c->v[i];
        free(x->key); free(x->value); free(x->origin); free(x->env); free(x->flag); free(x->help);
    }
    free(c->v);
    free(c);
}

static entry *find(const kl_config *c, const char *key) {
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].key, key)) return &c->v[i];
    return NULL;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void env_name(const char *key, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "KEEL_");
    for (const char *p = key; *p && k + 1 < n; p++)
        out[k++] = (*p == '.' || *p == '-') ? '_' : (char)toupper((unsigned char)*p);
    out[k] = 0;
}

static entry *add(kl_config *c, const char *key) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        entry *v = realloc(c->v, cap * sizeof *v);
        if (!v) return NULL;
        c->v = v;
        c->cap = cap;
    }
    entry *x = &c->v[c->n];
    memset(x, 0, sizeof *x);
    x->key = strdup(key);
    if (!x->key) return NULL;
    char env[256];
    env_name(key, env, sizeof env);
    x->env = strdup(env);
    c->n++;
    return x;
}

static int check_type(const entry *x, const char *value, const char *origin, kl_err *e) {
    int64_t i;
    double d;
    int b;
    uint64_t s;
    const char *what = NULL;
    switch (x->type) {
    case KL_CFG_STR: return KL_OK;
    case KL_CFG_INT: if (kl_parse_int64(value, &i)) what = "an integer"; break;
    case KL_CFG_DOUBLE: if (kl_parse_double(value, &d)) what = "a number"; break;
    case KL_CFG_BOOL: if (kl_parse_bool(value, &b)) what = "true or false"; break;
    case KL_CFG_SIZE: if (kl_mem_parse_size(value, &s, NULL)) what = "a size (like 512M, 2G, 70%)"; break;
    }
    if (!what) return KL_OK;
    return kl_err_set(e, KL_EINVAL, "%s: %s: expected %s, got \"%s\"", origin, x->key, what, value);
}

/* A value replaces the current one only from a source of equal or higher
 * precedence, so the order in which sources are loaded does not matter. */
static int assign(entry *x, const char *value, kl_cfg_source src, const char *origin) {
    if (x->value && src < x->src) return KL_OK;
    char *v = strdup(value), *o = strdup(origin);
    if (!v || !o) { free(v); free(o); return KL_ENOMEM; }
    free(x->value); free(x->origin);
    x->value = v;
    x->origin = o;
    x->src = src;
    return KL_OK;
}

int kl_config_define(kl_config *c, const char *key, kl_cfg_type type, const char *def, const char *env,
                     const char *flag, const char *help) {
    entry *x = find(c, key);
    if (!x && !(x = add(c, key))) return KL_ENOMEM;
    x->type = type;
    x->declared = 1;
    if (env) { free(x->env); x->env = strdup(env); }
    free(x->flag); x->flag = dup_or_null(flag);
    free(x->help); x->help = dup_or_null(help);
    if (def && !x->value) return assign(x, def, KL_SRC_DEFAULT, "default");
    return KL_OK;
}

int kl_config_define_common(kl_config *c) {
    char threads[16];
    snprintf(threads, sizeof threads, "%d", kl_cpu_count());
    int rc = 0;
    rc |= kl_config_define(c, "threads", KL_CFG_INT, threads, "KEEL_THREADS", "--threads", "worker threads for kernels and loaders");
    rc |= kl_config_define(c, "log.level", KL_CFG_STR, "info", "KEEL_LOG_LEVEL", "--log-level", "trace, debug, info, warn, error, off");
    rc |= kl_config_define(c, "log.format", KL_CFG_STR, "auto", "KEEL_LOG_FORMAT", "--log-format", "auto (text on a terminal, JSON lines otherwise), text, json");
    rc |= kl_config_define(c, "tracking", KL_CFG_STR, "", "KEEL_TRACKING", "--tracking",
                           "experiment store folder (unset: the nearest keel-runs/ here or above, else the per-user "
                           "default; keel runs where), or a PostgreSQL URL postgresql://user@host:port/db");
    rc |= kl_config_define(c, "artifacts", KL_CFG_STR, "", "KEEL_ARTIFACTS", "--artifacts",
                           "object folder of a PostgreSQL store (artifacts, model files; a shared path)");
    rc |= kl_config_define(c, "memory.limit", KL_CFG_SIZE, "0", "KEEL_MEMORY_LIMIT", "--memory-limit", "memory budget (512M, 2G, 70%; 0 = none)");
    rc |= kl_config_define(c, "memory.snapshot", KL_CFG_STR, "", "KEEL_MEMORY_SNAPSHOT", "--memory-snapshot", "where a memory snapshot is written when the budget refuses an allocation");
    return rc ? KL_ENOMEM : KL_OK;
}

static int load_node(kl_config *c, const kl_node *n, kl_err *e) {
    kl_node_kind k = kl_node_kind_of(n);
    if (k == KL_NODE_MAP || k == KL_NODE_SEQ) {
        for (size_t i = 0; i < kl_node_len(n); i++) {
            int rc = load_node(c, kl_node_at(n, i), e);
            if (rc) return rc;
        }
        return KL_OK;
    }
    const char *key = kl_node_path(n);
    if (!*key) return KL_OK;
    const char *val = kl_node_scalar(n);
    entry *x = find(c, key);
    if (!x && !(x = add(c, key))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (x->declared && x->type != KL_CFG_STR) {
        kl_err tmp = {0};
        if (check_type(x, val ? val : "", "", &tmp))
            return kl_node_error(n, e, KL_EINVAL, "expected %s, got \"%s\"",
                                 x->type == KL_CFG_INT ? "an integer" : x->type == KL_CFG_BOOL ? "true or false"
                                 : x->type == KL_CFG_SIZE ? "a size" : "a number", val ? val : "");
    }
    char origin[512];
    snprintf(origin, sizeof origin, "%s:%d:%d", kl_node_file(n), kl_node_line(n), kl_node_col(n));
    if (assign(x, val ? val : "", KL_SRC_FILE, origin)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    return KL_OK;
}

int kl_config_load_doc(kl_config *c, const kl_doc *d, kl_err *e) { return load_node(c, kl_doc_root(d), e); }

int kl_config_load_env(kl_config *c, kl_err *e) {
    for (size_t i = 0; i < c->n; i++) {
        entry *x = &c->v[i];
        const char *v = x->env ? getenv(x->env) : NULL;
        if (!v || !*v) continue;
        char origin[300];
        snprintf(origin, sizeof origin, "env %s", x->env);
        int rc = check_type(x, v, origin, e);
        if (rc) return rc;
        if (assign(x, v, KL_SRC_ENV, origin)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    return KL_OK;
}

int kl_config_set(kl_config *c, const char *key, const char *value, kl_cfg_source src, const char *origin,
                  kl_err *e) {
    entry *x = find(c, key);
    if (!x && !(x = add(c, key))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = check_type(x, value, origin ? origin : src_names[src], e);
    if (rc) return rc;
    if (assign(x, value, src, origin ? origin : src_names[src])) return kl_err_set(e, KL_ENOMEM, "out of memory");
    return KL_OK;
}

int kl_config_set_flag(kl_config *c, const char *flag, const char *value, kl_err *e) {
    for (size_t i = 0; i < c->n; i++) {
        entry *x = &c->v[i];
        if (!x->flag || strcmp(x->flag, flag)) continue;
        char origin[300];
        snprintf(origin, sizeof origin, "flag %s", flag);
        return kl_config_set(c, x->key, value, KL_SRC_FLAG, origin, e);
    }
    return kl_err_set(e, KL_ENOTFOUND, "unknown setting flag %s", flag);
}

const char *kl_config_get(const kl_config *c, const char *key) {
    entry *x = find(c, key);
    return x ? x->value : NULL;
}

const char *kl_config_origin(const kl_config *c, const char *key) {
    entry *x = find(c, key);
    return x && x->origin ? x->origin : "unset";
}

kl_cfg_source kl_config_source(const kl_config *c, const char *key) {
    entry *x = find(c, key);
    return x ? x->src : KL_SRC_DEFAULT;
}

static int get_checked(const kl_config *c, const char *key, const char **v, kl_err *e) {
    *v = kl_config_get(c, key);
    if (!*v) return kl_err_set(e, KL_ENOTFOUND, "setting %s is not set", key);
    return KL_OK;
}

int kl_config_get_int(const kl_config *c, const char *key, int64_t *out, kl_err *e) {
    const char *v;
    int rc = get_checked(c, key, &v, e);
    if (rc) return rc;
    if (kl_parse_int64(v, out))
        return kl_err_set(e, KL_EINVAL, "%s: %s: expected an integer, got \"%s\"", kl_config_origin(c, key), key, v);
    return KL_OK;
}

int kl_config_get_double(const kl_config *c, const char *key, double *out, kl_err *e) {
    const char *v;
    int rc = get_checked(c, key, &v, e);
    if (rc) return rc;
    if (kl_parse_double(v, out))
        return kl_err_set(e, KL_EINVAL, "%s: %s: expected a number, got \"%s\"", kl_config_origin(c, key), key, v);
    return KL_OK;
}

int kl_config_get_bool(const kl_config *c, const char *key, int *out, kl_err *e) {
    const char *v;
    int rc = get_checked(c, key, &v, e);
    if (rc) return rc;
    if (kl_parse_bool(v, out))
        return kl_err_set(e, KL_EINVAL, "%s: %s: expected true or false, got \"%s\"", kl_config_origin(c, key), key, v);
    return KL_OK;
}

int kl_config_get_size(const kl_config *c, const char *key, uint64_t *out, kl_err *e) {
    const char *v;
    int rc = get_checked(c, key, &v, e);
    if (rc) return rc;
    rc = kl_mem_parse_size(v, out, e);
    if (rc) kl_err_prefix(e, "%s: %s", kl_config_origin(c, key), key);
    return rc;
}

void kl_config_print(const kl_config *c, FILE *out, int json) {
    if (json) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"settings\":[");
        for (size_t i = 0; i < c->n; i++) {
            const entry *x = &c->v[i];
            kl_buf_printf(&b, "%s{\"key\":", i ? "," : "");
            kl_buf_json_str(&b, x->key);
            kl_buf_puts(&b, ",\"value\":");
            kl_buf_json_str(&b, x->value ? x->value : "");
            kl_buf_printf(&b, ",\"source\":\"%s\",\"origin\":", src_names[x->src]);
            kl_buf_json_str(&b, x->origin ? x->origin : "");
            kl_buf_puts(&b, ",\"env\":");
            kl_buf_json_str(&b, x->env);
            kl_buf_puts(&b, ",\"flag\":");
            kl_buf_json_str(&b, x->flag);
            kl_buf_puts(&b, "}");
        }
        kl_buf_puts(&b, "]}\n");
        if (b.data) fputs(b.data, out);
        kl_buf_free(&b);
        return;
    }
    int kw = 7, vw = 5;
    for (size_t i = 0; i < c->n; i++) {
        int k = (int)strlen(c->v[i].key), v = c->v[i].value ? (int)strlen(c->v[i].value) : 0;
        if (k > kw) kw = k;
        if (v > vw) vw = v < 40 ? v : 40;
    }
    fprintf(out, "%-*s  %-*s  %s\n", kw, "SETTING", vw, "VALUE", "SOURCE");
    for (size_t i = 0; i < c->n; i++) {
        const entry *x = &c->v[i];
        const char *v = x->value ? x->value : "";
        fprintf(out, "%-*s  %-*s  %s\n", kw, x->key, vw, *v ? v : "\"\"", x->origin ? x->origin : "unset");
    }
}

int kl_config_apply_common(const kl_config *c, kl_err *e) {
    const char *lv = kl_config_get(c, "log.level"), *lf = kl_config_get(c, "log.format");
    kl_log_level l;
    kl_log_format f;
    if (lv) {
        if (kl_log_level_parse(lv, &l))
            return kl_err_set(e, KL_EINVAL, "%s: log.level: '%s' is not one of trace, debug, info, warn, error, off",
                              kl_config_origin(c, "log.level"), lv);
        kl_log_set_level(l);
    }
    if (lf) {
        if (kl_log_format_parse(lf, &f))
            return kl_err_set(e, KL_EINVAL, "%s: log.format: '%s' is not one of auto, text, json",
                              kl_config_origin(c, "log.format"), lf);
        kl_log_set_format(f);
    }
    int64_t t;
    if (kl_config_get(c, "threads")) {
        int rc = kl_config_get_int(c, "threads", &t, e);
        if (rc) return rc;
        if (t < 1 || t > 1024)
            return kl_err_set(e, KL_EINVAL, "%s: threads: %lld is not in 1..1024", kl_config_origin(c, "threads"), (long long)t);
        kl_threads_set((int)t);
    }
    uint64_t lim;
    if (kl_config_get(c, "memory.limit")) {
        int rc = kl_config_get_size(c, "memory.limit", &lim, e);
        if (rc) return rc;
        kl_mem_set_budget(lim);
    }
    const char *snap = kl_config_get(c, "memory.snapshot");
    if (snap && *snap) kl_mem_set_snapshot_path(snap);
    return KL_OK;
}

/* ==================================================================
 * The process's KEEL_* settings, read once
 * ================================================================== */

static kl_settings settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static const char *env_in(char *const *envp, const char *name) {
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=') return *envp + n + 1;
    return NULL;
}

static int env_set(char *const *envp, const char *name) { /* set, non-empty and not "0" */
    const char *v = env_in(envp, name);
    return v && *v && strcmp(v, "0");
}

void kl_settings_parse(kl_settings *s, char *const *envp) {
    const char *v;
    int64_t n;
    double d;
    s->threads =
        (v = env_in(envp, "KEEL_THREADS")) && *v && kl_parse_int64(v, &n) == KL_OK && n > 0 && n <= 1024 ? (int)n : 0;
    s->avx512_allowed = !env_set(envp, "KEEL_NO_AVX512");
    s->nchwc = !env_set(envp, "KEEL_NO_NCHWC");
    s->nchwc_pool_fuse = !((v = env_in(envp, "KEEL_NCHWC_POOL_FUSE")) && !strcmp(v, "0"));
    v = env_in(envp, "KEEL_WINO");
    s->wino_use = v && *v ? *v != '0' : -1;
    s->wino_pack = s->wino_use != 0;
    s->plan_split = (v = env_in(envp, "KEEL_SPLIT")) && *v >= '0' && *v <= '9' ? atoi(v) : 1;
    s->profile = env_set(envp, "KEEL_PROFILE");
    s->fetch_retries = (v = env_in(envp, "KEEL_FETCH_RETRIES")) ? (atoi(v) > 0 ? atoi(v) : -1) : 0;
    s->progress_interval_s =
        (v = env_in(envp, "KEEL_PROGRESS_INTERVAL")) && kl_parse_double(v, &d) == KL_OK && d > 0 ? d : 10.0;
    s->doctor_root = (v = env_in(envp, "KEEL_DOCTOR_ROOT")) && *v ? v : NULL;
    s->feature_store = (v = env_in(envp, "KEEL_FEATURE_STORE")) && *v ? v : NULL;
    s->tmpdir = (v = env_in(envp, "TMPDIR")) && *v ? v : "/tmp";
    s->mpi_launched = env_in(envp, "OMPI_COMM_WORLD_SIZE") || env_in(envp, "PMI_SIZE") || env_in(envp, "PMIX_RANK") ||
        env_in(envp, "SLURM_STEP_NUM_TASKS");
    if (!(v = env_in(envp, "OMPI_COMM_WORLD_LOCAL_SIZE"))) v = env_in(envp, "SLURM_STEP_TASKS_PER_NODE");
    s->mpi_local_ranks = v ? atoi(v) : 0;
}

static void settings_read(void) { kl_settings_parse(&settings, environ); }

const kl_settings *kl_settings_get(void) {
    pthread_once(&settings_once, settings_read);
    return &settings;
}

kl_settings *kl_settings_mut(void) {
    pthread_once(&settings_once, settings_read);
    return &settings;
}

int kl_simd_avx512_allowed(void) { return kl_settings_get()->avx512_allowed; }

void kl_config_store_env(kl_store_env *out) {
    static char pw_home[4096];
    out->tracking = getenv("KEEL_TRACKING");
    out->ceiling = getenv("KEEL_TRACKING_CEILING");
    out->xdg_data_home = getenv("XDG_DATA_HOME");
    out->home = getenv("HOME");
    out->artifacts = getenv("KEEL_ARTIFACTS");
    if (out->home && out->home[0] == '/') return;
    struct passwd pw, *pwp = NULL;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &pwp) == 0 && pwp) { /* the account's home when HOME is unset */
        snprintf(pw_home, sizeof pw_home, "%s", pwp->pw_dir);
        out->home = pw_home;
    }
}
