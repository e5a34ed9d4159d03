/* keel image: decode JPEG (TurboJPEG, with DCT-domain scaling) and PNG
 * (libpng) into 8-bit HWC pixels, read image headers without decoding, and
 * encode JPEG. Every decode is guarded by a pixel cap checked on the header
 * before anything is allocated (decompression bombs). Used by `keel pack`
 * (validation), the data loader (decode) and the defects generator (encode). */
#ifndef KEEL_IMAGE_H
#define KEEL_IMAGE_H

#include <keel/core.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An 8-bit image: h rows of w pixels of c channels (1 = gray, 3 = RGB),
 * rows packed (stride w*c). px comes from kl_mem_alloc(KL_TAG_DATASET). */
typedef struct { int w, h, c; uint8_t *px; } kl_image;

/* Default pixel cap of decode/info when max_pixels is 0: 100 Mpx. */
#define KL_IMAGE_MAX_PIXELS_DEFAULT 100000000ull

typedef enum { KL_IMAGE_UNKNOWN, KL_IMAGE_JPEG, KL_IMAGE_PNG } kl_image_format;
/* Sniffs the format from the first bytes (JPEG: FF D8 FF; PNG: its 8-byte signature). */
kl_image_format kl_image_sniff(const void *bytes, size_t len);
const char *kl_image_format_name(kl_image_format f);   /* "jpeg", "png", "unknown" */

/* Decodes JPEG or PNG (sniffed from the bytes). min_w/min_h > 0: a JPEG may
 * be decoded with TurboJPEG's DCT-domain scaling to the smallest scale whose
 * size is >= min_w x min_h (0,0 = full size; PNG is always full size).
 * Images with w*h > max_pixels (before scaling; 0 = default 100 Mpx) are
 * refused with KL_ERANGE without allocating. Non-images, truncated or
 * zero-size data -> KL_EPARSE naming `what`; CMYK JPEGs -> KL_EUNSUPPORTED.
 * Output: c = 1 for grayscale (and gray+alpha) sources, 3 otherwise; alpha
 * is dropped (as PIL's convert("RGB") does). On failure out is zeroed. */
int kl_image_decode(const void *bytes, size_t len, const char *what, int min_w, int min_h,
                    uint64_t max_pixels, kl_image *out, kl_err *e);
/* Header only: size and the channel count a decode would give. */
int kl_image_info(const void *bytes, size_t len, const char *what, int *w, int *h, int *c, kl_err *e);
void kl_image_release(kl_image *img);      /* frees px; safe on a zeroed image */
/* JPEG at quality 1..100 (4:2:0 for RGB, gray for c = 1). *out from malloc. */
int kl_image_encode_jpeg(const kl_image *img, int quality, uint8_t **out, size_t *len, kl_err *e);

/* Extras. */
/* Allocates px (uninitialised) for a w x h x c image. */
int kl_image_alloc(kl_image *img, int w, int h, int c, kl_err *e);
/* The size kl_image_decode gives a w x h JPEG for min_w x min_h: the smallest
 * TurboJPEG scaling factor <= 1 whose scaled size is >= min in both
 * dimensions (full size when min_w/min_h are 0 or larger than the image).
 * Returns the factor's denominator over 8 (8 = full size, 4 = 1/2, 1 = 1/8). */
int kl_image_scaled_size(int w, int h, int min_w, int min_h, int *sw, int *sh);
/* Converts a 1-channel image to 3 channels in place (no-op when c = 3). */
int kl_image_to_rgb(kl_image *img, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
