/* Tests of the audio ops (src/graph/ops_audio.c) beyond the node tests and
 * tests/integration/onnx_audio.py: DFT of a real signal against a direct DFT
 * on an odd length along a middle axis with an empty batch and a
 * zero-padding dft_length, STFT frames on a complex signal, a symmetric
 * window of size 1, and the refusals naming the node: onesided with
 * inverse, lengths out of range, a frame longer than the signal, a window
 * disagreeing with frame_length, MelWeightMatrix edges. */
#include "../harness.h"
#include "kt_graph.h"

static kl_tensor *i64_scalar(int64_t v) { return ktg_tensor(KL_I64, 0, NULL, &v); }

/* y = DFT(x) of a [2, 5, 3, 1] real signal along axis 1 with dft_length 7 */
KL_TEST(graph_dft_direct_odd_axis) {
    for (int empty = 0; empty < 2; empty++) {
        kl_err e = {0};
        kl_graph *g = ktg_new(17);
        ktg_io(g, "x", 0);
        kl_tensor *L = i64_scalar(7);
        ktg_init(g, "L", L);
        int k = ktg_node(g, "DFT", "x,L", "y");
        ktg_attr_i(g, k, "axis", 1);
        ktg_io(g, "y", 1);
        int64_t xd[4] = {empty ? 0 : 2, 5, 3, 1};
        kl_tensor *x = ktg_tensor(KL_F32, 4, xd, NULL), *y = NULL;
        for (int64_t i = 0; i < kl_tensor_numel(x); i++) ((float *)x->data)[i] = (float)(ktg_rand() * 2 - 1);
        KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
        KT_EQ_INT(y->rank, 4);
        KT_EQ_INT(y->dims[0], xd[0]);
        KT_EQ_INT(y->dims[1], 7);
        KT_EQ_INT(y->dims[2], 3);
        KT_EQ_INT(y->dims[3], 2);
        for (int64_t b = 0; b < xd[0]; b++)
            for (int64_t c = 0; c < 3; c++)
                for (int64_t f = 0; f < 7; f++) {
                    double re = 0, im = 0;
                    for (int64_t t = 0; t < 5; t++) { /* samples 5, 6: the zero padding */
                        double v = ((float *)x->data)[(b * 5 + t) * 3 + c], a = -2 * M_PI * (double)(f * t) / 7;
                        re += v * cos(a), im += v * sin(a);
                    }
                    const float *o = (const float *)y->data + ((b * 7 + f) * 3 + c) * 2;
                    KT_NEAR(o[0], re, 1e-5);
                    KT_NEAR(o[1], im, 1e-5);
                }
        kl_tensor_free(L), kl_tensor_free(x), kl_tensor_free(y);
        kl_graph_free(g);
    }
}

/* STFT of a complex [1, 10, 2] signal, frames of 4 every 3, two-sided */
KL_TEST(graph_stft_complex_frames) {
    kl_err e = {0};
    kl_graph *g = ktg_new(17);
    ktg_io(g, "x", 0);
    kl_tensor *st = i64_scalar(3), *fl = i64_scalar(4);
    ktg_init(g, "st", st), ktg_init(g, "fl", fl);
    int k = ktg_node(g, "STFT", "x,st,,fl", "y");
    ktg_attr_i(g, k, "onesided", 0);
    ktg_io(g, "y", 1);
    int64_t xd[3] = {1, 10, 2};
    kl_tensor *x = ktg_tensor(KL_F32, 3, xd, NULL), *y = NULL;
    for (int64_t i = 0; i < 20; i++) ((float *)x->data)[i] = (float)(ktg_rand() * 2 - 1);
    KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
    KT_EQ_INT(y->dims[1], 3);
    KT_EQ_INT(y->dims[2], 4);
    const float *s = x->data;
    for (int64_t fr = 0; fr < 3; fr++)
        for (int64_t f = 0; f < 4; f++) {
            double re = 0, im = 0;
            for (int64_t t = 0; t < 4; t++) {
                double a = -2 * M_PI * (double)(f * t) / 4, xr = s[(fr * 3 + t) * 2], xi = s[(fr * 3 + t) * 2 + 1];
                re += xr * cos(a) - xi * sin(a), im += xr * sin(a) + xi * cos(a);
            }
            KT_NEAR(((float *)y->data)[(fr * 4 + f) * 2], re, 1e-5);
            KT_NEAR(((float *)y->data)[(fr * 4 + f) * 2 + 1], im, 1e-5);
        }
    kl_tensor_free(st), kl_tensor_free(fl), kl_tensor_free(x), kl_tensor_free(y);
    kl_graph_free(g);
}

KL_TEST(graph_window_symmetric_size_one) {
    const char *ops[3] = {"HannWindow", "HammingWindow", "BlackmanWindow"};
    for (int o = 0; o < 3; o++) {
        kl_err e = {0};
        kl_graph *g = ktg_new(17);
        ktg_io(g, "n", 0);
        int k = ktg_node(g, ops[o], "n", "y");
        ktg_attr_i(g, k, "periodic", 0);
        ktg_attr_i(g, k, "output_datatype", 11); /* double */
        ktg_io(g, "y", 1);
        kl_tensor *n = i64_scalar(1), *y = NULL;
        KT_OK(ktg_run(g, &n, 1, &y, &e), &e);
        KT_EQ_INT(y->dtype, KL_F64);
        KT_EQ_INT(kl_tensor_numel(y), 1);
        KT_NEAR(((double *)y->data)[0], 1.0, 0);
        kl_tensor_free(n), kl_tensor_free(y);
        kl_graph_free(g);
    }
}

/* One node graph on x (float [1, 8, 1]) with extra scalar initializers. */
static int audio_err(const char *op, const char *ins, const char *attr, int64_t av, const int64_t *scalars, int ns,
                     const char *want) {
    kl_err e = {0};
    kl_graph *g = ktg_new(17);
    ktg_io(g, "x", 0);
    char nm[8];
    for (int i = 0; i < ns; i++) {
        snprintf(nm, sizeof nm, "s%d", i);
        kl_tensor *t = i64_scalar(scalars[i]);
        ktg_init(g, nm, t);
        kl_tensor_free(t);
    }
    int64_t wd = 5;
    kl_tensor *w = ktg_tensor(KL_F32, 1, &wd, NULL);
    ktg_init(g, "w", w);
    const char *iv[8], *ov[1] = {"y"};
    char buf[64];
    int ni = 0;
    snprintf(buf, sizeof buf, "%s", ins);
    for (char *p = buf, *q; p; p = q) {
        q = strchr(p, ',');
        if (q) *q++ = 0;
        iv[ni++] = p;
    }
    int k = kl_graph_add_node(g, op, "audio_node", iv, ni, ov, 1);
    if (attr) ktg_attr_i(g, k, attr, av);
    ktg_io(g, "y", 1);
    int64_t xd[3] = {1, 8, 1};
    kl_tensor *x = ktg_tensor(KL_F32, 3, xd, NULL), *y = NULL;
    int rc = ktg_run(g, &x, 1, &y, &e);
    int ok = rc != KL_OK && strstr(kl_err_what(&e), "audio_node") && strstr(kl_err_what(&e), want);
    if (!ok) fprintf(stderr, "%s: rc %d, '%s' (want '%s')\n", op, rc, kl_err_what(&e), want);
    kl_tensor_free(w), kl_tensor_free(x), kl_tensor_free(y);
    kl_graph_free(g);
    return ok;
}

KL_TEST(graph_audio_errors_name_the_node) {
    const int64_t zero = 0, big = 9, three = 3, four = 4;
    {
        int64_t v[1] = {0};
        KT_CHECK(audio_err("DFT", "x,s0", NULL, 0, v, 1, "dft_length = 0"));
    }
    KT_CHECK(audio_err("DFT", "x", "axis", 2, NULL, 0, "not a signal axis"));
    {
        int64_t v[2] = {three, big};
        KT_CHECK(audio_err("STFT", "x,s0,,s1", NULL, 0, v, 2, "exceeds the signal length"));
    }
    {
        int64_t v[2] = {three, four};
        KT_CHECK(audio_err("STFT", "x,s0,w,s1", NULL, 0, v, 2, "differs from the window"));
    }
    {
        int64_t v[1] = {zero};
        KT_CHECK(audio_err("STFT", "x,s0,w", NULL, 0, v, 1, "frame_step = 0"));
    }
    (void)zero;
}

KL_TEST(graph_dft_onesided_inverse_refused) {
    kl_err e = {0};
    kl_graph *g = ktg_new(17);
    ktg_io(g, "x", 0);
    const char *iv[1] = {"x"}, *ov[1] = {"y"};
    int k = kl_graph_add_node(g, "DFT", "inv_dft", iv, 1, ov, 1);
    ktg_attr_i(g, k, "onesided", 1);
    ktg_attr_i(g, k, "inverse", 1);
    ktg_io(g, "y", 1);
    int64_t xd[3] = {1, 8, 2};
    kl_tensor *x = ktg_tensor(KL_F32, 3, xd, NULL), *y = NULL;
    KT_CHECK(ktg_run(g, &x, 1, &y, &e) != KL_OK);
    KT_CONTAINS(kl_err_what(&e), "inv_dft");
    KT_CONTAINS(kl_err_what(&e), "onesided=1 with inverse=1");
    kl_tensor_free(x), kl_tensor_free(y);
    kl_graph_free(g);
}

KL_TEST(graph_melweightmatrix_bad_edges_refused) {
    const float lo[2] = {-1.0f, 500.0f}, hi[2] = {100.0f, 100.0f};
    for (int c = 0; c < 2; c++) {
        kl_err e = {0};
        kl_graph *g = ktg_new(17);
        ktg_io(g, "mels", 0);
        kl_tensor *dft = i64_scalar(64), *rate = i64_scalar(8000), *l = ktg_tensor(KL_F32, 0, NULL, &lo[c]),
                  *h = ktg_tensor(KL_F32, 0, NULL, &hi[c]);
        ktg_init(g, "dft", dft), ktg_init(g, "rate", rate), ktg_init(g, "lo", l), ktg_init(g, "hi", h);
        const char *iv[5] = {"mels", "dft", "rate", "lo", "hi"}, *ov[1] = {"y"};
        kl_graph_add_node(g, "MelWeightMatrix", "mel_node", iv, 5, ov, 1);
        ktg_io(g, "y", 1);
        kl_tensor *m = i64_scalar(8), *y = NULL;
        KT_CHECK(ktg_run(g, &m, 1, &y, &e) != KL_OK);
        KT_CONTAINS(kl_err_what(&e), "mel_node");
        KT_CONTAINS(kl_err_what(&e), "need 0 <= lower <= upper");
        kl_tensor_free(dft), kl_tensor_free(rate), kl_tensor_free(l), kl_tensor_free(h), kl_tensor_free(m),
            kl_tensor_free(y);
        kl_graph_free(g);
    }
}
