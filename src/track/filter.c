/* The run filter language and sort keys, compiled to SQL with bound
 * parameters (never spliced text):
 *
 *   expr   := and ("or" and)*
 *   and    := unary ("and" unary)*
 *   unary  := "not" unary | "(" expr ")" | field op value
 *   field  := metrics.K | params.K | tags.K | [attributes.|run.]ATTR
 *             ATTR: id name status experiment parent_id start_time end_time duration
 *   op     := = == != <> < <= > >= like "not like"
 *   value  := number | "string" | 'string' | nan | inf | -inf
 *
 * metrics.K compares the latest value; params/tags compare as text against
 * a string, as numbers against a number. Errors name the 1-based column. */
#include "track_int.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * Bound values
 * ================================================================== */

void kl__binds_free(kl__binds *b) {
    for (size_t i = 0; i < b->n; i++) free(b->v[i].str);
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

static int bind_add(kl__binds *b, int is_num, double num, const char *s, size_t len) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 8;
        kl__bind *nv = realloc(b->v, nc * sizeof *nv);
        if (!nv) return KL_ENOMEM;
        b->v = nv;
        b->cap = nc;
    }
    kl__bind *v = &b->v[b->n];
    v->is_num = is_num;
    v->num = num;
    v->str = NULL;
    if (!is_num) {
        v->str = malloc(len + 1);
        if (!v->str) return KL_ENOMEM;
        memcpy(v->str, s, len);
        v->str[len] = 0;
    }
    b->n++;
    return KL_OK;
}

void kl__binds_apply(const kl__binds *b, kl__st *st, int first) {
    for (size_t i = 0; i < b->n; i++) {
        int idx = first + (int)i;
        if (b->v[i].is_num) kl__bind_f64(st, idx, b->v[i].num); /* NaN binds NULL */
        else kl__bind_text(st, idx, b->v[i].str);
    }
}

/* ==================================================================
 * Lexer
 * ================================================================== */

typedef enum { TK_END, TK_IDENT, TK_NUM, TK_STR, TK_OP, TK_LP, TK_RP } tk_kind;

typedef struct {
    const char *src;
    size_t pos;
    tk_kind kind;
    size_t start, len; /* token text */
    double num;
    char *str; /* unescaped string */
    size_t slen;
    kl_buf *sql;
    kl__binds *b;
    const kl__dialect *d;
    kl_err *e;
} lexer;

static int lex_err(lexer *L, size_t at, const char *fmt, const char *what) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, what);
    return kl_err_setloc(L->e, KL_EPARSE, NULL, 1, (int)at + 1, "filter: column %d: %s", (int)at + 1, msg);
}

static int is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-' || c == '/' || c == ':'; }

static int next(lexer *L) {
    const char *s = L->src;
    while (isspace((unsigned char)s[L->pos])) L->pos++;
    L->start = L->pos;
    free(L->str);
    L->str = NULL;
    char c = s[L->pos];
    if (!c) {
        L->kind = TK_END;
        L->len = 0;
        return KL_OK;
    }
    if (c == '(' || c == ')') {
        L->kind = c == '(' ? TK_LP : TK_RP;
        L->len = 1;
        L->pos++;
        return KL_OK;
    }
    if (c == '"' || c == '\'') {
        size_t i = L->pos + 1, cap = 16, n = 0;
        char *out = malloc(cap);
        if (!out) return kl_err_set(L->e, KL_ENOMEM, "out of memory");
        for (;;) {
            char d = s[i];
            if (!d) {
                free(out);
                return lex_err(L, L->start, "unterminated string starting here%s", "");
            }
            if (d == c) break;
            if (d == '\\' && s[i + 1]) d = s[++i];
            if (n + 2 > cap) {
                cap *= 2;
                char *no = realloc(out, cap);
                if (!no) {
                    free(out);
                    return kl_err_set(L->e, KL_ENOMEM, "out of memory");
                }
                out = no;
            }
            out[n++] = d;
            i++;
        }
        out[n] = 0;
        L->str = out;
        L->slen = n;
        L->kind = TK_STR;
        L->pos = i + 1;
        L->len = L->pos - L->start;
        return KL_OK;
    }
    if (strchr("=!<>", c)) {
        size_t n = 1;
        if ((c == '<' && (s[L->pos + 1] == '=' || s[L->pos + 1] == '>')) || (c != '<' && s[L->pos + 1] == '=')) n = 2;
        if (c == '!' && n == 1) return lex_err(L, L->pos, "unexpected '!' (did you mean '!='?)%s", "");
        L->kind = TK_OP;
        L->len = n;
        L->pos += n;
        return KL_OK;
    }
    if (isdigit((unsigned char)c) || ((c == '-' || c == '+' || c == '.') && (isdigit((unsigned char)s[L->pos + 1]) || s[L->pos + 1] == '.'))) {
        char *end;
        L->num = strtod(s + L->pos, &end);
        if (end == s + L->pos) return lex_err(L, L->pos, "malformed number%s", "");
        if (is_ident_char(*end) && *end != '-' && *end != ':' && *end != '/')
            return lex_err(L, L->pos, "malformed number%s", "");
        L->kind = TK_NUM;
        L->len = (size_t)(end - (s + L->pos));
        L->pos += L->len;
        return KL_OK;
    }
    if ((c == '-' || c == '+') && !strncasecmp(s + L->pos + 1, "inf", 3)) {
        L->kind = TK_NUM;
        L->num = c == '-' ? -INFINITY : INFINITY;
        size_t n = 4;
        if (!strncasecmp(s + L->pos + 1, "infinity", 8)) n = 9;
        L->len = n;
        L->pos += n;
        return KL_OK;
    }
    if (isalpha((unsigned char)c) || c == '_' || c == '`') {
        if (c == '`') { /* `metrics.odd key` */
            const char *close = strchr(s + L->pos + 1, '`');
            if (!close) return lex_err(L, L->pos, "unterminated `quoted name`%s", "");
            L->kind = TK_IDENT;
            L->len = (size_t)(close - (s + L->pos)) + 1;
            L->pos += L->len;
            return KL_OK;
        }
        size_t i = L->pos;
        while (is_ident_char(s[i])) {
            if (s[i] == '-' && !isalnum((unsigned char)s[i + 1]) && s[i + 1] != '_') break;
            i++;
        }
        /* an identifier may continue with a backquoted part: metrics.`a b` */
        if (s[i] == '`') {
            const char *close = strchr(s + i + 1, '`');
            if (!close) return lex_err(L, i, "unterminated `quoted name`%s", "");
            i = (size_t)(close - s) + 1;
        }
        L->kind = TK_IDENT;
        L->len = i - L->pos;
        L->pos = i;
        return KL_OK;
    }
    char what[8];
    snprintf(what, sizeof what, "%c", c);
    return lex_err(L, L->pos, "unexpected character '%s'", what);
}

static int tok_is(const lexer *L, const char *word) {
    return L->kind == TK_IDENT && strlen(word) == L->len && !strncasecmp(L->src + L->start, word, L->len);
}

static const char *tok_desc(const lexer *L, char *buf, size_t n) {
    if (L->kind == TK_END) return "end of filter";
    snprintf(buf, n, "'%.*s'", (int)(L->len > 40 ? 40 : L->len), L->src + L->start);
    return buf;
}

/* ==================================================================
 * Fields
 * ================================================================== */

typedef enum { F_METRIC, F_PARAM, F_TAG, F_ATTR_TEXT, F_ATTR_NUM } field_kind;

typedef struct {
    field_kind kind;
    char key[256];
    const char *expr; /* for attributes */
} field;

static const struct {
    const char *name;
    field_kind kind;
    const char *expr;
} attrs[] = {
    {"id", F_ATTR_NUM, "r.id"},
    {"run_id", F_ATTR_NUM, "r.id"},
    {"name", F_ATTR_TEXT, "r.name"},
    {"run_name", F_ATTR_TEXT, "r.name"},
    {"status", F_ATTR_TEXT, "r.status"},
    {"experiment", F_ATTR_TEXT, "x.name"},
    {"parent_id", F_ATTR_NUM, "r.parent_id"},
    {"start_time", F_ATTR_NUM, "r.start_us"},
    {"end_time", F_ATTR_NUM, "r.end_us"},
    {"duration", F_ATTR_NUM, "((coalesce(r.end_us, r.heartbeat_us) - r.start_us) / 1e6)"},
};

/* Parses the identifier token text into a field. */
static int parse_field(lexer *L, const char *text, size_t len, size_t col, field *f, kl_err *e) {
    char name[300];
    if (len >= sizeof name) return kl_err_setloc(e, KL_EPARSE, NULL, 1, (int)col + 1, "filter: column %d: name too long", (int)col + 1);
    /* drop backquotes */
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] != '`') name[n++] = text[i];
    name[n] = 0;
    const char *dot = strchr(name, '.');
    static const struct {
        const char *prefix;
        field_kind kind;
    } pre[] = {{"metrics", F_METRIC}, {"metric", F_METRIC}, {"params", F_PARAM}, {"param", F_PARAM}, {"tags", F_TAG}, {"tag", F_TAG}};
    if (dot) {
        size_t pl = (size_t)(dot - name);
        for (size_t i = 0; i < KL_ARRAY_LEN(pre); i++)
            if (strlen(pre[i].prefix) == pl && !strncasecmp(name, pre[i].prefix, pl)) {
                if (!dot[1])
                    return kl_err_setloc(e, KL_EPARSE, NULL, 1, (int)(col + pl + 2),
                                         "filter: column %d: expected a key after '%s.'", (int)(col + pl + 2), pre[i].prefix);
                f->kind = pre[i].kind;
                snprintf(f->key, sizeof f->key, "%s", dot + 1);
                return KL_OK;
            }
        if ((pl == 10 && !strncasecmp(name, "attributes", 10)) || (pl == 3 && !strncasecmp(name, "run", 3))) {
            memmove(name, dot + 1, strlen(dot + 1) + 1);
            dot = NULL;
        }
    }
    if (!dot)
        for (size_t i = 0; i < KL_ARRAY_LEN(attrs); i++)
            if (!strcasecmp(name, attrs[i].name)) {
                f->kind = attrs[i].kind;
                f->expr = attrs[i].expr;
                return KL_OK;
            }
    const char *cands[KL_ARRAY_LEN(attrs) + 3];
    size_t nc = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(attrs); i++) cands[nc++] = attrs[i].name;
    cands[nc++] = "metrics.";
    cands[nc++] = "params.";
    cands[nc++] = "tags.";
    const char *sug = kl_suggest(name, cands, nc);
    return kl_err_setloc(e, KL_EPARSE, NULL, 1, (int)col + 1,
                         "filter: column %d: unknown field '%s' (use metrics.KEY, params.KEY, tags.KEY or an attribute: id, name, "
                         "status, experiment, parent_id, start_time, end_time, duration)%s%s%s",
                         (int)col + 1, name, sug ? "; did you mean '" : "", sug ? sug : "", sug ? "'?" : "");
}

/* Appends the SQL value expression of a field; numeric != 0 casts text to a number. */
static int field_sql(const kl__dialect *d, const field *f, int numeric, kl_buf *sql, kl__binds *b) {
    int rc = KL_OK;
    switch (f->kind) {
    case F_METRIC:
        kl_buf_puts(sql, "(SELECT ml.value FROM metric_latest ml WHERE ml.run_id = r.id AND ml.key_id = "
                         "(SELECT id FROM metric_keys WHERE name = ?))");
        rc = bind_add(b, 0, 0, f->key, strlen(f->key));
        break;
    case F_PARAM:
    case F_TAG:
        kl_buf_printf(sql, "%s(SELECT value FROM %s WHERE run_id = r.id AND key = ?)%s", numeric ? d->num_open : "",
                      f->kind == F_PARAM ? "params" : "tags", numeric ? d->num_close : "");
        rc = bind_add(b, 0, 0, f->key, strlen(f->key));
        break;
    default:
        kl_buf_puts(sql, f->expr);
    }
    return rc;
}

/* ==================================================================
 * Parser
 * ================================================================== */

static int parse_or(lexer *L);

static int parse_cmp(lexer *L) {
    char d[64];
    int rc;
    if (L->kind != TK_IDENT)
        return lex_err(L, L->start, "expected a field (metrics.KEY, params.KEY, tags.KEY, status, ...), got %s", tok_desc(L, d, sizeof d));
    field f;
    if ((rc = parse_field(L, L->src + L->start, L->len, L->start, &f, L->e))) return rc;
    if ((rc = next(L))) return rc;
    /* operator */
    const char *op = NULL;
    size_t op_col = L->start;
    int like = 0, not_like = 0;
    if (L->kind == TK_OP) {
        const char *t = L->src + L->start;
        if (L->len == 1 && *t == '=') op = "=";
        else if (L->len == 2 && !strncmp(t, "==", 2)) op = "=";
        else if (L->len == 2 && (!strncmp(t, "!=", 2) || !strncmp(t, "<>", 2))) op = "!=";
        else if (L->len == 1 && *t == '<') op = "<";
        else if (L->len == 2 && !strncmp(t, "<=", 2)) op = "<=";
        else if (L->len == 1 && *t == '>') op = ">";
        else if (L->len == 2 && !strncmp(t, ">=", 2)) op = ">=";
        else return lex_err(L, L->start, "unknown operator %s", tok_desc(L, d, sizeof d));
    } else if (tok_is(L, "like")) {
        like = 1;
    } else if (tok_is(L, "not")) {
        if ((rc = next(L))) return rc;
        if (!tok_is(L, "like")) return lex_err(L, L->start, "expected 'like' after 'not', got %s", tok_desc(L, d, sizeof d));
        like = not_like = 1;
    } else {
        return lex_err(L, L->start, "expected an operator (=, !=, <, <=, >, >=, like), got %s", tok_desc(L, d, sizeof d));
    }
    if ((rc = next(L))) return rc;
    /* value */
    size_t val_col = L->start;
    int is_num;
    double num = 0;
    if (L->kind == TK_NUM) {
        is_num = 1;
        num = L->num;
    } else if (L->kind == TK_STR) {
        is_num = 0;
    } else if (tok_is(L, "nan") || tok_is(L, "inf") || tok_is(L, "infinity")) {
        is_num = 1;
        num = tok_is(L, "nan") ? NAN : INFINITY;
    } else if (L->kind == TK_IDENT && (f.kind == F_ATTR_TEXT || f.kind == F_TAG || f.kind == F_PARAM)) {
        /* bare words are accepted as strings: status = finished */
        is_num = 0;
        L->str = malloc(L->len + 1);
        if (!L->str) return kl_err_set(L->e, KL_ENOMEM, "out of memory");
        memcpy(L->str, L->src + L->start, L->len);
        L->str[L->len] = 0;
        L->slen = L->len;
    } else {
        return lex_err(L, L->start, "expected a value (number or \"string\"), got %s", tok_desc(L, d, sizeof d));
    }
    if (like && is_num) return lex_err(L, val_col, "'like' needs a \"string\" pattern%s", "");
    if (f.kind == F_METRIC && !is_num)
        return lex_err(L, val_col, "metrics compare with numbers, got a string for metrics.%s", f.key);
    if (f.kind == F_ATTR_NUM && !is_num) return lex_err(L, val_col, "this attribute compares with numbers%s", "");
    (void)op_col;
    kl_buf *sql = L->sql;
    int numeric = is_num && (f.kind == F_PARAM || f.kind == F_TAG);
    if (is_num && isnan(num)) {
        /* NaN is stored as NULL: "= nan" / "!= nan" test for it on present keys */
        if (!op || (strcmp(op, "=") && strcmp(op, "!=")))
            return lex_err(L, val_col, "nan can only be compared with = or !=%s", "");
        if (f.kind != F_METRIC) return lex_err(L, val_col, "nan applies to metrics only%s", "");
        kl_buf_printf(sql, "%sEXISTS(SELECT 1 FROM metric_latest ml WHERE ml.run_id = r.id AND ml.key_id = "
                           "(SELECT id FROM metric_keys WHERE name = ?) AND ml.value IS NULL)",
                      strcmp(op, "=") ? "NOT " : "");
        if ((rc = bind_add(L->b, 0, 0, f.key, strlen(f.key)))) return kl_err_set(L->e, rc, "out of memory");
        return next(L);
    }
    const char *cmp = like ? (not_like ? L->d->not_like : L->d->like) : op;
    const char *tail = like ? L->d->like_tail : "";
    if (f.kind == F_ATTR_TEXT || f.kind == F_ATTR_NUM) {
        kl_buf_printf(sql, "(%s %s ?%s)", f.expr, cmp, tail);
    } else if (f.kind == F_METRIC) {
        /* driven by the (key_id, value) index: only matching runs are visited */
        kl_buf_printf(sql, "r.id IN (SELECT ml.run_id FROM metric_latest ml WHERE ml.key_id = "
                           "(SELECT id FROM metric_keys WHERE name = ?) AND ml.value %s ?)", cmp);
        if ((rc = bind_add(L->b, 0, 0, f.key, strlen(f.key)))) return kl_err_set(L->e, rc, "out of memory");
    } else {
        const char *tab = f.kind == F_PARAM ? "params" : "tags";
        kl_buf_printf(sql, "r.id IN (SELECT run_id FROM %s WHERE key = ? AND %svalue%s %s ?%s)", tab,
                      numeric ? L->d->num_open : "", numeric ? L->d->num_close : "", cmp, tail);
        if ((rc = bind_add(L->b, 0, 0, f.key, strlen(f.key)))) return kl_err_set(L->e, rc, "out of memory");
    }
    if (is_num) rc = bind_add(L->b, 1, num, NULL, 0);
    else rc = bind_add(L->b, 0, 0, L->str, L->slen);
    if (rc) return kl_err_set(L->e, rc, "out of memory");
    return next(L);
}

static int parse_unary(lexer *L) {
    int rc;
    if (tok_is(L, "not")) {
        if ((rc = next(L))) return rc;
        kl_buf_puts(L->sql, "NOT ");
        return parse_unary(L);
    }
    if (L->kind == TK_LP) {
        size_t open = L->start;
        if ((rc = next(L))) return rc;
        kl_buf_puts(L->sql, "(");
        if ((rc = parse_or(L))) return rc;
        if (L->kind != TK_RP) {
            char d[64];
            if (L->kind == TK_END) return lex_err(L, open, "unclosed '(' opened here%s", "");
            return lex_err(L, L->start, "expected ')', got %s", tok_desc(L, d, sizeof d));
        }
        kl_buf_puts(L->sql, ")");
        return next(L);
    }
    return parse_cmp(L);
}

static int parse_and(lexer *L) {
    int rc = parse_unary(L);
    while (!rc && tok_is(L, "and")) {
        kl_buf_puts(L->sql, " AND ");
        if ((rc = next(L))) return rc;
        rc = parse_unary(L);
    }
    return rc;
}

static int parse_or(lexer *L) {
    int rc = parse_and(L);
    while (!rc && tok_is(L, "or")) {
        kl_buf_puts(L->sql, " OR ");
        if ((rc = next(L))) return rc;
        rc = parse_and(L);
    }
    return rc;
}

int kl__filter_sql(const kl__dialect *d, const char *filter, kl_buf *sql, kl__binds *b, kl_err *e) {
    lexer L = {0};
    L.d = d;
    L.src = filter;
    L.sql = sql;
    L.b = b;
    L.e = e;
    kl_buf_puts(sql, "(");
    int rc = next(&L);
    if (!rc && L.kind == TK_END) rc = lex_err(&L, 0, "empty filter%s", "");
    if (!rc) rc = parse_or(&L);
    if (!rc && L.kind != TK_END) {
        char d[64];
        rc = lex_err(&L, L.start, "expected 'and', 'or' or the end of the filter, got %s", tok_desc(&L, d, sizeof d));
    }
    kl_buf_puts(sql, ")");
    free(L.str);
    if (!rc && sql->failed) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    return rc;
}

int kl__sort_sql(const kl__dialect *d, const char *key, kl_buf *sql, kl__binds *b, kl_err *e) {
    while (isspace((unsigned char)*key)) key++;
    int desc = 0;
    if (*key == '-') {
        desc = 1;
        key++;
    } else if (*key == '+') {
        key++;
    }
    size_t len = strlen(key);
    while (len && isspace((unsigned char)key[len - 1])) len--;
    /* "KEY desc" / "KEY asc" / "KEY:desc" */
    for (int pass = 0; pass < 2; pass++) {
        const char *word = pass ? "asc" : "desc";
        size_t wl = strlen(word);
        if (len > wl + 1 && !strncasecmp(key + len - wl, word, wl) && (key[len - wl - 1] == ' ' || key[len - wl - 1] == ':')) {
            desc = !pass;
            len -= wl + 1;
            while (len && isspace((unsigned char)key[len - 1])) len--;
        }
    }
    if (len == 0) return kl_err_set(e, KL_EINVAL, "sort: empty key");
    field f;
    int rc = parse_field(NULL, key, len, 0, &f, e);
    if (rc) {
        kl_err_prefix(e, "sort key");
        return rc;
    }
    kl_buf_puts(sql, "(");
    if ((rc = field_sql(d, &f, f.kind == F_PARAM, sql, b))) return kl_err_set(e, rc, "out of memory");
    kl_buf_printf(sql, ") %s NULLS LAST", desc ? "DESC" : "ASC");
    return KL_OK;
}
