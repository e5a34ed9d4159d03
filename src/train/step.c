/* The training step as one plan: the train-mode graph of the model
 * (src/train/graph.c: BatchNormalization with batch statistics, seeded
 * Dropout, the loss) extended by kl_graph_autodiff with the gradient of the
 * loss (times the loss scale in fp16 mode) for every trainable parameter,
 * planned once for the batch size (and once more for a shorter last batch),
 * and run with kl_plan_run_into: the parameters are inputs that are views of
 * the parameter block, the gradients are written straight into the gradient
 * block, the updated BatchNorm running statistics into a staging area copied
 * to the buffer block after the step. The optimizer (optim.c) then updates
 * the parameter block in place. */
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"

enum { IN_PARAM, IN_X, IN_LABELS, IN_TARGETS, IN_SEED, IN_SCALE };

struct tr_stepg {
    kl_graph *g;
    kl_plan *plan[2];
    int64_t planB[2];
    kl_tensor *in;              /* (n_in) in g->inputs order */
    int *in_kind, *in_ref;      /* what each input is; ref index (params) or layer (seeds) */
    int n_in;
    kl_tensor *out;             /* (n_out) in g->outputs order */
    int *out_kind, *out_ref;
    int n_out;
    int64_t *seeds;             /* one per input */
    float loss, scale;
    float *stage;               /* BN running stats staging (nbuf floats) */
    int64_t *ids;               /* integer inputs converted from the float batch */
    uint64_t act_bytes, arena_bytes;
    kl_plan_node_fn hook; /* kl__train_step_set_hook: after each node of the run */
    void *hook_ctx;
};

enum { OUT_LOSS, OUT_GRAD, OUT_RMEAN, OUT_RVAR, OUT_OTHER };


void kl__train_step_free(tr_model *m) {
    tr_stepg *st = m->st;
    if (!st) return;
    for (int k = 0; k < 2; k++) kl_plan_free(st->plan[k]);
    kl_graph_free(st->g);
    free(st->in); free(st->in_kind); free(st->in_ref);
    free(st->out); free(st->out_kind); free(st->out_ref);
    free(st->seeds);
    kl_mem_free(st->stage);
    kl_mem_free(st->ids);
    free(st);
    m->st = NULL;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Shapes of the inputs for a batch of Bn (data bound later). */
static void shape_inputs(tr_model *m, int64_t Bn) {
    tr_stepg *st = m->st;
    const tr_spec *s = m->spec;
    for (int i = 0; i < st->n_in; i++) {
        kl_tensor *t = &st->in[i];
        switch (st->in_kind[i]) {
        case IN_X: {
            int64_t d[4] = {Bn, s->in_dims[0], s->in_dims[1], s->in_dims[2]};
            kl_tensor_view_init(t, s->in_int ? KL_I64 : KL_F32, s->in_rank + 1, d, t->data);
            break;
        }
        case IN_LABELS: kl_tensor_view_init(t, KL_I64, 1, &Bn, t->data); break;
        case IN_TARGETS: {
            int64_t d[2] = {Bn, m->out_numel};
            kl_tensor_view_init(t, KL_F32, 2, d, t->data);
            break;
        }
        default: break;
        }
    }
}

int kl__train_step_nodes(const tr_model *m) { return m->st ? m->st->g->n_nodes : 0; }

void kl__train_step_set_hook(tr_model *m, kl_plan_node_fn fn, void *ctx) {
    m->st->hook = fn;
    m->st->hook_ctx = ctx;
}

void kl__train_step_grad_producers(const tr_model *m, int *node_of_ref, int nref) {
    const tr_stepg *st = m->st;
    const kl_graph *g = st->g;
    for (int r = 0; r < nref; r++) node_of_ref[r] = -1;
    for (int i = 0; i < st->n_out; i++) {
        if (st->out_kind[i] != OUT_GRAD || st->out_ref[i] < 0 || st->out_ref[i] >= nref) continue;
        int v = g->outputs[i];
        for (int n = 0; n < g->n_nodes && node_of_ref[st->out_ref[i]] < 0; n++)
            for (int k = 0; k < g->nodes[n].n_out; k++)
                if (g->nodes[n].outputs[k] == v) node_of_ref[st->out_ref[i]] = n;
    }
}
uint64_t kl__train_step_arena_bytes(const tr_model *m) { return m->st ? m->st->arena_bytes : 0; }

int kl__train_step_prepare(tr_model *m, int64_t B, uint64_t *act_bytes, uint64_t *ws_bytes, kl_err *e) {
    kl__train_step_free(m);
    tr_stepg *st = calloc(1, sizeof *st);
    if (!st) return kl_err_set(e, KL_ENOMEM, "out of memory");
    m->st = st;
    int rc, *wrt = NULL, *grads = NULL;
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
    if ((rc = kl__train_graph_build(m, TR_G_TRAIN, 0, &st->g, e))) goto fail;
    kl_graph *g = st->g;
    /* inputs: what each one is */
    st->n_in = g->n_inputs;
    st->in = calloc((size_t)st->n_in + 1, sizeof(kl_tensor));
    st->in_kind = calloc((size_t)st->n_in + 1, sizeof(int));
    st->in_ref = calloc((size_t)st->n_in + 1, sizeof(int));
    st->seeds = calloc((size_t)st->n_in + 1, sizeof(int64_t));
    wrt = malloc(sizeof(int) * (size_t)(nt + 1));
    grads = malloc(sizeof(int) * (size_t)(nt + 1));
    if (!st->in || !st->in_kind || !st->in_ref || !st->seeds || !wrt || !grads) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    int nw = 0;
    for (int i = 0; i < st->n_in; i++) {
        const char *nm = g->values[g->inputs[i]].name;
        st->in_ref[i] = -1;
        if (!strcmp(nm, "input")) st->in_kind[i] = IN_X;
        else if (!strcmp(nm, "labels")) st->in_kind[i] = IN_LABELS;
        else if (!strcmp(nm, "targets")) st->in_kind[i] = IN_TARGETS;
        else if (!strcmp(nm, "loss_scale")) { st->in_kind[i] = IN_SCALE; kl_tensor_view_init(&st->in[i], KL_F32, 0, NULL, &st->scale); }
        else if (ends_with(nm, ".seed")) {
            st->in_kind[i] = IN_SEED;
            for (int l = 0; l < m->n; l++)
                if (!strncmp(nm, m->L[l].sp.name, strlen(nm) - 5) && strlen(m->L[l].sp.name) == strlen(nm) - 5) st->in_ref[i] = l;
            kl_tensor_view_init(&st->in[i], KL_I64, 0, NULL, &st->seeds[i]);
        } else {
            st->in_kind[i] = IN_PARAM;
            for (int r = 0; r < nt; r++)
                if (!strcmp(refs[r].name, nm)) st->in_ref[i] = r;
            KL_ASSERT(st->in_ref[i] >= 0);
            const tr_tensor_ref *rf = &refs[st->in_ref[i]];
            kl_tensor_view_init(&st->in[i], KL_F32, rf->rank, rf->dims, NULL);
            if (!rf->buffer) wrt[nw++] = g->inputs[i];
        }
    }
    int loss = kl_graph_find_value(g, m->fp16 ? "loss_scaled" : "loss");
    if ((rc = kl_graph_autodiff(g, loss, wrt, nw, grads, e))) goto fail;
    if ((rc = kl_graph_finalize(g, e))) { kl_err_prefix(e, "training graph"); goto fail; }
    /* outputs: the loss, the gradients, the running statistics */
    st->n_out = g->n_outputs;
    st->out = calloc((size_t)st->n_out + 1, sizeof(kl_tensor));
    st->out_kind = calloc((size_t)st->n_out + 1, sizeof(int));
    st->out_ref = calloc((size_t)st->n_out + 1, sizeof(int));
    if (!st->out || !st->out_kind || !st->out_ref) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < st->n_out; i++) {
        int v = g->outputs[i];
        const char *nm = g->values[v].name;
        st->out_kind[i] = OUT_OTHER;
        st->out_ref[i] = -1;
        if (!strcmp(nm, "loss")) { st->out_kind[i] = OUT_LOSS; continue; }
        for (int w = 0; w < nw; w++)
            if (grads[w] == v)
                for (int k = 0; k < st->n_in; k++)
                    if (g->inputs[k] == wrt[w]) { st->out_kind[i] = OUT_GRAD; st->out_ref[i] = st->in_ref[k]; }
        if (st->out_kind[i] != OUT_OTHER) continue;
        int is_m = ends_with(nm, ".running_mean_new"), is_v = ends_with(nm, ".running_var_new");
        if (is_m || is_v) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int)(strlen(nm) - 4), nm); /* without "_new" */
            for (int r = 0; r < nt; r++)
                if (!strcmp(refs[r].name, base)) st->out_ref[i] = r;
            KL_ASSERT(st->out_ref[i] >= 0);
            st->out_kind[i] = is_m ? OUT_RMEAN : OUT_RVAR;
        }
    }
    /* the plan for the full batch: its memory is the plan's */
    shape_inputs(m, B);
    const kl_tensor *ins[TR_MAX_LAYERS * 4 + 8];
    for (int i = 0; i < st->n_in; i++) ins[i] = &st->in[i];
    if ((rc = kl_plan_new(g, ins, (size_t)st->n_in, &st->plan[0], e))) { kl_err_prefix(e, "training graph"); goto fail; }
    st->planB[0] = B;
    st->act_bytes = kl_plan_activation_bytes(st->plan[0]);
    st->arena_bytes = kl_plan_arena_bytes(st->plan[0]);
    *act_bytes = st->act_bytes;
    *ws_bytes = st->arena_bytes - st->act_bytes;
    free(wrt);
    free(grads);
    return KL_OK;
fail:
    free(wrt);
    free(grads);
    kl__train_step_free(m);
    return rc;
}

/* After kl__train_model_alloc: the parameter views, gradient views, staging. */
static int bind(tr_model *m, kl_err *e) {
    tr_stepg *st = m->st;
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
    st->stage = kl_mem_alloc_e((size_t)(m->nbuf + 16) * 4, KL_TAG_WORKSPACE, e);
    if (!st->stage) return KL_ENOMEM;
    if (m->spec->in_int) {
        st->ids = kl_mem_alloc_e((size_t)(m->B * m->in_numel + 8) * 8, KL_TAG_WORKSPACE, e);
        if (!st->ids) return KL_ENOMEM;
    }
    for (int i = 0; i < st->n_in; i++)
        if (st->in_kind[i] == IN_PARAM) st->in[i].data = refs[st->in_ref[i]].data;
    for (int i = 0; i < st->n_out; i++) {
        kl_tensor *t = &st->out[i];
        const tr_tensor_ref *rf = st->out_ref[i] >= 0 ? &refs[st->out_ref[i]] : NULL;
        switch (st->out_kind[i]) {
        case OUT_LOSS: kl_tensor_view_init(t, KL_F32, 0, NULL, &st->loss); break;
        case OUT_GRAD: kl_tensor_view_init(t, KL_F32, rf->rank, rf->dims, m->grads + (rf->data - m->params)); break;
        case OUT_RMEAN: case OUT_RVAR: kl_tensor_view_init(t, KL_F32, rf->rank, rf->dims, st->stage + (rf->data - m->bufs)); break;
        default: break;
        }
    }
    return KL_OK;
}

/* Dropout seed of layer l at step: splitmix64 of the run seed, the step and
 * the layer (resume needs no RNG state). */
static int64_t drop_seed(uint64_t seed, int64_t step, int l) {
    uint64_t z = seed ^ 0x64726f706f7574ull ^ ((uint64_t)step * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(l + 1) << 48);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (int64_t)((z ^ (z >> 31)) >> 1);
}

int kl__train_step_run(tr_model *m, const float *x, const int64_t *yi, const float *yf, int64_t Bn, int64_t step,
                    float scale, double *loss, kl_err *e) {
    tr_stepg *st = m->st;
    int rc;
    if (!st->stage && (rc = bind(m, e))) return rc;
    int k = Bn == st->planB[0] ? 0 : 1;
    shape_inputs(m, Bn);
    const void *xd = x;
    if (m->spec->in_int) {
        for (int64_t i = 0; i < Bn * m->in_numel; i++) st->ids[i] = (int64_t)x[i];
        xd = st->ids;
    }
    for (int i = 0; i < st->n_in; i++)
        switch (st->in_kind[i]) {
        case IN_X: st->in[i].data = (void *)xd; break;
        case IN_LABELS: st->in[i].data = (void *)yi; break;
        case IN_TARGETS: st->in[i].data = (void *)yf; break;
        case IN_SEED: st->seeds[i] = drop_seed(m->spec->seed, step, st->in_ref[i]); break;
        default: break;
        }
    st->scale = scale;
    const kl_tensor *ins[TR_MAX_LAYERS * 4 + 8];
    kl_tensor *outs[TR_MAX_LAYERS * 4 + 8];
    for (int i = 0; i < st->n_in; i++) ins[i] = &st->in[i];
    for (int i = 0; i < st->n_out; i++) outs[i] = st->out_kind[i] == OUT_OTHER ? NULL : &st->out[i];
    if (k == 1 && st->planB[1] != Bn) { /* a shorter last batch */
        kl_plan_free(st->plan[1]);
        st->plan[1] = NULL;
        if ((rc = kl_plan_new(st->g, ins, (size_t)st->n_in, &st->plan[1], e))) return rc;
        st->planB[1] = Bn;
        if (kl_plan_arena_bytes(st->plan[1]) > m->arena_bytes) { /* not expected: fewer rows need less */
            kl_mem_free(m->arena);
            m->arena_bytes = kl_plan_arena_bytes(st->plan[1]);
            if (!(m->arena = kl_mem_alloc_e((size_t)m->arena_bytes, KL_TAG_ACTIVATIONS, e))) return KL_ENOMEM;
        }
    }
    /* with a hook (data-parallel: start a gradient bucket's all-reduce when it
     * is final), only a static plan: a dynamic one copies its outputs at the end */
    int hook = st->hook && !kl_plan_is_dynamic(st->plan[k]);
    if (hook)
        rc = kl_plan_run_into_hook(st->plan[k], st->g, ins, (size_t)st->n_in, outs, (size_t)st->n_out, m->arena,
                                   m->pool, st->hook, st->hook_ctx, e);
    else
        rc = kl_plan_run_into(st->plan[k], st->g, ins, (size_t)st->n_in, outs, (size_t)st->n_out, m->arena, m->pool, e);
    if (rc) return rc;
    for (int i = 0; i < st->n_out; i++) /* the updated running statistics */
        if (st->out_kind[i] == OUT_RMEAN || st->out_kind[i] == OUT_RVAR)
            memcpy((char *)m->bufs + ((char *)st->out[i].data - (char *)st->stage), st->out[i].data, st->out[i].nbytes);
    if (m->fp16 && !st->hook)
        kl__train_round_f16(m->grads, m->nparams); /* gradients at float16 precision (with a hook: its job) */
    *loss = st->loss;
    return KL_OK;
}
