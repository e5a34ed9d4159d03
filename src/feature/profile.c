/* The reference profile of a model version (include/keel/profile.h):
 * built from the fit rows (raw input columns and the feature output slots,
 * through the one executor kl_features_apply), the model outputs added by
 * training, written to / read from profile.json, summarised for
 * `keel models show`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "feature/feature_int.h"
#include "keel/profile.h"

const char *kl_prof_role_name(int role) {
    return role == KL_PROF_INPUT ? "input" : role == KL_PROF_FEATURE ? "feature" : "output";
}

static void colprof_free(kl_colprof *c) {
    free(c->name);
    kl_qs_free(&c->qs);
    free(c->edges);
    free(c->bins);
    for (size_t i = 0; i < c->ntop; i++) free(c->top[i]);
    free(c->top);
    free(c->top_count);
    memset(c, 0, sizeof *c);
}

void kl_profile_free(kl_profile *p) {
    if (!p) return;
    for (size_t i = 0; i < p->ncols; i++) colprof_free(&p->cols[i]);
    free(p->cols);
    free(p);
}

static kl_colprof *add_col(kl_profile *p, const char *name, int role, int categorical) {
    kl_colprof *nc = realloc(p->cols, (p->ncols + 1) * sizeof *nc);
    if (!nc) return NULL;
    p->cols = nc;
    kl_colprof *c = &nc[p->ncols];
    memset(c, 0, sizeof *c);
    if (!(c->name = strdup(name))) return NULL;
    p->ncols++;
    c->role = role;
    c->categorical = categorical;
    c->min = INFINITY;
    c->max = -INFINITY;
    kl_qs_init(&c->qs);
    return c;
}

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ==================================================================
 * Building
 * ================================================================== */

/* numbers: v[0..n) the non-null values (sorted here), nulls counted apart */
static int numeric_fill(kl_colprof *c, double *v, size_t n, uint64_t nulls) {
    c->count = n + nulls;
    c->nulls = nulls;
    qsort(v, n, sizeof *v, dcmp);
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        s += v[i];
        if (kl_qs_add(&c->qs, v[i], 1)) return KL_ENOMEM;
    }
    c->mean = n ? s / (double)n : NAN;
    if (n) {
        c->min = v[0];
        c->max = v[n - 1];
    }
    c->edges = malloc((KL_PROF_BINS + 2) * sizeof *c->edges);
    if (!c->edges) return KL_ENOMEM;
    c->nedges = kl_hist_edges(v, n, KL_PROF_BINS, c->edges);
    if (!c->nedges) return KL_OK;
    if (!(c->bins = calloc(c->nedges + 1, sizeof *c->bins))) return KL_ENOMEM;
    for (size_t i = 0; i < n; i++) c->bins[kl_hist_bin(c->edges, c->nedges, v[i])]++;
    return KL_OK;
}

static int categorical_fill(kl_colprof *c, const kl_catcount *cc, uint64_t nulls) {
    const char *keys[KL_PROF_TOPK];
    size_t lens[KL_PROF_TOPK];
    uint64_t cnt[KL_PROF_TOPK];
    size_t k = kl_catcount_top(cc, KL_PROF_TOPK, keys, lens, cnt);
    c->count = kl_catcount_total(cc) + nulls;
    c->nulls = nulls;
    c->distinct = kl_catcount_distinct(cc);
    c->top = calloc(k ? k : 1, sizeof *c->top);
    c->top_count = calloc(k ? k : 1, sizeof *c->top_count);
    if (!c->top || !c->top_count) return KL_ENOMEM;
    uint64_t kept = 0;
    for (size_t i = 0; i < k; i++) {
        if (!(c->top[i] = malloc(lens[i] + 1))) return KL_ENOMEM;
        memcpy(c->top[i], keys[i], lens[i]);
        c->top[i][lens[i]] = 0;
        c->top_count[i] = cnt[i];
        kept += cnt[i];
        c->ntop++;
    }
    c->other = kl_catcount_total(cc) - kept;
    c->complete = c->distinct <= KL_PROF_TOPK && !kl_catcount_overflow(cc);
    return KL_OK;
}

static int is_categorical(kl_col_type t) { return t == KL_COL_STRING || t == KL_COL_BINARY; }

/* one column's values (a raw input or an output slot) */
static int profile_column(kl_profile *p, const kl_column *col, const char *name, int role, kl_err *e) {
    int cat = is_categorical(col->type);
    kl_colprof *c = add_col(p, name, role, cat);
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    uint64_t nulls = 0;
    int rc = KL_OK;
    if (cat) {
        kl_catcount *cc = NULL;
        if (kl_catcount_new(KL_PROF_CATCAP, &cc)) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (size_t r = 0; r < col->len && !rc; r++) {
            fval v;
            kl__fval_from_col(col, r, &v);
            if (v.null) nulls++;
            else rc = kl_catcount_add(cc, v.s ? v.s : "", v.n, 1);
        }
        if (!rc) rc = categorical_fill(c, cc, nulls);
        kl_catcount_free(cc);
    } else {
        double *v = malloc((col->len ? col->len : 1) * sizeof *v);
        if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
        size_t n = 0;
        for (size_t r = 0; r < col->len; r++) {
            fval x;
            kl__fval_from_col(col, r, &x);
            if (x.null || isnan(x.d)) nulls++;
            else v[n++] = x.d;
        }
        rc = numeric_fill(c, v, n, nulls);
        free(v);
    }
    return rc ? kl_err_set(e, rc, "profile of column %s: out of memory", name) : KL_OK;
}

int kl_profile_build(const kl_features *f, kl_column *const *cols, size_t ncols, kl_pool *pool, kl_profile **out,
                     kl_err *e) {
    *out = NULL;
    kl_profile *p = calloc(1, sizeof *p);
    if (!p) return kl_err_set(e, KL_ENOMEM, "out of memory");
    snprintf(p->feature_hash, sizeof p->feature_hash, "%s", kl_features_hash(f));
    kl_column **slots = NULL;
    size_t nslots = 0;
    int rc = KL_OK;
    const char *label = kl_features_label(f);
    for (size_t i = 0; i < f->ninputs && !rc; i++) {
        const char *name = f->inputs[i].name;
        if (label && !strcmp(label, name)) continue; /* requests carry no label */
        const kl_column *col = NULL;
        for (size_t j = 0; j < ncols; j++)
            if (!strcmp(cols[j]->name, name)) col = cols[j];
        if (!col) {
            rc = kl_err_set(e, KL_EINVAL, "profile: no column %s in the data", name);
            break;
        }
        if (col->len > p->rows) p->rows = col->len;
        rc = profile_column(p, col, name, KL_PROF_INPUT, e);
    }
    if (!rc) rc = kl__features_apply_slots(f, cols, ncols, 0, pool, &slots, &nslots, &p->fallbacks, e);
    p->has_fallbacks = !rc;
    for (size_t s = 0; s < f->width && !rc; s++) rc = profile_column(p, slots[s], f->slot_names[s], KL_PROF_FEATURE, e);
    for (size_t s = 0; s < nslots; s++) kl_column_free(slots[s]);
    free(slots);
    if (rc) {
        kl_profile_free(p);
        return rc;
    }
    *out = p;
    return KL_OK;
}

int kl_profile_write(const kl_features *f, kl_column *const *cols, size_t ncols, const char *path, kl_err *e) {
    kl_profile *p = NULL;
    int rc = kl_profile_build(f, cols, ncols, NULL, &p, e);
    if (!rc) rc = kl_profile_save(p, path, e);
    kl_profile_free(p);
    return rc;
}

int kl_profile_add_numeric(kl_profile *p, const char *name, int role, const float *v, size_t n, size_t stride,
                           kl_err *e) {
    for (size_t i = 0; i < p->ncols; i++)
        if (p->cols[i].role == role && !strcmp(p->cols[i].name, name)) {
            colprof_free(&p->cols[i]);
            memmove(&p->cols[i], &p->cols[i + 1], (p->ncols - i - 1) * sizeof *p->cols);
            p->ncols--;
            break;
        }
    double *d = malloc((n ? n : 1) * sizeof *d);
    kl_colprof *c = d ? add_col(p, name, role, 0) : NULL;
    if (!c) {
        free(d);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    size_t m = 0;
    uint64_t nulls = 0;
    for (size_t i = 0; i < n; i++) {
        float x = v[i * stride];
        if (isnan(x)) nulls++;
        else d[m++] = (double)x;
    }
    int rc = numeric_fill(c, d, m, nulls);
    free(d);
    return rc ? kl_err_set(e, rc, "profile of %s: out of memory", name) : KL_OK;
}

/* ==================================================================
 * profile.json
 * ================================================================== */

static void put_num(kl_buf *b, double x) {
    if (isfinite(x)) kl_buf_printf(b, "%.17g", x);
    else kl_buf_puts(b, "null");
}

static void put_side(kl_buf *b, const char *name, const kl_qs_side *s) {
    /* trim zero buckets at the ends */
    uint32_t a = 0, z = s->n;
    while (a < z && !s->c[a]) a++;
    while (z > a && !s->c[z - 1]) z--;
    kl_buf_printf(b, ",\"%s_lo\":%d,\"%s\":[", name, a < z ? s->lo + (int32_t)a : 0, name);
    for (uint32_t k = a; k < z; k++) kl_buf_printf(b, "%s%llu", k > a ? "," : "", (unsigned long long)s->c[k]);
    kl_buf_puts(b, "]");
}

static void put_col(kl_buf *b, const kl_colprof *c) {
    kl_buf_puts(b, "{\"name\":");
    kl_buf_json_str(b, c->name);
    kl_buf_printf(b, ",\"role\":\"%s\",\"kind\":\"%s\",\"count\":%llu,\"nulls\":%llu", kl_prof_role_name(c->role),
                  c->categorical ? "categorical" : "numeric", (unsigned long long)c->count,
                  (unsigned long long)c->nulls);
    if (c->categorical) {
        kl_buf_puts(b, ",\"top\":[");
        for (size_t i = 0; i < c->ntop; i++) {
            kl_buf_puts(b, i ? ",[" : "[");
            kl_buf_json_str(b, c->top[i]);
            kl_buf_printf(b, ",%llu]", (unsigned long long)c->top_count[i]);
        }
        kl_buf_printf(b, "],\"other\":%llu,\"distinct\":%llu,\"complete\":%s}", (unsigned long long)c->other,
                      (unsigned long long)c->distinct, c->complete ? "true" : "false");
        return;
    }
    kl_buf_puts(b, ",\"min\":");
    put_num(b, c->min);
    kl_buf_puts(b, ",\"max\":");
    put_num(b, c->max);
    kl_buf_puts(b, ",\"mean\":");
    put_num(b, c->mean);
    kl_buf_puts(b, ",\"edges\":[");
    for (size_t i = 0; i < c->nedges; i++) {
        if (i) kl_buf_puts(b, ",");
        put_num(b, c->edges[i]);
    }
    kl_buf_puts(b, "],\"bins\":[");
    for (size_t i = 0; c->bins && i <= c->nedges; i++)
        kl_buf_printf(b, "%s%llu", i ? "," : "", (unsigned long long)c->bins[i]);
    kl_buf_printf(b, "],\"quantiles\":{\"alpha\":%g,\"count\":%llu,\"zero\":%llu,\"clamped\":%llu", KL_QS_ALPHA,
                  (unsigned long long)c->qs.count, (unsigned long long)c->qs.zero, (unsigned long long)c->qs.clamped);
    put_side(b, "pos", &c->qs.pos);
    put_side(b, "neg", &c->qs.neg);
    kl_buf_puts(b, ",\"p01\":");
    put_num(b, kl_qs_quantile(&c->qs, 0.01));
    kl_buf_puts(b, ",\"p50\":");
    put_num(b, kl_qs_quantile(&c->qs, 0.5));
    kl_buf_puts(b, ",\"p99\":");
    put_num(b, kl_qs_quantile(&c->qs, 0.99));
    kl_buf_puts(b, "}}");
}

int kl_profile_save(const kl_profile *p, const char *path, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "{\"format\":\"keel.profile/1\",\"feature_hash\":\"%s\",\"rows\":%llu,", p->feature_hash,
                  (unsigned long long)p->rows);
    if (p->has_fallbacks) {
        const kl_features_counts *c = &p->fallbacks;
        kl_buf_printf(&b,
                      "\"fallbacks\":{\"rows\":%llu,\"unknown\":%llu,\"null_filled\":%llu,\"div_zero\":%llu,"
                      "\"clamped\":%llu,\"empty_window\":%llu},",
                      (unsigned long long)c->rows, (unsigned long long)c->unknown, (unsigned long long)c->null_filled,
                      (unsigned long long)c->div_zero, (unsigned long long)c->clamped,
                      (unsigned long long)c->empty_window);
    }
    kl_buf_puts(&b, "\"columns\":[\n");
    for (size_t i = 0; i < p->ncols; i++) {
        put_col(&b, &p->cols[i]);
        kl_buf_puts(&b, i + 1 < p->ncols ? ",\n" : "\n");
    }
    kl_buf_puts(&b, "]}\n");
    int rc =
        b.failed ? kl_err_set(e, KL_ENOMEM, "%s: out of memory", path) : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

/* ---- reading ---- */

static int bad(kl_err *e, const char *name, size_t col, const char *what) {
    return kl_err_set(e, KL_EPARSE, "%s: columns[%zu]: %s", name, col, what);
}

/* a count: a whole number in 0..2^53 (a larger double would not convert) */
static int count_of(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble <= 9007199254740992.0) ||
        x->valuedouble != floor(x->valuedouble))
        return -1;
    *out = (uint64_t)x->valuedouble;
    return 0;
}

static int get_u64(const cJSON *o, const char *k, uint64_t *out) {
    return count_of(cJSON_GetObjectItemCaseSensitive(o, k), out);
}

static double get_num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static int read_side(const cJSON *q, const char *name, kl_qs_side *s) {
    char lo_key[16];
    snprintf(lo_key, sizeof lo_key, "%s_lo", name);
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(q, lo_key), *a = cJSON_GetObjectItemCaseSensitive(q, name);
    if (!cJSON_IsNumber(lo) || !cJSON_IsArray(a)) return -1;
    int n = cJSON_GetArraySize(a);
    if (n > 8192 || fabs(lo->valuedouble) > 1e5) return -1;
    if (!n) return 0;
    s->lo = (int32_t)lo->valuedouble;
    s->n = (uint32_t)n;
    if (!(s->c = kl_mem_alloc((size_t)n * sizeof *s->c, KL_TAG_OTHER))) return -1;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (count_of(x, &s->c[i++])) return -1;
    }
    return 0;
}

static int read_numeric(kl_colprof *c, const cJSON *o) {
    c->min = get_num(o, "min");
    c->max = get_num(o, "max");
    c->mean = get_num(o, "mean");
    const cJSON *ed = cJSON_GetObjectItemCaseSensitive(o, "edges"), *bi = cJSON_GetObjectItemCaseSensitive(o, "bins");
    if (!cJSON_IsArray(ed) || !cJSON_IsArray(bi)) return -1;
    int ne = cJSON_GetArraySize(ed);
    if (ne > 4096 || (ne && cJSON_GetArraySize(bi) != ne + 1)) return -1;
    c->nedges = (size_t)ne;
    if (ne) {
        c->edges = malloc((size_t)ne * sizeof *c->edges);
        c->bins = calloc((size_t)ne + 1, sizeof *c->bins);
        if (!c->edges || !c->bins) return -1;
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, ed) {
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || (i && x->valuedouble <= c->edges[i - 1])) return -1;
            c->edges[i++] = x->valuedouble;
        }
        i = 0;
        cJSON_ArrayForEach(x, bi) {
            if (count_of(x, &c->bins[i++])) return -1;
        }
    }
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "quantiles");
    if (!cJSON_IsObject(q)) return -1;
    if (get_u64(q, "count", &c->qs.count) || get_u64(q, "zero", &c->qs.zero) || get_u64(q, "clamped", &c->qs.clamped))
        return -1;
    return read_side(q, "pos", &c->qs.pos) || read_side(q, "neg", &c->qs.neg) ? -1 : 0;
}

static int read_categorical(kl_colprof *c, const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "top");
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) > 65536) return -1;
    int n = cJSON_GetArraySize(t);
    c->top = calloc(n ? (size_t)n : 1, sizeof *c->top);
    c->top_count = calloc(n ? (size_t)n : 1, sizeof *c->top_count);
    if (!c->top || !c->top_count) return -1;
    const cJSON *x;
    cJSON_ArrayForEach(x, t) {
        const cJSON *k = cJSON_GetArrayItem(x, 0), *v = cJSON_GetArrayItem(x, 1);
        if (cJSON_GetArraySize(x) != 2 || !cJSON_IsString(k) || count_of(v, &c->top_count[c->ntop])) return -1;
        if (!(c->top[c->ntop] = strdup(k->valuestring))) return -1;
        c->ntop++;
    }
    c->complete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "complete"));
    return get_u64(o, "other", &c->other) || get_u64(o, "distinct", &c->distinct) ? -1 : 0;
}

static int read_col(kl_profile *p, const cJSON *o, const char *name, size_t i, kl_err *e) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name"), *role = cJSON_GetObjectItemCaseSensitive(o, "role"),
                *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    if (!cJSON_IsString(nm) || !cJSON_IsString(role) || !cJSON_IsString(kind))
        return bad(e, name, i, "expected name, role, kind");
    int r = !strcmp(role->valuestring, "input") ? KL_PROF_INPUT
        : !strcmp(role->valuestring, "feature") ? KL_PROF_FEATURE
        : !strcmp(role->valuestring, "output")  ? KL_PROF_OUTPUT
                                                : -1;
    if (r < 0) return bad(e, name, i, "role: expected input, feature or output");
    int cat = !strcmp(kind->valuestring, "categorical");
    if (!cat && strcmp(kind->valuestring, "numeric")) return bad(e, name, i, "kind: expected numeric or categorical");
    kl_colprof *c = add_col(p, nm->valuestring, r, cat);
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (get_u64(o, "count", &c->count) || get_u64(o, "nulls", &c->nulls) || c->nulls > c->count)
        return bad(e, name, i, "count, nulls: expected counts (nulls <= count)");
    if (cat ? read_categorical(c, o) : read_numeric(c, o))
        return bad(e, name, i, cat ? "malformed top/other/distinct" : "malformed edges/bins/quantiles");
    return KL_OK;
}

int kl_profile_load_str(const char *text, size_t len, const char *name, kl_profile **out, kl_err *e) {
    *out = NULL;
    void *root = NULL;
    int rc = kl_json_parse(text, len, name, &root, e);
    if (rc) return rc;
    kl_profile *p = calloc(1, sizeof *p);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
                *h = cJSON_GetObjectItemCaseSensitive(root, "feature_hash"),
                *cols = cJSON_GetObjectItemCaseSensitive(root, "columns");
    if (!p) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "keel.profile/1"))
        rc = kl_err_set(e, KL_EPARSE, "%s: format: expected \"keel.profile/1\"", name);
    else if (!cJSON_IsArray(cols) || (h && !cJSON_IsString(h)))
        rc = kl_err_set(e, KL_EPARSE, "%s: expected \"columns\" (a list) and \"feature_hash\" (a string)", name);
    if (!rc) {
        if (h) snprintf(p->feature_hash, sizeof p->feature_hash, "%s", h->valuestring);
        get_u64(root, "rows", &p->rows);
        const cJSON *fb = cJSON_GetObjectItemCaseSensitive(root, "fallbacks");
        kl_features_counts *c = &p->fallbacks;
        if (fb &&
            (get_u64(fb, "rows", &c->rows) || get_u64(fb, "unknown", &c->unknown) ||
             get_u64(fb, "null_filled", &c->null_filled) || get_u64(fb, "div_zero", &c->div_zero) ||
             get_u64(fb, "clamped", &c->clamped) || get_u64(fb, "empty_window", &c->empty_window)))
            rc = kl_err_set(e, KL_EPARSE,
                            "%s: fallbacks: expected counts rows, unknown, null_filled, div_zero, clamped, "
                            "empty_window",
                            name);
        p->has_fallbacks = fb != NULL;
        size_t i = 0;
        const cJSON *col;
        cJSON_ArrayForEach(col, cols) {
            if (rc || (rc = read_col(p, col, name, i++, e))) break;
        }
    }
    cJSON_Delete(root);
    if (rc) {
        kl_profile_free(p);
        return rc;
    }
    *out = p;
    return KL_OK;
}

int kl_profile_load(const char *path, kl_profile **out, kl_err *e) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = kl_read_file_max(path, 256u << 20, &text, &len, e);
    if (rc) return rc;
    rc = kl_profile_load_str(text, len, path, out, e);
    kl_mem_free(text);
    return rc;
}

void kl_profile_path_for(const char *features_json, char *buf, size_t n) {
    const char *slash = strrchr(features_json, '/');
    if (!slash) snprintf(buf, n, "profile.json");
    else snprintf(buf, n, "%.*s/profile.json", (int)(slash - features_json), features_json);
}

void kl_profile_summary(const kl_profile *p, kl_buf *b) {
    kl_buf_printf(b, "profile: %llu rows, %zu columns (feature_hash %.12s)\n", (unsigned long long)p->rows, p->ncols,
                  p->feature_hash);
    for (size_t i = 0; i < p->ncols; i++) {
        const kl_colprof *c = &p->cols[i];
        double nr = c->count ? (double)c->nulls / (double)c->count : 0;
        kl_buf_printf(b, "  %-7s %-24s nulls %5.1f%%", kl_prof_role_name(c->role), c->name, 100 * nr);
        if (c->categorical)
            kl_buf_printf(b, "  %llu distinct%s, top %s\n", (unsigned long long)c->distinct,
                          c->complete ? "" : " (more than kept)", c->ntop ? c->top[0] : "-");
        else
            kl_buf_printf(b, "  min %.6g  p50 %.6g  max %.6g  mean %.6g\n", c->min, kl_qs_quantile(&c->qs, 0.5), c->max,
                          c->mean);
    }
}
