/* keel eval: evaluates a trained model folder on .npy data: accuracy, AUC
 * (binary), loss and the confusion matrix. */
#include "app.h"

#include <keel/train.h>
#include <string.h>

static const app_opt opts[] = {
    {"data", 'd', 1, "X.npy,y.npy", "features and labels", 0},
    {"shards", 0, 1, "DIR", "an image shard set (keel pack) instead of --data", 0},
    {"logits", 0, 1, "FILE.npy", "also write the model outputs (rows, outputs) as .npy", 0},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec spec = {"eval", "keel eval DIR (--data X.npy,y.npy | --shards DIR) [--logits OUT.npy] [--json]",
                                  "Evaluate a model trained by keel train: accuracy / AUC / loss and a confusion matrix.",
                                  NULL, opts, KL_ARRAY_LEN(opts), 1, 1};

int cmd_eval(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    const char *data = app_get(&a, "data"), *shards = app_get(&a, "shards");
    kl_err e = {0};
    if (shards && data) return app_usage_error(&spec, "give --data or --shards, not both");
    if (shards) {
        if (kl_train_eval_shards(a.pos[0], shards, app_flag(&a, "json"), app_get(&a, "logits"), stdout, &e)) return app_fail(&e);
        return APP_EXIT_OK;
    }
    if (!data) return app_usage_error(&spec, "--data X.npy,y.npy (or --shards DIR) is required");
    const char *comma = strchr(data, ',');
    if (!comma || comma == data || !comma[1]) return app_usage_error(&spec, "--data takes X.npy,y.npy");
    char xp[4096];
    snprintf(xp, sizeof xp, "%.*s", (int)(comma - data), data);
    if (kl_train_eval(a.pos[0], xp, comma + 1, app_flag(&a, "json"), app_get(&a, "logits"), stdout, &e)) return app_fail(&e);
    return APP_EXIT_OK;
}
