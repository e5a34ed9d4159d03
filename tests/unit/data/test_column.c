/* Unit tests of kl_column and the click-log generator. */
#include <stdlib.h>
#include "../harness.h"
#include "keel/clickgen.h"
#include "keel/column.h"

KL_TEST(parquet_column_push) {
    kl_err e = {0};
    kl_column *c = NULL, *s = NULL;
    KT_OK(kl_column_new("x", KL_COL_INT64, 1, 0, &c, &e), &e);
    for (int i = 0; i < 100; i++) KT_EQ_INT(kl_column_push_i64(c, i), 0);
    KT_CHECK(c->valid == NULL);
    KT_EQ_INT(kl_column_push_null(c), 0);
    KT_CHECK(c->valid != NULL);
    KT_EQ_INT(c->len, 101);
    KT_EQ_INT(kl_column_null_count(c), 1);
    KT_EQ_INT(kl_column_get_i64(c, 99), 99);
    KT_CHECK(kl_column_is_null(c, 100) && !kl_column_is_null(c, 5));
    KT_OK(kl_column_new("s", KL_COL_STRING, 0, 0, &s, &e), &e);
    KT_EQ_INT(kl_column_push_null(s), KL_EINVAL);
    KT_EQ_INT(kl_column_push_str(s, "hello", 5), 0);
    KT_EQ_INT(kl_column_push_str(s, "", 0), 0);
    size_t n;
    const char *p = kl_column_get_str(s, 0, &n);
    KT_CHECK(n == 5 && memcmp(p, "hello", 5) == 0);
    kl_column_get_str(s, 1, &n);
    KT_EQ_INT(n, 0);
    kl_column_clear(c);
    KT_EQ_INT(c->len, 0);
    KT_CHECK(c->valid == NULL);
    kl_column_free(c);
    kl_column_free(s);
    kl_column_free(NULL);
}

KL_TEST(parquet_clickgen_deterministic) {
    kl_err e = {0};
    kl_column *a[5], *b[5];
    KT_OK(kl_clickgen_columns(5000, 42, a, &e), &e);
    KT_OK(kl_clickgen_columns(5000, 42, b, &e), &e);
    size_t nulls = kl_column_null_count(a[1]), clicks = 0;
    for (size_t i = 0; i < 5000; i++) {
        KT_EQ_INT(kl_column_get_i64(a[0], i), kl_column_get_i64(b[0], i));
        clicks += (size_t)kl_column_get_i64(a[4], i);
    }
    KT_CHECK(nulls > 20 && nulls < 100);
    KT_CHECK(clicks > 300 && clicks < 1500);
    for (int j = 0; j < 5; j++) { kl_column_free(a[j]); kl_column_free(b[j]); }
    KT_OK(kl_clickgen_write_csv(kt_path("c.csv"), 1000, 1, &e), &e);
    char *txt; size_t len;
    KT_OK(kl_read_file(kt_path("c.csv"), &txt, &len, &e), &e);
    KT_CHECK(len > 40000 && len < 55000);
    KT_CHECK(strncmp(txt, "user_id,item_price,ts,category,clicked\n", 39) == 0);
    kl_mem_free(txt);
}
