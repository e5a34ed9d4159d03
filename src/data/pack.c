/* keel pack: a folder of JPEG/PNG images -> a shard set. The plan (every
 * file in path order with its label) comes from the sub-folder names or a
 * CSV/Parquet label file; images are validated (header + full decode) in
 * parallel in fixed-size batches, then appended in plan order to shards of a
 * target size, so the output is byte-identical for any thread count.
 * Resumable: after each finished shard, .pack-state.json records the plan's
 * hash, the shards (with sha256) and the files skipped so far; a rerun
 * verifies those shards and continues after the last good one. Atomic: every
 * file is temp + fsync + rename, and manifest.json is written last. */
#include <keel/column.h>
#include <keel/data.h>
#include <keel/image.h>
#include <keel/parquet.h>
#include <keel/shard.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 256               /* images validated per parallel step (fixed: not the thread count) */
#define STATE_FILE ".pack-state.json"

void kl_pack_opts_default(kl_pack_opts *o) {
    memset(o, 0, sizeof *o);
    o->shard_bytes = 256ull << 20;
}

void kl_pack_result_free(kl_pack_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_issues; i++) { free(r->issues[i].path); free(r->issues[i].reason); }
    free(r->issues);
    r->issues = NULL;
    r->n_issues = 0;
}

/* ================================================================== *
 * The plan: files in path order with labels
 * ================================================================== */

typedef struct { char *key; int label; char *label_name; int64_t size, mtime_ns; } item;

typedef struct {
    item *it;
    size_t n, cap;
    char **classes;
    int nclass;
} plan;

static void plan_free(plan *p) {
    for (size_t i = 0; i < p->n; i++) { free(p->it[i].key); free(p->it[i].label_name); }
    free(p->it);
    for (int k = 0; k < p->nclass; k++) free(p->classes[k]);
    free(p->classes);
    memset(p, 0, sizeof *p);
}

static int plan_add(plan *p, const char *key, const char *label, size_t label_len, kl_err *e) {
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 1024;
        item *ni = realloc(p->it, nc * sizeof *ni);
        if (!ni) return kl_err_set(e, KL_ENOMEM, "pack: out of memory");
        p->it = ni; p->cap = nc;
    }
    item *t = &p->it[p->n];
    memset(t, 0, sizeof *t);
    t->key = strdup(key);
    t->label_name = strndup(label, label_len);
    if (!t->key || !t->label_name) { free(t->key); free(t->label_name); return kl_err_set(e, KL_ENOMEM, "pack: out of memory"); }
    p->n++;
    return KL_OK;
}

/* Recursively lists regular files under root/rel (hidden names skipped). */
static int walk(const char *root, const char *rel, plan *p, int depth, kl_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) return kl_err_set(e, errno == ENOENT ? KL_ENOTFOUND : -errno, "%s: %s", path, strerror(errno));
    struct dirent *de;
    int rc = KL_OK;
    while (rc == KL_OK && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char sub[4096], full[8192];
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue; /* dangling link: nothing to pack */
        if (S_ISDIR(st.st_mode)) {
            if (depth < 32) rc = walk(root, sub, p, depth + 1, e);
        } else if (S_ISREG(st.st_mode) && depth > 0) { /* files at the top level are not in a class */
            const char *slash = strchr(sub, '/');
            rc = plan_add(p, sub, sub, (size_t)(slash - sub), e);
        }
    }
    closedir(d);
    return rc;
}

static int cmp_item(const void *a, const void *b) { return strcmp(((const item *)a)->key, ((const item *)b)->key); }
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_num(const void *a, const void *b) {
    int64_t x = 0, y = 0;
    kl_parse_int64(*(char *const *)a, &x);
    kl_parse_int64(*(char *const *)b, &y);
    return x < y ? -1 : x > y;
}

/* Labels from a CSV: columns "path" and "label" when the first row names
 * them, else the first two columns (no header). Extra columns are ignored. */
static int labels_csv(const char *file, plan *p, kl_err *e) {
    char *buf;
    size_t len, pos = 0;
    int rc = kl_read_file(file, &buf, &len, e);
    if (rc) return rc;
    kl_dialect d;
    kl_dialect_default(&d);
    kl_dialect_sniff(buf, len, &d, NULL);
    d.header = 0;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    int64_t line = 0;
    int pc = 0, lc = 1;
    while (rc == KL_OK) {
        int k = kl_csv_next(&d, buf, len, &pos, &r, e);
        if (k == KL_CSV_END) break;
        line++;
        if (k != KL_OK) { kl_err_prefix(e, "%s:%lld", file, (long long)line); rc = k; break; }
        if (r.n == 1 && r.len[0] == 0) continue; /* blank line */
        if (line == 1) {
            int hp = -1, hl = -1;
            for (size_t i = 0; i < r.n; i++) {
                if (r.len[i] == 4 && !memcmp(r.f[i], "path", 4)) hp = (int)i;
                if (r.len[i] == 5 && !memcmp(r.f[i], "label", 5)) hl = (int)i;
            }
            if (hp >= 0 && hl >= 0) { pc = hp; lc = hl; continue; }
        }
        if (r.n <= (size_t)(pc > lc ? pc : lc)) {
            rc = kl_err_setloc(e, KL_EPARSE, file, (int)line, 0, "expected path,label; got %zu field(s)", r.n);
            break;
        }
        char key[4096];
        snprintf(key, sizeof key, "%.*s", (int)r.len[pc], r.f[pc]);
        if (r.len[lc] == 0) { rc = kl_err_setloc(e, KL_EPARSE, file, (int)line, 0, "%s: empty label", key); break; }
        rc = plan_add(p, key, r.f[lc], r.len[lc], e);
    }
    kl_csv_rec_free(&r);
    kl_mem_free(buf);
    return rc;
}

static int labels_parquet(const char *file, plan *p, kl_err *e) {
    kl_pq_reader *r;
    int rc = kl_pq_open(file, &r, e);
    if (rc) return rc;
    const char *names[2] = {"path", "label"};
    if (kl_pq_find_column(r, "path") < 0 || kl_pq_find_column(r, "label") < 0) {
        if (kl_pq_num_columns(r) < 2) {
            kl_pq_close(r);
            return kl_err_set(e, KL_EPARSE, "%s: expected columns path,label", file);
        }
        names[0] = kl_pq_column(r, 0)->name;
        names[1] = kl_pq_column(r, 1)->name;
    }
    rc = kl_pq_select(r, names, 2, e);
    kl_column *cols[2] = {NULL, NULL};
    size_t got, row = 0;
    while (rc == KL_OK && (rc = kl_pq_read_batch(r, 8192, cols, &got, e)) == KL_OK && got) {
        if (cols[0]->type != KL_COL_STRING) { rc = kl_err_set(e, KL_ETYPE, "%s: column %s must be a string", file, names[0]); break; }
        for (size_t i = 0; i < got && rc == KL_OK; i++, row++) {
            if (kl_column_is_null(cols[0], i) || kl_column_is_null(cols[1], i)) {
                rc = kl_err_set(e, KL_EPARSE, "%s: row %zu: null path or label", file, row);
                break;
            }
            size_t n;
            const char *s = kl_column_get_str(cols[0], i, &n);
            char key[4096], lab[64];
            snprintf(key, sizeof key, "%.*s", (int)n, s);
            if (cols[1]->type == KL_COL_STRING) {
                s = kl_column_get_str(cols[1], i, &n);
                rc = plan_add(p, key, s, n, e);
            } else if (cols[1]->type == KL_COL_FLOAT32 || cols[1]->type == KL_COL_FLOAT64) {
                rc = kl_err_set(e, KL_ETYPE, "%s: label column %s must be a string or an integer", file, names[1]);
            } else {
                int m = snprintf(lab, sizeof lab, "%lld", (long long)kl_column_get_i64(cols[1], i));
                rc = plan_add(p, key, lab, (size_t)m, e);
            }
        }
    }
    kl_column_free(cols[0]);
    kl_column_free(cols[1]);
    kl_pq_close(r);
    return rc;
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

/* Builds the plan: items sorted by key, classes sorted (numerically when all
 * labels are integers), labels as class indexes, file sizes and times. */
static int plan_build(const kl_pack_opts *o, plan *p, kl_err *e) {
    int rc;
    if (o->labels_path)
        rc = has_suffix(o->labels_path, ".parquet") ? labels_parquet(o->labels_path, p, e) : labels_csv(o->labels_path, p, e);
    else
        rc = walk(o->src_dir, "", p, 0, e);
    if (rc) return rc;
    if (p->n == 0)
        return kl_err_set(e, KL_EINVAL, "%s: no images found%s", o->labels_path ? o->labels_path : o->src_dir,
                          o->labels_path ? "" : " (expected SRC/<class>/<image> files)");
    qsort(p->it, p->n, sizeof *p->it, cmp_item);
    for (size_t i = 1; i < p->n; i++)
        if (!strcmp(p->it[i].key, p->it[i - 1].key))
            return kl_err_set(e, KL_EINVAL, "%s: path %s is listed twice", o->labels_path, p->it[i].key);
    /* classes */
    char **names = malloc(p->n * sizeof *names);
    if (!names) return kl_err_set(e, KL_ENOMEM, "pack: out of memory");
    int all_int = 1;
    for (size_t i = 0; i < p->n; i++) {
        names[i] = p->it[i].label_name;
        int64_t v;
        if (kl_parse_int64(names[i], &v) != 0) all_int = 0;
    }
    qsort(names, p->n, sizeof *names, all_int ? cmp_num : cmp_str);
    size_t nu = 0;
    for (size_t i = 0; i < p->n; i++)
        if (nu == 0 || strcmp(names[nu - 1], names[i]) != 0) names[nu++] = names[i];
    p->classes = calloc(nu, sizeof *p->classes);
    if (!p->classes) { free(names); return kl_err_set(e, KL_ENOMEM, "pack: out of memory"); }
    for (size_t k = 0; k < nu; k++)
        if (!(p->classes[k] = strdup(names[k]))) { free(names); return kl_err_set(e, KL_ENOMEM, "pack: out of memory"); }
    p->nclass = (int)nu;
    free(names);
    for (size_t i = 0; i < p->n; i++) {
        int lo = 0, hi = p->nclass - 1; /* binary search in the sorted class list */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            int c = all_int ? cmp_num(&p->classes[mid], &p->it[i].label_name) : strcmp(p->classes[mid], p->it[i].label_name);
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        p->it[i].label = lo;
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", o->src_dir, p->it[i].key);
        struct stat st;
        if (stat(full, &st) == 0) {
            p->it[i].size = (int64_t)st.st_size;
            p->it[i].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        } else {
            p->it[i].size = -1;
        }
    }
    return KL_OK;
}

/* Hash of everything that determines the output (for resume). */
static void plan_hash(const kl_pack_opts *o, const plan *p, char hex[65]) {
    kl_sha256 *h = kl_sha256_new();
    char line[256];
    int n = snprintf(line, sizeof line, "keel-pack 1\nshard_bytes %llu\nmax_pixels %llu\n",
                     (unsigned long long)o->shard_bytes, (unsigned long long)o->max_pixels);
    kl_sha256_update(h, line, (size_t)n);
    for (int k = 0; k < p->nclass; k++) { kl_sha256_update(h, p->classes[k], strlen(p->classes[k]) + 1); }
    for (size_t i = 0; i < p->n; i++) {
        kl_sha256_update(h, p->it[i].key, strlen(p->it[i].key) + 1);
        n = snprintf(line, sizeof line, "%d %lld %lld\n", p->it[i].label, (long long)p->it[i].size, (long long)p->it[i].mtime_ns);
        kl_sha256_update(h, line, (size_t)n);
    }
    uint8_t d[32];
    kl_sha256_final(h, d);
    kl_sha256_free(h);
    kl_sha256_hex(d, hex);
}

/* ================================================================== *
 * Validation of one batch (parallel)
 * ================================================================== */

typedef struct { char *bytes; size_t len; char *reason; } checked;

typedef struct {
    const kl_pack_opts *o;
    const plan *p;
    size_t first;
    checked *out;
    kl_progress *prog;
} batch_ctx;

static void check_range(void *ctx, size_t begin, size_t end, int chunk) {
    batch_ctx *b = ctx;
    for (size_t j = begin; j < end; j++) {
        const item *t = &b->p->it[b->first + j];
        checked *c = &b->out[j];
        kl_err e = {0};
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", b->o->src_dir, t->key);
        int rc = kl_read_file(full, &c->bytes, &c->len, &e);
        if (rc == KL_OK) {
            int w, h, ch;
            rc = kl_image_info(c->bytes, c->len, t->key, &w, &h, &ch, &e);
            kl_image img;
            if (rc == KL_OK) rc = kl_image_decode(c->bytes, c->len, t->key, 0, 0, b->o->max_pixels, &img, &e);
            if (rc == KL_OK) kl_image_release(&img);
        } else if (rc == -ENOENT || rc == KL_ENOTFOUND) {
            kl_err_set(&e, rc, "%s: file not found", t->key);
        } else {
            kl_err_prefix(&e, "%s", t->key);
        }
        if (rc) {
            kl_mem_free(c->bytes);
            c->bytes = NULL;
            /* the reason without the leading "key: " (the report names the file) */
            const char *m = e.msg;
            size_t kl = strlen(t->key);
            if (!strncmp(m, t->key, kl) && m[kl] == ':') m += kl + (m[kl + 1] == ' ' ? 2 : 1);
            c->reason = strdup(m[0] ? m : kl_strerror(rc));
        }
        if (b->prog) kl_progress_add(b->prog, 1);
    }
}

/* ================================================================== *
 * State (resume) and manifest
 * ================================================================== */

static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

typedef struct { char file[64]; int64_t records; uint64_t bytes; char sha[65]; size_t next; size_t issues; } done_shard;

typedef struct {
    done_shard *sh;
    size_t n, cap;
    size_t *issue_item;      /* plan index of each issue */
    char **issue_reason;
    size_t ni, cap_i;
} progress_state;

static void state_free(progress_state *s) {
    for (size_t i = 0; i < s->ni; i++) free(s->issue_reason[i]);
    free(s->issue_item);
    free(s->issue_reason);
    free(s->sh);
    memset(s, 0, sizeof *s);
}

static int state_issue(progress_state *s, size_t item, char *reason, kl_err *e) {
    if (s->ni == s->cap_i) {
        size_t nc = s->cap_i ? s->cap_i * 2 : 64;
        size_t *a = realloc(s->issue_item, nc * sizeof *a);
        if (a) s->issue_item = a;
        char **b = realloc(s->issue_reason, nc * sizeof *b);
        if (b) s->issue_reason = b;
        if (!a || !b) { free(reason); return kl_err_set(e, KL_ENOMEM, "pack: out of memory"); }
        s->cap_i = nc;
    }
    s->issue_item[s->ni] = item;
    s->issue_reason[s->ni++] = reason;
    return KL_OK;
}

static int state_shard(progress_state *s, const done_shard *d, kl_err *e) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        done_shard *a = realloc(s->sh, nc * sizeof *a);
        if (!a) return kl_err_set(e, KL_ENOMEM, "pack: out of memory");
        s->sh = a; s->cap = nc;
    }
    s->sh[s->n++] = *d;
    return KL_OK;
}

static int state_write(const char *out_dir, const char *planhex, const progress_state *s, int done, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "{\"plan\": \"%s\", \"done\": %s, \"shards\": [", planhex, done ? "true" : "false");
    for (size_t i = 0; i < s->n; i++)
        kl_buf_printf(&b, "%s\n  {\"file\": \"%s\", \"records\": %lld, \"bytes\": %llu, \"sha256\": \"%s\", \"next\": %zu, \"issues\": %zu}",
                      i ? "," : "", s->sh[i].file, (long long)s->sh[i].records, (unsigned long long)s->sh[i].bytes,
                      s->sh[i].sha, s->sh[i].next, s->sh[i].issues);
    kl_buf_puts(&b, "],\n\"issues\": [");
    for (size_t i = 0; i < s->ni; i++) {
        kl_buf_printf(&b, "%s\n  {\"item\": %zu, \"reason\": ", i ? "," : "", s->issue_item[i]);
        kl_buf_json_str(&b, s->issue_reason[i]);
        kl_buf_puts(&b, "}");
    }
    kl_buf_puts(&b, "]}\n");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, STATE_FILE);
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "pack: out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

/* Reads a previous state for the same plan; keeps the prefix of shards whose
 * files still match their sha256. Returns 1 when the pack was complete. */
static int state_load(const char *out_dir, const char *planhex, size_t nitems, progress_state *s, int64_t *reused) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, STATE_FILE);
    cJSON *j = NULL;
    kl_err e = {0};
    if (!kl_path_exists(path) || kl_json_load_file(path, (void **)&j, &e) != KL_OK) return 0;
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(j, "plan"), *sh = cJSON_GetObjectItemCaseSensitive(j, "shards");
    const cJSON *is = cJSON_GetObjectItemCaseSensitive(j, "issues");
    int done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "done"));
    if (!cJSON_IsString(pl) || strcmp(pl->valuestring, planhex) != 0 || !cJSON_IsArray(sh) || !cJSON_IsArray(is)) {
        cJSON_Delete(j);
        return 0;
    }
    size_t prev_next = 0, prev_issues = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, sh) {
        done_shard d = {0};
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "file"), *h = cJSON_GetObjectItemCaseSensitive(o, "sha256");
        double rec = jnum(o, "records"), by = jnum(o, "bytes"), nx = jnum(o, "next"), ni = jnum(o, "issues");
        if (!cJSON_IsString(f) || !cJSON_IsString(h) || strlen(f->valuestring) >= sizeof d.file || strlen(h->valuestring) != 64 ||
            !(rec >= 0) || !(by >= 0) || !(nx > (double)prev_next) || nx > (double)nitems || !(ni >= (double)prev_issues) ||
            ni > (double)cJSON_GetArraySize(is))
            break;
        snprintf(d.file, sizeof d.file, "%s", f->valuestring);
        snprintf(d.sha, sizeof d.sha, "%s", h->valuestring);
        d.records = (int64_t)rec; d.bytes = (uint64_t)by; d.next = (size_t)nx; d.issues = (size_t)ni;
        char sp[4200], got[65];
        snprintf(sp, sizeof sp, "%s/%s", out_dir, d.file);
        if (strchr(d.file, '/') || kl_sha256_file_hex(sp, got, &e) != KL_OK || strcmp(got, d.sha) != 0) break;
        if (state_shard(s, &d, &e)) break;
        prev_next = d.next; prev_issues = d.issues;
    }
    if (s->n != (size_t)cJSON_GetArraySize(sh)) done = 0;
    /* issues up to the last verified shard */
    size_t k = 0;
    cJSON_ArrayForEach(o, is) {
        if (k++ >= prev_issues) break;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "reason");
        double it = jnum(o, "item");
        if (!cJSON_IsString(r) || !(it >= 0) || it >= (double)prev_next) break;
        char *reason = strdup(r->valuestring);
        if (!reason || state_issue(s, (size_t)it, reason, &e)) break;
    }
    if (s->ni != prev_issues) { /* inconsistent state: start over */
        state_free(s);
        done = 0;
    }
    *reused = (int64_t)s->n;
    cJSON_Delete(j);
    return done;
}

static int manifest_write(const char *out_dir, const plan *p, const progress_state *s, const int64_t *class_counts,
                          int64_t records, const char *label_source, char id[65], kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "{\n  \"format\": \"keel-shards\",\n  \"version\": %d,\n  \"records\": %lld,\n  \"classes\": [",
                  KL_SHARD_VERSION, (long long)records);
    for (int k = 0; k < p->nclass; k++) {
        if (k) kl_buf_puts(&b, ", ");
        kl_buf_json_str(&b, p->classes[k]);
    }
    kl_buf_puts(&b, "],\n  \"class_counts\": [");
    for (int k = 0; k < p->nclass; k++) kl_buf_printf(&b, "%s%lld", k ? ", " : "", (long long)class_counts[k]);
    kl_buf_printf(&b, "],\n  \"skipped\": %zu,\n  \"labels\": ", s->ni);
    kl_buf_json_str(&b, label_source);
    kl_buf_printf(&b, ",\n  \"page_size\": %d,\n  \"shards\": [", KL_SHARD_PAGE);
    /* the shards in order with their records; their sha256 and size in "files", the one manifest shape */
    kl_manifest_files mf = {0};
    int rc = KL_OK;
    for (size_t i = 0; i < s->n && !rc; i++) {
        kl_buf_printf(&b, "%s\n    {\"file\": \"%s\", \"records\": %lld}", i ? "," : "", s->sh[i].file,
                      (long long)s->sh[i].records);
        rc = kl_manifest_push(&mf, s->sh[i].file, s->sh[i].sha, (int64_t)s->sh[i].bytes, s->sh[i].records, NULL, e);
    }
    kl_buf_puts(&b, "\n  ],\n  \"files\": ");
    if (!rc) rc = kl_manifest_json(&mf, "  ", &b) ? kl_err_set(e, KL_ENOMEM, "pack: out of memory") : KL_OK;
    kl_manifest_files_free(&mf);
    kl_buf_puts(&b, "\n}\n");
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", out_dir);
    if (!rc)
        rc = b.failed ? kl_err_set(e, KL_ENOMEM, "pack: out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    if (rc == KL_OK) kl_sha256_buf_hex(b.data, b.len, id);
    kl_buf_free(&b);
    return rc;
}

/* Removes shard files and temp files that no finished shard accounts for. */
static void clean_dir(const char *out_dir, const progress_state *s) {
    DIR *d = opendir(out_dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        int ours = (!strncmp(n, "shard-", 6) && has_suffix(n, ".kshard")) ||
                   (!strncmp(n, ".shard-", 7) && strstr(n, ".tmp-")) || (!strncmp(n, ".manifest.json.tmp-", 19)) ||
                   (!strncmp(n, "." STATE_FILE ".tmp-", strlen(STATE_FILE) + 6));
        if (!ours) continue;
        int keep = 0;
        for (size_t i = 0; i < s->n && !keep; i++) keep = !strcmp(s->sh[i].file, n);
        if (!keep) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", out_dir, n);
            unlink(path);
        }
    }
    closedir(d);
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int kl_pack(const kl_pack_opts *o, kl_pack_result *res, kl_err *e) {
    memset(res, 0, sizeof *res);
    plan p = {0};
    progress_state st = {0};
    kl_shard_writer *w = NULL;
    checked *cb = NULL;
    kl_progress *prog = NULL;
    int64_t t0 = kl_time_mono_ns();
    double c0 = cpu_now();
    char planhex[65], path[4200];
    int rc;
    if (!o->src_dir || !o->out_dir) return kl_err_set(e, KL_EINVAL, "pack: source and output folders are required");
    if (o->shard_bytes < KL_SHARD_PAGE * 2) return kl_err_set(e, KL_EINVAL, "pack: shard size must be at least 8 KiB");
    struct stat sst;
    if (stat(o->src_dir, &sst) != 0 || !S_ISDIR(sst.st_mode))
        return kl_err_set(e, KL_ENOTFOUND, "%s: not a folder", o->src_dir);
    if ((rc = plan_build(o, &p, e))) goto fail;
    plan_hash(o, &p, planhex);
    res->files = (int64_t)p.n;
    res->num_classes = p.nclass;
    if ((rc = kl_mkdir_p(o->out_dir, e))) goto fail;
    char rs[PATH_MAX], ro[PATH_MAX];
    if (realpath(o->src_dir, rs) && realpath(o->out_dir, ro)) {
        size_t n = strlen(rs);
        if (!strcmp(rs, ro) || (!strncmp(rs, ro, n) && ro[n] == '/')) {
            rc = kl_err_set(e, KL_EINVAL, "pack: the output folder %s is inside the source %s", o->out_dir, o->src_dir);
            goto fail;
        }
    }
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    int have_manifest = kl_path_exists(path);
    int done = o->force ? 0 : state_load(o->out_dir, planhex, p.n, &st, &res->shards_reused);
    if (done && have_manifest) { /* the same pack is complete: nothing to do */
        kl_shardset *ss;
        if ((rc = kl_shardset_open(o->out_dir, 0, &ss, e))) goto fail;
        snprintf(res->id, sizeof res->id, "%s", kl_shardset_id(ss));
        res->packed = kl_shardset_count(ss);
        kl_shardset_free(ss);
        res->reused = 1;
        res->shards = (int64_t)st.n;
        for (size_t i = 0; i < st.n; i++) res->bytes_out += st.sh[i].bytes;
        goto issues;
    }
    if (have_manifest && !o->force) {
        rc = kl_err_set(e, KL_EEXIST, "%s: already holds a different shard set; use another folder or --force to replace it",
                        o->out_dir);
        goto fail;
    }
    if (have_manifest && unlink(path) != 0) { rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno)); goto fail; }
    if (o->force) state_free(&st);
    clean_dir(o->out_dir, &st);
    size_t start = st.n ? st.sh[st.n - 1].next : 0;
    if (o->progress) {
        prog = kl_progress_new("pack", p.n, "images");
        kl_progress_update(prog, start);
    }
    cb = calloc(BATCH, sizeof *cb);
    if (!cb) { rc = kl_err_set(e, KL_ENOMEM, "pack: out of memory"); goto fail; }
    for (size_t b0 = start; b0 < p.n; b0 += BATCH) {
        size_t nb = KL_MIN((size_t)BATCH, p.n - b0);
        memset(cb, 0, nb * sizeof *cb);
        batch_ctx bc = {o, &p, b0, cb, prog};
        kl_pool_parallel_for(NULL, nb, 4, check_range, &bc);
        for (size_t j = 0; j < nb; j++) {
            size_t i = b0 + j;
            checked *c = &cb[j];
            if (c->reason) {
                if (o->on_error_fail) {
                    rc = kl_err_set(e, KL_EPARSE, "%s/%s: %s (--on-error fail)", o->src_dir, p.it[i].key, c->reason);
                    goto fail;
                }
                rc = state_issue(&st, i, c->reason, e);
                c->reason = NULL;
                if (rc) goto fail;
                continue;
            }
            res->bytes_in += c->len;
            if (w && kl_shard_writer_count(w) > 0 &&
                kl_shard_writer_size(w) + c->len + KL_SHARD_PAGE + KL_SHARD_ENTRY_SIZE + strlen(p.it[i].key) + 1 > o->shard_bytes) {
                done_shard d = {0};
                snprintf(d.file, sizeof d.file, "shard-%05zu.kshard", st.n);
                d.records = kl_shard_writer_count(w);
                rc = kl_shard_writer_finish(w, d.sha, &d.bytes, e);
                w = NULL;
                d.next = i;
                d.issues = st.ni;
                if (rc || (rc = state_shard(&st, &d, e)) || (rc = state_write(o->out_dir, planhex, &st, 0, e))) goto fail;
            }
            if (!w) {
                snprintf(path, sizeof path, "%s/shard-%05zu.kshard", o->out_dir, st.n);
                if ((rc = kl_shard_writer_open(path, &w, e))) goto fail;
            }
            if ((rc = kl_shard_writer_add(w, c->bytes, c->len, p.it[i].label, p.it[i].key, e))) goto fail;
            kl_mem_free(c->bytes);
            c->bytes = NULL;
        }
    }
    if (w) {
        done_shard d = {0};
        snprintf(d.file, sizeof d.file, "shard-%05zu.kshard", st.n);
        d.records = kl_shard_writer_count(w);
        rc = kl_shard_writer_finish(w, d.sha, &d.bytes, e);
        w = NULL;
        d.next = p.n;
        d.issues = st.ni;
        if (rc || (rc = state_shard(&st, &d, e))) goto fail;
    } else if (st.n > 0) { /* the tail was all skipped files: the last shard accounts for them */
        st.sh[st.n - 1].next = p.n;
        st.sh[st.n - 1].issues = st.ni;
    }
    /* class counts: every planned file that is not an issue */
    int64_t *cc = calloc((size_t)p.nclass, sizeof *cc), records = 0;
    if (!cc) { rc = kl_err_set(e, KL_ENOMEM, "pack: out of memory"); goto fail; }
    for (size_t i = 0, k = 0; i < p.n; i++) {
        if (k < st.ni && st.issue_item[k] == i) { k++; continue; }
        cc[p.it[i].label]++;
        records++;
    }
    if (records == 0) {
        free(cc);
        rc = kl_err_set(e, KL_EINVAL, "%s: none of the %zu files is a valid image", o->src_dir, p.n);
        goto fail;
    }
    /* state "done" first: a kill before the manifest lands resumes straight to writing it */
    if ((rc = state_write(o->out_dir, planhex, &st, 1, e))) { free(cc); goto fail; }
    rc = manifest_write(o->out_dir, &p, &st, cc, records, o->labels_path ? "file" : "folders", res->id, e);
    free(cc);
    if (rc) goto fail;
    res->shards = (int64_t)st.n;
    for (size_t i = 0; i < st.n; i++) res->bytes_out += st.sh[i].bytes;
    res->packed = records;
issues:
    res->skipped = (int64_t)st.ni;
    res->issues = calloc(st.ni ? st.ni : 1, sizeof *res->issues);
    if (res->issues) {
        for (size_t k = 0; k < st.ni; k++) {
            res->issues[k].path = strdup(p.it[st.issue_item[k]].key);
            res->issues[k].reason = strdup(st.issue_reason[k]);
        }
        res->n_issues = st.ni;
    }
    rc = KL_OK;
fail:
    kl_shard_writer_abort(w);
    if (cb)
        for (size_t j = 0; j < BATCH; j++) { kl_mem_free(cb[j].bytes); free(cb[j].reason); }
    free(cb);
    kl_progress_finish(prog);
    res->seconds = (double)(kl_time_mono_ns() - t0) / 1e9;
    res->cpu_seconds = cpu_now() - c0;
    state_free(&st);
    plan_free(&p);
    return rc;
}
