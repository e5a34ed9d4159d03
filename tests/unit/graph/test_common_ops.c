/* Einsum, Det, Unique, Compress, ReverseSequence and
 * MeanVarianceNormalization as graphs against direct references: Einsum
 * against a loop over every index assignment (matmul, batch matmul,
 * ellipsis with broadcasting, traces, diagonals, outer products, three
 * operands, implicit output with upper- and lower-case letters, full sums,
 * empty dims, f32 and f64); Det against cofactor expansion (singular, batch,
 * 0x0); Unique sorted/unsorted, with a negative axis, empty input; Compress
 * with a short condition and none true; ReverseSequence in both layouts with
 * lengths 0 and full; MVN over custom (negative) axes. */
#include "../harness.h"
#include "kt_graph.h"

#include <math.h>

/* ---- Einsum ---- */

static int ee_letter(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c - 'A' + 26; }

/* reference: terms without ellipsis (the test writes them out) */
static void ee_ref(const char *eq, int nops, kl_tensor **in, const char *out, double *y, int64_t ny) {
    int64_t size[52];
    int used[52] = {0};
    const char *t = eq;
    const char *term[4];
    int tl[4];
    for (int i = 0; i < nops; i++) {
        term[i] = t;
        const char *c = strchr(t, ',');
        tl[i] = c ? (int)(c - t) : (int)strlen(t);
        for (int k = 0; k < tl[i]; k++) {
            int l = ee_letter(t[k]);
            if (!used[l] || size[l] == 1) size[l] = in[i]->dims[k];
            used[l] = 1;
        }
        t = c ? c + 1 : t + tl[i];
    }
    int lets[52], nl = 0;
    for (int l = 0; l < 52; l++)
        if (used[l]) lets[nl++] = l;
    for (int64_t i = 0; i < ny; i++) y[i] = 0;
    int64_t val[52] = {0};
    for (;;) {
        int empty = 0;
        for (int k = 0; k < nl; k++) empty |= size[lets[k]] == 0;
        if (empty) return;
        double p = 1;
        for (int i = 0; i < nops; i++) {
            int64_t off = 0;
            for (int k = 0; k < tl[i]; k++)
                off = off * in[i]->dims[k] + (in[i]->dims[k] == 1 ? 0 : val[ee_letter(term[i][k])]);
            p *= in[i]->dtype == KL_F64 ? ((double *)in[i]->data)[off] : ((float *)in[i]->data)[off];
        }
        int64_t o = 0;
        for (const char *c = out; *c; c++) o = o * size[ee_letter(*c)] + val[ee_letter(*c)];
        y[o] += p;
        int k = nl - 1;
        while (k >= 0 && ++val[lets[k]] == size[lets[k]]) val[lets[k--]] = 0;
        if (k < 0) break;
    }
}

typedef struct {
    const char *eq, *ref_in, *ref_out; /* ref_in: the equation's inputs with ellipsis written out */
    int nops;
    int rank[3];
    int64_t dims[3][4];
} ecase;

KL_TEST(graph_einsum_reference) {
    kl_err e = {0};
    const ecase cases[] = {
        {"ij,jk->ik", "ij,jk", "ik", 2, {2, 2}, {{3, 4}, {4, 5}}},
        {"bij, bjk -> bik", "bij,bjk", "bik", 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}},
        {"...ij,...jk->...ik", "aij,ajk", "aik", 2, {3, 3}, {{1, 3, 4}, {6, 4, 2}}}, /* broadcast batch */
        {"ii", "ii", "", 1, {2}, {{5, 5}}},
        {"...ii->...i", "aii", "ai", 1, {3}, {{3, 4, 4}}},
        {"i,j->ij", "i,j", "ij", 2, {1, 1}, {{3}, {4}}},
        {"ij,jk,kl->il", "ij,jk,kl", "il", 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 2}}},
        {"Ab,bc", "Ab,bc", "Ac", 2, {2, 2}, {{3, 2}, {2, 4}}},
        {"ba,ca", "ba,ca", "bc", 2, {2, 2}, {{3, 2}, {4, 2}}}, /* implicit: sorted b, c */
        {"ij->", "ij", "", 1, {2}, {{3, 4}}},
        {"ij,ij->ij", "ij,ij", "ij", 2, {2, 2}, {{3, 4}, {3, 4}}},
        {"ijk->kji", "ijk", "kji", 1, {3}, {{2, 3, 4}}},
        {"ij,jk->ik", "ij,jk", "ik", 2, {2, 2}, {{3, 0}, {0, 5}}}, /* empty contraction: zeros */
        {"bik,bkj,bj->bi", "bik,bkj,bj", "bi", 3, {3, 3, 2}, {{2, 3, 4}, {2, 4, 5}, {2, 5}}},
        {"iij->j", "iij", "j", 1, {3}, {{3, 3, 2}}},
    };
    for (int dt = 0; dt < 2; dt++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            const ecase *k = &cases[c];
            kl_graph *g = ktg_new(12);
            char names[3][4] = {"x0", "x1", "x2"}, ins[32] = "";
            kl_tensor *x[3];
            for (int i = 0; i < k->nops; i++) {
                ktg_io(g, names[i], 0);
                strcat(ins, i ? "," : "");
                strcat(ins, names[i]);
                x[i] = ktg_tensor(dt ? KL_F64 : KL_F32, k->rank[i], k->dims[i], NULL);
                for (int64_t j = 0; j < kl_tensor_numel(x[i]); j++) {
                    double v = ktg_rand() * 2 - 1;
                    if (dt) ((double *)x[i]->data)[j] = v;
                    else ((float *)x[i]->data)[j] = (float)v;
                }
            }
            int nd = ktg_node(g, "Einsum", ins, "y");
            ktg_attr_s(g, nd, "equation", k->eq);
            ktg_io(g, "y", 1);
            kl_tensor *y = NULL;
            int rc = ktg_run(g, x, k->nops, &y, &e);
            KT_CHECKF(rc == 0, "%s: %s", k->eq, kl_err_what(&e));
            int64_t ny = kl_tensor_numel(y);
            KT_EQ_INT(y->rank, (int)strlen(k->ref_out));
            double *want = malloc(sizeof(double) * (size_t)(ny + 1));
            ee_ref(k->ref_in, k->nops, x, k->ref_out, want, ny);
            for (int64_t i = 0; i < ny; i++) {
                double got = dt ? ((double *)y->data)[i] : ((float *)y->data)[i];
                KT_CHECKF(fabs(got - want[i]) <= (dt ? 1e-12 : 1e-5) * fmax(1, fabs(want[i])),
                          "%s %s: element %lld = %g, expected %g", k->eq, dt ? "f64" : "f32", (long long)i, got,
                          want[i]);
            }
            free(want);
            kl_tensor_free(y);
            for (int i = 0; i < k->nops; i++) kl_tensor_free(x[i]);
            kl_graph_free(g);
        }
}

KL_TEST(graph_einsum_errors) {
    kl_err e = {0};
    const char *bad[] = {"ij,jk", "ij->k", "i$->i", "ij->ii"};
    for (int b = 0; b < 4; b++) {
        kl_graph *g = ktg_new(12);
        ktg_io(g, "x", 0);
        int nd = ktg_node(g, "Einsum", "x", "y");
        ktg_attr_s(g, nd, "equation", bad[b]);
        ktg_io(g, "y", 1);
        int64_t d[2] = {2, 2};
        kl_tensor *x = ktg_tensor(KL_F32, 2, d, NULL), *y = NULL;
        memset(x->data, 0, x->nbytes);
        KT_CHECKF(ktg_run(g, &x, 1, &y, &e) != 0, "'%s' accepted", bad[b]);
        KT_CONTAINS(kl_err_what(&e), "Einsum");
        kl_tensor_free(x), kl_tensor_free(y);
        kl_graph_free(g);
    }
}

/* ---- Det ---- */

static double cofactor_det(const double *a, int m) {
    if (m == 0) return 1;
    if (m == 1) return a[0];
    double s = 0, sub[64];
    for (int c = 0; c < m; c++) {
        int k = 0;
        for (int i = 1; i < m; i++)
            for (int j = 0; j < m; j++)
                if (j != c) sub[k++] = a[i * m + j];
        s += (c % 2 ? -1 : 1) * a[c] * cofactor_det(sub, m - 1);
    }
    return s;
}

KL_TEST(graph_det_reference) {
    kl_err e = {0};
    const int64_t shapes[][4] = {{3, 2, 2, 0}, {2, 4, 4, 0}, {2, 1, 1, 0}, {2, 0, 0, 0}, {4, 2, 3, 3}};
    const int ranks[] = {3, 3, 3, 3, 4};
    for (int s = 0; s < 5; s++)
        for (int dt = 0; dt < 2; dt++) {
            kl_graph *g = ktg_new(11);
            ktg_io(g, "x", 0);
            ktg_node(g, "Det", "x", "y");
            ktg_io(g, "y", 1);
            kl_tensor *x = ktg_tensor(dt ? KL_F64 : KL_F32, ranks[s], shapes[s], NULL), *y = NULL;
            int64_t m = shapes[s][ranks[s] - 1], n = kl_tensor_numel(x);
            for (int64_t i = 0; i < n; i++) {
                double v = (double)(int)(ktg_rand() * 7) - 3; /* small integers: singular matrices happen */
                if (dt) ((double *)x->data)[i] = v;
                else ((float *)x->data)[i] = (float)v;
            }
            KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
            KT_EQ_INT(y->rank, ranks[s] - 2);
            int64_t mats = kl_tensor_numel(y);
            for (int64_t b = 0; b < mats; b++) {
                double a[16];
                for (int64_t i = 0; i < m * m; i++)
                    a[i] = dt ? ((double *)x->data)[b * m * m + i] : ((float *)x->data)[b * m * m + i];
                double want = cofactor_det(a, (int)m), got = dt ? ((double *)y->data)[b] : ((float *)y->data)[b];
                KT_CHECKF(fabs(got - want) <= 1e-4 * fmax(1, fabs(want)), "matrix %lld: %g, expected %g", (long long)b,
                          got, want);
            }
            kl_tensor_free(x), kl_tensor_free(y);
            kl_graph_free(g);
        }
}

/* ---- Unique ---- */

static kl_tensor *run_unique(kl_tensor *x, int has_axis, int64_t axis, int sorted, kl_tensor **o, kl_err *e) {
    kl_graph *g = ktg_new(11);
    ktg_io(g, "x", 0);
    int k = ktg_node(g, "Unique", "x", "y,idx,inv,cnt");
    if (has_axis) ktg_attr_i(g, k, "axis", axis);
    ktg_attr_i(g, k, "sorted", sorted);
    ktg_io(g, "y", 1), ktg_io(g, "idx", 1), ktg_io(g, "inv", 1), ktg_io(g, "cnt", 1);
    int rc = ktg_run(g, &x, 1, o, e);
    kl_graph_free(g);
    return rc ? NULL : o[0];
}

KL_TEST(graph_unique_reference) {
    kl_err e = {0};
    /* flattened: values 2 0 2 -1 0 7 */
    int64_t d1 = 6;
    float v1[6] = {2, 0, 2, -1, 0, 7};
    kl_tensor *x = ktg_tensor(KL_F32, 1, &d1, v1), *o[4] = {0};
    for (int sorted = 0; sorted < 2; sorted++) {
        KT_CHECKF(run_unique(x, 0, 0, sorted, o, &e) != NULL, "%s", kl_err_what(&e));
        const float ys[] = {-1, 0, 2, 7}, yu[] = {2, 0, -1, 7};
        const int64_t is[] = {3, 1, 0, 5}, iu[] = {0, 1, 3, 5}, vs[] = {2, 1, 2, 0, 1, 3}, vu[] = {0, 1, 0, 2, 1, 3},
                      cs[] = {1, 2, 2, 1}, cu[] = {2, 2, 1, 1};
        KT_EQ_INT(o[0]->dims[0], 4);
        for (int i = 0; i < 4; i++) {
            KT_NEAR(((float *)o[0]->data)[i], sorted ? ys[i] : yu[i], 0);
            KT_EQ_INT(((int64_t *)o[1]->data)[i], sorted ? is[i] : iu[i]);
            KT_EQ_INT(((int64_t *)o[3]->data)[i], sorted ? cs[i] : cu[i]);
        }
        for (int i = 0; i < 6; i++) KT_EQ_INT(((int64_t *)o[2]->data)[i], sorted ? vs[i] : vu[i]);
        for (int i = 0; i < 4; i++) kl_tensor_free(o[i]);
    }
    kl_tensor_free(x);
    /* along axis -1 of a [2, 4] int64 matrix: columns (1,5) (0,9) (1,5) (0,3) */
    int64_t d2[2] = {2, 4}, v2[8] = {1, 0, 1, 0, 5, 9, 5, 3};
    x = ktg_tensor(KL_I64, 2, d2, v2);
    KT_CHECKF(run_unique(x, 1, -1, 1, o, &e) != NULL, "%s", kl_err_what(&e));
    KT_EQ_INT(o[0]->dims[0], 2);
    KT_EQ_INT(o[0]->dims[1], 3);
    const int64_t want[6] = {0, 0, 1, 3, 9, 5};
    for (int i = 0; i < 6; i++) KT_EQ_INT(((int64_t *)o[0]->data)[i], want[i]);
    const int64_t inv[4] = {2, 1, 2, 0};
    for (int i = 0; i < 4; i++) KT_EQ_INT(((int64_t *)o[2]->data)[i], inv[i]);
    for (int i = 0; i < 4; i++) kl_tensor_free(o[i]);
    kl_tensor_free(x);
    /* empty input */
    int64_t d0 = 0;
    x = ktg_tensor(KL_F32, 1, &d0, NULL);
    KT_CHECKF(run_unique(x, 0, 0, 1, o, &e) != NULL, "%s", kl_err_what(&e));
    KT_EQ_INT(o[0]->dims[0], 0);
    for (int i = 0; i < 4; i++) kl_tensor_free(o[i]);
    kl_tensor_free(x);
}

/* ---- Compress ---- */

KL_TEST(graph_compress_reference) {
    kl_err e = {0};
    int64_t d[3] = {2, 3, 2};
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i;
    struct {
        int has_axis;
        int64_t axis;
        int nc;
        uint8_t c[6];
        int64_t want_n;
        float want[12];
    } cases[] = {
        {1, -2, 2, {0, 1}, 4, {2, 3, 8, 9}},      /* short condition: slice 2 dropped */
        {1, 0, 2, {0, 0}, 0, {0}},                /* none true */
        {0, 0, 5, {1, 0, 0, 1, 1}, 3, {0, 3, 4}}, /* flattened */
        {1, 2, 2, {0, 1}, 6, {1, 3, 5, 7, 9, 11}},
    };
    for (int c = 0; c < 4; c++) {
        kl_graph *g = ktg_new(11);
        ktg_io(g, "x", 0), ktg_io(g, "c", 0);
        int k = ktg_node(g, "Compress", "x,c", "y");
        if (cases[c].has_axis) ktg_attr_i(g, k, "axis", cases[c].axis);
        ktg_io(g, "y", 1);
        int64_t nc = cases[c].nc;
        kl_tensor *in[2] = {ktg_tensor(KL_F32, 3, d, v), ktg_tensor(KL_BOOL, 1, &nc, cases[c].c)}, *y = NULL;
        KT_OK(ktg_run(g, in, 2, &y, &e), &e);
        KT_EQ_INT(kl_tensor_numel(y), cases[c].want_n);
        for (int64_t i = 0; i < cases[c].want_n; i++) KT_NEAR(((float *)y->data)[i], cases[c].want[i], 0);
        kl_tensor_free(in[0]), kl_tensor_free(in[1]), kl_tensor_free(y);
        kl_graph_free(g);
    }
}

/* ---- ReverseSequence ---- */

KL_TEST(graph_reversesequence_reference) {
    kl_err e = {0};
    for (int layout = 0; layout < 2; layout++) {
        int64_t T = 4, B = 3, F = 2, d[3] = {layout ? B : T, layout ? T : B, F}, nb = B, lens[3] = {0, 4, 2};
        kl_graph *g = ktg_new(10);
        ktg_io(g, "x", 0), ktg_io(g, "l", 0);
        int k = ktg_node(g, "ReverseSequence", "x,l", "y");
        ktg_attr_i(g, k, "time_axis", layout ? 1 : 0), ktg_attr_i(g, k, "batch_axis", layout ? 0 : 1);
        ktg_io(g, "y", 1);
        kl_tensor *in[2] = {ktg_tensor(KL_I32, 3, d, NULL), ktg_tensor(KL_I64, 1, &nb, lens)}, *y = NULL;
        for (int i = 0; i < T * B * F; i++) ((int32_t *)in[0]->data)[i] = i;
        KT_OK(ktg_run(g, in, 2, &y, &e), &e);
        for (int64_t t = 0; t < T; t++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t f = 0; f < F; f++) {
                    int64_t s = t < lens[b] ? lens[b] - 1 - t : t;
                    int64_t di = ((layout ? b * T + t : t * B + b)) * F + f,
                            si = ((layout ? b * T + s : s * B + b)) * F + f;
                    KT_EQ_INT(((int32_t *)y->data)[di], ((int32_t *)in[0]->data)[si]);
                }
        kl_tensor_free(in[0]), kl_tensor_free(in[1]), kl_tensor_free(y);
        kl_graph_free(g);
    }
}

/* ---- MeanVarianceNormalization ---- */

KL_TEST(graph_mvn_reference) {
    kl_err e = {0};
    int64_t d[4] = {2, 3, 4, 5}, axes[2] = {-1, 1};
    kl_graph *g = ktg_new(13);
    ktg_io(g, "x", 0);
    int k = ktg_node(g, "MeanVarianceNormalization", "x", "y");
    ktg_attr_ints(g, k, "axes", 2, axes);
    ktg_io(g, "y", 1);
    kl_tensor *x = ktg_tensor(KL_F32, 4, d, NULL), *y = NULL;
    for (int i = 0; i < 120; i++) ((float *)x->data)[i] = (float)(ktg_rand() * 10 - 3);
    KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
    const float *xv = x->data, *yv = y->data;
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 4; c++) { /* groups over axes 1 and 3 */
            double s = 0, s2 = 0;
            for (int b = 0; b < 3; b++)
                for (int w = 0; w < 5; w++) {
                    double v = xv[((a * 3 + b) * 4 + c) * 5 + w];
                    s += v, s2 += v * v;
                }
            double mean = s / 15, sd = sqrt(s2 / 15 - mean * mean);
            for (int b = 0; b < 3; b++)
                for (int w = 0; w < 5; w++) {
                    int i = ((a * 3 + b) * 4 + c) * 5 + w;
                    KT_NEAR(yv[i], (xv[i] - mean) / (sd + 1e-9), 1e-5);
                }
        }
    kl_tensor_free(x), kl_tensor_free(y);
    kl_graph_free(g);
}

/* ---- Cast / CastLike: every numeric pair ---- */

KL_TEST(graph_cast_every_numeric_pair) {
    kl_err e = {0};
    /* ONNX TensorProto numbers of the numeric types */
    const int onnx_types[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16};
    const double vals[] = {0, 1, 2, 7, 100, 3, 64, 0, 1, 5};
    int64_t d = 10;
    for (size_t a = 0; a < sizeof onnx_types / sizeof *onnx_types; a++)
        for (size_t b = 0; b < sizeof onnx_types / sizeof *onnx_types; b++)
            for (int like = 0; like < 2; like++) {
                kl_dtype from, to;
                KT_OK(kl_dtype_from_onnx(onnx_types[a], &from), &e);
                KT_OK(kl_dtype_from_onnx(onnx_types[b], &to), &e);
                kl_graph *g = ktg_new(15);
                ktg_io(g, "x", 0);
                kl_tensor *x = ktg_tensor(from, 1, &d, NULL), *l = ktg_tensor(to, 1, &d, NULL), *y = NULL;
                memset(l->data, 0, l->nbytes);
                for (int i = 0; i < 10; i++) ktg_set(x, i, from == KL_BOOL ? vals[i] != 0 : vals[i]);
                if (like) ktg_init(g, "l", l);
                int k = ktg_node(g, like ? "CastLike" : "Cast", like ? "x,l" : "x", "y");
                if (!like) ktg_attr_i(g, k, "to", onnx_types[b]);
                ktg_io(g, "y", 1);
                KT_CHECKF(ktg_run(g, &x, 1, &y, &e) == 0, "%s -> %s: %s", kl_dtype_name(from), kl_dtype_name(to),
                          kl_err_what(&e));
                KT_EQ_INT(y->dtype, to);
                for (int i = 0; i < 10; i++) {
                    double want = from == KL_BOOL || to == KL_BOOL ? vals[i] != 0 : vals[i];
                    KT_CHECKF(ktg_get(y, i) == want, "%s -> %s (%s): element %d = %g, expected %g", kl_dtype_name(from),
                              kl_dtype_name(to), like ? "CastLike" : "Cast", i, ktg_get(y, i), want);
                }
                kl_tensor_free(x), kl_tensor_free(l), kl_tensor_free(y);
                kl_graph_free(g);
            }
}

/* ---- Conv geometry attributes (fuzz finding: a kernel_shape the weight
 * disagrees with reached the weight packing at load) ---- */

static kl_graph *conv_graph(const int64_t *wd, int wrank, const char *attr, int n, const int64_t *v, int w_init) {
    kl_graph *g = ktg_new(13);
    ktg_io(g, "x", 0);
    const char *ins[2] = {"x", "w"}, *outs[1] = {"y"};
    int k = kl_graph_add_node(g, "Conv", "bad_conv", ins, 2, outs, 1);
    if (attr) ktg_attr_ints(g, k, attr, n, v);
    if (w_init) {
        kl_tensor *w = ktg_tensor(KL_F32, wrank, wd, NULL);
        for (int64_t i = 0; i < kl_tensor_numel(w); i++) ((float *)w->data)[i] = (float)(i % 7) - 3;
        ktg_init(g, "w", w);
        kl_tensor_free(w);
    } else ktg_io(g, "w", 0);
    ktg_io(g, "y", 1);
    return g;
}

KL_TEST(graph_conv_geometry_refused_at_load) {
    const int64_t wd[4] = {4, 2, 3, 3};
    const int64_t k55[2] = {5, 5}, k333[3] = {3, 3, 3}, k3[1] = {3}, s3[3] = {1, 1, 1}, p3[3] = {0, 0, 0}, d1[1] = {1};
    struct { const char *attr; int n; const int64_t *v; const char *why; } bad[] = {
        {"kernel_shape", 2, k55, "kernel_shape[0] = 5"}, {"kernel_shape", 3, k333, "kernel_shape has 3 entries"},
        {"kernel_shape", 1, k3, "kernel_shape has 1 entries"}, {"strides", 3, s3, "strides has 3 entries"},
        {"pads", 3, p3, "pads has 3 entries"}, {"dilations", 1, d1, "dilations has 1 entries"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        kl_err e = {0};
        kl_graph *g = conv_graph(wd, 4, bad[b].attr, bad[b].n, bad[b].v, 1);
        KT_CHECKF(kl_graph_finalize(g, &e) != KL_OK, "%s accepted", bad[b].why);
        KT_CONTAINS(kl_err_what(&e), "bad_conv");
        KT_CONTAINS(kl_err_what(&e), bad[b].why);
        kl_graph_free(g);
    }
}

KL_TEST(graph_conv_geometry_refused_at_plan) {
    /* the weight a graph input: its rank is known only at plan time */
    const int64_t wd[4] = {4, 2, 3, 3}, xd[4] = {1, 2, 6, 6}, s3[3] = {1, 1, 1}, k55[2] = {5, 5};
    const int64_t *vals[2] = {s3, k55};
    const char *names[2] = {"strides", "kernel_shape"};
    int ns[2] = {3, 2};
    for (int c = 0; c < 2; c++) {
        kl_err e = {0};
        kl_graph *g = conv_graph(wd, 4, names[c], ns[c], vals[c], 0);
        kl_tensor *in[2] = {ktg_tensor(KL_F32, 4, xd, NULL), ktg_tensor(KL_F32, 4, wd, NULL)}, *y = NULL;
        memset(in[0]->data, 0, in[0]->nbytes);
        memset(in[1]->data, 0, in[1]->nbytes);
        KT_CHECKF(ktg_run(g, in, 2, &y, &e) != KL_OK, "%s accepted", names[c]);
        KT_CONTAINS(kl_err_what(&e), "bad_conv");
        kl_tensor_free(in[0]), kl_tensor_free(in[1]), kl_tensor_free(y);
        kl_graph_free(g);
    }
}

KL_TEST(graph_conv_geometry_consistent_runs) {
    /* agreeing attributes still load, optimise (weights packed) and run */
    const int64_t wd[4] = {4, 2, 3, 3}, xd[4] = {1, 2, 5, 5}, k33[2] = {3, 3};
    kl_err e = {0};
    kl_graph *g = conv_graph(wd, 4, "kernel_shape", 2, k33, 1);
    KT_OK(kl_graph_finalize(g, &e), &e);
    KT_OK(kl_graph_optimize(g, 1, &e), &e);
    kl_tensor *x = ktg_tensor(KL_F32, 4, xd, NULL), *y = NULL;
    for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = 1;
    KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
    KT_EQ_INT(y->dims[2], 3);
    /* every output: the sum over the window of the weights (x is all ones) */
    for (int64_t m = 0; m < 4; m++) {
        double want = 0;
        for (int64_t i = 0; i < 18; i++) want += (double)((m * 18 + i) % 7) - 3;
        KT_NEAR(((float *)y->data)[m * 9 + 4], want, 1e-4);
    }
    kl_tensor_free(x), kl_tensor_free(y);
    kl_graph_free(g);
}

/* ---- MaxPool on int8/uint8 with indices in both storage orders (3-D) ---- */

KL_TEST(graph_maxpool_8bit_storage_order) {
    const int64_t xd[5] = {2, 2, 3, 4, 5}, ks[3] = {2, 2, 3}, st[3] = {1, 2, 2};
    const kl_dtype dts[2] = {KL_I8, KL_U8};
    for (int t = 0; t < 2; t++)
        for (int order = 0; order < 2; order++) {
            kl_err e = {0};
            kl_graph *g = ktg_new(12);
            ktg_io(g, "x", 0);
            int k = ktg_node(g, "MaxPool", "x", "y,i");
            ktg_attr_ints(g, k, "kernel_shape", 3, ks);
            ktg_attr_ints(g, k, "strides", 3, st);
            ktg_attr_i(g, k, "storage_order", order);
            ktg_io(g, "y", 1);
            ktg_io(g, "i", 1);
            kl_tensor *x = ktg_tensor(dts[t], 5, xd, NULL), *outs[2] = {NULL, NULL};
            for (int64_t j = 0; j < kl_tensor_numel(x); j++) /* distinct values: the argmax is unique */
                ktg_set(x, j, dts[t] == KL_I8 ? (double)((j * 37) % 240) - 120 : (double)((j * 37) % 240));
            KT_OK(ktg_run(g, &x, 1, outs, &e), &e);
            KT_EQ_INT(outs[0]->dtype, dts[t]);
            KT_EQ_INT(outs[0]->dims[2], 2);
            KT_EQ_INT(outs[0]->dims[3], 2);
            KT_EQ_INT(outs[0]->dims[4], 2);
            int64_t o = 0;
            for (int64_t nc = 0; nc < 4; nc++)
                for (int64_t a = 0; a < 2; a++)
                    for (int64_t b = 0; b < 2; b++)
                        for (int64_t c = 0; c < 2; c++, o++) {
                            double best = -1e9;
                            int64_t arg = -1;
                            for (int64_t u = 0; u < 2; u++)
                                for (int64_t v = 0; v < 2; v++)
                                    for (int64_t w = 0; w < 3; w++) {
                                        int64_t z = a + u, y = 2 * b + v, xx = 2 * c + w;
                                        double val = ktg_get(x, nc * 60 + (z * 4 + y) * 5 + xx);
                                        if (val > best) {
                                            best = val;
                                            arg = nc * 60 + (order ? (xx * 4 + y) * 3 + z : (z * 4 + y) * 5 + xx);
                                        }
                                    }
                            KT_NEAR(ktg_get(outs[0], o), best, 0);
                            KT_EQ_INT(((int64_t *)outs[1]->data)[o], arg);
                        }
            kl_tensor_free(x), kl_tensor_free(outs[0]), kl_tensor_free(outs[1]);
            kl_graph_free(g);
        }
}

/* ---- variadic Sum/Mean/Max/Min on float16 and bfloat16, broadcasting ---- */

KL_TEST(graph_variadic_half) {
    const char *ops[4] = {"Sum", "Mean", "Max", "Min"};
    const kl_dtype dts[2] = {KL_F16, KL_BF16};
    const int64_t d0[2] = {3, 4}, d1[1] = {4}, d2[2] = {3, 1};
    for (int t = 0; t < 2; t++)
        for (int op = 0; op < 4; op++) {
            kl_err e = {0};
            kl_graph *g = ktg_new(13);
            ktg_io(g, "a", 0), ktg_io(g, "b", 0), ktg_io(g, "c", 0);
            ktg_node(g, ops[op], "a,b,c", "y");
            ktg_io(g, "y", 1);
            kl_tensor *in[3] = {ktg_tensor(dts[t], 2, d0, NULL), ktg_tensor(dts[t], 1, d1, NULL),
                                ktg_tensor(dts[t], 2, d2, NULL)};
            for (int i = 0; i < 3; i++)
                for (int64_t j = 0; j < kl_tensor_numel(in[i]); j++)
                    ktg_set(in[i], j, (double)((int)(ktg_rand() * 64) - 32) / 8);
            kl_tensor *y = NULL;
            KT_OK(ktg_run(g, in, 3, &y, &e), &e);
            KT_EQ_INT(y->dtype, dts[t]);
            KT_EQ_INT(kl_tensor_numel(y), 12);
            for (int64_t r = 0; r < 3; r++)
                for (int64_t c = 0; c < 4; c++) {
                    double v[3] = {ktg_get(in[0], r * 4 + c), ktg_get(in[1], c), ktg_get(in[2], r)}, want;
                    if (op < 2) want = (v[0] + v[1] + v[2]) / (op ? 3.0 : 1.0);
                    else want = op == 2 ? fmax(fmax(v[0], v[1]), v[2]) : fmin(fmin(v[0], v[1]), v[2]);
                    KT_NEAR(ktg_get(y, r * 4 + c), want, fabs(want) * 8e-3 + 1e-3);
                }
            for (int i = 0; i < 3; i++) kl_tensor_free(in[i]);
            kl_tensor_free(y);
            kl_graph_free(g);
        }
}

/* ---- Conv weight/bias of another dtype than the input (fuzz finding: an
 * int16 weight was read as float32 past its end) ---- */

KL_TEST(graph_conv_weight_dtype_refused) {
    const int64_t wd[4] = {1, 1, 3, 3}, xd[4] = {1, 1, 7, 5}, m1 = 1;
    const kl_dtype bad[3] = {KL_I16, KL_F64, KL_F16};
    for (int b = 0; b < 4; b++) {
        kl_err e = {0};
        kl_graph *g = ktg_new(13);
        ktg_io(g, "x", 0), ktg_io(g, "w", 0), ktg_io(g, "bias", 0);
        const char *ins[3] = {"x", "w", "bias"}, *outs[1] = {"y"};
        kl_graph_add_node(g, "Conv", "typed_conv", ins, 3, outs, 1);
        ktg_io(g, "y", 1);
        kl_tensor *in[3] = {ktg_tensor(KL_F32, 4, xd, NULL), ktg_tensor(b < 3 ? bad[b] : KL_F32, 4, wd, NULL),
                            ktg_tensor(b < 3 ? KL_F32 : KL_I32, 1, &m1, NULL)},
                  *y = NULL;
        KT_CHECKF(ktg_run(g, in, 3, &y, &e) != KL_OK, "case %d accepted", b);
        KT_CONTAINS(kl_err_what(&e), "typed_conv");
        KT_CONTAINS(kl_err_what(&e), b < 3 ? "weight" : "bias");
        for (int i = 0; i < 3; i++) kl_tensor_free(in[i]);
        kl_tensor_free(y);
        kl_graph_free(g);
    }
}

/* ---- Pad through the graph: the row kernel (kl_pad) and the cases it
 * refuses (reflect pads beyond the axis, non-constant pads of an empty
 * axis) against NumPy's semantics element by element ---- */

static int64_t pad_ref_src(int64_t i, int64_t d, int md) { /* -1: the constant */
    if (i >= 0 && i < d) return i;
    if (!md || !d) return -1;
    if (md == 2) return i < 0 ? 0 : d - 1;
    if (md == 3) return ((i % d) + d) % d;
    if (d == 1) return 0;
    int64_t p = 2 * (d - 1);
    i = ((i % p) + p) % p;
    return i < d ? i : p - i;
}

KL_TEST(graph_pad_modes_reference) {
    const char *modes[4] = {"constant", "reflect", "edge", "wrap"};
    const int64_t shapes[3][2] = {{3, 5}, {1, 4}, {2, 0}};
    const int64_t padsets[4][4] = {{1, 2, 0, 3}, {0, 7, 2, 6}, {-1, 1, 1, -2}, {2, 0, 0, 1}};
    for (int md = 0; md < 4; md++)
        for (int sh = 0; sh < 3; sh++)
            for (int ps = 0; ps < 4; ps++) {
                const int64_t *d = shapes[sh], *p = padsets[ps];
                int64_t od[2] = {d[0] + p[0] + p[2], d[1] + p[1] + p[3]}, pd[1] = {4};
                if (od[0] < 0 || od[1] < 0 || (d[1] == 0 && p[1] + p[3] < 0)) continue;
                kl_err e = {0};
                kl_graph *g = ktg_new(13);
                ktg_io(g, "x", 0);
                kl_tensor *pt = ktg_tensor(KL_I64, 1, pd, p), *cv = ktg_tensor(KL_F32, 0, NULL, NULL);
                ((float *)cv->data)[0] = 7.5f;
                ktg_init(g, "p", pt);
                ktg_init(g, "v", cv);
                int k = ktg_node(g, "Pad", "x,p,v", "y");
                ktg_attr_s(g, k, "mode", modes[md]);
                ktg_io(g, "y", 1);
                kl_tensor *x = ktg_tensor(KL_F32, 2, d, NULL), *y = NULL;
                for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = (float)i + 1;
                KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
                KT_EQ_INT(y->dims[0], od[0]);
                KT_EQ_INT(y->dims[1], od[1]);
                /* cropping first (negative pads), then padding of the cropped axes */
                int64_t c0 = d[0] + KL_MIN(p[0], 0) + KL_MIN(p[2], 0), c1 = d[1] + KL_MIN(p[1], 0) + KL_MIN(p[3], 0);
                for (int64_t a = 0; a < od[0]; a++)
                    for (int64_t b = 0; b < od[1]; b++) {
                        int64_t sa = pad_ref_src(a - KL_MAX(p[0], 0), c0, md),
                                sb = pad_ref_src(b - KL_MAX(p[1], 0), c1, md);
                        double want = sa < 0 || sb < 0
                            ? 7.5
                            : ((float *)x->data)[(sa + KL_MAX(-p[0], 0)) * d[1] + sb + KL_MAX(-p[1], 0)];
                        KT_CHECKF(((float *)y->data)[a * od[1] + b] == want,
                                  "%s %lldx%lld pads %d at (%lld,%lld): %g, want %g", modes[md], (long long)d[0],
                                  (long long)d[1], ps, (long long)a, (long long)b, ((float *)y->data)[a * od[1] + b],
                                  want);
                    }
                kl_tensor_free(pt), kl_tensor_free(cv), kl_tensor_free(x), kl_tensor_free(y);
                kl_graph_free(g);
            }
}

/* ---- Mul(x, HardSigmoid(x)) -> HardSwish fused into the Conv before it
 * (PyTorch's hardswish before opset 14; MobileNetV3) ---- */

static kl_graph *conv_hswish_graph(float alpha, int optimize, kl_err *e) {
    kl_graph *g = ktg_new(13);
    ktg_rand_state = 0x5eed; /* the same weights in every graph */
    ktg_io(g, "x", 0);
    int64_t wd[4] = {20, 3, 3, 3}, m = 20;
    kl_tensor *w = ktg_tensor(KL_F32, 4, wd, NULL), *b = ktg_tensor(KL_F32, 1, &m, NULL);
    for (int64_t i = 0; i < kl_tensor_numel(w); i++) ((float *)w->data)[i] = (float)(ktg_rand() * 2 - 1);
    for (int64_t i = 0; i < m; i++) ((float *)b->data)[i] = (float)(ktg_rand() * 4 - 2);
    ktg_init(g, "w", w), ktg_init(g, "b", b);
    kl_tensor_free(w), kl_tensor_free(b);
    int64_t pads[4] = {1, 1, 1, 1};
    ktg_attr_ints(g, ktg_node(g, "Conv", "x,w,b", "c"), "pads", 4, pads);
    int hs = ktg_node(g, "HardSigmoid", "c", "h");
    ktg_attr_f(g, hs, "alpha", alpha);
    ktg_attr_f(g, hs, "beta", 0.5f);
    ktg_node(g, "Mul", "h,c", "y"); /* either order */
    ktg_io(g, "y", 1);
    if (kl_graph_finalize(g, e) || (optimize && kl_graph_optimize(g, 1, e))) {
        kl_graph_free(g);
        return NULL;
    }
    return g;
}

static int live_ops(const kl_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += !g->nodes[i].dead && !strcmp(g->nodes[i].op_type, op);
    return c;
}

KL_TEST(graph_hardswish_fused_into_conv) {
    kl_err e = {0};
    const float sixth = (float)(1.0 / 6.0);
    for (int variant = 0; variant < 2; variant++) { /* 0: the hardswish gate, 1: another slope (left alone) */
        float alpha = variant ? 0.2f : sixth;
        kl_graph *ref = conv_hswish_graph(alpha, 0, &e), *opt = conv_hswish_graph(alpha, 1, &e);
        KT_CHECK(ref && opt);
        KT_EQ_INT(live_ops(opt, "HardSigmoid"), variant);
        KT_EQ_INT(live_ops(opt, "Mul"), variant);
        KT_EQ_INT(live_ops(opt, "HardSwish"), 0); /* fused into the conv when made */
        int fused = 0;
        for (int i = 0; i < opt->n_nodes; i++)
            if (!opt->nodes[i].dead && strstr(opt->nodes[i].op_type, "Conv"))
                fused = kl_gnode_attr_int(&opt->nodes[i], "_act", 0) == 3;
        KT_EQ_INT(fused, !variant);
        int64_t xd[4] = {2, 3, 9, 11};
        kl_tensor *x = ktg_tensor(KL_F32, 4, xd, NULL), *y0 = NULL, *y1 = NULL;
        for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = (float)(ktg_rand() * 6 - 3);
        KT_OK(ktg_run(ref, &x, 1, &y0, &e), &e);
        KT_OK(ktg_run(opt, &x, 1, &y1, &e), &e);
        KT_EQ_INT(kl_tensor_numel(y0), kl_tensor_numel(y1));
        for (int64_t i = 0; i < kl_tensor_numel(y0); i++) {
            float a = ((float *)y0->data)[i], b = ((float *)y1->data)[i];
            KT_CHECKF(fabsf(a - b) <= 1e-5f * fmaxf(1.0f, fabsf(a)), "element %lld: %g vs %g", (long long)i, a, b);
        }
        kl_tensor_free(x), kl_tensor_free(y0), kl_tensor_free(y1);
        kl_graph_free(ref), kl_graph_free(opt);
    }
}
