/* libFuzzer target of the safetensors reader (kl__train_safetensors_read_mem,
 * checkpoints and train.init weights): the input is a safetensors file; the
 * callback checks that every tensor it is given has data_offsets that span
 * exactly numel * dtype size bytes inside the input, and reads them all.
 * Any crash, leak or sanitizer report is a finding.
 * Run: make fuzz FUZZ=fuzz_safetensors FUZZ_SECONDS=600 (seed corpus: fuzz/corpus/fuzz_safetensors). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"

typedef struct { const uint8_t *lo, *hi; } span;

static size_t dsize(const char *dt) {
    if (!strcmp(dt, "F64") || !strcmp(dt, "I64") || !strcmp(dt, "U64")) return 8;
    if (!strcmp(dt, "F32") || !strcmp(dt, "I32") || !strcmp(dt, "U32")) return 4;
    if (!strcmp(dt, "F16") || !strcmp(dt, "BF16") || !strcmp(dt, "I16") || !strcmp(dt, "U16")) return 2;
    return 1;
}

static int on_tensor(void *ctx, const char *name, const char *dtype, int rank, const int64_t *dims, const void *data,
                     size_t nbytes, kl_err *e) {
    span *s = ctx;
    (void)name; (void)e;
    const uint8_t *p = data;
    if (rank < 0 || rank > 8 || p < s->lo || p + nbytes > s->hi) abort();
    uint64_t n = 1;
    for (int d = 0; d < rank; d++) { if (dims[d] < 0) abort(); n *= (uint64_t)dims[d]; }
    if (n * dsize(dtype) != nbytes) abort();
    volatile uint8_t acc = 0;
    for (size_t i = 0; i < nbytes; i++) acc ^= p[i];
    (void)acc;
    return KL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_err e = {0};
    span s = {data, data + size};
    char *meta = NULL;
    kl__train_safetensors_read_mem(data, size, "fuzz.safetensors", on_tensor, &s, &meta, &e);
    free(meta);
    return 0;
}
