/* libFuzzer target: the serving layer's request decoding — the arena JSON
 * reader and the KServe v2 infer decoder (JSON + binary extension tail)
 * against a model with an FP32 [-1,4] input and a BOOL [-1] input. The
 * first byte splits the input into JSON header and binary tail. */
#include "serve/serve_int.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static sv_model m;
    static sv_version v;
    if (!v.n_in) {
        snprintf(m.name, sizeof m.name, "fuzz");
        v.model = &m;
        v.version = 1;
        v.n_in = 2;
        snprintf(v.in[0].name, SV_NAME_MAX, "x");
        v.in[0].dtype = SV_FP32;
        v.in[0].rank = 2;
        v.in[0].dims[0] = -1;
        v.in[0].dims[1] = 4;
        snprintf(v.in[1].name, SV_NAME_MAX, "mask");
        v.in[1].dtype = SV_BOOL;
        v.in[1].rank = 1;
        v.in[1].dims[0] = -1;
        v.n_out = 1;
        snprintf(v.out[0].name, SV_NAME_MAX, "y");
        v.out[0].dtype = SV_FP32;
    }
    if (size < 1) return 0;
    size_t split = size > 1 ? (size_t)data[0] * (size - 1) / 255 : 0;
    const char *json = (const char *)data + 1;
    sv_req r;
    memset(&r, 0, sizeof r);
    r.model = &m;
    r.ver = &v;
    r.timeout_us = -1;
    r.resp_header_len = -1;
    kl_err e = {0};
    if (kl__sv_decode_infer(&r, json, split, json + split, size - 1 - split, &e) == KL_OK) {
        /* answer with the first input as the output: exercises the encoder */
        sv_tensor out = r.in[0];
        out.release = NULL;
        out.own = 0;
        r.rows = out.rank ? out.dims[0] : 0;
        if (kl__sv_encode_infer(&r, &out, 1, 0, r.rows, &e) == KL_OK) free(r.resp);
    }
    for (int i = 0; i < SV_MAX_IO; i++) kl__sv_tensor_release(&r.in[i]);
    return 0;
}
