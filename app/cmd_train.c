/* keel train: trains a model spec (YAML) into an artifacts folder. */
#include "app.h"

#include <keel/train.h>
#include <string.h>

static const app_opt opts[] = {
    {"out", 'o', 1, "DIR", "artifacts folder (model.onnx, meta.json, card.md, metrics.csv, curves.svg, checkpoints/)",
     0},
    {"resume", 0, 0, NULL, "continue from the newest valid checkpoint in DIR/checkpoints", 0},
    {"memory-report", 0, 0, NULL, "print the memory plan (params, grads, optimizer, activations, workspace, peak)", 0},
    {"max-steps", 0, 1, "N", "stop after N optimizer steps (overrides train.max_steps when lower)", 0},
    {"check", 0, 0, NULL, "only validate the spec (shapes, keys) and exit", 0},
    {"quiet", 'q', 0, NULL, "no progress line", 0},
    {"json", 0, 0, NULL, "summary as JSON", 0},
    {"set", 0, 1, "KEY=VALUE", "override a spec key, e.g. --set optimizer.lr=0.01 --set layers.0.out=256", 1},
    {"track", 0, 0, NULL, "log the run to the experiment store, creating it when there is none yet", 0},
    {"no-track", 0, 0, NULL, "do not log the run (default: logged whenever a store is found: keel runs where)", 0},
    {"experiment", 0, 1, "NAME", "experiment of the logged run (default train)", 0},
    {"run-name", 0, 1, "NAME", "name of the logged run (default: the spec's file name)", 0},
    {"distributed", 0, 1, "auto|mpi|off",
     "data-parallel training on MPI: auto (when started by mpirun or srun), mpi (required), off", 0},
    {"no-allreduce", 0, 0, NULL,
     "benchmarks only: skip the gradient all-reduce of a multi-rank run (the ranks diverge)", 0},
    APP_OPT_VERIFY,
};
static const app_cmd_spec spec = {
    "train",
    "keel train SPEC.yaml --out DIR [--set KEY=VALUE]... [--resume] [--memory-report] [--memory-limit SIZE]",
    "Train a model from a YAML spec; write model.onnx and its lineage.",
    "The spec names the input shape, the layers and their wiring, the loss, the optimizer,\n"
    "the schedule, the training settings and the data (.npy X and y, or a Parquet dataset:\n"
    "data.dataset/label/features/split). Same spec + data + seed\n"
    "gives bit-identical weights at any thread count. --memory-limit (global) makes a plan\n"
    "above it fail before training. The run is logged to the experiment store whenever one\n"
    "is found ('keel runs where'; --no-track: not logged), and meta.json records its run id\n"
    "so 'keel models register' links the version to it. Started by 'mpirun -np N' (or srun),\n"
    "N ranks train one model data-parallel (--threads is per rank; rank 0 writes DIR).\n"
    "See docs/training.md.",
    opts,
    KL_ARRAY_LEN(opts),
    1,
    1};

int cmd_train(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    kl_err e = {0};
    if (app_flag(&a, "check")) {
        if (kl_train_check(a.pos[0], &e)) return app_fail(&e);
        printf("%s: ok\n", a.pos[0]);
        return APP_EXIT_OK;
    }
    const char *out = app_get(&a, "out");
    if (!out) return app_usage_error(&spec, "--out DIR is required");
    int64_t max_steps;
    if ((rc = app_get_int(&a, &spec, "max-steps", 0, &max_steps)) >= 0) return rc;
    kl_train_opts o = {0};
    o.out_dir = out;
    o.resume = app_flag(&a, "resume");
    o.memory_report = app_flag(&a, "memory-report");
    o.max_steps = max_steps;
    if ((rc = app_get_verify(&a, &spec, &o.verify)) >= 0) return rc;
    o.quiet = app_flag(&a, "quiet");
    o.json = app_flag(&a, "json");
    const char *dist = app_get(&a, "distributed");
    if (dist && strcmp(dist, "auto") && strcmp(dist, "mpi") && strcmp(dist, "off"))
        return app_usage_error(&spec, "--distributed: auto, mpi or off, got '%s'", dist);
    o.distributed = !dist || !strcmp(dist, "auto") ? KL_TRAIN_DIST_AUTO
        : !strcmp(dist, "mpi")                     ? KL_TRAIN_DIST_MPI
                                                   : KL_TRAIN_DIST_OFF;
    o.dist_no_allreduce = app_flag(&a, "no-allreduce");
    const char *sets[APP_MAX_VALUES];
    o.nsets = app_get_all(&a, "set", sets, APP_MAX_VALUES);
    o.sets = sets;
    uint64_t lim = 0;
    if (app_config() && kl_config_get(app_config(), "memory.limit") && kl_config_get_size(app_config(), "memory.limit", &lim, &e)) return app_fail(&e);
    o.memory_limit = lim;
    if (lim) kl_mem_set_budget(0); /* checked against the plan up front, then enforced */
    /* the run is logged whenever a store is found: --tracking, KEEL_TRACKING,
     * a keel-runs/ folder here or above, or the per-user default once it
     * exists; --track creates the per-user default */
    if (app_flag(&a, "track") && app_flag(&a, "no-track"))
        return app_usage_error(&spec, "--track and --no-track contradict each other");
    kl_store_loc loc;
    if (!app_flag(&a, "no-track")) {
        if (app_store_resolve(&loc, &e)) return app_fail(&e);
        if (app_flag(&a, "track") || loc.exists || loc.rule != KL_STORE_USER) {
            o.tracking = loc.dir;
            o.tracking_how = loc.how;
        }
    }
    o.experiment = app_get(&a, "experiment");
    o.run_name = app_get(&a, "run-name");
    int64_t run_id = 0;
    o.run_id_out = &run_id;
    if (kl_train_run(a.pos[0], &o, &e)) return app_fail(&e);
    if (run_id && !o.json) printf("logged run %lld to %s\n", (long long)run_id, o.tracking);
    return APP_EXIT_OK;
}
