/* Private to the Parquet code: byte buffers, the Thrift compact protocol
 * (thrift.c), codecs, the RLE/bit-packed hybrid and the Parquet enums. */
#ifndef KEEL_PARQUET_INT_H
#define KEEL_PARQUET_INT_H

#include <stdint.h>
#include <string.h>

#include "keel/parquet.h"

#ifndef KL_PQ_VERSION
#define KL_PQ_VERSION "0"
#endif

/* ---- Parquet enums (parquet.thrift) ---- */
enum { PT_BOOLEAN, PT_INT32, PT_INT64, PT_INT96, PT_FLOAT, PT_DOUBLE, PT_BYTE_ARRAY, PT_FLBA };
enum { ENC_PLAIN = 0, ENC_PLAIN_DICTIONARY = 2, ENC_RLE = 3, ENC_BIT_PACKED = 4,
       ENC_DELTA_BINARY_PACKED = 5, ENC_DELTA_LENGTH_BYTE_ARRAY = 6, ENC_DELTA_BYTE_ARRAY = 7,
       ENC_RLE_DICTIONARY = 8, ENC_BYTE_STREAM_SPLIT = 9 };
enum { CODEC_UNCOMPRESSED, CODEC_SNAPPY, CODEC_GZIP, CODEC_LZO, CODEC_BROTLI, CODEC_LZ4,
       CODEC_ZSTD, CODEC_LZ4_RAW };
enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };
enum { REP_REQUIRED = 0, REP_OPTIONAL = 1, REP_REPEATED = 2 };
enum { CT_UTF8 = 0, CT_MAP = 1, CT_MAP_KEY_VALUE = 2, CT_LIST = 3, CT_ENUM = 4, CT_DECIMAL = 5,
       CT_DATE = 6, CT_TIME_MILLIS = 7, CT_TIME_MICROS = 8, CT_TIMESTAMP_MILLIS = 9,
       CT_TIMESTAMP_MICROS = 10, CT_UINT_8 = 11, CT_UINT_16 = 12, CT_UINT_32 = 13, CT_UINT_64 = 14,
       CT_INT_8 = 15, CT_INT_16 = 16, CT_INT_32 = 17, CT_INT_64 = 18, CT_JSON = 19, CT_BSON = 20,
       CT_INTERVAL = 21 };

/* ---- growable byte buffer (core allocator, tag dataset) ---- */
typedef struct { uint8_t *p; size_t len, cap; int failed; } pq_buf;
int kl__pq_buf_reserve(pq_buf *b, size_t extra);
void kl__pq_buf_free(pq_buf *b);
static inline int pq_buf_put(pq_buf *b, const void *d, size_t n) {
    if (b->len + n > b->cap && kl__pq_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}
static inline int pq_buf_byte(pq_buf *b, uint8_t v) { return pq_buf_put(b, &v, 1); }
void kl__pq_buf_uvarint(pq_buf *b, uint64_t v);

/* ---- Thrift compact protocol: writer ---- */
enum { TT_STOP = 0, TT_TRUE = 1, TT_FALSE = 2, TT_BYTE = 3, TT_I16 = 4, TT_I32 = 5, TT_I64 = 6,
       TT_DOUBLE = 7, TT_BINARY = 8, TT_LIST = 9, TT_SET = 10, TT_MAP = 11, TT_STRUCT = 12 };
typedef struct {
    pq_buf *b;
    int16_t last[32];
    int depth;
} kl__tw;
void kl__tw_init(kl__tw *w, pq_buf *b);
void kl__tw_field(kl__tw *w, int16_t id, int type); /* field header */
void kl__tw_i32(kl__tw *w, int16_t id, int32_t v);
void kl__tw_i64(kl__tw *w, int16_t id, int64_t v);
void kl__tw_bool(kl__tw *w, int16_t id, int v);
void kl__tw_bin(kl__tw *w, int16_t id, const void *d, size_t n);
void kl__tw_begin(kl__tw *w, int16_t id);                       /* struct field: opens a nested struct */
void kl__tw_end(kl__tw *w);                                     /* STOP of the current struct */
void kl__tw_list(kl__tw *w, int16_t id, int etype, uint32_t n); /* then n elements: */
void kl__tw_elem_i32(kl__tw *w, int64_t v);                     /* zigzag varint (i16/i32/i64) */
void kl__tw_elem_bin(kl__tw *w, const void *d, size_t n);
void kl__tw_elem_bool(kl__tw *w, int v);
void kl__tw_elem_begin(kl__tw *w); /* a struct element; close with kl__tw_end */

/* ---- Thrift compact protocol: reader ---- */
typedef struct {
    const uint8_t *p, *end;
    int err;            /* set on malformed/truncated input; all reads then return 0 */
    int depth;
} kl__tr;
/* Next field of the current struct: returns 0 at STOP (or error), else 1
 * with *type and *id. last: the struct's previous field id (start at 0). */
int kl__tr_field(kl__tr *r, int16_t *last, int *type, int16_t *id);
int64_t kl__tr_int(kl__tr *r); /* zigzag varint */
uint64_t kl__tr_uvarint(kl__tr *r);
double kl__tr_double(kl__tr *r);
int kl__tr_bin(kl__tr *r, const uint8_t **d, uint32_t *n);
int kl__tr_list(kl__tr *r, int *etype, uint32_t *n); /* list/set header */
int kl__tr_bool_elem(kl__tr *r);                     /* a bool inside a list */
void kl__tr_skip(kl__tr *r, int type);               /* any value of that type */
static inline int kl__tr_bool_field(int type) { return type == TT_TRUE; }

/* ---- codecs ---- */
/* Compresses src into out (appended). */
int kl__pq_compress(int codec, int level, const uint8_t *src, size_t n, pq_buf *out, kl_err *e);
/* Decompresses exactly dst_len bytes. */
int kl__pq_decompress(int codec, const uint8_t *src, size_t n, uint8_t *dst, size_t dst_len, kl_err *e);
/* Why keel cannot read a codec, or NULL when it can. */
const char *kl__pq_codec_unsupported(int codec);

/* ---- RLE / bit-packed hybrid ---- */
void kl__pq_rle_encode(pq_buf *b, const uint32_t *v, size_t n, int bw);
/* Decodes n values into out; returns 0 or -1 when the input is short/bad. */
int kl__pq_rle_decode(const uint8_t *p, size_t len, int bw, uint32_t *out, size_t n);
/* Same into bytes (bw <= 8; definition levels). */
int kl__pq_rle_decode_u8(const uint8_t *p, size_t len, int bw, uint8_t *out, size_t n);
static inline int pq_bit_width(uint64_t maxv) { int w = 0; while (maxv) { w++; maxv >>= 1; } return w; }

uint32_t kl__pq_crc32(const uint8_t *p, size_t n);

#endif
