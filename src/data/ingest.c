/* keel ingest: sources (files, folders, globs, URLs; plain, .gz, .zst) ->
 * storage check (sha256 of every source) -> parallel CSV/JSONL parsing over
 * fixed-size chunks split at safe record boundaries -> semantic validation
 * (types, constraints, nulls, uniqueness, null ratios) with a rejects file ->
 * Parquet files (optionally hive-partitioned) written into a staging folder
 * keyed by the ingest's inputs -> manifest.json with a content-derived
 * version id -> atomic publish by rename, `current` pointer file.
 *
 * Determinism: chunks have a fixed byte size independent of the thread count
 * and results are combined in chunk order, so the same inputs give the same
 * bytes. A killed ingest leaves its staging folder; the re-run reuses every
 * finished Parquet file there (they appear only by rename once complete). */
#include "data_int.h"

#include <keel/column.h>
#include <keel/parquet.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_createDCtx_advanced: the decoder's memory through the allocator */
#include <zstd.h>

#define MAX_RAW 4096 /* bytes of a rejected line kept in the rejects file */

/* ==================================================================
 * Sources
 * ================================================================== */

/* A compressed source's decoder: the file is read 256 KiB at a time and
 * decompressed into the source's window on demand (src_more), never whole.
 * The zlib/zstd state and every buffer come from the core allocator (tag
 * dataset). Output beyond `cap` bytes (the smaller of the size cap and the
 * expansion cap times the stored size) is refused. */
#define ZIN_BYTES ((size_t)256 << 10)
#define EXPANSION_FLOOR ((uint64_t)1 << 20) /* the expansion cap never refuses the first MiB */

typedef struct {
    int gzip;             /* 1 gzip (multi-member), 0 zstd (multi-frame) */
    int fd;
    z_stream zs;
    int zs_live;
    ZSTD_DCtx *zd;
    unsigned char *in;    /* compressed bytes [in_pos, in_len) not yet consumed */
    size_t in_len, in_pos;
    int in_eof;
    int member_end;       /* gzip: the last member is complete */
    size_t zret;          /* zstd: the last hint (0 = at a frame end) */
    int done;             /* no more output */
    uint64_t total;       /* decompressed bytes so far */
    uint64_t cap;         /* refuse output beyond this */
    int cap_is_size;      /* the size cap (not the expansion cap) is the smaller */
    double expansion;
} zsrc;

typedef struct {
    char *path;           /* local file */
    char *name;           /* as recorded (basename, or the URL) */
    char *url;            /* NULL unless downloaded */
    char sha[65];
    int64_t bytes;        /* stored size */
    char *buf;            /* plain: the whole file (mmap); compressed: the window */
    size_t len;           /* bytes in buf */
    size_t cap;           /* compressed: capacity of buf */
    size_t off;           /* stream offset of buf[0] (0 for a plain file) */
    int mapped;           /* buf is an mmap */
    int compressed;       /* .gz/.zst */
    zsrc *z;              /* the decoder while the source is cut (src_open), else NULL */
    kl_dialect d;
} source;

static int has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int is_data_file(const char *name) {
    static const char *const ext[] = {".csv", ".tsv", ".txt", ".jsonl", ".ndjson", ".json"};
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", name);
    size_t n = strlen(tmp);
    if (has_suffix(tmp, ".gz")) tmp[n - 3] = 0;
    else if (has_suffix(tmp, ".zst")) tmp[n - 4] = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(ext); i++)
        if (has_suffix(tmp, ext[i])) return 1;
    return 0;
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct { source *v; size_t n, cap; } source_list;

static int add_source(source_list *l, const char *path, const char *url, kl_err *e) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        source *v = realloc(l->v, nc * sizeof *v);
        if (!v) return kl_err_set(e, KL_ENOMEM, "out of memory");
        l->v = v;
        l->cap = nc;
    }
    source *s = &l->v[l->n];
    memset(s, 0, sizeof *s);
    s->path = strdup(path);
    s->name = strdup(url ? url : base_name(path));
    s->url = url ? strdup(url) : NULL;
    if (!s->path || !s->name) return kl_err_set(e, KL_ENOMEM, "out of memory");
    l->n++;
    return KL_OK;
}

static void zsrc_free(zsrc *z) {
    if (!z) return;
    if (z->zs_live) inflateEnd(&z->zs);
    ZSTD_freeDCtx(z->zd);
    if (z->fd >= 0) close(z->fd);
    kl_mem_free(z->in);
    kl_mem_free(z);
}

static void source_unload(source *s) {
    zsrc_free(s->z);
    s->z = NULL;
    if (!s->buf) return;
    if (s->mapped) munmap(s->buf, s->len);
    else kl_mem_free(s->buf);
    s->buf = NULL;
}

static void sources_free(source_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        source_unload(&l->v[i]);
        free(l->v[i].path);
        free(l->v[i].name);
        free(l->v[i].url);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int expand_dir(source_list *l, const char *dir, kl_err *e) {
    DIR *d = opendir(dir);
    if (!d) return kl_err_set(e, -errno, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = KL_OK;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !is_data_file(de->d_name)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
            names = nn;
        }
        if (!(names[n] = malloc(strlen(dir) + strlen(de->d_name) + 2))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        sprintf(names[n], "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(d);
    if (!rc) qsort(names, n, sizeof *names, cmpstr);
    if (!rc && n == 0) rc = kl_err_set(e, KL_ENOTFOUND, "%s: no .csv/.tsv/.jsonl files in the folder", dir);
    for (size_t i = 0; i < n; i++) {
        if (!rc) rc = add_source(l, names[i], NULL, e);
        free(names[i]);
    }
    free(names);
    return rc;
}

/* Downloads a URL into out_dir/.downloads/<sha256(url)>/<basename>. */
static int fetch_source(source_list *l, const char *url, const kl_ingest_opts *o, const char *expect, kl_err *e) {
    char key[65], dir[4096], path[4200];
    kl_sha256_buf_hex(url, strlen(url), key);
    snprintf(dir, sizeof dir, "%s/.downloads/%.16s", o->out_dir, key);
    int rc = kl_mkdir_p(dir, e);
    if (rc) return rc;
    const char *b = base_name(url);
    char fname[256];
    snprintf(fname, sizeof fname, "%.*s", (int)strcspn(b, "?#"), b);
    if (!*fname) snprintf(fname, sizeof fname, "download");
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    if (!kl_path_exists(path)) {
        kl_fetch_opts fo = {0};
        fo.expected_sha256 = expect;
        fo.retries = kl_settings_get()->fetch_retries;
        if ((rc = kl_fetch_url(url, path, &fo, NULL, e))) return rc;
    }
    return add_source(l, path, url, e);
}

static int expand_sources(const kl_ingest_opts *o, const char *expect, source_list *l, kl_err *e) {
    int rc = KL_OK;
    for (size_t i = 0; i < o->n_sources && !rc; i++) {
        const char *s = o->sources[i];
        struct stat st;
        if (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)) {
            rc = fetch_source(l, s, o, o->n_sources == 1 ? expect : NULL, e);
        } else if (stat(s, &st) == 0) {
            rc = S_ISDIR(st.st_mode) ? expand_dir(l, s, e) : add_source(l, s, NULL, e);
        } else if (strpbrk(s, "*?[")) {
            glob_t g;
            int gr = glob(s, 0, NULL, &g);
            if (gr == GLOB_NOMATCH) return kl_err_set(e, KL_ENOTFOUND, "%s: no files match", s);
            if (gr) return kl_err_set(e, KL_EINVAL, "%s: bad pattern", s);
            for (size_t k = 0; k < g.gl_pathc && !rc; k++)
                if (stat(g.gl_pathv[k], &st) == 0 && S_ISREG(st.st_mode)) rc = add_source(l, g.gl_pathv[k], NULL, e);
            globfree(&g);
        } else {
            rc = kl_err_set(e, KL_ENOTFOUND, "%s: %s", s, strerror(errno));
        }
    }
    if (!rc && l->n == 0) rc = kl_err_set(e, KL_ENOTFOUND, "no source files");
    return rc;
}

/* ---- compressed sources: streaming decoders ------------------------------ */

static void *z_alloc(void *op, uInt items, uInt size) {
    (void)op;
    return (size_t)items * size / (size ? size : 1) == items ? kl_mem_alloc((size_t)items * size, KL_TAG_DATASET) : NULL;
}
static void z_free(void *op, void *p) { (void)op; kl_mem_free(p); }
static void *zs_alloc(void *op, size_t n) { (void)op; return kl_mem_alloc(n, KL_TAG_DATASET); }
static void zs_free(void *op, void *p) { (void)op; kl_mem_free(p); }

/* Reads more compressed bytes after the unconsumed ones. */
static int zin_more(source *s, kl_err *e) {
    zsrc *z = s->z;
    if (z->in_pos) {
        memmove(z->in, z->in + z->in_pos, z->in_len - z->in_pos);
        z->in_len -= z->in_pos;
        z->in_pos = 0;
    }
    ssize_t r;
    do r = read(z->fd, z->in + z->in_len, ZIN_BYTES - z->in_len);
    while (r < 0 && errno == EINTR);
    if (r < 0) return kl_err_set(e, -errno, "%s: %s", s->name, strerror(errno));
    if (r == 0) z->in_eof = 1;
    z->in_len += (size_t)r;
    return KL_OK;
}

static int gz_step(source *s, char *dst, size_t n, size_t *got, kl_err *e) {
    zsrc *z = s->z;
    size_t avail = z->in_len - z->in_pos;
    if (z->member_end) { /* another member follows, or trailing bytes, ignored as gzread does */
        if (avail < 2 && !z->in_eof) return zin_more(s, e);
        if (avail >= 2 && z->in[z->in_pos] == 0x1f && z->in[z->in_pos + 1] == 0x8b) {
            inflateReset(&z->zs);
            z->member_end = 0;
        } else z->done = 1;
        return KL_OK;
    }
    z->zs.next_in = z->in + z->in_pos;
    z->zs.avail_in = (uInt)avail;
    z->zs.next_out = (Bytef *)dst;
    z->zs.avail_out = (uInt)n;
    int r = inflate(&z->zs, Z_NO_FLUSH);
    z->in_pos += avail - z->zs.avail_in;
    *got = n - z->zs.avail_out;
    if (r == Z_STREAM_END) z->member_end = 1;
    else if (r == Z_BUF_ERROR || (r == Z_OK && !*got && z->in_pos == z->in_len)) {
        if (z->in_pos < z->in_len) return kl_err_set(e, KL_EPARSE, "%s: corrupt gzip data (no progress)", s->name);
        if (z->in_eof) return kl_err_set(e, KL_EPARSE, "%s: truncated gzip file (ends inside a compressed member)", s->name);
        return zin_more(s, e);
    } else if (r != Z_OK)
        return kl_err_set(e, KL_EPARSE, "%s: corrupt gzip data after %llu bytes: %s", s->name,
                          (unsigned long long)(z->total + *got), z->zs.msg ? z->zs.msg : zError(r));
    return KL_OK;
}

static int zst_step(source *s, char *dst, size_t n, size_t *got, kl_err *e) {
    zsrc *z = s->z;
    int rc;
    if (z->in_pos == z->in_len && !z->in_eof && (rc = zin_more(s, e))) return rc;
    ZSTD_inBuffer in = {z->in, z->in_len, z->in_pos};
    ZSTD_outBuffer out = {dst, n, 0};
    size_t r = ZSTD_decompressStream(z->zd, &out, &in);
    if (ZSTD_isError(r)) return kl_err_set(e, KL_EPARSE, "%s: zstd: %s", s->name, ZSTD_getErrorName(r));
    *got = out.pos;
    if (!out.pos && in.pos == z->in_pos && in.pos == in.size && z->in_eof) { /* nothing more */
        if (z->zret) return kl_err_set(e, KL_EPARSE, "%s: truncated zstd file", s->name);
        z->done = 1;
    }
    z->in_pos = in.pos;
    if (!z->done) z->zret = r; /* 0: the last frame is complete */
    return KL_OK;
}

static int cap_error(const source *s, kl_err *e) {
    char b1[32], b2[32];
    const zsrc *z = s->z;
    if (z->cap_is_size)
        return kl_err_set(e, KL_ERANGE, "%s: decompresses to more than %s, the cap on decompressed size (--max-decompressed)",
                          s->name, kl_fmt_bytes(z->cap, b1, sizeof b1));
    return kl_err_set(e, KL_ERANGE,
                      "%s: decompresses to more than %s, %gx its %s on disk: a decompression bomb? (the cap: --max-expansion %g)",
                      s->name, kl_fmt_bytes(z->cap, b1, sizeof b1), z->expansion,
                      kl_fmt_bytes((uint64_t)s->bytes, b2, sizeof b2), z->expansion);
}

/* Decompresses up to `want` more bytes onto the end of the window (fewer only
 * at the end of the stream: z->done). */
static int src_more(source *s, size_t want, size_t min_cap, kl_err *e) {
    zsrc *z = s->z;
    if (s->len + want > s->cap) {
        size_t nc = KL_MAX(KL_MAX(s->len + want, s->cap * 2), min_cap);
        char *p = kl_mem_realloc(s->buf, nc, KL_TAG_DATASET);
        if (!p) {
            char b[32];
            return kl_err_set(e, KL_ENOMEM, "%s: out of memory for a %s decompression window", s->name, kl_fmt_bytes(nc, b, sizeof b));
        }
        s->buf = p;
        s->cap = nc;
    }
    size_t have = 0;
    while (have < want && !z->done) {
        size_t n = want - have, got = 0;
        if (n > z->cap - z->total) n = (size_t)(z->cap - z->total) + 1; /* one byte past the cap tells */
        int rc = z->gzip ? gz_step(s, s->buf + s->len + have, n, &got, e) : zst_step(s, s->buf + s->len + have, n, &got, e);
        if (rc) return rc;
        have += got;
        z->total += got;
        if (z->total > z->cap) return cap_error(s, e);
    }
    s->len += have;
    return KL_OK;
}

static int zsrc_open(source *s, const kl_ingest_opts *o, kl_err *e) {
    zsrc *z = kl_mem_calloc(1, sizeof *z, KL_TAG_DATASET);
    if (!z) return kl_err_set(e, KL_ENOMEM, "out of memory");
    z->fd = -1;
    z->zret = 1; /* nothing decoded yet: an empty file is a truncated one */
    s->z = z;
    z->fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (z->fd < 0) return kl_err_set(e, -errno, "%s: %s", s->name, strerror(errno));
    if (!(z->in = kl_mem_alloc(ZIN_BYTES, KL_TAG_DATASET))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    z->gzip = has_suffix(s->path, ".gz");
    if (z->gzip) {
        z->zs.zalloc = z_alloc;
        z->zs.zfree = z_free;
        if (inflateInit2(&z->zs, 15 + 32) != Z_OK) return kl_err_set(e, KL_ENOMEM, "%s: gzip: out of memory", s->name);
        z->zs_live = 1;
    } else {
        ZSTD_customMem cm = {zs_alloc, zs_free, NULL};
        if (!(z->zd = ZSTD_createDCtx_advanced(cm))) return kl_err_set(e, KL_ENOMEM, "%s: zstd: out of memory", s->name);
    }
    uint64_t size_cap = o->max_decompressed_bytes ? o->max_decompressed_bytes : KL_INGEST_MAX_DECOMPRESSED;
    z->expansion = o->max_expansion > 0 ? o->max_expansion : KL_INGEST_MAX_EXPANSION;
    double ec = z->expansion * (double)s->bytes;
    uint64_t exp_cap = ec >= 1.8e19 ? UINT64_MAX : KL_MAX((uint64_t)ec, EXPANSION_FLOOR);
    z->cap_is_size = size_cap <= exp_cap;
    z->cap = KL_MIN(size_cap, exp_cap);
    return src_more(s, 65536, 65536, e); /* the first bytes: dialect sniffing */
}

/* A compressed source's decoder is live only while the source is cut into
 * chunks (one at a time: a folder of many .zst files does not hold a
 * decoder, its window and a file descriptor each). Opens it from the start. */
static int src_open(source *s, const kl_ingest_opts *o, kl_err *e) {
    if (!s->compressed) return KL_OK;
    kl_mem_free(s->buf);
    s->buf = NULL;
    s->len = s->cap = s->off = 0;
    return zsrc_open(s, o, e);
}

static void src_close(source *s) {
    zsrc_free(s->z);
    s->z = NULL;
}

/* Maps a plain file, or decompresses the first 64 KiB of a compressed one
 * (for the dialect sniffing; the decoder is closed again); computes the
 * sha256 of the stored file. */
static int load_source(source *s, const kl_ingest_opts *o, kl_err *e) {
    struct stat st;
    if (stat(s->path, &st)) return kl_err_set(e, -errno, "%s: %s", s->path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return kl_err_set(e, KL_EINVAL, "%s: not a regular file", s->path);
    s->bytes = st.st_size;
    if (has_suffix(s->path, ".gz") || has_suffix(s->path, ".zst")) {
        s->compressed = 1;
        int rc = kl_sha256_file_hex(s->path, s->sha, e);
        if (!rc) rc = zsrc_open(s, o, e);
        src_close(s);
        return rc;
    }
    if (st.st_size == 0) {
        kl_sha256_buf_hex("", 0, s->sha);
        s->buf = kl_mem_alloc(1, KL_TAG_DATASET);
        s->len = 0;
        return s->buf ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    int fd = open(s->path, O_RDONLY);
    if (fd < 0) return kl_err_set(e, -errno, "%s: %s", s->path, strerror(errno));
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return kl_err_set(e, -errno, "%s: mmap: %s", s->path, strerror(errno));
    madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
    s->buf = p;
    s->len = (size_t)st.st_size;
    s->mapped = 1;
    kl_sha256_buf_hex(p, s->len, s->sha);
    return KL_OK;
}

/* 1 when every byte of the source is in its window or was handed to a chunk. */
static int src_done(const source *s) { return !s->z || s->z->done; }

/* ==================================================================
 * Chunks: parsing and validation
 * ================================================================== */

typedef struct {
    int64_t line;        /* 1-based line in the source */
    int64_t offset;      /* byte offset of the record (decompressed) */
    int src, col;        /* col -1 = the whole row */
    kl_reject_kind kind;
    char *msg;           /* "column item_price: 'N/A' is not a float64" */
    char *raw;
} reject;

typedef struct { char *s; size_t n; } lstr; /* a string with its length (may hold NUL) */

typedef struct {
    int64_t nulls, count;
    int has;             /* min/max valid */
    int64_t imin, imax;
    double dmin, dmax;
    char *smin, *smax;   /* malloc'ed; a value may hold NUL bytes: lengths below */
    size_t smin_n, smax_n;
    kl_hll hll;
    lstr *vocab;         /* category: distinct values (up to VOCAB_MAX) */
    size_t nvocab, capvocab;
    int vocab_overflow;
} colstat;

#define VOCAB_MAX 1000

typedef struct {
    int src;
    size_t begin, end;    /* stream offsets (decompressed) */
    const char *base;     /* the chunk's text: stream offset base_off is base[0] */
    size_t base_off;
    char *own;            /* compressed sources: the window the chunk owns (base), freed once parsed */
    int64_t line0;        /* first line number of the chunk (absolute, after the fix-up) */
    int64_t lines;        /* physical lines in the chunk */
    kl_column **cols;
    size_t rows;
    int64_t *row_line;    /* per accepted row (relative line) and offset: only when unique checks need them */
    int64_t *row_off;
    size_t rl_cap;
    reject *rej;
    size_t nrej, caprej;
    reject *warn;         /* --on-error recover: the repairs made (warning rows of the rejects file) */
    size_t nwarn, capwarn;
    int64_t records;      /* data records seen (accepted + rejected) */
    colstat *st;
    int rc;
    kl_err err;
} chunk;

typedef struct ictx {
    const kl_ingest_opts *o;
    kl_schema *schema;
    source_list src;
    int **colmap;         /* per source: schema field -> field index in the file */
    int *nfile_cols;      /* per source: fields per record */
    int64_t *hdr_lines;   /* per source: lines taken by the preamble and the header */
    char **renamed;       /* per source: JSON object normalised name -> header name, for the names changed (or NULL) */
    int extra_col;        /* --on-error recover: the schema field `_extra` (a long row's extra fields), else -1 */
    chunk *ch;
    size_t nch, capch;
    int need_row_pos;
    atomic_size_t next;
    kl_progress *prog;    /* NULL unless o->progress */
    uint64_t prog_total;
    /* the chunk pipeline (flush_chunks) */
    int streaming;        /* unpartitioned, no unique columns: part files written as groups complete */
    struct outfile *files;
    size_t nfiles, capfiles; /* streaming: groups launched so far */
    const char *staging;
    kl_pq_write_opts wo;
    size_t parsed;        /* chunks [0, parsed) are parsed */
    size_t owned_live;    /* chunks holding a compressed source's text */
    size_t batch;         /* flush once this many hold text */
    const int64_t *repairs; /* --on-error recover: repairs by kind (for the manifest) */
} ictx;

static int add_entry(reject **arr, size_t *n, size_t *cap, chunk *c, int64_t rel_line, int64_t off, int col,
                     kl_reject_kind kind, const char *msg, const char *raw, size_t rawn) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        reject *r = realloc(*arr, nc * sizeof *r);
        if (!r) return KL_ENOMEM;
        *arr = r;
        *cap = nc;
    }
    reject *r = &(*arr)[*n];
    while (rawn && (raw[rawn - 1] == '\n' || raw[rawn - 1] == '\r')) rawn--;
    if (rawn > MAX_RAW) rawn = MAX_RAW;
    r->line = rel_line;
    r->offset = off;
    r->src = c->src;
    r->col = col;
    r->kind = kind;
    r->msg = strdup(msg);
    r->raw = malloc(rawn + 1);
    if (!r->msg || !r->raw) { free(r->msg); free(r->raw); return KL_ENOMEM; }
    memcpy(r->raw, raw, rawn);
    r->raw[rawn] = 0;
    (*n)++;
    return KL_OK;
}

static int add_reject(chunk *c, int64_t rel_line, int64_t off, int col, kl_reject_kind kind, const char *msg,
                      const char *raw, size_t rawn) {
    return add_entry(&c->rej, &c->nrej, &c->caprej, c, rel_line, off, col, kind, msg, raw, rawn);
}

/* A repair of --on-error recover: msg says what was done. */
static int add_warning(chunk *c, int64_t rel_line, int64_t off, kl_reject_kind kind, const char *msg, const char *raw,
                       size_t rawn) {
    return add_entry(&c->warn, &c->nwarn, &c->capwarn, c, rel_line, off, -1, kind, msg, raw, rawn);
}

/* Appends without the generic push path (the hot loop of ingestion). */
static inline int ensure_room(kl_column *c, size_t extra_data) {
    if (c->len == c->cap || (c->type == KL_COL_STRING && c->data_len + extra_data > c->data_cap))
        return kl_column_reserve(c, c->len + 1, c->data_len + extra_data);
    return KL_OK;
}

static inline int mark_valid(kl_column *c, int present) {
    if (!c->valid) {
        if (present) return KL_OK;
        c->valid = kl_mem_alloc(c->cap ? c->cap : 1, KL_TAG_DATASET);
        if (!c->valid) return KL_ENOMEM;
        memset(c->valid, 1, c->len);
    }
    c->valid[c->len] = (uint8_t)present;
    return KL_OK;
}

static int fast_push(kl_column *c, int isnull, const kl_cell *v) {
    size_t n = isnull || c->type != KL_COL_STRING ? 0 : v->n;
    if (ensure_room(c, n) || mark_valid(c, !isnull)) return KL_ENOMEM;
    switch (c->type) {
    case KL_COL_BOOL: ((uint8_t *)c->values)[c->len] = isnull ? 0 : (uint8_t)(v->i != 0); break;
    case KL_COL_INT32: case KL_COL_DATE: ((int32_t *)c->values)[c->len] = isnull ? 0 : (int32_t)v->i; break;
    case KL_COL_INT64: case KL_COL_TIMESTAMP: ((int64_t *)c->values)[c->len] = isnull ? 0 : v->i; break;
    case KL_COL_FLOAT32: ((float *)c->values)[c->len] = isnull ? 0.0f : (float)v->d; break;
    case KL_COL_FLOAT64: ((double *)c->values)[c->len] = isnull ? 0.0 : v->d; break;
    default:
        if (n) memcpy(c->data + c->data_len, v->s, n);
        c->data_len += n;
        c->offsets[c->len + 1] = (int64_t)c->data_len;
        break;
    }
    c->len++;
    return KL_OK;
}

/* Parses and pushes one row: the texts of a CSV record (NULL text =
 * missing/null), or the fields of a JSON object (obj; a number's text for a
 * string field goes into nb[j]), each through the one value grammar
 * (kl_cell_parse / kl_json_cell_parse). Returns KL_OK, a positive reject
 * (kind+1, with col and msg), or a negative error. */
static int push_row(ictx *x, chunk *c, const char *const *txt, const uint32_t *len, const uint8_t *quoted,
                    const cJSON *obj, char (*nb)[KL_CELL_NUMBUF], int *bad_col, char *msg, size_t msgn) {
    const kl_schema *s = x->schema;
    kl_cell vals[256];
    kl_cell *v = s->n_fields <= 256 ? vals : malloc(s->n_fields * sizeof *v);
    uint8_t isnull[256];
    uint8_t *nul = s->n_fields <= 256 ? isnull : malloc(s->n_fields);
    int rc = KL_OK;
    if (!v || !nul) { rc = KL_ENOMEM; goto done; }
    const kl_dialect *d = &x->src.v[c->src].d;
    for (size_t j = 0; j < s->n_fields; j++) {
        const kl_field *f = &s->fields[j];
        char m[256];
        int isn = 0;
        int r = obj ? kl_json_cell_parse(f, d, cJSON_GetObjectItemCaseSensitive(obj, f->name), nb[j], &v[j], &isn, m, sizeof m)
                    : kl_cell_parse(f, d, txt[j], len[j], quoted && quoted[j], &v[j], &isn, m, sizeof m);
        nul[j] = (uint8_t)isn;
        if (r) {
            *bad_col = (int)j;
            snprintf(msg, msgn, "column %s: %s", f->name, m);
            rc = r;
            goto done;
        }
    }
    for (size_t j = 0; j < s->n_fields; j++)
        if (fast_push(c->cols[j], nul[j], &v[j])) { rc = KL_ENOMEM; goto done; }
    c->rows++;
done:
    if (v != vals) free(v);
    if (nul != isnull) free(nul);
    return rc;
}

static int note_row_pos(ictx *x, chunk *c, int64_t line, int64_t off) {
    if (!x->need_row_pos) return KL_OK;
    if (c->rows > c->rl_cap) {
        size_t nc = c->rl_cap ? c->rl_cap * 2 : 4096;
        while (nc < c->rows) nc *= 2;
        int64_t *a = realloc(c->row_line, nc * sizeof *a), *b;
        if (!a) return KL_ENOMEM;
        c->row_line = a;
        if (!(b = realloc(c->row_off, nc * sizeof *b))) return KL_ENOMEM;
        c->row_off = b;
        c->rl_cap = nc;
    }
    c->row_line[c->rows - 1] = line;
    c->row_off[c->rows - 1] = off;
    return KL_OK;
}

static int count_nl(const char *p, size_t n, char eol) {
    int k = 0;
    const char *end = p + n;
    while ((p = memchr(p, eol, (size_t)(end - p)))) { k++; p++; }
    return k;
}

/* --on-error recover: a long record's fields from nfile on, joined by the
 * delimiter, into xb (the `_extra` value). */
static int join_extra(const kl_dialect *d, const kl_csv_rec *r, size_t nfile, kl_buf *xb) {
    size_t dn;
    const char *dl = kl_dialect_delim(d, &dn);
    kl_buf_reset(xb);
    for (size_t i = nfile; i < r->n; i++) {
        if (i > nfile) kl_buf_append(xb, dl, dn);
        kl_buf_append(xb, r->f[i], r->len[i]);
    }
    return xb->failed ? KL_ENOMEM : KL_OK;
}

static int parse_csv_chunk(ictx *x, chunk *c) {
    const kl_dialect *d = &x->src.v[c->src].d;
    const int *map = x->colmap[c->src];
    const size_t nf = x->schema->n_fields, nfile = (size_t)x->nfile_cols[c->src];
    const int recover = x->o->on_error == KL_ON_ERROR_RECOVER, xcol = x->extra_col;
    const char eol = d->eol ? d->eol : '\n';
    const size_t cmtn = strlen(d->comment);
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_buf xb;
    kl_buf_init(&xb);
    const char **txt = calloc(nf, sizeof *txt);
    uint32_t *len = calloc(nf, sizeof *len);
    uint8_t *q = calloc(nf, 1);
    int rc = KL_OK;
    if (!txt || !len || !q) { rc = KL_ENOMEM; goto done; }
    const char *buf = c->base; /* positions below are relative to base; + bo gives the stream offset */
    const size_t bo = c->base_off, cend = c->end - bo;
    size_t pos = c->begin - bo;
    int64_t line = 0; /* relative line of the current record */
    char msg[512];
    while (pos < cend) {
        size_t start = pos;
        if (cmtn && cend - pos >= cmtn && !memcmp(buf + pos, d->comment, cmtn)) { /* a comment line */
            const char *nl = memchr(buf + pos, eol, cend - pos);
            pos = nl ? (size_t)(nl - buf) + 1 : cend;
            line++;
            continue;
        }
        kl_err pe = {0};
        int prc = kl_csv_next(d, buf, cend, &pos, &r, &pe);
        if (prc == KL_CSV_END) break;
        if (prc == KL_ENOMEM) { rc = prc; goto done; }
        if (prc) {
            int64_t nl = count_nl(buf + start, pos - start, eol);
            snprintf(msg, sizeof msg, "%s", pe.msg);
            c->records++;
            if ((rc = add_reject(c, line, (int64_t)(start + bo), -1, prc == KL_ERANGE ? KL_REJ_RECORD_SIZE : KL_REJ_QUOTE, msg,
                                 buf + start, pos - start)))
                goto done;
            line += nl ? nl : 1;
            continue;
        }
        int64_t rl = line;
        line += r.lines;
        if (r.n == 1 && r.len[0] == 0 && !r.quoted[0]) continue; /* blank line */
        c->records++;
        if (r.repairs &&
            (rc = add_warning(c, rl, (int64_t)(start + bo), KL_REJ_QUOTE, "stray quote read literally", buf + start,
                              pos - start)))
            goto done;
        int has_extra = 0;
        if (r.n != nfile) {
            if (!recover) {
                snprintf(msg, sizeof msg, "%zu fields, expected %zu", r.n, nfile);
                if ((rc = add_reject(c, rl, (int64_t)(start + bo), -1, KL_REJ_RAGGED, msg, buf + start, pos - start)))
                    goto done;
                continue;
            }
            if (r.n < nfile)
                snprintf(msg, sizeof msg, "%zu fields, expected %zu: padded %zu missing fields with null", r.n, nfile,
                         nfile - r.n);
            else
                snprintf(msg, sizeof msg, "%zu fields, expected %zu: the %zu extra fields kept in _extra", r.n, nfile,
                         r.n - nfile);
            if ((rc = add_warning(c, rl, (int64_t)(start + bo), KL_REJ_RAGGED, msg, buf + start, pos - start)))
                goto done;
            if (r.n > nfile) {
                if ((rc = join_extra(d, &r, nfile, &xb))) goto done;
                has_extra = 1;
            }
        }
        for (size_t j = 0; j < nf; j++) {
            int m = map[j];
            if ((int)j == xcol) { /* `_extra`: null unless the row was long */
                txt[j] = has_extra ? (xb.data ? xb.data : "") : NULL;
                len[j] = has_extra ? (uint32_t)xb.len : 0;
                q[j] = 1;
            } else if (m >= 0 && (size_t)m < r.n) {
                txt[j] = r.f[m];
                len[j] = r.len[m];
                q[j] = r.quoted[m];
            } else { /* a short row, padded */
                txt[j] = NULL;
                len[j] = 0;
                q[j] = 0;
            }
        }
        int bad = -1;
        int pr = push_row(x, c, txt, len, q, NULL, NULL, &bad, msg, sizeof msg);
        if (pr < 0) { rc = pr; goto done; }
        if (pr > 0) {
            if ((rc = add_reject(c, rl, (int64_t)(start + bo), bad, (kl_reject_kind)(pr - 1), msg, buf + start, pos - start)))
                goto done;
            continue;
        }
        if ((rc = note_row_pos(x, c, rl, (int64_t)(start + bo)))) goto done;
    }
    c->lines = line;
done:
    kl_csv_rec_free(&r);
    kl_buf_free(&xb);
    free(txt);
    free(len);
    free(q);
    return rc;
}

static int parse_jsonl_chunk(ictx *x, chunk *c) {
    const source *s = &x->src.v[c->src];
    const size_t nf = x->schema->n_fields;
    char (*nb)[KL_CELL_NUMBUF] = calloc(nf ? nf : 1, KL_CELL_NUMBUF);
    int rc = KL_OK;
    if (!nb) { rc = KL_ENOMEM; goto done; }
    const char *buf = c->base; /* positions below are relative to base; + bo gives the stream offset */
    const size_t bo = c->base_off, cend = c->end - bo;
    size_t pos = c->begin - bo;
    int64_t line = 0;
    char msg[512];
    size_t maxr = s->d.max_record;
    while (pos < cend) {
        size_t start = pos;
        const char *nl = memchr(buf + pos, '\n', cend - pos);
        size_t end = nl ? (size_t)(nl - buf) : cend;
        pos = nl ? end + 1 : cend;
        int64_t rl = line++;
        size_t n = end - start;
        if (n && buf[end - 1] == '\r') n--;
        size_t k = 0;
        while (k < n && (buf[start + k] == ' ' || buf[start + k] == '\t')) k++;
        if (k == n) continue; /* blank */
        c->records++;
        if (n > maxr) {
            snprintf(msg, sizeof msg, "record longer than %zu bytes", maxr);
            if ((rc = add_reject(c, rl, (int64_t)(start + bo), -1, KL_REJ_RECORD_SIZE, msg, buf + start, n))) goto done;
            continue;
        }
        void *jv = NULL;
        int jrc = kl_json_parse_opts(buf + start, n, NULL, KL_JSON_KEEP_NUL, &jv, NULL); /* \u0000 kept whole */
        if (jrc == KL_ENOMEM) { rc = jrc; goto done; }
        cJSON *obj = jv;
        if (!obj || !cJSON_IsObject(obj)) {
            kl_err je = {0}; /* the reason, read again only for a bad record */
            if (!obj) kl_json_parse_opts(buf + start, n, NULL, KL_JSON_KEEP_NUL, &jv, &je);
            snprintf(msg, sizeof msg, "%s", obj ? "not a JSON object" : strstr(je.msg, "member name") ? je.msg : "malformed JSON");
            cJSON_Delete(obj);
            if ((rc = add_reject(c, rl, (int64_t)(start + bo), -1, KL_REJ_JSON, msg, buf + start, n))) goto done;
            continue;
        }
        int bad = -1, pr = push_row(x, c, NULL, NULL, NULL, obj, nb, &bad, msg, sizeof msg);
        cJSON_Delete(obj);
        if (pr < 0) { rc = pr; goto done; }
        if (pr > 0) {
            if ((rc = add_reject(c, rl, (int64_t)(start + bo), bad, (kl_reject_kind)(pr - 1), msg, buf + start, n))) goto done;
            continue;
        }
        if ((rc = note_row_pos(x, c, rl, (int64_t)(start + bo)))) goto done;
    }
    c->lines = line;
done:
    free(nb);
    return rc;
}

static int chunk_init_cols(ictx *x, chunk *c) {
    const kl_schema *s = x->schema;
    if (!(c->cols = calloc(s->n_fields, sizeof *c->cols))) return KL_ENOMEM;
    size_t est = (c->end - c->begin) / 40 + 16;
    for (size_t j = 0; j < s->n_fields; j++) {
        const kl_field *f = &s->fields[j];
        if (kl_column_new(f->name, kl_type_column(f->type), f->nullable, est, &c->cols[j], NULL)) return KL_ENOMEM;
        if (f->type == KL_T_STRING || f->type == KL_T_CATEGORY)
            if (kl_column_reserve(c->cols[j], est, (c->end - c->begin) / 4)) return KL_ENOMEM;
    }
    return KL_OK;
}

static void parse_worker(void *ctx, size_t b, size_t e_, int chunk_idx) {
    ictx *x = ctx;
    for (;;) {
        size_t i = atomic_fetch_add(&x->next, 1);
        if (i >= x->nch) break;
        chunk *c = &x->ch[i];
        c->rc = chunk_init_cols(x, c);
        if (!c->rc)
            c->rc = x->src.v[c->src].d.format == KL_FMT_JSONL ? parse_jsonl_chunk(x, c) : parse_csv_chunk(x, c);
        if (x->prog) kl_progress_add(x->prog, c->end - c->begin);
        if (c->rc == KL_ENOMEM) kl_err_set(&c->err, KL_ENOMEM, "out of memory while parsing");
        else if (c->rc && !c->err.code) kl_err_set(&c->err, c->rc, "parse failed");
    }
}

/* ---- splitting a source into chunks at safe record boundaries ------------ */

/* Chunk boundaries, found in one pass that needs only the bytes after the
 * last boundary (so a compressed source is cut as it is decompressed): the
 * k-th candidate is begin + k*bs, and the boundary is the first record
 * terminator at or after it outside quotes; candidates at or before the last
 * boundary are skipped. The same bytes give the same chunks however they
 * arrive. Quotes are read as the record parser reads them: a quote opens a
 * quoted field only at a field's start (after the delimiter, a record end,
 * or blanks there under trim) -- a stray quote inside an unquoted field is
 * data and does not shift what follows --; inside quotes a doubled quote (or
 * the escape character and the byte after it) stays inside; comment lines
 * are skipped whole. */
typedef struct {
    size_t begin, bs;
    size_t next;          /* the current candidate (stream offset) */
    size_t scan;          /* bytes before this are read */
    char quote;           /* 0: no quoting (JSONL) */
    char esc;             /* an escape character inside quotes (0: doubled quotes) */
    char eol;             /* the record terminator */
    const char *dl;       /* the delimiter */
    size_t dn;
    int trim;
    const char *cmt;      /* comment prefix (lines starting with it hold no record) */
    size_t cmtn;
    int in_q;             /* scan is inside a quoted field */
    int pend;             /* the byte at scan is escaped */
    int bol, in_cmt;      /* scan is at a line start (outside quotes) / inside a comment line */
} splitter;

static void split_init(splitter *sp, size_t begin, size_t bs, const kl_dialect *d) {
    memset(sp, 0, sizeof *sp);
    sp->begin = sp->scan = begin;
    sp->bs = bs;
    sp->next = begin + bs;
    sp->eol = '\n';
    sp->bol = 1;
    if (d->format != KL_FMT_CSV) return; /* JSONL: lines */
    sp->quote = d->quote;
    sp->esc = d->quote && d->escape != d->quote ? d->escape : 0;
    sp->eol = d->eol ? d->eol : '\n';
    sp->dl = kl_dialect_delim(d, &sp->dn);
    sp->trim = d->trim;
    sp->cmt = d->comment;
    sp->cmtn = strlen(d->comment);
}

/* Does the quote at stream offset i open a field? */
static int quote_opens(const splitter *sp, const char *buf, size_t base_off, size_t i) {
    size_t k = i;
    if (sp->trim)
        while (k > base_off && k > sp->begin) {
            char c = buf[k - 1 - base_off];
            if (!(c == ' ' || (c == '\t' && !(sp->dn == 1 && sp->dl[0] == '\t')))) break;
            k--;
        }
    if (k == sp->begin || k == base_off) return 1; /* the window starts at a boundary */
    char prev = buf[k - 1 - base_off];
    if (prev == sp->eol || prev == '\n') return 1;
    return k - base_off >= sp->dn && !memcmp(buf + (k - sp->dn - base_off), sp->dl, sp->dn);
}

/* Looks at the stream bytes [sp->scan, upto), held at buf (stream offset
 * base_off is buf[0]); 1 and *b = the next boundary when one is found, 0
 * when more bytes are needed (or the source ends: the rest is one chunk). */
static int split_next(splitter *sp, const char *buf, size_t base_off, size_t upto, size_t *b) {
    while (sp->scan < upto) {
        const char *p = buf + (sp->scan - base_off);
        const size_t avail = upto - sp->scan;
        if (sp->pend) { sp->pend = 0; sp->scan++; continue; }
        if (sp->in_q) { /* to the next quote (or escape) */
            const char *q = memchr(p, sp->quote, avail);
            const char *x = sp->esc ? memchr(p, sp->esc, q ? (size_t)(q - p) : avail) : NULL;
            if (x) { sp->scan += (size_t)(x - p) + 1; sp->pend = 1; continue; }
            if (!q) { sp->scan = upto; return 0; }
            size_t i = sp->scan + (size_t)(q - p);
            if (!sp->esc) { /* a doubled quote stays inside: decided once the next byte is in view */
                if (i + 1 >= upto) { sp->scan = i; return 0; }
                if (buf[i + 1 - base_off] == sp->quote) { sp->scan = i + 2; continue; }
            }
            sp->in_q = 0;
            sp->scan = i + 1;
            continue;
        }
        if (sp->in_cmt || (sp->bol && sp->cmtn)) {
            if (!sp->in_cmt) {
                if (avail < sp->cmtn) return 0;
                sp->in_cmt = !memcmp(p, sp->cmt, sp->cmtn);
            }
            if (sp->in_cmt) { /* a comment line: to its end, which is a record boundary too */
                const char *nl = memchr(p, sp->eol, avail);
                if (!nl) { sp->scan = upto; return 0; }
                size_t i = sp->scan + (size_t)(nl - p);
                sp->in_cmt = 0;
                sp->bol = 1;
                sp->scan = i + 1;
                if (i >= sp->next) { *b = sp->scan; while (sp->next <= *b) sp->next += sp->bs; return 1; }
                continue;
            }
        }
        /* outside quotes: before the candidate only quotes matter (and line starts, with comments) */
        size_t lim = !sp->cmtn && sp->scan < sp->next ? KL_MIN(upto, sp->next) : upto;
        const char *nl = sp->cmtn || sp->scan >= sp->next ? memchr(p, sp->eol, lim - sp->scan) : NULL;
        size_t end = nl ? (size_t)(nl - p) : lim - sp->scan;
        const char *q = sp->quote ? memchr(p, sp->quote, end) : NULL;
        if (q) {
            size_t i = sp->scan + (size_t)(q - p);
            sp->in_q = quote_opens(sp, buf, base_off, i); /* else a stray quote: data */
            sp->bol = 0;
            sp->scan = i + 1;
            continue;
        }
        if (nl) {
            size_t i = sp->scan + end;
            sp->bol = 1;
            sp->scan = i + 1;
            if (i >= sp->next) { *b = sp->scan; while (sp->next <= *b) sp->next += sp->bs; return 1; }
            continue;
        }
        if (end) sp->bol = 0;
        sp->scan = lim;
    }
    return 0;
}

/* ---- header ---------------------------------------------------------------- */

/* Makes sure the window holds the byte at stream position pos + want (or the
 * source is done); a compressed source is decompressed further. */
static int window_has(source *s, size_t pos, size_t want, kl_err *e) {
    while (pos + want > s->len && !src_done(s)) {
        if (s->len > s->d.max_record + ((size_t)16 << 20)) break; /* bounded: a preamble line is a record */
        int rc = src_more(s, KL_MAX(s->len, (size_t)65536), 0, e);
        if (rc) return rc;
    }
    return KL_OK;
}

/* Skips the preamble: skip_rows physical lines, then comment lines and blank
 * lines, from *pos; *lines counts them. */
static int skip_preamble(source *s, size_t *pos, int64_t *lines, kl_err *e) {
    const kl_dialect *d = &s->d;
    const char eol = d->eol ? d->eol : '\n';
    const size_t cmtn = strlen(d->comment);
    int rc;
    for (int k = 0; k < d->skip_rows; k++) {
        const char *nl;
        for (;;) {
            nl = *pos < s->len ? memchr(s->buf + *pos, eol, s->len - *pos) : NULL;
            if (nl || src_done(s) || s->len > s->d.max_record + ((size_t)16 << 20)) break;
            if ((rc = src_more(s, KL_MAX(s->len, (size_t)65536), 0, e))) return rc;
        }
        if (!nl)
            return kl_err_setloc(e, KL_EPARSE, s->name, k + 1, 0, "skip_rows %d: the source has only %d lines",
                                 d->skip_rows, k);
        *pos = (size_t)(nl - s->buf) + 1;
        (*lines)++;
    }
    for (;;) {
        if ((rc = window_has(s, *pos, cmtn ? cmtn : 1, e))) return rc;
        if (*pos >= s->len) return KL_OK;
        const char c = s->buf[*pos];
        int blank = c == eol || (c == '\r' && eol == '\n');
        if (!blank && !(cmtn && s->len - *pos >= cmtn && !memcmp(s->buf + *pos, d->comment, cmtn))) return KL_OK;
        const char *nl;
        for (;;) {
            nl = memchr(s->buf + *pos, eol, s->len - *pos);
            if (nl || src_done(s) || s->len > s->d.max_record + ((size_t)16 << 20)) break;
            if ((rc = src_more(s, KL_MAX(s->len, (size_t)65536), 0, e))) return rc;
        }
        *pos = nl ? (size_t)(nl - s->buf) + 1 : s->len;
        (*lines)++;
    }
}

/* The header's column names: header_rows records from *pos, joined and
 * normalised by kl_csv_header_add / kl_csv_header_names (names: the
 * schema's; orig: the header's own text; n of each). */
static int read_header(source *s, size_t *pos, int64_t *lines, char ***names, char ***orig, size_t *n, kl_err *e) {
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_buf *cols = NULL;
    size_t nc = 0;
    int rc = KL_OK;
    *names = *orig = NULL;
    *n = 0;
    for (int h = 0; h < s->d.header_rows; h++) {
        size_t p;
        kl_err pe = {0};
        for (;;) { /* a compressed source: the record and a byte after it in the window */
            p = *pos;
            memset(&pe, 0, sizeof pe);
            rc = kl_csv_next(&s->d, s->buf, s->len, &p, &r, &pe);
            if ((!rc && p < s->len) || src_done(s) || s->len > s->d.max_record + 65536) break;
            if ((rc = src_more(s, KL_MAX(s->len, (size_t)65536), 0, e))) goto done;
        }
        if (rc == KL_CSV_END) {
            rc = kl_err_setloc(e, KL_EPARSE, s->name, *lines + 1, 0, "header: the source ends before header row %d",
                               h + 1);
            goto done;
        }
        if (rc) { rc = kl_err_setloc(e, KL_EPARSE, s->name, *lines + 1, 0, "header: %s", pe.msg); goto done; }
        if (kl_csv_header_add(&cols, &nc, &r)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        *lines += r.lines;
        *pos = p;
    }
    if (kl_csv_header_names(cols, nc, names, orig)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    *n = nc;
done:
    for (size_t i = 0; i < nc; i++) kl_buf_free(&cols[i]);
    free(cols);
    kl_csv_rec_free(&r);
    return rc;
}

static void free_names(char **v, size_t n) {
    if (v) for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int setup_source(ictx *x, int si, size_t *data_begin, kl_err *e) {
    source *s = &x->src.v[si];
    const kl_schema *sc = x->schema;
    const size_t nf = sc->n_fields;
    int *map = malloc(nf * sizeof *map);
    if (!map) return kl_err_set(e, KL_ENOMEM, "out of memory");
    x->colmap[si] = map;
    size_t bom = s->len >= 3 && !memcmp(s->buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
    size_t k = bom;
    int rc;
    for (;;) { /* a compressed source: decompress until a record starts */
        while (k < s->len && (s->buf[k] == '\n' || s->buf[k] == '\r' || s->buf[k] == ' ' || s->buf[k] == '\t')) k++;
        if (k < s->len || src_done(s)) break;
        if ((rc = src_more(s, 65536, 0, e))) return rc;
    }
    if (k >= s->len) return kl_err_set(e, KL_EPARSE, "%s: empty file (no records)", s->name);
    *data_begin = bom;
    x->hdr_lines[si] = 0;
    if (s->d.format == KL_FMT_JSONL) {
        for (size_t j = 0; j < nf; j++) map[j] = (int)j;
        x->nfile_cols[si] = (int)nf;
        return KL_OK;
    }
    size_t pos = bom;
    int64_t lines = 0;
    if ((rc = skip_preamble(s, &pos, &lines, e))) return rc;
    if (!s->d.header) { /* by position: the schema's columns in order (`_extra` is no column of the file) */
        int nfile = 0;
        for (size_t j = 0; j < nf; j++) map[j] = (int)j == x->extra_col ? -1 : nfile++;
        x->nfile_cols[si] = nfile;
        x->hdr_lines[si] = lines;
        *data_begin = pos;
        if (pos >= s->len) return kl_err_setloc(e, KL_EPARSE, s->name, lines + 1, 0, "no data rows after the preamble");
        return KL_OK;
    }
    char **names = NULL, **orig = NULL;
    size_t n = 0;
    if ((rc = read_header(s, &pos, &lines, &names, &orig, &n, e))) {
        free_names(names, n);
        free_names(orig, n);
        return rc;
    }
    x->hdr_lines[si] = lines;
    x->nfile_cols[si] = (int)n;
    for (size_t j = 0; j < nf && !rc; j++) {
        map[j] = -1;
        if ((int)j == x->extra_col) continue;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(sc->fields[j].name, names[i])) { map[j] = (int)i; break; }
        if (map[j] < 0)
            rc = kl_err_setloc(e, KL_EINVAL, s->name, lines, 0, "column '%s' of the schema is missing from the header",
                               sc->fields[j].name);
    }
    kl_buf rn;
    kl_buf_init(&rn);
    for (size_t i = 0; i < n && !rc; i++) {
        int used = 0;
        for (size_t j = 0; j < nf; j++) used |= map[j] == (int)i;
        if (!used) kl_log(KL_LOG_WARN, "ingest", "%s: column '%s' is not in the schema; ignored", s->name, names[i]);
        if (strcmp(names[i], orig[i])) { /* the manifest keeps the header's own name */
            kl_buf_puts(&rn, rn.len ? ", " : "{");
            kl_buf_json_str(&rn, names[i]);
            kl_buf_puts(&rn, ": ");
            kl_buf_json_str(&rn, orig[i]);
        }
    }
    if (rn.len) { kl_buf_puts(&rn, "}"); x->renamed[si] = kl_buf_take(&rn); }
    else kl_buf_free(&rn);
    free_names(names, n);
    free_names(orig, n);
    if (rc) return rc;
    *data_begin = pos;
    if (pos >= s->len) return kl_err_setloc(e, KL_EPARSE, s->name, lines + 1, 0, "no data rows after the header");
    return KL_OK;
}

/* ==================================================================
 * Uniqueness, statistics
 * ================================================================== */

typedef struct { uint64_t *slot; size_t cap, n; } hset;

/* Returns 1 if h was already present. Hash 0 is remapped. */
static int hset_add(hset *s, uint64_t h, int *err) {
    if (!h) h = 1;
    if (s->n * 2 >= s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 1 << 16;
        uint64_t *ns = calloc(nc, sizeof *ns);
        if (!ns) { *err = KL_ENOMEM; return 0; }
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) {
                size_t k = s->slot[i] & (nc - 1);
                while (ns[k]) k = (k + 1) & (nc - 1);
                ns[k] = s->slot[i];
            }
        free(s->slot);
        s->slot = ns;
        s->cap = nc;
    }
    size_t k = h & (s->cap - 1);
    while (s->slot[k]) {
        if (s->slot[k] == h) return 1;
        k = (k + 1) & (s->cap - 1);
    }
    s->slot[k] = h;
    s->n++;
    return 0;
}

static uint64_t value_hash(const kl_column *c, size_t i) {
    if (c->type == KL_COL_STRING) {
        size_t n;
        const char *s = kl_column_get_str(c, i, &n);
        return kl_hash64(s, n);
    }
    if (c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64) {
        double d = kl_column_get_f64(c, i);
        if (d == 0) d = 0; /* -0 == 0 */
        return kl_hash64(&d, sizeof d);
    }
    int64_t v = kl_column_get_i64(c, i);
    return kl_hash64(&v, sizeof v);
}

/* New column with rows idx[0..n) of c. */
static int gather(const kl_column *c, const uint32_t *idx, size_t n, kl_column **out) {
    kl_column *g;
    *out = NULL;
    if (kl_column_new(c->name, c->type, c->nullable, n ? n : 1, &g, NULL)) return KL_ENOMEM;
    int rc = KL_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        size_t i = idx[k];
        if (kl_column_is_null(c, i)) rc = kl_column_push_null(g);
        else if (c->type == KL_COL_STRING) {
            size_t sl;
            const char *s = kl_column_get_str(c, i, &sl);
            rc = kl_column_push_str(g, s, sl);
        } else if (c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64) rc = kl_column_push_f64(g, kl_column_get_f64(c, i));
        else rc = kl_column_push_i64(g, kl_column_get_i64(c, i));
    }
    if (rc) { kl_column_free(g); return KL_ENOMEM; }
    *out = g;
    return KL_OK;
}

static int check_unique(ictx *x, kl_err *e) {
    const kl_schema *s = x->schema;
    int rc = KL_OK;
    for (size_t j = 0; j < s->n_fields && !rc; j++) {
        if (!s->fields[j].unique) continue;
        hset set = {0};
        for (size_t ci = 0; ci < x->nch && !rc; ci++) {
            chunk *c = &x->ch[ci];
            uint32_t *keep = NULL;
            size_t nkeep = 0;
            for (size_t i = 0; i < c->rows; i++) {
                int err = 0;
                int dup = !kl_column_is_null(c->cols[j], i) && hset_add(&set, value_hash(c->cols[j], i), &err);
                if (err) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
                if (dup && !keep) {
                    if (!(keep = malloc(c->rows * sizeof *keep))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
                    for (size_t k = 0; k < i; k++) keep[nkeep++] = (uint32_t)k;
                }
                if (dup) {
                    int64_t off = c->row_off[i];
                    const char *raw = c->base + ((size_t)off - c->base_off), *cend = c->base + (c->end - c->base_off);
                    const char *nl = memchr(raw, '\n', (size_t)(cend - raw));
                    size_t rawn = nl ? (size_t)(nl - raw) : (size_t)(cend - raw);
                    char msg[300];
                    snprintf(msg, sizeof msg, "column %s: duplicate value in a unique column", s->fields[j].name);
                    if (add_reject(c, c->row_line[i], off, (int)j, KL_REJ_UNIQUE, msg, raw, rawn)) {
                        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                        break;
                    }
                } else if (keep) {
                    keep[nkeep++] = (uint32_t)i;
                }
            }
            if (keep && !rc) { /* compact the chunk */
                for (size_t k = 0; k < s->n_fields && !rc; k++) {
                    kl_column *g;
                    if (gather(c->cols[k], keep, nkeep, &g)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
                    kl_column_free(c->cols[k]);
                    c->cols[k] = g;
                }
                for (size_t k = 0; k < nkeep; k++) {
                    c->row_line[k] = c->row_line[keep[k]];
                    c->row_off[k] = c->row_off[keep[k]];
                }
                c->rows = nkeep;
            }
            free(keep);
        }
        free(set.slot);
    }
    return rc;
}

static void stat_free(colstat *st) {
    free(st->smin);
    free(st->smax);
    for (size_t k = 0; k < st->nvocab; k++) free(st->vocab[k].s);
    free(st->vocab);
}

static int vocab_add(colstat *st, const char *s, size_t n) {
    /* linear scan; categories are few (the cap keeps this bounded) */
    for (size_t k = 0; k < st->nvocab; k++)
        if (st->vocab[k].n == n && !memcmp(st->vocab[k].s, s, n)) return KL_OK;
    if (st->nvocab >= VOCAB_MAX) { st->vocab_overflow = 1; return KL_OK; }
    if (st->nvocab == st->capvocab) {
        size_t nc = st->capvocab ? st->capvocab * 2 : 16;
        lstr *v = realloc(st->vocab, nc * sizeof *v);
        if (!v) return KL_ENOMEM;
        st->vocab = v;
        st->capvocab = nc;
    }
    char *p = malloc(n + 1);
    if (!p) return KL_ENOMEM;
    memcpy(p, s, n);
    p[n] = 0;
    st->vocab[st->nvocab++] = (lstr){p, n};
    return KL_OK;
}

static int set_str(char **dst, size_t *dn, const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return KL_ENOMEM;
    memcpy(p, s, n);
    p[n] = 0;
    free(*dst);
    *dst = p;
    *dn = n;
    return KL_OK;
}

static int strcmp_n(const char *a, size_t an, const char *b, size_t bn) {
    int r = memcmp(a, b, KL_MIN(an, bn));
    return r ? r : (an < bn ? -1 : an > bn);
}

static int cmp_lstr(const void *a, const void *b) {
    const lstr *x = a, *y = b;
    return strcmp_n(x->s, x->n, y->s, y->n);
}

static int chunk_stats(ictx *x, chunk *c) {
    const kl_schema *s = x->schema;
    if (!(c->st = calloc(s->n_fields, sizeof *c->st))) return KL_ENOMEM;
    for (size_t j = 0; j < s->n_fields; j++) {
        const kl_column *col = c->cols[j];
        colstat *st = &c->st[j];
        const kl_type t = s->fields[j].type;
        const size_t n = col->len;
        const uint8_t *valid = col->valid;
        st->count = (int64_t)n;
        if (col->type == KL_COL_STRING) {
            uint64_t cache[64] = {0}; /* recently seen values: skip repeated work for low-cardinality columns */
            for (size_t i = 0; i < n; i++) {
                if (valid && !valid[i]) { st->nulls++; continue; }
                size_t vn = (size_t)(col->offsets[i + 1] - col->offsets[i]);
                const char *v = col->data + col->offsets[i];
                uint64_t h = kl_hash64(v, vn) | 1;
                if (cache[h & 63] == h) continue;
                cache[h & 63] = h;
                kl_hll_add_hash(&st->hll, h);
                if (!st->has || strcmp_n(v, vn, st->smin, st->smin_n) < 0) { if (set_str(&st->smin, &st->smin_n, v, vn)) return KL_ENOMEM; }
                if (!st->has || strcmp_n(v, vn, st->smax, st->smax_n) > 0) { if (set_str(&st->smax, &st->smax_n, v, vn)) return KL_ENOMEM; }
                st->has = 1;
                if (t == KL_T_CATEGORY && vocab_add(st, v, vn)) return KL_ENOMEM;
            }
        } else if (col->type == KL_COL_FLOAT32 || col->type == KL_COL_FLOAT64) {
            double mn = INFINITY, mx = -INFINITY;
            int has = 0;
            for (size_t i = 0; i < n; i++) {
                if (valid && !valid[i]) { st->nulls++; continue; }
                double v = col->type == KL_COL_FLOAT64 ? ((const double *)col->values)[i] : ((const float *)col->values)[i];
                double hv = v == 0 ? 0 : v;
                uint64_t bits;
                memcpy(&bits, &hv, 8);
                kl_hll_add_hash(&st->hll, kl_hash64(&bits, 8));
                if (v < mn) mn = v;
                if (v > mx) mx = v;
                has |= v == v;
            }
            if (has) { st->has = 1; st->dmin = mn; st->dmax = mx; }
        } else {
            int64_t mn = INT64_MAX, mx = INT64_MIN;
            int has = 0;
            for (size_t i = 0; i < n; i++) {
                if (valid && !valid[i]) { st->nulls++; continue; }
                int64_t v;
                switch (col->type) {
                case KL_COL_BOOL: v = ((const uint8_t *)col->values)[i]; break;
                case KL_COL_INT32: case KL_COL_DATE: v = ((const int32_t *)col->values)[i]; break;
                default: v = ((const int64_t *)col->values)[i]; break;
                }
                kl_hll_add_hash(&st->hll, kl_hash64(&v, 8));
                if (v < mn) mn = v;
                if (v > mx) mx = v;
                has = 1;
            }
            if (has) { st->has = 1; st->imin = mn; st->imax = mx; }
        }
    }
    return KL_OK;
}

static void stats_worker(void *ctx, size_t b, size_t e_, int chunk_idx) {
    ictx *x = ctx;
    for (;;) {
        size_t i = atomic_fetch_add(&x->next, 1);
        if (i >= x->nch) break;
        chunk *c = &x->ch[i];
        if (chunk_stats(x, c)) { c->rc = KL_ENOMEM; kl_err_set(&c->err, KL_ENOMEM, "out of memory"); }
    }
}

/* Merges chunk statistics into tot[n_fields] (in chunk order). */
static int merge_stats(ictx *x, colstat *tot) {
    const kl_schema *s = x->schema;
    for (size_t j = 0; j < s->n_fields; j++) {
        colstat *t = &tot[j];
        for (size_t ci = 0; ci < x->nch; ci++) {
            colstat *c = &x->ch[ci].st[j];
            t->nulls += c->nulls;
            t->count += c->count;
            kl_hll_merge(&t->hll, &c->hll);
            if (c->has) {
                if (c->smin) {
                    if (!t->has || strcmp_n(c->smin, c->smin_n, t->smin, t->smin_n) < 0) { if (set_str(&t->smin, &t->smin_n, c->smin, c->smin_n)) return KL_ENOMEM; }
                    if (!t->has || strcmp_n(c->smax, c->smax_n, t->smax, t->smax_n) > 0) { if (set_str(&t->smax, &t->smax_n, c->smax, c->smax_n)) return KL_ENOMEM; }
                } else {
                    if (!t->has || c->imin < t->imin) t->imin = c->imin;
                    if (!t->has || c->imax > t->imax) t->imax = c->imax;
                    if (!t->has || c->dmin < t->dmin) t->dmin = c->dmin;
                    if (!t->has || c->dmax > t->dmax) t->dmax = c->dmax;
                }
                t->has = 1;
            }
            for (size_t k = 0; k < c->nvocab; k++)
                if (vocab_add(t, c->vocab[k].s, c->vocab[k].n)) return KL_ENOMEM;
            t->vocab_overflow |= c->vocab_overflow;
        }
        if (t->nvocab) qsort(t->vocab, t->nvocab, sizeof *t->vocab, cmp_lstr);
    }
    return KL_OK;
}

/* ==================================================================
 * Output files: plan (partitions or chunk groups), write, hash
 * ================================================================== */

#define CHUNKS_PER_FILE 6 /* unpartitioned: part files of 6 chunks (24 MiB of CSV by default) */

typedef struct { uint32_t chunk, row; } rowref;

typedef struct outfile {
    char *rel;            /* "part-00000.parquet" or "ts=2023-11-14/part-00000.parquet" */
    char *pkey, *pval;    /* partition column and value (NULL when unpartitioned) */
    size_t c0, c1;        /* unpartitioned: chunks [c0, c1) */
    rowref *rows;         /* partitioned: the rows, in order */
    size_t nrows, caprows;
    int64_t rows_total;
    char sha[65];
    int64_t bytes;
    int reused;
    int rc;
    kl_err err;
} outfile;

typedef struct {
    ictx *x;
    outfile *f;
    size_t nf;
    const char *dir;      /* staging dir */
    kl_pq_write_opts wo;
    atomic_size_t next;
} wctx;

static void hive_escape(kl_buf *b, const char *s) {
    if (!*s) { kl_buf_puts(b, "__HIVE_DEFAULT_PARTITION__"); return; }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || strchr("\"#%'*/:=?\\\x7f{[]^<>|", *p) || (p == (const unsigned char *)s && *p == '.'))
            kl_buf_printf(b, "%%%02X", *p);
        else
            kl_buf_append(b, p, 1);
    }
}

static int write_one(wctx *w, outfile *f) {
    ictx *x = w->x;
    const size_t nf = x->schema->n_fields;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", w->dir, f->rel);
    kl_err *e = &f->err;
    struct stat st;
    if (stat(path, &st) == 0) { /* finished by an earlier (killed) run: reuse */
        f->reused = 1;
        f->bytes = st.st_size;
        return kl_sha256_file_hex(path, f->sha, e);
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    int rc = kl_mkdir_p(dir, e);
    if (rc) return rc;
    kl_pq_writer *pw = NULL;
    kl_column *const *schema_cols = x->ch[f->pkey ? f->rows[0].chunk : f->c0].cols;
    if ((rc = kl_pq_writer_open(path, schema_cols, nf, &w->wo, &pw, e))) return rc;
    kl_column **tmp = calloc(nf, sizeof *tmp);
    uint32_t *idx = NULL;
    if (!tmp) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    if (!f->pkey) {
        for (size_t ci = f->c0; ci < f->c1; ci++) {
            if (!x->ch[ci].rows) continue;
            if ((rc = kl_pq_writer_write(pw, x->ch[ci].cols, nf, e))) goto fail;
        }
    } else {
        if (!(idx = malloc(f->nrows * sizeof *idx))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
        for (size_t k = 0; k < f->nrows;) { /* one batch per source chunk */
            size_t k1 = k, n = 0;
            uint32_t ci = f->rows[k].chunk;
            while (k1 < f->nrows && f->rows[k1].chunk == ci) idx[n++] = f->rows[k1++].row;
            for (size_t j = 0; j < nf; j++)
                if (gather(x->ch[ci].cols[j], idx, n, &tmp[j])) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
            if ((rc = kl_pq_writer_write(pw, tmp, nf, e))) goto fail;
            for (size_t j = 0; j < nf; j++) { kl_column_free(tmp[j]); tmp[j] = NULL; }
            k = k1;
        }
    }
    kl_pq_file_info info = {0};
    rc = kl_pq_writer_close(pw, &info, e);
    pw = NULL;
    if (rc) goto fail;
    f->bytes = (int64_t)info.bytes;
    kl_pq_file_info_clear(&info);
    rc = kl_sha256_file_hex(path, f->sha, e);
fail:
    if (pw) kl_pq_writer_abort(pw);
    if (tmp) for (size_t j = 0; j < nf; j++) kl_column_free(tmp[j]);
    free(tmp);
    free(idx);
    if (rc) kl_err_prefix(e, "writing %s", f->rel);
    return rc;
}

/* Test hook (build/keel-hooks only): KEEL_TEST_KILL_AFTER_FILES=N makes the
 * process SIGKILL itself after N Parquet files were finished
 * (crash-consistency tests). */
static atomic_int files_done;

static void write_file(wctx *w, outfile *f) {
    int64_t kill_after = kl__test_hook("KEEL_TEST_KILL_AFTER_FILES");
    f->rc = write_one(w, f);
    if (kill_after >= 0 && !f->rc && !f->reused && atomic_fetch_add(&files_done, 1) + 1 >= kill_after) raise(SIGKILL);
}

static void write_worker(void *ctx, size_t b, size_t e_, int chunk_idx) {
    wctx *w = ctx;
    for (;;) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->nf) break;
        write_file(w, &w->f[i]);
    }
}

static void parse_one(ictx *x, chunk *c) {
    c->rc = chunk_init_cols(x, c);
    if (!c->rc) c->rc = x->src.v[c->src].d.format == KL_FMT_JSONL ? parse_jsonl_chunk(x, c) : parse_csv_chunk(x, c);
    if (x->prog) kl_progress_add(x->prog, c->end - c->begin);
    if (!c->rc && chunk_stats(x, c)) c->rc = KL_ENOMEM;
    if (c->rc == KL_ENOMEM) kl_err_set(&c->err, KL_ENOMEM, "out of memory while parsing");
    else if (c->rc && !c->err.code) kl_err_set(&c->err, c->rc, "parse failed");
}

/* Streaming (unpartitioned, no unique columns): each work item is one part
 * file's group of chunks: parse + validate + statistics, write the file into
 * staging, free the columns. Memory stays at about one group per thread and
 * parsing overlaps encoding. Validation verdicts come after all groups; a
 * failure removes the staging folder. */
static void stream_worker(void *ctx, size_t b, size_t e_, int chunk_idx) {
    wctx *w = ctx;
    ictx *x = w->x;
    for (;;) {
        size_t g = atomic_fetch_add(&w->next, 1);
        if (g >= w->nf) break;
        outfile *f = &w->f[g];
        int bad = 0;
        for (size_t ci = f->c0; ci < f->c1; ci++) {
            parse_one(x, &x->ch[ci]);
            bad |= x->ch[ci].rc != 0;
            f->rows_total += (int64_t)x->ch[ci].rows;
        }
        if (!bad && f->rows_total) write_file(w, f);
        for (size_t ci = f->c0; ci < f->c1; ci++)
            if (x->ch[ci].cols)
                for (size_t j = 0; j < x->schema->n_fields; j++) { kl_column_free(x->ch[ci].cols[j]); x->ch[ci].cols[j] = NULL; }
    }
}

static void outfiles_free(outfile *f, size_t n) {
    for (size_t i = 0; i < n; i++) { free(f[i].rel); free(f[i].pkey); free(f[i].pval); free(f[i].rows); }
    free(f);
}

/* ---- the chunk pipeline: cut, parse in batches, release ------------------ */

static void chunk_release_text(ictx *x, chunk *c) {
    if (!c->own) return;
    kl_mem_free(c->own);
    c->own = NULL;
    c->base = NULL;
    x->owned_live--;
}

/* Parses what is pending: streaming, the part-file groups complete so far
 * (all when final); otherwise every chunk not yet parsed. Chunk texts a
 * compressed source handed over are freed once parsed (kept only for the
 * unique checks, which quote the raw line of a duplicate). */
static int flush_chunks(ictx *x, int final, kl_err *e) {
    size_t c0, c1;
    if (x->streaming) {
        size_t ng = final ? (x->nch + CHUNKS_PER_FILE - 1) / CHUNKS_PER_FILE : x->nch / CHUNKS_PER_FILE;
        if (ng <= x->nfiles) return KL_OK;
        if (ng > x->capfiles) {
            size_t nc = KL_MAX(ng, x->capfiles * 2);
            outfile *f = realloc(x->files, nc * sizeof *f);
            if (!f) return kl_err_set(e, KL_ENOMEM, "out of memory");
            memset(f + x->capfiles, 0, (nc - x->capfiles) * sizeof *f);
            x->files = f;
            x->capfiles = nc;
        }
        for (size_t g = x->nfiles; g < ng; g++) {
            x->files[g].c0 = g * CHUNKS_PER_FILE;
            x->files[g].c1 = KL_MIN(x->files[g].c0 + CHUNKS_PER_FILE, x->nch);
            if (asprintf(&x->files[g].rel, "part-%05zu.parquet", g) < 0) {
                x->files[g].rel = NULL;
                return kl_err_set(e, KL_ENOMEM, "out of memory");
            }
        }
        wctx w = {x, x->files, ng, x->staging, x->wo, x->nfiles};
        kl_pool_parallel_for(NULL, (size_t)kl_pool_threads(kl_pool_default()), 1, stream_worker, &w);
        c0 = x->files[x->nfiles].c0;
        c1 = x->files[ng - 1].c1;
        x->nfiles = ng;
    } else {
        if (x->parsed == x->nch) return KL_OK;
        atomic_store(&x->next, x->parsed);
        kl_pool_parallel_for(NULL, (size_t)kl_pool_threads(kl_pool_default()), 1, parse_worker, x);
        c0 = x->parsed;
        c1 = x->nch;
    }
    x->parsed = c1;
    for (size_t i = c0; i < c1; i++) {
        if (x->ch[i].rc) {
            if (e) *e = x->ch[i].err;
            return x->ch[i].rc;
        }
        if (!x->need_row_pos) chunk_release_text(x, &x->ch[i]);
    }
    return KL_OK;
}

/* Adds the chunk [begin, end) of source si. A compressed source hands its
 * window to the chunk and keeps the bytes after `end` in a new one. */
static int cut_chunk(ictx *x, int si, size_t begin, size_t end, size_t min_cap, kl_err *e) {
    source *s = &x->src.v[si];
    if (x->nch == x->capch) {
        size_t nc = x->capch ? x->capch * 2 : 64;
        chunk *ch = realloc(x->ch, nc * sizeof *ch);
        if (!ch) return kl_err_set(e, KL_ENOMEM, "out of memory");
        x->ch = ch;
        x->capch = nc;
    }
    chunk *c = &x->ch[x->nch];
    memset(c, 0, sizeof *c);
    c->src = si;
    c->begin = begin;
    c->end = end;
    c->base = s->buf;
    c->base_off = s->off;
    if (s->z) {
        size_t tail = s->off + s->len - end;
        char *nb = kl_mem_alloc(KL_MAX(min_cap, tail), KL_TAG_DATASET);
        if (!nb) return kl_err_set(e, KL_ENOMEM, "%s: out of memory for a decompression window", s->name);
        memcpy(nb, s->buf + (end - s->off), tail);
        c->own = s->buf;
        s->buf = nb;
        s->cap = KL_MAX(min_cap, tail);
        s->len = tail;
        s->off = end;
        x->owned_live++;
    }
    x->nch++;
    if (x->prog) kl_progress_set_total(x->prog, x->prog_total += s->z ? end - begin : 0);
    if (s->z && !x->need_row_pos && x->owned_live >= x->batch) return flush_chunks(x, 0, e);
    return KL_OK;
}

/* Cuts source si into chunks from `begin`: a plain file in one pass over its
 * mapping, a compressed one window by window as it is decompressed (a
 * window holds about one chunk: memory does not grow with the source). */
static int cut_source(ictx *x, int si, size_t begin, size_t bs, kl_err *e) {
    source *s = &x->src.v[si];
    splitter sp;
    split_init(&sp, begin, bs, &s->d);
    const size_t step = KL_MIN(bs, (size_t)1 << 20), wcap = bs + 2 * step;
    const size_t wmax = bs + 2 * KL_MAX(s->d.max_record, (size_t)1 << 20) + 2 * step;
    size_t cur = begin, b;
    int rc;
    for (;;) {
        while (split_next(&sp, s->buf, s->off, s->off + s->len, &b)) {
            if ((rc = cut_chunk(x, si, cur, b, wcap, e))) return rc;
            cur = b;
        }
        if (src_done(s)) break;
        if (s->len > wmax) {
            char bb[32];
            return kl_err_set(e, KL_EPARSE, "%s: no record boundary in %s after byte %zu (an unclosed quote?)", s->name,
                              kl_fmt_bytes(s->len, bb, sizeof bb), cur);
        }
        if ((rc = src_more(s, step, wcap, e))) return rc;
    }
    return cut_chunk(x, si, cur, s->off + s->len, 0, e);
}

/* Partition value of row i of column c, as text. */
static void part_value(const kl_column *c, size_t i, kl_type t, char *buf, size_t n, const char **s, size_t *sl) {
    if (kl_column_is_null(c, i)) { *s = ""; *sl = 0; return; }
    if (t == KL_T_DATE || t == KL_T_TIMESTAMP) {
        int64_t v = kl_column_get_i64(c, i);
        int64_t days = t == KL_T_DATE ? v : (v >= 0 ? v / 86400000000LL : -((-v + 86400000000LL - 1) / 86400000000LL));
        int y, m, d;
        kl_civil_from_days(days, &y, &m, &d);
        snprintf(buf, n, "%04d-%02d-%02d", y, m, d);
        *s = buf;
        *sl = strlen(buf);
    } else {
        *s = kl_column_get_str(c, i, sl);
    }
}

static int cmp_outfile(const void *a, const void *b) {
    return strcmp(((const outfile *)a)->rel, ((const outfile *)b)->rel);
}

static int plan_files(ictx *x, int pcol, outfile **out, size_t *nout, kl_err *e) {
    outfile *f = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    *nout = 0;
    if (pcol < 0) {
        for (size_t c0 = 0; c0 < x->nch; c0 += CHUNKS_PER_FILE) {
            size_t c1 = KL_MIN(c0 + CHUNKS_PER_FILE, x->nch);
            int64_t rows = 0;
            for (size_t ci = c0; ci < c1; ci++) rows += (int64_t)x->ch[ci].rows;
            if (!rows) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                outfile *nf = realloc(f, cap * sizeof *nf);
                if (!nf) goto nomem;
                f = nf;
            }
            memset(&f[n], 0, sizeof f[n]);
            f[n].c0 = c0;
            f[n].c1 = c1;
            f[n].rows_total = rows;
            if (asprintf(&f[n].rel, "part-%05zu.parquet", n) < 0) { f[n].rel = NULL; goto nomem; }
            n++;
        }
    } else {
        const kl_type t = x->schema->fields[pcol].type;
        const char *pname = x->schema->fields[pcol].name;
        size_t last = SIZE_MAX;
        for (size_t ci = 0; ci < x->nch; ci++) {
            const kl_column *c = x->ch[ci].cols[pcol];
            for (size_t i = 0; i < x->ch[ci].rows; i++) {
                char buf[32];
                const char *v;
                size_t vl;
                part_value(c, i, t, buf, sizeof buf, &v, &vl);
                size_t k = SIZE_MAX;
                if (last != SIZE_MAX && strlen(f[last].pval) == vl && !memcmp(f[last].pval, v, vl)) k = last;
                for (size_t q = 0; q < n && k == SIZE_MAX; q++)
                    if (strlen(f[q].pval) == vl && !memcmp(f[q].pval, v, vl)) k = q;
                if (k == SIZE_MAX) {
                    if (n >= 10000) { kl_err_set(e, KL_ERANGE, "partitioning by %s makes more than 10000 partitions", pname); goto fail; }
                    if (n == cap) {
                        cap = cap ? cap * 2 : 16;
                        outfile *nf = realloc(f, cap * sizeof *nf);
                        if (!nf) goto nomem;
                        f = nf;
                    }
                    memset(&f[n], 0, sizeof f[n]);
                    if (!(f[n].pval = strndup(v, vl)) || !(f[n].pkey = strdup(pname))) { n++; goto nomem; }
                    kl_buf b;
                    kl_buf_init(&b);
                    hive_escape(&b, pname);
                    kl_buf_puts(&b, "=");
                    hive_escape(&b, f[n].pval);
                    kl_buf_puts(&b, "/part-00000.parquet");
                    if (b.failed) { kl_buf_free(&b); n++; goto nomem; }
                    f[n].rel = kl_buf_take(&b);
                    k = n++;
                }
                last = k;
                outfile *o = &f[k];
                if (o->nrows == o->caprows) {
                    size_t nc = o->caprows ? o->caprows * 2 : 1024;
                    rowref *r = realloc(o->rows, nc * sizeof *r);
                    if (!r) goto nomem;
                    o->rows = r;
                    o->caprows = nc;
                }
                o->rows[o->nrows++] = (rowref){(uint32_t)ci, (uint32_t)i};
                o->rows_total++;
            }
        }
        qsort(f, n, sizeof *f, cmp_outfile);
    }
    *out = f;
    *nout = n;
    return KL_OK;
nomem:
    kl_err_set(e, KL_ENOMEM, "out of memory");
fail:
    outfiles_free(f, n);
    return e ? e->code : KL_ENOMEM;
}

/* ==================================================================
 * Manifest, rejects, publish
 * ================================================================== */

static void json_stat_value(kl_buf *b, kl_type t, const colstat *st, int is_max) {
    char tmp[64];
    switch (t) {
    case KL_T_FLOAT32: case KL_T_FLOAT64: {
        double v = is_max ? st->dmax : st->dmin;
        if (isfinite(v)) kl_buf_printf(b, "%.17g", v);
        else kl_buf_printf(b, "\"%s\"", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        break;
    }
    case KL_T_BOOL: kl_buf_puts(b, (is_max ? st->imax : st->imin) ? "true" : "false"); break;
    case KL_T_DATE: {
        int y, m, d;
        kl_civil_from_days(is_max ? st->imax : st->imin, &y, &m, &d);
        kl_buf_printf(b, "\"%04d-%02d-%02d\"", y, m, d);
        break;
    }
    case KL_T_TIMESTAMP:
        kl_time_rfc3339(is_max ? st->imax : st->imin, tmp, sizeof tmp);
        kl_buf_printf(b, "\"%s\"", tmp);
        break;
    case KL_T_STRING: case KL_T_CATEGORY: kl_buf_json_strn(b, is_max ? st->smax : st->smin, is_max ? st->smax_n : st->smin_n); break;
    default: kl_buf_printf(b, "%lld", (long long)(is_max ? st->imax : st->imin)); break;
    }
}

/* The part files in the one manifest shape: name -> {sha256, bytes, rows[,
 * partition]}. */
static int manifest_files(const outfile *f, size_t nf, kl_buf *b) {
    kl_manifest_files m = {0};
    int rc = KL_OK;
    for (size_t i = 0; i < nf && !rc; i++) {
        cJSON *x = f[i].pkey ? cJSON_CreateObject() : NULL, *pv = x ? cJSON_AddObjectToObject(x, "partition") : NULL;
        if (pv) cJSON_AddStringToObject(pv, f[i].pkey, f[i].pval);
        rc = f[i].pkey && !pv ? KL_ENOMEM
                              : kl_manifest_push(&m, f[i].rel, f[i].sha, f[i].bytes, f[i].rows_total, x, NULL);
        cJSON_Delete(x);
    }
    if (!rc) rc = kl_manifest_json(&m, "  ", b);
    kl_manifest_files_free(&m);
    return rc;
}

/* The manifest body (everything but version_id and keel_version), canonical. */
static int manifest_body(ictx *x, const char *ingest_key, outfile *f, size_t nf, colstat *tot, int64_t accepted,
                         int64_t rejected, const int64_t *by_kind, int pcol, kl_buf *b) {
    const kl_ingest_opts *o = x->o;
    const kl_schema *s = x->schema;
    kl_buf_puts(b, "\"format\": \"keel-dataset-1\",\n  \"ingest_key\": ");
    kl_buf_json_str(b, ingest_key);
    kl_buf_puts(b, ",\n  \"schema\": ");
    kl_buf_puts(b, s->text);
    kl_buf_puts(b, ",\n  \"partition_by\": ");
    if (pcol >= 0) kl_buf_json_str(b, s->fields[pcol].name);
    else kl_buf_puts(b, "null");
    kl_buf_printf(b, ",\n  \"codec\": \"%s\",\n  \"sources\": [", o->codec ? o->codec : "zstd");
    for (size_t i = 0; i < x->src.n; i++) {
        const source *sr = &x->src.v[i];
        kl_buf_puts(b, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        kl_buf_json_str(b, sr->name);
        kl_buf_printf(b, ", \"sha256\": \"%s\", \"bytes\": %lld", sr->sha, (long long)sr->bytes);
        if (x->renamed && x->renamed[i]) { kl_buf_puts(b, ", \"header_names\": "); kl_buf_puts(b, x->renamed[i]); }
        kl_buf_puts(b, "}");
    }
    kl_buf_printf(b, "\n  ],\n  \"rows\": {\"read\": %lld, \"accepted\": %lld, \"rejected\": %lld},\n",
                  (long long)(accepted + rejected), (long long)accepted, (long long)rejected);
    kl_buf_puts(b, "  \"rejects\": {");
    int first = 1;
    for (int k = 0; k < KL_REJ_COUNT; k++)
        if (by_kind[k]) {
            kl_buf_printf(b, "%s\"%s\": %lld", first ? "" : ", ", kl_reject_kind_name((kl_reject_kind)k), (long long)by_kind[k]);
            first = 0;
        }
    kl_buf_puts(b, "}");
    int64_t nrep = 0;
    for (int k = 0; k < KL_REJ_COUNT && x->repairs; k++) nrep += x->repairs[k];
    if (nrep) { /* --on-error recover: repairs by kind (warning rows of the rejects file) */
        kl_buf_puts(b, ",\n  \"repairs\": {");
        for (int k = 0, fst = 1; k < KL_REJ_COUNT; k++)
            if (x->repairs[k]) {
                kl_buf_printf(b, "%s\"%s\": %lld", fst ? "" : ", ", kl_reject_kind_name((kl_reject_kind)k),
                              (long long)x->repairs[k]);
                fst = 0;
            }
        kl_buf_puts(b, "}");
    }
    kl_buf_printf(b, "%s,\n  \"files\": ", rejected || nrep ? ",\n  \"rejects_file\": \"rejects.jsonl\"" : "");
    if (manifest_files(f, nf, b)) return KL_ENOMEM;
    kl_buf_puts(b, ",\n  \"columns\": [");
    for (size_t j = 0; j < s->n_fields; j++) {
        const colstat *st = &tot[j];
        kl_buf_puts(b, j ? ",\n    {\"name\": " : "\n    {\"name\": ");
        kl_buf_json_str(b, s->fields[j].name);
        kl_buf_printf(b, ", \"type\": \"%s\", \"rows\": %lld, \"nulls\": %lld", kl_type_name(s->fields[j].type),
                      (long long)st->count, (long long)st->nulls);
        if (st->has) {
            kl_buf_puts(b, ", \"min\": ");
            json_stat_value(b, s->fields[j].type, st, 0);
            kl_buf_puts(b, ", \"max\": ");
            json_stat_value(b, s->fields[j].type, st, 1);
        }
        kl_buf_printf(b, ", \"distinct_approx\": %.0f", st->has ? kl_hll_estimate(&st->hll) : 0.0);
        if (s->fields[j].type == KL_T_CATEGORY) {
            kl_buf_puts(b, ", \"vocabulary\": [");
            for (size_t k = 0; k < st->nvocab; k++) {
                if (k) kl_buf_puts(b, ", ");
                kl_buf_json_strn(b, st->vocab[k].s, st->vocab[k].n);
            }
            kl_buf_printf(b, "]%s", st->vocab_overflow ? ", \"vocabulary_truncated\": true" : "");
        }
        kl_buf_puts(b, "}");
    }
    kl_buf_puts(b, "\n  ]\n}\n");
    return b->failed ? KL_ENOMEM : KL_OK;
}

/* Absolute line of a reject (fix-up from chunk-relative). */
static int64_t abs_line(ictx *x, size_t ci, int64_t rel) {
    int64_t line = x->hdr_lines[x->ch[ci].src] + 1 + rel;
    for (size_t k = ci; k-- > 0 && x->ch[k].src == x->ch[ci].src;) line += x->ch[k].lines;
    return line;
}

/* One line of the rejects file: a rejected row, or (warn) a repair of
 * --on-error recover with "warning": true and the repair in "repair". */
static void reject_json(ictx *x, const reject *r, int64_t line, int warn, kl_buf *b) {
    kl_buf_puts(b, "{\"source\": ");
    kl_buf_json_str(b, x->src.v[r->src].name);
    kl_buf_printf(b, ", \"line\": %lld, \"offset\": %lld, \"column\": ", (long long)line, (long long)r->offset);
    if (r->col >= 0) kl_buf_json_str(b, x->schema->fields[r->col].name);
    else kl_buf_puts(b, "null");
    kl_buf_printf(b, ", \"kind\": \"%s\", %s", kl_reject_kind_name(r->kind),
                  warn ? "\"warning\": true, \"repair\": " : "\"error\": ");
    kl_buf_json_str(b, r->msg);
    kl_buf_puts(b, ", \"raw\": ");
    /* raw bytes may be invalid UTF-8: replace bad bytes for valid JSON */
    size_t rn = strlen(r->raw);
    if (kl_utf8_valid(r->raw, rn, NULL)) kl_buf_json_str(b, r->raw);
    else {
        char *cp = strdup(r->raw);
        if (cp) {
            for (char *p = cp; *p; p++)
                if ((unsigned char)*p >= 0x80) *p = '?';
            kl_buf_json_str(b, cp);
            free(cp);
        } else b->failed = 1;
    }
    kl_buf_puts(b, "}\n");
}

static int write_rejects(ictx *x, const char *path, kl_err *e) {
    kl_afile *af;
    int rc = kl_afile_open(path, &af, e);
    if (rc) return rc;
    FILE *fp = kl_afile_stream(af);
    kl_buf b;
    kl_buf_init(&b);
    for (size_t ci = 0; ci < x->nch && !rc; ci++) {
        chunk *c = &x->ch[ci];
        int64_t base = abs_line(x, ci, 0);
        size_t i = 0, w = 0;
        while ((i < c->nrej || w < c->nwarn) && !rc) { /* both in line order; a repair before the row's reject */
            int warn = w < c->nwarn && (i >= c->nrej || c->warn[w].line <= c->rej[i].line);
            const reject *r = warn ? &c->warn[w++] : &c->rej[i++];
            kl_buf_reset(&b);
            reject_json(x, r, base + r->line, warn, &b);
            if (b.failed || fwrite(b.data, 1, b.len, fp) != b.len)
                rc = kl_err_set(e, b.failed ? KL_ENOMEM : -errno, "%s: %s", path, b.failed ? "out of memory" : strerror(errno));
        }
    }
    kl_buf_free(&b);
    if (rc) { kl_afile_abort(af); return rc; }
    return kl_afile_commit(af, e);
}

/* Summary of the first errors by kind into res->summary. */
static void summarize(ictx *x, const int64_t *by_kind, const char *extra, kl_ingest_result *res) {
    kl_buf b;
    kl_buf_init(&b);
    if (extra && *extra) kl_buf_printf(&b, "%s\n", extra);
    for (int k = 0; k < KL_REJ_COUNT; k++) {
        if (!by_kind[k]) continue;
        kl_buf_printf(&b, "%s: %lld rows\n", kl_reject_kind_name((kl_reject_kind)k), (long long)by_kind[k]);
        int shown = 0;
        for (size_t ci = 0; ci < x->nch && shown < 3; ci++) {
            chunk *c = &x->ch[ci];
            for (size_t i = 0; i < c->nrej && shown < 3; i++)
                if (c->rej[i].kind == (kl_reject_kind)k) {
                    kl_buf_printf(&b, "  %s:%lld: %s\n", x->src.v[c->src].name, (long long)abs_line(x, ci, c->rej[i].line),
                                  c->rej[i].msg);
                    shown++;
                }
        }
    }
    snprintf(res->summary, sizeof res->summary, "%s", b.data ? b.data : "");
    kl_buf_free(&b);
}

/* Removes leftovers of killed runs (writers' dot-named temp files). */
static void prune_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st)) continue;
        if (de->d_name[0] == '.') kl_rm_rf(p, NULL);
        else if (S_ISDIR(st.st_mode)) prune_temps(p);
    }
    closedir(d);
}

static int fsync_tree(const char *dir, kl_err *e) {
    DIR *d = opendir(dir);
    if (!d) return kl_err_set(e, -errno, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = KL_OK;
    while ((de = readdir(d)) && !rc) {
        if (de->d_name[0] == '.') continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) rc = fsync_tree(p, e);
    }
    closedir(d);
    return rc ? rc : kl_fsync_dir(dir, e);
}

int kl_on_error_parse(const char *s, int *out) {
    if (!strcmp(s, "reject")) *out = KL_ON_ERROR_REJECT;
    else if (!strcmp(s, "recover")) *out = KL_ON_ERROR_RECOVER;
    else if (!strcmp(s, "fail")) *out = KL_ON_ERROR_FAIL;
    else return KL_EINVAL;
    return KL_OK;
}

void kl_ingest_opts_default(kl_ingest_opts *o) {
    memset(o, 0, sizeof *o);
    o->codec = "zstd";
    o->chunk_bytes = (size_t)4 << 20;
    o->max_decompressed_bytes = KL_INGEST_MAX_DECOMPRESSED;
    o->max_expansion = KL_INGEST_MAX_EXPANSION;
}

/* ==================================================================
 * kl_ingest
 * ================================================================== */

static void ictx_free(ictx *x) {
    for (size_t i = 0; i < x->nch; i++) {
        chunk *c = &x->ch[i];
        if (c->cols) for (size_t j = 0; j < x->schema->n_fields; j++) kl_column_free(c->cols[j]);
        free(c->cols);
        for (size_t k = 0; k < c->nrej; k++) { free(c->rej[k].msg); free(c->rej[k].raw); }
        free(c->rej);
        for (size_t k = 0; k < c->nwarn; k++) { free(c->warn[k].msg); free(c->warn[k].raw); }
        free(c->warn);
        if (c->st) for (size_t j = 0; j < x->schema->n_fields; j++) stat_free(&c->st[j]);
        free(c->st);
        free(c->row_line);
        free(c->row_off);
        kl_mem_free(c->own);
    }
    free(x->ch);
    outfiles_free(x->files, x->nfiles);
    if (x->colmap) for (size_t i = 0; i < x->src.n; i++) free(x->colmap[i]);
    free(x->colmap);
    free(x->nfile_cols);
    free(x->hdr_lines);
    if (x->renamed) for (size_t i = 0; i < x->src.n; i++) free(x->renamed[i]);
    free(x->renamed);
    sources_free(&x->src);
    kl_schema_free(x->schema);
}

static void pick_dialect(const kl_schema *s, source *src) {
    src->d = s->dialect;
    if (s->dialect_given) return;
    char nm[1024];
    snprintf(nm, sizeof nm, "%s", src->path);
    size_t n = strlen(nm);
    if (has_suffix(nm, ".gz")) nm[n - 3] = 0;
    else if (has_suffix(nm, ".zst")) nm[n - 4] = 0;
    if (has_suffix(nm, ".jsonl") || has_suffix(nm, ".ndjson") || has_suffix(nm, ".json")) { src->d.format = KL_FMT_JSONL; return; }
    if (has_suffix(nm, ".tsv")) { src->d.delim = '\t'; return; }
    kl_dialect sn;
    if (kl_dialect_sniff(src->buf, KL_MIN(src->len, (size_t)65536), &sn, NULL) == KL_OK) {
        if (sn.format == KL_FMT_JSONL) src->d.format = KL_FMT_JSONL;
        else if (sn.delim != ' ') src->d.delim = sn.delim; /* (as before: one byte of , tab ; |) */
    }
}

/* A source in another encoding is read as UTF-8: a plain file is transcoded
 * whole into memory (the mapping is dropped; reject offsets are then in the
 * UTF-8 text). A UTF-16 BOM always means UTF-16. */
static int transcode_source(source *s, kl_err *e) {
    kl_encoding enc = s->d.encoding;
    const unsigned char *b = (const unsigned char *)s->buf;
    if (s->len >= 2 && ((b[0] == 0xff && b[1] == 0xfe) || (b[0] == 0xfe && b[1] == 0xff)))
        enc = b[0] == 0xff ? KL_ENC_UTF16LE : KL_ENC_UTF16BE;
    if (enc == KL_ENC_UTF8 || s->d.format != KL_FMT_CSV) return KL_OK;
    if (s->compressed)
        return kl_err_set(e, KL_EINVAL, "%s: encoding %s is read from plain files only (decompress the source first)",
                          s->name, kl_encoding_name(enc));
    char *out;
    size_t outn;
    int rc = kl_transcode_utf8(enc, s->buf, s->len, &out, &outn, e);
    if (rc) { kl_err_prefix(e, "%s: %s", s->name, kl_encoding_name(enc)); return rc; }
    source_unload(s);
    s->buf = out;
    s->len = outn;
    s->mapped = 0;
    s->d.encoding = enc;
    return KL_OK;
}

/* recover mode: the `_extra` column (a long row's extra fields) joins the schema. */
static int add_extra_column(kl_schema *s, int *col, kl_err *e) {
    int k = kl_schema_find(s, "_extra");
    if (k >= 0) {
        if (s->fields[k].type != KL_T_STRING || !s->fields[k].nullable)
            return kl_err_set(e, KL_EINVAL, "--on-error recover: the schema's column _extra must be a nullable string");
        *col = k;
        return KL_OK;
    }
    kl_field *nf = realloc(s->fields, (s->n_fields + 1) * sizeof *nf);
    if (!nf) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->fields = nf;
    kl_field *f = &s->fields[s->n_fields];
    memset(f, 0, sizeof *f);
    if (!(f->name = strdup("_extra"))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    f->type = KL_T_STRING;
    f->nullable = 1;
    f->max_null_ratio = 1;
    *col = (int)s->n_fields++;
    kl_buf b;
    kl_buf_init(&b);
    if (kl__schema_canonical(s, &b) || b.failed) { kl_buf_free(&b); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    free(s->text);
    s->text = kl_buf_take(&b);
    return KL_OK;
}

static int read_pointer(const char *path, char id[65]) {
    char *t = NULL;
    size_t n = 0;
    if (kl_read_file(path, &t, &n, NULL)) return KL_ENOTFOUND;
    int ok = n >= 64 && strspn(t, "0123456789abcdef") >= 64;
    if (ok) { memcpy(id, t, 64); id[64] = 0; }
    kl_mem_free(t);
    return ok ? KL_OK : KL_EPARSE;
}

/* One ingest per ingest key at a time: an flock on DIR/.staging/<key>.lock
 * (released by the kernel when a process dies, so kill -9 never leaves it held). */
static int lock_staging(const char *out_dir, const char *key, int *fd, char *path, size_t pn, kl_err *e) {
    snprintf(path, pn, "%s/.staging", out_dir);
    int rc = kl_mkdir_p(path, e);
    if (rc) return rc;
    snprintf(path, pn, "%s/.staging/%s.lock", out_dir, key);
    *fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (*fd < 0) return kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB)) {
        int en = errno;
        close(*fd);
        *fd = -1;
        if (en == EWOULDBLOCK) return kl_err_set(e, KL_EBUSY, "another ingest of the same sources into %s is running", out_dir);
        return kl_err_set(e, -en, "%s: %s", path, strerror(en));
    }
    return KL_OK;
}

static void unlock_staging(int *fd, const char *path) {
    if (*fd < 0) return;
    unlink(path);
    close(*fd);
    *fd = -1;
}

static int set_current(const char *out_dir, const char *id, kl_err *e) {
    char p[4200], line[80];
    snprintf(p, sizeof p, "%s/current", out_dir);
    snprintf(line, sizeof line, "%s\n", id);
    return kl_write_file_atomic(p, line, strlen(line), e);
}

/* The state of one kl_ingest across its stages. */
typedef struct {
    ictx x;
    const kl_ingest_opts *o;
    kl_ingest_result *res;
    int64_t t0, t_load, t_parse, t_stats, t_write; /* monotonic ns at each phase's start (debug log) */
    const char *expect;                            /* the expected sha256 of the one source, else NULL */
    int pcol;                                      /* --partition-by's field, else -1 */
    outfile *files;                                /* the part files, in manifest order */
    size_t nfiles;
    colstat *tot; /* per field: the merged column statistics */
    int64_t by_kind[KL_REJ_COUNT], repairs[KL_REJ_COUNT], accepted, rejected, repaired;
    char staging[4200], key[65], lock_path[4300];
    int lock_fd, created_out;
} irun;

/* Stage 1: the schema and the writer options. */
static int ingest_options(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    ictx *x = &R->x;
    int rc;
    if ((rc = kl_schema_load_file(o->schema_path, &x->schema, e))) return rc;
    x->extra_col = -1;
    kl_pq_write_opts_default(&x->wo);
    if (o->codec && kl_pq_codec_parse(o->codec, &x->wo.codec))
        return kl_err_set(e, KL_EINVAL, "unknown codec '%s' (zstd, snappy, gzip, none)", o->codec);
    if (o->zstd_level) x->wo.zstd_level = o->zstd_level;
    if (o->row_group_rows) x->wo.row_group_rows = o->row_group_rows;
    R->pcol = -1;
    if (o->partition_by) {
        R->pcol = kl_schema_find(x->schema, o->partition_by);
        if (R->pcol < 0)
            return kl_err_set(e, KL_EINVAL, "--partition-by %s: no such column in the schema", o->partition_by);
        kl_type pt = x->schema->fields[R->pcol].type;
        if (pt != KL_T_DATE && pt != KL_T_TIMESTAMP && pt != KL_T_CATEGORY && pt != KL_T_STRING)
            return kl_err_set(e, KL_EINVAL,
                              "--partition-by %s: a %s column; partition by a date, timestamp or category column",
                              o->partition_by, kl_type_name(pt));
    }
    R->expect = o->sha256 ? o->sha256 : x->schema->sha256;
    R->created_out = !kl_path_exists(o->out_dir);
    return KL_OK;
}

/* Stage 2, transport and storage: fetch, load and hash every source, pick
 * its dialect, transcode it to UTF-8. */
static int ingest_sources(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    ictx *x = &R->x;
    int rc;
    if ((rc = expand_sources(o, R->expect, &x->src, e))) return rc;
    if (R->expect && x->src.n != 1)
        return kl_err_set(e, KL_EINVAL, "an expected sha256 needs exactly one source file (got %zu)", x->src.n);
    int any_csv = 0;
    for (size_t i = 0; i < x->src.n; i++) {
        source *sv = &x->src.v[i];
        if ((rc = load_source(sv, o, e))) return rc;
        if (R->expect && strcasecmp(R->expect, sv->sha))
            return kl_err_set(e, KL_ECHECKSUM, "%s: sha256 mismatch: expected %s, got %s", sv->name, R->expect,
                              sv->sha);
        pick_dialect(x->schema, sv);
        if ((rc = transcode_source(sv, e))) return rc;
        kl_dialect_resolve_eol(&sv->d, sv->buf, KL_MIN(sv->len, (size_t)65536));
        sv->d.lenient = o->on_error == KL_ON_ERROR_RECOVER;
        any_csv |= sv->d.format == KL_FMT_CSV;
    }
    if (o->on_error == KL_ON_ERROR_RECOVER && any_csv) return add_extra_column(x->schema, &x->extra_col, e);
    return KL_OK;
}

/* Stage 3, idempotency: the ingest key over the schema, the options and the
 * sources' hashes and dialects. */
static int ingest_key(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    const ictx *x = &R->x;
    kl_buf kb;
    kl_buf_init(&kb);
    kl_buf_printf(&kb, "keel-ingest-1\n%s\ncodec=%s level=%d rg=%llu part=%s ratio=%.17g chunk=%zu\n", x->schema->text,
                  kl_pq_codec_name(x->wo.codec), x->wo.zstd_level, (unsigned long long)x->wo.row_group_rows,
                  o->partition_by ? o->partition_by : "", o->max_reject_ratio, o->chunk_bytes);
    if (o->on_error) kl_buf_printf(&kb, "on_error=%s\n", o->on_error == KL_ON_ERROR_RECOVER ? "recover" : "fail");
    for (size_t i = 0; i < x->src.n; i++) {
        char dl[2] = {x->src.v[i].d.delim, 0};
        kl_buf_printf(&kb, "%s %s %d %s\n", x->src.v[i].name, x->src.v[i].sha, (int)x->src.v[i].d.format, dl);
        if (x->src.v[i].d.eol == '\r') kl_buf_puts(&kb, "eol=cr\n");
    }
    int failed = kb.failed;
    if (!failed) kl_sha256_buf_hex(kb.data, kb.len, R->key);
    kl_buf_free(&kb);
    return failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : KL_OK;
}

/* Stage 4: the same key already published a version: point current at it
 * and take the counts from its manifest. 1 = reused, 0 = not, < 0 error. */
static int reuse_published(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    kl_ingest_result *res = R->res;
    char p[4200], id[65], cur[65];
    snprintf(p, sizeof p, "%s/ingests/%s", o->out_dir, R->key);
    if (read_pointer(p, id) != KL_OK) return 0;
    snprintf(p, sizeof p, "%s/versions/%s/manifest.json", o->out_dir, id);
    if (!kl_path_exists(p)) return 0;
    snprintf(p, sizeof p, "%s/current", o->out_dir);
    int rc;
    if ((read_pointer(p, cur) != KL_OK || strcmp(cur, id)) && (rc = set_current(o->out_dir, id, e))) return rc;
    memcpy(res->version_id, id, 65);
    snprintf(res->version_dir, sizeof res->version_dir, "%s/versions/%s", o->out_dir, id);
    res->reused = res->published = 1;
    cJSON *m = NULL;
    snprintf(p, sizeof p, "%s/manifest.json", res->version_dir);
    if (kl_json_load_file_opts(p, KL_JSON_KEEP_NUL, (void **)&m, NULL) == KL_OK) {
        cJSON *rows = cJSON_GetObjectItem(m, "rows");
        res->rows_accepted = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "accepted"));
        res->rows_rejected = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "rejected"));
        res->rows_read = res->rows_accepted + res->rows_rejected;
        cJSON_Delete(m);
    }
    kl_manifest_files mf;
    if (kl_manifest_files_load(p, &mf, NULL, NULL) == KL_OK) res->files_written = (int64_t)mf.n;
    kl_manifest_files_free(&mf);
    return 1;
}

/* Stage 5, semantics: split every source into chunks, parse and validate
 * them (streaming: part files are written as their groups complete). */
static int parse_validate(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    ictx *x = &R->x;
    int rc;
    if ((rc = lock_staging(o->out_dir, R->key, &R->lock_fd, R->lock_path, sizeof R->lock_path, e))) return rc;
    x->colmap = calloc(x->src.n, sizeof *x->colmap);
    x->nfile_cols = calloc(x->src.n, sizeof *x->nfile_cols);
    x->hdr_lines = calloc(x->src.n, sizeof *x->hdr_lines);
    x->renamed = calloc(x->src.n, sizeof *x->renamed);
    if (!x->colmap || !x->nfile_cols || !x->hdr_lines || !x->renamed) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t j = 0; j < x->schema->n_fields; j++) x->need_row_pos |= x->schema->fields[j].unique;
    x->streaming = R->pcol < 0 && !x->need_row_pos;
    x->batch = (size_t)KL_MAX(kl_pool_threads(kl_pool_default()), 1) * CHUNKS_PER_FILE;
    if (x->streaming) {
        snprintf(R->staging, sizeof R->staging, "%s/.staging/%s", o->out_dir, R->key);
        if ((rc = kl_mkdir_p(R->staging, e))) {
            R->staging[0] = 0;
            return rc;
        }
        x->staging = R->staging;
    }
    if (o->progress) {
        for (size_t i = 0; i < x->src.n; i++) x->prog_total += x->src.v[i].compressed ? 0 : x->src.v[i].len;
        x->prog = kl_progress_new("parse+validate", x->prog_total, "B");
    }
    for (size_t si = 0; si < x->src.n; si++) {
        size_t begin = 0;
        if ((rc = src_open(&x->src.v[si], o, e))) return rc;
        if ((rc = setup_source(x, (int)si, &begin, e))) return rc;
        if ((rc = cut_source(x, (int)si, begin, o->chunk_bytes ? o->chunk_bytes : (4u << 20), e))) return rc;
        src_close(&x->src.v[si]);
    }
    if ((rc = flush_chunks(x, 1, e))) return rc;
    kl_progress_finish(x->prog);
    x->prog = NULL;
    if (!x->streaming) return KL_OK;
    R->files = x->files; /* the streamed part files, empty groups dropped */
    R->nfiles = x->nfiles;
    x->files = NULL;
    x->nfiles = 0;
    size_t k = 0;
    for (size_t g = 0; g < R->nfiles; g++) {
        if (R->files[g].rc) {
            if (e) *e = R->files[g].err;
            return R->files[g].rc;
        }
        if (R->files[g].rows_total) R->files[k++] = R->files[g];
        else free(R->files[g].rel);
    }
    R->nfiles = k;
    return KL_OK;
}

/* Stage 6: unique columns, the row counts and the gates on them (--on-error
 * fail, max_reject_ratio, no rows). */
static int count_and_gate(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    ictx *x = &R->x;
    kl_ingest_result *res = R->res;
    int rc;
    if ((rc = check_unique(x, e))) return rc;
    for (size_t i = 0; i < x->nch; i++) {
        R->accepted += (int64_t)x->ch[i].rows;
        R->rejected += (int64_t)x->ch[i].nrej;
        R->repaired += (int64_t)x->ch[i].nwarn;
        for (size_t k = 0; k < x->ch[i].nrej; k++) R->by_kind[x->ch[i].rej[k].kind]++;
        for (size_t k = 0; k < x->ch[i].nwarn; k++) R->repairs[x->ch[i].warn[k].kind]++;
    }
    res->rows_repaired = R->repaired;
    x->repairs = R->repairs;
    if (o->on_error == KL_ON_ERROR_FAIL && R->rejected) { /* the first rejected row fails the ingest */
        for (size_t i = 0; i < x->nch; i++)
            if (x->ch[i].nrej) {
                const reject *r = &x->ch[i].rej[0];
                summarize(x, R->by_kind, "--on-error fail: a row was rejected", res);
                if (o->rejects_path) write_rejects(x, o->rejects_path, NULL);
                return kl_err_setloc(e, KL_EPARSE, x->src.v[r->src].name, abs_line(x, i, r->line), 0,
                                     "%s (--on-error fail); nothing was published", r->msg);
            }
    }
    int64_t all = R->accepted + R->rejected;
    res->rows_accepted = R->accepted;
    res->rows_rejected = R->rejected;
    res->rows_read = all;
    if (all == 0) return kl_err_set(e, KL_EPARSE, "%s: no data rows", x->src.v[0].name);
    double ratio = (double)R->rejected / (double)all;
    if (R->rejected && ratio > o->max_reject_ratio) {
        char extra[256];
        snprintf(extra, sizeof extra, "%lld of %lld rows rejected (%.4g%%, allowed %.4g%%)", (long long)R->rejected,
                 (long long)all, ratio * 100, o->max_reject_ratio * 100);
        summarize(x, R->by_kind, extra, res);
        if (o->rejects_path) write_rejects(x, o->rejects_path, NULL);
        return kl_err_set(e, KL_EPARSE, "validation failed: %s; nothing was published", extra);
    }
    if (R->accepted == 0) return kl_err_set(e, KL_EPARSE, "no rows accepted");
    return KL_OK;
}

/* Stage 7: the column statistics, merged over chunks, and the null-ratio
 * gates of the schema. */
static int column_stats(irun *R, kl_err *e) {
    ictx *x = &R->x;
    atomic_store(&x->next, 0);
    if (!x->streaming) kl_pool_parallel_for(NULL, (size_t)kl_pool_threads(kl_pool_default()), 1, stats_worker, x);
    for (size_t i = 0; i < x->nch; i++)
        if (x->ch[i].rc) {
            if (e) *e = x->ch[i].err;
            return x->ch[i].rc;
        }
    if (!(R->tot = calloc(x->schema->n_fields, sizeof *R->tot)) || merge_stats(x, R->tot))
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t j = 0; j < x->schema->n_fields; j++) {
        const kl_field *f = &x->schema->fields[j];
        const colstat *t = &R->tot[j];
        double nr = t->count ? (double)t->nulls / (double)t->count : 0;
        if (nr <= f->max_null_ratio) continue;
        char extra[300];
        snprintf(extra, sizeof extra, "column %s: null ratio %.4g exceeds max_null_ratio %.4g (%lld of %lld rows)",
                 f->name, nr, f->max_null_ratio, (long long)t->nulls, (long long)t->count);
        summarize(x, R->by_kind, extra, R->res);
        return kl_err_setloc(e, KL_EPARSE, R->o->schema_path, f->line, f->col,
                             "validation failed: %s; nothing was published", extra);
    }
    return KL_OK;
}

/* Stage 8: the part files (unless streamed) and the rejects file into staging. */
static int write_staging(irun *R, kl_err *e) {
    ictx *x = &R->x;
    int rc;
    if (!x->streaming) {
        if ((rc = plan_files(x, R->pcol, &R->files, &R->nfiles, e))) return rc;
        snprintf(R->staging, sizeof R->staging, "%s/.staging/%s", R->o->out_dir, R->key);
        if ((rc = kl_mkdir_p(R->staging, e))) {
            R->staging[0] = 0;
            return rc;
        }
        atomic_store(&x->next, 0);
        wctx w = {x, R->files, R->nfiles, R->staging, x->wo, 0};
        kl_pool_parallel_for(NULL, (size_t)kl_pool_threads(kl_pool_default()), 1, write_worker, &w);
        for (size_t i = 0; i < R->nfiles; i++)
            if (R->files[i].rc) {
                if (e) *e = R->files[i].err;
                return R->files[i].rc;
            }
    }
    if (!R->rejected && !R->repaired) return KL_OK;
    char p[4300];
    snprintf(p, sizeof p, "%s/rejects.jsonl", R->staging);
    return write_rejects(x, p, e);
}

/* Stage 9: manifest.json; the version id is the sha256 of its body. */
static int write_manifest(irun *R, kl_err *e) {
    kl_buf body, mb;
    kl_buf_init(&body);
    kl_buf_init(&mb);
    int rc = KL_ENOMEM;
    if (!manifest_body(&R->x, R->key, R->files, R->nfiles, R->tot, R->accepted, R->rejected, R->by_kind, R->pcol,
                       &body)) {
        kl_sha256 *h = kl_sha256_new();
        uint8_t dg[32];
        kl_sha256_update(h, "keel-dataset-1\n", 15);
        kl_sha256_update(h, body.data, body.len);
        kl_sha256_final(h, dg);
        kl_sha256_free(h);
        kl_sha256_hex(dg, R->res->version_id);
        kl_buf_printf(&mb, "{\n  \"version_id\": \"%s\",\n  \"keel_version\": ", R->res->version_id);
        kl_buf_json_str(&mb, R->o->keel_version ? R->o->keel_version : "");
        kl_buf_puts(&mb, ",\n  ");
        kl_buf_append(&mb, body.data, body.len);
        rc = mb.failed ? KL_ENOMEM : KL_OK;
    }
    if (rc) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    char p[4300];
    snprintf(p, sizeof p, "%s/manifest.json", R->staging);
    if (!rc) rc = kl_write_file_atomic(p, mb.data, mb.len, e);
    kl_buf_free(&body);
    kl_buf_free(&mb);
    if (rc) return rc;
    prune_temps(R->staging);
    return fsync_tree(R->staging, e);
}

/* Stage 10: rename staging to versions/<id>, record the ingest key, move
 * current. */
static int publish(irun *R, kl_err *e) {
    const kl_ingest_opts *o = R->o;
    kl_ingest_result *res = R->res;
    char p[4300], line[80];
    int rc;
    snprintf(p, sizeof p, "%s/versions", o->out_dir);
    if ((rc = kl_mkdir_p(p, e))) return rc;
    snprintf(res->version_dir, sizeof res->version_dir, "%s/versions/%s", o->out_dir, res->version_id);
    if (rename(R->staging, res->version_dir)) {
        if (errno != EEXIST && errno != ENOTEMPTY)
            return kl_err_set(e, -errno, "publishing %s: %s", res->version_dir, strerror(errno));
        kl_rm_rf(R->staging, NULL); /* the same content is already published */
    }
    R->staging[0] = 0;
    if ((rc = kl_fsync_dir(p, e))) return rc;
    snprintf(p, sizeof p, "%s/ingests", o->out_dir);
    if ((rc = kl_mkdir_p(p, e))) return rc;
    snprintf(p, sizeof p, "%s/ingests/%s", o->out_dir, R->key);
    snprintf(line, sizeof line, "%s\n", res->version_id);
    if ((rc = kl_write_file_atomic(p, line, strlen(line), e))) return rc;
    if ((rc = set_current(o->out_dir, res->version_id, e))) return rc;
    res->published = 1;
    for (size_t i = 0; i < R->nfiles; i++) {
        res->bytes_written += R->files[i].bytes;
        res->partitions_reused += R->files[i].reused;
    }
    res->files_written = (int64_t)R->nfiles;
    return KL_OK;
}

/* Removes what a failed run left: staging, the lock, an output folder it created. */
static void clean_up_failed(irun *R) {
    char p[4200];
    if (R->staging[0]) kl_rm_rf(R->staging, NULL);
    unlock_staging(&R->lock_fd, R->lock_path);
    snprintf(p, sizeof p, "%s/.staging", R->o->out_dir);
    rmdir(p);
    if (R->created_out) rmdir(R->o->out_dir);
}

/* The ingestion, stage by stage: ingest_options, ingest_sources (sha256 of
 * each), ingest_key, reuse_published (the same inputs: the published version
 * again), parse_validate, count_and_gate, column_stats, write_staging,
 * write_manifest, publish; clean_up_failed on a failure. */
int kl_ingest(const kl_ingest_opts *o, kl_ingest_result *res, kl_err *e) {
    if (!o->out_dir || !o->schema_path || !o->n_sources)
        return kl_err_set(e, KL_EINVAL, "ingest needs sources, a schema and an output folder");
    irun *R = calloc(1, sizeof *R);
    if (!R) return kl_err_set(e, KL_ENOMEM, "out of memory");
    memset(res, 0, sizeof *res);
    R->o = R->x.o = o;
    R->res = res;
    R->lock_fd = -1;
    R->t0 = kl_time_mono_ns();
    int rc = ingest_options(R, e);
    if (!rc) rc = ingest_sources(R, e);
    if (!rc) rc = ingest_key(R, e);
    int reused = rc ? 0 : reuse_published(R, e);
    if (reused < 0) rc = reused;
    if (!rc && !reused) {
        R->t_load = kl_time_mono_ns();
        if (!(rc = parse_validate(R, e))) R->t_parse = kl_time_mono_ns();
        if (!rc && !(rc = count_and_gate(R, e)) && !(rc = column_stats(R, e))) R->t_stats = kl_time_mono_ns();
        if (!rc && !(rc = write_staging(R, e))) R->t_write = kl_time_mono_ns();
        if (!rc && !(rc = write_manifest(R, e))) rc = publish(R, e);
    }
    if (rc) clean_up_failed(R);
    res->seconds = (kl_time_mono_ns() - R->t0) / 1e9;
    if (!rc && !reused) {
        kl_log(KL_LOG_DEBUG, "ingest",
               "phases: load+sha256 %.3f s, parse+validate %.3f s, unique+stats %.3f s, write %.3f s, publish %.3f s",
               (R->t_load - R->t0) / 1e9, (R->t_parse - R->t_load) / 1e9, (R->t_stats - R->t_parse) / 1e9,
               (R->t_write - R->t_stats) / 1e9, (kl_time_mono_ns() - R->t_write) / 1e9);
        unlock_staging(&R->lock_fd, R->lock_path);
        char p[4200];
        snprintf(p, sizeof p, "%s/.staging", o->out_dir);
        rmdir(p);
    }
    if (R->tot) {
        for (size_t j = 0; j < R->x.schema->n_fields; j++) stat_free(&R->tot[j]);
        free(R->tot);
    }
    outfiles_free(R->files, R->nfiles);
    ictx_free(&R->x);
    free(R);
    return rc;
}
