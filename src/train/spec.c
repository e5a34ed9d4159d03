/* Model spec (YAML) parsing: inputs, layers and wiring, loss, optimizer,
 * schedule, training and data settings. Every error names the spec line and
 * the layer; unknown keys get a "did you mean". */
#include <stdlib.h>
#include <string.h>

#include "train/train_data.h"
#include "train/train_images.h"
#include "train/train_int.h"

static const char *const ltype_names[TR_L_COUNT] = {
    "linear", "conv2d", "batchnorm2d", "layernorm", "dropout", "embedding", "maxpool2d",
    "avgpool2d", "global_avgpool", "flatten", "relu", "gelu", "sigmoid", "tanh", "softmax", "add"};

const char *kl__train_ltype_name(tr_ltype t) { return (unsigned)t < TR_L_COUNT ? ltype_names[t] : "?"; }

static int get_pair(const kl_node *map, const char *key, int64_t def, int64_t out[2], int64_t min,
                    kl_err *e) {
    const kl_node *n = kl_node_get(map, key);
    out[0] = out[1] = def;
    if (!n) return KL_OK;
    if (kl_node_kind_of(n) == KL_NODE_SEQ) {
        if (kl_node_len(n) != 2) return kl_node_error(n, e, KL_EINVAL, "expected 2 values [h, w], got %zu", kl_node_len(n));
        for (int i = 0; i < 2; i++) {
            int rc = kl_node_int(kl_node_at(n, (size_t)i), &out[i], e);
            if (rc) return rc;
        }
    } else {
        int rc = kl_node_int(n, &out[0], e);
        if (rc) return rc;
        out[1] = out[0];
    }
    if (out[0] < min || out[1] < min) return kl_node_error(n, e, KL_EINVAL, "must be >= %lld", (long long)min);
    return KL_OK;
}

static int pos_int(const kl_node *map, const char *key, int64_t def, int64_t min, int64_t *out, kl_err *e) {
    int rc = kl_spec_int(map, key, def, out, e);
    if (rc) return rc;
    if (*out < min) return kl_node_error(kl_node_get(map, key), e, KL_EINVAL, "must be >= %lld", (long long)min);
    return KL_OK;
}

static int rng_double(const kl_node *map, const char *key, double def, double lo, double hi, double *out, kl_err *e) {
    int rc = kl_spec_double(map, key, def, out, e);
    if (rc) return rc;
    if (!(*out >= lo && *out <= hi))
        return kl_node_error(kl_node_get(map, key), e, KL_EINVAL, "must be in [%g, %g]", lo, hi);
    return KL_OK;
}

/* train.distributed: data-parallel training (docs/training.md, "Data-parallel
 * training"): gradient buckets, deterministic micro-batches, the weight check
 * and the timeout for the other ranks. */
static int dist_spec(const kl_node *tr, tr_spec *s, kl_err *e) {
    const kl_node *d = kl_node_get(tr, "distributed");
    if (!d) return KL_OK;
    static const char *k[] = {"micro_batches", "bucket_mb", "first_bucket_mb", "check_every", "timeout"};
    int rc;
    if ((rc = kl_spec_check_keys(d, k, KL_ARRAY_LEN(k), e))) return rc;
    if ((rc = pos_int(d, "micro_batches", 8, 1, &s->micro_batches, e)) ||
        (rc = pos_int(d, "check_every", 100, 0, &s->check_every, e)) ||
        (rc = rng_double(d, "bucket_mb", 25, 0.001, 1e6, &s->bucket_mb, e)) ||
        (rc = rng_double(d, "first_bucket_mb", 1, 0.001, 1e6, &s->first_bucket_mb, e)) ||
        (rc = rng_double(d, "timeout", 120, 0.1, 1e7, &s->dist_timeout, e)))
        return rc;
    if (s->micro_batches & (s->micro_batches - 1) || s->micro_batches > 4096)
        return kl_node_error(kl_node_get(d, "micro_batches"), e, KL_EINVAL,
                             "micro_batches: a power of two up to 4096, got %lld", (long long)s->micro_batches);
    return KL_OK;
}

static int parse_layer(const kl_node *n, tr_lspec *L, int idx, kl_err *e) {
    int rc;
    const char *type;
    if (kl_node_kind_of(n) != KL_NODE_MAP) return kl_node_error(n, e, KL_EINVAL, "a layer must be a map with a 'type'");
    L->line = kl_node_line(n);
    if ((rc = kl_spec_str(n, "type", NULL, &type, e))) return rc;
    if (!type) return kl_node_error(n, e, KL_EINVAL, "a layer needs a 'type' (linear, conv2d, relu, ...)");
    int t = -1;
    for (int i = 0; i < TR_L_COUNT; i++)
        if (!strcmp(type, ltype_names[i])) t = i;
    if (t < 0) {
        const char *sug = kl_suggest(type, ltype_names, TR_L_COUNT);
        return kl_node_error(kl_node_get(n, "type"), e, KL_EINVAL, "unknown layer type '%s'%s%s%s", type,
                             sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
    }
    L->type = (tr_ltype)t;
    const char *common[] = {"type", "name", "input"};
    const char *allowed[16];
    size_t na = 0;
    for (size_t i = 0; i < 3; i++) allowed[na++] = common[i];
#define ALLOW(...) do { const char *x_[] = {__VA_ARGS__}; for (size_t i_ = 0; i_ < KL_ARRAY_LEN(x_); i_++) allowed[na++] = x_[i_]; } while (0)
    switch (L->type) {
    case TR_L_LINEAR: ALLOW("out", "in", "bias"); break;
    case TR_L_CONV2D: ALLOW("out", "kernel", "stride", "padding", "bias"); break;
    case TR_L_BATCHNORM2D: ALLOW("eps", "momentum"); break;
    case TR_L_LAYERNORM: ALLOW("eps"); break;
    case TR_L_DROPOUT: ALLOW("p"); break;
    case TR_L_EMBEDDING: ALLOW("num", "dim"); break;
    case TR_L_MAXPOOL2D: case TR_L_AVGPOOL2D: ALLOW("kernel", "stride", "padding"); break;
    case TR_L_ADD: ALLOW("inputs"); break;
    default: break;
    }
#undef ALLOW
    if ((rc = kl_spec_check_keys(n, allowed, na, e))) return rc;
    const char *name;
    char defname[TR_NAME];
    snprintf(defname, sizeof defname, "l%d", idx);
    if ((rc = kl_spec_str(n, "name", defname, &name, e))) return rc;
    if (strlen(name) >= TR_NAME) return kl_node_error(kl_node_get(n, "name"), e, KL_EINVAL, "name too long");
    for (const char *c = name; *c; c++)
        if (!(*c == '_' || *c == '-' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            return kl_node_error(kl_node_get(n, "name"), e, KL_EINVAL, "layer names use letters, digits, '_' and '-'");
    snprintf(L->name, sizeof L->name, "%s", name);
    const char *in;
    if ((rc = kl_spec_str(n, "input", "", &in, e))) return rc;
    snprintf(L->in_name[0], TR_NAME, "%s", in);
    L->bias = 1;
    switch (L->type) {
    case TR_L_LINEAR:
        if ((rc = pos_int(n, "out", -1, 1, &L->out, e))) return rc;
        if (L->out < 0) return kl_node_error(n, e, KL_EINVAL, "layer %s (linear): 'out' is required", L->name);
        if ((rc = pos_int(n, "in", 0, 0, &L->in, e))) return rc;
        if ((rc = kl_spec_bool(n, "bias", 1, &L->bias, e))) return rc;
        break;
    case TR_L_CONV2D:
        if ((rc = pos_int(n, "out", -1, 1, &L->out, e))) return rc;
        if (L->out < 0) return kl_node_error(n, e, KL_EINVAL, "layer %s (conv2d): 'out' is required", L->name);
        if (!kl_node_get(n, "kernel")) return kl_node_error(n, e, KL_EINVAL, "layer %s (conv2d): 'kernel' is required", L->name);
        if ((rc = get_pair(n, "kernel", 1, L->k, 1, e)) || (rc = get_pair(n, "stride", 1, L->s, 1, e)) ||
            (rc = get_pair(n, "padding", 0, L->p, 0, e)))
            return rc;
        if ((rc = kl_spec_bool(n, "bias", 1, &L->bias, e))) return rc;
        break;
    case TR_L_MAXPOOL2D: case TR_L_AVGPOOL2D:
        if (!kl_node_get(n, "kernel")) return kl_node_error(n, e, KL_EINVAL, "layer %s: 'kernel' is required", L->name);
        if ((rc = get_pair(n, "kernel", 1, L->k, 1, e))) return rc;
        if ((rc = get_pair(n, "stride", -1, L->s, 1, e))) {
            if (kl_node_get(n, "stride")) return rc;
        }
        if (!kl_node_get(n, "stride")) { L->s[0] = L->k[0]; L->s[1] = L->k[1]; }
        if ((rc = get_pair(n, "padding", 0, L->p, 0, e))) return rc;
        if (L->p[0] * 2 > L->k[0] || L->p[1] * 2 > L->k[1])
            return kl_node_error(kl_node_get(n, "padding"), e, KL_EINVAL, "padding must be at most half the kernel");
        break;
    case TR_L_BATCHNORM2D:
        if ((rc = rng_double(n, "eps", 1e-5, 0, 1, &L->eps, e)) || (rc = rng_double(n, "momentum", 0.1, 0, 1, &L->momentum, e))) return rc;
        break;
    case TR_L_LAYERNORM:
        if ((rc = rng_double(n, "eps", 1e-5, 0, 1, &L->eps, e))) return rc;
        break;
    case TR_L_DROPOUT:
        if ((rc = rng_double(n, "p", 0.5, 0, 0.999, &L->p_drop, e))) return rc;
        break;
    case TR_L_EMBEDDING:
        if ((rc = pos_int(n, "num", -1, 1, &L->num, e)) || (rc = pos_int(n, "dim", -1, 1, &L->out, e))) return rc;
        if (L->num < 0 || L->out < 0) return kl_node_error(n, e, KL_EINVAL, "layer %s (embedding): 'num' and 'dim' are required", L->name);
        break;
    case TR_L_ADD: {
        const kl_node *ins = kl_node_get(n, "inputs");
        if (!ins || kl_node_kind_of(ins) != KL_NODE_SEQ || kl_node_len(ins) != 2)
            return kl_node_error(ins ? ins : n, e, KL_EINVAL, "layer %s (add): 'inputs' must list two layer names", L->name);
        for (int i = 0; i < 2; i++) {
            const char *s;
            if ((rc = kl_node_str(kl_node_at(ins, (size_t)i), &s, e))) return rc;
            snprintf(L->in_name[i], TR_NAME, "%s", s);
        }
        break;
    }
    default: break;
    }
    return KL_OK;
}

static int rel_path(const tr_spec *s, const char *v, char **out, kl_err *e) {
    const char *slash = s->path ? strrchr(s->path, '/') : NULL;
    size_t dl = (v[0] != '/' && slash) ? (size_t)(slash - s->path + 1) : 0;
    *out = malloc(dl + strlen(v) + 1);
    if (!*out) return kl_err_set(e, KL_ENOMEM, "out of memory");
    memcpy(*out, s->path, dl);
    strcpy(*out + dl, v);
    return KL_OK;
}

/* the per-sample input: shape (1 to 3 dims) and dtype */
static int parse_input(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *in;
    if ((rc = kl_spec_require(root, "input", &in, e))) return rc;
    static const char *ink[] = {"shape", "dtype"};
    if ((rc = kl_spec_check_keys(in, ink, 2, e))) return rc;
    const kl_node *shape;
    if ((rc = kl_spec_require(in, "shape", &shape, e))) return rc;
    if (kl_node_kind_of(shape) != KL_NODE_SEQ || kl_node_len(shape) < 1 || kl_node_len(shape) > 3)
        return kl_node_error(shape, e, KL_EINVAL, "input.shape: 1 to 3 per-sample dims, e.g. [64] or [1, 28, 28]");
    s->in_rank = (int)kl_node_len(shape);
    for (int i = 0; i < s->in_rank; i++) {
        if ((rc = kl_node_int(kl_node_at(shape, (size_t)i), &s->in_dims[i], e))) return rc;
        if (s->in_dims[i] < 1) return kl_node_error(kl_node_at(shape, (size_t)i), e, KL_EINVAL, "dims must be >= 1");
    }
    const char *dt;
    if ((rc = kl_spec_str(in, "dtype", "float32", &dt, e))) return rc;
    if (!strcmp(dt, "int64")) s->in_int = 1;
    else if (strcmp(dt, "float32")) return kl_node_error(kl_node_get(in, "dtype"), e, KL_EINVAL, "input.dtype: float32 or int64 (indices for an embedding)");
    return KL_OK;
}

/* the layers, each by parse_layer, names unique */
static int parse_layers(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *ls;
    if ((rc = kl_spec_require(root, "layers", &ls, e))) return rc;
    if (kl_node_kind_of(ls) != KL_NODE_SEQ || kl_node_len(ls) == 0) return kl_node_error(ls, e, KL_EINVAL, "layers: a non-empty list");
    if (kl_node_len(ls) > TR_MAX_LAYERS) return kl_node_error(ls, e, KL_EINVAL, "at most %d layers", TR_MAX_LAYERS);
    s->nlayers = (int)kl_node_len(ls);
    for (int i = 0; i < s->nlayers; i++)
        if ((rc = parse_layer(kl_node_at(ls, (size_t)i), &s->layers[i], i, e))) return rc;
    for (int i = 0; i < s->nlayers; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(s->layers[i].name, s->layers[j].name))
                return kl_node_error(kl_node_at(ls, (size_t)i), e, KL_EINVAL, "duplicate layer name '%s'", s->layers[i].name);
    return KL_OK;
}

/* loss: type, label smoothing, classes, class weights */
static int parse_loss(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *lo = kl_node_get(root, "loss");
    s->loss = TR_LOSS_CE;
    if (lo) {
        static const char *k[] = {"type", "label_smoothing", "class_weights", "classes"};
        if ((rc = kl_spec_check_keys(lo, k, 4, e))) return rc;
        const char *t;
        if ((rc = kl_spec_str(lo, "type", "cross_entropy", &t, e))) return rc;
        if (!strcmp(t, "cross_entropy")) s->loss = TR_LOSS_CE;
        else if (!strcmp(t, "bce_with_logits")) s->loss = TR_LOSS_BCE;
        else if (!strcmp(t, "mse")) s->loss = TR_LOSS_MSE;
        else return kl_node_error(kl_node_get(lo, "type"), e, KL_EINVAL, "loss.type: cross_entropy, bce_with_logits or mse, got '%s'", t);
        if ((rc = rng_double(lo, "label_smoothing", 0, 0, 1, &s->label_smoothing, e))) return rc;
        if ((rc = pos_int(lo, "classes", 0, 0, &s->classes, e))) return rc;
        const kl_node *cw = kl_node_get(lo, "class_weights");
        if (cw) {
            if (kl_node_kind_of(cw) != KL_NODE_SEQ || kl_node_len(cw) > 1024)
                return kl_node_error(cw, e, KL_EINVAL, "class_weights: a list of numbers, one per class");
            s->nclass_w = (int)kl_node_len(cw);
            for (int i = 0; i < s->nclass_w; i++) {
                double v;
                if ((rc = kl_node_double(kl_node_at(cw, (size_t)i), &v, e))) return rc;
                if (!(v >= 0)) return kl_node_error(kl_node_at(cw, (size_t)i), e, KL_EINVAL, "class weights must be >= 0");
                s->class_w[i] = (float)v;
            }
        }
    }
    return KL_OK;
}

/* optimizer: sgd or adamw and the keys of the one chosen */
static int parse_optimizer(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *op = kl_node_get(root, "optimizer");
    s->opt = TR_OPT_ADAMW; s->lr = 1e-3; s->beta1 = 0.9; s->beta2 = 0.999; s->adam_eps = 1e-8; s->wd = 0.01;
    if (op) {
        static const char *k[] = {"type", "lr", "momentum", "dampening", "nesterov", "weight_decay", "betas", "eps"};
        if ((rc = kl_spec_check_keys(op, k, KL_ARRAY_LEN(k), e))) return rc;
        const char *t;
        if ((rc = kl_spec_str(op, "type", "adamw", &t, e))) return rc;
        if (!strcmp(t, "sgd")) s->opt = TR_OPT_SGD;
        else if (!strcmp(t, "adamw")) s->opt = TR_OPT_ADAMW;
        else return kl_node_error(kl_node_get(op, "type"), e, KL_EINVAL, "optimizer.type: sgd or adamw, got '%s'", t);
        if ((rc = rng_double(op, "lr", 1e-3, 0, 1e6, &s->lr, e))) return rc;
        if ((rc = rng_double(op, "weight_decay", s->opt == TR_OPT_ADAMW ? 0.01 : 0, 0, 1e6, &s->wd, e))) return rc;
        /* each optimizer reads only its own keys: the others are left unread,
         * so that kl_node_check_used refuses e.g. momentum with adamw */
        if (s->opt == TR_OPT_SGD) {
            if ((rc = rng_double(op, "momentum", 0, 0, 1, &s->momentum, e))) return rc;
            if ((rc = rng_double(op, "dampening", 0, 0, 1, &s->dampening, e))) return rc;
            if ((rc = kl_spec_bool(op, "nesterov", 0, &s->nesterov, e))) return rc;
        } else if ((rc = rng_double(op, "eps", 1e-8, 0, 1, &s->adam_eps, e))) {
            return rc;
        }
        const kl_node *b = s->opt == TR_OPT_ADAMW ? kl_node_get(op, "betas") : NULL;
        if (b) {
            if (kl_node_kind_of(b) != KL_NODE_SEQ || kl_node_len(b) != 2) return kl_node_error(b, e, KL_EINVAL, "betas: [beta1, beta2]");
            if ((rc = kl_node_double(kl_node_at(b, 0), &s->beta1, e)) || (rc = kl_node_double(kl_node_at(b, 1), &s->beta2, e))) return rc;
            if (!(s->beta1 >= 0 && s->beta1 < 1 && s->beta2 >= 0 && s->beta2 < 1)) return kl_node_error(b, e, KL_EINVAL, "betas must be in [0, 1)");
        }
        if (s->nesterov && (s->momentum <= 0 || s->dampening != 0))
            return kl_node_error(kl_node_get(op, "nesterov"), e, KL_EINVAL, "nesterov needs momentum > 0 and dampening 0");
    }
    return KL_OK;
}

/* schedule: the learning-rate schedule and its keys */
static int parse_schedule(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *sc = kl_node_get(root, "schedule");
    s->sched = TR_SCHED_CONSTANT; s->gamma = 0.1; s->step_size = 1;
    if (sc) {
        static const char *k[] = {"type", "warmup_steps", "min_lr", "gamma", "step_size"};
        if ((rc = kl_spec_check_keys(sc, k, KL_ARRAY_LEN(k), e))) return rc;
        const char *t;
        if ((rc = kl_spec_str(sc, "type", "constant", &t, e))) return rc;
        if (!strcmp(t, "constant")) s->sched = TR_SCHED_CONSTANT;
        else if (!strcmp(t, "cosine")) s->sched = TR_SCHED_COSINE;
        else if (!strcmp(t, "exponential")) s->sched = TR_SCHED_EXPONENTIAL;
        else if (!strcmp(t, "step")) s->sched = TR_SCHED_STEP;
        else return kl_node_error(kl_node_get(sc, "type"), e, KL_EINVAL, "schedule.type: constant, cosine, exponential or step, got '%s'", t);
        if ((rc = pos_int(sc, "warmup_steps", 0, 0, &s->warmup, e))) return rc;
        /* min_lr is cosine's floor, gamma the decay of exponential and step,
         * step_size step's period: read only where they act */
        if (s->sched == TR_SCHED_COSINE && (rc = rng_double(sc, "min_lr", 0, 0, 1e6, &s->min_lr, e))) return rc;
        if ((s->sched == TR_SCHED_EXPONENTIAL || s->sched == TR_SCHED_STEP) &&
            (rc = rng_double(sc, "gamma", s->sched == TR_SCHED_EXPONENTIAL ? 0.95 : 0.1, 0, 1, &s->gamma, e)))
            return rc;
        if (s->sched == TR_SCHED_STEP && (rc = pos_int(sc, "step_size", 1, 1, &s->step_size, e))) return rc;
    }
    return KL_OK;
}

/* train: epochs, batches, precision and loss scaling, distribution, init, early stopping */
static int parse_train(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *tr = kl_node_get(root, "train");
    s->micro_batches = 8;
    s->bucket_mb = 25;
    s->first_bucket_mb = 1;
    s->check_every = 100;
    s->dist_timeout = 120;
    s->epochs = 10; s->batch = 32; s->shuffle = 1; s->val_fraction = 0.1; s->log_every = 1;
    snprintf(s->monitor, sizeof s->monitor, "val_loss");
    s->ls_init = 65536; s->ls_growth = 2; s->ls_backoff = 0.5; s->ls_interval = 2000; s->ls_min = 1.0 / 65536;
    if (tr) {
        static const char *k[] = {"epochs",    "batch_size", "max_steps",        "grad_clip",      "val_fraction",
                                  "shuffle",   "drop_last",  "checkpoint_every", "early_stopping", "init",
                                  "precision", "loss_scale", "deterministic",    "distributed"};
        if ((rc = kl_spec_check_keys(tr, k, KL_ARRAY_LEN(k), e))) return rc;
        if ((rc = pos_int(tr, "epochs", 10, 1, &s->epochs, e)) || (rc = pos_int(tr, "batch_size", 32, 1, &s->batch, e)) ||
            (rc = pos_int(tr, "max_steps", 0, 0, &s->max_steps, e)) || (rc = pos_int(tr, "checkpoint_every", 0, 0, &s->ckpt_every, e)))
            return rc;
        if ((rc = rng_double(tr, "grad_clip", 0, 0, 1e12, &s->clip, e)) || (rc = rng_double(tr, "val_fraction", 0.1, 0, 0.9, &s->val_fraction, e)))
            return rc;
        if ((rc = kl_spec_bool(tr, "shuffle", 1, &s->shuffle, e)) || (rc = kl_spec_bool(tr, "drop_last", 0, &s->drop_last, e))) return rc;
        const char *prec;
        if ((rc = kl_spec_str(tr, "precision", "fp32", &prec, e))) return rc;
        if (!strcmp(prec, "fp16")) s->fp16 = 1;
        else if (strcmp(prec, "fp32")) return kl_node_error(kl_node_get(tr, "precision"), e, KL_EINVAL, "precision: fp32 or fp16, got '%s'", prec);
        const kl_node *ls = s->fp16 ? kl_node_get(tr, "loss_scale") : NULL; /* fp16's loss scaling only */
        if (ls) {
            static const char *lk[] = {"init", "growth", "backoff", "interval", "min"};
            if ((rc = kl_spec_check_keys(ls, lk, 5, e))) return rc;
            if ((rc = rng_double(ls, "init", 65536, 1e-30, 1e38, &s->ls_init, e)) || (rc = rng_double(ls, "growth", 2, 1, 1e6, &s->ls_growth, e)) ||
                (rc = rng_double(ls, "backoff", 0.5, 1e-6, 1, &s->ls_backoff, e)) || (rc = pos_int(ls, "interval", 2000, 1, &s->ls_interval, e)) ||
                (rc = rng_double(ls, "min", 1.0 / 65536, 0, 1e38, &s->ls_min, e)))
                return rc;
        }
        if ((rc = kl_spec_bool(tr, "deterministic", 0, &s->deterministic, e)) || (rc = dist_spec(tr, s, e))) return rc;
        const char *ip;
        if ((rc = kl_spec_str(tr, "init", "", &ip, e))) return rc;
        if (*ip && (rc = rel_path(s, ip, &s->init_path, e))) return rc;
        const kl_node *es = kl_node_get(tr, "early_stopping");
        if (es) {
            static const char *ek[] = {"patience", "monitor", "min_delta"};
            if ((rc = kl_spec_check_keys(es, ek, 3, e))) return rc;
            if ((rc = pos_int(es, "patience", 5, 1, &s->patience, e))) return rc;
            if ((rc = rng_double(es, "min_delta", 0, 0, 1e12, &s->min_delta, e))) return rc;
            const char *m;
            if ((rc = kl_spec_str(es, "monitor", "val_loss", &m, e))) return rc;
            if (strcmp(m, "val_loss") && strcmp(m, "val_acc"))
                return kl_node_error(kl_node_get(es, "monitor"), e, KL_EINVAL, "monitor: val_loss or val_acc");
            snprintf(s->monitor, sizeof s->monitor, "%s", m);
        }
    }
    return KL_OK;
}

/* data: a Parquet dataset, or .npy files / image shards (paths relative to the spec's folder) */
static int parse_data(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    const kl_node *da = kl_node_get(root, "data");
    if (da && kl_node_get(da, "dataset")) {   /* Parquet source (src/train/data_pq.c) */
        if ((rc = kl__train_dsrc_parse(da, &s->ds, e))) return rc;
        char *abs = NULL;
        if ((rc = rel_path(s, s->ds->path, &abs, e))) return rc;
        free(s->ds->path);
        s->ds->path = abs;
    } else if (da) {
        static const char *k[] = {"x", "y", "val_x", "val_y", "shards", "val_shards", "image"};
        if ((rc = kl_spec_check_keys(da, k, 7, e))) return rc;
        char **dst[6] = {&s->x_path, &s->y_path, &s->val_x, &s->val_y, &s->shards, &s->val_shards};
        if ((rc = kl__train_image_spec_parse(kl_node_get(da, "image"), s, e))) return rc;
        for (int i = 0; i < 6; i++) {
            const char *v;
            if ((rc = kl_spec_str(da, k[i], "", &v, e))) return rc;
            if (!*v) continue;
            if ((rc = rel_path(s, v, dst[i], e))) return rc;
        }
    }
    return KL_OK;
}

/* A model spec, section by section: the top-level keys and seed, then
 * parse_input, parse_layers, parse_loss, parse_optimizer, parse_schedule,
 * parse_train, parse_data. */
static int parse(tr_spec *s, const kl_node *root, kl_err *e) {
    int rc;
    if (kl_node_kind_of(root) != KL_NODE_MAP) return kl_node_error(root, e, KL_EINVAL, "a model spec must be a map");
    static const char *top[] = {"seed",     "input", "layers", "loss", "optimizer",
                                "schedule", "train", "data",   "name", "description"};
    if ((rc = kl_spec_check_keys(root, top, KL_ARRAY_LEN(top), e))) return rc;
    (void)kl_node_get(root, "description"); /* for the reader only */
    int64_t seed;
    if ((rc = kl_spec_int(root, "seed", 0, &seed, e))) return rc;
    s->seed = (uint64_t)seed;
    if ((rc = parse_input(s, root, e))) return rc;
    if ((rc = parse_layers(s, root, e))) return rc;
    if ((rc = parse_loss(s, root, e))) return rc;
    if ((rc = parse_optimizer(s, root, e))) return rc;
    if ((rc = parse_schedule(s, root, e))) return rc;
    if ((rc = parse_train(s, root, e))) return rc;
    if ((rc = parse_data(s, root, e))) return rc;
    return KL_OK;
}

int kl__train_spec_load_str(const char *text, const char *name, tr_spec **out, kl_err *e) {
    *out = NULL;
    kl_doc *d = NULL;
    tr_spec *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->path = strdup(name);
    s->text = strdup(text);
    int rc = kl_doc_load_str(text, strlen(text), name, &d, e);
    if (rc) goto fail;
    if ((rc = parse(s, kl_doc_root(d), e)) || (rc = kl_node_check_used(kl_doc_root(d), e))) goto fail;
    kl_doc_free(d);
    *out = s;
    return KL_OK;
fail:
    kl_doc_free(d);
    kl__train_spec_free(s);
    return rc;
}

int kl__train_spec_load(const char *path, tr_spec **out, kl_err *e) {
    char *text = NULL;
    size_t len;
    *out = NULL;
    int rc = kl_read_file(path, &text, &len, e);
    if (rc) return rc;
    rc = kl__train_spec_load_str(text, path, out, e);
    kl_mem_free(text);
    return rc;
}

int kl__train_spec_load_set(const char *path, const char *const *sets, int nsets, tr_spec **out, kl_err *e) {
    if (nsets <= 0) return kl__train_spec_load(path, out, e);
    *out = NULL;
    kl_doc *d = NULL;
    kl_buf b;
    kl_buf_init(&b);
    tr_spec *s = calloc(1, sizeof *s);
    int rc = KL_OK;
    if (!s || !(s->path = strdup(path))) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    if ((rc = kl_doc_load_file(path, &d, e))) goto fail;
    for (int i = 0; i < nsets; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i]) { rc = kl_err_set(e, KL_EINVAL, "--set expects KEY=VALUE, got '%s'", sets[i]); goto fail; }
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        if ((rc = kl_doc_set(d, key, eq + 1, "--set", e))) goto fail;
    }
    if ((rc = kl_doc_to_json(d, &b))) { rc = kl_err_set(e, rc, "out of memory"); goto fail; }
    s->text = kl_buf_take(&b);
    if ((rc = parse(s, kl_doc_root(d), e)) || (rc = kl_node_check_used(kl_doc_root(d), e))) goto fail;
    kl_doc_free(d);
    *out = s;
    return KL_OK;
fail:
    kl_buf_free(&b);
    kl_doc_free(d);
    kl__train_spec_free(s);
    return rc;
}

void kl__train_spec_free(tr_spec *s) {
    if (!s) return;
    free(s->path); free(s->text); free(s->x_path); free(s->y_path); free(s->val_x); free(s->val_y); free(s->init_path);
    kl__train_dsrc_free(s->ds);
    free(s->shards); free(s->val_shards);
    free(s);
}
