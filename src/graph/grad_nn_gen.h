/* Convolution, pooling and normalisation kernels for training, written once
 * for a real type R (FN(x) = x##_f32 / x##_f64) and instantiated by
 * grad_nn.c: im2col / col2im over 1-3 spatial dims (the conv backward and
 * the float64 forward), max/average pooling forward (f64) and backward,
 * batch norm (training forward, backward), layer norm (f64 forward,
 * backward). Parallel work is split by output rows / planes / channels,
 * each computed by one task in a fixed order: bit-identical at any thread
 * count. Include only from grad_nn.c (needs geo, pgeo). */

/* ------------------------------------------------------------ im2col */

typedef struct { const geo *p; const R *x; R *cols; R *dx; } FN(i2c_job);

/* cols (C*ksz, N*osz): row r = (c, k0, k1, k2), column (n, o0, o1, o2). */
static void FN(im2col_rows)(void *ctx, size_t r0, size_t r1, int chunk) {
    const FN(i2c_job) *j = ctx;
    const geo *p = j->p;
    int64_t NP = p->N * p->osz;
    for (size_t r = r0; r < r1; r++) {
        int64_t c = (int64_t)r / p->ksz, kk = (int64_t)r % p->ksz;
        int64_t k2 = kk % p->k[2], k1 = (kk / p->k[2]) % p->k[1], k0 = kk / (p->k[2] * p->k[1]);
        R *dst = j->cols + (int64_t)r * NP;
        for (int64_t n = 0; n < p->N; n++) {
            const R *src = j->x + (n * p->C + c) * p->isz;
            R *d = dst + n * p->osz;
            for (int64_t o0 = 0; o0 < p->out[0]; o0++) {
                int64_t i0 = o0 * p->s[0] - p->pb[0] + k0 * p->d[0];
                for (int64_t o1 = 0; o1 < p->out[1]; o1++) {
                    int64_t i1 = o1 * p->s[1] - p->pb[1] + k1 * p->d[1];
                    R *dd = d + (o0 * p->out[1] + o1) * p->out[2];
                    if (i0 < 0 || i0 >= p->in[0] || i1 < 0 || i1 >= p->in[1]) {
                        for (int64_t o2 = 0; o2 < p->out[2]; o2++) dd[o2] = 0;
                        continue;
                    }
                    const R *sr = src + (i0 * p->in[1] + i1) * p->in[2];
                    int64_t base = -p->pb[2] + k2 * p->d[2];
                    if (p->s[2] == 1) { /* zeros, a contiguous run, zeros */
                        int64_t lo = base < 0 ? -base : 0, hi = p->in[2] - base < p->out[2] ? p->in[2] - base : p->out[2];
                        if (hi < lo) hi = lo;
                        const R *sb = sr + base;
                        for (int64_t o2 = 0; o2 < lo; o2++) dd[o2] = 0;
                        for (int64_t o2 = lo; o2 < hi; o2++) dd[o2] = sb[o2];
                        for (int64_t o2 = hi; o2 < p->out[2]; o2++) dd[o2] = 0;
                        continue;
                    }
                    for (int64_t o2 = 0; o2 < p->out[2]; o2++) {
                        int64_t i2 = o2 * p->s[2] + base;
                        dd[o2] = (i2 < 0 || i2 >= p->in[2]) ? 0 : sr[i2];
                    }
                }
            }
        }
    }
}

/* dx (N, C, in...) = col2im(cols); split by (n, c) planes, each gathering
 * its kernel rows in a fixed order. */
static void FN(col2im_planes)(void *ctx, size_t q0, size_t q1, int chunk) {
    const FN(i2c_job) *j = ctx;
    const geo *p = j->p;
    int64_t NP = p->N * p->osz;
    for (size_t q = q0; q < q1; q++) {
        int64_t n = (int64_t)q / p->C, c = (int64_t)q % p->C;
        R *dst = j->dx + (n * p->C + c) * p->isz;
        for (int64_t i = 0; i < p->isz; i++) dst[i] = 0;
        for (int64_t kk = 0; kk < p->ksz; kk++) {
            int64_t k2 = kk % p->k[2], k1 = (kk / p->k[2]) % p->k[1], k0 = kk / (p->k[2] * p->k[1]);
            const R *src = j->cols + (c * p->ksz + kk) * NP + n * p->osz;
            for (int64_t o0 = 0; o0 < p->out[0]; o0++) {
                int64_t i0 = o0 * p->s[0] - p->pb[0] + k0 * p->d[0];
                if (i0 < 0 || i0 >= p->in[0]) continue;
                for (int64_t o1 = 0; o1 < p->out[1]; o1++) {
                    int64_t i1 = o1 * p->s[1] - p->pb[1] + k1 * p->d[1];
                    if (i1 < 0 || i1 >= p->in[1]) continue;
                    const R *sr = src + (o0 * p->out[1] + o1) * p->out[2];
                    R *dr = dst + (i0 * p->in[1] + i1) * p->in[2];
                    int64_t base = -p->pb[2] + k2 * p->d[2];
                    if (p->s[2] == 1) {
                        int64_t lo = base < 0 ? -base : 0, hi = p->in[2] - base < p->out[2] ? p->in[2] - base : p->out[2];
                        R *db = dr + base;
                        for (int64_t o2 = lo; o2 < hi; o2++) db[o2] += sr[o2];
                        continue;
                    }
                    for (int64_t o2 = 0; o2 < p->out[2]; o2++) {
                        int64_t i2 = o2 * p->s[2] + base;
                        if (i2 >= 0 && i2 < p->in[2]) dr[i2] += sr[o2];
                    }
                }
            }
        }
    }
}

static void FN(im2col)(const geo *p, const R *x, R *cols, kl_pool *pool) {
    FN(i2c_job) j = {p, x, cols, NULL};
    kl_pool_parallel_for(pool, (size_t)(p->C * p->ksz), 1, FN(im2col_rows), &j);
}
static void FN(col2im)(const geo *p, const R *cols, R *dx, kl_pool *pool) {
    FN(i2c_job) j = {p, NULL, (R *)cols, dx};
    kl_pool_parallel_for(pool, (size_t)(p->N * p->C), 1, FN(col2im_planes), &j);
}

/* y (N, M, osz) <-> ym (M, N*osz) */
static void FN(nm_to_mn)(const geo *p, const R *y, R *ym) {
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++)
            memcpy(ym + m * p->N * p->osz + n * p->osz, y + (n * p->M + m) * p->osz, sizeof(R) * (size_t)p->osz);
}

/* ------------------------------------------------------------ Conv */

/* Forward (the float64 path of Conv): ws = cols (C*ksz x NP) + ym (M x NP). */
__attribute__((unused)) static void FN(conv_fwd)(const geo *p, const R *x, const R *w, const R *b, R *y, R *ws, kl_pool *pool) {
    int64_t NP = p->N * p->osz, Kg = p->C / p->G * p->ksz, Mg = p->M / p->G;
    R *cols = ws, *ym = ws + p->C * p->ksz * NP;
    FN(im2col)(p, x, cols, pool);
    for (int64_t g = 0; g < p->G; g++)
        kl__gemm_dt(DT, 0, 0, Mg, NP, Kg, 1, w + g * Mg * Kg, Kg, cols + g * Kg * NP, NP, 0, ym + g * Mg * NP, NP, pool);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++) {
            R *d = y + (n * p->M + m) * p->osz;
            const R *s = ym + m * NP + n * p->osz;
            R bb = b ? b[m] : 0;
            for (int64_t i = 0; i < p->osz; i++) d[i] = s[i] + bb;
        }
}

/* Backward: dx (may be NULL), dw (may be NULL), db (may be NULL). Same ws. */
__attribute__((unused)) static void FN(conv_bwd)(const geo *p, const R *x, const R *w, const R *dy, R *dx, R *dw, R *db, R *ws, kl_pool *pool) {
    int64_t NP = p->N * p->osz, Kg = p->C / p->G * p->ksz, Mg = p->M / p->G;
    R *cols = ws, *dym = ws + p->C * p->ksz * NP;
    FN(nm_to_mn)(p, dy, dym);
    if (db)
        for (int64_t m = 0; m < p->M; m++) {
            R s = 0;
            const R *r = dym + m * NP;
            for (int64_t i = 0; i < NP; i++) s += r[i];
            db[m] = s;
        }
    if (dw) {
        FN(im2col)(p, x, cols, pool);
        for (int64_t g = 0; g < p->G; g++)
            kl__gemm_dt(DT, 0, 1, Mg, Kg, NP, 1, dym + g * Mg * NP, NP, cols + g * Kg * NP, NP, 0, dw + g * Mg * Kg, Kg, pool);
    }
    if (dx) {
        for (int64_t g = 0; g < p->G; g++)
            kl__gemm_dt(DT, 1, 0, Kg, NP, Mg, 1, w + g * Mg * Kg, Kg, dym + g * Mg * NP, NP, 0, cols + g * Kg * NP, NP, pool);
        FN(col2im)(p, cols, dx, pool);
    }
}

/* ------------------------------------------------------------ Pooling */

typedef struct { const geo *p; const R *x, *dy; R *y, *dx; int max; } FN(pool_job);

/* Visits the window of output o (o0, o1, o2) in plane xs: calls BODY(i)
 * with the flat in-plane index i of each tap inside the input. */
#define POOL_WINDOW(p, o0, o1, o2, BODY)                                                        \
    for (int64_t k0 = 0; k0 < (p)->k[0]; k0++) {                                                \
        int64_t i0 = (o0) * (p)->s[0] - (p)->pb[0] + k0 * (p)->d[0];                            \
        if (i0 < 0 || i0 >= (p)->in[0]) continue;                                               \
        for (int64_t k1 = 0; k1 < (p)->k[1]; k1++) {                                            \
            int64_t i1 = (o1) * (p)->s[1] - (p)->pb[1] + k1 * (p)->d[1];                        \
            if (i1 < 0 || i1 >= (p)->in[1]) continue;                                           \
            for (int64_t k2 = 0; k2 < (p)->k[2]; k2++) {                                        \
                int64_t i2 = (o2) * (p)->s[2] - (p)->pb[2] + k2 * (p)->d[2];                    \
                if (i2 < 0 || i2 >= (p)->in[2]) continue;                                       \
                int64_t ii = (i0 * (p)->in[1] + i1) * (p)->in[2] + i2;                          \
                BODY;                                                                           \
            }                                                                                   \
        }                                                                                       \
    }

/* Average divisor of output o: taps inside the input, or (count_include_pad)
 * inside the padded input. */
static int64_t FN(avg_div)(const geo *p, int64_t o0, int64_t o1, int64_t o2) {
    int64_t o[3] = {o0, o1, o2}, cnt = 1;
    for (int a = 0; a < 3; a++) {
        int64_t c = 0;
        for (int64_t k = 0; k < p->k[a]; k++) {
            int64_t i = o[a] * p->s[a] - p->pb[a] + k * p->d[a];
            if (p->cip ? (i >= -p->pb[a] && i < p->in[a] + p->pe[a]) : (i >= 0 && i < p->in[a])) c++;
        }
        cnt *= c;
    }
    return cnt ? cnt : 1;
}

static void FN(pool_planes)(void *ctx, size_t q0, size_t q1, int chunk) {
    const FN(pool_job) *j = ctx;
    const geo *p = j->p;
    for (size_t q = q0; q < q1; q++) {
        const R *xs = j->x + (int64_t)q * p->isz;
        for (int64_t o0 = 0; o0 < p->out[0]; o0++)
            for (int64_t o1 = 0; o1 < p->out[1]; o1++)
                for (int64_t o2 = 0; o2 < p->out[2]; o2++) {
                    int64_t oi = (int64_t)q * p->osz + (o0 * p->out[1] + o1) * p->out[2] + o2, best = -1;
                    R acc = 0;
                    if (j->max) {
                        POOL_WINDOW(p, o0, o1, o2, if (best < 0 || xs[ii] > xs[best] || xs[ii] != xs[ii]) best = ii)
                        /* max 2: the pool reads a ReLU output and dx is the gradient of the
                         * ReLU's input (relu' at the maximum = max > 0) */
                        if (j->dx) { if (best >= 0 && (j->max < 2 || xs[best] > 0)) j->dx[(int64_t)q * p->isz + best] += j->dy[oi]; }
                        else j->y[oi] = best >= 0 ? xs[best] : (R)-INFINITY;
                    } else if (j->dx) {
                        R g = j->dy[oi] / (R)FN(avg_div)(p, o0, o1, o2);
                        R *d = j->dx + (int64_t)q * p->isz;
                        POOL_WINDOW(p, o0, o1, o2, d[ii] += g)
                    } else {
                        POOL_WINDOW(p, o0, o1, o2, acc += xs[ii])
                        j->y[oi] = acc / (R)FN(avg_div)(p, o0, o1, o2);
                    }
                }
    }
}

/* Max pool backward, 2x2 stride 2 without padding or dilation (the usual
 * CNN pool): each plane zeroed and scattered in one pass, same choice rule
 * (first maximum, NaN wins) as the generic path. */
static void FN(maxpool2_bwd_planes)(void *ctx, size_t q0, size_t q1, int chunk) {
    const FN(pool_job) *j = ctx;
    const geo *p = j->p;
    int64_t H = p->in[1], W = p->in[2], OH = p->out[1], OW = p->out[2]; /* 2-D: the last two slots */
    for (size_t q = q0; q < q1; q++) {
        const R *xs = j->x + (int64_t)q * p->isz, *d = j->dy + (int64_t)q * p->osz;
        R *o = j->dx + (int64_t)q * p->isz;
        for (int64_t oh = 0; oh < OH; oh++) {
            const R *r0 = xs + 2 * oh * W, *r1 = r0 + W, *dr = d + oh * OW;
            R *w0 = o + 2 * oh * W, *w1 = w0 + W;
            /* every window writes its 4 cells (the gradient at the first
             * maximum, zeros elsewhere): no scatter, no branch */
            int64_t ow0 = MAXPOOL2_SIMD(r0, r1, dr, w0, w1, OW, j->max == 2);
            for (int64_t ow = ow0; ow < OW; ow++) {
                R a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], e = r1[2 * ow + 1], g = dr[ow];
                int mb = b > a || b != b;
                R m1 = mb ? b : a;
                int mc = c > m1 || c != c;
                R m2 = mc ? c : m1;
                int me = e > m2 || e != e;
                int sel = me ? 3 : mc ? 2 : mb ? 1 : 0;
                if (j->max == 2 && !((me ? e : m2) > 0)) g = 0;
                w0[2 * ow] = sel == 0 ? g : (R)0;
                w0[2 * ow + 1] = sel == 1 ? g : (R)0;
                w1[2 * ow] = sel == 2 ? g : (R)0;
                w1[2 * ow + 1] = sel == 3 ? g : (R)0;
            }
            for (int64_t c = 2 * OW; c < W; c++) w0[c] = w1[c] = 0;
        }
        for (int64_t r = 2 * OH; r < H; r++)
            for (int64_t c = 0; c < W; c++) o[r * W + c] = 0;
    }
}

/* Forward (y) or backward (dx from dy, x) of max (max 1; 2: fused with the
 * gradient of a ReLU before the pool) / average (max 0) pooling. */
static void FN(pool)(const geo *p, int max, const R *x, R *y, const R *dy, R *dx, kl_pool *pool) {
    FN(pool_job) j = {p, x, dy, y, dx, max};
    if (dx && max && p->nsp == 2 && p->k[1] == 2 && p->k[2] == 2 && p->s[1] == 2 && p->s[2] == 2 && p->d[1] == 1 && p->d[2] == 1 &&
        !p->pb[1] && !p->pb[2] && p->out[1] * 2 <= p->in[1] && p->out[2] * 2 <= p->in[2]) {
        kl_pool_parallel_for(pool, (size_t)(p->N * p->C), 4, FN(maxpool2_bwd_planes), &j);
        return;
    }
    if (dx)
        for (int64_t i = 0; i < p->N * p->C * p->isz; i++) dx[i] = 0;
    kl_pool_parallel_for(pool, (size_t)(p->N * p->C), 1, FN(pool_planes), &j);
}

/* ------------------------------------------------------- Normalisation */

typedef struct {
    int64_t N, C, S;
    const R *x, *g, *b, *in_mean, *in_var, *dy;
    R *y, *run_mean, *run_var, *dx, *dg, *db;
    double eps, mom;
    int train, unbiased;
} FN(bn_job);

/* Batch statistics of channel c (double accumulation, fixed order). */
static void FN(bn_stats)(const FN(bn_job) *j, int64_t c, double *mean, double *var) {
    double m = 0, v = 0;
    int64_t cnt = j->N * j->S;
    for (int64_t n = 0; n < j->N; n++) {
        const R *xs = j->x + (n * j->C + c) * j->S;
        for (int64_t s = 0; s < j->S; s++) m += xs[s];
    }
    m /= (double)(cnt ? cnt : 1);
    for (int64_t n = 0; n < j->N; n++) {
        const R *xs = j->x + (n * j->C + c) * j->S;
        for (int64_t s = 0; s < j->S; s++) { double d = xs[s] - m; v += d * d; }
    }
    *mean = m;
    *var = v; /* sum of squares */
}

/* Training forward per channel: y, and the running statistics (ONNX:
 * r = momentum * r + (1 - momentum) * batch with the biased batch variance;
 * unbiased (PyTorch's running_var) when the node has _unbiased_var=1).
 * Eval forward (train 0): y from in_mean/in_var. */
static void FN(bn_fwd_ch)(void *ctx, size_t c0, size_t c1, int chunk) {
    const FN(bn_job) *j = ctx;
    int64_t cnt = j->N * j->S;
    for (size_t cc = c0; cc < c1; cc++) {
        int64_t c = (int64_t)cc;
        double mean, ss, var;
        if (j->train) { FN(bn_stats)(j, c, &mean, &ss); var = ss / (double)(cnt ? cnt : 1); }
        else { mean = j->in_mean[c]; var = j->in_var[c]; }
        R is = (R)(1.0 / sqrt(var + j->eps)), gg = j->g[c], bb = j->b[c], mu = (R)mean;
        for (int64_t n = 0; n < j->N; n++) {
            const R *xs = j->x + (n * j->C + c) * j->S;
            R *ys = j->y + (n * j->C + c) * j->S;
            for (int64_t s = 0; s < j->S; s++) ys[s] = (xs[s] - mu) * is * gg + bb;
        }
        if (j->train && j->run_mean) j->run_mean[c] = (R)(j->mom * j->in_mean[c] + (1 - j->mom) * mean);
        if (j->train && j->run_var)
            j->run_var[c] = (R)(j->mom * j->in_var[c] + (1 - j->mom) * (j->unbiased && cnt > 1 ? ss / (double)(cnt - 1) : var));
    }
}

/* Backward per channel: training dx = g*invstd/cnt * (cnt*dy - sum(dy) -
 * xhat*sum(dy*xhat)); eval dx = dy*g*invstd (running statistics); dg, db. */
static void FN(bn_bwd_ch)(void *ctx, size_t c0, size_t c1, int chunk) {
    const FN(bn_job) *j = ctx;
    int64_t cnt = j->N * j->S;
    for (size_t cc = c0; cc < c1; cc++) {
        int64_t c = (int64_t)cc;
        double mean, var, ss;
        if (j->train) { FN(bn_stats)(j, c, &mean, &ss); var = ss / (double)(cnt ? cnt : 1); }
        else { mean = j->in_mean[c]; var = j->in_var[c]; }
        R is = (R)(1.0 / sqrt(var + j->eps)), mu = (R)mean, sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < j->N; n++) {
            const R *xs = j->x + (n * j->C + c) * j->S, *d = j->dy + (n * j->C + c) * j->S;
            for (int64_t s = 0; s < j->S; s++) { sdy += d[s]; sdyx += d[s] * (xs[s] - mu) * is; }
        }
        if (j->dg) j->dg[c] = sdyx;
        if (j->db) j->db[c] = sdy;
        if (!j->dx) continue;
        R k = j->g[c] * is / (R)cnt, gi = j->g[c] * is;
        for (int64_t n = 0; n < j->N; n++) {
            const R *xs = j->x + (n * j->C + c) * j->S, *d = j->dy + (n * j->C + c) * j->S;
            R *o = j->dx + (n * j->C + c) * j->S;
            if (j->train)
                for (int64_t s = 0; s < j->S; s++) o[s] = k * ((R)cnt * d[s] - sdy - (xs[s] - mu) * is * sdyx);
            else
                for (int64_t s = 0; s < j->S; s++) o[s] = d[s] * gi;
        }
    }
}

/* LayerNorm forward (f64 path) over rows of D: y, mean, invstd (optional). */
__attribute__((unused)) static void FN(ln_fwd)(int64_t rows, int64_t D, const R *x, const R *g, const R *b, double eps, R *y, R *mean, R *invstd) {
    for (int64_t r = 0; r < rows; r++) {
        const R *xr = x + r * D;
        double m = 0, v = 0;
        for (int64_t i = 0; i < D; i++) m += xr[i];
        m /= (double)D;
        for (int64_t i = 0; i < D; i++) v += (xr[i] - m) * (xr[i] - m);
        R is = (R)(1.0 / sqrt(v / (double)D + eps));
        if (mean) mean[r] = (R)m;
        if (invstd) invstd[r] = is;
        for (int64_t i = 0; i < D; i++) y[r * D + i] = (xr[i] - (R)m) * is * g[i] + (b ? b[i] : 0);
    }
}

/* LayerNorm backward: dx rows in parallel blocks; dg, db summed over rows in
 * row order (serial). */
typedef struct { int64_t rows, D; const R *x, *g, *dy; R *dx; double eps; } FN(ln_job);
static void FN(ln_row_stats)(const R *xr, int64_t D, double eps, R *mu, R *is) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < D; i++) m += xr[i];
    m /= (double)D;
    for (int64_t i = 0; i < D; i++) v += (xr[i] - m) * (xr[i] - m);
    *mu = (R)m;
    *is = (R)(1.0 / sqrt(v / (double)D + eps));
}
static void FN(ln_dx_rows)(void *ctx, size_t r0, size_t r1, int chunk) {
    const FN(ln_job) *j = ctx;
    int64_t D = j->D;
    for (size_t rr = r0; rr < r1; rr++) {
        int64_t r = (int64_t)rr;
        const R *xr = j->x + r * D, *d = j->dy + r * D;
        R mu, is, s1 = 0, s2 = 0;
        FN(ln_row_stats)(xr, D, j->eps, &mu, &is);
        for (int64_t i = 0; i < D; i++) { R gd = d[i] * j->g[i]; s1 += gd; s2 += gd * (xr[i] - mu) * is; }
        R k = is / (R)D;
        for (int64_t i = 0; i < D; i++) j->dx[r * D + i] = k * ((R)D * d[i] * j->g[i] - s1 - (xr[i] - mu) * is * s2);
    }
}
static void FN(ln_bwd)(int64_t rows, int64_t D, const R *x, const R *g, const R *dy, double eps, R *dx, R *dg, R *db, kl_pool *pool) {
    FN(ln_job) j = {rows, D, x, g, dy, dx, eps};
    if (dx) kl_pool_parallel_for(pool, (size_t)rows, 16, FN(ln_dx_rows), &j);
    if (dg) for (int64_t i = 0; i < D; i++) dg[i] = 0;
    if (db) for (int64_t i = 0; i < D; i++) db[i] = 0;
    if (!dg && !db) return;
    for (int64_t r = 0; r < rows; r++) {
        const R *xr = x + r * D, *d = dy + r * D;
        R mu, is;
        FN(ln_row_stats)(xr, D, eps, &mu, &is);
        for (int64_t i = 0; i < D; i++) {
            if (dg) dg[i] += d[i] * (xr[i] - mu) * is;
            if (db) db[i] += d[i];
        }
    }
}
