/* Gradient and training kernels of the graph's ai.keel.grad / ai.keel.train
 * ops, written once for a real type R and instantiated for float (training)
 * and double (finite-difference checks) by ops_grad.c / ops_train.c:
 * FN(x) = x##_f32 / x##_f64, GEMM_R = keel's GEMM (f32) or cblas_dgemm
 * (f64). The math is the one src/train checked against PyTorch.
 * Determinism: parallel work is split into blocks of the output whose size
 * depends on the shape only; reductions over the batch run in one fixed
 * order. Include only from ops_grad.c / ops_train.c. */

/* ---------------------------------------------------------- SumToShape */

/* o (shape od, rank ro) = scale * dy summed over the axes where o broadcasts
 * (NumPy rules, o aligned to the right). Serial, fixed order. */
static void FN(sum_to_shape)(R scale, int rd, const int64_t *dd, const R *dy, int ro, const int64_t *od, R *o) {
    int64_t ost[KL_MAX_DIMS], idx[KL_MAX_DIMS];
    int64_t no = kl_shape_numel(ro, od), nd = kl_shape_numel(rd, dd);
    int64_t s = 1;
    for (int i = rd - 1; i >= 0; i--) {
        int j = i - (rd - ro);
        if (j >= 0 && od[j] != 1) { ost[i] = s; s *= od[j]; }
        else { ost[i] = 0; if (j >= 0) s *= 1; }
    }
    for (int64_t i = 0; i < no; i++) o[i] = 0;
    if (nd == 0) return;
    int64_t inner = rd ? dd[rd - 1] : 1, rows = inner ? nd / inner : 0, is = rd ? ost[rd - 1] : 0;
    for (int i = 0; i < rd; i++) idx[i] = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = 0;
        for (int i = 0; i < rd - 1; i++) base += idx[i] * ost[i];
        const R *d = dy + r * inner;
        R *op = o + base;
        if (is) for (int64_t k = 0; k < inner; k++) op[k] += d[k];
        else { R acc = 0; for (int64_t k = 0; k < inner; k++) acc += d[k]; op[0] += acc; }
        for (int i = rd - 2; i >= 0; i--) { if (++idx[i] < dd[i]) break; idx[i] = 0; }
    }
    if (scale != 1)
        for (int64_t i = 0; i < no; i++) o[i] *= scale;
}

/* ------------------------------------------------------ pointwise grads */

typedef struct { int kind; const R *dy, *x; R *dx; double a; } FN(pw_job);
#ifndef KL__PW_KINDS
#define KL__PW_KINDS
enum { PW_RELU, PW_SIGMOID, PW_TANH, PW_GELU, PW_ERF };
#endif

static void FN(pw_range)(void *ctx, size_t b, size_t en, int chunk) {
    const FN(pw_job) *j = ctx;
    const R *restrict dy = j->dy, *restrict x = j->x;
    R *restrict dx = j->dx; /* the planner never aliases an output with an input */
    switch (j->kind) {
    case PW_RELU: /* unconditional loads: vectorises to a compare + blend (no branch per element) */
        for (size_t i = b; i < en; i++) { R d = dy[i], v = x[i]; dx[i] = v > 0 ? d : (R)0; }
        break;
    case PW_SIGMOID: for (size_t i = b; i < en; i++) dx[i] = dy[i] * x[i] * ((R)1 - x[i]); break; /* x = y */
    case PW_TANH: for (size_t i = b; i < en; i++) dx[i] = dy[i] * ((R)1 - x[i] * x[i]); break;    /* x = y */
    case PW_GELU:
        for (size_t i = b; i < en; i++) {
            double v = x[i];
            double cdf = 0.5 * (1 + erf(v * 0.70710678118654752440));
            double pdf = exp(-0.5 * v * v) * 0.39894228040143267794;
            dx[i] = dy[i] * (R)(cdf + v * pdf);
        }
        break;
    case PW_ERF:
        for (size_t i = b; i < en; i++) { double v = x[i]; dx[i] = dy[i] * (R)(1.12837916709551257390 * exp(-v * v)); }
        break;
    }
}

static void FN(pointwise_grad)(int kind, int64_t n, const R *dy, const R *x, R *dx, kl_pool *pool) {
    FN(pw_job) j = {kind, dy, x, dx, 0};
    if (n < 32768) FN(pw_range)(&j, 0, (size_t)n, 0);
    else kl_pool_parallel_for(pool, (size_t)n, 16384, FN(pw_range), &j);
}

/* ------------------------------------------------------------- Softmax */

/* dx = y * (dy - sum(dy*y)) (log = 0) or dy - exp(y) * sum(dy) (log = 1)
 * along the axis of length D (outer x D x inner). */
static void FN(softmax_grad)(int lg, int64_t outer, int64_t D, int64_t inner, const R *dy, const R *y, R *dx) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            const R *d = dy + o * D * inner + j, *yy = y + o * D * inner + j;
            R *g = dx + o * D * inner + j;
            R dot = 0;
            if (lg) {
                for (int64_t k = 0; k < D; k++) dot += d[k * inner];
                for (int64_t k = 0; k < D; k++) g[k * inner] = d[k * inner] - (R)exp((double)yy[k * inner]) * dot;
            } else {
                for (int64_t k = 0; k < D; k++) dot += d[k * inner] * yy[k * inner];
                for (int64_t k = 0; k < D; k++) g[k * inner] = yy[k * inner] * (d[k * inner] - dot);
            }
        }
}

/* -------------------------------------------------------------- Losses */

/* Cross-entropy over logits (B, K) with labels lab (already range-checked),
 * label smoothing eps and class weights w (K, may be NULL); PyTorch
 * semantics (mean reduction divides by the sum of the target weights).
 * dz (may be NULL) = scale * d(loss)/dz. Returns the loss. */
static double FN(ce)(int64_t B, int64_t K, const R *z, const int64_t *lab, double eps, const R *w, double scale, R *dz) {
    double wsum = 0, nll = 0, smooth = 0;
    for (int64_t r = 0; r < B; r++) wsum += w ? (double)w[lab[r]] : 1.0;
    if (wsum == 0) wsum = 1;
    for (int64_t r = 0; r < B; r++) {
        const R *zr = z + r * K;
        double mx = zr[0], s = 0;
        for (int64_t k = 1; k < K; k++) mx = zr[k] > mx ? zr[k] : mx;
        for (int64_t k = 0; k < K; k++) s += exp((double)zr[k] - mx);
        double lse = mx + log(s);
        double wy = w ? (double)w[lab[r]] : 1.0;
        nll += wy * (lse - zr[lab[r]]);
        double sw = 0;
        for (int64_t k = 0; k < K; k++) {
            double wk = w ? (double)w[k] : 1.0;
            smooth += wk * (lse - zr[k]);
            sw += wk;
        }
        if (!dz) continue;
        for (int64_t k = 0; k < K; k++) {
            double p = exp((double)zr[k] - lse), wk = w ? (double)w[k] : 1.0;
            double g = (1 - eps) * wy * (p - (k == lab[r])) + eps / (double)K * (sw * p - wk);
            dz[r * K + k] = (R)(scale * g / wsum);
        }
    }
    return ((1 - eps) * nll + eps / (double)K * smooth) / wsum;
}

/* Binary cross-entropy with logits, mean over n elements; dt = d/dt when wanted. */
static double FN(bce)(int64_t n, const R *z, const R *t, double scale, R *dz, R *dt) {
    double l = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = z[i], y = t[i];
        l += (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
        if (dz) dz[i] = (R)(scale * (1 / (1 + exp(-x)) - y) / (double)n);
        if (dt) dt[i] = (R)(-scale * x / (double)n);
    }
    return l / (double)n;
}

/* Mean squared error, mean over n elements; dt = -dz when wanted. */
static double FN(mse)(int64_t n, const R *z, const R *t, double scale, R *dz, R *dt) {
    double l = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)z[i] - (double)t[i];
        l += d * d;
        if (dz) dz[i] = (R)(scale * 2 * d / (double)n);
        if (dt) dt[i] = (R)(-scale * 2 * d / (double)n);
    }
    return l / (double)n;
}

/* ----------------------------------------------------------- Embedding */

/* dW (V, D) = scatter-add of dy (n, D) at rows idx; columns in fixed blocks. */
typedef struct { int64_t n, D, V; const int64_t *idx; const R *dy; R *dW; } FN(emb_job);
static void FN(emb_range)(void *ctx, size_t b, size_t en, int chunk) {
    const FN(emb_job) *j = ctx;
    int64_t c0 = (int64_t)b * 64, c1 = KL_MIN((int64_t)en * 64, j->D);
    for (int64_t v = 0; v < j->V; v++)
        for (int64_t c = c0; c < c1; c++) j->dW[v * j->D + c] = 0;
    for (int64_t i = 0; i < j->n; i++) {
        const R *d = j->dy + i * j->D;
        R *w = j->dW + j->idx[i] * j->D;
        for (int64_t c = c0; c < c1; c++) w[c] += d[c];
    }
}
static void FN(embedding_grad)(int64_t n, int64_t D, int64_t V, const int64_t *idx, const R *dy, R *dW, kl_pool *pool) {
    FN(emb_job) j = {n, D, V, idx, dy, dW};
    size_t nb = (size_t)((D + 63) / 64);
    if (n * D < 65536) FN(emb_range)(&j, 0, nb, 0);
    else kl_pool_parallel_for(pool, nb, 1, FN(emb_range), &j);
}
