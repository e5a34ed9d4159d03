/* Claims: several workers (processes, machines) on one study. A worker
 * claims the next trial of a study in one write transaction (SQLite: BEGIN
 * IMMEDIATE; PostgreSQL: a transaction advisory lock keyed on the study's
 * root run), so no trial number is given out twice; trials whose worker
 * stopped heartbeating are marked failed (worker lost) by the claim and
 * re-queued. Also the atomic creation of a named run (a study's root), and
 * the heartbeat of a running run. */
#include "track_int.h"

#include <stdlib.h>
#include <string.h>

/* ==================================================================
 * Creating a named run once
 * ================================================================== */

/* Inside a transaction: the oldest run named name in experiment (0: none). */
static int find_named(kl_track *t, const char *experiment, const char *name, int64_t *id, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t,
                            "SELECT r.id FROM runs r JOIN experiments x ON x.id = r.experiment_id"
                            " WHERE x.name = ? AND r.name = ? ORDER BY r.id LIMIT 1",
                            &st, e);
    if (rc) return rc;
    kl__bind_text(st, 1, experiment);
    kl__bind_text(st, 2, name);
    int s = kl__step(st);
    *id = s == KL__ROW ? kl__col_i64(st, 0) : 0;
    kl__free(st);
    return s == KL__ROW || s == KL__DONE ? KL_OK : kl__track_sqlerr(t, s, e, "finding a run by name");
}

static int set_status(kl_track *t, int64_t id, const char *status, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t, "UPDATE runs SET status=?, end_us=? WHERE id=?", &st, e);
    if (rc) return rc;
    kl__bind_text(st, 1, status);
    kl__bind_i64(st, 2, kl_time_now_us());
    kl__bind_i64(st, 3, id);
    int s = kl__step(st);
    kl__free(st);
    return s == KL__DONE ? KL_OK : kl__track_sqlerr(t, s, e, "setting a run's status");
}

/* Inside a transaction: sets the status of run id when `where` (SQL over
 * the run's columns) holds; *changed 1 when it did. Re-checked on the row
 * as it is when the update runs, so two processes deciding about one run
 * (a worker ending its trial, another worker finding it lost) never both
 * win. */
static int set_status_if(kl_track *t, int64_t id, const char *status, const char *where, int64_t arg, int *changed,
                         kl_err *e) {
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE runs SET status=?, end_us=? WHERE id=? AND %s", where);
    kl__st *st = NULL;
    int rc = kl__track_prep(t, sql, &st, e);
    if (rc) return rc;
    kl__bind_text(st, 1, status);
    kl__bind_i64(st, 2, kl_time_now_us());
    kl__bind_i64(st, 3, id);
    if (strchr(where, '?')) kl__bind_i64(st, 4, arg);
    int s = kl__step(st);
    *changed = s == KL__DONE && kl__changes(st) > 0;
    kl__free(st);
    return s == KL__DONE ? KL_OK : kl__track_sqlerr(t, s, e, "setting a run's status");
}

int kl_track_run_finish(kl_track *t, int64_t run_id, kl_run_status status, const kl_kv *tags, size_t ntags, kl_err *e) {
    if (status == KL_RUN_RUNNING)
        return kl_err_set(e, KL_EINVAL, "run %lld: finishing needs an end status", (long long)run_id);
    kl__track_lock(t);
    int rc = kl__track_begin_run(t, run_id, e), changed = 0;
    if (rc) {
        kl__track_unlock(t);
        return rc;
    }
    rc = set_status_if(t, run_id, kl_run_status_name(status), "status = 'running'", 0, &changed, e);
    if (!rc && !changed)
        rc = kl_err_set(e, KL_ESTATE, "run %lld is no longer running (another process ended it)", (long long)run_id);
    for (size_t i = 0; i < ntags && !rc; i++) rc = kl__tag_put(t, run_id, tags[i].key, tags[i].value, e);
    if (rc) kl__track_rollback(t);
    else rc = kl__track_commit(t, e);
    kl__track_unlock(t);
    return rc;
}

int kl_track_run_ensure(kl_track *t, const char *experiment, const char *run_name, const kl_kv *tags, size_t ntags,
                        kl_run_status status, int64_t *id, int *created, kl_err *e) {
    *id = 0;
    *created = 0;
    if (!experiment || !*experiment || !run_name || !*run_name)
        return kl_err_set(e, KL_EINVAL, "a named run needs an experiment and a name");
    kl__track_lock(t);
    int rc = kl__track_begin(t, e); /* every writer waits: two creators run one after the other */
    if (rc) {
        kl__track_unlock(t);
        return rc;
    }
    if ((rc = find_named(t, experiment, run_name, id, e)) || *id) goto end;
    if ((rc = kl__run_insert(t, experiment, run_name, 0, id, e))) goto end;
    for (size_t i = 0; i < ntags && !rc; i++) rc = kl__tag_put(t, *id, tags[i].key, tags[i].value, e);
    if (!rc && status != KL_RUN_RUNNING) rc = set_status(t, *id, kl_run_status_name(status), e);
    *created = !rc;
end:
    if (rc) {
        kl__track_rollback(t);
        *id = 0;
        *created = 0;
    } else {
        rc = kl__track_commit(t, e);
        if (rc) *id = *created = 0;
    }
    kl__track_unlock(t);
    return rc;
}

/* ==================================================================
 * Heartbeat
 * ================================================================== */

int kl_track_run_heartbeat(kl_track *t, int64_t run_id, kl_err *e) {
    kl__st *st = NULL;
    kl__track_lock(t);
    int rc = kl__track_prep(t, "UPDATE runs SET heartbeat_us=? WHERE id=? AND status='running'", &st, e);
    if (!rc) {
        kl__bind_i64(st, 1, kl_time_now_us());
        kl__bind_i64(st, 2, run_id);
        int s = kl__step(st);
        if (s != KL__DONE) rc = kl__track_sqlerr(t, s, e, "heartbeat");
        else if (kl__changes(st) == 0)
            rc = kl_err_set(e, KL_ESTATE, "run %lld is no longer running (another process ended it)",
                            (long long)run_id);
    }
    kl__free(st);
    kl__track_unlock(t);
    return rc;
}

/* ==================================================================
 * Claiming a trial
 * ================================================================== */

/* A trial run of the study as the claim sees it. */
typedef struct {
    int64_t id, heartbeat_us;
    int number, running, lost; /* running: state tag running and run status running */
    int state_running;         /* state tag running (whatever the run's status) */
} trial_row;

typedef struct {
    trial_row *v;
    size_t n, cap;
} trial_rows;

static const char SQL_TRIALS[] =
    "SELECT r.id, r.status, r.heartbeat_us, n.value, s.value, l.value FROM runs r"
    " JOIN tags k ON k.run_id = r.id AND k.key = 'kind' AND k.value = 'trial'"
    " LEFT JOIN tags n ON n.run_id = r.id AND n.key = 'trial'"
    " LEFT JOIN tags s ON s.run_id = r.id AND s.key = 'state'"
    " LEFT JOIN tags l ON l.run_id = r.id AND l.key = 'lost'"
    " WHERE r.parent_id = ?";

/* Stage 1: the study's trial runs (a trial tag that is not a number in
 * 0..ntrials-1 is not one of the claimable trials and is skipped). */
static int read_trials(kl_track *t, int64_t root, int ntrials, trial_rows *out, kl_err *e) {
    kl__st *st = NULL;
    int rc = kl__track_prep(t, SQL_TRIALS, &st, e);
    if (rc) return rc;
    kl__bind_i64(st, 1, root);
    int s;
    while ((s = kl__step(st)) == KL__ROW) {
        const char *num = kl__col_text(st, 3), *state = kl__col_text(st, 4), *lost = kl__col_text(st, 5);
        const char *status = kl__col_text(st, 1);
        int64_t number;
        if (!num || kl_parse_int64(num, &number) || number < 0 || number >= ntrials) continue;
        if (out->n == out->cap) {
            size_t nc = out->cap ? out->cap * 2 : 64;
            trial_row *nv = realloc(out->v, nc * sizeof *nv);
            if (!nv) {
                kl__free(st);
                return kl_err_set(e, KL_ENOMEM, "out of memory");
            }
            out->v = nv;
            out->cap = nc;
        }
        trial_row *r = &out->v[out->n++];
        r->id = kl__col_i64(st, 0);
        r->heartbeat_us = kl__col_i64(st, 2);
        r->number = (int)number;
        r->state_running = state && !strcmp(state, "running");
        r->running = r->state_running && status && !strcmp(status, "running");
        r->lost = lost && !strcmp(lost, "1");
    }
    kl__free(st);
    return s == KL__DONE ? KL_OK : kl__track_sqlerr(t, s, e, "reading the study's trials");
}

/* Inside a transaction: when `where` holds for the trial's run, it fails
 * as lost (tags state=failed, error=why, lost=1: re-queued by the next
 * claim); *changed says whether it did. */
static int lose_trial(kl_track *t, int64_t id, const char *where, int64_t arg, const char *why, int *changed,
                      kl_err *e) {
    int rc = set_status_if(t, id, "failed", where, arg, changed, e);
    if (rc || !*changed) return rc;
    rc = kl__tag_put(t, id, "state", "failed", e);
    if (!rc) rc = kl__tag_put(t, id, "error", why, e);
    if (!rc) rc = kl__tag_put(t, id, "lost", "1", e);
    return rc;
}

int kl_track_trial_release(kl_track *t, int64_t run_id, const char *why, kl_err *e) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s (re-queued)", why && *why ? why : "given back");
    kl__track_lock(t);
    int changed = 0, rc = kl__track_begin_run(t, run_id, e);
    if (rc) {
        kl__track_unlock(t);
        return rc;
    }
    rc = lose_trial(t, run_id, "status = 'running'", 0, msg, &changed, e);
    if (!rc && !changed)
        rc = kl_err_set(e, KL_ESTATE, "run %lld is no longer running (another process ended it)", (long long)run_id);
    if (rc) kl__track_rollback(t);
    else rc = kl__track_commit(t, e);
    kl__track_unlock(t);
    return rc;
}

/* Stage 2: a trial still "running" whose heartbeat is older than the
 * timeout (or whose run was ended without a state, e.g. marked killed when
 * its process died) is failed: worker lost. */
static int mark_lost(kl_track *t, trial_rows *rows, double timeout_s, int *marked, kl_err *e) {
    int64_t now = kl_time_now_us(), limit = (int64_t)(timeout_s * 1e6);
    char why[160];
    snprintf(why, sizeof why, "worker lost: no heartbeat for %g s (re-queued)", timeout_s);
    for (size_t i = 0; i < rows->n; i++) {
        trial_row *r = &rows->v[i];
        if (!r->state_running || (r->running && now - r->heartbeat_us <= limit)) continue;
        /* decided on the row as it is now: a beat or an end since the read keeps it */
        int changed = 0;
        int rc = r->running
            ? lose_trial(t, r->id, "status = 'running' AND heartbeat_us < ?", now - limit, why, &changed, e)
            : lose_trial(t, r->id, "status <> 'running'", 0, why, &changed, e);
        if (rc) return rc;
        if (!changed) continue;
        r->running = r->state_running = 0;
        r->lost = 1;
        (*marked)++;
    }
    return KL_OK;
}

/* Stage 3: the number to run: the lowest lost number that no other run
 * of that number has taken, else the lowest number with no run at all.
 * -1: none left. *from: the lost run re-queued (0 for a fresh number). */
static int pick_number(const trial_rows *rows, int ntrials, int64_t *from, kl_err *e) {
    /* per number: 1 = taken by a run that is not lost, 2 = only lost runs */
    unsigned char *seen = calloc((size_t)ntrials, 1), *nlost = calloc((size_t)ntrials, 1);
    int64_t *lost_run = calloc((size_t)ntrials, sizeof *lost_run);
    if (!seen || !nlost || !lost_run) {
        free(seen);
        free(nlost);
        free(lost_run);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < rows->n; i++) {
        const trial_row *r = &rows->v[i];
        if (!r->lost) seen[r->number] = 1;
        else if (!seen[r->number]) seen[r->number] = 2;
        if (r->lost && nlost[r->number] < 255) nlost[r->number]++;
        if (r->lost && r->id > lost_run[r->number]) lost_run[r->number] = r->id; /* the latest attempt */
    }
    /* a number lost again and again (a configuration that kills its worker) is not re-queued forever */
    for (int n = 0; n < ntrials; n++)
        if (seen[n] == 2 && nlost[n] >= KL_TRACK_TRIAL_MAX_LOST) seen[n] = 1;
    free(nlost);
    int pick = -1;
    *from = 0;
    for (int n = 0; n < ntrials && pick < 0; n++)
        if (seen[n] == 2) {
            pick = n;
            *from = lost_run[n];
        }
    for (int n = 0; n < ntrials && pick < 0; n++)
        if (!seen[n]) pick = n;
    free(seen);
    free(lost_run);
    return pick;
}

/* Stage 4: the trial's run, its tags, and a re-queued trial's params. */
static int insert_trial(kl_track *t, int64_t root, const char *study, int number, int64_t from, int64_t *id,
                        kl_err *e) {
    kl__st *st = NULL;
    char *experiment = NULL;
    int rc = kl__track_prep(t, "SELECT x.name FROM runs r JOIN experiments x ON x.id = r.experiment_id WHERE r.id = ?",
                            &st, e);
    if (rc) return rc;
    kl__bind_i64(st, 1, root);
    int s = kl__step(st);
    if (s == KL__ROW) experiment = strdup(kl__col_text(st, 0));
    kl__free(st);
    if (s != KL__ROW) return s == KL__DONE ? kl__track_notfound(t, e, "study run %lld not found", (long long)root)
                                           : kl__track_sqlerr(t, s, e, "finding the study's run");
    if (!experiment) return kl_err_set(e, KL_ENOMEM, "out of memory");
    char name[600], num[32];
    snprintf(name, sizeof name, "%s/trial-%d", study, number);
    snprintf(num, sizeof num, "%d", number);
    rc = kl__run_insert(t, experiment, name, root, id, e);
    free(experiment);
    const char *tags[][2] = {{"kind", "trial"}, {"study", study}, {"trial", num}, {"state", "running"}};
    for (size_t i = 0; i < KL_ARRAY_LEN(tags) && !rc; i++) rc = kl__tag_put(t, *id, tags[i][0], tags[i][1], e);
    if (rc || !from) return rc;
    static const char copy_params[] =
        "INSERT INTO params(run_id, key, value) SELECT ?, key, value FROM params WHERE run_id = ?";
    if ((rc = kl__track_prep(t, copy_params, &st, e)))
        return rc;
    kl__bind_i64(st, 1, *id);
    kl__bind_i64(st, 2, from);
    s = kl__step(st);
    kl__free(st);
    if (s != KL__DONE) return kl__track_sqlerr(t, s, e, "copying a re-queued trial's params");
    char fromtxt[32];
    snprintf(fromtxt, sizeof fromtxt, "%lld", (long long)from);
    return kl__tag_put(t, *id, "requeued_from", fromtxt, e);
}

int kl_track_trial_claim(kl_track *t, int64_t root, const char *study, int ntrials, double heartbeat_timeout_s,
                         kl_track_claim *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    out->number = -1;
    if (root <= 0 || !study || !*study || ntrials < 1 || !(heartbeat_timeout_s > 0))
        return kl_err_set(e, KL_EINVAL, "trial claim: a study run, a name, trials >= 1 and a heartbeat timeout > 0");
    trial_rows rows = {0};
    kl__track_lock(t);
    /* one claimer of this study at a time (PostgreSQL: the study's lock;
     * SQLite: BEGIN IMMEDIATE, every writer) */
    int rc = kl__track_begin_run(t, root, e);
    if (rc) {
        kl__track_unlock(t);
        return rc;
    }
    int64_t from = 0;
    if (!(rc = read_trials(t, root, ntrials, &rows, e)) &&
        !(rc = mark_lost(t, &rows, heartbeat_timeout_s, &out->lost_marked, e))) {
        int n = pick_number(&rows, ntrials, &from, e);
        for (size_t i = 0; i < rows.n; i++) out->running += rows.v[i].running;
        if (n < -1) rc = n;
        else if (n == -1) rc = out->running ? KL_EBUSY : KL_ENOTFOUND;
        else if (!(rc = insert_trial(t, root, study, n, from, &out->run_id, e))) {
            out->number = n;
            out->requeued_from = from;
        }
    }
    free(rows.v);
    if (rc && rc != KL_ENOTFOUND && rc != KL_EBUSY) {
        kl__track_rollback(t);
        kl__track_unlock(t);
        memset(out, 0, sizeof *out);
        out->number = -1;
        return rc;
    }
    int running = out->running, marked = out->lost_marked;
    int crc = kl__track_commit(t, e); /* "none left" still commits the trials it marked lost */
    kl__track_unlock(t);
    if (crc) {
        memset(out, 0, sizeof *out);
        out->number = -1;
        return crc;
    }
    out->running = running;
    out->lost_marked = marked;
    if (rc == KL_EBUSY)
        return kl_err_set(e, KL_EBUSY, "study '%s': no trial free now; %d still running elsewhere", study, running);
    if (rc == KL_ENOTFOUND)
        return kl_err_set(e, KL_ENOTFOUND, "study '%s': no trial left to claim (all %d taken, none running)", study,
                          ntrials);
    return KL_OK;
}
