/* libFuzzer target: the ONNX loader (protobuf -> graph IR -> validation ->
 * optimisation passes), then a plan and a run with small zero inputs when
 * the model loads. A memory budget keeps hostile shapes from exhausting RAM
 * (the allocator refuses; the runtime must report it, not crash). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <keel/graph.h>
#include <keel/onnx.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        kl_mem_set_budget((uint64_t)256 << 20);
        kl_threads_set(1);
        init = 1;
    }
    kl_graph *g = NULL;
    kl_err e = {0};
    if (kl_onnx_load_mem(data, size, "fuzz.onnx", NULL, &g, &e) != KL_OK) {
        kl_err_what(&e);
        return 0;
    }
    if (kl_graph_optimize(g, 1, &e) == KL_OK && g->n_inputs <= 8) {
        kl_tensor *in[8] = {0};
        int ok = 1;
        for (int i = 0; i < g->n_inputs && ok; i++) {
            const kl_value *v = &g->values[g->inputs[i]];
            int64_t d[KL_MAX_DIMS];
            int r = v->rank < 0 ? 0 : v->rank;
            for (int k = 0; k < r; k++) d[k] = v->dims[k] < 0 || v->dims[k] > 64 ? 2 : v->dims[k];
            kl_dtype dt = v->dtype == KL_DTYPE_COUNT ? KL_F32 : v->dtype;
            ok = kl_tensor_new(dt, r, d, KL_TAG_REQUEST, &in[i], &e) == KL_OK;
        }
        kl_plan *p = NULL;
        if (ok && kl_plan_new(g, (const kl_tensor *const *)in, (size_t)g->n_inputs, &p, &e) == KL_OK) {
            uint64_t ab = kl_plan_arena_bytes(p);
            void *arena = ab <= ((uint64_t)64 << 20) ? kl_mem_alloc(ab, KL_TAG_ACTIVATIONS) : NULL;
            if (arena) {
                kl_tensor **outs = calloc((size_t)g->n_outputs + 1, sizeof(kl_tensor *));
                if (outs && kl_plan_run(p, g, (const kl_tensor *const *)in, (size_t)g->n_inputs, outs, (size_t)g->n_outputs, arena, NULL, &e) == KL_OK)
                    for (int i = 0; i < g->n_outputs; i++) kl_tensor_free(outs[i]);
                free(outs);
                kl_mem_free(arena);
            }
            kl_plan_free(p);
        }
        for (int i = 0; i < 8; i++) kl_tensor_free(in[i]);
    }
    kl_graph_free(g);
    return 0;
}
