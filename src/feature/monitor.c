/* The live monitor of a served model version (include/keel/profile.h):
 * sliding-window counts of the raw inputs, feature slots and outputs in the
 * reference profile's bins, updated on the request path without locks (each
 * thread writes its own shard with relaxed atomics; the last shard is shared
 * by threads beyond KL_MON_SHARDS - 1 and uses atomic adds), merged on read
 * and compared with the reference (PSI, JS, KS, chi-squared, null, unknown
 * and out-of-range rates). A window is a ring of KL_MON_SLOTS slots of
 * window/KL_MON_SLOTS each; a writer that finds a slot of an older epoch
 * clears it first. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "feature/feature_int.h"
#include "keel/profile.h"

/* the first counters of a slot: rows seen per role (every column of a role
 * sees every row: a column's n is its role's); then per column: nulls,
 * unknown, its bins */
enum { MG_ROWS = 0, MG_FB_ROWS = 3, MG_FB = 4, MG_COUNT = MG_FB + KL_MON_FALLBACKS };
enum { MC_NULLS, MC_UNKNOWN, MC_BINS };

typedef struct {
    const kl_colprof *p;
    uint32_t off, nb; /* first counter; bins (numbers: nedges + 1; categories: ntop + 1, the last "other") */
    fin in;           /* raw inputs: how the record field reads */
    fmap keys;        /* categories: key -> bin */
    int temporal;     /* a date or timestamp input: time moves on, so it is described, never flagged */
    uint64_t psi_js_min; /* live values before PSI and JS: their noise under the thresholds (kl_stat_min_samples) */
} mcol;

/* A shard. An exclusive shard's writer counts into `acc` only (one
 * increment per value) for the current interval of gran_ns (the shortest
 * slot), and adds acc into every window's slot of that time when the
 * interval is over (once per interval: nwin x ncnt additions); a read adds
 * acc to the windows its start lies in. The shared shard (several writers)
 * counts into every window's slot directly, with atomic adds. */
typedef struct {
    _Atomic int64_t *epoch;    /* [nwin * KL_MON_SLOTS] */
    _Atomic uint32_t *c;       /* [nwin * KL_MON_SLOTS * ncnt] */
    _Atomic uint32_t *acc;     /* [ncnt] */
    _Atomic int64_t acc_start; /* ns; 0: acc is empty */
    int64_t acc_end;           /* the writer's own */
} mshard;

struct kl_monitor {
    kl_profile *ref;
    const kl_features *f;
    kl_monitor_cfg cfg;
    int64_t slot_ns[KL_MON_MAX_WINDOWS];
    mcol *c;
    size_t nc;
    int *raw; /* mcol indices of the raw inputs */
    size_t nraw;
    int *feat; /* feature slot s -> mcol index or -1 */
    size_t width;
    int *outs; /* output k -> mcol index (outputs in profile order) */
    size_t nouts;
    uint32_t ncnt;
    size_t shard_bytes;
    int64_t gran_ns; /* the shortest slot: an exclusive shard's accumulation interval */
    _Atomic(mshard *) shard[KL_MON_SHARDS];
};

void kl_monitor_cfg_default(kl_monitor_cfg *c) {
    memset(c, 0, sizeof *c);
    c->nwin = 3;
    c->win_s[0] = 300;
    c->win_s[1] = 3600;
    c->win_s[2] = 86400;
    c->psi = 0.2;
    c->js = 0.1;
    c->p_value = 0.001;
    c->min_samples = 100;
    c->min_expected = 5;
    c->null_delta = 0.05;
    c->unknown_ratio = 0.05;
    c->oob_ratio = 0.05;
}

int kl_monitor_parse_window(const char *s, int64_t *out) {
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    int64_t mul = !*end     ? 1
        : !strcmp(end, "s") ? 1
        : !strcmp(end, "m") ? 60
        : !strcmp(end, "h") ? 3600
        : !strcmp(end, "d") ? 86400
                            : 0;
    if (end == s || !mul || v <= 0 || v > 366LL * 86400 / mul) return KL_EINVAL;
    *out = v * mul;
    return KL_OK;
}

void kl_monitor_window_name(int64_t s, char *buf, size_t n) {
    if (s % 86400 == 0 && s >= 2 * 86400) snprintf(buf, n, "%lldd", (long long)(s / 86400));
    else if (s % 3600 == 0) snprintf(buf, n, "%lldh", (long long)(s / 3600));
    else if (s % 60 == 0) snprintf(buf, n, "%lldm", (long long)(s / 60));
    else snprintf(buf, n, "%llds", (long long)s);
}

/* ==================================================================
 * Set-up
 * ================================================================== */

static const fcol *find_input(const kl_features *f, const char *name) {
    for (size_t i = 0; f && i < f->ninputs; i++)
        if (!strcmp(f->inputs[i].name, name)) return &f->inputs[i];
    return NULL;
}

/* PSI and JS of few values are noise over many bins: the sample size from
 * which same-distribution windows stay under the thresholds (at the tests'
 * level p_value), over the bins the reference fills, and at least min_samples */
static uint64_t psi_js_min(const kl_monitor_cfg *g, const kl_colprof *p) {
    int k = 0;
    uint64_t m = 0;
    if (p->categorical) {
        for (size_t i = 0; i < p->ntop; i++) k += p->top_count[i] > 0, m += p->top_count[i];
        k += p->other > 0, m += p->other;
    } else {
        for (size_t i = 0; p->bins && i <= p->nedges; i++) k += p->bins[i] > 0, m += p->bins[i];
    }
    uint64_t n = kl_stat_min_samples(k, m, g->psi, g->js, g->p_value);
    return n > g->min_samples ? n : g->min_samples;
}

static int setup_col(kl_monitor *m, mcol *c, const kl_colprof *p, kl_err *e) {
    c->p = p;
    c->off = m->ncnt;
    c->nb = p->categorical ? (uint32_t)p->ntop + 1 : p->nedges ? (uint32_t)p->nedges + 1 : 0;
    m->ncnt += MC_BINS + c->nb;
    c->psi_js_min = psi_js_min(&m->cfg, p);
    if (!p->categorical) return KL_OK;
    if (kl__fmap_init(&c->keys, p->ntop)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->ntop; i++) {
        uint64_t *v = kl__fmap_put(&c->keys, p->top[i], strlen(p->top[i]), NULL);
        if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
        *v = i;
    }
    return KL_OK;
}

int kl_monitor_new(kl_profile *ref, const kl_features *f, const kl_monitor_cfg *cfg, kl_monitor **out, kl_err *e) {
    *out = NULL;
    kl_monitor *m = calloc(1, sizeof *m);
    if (!m) {
        kl_profile_free(ref);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    m->ref = ref;
    m->f = f;
    m->cfg = *cfg;
    int rc = KL_OK;
    for (int w = 0; w < cfg->nwin; w++) m->slot_ns[w] = cfg->win_s[w] * 1000000000LL / KL_MON_SLOTS;
    m->width = f ? kl_features_width(f) : 0;
    m->ncnt = MG_COUNT;
    m->c = calloc(ref->ncols ? ref->ncols : 1, sizeof *m->c);
    m->raw = calloc(ref->ncols ? ref->ncols : 1, sizeof *m->raw);
    m->outs = calloc(ref->ncols ? ref->ncols : 1, sizeof *m->outs);
    m->feat = malloc((m->width ? m->width : 1) * sizeof *m->feat);
    if (!m->c || !m->raw || !m->outs || !m->feat) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t s = 0; s < m->width; s++) m->feat[s] = -1;
    for (size_t i = 0; i < ref->ncols && !rc; i++) {
        const kl_colprof *p = &ref->cols[i];
        mcol *c = &m->c[m->nc];
        if (p->role == KL_PROF_INPUT) {
            const fcol *fc = find_input(f, p->name);
            if (!fc) continue; /* a column these features do not read */
            c->in = (fin){
                .column = fc->name, .type = fc->type, .nullable = 1, .raw = fc->raw, .col = (int)(fc - f->inputs)};
            c->temporal = fc->type == KL_COL_DATE || fc->type == KL_COL_TIMESTAMP;
            m->raw[m->nraw++] = (int)m->nc;
        } else if (p->role == KL_PROF_FEATURE) {
            size_t s = 0;
            while (s < m->width && strcmp(kl_features_slot_name(f, s), p->name)) s++;
            if (s == m->width) continue;
            m->feat[s] = (int)m->nc;
        } else {
            m->outs[m->nouts++] = (int)m->nc;
        }
        rc = setup_col(m, c, p, e);
        m->nc++;
    }
    if (rc) goto fail;
    m->shard_bytes = (size_t)cfg->nwin * KL_MON_SLOTS * (sizeof(int64_t) + (size_t)m->ncnt * sizeof(uint32_t)) +
        (size_t)m->ncnt * sizeof(uint32_t);
    m->gran_ns = m->slot_ns[0];
    for (int w = 1; w < cfg->nwin; w++)
        if (m->slot_ns[w] < m->gran_ns) m->gran_ns = m->slot_ns[w];
    size_t maxb = 0;
    kl_monitor_bytes(m, &maxb);
    if (maxb > KL_MON_MAX_BYTES) {
        rc = kl_err_set(e, KL_ERANGE,
                        "monitoring %zu columns over %d windows would hold up to %.1f MB, over the cap of %llu MB "
                        "(fewer windows or columns)",
                        m->nc, cfg->nwin, (double)maxb / 1e6, (unsigned long long)(KL_MON_MAX_BYTES >> 20));
        goto fail;
    }
    *out = m;
    return KL_OK;
fail:
    kl_monitor_free(m);
    return rc;
}

void kl_monitor_free(kl_monitor *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nc; i++) kl__fmap_free(&m->c[i].keys);
    for (int k = 0; k < KL_MON_SHARDS; k++) {
        mshard *s = atomic_load(&m->shard[k]);
        if (s) kl_mem_free((void *)s->epoch);
        free(s);
    }
    free(m->c);
    free(m->raw);
    free(m->outs);
    free(m->feat);
    kl_profile_free(m->ref);
    free(m);
}

const kl_profile *kl_monitor_profile(const kl_monitor *m) { return m->ref; }
const kl_monitor_cfg *kl_monitor_config(const kl_monitor *m) { return &m->cfg; }
int kl_monitor_has_outputs(const kl_monitor *m) { return m->nouts > 0; }

size_t kl_monitor_bytes(const kl_monitor *m, size_t *max_bytes) {
    size_t fixed = sizeof *m + m->nc * sizeof *m->c, n = 0;
    for (size_t i = 0; i < m->nc; i++) fixed += m->c[i].keys.cap * sizeof(fmap_ent) + m->c[i].keys.pool_cap;
    for (int k = 0; k < KL_MON_SHARDS; k++)
        if (atomic_load_explicit(&m->shard[k], memory_order_acquire)) n++;
    if (max_bytes) *max_bytes = fixed + KL_MON_SHARDS * (m->shard_bytes + sizeof(mshard));
    return fixed + n * (m->shard_bytes + sizeof(mshard));
}

/* ==================================================================
 * Hot path
 * ================================================================== */

static atomic_int next_tid;
static _Thread_local int tl_tid = -1;

typedef struct {
    mshard *s;
    int shared;
    _Atomic uint32_t *acc;           /* exclusive: where the values go */
    size_t base[KL_MON_MAX_WINDOWS]; /* shared: each window's slot */
} wctx;

static mshard *shard_get(kl_monitor *m, int k) {
    mshard *s = atomic_load_explicit(&m->shard[k], memory_order_acquire);
    if (s) return s;
    s = calloc(1, sizeof *s);
    size_t ne = (size_t)m->cfg.nwin * KL_MON_SLOTS;
    void *blk = s ? kl_mem_alloc(m->shard_bytes ? m->shard_bytes : 1, KL_TAG_OTHER) : NULL;
    if (!blk) {
        free(s);
        return NULL;
    }
    memset(blk, 0, m->shard_bytes);
    s->epoch = blk;
    s->c = (_Atomic uint32_t *)((char *)blk + ne * sizeof(int64_t));
    s->acc = s->c + ne * m->ncnt;
    mshard *expect = NULL;
    if (!atomic_compare_exchange_strong(&m->shard[k], &expect, s)) { /* another thread of the shared shard won */
        kl_mem_free(blk);
        free(s);
        return expect;
    }
    return s;
}

/* window i's slot of time t in shard s, cleared first when it held an older epoch */
static size_t slot_at(const kl_monitor *m, mshard *s, int i, int64_t t) {
    int64_t ep = t / m->slot_ns[i];
    size_t slot = (size_t)i * KL_MON_SLOTS + (size_t)(ep % KL_MON_SLOTS), base = slot * m->ncnt;
    if (atomic_load_explicit(&s->epoch[slot], memory_order_relaxed) != ep) {
        for (uint32_t j = 0; j < m->ncnt; j++) atomic_store_explicit(&s->c[base + j], 0, memory_order_relaxed);
        atomic_store_explicit(&s->epoch[slot], ep, memory_order_release);
    }
    return base;
}

/* exclusive shard: adds the finished interval's acc into its slot of every window */
static void acc_flush(const kl_monitor *m, mshard *s) {
    int64_t t = atomic_load_explicit(&s->acc_start, memory_order_relaxed);
    if (!t) return;
    for (int i = 0; i < m->cfg.nwin; i++) {
        size_t base = slot_at(m, s, i, t);
        for (uint32_t j = 0; j < m->ncnt; j++) {
            uint32_t a = atomic_load_explicit(&s->acc[j], memory_order_relaxed);
            if (a)
                atomic_store_explicit(&s->c[base + j], atomic_load_explicit(&s->c[base + j], memory_order_relaxed) + a,
                                      memory_order_relaxed);
        }
    }
    for (uint32_t j = 0; j < m->ncnt; j++) atomic_store_explicit(&s->acc[j], 0, memory_order_relaxed);
    atomic_store_explicit(&s->acc_start, 0, memory_order_release);
}

/* picks the thread's shard: an exclusive one's accumulator (flushed when its
 * interval is over), or the shared one's current slot of every window */
static int wbegin(kl_monitor *m, int64_t now, wctx *w) {
    if (tl_tid < 0) tl_tid = atomic_fetch_add(&next_tid, 1);
    int k = tl_tid < KL_MON_SHARDS - 1 ? tl_tid : KL_MON_SHARDS - 1;
    mshard *s = w->s = shard_get(m, k);
    if (!s) return -1;
    w->shared = k == KL_MON_SHARDS - 1;
    if (!w->shared) {
        int64_t start = atomic_load_explicit(&s->acc_start, memory_order_relaxed);
        if (!start || now >= s->acc_end || now < start) {
            acc_flush(m, s);
            start = now - now % m->gran_ns;
            if (!start) start = 1; /* 0 means empty */
            s->acc_end = start + m->gran_ns;
            atomic_store_explicit(&s->acc_start, start, memory_order_release);
        }
        w->acc = s->acc;
        return 0;
    }
    for (int i = 0; i < m->cfg.nwin; i++) w->base[i] = slot_at(m, s, i, now);
    return 0;
}

static inline void winc_n(const kl_monitor *m, const wctx *w, uint32_t k, uint32_t n) {
    if (!w->shared) {
        _Atomic uint32_t *p = &w->acc[k];
        atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + n, memory_order_relaxed);
        return;
    }
    for (int i = 0; i < m->cfg.nwin; i++) atomic_fetch_add_explicit(&w->s->c[w->base[i] + k], n, memory_order_relaxed);
}

static inline void winc(const kl_monitor *m, const wctx *w, uint32_t k) { winc_n(m, w, k, 1); }

static void observe_num(const kl_monitor *m, const wctx *w, const mcol *c, double x) {
    if (isnan(x)) {
        winc(m, w, c->off + MC_NULLS);
        return;
    }
    if (c->nb) winc(m, w, c->off + MC_BINS + (uint32_t)kl_hist_bin(c->p->edges, c->p->nedges, x));
}

static void observe_cat(const kl_monitor *m, const wctx *w, const mcol *c, const char *k, size_t n) {
    if (!k) {
        winc(m, w, c->off + MC_NULLS);
        return;
    }
    const uint64_t *b = kl__fmap_get(&c->keys, k, n);
    if (!b && c->p->complete) winc(m, w, c->off + MC_UNKNOWN);
    winc(m, w, c->off + MC_BINS + (b ? (uint32_t)*b : c->nb - 1));
}

/* raw values: from seen (what the transform read) or read from the record */
static void observe_record(kl_monitor *m, const wctx *wp, const void *rec, const fval *seen) {
    const wctx w = *wp;
    winc(m, &w, MG_ROWS + KL_PROF_INPUT);
    for (size_t i = 0; i < m->nraw; i++) {
        const mcol *c = &m->c[m->raw[i]];
        fval v;
        if (seen) {
            v = seen[c->in.col];
        } else {
            kl_err e = {0}; /* here only: zeroing a kl_err (1.2 KiB) per record was half the monitor's cost */
            if (kl__fval_from_json(&c->in, kl__features_nulls(m->f), rec, &v, &e)) v.null = 1; /* refused: as a null */
        }
        if (c->p->categorical) {
            char buf[24];
            size_t n = 0;
            const char *k = v.null ? NULL : kl__fval_key(&c->in, &v, buf, &n);
            observe_cat(m, &w, c, k, n);
        } else {
            observe_num(m, &w, c, v.null ? NAN : v.d);
        }
    }
}

void kl_monitor_observe(kl_monitor *m, const void *rec, const float *slots, size_t width, const float *outs, size_t k,
                        int64_t now) {
    wctx w;
    int do_rec = rec && m->nraw, do_feat = slots && width == m->width && width,
        do_out = outs && m->nouts && k >= m->nouts;
    if (!(do_rec || do_feat || do_out) || wbegin(m, now, &w)) return;
    if (do_rec) observe_record(m, &w, rec, NULL);
    if (do_feat) {
        winc(m, &w, MG_ROWS + KL_PROF_FEATURE);
        for (size_t s = 0; s < width; s++)
            if (m->feat[s] >= 0) observe_num(m, &w, &m->c[m->feat[s]], (double)slots[s]);
    }
    if (do_out) {
        winc(m, &w, MG_ROWS + KL_PROF_OUTPUT);
        for (size_t i = 0; i < m->nouts; i++) observe_num(m, &w, &m->c[m->outs[i]], (double)outs[i]);
    }
}

int kl_monitor_transform(kl_monitor *m, const kl_fstore *store, const void *rec, double *out, int64_t now, kl_err *e) {
    const kl_features *f = m->f;
    if (!f) return kl_err_set(e, KL_ESTATE, "the monitor has no features");
    fval stack[16], *seen = f->ninputs <= 16 ? stack : malloc(f->ninputs * sizeof *seen);
    if (!seen) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < f->ninputs; i++) seen[i].null = 1;
    kl_features_counts fc;
    memset(&fc, 0, sizeof fc);
    int rc = kl__features_transform_seen(f, store, rec, out, &fc, seen, e);
    wctx w;
    if (!rc && !wbegin(m, now, &w)) {
        const uint64_t k[KL_MON_FALLBACKS] = {fc.unknown, fc.null_filled, fc.div_zero, fc.clamped, fc.empty_window};
        winc(m, &w, MG_FB_ROWS);
        for (int i = 0; i < KL_MON_FALLBACKS; i++)
            if (k[i]) winc_n(m, &w, MG_FB + (uint32_t)i, (uint32_t)k[i]);
        if (m->nraw) observe_record(m, &w, rec, seen);
        if (m->width) {
            winc(m, &w, MG_ROWS + KL_PROF_FEATURE);
            for (size_t s = 0; s < m->width; s++)
                if (m->feat[s] >= 0) observe_num(m, &w, &m->c[m->feat[s]], (double)(float)out[s]);
        }
    }
    if (seen != stack) free(seen);
    return rc;
}

void kl_monitor_record(kl_monitor *m, const void *rec, int64_t now) {
    kl_monitor_observe(m, rec, NULL, 0, NULL, 0, now);
}

void kl_monitor_features(kl_monitor *m, const float *v, size_t width, int64_t now) {
    kl_monitor_observe(m, NULL, v, width, NULL, 0, now);
}

void kl_monitor_outputs(kl_monitor *m, const float *v, size_t k, int64_t now) {
    kl_monitor_observe(m, NULL, NULL, 0, v, k, now);
}

/* ==================================================================
 * Reading: merge shards and slots, compare with the reference
 * ================================================================== */

/* live[w * ncnt + k]: counter k summed over the slots of window w still inside it */
static void merge_live(kl_monitor *m, int64_t now, uint64_t *live) {
    memset(live, 0, (size_t)m->cfg.nwin * m->ncnt * sizeof *live);
    for (int k = 0; k < KL_MON_SHARDS; k++) {
        mshard *s = atomic_load_explicit(&m->shard[k], memory_order_acquire);
        if (!s) continue;
        /* the accumulator of the current (or last) interval: in every window its start lies in */
        int64_t as = atomic_load_explicit(&s->acc_start, memory_order_acquire);
        for (int w = 0; as && w < m->cfg.nwin; w++) {
            if (as > now || now - as >= m->cfg.win_s[w] * 1000000000LL) continue;
            uint64_t *o = &live[(size_t)w * m->ncnt];
            for (uint32_t i = 0; i < m->ncnt; i++) o[i] += atomic_load_explicit(&s->acc[i], memory_order_relaxed);
        }
        for (int w = 0; w < m->cfg.nwin; w++) {
            int64_t cur = now / m->slot_ns[w];
            for (int j = 0; j < KL_MON_SLOTS; j++) {
                size_t slot = (size_t)w * KL_MON_SLOTS + (size_t)j;
                int64_t ep = atomic_load_explicit(&s->epoch[slot], memory_order_acquire);
                if (ep > cur || cur - ep >= KL_MON_SLOTS) continue;
                const _Atomic uint32_t *c = &s->c[slot * m->ncnt];
                uint64_t *o = &live[(size_t)w * m->ncnt];
                for (uint32_t i = 0; i < m->ncnt; i++) o[i] += atomic_load_explicit(&c[i], memory_order_relaxed);
            }
        }
    }
}

static void col_stat(const kl_monitor *m, const mcol *c, const uint64_t *grp, const uint64_t *cnt,
                     kl_monitor_stat *st) {
    const kl_colprof *p = c->p;
    const kl_monitor_cfg *g = &m->cfg;
    st->n = grp[MG_ROWS + p->role];
    st->temporal = c->temporal;
    st->psi_js_min = c->psi_js_min;
    st->nulls = cnt[MC_NULLS];
    uint64_t nn = st->n - st->nulls;
    st->null_ratio = st->n ? (double)st->nulls / (double)st->n : NAN;
    st->ref_null_ratio = p->count ? (double)p->nulls / (double)p->count : 0;
    st->psi = st->js = st->ks = st->ks_p = st->chi2 = st->chi2_p = st->unknown_ratio = st->oob_ratio = NAN;
    st->tested = nn >= g->min_samples && c->nb > 0;
    if (st->n >= g->min_samples && st->null_ratio - st->ref_null_ratio > g->null_delta) st->drift |= KL_DRIFT_NULL;
    if (!st->tested) return;
    const uint64_t *q = cnt + MC_BINS;
    uint64_t *ref = malloc(c->nb * sizeof *ref);
    if (!ref) {
        st->tested = 0;
        return;
    }
    if (p->categorical) {
        for (size_t i = 0; i < p->ntop; i++) ref[i] = p->top_count[i];
        ref[c->nb - 1] = p->other;
    } else {
        memcpy(ref, p->bins, c->nb * sizeof *ref);
    }
    if (nn >= c->psi_js_min) {
        st->psi = kl_stat_psi(ref, q, c->nb);
        st->js = kl_stat_js(ref, q, c->nb);
    }
    uint64_t nref = 0;
    for (uint32_t i = 0; i < c->nb; i++) nref += ref[i];
    if (p->categorical) {
        st->chi2 = kl_stat_chi2(ref, q, c->nb, g->min_expected, &st->chi2_dof);
        st->chi2_p = kl_stat_chi2_pvalue(st->chi2, st->chi2_dof);
        st->unknown_ratio = (double)cnt[MC_UNKNOWN] / (double)nn;
        if (st->chi2_p < g->p_value) st->drift |= KL_DRIFT_CHI2;
        if (st->unknown_ratio > g->unknown_ratio) st->drift |= KL_DRIFT_UNKNOWN;
    } else {
        st->ks = kl_stat_ks(ref, q, c->nb);
        st->ks_p = kl_stat_ks_pvalue(st->ks, nref, nn);
        st->oob_ratio = (double)(q[0] + q[c->nb - 1]) / (double)nn;
        if (st->ks_p < g->p_value) st->drift |= KL_DRIFT_KS;
        if (st->oob_ratio > g->oob_ratio) st->drift |= KL_DRIFT_OOB;
    }
    if (st->psi >= g->psi) st->drift |= KL_DRIFT_PSI;
    if (st->js >= g->js) st->drift |= KL_DRIFT_JS;
    if (c->temporal) st->drift = 0;
    free(ref);
}

int kl_monitor_stats(kl_monitor *m, int64_t now, kl_monitor_stat **out, size_t *n, kl_err *e) {
    *out = NULL;
    *n = 0;
    size_t nw = (size_t)m->cfg.nwin;
    size_t nlive = nw * m->ncnt, nst = m->nc * nw;
    uint64_t *live = malloc((nlive ? nlive : 1) * sizeof *live);
    kl_monitor_stat *st = calloc(nst ? nst : 1, sizeof *st);
    if (!live || !st) {
        free(live);
        free(st);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    merge_live(m, now, live);
    for (size_t i = 0; i < m->nc; i++)
        for (size_t w = 0; w < nw; w++) {
            kl_monitor_stat *s = &st[i * nw + w];
            s->column = m->c[i].p->name;
            s->role = m->c[i].p->role;
            s->categorical = m->c[i].p->categorical;
            s->window = (int)w;
            s->window_s = m->cfg.win_s[w];
            col_stat(m, &m->c[i], live + w * m->ncnt, live + w * m->ncnt + m->c[i].off, s);
        }
    free(live);
    *out = st;
    *n = m->nc * nw;
    return KL_OK;
}

int kl_monitor_live_bins(kl_monitor *m, int64_t now, int window, size_t col, uint64_t *out, uint64_t *ref, size_t cap,
                         size_t *nb) {
    *nb = 0;
    if (window < 0 || window >= m->cfg.nwin || col >= m->nc) return KL_EINVAL;
    const mcol *c = &m->c[col];
    const kl_colprof *p = c->p;
    size_t nw = (size_t)m->cfg.nwin, n = c->nb < cap ? c->nb : cap;
    uint64_t *live = malloc(nw * m->ncnt * sizeof *live);
    if (!live) return KL_ENOMEM;
    merge_live(m, now, live);
    memcpy(out, live + (size_t)window * m->ncnt + c->off + MC_BINS, n * sizeof *out);
    free(live);
    for (size_t i = 0; ref && i < n; i++) /* the reference over the same bins, as col_stat takes them */
        ref[i] = !p->categorical ? p->bins[i] : i + 1 == c->nb ? p->other : p->top_count[i];
    *nb = n;
    return KL_OK;
}

const char *kl_monitor_fallback_name(int kind) {
    static const char *names[KL_MON_FALLBACKS] = {"unknown", "null_filled", "div_zero", "clamped", "empty_window"};
    return kind >= 0 && kind < KL_MON_FALLBACKS ? names[kind] : "?";
}

int kl_monitor_fallback_stats(kl_monitor *m, int64_t now, int window, kl_monitor_fallbacks *out) {
    memset(out, 0, sizeof *out);
    if (window < 0 || window >= m->cfg.nwin) return KL_EINVAL;
    size_t nw = (size_t)m->cfg.nwin;
    uint64_t *live = malloc(nw * m->ncnt * sizeof *live);
    if (!live) return KL_ENOMEM;
    merge_live(m, now, live);
    const uint64_t *g = live + (size_t)window * m->ncnt;
    const kl_features_counts *r = &m->ref->fallbacks;
    const uint64_t ref[KL_MON_FALLBACKS] = {r->unknown, r->null_filled, r->div_zero, r->clamped, r->empty_window};
    out->rows = g[MG_FB_ROWS];
    for (int i = 0; i < KL_MON_FALLBACKS; i++) {
        out->count[i] = g[MG_FB + i];
        out->ratio[i] = out->rows ? (double)out->count[i] / (double)out->rows : NAN;
        out->ref_ratio[i] = m->ref->has_fallbacks && r->rows ? (double)ref[i] / (double)r->rows : NAN;
    }
    free(live);
    return KL_OK;
}

void kl_monitor_drift_names(int d, char *buf, size_t n) {
    static const char *names[] = {"psi", "js", "ks", "chi2", "null_ratio", "unknown_ratio", "oob_ratio"};
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < 7; i++)
        if (d & (1 << i)) len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? "," : "", names[i]);
}

static void jnum(kl_buf *b, const char *k, double x) {
    kl_buf_printf(b, ",\"%s\":", k);
    if (isfinite(x)) kl_buf_printf(b, "%.6g", x);
    else kl_buf_puts(b, "null");
}

static void stat_json(kl_buf *b, const kl_monitor_stat *s) {
    kl_buf_printf(b, "{\"n\":%llu,\"nulls\":%llu,\"tested\":%s", (unsigned long long)s->n, (unsigned long long)s->nulls,
                  s->tested ? "true" : "false");
    jnum(b, "null_ratio", s->null_ratio);
    jnum(b, "ref_null_ratio", s->ref_null_ratio);
    jnum(b, "psi", s->psi);
    jnum(b, "js", s->js);
    if (s->categorical) {
        jnum(b, "chi2", s->chi2);
        kl_buf_printf(b, ",\"chi2_dof\":%d", s->chi2_dof);
        jnum(b, "chi2_p_value", s->chi2_p);
        jnum(b, "unknown_ratio", s->unknown_ratio);
    } else {
        jnum(b, "ks", s->ks);
        jnum(b, "ks_p_value", s->ks_p);
        jnum(b, "oob_ratio", s->oob_ratio);
    }
    kl_buf_puts(b, ",\"drift\":[");
    char names[128];
    kl_monitor_drift_names(s->drift, names, sizeof names);
    for (char *t = names, *c; *t; t = c ? c + 1 : t + strlen(t)) {
        c = strchr(t, ',');
        kl_buf_printf(b, "%s\"%.*s\"", t == names ? "" : ",", c ? (int)(c - t) : (int)strlen(t), t);
    }
    kl_buf_puts(b, "]}");
}

int kl_monitor_json(kl_monitor *m, int64_t now, kl_buf *b, kl_err *e) {
    kl_monitor_stat *st = NULL;
    size_t n = 0, nw = (size_t)m->cfg.nwin, maxb = 0, cur = kl_monitor_bytes(m, &maxb);
    int rc = kl_monitor_stats(m, now, &st, &n, e);
    if (rc) return rc;
    const kl_monitor_cfg *g = &m->cfg;
    char wn[KL_MON_MAX_WINDOWS][24];
    kl_buf_puts(b, "{\"windows\":[");
    for (size_t w = 0; w < nw; w++) {
        kl_monitor_window_name(g->win_s[w], wn[w], sizeof wn[w]);
        kl_buf_printf(b, "%s\"%s\"", w ? "," : "", wn[w]);
    }
    kl_buf_printf(
        b,
        "],\"thresholds\":{\"psi\":%g,\"js\":%g,\"p_value\":%g,\"min_samples\":%llu,\"min_expected\":%g,"
        "\"null_delta\":%g,\"unknown_ratio\":%g,\"oob_ratio\":%g},\"memory_bytes\":%zu,\"memory_max_bytes\":%zu,"
        "\"feature_hash\":\"%s\",\"reference_rows\":%llu,\"prediction_drift\":%s",
        g->psi, g->js, g->p_value, (unsigned long long)g->min_samples, g->min_expected, g->null_delta, g->unknown_ratio,
        g->oob_ratio, cur, maxb, m->ref->feature_hash, (unsigned long long)m->ref->rows, m->nouts ? "true" : "false");
    kl_buf_puts(b, ",\"fallbacks\":{");
    for (size_t w = 0; w < nw; w++) {
        kl_monitor_fallbacks fb;
        kl_monitor_fallback_stats(m, now, (int)w, &fb);
        kl_buf_printf(b, "%s\"%s\":{\"rows\":%llu", w ? "," : "", wn[w], (unsigned long long)fb.rows);
        for (int k = 0; k < KL_MON_FALLBACKS; k++) {
            char key[48];
            snprintf(key, sizeof key, "%s_ratio", kl_monitor_fallback_name(k));
            jnum(b, key, fb.ratio[k]);
            snprintf(key, sizeof key, "ref_%s_ratio", kl_monitor_fallback_name(k));
            jnum(b, key, fb.ref_ratio[k]);
        }
        kl_buf_puts(b, "}");
    }
    kl_buf_puts(b, "},\"columns\":[");
    for (size_t i = 0; i < m->nc; i++) {
        const kl_colprof *p = m->c[i].p;
        kl_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        kl_buf_json_str(b, p->name);
        kl_buf_printf(b, ",\"role\":\"%s\",\"kind\":\"%s\"", kl_prof_role_name(p->role),
                      p->categorical ? "categorical" : "numeric");
        if (m->c[i].psi_js_min == UINT64_MAX) kl_buf_puts(b, ",\"psi_js_min_samples\":null");
        else kl_buf_printf(b, ",\"psi_js_min_samples\":%llu", (unsigned long long)m->c[i].psi_js_min);
        kl_buf_puts(b, ",\"windows\":{");
        for (size_t w = 0; w < nw; w++) {
            kl_buf_printf(b, "%s\"%s\":", w ? "," : "", wn[w]);
            stat_json(b, &st[i * nw + w]);
        }
        kl_buf_puts(b, "}}");
    }
    kl_buf_puts(b, "]}");
    free(st);
    return b->failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : KL_OK;
}
