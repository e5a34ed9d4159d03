/* The deterministic click-log generator (see include/keel/clickgen.h for the
 * columns and the logistic signal). kl_rng (xoshiro256** seeded by splitmix64). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/clickgen.h"

const char *const kl_clickgen_categories[KL_CLICKGEN_NCAT] = {
    "books", "toys", "home", "sports", "garden", "beauty"};
const double kl_clickgen_beta_cat[KL_CLICKGEN_NCAT] = {0.3, -0.2, 0.0, 0.5, -0.6, 0.8};
/* cumulative category probabilities: 0.25 0.20 0.20 0.15 0.10 0.10 */
static const double cat_cdf[KL_CLICKGEN_NCAT] = {0.25, 0.45, 0.65, 0.80, 0.90, 1.0};

#define T0_US INT64_C(1698796800000000) /* 2023-11-01T00:00:00Z */

static uint64_t next_u64(kl_clickgen *g) { return kl_rng_next(&g->rng); }
static double next_unit(kl_clickgen *g) { return kl_rng_uniform(&g->rng); }

void kl_clickgen_init(kl_clickgen *g, uint64_t seed) {
    kl_rng_seed(&g->rng, seed);
    g->ts = T0_US;
}

double kl_clickgen_prob(int category, double item_price, int price_null, int64_t ts_us) {
    double logit = -2.0 + kl_clickgen_beta_cat[category];
    if (!price_null) logit -= 0.5 * (log(item_price) - 3.0);
    int64_t hour = (ts_us / INT64_C(3600000000)) % 24;
    logit += 0.6 * cos(2.0 * M_PI * (double)(hour - 20) / 24.0);
    return 1.0 / (1.0 + exp(-logit));
}

void kl_clickgen_next(kl_clickgen *g, kl_clickgen_row *row) {
    g->ts += 1 + (int64_t)(next_u64(g) % 2592000);
    row->ts_us = g->ts;
    row->user_id = 1 + (int64_t)(next_u64(g) % 999999);
    double u = next_unit(g);
    int c = 0;
    while (c < KL_CLICKGEN_NCAT - 1 && u >= cat_cdf[c]) c++;
    row->category = c;
    /* log-normal price: exp(N(3, 0.8)), Box-Muller, rounded to cents */
    double u1 = next_unit(g), u2 = next_unit(g);
    double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
    double price = round(exp(3.0 + 0.8 * z) * 100.0) / 100.0;
    if (price < 0.01) price = 0.01;
    row->item_price = price;
    row->price_null = next_unit(g) < 0.01;
    if (row->price_null) row->item_price = 0;
    row->p = kl_clickgen_prob(c, row->item_price, row->price_null, row->ts_us);
    row->clicked = next_unit(g) < row->p;
}

/* "YYYY-MM-DD HH:MM:SS.ffffff" of a µs timestamp (UTC, ts >= 0). */
static int fmt_ts(char *buf, int64_t us) {
    int64_t secs = us / 1000000, frac = us % 1000000;
    int64_t days = secs / 86400, sod = secs % 86400;
    /* civil from days (H. Hinnant) */
    int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    if (m <= 2) y++;
    return sprintf(buf, "%04d-%02d-%02d %02d:%02d:%02d.%06d", (int)y, (int)m, (int)d,
                   (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60), (int)frac);
}

int kl_clickgen_write_csv(const char *path, uint64_t rows, uint64_t seed, kl_err *e) {
    kl_afile *f = NULL;
    int rc = kl_afile_open(path, &f, e);
    if (rc) return rc;
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 256);
    if (!buf) { kl_afile_abort(f); return kl_err_set(e, KL_ENOMEM, "clickgen: out of memory"); }
    len = (size_t)sprintf(buf, "user_id,item_price,ts,category,clicked\n");
    kl_clickgen g;
    kl_clickgen_init(&g, seed);
    for (uint64_t i = 0; i < rows; i++) {
        kl_clickgen_row r;
        kl_clickgen_next(&g, &r);
        char *p = buf + len;
        p += sprintf(p, "%lld,", (long long)r.user_id);
        if (!r.price_null) p += sprintf(p, "%.2f", r.item_price);
        *p++ = ',';
        p += fmt_ts(p, r.ts_us);
        p += sprintf(p, ",%s,%d\n", kl_clickgen_categories[r.category], r.clicked);
        len = (size_t)(p - buf);
        if (len >= cap) {
            if ((rc = kl_afile_write(f, buf, len, e))) goto fail;
            len = 0;
        }
    }
    if (len && (rc = kl_afile_write(f, buf, len, e))) goto fail;
    free(buf);
    return kl_afile_commit(f, e);
fail:
    free(buf);
    kl_afile_abort(f);
    return rc;
}

int kl_clickgen_columns(uint64_t rows, uint64_t seed, kl_column *cols[5], kl_err *e) {
    static const char *names[5] = {"user_id", "item_price", "ts", "category", "clicked"};
    static const kl_col_type types[5] = {KL_COL_INT64, KL_COL_FLOAT64, KL_COL_TIMESTAMP,
                                         KL_COL_STRING, KL_COL_INT32};
    int rc = KL_OK;
    memset(cols, 0, 5 * sizeof *cols);
    for (int j = 0; j < 5; j++)
        if ((rc = kl_column_new(names[j], types[j], j == 1, rows, &cols[j], e))) goto fail;
    kl_clickgen g;
    kl_clickgen_init(&g, seed);
    for (uint64_t i = 0; i < rows; i++) {
        kl_clickgen_row r;
        kl_clickgen_next(&g, &r);
        const char *cat = kl_clickgen_categories[r.category];
        if ((rc = kl_column_push_i64(cols[0], r.user_id)) ||
            (rc = r.price_null ? kl_column_push_null(cols[1]) : kl_column_push_f64(cols[1], r.item_price)) ||
            (rc = kl_column_push_i64(cols[2], r.ts_us)) ||
            (rc = kl_column_push_str(cols[3], cat, strlen(cat))) ||
            (rc = kl_column_push_i64(cols[4], r.clicked))) {
            kl_err_set(e, rc, "clickgen: out of memory at row %llu", (unsigned long long)i);
            goto fail;
        }
    }
    return KL_OK;
fail:
    for (int j = 0; j < 5; j++) { kl_column_free(cols[j]); cols[j] = NULL; }
    return rc;
}
