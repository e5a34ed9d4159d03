/* RNN, GRU and LSTM beyond the ONNX node tests: an LSTM with peepholes,
 * clip, input_forget and HardSigmoid(alpha, beta) and a GRU with
 * linear_before_reset against NumPy references computed at test-writing
 * time (the comments at each give the inputs),
 * and the spec's identities on odd sizes: layout 1 is layout 0 transposed,
 * a bidirectional run's second half is a "reverse" run with its weights, a
 * reverse run is a forward run on time-reversed input, sequence_lens rows
 * give zeros past their length and keep their state, and zero time steps
 * give an empty Y and the initial state. */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { I_X, I_W, I_R, I_B, I_LEN, I_H0, I_C0, I_P, N_IN };
static const char *const IN_NAMES[N_IN] = {"X", "W", "R", "B", "lens", "h0", "c0", "P"};

typedef struct {
    const char *op, *direction;
    int layout, lbr, input_forget;
    float clip;
    const char *acts[6];
    int n_acts;
    float alpha[6], beta[6];
    int n_alpha, n_beta;
} rnn_spec;

/* det. values in [-0.5, 0.5): sin of a seed and the index */
static void fill(kl_tensor *t, double seed) {
    for (int64_t i = 0; i < kl_tensor_numel(t); i++)
        ((float *)t->data)[i] = (float)(0.5 * sin(seed * 1.7 + (double)i * 0.37));
}

static kl_tensor *ft(int rank, int64_t d0, int64_t d1, int64_t d2, double seed) {
    int64_t d[3] = {d0, d1, d2};
    kl_tensor *t;
    kl_tensor_new(KL_F32, rank, d, KL_TAG_OTHER, &t, NULL);
    fill(t, seed);
    return t;
}

/* Runs op on the inputs given (NULL: omitted) -> Y, Y_h (, Y_c) */
static int run_rnn(const rnn_spec *s, kl_tensor *const *in, kl_tensor **out, int n_out, kl_err *e) {
    kl_graph *g;
    kl_graph_new(&g, e);
    g->opset = 14;
    const char *ins[N_IN];
    kl_tensor *given[N_IN];
    int ng = 0, last = 0;
    for (int i = 0; i < N_IN; i++)
        if (in[i]) last = i;
    for (int i = 0; i <= last; i++) {
        ins[i] = in[i] ? IN_NAMES[i] : "";
        if (!in[i]) continue;
        int v = kl_graph_value(g, IN_NAMES[i]);
        g->values[v].is_input = 1;
        g->inputs = realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
        g->inputs[g->n_inputs++] = v;
        given[ng++] = in[i];
    }
    const char *outs[3] = {"Y", "Y_h", "Y_c"};
    int k = kl_graph_add_node(g, s->op, "rnn0", ins, last + 1, outs, n_out);
    kl_gnode *n = &g->nodes[k];
    kl_gnode_attr_add(n, "hidden_size", KL_ATTR_INT)->i = in[I_R]->dims[2];
    kl_gnode_attr_add(n, "layout", KL_ATTR_INT)->i = s->layout;
    kl_attr *a = kl_gnode_attr_add(n, "direction", KL_ATTR_STRING);
    a->s = strdup(s->direction ? s->direction : "forward");
    if (s->lbr) kl_gnode_attr_add(n, "linear_before_reset", KL_ATTR_INT)->i = 1;
    if (s->input_forget) kl_gnode_attr_add(n, "input_forget", KL_ATTR_INT)->i = 1;
    if (s->clip > 0) kl_gnode_attr_add(n, "clip", KL_ATTR_FLOAT)->f = s->clip;
    if (s->n_acts) {
        a = kl_gnode_attr_add(n, "activations", KL_ATTR_STRINGS);
        a->strings = calloc((size_t)s->n_acts + 1, sizeof(char *));
        a->n = s->n_acts;
        for (int i = 0; i < s->n_acts; i++) a->strings[i] = strdup(s->acts[i]);
    }
    for (int w = 0; w < 2; w++) {
        int cnt = w ? s->n_beta : s->n_alpha;
        if (!cnt) continue;
        a = kl_gnode_attr_add(n, w ? "activation_beta" : "activation_alpha", KL_ATTR_FLOATS);
        a->floats = malloc(sizeof(float) * (size_t)cnt);
        memcpy(a->floats, w ? s->beta : s->alpha, sizeof(float) * (size_t)cnt);
        a->n = cnt;
    }
    for (int i = 0; i < n_out; i++) {
        int v = kl_graph_value(g, outs[i]);
        g->values[v].is_output = 1;
        g->outputs = realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
        g->outputs[g->n_outputs++] = v;
    }
    int rc = kl_graph_finalize(g, e);
    kl_plan *p = NULL;
    void *arena = NULL;
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)given, (size_t)ng, &p, e);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc) rc = kl_plan_run(p, g, (const kl_tensor *const *)given, (size_t)ng, out, (size_t)n_out, arena, NULL, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    kl_graph_free(g);
    return rc;
}

static float f(const kl_tensor *t, int64_t i) { return ((const float *)t->data)[i]; }

/* NumPy float64 of the ONNX equations on the inputs below (written at
 * test-writing time) */
#define REF_LSTM_Y                                                                                              \
    -0.030125476f, -0.0405852567f, -0.00391661703f, -0.015704499f, 0.0391633675f, 0.0273303803f, 0.0569377167f, \
        0.0334450905f, -0.0150410977f, -0.00960575919f, 0.00168118548f, -0.00333944195f
#define REF_LSTM_C -0.0372444984f, -0.0214517005f, 0.00465220021f, -0.00686195316f
#define REF_GRU_Y                                                                                               \
    -0.375749515f, -0.150628126f, -0.0891921454f, -0.197082302f, 0.0173239281f, 0.136575686f, 0.131002743f,     \
        0.224051375f, 0.0898624114f, -0.385930737f, -0.226299557f, -0.0958447362f, -0.32826659f, -0.236600142f, \
        -0.0925711654f, -0.135042673f, -0.108487142f, -0.167184907f

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) <= 1e-5 + 1e-4 * fabs((double)(b)))

/* LSTM T=3 B=2 I=3 H=2 forward, peepholes, clip 0.3, input_forget,
 * activations HardSigmoid(0.3, 0.4), Tanh, Softsign; inputs fill()ed with
 * seeds X 1, W 2, R 3, B 4, P 5. Reference: NumPy float64 of the ONNX
 * equations (f = 1 - i with input_forget; clip on every gate input). */
KL_TEST(graph_lstm_peephole_clip_reference) {
    kl_err e = {0};
    kl_tensor *in[N_IN] = {
        ft(3, 3, 2, 3, 1), ft(3, 1, 8, 3, 2), ft(3, 1, 8, 2, 3), ft(2, 1, 16, 0, 4), NULL, NULL, NULL,
        ft(2, 1, 6, 0, 5)};
    rnn_spec s = {.op = "LSTM",
                  .direction = "forward",
                  .input_forget = 1,
                  .clip = 0.3f,
                  .acts = {"HardSigmoid", "Tanh", "Softsign"},
                  .n_acts = 3,
                  .alpha = {0.3f},
                  .beta = {0.4f},
                  .n_alpha = 1,
                  .n_beta = 1};
    kl_tensor *o[3];
    KT_OK(run_rnn(&s, in, o, 3, &e), &e);
    static const float want_y[12] = {REF_LSTM_Y};
    static const float want_c[4] = {REF_LSTM_C};
    for (int i = 0; i < 12; i++)
        KT_CHECKF(NEAR(f(o[0], i), want_y[i]), "Y[%d] = %.7g, NumPy %.7g", i, f(o[0], i), want_y[i]);
    for (int i = 0; i < 4; i++) KT_CHECKF(NEAR(f(o[1], i), want_y[8 + i]), "Y_h[%d]", i);
    for (int i = 0; i < 4; i++)
        KT_CHECKF(NEAR(f(o[2], i), want_c[i]), "Y_c[%d] = %.7g, NumPy %.7g", i, f(o[2], i), want_c[i]);
    for (int i = 0; i < 3; i++) kl_tensor_free(o[i]);
    for (int i = 0; i < N_IN; i++) kl_tensor_free(in[i]);
}

/* GRU T=2 B=3 I=2 H=3 linear_before_reset=1, initial h; seeds X 6, W 7,
 * R 8, B 9, h0 10. */
KL_TEST(graph_gru_linear_before_reset_reference) {
    kl_err e = {0};
    kl_tensor *in[N_IN] = {ft(3, 2, 3, 2, 6), ft(3, 1, 9, 2, 7), ft(3, 1, 9, 3, 8), ft(2, 1, 18, 0, 9), NULL,
                           ft(3, 1, 3, 3, 10)};
    rnn_spec s = {.op = "GRU", .direction = "forward", .lbr = 1};
    kl_tensor *o[2];
    KT_OK(run_rnn(&s, in, o, 2, &e), &e);
    static const float want_y[18] = {REF_GRU_Y};
    for (int i = 0; i < 18; i++)
        KT_CHECKF(NEAR(f(o[0], i), want_y[i]), "Y[%d] = %.7g, NumPy %.7g", i, f(o[0], i), want_y[i]);
    for (int i = 0; i < 9; i++) KT_CHECK(f(o[1], i) == f(o[0], 9 + i));
    for (int i = 0; i < 2; i++) kl_tensor_free(o[i]);
    for (int i = 0; i < N_IN; i++) kl_tensor_free(in[i]);
}

/* element (t, d, b, j) of Y in layout 0 / 1 */
static float y_at(const kl_tensor *y, int layout, int64_t t, int64_t d, int64_t b, int64_t j) {
    if (!layout) return f(y, ((t * y->dims[1] + d) * y->dims[2] + b) * y->dims[3] + j);
    return f(y, ((b * y->dims[1] + t) * y->dims[2] + d) * y->dims[3] + j);
}

/* the same tensor with dims 0 and 1 swapped (rank 3, contiguous copy) */
static kl_tensor *swap01(const kl_tensor *x) {
    int64_t d[3] = {x->dims[1], x->dims[0], x->dims[2]};
    kl_tensor *t;
    kl_tensor_new(KL_F32, 3, d, KL_TAG_OTHER, &t, NULL);
    for (int64_t i = 0; i < d[0]; i++)
        for (int64_t k = 0; k < d[1]; k++)
            memcpy((float *)t->data + (i * d[1] + k) * d[2], (const float *)x->data + (k * d[0] + i) * d[2],
                   sizeof(float) * (size_t)d[2]);
    return t;
}

/* Bidirectional LSTM (and GRU, RNN) with sequence_lens and initial states:
 * layout 1 = layout 0 transposed; rows past their length are zeros, Y_h of
 * the forward half is the last valid step's, the reverse half's is step 0's. */
KL_TEST(graph_rnn_layout_lens_bidirectional) {
    const char *ops[3] = {"RNN", "GRU", "LSTM"};
    for (int c = 0; c < 3; c++) {
        kl_err e = {0};
        int G = c == 0 ? 1 : c == 1 ? 3 : 4, nout = c == 2 ? 3 : 2;
        int64_t T = 5, B = 3, I = 7, H = 5;
        kl_tensor *in[N_IN] = {ft(3, T, B, I, 11),
                               ft(3, 2, G * H, I, 12),
                               ft(3, 2, G * H, H, 13),
                               ft(2, 2, 2 * G * H, 0, 14),
                               NULL,
                               ft(3, 2, B, H, 15),
                               c == 2 ? ft(3, 2, B, H, 16) : NULL,
                               c == 2 ? ft(2, 2, 3 * H, 0, 17) : NULL};
        int64_t nb = B;
        kl_tensor_new(KL_I32, 1, &nb, KL_TAG_OTHER, &in[I_LEN], NULL);
        const int32_t lens[3] = {5, 2, 0};
        memcpy(in[I_LEN]->data, lens, sizeof lens);
        rnn_spec s = {.op = ops[c], .direction = "bidirectional"};
        kl_tensor *o[3], *ol[3], *inl[N_IN];
        KT_OK(run_rnn(&s, in, o, nout, &e), &e);
        memcpy(inl, in, sizeof inl);
        inl[I_X] = swap01(in[I_X]);
        inl[I_H0] = swap01(in[I_H0]);
        if (c == 2) inl[I_C0] = swap01(in[I_C0]);
        s.layout = 1;
        KT_OK(run_rnn(&s, inl, ol, nout, &e), &e);
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < 2; d++)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++) {
                        float y0 = y_at(o[0], 0, t, d, b, j);
                        KT_CHECKF(NEAR(y0, y_at(ol[0], 1, t, d, b, j)), "%s layout 1 differs at t %lld", ops[c],
                                  (long long)t);
                        if (t >= lens[b]) KT_CHECKF(y0 == 0.f, "%s: Y past the length is %g", ops[c], y0);
                    }
        for (int k = 1; k < nout; k++)
            for (int64_t d = 0; d < 2; d++)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++) {
                        float h = f(o[k], (d * B + b) * H + j);
                        KT_CHECK(NEAR(h, f(ol[k], (b * 2 + d) * H + j)));
                        if (k == 1 && lens[b] > 0) KT_CHECK(h == y_at(o[0], 0, d ? 0 : lens[b] - 1, d, b, j));
                        if (lens[b] == 0)
                            KT_CHECK(h == f(in[k == 1 ? I_H0 : I_C0], (d * B + b) * H + j)); /* state kept */
                    }
        for (int k = 0; k < nout; k++) {
            kl_tensor_free(o[k]);
            kl_tensor_free(ol[k]);
        }
        kl_tensor_free(inl[I_X]);
        kl_tensor_free(inl[I_H0]);
        if (c == 2) kl_tensor_free(inl[I_C0]);
        for (int i = 0; i < N_IN; i++) kl_tensor_free(in[i]);
    }
}

/* direction 1 of a bidirectional GRU = a "reverse" GRU with those weights =
 * a forward GRU on the time-reversed input, Y reversed */
KL_TEST(graph_gru_reverse_identities) {
    kl_err e = {0};
    int64_t T = 4, B = 2, I = 3, H = 6;
    kl_tensor *in[N_IN] = {ft(3, T, B, I, 21), ft(3, 2, 3 * H, I, 22), ft(3, 2, 3 * H, H, 23), ft(2, 2, 6 * H, 0, 24)};
    rnn_spec s = {.op = "GRU", .direction = "bidirectional"};
    kl_tensor *ob[2], *orv[2], *of[2];
    KT_OK(run_rnn(&s, in, ob, 2, &e), &e);
    /* the second direction's weights alone */
    kl_tensor *one[N_IN] = {in[I_X], ft(3, 1, 3 * H, I, 0), ft(3, 1, 3 * H, H, 0), ft(2, 1, 6 * H, 0, 0)};
    memcpy(one[I_W]->data, (float *)in[I_W]->data + 3 * H * I, one[I_W]->nbytes);
    memcpy(one[I_R]->data, (float *)in[I_R]->data + 3 * H * H, one[I_R]->nbytes);
    memcpy(one[I_B]->data, (float *)in[I_B]->data + 6 * H, one[I_B]->nbytes);
    s.direction = "reverse";
    KT_OK(run_rnn(&s, one, orv, 2, &e), &e);
    kl_tensor *xr = ft(3, T, B, I, 0);
    for (int64_t t = 0; t < T; t++)
        memcpy((float *)xr->data + t * B * I, (float *)in[I_X]->data + (T - 1 - t) * B * I,
               sizeof(float) * (size_t)(B * I));
    one[I_X] = xr;
    s.direction = "forward";
    KT_OK(run_rnn(&s, one, of, 2, &e), &e);
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < H; j++) {
                float yb = y_at(ob[0], 0, t, 1, b, j), yr = y_at(orv[0], 0, t, 0, b, j),
                      yf = y_at(of[0], 0, T - 1 - t, 0, b, j);
                KT_CHECKF(NEAR(yb, yr), "bidirectional half %g, reverse %g", yb, yr);
                KT_CHECKF(NEAR(yr, yf), "reverse %g, forward on reversed input %g", yr, yf);
            }
    for (int i = 0; i < 2; i++) {
        kl_tensor_free(ob[i]);
        kl_tensor_free(orv[i]);
        kl_tensor_free(of[i]);
    }
    kl_tensor_free(xr);
    for (int i = 1; i < 4; i++) kl_tensor_free(one[i]);
    for (int i = 0; i < N_IN; i++) kl_tensor_free(in[i]);
}

/* zero time steps: Y [0, 1, B, H], Y_h the initial state; an unknown
 * activation: an error naming the node and opset */
KL_TEST(graph_rnn_empty_and_errors) {
    kl_err e = {0};
    kl_tensor *in[N_IN] = {ft(3, 0, 2, 3, 1), ft(3, 1, 4, 3, 2), ft(3, 1, 4, 4, 3), NULL, NULL, ft(3, 1, 2, 4, 4)};
    rnn_spec s = {.op = "RNN", .direction = "forward"};
    kl_tensor *o[2];
    KT_OK(run_rnn(&s, in, o, 2, &e), &e);
    KT_EQ_INT(o[0]->dims[0], 0);
    KT_EQ_INT(kl_tensor_numel(o[0]), 0);
    KT_CHECK(memcmp(o[1]->data, in[I_H0]->data, in[I_H0]->nbytes) == 0);
    kl_tensor_free(o[0]);
    kl_tensor_free(o[1]);
    rnn_spec bad = {.op = "RNN", .direction = "forward", .acts = {"Gelu"}, .n_acts = 1};
    KT_CHECK(run_rnn(&bad, in, o, 2, &e) == KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "'rnn0' (RNN)");
    KT_CONTAINS(kl_err_what(&e), "opset 14");
    KT_CONTAINS(kl_err_what(&e), "Gelu");
    for (int i = 0; i < N_IN; i++) kl_tensor_free(in[i]);
}
