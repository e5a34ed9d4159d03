/* keel eval: evaluates a trained model folder on .npy data or on its Parquet
 * source (a split of the dataset it was trained on): loss, accuracy, the
 * confusion matrix and per-class precision/recall/F1; for binary models AUC,
 * ROC and PR points, calibration and thresholds; for regression MAE, RMSE and
 * R2 against the mean predictor (src/train/metrics.c). */
#include "app.h"

#include <keel/train.h>
#include <stdlib.h>
#include <string.h>

static const app_opt opts[] = {
    {"data", 'd', 1, "X.npy,y.npy", "features and labels (.npy)", 0},
    {"dataset", 0, 1, "PATH", "Parquet source (default: the dataset the model was trained on, from meta.json)", 0},
    {"split", 0, 1, "NAME", "split of the Parquet source: test (default), val, train or all", 0},
    {"shards", 0, 1, "DIR", "an image shard set (keel pack) instead of --data", 0},
    {"logits", 0, 1, "FILE.npy", "also write the model outputs (rows, outputs) as .npy", 0},
    {"roc", 0, 0, NULL, "with --json: include the ROC and precision-recall points", 0},
    {"threshold", 0, 1, "P", "binary: also precision/recall/F1 at this probability threshold (the F1-optimal one is always shown)", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec spec = {"eval", "keel eval DIR [--data X.npy,y.npy | --dataset PATH [--split test] | --shards DIR] [--threshold P] [--logits OUT.npy] [--json [--roc]]",
                                  "Evaluate a model trained by keel train: loss, accuracy, AUC, precision/recall/F1 per class,\n"
                                  "calibration (Brier, ECE, reliability) and thresholds for binary models, MAE/RMSE/R2 against\n"
                                  "the mean predictor for regression, and a confusion matrix.",
                                  "Without --data the rows come from the model's Parquet source (data.dataset in its\n"
                                  "spec) and the split named by --split (the spec's data.split decides the rows).",
                                  opts, KL_ARRAY_LEN(opts), 1, 1};

int cmd_eval(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *data = app_get(&a, "data"), *shards = app_get(&a, "shards");
    kl_err e = {0};
    if (shards && (data || app_get(&a, "dataset") || app_get(&a, "split")))
        return app_usage_error(&spec, "--shards takes no --data, --dataset or --split");
    if (shards) {
        if (kl_train_eval_shards(a.pos[0], shards, app_flag(&a, "json"), app_get(&a, "logits"), stdout, &e)) return app_fail(&e);
        return APP_EXIT_OK;
    }
    kl_eval_opts o = {0};
    char xp[4096];
    if (data) {
        const char *comma = strchr(data, ',');
        if (!comma || comma == data || !comma[1]) return app_usage_error(&spec, "--data takes X.npy,y.npy");
        snprintf(xp, sizeof xp, "%.*s", (int)(comma - data), data);
        o.x_path = xp;
        o.y_path = comma + 1;
    }
    o.dataset = app_get(&a, "dataset");
    o.split = app_get(&a, "split");
    o.logits_out = app_get(&a, "logits");
    o.with_roc = app_flag(&a, "roc");
    const char *th = app_get(&a, "threshold");
    if (th) {
        char *end;
        o.threshold = strtod(th, &end);
        if (*end || !(o.threshold >= 0 && o.threshold <= 1)) return app_usage_error(&spec, "--threshold takes a probability in [0, 1]");
        o.has_threshold = 1;
    }
    if ((rc = app_get_verify(&a, &spec, &o.verify)) >= 0) return rc;
    if (kl_train_eval_print(a.pos[0], &o, app_flag(&a, "json"), stdout, &e)) return app_fail(&e);
    return APP_EXIT_OK;
}
