/* Spec documents: YAML (and JSON, which libyaml reads as YAML) loaded into
 * a tree of nodes that remember file, line, column and dotted path, with
 * typed getters whose errors point at the offending value. Also the strict
 * scalar parsers every reader of outside input shares. */
#include "core_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

struct kl_node {
    kl_node_kind kind;
    int quoted, line, col;
    char *scalar;
    char **keys;
    kl_node **items;
    size_t n, cap;
    char *path;
    const char *file;
    uint64_t weight; /* nodes of the subtree with every alias expanded (capped at KL_DOC_MAX_NODES + 1) */
    int open;        /* its children are being parsed: an alias to it would make a cycle */
    int used;        /* a reader looked it up (kl_node_get / kl_node_at): kl_node_check_used */
};

struct kl_doc {
    kl_arena *arena;
    char *name;
    kl_node *root;
    struct anchor { char *name; kl_node *node; struct anchor *next; } *anchors;
};

/* ---- scalar parsing ------------------------------------------------------- */

int kl_parse_int64(const char *s, int64_t *out) {
    if (!s || !*s) return KL_EINVAL;
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (!*p) return KL_EINVAL;
    for (const char *q = p; *q; q++)
        if ((*q < '0' || *q > '9') && *q != '_') return KL_EINVAL;
    char buf[64];
    size_t k = 0;
    for (const char *q = s; *q; q++)
        if (*q != '_') {
            if (k + 1 >= sizeof buf) return KL_ERANGE;
            buf[k++] = *q;
        }
    buf[k] = 0;
    errno = 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE) return KL_ERANGE;
    if (*end) return KL_EINVAL;
    *out = v;
    return KL_OK;
}

int kl_parse_double(const char *s, double *out) {
    if (!s || !*s) return KL_EINVAL;
    const char *p = s + (*s == '+' || *s == '-');
    if (!strcasecmp(p, "nan") || !strcasecmp(p, ".nan")) { *out = NAN; return KL_OK; }
    if (!strcasecmp(p, "inf") || !strcasecmp(p, ".inf") || !strcasecmp(p, "infinity")) {
        *out = *s == '-' ? -INFINITY : INFINITY;
        return KL_OK;
    }
    /* digits, one dot, an exponent: no hex floats, no leading/trailing space */
    int digits = 0;
    for (const char *q = p; *q; q++) {
        if (*q >= '0' && *q <= '9') digits++;
        else if (*q != '.' && *q != 'e' && *q != 'E' && *q != '+' && *q != '-') return KL_EINVAL;
    }
    if (!digits) return KL_EINVAL;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || end == s) return KL_EINVAL;
    if (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL)) return KL_ERANGE;
    *out = v;
    return KL_OK;
}

int kl_parse_bool(const char *s, int *out) {
    static const char *t[] = {"true", "yes", "on", "1"}, *f[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, t[i])) { *out = 1; return KL_OK; }
        if (!strcasecmp(s, f[i])) { *out = 0; return KL_OK; }
    }
    return KL_EINVAL;
}

/* ---- tree building -------------------------------------------------------- */

static kl_node *node_new(kl_doc *d, kl_node_kind k, const yaml_mark_t *m, const char *path) {
    kl_node *n = kl_arena_alloc(d->arena, sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->line = (int)m->line + 1;
    n->col = (int)m->column + 1;
    n->path = kl_arena_strdup(d->arena, path);
    n->file = d->name;
    return n->path ? n : NULL;
}

static int node_push(kl_doc *d, kl_node *parent, const char *key, kl_node *child) {
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        kl_node **items = kl_arena_alloc(d->arena, cap * sizeof *items);
        char **keys = kl_arena_alloc(d->arena, cap * sizeof *keys);
        if (!items || !keys) return KL_ENOMEM;
        if (parent->n) {
            memcpy(items, parent->items, parent->n * sizeof *items);
            memcpy(keys, parent->keys, parent->n * sizeof *keys);
        }
        parent->items = items;
        parent->keys = keys;
        parent->cap = cap;
    }
    parent->keys[parent->n] = key ? kl_arena_strdup(d->arena, key) : NULL;
    parent->items[parent->n++] = child;
    return KL_OK;
}

static void child_path(const kl_node *parent, const char *key, size_t index, char *out, size_t n) {
    const char *pp = parent ? parent->path : "";
    if (key) snprintf(out, n, "%s%s%s", pp, *pp ? "." : "", key);
    else snprintf(out, n, "%s%s%zu", pp, *pp ? "." : "", index);
}

static int is_null_scalar(const yaml_event_t *ev) {
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)ev->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* Parses one node starting at ev (already taken). */
static int parse_node(kl_doc *d, yaml_parser_t *ps, yaml_event_t *ev, const char *path, kl_node **out,
                      kl_err *e, int depth);

static int next_event(kl_doc *d, yaml_parser_t *ps, yaml_event_t *ev, kl_err *e) {
    if (!yaml_parser_parse(ps, ev))
        return kl_err_setloc(e, KL_EPARSE, d->name, (int)ps->problem_mark.line + 1,
                             (int)ps->problem_mark.column + 1, "%s%s%s",
                             ps->problem ? ps->problem : "YAML syntax error", ps->context ? " " : "",
                             ps->context ? ps->context : "");
    return KL_OK;
}

static int remember_anchor(kl_doc *d, const yaml_char_t *anchor, kl_node *n) {
    if (!anchor) return KL_OK;
    struct anchor *a = kl_arena_alloc(d->arena, sizeof *a);
    if (!a) return KL_ENOMEM;
    a->name = kl_arena_strdup(d->arena, (const char *)anchor);
    a->node = n;
    a->next = d->anchors;
    d->anchors = a;
    return KL_OK;
}

static int parse_node(kl_doc *d, yaml_parser_t *ps, yaml_event_t *ev, const char *path, kl_node **out,
                      kl_err *e, int depth) {
    int rc = KL_OK;
    *out = NULL;
    if (depth > 128) return kl_err_setloc(e, KL_EPARSE, d->name, (int)ev->start_mark.line + 1,
                                          (int)ev->start_mark.column + 1, "nesting deeper than 128 levels");
    switch (ev->type) {
    case YAML_ALIAS_EVENT: {
        for (struct anchor *a = d->anchors; a; a = a->next)
            if (!strcmp(a->name, (const char *)ev->data.alias.anchor)) {
                if (a->node->open)
                    return kl_err_setloc(e, KL_EPARSE, d->name, (int)ev->start_mark.line + 1,
                                         (int)ev->start_mark.column + 1, "alias *%s refers to a node that contains it",
                                         ev->data.alias.anchor);
                *out = a->node;
                return KL_OK;
            }
        return kl_err_setloc(e, KL_EPARSE, d->name, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1,
                             "unknown alias *%s", ev->data.alias.anchor);
    }
    case YAML_SCALAR_EVENT: {
        kl_node *n = node_new(d, is_null_scalar(ev) ? KL_NODE_NULL : KL_NODE_SCALAR, &ev->start_mark, path);
        if (!n) return kl_err_set(e, KL_ENOMEM, "out of memory");
        n->scalar = kl_arena_strdup(d->arena, (const char *)ev->data.scalar.value);
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        n->weight = 1;
        if (!n->scalar || remember_anchor(d, ev->data.scalar.anchor, n)) return kl_err_set(e, KL_ENOMEM, "out of memory");
        *out = n;
        return KL_OK;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        kl_node *n = node_new(d, is_map ? KL_NODE_MAP : KL_NODE_SEQ, &ev->start_mark, path);
        if (!n) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if (remember_anchor(d, is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor, n))
            return kl_err_set(e, KL_ENOMEM, "out of memory");
        n->open = 1;
        n->weight = 1;
        for (;;) {
            yaml_event_t kev;
            if ((rc = next_event(d, ps, &kev, e))) return rc;
            if (kev.type == YAML_SEQUENCE_END_EVENT || kev.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&kev);
                break;
            }
            char cpath[1024];
            char *key = NULL;
            if (is_map) {
                if (kev.type != YAML_SCALAR_EVENT) {
                    rc = kl_err_setloc(e, KL_EPARSE, d->name, (int)kev.start_mark.line + 1,
                                       (int)kev.start_mark.column + 1, "%s: mapping keys must be plain scalars",
                                       *path ? path : "(root)");
                    yaml_event_delete(&kev);
                    return rc;
                }
                key = kl_arena_strdup(d->arena, (const char *)kev.data.scalar.value);
                int kline = (int)kev.start_mark.line + 1, kcol = (int)kev.start_mark.column + 1;
                yaml_event_delete(&kev);
                if (!key) return kl_err_set(e, KL_ENOMEM, "out of memory");
                for (size_t i = 0; i < n->n; i++)
                    if (!strcmp(n->keys[i], key)) {
                        child_path(n, key, 0, cpath, sizeof cpath);
                        return kl_err_setloc(e, KL_EPARSE, d->name, kline, kcol, "%s: duplicate key (first at line %d)",
                                             cpath, n->items[i]->line);
                    }
                if ((rc = next_event(d, ps, &kev, e))) return rc;
            }
            child_path(n, key, n->n, cpath, sizeof cpath);
            kl_node *child;
            rc = parse_node(d, ps, &kev, cpath, &child, e, depth + 1);
            yaml_event_delete(&kev);
            if (rc) return rc;
            if (node_push(d, n, key, child)) return kl_err_set(e, KL_ENOMEM, "out of memory");
            /* every walk of the tree (config show, to_json) visits an alias's
             * node once per alias: the expanded size is what is bounded */
            n->weight += child->weight;
            if (n->weight > KL_DOC_MAX_NODES)
                return kl_err_setloc(e, KL_ERANGE, d->name, n->line, n->col,
                                     "%s: aliases expand the document beyond %d nodes (the limit of a YAML document)",
                                     *path ? path : "(root)", KL_DOC_MAX_NODES);
        }
        n->open = 0;
        *out = n;
        return KL_OK;
    }
    default:
        return kl_err_setloc(e, KL_EPARSE, d->name, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1,
                             "unexpected YAML event");
    }
}

int kl_doc_load_str(const char *text, size_t len, const char *name, kl_doc **out, kl_err *e) {
    *out = NULL;
    kl_doc *d = calloc(1, sizeof *d);
    if (!d) return kl_err_set(e, KL_ENOMEM, "out of memory");
    d->arena = kl_arena_new(16384, KL_TAG_OTHER);
    d->name = strdup(name ? name : "<string>");
    if (!d->arena || !d->name) { kl_doc_free(d); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    yaml_parser_t ps;
    if (!yaml_parser_initialize(&ps)) { kl_doc_free(d); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    yaml_parser_set_input_string(&ps, (const unsigned char *)text, len);
    int rc = KL_OK, docs = 0;
    for (;;) {
        yaml_event_t ev;
        if ((rc = next_event(d, &ps, &ev, e))) break;
        yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_END_EVENT) { yaml_event_delete(&ev); break; }
        if (t == YAML_DOCUMENT_START_EVENT) {
            if (++docs > 1) {
                rc = kl_err_setloc(e, KL_EPARSE, d->name, (int)ev.start_mark.line + 1, 1,
                                   "more than one YAML document in the file");
                yaml_event_delete(&ev);
                break;
            }
        } else if (t == YAML_SCALAR_EVENT || t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT ||
                   t == YAML_ALIAS_EVENT) {
            rc = parse_node(d, &ps, &ev, "", &d->root, e, 0);
        }
        yaml_event_delete(&ev);
        if (rc) break;
    }
    yaml_parser_delete(&ps);
    if (rc == KL_OK && !d->root) {
        yaml_mark_t m = {0, 0, 0};
        d->root = node_new(d, KL_NODE_NULL, &m, "");
        if (!d->root) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    if (rc) { kl_doc_free(d); return rc; }
    *out = d;
    return KL_OK;
}

int kl_doc_load_file(const char *path, kl_doc **out, kl_err *e) {
    char *text;
    size_t len;
    *out = NULL;
    int rc = kl_read_file(path, &text, &len, e);
    if (rc) return rc;
    rc = kl_doc_load_str(text, len, path, out, e);
    kl_mem_free(text);
    return rc;
}

void kl_doc_free(kl_doc *d) {
    if (!d) return;
    kl_arena_free(d->arena);
    free(d->name);
    free(d);
}

const kl_node *kl_doc_root(const kl_doc *d) { return d->root; }
const char *kl_doc_name(const kl_doc *d) { return d->name; }

/* ---- access --------------------------------------------------------------- */

kl_node_kind kl_node_kind_of(const kl_node *n) { return n ? n->kind : KL_NODE_NULL; }
const char *kl_node_kind_name(kl_node_kind k) {
    switch (k) {
    case KL_NODE_NULL: return "null";
    case KL_NODE_SCALAR: return "a scalar";
    case KL_NODE_SEQ: return "a list";
    case KL_NODE_MAP: return "a mapping";
    }
    return "?";
}
size_t kl_node_len(const kl_node *n) { return n && (n->kind == KL_NODE_SEQ || n->kind == KL_NODE_MAP) ? n->n : 0; }
/* The lookups mark what they return as read, so that kl_node_check_used can
 * name a key that no reader looked at (a key accepted and then ignored). The
 * flag is the only thing a reader changes in a document. */
static const kl_node *mark_used(kl_node *n) {
    if (n) n->used = 1;
    return n;
}
const kl_node *kl_node_at(const kl_node *n, size_t i) { return i < kl_node_len(n) ? mark_used(n->items[i]) : NULL; }
const char *kl_node_key_at(const kl_node *n, size_t i) {
    return n && n->kind == KL_NODE_MAP && i < n->n ? n->keys[i] : NULL;
}
const kl_node *kl_node_get(const kl_node *n, const char *key) {
    if (!n || n->kind != KL_NODE_MAP) return NULL;
    for (size_t i = 0; i < n->n; i++)
        if (!strcmp(n->keys[i], key)) return mark_used(n->items[i]);
    return NULL;
}
const kl_node *kl_node_find(const kl_node *n, const char *path) {
    char part[256];
    while (n && *path) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        if (len >= sizeof part) return NULL;
        memcpy(part, path, len);
        part[len] = 0;
        if (n->kind == KL_NODE_SEQ) {
            int64_t i;
            if (kl_parse_int64(part, &i) || i < 0) return NULL;
            n = kl_node_at(n, (size_t)i);
        } else {
            n = kl_node_get(n, part);
        }
        path = dot ? dot + 1 : path + len;
    }
    return n;
}
const char *kl_node_scalar(const kl_node *n) {
    return n && (n->kind == KL_NODE_SCALAR || n->kind == KL_NODE_NULL) ? n->scalar : NULL;
}
int kl_node_is_quoted(const kl_node *n) { return n ? n->quoted : 0; }
int kl_node_line(const kl_node *n) { return n ? n->line : 0; }
int kl_node_col(const kl_node *n) { return n ? n->col : 0; }
const char *kl_node_path(const kl_node *n) { return n ? n->path : ""; }
const char *kl_node_file(const kl_node *n) { return n ? n->file : ""; }

int kl_node_error(const kl_node *n, kl_err *e, int code, const char *fmt, ...) {
    if (!e) return code;
    va_list ap;
    va_start(ap, fmt);
    kl_err_vset(e, code, fmt, ap);
    va_end(ap);
    if (n) {
        snprintf(e->file, sizeof e->file, "%s", n->file ? n->file : "");
        e->line = n->line;
        e->col = n->col;
        if (n->path && *n->path) snprintf(e->field, sizeof e->field, "%s", n->path);
    }
    return code;
}

static int want_scalar(const kl_node *n, const char *what, kl_err *e) {
    if (!n) return kl_err_set(e, KL_ENOTFOUND, "missing value (expected %s)", what);
    if (n->kind != KL_NODE_SCALAR)
        return kl_node_error(n, e, KL_EINVAL, "expected %s, got %s", what, kl_node_kind_name(n->kind));
    return KL_OK;
}

int kl_node_int(const kl_node *n, int64_t *out, kl_err *e) {
    int rc = want_scalar(n, "an integer", e);
    if (rc) return rc;
    rc = kl_parse_int64(n->scalar, out);
    if (rc == KL_ERANGE) return kl_node_error(n, e, KL_ERANGE, "integer \"%s\" is out of range", n->scalar);
    if (rc) return kl_node_error(n, e, KL_EINVAL, "expected an integer, got \"%s\"", n->scalar);
    return KL_OK;
}

int kl_node_double(const kl_node *n, double *out, kl_err *e) {
    int rc = want_scalar(n, "a number", e);
    if (rc) return rc;
    if (kl_parse_double(n->scalar, out)) return kl_node_error(n, e, KL_EINVAL, "expected a number, got \"%s\"", n->scalar);
    return KL_OK;
}

int kl_node_bool(const kl_node *n, int *out, kl_err *e) {
    int rc = want_scalar(n, "true or false", e);
    if (rc) return rc;
    if (kl_parse_bool(n->scalar, out)) return kl_node_error(n, e, KL_EINVAL, "expected true or false, got \"%s\"", n->scalar);
    return KL_OK;
}

int kl_node_str(const kl_node *n, const char **out, kl_err *e) {
    int rc = want_scalar(n, "a string", e);
    if (rc) return rc;
    *out = n->scalar;
    return KL_OK;
}

static const kl_node *field(const kl_node *map, const char *key) {
    const kl_node *n = kl_node_get(map, key);
    return n && n->kind == KL_NODE_NULL ? NULL : n;
}

int kl_spec_int(const kl_node *map, const char *key, int64_t def, int64_t *out, kl_err *e) {
    const kl_node *n = field(map, key);
    if (!n) { *out = def; return KL_OK; }
    return kl_node_int(n, out, e);
}
int kl_spec_double(const kl_node *map, const char *key, double def, double *out, kl_err *e) {
    const kl_node *n = field(map, key);
    if (!n) { *out = def; return KL_OK; }
    return kl_node_double(n, out, e);
}
int kl_spec_bool(const kl_node *map, const char *key, int def, int *out, kl_err *e) {
    const kl_node *n = field(map, key);
    if (!n) { *out = def; return KL_OK; }
    return kl_node_bool(n, out, e);
}
int kl_spec_str(const kl_node *map, const char *key, const char *def, const char **out, kl_err *e) {
    const kl_node *n = field(map, key);
    if (!n) { *out = def; return KL_OK; }
    return kl_node_str(n, out, e);
}
int kl_spec_require(const kl_node *map, const char *key, const kl_node **out, kl_err *e) {
    const kl_node *n = field(map, key);
    *out = n;
    if (n) return KL_OK;
    char p[512];
    child_path(map, key, 0, p, sizeof p);
    kl_node_error(map, e, KL_ENOTFOUND, "missing required key '%s'", key);
    if (e) snprintf(e->field, sizeof e->field, "%s", p);
    return KL_ENOTFOUND;
}

int kl_spec_check_keys(const kl_node *map, const char *const *allowed, size_t n, kl_err *e) {
    if (!map || map->kind != KL_NODE_MAP) return KL_OK;
    for (size_t i = 0; i < map->n; i++) {
        size_t j;
        for (j = 0; j < n; j++)
            if (!strcmp(map->keys[i], allowed[j])) break;
        if (j < n) continue;
        const char *s = kl_suggest(map->keys[i], allowed, n);
        kl_node *v = map->items[i];
        if (s) return kl_node_error(v, e, KL_EINVAL, "unknown key '%s' (did you mean '%s'?)", map->keys[i], s);
        kl_buf b;
        kl_buf_init(&b);
        for (j = 0; j < n; j++) kl_buf_printf(&b, "%s%s", j ? ", " : "", allowed[j]);
        int rc = kl_node_error(v, e, KL_EINVAL, "unknown key '%s' (expected one of: %s)", map->keys[i],
                               b.data ? b.data : "");
        kl_buf_free(&b);
        return rc;
    }
    return KL_OK;
}

/* Depth-first: the first key of a mapping whose value no reader looked up.
 * Only read nodes are descended into: an ignored subtree is named at its top. */
static const kl_node *first_unused(const kl_node *n, const char **key) {
    if (!n || (n->kind != KL_NODE_MAP && n->kind != KL_NODE_SEQ)) return NULL;
    for (size_t i = 0; i < n->n; i++) {
        const kl_node *c = n->items[i];
        if (n->kind == KL_NODE_MAP && !c->used) {
            *key = n->keys[i];
            return c;
        }
        const kl_node *u = c->used || n->kind == KL_NODE_SEQ ? first_unused(c, key) : NULL;
        if (u) return u;
    }
    return NULL;
}

int kl_node_check_used(const kl_node *root, kl_err *e) {
    const char *key = NULL;
    const kl_node *u = first_unused(root, &key);
    if (!u) return KL_OK;
    return kl_node_error(u, e, KL_EINVAL,
                         "key '%s' has no effect here (with the other settings of this section nothing reads it); "
                         "remove it, or see the guide for the setting it belongs with", key);
}

/* ---- editing and writing --------------------------------------------------- */

int kl_doc_set(kl_doc *d, const char *path, const char *value, const char *origin, kl_err *e) {
    char part[256], sofar[1024] = "";
    kl_node *n = d->root;
    yaml_mark_t m = {0, 0, 0};
    const char *p = path;
    if (!*path) return kl_err_set(e, KL_EINVAL, "%s: empty key", origin);
    if (n->kind == KL_NODE_NULL) n->kind = KL_NODE_MAP; /* an empty document becomes a mapping */
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0 || len >= sizeof part) return kl_err_set(e, KL_EINVAL, "%s: bad key '%s'", origin, path);
        memcpy(part, p, len);
        part[len] = 0;
        char cpath[1024];
        child_path(n, part, 0, cpath, sizeof cpath);
        kl_node *child = NULL;
        size_t slot = 0;
        if (n->kind == KL_NODE_SEQ) {
            int64_t i;
            if (kl_parse_int64(part, &i) || i < 0 || (size_t)i >= n->n)
                return kl_err_set(e, KL_EINVAL, "%s: %s: '%s' is not an item of the list %s (it has %zu)", origin, path,
                                  part, *sofar ? sofar : "(root)", n->n);
            slot = (size_t)i;
            child = n->items[slot];
            child_path(n, NULL, slot, cpath, sizeof cpath);
        } else if (n->kind == KL_NODE_MAP) {
            for (slot = 0; slot < n->n; slot++)
                if (!strcmp(n->keys[slot], part)) { child = n->items[slot]; break; }
        } else {
            return kl_err_set(e, KL_EINVAL, "%s: %s: %s is a value, not a mapping", origin, path, sofar);
        }
        int last = !dot;
        if (!child || (last && child->kind != KL_NODE_MAP && child->kind != KL_NODE_SEQ) ||
            (!last && child->kind == KL_NODE_NULL)) {
            kl_node *nn = node_new(d, last ? KL_NODE_SCALAR : KL_NODE_MAP, &m, cpath);
            if (!nn) return kl_err_set(e, KL_ENOMEM, "out of memory");
            nn->file = kl_arena_strdup(d->arena, origin);
            nn->line = nn->col = 0;
            if (last) {
                nn->scalar = kl_arena_strdup(d->arena, value);
                if (!nn->scalar) return kl_err_set(e, KL_ENOMEM, "out of memory");
            }
            if (child) n->items[slot] = nn;
            else if (node_push(d, n, part, nn)) return kl_err_set(e, KL_ENOMEM, "out of memory");
            child = nn;
        } else if (last) {
            return kl_err_set(e, KL_EINVAL, "%s: %s is %s, not a value", origin, path, kl_node_kind_name(child->kind));
        }
        if (last) return KL_OK;
        snprintf(sofar, sizeof sofar, "%s", cpath);
        n = child;
        p = dot + 1;
    }
}

static void node_json(const kl_node *n, kl_buf *b) {
    switch (n->kind) {
    case KL_NODE_NULL: kl_buf_puts(b, "null"); return;
    case KL_NODE_SCALAR: {
        double v;
        int bo;
        if (!n->quoted && kl_parse_double(n->scalar, &v) == KL_OK && isfinite(v)) kl_buf_puts(b, n->scalar);
        else if (!n->quoted && (!strcmp(n->scalar, "true") || !strcmp(n->scalar, "false"))) kl_buf_puts(b, n->scalar);
        else if (!n->quoted && kl_parse_bool(n->scalar, &bo) == KL_OK && strcmp(n->scalar, "1") && strcmp(n->scalar, "0"))
            kl_buf_puts(b, bo ? "true" : "false");
        else kl_buf_json_str(b, n->scalar);
        return;
    }
    case KL_NODE_SEQ:
    case KL_NODE_MAP:
        kl_buf_puts(b, n->kind == KL_NODE_SEQ ? "[" : "{");
        for (size_t i = 0; i < n->n; i++) {
            if (i) kl_buf_puts(b, ",");
            if (n->kind == KL_NODE_MAP) {
                kl_buf_json_str(b, n->keys[i]);
                kl_buf_puts(b, ":");
            }
            node_json(n->items[i], b);
        }
        kl_buf_puts(b, n->kind == KL_NODE_SEQ ? "]" : "}");
        return;
    }
}

int kl_doc_to_json(const kl_doc *d, struct kl_buf *out) {
    node_json(d->root, out);
    return out->failed ? KL_ENOMEM : KL_OK;
}
