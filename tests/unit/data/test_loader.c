/* Unit tests for the loader (src/data/loader.c) over an in-memory source of
 * raw images: batches identical for any worker count, every record once per
 * epoch, drop_last, disjoint data-parallel shards, mid-epoch resume, a
 * position from another dataset, a corrupt record, shutdown mid-epoch. */
#include <stdint.h>
#include <stdlib.h>

#include "../harness.h"
#include "keel/loader.h"

/* A record: "RAW" w h c then pixels. Label = record index. */
typedef struct { int n; uint8_t **rec; size_t *len; char (*key)[16]; int bad; } fake;

static int fake_get(void *ctx, int64_t i, kl_loader_rec *out, kl_err *e) {
    fake *f = ctx;
    if (i < 0 || i >= f->n) return kl_err_set(e, KL_ERANGE, "no record %lld", (long long)i);
    *out = (kl_loader_rec){f->rec[i], f->len[i], (int32_t)i, f->key[i]};
    return KL_OK;
}

static int fake_decode(void *ctx, const kl_loader_rec *r, int min_w, int min_h, uint64_t max_px, kl_loader_img *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    if (r->len < 6 || memcmp(r->data, "RAW", 3)) return kl_err_set(e, KL_EPARSE, "%s: not an image", r->key);
    int w = r->data[3], h = r->data[4], c = r->data[5];
    if ((uint64_t)w * h > max_px) return kl_err_set(e, KL_ERANGE, "%s: too many pixels", r->key);
    out->px = malloc((size_t)w * h * c);
    if (!out->px) return KL_ENOMEM;
    memcpy(out->px, r->data + 6, (size_t)w * h * c);
    out->w = w; out->h = h; out->c = c;
    return KL_OK;
}

static void fake_release(void *ctx, kl_loader_img *img) { free(img->px); img->px = NULL; }

static void fake_make(fake *f, int n) {
    f->n = n;
    f->rec = calloc((size_t)n, sizeof *f->rec);
    f->len = calloc((size_t)n, sizeof *f->len);
    f->key = calloc((size_t)n, sizeof *f->key);
    kl_rng r;
    kl_rng_seed(&r, 99);
    for (int i = 0; i < n; i++) {
        int w = 20 + i % 13, h = 18 + i % 7, c = 3;
        f->len[i] = 6 + (size_t)w * h * c;
        f->rec[i] = malloc(f->len[i]);
        memcpy(f->rec[i], "RAW", 3);
        f->rec[i][3] = (uint8_t)w; f->rec[i][4] = (uint8_t)h; f->rec[i][5] = (uint8_t)c;
        for (size_t k = 6; k < f->len[i]; k++) f->rec[i][k] = (uint8_t)(kl_rng_next(&r) >> 56);
        snprintf(f->key[i], 16, "img%03d", i);
    }
}

static void fake_free(fake *f) {
    for (int i = 0; i < f->n; i++) free(f->rec[i]);
    free(f->rec); free(f->len); free(f->key);
}

static kl_loader_source fake_src(fake *f, const char *id) {
    return (kl_loader_source){f, f->n, id, fake_get, fake_decode, fake_release};
}

static kl_loader_cfg base_cfg(void) {
    kl_loader_cfg c = {0};
    c.batch = 8; c.size = 16; c.resize = 18; c.crop = KL_CROP_RANDOM; c.flip = 1;
    c.mean[0] = c.mean[1] = c.mean[2] = 0.5f; c.std[0] = c.std[1] = c.std[2] = 0.25f;
    c.seed = 7; c.shuffle = 1; c.epochs = 2;
    return c;
}

static uint64_t hash_batch(const kl_batch *b) {
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = (const uint8_t *)b->images;
    size_t n = (size_t)b->n * 3 * 16 * 16 * sizeof(float);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    for (int64_t i = 0; i < b->n; i++) h = (h ^ (uint64_t)b->labels[i]) * 1099511628211ull;
    return h;
}

/* All batch hashes of a run (up to max); returns count. */
static int run_all(fake *f, kl_loader_cfg c, uint64_t *hs, int max, int64_t *labels) {
    kl_loader_source s = fake_src(f, "ds1");
    kl_loader *l = NULL;
    kl_err e = {0};
    if (kl_loader_new(&s, &c, &l, &e)) return -1;
    int n = 0;
    int64_t nl = 0;
    kl_batch b;
    while (n < max && !kl_loader_next(l, &b, &e) && !b.end) {
        KL_ASSERT(((uintptr_t)b.images & 63) == 0 && ((uintptr_t)b.labels & 63) == 0);
        hs[n++] = hash_batch(&b);
        if (labels) for (int64_t i = 0; i < b.n; i++) labels[nl++] = b.labels[i];
    }
    kl_loader_free(l);
    return n;
}

KL_TEST(data_loader_same_batches_any_worker_count) {
    fake f;
    fake_make(&f, 61);
    kl_loader_cfg c = base_cfg();
    uint64_t h1[64], h2[64];
    int64_t lab[200];
    c.workers = 1;
    int n1 = run_all(&f, c, h1, 64, lab);
    KT_EQ_INT(n1, 16); /* 61 -> 8 batches per epoch (last of 5), 2 epochs */
    /* each epoch holds every record once, in a shuffled order */
    for (int ep = 0; ep < 2; ep++) {
        int seen[61] = {0}, inorder = 1;
        for (int i = 0; i < 61; i++) { seen[lab[ep * 61 + i]]++; inorder &= lab[ep * 61 + i] == i; }
        for (int i = 0; i < 61; i++) KT_EQ_INT(seen[i], 1);
        KT_CHECK(!inorder);
    }
    KT_CHECK(memcmp(lab, lab + 61, 61 * 8)); /* epochs differ */
    for (int w = 2; w <= 5; w += 3) {
        c.workers = w;
        c.prefetch = w == 5 ? 1 : 0;
        int n2 = run_all(&f, c, h2, 64, NULL);
        KT_EQ_INT(n2, n1);
        KT_CHECKF(!memcmp(h1, h2, sizeof(uint64_t) * (size_t)n1), "workers %d gave other batches", w);
    }
    c.drop_last = 1;
    KT_EQ_INT(run_all(&f, c, h2, 64, NULL), 14);
    fake_free(&f);
}

KL_TEST(data_loader_values_centre_crop) {
    fake f;
    fake_make(&f, 3);
    kl_loader_cfg c = base_cfg();
    c.crop = KL_CROP_CENTER; c.flip = 0; c.shuffle = 0; c.batch = 3; c.epochs = 1;
    kl_loader_source s = fake_src(&f, "ds1");
    kl_loader *l = NULL;
    kl_err e = {0};
    KT_OK(kl_loader_new(&s, &c, &l, &e), &e);
    kl_batch b;
    KT_OK(kl_loader_next(l, &b, &e), &e);
    KT_EQ_INT(b.n, 3);
    float *want = malloc(3 * 16 * 16 * sizeof(float));
    kl_img_norm nm = {3, {0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}};
    for (int i = 0; i < 3; i++) {
        int w = f.rec[i][3], h = f.rec[i][4], rw, rh;
        kl_img_fit_shorter(w, h, 18, 0, &rw, &rh);
        KT_OK(kl_img_resize_crop_chw(f.rec[i] + 6, w, h, 3, rw, rh, (rw - 16) / 2, (rh - 16) / 2, 16, 16, 0, &nm, want, NULL, &e), &e);
        KT_CHECK(!memcmp(want, b.images + (size_t)i * 768, 768 * sizeof(float)));
        KT_EQ_INT(b.labels[i], i);
    }
    KT_OK(kl_loader_next(l, &b, &e), &e);
    KT_EQ_INT(b.n, 0);
    KT_CHECK(b.end);
    kl_loader_stats st;
    kl_loader_stats_get(l, &st);
    KT_EQ_INT(st.batches, 1);
    KT_CHECK(st.decode_mpix > 0 && st.wait_share >= 0 && st.wait_share <= 1);
    kl_loader_free(l);
    free(want);
    fake_free(&f);
}

/* Labels of each batch of a run: lab[b * cap + i], n[b]; returns the batch count. */
static int run_batches(fake *f, kl_loader_cfg c, int64_t *lab, int cap, int64_t *n, int max) {
    kl_loader_source s = fake_src(f, "ds1");
    kl_loader *l = NULL;
    kl_err e = {0};
    if (kl_loader_new(&s, &c, &l, &e)) return -1;
    int k = 0;
    kl_batch b;
    while (k < max && !kl_loader_next(l, &b, &e) && !b.end) {
        n[k] = b.n;
        for (int64_t i = 0; i < b.n && i < cap; i++) lab[k * cap + i] = b.labels[i];
        k++;
    }
    kl_loader_free(l);
    return k;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* 50 records, 3 ranks of 4 (global batch 12): 5 batches on every rank, the
 * last global batch of 2 dealt 1, 1, 0; each global batch holds the records
 * of the one-process batch of 12, and the epoch every record once. */
KL_TEST(data_loader_ranks_disjoint) {
    fake f;
    fake_make(&f, 50);
    kl_loader_cfg c = base_cfg();
    c.epochs = 1; c.batch = 12;
    int64_t one[8 * 12], onen[8], lab[3][8 * 4], n[3][8];
    KT_EQ_INT(run_batches(&f, c, one, 12, onen, 8), 5);
    c.world = 3; c.batch = 4;
    int seen[50] = {0};
    for (int r = 0; r < 3; r++) {
        c.rank = r;
        KT_EQ_INT(run_batches(&f, c, lab[r], 4, n[r], 8), 5);
        KT_EQ_INT(n[r][4], r < 2 ? 1 : 0);
    }
    for (int g = 0; g < 5; g++) {
        int64_t u[12];
        int k = 0;
        for (int r = 0; r < 3; r++)
            for (int64_t i = 0; i < n[r][g]; i++) { u[k++] = lab[r][g * 4 + i]; seen[lab[r][g * 4 + i]]++; }
        KT_EQ_INT(k, onen[g]);
        qsort(u, (size_t)k, 8, cmp_i64);
        qsort(one + g * 12, (size_t)k, 8, cmp_i64);
        KT_CHECKF(!memcmp(u, one + g * 12, (size_t)k * 8), "global batch %d holds other records than one process's", g);
    }
    for (int i = 0; i < 50; i++) KT_EQ_INT(seen[i], 1);
    /* drop_last drops the partial global batch on every rank alike */
    c.drop_last = 1;
    for (int r = 0; r < 3; r++) {
        c.rank = r;
        KT_EQ_INT(run_batches(&f, c, lab[r], 4, n[r], 8), 4);
    }
    fake_free(&f);
}

KL_TEST(data_loader_resume_mid_epoch) {
    fake f;
    fake_make(&f, 45);
    kl_loader_cfg c = base_cfg();
    c.epochs = 3;
    uint64_t full[64];
    int n = run_all(&f, c, full, 64, NULL);
    KT_EQ_INT(n, 18);
    kl_loader_source s = fake_src(&f, "ds1");
    kl_loader *l = NULL;
    kl_err e = {0};
    KT_OK(kl_loader_new(&s, &c, &l, &e), &e);
    kl_batch b;
    for (int i = 0; i < 8; i++) KT_OK(kl_loader_next(l, &b, &e), &e);
    kl_loader_pos pos;
    kl_loader_tell(l, &pos);
    KT_EQ_INT(pos.epoch, 1); KT_EQ_INT(pos.batch, 2);
    char txt[200];
    kl_loader_pos_format(&pos, txt, sizeof txt);
    kl_loader_free(l); /* mid-epoch, batches in flight */
    kl_loader_pos p2;
    KT_OK(kl_loader_pos_parse(txt, &p2, &e), &e);
    for (int w = 1; w <= 3; w += 2) {
        c.workers = w;
        KT_OK(kl_loader_new(&s, &c, &l, &e), &e);
        KT_OK(kl_loader_restore(l, &p2, &e), &e);
        int k = 8;
        while (!kl_loader_next(l, &b, &e) && b.n) { KT_CHECKF(k < n && hash_batch(&b) == full[k], "batch %d differs after resume", k); k++; }
        KT_EQ_INT(k, n);
        kl_loader_free(l);
    }
    /* a position of another dataset is refused */
    kl_loader_source s2 = fake_src(&f, "ds2");
    KT_OK(kl_loader_new(&s2, &c, &l, &e), &e);
    KT_CHECK(kl_loader_restore(l, &p2, &e) == KL_ESTATE);
    KT_CONTAINS(e.msg, "another dataset");
    kl_loader_free(l);
    KT_CHECK(kl_loader_pos_parse("keel-loader-1 x 1 -2 0 0 1", &p2, &e) == KL_EPARSE);
    fake_free(&f);
}

KL_TEST(data_loader_bad_record_and_config) {
    fake f;
    fake_make(&f, 20);
    memcpy(f.rec[11], "XXX", 3);
    kl_loader_cfg c = base_cfg();
    kl_loader_source s = fake_src(&f, "ds1");
    kl_loader *l = NULL;
    kl_err e = {0};
    KT_OK(kl_loader_new(&s, &c, &l, &e), &e);
    kl_batch b;
    int rc = KL_OK;
    for (int i = 0; i < 6 && !rc; i++) rc = kl_loader_next(l, &b, &e);
    KT_CHECK(rc == KL_EPARSE);
    KT_CONTAINS(e.msg, "img011");
    kl_loader_free(l);
    c.resize = 40; /* crop larger than some images after resize: fine; size > resize: error */
    c.size = 48;
    KT_CHECK(kl_loader_new(&s, &c, &l, &e) == KL_EINVAL && !l);
    c = base_cfg();
    c.batch = 30; c.drop_last = 1;
    KT_CHECK(kl_loader_new(&s, &c, &l, &e) == KL_EINVAL && !l);
    /* endless loader freed while workers are busy */
    c = base_cfg();
    c.epochs = 0;
    memcpy(f.rec[11], "RAW", 3);
    KT_OK(kl_loader_new(&s, &c, &l, &e), &e);
    KT_OK(kl_loader_next(l, &b, &e), &e);
    kl_loader_free(l);
    fake_free(&f);
}
