/* The offline path: binding dataset columns to the declared inputs, fitting
 * (means, ranges, quantile edges, vocabularies), and the columnar apply —
 * row transforms in parallel blocks, per-entity windows over rows grouped by
 * entity and ordered by (time, value), each row seeing only the events
 * strictly before its own timestamp. Every value goes through the shared
 * evaluator of transform.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature/feature_int.h"

/* ==================================================================
 * Binding
 * ================================================================== */

int kl__features_type_ok(kl_col_type declared, kl_col_type have) {
    return declared == have || (declared == KL_COL_INT64 && have == KL_COL_INT32);
}

int kl__features_bind(const kl_features *f, kl_column *const *cols, size_t ncols, int need_label,
                      const kl_column **out, const kl_column **label, size_t *nrows, kl_err *e) {
    size_t n = (size_t)-1;
    for (size_t i = 0; i < f->ninputs + (need_label && f->has_label ? 1 : 0); i++) {
        int is_label = i == f->ninputs;
        const char *name = is_label ? f->label : f->inputs[i].name;
        kl_col_type t = is_label ? f->label_type : f->inputs[i].type;
        const kl_column *c = NULL;
        for (size_t j = 0; j < ncols; j++)
            if (cols[j] && !strcmp(cols[j]->name, name)) { c = cols[j]; break; }
        if (!c) {
            kl_buf b;
            kl_buf_init(&b);
            for (size_t j = 0; j < ncols; j++) kl_buf_printf(&b, "%s%s", j ? ", " : "", cols[j] ? cols[j]->name : "?");
            int rc = kl_err_set(e, KL_ENOTFOUND, "%s column '%s' not found in the data (columns: %s)",
                                is_label ? "label" : "input", name, b.data ? b.data : "");
            kl_buf_free(&b);
            return rc;
        }
        if (!kl__features_type_ok(t, c->type))
            return kl_err_set(e, KL_ETYPE, "column '%s' is %s in the data, the spec declares %s", name,
                              kl_col_type_name(c->type), kl_col_type_name(t));
        if (n != (size_t)-1 && c->len != n) return kl_err_set(e, KL_ESHAPE, "column '%s' has %zu rows, others %zu", name, c->len, n);
        n = c->len;
        if (is_label) *label = c; else out[i] = c;
    }
    *nrows = n == (size_t)-1 ? 0 : n;
    return KL_OK;
}

/* ==================================================================
 * Row transforms (parallel over fixed blocks of rows)
 * ================================================================== */

typedef struct {
    const kl_features *f;
    const feat *F;
    const kl_column **in;    /* bound inputs */
    kl_column **slots;       /* all slot columns */
    /* per chunk */
    kl_features_counts *counts;
    kl_err *errs;
    int *rcs;
    size_t *err_row;
    /* windows */
    const uint32_t *perm, *gs, *rs;
    const fevent *ev;
} job;

static void row_chunk(void *ctx, size_t b, size_t end, int chunk) {
    job *J = ctx;
    const feat *F = J->F;
    double out[F->width + 1];
    fval in[2];
    for (size_t r = b; r < end; r++) {
        for (int k = 0; k < F->nin; k++) kl__fval_from_col(J->in[F->in[k].col], r, &in[k]);
        int rc = kl__tf_eval(F, in, out, &J->counts[chunk], &J->errs[chunk]);
        if (rc) { J->rcs[chunk] = rc; J->err_row[chunk] = r; return; }
        for (size_t j = 0; j < F->width; j++) kl__store_slot(J->slots[F->slot0 + j], r, out[j]);
    }
}

/* Typed loops for one-input numeric and time kinds: the same value
 * functions as kl__tf_eval (kl__tf_num1 / kl__tf_time1), without the
 * per-value gather. */
#define STORE_LOOP(EXPR)                                                                       \
    do {                                                                                       \
        switch (dst->type) {                                                                   \
        case KL_COL_FLOAT32: for (size_t r = b; r < end; r++) { if (NULLCHK) continue; ((float *)dst->values)[r] = (float)(EXPR); } break; \
        case KL_COL_FLOAT64: for (size_t r = b; r < end; r++) { if (NULLCHK) continue; ((double *)dst->values)[r] = (EXPR); } break; \
        case KL_COL_INT32: for (size_t r = b; r < end; r++) { if (NULLCHK) continue; ((int32_t *)dst->values)[r] = (int32_t)(EXPR); } break; \
        default: for (size_t r = b; r < end; r++) { if (NULLCHK) continue; ((int64_t *)dst->values)[r] = (int64_t)(EXPR); } break; \
        }                                                                                      \
    } while (0)
#define NULLCHK (valid && !valid[r])

static void fast_chunk(void *ctx, size_t b, size_t end, int chunk) {
    job *J = ctx;
    const feat *F = J->F;
    const kl_column *c = J->in[F->in[0].col];
    kl_column *dst = J->slots[F->slot0];
    const uint8_t *valid = c->valid;
    kl_features_counts *cnt = &J->counts[chunk];
    /* nulls first: fill or fail (then the loops skip them) */
    if (valid) {
        for (size_t r = b; r < end; r++) {
            if (valid[r]) continue;
            if (!F->in[0].has_fill) {
                J->rcs[chunk] = kl_err_set(&J->errs[chunk], KL_EINVAL, "feature %s: input %s is null and has no fill (not nullable)", F->name, F->in[0].column);
                J->err_row[chunk] = r;
                return;
            }
            cnt->null_filled++;
            int64_t tf = (int64_t)F->in[0].fill * (F->in[0].type == KL_COL_DATE ? 86400000000LL : 1);
            double v = kl__tf_is_num1(F) ? kl__tf_num1(F, F->in[0].fill, cnt) : kl__tf_time1(F, tf, F->since_us);
            kl__store_slot(dst, r, v);
        }
    }
    if (kl__tf_is_num1(F)) {
        switch (c->type) {
        case KL_COL_FLOAT64: { const double *x = c->values; STORE_LOOP(kl__tf_num1(F, x[r], cnt)); break; }
        case KL_COL_FLOAT32: { const float *x = c->values; STORE_LOOP(kl__tf_num1(F, (double)x[r], cnt)); break; }
        case KL_COL_INT64: case KL_COL_TIMESTAMP: { const int64_t *x = c->values; STORE_LOOP(kl__tf_num1(F, (double)x[r], cnt)); break; }
        case KL_COL_INT32: case KL_COL_DATE: { const int32_t *x = c->values; STORE_LOOP(kl__tf_num1(F, (double)x[r], cnt)); break; }
        default: { const uint8_t *x = c->values; STORE_LOOP(kl__tf_num1(F, (double)x[r], cnt)); break; }
        }
    } else {
        int64_t ref = F->since_us;
        switch (c->type) {
        case KL_COL_DATE: { const int32_t *x = c->values; STORE_LOOP(kl__tf_time1(F, (int64_t)x[r] * 86400000000LL, ref)); break; }
        default: { const int64_t *x = c->values; STORE_LOOP(kl__tf_time1(F, x[r], ref)); break; }
        }
    }
}
#undef NULLCHK

static void win_chunk(void *ctx, size_t b, size_t end, int chunk) {
    job *J = ctx;
    const feat *F = J->F;
    kl_column *dst = J->slots[F->slot0];
    for (size_t p = b; p < end; p++) {
        size_t g = J->gs[p], s = J->rs[p];
        double v = kl__tf_window(F, J->ev + g, s - g, J->ev[p].ts, &J->counts[chunk]);
        kl__store_slot(dst, J->perm[p], v);
    }
}

/* Entity grouping shared by window features with the same entity and time
 * columns: perm (rows ordered by entity, then time, then row), gs (first
 * position of the entity's group), ts (time at each position). */
typedef struct {
    int ent_col, time_col;
    uint32_t *perm, *gs;
    int64_t *ts;
} grouping;

typedef struct { int64_t ts; uint32_t row; } tsrow;
static int tsrow_cmp(const void *a, const void *b) {
    const tsrow *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* Stable LSD radix sort of rows by an unsigned key (11-bit digits, only as
 * many passes as the key range needs): perm gets the rows grouped by key,
 * in row order within a key; keys ends up sorted alongside. */
static int radix_rows(uint64_t *keys, uint32_t *perm, size_t n, kl_err *e) {
    uint64_t mx = 0;
    for (size_t r = 0; r < n; r++) { perm[r] = (uint32_t)r; if (keys[r] > mx) mx = keys[r]; }
    int bits = mx ? 64 - __builtin_clzll(mx) : 0, passes = (bits + 10) / 11;
    if (!passes) return KL_OK;
    uint64_t *k2 = kl_mem_alloc(n * sizeof *k2 + 1, KL_TAG_WORKSPACE);
    uint32_t *p2 = kl_mem_alloc(n * sizeof *p2 + 1, KL_TAG_WORKSPACE);
    size_t *h = calloc(2048, sizeof *h);
    if (!k2 || !p2 || !h) { kl_mem_free(k2); kl_mem_free(p2); free(h); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    uint64_t *ka = keys, *kb = k2;
    uint32_t *pa = perm, *pb = p2;
    for (int pass = 0; pass < passes; pass++) {
        int sh = 11 * pass;
        memset(h, 0, 2048 * sizeof *h);
        for (size_t r = 0; r < n; r++) h[(ka[r] >> sh) & 2047]++;
        size_t sum = 0;
        for (int d = 0; d < 2048; d++) { size_t c = h[d]; h[d] = sum; sum += c; }
        for (size_t r = 0; r < n; r++) {
            size_t pos = h[(ka[r] >> sh) & 2047]++;
            kb[pos] = ka[r];
            pb[pos] = pa[r];
        }
        uint64_t *tk = ka; ka = kb; kb = tk;
        uint32_t *tp = pa; pa = pb; pb = tp;
    }
    if (pa != perm) { memcpy(perm, pa, n * sizeof *perm); memcpy(keys, ka, n * sizeof *keys); }
    kl_mem_free(k2);
    kl_mem_free(p2);
    free(h);
    return KL_OK;
}

static int build_grouping(const feat *F, const kl_column **in, size_t n, grouping *G, kl_err *e) {
    int rc = KL_OK;
    fmap m = {0};
    uint32_t *gid = NULL, *cnt = NULL;
    uint64_t *keys = NULL;
    tsrow *tmp = NULL;
    G->perm = kl_mem_alloc(n * sizeof *G->perm + 1, KL_TAG_WORKSPACE);
    G->gs = kl_mem_alloc(n * sizeof *G->gs + 1, KL_TAG_WORKSPACE);
    G->ts = kl_mem_alloc(n * sizeof *G->ts + 1, KL_TAG_WORKSPACE);
    if (!G->perm || !G->gs || !G->ts) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    const kl_column *ec = in[F->in[0].col], *tc = in[F->in[1].col];
    int intkey = ec->type != KL_COL_STRING && ec->type != KL_COL_BINARY;
    if (intkey) keys = kl_mem_alloc(n * sizeof *keys + 1, KL_TAG_WORKSPACE);
    else gid = kl_mem_alloc(n * sizeof *gid + 1, KL_TAG_WORKSPACE);
    if ((intkey && !keys) || (!intkey && (!gid || kl__fmap_init(&m, 64)))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    size_t ng = 0;
    int64_t kmin = INT64_MAX;
    for (size_t r = 0; r < n; r++) {
        fval v, t;
        kl__fval_from_col(ec, r, &v);
        kl__fval_from_col(tc, r, &t);
        if (v.null || t.null) { rc = kl_err_set(e, KL_EINVAL, "feature %s: row %zu: %s is null (entity and time are not nullable)", F->name, r, v.null ? F->in[0].column : F->in[1].column); goto done; }
        if (intkey) {
            keys[r] = (uint64_t)v.i;
            if (v.i < kmin) kmin = v.i;
        } else {
            char buf[8];
            size_t kn;
            const char *k = kl__entity_key(F, &v, buf, &kn);
            int created;
            uint64_t *slot = kl__fmap_put(&m, k, kn, &created);
            if (!slot) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
            if (created) *slot = ng++;
            gid[r] = (uint32_t)*slot;
        }
        G->ts[r] = kl__win_time(F, &t);
    }
    if (intkey) {
        /* integer entities: radix sort by key (no hash table) */
        for (size_t r = 0; r < n; r++) keys[r] -= (uint64_t)kmin;
        if ((rc = radix_rows(keys, G->perm, n, e))) goto done;
    } else {
        /* strings: dense ids from the map, then a stable counting sort */
        cnt = calloc(ng + 1, sizeof *cnt);
        if (!cnt) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        for (size_t r = 0; r < n; r++) cnt[gid[r] + 1]++;
        for (size_t g = 0; g < ng; g++) cnt[g + 1] += cnt[g];
        for (size_t r = 0; r < n; r++) G->perm[cnt[gid[r]]++] = (uint32_t)r;
    }
    /* ts by position */
    {
        int64_t *tp = kl_mem_alloc(n * sizeof *tp + 1, KL_TAG_WORKSPACE);
        if (!tp) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        for (size_t p = 0; p < n; p++) tp[p] = G->ts[G->perm[p]];
        kl_mem_free(G->ts);
        G->ts = tp;
    }
    /* walk the groups: order each by (time, row) when the rows are not in
     * time order already; record the group start of every position */
    size_t tmpcap = 0;
    for (size_t start = 0; start < n;) {
        size_t end = start + 1;
        if (intkey) while (end < n && keys[end] == keys[start]) end++;
        else while (end < n && gid[G->perm[end]] == gid[G->perm[start]]) end++;
        int sorted = 1;
        for (size_t p = start + 1; p < end && sorted; p++) sorted = G->ts[p] >= G->ts[p - 1];
        if (!sorted) {
            if (end - start > tmpcap) {
                tmpcap = (end - start) * 2;
                tsrow *nt = realloc(tmp, tmpcap * sizeof *tmp);
                if (!nt) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
                tmp = nt;
            }
            for (size_t p = start; p < end; p++) tmp[p - start] = (tsrow){G->ts[p], G->perm[p]};
            qsort(tmp, end - start, sizeof *tmp, tsrow_cmp);
            for (size_t p = start; p < end; p++) { G->perm[p] = tmp[p - start].row; G->ts[p] = tmp[p - start].ts; }
        }
        for (size_t p = start; p < end; p++) G->gs[p] = (uint32_t)start;
        start = end;
    }
done:
    free(tmp);
    kl__fmap_free(&m);
    kl_mem_free(gid);
    kl_mem_free(keys);
    free(cnt);
    return rc;
}

static void grouping_free(grouping *G) {
    kl_mem_free(G->perm);
    kl_mem_free(G->gs);
    kl_mem_free(G->ts);
}

static int fev_cmp(const void *a, const void *b) { return kl__fevent_cmp(a, b); }

static int run_window(const feat *F, const kl_column **in, size_t n, grouping *G, job *J, kl_pool *pool, int nch, kl_err *e) {
    int rc = KL_OK;
    fevent *ev = kl_mem_alloc(n * sizeof *ev + 1, KL_TAG_WORKSPACE);
    uint32_t *rs = kl_mem_alloc(n * sizeof *rs + 1, KL_TAG_WORKSPACE);
    if (!ev || !rs) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    const kl_column *vc = F->has_value ? in[F->value.col] : NULL;
    for (size_t p = 0; p < n; p++) {
        fval v = {0};
        if (vc) {
            kl__fval_from_col(vc, G->perm[p], &v);
            if (v.null && !F->value.has_fill) { rc = kl_err_set(e, KL_EINVAL, "feature %s: row %u: %s is null and has no fill", F->name, G->perm[p], F->value.column); goto done; }
        }
        ev[p].ts = G->ts[p];
        ev[p].v = kl__win_value(F, &v, &J->counts[0]);
    }
    /* order tie runs (same entity, same time) by value: a content-based
     * order, so the result does not depend on the order of the rows */
    for (size_t p = 0; p < n;) {
        size_t q = p + 1;
        while (q < n && G->gs[q] == G->gs[p] && ev[q].ts == ev[p].ts) q++;
        if (q - p > 1 && vc) {
            /* sort (event, row) pairs together */
            size_t m = q - p;
            struct { fevent e; uint32_t r; } *t = malloc(m * sizeof *t);
            if (!t) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
            for (size_t i = 0; i < m; i++) { t[i].e = ev[p + i]; t[i].r = G->perm[p + i]; }
            qsort(t, m, sizeof *t, fev_cmp);   /* fevent first in the struct */
            for (size_t i = 0; i < m; i++) { ev[p + i] = t[i].e; G->perm[p + i] = t[i].r; }
            free(t);
        }
        for (size_t i = p; i < q; i++) rs[i] = (uint32_t)p;
        p = q;
    }
    J->F = F;
    J->perm = G->perm;
    J->gs = G->gs;
    J->rs = rs;
    J->ev = ev;
    (void)nch;
    kl_pool_parallel_for(pool, n, 4096, win_chunk, J);
done:
    kl_mem_free(ev);
    kl_mem_free(rs);
    return rc;
}

/* ==================================================================
 * Apply
 * ================================================================== */

static int new_slot(const char *name, kl_col_type t, size_t n, kl_column **out, kl_err *e) {
    int rc = kl_column_new(name, t, 0, n, out, e);
    if (rc) return rc;
    if ((rc = kl_column_reserve(*out, n, 0))) { kl_column_free(*out); *out = NULL; return kl_err_set(e, rc, "out of memory"); }
    (*out)->len = n;   /* every row is written by apply */
    return KL_OK;
}

/* Computes features [f0, f1) of the set into slots (rows [0, n)). */
static int apply_range(const kl_features *f, size_t f0, size_t f1, const kl_column **in, size_t n,
                       kl_column **slots, kl_pool *pool, kl_features_counts *counts, kl_err *e) {
    int rc = KL_OK;
    int nch = kl_pool_chunks(pool, n, 4096);
    if (nch < 1) nch = 1;
    job J = {.f = f, .in = in, .slots = slots};
    J.counts = calloc((size_t)nch, sizeof *J.counts);
    J.errs = calloc((size_t)nch, sizeof *J.errs);
    J.rcs = calloc((size_t)nch, sizeof *J.rcs);
    J.err_row = calloc((size_t)nch, sizeof *J.err_row);
    grouping G = {.ent_col = -1};
    if (!J.counts || !J.errs || !J.rcs || !J.err_row) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (size_t i = f0; i < f1 && !rc; i++) {
        const feat *F = &f->f[i];
        if (F->kind == TF_WINDOW) {
            if (G.ent_col != F->in[0].col || G.time_col != F->in[1].col) {
                grouping_free(&G);
                memset(&G, 0, sizeof G);
                G.ent_col = -1;
                if ((rc = build_grouping(F, in, n, &G, e))) break;
                G.ent_col = F->in[0].col;
                G.time_col = F->in[1].col;
            }
            rc = run_window(F, in, n, &G, &J, pool, nch, e);
        } else {
            J.F = F;
            int fast = F->nin == 1 && (kl__tf_is_num1(F) || F->kind == TF_DATEPART || F->kind == TF_TIME_SINCE);
            kl_pool_parallel_for(pool, n, 4096, fast ? fast_chunk : row_chunk, &J);
            for (int c = 0; c < nch; c++) {
                if (J.rcs[c]) {
                    rc = J.rcs[c];
                    if (e) *e = J.errs[c];
                    kl_err_prefix(e, "row %zu", J.err_row[c]);
                    break;
                }
            }
        }
    }
    if (counts) {
        for (int c = 0; c < nch; c++) {
            counts->unknown += J.counts[c].unknown;
            counts->null_filled += J.counts[c].null_filled;
            counts->div_zero += J.counts[c].div_zero;
            counts->clamped += J.counts[c].clamped;
            counts->empty_window += J.counts[c].empty_window;
        }
    }
done:
    grouping_free(&G);
    free(J.counts);
    free(J.errs);
    free(J.rcs);
    free(J.err_row);
    return rc;
}

/* Keeps the rows r with keep[r] of a slot column (numeric: slots never hold strings). */
static void keep_rows(kl_column *c, const uint8_t *keep, size_t n) {
    size_t w = kl_col_type_size(c->type), m = 0;
    uint8_t *v = c->values;
    for (size_t r = 0; r < n; r++)
        if (keep[r]) { if (m != r) memcpy(v + m * w, v + r * w, w); m++; }
    c->len = m;
}

/* Row r's class: the index of its label among the fitted classes (sorted,
 * so a binary search); a value fit never saw is refused, naming it. */
static int class_index(const kl_features *f, const kl_column *label, size_t r, int64_t *k, kl_err *e) {
    size_t sn, lo = 0, hi = f->nclasses;
    const char *s = kl_column_get_str(label, r, &sn);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *c = f->classes[mid];
        size_t cn = strlen(c);
        int d = memcmp(c, s, KL_MIN(cn, sn));
        if (!d) d = cn < sn ? -1 : cn > sn;
        if (!d) {
            *k = (int64_t)mid;
            return KL_OK;
        }
        if (d < 0) lo = mid + 1;
        else hi = mid;
    }
    return kl_err_set(e, KL_EINVAL,
                      "label %s, row %zu: '%.*s' is not one of the %zu classes the features were fitted on (refit on "
                      "rows that contain it)",
                      f->label, r, (int)KL_MIN(sn, (size_t)200), s, f->nclasses);
}

/* The label column after the slots: copied, with its null rows dropped (and
 * the slots' rows with them, counted), refused, or filled, as the spec's
 * label nulls says. */
static int copy_label(const kl_features *f, const kl_column *label, size_t n, kl_column **slots,
                      kl_features_counts *counts, kl_err *e) {
    size_t nulls = label->valid ? kl_column_null_count(label) : 0;
    if (nulls && f->label_nulls == LABEL_FAIL) {
        size_t r = 0;
        while (!kl_column_is_null(label, r)) r++;
        return kl_err_set(e, KL_EINVAL, "label %s is null in row %zu (%zu null labels; label nulls: fail)", f->label, r, nulls);
    }
    int drop = nulls && f->label_nulls == LABEL_DROP;
    int numeric = label->type != KL_COL_STRING && label->type != KL_COL_BINARY;
    if (f->label_nulls == LABEL_FILL && !numeric) return kl_err_set(e, KL_ETYPE, "label %s: fill needs a numeric label", f->label);
    int classes = kl__label_is_class(f);
    kl_column *lc = NULL;
    int rc = kl_column_new(label->name, classes ? KL_COL_INT32 : label->type,
                           nulls && !drop && f->label_nulls != LABEL_FILL, n - (drop ? nulls : 0), &lc, e);
    if (rc) return rc;
    slots[f->width] = lc;
    for (size_t r = 0; r < n && !rc; r++) {
        if (kl_column_is_null(label, r)) {
            if (drop) continue;
            if (f->label_nulls != LABEL_FILL) rc = kl_column_push_null(lc);
            else if (label->type == KL_COL_FLOAT32 || label->type == KL_COL_FLOAT64) rc = kl_column_push_f64(lc, f->label_fill);
            else rc = kl_column_push_i64(lc, (int64_t)f->label_fill);
        } else if (label->type == KL_COL_FLOAT32 || label->type == KL_COL_FLOAT64) {
            rc = kl_column_push_f64(lc, kl_column_get_f64(label, r));
        } else if (classes) {
            int64_t k = 0;
            if ((rc = class_index(f, label, r, &k, e))) break;
            rc = kl_column_push_i64(lc, k);
        } else if (!numeric) {
            size_t sn;
            const char *s = kl_column_get_str(label, r, &sn);
            rc = kl_column_push_str(lc, s, sn);
        } else {
            rc = kl_column_push_i64(lc, kl_column_get_i64(label, r));
        }
    }
    if (rc) return e && e->code ? rc : kl_err_set(e, rc, "copying the label column");
    if (drop) {
        uint8_t *keep = malloc(n ? n : 1);
        if (!keep) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (size_t r = 0; r < n; r++) keep[r] = !kl_column_is_null(label, r);
        for (size_t s = 0; s < f->width; s++) keep_rows(slots[s], keep, n);
        free(keep);
        if (counts) { counts->label_dropped = nulls; counts->rows = n - nulls; }
    }
    return KL_OK;
}

int kl_features_apply(const kl_features *f, kl_column *const *cols, size_t ncols, kl_pool *pool,
                      kl_column ***out, size_t *nout, kl_features_counts *counts, kl_err *e) {
    return kl__features_apply_slots(f, cols, ncols, 1, pool, out, nout, counts, e);
}

int kl__features_apply_slots(const kl_features *f, kl_column *const *cols, size_t ncols, int with_label, kl_pool *pool,
                             kl_column ***out, size_t *nout, kl_features_counts *counts, kl_err *e) {
    *out = NULL;
    *nout = 0;
    if (!f->fitted) return kl_err_set(e, KL_ESTATE, "features are not fitted");
    const kl_column **in = calloc(f->ninputs + 1, sizeof *in);
    const kl_column *label = NULL;
    size_t n = 0, total = f->width + (with_label && f->has_label ? 1 : 0);
    kl_column **slots = calloc(total + 1, sizeof *slots);
    int rc;
    if (!in || !slots) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    if ((rc = kl__features_bind(f, cols, ncols, with_label, in, &label, &n, e))) goto fail;
    if (n > UINT32_MAX) { rc = kl_err_set(e, KL_ERANGE, "more than 2^32 rows in one apply"); goto fail; }
    for (size_t s = 0; s < f->width; s++)
        if ((rc = new_slot(f->slot_names[s], kl_features_slot_type(f, s), n, &slots[s], e))) goto fail;
    if (counts) memset(counts, 0, sizeof *counts);
    if ((rc = apply_range(f, 0, f->nf, in, n, slots, pool, counts, e))) goto fail;
    if (counts) counts->rows = n;
    if (label && (rc = copy_label(f, label, n, slots, counts, e))) goto fail;
    free(in);
    *out = slots;
    *nout = total;
    return KL_OK;
fail:
    for (size_t s = 0; slots && s < total; s++) kl_column_free(slots[s]);
    free(slots);
    free(in);
    return rc;
}

/* ==================================================================
 * Fit
 * ================================================================== */

typedef struct { const char *k; size_t n; uint64_t c; } vcount;
static int vcount_cmp(const void *a, const void *b) {
    const vcount *x = a, *y = b;
    if (x->c != y->c) return x->c > y->c ? -1 : 1;
    size_t m = KL_MIN(x->n, y->n);
    int r = memcmp(x->k, y->k, m);
    if (r) return r;
    return (x->n > y->n) - (x->n < y->n);
}
static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fit_one(feat *F, const kl_column *c, size_t n, kl_err *e) {
    int rc = KL_OK;
    if (F->kind == TF_STANDARDIZE || F->kind == TF_MINMAX || F->kind == TF_BUCKETIZE) {
        double *v = kl_mem_alloc(n * sizeof *v + 1, KL_TAG_WORKSPACE);
        if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
        size_t m = 0;
        for (size_t r = 0; r < n; r++) {
            fval x;
            kl__fval_from_col(c, r, &x);
            if (x.null) continue;
            if (!isfinite(x.d)) { kl_mem_free(v); return kl_err_set(e, KL_EINVAL, "feature %s: row %zu: %s is not finite", F->name, r, c->name); }
            v[m++] = x.d;
        }
        if (!m) { kl_mem_free(v); return kl_err_set(e, KL_EINVAL, "feature %s: no non-null values of %s to fit on", F->name, c->name); }
        if (F->kind == TF_STANDARDIZE) {
            double s = 0, ss = 0;
            for (size_t i = 0; i < m; i++) s += v[i];
            F->mean = s / (double)m;
            for (size_t i = 0; i < m; i++) ss += (v[i] - F->mean) * (v[i] - F->mean);
            F->std = sqrt(ss / (double)m);
            if (!(F->std > 0)) F->std = 1.0;
        } else if (F->kind == TF_MINMAX) {
            F->min = F->max = v[0];
            for (size_t i = 1; i < m; i++) { if (v[i] < F->min) F->min = v[i]; if (v[i] > F->max) F->max = v[i]; }
        } else {
            qsort(v, m, sizeof *v, dbl_cmp);
            free(F->edges);
            F->edges = calloc((size_t)F->quantiles + 1, sizeof *F->edges);
            F->nedges = 0;
            for (int64_t q = 1; q < F->quantiles; q++) {
                double x = v[(size_t)((double)q * (double)(m - 1) / (double)F->quantiles)];
                if (!F->nedges || x > F->edges[F->nedges - 1]) F->edges[F->nedges++] = x;
            }
        }
        kl_mem_free(v);
    } else if (F->kind == TF_ONEHOT || F->kind == TF_INDEX) {
        fmap m = {0};
        if (kl__fmap_init(&m, 64)) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (size_t r = 0; r < n; r++) {
            fval x;
            kl__fval_from_col(c, r, &x);
            if (x.null) continue;
            char buf[32];
            size_t kn;
            const char *k = kl__fval_key(&F->in[0], &x, buf, &kn);
            uint64_t *slot = kl__fmap_put(&m, k, kn, NULL);
            if (!slot) { kl__fmap_free(&m); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
            (*slot)++;
        }
        vcount *vc = calloc(m.len + 1, sizeof *vc);
        size_t nv = 0;
        for (size_t i = 0; vc && i < m.cap; i++)
            if (m.e[i].used) vc[nv++] = (vcount){kl__fmap_key(&m, &m.e[i]), m.e[i].n, m.e[i].v};
        if (!vc) { kl__fmap_free(&m); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
        qsort(vc, nv, sizeof *vc, vcount_cmp);
        if ((int64_t)nv > F->max_size) nv = (size_t)F->max_size;
        for (size_t i = 0; i < F->nvocab; i++) free(F->vocab[i]);
        free(F->vocab);
        free(F->vocab_len);
        F->vocab = calloc(nv + 1, sizeof *F->vocab);
        F->vocab_len = calloc(nv + 1, sizeof *F->vocab_len);
        F->nvocab = nv;
        for (size_t i = 0; i < nv; i++) {
            F->vocab[i] = malloc(vc[i].n + 1);
            memcpy(F->vocab[i], vc[i].k, vc[i].n);
            F->vocab[i][vc[i].n] = 0;
            F->vocab_len[i] = vc[i].n;
        }
        free(vc);
        kl__fmap_free(&m);
        rc = kl__vocab_build(F, e);
    }
    if (!rc) F->fitted = 1;
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A string label's classes: its distinct non-null values, sorted bytewise
 * (a refit learns them again). More than KL_FEATURES_MAX_CLASSES is refused:
 * a label of that many classes is an identifier, not a class. */
static int fit_classes(kl_features *f, const kl_column *label, size_t n, kl_err *e) {
    for (size_t i = 0; i < f->nclasses; i++) free(f->classes[i]);
    free(f->classes);
    f->classes = NULL;
    f->nclasses = 0;
    fmap seen;
    if (kl__fmap_init(&seen, 64)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    size_t cap = 0;
    int rc = KL_OK;
    for (size_t r = 0; r < n && !rc; r++) {
        if (kl_column_is_null(label, r)) continue;
        size_t sn;
        const char *s = kl_column_get_str(label, r, &sn);
        if (memchr(s, 0, sn)) {
            rc = kl_err_set(e, KL_EINVAL, "label %s, row %zu: a class name with a NUL byte", f->label, r);
            break;
        }
        int created = 0;
        if (!kl__fmap_put(&seen, s, sn, &created)) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        if (!created) continue;
        if (f->nclasses == KL_FEATURES_MAX_CLASSES) {
            rc = kl_err_set(e, KL_ERANGE, "label %s has more than %d distinct values: not a class label", f->label,
                            KL_FEATURES_MAX_CLASSES);
            break;
        }
        if (f->nclasses == cap) {
            char **g = realloc(f->classes, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) {
                rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                break;
            }
            f->classes = g;
        }
        if (!(f->classes[f->nclasses] = strndup(s, sn))) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        f->nclasses++;
    }
    kl__fmap_free(&seen);
    if (!rc && !f->nclasses)
        rc = kl_err_set(e, KL_EINVAL, "label %s: every value is null, no class to learn", f->label);
    if (!rc) qsort(f->classes, f->nclasses, sizeof *f->classes, cmp_str);
    return rc;
}

int kl_features_fit(kl_features *f, kl_column *const *cols, size_t ncols, kl_err *e) {
    const kl_column **in = calloc(f->ninputs + 1, sizeof *in);
    const kl_column *label = NULL;
    size_t n = 0;
    kl_column **slots = NULL;
    kl_pool *one = NULL;
    int rc;
    if (!in) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if ((rc = kl__features_bind(f, cols, ncols, kl__label_is_class(f), in, &label, &n, e))) goto done;
    for (size_t i = 0; i < f->nf; i++) {
        feat *F = &f->f[i];
        if (kl__tf_needs_fit(F) && (rc = fit_one(F, in[F->in[0].col], n, e))) goto done;
    }
    if (kl__label_is_class(f) && (rc = fit_classes(f, label, n, e))) goto done;
    f->fitted = 1;
    if ((rc = kl__features_layout(f, e)) || (rc = kl__features_rehash(f, e))) goto done;
    /* measured cost per row: one thread, up to 50k rows, best of 3 (the
     * machine may be shared) */
    size_t m = KL_MIN(n, (size_t)50000);
    slots = calloc(f->width + 1, sizeof *slots);
    if (!slots) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (size_t s = 0; s < f->width; s++)
        if ((rc = new_slot(f->slot_names[s], kl_features_slot_type(f, s), m, &slots[s], e))) goto done;
    if ((rc = kl_pool_new(1, &one, e))) goto done;
    for (size_t i = 0; i < f->nf && m; i++) {
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            int64_t t0 = kl_time_mono_ns();
            if ((rc = apply_range(f, i, i + 1, in, m, slots, one, NULL, e))) goto done;
            double ns = (double)(kl_time_mono_ns() - t0) / (double)m;
            if (!rep || ns < best) best = ns;
        }
        f->f[i].cost_ns = best;
    }
done:
    if (rc) f->fitted = 0;
    for (size_t s = 0; slots && s < f->width; s++) kl_column_free(slots[s]);
    free(slots);
    kl_pool_free(one);
    free(in);
    return rc;
}
