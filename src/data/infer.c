/* `keel schema infer`: sniffs the dialect (delimiter, quote, header, line
 * ending, BOM) and the column types from a sample of a CSV/TSV/JSONL file
 * and builds a schema for review (category when few distinct values,
 * nullable when nulls were seen, observed ranges as comments). */
#include "data_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DISTINCT 64

typedef struct {
    char *name;
    int64_t seen, nulls;
    int can_bool, can_int, can_float, can_date, can_ts, all_01;
    int64_t imin, imax;
    double dmin, dmax;
    int has_num;
    char *distinct[MAX_DISTINCT];
    int ndistinct, too_many;
    int64_t ts_min, ts_max;
    int has_ts;
    int explicit_tz;
} colguess;

static void guess_init(colguess *g) {
    memset(g, 0, sizeof *g);
    g->can_bool = g->can_int = g->can_float = g->can_date = g->can_ts = g->all_01 = 1;
}

static void guess_add(colguess *g, const char *s, size_t n, int is_null) {
    if (is_null) { g->nulls++; return; }
    g->seen++;
    int64_t i;
    double d;
    int b;
    int32_t dd;
    int64_t ts;
    if (g->can_int) {
        if (kl_parse_i64n(s, n, &i) == KL_OK) {
            if (!g->has_num || i < g->imin) g->imin = i;
            if (!g->has_num || i > g->imax) g->imax = i;
            if (i != 0 && i != 1) g->all_01 = 0;
        } else g->can_int = 0, g->all_01 = 0;
    } else g->all_01 = 0;
    if (g->can_float) {
        if (kl_parse_f64n(s, n, &d) == KL_OK) {
            if (!g->has_num || d < g->dmin) g->dmin = d;
            if (!g->has_num || d > g->dmax) g->dmax = d;
            g->has_num = 1;
        } else g->can_float = 0;
    }
    if (g->can_bool && kl_parse_booln(s, n, &b) != KL_OK) g->can_bool = 0;
    if (g->can_date && kl_parse_date(s, n, &dd) != KL_OK) g->can_date = 0;
    if (g->can_ts) {
        if (kl_parse_timestamp(s, n, NULL, &ts) == KL_OK) {
            if (!g->has_ts || ts < g->ts_min) g->ts_min = ts;
            if (!g->has_ts || ts > g->ts_max) g->ts_max = ts;
            g->has_ts = 1;
            char last = s[n - 1];
            if (last == 'Z' || last == 'z' || (n > 6 && (s[n - 6] == '+' || s[n - 6] == '-'))) g->explicit_tz = 1;
        } else g->can_ts = 0;
    }
    if (!g->too_many) {
        int k;
        for (k = 0; k < g->ndistinct; k++)
            if (strlen(g->distinct[k]) == n && !memcmp(g->distinct[k], s, n)) break;
        if (k == g->ndistinct) {
            if (g->ndistinct == MAX_DISTINCT || n > 64 || memchr(s, 0, n)) g->too_many = 1; /* a NUL: not a schema value */
            else g->distinct[g->ndistinct++] = strndup(s, n);
        }
    }
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int finish_field(colguess *g, kl_field *f, int64_t rows) {
    f->name = g->name;
    g->name = NULL;
    f->nullable = g->nulls > 0 || g->seen == 0;
    f->max_null_ratio = 1;
    if (g->seen == 0) f->type = KL_T_STRING;
    else if (g->can_bool && !g->can_int) f->type = KL_T_BOOL;
    else if (g->can_int && g->all_01 && g->ndistinct == 2) f->type = KL_T_BOOL;
    else if (g->can_int) {
        f->type = (g->imin >= INT32_MIN && g->imax <= INT32_MAX && g->imax - g->imin < 1000000) ? KL_T_INT32 : KL_T_INT64;
        f->has_min = f->has_max = 1;
        f->imin = g->imin; f->imax = g->imax; f->min = (double)g->imin; f->max = (double)g->imax;
    } else if (g->can_float) {
        f->type = KL_T_FLOAT64;
        f->has_min = f->has_max = 1;
        f->min = g->dmin; f->max = g->dmax;
    } else if (g->can_date) f->type = KL_T_DATE;
    else if (g->can_ts) {
        f->type = KL_T_TIMESTAMP;
        f->timezone = strdup("UTC");
        f->has_min = f->has_max = 1;
        f->imin = g->ts_min; f->imax = g->ts_max;
    } else if (!g->too_many && g->ndistinct <= 32 && rows >= 20 && g->ndistinct * 5 <= g->seen) {
        f->type = KL_T_CATEGORY;
        qsort(g->distinct, (size_t)g->ndistinct, sizeof *g->distinct, cmpstr);
        f->allowed = calloc((size_t)g->ndistinct, sizeof *f->allowed);
        if (!f->allowed) return KL_ENOMEM;
        for (int k = 0; k < g->ndistinct; k++) { f->allowed[k] = g->distinct[k]; g->distinct[k] = NULL; }
        f->n_allowed = (size_t)g->ndistinct;
    } else f->type = KL_T_STRING;
    return KL_OK;
}

static void guess_free(colguess *g) {
    free(g->name);
    for (int k = 0; k < g->ndistinct; k++) free(g->distinct[k]);
}

static int looks_like_data(const char *s, size_t n) {
    int64_t i;
    double d;
    int32_t dd;
    int64_t ts;
    return n == 0 || kl_parse_i64n(s, n, &i) == KL_OK || kl_parse_f64n(s, n, &d) == KL_OK ||
           kl_parse_date(s, n, &dd) == KL_OK || kl_parse_timestamp(s, n, NULL, &ts) == KL_OK;
}

int kl_schema_infer(const char *buf, size_t len, const char *name, size_t max_rows, kl_schema **out, kl_err *e) {
    *out = NULL;
    kl_schema *s = calloc(1, sizeof *s);
    colguess *g = NULL;
    size_t ng = 0, capg = 0;
    int64_t rows = 0;
    int rc = KL_OK;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if ((rc = kl_dialect_sniff(buf, len, &s->dialect, e))) { kl_err_prefix(e, "%s", name); goto fail; }
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
        while (pos < len && (size_t)rows < max_rows) {
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
                if (cJSON_IsNull(it)) guess_add(&g[k], "", 0, 1);
                else if (cJSON_IsString(it)) guess_add(&g[k], it->valuestring, kl_json_string_len(it), 0);
                else if (cJSON_IsBool(it)) guess_add(&g[k], cJSON_IsTrue(it) ? "true" : "false", cJSON_IsTrue(it) ? 4 : 5, 0);
                else if (cJSON_IsNumber(it)) {
                    double v = it->valuedouble;
                    if (v == (double)(int64_t)v && fabs(v) < 9e15) snprintf(tmp, sizeof tmp, "%lld", (long long)v);
                    else snprintf(tmp, sizeof tmp, "%.17g", v);
                    guess_add(&g[k], tmp, strlen(tmp), 0);
                } else guess_add(&g[k], "x", 1, 0), g[k].too_many = 1;
            }
            cJSON_Delete(o);
        }
        for (size_t k = 0; k < ng; k++) /* keys missing from some objects are nulls */
            if (g[k].seen + g[k].nulls < rows) g[k].nulls = rows - g[k].seen;
    } else {
        size_t pos = 0;
        int first = 1;
        size_t hdr_n = 0;
        char **hdr = NULL;
        while ((size_t)rows < max_rows) {
            kl_err pe = {0};
            int prc = kl_csv_next(&s->dialect, buf, len, &pos, &r, &pe);
            if (prc == KL_CSV_END) break;
            if (prc) continue;
            if (r.n == 1 && r.len[0] == 0) continue;
            if (first) {
                first = 0;
                hdr_n = r.n;
                hdr = calloc(r.n, sizeof *hdr);
                if (!hdr) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
                int header = 1;
                for (size_t i = 0; i < r.n; i++) {
                    hdr[i] = strndup(r.f[i], r.len[i]);
                    if (looks_like_data(r.f[i], r.len[i])) header = 0;
                }
                s->dialect.header = header;
                for (size_t i = 0; i < r.n; i++) {
                    char nm[32];
                    snprintf(nm, sizeof nm, "column%zu", i + 1);
                    if (header) ADD_COL(hdr[i], strlen(hdr[i]));
                    else ADD_COL(nm, strlen(nm));
                }
                if (header) continue;
            }
            if (r.n != hdr_n) continue; /* ragged rows do not vote */
            rows++;
            for (size_t i = 0; i < r.n; i++) {
                int isnull = !r.quoted[i] && r.len[i] == 0;
                guess_add(&g[i], r.f[i], r.len[i], isnull);
            }
        }
        if (hdr) for (size_t i = 0; i < hdr_n; i++) free(hdr[i]);
        free(hdr);
    }
    if (ng == 0) { rc = kl_err_set(e, KL_EPARSE, "%s: no columns found", name); goto fail; }
    if (!(s->fields = calloc(ng, sizeof *s->fields))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    s->n_fields = ng;
    for (size_t k = 0; k < ng; k++)
        if ((rc = finish_field(&g[k], &s->fields[k], rows))) { kl_err_set(e, rc, "out of memory"); goto fail; }
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
