/* Test helper shared by the Parquet and training-data unit tests: rewrites
 * the footer's FileMetaData.num_rows (Thrift compact field 3, a zigzag
 * varint) of a Parquet file, keeping the row groups as they are, to build a
 * file whose footer disagrees with its row groups. */
#ifndef KEEL_TEST_PQ_FOOTER_H
#define KEEL_TEST_PQ_FOOTER_H
#include <stdlib.h>
#include <string.h>

#include "data/parquet_int.h"
#include "keel/core.h"

/* Into buf (len bytes, the whole file): a new file in *out (malloc'ed) with
 * num_rows = rows. Returns 0, or -1 when the footer has no num_rows. */
static int kt_pq_patch_num_rows(const char *buf, size_t len, int64_t rows, char **out, size_t *out_len) {
    uint32_t flen;
    memcpy(&flen, buf + len - 8, 4);
    size_t fs = len - 8 - flen;
    kl__tr r = {(const uint8_t *)buf + fs, (const uint8_t *)buf + len - 8, 0, 0};
    int16_t last = 0, id;
    int t;
    const uint8_t *va = NULL, *vb = NULL;
    while (kl__tr_field(&r, &last, &t, &id)) {
        if (id == 3 && t == TT_I64) {
            va = r.p;
            (void)kl__tr_int(&r);
            vb = r.p;
        } else kl__tr_skip(&r, t);
    }
    if (!va || r.err) return -1;
    uint8_t v[10];
    size_t vn = 0;
    uint64_t z = ((uint64_t)rows << 1) ^ (uint64_t)(rows >> 63);
    do { v[vn++] = (uint8_t)((z & 0x7f) | (z > 0x7f ? 0x80 : 0)); z >>= 7; } while (z);
    size_t a = (size_t)((const char *)va - buf), b = (size_t)((const char *)vb - buf);
    size_t n = a + vn + (len - 8 - b) + 8;
    char *o = malloc(n);
    if (!o) return -1;
    memcpy(o, buf, a);
    memcpy(o + a, v, vn);
    memcpy(o + a + vn, buf + b, len - 8 - b);
    uint32_t nfl = (uint32_t)(n - 8 - fs);
    memcpy(o + n - 8, &nfl, 4);
    memcpy(o + n - 4, "PAR1", 4);
    *out = o;
    *out_len = n;
    return 0;
}

/* The same on a file, in place. */
static int kt_pq_set_num_rows(const char *path, int64_t rows) {
    char *buf = NULL, *o = NULL;
    size_t len = 0, n = 0;
    kl_err e = {0};
    if (kl_read_file(path, &buf, &len, &e)) return -1;
    int rc = kt_pq_patch_num_rows(buf, len, rows, &o, &n);
    kl_mem_free(buf);
    if (!rc) rc = kl_write_file_atomic(path, o, n, &e) ? -1 : 0;
    free(o);
    return rc;
}
#endif
