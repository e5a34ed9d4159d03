/* The pipeline's stages, each a call into the library: ingest (kl_ingest),
 * validate (manifest, file sha256 and row counts, reject and null ratios),
 * features (fit on the first rows, apply, the online store for serving),
 * train (kl_train_run on the features dataset), evaluate (kl_train_evaluate
 * on the test split, with the generator's Bayes-optimal AUC when the click
 * log's true probability is attached), export (a model repository version
 * for keel serve), register (model registry + alias) and serve. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keel/clickgen.h"
#include "keel/data.h"
#include "keel/feature.h"
#include "keel/parquet.h"
#include "keel/profile.h"
#include "keel/serve.h"
#include "keel/train.h"
#include "pipeline/pipeline_int.h"

#ifndef KEEL_VERSION
#define KEEL_VERSION "unknown"
#endif

#define REF_COLUMN "__ref_clickgen_p"

static const char *cfg_str(const pl_ctx *c, int s, const char *key, const char *def) {
    const char *v = kl_node_scalar(kl_node_get(c->cfg[s], key));
    return v ? v : def;
}

static double cfg_num(const pl_ctx *c, int s, const char *key, double def) {
    double v;
    kl_err e = {0};
    const kl_node *n = kl_node_get(c->cfg[s], key);
    return n && !kl_node_double(n, &v, &e) ? v : def;
}

static int check_keys(const pl_ctx *c, int s, const char *const *k, size_t n, kl_err *e) {
    if (kl_node_kind_of(c->cfg[s]) != KL_NODE_MAP) return kl_node_error(c->cfg[s], e, KL_EINVAL, "a stage's config is a map");
    return kl_spec_check_keys(c->cfg[s], k, n, e);
}

/* Adds "file PATH SHA" to the cache key. */
static int key_file(pl_ctx *c, kl_buf *key, const char *rel, kl_err *e) {
    char *p = kl__pl_path(c, rel), hex[65];
    int rc = p ? kl_sha256_file_hex(p, hex, e) : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (!rc) kl_buf_printf(key, "\nfile %s %s", p, hex);
    free(p);
    return rc;
}

static const char *const ingest_keys[] = {"source", "schema", "max_reject_ratio", "partition_by", "codec",
                                          "max_decompressed", "max_expansion"};
static const char *const validate_keys[] = {"max_reject_ratio", "max_null_ratio", "min_rows"};
static const char *const features_keys[] = {"spec", "train_fraction", "reference", "store"};
static const char *const train_keys[] = {"spec"};
static const char *const eval_keys[] = {"split", "min_auc", "max_gap_to_reference"};
static const char *const export_keys[] = {"model"};
static const char *const register_keys[] = {"model", "alias"};
static const char *const serve_keys[] = {"host", "port", "workers"};

int kl__pl_stage_check_keys(const pl_ctx *c, int s, kl_err *e) {
    static const char *const *keys[KL_STAGE_COUNT] = {ingest_keys, validate_keys, features_keys, train_keys, eval_keys, export_keys, register_keys, serve_keys};
    static const size_t nkeys[KL_STAGE_COUNT] = {KL_ARRAY_LEN(ingest_keys), KL_ARRAY_LEN(validate_keys), KL_ARRAY_LEN(features_keys),
                                                 KL_ARRAY_LEN(train_keys), KL_ARRAY_LEN(eval_keys), KL_ARRAY_LEN(export_keys),
                                                 KL_ARRAY_LEN(register_keys), KL_ARRAY_LEN(serve_keys)};
    int rc = check_keys(c, s, keys[s], nkeys[s], e);
    /* features.store names a shared online store: a URL (a file would be features.db's job) */
    const kl_node *st = s == KL_STAGE_FEATURES && !rc ? kl_node_get(c->cfg[s], "store") : NULL;
    const char *url = NULL;
    if (st && (rc = kl_node_str(st, &url, e))) return rc;
    if (st && !kl_fstore_is_url(url))
        return kl_node_error(st, e, KL_EINVAL, "store: expected redis://HOST:PORT/DB (a shared online store), got '%s'",
                             url ? url : "");
    return rc;
}

int kl__pl_stage_inputs(pl_ctx *c, int s, kl_buf *key, kl_err *e) {
    int rc = kl__pl_stage_check_keys(c, s, e);
    if (rc) return rc;
    if (s == KL_STAGE_INGEST) {
        const kl_node *src = kl_node_get(c->cfg[s], "source");
        if (!src) return kl_node_error(c->cfg[s], e, KL_EINVAL, "ingest.source: a file (or a list of files / URLs) is required");
        size_t n = kl_node_kind_of(src) == KL_NODE_SEQ ? kl_node_len(src) : 1;
        for (size_t i = 0; i < n && !rc; i++) {
            const char *v = kl_node_scalar(kl_node_kind_of(src) == KL_NODE_SEQ ? kl_node_at(src, i) : src);
            if (!v) return kl_node_error(src, e, KL_EINVAL, "ingest.source: file names");
            if (strstr(v, "://")) kl_buf_printf(key, "\nurl %s", v);
            else rc = key_file(c, key, v, e);
        }
        if (!rc && !kl_node_get(c->cfg[s], "schema")) return kl_node_error(c->cfg[s], e, KL_EINVAL, "ingest.schema: the schema file is required");
        if (!rc) rc = key_file(c, key, cfg_str(c, s, "schema", ""), e);
    } else if (s == KL_STAGE_FEATURES || s == KL_STAGE_TRAIN) {
        const char *sp = cfg_str(c, s, "spec", NULL);
        if (!sp) return kl_node_error(c->cfg[s], e, KL_EINVAL, "%s.spec: the spec file is required", kl_pipeline_stage_name(s));
        rc = key_file(c, key, sp, e);
    }
    return rc;
}

static void outf(const pl_ctx *c, char *buf, size_t n, const char *rel) { snprintf(buf, n, "%s/%s", c->out, rel); }

int kl__pl_stage_outputs_present(const pl_ctx *c, int s) {
    char p[4300];
    switch (s) {
    case KL_STAGE_INGEST: return kl_path_exists(kl__pl_out_str(c, s, "version_dir"));
    case KL_STAGE_VALIDATE: outf(c, p, sizeof p, "validate.json"); return kl_path_exists(p);
    case KL_STAGE_FEATURES: outf(c, p, sizeof p, "features/manifest.json"); return kl_path_exists(p);
    case KL_STAGE_TRAIN: outf(c, p, sizeof p, "model/model.onnx"); return kl_path_exists(p);
    case KL_STAGE_EVALUATE: outf(c, p, sizeof p, "eval.json"); return kl_path_exists(p);
    case KL_STAGE_EXPORT: snprintf(p, sizeof p, "%s/model.onnx", kl__pl_out_str(c, s, "dir")); return kl_path_exists(p);
    case KL_STAGE_REGISTER: { /* the version is still in the store */
        char *name = NULL;
        int64_t v = 0;
        kl_err e = {0};
        int ok = c->t && !kl_registry_parse_ref(c->t, kl__pl_out_str(c, s, "id"), &name, &v, &e);
        free(name);
        return ok;
    }
    default: return 0;
    }
}

static void set_id_from_file(cJSON *out, const char *path) {
    char hex[65];
    kl_err e = {0};
    if (!kl_sha256_file_hex(path, hex, &e)) cJSON_AddStringToObject(out, "id", hex);
}

/* ================================================================ ingest */

static int st_ingest(pl_ctx *c, cJSON *out, kl_err *e) {
    const int s = KL_STAGE_INGEST;
    const kl_node *src = kl_node_get(c->cfg[s], "source");
    size_t n = kl_node_kind_of(src) == KL_NODE_SEQ ? kl_node_len(src) : 1;
    char **paths = calloc(n + 1, sizeof *paths), *schema = kl__pl_path(c, cfg_str(c, s, "schema", "")), dsdir[4300];
    int rc = KL_OK;
    for (size_t i = 0; i < n; i++) {
        const char *v = kl_node_scalar(kl_node_kind_of(src) == KL_NODE_SEQ ? kl_node_at(src, i) : src);
        paths[i] = strstr(v, "://") ? strdup(v) : kl__pl_path(c, v);
    }
    outf(c, dsdir, sizeof dsdir, "dataset");
    kl_ingest_opts o;
    kl_ingest_opts_default(&o);
    o.sources = (const char *const *)paths;
    o.n_sources = n;
    o.schema_path = schema;
    o.out_dir = dsdir;
    o.max_reject_ratio = cfg_num(c, s, "max_reject_ratio", 0);
    o.partition_by = cfg_str(c, s, "partition_by", NULL);
    o.codec = cfg_str(c, s, "codec", NULL);
    o.max_expansion = cfg_num(c, s, "max_expansion", KL_INGEST_MAX_EXPANSION);
    const char *md = cfg_str(c, s, "max_decompressed", NULL);
    if (md && (kl_mem_parse_size(md, &o.max_decompressed_bytes, e) || !o.max_decompressed_bytes)) {
        rc = kl_err_set(e, KL_EINVAL, "ingest.max_decompressed: '%s' is not a size (e.g. 64G)", md);
        goto done;
    }
    o.keel_version = KEEL_VERSION;
    kl_ingest_result r;
    memset(&r, 0, sizeof r);
    rc = kl_ingest(&o, &r, e);
    if (rc) {
        if (r.summary[0]) kl_err_set(e, rc, "%s\n%s", kl_err_what(e), r.summary);
        goto done;
    }
    cJSON_AddStringToObject(out, "id", r.version_id);
    cJSON_AddStringToObject(out, "version_dir", r.version_dir);
    cJSON_AddStringToObject(out, "dataset_dir", dsdir);
    cJSON_AddNumberToObject(out, "rows", (double)r.rows_accepted);
    cJSON_AddNumberToObject(out, "rejected", (double)r.rows_rejected);
    char note[256];
    snprintf(note, sizeof note, "dataset version %.12s: %lld rows, %lld rejected%s", r.version_id, (long long)r.rows_accepted,
             (long long)r.rows_rejected, r.reused ? " (already published)" : "");
    cJSON_AddStringToObject(out, "note", note);
done:
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
    free(schema);
    return rc;
}

/* ================================================================ validate */

static int st_validate(pl_ctx *c, cJSON *out, kl_err *e) {
    const int s = KL_STAGE_VALIDATE;
    const char *vdir = kl__pl_out_str(c, KL_STAGE_INGEST, "version_dir");
    char p[4300];
    snprintf(p, sizeof p, "%s/manifest.json", vdir);
    void *mj = NULL;
    int rc = kl_json_load_file_opts(p, KL_JSON_KEEP_NUL, &mj, e); /* a vocabulary value may hold \u0000 */
    if (rc) return rc;
    cJSON *m = mj, *rep = cJSON_CreateObject(), *probs = cJSON_AddArrayToObject(rep, "problems");
    kl_buf pb;
    kl_buf_init(&pb);
    cJSON *rows = cJSON_GetObjectItem(m, "rows");
    double acc = cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "accepted")), rej = cJSON_GetNumberValue(cJSON_GetObjectItem(rows, "rejected"));
    double rd = acc + rej;
    /* every file: sha256, size and row count as the manifest says (the audit of keel data validate) */
    int naudit = 0;
    if ((rc = kl_dataset_audit(vdir, &pb, &naudit, NULL, e))) {
        cJSON_Delete(rep);
        cJSON_Delete(m);
        return rc;
    }
    double max_rej = cfg_num(c, s, "max_reject_ratio", 0.01), max_null = cfg_num(c, s, "max_null_ratio", 1.0), min_rows = cfg_num(c, s, "min_rows", 1);
    if (rd > 0 && rej / rd > max_rej) kl_buf_printf(&pb, "%.0f of %.0f rows rejected (%.2f%%), above max_reject_ratio %g\n", rej, rd, 100 * rej / rd, max_rej);
    if (acc < min_rows) kl_buf_printf(&pb, "%.0f rows, fewer than min_rows %.0f\n", acc, min_rows);
    cJSON *col;
    cJSON_ArrayForEach(col, cJSON_GetObjectItem(m, "columns")) {
        double nulls = cJSON_GetNumberValue(cJSON_GetObjectItem(col, "nulls")), cr = cJSON_GetNumberValue(cJSON_GetObjectItem(col, "rows"));
        if (cr > 0 && nulls / cr > max_null)
            kl_buf_printf(&pb, "column %s: %.2f%% nulls, above max_null_ratio %g\n", cJSON_GetStringValue(cJSON_GetObjectItem(col, "name")), 100 * nulls / cr, max_null);
    }
    /* the quality summary for the report */
    cJSON_AddStringToObject(rep, "version_id", kl__pl_out_str(c, KL_STAGE_INGEST, "id"));
    cJSON_AddItemToObject(rep, "rows", cJSON_Duplicate(rows, 1));
    cJSON_AddItemToObject(rep, "rejects", cJSON_Duplicate(cJSON_GetObjectItem(m, "rejects"), 1));
    cJSON_AddItemToObject(rep, "columns", cJSON_Duplicate(cJSON_GetObjectItem(m, "columns"), 1));
    cJSON_AddItemToObject(rep, "sources", cJSON_Duplicate(cJSON_GetObjectItem(m, "sources"), 1));
    if (pb.data)
        for (char *line = strtok(pb.data, "\n"); line; line = strtok(NULL, "\n")) cJSON_AddItemToArray(probs, cJSON_CreateString(line));
    int nprob = cJSON_GetArraySize(probs);
    cJSON_AddBoolToObject(rep, "ok", nprob == 0);
    outf(c, p, sizeof p, "validate.json");
    rc = kl_json_write_file(p, rep, 1, e);
    if (!rc && nprob) {
        kl_buf eb;
        kl_buf_init(&eb);
        for (int i = 0; i < nprob; i++) kl_buf_printf(&eb, "%s%s", i ? "; " : "", cJSON_GetArrayItem(probs, i)->valuestring);
        rc = kl_err_set(e, KL_EINVAL, "dataset %.12s failed validation: %s", kl__pl_out_str(c, KL_STAGE_INGEST, "id"),
                        eb.data ? eb.data : "");
        kl_buf_free(&eb);
    }
    if (!rc) {
        set_id_from_file(out, p);
        char note[200];
        snprintf(note, sizeof note, "%.0f rows, %.0f rejected, %d columns checked, files match the manifest", acc, rej,
                 cJSON_GetArraySize(cJSON_GetObjectItem(m, "columns")));
        cJSON_AddStringToObject(out, "note", note);
    }
    kl_buf_free(&pb);
    cJSON_Delete(rep);
    cJSON_Delete(m);
    return rc;
}

/* ================================================================ features */

/* The click log's true click probability of every row of the dataset (the
 * generator's formula on the raw columns), for the Bayes-optimal AUC. */
static int clickgen_p(const char *vdir, int verify, kl_column **out, kl_err *e) {
    char **files = NULL;
    size_t nf = 0;
    *out = NULL;
    int rc = kl_dataset_resolve_verify(vdir, (kl_verify_mode)verify, &files, &nf, NULL, e);
    if (rc) return rc;
    kl_column *p = NULL;
    if ((rc = kl_column_new(REF_COLUMN, KL_COL_FLOAT64, 0, 0, &p, e))) goto done;
    static const char *names[] = {"category", "item_price", "ts"};
    for (size_t fi = 0; fi < nf && !rc; fi++) {
        kl_column **cols = NULL;
        size_t nc = 0;
        if ((rc = kl_pq_read_file(files[fi], names, 3, &cols, &nc, e))) { kl_err_prefix(e, "reference clickgen needs the click log's columns"); break; }
        for (size_t i = 0; i < cols[0]->len && !rc; i++) {
            size_t n;
            const char *cat = kl_column_get_str(cols[0], i, &n);
            int ci = -1;
            for (int k = 0; k < KL_CLICKGEN_NCAT; k++)
                if (strlen(kl_clickgen_categories[k]) == n && !memcmp(kl_clickgen_categories[k], cat, n)) ci = k;
            if (ci < 0) { rc = kl_err_set(e, KL_EINVAL, "%s: row %zu: category '%.*s' is not one of the click log's", files[fi], i, (int)n, cat); break; }
            int pn = kl_column_is_null(cols[1], i);
            double pr = kl_clickgen_prob(ci, pn ? 0 : kl_column_get_f64(cols[1], i), pn, kl_column_get_i64(cols[2], i));
            if (kl_column_push_f64(p, pr)) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        kl_features_free_columns(cols, nc);
    }
    if (!rc) { *out = p; p = NULL; }
done:
    kl_column_free(p);
    for (size_t i = 0; i < nf; i++) free(files[i]);
    free(files);
    return rc;
}

static int st_features(pl_ctx *c, cJSON *out, kl_err *e) {
    const int s = KL_STAGE_FEATURES;
    const char *vdir = kl__pl_out_str(c, KL_STAGE_INGEST, "version_dir");
    char *spec = kl__pl_path(c, cfg_str(c, s, "spec", "")), dir[4300], p[4400], src[4400];
    kl_features *f = NULL;
    kl_column **cols = NULL, **res = NULL;
    size_t ncols = 0, nres = 0, *lens = NULL;
    kl_features_counts cnt = {0};
    kl_fstore *store = NULL;
    double frac = cfg_num(c, s, "train_fraction", 1.0);
    const char *ref = cfg_str(c, s, "reference", "");
    const char *url = cfg_str(c, s, "store", ""); /* a shared online store (redis://) instead of features.db */
    int rc = KL_OK;
    if (!(frac > 0 && frac <= 1)) { rc = kl_node_error(kl_node_get(c->cfg[s], "train_fraction"), e, KL_EINVAL, "train_fraction: in (0, 1]"); goto done; }
    if (*ref && strcmp(ref, "clickgen")) { rc = kl_node_error(kl_node_get(c->cfg[s], "reference"), e, KL_EINVAL, "reference: clickgen (the click log's true probability) or absent"); goto done; }
    if ((rc = kl_features_spec_load(spec, &f, e)) || (rc = kl_features_bind_dataset(f, vdir, e)) ||
        (rc = kl_features_read_data_verify(vdir, f, 1, c->o->verify, &cols, &ncols, e)))
        goto done;
    /* fit on the first rows only (the training part of a time-ordered log) */
    size_t rows = ncols ? cols[0]->len : 0, keep = (size_t)ceil(frac * (double)rows);
    if (!(lens = calloc(ncols + 1, sizeof *lens))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (size_t i = 0; i < ncols; i++) { lens[i] = cols[i]->len; if (cols[i]->len > keep) cols[i]->len = keep; }
    rc = kl_features_fit(f, cols, ncols, e);
    /* the reference profile of the fit rows, next to features.json (docs/monitoring.md) */
    outf(c, dir, sizeof dir, "features");
    snprintf(p, sizeof p, "%s.profile.json", dir);
    if (!rc) rc = kl_profile_write(f, cols, ncols, p, e);
    for (size_t i = 0; i < ncols; i++) cols[i]->len = lens[i];
    if (rc || (rc = kl_features_apply(f, cols, ncols, NULL, &res, &nres, &cnt, e))) goto done;
    if (*ref) {
        kl_column **r2 = realloc(res, (nres + 1) * sizeof *r2);
        if (!r2) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        res = r2;
        res[nres] = NULL;
        if ((rc = clickgen_p(vdir, c->o->verify, &res[nres], e))) goto done;
        nres++;
        if (res[nres - 1]->len != rows) { rc = kl_err_set(e, KL_EINTERNAL, "reference column: %zu rows, features %zu", res[nres - 1]->len, rows); goto done; }
    }
    outf(c, dir, sizeof dir, "features");
    if ((rc = kl_rm_rf(dir, e))) goto done;
    snprintf(src, sizeof src, "%s@%s", kl__pl_out_str(c, KL_STAGE_INGEST, "dataset_dir"),
             kl__pl_out_str(c, KL_STAGE_INGEST, "id"));
    if ((rc = kl_features_write(f, res, nres, dir, src, NULL, e))) goto done;
    snprintf(p, sizeof p, "%s.profile.json", dir);
    snprintf(src, sizeof src, "%s/profile.json", dir);
    if (rename(p, src)) { rc = kl_err_set(e, -errno, "%s: %s", p, strerror(errno)); goto done; }
    /* the online store of the window features, for keel serve's :predict */
    snprintf(p, sizeof p, "%s/features.db", dir);
    if ((rc = kl_fstore_open(f, *url ? url : p, &store, e)) ||
        (rc = kl_features_materialize(f, cols, ncols, store, e)) || (rc = kl_fstore_flush(store, e)))
        goto done;
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    set_id_from_file(out, p);
    cJSON_AddStringToObject(out, "feature_hash", kl_features_hash(f));
    cJSON_AddStringToObject(out, "dir", dir);
    cJSON_AddNumberToObject(out, "rows", (double)rows);
    cJSON_AddNumberToObject(out, "fit_rows", (double)keep);
    cJSON_AddNumberToObject(out, "features", (double)kl_features_count(f));
    cJSON_AddNumberToObject(out, "width", (double)kl_features_width(f));
    cJSON_AddNumberToObject(out, "unknown", (double)cnt.unknown);
    cJSON_AddNumberToObject(out, "null_filled", (double)cnt.null_filled);
    cJSON_AddNumberToObject(out, "div_zero", (double)cnt.div_zero);
    cJSON_AddNumberToObject(out, "clamped", (double)cnt.clamped);
    cJSON_AddNumberToObject(out, "empty_window", (double)cnt.empty_window);
    cJSON_AddNumberToObject(out, "store_entities", (double)kl_fstore_entities(store));
    if (*url) cJSON_AddStringToObject(out, "store", url);
    if (*ref) cJSON_AddStringToObject(out, "reference_column", REF_COLUMN);
    char note[256];
    snprintf(note, sizeof note, "feature hash %.12s: %zu features -> %zu outputs, fitted on %zu of %zu rows", kl_features_hash(f),
             kl_features_count(f), kl_features_width(f), keep, rows);
    cJSON_AddStringToObject(out, "note", note);
done:
    kl_fstore_free(store);
    free(lens);
    kl_features_free_columns(res, nres);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    free(spec);
    return rc;
}

/* ================================================================ train, evaluate */

static int st_train(pl_ctx *c, cJSON *out, int64_t parent, kl_err *e) {
    char *spec = kl__pl_path(c, cfg_str(c, KL_STAGE_TRAIN, "spec", "")), dir[4300], set[4400], p[4400];
    outf(c, dir, sizeof dir, "model");
    snprintf(set, sizeof set, "data.dataset=%s", kl__pl_out_str(c, KL_STAGE_FEATURES, "dir"));
    const char *sets[1] = {set};
    kl_train_opts o = {0};
    int64_t run_id = 0;
    o.out_dir = dir;
    o.quiet = c->o->quiet || !isatty(fileno(c->log));
    o.report = c->log;
    o.sets = sets;
    o.nsets = 1;
    o.tracking = kl_track_dir(c->t);
    o.tracking_how = "the pipeline's store";
    o.experiment = "pipeline";
    o.run_name = "train";
    o.parent_run = parent;
    o.run_id_out = &run_id;
    o.verify = c->o->verify;
    int rc = kl_rm_rf(dir, e);
    if (!rc) rc = kl_train_run(spec, &o, e);
    free(spec);
    if (rc) return rc;
    snprintf(p, sizeof p, "%s/meta.json", dir);
    void *mj = NULL;
    if ((rc = kl_json_load_file(p, &mj, e))) return rc;
    set_id_from_file(out, p);
    cJSON *fm = cJSON_GetObjectItem((cJSON *)mj, "final_metrics");
    cJSON_AddStringToObject(out, "dir", dir);
    cJSON_AddNumberToObject(out, "run_id", (double)run_id);
    double vl = cJSON_GetNumberValue(cJSON_GetObjectItem(fm, "val_loss")), va = cJSON_GetNumberValue(cJSON_GetObjectItem(fm, "val_accuracy"));
    if (isfinite(vl)) cJSON_AddNumberToObject(out, "val_loss", vl);
    if (isfinite(va)) cJSON_AddNumberToObject(out, "val_accuracy", va);
    double steps = cJSON_GetNumberValue(cJSON_GetObjectItem((cJSON *)mj, "steps"));
    char note[200];
    snprintf(note, sizeof note, "run %lld: %.0f steps, validation loss %.4f", (long long)run_id, steps, vl);
    cJSON_AddStringToObject(out, "note", note);
    cJSON_Delete(mj);
    return KL_OK;
}

static int st_evaluate(pl_ctx *c, cJSON *out, kl_err *e) {
    const int s = KL_STAGE_EVALUATE;
    char p[4300];
    kl_eval_opts o = {0};
    o.split = cfg_str(c, s, "split", "test");
    const char *ref = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(kl__pl_stage_state(c, KL_STAGE_FEATURES), "out"), "reference_column"));
    o.reference_column = ref;
    o.dataset = kl__pl_out_str(c, KL_STAGE_FEATURES, "dir");
    void *res = NULL;
    o.verify = c->o->verify;
    int rc = kl_train_evaluate(kl__pl_out_str(c, KL_STAGE_TRAIN, "dir"), &o, &res, e);
    if (rc) return rc;
    cJSON *j = res;
    outf(c, p, sizeof p, "eval.json");
    if ((rc = kl_json_write_file(p, j, 1, e))) goto done;
    set_id_from_file(out, p);
    static const char *nums[] = {"rows", "loss", "accuracy", "auc", "reference_auc", "mae", "rmse", "r2"};
    for (size_t i = 0; i < KL_ARRAY_LEN(nums); i++) {
        cJSON *v = cJSON_GetObjectItem(j, nums[i]);
        if (cJSON_IsNumber(v)) cJSON_AddNumberToObject(out, nums[i], v->valuedouble);
    }
    double auc = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "auc")), ra = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "reference_auc"));
    double rmse = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "rmse"));
    char note[200];
    if (isfinite(rmse)) /* a regression model: its errors and the mean predictor's */
        snprintf(note, sizeof note, "%s RMSE %.4g, MAE %.4g, R2 %.4f (mean predictor RMSE %.4g)", o.split, rmse,
                 cJSON_GetNumberValue(cJSON_GetObjectItem(j, "mae")),
                 cJSON_GetNumberValue(cJSON_GetObjectItem(j, "r2")),
                 cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "baseline"), "rmse")));
    else if (isfinite(ra))
        snprintf(note, sizeof note, "%s AUC %.4f, Bayes-optimal %.4f (gap %.4f)", o.split, auc, ra, ra - auc);
    else if (isfinite(auc)) snprintf(note, sizeof note, "%s AUC %.4f, accuracy %.2f%%", o.split, auc, 100 * cJSON_GetNumberValue(cJSON_GetObjectItem(j, "accuracy")));
    else snprintf(note, sizeof note, "%s loss %.4f", o.split, cJSON_GetNumberValue(cJSON_GetObjectItem(j, "loss")));
    cJSON_AddStringToObject(out, "note", note);
    double min_auc = cfg_num(c, s, "min_auc", NAN), gap = cfg_num(c, s, "max_gap_to_reference", NAN);
    if ((isfinite(min_auc) || isfinite(gap)) && isfinite(rmse))
        rc = kl_node_error(kl_node_get(c->cfg[s], isfinite(min_auc) ? "min_auc" : "max_gap_to_reference"), e, KL_EINVAL,
                           "the model is a regression (loss mse): AUC gates do not apply");
    else if (isfinite(min_auc) && !(auc >= min_auc))
        rc = kl_err_set(e, KL_ERANGE, "test AUC %.4f is below min_auc %.4f", auc, min_auc);
    else if (isfinite(gap) && isfinite(ra) && !(ra - auc <= gap))
        rc = kl_err_set(e, KL_ERANGE, "test AUC %.4f is %.4f below the Bayes-optimal %.4f, more than max_gap_to_reference %.4f", auc, ra - auc, ra, gap);
done:
    cJSON_Delete(j);
    return rc;
}

/* ================================================================ export, register, serve */

static int st_export(pl_ctx *c, cJSON *out, kl_err *e) {
    const char *model = cfg_str(c, KL_STAGE_EXPORT, "model", c->res->name);
    const char *mdir = kl__pl_out_str(c, KL_STAGE_TRAIN, "dir");
    char repo[4300], dir[4600], a[4800], b[4800];
    outf(c, repo, sizeof repo, "repo");
    snprintf(dir, sizeof dir, "%s/%s/1", repo, model);
    snprintf(a, sizeof a, "%s/meta.json", mdir);
    void *mj = NULL;
    int rc = kl_rm_rf(dir, e);
    if (!rc) rc = kl_mkdir_p(dir, e);
    if (!rc) rc = kl_json_load_file(a, &mj, e);
    if (rc) return rc;
    /* every file meta.json lists (keel serve checks their sha256), meta.json, the online store */
    kl_manifest_files mf = {0};
    if ((rc = kl_manifest_files_read(mj, a, &mf, e))) goto done;
    for (size_t i = 0; i < mf.n && !rc; i++) {
        snprintf(a, sizeof a, "%s/%s", mdir, mf.v[i].name);
        snprintf(b, sizeof b, "%s/%s", dir, mf.v[i].name);
        rc = kl_copy_file(a, b, e);
    }
    kl_manifest_files_free(&mf);
    if (rc) goto done;
    snprintf(a, sizeof a, "%s/meta.json", mdir);
    snprintf(b, sizeof b, "%s/meta.json", dir);
    if ((rc = kl_copy_file(a, b, e))) goto done;
    snprintf(a, sizeof a, "%s/features.db", kl__pl_out_str(c, KL_STAGE_FEATURES, "dir"));
    snprintf(b, sizeof b, "%s/features.db", dir);
    if (kl_path_exists(a) && (rc = kl_copy_file(a, b, e))) goto done;
    char key[200], hex[65];
    snprintf(key, sizeof key, "%s %s", kl__pl_out_str(c, KL_STAGE_TRAIN, "id"),
             kl__pl_out_str(c, KL_STAGE_FEATURES, "id"));
    kl_sha256_buf_hex(key, strlen(key), hex);
    cJSON_AddStringToObject(out, "id", hex);
    cJSON_AddStringToObject(out, "repo", repo);
    cJSON_AddStringToObject(out, "dir", dir);
    cJSON_AddStringToObject(out, "model", model);
    char note[4700];
    snprintf(note, sizeof note, "model repository %s (model %s, version 1)", repo, model);
    cJSON_AddStringToObject(out, "note", note);
done:
    cJSON_Delete(mj);
    return rc;
}

static int st_register(pl_ctx *c, cJSON *out, kl_err *e) {
    const int s = KL_STAGE_REGISTER;
    const char *model = cfg_str(c, s, "model", kl__pl_out_str(c, KL_STAGE_EXPORT, "model"));
    const char *alias = cfg_str(c, s, "alias", "champion");
    int64_t ver = 0;
    double tr = kl__pl_out_num(c, KL_STAGE_TRAIN, "run_id");
    int rc = kl_registry_register(c->t, model, kl__pl_out_str(c, KL_STAGE_EXPORT, "dir"),
                                  isfinite(tr) ? (int64_t)tr : 0, NULL, &ver, e);
    if (!rc && *alias) rc = kl_registry_set_alias(c->t, model, alias, ver, e);
    const char *dv = kl__pl_out_str(c, KL_STAGE_INGEST, "id"),
               *fh = kl__pl_out_str(c, KL_STAGE_FEATURES, "feature_hash");
    if (!rc && *dv) rc = kl_registry_set_tag(c->t, model, ver, "dataset_version", dv, e);
    if (!rc && *fh) rc = kl_registry_set_tag(c->t, model, ver, "feature_hash", fh, e);
    if (rc) return rc;
    char id[300], note[300];
    snprintf(id, sizeof id, "%s/%lld", model, (long long)ver);
    cJSON_AddStringToObject(out, "id", id);
    cJSON_AddStringToObject(out, "model", model);
    cJSON_AddNumberToObject(out, "version", (double)ver);
    cJSON_AddStringToObject(out, "alias", alias);
    snprintf(note, sizeof note, "registered %s/%lld%s%s%s", model, (long long)ver, *alias ? ", alias " : "", *alias ? model : "", "");
    if (*alias) snprintf(note, sizeof note, "registered %s/%lld, %s@%s -> %lld", model, (long long)ver, model, alias, (long long)ver);
    cJSON_AddStringToObject(out, "note", note);
    return KL_OK;
}

static int st_serve(pl_ctx *c, kl_err *e) {
    const int s = KL_STAGE_SERVE;
    kl_serve_opts o = {0};
    o.repo = kl__pl_out_str(c, KL_STAGE_EXPORT, "repo");
    if (!*o.repo) return kl_err_set(e, KL_ESTATE, "serve needs the export stage's model repository");
    o.host = cfg_str(c, s, "host", "127.0.0.1");
    o.port = (int)cfg_num(c, s, "port", 8000);
    o.workers = (int)cfg_num(c, s, "workers", 0);
    o.access_log = 1;
    const char *url = kl__pl_out_str(c, KL_STAGE_FEATURES, "store"); /* the features stage's shared store */
    o.feature_store = *url ? url : NULL;
    kl_server *srv = NULL;
    int rc = kl_signal_catch(e);   /* Ctrl-C / SIGTERM stop the server (whichever thread gets them) */
    if (!rc) rc = kl_server_new(&o, &srv, e);
    if (!rc) rc = kl_server_start(srv, e);
    if (!rc) {
        fprintf(c->log, "keel serve: listening on http://%s:%d (Ctrl-C stops)\n", o.host, kl_server_port(srv));
        fflush(c->log);
        while (kl_signal_wait() == SIGHUP) {}
        rc = kl_server_shutdown(srv, e);
    }
    kl_server_free(srv);
    kl_signal_release();
    return rc;
}

int kl__pl_stage_run(pl_ctx *c, int s, cJSON *out, int64_t parent, kl_err *e) {
    switch (s) {
    case KL_STAGE_INGEST: return st_ingest(c, out, e);
    case KL_STAGE_VALIDATE: return st_validate(c, out, e);
    case KL_STAGE_FEATURES: return st_features(c, out, e);
    case KL_STAGE_TRAIN: return st_train(c, out, parent, e);
    case KL_STAGE_EVALUATE: return st_evaluate(c, out, e);
    case KL_STAGE_EXPORT: return st_export(c, out, e);
    case KL_STAGE_REGISTER: return st_register(c, out, e);
    case KL_STAGE_SERVE: return st_serve(c, e);
    default: return kl_err_set(e, KL_EINTERNAL, "stage %d", s);
    }
}
