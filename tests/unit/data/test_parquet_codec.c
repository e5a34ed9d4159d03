/* Unit tests of the Parquet page codecs that no vendored file exercises:
 * legacy LZ4 (codec 5) in Hadoop framing (several frames, each an
 * uncompressed and a compressed big-endian length before a raw block) and as
 * a raw block (the fallback), and frames that lie about their lengths. */
#include <lz4.h>
#include <stdlib.h>

#include "../harness.h"
#include "data/parquet_int.h"

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

KL_TEST(parquet_codec_lz4_hadoop_frames) {
    enum { N = 5000, H = 2600 };
    uint8_t src[N], comp[2 * N + 64], out[N];
    for (int i = 0; i < N; i++) src[i] = (uint8_t)(i % 251 < 100 ? 'a' : i * 7);
    /* two frames: [0, H) and [H, N) */
    size_t o = 0;
    for (int f = 0; f < 2; f++) {
        int a = f ? H : 0, len = f ? N - H : H;
        int cl = LZ4_compress_default((const char *)src + a, (char *)comp + o + 8, len, (int)sizeof comp - (int)o - 8);
        KT_CHECK(cl > 0);
        be32(comp + o, (uint32_t)len);
        be32(comp + o + 4, (uint32_t)cl);
        o += 8 + (size_t)cl;
    }
    kl_err e = {0};
    memset(out, 0, sizeof out);
    KT_OK(kl__pq_decompress(CODEC_LZ4, comp, o, out, N, &e), &e);
    KT_CHECK(!memcmp(out, src, N));
    /* a raw block (no framing) is read too */
    int rl = LZ4_compress_default((const char *)src, (char *)comp, N, (int)sizeof comp);
    KT_CHECK(rl > 0);
    memset(out, 0, sizeof out);
    KT_OK(kl__pq_decompress(CODEC_LZ4, comp, (size_t)rl, out, N, &e), &e);
    KT_CHECK(!memcmp(out, src, N));
    /* a frame claiming more than the page holds: a clean error */
    be32(comp, N + 1);
    be32(comp + 4, 5);
    KT_CHECK(kl__pq_decompress(CODEC_LZ4, comp, 13, out, N, &e) == KL_EPARSE);
    KT_CHECK(kl__pq_codec_unsupported(CODEC_LZ4) == NULL && kl__pq_codec_unsupported(CODEC_BROTLI) == NULL);
    KT_CHECK(kl__pq_codec_unsupported(CODEC_LZO) != NULL && kl__pq_codec_unsupported(99) != NULL);
}
