/* One NCHWc dense conv layer, timed alone: thread CPU time (1 thread) or
 * wall time (more), min and median, with the packed weights hot (reused
 * every run) or cold (12 copies in turn plus a 64 MB sweep between runs, as
 * a network's weights at batch 1, which do not fit the caches).
 * Usage: layer_bench C M H k stride batch threads iters cold [pool]
 * (square input H x H, pads k/2, bias + ReLU fused; C = 3 takes plain NCHW
 * input as a network's first conv; pool 1: then a 3x3/2 pad 1 max pooling
 * as ResNet's stem, 2: the same fused, kl_nchwc_conv_maxpool_f32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel/core.h"
#include "keel/tensor.h"

#include "bench_util.h"

int main(int argc, char **argv) {
    if (argc < 10) {
        fprintf(stderr, "usage: layer_bench C M H k stride batch threads iters cold\n");
        return 2;
    }
    int C = atoi(argv[1]), M = atoi(argv[2]), H = atoi(argv[3]), k = atoi(argv[4]), s = atoi(argv[5]);
    int batch = atoi(argv[6]), th = atoi(argv[7]), iters = atoi(argv[8]), cold = atoi(argv[9]);
    int pmode = argc > 10 ? atoi(argv[10]) : 0;
    if (C <= 0 || M <= 0 || H <= 0 || k <= 0 || s <= 0 || batch <= 0 || th <= 0 || iters <= 0) return 2;
    kl_conv_params p;
    memset(&p, 0, sizeof p);
    p.nsp = 2; p.N = batch; p.C = C; p.M = M; p.group = 1;
    p.in[0] = p.in[1] = H;
    p.k[0] = p.k[1] = k;
    p.stride[0] = p.stride[1] = s;
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = k / 2;
    p.act.kind = KL_ACT_RELU;
    if (kl_conv_prepare(&p, NULL) || !kl_nchwc_conv_packed_floats(&p)) {
        fprintf(stderr, "layer_bench: conv not supported on the blocked path (no AVX-512F?)\n");
        return 1;
    }
    int plain = C == 3;
    int64_t CB = (C + 15) / 16, MB = (M + 15) / 16;
    size_t xn = plain ? (size_t)batch * C * H * H : (size_t)batch * CB * H * H * 16;
    size_t yn = (size_t)batch * MB * p.out[0] * p.out[1] * 16, wn = (size_t)M * C * k * k;
    float *x = rnd(xn), *w = rnd(wn), *b = rnd((size_t)M), *y = rnd(yn);
    size_t pfb = kl_nchwc_conv_packed_floats(&p);
    int nw = cold ? 12 : 1;
    float *pw[12];
    for (int i = 0; i < nw; i++) {
        pw[i] = kl_mem_alloc(pfb * sizeof(float), KL_TAG_PARAMS);
        kl_nchwc_conv_pack_weights(&p, w, pw[i]);
    }
    size_t jn = (size_t)16 << 20;
    float *junk = cold ? rnd(jn) : NULL;
    kl_pooling_params q;
    memset(&q, 0, sizeof q);
    q.nsp = 2; q.N = batch; q.C = M;
    q.in[0] = p.out[0]; q.in[1] = p.out[1];
    q.k[0] = q.k[1] = 3; q.stride[0] = q.stride[1] = 2; q.dilation[0] = q.dilation[1] = 1;
    q.pad_begin[0] = q.pad_begin[1] = q.pad_end[0] = q.pad_end[1] = 1;
    if (pmode && (kl_pooling_prepare(&q, NULL) || (pmode == 2 && !kl_nchwc_conv_maxpool_ok(&p, &q)))) {
        fprintf(stderr, "layer_bench: no fused conv + pool for this conv\n");
        return 1;
    }
    float *yp = pmode ? rnd((size_t)batch * MB * q.out[0] * q.out[1] * 16) : NULL;
    size_t wsb = pmode == 2 ? kl_nchwc_conv_maxpool_workspace_bytes(&p, &q) : kl_nchwc_conv_workspace_bytes(&p, plain);
    void *ws = wsb ? kl_mem_alloc(wsb, KL_TAG_WORKSPACE) : NULL;
    kl_pool *pool;
    if (kl_pool_new(th, &pool, NULL)) return 1;
    double *t = malloc((size_t)iters * sizeof(double));
    volatile float sink = 0;
    for (int it = -2; it < iters; it++) {
        if (cold)
            for (size_t i = 0; i < jn; i += 16) sink += junk[i];
        p.packed_w = pw[(it + 2) % nw];
        double a0 = now_s(), c0 = cpu_s();
        if (pmode == 2) kl_nchwc_conv_maxpool_f32(&p, plain, &q, x, b, yp, ws, pool, NULL);
        else kl_nchwc_conv_f32(&p, plain, x, b, y, ws, pool, NULL);
        if (pmode == 1) kl_nchwc_maxpool_f32(&q, y, yp, pool);
        double a1 = now_s(), c1 = cpu_s();
        if (it >= 0) t[it] = (th == 1 ? c1 - c0 : a1 - a0) * 1e3;
    }
    qsort(t, (size_t)iters, sizeof *t, cmpd);
    double gf = 2.0 * (double)wn * (double)(p.out[0] * p.out[1]) * batch * 1e-9;
    printf("C%d M%d H%d k%d s%d%s batch %d threads %d %s: min %.3f median %.3f ms (%.0f GFLOP/s at the median)\n", C, M,
           H, k, s, pmode == 2 ? " +pool fused" : pmode ? " +pool" : "", batch, th, cold ? "cold weights" : "hot weights", t[0], t[iters / 2], gf / t[iters / 2] * 1e3);
    kl_pool_free(pool);
    return 0;
}
