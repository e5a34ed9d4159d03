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

int kl__train_dsrc_load(const tr_dsrc *d, int part, tr_array *X, tr_array *Y, tr_dsinfo *info_out, kl_err *e) {
    char **files = NULL, *manifest = NULL;
    size_t nfiles = 0, nn = 0;
    const char **names = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    kl_pq_reader *r = NULL;
    tr_dsinfo info = {0};
    memset(X, 0, sizeof *X);
    memset(Y, 0, sizeof *Y);
    int rc = kl_dataset_resolve_verify(d->path, (kl_verify_mode)d->verify, &files, &nfiles, &manifest, e);
    if (rc) { kl_err_prefix(e, "data.dataset"); goto done; }
    if (!nfiles) { rc = kl_err_set(e, KL_ENOTFOUND, "data.dataset %s: no Parquet files", d->path); goto done; }
    /* schema from the first file; the total row count from every footer */
    int64_t total = 0;
    for (size_t fi = 0; fi < nfiles; fi++) {
        if ((rc = kl_pq_open(files[fi], &r, e))) goto done;
        if (fi == 0 && (rc = pick_features(d, r, files[fi], &info, e))) goto done;
        uint64_t fr = kl_pq_num_rows(r);
        if (fr > (uint64_t)(INT64_MAX / 16 - total)) { rc = kl_err_set(e, KL_ERANGE, "%s: %llu rows: the dataset's row count overflows", files[fi], (unsigned long long)fr); goto done; }
        total += (int64_t)fr;
        kl_pq_close(r);
        r = NULL;
    }
    if ((rc = identify(manifest, files, nfiles, &info, e))) goto done;
    int64_t F = info.nnames;
    if (F && total > (INT64_MAX / 16) / (F + 1)) { rc = kl_err_set(e, KL_ERANGE, "data.dataset %s: %lld rows x %lld features overflow", d->path, (long long)total, (long long)F); goto done; }
    names = calloc((size_t)F + 3, sizeof *names);
    if (!names) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int64_t i = 0; i < F; i++) names[nn++] = info.names[i];
    names[nn++] = d->label;
    size_t split_i = nn, ref_i = 0;
    if (d->split_col) names[nn++] = d->split_col;
    if (d->ref_col) {
        ref_i = nn;
        names[nn++] = d->ref_col;
        if (!(info.ref = kl_mem_alloc_e((size_t)(total + 1) * sizeof(double), KL_TAG_DATASET, e))) { rc = KL_ENOMEM; goto done; }
    }
    X->f = kl_mem_alloc_e((size_t)(total * F + 1) * sizeof(double), KL_TAG_DATASET, e);
    Y->f = kl_mem_alloc_e((size_t)(total + 1) * sizeof(double), KL_TAG_DATASET, e);
    if (!X->f || !Y->f) { rc = KL_ENOMEM; goto done; }
    int64_t g = 0, n = 0;
    int label_int = 1;
    for (size_t fi = 0; fi < nfiles; fi++) {
        if ((rc = kl_pq_open(files[fi], &r, e))) goto done;
        for (size_t i = 0; i < nn; i++)
            if (kl_pq_find_column(r, names[i]) < 0) { rc = column_list_error(r, files[fi], i < (size_t)F ? "feature" : "label/split", names[i], e); goto done; }
        kl_pq_close(r);
        r = NULL;
        if ((rc = kl_pq_read_file(files[fi], names, nn, &cols, &ncols, e))) goto done;
        const kl_column *lc = cols[F], *sc = d->split_col ? cols[split_i] : NULL, *rcol = d->ref_col ? cols[ref_i] : NULL;
        if (!is_numeric(lc->type)) { rc = kl_err_set(e, KL_ETYPE, "%s: label column '%s' is %s, not numeric", files[fi], d->label, kl_col_type_name(lc->type)); goto done; }
        for (int64_t j = 0; j < F; j++)
            if (!is_numeric(cols[j]->type)) { rc = kl_err_set(e, KL_ETYPE, "%s: feature column '%s' is %s, not numeric", files[fi], names[j], kl_col_type_name(cols[j]->type)); goto done; }
        if (lc->type == KL_COL_FLOAT32 || lc->type == KL_COL_FLOAT64) label_int = 0;
        size_t len = lc->len;
        /* X, Y and ref hold total rows: never write past them, whatever the
         * decoder returned (a file changed between the two passes) */
        if ((uint64_t)len > (uint64_t)(total - g)) {
            rc = kl_err_set(e, KL_EPARSE, "%s: %zu rows decoded, beyond the %lld the footers announced", files[fi], len, (long long)total);
            goto done;
        }
        for (size_t j = 0; j < ncols; j++)
            if (cols[j]->len != len) { rc = kl_err_set(e, KL_EPARSE, "%s: column '%s' has %zu rows, the label %zu", files[fi], names[j], cols[j]->len, len); goto done; }
        for (size_t i = 0; i < len; i++, g++) {
            int p = row_part(d, sc, i, g, total);
            if (p >= 0) info.rows_part[p]++;
            if (part != TR_PART_ALL && p != part) continue;
            if (kl_column_is_null(lc, i)) { rc = kl_err_set(e, KL_EINVAL, "%s: row %zu (dataset row %lld): label column '%s' is null", files[fi], i, (long long)g, d->label); goto done; }
            Y->f[n] = kl_column_get_f64(lc, i);
            if (rcol) info.ref[n] = kl_column_is_null(rcol, i) ? NAN : kl_column_get_f64(rcol, i);
            for (int64_t j = 0; j < F; j++) {
                const kl_column *c = cols[j];
                if (kl_column_is_null(c, i)) { rc = kl_err_set(e, KL_EINVAL, "%s: row %zu (dataset row %lld): feature column '%s' is null (fill it in the feature spec or exclude the column)", files[fi], i, (long long)g, names[j]); goto done; }
                double v = kl_column_get_f64(c, i);
                if (!isfinite(v)) { rc = kl_err_set(e, KL_EINVAL, "%s: row %zu (dataset row %lld): feature column '%s' is %s", files[fi], i, (long long)g, names[j], isnan(v) ? "NaN" : "infinite"); goto done; }
                X->f[n * F + j] = v;
            }
            n++;
        }
        for (size_t i = 0; i < ncols; i++) kl_column_free(cols[i]);
        free(cols);
        cols = NULL;
        ncols = 0;
    }
    info.rows_total = total;
    X->rank = 2; X->dims[0] = n; X->dims[1] = F; X->n = n * F; X->is_int = 0;
    Y->rank = 1; Y->dims[0] = n; Y->n = n; Y->is_int = label_int;
    if (n == 0) { rc = kl_err_set(e, KL_EINVAL, "data.dataset %s: the %s split has no rows", d->path, part == TR_PART_VAL ? "val" : part == TR_PART_TEST ? "test" : "train"); goto done; }
done:
    kl_pq_close(r);
    for (size_t i = 0; i < ncols; i++) kl_column_free(cols[i]);
    free(cols);
    free(names);
    for (size_t i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(manifest);
    if (rc) { kl__train_array_free(X); kl__train_array_free(Y); kl__train_dsinfo_free(&info); }
    else if (info_out) *info_out = info;
    else kl__train_dsinfo_free(&info);
    return rc;
}
