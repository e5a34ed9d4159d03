/* Unit tests of schema inference by majority: one bad value no longer turns
 * a float or timestamp column into a string (it is noted with its line as a
 * future reject), the usual null tokens of typed columns join the dialect's
 * (and are nulls of every column, as ingest reads them), a quoted token stays
 * a value, mixed timestamp offsets are noted, and the note says whether a
 * sample or the whole file was read. */
#include "../harness.h"

#include <stdlib.h>

#include <keel/core.h>
#include <keel/data.h>

static char *make_csv(int rows) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "id,price,ts,cat,tag\n");
    for (int i = 0; i < rows; i++) {
        static const char *const offs[] = {"Z", "-05:00", "+00:00"};
        kl_buf_printf(&b, "%d,", i);
        if (i == 700) kl_buf_puts(&b, "abc,");            /* line 702: the one bad float */
        else if (i % 40 == 0) kl_buf_puts(&b, "NA,");
        else kl_buf_printf(&b, "%d.25,", i % 97);
        kl_buf_printf(&b, "2024-02-%02dT10:00:00%s,", 1 + i % 28, offs[i % 3]);
        kl_buf_puts(&b, i % 10 == 0 ? "NA," : i % 10 == 1 ? "\"NA\"," : i % 2 ? "red," : "blue,");
        kl_buf_puts(&b, i % 5 == 0 ? "none\n" : "tx\n");  /* "none": a word no typed column holds */
    }
    return kl_buf_take(&b);
}

static const kl_field *field(const kl_schema *s, const char *name) {
    int k = kl_schema_find(s, name);
    return k < 0 ? NULL : &s->fields[k];
}

KL_TEST(schema_infer_majority_nulls_offsets) {
    kl_err e = {0};
    char *csv = make_csv(1000);
    kl_schema *s = NULL;
    KT_OK(kl_schema_infer(csv, strlen(csv), "t.csv", SIZE_MAX, 0, &s, &e), &e);
    const kl_field *price = field(s, "price"), *ts = field(s, "ts"), *cat = field(s, "cat"), *tag = field(s, "tag");
    KT_CHECK(price && ts && cat && tag);
    KT_EQ_INT(price->type, KL_T_FLOAT64);                 /* was string: one bad value decided */
    KT_CHECK(price->nullable);
    KT_CONTAINS(price->note, "1 of 975 values are not float64");
    KT_CONTAINS(price->note, "line 702 'abc'");
    KT_CONTAINS(price->note, "'NA' (25 times) is read as a null");
    KT_CHECK(kl_null_token(&s->dialect, "NA", 2));
    KT_CHECK(!kl_null_token(&s->dialect, "none", 4));    /* only a text column holds it: a value */
    KT_EQ_INT(ts->type, KL_T_TIMESTAMP);
    KT_CONTAINS(ts->note, "mixed offsets");
    KT_CONTAINS(ts->note, "at -05:00");
    KT_EQ_INT(cat->type, KL_T_CATEGORY);                  /* NA is a null, "NA" quoted a value */
    KT_CHECK(cat->nullable);
    int has_na = 0;
    for (size_t k = 0; k < cat->n_allowed; k++) has_na |= !strcmp(cat->allowed[k], "NA");
    KT_CHECK(has_na && cat->n_allowed == 3);
    KT_EQ_INT(tag->type, KL_T_CATEGORY);
    KT_CHECK(!tag->nullable);
    KT_CONTAINS(s->note, "all 1000 records");
    /* the YAML carries the notes as comments and loads again */
    kl_buf y;
    kl_buf_init(&y);
    KT_OK(kl_schema_to_yaml(s, &y), &e);
    KT_CONTAINS(y.data, "    # 1 of 975 values are not float64 and will be rejected, e.g. line 702 'abc'\n");
    kl_schema *back = NULL;
    KT_OK(kl_schema_load_str(y.data, y.len, "inferred.yaml", &back, &e), &e);
    KT_EQ_INT(back->n_fields, 5);
    kl_schema_free(back);
    kl_buf_free(&y);
    kl_schema_free(s);
    /* a sample says so */
    KT_OK(kl_schema_infer(csv, strlen(csv), "t.csv", 100, 0, &s, &e), &e);
    KT_CONTAINS(s->note, "inferred from a sample: the first 100 records");
    kl_schema_free(s);
    free(csv);
}

KL_TEST(schema_infer_small_sample_is_strict) {
    /* under 50 values there is no error budget: one bad value makes a string */
    const char *csv = "a\n1.5\n2.5\nx\n3.5\n";
    kl_err e = {0};
    kl_schema *s = NULL;
    KT_OK(kl_schema_infer(csv, strlen(csv), "s.csv", 0, 0, &s, &e), &e);
    KT_EQ_INT(s->fields[0].type, KL_T_STRING);
    kl_schema_free(s);
}
