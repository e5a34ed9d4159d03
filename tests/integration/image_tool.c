/* Test driver for the image transforms (tests/integration/loader_cv2.py):
 * reads a raw uint8 HWC image on stdin, writes the result on stdout.
 *   image-tool undistort W H C fx fy cx cy k1 k2 p1 p2
 *   image-tool resize W H C DW DH
 *   image-tool shards OUT_DIR NCLASSES  (stdin: "PATH LABEL" lines; a minimal
 *   one-shard pack for tests that must not depend on `keel pack`) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/loader.h"
#include "keel/shard.h"

static int mini_pack(const char *dir, int nclass) {
    kl_err e = {0};
    char path[4096], line[4200], hex[65];
    int64_t counts[256] = {0}, n = 0;
    uint64_t bytes = 0;
    kl_shard_writer *w = NULL;
    if (nclass < 1 || nclass > 256 || kl_mkdir_p(dir, &e)) return 1;
    snprintf(path, sizeof path, "%s/shard-00000.kshard", dir);
    if (kl_shard_writer_open(path, &w, &e)) goto fail;
    while (fgets(line, sizeof line, stdin)) {
        char file[4096];
        int label;
        if (sscanf(line, "%4095s %d", file, &label) != 2 || label < 0 || label >= nclass) continue;
        char *data = NULL;
        size_t len = 0;
        if (kl_read_file(file, &data, &len, &e)) goto fail;
        int rc = kl_shard_writer_add(w, data, len, label, file, &e);
        kl_mem_free(data);
        if (rc) goto fail;
        counts[label]++; n++;
    }
    if (kl_shard_writer_finish(w, hex, &bytes, &e)) { w = NULL; goto fail; }
    w = NULL;
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "{\"format\":\"keel-shards\",\"version\":1,\"records\":%lld,\"classes\":[", (long long)n);
    for (int k = 0; k < nclass; k++) kl_buf_printf(&b, "%s\"c%d\"", k ? "," : "", k);
    kl_buf_printf(&b, "],\"class_counts\":[");
    for (int k = 0; k < nclass; k++) kl_buf_printf(&b, "%s%lld", k ? "," : "", (long long)counts[k]);
    kl_buf_printf(&b, "],\"shards\":[{\"file\":\"shard-00000.kshard\",\"sha256\":\"%s\",\"records\":%lld,\"bytes\":%llu}]}\n", hex,
                  (long long)n, (unsigned long long)bytes);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    int rc = kl_write_file_atomic(path, b.data, b.len, &e);
    kl_buf_free(&b);
    if (!rc) return 0;
fail:
    kl_shard_writer_abort(w);
    fprintf(stderr, "image-tool: %s\n", kl_err_what(&e));
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: image-tool undistort|resize W H C ...\n"); return 2; }
    if (!strcmp(argv[1], "shards")) return mini_pack(argv[2], atoi(argv[3]));
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
