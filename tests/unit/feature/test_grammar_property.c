/* Property test of the one raw-value grammar: random records in every
 * spelling ingest accepts (UTC, offsets and fractional seconds, naive times
 * in America/New_York across both DST edges, null tokens, quoted tokens,
 * unknown categories, integers as strings, floats in exponent form, dates
 * and times as numbers) plus a few malformed values, written as a CSV file
 * and as JSON records. The CSV goes through kl_ingest and `features apply`;
 * the JSON records go through the online path (kl_features_transform_row,
 * window features over the stream replayed in time order). For every
 * transform kind the outputs must have the same bits in every slot, and every
 * record ingest rejects the online path rejects with the same reason.
 * KEEL_PROPERTY_RECORDS / KEEL_PROPERTY_SEED run it longer (make fuzz). */
#include "../harness.h"
#include "../kt_ingest.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "keel/core.h"
#include "keel/data.h"
#include "keel/feature.h"

static const char *SCHEMA =
    "name: grammar\n"
    "dialect: {format: csv, delimiter: ',', quote: '\"', header: true, null: ['', NA, N/A, 'null']}\n"
    "columns:\n"
    "  - {name: rid, type: int64, nullable: false}\n"
    "  - {name: user, type: int64, nullable: false}\n"
    "  - {name: price, type: float64}\n"
    "  - {name: score, type: float32}\n"
    "  - {name: cat, type: category}\n"
    "  - {name: tier, type: string, allowed: [gold, silver, bronze]}\n"
    "  - {name: ts, type: timestamp, nullable: false, timezone: America/New_York, ambiguous: earliest}\n"
    "  - {name: day, type: date}\n"
    "  - {name: flag, type: bool}\n";

static const char *SPEC =
    "label: {column: rid, type: int64}\n"
    "features:\n"
    "  - {name: p, transform: passthrough, input: price, type: float64, fill: 0}\n"
    "  - {name: pf, transform: fill_null, input: price, type: float64, fill: -1, dtype: float64}\n"
    "  - {name: pc, transform: clip, input: price, type: float64, fill: 0, lower: -5, upper: 500}\n"
    "  - {name: pl, transform: log1p, input: price, type: float64, fill: 0}\n"
    "  - {name: pz, transform: standardize, input: price, type: float64, fill: 0}\n"
    "  - {name: pm, transform: minmax, input: price, type: float64, fill: 0}\n"
    "  - {name: pq, transform: bucketize, input: price, type: float64, fill: 0, quantiles: 8, dtype: int32}\n"
    "  - {name: pb, transform: bucketize, input: price, type: float64, fill: 0, edges: [0, 10, 100]}\n"
    "  - {name: s, transform: passthrough, input: score, type: float32, fill: 0}\n"
    "  - {name: c1, transform: onehot, input: cat, type: string, nullable: true, max_size: 5}\n"
    "  - {name: ci, transform: index, input: cat, type: string, nullable: true, dtype: int64}\n"
    "  - {name: uh, transform: hash_bucket, input: user, type: int64, buckets: 97, seed: 3, dtype: int64}\n"
    "  - {name: th, transform: hash_bucket, input: tier, type: string, nullable: true, buckets: 13}\n"
    "  - {name: hr, transform: datepart, input: ts, type: timestamp, part: hour}\n"
    "  - {name: mi, transform: datepart, input: ts, type: timestamp, part: minute}\n"
    "  - {name: wd, transform: datepart, input: ts, type: timestamp, part: weekday}\n"
    "  - {name: dy, transform: datepart, input: ts, type: timestamp, part: day_of_year}\n"
    "  - {name: dm, transform: datepart, input: ts, type: timestamp, part: day_of_month}\n"
    "  - {name: mo, transform: datepart, input: ts, type: timestamp, part: month}\n"
    "  - {name: yr, transform: datepart, input: ts, type: timestamp, part: year}\n"
    "  - {name: ddw, transform: datepart, input: day, type: date, part: weekday, fill: 19000}\n"
    "  - {name: age, transform: time_since, input: ts, type: timestamp, since: '2024-01-01T00:00:00-05:00', unit: h, dtype: float64}\n"
    "  - {name: lag, transform: time_since, inputs: [{column: ts, type: timestamp}, {column: day, type: date, fill: 19700}], unit: d}\n"
    "  - name: ratio\n"
    "    transform: ratio\n"
    "    inputs: [{column: price, type: float64, fill: 0}, {column: user, type: int64}]\n"
    "    on_zero: -1\n"
    "  - {name: diff, transform: diff, inputs: [{column: price, type: float64, fill: 0}, {column: score, type: float32, fill: 0}], dtype: float64}\n"
    "  - {name: fl, transform: passthrough, input: flag, type: bool, fill: 0}\n"
    "  - {name: w_n, transform: window, agg: count, events: 5, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}}\n"
    "  - {name: w_sum, transform: window, agg: sum, events: 3, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}, value: {column: price, type: float64, fill: 0}}\n"
    "  - {name: w_mean, transform: window, agg: mean, within: 7200, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}, value: {column: price, type: float64, fill: 0}, empty: -1}\n"
    "  - {name: w_min, transform: window, agg: min, events: 4, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}, value: {column: price, type: float64, fill: 0}}\n"
    "  - {name: w_max, transform: window, agg: max, events: 4, within: 86400, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}, value: {column: score, type: float32, fill: 0}, dtype: float64}\n"
    "  - {name: w_last, transform: window, agg: last, events: 1, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}, value: {column: flag, type: bool, fill: 0}}\n"
    "  - {name: w_gap, transform: window, agg: mean_interval, events: 3, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}}\n"
    "  - {name: w_since, transform: window, agg: since_last, unit: min, entity: {column: user, type: int64}, time: {column: ts, type: timestamp}}\n";

/* ---- a small deterministic generator ---------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int pick(int n) { return (int)(rnd() % (uint64_t)n); }
static int chance(int pct) { return pick(100) < pct; }

/* One cell: its CSV text and its JSON text (a JSON value). */
typedef struct { char csv[96]; char json[112]; } cell;
enum { C_RID, C_USER, C_PRICE, C_SCORE, C_CAT, C_TIER, C_TS, C_DAY, C_FLAG, NCOL };

static void json_str(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '"';
    for (; *s && k + 8 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[k++] = '\\'; out[k++] = (char)c; }
        else if (c < 0x20) k += (size_t)snprintf(out + k, n - k, "\\u%04x", c);
        else out[k++] = (char)c;
    }
    out[k++] = '"';
    out[k] = 0;
}

static void csv_quoted(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '"';
    for (; *s && k + 3 < n; s++) {
        if (*s == '"') out[k++] = '"';
        out[k++] = *s;
    }
    out[k++] = '"';
    out[k] = 0;
}

/* A null: an unquoted token in CSV; JSON null, or the token as a string for
 * a non-text column (a string equal to a null token is null there). */
static void null_cell(cell *c, int text_col) {
    static const char *const tok[] = {"", "NA", "N/A", "null"};
    const char *t = tok[pick(4)];
    snprintf(c->csv, sizeof c->csv, "%s", t);
    if (!text_col && chance(50)) json_str(c->json, sizeof c->json, t);
    else snprintf(c->json, sizeof c->json, "null");
}

/* A value spelled s: the same text in both, as a JSON string, or as a JSON
 * number when json_num (a valid JSON number spelling of the same value). */
static void text_cell(cell *c, const char *s, const char *json_num) {
    snprintf(c->csv, sizeof c->csv, "%s", s);
    if (json_num && chance(60)) snprintf(c->json, sizeof c->json, "%s", json_num);
    else json_str(c->json, sizeof c->json, s);
}

static void gen_user(cell *c, int bad) {
    char s[32];
    int u = pick(60) + 1;
    if (bad) { text_cell(c, pick(2) ? "12x" : "99999999999999999999", NULL); return; }
    switch (pick(3)) {
    case 0: snprintf(s, sizeof s, "%d", u); break;
    case 1: snprintf(s, sizeof s, "+%d", u); break;
    default: snprintf(s, sizeof s, "00%d", u); break;
    }
    char j[32];
    snprintf(j, sizeof j, "%d", u);
    text_cell(c, s, j);
}

static void gen_float(cell *c, int bad, int f32) {
    char s[48], j[48];
    if (bad) { text_cell(c, f32 ? "1e39" : "1.2.3", NULL); return; }
    if (chance(12)) { null_cell(c, 0); return; }
    double m = (double)(pick(200000) - 20000) / 1000.0;
    switch (pick(5)) {
    case 0: snprintf(s, sizeof s, "%.17g", m); snprintf(j, sizeof j, "%.17g", m); text_cell(c, s, j); break;
    case 1: snprintf(s, sizeof s, "%.3e", m); snprintf(j, sizeof j, "%s", s); text_cell(c, s, j); break;
    case 2: snprintf(s, sizeof s, "%.2E", m); snprintf(j, sizeof j, "%s", s); text_cell(c, s, j); break;
    case 3: snprintf(s, sizeof s, "%d", (int)m); snprintf(j, sizeof j, "%s", s); text_cell(c, s, j); break;
    default: /* spellings JSON has no number for */
        if (f32 && chance(30)) { text_cell(c, pick(2) ? "inf" : "-inf", NULL); break; }
        snprintf(s, sizeof s, "%s.%d", m < 0 ? "-" : "", pick(1000));
        text_cell(c, s, NULL);
        break;
    }
}

static void gen_cat(cell *c) {
    static const char *const v[] = {"books", "toys", "beauty", "a, b", "say \"hi\"", "ünï", "NA", "garden", "x"};
    if (chance(8)) { null_cell(c, 1); return; }
    const char *s = v[pick(9)];
    /* CSV: quoted when needed, and "NA" only quoted (unquoted it is a null) */
    if (strchr(s, ',') || strchr(s, '"') || !strcmp(s, "NA") || chance(20)) csv_quoted(c->csv, sizeof c->csv, s);
    else snprintf(c->csv, sizeof c->csv, "%s", s);
    json_str(c->json, sizeof c->json, s);
}

static void gen_tier(cell *c, int bad) {
    static const char *const v[] = {"gold", "silver", "bronze"};
    if (bad) { text_cell(c, "platinum", NULL); return; }
    if (chance(10)) { null_cell(c, 1); return; }
    text_cell(c, v[pick(3)], NULL);
}

/* civil date of a day number (Howard Hinnant's algorithm; a test oracle) */
static void civil(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t yy = (int64_t)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yy + (*m <= 2));
}

/* Times: around both 2024 DST edges of New York and elsewhere in 2024. */
static void gen_ts(cell *c, int bad) {
    if (bad) {
        static const char *const b[] = {"2024-02-30T10:00:00Z", "yesterday", "2024-03-10 02:30:00", "2024-07-01T25:00:00"};
        text_cell(c, b[pick(4)], NULL); /* 02:30 on 2024-03-10 does not exist in New York */
        return;
    }
    static const int64_t edges[] = {1710054000LL /* 2024-03-10T07:00Z */, 1730613600LL /* 2024-11-03T06:00Z */,
                                    1704067200LL /* 2024-01-01T00:00Z */};
    int64_t base = edges[pick(3)];
    int64_t secs = base + (int64_t)pick(4 * 3600) - 2 * 3600;
    if (base == 1704067200LL) secs = base + (int64_t)pick(360 * 86400);
    secs = secs / 60 * 60 + (chance(50) ? 0 : pick(60));
    int frac = chance(30) ? pick(1000000) : 0;
    char s[64], j[32];
    int y, mo, d;
    int64_t t = secs;
    switch (pick(6)) {
    case 0: case 1: { /* UTC, 'Z' (JSON may give µs) */
        civil(t / 86400, &y, &mo, &d);
        int64_t r = t % 86400;
        if (frac) snprintf(s, sizeof s, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", y, mo, d, (int)(r / 3600), (int)(r / 60 % 60), (int)(r % 60), frac);
        else snprintf(s, sizeof s, "%04d-%02d-%02d%c%02d:%02d:%02dZ", y, mo, d, pick(2) ? 'T' : 't', (int)(r / 3600), (int)(r / 60 % 60), (int)(r % 60));
        snprintf(j, sizeof j, "%lld", (long long)(t * 1000000 + frac));
        text_cell(c, s, j);
        return;
    }
    case 2: case 3: { /* an offset: -05:00, -04:00, +00:00, +05:30, +01 */
        static const int offs[] = {-300, -240, 0, 330, 60};
        static const char *const names[] = {"-05:00", "-04:00", "+00:00", "+05:30", "+01"};
        int k = pick(5);
        int64_t l = t + offs[k] * 60;
        civil(l / 86400, &y, &mo, &d);
        int64_t r = l % 86400;
        if (frac) snprintf(s, sizeof s, "%04d-%02d-%02dT%02d:%02d:%02d.%03d%s", y, mo, d, (int)(r / 3600), (int)(r / 60 % 60), (int)(r % 60), frac / 1000, names[k]);
        else snprintf(s, sizeof s, "%04d-%02d-%02dT%02d:%02d:%02d%s", y, mo, d, (int)(r / 3600), (int)(r / 60 % 60), (int)(r % 60), names[k]);
        text_cell(c, s, NULL);
        return;
    }
    default: { /* naive wall-clock time, read in America/New_York (gaps: rejected; repeats: earliest) */
        int64_t l = t - 5 * 3600;
        civil(l / 86400, &y, &mo, &d);
        int64_t r = l % 86400;
        if (pick(2)) snprintf(s, sizeof s, "%04d-%02d-%02d %02d:%02d", y, mo, d, (int)(r / 3600), (int)(r / 60 % 60));
        else snprintf(s, sizeof s, "%04d-%02d-%02dT%02d:%02d:%02d", y, mo, d, (int)(r / 3600), (int)(r / 60 % 60), (int)(r % 60));
        text_cell(c, s, NULL);
        return;
    }
    }
    KL_ASSERT(0);
}

static void gen_day(cell *c) {
    if (chance(10)) { null_cell(c, 0); return; }
    int64_t dn = 19700 + pick(400);
    int y, m, d;
    civil(dn, &y, &m, &d);
    char s[32], j[32];
    snprintf(s, sizeof s, "%04d-%02d-%02d", y, m, d);
    snprintf(j, sizeof j, "%lld", (long long)dn);
    text_cell(c, s, j);
}

static void gen_flag(cell *c) {
    static const char *const t[] = {"true", "false", "1", "0", "yes", "no", "T", "f", "Y", "N"};
    if (chance(8)) { null_cell(c, 0); return; }
    int k = pick(10);
    int val = k % 2 == 0;
    text_cell(c, t[k], val ? "true" : "false");
}

/* ---- the test ---------------------------------------------------------- */

typedef struct { int64_t ts; size_t row; } order;
static int cmp_order(const void *a, const void *b) {
    const order *x = a, *y = b;
    return x->ts < y->ts ? -1 : x->ts > y->ts ? 1 : x->row < y->row ? -1 : x->row > y->row;
}

static float slot_f32(const kl_column *o, size_t r) {
    switch (o->type) {
    case KL_COL_FLOAT32: return ((float *)o->values)[r];
    case KL_COL_FLOAT64: return (float)((double *)o->values)[r];
    case KL_COL_INT32: return (float)((int32_t *)o->values)[r];
    default: return (float)((int64_t *)o->values)[r];
    }
}

/* "...field COL: reason" / "column COL: reason" → "COL: reason" */
static const char *reason_of(const char *msg) {
    const char *p = strstr(msg, "field ");
    if (p) return p + 6;
    p = strstr(msg, "column ");
    return p ? p + 7 : msg;
}

static char **g_json;   /* record rid → JSON text */

/* Writes n records as CSV and JSON; about 3% carry exactly one bad value. */
static int write_records(const char *csv, size_t n, kl_err *e) {
    FILE *fp = fopen(csv, "w");
    if (!fp) return kl_err_set(e, KL_EINVAL, "%s: cannot write", csv);
    fprintf(fp, "rid,user,price,score,cat,tier,ts,day,flag\n");
    static const char *const names[NCOL] = {"rid", "user", "price", "score", "cat", "tier", "ts", "day", "flag"};
    for (size_t i = 0; i < n; i++) {
        cell c[NCOL];
        int bad = chance(3) ? 1 + pick(5) : 0; /* 1 user, 2 price, 3 score, 4 tier, 5 ts */
        snprintf(c[C_RID].csv, sizeof c[C_RID].csv, "%zu", i);
        snprintf(c[C_RID].json, sizeof c[C_RID].json, "%zu", i);
        gen_user(&c[C_USER], bad == 1);
        gen_float(&c[C_PRICE], bad == 2, 0);
        gen_float(&c[C_SCORE], bad == 3, 1);
        gen_cat(&c[C_CAT]);
        gen_tier(&c[C_TIER], bad == 4);
        gen_ts(&c[C_TS], bad == 5);
        gen_day(&c[C_DAY]);
        gen_flag(&c[C_FLAG]);
        if (bad == 0 && chance(1)) snprintf(c[C_TS].csv, sizeof c[C_TS].csv, "NA"), snprintf(c[C_TS].json, sizeof c[C_TS].json, "null");
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{");
        for (int k = 0; k < NCOL; k++) {
            fprintf(fp, "%s%s", k ? "," : "", c[k].csv);
            if (k == C_RID || (chance(5) && !strcmp(c[k].json, "null"))) continue; /* a missing field is a null */
            kl_buf_printf(&b, "%s\"%s\": %s", b.len > 1 ? ", " : "", names[k], c[k].json);
        }
        kl_buf_puts(&b, "}");
        fprintf(fp, "\n");
        g_json[i] = kl_buf_take(&b);
    }
    return fclose(fp) ? kl_err_set(e, KL_EINVAL, "%s: write failed", csv) : KL_OK;
}

/* rid → ingest's reason ("COL: reason"), from the version's rejects.jsonl */
static int read_rejects(const char *vdir, char **why, size_t n, size_t *count, kl_err *e) {
    char p[1200];
    snprintf(p, sizeof p, "%s/rejects.jsonl", vdir);
    char *text = NULL;
    size_t len = 0;
    *count = 0;
    if (!kl_path_exists(p)) return KL_OK;
    int rc = kl_read_file(p, &text, &len, e);
    if (rc) return rc;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *ln = cJSON_GetObjectItem(o, "line"), *er = cJSON_GetObjectItem(o, "error");
        if (cJSON_IsNumber(ln) && cJSON_IsString(er) && ln->valueint >= 2 && (size_t)(ln->valueint - 2) < n) {
            why[ln->valueint - 2] = strdup(reason_of(er->valuestring));
            (*count)++;
        }
        cJSON_Delete(o);
    }
    kl_mem_free(text);
    return KL_OK;
}

KL_TEST(feature_grammar_property_online_equals_ingest) {
    const char *env_n = getenv("KEEL_PROPERTY_RECORDS"), *env_s = getenv("KEEL_PROPERTY_SEED");
    size_t n = env_n && atol(env_n) > 0 ? (size_t)atol(env_n) : 4000;
    const uint64_t seed = env_s ? strtoull(env_s, NULL, 10) : 20261201;
    rng_state = seed;
    kl_err e = {0};
    char csv[600], schema[600], ds[600];
    snprintf(csv, sizeof csv, "%s", kt_path("records.csv"));
    snprintf(schema, sizeof schema, "%s", kt_path("schema.yaml"));
    snprintf(ds, sizeof ds, "%s", kt_path("ds"));
    g_json = calloc(n, sizeof *g_json);
    char **why = calloc(n, sizeof *why);
    KT_CHECK(g_json && why);
    KT_OK(write_records(csv, n, &e), &e);
    KT_OK(kl_write_file_atomic(schema, SCHEMA, strlen(SCHEMA), &e), &e);
    /* offline: ingest (rejects allowed), fit on the dataset, apply */
    const char *srcs[] = {csv};
    kl_ingest_opts o;
    kt_ingest_opts(&o, srcs, schema, ds);
    o.max_reject_ratio = 1.0;
    o.chunk_bytes = 32 << 10;
    kl_ingest_result ir;
    KT_OK(kl_ingest(&o, &ir, &e), &e);
    size_t nrej = 0;
    KT_OK(read_rejects(ir.version_dir, why, n, &nrej, &e), &e);
    KT_EQ_INT(nrej, ir.rows_rejected);
    KT_CHECK(ir.rows_rejected > 0 && ir.rows_accepted > (int64_t)n * 8 / 10);
    kl_features *f = NULL;
    kl_column **cols = NULL, **out = NULL;
    size_t ncols = 0, nout = 0;
    KT_OK(kl_features_spec_parse(SPEC, strlen(SPEC), "spec.yaml", &f, &e), &e);
    KT_OK(kl_features_bind_dataset(f, ds, &e), &e);
    KT_OK(kl_features_read_data(ds, f, 1, &cols, &ncols, &e), &e);
    KT_OK(kl_features_fit(f, cols, ncols, &e), &e);
    KT_OK(kl_features_apply(f, cols, ncols, NULL, &out, &nout, NULL, &e), &e);
    size_t w = kl_features_width(f), rows = out[0]->len;
    KT_EQ_INT(nout, w + 1);
    KT_EQ_INT(rows, ir.rows_accepted);
    /* features.json round trip: what serving loads */
    const char *fj = kt_path("features.json");
    KT_OK(kl_features_save(f, fj, &e), &e);
    kl_features *g = NULL;
    KT_OK(kl_features_load(fj, &g, &e), &e);
    KT_EQ_STR(kl_features_hash(g), kl_features_hash(f));
    /* online: rejected records first (each alone), then the accepted ones in time order */
    size_t ts_col = 0;
    for (size_t i = 0; i < ncols; i++) if (!strcmp(cols[i]->name, "ts")) ts_col = i;
    const kl_column *rid = out[w];
    order *ord = malloc(rows * sizeof *ord);
    uint8_t *seen = calloc(n, 1);
    float *on = malloc(w * sizeof *on);
    KT_CHECK(ord && seen && on);
    for (size_t r = 0; r < rows; r++) {
        int64_t id = ((int64_t *)rid->values)[r];
        KT_CHECKF(id >= 0 && (size_t)id < n && !why[id] && !seen[id], "row %zu: record %lld", r, (long long)id);
        seen[id] = 1;
        ord[r].ts = ((int64_t *)cols[ts_col]->values)[r];
        ord[r].row = r;
    }
    qsort(ord, rows, sizeof *ord, cmp_order);
    kl_fstore *store = NULL;
    KT_OK(kl_fstore_open(g, NULL, &store, &e), &e);
    size_t mismatched = 0, reasons_differ = 0;
    for (size_t id = 0; id < n; id++) {
        if (!why[id]) { KT_CHECKF(seen[id], "record %zu neither accepted nor rejected", id); continue; }
        kl_err oe = {0};
        int rc = kl_features_transform_row(g, store, g_json[id], strlen(g_json[id]), on, NULL, &oe);
        KT_CHECKF(rc != KL_OK, "record %zu: ingest rejects it (%s), the online path accepts %s", id, why[id], g_json[id]);
        if (strcmp(reason_of(kl_err_what(&oe)), why[id]) && reasons_differ++ < 5)
            fprintf(stderr, "record %zu: ingest '%s', online '%s'\n", id, why[id], kl_err_what(&oe));
    }
    for (size_t k = 0; k < rows; k++) {
        size_t r = ord[k].row;
        int64_t id = ((int64_t *)rid->values)[r];
        const char *js = g_json[id];
        KT_OK(kl_features_transform_row(g, store, js, strlen(js), on, NULL, &e), &e);
        for (size_t j = 0; j < w; j++) {
            float a = slot_f32(out[j], r);
            if (memcmp(&a, &on[j], 4) && mismatched++ < 5)
                fprintf(stderr, "record %lld slot %s: offline %.9g, online %.9g (%s)\n", (long long)id,
                        kl_features_slot_name(g, j), a, on[j], js);
        }
        KT_OK(kl_fstore_append(store, js, strlen(js), &e), &e);
    }
    fprintf(stderr, "grammar property: %zu records (seed %llu), %lld accepted, %zu rejected, %zu slots each\n", n,
            (unsigned long long)seed, (long long)rows, nrej, w);
    KT_EQ_INT(reasons_differ, 0);
    KT_EQ_INT(mismatched, 0);
    kl_fstore_free(store);
    for (size_t i = 0; i < nout; i++) kl_column_free(out[i]);
    free(out);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    kl_features_free(g);
    for (size_t i = 0; i < n; i++) { free(g_json[i]); free(why[i]); }
    free(g_json);
    free(why);
    free(ord);
    free(seen);
    free(on);
}
