/* Training data arrays (private to src/train). */
#ifndef KEEL_TRAIN_DATA_H
#define KEEL_TRAIN_DATA_H
#include <stdint.h>
#include "keel/core.h"
typedef struct {
    int rank; int64_t dims[8]; int64_t n;
    int is_int;
    double *f;   /* n values, as double (exact for the ints training uses) */
} tr_array;
int tr_npy_read(const char *path, tr_array *out, kl_err *e);
void tr_array_free(tr_array *a);
int tr_npy_write_f32(const char *path, int rank, const int64_t *dims, const float *data, kl_err *e);
#endif
