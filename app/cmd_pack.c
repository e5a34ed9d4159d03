/* keel pack SRC --out SHARDS_DIR: packs a folder of JPEG/PNG images (labels
 * from sub-folder names or a CSV/Parquet label file) into a shard set for the
 * data loader: validated, parallel, deterministic, resumable and atomic. */
#include "app.h"

#include <keel/shard.h>
#include <stdlib.h>
#include <string.h>

static const app_opt opts[] = {
    {"out", 'o', 1, "SHARDS_DIR", "shard set folder (required)", 0},
    {"labels", 0, 1, "FILE", "CSV or Parquet of path,label[,extra fields] (paths relative to SRC)", 0},
    {"shard-size", 0, 1, "SIZE", "target shard size: 64M, 1G ... (default 256M)", 0},
    {"on-error", 0, 1, "MODE", "skip (default: report and leave out bad images) or fail", 0},
    {"max-pixels", 0, 1, "N", "refuse images larger than N pixels (default 100000000)", 0},
    {"verify", 0, 0, NULL, "instead of packing: check the shard set SRC (every sha256, header and index entry)", 0},
    {"force", 0, 0, NULL, "replace a different shard set already in SHARDS_DIR", 0},
    {"progress", 0, 0, NULL, "show progress (stderr)", 0},
    {"json", 0, 0, NULL, "machine-readable result", 0},
};
static const app_cmd_spec spec = {
    "pack",
    "keel pack SRC --out SHARDS_DIR [--labels FILE.csv|FILE.parquet] [--shard-size SIZE]\n"
    "       [--on-error skip|fail] [--threads N] [--json]\n"
    "       keel pack --verify SHARDS_DIR [--json]",
    "Pack a folder of images into shard files (mmap-able, 4 KiB-aligned records) for the loader.",
    "Labels: the first-level sub-folder of each image (SRC/<class>/...), or --labels. Classes\n"
    "are sorted (numerically when every label is an integer); records are in path order.\n"
    "Every image is validated (header, pixel cap, full decode) in parallel (--threads, a global\n"
    "option); corrupt, truncated, zero-size, non-image and oversized files are reported with\n"
    "the reason and skipped (--on-error skip) or fail the pack. The output is byte-identical\n"
    "for any thread count. An interrupted pack resumes: finished shards are verified by sha256\n"
    "and kept. manifest.json is written last, so an unfinished pack is never a shard set.\n"
    "Exit status: 0 packed (also with skipped files), 1 failure, 2 usage error.",
    opts, KL_ARRAY_LEN(opts), 1, 1};

/* keel pack --verify DIR */
static int verify(const char *dir, int json) {
    kl_err e = {0};
    kl_shardset *s;
    int64_t t0 = kl_time_mono_ns();
    int rc = kl_shardset_open(dir, 1, &s, &e);
    double secs = (double)(kl_time_mono_ns() - t0) / 1e9;
    if (json) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_printf(&b, "{\"ok\": %s, \"dir\": ", rc ? "false" : "true");
        kl_buf_json_str(&b, dir);
        if (rc == KL_OK) {
            kl_buf_printf(&b, ", \"id\": \"%s\", \"records\": %lld, \"shards\": %d, \"classes\": [", kl_shardset_id(s),
                          (long long)kl_shardset_count(s), kl_shardset_num_shards(s));
            for (int k = 0; k < kl_shardset_num_classes(s); k++) {
                if (k) kl_buf_puts(&b, ", ");
                kl_buf_json_str(&b, kl_shardset_class_name(s, k));
            }
            kl_buf_puts(&b, "]");
        }
        kl_buf_printf(&b, ", \"seconds\": %.3f, \"error\": ", secs);
        if (rc) kl_buf_json_str(&b, kl_err_what(&e)); else kl_buf_puts(&b, "null");
        kl_buf_puts(&b, "}\n");
        fputs(b.data ? b.data : "", stdout);
        kl_buf_free(&b);
        if (rc) fprintf(stderr, "keel: error: %s\n", kl_err_what(&e));
        kl_shardset_free(s);
        return rc ? APP_EXIT_FAIL : APP_EXIT_OK;
    }
    if (rc) return app_fail(&e);
    printf("%s: ok: %lld records, %d classes, %d shards, every sha256 matches\n  id %s\n", dir,
           (long long)kl_shardset_count(s), kl_shardset_num_classes(s), kl_shardset_num_shards(s), kl_shardset_id(s));
    kl_shardset_free(s);
    return APP_EXIT_OK;
}

int cmd_pack(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    if (app_flag(&a, "verify")) return verify(a.pos[0], app_flag(&a, "json"));
    kl_pack_opts o;
    kl_pack_opts_default(&o);
    o.src_dir = a.pos[0];
    o.out_dir = app_get(&a, "out");
    if (!o.out_dir) return app_usage_error(&spec, "--out is required");
    o.labels_path = app_get(&a, "labels");
    kl_err e = {0};
    if (app_get(&a, "shard-size")) {
        uint64_t v;
        if (kl_mem_parse_size(app_get(&a, "shard-size"), &v, &e) || v < 8192)
            return app_usage_error(&spec, "--shard-size: expected a size of at least 8K (e.g. 64M)");
        o.shard_bytes = v;
    }
    const char *oe = app_get(&a, "on-error");
    if (oe && strcmp(oe, "skip") && strcmp(oe, "fail")) return app_usage_error(&spec, "--on-error must be skip or fail");
    o.on_error_fail = oe && !strcmp(oe, "fail");
    int64_t mp;
    if ((rc = app_get_int(&a, &spec, "max-pixels", 0, &mp)) >= 0) return rc;
    if (mp < 0) return app_usage_error(&spec, "--max-pixels must be positive");
    o.max_pixels = (uint64_t)mp;
    o.force = app_flag(&a, "force");
    o.progress = app_flag(&a, "progress");
    kl_pack_result res;
    rc = kl_pack(&o, &res, &e);
    for (size_t i = 0; i < res.n_issues && !app_flag(&a, "json"); i++)
        fprintf(stderr, "skipped %s: %s\n", res.issues[i].path, res.issues[i].reason);
    double rate = res.seconds > 0 ? (double)(res.packed + res.skipped) / res.seconds : 0;
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_printf(&b, "{\"ok\": %s, \"id\": ", rc ? "false" : "true");
        if (rc) kl_buf_puts(&b, "null"); else kl_buf_json_str(&b, res.id);
        kl_buf_puts(&b, ", \"out\": ");
        kl_buf_json_str(&b, o.out_dir);
        kl_buf_printf(&b, ", \"files\": %lld, \"records\": %lld, \"skipped\": %lld, \"classes\": %d, \"shards\": %lld, "
                          "\"shards_reused\": %lld, \"reused\": %s, \"bytes_in\": %llu, \"bytes_out\": %llu, \"seconds\": %.3f, "
                          "\"cpu_seconds\": %.3f, \"images_per_s\": %.1f, \"threads\": %d, \"issues\": [",
                      (long long)res.files, (long long)res.packed, (long long)res.skipped, res.num_classes,
                      (long long)res.shards, (long long)res.shards_reused, res.reused ? "true" : "false",
                      (unsigned long long)res.bytes_in, (unsigned long long)res.bytes_out, res.seconds, res.cpu_seconds, rate,
                      kl_pool_threads(kl_pool_default()));
        for (size_t i = 0; i < res.n_issues; i++) {
            kl_buf_puts(&b, i ? ", {\"file\": " : "{\"file\": ");
            kl_buf_json_str(&b, res.issues[i].path);
            kl_buf_puts(&b, ", \"reason\": ");
            kl_buf_json_str(&b, res.issues[i].reason);
            kl_buf_puts(&b, "}");
        }
        kl_buf_puts(&b, "], \"error\": ");
        if (rc) kl_buf_json_str(&b, kl_err_what(&e)); else kl_buf_puts(&b, "null");
        kl_buf_puts(&b, "}\n");
        fputs(b.data ? b.data : "", stdout);
        kl_buf_free(&b);
        if (rc) fprintf(stderr, "keel: error: %s\n", kl_err_what(&e));
        kl_pack_result_free(&res);
        return rc ? APP_EXIT_FAIL : APP_EXIT_OK;
    }
    if (rc) {
        kl_pack_result_free(&res);
        return app_fail(&e);
    }
    char bi[32], bo[32], tb[32];
    if (res.reused)
        printf("already packed: %s holds shard set %s (%lld records, %lld shards); nothing to do\n", o.out_dir, res.id,
               (long long)res.packed, (long long)res.shards);
    else
        printf("packed %lld of %lld images (%lld skipped, %d classes) into %lld shard%s in %s%s\n"
               "  %s read, %s written, %s (%.0f images/s, %d threads)\n  id %s\n",
               (long long)res.packed, (long long)res.files, (long long)res.skipped, res.num_classes, (long long)res.shards,
               res.shards == 1 ? "" : "s", o.out_dir, res.shards_reused ? " (resumed)" : "", kl_fmt_bytes(res.bytes_in, bi, sizeof bi),
               kl_fmt_bytes(res.bytes_out, bo, sizeof bo), kl_fmt_duration(res.seconds, tb, sizeof tb), rate,
               kl_pool_threads(kl_pool_default()), res.id);
    kl_pack_result_free(&res);
    return APP_EXIT_OK;
}
