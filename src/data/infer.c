/* `keel schema infer`: sniffs the dialect (delimiter, quote, header, line
 * ending, BOM) and the column types from a sample of a CSV/TSV/JSONL file
 * and builds a schema for review: types by majority with a small error
 * budget (the minority values, with their lines, noted as future rejects),
 * the usual null tokens of typed columns, category when few distinct values,
 * nullable when nulls were seen, timestamp offsets and observed ranges as
 * comments, and whether it read a sample or the whole file. */
#include "data_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DISTINCT 64
#define MAX_SHOWN 5    /* values that do not parse, shown per type */
#define MAX_OFFSETS 8  /* distinct timestamp offsets noted */

enum { T_BOOL, T_INT, T_FLOAT, T_DATE, T_TS, T_N };

/* The usual spellings of a missing value; those a typed column holds become
 * the dialect's null tokens ("" always is one). */
static const char *const null_words[] = {"NA", "N/A", "null", "NULL", "-", "n/a", "NaN", "none", "None"};
#define N_NULL_WORDS (sizeof null_words / sizeof *null_words)

typedef struct {
    char *name;
    int64_t seen, nulls;          /* non-null values / empty or missing */
    int64_t ok[T_N];              /* values that parse as each type */
    int64_t bad_line[T_N][MAX_SHOWN];
    char *bad_val[T_N][MAX_SHOWN];
    int nbad[T_N];
    int64_t words[N_NULL_WORDS];  /* null words seen (not counted in seen) */
    int all_01;
    int64_t imin, imax;
    double dmin, dmax;
    int has_int, has_num;
    char *distinct[MAX_DISTINCT];
    int ndistinct, too_many;
    int64_t ts_min, ts_max;
    int has_ts;
    int64_t naive, zulu;          /* timestamps without an offset / with Z */
    int off_min[MAX_OFFSETS];     /* other offsets seen, minutes east, and how often */
    int64_t off_n[MAX_OFFSETS];
    int noff;
} colguess;

static void guess_init(colguess *g) {
    memset(g, 0, sizeof *g);
    g->all_01 = 1;
}

static void note_bad(colguess *g, int t, const char *s, size_t n, int64_t line) {
    if (g->nbad[t] >= MAX_SHOWN) return;
    g->bad_line[t][g->nbad[t]] = line;
    g->bad_val[t][g->nbad[t]++] = strndup(s, n > 40 ? 40 : n);
}

/* Z, +HH:MM, -HHMM, +HH at the end of a timestamp: minutes east, or 0 with
 * *naive / *zulu set. s[0..n) is not NUL-terminated. */
static int ts_offset(const char *s, size_t n, int *naive, int *zulu) {
    *naive = *zulu = 0;
    if (n && (s[n - 1] == 'Z' || s[n - 1] == 'z')) { *zulu = 1; return 0; }
    for (size_t k = n; k-- > 16;) { /* after YYYY-MM-DDTHH:MM */
        if (s[k] != '+' && s[k] != '-') continue;
        char tail[8];
        int m = 0;
        if (n - k < sizeof tail) {
            memcpy(tail, s + k, n - k);
            tail[n - k] = 0;
            if (kl_parse_tz(tail, &m) == KL_OK) return m;
        }
        break;
    }
    *naive = 1;
    return 0;
}

static void note_ts(colguess *g, const char *s, size_t n) {
    int naive, zulu, m = ts_offset(s, n, &naive, &zulu);
    if (naive) { g->naive++; return; }
    if (zulu) { g->zulu++; return; }
    for (int k = 0; k < g->noff; k++)
        if (g->off_min[k] == m) { g->off_n[k]++; return; }
    if (g->noff < MAX_OFFSETS) { g->off_min[g->noff] = m; g->off_n[g->noff++] = 1; }
}

static void add_distinct(colguess *g, const char *s, size_t n);

/* One value of line `line`; a quoted one is never a null word (as ingest reads it). */
static void guess_add(colguess *g, const kl_dialect *dia, const char *s, size_t n, int is_null, int quoted,
                      int64_t line) {
    if (is_null) { g->nulls++; return; }
    const char *ns = s; /* a number's text in the parsers' form (the dialect's decimal/thousands separators) */
    size_t nn = n;
    char nbuf[128];
    if (dia && (dia->thousands || (dia->decimal && dia->decimal != '.')) &&
        kl_num_normalize(dia, s, n, nbuf, sizeof nbuf, &nn))
        ns = nbuf;
    int word = 0;
    for (size_t w = 0; w < N_NULL_WORDS && !quoted && !word; w++)
        if (strlen(null_words[w]) == n && !memcmp(null_words[w], s, n)) { g->words[w]++; word = 1; }
    if (!word) g->seen++;
    int64_t i;
    double d;
    int b;
    int32_t dd;
    int64_t ts;
    if (word) return; /* a null word votes for no type (a text column may keep it as a value: finish_field) */
    if (kl_parse_i64n(ns, nn, &i) == KL_OK) {
        g->ok[T_INT]++;
        if (!g->has_int || i < g->imin) g->imin = i;
        if (!g->has_int || i > g->imax) g->imax = i;
        g->has_int = 1;
        if (i != 0 && i != 1) g->all_01 = 0;
    } else {
        g->all_01 = 0;
        note_bad(g, T_INT, s, n, line);
    }
    if (kl_parse_f64n(ns, nn, &d) == KL_OK) {
        g->ok[T_FLOAT]++;
        if (!g->has_num || d < g->dmin) g->dmin = d;
        if (!g->has_num || d > g->dmax) g->dmax = d;
        g->has_num = 1;
    } else note_bad(g, T_FLOAT, s, n, line);
    if (kl_parse_booln(s, n, &b) == KL_OK) g->ok[T_BOOL]++;
    else note_bad(g, T_BOOL, s, n, line);
    if (kl_parse_date(s, n, &dd) == KL_OK) g->ok[T_DATE]++;
    else note_bad(g, T_DATE, s, n, line);
    if (kl_parse_timestamp(s, n, NULL, &ts) == KL_OK) {
        g->ok[T_TS]++;
        if (!g->has_ts || ts < g->ts_min) g->ts_min = ts;
        if (!g->has_ts || ts > g->ts_max) g->ts_max = ts;
        g->has_ts = 1;
        note_ts(g, s, n);
    } else note_bad(g, T_TS, s, n, line);
    add_distinct(g, s, n);
}

static void add_distinct(colguess *g, const char *s, size_t n) {
    if (!g->too_many) {
        int k;
        for (k = 0; k < g->ndistinct; k++)
            if (strlen(g->distinct[k]) == n && !memcmp(g->distinct[k], s, n)) break;
        if (k == g->ndistinct) {
            if (g->ndistinct == MAX_DISTINCT || n > 64) g->too_many = 1;
            else g->distinct[g->ndistinct++] = strndup(s, n);
        }
    }
}

/* All values of the column parse as type t but an error budget: none in a
 * small sample, 1 % (at least one) from 50 values on. */
static int majority(const colguess *g, int t) {
    int64_t budget = g->seen >= 50 ? KL_MAX(1, g->seen / 100) : 0;
    return g->seen > 0 && g->ok[t] >= g->seen - budget;
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The field's note: the values that will be rejects, the null words taken,
 * the offsets of a timestamp column. */
static int field_note(const colguess *g, int t, const kl_field *f, const kl_dialect *d, kl_buf *b) {
    if (t >= 0 && g->ok[t] < g->seen) {
        kl_buf_printf(b, "%lld of %lld values are not %s and will be rejected, e.g.", (long long)(g->seen - g->ok[t]),
                      (long long)g->seen, kl_type_name(f->type));
        for (int k = 0; k < g->nbad[t]; k++)
            kl_buf_printf(b, "%s line %lld '%s'", k ? "," : "", (long long)g->bad_line[t][k], g->bad_val[t][k]);
        kl_buf_puts(b, "\n");
    }
    for (size_t w = 0; w < N_NULL_WORDS; w++) /* (in a text column a word that is no null token is a value) */
        if (g->words[w] && kl_null_token(d, null_words[w], strlen(null_words[w])))
            kl_buf_printf(b, "'%s' (%lld times) is read as a null\n", null_words[w], (long long)g->words[w]);
    if (f->type == KL_T_TIMESTAMP) {
        kl_buf_printf(b, "times seen: %lld with Z, %lld without an offset (read in the timezone below)", (long long)g->zulu,
                      (long long)g->naive);
        for (int k = 0; k < g->noff; k++) {
            int m = g->off_min[k], a = m < 0 ? -m : m;
            kl_buf_printf(b, ", %lld at %c%02d:%02d", (long long)g->off_n[k], m < 0 ? '-' : '+', a / 60, a % 60);
        }
        kl_buf_puts(b, g->noff + (g->zulu > 0) > 1 ? "\nmixed offsets: each value keeps its own, stored in UTC\n" : "\n");
    }
    return b->failed ? KL_ENOMEM : KL_OK;
}

/* The type a column's values vote for: T_* of a typed column, or -1 (text). */
static int column_type(const colguess *g) {
    if (g->seen == 0) return -1;
    if (majority(g, T_BOOL) && !majority(g, T_INT)) return T_BOOL;
    if (majority(g, T_INT)) return T_INT;
    if (majority(g, T_FLOAT)) return T_FLOAT;
    if (majority(g, T_DATE)) return T_DATE;
    if (majority(g, T_TS)) return T_TS;
    return -1;
}

/* The field of column g (t = column_type(g)) once the dialect's null tokens d
 * are known: a null word among them is a null; in a text column another one
 * is a value. */
static int finish_field(colguess *g, int t, const kl_dialect *d, kl_field *f, int64_t rows) {
    f->name = g->name;
    g->name = NULL;
    f->max_null_ratio = 1;
    int64_t nulls = g->nulls;
    for (size_t w = 0; w < N_NULL_WORDS; w++) {
        if (!g->words[w]) continue;
        if (kl_null_token(d, null_words[w], strlen(null_words[w]))) nulls += g->words[w];
        else if (t < 0) { g->seen += g->words[w]; add_distinct(g, null_words[w], strlen(null_words[w])); }
        else g->words[w] = 0; /* no null token (the list is full): left out of the note */
    }
    if (t < 0 && g->seen == 0) f->type = KL_T_STRING;
    else if (t == T_BOOL || (t == T_INT && g->all_01 && g->ndistinct == 2)) f->type = KL_T_BOOL;
    else if (t == T_INT) {
        f->type = (g->imin >= INT32_MIN && g->imax <= INT32_MAX && g->imax - g->imin < 1000000) ? KL_T_INT32 : KL_T_INT64;
        f->has_min = f->has_max = 1;
        f->imin = g->imin; f->imax = g->imax; f->min = (double)g->imin; f->max = (double)g->imax;
    } else if (t == T_FLOAT) {
        f->type = KL_T_FLOAT64;
        f->has_min = f->has_max = 1;
        f->min = g->dmin; f->max = g->dmax;
    } else if (t == T_DATE) f->type = KL_T_DATE;
    else if (t == T_TS) {
        f->type = KL_T_TIMESTAMP;
        f->timezone = strdup("UTC");
        f->has_min = f->has_max = 1;
        f->imin = g->ts_min; f->imax = g->ts_max;
    } else if (!g->too_many && g->ndistinct <= 32 && rows >= 20 && g->ndistinct * 5 <= g->seen) {
        f->type = KL_T_CATEGORY;
        qsort(g->distinct, (size_t)g->ndistinct, sizeof *g->distinct, cmpstr);
        f->allowed = calloc((size_t)g->ndistinct + 1, sizeof *f->allowed);
        if (!f->allowed) return KL_ENOMEM;
        for (int k = 0; k < g->ndistinct; k++) { f->allowed[k] = g->distinct[k]; g->distinct[k] = NULL; }
        f->n_allowed = (size_t)g->ndistinct;
    } else f->type = KL_T_STRING;
    f->nullable = nulls > 0 || g->seen == 0;
    kl_buf b;
    kl_buf_init(&b);
    int rc = field_note(g, t, f, d, &b);
    if (!rc && b.len) f->note = kl_buf_take(&b);
    else kl_buf_free(&b);
    return rc;
}

static void guess_free(colguess *g) {
    free(g->name);
    for (int k = 0; k < g->ndistinct; k++) free(g->distinct[k]);
    for (int t = 0; t < T_N; t++)
        for (int k = 0; k < g->nbad[t]; k++) free(g->bad_val[t][k]);
}

/* The null words of the typed columns join the dialect's null tokens. */
static void add_null_words(kl_dialect *d, const colguess *g, size_t ng, const int *types) {
    for (size_t w = 0; w < N_NULL_WORDS; w++) {
        int used = 0;
        for (size_t k = 0; k < ng; k++) used |= g[k].words[w] > 0 && types[k] >= 0;
        if (!used || kl_null_token(d, null_words[w], strlen(null_words[w])) || d->n_null >= KL_MAX_NULL_TOKENS) continue;
        snprintf(d->null_tokens[d->n_null++], sizeof d->null_tokens[0], "%s", null_words[w]);
    }
}


static int add_col(colguess **g, size_t *ng, size_t *capg, const char *nm) {
    if (*ng == *capg) {
        size_t nc = *capg ? *capg * 2 : 16;
        colguess *ngs = realloc(*g, nc * sizeof **g);
        if (!ngs) return KL_ENOMEM;
        *g = ngs;
        *capg = nc;
    }
    guess_init(&(*g)[*ng]);
    if (!((*g)[*ng].name = strdup(nm))) return KL_ENOMEM;
    (*ng)++;
    return KL_OK;
}

/* The records of a CSV sample with the sniffed dialect s->dialect (the text
 * transcoded to UTF-8 first when it is in another encoding): the preamble
 * (skip_rows lines) skipped, the header's names (header_rows records)
 * normalised as ingest normalises them (kl_csv_header_names; column_N by
 * position without a header), and every record of the header's width voting
 * for its columns' types. */
static int infer_csv(kl_schema *s, const char *buf, size_t len, size_t max_rows, colguess **g, size_t *ng, size_t *capg,
                     int64_t *rows, kl_err *e) {
    kl_dialect *d = &s->dialect;
    char *own = NULL;
    size_t ownn;
    int rc = KL_OK;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    kl_buf *cols = NULL;
    size_t nc = 0;
    char **names = NULL, **orig = NULL;
    if (d->encoding != KL_ENC_UTF8) {
        size_t tl = len;
        if (d->encoding == KL_ENC_UTF16LE || d->encoding == KL_ENC_UTF16BE) tl &= ~(size_t)1;
        if ((rc = kl_transcode_utf8(d->encoding, buf, tl, &own, &ownn, e))) return rc;
        buf = own;
        len = ownn;
    }
    const char eol = d->eol ? d->eol : '\n';
    size_t pos = len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
    int64_t line = 1; /* of the record starting at pos */
    for (int k = 0; k < d->skip_rows && pos < len; k++, line++) {
        const char *nl = memchr(buf + pos, eol, len - pos);
        pos = nl ? (size_t)(nl - buf) + 1 : len;
    }
    size_t width = 0;
    int have_width = 0;
    for (int h = 0; d->header && h < d->header_rows; h++) {
        kl_err pe = {0};
        while (pos < len && (buf[pos] == eol || buf[pos] == '\r')) { pos++; line += buf[pos - 1] == eol; }
        size_t start = pos;
        int prc = kl_csv_next(d, buf, len, &pos, &r, &pe);
        for (size_t k = start; k < pos && k < len; k++) line += buf[k] == eol;
        if (prc == KL_CSV_END) break;
        if (prc) continue;
        if (kl_csv_header_add(&cols, &nc, &r)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        width = nc;
        have_width = 1;
    }
    if (d->header) {
        if (kl_csv_header_names(cols, nc, &names, &orig)) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        for (size_t i = 0; i < nc; i++)
            if ((rc = add_col(g, ng, capg, names[i]))) { rc = kl_err_set(e, rc, "out of memory"); goto done; }
    }
    while ((size_t)*rows < max_rows) {
        kl_err pe = {0};
        size_t start = pos;
        int64_t rec_line = line;
        int prc = kl_csv_next(d, buf, len, &pos, &r, &pe);
        for (size_t k = start; k < pos && k < len; k++) line += buf[k] == eol;
        if (prc == KL_CSV_END) break;
        if (prc) continue;
        if (r.n == 1 && r.len[0] == 0) continue;
        if (!have_width) { /* no header: columns by position */
            width = r.n;
            have_width = 1;
            for (size_t i = 0; i < width; i++) {
                char nm[32];
                snprintf(nm, sizeof nm, "column_%zu", i + 1);
                if ((rc = add_col(g, ng, capg, nm))) { rc = kl_err_set(e, rc, "out of memory"); goto done; }
            }
        }
        if (r.n != width) continue; /* ragged rows do not vote */
        (*rows)++;
        for (size_t i = 0; i < r.n; i++) {
            int isnull = !r.quoted[i] && r.len[i] == 0;
            guess_add(&(*g)[i], d, r.f[i], r.len[i], isnull, r.quoted[i], rec_line);
        }
    }
done:
    for (size_t i = 0; i < nc; i++) {
        kl_buf_free(&cols[i]);
        if (names) free(names[i]);
        if (orig) free(orig[i]);
    }
    free(cols);
    free(names);
    free(orig);
    kl_csv_rec_free(&r);
    kl_mem_free(own);
    return rc;
}

int kl_schema_infer(const char *buf, size_t len, const char *name, size_t max_rows, int more, kl_schema **out, kl_err *e) {
    *out = NULL;
    kl_schema *s = calloc(1, sizeof *s);
    colguess *g = NULL;
    size_t ng = 0, capg = 0;
    int64_t rows = 0;
    int rc = KL_OK;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    {
        kl_buf ev;
        kl_buf_init(&ev);
        rc = kl_dialect_sniff_ex(buf, len, &s->dialect, &ev, e);
        if (!rc && ev.len) s->dialect_note = kl_buf_take(&ev);
        else kl_buf_free(&ev);
        if (rc) { kl_err_prefix(e, "%s", name); goto fail; }
    }
    s->dialect_given = 1;
    if (!max_rows) max_rows = 20000;
#define ADD_COL(nm, nl)                                                              \
    do {                                                                             \
        if (ng == capg) {                                                            \
            capg = capg ? capg * 2 : 16;                                             \
            colguess *ngs = realloc(g, capg * sizeof *g);                            \
            if (!ngs) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; } \
            g = ngs;                                                                 \
        }                                                                            \
        guess_init(&g[ng]);                                                          \
        g[ng].name = strndup((nm), (nl));                                            \
        g[ng].seen = 0;                                                              \
        ng++;                                                                        \
    } while (0)
    if (s->dialect.format == KL_FMT_JSONL) {
        size_t pos = 0;
        int64_t lineno = 0;
        while (pos < len && (size_t)rows < max_rows) {
            lineno++;
            const char *nl = memchr(buf + pos, '\n', len - pos);
            size_t end = nl ? (size_t)(nl - buf) : len;
            void *ov = NULL;
            kl_json_parse_opts(buf + pos, end - pos, NULL, KL_JSON_KEEP_NUL, &ov, NULL); /* the reader ingest uses */
            cJSON *o = ov;
            pos = end + 1;
            if (!cJSON_IsObject(o)) { cJSON_Delete(o); continue; }
            rows++;
            for (cJSON *it = o->child; it; it = it->next) {
                size_t k;
                for (k = 0; k < ng; k++) if (!strcmp(g[k].name, it->string)) break;
                if (k == ng) { ADD_COL(it->string, strlen(it->string)); g[k].nulls = rows - 1; }
                char tmp[64];
                if (cJSON_IsNull(it)) guess_add(&g[k], NULL, "", 0, 1, 0, lineno);
                else if (cJSON_IsString(it))
                    guess_add(&g[k], NULL, it->valuestring, kl_json_string_len(it), 0, 0, lineno);
                else if (cJSON_IsBool(it))
                    guess_add(&g[k], NULL, cJSON_IsTrue(it) ? "true" : "false", cJSON_IsTrue(it) ? 4 : 5, 0, 1, lineno);
                else if (cJSON_IsNumber(it)) {
                    double v = it->valuedouble;
                    if (v == (double)(int64_t)v && fabs(v) < 9e15) snprintf(tmp, sizeof tmp, "%lld", (long long)v);
                    else snprintf(tmp, sizeof tmp, "%.17g", v);
                    guess_add(&g[k], NULL, tmp, strlen(tmp), 0, 1, lineno);
                } else guess_add(&g[k], NULL, "x", 1, 0, 1, lineno), g[k].too_many = 1;
            }
            cJSON_Delete(o);
        }
        for (size_t k = 0; k < ng; k++) /* keys missing from some objects are nulls */
            if (g[k].seen + g[k].nulls < rows) g[k].nulls = rows - g[k].seen;
    } else {
        if ((rc = infer_csv(s, buf, len, max_rows, &g, &ng, &capg, &rows, e))) goto fail;
    }
    if (ng == 0) { rc = kl_err_set(e, KL_EPARSE, "%s: no columns found", name); goto fail; }
    if (!(s->fields = calloc(ng, sizeof *s->fields))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    s->n_fields = ng;
    int *types = calloc(ng, sizeof *types);
    if (!types) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (size_t k = 0; k < ng; k++) types[k] = column_type(&g[k]);
    add_null_words(&s->dialect, g, ng, types);
    for (size_t k = 0; k < ng && !rc; k++) rc = finish_field(&g[k], types[k], &s->dialect, &s->fields[k], rows);
    free(types);
    if (rc) { kl_err_set(e, rc, "out of memory"); goto fail; }
    {
        kl_buf nb;
        kl_buf_init(&nb);
        int sample = more || (size_t)rows >= max_rows;
        if (sample)
            kl_buf_printf(&nb, "inferred from a sample: the first %lld records (observed ranges and values may be narrower than the\n"
                               "whole file's; `keel schema infer --scan full` reads all of it)", (long long)rows);
        else kl_buf_printf(&nb, "inferred from all %lld records of the file", (long long)rows);
        s->note = kl_buf_take(&nb);
    }
    {
        const char *b = strrchr(name, '/');
        b = b ? b + 1 : name;
        s->name = strndup(b, strcspn(b, "."));
    }
    *out = s;
    s = NULL;
fail:
    for (size_t k = 0; k < ng; k++) guess_free(&g[k]);
    free(g);
    kl_csv_rec_free(&r);
    kl_schema_free(s);
    return rc;
}
