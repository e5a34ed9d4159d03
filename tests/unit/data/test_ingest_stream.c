/* Unit tests of compressed ingest sources: .gz/.zst are streamed through the
 * chunk pipeline (not buffered whole), decompression bombs are refused by
 * the size and expansion caps with bounded memory, and a compressed source
 * (multi-member gzip, multi-frame zstd, records and UTF-8 split across
 * reads) gives the same Parquet files as the plain one. */
#include "../harness.h"
#include "../kt_ingest.h"

#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

static const char *SCHEMA1 = "columns:\n  - {name: a, type: int64, nullable: false}\n";

/* One gzip member (deflate with a gzip wrapper) of buf. */
static int gz_member(const char *buf, size_t n, kl_buf *out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    size_t cap = deflateBound(&z, n);
    char *o = malloc(cap);
    z.next_in = (Bytef *)buf;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)o;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    kl_buf_append(out, o, cap - z.avail_out);
    deflateEnd(&z);
    free(o);
    return r == Z_STREAM_END ? 0 : -1;
}

static int zst_frame(const char *buf, size_t n, kl_buf *out) {
    size_t cap = ZSTD_compressBound(n);
    char *o = malloc(cap);
    size_t r = ZSTD_compress(o, cap, buf, n, 3);
    if (!ZSTD_isError(r)) kl_buf_append(out, o, r);
    free(o);
    return ZSTD_isError(r) ? -1 : 0;
}

/* A bomb: a header member/frame, then `copies` members/frames of 8 MiB of
 * "1234567890123456789\n" lines (compressed once, written many times). */
static int write_bomb(const char *path, int zst, int copies, kl_err *e) {
    size_t n = (size_t)8 << 20;
    const char *line = "1234567890123456789\n";
    char *body = malloc(n);
    for (size_t i = 0; i < n; i++) body[i] = line[i % 20];
    n -= n % 20;
    kl_buf hdr, one, all;
    kl_buf_init(&hdr);
    kl_buf_init(&one);
    kl_buf_init(&all);
    int rc = zst ? zst_frame("a\n", 2, &hdr) : gz_member("a\n", 2, &hdr);
    if (!rc) rc = zst ? zst_frame(body, n, &one) : gz_member(body, n, &one);
    free(body);
    kl_buf_append(&all, hdr.data, hdr.len);
    for (int i = 0; i < copies && !rc; i++) kl_buf_append(&all, one.data, one.len);
    if (!rc) rc = kl_write_file_atomic(path, all.data, all.len, e);
    kl_buf_free(&hdr);
    kl_buf_free(&one);
    kl_buf_free(&all);
    return rc;
}

static void opts_for(kl_ingest_opts *o, const char **src, const char *schema, const char *out) {
    kt_ingest_opts(o, src, schema, out);
    o->chunk_bytes = 256 << 10;
}

/* A 1 GiB zstd bomb (about 100 KB on disk) against a 64 MiB size cap: refused
 * naming the file and the cap, and the dataset memory peak stays below the
 * cap (the stream is never held whole). */
KL_TEST(ingest_zst_bomb_size_cap) {
    kl_err e = {0};
    char schema[512], bomb[512];
    snprintf(schema, sizeof schema, "%s", kt_path("s1.yaml"));
    KT_OK(kl_write_file_atomic(schema, SCHEMA1, strlen(SCHEMA1), &e), &e);
    snprintf(bomb, sizeof bomb, "%s", kt_path("bomb.csv.zst"));
    KT_OK(write_bomb(bomb, 1, 128, &e), &e);
    const char *src[] = {bomb};
    kl_ingest_opts o;
    opts_for(&o, src, schema, kt_path("dbomb"));
    o.max_decompressed_bytes = (uint64_t)64 << 20;
    o.max_expansion = 1e9;
    uint64_t old_budget = kl_mem_get_tag_budget(KL_TAG_DATASET);
    kl_mem_set_tag_budget(KL_TAG_DATASET, (uint64_t)512 << 20); /* the old code would take 2 GiB */
    kl_mem_reset_peaks();
    kl_ingest_result r;
    int rc = kl_ingest(&o, &r, &e);
    kl_mem_stats st;
    kl_mem_stats_get(KL_TAG_DATASET, &st);
    kl_mem_set_tag_budget(KL_TAG_DATASET, old_budget);
    KT_CHECKF(rc != 0, "the bomb was ingested");
    KT_CONTAINS(kl_err_what(&e), "bomb.csv.zst");
    KT_CONTAINS(kl_err_what(&e), "--max-decompressed");
    KT_CONTAINS(kl_err_what(&e), "64.0 MiB");
    KT_CHECKF(st.peak_allocated < ((uint64_t)64 << 20), "dataset memory peak %llu bytes", (unsigned long long)st.peak_allocated);
    KT_CHECK(!kl_path_exists(kt_path("dbomb/versions")));
}

/* A multi-member gzip bomb (~1000x) against an expansion cap of 100x. */
KL_TEST(ingest_gz_bomb_expansion_cap) {
    kl_err e = {0};
    char schema[512], bomb[512];
    snprintf(schema, sizeof schema, "%s", kt_path("s1.yaml"));
    KT_OK(kl_write_file_atomic(schema, SCHEMA1, strlen(SCHEMA1), &e), &e);
    snprintf(bomb, sizeof bomb, "%s", kt_path("bomb.csv.gz"));
    KT_OK(write_bomb(bomb, 0, 32, &e), &e);
    const char *src[] = {bomb};
    kl_ingest_opts o;
    opts_for(&o, src, schema, kt_path("dgzb"));
    o.max_expansion = 100;
    kl_mem_reset_peaks();
    kl_ingest_result r;
    int rc = kl_ingest(&o, &r, &e);
    kl_mem_stats st;
    kl_mem_stats_get(KL_TAG_DATASET, &st);
    KT_CHECKF(rc != 0, "the bomb was ingested");
    KT_CONTAINS(kl_err_what(&e), "bomb.csv.gz");
    KT_CONTAINS(kl_err_what(&e), "--max-expansion");
    KT_CHECKF(st.peak_allocated < ((uint64_t)64 << 20), "dataset memory peak %llu bytes", (unsigned long long)st.peak_allocated);
}

static const char *SCHEMA3 = "columns:\n"
                             "  - {name: id, type: int64, nullable: false}\n"
                             "  - {name: name, type: string}\n"
                             "  - {name: note, type: string}\n";
static const char *SCHEMA3U = "columns:\n"
                              "  - {name: id, type: int64, nullable: false, unique: true}\n"
                              "  - {name: name, type: string}\n"
                              "  - {name: note, type: string}\n";

/* Ingests src into out; returns the sha256 of each part file joined by ' '. */
static int ingest_hashes(const char *src, const char *schema, const char *out, char *hashes, size_t hn,
                         int64_t *rows, kl_err *e) {
    const char *srcs[] = {src};
    kl_ingest_opts o;
    opts_for(&o, srcs, schema, out);
    o.chunk_bytes = 16 << 10;
    o.max_reject_ratio = 1;
    kl_ingest_result r;
    int rc = kl_ingest(&o, &r, e);
    if (rc) return rc;
    *rows = r.rows_accepted * 1000000 + r.rows_rejected;
    char **files = NULL, *manifest = NULL;
    size_t nf = 0;
    if ((rc = kl_dataset_resolve(out, &files, &nf, &manifest, e))) return rc;
    hashes[0] = 0;
    for (size_t i = 0; i < nf && !rc; i++) {
        char h[65];
        rc = kl_sha256_file_hex(files[i], h, e);
        size_t l = strlen(hashes);
        snprintf(hashes + l, hn - l, "%s ", h);
    }
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    free(manifest);
    return rc;
}

/* The same CSV plain, as 3 gzip members and as 3 zstd frames (cut at bytes
 * that are not record boundaries, inside multi-byte UTF-8), streaming and
 * non-streaming (unique) paths: the same rows and the same Parquet bytes. */
KL_TEST(ingest_compressed_same_as_plain) {
    kl_err e = {0};
    kl_buf csv;
    kl_buf_init(&csv);
    kl_buf_puts(&csv, "id,name,note\n");
    int64_t nbad = 0;
    for (int i = 0; i < 30000; i++) {
        if (i % 7 == 3) kl_buf_printf(&csv, "%d,h\xc3\xa9llo-\xe6\x97\xa5\xe6\x9c\xac-%d,\"two\nlines, \"\"q\"\"\"\n", i, i % 50);
        else if (i % 1000 == 999) { kl_buf_printf(&csv, "x%d,bad,row\n", i); nbad++; } /* a reject */
        else kl_buf_printf(&csv, "%d,n\xe2\x9c\x93%d,plain %d\n", i, i % 13, i);
    }
    char plain[512], gz[512], zst[512], s3[512], s3u[512];
    snprintf(plain, sizeof plain, "%s", kt_path("same.csv"));
    KT_OK(kl_write_file_atomic(plain, csv.data, csv.len, &e), &e);
    /* cut points: inside a multi-byte character and mid-record */
    size_t cut1 = 0, cut2 = 0;
    for (size_t i = 100000; i < csv.len; i++)
        if ((unsigned char)csv.data[i] == 0xe6) { cut1 = i + 1; break; }
    cut2 = csv.len / 2 + 7;
    KT_CHECK(cut1 > 0 && cut1 < cut2);
    kl_buf g, z;
    kl_buf_init(&g);
    kl_buf_init(&z);
    size_t cuts[4] = {0, cut1, cut2, csv.len};
    for (int k = 0; k < 3; k++) {
        KT_CHECK(gz_member(csv.data + cuts[k], cuts[k + 1] - cuts[k], &g) == 0);
        KT_CHECK(zst_frame(csv.data + cuts[k], cuts[k + 1] - cuts[k], &z) == 0);
    }
    snprintf(gz, sizeof gz, "%s", kt_path("same.csv.gz"));
    snprintf(zst, sizeof zst, "%s", kt_path("same.csv.zst"));
    KT_OK(kl_write_file_atomic(gz, g.data, g.len, &e), &e);
    KT_OK(kl_write_file_atomic(zst, z.data, z.len, &e), &e);
    kl_buf_free(&g);
    kl_buf_free(&z);
    kl_buf_free(&csv);
    snprintf(s3, sizeof s3, "%s", kt_path("s3.yaml"));
    snprintf(s3u, sizeof s3u, "%s", kt_path("s3u.yaml"));
    KT_OK(kl_write_file_atomic(s3, SCHEMA3, strlen(SCHEMA3), &e), &e);
    KT_OK(kl_write_file_atomic(s3u, SCHEMA3U, strlen(SCHEMA3U), &e), &e);
    const char *schemas[] = {s3, s3u};
    for (int si = 0; si < 2; si++) {
        static char hp[8192], hg[8192], hz[8192];
        int64_t rp, rg, rz;
        char d1[64], d2[64], d3[64];
        snprintf(d1, sizeof d1, "dp%d", si);
        snprintf(d2, sizeof d2, "dg%d", si);
        snprintf(d3, sizeof d3, "dz%d", si);
        char o1[512], o2[512], o3[512];
        snprintf(o1, sizeof o1, "%s", kt_path(d1));
        snprintf(o2, sizeof o2, "%s", kt_path(d2));
        snprintf(o3, sizeof o3, "%s", kt_path(d3));
        KT_OK(ingest_hashes(plain, schemas[si], o1, hp, sizeof hp, &rp, &e), &e);
        KT_OK(ingest_hashes(gz, schemas[si], o2, hg, sizeof hg, &rg, &e), &e);
        KT_OK(ingest_hashes(zst, schemas[si], o3, hz, sizeof hz, &rz, &e), &e);
        KT_EQ_INT(rp, (30000 - nbad) * 1000000 + nbad);
        KT_EQ_INT(rg, rp);
        KT_EQ_INT(rz, rp);
        KT_CHECK(strlen(hp) > 64);
        KT_EQ_STR(hg, hp);
        KT_EQ_STR(hz, hp);
    }
}
