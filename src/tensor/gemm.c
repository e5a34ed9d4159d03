/* GEMM on OpenBLAS (single-threaded inside) parallelised by keel's pool over
 * fixed-size tiles of C, batched NumPy matmul with broadcasting, and a GEMM
 * with fused bias + activation epilogue. Tiles depend only on the shapes, so
 * results are bit-identical at any thread count. */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

extern void openblas_set_num_threads(int);

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_init(void) { openblas_set_num_threads(1); }

/* ==================================================================
 * Tiling
 * ================================================================== */

/* Tiles with at most this many rows use GEMV per row. */
#define GEMV_MAX_ROWS 4
/* Problems below this many flops run as one call. */
#define GEMM_SMALL_FLOPS (1 << 20)

typedef struct {
    int ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
    int64_t mb, nb;          /* tile sizes */
    int64_t tm, tn;          /* tile counts */
    const float *bias;       /* per column (or per row when bias_rows), optional */
    int bias_rows;
    kl_act act;
} gemm_job;

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* Tile plan from the shape only (never the thread count): about 256 x 256
 * tiles (wider when M is small so each tile amortises the packing of A), split
 * evenly, and an even number of tiles for mid-sized problems so two threads
 * get equal work. */
static void gemm_plan(gemm_job *g) {
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    int64_t mt = 1, nt = 1;
    if (flops >= GEMM_SMALL_FLOPS) {
        mt = (g->M + 255) / 256;
        nt = (g->N + (g->M >= 64 ? 255 : 511)) / (g->M >= 64 ? 256 : 512);
        if (flops >= 8.0 * GEMM_SMALL_FLOPS && mt * nt < 8 && (mt * nt) % 2) {
            if (g->M >= 2 * g->N && g->M >= 16) mt++;
            else if (g->N >= 32) nt++;
            else if (g->M >= 16) mt++;
        }
    }
    g->mb = mt > 1 ? round_up((g->M + mt - 1) / mt, 8) : g->M;
    g->nb = nt > 1 ? round_up((g->N + nt - 1) / nt, 16) : g->N;
    if (g->mb < 1) g->mb = 1;
    if (g->nb < 1) g->nb = 1;
    g->tm = (g->M + g->mb - 1) / g->mb;
    g->tn = (g->N + g->nb - 1) / g->nb;
}

static void gemm_tile(const gemm_job *g, int64_t t) {
    int64_t i0 = (t / g->tn) * g->mb, j0 = (t % g->tn) * g->nb;
    int64_t m = KL_MIN(g->mb, g->M - i0), n = KL_MIN(g->nb, g->N - j0);
    const float *a = g->ta ? g->A + i0 : g->A + i0 * g->lda;
    const float *b = g->tb ? g->B + j0 * g->ldb : g->B + j0;
    float *c = g->C + i0 * g->ldc + j0;
    if (g->K == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * g->ldc + j] = g->beta == 0 ? 0.0f : g->beta * c[i * g->ldc + j];
    } else if (m <= GEMV_MAX_ROWS) {
        /* a few rows: one GEMV per row is several times faster than GEMM */
        for (int64_t i = 0; i < m; i++) {
            float *ci = c + i * g->ldc;
            const float *ai = g->ta ? a + i : a + i * g->lda;
            int inca = g->ta ? (int)g->lda : 1;
            if (g->beta == 0) memset(ci, 0, (size_t)n * sizeof(float));
            if (g->tb)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)g->K, g->alpha, b, (int)g->ldb, ai, inca,
                            g->beta, ci, 1);
            else
                cblas_sgemv(CblasRowMajor, CblasTrans, (int)g->K, (int)n, g->alpha, b, (int)g->ldb, ai, inca,
                            g->beta, ci, 1);
        }
    } else if (n == 1) {
        if (g->beta == 0)
            for (int64_t i = 0; i < m; i++) c[i * g->ldc] = 0.0f;
        int incb = g->tb ? 1 : (int)g->ldb;
        if (g->ta)
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)g->K, (int)m, g->alpha, a, (int)g->lda, b, incb, g->beta, c,
                        (int)g->ldc);
        else
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)g->K, g->alpha, a, (int)g->lda, b, incb, g->beta, c,
                        (int)g->ldc);
    } else {
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)g->K, g->alpha, a, (int)g->lda, b, (int)g->ldb, g->beta, c, (int)g->ldc);
    }
    if (g->bias || g->act.kind != KL_ACT_NONE) {
        for (int64_t i = 0; i < m; i++) {
            float *row = c + i * g->ldc;
            if (g->bias && g->bias_rows) {
                float bv = g->bias[i0 + i];
                for (int64_t j = 0; j < n; j++) row[j] += bv;
            } else if (g->bias) {
                for (int64_t j = 0; j < n; j++) row[j] += g->bias[j0 + j];
            }
            kl__act_apply_range(g->act, row, n);
        }
    }
}

static void gemm_range(void *ctx, size_t b, size_t e, int chunk) {
    for (size_t t = b; t < e; t++) gemm_tile(ctx, (int64_t)t);
}

static void gemm_run(gemm_job *g, kl_pool *pool) {
    pthread_once(&blas_once, blas_init);
    if (g->M <= 0 || g->N <= 0) return;
    gemm_plan(g);
    size_t tiles = (size_t)(g->tm * g->tn);
    if (tiles == 1) gemm_tile(g, 0);
    else kl_pool_parallel_for(pool, tiles, 1, gemm_range, g);
}

void kl_gemm_f32(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc, kl_pool *pool) {
    gemm_job g = {transA, transB, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C, 0, 0, 0, 0, NULL, 0, {KL_ACT_NONE, 0, 0}};
    gemm_run(&g, pool);
}

void kl_gemm_bias_act_f32(int transA, int transB, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                          const float *B, int64_t ldb, const float *bias, kl_act act, float *C, int64_t ldc,
                          kl_pool *pool) {
    gemm_job g = {transA, transB, M, N, K, 1.0f, 0.0f, A, B, lda, ldb, ldc, C, 0, 0, 0, 0, bias, 0, act};
    gemm_run(&g, pool);
}

void kl__gemm_ex(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float *C, int64_t ldc, const float *bias, int bias_rows, kl_act act, kl_pool *pool) {
    gemm_job g = {ta, tb, M, N, K, 1.0f, 0.0f, A, B, lda, ldb, ldc, C, 0, 0, 0, 0, bias, bias_rows, act};
    gemm_run(&g, pool);
}

/* Serial GEMM with the same tiling as kl_gemm_f32 (for callers that already
 * parallelise over an outer loop): identical results. */
void kl__gemm_serial(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int bias_rows,
                     kl_act act) {
    gemm_job g = {ta, tb, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C, 0, 0, 0, 0, bias, bias_rows, act};
    pthread_once(&blas_once, blas_init);
    if (M <= 0 || N <= 0) return;
    gemm_plan(&g);
    for (int64_t t = 0; t < g.tm * g.tn; t++) gemm_tile(&g, t);
}

/* ==================================================================
 * Packed constant B (keel's micro-kernel, pgemm.c)
 * ================================================================== */

size_t kl_gemm_packed_b_floats(int64_t K, int64_t N) {
    return kl__pgemm_ok() && K > 0 && N > 0 ? kl__pgemm_packed_b_floats(K, N) : 0;
}

void kl_gemm_pack_b(int transB, int64_t K, int64_t N, const float *B, int64_t ldb, float *dst) {
    if (transB) kl__pgemm_pack_b(K, N, B, 1, ldb, dst);
    else kl__pgemm_pack_b(K, N, B, ldb, 1, dst);
}

void kl_gemm_packed_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bp,
                        const float *bias, const float *res, kl_act act, float *C, int64_t ldc, kl_pool *pool) {
    kl__pgemm g = {.M = M, .N = N, .K = K, .a = A, .lda = lda, .bp = Bp, .c = C, .ldc = ldc, .bias = bias,
                   .res = res, .ldr = ldc, .act = act};
    kl__pgemm_run(&g, pool, 0);
}

/* ==================================================================
 * MatMul (NumPy semantics)
 * ================================================================== */

int kl_matmul_shape(int ra, const int64_t *da, int rb, const int64_t *db, int *ry, int64_t *dy, kl_err *e) {
    char s1[128], s2[128];
    if (ra < 1 || rb < 1 || ra > KL_MAX_DIMS || rb > KL_MAX_DIMS)
        return kl_err_set(e, KL_ESHAPE, "matmul: operands must have rank 1..%d (got %d and %d)", KL_MAX_DIMS, ra, rb);
    int64_t M = ra == 1 ? 1 : da[ra - 2], Ka = da[ra - 1];
    int64_t Kb = rb == 1 ? db[0] : db[rb - 2], N = rb == 1 ? 1 : db[rb - 1];
    if (Ka != Kb)
        return kl_err_set(e, KL_ESHAPE, "matmul: inner dimensions differ: %s x %s", kl_shape_str(ra, da, s1, sizeof s1),
                          kl_shape_str(rb, db, s2, sizeof s2));
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, br = KL_MAX(ba, bb);
    int64_t bd[KL_MAX_DIMS];
    for (int i = 0; i < br; i++) {
        int ia = i - (br - ba), ib = i - (br - bb);
        int64_t x = ia >= 0 ? da[ia] : 1, y = ib >= 0 ? db[ib] : 1;
        if (x != y && x != 1 && y != 1)
            return kl_err_set(e, KL_ESHAPE, "matmul: batch dimensions do not broadcast: %s x %s",
                              kl_shape_str(ra, da, s1, sizeof s1), kl_shape_str(rb, db, s2, sizeof s2));
        bd[i] = x == 1 ? y : x;
    }
    int r = br;
    for (int i = 0; i < br; i++) dy[i] = bd[i];
    if (ra > 1) dy[r++] = M;
    if (rb > 1) dy[r++] = N;
    if (r > KL_MAX_DIMS) return kl_err_set(e, KL_ESHAPE, "matmul: result rank too large");
    *ry = r;
    return KL_OK;
}

typedef struct {
    int64_t M, N, K, nbatch;
    int br;
    int64_t bd[KL_MAX_DIMS], sa[KL_MAX_DIMS], sb[KL_MAX_DIMS];  /* batch dims, strides in matrices */
    const float *a, *b;
    float *y;
} mm_ctx;

/* Small products (attention heads: 16x16x16): C = A B row by row with AVX2
 * broadcasts, K ascending for every element; no BLAS call overhead (~1 us
 * per call, 10x the arithmetic at this size). The same code on every CPU. */
#define SMALL_MM_MAX 64
static int small_mm_ok(int64_t M, int64_t N, int64_t K) {
    return N <= SMALL_MM_MAX && K <= 4 * SMALL_MM_MAX && M * N * K <= 64 * 64 * 64;
}

static void small_mm(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb,
                     float *c, int64_t ldc) {
    int64_t nfull = N / 8;
    __m256i tail = kl__tailmask(N % 8);
    for (int64_t i = 0; i < M; i++) {
        const float *ai = a + i * lda;
        float *ci = c + i * ldc;
        int64_t j = 0;
        for (; j + 32 <= N; j += 32) {
            __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int64_t k = 0; k < K; k++) {
                __m256 av = _mm256_broadcast_ss(ai + k);
                const float *bk = b + k * ldb + j;
                c0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(bk), c0);
                c1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(bk + 8), c1);
                c2 = _mm256_fmadd_ps(av, _mm256_loadu_ps(bk + 16), c2);
                c3 = _mm256_fmadd_ps(av, _mm256_loadu_ps(bk + 24), c3);
            }
            _mm256_storeu_ps(ci + j, c0);
            _mm256_storeu_ps(ci + j + 8, c1);
            _mm256_storeu_ps(ci + j + 16, c2);
            _mm256_storeu_ps(ci + j + 24, c3);
        }
        for (; j + 16 <= N; j += 16) {
            __m256 c0 = _mm256_setzero_ps(), c1 = c0;
            for (int64_t k = 0; k < K; k++) {
                __m256 av = _mm256_broadcast_ss(ai + k);
                const float *bk = b + k * ldb + j;
                c0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(bk), c0);
                c1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(bk + 8), c1);
            }
            _mm256_storeu_ps(ci + j, c0);
            _mm256_storeu_ps(ci + j + 8, c1);
        }
        for (; j < N; j += 8) {
            int full = j / 8 < nfull;
            __m256 c0 = _mm256_setzero_ps();
            for (int64_t k = 0; k < K; k++) {
                const float *bk = b + k * ldb + j;
                c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(ai + k), full ? _mm256_loadu_ps(bk) : _mm256_maskload_ps(bk, tail),
                                     c0);
            }
            if (full) _mm256_storeu_ps(ci + j, c0);
            else _mm256_maskstore_ps(ci + j, tail, c0);
        }
    }
}

/* AVX-512 twin for N a multiple of 16 (one vector per 16 columns): the same
 * k-ascending FMA per element, so the same results as small_mm. */
__attribute__((target("avx512f"))) static void small_mm16(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                                                          const float *b, int64_t ldb, float *c, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) {
        const float *ai = a + i * lda;
        float *ci = c + i * ldc;
        int64_t j = 0;
        for (; j + 32 <= N; j += 32) {
            __m512 c0 = _mm512_setzero_ps(), c1 = c0;
            for (int64_t k = 0; k < K; k++) {
                __m512 av = _mm512_set1_ps(ai[k]);
                c0 = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * ldb + j), c0);
                c1 = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * ldb + j + 16), c1);
            }
            _mm512_storeu_ps(ci + j, c0);
            _mm512_storeu_ps(ci + j + 16, c1);
        }
        for (; j < N; j += 16) {
            __m512 c0 = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k++) c0 = _mm512_fmadd_ps(_mm512_set1_ps(ai[k]), _mm512_loadu_ps(b + k * ldb + j), c0);
            _mm512_storeu_ps(ci + j, c0);
        }
    }
}

static void mm_range(void *vc, size_t b0, size_t b1, int chunk) {
    mm_ctx *c = vc;
    int small = small_mm_ok(c->M, c->N, c->K);
    int wide = small && c->N % 16 == 0 && kl__pgemm_ok();
    for (size_t bi = b0; bi < b1; bi++) {
        int64_t rem = (int64_t)bi, oa = 0, ob = 0;
        for (int i = c->br - 1; i >= 0; i--) {
            int64_t ix = rem % c->bd[i];
            rem /= c->bd[i];
            oa += ix * c->sa[i];
            ob += ix * c->sb[i];
        }
        if (wide) {
            small_mm16(c->M, c->N, c->K, c->a + oa * c->M * c->K, c->K, c->b + ob * c->K * c->N, c->N,
                       c->y + (int64_t)bi * c->M * c->N, c->N);
            continue;
        }
        if (small) {
            small_mm(c->M, c->N, c->K, c->a + oa * c->M * c->K, c->K, c->b + ob * c->K * c->N, c->N,
                     c->y + (int64_t)bi * c->M * c->N, c->N);
            continue;
        }
        kl__gemm_serial(0, 0, c->M, c->N, c->K, 1.0f, c->a + oa * c->M * c->K, c->K, c->b + ob * c->K * c->N, c->N,
                        0.0f, c->y + (int64_t)bi * c->M * c->N, c->N, NULL, 0, (kl_act){KL_ACT_NONE, 0, 0});
    }
}

int kl_matmul_f32(int ra, const int64_t *da, const float *a, int rb, const int64_t *db, const float *b, float *y,
                  kl_pool *pool, kl_err *e) {
    int ry;
    int64_t dy[KL_MAX_DIMS];
    int rc = kl_matmul_shape(ra, da, rb, db, &ry, dy, e);
    if (rc) return rc;
    mm_ctx c;
    memset(&c, 0, sizeof c);
    c.M = ra == 1 ? 1 : da[ra - 2];
    c.K = da[ra - 1];
    c.N = rb == 1 ? 1 : db[rb - 1];
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
    c.br = KL_MAX(ba, bb);
    c.nbatch = 1;
    int64_t sa = 1, sb = 1;
    for (int i = c.br - 1; i >= 0; i--) {
        int ia = i - (c.br - ba), ib = i - (c.br - bb);
        int64_t x = ia >= 0 ? da[ia] : 1, z = ib >= 0 ? db[ib] : 1;
        c.bd[i] = x == 1 ? z : x;
        c.sa[i] = x == 1 ? 0 : sa;
        c.sb[i] = z == 1 ? 0 : sb;
        sa *= x;
        sb *= z;
        c.nbatch *= c.bd[i];
    }
    c.a = a; c.b = b; c.y = y;
    if (c.nbatch == 0 || c.M == 0 || c.N == 0) return KL_OK;
    /* B shared by all batches and A contiguous: one big GEMM (M*batch rows). */
    int b_shared = 1;
    for (int i = 0; i < c.br; i++) if (c.sb[i] != 0) b_shared = 0;
    int a_full = 1;
    for (int i = 0; i < c.br; i++) if (c.sa[i] == 0 && c.bd[i] != 1) a_full = 0;
    if (b_shared && a_full) {
        kl_gemm_f32(0, 0, c.M * c.nbatch, c.N, c.K, 1.0f, a, c.K, b, c.N, 0.0f, y, c.N, pool);
        return KL_OK;
    }
    /* few large products: batches in turn, tiles in parallel; otherwise batches in
     * parallel. Both run the same tiles, so the results are identical. */
    if (c.nbatch < 4 && 2.0 * (double)c.M * (double)c.N * (double)c.K >= 8.0 * GEMM_SMALL_FLOPS) {
        for (int64_t bi = 0; bi < c.nbatch; bi++) {
            int64_t rem = bi, oa = 0, ob = 0;
            for (int i = c.br - 1; i >= 0; i--) {
                int64_t ix = rem % c.bd[i];
                rem /= c.bd[i];
                oa += ix * c.sa[i];
                ob += ix * c.sb[i];
            }
            kl_gemm_f32(0, 0, c.M, c.N, c.K, 1.0f, a + oa * c.M * c.K, c.K, b + ob * c.K * c.N, c.N, 0.0f,
                        y + bi * c.M * c.N, c.N, pool);
        }
        return KL_OK;
    }
    /* batches in fixed blocks of about 64k flops (small products) */
    size_t grain = small_mm_ok(c.M, c.N, c.K) ? (size_t)KL_MAX(1, 65536 / KL_MAX(1, 2 * c.M * c.N * c.K)) : 1;
    kl_pool_parallel_for(pool, (size_t)c.nbatch, grain, mm_range, &c);
    return KL_OK;
}
