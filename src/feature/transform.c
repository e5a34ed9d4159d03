/* The transform library: the one per-value evaluator of every feature kind,
 * shared by the offline columnar path (apply.c) and the online one-record
 * path (online.c); window aggregation over an ordered event slice; XXH64
 * (the platform-stable hash of hash_bucket); value gathering from columns and
 * JSON fields. Nothing here reads a clock, the environment or globals. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "feature/feature_int.h"

/* ==================================================================
 * Names
 * ================================================================== */

static const char *const tf_names[TF_COUNT] = {
    "passthrough", "fill_null", "clip", "log1p", "standardize", "minmax", "bucketize",
    "onehot", "index", "hash_bucket", "datepart", "time_since", "ratio", "diff", "window"};
static const char *const dp_names[DP_COUNT] = {"hour", "minute", "weekday", "day_of_year",
                                               "day_of_month", "month", "year"};
static const char *const wa_names[WA_COUNT_] = {"count", "sum", "mean", "min", "max", "last",
                                                "mean_interval", "since_last"};

const char *kl__tf_name(tf_kind k) { return (unsigned)k < TF_COUNT ? tf_names[k] : "?"; }
const char *kl__dp_name(dp_part p) { return (unsigned)p < DP_COUNT ? dp_names[p] : "?"; }
const char *kl__wa_name(wa_agg a) { return (unsigned)a < WA_COUNT_ ? wa_names[a] : "?"; }
int kl__tf_parse(const char *s, tf_kind *out) {
    for (int i = 0; i < TF_COUNT; i++)
        if (!strcmp(s, tf_names[i])) { *out = (tf_kind)i; return KL_OK; }
    if (!strcmp(s, "cast")) { *out = TF_PASSTHROUGH; return KL_OK; }
    return KL_EINVAL;
}

int kl__tf_needs_fit(const feat *F) {
    switch (F->kind) {
    case TF_STANDARDIZE: case TF_MINMAX: case TF_ONEHOT: case TF_INDEX: return 1;
    case TF_BUCKETIZE: return F->quantiles > 0;
    default: return 0;
    }
}

/* ==================================================================
 * XXH64 (Yann Collet's xxHash, 64-bit), written out: little-endian reads,
 * so the same bytes hash the same on every platform.
 * ================================================================== */

#define P1 11400714785074694791ULL
#define P2 14029467366897019727ULL
#define P3 1609587929392839161ULL
#define P4 9650029242287828579ULL
#define P5 2870177450012600261ULL

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t round1(uint64_t acc, uint64_t in) {
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}
static inline uint64_t merge(uint64_t acc, uint64_t v) {
    acc ^= round1(0, v);
    return acc * P1 + P4;
}

uint64_t kl__xxh64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const uint8_t *lim = end - 32;
        do {
            v1 = round1(v1, rd64(p)); v2 = round1(v2, rd64(p + 8));
            v3 = round1(v3, rd64(p + 16)); v4 = round1(v4, rd64(p + 24));
            p += 32;
        } while (p <= lim);
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = merge(h, v1); h = merge(h, v2); h = merge(h, v3); h = merge(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;
    while (p + 8 <= end) { h ^= round1(0, rd64(p)); h = rotl(h, 27) * P1 + P4; p += 8; }
    if (p + 4 <= end) { h ^= (uint64_t)rd32(p) * P1; h = rotl(h, 23) * P2 + P3; p += 4; }
    while (p < end) { h ^= (*p) * P5; h = rotl(h, 11) * P1; p++; }
    h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32;
    return h;
}

/* ==================================================================
 * Gathering values
 * ================================================================== */

void kl__fval_from_col(const kl_column *c, size_t row, fval *v) {
    v->null = kl_column_is_null(c, row);
    v->s = NULL; v->n = 0; v->i = 0; v->d = 0;
    if (v->null) return;
    switch (c->type) {
    case KL_COL_BOOL: v->i = ((const uint8_t *)c->values)[row]; v->d = (double)v->i; break;
    case KL_COL_INT32: case KL_COL_DATE: v->i = ((const int32_t *)c->values)[row]; v->d = (double)v->i; break;
    case KL_COL_INT64: case KL_COL_TIMESTAMP: v->i = ((const int64_t *)c->values)[row]; v->d = (double)v->i; break;
    case KL_COL_FLOAT32: v->d = ((const float *)c->values)[row]; break;
    case KL_COL_FLOAT64: v->d = ((const double *)c->values)[row]; break;
    case KL_COL_STRING: case KL_COL_BINARY:
        v->s = c->data + c->offsets[row];
        v->n = (size_t)(c->offsets[row + 1] - c->offsets[row]);
        break;
    default: break;
    }
}


int kl__fval_from_json(const fin *in, const kl_dialect *d, const void *obj, fval *v, kl_err *e) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive((const cJSON *)obj, in->column);
    const kl_field *f = in->raw;
    KL_ASSERT(f != NULL); /* bound when the features were parsed */
    kl_cell x = {0};
    int isnull = 0;
    char msg[256];
    memset(v, 0, offsetof(fval, num));
    int r = kl_json_cell_parse(f, d, it, v->num, &x, &isnull, msg, sizeof msg);
    if (r) return kl_err_set(e, r == KL_REJ_NULL + 1 ? KL_EINVAL : KL_ETYPE, "field %s: %s", in->column, msg);
    if (isnull) { v->null = 1; return KL_OK; }
    switch (in->type) {
    case KL_COL_STRING: case KL_COL_BINARY: v->s = x.s; v->n = x.n; break;
    case KL_COL_FLOAT32: v->d = (double)(float)x.d; break;
    case KL_COL_FLOAT64: v->d = x.d; break;
    default: v->i = x.i; v->d = (double)x.i; break;
    }
    return KL_OK;
}

const char *kl__fval_key(const fin *in, const fval *v, char *buf, size_t *n) {
    if (in->type == KL_COL_STRING || in->type == KL_COL_BINARY) { *n = v->n; return v->s ? v->s : ""; }
    /* integers as decimal text (byte-order free) */
    uint64_t u = v->i < 0 ? (uint64_t)0 - (uint64_t)v->i : (uint64_t)v->i;
    char tmp[24];
    int k = 0;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    size_t m = 0;
    if (v->i < 0) buf[m++] = '-';
    while (k) buf[m++] = tmp[--k];
    buf[m] = 0;
    *n = m;
    return buf;
}

void kl__store_slot(kl_column *c, size_t row, double v) {
    switch (c->type) {
    case KL_COL_FLOAT32: ((float *)c->values)[row] = (float)v; break;
    case KL_COL_FLOAT64: ((double *)c->values)[row] = v; break;
    case KL_COL_INT32: ((int32_t *)c->values)[row] = (int32_t)v; break;
    case KL_COL_INT64: ((int64_t *)c->values)[row] = (int64_t)v; break;
    default: KL_ASSERT(0);
    }
}

/* ==================================================================
 * Vocabulary lookup
 * ================================================================== */

int kl__vocab_build(feat *F, kl_err *e) {
    fmap *m = F->vmap;
    if (m) kl__fmap_free(m);
    else if (!(m = calloc(1, sizeof *m))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    F->vmap = m;
    if (kl__fmap_init(m, F->nvocab)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < F->nvocab; i++) {
        int created;
        uint64_t *slot = kl__fmap_put(m, F->vocab[i], F->vocab_len[i], &created);
        if (!slot) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if (!created) return kl_err_set(e, KL_EINVAL, "feature %s: vocabulary entry '%s' appears twice", F->name, F->vocab[i]);
        *slot = i;
    }
    return KL_OK;
}

size_t kl__vocab_find(const feat *F, const char *s, size_t n) {
    const uint64_t *v = F->vmap ? kl__fmap_get(F->vmap, s, n) : NULL;
    return v ? (size_t)*v : F->nvocab;
}

/* ==================================================================
 * Date parts
 * ================================================================== */

static inline int64_t floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q; }

double kl__datepart(dp_part p, int64_t us) {
    int64_t days = floordiv(us, 86400000000LL);
    int64_t sod = (us - days * 86400000000LL) / 1000000;   /* second of day */
    if (p == DP_HOUR) return (double)(sod / 3600);
    if (p == DP_MINUTE) return (double)((sod / 60) % 60);
    if (p == DP_WEEKDAY) return (double)(((days % 7) + 7 + 3) % 7);   /* Monday = 0 */
    /* civil from days (Howard Hinnant) */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = (int64_t)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    unsigned d = doy - (153 * mp + 2) / 5 + 1;
    unsigned m = mp < 10 ? mp + 3 : mp - 9;
    y += m <= 2;
    if (p == DP_DAY_OF_MONTH) return d;
    if (p == DP_MONTH) return m;
    if (p == DP_YEAR) return (double)y;
    /* day of year, 1-based */
    return (double)(days - kl_days_from_civil(y, 1, 1) + 1);
}

/* ==================================================================
 * The evaluator
 * ================================================================== */

static int num_in(const feat *F, int k, const fval *in, double *x, kl_features_counts *c, kl_err *e) {
    if (!in[k].null) { *x = in[k].d; return KL_OK; }
    if (F->in[k].has_fill) {
        if (c) c->null_filled++;
        *x = F->in[k].fill;
        return KL_OK;
    }
    return kl_err_set(e, KL_EINVAL, "feature %s: input %s is null and has no fill (not nullable)", F->name, F->in[k].column);
}

static int int_in(const feat *F, int k, const fval *in, int64_t *x, kl_features_counts *c, kl_err *e) {
    if (!in[k].null) {
        *x = F->in[k].type == KL_COL_DATE ? in[k].i * 86400000000LL : in[k].i;
        return KL_OK;
    }
    if (F->in[k].has_fill) {   /* fill in the input's unit: days for a date, µs for a timestamp */
        if (c) c->null_filled++;
        *x = (int64_t)F->in[k].fill;
        if (F->in[k].type == KL_COL_DATE) *x *= 86400000000LL;
        return KL_OK;
    }
    return kl_err_set(e, KL_EINVAL, "feature %s: input %s is null and has no fill (not nullable)", F->name, F->in[k].column);
}

int kl__tf_eval(const feat *F, const fval *in, double *out, kl_features_counts *c, kl_err *e) {
    double x = 0, y = 0;
    int rc;
    switch (F->kind) {
    case TF_PASSTHROUGH: case TF_FILL_NULL: case TF_CLIP: case TF_LOG1P: case TF_STANDARDIZE:
    case TF_MINMAX: case TF_BUCKETIZE:
        if ((rc = num_in(F, 0, in, &x, c, e))) return rc;
        out[0] = kl__tf_num1(F, x, c);
        return KL_OK;
    case TF_ONEHOT: case TF_INDEX: case TF_HASH: {
        size_t idx;
        if (in[0].null) {
            if (!F->in[0].nullable)
                return kl_err_set(e, KL_EINVAL, "feature %s: input %s is null and not nullable", F->name, F->in[0].column);
            if (c) c->null_filled++;
            idx = F->kind == TF_HASH ? (size_t)F->buckets : F->nvocab;
        } else {
            char buf[32];
            size_t n;
            const char *k = kl__fval_key(&F->in[0], &in[0], buf, &n);
            if (F->kind == TF_HASH) {
                idx = (size_t)(kl__xxh64(k, n, F->seed) % (uint64_t)F->buckets);
            } else {
                idx = kl__vocab_find(F, k, n);
                if (idx == F->nvocab && c) c->unknown++;
            }
        }
        if (F->kind == TF_ONEHOT) {
            for (size_t j = 0; j < F->width; j++) out[j] = 0.0;
            out[idx] = 1.0;
        } else {
            out[0] = (double)idx;
        }
        return KL_OK;
    }
    case TF_DATEPART: case TF_TIME_SINCE: {
        int64_t t = 0, r = F->since_us;
        if ((rc = int_in(F, 0, in, &t, c, e))) return rc;
        if (F->kind == TF_TIME_SINCE && !F->has_since && (rc = int_in(F, 1, in, &r, c, e))) return rc;
        out[0] = kl__tf_time1(F, t, r);
        return KL_OK;
    }
    case TF_RATIO:
        if ((rc = num_in(F, 0, in, &x, c, e)) || (rc = num_in(F, 1, in, &y, c, e))) return rc;
        if (y == 0) { if (c) c->div_zero++; out[0] = F->on_zero; }
        else out[0] = x / y;
        return KL_OK;
    case TF_DIFF:
        if ((rc = num_in(F, 0, in, &x, c, e)) || (rc = num_in(F, 1, in, &y, c, e))) return rc;
        out[0] = x - y;
        return KL_OK;
    default:
        return kl_err_set(e, KL_EINTERNAL, "feature %s: not a row transform", F->name);
    }
}

/* ==================================================================
 * Windows
 * ================================================================== */

static inline int64_t dkey(double d) {
    int64_t b;
    memcpy(&b, &d, 8);
    return b < 0 ? (int64_t)((uint64_t)b ^ 0x7fffffffffffffffULL) : b;
}

int kl__fevent_cmp(const fevent *a, const fevent *b) {
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    int64_t x = dkey(a->v), y = dkey(b->v);
    return (x > y) - (x < y);
}

/* First index in [lo, n) whose ts >= t. */
static size_t lower_ts(const fevent *ev, size_t lo, size_t n, int64_t t) {
    size_t hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ev[mid].ts < t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

double kl__tf_window(const feat *F, const fevent *ev, size_t n, int64_t t, kl_features_counts *c) {
    size_t hi = n, lo = n > (size_t)F->events ? n - (size_t)F->events : 0;
    if (F->within_us > 0) lo = lower_ts(ev, lo, hi, t - F->within_us);
    size_t cnt = hi - lo;
    double r;
    switch (F->agg) {
    case WA_COUNT: return (double)cnt;
    case WA_SUM: case WA_MEAN: {
        double s = 0;
        for (size_t i = lo; i < hi; i++) s += ev[i].v;
        if (F->agg == WA_SUM) return s;
        if (!cnt) goto empty;
        return s / (double)cnt;
    }
    case WA_MIN: case WA_MAX:
        if (!cnt) goto empty;
        r = ev[lo].v;
        for (size_t i = lo + 1; i < hi; i++) {
            if (F->agg == WA_MIN ? ev[i].v < r : ev[i].v > r) r = ev[i].v;
        }
        return r;
    case WA_LAST:
        if (!cnt) goto empty;
        return ev[hi - 1].v;
    case WA_MEAN_INTERVAL:
        if (cnt < 2) goto empty;
        return (double)(ev[hi - 1].ts - ev[lo].ts) / (double)(cnt - 1) / (F->unit_s * 1e6);
    case WA_SINCE_LAST:
        if (!cnt) goto empty;
        return (double)(t - ev[hi - 1].ts) / (F->unit_s * 1e6);
    default: break;
    }
empty:
    if (c) c->empty_window++;
    return F->empty;
}

size_t kl__tf_window_keep_from(const feat *F, const fevent *ev, size_t n) {
    if (!n) return 0;
    int64_t newest = ev[n - 1].ts;
    size_t rs = lower_ts(ev, 0, n, newest);
    size_t lo = rs > (size_t)F->events ? rs - (size_t)F->events : 0;
    if (F->within_us > 0) lo = lower_ts(ev, lo, rs, newest - F->within_us);
    return lo;
}
