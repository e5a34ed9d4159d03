/* Elementwise operators: unary math and activations, binary arithmetic,
 * comparison and logic with NumPy broadcasting, variadic Sum/Mean/Max/Min,
 * Where, Cast/CastLike, Clip. Generic over dtypes (f16/bf16 via f32). */
#include "graph/graph_int.h"
#include "graph/grad_int.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the generic integer templates compare unsigned values with 0 */
#pragma GCC diagnostic ignored "-Wtype-limits"

/* ================================================================== *
 * Broadcasting iterator
 * ================================================================== */

#define MAXIN 8
typedef struct {
    int rank;
    int64_t dims[KL_MAX_DIMS];
    int n;                              /* inputs */
    int64_t st[MAXIN][KL_MAX_DIMS];     /* input strides (elements), 0 = broadcast */
    const char *ptr[MAXIN];
    size_t es[MAXIN];
    char *out;
    size_t oes;
    int64_t rows, inner;
    /* row function: out row, input rows, count, inner strides */
    void (*row)(void *ctx, char *o, const char *const *in, const int64_t *is, int64_t n);
    void *ctx;
} bcast;

static int broadcast_dims(kl_tensor *const *in, int n, int *rank, int64_t *dims) {
    int r = 0;
    for (int i = 0; i < n; i++) if (in[i] && in[i]->rank > r) r = in[i]->rank;
    for (int d = 0; d < r; d++) dims[d] = 1;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        int off = r - in[i]->rank;
        for (int d = 0; d < in[i]->rank; d++) {
            int64_t a = dims[off + d], b = in[i]->dims[d];
            if (a == b || b == 1) continue;
            if (a == 1) dims[off + d] = b;
            else return KL_ESHAPE;
        }
    }
    *rank = r;
    return KL_OK;
}

static void bc_range(void *vctx, size_t b, size_t en, int chunk) {
    bcast *bc = vctx;
    int r = bc->rank;
    int64_t is[MAXIN];
    for (int k = 0; k < bc->n; k++) is[k] = r ? bc->st[k][r - 1] : 0;
    for (size_t row = b; row < en; row++) {
        /* multi-index of the row over dims[0..r-2] */
        int64_t rem = (int64_t)row;
        const char *ip[MAXIN];
        int64_t off[MAXIN] = {0};
        for (int d = r - 2; d >= 0; d--) {
            int64_t idx = rem % bc->dims[d];
            rem /= bc->dims[d];
            for (int k = 0; k < bc->n; k++) off[k] += idx * bc->st[k][d];
        }
        for (int k = 0; k < bc->n; k++) ip[k] = bc->ptr[k] + off[k] * (int64_t)bc->es[k];
        bc->row(bc->ctx, bc->out + (int64_t)row * bc->inner * (int64_t)bc->oes, ip, is, bc->inner);
    }
}

/* Runs row over the broadcast of in[0..n) into out (contiguous, shape = broadcast). */
static void bcast_run(kl_tensor *const *in, int n, kl_tensor *out, kl_pool *pool,
                      void (*row)(void *, char *, const char *const *, const int64_t *, int64_t), void *ctx) {
    bcast bc;
    memset(&bc, 0, sizeof bc);
    bc.rank = out->rank;
    for (int d = 0; d < out->rank; d++) bc.dims[d] = out->dims[d];
    bc.n = n;
    for (int k = 0; k < n; k++) {
        int off = out->rank - in[k]->rank;
        int64_t s = 1;
        for (int d = out->rank - 1; d >= 0; d--) {
            int id = d - off;
            if (id < 0 || in[k]->dims[id] == 1) bc.st[k][d] = 0;
            else { bc.st[k][d] = s; }
            if (id >= 0) s *= in[k]->dims[id];
        }
        bc.ptr[k] = in[k]->data;
        bc.es[k] = kl_dtype_size(in[k]->dtype);
    }
    /* coalesce adjacent dims where every operand is contiguous across them */
    int r = 0;
    int64_t dims[KL_MAX_DIMS], st[MAXIN][KL_MAX_DIMS];
    for (int d = 0; d < bc.rank; d++) {
        if (bc.dims[d] == 1 && bc.rank > 1) continue;
        if (r > 0) {
            int ok = 1;
            for (int k = 0; k < n && ok; k++) ok = st[k][r - 1] == bc.st[k][d] * bc.dims[d];
            if (ok) {
                dims[r - 1] *= bc.dims[d];
                for (int k = 0; k < n; k++) st[k][r - 1] = bc.st[k][d];
                continue;
            }
        }
        dims[r] = bc.dims[d];
        for (int k = 0; k < n; k++) st[k][r] = bc.st[k][d];
        r++;
    }
    if (r == 0) { r = 1; dims[0] = 1; for (int k = 0; k < n; k++) st[k][0] = 0; }
    bc.rank = r;
    memcpy(bc.dims, dims, sizeof dims);
    memcpy(bc.st, st, sizeof st);
    bc.inner = dims[r - 1];
    bc.rows = 1;
    for (int d = 0; d < r - 1; d++) bc.rows *= dims[d];
    bc.out = out->data;
    bc.oes = kl_dtype_size(out->dtype);
    bc.row = row;
    bc.ctx = ctx;
    int64_t total = bc.rows * bc.inner;
    if (total == 0) return;
    size_t grain = bc.inner >= 16384 ? 1 : (size_t)(16384 / (bc.inner ? bc.inner : 1));
    if (total < 32768) bc_range(&bc, 0, (size_t)bc.rows, 0);
    else kl_pool_parallel_for(pool, (size_t)bc.rows, grain, bc_range, &bc);
}

/* ================================================================== *
 * Binary ops
 * ================================================================== */

typedef enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MOD, B_FMOD, B_MIN, B_MAX, B_PRELU,
               B_EQ, B_LT, B_LE, B_GT, B_GE, B_AND, B_OR, B_XOR, B_SHL, B_SHR, B_BAND, B_BOR, B_BXOR } binop;

typedef struct { binop op; kl_dtype dt; } binctx;

#define FLOAT_BIN(T)                                                                                     \
    static void bin_##T(binop op, T *o, const T *a, const T *b, int64_t sa, int64_t sb, int64_t n) {      \
        switch (op) {                                                                                    \
        case B_ADD:                                                                                     \
            if (sa == 1 && sb == 1) { for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; }              \
            else { for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb]; }                       \
            break;                                                                                       \
        case B_SUB:                                                                                     \
            if (sa == 1 && sb == 1) { for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; }              \
            else { for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb]; }                       \
            break;                                                                                       \
        case B_MUL:                                                                                     \
            if (sa == 1 && sb == 1) { for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; }              \
            else { for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb]; }                       \
            break;                                                                                       \
        case B_DIV:                                                                                     \
            if (sa == 1 && sb == 1) { for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; }              \
            else { for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb]; }                       \
            break;                                                                                       \
        case B_POW:                                                                                      \
            if (sb == 0 && b[0] == 2) { for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * a[i * sa]; }     \
            else if (sb == 0 && b[0] == 0.5) { for (int64_t i = 0; i < n; i++) o[i] = (T)sqrt(a[i * sa]); } \
            else { for (int64_t i = 0; i < n; i++) o[i] = (T)pow(a[i * sa], b[i * sb]); }                \
            break;                                                                                       \
        case B_MOD: case B_FMOD: for (int64_t i = 0; i < n; i++) o[i] = (T)fmod(a[i * sa], b[i * sb]); break; \
        case B_MIN: for (int64_t i = 0; i < n; i++) { T x = a[i * sa], y = b[i * sb]; o[i] = isnan(x) || isnan(y) ? NAN : (x < y ? x : y); } break; \
        case B_MAX: for (int64_t i = 0; i < n; i++) { T x = a[i * sa], y = b[i * sb]; o[i] = isnan(x) || isnan(y) ? NAN : (x > y ? x : y); } break; \
        case B_PRELU: for (int64_t i = 0; i < n; i++) { T x = a[i * sa]; o[i] = x < 0 ? x * b[i * sb] : x; } break; \
        default: break;                                                                                  \
        }                                                                                                \
    }
typedef float f32;
typedef double f64;
FLOAT_BIN(f32)
FLOAT_BIN(f64)

/* AVX2 Add/Sub/Mul/Div for contiguous or scalar-broadcast f32 operands (gcc
 * -O2 leaves the loops above scalar since o may alias a or b). The same IEEE
 * operation per element, so the same results. Returns 0 when not handled. */
#define KL_VLOOP(VOP, SOP)                                                                                       \
    do {                                                                                                         \
        int64_t i = 0;                                                                                           \
        if (sa && sb) {                                                                                          \
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, VOP(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i))); \
            for (; i < n; i++) o[i] = a[i] SOP b[i];                                                             \
        } else if (sa) {                                                                                         \
            const float z = b[0];                                                                                \
            const __m256 vz = _mm256_set1_ps(z);                                                                 \
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, VOP(_mm256_loadu_ps(a + i), vz));                \
            for (; i < n; i++) o[i] = a[i] SOP z;                                                                \
        } else {                                                                                                 \
            const float z = a[0];                                                                                \
            const __m256 vz = _mm256_set1_ps(z);                                                                 \
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, VOP(vz, _mm256_loadu_ps(b + i)));                \
            for (; i < n; i++) o[i] = z SOP b[i];                                                                \
        }                                                                                                        \
    } while (0)

static int bin_f32_vec(binop op, float *o, const float *a, const float *b, int64_t sa, int64_t sb, int64_t n) {
    if (op == B_PRELU) { kl_prelu_f32(a, sa, b, sb, o, n); return 1; }
    if (op == B_POW && sa == 1 && sb == 0) { kl_unary_row_f32(KL_UN_POW, a, o, n, b[0], 0); return 1; }
    if ((sa != 0 && sa != 1) || (sb != 0 && sb != 1) || (!sa && !sb)) return 0;
    switch (op) {
    case B_ADD: KL_VLOOP(_mm256_add_ps, +); return 1;
    case B_SUB: KL_VLOOP(_mm256_sub_ps, -); return 1;
    case B_MUL: KL_VLOOP(_mm256_mul_ps, *); return 1;
    case B_DIV: KL_VLOOP(_mm256_div_ps, /); return 1;
    default: return 0;
    }
}
#undef KL_VLOOP

#define INT_BIN(T)                                                                                       \
    static void bin_##T(binop op, T *o, const T *a, const T *b, int64_t sa, int64_t sb, int64_t n) {      \
        for (int64_t i = 0; i < n; i++) {                                                                \
            T x = a[i * sa], y = b[i * sb], r = 0;                                                       \
            switch (op) {                                                                                \
            case B_ADD: r = (T)(x + y); break;                                                           \
            case B_SUB: r = (T)(x - y); break;                                                           \
            case B_MUL: r = (T)(x * y); break;                                                           \
            case B_DIV: r = y ? (T)(x / y) : 0; break;                                                   \
            case B_POW: r = (T)pow((double)x, (double)y); break;                                         \
            case B_MOD: if (y) { r = (T)(x % y); if (r != 0 && ((r < 0) != (y < 0))) r = (T)(r + y); } break; \
            case B_FMOD: r = y ? (T)(x % y) : 0; break;                                                  \
            case B_MIN: r = x < y ? x : y; break;                                                        \
            case B_MAX: r = x > y ? x : y; break;                                                        \
            case B_PRELU: r = x < 0 ? (T)(x * y) : x; break;                                             \
            case B_SHL: r = (T)(y >= (T)(8 * sizeof(T)) ? 0 : x << y); break;                            \
            case B_SHR: r = (T)(y >= (T)(8 * sizeof(T)) ? 0 : x >> y); break;                            \
            case B_BAND: r = x & y; break;                                                               \
            case B_BOR: r = x | y; break;                                                                \
            case B_BXOR: r = x ^ y; break;                                                               \
            default: break;                                                                              \
            }                                                                                            \
            o[i] = r;                                                                                    \
        }                                                                                                \
    }
INT_BIN(int8_t)
INT_BIN(int16_t)
INT_BIN(int32_t)
INT_BIN(int64_t)
INT_BIN(uint8_t)
INT_BIN(uint16_t)
INT_BIN(uint32_t)
INT_BIN(uint64_t)

#define CMP_BIN(T)                                                                                      \
    static void cmp_##T(binop op, uint8_t *o, const T *a, const T *b, int64_t sa, int64_t sb, int64_t n) { \
        for (int64_t i = 0; i < n; i++) {                                                               \
            T x = a[i * sa], y = b[i * sb];                                                             \
            uint8_t r = 0;                                                                              \
            switch (op) {                                                                               \
            case B_EQ: r = x == y; break;                                                               \
            case B_LT: r = x < y; break;                                                                \
            case B_LE: r = x <= y; break;                                                               \
            case B_GT: r = x > y; break;                                                                \
            case B_GE: r = x >= y; break;                                                               \
            case B_AND: r = x && y; break;                                                              \
            case B_OR: r = x || y; break;                                                               \
            case B_XOR: r = (!!x) != (!!y); break;                                                      \
            default: break;                                                                             \
            }                                                                                           \
            o[i] = r;                                                                                   \
        }                                                                                               \
    }
CMP_BIN(f32)
CMP_BIN(f64)
CMP_BIN(int8_t)
CMP_BIN(int16_t)
CMP_BIN(int32_t)
CMP_BIN(int64_t)
CMP_BIN(uint8_t)
CMP_BIN(uint16_t)
CMP_BIN(uint32_t)
CMP_BIN(uint64_t)

static int is_cmp(binop op) { return op >= B_EQ && op <= B_XOR; }

static void bin_row(void *vctx, char *o, const char *const *in, const int64_t *is, int64_t n) {
    binctx *c = vctx;
    const void *a = in[0], *b = in[1];
    int64_t sa = is[0], sb = is[1];
    if (is_cmp(c->op)) {
        uint8_t *y = (uint8_t *)o;
        switch (c->dt) {
        case KL_F32: cmp_f32(c->op, y, a, b, sa, sb, n); break;
        case KL_F64: cmp_f64(c->op, y, a, b, sa, sb, n); break;
        case KL_I8: cmp_int8_t(c->op, y, a, b, sa, sb, n); break;
        case KL_I16: cmp_int16_t(c->op, y, a, b, sa, sb, n); break;
        case KL_I32: cmp_int32_t(c->op, y, a, b, sa, sb, n); break;
        case KL_I64: cmp_int64_t(c->op, y, a, b, sa, sb, n); break;
        case KL_U8: case KL_BOOL: cmp_uint8_t(c->op, y, a, b, sa, sb, n); break;
        case KL_U16: cmp_uint16_t(c->op, y, a, b, sa, sb, n); break;
        case KL_U32: cmp_uint32_t(c->op, y, a, b, sa, sb, n); break;
        case KL_U64: cmp_uint64_t(c->op, y, a, b, sa, sb, n); break;
        default: break;
        }
        return;
    }
    switch (c->dt) {
    case KL_F32:
        if (!bin_f32_vec(c->op, (float *)o, a, b, sa, sb, n)) bin_f32(c->op, (float *)o, a, b, sa, sb, n);
        break;
    case KL_F64: bin_f64(c->op, (double *)o, a, b, sa, sb, n); break;
    case KL_I8: bin_int8_t(c->op, (int8_t *)o, a, b, sa, sb, n); break;
    case KL_I16: bin_int16_t(c->op, (int16_t *)o, a, b, sa, sb, n); break;
    case KL_I32: bin_int32_t(c->op, (int32_t *)o, a, b, sa, sb, n); break;
    case KL_I64: bin_int64_t(c->op, (int64_t *)o, a, b, sa, sb, n); break;
    case KL_U8: case KL_BOOL: bin_uint8_t(c->op, (uint8_t *)o, a, b, sa, sb, n); break;
    case KL_U16: bin_uint16_t(c->op, (uint16_t *)o, a, b, sa, sb, n); break;
    case KL_U32: bin_uint32_t(c->op, (uint32_t *)o, a, b, sa, sb, n); break;
    case KL_U64: bin_uint64_t(c->op, (uint64_t *)o, a, b, sa, sb, n); break;
    default: break;
    }
}

static binop binop_of(const kl_gnode *n) {
    const char *t = n->op_type;
    if (!strcmp(t, "Add") || !strcmp(t, "Sum")) return B_ADD;
    if (!strcmp(t, "Sub")) return B_SUB;
    if (!strcmp(t, "Mul")) return B_MUL;
    if (!strcmp(t, "Div") || !strcmp(t, "Mean")) return B_DIV;
    if (!strcmp(t, "Pow")) return B_POW;
    if (!strcmp(t, "Mod")) return kl_gnode_attr_int(n, "fmod", 0) ? B_FMOD : B_MOD;
    if (!strcmp(t, "Min")) return B_MIN;
    if (!strcmp(t, "Max")) return B_MAX;
    if (!strcmp(t, "PRelu")) return B_PRELU;
    if (!strcmp(t, "Equal")) return B_EQ;
    if (!strcmp(t, "Less")) return B_LT;
    if (!strcmp(t, "LessOrEqual")) return B_LE;
    if (!strcmp(t, "Greater")) return B_GT;
    if (!strcmp(t, "GreaterOrEqual")) return B_GE;
    if (!strcmp(t, "And")) return B_AND;
    if (!strcmp(t, "Or")) return B_OR;
    if (!strcmp(t, "Xor")) return B_XOR;
    if (!strcmp(t, "BitShift")) return !strcmp(kl_gnode_attr_str(n, "direction", "LEFT"), "LEFT") ? B_SHL : B_SHR;
    if (!strcmp(t, "BitwiseAnd")) return B_BAND;
    if (!strcmp(t, "BitwiseOr")) return B_BOR;
    return B_BXOR;
}

static int is_half(kl_dtype d) { return d == KL_F16 || d == KL_BF16; }

static int bin_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int r;
    int64_t dims[KL_MAX_DIMS];
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return kl__fail_node(e, n, KL_EINVAL, "missing input %d", i);
    if (broadcast_dims(in, n_in, &r, dims)) {
        char a[64], b[64];
        return kl__fail_node(e, n, KL_ESHAPE, "shapes %s and %s do not broadcast", kl_shape_str(in[0]->rank, in[0]->dims, a, sizeof a),
                             kl_shape_str(in[n_in - 1]->rank, in[n_in - 1]->dims, b, sizeof b));
    }
    binop op = binop_of(n);
    kl_dtype dt = in[0]->dtype;
    if (op != B_POW && op != B_PRELU)
        for (int i = 1; i < n_in; i++)
            if (in[i]->dtype != dt)
                return kl__fail_node(e, n, KL_ETYPE, "input dtypes %s and %s differ", kl_dtype_name(dt), kl_dtype_name(in[i]->dtype));
    kl__set_shape(&out[0], is_cmp(op) ? KL_BOOL : dt, r, dims);
    /* f16/bf16 and mixed-type Pow/PRelu go through f32/f64 temporaries */
    int64_t numel = kl_shape_numel(r, dims);
    if (is_half(dt) || ((op == B_POW || op == B_PRELU) && in[1]->dtype != dt)) {
        size_t s = 0;
        for (int i = 0; i < n_in; i++) s += (size_t)kl_tensor_numel(in[i]) * 8 + 64;
        *ws = s + (size_t)numel * 8 + 64;
    }
    return KL_OK;
}

static void to_f64(const kl_tensor *t, double *d) {
    int64_t m = kl_tensor_numel(t);
    for (int64_t i = 0; i < m; i++) d[i] = kl__dbl_at(t, i);
}

static int bin_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    binop op = binop_of(n);
    kl_dtype dt = in[0]->dtype;
    if (op == B_POW && dt == KL_F32 && kl_tensor_numel(in[1]) == 1 &&
        kl_tensor_numel(out[0]) == kl_tensor_numel(in[0])) {
        /* one exponent (of any numeric type): the tensor kernel */
        float p = (float)kl__dbl_at(in[1], 0);
        kl_unary_f32(KL_UN_POW, in[0]->data, out[0]->data, kl_tensor_numel(in[0]), p, 0, x->pool);
        return KL_OK;
    }
    if ((op == B_POW || op == B_PRELU) && in[1]->dtype != dt && !is_half(dt)) {
        /* exponent of another type: compute in f64 */
        kl_tensor a = *in[0], b = *in[1], o = *out[0];
        double *wa = x->ws;
        double *wb = wa + kl_tensor_numel(in[0]) + 8;
        double *wo = wb + kl_tensor_numel(in[1]) + 8;
        to_f64(in[0], wa);
        to_f64(in[1], wb);
        a.dtype = b.dtype = o.dtype = KL_F64;
        a.data = wa; b.data = wb; o.data = wo;
        kl_tensor *ins[2] = {&a, &b};
        binctx c = {op, KL_F64};
        bcast_run(ins, 2, &o, x->pool, bin_row, &c);
        int64_t m = kl_tensor_numel(out[0]);
        for (int64_t i = 0; i < m; i++) kl__set_dbl(out[0], i, wo[i]);
        return KL_OK;
    }
    if (is_half(dt)) {
        kl_tensor a = *in[0], b = *in[1], o = *out[0];
        float *wa = x->ws;
        float *wb = wa + kl_tensor_numel(in[0]) + 16;
        float *wo = wb + kl_tensor_numel(in[1]) + 16;
        for (int64_t i = 0; i < kl_tensor_numel(in[0]); i++) wa[i] = (float)kl__dbl_at(in[0], i);
        for (int64_t i = 0; i < kl_tensor_numel(in[1]); i++) wb[i] = (float)kl__dbl_at(in[1], i);
        a.dtype = b.dtype = KL_F32;
        if (o.dtype != KL_BOOL) o.dtype = KL_F32;
        a.data = wa; b.data = wb;
        if (o.dtype == KL_F32) o.data = wo;
        kl_tensor *ins[2] = {&a, &b};
        binctx c = {op, KL_F32};
        bcast_run(ins, 2, &o, x->pool, bin_row, &c);
        if (o.dtype == KL_F32)
            for (int64_t i = 0; i < kl_tensor_numel(out[0]); i++) kl__set_dbl(out[0], i, wo[i]);
        return KL_OK;
    }
    binctx c = {op, dt};
    kl_tensor *ins[2] = {in[0], in[1]};
    bcast_run(ins, 2, out[0], x->pool, bin_row, &c);
    if (kl_gnode_attr_int(n, "_act", 0) == 1) { /* Add + Relu fused by a pass */
        if (dt == KL_F32) {
            kl_act a = {KL_ACT_RELU, 0, 0};
            kl_act_apply_f32(a, out[0]->data, kl_tensor_numel(out[0]), x->pool);
        } else {
            for (int64_t i = 0; i < kl_tensor_numel(out[0]); i++)
                if (kl__dbl_at(out[0], i) < 0) kl__set_dbl(out[0], i, 0);
        }
    }
    return KL_OK;
}

/* Variadic Sum/Mean/Max/Min: pairwise accumulation into the output. */
static void var_accumulate(binop op, kl_dtype dt, kl_tensor *const *in, int n_in, kl_tensor *o, kl_pool *pool) {
    binctx c = {op == B_DIV ? B_ADD : op, dt};
    /* out = broadcast copy of in[0], then out = out op in[i] */
    if (n_in == 1) {
        kl_tensor *ins[2] = {in[0], in[0]};
        binctx cm = {B_MAX, dt};
        if (op == B_ADD || op == B_DIV) memcpy(o->data, in[0]->data, o->nbytes);
        else bcast_run(ins, 2, o, pool, bin_row, &cm);
    } else {
        kl_tensor *ins[2] = {in[0], in[1]};
        bcast_run(ins, 2, o, pool, bin_row, &c);
        for (int i = 2; i < n_in; i++) {
            kl_tensor *ins2[2] = {o, in[i]};
            bcast_run(ins2, 2, o, pool, bin_row, &c);
        }
    }
    if (op == B_DIV) {
        int64_t m = kl_tensor_numel(o);
        for (int64_t i = 0; i < m; i++) kl__set_dbl(o, i, kl__dbl_at(o, i) / n_in);
    }
}

/* f16/bf16: every input widened to float32 in the workspace (bin_infer sized
 * it), the float32 accumulation, one rounding back. */
static void var_half(binop op, kl_tensor *const *in, int n_in, kl_tensor *o, kl_exec *x) {
    kl_tensor w[8], *wp[8], wo = *o;
    float *at = x->ws;
    for (int i = 0; i < n_in; i++) {
        w[i] = *in[i];
        w[i].dtype = KL_F32;
        w[i].data = at;
        w[i].nbytes = (size_t)kl_tensor_numel(in[i]) * sizeof(float);
        for (int64_t k = 0; k < kl_tensor_numel(in[i]); k++) at[k] = (float)kl__dbl_at(in[i], k);
        at += kl_tensor_numel(in[i]) + 16;
        wp[i] = &w[i];
    }
    wo.dtype = KL_F32;
    wo.data = at;
    wo.nbytes = (size_t)kl_tensor_numel(o) * sizeof(float);
    var_accumulate(op, KL_F32, wp, n_in, &wo, x->pool);
    for (int64_t k = 0; k < kl_tensor_numel(o); k++) kl__set_dbl(o, k, at[k]);
}

static int var_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    binop op = binop_of(n);
    kl_dtype dt = in[0]->dtype;
    if (!is_half(dt)) var_accumulate(op, dt, in, n_in, out[0], x->pool);
    else if (n_in <= 8) var_half(op, in, n_in, out[0], x);
    else return kl__fail_node(e, n, KL_EUNSUPPORTED, "%d inputs of %s (at most 8)", n_in, kl_dtype_name(dt));
    return KL_OK;
}

/* ================================================================== *
 * Unary ops
 * ================================================================== */

typedef enum { U_ABS, U_NEG, U_SQRT, U_EXP, U_LOG, U_RECIP, U_ERF, U_RELU, U_LRELU, U_SIGMOID, U_TANH, U_HSIG,
               U_HSWISH, U_FLOOR, U_CEIL, U_ROUND, U_SIGN, U_SIN, U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH,
               U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_SOFTPLUS, U_SOFTSIGN, U_ELU, U_SELU, U_CELU, U_THRELU, U_MISH,
               U_GELU, U_NOT, U_ISNAN, U_ISINF, U_IDENT, U_SHRINK, U_BNOT, U_SILU } unop;

static const struct { const char *name; unop op; } unops[] = {
    {"Abs", U_ABS}, {"Neg", U_NEG}, {"Sqrt", U_SQRT}, {"Exp", U_EXP}, {"Log", U_LOG}, {"Reciprocal", U_RECIP},
    {"Erf", U_ERF}, {"Relu", U_RELU}, {"LeakyRelu", U_LRELU}, {"Sigmoid", U_SIGMOID}, {"Tanh", U_TANH},
    {"HardSigmoid", U_HSIG}, {"HardSwish", U_HSWISH}, {"Floor", U_FLOOR}, {"Ceil", U_CEIL}, {"Round", U_ROUND},
    {"Sign", U_SIGN}, {"Sin", U_SIN}, {"Cos", U_COS}, {"Tan", U_TAN}, {"Asin", U_ASIN}, {"Acos", U_ACOS},
    {"Atan", U_ATAN}, {"Sinh", U_SINH}, {"Cosh", U_COSH}, {"Asinh", U_ASINH}, {"Acosh", U_ACOSH},
    {"Atanh", U_ATANH}, {"Softplus", U_SOFTPLUS}, {"Softsign", U_SOFTSIGN}, {"Elu", U_ELU}, {"Selu", U_SELU},
    {"Celu", U_CELU}, {"ThresholdedRelu", U_THRELU}, {"Mish", U_MISH}, {"Gelu", U_GELU}, {"Not", U_NOT},
    {"IsNaN", U_ISNAN}, {"IsInf", U_ISINF}, {"Identity", U_IDENT}, {"Shrink", U_SHRINK}, {"BitwiseNot", U_BNOT},
    {"Silu", U_SILU},
};

typedef struct { unop op; double a, b; int det_neg, det_pos; } unctx;

static double round_even(double v) { return nearbyint(v); }

/* v limited to [lo, hi]; a NaN stays NaN (NumPy's np.clip; fmax/fmin would
 * drop it) */
static inline double clamp_nan(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static double un_f(const unctx *c, double v) {
    double a = c->a, b = c->b;
    switch (c->op) {
    case U_ABS: return fabs(v);
    case U_NEG: return -v;
    case U_SQRT: return sqrt(v);
    case U_EXP: return exp(v);
    case U_LOG: return log(v);
    case U_RECIP: return 1.0 / v;
    case U_ERF: return erf(v);
    case U_RELU: return v < 0 ? 0 : v; /* NaN in, NaN out */
    case U_LRELU: return v < 0 ? a * v : v;
    case U_SIGMOID: return 1.0 / (1.0 + exp(-v));
    case U_TANH: return tanh(v);
    case U_HSIG: return clamp_nan(a * v + b, 0, 1);
    case U_HSWISH: return v * clamp_nan(v / 6.0 + 0.5, 0, 1);
    case U_FLOOR: return floor(v);
    case U_CEIL: return ceil(v);
    case U_ROUND: return round_even(v);
    case U_SIGN: return v > 0 ? 1 : v < 0 ? -1 : v == v ? 0 : v;
    case U_SIN: return sin(v);
    case U_COS: return cos(v);
    case U_TAN: return tan(v);
    case U_ASIN: return asin(v);
    case U_ACOS: return acos(v);
    case U_ATAN: return atan(v);
    case U_SINH: return sinh(v);
    case U_COSH: return cosh(v);
    case U_ASINH: return asinh(v);
    case U_ACOSH: return acosh(v);
    case U_ATANH: return atanh(v);
    case U_SOFTPLUS: return v > 30 ? v : log1p(exp(v));
    case U_SOFTSIGN: return v / (1 + fabs(v));
    case U_ELU: return v < 0 ? a * (exp(v) - 1) : v;
    case U_SELU: return v <= 0 ? b * (a * exp(v) - a) : b * v;
    case U_CELU: return clamp_nan(v, 0, INFINITY) + clamp_nan(a * (exp(v / a) - 1), -INFINITY, 0);
    case U_THRELU: return v > a ? v : 0;
    case U_MISH: return v * tanh(v > 30 ? v : log1p(exp(v)));
    case U_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case U_SILU: return v / (1 + exp(-v));
    case U_NOT: return v == 0;
    case U_ISNAN: return isnan(v) ? 1 : 0;
    case U_ISINF: return isinf(v) ? ((v < 0 && c->det_neg) || (v > 0 && c->det_pos)) : 0;
    case U_IDENT: return v;
    case U_SHRINK: return v < -a ? v + b : v > a ? v - b : 0;
    default: return v;
    }
}

static unop unop_of(const kl_gnode *n) {
    for (size_t i = 0; i < KL_ARRAY_LEN(unops); i++)
        if (!strcmp(unops[i].name, n->op_type)) return unops[i].op;
    return U_IDENT;
}

static void unctx_init(const kl_gnode *n, unctx *c) {
    c->op = unop_of(n);
    c->a = c->b = 0;
    switch (c->op) {
    case U_LRELU: c->a = kl_gnode_attr_float(n, "alpha", 0.01f); break;
    case U_HSIG: c->a = kl_gnode_attr_float(n, "alpha", 0.2f); c->b = kl_gnode_attr_float(n, "beta", 0.5f); break;
    case U_ELU: c->a = kl_gnode_attr_float(n, "alpha", 1.0f); break;
    case U_CELU: c->a = kl_gnode_attr_float(n, "alpha", 1.0f); break;
    case U_SELU: c->a = kl_gnode_attr_float(n, "alpha", 1.67326319217681884765625f);
                 c->b = kl_gnode_attr_float(n, "gamma", 1.05070102214813232421875f); break;
    case U_THRELU: c->a = kl_gnode_attr_float(n, "alpha", 1.0f); break;
    case U_SHRINK: c->a = kl_gnode_attr_float(n, "lambd", 0.5f); c->b = kl_gnode_attr_float(n, "bias", 0.0f); break;
    case U_ISINF: c->det_neg = (int)kl_gnode_attr_int(n, "detect_negative", 1); c->det_pos = (int)kl_gnode_attr_int(n, "detect_positive", 1); break;
    default: break;
    }
}

static int un_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    if (!in[0]) return kl__fail_node(e, n, KL_EINVAL, "missing input");
    unop op = unop_of(n);
    kl_dtype dt = in[0]->dtype;
    if (op == U_ISNAN || op == U_ISINF) dt = KL_BOOL;
    kl__set_shape(&out[0], dt, in[0]->rank, in[0]->dims);
    return KL_OK;
}

typedef struct { unctx c; const kl_tensor *x; kl_tensor *y; } unrun;

/* The tensor kernel of a float32 unary op, with its parameters; 0 if none. */
static int un_kernel(const unctx *c, kl_unary_op *op, float *a, float *b) {
    static const struct { unop u; kl_unary_op k; } map[] = {
        {U_ABS, KL_UN_ABS}, {U_NEG, KL_UN_NEG}, {U_SQRT, KL_UN_SQRT}, {U_EXP, KL_UN_EXP}, {U_LOG, KL_UN_LOG},
        {U_RECIP, KL_UN_RECIPROCAL}, {U_ERF, KL_UN_ERF}, {U_RELU, KL_UN_RELU}, {U_LRELU, KL_UN_LEAKY_RELU},
        {U_SIGMOID, KL_UN_SIGMOID}, {U_TANH, KL_UN_TANH}, {U_HSIG, KL_UN_HARDSIGMOID}, {U_HSWISH, KL_UN_HARDSWISH},
        {U_FLOOR, KL_UN_FLOOR}, {U_CEIL, KL_UN_CEIL}, {U_ROUND, KL_UN_ROUND}, {U_SIGN, KL_UN_SIGN},
        {U_SIN, KL_UN_SIN}, {U_COS, KL_UN_COS}, {U_SOFTPLUS, KL_UN_SOFTPLUS}, {U_SOFTSIGN, KL_UN_SOFTSIGN},
        {U_ELU, KL_UN_ELU}, {U_SELU, KL_UN_SELU}, {U_CELU, KL_UN_CELU}, {U_MISH, KL_UN_MISH}, {U_GELU, KL_UN_GELU},
        {U_SILU, KL_UN_SILU},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(map); i++)
        if (map[i].u == c->op) {
            *op = map[i].k;
            *a = (float)c->a;
            *b = (float)c->b;
            return 1;
        }
    return 0;
}

/* dtypes and ops without a tensor kernel: per element in double */
static void un_range(void *vctx, size_t b, size_t en, int chunk) {
    unrun *u = vctx;
    const unctx *c = &u->c;
    if (u->x->dtype == KL_F32 && u->y->dtype == KL_F32) {
        const float *xs = u->x->data;
        float *ys = u->y->data;
        for (size_t i = b; i < en; i++) ys[i] = (float)un_f(c, xs[i]);
        return;
    }
    if (u->x->dtype == KL_F64 && u->y->dtype == KL_F64) {
        const double *xs = u->x->data;
        double *ys = u->y->data;
        for (size_t i = b; i < en; i++) ys[i] = un_f(c, xs[i]);
        return;
    }
    if (u->x->dtype == KL_I64 && u->y->dtype == KL_I64 && (c->op == U_NEG || c->op == U_ABS || c->op == U_IDENT)) {
        const int64_t *xs = u->x->data;
        int64_t *ys = u->y->data;
        for (size_t i = b; i < en; i++) ys[i] = c->op == U_NEG ? -xs[i] : c->op == U_ABS ? (xs[i] < 0 ? -xs[i] : xs[i]) : xs[i];
        return;
    }
    if (c->op == U_BNOT) {
        size_t es = kl_dtype_size(u->x->dtype);
        const uint8_t *xs = u->x->data;
        uint8_t *ys = u->y->data;
        for (size_t i = b * es; i < en * es; i++) ys[i] = (uint8_t)~xs[i];
        return;
    }
    for (size_t i = b; i < en; i++) kl__set_dbl(u->y, (int64_t)i, un_f(c, kl__dbl_at(u->x, (int64_t)i)));
}

static int un_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    unrun u;
    unctx_init(n, &u.c);
    u.x = in[0];
    u.y = out[0];
    int64_t m = kl_tensor_numel(in[0]);
    if (u.c.op == U_IDENT || (!strcmp(n->op_type, "Dropout"))) {
        if (out[0]->data != in[0]->data) memcpy(out[0]->data, in[0]->data, (size_t)m * kl_dtype_size(in[0]->dtype));
        return KL_OK;
    }
    kl_unary_op kop;
    float ka, kb;
    if (in[0]->dtype == KL_F32 && out[0]->dtype == KL_F32 && un_kernel(&u.c, &kop, &ka, &kb)) {
        kl_unary_f32(kop, in[0]->data, out[0]->data, m, ka, kb, x->pool);
        return KL_OK;
    }
    if (m < 16384) un_range(&u, 0, (size_t)m, 0);
    else kl_pool_parallel_for(x->pool, (size_t)m, 8192, un_range, &u);
    return KL_OK;
}

/* Dropout: a copy with an all-true mask in inference (opsets 7-11 always;
 * 12+ when training_mode is false or absent, or ratio is 0). In training
 * mode with ratio in (0, 1): y = x * mask / (1 - ratio), the mask from the
 * counter-based generator of ai.keel.train::Dropout (kl__dropout_keep:
 * splitmix64 of the seed attribute (0 when absent) and the element index,
 * kept when its top 24 bits as a uniform in [0, 1) are >= ratio), so a seed
 * gives the same mask on every run and any thread count. The mask is bool
 * from opset 10, the input's dtype before. */
static int dropout_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, in[0]->dims);
    if (n_out > 1) kl__set_shape(&out[1], n->opset < 10 ? in[0]->dtype : KL_BOOL, in[0]->rank, in[0]->dims);
    if (n_in > 1 && in[1] && kl_tensor_numel(in[1]) != 1)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: ratio must be a scalar", n->opset);
    if (n_in > 2 && in[2] && kl_tensor_numel(in[2]) != 1)
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: training_mode must be a scalar", n->opset);
    return KL_OK;
}

static void dropout_apply(const kl_tensor *x, kl_tensor *y, kl_tensor *mask, uint64_t seed, float ratio) {
    int64_t m = kl_tensor_numel(x);
    double sc = 1.0 / (1.0 - ratio);
    for (int64_t i = 0; i < m; i++) {
        uint8_t k = kl__dropout_keep(seed, (uint64_t)i, ratio);
        if (x->dtype == KL_F32) ((float *)y->data)[i] = k ? ((const float *)x->data)[i] * (float)sc : 0.f;
        else kl__set_dbl(y, i, k ? kl__dbl_at(x, i) * sc : 0.0);
        if (!mask) continue;
        if (mask->dtype == KL_BOOL) ((uint8_t *)mask->data)[i] = k;
        else kl__set_dbl(mask, i, k);
    }
}

static int dropout_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    int64_t m = kl_tensor_numel(in[0]);
    kl_tensor *mask = n_out > 1 ? out[1] : NULL;
    int train = n->opset >= 12 && n_in > 2 && in[2] && kl__int_at(in[2], 0) != 0;
    double ratio =
        n->opset >= 12 ? (n_in > 1 && in[1] ? kl__dbl_at(in[1], 0) : 0.5) : kl_gnode_attr_float(n, "ratio", 0.5f);
    if (train && ratio != 0) {
        if (!(ratio > 0 && ratio < 1))
            return kl__fail_node(e, n, KL_EINVAL, "opset %d: training_mode with ratio %g outside [0, 1)", n->opset,
                                 ratio);
        if (!kl_dtype_is_float(in[0]->dtype))
            return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: training_mode on %s data", n->opset,
                                 kl_dtype_name(in[0]->dtype));
        dropout_apply(in[0], out[0], mask, (uint64_t)kl_gnode_attr_int(n, "seed", 0), (float)ratio);
        return KL_OK;
    }
    if (out[0]->data != in[0]->data) memcpy(out[0]->data, in[0]->data, (size_t)m * kl_dtype_size(in[0]->dtype));
    if (mask && mask->dtype == KL_BOOL) memset(mask->data, 1, (size_t)m);
    else if (mask)
        for (int64_t i = 0; i < m; i++) kl__set_dbl(mask, i, 1.0);
    return KL_OK;
}

/* ================================================================== *
 * Clip, Where, Cast
 * ================================================================== */

static int clip_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    double lo = -INFINITY, hi = INFINITY;
    for (int k = 1; k < n_in; k++)
        if (in[k] && kl_tensor_numel(in[k]) != 1) return kl__fail_node(e, n, KL_ESHAPE, "min/max must be scalars");
    if (n->opset < 11) {
        lo = kl_gnode_attr_float(n, "min", -INFINITY);
        hi = kl_gnode_attr_float(n, "max", INFINITY);
    } else {
        if (n_in > 1 && in[1]) lo = kl__dbl_at(in[1], 0);
        if (n_in > 2 && in[2]) hi = kl__dbl_at(in[2], 0);
    }
    int64_t m = kl_tensor_numel(in[0]);
    if (in[0]->dtype == KL_F32) {
        kl_unary_f32(KL_UN_CLIP, in[0]->data, out[0]->data, m, (float)lo, (float)hi, x->pool);
        return KL_OK;
    }
    if (in[0]->dtype == KL_I64 || in[0]->dtype == KL_U64 || in[0]->dtype == KL_I32 || in[0]->dtype == KL_U32) {
        int64_t l = n_in > 1 && in[1] ? kl__int_at(in[1], 0) : INT64_MIN, h = n_in > 2 && in[2] ? kl__int_at(in[2], 0) : INT64_MAX;
        for (int64_t i = 0; i < m; i++) {
            int64_t v = kl__int_at(in[0], i);
            v = v < l ? l : v; v = v > h ? h : v;
            kl__set_dbl(out[0], i, (double)v);
            if (in[0]->dtype == KL_I64) ((int64_t *)out[0]->data)[i] = v;
        }
        return KL_OK;
    }
    for (int64_t i = 0; i < m; i++) {
        double v = kl__dbl_at(in[0], i);
        v = v < lo ? lo : v; v = v > hi ? hi : v;
        kl__set_dbl(out[0], i, v);
    }
    return KL_OK;
}

static int where_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    int r;
    int64_t dims[KL_MAX_DIMS];
    if (broadcast_dims(in, 3, &r, dims)) return kl__fail_node(e, n, KL_ESHAPE, "shapes do not broadcast");
    if (in[1]->dtype != in[2]->dtype) return kl__fail_node(e, n, KL_ETYPE, "X and Y dtypes differ");
    kl__set_shape(&out[0], in[1]->dtype, r, dims);
    return KL_OK;
}

static void where_row(void *vctx, char *o, const char *const *in, const int64_t *is, int64_t n) {
    size_t es = *(size_t *)vctx;
    const uint8_t *c = (const uint8_t *)in[0];
    for (int64_t i = 0; i < n; i++) {
        const char *src = c[i * is[0]] ? in[1] + i * is[1] * (int64_t)es : in[2] + i * is[2] * (int64_t)es;
        memcpy(o + i * (int64_t)es, src, es);
    }
}

static int where_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    size_t es = kl_dtype_size(in[1]->dtype);
    kl_tensor *ins[3] = {in[0], in[1], in[2]};
    bcast_run(ins, 3, out[0], x->pool, where_row, &es);
    return KL_OK;
}

static int cast_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_dtype to;
    if (!strcmp(n->op_type, "CastLike")) to = in[1]->dtype;
    else {
        const kl_attr *a = kl_gnode_attr(n, "to");
        if (!a || a->type != KL_ATTR_INT) return kl__fail_node(e, n, KL_EINVAL, "attribute 'to' missing");
        int rc = kl_dtype_from_onnx((int)a->i, &to);
        if (rc) return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: cast to ONNX type %lld is not supported", n->opset, (long long)a->i);
    }
    kl__set_shape(&out[0], to, in[0]->rank, in[0]->dims);
    return KL_OK;
}

static int cast_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x, kl_err *e) {
    kl_dtype from = in[0]->dtype, to = out[0]->dtype;
    int64_t m = kl_tensor_numel(in[0]);
    if (from == to) { memcpy(out[0]->data, in[0]->data, (size_t)m * kl_dtype_size(from)); return KL_OK; }
    if (from == KL_F32 && to == KL_F16) { kl_f32_to_f16_n(in[0]->data, out[0]->data, (size_t)m); return KL_OK; }
    if (from == KL_F16 && to == KL_F32) { kl_f16_to_f32_n(in[0]->data, out[0]->data, (size_t)m); return KL_OK; }
    if (from == KL_F32 && to == KL_BF16) { kl_f32_to_bf16_n(in[0]->data, out[0]->data, (size_t)m); return KL_OK; }
    if (from == KL_BF16 && to == KL_F32) { kl_bf16_to_f32_n(in[0]->data, out[0]->data, (size_t)m); return KL_OK; }
    int from_int = kl_dtype_is_int(from) || from == KL_BOOL, to_int = kl_dtype_is_int(to) || to == KL_BOOL;
    if (from_int && to_int) {
        for (int64_t i = 0; i < m; i++) {
            int64_t v = kl__int_at(in[0], i);
            switch (to) {
            case KL_I64: ((int64_t *)out[0]->data)[i] = v; break;
            case KL_U64: ((uint64_t *)out[0]->data)[i] = (uint64_t)v; break;
            default: kl__set_dbl(out[0], i, to == KL_BOOL ? (v != 0) : (double)v); break;
            }
        }
        return KL_OK;
    }
    for (int64_t i = 0; i < m; i++) {
        double v = kl__dbl_at(in[0], i);
        if (to == KL_I32 && !kl_dtype_is_int(from)) { ((int32_t *)out[0]->data)[i] = (int32_t)(int64_t)v; continue; }
        if (to == KL_F16 && from == KL_F64) { ((uint16_t *)out[0]->data)[i] = kl_f32_to_f16((float)v); continue; }
        kl__set_dbl(out[0], i, v);
    }
    return KL_OK;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const char *const no_attrs[] = {NULL};
static const char *const a_alpha[] = {"alpha", NULL};
static const char *const a_fused[] = {"_act", NULL};
static const char *const a_alpha_beta[] = {"alpha", "beta", NULL};
static const char *const a_selu[] = {"alpha", "gamma", NULL};
static const char *const a_mod[] = {"fmod", NULL};
static const char *const a_shift[] = {"direction", NULL};
static const char *const a_isinf[] = {"detect_negative", "detect_positive", NULL};
static const char *const a_shrink[] = {"lambd", "bias", NULL};
static const char *const a_clip[] = {"min", "max", NULL};
static const char *const a_cast[] = {"to", "saturate", NULL};
static const char *const a_dropout[] = {"ratio", "seed", NULL};

#define UN(name, since, attrs) {name, "", since, 17, 1, 1, 1, 1, attrs, NULL, un_infer, un_run, KL_OP_BCAST}
#define BIN(name, since) {name, "", since, 17, 2, 2, 1, 1, no_attrs, NULL, bin_infer, bin_run, KL_OP_BCAST}
#define VAR(name, since) {name, "", since, 17, 1, -1, 1, 1, no_attrs, NULL, bin_infer, var_run, 0}

const kl_op kl__ops_elem[] = {
    UN("Abs", 6, no_attrs), UN("Neg", 6, no_attrs), UN("Sqrt", 6, no_attrs), UN("Exp", 6, no_attrs),
    UN("Log", 6, no_attrs), UN("Reciprocal", 6, no_attrs), UN("Erf", 9, no_attrs), UN("Relu", 6, no_attrs),
    UN("LeakyRelu", 6, a_alpha), UN("Sigmoid", 6, no_attrs), UN("Tanh", 6, no_attrs),
    UN("HardSigmoid", 6, a_alpha_beta), UN("HardSwish", 14, no_attrs), UN("Floor", 6, no_attrs),
    UN("Ceil", 6, no_attrs), UN("Round", 11, no_attrs), UN("Sign", 9, no_attrs), UN("Sin", 7, no_attrs),
    UN("Cos", 7, no_attrs), UN("Tan", 7, no_attrs), UN("Asin", 7, no_attrs), UN("Acos", 7, no_attrs),
    UN("Atan", 7, no_attrs), UN("Sinh", 9, no_attrs), UN("Cosh", 9, no_attrs), UN("Asinh", 9, no_attrs),
    UN("Acosh", 9, no_attrs), UN("Atanh", 9, no_attrs), UN("Softplus", 1, no_attrs), UN("Softsign", 1, no_attrs),
    UN("Elu", 6, a_alpha), UN("Selu", 6, a_selu), UN("Celu", 12, a_alpha), UN("ThresholdedRelu", 10, a_alpha),
    UN("Not", 1, no_attrs), UN("IsNaN", 9, no_attrs), UN("IsInf", 10, a_isinf),
    UN("Identity", 1, no_attrs), UN("Shrink", 9, a_shrink), UN("BitwiseNot", 18, no_attrs),
    /* Mish: since opset 18, unchanged to 22 (UN's 17 would exclude it) */
    {"Mish", "", 18, 22, 1, 1, 1, 1, no_attrs, NULL, un_infer, un_run, KL_OP_BCAST},
    {"Gelu", "com.microsoft", 1, 1, 1, 1, 1, 1, no_attrs, NULL, un_infer, un_run, 0},
    /* Mul(x, Sigmoid(x)) fused by a pass (passes.c) */
    {"Silu", "keel", 1, 1, 1, 1, 1, 1, no_attrs, NULL, un_infer, un_run, 0},
    {"Dropout", "", 7, 17, 1, 3, 1, 2, a_dropout, NULL, dropout_infer, dropout_run, 0},
    {"Add", "", 7, 17, 2, 2, 1, 1, a_fused, NULL, bin_infer, bin_run, KL_OP_BCAST}, BIN("Sub", 7), BIN("Mul", 7), BIN("Div", 7), BIN("Pow", 7),
    {"Mod", "", 10, 17, 2, 2, 1, 1, a_mod, NULL, bin_infer, bin_run, 0},
    BIN("PRelu", 7), BIN("Equal", 7), BIN("Less", 7), BIN("LessOrEqual", 12), BIN("Greater", 7),
    BIN("GreaterOrEqual", 12), BIN("And", 7), BIN("Or", 7), BIN("Xor", 7),
    {"BitShift", "", 11, 17, 2, 2, 1, 1, a_shift, NULL, bin_infer, bin_run, 0},
    BIN("BitwiseAnd", 18), BIN("BitwiseOr", 18), BIN("BitwiseXor", 18),
    VAR("Sum", 8), VAR("Mean", 8), VAR("Max", 8), VAR("Min", 8),
    {"Clip", "", 6, 17, 1, 3, 1, 1, a_clip, NULL, un_infer, clip_run, KL_OP_BCAST},
    {"Where", "", 9, 17, 3, 3, 1, 1, no_attrs, NULL, where_infer, where_run, 0},
    {"Cast", "", 6, 17, 1, 1, 1, 1, a_cast, NULL, cast_infer, cast_run, 0},
    {"CastLike", "", 15, 17, 2, 2, 1, 1, a_cast, NULL, cast_infer, cast_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
