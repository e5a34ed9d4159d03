/* libFuzzer target: the feature layer's parsers of outside input — feature
 * specs and features.json (kl_features_spec_parse / kl_features_load_str),
 * and raw JSON records through the online path (transform_row and appends to
 * the online store) of a fixed feature set with every record-reading kind. */
#include <keel/feature.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *SPEC =
    "features:\n"
    "  - {name: p, transform: clip, input: price, type: float64, fill: 0, lower: 0, upper: 9}\n"
    "  - {name: l, transform: log1p, input: price, type: float64, fill: 0}\n"
    "  - {name: b, transform: bucketize, input: price, type: float64, fill: 0, edges: [1, 2, 3]}\n"
    "  - {name: h, transform: hash_bucket, input: cat, type: string, buckets: 7, nullable: true}\n"
    "  - {name: u, transform: hash_bucket, input: user, type: int64, buckets: 7}\n"
    "  - {name: d, transform: datepart, input: ts, type: timestamp, part: day_of_year}\n"
    "  - {name: t, transform: time_since, inputs: [{column: ts, type: timestamp}, {column: d0, type: date, fill: 0}]}\n"
    "  - {name: r, transform: ratio, inputs: [{column: price, type: float64, fill: 1}, {column: n, type: int32, fill: 0}]}\n"
    "  - {name: w, transform: window, agg: mean, events: 3, within: 60, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}, value: {column: price, type: float64, fill: 0}}\n"
    "  - {name: c, transform: window, agg: mean_interval, events: 4, entity: {column: cat, type: string}, time: {column: ts, type: timestamp}}\n";

static kl_features *fixed;
static kl_fstore *store;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_err e = {0};
    if (!fixed) {
        if (kl_features_spec_parse(SPEC, strlen(SPEC), "fixed", &fixed, &e) || kl_fstore_open(fixed, NULL, &store, &e)) abort();
    }
    if (size < 1) return 0;
    const char *txt = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        kl_features *f = NULL;
        if (kl_features_spec_parse(txt, n, "fuzz.yaml", &f, &e) == KL_OK) {
            char *c = kl_features_canonical(f);
            free(c);
            kl_features_free(f);
        } else {
            kl_err_what(&e);
        }
        if (kl_features_load_str(txt, n, "fuzz.json", &f, &e) == KL_OK) kl_features_free(f);
    } else {
        float out[64];
        kl_features_counts cnt = {0};
        kl_features_transform_row(fixed, store, txt, n, out, &cnt, &e);
        kl_fstore_append(store, txt, n, &e);
        if (kl_fstore_events(store) > 100000) {   /* keep memory bounded */
            kl_fstore_free(store);
            if (kl_fstore_open(fixed, NULL, &store, &e)) abort();
        }
    }
    return 0;
}
