/* The data loader: worker threads decode and transform records straight into
 * recycled batch buffers (one 64-byte-aligned block per tensor, from the core
 * allocator), a bounded ring of ready batches, seeded shuffling that depends
 * on (seed, epoch) only, data-parallel sharding, seek / resume, statistics.
 *
 * Batches are numbered g = epoch * batches_per_epoch + index; batch g lives in
 * slot g % nslots. Workers claim small runs of sample slots of the oldest
 * batch not yet fully claimed and write sample j of batch g at offset j —
 * so which worker did what never changes the bytes of a batch. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "keel/loader.h"

/* ================================================================ state */

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };
enum { CHUNK = 4, NPERM = 4 };

typedef struct {
    float *img;          /* (batch, C, S, S) */
    int64_t *lab;        /* (batch) */
    int64_t g;           /* batch number held */
    int n, filled, state;
} slot;

struct kl_loader {
    kl_loader_source src;
    kl_loader_cfg cfg;
    kl_img_norm norm;
    int64_t n_rank, nb, total;       /* samples / batches per epoch for this rank; batches in all */
    int64_t used;                    /* records per epoch of all ranks (count; whole global batches with drop_last) */
    size_t per_img;                  /* floats per image */
    int nslots;
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready, cv_idle;
    int64_t claim_g, claim_j, out_g;
    int held;                        /* slot the consumer holds, -1 none */
    uint64_t gen;
    int stop, in_flight;
    kl_err err;                      /* first worker error (code != 0) */
    int64_t *perm[NPERM], perm_epoch[NPERM];
    pthread_t *th;
    int nth;
    /* statistics (under mu) */
    int64_t t0, last_ret, batches, samples, depth_sum;
    int64_t decode_ns, transform_ns, wait_ns, step_ns;
    double mpix;
};

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The epoch's order of the whole dataset (identity without shuffle). Under mu. */
static const int64_t *epoch_perm(kl_loader *l, int64_t epoch) {
    int k = (int)(epoch % NPERM);
    if (l->perm_epoch[k] == epoch) return l->perm[k];
    int64_t n = l->src.count, *p = l->perm[k];
    for (int64_t i = 0; i < n; i++) p[i] = i;
    if (l->cfg.shuffle) {
        kl_rng r;
        kl_rng_seed(&r, mix(l->cfg.seed, (uint64_t)epoch + 1));
        kl_rng_shuffle_i64(&r, p, n);
    }
    l->perm_epoch[k] = epoch;
    return p;
}

/* This rank's records in [0, n) of positions congruent to rank mod world. */
static int64_t rank_share(int64_t n, int rank, int world) { return n > rank ? (n - rank + world - 1) / world : 0; }

/* Records of batch g for this rank: its share of the global batch. */
static int batch_len(const kl_loader *l, int64_t g) {
    int64_t gb = (int64_t)l->cfg.batch * l->cfg.world, b = g % l->nb;
    return (int)rank_share(KL_MIN(gb, l->used - b * gb), l->cfg.rank, l->cfg.world);
}

/* ================================================================ one sample */

typedef struct {
    float *scratch; size_t scratch_cap;
    uint8_t *ubuf; size_t ubuf_cap;
    kl_undistort_map *map; int map_w, map_h;
    int64_t decode_ns, transform_ns;
    double mpix;
} worker_scratch;

static int one_sample(kl_loader *l, worker_scratch *ws, int64_t idx, int64_t epoch, float *out, int64_t *label, kl_err *e) {
    const kl_loader_cfg *c = &l->cfg;
    kl_loader_rec rec = {0};
    kl_loader_img img = {0};
    int rc = l->src.get(l->src.ctx, idx, &rec, e);
    if (rc) return rc;
    const char *key = rec.key ? rec.key : "?";
    int S = c->size, R = c->crop == KL_CROP_NONE ? S : c->resize;
    /* a camera without its image size cannot follow a DCT-scaled decode */
    int minwh = c->no_dct_scaling || (c->undistort && c->undistort->w <= 0) ? 0 : R;
    int64_t t0 = kl_time_mono_ns();
    if ((rc = l->src.decode(l->src.ctx, &rec, minwh, minwh, c->max_pixels, &img, e))) { kl_err_prefix(e, "record %lld (%s)", (long long)idx, key); return rc; }
    int64_t t1 = kl_time_mono_ns();
    ws->decode_ns += t1 - t0;
    ws->mpix += (double)img.w * img.h * 1e-6;
    const uint8_t *px = img.px;
    if (img.c != c->channels) { rc = kl_err_set(e, KL_ESHAPE, "record %lld (%s): %d channels, the loader makes %d", (long long)idx, key, img.c, c->channels); goto done; }
    if (c->undistort) {
        if (!ws->map || ws->map_w != img.w || ws->map_h != img.h) {
            kl_undistort_map_free(ws->map);
            ws->map = NULL;
            if ((rc = kl_undistort_map_new(c->undistort, img.w, img.h, &ws->map, e))) goto done;
            ws->map_w = img.w; ws->map_h = img.h;
        }
        size_t need = (size_t)img.w * (size_t)img.h * (size_t)img.c;
        if (need > ws->ubuf_cap) {
            uint8_t *nb = realloc(ws->ubuf, need);
            if (!nb) { rc = kl_err_set(e, KL_ENOMEM, "undistort buffer: out of memory"); goto done; }
            ws->ubuf = nb; ws->ubuf_cap = need;
        }
        if ((rc = kl_img_undistort(ws->map, img.px, img.w, img.h, img.c, ws->ubuf, e))) goto done;
        px = ws->ubuf;
    }
    int rw = S, rh = S, x0 = 0, y0 = 0;
    if (c->crop != KL_CROP_NONE) kl_img_fit_shorter(img.w, img.h, R, c->multiple, &rw, &rh);
    if (rw < S || rh < S) { rc = kl_err_set(e, KL_ESHAPE, "record %lld (%s): resized to %dx%d, smaller than the %dx%d crop", (long long)idx, key, rw, rh, S, S); goto done; }
    kl_rng r;
    kl_rng_seed(&r, mix(mix(c->seed, (uint64_t)epoch), (uint64_t)idx));
    if (c->crop == KL_CROP_RANDOM) {
        x0 = (int)kl_rng_below(&r, (uint64_t)(rw - S + 1));
        y0 = (int)kl_rng_below(&r, (uint64_t)(rh - S + 1));
    } else {
        x0 = (rw - S) / 2; y0 = (rh - S) / 2;
    }
    int flip = c->flip && (kl_rng_next(&r) >> 63);
    size_t need = kl_img_scratch_floats(img.w, img.c);
    if (need > ws->scratch_cap) {
        kl_mem_free(ws->scratch);
        ws->scratch_cap = 0;
        if (!(ws->scratch = kl_mem_alloc(need * sizeof(float), KL_TAG_WORKSPACE))) { rc = kl_err_set(e, KL_ENOMEM, "loader scratch: out of memory"); goto done; }
        ws->scratch_cap = need;
    }
    rc = kl_img_resize_crop_chw(px, img.w, img.h, img.c, rw, rh, x0, y0, S, S, flip, &l->norm, out, ws->scratch, e);
    if (rc) kl_err_prefix(e, "record %lld (%s)", (long long)idx, key);
    *label = rec.label;
    ws->transform_ns += kl_time_mono_ns() - t1;
done:
    if (img.px) l->src.release(l->src.ctx, &img);
    return rc;
}

/* ================================================================ workers */

static void *worker(void *arg) {
    kl_loader *l = arg;
    worker_scratch ws = {0};
    int64_t idx[CHUNK];
    kl_err e = {0};
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->err.code || l->claim_g >= l->total) { pthread_cond_wait(&l->cv_work, &l->mu); continue; }
        int64_t g = l->claim_g;
        slot *s = &l->slots[g % l->nslots];
        if (s->state == SLOT_FREE) { s->state = SLOT_FILLING; s->g = g; s->n = batch_len(l, g); s->filled = 0; }
        else if (!(s->state == SLOT_FILLING && s->g == g)) { pthread_cond_wait(&l->cv_work, &l->mu); continue; }
        int64_t j0 = l->claim_j, j1 = KL_MIN(j0 + CHUNK, (int64_t)s->n);
        l->claim_j = j1;
        if (j1 == s->n) { l->claim_g++; l->claim_j = 0; }
        int64_t epoch = g / l->nb, base = (g % l->nb) * l->cfg.batch;
        const int64_t *p = epoch_perm(l, epoch);
        int W = l->cfg.world;
        for (int64_t j = j0; j < j1; j++) idx[j - j0] = p[(base + j) * W + l->cfg.rank];
        uint64_t gen = l->gen;
        l->in_flight++;
        pthread_mutex_unlock(&l->mu);
        int rc = KL_OK;
        for (int64_t j = j0; j < j1 && !rc; j++)
            rc = one_sample(l, &ws, idx[j - j0], epoch, s->img + (size_t)j * l->per_img, s->lab + j, &e);
        pthread_mutex_lock(&l->mu);
        l->in_flight--;
        l->decode_ns += ws.decode_ns; l->transform_ns += ws.transform_ns; l->mpix += ws.mpix;
        ws.decode_ns = ws.transform_ns = 0; ws.mpix = 0;
        if (gen == l->gen) {
            if (rc && !l->err.code) l->err = e;
            s->filled += (int)(j1 - j0);
            if (s->filled == s->n) s->state = SLOT_READY;
            pthread_cond_broadcast(&l->cv_ready);
        }
        if (!l->in_flight) pthread_cond_broadcast(&l->cv_idle);
    }
    pthread_mutex_unlock(&l->mu);
    kl_mem_free(ws.scratch);
    free(ws.ubuf);
    kl_undistort_map_free(ws.map);
    return NULL;
}

/* ================================================================ lifecycle */

int kl_loader_new(const kl_loader_source *src, const kl_loader_cfg *cfg, kl_loader **out, kl_err *e) {
    *out = NULL;
    if (!src || !src->get || !src->decode || !src->release || src->count < 0) return kl_err_set(e, KL_EINVAL, "loader: incomplete source");
    kl_loader_cfg c = *cfg;
    if (c.workers <= 0) c.workers = 2;
    if (c.world <= 0) c.world = 1;
    if (c.channels <= 0) c.channels = 3;
    if (c.resize <= 0) c.resize = c.size;
    if (c.max_pixels == 0) c.max_pixels = 64ull << 20;
    if (c.prefetch <= 0) c.prefetch = KL_MAX(2, 2 * c.workers);
    if (c.batch < 1) return kl_err_set(e, KL_EINVAL, "loader: batch must be >= 1 (got %d)", c.batch);
    if (c.size < 1 || c.size > 8192) return kl_err_set(e, KL_EINVAL, "loader: size must be in [1, 8192] (got %d)", c.size);
    if (c.resize < c.size && c.crop != KL_CROP_NONE) return kl_err_set(e, KL_EINVAL, "loader: resize %d is smaller than the crop size %d", c.resize, c.size);
    if (c.channels != 1 && c.channels != 3) return kl_err_set(e, KL_EINVAL, "loader: channels must be 1 or 3 (got %d)", c.channels);
    if (c.workers > 256) return kl_err_set(e, KL_EINVAL, "loader: at most 256 workers (got %d)", c.workers);
    if (c.rank < 0 || c.rank >= c.world) return kl_err_set(e, KL_EINVAL, "loader: rank %d outside [0, %d)", c.rank, c.world);
    if (c.epochs < 0) return kl_err_set(e, KL_EINVAL, "loader: epochs must be >= 0");
    int64_t gb = (int64_t)c.batch * c.world; /* the global batch */
    int64_t nb = c.drop_last ? src->count / gb : (src->count + gb - 1) / gb;
    if (nb < 1)
        return kl_err_set(e, KL_EINVAL, "loader: %lld records make no batch of %lld (%d per rank, world %d)%s",
                          (long long)src->count, (long long)gb, c.batch, c.world, c.drop_last ? " with drop_last" : "");
    int64_t n_rank = rank_share(src->count, c.rank, c.world);
    kl_loader *l = calloc(1, sizeof *l);
    if (!l) return kl_err_set(e, KL_ENOMEM, "loader: out of memory");
    l->src = *src; l->cfg = c;
    l->norm.c = c.channels;
    for (int k = 0; k < 4; k++) { l->norm.mean[k] = c.mean[k]; l->norm.std[k] = c.std[k] != 0 ? c.std[k] : 1.f; }
    l->n_rank = n_rank; l->nb = nb;
    l->used = c.drop_last ? nb * gb : src->count;
    l->total = c.epochs ? c.epochs * nb : INT64_MAX;
    l->per_img = (size_t)c.channels * (size_t)c.size * (size_t)c.size;
    l->nslots = c.prefetch + 1;
    l->held = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL); pthread_cond_init(&l->cv_ready, NULL); pthread_cond_init(&l->cv_idle, NULL);
    int rc = KL_OK;
    l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
    if (!l->slots) { rc = kl_err_set(e, KL_ENOMEM, "loader: out of memory"); goto fail; }
    for (int i = 0; i < l->nslots; i++) {
        l->slots[i].img = kl_mem_alloc_e((size_t)c.batch * l->per_img * sizeof(float), KL_TAG_DATASET, e);
        l->slots[i].lab = kl_mem_alloc_e((size_t)c.batch * sizeof(int64_t), KL_TAG_DATASET, e);
        if (!l->slots[i].img || !l->slots[i].lab) { rc = KL_ENOMEM; kl_err_prefix(e, "loader batch buffers"); goto fail; }
    }
    for (int k = 0; k < NPERM; k++) {
        l->perm_epoch[k] = -1;
        if (!(l->perm[k] = malloc((size_t)(src->count + 1) * sizeof(int64_t)))) { rc = kl_err_set(e, KL_ENOMEM, "loader: out of memory"); goto fail; }
    }
    l->t0 = l->last_ret = kl_time_mono_ns();
    l->th = calloc((size_t)c.workers, sizeof *l->th);
    if (!l->th) { rc = kl_err_set(e, KL_ENOMEM, "loader: out of memory"); goto fail; }
    for (int i = 0; i < c.workers; i++) {
        if (pthread_create(&l->th[i], NULL, worker, l)) { rc = kl_err_set(e, KL_EINTERNAL, "loader: cannot start worker %d", i); goto fail; }
        l->nth++;
    }
    *out = l;
    return KL_OK;
fail:
    kl_loader_free(l);
    return rc;
}

void kl_loader_free(kl_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nth; i++) pthread_join(l->th[i], NULL);
    free(l->th);
    for (int i = 0; l->slots && i < l->nslots; i++) { kl_mem_free(l->slots[i].img); kl_mem_free(l->slots[i].lab); }
    free(l->slots);
    for (int k = 0; k < NPERM; k++) free(l->perm[k]);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_work); pthread_cond_destroy(&l->cv_ready); pthread_cond_destroy(&l->cv_idle);
    free(l);
}

/* ================================================================ consumer */

int kl_loader_next(kl_loader *l, kl_batch *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    int64_t t_in = kl_time_mono_ns();
    if (l->held >= 0) { l->slots[l->held].state = SLOT_FREE; l->held = -1; pthread_cond_broadcast(&l->cv_work); }
    int rc = KL_OK;
    if (l->out_g >= l->total) {
        out->end = 1;
        goto done;
    }
    for (int i = 0; i < l->nslots; i++) l->depth_sum += l->slots[i].state == SLOT_READY;
    slot *s = &l->slots[l->out_g % l->nslots];
    while (!l->err.code && !(s->state == SLOT_READY && s->g == l->out_g)) pthread_cond_wait(&l->cv_ready, &l->mu);
    if (l->err.code) {
        rc = l->err.code;
        if (e) *e = l->err;
        goto done;
    }
    s->state = SLOT_HELD;
    l->held = (int)(s - l->slots);
    out->n = s->n;
    out->epoch = l->out_g / l->nb;
    out->index = l->out_g % l->nb;
    out->images = s->img;
    out->labels = s->lab;
    l->out_g++;
    l->batches++;
    l->samples += s->n;
done:;
    int64_t now = kl_time_mono_ns();
    l->wait_ns += now - t_in;
    l->step_ns += now - l->last_ret;
    l->last_ret = now;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int64_t kl_loader_batches_per_epoch(const kl_loader *l) { return l->nb; }
int64_t kl_loader_samples_per_epoch(const kl_loader *l) { return l->n_rank; }

int kl_loader_seek(kl_loader *l, int64_t epoch, int64_t batch, kl_err *e) {
    if (epoch < 0 || batch < 0 || batch > l->nb) return kl_err_set(e, KL_ERANGE, "loader: position epoch %lld batch %lld outside [0, %lld] batches", (long long)epoch, (long long)batch, (long long)l->nb);
    pthread_mutex_lock(&l->mu);
    l->gen++;
    while (l->in_flight) pthread_cond_wait(&l->cv_idle, &l->mu);
    for (int i = 0; i < l->nslots; i++) l->slots[i].state = SLOT_FREE;
    l->held = -1;
    l->claim_g = l->out_g = epoch * l->nb + batch;
    l->claim_j = 0;
    kl_err_clear(&l->err);
    l->t0 = l->last_ret = kl_time_mono_ns();
    l->batches = l->samples = l->depth_sum = 0;
    l->decode_ns = l->transform_ns = l->wait_ns = l->step_ns = 0;
    l->mpix = 0;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    return KL_OK;
}

/* ================================================================ position */

void kl_loader_tell(const kl_loader *l, kl_loader_pos *pos) {
    memset(pos, 0, sizeof *pos);
    snprintf(pos->dataset, sizeof pos->dataset, "%s", l->src.id ? l->src.id : "-");
    pos->seed = l->cfg.seed;
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    pos->epoch = l->out_g / l->nb;
    pos->batch = l->out_g % l->nb;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
    pos->rank = l->cfg.rank;
    pos->world = l->cfg.world;
}

int kl_loader_restore(kl_loader *l, const kl_loader_pos *pos, kl_err *e) {
    const char *id = l->src.id ? l->src.id : "-";
    if (strcmp(pos->dataset, id))
        return kl_err_set(e, KL_ESTATE, "loader position is for dataset %.16s..., this loader reads %.16s... (another dataset)", pos->dataset, id);
    if (pos->seed != l->cfg.seed) return kl_err_set(e, KL_ESTATE, "loader position has seed %llu, the loader uses %llu", (unsigned long long)pos->seed, (unsigned long long)l->cfg.seed);
    if (pos->rank != l->cfg.rank || pos->world != l->cfg.world)
        return kl_err_set(e, KL_ESTATE, "loader position is for rank %d of %d, the loader is rank %d of %d", pos->rank, pos->world, l->cfg.rank, l->cfg.world);
    return kl_loader_seek(l, pos->epoch, pos->batch, e);
}

void kl_loader_pos_format(const kl_loader_pos *pos, char *buf, size_t n) {
    snprintf(buf, n, "keel-loader-1 %s %llu %lld %lld %d %d", pos->dataset, (unsigned long long)pos->seed, (long long)pos->epoch,
             (long long)pos->batch, pos->rank, pos->world);
}

int kl_loader_pos_parse(const char *s, kl_loader_pos *pos, kl_err *e) {
    memset(pos, 0, sizeof *pos);
    unsigned long long seed;
    long long ep, b;
    char id[80];
    int n = -1;
    if (!s || sscanf(s, "keel-loader-1 %79s %llu %lld %lld %d %d%n", id, &seed, &ep, &b, &pos->rank, &pos->world, &n) != 6 || n < 0 || s[n] ||
        ep < 0 || b < 0 || pos->world < 1 || pos->rank < 0 || pos->rank >= pos->world)
        return kl_err_set(e, KL_EPARSE, "bad loader position '%.80s' (expected 'keel-loader-1 DATASET SEED EPOCH BATCH RANK WORLD')", s ? s : "");
    snprintf(pos->dataset, sizeof pos->dataset, "%s", id);
    pos->seed = seed; pos->epoch = ep; pos->batch = b;
    return KL_OK;
}

void kl_loader_stats_get(kl_loader *l, kl_loader_stats *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&l->mu);
    o->batches = l->batches;
    o->samples = l->samples;
    o->seconds = (double)(kl_time_mono_ns() - l->t0) * 1e-9;
    o->decode_s = (double)l->decode_ns * 1e-9;
    o->transform_s = (double)l->transform_ns * 1e-9;
    o->decode_mpix = l->mpix;
    o->wait_s = (double)l->wait_ns * 1e-9;
    o->step_s = (double)l->step_ns * 1e-9;
    o->queue_depth = l->batches ? (double)l->depth_sum / (double)l->batches : 0;
    pthread_mutex_unlock(&l->mu);
    o->batches_per_s = o->seconds > 0 ? (double)o->batches / o->seconds : 0;
    o->samples_per_s = o->seconds > 0 ? (double)o->samples / o->seconds : 0;
    o->wait_share = o->step_s > 0 ? o->wait_s / o->step_s : 0;
}
