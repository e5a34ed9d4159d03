/* libFuzzer target of the ingest parsers: CSV records (with and without
 * quotes), dialect/type sniffing (schema infer, JSONL included) and every
 * value parser. Run by `make fuzz` (tools/fuzz.sh) or `make fuzz-ingest`. */
#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    kl_dialect d;
    kl_dialect_default(&d);
    d.max_record = 4096;
    if (size && data[0] & 1) d.delim = ';';
    if (size && data[0] & 2) d.quote = 0;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    size_t pos = 0, steps = 0;
    kl_err e = {0};
    for (;;) {
        size_t before = pos;
        int rc = kl_csv_next(&d, buf, size, &pos, &r, &e);
        if (rc == KL_CSV_END) break;
        if (pos <= before && before != 0) __builtin_trap(); /* must make progress */
        if (++steps > size + 2) __builtin_trap();
        for (size_t i = 0; rc == KL_OK && i < r.n; i++) {
            if (r.len[i] > size) __builtin_trap();
            volatile char c = r.len[i] ? r.f[i][r.len[i] - 1] : 0;
            (void)c;
        }
    }
    kl_csv_rec_free(&r);
    kl_schema *s = NULL;
    if (kl_schema_infer(buf, size, "fuzz", 200, &s, &e) == KL_OK) {
        kl_buf b;
        kl_buf_init(&b);
        kl_schema_to_yaml(s, &b);
        kl_buf_free(&b);
        kl_schema_free(s);
    }
    kl_field f;
    memset(&f, 0, sizeof f);
    f.max_null_ratio = 1;
    size_t n = size > 64 ? 64 : size;
    for (int t = 0; t < KL_T_COUNT; t++) {
        f.type = (kl_type)t;
        kl_value v;
        char msg[128];
        kl_value_parse(&f, buf, n, &v, msg, sizeof msg);
    }
    return 0;
}
