/* Logging a training run to the experiment store (src/train/runlog.c);
 * private to src/train. */
#ifndef KEEL_TRAIN_RUNLOG_H
#define KEEL_TRAIN_RUNLOG_H
#include "keel/track.h"
#include "train/train_data.h"
#include "train/train_int.h"

/* Opens the store, starts the run and logs params and the spec's lineage. */
/* params: the resolved spec in full (every key under its dotted spec name,
 * defaults filled in, each layer's resolved sizes from m). */
int kl__train_runlog_start(const kl_train_opts *o, const tr_spec *s, const tr_model *m, const char *spec_path,
                        kl_track **t, kl_track_run **r, kl_err *e);
/* Logs the final metrics, artifacts of out_dir, dataset lineage; ends the run and
 * closes the store (always). */
int kl__train_runlog_finish(kl_track *t, kl_track_run *r, const tr_spec *s, const char *out_dir, const tr_dsinfo *dsi,
                     const kl_metric_point *pts, size_t npts, kl_err *e);
/* Ends the run as failed and closes the store; NULLs are no-ops. */
void kl__train_runlog_fail(kl_track *t, kl_track_run *r);
#endif
