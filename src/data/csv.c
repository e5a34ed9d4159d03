/* CSV/TSV records (RFC 4180: quoted fields with doubled quotes, embedded
 * delimiters and newlines, CRLF or LF, a leading UTF-8 BOM) and dialect
 * sniffing for `keel schema infer`. */
#include "data_int.h"

#include <stdlib.h>
#include <string.h>

void kl_dialect_default(kl_dialect *d) {
    memset(d, 0, sizeof *d);
    d->format = KL_FMT_CSV;
    d->delim = ',';
    d->quote = '"';
    d->header = 1;
    d->n_null = 1;
    d->null_tokens[0][0] = 0;
    d->max_record = (size_t)10 << 20;
}

void kl_csv_rec_init(kl_csv_rec *r) { memset(r, 0, sizeof *r); }

void kl_csv_rec_free(kl_csv_rec *r) {
    if (!r) return;
    free(r->f); free(r->len); free(r->quoted); free(r->off); free(r->scratch);
    memset(r, 0, sizeof *r);
}

static int rec_grow(kl_csv_rec *r) {
    size_t nc = r->cap ? r->cap * 2 : 32;
    const char **f = realloc(r->f, nc * sizeof *f);
    if (!f) return KL_ENOMEM;
    r->f = f;
    uint32_t *l = realloc(r->len, nc * sizeof *l);
    if (!l) return KL_ENOMEM;
    r->len = l;
    uint8_t *q = realloc(r->quoted, nc);
    if (!q) return KL_ENOMEM;
    r->quoted = q;
    size_t *o = realloc(r->off, nc * sizeof *o);
    if (!o) return KL_ENOMEM;
    r->off = o;
    r->cap = nc;
    return KL_OK;
}

static int scratch_put(kl_csv_rec *r, const char *s, size_t n) {
    if (r->slen + n + 1 > r->scap) {
        size_t nc = r->scap ? r->scap : 256;
        while (nc < r->slen + n + 1) nc *= 2;
        char *p = realloc(r->scratch, nc);
        if (!p) return KL_ENOMEM;
        r->scratch = p;
        r->scap = nc;
    }
    memcpy(r->scratch + r->slen, s, n);
    r->slen += n;
    return KL_OK;
}

/* Skips to just after the next '\n' (or to len). */
static size_t next_line(const char *buf, size_t len, size_t p) {
    const char *nl = memchr(buf + p, '\n', len - p);
    return nl ? (size_t)(nl - buf) + 1 : len;
}

int kl_csv_next(const kl_dialect *d, const char *buf, size_t len, size_t *pos, kl_csv_rec *r, kl_err *e) {
    size_t p = *pos;
    if (p == 0 && len >= 3 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB &&
        (unsigned char)buf[2] == 0xBF)
        p = 3;
    if (p >= len) { *pos = len; return KL_CSV_END; }
    const char delim = d->delim, quote = d->quote;
    static _Thread_local unsigned char special[256];
    static _Thread_local int sp_delim = -1, sp_quote = -1;
    if (sp_delim != (unsigned char)delim || sp_quote != (unsigned char)quote) {
        memset(special, 0, sizeof special);
        special[(unsigned char)delim] = special['\n'] = 1;
        if (quote) special[(unsigned char)quote] = 1;
        sp_delim = (unsigned char)delim;
        sp_quote = (unsigned char)quote;
    }
    const size_t start = p, maxr = d->max_record ? d->max_record : (size_t)10 << 20;
    r->n = 0;
    r->slen = 0;
    r->lines = 1;
    for (;;) { /* one field per iteration */
        if (r->n == r->cap && rec_grow(r)) return kl_err_set(e, KL_ENOMEM, "out of memory");
        size_t fi = r->n++;
        if (quote && p < len && buf[p] == quote) {
            /* quoted field: copy unescaped into scratch */
            size_t soff = r->slen;
            p++;
            for (;;) {
                const char *q = memchr(buf + p, quote, len - p);
                if (!q) {
                    int64_t lines = r->lines;
                    for (size_t k = p; k < len; k++) lines += buf[k] == '\n';
                    r->lines = lines;
                    *pos = len;
                    return kl_err_set(e, KL_EPARSE, "unterminated quoted field (field %zu)", fi + 1);
                }
                size_t qi = (size_t)(q - buf);
                for (size_t k = p; k < qi; k++) r->lines += buf[k] == '\n';
                if (scratch_put(r, buf + p, qi - p)) return kl_err_set(e, KL_ENOMEM, "out of memory");
                p = qi + 1;
                if (p < len && buf[p] == quote) { /* doubled quote */
                    if (scratch_put(r, &quote, 1)) return kl_err_set(e, KL_ENOMEM, "out of memory");
                    p++;
                    continue;
                }
                break;
            }
            if (p - start > maxr) goto too_long;
            r->off[fi] = soff;
            r->len[fi] = (uint32_t)(r->slen - soff);
            r->quoted[fi] = 1;
            if (p >= len) break;
            char c = buf[p];
            if (c == delim) { p++; continue; }
            if (c == '\n') { p++; break; }
            if (c == '\r' && (p + 1 >= len || buf[p + 1] == '\n')) { p += p + 1 < len ? 2 : 1; break; }
            *pos = next_line(buf, len, p);
            return kl_err_set(e, KL_EPARSE, "unexpected character after closing quote (field %zu)", fi + 1);
        }
        /* unquoted field: scan to the next special byte (delimiter, newline, quote) */
        size_t fs = p;
        while (p < len && !special[(unsigned char)buf[p]]) p++;
        if (p < len && quote && buf[p] == quote) {
            *pos = next_line(buf, len, p);
            return kl_err_set(e, KL_EPARSE, "quote inside an unquoted field (field %zu)", fi + 1);
        }
        size_t fe = p;
        if (p - start > maxr) goto too_long;
        if (fe > fs && buf[fe - 1] == '\r' && (p >= len || buf[p] == '\n')) fe--;
        r->f[fi] = buf + fs;
        r->off[fi] = SIZE_MAX;
        r->len[fi] = (uint32_t)(fe - fs);
        r->quoted[fi] = 0;
        if (p >= len) break;
        if (buf[p] == delim) { p++; continue; }
        p++; /* '\n' */
        break;
    }
    for (size_t i = 0; i < r->n; i++)
        if (r->off[i] != SIZE_MAX) r->f[i] = r->scratch + r->off[i];
    *pos = p;
    return KL_OK;
too_long:
    *pos = next_line(buf, len, p);
    return kl_err_set(e, KL_ERANGE, "record longer than %zu bytes", maxr);
}

/* ---- sniffing ------------------------------------------------------------- */

/* Counts fields of the first few lines for a delimiter (outside quotes). */
static double delim_score(const char *buf, size_t len, char delim, int *nfields) {
    kl_dialect d;
    kl_dialect_default(&d);
    d.delim = delim;
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    size_t pos = 0;
    int lines = 0, first = -1, same = 0;
    kl_err e = {0};
    while (lines < 50) {
        int rc = kl_csv_next(&d, buf, len, &pos, &r, &e);
        if (rc == KL_CSV_END) break;
        if (pos >= len && lines > 1) break; /* a possibly truncated last line */
        lines++;
        if (rc) continue;
        if (first < 0) first = (int)r.n;
        if ((int)r.n == first) same++;
    }
    kl_csv_rec_free(&r);
    *nfields = first;
    if (first <= 1 || lines == 0) return 0;
    return (double)same / lines * 1000 + first;
}

int kl_dialect_sniff(const char *buf, size_t len, kl_dialect *d, kl_err *e) {
    kl_dialect_default(d);
    size_t off = 0;
    if (len >= 3 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB && (unsigned char)buf[2] == 0xBF) {
        d->bom = 1;
        off = 3;
    }
    size_t i = off;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n')) i++;
    if (i >= len) return kl_err_set(e, KL_EPARSE, "empty file");
    if (buf[i] == '{') {
        d->format = KL_FMT_JSONL;
        d->header = 0;
        return KL_OK;
    }
    const char *nl = memchr(buf + off, '\n', len - off);
    d->crlf = nl && nl > buf + off && nl[-1] == '\r';
    static const char cands[] = {',', '\t', ';', '|'};
    double best = 0;
    int bestn = 0;
    for (size_t k = 0; k < sizeof cands; k++) {
        int nf;
        double s = delim_score(buf, len, cands[k], &nf);
        if (s > best) { best = s; d->delim = cands[k]; bestn = nf; }
    }
    (void)bestn;
    return KL_OK;
}
