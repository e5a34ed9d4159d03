/* Training kernels, written once for a real type R and instantiated twice
 * (ops.c): float (FN(x) = x##_f32, used by training) and double
 * (FN(x) = x##_f64, used by the finite-difference gradient checks).
 * Each forward op maps 1:1 to an ONNX operator (Gemm, Conv, MaxPool,
 * AveragePool, GlobalAveragePool, BatchNormalization, LayerNormalization,
 * Relu, Sigmoid, Tanh, Softmax, Gather, Add); each has its backward here.
 * Layouts: activations N C H W (or rows x cols), weights as PyTorch.
 * Determinism: parallel work is split into fixed-size blocks of the output,
 * so the result never depends on the thread count; reductions over the batch
 * run in one fixed order. Include only from ops.c (needs R, FN, GEMM). */

/* ---------------------------------------------------------------- GEMM */

typedef struct {
    int ta, tb;
    int64_t M, N, K;
    R alpha, beta;
    const R *A; int64_t lda;
    const R *B; int64_t ldb;
    R *C; int64_t ldc;
} FN(gemm_job);

static void FN(gemm_block)(void *ctx, size_t b0, size_t b1, int chunk) {
    const FN(gemm_job) *j = ctx;
    for (size_t b = b0; b < b1; b++) {
        int64_t m0 = (int64_t)b * GEMM_ROWS, m = KL_MIN(GEMM_ROWS, j->M - m0);
        const R *a = j->ta ? j->A + m0 : j->A + m0 * j->lda;
        GEMM(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
             (int)m, (int)j->N, (int)j->K, j->alpha, a, (int)j->lda, j->B, (int)j->ldb, j->beta,
             j->C + m0 * j->ldc, (int)j->ldc);
    }
}

/* C(MxN) = alpha op(A) op(B) + beta C; rows of C split into fixed blocks. */
static void FN(gemm)(int ta, int tb, int64_t M, int64_t N, int64_t K, R alpha, const R *A,
                     int64_t lda, const R *B, int64_t ldb, R beta, R *C, int64_t ldc,
                     kl_pool *pool) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t k = 0; k < N; k++) C[i * ldc + k] = beta == 0 ? 0 : beta * C[i * ldc + k];
        return;
    }
    FN(gemm_job) j = {ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc};
    size_t nb = (size_t)((M + GEMM_ROWS - 1) / GEMM_ROWS);
    if (nb == 1 || pool == TR_NOPOOL) FN(gemm_block)(&j, 0, nb, 0);
    else kl_pool_parallel_for(pool, nb, 1, FN(gemm_block), &j);
}

/* -------------------------------------------------------------- Linear */

/* y(B,O) = x(B,In) W(O,In)^T + b(O) */
void FN(tr_linear_fwd)(int64_t B, int64_t In, int64_t O, const R *x, const R *W, const R *b,
                       R *y, kl_pool *pool) {
    if (b)
        for (int64_t r = 0; r < B; r++) memcpy(y + r * O, b, (size_t)O * sizeof(R));
    FN(gemm)(0, 1, B, O, In, 1, x, In, W, In, b ? 1 : 0, y, O, pool);
}

/* dx += dy W (when dx); dW = dy^T x; db = column sums of dy. */
void FN(tr_linear_bwd)(int64_t B, int64_t In, int64_t O, const R *x, const R *W, const R *dy,
                       R *dx, R *dW, R *db, kl_pool *pool) {
    if (dx) FN(gemm)(0, 0, B, In, O, 1, dy, O, W, In, 1, dx, In, pool);
    FN(gemm)(1, 0, O, In, B, 1, dy, O, x, In, 0, dW, In, pool);
    if (db) {
        for (int64_t o = 0; o < O; o++) db[o] = 0;
        for (int64_t r = 0; r < B; r++)
            for (int64_t o = 0; o < O; o++) db[o] += dy[r * O + o];
    }
}

/* ---------------------------------------------------------- Conv2d (im2col) */

/* cols (C*kh*kw, N*OH*OW) from x (N,C,H,W). */
typedef struct { const tr_conv *p; const R *x; R *cols; R *dx; } FN(im2col_job);

static void FN(im2col_rows)(void *ctx, size_t r0, size_t r1, int chunk) {
    const FN(im2col_job) *j = ctx;
    const tr_conv *p = j->p;
    int64_t P = p->OH * p->OW, NP = p->N * P;
    for (size_t r = r0; r < r1; r++) {
        int64_t c = (int64_t)r / (p->kh * p->kw), ki = ((int64_t)r / p->kw) % p->kh, kj = (int64_t)r % p->kw;
        R *dst = j->cols + (int64_t)r * NP;
        for (int64_t n = 0; n < p->N; n++) {
            const R *src = j->x + (n * p->C + c) * p->H * p->W;
            for (int64_t oh = 0; oh < p->OH; oh++) {
                int64_t ih = oh * p->sh - p->ph + ki;
                R *d = dst + n * P + oh * p->OW;
                if (ih < 0 || ih >= p->H) { for (int64_t ow = 0; ow < p->OW; ow++) d[ow] = 0; continue; }
                for (int64_t ow = 0; ow < p->OW; ow++) {
                    int64_t iw = ow * p->sw - p->pw + kj;
                    d[ow] = (iw < 0 || iw >= p->W) ? 0 : src[ih * p->W + iw];
                }
            }
        }
    }
}

/* dx (N,C,H,W) += col2im(dcols); split by (n, c) planes: each plane gathers
 * from all its (ki, kj) rows in a fixed order. */
static void FN(col2im_planes)(void *ctx, size_t q0, size_t q1, int chunk) {
    const FN(im2col_job) *j = ctx;
    const tr_conv *p = j->p;
    int64_t P = p->OH * p->OW, NP = p->N * P;
    for (size_t q = q0; q < q1; q++) {
        int64_t n = (int64_t)q / p->C, c = (int64_t)q % p->C;
        R *dst = j->dx + (n * p->C + c) * p->H * p->W;
        for (int64_t ki = 0; ki < p->kh; ki++)
            for (int64_t kj = 0; kj < p->kw; kj++) {
                const R *src = j->cols + ((c * p->kh + ki) * p->kw + kj) * NP + n * P;
                for (int64_t oh = 0; oh < p->OH; oh++) {
                    int64_t ih = oh * p->sh - p->ph + ki;
                    if (ih < 0 || ih >= p->H) continue;
                    for (int64_t ow = 0; ow < p->OW; ow++) {
                        int64_t iw = ow * p->sw - p->pw + kj;
                        if (iw >= 0 && iw < p->W) dst[ih * p->W + iw] += src[oh * p->OW + ow];
                    }
                }
            }
    }
}

/* ws: tr_conv_ws_elems(p) elements. y (N,M,OH,OW). */
void FN(tr_conv_fwd)(const tr_conv *p, const R *x, const R *W, const R *b, R *y, R *ws,
                     kl_pool *pool) {
    int64_t K = p->C * p->kh * p->kw, P = p->OH * p->OW, NP = p->N * P;
    R *cols = ws, *ym = ws + K * NP;
    FN(im2col_job) j = {p, x, cols, NULL};
    kl_pool_parallel_for(pool == TR_NOPOOL ? NULL : pool, (size_t)K, 1, FN(im2col_rows), &j);
    FN(gemm)(0, 0, p->M, NP, K, 1, W, K, cols, NP, 0, ym, NP, pool);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++) {
            R *d = y + (n * p->M + m) * P;
            const R *s = ym + m * NP + n * P;
            R bb = b ? b[m] : 0;
            for (int64_t i = 0; i < P; i++) d[i] = s[i] + bb;
        }
}

/* dx += conv^T(dy) (when dx), dW = dy * cols^T, db = sums of dy. Recomputes
 * the columns (x is kept, cols are not). */
void FN(tr_conv_bwd)(const tr_conv *p, const R *x, const R *W, const R *dy, R *dx, R *dW,
                     R *db, R *ws, kl_pool *pool) {
    int64_t K = p->C * p->kh * p->kw, P = p->OH * p->OW, NP = p->N * P;
    R *cols = ws, *dym = ws + K * NP;
    FN(im2col_job) j = {p, x, cols, dx};
    kl_pool_parallel_for(pool == TR_NOPOOL ? NULL : pool, (size_t)K, 1, FN(im2col_rows), &j);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++)
            memcpy(dym + m * NP + n * P, dy + (n * p->M + m) * P, (size_t)P * sizeof(R));
    FN(gemm)(0, 1, p->M, K, NP, 1, dym, NP, cols, NP, 0, dW, K, pool);
    if (db)
        for (int64_t m = 0; m < p->M; m++) {
            R s = 0;
            for (int64_t i = 0; i < NP; i++) s += dym[m * NP + i];
            db[m] = s;
        }
    if (dx) {
        FN(gemm)(1, 0, K, NP, p->M, 1, W, K, dym, NP, 0, cols, NP, pool);
        kl_pool_parallel_for(pool == TR_NOPOOL ? NULL : pool, (size_t)(p->N * p->C), 1, FN(col2im_planes), &j);
    }
}

/* ------------------------------------------------------------- Pooling */

/* Max pool; idx (N,C,OH,OW) records the flat index in the (h,w) plane. */
void FN(tr_maxpool_fwd)(const tr_pool2 *p, const R *x, R *y, int32_t *idx) {
    for (int64_t nc = 0; nc < p->N * p->C; nc++) {
        const R *s = x + nc * p->H * p->W;
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++) {
                R best = -INFINITY; int32_t bi = -1;
                for (int64_t i = 0; i < p->kh; i++) {
                    int64_t ih = oh * p->sh - p->ph + i;
                    if (ih < 0 || ih >= p->H) continue;
                    for (int64_t k = 0; k < p->kw; k++) {
                        int64_t iw = ow * p->sw - p->pw + k;
                        if (iw < 0 || iw >= p->W) continue;
                        R v = s[ih * p->W + iw];
                        if (v > best || bi < 0 || v != v) { best = v; bi = (int32_t)(ih * p->W + iw); }
                    }
                }
                int64_t o = (nc * p->OH + oh) * p->OW + ow;
                y[o] = best; idx[o] = bi;
            }
    }
}

void FN(tr_maxpool_bwd)(const tr_pool2 *p, const int32_t *idx, const R *dy, R *dx) {
    int64_t P = p->OH * p->OW;
    for (int64_t nc = 0; nc < p->N * p->C; nc++)
        for (int64_t i = 0; i < P; i++)
            if (idx[nc * P + i] >= 0) dx[nc * p->H * p->W + idx[nc * P + i]] += dy[nc * P + i];
}

/* Average pool, count_include_pad = 1 (PyTorch's default). */
void FN(tr_avgpool_fwd)(const tr_pool2 *p, const R *x, R *y) {
    R inv = (R)1 / (R)(p->kh * p->kw);
    for (int64_t nc = 0; nc < p->N * p->C; nc++) {
        const R *s = x + nc * p->H * p->W;
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++) {
                R acc = 0;
                for (int64_t i = 0; i < p->kh; i++) {
                    int64_t ih = oh * p->sh - p->ph + i;
                    if (ih < 0 || ih >= p->H) continue;
                    for (int64_t k = 0; k < p->kw; k++) {
                        int64_t iw = ow * p->sw - p->pw + k;
                        if (iw >= 0 && iw < p->W) acc += s[ih * p->W + iw];
                    }
                }
                y[(nc * p->OH + oh) * p->OW + ow] = acc * inv;
            }
    }
}

void FN(tr_avgpool_bwd)(const tr_pool2 *p, const R *dy, R *dx) {
    R inv = (R)1 / (R)(p->kh * p->kw);
    for (int64_t nc = 0; nc < p->N * p->C; nc++) {
        R *d = dx + nc * p->H * p->W;
        for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++) {
                R g = dy[(nc * p->OH + oh) * p->OW + ow] * inv;
                for (int64_t i = 0; i < p->kh; i++) {
                    int64_t ih = oh * p->sh - p->ph + i;
                    if (ih < 0 || ih >= p->H) continue;
                    for (int64_t k = 0; k < p->kw; k++) {
                        int64_t iw = ow * p->sw - p->pw + k;
                        if (iw >= 0 && iw < p->W) d[ih * p->W + iw] += g;
                    }
                }
            }
    }
}

/* Global average pool: x (NC, S) -> y (NC). */
void FN(tr_gap_fwd)(int64_t NC, int64_t S, const R *x, R *y) {
    for (int64_t i = 0; i < NC; i++) {
        R acc = 0;
        for (int64_t s = 0; s < S; s++) acc += x[i * S + s];
        y[i] = acc / (R)S;
    }
}
void FN(tr_gap_bwd)(int64_t NC, int64_t S, const R *dy, R *dx) {
    for (int64_t i = 0; i < NC; i++)
        for (int64_t s = 0; s < S; s++) dx[i * S + s] += dy[i] / (R)S;
}

/* ------------------------------------------------------- Normalisation */

/* BatchNorm2d, training: batch statistics over (N, S) per channel; saves
 * xhat (N,C,S) and invstd (C); updates running mean/var (unbiased) with
 * momentum as PyTorch: r = (1 - m) r + m batch. run_* may be NULL. */
void FN(tr_bn_train_fwd)(int64_t N, int64_t C, int64_t S, const R *x, const R *g, const R *b,
                         R eps, R mom, R *run_mean, R *run_var, R *xhat, R *invstd, R *y) {
    int64_t cnt = N * S;
    for (int64_t c = 0; c < C; c++) {
        double mean = 0, var = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) mean += x[(n * C + c) * S + s];
        mean /= (double)cnt;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) {
                double d = x[(n * C + c) * S + s] - mean;
                var += d * d;
            }
        double bvar = var / (double)cnt;
        R is = (R)(1.0 / sqrt(bvar + eps));
        invstd[c] = is;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) {
                int64_t o = (n * C + c) * S + s;
                xhat[o] = (x[o] - (R)mean) * is;
                y[o] = xhat[o] * g[c] + b[c];
            }
        if (run_mean) {
            run_mean[c] = (1 - mom) * run_mean[c] + mom * (R)mean;
            run_var[c] = (1 - mom) * run_var[c] + mom * (R)(cnt > 1 ? var / (double)(cnt - 1) : bvar);
        }
    }
}

void FN(tr_bn_eval_fwd)(int64_t N, int64_t C, int64_t S, const R *x, const R *g, const R *b,
                        const R *mean, const R *var, R eps, R *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            R is = (R)(1.0 / sqrt((double)var[c] + eps));
            for (int64_t s = 0; s < S; s++) {
                int64_t o = (n * C + c) * S + s;
                y[o] = (x[o] - mean[c]) * is * g[c] + b[c];
            }
        }
}

/* dx += g*invstd/cnt * (cnt*dy - sum(dy) - xhat*sum(dy*xhat)); dg, db. */
void FN(tr_bn_bwd)(int64_t N, int64_t C, int64_t S, const R *xhat, const R *invstd, const R *g,
                   const R *dy, R *dx, R *dg, R *db) {
    int64_t cnt = N * S;
    for (int64_t c = 0; c < C; c++) {
        R sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) {
                int64_t o = (n * C + c) * S + s;
                sdy += dy[o]; sdyx += dy[o] * xhat[o];
            }
        dg[c] = sdyx; db[c] = sdy;
        if (!dx) continue;
        R k = g[c] * invstd[c] / (R)cnt;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) {
                int64_t o = (n * C + c) * S + s;
                dx[o] += k * ((R)cnt * dy[o] - sdy - xhat[o] * sdyx);
            }
    }
}

/* LayerNorm over the last D of `rows` rows; saves xhat and invstd (rows). */
void FN(tr_ln_fwd)(int64_t rows, int64_t D, const R *x, const R *g, const R *b, R eps, R *xhat,
                   R *invstd, R *y) {
    for (int64_t r = 0; r < rows; r++) {
        const R *xr = x + r * D;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < D; i++) mean += xr[i];
        mean /= (double)D;
        for (int64_t i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
        R is = (R)(1.0 / sqrt(var / (double)D + eps));
        invstd[r] = is;
        for (int64_t i = 0; i < D; i++) {
            xhat[r * D + i] = (xr[i] - (R)mean) * is;
            y[r * D + i] = xhat[r * D + i] * g[i] + b[i];
        }
    }
}

/* dg, db are overwritten (sums over rows in row order). */
void FN(tr_ln_bwd)(int64_t rows, int64_t D, const R *xhat, const R *invstd, const R *g, const R *dy,
                   R *dx, R *dg, R *db) {
    for (int64_t i = 0; i < D; i++) dg[i] = db[i] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const R *h = xhat + r * D, *d = dy + r * D;
        R s1 = 0, s2 = 0;
        for (int64_t i = 0; i < D; i++) {
            R gd = d[i] * g[i];
            s1 += gd; s2 += gd * h[i];
            dg[i] += d[i] * h[i]; db[i] += d[i];
        }
        if (!dx) continue;
        R k = invstd[r] / (R)D;
        for (int64_t i = 0; i < D; i++) dx[r * D + i] += k * ((R)D * d[i] * g[i] - s1 - h[i] * s2);
    }
}

/* --------------------------------------------------------- Activations */

static R FN(gelu1)(R v) { return (R)0.5 * v * ((R)1 + (R)erf((double)v * 0.70710678118654752440)); }

void FN(tr_act_fwd)(int kind, int64_t n, const R *x, R *y) {
    switch (kind) {
    case TR_ACT_RELU: for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; break;
    case TR_ACT_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = (R)1 / ((R)1 + (R)exp(-(double)x[i])); break;
    case TR_ACT_TANH: for (int64_t i = 0; i < n; i++) y[i] = (R)tanh((double)x[i]); break;
    case TR_ACT_GELU: for (int64_t i = 0; i < n; i++) y[i] = FN(gelu1)(x[i]); break;
    default: for (int64_t i = 0; i < n; i++) y[i] = x[i];
    }
}

/* dx += f'(x) dy (uses x and y = f(x)). */
void FN(tr_act_bwd)(int kind, int64_t n, const R *x, const R *y, const R *dy, R *dx) {
    switch (kind) {
    case TR_ACT_RELU: for (int64_t i = 0; i < n; i++) dx[i] += x[i] > 0 ? dy[i] : 0; break;
    case TR_ACT_SIGMOID: for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * y[i] * ((R)1 - y[i]); break;
    case TR_ACT_TANH: for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * ((R)1 - y[i] * y[i]); break;
    case TR_ACT_GELU:
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            double cdf = 0.5 * (1 + erf(v * 0.70710678118654752440));
            double pdf = exp(-0.5 * v * v) * 0.39894228040143267794;
            dx[i] += dy[i] * (R)(cdf + v * pdf);
        }
        break;
    default: for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    }
}

/* Softmax over the last D of `rows` rows. */
void FN(tr_softmax_fwd)(int64_t rows, int64_t D, const R *x, R *y) {
    for (int64_t r = 0; r < rows; r++) {
        const R *xr = x + r * D;
        R mx = xr[0];
        for (int64_t i = 1; i < D; i++) mx = xr[i] > mx ? xr[i] : mx;
        R s = 0;
        for (int64_t i = 0; i < D; i++) { y[r * D + i] = (R)exp((double)(xr[i] - mx)); s += y[r * D + i]; }
        for (int64_t i = 0; i < D; i++) y[r * D + i] /= s;
    }
}
void FN(tr_softmax_bwd)(int64_t rows, int64_t D, const R *y, const R *dy, R *dx) {
    for (int64_t r = 0; r < rows; r++) {
        R dot = 0;
        for (int64_t i = 0; i < D; i++) dot += dy[r * D + i] * y[r * D + i];
        for (int64_t i = 0; i < D; i++) dx[r * D + i] += y[r * D + i] * (dy[r * D + i] - dot);
    }
}

/* ----------------------------------------------------------- Embedding */

/* y (n, D) = W[idx] ; dW (V, D) += scatter of dy (dW zeroed by caller). */
void FN(tr_embed_fwd)(int64_t n, int64_t D, const int64_t *idx, const R *W, R *y) {
    for (int64_t i = 0; i < n; i++) memcpy(y + i * D, W + idx[i] * D, (size_t)D * sizeof(R));
}
void FN(tr_embed_bwd)(int64_t n, int64_t D, const int64_t *idx, const R *dy, R *dW) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < D; k++) dW[idx[i] * D + k] += dy[i * D + k];
}

/* -------------------------------------------------------------- Losses */

/* Cross-entropy over logits (B, K) with integer labels; label smoothing eps
 * and optional class weights w (K), PyTorch semantics (mean reduction divides
 * by the sum of the target weights). Writes dlogits (B, K). Returns the loss. */
double FN(tr_ce_loss)(int64_t B, int64_t K, const R *z, const int64_t *y, double eps,
                      const R *w, R *dz) {
    double wsum = 0, nll = 0, smooth = 0;
    for (int64_t r = 0; r < B; r++) wsum += w ? (double)w[y[r]] : 1.0;
    for (int64_t r = 0; r < B; r++) {
        const R *zr = z + r * K;
        double mx = zr[0], s = 0;
        for (int64_t k = 1; k < K; k++) mx = zr[k] > mx ? zr[k] : mx;
        for (int64_t k = 0; k < K; k++) s += exp((double)zr[k] - mx);
        double lse = mx + log(s);
        double wy = w ? (double)w[y[r]] : 1.0;
        nll += wy * (lse - zr[y[r]]);
        double sw = 0;
        for (int64_t k = 0; k < K; k++) {
            double wk = w ? (double)w[k] : 1.0;
            smooth += wk * (lse - zr[k]);
            sw += wk;
        }
        for (int64_t k = 0; k < K; k++) {
            double p = exp((double)zr[k] - lse), wk = w ? (double)w[k] : 1.0;
            double g = (1 - eps) * wy * (p - (k == y[r])) + eps / (double)K * (sw * p - wk);
            dz[r * K + k] = (R)(g / wsum);
        }
    }
    return ((1 - eps) * nll + eps / (double)K * smooth) / wsum;
}

/* Binary cross-entropy with logits, mean over n elements. */
double FN(tr_bce_loss)(int64_t n, const R *z, const R *t, R *dz) {
    double l = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = z[i], y = t[i];
        l += (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
        dz[i] = (R)((1 / (1 + exp(-x)) - y) / (double)n);
    }
    return l / (double)n;
}

/* Mean squared error, mean over n elements. */
double FN(tr_mse_loss)(int64_t n, const R *z, const R *t, R *dz) {
    double l = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)z[i] - (double)t[i];
        l += d * d;
        dz[i] = (R)(2 * d / (double)n);
    }
    return l / (double)n;
}
