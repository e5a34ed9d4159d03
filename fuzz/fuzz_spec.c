/* libFuzzer target: every spec parser that takes a YAML document, over the
 * same input: the train spec (kl__train_spec_load_str), the feature spec and
 * features.json (kl_features_spec_parse / _load_str), the schema
 * (kl_schema_load_str), a served model's config.yaml (kl__sv_cfg_parse) and a
 * tuning search space (kl_tune_space_parse). fuzz_doc covers the document
 * loader itself; this one covers what the parsers do with its tree. Seeds:
 * the specs of examples/ (fuzz/corpus/fuzz_spec/). */
#include <keel/core.h>
#include <keel/feature.h>
#include <keel/tune.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"
#include "train/train_int.h"

/* From keel/data.h, which cannot be included next to keel/graph.h (both
 * name a kl_value). */
typedef struct kl_schema kl_schema;
int kl_schema_load_str(const char *text, size_t len, const char *name, kl_schema **out, kl_err *e);
void kl_schema_free(kl_schema *s);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1); /* the train spec parser takes a C string */
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    kl_err e = {0};
    tr_spec *ts = NULL;
    if (kl__train_spec_load_str(text, "fuzz.yaml", &ts, &e) == KL_OK) kl__train_spec_free(ts);
    kl_err_what(&e);
    kl_features *f = NULL;
    if (kl_features_spec_parse(text, size, "features.yaml", &f, &e) == KL_OK) kl_features_free(f);
    f = NULL;
    if (kl_features_load_str(text, size, "features.json", &f, &e) == KL_OK) kl_features_free(f);
    kl_schema *sc = NULL;
    if (kl_schema_load_str(text, size, "schema.yaml", &sc, &e) == KL_OK) kl_schema_free(sc);
    sv_model_cfg cfg;
    kl__sv_cfg_parse(text, size, "config.yaml", &cfg, &e);
    kl_doc *d = NULL;
    if (kl_doc_load_str(text, size, "space.yaml", &d, &e) == KL_OK) {
        kl_tune_space *sp = NULL;
        if (kl_tune_space_parse(kl_doc_root(d), &sp, &e) == KL_OK) kl_tune_space_free(sp);
        kl_doc_free(d);
    }
    kl_err_what(&e);
    free(text);
    return 0;
}
