/* libFuzzer target of the ingest parsers: CSV records (with and without
 * quotes), dialect/type sniffing (schema infer, JSONL included: the JSON
 * reader with \u0000 kept), the inferred schema's YAML loading back, every
 * value parser, and (mode byte: data[0] & 4) kl_ingest of the rest of the
 * input as a .gz or .zst (data[0] & 8) CSV or JSONL (data[0] & 16) source
 * under small decompression caps (128 KiB). Dialect options (issue 26):
 * with data[0] & 32 the byte data[1] picks the record parser's dialect
 * (a delimiter of one or two bytes, backslash escape, apostrophe or no
 * quote, CR records, trim, lenient stray quotes, decimal comma) and the
 * sniffer and the transcoders (UTF-16LE/BE, Latin-1, Windows-1252) read the
 * rest; with data[0] & 4 as well, kl_ingest reads it as a plain CSV whose
 * schema dialect data[1] picks (skip_rows, header_rows, comment, encoding,
 * ", " delimiter, --on-error recover). Run by `make fuzz` (tools/fuzz.sh). */
#include <keel/core.h>
#include <keel/data.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh folder for one run (tmpfs when there is one), removed after it. */
static void fresh_dir(char dir[64]) {
    snprintf(dir, 64, "/dev/shm/keel-fuzz-XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, 64, "/tmp/keel-fuzz-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    kl_log_set_level(KL_LOG_ERROR);
}

/* kl_ingest of src under schema text sch into dir/ds: 4 KiB chunks, every
 * row may be rejected, at most 128 KiB decompressed; then the folder goes. */
static void run_ingest(const char *dir, const char *src, const uint8_t *data, size_t size, const char *sch,
                       int on_error) {
    char schema[128], out[128];
    snprintf(schema, sizeof schema, "%s/s.yaml", dir);
    snprintf(out, sizeof out, "%s/ds", dir);
    if (kl_write_file_atomic(src, data, size, NULL) || kl_write_file_atomic(schema, sch, strlen(sch), NULL)) abort();
    const char *srcs[] = {src};
    kl_ingest_opts o;
    kl_ingest_opts_default(&o);
    o.sources = srcs;
    o.n_sources = 1;
    o.schema_path = schema;
    o.out_dir = out;
    o.chunk_bytes = 4096;
    o.max_reject_ratio = 1;
    o.max_decompressed_bytes = (uint64_t)128 << 10;
    o.max_expansion = 50;
    o.on_error = on_error;
    kl_ingest_result r;
    kl_err e = {0};
    kl_ingest(&o, &r, &e);
    kl_rm_rf(dir, NULL);
}

/* The rest of the input as a compressed source: streamed through the chunk
 * pipeline with 4 KiB chunks, at most 128 KiB decompressed. */
static void ingest_compressed(const uint8_t *data, size_t size, int mode) {
    char dir[64], src[128];
    fresh_dir(dir);
    snprintf(src, sizeof src, "%s/in.%s.%s", dir, mode & 16 ? "jsonl" : "csv", mode & 8 ? "zst" : "gz");
    run_ingest(dir, src, data, size, "columns:\n  - {name: a, type: string}\n  - {name: b, type: int64}\n",
               KL_ON_ERROR_REJECT);
}

/* The rest of the input as a plain CSV with the schema dialect bits b pick. */
static void ingest_dialect(const uint8_t *data, size_t size, uint8_t b) {
    char dir[64], src[128], sch[512];
    fresh_dir(dir);
    snprintf(src, sizeof src, "%s/in.csv", dir);
    static const char *const enc[] = {"utf-8", "utf-16le", "latin-1", "windows-1252"};
    snprintf(sch, sizeof sch,
             "dialect: {skip_rows: %d, header_rows: %d, comment: \"%s\", encoding: %s, delimiter: \"%s\", "
             "max_record_bytes: 4096}\n"
             "columns:\n  - {name: a, type: string}\n  - {name: b, type: int64}\n",
             b & 3, 1 + (b >> 2 & 1), b & 8 ? "#" : "", enc[b >> 4 & 3], b & 64 ? ", " : ",");
    run_ingest(dir, src, data, size, sch, b & 128 ? KL_ON_ERROR_RECOVER : KL_ON_ERROR_REJECT);
}

/* The record parser's dialect from the bits of b. */
static void dialect_bits(kl_dialect *d, uint8_t b) {
    static const char *const delims[] = {",", ";", ", ", "||"};
    const char *dl = delims[b & 3];
    d->delim = dl[0];
    d->delim_n = strlen(dl) > 1 ? (int)strlen(dl) : 0;
    if (d->delim_n) memcpy(d->delim_s, dl, strlen(dl) + 1);
    if (b & 4) d->escape = '\\';
    if (b & 8) d->quote = '\'';
    if (b & 16) d->quote = 0, d->escape = 0;
    if (b & 32) d->eol = '\r', d->line_term = KL_LT_CR;
    d->trim = !!(b & 64);
    d->lenient = !!(b & 128);
    d->decimal = b & 1 ? ',' : '.';
    d->thousands = b & 1 ? '.' : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 2 && (data[0] & 36) == 36) { ingest_dialect(data + 2, size - 2, data[1]); return 0; }
    if (size && data[0] & 4) { ingest_compressed(data + 1, size - 1, data[0]); return 0; }
    const char *buf = (const char *)data;
    kl_dialect d;
    kl_dialect_default(&d);
    d.max_record = 4096;
    if (size && data[0] & 1) d.delim = ';';
    if (size && data[0] & 2) d.quote = 0;
    if (size >= 2 && data[0] & 32) {
        dialect_bits(&d, data[1]);
        for (int enc = 1; enc < KL_ENC_COUNT; enc++) { /* the transcoders: valid UTF-8 out, or an error */
            char *o = NULL;
            size_t on = 0;
            kl_err te = {0};
            if (kl_transcode_utf8((kl_encoding)enc, buf, size, &o, &on, &te) == KL_OK && !kl_utf8_valid(o, on, NULL))
                __builtin_trap();
            kl_mem_free(o);
        }
        kl_buf ev;
        kl_buf_init(&ev);
        kl_dialect sd;
        kl_err se = {0};
        kl_dialect_sniff_ex(buf, size, &sd, &ev, &se);
        kl_buf_free(&ev);
    }
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
    if (kl_schema_infer(buf, size, "fuzz", 200, 0, &s, &e) == KL_OK) {
        kl_buf b;
        kl_buf_init(&b);
        kl_schema_to_yaml(s, &b);
        kl_schema *back = NULL;
        kl_err le = {0};
        /* the written YAML always reads back: a refusal by the YAML reader (an error with no node path) is
           a bug; the schema checks may still refuse what they check, e.g. two columns of one name */
        if (kl_schema_load_str(b.data, b.len, "inferred.yaml", &back, &le) && le.code != KL_ENOMEM && !le.field[0])
            __builtin_trap();
        kl_schema_free(back);
        kl_buf_free(&b);
        kl_schema_free(s);
    }
    kl_field f;
    memset(&f, 0, sizeof f);
    f.max_null_ratio = 1;
    size_t n = size > 64 ? 64 : size;
    for (int t = 0; t < KL_T_COUNT; t++) {
        f.type = (kl_type)t;
        kl_cell v;
        char msg[128];
        int isn;
        kl_value_parse(&f, buf, n, &v, msg, sizeof msg);
        kl_cell_parse(&f, &d, buf, n, 0, &v, &isn, msg, sizeof msg); /* the dialect's decimal/thousands separators */
    }
    return 0;
}
