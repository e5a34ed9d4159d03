/* libFuzzer target of the .npy readers: the input is a .npy file, read by
 * the tensor layer (kl_npy_load_mem) and by the training data path
 * (kl__train_npy_read_mem, which converts through it to doubles); every element of
 * what they return is touched, and the two must agree on the shape.
 * Any crash, leak or sanitizer report is a finding.
 * Run: make fuzz FUZZ=fuzz_npy FUZZ_SECONDS=600 (seed corpus: fuzz/corpus/fuzz_npy). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keel/tensor.h"
#include "train/train_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_err e = {0};
    kl_tensor *t = NULL;
    int64_t n = -1;
    if (kl_npy_load_mem(data, size, "fuzz.npy", &t, &e) == 0) {
        n = kl_tensor_numel(t);
        volatile uint8_t acc = 0;
        for (size_t i = 0; i < t->nbytes; i++) acc ^= ((const uint8_t *)t->data)[i];
        (void)acc;
        kl_tensor_free(t);
    }
    tr_array a;
    if (kl__train_npy_read_mem(data, size, "fuzz.npy", &a, &e) == 0) {
        if (a.n != n) abort(); /* the training path reads what the tensor reader reads */
        volatile double s = 0;
        for (int64_t i = 0; i < a.n; i++) s += a.f[i];
        (void)s;
        kl__train_array_free(&a);
    } else if (n >= 0 && e.code != KL_ENOMEM) abort();
    return 0;
}
