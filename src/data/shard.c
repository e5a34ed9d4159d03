/* Image shard files (.kshard) and shard sets: the writer used by `keel pack`
 * and the mmap reader used by the data loader. Layout (little-endian; see
 * docs/images.md):
 *   [0, 64)          header: magic "KEELSHRD", version, header size, record
 *                    count, index/key offsets, file size, page size, CRC-32
 *   [64, 4096)       zero
 *   [4096, ...)      records, each starting on a 4 KiB page, zero padding
 *   index_offset     n entries of 32 bytes: offset u64, length u64,
 *                    label i32, key offset u32, key length u32, CRC-32 u32
 *   keys_offset      keys, each NUL-terminated; file ends here
 * Every field is checked on open against the file size and the manifest. */
#include <keel/shard.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ================================================================== *
 * Little-endian helpers
 * ================================================================== */

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static uint32_t crc(const void *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    const uint8_t *b = p;
    while (n > 0) { /* zlib takes uInt lengths */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k; n -= k;
    }
    return (uint32_t)c;
}

/* ================================================================== *
 * Writer
 * ================================================================== */

struct kl_shard_writer {
    kl_afile *f;
    char *path;
    uint64_t off;            /* end of the last record */
    uint8_t *index;          /* n entries */
    size_t n, cap;
    kl_buf keys;
};

static const uint8_t zeros[KL_SHARD_PAGE];

int kl_shard_writer_open(const char *path, kl_shard_writer **out, kl_err *e) {
    *out = NULL;
    kl_shard_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) { free(w); return kl_err_set(e, KL_ENOMEM, "%s: out of memory", path); }
    kl_buf_init(&w->keys);
    int rc = kl_afile_open(path, &w->f, e);
    if (rc == KL_OK) rc = kl_afile_write(w->f, zeros, KL_SHARD_PAGE, e); /* header page, written at finish */
    if (rc) { kl_shard_writer_abort(w); return rc; }
    w->off = KL_SHARD_PAGE;
    *out = w;
    return KL_OK;
}

int64_t kl_shard_writer_count(const kl_shard_writer *w) { return (int64_t)w->n; }

uint64_t kl_shard_writer_size(const kl_shard_writer *w) {
    return ((w->off + 7) & ~(uint64_t)7) + (uint64_t)w->n * KL_SHARD_ENTRY_SIZE + w->keys.len;
}

int kl_shard_writer_add(kl_shard_writer *w, const void *data, size_t len, int32_t label, const char *key, kl_err *e) {
    size_t klen = strlen(key);
    if (label < 0) return kl_err_set(e, KL_EINVAL, "%s: negative label %d for %s", w->path, label, key);
    if (w->keys.len + klen + 1 > 0xFFFFFFFFu) return kl_err_set(e, KL_ERANGE, "%s: key table over 4 GiB", w->path);
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 256;
        uint8_t *ni = realloc(w->index, nc * KL_SHARD_ENTRY_SIZE);
        if (!ni) return kl_err_set(e, KL_ENOMEM, "%s: out of memory", w->path);
        w->index = ni; w->cap = nc;
    }
    uint64_t at = (w->off + KL_SHARD_PAGE - 1) & ~(uint64_t)(KL_SHARD_PAGE - 1);
    int rc = kl_afile_write(w->f, zeros, (size_t)(at - w->off), e);
    if (rc == KL_OK) rc = kl_afile_write(w->f, data, len, e);
    if (rc) return rc;
    uint8_t *ent = w->index + w->n * KL_SHARD_ENTRY_SIZE;
    put64(ent, at);
    put64(ent + 8, len);
    put32(ent + 16, (uint32_t)label);
    put32(ent + 20, (uint32_t)w->keys.len);
    put32(ent + 24, (uint32_t)klen);
    put32(ent + 28, crc(data, len));
    if (kl_buf_append(&w->keys, key, klen + 1) != 0) return kl_err_set(e, KL_ENOMEM, "%s: out of memory", w->path);
    w->n++;
    w->off = at + len;
    return KL_OK;
}

int kl_shard_writer_finish(kl_shard_writer *w, char *sha256_hex, uint64_t *bytes, kl_err *e) {
    uint64_t index_off = (w->off + 7) & ~(uint64_t)7;
    uint64_t keys_off = index_off + (uint64_t)w->n * KL_SHARD_ENTRY_SIZE;
    uint64_t size = keys_off + w->keys.len;
    int rc = kl_afile_write(w->f, zeros, (size_t)(index_off - w->off), e);
    if (rc == KL_OK) rc = kl_afile_write(w->f, w->index, w->n * KL_SHARD_ENTRY_SIZE, e);
    if (rc == KL_OK) rc = kl_afile_write(w->f, w->keys.data ? w->keys.data : "", w->keys.len, e);
    uint8_t h[KL_SHARD_HEADER_SIZE] = {0};
    memcpy(h, KL_SHARD_MAGIC, 8);
    put32(h + 8, KL_SHARD_VERSION);
    put32(h + 12, KL_SHARD_HEADER_SIZE);
    put64(h + 16, w->n);
    put64(h + 24, index_off);
    put64(h + 32, keys_off);
    put64(h + 40, w->keys.len);
    put64(h + 48, size);
    put32(h + 56, KL_SHARD_PAGE);
    put32(h + 60, crc(h, 60));
    FILE *fs = kl_afile_stream(w->f);
    if (rc == KL_OK && (fflush(fs) != 0 || fseek(fs, 0, SEEK_SET) != 0))
        rc = kl_err_set(e, -errno, "%s: seek: %s", w->path, strerror(errno));
    if (rc == KL_OK) rc = kl_afile_write(w->f, h, sizeof h, e);
    if (rc == KL_OK) {
        rc = kl_afile_commit(w->f, e);
        w->f = NULL;
    }
    if (rc == KL_OK && sha256_hex) rc = kl_sha256_file_hex(w->path, sha256_hex, e);
    if (rc == KL_OK && bytes) *bytes = size;
    kl_shard_writer_abort(w);
    return rc;
}

void kl_shard_writer_abort(kl_shard_writer *w) {
    if (!w) return;
    kl_afile_abort(w->f);
    free(w->index);
    kl_buf_free(&w->keys);
    free(w->path);
    free(w);
}

/* ================================================================== *
 * Reader: one shard
 * ================================================================== */

typedef struct {
    char *file;              /* name in the folder */
    const uint8_t *base;     /* mapping (or borrowed memory) */
    size_t size;
    int mapped;
    int64_t n, first;        /* records, global index of the first */
    const uint8_t *index, *keys;
    uint64_t index_off, keys_size;
    char sha256[65]; /* from the manifest's files */
} shard;

struct kl_shardset {
    char *dir;
    shard *sh;
    size_t nsh;
    int64_t count;
    int nclass;
    char **classes;
    int64_t *class_counts;
    char id[65];
};

/* Validates a shard's header and every index entry. */
static int shard_parse(shard *s, int nclass, const char *what, kl_err *e) {
    const uint8_t *b = s->base;
    size_t size = s->size;
    if (size < KL_SHARD_PAGE)
        return kl_err_set(e, KL_EPARSE, "%s: truncated shard (%zu bytes, less than the %d-byte header page)", what, size,
                          KL_SHARD_PAGE);
    if (memcmp(b, KL_SHARD_MAGIC, 8) != 0) return kl_err_set(e, KL_EPARSE, "%s: not a keel shard (bad magic)", what);
    uint32_t ver = get32(b + 8);
    if (ver != KL_SHARD_VERSION)
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: shard version %u (this keel reads version %d)", what, ver, KL_SHARD_VERSION);
    if (get32(b + 60) != crc(b, 60)) return kl_err_set(e, KL_ECHECKSUM, "%s: shard header CRC mismatch (corrupt header)", what);
    uint64_t n = get64(b + 16), index_off = get64(b + 24), keys_off = get64(b + 32), keys_size = get64(b + 40),
             fsize = get64(b + 48);
    if (get32(b + 12) != KL_SHARD_HEADER_SIZE || get32(b + 56) != KL_SHARD_PAGE)
        return kl_err_set(e, KL_EPARSE, "%s: bad header size or page size", what);
    if (fsize != size)
        return kl_err_set(e, KL_EPARSE, "%s: truncated or extended shard: header says %llu bytes, file has %zu", what,
                          (unsigned long long)fsize, size);
    if (index_off < KL_SHARD_PAGE || index_off % 8 || index_off > size || n > (size - index_off) / KL_SHARD_ENTRY_SIZE ||
        keys_off != index_off + n * KL_SHARD_ENTRY_SIZE || keys_size > size - keys_off || keys_off + keys_size != size)
        return kl_err_set(e, KL_EPARSE, "%s: index/key table out of bounds (index at %llu, %llu records, keys at %llu+%llu, file %zu)",
                          what, (unsigned long long)index_off, (unsigned long long)n, (unsigned long long)keys_off,
                          (unsigned long long)keys_size, size);
    if (n > 0 && (keys_size == 0 || b[size - 1] != 0))
        return kl_err_set(e, KL_EPARSE, "%s: key table not terminated", what);
    s->n = (int64_t)n;
    s->index = b + index_off;
    s->keys = b + keys_off;
    s->index_off = index_off;
    s->keys_size = keys_size;
    uint64_t prev_end = KL_SHARD_PAGE;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *ent = s->index + i * KL_SHARD_ENTRY_SIZE;
        uint64_t off = get64(ent), len = get64(ent + 8);
        int32_t label = (int32_t)get32(ent + 16);
        uint64_t koff = get32(ent + 20), klen = get32(ent + 24);
        if (off % KL_SHARD_PAGE || off < prev_end || off > index_off || len > index_off - off)
            return kl_err_set(e, KL_EPARSE, "%s: record %llu: bytes [%llu, +%llu) out of bounds or misaligned", what,
                              (unsigned long long)i, (unsigned long long)off, (unsigned long long)len);
        if (label < 0 || label >= nclass)
            return kl_err_set(e, KL_EPARSE, "%s: record %llu: label %d not in 0..%d", what, (unsigned long long)i, label,
                              nclass - 1);
        if (koff >= keys_size || klen >= keys_size - koff || s->keys[koff + klen] != 0 ||
            memchr(s->keys + koff, 0, klen) != NULL)
            return kl_err_set(e, KL_EPARSE, "%s: record %llu: key out of bounds", what, (unsigned long long)i);
        prev_end = off + len;
    }
    return KL_OK;
}

/* ================================================================== *
 * Reader: the manifest and the set
 * ================================================================== */

void kl_shardset_free(kl_shardset *s) {
    if (!s) return;
    for (size_t i = 0; i < s->nsh; i++) {
        if (s->sh[i].mapped && s->sh[i].base) munmap((void *)s->sh[i].base, s->sh[i].size);
        free(s->sh[i].file);
    }
    for (int k = 0; k < s->nclass; k++) free(s->classes[k]);
    free(s->classes);
    free(s->class_counts);
    free(s->sh);
    free(s->dir);
    free(s);
}

static int64_t jint(const cJSON *o, const char *key, int64_t lo, int64_t hi, const char *what, int *rc, kl_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (*rc) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi) {
        *rc = kl_err_set(e, KL_EPARSE, "%s: \"%s\" must be an integer in %lld..%lld", what, key, (long long)lo, (long long)hi);
        return 0;
    }
    return (int64_t)v->valuedouble;
}

static int plain_name(const char *f) {
    return f[0] && f[0] != '.' && !strchr(f, '/') && !strchr(f, '\\') && strlen(f) < 256;
}

/* Parses the manifest into s (classes, shard names, counts); shards unmapped. */
static int manifest_parse(kl_shardset *s, const char *text, size_t len, const char *what, cJSON **out_j, kl_err *e) {
    cJSON *j = NULL;
    int rc = kl_json_parse(text, len, what, (void **)&j, e);
    if (rc) return rc;
    *out_j = j;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (!cJSON_IsObject(j) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "keel-shards") != 0)
        return kl_err_set(e, KL_EPARSE, "%s: not a keel shard manifest (\"format\" is not \"keel-shards\")", what);
    int64_t ver = jint(j, "version", 0, 1 << 20, what, &rc, e);
    if (rc) return rc;
    if (ver != KL_SHARD_VERSION)
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: manifest version %lld (this keel reads %d)", what, (long long)ver, KL_SHARD_VERSION);
    s->count = jint(j, "records", 0, INT64_C(1) << 50, what, &rc, e);
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(j, "classes");
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(j, "class_counts");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shards");
    if (rc) return rc;
    if (!cJSON_IsArray(cl) || cJSON_GetArraySize(cl) < 1 || cJSON_GetArraySize(cl) > 1000000)
        return kl_err_set(e, KL_EPARSE, "%s: \"classes\" must be a non-empty array of names", what);
    if (!cJSON_IsArray(cc) || cJSON_GetArraySize(cc) != cJSON_GetArraySize(cl))
        return kl_err_set(e, KL_EPARSE, "%s: \"class_counts\" must have one count per class", what);
    if (!cJSON_IsArray(sh)) return kl_err_set(e, KL_EPARSE, "%s: \"shards\" must be an array", what);
    int nc = cJSON_GetArraySize(cl);
    s->classes = calloc((size_t)nc, sizeof *s->classes);
    s->class_counts = calloc((size_t)nc, sizeof *s->class_counts);
    if (!s->classes || !s->class_counts) return kl_err_set(e, KL_ENOMEM, "%s: out of memory", what);
    int64_t csum = 0;
    for (int k = 0; k < nc; k++) {
        const cJSON *c = cJSON_GetArrayItem(cl, k), *n = cJSON_GetArrayItem(cc, k);
        if (!cJSON_IsString(c)) return kl_err_set(e, KL_EPARSE, "%s: classes[%d] is not a string", what, k);
        if (!(s->classes[k] = strdup(c->valuestring))) return kl_err_set(e, KL_ENOMEM, "%s: out of memory", what);
        s->nclass = k + 1;
        if (!cJSON_IsNumber(n) || n->valuedouble < 0 || n->valuedouble > (double)s->count ||
            n->valuedouble != (double)(int64_t)n->valuedouble)
            return kl_err_set(e, KL_EPARSE, "%s: class_counts[%d] is not a count", what, k);
        s->class_counts[k] = (int64_t)n->valuedouble;
        csum += s->class_counts[k];
    }
    if (csum != s->count)
        return kl_err_set(e, KL_EPARSE, "%s: class_counts add up to %lld, \"records\" says %lld", what, (long long)csum,
                          (long long)s->count);
    size_t nsh = (size_t)cJSON_GetArraySize(sh);
    s->sh = calloc(nsh ? nsh : 1, sizeof *s->sh);
    if (!s->sh) return kl_err_set(e, KL_ENOMEM, "%s: out of memory", what);
    s->nsh = nsh;
    int64_t total = 0;
    kl_manifest_files mf;
    if ((rc = kl_manifest_files_read(j, what, &mf, e))) return rc;
    for (size_t i = 0; i < nsh && !rc; i++) {
        const cJSON *o = cJSON_GetArrayItem(sh, (int)i);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "file");
        const kl_manifest_file *mfe = cJSON_IsString(f) ? kl_manifest_find(&mf, f->valuestring) : NULL;
        if (!cJSON_IsObject(o) || !cJSON_IsString(f) || !plain_name(f->valuestring))
            rc = kl_err_set(e, KL_EPARSE, "%s: shards[%zu] needs a plain \"file\" name", what, i);
        else if (!mfe || mfe->bytes < 0)
            rc = kl_err_set(e, KL_EPARSE, "%s: shards[%zu] (%s) has no files entry with sha256 and bytes", what, i,
                            f->valuestring);
        else if (!(s->sh[i].file = strdup(f->valuestring))) rc = kl_err_set(e, KL_ENOMEM, "%s: out of memory", what);
        if (rc) break;
        memcpy(s->sh[i].sha256, mfe->sha256, 65);
        s->sh[i].n = jint(o, "records", 0, INT64_C(1) << 40, what, &rc, e);
        s->sh[i].size = (size_t)mfe->bytes;
        if (rc) break;
        s->sh[i].first = total;
        total += s->sh[i].n;
    }
    kl_manifest_files_free(&mf);
    if (rc) return rc;
    if (total != s->count)
        return kl_err_set(e, KL_EPARSE, "%s: shards hold %lld records, \"records\" says %lld", what, (long long)total,
                          (long long)s->count);
    kl_sha256_buf_hex(text, len, s->id);
    return KL_OK;
}

/* Checks a mapped shard against the manifest entry i. */
static int shard_check(kl_shardset *s, size_t i, int verify, kl_err *e) {
    shard *sh = &s->sh[i];
    int64_t want_n = sh->n;
    char what[600];
    snprintf(what, sizeof what, "%s%s%s", s->dir ? s->dir : "", s->dir ? "/" : "", sh->file);
    if (verify) {
        kl_manifest_file f = {.name = sh->file, .bytes = (int64_t)sh->size, .rows = -1};
        char got[65], mp[4200];
        snprintf(mp, sizeof mp, "%s%smanifest.json", s->dir ? s->dir : "", s->dir ? "/" : "");
        memcpy(f.sha256, sh->sha256, 65);
        kl_sha256_buf_hex(sh->base, sh->size, got);
        int rc = kl_manifest_digest_check(what, got, (int64_t)sh->size, &f, mp, "(the shard is corrupt)", e);
        if (rc) return rc;
    }
    int rc = shard_parse(sh, s->nclass, what, e);
    if (rc) return rc;
    if (sh->n != want_n)
        return kl_err_set(e, KL_EPARSE, "%s: holds %lld records, the manifest says %lld", what, (long long)sh->n,
                          (long long)want_n);
    return KL_OK;
}

int kl_shardset_open_mem(const char *manifest, size_t manifest_len, const void *const *shards, const size_t *sizes,
                         size_t n_shards, int verify, kl_shardset **out, kl_err *e) {
    *out = NULL;
    cJSON *j = NULL;
    kl_shardset *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = manifest_parse(s, manifest, manifest_len, "manifest.json", &j, e);
    if (rc) goto fail;
    if (n_shards != s->nsh) {
        rc = kl_err_set(e, KL_EINVAL, "manifest lists %zu shards, %zu given", s->nsh, n_shards);
        goto fail;
    }
    for (size_t i = 0; i < s->nsh; i++) {
        if (sizes[i] != s->sh[i].size) {
            rc = kl_err_set(e, KL_EPARSE, "%s: %zu bytes, the manifest says %zu (truncated or replaced shard)", s->sh[i].file,
                            sizes[i], s->sh[i].size);
            goto fail;
        }
        s->sh[i].base = shards[i];
        if ((rc = shard_check(s, i, verify, e))) goto fail;
    }
    cJSON_Delete(j);
    *out = s;
    return KL_OK;
fail:
    cJSON_Delete(j);
    kl_shardset_free(s);
    return rc;
}

int kl_shardset_open(const char *dir, int verify, kl_shardset **out, kl_err *e) {
    *out = NULL;
    cJSON *j = NULL;
    char *text = NULL;
    size_t len;
    int rc, fd = -1;
    kl_shardset *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(dir))) { free(s); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!kl_path_exists(path)) {
        rc = kl_err_set(e, KL_ENOTFOUND, "%s: no manifest.json: not a shard set (or an unfinished pack: run keel pack again to resume it)", dir);
        goto fail;
    }
    if ((rc = kl_read_file(path, &text, &len, e))) goto fail;
    if ((rc = manifest_parse(s, text, len, path, &j, e))) goto fail;
    for (size_t i = 0; i < s->nsh; i++) {
        shard *sh = &s->sh[i];
        snprintf(path, sizeof path, "%s/%s", dir, sh->file);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            rc = kl_err_set(e, errno == ENOENT ? KL_ENOTFOUND : -errno, "%s: %s (listed in the manifest)", path, strerror(errno));
            goto fail;
        }
        if ((uint64_t)st.st_size != sh->size) {
            rc = kl_err_set(e, KL_EPARSE, "%s: %lld bytes, the manifest says %zu (truncated or replaced shard)", path,
                            (long long)st.st_size, sh->size);
            goto fail;
        }
        if (sh->size > 0) {
            void *m = mmap(NULL, sh->size, PROT_READ, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) {
                rc = kl_err_set(e, -errno, "%s: mmap: %s", path, strerror(errno));
                goto fail;
            }
            sh->base = m;
            sh->mapped = 1;
        }
        close(fd);
        fd = -1;
        if ((rc = shard_check(s, i, verify, e))) goto fail;
    }
    kl_mem_free(text);
    cJSON_Delete(j);
    *out = s;
    return KL_OK;
fail:
    if (fd >= 0) close(fd);
    kl_mem_free(text);
    cJSON_Delete(j);
    kl_shardset_free(s);
    return rc;
}

/* ================================================================== *
 * Access
 * ================================================================== */

int64_t kl_shardset_count(const kl_shardset *s) { return s->count; }
int kl_shardset_num_classes(const kl_shardset *s) { return s->nclass; }
int kl_shardset_num_shards(const kl_shardset *s) { return (int)s->nsh; }
const char *kl_shardset_id(const kl_shardset *s) { return s->id; }
const char *kl_shardset_class_name(const kl_shardset *s, int k) {
    return k >= 0 && k < s->nclass ? s->classes[k] : NULL;
}
int64_t kl_shardset_class_count(const kl_shardset *s, int k) {
    return k >= 0 && k < s->nclass ? s->class_counts[k] : 0;
}

static const uint8_t *entry(const kl_shardset *s, int64_t i, const shard **out) {
    size_t lo = 0, hi = s->nsh; /* last shard with first <= i */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->sh[mid].first <= i) lo = mid;
        else hi = mid;
    }
    while (lo < s->nsh && i >= s->sh[lo].first + s->sh[lo].n) lo++; /* skips empty shards */
    *out = &s->sh[lo];
    return s->sh[lo].index + (size_t)(i - s->sh[lo].first) * KL_SHARD_ENTRY_SIZE;
}

int kl_shardset_get(const kl_shardset *s, int64_t i, kl_record *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= s->count)
        return kl_err_set(e, KL_ERANGE, "record %lld out of range (the shard set has %lld)", (long long)i, (long long)s->count);
    const shard *sh;
    const uint8_t *ent = entry(s, i, &sh);
    out->data = sh->base + get64(ent);
    out->len = (size_t)get64(ent + 8);
    out->label = (int32_t)get32(ent + 16);
    out->key = (const char *)sh->keys + get32(ent + 20);
    return KL_OK;
}

int kl_shardset_check(const kl_shardset *s, int64_t i, kl_err *e) {
    kl_record r;
    int rc = kl_shardset_get(s, i, &r, e);
    if (rc) return rc;
    const shard *sh;
    const uint8_t *ent = entry(s, i, &sh);
    if (crc(r.data, r.len) != get32(ent + 28))
        return kl_err_set(e, KL_ECHECKSUM, "%s: record %lld (%s): CRC-32 mismatch", sh->file, (long long)i, r.key);
    return KL_OK;
}
