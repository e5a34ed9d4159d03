/* Data-parallel gradients for one optimizer step (docs/training.md,
 * "Data-parallel training"). The global batch (train.batch_size rows, the
 * same at any number of ranks) is cut into leaves, fixed pieces of it:
 *   - one process, not deterministic: one leaf, the whole batch (today's step);
 *   - fast mode, N ranks: one leaf per rank (ceil(B/N) rows each), its
 *     gradient weighted by its share of the rows and summed over the ranks
 *     with MPI_Iallreduce in buckets (from the last parameters, the first
 *     small, then train.distributed.bucket_mb), each started from the step
 *     plan's node hook as soon as the nodes writing its gradients have run,
 *     so the all-reduce overlaps the rest of the backward pass (and is
 *     progressed between its nodes); the BatchNorm running statistics and the
 *     loss follow after the step;
 *   - train.deterministic: train.distributed.micro_batches leaves whatever N
 *     is, each rank computing a contiguous aligned block of them; the leaves'
 *     weighted [gradient | running statistics | loss] vectors are summed in one
 *     fixed pairwise tree: each rank sums its block (a complete subtree), the
 *     ranks all-gather the subtree sums and finish the tree in rank order, so
 *     the sum's rounding is the same at N = 1, 2, 4, ... and so are the weights.
 * Rows are filled leaf by leaf: a short last batch leaves the last leaves
 * (and ranks) empty - they contribute zeros, and every rank still takes part
 * in every collective, so uneven data never hangs. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/dist.h"
#include "train/train_int.h"

/* A gradient bucket: the flat range [lo, hi) of the gradient block; pending:
 * its tensors whose producing node has not run yet in this step. */
typedef struct {
    int64_t lo, hi;
    int ntensors, pending, started;
} tr_bucket;

struct tr_par {
    tr_model *m;
    const tr_spec *s;
    tr_dist *d;
    int64_t B, L;                /* global batch, rows per leaf */
    int64_t leaves, mine0, mine; /* leaves in all; this rank's first and count */
    int det, no_reduce;
    int even;  /* the rows come as equal shares per rank (image shards' loaders) */
    int64_t V; /* tree vector: grads, running stats, loss */
    float *leaf, *acc, *gath, *bufs0;
    int levels;
    tr_dist_reqs q;
    double compute_s;
    tr_bucket *bk; /* fast mode: buckets, bk[0] holds the last parameters */
    int nbk, nref;
    int *ref_node, *ref_bucket; /* per tensor ref: its gradient's producing node, its bucket (-1: none) */
    float w;                    /* this step's weight of the rank's gradient */
    int hook_rc;                /* an error inside the hook (reported after the run) */
    kl_err hook_err;
    uint64_t bytes; /* what the reduction allocated beyond the gradient block (tagged grads) */
};

static int ilog2(int64_t v) {
    int l = 0;
    while ((int64_t)1 << l < v) l++;
    return l;
}

int64_t kl__train_par_leaf_rows(const tr_spec *s, int world, int64_t B) {
    int64_t n = s->deterministic ? s->micro_batches : world;
    return (B + n - 1) / n;
}

uint64_t kl__train_par_bytes(const tr_spec *s, int world, int64_t nparams, int64_t nbuf) {
    uint64_t v = (uint64_t)(nparams + nbuf + 1) * 4, aux = (uint64_t)(nbuf + 1) * 4;
    if (!s->deterministic) return world > 1 ? aux : 0; /* the buckets are all-reduced in place */
    int64_t mine = s->micro_batches / world;
    return v * (uint64_t)(1 + ilog2(mine > world ? mine : world) + 1 + world) + aux;
}

int kl__train_par_check(const tr_spec *s, int world, int images, kl_err *e) {
    (void)images;
    if (!s->deterministic) return KL_OK;
    if (world & (world - 1) || world > s->micro_batches)
        return kl_err_set(e, KL_EINVAL,
                          "%s: train.deterministic with %d ranks: the rank count must be a power of two up to "
                          "train.distributed.micro_batches (%lld)",
                          s->path, world, (long long)s->micro_batches);
    return KL_OK;
}

void kl__train_par_free(tr_par *p) {
    if (!p) return;
    free(p->bk);
    free(p->ref_node);
    free(p->ref_bucket);
    kl_mem_free(p->leaf);
    kl_mem_free(p->acc);
    kl_mem_free(p->gath);
    kl_mem_free(p->bufs0);
    kl__train_dist_reqs_free(&p->q);
    free(p);
}

static void bucket_start(tr_par *p, tr_bucket *b);

/* The step plan's hook: after node `node`, the buckets whose last gradient
 * it wrote start their all-reduce; every call moves the ones in flight. */
static void on_node(void *ctx, int node) {
    tr_par *p = ctx;
    for (int r = 0; r < p->nref; r++)
        if (p->ref_node[r] == node && p->ref_bucket[r] >= 0) {
            tr_bucket *b = &p->bk[p->ref_bucket[r]];
            if (--b->pending == 0) bucket_start(p, b);
        }
    kl__train_dist_progress(p->d, &p->q);
}

/* Buckets over the trainable tensors from the last to the first (the order
 * in which backward finishes them): the first up to first_bucket_mb, then
 * bucket_mb each; together they cover the gradient block [0, nparams). */
static int buckets_make(tr_par *p, kl_err *e) {
    tr_model *m = p->m;
    tr_tensor_ref *refs = calloc(TR_MAX_LAYERS * 4, sizeof *refs);
    int nt = refs ? kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4) : 0;
    p->nref = nt;
    p->bk = calloc((size_t)nt + 1, sizeof *p->bk);
    p->ref_node = calloc((size_t)nt + 1, sizeof(int));
    p->ref_bucket = calloc((size_t)nt + 1, sizeof(int));
    int *order = calloc((size_t)nt + 1, sizeof(int));
    if (!refs || !p->bk || !p->ref_node || !p->ref_bucket || !order) {
        free(refs);
        free(order);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    kl__train_step_grad_producers(m, p->ref_node, nt);
    int n = 0;
    for (int r = 0; r < nt; r++) {
        p->ref_bucket[r] = -1;
        if (!refs[r].buffer) order[n++] = r;
    }
    for (int i = 1; i < n; i++) /* by offset, last first */
        for (int j = i; j > 0 && refs[order[j]].data > refs[order[j - 1]].data; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t first = KL_MAX(1, (int64_t)(p->s->first_bucket_mb * 1048576.0 / 4));
    int64_t rest = KL_MAX(1, (int64_t)(p->s->bucket_mb * 1048576.0 / 4));
    int64_t hi = m->nparams;
    for (int i = 0; i < n;) {
        tr_bucket *b = &p->bk[p->nbk];
        int64_t cap = p->nbk ? rest : first, lo = hi;
        b->hi = hi;
        do {
            lo = refs[order[i]].data - m->params;
            p->ref_bucket[order[i]] = p->nbk;
            b->ntensors++;
            i++;
        } while (i < n && hi - lo < cap);
        b->lo = i == n ? 0 : lo;
        hi = b->lo;
        p->nbk++;
    }
    free(refs);
    free(order);
    kl__train_step_set_hook(m, on_node, p);
    return KL_OK;
}

int kl__train_par_new(tr_model *m, const tr_spec *s, tr_dist *d, int64_t B, int no_allreduce, tr_par **out, kl_err *e) {
    tr_par *p = calloc(1, sizeof *p);
    if (!p) return kl_err_set(e, KL_ENOMEM, "out of memory");
    *out = p;
    p->m = m;
    p->s = s;
    p->d = d;
    p->B = B;
    p->det = s->deterministic;
    p->no_reduce = no_allreduce;
    p->L = kl__train_par_leaf_rows(s, d->world, B);
    p->leaves = p->det ? s->micro_batches : d->world;
    p->mine = p->leaves / d->world;
    p->mine0 = (int64_t)d->rank * p->mine;
    p->V = m->nparams + m->nbuf + 1;
    int rc = kl__train_dist_reqs_init(&p->q, e);
    if (rc) return rc;
    if (p->det) {
        p->levels = ilog2(p->mine > d->world ? p->mine : d->world) + 1;
        size_t v = (size_t)p->V * 4;
        p->leaf = kl_mem_alloc_e(v, KL_TAG_GRADS, e);
        p->acc = kl_mem_alloc_e(v * (size_t)p->levels, KL_TAG_GRADS, e);
        p->gath = kl_mem_alloc_e(v * (size_t)d->world, KL_TAG_GRADS, e);
        p->bufs0 = kl_mem_alloc_e((size_t)(m->nbuf + 1) * 4, KL_TAG_GRADS, e);
        if (!p->leaf || !p->acc || !p->gath || !p->bufs0) return KL_ENOMEM;
        p->bytes = v * (size_t)(1 + p->levels + d->world) + (size_t)(m->nbuf + 1) * 4;
    } else if (d->world > 1) {
        if (!(p->leaf = kl_mem_alloc_e((size_t)(m->nbuf + 1) * 4, KL_TAG_GRADS, e))) return KL_ENOMEM;
        p->bytes = (uint64_t)(m->nbuf + 1) * 4; /* the buckets are ranges of the gradient block: no copy */
        if (!no_allreduce && (rc = buckets_make(p, e))) return rc;
    }
    return KL_OK;
}

double kl__train_par_compute_s(const tr_par *p) { return p->compute_s; }

uint64_t kl__train_par_alloc_bytes(const tr_par *p) { return p ? p->bytes : 0; }

void kl__train_par_even(tr_par *p) { p->even = !p->det; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int64_t kl__train_par_rank_share(int64_t nb, int rank, int world) {
    return nb > rank ? (nb - rank + world - 1) / world : 0;
}

/* Rows [off, off + cnt) of the batch of nb rows for leaf k. */
static void leaf_rows(const tr_par *p, int64_t k, int64_t nb, int64_t *off, int64_t *cnt) {
    if (p->even) { /* fast mode only: one leaf per rank, the rows its loader made */
        *off = 0;
        *cnt = kl__train_par_rank_share(nb, p->d->rank, p->d->world);
        return;
    }
    *off = k * p->L;
    *cnt = KL_MAX(0, KL_MIN(p->L, nb - *off));
}

/* Forward, loss and gradients of leaf k into m->grads (and m->bufs). Its
 * dropout masks are keyed by (step, k): leaf 0 is the one-process step's. */
static int leaf_step(tr_par *p, int64_t k, int64_t off, int64_t cnt, int64_t step, float scale, tr_rows_fn get,
                     void *ctx, double *loss, kl_err *e) {
    const float *x, *yf;
    const int64_t *yi;
    int rc = get(ctx, off, cnt, &x, &yi, &yf, e);
    if (rc) return rc;
    double t0 = now_s();
    rc = kl__train_step_run(p->m, x, yi, yf, cnt, step ^ (k << 40), scale, loss, e);
    p->compute_s += now_s() - t0;
    return rc;
}

/* The fixed pairwise tree: vector v is the j-th leaf of a block; merges it
 * with the left siblings already in acc (left + right) and keeps the result. */
static void tree_add(tr_par *p, int64_t j, float *v) {
    int lvl = 0;
    for (; (j >> lvl) & 1; lvl++) {
        const float *a = p->acc + (size_t)lvl * (size_t)p->V;
        for (int64_t i = 0; i < p->V; i++) v[i] = a[i] + v[i];
    }
    memcpy(p->acc + (size_t)lvl * (size_t)p->V, v, (size_t)p->V * 4);
}

static int grads_det(tr_par *p, int64_t nb, int64_t step, float scale, tr_rows_fn get, void *ctx, double *loss,
                     kl_err *e) {
    tr_model *m = p->m;
    int64_t P = m->nparams, NB = m->nbuf;
    int rc;
    memcpy(p->bufs0, m->bufs, (size_t)NB * 4);
    for (int64_t j = 0; j < p->mine; j++) {
        int64_t off, cnt;
        leaf_rows(p, p->mine0 + j, nb, &off, &cnt);
        float *v = p->leaf;
        if (!cnt) memset(v, 0, (size_t)p->V * 4);
        else {
            double l;
            memcpy(m->bufs, p->bufs0, (size_t)NB * 4); /* every leaf starts from the step's running statistics */
            if ((rc = leaf_step(p, p->mine0 + j, off, cnt, step, scale, get, ctx, &l, e))) return rc;
            float w = (float)((double)cnt / (double)nb);
            for (int64_t i = 0; i < P; i++) v[i] = m->grads[i] * w;
            for (int64_t i = 0; i < NB; i++) v[P + i] = m->bufs[i] * w;
            v[P + NB] = (float)l * w;
        }
        tree_add(p, j, v);
    }
    const float *sub = p->acc + (size_t)ilog2(p->mine) * (size_t)p->V; /* this rank's subtree */
    if ((rc = kl__train_dist_allgather(p->d, sub, p->gath, (size_t)p->V * 4, "deterministic gradient all-gather", e)))
        return rc;
    for (int r = 0; r < p->d->world; r++) tree_add(p, r, p->gath + (size_t)r * (size_t)p->V);
    const float *tot = p->acc + (size_t)ilog2(p->d->world) * (size_t)p->V;
    memcpy(m->grads, tot, (size_t)P * 4);
    memcpy(m->bufs, tot + P, (size_t)NB * 4);
    *loss = tot[P + NB];
    return KL_OK;
}

static void bucket_start(tr_par *p, tr_bucket *b) {
    float *g = p->m->grads + b->lo;
    int64_t n = b->hi - b->lo;
    b->started = 1;
    if (p->m->fp16) kl__train_round_f16(g, n); /* the gradients at float16 precision, as the one-process step */
    for (int64_t i = 0; i < n; i++) g[i] *= p->w;
    if (!p->hook_rc) p->hook_rc = kl__train_dist_iallreduce_f32(p->d, &p->q, g, n, &p->hook_err);
}

/* fast mode: this rank's rows, weighted, summed over the ranks in buckets */
static int grads_fast(tr_par *p, int64_t nb, int64_t step, float scale, tr_rows_fn get, void *ctx, double *loss,
                      kl_err *e) {
    tr_model *m = p->m;
    int64_t P = m->nparams, NB = m->nbuf, off, cnt;
    int rc;
    leaf_rows(p, p->mine0, nb, &off, &cnt);
    p->w = (float)((double)cnt / (double)nb);
    p->hook_rc = 0;
    for (int i = 0; i < p->nbk; i++) {
        p->bk[i].pending = p->bk[i].ntensors;
        p->bk[i].started = 0;
    }
    double l = 0;
    if (cnt && (rc = leaf_step(p, p->mine0, off, cnt, step, scale, get, ctx, &l, e))) return rc;
    if (!cnt) memset(m->grads, 0, (size_t)P * 4);
    if (p->d->world == 1 || p->no_reduce) {
        if (m->fp16 && p->nbk) kl__train_round_f16(m->grads, P);
        *loss = l;
        return KL_OK;
    }
    /* what the hook did not start: tensors without a producing node, a dynamic plan, no rows */
    for (int i = 0; i < p->nbk; i++)
        if (!p->bk[i].started) bucket_start(p, &p->bk[i]);
    if (p->hook_rc) {
        *e = p->hook_err;
        return p->hook_rc;
    }
    float *aux = p->leaf; /* running statistics and the loss, weighted the same way */
    for (int64_t i = 0; i < NB; i++) aux[i] = cnt ? m->bufs[i] * p->w : 0;
    aux[NB] = (float)l * p->w;
    if ((rc = kl__train_dist_allreduce_f32(p->d, aux, NB + 1, "running statistics all-reduce", e))) return rc;
    if ((rc = kl__train_dist_wait_all(p->d, &p->q, "gradient all-reduce", e))) return rc;
    memcpy(m->bufs, aux, (size_t)NB * 4);
    *loss = aux[NB];
    return KL_OK;
}

int kl__train_par_grads(tr_par *p, int64_t nb, int64_t step, float scale, tr_rows_fn get, void *ctx, double *loss,
                     kl_err *e) {
    p->d->step = step;
    return p->det ? grads_det(p, nb, step, scale, get, ctx, loss, e)
                  : grads_fast(p, nb, step, scale, get, ctx, loss, e);
}

int kl__train_par_same_weights(tr_par *p, int64_t step, kl_err *e) {
    tr_dist *d = p->d;
    if (!d->on || d->world == 1 || p->no_reduce) return KL_OK;
    uint8_t h[32], *all = malloc((size_t)d->world * 32);
    if (!all) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_sha256 *sh = kl_sha256_new();
    if (!sh) {
        free(all);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    kl_sha256_update(sh, p->m->params, (size_t)p->m->nparams * 4);
    kl_sha256_update(sh, p->m->bufs, (size_t)p->m->nbuf * 4);
    kl_sha256_final(sh, h);
    kl_sha256_free(sh);
    d->step = step;
    int rc = kl__train_dist_allgather(d, h, all, 32, "weight check", e);
    for (int r = 1; !rc && r < d->world; r++)
        if (memcmp(all, all + (size_t)r * 32, 32)) {
            kl__train_dist_fail(d);
            rc = kl_err_set(e, KL_ESTATE,
                            "step %lld: the weights of rank %d differ from rank 0's (sha256 %02x%02x%02x%02x... vs "
                            "%02x%02x%02x%02x...): the ranks diverged",
                            (long long)step, r, all[r * 32], all[r * 32 + 1], all[r * 32 + 2], all[r * 32 + 3], all[0],
                            all[1], all[2], all[3]);
        }
    free(all);
    return rc;
}
