/* The training loop behind `keel train`: data (.npy) checks, seeded split
 * and shuffling, the memory plan (and --memory-limit), forward/backward,
 * clipping, schedules, optimizer steps, validation, early stopping,
 * best-model selection, checkpoints every N steps (resumable bit-identically)
 * and the artifacts (model.onnx, model.safetensors, meta.json, card.md,
 * metrics.csv, curves.svg). */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel/profile.h"
#include "train/runlog.h"
#include "train/train_data.h"
#include "train/train_images.h"
#include "train/train_int.h"

#ifndef KEEL_VERSION
#define KEEL_VERSION "unknown"
#define KEEL_GIT_COMMIT "unknown"
#endif

/* ================================================================ data */

typedef struct {
    int64_t n;          /* rows */
    float *x;           /* (n, in_numel) */
    int64_t *yi;        /* CE labels (n) */
    float *yf;          /* BCE/MSE targets (n, out_numel) */
    char x_sha[65], y_sha[65];
    const char *shards_id;     /* image shard sets: dataset identity, loader statistics */
    kl_loader_stats ls;
} tr_data;

static void data_free(tr_data *d) {
    kl_mem_free(d->x); kl_mem_free(d->yi); kl_mem_free(d->yf);
    memset(d, 0, sizeof *d);
}

static int data_check(const tr_model *m, const char *xp, const char *yp, tr_array *X, tr_array *Y, tr_data *d, kl_err *e);

/* Loads and checks X/y (.npy) against the model: shapes, NaN (names the
 * row), labels in range (names the row). */
static int data_load(const tr_model *m, const char *xp, const char *yp, tr_data *d, kl_err *e) {
    tr_array X = {0}, Y = {0};
    memset(d, 0, sizeof *d);
    int rc = kl__train_npy_read(xp, &X, e);
    if (!rc) rc = kl__train_npy_read(yp, &Y, e);
    if (!rc && !(rc = kl_sha256_file_hex(xp, d->x_sha, e))) rc = kl_sha256_file_hex(yp, d->y_sha, e);
    if (!rc) return data_check(m, xp, yp, &X, &Y, d, e);
    kl__train_array_free(&X);
    kl__train_array_free(&Y);
    return rc;
}

/* A label of class names (the dataset's label_classes) against the model's
 * outputs: K classes need K logits (cross_entropy) or, for two, one
 * (bce_with_logits); a regression of class indices is refused. */
static int classes_check(const tr_model *m, const tr_dsinfo *info, kl_err *e) {
    if (!info || !info->nclasses) return KL_OK;
    const tr_spec *s = m->spec;
    const char *lab = s->ds->label;
    if (s->loss == TR_LOSS_MSE)
        return kl_err_set(e, KL_EINVAL,
                          "label '%s' holds %d class names (%s, ...): a classification loss is needed, not mse", lab,
                          info->nclasses, info->classes[0]);
    if (s->loss == TR_LOSS_BCE && info->nclasses != 2)
        return kl_err_set(e, KL_ESHAPE, "label '%s' has %d classes: bce_with_logits takes two (use cross_entropy)", lab,
                          info->nclasses);
    if (s->loss == TR_LOSS_CE && m->out_numel != info->nclasses)
        return kl_err_set(e, KL_ESHAPE, "label '%s' has %d classes (%s ... %s) but the last layer has %lld outputs",
                          lab, info->nclasses, info->classes[0], info->classes[info->nclasses - 1],
                          (long long)m->out_numel);
    return KL_OK;
}

/* The Parquet source's feature columns (F) and label classes against the model. */
static int ds_model_check(const tr_model *m, int64_t F, const tr_dsinfo *info, kl_err *e) {
    if (F != m->in_numel && info) {
        kl_buf b;
        kl_buf_init(&b);
        for (int i = 0; i < info->nnames; i++) kl_buf_printf(&b, "%s%s", i ? ", " : "", info->names[i]);
        int rc = kl_err_set(e, KL_ESHAPE, "%s: %lld feature columns (%s), but input.shape has %lld values",
                            m->spec->ds->path, (long long)F, b.data ? b.data : "", (long long)m->in_numel);
        kl_buf_free(&b);
        return rc;
    }
    return classes_check(m, info, e);
}

static void ds_label_name(const tr_model *m, char *yn, size_t n) {
    snprintf(yn, n, "%s: label '%s'", m->spec->ds->path, m->spec->ds->label);
}

/* A row group's rows of a source read by row group (data_stream.c): the
 * checks and conversion of data_check. */
static int stream_conv(void *ctx, tr_array *X, tr_array *Y, tr_rowset *out, kl_err *e) {
    const tr_model *m = ctx;
    char yn[300];
    tr_data d;
    memset(&d, 0, sizeof d);
    ds_label_name(m, yn, sizeof yn);
    int rc = data_check(m, m->spec->ds->path, yn, X, Y, &d, e);
    if (rc) return rc;
    *out = (tr_rowset){d.n, d.x, d.yi, d.yf};
    return KL_OK;
}

/* Loads part (TR_PART_*) of the spec's Parquet source (data.dataset). */
static int data_load_ds(const tr_model *m, int part, tr_data *d, tr_dsinfo *info, kl_err *e) {
    tr_array X = {0}, Y = {0};
    memset(d, 0, sizeof *d);
    int rc = kl__train_dsrc_load(m->spec->ds, part, &X, &Y, info, e);
    if (rc) return rc;
    char yn[300];
    ds_label_name(m, yn, sizeof yn);
    rc = ds_model_check(m, X.dims[1], info, e);
    if (!rc) rc = data_check(m, m->spec->ds->path, yn, &X, &Y, d, e);
    else kl__train_array_free(&X), kl__train_array_free(&Y);
    if (rc && info) kl__train_dsinfo_free(info);
    return rc;
}

/* Checks X/y against the model and converts them (frees X and Y). */
static int data_check(const tr_model *m, const char *xp, const char *yp, tr_array *Xa, tr_array *Ya, tr_data *d, kl_err *e) {
    tr_array X = *Xa, Y = *Ya;
    const tr_spec *s = m->spec;
    int rc = KL_OK;
    int64_t per = X.rank ? X.n / (X.dims[0] ? X.dims[0] : 1) : 0;
    if (X.rank < 1 || per != m->in_numel) {
        char b[64] = "";
        for (int i = 1; i < X.rank; i++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i > 1 ? "," : "", (long long)X.dims[i]);
        rc = kl_err_set(e, KL_ESHAPE, "%s: rows of shape [%s] (%lld values), but input.shape has %lld values", xp, b, (long long)per, (long long)m->in_numel);
        goto done;
    }
    d->n = X.dims[0];
    if (Y.rank < 1 || Y.dims[0] != d->n) { rc = kl_err_set(e, KL_ESHAPE, "%s has %lld rows, %s has %lld", xp, (long long)d->n, yp, (long long)(Y.rank ? Y.dims[0] : 0)); goto done; }
    if (!(d->x = kl_mem_alloc_e((size_t)(X.n ? X.n : 1) * 4, KL_TAG_DATASET, e))) { rc = KL_ENOMEM; goto done; }
    for (int64_t i = 0; i < X.n; i++) {
        double v = X.f[i];
        if (!isfinite(v)) { rc = kl_err_set(e, KL_EINVAL, "%s: row %lld, value %lld is %s", xp, (long long)(i / per), (long long)(i % per), isnan(v) ? "NaN" : "infinite"); goto done; }
        if (s->in_int) {
            const tr_layer *emb = NULL;
            for (int k = 0; k < m->n; k++) if (m->L[k].sp.type == TR_L_EMBEDDING) emb = &m->L[k];
            if (v != floor(v) || v < 0 || (emb && v >= (double)emb->sp.num)) {
                rc = kl_err_set(e, KL_ERANGE, "%s: row %lld: index %g outside the embedding's [0, %lld)", xp, (long long)(i / per), v, (long long)(emb ? emb->sp.num : 0));
                goto done;
            }
        }
        d->x[i] = (float)v;
    }
    if (s->loss == TR_LOSS_CE) {
        int64_t K = m->out_numel;
        if (Y.n != d->n) { rc = kl_err_set(e, KL_ESHAPE, "%s: cross_entropy takes one integer label per row (shape (%lld,))", yp, (long long)d->n); goto done; }
        if (!(d->yi = kl_mem_alloc_e((size_t)(d->n ? d->n : 1) * 8, KL_TAG_DATASET, e))) { rc = KL_ENOMEM; goto done; }
        for (int64_t i = 0; i < d->n; i++) {
            double v = Y.f[i];
            if (!(v == floor(v)) || v < 0 || v >= (double)K) {
                rc = kl_err_set(e, KL_ERANGE, "%s: row %lld: label %g outside the class range [0, %lld) of the model's output", yp, (long long)i, v, (long long)K);
                goto done;
            }
            d->yi[i] = (int64_t)v;
        }
    } else {
        if (Y.n != d->n * m->out_numel) { rc = kl_err_set(e, KL_ESHAPE, "%s: %lld targets per row, the model gives %lld outputs", yp, (long long)(Y.n / (d->n ? d->n : 1)), (long long)m->out_numel); goto done; }
        if (!(d->yf = kl_mem_alloc_e((size_t)(Y.n ? Y.n : 1) * 4, KL_TAG_DATASET, e))) { rc = KL_ENOMEM; goto done; }
        for (int64_t i = 0; i < Y.n; i++) {
            if (!isfinite(Y.f[i])) { rc = kl_err_set(e, KL_EINVAL, "%s: row %lld: target is %s", yp, (long long)(i / m->out_numel), isnan(Y.f[i]) ? "NaN" : "infinite"); goto done; }
            if (s->loss == TR_LOSS_BCE && (Y.f[i] < 0 || Y.f[i] > 1)) { rc = kl_err_set(e, KL_ERANGE, "%s: row %lld: BCE target %g outside [0, 1]", yp, (long long)(i / m->out_numel), Y.f[i]); goto done; }
            d->yf[i] = (float)Y.f[i];
        }
    }
done:
    kl__train_array_free(&X);
    kl__train_array_free(&Y);
    if (rc) data_free(d);
    return rc;
}

/* ================================================================ loss & metrics */

/* Loss and accuracy of an evaluation; for an mse loss also the sums of the
 * regression errors (tr_eval_regression turns them into MAE, RMSE, R2). */
typedef struct {
    double loss;
    int64_t correct, count;
    double abs_err, sq_err, sum_y, sum_y2; /* mse: over reg_n values */
    int64_t reg_n;
    double auc; /* binary classifiers' AUC (final_validation; NaN: not measured) */
} tr_eval;

typedef struct { double mae, rmse, r2, base_rmse; } tr_reg;

typedef struct { double s; int pos; } sc_lab;
static double auc_roc(sc_lab *v, int64_t n, int npts, cJSON *roc);

/* MAE, RMSE, R2 and the mean predictor's RMSE (the labels' standard
 * deviation) of an evaluation; 0 when it has no regression values. */
static int tr_eval_regression(const tr_eval *ev, tr_reg *r) {
    if (ev->reg_n <= 0) return 0;
    double n = (double)ev->reg_n, sst = ev->sum_y2 - ev->sum_y * ev->sum_y / n;
    r->mae = ev->abs_err / n;
    r->rmse = sqrt(ev->sq_err / n);
    r->base_rmse = sqrt(sst > 0 ? sst / n : 0);
    r->r2 = sst > 0 ? 1 - ev->sq_err / sst : NAN;
    return 1;
}

/* Counts the correct predictions of a batch (CE: argmax; BCE: sign). */
static void batch_acc(const tr_model *m, const float *z, int64_t B, const int64_t *yi, const float *yf, tr_eval *acc) {
    const tr_spec *s = m->spec;
    int64_t K = m->out_numel;
    for (int64_t r = 0; r < B; r++) {
        if (s->loss == TR_LOSS_CE) {
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++) if (z[r * K + k] > z[r * K + best]) best = k;
            acc->correct += best == yi[r];
            acc->count++;
        } else if (s->loss == TR_LOSS_BCE) {
            for (int64_t k = 0; k < K; k++) { acc->correct += (z[r * K + k] > 0) == (yf[r * K + k] > 0.5f); acc->count++; }
        } else if (yf) {
            for (int64_t k = 0; k < K; k++) {
                double y = yf[r * K + k], d = (double)z[r * K + k] - y;
                acc->abs_err += fabs(d); acc->sq_err += d * d; acc->sum_y += y; acc->sum_y2 += y * y;
                acc->reg_n++;
            }
        }
    }
}

static void gather_rows(const tr_model *m, const tr_data *d, const int64_t *idx, int64_t B, float *xb, int64_t *yb, float *yfb) {
    int64_t F = m->in_numel, K = m->out_numel;
    for (int64_t r = 0; r < B; r++) {
        memcpy(xb + r * F, d->x + idx[r] * F, (size_t)F * 4);
        if (d->yi) yb[r] = d->yi[idx[r]];
        if (d->yf) memcpy(yfb + r * K, d->yf + idx[r] * K, (size_t)K * 4);
    }
}

/* ================================================================ batch sources */

static void epoch_perm(const tr_spec *s, int64_t epoch, int64_t *idx, int64_t n);

/* Where a run's batches come from: rows of the in-memory arrays gathered by
 * index (seeded shuffle per epoch), or an image shard set through the loader
 * (the loader's batch buffer is the model input: no copy). */
typedef struct {
    const tr_data *d; const int64_t *rows; int64_t n; int shuffle;   /* arrays */
    int64_t *idx, idx_epoch;
    float *xb; int64_t *yb; float *yfb;
    tr_images *im;                                                  /* image shards */
    tr_stream *st; /* a Parquet source read by row group (data_stream.c) */
} tr_batches;

/* Rows [r0, r0 + n) of epoch `epoch`'s order of the arrays: the order is a
 * function of (seed, epoch) only, so a rank takes its rows of a global batch
 * without any exchange. Pointers valid until the next call. */
static int batch_rows(tr_batches *bs, const tr_model *m, int64_t epoch, int64_t r0, int64_t n, const float **x,
                      const int64_t **yi, const float **yf, kl_err *e) {
    *x = bs->xb;
    *yi = bs->yb;
    *yf = bs->yfb;
    if (bs->st) return kl__train_stream_rows(bs->st, epoch, r0, n, bs->xb, bs->yb, bs->yfb, e);
    if (bs->idx_epoch != epoch) {
        memcpy(bs->idx, bs->rows, (size_t)bs->n * 8);
        if (bs->shuffle) epoch_perm(m->spec, epoch, bs->idx, bs->n);
        bs->idx_epoch = epoch;
    }
    gather_rows(m, bs->d, bs->idx + r0, n, bs->xb, bs->yb, bs->yfb);
    return KL_OK;
}

/* Batch b of epoch `epoch` (of size B, the last may be shorter). Pointers
 * valid until the next call. */
static int batches_get(tr_batches *bs, const tr_model *m, int64_t epoch, int64_t b, int64_t B, const float **x, const int64_t **yi,
                       const float **yf, int64_t *nb, kl_err *e) {
    if (bs->im) {
        kl_batch kb;
        int rc = kl_loader_next(bs->im->ld, &kb, e);
        if (!rc && (kb.end || kb.epoch != epoch || kb.index != b)) { /* a new pass or a resume: move the loader */
            if (!(rc = kl_loader_seek(bs->im->ld, epoch, b, e))) rc = kl_loader_next(bs->im->ld, &kb, e);
        }
        if (rc) return rc;
        if (kb.end)
            return kl_err_set(e, KL_EINTERNAL, "loader: no batch %lld of epoch %lld", (long long)b, (long long)epoch);
        *x = kb.images; *yi = kb.labels; *yf = NULL; *nb = kb.n;
        return KL_OK;
    }
    *nb = KL_MIN(B, bs->n - b * B);
    return batch_rows(bs, m, epoch, b * B, *nb, x, yi, yf, e);
}

/* Eval-mode pass over the n rows of bs in batches of m->B; returns mean loss
 * weighted by batch size, accuracy, and optionally all outputs (n, K) and
 * labels (n). */
static int evaluate(tr_model *m, tr_batches *bs, int64_t n, tr_eval *out, float *all_out, int64_t *all_y, kl_err *e) {
    memset(out, 0, sizeof *out);
    out->auc = NAN;
    double tot = 0;
    for (int64_t b0 = 0, b = 0; b0 < n; b0 += m->B, b++) {
        const float *x, *yf;
        const int64_t *yi;
        int64_t B;
        int rc = batches_get(bs, m, 0, b, m->B, &x, &yi, &yf, &B, e);
        if (rc) return rc;
        double loss;
        const float *z = kl__train_model_eval(m, x, yi, yf, B, &loss, e);
        if (!z) return e->code ? e->code : KL_EINTERNAL;
        batch_acc(m, z, B, yi, yf, out);
        tot += loss * (double)B;
        if (all_out) memcpy(all_out + b0 * m->out_numel, z, (size_t)(B * m->out_numel) * 4);
        if (all_y && yf && m->spec->loss == TR_LOSS_BCE) /* a BCE label is a float: 0/1 */
            for (int64_t i = 0; i < B; i++) all_y[b0 + i] = yf[i * m->out_numel] > 0.5f;
        else if (all_y && yi) memcpy(all_y + b0, yi, (size_t)B * 8);
    }
    out->loss = n ? tot / (double)n : NAN;
    return KL_OK;
}

/* ================================================================ metrics rows */

typedef struct { int64_t step, epoch; int split; /* 0 train step, 1 val epoch, 2 train epoch */ double loss, acc, lr, gnorm; } tr_row;
typedef struct { tr_row *r; size_t n, cap; } tr_rows;

/* Logs the per-epoch metrics of rows[*logged..n) (train_loss, val_loss,
 * val_accuracy by epoch) to the experiment store in one transaction, so that
 * a killed run keeps every finished epoch. */
static int rows_log(kl_track_run *run, const tr_rows *rs, size_t *logged, kl_err *e) {
    if (!run || *logged >= rs->n) return KL_OK;
    kl_metric_point *pts = calloc((rs->n - *logged) * 2 + 1, sizeof *pts);
    if (!pts) return kl_err_set(e, KL_ENOMEM, "out of memory");
    size_t np = 0;
    for (size_t i = *logged; i < rs->n; i++) {
        const tr_row *r = &rs->r[i];
        if (r->split == 2) pts[np++] = (kl_metric_point){"train_loss", r->epoch, 0, r->loss};
        if (r->split == 1) {
            pts[np++] = (kl_metric_point){"val_loss", r->epoch, 0, r->loss};
            if (isfinite(r->acc)) pts[np++] = (kl_metric_point){"val_accuracy", r->epoch, 0, r->acc};
        }
    }
    int rc = np ? kl_track_log_metrics(run, pts, np, e) : KL_OK;
    free(pts);
    if (!rc) *logged = rs->n;
    return rc;
}

static void rows_add(tr_rows *rs, tr_row r) {
    if (rs->n == rs->cap) {
        size_t nc = rs->cap ? rs->cap * 2 : 256;
        tr_row *p = realloc(rs->r, nc * sizeof *p);
        if (!p) return;
        rs->r = p; rs->cap = nc;
    }
    rs->r[rs->n++] = r;
}

static const char *split_name[] = {"train_step", "val", "train"};

static int write_metrics_csv(const char *path, const tr_rows *rs, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "step,epoch,split,loss,accuracy,lr,grad_norm\n");
    for (size_t i = 0; i < rs->n; i++) {
        const tr_row *r = &rs->r[i];
        kl_buf_printf(&b, "%lld,%lld,%s,%.9g,", (long long)r->step, (long long)r->epoch, split_name[r->split], r->loss);
        if (isnan(r->acc)) kl_buf_puts(&b, ","); else kl_buf_printf(&b, "%.6f,", r->acc);
        if (r->split == 0) kl_buf_printf(&b, "%.9g,%.9g\n", r->lr, r->gnorm); else kl_buf_puts(&b, ",\n");
    }
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

static int read_metrics_csv(const char *path, int64_t upto_step, tr_rows *rs) {
    FILE *f = fopen(path, "r");
    if (!f) return KL_OK;
    char line[512];
    if (!fgets(line, sizeof line, f)) { fclose(f); return KL_OK; }
    while (fgets(line, sizeof line, f)) {
        tr_row r = {0};
        char sp[32] = "";
        long long st, ep;
        char *p = line;
        st = strtoll(p, &p, 10); p++;
        ep = strtoll(p, &p, 10); p++;
        size_t k = strcspn(p, ",");
        snprintf(sp, sizeof sp, "%.*s", (int)k, p);
        p += k + 1;
        r.step = st; r.epoch = ep;
        r.split = !strcmp(sp, "val") ? 1 : !strcmp(sp, "train") ? 2 : 0;
        r.loss = strtod(p, &p); p++;
        r.acc = *p == ',' ? NAN : strtod(p, &p); p++;
        if (r.split == 0) { r.lr = strtod(p, &p); p++; r.gnorm = strtod(p, &p); }
        if (r.step <= upto_step && !(r.split != 0 && r.step == upto_step && 0)) rows_add(rs, r);
    }
    fclose(f);
    return KL_OK;
}

/* ================================================================ curves.svg */

/* One series of curves.svg: the rows of split (0 train steps, 1 validation
 * epochs), their loss or (acc) accuracy. xs, ys: room for rs->n points. */
static kl_chart_series curve(const tr_rows *rs, int split, int acc, int64_t *xs, double *ys, const char *label) {
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++) {
        if (rs->r[i].split != split) continue;
        xs[n] = rs->r[i].step;
        ys[n++] = acc ? rs->r[i].acc : rs->r[i].loss;
    }
    return (kl_chart_series){label, xs, ys, n, NULL, acc, split == 1};
}

/* curves.svg (track's chart): the train loss per step, the validation loss
 * per epoch and, for classification, the validation accuracy (right axis),
 * titled by the loss; a log axis when the loss spans more than two decades. */
static int write_curves_svg(const char *path, const tr_rows *rs, tr_loss_kind loss, kl_err *e) {
    double hi = 0, lo = INFINITY;
    int have_acc = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const tr_row *r = &rs->r[i];
        if (isfinite(r->loss) && r->loss > hi) hi = r->loss;
        if (isfinite(r->loss) && r->loss > 0 && r->loss < lo) lo = r->loss;
        if (r->split == 1 && isfinite(r->acc)) have_acc = 1;
    }
    int logy = isfinite(lo) && hi / lo > 100;
    const char *name = loss == TR_LOSS_CE ? "cross-entropy" : loss == TR_LOSS_BCE ? "BCE" : "MSE";
    char title[160], ylabel[64];
    snprintf(title, sizeof title, "keel train: %s loss%s%s", name, logy ? " (log scale)" : "", have_acc ? " and validation accuracy" : "");
    snprintf(ylabel, sizeof ylabel, "%s loss%s", name, logy ? " (log)" : "");
    size_t cap = rs->n ? rs->n : 1;
    int64_t *xs = malloc(3 * cap * sizeof *xs);
    double *ys = malloc(3 * cap * sizeof *ys);
    if (!xs || !ys) { free(xs); free(ys); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    kl_chart_series ser[3] = {curve(rs, 0, 0, xs, ys, "train loss (per step)"),
                              curve(rs, 1, 0, xs + cap, ys + cap, "validation loss (per epoch)"),
                              curve(rs, 1, 1, xs + 2 * cap, ys + 2 * cap, "validation accuracy (right axis)")};
    kl_chart c = {title, "step", ylabel, "validation accuracy", ser, have_acc ? 3 : 2, 770, 420, logy};
    kl_buf b;
    kl_buf_init(&b);
    kl_svg_chart(&b, &c);
    free(xs);
    free(ys);
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

/* ================================================================ checkpoints */

typedef struct {
    int64_t step, epoch, batch;     /* next position: epoch, batch within the epoch */
    double best; int64_t best_epoch, bad_epochs;
    int stopped;
    double ep_loss; int64_t ep_n;   /* running train loss of the current epoch */
    double scale; int64_t tracker, skipped; /* fp16 dynamic loss scaling */
} tr_pos;

static int ckpt_write(tr_model *m, tr_optim *o, const tr_pos *pos, const char *loader_pos, const char *dir, int64_t step, kl_err *e) {
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
    tr_st_entry *ent = calloc((size_t)nt * 3 + 1, sizeof *ent);
    char (*names)[112] = calloc((size_t)nt * 3 + 1, sizeof *names);
    int n = 0, rc;
    if (!ent || !names) { free(ent); free(names); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    for (int i = 0; i < nt; i++) {
        snprintf(names[n], 112, "param.%s", refs[i].name);
        ent[n] = (tr_st_entry){names[n], refs[i].data, refs[i].rank, {refs[i].dims[0], refs[i].dims[1], refs[i].dims[2], refs[i].dims[3]}};
        n++;
        if (refs[i].buffer) continue;
        int64_t off = refs[i].data - m->params;
        for (int k = 0; k < 2; k++) {
            float *st = k ? o->v : o->m;
            if (!st) continue;
            snprintf(names[n], 112, "%s.%s", k ? "opt.exp_avg_sq" : (o->kind == TR_OPT_ADAMW ? "opt.exp_avg" : "opt.momentum_buffer"), refs[i].name);
            ent[n] = (tr_st_entry){names[n], st + off, refs[i].rank, {refs[i].dims[0], refs[i].dims[1], refs[i].dims[2], refs[i].dims[3]}};
            n++;
        }
    }
    char meta[1400];
    snprintf(meta, sizeof meta,
             "{\"format\":\"keel-checkpoint-1\",\"step\":\"%lld\",\"epoch\":\"%lld\",\"batch\":\"%lld\",\"opt_t\":\"%lld\",\"opt_has_buf\":\"%d\","
             "\"drop_rng\":\"%016llx%016llx%016llx%016llx\",\"best\":\"%a\",\"best_epoch\":\"%lld\",\"bad_epochs\":\"%lld\",\"seed\":\"%llu\","
             "\"ep_loss\":\"%a\",\"ep_n\":\"%lld\",\"scale\":\"%a\",\"tracker\":\"%lld\",\"skipped\":\"%lld\"%s%s%s}",
             (long long)pos->step, (long long)pos->epoch, (long long)pos->batch, (long long)o->t, o->has_buf,
             (unsigned long long)m->drop_rng.s[0], (unsigned long long)m->drop_rng.s[1], (unsigned long long)m->drop_rng.s[2],
             (unsigned long long)m->drop_rng.s[3], pos->best, (long long)pos->best_epoch, (long long)pos->bad_epochs,
             (unsigned long long)m->spec->seed, pos->ep_loss, (long long)pos->ep_n, pos->scale, (long long)pos->tracker, (long long)pos->skipped,
             loader_pos ? ",\"loader\":\"" : "", loader_pos ? loader_pos : "", loader_pos ? "\"" : "");
    char path[4096];
    snprintf(path, sizeof path, "%s/ckpt-%08lld.safetensors", dir, (long long)step);
    rc = kl__train_safetensors_write(path, ent, n, meta, e);
    if (!rc && step > 3 * m->spec->ckpt_every) { /* keep the newest three */
        snprintf(path, sizeof path, "%s/ckpt-%08lld.safetensors", dir, (long long)(step - 3 * m->spec->ckpt_every));
        remove(path);
        strncat(path, ".sha256", sizeof path - strlen(path) - 1);
        remove(path);
    }
    free(ent);
    free(names);
    return rc;
}

typedef struct { tr_model *m; tr_optim *o; int found; } load_ctx;

static int load_tensor(void *ctx, const char *name, const char *dtype, int rank, const int64_t *dims, const void *data, size_t nbytes, kl_err *e) {
    load_ctx *c = ctx;
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    int nt = kl__train_model_tensors(c->m, refs, TR_MAX_LAYERS * 4);
    const char *pname = name;
    float *base = NULL;
    if (!strncmp(name, "param.", 6)) pname = name + 6;
    else if (!strncmp(name, "opt.exp_avg_sq.", 15)) { pname = name + 15; base = c->o ? c->o->v : NULL; }
    else if (!strncmp(name, "opt.exp_avg.", 12)) { pname = name + 12; base = c->o ? c->o->m : NULL; }
    else if (!strncmp(name, "opt.momentum_buffer.", 20)) { pname = name + 20; base = c->o ? c->o->m : NULL; }
    else if (c->o) return KL_OK;
    if (!c->o && name != pname && base == NULL && strncmp(name, "param.", 6)) return KL_OK;
    for (int i = 0; i < nt; i++) {
        if (strcmp(refs[i].name, pname)) continue;
        if (strcmp(dtype, "F32") || nbytes != (size_t)refs[i].n * 4)
            return kl_err_set(e, KL_ESHAPE, "tensor '%s': %s with %zu bytes, the model needs F32 with %lld", name, dtype, nbytes, (long long)refs[i].n * 4);
        float *dst = refs[i].data;
        if (base) {
            if (refs[i].buffer) return KL_OK;
            dst = base + (refs[i].data - c->m->params);
        } else if (name != pname && strncmp(name, "param.", 6)) return KL_OK;
        memcpy(dst, data, nbytes);
        c->found++;
        return KL_OK;
    }
    return kl_err_set(e, KL_ENOTFOUND, "tensor '%s' is not in the model", name);
}

static int hexval(char c) { return c >= 'a' ? c - 'a' + 10 : c - '0'; }

/* Newest checkpoint whose sha256 matches; 0 = none. */
static int ckpt_find(const char *dir, char *best, size_t n) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    char cand[256][128];
    int nc = 0;
    while ((de = readdir(d)) && nc < 256) {
        size_t l = strlen(de->d_name);
        if (!strncmp(de->d_name, "ckpt-", 5) && l > 12 && !strcmp(de->d_name + l - 12, ".safetensors") && l < 128) snprintf(cand[nc++], 128, "%s", de->d_name);
    }
    closedir(d);
    qsort(cand, (size_t)nc, 128, (int (*)(const void *, const void *))strcmp);
    for (int i = nc - 1; i >= 0; i--) {
        char p[4096], sp[4200], hex[65];
        snprintf(p, sizeof p, "%s/%s", dir, cand[i]);
        snprintf(sp, sizeof sp, "%s.sha256", p);
        char *txt = NULL;
        size_t len;
        kl_err e = {0};
        if (kl_read_file(sp, &txt, &len, &e)) continue;
        int ok = !kl_sha256_file_hex(p, hex, &e) && len >= 64 && !strncmp(txt, hex, 64);
        kl_mem_free(txt);
        if (ok) { snprintf(best, n, "%s", p); return 1; }
        kl_log(KL_LOG_WARN, "train", "checkpoint %s fails its sha256; trying an older one", p);
    }
    return 0;
}

static int ckpt_load(tr_model *m, tr_optim *o, tr_pos *pos, char *loader_pos, size_t lpn, const char *path, kl_err *e) {
    load_ctx c = {m, o, 0};
    char *meta = NULL;
    int rc = kl__train_safetensors_read(path, load_tensor, &c, &meta, e);
    if (rc) return rc;
    void *doc = NULL;
    if (meta) (void)kl_json_parse(meta, strlen(meta), path, &doc, NULL); /* unparsable: "lacks 'step'" below */
    free(meta);
    cJSON *j = doc;
    const char *keys[] = {"step", "epoch", "batch", "opt_t", "opt_has_buf", "drop_rng", "best", "best_epoch", "bad_epochs", "ep_loss", "ep_n", "scale", "tracker", "skipped"};
    const char *v[14];
    for (int i = 0; i < 14; i++) {
        cJSON *it = cJSON_GetObjectItem(j, keys[i]);
        v[i] = cJSON_IsString(it) ? it->valuestring : NULL;
        if (!v[i]) { cJSON_Delete(j); return kl_err_set(e, KL_EPARSE, "%s: metadata lacks '%s'", path, keys[i]); }
    }
    pos->step = strtoll(v[0], NULL, 10); pos->epoch = strtoll(v[1], NULL, 10); pos->batch = strtoll(v[2], NULL, 10);
    o->t = strtoll(v[3], NULL, 10); o->has_buf = atoi(v[4]);
    if (strlen(v[5]) != 64) { cJSON_Delete(j); return kl_err_set(e, KL_EPARSE, "%s: bad drop_rng", path); }
    for (int w = 0; w < 4; w++) {
        uint64_t x = 0;
        for (int k = 0; k < 16; k++) x = x << 4 | (uint64_t)hexval(v[5][w * 16 + k]);
        m->drop_rng.s[w] = x;
    }
    pos->best = strtod(v[6], NULL); pos->best_epoch = strtoll(v[7], NULL, 10); pos->bad_epochs = strtoll(v[8], NULL, 10);
    pos->ep_loss = strtod(v[9], NULL); pos->ep_n = strtoll(v[10], NULL, 10);
    pos->scale = strtod(v[11], NULL); pos->tracker = strtoll(v[12], NULL, 10); pos->skipped = strtoll(v[13], NULL, 10);
    cJSON *lp = cJSON_GetObjectItem(j, "loader");
    snprintf(loader_pos, lpn, "%s", cJSON_IsString(lp) ? lp->valuestring : "");
    cJSON_Delete(j);
    return KL_OK;
}

static int weights_write(tr_model *m, const char *path, kl_err *e) {
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
    tr_st_entry ent[TR_MAX_LAYERS * 4];
    for (int i = 0; i < nt; i++) ent[i] = (tr_st_entry){refs[i].name, refs[i].data, refs[i].rank, {refs[i].dims[0], refs[i].dims[1], refs[i].dims[2], refs[i].dims[3]}};
    return kl__train_safetensors_write(path, ent, nt, "{\"format\":\"keel-weights-1\"}", e);
}

int kl__train_load_weights(tr_model *m, const char *path, kl_err *e) {
    load_ctx c = {m, NULL, 0};
    return kl__train_safetensors_read(path, load_tensor, &c, NULL, e);
}
int kl__train_save_weights(tr_model *m, const char *path, kl_err *e) { return weights_write(m, path, e); }

/* ================================================================ permutations */

static void epoch_perm(const tr_spec *s, int64_t epoch, int64_t *idx, int64_t n) {
    if (!s->shuffle) return;
    kl_rng r;
    kl_rng_seed(&r, s->seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch * 0xD1B54A32D192ED03ull + 7);
    kl_rng_shuffle_i64(&r, idx, n);
}

/* ================================================================ the run */

/* profile.json of the model (docs/monitoring.md): the features' reference
 * profile (written by the fit next to features.json) with the model outputs
 * on the validation rows (the training rows without a validation split) */
static int write_profile(tr_model *m, const char *features_json, const char *out, tr_batches *bs, int64_t n,
                         kl_err *e) {
    char src[4096], dst[4096], name[64];
    kl_profile_path_for(features_json, src, sizeof src);
    if (!kl_path_exists(src) || n <= 0) return KL_OK;
    kl_profile *p = NULL;
    tr_eval ev;
    float *z = kl_mem_alloc((size_t)n * (size_t)m->out_numel * sizeof *z, KL_TAG_WORKSPACE);
    int rc = z ? kl_profile_load(src, &p, e) : kl_err_set(e, KL_ENOMEM, "out of memory for the output profile");
    if (!rc) rc = evaluate(m, bs, n, &ev, z, NULL, e);
    for (int64_t k = 0; !rc && k < m->out_numel; k++) {
        if (m->out_numel == 1) snprintf(name, sizeof name, "output");
        else snprintf(name, sizeof name, "output[%lld]", (long long)k);
        rc = kl_profile_add_numeric(p, name, KL_PROF_OUTPUT, z + k, (size_t)n, (size_t)m->out_numel, e);
    }
    snprintf(dst, sizeof dst, "%s/profile.json", out);
    if (!rc) rc = kl_profile_save(p, dst, e);
    kl_profile_free(p);
    kl_mem_free(z);
    return rc;
}

static const char *part_names[5] = {"params", "grads", "optimizer", "activations", "workspace"};

static int write_meta(const char *out, const tr_spec *s, const tr_model *m, const tr_data *d, const tr_rows *rs,
                      const tr_pos *pos, int64_t ntrain, int64_t nval, const tr_eval *fin_val, const tr_eval *fin_train,
                      int best_used, double secs, const tr_dsinfo *dsi, int64_t run_id, kl_err *e) {
    const char *files[] = {"model.onnx", "model.safetensors", "spec.yaml",     "metrics.csv",
                           "curves.svg", "card.md",           "features.json", "profile.json"};
    cJSON *j = cJSON_CreateObject();
    char p[4096];
    int rc = KL_OK;
    kl_manifest_files mf = {0};
    for (size_t i = 0; i < KL_ARRAY_LEN(files) && !rc; i++) {
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        if (kl_path_exists(p)) rc = kl_manifest_add(&mf, out, files[i], e);
    }
    if (!rc) rc = kl_manifest_write(&mf, j, e);
    kl_manifest_files_free(&mf);
    if (rc) goto done;
    cJSON_AddStringToObject(j, "format", "keel-model-1");
    cJSON_AddStringToObject(j, "code_version", KEEL_VERSION " (" KEEL_GIT_COMMIT ")");
    cJSON_AddNumberToObject(j, "seed", (double)s->seed);
    /* the run of the experiment store that trained it: keel models register links the version to it */
    if (run_id > 0) cJSON_AddNumberToObject(j, "run_id", (double)run_id);
    cJSON_AddStringToObject(j, "spec", s->text);
    cJSON *dd = cJSON_AddObjectToObject(j, "data");
    if (s->x_path) { cJSON_AddStringToObject(dd, "x", s->x_path); cJSON_AddStringToObject(dd, "x_sha256", d->x_sha); }
    if (s->y_path) { cJSON_AddStringToObject(dd, "y", s->y_path); cJSON_AddStringToObject(dd, "y_sha256", d->y_sha); }
    if (s->ds) { /* the dataset's identity: lineage dataset version -> feature hash -> model */
        char *abs = realpath(s->ds->path, NULL);
        cJSON_AddStringToObject(dd, "dataset", abs ? abs : s->ds->path);
        free(abs);
        cJSON_AddStringToObject(dd, "label", s->ds->label);
        if (dsi->dataset_version[0]) cJSON_AddStringToObject(dd, "dataset_version", dsi->dataset_version);
        if (dsi->manifest_sha[0]) cJSON_AddStringToObject(dd, "manifest_sha256", dsi->manifest_sha);
        if (dsi->feature_hash[0]) cJSON_AddStringToObject(dd, "feature_hash", dsi->feature_hash);
        cJSON *fa = cJSON_AddArrayToObject(dd, "features");
        for (int i = 0; i < dsi->nnames; i++) cJSON_AddItemToArray(fa, cJSON_CreateString(dsi->names[i]));
        cJSON_AddNumberToObject(dd, "dataset_rows", (double)dsi->rows_total);
        cJSON_AddNumberToObject(dd, "test_rows", (double)dsi->rows_part[TR_PART_TEST]);
    }
    if (s->shards) {
        cJSON_AddStringToObject(dd, "shards", s->shards);
        if (s->val_shards) cJSON_AddStringToObject(dd, "val_shards", s->val_shards);
        cJSON_AddStringToObject(dd, "shards_id", d->shards_id ? d->shards_id : "");
        cJSON *lo = cJSON_AddObjectToObject(j, "loader");
        cJSON_AddNumberToObject(lo, "wait_share", d->ls.wait_share);
        cJSON_AddNumberToObject(lo, "images_per_s", d->ls.samples_per_s);
        cJSON_AddNumberToObject(lo, "decode_mpix_per_s", d->ls.decode_s > 0 ? d->ls.decode_mpix / d->ls.decode_s : 0.0);
        cJSON_AddNumberToObject(lo, "queue_depth", d->ls.queue_depth);
    }
    cJSON_AddNumberToObject(dd, "train_rows", (double)ntrain);
    cJSON_AddNumberToObject(dd, "val_rows", (double)nval);
    cJSON_AddNumberToObject(j, "parameters", (double)m->nparams);
    cJSON_AddNumberToObject(j, "steps", (double)pos->step);
    cJSON_AddNumberToObject(j, "epochs", (double)pos->epoch);
    cJSON_AddNumberToObject(j, "train_seconds", secs);
    cJSON_AddBoolToObject(j, "early_stopped", pos->stopped);
    /* what the outputs mean, for serving (:predict "outputs": probability, label) */
    cJSON *oj = cJSON_AddObjectToObject(j, "output");
    cJSON_AddStringToObject(oj, "postprocess", s->loss == TR_LOSS_CE ? "softmax" : s->loss == TR_LOSS_BCE ? "sigmoid" : "none");
    if (s->loss != TR_LOSS_MSE) cJSON_AddNumberToObject(oj, "classes", (double)(s->loss == TR_LOSS_BCE ? 2 : m->out_numel));
    if (dsi && dsi->nclasses) { /* class k's name, from the features' string label */
        cJSON *cn = cJSON_AddArrayToObject(oj, "class_names");
        for (int i = 0; i < dsi->nclasses; i++) cJSON_AddItemToArray(cn, cJSON_CreateString(dsi->classes[i]));
    }
    cJSON *fm = cJSON_AddObjectToObject(j, "final_metrics");
    double last_loss = NAN;
    for (size_t i = 0; i < rs->n; i++) if (rs->r[i].split == 0) last_loss = rs->r[i].loss;
    if (isfinite(last_loss)) cJSON_AddNumberToObject(fm, "train_step_loss", last_loss);
    if (fin_train && fin_train->count) cJSON_AddNumberToObject(fm, "train_accuracy", (double)fin_train->correct / (double)fin_train->count);
    tr_reg rg;
    if (nval && tr_eval_regression(fin_val, &rg)) {
        cJSON_AddNumberToObject(fm, "val_mae", rg.mae);
        cJSON_AddNumberToObject(fm, "val_rmse", rg.rmse);
        if (isfinite(rg.r2)) cJSON_AddNumberToObject(fm, "val_r2", rg.r2);
        cJSON_AddNumberToObject(fm, "val_baseline_rmse", rg.base_rmse);
    }
    if (nval && isfinite(fin_val->loss)) {
        cJSON_AddNumberToObject(fm, "val_loss", fin_val->loss);
        if (fin_val->count) cJSON_AddNumberToObject(fm, "val_accuracy", (double)fin_val->correct / (double)fin_val->count);
        if (isfinite(fin_val->auc)) cJSON_AddNumberToObject(fm, "val_auc", fin_val->auc);
    }
    cJSON *bm = cJSON_AddObjectToObject(j, "best");
    cJSON_AddStringToObject(bm, "monitor", s->monitor);
    if (best_used) { cJSON_AddNumberToObject(bm, "value", pos->best); cJSON_AddNumberToObject(bm, "epoch", (double)pos->best_epoch); }
    cJSON_AddStringToObject(bm, "exported", best_used ? "best epoch by the monitor" : "final weights (no validation split)");
    snprintf(p, sizeof p, "%s/meta.json", out);
    rc = kl_json_write_file(p, j, 1, e);
done:
    cJSON_Delete(j);
    return rc;
}

static int write_card(const char *out, const tr_spec *s, const tr_model *m, int64_t ntrain, int64_t nval, const tr_pos *pos,
                      const tr_eval *fin_val, int best_used, const tr_dsinfo *dsi, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    const char *base = strrchr(s->path, '/');
    kl_buf_printf(&b, "# Model card: %s\n\n## Model details\n\n", base ? base + 1 : s->path);
    kl_buf_printf(&b, "- Trained by keel %s on %s\n- Parameters: %lld (float32)\n- Input: ", KEEL_VERSION, "this machine", (long long)m->nparams);
    for (int i = 0; i < s->in_rank; i++) kl_buf_printf(&b, "%s%lld", i ? "x" : "", (long long)s->in_dims[i]);
    kl_buf_printf(&b, " %s per sample; output: %lld values\n- Layers:", s->in_int ? "int64 indices" : "float32", (long long)m->out_numel);
    for (int i = 0; i < m->n; i++) kl_buf_printf(&b, "%s %s", i ? "," : "", kl__train_ltype_name(m->L[i].sp.type));
    kl_buf_printf(&b, "\n- Files: model.onnx (ONNX opset 17, eval mode), model.safetensors (weights), meta.json (hashes, lineage)\n\n");
    kl_buf_printf(&b, "## Intended use\n\n%s model for the task its training data describes. Not evaluated for use beyond the distribution of that data.\n\n",
                  s->loss == TR_LOSS_CE ? "A multi-class classification" : s->loss == TR_LOSS_BCE ? "A binary / multi-label classification" : "A regression");
    if (s->ds) {
        kl_buf_printf(&b, "## Training data\n\n- Dataset: `%s`, label `%s`, %d feature columns\n", s->ds->path, s->ds->label, dsi->nnames);
        if (dsi->dataset_version[0]) kl_buf_printf(&b, "- Dataset version: `%s`\n", dsi->dataset_version);
        if (dsi->manifest_sha[0]) kl_buf_printf(&b, "- Manifest sha256: `%s`\n", dsi->manifest_sha);
        if (dsi->feature_hash[0]) kl_buf_printf(&b, "- Feature hash: `%s` (features.json travels with the model)\n", dsi->feature_hash);
        kl_buf_printf(&b, "- %lld training rows, %lld validation rows, %lld test rows held out\n\n", (long long)ntrain, (long long)nval,
                      (long long)dsi->rows_part[TR_PART_TEST]);
    } else
        kl_buf_printf(&b, "## Training data\n\n- X: `%s`\n- y: `%s`\n- %lld training rows, %lld validation rows (split by seed %llu)\n\n",
                      s->x_path ? s->x_path : "?", s->y_path ? s->y_path : "?", (long long)ntrain, (long long)nval, (unsigned long long)s->seed);
    kl_buf_printf(&b, "## Training procedure\n\n- Loss: %s%s\n- Optimizer: %s, lr %g, weight decay %g\n- Batch size %lld, %lld steps over %lld epochs%s\n- Gradient clipping: %s\n\n",
                  s->loss == TR_LOSS_CE ? "cross-entropy" : s->loss == TR_LOSS_BCE ? "BCE with logits" : "MSE",
                  s->label_smoothing > 0 ? " with label smoothing" : "", s->opt == TR_OPT_ADAMW ? "AdamW" : "SGD", s->lr, s->wd,
                  (long long)s->batch, (long long)pos->step, (long long)pos->epoch, pos->stopped ? " (early stopped)" : "",
                  s->clip > 0 ? "global norm" : "none");
    kl_buf_printf(&b, "## Evaluation results\n\n");
    if (nval) {
        kl_buf_printf(&b, "| split | loss | accuracy |\n|---|---|---|\n| validation | %.4f | %s |\n\n", fin_val->loss,
                      fin_val->count ? "" : "n/a");
        if (fin_val->count) {
            b.len -= 5;
            kl_buf_printf(&b, "%.2f %% |\n\n", 100.0 * (double)fin_val->correct / (double)fin_val->count);
        }
        tr_reg rg;
        if (tr_eval_regression(fin_val, &rg))
            kl_buf_printf(&b, "| validation | MAE | RMSE | R² |\n|---|---|---|---|\n| model | %.6g | %.6g | %.4f |\n"
                              "| mean of the labels (baseline) | | %.6g | 0 |\n\n", rg.mae, rg.rmse, rg.r2, rg.base_rmse);
        if (best_used) kl_buf_printf(&b, "Exported weights: best epoch %lld by %s (%.4f).\n\n", (long long)pos->best_epoch, s->monitor, pos->best);
    } else kl_buf_puts(&b, "No validation split was used (val_fraction 0).\n\n");
    kl_buf_puts(&b, "Curves: curves.svg; per-step values: metrics.csv.\n\n## Limitations\n\n- Evaluated only on a held-out split of the same data; no fairness or robustness evaluation was run.\n- Float32 CPU training; results are reproducible bit-for-bit with the same spec, data and seed.\n");
    char p[4096];
    snprintf(p, sizeof p, "%s/card.md", out);
    int rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(p, b.data, b.len, e);
    kl_buf_free(&b);
    return rc;
}

static void print_plan(FILE *f, const uint64_t bytes[5], uint64_t data_bytes) {
    char b[32];
    uint64_t tot = 0;
    fprintf(f, "memory plan:\n");
    for (int i = 0; i < 5; i++) { fprintf(f, "  %-12s %12s\n", part_names[i], kl_fmt_bytes(bytes[i], b, sizeof b)); tot += bytes[i]; }
    fprintf(f, "  %-12s %12s\n", "dataset", kl_fmt_bytes(data_bytes, b, sizeof b));
    fprintf(f, "  %-12s %12s (all parts live together)\n", "peak", kl_fmt_bytes(tot + data_bytes, b, sizeof b));
}

/* kl_train_run in named stages over one run context (tr_run):
 *   run_open       spec, MPI (rank and world, src/train/dist.c), model, experiment-store run (rank 0)
 *   run_data       training and validation rows (.npy, Parquet, image shards)
 *   run_plan       steps per epoch, the memory plan and --memory-limit
 *   run_alloc      parameters, optimizer, initial weights, batch buffers, output folders
 *   run_resume     --resume: the newest valid checkpoint
 *   run_loop       epochs of steps (run_step: batch, step, update, checkpoint)
 *                  and epoch ends (run_epoch_end: validation, early stopping)
 *   run_artifacts  model.safetensors (best epoch), model.onnx, metrics, card, meta.json
 *   run_track_end  the final metrics and artifacts in the experiment store
 *   run_summary    the summary line(s) or --json
 * Each stage returns KL_OK or an error code; kl_train_run frees whatever was made. */
typedef struct {
    const char *spec_path;
    const kl_train_opts *o;
    FILE *rep;
    tr_spec *s;
    tr_model *m;
    tr_data d, dv;
    const tr_data *vd; /* the validation rows' arrays (d or dv) */
    tr_dsinfo dsi;
    kl_track *trk;
    kl_track_run *trun;
    tr_optim opt;
    tr_rows rows;
    size_t rows_logged; /* rows[0..rows_logged) are in the experiment store */
    tr_images imt, imv;
    int images; /* data.shards: batches from the loader */
    int64_t *idx_tr, *idx_va, *yb, *base_tr;
    float *xb, *yfb;
    int64_t ntr, nva, B, steps_per_epoch, total;
    kl_progress *pr;
    char p[4096], ckdir[4096], bestp[4096];
    int lower_better, cb_stop, nhist, best_used;
    tr_pos pos;
    double scale_hist[16];
    int64_t crash_at, samples;
    struct timespec t0;
    double secs;
    tr_eval fin_val, fin_train;
    tr_batches bt, bv;
    tr_dist dist;          /* rank and world (1 without MPI) */
    tr_par *par;           /* the step's gradients over the ranks (parallel.c) */
    int64_t L;             /* rows the step is planned for: B, or a rank's / micro-batch's share */
    int lead;              /* rank 0: writes every output */
    double rank_s[3 * 64]; /* per rank: step, compute, communication seconds (rank 0, at the end) */
    tr_pqs *pqs;           /* the training rows of a Parquet source read by row group ... */
    tr_stream *st;         /* ... in the epoch order of data_stream.c */
    double rank_d[5 * 64]; /* with st, per rank: tr_stream_stats (rank 0, at the end) */
} tr_run;

static int run_open(tr_run *r, kl_err *e) {
    const kl_train_opts *o = r->o;
    int rc;
    if ((rc = kl__train_spec_load_set(r->spec_path, o->sets, o->nsets, &r->s, e))) return rc;
    if (r->s->ds) r->s->ds->verify = o->verify;
    if ((rc = kl__train_dist_start(&r->dist, o->distributed, r->s->dist_timeout, e))) return rc;
    r->lead = r->dist.rank == 0;
    if ((rc = kl__train_model_new(r->s, &r->m, e))) return rc;
    if (o->tracking && r->lead && (rc = kl__train_runlog_start(o, r->s, r->m, r->spec_path, &r->trk, &r->trun, e)))
        return rc;
    if (r->trun && o->run_id_out) *o->run_id_out = kl_track_run_id(r->trun);
    return KL_OK;
}

/* rows 0..n-1 as an index list */
static int64_t *iota_rows(int64_t n, kl_err *e) {
    int64_t *v = malloc((size_t)(n + 1) * 8);
    if (!v) {
        kl_err_set(e, KL_ENOMEM, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) v[i] = i;
    return v;
}

/* image shard sets through the loader: training and validation records */
static int run_data_images(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    int rc;
    if ((rc = kl__train_images_open_set(&r->imt, s, r->m, s->shards, e))) return rc;
    r->d.shards_id = kl_shardset_id(r->imt.set);
    if ((rc = kl__train_images_open_set(&r->imv, s, r->m, s->val_shards ? s->val_shards : s->shards, e))) return rc;
    if (!s->val_shards)
        return kl__train_split_rows(kl_shardset_count(r->imt.set), s->seed, s->val_fraction, &r->idx_tr, &r->ntr,
                                 &r->idx_va, &r->nva, e);
    r->ntr = kl_shardset_count(r->imt.set);
    r->nva = kl_shardset_count(r->imv.set);
    return (r->idx_tr = iota_rows(r->ntr, e)) ? KL_OK : KL_ENOMEM;
}

/* .npy X/y or a Parquet source (data.dataset, src/train/data_pq.c); validation
 * from data.val_x/val_y, the dataset's val split, or a seeded split */
static int run_data_arrays(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    int rc, ds_val = s->ds && s->ds->has_split && (s->ds->split_col ? s->ds->nvals[1] > 0 : s->ds->frac[1] > 0);
    /* by row group (data_stream.c) unless the validation rows are a seeded draw of the training rows */
    if (s->ds && kl__train_dsrc_streamable(s->ds) && (ds_val || s->val_x || s->val_fraction <= 0)) {
        if ((rc = kl__train_pqs_open(s->ds, TR_PART_TRAIN, &r->pqs, &r->dsi, e))) return rc;
        if ((rc = ds_model_check(r->m, r->dsi.nnames, &r->dsi, e))) return rc;
        if (!ds_val && !s->val_x) {
            r->ntr = kl__train_pqs_rows(r->pqs);
            return KL_OK;
        }
    } else if (s->ds) {
        if ((rc = data_load_ds(r->m, TR_PART_TRAIN, &r->d, &r->dsi, e))) return rc;
    } else if ((rc = data_load(r->m, s->x_path, s->y_path, &r->d, e))) return rc;
    if (!s->val_x && !ds_val)
        return kl__train_split_rows(r->d.n, s->seed, s->val_fraction, &r->idx_tr, &r->ntr, &r->idx_va, &r->nva, e);
    if (ds_val) {
        if ((rc = data_load_ds(r->m, TR_PART_VAL, &r->dv, NULL, e))) return rc;
    } else {
        if (!s->val_y) return kl_err_set(e, KL_EINVAL, "%s: data.val_x needs data.val_y", r->spec_path);
        if ((rc = data_load(r->m, s->val_x, s->val_y, &r->dv, e))) return rc;
    }
    r->vd = &r->dv;
    r->ntr = r->pqs ? kl__train_pqs_rows(r->pqs) : r->d.n;
    r->nva = r->dv.n;
    if (!r->pqs && !(r->idx_tr = iota_rows(r->ntr, e))) return KL_ENOMEM;
    if (!(r->idx_va = iota_rows(r->nva, e))) return KL_ENOMEM;
    return KL_OK;
}

/* The loaders of image shards. Fast mode at N ranks: each rank's training
 * loader makes its B / N rows of every global batch (the loader's rank
 * sharding of the (seed, epoch) order; in the last, partial batch the ranks'
 * shares differ by one row at most, kl__train_par_rank_share); one process or the deterministic
 * mode: the whole batch, which the step's leaves slice. Validation: in
 * batches of the rows a step run takes. */
static int run_data_loaders(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    int shard = !s->deterministic && r->dist.world > 1, rc;
    if (shard && r->B % r->dist.world)
        return kl_err_set(e, KL_EINVAL,
                          "%s: data.shards with %d ranks: train.batch_size %lld must be a multiple of the rank count "
                          "(each rank's loader makes its share of every batch)",
                          r->spec_path, r->dist.world, (long long)r->B);
    if (shard) {
        r->imt.rank = r->dist.rank;
        r->imt.world = r->dist.world;
    }
    if ((rc = kl__train_images_start(&r->imt, s, r->idx_tr, r->ntr, 1, shard ? r->L : r->B, s->epochs, e))) return rc;
    return r->nva ? kl__train_images_start(&r->imv, s, r->idx_va, r->nva, 0, r->L, 1, e) : KL_OK;
}

static int run_data(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    int rc;
    r->images = s->shards != NULL;
    r->vd = &r->d;
    if (!r->images && !s->ds && (!s->x_path || !s->y_path))
        return kl_err_set(e, KL_EINVAL, "%s: data.x and data.y (.npy files), data.dataset or data.shards are required",
                          r->spec_path);
    if ((rc = r->images ? run_data_images(r, e) : run_data_arrays(r, e))) return rc;
    if (r->ntr < 1) return kl_err_set(e, KL_EINVAL, "no training rows left after the validation split");
    if ((rc = kl__train_par_check(s, r->dist.world, r->images, e))) return rc;
    r->B = KL_MIN(s->batch, r->ntr);
    r->L = kl__train_par_leaf_rows(s, r->dist.world, r->B);
    return r->images ? run_data_loaders(r, e) : KL_OK;
}

static int memory_limit_error(const uint64_t plan[5], uint64_t need, uint64_t limit, kl_err *e) {
    int big = 0;
    for (int i = 1; i < 5; i++)
        if (plan[i] > plan[big]) big = i;
    char b1[32], b2[32], b3[32], b4[32];
    return kl_err_set(e, KL_ENOMEM, "memory plan %s exceeds --memory-limit %s by %s; largest part: %s (%s)%s",
                      kl_fmt_bytes(need, b1, sizeof b1), kl_fmt_bytes(limit, b2, sizeof b2),
                      kl_fmt_bytes(need - limit, b3, sizeof b3), part_names[big],
                      kl_fmt_bytes(plan[big], b4, sizeof b4),
                      big == 3 || big == 4 ? " - a smaller batch_size reduces it" : "");
}

/* Decoded row groups kept per rank: two per stream of its rows (a leaf's rows
 * may span two), and two more. */
static int stream_cache(const tr_spec *s, int world) { return 2 * (int)((s->micro_batches + world - 1) / world) + 2; }

/* steps per epoch and in all; the memory plan, before any allocation of the model */
static int run_plan(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    tr_model *m = r->m;
    int64_t B = r->B, L = r->L; /* the global batch; the rows one step run takes */
    int rc;
    r->steps_per_epoch = r->images ? kl_loader_batches_per_epoch(r->imt.ld)
        : s->drop_last             ? r->ntr / B
                                   : (r->ntr + B - 1) / B;
    if (r->steps_per_epoch < 1) r->steps_per_epoch = 1;
    r->total = s->epochs * r->steps_per_epoch;
    if (s->max_steps && s->max_steps < r->total) r->total = s->max_steps;
    if (r->o->max_steps && r->o->max_steps < r->total) r->total = r->o->max_steps;
    uint64_t plan[5],
        tot = 0,
        data_bytes = (uint64_t)(r->d.n + r->dv.n) * (uint64_t)(m->in_numel * 4 + (r->d.yi ? 8 : m->out_numel * 4));
    for (int64_t u = 0, big = 0; r->pqs && u < kl__train_pqs_units(r->pqs); u++) /* the decoded row groups kept */
        if (kl__train_pqs_unit_rows(r->pqs, u) > big) {
            big = kl__train_pqs_unit_rows(r->pqs, u);
            data_bytes = (uint64_t)(r->dv.n + big * stream_cache(s, r->dist.world)) *
                (uint64_t)(m->in_numel * 4 + (s->loss == TR_LOSS_CE ? 8 : m->out_numel * 4));
        }
    if (r->images) /* the loaders' batch buffers: prefetch + 1 each */
        data_bytes =
            (uint64_t)(2 * (s->img.prefetch ? s->img.prefetch : 2 * (s->img.workers ? s->img.workers : 2)) + 2) *
            (uint64_t)B * (uint64_t)(m->in_numel * 4 + 8);
    /* the training step as one planned graph (train-mode forward, loss,
     * autodiff): activations and workspace are that plan's */
    m->fp16 = s->fp16;
    uint64_t g_act = 0, g_ws = 0;
    if ((rc = kl__train_step_prepare(m, L, &g_act, &g_ws, e))) return rc;
    kl__train_model_plan(m, L, kl__train_optim_slots(s), plan);
    plan[1] += kl__train_par_bytes(s, r->dist.world, m->nparams, m->nbuf); /* deterministic mode's tree vectors */
    plan[3] = g_act + (uint64_t)(L * m->out_numel) * 4;             /* + the eval output rows */
    plan[4] = g_ws + (uint64_t)L * (uint64_t)(m->in_numel * 4 + 8 + m->out_numel * 4); /* + batch, labels, targets */
    for (int i = 0; i < 5; i++) tot += plan[i];
    if (r->o->memory_report && r->lead) {
        print_plan(r->rep, plan, data_bytes);
        fprintf(r->rep, "training step: one planned graph (%d nodes: forward, loss, gradients)\n",
                kl__train_step_nodes(m));
    }
    if (r->o->memory_limit && tot + data_bytes > r->o->memory_limit)
        return memory_limit_error(plan, tot + data_bytes, r->o->memory_limit, e);
    if (r->o->memory_limit) {
        kl_mem_trim();
        kl_mem_set_budget(r->o->memory_limit);
    }
    return KL_OK;
}


/* the order of a Parquet source read by row group: S = micro_batches streams at any rank count */
static int run_stream(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    tr_stream_cfg c = {
        s->seed,        s->shuffle,      s->drop_last, r->B, s->micro_batches, stream_cache(s, r->dist.world),
        r->m->in_numel, r->m->out_numel, stream_conv,  r->m};
    int rc = kl__train_stream_new(r->pqs, &c, &r->st, e);
    r->bt.st = r->st;
    return rc;
}

/* parameters (initialised, or train.init), optimizer state, batch buffers, output folders */
static int run_alloc(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    tr_model *m = r->m;
    int64_t B = r->L; /* the batch buffers hold one step run's rows */
    int rc;
    if ((rc = kl__train_model_alloc(m, B, e))) return rc;
    if ((rc = kl__train_optim_init(&r->opt, s, m->nparams, e))) return rc;
    kl_rng init_rng;
    kl_rng_seed(&init_rng, s->seed);
    kl__train_model_init(m, &init_rng);
    if (s->init_path) {
        load_ctx lc = {m, NULL, 0};
        tr_tensor_ref refs[TR_MAX_LAYERS * 4];
        int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
        if ((rc = kl__train_safetensors_read(s->init_path, load_tensor, &lc, NULL, e))) {
            kl_err_prefix(e, "train.init %s", s->init_path);
            return rc;
        }
        if (lc.found != nt)
            return kl_err_set(e, KL_ENOTFOUND, "train.init %s: %d of the model's %d tensors found", s->init_path,
                              lc.found, nt);
    }
    r->xb = kl_mem_alloc_e((size_t)(B * m->in_numel) * 4, KL_TAG_WORKSPACE, e);
    r->yb = kl_mem_alloc_e((size_t)B * 8, KL_TAG_WORKSPACE, e);
    r->yfb = kl_mem_alloc_e((size_t)(B * m->out_numel) * 4, KL_TAG_WORKSPACE, e);
    if (!r->xb || !r->yb || !r->yfb) return KL_ENOMEM;
    if ((rc = kl__train_par_new(m, s, &r->dist, r->B, r->o->dist_no_allreduce, &r->par, e))) return rc;
    if (r->imt.world > 1) kl__train_par_even(r->par);
    snprintf(r->ckdir, sizeof r->ckdir, "%s/checkpoints", r->o->out_dir);
    if (r->lead && ((rc = kl_mkdir_p(r->o->out_dir, e)) || (rc = kl_mkdir_p(r->ckdir, e)))) return rc;
    snprintf(r->bestp, sizeof r->bestp, "%s/best.safetensors", r->ckdir);
    r->lower_better = !strcmp(s->monitor, "val_loss");
    r->pos = (tr_pos){0, 0, 0, r->lower_better ? INFINITY : -INFINITY, -1, 0, 0, 0, 0, s->ls_init, 0, 0};
    r->fin_val = (tr_eval){.loss = NAN};
    if (!(r->base_tr = malloc((size_t)(r->pqs ? 1 : r->ntr + 1) * 8))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    r->bt = (tr_batches){
        &r->d, r->idx_tr, r->ntr, s->shuffle, r->base_tr, -1, r->xb, r->yb, r->yfb, r->images ? &r->imt : NULL, NULL};
    r->bv =
        (tr_batches){r->vd, r->idx_va, r->nva, 0, r->idx_va, 0, r->xb, r->yb, r->yfb, r->images ? &r->imv : NULL, NULL};
    return r->pqs ? run_stream(r, e) : KL_OK;
}

/* --resume with several ranks: rank 0 reads the checkpoint (its outcome first,
 * so that a failure stops every rank), then sends the weights, the optimizer
 * state and the position: the position is global, so any rank count resumes
 * any checkpoint. */
static int run_resume_bcast(tr_run *r, int rc0, kl_err *e) {
    tr_dist *d = &r->dist;
    tr_model *m = r->m;
    int32_t st = rc0;
    int rc = kl__train_dist_bcast(d, &st, sizeof st, 0, "resume", e);
    if (rc || rc0) return rc ? rc : rc0;
    if (st)
        return kl_err_set(e, KL_ESTATE,
                          "--resume: rank 0 could not read the checkpoint (its error is in rank 0's output)");
    int64_t t = r->opt.t, hb = r->opt.has_buf;
    if ((rc = kl__train_dist_bcast(d, m->params, (size_t)m->nparams * 4, 0, "resume", e)) ||
        (rc = kl__train_dist_bcast(d, m->bufs, (size_t)m->nbuf * 4, 0, "resume", e)) ||
        (r->opt.m && (rc = kl__train_dist_bcast(d, r->opt.m, (size_t)r->opt.n * 4, 0, "resume", e))) ||
        (r->opt.v && (rc = kl__train_dist_bcast(d, r->opt.v, (size_t)r->opt.n * 4, 0, "resume", e))) ||
        (rc = kl__train_dist_bcast(d, &t, sizeof t, 0, "resume", e)) ||
        (rc = kl__train_dist_bcast(d, &hb, sizeof hb, 0, "resume", e)) ||
        (rc = kl__train_dist_bcast(d, &r->pos, sizeof r->pos, 0, "resume", e)))
        return rc;
    r->opt.t = t;
    r->opt.has_buf = (int)hb;
    return KL_OK;
}

static int run_resume_read(tr_run *r, kl_err *e);

static int run_resume(tr_run *r, kl_err *e) {
    int rc = r->lead ? run_resume_read(r, e) : KL_OK;
    return r->dist.world > 1 ? run_resume_bcast(r, rc, e) : rc;
}

/* --resume: parameters, optimizer state, position (and the loader's), the metrics so far */
static int run_resume_read(tr_run *r, kl_err *e) {
    char ck[4096], lp[256];
    int rc;
    if (!ckpt_find(r->ckdir, ck, sizeof ck))
        return kl_err_set(e, KL_ENOTFOUND, "--resume: no valid checkpoint in %s", r->ckdir);
    if ((rc = ckpt_load(r->m, &r->opt, &r->pos, lp, sizeof lp, ck, e))) {
        kl_err_prefix(e, "resuming from %s", ck);
        return rc;
    }
    if (r->images) { /* the loader continues where the checkpoint left it; another dataset is an error */
        kl_loader_pos lpos;
        if (!*lp)
            return kl_err_set(e, KL_ESTATE,
                              "resuming from %s: the checkpoint has no loader position (trained on arrays, not shards)",
                              ck);
        if ((rc = kl_loader_pos_parse(lp, &lpos, e))) {
            kl_err_prefix(e, "resuming from %s", ck);
            return rc;
        }
        lpos.rank =
            r->imt.world > 1 ? r->dist.rank : 0; /* the position (epoch, global batch) holds at any rank count */
        lpos.world = KL_MAX(1, r->imt.world);
        if ((rc = kl_loader_restore(r->imt.ld, &lpos, e))) {
            kl_err_prefix(e, "resuming from %s", ck);
            return rc;
        }
    }
    snprintf(r->p, sizeof r->p, "%s/metrics.csv", r->ckdir);
    read_metrics_csv(r->p, r->pos.step, &r->rows);
    kl_log(KL_LOG_INFO, "train", "resumed from %s at step %lld (epoch %lld, batch %lld)", ck, (long long)r->pos.step,
           (long long)r->pos.epoch, (long long)r->pos.batch);
    return KL_OK;
}

/* fp16: dynamic loss scaling (as torch.cuda.amp.GradScaler) around the update;
 * the gradients came out of the step scaled by pos.scale. *gn: the norm, NaN
 * for a skipped step. */
static int run_update_fp16(tr_run *r, double lr, double *gn, kl_err *e) {
    const tr_spec *s = r->s;
    tr_model *m = r->m;
    tr_pos *pos = &r->pos;
    float sc = (float)pos->scale;
    int finite = 1;
    for (int64_t k = 0; k < m->nparams && finite; k++) finite = isfinite(m->grads[k]);
    if (r->nhist == 16) {
        memmove(r->scale_hist, r->scale_hist + 1, 15 * sizeof(double));
        r->nhist = 15;
    }
    r->scale_hist[r->nhist++] = pos->scale;
    if (finite) {
        float inv = (float)(1.0 / (double)sc);
        for (int64_t k = 0; k < m->nparams; k++) m->grads[k] *= inv;
        *gn = kl__train_clip_grad(m->grads, m->nparams, s->clip);
        kl__train_optim_step(&r->opt, s, m->params, m->grads, lr);
        if (++pos->tracker >= s->ls_interval) {
            pos->scale *= s->ls_growth;
            pos->tracker = 0;
        }
        return KL_OK;
    }
    pos->skipped++;
    pos->tracker = 0;
    pos->scale *= s->ls_backoff;
    *gn = NAN;
    if (pos->scale >= s->ls_min) return KL_OK;
    kl_buf hb;
    kl_buf_init(&hb);
    for (int k = 0; k < r->nhist; k++) kl_buf_printf(&hb, "%s%g", k ? ", " : "", r->scale_hist[k]);
    int rc = kl_err_set(e, KL_ERANGE,
                        "step %lld (epoch %lld): the loss scale collapsed to %g, below the floor %g (%lld steps "
                        "skipped for inf/NaN gradients); last scales: %s",
                        (long long)pos->step, (long long)pos->epoch, pos->scale, s->ls_min, (long long)pos->skipped,
                        hb.data ? hb.data : "");
    kl_buf_free(&hb);
    return rc;
}

static void run_progress(tr_run *r, double loss, double lr) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - r->t0.tv_sec) + (double)(t1.tv_nsec - r->t0.tv_nsec) * 1e-9;
    kl_progress_field(r->pr, "epoch", "%lld/%lld", (long long)r->pos.epoch + 1, (long long)r->s->epochs);
    kl_progress_field(r->pr, "loss", "%.4f", loss);
    kl_progress_field(r->pr, "lr", "%.3g", lr);
    kl_progress_field(r->pr, "samples/s", "%.0f", el > 0 ? (double)r->samples / el : 0.0);
    if (r->images) {
        kl_loader_stats_get(r->imt.ld, &r->d.ls);
        kl_progress_field(r->pr, "wait", "%.1f%%", 100 * r->d.ls.wait_share);
    }
    kl_progress_update(r->pr, (uint64_t)r->pos.step);
}

/* checkpoint after the step just taken: metrics so far, weights, optimizer, position */
static int run_checkpoint(tr_run *r, kl_err *e) {
    tr_pos cp = r->pos;
    cp.batch = r->pos.batch + 1;
    if (cp.batch >= r->steps_per_epoch) { /* the epoch end (validation) still runs after resuming */
        cp.batch = r->steps_per_epoch;
    }
    snprintf(r->p, sizeof r->p, "%s/metrics.csv", r->ckdir);
    char lp[256] = "";
    if (r->images) {
        kl_loader_pos lpos;
        kl_loader_tell(r->imt.ld, &lpos);
        kl_loader_pos_format(&lpos, lp, sizeof lp);
    }
    int rc = write_metrics_csv(r->p, &r->rows, e);
    return rc ? rc : ckpt_write(r->m, &r->opt, &cp, r->images ? lp : NULL, r->ckdir, r->pos.step, e);
}

/* The rows of the current global batch a leaf of the step asks for
 * (parallel.c): from the arrays by index, or the loader's batch. */
typedef struct {
    tr_run *r;
    const float *x, *yf; /* image shards: the loader's whole batch */
    const int64_t *yi;
} step_rows;

static int step_rows_get(void *ctx, int64_t off, int64_t cnt, const float **x, const int64_t **yi, const float **yf,
                         kl_err *e) {
    step_rows *sr = ctx;
    tr_run *r = sr->r;
    if (r->images) { /* the loader's batch: this rank's share (fast mode), or the leaf's rows of it */
        int64_t o = r->imt.world > 1 ? 0 : off;
        *x = sr->x + o * r->m->in_numel;
        *yi = sr->yi + o;
        *yf = NULL;
        return KL_OK;
    }
    return batch_rows(&r->bt, r->m, r->pos.epoch, r->pos.batch * r->B + off, cnt, x, yi, yf, e);
}

/* one optimizer step: the batch, forward/loss/gradients, clipping and update */
static int run_step(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    tr_model *m = r->m;
    tr_pos *pos = &r->pos;
    step_rows sr = {r, NULL, NULL, NULL};
    int64_t nb = KL_MIN(r->B, r->ntr - pos->batch * r->B), mine; /* the global batch's rows */
    int rc;
    if (r->images && (rc = batches_get(&r->bt, m, pos->epoch, pos->batch, r->B, &sr.x, &sr.yi, &sr.yf, &mine, e)))
        return rc;
    if (r->images && mine != (r->imt.world > 1 ? kl__train_par_rank_share(nb, r->dist.rank, r->imt.world) : nb))
        return kl_err_set(e, KL_EINTERNAL, "step %lld: the loader made %lld rows of a %lld-row batch for rank %d of %d",
                          (long long)pos->step, (long long)mine, (long long)nb, r->dist.rank, KL_MAX(1, r->imt.world));
    double loss; /* forward, loss and gradients (into m->grads) of the global batch, on every rank */
    if ((rc = kl__train_par_grads(r->par, nb, pos->step, s->fp16 ? (float)pos->scale : 1.0f, step_rows_get, &sr, &loss,
                                  e)))
        return rc;
    if (!isfinite(loss))
        return kl_err_set(e, KL_ERANGE,
                          "step %lld (epoch %lld): the loss is %s; lower the learning rate or enable grad_clip",
                          (long long)pos->step, (long long)pos->epoch, isnan(loss) ? "NaN" : "infinite");
    double lr = kl__train_sched_lr(s, pos->step, pos->epoch, r->total), gn;
    if (s->fp16) {
        if ((rc = run_update_fp16(r, lr, &gn, e))) return rc;
    } else {
        gn = kl__train_clip_grad(m->grads, m->nparams, s->clip);
        kl__train_optim_step(&r->opt, s, m->params, m->grads, lr);
    }
    pos->step++;
    r->samples += nb;
    pos->ep_loss += loss * (double)nb;
    pos->ep_n += nb;
    rows_add(&r->rows, (tr_row){pos->step, pos->epoch, 0, loss, NAN, lr, gn});
    if (r->pr) run_progress(r, loss, lr);
    if (s->check_every && pos->step % s->check_every == 0 && (rc = kl__train_par_same_weights(r->par, pos->step, e)))
        return rc;
    if (r->lead && s->ckpt_every && pos->step % s->ckpt_every == 0 && (rc = run_checkpoint(r, e))) return rc;
    if (r->crash_at == pos->step) raise(SIGKILL);
    return KL_OK;
}

/* validation after an epoch: metrics row, best weights, early stopping */
static int run_validate(tr_run *r, kl_err *e) {
    const tr_spec *s = r->s;
    tr_pos *pos = &r->pos;
    tr_eval ev;
    int rc;
    if ((rc = evaluate(r->m, &r->bv, r->nva, &ev, NULL, NULL, e))) return rc;
    double acc = ev.count ? (double)ev.correct / (double)ev.count : NAN;
    rows_add(&r->rows, (tr_row){pos->step, pos->epoch, 1, ev.loss, acc, NAN, NAN});
    r->fin_val = ev;
    double v = r->lower_better ? ev.loss : acc;
    int better = r->lower_better ? v < pos->best - s->min_delta : v > pos->best + s->min_delta;
    if (better || pos->best_epoch < 0) {
        pos->best = v;
        pos->best_epoch = pos->epoch;
        pos->bad_epochs = 0;
        if (r->lead && (rc = weights_write(r->m, r->bestp, e))) return rc;
    } else if (++pos->bad_epochs >= s->patience && s->patience > 0) {
        pos->stopped = 1;
        kl_log(KL_LOG_INFO, "train",
               "early stopping after epoch %lld: %s did not improve for %lld epochs (best %.5g at epoch %lld)",
               (long long)pos->epoch + 1, s->monitor, (long long)pos->bad_epochs, pos->best,
               (long long)pos->best_epoch + 1);
    }
    if (r->pr) kl_progress_field(r->pr, "val_loss", "%.4f", ev.loss);
    if (r->pr && ev.count) kl_progress_field(r->pr, "val_acc", "%.2f%%", 100 * acc);
    return KL_OK;
}

/* end of an epoch: its train loss, validation, the store, the caller's hook */
static int run_epoch_end(tr_run *r, kl_err *e) {
    tr_pos *pos = &r->pos;
    int rc;
    if (pos->ep_n)
        rows_add(&r->rows, (tr_row){pos->step, pos->epoch, 2, pos->ep_loss / (double)pos->ep_n, NAN, NAN, NAN});
    pos->ep_loss = 0;
    pos->ep_n = 0;
    if (r->nva && (rc = run_validate(r, e))) return rc;
    if ((rc = rows_log(r->trun, &r->rows, &r->rows_logged, e))) {
        kl_err_prefix(e, "tracking: epoch %lld", (long long)pos->epoch + 1);
        return rc;
    }
    if (r->o->on_epoch) { /* the caller's hook (keel tune: report, maybe prune) */
        kl_train_epoch ce = {pos->epoch, pos->step, NAN, NAN, NAN};
        for (size_t i = r->rows.n; i-- > 0;)
            if (r->rows.r[i].epoch != pos->epoch) break;
            else if (r->rows.r[i].split == 2) ce.train_loss = r->rows.r[i].loss;
            else if (r->rows.r[i].split == 1) {
                ce.val_loss = r->rows.r[i].loss;
                ce.val_accuracy = r->rows.r[i].acc;
            }
        if (r->o->on_epoch(r->o->on_epoch_ctx, &ce)) r->cb_stop = 1;
    }
    pos->epoch++;
    pos->batch = 0;
    return KL_OK;
}

/* by row group: every rank's rows taken and decoded (to rank 0) */
static int run_stream_stats(tr_run *r, kl_err *e) {
    if (!r->st) return KL_OK;
    tr_stream_stats t;
    kl__train_stream_stats_get(r->st, &t);
    double mine[5] = {t.taken, t.sum, t.sumsq, t.rows_decoded, t.units_decoded},
           *all = calloc((size_t)r->dist.world * 5, sizeof(double));
    if (!all) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = kl__train_dist_allgather(&r->dist, mine, all, sizeof mine, "row counts", e);
    memcpy(r->rank_d, all, sizeof(double) * 5 * (size_t)KL_MIN(r->dist.world, 64));
    free(all);
    return rc;
}

/* after the last step, several ranks: the final weight check and every
 * rank's step, compute and communication seconds (to rank 0) */
static int run_ranks_end(tr_run *r, kl_err *e) {
    tr_dist *d = &r->dist;
    int rc = kl__train_par_same_weights(r->par, r->pos.step, e);
    if (rc) return rc;
    double mine[3] = {r->secs, kl__train_par_compute_s(r->par), d->comm_s},
           *all = calloc((size_t)d->world * 3, sizeof(double));
    if (!all) return kl_err_set(e, KL_ENOMEM, "out of memory");
    rc = kl__train_dist_allgather(d, mine, all, sizeof mine, "timings", e);
    memcpy(r->rank_s, all, sizeof(double) * 3 * (size_t)KL_MIN(d->world, 64));
    free(all);
    return rc ? rc : run_stream_stats(r, e);
}

static int run_loop(tr_run *r, kl_err *e) {
    tr_pos *pos = &r->pos;
    int rc;
    r->crash_at = kl__test_hook("KEEL_TRAIN_CRASH_AT_STEP"); /* build/keel-hooks: SIGKILL itself after that step */
    if (!r->o->quiet && r->lead) r->pr = kl_progress_new("train", (uint64_t)r->total, "steps");
    if (r->pr) kl_progress_update(r->pr, (uint64_t)pos->step);
    if ((rc = kl__train_dist_barrier(&r->dist, "start", e))) return rc; /* the clock starts when every rank is ready */
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    while (pos->step < r->total && pos->epoch < r->s->epochs && !pos->stopped && !r->cb_stop) {
        for (; pos->batch < r->steps_per_epoch && pos->step < r->total; pos->batch++)
            if ((rc = run_step(r, e))) return rc;
        if (pos->batch >= r->steps_per_epoch && (rc = run_epoch_end(r, e))) return rc;
    }
    if (r->images) kl_loader_stats_get(r->imt.ld, &r->d.ls);
    kl_progress_finish(r->pr);
    r->pr = NULL;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->secs = (double)(t1.tv_sec - r->t0.tv_sec) + (double)(t1.tv_nsec - r->t0.tv_nsec) * 1e-9;
    return r->dist.world > 1 ? run_ranks_end(r, e) : run_stream_stats(r, e);
}

/* --memory-report: the plan against what the allocator measured */
static void run_memory_measured(tr_run *r) {
    static const kl_mem_tag tags[6] = {KL_TAG_PARAMS,      KL_TAG_GRADS,     KL_TAG_OPTIMIZER,
                                       KL_TAG_ACTIVATIONS, KL_TAG_WORKSPACE, KL_TAG_DATASET};
    char b[32];
    fprintf(r->rep, "measured peaks (allocator):");
    for (int i = 0; i < 6; i++) {
        kl_mem_stats st;
        kl_mem_stats_get(tags[i], &st);
        fprintf(r->rep, " %s %s%s", kl_mem_tag_name(tags[i]), kl_fmt_bytes(st.peak_allocated, b, sizeof b),
                i < 5 ? "," : "");
    }
    kl_mem_stats tot;
    kl_mem_stats_get(KL_TAG_COUNT, &tot);
    fprintf(r->rep, "; total peak %s\n", kl_fmt_bytes(tot.peak_allocated, b, sizeof b));
}

/* The final validation pass when one is needed: with the best epoch's
 * weights loaded (reload: fin_val from them), and for a binary classifier
 * (two-class CE: score z1 - z0; one BCE output: the logit) its AUC into
 * fin_val.auc, the reference serving's live AUC is compared with (meta.json
 * final_metrics.val_auc). One pass gives both. */
static int final_validation(tr_run *r, int reload, kl_err *e) {
    tr_model *m = r->m;
    int64_t K = m->out_numel, n = r->nva;
    int binary = n > 0 && ((r->s->loss == TR_LOSS_CE && K == 2) || (r->s->loss == TR_LOSS_BCE && K == 1));
    if (!binary) return reload ? evaluate(m, &r->bv, n, &r->fin_val, NULL, NULL, e) : KL_OK;
    float *all = kl_mem_alloc((size_t)(n * K) * 4, KL_TAG_WORKSPACE);
    int64_t *y = malloc((size_t)n * 8);
    sc_lab *sl = malloc((size_t)n * sizeof *sl);
    tr_eval ev;
    int rc = !all || !y || !sl
        ? kl_err_set(e, KL_ENOMEM, "out of memory: the validation AUC of %lld rows", (long long)n)
        : evaluate(m, &r->bv, n, &ev, all, y, e);
    for (int64_t i = 0; !rc && i < n; i++)
        sl[i] = (sc_lab){K == 2 ? (double)all[i * 2 + 1] - all[i * 2] : all[i], y[i] == 1};
    if (!rc && reload) r->fin_val = ev;
    if (!rc) r->fin_val.auc = auc_roc(sl, n, 0, NULL);
    kl_mem_free(all);
    free(y);
    free(sl);
    return rc;
}

/* the model folder: weights (the best epoch's when validating), export, metrics, curves, card, meta.json */
static int run_artifacts(tr_run *r, kl_err *e) {
    const char *out = r->o->out_dir;
    tr_model *m = r->m;
    int rc;
    snprintf(r->p, sizeof r->p, "%s/model.safetensors", out);
    if ((rc = weights_write(m, r->p, e))) return rc;
    if (r->nva && r->pos.best_epoch >= 0 && kl_path_exists(r->bestp)) {
        if ((rc = kl__train_load_weights(m, r->bestp, e))) return rc;
        r->best_used = 1;
    }
    if ((rc = final_validation(r, r->best_used, e))) return rc;
    if (r->best_used && (rc = weights_write(m, r->p, e))) return rc;
    snprintf(r->p, sizeof r->p, "%s/model.onnx", out);
    if ((rc = kl__train_export_onnx(m, r->p, e))) return rc;
    snprintf(r->p, sizeof r->p, "%s/metrics.csv", out);
    if ((rc = write_metrics_csv(r->p, &r->rows, e))) return rc;
    snprintf(r->p, sizeof r->p, "%s/curves.svg", out);
    if ((rc = write_curves_svg(r->p, &r->rows, r->s->loss, e))) return rc;
    if (r->dsi.features_json[0]) { /* a feature output: the model carries its features.json (serve's :predict) */
        snprintf(r->p, sizeof r->p, "%s/features.json", out);
        if ((rc = kl_copy_file(r->dsi.features_json, r->p, e))) return rc;
        /* the profile's outputs on the training rows read by row group: every stream in turn */
        if (!r->nva && r->st && (rc = kl__train_stream_cache_grow(r->st, 2 * (int)r->s->micro_batches + 2, e)))
            return rc;
        if ((rc = write_profile(m, r->dsi.features_json, out, r->nva ? &r->bv : &r->bt, r->nva ? r->nva : r->ntr, e)))
            return rc;
    }
    if ((rc = write_card(out, r->s, m, r->ntr, r->nva, &r->pos, &r->fin_val, r->best_used, &r->dsi, e))) return rc;
    return write_meta(out, r->s, m, &r->d, &r->rows, &r->pos, r->ntr, r->nva, &r->fin_val, &r->fin_train, r->best_used,
                      r->secs, &r->dsi, r->trun ? kl_track_run_id(r->trun) : 0, e);
}

/* The memory goal's figures (docs/training.md, "Data-parallel training"):
 * the gradient block, what the reduction adds to it (kl__train_par_alloc_bytes) and
 * the allocator's peaks of the grads tag and of everything, this process's. */
static void mem_figures(const tr_run *r, double f[4]) {
    kl_mem_stats g, t;
    kl_mem_stats_get(KL_TAG_GRADS, &g);
    kl_mem_stats_get(KL_TAG_COUNT, &t);
    f[0] = (double)r->m->nparams * 4;
    f[1] = (double)kl__train_par_alloc_bytes(r->par);
    f[2] = (double)g.peak_allocated;
    f[3] = (double)t.peak_allocated;
}

/* the per-epoch metrics not logged yet (each epoch logs its own), the final ones, the artifacts */
static int run_track_end(tr_run *r, kl_err *e) {
    const tr_pos *pos = &r->pos;
    const tr_eval *fv = &r->fin_val;
    int rc;
    if ((rc = rows_log(r->trun, &r->rows, &r->rows_logged, e))) return rc;
    kl_metric_point pts[16 + 3 * 64];
    static const char *what[3] = {"step", "compute", "comm"};
    char names[3 * 64][40];
    size_t np = 0;
    for (int k = 0; r->dist.world > 1 && k < KL_MIN(r->dist.world, 64);
         k++) /* rank<k>_step_seconds, _compute_, _comm_ */
        for (int j = 0; j < 3; j++) {
            snprintf(names[k * 3 + j], sizeof names[0], "rank%d_%s_seconds", k, what[j]);
            pts[np++] = (kl_metric_point){names[k * 3 + j], pos->step, 0, r->rank_s[k * 3 + j]};
        }
    if (r->dist.world > 1) pts[np++] = (kl_metric_point){"ranks", pos->step, 0, (double)r->dist.world};
    pts[np++] = (kl_metric_point){"steps", pos->step, 0, (double)pos->step};
    pts[np++] = (kl_metric_point){"train_seconds", pos->step, 0, r->secs};
    static const char *mem[4] = {"grad_bytes", "bucket_bytes", "grads_peak_bytes", "mem_peak_bytes"};
    double mf[4];
    mem_figures(r, mf);
    for (int j = 0; j < 4; j++) pts[np++] = (kl_metric_point){mem[j], pos->step, 0, mf[j]};
    if (r->nva) pts[np++] = (kl_metric_point){"final_val_loss", pos->step, 0, fv->loss};
    if (r->nva && fv->count)
        pts[np++] = (kl_metric_point){"final_val_accuracy", pos->step, 0, (double)fv->correct / (double)fv->count};
    tr_reg rg;
    if (r->nva && tr_eval_regression(fv, &rg)) {
        pts[np++] = (kl_metric_point){"final_val_mae", pos->step, 0, rg.mae};
        pts[np++] = (kl_metric_point){"final_val_rmse", pos->step, 0, rg.rmse};
        if (isfinite(rg.r2)) pts[np++] = (kl_metric_point){"final_val_r2", pos->step, 0, rg.r2};
    }
    rc = kl__train_runlog_finish(r->trk, r->trun, r->s, r->o->out_dir, &r->dsi, pts, np, e);
    r->trk = NULL;
    r->trun = NULL;
    return rc;
}

/* by row group: per rank, the rows taken (and the sums of their dataset
 * rows + 1 and its squares: the ranks' rows are disjoint and cover the
 * epochs when the sums add up to one process's), the rows and row groups decoded */
static void json_stream_stats(FILE *rep, const tr_run *r) {
    static const char *sn[5] = {"rank_rows", "rank_rows_sum", "rank_rows_sumsq", "rank_rows_decoded",
                                "rank_row_groups_decoded"};
    for (int j = 0; r->st && j < 5; j++) {
        fprintf(rep, ",\"%s\":[", sn[j]);
        for (int k = 0; k < KL_MIN(r->dist.world, 64); k++) fprintf(rep, "%s%.0f", k ? "," : "", r->rank_d[5 * k + j]);
        fputc(']', rep);
    }
}

static void run_summary(tr_run *r) {
    FILE *rep = r->rep;
    const tr_pos *pos = &r->pos;
    const tr_eval *fv = &r->fin_val;
    const kl_loader_stats *ls = &r->d.ls;
    double sps = r->secs > 0 ? (double)r->samples / r->secs : 0.0;
    if (r->o->json) {
        fprintf(rep, "{\"steps\":%lld,\"epochs\":%lld,\"seconds\":%.3f,\"samples\":%lld,\"samples_per_s\":%.1f",
                (long long)pos->step, (long long)pos->epoch, r->secs, (long long)r->samples, sps);
        if (r->nva) fprintf(rep, ",\"val_loss\":%.9g", fv->loss);
        if (r->nva && fv->count) fprintf(rep, ",\"val_accuracy\":%.6f", (double)fv->correct / (double)fv->count);
        if (r->images)
            fprintf(rep, ",\"loader_wait_share\":%.4f,\"loader_images_per_s\":%.1f", ls->wait_share, ls->samples_per_s);
        if (r->dist.world > 1)
            fprintf(rep, ",\"ranks\":%d,\"compute_seconds\":%.3f,\"comm_seconds\":%.3f", r->dist.world, r->rank_s[1],
                    r->rank_s[2]);
        json_stream_stats(rep, r);
        double mf[4];
        mem_figures(r, mf);
        fprintf(rep, ",\"grad_bytes\":%.0f,\"bucket_bytes\":%.0f,\"grads_peak_bytes\":%.0f,\"mem_peak_bytes\":%.0f",
                mf[0], mf[1], mf[2], mf[3]);
        fprintf(rep, ",\"out\":\"%s\"}\n", r->o->out_dir);
        return;
    }
    fprintf(rep, "trained %lld steps (%lld epochs%s) in %.1f s, %.0f samples/s\n", (long long)pos->step,
            (long long)pos->epoch, pos->stopped ? ", early stopped" : "", r->secs, sps);
    for (int k = 0; r->dist.world > 1 && k < KL_MIN(r->dist.world, 64); k++)
        fprintf(rep, "rank %d of %d: %.1f s, compute %.1f s, communication %.1f s\n", k, r->dist.world,
                r->rank_s[3 * k], r->rank_s[3 * k + 1], r->rank_s[3 * k + 2]);
    if (r->nva) {
        fprintf(rep, "validation: loss %.4f", fv->loss);
        if (fv->count) fprintf(rep, ", accuracy %.2f%%", 100.0 * (double)fv->correct / (double)fv->count);
        tr_reg rg;
        if (tr_eval_regression(fv, &rg))
            fprintf(rep, ", MAE %.4g, RMSE %.4g (mean predictor %.4g), R2 %.4f", rg.mae, rg.rmse, rg.base_rmse, rg.r2);
        fprintf(rep, "%s\n", r->best_used ? " (best epoch)" : "");
    }
    if (r->images)
        fprintf(rep,
                "loader: the training loop waited %.1f%% of its step time for data (%.0f images/s, decode %.1f MPix/s "
                "per worker, queue depth %.1f)\n",
                100 * ls->wait_share, ls->samples_per_s, ls->decode_s > 0 ? ls->decode_mpix / ls->decode_s : 0.0,
                ls->queue_depth);
    if (r->s->fp16)
        fprintf(rep, "fp16: final loss scale %g, %lld steps skipped for inf/NaN gradients\n", pos->scale,
                (long long)pos->skipped);
    fprintf(rep, "artifacts in %s: model.onnx model.safetensors meta.json card.md metrics.csv curves.svg\n",
            r->o->out_dir);
}

static void run_free(tr_run *r) {
    kl_progress_finish(r->pr);
    free(r->rows.r);
    kl_mem_free(r->xb);
    kl_mem_free(r->yb);
    kl_mem_free(r->yfb);
    free(r->idx_tr);
    free(r->idx_va);
    free(r->base_tr);
    kl__train_optim_free(&r->opt);
    kl__train_stream_free(r->st);
    kl__train_pqs_close(r->pqs);
    data_free(&r->d);
    data_free(&r->dv);
    kl__train_dsinfo_free(&r->dsi);
    kl__train_runlog_fail(r->trk, r->trun);
    kl__train_images_close(&r->imt);
    kl__train_images_close(&r->imv);
    kl__train_par_free(r->par);
    kl__train_dist_end(&r->dist);
    kl__train_model_free(r->m);
    kl__train_spec_free(r->s);
}

/* what runs after the loop: a caller's stop (metrics only), or the artifacts and the summary */
static int run_finish(tr_run *r, kl_err *e) {
    int rc;
    if (!r->lead) return KL_OK; /* one run, one output: rank 0's */
    if (r->cb_stop) {           /* stopped by the caller: only the metrics, no model artifacts */
        snprintf(r->p, sizeof r->p, "%s/metrics.csv", r->o->out_dir);
        if ((rc = write_metrics_csv(r->p, &r->rows, e))) return rc;
        fprintf(r->rep, "stopped by the caller after %lld epochs (%lld steps)\n", (long long)r->pos.epoch,
                (long long)r->pos.step);
        return KL_OK;
    }
    if (r->o->memory_report) run_memory_measured(r);
    if ((rc = run_artifacts(r, e))) return rc;
    if (r->trun && (rc = run_track_end(r, e))) return rc;
    run_summary(r);
    return KL_OK;
}

/* The run, stage by stage: run_open (spec, MPI, the tracked run), run_data,
 * run_plan, run_alloc, run_resume (--resume), the spec copy, run_loop (the
 * epochs), run_finish (rank 0: artifacts, the tracked run's end, the
 * summary). A failure on one rank aborts the others. */
int kl_train_run(const char *spec_path, const kl_train_opts *o, kl_err *e) {
    tr_run *r = calloc(1, sizeof *r);
    if (!r) return kl_err_set(e, KL_ENOMEM, "out of memory");
    r->spec_path = spec_path;
    r->o = o;
    r->rep = o->report ? o->report : stdout;
    openblas_set_num_threads(1);
    int rc;
    if (!(rc = run_open(r, e)) && !(rc = run_data(r, e)) && !(rc = run_plan(r, e)) && !(rc = run_alloc(r, e)) &&
        !(rc = o->resume ? run_resume(r, e) : KL_OK)) {
        snprintf(r->p, sizeof r->p, "%s/spec.yaml", o->out_dir);
        if (!(rc = r->lead ? kl_write_file_atomic(r->p, r->s->text, strlen(r->s->text), e) : KL_OK) &&
            !(rc = run_loop(r, e)))
            rc = run_finish(r, e);
    }
    if (rc) kl__train_dist_fail(&r->dist); /* several ranks: MPI_Abort at exit stops the others */
    run_free(r);
    free(r);
    return rc;
}

int kl_train_check(const char *spec_path, kl_err *e) {
    tr_spec *s = NULL;
    tr_model *m = NULL;
    int rc = kl__train_spec_load(spec_path, &s, e);
    if (!rc) rc = kl__train_model_new(s, &m, e);
    kl__train_model_free(m);
    kl__train_spec_free(s);
    return rc;
}

int kl_train_spec_loss(const char *spec_path, const char **loss, kl_err *e) {
    tr_spec *s = NULL;
    *loss = NULL;
    int rc = kl__train_spec_load(spec_path, &s, e);
    if (!rc) *loss = s->loss == TR_LOSS_MSE ? "mse" : s->loss == TR_LOSS_BCE ? "bce_with_logits" : "cross_entropy";
    kl__train_spec_free(s);
    return rc;
}

/* ================================================================ eval */

static int cmp_sc(const void *a, const void *b) {
    double x = ((const sc_lab *)a)->s, y = ((const sc_lab *)b)->s;
    return x < y ? -1 : x > y;
}

/* AUC (Mann-Whitney U, ties counted half, via ranks) and up to npts ROC
 * points (fpr, tpr, threshold) at the distinct scores, descending. */
static double auc_roc(sc_lab *v, int64_t n, int npts, cJSON *roc) {
    int64_t npos = 0, nneg = 0;
    for (int64_t i = 0; i < n; i++) { npos += v[i].pos; nneg += !v[i].pos; }
    if (!npos || !nneg) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_sc);
    double rank_sum = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && v[j].s == v[i].s) j++;
        double avg = (double)(i + 1 + j) / 2.0;   /* ranks i+1 .. j */
        for (int64_t k = i; k < j; k++) if (v[k].pos) rank_sum += avg;
        i = j;
    }
    double auc = (rank_sum - (double)npos * (double)(npos + 1) / 2.0) / ((double)npos * (double)nneg);
    if (roc) {
        cJSON *fa = cJSON_AddArrayToObject(roc, "fpr"), *ta = cJSON_AddArrayToObject(roc, "tpr"), *th = cJSON_AddArrayToObject(roc, "threshold");
        int64_t tp = 0, fp = 0, distinct = 0;
        for (int64_t i = n - 1; i >= 0; i--) if (i == n - 1 || v[i].s != v[i + 1].s) distinct++;
        int64_t every = npts > 2 ? (distinct + npts - 3) / (npts - 2) : 1, seen = 0;
        if (every < 1) every = 1;
        cJSON_AddItemToArray(fa, cJSON_CreateNumber(0)); cJSON_AddItemToArray(ta, cJSON_CreateNumber(0));
        cJSON_AddItemToArray(th, cJSON_CreateNull());
        for (int64_t i = n - 1; i >= 0;) {
            int64_t j = i;
            while (j >= 0 && v[j].s == v[i].s) { tp += v[j].pos; fp += !v[j].pos; j--; }
            seen++;
            if (seen % every == 0 || j < 0) {
                cJSON_AddItemToArray(fa, cJSON_CreateNumber((double)fp / (double)nneg));
                cJSON_AddItemToArray(ta, cJSON_CreateNumber((double)tp / (double)npos));
                cJSON_AddItemToArray(th, cJSON_CreateNumber(v[i].s));
            }
            i = j;
        }
    }
    return auc;
}

static const char *const part_label[4] = {"train", "val", "test", "all"};

/* The rows kl_train_evaluate reads: image shards, .npy files, or the model's
 * Parquet source (*part: the split read, TR_PART_TEST unless --split says). */
static int eval_rows(const char *dir, const kl_eval_opts *o, tr_spec *s, tr_model *m, tr_images *im, tr_data *d,
                     tr_dsinfo *dsi, int *part, kl_err *e) {
    char p[4096];
    int rc;
    *part = TR_PART_TEST;
    if (o->shards) {
        if ((rc = kl__train_images_open_set(im, s, m, o->shards, e))) return rc;
        d->n = kl_shardset_count(im->set);
        return KL_OK;
    }
    if (o->x_path) return data_load(m, o->x_path, o->y_path, d, e);
    /* the model's Parquet source: the path recorded in meta.json (the spec's own is relative to where it was) */
    const char *sp = o->split ? o->split : "test";
    int pt = 0;
    while (pt < 4 && strcmp(part_label[pt], sp)) pt++;
    if (pt == 4) return kl_err_set(e, KL_EINVAL, "split '%s': train, val, test or all", sp);
    if (!s->ds)
        return kl_err_set(e, KL_EINVAL, "%s: the model was trained on .npy files; give --data X.npy,y.npy", dir);
    s->ds->verify = o->verify;
    char *ds = NULL;
    if (o->dataset) ds = strdup(o->dataset);
    else {
        void *doc = NULL;
        snprintf(p, sizeof p, "%s/meta.json", dir);
        if ((rc = kl_json_load_file(p, &doc, e))) return rc;
        cJSON *mj = doc;
        cJSON *dv = cJSON_GetObjectItem(cJSON_GetObjectItem(mj, "data"), "dataset");
        ds = cJSON_IsString(dv) ? strdup(dv->valuestring) : NULL;
        cJSON_Delete(mj);
    }
    if (!ds) return kl_err_set(e, KL_ENOTFOUND, "%s/meta.json: no data.dataset", dir);
    free(s->ds->path);
    s->ds->path = ds;
    if (o->reference_column && !(s->ds->ref_col = strdup(o->reference_column)))
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (pt == TR_PART_TEST && s->ds->has_split && !(s->ds->split_col ? s->ds->nvals[2] : s->ds->frac[2] > 0))
        return kl_err_set(e, KL_EINVAL, "%s: the spec's data.split has no test part; use --split val or all", dir);
    *part = pt;
    return data_load_ds(m, pt == TR_PART_ALL || !s->ds->has_split ? TR_PART_ALL : pt, d, dsi, e);
}

/* A binary model's metrics into j (score = z1 - z0 of two CE outputs, or one BCE logit): kl__eval_binary
 * (thresholds, calibration), AUC and ROC, and the reference column's AUC on the same rows. */
static int eval_binary(cJSON *j, const float *all, const tr_data *d, int64_t K, const tr_dsinfo *dsi,
                       const kl_eval_opts *o, kl_err *e) {
    sc_lab *sl = malloc((size_t)(d->n + 1) * sizeof *sl);
    if (!sl) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int64_t i = 0; i < d->n; i++) {
        sl[i].s = K == 2 ? (double)all[i * 2 + 1] - all[i * 2] : all[i];
        sl[i].pos = K == 2 ? d->yi[i] == 1 : d->yf[i] > 0.5f;
    }
    double *sc = malloc((size_t)(d->n + 1) * sizeof *sc);
    uint8_t *ps = malloc((size_t)(d->n + 1));
    if (!sc || !ps) {
        free(sc);
        free(ps);
        free(sl);
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < d->n; i++) {
        sc[i] = sl[i].s;
        ps[i] = (uint8_t)sl[i].pos;
    }
    int rc =
        kl__eval_binary(sc, ps, d->n, o->has_threshold ? o->threshold : -1, o->roc_points ? o->roc_points : 101, j);
    free(sc);
    free(ps);
    if (rc) {
        free(sl);
        return kl_err_set(e, rc, "out of memory");
    }
    cJSON *roc = cJSON_CreateObject();
    double auc = auc_roc(sl, d->n, o->roc_points ? o->roc_points : 101, roc);
    if (!isnan(auc)) { cJSON_AddNumberToObject(j, "auc", auc); cJSON_AddItemToObject(j, "roc", roc); }
    else cJSON_Delete(roc);
    if (dsi->ref) { /* the reference score's AUC on the same rows (e.g. the generator's true p) */
        for (int64_t i = 0; i < d->n; i++) sl[i] = (sc_lab){dsi->ref[i], K == 2 ? d->yi[i] == 1 : d->yf[i] > 0.5f};
        double ra = auc_roc(sl, d->n, 0, NULL);
        if (!isnan(ra)) cJSON_AddNumberToObject(j, "reference_auc", ra);
        cJSON_AddStringToObject(j, "reference_column", o->reference_column);
    }
    free(sl);
    return KL_OK;
}

/* A classifier's confusion matrix, per-class metrics and class names into j. */
static int eval_confusion(cJSON *j, const float *all, const tr_data *d, int64_t K, const tr_dsinfo *dsi, kl_err *e) {
    int64_t C = K == 1 ? 2 : K;
    int64_t *cm = calloc((size_t)(C * C), 8);
    if (!cm) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int64_t i = 0; i < d->n; i++) {
        int64_t best = 0, truth;
        if (K == 1) { best = all[i] > 0; truth = d->yf[i] > 0.5f; }
        else {
            for (int64_t k = 1; k < K; k++) if (all[i * K + k] > all[i * K + best]) best = k;
            truth = d->yi[i];
        }
        cm[truth * C + best]++;
    }
    cJSON *ca = cJSON_AddArrayToObject(j, "confusion");
    for (int64_t a = 0; a < C; a++) {
        cJSON *row = cJSON_CreateArray();
        for (int64_t b = 0; b < C; b++) cJSON_AddItemToArray(row, cJSON_CreateNumber((double)cm[a * C + b]));
        cJSON_AddItemToArray(ca, row);
    }
    kl__eval_classes(cm, C, j);
    if (dsi->nclasses == C) { /* a string label: each class's name beside its index */
        cJSON *names = cJSON_AddArrayToObject(j, "class_names");
        for (int64_t c = 0; c < C; c++) {
            cJSON_AddItemToArray(names, cJSON_CreateString(dsi->classes[c]));
            cJSON_AddStringToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_class"), (int)c), "name",
                                    dsi->classes[c]);
        }
    }
    free(cm);
    return KL_OK;
}

/* keel eval, stage by stage: the spec and model, eval_rows (shards, .npy or
 * the Parquet source), the weights, evaluate (one pass: loss, accuracy,
 * logits), the --logits file, then into the JSON: eval_binary, eval_confusion,
 * the regression metrics. */
int kl_train_evaluate(const char *dir, const kl_eval_opts *o, void **out_cjson, kl_err *e) {
    tr_spec *s = NULL;
    tr_model *m = NULL;
    tr_data d = {0};
    tr_dsinfo dsi = {0};
    float *xb = NULL, *yfb = NULL, *all = NULL;
    int64_t *yb = NULL, *idx = NULL, *labels = NULL;
    tr_images im = {0};
    cJSON *j = NULL;
    char p[4096];
    int rc;
    *out_cjson = NULL;
    openblas_set_num_threads(1);
    snprintf(p, sizeof p, "%s/spec.yaml", dir);
    if ((rc = kl__train_spec_load(p, &s, e))) goto fail;
    if ((rc = kl__train_model_new(s, &m, e))) goto fail;
    int part;
    if ((rc = eval_rows(dir, o, s, m, &im, &d, &dsi, &part, e))) goto fail;
    int64_t B = KL_MIN(256, KL_MAX(1, d.n));
    if (o->shards && (rc = kl__train_images_start(&im, s, NULL, d.n, 0, B, 1, e))) goto fail;
    if ((rc = kl__train_model_alloc(m, B, e))) goto fail;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if ((rc = kl__train_load_weights(m, p, e))) goto fail;
    int64_t K = m->out_numel;
    xb = kl_mem_alloc((size_t)(B * m->in_numel) * 4, KL_TAG_WORKSPACE);
    yb = kl_mem_alloc((size_t)B * 8, KL_TAG_WORKSPACE);
    yfb = kl_mem_alloc((size_t)(B * K) * 4, KL_TAG_WORKSPACE);
    all = kl_mem_alloc((size_t)(KL_MAX(1, d.n) * K) * 4, KL_TAG_WORKSPACE);
    labels = malloc((size_t)(d.n + 1) * 8);
    idx = malloc((size_t)(d.n + 1) * 8);
    if (!xb || !yb || !yfb || !all || !idx || !labels) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (int64_t i = 0; i < d.n; i++) idx[i] = i;
    tr_eval ev;
    tr_batches bs = {&d, idx, d.n, 0, idx, 0, xb, yb, yfb, o->shards ? &im : NULL, NULL};
    if ((rc = evaluate(m, &bs, d.n, &ev, all, labels, e))) goto fail;
    if (!d.yi && s->loss == TR_LOSS_CE) d.yi = labels, labels = NULL;
    double acc = ev.count ? (double)ev.correct / (double)ev.count : NAN;
    if (o->logits_out) {
        int64_t dd[2] = {d.n, K};
        kl_tensor lt;
        kl_tensor_view_init(&lt, KL_F32, 2, dd, all);
        if ((rc = kl_npy_save(o->logits_out, &lt, e))) goto fail;
    }
    j = cJSON_CreateObject();
    if (o->shards) cJSON_AddStringToObject(j, "shards", o->shards);
    else if (!o->x_path) {
        cJSON_AddStringToObject(j, "dataset", s->ds->path);
        cJSON_AddStringToObject(j, "split", part_label[part]);
        if (dsi.dataset_version[0]) cJSON_AddStringToObject(j, "dataset_version", dsi.dataset_version);
        if (dsi.feature_hash[0]) cJSON_AddStringToObject(j, "feature_hash", dsi.feature_hash);
    }
    cJSON_AddNumberToObject(j, "rows", (double)d.n);
    cJSON_AddNumberToObject(j, "loss", ev.loss);
    if (!isnan(acc)) cJSON_AddNumberToObject(j, "accuracy", acc);
    /* binary: two-class CE (score = z1 - z0) or one BCE output (score = logit) */
    int binary = (s->loss == TR_LOSS_CE && K == 2) || (s->loss == TR_LOSS_BCE && K == 1);
    if (binary && (rc = eval_binary(j, all, &d, K, &dsi, o, e))) goto fail;
    if ((s->loss == TR_LOSS_CE || binary) && (rc = eval_confusion(j, all, &d, K, &dsi, e))) goto fail;
    if (s->loss == TR_LOSS_MSE && d.yf) kl__eval_regression(all, d.yf, d.n * K, j);
    *out_cjson = j;
    j = NULL;
    rc = KL_OK;
fail:
    cJSON_Delete(j);
    free(idx); free(labels);
    if (d.yi && o->shards) free(d.yi), d.yi = NULL;
    kl__train_images_close(&im);
    kl_mem_free(xb); kl_mem_free(yb); kl_mem_free(yfb); kl_mem_free(all);
    data_free(&d);
    kl__train_dsinfo_free(&dsi);
    kl__train_model_free(m);
    kl__train_spec_free(s);
    return rc;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void print_at(const cJSON *j, const char *key, const char *label, FILE *out) {
    const cJSON *t = cJSON_GetObjectItem(j, key);
    if (t)
        fprintf(out, "%-9s p >= %.4f: precision %.4f, recall %.4f, F1 %.4f, accuracy %.2f%%\n", label, num(t, "threshold"),
                num(t, "precision"), num(t, "recall"), num(t, "f1"), 100 * num(t, "accuracy"));
}

/* The metrics of src/train/metrics.c, as text. */
static void print_metrics(const cJSON *j, FILE *out) {
    const cJSON *b = cJSON_GetObjectItem(j, "baseline");
    if (cJSON_GetObjectItem(j, "mae")) {
        fprintf(out, "mae       %.6g   (mean predictor %.6g)\nrmse      %.6g   (mean predictor %.6g)\n", num(j, "mae"),
                num(b, "mae"), num(j, "rmse"), num(b, "rmse"));
        if (cJSON_GetObjectItem(j, "r2")) fprintf(out, "r2        %.4f   (mean predictor 0)\n", num(j, "r2"));
    }
    if (cJSON_GetObjectItem(j, "brier")) {
        fprintf(out, "brier     %.4f\nece       %.4f   (10 bins)\n", num(j, "brier"), num(j, "ece"));
        if (cJSON_GetObjectItem(j, "average_precision")) fprintf(out, "avg prec  %.4f\n", num(j, "average_precision"));
        print_at(j, "best_f1_threshold", "best F1", out);
        print_at(j, "at_threshold", "threshold", out);
    }
    const cJSON *pc = cJSON_GetObjectItem(j, "per_class");
    int C = cJSON_GetArraySize(pc);
    if (pc && C <= 32) {
        fprintf(out, "class  precision  recall      f1  support\n");
        for (int c = 0; c < C; c++) {
            const cJSON *o = cJSON_GetArrayItem(pc, c);
            fprintf(out, "%5d  %9.4f  %6.4f  %6.4f  %7.0f\n", c, num(o, "precision"), num(o, "recall"), num(o, "f1"), num(o, "support"));
        }
        if (cJSON_GetObjectItem(j, "macro_f1")) fprintf(out, "macro F1  %.4f\n", num(j, "macro_f1"));
    }
}

int kl_train_eval_print(const char *dir, const kl_eval_opts *o, int json, FILE *out, kl_err *e) {
    void *res = NULL;
    int rc = kl_train_evaluate(dir, o, &res, e);
    if (rc) return rc;
    cJSON *j = res;
    if (json) {
        cJSON *roc = cJSON_DetachItemFromObject(j, "roc");
        if (roc && !o->with_roc) cJSON_Delete(roc);
        else if (roc) cJSON_AddItemToObject(j, "roc", roc);
        cJSON *pr = cJSON_DetachItemFromObject(j, "pr");   /* curves only when asked, as the ROC */
        if (pr && !o->with_roc) cJSON_Delete(pr);
        else if (pr) cJSON_AddItemToObject(j, "pr", pr);
        char *t = cJSON_PrintUnformatted(j);
        fprintf(out, "%s\n", t ? t : "{}");
        free(t);
    } else {
        cJSON *v;
        if ((v = cJSON_GetObjectItem(j, "dataset"))) fprintf(out, "data      %s (%s split)\n", v->valuestring, cJSON_GetObjectItem(j, "split")->valuestring);
        fprintf(out, "rows      %.0f\nloss      %.4f\n", cJSON_GetObjectItem(j, "rows")->valuedouble, cJSON_GetObjectItem(j, "loss")->valuedouble);
        if ((v = cJSON_GetObjectItem(j, "accuracy"))) fprintf(out, "accuracy  %.2f%%\n", 100 * v->valuedouble);
        if ((v = cJSON_GetObjectItem(j, "auc"))) fprintf(out, "auc       %.4f\n", v->valuedouble);
        print_metrics(j, out);
        cJSON *cm = cJSON_GetObjectItem(j, "confusion");
        int C = cJSON_GetArraySize(cm);
        if (cm && C <= 32) {
            fprintf(out, "confusion matrix (rows: true, columns: predicted)\n      ");
            for (int b = 0; b < C; b++) fprintf(out, "%6d", b);
            fprintf(out, "\n");
            for (int a = 0; a < C; a++) {
                fprintf(out, "%6d", a);
                for (int b = 0; b < C; b++) fprintf(out, "%6.0f", cJSON_GetArrayItem(cJSON_GetArrayItem(cm, a), b)->valuedouble);
                fprintf(out, "\n");
            }
        }
    }
    cJSON_Delete(j);
    return KL_OK;
}

int kl_train_eval(const char *dir, const char *xp, const char *yp, int json, const char *logits_out, FILE *out, kl_err *e) {
    kl_eval_opts o = {0};
    o.x_path = xp;
    o.y_path = yp;
    o.logits_out = logits_out;
    return kl_train_eval_print(dir, &o, json, out, e);

}

int kl_train_eval_shards(const char *dir, const char *shards, int json, const char *logits_out, FILE *out, kl_err *e) {
    kl_eval_opts o = {0};
    o.shards = shards;
    o.logits_out = logits_out;
    return kl_train_eval_print(dir, &o, json, out, e);
}
