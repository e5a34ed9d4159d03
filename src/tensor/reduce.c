/* Reductions over axes (f32 with vectorised row paths, and a generic path
 * for f64/int shape arithmetic), ArgMax/ArgMin and Softmax/LogSoftmax. Each
 * output is computed by one work item in a fixed order. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>
#include <string.h>

/* ==================================================================
 * Plan: kept/reduced dims after dropping size-1 dims
 * ================================================================== */

typedef struct {
    int nk, nr;
    int64_t kd[KL_MAX_DIMS], ks[KL_MAX_DIMS];   /* kept dims and their input strides */
    int64_t rd[KL_MAX_DIMS], rs[KL_MAX_DIMS];   /* reduced dims and strides */
    int64_t nout, R;
    int row;                                    /* reduced dims are exactly the contiguous tail */
} rplan;

static void rplan_make(int rank, const int64_t *dims, uint32_t mask, rplan *p) {
    int64_t st[KL_MAX_DIMS];
    kl_tensor_contiguous_strides(rank, dims, st);
    memset(p, 0, sizeof *p);
    p->nout = 1;
    p->R = 1;
    for (int i = 0; i < rank; i++) {
        int red = (mask >> i) & 1;
        if (red) p->R *= dims[i]; else p->nout *= dims[i];
        if (dims[i] == 1) continue;
        if (red) {
            if (p->nr && p->rs[p->nr - 1] == st[i] * dims[i]) { p->rd[p->nr - 1] *= dims[i]; p->rs[p->nr - 1] = st[i]; }
            else { p->rd[p->nr] = dims[i]; p->rs[p->nr++] = st[i]; }
        } else {
            if (p->nk && p->ks[p->nk - 1] == st[i] * dims[i]) { p->kd[p->nk - 1] *= dims[i]; p->ks[p->nk - 1] = st[i]; }
            else { p->kd[p->nk] = dims[i]; p->ks[p->nk++] = st[i]; }
        }
    }
    p->row = p->nr == 0 || (p->nr == 1 && p->rs[0] == 1);
}

static int64_t out_offset(const rplan *p, int64_t o) {
    int64_t off = 0;
    for (int i = p->nk - 1; i >= 0; i--) { off += (o % p->kd[i]) * p->ks[i]; o /= p->kd[i]; }
    return off;
}

/* ==================================================================
 * f32
 * ================================================================== */

static float sumsq_f32(const float *x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    a0 = _mm256_add_ps(a0, a1);
    float t[8];
    _mm256_storeu_ps(t, a0);
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

static float row_max(const float *x, int64_t n, int is_min) {
    float m = is_min ? INFINITY : -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (v != v) return v;
        if (is_min ? v < m : v > m) m = v;
    }
    return m;
}

static float sum_exp_minus(const float *x, int64_t n, float m) {
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, kl__exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
    float t[8];
    _mm256_storeu_ps(t, acc);
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < n; i++) s += kl__exp1(x[i] - m);
    return s;
}

static float finish(kl_reduce_op op, float acc, int64_t R) {
    switch (op) {
    case KL_RED_MEAN: return R ? acc / (float)R : NAN;
    case KL_RED_L2: return sqrtf(acc);
    case KL_RED_LOG_SUM: return logf(acc);
    default: return acc;
    }
}

static float reduce_row(kl_reduce_op op, const float *x, int64_t n) {
    switch (op) {
    case KL_RED_SUM: case KL_RED_MEAN: return finish(op, kl__sum_f32(x, n), n);
    case KL_RED_SUM_SQUARE: case KL_RED_L2: return finish(op, sumsq_f32(x, n), n);
    case KL_RED_L1: { float s = 0; for (int64_t i = 0; i < n; i++) s += fabsf(x[i]); return s; }
    case KL_RED_LOG_SUM: return logf(kl__sum_f32(x, n));
    case KL_RED_MAX: return row_max(x, n, 0);
    case KL_RED_MIN: return row_max(x, n, 1);
    case KL_RED_PROD: { float s = 1; for (int64_t i = 0; i < n; i++) s *= x[i]; return s; }
    case KL_RED_LOG_SUM_EXP: {
        float m = row_max(x, n, 0);
        if (m != m || isinf(m)) return n ? (m != m ? m : (m > 0 ? m : -INFINITY)) : -INFINITY;
        return m + logf(sum_exp_minus(x, n, m));
    }
    default: return NAN;
    }
}

/* Strided generic: iterate the reduced multi-index in order. */
#define FOR_REDUCED(p, base, OFF, BODY)                                            \
    do {                                                                           \
        int64_t ix_[KL_MAX_DIMS] = {0}, OFF = (base);                              \
        for (int64_t r_ = 0; r_ < (p)->R; r_++) {                                  \
            BODY;                                                                  \
            for (int k_ = (p)->nr - 1; k_ >= 0; k_--) {                            \
                OFF += (p)->rs[k_];                                                \
                if (++ix_[k_] < (p)->rd[k_]) break;                                \
                OFF -= (p)->rs[k_] * (p)->rd[k_];                                  \
                ix_[k_] = 0;                                                       \
            }                                                                      \
        }                                                                          \
    } while (0)

static float reduce_strided(kl_reduce_op op, const rplan *p, const float *x, int64_t base) {
    float acc;
    switch (op) {
    case KL_RED_SUM: case KL_RED_MEAN: case KL_RED_LOG_SUM:
        acc = 0; FOR_REDUCED(p, base, o, acc += x[o]); break;
    case KL_RED_SUM_SQUARE: case KL_RED_L2:
        acc = 0; FOR_REDUCED(p, base, o, acc += x[o] * x[o]); break;
    case KL_RED_L1: acc = 0; FOR_REDUCED(p, base, o, acc += fabsf(x[o])); break;
    case KL_RED_PROD: acc = 1; FOR_REDUCED(p, base, o, acc *= x[o]); break;
    case KL_RED_MAX:
        acc = -INFINITY; FOR_REDUCED(p, base, o, if (x[o] > acc || x[o] != x[o]) { acc = acc != acc ? acc : x[o]; }); break;
    case KL_RED_MIN:
        acc = INFINITY; FOR_REDUCED(p, base, o, if (x[o] < acc || x[o] != x[o]) { acc = acc != acc ? acc : x[o]; }); break;
    case KL_RED_LOG_SUM_EXP: {
        float m = -INFINITY;
        FOR_REDUCED(p, base, o, if (x[o] > m || x[o] != x[o]) { m = m != m ? m : x[o]; });
        if (m != m || isinf(m)) return p->R ? (m != m ? m : (m > 0 ? m : -INFINITY)) : -INFINITY;
        acc = 0;
        FOR_REDUCED(p, base, o, acc += kl__exp1(x[o] - m));
        return m + logf(acc);
    }
    default: return NAN;
    }
    return finish(op, acc, p->R);
}

typedef struct {
    kl_reduce_op op;
    rplan p;
    const float *x;
    float *y;
} red_ctx;

static void red_range(void *vc, size_t o0, size_t o1, int chunk) {
    red_ctx *c = vc;
    for (size_t o = o0; o < o1; o++) {
        int64_t base = out_offset(&c->p, (int64_t)o);
        c->y[o] = c->p.row ? reduce_row(c->op, c->x + base, c->p.R) : reduce_strided(c->op, &c->p, c->x, base);
    }
}

void kl_reduce_f32(kl_reduce_op op, int rank, const int64_t *dims, const float *x, uint32_t axes_mask, float *y,
                   kl_pool *pool) {
    int64_t n = kl_shape_numel(rank, dims);
    if (rank < 32) axes_mask &= (1u << rank) - 1;
    if (axes_mask == 0) { if (n > 0) memcpy(y, x, (size_t)n * sizeof(float)); return; }
    red_ctx c = {op, {0}, x, y};
    rplan_make(rank, dims, axes_mask, &c.p);
    if (c.p.nout == 0) return;
    size_t grain = (size_t)KL_MAX(1, 8192 / KL_MAX(1, c.p.R));
    kl_pool_parallel_for(pool, (size_t)c.p.nout, grain, red_range, &c);
}

/* ---- generic dtypes (serial; shape arithmetic) ---- */

#define RED_GENERIC(T, ACC)                                                        \
    static void red_##T(kl_reduce_op op, const rplan *p, const T *x, T *y) {      \
        for (int64_t o = 0; o < p->nout; o++) {                                    \
            int64_t base = out_offset(p, o);                                       \
            ACC acc = (op == KL_RED_PROD) ? 1 : 0;                                 \
            int first = 1;                                                         \
            FOR_REDUCED(p, base, q, {                                              \
                ACC v = (ACC)x[q];                                                 \
                switch (op) {                                                      \
                case KL_RED_SUM: case KL_RED_MEAN: acc += v; break;                \
                case KL_RED_PROD: acc *= v; break;                                 \
                /* a NaN is kept (v != v: floating types only) */              \
                case KL_RED_MAX: if (first || (acc == acc && (v > acc || v != v))) acc = v; break; \
                case KL_RED_MIN: if (first || (acc == acc && (v < acc || v != v))) acc = v; break; \
                default: break;                                                    \
                }                                                                  \
                first = 0;                                                         \
            });                                                                    \
            if (op == KL_RED_MEAN && p->R) acc = acc / (ACC)p->R;                  \
            y[o] = (T)acc;                                                         \
        }                                                                          \
    }
RED_GENERIC(double, double)
RED_GENERIC(int32_t, int64_t)
RED_GENERIC(int64_t, int64_t)

int kl_reduce(kl_reduce_op op, kl_dtype dt, int rank, const int64_t *dims, const void *x, uint32_t axes_mask, void *y,
              kl_pool *pool, kl_err *e) {
    if (dt == KL_F32) { kl_reduce_f32(op, rank, dims, x, axes_mask, y, pool); return KL_OK; }
    if (op != KL_RED_SUM && op != KL_RED_MEAN && op != KL_RED_MAX && op != KL_RED_MIN && op != KL_RED_PROD)
        return kl_err_set(e, KL_EUNSUPPORTED, "reduce op %d not supported for dtype %s", (int)op, kl_dtype_name(dt));
    if (rank < 32) axes_mask &= (1u << rank) - 1;
    rplan p;
    rplan_make(rank, dims, axes_mask, &p);
    switch (dt) {
    case KL_F64: red_double(op, &p, x, y); return KL_OK;
    case KL_I32: red_int32_t(op, &p, x, y); return KL_OK;
    case KL_I64: red_int64_t(op, &p, x, y); return KL_OK;
    default: return kl_err_set(e, KL_EUNSUPPORTED, "reduce not supported for dtype %s", kl_dtype_name(dt));
    }
}

/* ==================================================================
 * ArgMax / ArgMin
 * ================================================================== */

typedef struct {
    int64_t R, inner;
    const float *x;
    int64_t *y;
    int is_min, last;
} arg_ctx;

static void arg_range(void *vc, size_t o0, size_t o1, int chunk) {
    arg_ctx *c = vc;
    for (size_t o = o0; o < o1; o++) {
        int64_t outer = (int64_t)o / c->inner, i = (int64_t)o % c->inner;
        const float *x = c->x + outer * c->R * c->inner + i;
        int64_t best = 0;
        float bv = c->R ? x[0] : 0;
        if (bv == bv)
            for (int64_t r = 1; r < c->R; r++) {
                float v = x[r * c->inner];
                if (v != v) { best = r; break; }
                int better = c->is_min ? (c->last ? v <= bv : v < bv) : (c->last ? v >= bv : v > bv);
                if (better) { bv = v; best = r; }
            }
        c->y[o] = best;
    }
}

static void argext(int rank, const int64_t *dims, const float *x, int axis, int last, int is_min, int64_t *y,
                   kl_pool *pool) {
    if (axis < 0) axis += rank;
    arg_ctx c = {dims[axis], 1, x, y, is_min, last};
    int64_t outer = 1;
    for (int i = 0; i < axis; i++) outer *= dims[i];
    for (int i = axis + 1; i < rank; i++) c.inner *= dims[i];
    size_t n = (size_t)(outer * c.inner);
    if (n == 0) return;
    kl_pool_parallel_for(pool, n, (size_t)KL_MAX(1, 4096 / KL_MAX(1, c.R)), arg_range, &c);
}

void kl_argmax_f32(int rank, const int64_t *dims, const float *x, int axis, int select_last, int64_t *y, kl_pool *pool) {
    argext(rank, dims, x, axis, select_last, 0, y, pool);
}

void kl_argmin_f32(int rank, const int64_t *dims, const float *x, int axis, int select_last, int64_t *y, kl_pool *pool) {
    argext(rank, dims, x, axis, select_last, 1, y, pool);
}

/* ==================================================================
 * Softmax / LogSoftmax
 * ================================================================== */

typedef struct {
    int64_t R, inner;
    const float *x;
    float *y;
    int log;
    /* softmax of x + b over the last axis (kl_softmax_add_f32); b NULL otherwise */
    const float *b;
    int brank;
    int64_t bdims[KL_MAX_DIMS], xst[KL_MAX_DIMS], bst[KL_MAX_DIMS]; /* outer dims, strides of x and b */
    int64_t xlast, blast;                                            /* strides along the last axis (0 or 1) */
} sm_ctx;

/* Row cursor of kl_softmax_add_f32: x's and b's offsets of the current row
 * (set once per chunk with divisions, then advanced with carries). */
typedef struct {
    int64_t idx[KL_MAX_DIMS], ox, ob;
} sm_cur;

static void sm_cur_init(const sm_ctx *c, int64_t o, sm_cur *q) {
    q->ox = q->ob = 0;
    for (int i = c->brank - 1; i >= 0; i--) {
        q->idx[i] = o % c->bdims[i];
        q->ox += q->idx[i] * c->xst[i];
        q->ob += q->idx[i] * c->bst[i];
        o /= c->bdims[i];
    }
}

static void sm_cur_next(const sm_ctx *c, sm_cur *q) {
    for (int i = c->brank - 1; i >= 0; i--) {
        q->ox += c->xst[i];
        q->ob += c->bst[i];
        if (++q->idx[i] < c->bdims[i]) return;
        q->ox -= c->xst[i] * c->bdims[i];
        q->ob -= c->bst[i] * c->bdims[i];
        q->idx[i] = 0;
    }
}

/* Row maximum with AVX2 (the same value as row_max: max is exact in any
 * order; a NaN anywhere gives NaN). */
static float row_max_vec(const float *x, int64_t n) {
    if (n < 8) return row_max(x, n, 0);
    __m256 m = _mm256_loadu_ps(x), nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, v);
    }
    if (i < n) { /* last 8, overlapping */
        __m256 v = _mm256_loadu_ps(x + n - 8);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, v);
    }
    if (_mm256_movemask_ps(nan)) return NAN;
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline float hsum256(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

static inline float hmax256(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* Softmax of short rows (R a multiple of 8, at most 32: attention scores),
 * four rows at a time so that their exp chains overlap. Every row goes
 * through the same sequence whatever its neighbours. */
#define SM_SHORT_MAX 32
static void sm_short_rows(const sm_ctx *c, size_t o0, size_t o1) {
    int nv = (int)(c->R / 8);
    sm_cur q = {{0}, 0, 0};
    if (c->b) sm_cur_init(c, (int64_t)o0, &q);
    for (size_t o = o0; o < o1; o += 4) {
        int nr = (int)KL_MIN(4, o1 - o);
        __m256 v[4][SM_SHORT_MAX / 8], vm[4];
        for (int r = 0; r < nr; r++) {
            const float *x = c->x + (int64_t)(o + r) * c->R;
            if (c->b) {
                const float *br = c->b + q.ob;
                x = c->x + q.ox;
                sm_cur_next(c, &q);
                for (int k = 0; k < nv; k++)
                    v[r][k] = _mm256_add_ps(c->xlast ? _mm256_loadu_ps(x + 8 * k) : _mm256_set1_ps(x[0]),
                                            c->blast ? _mm256_loadu_ps(br + 8 * k) : _mm256_set1_ps(br[0]));
            } else
                for (int k = 0; k < nv; k++) v[r][k] = _mm256_loadu_ps(x + 8 * k);
            __m256 m = v[r][0], nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
            for (int k = 1; k < nv; k++) {
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[r][k], v[r][k], _CMP_UNORD_Q));
                m = _mm256_max_ps(m, v[r][k]);
            }
            float mx = _mm256_movemask_ps(nan) ? NAN : hmax256(m);
            if (isinf(mx) && mx < 0) mx = 0;
            vm[r] = _mm256_set1_ps(mx);
        }
        for (int r = 0; r < nr; r++)
            for (int k = 0; k < nv; k++) v[r][k] = kl__exp256(_mm256_sub_ps(v[r][k], vm[r]));
        for (int r = 0; r < nr; r++) {
            __m256 s = v[r][0];
            for (int k = 1; k < nv; k++) s = _mm256_add_ps(s, v[r][k]);
            __m256 vs = _mm256_set1_ps(hsum256(s));
            float *y = c->y + (int64_t)(o + r) * c->R;
            for (int k = 0; k < nv; k++) _mm256_storeu_ps(y + 8 * k, _mm256_div_ps(v[r][k], vs));
        }
    }
}

static void sm_rows(void *vc, size_t o0, size_t o1, int chunk) {
    sm_ctx *c = vc;
    int64_t R = c->R;
    if (!c->log && R % 8 == 0 && R <= SM_SHORT_MAX) {
        sm_short_rows(c, o0, o1);
        return;
    }
    for (size_t o = o0; o < o1; o++) {
        const float *x = c->x + (int64_t)o * R;
        float *y = c->y + (int64_t)o * R;
        if (c->b) { /* y = x + b, then the softmax of y in place */
            sm_cur q;
            sm_cur_init(c, (int64_t)o, &q);
            const float *br = c->b + q.ob;
            x = c->x + q.ox;
            for (int64_t i = 0; i < R; i++) y[i] = x[i * c->xlast] + br[i * c->blast];
            x = y;
        }
        float m = row_max_vec(x, R);
        if (isinf(m) && m < 0) m = 0;
        __m256 vm = _mm256_set1_ps(m);
        int64_t i = 0;
        if (c->log) {
            float ls = logf(sum_exp_minus(x, R, m));
            __m256 vs = _mm256_set1_ps(m + ls);
            for (; i + 8 <= R; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
            for (; i < R; i++) y[i] = x[i] - (m + ls);
        } else {
            for (; i + 8 <= R; i += 8) _mm256_storeu_ps(y + i, kl__exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
            for (; i < R; i++) y[i] = kl__exp1(x[i] - m);
            float s = kl__sum_f32(y, R);
            __m256 vs = _mm256_set1_ps(s);
            for (i = 0; i + 8 <= R; i += 8) _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(y + i), vs));
            for (; i < R; i++) y[i] = y[i] / s;
        }
    }
}

static void sm_cols(void *vc, size_t o0, size_t o1, int chunk) {
    sm_ctx *c = vc;
    int64_t R = c->R, in = c->inner;
    for (size_t o = o0; o < o1; o++) {
        int64_t outer = (int64_t)o / in, i = (int64_t)o % in;
        const float *x = c->x + outer * R * in + i;
        float *y = c->y + outer * R * in + i;
        float m = -INFINITY;
        for (int64_t r = 0; r < R; r++) { float v = x[r * in]; if (v > m || v != v) { m = v; if (v != v) break; } }
        if (isinf(m) && m < 0) m = 0;
        float s = 0;
        for (int64_t r = 0; r < R; r++) s += kl__exp1(x[r * in] - m);
        if (c->log) {
            float ls = m + logf(s);
            for (int64_t r = 0; r < R; r++) y[r * in] = x[r * in] - ls;
        } else {
            for (int64_t r = 0; r < R; r++) y[r * in] = kl__exp1(x[r * in] - m) / s;
        }
    }
}

void kl_softmax_f32(int rank, const int64_t *dims, const float *x, int axis, int log_softmax, float *y, kl_pool *pool) {
    if (rank == 0) { y[0] = log_softmax ? 0.0f : 1.0f; return; }
    if (axis < 0) axis += rank;
    sm_ctx c = {.R = dims[axis], .inner = 1, .x = x, .y = y, .log = log_softmax};
    int64_t outer = 1;
    for (int i = 0; i < axis; i++) outer *= dims[i];
    for (int i = axis + 1; i < rank; i++) c.inner *= dims[i];
    if (outer * c.inner * c.R == 0) return;
    if (c.inner == 1)
        kl_pool_parallel_for(pool, (size_t)outer, (size_t)KL_MAX(1, 4096 / KL_MAX(1, c.R)), sm_rows, &c);
    else
        kl_pool_parallel_for(pool, (size_t)(outer * c.inner), (size_t)KL_MAX(1, 4096 / KL_MAX(1, c.R)), sm_cols, &c);
}

void kl_softmax_add_f32(int rank, const int64_t *dims, const float *x, const int64_t *xstrides, const float *b,
                        const int64_t *bstrides, float *y, kl_pool *pool) {
    if (rank == 0) { y[0] = 1.0f; return; }
    sm_ctx c = {.R = dims[rank - 1], .inner = 1, .x = x, .y = y, .b = b, .brank = rank - 1,
                .xlast = xstrides[rank - 1], .blast = bstrides[rank - 1]};
    KL_ASSERT((c.xlast == 0 || c.xlast == 1) && (c.blast == 0 || c.blast == 1));
    int64_t outer = 1;
    for (int i = 0; i < rank - 1; i++) {
        c.bdims[i] = dims[i];
        c.xst[i] = xstrides[i];
        c.bst[i] = bstrides[i];
        outer *= dims[i];
    }
    if (outer * c.R == 0) return;
    kl_pool_parallel_for(pool, (size_t)outer, (size_t)KL_MAX(1, 4096 / KL_MAX(1, c.R)), sm_rows, &c);
}
