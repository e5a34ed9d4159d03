/* Miscellaneous operators: the loss functions NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (inference form, any float dtype via doubles). */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int loss_infer(kl_node *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    const kl_tensor *x = in[0], *t = in[1];
    if (x->rank < 2 || t->rank != x->rank - 1) return kl__fail_node(e, n, KL_ESHAPE, "input rank %d, target rank %d", x->rank, t->rank);
    if (t->dims[0] != x->dims[0]) return kl__fail_node(e, n, KL_ESHAPE, "batch sizes differ");
    for (int i = 1; i < t->rank; i++)
        if (t->dims[i] != x->dims[i + 1]) return kl__fail_node(e, n, KL_ESHAPE, "target dim %d differs", i);
    if (n_in > 2 && in[2] && kl_tensor_numel(in[2]) != x->dims[1]) return kl__fail_node(e, n, KL_ESHAPE, "weight must have C entries");
    const char *red = kl_node_attr_str(n, "reduction", "mean");
    if (!strcmp(red, "none")) kl__set_shape(&out[0], x->dtype, t->rank, t->dims);
    else if (!strcmp(red, "sum") || !strcmp(red, "mean")) kl__set_shape(&out[0], x->dtype, 0, NULL);
    else return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: reduction '%s'", n->opset, red);
    if (n_out > 1) kl__set_shape(&out[1], x->dtype, x->rank, x->dims);
    *ws = (size_t)kl_tensor_numel(x) * sizeof(double) + 64;
    return KL_OK;
}

/* loss over log-probabilities lp (N, C, S) as doubles */
static int nll(kl_node *n, const double *lp, const kl_tensor *x, const kl_tensor *t, const kl_tensor *w, kl_tensor *out, kl_err *e) {
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int i = 2; i < x->rank; i++) S *= x->dims[i];
    const kl_attr *ia = kl_node_attr(n, "ignore_index");
    int64_t ign = ia ? ia->i : INT64_MIN;
    const char *red = kl_node_attr_str(n, "reduction", "mean");
    double sum = 0, wsum = 0;
    for (int64_t b = 0; b < N; b++)
        for (int64_t s = 0; s < S; s++) {
            int64_t c = kl__int_at(t, b * S + s);
            double l = 0, wt = 0;
            if (c != ign) {
                if (c < 0 || c >= C) return kl__fail_node(e, n, KL_ERANGE, "target %lld out of range [0, %lld)", (long long)c, (long long)C);
                wt = w ? kl__dbl_at(w, c) : 1.0;
                l = -lp[(b * C + c) * S + s] * wt;
            }
            if (!strcmp(red, "none")) kl__set_dbl(out, b * S + s, l);
            sum += l;
            wsum += wt;
        }
    if (!strcmp(red, "sum")) kl__set_dbl(out, 0, sum);
    else if (!strcmp(red, "mean")) kl__set_dbl(out, 0, wsum != 0 ? sum / wsum : 0);
    return KL_OK;
}

static int nll_run(kl_node *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    double *lp = x->ws;
    int64_t m = kl_tensor_numel(in[0]);
    for (int64_t i = 0; i < m; i++) lp[i] = kl__dbl_at(in[0], i);
    return nll(n, lp, in[0], in[1], n_in > 2 ? in[2] : NULL, out[0], e);
}

static int sce_run(kl_node *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    double *lp = x->ws;
    const kl_tensor *X = in[0];
    int64_t N = X->dims[0], C = X->dims[1], S = 1;
    for (int i = 2; i < X->rank; i++) S *= X->dims[i];
    for (int64_t b = 0; b < N; b++)
        for (int64_t s = 0; s < S; s++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t c = 0; c < C; c++) mx = fmax(mx, kl__dbl_at(X, (b * C + c) * S + s));
            for (int64_t c = 0; c < C; c++) sum += exp(kl__dbl_at(X, (b * C + c) * S + s) - mx);
            for (int64_t c = 0; c < C; c++) {
                int64_t i = (b * C + c) * S + s;
                lp[i] = kl__dbl_at(X, i) - mx - log(sum);
                if (n_out > 1 && out[1]) kl__set_dbl(out[1], i, lp[i]);
            }
        }
    return nll(n, lp, X, in[1], n_in > 2 ? in[2] : NULL, out[0], e);
}

static const char *const a_loss[] = {"reduction", "ignore_index", NULL};

const kl_op kl__ops_misc[] = {
    {"NegativeLogLikelihoodLoss", "", 12, 17, 2, 3, 1, 1, a_loss, NULL, loss_infer, nll_run, 0},
    {"SoftmaxCrossEntropyLoss", "", 12, 17, 2, 3, 1, 2, a_loss, NULL, loss_infer, sce_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
