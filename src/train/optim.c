/* Optimizers with PyTorch 1.13 semantics (SGD with momentum / dampening /
 * nesterov / L2 weight decay; AdamW with decoupled weight decay), learning
 * rate schedules and gradient clipping by global norm. */
#include <math.h>
#include <string.h>

#include "train/train_int.h"

int tr_optim_slots(const tr_spec *s) { return s->opt == TR_OPT_ADAMW ? 2 : (s->momentum > 0 ? 1 : 0); }

int tr_optim_init(tr_optim *o, const tr_spec *s, int64_t n, kl_err *e) {
    memset(o, 0, sizeof *o);
    o->kind = s->opt;
    o->n = n;
    int slots = tr_optim_slots(s);
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

void tr_optim_free(tr_optim *o) {
    kl_mem_free(o->m); kl_mem_free(o->v);
    o->m = o->v = NULL;
}

void tr_optim_step(tr_optim *o, const tr_spec *s, float *p, const float *g, double lr) {
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
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        p[i] *= decay;
        o->m[i] = o->m[i] * b1 + omb1 * gi;
        o->v[i] = o->v[i] * b2 + omb2 * gi * gi;
        float denom = sqrtf(o->v[i]) / bc2s + eps;
        p[i] -= step * (o->m[i] / denom);
    }
}

/* step: 0-based optimizer step; epoch: 0-based epoch of that step. */
double tr_sched_lr(const tr_spec *s, int64_t step, int64_t epoch, int64_t total_steps) {
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

double tr_clip_grad(float *g, int64_t n, double max_norm) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
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
