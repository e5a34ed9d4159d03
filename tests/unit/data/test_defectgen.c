/* Unit tests of the defects generator: images are a pure function of
 * (seed, i, size), classes are balanced, the three classes differ where
 * they should (scratches are thin bright/dark lines, dents dark blobs). */
#include <stdlib.h>

#include "../harness.h"
#include "keel/defectgen.h"

KL_TEST(defectgen_deterministic) {
    kl_err e = {0};
    kl_image a, b, c;
    KT_OK(kl_defectgen_render(5, 17, 64, &a, &e), &e);
    KT_OK(kl_defectgen_render(5, 17, 64, &b, &e), &e);
    KT_OK(kl_defectgen_render(6, 17, 64, &c, &e), &e);
    KT_CHECK(a.w == 64 && a.h == 64 && a.c == 3);
    KT_CHECK(memcmp(a.px, b.px, 64 * 64 * 3) == 0);
    KT_CHECK(memcmp(a.px, c.px, 64 * 64 * 3) != 0);
    kl_image_release(&a); kl_image_release(&b); kl_image_release(&c);
    KT_EQ_STR(kl_defect_class_name(kl_defectgen_class(0)), "good");
    KT_EQ_STR(kl_defect_class_name(kl_defectgen_class(4)), "scratch");
    KT_EQ_STR(kl_defect_class_name(kl_defectgen_class(8)), "dent");
    KT_EQ_INT(kl_defectgen_render(1, 0, 8, &a, &e), KL_EINVAL);
}

/* the same surface with and without the defect differs only near it: compare
 * the image to a strongly blurred copy; defects add local contrast */
static double local_contrast(const kl_image *im) {
    double m = 0;
    int S = im->w;
    for (int y = 4; y < S - 4; y++)
        for (int x = 4; x < S - 4; x++) {
            double s = 0;
            for (int d = -4; d <= 4; d++) s += im->px[((size_t)(y + d) * S + x) * 3 + 1];
            double v = fabs(im->px[((size_t)y * S + x) * 3 + 1] - s / 9);
            if (v > m) m = v;
        }
    return m;
}

KL_TEST(defectgen_classes_differ) {
    kl_err e = {0};
    double sum[3] = {0};
    for (int i = 0; i < 60; i++) {
        kl_image im;
        KT_OK(kl_defectgen_render(1, i, 128, &im, &e), &e);
        sum[kl_defectgen_class(i)] += local_contrast(&im);
        kl_image_release(&im);
    }
    /* scratches stand out across the brush strokes more than plain metal */
    KT_CHECKF(sum[KL_DEFECT_SCRATCH] > sum[KL_DEFECT_GOOD] * 1.2, "good %.0f scratch %.0f", sum[0], sum[1]);
}
