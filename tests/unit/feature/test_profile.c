/* Unit tests of profiles and monitoring (include/keel/profile.h): the
 * quantile sketch's relative error bound against exact order statistics and
 * its exact merge, histogram bins and quantile edges, category counts (exact,
 * merge, cap), the drift statistics against values computed with scipy
 * (1.10) at test-writing time, profile.json round trip, and the live
 * monitor's windows rolling over on an injected clock, with no drift on
 * same-distribution rows and drift on a shifted mean, a new category and
 * rising nulls. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../harness.h"
#include "keel/clickgen.h"
#include "keel/feature.h"
#include "keel/profile.h"

/* xorshift + Box-Muller: deterministic test data */
static uint64_t rs = 88172645463325252ull;
static double urand(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand()); }

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

KL_TEST(sketch_quantile_bound) {
    size_t n = 50000;
    double *v = malloc(n * sizeof *v);
    kl_qsketch q, a, b;
    kl_qs_init(&q);
    kl_qs_init(&a);
    kl_qs_init(&b);
    for (size_t i = 0; i < n; i++) {
        /* mixed signs, zeros, several decades */
        double x = i % 7 == 0 ? 0.0 : i % 3 == 0 ? -exp(3 * nrand()) : 100 * nrand();
        v[i] = x;
        KT_CHECK(kl_qs_add(&q, x, 1) == 0);
        KT_CHECK(kl_qs_add(i < n / 3 ? &a : &b, x, 1) == 0);
    }
    qsort(v, n, sizeof *v, dcmp);
    KT_CHECK(kl_qs_merge(&a, &b) == 0);
    KT_EQ_INT(a.count, n);
    for (int k = 0; k <= 1000; k++) {
        double p = k / 1000.0, exact = v[(size_t)floor(p * (double)(n - 1))];
        double est = kl_qs_quantile(&q, p);
        KT_CHECKF(fabs(est - exact) <= KL_QS_ALPHA * fabs(exact) + 1e-12, "p %g: %.9g vs exact %.9g", p, est, exact);
        /* merge(a, b) is the sketch of the concatenation: the same answers */
        KT_CHECKF(kl_qs_quantile(&a, p) == est, "merged p %g", p);
    }
    KT_CHECK(isnan(kl_qs_quantile(&(kl_qsketch){0}, 0.5)));
    kl_qs_free(&q);
    kl_qs_free(&a);
    kl_qs_free(&b);
    free(v);
}

KL_TEST(sketch_hist_bins_and_edges) {
    double e[] = {1, 2, 4};
    KT_EQ_INT(kl_hist_bin(e, 3, 0.5), 0);
    KT_EQ_INT(kl_hist_bin(e, 3, 1), 1);
    KT_EQ_INT(kl_hist_bin(e, 3, 1.5), 1);
    KT_EQ_INT(kl_hist_bin(e, 3, 2), 2);
    KT_EQ_INT(kl_hist_bin(e, 3, 4), 2); /* the last bin is closed */
    KT_EQ_INT(kl_hist_bin(e, 3, 4.5), 3);
    double v[101], out[12];
    for (int i = 0; i <= 100; i++) v[i] = i;
    size_t m = kl_hist_edges(v, 101, 10, out);
    KT_EQ_INT(m, 12);
    KT_NEAR(out[0], 0, 0);
    KT_NEAR(out[5], 50, 0);
    KT_NEAR(out[10], 100, 0);
    KT_CHECK(out[11] > 100 && out[11] == nextafter(100, 200));
    KT_EQ_INT(kl_hist_bin(out, 12, 100), 11); /* the max in a bin of its own */
    KT_EQ_INT(kl_hist_bin(out, 12, 99.5), 10);
    KT_EQ_INT(kl_hist_bin(out, 12, 100.5), 12);
    /* a 0/1 column (a one-hot slot): duplicates dropped, each value its own bin */
    double d[6] = {0, 0, 0, 0, 1, 1};
    KT_EQ_INT(kl_hist_edges(d, 6, 10, out), 3);
    KT_EQ_INT(kl_hist_bin(out, 3, 0), 1);
    KT_EQ_INT(kl_hist_bin(out, 3, 1), 2);
    /* the long edge lists of a loaded profile: binary search, same answers */
    double big[40];
    for (int i = 0; i < 40; i++) big[i] = i;
    for (double x = -1; x <= 40; x += 0.5) {
        size_t want = x < 0 ? 0 : x > 39 ? 40 : x == 39 ? 39 : (size_t)floor(x) + 1;
        KT_EQ_INT(kl_hist_bin(big, 40, x), want);
    }
    /* a constant column (an unknown-category slot never hit in training):
     * its value has a bin of its own, anything else is out of range */
    double z[3] = {0, 0, 0};
    KT_EQ_INT(kl_hist_edges(z, 3, 10, out), 2);
    KT_EQ_INT(kl_hist_bin(out, 2, 0), 1);
    KT_EQ_INT(kl_hist_bin(out, 2, -1), 0);
    KT_EQ_INT(kl_hist_bin(out, 2, 1), 2);
}

KL_TEST(sketch_catcount_merge_topk_cap) {
    kl_catcount *all = NULL, *a = NULL, *b = NULL, *capd = NULL;
    KT_CHECK(kl_catcount_new(1000, &all) == 0 && kl_catcount_new(1000, &a) == 0 && kl_catcount_new(1000, &b) == 0);
    KT_CHECK(kl_catcount_new(3, &capd) == 0);
    const char *keys[] = {"books", "toys", "garden", "music", "food"};
    uint64_t want[5] = {0};
    for (int i = 0; i < 2000; i++) {
        int k = (int)(urand() * urand() * 5);
        want[k]++;
        kl_catcount_add(all, keys[k], strlen(keys[k]), 1);
        kl_catcount_add(i % 2 ? a : b, keys[k], strlen(keys[k]), 1);
        kl_catcount_add(capd, keys[k], strlen(keys[k]), 1);
    }
    KT_CHECK(kl_catcount_merge(a, b) == 0);
    const char *tk[5], *tm[5];
    size_t tl[5], ml[5];
    uint64_t tc[5], mc[5];
    size_t n = kl_catcount_top(all, 5, tk, tl, tc), nm = kl_catcount_top(a, 5, tm, ml, mc);
    KT_EQ_INT(n, 5);
    KT_EQ_INT(nm, 5);
    for (size_t i = 0; i < n; i++) {
        KT_CHECK(tl[i] == ml[i] && !memcmp(tk[i], tm[i], tl[i]) && tc[i] == mc[i]);
        if (i) KT_CHECK(tc[i - 1] >= tc[i]);
        int k = 0;
        while (strncmp(keys[k], tk[i], tl[i]) || strlen(keys[k]) != tl[i]) k++;
        KT_EQ_INT(tc[i], want[k]);
    }
    KT_EQ_INT(kl_catcount_total(a), 2000);
    /* over the cap: 3 keys exact, the later ones counted together */
    KT_EQ_INT(kl_catcount_distinct(capd), 3);
    uint64_t kept = 0;
    n = kl_catcount_top(capd, 5, tk, tl, tc);
    for (size_t i = 0; i < n; i++) kept += tc[i];
    KT_EQ_INT(kept + kl_catcount_overflow(capd), 2000);
    kl_catcount_free(all);
    kl_catcount_free(a);
    kl_catcount_free(b);
    kl_catcount_free(capd);
}

/* expected values: numpy / scipy 1.10 (scipy.spatial.distance.jensenshannon base 2,
 * scipy.special.kolmogorov, scipy.stats.chi2.sf) */
KL_TEST(stats_against_scipy) {
    uint64_t p[] = {10, 20, 30, 40}, q[] = {15, 25, 25, 35};
    KT_NEAR(kl_stat_psi(p, q, 4), 0.047223080442, 1e-10);
    KT_NEAR(kl_stat_js(p, q, 4), 0.0921080456871, 1e-10);
    KT_NEAR(kl_stat_ks(p, q, 4), 0.1, 1e-12);
    KT_NEAR(kl_stat_js(p, p, 4), 0, 1e-12);
    KT_NEAR(kl_stat_psi(p, p, 4), 0, 1e-12);
    KT_NEAR(kl_stat_ks_pvalue(0.05, 1000, 5000), 0.029916638121, 1e-9);
    KT_NEAR(kl_stat_chi2_pvalue(12.5, 3), 0.00585266259333, 1e-11);
    KT_NEAR(kl_stat_chi2_pvalue(3.2, 1), 0.0736382701203, 1e-11);
    KT_NEAR(kl_stat_chi2_pvalue(150, 40) / 1.23979215416e-14, 1, 1e-8);
    int dof = 0;
    /* a category the reference never saw, with add-half smoothing */
    uint64_t rp[] = {100, 200, 700, 0}, lq[] = {12, 18, 50, 20};
    KT_NEAR(kl_stat_chi2(rp, lq, 4, 5, &dof), 7982.30910643, 1e-6);
    KT_EQ_INT(dof, 3);
    /* small expected counts pooled (Cochran) */
    uint64_t rp2[] = {500, 300, 150, 40, 10}, lq2[] = {52, 28, 14, 2, 4};
    double x = kl_stat_chi2(rp2, lq2, 5, 5, &dof);
    KT_NEAR(x, 0.448398377971, 1e-9);
    KT_EQ_INT(dof, 3);
    KT_NEAR(kl_stat_chi2_pvalue(x, dof), 0.930072662578, 1e-9);
    /* PSI floors empty bins instead of dividing by zero */
    uint64_t e1[] = {0, 100}, e2[] = {50, 50};
    KT_CHECK(isfinite(kl_stat_psi(e1, e2, 2)) && kl_stat_psi(e1, e2, 2) > 1);
}

static const char *SPEC = "features:\n"
                          "  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}\n"
                          "  - {name: cat, transform: onehot, input: category, type: string, max_size: 4}\n"
                          "  - {name: price_log, transform: log1p, input: item_price, type: float64, fill: 0}\n";

static int fitted(kl_features **f, kl_column ***cols, size_t *ncols, kl_err *e) {
    if (kl_features_spec_parse(SPEC, strlen(SPEC), "spec.yaml", f, e)) return -1;
    if (kl_features_read_data("clickgen:4000:3", *f, 0, cols, ncols, e)) return -1;
    return kl_features_fit(*f, *cols, *ncols, e);
}

KL_TEST(profile_build_save_load) {
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    KT_OK(fitted(&f, &cols, &ncols, &e), &e);
    kl_profile *p = NULL, *q = NULL;
    KT_OK(kl_profile_build(f, cols, ncols, NULL, &p, &e), &e);
    /* 2 raw inputs + width slots */
    KT_EQ_INT(p->ncols, 2 + kl_features_width(f));
    KT_EQ_STR(p->cols[0].name, "item_price");
    KT_CHECK(!p->cols[0].categorical && p->cols[0].nedges >= 2);
    uint64_t s = 0;
    for (size_t i = 0; i <= p->cols[0].nedges; i++) s += p->cols[0].bins[i];
    KT_EQ_INT(s + p->cols[0].nulls, p->cols[0].count);
    KT_CHECK(p->cols[1].categorical && p->cols[1].ntop > 1 && p->cols[1].complete);
    float outs[6] = {0.1f, 0.9f, 0.2f, 0.8f, NAN, 0.5f};
    KT_OK(kl_profile_add_numeric(p, "y[0]", KL_PROF_OUTPUT, outs, 3, 2, &e), &e);
    KT_OK(kl_profile_save(p, kt_path("profile.json"), &e), &e);
    KT_OK(kl_profile_load(kt_path("profile.json"), &q, &e), &e);
    KT_EQ_INT(q->ncols, p->ncols);
    KT_CHECK(p->has_fallbacks && q->has_fallbacks && q->fallbacks.rows == 4000);
    KT_EQ_INT(q->fallbacks.null_filled, p->fallbacks.null_filled);
    KT_EQ_INT(q->fallbacks.unknown, p->fallbacks.unknown);
    for (size_t i = 0; i < p->ncols; i++) {
        const kl_colprof *a = &p->cols[i], *b = &q->cols[i];
        KT_EQ_STR(a->name, b->name);
        KT_CHECK(a->role == b->role && a->categorical == b->categorical && a->count == b->count &&
                 a->nulls == b->nulls);
        KT_CHECK(a->nedges == b->nedges && a->ntop == b->ntop && a->other == b->other);
        for (size_t k = 0; k < a->nedges; k++) KT_CHECK(a->edges[k] == b->edges[k] && a->bins[k] == b->bins[k]);
        for (size_t k = 0; k < a->ntop; k++)
            KT_CHECK(!strcmp(a->top[k], b->top[k]) && a->top_count[k] == b->top_count[k]);
        KT_CHECK(kl_qs_quantile(&a->qs, 0.5) == kl_qs_quantile(&b->qs, 0.5) || (a->qs.count == 0 && b->qs.count == 0));
    }
    KT_EQ_INT(q->cols[q->ncols - 1].role, KL_PROF_OUTPUT);
    KT_EQ_INT(q->cols[q->ncols - 1].count, 3);
    kl_buf b;
    kl_buf_init(&b);
    kl_profile_summary(q, &b);
    KT_CONTAINS(b.data, "item_price");
    kl_buf_free(&b);
    kl_profile *bad = NULL;
    const char *broken = "{\"format\":\"keel.profile/1\",\"columns\":[{\"name\":\"x\"}]}";
    KT_CHECK(kl_profile_load_str(broken, strlen(broken), "p.json", &bad, &e) != 0);
    KT_CONTAINS(e.msg, "columns[0]");
    KT_CHECK(bad == NULL);
    /* counts that are not whole numbers in 0..2^53 (1e300 would not convert to an integer) */
    const char *huge =
        "{\"format\":\"keel.profile/1\",\"columns\":[{\"name\":\"x\",\"role\":\"output\","
        "\"kind\":\"numeric\",\"count\":2,\"nulls\":0,\"edges\":[0,1],\"bins\":[0,1e300,1],"
        "\"quantiles\":{\"count\":0,\"zero\":0,\"clamped\":0,\"pos_lo\":0,\"pos\":[],\"neg_lo\":0,\"neg\":[]}}]}";
    kl_err_clear(&e);
    KT_CHECK(kl_profile_load_str(huge, strlen(huge), "p.json", &bad, &e) != 0);
    KT_CONTAINS(e.msg, "malformed edges/bins");
    const char *frac =
        "{\"format\":\"keel.profile/1\",\"columns\":[{\"name\":\"c\",\"role\":\"input\","
        "\"kind\":\"categorical\",\"count\":2,\"nulls\":0,\"top\":[[\"a\",1.5]],\"other\":0,\"distinct\":1}]}";
    kl_err_clear(&e);
    KT_CHECK(kl_profile_load_str(frac, strlen(frac), "p.json", &bad, &e) != 0);
    kl_profile_free(p);
    kl_profile_free(q);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
}

/* one raw record of row r of the click log, with an optional change */
static void *record(kl_column **cols, size_t ncols, size_t r, double shift, const char *cat, int null_price) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < ncols; i++) {
        const kl_column *c = cols[i];
        if (!strcmp(c->name, "item_price")) {
            if (null_price || kl_column_is_null(c, r)) cJSON_AddNullToObject(o, c->name);
            else cJSON_AddNumberToObject(o, c->name, kl_column_get_f64(c, r) + shift);
        } else if (!strcmp(c->name, "category")) {
            size_t n;
            const char *s = kl_column_get_str(c, r, &n);
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)n, s);
            cJSON_AddStringToObject(o, c->name, cat ? cat : buf);
        } else if (!strcmp(c->name, "ts")) {
            cJSON_AddNumberToObject(o, c->name, (double)kl_column_get_i64(c, r));
        }
    }
    return o;
}

static const kl_monitor_stat *find_stat(const kl_monitor_stat *st, size_t n, const char *col, int w) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(st[i].column, col) && st[i].window == w) return &st[i];
    return NULL;
}

/* feeds rows [r0, r1) as records (raw inputs and feature slots) at time t */
static int feed(kl_monitor *m, const kl_features *f, kl_column **cols, size_t ncols, size_t r0, size_t r1, int64_t t,
                double shift, const char *newcat, double null_share) {
    float slots[64];
    kl_err e = {0};
    for (size_t r = r0; r < r1; r++) {
        const char *cat = newcat && r % 5 == 0 ? newcat : NULL; /* 20 % */
        int null_price = null_share > 0 && (double)(r % 100) < null_share * 100;
        cJSON *o = record(cols, ncols, r, shift, cat, null_price);
        kl_monitor_record(m, o, t);
        double d[64];
        if (kl_features_transform_record(f, NULL, o, d, NULL, &e)) {
            cJSON_Delete(o);
            return -1;
        }
        for (size_t k = 0; k < kl_features_width(f); k++) slots[k] = (float)d[k];
        kl_monitor_features(m, slots, kl_features_width(f), t);
        cJSON_Delete(o);
    }
    return 0;
}

KL_TEST(monitor_windows_and_drift) {
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL, **live = NULL;
    size_t ncols = 0, nlive = 0;
    KT_OK(fitted(&f, &cols, &ncols, &e), &e);
    kl_profile *p = NULL;
    KT_OK(kl_profile_build(f, cols, ncols, NULL, &p, &e), &e);
    double sd = 0;
    for (size_t i = 0; i < p->ncols; i++)
        if (!strcmp(p->cols[i].name, "item_price")) {
            /* the standard deviation from the price_z feature's fitted state is not public: estimate it */
            double m = p->cols[i].mean, s2 = 0;
            size_t n = 0;
            for (size_t r = 0; r < cols[0]->len; r++)
                for (size_t c = 0; c < ncols; c++)
                    if (!strcmp(cols[c]->name, "item_price") && !kl_column_is_null(cols[c], r)) {
                        double x = kl_column_get_f64(cols[c], r);
                        s2 += (x - m) * (x - m);
                        n++;
                    }
            sd = sqrt(s2 / (double)n);
        }
    KT_CHECK(sd > 0);
    /* held-back rows: another seed of the same generator */
    KT_OK(kl_features_read_data("clickgen:6000:11", f, 0, &live, &nlive, &e), &e);
    kl_monitor_cfg cfg;
    kl_monitor_cfg_default(&cfg);
    kl_monitor *m = NULL;
    KT_OK(kl_monitor_new(p, f, &cfg, &m, &e), &e);
    int64_t t0 = 1000LL * 1000000000LL * 86400; /* day 1000 of a monotonic clock */
    KT_CHECK(feed(m, f, live, nlive, 0, 1000, t0, 0, NULL, 0) == 0);
    kl_monitor_stat *st = NULL;
    size_t n = 0;
    KT_OK(kl_monitor_stats(m, t0, &st, &n, &e), &e);
    for (size_t i = 0; i < n; i++) {
        KT_CHECKF(st[i].drift == 0, "same distribution: %s window %d drift %d (psi %g ks_p %g chi2_p %g)", st[i].column,
                  st[i].window, st[i].drift, st[i].psi, st[i].ks_p, st[i].chi2_p);
        KT_EQ_INT(st[i].n, 1000);
    }
    free(st);
    /* 6 minutes later the 5-minute window has rolled over; 1 h and 24 h still hold the rows */
    int64_t t1 = t0 + 360LL * 1000000000LL;
    KT_OK(kl_monitor_stats(m, t1, &st, &n, &e), &e);
    KT_EQ_INT(find_stat(st, n, "item_price", 0)->n, 0);
    KT_EQ_INT(find_stat(st, n, "item_price", 1)->n, 1000);
    KT_EQ_INT(find_stat(st, n, "item_price", 2)->n, 1000);
    free(st);
    /* a 0.5 sigma mean shift in item_price, a new category at 20 %, nulls at 20 % */
    KT_CHECK(feed(m, f, live, nlive, 1000, 2000, t1, 0.5 * sd, NULL, 0) == 0);
    KT_OK(kl_monitor_stats(m, t1, &st, &n, &e), &e);
    const kl_monitor_stat *s = find_stat(st, n, "item_price", 0);
    KT_EQ_INT(s->n, 1000);
    KT_CHECKF(s->drift & KL_DRIFT_KS, "shift: ks %g p %g psi %g", s->ks, s->ks_p, s->psi);
    KT_CHECK(find_stat(st, n, "price_z", 0)->drift & KL_DRIFT_KS);
    KT_CHECK(find_stat(st, n, "category", 0)->drift == 0);
    free(st);
    int64_t t2 = t1 + 360LL * 1000000000LL;
    KT_CHECK(feed(m, f, live, nlive, 2000, 3000, t2, 0, "gadgets", 0.2) == 0);
    KT_OK(kl_monitor_stats(m, t2, &st, &n, &e), &e);
    s = find_stat(st, n, "category", 0);
    KT_CHECKF((s->drift & KL_DRIFT_CHI2) && (s->drift & KL_DRIFT_UNKNOWN), "new category: drift %d unknown %g",
              s->drift, s->unknown_ratio);
    KT_NEAR(s->unknown_ratio, 0.2, 0.01);
    /* the one-hot slots see it too: 0 and 1 are separate bins */
    s = find_stat(st, n, "cat=<unknown>", 0);
    KT_CHECKF(s && (s->drift & (KL_DRIFT_PSI | KL_DRIFT_JS | KL_DRIFT_KS)), "cat=<unknown>: drift %d psi %g",
              s ? s->drift : -1, s ? s->psi : 0);
    s = find_stat(st, n, "item_price", 0);
    KT_CHECK(s->drift & KL_DRIFT_NULL);
    KT_NEAR(s->null_ratio, 0.2, 0.01);
    free(st);
    kl_buf b;
    kl_buf_init(&b);
    KT_OK(kl_monitor_json(m, t2, &b, &e), &e);
    void *doc = NULL;
    KT_OK(kl_json_parse(b.data, b.len, "monitor", &doc, &e), &e);
    cJSON_Delete(doc);
    KT_CONTAINS(b.data, "\"null_ratio\"");
    kl_buf_free(&b);
    size_t maxb = 0, cur = kl_monitor_bytes(m, &maxb);
    KT_CHECK(cur > 0 && maxb >= cur && maxb < (64u << 20));
    kl_monitor_free(m);
    kl_features_free_columns(cols, ncols);
    kl_features_free_columns(live, nlive);
    kl_features_free(f);
}

/* the server's path (kl_monitor_transform: the raw values as the transform
 * read them) counts exactly what a separate parse of the record does */
KL_TEST(monitor_transform_equals_record_path) {
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    KT_OK(fitted(&f, &cols, &ncols, &e), &e);
    kl_profile *p1 = NULL, *p2 = NULL;
    KT_OK(kl_profile_build(f, cols, ncols, NULL, &p1, &e), &e);
    KT_OK(kl_profile_build(f, cols, ncols, NULL, &p2, &e), &e);
    kl_monitor_cfg cfg;
    kl_monitor_cfg_default(&cfg);
    kl_monitor *a = NULL, *b = NULL;
    KT_OK(kl_monitor_new(p1, f, &cfg, &a, &e), &e);
    KT_OK(kl_monitor_new(p2, f, &cfg, &b, &e), &e);
    int64_t t = 5LL * 86400 * 1000000000LL;
    KT_CHECK(feed(a, f, cols, ncols, 0, 600, t, 1.0, "gadgets", 0.1) == 0);
    double d[64];
    for (size_t r = 0; r < 600; r++) {
        cJSON *o = record(cols, ncols, r, 1.0, r % 5 == 0 ? "gadgets" : NULL, (double)(r % 100) < 10);
        if (r == 7) cJSON_ReplaceItemInObject(o, "category", cJSON_CreateNumber(42)); /* a number as a string field */
        int rc = kl_monitor_transform(b, NULL, o, d, t, &e);
        cJSON_Delete(o);
        KT_OK(rc, &e);
    }
    /* the transforms' fallbacks on the server's path: nulls filled twice per null
     * price (price_z, price_log), unknown categories (max_size 4 of 6, and gadgets) */
    kl_monitor_fallbacks fb;
    KT_OK(kl_monitor_fallback_stats(b, t, 0, &fb), &e);
    KT_EQ_INT(fb.rows, 600);
    KT_NEAR(fb.ratio[1], 2 * 0.1, 0.03);
    KT_CHECK(fb.ref_ratio[1] > 0 && fb.ref_ratio[1] < 0.05);
    KT_CHECK(fb.ratio[0] > fb.ref_ratio[0] + 0.1);
    kl_monitor_stat *sa = NULL, *sb = NULL;
    size_t na = 0, nb = 0;
    KT_OK(kl_monitor_stats(a, t, &sa, &na, &e), &e);
    KT_OK(kl_monitor_stats(b, t, &sb, &nb, &e), &e);
    KT_EQ_INT(na, nb);
    for (size_t i = 0; i < na; i++) {
        KT_EQ_STR(sa[i].column, sb[i].column);
        KT_EQ_INT(sa[i].n, sb[i].n);
        KT_EQ_INT(sa[i].nulls, sb[i].nulls);
        if (!strcmp(sa[i].column, "category")) /* b's row 7 is the unknown category "42" */
            KT_NEAR(sb[i].unknown_ratio - sa[i].unknown_ratio, 1.0 / 600, 1e-12);
        else if (strncmp(sa[i].column, "cat", 3)) /* the price columns: identical (600 rows: PSI not yet computed) */
            KT_CHECKF(isfinite(sa[i].ks) && sa[i].ks == sb[i].ks && isnan(sa[i].psi) == isnan(sb[i].psi) &&
                          (isnan(sa[i].psi) || sa[i].psi == sb[i].psi),
                      "%s: ks %g vs %g, psi %g vs %g", sa[i].column, sa[i].ks, sb[i].ks, sa[i].psi, sb[i].psi);
    }
    free(sa);
    free(sb);
    kl_monitor_free(a);
    kl_monitor_free(b);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
}

/* more threads than shards: exclusive shards (accumulators) and the shared
 * one (atomic adds) together count every row once, merged on read */
typedef struct {
    kl_monitor *m;
    size_t width;
    int64_t t;
} thr_arg;
static void *thr_feed(void *p) {
    thr_arg *a = p;
    float row[64] = {0};
    for (int i = 0; i < 100; i++) {
        row[0] = (float)(i % 10);
        kl_monitor_features(a->m, row, a->width, a->t + i * 1000000LL);
    }
    return NULL;
}

KL_TEST(monitor_threads_merge) {
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    KT_OK(fitted(&f, &cols, &ncols, &e), &e);
    kl_profile *p = NULL;
    KT_OK(kl_profile_build(f, cols, ncols, NULL, &p, &e), &e);
    kl_monitor_cfg cfg;
    kl_monitor_cfg_default(&cfg);
    kl_monitor *m = NULL;
    KT_OK(kl_monitor_new(p, f, &cfg, &m, &e), &e);
    enum { NT = KL_MON_SHARDS + 8 };
    pthread_t th[NT];
    thr_arg a = {m, kl_features_width(f), 9LL * 86400 * 1000000000LL};
    for (int i = 0; i < NT; i++) KT_CHECK(pthread_create(&th[i], NULL, thr_feed, &a) == 0);
    kl_monitor_stat *st = NULL;
    size_t n = 0;
    for (int r = 0; r < 20; r++) { /* reads while the writers write (a scrape during traffic) */
        KT_OK(kl_monitor_stats(m, a.t + 50000000LL, &st, &n, &e), &e);
        free(st);
        st = NULL;
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    KT_OK(kl_monitor_stats(m, a.t + 200000000LL, &st, &n, &e), &e);
    const kl_monitor_stat *s = find_stat(st, n, "price_z", 0);
    KT_EQ_INT(s->n, NT * 100);
    KT_EQ_INT(find_stat(st, n, "price_z", 2)->n, NT * 100);
    free(st);
    size_t maxb = 0, cur = kl_monitor_bytes(m, &maxb);
    KT_CHECK(cur > 0 && cur <= maxb);
    kl_monitor_free(m);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
}

KL_TEST(monitor_parse_window) {
    int64_t s = 0;
    KT_CHECK(kl_monitor_parse_window("5m", &s) == 0 && s == 300);
    KT_CHECK(kl_monitor_parse_window("24h", &s) == 0 && s == 86400);
    KT_CHECK(kl_monitor_parse_window("90s", &s) == 0 && s == 90);
    KT_CHECK(kl_monitor_parse_window("2d", &s) == 0 && s == 172800);
    KT_CHECK(kl_monitor_parse_window("5x", &s) != 0);
    KT_CHECK(kl_monitor_parse_window("-1m", &s) != 0);
    KT_CHECK(kl_monitor_parse_window("", &s) != 0);
}

/* features fit reads no numeric label (it does not need it): the profile of
 * the fit rows is built from the slots alone, the label is not required */
KL_TEST(profile_build_without_label_column) {
    const char *spec =
        "label: {column: clicked, type: int32}\n"
        "features:\n  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}\n";
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    kl_profile *p = NULL;
    KT_OK(kl_features_spec_parse(spec, strlen(spec), "spec.yaml", &f, &e), &e);
    KT_OK(kl_features_read_data("clickgen:500:2", f, 0, &cols, &ncols, &e), &e);
    kl_column *nolabel[8];
    size_t n = 0;
    for (size_t i = 0; i < ncols && n < 8; i++)
        if (strcmp(cols[i]->name, "clicked")) nolabel[n++] = cols[i];
    KT_CHECK(n == ncols - 1);
    KT_OK(kl_features_fit(f, nolabel, n, &e), &e);
    KT_OK(kl_profile_build(f, nolabel, n, NULL, &p, &e), &e);
    KT_EQ_INT(p->ncols, 2); /* item_price, price_z: the label is not profiled */
    KT_EQ_INT(p->cols[1].count, 500);
    kl_profile_free(p);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
}

/* the memory cap: a monitor that could hold more than KL_MON_MAX_BYTES with
 * every shard allocated (500 numeric columns x 3 windows: ~71 MB) is refused
 * naming the sizes; the same columns over one window fit */
KL_TEST(monitor_memory_cap) {
    kl_err e = {0};
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i; /* 64 distinct values: 10 decile bins */
    size_t maxb = 0;
    for (int nwin = 3; nwin >= 1; nwin -= 2) {
        kl_profile *p = calloc(1, sizeof *p);
        KT_CHECK(p != NULL);
        char name[32];
        for (int c = 0; c < 500; c++) {
            snprintf(name, sizeof name, "y[%d]", c);
            KT_OK(kl_profile_add_numeric(p, name, KL_PROF_OUTPUT, v, 64, 1, &e), &e);
        }
        kl_monitor_cfg cfg;
        kl_monitor_cfg_default(&cfg);
        cfg.nwin = nwin;
        kl_monitor *m = NULL;
        int rc = kl_monitor_new(p, NULL, &cfg, &m, &e); /* takes p, also on failure */
        if (nwin == 3) {
            KT_EQ_INT(rc, KL_ERANGE);
            KT_CHECK(m == NULL);
            KT_CONTAINS(kl_err_what(&e), "cap of 64 MB");
            kl_err_clear(&e);
        } else {
            KT_OK(rc, &e);
            kl_monitor_bytes(m, &maxb);
            KT_CHECK(maxb > 0 && maxb <= KL_MON_MAX_BYTES);
            kl_monitor_free(m);
        }
    }
}

/* the PSI/JS minimum sample size: the chi-squared quantile against scipy
 * (chi2.isf), the formula's values, and a monitor that leaves PSI and JS of
 * a small same-distribution window uncomputed (their noise floor is over
 * the thresholds there) while KS is tested from min_samples */
KL_TEST(stats_min_samples_psi_js) {
    KT_NEAR(kl_stat_chi2_quantile(0.001, 1), 10.827566170662733, 1e-6);
    KT_NEAR(kl_stat_chi2_quantile(0.001, 10), 29.58829844507442, 1e-6);
    KT_NEAR(kl_stat_chi2_quantile(0.05, 3), 7.814727903251178, 1e-6);
    /* 11 filled bins, 4,800 reference values, the defaults: JS decides, 1 / (8 ln2 0.01 / 29.588 - 1/4800) */
    uint64_t n = kl_stat_min_samples(11, 4800, 0.2, 0.1, 0.001);
    KT_NEAR((double)n, ceil(1 / (8 * M_LN2 * 0.01 / 29.58829844507442 - 1.0 / 4800)), 1);
    KT_CHECK(n > 500 && n < 700);
    KT_CHECK(kl_stat_min_samples(2, 4800, 0.2, 0.1, 0.001) < n);     /* fewer bins, fewer values */
    KT_EQ_INT(kl_stat_min_samples(11, 50, 0.2, 0.1, 0.001), UINT64_MAX); /* a reference too small */
    KT_EQ_INT(kl_stat_min_samples(1, 4800, 0.2, 0.1, 0.001), UINT64_MAX);
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL, **live = NULL;
    size_t ncols = 0, nlive = 0;
    KT_OK(fitted(&f, &cols, &ncols, &e), &e);
    kl_profile *p = NULL;
    KT_OK(kl_profile_build(f, cols, ncols, NULL, &p, &e), &e);
    KT_OK(kl_features_read_data("clickgen:6000:12", f, 0, &live, &nlive, &e), &e);
    kl_monitor_cfg cfg;
    kl_monitor_cfg_default(&cfg);
    kl_monitor *m = NULL;
    KT_OK(kl_monitor_new(p, f, &cfg, &m, &e), &e);
    int64_t t0 = 2000LL * 1000000000LL * 86400;
    KT_CHECK(feed(m, f, live, nlive, 0, 150, t0, 0, NULL, 0) == 0);
    kl_monitor_stat *st = NULL;
    size_t ns = 0;
    KT_OK(kl_monitor_stats(m, t0, &st, &ns, &e), &e);
    const kl_monitor_stat *s = find_stat(st, ns, "item_price", 0);
    KT_CHECKF(s->tested && isfinite(s->ks_p) && isnan(s->psi) && isnan(s->js) && s->psi_js_min > 150,
              "150 rows: tested %d ks_p %g psi %g js %g min %llu", s->tested, s->ks_p, s->psi, s->js,
              (unsigned long long)s->psi_js_min);
    for (size_t i = 0; i < ns; i++) KT_CHECKF(st[i].drift == 0, "%s: drift %d", st[i].column, st[i].drift);
    uint64_t need = s->psi_js_min;
    free(st);
    KT_CHECK(feed(m, f, live, nlive, 150, need + 20, t0, 0, NULL, 0) == 0); /* nulls: a few more rows */
    KT_OK(kl_monitor_stats(m, t0, &st, &ns, &e), &e);
    s = find_stat(st, ns, "item_price", 0);
    KT_CHECKF(isfinite(s->psi) && isfinite(s->js), "%llu rows: psi %g js %g", (unsigned long long)s->n, s->psi, s->js);
    free(st);
    kl_monitor_free(m);
    kl_features_free_columns(cols, ncols);
    kl_features_free_columns(live, nlive);
    kl_features_free(f);
}
