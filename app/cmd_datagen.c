/* keel datagen: deterministic synthetic data sets. `keel datagen defects`
 * writes the industrial-inspection image set (brushed metal: good, scratch,
 * dent) used by the image examples, tests and benchmarks. */
#include "app.h"

#include <keel/defectgen.h>
#include <stdlib.h>
#include <string.h>

static const app_opt defects_opts[] = {
    {"out", 'o', 1, "DIR", "output folder: DIR/<class>/<index>.jpg and DIR/labels.csv (required)", 0},
    {"n", 'n', 1, "N", "number of images (default 3000)", 0},
    {"size", 0, 1, "S", "width and height in pixels (default 256)", 0},
    {"seed", 0, 1, "SEED", "random seed (default 1)", 0},
    {"quality", 0, 1, "Q", "JPEG quality 1..100 (default 90)", 0},
    {"progress", 0, 0, NULL, "show progress (stderr)", 0},
    {"json", 0, 0, NULL, "machine-readable result", 0},
};
static const app_cmd_spec defects_spec = {
    "datagen defects",
    "keel datagen defects --out DIR [--n N] [--size S] [--seed SEED] [--quality Q] [--threads N] [--json]",
    "Generate a deterministic image classification set: textured metal surfaces, good/scratch/dent.",
    "Brushed-metal textures under varying light (gradient, vignette, brightness, tint) in three\n"
    "balanced classes: good, scratch (thin random lines, bright or dark) and dent (soft dark\n"
    "blobs with a highlight rim); every class carries distractors (specks, faint smudges).\n"
    "Image i is a pure function of (seed, i, size): the files are byte-identical for any\n"
    "--threads (a global option). Labels: the sub-folder names, and labels.csv (path,label).",
    defects_opts, KL_ARRAY_LEN(defects_opts), 0, 0};

static int datagen_defects(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&defects_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_defectgen_opts o = {0};
    o.out_dir = app_get(&a, "out");
    if (!o.out_dir) return app_usage_error(&defects_spec, "--out is required");
    int64_t n, size, seed, q;
    if ((rc = app_get_int(&a, &defects_spec, "n", 3000, &n)) >= 0) return rc;
    if ((rc = app_get_int(&a, &defects_spec, "size", 256, &size)) >= 0) return rc;
    if ((rc = app_get_int(&a, &defects_spec, "seed", 1, &seed)) >= 0) return rc;
    if ((rc = app_get_int(&a, &defects_spec, "quality", 90, &q)) >= 0) return rc;
    if (n < 0) return app_usage_error(&defects_spec, "--n must be >= 0");
    if (size < 16 || size > 8192) return app_usage_error(&defects_spec, "--size must be in 16..8192");
    if (q < 1 || q > 100) return app_usage_error(&defects_spec, "--quality must be in 1..100");
    o.n = n; o.size = (int)size; o.seed = (uint64_t)seed; o.quality = (int)q;
    o.progress = app_flag(&a, "progress");
    kl_err e = {0};
    kl_defectgen_result res;
    rc = kl_defectgen_write(&o, &res, &e);
    if (rc) return app_fail(&e);
    double rate = res.seconds > 0 ? (double)res.written / res.seconds : 0;
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"ok\": true, \"out\": ");
        kl_buf_json_str(&b, o.out_dir);
        kl_buf_printf(&b, ", \"images\": %lld, \"size\": %d, \"seed\": %lld, \"quality\": %d, \"bytes\": %llu, "
                          "\"seconds\": %.3f, \"images_per_s\": %.1f, \"threads\": %d}\n",
                      (long long)res.written, o.size, (long long)seed, o.quality, (unsigned long long)res.bytes,
                      res.seconds, rate, kl_pool_threads(kl_pool_default()));
        fputs(b.data ? b.data : "", stdout);
        kl_buf_free(&b);
    } else {
        char bb[32], tb[32];
        printf("wrote %lld images (%dx%d, good/scratch/dent) to %s: %s in %s (%.0f images/s, %d threads)\n",
               (long long)res.written, o.size, o.size, o.out_dir, kl_fmt_bytes(res.bytes, bb, sizeof bb),
               kl_fmt_duration(res.seconds, tb, sizeof tb), rate, kl_pool_threads(kl_pool_default()));
    }
    return APP_EXIT_OK;
}

int cmd_datagen(int argc, char **argv) {
    static const app_command sub[] = {
        {"defects", "metal-surface inspection images: good, scratch, dent (JPEG)", datagen_defects},
    };
    return app_dispatch("datagen", sub, KL_ARRAY_LEN(sub), argc, argv);
}
