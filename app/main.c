/* keel: the command-line entry point. Global options, the command table,
 * dispatch, exit codes (0 success, 1 failure, 2 usage error). */
#include "app.h"

#include <stdlib.h>
#include <string.h>

static const app_command commands[] = {
    {"bench", "benchmark an ONNX model: latency percentiles, throughput, memory", cmd_bench},
    {"config", "show effective settings and where each came from", cmd_config},
    {"data", "look at datasets: head, show, stats, validate, report", cmd_data},
    {"datagen", "generate deterministic synthetic data sets (defects: metal-surface images)", cmd_datagen},
    {"doctor", "check whether this machine is ready for AI work", cmd_doctor},
    {"eval", "evaluate a trained model: loss, accuracy, AUC, per-class F1, calibration, regression errors", cmd_eval},
    {"features", "fit, apply and serve declared features (offline == online)", cmd_features},
    {"ingest", "validate CSV/JSONL sources and publish a Parquet dataset version", cmd_ingest},
    {"inspect", "describe an ONNX model: inputs, outputs, ops, parameters, FLOPs, memory", cmd_inspect},
    {"loader", "measure the image data loader on a shard set (images/s, decode, wait share)", cmd_loader},
    {"models", "model registry: register, list, show, verify, alias, history", cmd_models},
    {"monitor", "monitoring of served models: Prometheus alert rules, HTML report of a prediction log", cmd_monitor},
    {"pack", "pack a folder of images into mmap-able shard files for the data loader", cmd_pack},
    {"pipeline", "raw data to a served model: ingest, validate, features, train, evaluate, export, register",
     cmd_pipeline},
    {"run", "run an ONNX model on .npy/.pb inputs, write .npy outputs", cmd_run},
    {"runs", "experiment runs: list, show, compare, plot, export", cmd_runs},
    {"schema", "infer or check an ingest schema (types, constraints, dialect)", cmd_schema},
    {"serve", "serve models over HTTP (KServe v2, priorities, batching, metrics)", cmd_serve},
    {"train", "train a model from a YAML spec (deterministic, resumable)", cmd_train},
    {"tune", "hyperparameter search over a training spec (TPE, pruning, resumable)", cmd_tune},
    {"ui", "read-only web UI over runs and models", cmd_ui},
    {"version", "version, build and linked library versions", cmd_version},
};

/* Options every command accepts, anywhere on the line; they set the
 * settings of the same name (flag > KEEL_* environment > spec > default). */
static const char *const global_flags[] = {"--threads",   "--log-level",    "--log-format",     "--tracking",
                                           "--artifacts", "--memory-limit", "--memory-snapshot"};

static kl_config *config;
kl_config *app_config(void) { return config; }

static void usage(FILE *out) {
    fprintf(out,
            "Usage: keel [global options] COMMAND [options]\n\n"
            "keel takes raw data to a served model: ingestion with validation, features,\n"
            "deterministic training, an ONNX runtime, serving, tracking and tuning.\n\n"
            "Commands:\n");
    app_print_commands(NULL, commands, KL_ARRAY_LEN(commands), out);
    fprintf(out,
            "\nGlobal options (any command; also KEEL_* environment variables):\n"
            "  --threads N            worker threads (KEEL_THREADS; default: online cores)\n"
            "  --log-level LEVEL      trace, debug, info, warn, error, off (KEEL_LOG_LEVEL)\n"
            "  --log-format FORMAT    auto, text, json (KEEL_LOG_FORMAT)\n"
            "  --tracking DIR         experiment store (KEEL_TRACKING; default: the nearest keel-runs/\n"
            "                         here or above, else ~/.local/share/keel/runs; keel runs where),\n"
            "                         or a PostgreSQL server: postgresql://user@host:port/db\n"
            "  --artifacts DIR        object folder of a PostgreSQL store, a path every machine\n"
            "                         mounts (KEEL_ARTIFACTS)\n"
            "  --memory-limit SIZE    memory budget: 512M, 2G, 70%% (KEEL_MEMORY_LIMIT)\n"
            "  --memory-snapshot PATH snapshot written when the budget refuses an allocation\n"
            "  -h, --help             help (also 'keel COMMAND --help')\n"
            "  --version              same as 'keel version'\n");
}

/* Removes global options from argv, applying them to the config. Returns -1
 * to continue or an exit code. */
static int take_globals(int *argc, char **argv) {
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) { /* keep the rest as is */
            while (i < *argc) argv[out++] = argv[i++];
            break;
        }
        size_t k;
        const char *val = NULL;
        for (k = 0; k < KL_ARRAY_LEN(global_flags); k++) {
            size_t n = strlen(global_flags[k]);
            if (!strncmp(a, global_flags[k], n) && (a[n] == 0 || a[n] == '=')) {
                if (a[n] == '=') val = a + n + 1;
                break;
            }
        }
        if (k == KL_ARRAY_LEN(global_flags)) { argv[out++] = argv[i]; continue; }
        if (!val) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "keel: option %s needs a value\n", global_flags[k]);
                return APP_EXIT_USAGE;
            }
            val = argv[++i];
        }
        kl_err e = {0};
        if (kl_config_set_flag(config, global_flags[k], val, &e)) {
            fprintf(stderr, "keel: %s\n", kl_err_what(&e));
            return APP_EXIT_USAGE;
        }
    }
    *argc = out;
    argv[out] = NULL;
    return -1;
}

int main(int argc, char **argv) {
    config = kl_config_new();
    if (!config || kl_config_define_common(config)) {
        fprintf(stderr, "keel: out of memory\n");
        return APP_EXIT_FAIL;
    }
    kl_err e = {0};
    if (kl_config_load_env(config, &e)) {
        fprintf(stderr, "keel: %s\n", kl_err_what(&e));
        return APP_EXIT_USAGE;
    }
    int rc = take_globals(&argc, argv);
    if (rc >= 0) return rc;
    /* --artifacts reaches every store this process opens (train's run log, a
     * pipeline's stages) and the processes it starts (tune's trials) */
    if (kl_config_source(config, "artifacts") == KL_SRC_FLAG)
        setenv("KEEL_ARTIFACTS", kl_config_get(config, "artifacts"), 1);
    if (kl_config_apply_common(config, &e)) {
        fprintf(stderr, "keel: %s\n", kl_err_what(&e));
        return APP_EXIT_USAGE;
    }
    if (argc < 2) {
        usage(stderr);
        return APP_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (argc > 2 && strcmp(cmd, "help") == 0) {
            char *hargv[] = {argv[2], "--help", NULL};
            for (size_t i = 0; i < KL_ARRAY_LEN(commands); i++)
                if (!strcmp(argv[2], commands[i].name)) return commands[i].fn(2, hargv);
        }
        usage(stdout);
        return APP_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) return cmd_version(1, argv + 1);
    for (size_t i = 0; i < KL_ARRAY_LEN(commands); i++)
        if (!strcmp(cmd, commands[i].name)) {
            rc = commands[i].fn(argc - 1, argv + 1);
            kl_config_free(config);
            return rc;
        }
    const char *cands[KL_ARRAY_LEN(commands)];
    for (size_t i = 0; i < KL_ARRAY_LEN(commands); i++) cands[i] = commands[i].name;
    const char *sug = cmd[0] == '-' ? NULL : kl_suggest(cmd, cands, KL_ARRAY_LEN(commands));
    if (cmd[0] == '-') fprintf(stderr, "keel: unknown option %s\n", cmd);
    else if (sug) fprintf(stderr, "keel: unknown command '%s' (did you mean '%s'?)\n", cmd, sug);
    else fprintf(stderr, "keel: unknown command '%s'\n", cmd);
    fprintf(stderr, "Try 'keel --help'.\n");
    return APP_EXIT_USAGE;
}
