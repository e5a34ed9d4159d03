/* The distributed layer of data-parallel training: MPI (Open MPI from
 * Debian) start-up when a launcher is in the environment or --distributed
 * mpi asks for it, and the collectives of the trainer, each wait polled
 * against a deadline (tr_dist.timeout_s) so that a rank that died or hangs
 * makes the others fail with a message naming the step instead of hanging.
 * Without MPI every call is the identity of one process. MPI is only ever
 * called from the training loop's thread (MPI_THREAD_FUNNELED). */
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train/dist.h"
#include "keel/train.h"

static int g_started, g_failed;
static const tr_dist *g_dist; /* for the SIGTERM message */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A launcher in the environment, by the launcher's own contract (not a keel
 * setting): Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), a PMI launcher (PMI_SIZE:
 * MPICH hydra, srun --mpi=pmi2/pmix) or a Slurm step (SLURM_NTASKS with SLURM_PROCID). */
static int tr_dist_launched(void) { return kl_settings_get()->mpi_launched; }

static void at_exit(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (g_failed) MPI_Abort(MPI_COMM_WORLD, 1); /* the launcher stops the other ranks */
    else MPI_Finalize();
}

void kl__train_dist_fail(tr_dist *d) {
    if (d && d->on && d->world > 1) g_failed = 1;
}

static char *put_num(char *p, long long v) {
    char t[24];
    int n = 0;
    if (v < 0) {
        *p++ = '-';
        v = -v;
    }
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && n < 24);
    while (n) *p++ = t[--n];
    return p;
}

/* The launcher (mpirun) ends the other ranks with SIGTERM when one died:
 * say which rank stopped where, and how to go on (async-signal-safe). */
static void on_term(int sig) {
    char msg[256], *p = msg;
    static const char a[] = "keel: error: rank ", b[] = " of ", c[] = ": stopped by the launcher during step ",
                      d[] = " (another rank died or failed); resume from the last checkpoint with --resume\n";
    memcpy(p, a, sizeof a - 1);
    p += sizeof a - 1;
    p = put_num(p, g_dist ? g_dist->rank : -1);
    memcpy(p, b, sizeof b - 1);
    p += sizeof b - 1;
    p = put_num(p, g_dist ? g_dist->world : -1);
    memcpy(p, c, sizeof c - 1);
    p += sizeof c - 1;
    p = put_num(p, g_dist ? (long long)g_dist->step : -1);
    memcpy(p, d, sizeof d - 1);
    p += sizeof d - 1;
    ssize_t w = write(2, msg, (size_t)(p - msg));
    (void)w;
    _exit(128 + sig);
}

int kl__train_dist_start(tr_dist *d, int mode, double timeout_s, kl_err *e) {
    memset(d, 0, sizeof *d);
    d->world = 1;
    d->timeout_s = timeout_s > 0 ? timeout_s : 120;
    if (mode == KL_TRAIN_DIST_OFF || (mode == KL_TRAIN_DIST_AUTO && !tr_dist_launched())) return KL_OK;
    if (!g_started) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return kl_err_set(e, KL_ESTATE,
                              "--distributed mpi: MPI_Init failed (is the run started by mpirun or srun?)");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        atexit(at_exit);
        g_started = 1;
    }
    d->on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->world);
    if (d->world > 1) {
        g_dist = d;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
    }
    return KL_OK;
}

void kl__train_dist_end(tr_dist *d) {
    if (g_dist != d) return;
    signal(SIGTERM, SIG_DFL);
    g_dist = NULL;
}

static int mpi_error(tr_dist *d, int code, const char *what, kl_err *e) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(code, msg, &len);
    kl__train_dist_fail(d);
    return kl_err_set(
        e, KL_ESTATE,
        "step %lld: %s failed on rank %d of %d: %s (a rank died?); resume from the last checkpoint with --resume",
        (long long)d->step, what, d->rank, d->world, msg);
}

/* Polls the requests until all are done or the deadline passes. A
 * non-blocking collective moves only while its ranks poll it, so the first
 * 0.2 s spin (yielding the core, staying runnable: a sleep would hand a
 * loaded machine's core to another process for a whole time slice at every
 * round of the collective); a longer wait (rank 0 writing a checkpoint, a
 * rank that hangs) sleeps 100 us between polls. */
static int wait_reqs(tr_dist *d, MPI_Request *r, int n, const char *what, kl_err *e) {
    double t0 = now_s(), deadline = t0 + d->timeout_s, t = t0;
    for (long spins = 0;; spins++) {
        int flag = 0, rc = MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_error(d, rc, what, e);
        if (flag) break;
        if (spins < 64) continue; /* most waits end within microseconds */
        if (spins % 64 == 0) t = now_s();
        if (t - t0 < 0.2) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        if (t > deadline) {
            kl__train_dist_fail(d);
            return kl_err_set(e, KL_ETIMEOUT,
                              "step %lld: %s: rank %d of %d waited %.0f s for the other ranks; a rank died or hangs "
                              "(train.distributed.timeout); resume from the last checkpoint with --resume",
                              (long long)d->step, what, d->rank, d->world, d->timeout_s);
        }
    }
    d->comm_s += now_s() - t0;
    return KL_OK;
}

static int allreduce(tr_dist *d, void *buf, int64_t n, MPI_Datatype t, size_t esize, const char *what, kl_err *e) {
    if (!d->on || d->world == 1 || n == 0) return KL_OK;
    for (int64_t off = 0; off < n;) { /* MPI counts are int */
        int64_t k = KL_MIN(n - off, (int64_t)1 << 30);
        MPI_Request r;
        int rc =
            MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * esize, (int)k, t, MPI_SUM, MPI_COMM_WORLD, &r);
        if (rc != MPI_SUCCESS) return mpi_error(d, rc, what, e);
        if ((rc = wait_reqs(d, &r, 1, what, e))) return rc;
        off += k;
    }
    return KL_OK;
}

int kl__train_dist_allreduce_f32(tr_dist *d, float *buf, int64_t n, const char *what, kl_err *e) {
    return allreduce(d, buf, n, MPI_FLOAT, 4, what, e);
}

int kl__train_dist_allgather(tr_dist *d, const void *send, void *recv, size_t bytes, const char *what, kl_err *e) {
    if (!d->on || d->world == 1) {
        if (recv != send) memmove(recv, send, bytes);
        return KL_OK;
    }
    if (bytes > (size_t)INT32_MAX)
        return kl_err_set(e, KL_ERANGE, "%s: %zu bytes per rank exceed one MPI message", what, bytes);
    MPI_Request r;
    int rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &r);
    if (rc != MPI_SUCCESS) return mpi_error(d, rc, what, e);
    return wait_reqs(d, &r, 1, what, e);
}

int kl__train_dist_bcast(tr_dist *d, void *buf, size_t bytes, int root, const char *what, kl_err *e) {
    if (!d->on || d->world == 1 || bytes == 0) return KL_OK;
    for (size_t off = 0; off < bytes;) { /* MPI counts are int */
        size_t n = bytes - off > (size_t)1 << 30 ? (size_t)1 << 30 : bytes - off;
        MPI_Request r;
        int rc = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
        if (rc != MPI_SUCCESS) return mpi_error(d, rc, what, e);
        if ((rc = wait_reqs(d, &r, 1, what, e))) return rc;
        off += n;
    }
    return KL_OK;
}

int kl__train_dist_barrier(tr_dist *d, const char *what, kl_err *e) {
    if (!d->on || d->world == 1) return KL_OK;
    MPI_Request r;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &r);
    if (rc != MPI_SUCCESS) return mpi_error(d, rc, what, e);
    return wait_reqs(d, &r, 1, what, e);
}

int kl__train_dist_reqs_init(tr_dist_reqs *q, kl_err *e) {
    q->n = 0;
    q->req = calloc(TR_DIST_MAX_REQ, sizeof(MPI_Request));
    return q->req ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
}

void kl__train_dist_reqs_free(tr_dist_reqs *q) {
    free(q->req);
    q->req = NULL;
    q->n = 0;
}

int kl__train_dist_iallreduce_f32(tr_dist *d, tr_dist_reqs *q, float *buf, int64_t n, kl_err *e) {
    if (!d->on || d->world == 1 || n == 0) return KL_OK;
    for (int64_t off = 0; off < n;) { /* MPI counts are int */
        int64_t k = KL_MIN(n - off, (int64_t)1 << 30);
        if (q->n >= TR_DIST_MAX_REQ)
            return kl_err_set(e, KL_ERANGE, "more than %d gradient buckets in flight", TR_DIST_MAX_REQ);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                (MPI_Request *)q->req + q->n);
        if (rc != MPI_SUCCESS) return mpi_error(d, rc, "gradient all-reduce", e);
        q->n++;
        off += k;
    }
    return KL_OK;
}

void kl__train_dist_progress(tr_dist *d, tr_dist_reqs *q) {
    if (!d->on || !q->n) return;
    int flag;
    MPI_Testall(q->n, (MPI_Request *)q->req, &flag, MPI_STATUSES_IGNORE);
}

int kl__train_dist_wait_all(tr_dist *d, tr_dist_reqs *q, const char *what, kl_err *e) {
    if (!q->n) return KL_OK;
    int rc = wait_reqs(d, (MPI_Request *)q->req, q->n, what, e);
    q->n = 0;
    return rc;
}
