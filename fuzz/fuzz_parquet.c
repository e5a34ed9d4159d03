/* libFuzzer target of the Parquet reader: opens the input as a Parquet file
 * (footer, schema, statistics), reads every supported column (nested ones
 * assembled into JSON) in batches, formats their values, and
 * by vector scan (dictionary codes checked against their dictionary), runs a
 * group-by, and tries a predicate. Any crash, leak or sanitizer report is a
 * finding.
 * Build and run: make fuzz-parquet-run FUZZ_SECONDS=600 (see mk/parquet.mk). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keel/parquet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_err e = {0};
    kl_pq_reader *r;
    if (kl_pq_open_mem(data, size, "fuzz", &r, &e) != 0) return 0;
    size_t n = kl_pq_num_selected(r);
    kl_column **cols = calloc(n + 1, sizeof *cols);
    size_t got;
    int guard = 0;
    kl_buf b;
    kl_buf_init(&b);
    while (kl_pq_read_batch(r, 1000, cols, &got, &e) == 0 && got && guard++ < 1000)
        for (size_t j = 0; j < n; j++) /* every value through the JSON/text formatter */
            for (size_t i = 0; i < got && i < 64; i++) {
                kl_pq_format_value(&b, cols[j], i, kl_pq_selected(r, j), (int)(i & 1));
                kl_buf_reset(&b);
            }
    kl_buf_free(&b);
    /* vector scan: codes must index their dictionary */
    kl_pq_rewind(r);
    const kl_pq_vector *v;
    guard = 0;
    while (kl_pq_next_vectors(r, &v, &got, &e) == 0 && got && guard++ < 1000)
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; v[j].codes && i < got; i++)
                if (v[j].codes[i] >= v[j].dict->len) abort();
    kl_pq_rewind(r);
    /* group by the first non-float column, summing the first numeric one */
    const char *key = NULL, *val = NULL;
    for (size_t j = 0; j < n; j++) {
        kl_col_type t = kl_pq_selected(r, j)->type;
        int fl = t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64, str = t == KL_COL_STRING || t == KL_COL_BINARY;
        if (!fl && !key) key = kl_pq_selected(r, j)->name;
        if (!str && !val) val = kl_pq_selected(r, j)->name;
    }
    char *k2 = key ? strdup(key) : NULL, *v2 = val ? strdup(val) : NULL; /* names live in the reader */
    kl_pq_groups g = {0};
    kl_pq_group_by(r, k2, v2, &g, &e);
    kl_pq_groups_clear(&g);
    free(k2);
    free(v2);
    kl_pq_select(r, NULL, 0, &e);  /* back to every column (same n as at open) */
    for (size_t i = 0; i < kl_pq_num_columns(r); i++) {
        kl_pq_col_stats st;
        kl_pq_stats(r, (size_t)-1, i, &st, &e);
    }
    if (n > 0) {
        const kl_pq_column_info *ci = kl_pq_selected(r, 0);
        kl_pq_value v = ci->type == KL_COL_STRING || ci->type == KL_COL_BINARY ? kl_pq_str("m", 1) : kl_pq_int(KL_COL_INT64, 3);
        if (kl_pq_filter(r, ci->name, KL_PQ_GT, &v, 1, &e) == 0) {
            guard = 0;
            while (kl_pq_read_batch(r, 1000, cols, &got, &e) == 0 && got && guard++ < 1000) {}
        }
    }
    for (size_t i = 0; i < n; i++) kl_column_free(cols[i]);
    free(cols);
    kl_pq_close(r);
    return 0;
}
