/* Ground truth for a served version (docs/monitoring.md, "Feedback"): the
 * prediction of every successful request is kept under its request id for a
 * horizon in bounded memory (a ring of capacity entries in arrival order,
 * chained by a hash of the id); POST /v2/models/M/feedback joins labels that
 * arrive later with them and keeps the matched pairs (a second ring), from
 * which /monitor and /metrics compute live quality per window: AUC,
 * accuracy, log-loss and Brier score of a classifier (sigmoid of one logit,
 * softmax of K), MAE and RMSE of a regression; with counts of unmatched,
 * late, duplicate and invalid labels. One mutex per version guards it (a
 * request takes it once, to store its prediction). */
#include "serve_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define FB_ID        64 /* ids longer than this are cut (as stored and as looked up) */
#define FB_K         16 /* output values kept per prediction (the first row's) */
#define FB_NONE      UINT32_MAX
#define FB_MAX_ITEMS 100000

typedef struct {
    char id[FB_ID];
    int64_t t;
    float out[FB_K];
    uint8_t k, labelled;
    uint32_t next;
} fb_entry;

typedef struct {
    int64_t t;
    float score, y, loss, sq;
    int8_t correct; /* -1: not a classifier */
} fb_pair;

struct sv_feedback {
    pthread_mutex_t lock;
    int64_t horizon_ns;
    size_t cap;
    fb_entry *e;      /* ring: oldest at head, n of them */
    uint32_t *bucket; /* cap buckets: first entry of the chain */
    size_t head, n;
    fb_pair *p; /* matched pairs, ring of cap */
    size_t phead, pn;
    uint64_t matched, unmatched, late, duplicate, invalid;
    int alloc_failed;    /* the rings could not be allocated (memory budget): predictions are not kept */
    const sv_version *v; /* post-processing and class names (the version outlives this) */
};

static uint64_t id_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

sv_feedback *kl__sv_feedback_new(const sv_version *v, int64_t horizon_s, size_t cap) {
    sv_feedback *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    pthread_mutex_init(&f->lock, NULL);
    f->horizon_ns = horizon_s * 1000000000LL;
    f->cap = cap;
    f->v = v;
    return f;
}

void kl__sv_feedback_free(sv_feedback *f) {
    if (!f) return;
    pthread_mutex_destroy(&f->lock);
    kl_mem_free(f->e);
    kl_mem_free(f->bucket);
    kl_mem_free(f->p);
    free(f);
}

size_t kl__sv_feedback_bytes(const sv_feedback *f) {
    return f->cap * (sizeof(fb_entry) + sizeof(uint32_t) + sizeof(fb_pair));
}

/* lock held: the rings on first use (nothing is held by a version never labelled) */
static int fb_alloc(sv_feedback *f) {
    if (f->e) return 0;
    if (f->alloc_failed) return -1;
    f->e = kl_mem_alloc(f->cap * sizeof *f->e, KL_TAG_OTHER);
    f->bucket = kl_mem_alloc(f->cap * sizeof *f->bucket, KL_TAG_OTHER);
    f->p = kl_mem_alloc(f->cap * sizeof *f->p, KL_TAG_OTHER);
    if (!f->e || !f->bucket || !f->p) {
        kl_mem_free(f->e);
        kl_mem_free(f->bucket);
        kl_mem_free(f->p);
        f->e = NULL;
        f->bucket = NULL;
        f->p = NULL;
        f->alloc_failed = 1;
        kl_log(KL_LOG_WARN, "serve", "feedback: no memory for %zu predictions (%zu bytes): predictions are not kept",
               f->cap, kl__sv_feedback_bytes(f));
        return -1;
    }
    for (size_t i = 0; i < f->cap; i++) f->bucket[i] = FB_NONE;
    return 0;
}

/* lock held: drops the oldest entry (unlinked from its chain) */
static void fb_evict(sv_feedback *f) {
    uint32_t i = (uint32_t)f->head, *pp = &f->bucket[id_hash(f->e[i].id) % f->cap];
    while (*pp != FB_NONE && *pp != i) pp = &f->e[*pp].next;
    if (*pp == i) *pp = f->e[i].next;
    f->head = (f->head + 1) % f->cap;
    f->n--;
}

void kl__sv_feedback_record(sv_feedback *f, const char *id, int64_t now, const float *out, size_t k) {
    pthread_mutex_lock(&f->lock);
    if (fb_alloc(f)) {
        pthread_mutex_unlock(&f->lock);
        return;
    }
    while (f->n && (f->n == f->cap || f->e[f->head].t < now - f->horizon_ns)) fb_evict(f);
    uint32_t i = (uint32_t)((f->head + f->n) % f->cap);
    fb_entry *x = &f->e[i];
    snprintf(x->id, sizeof x->id, "%s", id);
    x->t = now;
    x->k = (uint8_t)(k < FB_K ? k : FB_K);
    memcpy(x->out, out, x->k * sizeof *out);
    x->labelled = 0;
    uint32_t *b = &f->bucket[id_hash(x->id) % f->cap];
    x->next = *b;
    *b = i;
    f->n++;
    pthread_mutex_unlock(&f->lock);
}

/* ==================================================================
 * Labels
 * ================================================================== */

enum { FB_MATCHED, FB_UNMATCHED, FB_LATE, FB_DUPLICATE, FB_INVALID };

/* the label as a number: a number, a bool, or a class name of the version */
static int label_value(const sv_version *v, const cJSON *l, double *y) {
    if (cJSON_IsBool(l)) {
        *y = cJSON_IsTrue(l);
        return 0;
    }
    if (cJSON_IsNumber(l) && isfinite(l->valuedouble)) {
        *y = l->valuedouble;
        return 0;
    }
    if (cJSON_IsString(l))
        for (int c = 0; c < v->nclass_names; c++)
            if (!strcmp(v->class_names[c], l->valuestring)) {
                *y = c;
                return 0;
            }
    return -1;
}

/* lock held: the pair of a prediction and its label (what the version's post-processing makes of the output) */
static int make_pair(const sv_version *v, const fb_entry *x, double y, int64_t now, fb_pair *p) {
    const double eps = 1e-15;
    p->t = now;
    p->y = (float)y;
    p->score = NAN;
    if (v->post == SV_POST_SIGMOID) {
        if (y != 0 && y != 1) return -1;
        double pr = 1 / (1 + exp(-(double)x->out[0])), c = fmin(fmax(pr, eps), 1 - eps);
        p->score = (float)pr;
        p->correct = (pr >= 0.5) == (y == 1);
        p->loss = (float)-(y * log(c) + (1 - y) * log(1 - c));
        p->sq = (float)((pr - y) * (pr - y));
        return 0;
    }
    if (v->post == SV_POST_SOFTMAX) {
        int k = x->k, yi = (int)y;
        if (y != yi || yi < 0 || yi >= k) return -1;
        double mx = x->out[0], s = 0, pr[FB_K];
        for (int j = 1; j < k; j++) mx = fmax(mx, x->out[j]);
        for (int j = 0; j < k; j++) s += (pr[j] = exp(x->out[j] - mx));
        int best = 0;
        double sq = 0;
        for (int j = 0; j < k; j++) {
            pr[j] /= s;
            if (pr[j] > pr[best]) best = j;
            sq += (pr[j] - (j == yi)) * (pr[j] - (j == yi));
        }
        if (k == 2) p->score = (float)pr[1];
        p->correct = best == yi;
        p->loss = (float)-log(fmax(pr[yi], eps));
        p->sq = (float)sq;
        return 0;
    }
    double err = (double)x->out[0] - y; /* a regression (or undeclared): the raw first value */
    p->correct = -1;
    p->loss = (float)fabs(err);
    p->sq = (float)(err * err);
    return 0;
}

/* one {"id", "label"}: its result (FB_*) */
static int label_one(sv_feedback *f, const cJSON *item, int64_t now) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(item, "label");
    double y;
    if (!cJSON_IsString(id) || !l || label_value(f->v, l, &y)) return FB_INVALID;
    char key[FB_ID];
    snprintf(key, sizeof key, "%s", id->valuestring);
    if (!f->e) return FB_UNMATCHED;
    uint32_t i = f->bucket[id_hash(key) % f->cap];
    while (i != FB_NONE && strcmp(f->e[i].id, key)) i = f->e[i].next;
    if (i == FB_NONE) return FB_UNMATCHED;
    fb_entry *x = &f->e[i];
    if (x->t < now - f->horizon_ns) return FB_LATE;
    fb_pair p;
    if (make_pair(f->v, x, y, now, &p)) return FB_INVALID; /* (a label the task cannot take: 7 for a binary model) */
    if (x->labelled) return FB_DUPLICATE;
    x->labelled = 1;
    f->p[(f->phead + f->pn) % f->cap] = p;
    if (f->pn < f->cap) f->pn++;
    else f->phead = (f->phead + 1) % f->cap;
    return FB_MATCHED;
}

int kl__sv_feedback_post(sv_feedback *f, const char *body, size_t len, int64_t now, kl_buf *b) {
    void *doc = NULL;
    kl_err e = {0};
    if (kl_json_parse(body ? body : "", len, "feedback", &doc, &e)) {
        kl_buf_puts(b, "{\"error\":");
        kl_buf_json_str(b, e.msg);
        kl_buf_puts(b, "}");
        return 400;
    }
    const cJSON *root = doc, *items = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "feedback") : NULL;
    if (!items) items = root;
    int n = cJSON_IsArray(items) ? cJSON_GetArraySize(items) : 1;
    if (!(cJSON_IsArray(items) || cJSON_IsObject(items)) || n > FB_MAX_ITEMS) {
        cJSON_Delete(doc);
        kl_buf_printf(b,
                      "{\"error\":\"feedback: expected {\\\"id\\\", \\\"label\\\"}, a list of them (at most %d) or "
                      "{\\\"feedback\\\": [...]}\"}",
                      FB_MAX_ITEMS);
        return 400;
    }
    uint64_t cnt[5] = {0};
    pthread_mutex_lock(&f->lock);
    if (cJSON_IsArray(items)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, items) cnt[cJSON_IsObject(it) ? label_one(f, it, now) : FB_INVALID]++;
    } else {
        cnt[label_one(f, items, now)]++;
    }
    f->matched += cnt[FB_MATCHED];
    f->unmatched += cnt[FB_UNMATCHED];
    f->late += cnt[FB_LATE];
    f->duplicate += cnt[FB_DUPLICATE];
    f->invalid += cnt[FB_INVALID];
    pthread_mutex_unlock(&f->lock);
    cJSON_Delete(doc);
    kl_buf_printf(b, "{\"matched\":%llu,\"unmatched\":%llu,\"late\":%llu,\"duplicate\":%llu,\"invalid\":%llu}",
                  (unsigned long long)cnt[0], (unsigned long long)cnt[1], (unsigned long long)cnt[2],
                  (unsigned long long)cnt[3], (unsigned long long)cnt[4]);
    return 200;
}

/* ==================================================================
 * Quality per window
 * ================================================================== */

static int score_cmp(const void *a, const void *b) {
    float x = ((const float *)a)[0], y = ((const float *)b)[0];
    return (x > y) - (x < y);
}

/* AUC of (score, y) pairs sv[2i], sv[2i+1] (Mann-Whitney, ties counted half) */
static double auc_of(float *sv, size_t n, uint64_t *npos) {
    qsort(sv, n, 2 * sizeof *sv, score_cmp);
    double pos = 0, rank_sum = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && sv[2 * j] == sv[2 * i]) j++;
        double avg = (double)(i + j + 1) / 2; /* ranks i+1..j */
        for (size_t k = i; k < j; k++)
            if (sv[2 * k + 1] == 1) {
                pos++;
                rank_sum += avg;
            }
        i = j;
    }
    double neg = (double)n - pos;
    *npos = (uint64_t)pos;
    return pos && neg ? (rank_sum - pos * (pos + 1) / 2) / (pos * neg) : NAN;
}

int kl__sv_feedback_quality(sv_feedback *f, int64_t now, int64_t win_s, sv_quality *q) {
    memset(q, 0, sizeof *q);
    q->auc = q->accuracy = q->log_loss = q->brier = q->mae = q->rmse = NAN;
    q->classifier = f->v->post == SV_POST_SIGMOID || f->v->post == SV_POST_SOFTMAX;
    pthread_mutex_lock(&f->lock);
    float *sv = f->pn ? malloc(f->pn * 2 * sizeof *sv) : NULL;
    size_t ns = 0;
    double correct = 0, loss = 0, sq = 0;
    for (size_t i = 0; i < f->pn; i++) {
        const fb_pair *p = &f->p[(f->phead + i) % f->cap];
        if (p->t < now - win_s * 1000000000LL) continue;
        q->n++;
        correct += p->correct > 0;
        loss += p->loss;
        sq += p->sq;
        if (sv && !isnan(p->score)) {
            sv[2 * ns] = p->score;
            sv[2 * ns + 1] = p->y;
            ns++;
        }
    }
    q->matched = f->matched;
    q->unmatched = f->unmatched;
    q->late = f->late;
    q->duplicate = f->duplicate;
    q->invalid = f->invalid;
    q->pending = f->n;
    pthread_mutex_unlock(&f->lock);
    if (q->n) {
        if (q->classifier) {
            q->accuracy = correct / (double)q->n;
            q->log_loss = loss / (double)q->n;
            q->brier = sq / (double)q->n;
            if (ns) q->auc = auc_of(sv, ns, &q->auc_pos);
            q->auc_n = ns;
        } else {
            q->mae = loss / (double)q->n;
            q->rmse = sqrt(sq / (double)q->n);
        }
    }
    free(sv);
    return 0;
}
