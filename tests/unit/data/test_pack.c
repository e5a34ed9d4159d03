/* Unit tests of kl_pack (also run under the sanitizers): a small generated
 * folder with a bad file packs into a valid shard set, the bad file is
 * reported, a rerun is a no-op, labels from a CSV give the same shards. */
#include <stdio.h>
#include <stdlib.h>

#include "../harness.h"
#include "keel/core.h"
#include "keel/defectgen.h"
#include "keel/shard.h"

KL_TEST(pack_small_folder) {
    kl_err e = {0};
    char src[600], out[600], out2[600], csv[700];
    snprintf(src, sizeof src, "%s/src", kt_tmpdir());
    snprintf(out, sizeof out, "%s/shards", kt_tmpdir());
    snprintf(out2, sizeof out2, "%s/shards2", kt_tmpdir());
    kl_defectgen_opts g = {.out_dir = src, .n = 30, .size = 32, .seed = 3, .quality = 90};
    kl_defectgen_result gr;
    KT_OK(kl_defectgen_write(&g, &gr, &e), &e);
    KT_EQ_INT(gr.written, 30);
    char bad[700];
    snprintf(bad, sizeof bad, "%s/good/zz.jpg", src);
    KT_OK(kl_write_file_atomic(bad, "nope", 4, &e), &e);
    kl_pack_opts o;
    kl_pack_opts_default(&o);
    o.src_dir = src; o.out_dir = out; o.shard_bytes = 16384;
    kl_pack_result r;
    KT_OK(kl_pack(&o, &r, &e), &e);
    KT_EQ_INT(r.files, 31);
    KT_EQ_INT(r.packed, 30);
    KT_EQ_INT(r.skipped, 1);
    KT_EQ_INT(r.n_issues, 1);
    KT_EQ_STR(r.issues[0].path, "good/zz.jpg");
    KT_CONTAINS(r.issues[0].reason, "not a JPEG or PNG");
    KT_CHECK(r.shards > 3);
    char id[65];
    snprintf(id, sizeof id, "%s", r.id);
    kl_pack_result_free(&r);
    kl_shardset *s;
    KT_OK(kl_shardset_open(out, 1, &s, &e), &e);
    KT_EQ_INT(kl_shardset_count(s), 30);
    KT_EQ_STR(kl_shardset_id(s), id);
    KT_EQ_STR(kl_shardset_class_name(s, 0), "dent");
    kl_record rec;
    KT_OK(kl_shardset_get(s, 0, &rec, &e), &e);
    KT_EQ_STR(rec.key, "dent/000002.jpg");
    KT_EQ_INT(rec.label, 0);
    kl_shardset_free(s);
    /* rerun: nothing to do */
    KT_OK(kl_pack(&o, &r, &e), &e);
    KT_CHECK(r.reused);
    KT_EQ_STR(r.id, id);
    kl_pack_result_free(&r);
    /* fail mode names the file and publishes nothing */
    o.out_dir = out2; o.on_error_fail = 1;
    KT_EQ_INT(kl_pack(&o, &r, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "good/zz.jpg");
    kl_pack_result_free(&r);
    snprintf(csv, sizeof csv, "%s/manifest.json", out2);
    KT_CHECK(!kl_path_exists(csv));
    /* labels from the generator's CSV: same shard set */
    o.on_error_fail = 0; o.force = 1;
    snprintf(csv, sizeof csv, "%s/labels.csv", src);
    o.labels_path = csv;
    KT_OK(kl_pack(&o, &r, &e), &e);
    KT_EQ_INT(r.packed, 30);
    KT_EQ_INT(r.skipped, 0);
    kl_pack_result_free(&r);
    KT_OK(kl_shardset_open(out2, 0, &s, &e), &e);
    KT_EQ_INT(kl_shardset_count(s), 30);
    kl_shardset_free(s);
}

/* A resumed pack reuses only the finished shards that still match the state
 * (sha256 and size, the manifest check); the shard set's manifest lists its
 * shards in the one manifest shape. */
KL_TEST(pack_resume_reuses_only_matching_shards) {
    kl_err e = {0};
    char src[600], out[600], p[800];
    snprintf(src, sizeof src, "%s/src", kt_tmpdir());
    snprintf(out, sizeof out, "%s/shards", kt_tmpdir());
    kl_defectgen_opts g = {.out_dir = src, .n = 30, .size = 32, .seed = 3, .quality = 90};
    kl_defectgen_result gr;
    KT_OK(kl_defectgen_write(&g, &gr, &e), &e);
    kl_pack_opts o;
    kl_pack_opts_default(&o);
    o.src_dir = src; o.out_dir = out; o.shard_bytes = 16384;
    kl_pack_result r;
    KT_OK(kl_pack(&o, &r, &e), &e);
    KT_CHECK(r.shards >= 3);
    kl_pack_result_free(&r);
    snprintf(p, sizeof p, "%s/manifest.json", out);
    kl_manifest_files m;
    KT_OK(kl_manifest_files_load(p, &m, NULL, &e), &e);
    KT_CHECK(kl_manifest_find(&m, "shard-00001.kshard") && kl_manifest_find(&m, "shard-00001.kshard")->bytes > 0);
    kl_manifest_files_free(&m);
    char *t = NULL;
    size_t n = 0;
    KT_OK(kl_read_file(p, &t, &n, &e), &e);
    KT_CONTAINS(t, "\"files\": {");
    kl_mem_free(t);
    /* as if killed before the manifest, with shard 1 changed in place */
    KT_CHECK(remove(p) == 0);
    snprintf(p, sizeof p, "%s/shard-00001.kshard", out);
    KT_OK(kl_read_file(p, &t, &n, &e), &e);
    t[n - 1] ^= 1;
    KT_OK(kl_write_file_atomic(p, t, n, &e), &e);
    kl_mem_free(t);
    KT_OK(kl_pack(&o, &r, &e), &e);
    KT_EQ_INT(r.shards_reused, 1);
    kl_pack_result_free(&r);
    kl_shardset *s;
    KT_OK(kl_shardset_open(out, 1, &s, &e), &e);
    KT_EQ_INT(kl_shardset_count(s), 30);
    kl_shardset_free(s);
}
