/* Feature datasets: reading the input columns of a feature set from a
 * dataset (folder, version folder, .parquet file, or clickgen:ROWS[:SEED])
 * through the Parquet reader, and writing the output of apply as a .parquet
 * file or a features dataset folder (features.parquet + features.json +
 * manifest.json). Shared by `keel features` and `keel pipeline`. */
#include <stdlib.h>
#include <string.h>

#include "keel/clickgen.h"
#include "keel/data.h"
#include "keel/feature.h"
#include "keel/parquet.h"

void kl_features_free_columns(kl_column **c, size_t n) {
    for (size_t i = 0; c && i < n; i++) kl_column_free(c[i]);
    free(c);
}

static int append_col(kl_column *dst, const kl_column *src, kl_err *e) {
    int rc = KL_OK;
    for (size_t r = 0; r < src->len && !rc; r++) {
        if (kl_column_is_null(src, r)) rc = kl_column_push_null(dst);
        else if (src->type == KL_COL_FLOAT32 || src->type == KL_COL_FLOAT64) rc = kl_column_push_f64(dst, kl_column_get_f64(src, r));
        else if (src->type == KL_COL_STRING || src->type == KL_COL_BINARY) { size_t n; const char *s = kl_column_get_str(src, r, &n); rc = kl_column_push_str(dst, s, n); }
        else rc = kl_column_push_i64(dst, kl_column_get_i64(src, r));
    }
    return rc ? kl_err_set(e, rc, "column %s: appending rows", dst->name) : KL_OK;
}

int kl_features_read_data(const char *path, const kl_features *f, int with_label, kl_column ***cols, size_t *ncols, kl_err *e) {
    return kl_features_read_data_verify(path, f, with_label, KL_VERIFY_SHA256, cols, ncols, e);
}

int kl_features_read_data_verify(const char *path, const kl_features *f, int with_label, int verify, kl_column ***cols,
                                 size_t *ncols, kl_err *e) {
    *cols = NULL;
    *ncols = 0;
    if (!strncmp(path, "clickgen:", 9)) {
        uint64_t rows = 0, seed = 1;
        char *end;
        rows = strtoull(path + 9, &end, 10);
        if (*end == ':') seed = strtoull(end + 1, &end, 10);
        if (*end || !rows) return kl_err_set(e, KL_EINVAL, "--data %s: expected clickgen:ROWS[:SEED]", path);
        kl_column **c = calloc(5, sizeof *c);
        if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
        int rc = kl_clickgen_columns(rows, seed, c, e);
        if (rc) { free(c); return rc; }
        *cols = c;
        *ncols = 5;
        return KL_OK;
    }
    char **files = NULL, *manifest = NULL;
    size_t nfiles = 0;
    int rc = kl_dataset_resolve_verify(path, (kl_verify_mode)verify, &files, &nfiles, &manifest, e);
    if (rc) return rc;
    size_t nn = kl_features_num_inputs(f);
    const char **names = calloc(nn + 2, sizeof *names);
    kl_column **all = NULL;
    size_t nall = 0;
    if (!names) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < nn; i++) names[i] = kl_features_input_name(f, i);
    for (size_t fi = 0; fi < nfiles; fi++) {
        size_t want = nn;
        if (with_label && kl_features_label(f)) {
            kl_pq_reader *r = NULL;
            if ((rc = kl_pq_open(files[fi], &r, e))) goto done;
            int has = kl_pq_find_column(r, kl_features_label(f)) >= 0;
            kl_pq_close(r);
            if (has) names[want++] = kl_features_label(f);
        }
        /* unknown columns: name them clearly before the reader does */
        kl_pq_reader *r = NULL;
        if ((rc = kl_pq_open(files[fi], &r, e))) goto done;
        for (size_t i = 0; i < want; i++) {
            if (kl_pq_find_column(r, names[i]) < 0) {
                kl_buf b;
                kl_buf_init(&b);
                for (size_t j = 0; j < kl_pq_num_columns(r); j++) kl_buf_printf(&b, "%s%s", j ? ", " : "", kl_pq_column(r, j)->name);
                rc = kl_err_set(e, KL_ENOTFOUND, "%s: input column '%s' not found (columns: %s)", files[fi], names[i], b.data ? b.data : "");
                kl_buf_free(&b);
                kl_pq_close(r);
                goto done;
            }
        }
        kl_pq_close(r);
        kl_column **c = NULL;
        size_t nc = 0;
        if ((rc = kl_pq_read_file(files[fi], names, want, &c, &nc, e))) goto done;
        if (!all) { all = c; nall = nc; continue; }
        for (size_t i = 0; i < nc && i < nall && !rc; i++) rc = append_col(all[i], c[i], e);
        kl_features_free_columns(c, nc);
        if (rc) goto done;
    }
    if (!nfiles) { rc = kl_err_set(e, KL_ENOTFOUND, "%s: no Parquet files", path); goto done; }
    *cols = all;
    *ncols = nall;
    all = NULL;
done:
    kl_features_free_columns(all, nall);
    free(names);
    for (size_t i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(manifest);
    return rc;
}

/* manifest.json of an output folder, in the style of dataset versions
 * (`keel data validate DIR` checks it): the files with sha256 and rows, the
 * feature_hash and where the rows came from (kl_dataset_manifest_write). */
static int write_manifest(const char *dir, const kl_features *f, const char *data, uint64_t rows, kl_err *e) {
    char p[4200], hj[65];
    kl_dataset_file part;
    int rc = kl_dataset_file_stat(dir, "features.parquet", rows, &part, e);
    if (rc) return rc;
    snprintf(p, sizeof p, "%s/features.json", dir);
    if ((rc = kl_sha256_file_hex(p, hj, e))) {
        free(part.path);
        return rc;
    }
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_printf(&b, "\"feature_hash\": \"%s\",\n  \"source\": ", kl_features_hash(f));
    kl_buf_json_str(&b, data);
    const char *const *names;
    size_t nc = kl_features_label_classes(f, &names);
    if (nc) { /* what the label's int32 index k means: for training's meta.json and serving's labels */
        kl_buf_puts(&b, ",\n  \"label_classes\": [");
        for (size_t i = 0; i < nc; i++) {
            if (i) kl_buf_puts(&b, ", ");
            kl_buf_json_str(&b, names[i]);
        }
        kl_buf_puts(&b, "]");
    }
    kl_buf_printf(&b, ",\n  \"features_json\": {\"path\": \"features.json\", \"sha256\": \"%s\"}", hj);
    rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory")
                  : kl_dataset_manifest_write(dir, "keel-features-dataset-1", b.data, &part, 1, e);
    kl_buf_free(&b);
    free(part.path);
    return rc;
}

int kl_features_write(const kl_features *f, kl_column *const *cols, size_t ncols, const char *out, const char *source,
                      const void *pq_write_opts, kl_err *e) {
    const kl_pq_write_opts *wo = pq_write_opts;
    kl_pq_write_opts def;
    if (!wo) { kl_pq_write_opts_default(&def); wo = &def; }
    size_t n = strlen(out);
    int single = n >= 8 && !strcmp(out + n - 8, ".parquet");
    kl_buf b;
    kl_buf_init(&b);
    kl_pq_writer *w = NULL;
    int rc = KL_OK;
    if (single) kl_buf_puts(&b, out);
    else {
        if ((rc = kl_mkdir_p(out, e))) goto done;
        kl_buf_printf(&b, "%s/features.json", out);
        if ((rc = kl_features_save(f, b.data, e))) goto done;
        kl_buf_reset(&b);
        kl_buf_printf(&b, "%s/features.parquet", out);
    }
    if (b.failed) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    if ((rc = kl_pq_writer_open(b.data, cols, ncols, wo, &w, e)) || (rc = kl_pq_writer_set_kv(w, "keel.feature_hash", kl_features_hash(f), e)) ||
        (rc = kl_pq_writer_write(w, cols, ncols, e)))
        goto done;
    rc = kl_pq_writer_close(w, NULL, e);
    w = NULL;
    if (!rc && !single) rc = write_manifest(out, f, source, ncols ? cols[0]->len : 0, e);
done:
    kl_pq_writer_abort(w);
    kl_buf_free(&b);
    return rc;
}

int kl_features_bind_dataset(kl_features *f, const char *path, kl_err *e) {
    if (!strncmp(path, "clickgen:", 9)) return kl_features_bind_schema(f, NULL, e);
    kl_schema *s = NULL;
    int rc = kl_dataset_schema(path, &s, e);
    if (!rc) rc = kl_features_bind_schema(f, s, e);
    kl_schema_free(s);
    return rc;
}
