/* Training on image shard sets: the data.image spec section, a shard set
 * checked against the model, the seeded train/validation split and the
 * loader (src/data/loader.c) that feeds the training loop its batches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_images.h"

/* ================================================================ spec */

static int float_list(const kl_node *map, const char *key, float def, float *out, kl_err *e) {
    const kl_node *n = kl_node_get(map, key);
    for (int i = 0; i < 4; i++) out[i] = def;
    if (!n) return KL_OK;
    if (kl_node_kind_of(n) != KL_NODE_SEQ || kl_node_len(n) < 1 || kl_node_len(n) > 4)
        return kl_node_error(n, e, KL_EINVAL, "%s: a list of 1 to 4 numbers (one per channel)", key);
    for (size_t i = 0; i < kl_node_len(n); i++) {
        double v;
        int rc = kl_node_double(kl_node_at(n, i), &v, e);
        if (rc) return rc;
        if (!isfinite(v)) return kl_node_error(kl_node_at(n, i), e, KL_EINVAL, "%s: not a finite number", key);
        out[i] = (float)v;
    }
    if (kl_node_len(n) == 1) out[1] = out[2] = out[3] = out[0];
    return KL_OK;
}

int kl__train_image_spec_parse(const kl_node *n, tr_spec *s, kl_err *e) {
    tr_image_spec *im = &s->img;
    memset(im, 0, sizeof *im);
    im->crop = KL_CROP_RANDOM;
    im->flip = 0;
    for (int i = 0; i < 4; i++) { im->mean[i] = 0.5f; im->std[i] = 0.25f; }
    if (!n) return KL_OK;
    static const char *keys[] = {"size", "resize", "multiple", "crop", "flip", "mean", "std", "workers", "prefetch", "undistort"};
    int rc = kl_spec_check_keys(n, keys, KL_ARRAY_LEN(keys), e);
    if (rc) return rc;
    im->given = 1;
    int64_t v;
    if ((rc = kl_spec_int(n, "size", 0, &v, e))) return rc;
    if (v < 0 || v > 4096) return kl_node_error(kl_node_get(n, "size"), e, KL_EINVAL, "size: 1 to 4096 pixels");
    im->size = (int)v;
    if ((rc = kl_spec_int(n, "resize", 0, &v, e))) return rc;
    if (v < 0 || v > 8192) return kl_node_error(kl_node_get(n, "resize"), e, KL_EINVAL, "resize: 0 (= size) to 8192 pixels");
    im->resize = (int)v;
    if (im->resize && im->size && im->resize < im->size) return kl_node_error(kl_node_get(n, "resize"), e, KL_EINVAL, "resize %d is smaller than size %d", im->resize, im->size);
    if ((rc = kl_spec_int(n, "multiple", 0, &v, e))) return rc;
    if (v < 0 || v > 1024) return kl_node_error(kl_node_get(n, "multiple"), e, KL_EINVAL, "multiple: 0 (none) to 1024, e.g. 64");
    im->multiple = (int)v;
    const kl_node *u = kl_node_get(n, "undistort");
    if (u) { /* camera: pinhole K and k1 k2 p1 p2 (OpenCV), for images of width x height */
        static const char *ck[] = {"fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "width", "height"};
        if ((rc = kl_spec_check_keys(u, ck, 10, e))) return rc;
        for (int i = 0; i < 10; i++) {
            if ((rc = kl_spec_double(u, ck[i], 0, &im->cam[i], e))) return rc;
            if (!isfinite(im->cam[i])) return kl_node_error(u, e, KL_EINVAL, "undistort.%s: not a finite number", ck[i]);
        }
        if (!(im->cam[0] > 0) || !(im->cam[1] > 0)) return kl_node_error(u, e, KL_EINVAL, "undistort: fx and fy must be > 0");
        im->undistort = 1;
    }
    const char *c;
    if ((rc = kl_spec_str(n, "crop", "random", &c, e))) return rc;
    if (!strcmp(c, "random")) im->crop = KL_CROP_RANDOM;
    else if (!strcmp(c, "center")) im->crop = KL_CROP_CENTER;
    else if (!strcmp(c, "none")) im->crop = KL_CROP_NONE;
    else return kl_node_error(kl_node_get(n, "crop"), e, KL_EINVAL, "crop: random, center or none");
    if ((rc = kl_spec_bool(n, "flip", 0, &im->flip, e))) return rc;
    if ((rc = float_list(n, "mean", 0.5f, im->mean, e)) || (rc = float_list(n, "std", 0.25f, im->std, e))) return rc;
    for (int i = 0; i < 4; i++)
        if (!(im->std[i] > 0)) return kl_node_error(kl_node_get(n, "std"), e, KL_EINVAL, "std: every value must be > 0");
    if ((rc = kl_spec_int(n, "workers", 2, &v, e))) return rc;
    if (v < 1 || v > 64) return kl_node_error(kl_node_get(n, "workers"), e, KL_EINVAL, "workers: 1 to 64");
    im->workers = (int)v;
    if ((rc = kl_spec_int(n, "prefetch", 0, &v, e))) return rc;
    if (v < 0 || v > 64) return kl_node_error(kl_node_get(n, "prefetch"), e, KL_EINVAL, "prefetch: 0 (= 2 x workers) to 64");
    im->prefetch = (int)v;
    return KL_OK;
}

/* ================================================================ split */

int kl__train_split_rows(int64_t n, uint64_t seed, double frac, int64_t **idx_tr, int64_t *ntr, int64_t **idx_va,
                      int64_t *nva, kl_err *e) {
    *idx_tr = *idx_va = NULL;
    *nva = (int64_t)floor((double)n * frac);
    *ntr = n - *nva;
    int64_t *all = malloc((size_t)(n + 1) * 8), *tr = malloc((size_t)(*ntr + 1) * 8), *va = malloc((size_t)(*nva + 1) * 8);
    if (!all || !tr || !va) { free(all); free(tr); free(va); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    for (int64_t i = 0; i < n; i++) all[i] = i;
    kl_rng r;
    kl_rng_seed(&r, seed ^ 0x73706c6974ull);
    if (*nva > 0) kl_rng_shuffle_i64(&r, all, n);
    /* train rows keep their file order (sorted) so the shuffle alone decides batches */
    memcpy(va, all + *ntr, (size_t)*nva * 8);
    /* sorted by marking them in one pass over all rows */
    uint8_t *is_tr = calloc((size_t)n + 1, 1);
    if (!is_tr) { free(all); free(tr); free(va); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    for (int64_t i = 0; i < *ntr; i++) is_tr[all[i]] = 1;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) if (is_tr[i]) tr[k++] = i;
    free(is_tr);
    free(all);
    *idx_tr = tr; *idx_va = va;
    return KL_OK;
}

/* ================================================================ shard sets */

static int sub_get(void *ctx, int64_t i, kl_loader_rec *out, kl_err *e) {
    tr_images *im = ctx;
    if (i < 0 || i >= im->nrows) return kl_err_set(e, KL_ERANGE, "row %lld outside the split's %lld rows", (long long)i, (long long)im->nrows);
    return im->base.get(im->base.ctx, im->rows[i], out, e);
}
static int sub_decode(void *ctx, const kl_loader_rec *r, int mw, int mh, uint64_t mp, kl_loader_img *out, kl_err *e) {
    tr_images *im = ctx;
    return im->base.decode(im->base.ctx, r, mw, mh, mp, out, e);
}
static void sub_release(void *ctx, kl_loader_img *img) {
    tr_images *im = ctx;
    im->base.release(im->base.ctx, img);
}

int kl__train_images_open_set(tr_images *im, const tr_spec *s, const tr_model *m, const char *path, kl_err *e) {
    memset(im, 0, sizeof *im);
    if (s->in_rank != 3 || (s->in_dims[0] != 1 && s->in_dims[0] != 3) || s->in_dims[1] != s->in_dims[2])
        return kl_err_set(e, KL_ESHAPE, "%s: image data needs input.shape [C, S, S] with C 1 or 3", s->path);
    if (s->img.size && s->img.size != s->in_dims[1])
        return kl_err_set(e, KL_ESHAPE, "%s: data.image.size %d, but input.shape is %lld x %lld", s->path, s->img.size, (long long)s->in_dims[1], (long long)s->in_dims[2]);
    if (s->loss != TR_LOSS_CE) return kl_err_set(e, KL_EUNSUPPORTED, "%s: image shards carry class labels: use loss cross_entropy", s->path);
    int rc = kl_shardset_open(path, 0, &im->set, e);
    if (rc) return rc;
    if (kl_shardset_num_classes(im->set) > m->out_numel) {
        rc = kl_err_set(e, KL_ESHAPE, "%s: %d classes, the model gives %lld outputs", path, kl_shardset_num_classes(im->set), (long long)m->out_numel);
        kl__train_images_close(im);
        return rc;
    }
    kl_loader_source_shards(im->set, (int)s->in_dims[0], &im->base);
    return KL_OK;
}

int kl__train_images_start(tr_images *im, const tr_spec *s, const int64_t *rows, int64_t n, int train, int64_t batch,
                        int64_t epochs, kl_err *e) {
    kl_loader_free(im->ld);
    im->ld = NULL;
    free(im->rows);
    im->rows = malloc((size_t)(n + 1) * 8);
    if (!im->rows) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) im->rows[i] = rows ? rows[i] : i;
    im->nrows = n;
    im->src = (kl_loader_source){im, n, im->base.id, sub_get, sub_decode, sub_release};
    const tr_image_spec *is = &s->img;
    kl_loader_cfg c = {0};
    c.batch = (int)batch;
    c.workers = is->workers ? is->workers : 2;
    c.prefetch = is->prefetch;
    c.size = (int)s->in_dims[1];
    c.resize = is->resize;
    c.multiple = is->multiple;
    if (is->undistort) {
        im->cam = (kl_camera){is->cam[0], is->cam[1], is->cam[2], is->cam[3], is->cam[4], is->cam[5], is->cam[6], is->cam[7], (int)is->cam[8], (int)is->cam[9]};
        c.undistort = &im->cam;
    }
    c.crop = is->crop == KL_CROP_NONE ? KL_CROP_NONE : train ? (kl_crop_mode)is->crop : KL_CROP_CENTER;
    c.flip = train && is->flip;
    c.channels = (int)s->in_dims[0];
    memcpy(c.mean, is->mean, sizeof c.mean);
    memcpy(c.std, is->std, sizeof c.std);
    c.seed = s->seed;
    c.shuffle = train && s->shuffle;
    c.drop_last = train && s->drop_last;
    c.epochs = epochs;
    c.rank = im->rank;
    c.world = im->world;
    return kl_loader_new(&im->src, &c, &im->ld, e);
}

void kl__train_images_close(tr_images *im) {
    kl_loader_free(im->ld);
    free(im->rows);
    kl_shardset_free(im->set);
    memset(im, 0, sizeof *im);
}
