/* ONNX backend node-test runner: for every test folder (model.onnx +
 * test_data_set_N/input_K.pb, output_K.pb) loads the model with the keel
 * runtime, runs each data set and compares outputs (rtol 1e-3, atol 1e-7 as
 * the ONNX backend tests). Prints one line per test (PASS/FAIL/UNSUPPORTED),
 * then a summary line. Exit status: 1 when any supported test fails or the
 * overall pass rate is below --min-pass percent. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/graph.h"
#include "keel/onnx.h"
#include "keel/runtime.h"

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_dir(const char *dir, const char *prefix, char ***out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 64;
    char **v = malloc(sizeof(char *) * cap);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strncmp(de->d_name, prefix, strlen(prefix))) continue;
        if (n == cap) v = realloc(v, sizeof(char *) * (cap *= 2));
        v[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(v, n, sizeof(char *), cmpstr);
    *out = v;
    return n;
}

static int idx_of(const char *name) { /* input_12.pb -> 12 */
    const char *u = strchr(name, '_');
    return u ? atoi(u + 1) : 0;
}
static int by_index(const void *a, const void *b) { return idx_of(*(char *const *)a) - idx_of(*(char *const *)b); }

/* compares got to want; msg on mismatch */
static int compare(const kl_tensor *got, const kl_tensor *want, char *msg, size_t n) {
    char a[96], b[96];
    if (got->dtype != want->dtype) {
        snprintf(msg, n, "dtype %s, expected %s", kl_dtype_name(got->dtype), kl_dtype_name(want->dtype));
        return 1;
    }
    if (got->rank != want->rank || memcmp(got->dims, want->dims, sizeof(int64_t) * got->rank)) {
        snprintf(msg, n, "shape %s, expected %s", kl_shape_str(got->rank, got->dims, a, sizeof a), kl_shape_str(want->rank, want->dims, b, sizeof b));
        return 1;
    }
    int64_t m = kl_tensor_numel(got);
    for (int64_t i = 0; i < m; i++) {
        double x, y;
        switch (got->dtype) {
        case KL_F32: x = ((float *)got->data)[i]; y = ((float *)want->data)[i]; break;
        case KL_F64: x = ((double *)got->data)[i]; y = ((double *)want->data)[i]; break;
        case KL_F16: x = kl_f16_to_f32(((uint16_t *)got->data)[i]); y = kl_f16_to_f32(((uint16_t *)want->data)[i]); break;
        case KL_BF16: x = kl_bf16_to_f32(((uint16_t *)got->data)[i]); y = kl_bf16_to_f32(((uint16_t *)want->data)[i]); break;
        default: {
            size_t es = kl_dtype_size(got->dtype);
            if (memcmp((char *)got->data + i * es, (char *)want->data + i * es, es)) {
                int64_t gi = 0, wi = 0;
                memcpy(&gi, (char *)got->data + i * es, es < 8 ? es : 8);
                memcpy(&wi, (char *)want->data + i * es, es < 8 ? es : 8);
                snprintf(msg, n, "element %lld: %lld, expected %lld", (long long)i, (long long)gi, (long long)wi);
                return 1;
            }
            continue;
        }
        }
        if (isnan(x) && isnan(y)) continue;
        if (isinf(x) && isinf(y) && (x > 0) == (y > 0)) continue;
        if (!(fabs(x - y) <= 1e-7 + 1e-3 * fabs(y))) {
            snprintf(msg, n, "element %lld: %.9g, expected %.9g", (long long)i, x, y);
            return 1;
        }
    }
    return 0;
}

/* compare for tensors; sequence/optional values element by element */
static int compare_value(const kl_tensor *got, const kl_tensor *want, char *msg, size_t n, int depth) {
    if (!kl_seq_is_value(want) || depth > 8) return compare(got, want, msg, n);
    int kg, kw;
    int64_t ng, nw;
    kl_err e = {0};
    if (kl_seq_check(got, &kg, NULL, &ng, &e)) {
        snprintf(msg, n, "not a sequence/optional value: %s", kl_err_what(&e));
        return 1;
    }
    kl_seq_check(want, &kw, NULL, &nw, &e);
    if (kg != kw || ng != nw) {
        snprintf(msg, n, "%s of %lld, expected %s of %lld", kg == KL_VAL_SEQUENCE ? "sequence" : "optional",
                 (long long)ng, kw == KL_VAL_SEQUENCE ? "sequence" : "optional", (long long)nw);
        return 1;
    }
    for (int64_t i = 0; i < ng; i++) {
        kl_tensor a, b;
        char m2[400];
        kl_seq_at(got, i, &a, &e);
        kl_seq_at(want, i, &b, &e);
        if (compare_value(&a, &b, m2, sizeof m2, depth + 1)) {
            snprintf(msg, n, "element %lld: %s", (long long)i, m2);
            return 1;
        }
    }
    return 0;
}

enum { R_PASS, R_FAIL, R_UNSUP, R_BAD };

/* Tests whose data in onnx 1.12 is inconsistent or that hit a known kernel
 * limitation: counted as not passed, reported, not failures. */
static const struct { const char *name, *why;
} known[] = {
    {"test_castlike_BFLOAT16_to_FLOAT", "test data: 'like' has shape [1], the model declares [3,4]"},
    {"test_castlike_BFLOAT16_to_FLOAT_expanded", "test data: 'like' has shape [1], the model declares [3,4]"},
    {"test_castlike_FLOAT_to_BFLOAT16", "test data: 'like' has shape [1], the model declares [3,4]"},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", "test data: 'like' has shape [1], the model declares [3,4]"},
    {"test_cast_FLOAT_to_BFLOAT16", "onnx 1.12 truncates to bfloat16; keel rounds to nearest even"},
    {"test_adam_multiple", "test data: computed with epsilon 1e-2, the node has no epsilon attribute (default 1e-6)"},
    {"test_training_dropout",
     "mask from NumPy's random generator; keel's is counter-based (seed attribute, docs/inference.md)"},
    {"test_training_dropout_default",
     "mask from NumPy's random generator; keel's is counter-based (seed attribute, docs/inference.md)"},
    {"test_training_dropout_default_mask",
     "mask from NumPy's random generator; keel's is counter-based (seed attribute, docs/inference.md)"},
    {"test_training_dropout_mask",
     "mask from NumPy's random generator; keel's is counter-based (seed attribute, docs/inference.md)"},
};

static int run_test(const char *dir, char *msg, size_t mn) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    kl_err e = {0};
    kl_session *s = NULL;
    kl_session_opts o = {1, 1};
    int rc = kl_session_load(path, &o, &s, &e);
    if (rc) {
        snprintf(msg, mn, "%s", kl_err_what(&e));
        return rc == KL_EUNSUPPORTED ? R_UNSUP : R_FAIL;
    }
    char **sets;
    int nsets = list_dir(dir, "test_data_set_", &sets), result = R_PASS;
    if (nsets <= 0) { snprintf(msg, mn, "no test_data_set_*"); kl_session_free(s); return R_FAIL; }
    for (int k = 0; k < nsets && result == R_PASS; k++) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%s/%s", dir, sets[k]);
        char **ins, **outs;
        int ni = list_dir(sd, "input_", &ins), no = list_dir(sd, "output_", &outs);
        qsort(ins, ni, sizeof(char *), by_index);
        qsort(outs, no, sizeof(char *), by_index);
        size_t n_in = kl_session_num_inputs(s), n_out = kl_session_num_outputs(s);
        kl_tensor **it = calloc(n_in + 1, sizeof(kl_tensor *)), **ot = calloc(n_out + 1, sizeof(kl_tensor *));
        if ((size_t)ni != n_in) {
            /* a test may feed fewer inputs (optional ones): unsupported here */
            snprintf(msg, mn, "%d input files, model has %zu inputs", ni, n_in);
            result = R_FAIL;
        }
        for (int i = 0; i < ni && result == R_PASS; i++) {
            snprintf(path, sizeof path, "%s/%s", sd, ins[i]);
            const kl_graph *g = kl_session_graph(s);
            if ((rc = kl_onnx_value_load(path, g->values[g->inputs[i]].kind, &it[i], &e))) {
                snprintf(msg, mn, "%s", kl_err_what(&e));
                result = rc == KL_EUNSUPPORTED ? R_UNSUP : R_FAIL;
            }
        }
        /* numpy has no bfloat16: the test data stores it as uint16 */
        for (int i = 0; i < ni && result == R_PASS; i++)
            if (it[i]->dtype == KL_U16 && kl_session_input(s, i)->dtype == KL_BF16) it[i]->dtype = KL_BF16;
        if (result == R_PASS) {
            rc = kl_session_run(s, (const kl_tensor *const *)it, n_in, ot, n_out, &e);
            if (rc) {
                snprintf(msg, mn, "run: %s", kl_err_what(&e));
                result = rc == KL_EUNSUPPORTED ? R_UNSUP : R_FAIL;
            }
        }
        for (int i = 0; i < no && result == R_PASS && (size_t)i < n_out; i++) {
            kl_tensor *want;
            snprintf(path, sizeof path, "%s/%s", sd, outs[i]);
            const kl_graph *g = kl_session_graph(s);
            if ((rc = kl_onnx_value_load(path, g->values[g->outputs[i]].kind, &want, &e))) {
                snprintf(msg, mn, "%s", kl_err_what(&e));
                result = rc == KL_EUNSUPPORTED ? R_UNSUP : R_FAIL;
                break;
            }
            if (want->dtype == KL_U16 && ot[i]->dtype == KL_BF16) want->dtype = KL_BF16;
            char m2[512];
            /* random outputs: shape and dtype only, as ONNX's own backend
             * runner does for the bernoulli tests */
            if (strstr(dir, "bernoulli") && ot[i]->dtype == want->dtype && ot[i]->rank == want->rank &&
                !memcmp(ot[i]->dims, want->dims, sizeof(int64_t) * want->rank)) {
                kl_tensor_free(want);
                continue;
            }
            if (compare_value(ot[i], want, m2, sizeof m2, 0)) {
                snprintf(msg, mn, "output %d (%s): %s", i, kl_session_output(s, i)->name, m2);
                result = R_FAIL;
            }
            kl_tensor_free(want);
        }
        for (size_t i = 0; i < n_in; i++) kl_tensor_free(it[i]);
        for (size_t i = 0; i < n_out; i++) kl_tensor_free(ot[i]);
        free(it);
        free(ot);
        for (int i = 0; i < ni; i++) free(ins[i]);
        for (int i = 0; i < no; i++) free(outs[i]);
        free(ins);
        free(outs);
    }
    for (int k = 0; k < nsets; k++) free(sets[k]);
    free(sets);
    kl_session_free(s);
    return result;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *only = NULL;
    double min_pass = 0;
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min-pass") && i + 1 < argc) min_pass = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else dir = argv[i];
    }
    if (!dir) {
        fprintf(stderr, "usage: keel-onnx-test DIR [--min-pass PCT] [--only SUBSTR] [-v]\n");
        return 2;
    }
    kl_threads_set(1);
    char **tests;
    int n = list_dir(dir, "test_", &tests);
    if (n <= 0) { printf("FAIL onnx_node_tests: no tests in %s\n", dir); return 1; }
    int pass = 0, fail = 0, unsup = 0, bad = 0, total = 0;
    for (int i = 0; i < n; i++) {
        if (only && !strstr(tests[i], only)) continue;
        char d[4096], msg[1024] = "";
        snprintf(d, sizeof d, "%s/%s", dir, tests[i]);
        int r = -1;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            if (!strcmp(known[k].name, tests[i])) { r = R_BAD; snprintf(msg, sizeof msg, "%s", known[k].why); }
        if (r < 0) r = run_test(d, msg, sizeof msg);
        total++;
        if (r == R_PASS) { pass++; if (verbose) printf("ok %s\n", tests[i]); }
        else if (r == R_BAD) { bad++; printf("known %s: %s\n", tests[i], msg); }
        else if (r == R_UNSUP) { unsup++; if (verbose) printf("UNSUPPORTED %s: %s\n", tests[i], msg); }
        else { fail++; printf("FAIL onnx_node/%s: %s\n", tests[i], msg); }
        fflush(stdout);
    }
    double pct = total ? 100.0 * pass / total : 0;
    printf("onnx node tests: %d/%d passed (%.1f%%), %d unsupported, %d known-bad, %d failed\n", pass, total, pct, unsup, bad, fail);
    if (pct < min_pass) printf("FAIL onnx_node_pass_rate: %.1f%% < %.1f%%\n", pct, min_pass);
    else if (!fail) printf("PASS onnx_node_tests (%d/%d = %.1f%% of all node tests)\n", pass, total, pct);
    for (int i = 0; i < n; i++) free(tests[i]);
    free(tests);
    return fail || pct < min_pass ? 1 : 0;
}
