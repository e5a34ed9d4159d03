/* Run-time profile of the executor: wall time per node and per op kind
 * (Conv and keel::NchwcConv split into depthwise / 1x1 / kxk / strided), process-wide, off by
 * default (keel bench --profile turns it on; KEEL_PROFILE=1 prints the
 * per-kind table to stderr at exit). Costs two clock reads per node and one
 * mutex per node when on. */
#include "graph/graph_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const kl_gnode *node;   /* key (valid while the graph lives; only compared) */
    int index;              /* original node index */
    char kind[48];          /* op kind: "Conv dw 3x3/2", "FusedMatMul", ... */
    char name[64];          /* node name */
    char shape[64];         /* first output's shape "1x96x56x56" */
    double ms, min_ms;      /* total, fastest single call */
    long calls;
} prof_ent;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static prof_ent *ents;
static int n_ents, cap_ents;
static int on = -1;          /* -1: KEEL_PROFILE not read yet */
static int env_on;

static void print_at_exit(void) {
    kl_buf b;
    kl_buf_init(&b);
    if (kl_graph_profile_report(&b, 0, 0) == KL_OK && b.len) fputs(b.data, stderr);
    kl_buf_free(&b);
}

int kl__prof_on(void) {
    if (on < 0) {
        pthread_mutex_lock(&mu);
        if (on < 0) {
            env_on = kl_settings_get()->profile;
            if (env_on) atexit(print_at_exit);
            on = env_on;
        }
        pthread_mutex_unlock(&mu);
    }
    return on;
}

void kl_graph_profile_enable(int enable) {
    kl__prof_on();
    on = enable || env_on;
}

void kl_graph_profile_reset(void) {
    pthread_mutex_lock(&mu);
    n_ents = 0;
    pthread_mutex_unlock(&mu);
}

static void dims_str(const kl_tensor *t, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    if (!t) return;
    for (int i = 0; i < t->rank && o + 1 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "x" : "", (long long)t->dims[i]);
    if (!t->rank) snprintf(buf, len, "scalar");
}

static void kind_of(const kl_gnode *n, kl_tensor *const *in, int n_in, char *buf, size_t len) {
    int nchwc = !strcmp(n->op_type, "NchwcConv") && !strcmp(n->domain, "keel");
    if ((!strcmp(n->op_type, "Conv") || nchwc) && n_in > 1 && in[0] && in[1] && in[1]->rank == 4) {
        const kl_attr *st = kl_gnode_attr(n, "strides");
        int64_t g = kl_gnode_attr_int(n, "group", 1), s = st && st->n ? st->ints[0] : 1;
        int64_t C = in[1]->dims[1] * g; /* from the weight: a blocked input has C/16 blocks */
        const char *what = g > 1 && g == C && in[1]->dims[0] == C ? "dw " : g > 1 ? "grouped " : "";
        char sb[16] = "";
        if (s > 1) snprintf(sb, sizeof sb, "/%lld", (long long)s);
        snprintf(buf, len, "%s %s%lldx%lld%s", nchwc ? "NchwcConv" : "Conv", what, (long long)in[1]->dims[2], (long long)in[1]->dims[3], sb);
        return;
    }
    snprintf(buf, len, "%s%s%s", *n->domain && strcmp(n->domain, "keel") ? n->domain : "",
             *n->domain && strcmp(n->domain, "keel") ? "." : "", n->op_type);
}

void kl__prof_add(const kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, double ms) {
    pthread_mutex_lock(&mu);
    int i;
    for (i = n_ents - 1; i >= 0; i--) if (ents[i].node == n) break;
    if (i < 0) {
        if (n_ents == cap_ents) {
            int nc = cap_ents ? 2 * cap_ents : 256;
            prof_ent *ne = realloc(ents, sizeof(prof_ent) * (size_t)nc);
            if (!ne) { pthread_mutex_unlock(&mu); return; }
            ents = ne;
            cap_ents = nc;
        }
        i = n_ents++;
        prof_ent *p = &ents[i];
        memset(p, 0, sizeof *p);
        p->node = n;
        p->index = n->index;
        kind_of(n, in, n_in, p->kind, sizeof p->kind);
        snprintf(p->name, sizeof p->name, "%s", n->name ? n->name : "");
        dims_str(n_out > 0 ? out[0] : NULL, p->shape, sizeof p->shape);
    }
    ents[i].ms += ms;
    if (!ents[i].calls || ms < ents[i].min_ms) ents[i].min_ms = ms;
    ents[i].calls++;
    pthread_mutex_unlock(&mu);
}

static int by_ms(const void *a, const void *b) {
    const prof_ent *x = a, *y = b;
    if (x->ms != y->ms) return x->ms > y->ms ? -1 : 1;
    return x->index - y->index;
}

/* the last 32 characters of a long node name (the distinctive part) */
static const char *tail32(const char *s) {
    size_t n = strlen(s);
    return n > 32 ? s + n - 32 : s;
}

int kl_graph_profile_report(kl_buf *b, int top, int json) {
    pthread_mutex_lock(&mu);
    int n = n_ents, nk = 0, rc = KL_OK;
    prof_ent *nodes = malloc(sizeof(prof_ent) * (size_t)(n + 1)), *kinds = malloc(sizeof(prof_ent) * (size_t)(n + 1));
    if (!nodes || !kinds) {
        pthread_mutex_unlock(&mu);
        free(nodes);
        free(kinds);
        return KL_ENOMEM;
    }
    if (n) memcpy(nodes, ents, sizeof(prof_ent) * (size_t)n);
    pthread_mutex_unlock(&mu);
    double tot = 0, tot_min = 0;
    long runs = 0;
    for (int i = 0; i < n; i++) {
        tot += nodes[i].ms;
        tot_min += nodes[i].min_ms;
        if (nodes[i].calls > runs) runs = nodes[i].calls;
        int k;
        for (k = 0; k < nk; k++) if (!strcmp(kinds[k].kind, nodes[i].kind)) break;
        if (k == nk) {
            kinds[nk] = nodes[i];
            kinds[nk].ms = 0;
            kinds[nk].min_ms = 0;
            kinds[nk].calls = 0;
            kinds[nk].index = 0; /* number of nodes */
            nk++;
        }
        kinds[k].ms += nodes[i].ms;
        kinds[k].min_ms += nodes[i].min_ms; /* per run: sum of the nodes' fastest calls */
        kinds[k].calls += nodes[i].calls;
        kinds[k].index++;
    }
    qsort(nodes, (size_t)n, sizeof(prof_ent), by_ms);
    qsort(kinds, (size_t)nk, sizeof(prof_ent), by_ms);
    if (runs < 1) runs = 1;
    if (top < 0 || top > n) top = n;
    if (json) {
        rc |= kl_buf_printf(b, "{\"runs\":%ld,\"total_ms_per_run\":%.4f,\"kinds\":[", runs, tot / runs);
        for (int k = 0; k < nk; k++) {
            rc |= kl_buf_printf(b, "%s{\"kind\":", k ? "," : "");
            rc |= kl_buf_json_str(b, kinds[k].kind);
            rc |= kl_buf_printf(b, ",\"nodes\":%d,\"ms_per_run\":%.4f,\"min_ms\":%.4f,\"share\":%.4f}", kinds[k].index,
                                kinds[k].ms / runs, kinds[k].min_ms, tot > 0 ? kinds[k].ms / tot : 0);
        }
        rc |= kl_buf_puts(b, "],\"nodes\":[");
        for (int i = 0; i < n; i++) {
            rc |= kl_buf_printf(b, "%s{\"index\":%d,\"kind\":", i ? "," : "", nodes[i].index);
            rc |= kl_buf_json_str(b, nodes[i].kind);
            rc |= kl_buf_puts(b, ",\"name\":");
            rc |= kl_buf_json_str(b, nodes[i].name);
            rc |= kl_buf_puts(b, ",\"shape\":");
            rc |= kl_buf_json_str(b, nodes[i].shape);
            rc |= kl_buf_printf(b, ",\"ms_per_run\":%.4f,\"min_ms\":%.4f,\"share\":%.4f}", nodes[i].ms / nodes[i].calls,
                                nodes[i].min_ms, tot > 0 ? nodes[i].ms / tot : 0);
        }
        rc |= kl_buf_puts(b, "]}");
    } else if (n) {
        rc |= kl_buf_printf(b, "profile (%ld runs, %.3f ms per run in nodes, %.3f ms summing each node's fastest run)\n"
                            "%-28s %6s %10s %10s %7s\n", runs, tot / runs, tot_min, "op kind", "nodes", "ms/run", "min ms",
                            "share");
        for (int k = 0; k < nk; k++)
            rc |= kl_buf_printf(b, "%-28s %6d %10.3f %10.3f %6.1f%%\n", kinds[k].kind, kinds[k].index, kinds[k].ms / runs,
                                kinds[k].min_ms, tot > 0 ? 100 * kinds[k].ms / tot : 0);
        if (top) {
            rc |= kl_buf_printf(b, "\n%-6s %-20s %-20s %-32s %10s %10s %7s\n", "node", "kind", "output", "name", "ms/run",
                                "min ms", "share");
            for (int i = 0; i < top; i++)
                rc |= kl_buf_printf(b, "%-6d %-20s %-20s %-32.32s %10.4f %10.4f %6.1f%%\n", nodes[i].index, nodes[i].kind,
                                    nodes[i].shape, tail32(nodes[i].name), nodes[i].ms / nodes[i].calls,
                                    nodes[i].min_ms, tot > 0 ? 100 * nodes[i].ms / tot : 0);
        }
    }
    free(nodes);
    free(kinds);
    return rc ? KL_ENOMEM : KL_OK;
}
