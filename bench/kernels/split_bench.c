/* A/B of the graph executor's depth-first prefix (exec.c): one ONNX model
 * loaded twice, plans made with the prefix off (A) and on (B), runs of one
 * batch alternated A, B, A, B... in one process, timed by the thread's CPU
 * time at 1 thread (robust to other load on a shared machine), else by the
 * wall clock; prints the
 * min and median ms per image of each side, their ratio, and whether the
 * outputs are bit-identical. The first input takes the batch (others and
 * the other symbolic dimensions: 1), uniform [-1, 1) data.
 * Usage: split_bench MODEL.onnx BATCH ITERS [MODE [THREADS]] (MODE as KEEL_SPLIT:
 * 1 the cost rule (default), 2 the longest separable prefix, k > 2 the
 * cost rule with the weights counted k times). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/core.h"
#include "keel/graph.h"
#include "keel/runtime.h"
#include "keel/tensor.h"

#include "bench_util.h"

extern int kl__plan_split;

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: split_bench MODEL.onnx BATCH ITERS\n");
        return 2;
    }
    int batch = atoi(argv[2]), iters = atoi(argv[3]), mode = argc > 4 ? atoi(argv[4]) : 1;
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    if (batch <= 0 || iters <= 0) return 2;
    kl_err e = {0};
    kl_session_opts o = {threads > 0 ? threads : 1, 1};
    kl_session *s[2] = {0};
    for (int k = 0; k < 2; k++)
        if (kl_session_load(argv[1], &o, &s[k], &e)) { fprintf(stderr, "split_bench: %s\n", e.msg); return 1; }
    size_t ni = kl_session_num_inputs(s[0]), no = kl_session_num_outputs(s[0]);
    if (ni > 8 || no > 8) return 1;
    kl_tensor *in[8], *out[2][8];
    uint64_t seed = 42;
    for (size_t i = 0; i < ni; i++) {
        const kl_value_info *vi = kl_session_input(s[0], i);
        int64_t d[KL_MAX_DIMS];
        for (int r = 0; r < vi->rank; r++) d[r] = vi->dims[r] >= 0 ? vi->dims[r] : r == 0 ? batch : 1;
        if (kl_tensor_new(vi->dtype, vi->rank, d, KL_TAG_OTHER, &in[i], &e)) { fprintf(stderr, "split_bench: %s\n", e.msg); return 1; }
        if (vi->dtype == KL_F32)
            for (int64_t j = 0; j < kl_tensor_numel(in[i]); j++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                ((float *)in[i]->data)[j] = (float)((seed >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
            }
    }
    double *t[2];
    t[0] = malloc(sizeof(double) * (size_t)iters);
    t[1] = malloc(sizeof(double) * (size_t)iters);
    for (int it = -1; it < iters; it++)
        for (int k = 0; k < 2; k++) {
            kl__plan_split = k ? mode : 0; /* read when the plan is made (first run) */
            double c0 = threads > 1 ? now_s() : cpu_s();
            if (kl_session_run(s[k], (const kl_tensor *const *)in, ni, out[k], no, &e)) { fprintf(stderr, "split_bench: %s\n", e.msg); return 1; }
            double c1 = threads > 1 ? now_s() : cpu_s();
            if (it >= 0) t[k][it] = (c1 - c0) * 1e3 / batch;
            if (it < iters - 1)
                for (size_t j = 0; j < no; j++) kl_tensor_free(out[k][j]);
        }
    int same = 1;
    for (size_t j = 0; j < no; j++)
        same &= out[0][j]->nbytes == out[1][j]->nbytes && !memcmp(out[0][j]->data, out[1][j]->data, out[0][j]->nbytes);
    double mn0 = minv(t[0], iters), mn1 = minv(t[1], iters), md0 = median(t[0], iters), md1 = median(t[1], iters);
    printf("batch %d, %d runs, %d thread(s), ms/image (%s): off min %.3f median %.3f | on min %.3f median %.3f | off/on median %.3fx | %s\n",
           batch, iters, o.threads, threads > 1 ? "wall" : "thread CPU", mn0, md0, mn1, md1, md0 / md1, same ? "bit-identical" : "OUTPUTS DIFFER");
    return same ? 0 : 1;
}
