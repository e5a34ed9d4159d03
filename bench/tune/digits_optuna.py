"""Optuna 3.1 TPE on the same real objective as `keel tune`: each trial runs
`keel train bench/tune/digits_spec.yaml --set ...` and its objective is the
best val_accuracy over epochs. Prints a JSON line with the best value and the
total training time. Usage: digits_optuna.py KEEL WORKDIR TRIALS SEED"""
import csv, json, os, subprocess, sys, time
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
keel, work, trials, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
spec = os.path.join(work, "digits_spec.yaml")

def objective(t):
    sets = {"optimizer.lr": "%.6g" % t.suggest_float("optimizer.lr", 1e-4, 0.1, log=True),
            "optimizer.weight_decay": "%.6g" % t.suggest_float("optimizer.weight_decay", 1e-5, 0.1, log=True),
            "layers.0.out": str(t.suggest_int("layers.0.out", 16, 256, step=16)),
            "layers.2.p": "%.6g" % t.suggest_float("layers.2.p", 0, 0.6)}
    out = os.path.join(work, "optuna", "trial-%d" % t.number)
    cmd = [keel, "train", spec, "--out", out, "--quiet"]
    for k, v in sets.items():
        cmd += ["--set", "%s=%s" % (k, v)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    best = 0.0
    with open(os.path.join(out, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            if row["split"] == "val" and row["accuracy"]:
                best = max(best, float(row["accuracy"]))
    return best

t0 = time.time()
st = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
st.optimize(objective, n_trials=trials)
print(json.dumps({"sampler": "optuna-tpe", "seed": seed, "best": st.best_value, "seconds": time.time() - t0}))
