/* Gradient checks: every differentiable training op's backward (the double
 * instances of the same kernels training runs in float) against central
 * finite differences in float64. */
#include <stdlib.h>

#include "../harness.h"
#include "train/train_int.h"

typedef struct gc gc;
/* fwd: returns sum(y * r); bwd: fills the gradients of the registered inputs
 * (accumulating where the op accumulates: they are zeroed first). */
struct gc {
    double (*fwd)(gc *);
    void (*bwd)(gc *);
    double *in[4], *gin[4];
    int64_t nin[4];
    int n;
    double *y, *r, *dy;
    int64_t ny;
    void *p;            /* op parameters */
    double aux[64];
};

static tr_rng grng;
static double *rnd(int64_t n, double scale) {
    double *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = (2 * tr_rng_uniform(&grng) - 1) * scale;
    return p;
}
static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Max relative error between analytic and numeric gradients. */
static double check(gc *g) {
    for (int k = 0; k < g->n; k++) memset(g->gin[k], 0, (size_t)g->nin[k] * sizeof(double));
    g->bwd(g);
    double worst = 0;
    for (int k = 0; k < g->n; k++)
        for (int64_t i = 0; i < g->nin[k]; i++) {
            double keep = g->in[k][i], h = 1e-6 * KL_MAX(1.0, fabs(keep));
            g->in[k][i] = keep + h;
            double fp = g->fwd(g);
            g->in[k][i] = keep - h;
            double fm = g->fwd(g);
            g->in[k][i] = keep;
            double num = (fp - fm) / (2 * h), ana = g->gin[k][i];
            double err = fabs(num - ana) / KL_MAX(1e-3, fabs(num) + fabs(ana));
            if (err > worst) worst = err;
        }
    return worst;
}

static void gc_free(gc *g) {
    for (int k = 0; k < g->n; k++) { free(g->in[k]); free(g->gin[k]); }
    free(g->y); free(g->r); free(g->dy);
}
static void gc_add(gc *g, int64_t n, double scale) {
    g->in[g->n] = rnd(n, scale);
    g->gin[g->n] = calloc((size_t)n, sizeof(double));
    g->nin[g->n++] = n;
}
static void gc_out(gc *g, int64_t n) {
    g->ny = n;
    g->y = calloc((size_t)n, sizeof(double));
    g->r = rnd(n, 1);
    g->dy = malloc((size_t)n * sizeof(double));
    memcpy(g->dy, g->r, (size_t)n * sizeof(double));
}

/* ---- linear: x (4,5), W (3,5), b (3) ---- */
static double lin_f(gc *g) { tr_linear_fwd_f64(4, 5, 3, g->in[0], g->in[1], g->in[2], g->y, TR_NOPOOL); return dot(g->y, g->r, g->ny); }
static void lin_b(gc *g) { lin_f(g); tr_linear_bwd_f64(4, 5, 3, g->in[0], g->in[1], g->dy, g->gin[0], g->gin[1], g->gin[2], TR_NOPOOL); }

KL_TEST(train_gradcheck_linear) {
    tr_rng_seed(&grng, 1);
    gc g = {.fwd = lin_f, .bwd = lin_b};
    gc_add(&g, 20, 1); gc_add(&g, 15, 1); gc_add(&g, 3, 1); gc_out(&g, 12);
    double err = check(&g);
    gc_free(&g);
    KT_CHECKF(err < 1e-6, "linear: relative error %g", err);
}

/* ---- conv2d: x (2,3,5,6), W (4,3,3,2), stride (2,1), pad (1,0) ---- */
static tr_conv cvp = {2, 3, 5, 6, 4, 3, 2, 2, 1, 1, 0, 0, 0};
static double cv_ws[100000];
static double cv_f(gc *g) { tr_conv_fwd_f64(&cvp, g->in[0], g->in[1], g->in[2], g->y, cv_ws, TR_NOPOOL); return dot(g->y, g->r, g->ny); }
static void cv_b(gc *g) { cv_f(g); tr_conv_bwd_f64(&cvp, g->in[0], g->in[1], g->dy, g->gin[0], g->gin[1], g->gin[2], cv_ws, TR_NOPOOL); }

KL_TEST(train_gradcheck_conv2d) {
    tr_rng_seed(&grng, 2);
    cvp.OH = (5 + 2 - 3) / 2 + 1; cvp.OW = (6 - 2) / 1 + 1;
    KT_CHECK(tr_conv_ws_elems(&cvp) < 100000);
    gc g = {.fwd = cv_f, .bwd = cv_b};
    gc_add(&g, 2 * 3 * 5 * 6, 1); gc_add(&g, 4 * 3 * 3 * 2, 1); gc_add(&g, 4, 1); gc_out(&g, 2 * 4 * cvp.OH * cvp.OW);
    double err = check(&g);
    gc_free(&g);
    KT_CHECKF(err < 1e-6, "conv2d: relative error %g", err);
}

/* ---- pooling: x (2,2,5,5), kernel 3, stride 2, pad 1 ---- */
static tr_pool2 plp = {2, 2, 5, 5, 3, 3, 2, 2, 1, 1, 3, 3};
static int32_t pidx[64];
static double mp_f(gc *g) { tr_maxpool_fwd_f64(&plp, g->in[0], g->y, pidx); return dot(g->y, g->r, g->ny); }
static void mp_b(gc *g) { mp_f(g); tr_maxpool_bwd_f64(&plp, pidx, g->dy, g->gin[0]); }
static double ap_f(gc *g) { tr_avgpool_fwd_f64(&plp, g->in[0], g->y); return dot(g->y, g->r, g->ny); }
static void ap_b(gc *g) { ap_f(g); tr_avgpool_bwd_f64(&plp, g->dy, g->gin[0]); }
static double gp_f(gc *g) { tr_gap_fwd_f64(6, 7, g->in[0], g->y); return dot(g->y, g->r, g->ny); }
static void gp_b(gc *g) { gp_f(g); tr_gap_bwd_f64(6, 7, g->dy, g->gin[0]); }

KL_TEST(train_gradcheck_pooling) {
    tr_rng_seed(&grng, 3);
    gc a = {.fwd = mp_f, .bwd = mp_b}, b = {.fwd = ap_f, .bwd = ap_b}, c = {.fwd = gp_f, .bwd = gp_b};
    gc_add(&a, 100, 1); gc_out(&a, 36);
    gc_add(&b, 100, 1); gc_out(&b, 36);
    gc_add(&c, 42, 1); gc_out(&c, 6);
    double e1 = check(&a), e2 = check(&b), e3 = check(&c);
    gc_free(&a); gc_free(&b); gc_free(&c);
    KT_CHECKF(e1 < 1e-6, "maxpool2d: relative error %g", e1);
    KT_CHECKF(e2 < 1e-6, "avgpool2d: relative error %g", e2);
    KT_CHECKF(e3 < 1e-6, "global_avgpool: relative error %g", e3);
}

/* ---- batchnorm (train mode): x (3,2,4), gamma, beta (2) ---- */
static double bn_xhat[24], bn_is[2];
static double bn_f(gc *g) { tr_bn_train_fwd_f64(3, 2, 4, g->in[0], g->in[1], g->in[2], 1e-5, 0.1, NULL, NULL, bn_xhat, bn_is, g->y); return dot(g->y, g->r, g->ny); }
static void bn_b(gc *g) { bn_f(g); tr_bn_bwd_f64(3, 2, 4, bn_xhat, bn_is, g->in[1], g->dy, g->gin[0], g->gin[1], g->gin[2]); }
/* ---- layernorm: x (3,5) ---- */
static double ln_xhat[15], ln_is[3];
static double ln_f(gc *g) { tr_ln_fwd_f64(3, 5, g->in[0], g->in[1], g->in[2], 1e-5, ln_xhat, ln_is, g->y); return dot(g->y, g->r, g->ny); }
static void ln_b(gc *g) { ln_f(g); tr_ln_bwd_f64(3, 5, ln_xhat, ln_is, g->in[1], g->dy, g->gin[0], g->gin[1], g->gin[2]); }

KL_TEST(train_gradcheck_norms) {
    tr_rng_seed(&grng, 4);
    gc a = {.fwd = bn_f, .bwd = bn_b}, b = {.fwd = ln_f, .bwd = ln_b};
    gc_add(&a, 24, 2); gc_add(&a, 2, 1); gc_add(&a, 2, 1); gc_out(&a, 24);
    gc_add(&b, 15, 2); gc_add(&b, 5, 1); gc_add(&b, 5, 1); gc_out(&b, 15);
    double e1 = check(&a), e2 = check(&b);
    gc_free(&a); gc_free(&b);
    KT_CHECKF(e1 < 1e-5, "batchnorm2d: relative error %g", e1);
    KT_CHECKF(e2 < 1e-5, "layernorm: relative error %g", e2);
}

/* ---- activations, softmax ---- */
static int act_kind;
static double act_f(gc *g) { tr_act_fwd_f64(act_kind, g->ny, g->in[0], g->y); return dot(g->y, g->r, g->ny); }
static void act_b(gc *g) { act_f(g); tr_act_bwd_f64(act_kind, g->ny, g->in[0], g->y, g->dy, g->gin[0]); }
static double sm_f(gc *g) { tr_softmax_fwd_f64(3, 4, g->in[0], g->y); return dot(g->y, g->r, g->ny); }
static void sm_b(gc *g) { sm_f(g); tr_softmax_bwd_f64(3, 4, g->y, g->dy, g->gin[0]); }

KL_TEST(train_gradcheck_activations) {
    tr_rng_seed(&grng, 5);
    const char *names[] = {"", "relu", "sigmoid", "tanh", "gelu"};
    for (act_kind = TR_ACT_RELU; act_kind <= TR_ACT_GELU; act_kind++) {
        gc a = {.fwd = act_f, .bwd = act_b};
        gc_add(&a, 30, 3); gc_out(&a, 30);
        for (int i = 0; i < 30; i++) if (fabs(a.in[0][i]) < 1e-3) a.in[0][i] = 0.5; /* relu kink */
        double err = check(&a);
        gc_free(&a);
        KT_CHECKF(err < 1e-6, "%s: relative error %g", names[act_kind], err);
    }
    gc s = {.fwd = sm_f, .bwd = sm_b};
    gc_add(&s, 12, 2); gc_out(&s, 12);
    double err = check(&s);
    gc_free(&s);
    KT_CHECKF(err < 1e-6, "softmax: relative error %g", err);
}

/* ---- embedding: W (5,3), ids (4) ---- */
static int64_t emb_ids[4] = {1, 4, 1, 0};
static double em_f(gc *g) { tr_embed_fwd_f64(4, 3, emb_ids, g->in[0], g->y); return dot(g->y, g->r, g->ny); }
static void em_b(gc *g) { em_f(g); tr_embed_bwd_f64(4, 3, emb_ids, g->dy, g->gin[0]); }

/* ---- losses (the scalar loss itself) ---- */
static int64_t ce_y[4] = {2, 0, 1, 2};
static double ce_w[3] = {0.5, 2.0, 1.0};
static double ce_eps;
static const double *ce_wp;
static double ce_f(gc *g) { return tr_ce_loss_f64(4, 3, g->in[0], ce_y, ce_eps, ce_wp, g->y); }
static void ce_b(gc *g) { tr_ce_loss_f64(4, 3, g->in[0], ce_y, ce_eps, ce_wp, g->gin[0]); }
static double bce_t[12];
static double bce_f(gc *g) { return tr_bce_loss_f64(12, g->in[0], bce_t, g->y); }
static void bce_b(gc *g) { tr_bce_loss_f64(12, g->in[0], bce_t, g->gin[0]); }
static double mse_f(gc *g) { return tr_mse_loss_f64(12, g->in[0], bce_t, g->y); }
static void mse_b(gc *g) { tr_mse_loss_f64(12, g->in[0], bce_t, g->gin[0]); }

KL_TEST(train_gradcheck_embedding_and_losses) {
    tr_rng_seed(&grng, 6);
    gc a = {.fwd = em_f, .bwd = em_b};
    gc_add(&a, 15, 1); gc_out(&a, 12);
    double err = check(&a);
    gc_free(&a);
    KT_CHECKF(err < 1e-6, "embedding: relative error %g", err);
    for (int v = 0; v < 4; v++) {
        ce_eps = (v & 1) ? 0.1 : 0; ce_wp = (v & 2) ? ce_w : NULL;
        gc c = {.fwd = ce_f, .bwd = ce_b};
        gc_add(&c, 12, 2); gc_out(&c, 12);
        err = check(&c);
        gc_free(&c);
        KT_CHECKF(err < 1e-6, "cross_entropy (smoothing %g, weights %d): relative error %g", ce_eps, v >> 1, err);
    }
    for (int i = 0; i < 12; i++) bce_t[i] = tr_rng_uniform(&grng);
    gc b = {.fwd = bce_f, .bwd = bce_b}, m = {.fwd = mse_f, .bwd = mse_b};
    gc_add(&b, 12, 3); gc_out(&b, 12);
    gc_add(&m, 12, 3); gc_out(&m, 12);
    double e1 = check(&b), e2 = check(&m);
    gc_free(&b); gc_free(&m);
    KT_CHECKF(e1 < 1e-6, "bce_with_logits: relative error %g", e1);
    KT_CHECKF(e2 < 1e-6, "mse: relative error %g", e2);
}

/* Known value: PyTorch F.cross_entropy([[1,2,3]], [0], label_smoothing=0.1). */
KL_TEST(train_ce_matches_pytorch_value) {
    double z[3] = {1, 2, 3}, dz[3];
    int64_t y[1] = {0};
    double l = tr_ce_loss_f64(1, 3, z, y, 0.1, NULL, dz);
    /* lse = 3.40760596; nll = 2.40760596; smooth = mean(lse - z) = 1.40760596 */
    KT_NEAR(l, 0.9 * 2.40760596444 + 0.1 * 1.40760596444, 1e-9);
}
