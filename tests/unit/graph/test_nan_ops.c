/* NaN, +-inf and -0.0 through every max/min/clip/relu/pool kernel, as ONNX
 * (NumPy's np.maximum/np.minimum/np.clip: NaN in, NaN out) defines them:
 * Relu(NaN) = NaN, Relu(-inf) = 0, Relu(inf) = inf, Clip(inf, 0, 6) = 6,
 * Max/Min/ReduceMax/ReduceMin/MaxPool/GlobalMaxPool of a NaN = NaN, ArgMax
 * of a NaN = the first NaN's index, Softmax of a row with a NaN = NaN.
 * Each op runs as a graph (the ops_*.c loops) on sizes 1, 7, 17, 33, 65 (the
 * vector bodies and scalar tails) with each special value at the first,
 * middle and last element, in f32 and f64, and the elementwise kernels and
 * fused activations directly (kl_unary_f32, kl_act_apply_f32). A small CNN
 * (conv + Relu, MaxPool, depthwise conv + Clip, 1x1 conv + Relu,
 * GlobalMaxPool; a 7x7/2 stem + MaxPool the NCHWc pass fuses) runs
 * unoptimised, optimised (fused epilogues; NCHWc where the CPU has AVX-512F)
 * and optimised with KEEL_NO_NCHWC=1, against a float64 reference: NaN
 * exactly where the reference has NaN (NaN == NaN), infinities equal,
 * finite values within 1e-3 relative (Winograd's rounding). A 3x3 conv
 * with a NaN input must not spread it beyond the outputs whose window holds
 * it (Winograd mixes a tile's 6x6 inputs: such inputs run the direct
 * kernel). tests/integration/tensor_no_avx512.sh
 * runs these again with KEEL_NO_AVX512=1 (the AVX2/OpenBLAS paths).
 * Also (same helpers): a second MaxPool after a stem conv whose first pool
 * the NCHWc pass fused stays a pool. */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double SPECIALS[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0};
static const int64_t SIZES[] = {1, 7, 17, 33, 65};

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static double drand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) * 0x1.0p-53 * 4.0 - 2.0;
}

/* a == b for the test: NaN == NaN, infinities equal, finite within tol
 * relative to max(1, |b|); -0.0 == 0.0 */
static int same(double a, double b, double tol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= tol * fmax(1.0, fabs(b));
}

/* ---- NumPy-semantics references ---- */
static double np_max(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double np_min(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }
static double np_clip(double x, double lo, double hi) { return np_min(np_max(x, lo), hi); }

typedef enum { R_RELU, R_CLIP06, R_LEAKY, R_HSIG, R_HSWISH, R_COUNT } unref;
static const char *const UN_OPS[R_COUNT] = {"Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish"};
static double un_ref(unref op, double x) {
    switch (op) {
    case R_RELU: return np_max(x, 0.0);
    case R_CLIP06: return np_clip(x, 0.0, 6.0);
    case R_LEAKY: return x < 0 ? x * (double)0.1f : x;
    case R_HSIG: return np_max(0.0, np_min(1.0, 0.2 * x + 0.5));
    case R_HSWISH: return x * np_max(0.0, np_min(1.0, x / 6.0 + 0.5));
    default: return NAN;
    }
}

/* ---- graphs ---- */

static int graph_io(kl_graph *g, const char *name, int out) {
    int v = kl_graph_value(g, name);
    int **list = out ? &g->outputs : &g->inputs, *n = out ? &g->n_outputs : &g->n_inputs;
    *list = realloc(*list, sizeof(int) * (size_t)(*n + 1));
    (*list)[(*n)++] = v;
    if (out) g->values[v].is_output = 1;
    else g->values[v].is_input = 1;
    return v;
}

static kl_graph *graph_new(void) {
    kl_graph *g;
    kl_graph_new(&g, NULL);
    g->opset = 17;
    return g;
}

static void init_f32(kl_graph *g, const char *name, int rank, const int64_t *dims, const float *data) {
    kl_tensor *t;
    kl_tensor_new(KL_F32, rank, dims, KL_TAG_PARAMS, &t, NULL);
    memcpy(t->data, data, t->nbytes);
    int v = kl_graph_value(g, name);
    g->values[v].init = t;
    g->values[v].dtype = KL_F32;
    g->values[v].rank = rank;
    memcpy(g->values[v].dims, dims, sizeof(int64_t) * (size_t)rank);
}

static int node(kl_graph *g, const char *op, const char *ins, const char *outs) {
    const char *iv[8], *ov[4];
    char ib[256], ob[256];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; iv[ni++] = s; }
    for (char *s = ob, *t; s; s = t) { t = strchr(s, ','); if (t) *t++ = 0; ov[no++] = s; }
    return kl_graph_add_node(g, op, op, iv, ni, ov, no);
}
static void attr_i(kl_graph *g, int k, const char *name, int64_t v) { kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INT)->i = v; }
static void attr_f(kl_graph *g, int k, const char *name, float v) { kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_FLOAT)->f = v; }
static void attr_ints(kl_graph *g, int k, const char *name, int n, const int64_t *v) {
    kl_attr *a = kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    a->n = n;
}

/* Runs g (finalized; optimised when opt) on inputs; outs: new tensors. */
static int run(kl_graph *g, kl_tensor **x, int n_in, kl_tensor **outs, kl_err *e) {
    kl_pool *pool = NULL;
    kl_plan *p = NULL;
    void *arena = NULL;
    int rc = kl_pool_new(2, &pool, e);
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)x, (size_t)n_in, &p, e);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc) rc = kl_plan_run(p, g, (const kl_tensor *const *)x, (size_t)n_in, outs, (size_t)g->n_outputs, arena, pool, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_pool_free(pool);
    return rc;
}

static double get(const kl_tensor *t, int64_t i) {
    return t->dtype == KL_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}
static void set(kl_tensor *t, int64_t i, double v) {
    if (t->dtype == KL_F64) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

/* x: n random values in [-2, 2) with SPECIALS[s] at position pos (s == -1:
 * every third element a special, cycling; s < -1: none) */
static void fill(kl_tensor *t, int s, int64_t pos) {
    int64_t n = kl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) set(t, i, drand());
    if (s >= 0) set(t, pos, SPECIALS[s]);
    else if (s == -1)
        for (int64_t i = 0; i < n; i += 3) set(t, i, SPECIALS[(i / 3) % 5]);
}

/* the first, middle and last element (k < *np of them, distinct) */
static int64_t position(int64_t n, int k) { return k == 0 ? 0 : k == 1 ? n / 2 : n - 1; }
static int distinct(int64_t n, int k) { return k == 0 || position(n, k) != position(n, k - 1); }

#define N_SPECIALS 5

/* Each unary op as a graph over [1, n], f32 and f64. */
KL_TEST(graph_nan_unary_ops) {
    kl_err e = {0};
    for (int op = 0; op < R_COUNT; op++)
        for (int dt = 0; dt < 2; dt++) {
            if (dt && (op == R_HSIG || op == R_HSWISH)) continue; /* f32 only in keel */
            for (size_t si = 0; si < sizeof SIZES / sizeof *SIZES; si++) {
                int64_t n = SIZES[si], d[2] = {1, n};
                kl_graph *g = graph_new();
                graph_io(g, "x", 0);
                int k;
                if (op == R_CLIP06) {
                    int64_t one = 1;
                    float lo = 0, hi = 6;
                    init_f32(g, "lo", 0, &one, &lo);
                    init_f32(g, "hi", 0, &one, &hi);
                    if (dt) { node(g, "Cast", "lo", "lo64"); attr_i(g, 0, "to", 11); node(g, "Cast", "hi", "hi64"); attr_i(g, 1, "to", 11); }
                    k = node(g, "Clip", dt ? "x,lo64,hi64" : "x,lo,hi", "y");
                } else k = node(g, UN_OPS[op], "x", "y");
                if (op == R_LEAKY) attr_f(g, k, "alpha", 0.1f);
                graph_io(g, "y", 1);
                KT_OK(kl_graph_finalize(g, &e), &e);
                kl_tensor *x;
                KT_OK(kl_tensor_new(dt ? KL_F64 : KL_F32, 2, d, KL_TAG_OTHER, &x, &e), &e);
                for (int s = -1; s < N_SPECIALS; s++)
                    for (int pk = 0; pk < 3; pk++) {
                        if (!distinct(n, pk)) continue;
                        fill(x, s, position(n, pk));
                        kl_tensor *y = NULL;
                        KT_OK(run(g, &x, 1, &y, &e), &e);
                        for (int64_t i = 0; i < n; i++) {
                            double xi = get(x, i), want = un_ref((unref)op, xi), got = get(y, i);
                            KT_CHECKF(same(got, want, dt ? 1e-12 : 1e-6), "%s %s n=%lld: f(%g) = %g, expected %g", UN_OPS[op],
                                      dt ? "f64" : "f32", (long long)n, xi, got, want);
                        }
                        kl_tensor_free(y);
                        if (s < 0) break;
                    }
                kl_tensor_free(x);
                kl_graph_free(g);
            }
        }
}

/* Max/Min of two inputs (NaN on either side), f32 and f64. */
KL_TEST(graph_nan_max_min) {
    kl_err e = {0};
    for (int mx = 0; mx < 2; mx++)
        for (int dt = 0; dt < 2; dt++)
            for (size_t si = 0; si < sizeof SIZES / sizeof *SIZES; si++) {
                int64_t n = SIZES[si], d[2] = {1, n};
                kl_graph *g = graph_new();
                graph_io(g, "a", 0);
                graph_io(g, "b", 0);
                node(g, mx ? "Max" : "Min", "a,b", "y");
                graph_io(g, "y", 1);
                KT_OK(kl_graph_finalize(g, &e), &e);
                kl_tensor *x[2];
                KT_OK(kl_tensor_new(dt ? KL_F64 : KL_F32, 2, d, KL_TAG_OTHER, &x[0], &e), &e);
                KT_OK(kl_tensor_new(dt ? KL_F64 : KL_F32, 2, d, KL_TAG_OTHER, &x[1], &e), &e);
                for (int s = 0; s < N_SPECIALS; s++)
                    for (int side = 0; side < 2; side++) {
                        fill(x[side], s, n - 1);
                        fill(x[1 - side], -1, 0);
                        kl_tensor *y = NULL;
                        KT_OK(run(g, x, 2, &y, &e), &e);
                        for (int64_t i = 0; i < n; i++) {
                            double a = get(x[0], i), b = get(x[1], i), want = mx ? np_max(a, b) : np_min(a, b);
                            KT_CHECKF(same(get(y, i), want, 0), "%s(%g, %g) = %g", mx ? "Max" : "Min", a, b, get(y, i));
                        }
                        kl_tensor_free(y);
                    }
                kl_tensor_free(x[0]);
                kl_tensor_free(x[1]);
                kl_graph_free(g);
            }
}

/* ReduceMax/ReduceMin/ArgMax/ArgMin/Softmax over the last axis (rows) and the
 * first (strided) of [R, n] / [n, R], f32 and f64. */
typedef enum { X_RMAX, X_RMIN, X_AMAX, X_AMIN, X_SOFTMAX, X_COUNT } xop;
static const char *const X_OPS[X_COUNT] = {"ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "Softmax"};

static void reduce_ref(xop op, const double *v, int64_t n, double *out) {
    int64_t best = 0;
    double m = v[0];
    for (int64_t i = 0; i < n; i++) {
        if (op == X_RMAX) m = np_max(m, v[i]);
        else if (op == X_RMIN) m = np_min(m, v[i]);
    }
    if (op == X_AMAX || op == X_AMIN) { /* numpy: the first NaN, else the first extreme */
        for (int64_t i = 0; i < n; i++) {
            if (isnan(v[i])) { best = i; break; }
            if (op == X_AMAX ? v[i] > v[best] : v[i] < v[best]) best = i;
        }
        out[0] = (double)best;
        return;
    }
    if (op == X_SOFTMAX) {
        double mx = v[0], s = 0;
        for (int64_t i = 0; i < n; i++) mx = np_max(mx, v[i]);
        if (isinf(mx) && mx < 0) mx = 0;
        for (int64_t i = 0; i < n; i++) s += exp(v[i] - mx);
        for (int64_t i = 0; i < n; i++) out[i] = exp(v[i] - mx) / s;
        return;
    }
    out[0] = m;
}

KL_TEST(graph_nan_reductions_softmax) {
    kl_err e = {0};
    enum { R = 3 };
    for (int op = 0; op < X_COUNT; op++)
        for (int dt = 0; dt < 2; dt++)
            for (int axis = 0; axis < 2; axis++)
                for (size_t si = 0; si < sizeof SIZES / sizeof *SIZES; si++) {
                    int64_t n = SIZES[si], d[2] = {axis ? R : n, axis ? n : R}; /* reduce n values along `axis` */
                    kl_graph *g = graph_new();
                    graph_io(g, "x", 0);
                    int k = node(g, X_OPS[op], "x", "y");
                    if (op == X_SOFTMAX || op == X_AMAX || op == X_AMIN) attr_i(g, k, "axis", axis);
                    else { int64_t ax = axis; attr_ints(g, k, "axes", 1, &ax); }
                    if (op != X_SOFTMAX) attr_i(g, k, "keepdims", 0);
                    graph_io(g, "y", 1);
                    KT_OK(kl_graph_finalize(g, &e), &e);
                    kl_tensor *x;
                    KT_OK(kl_tensor_new(dt ? KL_F64 : KL_F32, 2, d, KL_TAG_OTHER, &x, &e), &e);
                    for (int s = -1; s < N_SPECIALS; s++)
                        for (int pp = 0; pp < 3; pp++) {
                            if (!distinct(n, pp)) continue;
                            int64_t pos = position(n, pp);
                            fill(x, -2, 0);
                            /* the special at element pos of the second reduced line */
                            if (s >= 0) set(x, axis ? 1 * n + pos : pos * R + 1, SPECIALS[s]);
                            else
                                for (int64_t i = 0; i < n; i += 2) set(x, axis ? n + i : i * R + 1, SPECIALS[(i / 2) % 5]);
                            kl_tensor *y = NULL;
                            KT_OK(run(g, &x, 1, &y, &e), &e);
                            for (int64_t l = 0; l < R; l++) {
                                double v[65], want[65];
                                for (int64_t i = 0; i < n; i++) v[i] = get(x, axis ? l * n + i : i * R + l);
                                reduce_ref((xop)op, v, n, want);
                                int64_t nout = op == X_SOFTMAX ? n : 1;
                                for (int64_t i = 0; i < nout; i++) {
                                    int64_t yi = op == X_SOFTMAX ? (axis ? l * n + i : i * R + l) : l;
                                    double got = op == X_AMAX || op == X_AMIN ? (double)((int64_t *)y->data)[yi] : get(y, yi);
                                    KT_CHECKF(same(got, want[i], dt ? 1e-9 : 1e-5), "%s %s axis %d n=%lld special %d at %lld: line %lld [%lld] = %g, expected %g",
                                              X_OPS[op], dt ? "f64" : "f32", axis, (long long)n, s, (long long)pos, (long long)l,
                                              (long long)i, got, want[i]);
                                }
                            }
                            kl_tensor_free(y);
                            if (s < 0) break;
                        }
                    kl_tensor_free(x);
                    kl_graph_free(g);
                }
}

/* The elementwise kernel and the fused-activation entry points directly
 * (kl_unary_f32: the AVX2 bodies and the scalar tails). */
KL_TEST(tensor_nan_unary_kernels) {
    static const kl_unary_op ops[R_COUNT] = {KL_UN_RELU, KL_UN_CLIP, KL_UN_LEAKY_RELU, KL_UN_HARDSIGMOID, KL_UN_HARDSWISH};
    static const float pa[R_COUNT] = {0, 0, 0.1f, 0.2f, 0}, pb[R_COUNT] = {0, 6, 0, 0.5f, 0};
    float x[65], y[65];
    for (int op = 0; op < R_COUNT; op++)
        for (size_t si = 0; si < sizeof SIZES / sizeof *SIZES; si++) {
            int64_t n = SIZES[si];
            for (int s = 0; s < N_SPECIALS; s++)
                for (int64_t pos = 0; pos < n; pos++) {
                    for (int64_t i = 0; i < n; i++) x[i] = (float)drand();
                    x[pos] = (float)SPECIALS[s];
                    for (int f = 0; f < 2; f++) {
                        if (f == 0) kl_unary_f32(ops[op], x, y, n, pa[op], pb[op], NULL);
                        else {
                            if (op != R_RELU && op != R_CLIP06 && op != R_LEAKY) continue;
                            kl_act a = {op == R_RELU ? KL_ACT_RELU : op == R_CLIP06 ? KL_ACT_CLIP : KL_ACT_LEAKY_RELU, pa[op], pb[op]};
                            memcpy(y, x, sizeof(float) * (size_t)n);
                            kl_act_apply_f32(a, y, n, NULL);
                        }
                        for (int64_t i = 0; i < n; i++)
                            KT_CHECKF(same(y[i], un_ref((unref)op, x[i]), 1e-6), "%s %s n=%lld: f(%g) = %g, expected %g",
                                      kl_unary_name(ops[op]), f ? "act" : "unary", (long long)n, x[i], y[i], un_ref((unref)op, x[i]));
                    }
                }
        }
}

/* ---- a small CNN against a float64 reference ---- */

typedef struct { int64_t C, H, W; double *v; } img;

static img img_new(int64_t C, int64_t H, int64_t W) { return (img){C, H, W, calloc((size_t)(C * H * W), sizeof(double))}; }
#define AT(m, c, y, x) ((m).v[((c) * (m).H + (y)) * (m).W + (x)])

static img ref_conv(img x, const float *w, const float *b, int64_t M, int64_t K, int64_t S, int64_t P, int64_t groups) {
    int64_t OH = (x.H + 2 * P - K) / S + 1, OW = (x.W + 2 * P - K) / S + 1, cg = x.C / groups, mg = M / groups;
    img y = img_new(M, OH, OW);
    for (int64_t m = 0; m < M; m++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                double s = b[m];
                for (int64_t c = 0; c < cg; c++)
                    for (int64_t ky = 0; ky < K; ky++)
                        for (int64_t kx = 0; kx < K; kx++) {
                            int64_t iy = oy * S - P + ky, ix = ox * S - P + kx;
                            if (iy < 0 || iy >= x.H || ix < 0 || ix >= x.W) continue;
                            s += AT(x, (m / mg) * cg + c, iy, ix) * w[((m * cg + c) * K + ky) * K + kx];
                        }
                AT(y, m, oy, ox) = s;
            }
    return y;
}
static img ref_maxpool(img x, int64_t K, int64_t S, int64_t P) {
    int64_t OH = (x.H + 2 * P - K) / S + 1, OW = (x.W + 2 * P - K) / S + 1;
    img y = img_new(x.C, OH, OW);
    for (int64_t c = 0; c < x.C; c++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                double m = -INFINITY;
                for (int64_t ky = 0; ky < K; ky++)
                    for (int64_t kx = 0; kx < K; kx++) {
                        int64_t iy = oy * S - P + ky, ix = ox * S - P + kx;
                        if (iy >= 0 && iy < x.H && ix >= 0 && ix < x.W) m = np_max(m, AT(x, c, iy, ix));
                    }
                AT(y, c, oy, ox) = m;
            }
    return y;
}
static void ref_act(img x, double lo, double hi) {
    for (int64_t i = 0; i < x.C * x.H * x.W; i++) x.v[i] = np_clip(x.v[i], lo, hi);
}

typedef struct { const char *name; int64_t M, K, S, P, groups; int act; } convspec; /* act: 0 none, 1 relu, 2 clip 0..6 */

/* x -> convs (each with its activation, MaxPool 3x3/2 pad 1 after the
 * first when pool) -> GlobalMaxPool (gmp) -> y; ref likewise. */
static kl_graph *cnn(const convspec *cs, int nc, int pool, int gmp, int64_t C0, img *ref_x, img *ref_y, float **wts) {
    kl_graph *g = graph_new();
    graph_io(g, "x", 0);
    char prev[32] = "x";
    int64_t C = C0;
    img cur = *ref_x, owned = {0};
    for (int i = 0; i < nc; i++) {
        const convspec *c = &cs[i];
        int64_t cg = C / c->groups, wd[4] = {c->M, cg, c->K, c->K}, bd[1] = {c->M};
        int64_t nw = c->M * cg * c->K * c->K;
        float *w = wts[2 * i] = malloc(sizeof(float) * (size_t)nw), *b = wts[2 * i + 1] = malloc(sizeof(float) * (size_t)c->M);
        for (int64_t k = 0; k < nw; k++) w[k] = (float)(drand() * 0.5);
        for (int64_t k = 0; k < c->M; k++) b[k] = (float)(drand() * 0.1);
        char wn[32], bn[32], out[32], ins[128];
        snprintf(wn, sizeof wn, "%s_w", c->name);
        snprintf(bn, sizeof bn, "%s_b", c->name);
        init_f32(g, wn, 4, wd, w);
        init_f32(g, bn, 1, bd, b);
        snprintf(out, sizeof out, "%s_out", c->name);
        snprintf(ins, sizeof ins, "%s,%s,%s", prev, wn, bn);
        int k = node(g, "Conv", ins, out);
        int64_t ks[2] = {c->K, c->K}, st[2] = {c->S, c->S}, pd[4] = {c->P, c->P, c->P, c->P};
        attr_ints(g, k, "kernel_shape", 2, ks);
        attr_ints(g, k, "strides", 2, st);
        attr_ints(g, k, "pads", 4, pd);
        attr_i(g, k, "group", c->groups);
        img next = ref_conv(cur, w, b, c->M, c->K, c->S, c->P, c->groups);
        free(owned.v);
        owned = cur = next;
        snprintf(prev, sizeof prev, "%s", out);
        if (c->act) {
            snprintf(out, sizeof out, "%s_act", c->name);
            if (c->act == 1) node(g, "Relu", prev, out);
            else {
                if (kl_graph_find_value(g, "lo") < 0) {
                    int64_t one = 1;
                    float lo = 0, hi = 6;
                    init_f32(g, "lo", 0, &one, &lo);
                    init_f32(g, "hi", 0, &one, &hi);
                }
                snprintf(ins, sizeof ins, "%s,lo,hi", prev);
                node(g, "Clip", ins, out);
            }
            ref_act(cur, 0, c->act == 1 ? INFINITY : 6);
            snprintf(prev, sizeof prev, "%s", out);
        }
        if (i == 0 && pool) {
            int k2 = node(g, "MaxPool", prev, "pool_out");
            int64_t pk[2] = {3, 3}, ps[2] = {2, 2}, pp[4] = {1, 1, 1, 1};
            attr_ints(g, k2, "kernel_shape", 2, pk);
            attr_ints(g, k2, "strides", 2, ps);
            attr_ints(g, k2, "pads", 4, pp);
            img next2 = ref_maxpool(cur, 3, 2, 1);
            free(owned.v);
            owned = cur = next2;
            snprintf(prev, sizeof prev, "pool_out");
        }
        C = c->M;
    }
    if (gmp) {
        node(g, "GlobalMaxPool", prev, "y");
        img r = img_new(cur.C, 1, 1);
        for (int64_t c = 0; c < cur.C; c++) {
            double m = -INFINITY;
            for (int64_t i = 0; i < cur.H * cur.W; i++) m = np_max(m, cur.v[c * cur.H * cur.W + i]);
            r.v[c] = m;
        }
        free(owned.v);
        cur = r;
    } else node(g, "Identity", prev, "y");
    graph_io(g, "y", 1);
    *ref_y = cur;
    return g;
}

/* mode 0: not optimised; 1: optimised (NCHWc where possible); 2: optimised, KEEL_NO_NCHWC=1 */
static int prepare(kl_graph *g, int mode, kl_err *e) {
    int rc = kl_graph_finalize(g, e);
    if (rc || !mode) return rc;
    int keep = kl_settings_get()->nchwc;
    kl_settings_mut()->nchwc = mode != 2;
    rc = kl_graph_optimize(g, 1, e);
    kl_settings_mut()->nchwc = keep;
    return rc;
}

static void check_cnn(const convspec *cs, int nc, int pool, int gmp, int64_t C, int64_t H, int64_t W, const char *what) {
    kl_err e = {0};
    for (int mode = 0; mode < 3; mode++)
        for (int s = -1; s < N_SPECIALS; s++) {
            int64_t xd[4] = {1, C, H, W};
            img rx = img_new(C, H, W), ry;
            kl_tensor *x;
            KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
            rs = 0x9E3779B97F4A7C15ull + (uint64_t)s;
            fill(x, -2, 0);
            int64_t n = C * H * W;
            if (s >= 0) { set(x, n / 3, SPECIALS[s]); set(x, n - 1, SPECIALS[s]); }
            else set(x, n / 2, NAN), set(x, n / 4, INFINITY), set(x, 3 * n / 4, -INFINITY);
            for (int64_t i = 0; i < n; i++) rx.v[i] = get(x, i);
            float *wts[16] = {0};
            kl_graph *g = cnn(cs, nc, pool, gmp, C, &rx, &ry, wts);
            KT_OK(prepare(g, mode, &e), &e);
            kl_tensor *y = NULL;
            KT_OK(run(g, &x, 1, &y, &e), &e);
            int64_t ny = ry.C * ry.H * ry.W, bad = -1, nnan = 0;
            KT_EQ_INT(kl_tensor_numel(y), ny);
            for (int64_t i = 0; i < ny; i++) {
                nnan += isnan(ry.v[i]);
                if (bad < 0 && !same(get(y, i), ry.v[i], 1e-3)) bad = i;
            }
            KT_CHECKF(bad < 0, "%s mode %d special %d: y[%lld] = %g, expected %g (%lld NaN expected)", what, mode, s,
                      (long long)bad, bad < 0 ? 0 : get(y, bad), bad < 0 ? 0 : ry.v[bad], (long long)nnan);
            KT_CHECKF(s != 0 || nnan > 0, "%s: the NaN reached no output", what);
            kl_tensor_free(y);
            kl_tensor_free(x);
            kl_graph_free(g);
            free(rx.v);
            free(ry.v);
            for (int i = 0; i < 16; i++) free(wts[i]);
        }
}

KL_TEST(graph_nan_cnn_epilogues_and_pools) {
    /* 3x3 conv + Relu, MaxPool 3x3/2, depthwise 3x3 + Clip(0, 6), 1x1 + Relu, then GlobalMaxPool */
    static const convspec cs[] = {{"c1", 32, 3, 1, 1, 1, 1}, {"dw", 32, 3, 1, 1, 32, 2}, {"pw", 32, 1, 1, 0, 1, 1}};
    /* one 3x3 conv (Winograd on NCHWc for finite inputs), no activation */
    static const convspec c1[] = {{"c1", 32, 3, 1, 1, 1, 0}};
    check_cnn(c1, 1, 0, 0, 16, 9, 7, "conv 9x7");
    check_cnn(c1, 1, 0, 0, 16, 17, 33, "conv 17x33");
    check_cnn(cs, 3, 1, 1, 16, 17, 33, "cnn 17x33");
    check_cnn(cs, 3, 1, 0, 16, 9, 7, "cnn 9x7");
    /* a 7x7/2 stem + Relu + MaxPool 3x3/2 (fused into the stem by the NCHWc pass) */
    static const convspec stem[] = {{"stem", 16, 7, 2, 3, 1, 1}};
    check_cnn(stem, 1, 1, 0, 3, 33, 33, "stem 33x33");
    /* a stride-2 depthwise + Clip and a plain conv + Clip */
    static const convspec dw2[] = {{"c1", 16, 3, 1, 1, 1, 2}, {"dw2", 16, 3, 2, 1, 16, 2}};
    check_cnn(dw2, 2, 0, 1, 8, 15, 65, "dw/2 15x65");
}

/* Two max pools after a stem conv: the NCHWc pass fuses the first into the
 * conv; the second must stay a pool of the first's output (fusing it too
 * overwrote the first pool's window). */
KL_TEST(graph_nchwc_pass_second_pool_not_fused) {
    kl_err e = {0};
    kl_tensor *outs[3] = {0};
    int64_t xd[4] = {1, 3, 33, 33};
    kl_tensor *x;
    KT_OK(kl_tensor_new(KL_F32, 4, xd, KL_TAG_OTHER, &x, &e), &e);
    rs = 12345;
    fill(x, -2, 0);
    for (int mode = 0; mode < 2; mode++) {
        rs = 777;
        kl_graph *g = graph_new();
        graph_io(g, "x", 0);
        int64_t wd[4] = {16, 3, 7, 7}, bd[1] = {16};
        float w[16 * 3 * 49], b[16];
        for (int i = 0; i < 16 * 3 * 49; i++) w[i] = (float)(drand() * 0.3);
        for (int i = 0; i < 16; i++) b[i] = (float)(drand() * 0.1);
        init_f32(g, "w", 4, wd, w);
        init_f32(g, "b", 1, bd, b);
        int k = node(g, "Conv", "x,w,b", "c");
        int64_t ks[2] = {7, 7}, st[2] = {2, 2}, pd[4] = {3, 3, 3, 3};
        attr_ints(g, k, "kernel_shape", 2, ks);
        attr_ints(g, k, "strides", 2, st);
        attr_ints(g, k, "pads", 4, pd);
        node(g, "Relu", "c", "r");
        int64_t pk[2] = {3, 3}, ps[2] = {2, 2}, pp[4] = {1, 1, 1, 1}, qk[2] = {2, 2};
        k = node(g, "MaxPool", "r", "p1");
        attr_ints(g, k, "kernel_shape", 2, pk);
        attr_ints(g, k, "strides", 2, ps);
        attr_ints(g, k, "pads", 4, pp);
        k = node(g, "MaxPool", "p1", "y");
        attr_ints(g, k, "kernel_shape", 2, qk);
        attr_ints(g, k, "strides", 2, qk);
        graph_io(g, "y", 1);
        KT_OK(prepare(g, mode, &e), &e);
        KT_OK(run(g, &x, 1, &outs[mode], &e), &e);
        kl_graph_free(g);
    }
    KT_EQ_INT(kl_tensor_numel(outs[0]), kl_tensor_numel(outs[1]));
    for (int64_t i = 0; i < kl_tensor_numel(outs[0]); i++)
        KT_CHECKF(same(get(outs[1], i), get(outs[0], i), 1e-4), "y[%lld] = %g, unoptimised %g", (long long)i, get(outs[1], i), get(outs[0], i));
    kl_tensor_free(outs[0]);
    kl_tensor_free(outs[1]);
    kl_tensor_free(x);
}
