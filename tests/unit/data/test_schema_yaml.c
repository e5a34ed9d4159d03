/* Unit tests: the YAML that kl_schema_to_yaml writes (keel schema infer)
 * always loads back with keel's own schema loader, whatever the column
 * names and values hold: invalid UTF-8, quotes, colons, leading dashes,
 * '#', newlines, control characters, DEL and C1 characters. */
#include "../harness.h"

#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>

KL_TEST(schema_infer_yaml_round_trip_garbage) {
    /* header: invalid UTF-8, a quote, a colon, a leading dash, '#', a quoted newline, tab, DEL, C1 (U+0085, U+009F) */
    static const char *names[] = {"ok", "a\"b", "k: v", "- dash", "# hash", "two\nlines", "t\tab", "del\x7f", "c1\xc2\x85\xc2\x9f",
                                  "[x]", "&y *z !w", "'q'", "back\\slash", "\xef\xbf\xbe"};
    kl_buf csv;
    kl_buf_init(&csv);
    kl_buf_puts(&csv, "bad\xff\xfe,");
    for (size_t i = 0; i < KL_ARRAY_LEN(names); i++) {
        kl_buf_puts(&csv, "\"");
        for (const char *p = names[i]; *p; p++) kl_buf_append(&csv, p, 1), *p == '"' ? kl_buf_append(&csv, "\"", 1) : 0;
        kl_buf_puts(&csv, i + 1 < KL_ARRAY_LEN(names) ? "\"," : "\"\n");
    }
    for (int r = 0; r < 40; r++) { /* a category column of garbage values: written as its values list */
        kl_buf_printf(&csv, "%s,", r % 2 ? "v\xc3\x28" : "w\x80");
        for (size_t i = 0; i < KL_ARRAY_LEN(names); i++) kl_buf_printf(&csv, "%s%s", r % 2 ? "x\xff" : "y", i + 1 < KL_ARRAY_LEN(names) ? "," : "\n");
    }
    kl_schema *s = NULL;
    kl_err e = {0};
    KT_OK(kl_schema_infer(csv.data, csv.len, "g\xffrbage.csv", 1000, 0, &s, &e), &e);
    kl_buf_free(&csv);
    KT_EQ_INT(s->n_fields, KL_ARRAY_LEN(names) + 1);
    KT_CHECK(s->fields[0].n_allowed == 2);
    kl_buf y;
    kl_buf_init(&y);
    KT_OK(kl_schema_to_yaml(s, &y), &e);
    kl_schema *back = NULL;
    int rc = kl_schema_load_str(y.data, y.len, "inferred.yaml", &back, &e);
    KT_CHECKF(rc == 0, "written schema does not load: %s\n%s", kl_err_what(&e), y.data);
    KT_EQ_INT(back->n_fields, s->n_fields);
    for (size_t i = 0; i < KL_ARRAY_LEN(names); i++) /* valid UTF-8 names come back exactly */
        if (i != 7 && i + 1 != KL_ARRAY_LEN(names)) KT_EQ_STR(back->fields[i + 1].name, names[i]);
    KT_EQ_STR(back->fields[8].name, "del\x7f");
    KT_EQ_INT(back->fields[0].n_allowed, 2);
    KT_EQ_INT(back->fields[0].type, s->fields[0].type);
    kl_schema_free(back);
    kl_schema_free(s);
    kl_buf_free(&y);
}

/* A schema key that nothing reads is refused with its line: a column giving
 * both allowed and values (its old spelling) kept only one of them. */
KL_TEST(schema_file_key_without_effect_is_refused) {
    kl_err e = {0};
    kl_schema *s = NULL;
    const char *p = kt_path("both.yaml");
    FILE *f = fopen(p, "w");
    KT_CHECK(f != NULL);
    fputs("description: two spellings\ncolumns:\n  - {name: c, type: string, allowed: [a, b],\n     values: [c]}\n", f);
    fclose(f);
    KT_EQ_INT(kl_schema_load_file(p, &s, &e), KL_EINVAL);
    KT_CHECK(s == NULL);
    KT_CONTAINS(kl_err_what(&e), "'values'");
    KT_CONTAINS(kl_err_what(&e), "both.yaml:4:");
    f = fopen(p, "w");
    fputs("description: one\ncolumns:\n  - {name: c, type: string, allowed: [a, b], description: the code}\n", f);
    fclose(f);
    KT_OK(kl_schema_load_file(p, &s, &e), &e);
    kl_schema_free(s);
}
