/* Unit tests of kl_tensor basics: dtypes, f16/bf16, creation, views
 * (slice/transpose/reshape), contiguous copies and .npy round trips/errors. */
#include "../harness.h"
#include "tt.h"

#include <stdio.h>
#include <unistd.h>

KL_TEST(tensor_dtype_names) {
    kl_dtype d;
    KT_EQ_INT(kl_dtype_size(KL_F32), 4);
    KT_EQ_INT(kl_dtype_size(KL_BF16), 2);
    KT_EQ_INT(kl_dtype_size(KL_BOOL), 1);
    KT_EQ_STR(kl_dtype_name(KL_I64), "int64");
    KT_EQ_INT(kl_dtype_parse("float32", &d), KL_OK);
    KT_EQ_INT(d, KL_F32);
    KT_EQ_INT(kl_dtype_parse("i64", &d), KL_OK);
    KT_EQ_INT(d, KL_I64);
    KT_EQ_INT(kl_dtype_parse("bf16", &d), KL_OK);
    KT_EQ_INT(d, KL_BF16);
    KT_EQ_INT(kl_dtype_parse("float128", &d), KL_EINVAL);
    KT_CHECK(kl_dtype_is_float(KL_F16) && !kl_dtype_is_float(KL_I8));
    KT_CHECK(kl_dtype_is_int(KL_U64) && !kl_dtype_is_int(KL_BOOL));
}

KL_TEST(tensor_f16_bf16) {
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f, 1e6f, INFINITY};
    for (size_t i = 0; i < KL_ARRAY_LEN(vals); i++) {
        float r = kl_f16_to_f32(kl_f32_to_f16(vals[i]));
        if (fabsf(vals[i]) <= 65504.0f) KT_NEAR(r, vals[i], fabsf(vals[i]) * 1e-3 + 1e-7);
        else KT_CHECK(isinf(r));
        float rb = kl_bf16_to_f32(kl_f32_to_bf16(vals[i]));
        if (!isinf(vals[i])) KT_NEAR(rb, vals[i], fabsf(vals[i]) * 8e-3);
    }
    KT_EQ_INT(kl_f32_to_f16(1.0f), 0x3c00);
    KT_EQ_INT(kl_f32_to_bf16(1.0f), 0x3f80);
    /* round to nearest even: 1 + 2^-11 is a tie between 1 and 1+2^-10 -> 1 */
    KT_EQ_INT(kl_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    KT_CHECK(isnan(kl_f16_to_f32(kl_f32_to_f16(NAN))));
    KT_CHECK(isnan(kl_bf16_to_f32(kl_f32_to_bf16(NAN))));
    /* vector paths agree with scalar */
    float src[19];
    uint16_t h[19];
    float back[19];
    for (int i = 0; i < 19; i++) src[i] = (float)i * 0.37f - 3.0f;
    kl_f32_to_f16_n(src, h, 19);
    kl_f16_to_f32_n(h, back, 19);
    for (int i = 0; i < 19; i++) {
        KT_EQ_INT(h[i], kl_f32_to_f16(src[i]));
        KT_CHECK(back[i] == kl_f16_to_f32(h[i]));
    }
}

KL_TEST(tensor_new_wrap_free) {
    kl_err e = {0};
    kl_tensor *t = NULL;
    int64_t d[3] = {2, 3, 4};
    KT_OK(kl_tensor_new(KL_F32, 3, d, KL_TAG_ACTIVATIONS, &t, &e), &e);
    KT_EQ_INT(kl_tensor_numel(t), 24);
    KT_EQ_INT(t->nbytes, 96);
    KT_EQ_INT(t->strides[0], 12);
    KT_EQ_INT(t->strides[2], 1);
    KT_CHECK(kl_tensor_is_contiguous(t));
    KT_CHECK(((float *)t->data)[23] == 0.0f);
    kl_tensor_free(t);
    kl_tensor_free(NULL);
    float buf[6] = {1, 2, 3, 4, 5, 6};
    int64_t d2[2] = {2, 3};
    KT_OK(kl_tensor_wrap(KL_F32, 2, d2, buf, &t, &e), &e);
    KT_CHECK(t->data == buf && !t->owns);
    kl_tensor_free(t);
    /* scalar */
    KT_OK(kl_tensor_new(KL_I64, 0, NULL, KL_TAG_OTHER, &t, &e), &e);
    KT_EQ_INT(kl_tensor_numel(t), 1);
    kl_tensor_free(t);
    int64_t bad[2] = {2, -1};
    KT_EQ_INT(kl_tensor_new(KL_F32, 2, bad, KL_TAG_OTHER, &t, &e), KL_ESHAPE);
    KT_CHECK(t == NULL);
    int64_t huge[2] = {INT64_MAX / 2, 4};
    KT_EQ_INT(kl_tensor_new(KL_F32, 2, huge, KL_TAG_OTHER, &t, &e), KL_ERANGE);
    KT_EQ_INT(kl_tensor_new(KL_F32, 9, d, KL_TAG_OTHER, &t, &e), KL_ESHAPE);
}

static kl_tensor *iota(int rank, const int64_t *d) {
    kl_tensor *t = NULL;
    kl_tensor_new(KL_F32, rank, d, KL_TAG_OTHER, &t, NULL);
    float *p = t->data;
    for (int64_t i = 0; i < kl_tensor_numel(t); i++) p[i] = (float)i;
    return t;
}

KL_TEST(tensor_views) {
    kl_err e = {0};
    int64_t d[3] = {2, 3, 4};
    kl_tensor *t = iota(3, d), *s = NULL, *tr = NULL, *c = NULL, *r = NULL, *r2 = NULL;
    /* slice axis 2 [1:4:2] -> elements 1, 3 */
    KT_OK(kl_tensor_slice(t, 2, 1, 4, 2, &s, &e), &e);
    KT_EQ_INT(s->dims[2], 2);
    KT_CHECK(!kl_tensor_is_contiguous(s));
    KT_NEAR(kl_tensor_get_f64(s, (int64_t[]){1, 2, 1}), 12 + 8 + 3, 0);
    /* negative step reverses */
    kl_tensor *rv = NULL;
    KT_OK(kl_tensor_slice(t, 1, -1, INT64_MIN, -1, &rv, &e), &e);
    KT_EQ_INT(rv->dims[1], 3);
    KT_NEAR(kl_tensor_get_f64(rv, (int64_t[]){0, 0, 0}), 8, 0);
    KT_NEAR(kl_tensor_get_f64(rv, (int64_t[]){0, 2, 0}), 0, 0);
    KT_OK(kl_tensor_contiguous(rv, KL_TAG_OTHER, &c, &e), &e);
    KT_NEAR(((float *)c->data)[4], 4, 0);
    KT_NEAR(((float *)c->data)[0], 8, 0);
    kl_tensor_free(c);
    c = NULL;
    /* transpose view then copy */
    KT_OK(kl_tensor_transpose(t, (int[]){2, 0, 1}, &tr, &e), &e);
    KT_EQ_INT(tr->dims[0], 4);
    KT_EQ_INT(tr->dims[2], 3);
    KT_OK(kl_tensor_contiguous(tr, KL_TAG_OTHER, &c, &e), &e);
    const float *cp = c->data;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 3; k++) KT_NEAR(cp[(a * 2 + b) * 3 + k], b * 12 + k * 4 + a, 0);
    /* reshape of contiguous is a view */
    KT_OK(kl_tensor_reshape(t, 2, (int64_t[]){-1, 4}, &r, &e), &e);
    KT_CHECK(r->data == t->data && !r->owns);
    KT_EQ_INT(r->dims[0], 6);
    /* reshape of a transposed view needs a copy */
    KT_OK(kl_tensor_reshape(tr, 1, (int64_t[]){24}, &r2, &e), &e);
    KT_CHECK(r2->owns);
    KT_CHECK(memcmp(r2->data, c->data, 96) == 0);
    kl_tensor *bad = NULL;
    KT_EQ_INT(kl_tensor_reshape(t, 2, (int64_t[]){5, -1}, &bad, &e), KL_ESHAPE);
    KT_CONTAINS(e.msg, "[2,3,4]");
    KT_EQ_INT(kl_tensor_transpose(t, (int[]){0, 0, 1}, &bad, &e), KL_EINVAL);
    kl_tensor_free(t); kl_tensor_free(s); kl_tensor_free(tr); kl_tensor_free(c);
    kl_tensor_free(r); kl_tensor_free(r2); kl_tensor_free(rv);
}

KL_TEST(tensor_npy_roundtrip) {
    kl_err e = {0};
    kl_dtype dts[] = {KL_F32, KL_F16, KL_F64, KL_I8, KL_I16, KL_I32, KL_I64, KL_U8, KL_U16, KL_U32, KL_U64, KL_BOOL};
    for (size_t k = 0; k < KL_ARRAY_LEN(dts); k++) {
        int64_t d[3] = {3, 1, 5};
        int rank = (int)(k % 4);   /* exercise ranks 0..3 */
        kl_tensor *t = NULL, *u = NULL;
        KT_OK(kl_tensor_new(dts[k], rank, d, KL_TAG_OTHER, &t, &e), &e);
        unsigned char *p = t->data;
        for (size_t i = 0; i < t->nbytes; i++) p[i] = (unsigned char)(i * 37 + k);
        if (dts[k] == KL_BOOL) for (size_t i = 0; i < t->nbytes; i++) p[i] &= 1;
        if (dts[k] == KL_F16 || dts[k] == KL_F32 || dts[k] == KL_F64) memset(p, 0x3c, t->nbytes);
        const char *path = kt_path("a.npy");
        KT_OK(kl_npy_save(path, t, &e), &e);
        KT_OK(kl_npy_load(path, &u, &e), &e);
        KT_EQ_INT(u->dtype, dts[k]);
        KT_EQ_INT(u->rank, rank);
        for (int i = 0; i < rank; i++) KT_EQ_INT(u->dims[i], d[i]);
        KT_CHECK(u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0);
        /* header is 64-byte aligned */
        char *raw = NULL;
        size_t len = 0;
        KT_OK(kl_read_file(path, &raw, &len, &e), &e);
        KT_EQ_INT((len - t->nbytes) % 64, 0);
        kl_mem_free(raw);
        kl_tensor_free(t);
        kl_tensor_free(u);
    }
}

static void write_raw(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static size_t mk_npy(unsigned char *buf, int ver, const char *dict, size_t data) {
    size_t dl = strlen(dict), ho = ver == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)ver;
    buf[7] = 0;
    size_t hl = dl + 1;
    buf[8] = (unsigned char)(hl & 0xff);
    buf[9] = (unsigned char)(hl >> 8);
    if (ver > 1) { buf[10] = 0; buf[11] = 0; }
    memcpy(buf + ho, dict, dl);
    buf[ho + dl] = '\n';
    memset(buf + ho + hl, 0, data);
    return ho + hl + data;
}

KL_TEST(tensor_npy_versions_and_errors) {
    kl_err e = {0};
    unsigned char buf[512];
    kl_tensor *t = NULL;
    const char *path = kt_path("x.npy");
    /* v2 and v3 headers, big endian */
    size_t n = mk_npy(buf, 2, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", 8);
    buf[n - 8 + 3] = 7;
    buf[n - 4 + 2] = 1;
    write_raw(path, buf, n);
    KT_OK(kl_npy_load(path, &t, &e), &e);
    KT_EQ_INT(((int32_t *)t->data)[0], 7);
    KT_EQ_INT(((int32_t *)t->data)[1], 256);
    kl_tensor_free(t);
    n = mk_npy(buf, 3, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (1, 2)}", 16);
    write_raw(path, buf, n);
    KT_OK(kl_npy_load(path, &t, &e), &e);
    KT_EQ_INT(t->dtype, KL_F64);
    KT_EQ_INT(t->dims[1], 2);
    kl_tensor_free(t);
    struct { const char *dict; size_t data; int code; const char *msg; } bad[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, KL_EUNSUPPORTED, "fortran_order"},
        {"{'fortran_order': False, 'shape': (2,), }", 8, KL_EPARSE, "descr"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, KL_EUNSUPPORTED, "c8"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8, KL_EPARSE, "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8, KL_EPARSE, "truncated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8, KL_EPARSE, "trailing"},
        {"{'descr': '<f4', 'fortran_order': False }", 4, KL_EPARSE, "shape"},
        {"['descr']", 4, KL_EPARSE, "dict"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i++) {
        n = mk_npy(buf, 1, bad[i].dict, bad[i].data);
        write_raw(path, buf, n);
        kl_err_clear(&e);
        KT_EQ_INT(kl_npy_load(path, &t, &e), bad[i].code);
        KT_CHECK(t == NULL);
        KT_CONTAINS(e.msg, bad[i].msg);
        KT_CONTAINS(e.msg, "x.npy");
    }
    write_raw(path, "hello world", 11);
    KT_EQ_INT(kl_npy_load(path, &t, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "magic");
    /* header length beyond the file */
    n = mk_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
    buf[9] = 0x7f;
    write_raw(path, buf, n);
    KT_EQ_INT(kl_npy_load(path, &t, &e), KL_EPARSE);
    KT_CONTAINS(e.msg, "header length");
    KT_CHECK(kl_npy_load(kt_path("missing.npy"), &t, &e) != KL_OK);
}

/* fuzz_npy finding (fuzz/corpus/fuzz_npy/crash-key-at-end.npy): a header
 * that ends right after "'descr':" made the reader step past its end and
 * memchr with a wrapped length (SEGV); the same for 'shape':. */
KL_TEST(tensor_npy_header_ends_after_key) {
    /* the last one: the dtype string was read out of the data after the header */
    static const char *hdrs[] = {"{'descr':", "{'descr':  ", "{'descr': '<f4', 'fortran_order': False, 'shape':",
                                 "{'fortran_order': False, 'shape': (5,), 'descr':"};
    static const char *data[] = {"", "", "", "'|u1'"};
    for (size_t k = 0; k < KL_ARRAY_LEN(hdrs); k++) {
        size_t hl = strlen(hdrs[k]), dl = strlen(data[k]), n = 10 + hl + dl;
        unsigned char *b = malloc(n); /* exactly the file: ASan sees a read past it */
        memcpy(b, "\x93NUMPY\x01\x00", 8);
        b[8] = (unsigned char)hl;
        b[9] = 0;
        memcpy(b + 10, hdrs[k], hl);
        memcpy(b + 10 + hl, data[k], dl);
        kl_err e = {0};
        kl_tensor *t = NULL;
        KT_EQ_INT(kl_npy_load_mem(b, n, "cut.npy", &t, &e), KL_EPARSE);
        KT_CHECK(t == NULL);
        KT_CONTAINS(e.msg, "cut.npy");
        free(b);
    }
}

KL_TEST(tensor_npy_save_view) {
    kl_err e = {0};
    int64_t d[2] = {3, 4};
    kl_tensor *t = iota(2, d), *tr = NULL, *u = NULL;
    KT_OK(kl_tensor_transpose(t, NULL, &tr, &e), &e);
    KT_OK(kl_npy_save(kt_path("t.npy"), tr, &e), &e);
    KT_OK(kl_npy_load(kt_path("t.npy"), &u, &e), &e);
    KT_EQ_INT(u->dims[0], 4);
    KT_NEAR(((float *)u->data)[1], 4, 0);
    kl_tensor_free(t); kl_tensor_free(tr); kl_tensor_free(u);
}

/* The bytes numpy.save writes for a (2, 3) float32 array: the one .npy writer
 * (keel eval --logits writes through it too) keeps this header exactly. */
KL_TEST(tensor_npy_save_header_as_numpy) {
    kl_err e = {0};
    int64_t d[2] = {2, 3};
    float v[6] = {0, 1, 2, 3, 4, 5};
    kl_tensor t;
    kl_tensor_view_init(&t, KL_F32, 2, d, v);
    KT_OK(kl_npy_save(kt_path("h.npy"), &t, &e), &e);
    char *raw = NULL;
    size_t len = 0;
    KT_OK(kl_read_file(kt_path("h.npy"), &raw, &len, &e), &e);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    KT_EQ_INT(len, 128 + 24);
    KT_CHECK(memcmp(raw, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
    KT_CHECK(memcmp(raw + 10, dict, strlen(dict)) == 0);
    for (size_t i = 10 + strlen(dict); i < 127; i++) KT_CHECK(raw[i] == ' ');
    KT_CHECK(raw[127] == '\n');
    KT_CHECK(memcmp(raw + 128, v, sizeof v) == 0);
    kl_mem_free(raw);
}

/* The write buffer comes from the core allocator (tag workspace), so budgets
 * and statistics see it: over the workspace budget the save is refused with
 * a message and writes nothing (it used plain malloc, unseen). */
KL_TEST(tensor_npy_save_buffer_through_allocator) {
    kl_err e = {0};
    int64_t d[1] = {1 << 18};
    kl_tensor *t = NULL;
    KT_OK(kl_tensor_new(KL_F32, 1, d, KL_TAG_OTHER, &t, &e), &e);
    kl_mem_stats st;
    kl_mem_stats_get(KL_TAG_WORKSPACE, &st);
    uint64_t old = kl_mem_get_tag_budget(KL_TAG_WORKSPACE);
    kl_mem_set_tag_budget(KL_TAG_WORKSPACE, st.allocated + (64u << 10));
    const char *p = kt_path("big.npy");
    remove(p);
    int rc = kl_npy_save(p, t, &e);
    kl_mem_set_tag_budget(KL_TAG_WORKSPACE, old);
    KT_EQ_INT(rc, KL_ENOMEM);
    KT_CONTAINS(e.msg, "big.npy");
    KT_CHECK(access(p, F_OK) != 0);
    KT_OK(kl_npy_save(p, t, &e), &e);
    kl_tensor_free(t);
}
