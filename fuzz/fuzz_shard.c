/* libFuzzer target of the shard reader. The first byte picks the mode:
 * even: the rest is a shard file; the fuzzer builds a manifest that agrees
 * with the header's record count and size (so the index validation is
 * reached; with bit 1 set it also fixes the header CRC, so that mutated
 * header fields get past it), opens it with and without sha256 verification, reads and
 * CRC-checks every record and decodes the first few (JPEG/PNG decoder);
 * odd: the rest is manifest.json text, opened over no shards.
 * Any crash, leak or sanitizer report is a finding.
 * Run: make fuzz FUZZ=fuzz_shard FUZZ_SECONDS=300 (seed corpus: fuzz/corpus/fuzz_shard). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "keel/image.h"
#include "keel/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    kl_err e = {0};
    kl_shardset *s = NULL;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        if (kl_shardset_open_mem((const char *)body, n, NULL, NULL, 0, 1, &s, &e) == 0) kl_shardset_free(s);
        return 0;
    }
    uint8_t *copy = NULL;
    if ((data[0] & 2) && n >= 64) { /* fix the header CRC */
        copy = malloc(n);
        memcpy(copy, body, n);
        uint32_t c = (uint32_t)crc32(0L, copy, 60);
        for (int i = 0; i < 4; i++) copy[60 + i] = (uint8_t)(c >> (8 * i));
        body = copy;
    }
    unsigned long long records = 0;
    if (n >= 24) for (int i = 0; i < 8; i++) records |= (unsigned long long)body[16 + i] << (8 * i);
    if (records > (1ull << 40)) records = 1;
    char hex[65], man[1024];
    kl_sha256_buf_hex(body, n, hex);
    snprintf(man, sizeof man,
             "{\"format\":\"keel-shards\",\"version\":1,\"records\":%llu,\"classes\":[\"a\",\"b\",\"c\"],"
             "\"class_counts\":[%llu,0,0],\"shards\":[{\"file\":\"s.kshard\",\"records\":%llu,\"bytes\":%zu,\"sha256\":\"%s\"}]}",
             records, records, records, n, hex);
    const void *bufs[1] = {body};
    for (int verify = 0; verify < 2; verify++) {
        if (kl_shardset_open_mem(man, strlen(man), bufs, &n, 1, verify, &s, &e) != 0) continue;
        int64_t cnt = kl_shardset_count(s);
        for (int64_t i = 0; i < cnt && i < 4096; i++) {
            kl_record r;
            if (kl_shardset_get(s, i, &r, &e) != 0) break;
            kl_shardset_check(s, i, &e);
            volatile size_t kl = strlen(r.key);
            (void)kl;
            if (i < 4 && !verify) {
                kl_image img;
                if (kl_image_decode(r.data, r.len, r.key, 32, 32, 1 << 22, &img, &e) == 0) kl_image_release(&img);
            }
        }
        kl_record r;
        kl_shardset_get(s, cnt, &r, &e);
        kl_shardset_free(s);
    }
    free(copy);
    return 0;
}
