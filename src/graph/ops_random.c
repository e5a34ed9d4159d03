/* Random ops with a seed and the ai.onnx.preview.training optimizers.
 *
 * RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike,
 * Bernoulli. The generator: xoshiro256** (Blackman and Vigna), its state
 * filled by splitmix64 from the seed. With the `seed` attribute every run of
 * the node starts from that seed, so the output is a function of the seed
 * and the shape; without it each run draws a fresh seed (a process-wide
 * counter mixed with the clock). Uniform: the top 53 bits of a draw as a
 * double in [0, 1), scaled to [low, high); normal: Box-Muller on two such
 * draws; Bernoulli: 1 when a uniform draw < p. Never constant-folded.
 *
 * Adagrad, Adam, Momentum (standard and nesterov) as the ONNX reference
 * (onnx/backend/test/case/node/{adagrad,adam,momentum}.py), in double,
 * float32/float64 tensors. */
#include "graph/graph_int.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* ================================================================== *
 * The generator
 * ================================================================== */

typedef struct {
    uint64_t s[4];
} rnd_state;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rnd_next(rnd_state *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return out;
}

static double rnd_unit(rnd_state *r) { return (double)(rnd_next(r) >> 11) * 0x1.0p-53; }

static void rnd_seed(const kl_gnode *n, rnd_state *r) {
    static atomic_uint_fast64_t counter;
    const kl_attr *a = kl_gnode_attr(n, "seed");
    uint64_t x;
    if (a) {
        double s = a->type == KL_ATTR_INT ? (double)a->i : (double)a->f;
        int64_t si = (int64_t)s;
        memcpy(&x, &si, sizeof x);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
            (atomic_fetch_add(&counter, 1) * 0xD1B54A32D192ED03ull);
    }
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

/* ================================================================== *
 * Random ops
 * ================================================================== */

static int rnd_is_like(const kl_gnode *n) {
    return strstr(n->op_type, "Like") != NULL || !strcmp(n->op_type, "Bernoulli");
}

static int rnd_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out, (void)ws;
    kl_dtype dt = KL_F32;
    const kl_attr *da = kl_gnode_attr(n, "dtype");
    if (rnd_is_like(n)) dt = in[0]->dtype;
    if (da && kl_dtype_from_onnx((int)da->i, &dt))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %lld is not supported", n->opset,
                             (long long)da->i);
    int bern = !strcmp(n->op_type, "Bernoulli");
    if (!bern && dt != KL_F32 && dt != KL_F64 && dt != KL_F16 && dt != KL_BF16)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: output dtype %s (float types only)", n->opset,
                             kl_dtype_name(dt));
    if (bern && (in[0]->dtype != KL_F32 && in[0]->dtype != KL_F64 && in[0]->dtype != KL_F16))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: input dtype %s (float types only)", n->opset,
                             kl_dtype_name(in[0]->dtype));
    if (rnd_is_like(n)) {
        kl__set_shape(&out[0], dt, in[0]->rank, in[0]->dims);
        return KL_OK;
    }
    const kl_attr *sh = kl_gnode_attr(n, "shape");
    if (!sh || sh->type != KL_ATTR_INTS || sh->n > KL_MAX_DIMS)
        return kl__fail_node(e, n, KL_EINVAL, "needs the shape attribute (at most %d dims)", KL_MAX_DIMS);
    for (int i = 0; i < sh->n; i++)
        if (sh->ints[i] < 0 || sh->ints[i] > ((int64_t)1 << 40))
            return kl__fail_node(e, n, KL_EINVAL, "shape[%d] = %lld", i, (long long)sh->ints[i]);
    kl__set_shape(&out[0], dt, sh->n, sh->ints);
    return KL_OK;
}

static int rnd_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    (void)n_in, (void)n_out, (void)x, (void)e;
    rnd_state r;
    rnd_seed(n, &r);
    int64_t m = kl_tensor_numel(out[0]);
    kl_tensor *y = out[0];
    if (!strcmp(n->op_type, "Bernoulli")) {
        for (int64_t i = 0; i < m; i++) kl__set_dbl(y, i, rnd_unit(&r) < kl__dbl_at(in[0], i) ? 1.0 : 0.0);
        return KL_OK;
    }
    if (strstr(n->op_type, "Uniform")) {
        double lo = kl_gnode_attr_float(n, "low", 0.f), hi = kl_gnode_attr_float(n, "high", 1.f);
        for (int64_t i = 0; i < m; i++) kl__set_dbl(y, i, lo + (hi - lo) * rnd_unit(&r));
        return KL_OK;
    }
    double mean = kl_gnode_attr_float(n, "mean", 0.f), sc = kl_gnode_attr_float(n, "scale", 1.f);
    for (int64_t i = 0; i < m; i += 2) {
        double u1 = rnd_unit(&r), u2 = rnd_unit(&r), rad = sqrt(-2.0 * log(1.0 - u1));
        kl__set_dbl(y, i, mean + sc * rad * cos(2 * M_PI * u2));
        if (i + 1 < m) kl__set_dbl(y, i + 1, mean + sc * rad * sin(2 * M_PI * u2));
    }
    return KL_OK;
}

/* ================================================================== *
 * ai.onnx.preview.training: Adagrad, Adam, Momentum
 * inputs R, T, then n groups of tensors (X..., G..., state...); outputs
 * X_new..., state_new...
 * ================================================================== */

/* number of state tensors per X besides G: Adagrad 1 (H), Momentum 1 (V), Adam 2 (V, H) */
static int opt_states(const kl_gnode *n) { return !strcmp(n->op_type, "Adam") ? 2 : 1; }

static int opt_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)ws;
    int ns = opt_states(n), groups = 2 + ns;
    if (n_in < 2 + groups || (n_in - 2) % groups)
        return kl__fail_node(e, n, KL_EINVAL, "%d inputs: R, T, then %d groups of tensors", n_in, groups);
    int nx = (n_in - 2) / groups;
    if (n_out != nx * (1 + ns)) return kl__fail_node(e, n, KL_EINVAL, "%d outputs for %d tensors", n_out, nx);
    if (kl_tensor_numel(in[0]) != 1 || kl_tensor_numel(in[1]) != 1)
        return kl__fail_node(e, n, KL_ESHAPE, "R and T must be scalars");
    for (int i = 0; i < nx; i++) {
        const kl_tensor *X = in[2 + i];
        if (X->dtype != KL_F32 && X->dtype != KL_F64)
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %s (float32, float64)", n->opset,
                                 kl_dtype_name(X->dtype));
        for (int g = 1; g < groups; g++) {
            const kl_tensor *t = in[2 + g * nx + i];
            if (t->dtype != X->dtype || t->rank != X->rank ||
                memcmp(t->dims, X->dims, sizeof(int64_t) * (size_t)X->rank))
                return kl__fail_node(e, n, KL_ESHAPE, "tensor group %d entry %d differs from X in shape or dtype", g,
                                     i);
        }
        for (int s = 0; s <= ns; s++) kl__set_shape(&out[s * nx + i], X->dtype, X->rank, X->dims);
    }
    return KL_OK;
}

static int opt_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    (void)n_out, (void)x, (void)e;
    int ns = opt_states(n), nx = (n_in - 2) / (2 + ns);
    double R = kl__dbl_at(in[0], 0), T = (double)kl__int_at(in[1], 0);
    double nc = kl_gnode_attr_float(n, "norm_coefficient", 0.f);
    for (int i = 0; i < nx; i++) {
        const kl_tensor *X = in[2 + i], *G = in[2 + nx + i], *S1 = in[2 + 2 * nx + i],
                        *S2 = ns > 1 ? in[2 + 3 * nx + i] : NULL;
        kl_tensor *Xn = out[i], *S1n = out[nx + i], *S2n = ns > 1 ? out[2 * nx + i] : NULL;
        int64_t m = kl_tensor_numel(X);
        for (int64_t k = 0; k < m; k++) {
            double xv = kl__dbl_at(X, k), g = nc * xv + kl__dbl_at(G, k), s1 = kl__dbl_at(S1, k);
            if (!strcmp(n->op_type, "Adagrad")) {
                double r = R / (1 + T * kl_gnode_attr_float(n, "decay_factor", 0.f)), h = s1 + g * g;
                kl__set_dbl(Xn, k, xv - r * g / (sqrt(h) + kl_gnode_attr_float(n, "epsilon", 1e-6f)));
                kl__set_dbl(S1n, k, h);
            } else if (!strcmp(n->op_type, "Momentum")) {
                double al = kl_gnode_attr_float(n, "alpha", 0.f),
                       be = T > 0 ? kl_gnode_attr_float(n, "beta", 0.f) : 1.0;
                double v = al * s1 + be * g;
                int nest = !strcmp(kl_gnode_attr_str(n, "mode", "standard"), "nesterov");
                kl__set_dbl(Xn, k, nest ? xv - R * (g + al * v) : xv - R * v);
                kl__set_dbl(S1n, k, v);
            } else {
                double al = kl_gnode_attr_float(n, "alpha", 0.9f), be = kl_gnode_attr_float(n, "beta", 0.999f);
                double v = al * s1 + (1 - al) * g, h = be * kl__dbl_at(S2, k) + (1 - be) * g * g;
                double r = T > 0 ? R * sqrt(1 - pow(be, T)) / (1 - pow(al, T)) : R;
                double xn = xv - r * (v / (sqrt(h) + kl_gnode_attr_float(n, "epsilon", 1e-6f)));
                kl__set_dbl(Xn, k, (1 - kl_gnode_attr_float(n, "norm_coefficient_post", 0.f)) * xn);
                kl__set_dbl(S1n, k, v);
                kl__set_dbl(S2n, k, h);
            }
        }
    }
    return KL_OK;
}

static int opt_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    (void)g;
    if (!strcmp(n->op_type, "Momentum")) {
        const char *m = kl_gnode_attr_str(n, "mode", "standard");
        if (strcmp(m, "standard") && strcmp(m, "nesterov"))
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: mode '%s' (standard, nesterov)", n->opset, m);
        if (!kl_gnode_attr(n, "alpha") || !kl_gnode_attr(n, "beta") || !kl_gnode_attr(n, "norm_coefficient"))
            return kl__fail_node(e, n, KL_EINVAL, "Momentum needs alpha, beta, mode and norm_coefficient");
    }
    return KL_OK;
}

static const char *const a_runi[] = {"dtype", "high", "low", "seed", "shape", NULL};
static const char *const a_rnorm[] = {"dtype", "mean", "scale", "seed", "shape", NULL};
static const char *const a_bern[] = {"dtype", "seed", NULL};
static const char *const a_adagrad[] = {"decay_factor", "epsilon", "norm_coefficient", NULL};
static const char *const a_adam[] = {"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post", NULL};
static const char *const a_momentum[] = {"alpha", "beta", "mode", "norm_coefficient", NULL};

#define TRAINING "ai.onnx.preview.training"

const kl_op kl__ops_random[] = {
    {"RandomUniform", "", 1, 19, 0, 0, 1, 1, a_runi, NULL, rnd_infer, rnd_run, KL_OP_NOFOLD},
    {"RandomNormal", "", 1, 19, 0, 0, 1, 1, a_rnorm, NULL, rnd_infer, rnd_run, KL_OP_NOFOLD},
    {"RandomUniformLike", "", 1, 19, 1, 1, 1, 1, a_runi, NULL, rnd_infer, rnd_run, KL_OP_NOFOLD},
    {"RandomNormalLike", "", 1, 19, 1, 1, 1, 1, a_rnorm, NULL, rnd_infer, rnd_run, KL_OP_NOFOLD},
    {"Bernoulli", "", 15, 19, 1, 1, 1, 1, a_bern, NULL, rnd_infer, rnd_run, KL_OP_NOFOLD},
    {"Adagrad", TRAINING, 1, 1, 5, -1, 2, -1, a_adagrad, NULL, opt_infer, opt_run, 0},
    {"Adam", TRAINING, 1, 1, 6, -1, 3, -1, a_adam, NULL, opt_infer, opt_run, 0},
    {"Momentum", TRAINING, 1, 1, 5, -1, 2, -1, a_momentum, opt_check, opt_infer, opt_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
