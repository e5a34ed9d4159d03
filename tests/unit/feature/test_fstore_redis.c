/* Unit tests of the Redis online store that need no server: the member
 * encoding orders events bytewise exactly as the in-memory store orders them
 * (kl__fevent_cmp: time, then the value's bits) and decodes to the same bits;
 * bad URLs are refused naming the part; a server that does not answer fails
 * in bounded time with KL_ETIMEOUT (or gives empty windows when the store is
 * set so), counted, and a lazy open does not fail. The replay against a real
 * server is feature_online_equals_offline_redis. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "../harness.h"
#include "feature/fstore_int.h"
#include "keel/feature.h"

KL_TEST(fstore_redis_encoding_orders_as_memory_store) {
    const double vals[] = {-INFINITY, -1e308, -2.5, -1.0,  -5e-324,  -0.0, 0.0,
                           5e-324,    1.0,    2.5,  1e308, INFINITY, NAN,  -NAN};
    const int64_t tss[] = {INT64_MIN, -86400000000LL, -1, 0, 1, 1700000000000000LL, INT64_MAX};
    fevent ev[KL_ARRAY_LEN(vals) * KL_ARRAY_LEN(tss)];
    size_t n = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(tss); i++)
        for (size_t j = 0; j < KL_ARRAY_LEN(vals); j++) ev[n++] = (fevent){tss[i], vals[j]};
    size_t bad = 0;
    for (size_t a = 0; a < n; a++) {
        char ka[16], kb[16];
        kl__fsr_encode(ev[a], ka);
        fevent back = kl__fsr_decode(ka);
        if (back.ts != ev[a].ts || memcmp(&back.v, &ev[a].v, 8)) bad++;
        for (size_t b = 0; b < n; b++) {
            kl__fsr_encode(ev[b], kb);
            int m = memcmp(ka, kb, 16), c = kl__fevent_cmp(&ev[a], &ev[b]);
            if ((m > 0) - (m < 0) != c) {
                if (bad++ < 3)
                    fprintf(stderr, "(%lld, %g) vs (%lld, %g): bytes %d, store %d\n", (long long)ev[a].ts, ev[a].v,
                            (long long)ev[b].ts, ev[b].v, m, c);
            }
        }
    }
    KT_EQ_INT(bad, 0);
}

static const char *SPEC = "features:\n"
                          "  - {name: price, transform: passthrough, input: p, type: float64, fill: 0}\n"
                          "  - {name: u_count, transform: window, agg: count, events: 5, entity: {column: u, type: "
                          "int64}, time: {column: ts, "
                          "type: timestamp}}\n";

static kl_features *fitted(kl_err *e) {
    kl_features *f = NULL;
    if (kl_features_spec_parse(SPEC, strlen(SPEC), "s.yaml", &f, e)) return NULL;
    return f; /* nothing to fit */
}

KL_TEST(fstore_redis_bad_urls_are_named) {
    kl_err e = {0};
    kl_features *f = fitted(&e);
    KT_CHECK(f && kl_features_is_fitted(f));
    const char *bad[] = {"redis://",
                         "HOST",
                         "redis://h:0/0",
                         "port",
                         "redis://h:99999",
                         "port",
                         "redis://h:1/x",
                         "database",
                         "redis://h:1/0?foo=1",
                         "unknown parameter 'foo'",
                         "redis://h:1/0?timeout_ms=0",
                         "timeout_ms",
                         "redis://h:1/0?timeout_ms",
                         "KEY=VALUE"};
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i += 2) {
        kl_fstore *s = NULL;
        int rc = kl_fstore_open_lazy(f, bad[i], &s, &e);
        KT_CHECKF(rc == KL_EINVAL && !s, "%s: rc %d", bad[i], rc);
        kl_fstore_free(s);
        KT_CONTAINS(kl_err_what(&e), bad[i + 1]);
    }
    KT_CHECK(kl_fstore_is_url("redis://h"));
    KT_CHECK(!kl_fstore_is_url("store.db"));
    kl_features_free(f);
}

/* a loopback port nothing listens on */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &l)) return 1;
    close(fd);
    return ntohs(a.sin_port);
}

KL_TEST(fstore_redis_unreachable_fails_fast_or_reads_empty) {
    kl_err e = {0};
    kl_features *f = fitted(&e);
    KT_CHECK(f != NULL);
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0?connect_timeout_ms=200", closed_port());
    kl_fstore *s = NULL;
    KT_CHECK(kl_fstore_open(f, url, &s, &e) == KL_ETIMEOUT && !s);
    KT_CONTAINS(kl_err_what(&e), "127.0.0.1");
    KT_OK(kl_fstore_open_lazy(f, url, &s, &e), &e);
    const char *rec = "{\"p\": 2.5, \"u\": 7, \"ts\": \"2024-01-01T00:00:00Z\"}";
    float out[2];
    int64_t t0 = kl_time_mono_ns();
    KT_CHECK(kl_features_transform_row(f, s, rec, strlen(rec), out, NULL, &e) == KL_ETIMEOUT);
    KT_CONTAINS(kl_err_what(&e), "online store redis://127.0.0.1:");
    KT_CHECK(kl_fstore_append(s, rec, strlen(rec), &e) == KL_ETIMEOUT);
    KT_CHECK(kl_fstore_ping(s, &e) == KL_ETIMEOUT);
    kl_fstore_set_on_error(s, 1);
    kl_features_counts cnt = {0};
    KT_OK(kl_features_transform_row(f, s, rec, strlen(rec), out, &cnt, &e), &e);
    KT_CHECK(out[0] == 2.5f && out[1] == 0.0f);
    KT_CHECK(kl_fstore_errors(s) == 4);
    KT_CHECK(kl_time_mono_ns() - t0 < 2000000000LL); /* refused at once; never the hang of a blocking connect */
    kl_fstore_free(s);
    kl_features_free(f);
}
