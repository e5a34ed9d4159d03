/* Decode speed of kl_image_decode on JPEG files: for each file, decodes it
 * repeatedly for SECS seconds on one thread (after a short warm-up) and prints
 * "file w h mpix_per_s" (source pixels per second). With --scale N, decodes
 * with DCT-domain scaling to the smallest size >= w/N x h/N (still counting
 * source pixels, the work a loader gets done per second).
 * Usage: decode_bench [--secs S] [--scale N] FILE... */
#include <keel/image.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    double secs = 1.0;
    int scale = 1, i = 1;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc) return 2;
        if (!strcmp(argv[i], "--secs")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--scale")) scale = atoi(argv[i + 1]);
        else return 2;
    }
    for (; i < argc; i++) {
        kl_err e = {0};
        char *buf;
        size_t len;
        if (kl_read_file(argv[i], &buf, &len, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
        int w, h, c;
        if (kl_image_info(buf, len, argv[i], &w, &h, &c, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
        int mw = scale > 1 ? w / scale : 0, mh = scale > 1 ? h / scale : 0;
        kl_image img;
        int64_t n = 0, t0 = kl_time_mono_ns(), warm = t0 + (int64_t)(0.2e9), start = 0, end = warm + (int64_t)(secs * 1e9);
        for (;;) {
            if (kl_image_decode(buf, len, argv[i], mw, mh, 0, &img, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
            kl_image_release(&img);
            int64_t now = kl_time_mono_ns();
            if (!start) { if (now >= warm) start = now; continue; }
            n++;
            if (now >= end) { end = now; break; }
        }
        double mpix = (double)n * w * h / ((double)(end - start) / 1e9) / 1e6;
        printf("%s %d %d %.1f\n", argv[i], w, h, mpix);
        free(buf);
    }
    return 0;
}
