/* libFuzzer target: YAML/JSON spec documents (kl_doc_load_str) and the
 * typed getters and config loading run over whatever tree comes out. */
#include <keel/core.h>

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

static void walk(const kl_node *n, kl_config *c, int depth) {
    if (!n || depth > 64) return;
    int64_t i;
    double d;
    int b;
    kl_err e = {0};
    kl_node_int(n, &i, &e);
    kl_node_double(n, &d, &e);
    kl_node_bool(n, &b, &e);
    kl_err_what(&e);
    for (size_t k = 0; k < kl_node_len(n); k++) walk(kl_node_at(n, k), c, depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_doc *d = NULL;
    kl_err e = {0};
    if (kl_doc_load_str((const char *)data, size, "fuzz.yaml", &d, &e) == KL_OK) {
        kl_config *c = kl_config_new();
        kl_config_define_common(c);
        walk(kl_doc_root(d), c, 0);
        kl_config_load_doc(c, d, &e);
        kl_config_free(c);
        kl_doc_free(d);
    } else {
        kl_err_what(&e);
    }
    void *j = NULL;
    if (kl_json_parse((const char *)data, size, "fuzz.json", &j, &e) == KL_OK) cJSON_Delete(j);
    return 0;
}
