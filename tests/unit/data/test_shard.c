/* Unit tests of shard files and shard sets: write/read round trip with page
 * alignment, the manifest identity, sha256 verification, and corrupt input
 * (flipped byte, truncation, bad index entries, bad manifests) as errors. */
#include <stdlib.h>
#include <unistd.h>

#include "../harness.h"
#include "keel/shard.h"

/* writes DIR/shard-0000i.kshard with n records and a manifest over nsh shards */
static int make_set(const char *dir, int nsh, int per, kl_err *e) {
    char path[1024], hex[65];
    kl_buf m;
    kl_buf_init(&m);
    kl_buf_puts(&m, "{\"format\":\"keel-shards\",\"version\":1,\"records\":");
    kl_buf_printf(&m, "%d,\"classes\":[\"a\",\"b\",\"c\"],\"class_counts\":[", nsh * per);
    int cnt[3] = {0};
    for (int i = 0; i < nsh * per; i++) cnt[i % 3]++;
    kl_buf_printf(&m, "%d,%d,%d],\"shards\":[", cnt[0], cnt[1], cnt[2]);
    int rc = kl_mkdir_p(dir, e);
    for (int s = 0; s < nsh && rc == 0; s++) {
        snprintf(path, sizeof path, "%s/shard-%05d.kshard", dir, s);
        kl_shard_writer *w;
        if ((rc = kl_shard_writer_open(path, &w, e))) break;
        for (int r = 0; r < per && rc == 0; r++) {
            int g = s * per + r;
            char data[5000], key[64];
            size_t len = (size_t)(g * 997 % 5000) + 1;
            for (size_t k = 0; k < len; k++) data[k] = (char)(g + k);
            snprintf(key, sizeof key, "cls/%d.jpg", g);
            rc = kl_shard_writer_add(w, data, len, g % 3, key, e);
        }
        uint64_t bytes;
        if (rc) { kl_shard_writer_abort(w); break; }
        if ((rc = kl_shard_writer_finish(w, hex, &bytes, e))) break;
        kl_buf_printf(&m, "%s{\"file\":\"shard-%05d.kshard\",\"records\":%d,\"bytes\":%llu,\"sha256\":\"%s\"}", s ? "," : "",
                      s, per, (unsigned long long)bytes, hex);
    }
    kl_buf_puts(&m, "]}");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (rc == 0) rc = kl_write_file_atomic(path, m.data, m.len, e);
    kl_buf_free(&m);
    return rc;
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

KL_TEST(shard_round_trip) {
    kl_err e = {0};
    char dir[600];
    snprintf(dir, sizeof dir, "%s/set", kt_tmpdir());
    KT_OK(make_set(dir, 3, 7, &e), &e);
    kl_shardset *s;
    KT_OK(kl_shardset_open(dir, 1, &s, &e), &e);
    KT_EQ_INT(kl_shardset_count(s), 21);
    KT_EQ_INT(kl_shardset_num_classes(s), 3);
    KT_EQ_INT(kl_shardset_num_shards(s), 3);
    KT_EQ_STR(kl_shardset_class_name(s, 2), "c");
    KT_CHECK(kl_shardset_class_name(s, 3) == NULL);
    KT_EQ_INT(strlen(kl_shardset_id(s)), 64);
    for (int g = 0; g < 21; g++) {
        kl_record r;
        KT_OK(kl_shardset_get(s, g, &r, &e), &e);
        KT_EQ_INT(r.len, (size_t)(g * 997 % 5000) + 1);
        KT_EQ_INT(r.label, g % 3);
        KT_EQ_INT(((uintptr_t)r.data) % 4096, 0);
        for (size_t k = 0; k < r.len; k++) KT_EQ_INT((uint8_t)r.data[k], (uint8_t)(g + k));
        char key[64];
        snprintf(key, sizeof key, "cls/%d.jpg", g);
        KT_EQ_STR(r.key, key);
        KT_OK(kl_shardset_check(s, g, &e), &e);
    }
    kl_record r;
    KT_EQ_INT(kl_shardset_get(s, 21, &r, &e), KL_ERANGE);
    KT_EQ_INT(kl_shardset_get(s, -1, &r, &e), KL_ERANGE);
    kl_shardset_free(s);
    kl_shardset_free(NULL);
    /* the id is the manifest's sha256 */
    char path[700], hex[65];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    KT_OK(kl_sha256_file_hex(path, hex, &e), &e);
    KT_OK(kl_shardset_open(dir, 0, &s, &e), &e);
    KT_EQ_STR(kl_shardset_id(s), hex);
    kl_shardset_free(s);
}

KL_TEST(shard_corrupt_is_an_error) {
    kl_err e = {0};
    char dir[600], path[700];
    kl_shardset *s = NULL;
    snprintf(dir, sizeof dir, "%s/bad", kt_tmpdir());
    /* no manifest */
    KT_EQ_INT(kl_shardset_open(kt_tmpdir(), 0, &s, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "no manifest.json");
    KT_OK(make_set(dir, 2, 5, &e), &e);
    snprintf(path, sizeof path, "%s/shard-00001.kshard", dir);
    /* a flipped byte in a record: sha256 catches it with verify, CRC per record without */
    flip_byte(path, 4096 * 2 + 3);
    KT_EQ_INT(kl_shardset_open(dir, 1, &s, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "shard-00001.kshard: sha256 mismatch");
    KT_CHECK(s == NULL);
    KT_OK(kl_shardset_open(dir, 0, &s, &e), &e);
    KT_EQ_INT(kl_shardset_check(s, 5, &e), KL_ECHECKSUM);
    kl_shardset_free(s);
    flip_byte(path, 4096 * 2 + 3);
    /* a flipped byte in the header */
    flip_byte(path, 17);
    KT_EQ_INT(kl_shardset_open(dir, 0, &s, &e), KL_ECHECKSUM);
    KT_CONTAINS(e.msg, "header CRC");
    flip_byte(path, 17);
    /* truncated */
    KT_CHECK(truncate(path, 5000) == 0);
    KT_EQ_INT(kl_shardset_open(dir, 0, &s, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "truncated or replaced");
    /* a missing shard */
    unlink(path);
    KT_EQ_INT(kl_shardset_open(dir, 0, &s, &e), KL_ENOTFOUND);
}

/* in-memory variants: bad index entries and manifests */
KL_TEST(shard_bad_index_and_manifest) {
    kl_err e = {0};
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/mem", kt_tmpdir());
    KT_OK(make_set(dir, 1, 4, &e), &e);
    char *man, *sh;
    size_t mlen, slen;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    KT_OK(kl_read_file(path, &man, &mlen, &e), &e);
    snprintf(path, sizeof path, "%s/shard-00000.kshard", dir);
    KT_OK(kl_read_file(path, &sh, &slen, &e), &e);
    const void *bufs[1] = {sh};
    kl_shardset *s;
    KT_OK(kl_shardset_open_mem(man, mlen, bufs, &slen, 1, 1, &s, &e), &e);
    KT_EQ_INT(kl_shardset_count(s), 4);
    kl_shardset_free(s);
    /* index entry 2: offset pointing past the records (index is at the header's offset 24) */
    uint64_t index_off = 0;
    memcpy(&index_off, sh + 24, 8);
    char *bad = malloc(slen);
    memcpy(bad, sh, slen);
    uint64_t big = (uint64_t)slen;
    memcpy(bad + index_off + 2 * 32, &big, 8);
    bufs[0] = bad;
    KT_EQ_INT(kl_shardset_open_mem(man, mlen, bufs, &slen, 1, 0, &s, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "record 2");
    /* a label outside the classes */
    memcpy(bad, sh, slen);
    int32_t lab = 7;
    memcpy(bad + index_off + 1 * 32 + 16, &lab, 4);
    KT_EQ_INT(kl_shardset_open_mem(man, mlen, bufs, &slen, 1, 0, &s, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "label 7");
    /* a key offset outside the key table */
    memcpy(bad, sh, slen);
    uint32_t koff = 1u << 30;
    memcpy(bad + index_off + 3 * 32 + 20, &koff, 4);
    KT_EQ_INT(kl_shardset_open_mem(man, mlen, bufs, &slen, 1, 0, &s, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "key out of bounds");
    /* manifests */
    static const char *bad_manifests[] = {
        "{}", "[1]", "{\"format\":\"keel-shards\",\"version\":2}",
        "{\"format\":\"keel-shards\",\"version\":1,\"records\":4,\"classes\":[],\"class_counts\":[],\"shards\":[]}",
        "{\"format\":\"keel-shards\",\"version\":1,\"records\":4,\"classes\":[\"a\"],\"class_counts\":[3],\"shards\":[]}",
        "{\"format\":\"keel-shards\",\"version\":1,\"records\":0,\"classes\":[\"a\"],\"class_counts\":[0],"
        "\"shards\":[{\"file\":\"../x\",\"records\":0,\"bytes\":0,\"sha256\":\"" 
        "0000000000000000000000000000000000000000000000000000000000000000\"}]}",
        "{\"format\":\"keel-shards\",",
    };
    for (size_t i = 0; i < sizeof bad_manifests / sizeof *bad_manifests; i++) {
        int rc = kl_shardset_open_mem(bad_manifests[i], strlen(bad_manifests[i]), bufs, &slen, 1, 0, &s, &e);
        KT_CHECKF(rc == KL_EPARSE || rc == KL_EUNSUPPORTED, "manifest %zu: rc %d", i, rc);
        KT_CHECK(s == NULL);
    }
    free(bad); kl_mem_free(man); kl_mem_free(sh);
}
