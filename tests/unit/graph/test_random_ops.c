/* Random ops (RandomUniform/Normal(+Like), Bernoulli): deterministic given
 * the seed (two runs, two graphs), different without one (never folded),
 * the shape/dtype attributes, and the distributions' moments on 20000
 * draws; Bernoulli at p = 0, 1 and 0.3. The ai.onnx.preview.training
 * optimizers Adagrad, Adam and Momentum (standard, nesterov) against the
 * ONNX reference formulas for T = 0 and T > 0 on two tensors. */
#include "../harness.h"
#include "kt_graph.h"

#include <math.h>

static kl_graph *rnd_graph(const char *op, int seeded, float seed, int64_t n, int onnx_dtype) {
    kl_graph *g = ktg_new(15);
    int like = strstr(op, "Like") != NULL || !strcmp(op, "Bernoulli");
    if (like) ktg_io(g, "x", 0);
    int k = ktg_node(g, op, like ? "x" : "", "y");
    if (seeded) ktg_attr_f(g, k, "seed", seed);
    if (!like) {
        int64_t sh[2] = {2, n / 2};
        ktg_attr_ints(g, k, "shape", 2, sh);
    }
    if (onnx_dtype) ktg_attr_i(g, k, "dtype", onnx_dtype);
    if (strstr(op, "Uniform")) ktg_attr_f(g, k, "low", -2.f), ktg_attr_f(g, k, "high", 6.f);
    if (strstr(op, "Normal")) ktg_attr_f(g, k, "mean", 3.f), ktg_attr_f(g, k, "scale", 0.5f);
    ktg_io(g, "y", 1);
    return g;
}

static kl_tensor *rnd_run1(const char *op, int seeded, float seed, kl_tensor *x, int onnx_dtype, kl_err *e) {
    kl_graph *g = rnd_graph(op, seeded, seed, 20000, onnx_dtype);
    kl_tensor *y = NULL;
    if (!strstr(op, "Like") && strcmp(op, "Bernoulli")) x = NULL;
    int rc = kl_graph_finalize(g, e);
    if (!rc) rc = kl_graph_optimize(g, 1, e);
    if (!rc) rc = ktg_run(g, x ? &x : NULL, x ? 1 : 0, &y, e);
    kl_graph_free(g);
    return rc ? NULL : y;
}

KL_TEST(graph_random_seeded_deterministic) {
    kl_err e = {0};
    const char *ops[] = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli"};
    int64_t d[2] = {2, 10000};
    kl_tensor *x = ktg_tensor(KL_F64, 2, d, NULL);
    for (int i = 0; i < 20000; i++) ((double *)x->data)[i] = 0.3;
    for (int o = 0; o < 5; o++) {
        kl_tensor *a = rnd_run1(ops[o], 1, 7.f, x, 0, &e), *b = rnd_run1(ops[o], 1, 7.f, x, 0, &e),
                  *c = rnd_run1(ops[o], 1, 8.f, x, 0, &e), *u = rnd_run1(ops[o], 0, 0, x, 0, &e),
                  *v = rnd_run1(ops[o], 0, 0, x, 0, &e);
        KT_CHECKF(a && b && c && u && v, "%s: %s", ops[o], kl_err_what(&e));
        KT_EQ_INT(a->dims[0], 2);
        KT_EQ_INT(a->dims[1], 10000);
        KT_EQ_INT(a->dtype, o >= 2 ? KL_F64 : KL_F32);
        KT_CHECKF(!memcmp(a->data, b->data, a->nbytes), "%s: same seed, different values", ops[o]);
        KT_CHECKF(memcmp(a->data, c->data, a->nbytes), "%s: seeds 7 and 8 give the same values", ops[o]);
        KT_CHECKF(memcmp(u->data, v->data, u->nbytes), "%s: two unseeded runs give the same values", ops[o]);
        double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < 20000; i++) {
            double t = a->dtype == KL_F64 ? ((double *)a->data)[i] : ((float *)a->data)[i];
            s += t, s2 += t * t, lo = fmin(lo, t), hi = fmax(hi, t);
        }
        double mean = s / 20000, sd = sqrt(s2 / 20000 - mean * mean);
        if (strstr(ops[o], "Uniform")) {
            KT_CHECKF(lo >= -2 && hi < 6, "%s: range [%g, %g]", ops[o], lo, hi);
            KT_NEAR(mean, 2.0, 0.1);
            KT_NEAR(sd, 8 / sqrt(12.0), 0.05);
        } else if (strstr(ops[o], "Normal")) {
            KT_NEAR(mean, 3.0, 0.02);
            KT_NEAR(sd, 0.5, 0.02);
        } else {
            KT_CHECK(lo == 0 && hi == 1);
            KT_NEAR(mean, 0.3, 0.02);
        }
        kl_tensor_free(a), kl_tensor_free(b), kl_tensor_free(c), kl_tensor_free(u), kl_tensor_free(v);
    }
    kl_tensor_free(x);
}

KL_TEST(graph_bernoulli_edges_and_dtype) {
    kl_err e = {0};
    int64_t d = 1000;
    kl_tensor *x = ktg_tensor(KL_F32, 1, &d, NULL);
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < 1000; i++) ((float *)x->data)[i] = (float)p;
        kl_tensor *y = rnd_run1("Bernoulli", 1, 1.f, x, 9 /* BOOL */, &e);
        KT_CHECKF(y != NULL, "%s", kl_err_what(&e));
        KT_EQ_INT(y->dtype, KL_BOOL);
        for (int i = 0; i < 1000; i++) KT_EQ_INT(((uint8_t *)y->data)[i], p);
        kl_tensor_free(y);
    }
    kl_tensor *y = rnd_run1("RandomUniform", 1, 3.f, NULL, 11 /* DOUBLE */, &e);
    KT_CHECKF(y != NULL, "%s", kl_err_what(&e));
    KT_EQ_INT(y->dtype, KL_F64);
    kl_tensor_free(y);
    KT_CHECK(rnd_run1("RandomNormal", 1, 3.f, NULL, 7 /* INT64 */, &e) == NULL);
    KT_CONTAINS(kl_err_what(&e), "RandomNormal");
    kl_tensor_free(x);
}

/* ---- ai.onnx.preview.training ---- */

static void opt_case(const char *op, int64_t T, const char *mode, int *ok, kl_err *e) {
    kl_graph *g = ktg_new(0);
    int ns = !strcmp(op, "Adam") ? 2 : 1;
    const char *groups[] = {"X", "G", "V", "H"};
    char ins[128] = "R,T", outs[128] = "";
    for (int gi = 0; gi < 2 + ns; gi++)
        for (int i = 1; i <= 2; i++) {
            char nm[8];
            snprintf(nm, sizeof nm, ",%s%d", !strcmp(op, "Adagrad") && gi == 2 ? "H" : groups[gi], i);
            strcat(ins, nm);
        }
    for (int s = 0; s <= ns; s++)
        for (int i = 1; i <= 2; i++) {
            char nm[12];
            snprintf(nm, sizeof nm, "%s%s%d_new", *outs ? "," : "",
                     s == 0                                 ? "X"
                         : !strcmp(op, "Adagrad") || s == 2 ? "H"
                                                            : "V",
                     i);
            strcat(outs, nm);
        }
    int k = ktg_node(g, op, ins, outs);
    kl_gnode_set_domain(&g->nodes[k], "ai.onnx.preview.training", 1);
    float alpha = 0.9f, beta = 0.8f, eps = 1e-3f, nc = 0.01f, decay = 0.1f;
    if (!strcmp(op, "Adagrad"))
        ktg_attr_f(g, k, "epsilon", eps), ktg_attr_f(g, k, "decay_factor", decay),
            ktg_attr_f(g, k, "norm_coefficient", nc);
    if (!strcmp(op, "Momentum"))
        ktg_attr_f(g, k, "alpha", alpha), ktg_attr_f(g, k, "beta", beta), ktg_attr_s(g, k, "mode", mode),
            ktg_attr_f(g, k, "norm_coefficient", nc);
    if (!strcmp(op, "Adam"))
        ktg_attr_f(g, k, "alpha", alpha), ktg_attr_f(g, k, "beta", beta), ktg_attr_f(g, k, "epsilon", eps),
            ktg_attr_f(g, k, "norm_coefficient", nc);
    int nin = 2 + 2 * (2 + ns);
    kl_tensor *in[12];
    int64_t one = 1, d2 = 3;
    float R = 0.1f;
    in[0] = ktg_tensor(KL_F32, 0, &one, &R);
    in[1] = ktg_tensor(KL_I64, 0, &one, &T);
    for (int i = 2; i < nin; i++) {
        in[i] = ktg_tensor(KL_F32, 1, &d2, NULL);
        for (int j = 0; j < 3; j++)
            ((float *)in[i]->data)[j] = (float)(ktg_rand() * 2 - (i >= 2 + 2 * 2 ? 0 : 1)); /* states >= 0 */
    }
    for (int i = 0; i < nin; i++) {
        const char *p = ins;
        for (int c = 0; c < i; c++) p = strchr(p, ',') + 1;
        char nm[8];
        snprintf(nm, sizeof nm, "%.*s", (int)(strchr(p, ',') ? strchr(p, ',') - p : (long)strlen(p)), p);
        ktg_io(g, nm, 0);
    }
    for (int s = 0; s < 2 * (1 + ns); s++) {
        const char *p = outs;
        for (int c = 0; c < s; c++) p = strchr(p, ',') + 1;
        char nm[12];
        snprintf(nm, sizeof nm, "%.*s", (int)(strchr(p, ',') ? strchr(p, ',') - p : (long)strlen(p)), p);
        ktg_io(g, nm, 1);
    }
    kl_tensor *o[6] = {0};
    int rc = ktg_run(g, in, nin, o, e);
    if (rc) {
        kt_fail(__FILE__, __LINE__, "%s: %s", op, kl_err_what(e));
        *ok = 0;
    }
    for (int i = 0; !rc && i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double x = ((float *)in[2 + i]->data)[j], gr = nc * x + ((float *)in[4 + i]->data)[j],
                   s1 = ((float *)in[6 + i]->data)[j];
            double xw, s1w, s2w = 0;
            if (!strcmp(op, "Adagrad")) {
                double r = R / (1 + (double)T * decay);
                s1w = s1 + gr * gr;
                xw = x - r * gr / (sqrt(s1w) + eps);
            } else if (!strcmp(op, "Momentum")) {
                s1w = alpha * s1 + (T > 0 ? beta : 1.0) * gr;
                xw = !strcmp(mode, "nesterov") ? x - R * (gr + alpha * s1w) : x - R * s1w;
            } else {
                double h = ((float *)in[8 + i]->data)[j];
                s1w = alpha * s1 + (1 - alpha) * gr;
                s2w = beta * h + (1 - beta) * gr * gr;
                double r = T > 0 ? R * sqrt(1 - pow(beta, (double)T)) / (1 - pow(alpha, (double)T)) : R;
                xw = x - r * s1w / (sqrt(s2w) + eps);
            }
            double got[3] = {((float *)o[i]->data)[j], ((float *)o[2 + i]->data)[j],
                             ns > 1 ? ((float *)o[4 + i]->data)[j] : 0};
            if (fabs(got[0] - xw) > 1e-5 || fabs(got[1] - s1w) > 1e-5 || (ns > 1 && fabs(got[2] - s2w) > 1e-5)) {
                kt_fail(__FILE__, __LINE__, "%s %s T=%lld tensor %d elem %d: %g %g %g, expected %g %g %g", op, mode,
                        (long long)T, i, j, got[0], got[1], got[2], xw, s1w, s2w);
                *ok = 0;
                i = 2;
                break;
            }
        }
    for (int i = 0; i < nin; i++) kl_tensor_free(in[i]);
    for (int i = 0; i < 6; i++) kl_tensor_free(o[i]);
    kl_graph_free(g);
}

KL_TEST(graph_training_optimizers_reference) {
    kl_err e = {0};
    int ok = 1;
    for (int64_t T = 0; T < 3 && ok; T += 2) {
        opt_case("Adagrad", T, "", &ok, &e);
        opt_case("Momentum", T, "standard", &ok, &e);
        opt_case("Momentum", T, "nesterov", &ok, &e);
        opt_case("Adam", T, "", &ok, &e);
    }
}
