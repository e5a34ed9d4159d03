/* keel shard: image shard files (.kshard) and the shard set they form.
 * A shard set is a folder with manifest.json (classes, record counts, a
 * sha256 per shard) and shard files: a 64-byte header, records aligned to
 * 4 KiB pages, an index and a key table. Shards are read through mmap; a
 * record is a pointer into the mapping (no copy until decode). Everything
 * is validated on open, so a corrupt shard is an error, never a crash.
 * The byte layout is in docs/images.md. Written by `keel pack`. */
#ifndef KEEL_SHARD_H
#define KEEL_SHARD_H

#include <keel/core.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_shardset kl_shardset;

typedef struct {
    const uint8_t *data; size_t len; /* encoded bytes inside the mmap, valid until free */
    int32_t label;                   /* 0..num_classes-1 */
    const char *key;                 /* source path relative to the packed folder */
} kl_record;

/* Opens DIR/manifest.json and maps every shard it lists; checks every header
 * and index entry against the file. verify = 1 also checks each shard's
 * sha256 against the manifest (KL_ECHECKSUM naming the shard). A folder
 * without manifest.json (e.g. an unfinished pack) is KL_ENOTFOUND. */
int kl_shardset_open(const char *dir, int verify, kl_shardset **out, kl_err *e);
void kl_shardset_free(kl_shardset *s);
int64_t kl_shardset_count(const kl_shardset *s);
int kl_shardset_num_classes(const kl_shardset *s);
const char *kl_shardset_class_name(const kl_shardset *s, int k);  /* NULL when out of range */
/* hex sha256 of the manifest: dataset identity, used to refuse a resume
 * position from another dataset. */
const char *kl_shardset_id(const kl_shardset *s);
/* Thread-safe, no copy, bounds-checked (KL_ERANGE). */
int kl_shardset_get(const kl_shardset *s, int64_t i, kl_record *out, kl_err *e);

/* ---- extras ---- */
int kl_shardset_num_shards(const kl_shardset *s);
/* Records of class k (from the manifest). */
int64_t kl_shardset_class_count(const kl_shardset *s, int k);
/* Checks record i's CRC-32 (stored in the index) against its bytes. */
int kl_shardset_check(const kl_shardset *s, int64_t i, kl_err *e);
/* Opens a shard set from memory: the manifest text and the shard files'
 * bytes in manifest order (borrowed; must outlive the set). For tests and
 * the fuzzer. */
int kl_shardset_open_mem(const char *manifest, size_t manifest_len, const void *const *shards, const size_t *sizes,
                         size_t n_shards, int verify, kl_shardset **out, kl_err *e);

/* ---- writing one shard file (used by keel pack) ---- */
#define KL_SHARD_MAGIC "KEELSHRD"
#define KL_SHARD_VERSION 1
#define KL_SHARD_PAGE 4096
#define KL_SHARD_HEADER_SIZE 64
#define KL_SHARD_ENTRY_SIZE 32

typedef struct kl_shard_writer kl_shard_writer;
/* Starts PATH as a temporary file in the same folder (atomic: nothing is at
 * PATH until finish). */
int kl_shard_writer_open(const char *path, kl_shard_writer **out, kl_err *e);
int kl_shard_writer_add(kl_shard_writer *w, const void *data, size_t len, int32_t label, const char *key, kl_err *e);
int64_t kl_shard_writer_count(const kl_shard_writer *w);
/* Size the file would have if finished now. */
uint64_t kl_shard_writer_size(const kl_shard_writer *w);
/* Writes index, keys and header, fsyncs and renames into place; frees w.
 * sha256_hex (65 bytes) gets the file's digest, bytes its size (may be NULL). */
int kl_shard_writer_finish(kl_shard_writer *w, char *sha256_hex, uint64_t *bytes, kl_err *e);
void kl_shard_writer_abort(kl_shard_writer *w);   /* removes the temp file; NULL no-op */

/* ---- packing a folder of images into a shard set (keel pack) ---- */
typedef struct {
    const char *src_dir;      /* folder of images */
    const char *out_dir;      /* shard set folder */
    const char *labels_path;  /* CSV or Parquet of path,label[,extra]; NULL: labels from sub-folder names */
    uint64_t shard_bytes;     /* target shard size (default 256 MiB) */
    int on_error_fail;        /* 1: a bad image fails the pack; 0: it is skipped and reported */
    uint64_t max_pixels;      /* pixel cap (0 = the decoder's default, 100 Mpx) */
    int force;                /* replace an existing shard set in out_dir */
    int progress;
} kl_pack_opts;

typedef struct { char *path; char *reason; } kl_pack_issue;   /* a skipped (or failing) file */

typedef struct {
    int64_t files, packed, skipped;
    int64_t shards, shards_reused;   /* reused: finished shards of an interrupted pack, verified by sha256 */
    int reused;                      /* 1: the same pack was already complete (nothing done) */
    uint64_t bytes_in, bytes_out;
    double seconds, cpu_seconds;
    int num_classes;
    char id[65];                     /* the shard set id (sha256 of the manifest) */
    kl_pack_issue *issues;           /* every skipped file, in path order */
    size_t n_issues;
} kl_pack_result;

void kl_pack_opts_default(kl_pack_opts *o);
/* Validates every image (header + full decode) in parallel on the default
 * pool and writes shards in path order (deterministic for any thread count),
 * then the manifest, last. Resumable: an interrupted pack continues after its
 * last finished shard (verified by sha256). On --on-error fail, the first bad
 * file (in path order) is the error and nothing is published. */
int kl_pack(const kl_pack_opts *o, kl_pack_result *res, kl_err *e);
void kl_pack_result_free(kl_pack_result *r);

#ifdef __cplusplus
}
#endif
#endif
