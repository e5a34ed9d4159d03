/* Evaluation metrics of `keel eval` (and what the pipeline and the model
 * card show), computed from a model's outputs and the true labels:
 * - regression: MAE, RMSE, R² and the mean predictor's MAE/RMSE on the same
 *   rows (the baseline a model must beat);
 * - classification: precision, recall, F1 and support per class (from the
 *   confusion matrix), macro F1;
 * - binary: the probability (sigmoid of the score), Brier score, expected
 *   calibration error and a reliability diagram (10 equal-width bins), the
 *   precision-recall curve with its average precision, and the threshold:
 *   the F1-optimal one and, when asked, metrics at a given one.
 * Each adds its fields to a cJSON object. */
#include <math.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "train/train_int.h"

void kl__eval_regression(const float *pred, const float *y, int64_t n, cJSON *j) {
    if (n <= 0) return;
    double mean = 0;
    for (int64_t i = 0; i < n; i++) mean += y[i];
    mean /= (double)n;
    double ae = 0, se = 0, ae0 = 0, se0 = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = (double)pred[i] - y[i], r0 = mean - y[i];
        ae += fabs(r); se += r * r;
        ae0 += fabs(r0); se0 += r0 * r0;
    }
    cJSON_AddNumberToObject(j, "mae", ae / (double)n);
    cJSON_AddNumberToObject(j, "rmse", sqrt(se / (double)n));
    if (se0 > 0) cJSON_AddNumberToObject(j, "r2", 1.0 - se / se0);
    cJSON *b = cJSON_AddObjectToObject(j, "baseline");
    cJSON_AddStringToObject(b, "predictor", "mean of the labels");
    cJSON_AddNumberToObject(b, "mean", mean);
    cJSON_AddNumberToObject(b, "mae", ae0 / (double)n);
    cJSON_AddNumberToObject(b, "rmse", sqrt(se0 / (double)n));
}

/* precision / recall / F1 of tp, fp, fn (0 when undefined, as scikit-learn's zero_division=0) */
static void prf(double tp, double fp, double fn, double *p, double *r, double *f1) {
    *p = tp + fp > 0 ? tp / (tp + fp) : 0;
    *r = tp + fn > 0 ? tp / (tp + fn) : 0;
    *f1 = *p + *r > 0 ? 2 * *p * *r / (*p + *r) : 0;
}

void kl__eval_classes(const int64_t *cm, int64_t C, cJSON *j) {
    cJSON *a = cJSON_AddArrayToObject(j, "per_class");
    double macro = 0;
    int64_t present = 0;
    for (int64_t c = 0; c < C; c++) {
        double tp = (double)cm[c * C + c], fp = 0, fn = 0;
        for (int64_t k = 0; k < C; k++) {
            if (k == c) continue;
            fp += (double)cm[k * C + c];
            fn += (double)cm[c * C + k];
        }
        double p, r, f1;
        prf(tp, fp, fn, &p, &r, &f1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "class", (double)c);
        cJSON_AddNumberToObject(o, "precision", p);
        cJSON_AddNumberToObject(o, "recall", r);
        cJSON_AddNumberToObject(o, "f1", f1);
        cJSON_AddNumberToObject(o, "support", tp + fn);
        cJSON_AddItemToArray(a, o);
        if (tp + fn > 0) { macro += f1; present++; }
    }
    if (present) cJSON_AddNumberToObject(j, "macro_f1", macro / (double)present);
}

typedef struct { double p; int pos; } prob_lab;
static int by_prob_desc(const void *a, const void *b) {
    double x = ((const prob_lab *)a)->p, y = ((const prob_lab *)b)->p;
    return x > y ? -1 : x < y;
}

static double sigmoid(double s) { return s >= 0 ? 1 / (1 + exp(-s)) : exp(s) / (1 + exp(s)); }

/* Brier score, ECE and the reliability diagram over 10 equal-width bins. */
static void calibration(const prob_lab *v, int64_t n, cJSON *j) {
    enum { BINS = 10 };
    double sp[BINS] = {0}, sy[BINS] = {0}, brier = 0;
    int64_t cnt[BINS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int b = (int)(v[i].p * BINS);
        if (b >= BINS) b = BINS - 1;
        sp[b] += v[i].p; sy[b] += v[i].pos; cnt[b]++;
        brier += (v[i].p - v[i].pos) * (v[i].p - v[i].pos);
    }
    double ece = 0;
    cJSON *rd = cJSON_AddArrayToObject(j, "reliability");
    for (int b = 0; b < BINS; b++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "lo", (double)b / BINS);
        cJSON_AddNumberToObject(o, "hi", (double)(b + 1) / BINS);
        cJSON_AddNumberToObject(o, "count", (double)cnt[b]);
        if (cnt[b]) {
            double mp = sp[b] / (double)cnt[b], fy = sy[b] / (double)cnt[b];
            cJSON_AddNumberToObject(o, "mean_probability", mp);
            cJSON_AddNumberToObject(o, "fraction_positive", fy);
            ece += (double)cnt[b] / (double)n * fabs(mp - fy);
        }
        cJSON_AddItemToArray(rd, o);
    }
    cJSON_AddNumberToObject(j, "brier", brier / (double)n);
    cJSON_AddNumberToObject(j, "ece", ece);
}

static void add_at(cJSON *j, const char *key, double thr, double tp, double fp, double fn, double tn) {
    double p, r, f1;
    prf(tp, fp, fn, &p, &r, &f1);
    cJSON *o = cJSON_AddObjectToObject(j, key);
    cJSON_AddNumberToObject(o, "threshold", thr);
    cJSON_AddNumberToObject(o, "precision", p);
    cJSON_AddNumberToObject(o, "recall", r);
    cJSON_AddNumberToObject(o, "f1", f1);
    cJSON_AddNumberToObject(o, "accuracy", (tp + tn) / (tp + fp + fn + tn));
}

int kl__eval_binary(const double *score, const uint8_t *pos, int64_t n, double threshold, int npts, cJSON *j) {
    if (n <= 0) return KL_OK;
    prob_lab *v = malloc((size_t)n * sizeof *v);
    if (!v) return KL_ENOMEM;
    int64_t npos = 0;
    for (int64_t i = 0; i < n; i++) { v[i].p = sigmoid(score[i]); v[i].pos = pos[i] != 0; npos += v[i].pos; }
    calibration(v, n, j);
    qsort(v, (size_t)n, sizeof *v, by_prob_desc);
    /* walk the thresholds from the highest probability down: PR curve, AP, best F1 */
    cJSON *pr = cJSON_AddObjectToObject(j, "pr");
    cJSON *pa = cJSON_AddArrayToObject(pr, "precision"), *ra = cJSON_AddArrayToObject(pr, "recall"),
          *ta = cJSON_AddArrayToObject(pr, "threshold");
    int64_t distinct = 0;
    for (int64_t i = 0; i < n; i++) if (i == 0 || v[i].p != v[i - 1].p) distinct++;
    int64_t every = npts > 1 ? (distinct + npts - 2) / (npts - 1) : 1, seen = 0;
    if (every < 1) every = 1;
    double tp = 0, fp = 0, ap = 0, prev_r = 0, best_f1 = -1, best_t = 0.5, bt[4] = {0};
    for (int64_t i = 0; i < n;) {
        int64_t k = i;
        while (k < n && v[k].p == v[i].p) { tp += v[k].pos; fp += !v[k].pos; k++; }
        double fn = (double)npos - tp, p, r, f1;
        prf(tp, fp, fn, &p, &r, &f1);
        ap += (r - prev_r) * p;   /* step-wise average precision (scikit-learn's definition) */
        prev_r = r;
        if (f1 > best_f1) {
            best_f1 = f1; best_t = v[i].p;
            bt[0] = tp; bt[1] = fp; bt[2] = fn; bt[3] = (double)(n - npos) - fp;
        }
        if (++seen % every == 0 || k == n) {
            cJSON_AddItemToArray(pa, cJSON_CreateNumber(p));
            cJSON_AddItemToArray(ra, cJSON_CreateNumber(r));
            cJSON_AddItemToArray(ta, cJSON_CreateNumber(v[i].p));
        }
        i = k;
    }
    if (npos) cJSON_AddNumberToObject(j, "average_precision", ap);
    add_at(j, "best_f1_threshold", best_t, bt[0], bt[1], bt[2], bt[3]);
    if (threshold >= 0) { /* predicted positive when probability >= threshold */
        double t[4] = {0};
        for (int64_t i = 0; i < n; i++) {
            int yes = v[i].p >= threshold;
            t[yes ? (v[i].pos ? 0 : 1) : (v[i].pos ? 2 : 3)]++;
        }
        add_at(j, "at_threshold", threshold, t[0], t[1], t[2], t[3]);
    }
    free(v);
    return KL_OK;
}
