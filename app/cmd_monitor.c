/* keel monitor SUB: the monitoring of served models outside the server.
 * `keel monitor rules MODEL` writes the Prometheus alerting and recording
 * rules of a model (the generation is the library's kl_serve_rules). The
 * subcommand table below is where the others go (`report`: the HTML report,
 * app/cmd_monitor_report.c). See docs/monitoring.md. */
#include "app.h"

#include <keel/serve.h>

#include <stdio.h>
#include <string.h>

/* ==================================================================
 * keel monitor rules MODEL [--repo DIR] [--slo PCT] [--out FILE]
 * ================================================================== */

static const app_opt rules_opts[] = {
    {"repo", 0, 1, "DIR", "model repository that keel serve serves (default: the current folder)", 0},
    {"slo", 0, 1, "PCT",
     "availability objective in percent, e.g. 99.9 (default: the model's config.yaml monitor: slo_availability, "
     "else 99.9)",
     0},
    {"out", 'o', 1, "FILE", "write the rules to FILE (atomically) instead of standard output", 0},
};

static const app_cmd_spec rules_spec = {
    "monitor rules",
    "keel monitor rules MODEL [--repo DIR] [--slo PCT] [--out FILE]",
    "Write Prometheus alerting and recording rules for a served model.",
    "Alerts on feature drift (PSI, Jensen-Shannon, KS and chi-squared p-values per feature and window),\n"
    "data quality (null share above the training rows', unknown categories, values out of the training\n"
    "range), prediction drift, live quality against the version's validation metrics (accuracy, AUC,\n"
    "RMSE; needs monitor: feedback_capacity), and an availability and a latency SLO with the SRE\n"
    "workbook's multi-window, multi-burn-rate alerts (14.4x over 1h and 5m, 6x over 6h and 30m page;\n"
    "3x over 1d and 2h, 1x over 3d and 6h ticket) and their recording rules. Thresholds come from\n"
    "REPO/MODEL/config.yaml's monitor: block, the values the server flags with (defaults where\n"
    "absent; docs/monitoring.md). Drift alerts need min_samples values in the window\n"
    "(keel_feature_window_samples). Check with: promtool check rules FILE.",
    rules_opts,
    KL_ARRAY_LEN(rules_opts),
    1,
    1,
};

static int monitor_rules(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&rules_spec, argc, argv, &a);
    if (rc >= 0) return rc;
    double slo = 0;
    if ((rc = app_get_double(&a, &rules_spec, "slo", 0, &slo)) >= 0) return rc;
    if (app_get(&a, "slo") && !(slo >= 50 && slo <= 99.9999))
        return app_usage_error(&rules_spec, "--slo %s: an objective in percent, 50..99.9999", app_get(&a, "slo"));
    kl_rules_opts o = {app_get(&a, "repo") ? app_get(&a, "repo") : ".", a.pos[0], slo};
    kl_err e = {0};
    kl_buf b;
    kl_buf_init(&b);
    const char *out = app_get(&a, "out");
    rc = kl_serve_rules(&o, &b, &e);
    if (!rc && out) rc = kl_write_file_atomic(out, b.data, b.len, &e);
    else if (!rc && fwrite(b.data, 1, b.len, stdout) != b.len)
        rc = kl_err_set(&e, KL_EINVAL, "writing the rules to standard output failed");
    kl_buf_free(&b);
    if (rc) return app_fail(&e);
    if (out) fprintf(stderr, "wrote %s (check with: promtool check rules %s)\n", out, out);
    return APP_EXIT_OK;
}

/* ==================================================================
 * Dispatch: one row per subcommand
 * ================================================================== */

int cmd_monitor(int argc, char **argv) {
    static const app_command sub[] = {
        {"rules", "Prometheus alerting rules: drift, data quality, live quality, SLO burn rates", monitor_rules},
        {"report", "HTML report of a prediction log: reference vs live histograms, drift, quality, latency",
         cmd_monitor_report},
    };
    return app_dispatch("monitor", sub, KL_ARRAY_LEN(sub), argc, argv);
}
