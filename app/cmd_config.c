/* keel config show [SPEC.yaml]: every effective setting and where it came
 * from (default < spec file < KEEL_* environment < flag). */
#include "app.h"

#include <string.h>



static const app_opt opts[] = {
    {"json", 0, 0, NULL, "machine-readable output", 0},
    {"set", 0, 1, "KEY=VALUE", "override a setting (highest precedence)", 1},
};
static const app_cmd_spec spec = {
    "config show", "keel config show [SPEC.yaml] [--set KEY=VALUE]... [--json]",
    "Print each effective setting with its source.",
    "Precedence: default < spec file < environment (KEEL_<KEY>, dots as underscores,\n"
    "e.g. train.epochs <- KEEL_TRAIN_EPOCHS) < flags (--threads, --set train.epochs=5).",
    opts, KL_ARRAY_LEN(opts), 0, 1};

static int show(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_config *c = app_config();
    kl_err e = {0};
    kl_doc *d = NULL;
    if (a.npos == 1) {
        if (kl_doc_load_file(a.pos[0], &d, &e) || kl_config_load_doc(c, d, &e)) {
            kl_doc_free(d);
            return app_fail(&e);
        }
        /* the environment outranks the file: apply it to the keys the file added */
        if (kl_config_load_env(c, &e)) { kl_doc_free(d); return app_fail(&e); }
    }
    const char *sets[APP_MAX_VALUES];
    int ns = app_get_all(&a, "set", sets, APP_MAX_VALUES);
    for (int i = 0; i < ns; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i]) { kl_doc_free(d); return app_usage_error(&spec, "--set expects KEY=VALUE, got '%s'", sets[i]); }
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        if (kl_config_set(c, key, eq + 1, KL_SRC_FLAG, "flag --set", &e)) { kl_doc_free(d); return app_fail(&e); }
    }
    kl_config_print(c, stdout, app_flag(&a, "json"));
    kl_doc_free(d);
    return APP_EXIT_OK;
}

int cmd_config(int argc, char **argv) {
    static const app_command sub[] = {
        {"show", "print effective settings and their sources", show},
    };
    return app_dispatch("config", sub, KL_ARRAY_LEN(sub), argc, argv);
}
