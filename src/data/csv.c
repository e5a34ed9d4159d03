/* The one CSV reader: records of RFC 4180 CSV/TSV (quoted fields with
 * doubled quotes, embedded delimiters and newlines, CRLF or LF, a leading
 * UTF-8 BOM) on a fast path, and every other dialect the schema can name on
 * a general path (a delimiter of several bytes, an escape character, CR-only
 * records, trimmed fields, lenient stray quotes); transcoding of UTF-16,
 * Latin-1 and Windows-1252 sources to UTF-8; dialect sniffing by consistency
 * scoring for `keel schema infer` and ingest without a dialect. */
#include "data_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

void kl_dialect_default(kl_dialect *d) {
    memset(d, 0, sizeof *d);
    d->format = KL_FMT_CSV;
    d->delim = ',';
    d->quote = '"';
    d->header = 1;
    d->header_rows = 1;
    d->eol = '\n';
    d->decimal = '.';
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

/* Skips to just after the next eol byte (or to len). */
static size_t next_line_eol(const char *buf, size_t len, size_t p, char eol) {
    const char *nl = memchr(buf + p, eol, len - p);
    return nl ? (size_t)(nl - buf) + 1 : len;
}
static size_t next_line(const char *buf, size_t len, size_t p) { return next_line_eol(buf, len, p, '\n'); }

static int csv_next_general(const kl_dialect *d, const char *buf, size_t len, size_t *pos, kl_csv_rec *r, kl_err *e);

/* The general path serves every dialect option beyond RFC 4180's. */
static int needs_general(const kl_dialect *d) {
    return d->delim_n > 1 || d->escape || (d->eol && d->eol != '\n') || d->trim;
}

int kl_csv_next(const kl_dialect *d, const char *buf, size_t len, size_t *pos, kl_csv_rec *r, kl_err *e) {
    size_t p = *pos;
    if (p == 0 && len >= 3 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB &&
        (unsigned char)buf[2] == 0xBF)
        p = 3;
    if (p >= len) { *pos = len; return KL_CSV_END; }
    r->repairs = 0;
    if (needs_general(d)) { *pos = p; return csv_next_general(d, buf, len, pos, r, e); }
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
            if (d->lenient) {
                *pos = start;
                return csv_next_general(d, buf, len, pos, r, e);
            } /* rare: re-read leniently */
            *pos = next_line(buf, len, p);
            return kl_err_set(e, KL_EPARSE, "unexpected character after closing quote (field %zu)", fi + 1);
        }
        /* unquoted field: scan to the next special byte (delimiter, newline, quote) */
        size_t fs = p;
        while (p < len && !special[(unsigned char)buf[p]]) p++;
        if (p < len && quote && buf[p] == quote) {
            if (d->lenient) { *pos = start; return csv_next_general(d, buf, len, pos, r, e); }
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

/* ---- the general path ------------------------------------------------------ */

typedef struct {
    const char *dl;   /* delimiter bytes */
    size_t dn;
    char q, esc, eol;
    int trim, lenient;
} gcfg;

static inline int at_delim(const gcfg *g, const char *buf, size_t len, size_t p) {
    return buf[p] == g->dl[0] && (g->dn == 1 || (p + g->dn <= len && !memcmp(buf + p, g->dl, g->dn)));
}

/* A space or tab that trim drops (not when it is the delimiter). */
static inline int trim_ws(const gcfg *g, char c) { return (c == ' ' || c == '\t') && !(g->dn == 1 && g->dl[0] == c); }

/* An unquoted field from p: to the delimiter, the record end or (strict) a
 * quote. Returns 1 at a quote that a strict dialect refuses. */
static int scan_unquoted(const gcfg *g, const char *buf, size_t len, size_t *pp, int literal_quotes, kl_csv_rec *r) {
    size_t p = *pp;
    while (p < len) {
        char c = buf[p];
        if (c == g->eol || at_delim(g, buf, len, p)) break;
        if (g->q && c == g->q && !literal_quotes) {
            if (!g->lenient) { *pp = p; return 1; }
            r->repairs |= KL_CSV_REPAIR_QUOTE;
        }
        p++;
    }
    *pp = p;
    return 0;
}

static int csv_next_general(const kl_dialect *d, const char *buf, size_t len, size_t *pos, kl_csv_rec *r, kl_err *e) {
    gcfg g;
    g.dl = kl_dialect_delim(d, &g.dn);
    g.q = d->quote;
    g.esc = d->escape == d->quote ? 0 : d->escape;
    g.eol = d->eol ? d->eol : '\n';
    g.trim = d->trim;
    g.lenient = d->lenient;
    size_t p = *pos;
    const size_t start = p, maxr = d->max_record ? d->max_record : (size_t)10 << 20;
    r->n = 0;
    r->slen = 0;
    r->lines = 1;
    r->repairs = 0;
    for (;;) { /* one field per iteration */
        if (r->n == r->cap && rec_grow(r)) return kl_err_set(e, KL_ENOMEM, "out of memory");
        size_t fi = r->n++;
        const size_t f0 = p;
        if (g.trim) while (p < len && trim_ws(&g, buf[p])) p++;
        int literal = 0;
        if (g.q && p < len && buf[p] == g.q) {
            size_t soff = r->slen, slen0 = r->slen;
            int64_t lines0 = r->lines;
            p++;
            for (;;) {
                size_t k = p;
                while (k < len && buf[k] != g.q && !(g.esc && buf[k] == g.esc)) { r->lines += buf[k] == g.eol; k++; }
                if (scratch_put(r, buf + p, k - p)) return kl_err_set(e, KL_ENOMEM, "out of memory");
                if (k >= len || (buf[k] == g.esc && k + 1 >= len)) {
                    *pos = len;
                    return kl_err_set(e, KL_EPARSE, "unterminated quoted field (field %zu)", fi + 1);
                }
                if (buf[k] == g.esc) { /* escape: the next byte as it is */
                    r->lines += buf[k + 1] == g.eol;
                    if (scratch_put(r, buf + k + 1, 1)) return kl_err_set(e, KL_ENOMEM, "out of memory");
                    p = k + 2;
                    continue;
                }
                p = k + 1;
                if (!g.esc && p < len && buf[p] == g.q) { /* doubled quote */
                    if (scratch_put(r, &g.q, 1)) return kl_err_set(e, KL_ENOMEM, "out of memory");
                    p++;
                    continue;
                }
                break;
            }
            if (p - start > maxr) goto too_long;
            if (g.trim) while (p < len && trim_ws(&g, buf[p])) p++;
            int ends = p >= len || at_delim(&g, buf, len, p) || buf[p] == g.eol ||
                       (g.eol == '\n' && buf[p] == '\r' && (p + 1 >= len || buf[p + 1] == '\n'));
            if (ends) {
                r->off[fi] = soff;
                r->len[fi] = (uint32_t)(r->slen - soff);
                r->quoted[fi] = 1;
                if (p >= len) break;
                if (buf[p] == g.eol) { p++; break; }
                if (buf[p] == '\r') { p += p + 1 < len ? 2 : 1; break; }
                p += g.dn;
                continue;
            }
            if (!g.lenient) {
                *pos = next_line_eol(buf, len, p, g.eol);
                return kl_err_set(e, KL_EPARSE, "unexpected character after closing quote (field %zu)", fi + 1);
            }
            /* lenient: the field was not quoted after all; read it again literally */
            r->repairs |= KL_CSV_REPAIR_QUOTE;
            r->slen = slen0;
            r->lines = lines0;
            p = f0;
            literal = 1;
        }
        size_t fs = p; /* (blanks before it already skipped under trim) */
        if (literal) { /* the field again from its start, its quotes as data */
            fs = f0;
            if (g.trim) while (fs < len && trim_ws(&g, buf[fs])) fs++;
            p = fs;
        }
        if (scan_unquoted(&g, buf, len, &p, literal, r)) {
            *pos = next_line_eol(buf, len, p, g.eol);
            return kl_err_set(e, KL_EPARSE, "quote inside an unquoted field (field %zu)", fi + 1);
        }
        if (p - start > maxr) goto too_long;
        size_t fe = p;
        if (g.eol == '\n' && fe > fs && buf[fe - 1] == '\r' && (p >= len || buf[p] == '\n')) fe--;
        if (g.trim) while (fe > fs && trim_ws(&g, buf[fe - 1])) fe--;
        r->f[fi] = buf + fs;
        r->off[fi] = SIZE_MAX;
        r->len[fi] = (uint32_t)(fe - fs);
        r->quoted[fi] = 0;
        if (p >= len) break;
        if (buf[p] == g.eol) { p++; break; }
        p += g.dn;
    }
    for (size_t i = 0; i < r->n; i++)
        if (r->off[i] != SIZE_MAX) r->f[i] = r->scratch + r->off[i];
    *pos = p;
    return KL_OK;
too_long:
    *pos = next_line_eol(buf, len, p, g.eol);
    return kl_err_set(e, KL_ERANGE, "record longer than %zu bytes", maxr);
}

/* ---- names, line terminators ---------------------------------------------- */

static const char *const enc_names[KL_ENC_COUNT] = {"utf-8", "utf-16le", "utf-16be", "latin-1", "windows-1252"};
const char *kl_encoding_name(kl_encoding enc) { return (unsigned)enc < KL_ENC_COUNT ? enc_names[enc] : "?"; }

int kl_encoding_parse(const char *name, kl_encoding *out) {
    static const struct { const char *n; kl_encoding e; } alias[] = {
        {"utf-8", KL_ENC_UTF8}, {"utf8", KL_ENC_UTF8}, {"utf-16le", KL_ENC_UTF16LE}, {"utf16le", KL_ENC_UTF16LE},
        {"utf-16be", KL_ENC_UTF16BE}, {"utf16be", KL_ENC_UTF16BE}, {"utf-16", KL_ENC_UTF16LE},
        {"latin-1", KL_ENC_LATIN1}, {"latin1", KL_ENC_LATIN1}, {"iso-8859-1", KL_ENC_LATIN1},
        {"windows-1252", KL_ENC_CP1252}, {"cp1252", KL_ENC_CP1252}};
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        if (!strcasecmp(name, alias[i].n)) { *out = alias[i].e; return KL_OK; }
    return KL_EINVAL;
}

const char *kl_line_term_name(kl_line_term t) {
    static const char *const n[] = {"auto", "lf", "crlf", "cr"};
    return (unsigned)t < 4 ? n[t] : "?";
}

/* Line breaks of a sample by kind: CRLF, a CR alone, an LF alone (quoted
 * ones included: the majority decides). */
static void line_counts(const char *buf, size_t len, size_t *crlf, size_t *cr, size_t *lf) {
    for (size_t k = 0; k < len; k++) {
        if (buf[k] == '\r') { if (k + 1 < len && buf[k + 1] == '\n') { (*crlf)++; k++; } else (*cr)++; }
        else if (buf[k] == '\n') (*lf)++;
    }
}

void kl_dialect_resolve_eol(kl_dialect *d, const char *buf, size_t len) {
    if (d->line_term == KL_LT_CR) { d->eol = '\r'; return; }
    if (d->line_term != KL_LT_AUTO) { d->eol = '\n'; return; }
    size_t crlf = 0, cr = 0, lf = 0;
    line_counts(buf, len, &crlf, &cr, &lf);
    d->eol = cr > crlf + lf ? '\r' : '\n';
}

/* ---- transcoding ------------------------------------------------------------ */

/* Windows-1252's 0x80..0x9f (the five undefined bytes map to the C1 controls, as WHATWG does). */
static const uint16_t cp1252_hi[32] = {0x20ac, 0x0081, 0x201a, 0x0192, 0x201e, 0x2026, 0x2020, 0x2021,
                                       0x02c6, 0x2030, 0x0160, 0x2039, 0x0152, 0x008d, 0x017d, 0x008f,
                                       0x0090, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014,
                                       0x02dc, 0x2122, 0x0161, 0x203a, 0x0153, 0x009d, 0x017e, 0x0178};

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

int kl_transcode_utf8(kl_encoding enc, const char *buf, size_t len, char **out, size_t *outn, kl_err *e) {
    const unsigned char *b = (const unsigned char *)buf;
    *out = NULL;
    *outn = 0;
    int u16 = enc == KL_ENC_UTF16LE || enc == KL_ENC_UTF16BE;
    if (u16 && len % 2) return kl_err_set(e, KL_EPARSE, "UTF-16 text of an odd number of bytes (%zu)", len);
    size_t cap = u16 ? len / 2 * 3 + 1 : len * 3 + 1; /* a UTF-16 unit is at most 3 bytes; a surrogate pair 4 for 4 */
    char *o = kl_mem_alloc(cap, KL_TAG_DATASET);
    if (!o) return kl_err_set(e, KL_ENOMEM, "out of memory transcoding %zu bytes", len);
    size_t n = 0, i = 0;
    if (u16) {
        int le = enc == KL_ENC_UTF16LE;
        if (len >= 2 && ((b[0] == 0xff && b[1] == 0xfe) || (b[0] == 0xfe && b[1] == 0xff))) {
            le = b[0] == 0xff;
            i = 2;
        }
        for (; i < len; i += 2) {
            uint32_t u = le ? (uint32_t)(b[i] | b[i + 1] << 8) : (uint32_t)(b[i] << 8 | b[i + 1]);
            if (u >= 0xd800 && u < 0xdc00 && i + 3 < len) {
                uint32_t l = le ? (uint32_t)(b[i + 2] | b[i + 3] << 8) : (uint32_t)(b[i + 2] << 8 | b[i + 3]);
                if (l >= 0xdc00 && l < 0xe000) { u = 0x10000 + ((u - 0xd800) << 10) + (l - 0xdc00); i += 2; }
            }
            if (u >= 0xd800 && u < 0xe000) {
                kl_mem_free(o);
                return kl_err_set(e, KL_EPARSE, "unpaired UTF-16 surrogate at byte %zu", i);
            }
            n += put_utf8(o + n, u);
        }
    } else {
        for (; i < len; i++) {
            uint32_t cp = b[i];
            if (enc == KL_ENC_CP1252 && cp >= 0x80 && cp < 0xa0) cp = cp1252_hi[cp - 0x80];
            n += put_utf8(o + n, cp);
        }
    }
    o[n] = 0;
    *out = o;
    *outn = n;
    return KL_OK;
}

kl_encoding kl_encoding_sniff(const char *buf, size_t len) {
    const unsigned char *b = (const unsigned char *)buf;
    if (len >= 2 && b[0] == 0xff && b[1] == 0xfe) return KL_ENC_UTF16LE;
    if (len >= 2 && b[0] == 0xfe && b[1] == 0xff) return KL_ENC_UTF16BE;
    /* no BOM: UTF-16 text of mostly ASCII has a zero in every other byte */
    size_t z_even = 0, z_odd = 0, m = len < 4096 ? len : 4096;
    for (size_t i = 0; i < m; i++) if (!b[i]) { if (i % 2) z_odd++; else z_even++; }
    if (m >= 8 && z_odd > m / 4 && z_even == 0) return KL_ENC_UTF16LE;
    if (m >= 8 && z_even > m / 4 && z_odd == 0) return KL_ENC_UTF16BE;
    /* a sample may end inside a UTF-8 sequence: ignore up to 3 trailing bytes */
    size_t cut = len;
    for (int k = 0; k < 3 && cut && (b[cut - 1] & 0xc0) == 0x80; k++) cut--;
    if (cut && b[cut - 1] >= 0xc0) cut--;
    if (kl_utf8_valid(buf, cut, NULL)) return KL_ENC_UTF8;
    /* not UTF-8: an 8-bit text when its high bytes read as letters or
     * punctuation there (at least 90 % of them: not 0xfe/0xff, no control
     * byte after them); otherwise it stays UTF-8 with bad bytes (utf8 rejects) */
    size_t high = 0, textlike = 0, c1 = 0;
    for (size_t i = 0; i < len; i++) {
        if (b[i] < 0x80) continue;
        high++;
        c1 += b[i] < 0xa0;
        int next_ok = i + 1 >= len || b[i + 1] >= 0x20 || b[i + 1] == '\n' || b[i + 1] == '\r' || b[i + 1] == '\t';
        textlike += b[i] < 0xfe && next_ok && !(b[i] >= 0x80 && b[i] < 0xa0 && cp1252_hi[b[i] - 0x80] < 0x100);
    }
    if (textlike * 10 < high * 9) return KL_ENC_UTF8;
    return c1 ? KL_ENC_CP1252 : KL_ENC_LATIN1;
}

/* ---- sniffing by consistency scoring ----------------------------------------- */

#define SNIFF_ROWS 200

/* What a cell looks like, for the type score: a value of a known type (a
 * number, a date or time, a bool, empty) or a clean word; a cell with
 * blanks around it or with quote characters inside is not clean. */
static int cell_typed(const char *s, size_t n, char quote) {
    if (n == 0) return 1;
    if (s[0] == ' ' || s[n - 1] == ' ' || s[0] == '\t') return 0;
    int64_t i;
    double dv;
    int32_t dd;
    int64_t ts;
    if (kl_parse_i64n(s, n, &i) == KL_OK || kl_parse_f64n(s, n, &dv) == KL_OK || kl_parse_date(s, n, &dd) == KL_OK ||
        kl_parse_timestamp(s, n, NULL, &ts) == KL_OK)
        return 1;
    for (size_t k = 0; k < n; k++)
        if (s[k] == '"' || s[k] == '\'' || (s[k] == quote && quote) || s[k] == '\\') return 0;
    return 1;
}

typedef struct {
    double score, pattern, types;
    int skip_lines;      /* physical lines before the first consistent record */
    int width;           /* the modal field count */
    int rows;            /* records after the preamble */
    int modal;           /* of them, records of the modal width */
} sniff_score;

/* Parses up to SNIFF_ROWS records of buf with dialect d and scores them as
 * CleverCSV does: pattern = (1/K) sum_k N_k (L_k - 1) / L_k over the K
 * distinct field counts L_k (N_k records each; a record that does not
 * parse is a pattern of its own), times the share of typed cells, both
 * after a preamble: the records before the first record of the modal width
 * (rows that do not fit are a preamble when they come first; a ragged row
 * further down is not). */
static void score_dialect(const kl_dialect *d, const char *buf, size_t len, sniff_score *out) {
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    int widths[SNIFF_ROWS], lines_at[SNIFF_ROWS + 1];
    size_t starts[SNIFF_ROWS];
    int n = 0, line = 0;
    size_t pos = 0;
    memset(out, 0, sizeof *out);
    while (n < SNIFF_ROWS) {
        kl_err e = {0};
        size_t s0 = pos;
        int rc = kl_csv_next(d, buf, len, &pos, &r, &e);
        if (rc == KL_CSV_END) break;
        int nl = 0;
        for (size_t k = s0; k < pos; k++) nl += buf[k] == d->eol;
        if (pos >= len && n > 2 && (!nl || buf[len - 1] != d->eol)) break; /* a sample's cut last line */
        int at = line;
        line += nl ? nl : 1;
        if (rc == KL_OK && r.n == 1 && r.len[0] == 0 && !r.quoted[0]) continue; /* blank */
        widths[n] = rc ? -1 : (int)r.n;
        lines_at[n] = at;
        starts[n] = s0;
        n++;
    }
    if (n == 0) { kl_csv_rec_free(&r); return; }
    /* modal width (a width of 1 only when nothing else repeats) */
    int mode = -1, best = 0;
    for (int i = 0; i < n; i++) {
        if (widths[i] < 1) continue;
        int c = 0;
        for (int k = 0; k < n; k++) c += widths[k] == widths[i];
        if (c > best || (c == best && widths[i] > mode)) { best = c; mode = widths[i]; }
    }
    int first = 0; /* the preamble: the records before the first one of the modal width */
    while (first < n && widths[first] != mode) first++;
    if (first >= n) first = 0;
    /* pattern score over the records after the preamble */
    int kw[SNIFF_ROWS], kc[SNIFF_ROWS], K = 0;
    for (int i = first; i < n; i++) {
        int k;
        for (k = 0; k < K; k++) if (kw[k] == widths[i]) break;
        if (k == K) { kw[K] = widths[i]; kc[K++] = 0; }
        kc[k]++;
    }
    double pat = 0;
    for (int k = 0; k < K;
         k++) /* (one field: 1/2, as CleverCSV's floor, so a one-column reading can win when nothing splits) */
        pat += kw[k] > 0 ? kc[k] * (kw[k] > 1 ? (double)(kw[k] - 1) / kw[k] : 0.5) : 0;
    pat /= K;
    /* type score: typed cells of the records after the preamble */
    int64_t cells = 0, typed = 0;
    for (int i = first; i < n; i++) {
        if (widths[i] < 1) { cells++; continue; }
        size_t p = starts[i];
        kl_err e = {0};
        if (kl_csv_next(d, buf, len, &p, &r, &e)) continue;
        for (size_t j = 0; j < r.n; j++) { cells++; typed += r.quoted[j] || cell_typed(r.f[j], r.len[j], d->quote); }
    }
    kl_csv_rec_free(&r);
    out->pattern = pat;
    out->types = cells ? (double)typed / (double)cells : 0;
    out->score = pat * (out->types > 0 ? out->types : 1e-3);
    out->skip_lines = lines_at[first];
    out->width = mode;
    out->rows = n - first;
    for (int i = first; i < n; i++) out->modal += widths[i] == mode;
}

static void describe(kl_buf *b, const kl_dialect *d) {
    size_t dn;
    const char *dl = kl_dialect_delim(d, &dn);
    kl_buf_puts(b, "delimiter '");
    for (size_t i = 0; i < dn; i++) {
        if (dl[i] == '\t') kl_buf_puts(b, "\\t");
        else kl_buf_append(b, dl + i, 1);
    }
    if (d->quote) kl_buf_printf(b, "', quote '%c'", d->quote);
    else kl_buf_puts(b, "', quote none");
    kl_buf_printf(b, ", escape %s", d->escape == '\\' ? "'\\'" : "doubled quote");
}

static int looks_like_data(const char *s, size_t l) {
    int64_t i;
    double dv;
    int32_t dd;
    int64_t ts;
    return l &&
        (kl_parse_i64n(s, l, &i) == KL_OK || kl_parse_f64n(s, l, &dv) == KL_OK || kl_parse_date(s, l, &dd) == KL_OK ||
         kl_parse_timestamp(s, l, NULL, &ts) == KL_OK);
}

#define HDR_PEEK 4
/* Header records after the preamble: the first record is a header when no
 * cell looks like data. A record after a header row is one more header row
 * (a spanning header: "region,sales,sales" over ",2023,2024") when the row
 * above has a repeated or an empty name, this one has an empty cell or only
 * names, and joining the two makes the names distinct; up to 3 rows. */
static void sniff_header(kl_dialect *d, const char *buf, size_t len, size_t begin, kl_buf *ev) {
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    size_t pos = begin;
    kl_buf *rows[HDR_PEEK] = {0};
    size_t width[HDR_PEEK] = {0};
    int names_only[HDR_PEEK] = {0}, has_empty[HDR_PEEK] = {0}, n = 0;
    while (n < HDR_PEEK) {
        while (pos < len && (buf[pos] == d->eol || buf[pos] == '\r')) pos++;
        kl_err e = {0};
        if (kl_csv_next(d, buf, len, &pos, &r, &e)) break;
        if (!(rows[n] = calloc(r.n ? r.n : 1, sizeof *rows[n]))) break;
        width[n] = r.n;
        names_only[n] = 1;
        int any = 0;
        for (size_t j = 0; j < r.n; j++) {
            kl_buf_init(&rows[n][j]);
            kl_buf_append(&rows[n][j], r.f[j], r.len[j]);
            if (r.len[j]) any = 1;
            else has_empty[n] = 1;
            if (looks_like_data(r.f[j], r.len[j])) names_only[n] = 0;
        }
        names_only[n] &= any;
        n++;
    }
    d->header = n > 0 && names_only[0];
    d->header_rows = 1;
    for (int k = 0; d->header && k + 2 < n && k < 2; k++) { /* row k+1 joins the header? (a data row must follow) */
        size_t w = width[k];
        if (width[k + 1] != w) break;
        int weak = has_empty[k];
        for (size_t a = 0; a < w && !weak; a++)
            for (size_t b = a + 1; b < w && !weak; b++)
                weak = rows[k][a].len && rows[k][a].len == rows[k][b].len &&
                    !memcmp(rows[k][a].data, rows[k][b].data, rows[k][a].len);
        if (!weak || !(has_empty[k + 1] || names_only[k + 1])) break;
        int distinct = 1; /* the joined names (row k's and k+1's parts) */
        for (size_t a = 0; a < w && distinct; a++)
            for (size_t b = a + 1; b < w && distinct; b++) {
                const kl_buf *ua = &rows[k][a], *ub = &rows[k][b], *la = &rows[k + 1][a], *lb = &rows[k + 1][b];
                distinct = !(ua->len == ub->len && (!ua->len || !memcmp(ua->data, ub->data, ua->len)) &&
                             la->len == lb->len && (!la->len || !memcmp(la->data, lb->data, la->len)));
            }
        if (!distinct) break;
        d->header_rows = k + 2;
        /* for the next candidate, row k+1's empty cells take the name above them */
        for (size_t a = 0; a < w; a++)
            if (!rows[k + 1][a].len)
                kl_buf_append(&rows[k + 1][a], rows[k][a].data ? rows[k][a].data : "", rows[k][a].len);
        has_empty[k + 1] = 0;
        for (size_t a = 0; a < w; a++) has_empty[k + 1] |= !rows[k + 1][a].len;
    }
    for (int k = 0; k < n; k++) {
        for (size_t j = 0; j < width[k]; j++) kl_buf_free(&rows[k][j]);
        free(rows[k]);
    }
    kl_csv_rec_free(&r);
    if (ev) {
        if (d->header_rows > 1)
            kl_buf_printf(ev, "header: %d rows of names (a spanning header; joined with '_')\n", d->header_rows);
        else
            kl_buf_printf(ev, "header: %s\n",
                          d->header ? "the first record holds names"
                                    : "none (a value in the first record looks like data)");
    }
}

/* Decimal commas (a delimiter other than ','): the data cells that read as
 * numbers only with decimal ',' (and '.' digit groups) against those with a
 * '.' that read as numbers as they are; the first win when they are more. */
static void sniff_decimal(kl_dialect *d, const char *buf, size_t len, size_t begin, kl_buf *ev) {
    size_t dn;
    const char *dl = kl_dialect_delim(d, &dn);
    if (memchr(dl, ',', dn) || d->format != KL_FMT_CSV) return;
    kl_dialect eu = *d;
    eu.decimal = ',';
    eu.thousands = '.';
    kl_csv_rec r;
    kl_csv_rec_init(&r);
    size_t pos = begin;
    int64_t comma = 0, dot = 0, groups = 0;
    for (int k = 0; k < SNIFF_ROWS; k++) {
        kl_err e = {0};
        int rc = kl_csv_next(d, buf, len, &pos, &r, &e);
        if (rc == KL_CSV_END) break;
        if (rc || k < (d->header ? d->header_rows : 0)) continue;
        for (size_t j = 0; j < r.n; j++) {
            const char *s = r.f[j];
            size_t n = r.len[j], nn;
            char nb[128];
            double v;
            if (!n || n >= sizeof nb) continue;
            int has_c = memchr(s, ',', n) != NULL, has_d = memchr(s, '.', n) != NULL;
            if (has_d && !has_c && kl_parse_f64n(s, n, &v) == KL_OK) { dot++; continue; }
            if (has_c && kl_num_normalize(&eu, s, n, nb, sizeof nb, &nn) && kl_parse_f64n(nb, nn, &v) == KL_OK) {
                comma++;
                groups += has_d;
            }
        }
    }
    kl_csv_rec_free(&r);
    if (comma > 0 && comma > dot) {
        d->decimal = ',';
        if (groups) d->thousands = '.';
        if (ev)
            kl_buf_printf(ev,
                          "numbers: decimal comma (%lld cells read as numbers with ',' as the decimal separator%s, "
                          "%lld with '.')\n",
                          (long long)comma, groups ? " and '.' digit groups" : "", (long long)dot);
    }
}

int kl_dialect_sniff_ex(const char *buf, size_t len, kl_dialect *d, kl_buf *ev, kl_err *e) {
    kl_dialect_default(d);
    char *own = NULL;
    size_t ownn = 0;
    if (len > ((size_t)1 << 20)) len = (size_t)1 << 20; /* a sample is enough to sniff */
    d->encoding = kl_encoding_sniff(buf, len);
    if (d->encoding != KL_ENC_UTF8) {
        size_t tl = len;
        if (d->encoding == KL_ENC_UTF16LE || d->encoding == KL_ENC_UTF16BE) tl &= ~(size_t)1;
        kl_err te = {0};
        if (kl_transcode_utf8(d->encoding, buf, tl, &own, &ownn, &te) == KL_OK) { buf = own; len = ownn; }
        else d->encoding = KL_ENC_UTF8;
    }
    size_t off = 0;
    if (len >= 3 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB && (unsigned char)buf[2] == 0xBF) {
        d->bom = 1;
        off = 3;
    }
    size_t i = off;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n')) i++;
    if (i >= len) { kl_mem_free(own); return kl_err_set(e, KL_EPARSE, "empty file"); }
    if (buf[i] == '{') {
        d->format = KL_FMT_JSONL;
        d->header = 0;
        kl_mem_free(own);
        return KL_OK;
    }
    /* line terminator: CRLF, CR-only or LF, by count */
    size_t crlf = 0, cr = 0, lf = 0;
    line_counts(buf + off, len - off, &crlf, &cr, &lf);
    d->crlf = crlf > 0 && crlf >= lf;
    /* CR-only is written out; LF and CRLF stay `auto` (which reads both), so the schema keeps its text */
    if (cr > crlf + lf) { d->line_term = KL_LT_CR; d->eol = '\r'; }
    /* candidates: every delimiter x quote x escape; the best score wins,
     * earlier candidates (the common ones) on ties */
    static const char *const delims[] = {",", "\t", ";", "|", ", ", "||", "; ", " "};
    static const char quotes[] = {'"', '\'', 0};
    static const char escapes[] = {0, '\\'};
    kl_dialect best = *d, second = *d;
    sniff_score bs = {0}, ss = {0}, all[8 * 3 * 2];
    kl_dialect cands[8 * 3 * 2];
    int have = 0, nc = 0;
    for (size_t a = 0; a < sizeof delims / sizeof *delims; a++)
        for (size_t q = 0; q < sizeof quotes; q++)
            for (size_t x = 0; x < sizeof escapes; x++) {
                if (!quotes[q] && escapes[x]) continue;
                kl_dialect c = *d;
                size_t dn = strlen(delims[a]);
                c.delim = delims[a][0];
                c.delim_n = (int)dn;
                memcpy(c.delim_s, delims[a], dn + 1);
                c.quote = quotes[q];
                c.escape = escapes[x];
                sniff_score sc;
                score_dialect(&c, buf + off, len - off, &sc);
                if (sc.width < 2) sc.score *= 0.01; /* one column: only when nothing else fits */
                /* the rarer delimiters (several bytes, a space) only when nearly every record agrees:
                   a one-column file of sentences is not space-delimited */
                if ((dn > 1 || c.delim == ' ') && sc.modal * 10 < sc.rows * 9) sc.score *= 0.01;
                cands[nc] = c;
                all[nc++] = sc;
                if (!have || sc.score > bs.score * (1 + 1e-9)) { best = c; bs = sc; have = 1; }
            }
    /* the runner-up: the best candidate that reads the sample differently (a lower score); the
     * candidates that tie with the winner read it alike (their quote or escape is not exercised) */
    int ties = 0;
    for (int k = 0; k < nc; k++) {
        if (all[k].score >= bs.score * (1 - 1e-9)) { ties++; continue; }
        if (all[k].score > ss.score) { ss = all[k]; second = cands[k]; }
    }
    *d = best;
    if (d->delim_n <= 1) { d->delim_n = 0; memset(d->delim_s, 0, sizeof d->delim_s); }
    d->skip_rows = bs.skip_lines;
    /* where the header starts: after the skipped lines */
    size_t begin = off;
    for (int k = 0; k < d->skip_rows && begin < len; k++) {
        const char *nl = memchr(buf + begin, d->eol, len - begin);
        begin = nl ? (size_t)(nl - buf) + 1 : len;
    }
    if (ev) {
        kl_buf_puts(ev, "sniffed: ");
        describe(ev, d);
        kl_buf_printf(ev, ", score %.3f (%d of %d records have %d fields; %.0f%% of the cells typed)", bs.score,
                      bs.modal, bs.rows, bs.width, bs.types * 100);
        double conf = bs.score > 0 ? (bs.score - ss.score) / bs.score : 0;
        kl_buf_printf(ev, ";\nconfidence %.0f%% over the runner-up (", conf * 100);
        describe(ev, &second);
        kl_buf_printf(ev, ", score %.3f)\n", ss.score);
        if (ties > 1)
            kl_buf_printf(ev,
                          "%d candidate dialects read the sample alike (a quote or escape it does not use): the common "
                          "one is taken\n",
                          ties);
        if (d->skip_rows)
            kl_buf_printf(ev, "preamble: %d lines before the first consistent record are skipped\n", d->skip_rows);
        kl_buf_printf(ev, "line endings: %s (%zu CRLF, %zu CR, %zu LF); encoding %s%s\n",
                      d->line_term == KL_LT_CR ? "CR"
                          : d->crlf            ? "CRLF"
                                               : "LF",
                      crlf, cr, lf, kl_encoding_name(d->encoding), d->bom ? " with a BOM" : "");
    }
    sniff_header(d, buf, len, begin, ev);
    sniff_decimal(d, buf, len, begin, ev);
    kl_mem_free(own);
    return KL_OK;
}

int kl_dialect_sniff(const char *buf, size_t len, kl_dialect *d, kl_err *e) {
    return kl_dialect_sniff_ex(buf, len, d, NULL, e);
}

/* ---- header names -------------------------------------------------------------- */

int kl_csv_header_add(kl_buf **cols, size_t *nc, const kl_csv_rec *r) {
    if (r->n > *nc) {
        kl_buf *nb = realloc(*cols, r->n * sizeof *nb);
        if (!nb) return KL_ENOMEM;
        *cols = nb;
        for (size_t i = *nc; i < r->n; i++) kl_buf_init(&nb[i]);
        *nc = r->n;
    }
    for (size_t i = 0; i < r->n; i++) {
        if (!r->len[i]) continue;
        if ((*cols)[i].len) kl_buf_puts(&(*cols)[i], "_");
        kl_buf_append(&(*cols)[i], r->f[i], r->len[i]);
        if ((*cols)[i].failed) return KL_ENOMEM;
    }
    return KL_OK;
}

int kl_csv_header_names(const kl_buf *cols, size_t nc, char ***names, char ***orig) {
    char **nm = calloc(nc + 1, sizeof *nm), **og = calloc(nc + 1, sizeof *og);
    int rc = KL_OK;
    if (!nm || !og) { rc = KL_ENOMEM; goto done; }
    for (size_t i = 0; i < nc && !rc; i++) {
        char pos[32];
        snprintf(pos, sizeof pos, "column_%zu", i + 1);
        og[i] = strndup(cols[i].data ? cols[i].data : "", cols[i].len);
        const char *base = cols[i].len ? og[i] : pos;
        nm[i] = og[i] ? strdup(base) : NULL;
        if (!og[i] || !nm[i]) { rc = KL_ENOMEM; break; }
        for (int k = 2;; k++) { /* a name seen before gets the first free suffix */
            int dup = 0;
            for (size_t j = 0; j < i && !dup; j++) dup = !strcmp(nm[j], nm[i]);
            if (!dup) break;
            kl_buf b;
            kl_buf_init(&b);
            kl_buf_printf(&b, "%s_%d", base, k);
            if (b.failed) { kl_buf_free(&b); rc = KL_ENOMEM; break; }
            free(nm[i]);
            nm[i] = kl_buf_take(&b);
        }
    }
done:
    if (rc) {
        for (size_t i = 0; nm && og && i < nc; i++) { free(nm[i]); free(og[i]); }
        free(nm);
        free(og);
        nm = og = NULL;
    }
    *names = nm;
    *orig = og;
    return rc;
}
