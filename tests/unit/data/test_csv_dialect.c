/* Unit tests of the CSV dialect options (issue 26): each option of the one
 * CSV reader (multi-byte delimiters, escape characters, quote characters or
 * none, CR-only records, trim, lenient stray quotes), their schema keys and
 * errors, the canonical JSON (unchanged without them), transcoding, the
 * number separators of the value grammar, header-name normalisation, and the
 * sniffer (delimiter, quote, escape, preamble, header rows, line endings,
 * encoding) by consistency scoring. */
#include "../harness.h"
#include "../kt_ingest.h"

#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>
#include <string.h>

static int field_is(const kl_csv_rec *r, size_t i, const char *s) {
    return i < r->n && r->len[i] == strlen(s) && !memcmp(r->f[i], s, r->len[i]);
}

static kl_schema *load(const char *y, kl_err *e) {
    kl_schema *s = NULL;
    kl_schema_load_str(y, strlen(y), "s.yaml", &s, e);
    return s;
}

/* The dialect of a schema with this dialect section and one string column. */
static int dialect_of(const char *dia, kl_dialect *d, kl_err *e) {
    char y[512];
    snprintf(y, sizeof y, "dialect: %s\ncolumns:\n  - {name: a, type: string}\n", dia);
    kl_schema *s = load(y, e);
    if (!s) return e->code ? e->code : KL_EINVAL;
    *d = s->dialect;
    kl_schema_free(s);
    return KL_OK;
}

KL_TEST(csv_dialect_multibyte_delimiter) {
    kl_dialect d;
    kl_err e = {0};
    KT_OK(dialect_of("{delimiter: \", \"}", &d, &e), &e);
    KT_EQ_INT(d.delim_n, 2);
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    const char *buf = "a, b,c, \"x, y\"\n1,2, 3\n";
    size_t pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 0, "a"));
    KT_CHECK(field_is(&r, 1, "b,c")); /* a lone ',' is data */
    KT_CHECK(field_is(&r, 2, "x, y"));
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 2);
    KT_CHECK(field_is(&r, 0, "1,2"));
    KT_CHECK(field_is(&r, 1, "3"));
    KT_OK(dialect_of("{delimiter: \"||\"}", &d, &e), &e);
    buf = "a||b|c||\n";
    pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 1, "b|c"));
    KT_CHECK(field_is(&r, 2, ""));
    kl_csv_rec_free(&r);
}

KL_TEST(csv_dialect_escape_and_quote_chars) {
    kl_dialect d;
    kl_err e = {0};
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    KT_OK(dialect_of("{escape: \"\\\\\"}", &d, &e), &e);
    KT_EQ_INT(d.escape, '\\');
    const char *buf = "\"say \\\"hi\\\"\",\"back\\\\slash\",\"a\\\nb\"\n";
    size_t pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 0, "say \"hi\""));
    KT_CHECK(field_is(&r, 1, "back\\slash"));
    KT_CHECK(field_is(&r, 2, "a\nb"));
    KT_EQ_INT(r.lines, 2);
    KT_EQ_INT(pos, strlen(buf));
    /* apostrophe quotes */
    KT_OK(dialect_of("{quote: \"'\"}", &d, &e), &e);
    buf = "'a,b','it''s',\"x\"\n";
    pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 0, "a,b"));
    KT_CHECK(field_is(&r, 1, "it's"));
    KT_CHECK(field_is(&r, 2, "\"x\"")); /* '"' is data here */
    /* no quoting at all */
    KT_OK(dialect_of("{quote: \"\"}", &d, &e), &e);
    buf = "\"a,b\"\n";
    pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 2);
    KT_CHECK(field_is(&r, 0, "\"a"));
    kl_csv_rec_free(&r);
}

KL_TEST(csv_dialect_cr_records_and_trim) {
    kl_dialect d;
    kl_err e = {0};
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    KT_OK(dialect_of("{line_terminator: cr}", &d, &e), &e);
    KT_EQ_INT(d.eol, '\r');
    const char *buf = "a,b\r\"x\ry\",2\r";
    size_t pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_CHECK(field_is(&r, 1, "b"));
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_CHECK(field_is(&r, 0, "x\ry"));
    KT_EQ_INT(r.lines, 2);
    KT_EQ_INT(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), KL_CSV_END);
    /* auto: CR-only when the first bytes have CRs and no LF */
    kl_dialect_default(&d);
    kl_dialect_resolve_eol(&d, "a\rb\r", 4);
    KT_EQ_INT(d.eol, '\r');
    kl_dialect_resolve_eol(&d, "a\r\nb\r\n", 6);
    KT_EQ_INT(d.eol, '\n');
    KT_OK(dialect_of("{trim: true}", &d, &e), &e);
    buf = "  a  , \"b \" ,c\t\r\n";
    pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 0, "a"));
    KT_CHECK(field_is(&r, 1, "b ")); /* inside quotes blanks stay */
    KT_CHECK(field_is(&r, 2, "c"));
    kl_csv_rec_free(&r);
}

KL_TEST(csv_dialect_lenient_stray_quotes) {
    kl_dialect d;
    kl_dialect_default(&d);
    kl_err e = {0};
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    const char *buf = "a,b\"c,d\n\"x\"y,z\n";
    size_t pos = 0;
    KT_EQ_INT(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), KL_EPARSE); /* strict */
    d.lenient = 1;
    pos = 0;
    kl_err_clear(&e);
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 3);
    KT_CHECK(field_is(&r, 1, "b\"c"));
    KT_EQ_INT(r.repairs, KL_CSV_REPAIR_QUOTE);
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_EQ_INT(r.n, 2);
    KT_CHECK(field_is(&r, 0, "\"x\"y"));
    KT_CHECK(r.repairs != 0);
    kl_csv_rec_free(&r);
}

KL_TEST(csv_dialect_schema_keys_and_canonical) {
    kl_err e = {0};
    kl_schema *s = load("dialect: {delimiter: \";\"}\ncolumns:\n  - {name: a, type: string}\n", &e);
    KT_CHECKF(s, "%s", kl_err_what(&e));
    /* a schema without the new options keeps its canonical text (and so its ingest keys and version ids) */
    KT_EQ_STR(s->text,
              "{\"columns\":[{\"name\":\"a\",\"nullable\":true,\"type\":\"string\"}],\"dialect\":{\"delimiter\":\";\","
              "\"format\":\"csv\",\"header\":true,\"max_record_bytes\":10485760,\"null\":[\"\"],\"quote\":\"\\\"\"},"
              "\"name\":\"\"}");
    kl_schema_free(s);
    s = load(
        "dialect: {delimiter: \"||\", escape: \"\\\\\", header_rows: 2, skip_rows: 3, comment: \"#\", line_terminator: "
        "crlf,\n"
        "  encoding: latin-1, decimal: \",\", thousands: \".\", trim: true}\ncolumns:\n  - {name: a, type: float64}\n",
        &e);
    KT_CHECKF(s, "%s", kl_err_what(&e));
    KT_CONTAINS(
        s->text,
        "\"comment\":\"#\",\"decimal\":\",\",\"delimiter\":\"||\",\"encoding\":\"latin-1\",\"escape\":\"\\\\\"");
    KT_CONTAINS(s->text, "\"header_rows\":2,\"line_terminator\":\"crlf\"");
    KT_CONTAINS(s->text, "\"skip_rows\":3,\"thousands\":\".\",\"trim\":true");
    /* the canonical JSON loads back to the same text */
    kl_schema *back = NULL;
    KT_OK(kl_schema_load_str(s->text, strlen(s->text), "m.json", &back, &e), &e);
    KT_EQ_STR(back->text, s->text);
    /* and the YAML that schema infer writes, too */
    kl_buf y;
    kl_buf_init(&y);
    KT_OK(kl_schema_to_yaml(s, &y), &e);
    kl_schema *yb = NULL;
    KT_OK(kl_schema_load_str(y.data, y.len, "y.yaml", &yb, &e), &e);
    KT_EQ_STR(yb->text, s->text);
    kl_buf_free(&y);
    kl_schema_free(yb);
    kl_schema_free(back);
    kl_schema_free(s);
    /* errors name the key, file:line:col; unknown keys stay errors */
    static const char *const bad[][2] = {
        {"{delimeter: \",\"}", "did you mean 'delimiter'"},
        {"{encoding: ebcdic}", "encoding must be"},
        {"{line_terminator: nl}", "line_terminator must be"},
        {"{decimal: \";\"}", "expected '.' or ','"},
        {"{decimal: \",\", thousands: \",\"}", "must differ"},
        {"{header_rows: 0}", "header_rows must be"},
        {"{skip_rows: -1}", "skip_rows must be"},
        {"{quote: \"|\", delimiter: \"|\"}", "quote character is part of the delimiter"},
        {"{escape: \"ab\"}", "expected one character"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i++) {
        kl_dialect d;
        kl_err_clear(&e);
        KT_CHECKF(dialect_of(bad[i][0], &d, &e) != KL_OK, "%s loaded", bad[i][0]);
        KT_CONTAINS(kl_err_what(&e), bad[i][1]);
        KT_CONTAINS(kl_err_what(&e), "s.yaml:1:");
    }
}

KL_TEST(csv_dialect_number_separators) {
    kl_err e = {0};
    kl_schema *s = load("dialect: {delimiter: \";\", decimal: \",\", thousands: \".\"}\ncolumns:\n"
                        "  - {name: f, type: float64}\n  - {name: i, type: int64}\n",
                        &e);
    KT_CHECKF(s, "%s", kl_err_what(&e));
    kl_cell v;
    int isn;
    char m[128];
    KT_EQ_INT(kl_cell_parse(&s->fields[0], &s->dialect, "1.234,5", 7, 0, &v, &isn, m, sizeof m), 0);
    KT_NEAR(v.d, 1234.5, 1e-9);
    KT_EQ_INT(kl_cell_parse(&s->fields[0], &s->dialect, "-0,25", 5, 0, &v, &isn, m, sizeof m), 0);
    KT_NEAR(v.d, -0.25, 1e-12);
    KT_EQ_INT(kl_cell_parse(&s->fields[1], &s->dialect, "12.345.678", 10, 0, &v, &isn, m, sizeof m), 0);
    KT_EQ_INT(v.i, 12345678);
    /* a '.' that is no group separator, and a fraction in an integer column, stay type errors */
    KT_EQ_INT(kl_cell_parse(&s->fields[0], &s->dialect, "1.5.", 4, 0, &v, &isn, m, sizeof m), KL_REJ_TYPE + 1);
    KT_EQ_INT(kl_cell_parse(&s->fields[1], &s->dialect, "1,5", 3, 0, &v, &isn, m, sizeof m), KL_REJ_TYPE + 1);
    KT_CONTAINS(m, "'1,5' is not an int64");
    /* without the options the grammar is as before */
    KT_EQ_INT(kl_cell_parse(&s->fields[0], NULL, "1,5", 3, 0, &v, &isn, m, sizeof m), KL_REJ_TYPE + 1);
    kl_schema_free(s);
}

KL_TEST(csv_dialect_transcoding) {
    kl_err e = {0};
    char *o;
    size_t n;
    /* UTF-16LE with a BOM: "é,€\n" and an astral character (U+1F600 as a surrogate pair) */
    const char le[] = "\xff\xfe\xe9\x00,\x00\xac\x20\n\x00\x3d\xd8\x00\xde";
    KT_OK(kl_transcode_utf8(KL_ENC_UTF16LE, le, sizeof le - 1, &o, &n, &e), &e);
    KT_EQ_STR(o, "\xc3\xa9,\xe2\x82\xac\n\xf0\x9f\x98\x80");
    kl_mem_free(o);
    const char be[] = "\xfe\xff\x00\x61\x00,\x00\x62";
    KT_OK(kl_transcode_utf8(KL_ENC_UTF16LE, be, sizeof be - 1, &o, &n, &e), &e); /* the BOM decides */
    KT_EQ_STR(o, "a,b");
    kl_mem_free(o);
    KT_EQ_INT(kl_transcode_utf8(KL_ENC_UTF16LE, "\x00\xd8\x41\x00", 4, &o, &n, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "unpaired UTF-16 surrogate");
    KT_OK(kl_transcode_utf8(KL_ENC_LATIN1, "caf\xe9 \x80", 6, &o, &n, &e), &e);
    KT_EQ_STR(o, "caf\xc3\xa9 \xc2\x80");
    kl_mem_free(o);
    KT_OK(kl_transcode_utf8(KL_ENC_CP1252, "\x80\x93x\x94", 4, &o, &n, &e), &e);
    KT_EQ_STR(o, "\xe2\x82\xac\xe2\x80\x9cx\xe2\x80\x9d");
    kl_mem_free(o);
    KT_EQ_INT(kl_encoding_sniff("\xff\xfe" "a\0", 4), KL_ENC_UTF16LE);
    KT_EQ_INT(kl_encoding_sniff("caf\xc3\xa9\n", 6), KL_ENC_UTF8);
    KT_EQ_INT(kl_encoding_sniff("name\ncaf\xe9\nna\xefve\n", 15), KL_ENC_LATIN1);
    KT_EQ_INT(kl_encoding_sniff("name\n\x93quoted\x94\n", 14), KL_ENC_CP1252);
}

KL_TEST(csv_dialect_header_names_normalised) {
    kl_dialect d;
    kl_dialect_default(&d);
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_err e = {0};
    const char *buf = "year,,year,q\n2024,x,,1\n";
    kl_buf *cols = NULL;
    size_t nc = 0, pos = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_OK(kl_csv_header_add(&cols, &nc, &r), &e);
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e); /* a second header row: joined with "_" */
    KT_OK(kl_csv_header_add(&cols, &nc, &r), &e);
    char **names, **orig;
    KT_OK(kl_csv_header_names(cols, nc, &names, &orig), &e);
    KT_EQ_STR(names[0], "year_2024");
    KT_EQ_STR(names[1], "x");
    KT_EQ_STR(names[2], "year");
    KT_EQ_STR(names[3], "q_1");
    for (size_t i = 0; i < nc; i++) { free(names[i]); free(orig[i]); kl_buf_free(&cols[i]); }
    free(names); free(orig); free(cols);
    /* duplicates get the first free suffix, empty names their position */
    buf = "a,a,,a_2,a\n";
    pos = 0;
    cols = NULL;
    nc = 0;
    KT_OK(kl_csv_next(&d, buf, strlen(buf), &pos, &r, &e), &e);
    KT_OK(kl_csv_header_add(&cols, &nc, &r), &e);
    KT_OK(kl_csv_header_names(cols, nc, &names, &orig), &e);
    KT_EQ_STR(names[0], "a");
    KT_EQ_STR(names[1], "a_2");
    KT_EQ_STR(names[2], "column_3");
    KT_EQ_STR(names[3], "a_2_2");
    KT_EQ_STR(names[4], "a_3");
    KT_EQ_STR(orig[2], "");
    for (size_t i = 0; i < nc; i++) { free(names[i]); free(orig[i]); kl_buf_free(&cols[i]); }
    free(names); free(orig); free(cols);
    kl_csv_rec_free(&r);
}

/* Sniffs text t; returns the dialect. */
static kl_dialect sniff(const char *t) {
    kl_dialect d;
    kl_err e = {0};
    kl_dialect_sniff(t, strlen(t), &d, &e);
    return d;
}

KL_TEST(csv_dialect_sniffer) {
    kl_dialect d = sniff("id;name;price\n1;apple;1.5\n2;pear;2.25\n3;fig;3\n");
    KT_EQ_INT(d.delim, ';');
    KT_EQ_INT(d.header, 1);
    /* apostrophe quotes around fields with the delimiter */
    d = sniff("id,name,n\n1,'Smith, J',3\n2,'Doe, A',4\n3,'Roe, B',5\n4,'Poe, E',6\n");
    KT_EQ_INT(d.quote, '\'');
    KT_EQ_INT(d.delim, ',');
    /* backslash escapes */
    d = sniff("a,b\n1,\"say \\\"hi\\\", ok\"\n2,\"x\"\n3,\"\\\"q\\\"\"\n4,\"y, \\\"z\\\"\"\n");
    KT_EQ_INT(d.escape, '\\');
    /* a multi-byte delimiter */
    d = sniff("id, name, qty\n1, apple, 3\n2, pear, 4\n3, fig, 5\n");
    KT_EQ_INT(d.delim_n, 2);
    KT_CHECK(!memcmp(d.delim_s, ", ", 2));
    d = sniff("a||b||c\n1||x|y||2\n3||z||4\n5||w||6\n");
    KT_EQ_INT(d.delim_n, 2);
    /* a preamble and two header rows */
    d = sniff("Quarterly report\nGenerated 2024-01-05 by "
              "finance\n\nregion,sales,sales\n,2023,2024\nnorth,1,2\nsouth,3,4\neast,5,6\nwest,7,8\n");
    KT_EQ_INT(d.skip_rows, 3);
    KT_EQ_INT(d.header, 1);
    KT_EQ_INT(d.header_rows, 2);
    /* decimal commas and '.' digit groups */
    d = sniff("id;price;name\n1;1.234,5;a\n2;0,25;b\n3;-7,0;c\n4;12;d\n");
    KT_EQ_INT(d.decimal, ',');
    KT_EQ_INT(d.thousands, '.');
    d = sniff("id;price\n1;1.5\n2;2.25\n");
    KT_EQ_INT(d.decimal, '.');
    /* a one-column file of sentences is not space-delimited */
    d = sniff("text\nthe cat sat\na dog\nbirds fly south in winter\nno\nyes it is\n");
    KT_EQ_INT(d.delim, ',');
    /* a ragged row near the top is no preamble */
    d = sniff("id,name,v\n1,a,2\n3,b\n4,c,5\n6,d,7\n8,e,9\n");
    KT_EQ_INT(d.skip_rows, 0);
    KT_EQ_INT(d.header, 1);
    /* no header */
    d = sniff("1,2.5,x\n2,3.5,y\n3,4.5,z\n");
    KT_EQ_INT(d.header, 0);
    /* CR-only line endings; CRLF */
    d = sniff("a,b\r1,2\r3,4\r");
    KT_EQ_INT(d.line_term, KL_LT_CR);
    KT_EQ_INT(d.eol, '\r');
    d = sniff("a,b\r\n1,2\r\n");
    KT_EQ_INT(d.crlf, 1);
    KT_EQ_INT(d.line_term, KL_LT_AUTO); /* auto reads CRLF: the schema stays as it was */
    /* UTF-16LE with a BOM */
    const char u16[] = "\xff\xfe" "a\0;\0b\0\n\0" "1\0;\0x\0\n\0" "2\0;\0y\0\n\0";
    kl_err e = {0};
    KT_OK(kl_dialect_sniff(u16, sizeof u16 - 1, &d, &e), &e);
    KT_EQ_INT(d.encoding, KL_ENC_UTF16LE);
    KT_EQ_INT(d.delim, ';');
    /* the evidence names scores and the runner-up */
    kl_buf ev;
    kl_buf_init(&ev);
    const char *t = "a;b\n1;2\n3;4\n";
    KT_OK(kl_dialect_sniff_ex(t, strlen(t), &d, &ev, &e), &e);
    KT_CONTAINS(ev.data, "delimiter ';'");
    KT_CONTAINS(ev.data, "confidence");
    KT_CONTAINS(ev.data, "runner-up");
    kl_buf_free(&ev);
}

/* kl_ingest as a library call with the ingest-level options (so the
 * sanitizer runs of the unit tests cover them): a Windows-1252 file with a
 * preamble, a two-row header with a repeated name, comment lines, CR-only
 * records, decimal commas, ragged and stray-quote rows under recover. */
KL_TEST(csv_dialect_ingest_options) {
    kl_err e = {0};
    char csv[512], schema[512], out[512];
    snprintf(csv, sizeof csv, "%s", kt_path("d.csv"));
    snprintf(schema, sizeof schema, "%s", kt_path("d.yaml"));
    snprintf(out, sizeof out, "%s", kt_path("dds"));
    const char *text = "export \x93sales\x94\r"
                       "v;v;name\r"
                       ";;\r"
                       "# a comment with a \" quote\r"
                       "1,5;2;caf\xe9\r"
                       "3;4\r"
                       "5;6;na\"ive;extra;more\r";
    const char *sch =
        "dialect: {delimiter: \";\", decimal: \",\", skip_rows: 1, header_rows: 2, comment: \"#\",\n"
        "  encoding: windows-1252, line_terminator: cr}\n"
        "columns:\n  - {name: v, type: float64}\n  - {name: v_2, type: int64}\n  - {name: name, type: string}\n";
    KT_OK(kl_write_file_atomic(csv, text, strlen(text), &e), &e);
    KT_OK(kl_write_file_atomic(schema, sch, strlen(sch), &e), &e);
    const char *srcs[] = {csv};
    kl_ingest_opts o;
    kt_ingest_opts(&o, srcs, schema, out);
    kl_ingest_result r;
    /* reject (default): the ragged rows are rejects */
    KT_EQ_INT(kl_ingest(&o, &r, &e), KL_EPARSE);
    KT_EQ_INT(r.rows_rejected, 2);
    KT_CONTAINS(r.summary, "d.csv:6: 2 fields, expected 3");
    kl_err_clear(&e);
    o.on_error = KL_ON_ERROR_RECOVER;
    KT_OK(kl_ingest(&o, &r, &e), &e);
    KT_EQ_INT(r.rows_accepted, 3);
    KT_EQ_INT(r.rows_rejected, 0);
    KT_EQ_INT(r.rows_repaired, 3); /* a short row, a long row, a stray quote */
    char path[1200], *m = NULL, *rej = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/manifest.json", r.version_dir);
    KT_OK(kl_read_file(path, &m, &n, &e), &e);
    KT_CONTAINS(m, "\"header_names\": {\"v_2\": \"v\"}");
    KT_CONTAINS(m, "\"repairs\": {\"ragged\": 2, \"quote\": 1}");
    KT_CONTAINS(m, "\"name\":\"_extra\"");
    snprintf(path, sizeof path, "%s/rejects.jsonl", r.version_dir);
    KT_OK(kl_read_file(path, &rej, &n, &e), &e);
    KT_CONTAINS(rej, "\"line\": 6, \"offset\"");
    KT_CONTAINS(rej, "padded 1 missing fields with null");
    KT_CONTAINS(rej, "the 2 extra fields kept in _extra");
    KT_CONTAINS(rej, "\"kind\": \"quote\", \"warning\": true, \"repair\": \"stray quote read literally\"");
    kl_mem_free(m);
    kl_mem_free(rej);
}
