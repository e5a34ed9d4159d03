/* Unit tests for the image transforms (src/data/image_ops.c): area resize
 * against a plain double-loop box filter, the fused crop/flip/normalise/CHW
 * pass against resize + explicit indexing, and undistortion against the
 * OpenCV formula point by point. */
#include <stdint.h>
#include <stdlib.h>

#include "../harness.h"
#include "keel/loader.h"

static void fill(uint8_t *p, size_t n, uint64_t seed) {
    kl_rng r;
    kl_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(kl_rng_next(&r) >> 56);
}

/* Reference box filter: integrate the source over the output cell in double. */
static double ref_area(const uint8_t *s, int sw, int sh, int c, int dw, int dh, int ox, int oy, int q) {
    double sx = (double)sw / dw, sy = (double)sh / dh, acc = 0;
    double ax = ox * sx, bx = (ox + 1) * sx, ay = oy * sy, by = (oy + 1) * sy;
    for (int y = (int)ay; y < sh && y < by; y++)
        for (int x = (int)ax; x < sw && x < bx; x++) {
            double wy = fmin(by, y + 1.0) - fmax(ay, (double)y), wx = fmin(bx, x + 1.0) - fmax(ax, (double)x);
            if (wy > 0 && wx > 0) acc += wy * wx * s[((size_t)y * sw + x) * c + q];
        }
    return acc / (sx * sy);
}

KL_TEST(data_image_resize_area_matches_box_filter) {
    const int cases[][4] = {{256, 256, 224, 224}, {97, 61, 32, 20}, {64, 48, 64, 48}, {17, 13, 40, 29}, {300, 200, 7, 5}};
    for (size_t t = 0; t < KL_ARRAY_LEN(cases); t++) {
        int sw = cases[t][0], sh = cases[t][1], dw = cases[t][2], dh = cases[t][3], c = t == 1 ? 1 : 3;
        uint8_t *s = malloc((size_t)sw * sh * c), *d = malloc((size_t)dw * dh * c);
        fill(s, (size_t)sw * sh * c, 11 + t);
        kl_err e = {0};
        KT_OK(kl_img_resize_area(s, sw, sh, c, d, dw, dh, &e), &e);
        int maxd = 0;
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++)
                for (int q = 0; q < c; q++) {
                    double ref = ref_area(s, sw, sh, c, dw, dh, x, y, q);
                    int dd = abs((int)d[((size_t)y * dw + x) * c + q] - (int)floor(ref + 0.5));
                    if (dd > maxd) maxd = dd;
                    /* only a rounding tie may differ by one */
                    if (dd == 1 && fabs(ref - floor(ref) - 0.5) > 1e-3) maxd = 99;
                }
        if (sw == dw && sh == dh) KT_CHECK(!memcmp(s, d, (size_t)sw * sh * c));
        free(s); free(d);
        KT_CHECKF(maxd <= 1, "case %zu: max difference %d", t, maxd);
    }
}

KL_TEST(data_image_fused_crop_flip_norm_chw) {
    int sw = 120, sh = 90, c = 3, rw = 80, rh = 60, x0 = 9, y0 = 4, cw = 48, ch = 40;
    uint8_t *s = malloc((size_t)sw * sh * c);
    fill(s, (size_t)sw * sh * c, 5);
    kl_img_norm nm = {3, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
    float *out = malloc(sizeof(float) * c * cw * ch);
    kl_err e = {0};
    for (int flip = 0; flip < 2; flip++) {
        KT_OK(kl_img_resize_crop_chw(s, sw, sh, c, rw, rh, x0, y0, cw, ch, flip, &nm, out, NULL, &e), &e);
        double maxd = 0;
        for (int q = 0; q < c; q++)
            for (int y = 0; y < ch; y++)
                for (int x = 0; x < cw; x++) {
                    int sx = x0 + (flip ? cw - 1 - x : x);
                    double ref = (ref_area(s, sw, sh, c, rw, rh, sx, y0 + y, q) / 255.0 - nm.mean[q]) / nm.std[q];
                    maxd = fmax(maxd, fabs(out[((size_t)q * ch + y) * cw + x] - ref));
                }
        KT_CHECKF(maxd < 1e-4, "flip %d: max difference %g", flip, maxd);
    }
    /* no resize: a plain crop; window outside the image is an error */
    KT_OK(kl_img_resize_crop_chw(s, sw, sh, c, sw, sh, 3, 2, 8, 8, 0, NULL, out, NULL, &e), &e);
    KT_NEAR(out[64 + 8 + 1], s[((size_t)3 * sw + 4) * c + 1] / 255.0, 1e-6);
    KT_CHECK(kl_img_resize_crop_chw(s, sw, sh, c, rw, rh, 40, 0, 48, 40, 0, NULL, out, NULL, &e) == KL_EINVAL);
    free(s); free(out);
}

KL_TEST(data_image_fit_shorter_multiple) {
    int w, h;
    kl_img_fit_shorter(640, 480, 224, 0, &w, &h);
    KT_EQ_INT(w, 299); KT_EQ_INT(h, 224);
    kl_img_fit_shorter(480, 640, 200, 64, &w, &h);
    KT_EQ_INT(w, 192); KT_EQ_INT(h, 256);
    kl_img_fit_shorter(10, 1000, 20, 64, &w, &h);
    KT_EQ_INT(w, 64); KT_EQ_INT(h, 1984);
}

KL_TEST(data_image_undistort_formula) {
    kl_camera cam = {200, 190, 80, 60, -0.28, 0.07, 0.001, -0.0015, 160, 120};
    kl_undistort_map *m = NULL;
    kl_err e = {0};
    KT_OK(kl_undistort_map_new(&cam, 160, 120, &m, &e), &e);
    for (int v = 0; v < 120; v += 7)
        for (int u = 0; u < 160; u += 5) {
            double x = (u - cam.cx) / cam.fx, y = (v - cam.cy) / cam.fy, r2 = x * x + y * y;
            double kr = 1 + cam.k1 * r2 + cam.k2 * r2 * r2;
            double xd = x * kr + 2 * cam.p1 * x * y + cam.p2 * (r2 + 2 * x * x);
            double yd = y * kr + cam.p1 * (r2 + 2 * y * y) + 2 * cam.p2 * x * y;
            double sx, sy;
            kl_undistort_map_at(m, u, v, &sx, &sy);
            KT_CHECKF(fabs(sx - (cam.fx * xd + cam.cx)) <= 1.0 / 64 + 1e-9 && fabs(sy - (cam.fy * yd + cam.cy)) <= 1.0 / 64 + 1e-9,
                      "(%d,%d): map (%g,%g)", u, v, sx, sy);
        }
    /* a constant image stays constant inside, the border blends with 0 */
    uint8_t *src = malloc(160 * 120 * 3), *dst = malloc(160 * 120 * 3);
    memset(src, 200, 160 * 120 * 3);
    KT_OK(kl_img_undistort(m, src, 160, 120, 3, dst, &e), &e);
    KT_EQ_INT(dst[(60 * 160 + 80) * 3], 200);
    /* a map for twice the size scales K */
    kl_undistort_map *m2 = NULL;
    KT_OK(kl_undistort_map_new(&cam, 320, 240, &m2, &e), &e);
    double a, b, a2, b2;
    kl_undistort_map_at(m, 10, 10, &a, &b);
    kl_undistort_map_at(m2, 20, 20, &a2, &b2);
    KT_NEAR(a2, 2 * a, 0.05);
    KT_NEAR(b2, 2 * b, 0.05);
    KT_CHECK(kl_img_undistort(m2, src, 160, 120, 3, dst, &e) == KL_EINVAL);
    kl_undistort_map_free(m);
    kl_undistort_map_free(m2);
    free(src); free(dst);
}
