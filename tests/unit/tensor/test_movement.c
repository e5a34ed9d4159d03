/* Unit tests of data-movement kernels: transpose (incl. the blocked path),
 * concat/split, slice (negative steps), pad (constant/reflect/edge/wrap,
 * negative pads), gather, tile, expand, strided copy, resize. */
#include "../harness.h"
#include "tt.h"

static void unravel(int r, const int64_t *d, int64_t o, int64_t *ix) {
    for (int i = r - 1; i >= 0; i--) { ix[i] = o % d[i]; o /= d[i]; }
}
static int64_t ravel(int r, const int64_t *d, const int64_t *ix) {
    int64_t o = 0;
    for (int i = 0; i < r; i++) o = o * d[i] + ix[i];
    return o;
}

KL_TEST(tensor_transpose_perms) {
    struct { int r; int64_t d[4]; int perm[4]; } cs[] = {
        {2, {67, 45}, {1, 0}}, {2, {300, 129}, {1, 0}}, {3, {5, 6, 7}, {2, 0, 1}}, {3, {4, 40, 36}, {0, 2, 1}},
        {4, {2, 3, 4, 5}, {0, 2, 3, 1}}, {4, {2, 3, 4, 5}, {3, 2, 1, 0}}, {4, {2, 8, 9, 16}, {0, 2, 1, 3}},
    };
    for (size_t c = 0; c < KL_ARRAY_LEN(cs); c++) {
        int r = cs[c].r;
        int64_t n = kl_shape_numel(r, cs[c].d), od[4];
        for (int i = 0; i < r; i++) od[i] = cs[c].d[cs[c].perm[i]];
        float *x = tt_randn(n, 61 + c), *y = malloc(4 * (size_t)n), *y2 = malloc(4 * (size_t)n);
        kl_transpose(4, r, cs[c].d, cs[c].perm, x, y, tt_pool(1));
        kl_transpose(4, r, cs[c].d, cs[c].perm, x, y2, tt_pool(2));
        int ok = memcmp(y, y2, 4 * (size_t)n) == 0;
        for (int64_t o = 0; o < n && ok; o++) {
            int64_t oi[4], ii[4];
            unravel(r, od, o, oi);
            for (int i = 0; i < r; i++) ii[cs[c].perm[i]] = oi[i];
            if (y[o] != x[ravel(r, cs[c].d, ii)]) ok = 0;
        }
        free(x); free(y); free(y2);
        KT_CHECKF(ok, "transpose case %zu", c);
    }
    /* 8-byte and 1-byte elements */
    int64_t d[2] = {33, 70}, a[33 * 70], b[33 * 70];
    for (int i = 0; i < 33 * 70; i++) a[i] = i;
    kl_transpose(8, 2, d, (int[]){1, 0}, a, b, NULL);
    KT_EQ_INT(b[1], 70);
    KT_EQ_INT(b[33], 1);
    uint8_t c8[6] = {1, 2, 3, 4, 5, 6}, t8[6];
    kl_transpose(1, 2, (int64_t[]){2, 3}, (int[]){1, 0}, c8, t8, NULL);
    KT_EQ_INT(t8[1], 4);
    KT_EQ_INT(t8[2], 2);
}

KL_TEST(tensor_concat_split) {
    float a[2 * 2 * 3], b[2 * 1 * 3], y[2 * 3 * 3], s0[12], s1[6];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (int i = 0; i < 6; i++) b[i] = 100.0f + (float)i;
    const void *xs[2] = {a, b};
    kl_concat(4, 3, (int64_t[]){2, 3, 3}, 1, 2, xs, (int64_t[]){2, 1}, y, NULL);
    KT_NEAR(y[0], 0, 0); KT_NEAR(y[6], 100, 0); KT_NEAR(y[9], 6, 0); KT_NEAR(y[17], 105, 0);
    void *ys[2] = {s0, s1};
    kl_split(4, 3, (int64_t[]){2, 3, 3}, -2, 2, (int64_t[]){2, 1}, y, ys, NULL);
    KT_CHECK(memcmp(s0, a, sizeof a) == 0);
    KT_CHECK(memcmp(s1, b, sizeof b) == 0);
}

KL_TEST(tensor_slice_prepare) {
    kl_err e = {0};
    int64_t d[3] = {4, 5, 6}, st[3], sp[3], od[3];
    /* x[1:3, ::-2, -4:] with axes given out of order */
    KT_OK(kl_slice_prepare(3, d, 3, (int64_t[]){-4, 1, -1}, (int64_t[]){INT64_MAX, 3, INT64_MIN}, (int64_t[]){2, 0, 1},
                           (int64_t[]){1, 1, -2}, st, sp, od, &e), &e);
    KT_EQ_INT(od[0], 2); KT_EQ_INT(od[1], 3); KT_EQ_INT(od[2], 4);
    KT_EQ_INT(st[1], 4); KT_EQ_INT(sp[1], -2);
    float x[120], y[24];
    for (int i = 0; i < 120; i++) x[i] = (float)i;
    kl_slice(4, 3, d, x, st, sp, od, y, NULL);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++) KT_NEAR(y[(a * 3 + b) * 4 + c], (1 + a) * 30 + (4 - 2 * b) * 6 + 2 + c, 0);
    /* empty slice and errors */
    KT_OK(kl_slice_prepare(3, d, 1, (int64_t[]){3}, (int64_t[]){1}, NULL, NULL, st, sp, od, &e), &e);
    KT_EQ_INT(od[0], 0);
    KT_EQ_INT(kl_slice_prepare(3, d, 1, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){3}, NULL, st, sp, od, &e), KL_EINVAL);
    KT_EQ_INT(kl_slice_prepare(3, d, 1, (int64_t[]){0}, (int64_t[]){1}, NULL, (int64_t[]){0}, st, sp, od, &e), KL_EINVAL);
    KT_EQ_INT(kl_slice_prepare(3, d, 2, (int64_t[]){0, 0}, (int64_t[]){1, 1}, (int64_t[]){1, -2}, NULL, st, sp, od, &e), KL_EINVAL);
}

KL_TEST(tensor_pad_modes) {
    kl_err e = {0};
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, y[64];
    float v = 9;
    /* constant: pads begins (1, 2), ends (0, 1) -> 3 x 6 */
    KT_OK(kl_pad(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){1, 2, 0, 1}, KL_PAD_CONSTANT, &v, y, NULL, &e), &e);
    float ec[18] = {9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9};
    KT_CHECK(memcmp(y, ec, sizeof ec) == 0);
    KT_OK(kl_pad(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){0, 2, 0, 2}, KL_PAD_REFLECT, NULL, y, NULL, &e), &e);
    float er[14] = {3, 2, 1, 2, 3, 2, 1, 6, 5, 4, 5, 6, 5, 4};
    KT_CHECK(memcmp(y, er, sizeof er) == 0);
    KT_OK(kl_pad(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){1, 1, 1, 1}, KL_PAD_EDGE, NULL, y, NULL, &e), &e);
    float ee[20] = {1, 1, 2, 3, 3, 1, 1, 2, 3, 3, 4, 4, 5, 6, 6, 4, 4, 5, 6, 6};
    KT_CHECK(memcmp(y, ee, sizeof ee) == 0);
    KT_OK(kl_pad(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){0, 1, 0, 2}, KL_PAD_WRAP, NULL, y, NULL, &e), &e);
    float ew[12] = {3, 1, 2, 3, 1, 2, 6, 4, 5, 6, 4, 5};
    KT_CHECK(memcmp(y, ew, sizeof ew) == 0);
    /* negative pads crop */
    KT_OK(kl_pad(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){0, -1, -1, 1}, KL_PAD_CONSTANT, NULL, y, NULL, &e), &e);
    float en[3] = {2, 3, 0};
    KT_CHECK(memcmp(y, en, sizeof en) == 0);
    KT_EQ_INT(kl_pad(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){0, 3, 0, 0}, KL_PAD_REFLECT, NULL, y, NULL, &e), KL_EINVAL);
    KT_CONTAINS(e.msg, "reflect");
}

KL_TEST(tensor_gather_tile_expand) {
    kl_err e = {0};
    float x[3 * 4];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    float y[3 * 2 * 2];
    int64_t idx[4] = {3, 0, -1, 1};
    KT_OK(kl_gather(4, 2, (int64_t[]){3, 4}, x, 1, KL_I64, idx, 4, y, NULL, &e), &e);
    KT_NEAR(y[0], 3, 0); KT_NEAR(y[2], 3, 0); KT_NEAR(y[4], 7, 0); KT_NEAR(y[11], 9, 0);
    int32_t i32[2] = {2, 0};
    KT_OK(kl_gather(4, 2, (int64_t[]){3, 4}, x, 0, KL_I32, i32, 2, y, NULL, &e), &e);
    KT_NEAR(y[0], 8, 0); KT_NEAR(y[4], 0, 0);
    int64_t bad[1] = {4};
    KT_EQ_INT(kl_gather(4, 2, (int64_t[]){3, 4}, x, 1, KL_I64, bad, 1, y, NULL, &e), KL_ERANGE);
    KT_CONTAINS(e.msg, "index 4");
    /* tile (2,3) by (2,2) */
    float t[24];
    kl_tile(4, 2, (int64_t[]){2, 3}, x, (int64_t[]){2, 2}, t, NULL);
    float et[24] = {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5};
    KT_CHECK(memcmp(t, et, sizeof et) == 0);
    /* expand (3,1) -> (2,3,4) */
    float ex[24];
    KT_OK(kl_expand(4, 2, (int64_t[]){3, 1}, x, 3, (int64_t[]){2, 3, 4}, ex, NULL, &e), &e);
    KT_NEAR(ex[0], 0, 0); KT_NEAR(ex[3], 0, 0); KT_NEAR(ex[4], 1, 0); KT_NEAR(ex[23], 2, 0);
    KT_EQ_INT(kl_expand(4, 2, (int64_t[]){3, 2}, x, 2, (int64_t[]){3, 4}, ex, NULL, &e), KL_ESHAPE);
    /* large expand deterministic */
    int64_t n = 64 * 1000;
    float *big = malloc(4 * (size_t)n), *big2 = malloc(4 * (size_t)n), *src = tt_randn(1000, 3);
    KT_OK(kl_expand(4, 1, (int64_t[]){1000}, src, 2, (int64_t[]){64, 1000}, big, tt_pool(2), &e), &e);
    KT_OK(kl_expand(4, 1, (int64_t[]){1000}, src, 2, (int64_t[]){64, 1000}, big2, tt_pool(1), &e), &e);
    int same = memcmp(big, big2, 4 * (size_t)n) == 0 && big[63 * 1000 + 999] == src[999];
    free(big); free(big2); free(src);
    KT_CHECK(same);
}

KL_TEST(tensor_resize) {
    kl_err e = {0};
    float x[4] = {1, 2, 3, 4}, y[16];
    int64_t d[4] = {1, 1, 2, 2}, od[4] = {1, 1, 4, 4};
    float sc[4] = {1, 1, 2, 2};
    KT_OK(kl_resize_f32(4, d, x, od, sc, KL_RESIZE_NEAREST, KL_CT_ASYMMETRIC, KL_NEAREST_FLOOR, y, NULL, &e), &e);
    float en[16] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
    KT_CHECK(memcmp(y, en, sizeof en) == 0);
    /* linear half_pixel (ONNX resize_upsample_scales_linear) */
    KT_OK(kl_resize_f32(4, d, x, od, sc, KL_RESIZE_LINEAR, KL_CT_HALF_PIXEL, KL_NEAREST_ROUND_PREFER_FLOOR, y, NULL, &e), &e);
    float el[16] = {1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4};
    for (int i = 0; i < 16; i++) KT_NEAR(y[i], el[i], 1e-6);
    /* align_corners (ONNX resize_upsample_scales_linear_align_corners) */
    KT_OK(kl_resize_f32(4, d, x, od, sc, KL_RESIZE_LINEAR, KL_CT_ALIGN_CORNERS, KL_NEAREST_ROUND_PREFER_FLOOR, y, NULL, &e), &e);
    float ea[16] = {1, 1.333333f, 1.666667f, 2, 1.666667f, 2, 2.333333f, 2.666667f,
                    2.333333f, 2.666667f, 3, 3.333333f, 3, 3.333333f, 3.666667f, 4};
    for (int i = 0; i < 16; i++) KT_NEAR(y[i], ea[i], 1e-5);
    /* downsample nearest (ONNX resize_downsample_scales_nearest: 2x4 by 0.6 -> 1x2) */
    float x8[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y2[2];
    KT_OK(kl_resize_f32(4, (int64_t[]){1, 1, 2, 4}, x8, (int64_t[]){1, 1, 1, 2}, (float[]){1, 1, 0.6f, 0.6f},
                        KL_RESIZE_NEAREST, KL_CT_HALF_PIXEL, KL_NEAREST_ROUND_PREFER_FLOOR, y2, NULL, &e), &e);
    KT_NEAR(y2[0], 1, 0); KT_NEAR(y2[1], 3, 0);
}
