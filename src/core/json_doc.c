/* The fast mode of core's JSON reader (kl_json_doc_parse; the serving
 * request path). It builds the same cJSON tree that kl_json_parse would,
 * with the same rules (a \u0000 in a string refused unless
 * KL_JSON_KEEP_NUL, always in a member name; errors at name:line:col), so
 * callers read it with the cJSON accessors,
 * but every node and string comes from one bump arena freed with one call,
 * and numbers take the exact fast path (Clinger: <= 19 significant digits,
 * |exponent| <= 22) before falling back to strtod. On the KServe MLP request
 * (784 numbers) this is several times faster than cJSON_ParseWithLength,
 * whose malloc per node and strtod per number dominated the request cost.
 * With KL_JSON_PACK (infer requests), an array of more than KL_JSON_PACK_MIN
 * numbers is not a list of nodes but one node holding a packed double array
 * (kl_json_packed reads it): the tensor data of a request is read by a
 * two-pass SIMD reader ("Packed arrays, fast path"; with AVX-512, "Packed
 * arrays, AVX-512 fast path", which also writes the FP32 values) into
 * contiguous memory; any non-number in it, or any token the grammar
 * refuses, falls back to the per-character reader and the node form so
 * that the errors still name the element.
 *
 * Memory: the arena's chunks and the packed readers' scratch (the
 * positions or values of the array being read, reused from one array to
 * the next and grown by doubling) come from the core allocator with tag
 * request, so budgets hold; a document may take at most KL_JSON_MEM_RATIO
 * times its text plus one chunk (a cJSON node is 64 bytes and a number
 * takes at least 2 bytes of text: the bound holds for any JSON), and a
 * packed array keeps only what its numbers need. */
#include "core_int.h"

#include <cjson/cJSON.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk;

struct kl_json_doc {
    chunk *head;
    cJSON *root;
    size_t used, limit; /* bytes taken from the allocator (chunks, scratch); the cap */
    int oom;            /* an allocation was refused: 1 by the allocator (budget), 2 by the cap */
    kl_err oom_err;     /* the allocator's reason */
};

/* The packed readers' scratch: one buffer per document, reused by every
 * array (a failed attempt leaves nothing behind in the arena). */
typedef struct {
    void *p;
    size_t cap; /* bytes */
} scratch;

typedef struct {
    const char *p, *end, *start;
    kl_json_doc *doc;
    int depth;
    const char *err;
    size_t err_off;
    int pack;
    int keep_nul; /* KL_JSON_KEEP_NUL: a \u0000 in a string value is kept (its length in the node) */
    scratch sc;
    struct {
        const char *key;
        int idx, obj;
    } path[66];      /* where the reader is: member names, indices */
    char where[160]; /* the path at the error: "inputs[0].data[5]" */
    char msg[160];   /* an error message with the token in it */
} parser;

#define PACKED_FLAG  (1 << 12) /* above cJSON's type bits: cJSON_IsArray still holds */
#define NUMTEXT_FLAG (1 << 13) /* a number node (KL_JSON_PACK) with its text's address in valuestring */

/* A number node that knows where its text is (NUMTEXT_FLAG; the text's
 * address in valuestring, unused by cJSON for numbers: a node stays 64
 * bytes) for kl_json_number_text: INT64 values beyond 2^53 are read again
 * from it, as doubles lose digits. */

/* One 64 KiB chunk per thread is kept between documents (a request's
 * document fits in it): no allocation of 64 KiB, and no fresh pages, per
 * request. Freed when the thread exits. */
#define CHUNK_CAP 65536
static pthread_key_t spare_key, spare_sc_key; /* a chunk; a scratch of SCRATCH_KEEP bytes */
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static void spare_init(void) {
    pthread_key_create(&spare_key, kl_mem_free);
    pthread_key_create(&spare_sc_key, kl_mem_free);
}
#define SCRATCH_KEEP 16384

/* n more bytes from the allocator for d, within its cap; 0, or -1 with d->oom set */
static int take(kl_json_doc *d, size_t n) {
    if (d->oom) return -1;
    if (n > d->limit - d->used || d->used > d->limit) {
        d->oom = 2;
        return -1;
    }
    d->used += n;
    return 0;
}

static void *alloc(kl_json_doc *d, size_t n) {
    n = (n + 7) & ~(size_t)7;
    chunk *c = d->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > CHUNK_CAP ? n : CHUNK_CAP;
        chunk *nc = NULL;
        if (cap == CHUNK_CAP) {
            pthread_once(&spare_once, spare_init);
            if ((nc = pthread_getspecific(spare_key))) pthread_setspecific(spare_key, NULL);
        }
        if (take(d, sizeof *nc + cap)) {
            if (nc) pthread_setspecific(spare_key, nc);
            return NULL;
        }
        if (!nc && !(nc = kl_mem_alloc_e(sizeof *nc + cap, KL_TAG_REQUEST, &d->oom_err))) {
            d->oom = 1;
            return NULL;
        }
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

/* The scratch of ps holding at least n bytes (its contents kept); NULL when refused */
static void *scratch_get(parser *ps, size_t n) {
    scratch *sc = &ps->sc;
    if (n <= sc->cap) return sc->p;
    size_t cap = sc->cap ? sc->cap : 4096;
    while (cap < n) cap *= 2;
    if (!sc->p && cap == SCRATCH_KEEP) { /* the thread's kept one */
        pthread_once(&spare_once, spare_init);
        void *k = pthread_getspecific(spare_sc_key);
        if (k) {
            if (take(ps->doc, cap)) return NULL;
            pthread_setspecific(spare_sc_key, NULL);
            sc->p = k;
            sc->cap = cap;
            return k;
        }
    }
    if (take(ps->doc, cap - sc->cap)) return NULL;
    void *p = kl_mem_realloc(sc->p, cap, KL_TAG_REQUEST);
    if (!p) {
        ps->doc->oom = 1;
        kl_err_set(&ps->doc->oom_err, KL_ENOMEM, "the allocator refused %zu bytes", cap);
        return NULL;
    }
    sc->p = p;
    sc->cap = cap;
    return p;
}

static cJSON *node(parser *ps, int type) {
    cJSON *n = alloc(ps->doc, sizeof *n);
    if (!n) {
        ps->err = "out of memory";
        return NULL;
    }
    *n = (cJSON){0};
    n->type = type;
    return n;
}

static int fail(parser *ps, const char *msg) {
    if (ps->err) return -1;
    ps->err = msg;
    ps->err_off = (size_t)(ps->p - ps->start);
    size_t o = 0;
    ps->where[0] = 0;
    for (int i = 1; i <= ps->depth && i < (int)KL_ARRAY_LEN(ps->path) && o < sizeof ps->where - 24; i++) {
        int k = ps->path[i].obj ? snprintf(ps->where + o, sizeof ps->where - o, "%s%.40s", o ? "." : "",
                                           ps->path[i].key ? ps->path[i].key : "?")
                                : snprintf(ps->where + o, sizeof ps->where - o, "[%d]", ps->path[i].idx);
        o += k > 0 ? (size_t)k : 0;
        if (o >= sizeof ps->where) o = sizeof ps->where - 1;
    }
    return -1;
}

/* fail() quoting the token at ps->p (a malformed number): "... in '1.e5'" */
static int fail_tok(parser *ps, const char *msg) {
    if (ps->err) return -1;
    size_t n = 0;
    while (ps->p + n < ps->end && n < 24 && !strchr(",]}[{\" \t\r\n", ps->p[n]) && ps->p[n]) n++;
    if (!n) return fail(ps, msg);
    snprintf(ps->msg, sizeof ps->msg, "%s in '%.*s'%s", msg, (int)n, ps->p, n == 24 ? "..." : "");
    return fail(ps, ps->msg);
}

static void ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number as read: the first 19 significant digits m, the power of ten
 * e10 (value = m * 10^e10) and the text (for the rare numbers that take
 * strtod/strtof). slow: more than 19 significant digits or a huge exponent. */
typedef struct {
    uint64_t m;
    const char *txt;
    int32_t e10;
    uint32_t len;
    uint8_t neg, slow;
} dec;

/* The text of a number the fast paths cannot take, NUL-terminated for the C
 * library: in tmp (256 bytes) when it fits, else from the allocator; NULL when out of
 * memory. */
static char *dec_text(const dec *x, char *tmp) {
    char *buf = x->len < 256 ? tmp : kl_mem_alloc((size_t)x->len + 1, KL_TAG_REQUEST);
    if (!buf) return NULL;
    memcpy(buf, x->txt, x->len);
    buf[x->len] = 0;
    return buf;
}
static double slow_f64(const dec *x) {
    char tmp[256], *buf = dec_text(x, tmp);
    double v = buf ? strtod(buf, NULL) : NAN;
    if (buf != tmp) kl_mem_free(buf);
    return v;
}
static float slow_f32(const dec *x) {
    char tmp[256], *buf = dec_text(x, tmp);
    float v = buf ? strtof(buf, NULL) : NAN;
    if (buf != tmp) kl_mem_free(buf);
    return v;
}

/* Exactly strtod's value: Clinger's fast path (m and 10^|e10| exact doubles,
 * one correctly rounded operation), else strtod. */
static inline __attribute__((always_inline)) double dec_f64(const dec *x) {
    if (!x->slow && x->m <= (1ull << 53) && x->e10 >= -22 && x->e10 <= 22) {
        double v = (double)x->m;
        v = x->e10 < 0 ? v / pow10_tab[-x->e10] : v * pow10_tab[x->e10];
        return x->neg ? -v : v;
    }
    return slow_f64(x);
}

/* Whether (float)d, d the correctly rounded double of a decimal x, may
 * differ from x's correctly rounded float (strtof): rounding twice goes
 * wrong only when d lands exactly on a midpoint between two floats (d's
 * low 29 of 52 fraction bits are 0x10000000: its 24th fraction bit set,
 * nothing below) while x is not that midpoint, as rounding is monotonic
 * and the midpoints are doubles. Below the normal float range the float
 * spacing is coarser: those (rare) numbers always count as hazards. */
static inline int f32_hazard(double d) {
    uint64_t b;
    memcpy(&b, &d, 8);
    uint64_t ex = (b >> 52) & 0x7ff;
    if (ex < 1023 - 126) return (b << 1) != 0; /* float subnormal or below (0 is fine) */
    return (b & 0x1fffffffu) == 0x10000000u;
}

/* A run of decimal digits at *sp (before e): m = m * 10^k + their value, *sp
 * moved past them; returns k. Byte by byte: eight bytes at a time (the run's
 * length from a bit mask, its value by three multiplies) measured 45 %
 * slower on the 784-number request, as the next number's position then
 * waits for the arithmetic instead of the predicted branch. m wraps for runs
 * over 19 digits; the caller counts those again. */
static inline int digits(const char **sp, const char *e, uint64_t *m) {
    const char *s = *sp;
    uint64_t acc = *m;
    while (s < e && (unsigned)(*s - '0') <= 9) {
        acc = acc * 10 + (uint64_t)(*s - '0');
        s++;
    }
    int n = (int)(s - *sp);
    *m = acc;
    *sp = s;
    return n;
}

/* Reads a JSON number at ps->p into x (no conversion); on a syntax error
 * the message quotes the token. */
static inline __attribute__((always_inline)) int scan_number(parser *ps, dec *x) {
    const char *s = ps->p, *e = ps->end;
    x->neg = s < e && *s == '-';
    x->slow = 0;
    s += x->neg;
    if (s >= e || (unsigned)(*s - '0') > 9) return fail_tok(ps, "expected a value");
    uint64_t m = 0;
    int nd = 0, e10 = 0;
    if (*s == '0') s++;
    else nd = digits(&s, e, &m);
    int nint = nd;
    if (s < e && *s == '.') {
        s++;
        int nf = digits(&s, e, &m);
        if (!nf) return fail_tok(ps, "expected digits after '.'");
        nd += nf;
        e10 = -nf;
    }
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        int eneg = 0, ev = 0;
        if (s < e && (*s == '+' || *s == '-')) eneg = *s++ == '-';
        if (s >= e || (unsigned)(*s - '0') > 9) return fail_tok(ps, "expected an exponent");
        while (s < e && (unsigned)(*s - '0') <= 9) {
            if (ev < 100000) ev = ev * 10 + (*s - '0');
            s++;
        }
        e10 += eneg ? -ev : ev;
    }
    if (nd > 19) {
        /* more than 19 digits: m may have wrapped; count the significant
         * ones (not the leading zeros of "0.000...") and keep the first 19 */
        const char *q = ps->p + x->neg;
        int sig = 0, dot = 0, ex2 = 0;
        m = 0;
        for (; q < s && *q != 'e' && *q != 'E'; q++) {
            if (*q == '.') {
                dot = 1;
                continue;
            }
            if (!m && *q == '0') {
                if (dot) ex2--;
                continue;
            }
            if (sig < 19) {
                m = m * 10 + (uint64_t)(*q - '0');
                sig++;
                if (dot) ex2--;
            } else {
                if (!dot) ex2++;
                if (*q != '0') x->slow = 1;
            }
        }
        e10 += ex2 + (nd - nint); /* e10 held -(fraction digits) + exponent */
    }
    x->m = m;
    x->e10 = e10;
    x->txt = ps->p;
    x->len = (uint32_t)(s - ps->p);
    if (e10 < -100000 || e10 > 100000) x->slow = 1;
    ps->p = s;
    return 0;
}

static inline __attribute__((always_inline)) int number(parser *ps, double *out) {
    dec x;
    if (scan_number(ps, &x)) return -1;
    *out = dec_f64(&x);
    return 0;
}

/* The float of the number at text s (before e) when (float) of its double
 * may not be strtof's (f32_hazard): strtof's */
static float hazard_f32(const char *s, const char *e) {
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = ps.start = s;
    ps.end = e;
    dec x;
    if (scan_number(&ps, &x)) return NAN; /* cannot happen: it was read before */
    return slow_f32(&x);
}

static int number_node(parser *ps, cJSON *n) {
    if (number(ps, &n->valuedouble)) return -1;
    n->valueint = n->valuedouble >= 2147483647.0 ? 2147483647
        : n->valuedouble <= -2147483648.0        ? (int)-2147483648.0
                                                 : (int)n->valuedouble;
    return 0;
}

/* A packed array: its numbers as doubles (exactly strtod's) and where each
 * one's text begins (FP32 values are the doubles rounded, but the rare
 * f32_hazard ones are read again from their text; checked in that pass, as
 * a branch on the divide's result in the reading loop cost 15 %). */
typedef struct {
    double *v;
    float *f; /* the values as FP32, exactly strtof's (NULL: kl_json_packed_f32 converts v) */
    uint32_t *off;
    size_t n;
    const char *text, *end;
} packed;

/* At '[': an array of only numbers, more than KL_JSON_PACK_MIN of them, as one
 * packed node; NULL (and the position unchanged) when it is anything else
 * (then the node form reads it, and its errors name the element). The
 * numbers are read into the scratch (value and text offset side by side). */
typedef struct {
    double v;
    uint32_t off;
} numpos;

static cJSON *packed_array(parser *ps) {
    const char *save = ps->p;
    size_t n = 0, cap = 0;
    numpos *np = NULL;
    if (ps->end - ps->start > UINT32_MAX) return NULL;
    ps->p++;
    for (;;) {
        ws(ps);
        if (ps->p >= ps->end || (*ps->p != '-' && (*ps->p < '0' || *ps->p > '9'))) goto other;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            if (!(np = scratch_get(ps, cap * sizeof *np))) goto other;
        }
        np[n].off = (uint32_t)(ps->p - ps->start);
        if (number(ps, &np[n].v)) goto other;
        n++;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            break;
        }
        goto other;
    }
    if (n <= KL_JSON_PACK_MIN || n > INT32_MAX) goto other;
    cJSON *a = node(ps, cJSON_Array | PACKED_FLAG);
    packed *pk = alloc(ps->doc, sizeof *pk);
    double *v = alloc(ps->doc, n * sizeof *v);
    uint32_t *off = alloc(ps->doc, n * sizeof *off);
    if (!a || !pk || !v || !off) return NULL;
    for (size_t i = 0; i < n; i++) {
        v[i] = np[i].v;
        off[i] = np[i].off;
    }
    *pk = (packed){v, NULL, off, n, ps->start, ps->end};
    a->valuestring = (char *)pk;
    a->valueint = (int)n;
    return a;
other:
    ps->p = save;
    ps->err = NULL;
    return NULL;
}

/* ------------------------------------------------------------------
 * Packed arrays, fast path (AVX2 and BMI2: the build's baseline)
 *
 * The per-character loop above spends ~25 cycles a number on the KServe
 * request: each number's end is found by a branch per digit, and the
 * varying lengths mispredict. Here the array is read in two passes. The
 * first classifies 32 bytes at a time (number characters, commas, the
 * closing bracket, blanks: two table lookups by nibble), checks that
 * numbers and commas alternate and records where each number begins and
 * ends, with no branch that depends on the numbers' lengths. The second
 * converts each number from the 16 bytes that end where it ends (so its
 * digits are already right-aligned): the integer digits moved over the
 * point by one blend, the digits summed by multiply-adds, one divide. The
 * numbers do not wait for each other, so the core overlaps them. Only the
 * plain form -?(0|[1-9][0-9]*)(.[0-9]+)? of at most 15 characters takes
 * it; other tokens (exponents, long numbers) go through scan_number, and
 * anything the JSON grammar refuses (or a non-number) gives up on the fast
 * path: the per-character path then reads the array again and its error
 * names the element. The values are the same doubles (exactly strtod's).
 * ------------------------------------------------------------------ */
/* 16 zero bytes, then 16 0xff: loadu(zo + k) is 0xff from byte 16 - k on */
static const uint8_t zo[32] = {0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,
                               255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255};

/* The plain number of len (1..15) bytes at s, which ends at e (e - 16 is
 * readable), into *out; 0 when it is not of the plain form. */
static inline __attribute__((always_inline)) int plain15(const char *s, const char *e, unsigned len, double *out) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(e - 16));
    __m128i d = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    unsigned sh = 16 - len, in = (0xffffu << sh) & 0xffffu; /* the number's bytes */
    unsigned dig = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d)) & in;
    unsigned dot = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('.'))) & in;
    unsigned neg = s[0] == '-', hasdot = dot != 0;
    int q = hasdot ? (int)_tzcnt_u32(dot) : 16; /* the point, or past the end */
    int ip = q - (int)(sh + neg);               /* integer digits */
    unsigned nd = len - neg - hasdot;           /* digits */
    /* digits everywhere but the sign and one point, a digit on both sides
     * of the point, no leading zero before another integer digit */
    int ok =
        ((dig | dot | (neg << sh)) == in) & !(dot & (dot - 1)) & (ip >= 1) & (q != 15) & ((s[neg] != '0') | (ip == 1));
    if (__builtin_expect(!ok, 0)) return 0; /* (&, not &&: one branch, not one per test) */
    /* the integer digits one byte right, over the point; only the nd digits kept */
    __m128i w = _mm_blendv_epi8(_mm_slli_si128(d, 1), d,
                                _mm_loadu_si128((const __m128i *)(const void *)(zo + (hasdot ? 15 - q : 16))));
    w = _mm_and_si128(w, _mm_loadu_si128((const __m128i *)(const void *)(zo + nd)));
    w = _mm_maddubs_epi16(w, _mm_setr_epi8(10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1));
    w = _mm_madd_epi16(w, _mm_setr_epi16(100, 1, 100, 1, 100, 1, 100, 1));
    w = _mm_packus_epi32(w, w);
    w = _mm_madd_epi16(w, _mm_setr_epi16(10000, 1, 10000, 1, 10000, 1, 10000, 1));
    /* at most 15 digits: below 2^53, so Clinger's one correctly rounded
     * divide (by 1 without a point) is exactly strtod's value */
    uint64_t m = (uint64_t)(uint32_t)_mm_cvtsi128_si32(w) * 100000000u + (uint32_t)_mm_extract_epi32(w, 1);
    double x = (double)m / pow10_tab[hasdot ? 15 - q : 0];
    uint64_t b;
    memcpy(&b, &x, 8);
    b |= (uint64_t)neg << 63; /* no branch: the signs of a tensor are random */
    memcpy(out, &b, 8);
    return 1;
}

/* The token [s, e) by the general reader (it must take the whole token)
 * into *out; -1 (nothing else changed) when it is not a JSON number. */
static int token_f64(parser *ps, const char *s, const char *e, double *out) {
    const char *at = ps->p;
    dec x;
    ps->p = s;
    int bad = scan_number(ps, &x) || ps->p != e;
    ps->p = at;
    ps->err = NULL;
    if (bad) return -1;
    *out = dec_f64(&x);
    return 0;
}

/* The start and end positions of pass 1, in the parser's scratch: room
 * for cap positions plus slack (written past the count without a branch);
 * pos_grow() doubles it, keeping the n starts and ne ends. On success the
 * starts are copied into the arena (keep_offsets): n of them, no more. */
typedef struct {
    uint32_t *st, *en;
    size_t cap, slack;
} positions;

static int pos_init(parser *ps, positions *p, size_t cap, size_t slack) {
    p->cap = cap;
    p->slack = slack;
    p->st = scratch_get(ps, 2 * (cap + slack) * sizeof *p->st);
    p->en = p->st ? p->st + cap + slack : NULL;
    return p->st ? 0 : -1;
}

static int pos_grow(parser *ps, positions *p, size_t n, size_t ne) {
    size_t cap = 2 * p->cap;
    uint32_t *b = scratch_get(ps, 2 * (cap + p->slack) * sizeof *b);
    if (!b) return -1;
    memmove(b + cap + p->slack, b + p->cap + p->slack, ne * sizeof *b); /* the ends to their new place */
    (void)n;                                                            /* the starts stay where they are */
    p->st = b;
    p->en = b + cap + p->slack;
    p->cap = cap;
    return 0;
}

/* The first n starts of the scratch, copied into the arena (what a packed node keeps) */
static uint32_t *keep_offsets(parser *ps, const uint32_t *st, size_t n) {
    uint32_t *o = alloc(ps->doc, n * sizeof *o);
    if (o) memcpy(o, st, n * sizeof *o);
    return o;
}

/* The packed node of the fast paths: n values (fl: the same as FP32, or NULL)
 * and their starts st, kept; NULL when the arena is full (ps->p back at the
 * '[' at a - 1, no error: the node form reads the array again). */
static cJSON *packed_node(parser *ps, const char *a, const uint32_t *st, size_t n, double *vals, float *fl) {
    cJSON *nd = node(ps, cJSON_Array | PACKED_FLAG);
    packed *pk = alloc(ps->doc, sizeof *pk);
    uint32_t *off = keep_offsets(ps, st, n);
    if (!nd || !pk || !off) {
        ps->p = a - 1;
        ps->err = NULL;
        return NULL;
    }
    *pk = (packed){vals, fl, off, n, ps->start, ps->end};
    nd->valuestring = (char *)pk;
    nd->valueint = (int)n;
    return nd;
}

/* Positions for a '[' at a: no more numbers than the bytes to the end / 2 + 1 */
static size_t pos_cap(const char *a, const char *end) {
    size_t most = (size_t)(end - a) / 2 + 1;
    return most < 1024 ? most : 1024;
}

/* Character classes by nibble (class = lo[c & 15] & hi[c >> 4]; bytes >=
 * 0x80 are 0): 1 digits, 2 '+' '-' '.', 4 'e' 'E' (1|2|4: number), 8 tab,
 * LF, CR, 16 space (blanks), 32 ',', 64 ']'; 0 anything else. */
static const uint8_t cls_lo[16] = {1 | 16, 1, 1, 1, 1, 1 | 4, 1, 1, 1, 1 | 8, 8, 2, 32, 2 | 8 | 64, 2, 0};
static const uint8_t cls_hi[16] = {8, 0, 2 | 16 | 32, 1, 4, 64, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0};

/* Pass 1's bookkeeping, shared by the AVX2 (32 bytes a step) and AVX-512
 * (64) readers. One step of w bytes gives the masks of other bytes, number
 * bytes, commas and ']' (bits at w and above clear); out come the bits
 * where numbers start and end. carry: the step's last byte is a number;
 * expect: the events (number starts, commas) in order, even ones numbers;
 * bad: an event out of that order. -1: another value (not a run of numbers). */
typedef struct {
    uint64_t carry, expect, bad;
} pass1;

static inline __attribute__((always_inline)) int pass1_step(pass1 *q, unsigned w, uint64_t other, uint64_t num,
                                                            uint64_t comma, uint64_t cl, uint64_t *starts,
                                                            uint64_t *ends) {
    uint64_t all = w == 64 ? ~0ull : (1ull << w) - 1;
    uint64_t lim = _blsmsk_u64(cl) & all; /* up to the ']' (all when none) */
    if (other & lim) return -1;
    num &= lim;
    comma &= lim;
    uint64_t prev = (num << 1 | q->carry) & all;
    *starts = num & ~prev;
    *ends = ~num & prev & lim;
    q->carry = num >> (w - 1);
    uint64_t ev = *starts | comma;
    q->bad |= _pdep_u64(q->expect, ev) ^ *starts; /* numbers and commas alternate */
    if (__builtin_popcountll(ev) & 1) q->expect = ~q->expect;
    return 0;
}

/* At the ']': the run is a packed array (the last event a number: a comma
 * expected next; as many ends as starts; more than KL_JSON_PACK_MIN numbers). */
static int pass1_ok(const pass1 *q, size_t n, size_t ne) {
    return !q->bad && q->expect == 0xaaaaaaaaaaaaaaaaull && ne == n && n > KL_JSON_PACK_MIN && n <= INT32_MAX;
}

/* At '[' (ps->p): an array of more than KL_JSON_PACK_MIN numbers as one packed
 * node; NULL and nothing moved when it is not one (then the
 * per-character path reads it). */
static int use512(void);
static cJSON *packed_fast512(parser *ps);

static cJSON *packed_fast(parser *ps) {
    if (use512()) return packed_fast512(ps);
    const char *a = ps->p + 1, *end = ps->end, *t = ps->start;
    if (end - t > UINT32_MAX || end - a < 64) return NULL;
    size_t n = 0, ne = 0;
    positions pos;
    if (pos_init(ps, &pos, pos_cap(a, end), 8)) return NULL;
    uint32_t *st = pos.st, *en = pos.en;
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)cls_lo));
    const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)cls_hi));
    uint32_t base = (uint32_t)(a - t);
    pass1 q = {0, 0x5555555555555555ull, 0};
    for (size_t o = 0;; o += 32) {
        __m256i v;
        if (a + o + 32 <= end) v = _mm256_loadu_si256((const __m256i *)(const void *)(a + o));
        else if (a + o < end) { /* the last bytes, padded with a byte that is no JSON */ char tmp[32];
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, a + o, (size_t)(end - a - o));
            v = _mm256_loadu_si256((const __m256i *)(void *)tmp);
        } else return NULL; /* no ']' */
        __m256i c =
            _mm256_and_si256(_mm256_shuffle_epi8(lo, v),
                             _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15))));
        __m256i z = _mm256_setzero_si256();
        uint32_t other = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(c, z));
        uint32_t num = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(c, _mm256_set1_epi8(7)), z));
        uint32_t comma = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(c, 2));
        uint32_t cl = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(c, 1));
        uint64_t st64, en64;
        if (pass1_step(&q, 32, other, num, comma, cl, &st64, &en64)) return NULL;
        uint32_t starts = (uint32_t)st64, ends = (uint32_t)en64;
        if (n + 32 > pos.cap) {
            if (pos_grow(ps, &pos, n, ne)) return NULL;
            st = pos.st;
            en = pos.en;
        }
        /* four starts and ends written whether there are or not (no branch
         * on their count), the rare rest in a loop */
        uint32_t at = base + (uint32_t)o, m = starts, me = ends;
        uint32_t *w = st + n, *we = en + ne;
        n += (uint32_t)__builtin_popcount(starts);
        ne += (uint32_t)__builtin_popcount(ends);
        for (int k = 0; k < 4; k++) {
            w[k] = at + _tzcnt_u32(m);
            we[k] = at + _tzcnt_u32(me);
            m = _blsr_u32(m);
            me = _blsr_u32(me);
        }
        for (w += 4; m; m = _blsr_u32(m)) *w++ = at + _tzcnt_u32(m);
        for (we += 4; me; me = _blsr_u32(me)) *we++ = at + _tzcnt_u32(me);
        if (cl) {
            /* the last event a number (odd count: a comma expected next) */
            if (!pass1_ok(&q, n, ne)) return NULL;
            ps->p = a + o + _tzcnt_u32(cl) + 1;
            break;
        }
    }
    double *vals = alloc(ps->doc, n * sizeof *vals);
    if (!vals) {
        ps->p = a - 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = t + st[i], *e = t + en[i];
        unsigned len = (unsigned)(e - s);
        if (__builtin_expect(len <= 15 && e - t >= 16, 1) && plain15(s, e, len, &vals[i])) continue;
        if (token_f64(ps, s, e, &vals[i])) {
            ps->p = a - 1;
            return NULL;
        }
    }
    return packed_node(ps, a, st, n, vals, NULL);
}

/* ------------------------------------------------------------------
 * Packed arrays, AVX-512 fast path (runtime dispatch: AVX-512 F, BW, VL,
 * DQ, VBMI and VBMI2; KEEL_NO_AVX512=1 or kl_json_avx512(0) force the
 * AVX2 path above)
 *
 * The same two passes, wider. Pass 1 classifies 64 bytes a step (the last
 * bytes by a masked load: nothing past the input end is read) and writes
 * the starts and ends of the numbers by compressing a byte index vector
 * (no loop over the numbers). Pass 2 reads eight numbers at once: their
 * 16-byte windows (each ending where its number ends) in two registers,
 * the plain form's checks as bit masks over the four 16-bit fields of a
 * register's byte masks, the point removed by one shift and blend, the
 * digits summed by multiply-adds, the power of ten picked from a table
 * by a permute, and eight correctly rounded divides in one instruction.
 * It writes the doubles and their floats (exactly strtof's: the double
 * rounding hazard of f32_hazard as a mask; the rare hazards read again
 * from their text). A number that is not of the plain form (exponents,
 * more than 15 characters, a malformed token) takes the per-number path
 * of the AVX2 reader: same values, same give-up on malformed tokens.
 * On the KServe MLP request: 2.6 us (was 7.4), pass 2 ~60 %; its ~250
 * instructions per eight numbers are the limit, not the divide (a
 * multiply in its place measured 3 % faster).
 * ------------------------------------------------------------------ */
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vbmi2")))

static int json_isa = -1;

static int use512(void) {
    int v = __atomic_load_n(&json_isa, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") && kl_simd_avx512_allowed();
        __atomic_store_n(&json_isa, v, __ATOMIC_RELAXED);
    }
    return v;
}

int kl_json_avx512(int on) {
    if (on >= 0) {
        __atomic_store_n(&json_isa, -1, __ATOMIC_RELAXED);
        if (on) use512();
        else __atomic_store_n(&json_isa, 0, __ATOMIC_RELAXED);
    }
    return use512();
}

static const uint8_t iota64[64] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                   32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                   48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

/* the 16-bit fields (one per number) of a register's byte masks */
#define F_NOTOP 0x7fff7fff7fff7fffull
#define F_TOP   0x8000800080008000ull

/* per field: its top bit when any bit of the field is set */
static inline uint64_t field_any(uint64_t m) { return (((m & F_NOTOP) + F_NOTOP) | m) & F_TOP; }

/* One register of four number windows (x: each 16-byte lane ends where its
 * number ends; lenb: each lane's length, 1..16, in all its bytes): the
 * lanes' digits as [m, m] (u64), in each lane's low quadword the fraction
 * digits plus 16 when negative, and in *bad a bit per lane (bits 0..3):
 * not of the plain form -?(0|[1-9][0-9]*)(.[0-9]+)? of at most 15 bytes. */
static inline __attribute__((always_inline)) T512 __m512i lanes4(__m512i x, __m512i lenb, __m512i *fq, unsigned *bad) {
    const __m512i c15 = _mm512_broadcast_i32x4(_mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    __m512i d = _mm512_sub_epi8(x, _mm512_set1_epi8('0'));
    /* the number's bytes (never a lane's byte 0: a 16-byte number is bad anyway) */
    uint64_t in = _mm512_cmpgt_epu8_mask(lenb, c15) & 0xfffefffefffefffeull;
    uint64_t dig = _mm512_mask_cmple_epu8_mask(in, d, _mm512_set1_epi8(9));
    uint64_t dot = _mm512_mask_cmpeq_epi8_mask(in, x, _mm512_set1_epi8('.'));
    uint64_t zero = _mm512_mask_cmpeq_epi8_mask(in, x, _mm512_set1_epi8('0'));
    uint64_t minus = _mm512_mask_cmpeq_epi8_mask(in, x, _mm512_set1_epi8('-'));
    /* per field, with one point: bit 15 and the bits below the point (no
     * borrow between fields: each is >= 0x8000 before the subtraction) */
    uint64_t pw = (dot | F_TOP) - 0x0001000100010001ull, hd = pw & F_TOP;
    uint64_t s = (pw | dot) & (hd - (hd >> 15)); /* the point and the bytes before it; 0 without one */
    /* (a lane's byte 0 is never in: shifts across fields bring in zeros
     * where it matters, and a point or digit at byte 15 fails anyway) */
    uint64_t dp = dig | dot, dpm = dp | minus, dr = dig >> 1;
    uint64_t b = in & ~dpm;          /* another byte */
    b |= dot & ~((dig << 1) & dr);   /* a point not between two digits */
    b |= pw & dot;                   /* two points */
    b |= minus & (~dr | (dpm << 1)); /* a sign not first or not before a digit */
    b |= zero & dr & ~(dp << 1);     /* a leading zero */
    *bad = (unsigned)_pext_u64(field_any(b), F_TOP);
    /* the digits: the integer ones one byte right, over the point */
    __m512i dz = _mm512_maskz_mov_epi8(dig, d);
    __m512i w = _mm512_mask_blend_epi8(s, dz, _mm512_bslli_epi128(dz, 1));
    w = _mm512_maddubs_epi16(w, _mm512_set1_epi16(0x010a));  /* 10, 1 */
    w = _mm512_madd_epi16(w, _mm512_set1_epi32(0x00010064)); /* 100, 1 */
    w = _mm512_packus_epi32(w, w);
    w = _mm512_madd_epi16(w, _mm512_set1_epi32(0x00012710)); /* 10000, 1 */
    /* the fraction digits (15 - the point's place) plus 16 when negative */
    __m512i f = _mm512_mask_mov_epi8(_mm512_maskz_mov_epi8(dot, c15), minus, _mm512_set1_epi8(16));
    f = _mm512_sad_epu8(f, _mm512_setzero_si512());
    *fq = _mm512_add_epi64(f, _mm512_bsrli_epi128(f, 8));
    return _mm512_add_epi64(_mm512_mul_epu32(w, _mm512_set1_epi64(100000000)), _mm512_srli_epi64(w, 32));
}

/* One number ([*st, *en) of the text t) by the AVX2 reader's per-number
 * path into *vals and *fl; -1 when it is not a JSON number. */
static int lane_slow(parser *ps, const char *t, const uint32_t *st, const uint32_t *en, double *vals, float *fl) {
    const char *s = t + *st, *e = t + *en;
    unsigned len = (unsigned)(e - s);
    if (!(len <= 15 && e - t >= 16 && plain15(s, e, len, vals)) && token_f64(ps, s, e, vals)) return -1;
    *fl = f32_hazard(*vals) ? hazard_f32(s, ps->end) : (float)*vals;
    return 0;
}

static T512 cJSON *packed_fast512(parser *ps) {
    const char *a = ps->p + 1, *end = ps->end, *t = ps->start;
    if (end - t > UINT32_MAX || end - a < 64) return NULL;
    size_t n = 0, ne = 0;
    positions pos;
    if (pos_init(ps, &pos, pos_cap(a, end), 80)) return NULL;
    uint32_t *st = pos.st, *en = pos.en;
    const __m512i lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)cls_lo));
    const __m512i hi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)cls_hi));
    const __m512i iota = _mm512_loadu_si512(iota64);
    uint32_t base = (uint32_t)(a - t);
    pass1 q = {0, 0x5555555555555555ull, 0};
    for (size_t o = 0;; o += 64) {
        __m512i v;
        if (a + o + 64 <= end) v = _mm512_loadu_si512(a + o);
        else if (a + o < end)
            v = _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, (unsigned)(end - a - o)), a + o); /* 0: no JSON */
        else return NULL;                                                                  /* no ']' */
        __m512i c =
            _mm512_and_si512(_mm512_shuffle_epi8(lo, v),
                             _mm512_shuffle_epi8(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15))));
        uint64_t other = _mm512_testn_epi8_mask(c, c);
        uint64_t num = _mm512_test_epi8_mask(c, _mm512_set1_epi8(7));
        uint64_t comma = _mm512_test_epi8_mask(c, _mm512_set1_epi8(32));
        uint64_t cl = _mm512_test_epi8_mask(c, _mm512_set1_epi8(64));
        uint64_t starts, ends;
        if (pass1_step(&q, 64, other, num, comma, cl, &starts, &ends)) return NULL;
        if (n + 64 > pos.cap) {
            if (pos_grow(ps, &pos, n, ne)) return NULL;
            st = pos.st;
            en = pos.en;
        }
        /* at most 32 starts and 32 ends in 64 bytes: 16 written always, 16 more when there are */
        __m512i at = _mm512_set1_epi32((int)(base + (uint32_t)o));
        __m512i sp = _mm512_maskz_compress_epi8(starts, iota), ep = _mm512_maskz_compress_epi8(ends, iota);
        unsigned cs = (unsigned)__builtin_popcountll(starts), ce = (unsigned)__builtin_popcountll(ends);
        _mm512_storeu_si512(st + n, _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(sp)), at));
        _mm512_storeu_si512(en + ne, _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(ep)), at));
        if (__builtin_expect(cs > 16, 0))
            _mm512_storeu_si512(st + n + 16,
                                _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sp, 1)), at));
        if (__builtin_expect(ce > 16, 0))
            _mm512_storeu_si512(en + ne + 16,
                                _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(ep, 1)), at));
        n += cs;
        ne += ce;
        if (cl) {
            /* the last event a number (odd count: a comma expected next) */
            if (!pass1_ok(&q, n, ne)) return NULL;
            ps->p = a + o + _tzcnt_u64(cl) + 1;
            break;
        }
    }
    /* pass 2: groups of eight (the last one padded with copies of the last number) */
    size_t n8 = (n + 7) & ~(size_t)7;
    for (size_t i = n; i < n8; i++) {
        st[i] = st[n - 1];
        en[i] = en[n - 1];
    }
    double *vals = alloc(ps->doc, n8 * sizeof *vals);
    float *fl = alloc(ps->doc, n8 * sizeof *fl);
    if (!vals || !fl) {
        ps->p = a - 1;
        return NULL;
    }
    const __m512i ia = _mm512_set_epi64(0x0c0c0c0c0c0c0c0cll, 0x0c0c0c0c0c0c0c0cll, 0x0808080808080808ll,
                                        0x0808080808080808ll, 0x0404040404040404ll, 0x0404040404040404ll, 0, 0);
    const __m512i ib = _mm512_add_epi8(ia, _mm512_set1_epi8(16));
    const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512d p10lo = _mm512_loadu_pd(pow10_tab), p10hi = _mm512_loadu_pd(pow10_tab + 8);
    const __m512i lo29 = _mm512_set1_epi64(0x1fffffff), mid = _mm512_set1_epi64(0x10000000);
    const char *w0 = t - 16;
    for (size_t i = 0; i < n8; i += 8) {
        if (__builtin_expect(en[i] < 16, 0)) { /* a window before the text: the general reader */
            for (int k = 0; k < 8; k++)
                if (lane_slow(ps, t, st + i + k, en + i + k, vals + i + k, fl + i + k)) {
                    ps->p = a - 1;
                    return NULL;
                }
            continue;
        }
        __m256i vlen = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(en + i)),
                                        _mm256_loadu_si256((const __m256i *)(const void *)(st + i)));
        unsigned longm = _mm256_cmpgt_epu32_mask(vlen, _mm256_set1_epi32(15));
        __m512i lens = _mm512_castsi256_si512(_mm256_min_epu32(vlen, _mm256_set1_epi32(16)));
        __m512i xa = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i])));
        xa = _mm512_inserti32x4(xa, _mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 1])), 1);
        xa = _mm512_inserti32x4(xa, _mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 2])), 2);
        xa = _mm512_inserti32x4(xa, _mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 3])), 3);
        __m512i xb = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 4])));
        xb = _mm512_inserti32x4(xb, _mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 5])), 1);
        xb = _mm512_inserti32x4(xb, _mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 6])), 2);
        xb = _mm512_inserti32x4(xb, _mm_loadu_si128((const __m128i *)(const void *)(w0 + en[i + 7])), 3);
        __m512i fa, fb;
        unsigned ba, bb;
        __m512i ma = lanes4(xa, _mm512_permutexvar_epi8(ia, lens), &fa, &ba);
        __m512i mb = lanes4(xb, _mm512_permutexvar_epi8(ib, lens), &fb, &bb);
        __m512i m = _mm512_permutex2var_epi64(ma, even, mb), f = _mm512_permutex2var_epi64(fa, even, fb);
        /* (the permute reads the index's low 4 bits: the sign's 16 is not seen) */
        __m512d x = _mm512_div_pd(_mm512_cvtepu64_pd(m), _mm512_permutex2var_pd(p10lo, f, p10hi));
        __m512i bx = _mm512_ternarylogic_epi64(_mm512_castpd_si512(x), _mm512_slli_epi64(f, 59),
                                               _mm512_set1_epi64((long long)0x8000000000000000ull),
                                               0xf8); /* x | (f<<59 & sign) */
        _mm512_storeu_si512(vals + i, bx);
        _mm256_storeu_ps(fl + i, _mm512_cvtpd_ps(_mm512_castsi512_pd(bx)));
        /* f32_hazard: a plain number of at most 15 bytes is 0 or above 1e-13, never below the floats' normal range */
        unsigned haz = _mm512_cmpeq_epi64_mask(_mm512_and_si512(bx, lo29), mid);
        unsigned slow = longm | ba | bb << 4;
        if (__builtin_expect((slow | haz) != 0, 0)) {
            for (unsigned k = slow; k; k &= k - 1)
                if (lane_slow(ps, t, st + i + __builtin_ctz(k), en + i + __builtin_ctz(k), vals + i + __builtin_ctz(k),
                              fl + i + __builtin_ctz(k))) {
                    ps->p = a - 1;
                    return NULL;
                }
            for (unsigned k = haz & ~slow; k; k &= k - 1)
                fl[i + __builtin_ctz(k)] = hazard_f32(t + st[i + __builtin_ctz(k)], end);
        }
    }
    return packed_node(ps, a, st, n, vals, fl);
}

size_t kl_json_packed_count(const cJSON *a) {
    return a && (a->type & PACKED_FLAG) ? ((const packed *)(const void *)a->valuestring)->n : 0;
}

int kl_json_packed(const cJSON *a, const double **vals, size_t *n) {
    if (!a || !(a->type & PACKED_FLAG)) return 0;
    const packed *pk = (const packed *)(const void *)a->valuestring;
    *vals = pk->v;
    *n = pk->n;
    return 1;
}

const char *kl_json_number_text(const cJSON *a, size_t i) {
    if (!a) return NULL;
    if (a->type & PACKED_FLAG) {
        const packed *pk = (const packed *)(const void *)a->valuestring;
        return i < pk->n ? pk->text + pk->off[i] : NULL;
    }
    return a->type & NUMTEXT_FLAG ? a->valuestring : NULL;
}

int kl_json_array_size(const cJSON *a) {
    return a && (a->type & PACKED_FLAG) ? (int)kl_json_packed_count(a) : cJSON_GetArraySize(a);
}

void kl_json_packed_f32(const cJSON *a, float *dst) {
    const packed *pk = (const packed *)(const void *)a->valuestring;
    if (pk->f) {
        memcpy(dst, pk->f, pk->n * sizeof *dst);
        return;
    } /* read as floats already */
    const double *v = pk->v;
    size_t i = 0, n = pk->n;
    /* four at a time: the conversions, and f32_hazard's test as a mask */
    const __m256i lo29 = _mm256_set1_epi64x(0x1fffffff), mid = _mm256_set1_epi64x(0x10000000);
    const __m256i exf = _mm256_set1_epi64x(0x7ff), exmin = _mm256_set1_epi64x(1023 - 126), z = _mm256_setzero_si256();
    for (; i + 4 <= n; i += 4) {
        __m256d d = _mm256_loadu_pd(v + i);
        _mm_storeu_ps(dst + i, _mm256_cvtpd_ps(d));
        __m256i b = _mm256_castpd_si256(d);
        __m256i h = _mm256_cmpeq_epi64(_mm256_and_si256(b, lo29), mid);
        __m256i small = _mm256_cmpgt_epi64(exmin, _mm256_and_si256(_mm256_srli_epi64(b, 52), exf));
        __m256i zero = _mm256_cmpeq_epi64(_mm256_slli_epi64(b, 1), z);
        h = _mm256_or_si256(h, _mm256_andnot_si256(zero, small));
        unsigned hm = (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(h));
        if (__builtin_expect(hm != 0, 0))
            for (; hm; hm &= hm - 1) {
                size_t k = i + (size_t)__builtin_ctz(hm);
                dst[k] = hazard_f32(pk->text + pk->off[k], pk->end);
            }
    }
    for (; i < n; i++) {
        dst[i] = (float)v[i];
        if (__builtin_expect(f32_hazard(v[i]), 0)) dst[i] = hazard_f32(pk->text + pk->off[i], pk->end);
    }
}

int kl_parse_f32(const char *s, size_t len, float *out) {
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = ps.start = s;
    ps.end = s + len;
    double d;
    if (number(&ps, &d) || ps.p != ps.end) return KL_EPARSE;
    *out = f32_hazard(d) ? hazard_f32(s, s + len) : (float)d;
    return KL_OK;
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

static char *string(parser *ps, size_t *len) {
    const char *s = ++ps->p; /* after the quote */
    const char *q = s;
    int esc = 0;
    while (q < ps->end && *q != '"') {
        if ((unsigned char)*q < 0x20) {
            ps->p = q;
            fail(ps, "control character in a string");
            return NULL;
        }
        if (*q == '\\') {
            esc = 1;
            q++;
        }
        q++;
    }
    if (q >= ps->end) {
        fail(ps, "unterminated string");
        return NULL;
    }
    char *out = alloc(ps->doc, (size_t)(q - s) + 1);
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    if (!esc) {
        memcpy(out, s, (size_t)(q - s));
        out[q - s] = 0;
        *len = (size_t)(q - s);
        ps->p = q + 1;
        return out;
    }
    char *o = out;
    for (const char *c = s; c < q; c++) {
        if (*c != '\\') {
            *o++ = *c;
            continue;
        }
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
            if (q - c < 5 || hex4(c + 1, &u)) {
                ps->p = c;
                fail(ps, "bad \\u escape");
                return NULL;
            }
            c += 4;
            if (u >= 0xd800 && u < 0xdc00 && q - c >= 7 && c[1] == '\\' && c[2] == 'u' && !hex4(c + 3, &lo) &&
                lo >= 0xdc00 && lo < 0xe000) {
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
                c += 6;
            }
            if (u < 0x80) *o++ = (char)u;
            else if (u < 0x800) {
                *o++ = (char)(0xc0 | (u >> 6));
                *o++ = (char)(0x80 | (u & 0x3f));
            } else if (u < 0x10000) {
                *o++ = (char)(0xe0 | (u >> 12));
                *o++ = (char)(0x80 | ((u >> 6) & 0x3f));
                *o++ = (char)(0x80 | (u & 0x3f));
            } else {
                *o++ = (char)(0xf0 | (u >> 18));
                *o++ = (char)(0x80 | ((u >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((u >> 6) & 0x3f));
                *o++ = (char)(0x80 | (u & 0x3f));
            }
            break;
        }
        default:
            ps->p = c;
            fail(ps, "bad escape in a string");
            return NULL;
        }
    }
    *o = 0;
    *len = (size_t)(o - out);
    if (memchr(out, 0, *len) && !ps->keep_nul) { /* as kl_json_parse: cJSON's C strings would cut it short */
        ps->p = memmem(s, (size_t)(q - s), "\\u0000", 6);
        if (!ps->p) ps->p = s;
        fail(ps, "\\u0000 (a NUL character) in a string is not supported");
        return NULL;
    }
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
    if (++ps->depth > 64) {
        fail(ps, "nested too deep");
        return NULL;
    }
    ps->path[ps->depth].obj = obj;
    ps->path[ps->depth].key = NULL;
    ps->path[ps->depth].idx = 0;
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
        ps->p++;
        ps->depth--;
        return n;
    }
    for (;;) {
        char *key = NULL;
        if (obj) {
            ws(ps);
            ps->path[ps->depth].key = NULL;
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "expected a member name");
                return NULL;
            }
            size_t klen;
            const char *at = ps->p;
            int keep = ps->keep_nul;
            ps->keep_nul = 1; /* refused below with its own message */
            key = string(ps, &klen);
            ps->keep_nul = keep;
            if (!key) return NULL;
            if (strlen(key) != klen) {
                ps->p = at;
                fail(ps, "\\u0000 (a NUL character) in a member name is not supported");
                return NULL;
            }
            ps->path[ps->depth].key = key;
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                fail(ps, "expected ':'");
                return NULL;
            }
            ps->p++;
        }
        cJSON *v = value(ps);
        if (!v) return NULL;
        v->string = key;
        if (last) {
            last->next = v;
            v->prev = last;
        } else n->child = v;
        last = v;
        n->child->prev = last; /* cJSON keeps the last item in child->prev */
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            ps->path[ps->depth].idx++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
            ps->p++;
            break;
        }
        fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        return NULL;
    }
    ps->depth--;
    return n;
}

static cJSON *value(parser *ps) {
    ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, "unexpected end of input");
        return NULL;
    }
    cJSON *n;
    switch (*ps->p) {
    case '{': return container(ps, 1);
    case '[':
        if (ps->pack && ((n = packed_fast(ps)) || (n = packed_array(ps)))) return n;
        if (ps->err) return NULL;
        return container(ps, 0);
    case '"': {
        if (!(n = node(ps, cJSON_String))) return NULL;
        size_t len;
        if (!(n->valuestring = string(ps, &len))) return NULL;
        n->type |= KL_JSON_STRLEN; /* kl_json_string_len: a \u0000 inside does not cut it */
        n->valuedouble = (double)len;
        return n;
    }
    case 't':
        if (!(n = node(ps, cJSON_True)) || lit(ps, "true")) return NULL;
        n->valueint = 1;
        return n;
    case 'f':
        if (!(n = node(ps, cJSON_False)) || lit(ps, "false")) return NULL;
        return n;
    case 'n':
        if (!(n = node(ps, cJSON_NULL)) || lit(ps, "null")) return NULL;
        return n;
    default:
        if (ps->pack) {
            if (!(n = node(ps, cJSON_Number | NUMTEXT_FLAG))) return NULL;
            n->valuestring = (char *)ps->p;
            return number_node(ps, n) ? NULL : n;
        }
        if (!(n = node(ps, cJSON_Number)) || number_node(ps, n)) return NULL;
        return n;
    }
}

int kl_json_doc_parse(const char *text, size_t len, const char *name, int flags, kl_json_doc **out, kl_err *e) {
    *out = NULL;
    kl_json_doc *d = calloc(1, sizeof *d);
    if (!d) return kl_err_set(e, KL_ENOMEM, "out of memory");
    d->limit =
        len > (SIZE_MAX - KL_JSON_MEM_BASE) / KL_JSON_MEM_RATIO ? SIZE_MAX : KL_JSON_MEM_RATIO * len + KL_JSON_MEM_BASE;
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = ps.start = text;
    ps.end = text + len;
    ps.doc = d;
    ps.pack = (flags & KL_JSON_PACK) != 0;
    ps.keep_nul = (flags & KL_JSON_KEEP_NUL) != 0;
    d->root = value(&ps);
    if (ps.sc.cap == SCRATCH_KEEP) pthread_once(&spare_once, spare_init);
    if (ps.sc.cap == SCRATCH_KEEP && !pthread_getspecific(spare_sc_key)) pthread_setspecific(spare_sc_key, ps.sc.p);
    else kl_mem_free(ps.sc.p);
    if (d->root) {
        ws(&ps);
        if (ps.p != ps.end) {
            fail(&ps, "unexpected text after the JSON value");
            d->root = NULL;
        }
    }
    if (!name) name = "JSON";
    if (!d->root && d->oom) {
        int rc = d->oom == 1
            ? kl_err_set(e, KL_ENOMEM, "%s: no memory to read its JSON (%s)", name, kl_err_what(&d->oom_err))
            : kl_err_set(e, KL_ERANGE,
                         "%s: reading its JSON would take more than %d times its %zu bytes "
                         "of memory (send tensor data flat, or with the binary extension)",
                         name, KL_JSON_MEM_RATIO, len);
        kl_json_doc_free(d);
        return rc;
    }
    if (!d->root) { /* name:line:col as kl_json_parse, and the byte and the path */
        int line = 1, col = 1;
        for (size_t i = 0; i < ps.err_off && i < len; i++) {
            if (text[i] == '\n') line++, col = 1;
            else col++;
        }
        int rc =
            kl_err_setloc(e, KL_EPARSE, name, line, col, "malformed JSON at byte %zu%s%s%s: %s", ps.err_off,
                          ps.where[0] ? " (" : "", ps.where, ps.where[0] ? ")" : "", ps.err ? ps.err : "syntax error");
        kl_json_doc_free(d);
        return rc;
    }
    *out = d;
    return KL_OK;
}

const cJSON *kl_json_doc_root(const kl_json_doc *d) { return d->root; }

void kl_json_doc_free(kl_json_doc *d) {
    if (!d) return;
    for (chunk *c = d->head, *n; c; c = n) {
        n = c->next;
        if (c->cap == CHUNK_CAP && !pthread_getspecific(spare_key)) pthread_setspecific(spare_key, c);
        else kl_mem_free(c);
    }
    free(d);
}
