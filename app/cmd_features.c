/* keel features fit|apply|materialize|transform|describe|latency: the
 * feature layer from the command line. One executor (src/feature/) runs
 * offline over a dataset (Parquet file or dataset folder) and online over
 * JSON records with the online store. */
#include "app.h"

#include <cjson/cJSON.h>
#include <keel/column.h>
#include <keel/data.h>
#include <keel/feature.h>
#include <keel/profile.h>
#include <keel/parquet.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ==================================================================
 * Reading the data: a .parquet file, a dataset folder, or clickgen:N[:SEED]
 * (the deterministic click log, generated in memory).
 * ================================================================== */

static size_t nrows_of(kl_column **c, size_t n) { return n ? c[0]->len : 0; }

/* ==================================================================
 * fit
 * ================================================================== */

static const app_opt fit_opts[] = {
    {"data", 0, 1, "DATASET", "dataset folder, .parquet file or clickgen:ROWS[:SEED]", 0},
    {"out", 'o', 1, "FILE", "features.json to write (default features.json)", 0},
    {"train-fraction", 0, 1, "F", "fit on the first F (0 < F <= 1) of the rows only: the training split", 0},
    {"json", 0, 0, NULL, "machine-readable summary", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec fit_spec = {"features fit", "keel features fit SPEC --data DATASET [--out features.json]",
                                      "learn the fitted state and freeze spec + state into features.json",
                                      "SPEC is a YAML feature spec (docs/features.md). The fitted state (means,\n"
                                      "ranges, quantile edges, vocabularies) is learned from DATASET and written\n"
                                      "with feature_hash = sha256(canonical spec + state + library version).\n"
                                      "--train-fraction F fits on the first F of the rows in dataset order (for a\n"
                                      "time-ordered log: the earliest rows), so that nothing of the evaluation\n"
                                      "rows leaks into the fitted state.",
                                      fit_opts, KL_ARRAY_LEN(fit_opts), 1, 1};

static int fit(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&fit_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int verify;
    if ((rc = app_get_verify(&a, &fit_spec, &verify)) >= 0) return rc;
    const char *data = app_get(&a, "data"), *out = app_get(&a, "out");
    if (!data) return app_usage_error(&fit_spec, "--data is required");
    if (!out) out = "features.json";
    double frac;
    if ((rc = app_get_double(&a, &fit_spec, "train-fraction", 1.0, &frac)) >= 0) return rc;
    if (!(frac > 0 && frac <= 1)) return app_usage_error(&fit_spec, "--train-fraction must be in (0, 1]");
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    if (kl_features_spec_load(a.pos[0], &f, &e) || kl_features_bind_dataset(f, data, &e) ||
        kl_features_read_data_verify(data, f, kl_features_fit_needs_label(f), verify, &cols, &ncols, &e)) {
        kl_features_free_columns(cols, ncols);
        kl_features_free(f);
        return app_fail(&e);
    }
    if (frac < 1) {   /* the first rows only: shorten the columns (their tails stay allocated) */
        size_t keep = (size_t)ceil(frac * (double)nrows_of(cols, ncols));
        for (size_t i = 0; i < ncols; i++) if (cols[i]->len > keep) cols[i]->len = keep;
    }
    char prof[1024];
    kl_profile_path_for(out, prof, sizeof prof);
    if (kl_features_fit(f, cols, ncols, &e) || kl_features_save(f, out, &e) ||
        kl_profile_write(f, cols, ncols, prof, &e)) {
        kl_features_free_columns(cols, ncols);
        kl_features_free(f);
        return app_fail(&e);
    }
    if (app_flag(&a, "json"))
        printf("{\"features\": %zu, \"width\": %zu, \"rows\": %zu, \"feature_hash\": \"%s\", \"out\": \"%s\", "
               "\"profile\": \"%s\"}\n",
               kl_features_count(f), kl_features_width(f), nrows_of(cols, ncols), kl_features_hash(f), out, prof);
    else
        printf("fitted %zu features (%zu outputs) on %zu rows\nfeature_hash %s\nwrote %s\nwrote %s\n",
               kl_features_count(f), kl_features_width(f), nrows_of(cols, ncols), kl_features_hash(f), out, prof);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    return APP_EXIT_OK;
}

/* ==================================================================
 * apply
 * ================================================================== */

static const app_opt apply_opts[] = {
    {"data", 0, 1, "DATASET", "dataset folder, .parquet file or clickgen:ROWS[:SEED]", 0},
    {"out", 'o', 1, "PATH", "output: a .parquet file, or a folder (features.parquet, features.json, manifest.json)", 0},
    {"codec", 0, 1, "CODEC", "Parquet codec: zstd (default), snappy, none, ...", 0},
    {"list-column", 0, 1, "NAME", "write every output as one FixedSizeList column NAME (a .parquet --out)", 0},
    {"json", 0, 0, NULL, "machine-readable summary", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec apply_spec = {"features apply",
                                        "keel features apply features.json --data DATASET --out OUT",
                                        "compute the features of every row (columnar, multi-threaded) into Parquet",
                                        "Windows use only events strictly before each row's timestamp. The output\n"
                                        "has one column per output slot (features.json \"outputs\") and the label.\n"
                                        "Unseen categories, filled nulls, zero denominators, clamped log1p inputs\n"
                                        "and empty windows are counted and reported. --list-column NAME writes the\n"
                                        "outputs as one FixedSizeList<float32> column instead (element k: output\n"
                                        "slot k; an integer float32 cannot hold exactly is refused), for readers\n"
                                        "that take a vector per row (DuckDB, Arrow, Spark); a features dataset\n"
                                        "folder keeps one column per output.",
                                        apply_opts,
                                        KL_ARRAY_LEN(apply_opts),
                                        1,
                                        1};

/* The outputs of apply (res: width slots, then the label when present)
 * with the slots replaced by one FixedSizeList column named name. */
static int pack_outputs(const kl_features *f, const char *name, kl_column ***res, size_t *nres, kl_err *e) {
    size_t w = kl_features_width(f);
    kl_column *list;
    int rc = kl_column_pack_list(name, *res, w, KL_COL_FLOAT32, &list, e);
    if (rc) {
        kl_err_prefix(e, "--list-column");
        return rc;
    }
    for (size_t s = 0; s < w; s++) kl_column_free((*res)[s]);
    (*res)[0] = list;
    memmove(*res + 1, *res + w, (*nres - w) * sizeof **res);
    *nres = *nres - w + 1;
    return KL_OK;
}

static int apply(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&apply_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int verify;
    if ((rc = app_get_verify(&a, &apply_spec, &verify)) >= 0) return rc;
    const char *data = app_get(&a, "data"), *out = app_get(&a, "out");
    if (!data || !out) return app_usage_error(&apply_spec, "--data and --out are required");
    const char *listcol = app_get(&a, "list-column");
    size_t outl = strlen(out);
    if (listcol && (outl < 8 || strcmp(out + outl - 8, ".parquet")))
        return app_usage_error(&apply_spec,
                               "--list-column needs a .parquet --out (a features dataset folder keeps one "
                               "column per output, as training reads it)");
    if (listcol && !*listcol) return app_usage_error(&apply_spec, "--list-column needs a column name");
    kl_pq_write_opts wo;
    kl_pq_write_opts_default(&wo);
    if (app_get(&a, "codec") && kl_pq_codec_parse(app_get(&a, "codec"), &wo.codec))
        return app_usage_error(&apply_spec, "unknown codec '%s'", app_get(&a, "codec"));
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL, **res = NULL;
    size_t ncols = 0, nres = 0;
    kl_features_counts cnt = {0};
    char *path = NULL;
    int64_t t0 = kl_time_mono_ns(), t1 = 0, t2 = 0;
    if (kl_features_load(a.pos[0], &f, &e) || kl_features_read_data_verify(data, f, 1, verify, &cols, &ncols, &e)) goto fail;
    t1 = kl_time_mono_ns();
    if (kl_features_apply(f, cols, ncols, NULL, &res, &nres, &cnt, &e)) goto fail;
    t2 = kl_time_mono_ns();
    if (listcol && pack_outputs(f, listcol, &res, &nres, &e)) goto fail;
    if (kl_features_write(f, res, nres, out, data, &wo, &e)) goto fail;
    size_t ol = strlen(out);
    path = ol >= 8 && !strcmp(out + ol - 8, ".parquet") ? strdup(out) : NULL;
    if (!path) { /* a features dataset carries the reference profile of its features.json (training adds the outputs) */
        char prof[1024], dst[4200];
        kl_profile_path_for(a.pos[0], prof, sizeof prof);
        snprintf(dst, sizeof dst, "%s/profile.json", out);
        if (kl_path_exists(prof) && kl_copy_file(prof, dst, &e)) goto fail;
    }
    if (!path) {
        kl_buf b;
        kl_buf_init(&b);
        kl_buf_printf(&b, "%s/features.parquet", out);
        path = kl_buf_take(&b);
    }
    double tr = (double)(t1 - t0) / 1e9, ta = (double)(t2 - t1) / 1e9, tw = (double)(kl_time_mono_ns() - t2) / 1e9;
    if (app_flag(&a, "json"))
        printf("{\"rows\": %llu, \"outputs\": %zu, \"feature_hash\": \"%s\", \"out\": \"%s\", \"read_s\": %.3f, \"apply_s\": %.3f, "
               "\"write_s\": %.3f, \"unknown\": %llu, \"null_filled\": %llu, \"div_zero\": %llu, \"clamped\": %llu, \"empty_window\": %llu, "
               "\"label_dropped\": %llu}\n",
               (unsigned long long)cnt.rows, kl_features_width(f), kl_features_hash(f), path, tr, ta, tw,
               (unsigned long long)cnt.unknown, (unsigned long long)cnt.null_filled, (unsigned long long)cnt.div_zero,
               (unsigned long long)cnt.clamped, (unsigned long long)cnt.empty_window, (unsigned long long)cnt.label_dropped);
    else
        printf("%llu rows, %zu outputs → %s\nread %.3f s, apply %.3f s, write %.3f s\n"
               "fallbacks: unknown category %llu, nulls filled %llu, zero denominators %llu, clamped %llu, empty windows %llu\n",
               (unsigned long long)cnt.rows, kl_features_width(f), path, tr, ta, tw, (unsigned long long)cnt.unknown,
               (unsigned long long)cnt.null_filled, (unsigned long long)cnt.div_zero, (unsigned long long)cnt.clamped,
               (unsigned long long)cnt.empty_window);
    if (!app_flag(&a, "json") && cnt.label_dropped)
        printf("rows with a null label left out: %llu (label nulls: drop)\n", (unsigned long long)cnt.label_dropped);
    free(path);
    kl_features_free_columns(res, nres);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    return APP_EXIT_OK;
fail:
    free(path);
    kl_features_free_columns(res, nres);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    return app_fail(&e);
}

/* ==================================================================
 * materialize
 * ================================================================== */

static const app_opt mat_opts[] = {
    {"data", 0, 1, "DATASET", "dataset folder, .parquet file or clickgen:ROWS[:SEED]", 0},
    {"store", 0, 1, "PATH|URL", "online store: a SQLite file, or redis://HOST:PORT/DB", 0},
    {"json", 0, 0, NULL, "machine-readable summary", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec mat_spec = {"features materialize",
                                      "keel features materialize features.json --data DATASET --store PATH|URL",
                                      "fill the online store with the recent events per entity of the window features",
                                      "Rows are appended in time order; the store keeps what a later record's\n"
                                      "windows can need and records the feature_hash it belongs to.",
                                      mat_opts,
                                      KL_ARRAY_LEN(mat_opts),
                                      1,
                                      1};

static int materialize(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&mat_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int verify;
    if ((rc = app_get_verify(&a, &mat_spec, &verify)) >= 0) return rc;
    const char *data = app_get(&a, "data"), *store = app_get(&a, "store");
    if (!data || !store) return app_usage_error(&mat_spec, "--data and --store are required");
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    kl_fstore *s = NULL;
    if (kl_features_load(a.pos[0], &f, &e) || kl_features_read_data_verify(data, f, 0, verify, &cols, &ncols, &e) ||
        kl_fstore_open(f, store, &s, &e) || kl_features_materialize(f, cols, ncols, s, &e) || kl_fstore_flush(s, &e)) {
        kl_fstore_free(s);
        kl_features_free_columns(cols, ncols);
        kl_features_free(f);
        return app_fail(&e);
    }
    if (app_flag(&a, "json"))
        printf("{\"rows\": %zu, \"entities\": %llu, \"events\": %llu, \"store\": \"%s\"}\n", nrows_of(cols, ncols),
               (unsigned long long)kl_fstore_entities(s), (unsigned long long)kl_fstore_events(s), store);
    else if (kl_fstore_is_url(store))
        printf("%zu rows → %s: %llu events appended\n", nrows_of(cols, ncols), store,
               (unsigned long long)kl_fstore_events(s));
    else
        printf("%zu rows → %s: %llu entity histories, %llu events kept\n", nrows_of(cols, ncols), store,
               (unsigned long long)kl_fstore_entities(s), (unsigned long long)kl_fstore_events(s));
    kl_fstore_free(s);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    return APP_EXIT_OK;
}

/* ==================================================================
 * transform: JSON records (one per line on stdin) → output vectors
 * ================================================================== */

static const app_opt tr_opts[] = {
    {"store", 0, 1, "PATH|URL", "online store: SQLite file or redis://HOST:PORT/DB (needed for window features)", 0},
    {"append", 0, 0, NULL, "append each record to the store after transforming it (and flush at the end)", 0},
};
static const app_cmd_spec tr_spec = {"features transform", "keel features transform features.json [--store PATH [--append]] < records.jsonl",
                                     "online path: one JSON record per line → its float32 feature vector (JSON array)",
                                     "Prints one line per record: the vector in the layout of features.json\n"
                                     "\"outputs\" (values printed with %.9g, which round-trips float32).",
                                     tr_opts, KL_ARRAY_LEN(tr_opts), 1, 1};

static int transform(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&tr_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    kl_features *f = NULL;
    kl_fstore *s = NULL;
    float *v = NULL;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    if (kl_features_load(a.pos[0], &f, &e)) return app_fail(&e);
    /* without --store, window features fail with a clear error (never an
     * empty history standing in for the real one) */
    struct stat sb;
    if (app_get(&a, "store") && !app_flag(&a, "append") && !kl_fstore_is_url(app_get(&a, "store")) &&
        stat(app_get(&a, "store"), &sb) != 0) {
        kl_features_free(f);
        kl_err_set(&e, KL_ENOTFOUND, "online store %s not found (keel features materialize fills it)", app_get(&a, "store"));
        return app_fail(&e);
    }
    if (app_get(&a, "store") && kl_fstore_open(f, app_get(&a, "store"), &s, &e)) { kl_features_free(f); return app_fail(&e); }
    if (app_flag(&a, "append") && !s) { kl_features_free(f); return app_usage_error(&tr_spec, "--append needs --store"); }
    size_t w = kl_features_width(f);
    v = malloc((w + 1) * sizeof *v);
    rc = APP_EXIT_OK;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        if (n == 1 && line[0] == '\n') continue;
        if (kl_features_transform_row(f, s, line, (size_t)n, v, NULL, &e) ||
            (app_flag(&a, "append") && kl_fstore_append(s, line, (size_t)n, &e))) {
            kl_err_prefix(&e, "stdin:%zu", lineno);
            rc = app_fail(&e);
            break;
        }
        putchar('[');
        for (size_t j = 0; j < w; j++) printf(j ? ", %.9g" : "%.9g", (double)v[j]);
        puts("]");
    }
    if (!rc && app_flag(&a, "append") && kl_fstore_flush(s, &e)) rc = app_fail(&e);
    free(line);
    free(v);
    kl_fstore_free(s);
    kl_features_free(f);
    return rc;
}

/* ==================================================================
 * push: raw events (one JSON record per line on stdin) → the online store
 * ================================================================== */

static const app_opt push_opts[] = {
    {"store", 0, 1, "PATH|URL", "online store: a SQLite file, or redis://HOST:PORT/DB", 0},
    {"json", 0, 0, NULL, "machine-readable summary", 0},
};
static const app_cmd_spec push_spec = {"features push",
                                       "keel features push features.json --store URL < events.jsonl",
                                       "append raw events to the online store of the window features",
                                       "Each line is one raw record (a JSON object with the window features'\n"
                                       "entity, time and value fields), appended in the order read; the store\n"
                                       "keeps what later records' windows can need. A bad line stops the push\n"
                                       "and is named (stdin:LINE): in Redis the lines before it stay appended,\n"
                                       "a SQLite store is written only when every line was appended.",
                                       push_opts,
                                       KL_ARRAY_LEN(push_opts),
                                       1,
                                       1};

static int push(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&push_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *store = app_get(&a, "store");
    if (!store) return app_usage_error(&push_spec, "--store is required");
    kl_err e = {0};
    kl_features *f = NULL;
    kl_fstore *s = NULL;
    if (kl_features_load(a.pos[0], &f, &e) || kl_fstore_open(f, store, &s, &e)) {
        kl_features_free(f);
        return app_fail(&e);
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0, pushed = 0;
    ssize_t n;
    rc = APP_EXIT_OK;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        if (n == 1 && line[0] == '\n') continue;
        if (kl_fstore_append(s, line, (size_t)n, &e)) {
            kl_err_prefix(&e, "stdin:%zu", lineno);
            rc = app_fail(&e);
            break;
        }
        pushed++;
    }
    if (!rc && kl_fstore_flush(s, &e)) rc = app_fail(&e);
    if (!rc && app_flag(&a, "json")) printf("{\"events\": %zu, \"store\": \"%s\"}\n", pushed, store);
    else if (!rc) printf("%zu events → %s\n", pushed, store);
    free(line);
    kl_fstore_free(s);
    kl_features_free(f);
    return rc;
}

/* ==================================================================
 * describe
 * ================================================================== */

static const app_opt desc_opts[] = {
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec desc_spec = {"features describe", "keel features describe features.json [--json]",
                                       "list features: inputs, output dtype, version, fitted state, cost per row",
                                       "The cost per row was measured at fit (one thread, up to 50k rows, best of 3); a\n"
                                       "feature above 10 µs/row is flagged heavy.",
                                       desc_opts, KL_ARRAY_LEN(desc_opts), 1, 1};

static int describe(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&desc_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    void *doc = NULL;
    kl_features *f = NULL;
    if (kl_features_load(a.pos[0], &f, &e) || kl_json_load_file(a.pos[0], &doc, &e)) { kl_features_free(f); return app_fail(&e); }
    cJSON *fs = cJSON_GetObjectItem(doc, "features");
    int json = app_flag(&a, "json");
    cJSON *outj = json ? cJSON_CreateObject() : NULL;
    cJSON *arr = NULL;
    if (json) {
        cJSON_AddStringToObject(outj, "feature_hash", kl_features_hash(f));
        cJSON_AddNumberToObject(outj, "width", (double)kl_features_width(f));
        arr = cJSON_AddArrayToObject(outj, "features");
    } else {
        printf("feature_hash %s, %zu features, %zu outputs\n", kl_features_hash(f), kl_features_count(f), kl_features_width(f));
        printf("%-16s %-4s %-12s %-30s %-8s %-7s %10s  %s\n", "name", "ver", "transform", "inputs", "dtype", "outputs", "ns/row", "state");
    }
    for (size_t i = 0; i < kl_features_count(f); i++) {
        cJSON *F = cJSON_GetArrayItem(fs, (int)i);
        const char *tf = cJSON_GetStringValue(cJSON_GetObjectItem(F, "transform"));
        kl_buf ins, st;
        kl_buf_init(&ins);
        kl_buf_init(&st);
        const char *keys[] = {"entity", "time", "value"};
        cJSON *inputs = cJSON_GetObjectItem(F, "inputs");
        int k = 0;
        if (inputs) {
            cJSON *x;
            cJSON_ArrayForEach(x, inputs) kl_buf_printf(&ins, "%s%s:%s", k++ ? "," : "", cJSON_GetStringValue(cJSON_GetObjectItem(x, "column")), cJSON_GetStringValue(cJSON_GetObjectItem(x, "type")));
        } else {
            for (int j = 0; j < 3; j++) {
                cJSON *x = cJSON_GetObjectItem(F, keys[j]);
                if (x) kl_buf_printf(&ins, "%s%s=%s", k++ ? "," : "", keys[j], cJSON_GetStringValue(cJSON_GetObjectItem(x, "column")));
            }
            kl_buf_printf(&st, "%s events=%g within_us=%g", cJSON_GetStringValue(cJSON_GetObjectItem(F, "agg")),
                          cJSON_GetNumberValue(cJSON_GetObjectItem(F, "events")), cJSON_GetNumberValue(cJSON_GetObjectItem(F, "within_us")));
        }
        cJSON *state = cJSON_GetObjectItem(F, "state");
        if (state) {
            cJSON *x;
            cJSON_ArrayForEach(x, state) {
                if (cJSON_IsNumber(x)) kl_buf_printf(&st, "%s%s=%.6g", st.len ? " " : "", x->string, x->valuedouble);
                else if (cJSON_IsArray(x)) kl_buf_printf(&st, "%s%s: %d entries", st.len ? " " : "", x->string, cJSON_GetArraySize(x));
            }
        }
        size_t width = 0;
        for (size_t s = 0; s < kl_features_width(f); s++) width += kl_features_slot_feature(f, s) == i;
        double ns = kl_features_cost_ns(f, i);
        int heavy = ns > 10000.0;
        const char *dtype = cJSON_GetStringValue(cJSON_GetObjectItem(F, "dtype"));
        double ver = cJSON_GetNumberValue(cJSON_GetObjectItem(F, "version"));
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", kl_features_name(f, i));
            cJSON_AddNumberToObject(o, "version", ver);
            cJSON_AddStringToObject(o, "transform", tf);
            cJSON_AddStringToObject(o, "inputs", ins.data ? ins.data : "");
            cJSON_AddStringToObject(o, "dtype", dtype);
            cJSON_AddNumberToObject(o, "outputs", (double)width);
            cJSON_AddNumberToObject(o, "cost_ns_per_row", ns);
            cJSON_AddBoolToObject(o, "heavy", heavy);
            cJSON_AddStringToObject(o, "state", st.data ? st.data : "");
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%-16s %-4g %-12s %-30s %-8s %-7zu %10.1f  %s%s\n", kl_features_name(f, i), ver, tf, ins.data ? ins.data : "",
                   dtype, width, ns, heavy ? "HEAVY " : "", st.data ? st.data : "");
        }
        kl_buf_free(&ins);
        kl_buf_free(&st);
    }
    if (json) {
        char *s = cJSON_Print(outj);
        puts(s);
        free(s);
        cJSON_Delete(outj);
    }
    cJSON_Delete(doc);
    kl_features_free(f);
    return APP_EXIT_OK;
}

/* ==================================================================
 * latency: online transform of one record, with windows
 * ================================================================== */

static const app_opt lat_opts[] = {
    {"data", 0, 1, "DATASET", "dataset folder, .parquet file or clickgen:ROWS[:SEED]", 0},
    {"records", 'n', 1, "N", "records timed at the end of the data (default 10000)", 0},
    {"store", 0, 1, "URL", "online store to time against: redis://HOST:PORT/DB (default: in memory)", 0},
    {"rate", 0, 1, "R", "records per second, paced (default: back to back); latency counts from each record's slot", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec lat_spec = {
    "features latency",
    "keel features latency features.json --data DATASET [--records N] [--store URL] [--rate R]",
    "measure the online path: p50/p99 of transform_row (JSON parse included) with windows",
    "Materializes all rows but the last N in memory, then for each of the last N\n"
    "rows (in time order) times kl_features_transform_row on its JSON record, then\n"
    "appends it. --store redis://... fills and reads that store instead (its\n"
    "keys for these features should be empty first); --rate R starts record k\n"
    "at k/R s, and its latency counts from then (a late start included);\n"
    "--json adds call_p50_us/call_p99_us, timed from the call itself.",
    lat_opts,
    KL_ARRAY_LEN(lat_opts),
    1,
    1};

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int latency(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&lat_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int verify;
    if ((rc = app_get_verify(&a, &lat_spec, &verify)) >= 0) return rc;
    int64_t nrec;
    if ((rc = app_get_int(&a, &lat_spec, "records", 10000, &nrec)) >= 0) return rc;
    const char *data = app_get(&a, "data"), *url = app_get(&a, "store");
    if (!data || nrec < 1) return app_usage_error(&lat_spec, "--data is required, --records >= 1");
    double rate;
    if ((rc = app_get_double(&a, &lat_spec, "rate", 0, &rate)) >= 0) return rc;
    if (rate < 0 || rate > 1e7) return app_usage_error(&lat_spec, "--rate must be 0..10000000");
    if (url && !kl_fstore_is_url(url)) return app_usage_error(&lat_spec, "--store: expected redis://HOST:PORT/DB");
    kl_err e = {0};
    kl_features *f = NULL;
    kl_column **cols = NULL;
    size_t ncols = 0;
    kl_fstore *s = NULL;
    double *lat = NULL, *svc = NULL; /* from the slot; from the call */
    float *v = NULL;
    kl_buf js;
    kl_buf_init(&js);
    if (kl_features_load(a.pos[0], &f, &e) || kl_features_read_data_verify(data, f, 0, verify, &cols, &ncols, &e) ||
        kl_fstore_open(f, url, &s, &e))
        goto fail;
    size_t n = nrows_of(cols, ncols), m = (size_t)nrec < n ? (size_t)nrec : n, first = n - m;
    for (size_t r = 0; r < first; r++)
        if (kl_fstore_append_columns(s, cols, ncols, r, &e)) goto fail;
    lat = malloc(m * sizeof *lat + 1);
    svc = malloc(m * sizeof *svc + 1);
    v = malloc(kl_features_width(f) * sizeof *v + 1);
    int64_t start = kl_time_mono_ns();
    for (size_t r = first; r < n; r++) {
        kl_buf_reset(&js);
        kl_buf_puts(&js, "{");
        for (size_t c = 0; c < ncols; c++) {
            kl_column *col = cols[c];
            if (c) kl_buf_puts(&js, ", ");
            kl_buf_json_str(&js, col->name);
            kl_buf_puts(&js, ": ");
            if (kl_column_is_null(col, r)) kl_buf_puts(&js, "null");
            else if (col->type == KL_COL_STRING) { size_t sn; const char *sv = kl_column_get_str(col, r, &sn); kl_buf_puts(&js, "\""); kl_buf_append(&js, sv, sn); kl_buf_puts(&js, "\""); }
            else if (col->type == KL_COL_FLOAT32 || col->type == KL_COL_FLOAT64) kl_buf_printf(&js, "%.17g", kl_column_get_f64(col, r));
            else kl_buf_printf(&js, "%lld", (long long)kl_column_get_i64(col, r));
        }
        kl_buf_puts(&js, "}");
        int64_t t0 = kl_time_mono_ns();
        if (rate > 0) { /* paced: this record's slot */
            int64_t slot = start + (int64_t)((double)(r - first) * 1e9 / rate);
            while ((t0 = kl_time_mono_ns()) < slot) {
                int64_t ns = slot - t0 - 100000; /* wake early, spin the rest */
                if (ns > 100000) nanosleep(&(struct timespec){0, (long)(ns < 999999999 ? ns : 999999999)}, NULL);
            }
        }
        int64_t called = t0;
        if (rate > 0) t0 = start + (int64_t)((double)(r - first) * 1e9 / rate);
        if (kl_features_transform_row(f, s, js.data, js.len, v, NULL, &e)) goto fail;
        int64_t t1 = kl_time_mono_ns();
        lat[r - first] = (double)(t1 - t0) / 1e3;
        svc[r - first] = (double)(t1 - called) / 1e3;
        if (kl_fstore_append_columns(s, cols, ncols, r, &e)) goto fail;
    }
    qsort(lat, m, sizeof *lat, dcmp);
    qsort(svc, m, sizeof *svc, dcmp);
    size_t i99 = (size_t)((double)(m - 1) * 0.99);
    double p50 = lat[m / 2], p99 = lat[i99], mx = lat[m - 1];
    if (app_flag(&a, "json"))
        printf(
            "{\"records\": %zu, \"store\": \"%s\", \"rate\": %g, \"p50_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f, "
            "\"call_p50_us\": %.2f, \"call_p99_us\": %.2f}\n",
            m, url ? "redis" : "memory", rate, p50, p99, mx, svc[m / 2], svc[i99]);
    else
        printf("%zu records: transform_row p50 %.2f µs, p99 %.2f µs, max %.2f µs\n", m, p50, p99, mx);
    rc = APP_EXIT_OK;
    goto done;
fail:
    rc = app_fail(&e);
done:
    kl_buf_free(&js);
    free(lat);
    free(svc);
    free(v);
    kl_fstore_free(s);
    kl_features_free_columns(cols, ncols);
    kl_features_free(f);
    return rc;
}

/* ==================================================================
 * Dispatch
 * ================================================================== */

int cmd_features(int argc, char **argv) {
    static const app_command sub[] = {
        {"fit", "learn the fitted state; write features.json", fit},
        {"apply", "compute features over a dataset into Parquet", apply},
        {"materialize", "fill the online store for window features", materialize},
        {"transform", "online path over JSON records on stdin", transform},
        {"push", "append raw events (JSON lines) to the online store", push},
        {"describe", "features, inputs, dtypes, state and cost per row", describe},
        {"latency", "p50/p99 of the online transform with windows", latency},
    };
    return app_dispatch("features", sub, KL_ARRAY_LEN(sub), argc, argv);
}
