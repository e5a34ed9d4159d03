/* keel defectgen: a deterministic generator of an industrial-inspection
 * image dataset: brushed-metal surfaces in three classes (good, scratch,
 * dent) under varying light, JPEG-compressed. Image i depends only on
 * (seed, i, size), so any thread count gives byte-identical files.
 * Used by `keel datagen defects`, the image tests and examples/defects. */
#ifndef KEEL_DEFECTGEN_H
#define KEEL_DEFECTGEN_H

#include <keel/image.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { KL_DEFECT_GOOD, KL_DEFECT_SCRATCH, KL_DEFECT_DENT, KL_DEFECT_CLASSES };
const char *kl_defect_class_name(int cls);   /* "good", "scratch", "dent" */
/* Class of image i: i % 3 (balanced). */
int kl_defectgen_class(int64_t i);
/* Renders image i (RGB, size x size) into out (allocated here). */
int kl_defectgen_render(uint64_t seed, int64_t i, int size, kl_image *out, kl_err *e);

typedef struct {
    const char *out_dir;
    int64_t n;
    int size;          /* pixels per side (default 256) */
    uint64_t seed;
    int quality;       /* JPEG quality (default 90) */
    int progress;      /* show progress */
} kl_defectgen_opts;

typedef struct { int64_t written; uint64_t bytes; double seconds; } kl_defectgen_result;

/* Writes OUT/<class>/<i, 6 digits>.jpg for i in [0, n) and OUT/labels.csv
 * (path,label), in parallel on the default pool. Existing files are
 * overwritten. */
int kl_defectgen_write(const kl_defectgen_opts *o, kl_defectgen_result *res, kl_err *e);

#ifdef __cplusplus
}
#endif
#endif
