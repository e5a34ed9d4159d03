/* keel data profiles and monitoring (owned by src/feature/): mergeable
 * sketches (a relative-error quantile sketch, fixed-bin histograms, exact
 * category counts with a cap), the reference profile of a model version
 * (profile.json: every raw input column, every feature output slot and the
 * model outputs, computed at fit / training), the drift statistics (PSI,
 * Jensen-Shannon, KS, chi-squared) and the live monitor the server updates
 * per request over sliding windows. See docs/monitoring.md. */
#ifndef KEEL_PROFILE_H
#define KEEL_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "keel/column.h"
#include "keel/core.h"
#include "keel/feature.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Quantile sketch (src/feature/sketch.c)
 *
 * Log-spaced buckets (the DDSketch construction, Masson et al., VLDB 2019):
 * a value x with KL_QS_MIN_ABS <= |x| <= KL_QS_MAX_ABS goes to bucket
 * ceil(log_g |x|), g = (1+a)/(1-a), a = KL_QS_ALPHA, on its sign's side;
 * smaller magnitudes to the zero bucket; larger ones are clamped into the
 * last bucket and counted (`clamped`). Bound: kl_qs_quantile(q, p) returns
 * x' with |x' - x| <= a |x| for x the element of rank floor(p (n-1)) of the
 * values added (exact order statistic), for values inside the range (zero
 * bucket: |x'| = 0, |x| < KL_QS_MIN_ABS). Merge adds counts: merging the
 * sketches of two parts gives exactly the sketch of their concatenation.
 * Memory: one uint64 per bucket between the smallest and largest index
 * seen per sign (at most ~2,800 per sign at a = 0.01).
 * ================================================================== */

#define KL_QS_ALPHA   0.01
#define KL_QS_MIN_ABS 1e-9
#define KL_QS_MAX_ABS 1e15

typedef struct {
    int32_t lo; /* index of c[0] */
    uint32_t n; /* buckets held */
    uint64_t *c;
} kl_qs_side;

typedef struct {
    uint64_t count, zero, clamped;
    kl_qs_side pos, neg;
} kl_qsketch;

void kl_qs_init(kl_qsketch *q);
void kl_qs_free(kl_qsketch *q);
/* Adds w copies of x (NaN is ignored: count nulls outside). KL_ENOMEM. */
int kl_qs_add(kl_qsketch *q, double x, uint64_t w);
int kl_qs_merge(kl_qsketch *a, const kl_qsketch *b);
/* The p-quantile (0 <= p <= 1) as above; NaN when empty. */
double kl_qs_quantile(const kl_qsketch *q, double p);
/* Bucket index of |x| > 0 (for tests and serialisation). */
int32_t kl_qs_index(double absx);

/* ==================================================================
 * Fixed-bin histogram over edges e[0..n): bin 0 is x < e[0] (underflow),
 * bin i (1..n-1) is e[i-1] <= x < e[i] (the last one also takes x == e[n-1]),
 * bin n is x > e[n-1] (overflow). n >= 2; a NaN is never binned.
 * ================================================================== */

size_t kl_hist_bin(const double *edges, size_t n, double x);
/* Edges from exact quantiles of sorted values v[0..n): the values at ranks
 * floor(k (n-1) / nb) for k = 0..nb (min and max included), duplicates
 * dropped, then nextafter(max, +inf), so that the largest value has a bin of
 * its own (a column of d <= nb + 1 distinct values gets one bin per value).
 * Returns the edge count (2..nb + 2; 0 when n = 0) written to edges[nb + 2]. */
size_t kl_hist_edges(const double *sorted, size_t n, int nb, double *edges);

/* ==================================================================
 * Category counts: exact per key up to `cap` distinct keys; keys first
 * seen after that are counted together in `other_overflow` (the top-k then
 * is exact for the kept keys). Merge is exact below the cap.
 * ================================================================== */

typedef struct kl_catcount kl_catcount;
int kl_catcount_new(size_t cap, kl_catcount **out);
void kl_catcount_free(kl_catcount *c);
int kl_catcount_add(kl_catcount *c, const char *key, size_t n, uint64_t w);
int kl_catcount_merge(kl_catcount *a, const kl_catcount *b);
uint64_t kl_catcount_total(const kl_catcount *c);
size_t kl_catcount_distinct(const kl_catcount *c);
uint64_t kl_catcount_overflow(const kl_catcount *c);
/* The k most frequent keys (ties by byte order): keys[i] point into c
 * (valid until it changes or is freed), counts[i]; returns how many. */
size_t kl_catcount_top(const kl_catcount *c, size_t k, const char **keys, size_t *lens, uint64_t *counts);

/* ==================================================================
 * Drift statistics (src/feature/stats.c). p and q are counts over the same
 * n bins (reference, live).
 * ================================================================== */

/* Population stability index sum (a_i - b_i) ln(a_i / b_i) over the bin
 * proportions, each floored at KL_STAT_EPS (empty bins). */
#define KL_STAT_EPS 1e-4
double kl_stat_psi(const uint64_t *p, const uint64_t *q, size_t n);
/* Jensen-Shannon distance: sqrt of the JS divergence in bits, in [0, 1]. */
double kl_stat_js(const uint64_t *p, const uint64_t *q, size_t n);
/* Two-sample Kolmogorov-Smirnov statistic over binned data: the largest gap
 * between the two empirical CDFs at the bin edges. */
double kl_stat_ks(const uint64_t *p, const uint64_t *q, size_t n);
/* Asymptotic p-value of a two-sample KS statistic d for sizes n, m:
 * Q_KS(sqrt(ne) d) with ne = nm/(n+m), Stephens' small-sample correction
 * (Numerical Recipes 14.3). */
double kl_stat_ks_pvalue(double d, uint64_t n, uint64_t m);
/* Pearson chi-squared goodness of fit of live counts q against the
 * reference proportions of p (add-half smoothed so that a category the
 * reference never saw has a small, not zero, expectation); bins whose
 * expected count is under min_expected are pooled into one (Cochran's rule).
 * *dof gets the degrees of freedom (0: not testable). */
double kl_stat_chi2(const uint64_t *p, const uint64_t *q, size_t n, double min_expected, int *dof);
/* Upper tail P(X >= x) of a chi-squared variable with dof degrees. */
double kl_stat_chi2_pvalue(double x, int dof);
/* Its inverse: x with P(X >= x) = p (0 < p < 1); NaN otherwise. */
double kl_stat_chi2_quantile(double p, int dof);
/* The live values from which PSI and the JS distance over k bins holding
 * reference mass (m reference values) stay under psi and js with
 * probability 1 - alpha when the distribution has not changed (their
 * asymptotic chi-squared law with k - 1 degrees of freedom; see stats.c);
 * UINT64_MAX when no sample size is enough (k < 2, or a reference too small). */
uint64_t kl_stat_min_samples(int k, uint64_t m, double psi, double js, double alpha);

/* ==================================================================
 * Reference profile (src/feature/profile.c): profile.json
 * ================================================================== */

typedef enum { KL_PROF_INPUT, KL_PROF_FEATURE, KL_PROF_OUTPUT } kl_prof_role;
const char *kl_prof_role_name(int role); /* "input", "feature", "output" */

#define KL_PROF_BINS   10 /* histogram bins between min and max (deciles) */
#define KL_PROF_TOPK   64 /* categories kept per column */
#define KL_PROF_CATCAP 65536

typedef struct {
    char *name;
    int role;        /* kl_prof_role */
    int categorical; /* strings: top-k counts; else numbers: histogram + quantiles */
    uint64_t count;  /* rows seen (nulls included) */
    uint64_t nulls;
    double min, max, mean;
    kl_qsketch qs;
    size_t nedges; /* numbers: edges[nedges], bins[nedges + 1] */
    double *edges;
    uint64_t *bins;
    size_t ntop; /* categories: top[ntop], top_count[ntop], other */
    char **top;
    uint64_t *top_count;
    uint64_t other;
    uint64_t distinct;
    int complete; /* every distinct value is in top (an unseen one is unknown) */
} kl_colprof;

typedef struct {
    char feature_hash[65];
    uint64_t rows;
    size_t ncols;
    kl_colprof *cols;
    /* the transforms' counted fallbacks on the fit rows (unknown categories,
     * filled nulls, zero denominators, clamped log1p inputs, empty windows);
     * has_fallbacks 0 for a profile without them */
    int has_fallbacks;
    kl_features_counts fallbacks;
} kl_profile;

/* Profile of the fitted features f on columns cols (the fit rows): every
 * raw input column (cols matched by name) and every output slot (apply's
 * outputs over the same rows, pool NULL = default). */
int kl_profile_build(const kl_features *f, kl_column *const *cols, size_t ncols, kl_pool *pool, kl_profile **out,
                     kl_err *e);
/* kl_profile_build + kl_profile_save to path (what `features fit` and the
 * pipeline's features stage write next to features.json). */
int kl_profile_write(const kl_features *f, kl_column *const *cols, size_t ncols, const char *path, kl_err *e);
/* Adds (or replaces) a numeric column of role `role` from n values v[i *
 * stride] (NaN = null) — the model outputs on the training or evaluation rows. */
int kl_profile_add_numeric(kl_profile *p, const char *name, int role, const float *v, size_t n, size_t stride,
                           kl_err *e);
void kl_profile_free(kl_profile *p); /* NULL is a no-op */
/* {"format":"keel.profile/1", ...} written atomically. */
int kl_profile_save(const kl_profile *p, const char *path, kl_err *e);
int kl_profile_load(const char *path, kl_profile **out, kl_err *e);
int kl_profile_load_str(const char *text, size_t len, const char *name, kl_profile **out, kl_err *e);
/* Human summary (one line per column) for `keel models show`. */
void kl_profile_summary(const kl_profile *p, kl_buf *b);
/* The profile file next to a features.json path: same folder, "profile.json" (buf >= 1024). */
void kl_profile_path_for(const char *features_json, char *buf, size_t n);

/* ==================================================================
 * Live monitor (src/feature/monitor.c): per-version sliding-window
 * counts of the same kinds, updated per request without locks (one
 * shard per thread, merged on read), compared against the reference.
 * ================================================================== */

#define KL_MON_MAX_WINDOWS 8
#define KL_MON_SLOTS       12 /* a window is a ring of this many slots */
#define KL_MON_SHARDS      64 /* threads with their own shard; the rest share the last one */
#define KL_MON_MAX_BYTES   (64ull << 20) /* a monitor that could hold more (every shard) is refused */

typedef struct {
    int nwin;
    int64_t win_s[KL_MON_MAX_WINDOWS]; /* default 300, 3600, 86400 */
    double psi;                        /* PSI at or above: drift (default 0.2, "significant shift") */
    double js;                         /* JS distance at or above: drift (default 0.1) */
    double p_value;                    /* KS / chi-squared p-value below: drift (default 0.001) */
    uint64_t min_samples;              /* live values a window needs before it is tested (default 100) */
    double min_expected;               /* chi-squared: expected count per pooled bin (default 5) */
    double null_delta;                 /* live null ratio above the reference's by more: drift (default 0.05) */
    double unknown_ratio;              /* unknown categories above this share: drift (default 0.05) */
    double oob_ratio;                  /* values outside the reference [min, max] above this share (default 0.05) */
} kl_monitor_cfg;
void kl_monitor_cfg_default(kl_monitor_cfg *c);
/* "5m", "1h", "24h", "90s", "2d" → seconds; KL_EINVAL. */
int kl_monitor_parse_window(const char *s, int64_t *out);
/* The label of a window of s seconds in the shortest unit that divides it:
 * 300 -> "5m", 86400 -> "24h", 172800 -> "2d", 90 -> "90s" (the inverse of
 * kl_monitor_parse_window; /metrics' window label). */
void kl_monitor_window_name(int64_t s, char *buf, size_t n);

typedef struct kl_monitor kl_monitor;
/* Takes ownership of ref. f (may be NULL: no raw inputs) must outlive the
 * monitor. KL_ERANGE when it could hold more than KL_MON_MAX_BYTES with
 * every shard allocated (too many columns x windows). */
int kl_monitor_new(kl_profile *ref, const kl_features *f, const kl_monitor_cfg *cfg, kl_monitor **out, kl_err *e);
void kl_monitor_free(kl_monitor *m); /* NULL is a no-op */
const kl_profile *kl_monitor_profile(const kl_monitor *m);
/* Hot path, any thread, no locks; now_ns: a monotonic clock (tests inject it).
 * kl_monitor_observe: one row at once — its raw record (cJSON object; NULL:
 * none), its feature slots (NULL or a width other than the features': none)
 * and its outputs (NULL or fewer than the profile's: none); the three below
 * are it with one part each. */
void kl_monitor_observe(kl_monitor *m, const void *cjson_record, const float *slots, size_t width, const float *outs,
                        size_t k, int64_t now_ns);
void kl_monitor_record(kl_monitor *m, const void *cjson_record, int64_t now_ns);       /* raw inputs */
void kl_monitor_features(kl_monitor *m, const float *v, size_t width, int64_t now_ns); /* one row of slots */
void kl_monitor_outputs(kl_monitor *m, const float *v, size_t k, int64_t now_ns);      /* one row of outputs */
/* :predict's transform with the monitor on: kl_features_transform_record of
 * the monitor's features (out[width] in double), observing the record's raw
 * values as the transform read them (no second parse) and the slots as
 * float32, in one go. */
int kl_monitor_transform(kl_monitor *m, const kl_fstore *store, const void *cjson_record, double *out, int64_t now_ns,
                         kl_err *e);
/* Whether the profile has output columns (prediction drift is computed). */
int kl_monitor_has_outputs(const kl_monitor *m);
/* Bytes the monitor holds now, and at most (every shard allocated). */
size_t kl_monitor_bytes(const kl_monitor *m, size_t *max_bytes);

/* Statistics of one column over one window (NaN: not computed). */
enum {
    KL_DRIFT_PSI = 1,
    KL_DRIFT_JS = 2,
    KL_DRIFT_KS = 4,
    KL_DRIFT_CHI2 = 8,
    KL_DRIFT_NULL = 16,
    KL_DRIFT_UNKNOWN = 32,
    KL_DRIFT_OOB = 64
};
typedef struct {
    const char *column; /* valid until kl_monitor_free */
    int role, categorical, window;
    int64_t window_s;
    uint64_t n; /* live rows (nulls included) */
    uint64_t nulls;
    double null_ratio, ref_null_ratio;
    double psi, js, ks, ks_p, chi2, chi2_p, unknown_ratio, oob_ratio;
    int chi2_dof;
    int tested;   /* enough samples (min_samples non-null live values) */
    uint64_t psi_js_min; /* non-null values before PSI and JS are computed (>= min_samples; kl_stat_min_samples) */
    int temporal; /* a date or timestamp input: described, never flagged (time moves on) */
    int drift;  /* KL_DRIFT_* bits over the thresholds */
} kl_monitor_stat;
/* Every column x window (column-major: column c, window w at c * nwin + w);
 * *out malloc'ed (free()). */
int kl_monitor_stats(kl_monitor *m, int64_t now_ns, kl_monitor_stat **out, size_t *n, kl_err *e);
/* The live counts the statistics of column col (kl_monitor_stats' order)
 * compare in a window, over the reference's bins: numbers underflow, the
 * bins between the edges, overflow (nedges + 1); categories the top ones
 * and "other" (ntop + 1). *nb gets the count (at most cap written); ref
 * (may be NULL) the reference's counts over the same bins. */
int kl_monitor_live_bins(kl_monitor *m, int64_t now_ns, int window, size_t col, uint64_t *live, uint64_t *ref,
                         size_t cap, size_t *nb);
/* The transforms' fallbacks in a window: counts per kind over the :predict
 * rows (a row may count several), and the reference's ratios. */
#define KL_MON_FALLBACKS 5
const char *kl_monitor_fallback_name(int kind); /* unknown, null_filled, div_zero, clamped, empty_window */
typedef struct {
    uint64_t rows;
    uint64_t count[KL_MON_FALLBACKS];
    double ratio[KL_MON_FALLBACKS], ref_ratio[KL_MON_FALLBACKS]; /* NaN: no rows / no reference */
} kl_monitor_fallbacks;
int kl_monitor_fallback_stats(kl_monitor *m, int64_t now_ns, int window, kl_monitor_fallbacks *out);
/* Names of the KL_DRIFT_* bits set in d, comma separated, into buf. */
void kl_monitor_drift_names(int d, char *buf, size_t n);
/* JSON object {"windows": [...], "thresholds": {...}, "columns": [...]} */
int kl_monitor_json(kl_monitor *m, int64_t now_ns, kl_buf *b, kl_err *e);
const kl_monitor_cfg *kl_monitor_config(const kl_monitor *m);

#ifdef __cplusplus
}
#endif
#endif
