/* libFuzzer target: the run filter language and sort keys. Every input must
 * either compile to SQL that SQLite accepts and runs (KL_OK) or be refused
 * as a parse error with a column inside the input (KL_EPARSE); anything else
 * (an SQL error from generated text, a crash) is a finding. */
#include <keel/track.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kl_track *store;

static void setup(void) {
    char dir[] = "/tmp/keel-fuzz-track-XXXXXX";
    kl_err e = {0};
    if (!mkdtemp(dir) || kl_track_open(dir, &store, &e)) abort();
    kl_track_run *r = NULL;
    if (kl_track_run_start(store, "exp", "r", 0, &r, &e)) abort();
    kl_kv p[] = {{"lr", "0.001"}};
    kl_metric_point m[] = {{"acc", 1, 0, 0.5}, {"loss", 1, 0, 0.0 / 0.0}};
    if (kl_track_log_params(r, p, 1, &e) || kl_track_log_metrics(r, m, 2, &e) || kl_track_set_tag(r, "team", "ads", &e)) abort();
    kl_track_run_end(r, KL_RUN_FINISHED, &e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!store) setup();
    if (size > 4096) return 0;
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    size_t len = strlen(s); /* up to an embedded NUL */
    kl_err e = {0};
    int64_t *ids = NULL;
    size_t n = 0;
    /* the first line is the filter, the rest (if any) the sort key */
    char *nl = strchr(s, '\n');
    const char *sort = NULL;
    if (nl) {
        *nl = 0;
        sort = nl + 1;
        len = strlen(s);
    }
    int rc = kl_track_runs_find(store, s, sort, 10, &ids, &n, &e);
    if (rc != KL_OK && rc != KL_EPARSE && rc != KL_EINVAL) {
        fprintf(stderr, "filter '%s' sort '%s': %d %s\n", s, sort ? sort : "", rc, kl_err_what(&e));
        abort();
    }
    if (rc == KL_EPARSE && *s && (e.col < 1 || (size_t)e.col > len + 1)) {
        fprintf(stderr, "filter '%s': column %d outside 1..%zu\n", s, e.col, len + 1);
        abort();
    }
    free(ids);
    free(s);
    return 0;
}
