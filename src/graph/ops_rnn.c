/* Recurrent operators RNN, GRU (both linear_before_reset forms) and LSTM
 * (peepholes, input_forget), float32, opsets 7-17 (layout from 14):
 * forward/reverse/bidirectional, sequence_lens (a batch row's steps past
 * its length give zeros in Y and leave its state as it was), initial
 * states, clip, every activation the spec allows with activation_alpha /
 * activation_beta. Per direction, the input GEMM X * W^T (+ biases) runs
 * once for all time steps (one GEMM of seq*batch rows with the tensor
 * library's kl_gemm_f32); each step then runs the recurrent GEMM
 * H_{t-1} * R^T and the gate math (the activations on the tensor library's
 * vectorised unary kernels, the element products as plain loops). */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { R_RNN, R_GRU, R_LSTM };
enum { A_KERNEL, A_AFFINE, A_THRESH, A_SCALED_TANH };

typedef struct {
    int kind; /* A_KERNEL: op */
    kl_unary_op op;
    float a, b;
} rnn_act;

typedef struct {
    int cell;           /* R_* */
    int G;              /* gates: 1, 3, 4 */
    int64_t T, B, I, H; /* steps, batch, input size, hidden size */
    int dirs, reverse;  /* reverse: forward-only graph run backwards ("reverse") */
    int layout;
    int lbr, input_forget;
    float clip;        /* 0: none */
    rnn_act act[2][3]; /* per direction: f, g, h */
} rnn_cfg;

static int cell_of(const kl_gnode *n) {
    return !strcmp(n->op_type, "GRU") ? R_GRU : !strcmp(n->op_type, "LSTM") ? R_LSTM : R_RNN;
}

/* ---- activations ---- */

static int act_parse(const kl_gnode *n, const char *name, const float **alpha, int *na, const float **beta, int *nb,
                     rnn_act *a, kl_err *e) {
    static const struct {
        const char *name;
        int kind;
        kl_unary_op op;
        float a, b;
        int uses_a, uses_b;
    } T[] = {
        {"Relu", A_KERNEL, KL_UN_RELU, 0, 0, 0, 0},
        {"Tanh", A_KERNEL, KL_UN_TANH, 0, 0, 0, 0},
        {"Sigmoid", A_KERNEL, KL_UN_SIGMOID, 0, 0, 0, 0},
        {"LeakyRelu", A_KERNEL, KL_UN_LEAKY_RELU, 0.01f, 0, 1, 0},
        {"HardSigmoid", A_KERNEL, KL_UN_HARDSIGMOID, 0.2f, 0.5f, 1, 1},
        {"Elu", A_KERNEL, KL_UN_ELU, 1.0f, 0, 1, 0},
        {"Softsign", A_KERNEL, KL_UN_SOFTSIGN, 0, 0, 0, 0},
        {"Softplus", A_KERNEL, KL_UN_SOFTPLUS, 0, 0, 0, 0},
        {"Affine", A_AFFINE, KL_UN_IDENTITY, 1.0f, 0.0f, 1, 1},
        {"ThresholdedRelu", A_THRESH, KL_UN_IDENTITY, 1.0f, 0, 1, 0},
        {"ScaledTanh", A_SCALED_TANH, KL_UN_TANH, 1.0f, 1.0f, 1, 1},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(T); i++) {
        if (strcasecmp(T[i].name, name)) continue;
        *a = (rnn_act){T[i].kind, T[i].op, T[i].a, T[i].b};
        /* activation_alpha/beta are consumed in the order of the
         * activations that take them (as ONNX Runtime does) */
        if (T[i].uses_a && *na > 0) {
            a->a = **alpha;
            (*alpha)++;
            (*na)--;
        }
        if (T[i].uses_b && *nb > 0) {
            a->b = **beta;
            (*beta)++;
            (*nb)--;
        }
        return KL_OK;
    }
    return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: activation '%s'", n->opset, name);
}

static int acts_parse(const kl_gnode *n, rnn_cfg *c, kl_err *e) {
    static const char *const defs[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    int per = c->cell == R_RNN ? 1 : c->cell == R_GRU ? 2 : 3;
    const kl_attr *as = kl_gnode_attr(n, "activations"), *aa = kl_gnode_attr(n, "activation_alpha"),
                  *ab = kl_gnode_attr(n, "activation_beta");
    if (as && as->n != per && as->n != per * c->dirs)
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: %d activations, %s takes %d per direction", n->opset, as->n,
                             n->op_type, per);
    const float *alpha = aa ? aa->floats : NULL, *beta = ab ? ab->floats : NULL;
    int na = aa ? aa->n : 0, nb = ab ? ab->n : 0, rc;
    for (int d = 0; d < c->dirs; d++)
        for (int k = 0; k < per; k++) {
            const char *name = as ? as->strings[(as->n == per ? 0 : d * per) + k] : defs[c->cell][k];
            if ((rc = act_parse(n, name, &alpha, &na, &beta, &nb, &c->act[d][k], e))) return rc;
        }
    return KL_OK;
}

/* x = act(clip(x)) in place (clip 0: none) */
static void act_apply(const rnn_act *a, float clip, float *x, int64_t n) {
    if (clip > 0)
        for (int64_t i = 0; i < n; i++) x[i] = x[i] < -clip ? -clip : x[i] > clip ? clip : x[i];
    switch (a->kind) {
    case A_KERNEL: kl_unary_row_f32(a->op, x, x, n, a->a, a->b); break;
    case A_AFFINE:
        for (int64_t i = 0; i < n; i++) x[i] = a->a * x[i] + a->b;
        break;
    case A_THRESH:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > a->a ? x[i] : 0.f;
        break;
    case A_SCALED_TANH:
        for (int64_t i = 0; i < n; i++) x[i] *= a->b;
        kl_unary_row_f32(KL_UN_TANH, x, x, n, 0, 0);
        for (int64_t i = 0; i < n; i++) x[i] *= a->a;
        break;
    default: break;
    }
}

/* ---- shapes ---- */

static int cfg_read(kl_gnode *n, kl_tensor *const *in, int n_in, rnn_cfg *c, kl_err *e) {
    memset(c, 0, sizeof *c);
    c->cell = cell_of(n);
    c->G = c->cell == R_RNN ? 1 : c->cell == R_GRU ? 3 : 4;
    const kl_tensor *X = in[0], *W = in[1], *R = in[2];
    const char *dir = kl_gnode_attr_str(n, "direction", "forward");
    if (!strcmp(dir, "forward")) c->dirs = 1;
    else if (!strcmp(dir, "reverse")) c->dirs = 1, c->reverse = 1;
    else if (!strcmp(dir, "bidirectional")) c->dirs = 2;
    else return kl__fail_node(e, n, KL_EINVAL, "opset %d: direction '%s'", n->opset, dir);
    c->layout = (int)kl_gnode_attr_int(n, "layout", 0);
    if (c->layout != 0 && c->layout != 1)
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: layout %d", n->opset, c->layout);
    c->lbr = (int)kl_gnode_attr_int(n, "linear_before_reset", 0);
    c->input_forget = (int)kl_gnode_attr_int(n, "input_forget", 0);
    c->clip = kl_gnode_attr(n, "clip") ? kl_gnode_attr_float(n, "clip", 0) : 0;
    if (kl_gnode_attr(n, "clip") && !(c->clip > 0))
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: clip %g must be > 0", n->opset, (double)c->clip);
    if (X->rank != 3 || W->rank != 3 || R->rank != 3)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: X, W and R must have rank 3 (ranks %d, %d, %d)", n->opset,
                             X->rank, W->rank, R->rank);
    if (X->dtype != KL_F32 || W->dtype != KL_F32 || R->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: %s inputs (float32 only)", n->opset,
                             kl_dtype_name(X->dtype));
    c->T = X->dims[c->layout ? 1 : 0];
    c->B = X->dims[c->layout ? 0 : 1];
    c->I = X->dims[2];
    c->H = R->dims[2];
    int64_t hs = kl_gnode_attr_int(n, "hidden_size", c->H);
    if (hs != c->H)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: hidden_size %lld, R is for %lld", n->opset, (long long)hs,
                             (long long)c->H);
    int64_t GH = c->G * c->H;
    if (W->dims[0] != c->dirs || W->dims[1] != GH || W->dims[2] != c->I || R->dims[0] != c->dirs || R->dims[1] != GH)
        return kl__fail_node(e, n, KL_ESHAPE,
                             "opset %d: W or R do not match %d direction(s), %d gates, hidden %lld, input %lld",
                             n->opset, c->dirs, c->G, (long long)c->H, (long long)c->I);
    const kl_tensor *Bt = n_in > 3 ? in[3] : NULL, *L = n_in > 4 ? in[4] : NULL;
    if (Bt && (Bt->dtype != KL_F32 || Bt->rank != 2 || Bt->dims[0] != c->dirs || Bt->dims[1] != 2 * GH))
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: B must be float32 [%d, %lld]", n->opset, c->dirs,
                             (long long)(2 * GH));
    if (L && (L->rank != 1 || L->dims[0] != c->B || (L->dtype != KL_I32 && L->dtype != KL_I64)))
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: sequence_lens must be int32 [%lld]", n->opset,
                             (long long)c->B);
    int64_t sd[3] = {c->layout ? c->B : c->dirs, c->layout ? c->dirs : c->B, c->H};
    for (int k = 5; k < n_in && k < 7; k++) {
        const kl_tensor *s = in[k];
        if (!s) continue;
        if (s->dtype != KL_F32 || s->rank != 3 || memcmp(s->dims, sd, sizeof sd))
            return kl__fail_node(e, n, KL_ESHAPE,
                                 "opset %d: input %d (initial state) must be float32 [%lld, %lld, %lld]", n->opset, k,
                                 (long long)sd[0], (long long)sd[1], (long long)sd[2]);
    }
    if (c->cell == R_LSTM && n_in > 7 && in[7] &&
        (in[7]->dtype != KL_F32 || in[7]->rank != 2 || in[7]->dims[0] != c->dirs || in[7]->dims[1] != 3 * c->H))
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: P must be float32 [%d, %lld]", n->opset, c->dirs,
                             (long long)(3 * c->H));
    return acts_parse(n, c, e);
}

/* floats of the workspace: XW for all steps (T B GH), the recurrent
 * product (B GH), the states h and c (2 B H), the gate scratch (4 B H: GRU's
 * z, r per row; LSTM's 4H of one row) and a row's new h, c (2 H) */
static int64_t ws_floats(const rnn_cfg *c) {
    int64_t GH = c->G * c->H, BH = c->B * c->H;
    return c->T * c->B * GH + c->B * GH + 6 * BH + 2 * c->H + 64;
}

static int rnn_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    rnn_cfg c;
    int rc = cfg_read(n, in, n_in, &c, e);
    if (rc) return rc;
    int64_t y[4] = {c.T, c.dirs, c.B, c.H}, yl[4] = {c.B, c.T, c.dirs, c.H};
    int64_t h[3] = {c.dirs, c.B, c.H}, hl[3] = {c.B, c.dirs, c.H};
    if (n_out > 0) kl__set_shape(&out[0], KL_F32, 4, c.layout ? yl : y);
    for (int k = 1; k < n_out; k++) kl__set_shape(&out[k], KL_F32, 3, c.layout ? hl : h);
    *ws = (size_t)ws_floats(&c) * sizeof(float);
    return KL_OK;
}

/* ---- running ---- */

typedef struct {
    const rnn_cfg *c;
    int d;    /* direction index (weights, outputs) */
    int back; /* runs from the last step to the first */
    const float *W, *R, *Wb, *Rb, *P;
    float *xw, *hr, *h, *cst, *tmp;
    const kl_tensor *lens;
    kl_pool *pool;
} rnn_dir;

/* row of X (and of xw) for step t, batch b */
static int64_t xrow(const rnn_cfg *c, int64_t t, int64_t b) { return c->layout ? b * c->T + t : t * c->B + b; }

/* xw = X W^T + Wb (+ Rb, except GRU's h gate with linear_before_reset) */
static void input_gemm(rnn_dir *r, const kl_tensor *X) {
    const rnn_cfg *c = r->c;
    int64_t GH = c->G * c->H, rows = c->T * c->B;
    kl_gemm_f32(0, 1, rows, GH, c->I, 1.f, X->data, c->I, r->W, c->I, 0.f, r->xw, GH, r->pool);
    if (!r->Wb) return;
    for (int64_t i = 0; i < rows; i++) {
        float *x = r->xw + i * GH;
        for (int64_t j = 0; j < GH; j++) {
            int rec = !(c->cell == R_GRU && c->lbr && j >= 2 * c->H);
            x[j] += r->Wb[j] + (rec ? r->Rb[j] : 0.f);
        }
    }
}

static void rnn_cell(rnn_dir *r, const float *xw, const float *hr, int64_t b, float *hn) {
    const rnn_cfg *c = r->c;
    int64_t H = c->H;
    for (int64_t j = 0; j < H; j++) hn[j] = xw[j] + hr[b * H + j];
    act_apply(&c->act[r->d][0], c->clip, hn, H);
}

/* GRU gates z, r for row b into tmp (2H); hn: the new state */
static void gru_cell(rnn_dir *r, const float *xw, const float *hr, const float *hh, int64_t b, const float *hprev,
                     float *hn) {
    const rnn_cfg *c = r->c;
    int64_t H = c->H;
    float *z = r->tmp + b * 2 * H, *rg = z + H; /* computed before by gru_gates */
    for (int64_t j = 0; j < H; j++) {
        float lin = c->lbr ? rg[j] * (hh[b * H + j] + (r->Rb ? r->Rb[2 * H + j] : 0.f)) : hh[b * H + j];
        hn[j] = xw[2 * H + j] + lin;
    }
    act_apply(&c->act[r->d][1], c->clip, hn, H);
    for (int64_t j = 0; j < H; j++) hn[j] = (1.f - z[j]) * hn[j] + z[j] * hprev[j];
    (void)hr;
}

static void lstm_cell(rnn_dir *r, const float *xw, const float *hr, int64_t b, const float *cprev, float *hn,
                      float *cn) {
    const rnn_cfg *c = r->c;
    int64_t H = c->H;
    float *g = r->tmp; /* 4H scratch for this row: i, o, f, c~ */
    for (int64_t j = 0; j < 4 * H; j++) g[j] = xw[j] + hr[b * 4 * H + j];
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    const float *Pi = r->P, *Po = r->P ? r->P + H : NULL, *Pf = r->P ? r->P + 2 * H : NULL;
    if (Pi)
        for (int64_t j = 0; j < H; j++) gi[j] += Pi[j] * cprev[j], gf[j] += Pf[j] * cprev[j];
    act_apply(&c->act[r->d][0], c->clip, gi, H);
    if (c->input_forget)
        for (int64_t j = 0; j < H; j++) gf[j] = 1.f - gi[j];
    else act_apply(&c->act[r->d][0], c->clip, gf, H);
    act_apply(&c->act[r->d][1], c->clip, gc, H);
    for (int64_t j = 0; j < H; j++) cn[j] = gf[j] * cprev[j] + gi[j] * gc[j];
    if (Po)
        for (int64_t j = 0; j < H; j++) go[j] += Po[j] * cn[j];
    act_apply(&c->act[r->d][0], c->clip, go, H);
    for (int64_t j = 0; j < H; j++) hn[j] = cn[j];
    act_apply(&c->act[r->d][2], 0, hn, H);
    for (int64_t j = 0; j < H; j++) hn[j] *= go[j];
}

static int64_t len_of(const rnn_dir *r, int64_t b) {
    if (!r->lens) return r->c->T;
    int64_t l = kl__int_at(r->lens, b);
    return l < 0 ? 0 : l > r->c->T ? r->c->T : l;
}

/* One step for all batch rows: the recurrent GEMM(s), then each row's cell
 * (rows past their length keep their state and write zeros). */
static void rnn_step(rnn_dir *r, int64_t t, float *Y) {
    const rnn_cfg *c = r->c;
    int64_t H = c->H, GH = c->G * H, B = c->B;
    if (c->cell == R_GRU) {
        /* z, r from H_{t-1} R_zr^T; the h gate's product after the reset */
        kl_gemm_f32(0, 1, B, 2 * H, H, 1.f, r->h, H, r->R, H, 0.f, r->hr, 2 * H, r->pool);
        for (int64_t b = 0; b < B; b++) {
            const float *xw = r->xw + xrow(c, t, b) * GH;
            float *z = r->tmp + b * 2 * H;
            for (int64_t j = 0; j < 2 * H; j++) z[j] = xw[j] + r->hr[b * 2 * H + j];
            act_apply(&c->act[r->d][0], c->clip, z, 2 * H);
        }
        float *hh = r->hr + B * 2 * H; /* B x H: (r . H) R_h^T, or H R_h^T (linear_before_reset) */
        float *rh = r->cst;            /* B x H scratch (GRU has no cell state) */
        if (c->lbr) {
            kl_gemm_f32(0, 1, B, H, H, 1.f, r->h, H, r->R + 2 * H * H, H, 0.f, hh, H, r->pool);
        } else {
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j < H; j++) rh[b * H + j] = r->tmp[b * 2 * H + H + j] * r->h[b * H + j];
            kl_gemm_f32(0, 1, B, H, H, 1.f, rh, H, r->R + 2 * H * H, H, 0.f, hh, H, r->pool);
        }
    } else {
        kl_gemm_f32(0, 1, B, GH, H, 1.f, r->h, H, r->R, H, 0.f, r->hr, GH, r->pool);
    }
    float *hn = r->tmp + B * 4 * H, *cn = hn + H;
    for (int64_t b = 0; b < B; b++) {
        float *hp = r->h + b * H, *cp = r->cst + b * H;
        float *y = !Y   ? NULL
            : c->layout ? Y + ((b * c->T + t) * c->dirs + r->d) * H
                        : Y + ((t * c->dirs + r->d) * B + b) * H;
        if (t >= len_of(r, b)) {
            if (y) memset(y, 0, sizeof(float) * (size_t)H);
            continue;
        }
        const float *xw = r->xw + xrow(c, t, b) * GH;
        if (c->cell == R_RNN) rnn_cell(r, xw, r->hr, b, hn);
        else if (c->cell == R_GRU) gru_cell(r, xw, r->hr, r->hr + B * 2 * H, b, hp, hn);
        else {
            lstm_cell(r, xw, r->hr, b, cp, hn, cn);
            memcpy(cp, cn, sizeof(float) * (size_t)H);
        }
        memcpy(hp, hn, sizeof(float) * (size_t)H);
        if (y) memcpy(y, hn, sizeof(float) * (size_t)H);
    }
}

/* initial state k (5: h, 6: c) of direction d into dst (B x H), zeros when absent */
static void init_state(const rnn_cfg *c, const kl_tensor *s, int d, float *dst) {
    int64_t H = c->H;
    for (int64_t b = 0; b < c->B; b++) {
        float *o = dst + b * H;
        if (!s) {
            memset(o, 0, sizeof(float) * (size_t)H);
            continue;
        }
        const float *src = (const float *)s->data + (c->layout ? b * c->dirs + d : d * c->B + b) * H;
        memcpy(o, src, sizeof(float) * (size_t)H);
    }
}

static void store_state(const rnn_cfg *c, const float *src, int d, kl_tensor *o) {
    if (!o) return;
    int64_t H = c->H;
    for (int64_t b = 0; b < c->B; b++)
        memcpy((float *)o->data + (c->layout ? b * c->dirs + d : d * c->B + b) * H, src + b * H,
               sizeof(float) * (size_t)H);
}

static int rnn_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    rnn_cfg c;
    int rc = cfg_read(n, in, n_in, &c, e);
    if (rc) return rc;
    if ((size_t)ws_floats(&c) * sizeof(float) > x->ws_bytes)
        return kl__fail_node(e, n, KL_EINTERNAL, "workspace too small");
    int64_t H = c.H, GH = c.G * H, B = c.B;
    const kl_tensor *Bt = n_in > 3 ? in[3] : NULL;
    float *Y = n_out > 0 && out[0] ? out[0]->data : NULL;
    for (int d = 0; d < c.dirs; d++) {
        rnn_dir r;
        memset(&r, 0, sizeof r);
        r.c = &c;
        r.d = d;
        r.back = c.reverse || d == 1;
        r.W = (const float *)in[1]->data + d * GH * c.I;
        r.R = (const float *)in[2]->data + d * GH * H;
        r.Wb = Bt ? (const float *)Bt->data + d * 2 * GH : NULL;
        r.Rb = Bt ? r.Wb + GH : NULL;
        r.P = c.cell == R_LSTM && n_in > 7 && in[7] ? (const float *)in[7]->data + d * 3 * H : NULL;
        r.lens = n_in > 4 ? in[4] : NULL;
        r.pool = x->pool;
        float *w = x->ws;
        r.xw = w;
        w += c.T * B * GH;
        r.hr = w;
        w += B * GH;
        r.h = w;
        w += B * H;
        r.cst = w;
        w += B * H;
        r.tmp = w; /* 2 B H: GRU's z, r per row, or LSTM's 4H gates; then hn, cn */
        init_state(&c, n_in > 5 ? in[5] : NULL, d, r.h);
        if (c.cell == R_LSTM) init_state(&c, n_in > 6 ? in[6] : NULL, d, r.cst);
        input_gemm(&r, in[0]);
        if (!r.back)
            for (int64_t t = 0; t < c.T; t++) rnn_step(&r, t, Y);
        else {
            /* backwards: each row from its own last step (sequence_lens) */
            for (int64_t t = c.T - 1; t >= 0; t--) rnn_step(&r, t, Y);
        }
        store_state(&c, r.h, d, n_out > 1 ? out[1] : NULL);
        if (c.cell == R_LSTM) store_state(&c, r.cst, d, n_out > 2 ? out[2] : NULL);
    }
    return KL_OK;
}

static const char *const a_rnn[] = {"activation_alpha", "activation_beta", "activations", "clip",
                                    "direction",        "hidden_size",     "layout",      NULL};
static const char *const a_gru[] = {"activation_alpha", "activation_beta", "activations",         "clip", "direction",
                                    "hidden_size",      "layout",          "linear_before_reset", NULL};
static const char *const a_lstm[] = {"activation_alpha", "activation_beta", "activations",  "clip", "direction",
                                     "hidden_size",      "layout",          "input_forget", NULL};

const kl_op kl__ops_rnn[] = {
    {"RNN", "", 7, 17, 3, 6, 0, 2, a_rnn, NULL, rnn_infer, rnn_run, 0},
    {"GRU", "", 7, 17, 3, 6, 0, 2, a_gru, NULL, rnn_infer, rnn_run, 0},
    {"LSTM", "", 7, 17, 3, 8, 0, 3, a_lstm, NULL, rnn_infer, rnn_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
