/* Decode speed of kl_image_decode on JPEG files vs TurboJPEG called directly
 * (tjDecompress2 into a preallocated buffer, one reused handle: the floor of
 * any wrapper), in the same process on one thread, alternating 50 ms slices
 * of each so that load from other processes hits both alike. Prints
 * "file w h keel_mpix_per_s raw_mpix_per_s" (source pixels per second). With
 * --scale N, both decode with DCT-domain scaling to the smallest size
 * >= w/N x h/N (still counting source pixels: the work a loader gets done).
 * Usage: decode_bench [--secs S] [--scale N] FILE... */
#include <keel/image.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

int main(int argc, char **argv) {
    double secs = 1.0;
    int scale = 1, i = 1;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc) return 2;
        if (!strcmp(argv[i], "--secs")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--scale")) scale = atoi(argv[i + 1]);
        else return 2;
    }
    tjhandle tj = tjInitDecompress();
    for (; i < argc; i++) {
        kl_err e = {0};
        char *buf;
        size_t len;
        if (kl_read_file(argv[i], &buf, &len, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
        int w, h, c;
        if (kl_image_info(buf, len, argv[i], &w, &h, &c, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
        int mw = scale > 1 ? w / scale : 0, mh = scale > 1 ? h / scale : 0, sw, sh;
        kl_image_scaled_size(w, h, mw, mh, &sw, &sh);
        unsigned char *dst = malloc((size_t)sw * sh * 3);
        double t[2] = {0, 0};
        int64_t n[2] = {0, 0};
        int slices = (int)(secs / 0.05) + 1;
        for (int s = -2; s < 2 * slices; s++) { /* two warm-up slices */
            int which = (s + 2) & 1;
            int64_t t0 = kl_time_mono_ns(), now = t0, k = 0;
            while (now - t0 < 50000000) {
                if (which == 0) {
                    kl_image img;
                    if (kl_image_decode(buf, len, argv[i], mw, mh, 0, &img, &e)) { fprintf(stderr, "%s\n", kl_err_what(&e)); return 1; }
                    kl_image_release(&img);
                } else if (tjDecompress2(tj, (unsigned char *)buf, (unsigned long)len, dst, sw, sw * 3, sh, TJPF_RGB, 0) != 0) {
                    fprintf(stderr, "%s\n", tjGetErrorStr2(tj));
                    return 1;
                }
                k++;
                now = kl_time_mono_ns();
            }
            if (s >= 0) { t[which] += (double)(now - t0) / 1e9; n[which] += k; }
        }
        printf("%s %d %d %.1f %.1f\n", argv[i], w, h, (double)n[0] * w * h / t[0] / 1e6, (double)n[1] * w * h / t[1] / 1e6);
        free(dst);
        free(buf);
    }
    tjDestroy(tj);
    return 0;
}
