/* The loader's source over a shard set: records straight from the shard
 * mmap (no copy), decoded by the image codec with DCT scaling when the
 * loader asks for a smaller size. */
#include <string.h>

#include "keel/image.h"
#include "keel/loader.h"
#include "keel/shard.h"


static int shard_get(void *ctx, int64_t i, kl_loader_rec *out, kl_err *e) {
    kl_shardset *set = ctx;
    kl_record r;
    int rc = kl_shardset_get(set, i, &r, e);
    if (rc) return rc;
    *out = (kl_loader_rec){r.data, r.len, r.label, r.key};
    return KL_OK;
}

/* DCT scaling only when the image is at least twice the target both ways
 * (then the area resize after it still averages; below 2x a full decode
 * keeps the result close to decode + resize). */
static void dct_policy(const kl_loader_rec *r, int *min_w, int *min_h) {
    int w, h, c;
    kl_err e = {0};
    if (*min_w <= 0 && *min_h <= 0) return;
    if (kl_image_sniff(r->data, r->len) != KL_IMAGE_JPEG || kl_image_info(r->data, r->len, r->key, &w, &h, &c, &e) ||
        w < 2 * *min_w || h < 2 * *min_h)
        *min_w = *min_h = 0;
}

static int shard_decode(void *ctx, const kl_loader_rec *r, int min_w, int min_h, uint64_t max_pixels, kl_loader_img *out, kl_err *e) {
    kl_image img = {0};
    memset(out, 0, sizeof *out);
    dct_policy(r, &min_w, &min_h);
    int rc = kl_image_decode(r->data, r->len, r->key, min_w, min_h, max_pixels, &img, e);
    if (!rc && img.c == 1) rc = kl_image_to_rgb(&img, e);
    if (rc) { kl_image_release(&img); return rc; }
    *out = (kl_loader_img){img.w, img.h, img.c, img.px, NULL};
    return KL_OK;
}

static void shard_release(void *ctx, kl_loader_img *img) {
    kl_image k = {img->w, img->h, img->c, img->px};
    kl_image_release(&k);
    img->px = NULL;
}

static int shard_decode_gray(void *ctx, const kl_loader_rec *r, int min_w, int min_h, uint64_t max_pixels, kl_loader_img *out, kl_err *e) {
    kl_image img = {0};
    memset(out, 0, sizeof *out);
    dct_policy(r, &min_w, &min_h);
    int rc = kl_image_decode(r->data, r->len, r->key, min_w, min_h, max_pixels, &img, e);
    if (rc) return rc;
    if (img.c == 3) { /* ITU-R BT.601 luma, as PIL's convert("L") */
        size_t n = (size_t)img.w * (size_t)img.h;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *p = img.px + i * 3;
            img.px[i] = (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
        }
        img.c = 1;
    }
    *out = (kl_loader_img){img.w, img.h, img.c, img.px, NULL};
    return KL_OK;
}

void kl_loader_source_shards(struct kl_shardset *set, int channels, kl_loader_source *out) {
    *out = (kl_loader_source){set, kl_shardset_count(set), kl_shardset_id(set), shard_get,
                              channels == 1 ? shard_decode_gray : shard_decode, shard_release};
}
