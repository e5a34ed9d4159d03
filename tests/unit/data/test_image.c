/* Unit tests of the image codec: JPEG round trip, DCT-domain scaling picks
 * the right scale, PNG gray/RGB/RGBA, truncated JPEG/PNG, zero-size and
 * non-image input, and a 30000x30000 header refused by the pixel cap
 * without allocating. */
#include <png.h>
#include <stdlib.h>
#include <zlib.h>

#include "../harness.h"
#include "keel/image.h"

/* a smooth RGB test pattern */
static int pattern(kl_image *img, int w, int h, int c, kl_err *e) {
    int rc = kl_image_alloc(img, w, h, c, e);
    if (rc) return rc;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                img->px[((size_t)y * w + x) * c + k] = (uint8_t)(k == 1 ? 40 + x * 150 / w : k == 2 ? 200 - y * 150 / h : 20 + (x + y) * 100 / (w + h));
    return 0;
}

static double mean_abs_diff(const kl_image *a, const kl_image *b) {
    double s = 0;
    size_t n = (size_t)a->w * a->h * a->c;
    for (size_t i = 0; i < n; i++) s += abs((int)a->px[i] - (int)b->px[i]);
    return s / (double)n;
}

/* PNG of w x h with the given libpng format (gray, GA, RGB, RGBA); malloc'd */
static uint8_t *png_bytes(int w, int h, unsigned fmt, size_t *len) {
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)w; pi.height = (png_uint_32)h; pi.format = fmt;
    int c = (int)PNG_IMAGE_PIXEL_CHANNELS(fmt);
    uint8_t *px = malloc((size_t)w * h * c);
    for (int i = 0; i < w * h; i++)
        for (int k = 0; k < c; k++) px[i * c + k] = (uint8_t)(i * 7 + k * 50);
    png_alloc_size_t n = 0;
    png_image_write_to_memory(&pi, NULL, &n, 0, px, 0, NULL);
    uint8_t *out = malloc(n);
    if (!png_image_write_to_memory(&pi, out, &n, 0, px, 0, NULL)) { free(out); out = NULL; }
    free(px);
    *len = n;
    return out;
}

KL_TEST(image_jpeg_round_trip) {
    kl_err e = {0};
    kl_image a, b;
    KT_OK(pattern(&a, 97, 61, 3, &e), &e);
    uint8_t *jpg; size_t n;
    KT_OK(kl_image_encode_jpeg(&a, 95, &jpg, &n, &e), &e);
    KT_CHECK(n > 100 && kl_image_sniff(jpg, n) == KL_IMAGE_JPEG);
    int w, h, c;
    KT_OK(kl_image_info(jpg, n, "rt.jpg", &w, &h, &c, &e), &e);
    KT_CHECK(w == 97 && h == 61 && c == 3);
    KT_OK(kl_image_decode(jpg, n, "rt.jpg", 0, 0, 0, &b, &e), &e);
    KT_CHECK(b.w == 97 && b.h == 61 && b.c == 3);
    KT_CHECK(mean_abs_diff(&a, &b) < 3.0);
    kl_image_release(&b);
    /* gray */
    kl_image g, g2;
    KT_OK(pattern(&g, 40, 30, 1, &e), &e);
    free(jpg);
    KT_OK(kl_image_encode_jpeg(&g, 90, &jpg, &n, &e), &e);
    KT_OK(kl_image_decode(jpg, n, "g.jpg", 0, 0, 0, &g2, &e), &e);
    KT_CHECK(g2.c == 1 && mean_abs_diff(&g, &g2) < 3.0);
    KT_OK(kl_image_to_rgb(&g2, &e), &e);
    KT_CHECK(g2.c == 3 && g2.px[0] == g2.px[1] && g2.px[1] == g2.px[2]);
    free(jpg);
    KT_EQ_INT(kl_image_encode_jpeg(&g, 0, &jpg, &n, &e), KL_EINVAL);
    KT_CHECK(jpg == NULL);
    kl_image_release(&g); kl_image_release(&g2); kl_image_release(&a);
    kl_image z = {0};
    kl_image_release(&z);
}

KL_TEST(image_jpeg_dct_scaling) {
    int sw, sh;
    KT_EQ_INT(kl_image_scaled_size(256, 256, 0, 0, &sw, &sh), 8);
    KT_EQ_INT(kl_image_scaled_size(256, 256, 64, 64, &sw, &sh), 2);   /* 1/4 -> 64 */
    KT_CHECK(sw == 64 && sh == 64);
    KT_EQ_INT(kl_image_scaled_size(256, 256, 65, 64, &sw, &sh), 3);   /* 3/8 -> 96 */
    KT_CHECK(sw == 96);
    KT_EQ_INT(kl_image_scaled_size(256, 256, 224, 224, &sw, &sh), 7); /* 7/8 -> 224 */
    KT_EQ_INT(kl_image_scaled_size(256, 256, 300, 300, &sw, &sh), 8); /* never upscale */
    KT_CHECK(sw == 256);
    KT_EQ_INT(kl_image_scaled_size(500, 100, 60, 20, &sw, &sh), 2);   /* height decides: 25 >= 20 */
    KT_CHECK(sw == 125 && sh == 25);
    kl_err e = {0};
    kl_image a, b;
    KT_OK(pattern(&a, 256, 192, 3, &e), &e);
    uint8_t *jpg; size_t n;
    KT_OK(kl_image_encode_jpeg(&a, 90, &jpg, &n, &e), &e);
    KT_OK(kl_image_decode(jpg, n, "s.jpg", 64, 48, 0, &b, &e), &e);
    KT_CHECK(b.w == 64 && b.h == 48 && b.c == 3);
    /* the scaled decode is close to a box-downsampled original */
    double s = 0;
    for (int y = 0; y < 48; y++)
        for (int x = 0; x < 64; x++) {
            int acc = 0;
            for (int dy = 0; dy < 4; dy++)
                for (int dx = 0; dx < 4; dx++) acc += a.px[((size_t)(y * 4 + dy) * 256 + x * 4 + dx) * 3];
            s += fabs(acc / 16.0 - b.px[((size_t)y * 64 + x) * 3]);
        }
    KT_CHECK(s / (64 * 48) < 4.0);
    kl_image_release(&b);
    KT_OK(kl_image_decode(jpg, n, "s.jpg", 100, 10, 0, &b, &e), &e);  /* 1/2 */
    KT_CHECK(b.w == 128 && b.h == 96);
    kl_image_release(&b);
    kl_image_release(&a);
    free(jpg);
}

KL_TEST(image_png_formats) {
    kl_err e = {0};
    static const unsigned fmts[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
    static const int want_c[] = {1, 1, 3, 3};
    for (int f = 0; f < 4; f++) {
        size_t n;
        uint8_t *p = png_bytes(33, 21, fmts[f], &n);
        KT_CHECK(p && kl_image_sniff(p, n) == KL_IMAGE_PNG);
        int w, h, c;
        KT_OK(kl_image_info(p, n, "x.png", &w, &h, &c, &e), &e);
        KT_CHECK(w == 33 && h == 21 && c == want_c[f]);
        kl_image img;
        KT_OK(kl_image_decode(p, n, "x.png", 8, 8, 0, &img, &e), &e);
        KT_CHECK(img.w == 33 && img.h == 21 && img.c == want_c[f]);
        int cin = (int)PNG_IMAGE_PIXEL_CHANNELS(fmts[f]);
        /* exact values, alpha dropped */
        for (int i = 0; i < 33 * 21; i++)
            for (int k = 0; k < img.c; k++) KT_EQ_INT(img.px[i * img.c + k], (uint8_t)(i * 7 + k * 50));
        (void)cin;
        kl_image_release(&img);
        /* truncated */
        int rc = kl_image_decode(p, n / 2, "t.png", 0, 0, 0, &img, &e);
        KT_EQ_INT(rc, KL_EPARSE);
        KT_CHECK(img.px == NULL);
        KT_CONTAINS(e.msg, "t.png");
        free(p);
    }
}

KL_TEST(image_bad_inputs) {
    kl_err e = {0};
    kl_image img, a;
    KT_EQ_INT(kl_image_decode("", 0, "empty.jpg", 0, 0, 0, &img, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "empty.jpg: zero-size");
    KT_EQ_INT(kl_image_decode("hello world, not an image", 25, "x.txt", 0, 0, 0, &img, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "not a JPEG or PNG");
    KT_EQ_INT(kl_image_info("\xFF\xD8", 2, "two.jpg", NULL, NULL, NULL, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "truncated JPEG");
    KT_OK(pattern(&a, 128, 128, 3, &e), &e);
    uint8_t *jpg; size_t n;
    KT_OK(kl_image_encode_jpeg(&a, 90, &jpg, &n, &e), &e);
    /* cut in the entropy-coded data: header reads, decode fails */
    int w, h, c;
    KT_OK(kl_image_info(jpg, n * 2 / 3, "cut.jpg", &w, &h, &c, &e), &e);
    KT_EQ_INT(kl_image_decode(jpg, n * 2 / 3, "cut.jpg", 0, 0, 0, &img, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "cut.jpg: truncated JPEG");
    KT_CHECK(img.px == NULL && img.w == 0);
    /* cut in the header */
    KT_EQ_INT(kl_image_decode(jpg, 40, "head.jpg", 0, 0, 0, &img, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "head.jpg");
    /* garbage after a JPEG signature */
    uint8_t junk[300];
    for (int i = 0; i < 300; i++) junk[i] = (uint8_t)(i * 31);
    junk[0] = 0xFF; junk[1] = 0xD8; junk[2] = 0xFF;
    KT_EQ_INT(kl_image_decode(junk, sizeof junk, "junk.jpg", 0, 0, 0, &img, &e), KL_EPARSE);
    free(jpg);
    kl_image_release(&a);
}

KL_TEST(image_bomb_refused_without_allocating) {
    kl_err e = {0};
    kl_image a, img;
    KT_OK(pattern(&a, 16, 16, 3, &e), &e);
    uint8_t *jpg; size_t n;
    KT_OK(kl_image_encode_jpeg(&a, 90, &jpg, &n, &e), &e);
    kl_image_release(&a);
    /* patch the SOF0 frame header to 30000 x 30000 */
    size_t i;
    for (i = 2; i + 9 < n; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) break;
    KT_CHECK(i + 9 < n);
    jpg[i + 5] = 30000 >> 8; jpg[i + 6] = 30000 & 255; jpg[i + 7] = 30000 >> 8; jpg[i + 8] = 30000 & 255;
    int w, h, c;
    KT_OK(kl_image_info(jpg, n, "bomb.jpg", &w, &h, &c, &e), &e);
    KT_CHECK(w == 30000 && h == 30000);
    kl_mem_stats before, after;
    kl_mem_stats_get(KL_TAG_DATASET, &before);
    KT_EQ_INT(kl_image_decode(jpg, n, "bomb.jpg", 0, 0, 0, &img, &e), KL_ERANGE);
    kl_mem_stats_get(KL_TAG_DATASET, &after);
    KT_CONTAINS(e.msg, "bomb.jpg: 30000x30000");
    KT_CONTAINS(e.msg, "pixel cap");
    KT_EQ_INT(after.n_allocs, before.n_allocs);
    KT_CHECK(img.px == NULL);
    /* a smaller cap refuses a normal image too; a larger one allows it */
    free(jpg);
    KT_OK(pattern(&a, 64, 64, 3, &e), &e);
    KT_OK(kl_image_encode_jpeg(&a, 90, &jpg, &n, &e), &e);
    KT_EQ_INT(kl_image_decode(jpg, n, "s.jpg", 0, 0, 4000, &img, &e), KL_ERANGE);
    KT_OK(kl_image_decode(jpg, n, "s.jpg", 0, 0, 4096, &img, &e), &e);
    kl_image_release(&img);
    kl_image_release(&a);
    free(jpg);
    /* a PNG whose IHDR says 30000 x 30000 (CRC fixed) */
    size_t pn;
    uint8_t *p = png_bytes(8, 8, PNG_FORMAT_RGB, &pn);
    KT_CHECK(p && memcmp(p + 12, "IHDR", 4) == 0);
    uint8_t dims[8] = {0, 0, 30000 >> 8, 30000 & 255, 0, 0, 30000 >> 8, 30000 & 255};
    memcpy(p + 16, dims, 8);
    uLong crc = crc32(0, p + 12, 17);
    p[29] = (uint8_t)(crc >> 24); p[30] = (uint8_t)(crc >> 16); p[31] = (uint8_t)(crc >> 8); p[32] = (uint8_t)crc;
    kl_mem_stats_get(KL_TAG_DATASET, &before);
    KT_EQ_INT(kl_image_decode(p, pn, "bomb.png", 0, 0, 0, &img, &e), KL_ERANGE);
    kl_mem_stats_get(KL_TAG_DATASET, &after);
    KT_EQ_INT(after.n_allocs, before.n_allocs);
    KT_CONTAINS(e.msg, "bomb.png: 30000x30000");
    free(p);
}
