/* Unit tests of the ingest layer: CSV records (quotes, embedded newlines,
 * CRLF, BOM, ragged rows, limits), dialect sniffing, value parsing of each
 * type and each constraint, schema YAML errors with line:col, HLL. */
#include "../harness.h"

#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>

static int rec(const kl_dialect *d, const char *buf, size_t *pos, kl_csv_rec *r, kl_err *e) {
    return kl_csv_next(d, buf, strlen(buf), pos, r, e);
}

static int field_is(const kl_csv_rec *r, size_t i, const char *s) {
    return i < r->n && r->len[i] == strlen(s) && !memcmp(r->f[i], s, r->len[i]);
}

KL_TEST(ingest_csv_basic_quotes_newlines) {
    kl_dialect d;
    kl_dialect_default(&d);
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_err e = {0};
    const char *buf = "a,\"b,c\",\"say \"\"hi\"\"\"\n\"multi\nline\",,x\n";
    size_t pos = 0;
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 0, "a"));
    KT_CHECK(field_is(&r, 1, "b,c"));
    KT_CHECK(field_is(&r, 2, "say \"hi\""));
    KT_EQ_INT(r.quoted[1], 1);
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 0, "multi\nline"));
    KT_CHECK(field_is(&r, 1, ""));
    KT_EQ_INT(r.quoted[1], 0);
    KT_EQ_INT(r.lines, 2);
    KT_EQ_INT(rec(&d, buf, &pos, &r, &e), KL_CSV_END);
    kl_csv_rec_free(&r);
}

KL_TEST(ingest_csv_crlf_bom_no_final_newline) {
    kl_dialect d;
    kl_dialect_default(&d);
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_err e = {0};
    const char *buf = "\xEF\xBB\xBFid,name\r\n1,\"x\"\r\n2,y";
    size_t pos = 0;
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_CHECK(field_is(&r, 0, "id"));
    KT_CHECK(field_is(&r, 1, "name"));
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_CHECK(field_is(&r, 1, "x"));
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_CHECK(field_is(&r, 0, "2"));
    KT_CHECK(field_is(&r, 1, "y"));
    KT_EQ_INT(rec(&d, buf, &pos, &r, &e), KL_CSV_END);
    kl_csv_rec_free(&r);
}

KL_TEST(ingest_csv_errors_ragged_and_quotes) {
    kl_dialect d;
    kl_dialect_default(&d);
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_err e = {0};
    const char *buf = "1,2,3\n4,5\nab\"c,1\n\"x\"y,2\n7,8,9\n\"open,1\n";
    size_t pos = 0;
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 2); /* ragged: the caller compares with the header */
    KT_EQ_INT(rec(&d, buf, &pos, &r, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "quote inside an unquoted field");
    KT_EQ_INT(rec(&d, buf, &pos, &r, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "after closing quote");
    KT_OK(rec(&d, buf, &pos, &r, &e), &e); /* recovers at the next line */
    KT_CHECK(field_is(&r, 0, "7"));
    KT_EQ_INT(rec(&d, buf, &pos, &r, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "unterminated quoted field");
    kl_csv_rec_free(&r);
}

KL_TEST(ingest_csv_record_limit) {
    kl_dialect d;
    kl_dialect_default(&d);
    d.max_record = 64;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_err e = {0};
    char buf[400];
    memset(buf, 'x', 200);
    strcpy(buf + 200, "\nok,1\n");
    size_t pos = 0;
    KT_EQ_INT(rec(&d, buf, &pos, &r, &e), KL_ERANGE);
    KT_OK(rec(&d, buf, &pos, &r, &e), &e);
    KT_CHECK(field_is(&r, 0, "ok"));
    kl_csv_rec_free(&r);
}

KL_TEST(ingest_sniff_dialect) {
    kl_dialect d;
    kl_err e = {0};
    const char *tsv = "a\tb\tc\r\n1\t2\t3\r\n4\t5\t6\r\n";
    KT_OK(kl_dialect_sniff(tsv, strlen(tsv), &d, &e), &e);
    KT_EQ_INT(d.delim, '\t');
    KT_EQ_INT(d.crlf, 1);
    const char *semi = "\xEF\xBB\xBFx;y\n1;\"a;b\"\n2;c\n";
    KT_OK(kl_dialect_sniff(semi, strlen(semi), &d, &e), &e);
    KT_EQ_INT(d.delim, ';');
    KT_EQ_INT(d.bom, 1);
    KT_EQ_INT(d.crlf, 0);
    const char *js = "{\"a\": 1}\n{\"a\": 2}\n";
    KT_OK(kl_dialect_sniff(js, strlen(js), &d, &e), &e);
    KT_EQ_INT(d.format, KL_FMT_JSONL);
    KT_EQ_INT(kl_dialect_sniff("\n\n", 2, &d, &e), KL_EPARSE);
}

KL_TEST(ingest_parse_numbers) {
    int64_t i;
    double d;
    KT_OK(kl_parse_i64n("-9223372036854775808", 20, &i), NULL);
    KT_CHECK(i == INT64_MIN);
    KT_EQ_INT(kl_parse_i64n("9223372036854775808", 19, &i), KL_ERANGE);
    KT_EQ_INT(kl_parse_i64n("12a", 3, &i), KL_EINVAL);
    KT_EQ_INT(kl_parse_i64n("", 0, &i), KL_EINVAL);
    KT_EQ_INT(kl_parse_i64n("-", 1, &i), KL_EINVAL);
    KT_OK(kl_parse_f64n("12.34", 5, &d), NULL);
    KT_CHECK(d == 12.34);
    KT_OK(kl_parse_f64n("-0.001e3", 8, &d), NULL);
    KT_CHECK(d == -1.0);
    KT_OK(kl_parse_f64n("1.7976931348623157e308", 22, &d), NULL);
    KT_CHECK(d == 1.7976931348623157e308);
    KT_OK(kl_parse_f64n("0.1000000000000000055511151231257827", 36, &d), NULL);
    KT_CHECK(d == 0.1);
    KT_EQ_INT(kl_parse_f64n("1e999", 5, &d), KL_ERANGE);
    KT_EQ_INT(kl_parse_f64n("N/A", 3, &d), KL_EINVAL);
    KT_EQ_INT(kl_parse_f64n("1.5x", 4, &d), KL_EINVAL);
    KT_EQ_INT(kl_parse_f64n("0x10", 4, &d), KL_EINVAL);
    KT_EQ_INT(kl_parse_f64n(" 1", 2, &d), KL_EINVAL);
    KT_EQ_INT(kl_parse_f64n("1e", 2, &d), KL_EINVAL);
    int b;
    KT_OK(kl_parse_booln("TRUE", 4, &b), NULL);
    KT_EQ_INT(b, 1);
    KT_OK(kl_parse_booln("0", 1, &b), NULL);
    KT_EQ_INT(b, 0);
    KT_EQ_INT(kl_parse_booln("2", 1, &b), KL_EINVAL);
}

KL_TEST(ingest_parse_dates_timestamps) {
    int32_t days;
    int64_t us;
    KT_OK(kl_parse_date("1970-01-01", 10, &days), NULL);
    KT_EQ_INT(days, 0);
    KT_OK(kl_parse_date("2023-11-14", 10, &days), NULL);
    KT_EQ_INT(days, 19675);
    KT_EQ_INT(kl_parse_date("2023-02-29", 10, &days), KL_ERANGE);
    KT_OK(kl_parse_date("2024-02-29", 10, &days), NULL);
    KT_EQ_INT(kl_parse_date("2023-1-14", 9, &days), KL_EINVAL);
    KT_OK(kl_parse_timestamp("2023-11-14 12:00:00.5", 21, NULL, &us), NULL);
    KT_EQ_INT(us, (19675LL * 86400 + 12 * 3600) * 1000000 + 500000);
    /* naive time in +02:00 is two hours earlier in UTC */
    int64_t us2;
    kl_tz *p2 = NULL;
    KT_OK(kl_tz_load("+02:00", &p2, NULL), NULL);
    KT_OK(kl_parse_timestamp("2023-11-14T14:00:00.5", 21, p2, &us2), NULL);
    KT_EQ_INT(us2, us);
    KT_OK(kl_parse_timestamp("2023-11-14T13:00:00.500Z", 24, p2, &us2), NULL);
    kl_tz_free(p2);
    KT_EQ_INT(us2, us + 3600000000LL);
    KT_OK(kl_parse_timestamp("2023-11-14T07:00:00.5-05:00", 27, NULL, &us2), NULL);
    KT_EQ_INT(us2, us);
    KT_OK(kl_parse_timestamp("2023-11-14", 10, NULL, &us2), NULL);
    KT_EQ_INT(us2, 19675LL * 86400 * 1000000);
    KT_EQ_INT(kl_parse_timestamp("2023-11-14 25:00", 16, NULL, &us2), KL_ERANGE);
    KT_EQ_INT(kl_parse_timestamp("2023-11-14 12:00junk", 20, NULL, &us2), KL_EINVAL);
    int tz;
    KT_OK(kl_parse_tz("UTC", &tz), NULL);
    KT_EQ_INT(tz, 0);
    KT_OK(kl_parse_tz("+05:30", &tz), NULL);
    KT_EQ_INT(tz, 330);
    KT_OK(kl_parse_tz("UTC-8", &tz), NULL);
    KT_EQ_INT(tz, -480);
    KT_EQ_INT(kl_parse_tz("Mars/Olympus", &tz) != 0, 1);
    int y, m, d;
    kl_civil_from_days(19675, &y, &m, &d);
    KT_EQ_INT(y * 10000 + m * 100 + d, 20231114);
}

KL_TEST(ingest_utf8) {
    size_t n;
    KT_CHECK(kl_utf8_valid("h\xC3\xA9llo w\xE2\x82\xAC\xF0\x9F\x98\x80", 15, &n));
    KT_EQ_INT(n, 9);
    KT_CHECK(!kl_utf8_valid("\xC3", 1, NULL));
    KT_CHECK(!kl_utf8_valid("\xC0\xAF", 2, NULL));       /* overlong */
    KT_CHECK(!kl_utf8_valid("\xED\xA0\x80", 3, NULL));   /* surrogate */
    KT_CHECK(!kl_utf8_valid("abcdefgh\xFF", 9, NULL));
}

static kl_schema *load(const char *yaml, kl_err *e) {
    kl_schema *s = NULL;
    kl_schema_load_str(yaml, strlen(yaml), "s.yaml", &s, e);
    return s;
}

KL_TEST(ingest_value_constraints) {
    kl_err e = {0};
    kl_schema *s = load("columns:\n"
                        "  - {name: a, type: int32, min: 0, max: 100}\n"
                        "  - {name: b, type: float64, min: 0.5}\n"
                        "  - {name: c, type: category, values: [x, y]}\n"
                        "  - {name: d, type: string, max_length: 3}\n"
                        "  - {name: t, type: timestamp, timezone: UTC, min: '2020-01-01'}\n"
                        "  - {name: dd, type: date, max: '2030-12-31'}\n"
                        "  - {name: f, type: float32}\n",
                        &e);
    KT_CHECKF(s, "%s", kl_err_what(&e));
    kl_cell v;
    char msg[256];
    const kl_field *F = s->fields;
    KT_EQ_INT(kl_value_parse(&F[0], "42", 2, &v, msg, sizeof msg), 0);
    KT_EQ_INT(v.i, 42);
    KT_EQ_INT(kl_value_parse(&F[0], "101", 3, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    KT_CONTAINS(msg, "outside [0, 100]");
    KT_EQ_INT(kl_value_parse(&F[0], "3000000000", 10, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    KT_CONTAINS(msg, "overflows int32");
    KT_EQ_INT(kl_value_parse(&F[0], "4.5", 3, &v, msg, sizeof msg), KL_REJ_TYPE + 1);
    KT_EQ_INT(kl_value_parse(&F[1], "N/A", 3, &v, msg, sizeof msg), KL_REJ_TYPE + 1);
    KT_EQ_STR(msg, "'N/A' is not a float64");
    KT_EQ_INT(kl_value_parse(&F[1], "0.25", 4, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    KT_EQ_INT(kl_value_parse(&F[1], "nan", 3, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    KT_EQ_INT(kl_value_parse(&F[2], "y", 1, &v, msg, sizeof msg), 0);
    KT_EQ_INT(kl_value_parse(&F[2], "z", 1, &v, msg, sizeof msg), KL_REJ_ALLOWED + 1);
    KT_EQ_INT(kl_value_parse(&F[3], "h\xC3\xA9h", 4, &v, msg, sizeof msg), 0); /* 3 characters */
    KT_EQ_INT(kl_value_parse(&F[3], "abcd", 4, &v, msg, sizeof msg), KL_REJ_LENGTH + 1);
    KT_EQ_INT(kl_value_parse(&F[3], "a\xFF", 2, &v, msg, sizeof msg), KL_REJ_UTF8 + 1);
    KT_EQ_INT(kl_value_parse(&F[4], "2019-12-31 23:59:59", 19, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    KT_EQ_INT(kl_value_parse(&F[4], "2020-01-01 00:00:00", 19, &v, msg, sizeof msg), 0);
    KT_EQ_INT(kl_value_parse(&F[5], "2031-01-01", 10, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    KT_EQ_INT(kl_value_parse(&F[5], "14/11/2023", 10, &v, msg, sizeof msg), KL_REJ_TYPE + 1);
    KT_EQ_INT(kl_value_parse(&F[6], "1e39", 4, &v, msg, sizeof msg), KL_REJ_RANGE + 1);
    kl_schema_free(s);
}

KL_TEST(ingest_schema_errors_line_col) {
    kl_err e = {0};
    kl_schema *s = load("columns:\n  - name: a\n    type: flaot64\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "s.yaml:3:11");
    KT_CONTAINS(kl_err_what(&e), "did you mean 'float64'");
    kl_err_clear(&e);
    s = load("columns:\n  - {name: t, type: timestamp}\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "explicit timezone");
    kl_err_clear(&e);
    s = load("columns:\n  - {name: a, type: int64, nulable: false}\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "did you mean 'nullable'");
    KT_CONTAINS(kl_err_what(&e), "s.yaml:2:");
    kl_err_clear(&e);
    s = load("columns:\n  - {name: a, type: int64}\n  - {name: a, type: string}\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "duplicate column 'a'");
    kl_err_clear(&e);
    s = load("columns:\n  - {name: a, type: int64, min: ten}\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "expected an integer");
    kl_err_clear(&e);
    /* (a delimiter of several bytes is valid since issue 26; an empty one and one of 8+ bytes are not) */
    s = load("dialect: {delimiter: ''}\ncolumns:\n  - {name: a, type: int64}\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "s.yaml:1:");
    kl_err_clear(&e);
    s = load("dialect: {delimiter: 'abcdefghij'}\ncolumns:\n  - {name: a, type: int64}\n", &e);
    KT_CHECK(!s);
    KT_CONTAINS(kl_err_what(&e), "s.yaml:1:");
    kl_err_clear(&e);
    s = load("dialect: {delimiter: \"\\t\", null: ['', NA]}\ncolumns:\n  - {name: a, type: int64, unique: true}\n", &e);
    KT_CHECKF(s, "%s", kl_err_what(&e));
    KT_EQ_INT(s->dialect.delim, '\t');
    KT_EQ_INT(s->dialect.n_null, 2);
    KT_EQ_STR(s->dialect.null_tokens[1], "NA");
    KT_EQ_INT(s->fields[0].unique, 1);
    KT_CONTAINS(s->text, "\"unique\":true");
    kl_schema_free(s);
}

KL_TEST(ingest_hll_estimate) {
    kl_hll h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 100000; i++) kl_hll_add_hash(&h, kl_hash64(&i, sizeof i));
    double est = kl_hll_estimate(&h);
    KT_CHECKF(fabs(est - 100000) < 5000, "estimate %f", est);
    kl_hll s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 10; i++) kl_hll_add_hash(&s, kl_hash64(&i, sizeof i));
    KT_NEAR(kl_hll_estimate(&s), 10, 1);
}
