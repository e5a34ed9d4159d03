/* Manifests: the one reader, writer and checker of the file lists (name ->
 * sha256, bytes) that datasets, feature datasets, image shards, model
 * folders, serving versions and pipeline exports keep. One on-disk shape
 * ("files" as a map name -> {"sha256", "bytes", ...}); every older shape
 * keel wrote is read by read_compat below and written back in the new one. */
#include "core_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MANIFEST_FILE_MAX (1ull << 30)       /* a manifest.json / meta.json read whole */
#define BYTES_MAX         9007199254740992.0 /* 2^53: exact in a JSON number */

/* ================================================================ verify modes */

int kl_verify_mode_parse(const char *s, kl_verify_mode *m, kl_err *e) {
    static const char *const names[] = {"sha256", "size", "none"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) {
            *m = (kl_verify_mode)i;
            return KL_OK;
        }
    return kl_err_set(e, KL_EINVAL, "--verify %s: expected sha256, size or none", s ? s : "");
}

const char *kl_verify_mode_name(kl_verify_mode m) {
    return m == KL_VERIFY_SIZE ? "size" : m == KL_VERIFY_NONE ? "none" : "sha256";
}

/* ================================================================ the list */

/* A name a manifest may list: relative, no "." or ".." component, no
 * empty component, bounded. */
static int name_ok(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (!n || n > KL_MANIFEST_NAME_MAX || s[0] == '/') return 0;
    for (const char *c = s; *c;) {
        size_t k = strcspn(c, "/");
        if (!k || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.')) return 0;
        c += k;
        if (*c == '/' && !*++c) return 0;
    }
    return 1;
}

static int hex_ok(const char *h) { return h && strlen(h) == 64 && strspn(h, "0123456789abcdefABCDEF") == 64; }

void kl_manifest_files_free(kl_manifest_files *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].name);
        cJSON_Delete(m->v[i].extra);
    }
    free(m->v);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* FNV-1a of a name: the index of the hash table of names. */
static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static uint32_t *slot_of(const kl_manifest_files *m, const char *name) {
    size_t mask = m->nslots - 1, i = (size_t)name_hash(name) & mask;
    while (m->slots[i] && strcmp(m->v[m->slots[i] - 1].name, name)) i = (i + 1) & mask;
    return &m->slots[i];
}

const kl_manifest_file *kl_manifest_find(const kl_manifest_files *m, const char *name) {
    if (!name || !m->nslots) return NULL;
    uint32_t k = *slot_of(m, name);
    return k ? &m->v[k - 1] : NULL;
}

/* Room for one more entry: the array, and the index kept at most half full. */
static int grow(kl_manifest_files *m) {
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 16;
        kl_manifest_file *v = realloc(m->v, nc * sizeof *v);
        if (!v) return KL_ENOMEM;
        m->v = v;
        m->cap = nc;
    }
    if (2 * (m->n + 1) <= m->nslots) return KL_OK;
    size_t ns = m->nslots ? m->nslots * 2 : 32;
    uint32_t *old = m->slots;
    if (!(m->slots = calloc(ns, sizeof *m->slots))) {
        m->slots = old;
        return KL_ENOMEM;
    }
    free(old);
    m->nslots = ns;
    for (size_t i = 0; i < m->n; i++) *slot_of(m, m->v[i].name) = (uint32_t)(i + 1);
    return KL_OK;
}

int kl_manifest_push(kl_manifest_files *m, const char *name, const char *sha256_hex, int64_t bytes, int64_t rows,
                     const void *extra, kl_err *e) {
    if (!name_ok(name))
        return kl_err_set(e, KL_EINVAL, "manifest file '%.200s': not a relative path inside the folder",
                          name ? name : "");
    if (!hex_ok(sha256_hex)) return kl_err_set(e, KL_EINVAL, "manifest file '%s': sha256 is not 64 hex digits", name);
    if (m->n >= KL_MANIFEST_MAX_FILES)
        return kl_err_set(e, KL_EINVAL, "manifest file '%s': more than %u files", name, KL_MANIFEST_MAX_FILES);
    if (kl_manifest_find(m, name)) return kl_err_set(e, KL_EINVAL, "manifest file '%s': listed twice", name);
    if (grow(m)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_manifest_file *f = &m->v[m->n];
    memset(f, 0, sizeof *f);
    f->bytes = bytes < 0 ? -1 : bytes;
    f->rows = rows < 0 ? -1 : rows;
    for (int i = 0; i < 64; i++) f->sha256[i] = (char)(sha256_hex[i] | 0x20); /* hex digits: lower case */
    f->name = strdup(name);
    f->extra = extra ? cJSON_Duplicate(extra, 1) : NULL;
    if (!f->name || (extra && !f->extra)) {
        free(f->name);
        cJSON_Delete(f->extra);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    *slot_of(m, f->name) = (uint32_t)(m->n + 1);
    m->n++;
    return KL_OK;
}

int kl_manifest_add(kl_manifest_files *m, const char *dir, const char *name, kl_err *e) {
    char p[4400], hex[65];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int rc = kl_sha256_file_hex(p, hex, e);
    if (rc) return rc;
    if (stat(p, &st)) return kl_err_set(e, -errno, "%s: %s", p, strerror(errno));
    return kl_manifest_push(m, name, hex, (int64_t)st.st_size, -1, NULL, e);
}

/* ================================================================ reading */

/* A count member (bytes, size, rows, records): absent -> -1; otherwise a
 * whole number in [0, 2^53]. */
static int count_member(const cJSON *o, const char *k1, const char *k2, int64_t *out) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, k1);
    if (!n && k2) n = cJSON_GetObjectItemCaseSensitive(o, k2);
    *out = -1;
    if (!n) return KL_OK;
    if (!cJSON_IsNumber(n) || n->valuedouble < 0 || n->valuedouble > BYTES_MAX ||
        n->valuedouble != (double)(int64_t)n->valuedouble)
        return KL_EPARSE;
    *out = (int64_t)n->valuedouble;
    return KL_OK;
}

/* A string (anywhere in o) that holds a \u0000: names, hashes and the other
 * members are C strings here, so one is refused rather than cut short. */
static int has_nul(const cJSON *o) {
    if (cJSON_IsString(o)) return kl_json_string_len(o) != strlen(o->valuestring);
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next)
        if (has_nul(c)) return 1;
    return 0;
}

/* An entry's members (and those of objects inside it) have distinct names,
 * at most ENTRY_MEMBERS_MAX of them, at most ENTRY_DEPTH_MAX deep: JSON
 * readers differ on which of two "bytes" counts, so two are refused. */
#define ENTRY_MEMBERS_MAX 64
#define ENTRY_DEPTH_MAX   8
static const char *entry_shape_bad(const cJSON *o, int depth) {
    if (!cJSON_IsObject(o) && !cJSON_IsArray(o)) return NULL;
    if (depth > ENTRY_DEPTH_MAX) return "nested too deep";
    int n = 0;
    for (const cJSON *c = o->child; c; c = c->next) {
        if (++n > ENTRY_MEMBERS_MAX) return "too many members";
        for (const cJSON *d = o->child; cJSON_IsObject(o) && d != c; d = d->next)
            if (!strcmp(d->string, c->string)) return "a member is given twice";
        const char *why = entry_shape_bad(c, depth + 1);
        if (why) return why;
    }
    return NULL;
}

/* The members of an entry other than those this module reads, or NULL. */
static cJSON *extra_of(const cJSON *o) {
    static const char *const known[] = {"path", "name", "file", "sha256", "bytes", "size", "rows", "records"};
    cJSON *x = NULL;
    for (const cJSON *c = o->child; c; c = c->next) {
        int k = 0;
        while (k < (int)KL_ARRAY_LEN(known) && strcmp(c->string, known[k])) k++;
        if (k < (int)KL_ARRAY_LEN(known)) continue;
        if (!x && !(x = cJSON_CreateObject())) return NULL;
        cJSON_AddItemToObject(x, c->string, cJSON_Duplicate(c, 1));
    }
    return x;
}

/* One entry: o is an object ({sha256, bytes, ...}) or a hex string; name
 * from the map key or (array shapes) the object's own name member. */
static int read_entry(const cJSON *o, const char *name, const char *label, const char *where, kl_manifest_files *out,
                      kl_err *e) {
    const char *sha =
        cJSON_IsString(o) ? o->valuestring : cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "sha256"));
    int64_t bytes = -1, rows = -1;
    if (!cJSON_IsString(o) && !cJSON_IsObject(o))
        return kl_err_set(e, KL_EPARSE, "%s: %s: expected an object with sha256 and bytes", where, label);
    if (cJSON_IsObject(o) && (count_member(o, "bytes", "size", &bytes) || count_member(o, "rows", "records", &rows)))
        return kl_err_set(e, KL_EPARSE, "%s: %s: bytes and rows must be whole numbers from 0 to 2^53", where, label);
    if (has_nul(o)) return kl_err_set(e, KL_EPARSE, "%s: %s: a string holds \\u0000", where, label);
    const char *why = entry_shape_bad(o, 0);
    if (why) return kl_err_set(e, KL_EPARSE, "%s: %s: %s", where, label, why);
    if (!name) return kl_err_set(e, KL_EPARSE, "%s: %s: no file name (\"path\")", where, label);
    if (!sha) return kl_err_set(e, KL_EPARSE, "%s: %s: no sha256", where, label);
    cJSON *x = cJSON_IsObject(o) ? extra_of(o) : NULL;
    int rc = kl_manifest_push(out, name, sha, bytes, rows, x, e);
    cJSON_Delete(x);
    if (rc == KL_EINVAL && e) e->code = rc = KL_EPARSE; /* a bad entry of a document: malformed input */
    if (rc) kl_err_prefix(e, "%s: %s", where, label);
    return rc;
}

static int read_map(const cJSON *map, const char *member, const char *where, kl_manifest_files *out, kl_err *e) {
    int rc = KL_OK;
    for (const cJSON *c = map->child; c && !rc; c = c->next) {
        char label[300];
        snprintf(label, sizeof label, "%s[\"%.200s\"]", member, c->string);
        rc = read_entry(c, c->string, label, where, out, e);
    }
    return rc;
}

static int read_array(const cJSON *arr, const char *member, const char *where, kl_manifest_files *out, kl_err *e) {
    int rc = KL_OK;
    size_t i = 0;
    for (const cJSON *c = arr->child; c && !rc; c = c->next, i++) {
        char label[300];
        snprintf(label, sizeof label, "%s[%zu]", member, i);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "path"));
        if (!name) name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
        if (!name) name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
        rc = cJSON_IsObject(c) ? read_entry(c, name, label, where, out, e)
                               : kl_err_set(e, KL_EPARSE, "%s: %s: expected an object", where, label);
    }
    return rc;
}

/* The compatibility reader: every shape keel has written, in the order of
 * preference (the current one first). */
static int read_compat(const cJSON *doc, const char *where, kl_manifest_files *out, kl_err *e) {
    static const char *const members[] = {"files", "sha256", "shards"};
    for (int k = 0; k < 3; k++) {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(doc, members[k]);
        if (cJSON_IsObject(l) && k != 2) return read_map(l, members[k], where, out, e);
        if (cJSON_IsArray(l) && k != 1) return read_array(l, members[k], where, out, e);
        if (l && k == 0) return kl_err_set(e, KL_EPARSE, "%s: \"files\" is neither a map nor a list", where);
    }
    return kl_err_set(e, KL_ENOTFOUND, "%s: no files list", where);
}

int kl_manifest_files_read(const void *doc, const char *where, kl_manifest_files *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject((const cJSON *)doc)) return kl_err_set(e, KL_EPARSE, "%s: not a JSON object", where);
    int rc = read_compat(doc, where, out, e);
    if (rc) kl_manifest_files_free(out);
    return rc;
}

int kl_manifest_files_load(const char *path, kl_manifest_files *out, void **doc, kl_err *e) {
    memset(out, 0, sizeof *out);
    if (doc) *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    void *j = NULL;
    int rc = kl_read_file_max(path, MANIFEST_FILE_MAX, &text, &len, e);
    if (!rc) rc = kl_json_parse_opts(text, len, path, KL_JSON_KEEP_NUL, &j, e); /* stats may hold \u0000 */
    kl_mem_free(text);
    if (!rc) rc = kl_manifest_files_read(j, path, out, e);
    if (rc || !doc) cJSON_Delete(j);
    else *doc = j;
    return rc;
}

/* ================================================================ writing */

static cJSON *entry_json(const kl_manifest_file *f) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "sha256", f->sha256)) {
        cJSON_Delete(o);
        return NULL;
    }
    if (f->bytes >= 0) cJSON_AddNumberToObject(o, "bytes", (double)f->bytes);
    if (f->rows >= 0) cJSON_AddNumberToObject(o, "rows", (double)f->rows);
    for (const cJSON *c = f->extra ? ((const cJSON *)f->extra)->child : NULL; c; c = c->next)
        cJSON_AddItemToObject(o, c->string, cJSON_Duplicate(c, 1));
    return o;
}

int kl_manifest_write(const kl_manifest_files *m, void *obj, kl_err *e) {
    cJSON *map = cJSON_CreateObject();
    for (size_t i = 0; map && i < m->n; i++) {
        cJSON *o = entry_json(&m->v[i]);
        if (!o) {
            cJSON_Delete(map);
            map = NULL;
            break;
        }
        cJSON_AddItemToObject(map, m->v[i].name, o);
    }
    if (!map) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(obj, "sha256"))) /* the older shape of serving versions */
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "sha256");
    if (cJSON_GetObjectItemCaseSensitive(obj, "files")) cJSON_ReplaceItemInObjectCaseSensitive(obj, "files", map);
    else cJSON_AddItemToObject(obj, "files", map);
    return KL_OK;
}

int kl_manifest_json(const kl_manifest_files *m, const char *indent, kl_buf *b) {
    kl_buf_puts(b, "{");
    for (size_t i = 0; i < m->n; i++) {
        const kl_manifest_file *f = &m->v[i];
        kl_buf_printf(b, "%s\n%s  ", i ? "," : "", indent);
        kl_buf_json_str(b, f->name);
        kl_buf_printf(b, ": {\"sha256\": \"%s\"", f->sha256);
        if (f->bytes >= 0) kl_buf_printf(b, ", \"bytes\": %lld", (long long)f->bytes);
        if (f->rows >= 0) kl_buf_printf(b, ", \"rows\": %lld", (long long)f->rows);
        for (const cJSON *c = f->extra ? ((const cJSON *)f->extra)->child : NULL; c; c = c->next) {
            char *v = cJSON_PrintUnformatted(c);
            if (!v) return KL_ENOMEM;
            kl_buf_puts(b, ", ");
            kl_buf_json_str(b, c->string);
            kl_buf_printf(b, ": %s", v);
            cJSON_free(v);
        }
        kl_buf_puts(b, "}");
    }
    kl_buf_printf(b, "%s}", m->n ? "\n" : "");
    if (m->n) kl_buf_puts(b, indent);
    return KL_OK;
}

/* ================================================================ checking */

int kl_manifest_digest_check(const char *path, const char *got_hex, int64_t got_bytes, const kl_manifest_file *f,
                             const char *where, const char *hint, kl_err *e) {
    int size_bad = f->bytes >= 0 && got_bytes >= 0 && f->bytes != got_bytes;
    if (!size_bad && (!got_hex || !strcasecmp(got_hex, f->sha256))) return KL_OK;
    char gb[40] = "", wb[40] = "";
    if (got_bytes >= 0) snprintf(gb, sizeof gb, " (%lld bytes)", (long long)got_bytes);
    if (f->bytes >= 0) snprintf(wb, sizeof wb, " (%lld bytes)", (long long)f->bytes);
    if (!got_hex)
        return kl_err_set(e, KL_ECHECKSUM, "%s: size mismatch: the file has %lld bytes, the manifest %s says %lld%s%s",
                          path, (long long)got_bytes, where, (long long)f->bytes, hint ? " " : "", hint ? hint : "");
    return kl_err_set(e, KL_ECHECKSUM, "%s: sha256 mismatch: the file has sha256 %s%s, the manifest %s says %s%s%s%s",
                      path, got_hex, gb, where, f->sha256, wb, hint ? " " : "", hint ? hint : "");
}

int kl_manifest_file_verify(const char *dir, const kl_manifest_file *f, kl_verify_mode mode, const char *where,
                            const char *hint, kl_err *e) {
    if (mode == KL_VERIFY_NONE) return KL_OK;
    char p[4400], hex[65];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, f->name);
    if (stat(p, &st))
        return kl_err_set(e, errno == ENOENT ? KL_ENOTFOUND : -errno, "%s: listed in %s but missing (%s)", p, where,
                          strerror(errno));
    if (mode == KL_VERIFY_SIZE) return kl_manifest_digest_check(p, NULL, (int64_t)st.st_size, f, where, hint, e);
    int rc = kl_sha256_file_hex(p, hex, e);
    return rc ? rc : kl_manifest_digest_check(p, hex, (int64_t)st.st_size, f, where, hint, e);
}
