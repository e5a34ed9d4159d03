/* Unit tests of the feature layer: spec errors, XXH64 vectors, fit/save/load
 * and the hash check, and the invariant — online output == offline output
 * bit for bit for every feature type on a generated click log replayed in
 * time order — plus determinism (threads, shuffled rows) and bad input. */
#include <stdlib.h>
#include <time.h>
#include <pthread.h>

#include <cjson/cJSON.h>

#include "../harness.h"
#include "feature/feature_int.h"
#include "keel/clickgen.h"
#include "keel/feature.h"

static const char *ALL_SPEC =
    "label: {column: clicked, type: int32}\n"
    "features:\n"
    "  - {name: price, transform: passthrough, input: item_price, type: float64, fill: 0}\n"
    "  - {name: price_f, transform: fill_null, input: item_price, type: float64, fill: -1, dtype: float64}\n"
    "  - {name: price_clip, transform: clip, input: item_price, type: float64, fill: 0, lower: 1, upper: 50}\n"
    "  - {name: price_log, transform: log1p, input: item_price, type: float64, fill: 0}\n"
    "  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}\n"
    "  - {name: price_mm, transform: minmax, input: item_price, type: float64, fill: 0}\n"
    "  - {name: price_q, transform: bucketize, input: item_price, type: float64, fill: 0, quantiles: 10, dtype: int32}\n"
    "  - {name: price_b, transform: bucketize, input: item_price, type: float64, fill: 0, edges: [5, 10, 50]}\n"
    "  - {name: cat, transform: onehot, input: category, type: string, max_size: 4}\n"
    "  - {name: cat_i, transform: index, input: category, type: string, dtype: int64}\n"
    "  - {name: user_h, transform: hash_bucket, input: user_id, type: int64, buckets: 1000, seed: 7, dtype: int64}\n"
    "  - {name: cat_h, transform: hash_bucket, input: category, type: string, buckets: 16}\n"
    "  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}\n"
    "  - {name: minute, transform: datepart, input: ts, type: timestamp, part: minute}\n"
    "  - {name: weekday, transform: datepart, input: ts, type: timestamp, part: weekday}\n"
    "  - {name: doy, transform: datepart, input: ts, type: timestamp, part: day_of_year}\n"
    "  - {name: month, transform: datepart, input: ts, type: timestamp, part: month}\n"
    "  - {name: age_h, transform: time_since, input: ts, type: timestamp, since: '2023-11-01T00:00:00Z', unit: h}\n"
    "  - name: ratio\n"
    "    transform: ratio\n"
    "    inputs: [{column: item_price, type: float64, fill: 0}, {column: clicked, type: int32}]\n"
    "    on_zero: -1\n"
    "  - name: diff\n"
    "    transform: diff\n"
    "    inputs: [{column: item_price, type: float64, fill: 0}, {column: user_id, type: int64}]\n"
    "    dtype: float64\n"
    "  - {name: u_count5, transform: window, agg: count, events: 5, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}\n"
    "  - {name: u_sum3, transform: window, agg: sum, events: 3, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}}\n"
    "  - {name: u_mean1h, transform: window, agg: mean, within: 3600, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}, empty: -1}\n"
    "  - {name: u_min4, transform: window, agg: min, events: 4, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}}\n"
    "  - {name: u_max4, transform: window, agg: max, events: 4, within: 7200, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}, dtype: float64}\n"
    "  - {name: u_last, transform: window, agg: last, events: 1, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: clicked, type: int32}}\n"
    "  - {name: u_gap3, transform: window, agg: mean_interval, events: 3, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}\n"
    "  - {name: u_since, transform: window, agg: since_last, unit: min, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}\n"
    "  - {name: c_count, transform: window, agg: count, within: 600, entity: {column: category, type: string}, time: {column: ts, type: timestamp}}\n"
    "  - {name: pf_log, transform: log1p, input: pf, type: float32}\n"
    "  - {name: pf_z, transform: standardize, input: pf, type: float32, dtype: float64}\n"
    "  - {name: flag, transform: passthrough, input: flag, type: bool}\n"
    "  - {name: since_day, transform: time_since, inputs: [{column: ts, type: timestamp}, {column: day, type: date, fill: 19001}], unit: d}\n"
    "  - {name: day_wd, transform: datepart, input: day, type: date, part: weekday, fill: 19000}\n"
    "  - {name: u_pf_sum, transform: window, agg: sum, events: 2, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: pf, type: float32}}\n"
    "  - {name: f_count, transform: window, agg: count, within: 120, entity: {column: flag, type: bool}, time: {column: ts, type: timestamp}}\n";

#define NC 8
/* A click log with repeat users (user_id mod 300) and ties (ts on a 30 s
 * grid), so that windows and tie handling are exercised; plus a date column
 * with nulls (day), a float32 column (pf) and a bool column (flag). */
static int make_log(size_t n, kl_column *c[NC], kl_err *e) {
    int rc = kl_clickgen_columns(n, 7, c, e);
    if (rc) return rc;
    int64_t *u = c[0]->values, *t = c[2]->values;
    c[5] = c[6] = c[7] = NULL;
    if ((rc = kl_column_new("day", KL_COL_DATE, 1, n, &c[5], e)) || (rc = kl_column_new("pf", KL_COL_FLOAT32, 0, n, &c[6], e)) ||
        (rc = kl_column_new("flag", KL_COL_BOOL, 0, n, &c[7], e)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        u[i] = u[i] % 300;
        t[i] = t[i] / 30000000 * 30000000;
        if (i % 17 == 3) kl_column_push_null(c[5]);
        else kl_column_push_i64(c[5], t[i] / 86400000000LL - (int64_t)(i % 5));
        kl_column_push_f64(c[6], (double)(float)(kl_column_is_null(c[1], i) ? 0.1 : kl_column_get_f64(c[1], i) / 3.0));
        kl_column_push_i64(c[7], kl_column_get_i64(c[4], i) ^ (int64_t)(i % 2));
    }
    return KL_OK;
}

static void free_cols(kl_column **c, size_t n) {
    for (size_t i = 0; i < n; i++) kl_column_free(c[i]);
}

static char *row_json(kl_column *c[NC], size_t r) {
    static char buf[512];
    size_t n;
    const char *cat = kl_column_get_str(c[3], r, &n);
    char price[64];
    if (kl_column_is_null(c[1], r)) snprintf(price, sizeof price, "null");
    else snprintf(price, sizeof price, "%.17g", kl_column_get_f64(c[1], r));
    char day[64];   /* dates as day numbers and as text, alternating */
    int64_t dn = kl_column_is_null(c[5], r) ? 0 : kl_column_get_i64(c[5], r);
    if (kl_column_is_null(c[5], r)) snprintf(day, sizeof day, "null");
    else if (r % 2) snprintf(day, sizeof day, "%lld", (long long)dn);
    else {
        time_t tt = (time_t)(dn * 86400);
        struct tm tm;
        gmtime_r(&tt, &tm);
        strftime(day, sizeof day, "\"%Y-%m-%d\"", &tm);
    }
    snprintf(buf, sizeof buf, "{\"user_id\": %lld, \"item_price\": %s, \"ts\": %lld, \"category\": \"%.*s\", \"clicked\": %lld, "
             "\"day\": %s, \"pf\": %.9g, \"flag\": %s}",
             (long long)kl_column_get_i64(c[0], r), price, (long long)kl_column_get_i64(c[2], r), (int)n, cat,
             (long long)kl_column_get_i64(c[4], r), day, kl_column_get_f64(c[6], r), kl_column_get_i64(c[7], r) ? "true" : "false");
    return buf;
}

/* Slot value of an output column as the bits of its dtype, compared with a
 * double cast the same way. */
static int same_bits(const kl_column *o, size_t r, double v) {
    switch (o->type) {
    case KL_COL_FLOAT32: { float a = ((float *)o->values)[r], b = (float)v; return memcmp(&a, &b, 4) == 0; }
    case KL_COL_FLOAT64: { double a = ((double *)o->values)[r]; return memcmp(&a, &v, 8) == 0; }
    case KL_COL_INT32: return ((int32_t *)o->values)[r] == (int32_t)v;
    case KL_COL_INT64: return ((int64_t *)o->values)[r] == (int64_t)v;
    default: return 0;
    }
}

KL_TEST(feature_xxh64_vectors) {
    KT_CHECK(kl__xxh64("", 0, 0) == 0xEF46DB3751D8E999ULL);
    KT_CHECK(kl__xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ULL);
    const char *lng = "Nobody inspects the spammish repetition";
    KT_CHECK(kl__xxh64(lng, strlen(lng), 0) == 0xFBCEA83C8A378BF1ULL);
}

KL_TEST(feature_spec_errors) {
    kl_err e = {0};
    kl_features *f = NULL;
    const char *bad1 = "features:\n  - {name: a, transform: nope, input: x, type: float64}\n";
    KT_CHECK(kl_features_spec_parse(bad1, strlen(bad1), "s.yaml", &f, &e) != 0 && !f);
    KT_CONTAINS(kl_err_what(&e), "s.yaml:2:");
    KT_CONTAINS(kl_err_what(&e), "unknown transform 'nope'");
    const char *bad2 = "features:\n  - name: a\n    transform: standardize\n    input: x\n    type: float64\n    nullable: true\n";
    KT_CHECK(kl_features_spec_parse(bad2, strlen(bad2), "s.yaml", &f, &e) != 0);
    KT_CONTAINS(kl_err_what(&e), "give a fill");
    const char *bad3 = "features:\n  - {name: a, transform: onehot, input: x, type: float64}\n";
    KT_CHECK(kl_features_spec_parse(bad3, strlen(bad3), "s.yaml", &f, &e) != 0);
    KT_CONTAINS(kl_err_what(&e), "string or integer");
    const char *bad4 = "features:\n  - {name: a, transform: window, agg: sum, events: 3, entity: {column: u, type: int64}, time: {column: t, type: timestamp}}\n";
    KT_CHECK(kl_features_spec_parse(bad4, strlen(bad4), "s.yaml", &f, &e) != 0);
    KT_CONTAINS(kl_err_what(&e), "needs value");
    const char *bad5 = "features:\n  - {name: a, transform: log1p, input: x, type: float64, bucket: 3}\n";
    KT_CHECK(kl_features_spec_parse(bad5, strlen(bad5), "s.yaml", &f, &e) != 0);
    KT_CONTAINS(kl_err_what(&e), "bucket");
    KT_OK(kl_features_spec_parse(ALL_SPEC, strlen(ALL_SPEC), "all.yaml", &f, &e), &e);
    KT_CHECK(!kl_features_is_fitted(f));
    kl_features_free(f);
}

/* A key the feature's transform never reads is refused, named with its line:
 * edges on a standardize, part on a log1p (issue 23: parsed means honoured). */
KL_TEST(feature_spec_key_its_transform_ignores_is_refused) {
    kl_err e = {0};
    kl_features *f = NULL;
    const char *bad[] = {
        "features:\n  - {name: a, transform: standardize, input: x, type: float64, fill: 0, edges: [1, 2]}\n",
        "edges",
        "features:\n  - {name: a, transform: log1p, input: x, type: float64, fill: 0, part: hour}\n",
        "part",
        "features:\n  - {name: a, transform: onehot, input: c, type: string, buckets: 8}\n",
        "buckets"};
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i += 2) {
        int rc = kl_features_spec_parse(bad[i], strlen(bad[i]), "s.yaml", &f, &e);
        KT_CHECKF(rc != 0 && !f, "%s was accepted", bad[i + 1]);
        kl_features_free(f);
        f = NULL;
        KT_CONTAINS(kl_err_what(&e), bad[i + 1]);
        KT_CONTAINS(kl_err_what(&e), "s.yaml:2:");
        KT_CONTAINS(kl_err_what(&e), "no effect");
    }
    const char *ok =
        "features:\n  - {name: a, transform: standardize, input: x, type: float64, fill: 0, description: price}\n";
    KT_OK(kl_features_spec_parse(ok, strlen(ok), "s.yaml", &f, &e), &e);
    kl_features_free(f);
}

/* The replay through the online store named store (NULL: in memory) gives
 * apply's values bit for bit. */
static void online_equals_offline(const char *store) {
    kl_err e = {0};
    kl_column *c[NC];
    kl_features *f = NULL;
    kl_column **out = NULL;
    size_t nout = 0, n = 20000;
    kl_features_counts cnt;
    KT_OK(make_log(n, c, &e), &e);
    KT_OK(kl_features_spec_parse(ALL_SPEC, strlen(ALL_SPEC), "all.yaml", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, NC, &e), &e);
    KT_CHECK(kl_features_is_fitted(f));
    KT_EQ_INT(kl_features_width(f), 36 - 1 + 5);   /* cat: 4 + unknown */
    KT_OK(kl_features_apply(f, c, NC, NULL, &out, &nout, &cnt, &e), &e);
    KT_EQ_INT(nout, kl_features_width(f) + 1);
    KT_CHECK(cnt.unknown > 0);          /* max_size 4 of 6 categories */
    KT_CHECK(cnt.null_filled > 0);
    KT_CHECK(cnt.div_zero > 0);
    KT_CHECK(cnt.empty_window > 0);
    /* replay in time order: transform (before the append), then append */
    kl_fstore *s = NULL;
    KT_OK(kl_fstore_open(f, store, &s, &e), &e);
    size_t w = kl_features_width(f), bad = 0, nonzero_windows = 0;
    double *d = malloc(w * sizeof *d);
    float *fl = malloc(w * sizeof *fl);
    for (size_t r = 0; r < n; r++) {   /* rows are in time order already */
        const char *js = row_json(c, r);
        void *obj = NULL;
        KT_OK(kl_json_parse(js, strlen(js), "rec", &obj, &e), &e);
        int rc = kl_features_transform_record(f, s, obj, d, NULL, &e);
        cJSON_Delete(obj);
        KT_OK(rc, &e);
        KT_OK(kl_features_transform_row(f, s, js, strlen(js), fl, NULL, &e), &e);
        for (size_t j = 0; j < w; j++) {
            if (!same_bits(out[j], r, d[j])) {
                if (bad++ < 5) fprintf(stderr, "row %zu slot %s: offline != online %.17g\n", r, kl_features_slot_name(f, j), d[j]);
            }
            float a;
            switch (out[j]->type) {
            case KL_COL_FLOAT32: a = ((float *)out[j]->values)[r]; break;
            case KL_COL_FLOAT64: a = (float)((double *)out[j]->values)[r]; break;
            case KL_COL_INT32: a = (float)((int32_t *)out[j]->values)[r]; break;
            default: a = (float)((int64_t *)out[j]->values)[r]; break;
            }
            if (memcmp(&a, &fl[j], 4)) bad++;
        }
        nonzero_windows += d[kl_features_width(f) - 16] > 0;   /* u_count5 */
        KT_OK(kl_fstore_append(s, js, strlen(js), &e), &e);
    }
    KT_EQ_INT(bad, 0);
    KT_CHECK(nonzero_windows > n / 2);
    free(d);
    free(fl);
    kl_fstore_free(s);
    free_cols(out, nout);
    free(out);
    free_cols(c, NC);
    kl_features_free(f);
}

KL_TEST(feature_online_equals_offline) { online_equals_offline(NULL); }

/* The same replay through Redis (tests/integration/feature_redis_replay.sh
 * starts a server and names it in KEEL_TEST_REDIS_URL; without it the test
 * has nothing to run against). Keys get a prefix of their own. */
KL_TEST(feature_online_equals_offline_redis) {
    const char *url = getenv("KEEL_TEST_REDIS_URL");
    if (!url || !*url) {
        fprintf(stderr, "feature_online_equals_offline_redis: KEEL_TEST_REDIS_URL not set, nothing to check\n");
        return;
    }
    char u[512];
    snprintf(u, sizeof u, "%s?prefix=keel-unit:%ld:&timeout_ms=5000", url, (long)time(NULL)); /* a loaded machine */
    online_equals_offline(u);
}

/* row 0 of the log with field key = s (len bytes, a NUL inside) as a reader
 * that keeps string lengths (the serving request reader) gives it */
static cJSON *nul_record(kl_column *c[NC], const char *key, const char *s, size_t len, int keep_len) {
    char buf[64];
    memcpy(buf, s, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++) if (!buf[i]) buf[i] = '?';
    cJSON *o = cJSON_Parse(row_json(c, 0)), *st = cJSON_CreateString(buf);
    cJSON_ReplaceItemInObjectCaseSensitive(o, key, st);
    memcpy(st->valuestring, s, len);
    if (keep_len) { st->type |= KL_JSON_STRLEN; st->valuedouble = (double)len; }
    return o;
}

KL_TEST(feature_record_string_with_nul) {
    /* a string with a \u0000 inside reaches the transforms whole when its
     * reader kept the length (the hash of "Xb\0cd" is not the hash of "Xb"),
     * and a timestamp with a NUL inside does not parse as its prefix */
    kl_err e = {0};
    kl_column *c[NC];
    kl_features *f = NULL;
    kl_fstore *st = NULL;
    KT_OK(make_log(300, c, &e), &e);
    KT_OK(kl_features_spec_parse(ALL_SPEC, strlen(ALL_SPEC), "all.yaml", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, NC, &e), &e);
    KT_OK(kl_fstore_open(f, NULL, &st, &e), &e);
    size_t w = kl_features_width(f), hs = w;
    for (size_t j = 0; j < w; j++)
        if (!strcmp(kl_features_slot_name(f, j), "cat_h")) hs = j;
    KT_CHECK(hs < w);
    double *d1 = malloc(w * sizeof *d1), *d2 = malloc(w * sizeof *d2);
    KT_CHECK(d1 && d2);
    int differ = 0;
    for (int k = 0; k < 16 && !differ && hs < w; k++) {
        char s[6] = {(char)('a' + k), 'b', 0, 'c', 'd', 0};
        cJSON *whole = nul_record(c, "category", s, 5, 1), *cut = nul_record(c, "category", s, 2, 0);
        KT_OK(kl_features_transform_record(f, st, whole, d1, NULL, &e), &e);
        KT_OK(kl_features_transform_record(f, st, cut, d2, NULL, &e), &e);
        differ = d1[hs] != d2[hs];
        cJSON_Delete(whole);
        cJSON_Delete(cut);
    }
    KT_CHECK(differ);
    const char ts[] = "2023-11-01T00:00:00Z\0x";
    cJSON *bad = nul_record(c, "ts", ts, sizeof ts - 1, 1), *good = nul_record(c, "ts", ts, sizeof ts - 1, 0);
    KT_CHECK(kl_features_transform_record(f, st, bad, d1, NULL, &e) == KL_ETYPE);
    KT_CONTAINS(e.msg, "ts");
    KT_OK(kl_features_transform_record(f, st, good, d1, NULL, &e), &e); /* a C string: the prefix, as before */
    cJSON_Delete(bad);
    cJSON_Delete(good);
    free(d1);
    free(d2);
    kl_fstore_free(st);
    free_cols(c, NC);
    kl_features_free(f);
}

KL_TEST(feature_apply_deterministic_and_order_free) {
    kl_err e = {0};
    kl_column *c[NC], *sh[NC];
    kl_features *f = NULL;
    kl_column **a = NULL, **b = NULL, **x = NULL;
    size_t na, nb, nx, n = 20000;
    KT_OK(make_log(n, c, &e), &e);
    KT_OK(kl_features_spec_parse(ALL_SPEC, strlen(ALL_SPEC), "all.yaml", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, NC, &e), &e);
    kl_pool *p1 = NULL, *p3 = NULL;
    KT_OK(kl_pool_new(1, &p1, &e), &e);
    KT_OK(kl_pool_new(3, &p3, &e), &e);
    KT_OK(kl_features_apply(f, c, NC, p1, &a, &na, NULL, &e), &e);
    KT_OK(kl_features_apply(f, c, NC, p3, &b, &nb, NULL, &e), &e);
    /* shuffled rows: perm[i] = source row of shuffled row i */
    size_t *perm = malloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    uint64_t st = 12345;
    for (size_t i = n - 1; i > 0; i--) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t j = (size_t)((st >> 33) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int k = 0; k < NC; k++) {
        KT_OK(kl_column_new(c[k]->name, c[k]->type, c[k]->nullable, n, &sh[k], &e), &e);
        for (size_t i = 0; i < n; i++) {
            size_t r = perm[i];
            if (kl_column_is_null(c[k], r)) kl_column_push_null(sh[k]);
            else if (c[k]->type == KL_COL_STRING) { size_t sn; const char *s = kl_column_get_str(c[k], r, &sn); kl_column_push_str(sh[k], s, sn); }
            else if (c[k]->type == KL_COL_FLOAT64 || c[k]->type == KL_COL_FLOAT32) kl_column_push_f64(sh[k], kl_column_get_f64(c[k], r));
            else kl_column_push_i64(sh[k], kl_column_get_i64(c[k], r));
        }
    }
    KT_OK(kl_features_apply(f, sh, NC, p3, &x, &nx, NULL, &e), &e);
    KT_EQ_INT(na, nb);
    KT_EQ_INT(na, nx);
    size_t diff = 0;
    for (size_t j = 0; j < na; j++) {
        size_t sz = kl_col_type_size(a[j]->type);
        if (memcmp(a[j]->values, b[j]->values, n * sz)) diff++;
        for (size_t i = 0; i < n; i++)
            if (memcmp((char *)x[j]->values + i * sz, (char *)a[j]->values + perm[i] * sz, sz)) { diff++; break; }
    }
    KT_EQ_INT(diff, 0);
    free(perm);
    free_cols(a, na); free(a);
    free_cols(b, nb); free(b);
    free_cols(x, nx); free(x);
    free_cols(sh, NC);
    free_cols(c, NC);
    kl_pool_free(p1);
    kl_pool_free(p3);
    kl_features_free(f);
}

KL_TEST(feature_save_load_hash) {
    kl_err e = {0};
    kl_column *c[NC];
    kl_features *f = NULL, *g = NULL;
    KT_OK(make_log(3000, c, &e), &e);
    KT_OK(kl_features_spec_parse(ALL_SPEC, strlen(ALL_SPEC), "all.yaml", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, NC, &e), &e);
    const char *p = kt_path("features.json");
    KT_OK(kl_features_save(f, p, &e), &e);
    KT_OK(kl_features_load(p, &g, &e), &e);
    KT_EQ_STR(kl_features_hash(g), kl_features_hash(f));
    KT_EQ_INT(kl_features_width(g), kl_features_width(f));
    char *c1 = kl_features_canonical(f), *c2 = kl_features_canonical(g);
    KT_EQ_STR(c1, c2);
    free(c1);
    free(c2);
    kl_features_free(g);
    /* tamper with the fitted mean */
    char *txt;
    size_t len;
    KT_OK(kl_read_file(p, &txt, &len, &e), &e);
    char *m = strstr(txt, "\"mean\":");
    KT_CHECK(m != NULL);
    m[7] = m[7] == '1' ? '2' : '1';
    KT_EQ_INT(kl_features_load_str(txt, len, "tampered.json", &g, &e), KL_ECHECKSUM);
    KT_CHECK(!g);
    KT_CONTAINS(kl_err_what(&e), "feature_hash mismatch");
    kl_mem_free(txt);
    free_cols(c, NC);
    kl_features_free(f);
}

KL_TEST(feature_store_persist) {
    kl_err e = {0};
    kl_column *c[NC];
    kl_features *f = NULL;
    kl_fstore *s = NULL, *s2 = NULL;
    size_t n = 4000, half = 3000;
    KT_OK(make_log(n, c, &e), &e);
    KT_OK(kl_features_spec_parse(ALL_SPEC, strlen(ALL_SPEC), "all.yaml", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, NC, &e), &e);
    const char *db = kt_path("store.db");
    KT_OK(kl_fstore_open(f, db, &s, &e), &e);
    for (size_t r = 0; r < half; r++) KT_OK(kl_fstore_append_columns(s, c, NC, r, &e), &e);
    KT_OK(kl_fstore_flush(s, &e), &e);
    KT_OK(kl_fstore_open(f, db, &s2, &e), &e);
    KT_EQ_INT(kl_fstore_entities(s2), kl_fstore_entities(s));
    KT_EQ_INT(kl_fstore_events(s2), kl_fstore_events(s));
    size_t w = kl_features_width(f);
    float *a = malloc(w * sizeof *a), *b = malloc(w * sizeof *b);
    for (size_t r = half; r < n; r++) {
        const char *js = row_json(c, r);
        KT_OK(kl_features_transform_row(f, s, js, strlen(js), a, NULL, &e), &e);
        KT_OK(kl_features_transform_row(f, s2, js, strlen(js), b, NULL, &e), &e);
        KT_CHECK(memcmp(a, b, w * sizeof *a) == 0);
        KT_OK(kl_fstore_append(s, js, strlen(js), &e), &e);
        KT_OK(kl_fstore_append(s2, js, strlen(js), &e), &e);
    }
    /* other features cannot use this store */
    kl_features *g = NULL;
    const char *other = "features:\n  - {name: k, transform: window, agg: count, events: 2, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}\n";
    KT_OK(kl_features_spec_parse(other, strlen(other), "o.yaml", &g, &e), &e);
    kl_fstore *s3 = NULL;
    KT_EQ_INT(kl_fstore_open(g, db, &s3, &e), KL_ESTATE);
    kl_features_free(g);
    free(a);
    free(b);
    kl_fstore_free(s);
    kl_fstore_free(s2);
    free_cols(c, NC);
    kl_features_free(f);
}

KL_TEST(feature_bad_input) {
    kl_err e = {0};
    kl_column *c[NC];
    kl_features *f = NULL;
    kl_column **out = NULL;
    size_t nout;
    KT_OK(make_log(500, c, &e), &e);
    /* unknown column */
    const char *s1 = "features:\n  - {name: a, transform: log1p, input: nope, type: float64}\n";
    KT_OK(kl_features_spec_parse(s1, strlen(s1), "s1", &f, &e), &e);
    KT_EQ_INT(kl_features_apply(f, c, NC, NULL, &out, &nout, NULL, &e), KL_ENOTFOUND);
    KT_CONTAINS(kl_err_what(&e), "'nope' not found");
    kl_features_free(f);
    /* type mismatch */
    const char *s2 = "features:\n  - {name: a, transform: log1p, input: category, type: float64}\n";
    KT_OK(kl_features_spec_parse(s2, strlen(s2), "s2", &f, &e), &e);
    KT_EQ_INT(kl_features_apply(f, c, NC, NULL, &out, &nout, NULL, &e), KL_ETYPE);
    KT_CONTAINS(kl_err_what(&e), "category");
    kl_features_free(f);
    /* null in a non-nullable input (item_price has nulls) */
    const char *s3 = "features:\n  - {name: a, transform: log1p, input: item_price, type: float64}\n";
    KT_OK(kl_features_spec_parse(s3, strlen(s3), "s3", &f, &e), &e);
    KT_EQ_INT(kl_features_apply(f, c, NC, NULL, &out, &nout, NULL, &e), KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "null");
    KT_CHECK(out == NULL);
    /* online: wrong JSON type, missing field */
    float v[4];
    const char *r1 = "{\"item_price\": \"cheap\"}";
    KT_EQ_INT(kl_features_transform_row(f, NULL, r1, strlen(r1), v, NULL, &e), KL_ETYPE);
    KT_CONTAINS(kl_err_what(&e), "item_price");
    const char *r2 = "{\"other\": 1}";
    KT_EQ_INT(kl_features_transform_row(f, NULL, r2, strlen(r2), v, NULL, &e), KL_EINVAL);
    kl_features_free(f);
    /* unseen category → unknown bucket, counted */
    const char *s4 = "features:\n  - {name: cat, transform: onehot, input: category, type: string}\n";
    KT_OK(kl_features_spec_parse(s4, strlen(s4), "s4", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, NC, &e), &e);
    KT_EQ_INT(kl_features_width(f), 7);
    kl_features_counts cnt = {0};
    float o[7];
    const char *r3 = "{\"category\": \"spaceships\"}";
    KT_OK(kl_features_transform_row(f, NULL, r3, strlen(r3), o, &cnt, &e), &e);
    KT_EQ_INT(cnt.unknown, 1);
    KT_CHECK(o[6] == 1.0f && o[0] == 0.0f);
    KT_EQ_STR(kl_features_slot_name(f, 6), "cat=<unknown>");
    kl_features_free(f);
    free_cols(c, NC);
}

KL_TEST(feature_dateparts) {
    kl_err e = {0};
    kl_features *f = NULL;
    const char *s = "features:\n"
                    "  - {name: h, transform: datepart, input: t, type: timestamp, part: hour}\n"
                    "  - {name: wd, transform: datepart, input: t, type: timestamp, part: weekday}\n"
                    "  - {name: doy, transform: datepart, input: t, type: timestamp, part: day_of_year}\n"
                    "  - {name: y, transform: datepart, input: t, type: timestamp, part: year}\n"
                    "  - {name: d, transform: datepart, input: t, type: timestamp, part: day_of_month}\n";
    KT_OK(kl_features_spec_parse(s, strlen(s), "d", &f, &e), &e);
    float o[5];
    const char *r = "{\"t\": \"2024-12-31T23:59:59.5Z\"}";   /* a Tuesday, leap year */
    KT_OK(kl_features_transform_row(f, NULL, r, strlen(r), o, NULL, &e), &e);
    KT_EQ_INT((int)o[0], 23);
    KT_EQ_INT((int)o[1], 1);
    KT_EQ_INT((int)o[2], 366);
    KT_EQ_INT((int)o[3], 2024);
    KT_EQ_INT((int)o[4], 31);
    const char *r2 = "{\"t\": -1}";   /* 1969-12-31T23:59:59.999999, a Wednesday */
    KT_OK(kl_features_transform_row(f, NULL, r2, strlen(r2), o, NULL, &e), &e);
    KT_EQ_INT((int)o[0], 23);
    KT_EQ_INT((int)o[1], 2);
    KT_EQ_INT((int)o[3], 1969);
    kl_features_free(f);
}

/* Concurrent transforms while another thread appends (run under
 * SANITIZE=thread): the store's lock keeps readers and the writer apart. */
typedef struct { kl_features *f; kl_fstore *s; kl_column **c; size_t n; int fails; } conc_ctx;
typedef struct { conc_ctx *x; char **recs; } conc_recs;
static void *conc_reader_recs(void *arg) {
    conc_recs *cr = arg;
    conc_ctx *x = cr->x;
    float v[64];
    kl_err e = {0};
    for (int rep = 0; rep < 3; rep++)
        for (size_t r = 0; r < x->n; r += 3)
            if (kl_features_transform_row(x->f, x->s, cr->recs[r], strlen(cr->recs[r]), v, NULL, &e)) x->fails++;
    return NULL;
}

KL_TEST(feature_store_concurrent) {
    kl_err e = {0};
    kl_column *c[NC];
    kl_features *f = NULL;
    kl_fstore *s = NULL;
    size_t n = 2000;
    const char *spec = "features:\n"
                       "  - {name: w, transform: window, agg: mean, events: 3, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: pf, type: float32}}\n"
                       "  - {name: k, transform: window, agg: count, within: 600, entity: {column: category, type: string}, time: {column: ts, type: timestamp}}\n";
    KT_OK(make_log(n, c, &e), &e);
    KT_OK(kl_features_spec_parse(spec, strlen(spec), "c.yaml", &f, &e), &e);
    KT_OK(kl_fstore_open(f, NULL, &s, &e), &e);
    conc_ctx x = {f, s, c, n, 0};
    /* row_json uses a static buffer: build the records first */
    char **recs = calloc(n, sizeof *recs);
    for (size_t r = 0; r < n; r++) recs[r] = strdup(row_json(c, r));
    x.c = c;
    pthread_t th;
    conc_recs cr = {&x, recs};
    pthread_create(&th, NULL, conc_reader_recs, &cr);
    for (size_t r = 0; r < n; r++) KT_OK(kl_fstore_append(s, recs[r], strlen(recs[r]), &e), &e);
    pthread_join(th, NULL);
    KT_EQ_INT(x.fails, 0);
    for (size_t r = 0; r < n; r++) free(recs[r]);
    free(recs);
    kl_fstore_free(s);
    free_cols(c, NC);
    kl_features_free(f);
}

/* label: {nulls: drop|fail|fill}: a null label is dropped with its row by
 * default (counted), refused, or filled; `nullable` on a label (accepted and
 * ignored before) is refused with the keys that exist; the default keeps the
 * hash labels had before. */
KL_TEST(feature_label_nulls) {
    kl_err e = {0};
    kl_column *c[2] = {NULL, NULL};
    KT_OK(kl_column_new("x", KL_COL_FLOAT64, 0, 4, &c[0], &e), &e);
    KT_OK(kl_column_new("y", KL_COL_INT32, 1, 4, &c[1], &e), &e);
    for (int i = 0; i < 4; i++) {
        KT_OK(kl_column_push_f64(c[0], i + 0.5), &e);
        KT_OK(i == 1 ? kl_column_push_null(c[1]) : kl_column_push_i64(c[1], i), &e);
    }
    const char *specs[3] = {"label: {column: y, type: int32}\nfeatures:\n  - {name: a, transform: passthrough, input: x, type: float64}\n",
                            "label: {column: y, type: int32, nulls: fail}\nfeatures:\n  - {name: a, transform: passthrough, input: x, type: float64}\n",
                            "label: {column: y, type: int32, fill: 7}\nfeatures:\n  - {name: a, transform: passthrough, input: x, type: float64}\n"};
    kl_features *f = NULL;
    kl_column **out = NULL;
    size_t nout = 0;
    kl_features_counts cnt;
    /* drop (default): rows 0, 2, 3 remain in every output column */
    KT_OK(kl_features_spec_parse(specs[0], strlen(specs[0]), "s0", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, 2, &e), &e);
    char *canon = kl_features_canonical(f);
    KT_CONTAINS(canon, "\"label\":{\"column\":\"y\",\"type\":\"int32\",\"nullable\":false},");
    free(canon);
    KT_OK(kl_features_apply(f, c, 2, NULL, &out, &nout, &cnt, &e), &e);
    KT_EQ_INT(cnt.label_dropped, 1);
    KT_EQ_INT(cnt.rows, 3);
    KT_EQ_INT(out[0]->len, 3);
    KT_EQ_INT(out[1]->len, 3);
    KT_CHECK(((float *)out[0]->values)[1] == 2.5f && kl_column_get_i64(out[1], 1) == 2);
    for (size_t i = 0; i < nout; i++) kl_column_free(out[i]);
    free(out);
    kl_features_free(f);
    /* fail: the error names the label and the row */
    KT_OK(kl_features_spec_parse(specs[1], strlen(specs[1]), "s1", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, 2, &e), &e);
    KT_EQ_INT(kl_features_apply(f, c, 2, NULL, &out, &nout, &cnt, &e), KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "label y is null in row 1");
    kl_features_free(f);
    /* fill: every row, the null one as 7; the policy is in the hash */
    KT_OK(kl_features_spec_parse(specs[2], strlen(specs[2]), "s2", &f, &e), &e);
    KT_OK(kl_features_fit(f, c, 2, &e), &e);
    canon = kl_features_canonical(f);
    KT_CONTAINS(canon, "\"nulls\":\"fill\",\"fill\":7}");
    free(canon);
    KT_OK(kl_features_apply(f, c, 2, NULL, &out, &nout, &cnt, &e), &e);
    KT_EQ_INT(out[1]->len, 4);
    KT_EQ_INT(kl_column_get_i64(out[1], 1), 7);
    KT_CHECK(out[1]->valid == NULL || !kl_column_is_null(out[1], 1));
    const char *fj = kt_path("f.json");
    KT_OK(kl_features_save(f, fj, &e), &e);
    kl_features *g = NULL;
    KT_OK(kl_features_load(fj, &g, &e), &e);
    KT_EQ_STR(kl_features_hash(g), kl_features_hash(f));
    kl_features_free(g);
    for (size_t i = 0; i < nout; i++) kl_column_free(out[i]);
    free(out);
    kl_features_free(f);
    /* keys that mean nothing for a label are refused, naming the place */
    const char *bad = "label: {column: y, type: int32, fill: 0, nullable: false}\nfeatures:\n  - {name: a, transform: passthrough, input: x, type: float64}\n";
    KT_CHECK(kl_features_spec_parse(bad, strlen(bad), "bad.yaml", &f, &e) != KL_OK);
    KT_CONTAINS(kl_err_what(&e), "bad.yaml:1:");
    KT_CONTAINS(kl_err_what(&e), "nullable");
    const char *bad2 = "label: {column: y, type: int32, nulls: zero}\nfeatures:\n  - {name: a, transform: passthrough, input: x, type: float64}\n";
    KT_CHECK(kl_features_spec_parse(bad2, strlen(bad2), "bad2.yaml", &f, &e) != KL_OK);
    KT_CONTAINS(kl_err_what(&e), "'zero' is not drop, fail or fill");
    kl_column_free(c[0]);
    kl_column_free(c[1]);
}
