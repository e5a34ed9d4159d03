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
