/* keel loader: the data loader from the command line. `keel loader bench
 * SHARDS_DIR` runs the loader over a shard set as fast as it goes (no
 * consumer work) and reports images/s, decode MPix/s, the consumer's wait
 * share and the queue depth. */
#include "app.h"

#include <keel/loader.h>
#include <keel/shard.h>
#include <stdlib.h>
#include <string.h>

static const app_opt bench_opts[] = {
    {"batch", 'b', 1, "B", "samples per batch (default 64)", 0},
    {"workers", 'w', 1, "N", "worker threads (default 2)", 0},
    {"size", 's', 1, "S", "output side: crops of S x S (default 224)", 0},
    {"resize", 0, 1, "R", "shorter side before cropping (default S)", 0},
    {"multiple", 0, 1, "M", "round the resized sides to a multiple of M (e.g. 64)", 0},
    {"undistort", 0, 1, "FX,FY,CX,CY,K1,K2,P1,P2", "undistort first (OpenCV pinhole + k1 k2 p1 p2, K in pixels of the stored images)", 0},
    {"crop", 0, 1, "MODE", "random (default), center, or none (squash-resize to S x S)", 0},
    {"no-flip", 0, 0, NULL, "no random horizontal flip", 0},
    {"epochs", 'e', 1, "E", "passes over the data (default 1)", 0},
    {"prefetch", 0, 1, "N", "ready batches kept ahead (default 2 x workers)", 0},
    {"no-dct", 0, 0, NULL, "decode at full size (no TurboJPEG DCT scaling)", 0},
    {"seed", 0, 1, "N", "shuffle / augmentation seed (default 0)", 0},
    {"verify", 0, 0, NULL, "check every shard's sha256 on open", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec bench_spec = {
    "loader bench", "keel loader bench SHARDS_DIR [--batch B] [--workers N] [--size S] [--epochs E] [--json]",
    "Measure the data loader on a shard set: decode, resize, random crop/flip, normalise to float NCHW batches.",
    "Images are decoded (TurboJPEG with DCT scaling when the target is at least 2x smaller),\n"
    "area-resized so the shorter side is R, cropped to S x S, flipped at random and normalised\n"
    "with the ImageNet mean/std into 64-byte-aligned float32 (B, 3, S, S) batches.",
    bench_opts, KL_ARRAY_LEN(bench_opts), 1, 1};

static int loader_bench(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&bench_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t batch, workers, size, resize, epochs, prefetch, seed, multiple;
    if ((rc = app_get_int(&a, &bench_spec, "batch", 64, &batch)) >= 0 || (rc = app_get_int(&a, &bench_spec, "workers", 2, &workers)) >= 0 ||
        (rc = app_get_int(&a, &bench_spec, "size", 224, &size)) >= 0 || (rc = app_get_int(&a, &bench_spec, "resize", 0, &resize)) >= 0 ||
        (rc = app_get_int(&a, &bench_spec, "epochs", 1, &epochs)) >= 0 || (rc = app_get_int(&a, &bench_spec, "prefetch", 0, &prefetch)) >= 0 ||
        (rc = app_get_int(&a, &bench_spec, "seed", 0, &seed)) >= 0 || (rc = app_get_int(&a, &bench_spec, "multiple", 0, &multiple)) >= 0)
        return rc;
    if (batch < 1 || batch > 65536) return app_usage_error(&bench_spec, "--batch must be in [1, 65536]");
    if (workers < 1 || workers > 256) return app_usage_error(&bench_spec, "--workers must be in [1, 256]");
    if (size < 1 || size > 8192 || resize < 0 || resize > 8192) return app_usage_error(&bench_spec, "--size / --resize must be in [1, 8192]");
    if (epochs < 1) return app_usage_error(&bench_spec, "--epochs must be >= 1");
    kl_loader_cfg c = {0};
    c.batch = (int)batch; c.workers = (int)workers; c.size = (int)size; c.resize = (int)resize; c.prefetch = (int)prefetch;
    if (multiple < 0 || multiple > 1024) return app_usage_error(&bench_spec, "--multiple must be in [0, 1024]");
    c.multiple = (int)multiple;
    kl_camera cam = {0};
    const char *ud = app_get(&a, "undistort");
    if (ud) {
        int n = -1;
        if (sscanf(ud, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf%n", &cam.fx, &cam.fy, &cam.cx, &cam.cy, &cam.k1, &cam.k2, &cam.p1, &cam.p2, &n) != 8 || ud[n] || !(cam.fx > 0) || !(cam.fy > 0))
            return app_usage_error(&bench_spec, "--undistort takes FX,FY,CX,CY,K1,K2,P1,P2 with FX, FY > 0");
        c.undistort = &cam;
    }
    c.crop = KL_CROP_RANDOM;
    const char *crop = app_get(&a, "crop");
    if (crop && !strcmp(crop, "center")) c.crop = KL_CROP_CENTER;
    else if (crop && !strcmp(crop, "none")) c.crop = KL_CROP_NONE;
    else if (crop && strcmp(crop, "random")) return app_usage_error(&bench_spec, "--crop takes random, center or none (got '%s')", crop);
    c.flip = !app_flag(&a, "no-flip");
    c.channels = 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(c.mean, mean, sizeof mean); memcpy(c.std, std, sizeof std);
    c.seed = (uint64_t)seed; c.shuffle = 1; c.epochs = epochs;
    c.no_dct_scaling = app_flag(&a, "no-dct");
    kl_err e = {0};
    kl_shardset *set = NULL;
    kl_loader *l = NULL;
    kl_loader_source src;
    if (kl_shardset_open(a.pos[0], app_flag(&a, "verify"), &set, &e)) return app_fail(&e);
    kl_loader_source_shards(set, 3, &src);
    if (kl_loader_new(&src, &c, &l, &e)) { kl_shardset_free(set); return app_fail(&e); }
    kl_batch b;
    int64_t n = 0;
    while (!(rc = kl_loader_next(l, &b, &e)) && b.n) n += b.n;
    kl_loader_stats st;
    kl_loader_stats_get(l, &st);
    kl_loader_free(l);
    kl_shardset_free(set);
    if (rc) return app_fail(&e);
    double mpix_s = st.decode_s > 0 ? st.decode_mpix / st.decode_s : 0;
    if (app_flag(&a, "json")) {
        printf("{\"images\":%lld,\"batches\":%lld,\"seconds\":%.4f,\"images_per_s\":%.1f,\"batches_per_s\":%.2f,"
               "\"decode_s\":%.4f,\"decode_mpix\":%.3f,\"decode_mpix_per_s\":%.2f,\"transform_s\":%.4f,"
               "\"wait_share\":%.4f,\"queue_depth\":%.2f,\"workers\":%d,\"batch\":%d,\"size\":%d}\n",
               (long long)st.samples, (long long)st.batches, st.seconds, st.samples_per_s, st.batches_per_s, st.decode_s, st.decode_mpix, mpix_s,
               st.transform_s, st.wait_share, st.queue_depth, c.workers, c.batch, c.size);
    } else {
        printf("images        %lld in %lld batches of %d (%dx%d, %d workers)\n", (long long)st.samples, (long long)st.batches, c.batch, c.size, c.size, c.workers);
        printf("images/s      %.1f (%.2f batches/s)\n", st.samples_per_s, st.batches_per_s);
        printf("decode        %.2f MPix/s per worker (%.1f MPix in %.2f s of worker time)\n", mpix_s, st.decode_mpix, st.decode_s);
        printf("transforms    %.2f s of worker time\n", st.transform_s);
        printf("wait share    %.1f%% of the consumer's step time\n", 100 * st.wait_share);
        printf("queue depth   %.2f ready batches on average\n", st.queue_depth);
    }
    return APP_EXIT_OK;
}

int cmd_loader(int argc, char **argv) {
    static const app_command sub[] = {
        {"bench", "measure the loader on a shard set", loader_bench},
    };
    return app_dispatch("loader", sub, KL_ARRAY_LEN(sub), argc, argv);
}
