/* Training data from Parquet: the spec's `data: {dataset, label, features,
 * exclude, split}` source. Reads a dataset folder, version folder or
 * .parquet file through the data layer (kl_dataset_resolve + the Parquet
 * reader), picks the numeric feature columns, splits the rows by a column's
 * values or by seeded fractions, and gives X/y as the .npy path does
 * (tr_array), plus the dataset's identity (version, manifest sha256, feature
 * hash) for meta.json and the model card. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keel/data.h"
#include "keel/parquet.h"
#include "train/train_data.h"

/* ================================================================ spec */

static int str_list(const kl_node *n, char ***out, int *nout, kl_err *e) {
    if (!n) return KL_OK;
    if (kl_node_kind_of(n) != KL_NODE_SEQ) return kl_node_error(n, e, KL_EINVAL, "expected a list of names");
    size_t k = kl_node_len(n);
    *out = calloc(k + 1, sizeof **out);
    if (!*out) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        const char *v;
        int rc = kl_node_str(kl_node_at(n, i), &v, e);
        if (rc) return rc;
        if (!((*out)[i] = strdup(v))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        *nout = (int)i + 1;
    }
    return KL_OK;
}

static void strv_free(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

int kl__train_dsrc_parse(const kl_node *da, tr_dsrc **out, kl_err *e) {
    static const char *k[] = {"dataset", "label", "features", "exclude", "split"};
    static const char *parts[3] = {"train", "val", "test"};
    *out = NULL;
    int rc = kl_spec_check_keys(da, k, KL_ARRAY_LEN(k), e);
    if (rc) return rc;
    tr_dsrc *d = calloc(1, sizeof *d);
    if (!d) return kl_err_set(e, KL_ENOMEM, "out of memory");
    const char *v;
    if ((rc = kl_spec_str(da, "dataset", "", &v, e))) goto fail;
    if (!*v) { rc = kl_node_error(da, e, KL_EINVAL, "data.dataset: a dataset folder or .parquet file"); goto fail; }
    d->path = strdup(v);
    if ((rc = kl_spec_str(da, "label", "", &v, e))) goto fail;
    if (!*v) { rc = kl_node_error(da, e, KL_EINVAL, "data.label: the label column is required with data.dataset"); goto fail; }
    d->label = strdup(v);
    if ((rc = str_list(kl_node_get(da, "features"), &d->features, &d->nfeatures, e))) goto fail;
    if ((rc = str_list(kl_node_get(da, "exclude"), &d->exclude, &d->nexclude, e))) goto fail;
    const kl_node *sp = kl_node_get(da, "split");
    if (sp) {
        static const char *sk[] = {"column", "train", "val", "test", "seed", "shuffle"};
        if (kl_node_kind_of(sp) != KL_NODE_MAP) { rc = kl_node_error(sp, e, KL_EINVAL, "data.split: a map ({column, train, val, test} or {train: F, val: F, test: F, seed})"); goto fail; }
        if ((rc = kl_spec_check_keys(sp, sk, KL_ARRAY_LEN(sk), e))) goto fail;
        d->has_split = 1;
        if ((rc = kl_spec_str(sp, "column", "", &v, e))) goto fail;
        int64_t seed;
        if ((rc = kl_spec_int(sp, "seed", 1, &seed, e)) || (rc = kl_spec_bool(sp, "shuffle", 1, &d->shuffle, e))) goto fail;
        d->seed = (uint64_t)seed;
        if (*v) {
            d->split_col = strdup(v);
            for (int p = 0; p < 3; p++)
                if ((rc = str_list(kl_node_get(sp, parts[p]), &d->vals[p], &d->nvals[p], e))) goto fail;
            if (!d->nvals[0]) { rc = kl_node_error(sp, e, KL_EINVAL, "data.split.train: list the %s values of the training rows", d->split_col); goto fail; }
        } else {
            double sum = 0;
            for (int p = 0; p < 3; p++) {
                if ((rc = kl_spec_double(sp, parts[p], p == 0 ? 1.0 : 0.0, &d->frac[p], e))) goto fail;
                if (!(d->frac[p] >= 0 && d->frac[p] <= 1)) { rc = kl_node_error(kl_node_get(sp, parts[p]), e, KL_EINVAL, "a fraction in [0, 1]"); goto fail; }
                sum += d->frac[p];
            }
            if (sum > 1 + 1e-9 || d->frac[0] <= 0) { rc = kl_node_error(sp, e, KL_EINVAL, "data.split: fractions must sum to at most 1, with train > 0 (got %g)", sum); goto fail; }
        }
    }
    *out = d;
    return KL_OK;
fail:
    kl__train_dsrc_free(d);
    return rc;
}

void kl__train_dsrc_free(tr_dsrc *d) {
    if (!d) return;
    free(d->path); free(d->label); free(d->split_col); free(d->ref_col);
    strv_free(d->features, d->nfeatures);
    strv_free(d->exclude, d->nexclude);
    for (int p = 0; p < 3; p++) strv_free(d->vals[p], d->nvals[p]);
    free(d);
}

void kl__train_dsinfo_free(tr_dsinfo *i) {
    if (!i) return;
    strv_free(i->names, i->nnames);
    strv_free(i->classes, i->nclasses);
    i->classes = NULL;
    i->nclasses = 0;
    kl_mem_free(i->ref);
    i->ref = NULL;
    i->names = NULL;
    i->nnames = 0;
}

/* ================================================================ reading */

static int is_numeric(kl_col_type t) {
    return t == KL_COL_BOOL || t == KL_COL_INT32 || t == KL_COL_INT64 || t == KL_COL_FLOAT32 || t == KL_COL_FLOAT64;
}

static int in_list(char *const *v, int n, const char *s) {
    for (int i = 0; i < n; i++) if (!strcmp(v[i], s)) return 1;
    return 0;
}

static int column_list_error(kl_pq_reader *r, const char *file, const char *what, const char *name, kl_err *e) {
    kl_buf b;
    kl_buf_init(&b);
    for (size_t j = 0; j < kl_pq_num_columns(r); j++) kl_buf_printf(&b, "%s%s", j ? ", " : "", kl_pq_column(r, j)->name);
    int rc = kl_err_set(e, KL_ENOTFOUND, "%s: %s column '%s' not found (columns: %s)", file, what, name, b.data ? b.data : "");
    kl_buf_free(&b);
    return rc;
}

/* The feature columns: given (checked numeric) or every numeric column but
 * the label, the excluded ones and the split column. */
static int pick_features(const tr_dsrc *d, kl_pq_reader *r, const char *file, tr_dsinfo *info, kl_err *e) {
    int li = kl_pq_find_column(r, d->label);
    if (li < 0) return column_list_error(r, file, "label", d->label, e);
    if (!is_numeric(kl_pq_column(r, (size_t)li)->type))
        return kl_err_set(e, KL_ETYPE, "%s: label column '%s' is %s, not numeric (bool, int or float)", file, d->label, kl_col_type_name(kl_pq_column(r, (size_t)li)->type));
    if (d->split_col && kl_pq_find_column(r, d->split_col) < 0) return column_list_error(r, file, "split", d->split_col, e);
    size_t nc = kl_pq_num_columns(r);
    info->names = calloc(nc + (size_t)d->nfeatures + 1, sizeof *info->names);
    if (!info->names) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (d->nfeatures) {
        for (int i = 0; i < d->nfeatures; i++) {
            int ci = kl_pq_find_column(r, d->features[i]);
            if (ci < 0) return column_list_error(r, file, "feature", d->features[i], e);
            kl_col_type t = kl_pq_column(r, (size_t)ci)->type;
            if (!is_numeric(t))
                return kl_err_set(e, KL_ETYPE, "%s: feature column '%s' is %s, not numeric; encode it with `keel features` (onehot, index, hash_bucket)", file, d->features[i], kl_col_type_name(t));
            if (!(info->names[info->nnames++] = strdup(d->features[i]))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        return KL_OK;
    }
    for (size_t j = 0; j < nc; j++) {
        const kl_pq_column_info *ci = kl_pq_column(r, j);
        if (!ci->supported || !is_numeric(ci->type) || !strcmp(ci->name, d->label) || in_list(d->exclude, d->nexclude, ci->name) ||
            !strncmp(ci->name, "__", 2) ||
            (d->split_col && !strcmp(ci->name, d->split_col)))
            continue;
        if (!(info->names[info->nnames++] = strdup(ci->name))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    if (!info->nnames) return kl_err_set(e, KL_EINVAL, "%s: no numeric feature columns besides the label '%s'", file, d->label);
    return KL_OK;
}

/* The value of the split column at row i as text. */
static const char *split_text(const kl_column *c, size_t i, char *buf, size_t n) {
    if (kl_column_is_null(c, i)) return NULL;
    if (c->type == KL_COL_STRING || c->type == KL_COL_BINARY) {
        size_t len;
        const char *s = kl_column_get_str(c, i, &len);
        snprintf(buf, n, "%.*s", (int)len, s);
    } else if (c->type == KL_COL_BOOL) snprintf(buf, n, "%s", kl_column_get_i64(c, i) ? "true" : "false");
    else if (c->type == KL_COL_FLOAT32 || c->type == KL_COL_FLOAT64) snprintf(buf, n, "%g", kl_column_get_f64(c, i));
    else snprintf(buf, n, "%lld", (long long)kl_column_get_i64(c, i));
    return buf;
}

static uint64_t mix64(uint64_t x) { return kl_splitmix64(&x); }

/* Which part row g (of total) belongs to: 0..2, or -1 (no part). */
static int row_part(const tr_dsrc *d, const kl_column *sc, size_t i, int64_t g, int64_t total) {
    if (!d->has_split) return TR_PART_TRAIN;
    if (d->split_col) {
        char buf[256];
        const char *t = split_text(sc, i, buf, sizeof buf);
        if (!t) return -1;
        for (int p = 0; p < 3; p++) if (in_list(d->vals[p], d->nvals[p], t)) return p;
        return -1;
    }
    double u = d->shuffle ? (double)(mix64(d->seed * 0xD1B54A32D192ED03ull ^ (uint64_t)g) >> 11) * 0x1.0p-53 : ((double)g + 0.5) / (double)total;
    double c = 0;
    for (int p = 0; p < 3; p++) {
        c += d->frac[p];
        if (u < c) return p;
    }
    return -1;
}

/* A features dataset's label_classes (its label is a string class name,
 * stored as the class index): the names, for meta.json and serving. */
static int read_classes(const cJSON *a, const char *manifest, tr_dsinfo *info, kl_err *e) {
    if (!a) return KL_OK;
    int rc = kl_json_string_list(a, 65536, &info->classes, &info->nclasses);
    if (rc == KL_ENOMEM) return kl_err_set(e, rc, "out of memory");
    if (rc) return kl_err_set(e, KL_EPARSE, "%s: label_classes: a list of 1..65536 names", manifest);
    return KL_OK;
}

/* Identity: manifest version_id / sha256, feature_hash, features.json, label classes. */
static int identify(const char *manifest, char **files, size_t nfiles, tr_dsinfo *info, kl_err *e) {
    int rc = KL_OK;
    if (!manifest) return nfiles == 1 ? kl_sha256_file_hex(files[0], info->manifest_sha, e) : KL_OK;
    if ((rc = kl_sha256_file_hex(manifest, info->manifest_sha, e))) return rc;
    void *doc = NULL;
    if ((rc = kl_json_load_file(manifest, &doc, e))) return rc; /* a manifest that does not parse is an error, named */
    cJSON *j = doc;
    cJSON *v = cJSON_GetObjectItem(j, "version_id"), *fh = cJSON_GetObjectItem(j, "feature_hash");
    if (cJSON_IsString(v)) snprintf(info->dataset_version, sizeof info->dataset_version, "%s", v->valuestring);
    if (cJSON_IsString(fh)) {
        snprintf(info->feature_hash, sizeof info->feature_hash, "%s", fh->valuestring);
        const char *slash = strrchr(manifest, '/');
        int dl = slash ? (int)(slash - manifest) : 1;
        snprintf(info->features_json, sizeof info->features_json, "%.*s/features.json", dl, slash ? manifest : ".");
        if (!kl_path_exists(info->features_json)) info->features_json[0] = 0;
    }
    rc = read_classes(cJSON_GetObjectItem(j, "label_classes"), manifest, info, e);
    cJSON_Delete(j);
    return rc;
}

/* What every read of a source shares: its files (verified), the columns read
 * (features, label, split, reference) and the dataset's row count. */
typedef struct {
    char **files, *manifest;
    size_t nfiles, nn, split_i, ref_i;
    const char **names;
    int64_t F, total;
} ds_ctx;

static void ds_close(ds_ctx *c) {
    free(c->names);
    for (size_t i = 0; i < c->nfiles; i++) free(c->files[i]);
    free(c->files);
    free(c->manifest);
    memset(c, 0, sizeof *c);
}

/* Resolves and verifies the files, picks the features from the first file's
 * schema, counts the rows from every footer, reads the identity. */
static int ds_open(const tr_dsrc *d, ds_ctx *c, tr_dsinfo *info, kl_err *e) {
    kl_pq_reader *r = NULL;
    memset(c, 0, sizeof *c);
    int rc = kl_dataset_resolve_verify(d->path, (kl_verify_mode)d->verify, &c->files, &c->nfiles, &c->manifest, e);
    if (rc) {
        kl_err_prefix(e, "data.dataset");
        return rc;
    }
    if (!c->nfiles) return kl_err_set(e, KL_ENOTFOUND, "data.dataset %s: no Parquet files", d->path);
    for (size_t fi = 0; fi < c->nfiles; fi++) {
        if ((rc = kl_pq_open(c->files[fi], &r, e))) return rc;
        if (fi == 0 && (rc = pick_features(d, r, c->files[fi], info, e))) {
            kl_pq_close(r);
            return rc;
        }
        uint64_t fr = kl_pq_num_rows(r);
        kl_pq_close(r);
        if (fr > (uint64_t)(INT64_MAX / 16 - c->total))
            return kl_err_set(e, KL_ERANGE, "%s: %llu rows: the dataset's row count overflows", c->files[fi],
                              (unsigned long long)fr);
        c->total += (int64_t)fr;
    }
    if ((rc = identify(c->manifest, c->files, c->nfiles, info, e))) return rc;
    c->F = info->nnames;
    if (c->F && c->total > (INT64_MAX / 16) / (c->F + 1))
        return kl_err_set(e, KL_ERANGE, "data.dataset %s: %lld rows x %lld features overflow", d->path,
                          (long long)c->total, (long long)c->F);
    if (!(c->names = calloc((size_t)c->F + 3, sizeof *c->names))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int64_t i = 0; i < c->F; i++) c->names[c->nn++] = info->names[i];
    c->names[c->nn++] = d->label;
    c->split_i = c->nn;
    if (d->split_col) c->names[c->nn++] = d->split_col;
    c->ref_i = c->nn;
    if (d->ref_col) c->names[c->nn++] = d->ref_col;
    return KL_OK;
}

/* The file has every column the source reads (the error lists its columns). */
static int ds_columns(const ds_ctx *c, kl_pq_reader *r, const char *file, kl_err *e) {
    for (size_t i = 0; i < c->nn; i++)
        if (kl_pq_find_column(r, c->names[i]) < 0)
            return column_list_error(r, file, i < (size_t)c->F ? "feature" : "label/split", c->names[i], e);
    return KL_OK;
}

/* Decoded columns (of one file or row group): numeric types, equal lengths. */
static int cols_check(const tr_dsrc *d, const ds_ctx *c, const char *file, kl_column **cols, size_t ncols,
                      int *label_int, kl_err *e) {
    const kl_column *lc = cols[c->F];
    if (!is_numeric(lc->type))
        return kl_err_set(e, KL_ETYPE, "%s: label column '%s' is %s, not numeric", file, d->label,
                          kl_col_type_name(lc->type));
    for (int64_t j = 0; j < c->F; j++)
        if (!is_numeric(cols[j]->type))
            return kl_err_set(e, KL_ETYPE, "%s: feature column '%s' is %s, not numeric", file, c->names[j],
                              kl_col_type_name(cols[j]->type));
    if (lc->type == KL_COL_FLOAT32 || lc->type == KL_COL_FLOAT64) *label_int = 0;
    for (size_t j = 0; j < ncols; j++)
        if (cols[j]->len != lc->len)
            return kl_err_set(e, KL_EPARSE, "%s: column '%s' has %zu rows, the label %zu", file, c->names[j],
                              cols[j]->len, lc->len);
    return KL_OK;
}

/* Output of take_rows: the part's rows appended at n (at most cap rows). */
typedef struct {
    double *X, *Y, *ref;
    int64_t *rowid; /* the dataset row of each, or NULL */
    int64_t n, cap;
    int64_t *rows_part; /* [3]: rows counted per part, or NULL */
} ds_out;

/* The rows of part among len decoded rows (dataset rows g0..): nulls and
 * non-finite features are errors naming the file, the row and the column. */
static int take_rows(const tr_dsrc *d, const ds_ctx *c, int part, const char *file, kl_column **cols, size_t len,
                     int64_t g0, int64_t f0, ds_out *o, kl_err *e) { /* f0: the file's row of decoded row 0 */
    const kl_column *lc = cols[c->F], *sc = d->split_col ? cols[c->split_i] : NULL,
                    *rcol = d->ref_col ? cols[c->ref_i] : NULL;
    int64_t F = c->F;
    for (size_t i = 0; i < len; i++) {
        int64_t g = g0 + (int64_t)i;
        long long fr = (long long)(f0 + (int64_t)i);
        int p = row_part(d, sc, i, g, c->total);
        if (p >= 0 && o->rows_part) o->rows_part[p]++;
        if (part != TR_PART_ALL && p != part) continue;
        if (o->n >= o->cap)
            return kl_err_set(e, KL_EPARSE, "%s: more rows decoded than the footers announced (%lld)", file,
                              (long long)o->cap);
        int64_t n = o->n;
        if (kl_column_is_null(lc, i))
            return kl_err_set(e, KL_EINVAL, "%s: row %lld (dataset row %lld): label column '%s' is null", file, fr,
                              (long long)g, d->label);
        o->Y[n] = kl_column_get_f64(lc, i);
        if (rcol) o->ref[n] = kl_column_is_null(rcol, i) ? NAN : kl_column_get_f64(rcol, i);
        if (o->rowid) o->rowid[n] = g;
        for (int64_t j = 0; j < F; j++) {
            const kl_column *col = cols[j];
            if (kl_column_is_null(col, i))
                return kl_err_set(e, KL_EINVAL,
                                  "%s: row %lld (dataset row %lld): feature column '%s' is null (fill it in the "
                                  "feature spec or exclude the column)",
                                  file, fr, (long long)g, c->names[j]);
            double v = kl_column_get_f64(col, i);
            if (!isfinite(v))
                return kl_err_set(e, KL_EINVAL, "%s: row %lld (dataset row %lld): feature column '%s' is %s", file, fr,
                                  (long long)g, c->names[j], isnan(v) ? "NaN" : "infinite");
            o->X[n * F + j] = v;
        }
        o->n++;
    }
    return KL_OK;
}

static void cols_free(kl_column **cols, size_t ncols) {
    for (size_t i = 0; i < ncols; i++) kl_column_free(cols[i]);
    free(cols);
}

static void arrays_set(tr_array *X, tr_array *Y, int64_t n, int64_t F, int label_int) {
    X->rank = 2;
    X->dims[0] = n;
    X->dims[1] = F;
    X->n = n * F;
    X->is_int = 0;
    Y->rank = 1;
    Y->dims[0] = n;
    Y->n = n;
    Y->is_int = label_int;
}

static int load_by_units(const tr_dsrc *d, int part, tr_array *X, tr_array *Y, tr_dsinfo *info_out, kl_err *e);

int kl__train_dsrc_load(const tr_dsrc *d, int part, tr_array *X, tr_array *Y, tr_dsinfo *info_out, kl_err *e) {
    if (kl__train_dsrc_streamable(d)) return load_by_units(d, part, X, Y, info_out, e);
    ds_ctx c;
    kl_column **cols = NULL;
    size_t ncols = 0;
    kl_pq_reader *r = NULL;
    tr_dsinfo info = {0};
    memset(X, 0, sizeof *X);
    memset(Y, 0, sizeof *Y);
    int rc = ds_open(d, &c, &info, e);
    if (rc) goto done;
    int64_t total = c.total, F = c.F;
    if (d->ref_col && !(info.ref = kl_mem_alloc_e((size_t)(total + 1) * sizeof(double), KL_TAG_DATASET, e))) {
        rc = KL_ENOMEM;
        goto done;
    }
    X->f = kl_mem_alloc_e((size_t)(total * F + 1) * sizeof(double), KL_TAG_DATASET, e);
    Y->f = kl_mem_alloc_e((size_t)(total + 1) * sizeof(double), KL_TAG_DATASET, e);
    if (!X->f || !Y->f) { rc = KL_ENOMEM; goto done; }
    ds_out o = {X->f, Y->f, info.ref, NULL, 0, total, info.rows_part};
    int64_t g = 0;
    int label_int = 1;
    for (size_t fi = 0; fi < c.nfiles; fi++) {
        if ((rc = kl_pq_open(c.files[fi], &r, e)) || (rc = ds_columns(&c, r, c.files[fi], e))) goto done;
        kl_pq_close(r);
        r = NULL;
        if ((rc = kl_pq_read_file(c.files[fi], c.names, c.nn, &cols, &ncols, e))) goto done;
        if ((rc = cols_check(d, &c, c.files[fi], cols, ncols, &label_int, e))) goto done;
        size_t len = cols[F]->len;
        /* X, Y and ref hold total rows: never write past them, whatever the
         * decoder returned (a file changed between the two passes) */
        if ((uint64_t)len > (uint64_t)(total - g)) {
            rc = kl_err_set(e, KL_EPARSE, "%s: %zu rows decoded, beyond the %lld the footers announced", c.files[fi],
                            len, (long long)total);
            goto done;
        }
        if ((rc = take_rows(d, &c, part, c.files[fi], cols, len, g, 0, &o, e))) goto done;
        g += (int64_t)len;
        cols_free(cols, ncols);
        cols = NULL;
        ncols = 0;
    }
    info.rows_total = total;
    arrays_set(X, Y, o.n, F, label_int);
    if (o.n == 0) {
        rc = kl_err_set(e, KL_EINVAL, "data.dataset %s: the %s split has no rows", d->path,
                        part == TR_PART_VAL        ? "val"
                            : part == TR_PART_TEST ? "test"
                                                   : "train");
        goto done;
    }
done:
    kl_pq_close(r);
    cols_free(cols, ncols);
    ds_close(&c);
    if (rc) { kl__train_array_free(X); kl__train_array_free(Y); kl__train_dsinfo_free(&info); }
    else if (info_out) *info_out = info;
    else kl__train_dsinfo_free(&info);
    return rc;
}

/* ================================================================ by row group */

typedef struct {
    size_t fi, rg;
    int64_t g0, f0, rows, nprt; /* first dataset row, first row in its file, rows, rows of the part */
} pq_unit;

struct tr_pqs {
    const tr_dsrc *d;
    ds_ctx c;
    int part;
    pq_unit *u;
    int64_t nu, nprt;
    kl_pq_reader *r; /* the file of the last read */
    size_t r_fi;
    int64_t rows_decoded, units_decoded;
};

int kl__train_dsrc_streamable(const tr_dsrc *d) { return !d->split_col && !d->ref_col; }

/* The row groups of every file; each one's rows of the part from the split's
 * per-row rule (a function of the dataset row: no decoding). */
static int pqs_units(tr_pqs *st, tr_dsinfo *info, kl_err *e) {
    ds_ctx *c = &st->c;
    int64_t g = 0, cap = 0;
    for (size_t fi = 0; fi < c->nfiles; fi++) {
        int64_t f0 = 0;
        kl_pq_reader *r = NULL;
        int rc = kl_pq_open(c->files[fi], &r, e);
        if (!rc) rc = ds_columns(c, r, c->files[fi], e);
        size_t nrg = rc ? 0 : kl_pq_num_row_groups(r);
        for (size_t rg = 0; !rc && rg < nrg; rg++) {
            int64_t rows = (int64_t)kl_pq_row_group_rows(r, rg), k = 0;
            if (rows < 0 || rows > c->total - g)
                rc = kl_err_set(e, KL_EPARSE, "%s: row group %zu: %lld rows, beyond the file's", c->files[fi], rg,
                                (long long)rows);
            for (int64_t i = 0; !rc && i < rows; i++) {
                int p = row_part(st->d, NULL, 0, g + i, c->total);
                if (p >= 0) info->rows_part[p]++;
                k += st->part == TR_PART_ALL || p == st->part;
            }
            if (!rc && k && st->nu == cap) {
                cap = cap ? 2 * cap : 64;
                pq_unit *nu = realloc(st->u, (size_t)cap * sizeof *nu);
                if (!nu) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
                else st->u = nu;
            }
            if (!rc && k) st->u[st->nu++] = (pq_unit){fi, rg, g, f0, rows, k};
            st->nprt += k;
            g += rows;
            f0 += rows;
        }
        kl_pq_close(r);
        if (rc) return rc;
    }
    info->rows_total = c->total;
    return KL_OK;
}

int kl__train_pqs_open(const tr_dsrc *d, int part, tr_pqs **out, tr_dsinfo *info, kl_err *e) {
    *out = NULL;
    tr_pqs *st = calloc(1, sizeof *st);
    if (!st) return kl_err_set(e, KL_ENOMEM, "out of memory");
    st->d = d;
    st->part = part;
    memset(info, 0, sizeof *info);
    int rc = ds_open(d, &st->c, info, e);
    if (!rc) rc = pqs_units(st, info, e);
    if (!rc && !st->nprt)
        rc = kl_err_set(e, KL_EINVAL, "data.dataset %s: the %s split has no rows", d->path,
                        part == TR_PART_VAL        ? "val"
                            : part == TR_PART_TEST ? "test"
                                                   : "train");
    if (rc) {
        kl__train_pqs_close(st);
        kl__train_dsinfo_free(info);
        return rc;
    }
    *out = st;
    return KL_OK;
}

void kl__train_pqs_close(tr_pqs *st) {
    if (!st) return;
    kl_pq_close(st->r);
    ds_close(&st->c);
    free(st->u);
    free(st);
}

int64_t kl__train_pqs_units(const tr_pqs *st) { return st->nu; }
int64_t kl__train_pqs_unit_rows(const tr_pqs *st, int64_t u) { return st->u[u].nprt; }
int64_t kl__train_pqs_rows(const tr_pqs *st) { return st->nprt; }
void kl__train_pqs_unit_name(const tr_pqs *st, int64_t u, char *buf, size_t n) {
    const pq_unit *un = &st->u[u];
    snprintf(buf, n, "%s: row group %zu (file rows %lld..%lld, dataset rows %lld..%lld)", st->c.files[un->fi], un->rg,
             (long long)un->f0, (long long)(un->f0 + un->rows - 1), (long long)un->g0,
             (long long)(un->g0 + un->rows - 1));
}
void kl__train_pqs_decoded(const tr_pqs *st, int64_t *rows, int64_t *units) {
    *rows = st->rows_decoded;
    *units = st->units_decoded;
}

int kl__train_pqs_read(tr_pqs *st, int64_t u, tr_array *X, tr_array *Y, int64_t *rowid, kl_err *e) {
    const pq_unit *un = &st->u[u];
    const char *file = st->c.files[un->fi];
    kl_column **cols = NULL;
    size_t got = 0, ns = st->c.nn;
    int label_int = 1, rc = KL_OK;
    memset(X, 0, sizeof *X);
    memset(Y, 0, sizeof *Y);
    if (!st->r || st->r_fi != un->fi) {
        kl_pq_close(st->r);
        st->r = NULL;
        if ((rc = kl_pq_open(file, &st->r, e)) || (rc = kl_pq_select(st->r, st->c.names, ns, e))) {
            kl_pq_close(st->r);
            st->r = NULL;
            return rc;
        }
        st->r_fi = un->fi;
    }
    if (!(cols = calloc(ns + 1, sizeof *cols))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    rc = kl_pq_read_row_group(st->r, un->rg, cols, &got, e);
    if (!rc && (int64_t)got != un->rows)
        rc = kl_err_set(e, KL_EPARSE, "%s: row group %zu: %zu rows decoded, the footer says %lld", file, un->rg, got,
                        (long long)un->rows);
    if (!rc) rc = cols_check(st->d, &st->c, file, cols, ns, &label_int, e);
    X->f = rc ? NULL : kl_mem_alloc_e((size_t)(un->nprt * st->c.F + 1) * sizeof(double), KL_TAG_DATASET, e);
    Y->f = rc ? NULL : kl_mem_alloc_e((size_t)(un->nprt + 1) * sizeof(double), KL_TAG_DATASET, e);
    if (!rc && (!X->f || !Y->f)) rc = KL_ENOMEM;
    ds_out o = {X->f, Y->f, NULL, rowid, 0, un->nprt, NULL};
    if (!rc) rc = take_rows(st->d, &st->c, st->part, file, cols, got, un->g0, un->f0, &o, e);
    if (!rc && o.n != un->nprt)
        rc = kl_err_set(e, KL_EPARSE, "%s: row group %zu: %lld rows of the part, %lld expected", file, un->rg,
                        (long long)o.n, (long long)un->nprt);
    cols_free(cols, ns);
    if (rc) {
        kl__train_array_free(X);
        kl__train_array_free(Y);
        return rc;
    }
    arrays_set(X, Y, o.n, st->c.F, label_int);
    st->rows_decoded += un->rows;
    st->units_decoded++;
    return KL_OK;
}

/* kl__train_dsrc_load of a source whose split is a per-row rule: row group by row
 * group, only those holding rows of the part (a contiguous split decodes its
 * own row groups only), holding the part's rows and one row group. */
static int load_by_units(const tr_dsrc *d, int part, tr_array *X, tr_array *Y, tr_dsinfo *info_out, kl_err *e) {
    tr_pqs *st;
    tr_dsinfo info;
    memset(X, 0, sizeof *X);
    memset(Y, 0, sizeof *Y);
    int rc = kl__train_pqs_open(d, part, &st, &info, e), label_int = 1;
    if (rc) return rc;
    int64_t F = st->c.F, n = 0;
    X->f = kl_mem_alloc_e((size_t)(st->nprt * F + 1) * sizeof(double), KL_TAG_DATASET, e);
    Y->f = kl_mem_alloc_e((size_t)(st->nprt + 1) * sizeof(double), KL_TAG_DATASET, e);
    if (!X->f || !Y->f) rc = KL_ENOMEM;
    for (int64_t u = 0; !rc && u < st->nu; u++) {
        tr_array ux, uy;
        if ((rc = kl__train_pqs_read(st, u, &ux, &uy, NULL, e))) break;
        memcpy(X->f + n * F, ux.f, (size_t)(ux.dims[0] * F) * sizeof(double));
        memcpy(Y->f + n, uy.f, (size_t)uy.dims[0] * sizeof(double));
        label_int &= uy.is_int;
        n += ux.dims[0];
        kl__train_array_free(&ux);
        kl__train_array_free(&uy);
    }
    kl__train_pqs_close(st);
    if (!rc) arrays_set(X, Y, n, F, label_int);
    if (rc) {
        kl__train_array_free(X);
        kl__train_array_free(Y);
        kl__train_dsinfo_free(&info);
    } else if (info_out) *info_out = info;
    else kl__train_dsinfo_free(&info);
    return rc;
}
