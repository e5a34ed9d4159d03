/* Test driver for the image transforms (tests/integration/loader_cv2.py):
 * reads a raw uint8 HWC image on stdin, writes the result on stdout.
 *   image-tool undistort W H C fx fy cx cy k1 k2 p1 p2
 *   image-tool resize W H C DW DH */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/loader.h"

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: image-tool undistort|resize W H C ...\n"); return 2; }
    int w = atoi(argv[2]), h = atoi(argv[3]), c = atoi(argv[4]);
    size_t n = (size_t)w * (size_t)h * (size_t)c;
    uint8_t *src = malloc(n ? n : 1);
    if (!src || fread(src, 1, n, stdin) != n) { fprintf(stderr, "image-tool: short input\n"); return 1; }
    kl_err e = {0};
    int rc = 1;
    if (!strcmp(argv[1], "undistort") && argc == 13) {
        kl_camera cam = {atof(argv[5]), atof(argv[6]), atof(argv[7]), atof(argv[8]), atof(argv[9]), atof(argv[10]), atof(argv[11]), atof(argv[12]), 0, 0};
        kl_undistort_map *m = NULL;
        uint8_t *dst = malloc(n);
        if (dst && !kl_undistort_map_new(&cam, w, h, &m, &e) && !kl_img_undistort(m, src, w, h, c, dst, &e)) rc = fwrite(dst, 1, n, stdout) != n;
        kl_undistort_map_free(m);
        free(dst);
    } else if (!strcmp(argv[1], "resize") && argc == 7) {
        int dw = atoi(argv[5]), dh = atoi(argv[6]);
        size_t dn = (size_t)dw * (size_t)dh * (size_t)c;
        uint8_t *dst = malloc(dn ? dn : 1);
        if (dst && !kl_img_resize_area(src, w, h, c, dst, dw, dh, &e)) rc = fwrite(dst, 1, dn, stdout) != dn;
        free(dst);
    } else {
        fprintf(stderr, "image-tool: bad arguments\n");
        free(src);
        return 2;
    }
    if (rc && e.code) fprintf(stderr, "image-tool: %s\n", kl_err_what(&e));
    free(src);
    return rc;
}
