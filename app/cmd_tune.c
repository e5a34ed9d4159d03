/* keel tune: hyperparameter search over a training spec. Each trial is a
 * forked child process of the tune process that calls the training library
 * directly (kl_train_run with `--set`-style overrides and a per-epoch
 * callback): no exec, no start-up, and a pruned trial stops at once and
 * writes only its metrics.csv. The child reports the metric after every
 * epoch over a pipe and waits for the pruner's answer on another; the parent
 * records everything in the experiment store as a study, so re-running the
 * same command continues the study. `keel tune show STUDY` reports it;
 * `keel tune register STUDY --name N` registers the best trial's model. */
#include "app.h"

#include <keel/track.h>
#include <keel/train.h>
#include <keel/tune.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ==================================================================
 * Trials in flight: one forked process each
 * ================================================================== */

typedef struct {
    pid_t pid;
    int slot;          /* index into the history array */
    int64_t run_id;
    int rfd, wfd;      /* from the child (report lines), to the child (decisions) */
    char dir[1024], log[1100];
    char buf[2048];    /* partial line from the child */
    size_t blen;
    char err[768];     /* the child's error line ("E ...") */
    int done, pruned;
    double t0;
} child;

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { (void)sig; interrupted = 1; }

static double now_s(void) { return (double)kl_time_mono_ns() / 1e9; }

/* the metric a trial reports, from one epoch's values (NaN = not there) */
static double epoch_metric(const char *metric, const kl_train_epoch *ep) {
    if (!strcmp(metric, "val_accuracy") || !strcmp(metric, "val_acc")) return ep->val_accuracy;
    if (!strcmp(metric, "val_loss")) return ep->val_loss;
    if (!strcmp(metric, "train_loss")) return ep->train_loss;
    return NAN;
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

typedef struct { const char *metric; int wfd, rfd; } trial_io;

/* In the child, after each epoch: "R epoch value" to the parent, then wait
 * for its answer: 'c' go on, 'p' prune (stop now). */
static int trial_epoch(void *ctx, const kl_train_epoch *ep) {
    trial_io *io = ctx;
    double v = epoch_metric(io->metric, ep);
    if (isnan(v)) return 0;
    char line[96];
    int n = snprintf(line, sizeof line, "R %lld %.17g\n", (long long)ep->epoch, v);
    if (write_all(io->wfd, line, (size_t)n)) return 1; /* the parent is gone */
    char d;
    ssize_t r;
    while ((r = read(io->rfd, &d, 1)) < 0 && errno == EINTR) {}
    return r != 1 || d == 'p';
}

/* --verify of keel tune run: how every trial checks a Parquet dataset
 * against its manifest (set once before the trials; forked trials inherit it). */
static int tune_verify;

/* Trains one trial: SPEC with the trial's values as --set overrides, the
 * summary into report, fn called after every epoch. */
/* --set KEY=VALUE of keel tune run: the same overrides of every trial,
 * before the trial's own values (set once before the trials; forked trials
 * inherit them). */
static const char *tune_sets[APP_MAX_VALUES];
static int tune_nsets;

static int train_trial(const char *spec, const kl_tune_space *s, const kl_tune_value *v, const char *dir, FILE *report,
                       kl_train_epoch_fn fn, void *ctx, kl_err *e) {
    char sets[64][256];
    const char *setp[64 + APP_MAX_VALUES];
    int ns = 0;
    for (int i = 0; i < tune_nsets; i++) setp[ns++] = tune_sets[i];
    for (int p = 0; p < s->n && ns < 64 + tune_nsets; p++) {
        if (!v[p].present) continue;
        char val[96];
        char *slot = sets[ns - tune_nsets];
        snprintf(slot, sizeof sets[0], "%s=%s", s->p[p].name, kl_tune_value_str(&s->p[p], v[p], val, sizeof val));
        setp[ns++] = slot;
    }
    kl_train_opts o = {0};
    o.out_dir = dir;
    o.quiet = 1;
    o.report = report;
    o.sets = setp;
    o.nsets = ns;
    o.on_epoch = fn;
    o.on_epoch_ctx = ctx;
    o.verify = tune_verify;
    return kl_train_run(spec, &o, e);
}

/* The child: train in-process, tell the parent how it ended, _exit. */
static void trial_child(const char *spec, const kl_tune_space *s, const kl_tune_value *v, const char *metric,
                        int threads, int wfd, int rfd, const char *dir, const char *logpath) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int lfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (lfd >= 0) { dup2(lfd, 1); dup2(lfd, 2); close(lfd); }
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) { dup2(nul, 0); close(nul); }
    kl_threads_set(threads);
    trial_io io = {metric, wfd, rfd};
    kl_err e = {0};
    int rc = train_trial(spec, s, v, dir, stdout, trial_epoch, &io, &e);
    char line[1100];
    int n;
    if (rc) {
        const char *w = kl_err_what(&e);
        fprintf(stderr, "error: %s\n", w);
        n = snprintf(line, sizeof line, "E %.1000s\n", w);
        for (char *q = line + 2; q < line + n - 1; q++) if (*q == '\n') *q = ' ';
    } else {
        n = snprintf(line, sizeof line, "D\n");
    }
    fflush(stdout);
    fflush(stderr);
    write_all(wfd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
    _exit(rc ? 1 : 0);
}

static int fork_trial(const char *spec, const kl_tune_space *s, const kl_tune_value *v, const char *metric, int threads,
                      child *c, kl_err *e) {
    int up[2], down[2];
    if (pipe(up)) return kl_err_set(e, -errno, "pipe: %s", strerror(errno));
    if (pipe(down)) {
        int err = errno;
        close(up[0]); close(up[1]);
        return kl_err_set(e, -err, "pipe: %s", strerror(err));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(up[0]); close(up[1]); close(down[0]); close(down[1]);
        return kl_err_set(e, -err, "fork: %s", strerror(err));
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        trial_child(spec, s, v, metric, threads, up[1], down[0], c->dir, c->log);
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

/* What recording a trial needs: the study, the history the pruner and the
 * sampler see (own copy; new trials are appended), the settings. */
typedef struct {
    kl_study *st;
    const kl_tune_space *s;
    kl_trial *all;
    size_t nall;
    const kl_pruner_opts *po;
    int minimize;
    const char *metric;
} tune_ctx;

/* A trial reported its metric for an epoch: record it, ask the pruner. */
static void report_epoch(tune_ctx *x, child *c, long long epoch, double v) {
    kl_trial *t = &x->all[c->slot];
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
    if (kl_study_trial_report(x->st, c->run_id, (int)epoch, v, &e))
        kl_log(KL_LOG_WARN, "tune", "trial %d: recording %s: %s", t->number, x->metric, kl_err_what(&e));
    if (!c->pruned && kl_tune_should_prune(x->po, x->all, x->nall, t, (int)epoch, x->minimize)) c->pruned = 1;
}

/* Handles one complete line from a child: records a reported value and
 * answers with the pruner's decision. */
static void child_line(tune_ctx *x, child *c, const char *line) {
    if (line[0] == 'D') { c->done = 1; return; }
    if (line[0] == 'E') { snprintf(c->err, sizeof c->err, "%s", line + 2); return; }
    if (line[0] != 'R') return;
    char *end;
    long long epoch = strtoll(line + 2, &end, 10);
    report_epoch(x, c, epoch, strtod(end, NULL));
    char answer = c->pruned ? 'p' : 'c';
    write_all(c->wfd, &answer, 1);
}

/* Reads what a child has written; returns 1 at end of file (it exited). */
static int child_read(tune_ctx *x, child *c) {
    ssize_t r = read(c->rfd, c->buf + c->blen, sizeof c->buf - 1 - c->blen);
    if (r < 0) return errno == EINTR || errno == EAGAIN ? 0 : 1;
    if (r == 0) return 1;
    c->blen += (size_t)r;
    c->buf[c->blen] = 0;
    char *p = c->buf, *nl;
    while ((nl = strchr(p, '\n'))) {
        *nl = 0;
        child_line(x, c, p);
        p = nl + 1;
    }
    c->blen = (size_t)(c->buf + c->blen - p);
    memmove(c->buf, p, c->blen);
    if (c->blen == sizeof c->buf - 1) c->blen = 0; /* an overlong line: drop it */
    return 0;
}

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

static void describe(const kl_tune_space *s, const kl_tune_value *v, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int p = 0; p < s->n && k < n; p++) {
        if (!v[p].present) continue;
        char val[96];
        k += (size_t)snprintf(out + k, n - k, "%s%s=%s", k ? ", " : "", s->p[p].name, kl_tune_value_str(&s->p[p], v[p], val, sizeof val));
    }
}

static double objective_of(const kl_trial *t, int minimize) {
    double best = NAN;
    for (int i = 0; i < t->ninter; i++) {
        double v = t->inter[i];
        if (isnan(v)) continue;
        if (isnan(best) || (minimize ? v < best : v > best)) best = v;
    }
    return best;
}

/* ---- a trial in the tune process itself (--parallel 1) ------------------ */

typedef struct { tune_ctx *x; child *c; } inproc_io;

static int inproc_epoch(void *ctx, const kl_train_epoch *ep) {
    inproc_io *io = ctx;
    double v = epoch_metric(io->x->metric, ep);
    if (!isnan(v)) report_epoch(io->x, io->c, (long long)ep->epoch, v);
    return io->c->pruned || interrupted;
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Trains one trial with the training library in this process; c->done or
 * c->err tell how it ended. Returns its CPU seconds. */
static double run_inproc(tune_ctx *x, child *c, const char *spec) {
    double cpu0 = cpu_now();
    FILE *log = fopen(c->log, "w");
    inproc_io io = {x, c};
    kl_err e = {0};
    if (train_trial(spec, x->s, x->all[c->slot].params, c->dir, log ? log : stderr, inproc_epoch, &io, &e)) {
        snprintf(c->err, sizeof c->err, "%s", kl_err_what(&e));
        if (log) fprintf(log, "error: %s\n", c->err);
    } else {
        c->done = 1;
    }
    if (log) fclose(log);
    return cpu_now() - cpu0;
}

/* Records how a trial ended (state, value or error) and prints a line.
 * Returns 1 when a successful trial never reported the metric. */
static int finish_trial(tune_ctx *x, child *c, int status, kl_err *e) {
    kl_trial *tr = &x->all[c->slot];
    double secs = now_s() - c->t0;
    char desc[1024];
    describe(x->s, tr->params, desc, sizeof desc);
    kl_err te = {0};
    int missing = 0;
    if (c->pruned) {
        tr->state = KL_TRIAL_PRUNED;
        kl_study_trial_end(x->st, c->run_id, KL_TRIAL_PRUNED, NAN, "pruned", &te);
        fprintf(stderr, "trial %d: pruned after %d epochs (%.1f s) [%s]\n", tr->number, tr->ninter, secs, desc);
    } else if (c->done && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        double v = objective_of(tr, x->minimize);
        if (isnan(v)) {
            char msg[512];
            snprintf(msg, sizeof msg, "metric '%s' never appeared in the trial's epochs (the training loop reports val_accuracy, val_loss and train_loss; see %s/metrics.csv)",
                     x->metric, c->dir);
            tr->state = KL_TRIAL_FAILED;
            kl_study_trial_end(x->st, c->run_id, KL_TRIAL_FAILED, NAN, msg, &te);
            kl_err_set(e, KL_ENOTFOUND, "trial %d: %s", tr->number, msg);
            missing = 1;
        } else {
            tr->state = KL_TRIAL_COMPLETE;
            tr->value = v;
            /* its exported model stays in c->dir: recorded for keel tune register */
            kl_study_trial_set_model_dir(x->st, c->run_id, c->dir, &te);
            kl_study_trial_end(x->st, c->run_id, KL_TRIAL_COMPLETE, v, NULL, te.code ? NULL : &te);
            fprintf(stderr, "trial %d: %s = %.6g (%.1f s) [%s]\n", tr->number, x->metric, v, secs, desc);
        }
    } else {
        char err[768];
        snprintf(err, sizeof err, "%s", c->err);
        if (!err[0]) last_line(c->log, err, sizeof err);
        if (!err[0]) snprintf(err, sizeof err, "exited with status %d", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        tr->state = KL_TRIAL_FAILED;
        kl_study_trial_end(x->st, c->run_id, KL_TRIAL_FAILED, NAN, err, &te);
        fprintf(stderr, "trial %d: failed (%s) [%s]\n", tr->number, err, desc);
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
 * keel tune SPEC --space SPACE --trials N
 * ================================================================== */

static const app_opt run_opts[] = {
    {"space", 0, 1, "SPACE.yaml", "the search space (required)", 0},
    {"trials", 'n', 1, "N", "trials in the study in all (default 20); re-running continues up to N", 0},
    {"parallel", 'p', 1, "P",
     "trials at once: 1 (default) in this process, P > 1 in forked processes with threads/P threads each", 0},
    {"timeout", 0, 1, "SECONDS", "start no new trial after this long", 0},
    {"study", 0, 1, "NAME", "study name (default: SPEC's name and the space's hash)", 0},
    {"metric", 0, 1, "NAME",
     "per-epoch metric: val_accuracy, val_loss or train_loss (default: val_loss for an mse loss, else val_accuracy)",
     0},
    {"direction", 0, 1, "maximize|minimize", "default: maximize for accuracy/auc metrics, else minimize", 0},
    {"sampler", 0, 1, "tpe|random|grid", "default tpe", 0},
    {"pruner", 0, 1, "none|median|asha", "early stopping of bad trials on the per-epoch metric (default none)", 0},
    {"prune-min-epochs", 0, 1, "N",
     "no trial is pruned before N epochs (asha: the first rung; median: warm-up; default 1)", 0},
    {"seed", 0, 1, "N", "sampler seed (default 0)", 0},
    {"out", 'o', 1, "DIR", "trial artifacts (default tune-<study>): trial-N/ keeps each complete trial's model", 0},
    {"set", 0, 1, "KEY=VALUE", "override a spec key in every trial, as keel train --set (not a key of the space)", 1},
    {"json", 0, 0, NULL, "summary as JSON", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec run_spec = {
    "tune",
    "keel tune SPEC.yaml --space SPACE.yaml [--trials N] [--parallel P] [--timeout S] [options]",
    "Search hyperparameters of a training spec; a resumable study in the experiment store.",
    "The space maps spec keys (dotted paths, e.g. optimizer.lr, layers.0.out) to\n"
    "  {type: float|int|categorical, low, high, log, step, choices, when: {param: value}}.\n"
    "Each trial trains SPEC with --set key=value overrides through the training library (in this\n"
    "process, or forked ones with --parallel); the pruner can stop it after any epoch. Its objective\n"
    "is the best value of "
    "--metric over its epochs. A configuration already evaluated is not trained again.\n"
    "--set KEY=VALUE overrides the spec in every trial (the same parser as keel train); the\n"
    "study records them, and a re-run must give the same ones. Each complete trial keeps its\n"
    "exported model in OUT/trial-N, so the best one can be registered.\n"
    "\n"
    "Commands:\n"
    "  show         print a study and draw its history (keel tune show STUDY)\n"
    "  register     register the best trial's model (keel tune register STUDY --name N)",
    run_opts, KL_ARRAY_LEN(run_opts), 1, 1};

static int tune_run(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&run_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *spec_arg = a.pos[0], *space_path = app_get(&a, "space");
    if (!space_path) return app_usage_error(&run_spec, "--space SPACE.yaml is required");
    int64_t trials, parallel, seed;
    double timeout;
    if ((rc = app_get_int(&a, &run_spec, "trials", 20, &trials)) >= 0) return rc;
    if ((rc = app_get_int(&a, &run_spec, "parallel", 1, &parallel)) >= 0) return rc;
    if ((rc = app_get_int(&a, &run_spec, "seed", 0, &seed)) >= 0) return rc;
    if ((rc = app_get_double(&a, &run_spec, "timeout", 0, &timeout)) >= 0) return rc;
    if ((rc = app_get_verify(&a, &run_spec, &tune_verify)) >= 0) return rc;
    if (trials < 1 || trials > 100000) return app_usage_error(&run_spec, "--trials must be in 1..100000");
    if (parallel < 1 || parallel > 64) return app_usage_error(&run_spec, "--parallel must be in 1..64");
    const char *metric = app_get(&a, "metric");
    if (!metric) { /* from the loss: accuracy means nothing for a regression */
        const char *loss = NULL;
        kl_err le = {0};
        if (kl_train_spec_loss(spec_arg, &loss, &le)) return app_fail(&le);
        metric = strcmp(loss, "mse") ? "val_accuracy" : "val_loss";
        fprintf(stderr, "metric: %s (the default for a %s loss; --metric to choose)\n", metric, loss);
    }
    const char *dir = app_get(&a, "direction");
    int minimize = !(strstr(metric, "acc") || strstr(metric, "auc"));
    if (dir) {
        if (!strcmp(dir, "minimize") || !strcmp(dir, "min")) minimize = 1;
        else if (!strcmp(dir, "maximize") || !strcmp(dir, "max")) minimize = 0;
        else return app_usage_error(&run_spec, "--direction must be maximize or minimize");
    }
    kl_sampler_opts so;
    kl_sampler_opts_default(&so);
    so.seed = (uint64_t)seed;
    const char *sampler = app_get(&a, "sampler") ? app_get(&a, "sampler") : "tpe";
    if (kl_sampler_kind_parse(sampler, &so.kind)) return app_usage_error(&run_spec, "unknown sampler '%s' (tpe, random, grid)", sampler);
    kl_pruner_opts po;
    kl_pruner_opts_default(&po);
    if (app_get(&a, "pruner") && kl_pruner_kind_parse(app_get(&a, "pruner"), &po.kind))
        return app_usage_error(&run_spec, "unknown pruner '%s' (none, median, asha)", app_get(&a, "pruner"));
    int64_t min_epochs;
    if ((rc = app_get_int(&a, &run_spec, "prune-min-epochs", 1, &min_epochs)) >= 0) return rc;
    if (min_epochs < 1 || min_epochs > 100000) return app_usage_error(&run_spec, "--prune-min-epochs must be in 1..100000");
    po.min_resource = (int)min_epochs;
    po.n_warmup_steps = (int)min_epochs - 1;

    kl_err e = {0};
    char spec[4096];
    if (!realpath(spec_arg, spec)) {
        kl_err_set(&e, -errno, "%s: %s", spec_arg, strerror(errno));
        return app_fail(&e);
    }
    char *space_text = NULL;
    size_t space_len;
    kl_tune_space *s = NULL;
    kl_track *t = NULL;
    kl_study *st = NULL;
    child *kids = NULL;
    kl_trial *all = NULL;
    size_t nall = 0;
    int exit_code = APP_EXIT_FAIL, nkids = 0;
    if ((rc = kl_read_file(space_path, &space_text, &space_len, &e)) || (rc = kl_tune_space_load(space_path, &s, &e)))
        goto done;
    /* fixed overrides: KEY=VALUE, never a parameter of the space */
    char sets_text[8192] = "";
    size_t stl = 0;
    tune_nsets = app_get_all(&a, "set", tune_sets, APP_MAX_VALUES);
    for (int i = 0; i < tune_nsets; i++) {
        const char *eq = strchr(tune_sets[i], '=');
        if (!eq || eq == tune_sets[i]) {
            rc = kl_err_set(&e, KL_EINVAL, "--set expects KEY=VALUE, got '%s'", tune_sets[i]);
            goto done;
        }
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - tune_sets[i]), tune_sets[i]);
        if (kl_tune_space_find(s, key) >= 0) {
            rc = kl_err_set(&e, KL_EINVAL, "--set %s: %s is a parameter of the search space %s (the trials choose it)",
                            tune_sets[i], key, space_path);
            goto done;
        }
        if (stl < sizeof sets_text)
            stl += (size_t)snprintf(sets_text + stl, sizeof sets_text - stl, "%s%s", i ? "\n" : "", tune_sets[i]);
    }
    if (stl >= sizeof sets_text) {
        rc = kl_err_set(&e, KL_EINVAL, "--set: the overrides are too long");
        goto done;
    }
    /* a spec key that does not exist is caught by the first trial; check the spec loads at all */
    char sha[65], name[256], outdir[1024], name_sha[65];
    kl_sha256_buf_hex(space_text, space_len, sha);
    snprintf(name_sha, sizeof name_sha, "%s", sha); /* the default name: the space, and the --set overrides when any */
    if (stl) {
        kl_buf nb;
        kl_buf_init(&nb);
        kl_buf_printf(&nb, "%.*s\n--set\n%s", (int)space_len, space_text, sets_text);
        if (nb.failed) {
            kl_buf_free(&nb);
            rc = kl_err_set(&e, KL_ENOMEM, "out of memory");
            goto done;
        }
        kl_sha256_buf_hex(nb.data, nb.len, name_sha);
        kl_buf_free(&nb);
    }
    if (app_get(&a, "study")) snprintf(name, sizeof name, "%s", app_get(&a, "study"));
    else {
        const char *b = strrchr(spec, '/');
        b = b ? b + 1 : spec;
        snprintf(name, sizeof name, "%.*s-%.8s", (int)strcspn(b, "."), b, name_sha);
    }
    snprintf(outdir, sizeof outdir, "%s", app_get(&a, "out") ? app_get(&a, "out") : "");
    if (!outdir[0]) snprintf(outdir, sizeof outdir, "tune-%s", name);
    if ((rc = kl_mkdir_p(outdir, &e))) goto done;
    if ((rc = app_store_open(1, &t, &e))) goto done;
    kl_study_info info = {name, metric, minimize, sampler, sha, spec, space_text, sets_text};
    if ((rc = kl_study_open(t, s, &info, &st, &e))) goto done;
    const kl_trial *loaded;
    size_t nloaded;
    if ((rc = kl_study_load(st, &loaded, &nloaded, &e))) goto done;
    /* our own copy of the history, to which new trials are appended */
    all = calloc(nloaded + (size_t)trials + 1, sizeof *all);
    kids = calloc((size_t)parallel, sizeof *kids);
    if (!all || !kids) { rc = kl_err_set(&e, KL_ENOMEM, "out of memory"); goto done; }
    int next = 0;
    for (size_t i = 0; i < nloaded; i++) {
        all[nall] = loaded[i];
        all[nall].params = malloc((size_t)s->n * sizeof(kl_tune_value));
        all[nall].inter = loaded[i].ninter ? malloc((size_t)loaded[i].ninter * sizeof(double)) : NULL;
        if (!all[nall].params) { rc = kl_err_set(&e, KL_ENOMEM, "out of memory"); goto done; }
        memcpy(all[nall].params, loaded[i].params, (size_t)s->n * sizeof(kl_tune_value));
        if (all[nall].inter) memcpy(all[nall].inter, loaded[i].inter, (size_t)loaded[i].ninter * sizeof(double));
        if (loaded[i].number >= next) next = loaded[i].number + 1;
        nall++;
    }
    if (nall) kl_log(KL_LOG_INFO, "tune", "study %s: continuing with %zu trials recorded", name, nall);
    int threads = KL_MAX(1, kl_threads_default() / (int)parallel);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    double t_start = now_s();
    int launched = 0, failed_first_metric = 0;
    double train_seconds = 0, train_cpu = 0; /* summed over the trials trained now: wall (fork to exit), CPU */
    size_t target = (size_t)trials;
    int grid_done = 0;
    tune_ctx x = {st, s, all, 0, &po, minimize, metric};
    while (!interrupted) {
        /* start trials while there are free slots and budget */
        while (!interrupted && !grid_done && nkids < parallel && nall < target && !failed_first_metric &&
               !(timeout > 0 && now_s() - t_start > timeout)) {
            kl_trial *tr = &all[nall];
            memset(tr, 0, sizeof *tr);
            tr->number = next++;
            tr->state = KL_TRIAL_RUNNING;
            tr->params = calloc((size_t)s->n, sizeof(kl_tune_value));
            if (!tr->params) { rc = kl_err_set(&e, KL_ENOMEM, "out of memory"); goto done; }
            rc = kl_tune_suggest(s, &so, all, nall, minimize, tr->number, tr->params, &e);
            if (rc == KL_ENOTFOUND && so.kind == KL_SAMPLER_GRID) {
                kl_log(KL_LOG_INFO, "tune", "%s", kl_err_what(&e));
                free(tr->params);
                grid_done = 1;
                rc = KL_OK;
                break;
            }
            if (rc) goto done;
            nall++;
            char desc[1024];
            describe(s, tr->params, desc, sizeof desc);
            /* already evaluated? reuse its value */
            const kl_trial *same = NULL;
            for (size_t i = 0; i + 1 < nall && !same; i++)
                if (all[i].state == KL_TRIAL_COMPLETE && same_params(s, all[i].params, tr->params)) same = &all[i];
            int64_t run_id;
            if ((rc = kl_study_trial_start(st, tr->number, tr->params, &run_id, &e))) goto done;
            tr->run_id = run_id;
            if (same) {
                char note[64], mdir[4096];
                snprintf(note, sizeof note, "cached from trial %d", same->number);
                tr->state = KL_TRIAL_COMPLETE;
                tr->value = same->value;
                /* the same model as the trial it repeats */
                if (same->run_id && !kl_study_trial_model_dir(st, same->run_id, mdir, sizeof mdir, NULL))
                    kl_study_trial_set_model_dir(st, run_id, mdir, NULL);
                if ((rc = kl_study_trial_end(st, run_id, KL_TRIAL_COMPLETE, tr->value, note, &e))) goto done;
                fprintf(stderr, "trial %d: %s = %.6g (cached: same as trial %d) [%s]\n", tr->number, metric, tr->value,
                        same->number, desc);
                continue;
            }
            child *c = &kids[nkids];
            memset(c, 0, sizeof *c);
            c->slot = (int)nall - 1;
            c->run_id = run_id;
            c->rfd = c->wfd = -1;
            c->t0 = now_s();
            snprintf(c->dir, sizeof c->dir, "%s/trial-%d", outdir, tr->number);
            snprintf(c->log, sizeof c->log, "%s/trial-%d.log", outdir, tr->number);
            kl_rm_rf(c->dir, NULL); /* a leftover of an interrupted run */
            launched++;
            if (parallel == 1) { /* in this process: no fork, memory reused from trial to trial */
                fprintf(stderr, "trial %d: started [%s]\n", tr->number, desc);
                x.nall = nall;
                train_cpu += run_inproc(&x, c, spec);
                train_seconds += now_s() - c->t0;
                if (interrupted && !c->pruned) {
                    kl_study_trial_end(st, run_id, KL_TRIAL_FAILED, NAN, "interrupted", NULL);
                    break;
                }
                failed_first_metric |= finish_trial(&x, c, 0, &e);
                continue;
            }
            if ((rc = fork_trial(spec, s, tr->params, metric, threads, c, &e))) {
                kl_study_trial_end(st, run_id, KL_TRIAL_FAILED, NAN, kl_err_what(&e), NULL);
                goto done;
            }
            nkids++;
            fprintf(stderr, "trial %d: started [%s]\n", tr->number, desc);
        }
        if (nkids == 0) break;
        /* watch the running ones: their reports, pruner answers, exits */
        struct pollfd pfd[64];
        for (int k = 0; k < nkids; k++) pfd[k] = (struct pollfd){kids[k].rfd, POLLIN, 0};
        if (poll(pfd, (nfds_t)nkids, 200) < 0 && errno != EINTR) {
            rc = kl_err_set(&e, -errno, "poll: %s", strerror(errno));
            goto done;
        }
        for (int k = 0; k < nkids; k++) {
            child *c = &kids[k];
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            x.nall = nall;
            if (!child_read(&x, c)) continue;
            int status = 0;
            struct rusage ru = {0};
            while (wait4(c->pid, &status, 0, &ru) < 0 && errno == EINTR) {}
            train_cpu += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                         (double)ru.ru_stime.tv_usec * 1e-6;
            close(c->rfd);
            close(c->wfd);
            pfd[k] = pfd[nkids - 1];
            train_seconds += now_s() - c->t0;
            failed_first_metric |= finish_trial(&x, c, status, &e);
            kids[k] = kids[--nkids];
            k--;
        }
    }
    if (interrupted) {
        for (int k = 0; k < nkids; k++) {
            kill(kids[k].pid, SIGTERM);
            waitpid(kids[k].pid, NULL, 0);
            close(kids[k].rfd);
            close(kids[k].wfd);
            kl_study_trial_end(st, kids[k].run_id, KL_TRIAL_FAILED, NAN, "interrupted", NULL);
        }
        nkids = 0;
        kl_err_set(&e, KL_ECANCELED, "interrupted; re-run the same command to continue the study");
        rc = KL_ECANCELED;
        goto done;
    }
    if (failed_first_metric) { rc = KL_ENOTFOUND; goto done; }
    /* summary */
    const kl_trial *best = kl_tune_best(all, nall, minimize);
    int ncomplete = 0, npruned = 0, nfailed = 0;
    for (size_t i = 0; i < nall; i++) {
        ncomplete += all[i].state == KL_TRIAL_COMPLETE;
        npruned += all[i].state == KL_TRIAL_PRUNED;
        nfailed += all[i].state == KL_TRIAL_FAILED;
    }
    char desc[1024] = "";
    if (best) describe(s, best->params, desc, sizeof desc);
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"study\":");
        kl_buf_json_str(&b, name);
        kl_buf_printf(&b, ",\"metric\":\"%s\",\"direction\":\"%s\",\"trials\":%zu,\"complete\":%d,\"pruned\":%d,\"failed\":%d,\"launched\":%d,\"seconds\":%.3f,\"train_seconds\":%.3f,\"train_cpu_seconds\":%.3f",
                      metric, minimize ? "minimize" : "maximize", nall, ncomplete, npruned, nfailed, launched, now_s() - t_start, train_seconds,
                      train_cpu);
        if (best) {
            kl_buf_printf(&b, ",\"best\":{\"number\":%d,\"value\":%.17g,\"params\":{", best->number, best->value);
            int first = 1;
            for (int p = 0; p < s->n; p++) {
                if (!best->params[p].present) continue;
                char val[96];
                kl_buf_printf(&b, "%s", first ? "" : ",");
                kl_buf_json_str(&b, s->p[p].name);
                kl_buf_puts(&b, ":");
                kl_buf_json_str(&b, kl_tune_value_str(&s->p[p], best->params[p], val, sizeof val));
                first = 0;
            }
            kl_buf_puts(&b, "}}");
        }
        kl_buf_puts(&b, "}\n");
        fputs(b.data, stdout);
        kl_buf_free(&b);
    } else {
        printf("study %s: %zu trials (%d complete, %d pruned, %d failed), %d trained now\n", name, nall, ncomplete,
               npruned, nfailed, launched);
        if (best) printf("best: trial %d, %s = %.6g [%s]\n", best->number, metric, best->value, desc);
        printf("details: keel tune show %s\n", name);
    }
    exit_code = best ? APP_EXIT_OK : APP_EXIT_FAIL;
    if (!best) kl_err_set(&e, KL_ENOTFOUND, "no trial completed");
done:
    for (int k = 0; k < nkids; k++) {
        kill(kids[k].pid, SIGTERM);
        waitpid(kids[k].pid, NULL, 0);
        close(kids[k].rfd);
        close(kids[k].wfd);
    }
    for (size_t i = 0; i < nall; i++) { free(all[i].params); free(all[i].inter); }
    free(all);
    free(kids);
    kl_study_free(st);
    kl_track_close(t);
    kl_tune_space_free(s);
    kl_mem_free(space_text);
    if (rc || exit_code != APP_EXIT_OK) return app_fail(&e);
    return exit_code;
}

/* ==================================================================
 * keel tune show STUDY
 * ================================================================== */

static const app_opt show_opts[] = {
    {"json", 0, 0, NULL, "machine-readable output", 0},
    {"out", 'o', 1, "DIR", "where history.svg and parallel.svg go (default tune-<study>)", 0},
};
static const app_cmd_spec show_spec = {
    "tune show", "keel tune show STUDY [--json] [--out DIR]",
    "Best trial, trials table, parameter importance, and the pictures (optimisation history, parallel coordinates).",
    "Parameter importance: the share of the objective's variance over complete trials that each\n"
    "parameter explains alone (correlation ratio over 4 quantile bins, or per choice), normalised\n"
    "to sum to 1. A simple screening measure: it ignores interactions.",
    show_opts, KL_ARRAY_LEN(show_opts), 1, 1};

static int tune_show(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&show_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    kl_study *st = NULL;
    double *imp = NULL;
    kl_buf b;
    kl_buf_init(&b);
    if ((rc = app_store_open(0, &t, &e))) goto done;
    if ((rc = kl_study_find_recorded(t, a.pos[0], &st, &e))) goto done;
    const kl_study_info *info = kl_study_get_info(st);
    const kl_tune_space *s = kl_study_space(st);
    const kl_trial *tr;
    size_t n;
    if ((rc = kl_study_load(st, &tr, &n, &e))) goto done;
    int minimize = info->minimize;
    const kl_trial *best = kl_tune_best(tr, n, minimize);
    imp = calloc((size_t)s->n, sizeof *imp);
    if (!imp) { rc = kl_err_set(&e, KL_ENOMEM, "out of memory"); goto done; }
    kl_tune_importance(s, tr, n, imp);
    /* pictures */
    char outdir[1024];
    snprintf(outdir, sizeof outdir, "%s", app_get(&a, "out") ? app_get(&a, "out") : "");
    if (!outdir[0]) snprintf(outdir, sizeof outdir, "tune-%s", info->name);
    if ((rc = kl_mkdir_p(outdir, &e))) goto done;
    for (int pic = 0; pic < 2 && !rc; pic++) {
        kl_buf svg;
        kl_buf_init(&svg);
        char path[1100];
        if (pic == 0) rc = kl_tune_svg_history(&svg, tr, n, minimize, info->metric);
        else kl_tune_svg_parallel(&svg, s, tr, n, minimize, info->metric);
        if (!rc && svg.failed) rc = KL_ENOMEM;
        if (rc) kl_err_set(&e, rc, "drawing the study: out of memory");
        snprintf(path, sizeof path, "%s/%s.svg", outdir, pic ? "parallel" : "history");
        if (!rc) rc = kl_write_file_atomic(path, svg.data, svg.len, &e);
        kl_buf_free(&svg);
    }
    if (rc) goto done;
    if (app_flag(&a, "json")) {
        kl_buf_puts(&b, "{\"study\":");
        kl_buf_json_str(&b, info->name);
        kl_buf_printf(&b, ",\"metric\":\"%s\",\"direction\":\"%s\",\"sampler\":\"%s\",\"sets\":[", info->metric,
                      minimize ? "minimize" : "maximize", info->sampler);
        for (const char *p = info->sets ? info->sets : ""; *p;) {
            size_t l = strcspn(p, "\n");
            char one[512];
            snprintf(one, sizeof one, "%.*s", (int)(l < sizeof one ? l : sizeof one - 1), p);
            if (p != info->sets) kl_buf_puts(&b, ",");
            kl_buf_json_str(&b, one);
            p += l + (p[l] == '\n');
        }
        kl_buf_puts(&b, "],\"best\":");
        if (best) kl_buf_printf(&b, "{\"number\":%d,\"value\":%.17g}", best->number, best->value);
        else kl_buf_puts(&b, "null");
        kl_buf_puts(&b, ",\"importance\":{");
        for (int p = 0; p < s->n; p++) {
            kl_buf_printf(&b, "%s", p ? "," : "");
            kl_buf_json_str(&b, s->p[p].name);
            kl_buf_printf(&b, ":%.4f", imp[p]);
        }
        kl_buf_puts(&b, "},\"trials\":[");
        for (size_t i = 0; i < n; i++) {
            kl_buf_printf(&b, "%s{\"number\":%d,\"state\":\"%s\",\"value\":", i ? "," : "", tr[i].number, kl_trial_state_name(tr[i].state));
            if (tr[i].state == KL_TRIAL_COMPLETE && isfinite(tr[i].value)) kl_buf_printf(&b, "%.17g", tr[i].value);
            else kl_buf_puts(&b, "null");
            kl_buf_printf(&b, ",\"epochs\":%d,\"params\":{", tr[i].ninter);
            int first = 1;
            for (int p = 0; p < s->n; p++) {
                if (!tr[i].params[p].present) continue;
                char val[96];
                kl_buf_printf(&b, "%s", first ? "" : ",");
                kl_buf_json_str(&b, s->p[p].name);
                kl_buf_puts(&b, ":");
                kl_buf_json_str(&b, kl_tune_value_str(&s->p[p], tr[i].params[p], val, sizeof val));
                first = 0;
            }
            kl_buf_puts(&b, "}}");
        }
        kl_buf_printf(&b, "],\"pictures\":[\"%s/history.svg\",\"%s/parallel.svg\"]}\n", outdir, outdir);
        fputs(b.data, stdout);
    } else {
        printf("study %s: %s (%s), sampler %s, %zu trials\n", info->name, info->metric, minimize ? "minimize" : "maximize",
               info->sampler, n);
        if (info->sets && *info->sets) { /* the fixed overrides of every trial, one per line */
            printf("--set:");
            for (const char *p = info->sets; *p;) {
                size_t l = strcspn(p, "\n");
                printf(" %.*s", (int)l, p);
                p += l + (p[l] == '\n');
            }
            printf("\n");
        }
        if (best) {
            char desc[1024];
            describe(s, best->params, desc, sizeof desc);
            printf("best: trial %d, %s = %.6g [%s]\n\n", best->number, info->metric, best->value, desc);
        }
        printf("%6s  %-9s %12s %6s  %s\n", "TRIAL", "STATE", "VALUE", "EPOCHS", "PARAMS");
        for (size_t i = 0; i < n; i++) {
            char desc[1024], val[32] = "-";
            describe(s, tr[i].params, desc, sizeof desc);
            if (tr[i].state == KL_TRIAL_COMPLETE && isfinite(tr[i].value)) snprintf(val, sizeof val, "%.6g", tr[i].value);
            printf("%6d  %-9s %12s %6d  %s%s\n", tr[i].number, kl_trial_state_name(tr[i].state), val, tr[i].ninter, desc,
                   best == &tr[i] ? "  <- best" : "");
        }
        printf("\nparameter importance (share of variance explained):\n");
        for (int p = 0; p < s->n; p++) printf("  %-24s %5.1f%%\n", s->p[p].name, 100 * imp[p]);
        printf("\npictures: %s/history.svg, %s/parallel.svg\n", outdir, outdir);
    }
done:
    kl_buf_free(&b);
    free(imp);
    kl_study_free(st);
    kl_track_close(t);
    if (rc) return app_fail(&e);
    return APP_EXIT_OK;
}

/* ==================================================================
 * keel tune register STUDY --name N [--alias A]
 * ================================================================== */

static const app_opt reg_opts[] = {
    {"name", 'n', 1, "NAME", "registered model name (required)", 0},
    {"alias", 'a', 1, "ALIAS", "also point this alias at the new version", 1},
    {"trial", 0, 1, "N", "register this trial instead of the best one", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec reg_spec = {
    "tune register",
    "keel tune register STUDY --name NAME [--alias A]... [--trial N] [--json]",
    "Register the best trial's model (or --trial N's) as a new version, linked to the trial's run.",
    "The model is the one the trial exported (its folder is recorded with the trial). The\n"
    "version is tagged with the study, the trial and its objective.",
    reg_opts, KL_ARRAY_LEN(reg_opts), 1, 1};

static int tune_register(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&reg_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *model = app_get(&a, "name");
    if (!model) return app_usage_error(&reg_spec, "--name is required");
    int64_t want;
    if ((rc = app_get_int(&a, &reg_spec, "trial", -1, &want)) >= 0) return rc;
    kl_err e = {0};
    kl_track *t = NULL;
    kl_study *st = NULL;
    const kl_trial *tr = NULL, *pick = NULL;
    size_t n = 0;
    char dir[4096];
    int64_t v = 0;
    if ((rc = app_store_open(0, &t, &e)) || (rc = kl_study_find_recorded(t, a.pos[0], &st, &e)) ||
        (rc = kl_study_load(st, &tr, &n, &e)))
        goto done;
    const kl_study_info *info = kl_study_get_info(st);
    if (want >= 0) {
        for (size_t i = 0; i < n; i++)
            if (tr[i].number == want) pick = &tr[i];
        if (!pick) {
            rc = kl_err_set(&e, KL_ENOTFOUND, "study %s has no trial %lld", info->name, (long long)want);
            goto done;
        }
        if (pick->state != KL_TRIAL_COMPLETE) {
            rc = kl_err_set(&e, KL_ESTATE, "trial %d of study %s is %s: only a complete trial has a model",
                            pick->number, info->name, kl_trial_state_name(pick->state));
            goto done;
        }
    } else if (!(pick = kl_tune_best(tr, n, info->minimize))) {
        rc = kl_err_set(&e, KL_ENOTFOUND, "study %s has no complete trial yet", info->name);
        goto done;
    }
    if ((rc = kl_study_trial_model_dir(st, pick->run_id, dir, sizeof dir, &e))) {
        if (rc == KL_ENOTFOUND)
            kl_err_set(&e, KL_ENOTFOUND,
                       "trial %d of study %s (run %lld) has no recorded model folder (a study run by an older keel); "
                       "register its folder with keel models register DIR --name %s --run %lld",
                       pick->number, info->name, (long long)pick->run_id, model, (long long)pick->run_id);
        goto done;
    }
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/model.onnx", dir);
    if (!kl_path_exists(mp)) {
        rc = kl_err_set(
            &e, KL_ENOTFOUND,
            "trial %d of study %s: %s is gone (the trial folders keep the models; re-run the study into a new --out)",
            pick->number, info->name, mp);
        goto done;
    }
    if ((rc = kl_registry_register(t, model, dir, pick->run_id, NULL, &v, &e))) goto done;
    char num[32], val[64];
    snprintf(num, sizeof num, "%d", pick->number);
    snprintf(val, sizeof val, "%.15g", pick->value); /* the shortest text that reads back the same */
    if (strtod(val, NULL) != pick->value) snprintf(val, sizeof val, "%.17g", pick->value);
    if ((rc = kl_registry_set_tag(t, model, v, "study", info->name, &e)) ||
        (rc = kl_registry_set_tag(t, model, v, "trial", num, &e)) ||
        (rc = kl_registry_set_tag(t, model, v, info->metric, val, &e)))
        goto done;
    const char *al[APP_MAX_VALUES];
    int na = app_get_all(&a, "alias", al, APP_MAX_VALUES);
    for (int i = 0; i < na && !rc; i++) rc = kl_registry_set_alias(t, model, al[i], v, &e);
    if (rc) goto done;
    if (app_flag(&a, "json")) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_puts(&b, "{\"name\":");
        kl_buf_json_str(&b, model);
        kl_buf_printf(&b, ",\"version\":%lld,\"run_id\":%lld,\"study\":", (long long)v, (long long)pick->run_id);
        kl_buf_json_str(&b, info->name);
        kl_buf_printf(&b, ",\"trial\":%d,\"metric\":\"%s\",\"value\":%.17g,\"dir\":", pick->number, info->metric,
                      pick->value);
        kl_buf_json_str(&b, dir);
        kl_buf_puts(&b, "}\n");
        fputs(b.data, stdout);
        kl_buf_free(&b);
    } else {
        printf("registered %s version %lld (from run %lld: study %s trial %d, %s = %.6g)\n", model, (long long)v,
               (long long)pick->run_id, info->name, pick->number, info->metric, pick->value);
    }
done:
    kl_study_free(st);
    kl_track_close(t);
    return rc ? app_fail(&e) : APP_EXIT_OK;
}

int cmd_tune(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "show")) return tune_show(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "register")) return tune_register(argc - 1, argv + 1);
    return tune_run(argc, argv);
}
