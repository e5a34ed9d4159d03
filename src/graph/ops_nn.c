/* Neural-network operators on top of the tensor kernels: MatMul Gemm Conv
 * ConvTranspose MaxPool AveragePool Global*Pool BatchNormalization
 * LayerNormalization InstanceNormalization Softmax LogSoftmax Hardmax
 * Reduce* ArgMax ArgMin LRN TopK (Resize: ops_vision.c). f32 fast paths; other dtypes
 * through simple generic loops where the node tests need them. */
#include "graph/graph_int.h"
#include "graph/grad_int.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One output row (M == 1): a GEMV reads the weights once instead of packing
 * them for a GEMM on every call (the MLP batch-1 case). y = op(B)^T x + bias. */
static void gemv_row(int transB, int64_t N, int64_t K, const float *x, const float *B, const float *bias, int act,
                     float lo, float hi, float *y) {
    if (transB) cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)N, (int)K, 1.f, B, (int)K, x, 1, 0.f, y, 1);
    else cblas_sgemv(CblasRowMajor, CblasTrans, (int)K, (int)N, 1.f, B, (int)N, x, 1, 0.f, y, 1);
    for (int64_t j = 0; j < N; j++) {
        float v = y[j] + (bias ? bias[j] : 0.f);
        if (act == 1) v = v > 0 ? v : 0;
        else if (act == 2) v = v < lo ? lo : v > hi ? hi : v;
        y[j] = v;
    }
}

#define NEED(t) do { if (!(t) || !(t)->data) return KL__NEED_DATA; } while (0)

static int need_f32(kl_gnode *n, const kl_tensor *t, kl_err *e) {
    if (t->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %s is not supported (float32 only)", n->opset, kl_dtype_name(t->dtype));
    return KL_OK;
}

/* ================================================================== *
 * MatMul, Gemm
 * ================================================================== */

static int matmul_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int r;
    int64_t d[KL_MAX_DIMS];
    if (in[0]->dtype != in[1]->dtype) return kl__fail_node(e, n, KL_ETYPE, "input dtypes differ");
    if (kl_matmul_shape(in[0]->rank, in[0]->dims, in[1]->rank, in[1]->dims, &r, d, e)) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, KL_ESHAPE, "%s", m);
    }
    kl__set_shape(&out[0], in[0]->dtype, r, d);
    *ws = kl__matmul_train_ws(n, in); /* non-constant 2-D weight (training): grad_int.h */
    return KL_OK;
}

static int matmul_generic(kl_tensor *const *in, kl_tensor *out) {
    /* batch broadcast over doubles; small tensors only (node tests, ints) */
    const kl_tensor *a = in[0], *b = in[1];
    int ra = a->rank, rb = b->rank;
    int64_t M = ra >= 2 ? a->dims[ra - 2] : 1, K = a->dims[ra - 1], N = rb >= 2 ? b->dims[rb - 1] : 1;
    int64_t MN = M * N;
    int64_t batch = MN ? kl_tensor_numel(out) / MN : 0;
    int br = out->rank - (ra >= 2 && rb >= 2 ? 2 : 1);
    for (int64_t bt = 0; bt < batch; bt++) {
        int64_t rem = bt, oa = 0, ob = 0, sa = 1, sb = 1;
        for (int d = br - 1; d >= 0; d--) {
            int64_t od = out->dims[d], c = rem % od;
            rem /= od;
            int ia = d - (br - (ra - 2)), ib = d - (br - (rb - 2));
            if (ra > 2 && ia >= 0) { if (a->dims[ia] != 1) oa += c * sa; sa *= a->dims[ia]; }
            if (rb > 2 && ib >= 0) { if (b->dims[ib] != 1) ob += c * sb; sb *= b->dims[ib]; }
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += kl__dbl_at(a, oa * M * K + i * K + k) * kl__dbl_at(b, ob * K * N + k * N + j);
                kl__set_dbl(out, bt * M * N + i * N + j, s);
            }
    }
    return KL_OK;
}

static int matmul_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (in[0]->dtype != KL_F32) return matmul_generic(in, out[0]);
    if (!n->priv && kl__matmul_train_run(n, in, out[0], x)) return KL_OK; /* training: B packed per call */
    if (n->priv && in[1]->rank == 2 && in[0]->rank >= 2) {
        /* constant 2-D weight: one GEMM over all rows of A */
        int64_t K = in[1]->dims[0], N = in[1]->dims[1], rows = K ? kl_tensor_numel(in[0]) / K : 0;
        kl_gemm_packed_f32(rows, N, K, in[0]->data, K, n->priv, NULL, NULL, (kl_act){KL_ACT_NONE, 0, 0}, out[0]->data, N,
                           x->pool);
        return KL_OK;
    }
    return kl_matmul_f32(in[0]->rank, in[0]->dims, in[0]->data, in[1]->rank, in[1]->dims, in[1]->data, out[0]->data, x->pool, e);
}

static int gemm_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->rank != 2 || in[1]->rank != 2) return kl__fail_node(e, n, KL_ESHAPE, "A and B must be 2-D");
    int ta = (int)kl_gnode_attr_int(n, "transA", 0), tb = (int)kl_gnode_attr_int(n, "transB", 0);
    int64_t M = ta ? in[0]->dims[1] : in[0]->dims[0], K = ta ? in[0]->dims[0] : in[0]->dims[1];
    int64_t K2 = tb ? in[1]->dims[1] : in[1]->dims[0], N = tb ? in[1]->dims[0] : in[1]->dims[1];
    if (K != K2) return kl__fail_node(e, n, KL_ESHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)K2);
    int64_t d[2] = {M, N};
    if (n_in > 2 && in[2]) {
        const kl_tensor *c = in[2];
        if (c->rank > 2 || (c->rank >= 1 && c->dims[c->rank - 1] != N && c->dims[c->rank - 1] != 1) ||
            (c->rank == 2 && c->dims[0] != M && c->dims[0] != 1))
            return kl__fail_node(e, n, KL_ESHAPE, "C does not broadcast to (%lld, %lld)", (long long)M, (long long)N);
    }
    kl__set_shape(&out[0], in[0]->dtype, 2, d);
    *ws = kl__gemm_train_ws(n, in, n_in, M, N, K); /* non-constant weights (training): grad_int.h */
    return KL_OK;
}

static int gemm_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int ta = (int)kl_gnode_attr_int(n, "transA", 0), tb = (int)kl_gnode_attr_int(n, "transB", 0);
    float alpha = kl_gnode_attr_float(n, "alpha", 1.f), beta = kl_gnode_attr_float(n, "beta", 1.f);
    int64_t M = out[0]->dims[0], N = out[0]->dims[1], K = ta ? in[0]->dims[0] : in[0]->dims[1];
    const kl_tensor *c = n_in > 2 ? in[2] : NULL;
    int act = (int)kl_gnode_attr_int(n, "_act", 0);
    if (in[0]->dtype != KL_F32) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += kl__dbl_at(in[0], ta ? k * M + i : i * K + k) * kl__dbl_at(in[1], tb ? j * K + k : k * N + j);
                s *= alpha;
                if (c) {
                    int64_t ci = c->rank == 2 ? (c->dims[0] == 1 ? 0 : i) * c->dims[1] + (c->dims[1] == 1 ? 0 : j) : c->rank == 1 ? (c->dims[0] == 1 ? 0 : j) : 0;
                    s += beta * kl__dbl_at(c, ci);
                }
                kl__set_dbl(out[0], i * N + j, s);
            }
        return KL_OK;
    }
    float *y = out[0]->data;
    const float *A = in[0]->data, *B = in[1]->data;
    kl_act a = {KL_ACT_NONE, 0, 0};
    if (act == 1) a.kind = KL_ACT_RELU;
    int bias_row = c && beta == 1.f && alpha == 1.f && ((c->rank == 1 && c->dims[0] == N) || (c->rank == 2 && c->dims[0] == 1 && c->dims[1] == N));
    if (n->priv && !ta && alpha == 1.f && (bias_row || !c)) {
        kl_gemm_packed_f32(M, N, K, A, K, n->priv, c ? c->data : NULL, NULL, a, y, N, x->pool);
        return KL_OK;
    }
    if (!n->priv && kl__gemm_train_run(n, in, n_in, out[0], M, N, K, a, x)) return KL_OK; /* training: B packed per call */
    if (M == 1 && !ta && (bias_row || !c) && alpha == 1.f && N < INT32_MAX && K < INT32_MAX) {
        gemv_row(tb, N, K, A, B, c ? c->data : NULL, act, 0, 0, y);
        return KL_OK;
    }
    if (bias_row) {
        kl_gemm_bias_act_f32(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, c->data, a, y, N, x->pool);
        return KL_OK;
    }
    float b2 = 0.f;
    if (c && beta != 0.f) {
        const float *cd = c->data;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t ci = c->rank == 2 ? (c->dims[0] == 1 ? 0 : i) * c->dims[1] + (c->dims[1] == 1 ? 0 : j) : c->rank == 1 ? (c->dims[0] == 1 ? 0 : j) : 0;
                y[i * N + j] = beta * cd[ci];
            }
        b2 = 1.f;
    }
    kl_gemm_f32(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, b2, y, N, x->pool);
    if (act) kl_act_apply_f32(a, y, M * N, x->pool);
    return KL_OK;
}

/* keel::FusedMatMul(A, W, bias): MatMul with a 2-D weight, bias and an
 * optional activation, as one GEMM over A's flattened rows (made by the
 * MatMul+Add pass). */
/* A 4th input (made by the FusedMatMul+Add pass) is a residual added before
 * the activation: in the GEMM epilogue when it has the output's shape, else a
 * broadcast Add after the GEMM (the output then has the broadcast shape). */
static int fmm_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    if (in[1]->rank != 2 || in[0]->rank < 1) return kl__fail_node(e, n, KL_ESHAPE, "weight must be 2-D");
    if ((rc = matmul_infer(n, in, 2, out, n_out, ws, e))) return rc;
    const kl_tensor *R = n_in > 3 ? in[3] : NULL;
    if (!R) return KL_OK;
    if (R->dtype != KL_F32) return kl__fail_node(e, n, KL_ETYPE, "residual must be float32");
    if (R->rank == out[0].rank && !memcmp(R->dims, out[0].dims, sizeof(int64_t) * (size_t)R->rank)) return KL_OK;
    int r;
    int64_t d[KL_MAX_DIMS], md[KL_MAX_DIMS];
    int mr = out[0].rank;
    memcpy(md, out[0].dims, sizeof md);
    if (kl_broadcast_shape(mr, md, R->rank, R->dims, &r, d, e)) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, KL_ESHAPE, "%s", m);
    }
    *ws = (size_t)kl_shape_numel(mr, md) * sizeof(float);
    kl__set_shape(&out[0], KL_F32, r, d);
    return KL_OK;
}
static int fmm_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t K = in[1]->dims[0], N = in[1]->dims[1], rows = K ? kl_tensor_numel(in[0]) / K : 0;
    kl_act a = {KL_ACT_NONE, 0, 0};
    int act = (int)kl_gnode_attr_int(n, "_act", 0);
    if (act == 1) a.kind = KL_ACT_RELU;
    else if (act == 2) { a.kind = KL_ACT_CLIP; a.a = kl_gnode_attr_float(n, "_act_a", 0); a.b = kl_gnode_attr_float(n, "_act_b", 6); }
    const kl_tensor *R = n_in > 3 ? in[3] : NULL;
    int ry = 0;
    int64_t md[KL_MAX_DIMS];
    if (R) {
        int rc = kl_matmul_shape(in[0]->rank, in[0]->dims, 2, in[1]->dims, &ry, md, e);
        if (rc) return rc;
    }
    if (R && (R->rank != ry || memcmp(R->dims, md, sizeof(int64_t) * (size_t)ry))) {
        /* broadcasting residual: GEMM + bias into the workspace, then Add and act */
        int rc;
        float *tmp = x->ws;
        kl_gemm_bias_act_f32(0, 0, rows, N, K, in[0]->data, K, in[1]->data, N, in[2]->data,
                             (kl_act){KL_ACT_NONE, 0, 0}, tmp, N, x->pool);
        if ((rc = kl_binary(KL_BIN_ADD, KL_F32, ry, md, tmp, R->rank, R->dims, R->data, out[0]->data, x->pool, e)))
            return rc;
        if (a.kind != KL_ACT_NONE) kl_act_apply_f32(a, out[0]->data, kl_tensor_numel(out[0]), x->pool);
        return KL_OK;
    }
    if (n->priv) {
        kl_gemm_packed_f32(rows, N, K, in[0]->data, K, n->priv, in[2]->data, R ? R->data : NULL, a, out[0]->data, N,
                           x->pool);
        return KL_OK;
    }
    if (R) {
        kl_gemm_bias_act_f32(0, 0, rows, N, K, in[0]->data, K, in[1]->data, N, in[2]->data,
                             (kl_act){KL_ACT_NONE, 0, 0}, out[0]->data, N, x->pool);
        int rc = kl_binary(KL_BIN_ADD, KL_F32, out[0]->rank, out[0]->dims, out[0]->data, R->rank, R->dims, R->data,
                           out[0]->data, x->pool, e);
        if (rc) return rc;
        if (a.kind != KL_ACT_NONE) kl_act_apply_f32(a, out[0]->data, kl_tensor_numel(out[0]), x->pool);
        return KL_OK;
    }
    if (rows == 1 && N < INT32_MAX && K < INT32_MAX) {
        gemv_row(0, N, K, in[0]->data, in[1]->data, in[2]->data, act, a.a, a.b, out[0]->data);
        return KL_OK;
    }
    kl_gemm_bias_act_f32(0, 0, rows, N, K, in[0]->data, K, in[1]->data, N, in[2]->data, a, out[0]->data, N, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * Conv
 * ================================================================== */

int kl__conv_params(kl_gnode *n, kl_tensor *const *in, int n_in, kl_conv_params *p, kl_err *e) {
    const kl_tensor *X = in[0], *W = in[1];
    memset(p, 0, sizeof *p);
    int rc;
    if (X->rank < 3 || X->rank > 5 || W->rank != X->rank) return kl__fail_node(e, n, KL_ESHAPE, "input rank %d / weight rank %d (need 3-5, equal)", X->rank, W->rank);
    int nsp = X->rank - 2;
    p->nsp = nsp;
    p->N = X->dims[0]; p->C = X->dims[1]; p->M = W->dims[0];
    p->group = kl_gnode_attr_int(n, "group", 1);
    if (p->group <= 0 || p->C % p->group || p->M % p->group || W->dims[1] != p->C / p->group)
        return kl__fail_node(e, n, KL_ESHAPE, "channels %lld, weight %lldx%lld, group %lld do not match", (long long)p->C, (long long)W->dims[0], (long long)W->dims[1], (long long)p->group);
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape"), *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations"), *pd = kl_gnode_attr(n, "pads");
    if ((st && st->n && st->n != nsp) || (dl && dl->n && dl->n != nsp) || (pd && pd->n && pd->n != 2 * nsp))
        return kl__fail_node(e, n, KL_EINVAL, "strides/dilations/pads need %d/%d/%d entries for a rank-%d input", nsp,
                             nsp, 2 * nsp, X->rank);
    for (int i = 0; i < nsp; i++) {
        p->in[i] = X->dims[2 + i];
        p->k[i] = W->dims[2 + i];
        if (ks && ks->n && (ks->n != nsp || ks->ints[i] != p->k[i]))
            return kl__fail_node(e, n, KL_ESHAPE, "kernel_shape differs from the weight shape");
        p->stride[i] = st && st->n == nsp ? st->ints[i] : 1;
        p->dilation[i] = dl && dl->n == nsp ? dl->ints[i] : 1;
        p->pad_begin[i] = pd && pd->n == 2 * nsp ? pd->ints[i] : 0;
        p->pad_end[i] = pd && pd->n == 2 * nsp ? pd->ints[i + nsp] : 0;
        if (p->stride[i] <= 0 || p->dilation[i] <= 0) return kl__fail_node(e, n, KL_EINVAL, "strides/dilations must be positive");
    }
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int i = 0; i < nsp; i++) kl_auto_pad(p->in[i], p->k[i], p->stride[i], p->dilation[i], ap[5] == 'U', &p->pad_begin[i], &p->pad_end[i]);
    else if (!strcmp(ap, "VALID"))
        for (int i = 0; i < nsp; i++) p->pad_begin[i] = p->pad_end[i] = 0;
    if (n_in > 2 && in[2] && (in[2]->rank != 1 || in[2]->dims[0] != p->M)) return kl__fail_node(e, n, KL_ESHAPE, "bias must have %lld entries", (long long)p->M);
    int act = (int)kl_gnode_attr_int(n, "_act", 0);
    if (act == 1) p->act.kind = KL_ACT_RELU;
    else if (act == 3) p->act.kind = KL_ACT_HARDSWISH;
    else if (act == 2) { p->act.kind = KL_ACT_CLIP; p->act.a = kl_gnode_attr_float(n, "_act_a", 0); p->act.b = kl_gnode_attr_float(n, "_act_b", 6); }
    p->packed_w = n->priv;
    rc = kl_conv_prepare(p, e);
    if (rc) { char m[600]; snprintf(m, sizeof m, "%s", e ? e->msg : ""); return kl__fail_node(e, n, rc, "%s", m); }
    return KL_OK;
}

/* Load-time check of a Conv's geometry attributes: kernel_shape, strides and
 * dilations one entry per spatial axis, pads two, group >= 1, all agreeing
 * with each other and, when the weight is an initializer, with its rank and
 * spatial dims (the weight packing at load trusts them). */
static int conv_attr_len(const kl_gnode *n, const char *name, int per_axis, int *nsp, kl_err *e) {
    const kl_attr *a = kl_gnode_attr(n, name);
    if (!a || (a->type == KL_ATTR_INTS && !a->n)) return KL_OK; /* empty: the default */
    if (a->type != KL_ATTR_INTS || a->n % per_axis || a->n / per_axis < 1 || a->n / per_axis > 3)
        return kl__fail_node(e, n, KL_EINVAL, "%s has %d entries (%d per axis, 1-3 axes)", name, a->n, per_axis);
    if (*nsp && a->n / per_axis != *nsp)
        return kl__fail_node(e, n, KL_EINVAL, "%s has %d entries for %d spatial axes", name, a->n, *nsp);
    *nsp = a->n / per_axis;
    return KL_OK;
}

static int conv_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    int rc, nsp = 0;
    const kl_tensor *W = n->n_in > 1 && n->inputs[1] >= 0 ? kl__init_of(g, n->inputs[1]) : NULL;
    if (W && (W->rank < 3 || W->rank > 5)) return kl__fail_node(e, n, KL_ESHAPE, "weight rank %d (need 3-5)", W->rank);
    if (W) nsp = W->rank - 2;
    if ((rc = conv_attr_len(n, "kernel_shape", 1, &nsp, e)) || (rc = conv_attr_len(n, "strides", 1, &nsp, e)) ||
        (rc = conv_attr_len(n, "dilations", 1, &nsp, e)) || (rc = conv_attr_len(n, "pads", 2, &nsp, e)))
        return rc;
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape");
    for (int i = 0; ks && ks->n && W && i < nsp; i++)
        if (ks->ints[i] != W->dims[2 + i])
            return kl__fail_node(e, n, KL_ESHAPE, "kernel_shape[%d] = %lld differs from the weight's dim %d (%lld)", i,
                                 (long long)ks->ints[i], 2 + i, (long long)W->dims[2 + i]);
    if (kl_gnode_attr_int(n, "group", 1) < 1) return kl__fail_node(e, n, KL_EINVAL, "group must be >= 1");
    return KL_OK;
}

/* A 4th input (keel extension, made by the Conv+Add pass) is a residual added
 * before the fused activation: in the GEMM epilogue when it has the conv's
 * shape; otherwise (broadcasting Add) the conv goes to the workspace and a
 * broadcast Add follows. */
static int conv_res_shape(kl_gnode *n, const kl_conv_params *p, const kl_tensor *R, int *rank, int64_t *d, int *same,
                          kl_err *e) {
    int64_t cd[5] = {p->N, p->M, p->out[0], p->out[1], p->out[2]};
    *rank = p->nsp + 2;
    memcpy(d, cd, sizeof cd);
    *same = 1;
    if (!R) return KL_OK;
    if (R->dtype != KL_F32) return kl__fail_node(e, n, KL_ETYPE, "residual must be float32");
    *same = R->rank == *rank && !memcmp(R->dims, cd, sizeof(int64_t) * (size_t)*rank);
    if (*same) return KL_OK;
    if (kl_broadcast_shape(*rank, cd, R->rank, R->dims, rank, d, e)) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, KL_ESHAPE, "%s", m);
    }
    return KL_OK;
}

/* A float Conv: weight and bias of the input's dtype (kl__conv_params also
 * serves QLinearConv, whose input and weight differ). */
static int conv_dtypes(kl_gnode *n, kl_tensor *const *in, int n_in, kl_err *e) {
    int rc = kl__same_dtype(n, in[0], "the input", in[1], "the weight", e);
    if (!rc && n_in > 2 && in[2]) rc = kl__same_dtype(n, in[0], "the input", in[2], "the bias", e);
    return rc;
}

static int conv_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__conv64_infer(n, in, n_in, out, n_out, ws, e); /* float64: grad_nn.c */
    int rc, rank, same;
    if ((rc = need_f32(n, in[0], e)) || (rc = conv_dtypes(n, in, n_in, e))) return rc;
    kl_conv_params p;
    if ((rc = kl__conv_params(n, in, n_in, &p, e))) return rc;
    int64_t d[KL_MAX_DIMS];
    if ((rc = conv_res_shape(n, &p, n_in > 3 ? in[3] : NULL, &rank, d, &same, e))) return rc;
    kl__set_shape(&out[0], KL_F32, rank, d);
    *ws = kl_conv_workspace_bytes(&p);
    if (!same) { /* the conv's own output before the broadcast Add (out[i] is 0 beyond nsp) */
        int64_t vol = p.N * p.M;
        for (int i = 0; i < p.nsp; i++) vol *= p.out[i];
        *ws = ((*ws + 63) & ~(size_t)63) + (size_t)vol * sizeof(float);
    }
    return KL_OK;
}

static int conv_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__conv64_run(n, in, n_in, out, n_out, x, e); /* float64: grad_nn.c */
    kl_conv_params p;
    int rc = conv_dtypes(n, in, n_in, e), rank, same;
    if (rc || (rc = kl__conv_params(n, in, n_in, &p, e))) return rc;
    const kl_tensor *R = n_in > 3 ? in[3] : NULL;
    const float *bias = n_in > 2 && in[2] ? in[2]->data : NULL;
    int64_t d[KL_MAX_DIMS];
    if ((rc = conv_res_shape(n, &p, R, &rank, d, &same, e))) return rc;
    if (same) {
        p.residual = R ? R->data : NULL;
        return kl_conv_f32(&p, in[0]->data, in[1]->data, bias, out[0]->data, x->ws, x->pool, e);
    }
    size_t cw = (kl_conv_workspace_bytes(&p) + 63) & ~(size_t)63;
    float *tmp = (float *)((char *)x->ws + cw);
    kl_act act = p.act;
    p.act = (kl_act){KL_ACT_NONE, 0, 0};
    if ((rc = kl_conv_f32(&p, in[0]->data, in[1]->data, bias, tmp, cw ? x->ws : NULL, x->pool, e))) return rc;
    int64_t cd[5] = {p.N, p.M, p.out[0], p.out[1], p.out[2]};
    if ((rc = kl_binary(KL_BIN_ADD, KL_F32, p.nsp + 2, cd, tmp, R->rank, R->dims, R->data, out[0]->data, x->pool, e)))
        return rc;
    if (act.kind != KL_ACT_NONE) kl_act_apply_f32(act, out[0]->data, kl_tensor_numel(out[0]), x->pool);
    return KL_OK;
}

static void packed_free(void *p) { kl_mem_free(p); }

/* Gemm / MatMul / FusedMatMul with a constant 2-D float B: B panels. */
static int prepack_gemm(kl_graph *g, kl_gnode *n, kl_err *e) {
    const kl_tensor *W = g->values[n->inputs[1]].init;
    if (!W || W->dtype != KL_F32 || W->rank != 2 || !kl_tensor_is_contiguous(W)) return KL_OK;
    int tb = !strcmp(n->op_type, "Gemm") ? (int)kl_gnode_attr_int(n, "transB", 0) : 0;
    int64_t K = tb ? W->dims[1] : W->dims[0], N = tb ? W->dims[0] : W->dims[1];
    size_t nf = kl_gemm_packed_b_floats(K, N);
    if (!nf) return KL_OK;
    float *pk = kl_mem_alloc_e(nf * sizeof(float), KL_TAG_PARAMS, e);
    if (!pk) return e ? e->code : KL_ENOMEM;
    kl_gemm_pack_b(tb, K, N, W->data, W->dims[1], pk);
    n->priv = pk;
    n->priv_free = packed_free;
    return KL_OK;
}

int kl__prepack_node(kl_graph *g, kl_gnode *n, kl_err *e) {
    if (n->dead || n->priv || n->n_in < 2 || n->inputs[1] < 0) return KL_OK;
    int fmm = !strcmp(n->domain, "keel") && !strcmp(n->op_type, "FusedMatMul");
    if (fmm || (!*n->domain && (!strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "MatMul")))) return prepack_gemm(g, n, e);
    if (!strcmp(n->domain, "keel") && !strcmp(n->op_type, "NchwcConv")) return kl__nchwc_prepack(g, n, e);
    if (!*n->domain && (strstr(n->op_type, "QLinear") || strstr(n->op_type, "Integer")))
        return kl__quant_prepack(g, n, e);
    if (*n->domain || strcmp(n->op_type, "Conv")) return KL_OK;
    const kl_tensor *W = g->values[n->inputs[1]].init;
    if (!W || W->dtype != KL_F32 || W->rank < 3 || W->rank > 5 || !kl_tensor_is_contiguous(W)) return KL_OK;
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = W->rank - 2;
    p.M = W->dims[0];
    p.group = kl_gnode_attr_int(n, "group", 1);
    if (p.group <= 0 || p.M % p.group) return KL_OK;
    p.C = W->dims[1] * p.group;
    for (int i = 0; i < p.nsp; i++) p.k[i] = W->dims[2 + i];
    size_t nf = kl_conv_packed_floats(&p);
    if (!nf) return KL_OK;
    float *pk = kl_mem_alloc_e(nf * sizeof(float), KL_TAG_PARAMS, e);
    if (!pk) return e ? e->code : KL_ENOMEM;
    kl_conv_pack_weights(&p, W->data, pk);
    n->priv = pk;
    n->priv_free = packed_free;
    return KL_OK;
}

/* ConvTranspose: direct scatter (simple, correct; not a hot path here). */
static int convt_params(kl_gnode *n, kl_tensor *const *in, int64_t *od, int64_t *pb, kl_err *e) {
    const kl_tensor *X = in[0], *W = in[1];
    int nsp = X->rank - 2;
    if (nsp < 1 || nsp > 3 || W->rank != X->rank) return kl__fail_node(e, n, KL_ESHAPE, "bad ranks");
    int64_t G = kl_gnode_attr_int(n, "group", 1);
    if (G <= 0 || X->dims[1] != W->dims[0] || X->dims[1] % G) return kl__fail_node(e, n, KL_ESHAPE, "channel mismatch");
    const kl_attr *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations"), *pd = kl_gnode_attr(n, "pads"),
                  *op = kl_gnode_attr(n, "output_padding"), *os = kl_gnode_attr(n, "output_shape");
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    od[0] = X->dims[0];
    od[1] = W->dims[1] * G;
    for (int i = 0; i < nsp; i++) {
        int64_t s = st && st->n == nsp ? st->ints[i] : 1, d = dl && dl->n == nsp ? dl->ints[i] : 1;
        int64_t k = W->dims[2 + i], o = op && op->n == nsp ? op->ints[i] : 0;
        int64_t b = pd && pd->n == 2 * nsp ? pd->ints[i] : 0, en = pd && pd->n == 2 * nsp ? pd->ints[i + nsp] : 0;
        int64_t full = s * (X->dims[2 + i] - 1) + o + (k - 1) * d + 1;
        if (os && os->n >= nsp) {
            int64_t want = os->ints[os->n - nsp + i], tot = full - want;
            int64_t half = tot >= 0 ? tot / 2 : -((-tot + 1) / 2); /* floor */
            if (!strcmp(ap, "SAME_UPPER")) { b = half; en = tot - half; } else { en = half; b = tot - half; }
        } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t want = X->dims[2 + i] * s, tot = full - want;
            if (tot < 0) tot = 0;
            if (!strcmp(ap, "SAME_UPPER")) { b = tot / 2; en = tot - b; } else { en = tot / 2; b = tot - en; }
        }
        pb[i] = b;
        od[2 + i] = full - b - en;
        if (od[2 + i] <= 0) return kl__fail_node(e, n, KL_ESHAPE, "non-positive output size");
    }
    return KL_OK;
}
static int convt_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    int64_t od[5], pb[3];
    if ((rc = convt_params(n, in, od, pb, e))) return rc;
    kl__set_shape(&out[0], KL_F32, in[0]->rank, od);
    return KL_OK;
}
static int convt_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t od[5], pb[3];
    int rc = convt_params(n, in, od, pb, e);
    if (rc) return rc;
    const kl_tensor *X = in[0], *W = in[1];
    int nsp = X->rank - 2;
    int64_t G = kl_gnode_attr_int(n, "group", 1);
    const kl_attr *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations");
    int64_t s[3] = {1, 1, 1}, dd[3] = {1, 1, 1}, in3[3] = {1, 1, 1}, k3[3] = {1, 1, 1}, o3[3] = {1, 1, 1}, p3[3] = {0, 0, 0};
    for (int i = 0; i < nsp; i++) {
        s[i] = st && st->n == nsp ? st->ints[i] : 1; dd[i] = dl && dl->n == nsp ? dl->ints[i] : 1;
        in3[i] = X->dims[2 + i]; k3[i] = W->dims[2 + i]; o3[i] = od[2 + i]; p3[i] = pb[i];
    }
    int64_t N = X->dims[0], C = X->dims[1], Mg = W->dims[1], Cg = C / G, M = Mg * G;
    int64_t isz = in3[0] * in3[1] * in3[2], osz = o3[0] * o3[1] * o3[2], ksz = k3[0] * k3[1] * k3[2];
    float *y = out[0]->data;
    const float *xd = X->data, *w = W->data, *bias = n_in > 2 && in[2] ? in[2]->data : NULL;
    for (int64_t b = 0; b < N; b++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t i = 0; i < osz; i++) y[(b * M + m) * osz + i] = bias ? bias[m] : 0.f;
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            int64_t g = c / Cg;
            for (int64_t ml = 0; ml < Mg; ml++) {
                int64_t m = g * Mg + ml;
                const float *wk = w + (c * Mg + ml) * ksz;
                for (int64_t i0 = 0; i0 < in3[0]; i0++) for (int64_t i1 = 0; i1 < in3[1]; i1++) for (int64_t i2 = 0; i2 < in3[2]; i2++) {
                    float v = xd[(b * C + c) * isz + (i0 * in3[1] + i1) * in3[2] + i2];
                    for (int64_t k0 = 0; k0 < k3[0]; k0++) {
                        int64_t o0 = i0 * s[0] + k0 * dd[0] - p3[0];
                        if (o0 < 0 || o0 >= o3[0]) continue;
                        for (int64_t k1 = 0; k1 < k3[1]; k1++) {
                            int64_t o1 = i1 * s[1] + k1 * dd[1] - p3[1];
                            if (o1 < 0 || o1 >= o3[1]) continue;
                            for (int64_t k2 = 0; k2 < k3[2]; k2++) {
                                int64_t o2 = i2 * s[2] + k2 * dd[2] - p3[2];
                                if (o2 < 0 || o2 >= o3[2]) continue;
                                y[(b * M + m) * osz + (o0 * o3[1] + o1) * o3[2] + o2] += v * wk[(k0 * k3[1] + k1) * k3[2] + k2];
                            }
                        }
                    }
                }
            }
        }
    return KL_OK;
}

/* ================================================================== *
 * Pooling
 * ================================================================== */

static int pool_params(kl_gnode *n, const kl_tensor *X, kl_pooling_params *p, kl_err *e) {
    memset(p, 0, sizeof *p);
    if (X->rank < 3 || X->rank > 5) return kl__fail_node(e, n, KL_ESHAPE, "input rank %d (need 3-5)", X->rank);
    int nsp = X->rank - 2;
    p->nsp = nsp;
    p->N = X->dims[0]; p->C = X->dims[1];
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape"), *st = kl_gnode_attr(n, "strides"), *dl = kl_gnode_attr(n, "dilations"), *pd = kl_gnode_attr(n, "pads");
    if (!ks || ks->n != nsp) return kl__fail_node(e, n, KL_EINVAL, "kernel_shape needs %d entries", nsp);
    for (int i = 0; i < nsp; i++) {
        p->in[i] = X->dims[2 + i];
        p->k[i] = ks->ints[i];
        p->stride[i] = st && st->n == nsp ? st->ints[i] : 1;
        p->dilation[i] = dl && dl->n == nsp ? dl->ints[i] : 1;
        p->pad_begin[i] = pd && pd->n == 2 * nsp ? pd->ints[i] : 0;
        p->pad_end[i] = pd && pd->n == 2 * nsp ? pd->ints[i + nsp] : 0;
        if (p->k[i] <= 0 || p->stride[i] <= 0 || p->dilation[i] <= 0) return kl__fail_node(e, n, KL_EINVAL, "kernel/strides/dilations must be positive");
    }
    p->ceil_mode = (int)kl_gnode_attr_int(n, "ceil_mode", 0);
    p->count_include_pad = (int)kl_gnode_attr_int(n, "count_include_pad", 0);
    const char *ap = kl_gnode_attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int i = 0; i < nsp; i++) kl_auto_pad(p->in[i], p->k[i], p->stride[i], p->dilation[i], ap[5] == 'U', &p->pad_begin[i], &p->pad_end[i]);
    else if (!strcmp(ap, "VALID"))
        for (int i = 0; i < nsp; i++) p->pad_begin[i] = p->pad_end[i] = 0;
    int rc = kl_pooling_prepare(p, e);
    if (rc) { char m[600]; snprintf(m, sizeof m, "%s", e ? e->msg : ""); return kl__fail_node(e, n, rc, "%s", m); }
    return KL_OK;
}

/* MaxPool on int8/uint8 runs the float32 kernel on a widened copy (exact:
 * every 8-bit value is a float) in the workspace. */
static int pool_8bit(const kl_gnode *n, kl_dtype dt) {
    return (dt == KL_U8 || dt == KL_I8) && !strcmp(n->op_type, "MaxPool");
}

static int pool_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__pool64_infer(n, in, n_in, out, n_out, ws, e); /* float64: grad_nn.c */
    int rc, b8 = pool_8bit(n, in[0]->dtype);
    if (!b8 && (rc = need_f32(n, in[0], e))) return rc;
    kl_pooling_params p;
    if ((rc = pool_params(n, in[0], &p, e))) return rc;
    int64_t d[5] = {p.N, p.C, p.out[0], p.out[1], p.out[2]};
    kl__set_shape(&out[0], in[0]->dtype, p.nsp + 2, d);
    if (n_out > 1) kl__set_shape(&out[1], KL_I64, p.nsp + 2, d);
    if (b8) *ws = (size_t)(kl_tensor_numel(in[0]) + kl_shape_numel(p.nsp + 2, d)) * sizeof(float) + 128;
    return KL_OK;
}

/* storage_order=1: the argmax indices of the spatial axes in column-major
 * order (the last axis slowest), batch and channel offsets as in row-major. */
static void indices_col_major(const kl_pooling_params *p, int64_t *idx, int64_t count) {
    int64_t plane = 1;
    for (int i = 0; i < p->nsp; i++) plane *= p->in[i];
    for (int64_t k = 0; k < count; k++) {
        int64_t nc = idx[k] / plane, r = idx[k] % plane, col = 0, mul = 1;
        int64_t pos[3];
        for (int i = p->nsp - 1; i >= 0; i--) pos[i] = r % p->in[i], r /= p->in[i];
        for (int i = 0; i < p->nsp; i++) col += pos[i] * mul, mul *= p->in[i];
        idx[k] = nc * plane + col;
    }
}

static int pool_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__pool64_run(n, in, n_in, out, n_out, x, e); /* float64: grad_nn.c */
    kl_pooling_params p;
    int rc = pool_params(n, in[0], &p, e);
    if (rc) return rc;
    int64_t *idx = n_out > 1 && out[1] ? out[1]->data : NULL;
    if (pool_8bit(n, in[0]->dtype)) {
        float *xf = x->ws, *yf = xf + kl_tensor_numel(in[0]) + 16;
        for (int64_t i = 0; i < kl_tensor_numel(in[0]); i++) xf[i] = (float)kl__int_at(in[0], i);
        kl_maxpool_f32(&p, xf, yf, idx, x->pool);
        for (int64_t i = 0; i < kl_tensor_numel(out[0]); i++) kl__set_dbl(out[0], i, yf[i]);
    } else if (!strcmp(n->op_type, "MaxPool"))
        kl_maxpool_f32(&p, in[0]->data, out[0]->data, idx, x->pool);
    else
        kl_avgpool_f32(&p, in[0]->data, out[0]->data, x->pool);
    if (idx && kl_gnode_attr_int(n, "storage_order", 0)) indices_col_major(&p, idx, kl_tensor_numel(out[1]));
    return KL_OK;
}

static int gpool_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__pool64_infer(n, in, n_in, out, n_out, ws, e); /* float64: grad_nn.c */
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    if (in[0]->rank < 3) return kl__fail_node(e, n, KL_ESHAPE, "input rank %d < 3", in[0]->rank);
    int64_t d[KL_MAX_DIMS];
    for (int i = 0; i < in[0]->rank; i++) d[i] = i < 2 ? in[0]->dims[i] : 1;
    kl__set_shape(&out[0], KL_F32, in[0]->rank, d);
    return KL_OK;
}
static int gpool_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__pool64_run(n, in, n_in, out, n_out, x, e); /* float64: grad_nn.c */
    int64_t S = 1;
    for (int i = 2; i < in[0]->rank; i++) S *= in[0]->dims[i];
    if (!strcmp(n->op_type, "GlobalMaxPool")) kl_global_maxpool_f32(in[0]->dims[0], in[0]->dims[1], S, in[0]->data, out[0]->data, x->pool);
    else kl_global_avgpool_f32(in[0]->dims[0], in[0]->dims[1], S, in[0]->data, out[0]->data, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * Normalisation
 * ================================================================== */

static int same_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    return KL_OK;
}

static int bn_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->dtype == KL_F64 || kl_gnode_attr_int(n, "training_mode", 0) || n_out > 1) return kl__bn_ext_infer(n, in, n_in, out, n_out, ws, e); /* grad_nn.c */
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    if (kl_gnode_attr_int(n, "training_mode", 0) || n_out > 1) return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: training mode is not supported", n->opset);
    if (in[0]->rank < 2) return kl__fail_node(e, n, KL_ESHAPE, "input rank < 2");
    for (int i = 1; i < 5; i++)
        if (kl_tensor_numel(in[i]) != in[0]->dims[1]) return kl__fail_node(e, n, KL_ESHAPE, "input %d must have %lld entries", i, (long long)in[0]->dims[1]);
    kl__set_shape(&out[0], KL_F32, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int bn_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (in[0]->dtype == KL_F64 || kl_gnode_attr_int(n, "training_mode", 0) || n_out > 1) return kl__bn_ext_run(n, in, n_in, out, n_out, x, e); /* grad_nn.c */
    int64_t S = 1;
    for (int i = 2; i < in[0]->rank; i++) S *= in[0]->dims[i];
    kl_batchnorm_f32(in[0]->dims[0], in[0]->dims[1], S, in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                     kl_gnode_attr_float(n, "epsilon", 1e-5f), out[0]->data, x->pool);
    return KL_OK;
}

static int ln_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__ln64_infer(n, in, n_in, out, n_out, ws, e); /* float64: grad_nn.c */
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), in[0]->rank, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int64_t cols = 1;
    for (int i = (int)ax; i < in[0]->rank; i++) cols *= in[0]->dims[i];
    if (kl_tensor_numel(in[1]) != cols || (n_in > 2 && in[2] && kl_tensor_numel(in[2]) != cols))
        return kl__fail_node(e, n, KL_ESHAPE, "scale/bias must have %lld entries", (long long)cols);
    kl__set_shape(&out[0], KL_F32, in[0]->rank, in[0]->dims);
    int64_t d[KL_MAX_DIMS];
    for (int i = 0; i < in[0]->rank; i++) d[i] = i < ax ? in[0]->dims[i] : 1;
    for (int k = 1; k < n_out; k++) kl__set_shape(&out[k], KL_F32, in[0]->rank, d);
    return KL_OK;
}
static int ln_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    if (in[0]->dtype == KL_F64) return kl__ln64_run(n, in, n_in, out, n_out, x, e); /* float64: grad_nn.c */
    int64_t ax;
    kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), in[0]->rank, &ax);
    int64_t rows = 1, cols = 1;
    for (int i = 0; i < in[0]->rank; i++) { if (i < ax) rows *= in[0]->dims[i]; else cols *= in[0]->dims[i]; }
    kl_layernorm_f32(rows, cols, in[0]->data, in[1]->data, n_in > 2 && in[2] ? in[2]->data : NULL, kl_gnode_attr_float(n, "epsilon", 1e-5f),
                     out[0]->data, n_out > 1 && out[1] ? out[1]->data : NULL, n_out > 2 && out[2] ? out[2]->data : NULL, x->pool);
    return KL_OK;
}

static int in_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    if (in[0]->rank < 3) return kl__fail_node(e, n, KL_ESHAPE, "input rank < 3");
    kl__set_shape(&out[0], KL_F32, in[0]->rank, in[0]->dims);
    return KL_OK;
}
static int in_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t S = 1;
    for (int i = 2; i < in[0]->rank; i++) S *= in[0]->dims[i];
    kl_instancenorm_f32(in[0]->dims[0], in[0]->dims[1], S, in[0]->data, in[1]->data, in[2]->data, kl_gnode_attr_float(n, "epsilon", 1e-5f), out[0]->data, x->pool);
    return KL_OK;
}

static int lrn_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    float alpha = kl_gnode_attr_float(n, "alpha", 1e-4f), beta = kl_gnode_attr_float(n, "beta", 0.75f), bias = kl_gnode_attr_float(n, "bias", 1.f);
    int64_t size = kl_gnode_attr_int(n, "size", 1);
    int64_t N = in[0]->dims[0], C = in[0]->dims[1], S = 1;
    for (int i = 2; i < in[0]->rank; i++) S *= in[0]->dims[i];
    const float *xd = in[0]->data;
    float *y = out[0]->data;
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                double sq = 0;
                for (int64_t k = c - lo; k <= c + hi; k++)
                    if (k >= 0 && k < C) { double v = xd[(b * C + k) * S + s]; sq += v * v; }
                y[(b * C + c) * S + s] = (float)(xd[(b * C + c) * S + s] / pow(bias + alpha / size * sq, beta));
            }
    return KL_OK;
}

/* ================================================================== *
 * Softmax family
 * ================================================================== */

static int softmax_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int r = in[0]->rank;
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", n->opset < 13 ? 1 : -1), r, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int lg = !strcmp(n->op_type, "LogSoftmax"), hard = !strcmp(n->op_type, "Hardmax");
    int64_t d2[2], *dims = in[0]->dims;
    int rr = r, axis = (int)ax;
    if (n->opset < 13) {
        d2[0] = d2[1] = 1;
        for (int i = 0; i < r; i++) d2[i < ax ? 0 : 1] *= in[0]->dims[i];
        dims = d2; rr = 2; axis = 1;
    }
    if (r == 0) { rr = 1; d2[0] = 1; dims = d2; axis = 0; }
    if (hard) {
        int64_t outer = 1, inner = 1, D = dims[axis];
        for (int i = 0; i < axis; i++) outer *= dims[i];
        for (int i = axis + 1; i < rr; i++) inner *= dims[i];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                int64_t best = 0;
                for (int64_t k = 0; k < D; k++) {
                    double v = kl__dbl_at(in[0], (o * D + k) * inner + j), bv = kl__dbl_at(in[0], (o * D + best) * inner + j);
                    if (v > bv) best = k;
                }
                for (int64_t k = 0; k < D; k++) kl__set_dbl(out[0], (o * D + k) * inner + j, k == best);
            }
        return KL_OK;
    }
    if (in[0]->dtype != KL_F32) {
        int64_t outer = 1, inner = 1, D = dims[axis];
        for (int i = 0; i < axis; i++) outer *= dims[i];
        for (int i = axis + 1; i < rr; i++) inner *= dims[i];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                double mx = -INFINITY, s = 0;
                for (int64_t k = 0; k < D; k++) mx = fmax(mx, kl__dbl_at(in[0], (o * D + k) * inner + j));
                for (int64_t k = 0; k < D; k++) s += exp(kl__dbl_at(in[0], (o * D + k) * inner + j) - mx);
                for (int64_t k = 0; k < D; k++) {
                    double v = kl__dbl_at(in[0], (o * D + k) * inner + j) - mx;
                    kl__set_dbl(out[0], (o * D + k) * inner + j, lg ? v - log(s) : exp(v) / s);
                }
            }
        return KL_OK;
    }
    kl_softmax_f32(rr, dims, in[0]->data, axis, lg, out[0]->data, x->pool);
    return KL_OK;
}

/* keel::AddSoftmax(x, b): Softmax over the last axis of x + b (NumPy
 * broadcasting), made by the Add+Softmax pass (attention scores + mask);
 * f32 runs kl_softmax_add_f32 without materialising the sum. */
static int addsm_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int r;
    int64_t d[KL_MAX_DIMS];
    if (in[0]->dtype != in[1]->dtype) return kl__fail_node(e, n, KL_ETYPE, "inputs of different dtypes");
    if (kl_broadcast_shape(in[0]->rank, in[0]->dims, in[1]->rank, in[1]->dims, &r, d, e)) return kl__fail_node(e, n, KL_ESHAPE, "%s", e ? e->msg : "shapes do not broadcast");
    kl__set_shape(&out[0], in[0]->dtype, r, d);
    return KL_OK;
}

/* element strides of t seen with the (broadcast) dims of out, right-aligned */
static void bcast_strides(const kl_tensor *t, const kl_tensor *out, int64_t *st) {
    int off = out->rank - t->rank;
    int64_t s = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int j = i - off;
        st[i] = j < 0 || t->dims[j] == 1 ? 0 : s;
        if (j >= 0) s *= t->dims[j];
    }
}

static int addsm_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    kl_tensor *y = out[0];
    int r = y->rank;
    int64_t xs[KL_MAX_DIMS], bs[KL_MAX_DIMS];
    bcast_strides(in[0], y, xs);
    bcast_strides(in[1], y, bs);
    if (y->dtype == KL_F32) {
        kl_softmax_add_f32(r, y->dims, in[0]->data, xs, in[1]->data, bs, y->data, x->pool);
        return KL_OK;
    }
    /* other float dtypes: in doubles, row by row */
    int64_t R = r ? y->dims[r - 1] : 1, total = kl_tensor_numel(y);
    for (int64_t row = 0; R && row < total / R; row++) {
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < R; k++) {
            int64_t i = row * R + k, rem = i, ox = 0, ob = 0;
            for (int d = r - 1; d >= 0; d--) {
                int64_t ix = rem % y->dims[d];
                rem /= y->dims[d];
                ox += ix * xs[d];
                ob += ix * bs[d];
            }
            double v = kl__dbl_at(in[0], ox) + kl__dbl_at(in[1], ob);
            kl__set_dbl(y, i, v);
            mx = v != v || v > mx ? v : mx;
        }
        if (isinf(mx) && mx < 0) mx = 0;
        for (int64_t k = 0; k < R; k++) s += exp(kl__dbl_at(y, row * R + k) - mx);
        for (int64_t k = 0; k < R; k++) kl__set_dbl(y, row * R + k, exp(kl__dbl_at(y, row * R + k) - mx) / s);
    }
    return KL_OK;
}

/* ================================================================== *
 * Reductions, ArgMax/ArgMin
 * ================================================================== */

static const struct { const char *name; kl_reduce_op op; } reds[] = {
    {"ReduceSum", KL_RED_SUM}, {"ReduceMean", KL_RED_MEAN}, {"ReduceMax", KL_RED_MAX}, {"ReduceMin", KL_RED_MIN},
    {"ReduceProd", KL_RED_PROD}, {"ReduceSumSquare", KL_RED_SUM_SQUARE}, {"ReduceL1", KL_RED_L1},
    {"ReduceL2", KL_RED_L2}, {"ReduceLogSum", KL_RED_LOG_SUM}, {"ReduceLogSumExp", KL_RED_LOG_SUM_EXP},
};

static int red_axes(kl_gnode *n, kl_tensor *const *in, int n_in, uint32_t *mask, kl_err *e) {
    int r = in[0]->rank;
    int64_t axes[2 * KL_MAX_DIMS];
    int na = -1;
    int axes_input = !strcmp(n->op_type, "ReduceSum") ? n->opset >= 13 : n->opset >= 18;
    if (axes_input && n_in > 1 && in[1]) {
        if (!in[1]->data) return KL__NEED_DATA;
        na = (int)kl_tensor_numel(in[1]);
        if (na > 2 * KL_MAX_DIMS) return kl__fail_node(e, n, KL_EINVAL, "too many axes");
        for (int i = 0; i < na; i++) axes[i] = kl__int_at(in[1], i);
    } else {
        const kl_attr *a = kl_gnode_attr(n, "axes");
        if (a) {
            na = a->n > 2 * KL_MAX_DIMS ? 2 * KL_MAX_DIMS : a->n;
            for (int i = 0; i < na; i++) axes[i] = a->ints[i];
        }
    }
    *mask = 0;
    if (na <= 0) {
        if (na == 0 && kl_gnode_attr_int(n, "noop_with_empty_axes", 0)) return KL_OK;
        *mask = r ? (uint32_t)((1u << r) - 1) : 0;
        return KL_OK;
    }
    for (int i = 0; i < na; i++) {
        int64_t a;
        if (kl__norm_axis(axes[i], r, &a)) return kl__fail_node(e, n, KL_EINVAL, "axis %lld out of range", (long long)axes[i]);
        *mask |= 1u << a;
    }
    return KL_OK;
}

static int red_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    uint32_t mask;
    int rc = red_axes(n, in, n_in, &mask, e);
    if (rc) return rc;
    int keep = (int)kl_gnode_attr_int(n, "keepdims", 1);
    int64_t d[KL_MAX_DIMS];
    int o = 0;
    for (int i = 0; i < in[0]->rank; i++) {
        if (mask & (1u << i)) { if (keep) d[o++] = 1; }
        else d[o++] = in[0]->dims[i];
    }
    kl__set_shape(&out[0], in[0]->dtype, o, d);
    return KL_OK;
}

static int red_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    uint32_t mask;
    int rc = red_axes(n, in, n_in, &mask, e);
    if (rc) return rc;
    kl_reduce_op op = KL_RED_SUM;
    for (size_t i = 0; i < KL_ARRAY_LEN(reds); i++) if (!strcmp(reds[i].name, n->op_type)) op = reds[i].op;
    int r = in[0]->rank;
    if (in[0]->dtype == KL_F32) {
        kl_reduce_f32(op, r, in[0]->dims, in[0]->data, mask, out[0]->data, x->pool);
        return KL_OK;
    }
    /* generic (doubles) */
    int64_t m = kl_tensor_numel(out[0]), total = kl_tensor_numel(in[0]);
    int64_t od[KL_MAX_DIMS], ost[KL_MAX_DIMS], s = 1;
    for (int i = 0; i < r; i++) od[i] = mask & (1u << i) ? 1 : in[0]->dims[i];
    for (int i = r - 1; i >= 0; i--) { ost[i] = s; s *= od[i]; }
    double *acc = calloc((size_t)(m ? m : 1), sizeof(double));
    int64_t *cnt = calloc((size_t)(m ? m : 1), sizeof(int64_t));
    if (!acc || !cnt) { free(acc); free(cnt); return kl__fail_node(e, n, KL_ENOMEM, "out of memory"); }
    for (int64_t i = 0; i < m; i++) acc[i] = op == KL_RED_MAX ? -INFINITY : op == KL_RED_MIN ? INFINITY : op == KL_RED_PROD ? 1 : 0;
    for (int64_t i = 0; i < total; i++) {
        int64_t rem = i, o = 0;
        for (int d = r - 1; d >= 0; d--) { int64_t c = rem % in[0]->dims[d]; rem /= in[0]->dims[d]; if (!(mask & (1u << d))) o += c * ost[d]; }
        double v = kl__dbl_at(in[0], i);
        switch (op) {
        case KL_RED_MAX: if ((v > acc[o] || v != v) && acc[o] == acc[o]) acc[o] = v; break; /* NaN kept */
        case KL_RED_MIN: if ((v < acc[o] || v != v) && acc[o] == acc[o]) acc[o] = v; break;
        case KL_RED_PROD: acc[o] *= v; break;
        case KL_RED_SUM_SQUARE: case KL_RED_L2: acc[o] += v * v; break;
        case KL_RED_L1: acc[o] += fabs(v); break;
        case KL_RED_LOG_SUM_EXP: acc[o] += exp(v); break;
        default: acc[o] += v; break;
        }
        cnt[o]++;
    }
    for (int64_t i = 0; i < m; i++) {
        double v = acc[i];
        if (op == KL_RED_MEAN) v = cnt[i] ? v / cnt[i] : NAN;
        else if (op == KL_RED_L2) v = sqrt(v);
        else if (op == KL_RED_LOG_SUM || op == KL_RED_LOG_SUM_EXP) v = log(v);
        if (out[0]->dtype == KL_I64 && (op == KL_RED_SUM || op == KL_RED_PROD || op == KL_RED_MAX || op == KL_RED_MIN)) {
            /* exact integer path */
            int64_t iv = op == KL_RED_PROD ? 1 : op == KL_RED_MAX ? INT64_MIN : op == KL_RED_MIN ? INT64_MAX : 0;
            (void)iv;
        }
        kl__set_dbl(out[0], i, v);
    }
    free(acc);
    free(cnt);
    return KL_OK;
}

static int arg_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int64_t ax;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), in[0]->rank, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis out of range");
    int keep = (int)kl_gnode_attr_int(n, "keepdims", 1);
    int64_t d[KL_MAX_DIMS];
    int o = 0;
    for (int i = 0; i < in[0]->rank; i++) {
        if (i == ax) { if (keep) d[o++] = 1; }
        else d[o++] = in[0]->dims[i];
    }
    kl__set_shape(&out[0], KL_I64, o, d);
    return KL_OK;
}
static int arg_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax;
    kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), in[0]->rank, &ax);
    int last = (int)kl_gnode_attr_int(n, "select_last_index", 0), mx = !strcmp(n->op_type, "ArgMax");
    if (in[0]->dtype == KL_F32) {
        if (mx) kl_argmax_f32(in[0]->rank, in[0]->dims, in[0]->data, (int)ax, last, out[0]->data, x->pool);
        else kl_argmin_f32(in[0]->rank, in[0]->dims, in[0]->data, (int)ax, last, out[0]->data, x->pool);
        return KL_OK;
    }
    int64_t outer = 1, inner = 1, D = in[0]->dims[ax];
    for (int i = 0; i < ax; i++) outer *= in[0]->dims[i];
    for (int i = (int)ax + 1; i < in[0]->rank; i++) inner *= in[0]->dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            int64_t best = 0;
            double bv = kl__dbl_at(in[0], o * D * inner + j);
            for (int64_t k = 1; k < D && bv == bv; k++) { /* the first NaN wins (NumPy) */
                double v = kl__dbl_at(in[0], (o * D + k) * inner + j);
                if (v != v || (mx ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv)))) { bv = v; best = k; }
            }
            ((int64_t *)out[0]->data)[o * inner + j] = best;
        }
    return KL_OK;
}

/* ================================================================== *
 * TopK
 * ================================================================== */

static int topk_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    NEED(in[1]);
    if (kl_tensor_numel(in[1]) != 1) return kl__fail_node(e, n, KL_ESHAPE, "K must be a one-element tensor");
    int64_t ax, k = kl__int_at(in[1], 0);
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), in[0]->rank, &ax)) return kl__fail_node(e, n, KL_EINVAL, "axis");
    if (k < 0 || k > in[0]->dims[ax]) return kl__fail_node(e, n, KL_EINVAL, "k %lld out of range", (long long)k);
    int64_t d[KL_MAX_DIMS];
    memcpy(d, in[0]->dims, sizeof d);
    d[ax] = k;
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, d);
    kl__set_shape(&out[1], KL_I64, in[0]->rank, d);
    return KL_OK;
}
typedef struct { double v; int64_t i; } vi_t;
static int vi_desc(const void *a, const void *b) {
    const vi_t *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->i < y->i ? -1 : 1;
}
static int vi_asc(const void *a, const void *b) {
    const vi_t *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return x->i < y->i ? -1 : 1;
}
/* the k best of buf[0..D) into buf[0..k), sorted: a full sort when k is a
 * large part of D, else a bounded heap (worst on top) in O(D log k) */
static void topk_select(vi_t *buf, int64_t D, int64_t k, int (*better)(const void *, const void *)) {
    if (k == 0) return;
    if (k * 4 >= D) {
        qsort(buf, (size_t)D, sizeof(vi_t), better);
        return;
    }
    /* heap over buf[0..k): parent is better-ordered-last (the worst kept) */
    for (int64_t i = 1; i < k; i++)
        for (int64_t c = i; c > 0 && better(&buf[(c - 1) / 2], &buf[c]) < 0; c = (c - 1) / 2) {
            vi_t t = buf[c];
            buf[c] = buf[(c - 1) / 2];
            buf[(c - 1) / 2] = t;
        }
    for (int64_t i = k; i < D; i++) {
        if (better(&buf[i], &buf[0]) >= 0) continue;
        buf[0] = buf[i];
        for (int64_t p = 0;;) {
            int64_t l = 2 * p + 1, r = l + 1, w = p;
            if (l < k && better(&buf[w], &buf[l]) < 0) w = l;
            if (r < k && better(&buf[w], &buf[r]) < 0) w = r;
            if (w == p) break;
            vi_t t = buf[p];
            buf[p] = buf[w];
            buf[w] = t;
            p = w;
        }
    }
    qsort(buf, (size_t)k, sizeof(vi_t), better);
}

static int topk_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t ax, k = kl__int_at(in[1], 0);
    kl__norm_axis(kl_gnode_attr_int(n, "axis", -1), in[0]->rank, &ax);
    int largest = (int)kl_gnode_attr_int(n, "largest", 1);
    int64_t outer = 1, inner = 1, D = in[0]->dims[ax];
    for (int i = 0; i < ax; i++) outer *= in[0]->dims[i];
    for (int i = (int)ax + 1; i < in[0]->rank; i++) inner *= in[0]->dims[i];
    vi_t *buf = kl_mem_alloc_e(sizeof(vi_t) * (size_t)(D + 1), KL_TAG_WORKSPACE, e);
    if (!buf) return kl__fail_node(e, n, KL_ENOMEM, "out of memory");
    const float *xf = in[0]->dtype == KL_F32 ? in[0]->data : NULL;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            for (int64_t t = 0; t < D; t++) {
                int64_t src = (o * D + t) * inner + j;
                buf[t].v = xf ? (double)xf[src] : kl__dbl_at(in[0], src);
                buf[t].i = t;
            }
            topk_select(buf, D, k, largest ? vi_desc : vi_asc);
            for (int64_t t = 0; t < k; t++) {
                int64_t oi = (o * k + t) * inner + j;
                kl__set_dbl(out[0], oi, buf[t].v);
                ((int64_t *)out[1]->data)[oi] = buf[t].i;
            }
        }
    kl_mem_free(buf);
    return KL_OK;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const char *const no_attrs[] = {NULL};
static const char *const a_fmm[] = {"_act", "_act_a", "_act_b", NULL};
static const char *const a_gemm[] = {"alpha", "beta", "transA", "transB", "_act", NULL};
static const char *const a_conv[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "_act", "_act_a", "_act_b", NULL};
static const char *const a_convt[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "output_padding", "output_shape", NULL};
static const char *const a_pool[] = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides", "storage_order", NULL};
static const char *const a_bn[] = {"epsilon", "momentum", "training_mode", "spatial", "_unbiased_var", NULL};
static const char *const a_ln[] = {"axis", "epsilon", "stash_type", NULL};
static const char *const a_eps[] = {"epsilon", NULL};
static const char *const a_axis[] = {"axis", NULL};
static const char *const a_red[] = {"axes", "keepdims", "noop_with_empty_axes", NULL};
static const char *const a_arg[] = {"axis", "keepdims", "select_last_index", NULL};
static const char *const a_lrn[] = {"alpha", "beta", "bias", "size", NULL};
static const char *const a_topk[] = {"axis", "largest", "sorted", NULL};

#define RED(name, since) {name, "", since, 17, 1, 2, 1, 1, a_red, NULL, red_infer, red_run, 0}

const kl_op kl__ops_nn[] = {
    {"MatMul", "", 1, 17, 2, 2, 1, 1, no_attrs, NULL, matmul_infer, matmul_run, 0},
    {"FusedMatMul", "keel", 1, 1, 3, 4, 1, 1, a_fmm, NULL, fmm_infer, fmm_run, 0},
    {"Gemm", "", 7, 17, 2, 3, 1, 1, a_gemm, NULL, gemm_infer, gemm_run, 0},
    {"Conv", "", 1, 17, 2, 4, 1, 1, a_conv, conv_check, conv_infer, conv_run, 0},
    {"ConvTranspose", "", 1, 17, 2, 3, 1, 1, a_convt, NULL, convt_infer, convt_run, 0},
    {"MaxPool", "", 8, 17, 1, 1, 1, 2, a_pool, NULL, pool_infer, pool_run, 0},
    {"AveragePool", "", 7, 17, 1, 1, 1, 1, a_pool, NULL, pool_infer, pool_run, 0},
    {"GlobalAveragePool", "", 1, 17, 1, 1, 1, 1, no_attrs, NULL, gpool_infer, gpool_run, 0},
    {"GlobalMaxPool", "", 1, 17, 1, 1, 1, 1, no_attrs, NULL, gpool_infer, gpool_run, 0},
    {"BatchNormalization", "", 7, 17, 5, 5, 1, 3, a_bn, NULL, bn_infer, bn_run, 0},
    {"LayerNormalization", "", 17, 17, 2, 3, 1, 3, a_ln, NULL, ln_infer, ln_run, 0},
    {"InstanceNormalization", "", 6, 17, 3, 3, 1, 1, a_eps, NULL, in_infer, in_run, 0},
    {"LRN", "", 1, 17, 1, 1, 1, 1, a_lrn, NULL, same_infer, lrn_run, 0},
    {"Softmax", "", 1, 17, 1, 1, 1, 1, a_axis, NULL, same_infer, softmax_run, 0},
    {"AddSoftmax", "keel", 1, 1, 2, 2, 1, 1, no_attrs, NULL, addsm_infer, addsm_run, 0},
    {"LogSoftmax", "", 1, 17, 1, 1, 1, 1, a_axis, NULL, same_infer, softmax_run, 0},
    {"Hardmax", "", 1, 17, 1, 1, 1, 1, a_axis, NULL, same_infer, softmax_run, 0},
    RED("ReduceSum", 1),
    RED("ReduceMean", 1),
    RED("ReduceMax", 1),
    RED("ReduceMin", 1),
    RED("ReduceProd", 1),
    RED("ReduceSumSquare", 1),
    RED("ReduceL1", 1),
    RED("ReduceL2", 1),
    RED("ReduceLogSum", 1),
    RED("ReduceLogSumExp", 1),
    {"ArgMax", "", 1, 17, 1, 1, 1, 1, a_arg, NULL, arg_infer, arg_run, 0},
    {"ArgMin", "", 1, 17, 1, 1, 1, 1, a_arg, NULL, arg_infer, arg_run, 0},
    {"TopK", "", 10, 17, 2, 2, 2, 2, a_topk, NULL, topk_infer, topk_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
