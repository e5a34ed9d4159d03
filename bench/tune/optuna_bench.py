"""Optuna 3.1 TPE (and random) on the same test functions as tune_bench.c:
prints one JSON line per function with the median over seeds of the best
value found in N trials. Usage: optuna_bench.py [tpe|random] [trials] [seeds]"""
import json, math, sys, statistics
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
M = (1 << 64) - 1

def gauss_from(k):
    k = (k + 0x9e3779b97f4a7c15) & M
    z = ((k ^ (k >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    z ^= z >> 31
    u1 = ((z >> 11) + 1) * 2.0 ** -53
    u2 = (((z * 0x2545F4914F6CDD1D) & M) >> 11) * 2.0 ** -53
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)

def branin(t, k):
    x0, x1 = t.suggest_float("x0", -5, 10), t.suggest_float("x1", 0, 15)
    b, c, r, s, tt = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return (x1 - b * x0 * x0 + c * x0 - r) ** 2 + s * (1 - tt) * math.cos(x0) + s

A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
     [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]
AL = [1.0, 1.2, 3.0, 3.2]

def hartmann6(t, k):
    x = [t.suggest_float("x%d" % i, 0, 1) for i in range(6)]
    return -sum(AL[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j] * 1e-4) ** 2 for j in range(6))) for i in range(4))

def rosenbrock4(t, k):
    x = [t.suggest_float("x%d" % i, -2.048, 2.048) for i in range(4)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3))

def noisy_quadratic(t, k):
    x = [t.suggest_float("x%d" % i, -1, 1) for i in range(3)]
    return sum((v - 0.3) ** 2 for v in x) + 0.1 * gauss_from(k)

OFF, COST = {"a": 0.2, "b": -0.5, "c": 0.8, "d": 0.0}, {"a": 0.3, "b": 0.0, "c": 0.6, "d": 0.1}

def mixed(t, k):
    c = t.suggest_categorical("c", ["a", "b", "c", "d"])
    lr = math.log10(t.suggest_float("lr", 1e-5, 1, log=True))
    n = t.suggest_int("n", 1, 32)
    y = t.suggest_float("y", 0, 1)
    return (lr + 2.5 + OFF[c]) ** 2 + (n - 12) ** 2 / 50.0 + (y - 0.3) ** 2 + COST[c]

FUNCS = [("branin", branin, 0.397887), ("hartmann6", hartmann6, -3.32237), ("rosenbrock4", rosenbrock4, 0),
         ("noisy_quadratic", noisy_quadratic, 0), ("mixed", mixed, 0)]

def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "tpe"
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    for name, f, opt in FUNCS:
        bests = []
        for seed in range(seeds):
            sampler = optuna.samplers.TPESampler(seed=seed) if kind == "tpe" else optuna.samplers.RandomSampler(seed=seed)
            st = optuna.create_study(sampler=sampler)
            st.optimize(lambda t: f(t, seed * 1000003 + t.number), n_trials=trials)
            bests.append(st.best_value)
        print(json.dumps({"function": name, "sampler": "optuna-" + kind, "trials": trials, "seeds": seeds,
                          "median_best": statistics.median(bests), "optimum": opt}), flush=True)

main()
