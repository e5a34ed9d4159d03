/* Elementwise kernels: binary ops with NumPy broadcasting for every numeric
 * dtype, Where, Not and Cast (the unary kernels and fused activations are in
 * unary.c). Work is split into fixed-size blocks of the output so
 * results never depend on the thread count. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <math.h>
#include <string.h>

/* ==================================================================
 * Broadcast plan (up to 3 operands)
 * ================================================================== */

typedef struct {
    int nops;
    int r;                          /* coalesced rank (>= 1) */
    int64_t dims[KL_MAX_DIMS];
    int64_t st[3][KL_MAX_DIMS];     /* element strides per operand (0 = broadcast) */
    int64_t outer, inner, nblk;
} bplan;

static int bplan_make(int nops, const int *ranks, const int64_t *const *dims, int *rout, int64_t *dout,
                      bplan *p, kl_err *e) {
    int r = 0;
    for (int k = 0; k < nops; k++) {
        if (ranks[k] < 0 || ranks[k] > KL_MAX_DIMS) return kl_err_set(e, KL_ESHAPE, "rank %d out of range", ranks[k]);
        r = KL_MAX(r, ranks[k]);
    }
    int64_t od[KL_MAX_DIMS], full[3][KL_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        int64_t d = 1;
        for (int k = 0; k < nops; k++) {
            int j = i - (r - ranks[k]);
            int64_t dk = j >= 0 ? dims[k][j] : 1;
            if (dk == 1) continue;
            if (d != 1 && d != dk) {
                char a[128], b[128];
                return kl_err_set(e, KL_ESHAPE, "shapes %s and %s cannot be broadcast (axis %d: %lld vs %lld)",
                                  kl_shape_str(ranks[0], dims[0], a, sizeof a),
                                  kl_shape_str(ranks[k], dims[k], b, sizeof b), i, (long long)d, (long long)dk);
            }
            d = dk;
        }
        od[i] = d;
    }
    for (int k = 0; k < nops; k++) {
        int64_t s = 1;
        for (int i = r - 1; i >= 0; i--) {
            int j = i - (r - ranks[k]);
            int64_t dk = j >= 0 ? dims[k][j] : 1;
            full[k][i] = (dk == 1) ? 0 : s;
            s *= dk;
        }
    }
    if (rout) *rout = r;
    if (dout) for (int i = 0; i < r; i++) dout[i] = od[i];
    if (!p) return KL_OK;
    memset(p, 0, sizeof *p);
    p->nops = nops;
    int q = 0;
    for (int i = 0; i < r; i++) {
        if (od[i] == 1) continue;
        if (q > 0) {
            int ok = 1;
            for (int k = 0; k < nops; k++) if (p->st[k][q - 1] != full[k][i] * od[i]) ok = 0;
            if (ok) {
                p->dims[q - 1] *= od[i];
                for (int k = 0; k < nops; k++) p->st[k][q - 1] = full[k][i];
                continue;
            }
        }
        p->dims[q] = od[i];
        for (int k = 0; k < nops; k++) p->st[k][q] = full[k][i];
        q++;
    }
    if (q == 0) { p->dims[0] = 1; q = 1; }
    p->r = q;
    p->outer = 1;
    for (int i = 0; i < q - 1; i++) p->outer *= p->dims[i];
    for (int i = 0; i < q; i++) if (p->dims[i] == 0) p->outer = 0;
    p->inner = p->dims[q - 1];
    p->nblk = (p->inner + KL__ELEM_BLOCK - 1) / KL__ELEM_BLOCK;
    return KL_OK;
}

/* Offsets (elements) of each operand at the start of an outer row. */
static void bplan_offsets(const bplan *p, int64_t row, int64_t *off) {
    for (int k = 0; k < p->nops; k++) off[k] = 0;
    for (int i = p->r - 2; i >= 0; i--) {
        int64_t ix = row % p->dims[i];
        row /= p->dims[i];
        for (int k = 0; k < p->nops; k++) off[k] += ix * p->st[k][i];
    }
}

int kl_broadcast_shape(int ra, const int64_t *da, int rb, const int64_t *db, int *rout, int64_t *dout, kl_err *e) {
    int ranks[2] = {ra, rb};
    const int64_t *dims[2] = {da, db};
    return bplan_make(2, ranks, dims, rout, dout, NULL, e);
}

/* ==================================================================
 * Binary
 * ================================================================== */

int kl_binary_is_compare(kl_binary_op op) { return op >= KL_BIN_EQ && op < KL_BIN_COUNT; }

#define FMIN_NAN(x, y) (((x) != (x) || (x) < (y)) ? (x) : (y))
#define FMAX_NAN(x, y) (((x) != (x) || (x) > (y)) ? (x) : (y))

/* One inner loop: sa/sb are the inner strides (0 or 1). */
#define LOOP(T, OT, EXPR)                                                          \
    do {                                                                           \
        const T *A = a; const T *B = b; OT *Y = y;                                 \
        if (sa && sb) for (int64_t i = 0; i < n; i++) { T x_ = A[i], z_ = B[i]; Y[i] = (OT)(EXPR); } \
        else if (sa) { T z_ = B[0]; for (int64_t i = 0; i < n; i++) { T x_ = A[i]; Y[i] = (OT)(EXPR); } } \
        else if (sb) { T x_ = A[0]; for (int64_t i = 0; i < n; i++) { T z_ = B[i]; Y[i] = (OT)(EXPR); } } \
        else { T x_ = A[0], z_ = B[0]; OT v_ = (OT)(EXPR); for (int64_t i = 0; i < n; i++) Y[i] = v_; } \
    } while (0)

#define CMP_CASES(T)                                                               \
    case KL_BIN_EQ: LOOP(T, uint8_t, x_ == z_); return 1;                          \
    case KL_BIN_NE: LOOP(T, uint8_t, x_ != z_); return 1;                          \
    case KL_BIN_LT: LOOP(T, uint8_t, x_ < z_); return 1;                           \
    case KL_BIN_LE: LOOP(T, uint8_t, x_ <= z_); return 1;                          \
    case KL_BIN_GT: LOOP(T, uint8_t, x_ > z_); return 1;                           \
    case KL_BIN_GE: LOOP(T, uint8_t, x_ >= z_); return 1;                          \
    case KL_BIN_AND: LOOP(T, uint8_t, (x_ != 0) & (z_ != 0)); return 1;            \
    case KL_BIN_OR: LOOP(T, uint8_t, (x_ != 0) | (z_ != 0)); return 1;             \
    case KL_BIN_XOR: LOOP(T, uint8_t, (x_ != 0) ^ (z_ != 0)); return 1;

#define FLOAT_FN(NAME, T, POW, FMOD, FLOOR)                                        \
    static int NAME(kl_binary_op op, const void *a, int sa, const void *b, int sb, void *y, int64_t n) { \
        switch (op) {                                                              \
        case KL_BIN_ADD: LOOP(T, T, x_ + z_); return 1;                            \
        case KL_BIN_SUB: LOOP(T, T, x_ - z_); return 1;                            \
        case KL_BIN_MUL: LOOP(T, T, x_ * z_); return 1;                            \
        case KL_BIN_DIV: LOOP(T, T, x_ / z_); return 1;                            \
        case KL_BIN_POW: LOOP(T, T, POW(x_, z_)); return 1;                        \
        case KL_BIN_MIN: LOOP(T, T, FMIN_NAN(x_, z_)); return 1;                   \
        case KL_BIN_MAX: LOOP(T, T, FMAX_NAN(x_, z_)); return 1;                   \
        case KL_BIN_FMOD: LOOP(T, T, FMOD(x_, z_)); return 1;                      \
        case KL_BIN_MOD: LOOP(T, T, fmod_py_##T(x_, z_)); return 1;                \
        case KL_BIN_PRELU: LOOP(T, T, x_ < 0 ? x_ * z_ : x_); return 1;            \
        CMP_CASES(T)                                                               \
        default: return 0;                                                         \
        }                                                                          \
    }

static inline float fmod_py_float(float x, float z) {
    float r = fmodf(x, z);
    if (r != 0 && ((r < 0) != (z < 0))) r += z;
    return r;
}
static inline double fmod_py_double(double x, double z) {
    double r = fmod(x, z);
    if (r != 0 && ((r < 0) != (z < 0))) r += z;
    return r;
}

FLOAT_FN(bin_f32, float, powf, fmodf, floorf)
FLOAT_FN(bin_f64, double, pow, fmod, floor)

/* Integer helpers: no traps on /0 or MIN/-1, shifts through unsigned. */
#define INT_HELPERS(T, UT, TMIN)                                                   \
    static inline T idiv_##T(T x, T z) {                                           \
        if (z == 0) return 0;                                                      \
        if ((TMIN) != 0 && z == (T)-1) return (T)(0 - (UT)x);                      \
        return (T)(x / z);                                                         \
    }                                                                              \
    static inline T irem_##T(T x, T z) {                                           \
        if (z == 0) return 0;                                                      \
        if ((TMIN) != 0 && z == (T)-1) return 0;                                   \
        return (T)(x % z);                                                         \
    }                                                                              \
    static inline T imod_##T(T x, T z) {                                           \
        T r = irem_##T(x, z);                                                      \
        if (r != 0 && ((r < 0) != (z < 0))) r = (T)((UT)r + (UT)z);                \
        return r;                                                                  \
    }                                                                              \
    static inline T ipow_##T(T x, T z) {                                           \
        if (z < 0) return x == 1 ? 1 : x == (T)-1 ? ((((UT)-(z + 1)) & 1) ? 1 : (T)-1) : 0; \
        uint64_t r = 1, bb = (uint64_t)(UT)x, ee = (uint64_t)(UT)z;                                       \
        while (ee) { if (ee & 1) r *= bb; bb *= bb; ee >>= 1; }                     \
        return (T)r;                                                               \
    }                                                                              \
    static inline T iadd_##T(T x, T z) { return (T)((UT)x + (UT)z); }              \
    static inline T isub_##T(T x, T z) { return (T)((UT)x - (UT)z); }              \
    static inline T imul_##T(T x, T z) { return (T)((uint64_t)(UT)x * (uint64_t)(UT)z); }

#define INT_FN(NAME, T)                                                            \
    static int NAME(kl_binary_op op, const void *a, int sa, const void *b, int sb, void *y, int64_t n) { \
        switch (op) {                                                              \
        case KL_BIN_ADD: LOOP(T, T, iadd_##T(x_, z_)); return 1;                   \
        case KL_BIN_SUB: LOOP(T, T, isub_##T(x_, z_)); return 1;                   \
        case KL_BIN_MUL: LOOP(T, T, imul_##T(x_, z_)); return 1;                   \
        case KL_BIN_DIV: LOOP(T, T, idiv_##T(x_, z_)); return 1;                   \
        case KL_BIN_POW: LOOP(T, T, ipow_##T(x_, z_)); return 1;                   \
        case KL_BIN_MIN: LOOP(T, T, x_ < z_ ? x_ : z_); return 1;                  \
        case KL_BIN_MAX: LOOP(T, T, x_ > z_ ? x_ : z_); return 1;                  \
        case KL_BIN_MOD: LOOP(T, T, imod_##T(x_, z_)); return 1;                   \
        case KL_BIN_FMOD: LOOP(T, T, irem_##T(x_, z_)); return 1;                  \
        case KL_BIN_PRELU: LOOP(T, T, x_ < 0 ? imul_##T(x_, z_) : x_); return 1;   \
        CMP_CASES(T)                                                               \
        default: return 0;                                                         \
        }                                                                          \
    }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wbool-compare"
INT_HELPERS(int8_t, uint8_t, INT8_MIN)
INT_HELPERS(int16_t, uint16_t, INT16_MIN)
INT_HELPERS(int32_t, uint32_t, INT32_MIN)
INT_HELPERS(int64_t, uint64_t, INT64_MIN)
INT_HELPERS(uint8_t, uint8_t, 0)
INT_HELPERS(uint16_t, uint16_t, 0)
INT_HELPERS(uint32_t, uint32_t, 0)
INT_HELPERS(uint64_t, uint64_t, 0)

INT_FN(bin_i8, int8_t)
INT_FN(bin_i16, int16_t)
INT_FN(bin_i32, int32_t)
INT_FN(bin_i64, int64_t)
INT_FN(bin_u8, uint8_t)
INT_FN(bin_u16, uint16_t)
INT_FN(bin_u32, uint32_t)
INT_FN(bin_u64, uint64_t)
#pragma GCC diagnostic pop

static int bin_bool(kl_binary_op op, const void *a, int sa, const void *b, int sb, void *y, int64_t n) {
    switch (op) {
    case KL_BIN_AND: LOOP(uint8_t, uint8_t, (x_ != 0) & (z_ != 0)); return 1;
    case KL_BIN_OR: LOOP(uint8_t, uint8_t, (x_ != 0) | (z_ != 0)); return 1;
    case KL_BIN_XOR: LOOP(uint8_t, uint8_t, (x_ != 0) ^ (z_ != 0)); return 1;
    case KL_BIN_EQ: LOOP(uint8_t, uint8_t, (x_ != 0) == (z_ != 0)); return 1;
    case KL_BIN_NE: LOOP(uint8_t, uint8_t, (x_ != 0) != (z_ != 0)); return 1;
    default: return 0;
    }
}

/* f16 / bf16: through f32 in small stack blocks (same rounding as casting
 * the inputs to f32, computing, and casting back). */
static int bin_half(kl_binary_op op, const void *a, int sa, const void *b, int sb, void *y, int64_t n, int bf) {
    float fa[256], fb[256], fy[256];
    const uint16_t *A = a, *B = b;
    if (n == 0) {
        float z = 0;
        return bin_f32(op, &z, 1, &z, 1, &z, 0);
    }
    int cmp = kl_binary_is_compare(op);
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = KL_MIN(256, n - i0);
        for (int64_t i = 0; i < m; i++) {
            uint16_t ha = A[sa ? i0 + i : 0], hb = B[sb ? i0 + i : 0];
            fa[i] = bf ? kl_bf16_to_f32(ha) : kl_f16_to_f32(ha);
            fb[i] = bf ? kl_bf16_to_f32(hb) : kl_f16_to_f32(hb);
        }
        if (cmp) {
            if (!bin_f32(op, fa, 1, fb, 1, (uint8_t *)y + i0, m)) return 0;
            continue;
        }
        if (!bin_f32(op, fa, 1, fb, 1, fy, m)) return 0;
        if (bf) kl_f32_to_bf16_n(fy, (uint16_t *)y + i0, (size_t)m);
        else kl_f32_to_f16_n(fy, (uint16_t *)y + i0, (size_t)m);
    }
    return 1;
}
static int bin_f16(kl_binary_op op, const void *a, int sa, const void *b, int sb, void *y, int64_t n) {
    return bin_half(op, a, sa, b, sb, y, n, 0);
}
static int bin_bf16(kl_binary_op op, const void *a, int sa, const void *b, int sb, void *y, int64_t n) {
    return bin_half(op, a, sa, b, sb, y, n, 1);
}

typedef int (*bin_fn)(kl_binary_op, const void *, int, const void *, int, void *, int64_t);

static bin_fn bin_for(kl_dtype dt) {
    switch (dt) {
    case KL_F32: return bin_f32;
    case KL_F64: return bin_f64;
    case KL_I8: return bin_i8;
    case KL_I16: return bin_i16;
    case KL_I32: return bin_i32;
    case KL_I64: return bin_i64;
    case KL_U8: return bin_u8;
    case KL_U16: return bin_u16;
    case KL_U32: return bin_u32;
    case KL_U64: return bin_u64;
    case KL_BOOL: return bin_bool;
    case KL_F16: return bin_f16;
    case KL_BF16: return bin_bf16;
    default: return NULL;
    }
}

typedef struct {
    bplan p;
    bin_fn fn;
    kl_binary_op op;
    const char *a, *b;
    char *y;
    size_t es, oes;
} bin_ctx;

static void bin_range(void *vc, size_t it0, size_t it1, int chunk) {
    bin_ctx *c = vc;
    const bplan *p = &c->p;
    int64_t sa = p->st[0][p->r - 1], sb = p->st[1][p->r - 1];
    for (size_t it = it0; it < it1; it++) {
        int64_t row = (int64_t)it / p->nblk, blk = (int64_t)it % p->nblk, off[3];
        bplan_offsets(p, row, off);
        int64_t i0 = blk * KL__ELEM_BLOCK, n = KL_MIN((int64_t)KL__ELEM_BLOCK, p->inner - i0);
        int64_t yo = row * p->inner + i0;
        c->fn(c->op, c->a + (off[0] + i0 * sa) * (int64_t)c->es, sa != 0, c->b + (off[1] + i0 * sb) * (int64_t)c->es,
              sb != 0, c->y + yo * (int64_t)c->oes, n);
    }
}

int kl_binary(kl_binary_op op, kl_dtype dt, int ra, const int64_t *da, const void *a, int rb, const int64_t *db,
              const void *b, void *y, kl_pool *pool, kl_err *e) {
    bin_fn fn = bin_for(dt);
    if ((unsigned)op >= KL_BIN_COUNT) return kl_err_set(e, KL_EINVAL, "invalid binary op %d", (int)op);
    int probe_ok = 0;
    if (fn) {
        /* probe support with n = 0 */
        uint64_t dummy = 0;
        probe_ok = fn(op, &dummy, 1, &dummy, 1, &dummy, 0);
    }
    if (!probe_ok) return kl_err_set(e, KL_EUNSUPPORTED, "binary op %d not supported for dtype %s", (int)op, kl_dtype_name(dt));
    bin_ctx c = {.fn = fn, .op = op, .a = a, .b = b, .y = y, .es = kl_dtype_size(dt)};
    c.oes = kl_binary_is_compare(op) ? 1 : c.es;
    int ranks[2] = {ra, rb};
    const int64_t *dims[2] = {da, db};
    int rc = bplan_make(2, ranks, dims, NULL, NULL, &c.p, e);
    if (rc) return rc;
    size_t items = (size_t)(c.p.outer * c.p.nblk);
    if (items == 0) return KL_OK;
    size_t grain = (size_t)KL_MAX(1, KL__ELEM_BLOCK / KL_MAX(1, c.p.inner));
    if (items <= grain) bin_range(&c, 0, items, 0);
    else kl_pool_parallel_for(pool, items, grain, bin_range, &c);
    return KL_OK;
}

void kl_binary_f32(kl_binary_op op, int ra, const int64_t *da, const float *a, int rb, const int64_t *db,
                   const float *b, float *y, kl_pool *pool) {
    int rc = kl_binary(op, KL_F32, ra, da, a, rb, db, b, y, pool, NULL);
    KL_ASSERT(rc == KL_OK);
}

void kl_not_bool(const uint8_t *x, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = !x[i];
}

/* ==================================================================
 * Where
 * ================================================================== */

typedef struct {
    bplan p;
    const uint8_t *c;
    const char *x, *z;
    char *y;
    size_t es;
} where_ctx;

static void where_range(void *vc, size_t it0, size_t it1, int chunk) {
    where_ctx *w = vc;
    const bplan *p = &w->p;
    int64_t sc = p->st[0][p->r - 1], sx = p->st[1][p->r - 1], sz = p->st[2][p->r - 1];
    size_t es = w->es;
    for (size_t it = it0; it < it1; it++) {
        int64_t row = (int64_t)it / p->nblk, blk = (int64_t)it % p->nblk, off[3];
        bplan_offsets(p, row, off);
        int64_t i0 = blk * KL__ELEM_BLOCK, n = KL_MIN((int64_t)KL__ELEM_BLOCK, p->inner - i0);
        const uint8_t *c = w->c + off[0] + i0 * sc;
        const char *x = w->x + (off[1] + i0 * sx) * (int64_t)es, *z = w->z + (off[2] + i0 * sz) * (int64_t)es;
        char *y = w->y + (row * p->inner + i0) * (int64_t)es;
        if (es == 4) {
            const uint32_t *X = (const uint32_t *)x, *Z = (const uint32_t *)z;
            uint32_t *Y = (uint32_t *)y;
            for (int64_t i = 0; i < n; i++) Y[i] = c[i * sc] ? X[i * sx] : Z[i * sz];
        } else {
            for (int64_t i = 0; i < n; i++)
                memcpy(y + i * (int64_t)es, c[i * sc] ? x + i * sx * (int64_t)es : z + i * sz * (int64_t)es, es);
        }
    }
}

int kl_where(size_t esize, int rc_, const int64_t *dc, const uint8_t *cond, int rx, const int64_t *dx,
             const void *x, int rz, const int64_t *dz, const void *z, void *y, kl_pool *pool, kl_err *e) {
    where_ctx w = {.c = cond, .x = x, .z = z, .y = y, .es = esize};
    int ranks[3] = {rc_, rx, rz};
    const int64_t *dims[3] = {dc, dx, dz};
    int rc = bplan_make(3, ranks, dims, NULL, NULL, &w.p, e);
    if (rc) return rc;
    size_t items = (size_t)(w.p.outer * w.p.nblk);
    if (items == 0) return KL_OK;
    size_t grain = (size_t)KL_MAX(1, KL__ELEM_BLOCK / KL_MAX(1, w.p.inner));
    kl_pool_parallel_for(pool, items, grain, where_range, &w);
    return KL_OK;
}

/* ==================================================================
 * Cast (numpy astype semantics on x86-64)
 * ================================================================== */

/* float -> integer as the x86 truncating conversions numpy's C casts compile to */
static inline int32_t f2i32(double v) { return _mm_cvttsd_si32(_mm_set_sd(v)); }
static inline int64_t f2i64(double v) { return _mm_cvttsd_si64(_mm_set_sd(v)); }
static inline uint64_t f2u64(double v) {
    if (v >= 9223372036854775808.0) return (uint64_t)f2i64(v - 9223372036854775808.0) ^ (1ull << 63);
    return (uint64_t)f2i64(v);
}

typedef struct {
    kl_dtype from, to;
    const char *x;
    char *y;
    int64_t n;
} cast_ctx;

static inline int is_fl(kl_dtype d) { return d == KL_F32 || d == KL_F64 || d == KL_F16 || d == KL_BF16; }

static inline double rd_f(kl_dtype d, const char *p) {
    switch (d) {
    case KL_F32: { float v; memcpy(&v, p, 4); return v; }
    case KL_F64: { double v; memcpy(&v, p, 8); return v; }
    case KL_F16: { uint16_t v; memcpy(&v, p, 2); return kl_f16_to_f32(v); }
    default: { uint16_t v; memcpy(&v, p, 2); return kl_bf16_to_f32(v); }
    }
}

static inline int64_t rd_i(kl_dtype d, const char *p, int *is_u) {
    *is_u = 0;
    switch (d) {
    case KL_I8: return *(const int8_t *)p;
    case KL_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case KL_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case KL_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case KL_U8: case KL_BOOL: return *(const uint8_t *)p;
    case KL_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case KL_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); *is_u = 1; return (int64_t)v; }
    }
}

static inline void wr_from_f(kl_dtype d, char *p, double v, int src_f64) {
    switch (d) {
    case KL_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case KL_F64: memcpy(p, &v, 8); return;
    case KL_F16: { uint16_t h = kl_f32_to_f16((float)v); memcpy(p, &h, 2); return; }
    case KL_BF16: { uint16_t h = kl_f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    case KL_BOOL: *(uint8_t *)p = v != 0; return;
    case KL_I8: *(int8_t *)p = (int8_t)f2i32(v); return;
    case KL_U8: *(uint8_t *)p = (uint8_t)f2i32(v); return;
    case KL_I16: { int16_t t = (int16_t)f2i32(v); memcpy(p, &t, 2); return; }
    case KL_U16: { uint16_t t = (uint16_t)f2i32(v); memcpy(p, &t, 2); return; }
    case KL_I32: { int32_t t = f2i32(v); memcpy(p, &t, 4); return; }
    case KL_U32: { uint32_t t = (uint32_t)f2i64(v); memcpy(p, &t, 4); return; }
    case KL_I64: { int64_t t = f2i64(v); memcpy(p, &t, 8); return; }
    case KL_U64: { uint64_t t = f2u64(v); memcpy(p, &t, 8); return; }
    default: return;
    }
}

static inline void wr_from_i(kl_dtype d, char *p, int64_t v, int is_u) {
    uint64_t u = (uint64_t)v;
    switch (d) {
    case KL_F32: { float f = is_u ? (float)u : (float)v; memcpy(p, &f, 4); return; }
    case KL_F64: { double f = is_u ? (double)u : (double)v; memcpy(p, &f, 8); return; }
    case KL_F16: { uint16_t h = kl_f32_to_f16(is_u ? (float)u : (float)v); memcpy(p, &h, 2); return; }
    case KL_BF16: { uint16_t h = kl_f32_to_bf16(is_u ? (float)u : (float)v); memcpy(p, &h, 2); return; }
    case KL_BOOL: *(uint8_t *)p = v != 0; return;
    case KL_I8: case KL_U8: *(uint8_t *)p = (uint8_t)u; return;
    case KL_I16: case KL_U16: { uint16_t t = (uint16_t)u; memcpy(p, &t, 2); return; }
    case KL_I32: case KL_U32: { uint32_t t = (uint32_t)u; memcpy(p, &t, 4); return; }
    default: memcpy(p, &u, 8); return;
    }
}

static void cast_range(void *vc, size_t b0, size_t b1, int chunk) {
    cast_ctx *c = vc;
    int64_t i0 = (int64_t)b0 * KL__ELEM_BLOCK, i1 = KL_MIN((int64_t)b1 * KL__ELEM_BLOCK, c->n);
    size_t fs = kl_dtype_size(c->from), ts = kl_dtype_size(c->to);
    const char *x = c->x + i0 * (int64_t)fs;
    char *y = c->y + i0 * (int64_t)ts;
    int64_t n = i1 - i0;
    if (c->from == c->to) { memcpy(y, x, (size_t)n * fs); return; }
    /* fast paths */
    if (c->from == KL_F16 && c->to == KL_F32) { kl_f16_to_f32_n((const uint16_t *)x, (float *)y, (size_t)n); return; }
    if (c->from == KL_F32 && c->to == KL_F16) { kl_f32_to_f16_n((const float *)x, (uint16_t *)y, (size_t)n); return; }
    if (c->from == KL_BF16 && c->to == KL_F32) { kl_bf16_to_f32_n((const uint16_t *)x, (float *)y, (size_t)n); return; }
    if (c->from == KL_F32 && c->to == KL_BF16) { kl_f32_to_bf16_n((const float *)x, (uint16_t *)y, (size_t)n); return; }
    if (c->from == KL_I64 && c->to == KL_F32) {
        const int64_t *X = (const int64_t *)x; float *Y = (float *)y;
        for (int64_t i = 0; i < n; i++) Y[i] = (float)X[i];
        return;
    }
    if (c->from == KL_I32 && c->to == KL_I64) {
        const int32_t *X = (const int32_t *)x; int64_t *Y = (int64_t *)y;
        for (int64_t i = 0; i < n; i++) Y[i] = X[i];
        return;
    }
    if (is_fl(c->from)) {
        int f64 = c->from == KL_F64;
        for (int64_t i = 0; i < n; i++) wr_from_f(c->to, y + i * (int64_t)ts, rd_f(c->from, x + i * (int64_t)fs), f64);
    } else {
        int u;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = rd_i(c->from, x + i * (int64_t)fs, &u);
            wr_from_i(c->to, y + i * (int64_t)ts, v, u);
        }
    }
}

int kl_cast(kl_dtype from, const void *x, kl_dtype to, void *y, int64_t n, kl_pool *pool, kl_err *e) {
    if ((unsigned)from >= KL_DTYPE_COUNT || (unsigned)to >= KL_DTYPE_COUNT)
        return kl_err_set(e, KL_ETYPE, "cast: invalid dtype");
    if (n <= 0) return KL_OK;
    cast_ctx c = {from, to, x, y, n};
    size_t nb = (size_t)((n + KL__ELEM_BLOCK - 1) / KL__ELEM_BLOCK);
    if (nb == 1) cast_range(&c, 0, 1, 0);
    else kl_pool_parallel_for(pool, nb, 1, cast_range, &c);
    return KL_OK;
}
