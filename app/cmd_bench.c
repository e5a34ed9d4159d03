/* keel bench: loads an ONNX model, makes inputs (random, or from files) for a
 * batch size, warms up, then times K runs: p50/p90/p99 latency, throughput
 * and peak memory. --json prints {"p50_ms","p90_ms","p99_ms","throughput",
 * "peak_bytes", ...}. */
#include "app.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <keel/graph.h>
#include <keel/onnx.h>
#include <keel/runtime.h>

static const app_opt opts[] = {
    {"batch", 'b', 1, "B", "batch size for symbolic first dimensions (default 1)", 0},
    {"iters", 'n', 1, "K", "timed iterations (default 50)", 0},
    {"warmup", 0, 1, "W", "untimed warm-up iterations (default 5)", 0},
    {"dim", 0, 1, "NAME=V", "value of a named symbolic dimension (default 1)", 1},
    {"input", 'i', 1, "NAME=FILE", "use this tensor (.npy/.pb) instead of random data", 1},
    {"profile", 0, 0, NULL, "time per op kind and the slowest nodes over the timed runs", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec spec = {
    "bench", "keel bench MODEL [--threads N] [--batch B] [--iters K] [--warmup W] [--dim NAME=V] [--input NAME=FILE] [--profile] [--json]",
    "Benchmark an ONNX model: latency percentiles, throughput and peak memory.",
    "Symbolic first dimensions take --batch; other symbolic dimensions take\n"
    "--dim NAME=V (default 1). Float inputs are uniform random in [-1, 1),\n"
    "integer and bool inputs zero. Throughput is batch * runs per second.\n"
    "--profile times every node of the timed runs and prints the time per op\n"
    "kind (Conv and NchwcConv split into dw/1x1/kxk and strided) and the 25 slowest nodes\n"
    "(--json: a \"profile\" object with every node); the clock reads add a\n"
    "little to the latencies. KEEL_PROFILE=1 prints the op-kind table of any\n"
    "command to stderr at exit.",
    opts, KL_ARRAY_LEN(opts), 1, 1};

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p) {
    double r = p / 100.0 * (n - 1);
    int i = (int)floor(r);
    if (i >= n - 1) return v[n - 1];
    return v[i] + (v[i + 1] - v[i]) * (r - i);
}

int cmd_bench(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t batch, iters, warm;
    if ((rc = app_get_int(&a, &spec, "batch", 1, &batch)) >= 0) return rc;
    if ((rc = app_get_int(&a, &spec, "iters", 50, &iters)) >= 0) return rc;
    if ((rc = app_get_int(&a, &spec, "warmup", 5, &warm)) >= 0) return rc;
    if (batch < 1 || iters < 1 || warm < 0) return app_usage_error(&spec, "--batch and --iters must be >= 1");
    kl_err e = {0};
    kl_session *s = NULL;
    kl_tensor **in = NULL, **out = NULL;
    double *lat = NULL;
    size_t ni = 0, no = 0;
    int ret = APP_EXIT_FAIL;
    int64_t t0 = kl_time_mono_ns();
    if (kl_session_load(a.pos[0], NULL, &s, &e)) return app_fail(&e);
    double load_ms = (kl_time_mono_ns() - t0) / 1e6;
    ni = kl_session_num_inputs(s);
    no = kl_session_num_outputs(s);
    in = calloc(ni + 1, sizeof(kl_tensor *));
    out = calloc(no + 1, sizeof(kl_tensor *));
    lat = calloc((size_t)iters, sizeof(double));
    const char *vals[APP_MAX_VALUES], *dims[APP_MAX_VALUES];
    int nv = app_get_all(&a, "input", vals, APP_MAX_VALUES), nd = app_get_all(&a, "dim", dims, APP_MAX_VALUES);
    for (int i = 0; i < nv; i++) {
        const char *eq = strchr(vals[i], '=');
        char name[512];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - vals[i]) : 0, vals[i]);
        int idx = eq ? kl_session_input_index(s, name) : (ni == 1 ? 0 : -1);
        if (idx < 0) { ret = app_usage_error(&spec, "--input %s: no such input", vals[i]); goto done; }
        if (kl_onnx_tensor_read(eq ? eq + 1 : vals[i], &in[idx], &e)) { ret = app_fail(&e); goto done; }
    }
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < ni; i++) {
        if (in[i]) continue;
        const kl_value_info *vi = kl_session_input(s, i);
        int64_t d[KL_MAX_DIMS];
        for (int k = 0; k < vi->rank; k++) {
            d[k] = vi->dims[k];
            if (d[k] >= 0) continue;
            d[k] = k == 0 ? batch : 1;
            for (int j = 0; j < nd; j++) {
                const char *eq = strchr(dims[j], '=');
                if (eq && vi->dim_names[k] && (size_t)(eq - dims[j]) == strlen(vi->dim_names[k]) && !strncmp(dims[j], vi->dim_names[k], eq - dims[j]))
                    d[k] = atoll(eq + 1);
            }
        }
        kl_dtype dt = vi->dtype == KL_DTYPE_COUNT ? KL_F32 : vi->dtype;
        if (kl_tensor_new(dt, vi->rank < 0 ? 0 : vi->rank, d, KL_TAG_REQUEST, &in[i], &e)) { ret = app_fail(&e); goto done; }
        if (dt == KL_F32) {
            float *f = in[i]->data;
            for (int64_t k = 0; k < kl_tensor_numel(in[i]); k++) {
                seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
                f[k] = (float)((seed >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
            }
        }
    }
    uint64_t plan_bytes = 0;
    if (kl_session_plan_bytes(s, (const kl_tensor *const *)in, ni, &plan_bytes, &e)) { ret = app_fail(&e); goto done; }
    int prof = app_flag(&a, "profile");
    for (int64_t i = 0; i < warm + iters; i++) {
        if (prof && i == warm) {
            kl_graph_profile_reset();
            kl_graph_profile_enable(1);
        }
        int64_t t = kl_time_mono_ns();
        if (kl_session_run(s, (const kl_tensor *const *)in, ni, out, no, &e)) { ret = app_fail(&e); goto done; }
        if (i >= warm) lat[i - warm] = (kl_time_mono_ns() - t) / 1e6;
        for (size_t k = 0; k < no; k++) { kl_tensor_free(out[k]); out[k] = NULL; }
    }
    double sum = 0;
    for (int64_t i = 0; i < iters; i++) sum += lat[i];
    qsort(lat, (size_t)iters, sizeof(double), cmp_d);
    double p50 = pct(lat, (int)iters, 50), p90 = pct(lat, (int)iters, 90), p99 = pct(lat, (int)iters, 99);
    double thr = batch * 1000.0 * iters / sum;
    kl_mem_stats ms;
    kl_mem_stats_get(KL_TAG_COUNT, &ms);
    int threads = kl_pool_threads(kl_pool_default());
    kl_buf pb;
    kl_buf_init(&pb);
    if (prof) {
        kl_graph_profile_enable(0);
        if (kl_graph_profile_report(&pb, 25, app_flag(&a, "json"))) {
            kl_buf_free(&pb);
            kl_err_set(&e, KL_ENOMEM, "profile: out of memory");
            ret = app_fail(&e);
            goto done;
        }
    }
    if (app_flag(&a, "json")) {
        printf("{\"p50_ms\":%.4f,\"p90_ms\":%.4f,\"p99_ms\":%.4f,\"throughput\":%.2f,\"peak_bytes\":%llu,"
               "\"planned_activation_bytes\":%llu,\"mean_ms\":%.4f,\"load_ms\":%.1f,\"batch\":%lld,\"iters\":%lld,\"threads\":%d%s%s}\n",
               p50, p90, p99, thr, (unsigned long long)ms.peak_allocated, (unsigned long long)plan_bytes, sum / iters, load_ms,
               (long long)batch, (long long)iters, threads, prof ? ",\"profile\":" : "", prof ? pb.data : "");
    } else {
        char b1[32], b2[32];
        printf("model       %s\nbatch       %lld   threads %d   iters %lld (+%lld warm-up)   load %.1f ms\n"
               "latency     p50 %.3f ms   p90 %.3f ms   p99 %.3f ms   mean %.3f ms\n"
               "throughput  %.1f samples/s\nmemory      peak %s   planned arena %s\n",
               a.pos[0], (long long)batch, threads, (long long)iters, (long long)warm, load_ms, p50, p90, p99, sum / iters, thr,
               kl_fmt_bytes(ms.peak_allocated, b1, sizeof b1), kl_fmt_bytes(plan_bytes, b2, sizeof b2));
        if (prof) printf("\n%s", pb.data ? pb.data : "");
    }
    kl_buf_free(&pb);
    ret = APP_EXIT_OK;
done:
    for (size_t i = 0; i < ni; i++) kl_tensor_free(in[i]);
    for (size_t i = 0; i < no; i++) kl_tensor_free(out[i]);
    free(in);
    free(out);
    free(lat);
    kl_session_free(s);
    return ret;
}
