/* Int8 GEMM: C (M x N, int32) = (A - za) (B - zb), A uint8/int8 (M x K,
 * row-major), B int8/uint8 packed once (weights), for the quantized ONNX ops
 * (QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger, the QDQ fusion).
 *
 * Every product is uint8 x int8: int8 A is shifted by +128 and uint8 B by
 * -128 (zero points with them), which the ISA's byte dot products need:
 *   - AVX-512 VNNI: vpdpbusd, 8 rows x 32 columns of C in 16 zmm
 *     accumulators, 4 k values per instruction;
 *   - AVX2: vpmaddubsw + vpmaddwd. vpmaddubsw saturates its pair sums to
 *     int16 (255 * 127 * 2 does not fit), so A is split into its low 7 bits
 *     and its top bit (two pair sums that always fit, weighted 1 and 128 by
 *     vpmaddwd): exact, where ONNX Runtime's AVX2 path needs reduce_range;
 *   - scalar code otherwise.
 * The raw dot products are corrected for the zero points with row sums of A
 * and column sums of B: sum (a - za)(b - zb) = sum ab - zb sum a - za sum b
 * + K za zb. Integer arithmetic, so every level, tiling and thread count
 * gives the same bits; the epilogue (bias, requantization, float output) is
 * the same float operations at every level (kl_requant1).
 *
 * Packed B: a 64-byte header, the column sums (int32, padded to panels),
 * then panels of 32 columns, [Kp/4][32][4] int8 (Kp = K rounded up to 4,
 * zero padding: padded k and columns contribute nothing). */
#include "keel/tensor.h"
#include "tensor_int.h"

#include <immintrin.h>
#include <string.h>

#define QNR 32  /* columns per panel */
#define QMR 8   /* rows per micro block */
#define QTM 64  /* rows per tile */
#define QTN 128 /* columns per tile */

typedef struct {
    int64_t K, N, Kp, np;
    int32_t b_unsigned;
    int32_t pad_[7];
} qb_hdr;

static int64_t round4(int64_t k) { return (k + 3) / 4 * 4; }

size_t kl_qgemm_packed_bytes(int64_t K, int64_t N) {
    int64_t np = (N + QNR - 1) / QNR;
    return sizeof(qb_hdr) + (size_t)(np * QNR) * 4 + (size_t)(np * round4(K) * QNR);
}

static const int32_t *colsums(const void *pb) { return (const int32_t *)((const char *)pb + sizeof(qb_hdr)); }
static const int8_t *panel(const void *pb, int64_t q) {
    const qb_hdr *h = pb;
    return (const int8_t *)((const char *)pb + sizeof(qb_hdr) + (size_t)(h->np * QNR) * 4) + q * h->Kp * QNR;
}

void kl_qgemm_pack_b(int64_t K, int64_t N, const void *b, int b_unsigned, int64_t rs, int64_t cs, void *dst) {
    qb_hdr *h = dst;
    memset(h, 0, sizeof *h);
    h->K = K, h->N = N, h->Kp = round4(K), h->np = (N + QNR - 1) / QNR, h->b_unsigned = b_unsigned;
    int32_t *sum = (int32_t *)((char *)dst + sizeof(qb_hdr));
    memset(sum, 0, (size_t)(h->np * QNR) * 4);
    for (int64_t q = 0; q < h->np; q++) {
        int8_t *d = (int8_t *)panel(dst, q);
        memset(d, 0, (size_t)(h->Kp * QNR));
        for (int64_t j = 0; j < QNR && q * QNR + j < N; j++) {
            int64_t n = q * QNR + j;
            int32_t s = 0;
            for (int64_t k = 0; k < K; k++) {
                int v = b_unsigned ? (int)((const uint8_t *)b)[k * rs + n * cs] - 128
                                   : (int)((const int8_t *)b)[k * rs + n * cs];
                d[(k / 4) * QNR * 4 + j * 4 + k % 4] = (int8_t)v;
                s += v;
            }
            sum[n] = s;
        }
    }
}

/* ==================================================================
 * Dispatch
 * ================================================================== */

int kl_qgemm_level(void) {
    static int vnni = -1;
    int v = __atomic_load_n(&vnni, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl");
        __atomic_store_n(&vnni, v, __ATOMIC_RELAXED);
    }
    int lv = kl__isa_level(); /* 2 AVX-512F (allowed), 1 AVX2, 0 */
    return lv == 2 && v ? 2 : lv >= 1 ? 1 : 0;
}

/* ==================================================================
 * Micro-kernels: raw dot products of rows a[0..mr) (stride lda, Kp bytes
 * readable) with one panel, into t[QMR][QNR]
 * ================================================================== */

static void kern_scalar(const uint8_t *a, int64_t lda, int mr, const int8_t *p, int64_t Kp, int32_t t[QMR][QNR]) {
    for (int r = 0; r < mr; r++) {
        const uint8_t *ar = a + r * lda;
        for (int j = 0; j < QNR; j++) t[r][j] = 0;
        for (int64_t k4 = 0; k4 < Kp / 4; k4++) {
            const int8_t *pk = p + k4 * QNR * 4;
            for (int j = 0; j < QNR; j++) {
                int32_t s = 0;
                for (int u = 0; u < 4; u++) s += (int32_t)ar[k4 * 4 + u] * pk[j * 4 + u];
                t[r][j] += s;
            }
        }
    }
}

/* Two rows of the AVX2 kernel: a's low 7 bits and top bit (broadcast) */
__attribute__((target("avx2"), always_inline)) static inline void
avx2_row(__m256i *acc, uint32_t aw, __m256i b0, __m256i b1, __m256i b2, __m256i b3, __m256i one, __m256i w128) {
    __m256i lo = _mm256_set1_epi32((int)(aw & 0x7f7f7f7fu)), hi = _mm256_set1_epi32((int)((aw >> 7) & 0x01010101u));
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b0), one));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b1), one));
    acc[2] = _mm256_add_epi32(acc[2], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b2), one));
    acc[3] = _mm256_add_epi32(acc[3], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b3), one));
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b0), w128));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b1), w128));
    acc[2] = _mm256_add_epi32(acc[2], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b2), w128));
    acc[3] = _mm256_add_epi32(acc[3], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b3), w128));
}

__attribute__((target("avx2"))) static void kern_avx2(const uint8_t *a, int64_t lda, int mr, const int8_t *p,
                                                      int64_t Kp, int32_t t[QMR][QNR]) {
    const __m256i one = _mm256_set1_epi16(1), w128 = _mm256_set1_epi16(128);
    for (int r = 0; r < mr; r += 2) {
        int two = r + 1 < mr;
        const uint8_t *a0 = a + r * lda, *a1 = two ? a0 + lda : a0;
        __m256i c0[4], c1[4];
        for (int v = 0; v < 4; v++) c0[v] = c1[v] = _mm256_setzero_si256();
        for (int64_t k4 = 0; k4 < Kp / 4; k4++) {
            const int8_t *pk = p + k4 * QNR * 4;
            __m256i b0 = _mm256_loadu_si256((const __m256i *)pk), b1 = _mm256_loadu_si256((const __m256i *)(pk + 32));
            __m256i b2 = _mm256_loadu_si256((const __m256i *)(pk + 64)),
                    b3 = _mm256_loadu_si256((const __m256i *)(pk + 96));
            uint32_t w0, w1;
            memcpy(&w0, a0 + k4 * 4, 4);
            memcpy(&w1, a1 + k4 * 4, 4);
            avx2_row(c0, w0, b0, b1, b2, b3, one, w128);
            avx2_row(c1, w1, b0, b1, b2, b3, one, w128);
        }
        for (int v = 0; v < 4; v++) {
            _mm256_storeu_si256((__m256i *)&t[r][v * 8], c0[v]);
            if (two) _mm256_storeu_si256((__m256i *)&t[r + 1][v * 8], c1[v]);
        }
    }
}

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

VNNI_TARGET static void kern_vnni(const uint8_t *a, int64_t lda, int mr, const int8_t *p, int64_t Kp,
                                  int32_t t[QMR][QNR]) {
    /* 16 named accumulators: rows r0..r7, column halves h0/h1 */
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
            c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    const uint8_t *a0 = a, *a1 = a + (1 < mr ? 1 : 0) * lda, *a2 = a + (2 < mr ? 2 : 0) * lda,
                  *a3 = a + (3 < mr ? 3 : 0) * lda, *a4 = a + (4 < mr ? 4 : 0) * lda, *a5 = a + (5 < mr ? 5 : 0) * lda,
                  *a6 = a + (6 < mr ? 6 : 0) * lda, *a7 = a + (7 < mr ? 7 : 0) * lda;
    int64_t n4 = Kp / 4;
    for (int64_t k4 = 0; k4 < n4; k4++, p += QNR * 4) {
        __m512i b0 = _mm512_loadu_si512(p), b1 = _mm512_loadu_si512(p + 64), av;
        int64_t o = k4 * 4;
#define VNNI_ROW(r)                                                     \
    av = _mm512_set1_epi32(*(const int32_t *)(const void *)(a##r + o)); \
    c##r##0 = _mm512_dpbusd_epi32(c##r##0, av, b0);                     \
    c##r##1 = _mm512_dpbusd_epi32(c##r##1, av, b1);
        VNNI_ROW(0)
        VNNI_ROW(1)
        VNNI_ROW(2)
        VNNI_ROW(3)
        VNNI_ROW(4)
        VNNI_ROW(5)
        VNNI_ROW(6)
        VNNI_ROW(7)
#undef VNNI_ROW
    }
    __m512i out[QMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                           {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
    for (int r = 0; r < mr; r++) {
        _mm512_storeu_si512(&t[r][0], out[r][0]);
        _mm512_storeu_si512(&t[r][16], out[r][1]);
    }
}

/* ==================================================================
 * Driver: fixed tiles of QTM rows x QTN columns
 * ================================================================== */

typedef struct {
    int64_t M, N, K, Kp, lda;
    const uint8_t *a;      /* uint8, Kp readable per row */
    const int32_t *rowsum; /* M, or NULL when every zb is 0 */
    const int32_t *zb;     /* per padded column, shifted to int8 */
    int32_t za;            /* shifted to uint8 */
    const void *pb;
    const kl_qgemm_out *o;
    int level;
    int64_t tiles_n, tiles;
    int64_t next; /* the next unclaimed tile */
} qrun;

/* The corrected accumulator + bias of row m, column n from raw dot t. */
static inline int32_t fix1(const qrun *g, const int32_t *cs, int64_t m, int64_t n, int32_t t) {
    uint32_t v =
        (uint32_t)t - (uint32_t)g->za * (uint32_t)cs[n] + (uint32_t)g->K * (uint32_t)g->za * (uint32_t)g->zb[n];
    if (g->rowsum) v -= (uint32_t)g->zb[n] * (uint32_t)g->rowsum[m];
    if (g->o->bias) v += (uint32_t)g->o->bias[n];
    return (int32_t)v;
}

/* The element offset of row m (row segments: see kl_qgemm_out). */
static inline int64_t row_off(const kl_qgemm_out *o, int64_t m) {
    return o->rseg > 0 ? m / o->rseg * o->rskip + m % o->rseg * o->ysm : m * o->ysm;
}

/* Stores rows m0.. (mr) x columns n0.. (nr) of raw dots t through g->o. */
static void finish(const qrun *g, int64_t m0, int mr, int64_t n0, int nr, int32_t t[QMR][QNR]) {
    const kl_qgemm_out *o = g->o;
    const int32_t *cs = colsums(g->pb);
    for (int r = 0; r < mr; r++) {
        int64_t m = m0 + r;
        for (int j = 0; j < nr; j++) {
            int64_t n = n0 + j;
            int32_t v = fix1(g, cs, m, n, t[r][j]);
            float mult = o->mult ? o->mult[o->mult_per_col ? n : 0] : 1.0f;
            int64_t at = row_off(o, m) + n * o->ysn;
            if (o->c) o->c[at] = v;
            else if (o->yf) o->yf[at] = (float)v * mult + (o->fbias ? o->fbias[n] : 0.0f);
            else {
                int32_t q = kl_requant1(v, mult, o->yzp, o->lo, o->hi);
                if (o->ydt == KL_I8) ((int8_t *)o->y)[at] = (int8_t)q;
                else ((uint8_t *)o->y)[at] = (uint8_t)q;
            }
        }
    }
}

/* The AVX-512 epilogue of a full-width row block with byte output along
 * columns (ysn == 1) or int32/float output: the same operations as finish. */
/* Eight rows of 16 bytes (q[r]: columns nb.. of row m0 + r) stored
 * column by column (8 consecutive bytes per column at y + col * ysn + m0):
 * an 8 x 16 byte transpose in three unpack levels. */
VNNI_TARGET static void store_cols8(const __m128i q[8], uint8_t *y, int64_t ysn, int cnt) {
    __m128i t[8], u[8], w[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm_unpacklo_epi8(q[2 * i], q[2 * i + 1]);
        t[2 * i + 1] = _mm_unpackhi_epi8(q[2 * i], q[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) { /* rows 4h..4h+3 */
        __m128i *a = t + 4 * h;
        u[4 * h + 0] = _mm_unpacklo_epi16(a[0], a[2]); /* columns 0-3 */
        u[4 * h + 1] = _mm_unpackhi_epi16(a[0], a[2]); /* 4-7 */
        u[4 * h + 2] = _mm_unpacklo_epi16(a[1], a[3]); /* 8-11 */
        u[4 * h + 3] = _mm_unpackhi_epi16(a[1], a[3]); /* 12-15 */
    }
    for (int i = 0; i < 4; i++) {
        w[2 * i] = _mm_unpacklo_epi32(u[i], u[4 + i]);     /* columns 4i, 4i+1 */
        w[2 * i + 1] = _mm_unpackhi_epi32(u[i], u[4 + i]); /* 4i+2, 4i+3 */
    }
    for (int j = 0; j < cnt; j++) {
        __m128i v = w[j / 2];
        if (j & 1) v = _mm_unpackhi_epi64(v, v);
        _mm_storel_epi64((__m128i *)(void *)(y + j * ysn), v);
    }
}

VNNI_TARGET static int finish_vnni(const qrun *g, int64_t m0, int mr, int64_t n0, int nr, int32_t t[QMR][QNR]) {
    const kl_qgemm_out *o = g->o;
    /* rows contiguous along columns, or (bytes, a full block) along rows */
    int cols8 = o->ysm == 1 && o->y && !o->c && !o->yf && mr == QMR && (!o->rseg || m0 % o->rseg + QMR <= o->rseg);
    if (o->ysn != 1 && !cols8) return 0;
    const int32_t *cs = colsums(g->pb);
    for (int h = 0; h < 2; h++) {
        int64_t nb = n0 + h * 16;
        int cnt = nr - h * 16;
        if (cnt <= 0) break;
        __mmask16 mk = cnt >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cnt) - 1);
        __m512i zb = _mm512_loadu_si512(g->zb + nb), csv = _mm512_maskz_loadu_epi32(mk, cs + nb);
        __m512i base =
            _mm512_sub_epi32(_mm512_mullo_epi32(_mm512_set1_epi32((int32_t)((uint32_t)g->K * (uint32_t)g->za)), zb),
                             _mm512_mullo_epi32(_mm512_set1_epi32(g->za), csv));
        if (o->bias) base = _mm512_add_epi32(base, _mm512_maskz_loadu_epi32(mk, o->bias + nb));
        __m512 mult = o->mult ? (o->mult_per_col ? _mm512_maskz_loadu_ps(mk, o->mult + nb) : _mm512_set1_ps(o->mult[0]))
                              : _mm512_set1_ps(1.0f);
        __m512 fb = o->fbias ? _mm512_maskz_loadu_ps(mk, o->fbias + nb) : _mm512_setzero_ps();
        __m512 zp = _mm512_set1_ps((float)o->yzp), lo = _mm512_set1_ps((float)o->lo), hi = _mm512_set1_ps((float)o->hi);
        __m128i qr[QMR];
        for (int r = 0; r < mr; r++) {
            int64_t m = m0 + r;
            __m512i v = _mm512_add_epi32(_mm512_loadu_si512(&t[r][h * 16]), base);
            if (g->rowsum) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zb, _mm512_set1_epi32(g->rowsum[m])));
            if (o->c) {
                _mm512_mask_storeu_epi32(o->c + row_off(o, m) + nb, mk, v);
                continue;
            }
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), mult);
            if (o->yf) {
                _mm512_mask_storeu_ps(o->yf + row_off(o, m) + nb, mk, _mm512_add_ps(f, fb));
                continue;
            }
            f = _mm512_add_ps(_mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zp);
            f = _mm512_min_ps(_mm512_max_ps(f, lo), hi); /* NaN -> lo (max returns its second operand) */
            __m128i q = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(f));
            if (cols8) {
                qr[r] = q;
                continue;
            }
            if (o->ydt == KL_I8) _mm_mask_storeu_epi8((int8_t *)o->y + row_off(o, m) + nb, mk, q);
            else _mm_mask_storeu_epi8((uint8_t *)o->y + row_off(o, m) + nb, mk, q);
        }
        if (cols8) store_cols8(qr, (uint8_t *)o->y + nb * o->ysn + row_off(o, m0), o->ysn, KL_MIN(cnt, 16));
    }
    return 1;
}

static void tile(void *ctx, size_t b, size_t e, int chunk) {
    (void)chunk;
    const qrun *g = ctx;
    for (size_t it = b; it < e; it++) {
        int64_t tm = (int64_t)it / g->tiles_n, tn = (int64_t)it % g->tiles_n;
        int64_t m1 = KL_MIN(g->M, (tm + 1) * QTM), n1 = KL_MIN(g->N, (tn + 1) * QTN);
        for (int64_t n0 = tn * QTN; n0 < n1; n0 += QNR) {
            const int8_t *p = panel(g->pb, n0 / QNR);
            int nr = (int)KL_MIN(QNR, n1 - n0);
            for (int64_t m0 = tm * QTM; m0 < m1; m0 += QMR) {
                int mr = (int)KL_MIN(QMR, m1 - m0);
                int32_t t[QMR][QNR];
                const uint8_t *a = g->a + m0 * g->lda;
                if (g->level == 2) kern_vnni(a, g->lda, mr, p, g->Kp, t);
                else if (g->level == 1) kern_avx2(a, g->lda, mr, p, g->Kp, t);
                else kern_scalar(a, g->lda, mr, p, g->Kp, t);
                if (g->level < 2 || !finish_vnni(g, m0, mr, n0, nr, t)) finish(g, m0, mr, n0, nr, t);
            }
        }
    }
}

/* Each worker claims tiles from a counter until none are left: a worker
 * slowed down (a busy core) takes fewer. Every tile is computed whole by
 * one worker, so the results do not depend on who took which. */
static void claim_tiles(void *ctx, size_t b, size_t e, int chunk) {
    (void)b, (void)e, (void)chunk;
    qrun *g = ctx;
    for (;;) {
        int64_t it = __atomic_fetch_add(&g->next, 1, __ATOMIC_RELAXED);
        if (it >= g->tiles) break;
        tile(g, (size_t)it, (size_t)it + 1, 0);
    }
}

static int32_t zb_at(const void *zb, int per_col, int64_t n, int b_unsigned) {
    if (!zb) return b_unsigned ? -128 : 0;
    int64_t i = per_col ? n : 0;
    return b_unsigned ? (int32_t)((const uint8_t *)zb)[i] - 128 : (int32_t)((const int8_t *)zb)[i];
}

int kl__qgemm(int64_t M, int64_t N, int64_t K, const void *a, int a_unsigned, int64_t lda, int a_padded, int32_t za,
              const void *packed_b, const void *zb, int zb_per_col, const kl_qgemm_out *o, kl_pool *pool, kl_err *e) {
    const qb_hdr *h = packed_b;
    KL_ASSERT(h->K == K && h->N == N);
    if (M <= 0 || N <= 0) return KL_OK;
    qrun g = {M, N, K, h->Kp, lda, a, NULL, NULL, a_unsigned ? za : za + 128, packed_b, o, kl_qgemm_level(), 0, 0, 0};
    int copy = !a_unsigned || lda % 4 || (K % 4 && !a_padded);
    int64_t Npad = h->np * QNR;
    size_t abytes = copy ? (size_t)(M * h->Kp) : 0;
    char *buf = kl_mem_alloc_e(abytes + (size_t)(Npad + M) * 4 + 64, KL_TAG_WORKSPACE, e);
    if (!buf) return KL_ENOMEM;
    int32_t *zbv = (int32_t *)buf, *rs = zbv + Npad;
    int any_zb = 0;
    for (int64_t n = 0; n < Npad; n++) {
        zbv[n] = n < N ? zb_at(zb, zb_per_col, n, h->b_unsigned) : 0;
        any_zb |= zbv[n] != 0;
    }
    g.zb = zbv;
    if (copy) {
        uint8_t *ac = (uint8_t *)(rs + M);
        uint8_t flip = a_unsigned ? 0 : 0x80;
        for (int64_t m = 0; m < M; m++) {
            const uint8_t *src = (const uint8_t *)a + m * lda;
            uint8_t *d = ac + m * h->Kp;
            for (int64_t k = 0; k < K; k++) d[k] = src[k] ^ flip;
            for (int64_t k = K; k < h->Kp; k++) d[k] = 0;
        }
        g.a = ac, g.lda = h->Kp;
    }
    if (any_zb) {
        for (int64_t m = 0; m < M; m++) {
            const uint8_t *r = g.a + m * g.lda;
            int32_t s = 0;
            for (int64_t k = 0; k < K; k++) s += r[k];
            rs[m] = s;
        }
        g.rowsum = rs;
    }
    g.tiles_n = (N + QTN - 1) / QTN;
    int64_t tiles = (M + QTM - 1) / QTM * g.tiles_n;
    g.tiles = tiles, g.next = 0;
    kl_pool_parallel_for(pool, (size_t)kl_pool_chunks(pool, (size_t)tiles, 1), 1, claim_tiles, &g);
    kl_mem_free(buf);
    return KL_OK;
}

int kl_qgemm(int64_t M, int64_t N, int64_t K, const void *a, int a_unsigned, int64_t lda, int32_t za,
             const void *packed_b, const void *zb, int zb_per_col, const kl_qgemm_out *o, kl_pool *pool, kl_err *e) {
    return kl__qgemm(M, N, K, a, a_unsigned, lda, 0, za, packed_b, zb, zb_per_col, o, pool, e);
}

void kl_qgemm_row_zp(int64_t M, int64_t N, int64_t K, const void *b, int b_unsigned, const void *zb, int zb_per_col,
                     const void *za, int za_unsigned, int32_t *c) {
    for (int64_t n = 0; n < N; n++) {
        int32_t s = 0, z = zb_at(zb, zb_per_col, n, 0);
        if (zb && b_unsigned) z = ((const uint8_t *)zb)[zb_per_col ? n : 0];
        for (int64_t k = 0; k < K; k++)
            s += (b_unsigned ? (int32_t)((const uint8_t *)b)[k * N + n] : (int32_t)((const int8_t *)b)[k * N + n]) - z;
        for (int64_t m = 0; m < M; m++) {
            int32_t a = za_unsigned ? ((const uint8_t *)za)[m] : ((const int8_t *)za)[m];
            c[m * N + n] = (int32_t)((uint32_t)c[m * N + n] - (uint32_t)a * (uint32_t)s);
        }
    }
}
