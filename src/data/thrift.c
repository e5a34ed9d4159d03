/* Thrift compact protocol, hand-written: the writer appends to a pq_buf, the
 * reader walks a bounded byte range and never reads past its end (a
 * malformed input sets r->err and every later read returns zero). */
#include <stdlib.h>

#include "data/parquet_int.h"

/* ==================================================================
 * Buffers
 * ================================================================== */

int kl__pq_buf_reserve(pq_buf *b, size_t extra) {
    if (b->failed) return -1;
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < need) ncap *= 2;
    uint8_t *p = kl_mem_realloc(b->p, ncap, KL_TAG_DATASET);
    if (!p) { b->failed = 1; return -1; }
    b->p = p;
    b->cap = ncap;
    return 0;
}

void kl__pq_buf_free(pq_buf *b) {
    kl_mem_free(b->p);
    memset(b, 0, sizeof *b);
}

void kl__pq_buf_uvarint(pq_buf *b, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    while (v >= 0x80) { tmp[n++] = (uint8_t)(v | 0x80); v >>= 7; }
    tmp[n++] = (uint8_t)v;
    pq_buf_put(b, tmp, (size_t)n);
}

/* ==================================================================
 * Writer
 * ================================================================== */

static uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

void kl__tw_init(kl__tw *w, pq_buf *b) {
    w->b = b;
    w->depth = 0;
    w->last[0] = 0;
}

void kl__tw_field(kl__tw *w, int16_t id, int type) {
    int16_t d = (int16_t)(id - w->last[w->depth]);
    if (d > 0 && d <= 15) pq_buf_byte(w->b, (uint8_t)((d << 4) | type));
    else {
        pq_buf_byte(w->b, (uint8_t)type);
        kl__pq_buf_uvarint(w->b, zz(id));
    }
    w->last[w->depth] = id;
}
void kl__tw_i32(kl__tw *w, int16_t id, int32_t v) {
    kl__tw_field(w, id, TT_I32);
    kl__pq_buf_uvarint(w->b, zz(v));
}
void kl__tw_i64(kl__tw *w, int16_t id, int64_t v) {
    kl__tw_field(w, id, TT_I64);
    kl__pq_buf_uvarint(w->b, zz(v));
}
void kl__tw_bool(kl__tw *w, int16_t id, int v) { kl__tw_field(w, id, v ? TT_TRUE : TT_FALSE); }
void kl__tw_bin(kl__tw *w, int16_t id, const void *d, size_t n) {
    kl__tw_field(w, id, TT_BINARY);
    kl__tw_elem_bin(w, d, n);
}
void kl__tw_begin(kl__tw *w, int16_t id) {
    kl__tw_field(w, id, TT_STRUCT);
    kl__tw_elem_begin(w);
}
void kl__tw_elem_begin(kl__tw *w) {
    KL_ASSERT(w->depth < 31);
    w->last[++w->depth] = 0;
}
void kl__tw_end(kl__tw *w) {
    pq_buf_byte(w->b, TT_STOP);
    if (w->depth > 0) w->depth--;
}
void kl__tw_list(kl__tw *w, int16_t id, int etype, uint32_t n) {
    kl__tw_field(w, id, TT_LIST);
    if (n < 15) pq_buf_byte(w->b, (uint8_t)((n << 4) | (uint32_t)etype));
    else {
        pq_buf_byte(w->b, (uint8_t)(0xF0 | etype));
        kl__pq_buf_uvarint(w->b, n);
    }
}
void kl__tw_elem_i32(kl__tw *w, int64_t v) { kl__pq_buf_uvarint(w->b, zz(v)); }
void kl__tw_elem_bin(kl__tw *w, const void *d, size_t n) {
    kl__pq_buf_uvarint(w->b, n);
    pq_buf_put(w->b, d, n);
}
void kl__tw_elem_bool(kl__tw *w, int v) { pq_buf_byte(w->b, v ? 1 : 2); }

/* ==================================================================
 * Reader
 * ================================================================== */

uint64_t kl__tr_uvarint(kl__tr *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->err || r->p >= r->end) { r->err = 1; return 0; }
        uint8_t c = *r->p++;
        if (shift == 63 && c > 1) { r->err = 1; return 0; }
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) return v;
    }
    r->err = 1;
    return 0;
}

int64_t kl__tr_int(kl__tr *r) {
    uint64_t u = kl__tr_uvarint(r);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

double kl__tr_double(kl__tr *r) {
    double d = 0;
    if (r->err || r->end - r->p < 8) { r->err = 1; return 0; }
    memcpy(&d, r->p, 8);
    r->p += 8;
    return d;
}

int kl__tr_bin(kl__tr *r, const uint8_t **d, uint32_t *n) {
    uint64_t len = kl__tr_uvarint(r);
    if (r->err || len > (uint64_t)(r->end - r->p)) { r->err = 1; *d = NULL; *n = 0; return -1; }
    *d = r->p;
    *n = (uint32_t)len;
    r->p += len;
    return 0;
}

int kl__tr_field(kl__tr *r, int16_t *last, int *type, int16_t *id) {
    if (r->err || r->p >= r->end) { r->err = 1; return 0; }
    uint8_t h = *r->p++;
    if (h == TT_STOP) return 0;
    *type = h & 0x0F;
    int d = h >> 4;
    if (d) *id = (int16_t)(*last + d);
    else *id = (int16_t)kl__tr_int(r);
    if (r->err || *type > TT_STRUCT) { r->err = 1; return 0; }
    *last = *id;
    return 1;
}

int kl__tr_list(kl__tr *r, int *etype, uint32_t *n) {
    if (r->err || r->p >= r->end) { r->err = 1; *n = 0; return -1; }
    uint8_t h = *r->p++;
    *etype = h & 0x0F;
    uint64_t sz = h >> 4;
    if (sz == 15) sz = kl__tr_uvarint(r);
    /* every element takes at least one byte (bool and i8 one each) */
    if (r->err || sz > (uint64_t)(r->end - r->p) || *etype > TT_STRUCT) { r->err = 1; *n = 0; return -1; }
    *n = (uint32_t)sz;
    return 0;
}

int kl__tr_bool_elem(kl__tr *r) {
    if (r->err || r->p >= r->end) { r->err = 1; return 0; }
    return *r->p++ == 1;
}

void kl__tr_skip(kl__tr *r, int type) {
    if (r->err) return;
    if (++r->depth > 64) { r->err = 1; return; }
    switch (type) {
    case TT_TRUE: case TT_FALSE: break;
    case TT_BYTE: if (r->p >= r->end) r->err = 1; else r->p++; break;
    case TT_I16:
    case TT_I32:
    case TT_I64: kl__tr_uvarint(r); break;
    case TT_DOUBLE: kl__tr_double(r); break;
    case TT_BINARY: {
        const uint8_t *d;
        uint32_t n;
        kl__tr_bin(r, &d, &n);
        break;
    }
    case TT_LIST: case TT_SET: {
        int et; uint32_t n;
        if (kl__tr_list(r, &et, &n)) break;
        for (uint32_t i = 0; i < n && !r->err; i++) {
            if (et == TT_TRUE || et == TT_FALSE) kl__tr_bool_elem(r);
            else kl__tr_skip(r, et);
        }
        break;
    }
    case TT_MAP: {
        uint64_t n = kl__tr_uvarint(r);
        if (n == 0) break;
        if (r->p >= r->end || n > (uint64_t)(r->end - r->p)) { r->err = 1; break; }
        uint8_t kv = *r->p++;
        for (uint64_t i = 0; i < n && !r->err; i++) {
            kl__tr_skip(r, kv >> 4);
            kl__tr_skip(r, kv & 15);
        }
        break;
    }
    case TT_STRUCT: {
        int16_t last = 0, id; int t;
        while (kl__tr_field(r, &last, &t, &id)) kl__tr_skip(r, t);
        break;
    }
    default: r->err = 1;
    }
    r->depth--;
}
