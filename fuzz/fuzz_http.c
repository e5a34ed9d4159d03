/* libFuzzer target: the HTTP request handling keel owns (src/serve/
 * http_parse.c) without sockets. The input is a request head as text: the
 * first byte picks the method, the first line is the raw request target
 * (checked by kl__sv_http_check_uri, then percent-decoded as libmicrohttpd
 * does, cut at a %00, and routed by kl__sv_route), the following lines up to an
 * empty one are headers split at the first ':' as libmicrohttpd splits
 * them (a line starting with a space or tab is an obs-fold continuation of
 * the previous header), checked by kl__sv_http_check_headers; the rest is the
 * body, whose length feeds the binary extension's
 * Inference-Header-Content-Length split (kl__sv_http_header_len) and X-Priority
 * (kl__sv_priority_parse: a 0-based level). libmicrohttpd's own parsing is not fuzzed here. */
#include "serve/serve_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int hexv(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* libmicrohttpd's unescaping: %XX decoded in place (a %00 ends the string) */
static void unescape(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '%' && hexv((unsigned char)p[1]) >= 0 && hexv((unsigned char)p[2]) >= 0) {
            *o++ = (char)(hexv((unsigned char)p[1]) * 16 + hexv((unsigned char)p[2]));
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const methods[] = {"GET", "POST", "HEAD", "PUT", "DELETE"};
    if (size < 1) return 0;
    const char *method = methods[data[0] % 5];
    char *buf = malloc(size); /* the rest, NUL-terminated */
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    char *end = buf + size - 1, *line = buf, *nl = memchr(line, '\n', (size_t)(end - line));
    if (nl) *nl = 0;
    char why[200], *target = strdup(line);
    sv_req *r = calloc(1, sizeof *r);
    if (target && r) {
        (void)kl__sv_http_check_uri(target, why, sizeof why);
        unescape(target);
        (void)kl__sv_route(target, method, r);
    }
    static sv_http_hdr h[SV_HTTP_MAX_HEADERS + 8];
    size_t nh = 0;
    char *body = end;
    for (line = nl ? nl + 1 : end; line < end;) {
        nl = memchr(line, '\n', (size_t)(end - line));
        if (nl) *nl = 0;
        char *next = nl ? nl + 1 : end;
        if (!*line) { body = next; break; } /* the empty line: the body follows */
        if ((*line == ' ' || *line == '\t') && nh) h[nh - 1].folded = 1;
        else if (nh < KL_ARRAY_LEN(h)) {
            char *colon = strchr(line, ':');
            char *v = colon ? colon + 1 : line + strlen(line);
            if (colon) *colon = 0;
            while (*v == ' ' || *v == '\t') v++;
            h[nh++] = (sv_http_hdr){line, v, 0};
        }
        line = next;
    }
    (void)kl__sv_http_check_headers(h, nh, why, sizeof why);
    size_t body_len = (size_t)(end - body), json_len = body_len;
    for (size_t i = 0; i < nh; i++) {
        int prio;
        if (!strcasecmp(h[i].key, "Inference-Header-Content-Length") &&
            !kl__sv_http_header_len(h[i].value, body_len, &json_len) && json_len > body_len)
            __builtin_trap(); /* the split stays within the body */
        if (!strcasecmp(h[i].key, "X-Priority") && !kl__sv_priority_parse(h[i].value, &prio) &&
            (prio < 0 || prio > SV_LEVEL_LOWEST))
            __builtin_trap();
    }
    free(r);
    free(target);
    free(buf);
    return 0;
}
