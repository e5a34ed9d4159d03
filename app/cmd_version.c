/* keel version: version, git commit, compiler, flags and the versions of
 * the linked libraries. */
#include "app.h"

#include <cjson/cJSON.h>
#include <openssl/crypto.h>
#include <sqlite3.h>
#include <string.h>
#include <yaml.h>
#include <zlib.h>
#include <zstd.h>

#ifndef KEEL_VERSION
#define KEEL_VERSION "unknown"
#define KEEL_GIT_COMMIT "unknown"
#define KEEL_CC "unknown"
#define KEEL_CFLAGS ""
#endif

static const app_opt opts[] = {
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec spec = {"version", "keel version [--json]", "Print keel's version, build and linked library versions.",
                                  NULL, opts, KL_ARRAY_LEN(opts), 0, 0};

int cmd_version(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    char zstdv[32], cjv[32];
    unsigned z = ZSTD_versionNumber();
    snprintf(zstdv, sizeof zstdv, "%u.%u.%u", z / 10000, (z / 100) % 100, z % 100);
    snprintf(cjv, sizeof cjv, "%s", cJSON_Version());
    const char *libs[][2] = {
        {"openssl", OpenSSL_version(OPENSSL_VERSION)},
        {"libyaml", yaml_get_version_string()},
        {"cjson", cjv},
        {"zstd", zstdv},
        {"zlib", zlibVersion()},
        {"sqlite", sqlite3_libversion()},
    };
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"version\":");
        kl_buf_json_str(&b, KEEL_VERSION);
        kl_buf_puts(&b, ",\"commit\":");
        kl_buf_json_str(&b, KEEL_GIT_COMMIT);
        kl_buf_puts(&b, ",\"compiler\":");
        kl_buf_json_str(&b, KEEL_CC);
        kl_buf_puts(&b, ",\"cflags\":");
        kl_buf_json_str(&b, KEEL_CFLAGS);
        kl_buf_puts(&b, ",\"libraries\":{");
        for (size_t i = 0; i < KL_ARRAY_LEN(libs); i++) {
            kl_buf_printf(&b, "%s\"%s\":", i ? "," : "", libs[i][0]);
            kl_buf_json_str(&b, libs[i][1]);
        }
        kl_buf_puts(&b, "}}\n");
        fputs(b.data, stdout);
        kl_buf_free(&b);
        return APP_EXIT_OK;
    }
    printf("keel %s\ncommit    %s\ncompiler  %s\ncflags    %s\n", KEEL_VERSION, KEEL_GIT_COMMIT, KEEL_CC, KEEL_CFLAGS);
    printf("libraries:\n");
    for (size_t i = 0; i < KL_ARRAY_LEN(libs); i++) printf("  %-8s %s\n", libs[i][0], libs[i][1]);
    return APP_EXIT_OK;
}
