/* The quantized ONNX ops as graphs against references written from the
 * ONNX / ONNX Runtime semantics: QuantizeLinear/DequantizeLinear per axis
 * with a negative axis, QLinearMatMul with batch broadcasting and per-column
 * b parameters, MatMulInteger with per-row a zero points, QLinearConv with
 * per-channel int8 weights and an int32 bias (and its fused Relu), and
 * errors naming node, operator and opset. */
#include "../harness.h"
#include "kt_graph.h"

static int32_t sat(double v, int s8) {
    return v < (s8 ? -128 : 0) ? (s8 ? -128 : 0) : v > (s8 ? 127 : 255) ? (s8 ? 127 : 255) : (int32_t)v;
}

KL_TEST(graph_quant_qdq_axis) {
    kl_err e = {0};
    kl_graph *g = ktg_new(13);
    ktg_io(g, "x", 0);
    int64_t d[3] = {2, 3, 4}, d4[1] = {4};
    float sc[4] = {0.5f, 0.25f, 2.0f, 0.125f};
    int8_t zp[4] = {1, -2, 0, 3};
    kl_tensor *S = ktg_tensor(KL_F32, 1, d4, sc), *Z = ktg_tensor(KL_I8, 1, d4, zp);
    ktg_init(g, "s", S);
    ktg_init(g, "z", Z);
    int k = ktg_node(g, "QuantizeLinear", "x,s,z", "q");
    ktg_attr_i(g, k, "axis", -1);
    k = ktg_node(g, "DequantizeLinear", "q,s,z", "y");
    ktg_attr_i(g, k, "axis", -1);
    ktg_io(g, "q", 1);
    ktg_io(g, "y", 1);
    kl_tensor *X = ktg_tensor(KL_F32, 3, d, NULL);
    for (int i = 0; i < 24; i++) ktg_set(X, i, (ktg_rand() - 0.5) * 100);
    ktg_set(X, 0, 0.25); /* a tie: 0.25 / 0.5 = 0.5 -> 0, + 1 */
    kl_tensor *out[2] = {0};
    KT_OK(ktg_run(g, &X, 1, out, &e), &e);
    KT_EQ_INT(out[0]->dtype, KL_I8);
    for (int i = 0; i < 24; i++) {
        int c = i % 4;
        int32_t q = sat(nearbyint((double)((float)ktg_get(X, i) / sc[c])) + zp[c], 1);
        KT_EQ_INT(ktg_get(out[0], i), q);
        KT_CHECK((float)ktg_get(out[1], i) == (float)((q - zp[c]) * sc[c]));
    }
    KT_EQ_INT(ktg_get(out[0], 0), 1);
    kl_tensor_free(out[0]), kl_tensor_free(out[1]), kl_tensor_free(X), kl_tensor_free(S), kl_tensor_free(Z);
    kl_graph_free(g);
}

KL_TEST(graph_quant_qlinearmatmul) {
    kl_err e = {0};
    kl_graph *g = ktg_new(13);
    int64_t da[3] = {2, 3, 37}, db[2] = {37, 40}, dn[1] = {40}, d1[1] = {1};
    kl_tensor *B = ktg_tensor(KL_I8, 2, db, NULL), *BS = ktg_tensor(KL_F32, 1, dn, NULL),
              *BZ = ktg_tensor(KL_I8, 1, dn, NULL);
    for (int i = 0; i < 37 * 40; i++) ktg_set(B, i, (int)(ktg_rand() * 256) - 128);
    for (int i = 0; i < 40; i++) ktg_set(BS, i, 0.001 + 0.0005 * i), ktg_set(BZ, i, i % 3 - 1);
    float as = 0.02f, ys = 0.05f;
    uint8_t az = 120, yz = 100;
    kl_tensor *AS = ktg_tensor(KL_F32, 1, d1, &as), *AZ = ktg_tensor(KL_U8, 1, d1, &az),
              *YS = ktg_tensor(KL_F32, 1, d1, &ys), *YZ = ktg_tensor(KL_U8, 1, d1, &yz);
    ktg_io(g, "a", 0);
    ktg_init(g, "as", AS), ktg_init(g, "az", AZ), ktg_init(g, "b", B), ktg_init(g, "bs", BS), ktg_init(g, "bz", BZ);
    ktg_init(g, "ys", YS), ktg_init(g, "yz", YZ);
    ktg_node(g, "QLinearMatMul", "a,as,az,b,bs,bz,ys,yz", "y");
    ktg_io(g, "y", 1);
    kl_tensor *A = ktg_tensor(KL_U8, 3, da, NULL);
    for (int i = 0; i < 2 * 3 * 37; i++) ktg_set(A, i, (int)(ktg_rand() * 256));
    kl_tensor *out[1] = {0};
    KT_OK(ktg_run(g, &A, 1, out, &e), &e);
    KT_EQ_INT(out[0]->rank, 3);
    KT_EQ_INT(out[0]->dims[2], 40);
    for (int bt = 0; bt < 2; bt++)
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 40; n++) {
                int32_t acc = 0;
                for (int k = 0; k < 37; k++)
                    acc += ((int32_t)ktg_get(A, (bt * 3 + m) * 37 + k) - az) *
                        ((int32_t)ktg_get(B, k * 40 + n) - (int32_t)ktg_get(BZ, n));
                float mult = as * (float)ktg_get(BS, n) / ys;
                int32_t q = sat(nearbyint((double)((float)acc * mult)) + yz, 0);
                KT_EQ_INT(ktg_get(out[0], (bt * 3 + m) * 40 + n), q);
            }
    kl_tensor_free(out[0]), kl_tensor_free(A);
    kl_tensor *t[] = {B, BS, BZ, AS, AZ, YS, YZ};
    for (size_t i = 0; i < KL_ARRAY_LEN(t); i++) kl_tensor_free(t[i]);
    kl_graph_free(g);
}

KL_TEST(graph_quant_matmulinteger_row_zp) {
    kl_err e = {0};
    kl_graph *g = ktg_new(13);
    int64_t da[2] = {5, 9}, db[2] = {9, 6}, dm[1] = {5};
    kl_tensor *AZ = ktg_tensor(KL_I8, 1, dm, NULL);
    for (int i = 0; i < 5; i++) ktg_set(AZ, i, i * 7 - 10);
    ktg_io(g, "a", 0);
    ktg_io(g, "b", 0);
    ktg_init(g, "az", AZ);
    ktg_node(g, "MatMulInteger", "a,b,az", "y");
    ktg_io(g, "y", 1);
    kl_tensor *A = ktg_tensor(KL_I8, 2, da, NULL), *B = ktg_tensor(KL_U8, 2, db, NULL);
    for (int i = 0; i < 45; i++) ktg_set(A, i, (int)(ktg_rand() * 256) - 128);
    for (int i = 0; i < 54; i++) ktg_set(B, i, (int)(ktg_rand() * 256));
    kl_tensor *in[2] = {A, B}, *out[1] = {0};
    /* int8 A with a uint8 B: the spec allows mixed types */
    KT_OK(ktg_run(g, in, 2, out, &e), &e);
    KT_EQ_INT(out[0]->dtype, KL_I32);
    for (int m = 0; m < 5; m++)
        for (int n = 0; n < 6; n++) {
            int32_t acc = 0;
            for (int k = 0; k < 9; k++)
                acc += ((int32_t)ktg_get(A, m * 9 + k) - (int32_t)ktg_get(AZ, m)) * (int32_t)ktg_get(B, k * 6 + n);
            KT_EQ_INT(ktg_get(out[0], m * 6 + n), acc);
        }
    kl_tensor_free(out[0]), kl_tensor_free(A), kl_tensor_free(B), kl_tensor_free(AZ);
    kl_graph_free(g);
}

static void qlconv_case(int relu) {
    kl_err e = {0};
    kl_graph *g = ktg_new(13);
    int64_t dx[4] = {2, 4, 7, 6}, dw[4] = {6, 2, 3, 3}, dm[1] = {6}, d1[1] = {1};
    kl_tensor *W = ktg_tensor(KL_I8, 4, dw, NULL), *WS = ktg_tensor(KL_F32, 1, dm, NULL),
              *WZ = ktg_tensor(KL_I8, 1, dm, NULL), *BI = ktg_tensor(KL_I32, 1, dm, NULL);
    for (int i = 0; i < 6 * 2 * 9; i++) ktg_set(W, i, (int)(ktg_rand() * 255) - 127);
    for (int i = 0; i < 6; i++) ktg_set(WS, i, 0.01 * (i + 1)), ktg_set(BI, i, i * 50 - 120);
    float xs = 0.03f, ys = 0.07f;
    int8_t xz = -4, yz = 5;
    kl_tensor *XS = ktg_tensor(KL_F32, 1, d1, &xs), *XZ = ktg_tensor(KL_I8, 1, d1, &xz),
              *YS = ktg_tensor(KL_F32, 1, d1, &ys), *YZ = ktg_tensor(KL_I8, 1, d1, &yz);
    ktg_io(g, "x", 0);
    ktg_init(g, "xs", XS), ktg_init(g, "xz", XZ), ktg_init(g, "w", W), ktg_init(g, "ws", WS), ktg_init(g, "wz", WZ);
    ktg_init(g, "ys", YS), ktg_init(g, "yz", YZ), ktg_init(g, "b", BI);
    int k = ktg_node(g, "QLinearConv", "x,xs,xz,w,ws,wz,ys,yz,b", "y");
    int64_t pads[4] = {1, 0, 1, 2}, st[2] = {2, 1};
    ktg_attr_ints(g, k, "pads", 4, pads);
    ktg_attr_ints(g, k, "strides", 2, st);
    ktg_attr_i(g, k, "group", 2);
    if (relu) ktg_attr_i(g, k, "_qlo", yz), ktg_attr_i(g, k, "_qhi", 100);
    ktg_io(g, "y", 1);
    kl_tensor *X = ktg_tensor(KL_I8, 4, dx, NULL);
    for (int i = 0; i < 2 * 4 * 42; i++) ktg_set(X, i, (int)(ktg_rand() * 256) - 128);
    kl_tensor *out[1] = {0};
    KT_OK(ktg_run(g, &X, 1, out, &e), &e);
    int64_t OH = (7 + 1 + 1 - 3) / 2 + 1, OW = (6 + 0 + 2 - 3) + 1;
    KT_EQ_INT(out[0]->dims[2], OH);
    KT_EQ_INT(out[0]->dims[3], OW);
    for (int n = 0; n < 2; n++)
        for (int m = 0; m < 6; m++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    int32_t acc = (int32_t)ktg_get(BI, m);
                    int gi = m / 3;
                    for (int c = 0; c < 2; c++)
                        for (int kh = 0; kh < 3; kh++)
                            for (int kw = 0; kw < 3; kw++) {
                                int ih = oh * 2 - 1 + kh, iw = ow - 0 + kw;
                                if (ih < 0 || ih >= 7 || iw < 0 || iw >= 6) continue;
                                acc += ((int32_t)ktg_get(X, ((n * 4 + gi * 2 + c) * 7 + ih) * 6 + iw) - xz) *
                                    ((int32_t)ktg_get(W, ((m * 2 + c) * 3 + kh) * 3 + kw) - (int32_t)ktg_get(WZ, m));
                            }
                    float mult = xs * (float)ktg_get(WS, m) / ys;
                    int32_t q = sat(nearbyint((double)((float)acc * mult)) + yz, 1);
                    if (relu && q < yz) q = yz;
                    if (relu && q > 100) q = 100;
                    KT_EQ_INT(ktg_get(out[0], ((n * 6 + m) * OH + oh) * OW + ow), q);
                }
    kl_tensor_free(out[0]), kl_tensor_free(X);
    kl_tensor *t[] = {W, WS, WZ, BI, XS, XZ, YS, YZ};
    for (size_t i = 0; i < KL_ARRAY_LEN(t); i++) kl_tensor_free(t[i]);
    kl_graph_free(g);
}

KL_TEST(graph_quant_qlinearconv) {
    qlconv_case(0);
    if (!kt_failed()) qlconv_case(1);
}

KL_TEST(graph_quant_errors) {
    kl_err e = {0};
    int64_t d2[2] = {2, 3}, d4[1] = {4};
    /* a scale of the wrong length for the axis */
    kl_graph *g = ktg_new(13);
    ktg_io(g, "x", 0);
    kl_tensor *S = ktg_tensor(KL_F32, 1, d4, NULL);
    ktg_init(g, "s", S);
    ktg_node(g, "QuantizeLinear", "x,s", "q");
    ktg_io(g, "q", 1);
    kl_tensor *X = ktg_tensor(KL_F32, 2, d2, NULL), *out[1] = {0};
    KT_CHECK(ktg_run(g, &X, 1, out, &e) != 0);
    KT_CONTAINS(e.msg, "QuantizeLinear");
    KT_CONTAINS(e.msg, "scale has 4 entries, axis 1 has 3");
    kl_graph_free(g);
    /* an int input to QuantizeLinear */
    g = ktg_new(13);
    ktg_io(g, "x", 0);
    int64_t d1[1] = {1};
    kl_tensor *S1 = ktg_tensor(KL_F32, 1, d1, NULL);
    ktg_init(g, "s", S1);
    ktg_node(g, "QuantizeLinear", "x,s", "q");
    ktg_io(g, "q", 1);
    kl_tensor *XI = ktg_tensor(KL_I32, 2, d2, NULL);
    e = (kl_err){0};
    KT_CHECK(ktg_run(g, &XI, 1, out, &e) != 0);
    KT_CONTAINS(e.msg, "QuantizeLinear");
    KT_CONTAINS(e.msg, "opset 13: input is int32 (float32 only)");
    kl_graph_free(g);
    /* QLinearMatMul of float inputs */
    g = ktg_new(13);
    ktg_io(g, "a", 0);
    ktg_io(g, "b", 0);
    ktg_init(g, "s", S1);
    ktg_node(g, "MatMulInteger", "a,b", "y");
    ktg_io(g, "y", 1);
    kl_tensor *in[2] = {X, X};
    e = (kl_err){0};
    KT_CHECK(ktg_run(g, in, 2, out, &e) != 0);
    KT_CONTAINS(e.msg, "MatMulInteger");
    KT_CONTAINS(e.msg, "inputs are float32 and float32 (int8 or uint8)");
    kl_graph_free(g);
    kl_tensor_free(S), kl_tensor_free(S1), kl_tensor_free(X), kl_tensor_free(XI);
}

/* A QDQ Conv chain: x -> Q -> DQ -> Conv(DQ(W), DQ(bias)) -> Relu -> Q -> DQ
 * -> y, with the bias scale x_scale * w_scale (fused) or twice it (left in
 * float); the live op counts after kl_graph_optimize. */
static kl_graph *qdq_conv_graph(float bias_scale_factor) {
    kl_graph *g = ktg_new(13);
    int64_t dw[4] = {2, 3, 3, 3}, d2[1] = {2}, d1[1] = {1};
    int8_t w[54];
    for (int i = 0; i < 54; i++) w[i] = (int8_t)(i * 7 % 41 - 20);
    float ws[2] = {0.02f, 0.03f}, xs = 0.1f, ys = 0.2f,
          bs[2] = {xs * ws[0] * bias_scale_factor, xs * ws[1] * bias_scale_factor};
    int8_t wz[2] = {0, 0};
    int32_t bq[2] = {10, -20};
    uint8_t xz = 128, yz = 0;
    kl_tensor *t[] = {ktg_tensor(KL_I8, 4, dw, w),   ktg_tensor(KL_F32, 1, d2, ws),  ktg_tensor(KL_I8, 1, d2, wz),
                      ktg_tensor(KL_I32, 1, d2, bq), ktg_tensor(KL_F32, 1, d2, bs),  ktg_tensor(KL_F32, 1, d1, &xs),
                      ktg_tensor(KL_U8, 1, d1, &xz), ktg_tensor(KL_F32, 1, d1, &ys), ktg_tensor(KL_U8, 1, d1, &yz)};
    const char *names[] = {"wq", "ws", "wz", "bq", "bs", "xs", "xz", "ys", "yz"};
    for (int i = 0; i < 9; i++) ktg_init(g, names[i], t[i]), kl_tensor_free(t[i]);
    ktg_io(g, "x", 0);
    ktg_node(g, "QuantizeLinear", "x,xs,xz", "xq");
    ktg_node(g, "DequantizeLinear", "xq,xs,xz", "xd");
    int k = ktg_node(g, "DequantizeLinear", "wq,ws,wz", "wd");
    ktg_attr_i(g, k, "axis", 0);
    k = ktg_node(g, "DequantizeLinear", "bq,bs", "bd");
    ktg_attr_i(g, k, "axis", 0);
    k = ktg_node(g, "Conv", "xd,wd,bd", "c");
    int64_t pads[4] = {1, 1, 1, 1};
    ktg_attr_ints(g, k, "pads", 4, pads);
    ktg_node(g, "Relu", "c", "r");
    ktg_node(g, "QuantizeLinear", "r,ys,yz", "rq");
    ktg_node(g, "DequantizeLinear", "rq,ys,yz", "y");
    ktg_io(g, "y", 1);
    return g;
}

static int live_ops(const kl_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += !g->nodes[i].dead && !strcmp(g->nodes[i].op_type, op);
    return c;
}

KL_TEST(graph_quant_qdq_pass) {
    kl_err e = {0};
    for (int variant = 0; variant < 2; variant++) {
        kl_graph *g = qdq_conv_graph(variant ? 2.0f : 1.0f);
        KT_OK(kl_graph_finalize(g, &e), &e);
        KT_OK(kl_graph_optimize(g, 1, &e), &e);
        if (variant == 0) { /* fused: Q(x), QLinearConv with the Relu as clamps, the last DQ */
            KT_EQ_INT(live_ops(g, "QLinearConv"), 1);
            KT_EQ_INT(live_ops(g, "Conv") + live_ops(g, "Relu"), 0);
            KT_EQ_INT(live_ops(g, "DequantizeLinear"), 1);
        } else { /* a bias of another scale: the chain stays float */
            KT_EQ_INT(live_ops(g, "QLinearConv"), 0);
            KT_CHECK(live_ops(g, "Conv") + live_ops(g, "NchwcConv") == 1); /* float (maybe channel-blocked) */
        }
        /* both run and give a uint8-grid result */
        int64_t dx[4] = {1, 3, 5, 5};
        kl_tensor *X = ktg_tensor(KL_F32, 4, dx, NULL), *out[1] = {0};
        for (int i = 0; i < 75; i++) ktg_set(X, i, (ktg_rand() - 0.5) * 20);
        KT_OK(ktg_run(g, &X, 1, out, &e), &e);
        for (int i = 0; i < 50; i++) {
            double v = ktg_get(out[0], i) / 0.2;
            KT_CHECK(fabs(v - nearbyint(v)) < 1e-3 && v >= 0);
        }
        kl_tensor_free(out[0]), kl_tensor_free(X);
        kl_graph_free(g);
    }
}
