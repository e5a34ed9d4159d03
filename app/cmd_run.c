/* keel run: runs an ONNX model on input tensors (.npy or ONNX TensorProto
 * .pb files) and writes every output as DIR/<output name>.npy. */
#include "app.h"

#include <stdlib.h>
#include <string.h>

#include <keel/onnx.h>
#include <keel/runtime.h>

static const app_opt opts[] = {
    {"input", 'i', 1, "NAME=FILE", "input tensor (.npy or .pb); FILE alone for a one-input model", 1},
    {"output-dir", 'o', 1, "DIR", "where to write <output>.npy (required)", 0},
    {"json", 0, 0, NULL, "print the outputs as JSON (name, dtype, shape, path)", 0},
};
static const app_cmd_spec spec = {
    "run", "keel run MODEL --input NAME=FILE ... --output-dir DIR [--threads N] [--json]",
    "Run an ONNX model on input tensors and write its outputs as .npy files.",
    "Input files ending in .npy are NumPy arrays; anything else is read as a\n"
    "serialized ONNX TensorProto (the format of the ONNX test suite). Output\n"
    "names are sanitised for the file system ('/' and ':' become '_').",
    opts, KL_ARRAY_LEN(opts), 1, 1};

static void safe_name(const char *in, char *out, size_t n) {
    size_t k = 0;
    for (; *in && k + 1 < n; in++) out[k++] = (*in == '/' || *in == ':' || *in == '\\') ? '_' : *in;
    out[k] = 0;
}

int cmd_run(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *dir = app_get(&a, "output-dir");
    if (!dir) return app_usage_error(&spec, "--output-dir is required");
    kl_err e = {0};
    kl_session *s = NULL;
    kl_tensor **in = NULL, **out = NULL;
    size_t ni = 0, no = 0;
    int ret = APP_EXIT_FAIL;
    if (kl_session_load(a.pos[0], NULL, &s, &e)) return app_fail(&e);
    ni = kl_session_num_inputs(s);
    no = kl_session_num_outputs(s);
    in = calloc(ni + 1, sizeof(kl_tensor *));
    out = calloc(no + 1, sizeof(kl_tensor *));
    const char *vals[APP_MAX_VALUES];
    int nv = app_get_all(&a, "input", vals, APP_MAX_VALUES);
    for (int i = 0; i < nv; i++) {
        const char *eq = strchr(vals[i], '=');
        int idx;
        const char *file;
        if (!eq) {
            if (ni != 1) { ret = app_usage_error(&spec, "--input %s: use NAME=FILE (the model has %zu inputs)", vals[i], ni); goto done; }
            idx = 0;
            file = vals[i];
        } else {
            char name[512];
            snprintf(name, sizeof name, "%.*s", (int)(eq - vals[i]), vals[i]);
            idx = kl_session_input_index(s, name);
            if (idx < 0) {
                kl_buf b;
                kl_buf_init(&b);
                for (size_t k = 0; k < ni; k++) kl_buf_printf(&b, "%s%s", k ? ", " : "", kl_session_input(s, k)->name);
                ret = app_usage_error(&spec, "the model has no input '%s' (inputs: %s)", name, b.data ? b.data : "");
                kl_buf_free(&b);
                goto done;
            }
            file = eq + 1;
        }
        kl_tensor_free(in[idx]);
        in[idx] = NULL;
        if (kl_onnx_tensor_read(file, &in[idx], &e)) { ret = app_fail(&e); goto done; }
    }
    for (size_t i = 0; i < ni; i++)
        if (!in[i]) { ret = app_usage_error(&spec, "input '%s' is missing (--input %s=FILE)", kl_session_input(s, i)->name, kl_session_input(s, i)->name); goto done; }
    if (kl_session_run(s, (const kl_tensor *const *)in, ni, out, no, &e)) { ret = app_fail(&e); goto done; }
    if (kl_mkdir_p(dir, &e)) { ret = app_fail(&e); goto done; }
    int json = app_flag(&a, "json");
    if (json) printf("{\"outputs\":[");
    for (size_t i = 0; i < no; i++) {
        char nm[512], path[4096], sh[256];
        safe_name(kl_session_output(s, i)->name, nm, sizeof nm);
        snprintf(path, sizeof path, "%s/%s.npy", dir, nm);
        if (kl_npy_save(path, out[i], &e)) { ret = app_fail(&e); goto done; }
        kl_shape_str(out[i]->rank, out[i]->dims, sh, sizeof sh);
        if (json) {
            kl_buf b;
            kl_buf_init(&b);
            kl_buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
            kl_buf_json_str(&b, kl_session_output(s, i)->name);
            kl_buf_printf(&b, ",\"dtype\":\"%s\",\"shape\":%s,\"path\":", kl_dtype_name(out[i]->dtype), sh);
            kl_buf_json_str(&b, path);
            kl_buf_puts(&b, "}");
            fputs(b.data, stdout);
            kl_buf_free(&b);
        } else {
            printf("%s %s %s -> %s\n", kl_session_output(s, i)->name, kl_dtype_name(out[i]->dtype), sh, path);
        }
    }
    if (json) printf("]}\n");
    ret = APP_EXIT_OK;
done:
    for (size_t i = 0; i < ni; i++) kl_tensor_free(in[i]);
    for (size_t i = 0; i < no; i++) kl_tensor_free(out[i]);
    free(in);
    free(out);
    kl_session_free(s);
    return ret;
}
