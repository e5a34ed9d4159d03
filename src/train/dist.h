/* The distributed layer of data-parallel training (src/train/dist.c): MPI
 * detection and start-up, rank and world, and the collectives the trainer
 * uses (all-reduce, non-blocking all-reduce with progress, all-gather,
 * broadcast, barrier), every wait bounded by a timeout so that a rank that
 * died or hangs stops the others with an error instead of a hang. Without
 * MPI (no launcher in the environment, no --distributed mpi) every call is
 * the one-process identity and MPI_Init is never called. */
#ifndef KEEL_TRAIN_DIST_H
#define KEEL_TRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "keel/core.h"

typedef struct {
    int on; /* MPI started (world may still be 1 under mpirun -np 1) */
    int rank, world;
    double timeout_s; /* longest wait for the other ranks */
    double comm_s;    /* seconds spent in (waiting for) collectives */
    int64_t step;     /* the step being taken, for messages */
} tr_dist;

/* mode: KL_TRAIN_DIST_AUTO (MPI when launched), _MPI (required), _OFF.
 * Starts MPI once per process (finalized at exit; aborted instead when a
 * collective failed, so that the launcher stops every rank). */
int kl__train_dist_start(tr_dist *d, int mode, double timeout_s, kl_err *e);
/* The run is over: SIGTERM is no longer reported as a stopped step. */
void kl__train_dist_end(tr_dist *d);
/* Marks the run failed: the process ends with MPI_Abort (the launcher then
 * stops the other ranks) instead of MPI_Finalize. */
void kl__train_dist_fail(tr_dist *d);

/* Blocking, bounded by the timeout; sums in place over the ranks. */
int kl__train_dist_allreduce_f32(tr_dist *d, float *buf, int64_t n, const char *what, kl_err *e);
/* send (bytes) from every rank into recv (world x bytes, in rank order). */
int kl__train_dist_allgather(tr_dist *d, const void *send, void *recv, size_t bytes, const char *what, kl_err *e);
int kl__train_dist_bcast(tr_dist *d, void *buf, size_t bytes, int root, const char *what, kl_err *e);
int kl__train_dist_barrier(tr_dist *d, const char *what, kl_err *e);

/* Non-blocking in-place sum of float buffers (the gradient buckets):
 * start each, kl__train_dist_progress to let MPI move data while the caller works,
 * kl__train_dist_wait_all to finish (bounded by the timeout). */
#define TR_DIST_MAX_REQ 4096
typedef struct {
    int n;
    void *req; /* MPI_Request[TR_DIST_MAX_REQ] */
} tr_dist_reqs;
int kl__train_dist_reqs_init(tr_dist_reqs *q, kl_err *e);
void kl__train_dist_reqs_free(tr_dist_reqs *q);
int kl__train_dist_iallreduce_f32(tr_dist *d, tr_dist_reqs *q, float *buf, int64_t n, kl_err *e);
void kl__train_dist_progress(tr_dist *d, tr_dist_reqs *q);
int kl__train_dist_wait_all(tr_dist *d, tr_dist_reqs *q, const char *what, kl_err *e);

#endif
