/* keel monitor report: the monitoring report of a prediction log (keel serve
 * --log-predictions DIR) as one self-contained HTML file (kl_monitor_report:
 * reference vs live histograms, the drift table with its thresholds,
 * quality and latency over time). See docs/monitoring.md. */
#include "app.h"

#include <keel/data.h>
#include <keel/pipeline.h>

#include <stdio.h>
#include <string.h>

static const app_opt opts[] = {
    {"log", 0, 1, "DIR", "the prediction log folder (keel serve --log-predictions DIR)", 0},
    {"since", 0, 1, "T", "only predictions served at or after T (ISO 8601, e.g. 2026-01-31T00:00Z)", 0},
    {"out", 'o', 1, "FILE", "where the report goes (default monitor-report.html)", 0},
};
static const app_cmd_spec spec = {
    "monitor report",
    "keel monitor report --log DIR [--since T] [--out report.html]",
    "Write the monitoring report of a prediction log: one self-contained HTML file.",
    "Per model and version: the reference profile's histograms (profile.json, kept in the log) next\n"
    "to the live ones, the drift table (PSI, JS, KS, chi-squared, null, unknown and out-of-range\n"
    "ratios against the server's thresholds, computed by the server's own monitor), live quality\n"
    "from the feedback labels joined by request id, and latency over time.",
    opts,
    KL_ARRAY_LEN(opts),
    0,
    0};

int cmd_monitor_report(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_monitor_report_opts o = {0};
    o.log_dir = app_get(&a, "log");
    if (!o.log_dir) return app_usage_error(&spec, "--log is required");
    const char *since = app_get(&a, "since"), *out = app_get(&a, "out");
    if (since && kl_parse_timestamp(since, strlen(since), NULL, &o.since_us))
        return app_usage_error(&spec, "--since: expected an ISO 8601 time, got '%s'", since);
    if (!out) out = "monitor-report.html";
    kl_err e = {0};
    kl_buf b;
    kl_buf_init(&b);
    rc = kl_monitor_report(&o, &b, &e);
    if (!rc) rc = kl_write_file_atomic(out, b.data, b.len, &e);
    kl_buf_free(&b);
    if (rc) return app_fail(&e);
    printf("wrote %s\n", out);
    return APP_EXIT_OK;
}
