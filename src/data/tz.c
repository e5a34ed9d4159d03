/* Time zones for the timestamp rule of a schema column: UTC, fixed offsets
 * ("+02:00", "UTC-8") and named IANA zones ("Europe/Berlin") read from the
 * system's compiled tzdata (TZif files, RFC 8536: the 64-bit v2+ data, and
 * the POSIX TZ footer string for times after the last transition). Converts
 * naive local times to UTC, detecting local times that do not exist (the
 * hour skipped when clocks go forward) and ones that occur twice (the hour
 * repeated when they go back). Every malformed file is an error naming it. */
#include "data_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ================================================================ POSIX TZ rules */

typedef struct {
    char kind;        /* 'J' (1..365, no Feb 29), 'n' (0..365), 'M' (month.week.day) */
    int a, b, c;      /* J/n: day; M: month, week (1..5, 5 = last), weekday (0 = Sunday) */
    int32_t time;     /* seconds after local midnight (may be negative or > 24 h) */
} tz_date;

typedef struct {
    int32_t std_off, dst_off;  /* seconds east of UTC */
    int has_dst;
    tz_date start, end;        /* start: in standard local time; end: in DST local time */
} tz_rule;

struct kl_tz {
    char *name;
    int ambiguous;             /* KL_TZ_EARLIEST, KL_TZ_LATEST, KL_TZ_REJECT */
    int64_t *trans;            /* UTC seconds of each transition, ascending */
    int32_t *trans_off;        /* offset in effect from trans[i] on */
    int ntrans;
    int32_t off0;              /* offset before the first transition (or the fixed offset) */
    int has_rule;              /* footer rule for times after the last transition */
    tz_rule rule;
};

static const char *rule_name(const char *s, const char **end) {
    if (*s == '<') {
        const char *q = strchr(s, '>');
        if (!q || q - s < 4) return NULL;
        *end = q + 1;
        return s;
    }
    const char *p = s;
    while (isalpha((unsigned char)*p)) p++;
    if (p - s < 3) return NULL;
    *end = p;
    return s;
}

/* [+-]hh[:mm[:ss]] -> seconds; hours up to 167 (RFC 8536 extension). */
static int rule_hms(const char **sp, int32_t *out) {
    const char *s = *sp;
    int neg = 0;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (!isdigit((unsigned char)*s)) return -1;
    long h = 0, m = 0, sec = 0;
    while (isdigit((unsigned char)*s)) { h = h * 10 + (*s++ - '0'); if (h > 167) return -1; }
    if (*s == ':') {
        s++;
        if (!isdigit((unsigned char)*s)) return -1;
        while (isdigit((unsigned char)*s)) { m = m * 10 + (*s++ - '0'); if (m > 59) return -1; }
        if (*s == ':') {
            s++;
            if (!isdigit((unsigned char)*s)) return -1;
            while (isdigit((unsigned char)*s)) { sec = sec * 10 + (*s++ - '0'); if (sec > 59) return -1; }
        }
    }
    *out = (int32_t)((neg ? -1 : 1) * (h * 3600 + m * 60 + sec));
    *sp = s;
    return 0;
}

static int rule_num(const char **sp, int lo, int hi, int *out) {
    const char *s = *sp;
    if (!isdigit((unsigned char)*s)) return -1;
    int v = 0;
    while (isdigit((unsigned char)*s)) { v = v * 10 + (*s++ - '0'); if (v > hi) return -1; }
    if (v < lo) return -1;
    *out = v;
    *sp = s;
    return 0;
}

static int rule_date(const char **sp, tz_date *d) {
    const char *s = *sp;
    memset(d, 0, sizeof *d);
    if (*s == 'M') {
        s++;
        d->kind = 'M';
        if (rule_num(&s, 1, 12, &d->a) || *s++ != '.' || rule_num(&s, 1, 5, &d->b) || *s++ != '.' ||
            rule_num(&s, 0, 6, &d->c))
            return -1;
    } else if (*s == 'J') {
        s++;
        d->kind = 'J';
        if (rule_num(&s, 1, 365, &d->a)) return -1;
    } else {
        d->kind = 'n';
        if (rule_num(&s, 0, 365, &d->a)) return -1;
    }
    d->time = 7200;
    if (*s == '/') {
        s++;
        if (rule_hms(&s, &d->time)) return -1;
    }
    *sp = s;
    return 0;
}

/* "CET-1CEST,M3.5.0,M10.5.0/3": note POSIX offsets count west of UTC. */
static int rule_parse(const char *s, tz_rule *r) {
    const char *p;
    memset(r, 0, sizeof *r);
    if (!rule_name(s, &p)) return -1;
    int32_t off;
    if (rule_hms(&p, &off)) return -1;
    r->std_off = -off;
    if (!*p) return 0;
    if (!rule_name(p, &p)) return -1;
    r->has_dst = 1;
    r->dst_off = r->std_off + 3600;
    if (*p && *p != ',') {
        if (rule_hms(&p, &off)) return -1;
        r->dst_off = -off;
    }
    if (*p != ',') return -1;   /* a DST name without rules: not in any tzdata footer */
    p++;
    if (rule_date(&p, &r->start) || *p++ != ',' || rule_date(&p, &r->end) || *p) return -1;
    return 0;
}

static int is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* Seconds from local midnight of Jan 1 of year y to the rule date's local time. */
static int64_t rule_date_secs(const tz_date *d, int64_t y) {
    int64_t day;
    if (d->kind == 'J') day = d->a - 1 + (is_leap(y) && d->a >= 60);
    else if (d->kind == 'n') day = d->a;
    else {
        static const int cum[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
        static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int64_t first = cum[d->a - 1] + (is_leap(y) && d->a > 2);           /* day of year of the 1st */
        int64_t wd1 = (kl_days_from_civil(y, (unsigned)d->a, 1) % 7 + 11) % 7; /* 1970-01-01 was a Thursday */
        int64_t md = (d->c - wd1 + 7) % 7;                                  /* first such weekday */
        md += 7 * (d->b - 1);
        int ndays = dim[d->a - 1] + (d->a == 2 && is_leap(y));
        while (md >= ndays) md -= 7;
        day = first + md;
    }
    return day * 86400 + d->time;
}

static int32_t rule_offset(const tz_rule *r, int64_t t) {
    if (!r->has_dst) return r->std_off;
    int64_t local_days = (t + r->std_off) / 86400 - ((t + r->std_off) % 86400 < 0);
    int yy, mm, dd;
    kl_civil_from_days(local_days, &yy, &mm, &dd);
    int64_t y0 = kl_days_from_civil(yy, 1, 1) * 86400;
    int64_t start = y0 + rule_date_secs(&r->start, yy) - r->std_off;  /* UTC */
    int64_t end = y0 + rule_date_secs(&r->end, yy) - r->dst_off;
    int dst = start < end ? (t >= start && t < end) : !(t >= end && t < start);
    return dst ? r->dst_off : r->std_off;
}

/* ================================================================ TZif */

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static int64_t be64(const unsigned char *p) { return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4)); }

static int tzif_parse(kl_tz *z, const char *path, const unsigned char *d, size_t n, kl_err *e) {
#define BAD(...) do { kl_err_set(e, KL_EPARSE, "%s: not a valid TZif file: " __VA_ARGS__); return KL_EPARSE; } while (0)
    if (n < 44 || memcmp(d, "TZif", 4)) BAD("no TZif header", path);
    int version = d[4] ? d[4] - '0' : 1;
    size_t at = 0;
    int pass = version >= 2 ? 2 : 1;
    for (int k = 1; k <= pass; k++) {
        if (at + 44 > n || memcmp(d + at, "TZif", 4)) BAD("header %d missing at byte %zu", path, k, at);
        uint32_t isut = be32(d + at + 20), isstd = be32(d + at + 24), leap = be32(d + at + 28),
                 timecnt = be32(d + at + 32), typecnt = be32(d + at + 36), charcnt = be32(d + at + 40);
        size_t ts = k == 1 ? 4 : 8;
        if (typecnt == 0 || typecnt > 256 || timecnt > 100000 || charcnt > 100000 || leap > 100000 ||
            (isut && isut != typecnt) || (isstd && isstd != typecnt))
            BAD("impossible counts in header %d", path, k);
        size_t body = timecnt * ts + timecnt + typecnt * 6 + charcnt + leap * (ts + 4) + isstd + isut;
        at += 44;
        if (at + body > n) BAD("truncated (needs %zu bytes of data after header %d)", path, body, k);
        if (k == pass) {
            const unsigned char *tt = d + at, *idx = tt + timecnt * ts, *ti = idx + timecnt;
            int32_t offs[256];
            for (uint32_t i = 0; i < typecnt; i++) {
                offs[i] = (int32_t)be32(ti + 6 * i);
                if (offs[i] < -25 * 3600 || offs[i] > 26 * 3600) BAD("UT offset %d s out of range", path, offs[i]);
            }
            z->off0 = offs[0];
            if (timecnt) {
                z->trans = malloc(timecnt * sizeof *z->trans);
                z->trans_off = malloc(timecnt * sizeof *z->trans_off);
                if (!z->trans || !z->trans_off) return kl_err_set(e, KL_ENOMEM, "out of memory");
            }
            for (uint32_t i = 0; i < timecnt; i++) {
                z->trans[i] = ts == 4 ? (int64_t)(int32_t)be32(tt + 4 * i) : be64(tt + 8 * i);
                if (idx[i] >= typecnt) BAD("transition %u names local time type %u of %u", path, i, idx[i], typecnt);
                if (i && z->trans[i] <= z->trans[i - 1]) BAD("transition times not ascending at %u", path, i);
                z->trans_off[i] = offs[idx[i]];
            }
            z->ntrans = (int)timecnt;
        }
        at += body;
    }
    if (version >= 2) {   /* footer: "\n<POSIX TZ>\n" */
        if (at >= n || d[at] != '\n') BAD("footer missing", path);
        const unsigned char *nl = memchr(d + at + 1, '\n', n - at - 1);
        if (!nl) BAD("footer not terminated", path);
        size_t len = (size_t)(nl - (d + at + 1));
        if (len) {
            char s[128];
            if (len >= sizeof s) BAD("footer longer than %zu bytes", path, sizeof s);
            memcpy(s, d + at + 1, len);
            s[len] = 0;
            if (rule_parse(s, &z->rule)) BAD("footer TZ string \"%s\" not understood", path, s);
            z->has_rule = 1;
        }
    }
    return KL_OK;
#undef BAD
}

/* ================================================================ public */

static int fixed(const char *s, int32_t *secs) {
    int m;
    if (kl_parse_tz(s, &m)) return -1;
    *secs = m * 60;
    return 0;
}

int kl_tz_load(const char *name, kl_tz **out, kl_err *e) {
    *out = NULL;
    kl_tz *z = calloc(1, sizeof *z);
    if (!z || !(z->name = strdup(name))) { free(z); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    z->ambiguous = KL_TZ_REJECT;
    int rc = KL_OK;
    char *buf = NULL;
    size_t len = 0;
    if (!fixed(name, &z->off0)) goto done;
    /* an IANA name: letters, digits, '_', '-', '+', '/' between components; no "..", not absolute */
    int okname = *name && *name != '/' && !strstr(name, "..") && strlen(name) < 128;
    for (const char *p = name; okname && *p; p++)
        okname = isalnum((unsigned char)*p) || strchr("_-+/", *p);
    if (!okname) { rc = kl_err_set(e, KL_EINVAL, "timezone \"%s\": not UTC, a fixed offset like +02:00 or an IANA zone name like Europe/Berlin", name); goto done; }
    const char *dir = getenv("TZDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
    kl_err fe = {0};
    if (kl_read_file(path, &buf, &len, &fe)) {
        rc = kl_err_set(e, KL_ENOTFOUND, "timezone \"%s\": unknown zone (no %s; the zone names are those of the tzdata package)", name, path);
        goto done;
    }
    rc = tzif_parse(z, path, (const unsigned char *)buf, len, e);
done:
    kl_mem_free(buf);
    if (rc) kl_tz_free(z);
    else *out = z;
    return rc;
}

void kl_tz_free(kl_tz *z) {
    if (!z) return;
    free(z->name);
    free(z->trans);
    free(z->trans_off);
    free(z);
}

const char *kl_tz_name(const kl_tz *z) { return z ? z->name : "UTC"; }
int kl_tz_is_fixed(const kl_tz *z) { return !z || (!z->ntrans && !z->has_rule); }
void kl_tz_set_ambiguous(kl_tz *z, int policy) { z->ambiguous = policy; }

int32_t kl_tz_offset(const kl_tz *z, int64_t t) {
    if (!z) return 0;
    if (!z->ntrans || t < z->trans[0]) return z->ntrans || !z->has_rule ? z->off0 : rule_offset(&z->rule, t);
    int lo = 0, hi = z->ntrans - 1;   /* last transition <= t */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (z->trans[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    if (lo == z->ntrans - 1 && z->has_rule) return rule_offset(&z->rule, t);
    return z->trans_off[lo];
}

int kl_tz_to_utc(const kl_tz *z, int64_t local, int64_t *utc) {
    if (!z) { *utc = local; return KL_TZ_OK; }
    if (kl_tz_is_fixed(z)) { *utc = local - z->off0; return KL_TZ_OK; }
    /* candidate offsets: those in effect a day either side (transitions are far apart) */
    int32_t cand[2] = {kl_tz_offset(z, local - 86400 - z->off0), kl_tz_offset(z, local + 86400 - z->off0)};
    int64_t hit[2];
    int nh = 0;
    for (int i = 0; i < 2; i++) {
        if (i && cand[1] == cand[0]) break;
        int64_t u = local - cand[i];
        if (kl_tz_offset(z, u) == cand[i]) hit[nh++] = u;
    }
    if (nh == 0) return KL_TZ_GAP;
    if (nh == 2) {
        if (z->ambiguous == KL_TZ_REJECT) return KL_TZ_AMBIGUOUS;
        int64_t lo = KL_MIN(hit[0], hit[1]), hi = KL_MAX(hit[0], hit[1]);
        *utc = z->ambiguous == KL_TZ_EARLIEST ? lo : hi;
        return KL_TZ_OK;
    }
    *utc = hit[0];
    return KL_TZ_OK;
}
