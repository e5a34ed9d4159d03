/* A fast JSON reader for inference requests. It builds the same cJSON tree
 * that cJSON_Parse would (so the codec reads it with the cJSON accessors),
 * but every node and string comes from one bump arena freed with one call,
 * and numbers take the exact fast path (Clinger: <= 19 significant digits,
 * |exponent| <= 22) before falling back to strtod. On the KServe MLP request
 * (784 numbers) this is several times faster than cJSON_ParseWithLength,
 * whose malloc per node and strtod per number dominated the request cost.
 * With SV_JSON_PACK (infer requests), an array of more than SV_MAX_DIMS
 * numbers is not a list of nodes but one node holding a packed double array
 * (sv_json_packed reads it): the tensor data of a request is parsed in one
 * tight loop into contiguous memory; any non-number in it falls back to the
 * node form so that the codec's errors still name the element. */
#include "serve_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk;

struct sv_json_doc {
    chunk *head;
    cJSON *root;
};

typedef struct {
    const char *p, *end, *start;
    sv_json_doc *doc;
    int depth;
    const char *err;
    size_t err_off;
    int pack;
} parser;

#define PACKED_FLAG (1 << 12) /* above cJSON's type bits: cJSON_IsArray still holds */

static void *alloc(sv_json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > 65536 ? n : 65536;
        chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        d->head = nc;
        c = nc;
    }
    void *r = c->data + c->used;
    c->used += n;
    return r;
}

static cJSON *node(parser *ps, int type) {
    cJSON *n = alloc(ps->doc, sizeof *n);
    if (!n) { ps->err = "out of memory"; return NULL; }
    *n = (cJSON){0};
    n->type = type;
    return n;
}

static int fail(parser *ps, const char *msg) {
    if (!ps->err) {
        ps->err = msg;
        ps->err_off = (size_t)(ps->p - ps->start);
    }
    return -1;
}

static void ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int number(parser *ps, double *out) {
    const char *s = ps->p;
    int neg = 0;
    if (s < ps->end && *s == '-') { neg = 1; s++; }
    if (s >= ps->end || *s < '0' || *s > '9') return fail(ps, "expected a value");
    uint64_t m = 0;
    int digits = 0, exp10 = 0, exact = 1;
    if (*s == '0') s++;
    else
        while (s < ps->end && *s >= '0' && *s <= '9') {
            if (digits < 19) { m = m * 10 + (uint64_t)(*s - '0'); if (m) digits++; }
            else { exp10++; exact = 0; }
            s++;
        }
    if (s < ps->end && *s == '.') {
        s++;
        if (s >= ps->end || *s < '0' || *s > '9') return fail(ps, "expected digits after '.'");
        while (s < ps->end && *s >= '0' && *s <= '9') {
            if (digits < 19) { m = m * 10 + (uint64_t)(*s - '0'); if (m) digits++; exp10--; }
            else exact = 0;
            s++;
        }
    }
    if (s < ps->end && (*s == 'e' || *s == 'E')) {
        s++;
        int eneg = 0, ev = 0;
        if (s < ps->end && (*s == '+' || *s == '-')) eneg = *s++ == '-';
        if (s >= ps->end || *s < '0' || *s > '9') return fail(ps, "expected an exponent");
        while (s < ps->end && *s >= '0' && *s <= '9') {
            if (ev < 100000) ev = ev * 10 + (*s - '0');
            s++;
        }
        exp10 += eneg ? -ev : ev;
    }
    double v;
    if (exact && m <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        v = (double)m;
        v = exp10 < 0 ? v / pow10_tab[-exp10] : v * pow10_tab[exp10];
    } else {
        char tmp[128];
        size_t len = (size_t)(s - ps->p);
        if (len >= sizeof tmp) len = sizeof tmp - 1;
        memcpy(tmp, ps->p, len);
        tmp[len] = 0;
        v = strtod(tmp, NULL);
        neg = 0;
    }
    *out = neg ? -v : v;
    ps->p = s;
    return 0;
}

static int number_node(parser *ps, cJSON *n) {
    if (number(ps, &n->valuedouble)) return -1;
    n->valueint = n->valuedouble >= 2147483647.0 ? 2147483647 : n->valuedouble <= -2147483648.0 ? (int)-2147483648.0
                                                                                                   : (int)n->valuedouble;
    return 0;
}

/* At '[': an array of only numbers, more than SV_MAX_DIMS of them, as one
 * packed node; NULL (and the position unchanged) when it is anything else. */
static cJSON *packed_array(parser *ps) {
    const char *save = ps->p;
    size_t n = 0, cap = 256;
    double *v = alloc(ps->doc, cap * sizeof *v);
    if (!v) return NULL;
    ps->p++;
    for (;;) {
        ws(ps);
        if (ps->p >= ps->end || (*ps->p != '-' && (*ps->p < '0' || *ps->p > '9'))) goto other;
        if (n == cap) {
            double *nv = alloc(ps->doc, 2 * cap * sizeof *v);
            if (!nv) goto other;
            memcpy(nv, v, n * sizeof *v);
            v = nv;
            cap *= 2;
        }
        if (number(ps, &v[n])) goto other;
        n++;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == ']') { ps->p++; break; }
        goto other;
    }
    if (n <= SV_MAX_DIMS || n > INT32_MAX) goto other;
    cJSON *a = node(ps, cJSON_Array | PACKED_FLAG);
    if (!a) return NULL;
    a->valuestring = (char *)v;
    a->valueint = (int)n;
    return a;
other:
    ps->p = save;
    ps->err = NULL;
    return NULL;
}

int sv_json_packed(const cJSON *a, const double **vals, size_t *n) {
    if (!a || !(a->type & PACKED_FLAG)) return 0;
    *vals = (const double *)(const void *)a->valuestring;
    *n = (size_t)a->valueint;
    return 1;
}

int sv_json_array_size(const cJSON *a) {
    const double *v;
    size_t n;
    return sv_json_packed(a, &v, &n) ? (int)n : cJSON_GetArraySize(a);
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static char *string(parser *ps) {
    const char *s = ++ps->p; /* after the quote */
    const char *q = s;
    int esc = 0;
    while (q < ps->end && *q != '"') {
        if ((unsigned char)*q < 0x20) { ps->p = q; fail(ps, "control character in a string"); return NULL; }
        if (*q == '\\') { esc = 1; q++; }
        q++;
    }
    if (q >= ps->end) { fail(ps, "unterminated string"); return NULL; }
    char *out = alloc(ps->doc, (size_t)(q - s) + 1);
    if (!out) { fail(ps, "out of memory"); return NULL; }
    if (!esc) {
        memcpy(out, s, (size_t)(q - s));
        out[q - s] = 0;
        ps->p = q + 1;
        return out;
    }
    char *o = out;
    for (const char *c = s; c < q; c++) {
        if (*c != '\\') { *o++ = *c; continue; }
        c++;
        switch (*c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (q - c < 5 || hex4(c + 1, &u)) { ps->p = c; fail(ps, "bad \\u escape"); return NULL; }
            c += 4;
            if (u >= 0xd800 && u < 0xdc00 && q - c >= 7 && c[1] == '\\' && c[2] == 'u' && !hex4(c + 3, &lo) &&
                lo >= 0xdc00 && lo < 0xe000) {
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
                c += 6;
            }
            if (u < 0x80) *o++ = (char)u;
            else if (u < 0x800) { *o++ = (char)(0xc0 | (u >> 6)); *o++ = (char)(0x80 | (u & 0x3f)); }
            else if (u < 0x10000) {
                *o++ = (char)(0xe0 | (u >> 12)); *o++ = (char)(0x80 | ((u >> 6) & 0x3f)); *o++ = (char)(0x80 | (u & 0x3f));
            } else {
                *o++ = (char)(0xf0 | (u >> 18)); *o++ = (char)(0x80 | ((u >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((u >> 6) & 0x3f)); *o++ = (char)(0x80 | (u & 0x3f));
            }
            break;
        }
        default: ps->p = c; fail(ps, "bad escape in a string"); return NULL;
        }
    }
    *o = 0;
    ps->p = q + 1;
    return out;
}

static cJSON *value(parser *ps);

static int lit(parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n)) return fail(ps, "expected a value");
    ps->p += n;
    return 0;
}

static cJSON *container(parser *ps, int obj) {
    cJSON *n = node(ps, obj ? cJSON_Object : cJSON_Array), *last = NULL;
    if (!n) return NULL;
    if (++ps->depth > 64) { fail(ps, "nested too deep"); return NULL; }
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) { ps->p++; ps->depth--; return n; }
    for (;;) {
        char *key = NULL;
        if (obj) {
            ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') { fail(ps, "expected a member name"); return NULL; }
            if (!(key = string(ps))) return NULL;
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') { fail(ps, "expected ':'"); return NULL; }
            ps->p++;
        }
        cJSON *v = value(ps);
        if (!v) return NULL;
        v->string = key;
        if (last) { last->next = v; v->prev = last; }
        else n->child = v;
        last = v;
        n->child->prev = last; /* cJSON keeps the last item in child->prev */
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) { ps->p++; break; }
        fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        return NULL;
    }
    ps->depth--;
    return n;
}

static cJSON *value(parser *ps) {
    ws(ps);
    if (ps->p >= ps->end) { fail(ps, "unexpected end of input"); return NULL; }
    cJSON *n;
    switch (*ps->p) {
    case '{': return container(ps, 1);
    case '[':
        if (ps->pack && (n = packed_array(ps))) return n;
        if (ps->err) return NULL;
        return container(ps, 0);
    case '"': {
        if (!(n = node(ps, cJSON_String))) return NULL;
        if (!(n->valuestring = string(ps))) return NULL;
        return n;
    }
    case 't': if (!(n = node(ps, cJSON_True)) || lit(ps, "true")) return NULL; n->valueint = 1; return n;
    case 'f': if (!(n = node(ps, cJSON_False)) || lit(ps, "false")) return NULL; return n;
    case 'n': if (!(n = node(ps, cJSON_NULL)) || lit(ps, "null")) return NULL; return n;
    default:
        if (!(n = node(ps, cJSON_Number)) || number_node(ps, n)) return NULL;
        return n;
    }
}

int sv_json_parse(const char *text, size_t len, int flags, sv_json_doc **out, kl_err *e) {
    *out = NULL;
    sv_json_doc *d = calloc(1, sizeof *d);
    if (!d) return kl_err_set(e, KL_ENOMEM, "out of memory");
    parser ps = {text, text + len, text, d, 0, NULL, 0, (flags & SV_JSON_PACK) != 0};
    d->root = value(&ps);
    if (d->root) {
        ws(&ps);
        if (ps.p != ps.end) { fail(&ps, "unexpected text after the JSON value"); d->root = NULL; }
    }
    if (!d->root) {
        int rc = kl_err_set(e, KL_EPARSE, "request body: malformed JSON at byte %zu: %s", ps.err_off,
                            ps.err ? ps.err : "syntax error");
        sv_json_free(d);
        return rc;
    }
    *out = d;
    return KL_OK;
}

const cJSON *sv_json_root(const sv_json_doc *d) { return d->root; }

void sv_json_free(sv_json_doc *d) {
    if (!d) return;
    for (chunk *c = d->head, *n; c; c = n) { n = c->next; free(c); }
    free(d);
}
