/* Joining a prediction log with its labels (kl_join_log, `keel data
 * join-log`; docs/monitoring.md, "Prediction log"): the prediction rows a
 * server logged (`keel serve --log-predictions DIR`: DIR/M/predictions) and
 * the labels posted to it later (DIR/M/labels), joined by request id into
 * one dataset folder that `keel features apply` and `keel train` read, so
 * that retraining on served traffic is one more pipeline stage.
 * Stages: read both datasets (verified against their manifests) → index
 * the labels by id (the latest per id) → pick the rows → write the part
 * and the manifest. */
#include "data_int.h"

#include "keel/parquet.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rows of a dataset: columns of equal length (the union of its files'). */
typedef struct {
    kl_column **c;
    size_t n;
} table;

static void table_free(table *t) {
    for (size_t i = 0; i < t->n; i++) kl_column_free(t->c[i]);
    free(t->c);
    t->c = NULL;
    t->n = 0;
}

static size_t table_rows(const table *t) { return t->n ? t->c[0]->len : 0; }

static int table_find(const table *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->c[i]->name, name)) return (int)i;
    return -1;
}

static int pad_nulls(kl_column *c, size_t rows) {
    while (c->len < rows)
        if (kl_column_push_null(c)) return KL_ENOMEM;
    return KL_OK;
}

/* appends the columns of one file to t: new names become columns (nulls
 * before), names t has but the file lacks get nulls */
static int table_add(table *t, const char *file, kl_column **c, size_t nc, kl_err *e) {
    size_t before = table_rows(t), rows = nc ? c[0]->len : 0;
    for (size_t j = 0; j < nc; j++) {
        int k = table_find(t, c[j]->name);
        if (k >= 0 && t->c[k]->type != c[j]->type)
            return kl_err_set(e, KL_ETYPE, "%s: column %s is %s, earlier parts of the log have %s", file, c[j]->name,
                              kl_col_type_name(c[j]->type), kl_col_type_name(t->c[k]->type));
        if (k < 0) {
            kl_column **nt = realloc(t->c, (t->n + 1) * sizeof *nt);
            if (!nt) return kl_err_set(e, KL_ENOMEM, "out of memory");
            t->c = nt;
            int rc = kl_column_new(c[j]->name, c[j]->type, 1, before + rows, &t->c[t->n], e);
            if (rc) return rc;
            k = (int)t->n++;
            if (pad_nulls(t->c[k], before)) return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        if (kl_column_append(t->c[k], c[j], 0, c[j]->len)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->n; i++)
        if (pad_nulls(t->c[i], before + rows)) return kl_err_set(e, KL_ENOMEM, "out of memory");
    return KL_OK;
}

/* Stage 1: every part of a log dataset, verified against its manifest */
static int read_log(const char *dir, table *t, kl_err *e) {
    char **files = NULL;
    size_t nf = 0;
    int rc = kl_dataset_resolve_verify(dir, KL_VERIFY_SHA256, &files, &nf, NULL, e);
    for (size_t i = 0; !rc && i < nf; i++) {
        kl_column **c = NULL;
        size_t nc = 0;
        if (!(rc = kl_pq_read_file(files[i], NULL, 0, &c, &nc, e))) rc = table_add(t, files[i], c, nc, e);
        for (size_t j = 0; j < nc; j++) kl_column_free(c[j]);
        free(c);
    }
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    return rc;
}

static int need_col(const table *t, const char *dir, const char *name, kl_col_type type, kl_err *e) {
    int k = table_find(t, name);
    if (k < 0 || t->c[k]->type != type)
        return kl_err_set(e, KL_EPARSE, "%s: no %s column %s (not a keel prediction log?)", dir, kl_col_type_name(type),
                          name);
    return k;
}

/* ==================================================================
 * Stage 2: the labels by id, the latest of each
 * ================================================================== */

typedef struct {
    const table *t;
    int id, at;
} lab_ctx;
static _Thread_local const lab_ctx *sort_ctx;

static int cmp_str(const kl_column *c, size_t a, const char *s, size_t n) {
    size_t an;
    const char *as = kl_column_get_str(c, a, &an);
    int r = memcmp(as, s, an < n ? an : n);
    return r ? r : (an > n) - (an < n);
}

static int cmp_label(const void *x, const void *y) {
    size_t a = *(const size_t *)x, b = *(const size_t *)y, bn;
    const kl_column *id = sort_ctx->t->c[sort_ctx->id], *at = sort_ctx->t->c[sort_ctx->at];
    const char *bs = kl_column_get_str(id, b, &bn);
    int r = cmp_str(id, a, bs, bn);
    if (r) return r;
    int64_t ta = kl_column_get_i64(at, a), tb = kl_column_get_i64(at, b);
    return ta < tb ? -1 : ta > tb ? 1 : a < b ? -1 : a > b;
}

/* the last row of each id's group, sorted by id (*n of them); *replaced: the others */
static int index_labels(const table *t, int id, int at, size_t **out, size_t *n, uint64_t *replaced, kl_err *e) {
    size_t rows = table_rows(t), k = 0;
    size_t *ix = malloc((rows ? rows : 1) * sizeof *ix);
    if (!ix) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < rows; i++)
        if (!kl_column_is_null(t->c[id], i)) ix[k++] = i;
    lab_ctx ctx = {t, id, at};
    sort_ctx = &ctx;
    qsort(ix, k, sizeof *ix, cmp_label);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        size_t nn;
        const char *s = kl_column_get_str(t->c[id], ix[i], &nn);
        if (i + 1 < k && !cmp_str(t->c[id], ix[i + 1], s, nn)) {
            (*replaced)++;
            continue;
        }
        ix[m++] = ix[i];
    }
    *out = ix;
    *n = m;
    return KL_OK;
}

/* position in ix of the label of id s[0..n), or -1 */
static long find_label(const kl_column *id, const size_t *ix, size_t n, const char *s, size_t sn) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = cmp_str(id, ix[mid], s, sn);
        if (!r) return (long)mid;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* ==================================================================
 * Stage 3 and 4: the rows, the label column, the output folder
 * ================================================================== */

/* label row li of L (label: float64, label_text: string) into c as c's type */
static int push_label(kl_column *c, const table *L, int lnum, int ltxt, long li, const char *rid, kl_err *e) {
    if (li < 0) return kl_column_push_null(c) ? kl_err_set(e, KL_ENOMEM, "out of memory") : KL_OK;
    size_t r = (size_t)li, tn = 0;
    int has_num = !kl_column_is_null(L->c[lnum], r), has_txt = !kl_column_is_null(L->c[ltxt], r);
    double v = has_num ? kl_column_get_f64(L->c[lnum], r) : 0;
    const char *txt = has_txt ? kl_column_get_str(L->c[ltxt], r, &tn) : NULL;
    int rc;
    if (c->type == KL_COL_STRING) {
        char nb[40];
        if (!has_txt) {
            snprintf(nb, sizeof nb, "%.17g", v);
            txt = nb;
            tn = strlen(nb);
        }
        rc = kl_column_push_str(c, txt, tn);
    } else if (!has_num) {
        return kl_err_set(e, KL_ETYPE, "label of request %s: '%.*s' is not a %s (give --label-type string)", rid,
                          (int)(tn > 80 ? 80 : tn), txt ? txt : "", kl_col_type_name(c->type));
    } else if (c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64) {
        rc = kl_column_push_f64(c, v);
    } else {
        double lim = c->type == KL_COL_INT32 ? 2147483647.0 : c->type == KL_COL_BOOL ? 1 : 9007199254740992.0;
        double lo = c->type == KL_COL_BOOL ? 0 : -lim - (c->type == KL_COL_INT32);
        if (v != (double)(int64_t)v || v < lo || v > lim)
            return kl_err_set(e, KL_ETYPE, "label of request %s: %.17g is not a %s", rid, v, kl_col_type_name(c->type));
        rc = kl_column_push_i64(c, (int64_t)v);
    }
    return rc ? kl_err_set(e, KL_ENOMEM, "out of memory") : KL_OK;
}

/* the output folder may be new, empty, or an earlier join's (replaced) */
static int check_out(const char *out, kl_err *e) {
    DIR *d = opendir(out);
    if (!d) return errno == ENOENT ? kl_mkdir_p(out, e) : kl_err_set(e, -errno, "%s: %s", out, strerror(errno));
    struct dirent *de;
    int rc = KL_OK;
    while ((de = readdir(d)) && !rc)
        if (de->d_name[0] != '.' && strcmp(de->d_name, "part-00000.parquet") && strcmp(de->d_name, "manifest.json"))
            rc = kl_err_set(e, KL_EEXIST, "%s: exists and holds %s (not an earlier join-log output): give a new folder",
                            out, de->d_name);
    closedir(d);
    return rc;
}

typedef struct {
    table P, L;
    int p_id, p_rec, p_at, l_id, l_at, l_num, l_txt;
    size_t *lix, nlab;
    unsigned char *used;
    size_t *rows; /* prediction rows picked */
    long *lab;    /* their label (index into lix), -1 none */
    size_t npick;
} joinrun;

static int pick_rows(joinrun *J, const kl_join_log_opts *o, kl_join_log_result *res, kl_err *e) {
    size_t n = table_rows(&J->P);
    J->rows = malloc((n ? n : 1) * sizeof *J->rows);
    J->lab = malloc((n ? n : 1) * sizeof *J->lab);
    J->used = calloc(J->nlab ? J->nlab : 1, 1);
    if (!J->rows || !J->lab || !J->used) return kl_err_set(e, KL_ENOMEM, "out of memory");
    const kl_column *id = J->P.c[J->p_id], *rec = J->P.c[J->p_rec], *at = J->P.c[J->p_at];
    for (size_t i = 0; i < n; i++) {
        if (kl_column_is_null(id, i) || (o->since_us && kl_column_get_i64(at, i) < o->since_us)) continue;
        res->predictions++;
        long li = -1;
        if (!kl_column_is_null(rec, i) && kl_column_get_i64(rec, i) == 0) {
            size_t sn;
            const char *s = kl_column_get_str(id, i, &sn);
            li = find_label(J->L.c[J->l_id], J->lix, J->nlab, s, sn);
        }
        if (li >= 0) {
            res->joined++;
            J->used[li] = 1;
        } else res->unlabelled++;
        if (li < 0 && !o->keep_unlabelled) continue;
        J->rows[J->npick] = i;
        J->lab[J->npick++] = li >= 0 ? (long)J->lix[li] : -1;
    }
    for (size_t k = 0; k < J->nlab; k++) res->unmatched_labels += !J->used[k];
    if (!J->npick)
        return kl_err_set(e, KL_ENOTFOUND, "%s/%s: no prediction has a label yet (%llu predictions, %llu labels)",
                          o->log_dir, o->model, (unsigned long long)res->predictions, (unsigned long long)J->nlab);
    return KL_OK;
}

/* the output columns: every prediction column of the picked rows, the label, labelled_at */
static int joined_columns(joinrun *J, const kl_join_log_opts *o, kl_column ***out, size_t *nout, kl_err *e) {
    const char *lname = o->label ? o->label : "label";
    if (table_find(&J->P, lname) >= 0 || !strcmp(lname, "labelled_at"))
        return kl_err_set(e, KL_EINVAL, "--label %s: the prediction log has a column of that name already", lname);
    size_t nc = J->P.n + 2;
    kl_column **c = calloc(nc, sizeof *c);
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    for (size_t j = 0; j < J->P.n && !rc; j++) {
        if ((rc = kl_column_new(J->P.c[j]->name, J->P.c[j]->type, 1, J->npick, &c[j], e))) break;
        for (size_t k = 0; k < J->npick && !rc; k++)
            if (kl_column_append(c[j], J->P.c[j], J->rows[k], J->rows[k] + 1))
                rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    if (!rc) rc = kl_column_new(lname, o->label_type, 1, J->npick, &c[nc - 2], e);
    if (!rc) rc = kl_column_new("labelled_at", KL_COL_TIMESTAMP, 1, J->npick, &c[nc - 1], e);
    for (size_t k = 0; k < J->npick && !rc; k++) {
        size_t sn;
        const char *rid = kl_column_get_str(J->P.c[J->p_id], J->rows[k], &sn);
        char rb[300];
        snprintf(rb, sizeof rb, "%.*s", (int)(sn > 256 ? 256 : sn), rid);
        rc = push_label(c[nc - 2], &J->L, J->l_num, J->l_txt, J->lab[k], rb, e);
        if (!rc &&
            (J->lab[k] < 0 ? kl_column_push_null(c[nc - 1])
                           : kl_column_push_i64(c[nc - 1], kl_column_get_i64(J->L.c[J->l_at], (size_t)J->lab[k]))))
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    if (rc) {
        for (size_t j = 0; j < nc; j++) kl_column_free(c[j]);
        free(c);
        return rc;
    }
    *out = c;
    *nout = nc;
    return KL_OK;
}

static int write_joined(kl_column **c, size_t nc, const kl_join_log_opts *o, const kl_join_log_result *res, kl_err *e) {
    char p[4300];
    snprintf(p, sizeof p, "%s/part-00000.parquet", o->out);
    int rc = kl_pq_write_file(p, c, nc, NULL, NULL, e);
    kl_dataset_file f = {0};
    if (!rc) rc = kl_dataset_file_stat(o->out, "part-00000.parquet", nc ? c[0]->len : 0, &f, e);
    if (!rc) {
        kl_buf h;
        kl_buf_init(&h);
        kl_buf_puts(&h, "\"source\": ");
        kl_buf_json_str(&h, o->log_dir);
        kl_buf_puts(&h, ",\n  \"model\": ");
        kl_buf_json_str(&h, o->model);
        kl_buf_puts(&h, ",\n  \"label\": ");
        kl_buf_json_str(&h, o->label ? o->label : "label");
        kl_buf_printf(
            &h,
            ",\n  \"join\": {\"predictions\": %llu, \"labels\": %llu, \"joined\": %llu, \"unlabelled\": %llu, "
            "\"unmatched_labels\": %llu, \"replaced_labels\": %llu}",
            (unsigned long long)res->predictions, (unsigned long long)res->labels, (unsigned long long)res->joined,
            (unsigned long long)res->unlabelled, (unsigned long long)res->unmatched_labels,
            (unsigned long long)res->replaced_labels);
        rc = h.failed ? kl_err_set(e, KL_ENOMEM, "out of memory")
                      : kl_dataset_manifest_write(o->out, "keel-joined-log-1", h.data, &f, 1, e);
        kl_buf_free(&h);
    }
    free(f.path);
    return rc;
}

/* the labels table of a model no label was posted to yet */
static int no_labels(table *t, kl_err *e) {
    static const struct {
        const char *name;
        kl_col_type t;
    } cols[] = {{"request_id", KL_COL_STRING},
                {"received_at", KL_COL_TIMESTAMP},
                {"label", KL_COL_FLOAT64},
                {"label_text", KL_COL_STRING}};
    if (!(t->c = calloc(4, sizeof *t->c))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (t->n = 0; t->n < 4; t->n++) {
        int rc = kl_column_new(cols[t->n].name, cols[t->n].t, 1, 0, &t->c[t->n], e);
        if (rc) return rc;
    }
    return KL_OK;
}

static int open_logs(joinrun *J, const kl_join_log_opts *o, kl_join_log_result *res, kl_err *e) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s/predictions", o->log_dir, o->model);
    int rc = read_log(dir, &J->P, e);
    if (rc) return rc;
    if ((J->p_id = need_col(&J->P, dir, "request_id", KL_COL_STRING, e)) < 0 ||
        (J->p_rec = need_col(&J->P, dir, "record", KL_COL_INT32, e)) < 0 ||
        (J->p_at = need_col(&J->P, dir, "served_at", KL_COL_TIMESTAMP, e)) < 0)
        return e->code;
    snprintf(dir, sizeof dir, "%s/%s/labels", o->log_dir, o->model);
    if (kl_path_exists(dir)) rc = read_log(dir, &J->L, e);
    else rc = no_labels(&J->L, e); /* nothing posted yet */
    if (rc) return rc;
    if ((J->l_id = need_col(&J->L, dir, "request_id", KL_COL_STRING, e)) < 0 ||
        (J->l_at = need_col(&J->L, dir, "received_at", KL_COL_TIMESTAMP, e)) < 0 ||
        (J->l_num = need_col(&J->L, dir, "label", KL_COL_FLOAT64, e)) < 0 ||
        (J->l_txt = need_col(&J->L, dir, "label_text", KL_COL_STRING, e)) < 0)
        return e->code;
    res->labels = table_rows(&J->L);
    return index_labels(&J->L, J->l_id, J->l_at, &J->lix, &J->nlab, &res->replaced_labels, e);
}

static void joinrun_free(joinrun *J) {
    table_free(&J->P);
    table_free(&J->L);
    free(J->lix);
    free(J->used);
    free(J->rows);
    free(J->lab);
}

int kl_join_log_read(const kl_join_log_opts *o, kl_column ***cols, size_t *ncols, kl_join_log_result *res, kl_err *e) {
    memset(res, 0, sizeof *res);
    *cols = NULL;
    *ncols = 0;
    if (!o->log_dir || !o->model) return kl_err_set(e, KL_EINVAL, "join-log needs a log folder and a model");
    joinrun J;
    memset(&J, 0, sizeof J);
    int rc = open_logs(&J, o, res, e);
    if (!rc) rc = pick_rows(&J, o, res, e);
    if (!rc) rc = joined_columns(&J, o, cols, ncols, e);
    joinrun_free(&J);
    return rc;
}

int kl_join_log(const kl_join_log_opts *o, kl_join_log_result *res, kl_err *e) {
    memset(res, 0, sizeof *res);
    if (!o->out) return kl_err_set(e, KL_EINVAL, "join-log needs --out");
    int rc = check_out(o->out, e);
    kl_column **c = NULL;
    size_t nc = 0;
    if (!rc) rc = kl_join_log_read(o, &c, &nc, res, e);
    if (!rc) rc = write_joined(c, nc, o, res, e);
    for (size_t j = 0; j < nc; j++) kl_column_free(c[j]);
    free(c);
    return rc;
}
