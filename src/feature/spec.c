/* Feature specs and features.json: parsing a spec (YAML, or the JSON of a
 * frozen features.json — the same keys plus "state") into the feature set,
 * validation with file:line:col errors, the canonical JSON the feature_hash
 * covers, the output layout, save/load with hash verification. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature_int.h"

/* ==================================================================
 * Small helpers
 * ================================================================== */

static int is_num_type(kl_col_type t) {
    return t == KL_COL_BOOL || t == KL_COL_INT32 || t == KL_COL_INT64 || t == KL_COL_FLOAT32 ||
           t == KL_COL_FLOAT64 || t == KL_COL_DATE || t == KL_COL_TIMESTAMP;
}
static int is_key_type(kl_col_type t) {
    return t == KL_COL_STRING || t == KL_COL_INT32 || t == KL_COL_INT64 || t == KL_COL_BOOL || t == KL_COL_DATE;
}
static int is_time_type(kl_col_type t) { return t == KL_COL_TIMESTAMP || t == KL_COL_DATE || t == KL_COL_INT64; }

static void feat_clear(feat *F) {
    free(F->name);
    for (int k = 0; k < 2; k++) free(F->in[k].column);
    free(F->value.column);
    free(F->edges);
    for (size_t i = 0; i < F->nvocab; i++) free(F->vocab[i]);
    free(F->vocab);
    free(F->vocab_len);
    if (F->vmap) { kl__fmap_free(F->vmap); free(F->vmap); }
}

void kl_features_free(kl_features *f) {
    if (!f) return;
    for (size_t i = 0; i < f->nf; i++) feat_clear(&f->f[i]);
    free(f->f);
    for (size_t i = 0; i < f->ninputs; i++) free(f->inputs[i].name);
    free(f->inputs);
    free(f->label);
    for (size_t i = 0; i < f->nclasses; i++) free(f->classes[i]);
    free(f->classes);
    for (size_t i = 0; i < f->width; i++) free(f->slot_names[i]);
    free(f->slot_names);
    kl_schema_free(f->raw);
    free(f);
}

static int parse_type(const kl_node *n, kl_col_type *t, kl_err *e) {
    const char *s;
    int rc = kl_node_str(n, &s, e);
    if (rc) return rc;
    if (kl_col_type_parse(s, t)) {
        if (!strcmp(s, "float")) { *t = KL_COL_FLOAT32; return KL_OK; }
        if (!strcmp(s, "double")) { *t = KL_COL_FLOAT64; return KL_OK; }
        return kl_node_error(n, e, KL_EINVAL, "unknown type '%s' (bool, int32, int64, float32, float64, string, date, timestamp)", s);
    }
    return KL_OK;
}

/* An input: {column, type, fill?, nullable?} */
static int parse_fin(const kl_node *n, fin *in, kl_err *e) {
    static const char *const keys[] = {"column", "type", "fill", "nullable"};
    int rc;
    if (kl_node_kind_of(n) != KL_NODE_MAP) return kl_node_error(n, e, KL_EINVAL, "expected a map {column, type, fill, nullable}");
    if ((rc = kl_spec_check_keys(n, keys, 4, e))) return rc;
    const kl_node *c;
    const char *s;
    if ((rc = kl_spec_require(n, "column", &c, e)) || (rc = kl_node_str(c, &s, e))) return rc;
    in->column = strdup(s);
    if ((rc = kl_spec_require(n, "type", &c, e)) || (rc = parse_type(c, &in->type, e))) return rc;
    if ((c = kl_node_get(n, "fill"))) {
        if ((rc = kl_node_double(c, &in->fill, e))) return rc;
        if (!isfinite(in->fill)) return kl_node_error(c, e, KL_EINVAL, "fill must be finite");
        in->has_fill = 1;
    }
    int nb;
    if ((rc = kl_spec_bool(n, "nullable", in->has_fill, &nb, e))) return rc;
    in->nullable = nb || in->has_fill;
    return KL_OK;
}


static int parse_unit(const kl_node *n, double *unit_s, kl_err *e) {
    const char *s;
    int rc = kl_node_str(n, &s, e);
    if (rc) return rc;
    static const struct { const char *n; double s; } u[] = {
        {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}, {"d", 86400}};
    for (size_t i = 0; i < KL_ARRAY_LEN(u); i++)
        if (!strcmp(s, u[i].n)) { *unit_s = u[i].s; return KL_OK; }
    return kl_node_error(n, e, KL_EINVAL, "unknown unit '%s' (us, ms, s, min, h, d)", s);
}

/* ==================================================================
 * One feature
 * ================================================================== */

static const char *const feat_keys[] = {
    "name", "version", "transform", "dtype", "input", "type", "fill", "nullable", "inputs",
    "lower", "upper", "edges", "quantiles", "max_size", "buckets", "seed", "part", "since",
    "since_us", "unit", "unit_s", "on_zero", "agg", "entity", "time", "value", "events",
    "within", "within_us", "empty", "state", "description"};

static int parse_state(feat *F, const kl_node *st, kl_err *e) {
    int rc;
    const kl_node *c;
    switch (F->kind) {
    case TF_STANDARDIZE:
        if ((rc = kl_spec_require(st, "mean", &c, e)) || (rc = kl_node_double(c, &F->mean, e))) return rc;
        if ((rc = kl_spec_require(st, "std", &c, e)) || (rc = kl_node_double(c, &F->std, e))) return rc;
        if (!(F->std > 0)) return kl_node_error(c, e, KL_EINVAL, "std must be > 0");
        break;
    case TF_MINMAX:
        if ((rc = kl_spec_require(st, "min", &c, e)) || (rc = kl_node_double(c, &F->min, e))) return rc;
        if ((rc = kl_spec_require(st, "max", &c, e)) || (rc = kl_node_double(c, &F->max, e))) return rc;
        break;
    case TF_BUCKETIZE:
        if ((rc = kl_spec_require(st, "edges", &c, e))) return rc;
        if (kl_node_kind_of(c) != KL_NODE_SEQ) return kl_node_error(c, e, KL_EINVAL, "expected a list of edges");
        free(F->edges);
        F->nedges = kl_node_len(c);
        F->edges = calloc(F->nedges + 1, sizeof *F->edges);
        for (size_t i = 0; i < F->nedges; i++) {
            if ((rc = kl_node_double(kl_node_at(c, i), &F->edges[i], e))) return rc;
            if (i && !(F->edges[i] > F->edges[i - 1])) return kl_node_error(kl_node_at(c, i), e, KL_EINVAL, "edges must increase");
        }
        break;
    case TF_ONEHOT: case TF_INDEX:
        if ((rc = kl_spec_require(st, "vocab", &c, e))) return rc;
        if (kl_node_kind_of(c) != KL_NODE_SEQ) return kl_node_error(c, e, KL_EINVAL, "expected a list of vocabulary entries");
        F->nvocab = kl_node_len(c);
        F->vocab = calloc(F->nvocab + 1, sizeof *F->vocab);
        F->vocab_len = calloc(F->nvocab + 1, sizeof *F->vocab_len);
        for (size_t i = 0; i < F->nvocab; i++) {
            const char *s;
            if ((rc = kl_node_str(kl_node_at(c, i), &s, e))) return rc;
            F->vocab[i] = strdup(s);
            F->vocab_len[i] = strlen(s);
        }
        if ((int64_t)F->nvocab > F->max_size) return kl_node_error(c, e, KL_EINVAL, "vocabulary larger than max_size");
        if ((rc = kl__vocab_build(F, e))) return rc;
        break;
    default:
        break;
    }
    F->fitted = 1;
    return KL_OK;
}

/* The parameters of each transform, read only for the kinds that use them (as
 * the canonical JSON writes them): another kind's key stays unread, and
 * kl_node_check_used refuses it (edges on a standardize, buckets on a onehot). */
static int parse_kind_params(const kl_node *n, feat *F, kl_err *e) {
    int rc;
    const kl_node *c;
    const char *s;
    int64_t v;
    F->max_size = 1000;
    F->unit_s = 1;
    if (F->kind == TF_CLIP) {
        if ((c = kl_node_get(n, "lower"))) {
            if ((rc = kl_node_double(c, &F->lo, e))) return rc;
            F->has_lo = 1;
        }
        if ((c = kl_node_get(n, "upper"))) {
            if ((rc = kl_node_double(c, &F->hi, e))) return rc;
            F->has_hi = 1;
        }
        if (!F->has_lo && !F->has_hi) return kl_node_error(n, e, KL_EINVAL, "clip needs lower and/or upper");
    }
    if (F->kind == TF_BUCKETIZE && (rc = kl_spec_int(n, "quantiles", 0, &F->quantiles, e))) return rc;
    if (F->kind == TF_ONEHOT || F->kind == TF_INDEX) {
        if ((rc = kl_spec_int(n, "max_size", 1000, &F->max_size, e))) return rc;
        if (F->max_size < 1 || F->max_size > 1000000)
            return kl_node_error(kl_node_get(n, "max_size"), e, KL_ERANGE, "max_size must be 1..1000000");
    }
    if (F->kind == TF_HASH) {
        if ((rc = kl_spec_int(n, "buckets", 0, &F->buckets, e))) return rc;
        if (F->buckets < 1 || F->buckets > (1LL << 31))
            return kl_node_error(n, e, KL_EINVAL, "hash_bucket needs buckets in 1..2^31");
        if ((rc = kl_spec_int(n, "seed", 0, &v, e))) return rc;
        F->seed = (uint64_t)v;
    }
    if (F->kind == TF_RATIO && (rc = kl_spec_double(n, "on_zero", 0.0, &F->on_zero, e))) return rc;
    if (F->kind == TF_WINDOW && (rc = kl_spec_double(n, "empty", 0.0, &F->empty, e))) return rc;
    if (F->kind == TF_TIME_SINCE || F->kind == TF_WINDOW) {
        if ((c = kl_node_get(n, "unit")) && (rc = parse_unit(c, &F->unit_s, e))) return rc;
        if ((rc = kl_spec_double(n, "unit_s", F->unit_s, &F->unit_s, e))) return rc;
        if (!(F->unit_s > 0)) return kl_node_error(n, e, KL_EINVAL, "unit must be > 0");
    }
    if (F->kind != TF_TIME_SINCE) return KL_OK;
    if ((c = kl_node_get(n, "since"))) {
        if ((rc = kl_node_str(c, &s, e))) return rc;
        if (kl_parse_timestamp(s, strlen(s), NULL, &F->since_us) && kl_parse_int64(s, &F->since_us))
            return kl_node_error(c, e, KL_EINVAL, "since: expected an ISO 8601 time (naive = UTC) or µs, got '%s'", s);
        F->has_since = 1;
    }
    if ((c = kl_node_get(n, "since_us"))) {
        if ((rc = kl_node_int(c, &F->since_us, e))) return rc;
        F->has_since = 1;
    }
    return KL_OK;
}

static int parse_feature(const kl_node *n, feat *F, kl_err *e) {
    int rc;
    const kl_node *c;
    const char *s;
    if (kl_node_kind_of(n) != KL_NODE_MAP) return kl_node_error(n, e, KL_EINVAL, "expected a feature map");
    if ((rc = kl_spec_check_keys(n, feat_keys, KL_ARRAY_LEN(feat_keys), e))) return rc;
    (void)kl_node_get(n, "description"); /* for the reader only */
    if ((rc = kl_spec_require(n, "name", &c, e)) || (rc = kl_node_str(c, &s, e))) return rc;
    if (!*s || strchr(s, '=')) return kl_node_error(c, e, KL_EINVAL, "feature name must be non-empty without '='");
    F->name = strdup(s);
    if ((rc = kl_spec_int(n, "version", 1, &F->version, e))) return rc;
    const kl_node *tn;
    if ((rc = kl_spec_require(n, "transform", &tn, e)) || (rc = kl_node_str(tn, &s, e))) return rc;
    if (kl__tf_parse(s, &F->kind))
        return kl_node_error(tn, e, KL_EINVAL, "unknown transform '%s' (passthrough, fill_null, clip, log1p, standardize, minmax, bucketize, onehot, index, hash_bucket, datepart, time_since, ratio, diff, window)", s);
    F->dtype = KL_COL_FLOAT32;
    if ((c = kl_node_get(n, "dtype"))) {
        if ((rc = parse_type(c, &F->dtype, e))) return rc;
        if (F->dtype != KL_COL_FLOAT32 && F->dtype != KL_COL_FLOAT64 && F->dtype != KL_COL_INT32 && F->dtype != KL_COL_INT64)
            return kl_node_error(c, e, KL_EINVAL, "output dtype must be float32, float64, int32 or int64");
    }
    /* inputs */
    if (F->kind == TF_WINDOW) {
        if ((rc = kl_spec_require(n, "entity", &c, e)) || (rc = parse_fin(c, &F->in[0], e))) return rc;
        if (!is_key_type(F->in[0].type)) return kl_node_error(c, e, KL_ETYPE, "entity must be a string or integer column");
        if (F->in[0].nullable) return kl_node_error(c, e, KL_EINVAL, "entity cannot be nullable");
        if ((rc = kl_spec_require(n, "time", &c, e)) || (rc = parse_fin(c, &F->in[1], e))) return rc;
        if (!is_time_type(F->in[1].type)) return kl_node_error(c, e, KL_ETYPE, "time must be a timestamp, date or int64 column");
        if (F->in[1].nullable) return kl_node_error(c, e, KL_EINVAL, "time cannot be nullable");
        F->nin = 2;
        if ((c = kl_node_get(n, "value"))) {
            if ((rc = parse_fin(c, &F->value, e))) return rc;
            if (!is_num_type(F->value.type)) return kl_node_error(c, e, KL_ETYPE, "value must be numeric");
            if (F->value.nullable && !F->value.has_fill) return kl_node_error(c, e, KL_EINVAL, "a nullable window value needs a fill");
            F->has_value = 1;
        }
    } else if ((c = kl_node_get(n, "inputs"))) {
        if (kl_node_kind_of(c) != KL_NODE_SEQ || kl_node_len(c) < 1 || kl_node_len(c) > 2)
            return kl_node_error(c, e, KL_EINVAL, "inputs: expected a list of 1 or 2 inputs");
        F->nin = (int)kl_node_len(c);
        for (int k = 0; k < F->nin; k++)
            if ((rc = parse_fin(kl_node_at(c, (size_t)k), &F->in[k], e))) return rc;
    } else {
        const kl_node *in, *ty;
        if ((rc = kl_spec_require(n, "input", &in, e)) || (rc = kl_node_str(in, &s, e))) return rc;
        F->in[0].column = strdup(s);
        if ((rc = kl_spec_require(n, "type", &ty, e)) || (rc = parse_type(ty, &F->in[0].type, e))) return rc;
        if ((c = kl_node_get(n, "fill"))) {
            if ((rc = kl_node_double(c, &F->in[0].fill, e))) return rc;
            if (!isfinite(F->in[0].fill)) return kl_node_error(c, e, KL_EINVAL, "fill must be finite");
            F->in[0].has_fill = 1;
        }
        int nb;
        if ((rc = kl_spec_bool(n, "nullable", F->in[0].has_fill, &nb, e))) return rc;
        F->in[0].nullable = nb || F->in[0].has_fill;
        F->nin = 1;
    }
    /* per-kind checks and params */
    int want_in = (F->kind == TF_RATIO || F->kind == TF_DIFF) ? 2 : F->kind == TF_WINDOW ? 2 : 1;
    if (F->kind == TF_TIME_SINCE) want_in = (kl_node_get(n, "since") || kl_node_get(n, "since_us")) ? 1 : 2;
    if (F->nin != want_in) return kl_node_error(n, e, KL_EINVAL, "transform %s takes %d input(s), got %d", kl__tf_name(F->kind), want_in, F->nin);
    for (int k = 0; k < F->nin && F->kind != TF_WINDOW; k++) {
        fin *in = &F->in[k];
        int keyed = F->kind == TF_ONEHOT || F->kind == TF_INDEX || F->kind == TF_HASH;
        int timed = F->kind == TF_DATEPART || F->kind == TF_TIME_SINCE;
        if (keyed && !is_key_type(in->type))
            return kl_node_error(n, e, KL_ETYPE, "input %s: %s needs a string or integer input, not %s", in->column, kl__tf_name(F->kind), kl_col_type_name(in->type));
        if (timed && !is_time_type(in->type))
            return kl_node_error(n, e, KL_ETYPE, "input %s: %s needs a timestamp or date input, not %s", in->column, kl__tf_name(F->kind), kl_col_type_name(in->type));
        if (!keyed && !timed && !is_num_type(in->type))
            return kl_node_error(n, e, KL_ETYPE, "input %s: %s needs a numeric input, not %s", in->column, kl__tf_name(F->kind), kl_col_type_name(in->type));
        if (!keyed && in->nullable && !in->has_fill)
            return kl_node_error(n, e, KL_EINVAL, "input %s is nullable: give a fill value", in->column);
    }
    if (F->kind == TF_FILL_NULL && !F->in[0].has_fill) return kl_node_error(n, e, KL_EINVAL, "fill_null needs fill");
    if ((rc = parse_kind_params(n, F, e))) return rc;
    if (F->kind == TF_DATEPART) {
        if ((rc = kl_spec_require(n, "part", &c, e)) || (rc = kl_node_str(c, &s, e))) return rc;
        int p;
        for (p = 0; p < DP_COUNT; p++) if (!strcmp(s, kl__dp_name((dp_part)p))) break;
        if (p == DP_COUNT) return kl_node_error(c, e, KL_EINVAL, "unknown part '%s' (hour, minute, weekday, day_of_year, day_of_month, month, year)", s);
        F->part = (dp_part)p;
    }
    if (F->kind == TF_BUCKETIZE) {
        if ((c = kl_node_get(n, "edges"))) {
            F->quantiles = 0;   /* given edges: same shape as the fitted state */
            if ((rc = parse_state(F, n, e))) return rc;
        } else if (F->quantiles < 2 || F->quantiles > 100000) {
            return kl_node_error(n, e, KL_EINVAL, "bucketize needs edges: [...] or quantiles: Q (2..100000)");
        }
    }
    if (F->kind == TF_WINDOW) {
        if ((rc = kl_spec_require(n, "agg", &c, e)) || (rc = kl_node_str(c, &s, e))) return rc;
        int a;
        for (a = 0; a < WA_COUNT_; a++) if (!strcmp(s, kl__wa_name((wa_agg)a))) break;
        if (a == WA_COUNT_) return kl_node_error(c, e, KL_EINVAL, "unknown agg '%s' (count, sum, mean, min, max, last, mean_interval, since_last)", s);
        F->agg = (wa_agg)a;
        int needs_v = F->agg == WA_SUM || F->agg == WA_MEAN || F->agg == WA_MIN || F->agg == WA_MAX || F->agg == WA_LAST;
        if (needs_v && !F->has_value) return kl_node_error(n, e, KL_EINVAL, "window agg %s needs value: {column, type}", s);
        if (!needs_v && F->has_value) return kl_node_error(n, e, KL_EINVAL, "window agg %s takes no value", s);
        double w = 0;
        if ((rc = kl_spec_double(n, "within", 0, &w, e))) return rc;
        F->within_us = (int64_t)llround(w * 1e6);
        if ((c = kl_node_get(n, "within_us")) && (rc = kl_node_int(c, &F->within_us, e))) return rc;
        if (F->within_us < 0) return kl_node_error(n, e, KL_EINVAL, "within must be >= 0");
        int64_t def_events = F->agg == WA_SINCE_LAST ? 1 : F->within_us > 0 ? 1000 : 0;
        if ((rc = kl_spec_int(n, "events", def_events, &F->events, e))) return rc;
        if (F->events < 1 || F->events > 100000)
            return kl_node_error(n, e, KL_EINVAL, "window needs events: N (1..100000) and/or within: SECONDS");
        if (F->agg == WA_MEAN_INTERVAL && F->events < 2) return kl_node_error(n, e, KL_EINVAL, "mean_interval needs events >= 2");
    }
    if ((c = kl_node_get(n, "state"))) {
        if (kl_node_kind_of(c) != KL_NODE_MAP) return kl_node_error(c, e, KL_EINVAL, "state: expected a map");
        if ((rc = parse_state(F, c, e))) return rc;
    }
    if (!kl__tf_needs_fit(F)) F->fitted = 1;
    return KL_OK;
}

/* ==================================================================
 * The set: inputs, layout, parse
 * ================================================================== */

static int add_input(kl_features *f, const fin *in, kl_err *e) {
    for (size_t i = 0; i < f->ninputs; i++) {
        if (!strcmp(f->inputs[i].name, in->column)) {
            if (f->inputs[i].type != in->type)
                return kl_err_set(e, KL_ETYPE, "column %s declared as %s and as %s", in->column,
                                  kl_col_type_name(f->inputs[i].type), kl_col_type_name(in->type));
            f->inputs[i].nullable |= in->nullable;
            ((fin *)in)->col = (int)i;
            return KL_OK;
        }
    }
    fcol *ni = realloc(f->inputs, (f->ninputs + 1) * sizeof *ni);
    if (!ni) return kl_err_set(e, KL_ENOMEM, "out of memory");
    f->inputs = ni;
    f->inputs[f->ninputs].name = strdup(in->column);
    f->inputs[f->ninputs].type = in->type;
    f->inputs[f->ninputs].nullable = in->nullable;
    ((fin *)in)->col = (int)f->ninputs;
    f->ninputs++;
    return KL_OK;
}

int kl__features_layout(kl_features *f, kl_err *e) {
    for (size_t i = 0; i < f->width; i++) free(f->slot_names[i]);
    free(f->slot_names);
    f->slot_names = NULL;
    size_t w = 0;
    for (size_t i = 0; i < f->nf; i++) {
        feat *F = &f->f[i];
        F->slot0 = w;
        F->width = F->kind == TF_ONEHOT ? F->nvocab + 1 : 1;
        w += F->width;
    }
    f->width = w;
    f->slot_names = calloc(w + 1, sizeof *f->slot_names);
    if (!f->slot_names) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < f->nf; i++) {
        feat *F = &f->f[i];
        for (size_t j = 0; j < F->width; j++) {
            kl_buf b;
            kl_buf_init(&b);
            if (F->kind == TF_ONEHOT)
                kl_buf_printf(&b, "%s=%s", F->name, j < F->nvocab ? F->vocab[j] : "<unknown>");
            else
                kl_buf_puts(&b, F->name);
            f->slot_names[F->slot0 + j] = kl_buf_take(&b);
        }
    }
    return KL_OK;
}

static void bind_fin(const kl_features *f, fin *in) { in->raw = f->inputs[in->col].raw; }

int kl__features_bind_raw(kl_features *f, kl_err *e) {
    for (size_t i = 0; i < f->ninputs; i++) {
        fcol *c = &f->inputs[i];
        int j = f->raw ? kl_schema_find(f->raw, c->name) : -1;
        memset(&c->dflt, 0, sizeof c->dflt);
        c->dflt.name = c->name;
        c->dflt.type = kl_type_of_column(c->type);
        c->dflt.nullable = 1;
        c->dflt.max_null_ratio = 1.0;
        c->raw = j < 0 ? &c->dflt : &f->raw->fields[j];
        if (j >= 0 && !kl__features_type_ok(c->type, kl_type_column(c->raw->type)))
            return kl_err_set(e, KL_ETYPE, "column '%s' is %s in the dataset's schema, the spec declares %s", c->name,
                              kl_type_name(c->raw->type), kl_col_type_name(c->type));
    }
    for (size_t i = 0; i < f->nf; i++) {
        feat *F = &f->f[i];
        for (int k = 0; k < F->nin; k++) bind_fin(f, &F->in[k]);
        if (F->has_value) bind_fin(f, &F->value);
    }
    return KL_OK;
}

int kl_features_bind_schema(kl_features *f, const kl_schema *s, kl_err *e) {
    kl_schema_free(f->raw);
    f->raw = NULL;
    int rc = kl__features_bind_raw(f, e);
    if (rc || !s) return rc;
    const char **names = calloc(f->ninputs + 1, sizeof *names);
    kl_buf b;
    kl_buf_init(&b);
    if (!names) return kl_err_set(e, KL_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < f->ninputs; i++)
        if (kl_schema_find(s, f->inputs[i].name) >= 0) names[n++] = f->inputs[i].name;
    if (n == 0) { free(names); return KL_OK; }   /* none of the inputs comes from the schema */
    if ((rc = kl_schema_json(s, names, n, &b)) || b.failed) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    else rc = kl_schema_load_str(b.data, b.len, "raw", &f->raw, e);
    kl_buf_free(&b);
    free(names);
    if (!rc) rc = kl__features_bind_raw(f, e);
    if (!rc && f->fitted) rc = kl__features_rehash(f, e);
    return rc;
}

/* label: {column, type, nulls: drop (default) | fail | fill, fill: V}. A
 * features.json (from_json) also carries "nullable": false, the form labels
 * had before nulls existed; in a spec nullable is refused (it meant nothing). */
/* features.json's label classes: the sorted, distinct class names fit learnt. */
static int parse_classes(const kl_node *c, kl_features *f, kl_err *e) {
    if (!c) return KL_OK; /* a string label not fitted yet */
    size_t n = kl_node_len(c);
    if (kl_node_kind_of(c) != KL_NODE_SEQ || n == 0 || n > KL_FEATURES_MAX_CLASSES)
        return kl_node_error(c, e, KL_EINVAL, "classes: a list of 1..%d class names", KL_FEATURES_MAX_CLASSES);
    if (!(f->classes = calloc(n, sizeof *f->classes))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s;
        int rc = kl_node_str(kl_node_at(c, i), &s, e);
        if (rc) return rc;
        if (i && strcmp(f->classes[i - 1], s) >= 0)
            return kl_node_error(kl_node_at(c, i), e, KL_EINVAL, "classes must be sorted and distinct");
        if (!(f->classes[i] = strdup(s))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        f->nclasses = i + 1;
    }
    return KL_OK;
}

static int parse_label(const kl_node *n, int from_json, kl_features *f, kl_err *e) {
    static const char *const keys[] = {"column", "type", "nulls", "fill", "classes", "nullable"};
    static const char *const policies[] = {"drop", "fail", "fill"};
    int rc;
    if (kl_node_kind_of(n) != KL_NODE_MAP) return kl_node_error(n, e, KL_EINVAL, "expected a map {column, type, nulls, fill}");
    if ((rc = kl_spec_check_keys(n, keys, KL_ARRAY_LEN(keys) - (from_json ? 0 : 2), e))) return rc;
    const kl_node *c;
    const char *s;
    if ((rc = kl_spec_require(n, "column", &c, e)) || (rc = kl_node_str(c, &s, e))) return rc;
    if (!(f->label = strdup(s))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if ((rc = kl_spec_require(n, "type", &c, e)) || (rc = parse_type(c, &f->label_type, e))) return rc;
    f->has_label = 1;
    const kl_node *fl = kl_node_get(n, "fill");
    f->label_nulls = fl ? LABEL_FILL : LABEL_DROP;
    if ((c = kl_node_get(n, "nulls"))) {
        if ((rc = kl_node_str(c, &s, e))) return rc;
        int k = 0;
        while (k < 3 && strcmp(s, policies[k])) k++;
        if (k == 3) {
            const char *sg = kl_suggest(s, policies, 3);
            return kl_node_error(c, e, KL_EINVAL, "'%s' is not drop, fail or fill%s%s%s", s,
                                 sg ? " (did you mean '" : "", sg ? sg : "", sg ? "'?)" : "");
        }
        f->label_nulls = (label_nulls)k;
        if (fl && k != LABEL_FILL) return kl_node_error(fl, e, KL_EINVAL, "label fill applies with nulls: fill");
        if (!fl && k == LABEL_FILL) return kl_node_error(c, e, KL_EINVAL, "label nulls: fill needs a fill value");
    }
    if (fl) {
        if ((rc = kl_node_double(fl, &f->label_fill, e))) return rc;
        if (!isfinite(f->label_fill)) return kl_node_error(fl, e, KL_EINVAL, "fill must be finite");
        if (f->label_type != KL_COL_FLOAT32 && f->label_type != KL_COL_FLOAT64 && f->label_fill != floor(f->label_fill))
            return kl_node_error(fl, e, KL_EINVAL, "fill of a %s label must be a whole number", kl_col_type_name(f->label_type));
    }
    if (from_json && kl__label_is_class(f) && (rc = parse_classes(kl_node_get(n, "classes"), f, e))) return rc;
    return KL_OK;
}

static int parse_set(const kl_node *root, kl_features **out, kl_err *e) {
    static const char *const top_keys[] = {"features", "label", "format", "library_version",
                                           "feature_hash", "outputs", "measured", "width", "raw"};
    int rc;
    *out = NULL;
    kl_features *f = calloc(1, sizeof *f);
    if (!f) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!root || kl_node_kind_of(root) != KL_NODE_MAP) { rc = kl_node_error(root, e, KL_EINVAL, "expected a map with features:"); goto fail; }
    if ((rc = kl_spec_check_keys(root, top_keys, KL_ARRAY_LEN(top_keys), e))) goto fail;
    const kl_node *fs;
    if ((rc = kl_spec_require(root, "features", &fs, e))) goto fail;
    if (kl_node_kind_of(fs) != KL_NODE_SEQ || !kl_node_len(fs)) { rc = kl_node_error(fs, e, KL_EINVAL, "features: expected a non-empty list"); goto fail; }
    f->nf = kl_node_len(fs);
    f->f = calloc(f->nf, sizeof *f->f);
    if (!f->f) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (size_t i = 0; i < f->nf; i++) {
        const kl_node *fn = kl_node_at(fs, i);
        if ((rc = parse_feature(fn, &f->f[i], e))) goto fail;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(f->f[j].name, f->f[i].name)) { rc = kl_node_error(fn, e, KL_EINVAL, "duplicate feature name '%s'", f->f[i].name); goto fail; }
        feat *F = &f->f[i];
        for (int k = 0; k < F->nin; k++)
            if ((rc = add_input(f, &F->in[k], e))) { kl_err_prefix(e, "%s: feature %s", kl_node_file(fn), F->name); goto fail; }
        if (F->has_value && (rc = add_input(f, &F->value, e))) goto fail;
    }
    const kl_node *lb = kl_node_get(root, "label");
    if (lb && kl_node_kind_of(lb) != KL_NODE_NULL && (rc = parse_label(lb, kl_node_get(root, "format") != NULL, f, e))) goto fail;
    const kl_node *rn = kl_node_get(root, "raw");
    if (rn && kl_node_kind_of(rn) != KL_NODE_NULL && (rc = kl_schema_from_node(rn, &f->raw, e))) {
        kl_err_prefix(e, "%s: raw", kl_node_file(rn));
        goto fail;
    }
    if ((rc = kl__features_bind_raw(f, e))) { /* every input, with or without a recorded field */
        if (rn) kl_err_prefix(e, "%s: raw", kl_node_file(rn));
        goto fail;
    }
    /* a spec written by hand: every key it gives must be one a reader used
     * (features.json, with its format, is keel's own file and may be newer) */
    if (!kl_node_get(root, "format") && (rc = kl_node_check_used(root, e))) goto fail;
    f->fitted = !kl__label_is_class(f) || f->nclasses > 0;
    for (size_t i = 0; i < f->nf; i++) f->fitted &= f->f[i].fitted;
    if ((rc = kl__features_layout(f, e))) goto fail;
    if (f->fitted && (rc = kl__features_rehash(f, e))) goto fail;
    *out = f;
    return KL_OK;
fail:
    kl_features_free(f);
    return rc;
}

int kl_features_spec_parse(const char *text, size_t len, const char *name, kl_features **out, kl_err *e) {
    kl_doc *d = NULL;
    *out = NULL;
    int rc = kl_doc_load_str(text, len, name, &d, e);
    if (rc) return rc;
    rc = parse_set(kl_doc_root(d), out, e);
    kl_doc_free(d);
    return rc;
}

int kl_features_spec_load(const char *path, kl_features **out, kl_err *e) {
    kl_doc *d = NULL;
    *out = NULL;
    int rc = kl_doc_load_file(path, &d, e);
    if (rc) return rc;
    rc = parse_set(kl_doc_root(d), out, e);
    kl_doc_free(d);
    return rc;
}

/* ==================================================================
 * Canonical JSON and the hash
 * ================================================================== */

static void put_num(kl_buf *b, double v) {
    if (v == 0) v = 0;   /* -0 → 0 */
    kl_buf_printf(b, "%.17g", v);
}

static void put_fin(kl_buf *b, const fin *in) {
    kl_buf_puts(b, "{\"column\":");
    kl_buf_json_str(b, in->column);
    kl_buf_printf(b, ",\"type\":\"%s\",\"nullable\":%s", kl_col_type_name(in->type), in->nullable ? "true" : "false");
    if (in->has_fill) { kl_buf_puts(b, ",\"fill\":"); put_num(b, in->fill); }
    kl_buf_puts(b, "}");
}

static void put_feature(kl_buf *b, const feat *F, int with_state) {
    kl_buf_puts(b, "{\"name\":");
    kl_buf_json_str(b, F->name);
    kl_buf_printf(b, ",\"version\":%lld,\"transform\":\"%s\",\"dtype\":\"%s\"", (long long)F->version,
                  kl__tf_name(F->kind), kl_col_type_name(F->dtype));
    if (F->kind == TF_WINDOW) {
        kl_buf_puts(b, ",\"entity\":"); put_fin(b, &F->in[0]);
        kl_buf_puts(b, ",\"time\":"); put_fin(b, &F->in[1]);
        if (F->has_value) { kl_buf_puts(b, ",\"value\":"); put_fin(b, &F->value); }
        kl_buf_printf(b, ",\"agg\":\"%s\",\"events\":%lld,\"within_us\":%lld,\"unit_s\":", kl__wa_name(F->agg),
                      (long long)F->events, (long long)F->within_us);
        put_num(b, F->unit_s);
        kl_buf_puts(b, ",\"empty\":"); put_num(b, F->empty);
    } else {
        kl_buf_puts(b, ",\"inputs\":[");
        for (int k = 0; k < F->nin; k++) { if (k) kl_buf_puts(b, ","); put_fin(b, &F->in[k]); }
        kl_buf_puts(b, "]");
    }
    switch (F->kind) {
    case TF_CLIP:
        if (F->has_lo) { kl_buf_puts(b, ",\"lower\":"); put_num(b, F->lo); }
        if (F->has_hi) { kl_buf_puts(b, ",\"upper\":"); put_num(b, F->hi); }
        break;
    case TF_BUCKETIZE:
        if (F->quantiles) kl_buf_printf(b, ",\"quantiles\":%lld", (long long)F->quantiles);
        else {
            kl_buf_puts(b, ",\"edges\":[");
            for (size_t i = 0; i < F->nedges; i++) { if (i) kl_buf_puts(b, ","); put_num(b, F->edges[i]); }
            kl_buf_puts(b, "]");
        }
        break;
    case TF_ONEHOT: case TF_INDEX: kl_buf_printf(b, ",\"max_size\":%lld", (long long)F->max_size); break;
    case TF_HASH: kl_buf_printf(b, ",\"buckets\":%lld,\"seed\":%lld", (long long)F->buckets, (long long)F->seed); break;
    case TF_DATEPART: kl_buf_printf(b, ",\"part\":\"%s\"", kl__dp_name(F->part)); break;
    case TF_TIME_SINCE:
        if (F->has_since) kl_buf_printf(b, ",\"since_us\":%lld", (long long)F->since_us);
        kl_buf_puts(b, ",\"unit_s\":"); put_num(b, F->unit_s);
        break;
    case TF_RATIO: kl_buf_puts(b, ",\"on_zero\":"); put_num(b, F->on_zero); break;
    default: break;
    }
    if (with_state && kl__tf_needs_fit(F)) {
        kl_buf_puts(b, ",\"state\":{");
        switch (F->kind) {
        case TF_STANDARDIZE: kl_buf_puts(b, "\"mean\":"); put_num(b, F->mean); kl_buf_puts(b, ",\"std\":"); put_num(b, F->std); break;
        case TF_MINMAX: kl_buf_puts(b, "\"min\":"); put_num(b, F->min); kl_buf_puts(b, ",\"max\":"); put_num(b, F->max); break;
        case TF_BUCKETIZE:
            kl_buf_puts(b, "\"edges\":[");
            for (size_t i = 0; i < F->nedges; i++) { if (i) kl_buf_puts(b, ","); put_num(b, F->edges[i]); }
            kl_buf_puts(b, "]");
            break;
        case TF_ONEHOT: case TF_INDEX:
            kl_buf_puts(b, "\"vocab\":[");
            for (size_t i = 0; i < F->nvocab; i++) { if (i) kl_buf_puts(b, ","); kl_buf_json_str(b, F->vocab[i]); }
            kl_buf_puts(b, "]");
            break;
        default: break;
        }
        kl_buf_puts(b, "}");
    }
    kl_buf_puts(b, "}");
}

/* ,"raw":{schema of the inputs} when recorded (absent otherwise, so sets
 * fitted before it existed keep their hash). */
static void put_raw(kl_buf *b, const kl_features *f) {
    if (!f->raw) return;
    kl_buf_puts(b, ",\"raw\":");
    if (kl_schema_json(f->raw, NULL, 0, b)) b->failed = 1;
}

/* The label as before nulls existed ({column, type, nullable: false}, so
 * sets that drop null labels keep their hash), plus the policy otherwise. */
static void put_label(kl_buf *b, const kl_features *f) {
    if (!f->has_label) { kl_buf_puts(b, "null"); return; }
    fin l = {.column = f->label, .type = f->label_type};
    put_fin(b, &l);
    if (f->label_nulls == LABEL_DROP && !f->nclasses) return;
    b->len--; /* reopen the object */
    if (f->label_nulls != LABEL_DROP)
        kl_buf_printf(b, ",\"nulls\":\"%s\"", f->label_nulls == LABEL_FAIL ? "fail" : "fill");
    if (f->label_nulls == LABEL_FILL) { kl_buf_puts(b, ",\"fill\":"); put_num(b, f->label_fill); }
    if (f->nclasses) {
        kl_buf_puts(b, ",\"classes\":[");
        for (size_t i = 0; i < f->nclasses; i++) {
            if (i) kl_buf_puts(b, ",");
            kl_buf_json_str(b, f->classes[i]);
        }
        kl_buf_puts(b, "]");
    }
    kl_buf_puts(b, "}");
}

char *kl_features_canonical(const kl_features *f) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "{\"library_version\":\"" KL_FEATURES_LIBRARY_VERSION "\",\"label\":");
    put_label(&b, f);
    put_raw(&b, f);
    kl_buf_puts(&b, ",\"features\":[");
    for (size_t i = 0; i < f->nf; i++) {
        if (i) kl_buf_puts(&b, ",");
        put_feature(&b, &f->f[i], 1);
    }
    kl_buf_puts(&b, "]}");
    if (b.failed) { kl_buf_free(&b); return NULL; }
    return kl_buf_take(&b);
}

int kl__features_rehash(kl_features *f, kl_err *e) {
    char *c = kl_features_canonical(f);
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_sha256_buf_hex(c, strlen(c), f->hash);
    free(c);
    return KL_OK;
}

const char *kl_features_hash(const kl_features *f) { return f->fitted ? f->hash : ""; }

/* ==================================================================
 * features.json
 * ================================================================== */

int kl_features_save(const kl_features *f, const char *path, kl_err *e) {
    if (!f->fitted) return kl_err_set(e, KL_ESTATE, "features are not fitted: run fit first");
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "{\n  \"format\": \"keel.features/1\",\n  \"library_version\": \"%s\",\n  \"feature_hash\": \"%s\",\n  \"label\": ",
                  KL_FEATURES_LIBRARY_VERSION, f->hash);
    put_label(&b, f);
    if (f->raw) {
        kl_buf_puts(&b, ",\n  \"raw\": ");
        if (kl_schema_json(f->raw, NULL, 0, &b)) b.failed = 1;
    }
    kl_buf_puts(&b, ",\n  \"features\": [\n");
    for (size_t i = 0; i < f->nf; i++) {
        kl_buf_puts(&b, "    ");
        put_feature(&b, &f->f[i], 1);
        kl_buf_puts(&b, i + 1 < f->nf ? ",\n" : "\n");
    }
    kl_buf_printf(&b, "  ],\n  \"width\": %zu,\n  \"outputs\": [\n", f->width);
    for (size_t s = 0; s < f->width; s++) {
        const feat *F = NULL;
        for (size_t i = 0; i < f->nf; i++) if (s >= f->f[i].slot0 && s < f->f[i].slot0 + f->f[i].width) F = &f->f[i];
        kl_buf_printf(&b, "    {\"index\": %zu, \"name\": ", s);
        kl_buf_json_str(&b, f->slot_names[s]);
        kl_buf_puts(&b, ", \"feature\": ");
        kl_buf_json_str(&b, F->name);
        kl_buf_printf(&b, ", \"dtype\": \"%s\"}%s\n", kl_col_type_name(F->dtype), s + 1 < f->width ? "," : "");
    }
    kl_buf_puts(&b, "  ],\n  \"measured\": {\"note\": \"cost per row at fit; not covered by feature_hash\", \"cost_ns\": {");
    for (size_t i = 0; i < f->nf; i++) {
        if (i) kl_buf_puts(&b, ", ");
        kl_buf_json_str(&b, f->f[i].name);
        kl_buf_printf(&b, ": %.1f", f->f[i].cost_ns);
    }
    kl_buf_puts(&b, "}}\n}\n");
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

static int load_doc(kl_doc *d, kl_features **out, kl_err *e) {
    const kl_node *root = kl_doc_root(d);
    int rc;
    const char *fmt = NULL, *hash = NULL, *lib = NULL;
    if (!root || kl_node_kind_of(root) != KL_NODE_MAP) return kl_node_error(root, e, KL_EPARSE, "not a features.json");
    if ((rc = kl_spec_str(root, "format", NULL, &fmt, e))) return rc;
    if (!fmt || strcmp(fmt, "keel.features/1"))
        return kl_err_set(e, KL_EPARSE, "%s: not a keel features.json (format '%s')", kl_doc_name(d), fmt ? fmt : "");
    if ((rc = kl_spec_str(root, "library_version", "", &lib, e)) || (rc = kl_spec_str(root, "feature_hash", "", &hash, e))) return rc;
    if (strcmp(lib, KL_FEATURES_LIBRARY_VERSION))
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: made by transform library %s; this keel has %s (refit)", kl_doc_name(d), lib, KL_FEATURES_LIBRARY_VERSION);
    kl_features *f = NULL;
    if ((rc = parse_set(root, &f, e))) return rc;
    if (!f->fitted) { kl_features_free(f); return kl_err_set(e, KL_EPARSE, "%s: features lack fitted state", kl_doc_name(d)); }
    if (strcmp(f->hash, hash)) {
        rc = kl_err_set(e, KL_ECHECKSUM, "%s: feature_hash mismatch: file says %s, content hashes to %s (edited or corrupted; refit)",
                        kl_doc_name(d), hash, f->hash);
        kl_features_free(f);
        return rc;
    }
    const kl_node *ms = kl_node_find(root, "measured.cost_ns");
    for (size_t i = 0; ms && i < f->nf; i++) {
        const kl_node *c = kl_node_get(ms, f->f[i].name);
        if (c) kl_node_double(c, &f->f[i].cost_ns, NULL);
    }
    *out = f;
    return KL_OK;
}

int kl_features_load(const char *path, kl_features **out, kl_err *e) {
    kl_doc *d = NULL;
    *out = NULL;
    int rc = kl_doc_load_file(path, &d, e);
    if (rc) return rc;
    rc = load_doc(d, out, e);
    kl_doc_free(d);
    return rc;
}

int kl_features_load_str(const char *text, size_t len, const char *name, kl_features **out, kl_err *e) {
    kl_doc *d = NULL;
    *out = NULL;
    int rc = kl_doc_load_str(text, len, name, &d, e);
    if (rc) return rc;
    rc = load_doc(d, out, e);
    kl_doc_free(d);
    return rc;
}

/* ==================================================================
 * Accessors
 * ================================================================== */

size_t kl_features_num_inputs(const kl_features *f) { return f->ninputs; }
const char *kl_features_input_name(const kl_features *f, size_t i) { return i < f->ninputs ? f->inputs[i].name : NULL; }
kl_col_type kl_features_input_type(const kl_features *f, size_t i) { return f->inputs[i].type; }
void kl_features_input_field(const kl_features *f, size_t i, kl_features_field *out) {
    const fcol *c = &f->inputs[i];
    out->name = c->name;
    int recorded = c->raw != &c->dflt;
    out->type = recorded ? kl_type_name(c->raw->type) : kl_col_type_name(c->type);
    out->nullable = c->nullable && c->raw->nullable; /* a feature takes a null, and ingest would */
    out->timezone = recorded && c->raw->type == KL_T_TIMESTAMP && c->raw->timezone ? c->raw->timezone : NULL;
}
const char *kl_features_label(const kl_features *f) { return f->has_label ? f->label : NULL; }
kl_col_type kl_features_label_type(const kl_features *f) { return f->label_type; }
size_t kl_features_label_classes(const kl_features *f, const char *const **names) {
    if (names) *names = (const char *const *)f->classes;
    return f->nclasses;
}
int kl_features_fit_needs_label(const kl_features *f) { return kl__label_is_class(f); }
int kl_features_is_fitted(const kl_features *f) { return f->fitted; }
size_t kl_features_count(const kl_features *f) { return f->nf; }
const char *kl_features_first_window(const kl_features *f) {
    for (size_t i = 0; i < f->nf; i++)
        if (f->f[i].kind == TF_WINDOW) return f->f[i].name;
    return NULL;
}
const char *kl_features_name(const kl_features *f, size_t i) { return i < f->nf ? f->f[i].name : NULL; }
size_t kl_features_width(const kl_features *f) { return f->width; }
const char *kl_features_slot_name(const kl_features *f, size_t s) { return s < f->width ? f->slot_names[s] : NULL; }
size_t kl_features_slot_feature(const kl_features *f, size_t s) {
    for (size_t i = 0; i < f->nf; i++) if (s >= f->f[i].slot0 && s < f->f[i].slot0 + f->f[i].width) return i;
    return (size_t)-1;
}
kl_col_type kl_features_slot_type(const kl_features *f, size_t s) { return f->f[kl_features_slot_feature(f, s)].dtype; }
double kl_features_cost_ns(const kl_features *f, size_t i) { return i < f->nf ? f->f[i].cost_ns : 0; }
