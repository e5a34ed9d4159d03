/* bench/serve/json_bench.c: time of the KServe request reader on the bench's
 * 784-number FP32 request body (kl_json_doc_parse with packed arrays, then the
 * FP32 pass), min and median over rounds of parses. Built and run by
 * bench/serve/json_bench.sh. Usage: json_bench BODY.json [ROUNDS] [PARSES] */
#include "../../src/serve/serve_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: json_bench BODY.json [ROUNDS] [PARSES]\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    int rounds = argc > 2 ? atoi(argv[2]) : 100, parses = argc > 3 ? atoi(argv[3]) : 100;
    double *t = calloc((size_t)rounds, sizeof *t);
    float *dst = malloc(1 << 20);
    double sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_us();
        for (int i = 0; i < parses; i++) {
            kl_json_doc *d = NULL;
            kl_err e = {0};
            if (kl_json_doc_parse(text, len, "request body", KL_JSON_PACK | KL_JSON_KEEP_NUL, &d, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            const cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(kl_json_doc_root(d), "inputs"), 0);
            const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
            size_t n = kl_json_packed_count(data);
            if (!n) { fprintf(stderr, "data is not a packed array\n"); return 1; }
            kl_json_packed_f32(data, dst);
            sink += dst[n - 1];
            kl_json_doc_free(d);
        }
        t[r] = (now_us() - t0) / parses;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp);
    printf("parse of %zu bytes: min %.2f us, median %.2f us (%d x %d)%s\n", len, t[0], t[rounds / 2], rounds, parses,
           sink == 12345.678 ? " " : "");
    free(t);
    free(dst);
    return 0;
}
