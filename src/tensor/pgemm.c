/* Packed SGEMM with keel's own AVX-512 register-blocked micro-kernel (8 rows x
 * 32 columns, 16 zmm accumulators), used by convolution (weights packed once,
 * im2col written straight into the B panel layout) and by Gemm/MatMul with a
 * constant weight (B panels packed once at session load).
 *
 * C (M x N) = A (M x K) * B (K x N), row-major, then an epilogue at the last
 * k block: + bias (per row or per column), + residual R, activation.
 *   A: packed panels of MR rows ([ceil(M/MR)][K][MR], zero-padded rows) or
 *      raw row-major (lda).
 *   B: packed panels of NR columns ([ceil(N/NR)][K][NR], zero-padded
 *      columns) or raw row-major (ldb; masked loads at the right edge).
 * Work is split into fixed tiles of C that depend only on the shape; every
 * element is computed by one tile with k blocks in ascending order, so the
 * results are bit-identical at any thread count. Used only when the CPU has
 * AVX-512F (kl__pgemm_ok); otherwise callers keep the OpenBLAS paths. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * CPU detection
 * ================================================================== */

static int isa = -1;

int kl__pgemm_ok(void) {
    int v = __atomic_load_n(&isa, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && kl_simd_avx512_allowed();
        __atomic_store_n(&isa, v, __ATOMIC_RELAXED);
    }
    return v;
}

int kl__isa_force = -1;

int kl__isa_level(void) {
    static int avx2 = -1;
    int a = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
    if (a < 0) {
        __builtin_cpu_init();
        a = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&avx2, a, __ATOMIC_RELAXED);
    }
    int lv = kl__pgemm_ok() ? 2 : a ? 1 : 0, f = __atomic_load_n(&kl__isa_force, __ATOMIC_RELAXED);
    return f >= 0 && f < lv ? f : lv;
}

/* ==================================================================
 * Packing
 * ================================================================== */

size_t kl__pgemm_packed_a_floats(int64_t M, int64_t K) { return (size_t)((M + KL__MR - 1) / KL__MR * KL__MR * K); }
size_t kl__pgemm_packed_b_floats(int64_t K, int64_t N) { return (size_t)((N + KL__NR - 1) / KL__NR * KL__NR * K); }

/* A (M x K, element (i,k) at a[i*rs + k*ks]) -> k-block major: block b
 * (k in [b*KC, b*KC + kc)) at b*KC*Mpad, panel p of it at + p*kc*MR, as
 * [kc][MR]: the panels a k block of a tile needs are one sequential stream. */
void kl__pgemm_pack_a(int64_t M, int64_t K, const float *a, int64_t rs, int64_t ks, float *dst) {
    int64_t P = (M + KL__MR - 1) / KL__MR, Mpad = P * KL__MR;
    for (int64_t k0 = 0; k0 < K; k0 += KL__KC) {
        int64_t kc = KL_MIN(KL__KC, K - k0);
        for (int64_t p = 0; p < P; p++) {
            float *d = dst + k0 * Mpad + p * kc * KL__MR;
            /* row by row: reads along k (contiguous for row-major weights) */
            for (int r = 0; r < KL__MR; r++) {
                int64_t i = p * KL__MR + r;
                if (i >= M) {
                    for (int64_t k = 0; k < kc; k++) d[k * KL__MR + r] = 0.0f;
                    continue;
                }
                const float *ai = a + i * rs + k0 * ks;
                for (int64_t k = 0; k < kc; k++) d[k * KL__MR + r] = ai[k * ks];
            }
        }
    }
}

/* Panel of rows i.. (multiple of MR) for the k block at k0 in packed A. */
static inline const float *a_panel(const kl__pgemm *g, int64_t i, int64_t k0) {
    int64_t Mpad = (g->M + KL__MR - 1) / KL__MR * KL__MR, kc = KL_MIN(KL__KC, g->K - k0);
    return g->ap + k0 * Mpad + (i / KL__MR) * kc * KL__MR;
}

/* B (K x N, element (k,j) at b[k*rs + j*cs]) -> [panel][k][NR]. */
void kl__pgemm_pack_b(int64_t K, int64_t N, const float *b, int64_t rs, int64_t cs, float *dst) {
    for (int64_t q = 0; q < (N + KL__NR - 1) / KL__NR; q++) {
        float *d = dst + q * K * KL__NR;
        int64_t j0 = q * KL__NR, n = KL_MIN(KL__NR, N - j0);
        for (int64_t k = 0; k < K; k++) {
            float *dr = d + k * KL__NR;
            if (cs == 1) memcpy(dr, b + k * rs + j0, (size_t)n * sizeof(float));
            else
                for (int64_t j = 0; j < n; j++) dr[j] = b[k * rs + (j0 + j) * cs];
            for (int64_t j = n; j < KL__NR; j++) dr[j] = 0.0f;
        }
    }
}

/* ==================================================================
 * Micro-kernel: 8 x 32 block of C over kc values of k
 * ================================================================== */

#define KC_BLOCK KL__KC

typedef struct {
    const kl__pgemm *g;
    int64_t i0, j0;      /* block origin in C */
    int mr, nr;          /* valid rows / columns */
    int first, last;     /* first k block (C not read) / last (epilogue) */
    int64_t coff;        /* column segments (g->cseg): offset of the first one */
    int nseg;            /* segments in the block (segd: lanes sa..sb at soff) */
    int segd;            /* 0: one plain run of nr columns at c */
    int sa[KL__NR + 1], sb[KL__NR + 1];
    uint32_t smask[KL__NR + 1];
    int64_t soff[KL__NR + 1];
} blk;

/* The 32 lanes of a block row from p (C or residual layout): one plain or
 * masked load pair, or one merge-masked load per column segment. */
__attribute__((target("avx512f"), always_inline)) static inline void
ld_row(const blk *q, const float *p, __mmask16 m0, __mmask16 m1, __m512 *x0, __m512 *x1) {
    if (!q->segd) {
        int full = q->nr == KL__NR;
        *x0 = full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m0, p);
        *x1 = full ? _mm512_loadu_ps(p + 16) : _mm512_maskz_loadu_ps(m1, p + 16);
        return;
    }
    __m512 a = _mm512_setzero_ps(), b = a;
    for (int t = 0; t < q->nseg; t++) {
        const float *s = p + q->soff[t];
        a = _mm512_mask_loadu_ps(a, (__mmask16)q->smask[t], s);
        b = _mm512_mask_loadu_ps(b, (__mmask16)(q->smask[t] >> 16), s + 16);
    }
    *x0 = a;
    *x1 = b;
}

/* Epilogue of one row of the block: accumulate into C (after the first k
 * block), then bias, residual and activation at the last one. */
__attribute__((target("avx512f"), always_inline)) static inline void
row_out(const blk *q, int r, __m512 v0, __m512 v1, float *c, int64_t ldc, __mmask16 m0, __mmask16 m1, __m512 cb0,
        __m512 cb1) {
    const kl__pgemm *g = q->g;
    kl_act act = g->act;
    float *cr = c + r * ldc;
    int full = q->nr == KL__NR;
    __m512 l0, l1;
    if (!q->first) {
        ld_row(q, cr, m0, m1, &l0, &l1);
        v0 = _mm512_add_ps(l0, v0);
        v1 = _mm512_add_ps(l1, v1);
    }
    if (q->last) {
        if (g->bias) {
            if (g->bias_rows) {
                __m512 bv = _mm512_set1_ps(g->bias[q->i0 + r]);
                v0 = _mm512_add_ps(v0, bv);
                v1 = _mm512_add_ps(v1, bv);
            } else {
                v0 = _mm512_add_ps(v0, cb0);
                v1 = _mm512_add_ps(v1, cb1);
            }
        }
        if (g->res) {
            const float *rr = g->res + (q->i0 + r) * g->ldr + q->j0 + q->coff;
            ld_row(q, rr, m0, m1, &l0, &l1);
            v0 = _mm512_add_ps(v0, l0);
            v1 = _mm512_add_ps(v1, l1);
        }
        if (act.kind == KL_ACT_RELU) {
            v0 = _mm512_max_ps(_mm512_setzero_ps(), v0);
            v1 = _mm512_max_ps(_mm512_setzero_ps(), v1);
        } else if (act.kind == KL_ACT_CLIP) {
            __m512 lo = _mm512_set1_ps(act.a), hi = _mm512_set1_ps(act.b);
            v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
            v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
        }
    }
    int other = q->last && act.kind != KL_ACT_NONE && act.kind != KL_ACT_RELU && act.kind != KL_ACT_CLIP;
    if (q->segd) {
        for (int t = 0; t < q->nseg; t++) {
            float *s = cr + q->soff[t];
            _mm512_mask_storeu_ps(s, (__mmask16)q->smask[t], v0);
            _mm512_mask_storeu_ps(s + 16, (__mmask16)(q->smask[t] >> 16), v1);
            if (other) kl__act_apply_range(act, s + q->sa[t], q->sb[t] - q->sa[t]);
        }
        return;
    }
    if (full) {
        _mm512_storeu_ps(cr, v0);
        _mm512_storeu_ps(cr + 16, v1);
    } else {
        _mm512_mask_storeu_ps(cr, m0, v0);
        _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
    if (other) kl__act_apply_range(act, cr, q->nr);
}

/* The 8 x 32 block: a packed (a[k*MR + r]) or raw (ar[r][k]); b rows at b + k*ldb. */
__attribute__((target("avx512f"), always_inline)) static inline void
kern_body(int64_t kc, const float *a, const float *const *ar, const float *b, int64_t ldb, const int32_t *koff,
          float *c, int64_t ldc, const blk *q) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    __mmask16 m0 = q->nr >= 16 ? 0xFFFF : (__mmask16)((1u << q->nr) - 1);
    __mmask16 m1 = q->nr >= 32 ? 0xFFFF : q->nr > 16 ? (__mmask16)((1u << (q->nr - 16)) - 1) : 0;
#define KL_A(r) _mm512_set1_ps(a ? a[k * KL__MR + (r)] : ar[r][k])
#define KL_FMA(r, x0, x1)                                                                                              \
    do {                                                                                                               \
        __m512 av = KL_A(r);                                                                                           \
        x0 = _mm512_fmadd_ps(av, b0, x0);                                                                              \
        x1 = _mm512_fmadd_ps(av, b1, x1);                                                                              \
    } while (0)
    if (koff && q->nr == KL__NR) {
        for (int64_t k = 0; k < kc; k++) {
            const float *bk = b + koff[k];
            __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16);
            KL_FMA(0, c00, c01); KL_FMA(1, c10, c11); KL_FMA(2, c20, c21); KL_FMA(3, c30, c31);
            KL_FMA(4, c40, c41); KL_FMA(5, c50, c51); KL_FMA(6, c60, c61); KL_FMA(7, c70, c71);
        }
    } else if (koff) {
        for (int64_t k = 0; k < kc; k++) {
            const float *bk = b + koff[k];
            __m512 b0 = _mm512_maskz_loadu_ps(m0, bk), b1 = _mm512_maskz_loadu_ps(m1, bk + 16);
            KL_FMA(0, c00, c01); KL_FMA(1, c10, c11); KL_FMA(2, c20, c21); KL_FMA(3, c30, c31);
            KL_FMA(4, c40, c41); KL_FMA(5, c50, c51); KL_FMA(6, c60, c61); KL_FMA(7, c70, c71);
        }
    } else if (q->nr == KL__NR) {
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
            KL_FMA(0, c00, c01); KL_FMA(1, c10, c11); KL_FMA(2, c20, c21); KL_FMA(3, c30, c31);
            KL_FMA(4, c40, c41); KL_FMA(5, c50, c51); KL_FMA(6, c60, c61); KL_FMA(7, c70, c71);
        }
    } else {
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_maskz_loadu_ps(m0, b + k * ldb), b1 = _mm512_maskz_loadu_ps(m1, b + k * ldb + 16);
            KL_FMA(0, c00, c01); KL_FMA(1, c10, c11); KL_FMA(2, c20, c21); KL_FMA(3, c30, c31);
            KL_FMA(4, c40, c41); KL_FMA(5, c50, c51); KL_FMA(6, c60, c61); KL_FMA(7, c70, c71);
        }
    }
#undef KL_FMA
#undef KL_A
    const kl__pgemm *g = q->g;
    __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0;
    if (q->last && g->bias && !g->bias_rows) {
        cb0 = _mm512_maskz_loadu_ps(m0, g->bias + q->j0);
        cb1 = _mm512_maskz_loadu_ps(m1, g->bias + q->j0 + 16);
    }
    int mr = q->mr;
    row_out(q, 0, c00, c01, c, ldc, m0, m1, cb0, cb1);
    if (mr > 1) row_out(q, 1, c10, c11, c, ldc, m0, m1, cb0, cb1);
    if (mr > 2) row_out(q, 2, c20, c21, c, ldc, m0, m1, cb0, cb1);
    if (mr > 3) row_out(q, 3, c30, c31, c, ldc, m0, m1, cb0, cb1);
    if (mr > 4) row_out(q, 4, c40, c41, c, ldc, m0, m1, cb0, cb1);
    if (mr > 5) row_out(q, 5, c50, c51, c, ldc, m0, m1, cb0, cb1);
    if (mr > 6) row_out(q, 6, c60, c61, c, ldc, m0, m1, cb0, cb1);
    if (mr > 7) row_out(q, 7, c70, c71, c, ldc, m0, m1, cb0, cb1);
}

__attribute__((target("avx512f"), noinline)) static void kern_packed(int64_t kc, const float *a, const float *b,
                                                                     int64_t ldb, float *c, int64_t ldc, const blk *q) {
    kern_body(kc, a, NULL, b, ldb, NULL, c, ldc, q);
}

__attribute__((target("avx512f"), noinline)) static void kern_off(int64_t kc, const float *a, const float *b,
                                                                  const int32_t *koff, float *c, int64_t ldc,
                                                                  const blk *q) {
    kern_body(kc, a, NULL, b, 0, koff, c, ldc, q);
}

__attribute__((target("avx512f"), noinline)) static void kern_raw(int64_t kc, const float *const *ar, const float *b,
                                                                  int64_t ldb, float *c, int64_t ldc, const blk *q) {
    kern_body(kc, NULL, ar, b, ldb, NULL, c, ldc, q);
}

/* ==================================================================
 * Tiles
 * ================================================================== */

typedef struct {
    const kl__pgemm *g;
    int64_t mb, nb, tm, tn;
} plan;

static int64_t rup(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* Tile sizes from the shape only: up to 256 x 256, split until there are at
 * least 8 tiles (for two or more threads) while tiles stay >= 64 x 64. */
static void make_plan(plan *p) {
    const kl__pgemm *g = p->g;
    int64_t mb = KL_MIN(rup(g->M, KL__MR), 256), nb = KL_MIN(rup(g->N, KL__NR), 256);
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    for (;;) {
        int64_t tiles = ((g->M + mb - 1) / mb) * ((g->N + nb - 1) / nb);
        if (tiles >= 8 || flops < 4e6) break;
        if (nb >= 128 && nb >= mb) nb = rup(nb / 2, KL__NR);
        else if (mb >= 64) mb = rup(mb / 2, KL__MR);
        else if (nb >= 64) nb = rup(nb / 2, KL__NR);
        else break;
    }
    /* an even tile count below 16 so two threads get equal shares */
    int64_t tm = (g->M + mb - 1) / mb, tn = (g->N + nb - 1) / nb;
    if ((tm * tn) % 2 && tm * tn < 16 && flops >= 4e6) {
        int64_t nb2 = rup((g->N + tn) / (tn + 1), KL__NR);
        if (nb2 >= KL__NR && (g->N + nb2 - 1) / nb2 == tn + 1) nb = nb2;
    }
    p->mb = mb;
    p->nb = nb;
    p->tm = (g->M + mb - 1) / mb;
    p->tn = (g->N + nb - 1) / nb;
}

static void run_tile(const plan *p, int64_t t) {
    const kl__pgemm *g = p->g;
    int64_t ti = t / p->tn, tj = t % p->tn;
    int64_t i0 = ti * p->mb, i1 = KL_MIN(g->M, i0 + p->mb);
    int64_t j0 = tj * p->nb, j1 = KL_MIN(g->N, j0 + p->nb);
    blk q = {.g = g};
    for (int64_t k0 = 0; k0 < g->K || k0 == 0; k0 += KC_BLOCK) {
        int64_t kc = KL_MIN(KC_BLOCK, g->K - k0);
        q.first = k0 == 0;
        q.last = k0 + KC_BLOCK >= g->K;
        for (int64_t j = j0; j < j1; j += KL__NR) {
            const float *b;
            int64_t ldb;
            if (g->bp) {
                b = g->bp + (j / KL__NR) * g->K * KL__NR + k0 * KL__NR;
                ldb = KL__NR;
            } else {
                b = g->b + k0 * g->ldb + j;
                ldb = g->ldb;
            }
            q.j0 = j;
            q.nr = (int)KL_MIN(KL__NR, j1 - j);
            for (int64_t i = i0; i < i1; i += KL__MR) {
                q.i0 = i;
                q.mr = (int)KL_MIN(KL__MR, i1 - i);
                float *c = g->c + i * g->ldc + j;
                if (g->boff && g->ap) {
                    kern_off(kc, a_panel(g, i, k0), g->b + j, g->boff + k0, c, g->ldc,
                             &q);
                } else if (g->ap) {
                    kern_packed(kc, a_panel(g, i, k0), b, ldb, c, g->ldc, &q);
                } else {
                    const float *ar[KL__MR];
                    for (int r = 0; r < KL__MR; r++) ar[r] = g->a + (i + KL_MIN(r, q.mr - 1)) * g->lda + k0;
                    kern_raw(kc, ar, b, ldb, c, g->ldc, &q);
                }
            }
        }
    }
}

/* One k block [k0, k0 + kc) of the rectangle [i0, i1) x [j0, j1) of C, with
 * B packed for this block: panel (j - j0) / NR at bblk + that * pstride, as
 * [kc][NR] (zero-padded columns), or, bblk NULL, read in place at
 * g->b[g->boff[k] + j] (implicit-GEMM conv) or g->b[k * ldb + j] (no boff); g->ap, c, bias, res and act as
 * for kl__pgemm_run, plus column segments (g->cseg). i0 is a multiple of MR.
 * Blocks of one rectangle must be run with ascending k0. */
void kl__pgemm_kblock(const kl__pgemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k0, int64_t kc,
                      const float *bblk, int64_t pstride) {
    blk q = {.g = g, .first = k0 == 0, .last = k0 + kc >= g->K, .nseg = 1};
    for (int64_t j = j0; j < j1; j += KL__NR) {
        const float *b = bblk + (j - j0) / KL__NR * pstride;
        q.j0 = j;
        q.nr = (int)KL_MIN(KL__NR, j1 - j);
        int64_t s0 = 0;
        if (g->cseg > 0) {
            /* valid lanes [a, v) of each segment, at offset (sg - s0) * cskip */
            int64_t cv = g->cvalid > 0 ? g->cvalid : g->cseg;
            s0 = j / g->cseg;
            q.coff = s0 * g->cskip;
            q.nseg = 0;
            for (int a = 0; a < q.nr;) {
                int64_t sg = (j + a) / g->cseg;
                int b = (int)KL_MIN((int64_t)q.nr, (sg + 1) * g->cseg - j);
                int v = (int)KL_MIN((int64_t)b, sg * g->cseg + cv - j);
                if (v > a) {
                    q.sa[q.nseg] = a;
                    q.sb[q.nseg] = v;
                    q.smask[q.nseg] = (uint32_t)((v >= 32 ? 0xFFFFFFFFu : ((1u << v) - 1)) & ~((1u << a) - 1));
                    q.soff[q.nseg] = (sg - s0) * g->cskip;
                    q.nseg++;
                }
                a = b;
            }
            if (!q.nseg) continue; /* only dropped columns */
            q.segd = !(q.nseg == 1 && q.sa[0] == 0 && q.sb[0] == q.nr && q.soff[0] == 0);
        }
        for (int64_t i = i0; i < i1; i += KL__MR) {
            q.i0 = i;
            q.mr = (int)KL_MIN(KL__MR, i1 - i);
            float *c = g->c + i * g->ldc + j + q.coff;
            if (!bblk && g->boff) kern_off(kc, a_panel(g, i, k0), g->b + j, g->boff + k0, c, g->ldc, &q);
            else if (!bblk) kern_packed(kc, a_panel(g, i, k0), g->b + k0 * g->ldb + j, g->ldb, c, g->ldc, &q);
            else kern_packed(kc, a_panel(g, i, k0), b, KL__NR, c, g->ldc, &q);
        }
    }
}

static void tile_range(void *ctx, size_t b, size_t e, int chunk) {
    for (size_t t = b; t < e; t++) run_tile(ctx, (int64_t)t);
}

void kl__pgemm_run(const kl__pgemm *g, kl_pool *pool, int serial) {
    if (g->M <= 0 || g->N <= 0) return;
    plan p = {.g = g};
    make_plan(&p);
    size_t tiles = (size_t)(p.tm * p.tn);
    if (tiles == 1 || serial) tile_range(&p, 0, tiles, 0);
    else kl_pool_parallel_for(pool, tiles, 1, tile_range, &p);
}
