/* keel data loader and image transforms: area-averaging resize, camera
 * undistortion (OpenCV's pinhole + k1 k2 p1 p2 model), crop / flip /
 * normalise / HWC->CHW fused into one pass that writes straight into a batch
 * buffer, and the loader itself: worker threads, a bounded queue of ready
 * batches in recycled 64-byte-aligned buffers, seeded shuffling that does not
 * depend on the worker count, epochs, mid-epoch resume, data-parallel
 * sharding and statistics. See docs/images.md ("Loader"). */
#ifndef KEEL_LOADER_H
#define KEEL_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "keel/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Image transforms (src/data/image_ops.c). Images are uint8 HWC.
 * All are deterministic; nothing here allocates except where said.
 * ================================================================== */

/* Area-averaging (exact box filter) resize of src (sw, sh, c) to (dw, dh):
 * each output pixel is the mean of the source area it covers, fractional
 * pixels weighted by their overlap; any ratio, up or down. Rounds to nearest. */
int kl_img_resize_area(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, kl_err *e);

/* Size whose shorter side is `shorter` (aspect kept, rounded); with mult > 1
 * both sides are then rounded to the nearest multiple of mult (at least mult). */
void kl_img_fit_shorter(int w, int h, int shorter, int mult, int *ow, int *oh);

/* Normalisation: out = (v / 255 - mean[c]) / std[c]. */
typedef struct { int c; float mean[4], std[4]; } kl_img_norm;

/* The fused pass: area-resize src (sw, sh, c) to (rw, rh) — skipped when
 * equal — take the window (x0, y0, cw, ch) of the resized image, flip it
 * horizontally when flip, normalise and write float32 CHW (c, ch, cw) to out.
 * Only the window is computed. scratch: NULL or kl_img_scratch_floats(sw, c)
 * floats (else it mallocs). */
int kl_img_resize_crop_chw(const uint8_t *src, int sw, int sh, int c, int rw, int rh, int x0, int y0, int cw, int ch,
                           int flip, const kl_img_norm *norm, float *out, float *scratch, kl_err *e);
size_t kl_img_scratch_floats(int sw, int c);

/* Pinhole camera and lens distortion as OpenCV: K = [fx 0 cx; 0 fy cy; 0 0 1],
 * distortion (k1, k2, p1, p2). w/h: the image size K belongs to (a map for
 * another size scales K; 0 = use K as is). */
typedef struct { double fx, fy, cx, cy, k1, k2, p1, p2; int w, h; } kl_camera;

/* Undistortion map for one image size (cv2.undistort with newCameraMatrix =
 * K): for each output pixel the distorted source position, in 1/32 pixel
 * (OpenCV's fixed-point remap). */
typedef struct kl_undistort_map kl_undistort_map;
int kl_undistort_map_new(const kl_camera *cam, int w, int h, kl_undistort_map **out, kl_err *e);
void kl_undistort_map_free(kl_undistort_map *m);
/* The source position of output pixel (x, y) in pixels (for tests). */
void kl_undistort_map_at(const kl_undistort_map *m, int x, int y, double *sx, double *sy);
/* Bilinear remap of src (w, h, c) through m into dst (same size); samples
 * outside the image count as 0 (cv2.BORDER_CONSTANT). */
int kl_img_undistort(const kl_undistort_map *m, const uint8_t *src, int w, int h, int c, uint8_t *dst, kl_err *e);


/* ==================================================================
 * Loader (src/data/loader.c)
 * ================================================================== */

/* One encoded record of a source. data stays valid while the source lives. */
typedef struct { const uint8_t *data; size_t len; int32_t label; const char *key; } kl_loader_rec;
/* A decoded image (HWC uint8) and who frees it. */
typedef struct { int w, h, c; uint8_t *px; void *priv; } kl_loader_img;

/* Where the records come from. get and decode are called from worker
 * threads concurrently and must be thread-safe. decode: min_w/min_h > 0 let
 * it decode smaller (JPEG DCT scaling) as long as the result is >= that size;
 * max_pixels caps the decoded size (decompression bombs). */
typedef struct {
    void *ctx;
    int64_t count;
    const char *id;            /* dataset identity (e.g. sha256 of a manifest) */
    int (*get)(void *ctx, int64_t i, kl_loader_rec *out, kl_err *e);
    int (*decode)(void *ctx, const kl_loader_rec *r, int min_w, int min_h, uint64_t max_pixels, kl_loader_img *out, kl_err *e);
    void (*release)(void *ctx, kl_loader_img *img);
} kl_loader_source;

typedef enum { KL_CROP_CENTER, KL_CROP_RANDOM, KL_CROP_NONE /* squash-resize to size x size */ } kl_crop_mode;

typedef struct {
    int batch;                 /* samples per batch (required) */
    int workers;               /* worker threads (0 = 2) */
    int prefetch;              /* ready batches kept ahead (0 = 2 x workers, min 2) */
    int size;                  /* output side: images are (batch, channels, size, size) */
    int resize;                /* shorter side before cropping (0 = size) */
    int multiple;              /* round the resized sides to a multiple of this (0/1 = no; e.g. 64) */
    kl_crop_mode crop;
    int flip;                  /* random horizontal flip (p = 0.5) */
    int channels;              /* 3 (RGB) or 1; images must decode to it (0 = 3) */
    float mean[4], std[4];     /* per channel; std 0 means 1 */
    const kl_camera *undistort; /* NULL = none; applied after decode */
    uint64_t seed;
    int shuffle;
    int drop_last;
    int64_t epochs;            /* 0 = endless */
    int rank, world;           /* data-parallel sharding (world 0 = 1) */
    int no_dct_scaling;        /* always decode at full size */
    uint64_t max_pixels;       /* decode cap (0 = 64 Mpix) */
} kl_loader_cfg;

/* A source over an open shard set (include/keel/shard.h): records are read
 * through its mmap, decoded with kl_image_decode; grayscale images become RGB
 * when channels is 3. The set must outlive the source. */
struct kl_shardset;
void kl_loader_source_shards(struct kl_shardset *set, int channels, kl_loader_source *out);

typedef struct kl_loader kl_loader;

/* A ready batch: valid until the next kl_loader_next / seek / free. */
typedef struct {
    int64_t n;                 /* samples: 0 at the end, or a rank's empty share of the last global batch */
    int end;                   /* 1: no more data (n is 0) */
    int64_t epoch, index;      /* epoch and batch index within it */
    float *images;             /* (n, channels, size, size), 64-byte aligned */
    int64_t *labels;           /* (n) */
} kl_batch;

/* Position to continue from: "the next batch is (epoch, batch)". */
typedef struct {
    char dataset[80];
    uint64_t seed;
    int64_t epoch, batch;
    int rank, world;
} kl_loader_pos;

typedef struct {
    int64_t batches, samples;
    double seconds;            /* since start (or the last seek) */
    double batches_per_s, samples_per_s;
    double decode_s;           /* summed over workers */
    double transform_s;        /* resize / crop / normalise, summed over workers */
    double decode_mpix;        /* decoded megapixels */
    double wait_s;             /* consumer blocked in kl_loader_next */
    double step_s;             /* consumer time between batches, wait included */
    double wait_share;         /* wait_s / step_s */
    double queue_depth;        /* mean ready batches seen by kl_loader_next */
} kl_loader_stats;

/* Starts the workers. src must outlive the loader. */
int kl_loader_new(const kl_loader_source *src, const kl_loader_cfg *cfg, kl_loader **out, kl_err *e);
/* Stops the workers (mid-epoch is fine) and frees everything. */
void kl_loader_free(kl_loader *l);
/* Next batch (blocks); out->n == 0 at the end. A worker's error (a corrupt
 * record names its key) is returned here. */
int kl_loader_next(kl_loader *l, kl_batch *out, kl_err *e);
/* Batches per epoch (the same on every rank). With world W, global batch g
 * is positions [g*batch*W, (g+1)*batch*W) of the epoch's order and rank r
 * takes those congruent to r mod W: in the last, partial global batch the
 * ranks' shares differ by one record at most and may be empty; the union of
 * the ranks' batches is the one-process batch of batch*W records, and an
 * epoch holds every record once (drop_last drops the partial global batch). */
int64_t kl_loader_batches_per_epoch(const kl_loader *l);
/* Samples per epoch for this rank (before drop_last). */
int64_t kl_loader_samples_per_epoch(const kl_loader *l);
/* Continue at (epoch, batch): drops prefetched batches. */
int kl_loader_seek(kl_loader *l, int64_t epoch, int64_t batch, kl_err *e);
/* The position of the next batch kl_loader_next will return. */
void kl_loader_tell(const kl_loader *l, kl_loader_pos *pos);
/* Seeks to a saved position; another dataset, seed or sharding is KL_ESTATE. */
int kl_loader_restore(kl_loader *l, const kl_loader_pos *pos, kl_err *e);
/* Text form "keel-loader-1 DATASET SEED EPOCH BATCH RANK WORLD". */
void kl_loader_pos_format(const kl_loader_pos *pos, char *buf, size_t n);
int kl_loader_pos_parse(const char *s, kl_loader_pos *pos, kl_err *e);
void kl_loader_stats_get(kl_loader *l, kl_loader_stats *out);

#ifdef __cplusplus
}
#endif
#endif
