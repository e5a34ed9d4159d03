/* Optimizers with PyTorch 1.13 semantics (SGD with momentum / dampening /
 * nesterov / L2 weight decay; AdamW with decoupled weight decay), learning
 * rate schedules and gradient clipping by global norm. */
#include <math.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "train/train_int.h"

int kl__train_optim_slots(const tr_spec *s) { return s->opt == TR_OPT_ADAMW ? 2 : (s->momentum > 0 ? 1 : 0); }

int kl__train_optim_init(tr_optim *o, const tr_spec *s, int64_t n, kl_err *e) {
    memset(o, 0, sizeof *o);
    o->kind = s->opt;
    o->n = n;
    int slots = kl__train_optim_slots(s);
    if (slots >= 1) {
        if (!(o->m = kl_mem_alloc_e((size_t)(n ? n : 1) * 4, KL_TAG_OPTIMIZER, e))) return KL_ENOMEM;
        memset(o->m, 0, (size_t)n * 4);
    }
    if (slots >= 2) {
        if (!(o->v = kl_mem_alloc_e((size_t)(n ? n : 1) * 4, KL_TAG_OPTIMIZER, e))) return KL_ENOMEM;
        memset(o->v, 0, (size_t)n * 4);
    }
    return KL_OK;
}

void kl__train_optim_free(tr_optim *o) {
    kl_mem_free(o->m); kl_mem_free(o->v);
    o->m = o->v = NULL;
}

void kl__train_optim_step(tr_optim *o, const tr_spec *s, float *p, const float *g, double lr) {
    int64_t n = o->n;
    o->t++;
    if (o->kind == TR_OPT_SGD) {
        float wd = (float)s->wd, mom = (float)s->momentum, damp = (float)(1 - s->dampening), flr = (float)lr;
        for (int64_t i = 0; i < n; i++) {
            float d = g[i];
            if (wd != 0) d += wd * p[i];
            if (mom != 0) {
                float b = o->has_buf ? mom * o->m[i] + damp * d : d;
                o->m[i] = b;
                d = s->nesterov ? d + mom * b : b;
            }
            p[i] -= flr * d;
        }
        if (mom != 0) o->has_buf = 1;
        return;
    }
    /* AdamW (torch.optim._functional single-tensor path) */
    double bc1 = 1 - pow(s->beta1, (double)o->t), bc2 = 1 - pow(s->beta2, (double)o->t);
    float decay = (float)(1 - lr * s->wd), b1 = (float)s->beta1, b2 = (float)s->beta2;
    float step = (float)(lr / bc1), bc2s = (float)sqrt(bc2), eps = (float)s->adam_eps;
    float omb1 = (float)(1 - s->beta1), omb2 = (float)(1 - s->beta2);
    int64_t i0 = 0;
#ifdef __AVX2__
    /* the same operations in the same order as the scalar loop (no FMA), so
     * results are identical to it */
    {
        __m256 vdec = _mm256_set1_ps(decay), vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), vo1 = _mm256_set1_ps(omb1),
               vo2 = _mm256_set1_ps(omb2), vbc = _mm256_set1_ps(bc2s), veps = _mm256_set1_ps(eps), vst = _mm256_set1_ps(step);
        for (; i0 + 8 <= n; i0 += 8) {
            __m256 gi = _mm256_loadu_ps(g + i0), pi = _mm256_mul_ps(_mm256_loadu_ps(p + i0), vdec);
            __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(o->m + i0), vb1), _mm256_mul_ps(vo1, gi));
            __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(o->v + i0), vb2), _mm256_mul_ps(_mm256_mul_ps(vo2, gi), gi));
            __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), vbc), veps);
            pi = _mm256_sub_ps(pi, _mm256_mul_ps(vst, _mm256_div_ps(mi, den)));
            _mm256_storeu_ps(o->m + i0, mi); _mm256_storeu_ps(o->v + i0, vi); _mm256_storeu_ps(p + i0, pi);
        }
    }
#endif
    for (int64_t i = i0; i < n; i++) {
        float gi = g[i];
        p[i] *= decay;
        o->m[i] = o->m[i] * b1 + omb1 * gi;
        o->v[i] = o->v[i] * b2 + omb2 * gi * gi;
        float denom = sqrtf(o->v[i]) / bc2s + eps;
        p[i] -= step * (o->m[i] / denom);
    }
}

/* step: 0-based optimizer step; epoch: 0-based epoch of that step. */
double kl__train_sched_lr(const tr_spec *s, int64_t step, int64_t epoch, int64_t total_steps) {
    double lr = s->lr;
    if (s->warmup > 0 && step < s->warmup) return lr * (double)(step + 1) / (double)s->warmup;
    switch (s->sched) {
    case TR_SCHED_COSINE: {
        double span = (double)KL_MAX(1, total_steps - s->warmup);
        double prog = KL_MIN(1.0, (double)(step - s->warmup) / span);
        return s->min_lr + (lr - s->min_lr) * 0.5 * (1 + cos(M_PI * prog));
    }
    case TR_SCHED_EXPONENTIAL: return lr * pow(s->gamma, (double)epoch);
    case TR_SCHED_STEP: return lr * pow(s->gamma, (double)(epoch / s->step_size));
    default: return lr;
    }
}

double kl__train_clip_grad(float *g, int64_t n, double max_norm) {
    /* four partial sums by index mod 4, combined in a fixed order */
    double s4[4] = {0, 0, 0, 0}, ss;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) s4[k] += (double)g[i + k] * g[i + k];
    for (; i < n; i++) s4[0] += (double)g[i] * g[i];
    ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    double norm = sqrt(ss);
    if (max_norm > 0) {
        double c = max_norm / (norm + 1e-6);
        if (c < 1) {
            float fc = (float)c;
            for (int64_t i = 0; i < n; i++) g[i] *= fc;
        }
    }
    return norm;
}
