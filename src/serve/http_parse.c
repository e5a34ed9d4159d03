/* The parts of HTTP request handling that keel owns, as pure functions (no
 * sockets: fuzz/fuzz_http.c drives them): routing of the request path, the
 * request-target check (no control character, raw or percent-encoded), the
 * header rules against request smuggling (RFC 9112 §6.3, §5.2: one
 * Content-Length of plain digits, no Content-Length with Transfer-Encoding,
 * Transfer-Encoding only "chunked", no obs-fold, no whitespace before the
 * colon, one Host), the binary extension's Inference-Header-Content-Length
 * split and the X-Priority header. libmicrohttpd parses the bytes; http.c
 * hands these functions what it saw. */
#include "serve_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ==================================================================
 * Routing
 * ================================================================== */

/* Parses /v2/models/{m}[/versions/{v}][/ready|/infer|/events|/monitor|/feedback]. */
static int route_models(const char *p, sv_req *r, int post) {
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || n >= SV_NAME_MAX) return SV_RT_NOT_FOUND;
    memcpy(r->model_name, p, n);
    r->model_name[n] = 0;
    r->want_version = -1;
    p += n;
    if (!strncmp(p, "/versions/", 10)) {
        p += 10;
        char vb[32];
        slash = strchr(p, '/');
        n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || n >= sizeof vb) return SV_RT_NOT_FOUND;
        memcpy(vb, p, n);
        vb[n] = 0;
        if (kl_parse_int64(vb, &r->want_version) || r->want_version < 0) return SV_RT_NOT_FOUND;
        p += n;
    }
    if (!*p) { r->method_ok = !post; return SV_RT_MODEL_META; }
    if (!strcmp(p, "/ready")) { r->method_ok = !post; return SV_RT_MODEL_READY; }
    if (!strcmp(p, "/infer")) { r->method_ok = post; return SV_RT_INFER; }
    if (!strcmp(p, "/events")) {
        r->method_ok = post;
        return SV_RT_EVENTS;
    }
    if (!strcmp(p, "/monitor")) {
        r->method_ok = !post;
        return SV_RT_MONITOR;
    }
    if (!strcmp(p, "/feedback")) {
        r->method_ok = post;
        return SV_RT_FEEDBACK;
    }
    return SV_RT_NOT_FOUND;
}

int kl__sv_route(const char *url, const char *method, sv_req *r) {
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    r->method_ok = get;
    for (const unsigned char *u = (const unsigned char *)url; *u; u++)
        if (*u < 0x20 || *u == 0x7f) return SV_RT_BAD_TARGET; /* decoded from %01..%1F, %7F */
    if (!strcmp(url, "/v2/health/live")) return SV_RT_LIVE;
    if (!strcmp(url, "/v2/health/ready")) return SV_RT_READY;
    if (!strcmp(url, "/v2") || !strcmp(url, "/v2/")) return SV_RT_SERVER;
    if (!strcmp(url, "/metrics")) return SV_RT_METRICS;
    if (!strncmp(url, "/v2/models/", 11)) {
        int rt = route_models(url + 11, r, post);
        if (rt != SV_RT_INFER && !get && !post) r->method_ok = 0;
        return rt;
    }
    if (!strcmp(url, "/v2/repository/index")) { r->method_ok = post; return SV_RT_REPO_INDEX; }
    if (!strncmp(url, "/v2/repository/models/", 22)) {
        const char *p = url + 22, *slash = strrchr(p, '/');
        if (!slash || slash == p || (size_t)(slash - p) >= SV_NAME_MAX) return SV_RT_NOT_FOUND;
        memcpy(r->model_name, p, (size_t)(slash - p));
        r->model_name[slash - p] = 0;
        r->method_ok = post;
        if (!strcmp(slash, "/load")) return SV_RT_REPO_LOAD;
        if (!strcmp(slash, "/unload")) return SV_RT_REPO_UNLOAD;
        return SV_RT_NOT_FOUND;
    }
    if (!strncmp(url, "/v1/models/", 11)) {
        const char *p = url + 11, *c = strstr(p, ":predict");
        if (!c || c[8] || c == p || (size_t)(c - p) >= SV_NAME_MAX) return SV_RT_NOT_FOUND;
        memcpy(r->model_name, p, (size_t)(c - p));
        r->model_name[c - p] = 0;
        r->method_ok = post;
        return SV_RT_PREDICT;
    }
    return SV_RT_NOT_FOUND;
}

/* ==================================================================
 * Request target and headers
 * ================================================================== */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int kl__sv_http_check_uri(const char *raw, char *why, size_t n) {
    for (const unsigned char *u = (const unsigned char *)raw; *u; u++) {
        int c = *u;
        if (c == '%' && hexval(u[1]) >= 0 && hexval(u[2]) >= 0) c = hexval(u[1]) * 16 + hexval(u[2]);
        if (c < 0x21 || c == 0x7f) {
            snprintf(why, n, "request target: a control character or space (byte 0x%02x) at offset %zu%s", c,
                     (size_t)(u - (const unsigned char *)raw), *u == '%' ? " after percent-decoding" : "");
            return KL_EPARSE;
        }
    }
    return KL_OK;
}

/* RFC 9110 tchar */
static int tchar(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int bad(char *why, size_t n, const char *fmt, const char *key, const char *val) {
    snprintf(why, n, fmt, key, val ? val : "");
    return KL_EPARSE;
}

/* the headers that must come once: index in the counts of check_headers */
static const char *const once[] = {"Content-Length", "Transfer-Encoding", "Host", "Inference-Header-Content-Length",
                                   "X-Priority"};

int kl__sv_http_check_headers(const sv_http_hdr *h, size_t nh, char *why, size_t n) {
    int count[KL_ARRAY_LEN(once)] = {0};
    if (nh > SV_HTTP_MAX_HEADERS) {
        snprintf(why, n, "more than %d header lines", SV_HTTP_MAX_HEADERS);
        return KL_EPARSE;
    }
    for (size_t i = 0; i < nh; i++) {
        const char *k = h[i].key, *v = h[i].value ? h[i].value : "";
        if (h[i].folded) return bad(why, n, "header '%.60s': a line starting with a space or tab (obs-fold)", k, NULL);
        if (!*k) return bad(why, n, "a header line without a name%s", k, NULL);
        for (const char *q = k; *q; q++)
            if (!tchar((unsigned char)*q))
                return bad(why, n, *q == ' ' || *q == '\t' ? "header '%.60s': whitespace before the colon"
                                                           : "header '%.60s': a character a header name may not have",
                           k, NULL);
        for (const unsigned char *q = (const unsigned char *)v; *q; q++)
            if ((*q < 0x20 && *q != '\t') || *q == 0x7f) return bad(why, n, "header '%.60s': a control character in its value", k, NULL);
        for (size_t j = 0; j < KL_ARRAY_LEN(once); j++)
            if (!strcasecmp(k, once[j]) && ++count[j] > 1)
                return bad(why, n, "header '%.60s' given more than once", once[j], NULL);
        if (!strcasecmp(k, "Content-Length")) {
            size_t len = strlen(v);
            if (!len || len > 19 || strspn(v, "0123456789") != len)
                return bad(why, n, "header '%s': '%.40s' is not a decimal length", k, v);
        }
        if (!strcasecmp(k, "Transfer-Encoding") && strcasecmp(v, "chunked"))
            return bad(why, n, "header '%s': '%.40s' is not supported (only chunked)", k, v);
    }
    if (count[0] && count[1]) {
        snprintf(why, n, "both Content-Length and Transfer-Encoding");
        return KL_EPARSE;
    }
    return KL_OK;
}

int kl__sv_http_header_len(const char *hl, size_t body_len, size_t *json_len) {
    int64_t n;
    if (kl_parse_int64(hl, &n) || n < 0 || (uint64_t)n > body_len) return KL_EPARSE;
    *json_len = (size_t)n;
    return KL_OK;
}

int kl__sv_priority_parse(const char *s, int *level) {
    int64_t v;
    if (!strcasecmp(s, "high")) {
        *level = 0;
        return 0;
    }
    if (!strcasecmp(s, "low")) {
        *level = SV_LEVEL_LOWEST;
        return 0;
    }
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    if (kl_parse_int64(s, &v) || v < 1 || v > SV_MAX_LEVELS) return -1;
    *level = (int)v - 1;
    return 0;
}

int kl__sv_priority_number(double v, int *level) {
    if (!(v >= 1 && v <= SV_MAX_LEVELS) || v != floor(v)) return -1;
    *level = (int)v - 1;
    return 0;
}

int kl__sv_priority_level(const sv_model_cfg *c, int asked) {
    if (asked < 0) return c->default_level;
    return asked >= c->levels ? c->levels - 1 : asked;
}
