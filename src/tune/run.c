/* Running a study: the trial orchestration behind `keel tune`. Each trial
 * asks the sampler for values (a configuration already evaluated reuses its
 * value), records itself in the study, and trains through the caller's
 * trainer (kl_tune_run_opts.train: the tune module knows no training
 * library) — in this process when parallel is 1, else in forked child
 * processes that call the trainer directly (no exec, no start-up). A child
 * reports the metric after every epoch over a pipe ("R epoch value") and
 * waits for the pruner's answer on another ('c' go on, 'p' stop now); it
 * ends with "D" or "E message". Everything is recorded in the study, so
 * running again continues it. Several workers (processes, machines) may
 * run one study at once: each trial is claimed in the store
 * (kl_study_trial_claim), the history is re-read from the store before each
 * suggestion (every worker's trials; running ones count for the constant
 * liar), and a heartbeat thread keeps this worker's running trials alive
 * in the store; another worker's trial whose heartbeat stops is re-queued
 * by the next claim. */
#include <keel/tune.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SETS 64 /* the trial's own KEY=VALUE overrides, at most */
#define MAX_INFLIGHT 64 /* trials at once (--parallel), at most */

/* A trial in flight: a forked process, or the one trained in this process. */
typedef struct {
    pid_t pid;
    int slot; /* index into the history */
    int64_t run_id;
    int rfd, wfd; /* from the child (report lines), to the child (decisions) */
    char dir[1024], log[1100];
    char buf[2048]; /* partial line from the child */
    size_t blen;
    char err[768]; /* the child's error line ("E ...") */
    int done, pruned;
    double t0;
} child;

/* One kl_tune_run: the options, the history the sampler and the pruner see
 * (own copy; new trials are appended), the trials in flight, the totals. */
typedef struct {
    const kl_tune_run_opts *o;
    const kl_tune_space *s;
    kl_trial *all; /* the study's trials as last read from the store, this worker's live ones kept */
    size_t nall, cap;
    int ntrials; /* the study's size: --trials (a grid: at most its distinct points) */
    child *kids;
    int nkids;
    int launched, failed_first_metric, none_left, busy; /* busy: no trial free, others still running */
    double t_start, train_seconds, train_cpu; /* summed over the trials trained now: wall, CPU */
    /* the heartbeat thread: this worker's trials in flight */
    pthread_t hb;
    pthread_mutex_t hbmu;
    pthread_cond_t hbcv;
    int hb_init, hb_on, hb_stop, nhb;
    int64_t hb_id[MAX_INFLIGHT + 1];
    int hb_lost[MAX_INFLIGHT + 1]; /* another worker marked it lost: its result is not recorded */
    double hb_interval_s, hb_timeout_s;
} run;

static double now_s(void) { return (double)kl_time_mono_ns() / 1e9; }

static int stopped(const run *R) { return R->o->stop && *R->o->stop; }

static void say(const run *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const run *R, const char *fmt, ...) {
    if (!R->o->progress) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(R->o->progress, fmt, ap);
    va_end(ap);
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void kl_tune_params_str(const kl_tune_space *s, const kl_tune_value *v, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int p = 0; p < s->n && k < n; p++) {
        if (!v[p].present) continue;
        char val[96];
        k += (size_t)snprintf(out + k, n - k, "%s%s=%s", k ? ", " : "", s->p[p].name,
                              kl_tune_value_str(&s->p[p], v[p], val, sizeof val));
    }
}

/* ==================================================================
 * Heartbeat: this worker's running trials stay alive in the store
 * ================================================================== */

static void *hb_main(void *arg) {
    run *R = arg;
    pthread_mutex_lock(&R->hbmu);
    while (!R->hb_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + until.tv_nsec * 1e-9 + R->hb_interval_s;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&R->hbcv, &R->hbmu, &until);
        if (R->hb_stop) break;
        int n = R->nhb;
        int64_t ids[MAX_INFLIGHT + 1];
        memcpy(ids, R->hb_id, (size_t)n * sizeof *ids);
        pthread_mutex_unlock(&R->hbmu); /* the store is written without holding the list */
        for (int i = 0; i < n; i++) {
            kl_err e = {0};
            int rc = kl_study_trial_heartbeat(R->o->study, ids[i], &e);
            if (rc == KL_ESTATE) {
                pthread_mutex_lock(&R->hbmu);
                for (int k = 0; k < R->nhb; k++)
                    if (R->hb_id[k] == ids[i]) R->hb_lost[k] = 1;
                pthread_mutex_unlock(&R->hbmu);
            } else if (rc) {
                kl_log(KL_LOG_WARN, "tune", "heartbeat of run %lld: %s", (long long)ids[i], kl_err_what(&e));
            }
        }
        pthread_mutex_lock(&R->hbmu);
    }
    pthread_mutex_unlock(&R->hbmu);
    return NULL;
}

static void hb_add(run *R, int64_t id) {
    pthread_mutex_lock(&R->hbmu);
    if (R->nhb < MAX_INFLIGHT + 1) {
        R->hb_id[R->nhb] = id;
        R->hb_lost[R->nhb++] = 0;
    }
    pthread_mutex_unlock(&R->hbmu);
}

/* Drops a trial from the heartbeat; returns 1 when it was marked lost. */
static int hb_remove(run *R, int64_t id) {
    int lost = 0;
    pthread_mutex_lock(&R->hbmu);
    for (int k = 0; k < R->nhb; k++)
        if (R->hb_id[k] == id) {
            lost = R->hb_lost[k];
            R->hb_id[k] = R->hb_id[--R->nhb];
            R->hb_lost[k] = R->hb_lost[R->nhb];
            break;
        }
    pthread_mutex_unlock(&R->hbmu);
    return lost;
}

static int hb_start(run *R, kl_err *e) {
    double to = R->o->heartbeat_timeout_s > 0 ? R->o->heartbeat_timeout_s : 30;
    R->hb_timeout_s = to;
    R->hb_interval_s = KL_MAX(0.1, KL_MIN(5.0, to / 6)); /* several beats per timeout */
    pthread_mutex_init(&R->hbmu, NULL);
    pthread_cond_init(&R->hbcv, NULL);
    R->hb_init = 1;
    int err = pthread_create(&R->hb, NULL, hb_main, R);
    if (err) return kl_err_set(e, -err, "tune: starting the heartbeat thread: %s", strerror(err));
    R->hb_on = 1;
    return KL_OK;
}

static void hb_stop(run *R) {
    if (!R->hb_init) return;
    if (R->hb_on) {
        pthread_mutex_lock(&R->hbmu);
        R->hb_stop = 1;
        pthread_cond_signal(&R->hbcv);
        pthread_mutex_unlock(&R->hbmu);
        pthread_join(R->hb, NULL);
        R->hb_on = 0;
    }
    pthread_mutex_destroy(&R->hbmu);
    pthread_cond_destroy(&R->hbcv);
}

/* ==================================================================
 * Training one trial
 * ================================================================== */

/* The trainer on the trial's values: the fixed overrides, then one
 * NAME=VALUE per present parameter. */
static int train_trial(const kl_tune_run_opts *o, const kl_tune_value *v, const char *dir, FILE *report,
                       kl_tune_value_fn fn, void *ctx, kl_err *e) {
    char sets[MAX_SETS][256];
    const char **setp = calloc((size_t)o->nsets + MAX_SETS, sizeof *setp);
    if (!setp) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int ns = 0;
    for (int i = 0; i < o->nsets; i++) setp[ns++] = o->sets[i];
    for (int p = 0, k = 0; p < o->space->n && k < MAX_SETS; p++) {
        if (!v[p].present) continue;
        char val[96];
        snprintf(sets[k], sizeof sets[0], "%s=%s", o->space->p[p].name,
                 kl_tune_value_str(&o->space->p[p], v[p], val, sizeof val));
        setp[ns++] = sets[k++];
    }
    int rc = o->train(o->train_ctx, setp, ns, dir, report, fn, ctx, e);
    free(setp);
    return rc;
}

typedef struct {
    int wfd, rfd;
} trial_io;

/* In the child, after each epoch: "R epoch value" to the parent, then wait
 * for its answer: 'c' go on, 'p' prune (stop now). */
static int child_value(void *ctx, int epoch, double v) {
    trial_io *io = ctx;
    char line[96];
    int n = snprintf(line, sizeof line, "R %d %.17g\n", epoch, v);
    if (write_all(io->wfd, line, (size_t)n)) return 1; /* the parent is gone */
    char d;
    ssize_t r;
    while ((r = read(io->rfd, &d, 1)) < 0 && errno == EINTR) {}
    return r != 1 || d == 'p';
}

/* The child: train in-process, tell the parent how it ended, _exit. */
static void trial_child(const kl_tune_run_opts *o, int threads, const kl_tune_value *v, int wfd, int rfd,
                        const char *dir, const char *logpath) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int lfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (lfd >= 0) {
        dup2(lfd, 1);
        dup2(lfd, 2);
        close(lfd);
    }
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) {
        dup2(nul, 0);
        close(nul);
    }
    kl_threads_set(threads);
    trial_io io = {wfd, rfd};
    kl_err e = {0};
    int rc = train_trial(o, v, dir, stdout, child_value, &io, &e);
    char line[1100];
    int n;
    if (rc) {
        const char *w = kl_err_what(&e);
        fprintf(stderr, "error: %s\n", w);
        n = snprintf(line, sizeof line, "E %.1000s\n", w);
        for (char *q = line + 2; q < line + n - 1; q++)
            if (*q == '\n') *q = ' ';
    } else {
        n = snprintf(line, sizeof line, "D\n");
    }
    fflush(stdout);
    fflush(stderr);
    write_all(wfd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
    _exit(rc ? 1 : 0);
}

static int fork_trial(const kl_tune_run_opts *o, int threads, const kl_tune_value *v, child *c, kl_err *e) {
    int up[2], down[2];
    if (pipe(up)) return kl_err_set(e, -errno, "pipe: %s", strerror(errno));
    if (pipe(down)) {
        int err = errno;
        close(up[0]);
        close(up[1]);
        return kl_err_set(e, -err, "pipe: %s", strerror(err));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(up[0]);
        close(up[1]);
        close(down[0]);
        close(down[1]);
        return kl_err_set(e, -err, "fork: %s", strerror(err));
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        trial_child(o, threads, v, up[1], down[0], c->dir, c->log);
    }
    close(up[1]);
    close(down[0]);
    c->pid = pid;
    c->rfd = up[0];
    c->wfd = down[1];
    fcntl(c->rfd, F_SETFD, FD_CLOEXEC);
    fcntl(c->wfd, F_SETFD, FD_CLOEXEC);
    return KL_OK;
}

/* A trial reported its metric for an epoch: record it, ask the pruner. */
static void report_epoch(run *R, child *c, long long epoch, double v) {
    kl_trial *t = &R->all[c->slot];
    if (epoch < 0 || epoch > 100000) return;
    if (epoch >= t->ninter) {
        double *ni = realloc(t->inter, (size_t)(epoch + 1) * sizeof *ni);
        if (!ni) return;
        for (int k = t->ninter; k <= epoch; k++) ni[k] = NAN;
        t->inter = ni;
        t->ninter = (int)epoch + 1;
    }
    t->inter[epoch] = v;
    kl_err e = {0};
    if (kl_study_trial_report(R->o->study, c->run_id, (int)epoch, v, &e))
        kl_log(KL_LOG_WARN, "tune", "trial %d: recording %s: %s", t->number, R->o->metric, kl_err_what(&e));
    if (!c->pruned && kl_tune_should_prune(R->o->pruner, R->all, R->nall, t, (int)epoch, R->o->minimize)) c->pruned = 1;
}

/* Handles one complete line from a child: records a reported value and
 * answers with the pruner's decision. */
static void child_line(run *R, child *c, const char *line) {
    if (line[0] == 'D') {
        c->done = 1;
        return;
    }
    if (line[0] == 'E') {
        snprintf(c->err, sizeof c->err, "%s", line + 2);
        return;
    }
    if (line[0] != 'R') return;
    char *end;
    long long epoch = strtoll(line + 2, &end, 10);
    report_epoch(R, c, epoch, strtod(end, NULL));
    char answer = c->pruned ? 'p' : 'c';
    write_all(c->wfd, &answer, 1);
}

/* Reads what a child has written; returns 1 at end of file (it exited). */
static int child_read(run *R, child *c) {
    ssize_t r = read(c->rfd, c->buf + c->blen, sizeof c->buf - 1 - c->blen);
    if (r < 0) return errno == EINTR || errno == EAGAIN ? 0 : 1;
    if (r == 0) return 1;
    c->blen += (size_t)r;
    c->buf[c->blen] = 0;
    char *p = c->buf, *nl;
    while ((nl = strchr(p, '\n'))) {
        *nl = 0;
        child_line(R, c, p);
        p = nl + 1;
    }
    c->blen = (size_t)(c->buf + c->blen - p);
    memmove(c->buf, p, c->blen);
    if (c->blen == sizeof c->buf - 1) c->blen = 0; /* an overlong line: drop it */
    return 0;
}

/* ---- a trial in the tune process itself (parallel 1) -------------------- */

typedef struct {
    run *R;
    child *c;
} inproc_io;

static int inproc_value(void *ctx, int epoch, double v) {
    inproc_io *io = ctx;
    report_epoch(io->R, io->c, epoch, v);
    return io->c->pruned || stopped(io->R);
}

static double cpu_of(const struct rusage *ru) {
    return (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec * 1e-6 + (double)ru->ru_stime.tv_sec +
        (double)ru->ru_stime.tv_usec * 1e-6;
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return cpu_of(&ru);
}

/* Trains one trial in this process; c->done or c->err tell how it ended.
 * Returns its CPU seconds. */
static double run_inproc(run *R, child *c) {
    double cpu0 = cpu_now();
    FILE *log = fopen(c->log, "w");
    inproc_io io = {R, c};
    kl_err e = {0};
    if (train_trial(R->o, R->all[c->slot].params, c->dir, log ? log : stderr, inproc_value, &io, &e)) {
        snprintf(c->err, sizeof c->err, "%s", kl_err_what(&e));
        if (log) fprintf(log, "error: %s\n", c->err);
    } else {
        c->done = 1;
    }
    if (log) fclose(log);
    return cpu_now() - cpu0;
}

/* ==================================================================
 * Ending a trial
 * ================================================================== */

/* last non-empty line of a file (a crashed trial's last words) */
static void last_line(const char *path, char *out, size_t n) {
    out[0] = 0;
    char *text;
    size_t len;
    if (kl_read_file(path, &text, &len, NULL)) return;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = 0;
    char *nl = strrchr(text, '\n');
    snprintf(out, n, "%s", nl ? nl + 1 : text);
    kl_mem_free(text);
}

/* a trial's objective: the best of its epochs' values */
static double objective_of(const kl_trial *t, int minimize) {
    double best = NAN;
    for (int i = 0; i < t->ninter; i++) {
        double v = t->inter[i];
        if (isnan(v)) continue;
        if (isnan(best) || (minimize ? v < best : v > best)) best = v;
    }
    return best;
}

/* A successful trial: complete with its objective, or failed when it never
 * reported the metric (returns 1 then, with e set). */
static int end_done(run *R, child *c, double secs, const char *desc, kl_err *te, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    kl_trial *tr = &R->all[c->slot];
    double v = objective_of(tr, o->minimize);
    if (isnan(v)) {
        char msg[512];
        snprintf(
            msg, sizeof msg,
            "metric '%s' never appeared in the trial's epochs (the training loop reports val_accuracy, val_loss and "
            "train_loss; see %s/metrics.csv)",
            o->metric, c->dir);
        tr->state = KL_TRIAL_FAILED;
        kl_study_trial_end(o->study, c->run_id, KL_TRIAL_FAILED, NAN, msg, te);
        kl_err_set(e, KL_ENOTFOUND, "trial %d: %s", tr->number, msg);
        return 1;
    }
    tr->state = KL_TRIAL_COMPLETE;
    tr->value = v;
    /* its exported model stays in c->dir: recorded for keel tune register */
    kl_err me = {0};
    if (kl_study_trial_set_model_dir(o->study, c->run_id, c->dir, &me))
        kl_log(KL_LOG_WARN, "tune", "recording trial %d's model folder: %s", tr->number, kl_err_what(&me));
    if (kl_study_trial_end(o->study, c->run_id, KL_TRIAL_COMPLETE, v, NULL, te) != KL_ESTATE)
        say(R, "trial %d: %s = %.6g (%.1f s) [%s]\n", tr->number, o->metric, v, secs, desc);
    return 0;
}

/* Records how a trial ended (state, value or error) and prints a line.
 * Returns 1 when a successful trial never reported the metric. */
static int finish_trial(run *R, child *c, int status, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    kl_trial *tr = &R->all[c->slot];
    double secs = now_s() - c->t0;
    char desc[1024];
    kl_tune_params_str(R->s, tr->params, desc, sizeof desc);
    kl_err te = {0};
    int missing = 0;
    /* lost: the heartbeat thread found it so, or recording its end does (the
     * end is written only while the trial is still running: another worker
     * may have re-queued it, and its re-run records the number) */
    int lost = hb_remove(R, c->run_id);
    if (!lost && c->pruned) {
        tr->state = KL_TRIAL_PRUNED;
        if (!(lost = kl_study_trial_end(o->study, c->run_id, KL_TRIAL_PRUNED, NAN, "pruned", &te) == KL_ESTATE))
            say(R, "trial %d: pruned after %d epochs (%.1f s) [%s]\n", tr->number, tr->ninter, secs, desc);
    } else if (!lost && c->done && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        missing = end_done(R, c, secs, desc, &te, e);
        lost = te.code == KL_ESTATE;
    } else if (!lost) {
        char err[768];
        snprintf(err, sizeof err, "%s", c->err);
        if (!err[0]) last_line(c->log, err, sizeof err);
        if (!err[0])
            snprintf(err, sizeof err, "exited with status %d",
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        tr->state = KL_TRIAL_FAILED;
        if (!(lost = kl_study_trial_end(o->study, c->run_id, KL_TRIAL_FAILED, NAN, err, &te) == KL_ESTATE))
            say(R, "trial %d: failed (%s) [%s]\n", tr->number, err, desc);
    }
    if (lost) {
        tr->state = KL_TRIAL_FAILED;
        say(R, "trial %d: lost (another worker marked it failed after no heartbeat); not recorded [%s]\n",
            tr->number, desc);
        return 0;
    }
    if (te.code) kl_log(KL_LOG_WARN, "tune", "recording trial %d: %s", tr->number, kl_err_what(&te));
    return missing;
}

static int same_params(const kl_tune_space *s, const kl_tune_value *a, const kl_tune_value *b) {
    for (int p = 0; p < s->n; p++) {
        if (a[p].present != b[p].present) return 0;
        if (a[p].present && a[p].v != b[p].v) return 0;
    }
    return 1;
}

/* ==================================================================
 * The study loop
 * ================================================================== */

/* 1 when slot i is a trial this worker is running now (its live values
 * are newer than the store's). */
static int in_flight(const run *R, size_t i) {
    for (int k = 0; k < R->nkids; k++)
        if (R->kids[k].slot == (int)i) return 1;
    return 0;
}

static int copy_trial(kl_trial *dst, const kl_trial *src, int nparams) {
    kl_tune_value *p = dst->params ? dst->params : malloc((size_t)nparams * sizeof *p);
    double *inter = src->ninter ? malloc((size_t)src->ninter * sizeof *inter) : NULL;
    if (!p || (src->ninter && !inter)) {
        if (!dst->params) free(p);
        free(inter);
        return KL_ENOMEM;
    }
    memcpy(p, src->params, (size_t)nparams * sizeof *p);
    if (inter) memcpy(inter, src->inter, (size_t)src->ninter * sizeof *inter);
    free(dst->inter);
    *dst = *src;
    dst->params = p;
    dst->inter = inter;
    return KL_OK;
}

/* Re-reads the study from the store: every worker's trials. A trial seen
 * before keeps its slot (updated, unless this worker runs it now); new
 * ones are appended. */
static int refresh_history(run *R, kl_err *e) {
    const kl_trial *loaded;
    size_t nloaded;
    int rc = kl_study_load(R->o->study, &loaded, &nloaded, e);
    if (rc) return rc;
    for (size_t i = 0; i < nloaded; i++) {
        size_t slot = 0;
        while (slot < R->nall && R->all[slot].run_id != loaded[i].run_id) slot++;
        if (slot < R->nall && in_flight(R, slot)) continue;
        if (slot == R->nall) {
            if (R->nall == R->cap) {
                size_t nc = R->cap ? R->cap * 2 : 64;
                kl_trial *na = realloc(R->all, nc * sizeof *na);
                if (!na) return kl_err_set(e, KL_ENOMEM, "out of memory");
                R->all = na;
                R->cap = nc;
            }
            memset(&R->all[R->nall++], 0, sizeof *R->all);
        }
        if (copy_trial(&R->all[slot], &loaded[i], R->s->n)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    return KL_OK;
}

/* A configuration already evaluated: the new trial takes its value (and its
 * model) without training. */
static int reuse_cached(run *R, kl_trial *tr, const kl_trial *same, const char *desc, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    char note[64], mdir[4096];
    snprintf(note, sizeof note, "cached from trial %d", same->number);
    tr->state = KL_TRIAL_COMPLETE;
    tr->value = same->value;
    if (same->run_id && !kl_study_trial_model_dir(o->study, same->run_id, mdir, sizeof mdir, NULL))
        kl_study_trial_set_model_dir(o->study, tr->run_id, mdir, NULL);
    int rc = kl_study_trial_end(o->study, tr->run_id, KL_TRIAL_COMPLETE, tr->value, note, e);
    if (!rc)
        say(R, "trial %d: %s = %.6g (cached: same as trial %d) [%s]\n", tr->number, o->metric, tr->value, same->number,
            desc);
    return rc;
}

/* Trains trial tr here (parallel 1) or in a forked child. */
static int launch(run *R, kl_trial *tr, const char *desc, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    child *c = &R->kids[R->nkids];
    memset(c, 0, sizeof *c);
    c->slot = (int)(tr - R->all);
    c->run_id = tr->run_id;
    c->rfd = c->wfd = -1;
    c->t0 = now_s();
    snprintf(c->dir, sizeof c->dir, "%s/trial-%d", o->out_dir, tr->number);
    snprintf(c->log, sizeof c->log, "%s/trial-%d.log", o->out_dir, tr->number);
    kl_rm_rf(c->dir, NULL); /* a leftover of an interrupted run */
    R->launched++;
    say(R, "trial %d: started [%s]\n", tr->number, desc);
    hb_add(R, tr->run_id);
    if (o->parallel == 1) { /* in this process: no fork, memory reused from trial to trial */
        R->train_cpu += run_inproc(R, c);
        R->train_seconds += now_s() - c->t0;
        if (stopped(R) && !c->pruned) {
            hb_remove(R, tr->run_id);
            kl_study_trial_release(o->study, tr->run_id, "interrupted", NULL);
            say(R, "trial %d: interrupted (re-queued)\n", tr->number);
            return KL_OK;
        }
        R->failed_first_metric |= finish_trial(R, c, 0, e);
        return KL_OK;
    }
    int threads = o->threads_per_trial > 0 ? o->threads_per_trial : KL_MAX(1, kl_threads_default() / o->parallel);
    int rc = fork_trial(o, threads, tr->params, c, e);
    if (rc) {
        hb_remove(R, tr->run_id);
        kl_study_trial_end(o->study, tr->run_id, KL_TRIAL_FAILED, NAN, kl_err_what(e), NULL);
        return rc;
    }
    R->nkids++;
    return KL_OK;
}

/* Claims the next trial: its slot in the refreshed history, or NULL with
 * R->none_left or R->busy set. */
static int claim_next(run *R, kl_trial **out, int *requeued, kl_err *e) {
    *out = NULL;
    kl_study_claim c;
    int rc = kl_study_trial_claim(R->o->study, R->ntrials, R->hb_timeout_s, &c, e);
    R->busy = rc == KL_EBUSY;
    R->none_left = rc == KL_ENOTFOUND;
    if (R->busy || R->none_left) {
        kl_err_clear(e);
        return KL_OK;
    }
    if (rc) return rc;
    if (c.lost_marked) kl_log(KL_LOG_INFO, "tune", "marked %d trial(s) of lost workers failed", c.lost_marked);
    if ((rc = refresh_history(R, e))) return rc;
    for (size_t i = 0; i < R->nall; i++)
        if (R->all[i].run_id == c.run_id) *out = &R->all[i];
    if (!*out) return kl_err_set(e, KL_EINTERNAL, "tune: claimed trial %d (run %lld) is not in the study", c.number,
                                 (long long)c.run_id);
    (*out)->state = KL_TRIAL_RUNNING;
    *requeued = c.requeued;
    return KL_OK;
}

/* The claimed trial's values: a re-queued trial keeps the recorded ones;
 * else the sampler's, recorded now (other workers see them as running). */
static int choose_params(run *R, kl_trial *tr, int requeued, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    if (requeued) return KL_OK;
    int rc = kl_tune_suggest(R->s, o->sampler, R->all, R->nall, o->minimize, tr->number, tr->params, e);
    return rc ? rc : kl_study_trial_params(o->study, tr->run_id, tr->params, e);
}

/* Starts trials while there are free slots, trials to claim and time. */
static int start_trials(run *R, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    int rc;
    while (!stopped(R) && R->nkids < o->parallel && !R->failed_first_metric &&
           !(o->timeout_s > 0 && now_s() - R->t_start > o->timeout_s)) {
        kl_trial *tr = NULL;
        int requeued = 0;
        if ((rc = claim_next(R, &tr, &requeued, e)) || !tr) return rc;
        if ((rc = choose_params(R, tr, requeued, e))) {
            kl_study_trial_end(o->study, tr->run_id, KL_TRIAL_FAILED, NAN, kl_err_what(e), NULL);
            return rc;
        }
        char desc[1024];
        kl_tune_params_str(R->s, tr->params, desc, sizeof desc);
        if (requeued) say(R, "trial %d: re-queued (its worker was lost)\n", tr->number);
        const kl_trial *same = NULL;
        for (size_t i = 0; i < R->nall && !same; i++)
            if (&R->all[i] != tr && R->all[i].state == KL_TRIAL_COMPLETE &&
                same_params(R->s, R->all[i].params, tr->params))
                same = &R->all[i];
        rc = same ? reuse_cached(R, tr, same, desc, e) : launch(R, tr, desc, e);
        if (rc) return rc;
        if (o->parallel == 1 && stopped(R)) return KL_OK;
    }
    return KL_OK;
}

/* Waits for the running children: their reports, the pruner's answers,
 * their exits. */
static int watch_children(run *R, kl_err *e) {
    struct pollfd pfd[64];
    for (int k = 0; k < R->nkids; k++) pfd[k] = (struct pollfd){R->kids[k].rfd, POLLIN, 0};
    if (poll(pfd, (nfds_t)R->nkids, 200) < 0 && errno != EINTR)
        return kl_err_set(e, -errno, "poll: %s", strerror(errno));
    for (int k = 0; k < R->nkids; k++) {
        child *c = &R->kids[k];
        if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (!child_read(R, c)) continue;
        int status = 0;
        struct rusage ru = {0};
        while (wait4(c->pid, &status, 0, &ru) < 0 && errno == EINTR) {}
        R->train_cpu += cpu_of(&ru);
        close(c->rfd);
        close(c->wfd);
        pfd[k] = pfd[R->nkids - 1];
        R->train_seconds += now_s() - c->t0;
        R->failed_first_metric |= finish_trial(R, c, status, e);
        R->kids[k] = R->kids[--R->nkids];
        k--;
    }
    return KL_OK;
}

/* Ends the children still running (a stop or an error); when `why` is
 * given their trials are given back (re-queued), else they stay running in
 * the store until a claim finds them lost. */
static void end_children(run *R, const char *why) {
    for (int k = 0; k < R->nkids; k++) {
        kill(R->kids[k].pid, SIGTERM);
        waitpid(R->kids[k].pid, NULL, 0);
        hb_remove(R, R->kids[k].run_id);
        close(R->kids[k].rfd);
        close(R->kids[k].wfd);
        if (why) kl_study_trial_release(R->o->study, R->kids[k].run_id, why, NULL);
    }
    R->nkids = 0;
}

/* The study's size: --trials, or a grid's distinct points when fewer. */
static int study_size(run *R, kl_err *e) {
    const kl_tune_run_opts *o = R->o;
    R->ntrials = (int)o->trials;
    if (o->sampler->kind != KL_SAMPLER_GRID) return KL_OK;
    if (!kl_tune_grid_size(R->s, o->sampler)) return kl_err_set(e, KL_EINVAL, "grid: the space has too many points");
    kl_tune_value *pt = malloc((size_t)R->s->n * sizeof *pt);
    if (!pt) return kl_err_set(e, KL_ENOMEM, "out of memory");
    uint64_t distinct = 0;
    if (kl_tune_grid_nth(R->s, o->sampler, o->trials - 1, pt, &distinct) == KL_ENOTFOUND) {
        kl_log(KL_LOG_INFO, "tune", "grid: %llu points, fewer than --trials %zu", (unsigned long long)distinct,
               o->trials);
        R->ntrials = (int)distinct;
    }
    free(pt);
    return KL_OK;
}

/* The study's run, stage by stage: study_size, refresh_history (trials
 * recorded so far), hb_start (heartbeats), then until done or stopped:
 * start_trials (forked trainers), watch_children; end_children, hb_stop and a
 * last refresh_history for the result. */
int kl_tune_run(const kl_tune_run_opts *o, kl_tune_run_result *res, kl_err *e) {
    memset(res, 0, sizeof *res);
    if (!o->study || !o->space || !o->train || !o->metric || !o->sampler || !o->pruner || !o->out_dir ||
        o->trials < 1 || o->trials > 1000000 || o->parallel < 1 || o->parallel > MAX_INFLIGHT)
        return kl_err_set(e, KL_EINVAL, "tune: incomplete run options");
    run R = {.o = o, .s = o->space, .t_start = now_s()};
    R.kids = calloc((size_t)o->parallel, sizeof *R.kids);
    int rc = R.kids ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc) rc = study_size(&R, e);
    if (!rc) rc = refresh_history(&R, e);
    if (!rc && R.nall) kl_log(KL_LOG_INFO, "tune", "continuing the study with %zu trials recorded", R.nall);
    if (!rc) rc = hb_start(&R, e);
    while (!rc && !stopped(&R)) {
        if ((rc = start_trials(&R, e))) break;
        if (R.nkids == 0) {
            int out_of_time = o->timeout_s > 0 && now_s() - R.t_start > o->timeout_s;
            if (!R.busy || R.failed_first_metric || out_of_time) break;
            /* every trial is taken but some run elsewhere: one may be lost and re-queued */
            struct timespec ts = {0, (long)(KL_MIN(1.0, R.hb_timeout_s / 4) * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        rc = watch_children(&R, e);
    }
    if (!rc && stopped(&R)) {
        end_children(&R, "interrupted");
        rc = kl_err_set(e, KL_ECANCELED, "interrupted; re-run the same command to continue the study");
    }
    if (!rc && R.failed_first_metric) rc = KL_ENOTFOUND; /* e says which trial */
    end_children(&R, NULL);
    hb_stop(&R);
    kl_err fe = {0}; /* the result is the study as it is now: other workers' last trials too */
    if (R.hb_init && refresh_history(&R, &fe))
        kl_log(KL_LOG_WARN, "tune", "reading the study's last trials: %s", kl_err_what(&fe));
    free(R.kids);
    res->trials = R.all;
    res->n = R.nall;
    res->launched = R.launched;
    res->seconds = now_s() - R.t_start;
    res->train_seconds = R.train_seconds;
    res->train_cpu_seconds = R.train_cpu;
    return rc;
}

void kl_tune_run_result_free(kl_tune_run_result *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->trials[i].params);
        free(r->trials[i].inter);
    }
    free(r->trials);
    memset(r, 0, sizeof *r);
}
