/* Private header of the online store's backends: what kl_fstore (online.c)
 * asks of a backend — append one record's events atomically, read the
 * windows of one record, ping — and the Redis backend (online_redis.c) that
 * implements them over hiredis. The in-memory backend (persisted to SQLite)
 * lives in online.c itself. Both keep the same ordering ((ts, value), equal
 * events after each other), the same pruning (kl__tf_window_keep_from) and
 * the same point-in-time rule (a record's window reads events strictly
 * before its time). */
#ifndef KEEL_FEATURE_FSTORE_INT_H
#define KEEL_FEATURE_FSTORE_INT_H

#include "feature/feature_int.h"

/* One window feature's event of a record: the history of entity key[0..kn)
 * of feature f->f[feat] gains x. */
typedef struct {
    size_t feat;
    const char *key;
    size_t kn;
    fevent x;
} fs_append;

/* One window feature's read for a record at time t: the backend fills
 * ev[0..n) with the entity's last events strictly before t, in order (at
 * most the feature's `events`; ev points into a buffer the backend owns
 * until the next read on the same fs_read array, freed by kl__fsr_read_free). */
typedef struct {
    size_t feat;
    const char *key;
    size_t kn;
    int64_t t;
    fevent *ev;
    size_t n;
} fs_read;

/* ---- Redis (online_redis.c) ---- */
typedef struct kl__fsr kl__fsr;
/* Whether a store name is a Redis URL (redis://...). */
int kl__fsr_is_url(const char *name);
/* Parses the URL and connects once (fails when Redis does not answer,
 * unless lazy: then the first call connects). */
int kl__fsr_open(const kl_features *f, const char *url, int lazy, kl__fsr **out, kl_err *e);
void kl__fsr_free(kl__fsr *r);
/* Appends a record's events (one per window feature) in one atomic script
 * call. Errors: KL_ETIMEOUT when Redis is unreachable or slow. */
int kl__fsr_append(kl__fsr *r, const fs_append *a, size_t n, kl_err *e);
/* Reads n windows in one round trip (pipelined). */
int kl__fsr_read(kl__fsr *r, fs_read *rd, size_t n, kl_err *e);
void kl__fsr_read_free(fs_read *rd, size_t n);
int kl__fsr_ping(kl__fsr *r, kl_err *e);
/* A Redis history member's first 16 bytes: bytewise order == kl__fevent_cmp
 * order; decode gives the same bits back. */
void kl__fsr_encode(fevent x, char out[16]);
fevent kl__fsr_decode(const char in[16]);
/* The URL without a password (for messages). */
const char *kl__fsr_name(const kl__fsr *r);

#endif
