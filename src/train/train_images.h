/* Training on image shard sets (private to src/train): the data.image spec
 * section and a shard set + loader opened for training, validation or
 * evaluation (src/train/images.c). */
#ifndef KEEL_TRAIN_IMAGES_H
#define KEEL_TRAIN_IMAGES_H
#include "keel/loader.h"
#include "keel/shard.h"
#include "train/train_int.h"

/* Parses data.image (node may be NULL: defaults). */
int kl__train_image_spec_parse(const kl_node *node, tr_spec *s, kl_err *e);

typedef struct {
    kl_shardset *set;
    int64_t *rows, nrows;        /* the records used (a split of the set), in set order */
    kl_loader_source base, src;  /* src: the rows of base */
    kl_loader *ld;
    kl_camera cam;               /* data.image.undistort */
    int rank, world;             /* data-parallel: this rank's share of every batch (world 0 = 1; set before start) */
} tr_images;

/* Opens the shard set at path (checks it against the model: input shape
 * (C, size, size), classes <= outputs). */
int kl__train_images_open_set(tr_images *im, const tr_spec *s, const tr_model *m, const char *path, kl_err *e);
/* Starts the loader over rows [0, n) of `rows` (NULL = all records).
 * train: shuffled, augmented (random crop/flip as the spec says); else in
 * order, centre crop, no flip, no dropped batch. */
int kl__train_images_start(tr_images *im, const tr_spec *s, const int64_t *rows, int64_t n, int train, int64_t batch,
                        int64_t epochs, kl_err *e);
void kl__train_images_close(tr_images *im);

/* The seeded train/validation split of n rows (val_fraction), train rows in
 * order: idx_tr (n - nva), idx_va (nva); shared with the .npy path. */
int kl__train_split_rows(int64_t n, uint64_t seed, double frac, int64_t **idx_tr, int64_t *ntr, int64_t **idx_va,
                      int64_t *nva, kl_err *e);
#endif
