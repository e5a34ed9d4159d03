/* The standard test functions of the tuning benchmark (minimised), shared by
 * the keel driver; bench/tune/optuna_bench.py has the same definitions. */
#include <math.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *space_yaml;
    double optimum;
    double (*f)(const double *x, unsigned long long noise_key);
} bench_fn;

static double branin(const double *x, unsigned long long k) {
    double a = 1, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6, s = 10, t = 1 / (8 * M_PI);
    double u = x[1] - b * x[0] * x[0] + c * x[0] - r;
    return a * u * u + s * (1 - t) * cos(x[0]) + s;
}

static double hartmann6(const double *x, unsigned long long k) {
    static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14},
                                   {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}};
    static const double P[4][6] = {{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
                                   {2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}};
    static const double al[4] = {1.0, 1.2, 3.0, 3.2};
    double s = 0;
    for (int i = 0; i < 4; i++) {
        double in = 0;
        for (int j = 0; j < 6; j++) in += A[i][j] * (x[j] - P[i][j] * 1e-4) * (x[j] - P[i][j] * 1e-4);
        s += al[i] * exp(-in);
    }
    return -s;
}

static double rosenbrock4(const double *x, unsigned long long k) {
    double s = 0;
    for (int i = 0; i < 3; i++) s += 100 * (x[i + 1] - x[i] * x[i]) * (x[i + 1] - x[i] * x[i]) + (1 - x[i]) * (1 - x[i]);
    return s;
}

/* noise: a deterministic N(0, 0.1^2) from the key, so reruns agree */
static double gauss_from(unsigned long long k) {
    k += 0x9e3779b97f4a7c15ull;
    unsigned long long z = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u1 = ((z >> 11) + 1) * 0x1.0p-53, u2 = ((z * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static double noisy_quadratic(const double *x, unsigned long long k) {
    double s = 0;
    for (int i = 0; i < 3; i++) s += (x[i] - 0.3) * (x[i] - 0.3);
    return s + 0.1 * gauss_from(k);
}

/* mixed: a categorical that shifts the optimum and adds a cost, an int and a log float */
static double mixed(const double *x, unsigned long long k) {
    static const double off[4] = {0.2, -0.5, 0.8, 0.0}, cost[4] = {0.3, 0.0, 0.6, 0.1};
    int c = (int)x[0];
    double lr = log10(x[1]), n = x[2], y = x[3];
    return (lr + 2.5 + off[c]) * (lr + 2.5 + off[c]) + (n - 12) * (n - 12) / 50.0 + (y - 0.3) * (y - 0.3) + cost[c];
}

static const bench_fn bench_fns[] = {
    {"branin", "x0: {type: float, low: -5, high: 10}\nx1: {type: float, low: 0, high: 15}\n", 0.397887, branin},
    {"hartmann6",
     "x0: {type: float, low: 0, high: 1}\nx1: {type: float, low: 0, high: 1}\nx2: {type: float, low: 0, high: 1}\n"
     "x3: {type: float, low: 0, high: 1}\nx4: {type: float, low: 0, high: 1}\nx5: {type: float, low: 0, high: 1}\n",
     -3.32237, hartmann6},
    {"rosenbrock4",
     "x0: {type: float, low: -2.048, high: 2.048}\nx1: {type: float, low: -2.048, high: 2.048}\n"
     "x2: {type: float, low: -2.048, high: 2.048}\nx3: {type: float, low: -2.048, high: 2.048}\n",
     0, rosenbrock4},
    {"noisy_quadratic",
     "x0: {type: float, low: -1, high: 1}\nx1: {type: float, low: -1, high: 1}\nx2: {type: float, low: -1, high: 1}\n",
     0, noisy_quadratic},
    {"mixed",
     "c: {type: categorical, choices: [a, b, c, d]}\nlr: {type: float, low: 0.00001, high: 1, log: true}\n"
     "n: {type: int, low: 1, high: 32}\ny: {type: float, low: 0, high: 1}\n",
     0, mixed},
};
