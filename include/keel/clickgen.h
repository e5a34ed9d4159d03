/* keel click-log generator: a deterministic synthetic click log with a known
 * logistic signal, used by the benchmarks (bench/parquet, bench/ingest) and
 * tests. Same seed → byte-identical output on every machine with IEEE libm.
 *
 * Columns: user_id int64, item_price float64 (~1 % null), ts timestamp µs UTC,
 * category string (6 values), clicked 0/1. The CSV has a header line
 * "user_id,item_price,ts,category,clicked", a null price is an empty field,
 * ts is "YYYY-MM-DD HH:MM:SS.ffffff" (UTC), prices have two decimals.
 *
 * The signal (clicked ~ Bernoulli(p)):
 *   logit = -2.0 + beta_cat[category]
 *           - 0.5 * (ln(item_price) - 3.0)        (0 when item_price is null)
 *           + 0.6 * cos(2π (hour - 20) / 24)       (hour = UTC hour of ts)
 *   p = 1 / (1 + exp(-logit))
 *   beta_cat = books 0.3, toys -0.2, home 0.0, sports 0.5, garden -0.6, beauty 0.8
 * item_price is the two-decimal value written to the CSV, so p is a function
 * of the row and the Bayes-optimal AUC is the AUC of p (kl_clickgen_prob). */
#ifndef KEEL_CLICKGEN_H
#define KEEL_CLICKGEN_H

#include <stdint.h>

#include "keel/column.h"
#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_CLICKGEN_NCAT 6
extern const char *const kl_clickgen_categories[KL_CLICKGEN_NCAT];
extern const double kl_clickgen_beta_cat[KL_CLICKGEN_NCAT];

typedef struct {
    int64_t user_id;    /* 1..999999 */
    double item_price;  /* two decimals, >= 0.01 */
    int price_null;
    int64_t ts_us;      /* increasing, from 2023-11-01T00:00:00Z, ~1.3 s apart */
    int category;       /* index into kl_clickgen_categories */
    int clicked;
    double p;           /* the click probability used */
} kl_clickgen_row;

typedef struct { kl_rng rng; int64_t ts; } kl_clickgen;

void kl_clickgen_init(kl_clickgen *g, uint64_t seed);
void kl_clickgen_next(kl_clickgen *g, kl_clickgen_row *row);
/* The click probability of a row (the formula above). */
double kl_clickgen_prob(int category, double item_price, int price_null, int64_t ts_us);
/* Writes rows rows as CSV (atomic). 2M rows ≈ 97 MB. */
int kl_clickgen_write_csv(const char *path, uint64_t rows, uint64_t seed, kl_err *e);
/* The same rows as 5 new columns (user_id, item_price, ts, category, clicked
 * (int32)); free each with kl_column_free. */
int kl_clickgen_columns(uint64_t rows, uint64_t seed, kl_column *cols[5], kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
