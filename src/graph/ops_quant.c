/* Quantized ONNX operators on the int8 kernels (src/tensor/quant.c,
 * qgemm.c, qconv.c): QuantizeLinear, DequantizeLinear (per tensor and per
 * axis, int8/uint8; int32 for DequantizeLinear), DynamicQuantizeLinear,
 * QLinearMatMul, MatMulInteger, QLinearConv, ConvInteger, and the keel ops
 * the QDQ fusion pass (qdq.c) writes: keel::QAdd (DQ + DQ -> Add -> Q in the
 * float operations of the unfused graph), the `_qlo`/`_qhi` attributes of
 * QLinearConv/QLinearMatMul/keel::QAdd (a Relu or Clip fused before the Q:
 * the output clamped to the quantized bounds, exact since Q is monotone)
 * and a 9th input of QLinearMatMul, an int32 bias per column (a Gemm's). Constant weights are packed once at load
 * (kl__quant_prepack), otherwise per run into the workspace.
 *
 * Requantization is ONNX Runtime's: multiplier = x_scale * w_scale[c] /
 * y_scale in float32, y = saturate(rint((float)acc * multiplier) + y_zp). */
#include "graph/graph_int.h"

#include <math.h>
#include <string.h>

/* ================================================================== *
 * Parameters: a scale (float32, scalar or 1-D) and zero point
 * ================================================================== */

static int is_q8(kl_dtype dt) { return dt == KL_I8 || dt == KL_U8; }

static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

/* scale s / zero point z (may be NULL) of `what`: float32, at most 1-D,
 * the same element count, z's dtype one of the allowed. count: the entries
 * a per-axis (per-channel) form must have (0: per tensor only). */
static int check_par(kl_gnode *n, const char *what, const kl_tensor *s, const kl_tensor *z, int allow_i32,
                     int64_t count, kl_err *e) {
    if (!s) return kl__fail_node(e, n, KL_EPARSE, "opset %d: %s scale is missing", n->opset, what);
    if (s->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: %s scale is %s (float32 only)", n->opset, what,
                             kl_dtype_name(s->dtype));
    int64_t c = kl_tensor_numel(s);
    if (s->rank > 1 || (c != 1 && (count <= 0 || c != count)))
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: %s scale has %lld entries (rank %d), expected 1%s%lld",
                             n->opset, what, (long long)c, s->rank, count > 0 ? " or " : "",
                             (long long)(count > 0 ? count : 1));
    if (!z) return KL_OK;
    if (!is_q8(z->dtype) && !(allow_i32 && z->dtype == KL_I32))
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: %s zero point is %s (int8 or uint8%s)", n->opset, what,
                             kl_dtype_name(z->dtype), allow_i32 ? " or int32" : "");
    if (kl_tensor_numel(z) != c || z->rank > 1)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: %s zero point has %lld entries, its scale %lld", n->opset,
                             what, (long long)kl_tensor_numel(z), (long long)c);
    return KL_OK;
}

/* A fused activation (Relu, Clip) before the Q as bounds in the output's
 * quantized domain: attributes _qlo/_qhi (qdq.c), narrowing [lo, hi]. */
static void clamp_of(const kl_gnode *n, int32_t *lo, int32_t *hi) {
    *lo = (int32_t)KL_MAX(*lo, kl_gnode_attr_int(n, "_qlo", *lo));
    *hi = (int32_t)KL_MIN(*hi, kl_gnode_attr_int(n, "_qhi", *hi));
}

static const kl_tensor *opt_in(kl_tensor *const *in, int n_in, int i) { return i < n_in ? in[i] : NULL; }

/* zero point value i (0 when absent) */
static int32_t zp_at(const kl_tensor *z, int64_t i) {
    if (!z || !z->data) return 0;
    return (int32_t)kl__int_at(z, kl_tensor_numel(z) == 1 ? 0 : i);
}

/* ================================================================== *
 * QuantizeLinear / DequantizeLinear
 * ================================================================== */

/* The (outer, len, inner) view of x for parameters along attribute axis
 * (per tensor: 1, 1, numel). */
static int qdq_view(kl_gnode *n, const kl_tensor *x, const kl_tensor *s, int64_t *outer, int64_t *len, int64_t *inner,
                    int *per_axis, kl_err *e) {
    int64_t c = kl_tensor_numel(s), ax = 0;
    *per_axis = c != 1 || s->rank == 1;
    *outer = 1, *len = 1, *inner = kl_tensor_numel(x);
    if (!*per_axis) return KL_OK;
    if (n->opset < 13 && c != 1)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: per-axis scale needs opset 13", n->opset);
    if (x->rank == 0 || kl__norm_axis(kl_gnode_attr_int(n, "axis", 1), x->rank, &ax))
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: axis %lld out of range for rank %d", n->opset,
                             (long long)kl_gnode_attr_int(n, "axis", 1), x->rank);
    if (c != x->dims[ax]) {
        if (c == 1) { /* a 1-element 1-D scale on an axis of another length: per tensor */
            *per_axis = 0;
            return KL_OK;
        }
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: scale has %lld entries, axis %lld has %lld", n->opset,
                             (long long)c, (long long)ax, (long long)x->dims[ax]);
    }
    *outer = 1, *inner = 1, *len = x->dims[ax];
    for (int i = 0; i < ax; i++) *outer *= x->dims[i];
    for (int i = (int)ax + 1; i < x->rank; i++) *inner *= x->dims[i];
    return KL_OK;
}

static int q_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    const kl_tensor *x = in[0], *s = in[1], *z = opt_in(in, n_in, 2);
    if (x->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: input is %s (float32 only)", n->opset,
                             kl_dtype_name(x->dtype));
    int64_t cnt = s && s->rank == 1 ? s->dims[0] : 1;
    int rc = check_par(n, "y", s, z, 0, cnt, e);
    if (rc) return rc;
    int64_t o, l, i;
    int pa;
    if ((rc = qdq_view(n, x, s, &o, &l, &i, &pa, e))) return rc;
    kl__set_shape(&out[0], z ? z->dtype : KL_U8, x->rank, x->dims);
    return KL_OK;
}

static int q_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    const kl_tensor *X = in[0], *s = in[1], *z = opt_in(in, n_in, 2);
    int64_t o, l, i;
    int pa, rc = qdq_view(n, X, s, &o, &l, &i, &pa, e);
    if (rc) return rc;
    kl_quantize_f32(X->data, o, l, i, s->data, z ? z->data : NULL, pa, out[0]->dtype, out[0]->data, x->pool);
    return KL_OK;
}

static int dq_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    const kl_tensor *x = in[0], *s = in[1], *z = opt_in(in, n_in, 2);
    if (!is_q8(x->dtype) && x->dtype != KL_I32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: input is %s (int8, uint8 or int32)", n->opset,
                             kl_dtype_name(x->dtype));
    int64_t cnt = s && s->rank == 1 ? s->dims[0] : 1;
    int rc = check_par(n, "x", s, z, 1, cnt, e);
    if (rc) return rc;
    if (z && z->dtype != x->dtype)
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: zero point is %s, the input %s", n->opset,
                             kl_dtype_name(z->dtype), kl_dtype_name(x->dtype));
    int64_t o, l, i;
    int pa;
    if ((rc = qdq_view(n, x, s, &o, &l, &i, &pa, e))) return rc;
    kl__set_shape(&out[0], KL_F32, x->rank, x->dims);
    return KL_OK;
}

static int dq_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    const kl_tensor *X = in[0], *s = in[1], *z = opt_in(in, n_in, 2);
    int64_t o, l, i;
    int pa, rc = qdq_view(n, X, s, &o, &l, &i, &pa, e);
    if (rc) return rc;
    kl_dequantize_f32(X->data, X->dtype, o, l, i, s->data, z ? z->data : NULL, pa, out[0]->data, x->pool);
    return KL_OK;
}

/* ================================================================== *
 * DynamicQuantizeLinear: x -> (y uint8, scale, zero point)
 * ================================================================== */

static int dyn_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (in[0]->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: input is %s (float32 only)", n->opset,
                             kl_dtype_name(in[0]->dtype));
    kl__set_shape(&out[0], KL_U8, in[0]->rank, in[0]->dims);
    if (n_out > 1) kl__set_shape(&out[1], KL_F32, 0, NULL);
    if (n_out > 2) kl__set_shape(&out[2], KL_U8, 0, NULL);
    return KL_OK;
}

static int dyn_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    float s;
    uint8_t z;
    int64_t cnt = kl_tensor_numel(in[0]);
    kl_dynamic_quant_params(in[0]->data, cnt, &s, &z);
    kl_quantize_f32(in[0]->data, 1, 1, cnt, &s, &z, 0, KL_U8, out[0]->data, x->pool);
    if (n_out > 1 && out[1]) *(float *)out[1]->data = s;
    if (n_out > 2 && out[2]) *(uint8_t *)out[2]->data = z;
    return KL_OK;
}

/* ================================================================== *
 * Matrix products: QLinearMatMul, MatMulInteger
 * ================================================================== */

/* The inputs of a quantized matmul in one form. */
typedef struct {
    const kl_tensor *a, *b, *as, *az, *bs, *bz, *ys, *yz, *bias;
    int linear; /* QLinearMatMul (requantized output) vs MatMulInteger (int32) */
} qmm;

static qmm qmm_of(kl_gnode *n, kl_tensor *const *in, int n_in) {
    qmm q = {0};
    q.linear = !strcmp(n->op_type, "QLinearMatMul");
    q.a = in[0];
    if (q.linear) {
        q.as = in[1], q.az = in[2], q.b = in[3], q.bs = in[4], q.bz = in[5], q.ys = in[6], q.yz = in[7];
        q.bias = opt_in(in, n_in, 8);
    } else {
        q.b = in[1], q.az = opt_in(in, n_in, 2), q.bz = opt_in(in, n_in, 3);
    }
    return q;
}

static int zp_dtype(kl_gnode *n, const char *what, const kl_tensor *z, const kl_tensor *t, int64_t count, kl_err *e) {
    if (!z) return KL_OK;
    if (z->dtype != t->dtype)
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: %s zero point is %s, its tensor %s", n->opset, what,
                             kl_dtype_name(z->dtype), kl_dtype_name(t->dtype));
    int64_t c = kl_tensor_numel(z);
    if (z->rank > 1 || (c != 1 && c != count))
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: %s zero point has %lld entries, expected 1 or %lld", n->opset,
                             what, (long long)c, (long long)count);
    return KL_OK;
}

static int qmm_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    qmm q = qmm_of(n, in, n_in);
    if (!is_q8(q.a->dtype) || !is_q8(q.b->dtype))
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: inputs are %s and %s (int8 or uint8)", n->opset,
                             kl_dtype_name(q.a->dtype), kl_dtype_name(q.b->dtype));
    int r, rc;
    int64_t d[KL_MAX_DIMS];
    if (kl_matmul_shape(q.a->rank, q.a->dims, q.b->rank, q.b->dims, &r, d, e)) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, KL_ESHAPE, "%s", m);
    }
    int64_t M = q.a->rank >= 2 ? q.a->dims[q.a->rank - 2] : 1, N = q.b->rank >= 2 ? q.b->dims[q.b->rank - 1] : 1;
    int64_t K = q.a->dims[q.a->rank - 1];
    if (q.linear) {
        if ((rc = check_par(n, "a", q.as, NULL, 0, M, e)) || (rc = check_par(n, "b", q.bs, NULL, 0, N, e)) ||
            (rc = check_par(n, "y", q.ys, q.yz, 0, 0, e)))
            return rc;
        if (kl_tensor_numel(q.as) != 1)
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: per-row a scale is not supported", n->opset);
        if (!q.yz) return kl__fail_node(e, n, KL_EPARSE, "opset %d: y_zero_point is missing", n->opset);
        if (q.bias && (q.bias->dtype != KL_I32 || q.bias->rank != 1 || q.bias->dims[0] != N))
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: bias must be int32 of %lld entries", n->opset,
                                 (long long)N);
    }
    if ((rc = zp_dtype(n, "a", q.az, q.a, M, e)) || (rc = zp_dtype(n, "b", q.bz, q.b, N, e))) return rc;
    if (q.linear && q.az && kl_tensor_numel(q.az) != 1)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: per-row a zero point is not supported", n->opset);
    kl__set_shape(&out[0], q.linear ? q.yz->dtype : KL_I32, r, d);
    /* B packed per product unless packed at load; mult per column; per-row a zero point fix-up */
    *ws = (n->priv ? 0 : al64(kl_qgemm_packed_bytes(K, N))) + al64((size_t)N * 4) * 2;
    return KL_OK;
}

/* Offsets of batch bt's A and B matrices (numpy broadcasting of the batch dims). */
static void batch_offsets(const kl_tensor *a, const kl_tensor *b, const kl_tensor *out, int64_t bt, int64_t *oa,
                          int64_t *ob) {
    int ra = a->rank, rb = b->rank, br = out->rank - (ra >= 2 && rb >= 2 ? 2 : 1);
    int64_t rem = bt, sa = 1, sb = 1;
    *oa = *ob = 0;
    for (int d = br - 1; d >= 0; d--) {
        int64_t od = out->dims[d], c = rem % od;
        rem /= od;
        int ia = d - (br - (ra - 2)), ib = d - (br - (rb - 2));
        if (ra > 2 && ia >= 0) {
            if (a->dims[ia] != 1) *oa += c * sa;
            sa *= a->dims[ia];
        }
        if (rb > 2 && ib >= 0) {
            if (b->dims[ib] != 1) *ob += c * sb;
            sb *= b->dims[ib];
        }
    }
}

static int qmm_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    qmm q = qmm_of(n, in, n_in);
    const kl_tensor *Y = out[0];
    int ra = q.a->rank, rb = q.b->rank;
    int64_t M = ra >= 2 ? q.a->dims[ra - 2] : 1, K = q.a->dims[ra - 1], N = rb >= 2 ? q.b->dims[rb - 1] : 1;
    if (M * N == 0) return KL_OK;
    int64_t batch = kl_tensor_numel(Y) / (M * N);
    char *w = x->ws;
    void *pb = n->priv;
    if (!pb) pb = w, w += al64(kl_qgemm_packed_bytes(K, N));
    float *mult = (float *)w;
    int per_col = 0;
    if (q.linear) {
        const float *as = q.as->data, *bs = q.bs->data, *ys = q.ys->data;
        per_col = kl_tensor_numel(q.bs) > 1;
        for (int64_t j = 0; j < (per_col ? N : 1); j++) mult[j] = as[0] * bs[j] / ys[0];
    }
    int row_zp = q.az && kl_tensor_numel(q.az) > 1;
    int32_t za = row_zp ? 0 : zp_at(q.az, 0);
    kl_qgemm_out o = {0};
    o.ysm = N, o.ysn = 1;
    if (q.linear) {
        o.mult = mult, o.mult_per_col = per_col, o.ydt = Y->dtype, o.yzp = zp_at(q.yz, 0);
        o.bias = q.bias ? q.bias->data : NULL;
        o.lo = Y->dtype == KL_I8 ? -128 : 0, o.hi = Y->dtype == KL_I8 ? 127 : 255;
        clamp_of(n, &o.lo, &o.hi);
    }
    size_t es = kl_dtype_size(Y->dtype);
    for (int64_t bt = 0; bt < batch; bt++) {
        int64_t oa, ob;
        batch_offsets(q.a, q.b, Y, bt, &oa, &ob);
        const uint8_t *ap = (const uint8_t *)q.a->data + oa * M * K, *bp = (const uint8_t *)q.b->data + ob * K * N;
        if (!n->priv) kl_qgemm_pack_b(K, N, bp, q.b->dtype == KL_U8, N, 1, pb);
        if (q.linear) o.y = (char *)Y->data + (size_t)(bt * M * N) * es;
        else o.c = (int32_t *)Y->data + bt * M * N;
        const void *zb = q.bz ? q.bz->data : NULL;
        int rc = kl_qgemm(M, N, K, ap, q.a->dtype == KL_U8, K, za, pb, zb, q.bz && kl_tensor_numel(q.bz) > 1, &o,
                          x->pool, e);
        if (rc) return kl__fail_node(e, n, rc, "int8 GEMM %lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        if (row_zp)
            kl_qgemm_row_zp(M, N, K, bp, q.b->dtype == KL_U8, zb, q.bz && kl_tensor_numel(q.bz) > 1, q.az->data,
                            q.az->dtype == KL_U8, o.c);
    }
    return KL_OK;
}

/* ================================================================== *
 * Convolutions: QLinearConv, ConvInteger
 * ================================================================== */

typedef struct {
    const kl_tensor *x, *xs, *xz, *w, *ws, *wz, *ys, *yz, *bias;
    int linear;
} qcv;

static qcv qcv_of(kl_gnode *n, kl_tensor *const *in, int n_in) {
    qcv q = {0};
    q.linear = !strcmp(n->op_type, "QLinearConv");
    q.x = in[0];
    if (q.linear) {
        q.xs = in[1], q.xz = in[2], q.w = in[3], q.ws = in[4], q.wz = in[5], q.ys = in[6], q.yz = in[7];
        q.bias = opt_in(in, n_in, 8);
    } else {
        q.w = in[1], q.xz = opt_in(in, n_in, 2), q.wz = opt_in(in, n_in, 3);
    }
    return q;
}

static int qcv_params(kl_gnode *n, const qcv *q, kl_conv_params *p, kl_err *e) {
    if (!is_q8(q->x->dtype) || !is_q8(q->w->dtype))
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: input %s, weight %s (int8 or uint8)", n->opset,
                             kl_dtype_name(q->x->dtype), kl_dtype_name(q->w->dtype));
    kl_tensor *xw[2] = {(kl_tensor *)q->x, (kl_tensor *)q->w};
    int rc = kl__conv_params(n, xw, 2, p, e);
    if (rc) return rc;
    p->packed_w = NULL;
    if (q->linear) {
        if ((rc = check_par(n, "x", q->xs, NULL, 0, 0, e)) || (rc = check_par(n, "w", q->ws, NULL, 0, p->M, e)) ||
            (rc = check_par(n, "y", q->ys, q->yz, 0, 0, e)))
            return rc;
        if (!q->yz) return kl__fail_node(e, n, KL_EPARSE, "opset %d: y_zero_point is missing", n->opset);
        if (q->bias && (q->bias->dtype != KL_I32 || kl_tensor_numel(q->bias) != p->M || q->bias->rank != 1))
            return kl__fail_node(e, n, KL_ESHAPE, "opset %d: bias must be int32 of %lld entries", n->opset,
                                 (long long)p->M);
    }
    if ((rc = zp_dtype(n, "x", q->xz, q->x, 1, e)) || (rc = zp_dtype(n, "w", q->wz, q->w, p->M, e))) return rc;
    return KL_OK;
}

static int qcv_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    qcv q = qcv_of(n, in, n_in);
    kl_conv_params p;
    int rc = qcv_params(n, &q, &p, e);
    if (rc) return rc;
    int64_t d[5] = {p.N, p.M, p.out[0], p.out[1], p.out[2]};
    kl__set_shape(&out[0], q.linear ? q.yz->dtype : KL_I32, p.nsp + 2, d);
    *ws = al64(kl_qconv_workspace_bytes(&p)) + (n->priv ? 0 : al64(kl_qconv_packed_bytes(&p))) + al64((size_t)p.M * 4);
    return KL_OK;
}

static int qcv_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    qcv q = qcv_of(n, in, n_in);
    kl_conv_params p;
    int rc = qcv_params(n, &q, &p, e);
    if (rc) return rc;
    char *w = x->ws;
    void *cws = w;
    w += al64(kl_qconv_workspace_bytes(&p));
    const void *pw = n->priv;
    int wu = q.w->dtype == KL_U8;
    if (!pw) {
        if ((rc = kl_qconv_pack(&p, q.w->data, wu, w, e))) return kl__fail_node(e, n, rc, "out of memory");
        pw = w;
        w += al64(kl_qconv_packed_bytes(&p));
    }
    kl_qgemm_out o = {0};
    const kl_tensor *Y = out[0];
    if (q.linear) {
        float *mult = (float *)w;
        const float *xs = q.xs->data, *wsc = q.ws->data, *ys = q.ys->data;
        int pc = kl_tensor_numel(q.ws) > 1;
        for (int64_t c = 0; c < p.M; c++) mult[c] = xs[0] * wsc[pc ? c : 0] / ys[0];
        o.mult = mult, o.mult_per_col = 1, o.y = Y->data, o.ydt = Y->dtype, o.yzp = zp_at(q.yz, 0);
        o.lo = Y->dtype == KL_I8 ? -128 : 0, o.hi = Y->dtype == KL_I8 ? 127 : 255;
        clamp_of(n, &o.lo, &o.hi);
        o.bias = q.bias ? q.bias->data : NULL;
    } else {
        o.c = Y->data;
    }
    rc = kl_qconv(&p, q.x->data, q.x->dtype == KL_U8, zp_at(q.xz, 0), pw, wu, q.wz ? q.wz->data : NULL,
                  q.wz && kl_tensor_numel(q.wz) > 1, &o, cws, x->pool, e);
    if (rc) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, rc, "%s", m);
    }
    return KL_OK;
}

/* ================================================================== *
 * keel::QAdd: Q(DQ(a) + DQ(b)) with the unfused graph's float operations
 * (inputs a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp; per tensor;
 * NumPy broadcasting; _qlo/_qhi: a fused Relu/Clip). One shape: one pass;
 * otherwise a and b are dequantized into the workspace and added by
 * kl_binary_f32 (the same float operations per element).
 * ================================================================== */

static int same_dims(const kl_tensor *a, const kl_tensor *b) {
    return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

static int qadd_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    const kl_tensor *a = in[0], *b = in[3];
    int rc, r;
    int64_t d[KL_MAX_DIMS];
    if ((rc = check_par(n, "a", in[1], in[2], 0, 0, e)) || (rc = check_par(n, "b", in[4], in[5], 0, 0, e)) ||
        (rc = check_par(n, "y", in[6], in[7], 0, 0, e)))
        return rc;
    if (!is_q8(a->dtype) || !is_q8(b->dtype))
        return kl__fail_node(e, n, KL_ETYPE, "inputs are %s and %s (int8 or uint8)", kl_dtype_name(a->dtype),
                             kl_dtype_name(b->dtype));
    if ((in[2] && in[2]->dtype != a->dtype) || (in[5] && in[5]->dtype != b->dtype))
        return kl__fail_node(e, n, KL_ETYPE, "zero points differ in dtype from their inputs");
    if (kl_broadcast_shape(a->rank, a->dims, b->rank, b->dims, &r, d, e)) {
        char m[600];
        snprintf(m, sizeof m, "%s", e ? e->msg : "");
        return kl__fail_node(e, n, KL_ESHAPE, "%s", m);
    }
    kl__set_shape(&out[0], in[7] ? in[7]->dtype : KL_U8, r, d);
    if (!same_dims(a, b)) {
        int64_t ny = 1;
        for (int i = 0; i < r; i++) ny *= d[i];
        *ws = al64((size_t)kl_tensor_numel(a) * 4) + al64((size_t)kl_tensor_numel(b) * 4) + al64((size_t)ny * 4);
    }
    return KL_OK;
}

static int qadd_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                    kl_err *e) {
    const kl_tensor *A = in[0], *B = in[3];
    int yu = out[0]->dtype == KL_U8;
    int32_t az = zp_at(in[2], 0), bz = zp_at(in[5], 0), yz = zp_at(in[7], 0), lo = yu ? 0 : -128, hi = yu ? 255 : 127;
    float as = *(const float *)in[1]->data, bs = *(const float *)in[4]->data, ys = *(const float *)in[6]->data;
    clamp_of(n, &lo, &hi);
    const float *sum = NULL;
    if (!same_dims(A, B)) {
        int64_t na = kl_tensor_numel(A), nb = kl_tensor_numel(B);
        float *fa = x->ws, *fb = (float *)((char *)fa + al64((size_t)na * 4)),
              *fy = (float *)((char *)fb + al64((size_t)nb * 4));
        kl_dequantize_f32(A->data, A->dtype, 1, 1, na, &as, in[2] ? in[2]->data : NULL, 0, fa, x->pool);
        kl_dequantize_f32(B->data, B->dtype, 1, 1, nb, &bs, in[5] ? in[5]->data : NULL, 0, fb, x->pool);
        kl_binary_f32(KL_BIN_ADD, A->rank, A->dims, fa, B->rank, B->dims, fb, fy, x->pool);
        sum = fy;
    }
    kl_qadd(A->data, A->dtype == KL_U8, az, as, B->data, B->dtype == KL_U8, bz, bs, sum, out[0]->data, yu, yz, ys, lo,
            hi, kl_tensor_numel(out[0]), x->pool);
    return KL_OK;
}

/* ================================================================== *
 * Packing constant weights at load
 * ================================================================== */

static void packed_free(void *p) { kl_mem_free(p); }

int kl__quant_prepack(kl_graph *g, kl_gnode *n, kl_err *e) {
    if (n->dead || n->priv || *n->domain) return KL_OK;
    int lin_conv = !strcmp(n->op_type, "QLinearConv"), int_conv = !strcmp(n->op_type, "ConvInteger");
    int lin_mm = !strcmp(n->op_type, "QLinearMatMul"), int_mm = !strcmp(n->op_type, "MatMulInteger");
    int wi = lin_conv || lin_mm ? 3 : 1;
    if (!(lin_conv || int_conv || lin_mm || int_mm) || n->n_in <= wi || n->inputs[wi] < 0) return KL_OK;
    const kl_tensor *W = kl__init_of(g, n->inputs[wi]);
    if (!W || !is_q8(W->dtype) || !kl_tensor_is_contiguous(W)) return KL_OK;
    size_t bytes;
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    if (lin_mm || int_mm) {
        if (W->rank != 2) return KL_OK;
        bytes = kl_qgemm_packed_bytes(W->dims[0], W->dims[1]);
    } else {
        if (W->rank < 3 || W->rank > 5) return KL_OK;
        p.nsp = W->rank - 2, p.M = W->dims[0], p.group = kl_gnode_attr_int(n, "group", 1);
        if (p.group <= 0 || p.M % p.group) return KL_OK;
        p.C = W->dims[1] * p.group;
        for (int i = 0; i < p.nsp; i++) p.k[i] = W->dims[2 + i];
        bytes = kl_qconv_packed_bytes(&p);
    }
    void *pk = kl_mem_alloc_e(bytes, KL_TAG_PARAMS, e);
    if (!pk) return e ? e->code : KL_ENOMEM;
    if (lin_mm || int_mm) kl_qgemm_pack_b(W->dims[0], W->dims[1], W->data, W->dtype == KL_U8, W->dims[1], 1, pk);
    else if (kl_qconv_pack(&p, W->data, W->dtype == KL_U8, pk, e)) {
        kl_mem_free(pk);
        return KL_ENOMEM;
    }
    n->priv = pk;
    n->priv_free = packed_free;
    return KL_OK;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const char *const a_q[] = {"axis", "saturate", NULL};
static const char *const a_conv[] = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                                     "_qlo",     "_qhi",      NULL};
static const char *const a_mm[] = {"_qlo", "_qhi", NULL};
static const char *const a_none[] = {NULL};

const kl_op kl__ops_quant[] = {
    {"QuantizeLinear", "", 10, 20, 2, 3, 1, 1, a_q, NULL, q_infer, q_run, 0},
    {"DequantizeLinear", "", 10, 20, 2, 3, 1, 1, a_q, NULL, dq_infer, dq_run, 0},
    {"DynamicQuantizeLinear", "", 11, 20, 1, 1, 3, 3, a_none, NULL, dyn_infer, dyn_run, 0},
    {"QLinearMatMul", "", 10, 20, 8, 9, 1, 1, a_mm, NULL, qmm_infer, qmm_run, 0},
    {"MatMulInteger", "", 10, 20, 2, 4, 1, 1, a_none, NULL, qmm_infer, qmm_run, 0},
    {"QLinearConv", "", 10, 20, 8, 9, 1, 1, a_conv, NULL, qcv_infer, qcv_run, 0},
    {"ConvInteger", "", 10, 20, 2, 4, 1, 1, a_conv, NULL, qcv_infer, qcv_run, 0},
    {"QAdd", "keel", 1, 1, 8, 8, 1, 1, a_mm, NULL, qadd_infer, qadd_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
