/* The model as a graph in keel's IR (include/keel/graph.h): each layer of
 * the spec becomes the ONNX ops its forward computes (Gemm / MatMul+Add,
 * Conv, MaxPool, AveragePool, GlobalAveragePool+Flatten, BatchNormalization,
 * LayerNormalization, Relu/Sigmoid/Tanh, Erf-form GELU, Softmax, Gather,
 * Add; Dropout is Identity in eval mode). The parameters are graph INPUTS
 * named as the checkpoint tensors ("<layer>.weight", ".bias",
 * ".running_mean", ".running_var") and fed as views of the parameter block,
 * or (export) initializers wrapping it. The eval forward runs this graph
 * through a kl_plan; export writes it with kl_onnx_save. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keel/onnx.h"
#include "train/train_int.h"

/* ================================================================ building */

typedef struct {
    kl_graph *g;
    int nn;                 /* nodes of the current layer, for names */
    const char *layer;      /* current layer name ("" outside layers) */
    int oom;
    kl_dtype ft;            /* float type of the graph (f64 for gradient checks) */
    tr_model *m;
    int train, with_loss, params_init;
    char (*oname)[TR_NAME + 16]; /* each layer's output value */
    int need_gelu;               /* a GELU layer uses the gelu_* constants */
} gb;

/* Node names follow the spec: the layer's first node is called as the layer,
 * its helpers "<layer>/<op>", so errors and exported graphs name the layer. */
static void node_name(gb *b, const char *op, char *nm, size_t n) {
    if (!*b->layer) snprintf(nm, n, "%s_%d", op, b->nn);
    else if (!b->nn) snprintf(nm, n, "%s", b->layer);
    else snprintf(nm, n, "%s/%s_%d", b->layer, op, b->nn);
    b->nn++;
}

static kl_gnode *node(gb *b, const char *op, const char *const *in, int nin, const char *out) {
    char nm[160];
    node_name(b, op, nm, sizeof nm);
    const char *outs[1] = {out};
    int i = kl_graph_add_node(b->g, op, nm, in, nin, outs, 1);
    if (i < 0) { b->oom = 1; return NULL; }
    return &b->g->nodes[i];
}
static void a_int(gb *b, kl_gnode *n, const char *name, int64_t v) {
    kl_attr *a = n ? kl_gnode_attr_add(n, name, KL_ATTR_INT) : NULL;
    if (!a) { b->oom = 1; return; }
    a->i = v;
}
static void a_float(gb *b, kl_gnode *n, const char *name, float v) {
    kl_attr *a = n ? kl_gnode_attr_add(n, name, KL_ATTR_FLOAT) : NULL;
    if (!a) { b->oom = 1; return; }
    a->f = v;
}
static void a_ints(gb *b, kl_gnode *n, const char *name, const int64_t *v, int cnt) {
    kl_attr *a = n ? kl_gnode_attr_add(n, name, KL_ATTR_INTS) : NULL;
    if (a) a->ints = malloc(sizeof(int64_t) * (size_t)(cnt + 1));
    if (!a || !a->ints) { b->oom = 1; return; }
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)cnt);
    a->n = cnt;
}

/* Declares value `name` as a graph input (dtype, [N?, dims...]). */
static int add_input(gb *b, const char *name, kl_dtype dt, int batch, int rank, const int64_t *dims) {
    kl_graph *g = b->g;
    int v = kl_graph_value(g, name);
    int *ni = realloc(g->inputs, sizeof(int) * (size_t)(g->n_inputs + 1));
    if (v < 0 || !ni) { b->oom = 1; return -1; }
    g->inputs = ni;
    g->inputs[g->n_inputs++] = v;
    kl_value *val = &g->values[v];
    val->is_input = 1;
    val->dtype = dt;
    val->rank = rank + (batch ? 1 : 0);
    if (batch) {
        val->dims[0] = -1;
        val->dim_names[0] = strdup("N");
        if (!val->dim_names[0]) b->oom = 1;
    }
    for (int i = 0; i < rank; i++) val->dims[i + (batch ? 1 : 0)] = dims[i];
    return v;
}

/* Makes value `name` a graph output. */
static void add_output(gb *b, const char *name) {
    kl_graph *g = b->g;
    int v = kl_graph_value(g, name);
    int *no = realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    if (v < 0 || !no) { b->oom = 1; return; }
    g->outputs = no;
    g->outputs[g->n_outputs++] = v;
    g->values[v].is_output = 1;
}

/* A constant (initializer) f32 tensor; data copied. */
static void add_const(gb *b, const char *name, int rank, const int64_t *dims, const float *data) {
    int v = kl_graph_value(b->g, name);
    kl_tensor *t = NULL;
    kl_err e2 = {0};
    if (v < 0 || kl_tensor_new(b->ft, rank, dims, KL_TAG_PARAMS, &t, &e2)) { b->oom = 1; return; }
    if (b->ft == KL_F64)
        for (int64_t i = 0; i < kl_tensor_numel(t); i++) ((double *)t->data)[i] = data[i];
    else memcpy(t->data, data, t->nbytes);
    kl_value *val = &b->g->values[v];
    val->init = t;
    val->dtype = b->ft;
    val->rank = rank;
    for (int i = 0; i < rank; i++) val->dims[i] = dims[i];
}

static kl_gnode *train_node(gb *b, kl_gnode *n) { /* moves n into the ai.keel.train domain */
    if (!n) return NULL;
    if (kl_gnode_set_domain(n, TR_TRAIN_DOMAIN, 1)) b->oom = 1;
    return n;
}

/* ---- stage 1: the graph's inputs ----------------------------------------- */

/* The batch, then every parameter and buffer (checkpoint order) as inputs or
 * (export) initializers wrapping the parameter block; the labels or targets;
 * one seed per dropout layer and the loss scale when training. */
static void graph_inputs(gb *b, kl_err *e) {
    tr_model *m = b->m;
    const tr_spec *s = m->spec;
    kl_graph *g = b->g;
    add_input(b, "input", s->in_int ? KL_I64 : b->ft, 1, s->in_rank, s->in_dims);
    tr_tensor_ref refs[TR_MAX_LAYERS * 4];
    int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
    for (int i = 0; i < nt; i++) {
        if (!b->params_init) {
            add_input(b, refs[i].name, b->ft, 0, refs[i].rank, refs[i].dims);
            continue;
        }
        int v = kl_graph_value(g, refs[i].name);
        kl_tensor *t = NULL;
        if (v < 0 || kl_tensor_wrap(KL_F32, refs[i].rank, refs[i].dims, refs[i].data, &t, e)) { b->oom = 1; break; }
        kl_value *val = &g->values[v];
        val->init = t;
        val->dtype = KL_F32;
        val->rank = refs[i].rank;
        for (int d = 0; d < refs[i].rank; d++) val->dims[d] = refs[i].dims[d];
    }
    if (b->with_loss) { /* labels or targets */
        int64_t K = m->out_numel;
        if (s->loss == TR_LOSS_CE) add_input(b, "labels", KL_I64, 1, 0, NULL);
        else add_input(b, "targets", b->ft, 1, 1, &K);
    }
    if (b->train) { /* one seed per dropout layer, the loss scale */
        for (int i = 0; i < m->n; i++)
            if (m->L[i].sp.type == TR_L_DROPOUT && m->L[i].sp.p_drop > 0) {
                char sn[TR_NAME + 16];
                snprintf(sn, sizeof sn, "%s.seed", m->L[i].sp.name);
                add_input(b, sn, KL_I64, 0, 0, NULL);
            }
        if (m->fp16) add_input(b, "loss_scale", b->ft, 0, 0, NULL);
    }
}

/* ---- stage 2: each layer's ops -------------------------------------------- */

/* Linear: Gemm on a rank-1 input; (..., I) x (O, I)^T as MatMul with the
 * transposed weight, then the bias, otherwise. */
static void emit_linear(gb *b, const tr_lspec *L, const char *x, int r_in, int has_b, const char *wn, const char *bn) {
    char t1[96], t2[96];
    if (r_in == 1) {
        const char *in[3] = {x, wn, bn};
        kl_gnode *n = node(b, "Gemm", in, has_b ? 3 : 2, L->name);
        a_int(b, n, "transB", 1);
        return;
    }
    snprintf(t1, sizeof t1, "%s.weight_t", L->name);
    snprintf(t2, sizeof t2, "%s_mm", L->name);
    const char *in0[1] = {wn}, *in[2] = {x, t1}, *in2[2] = {t2, bn};
    int64_t perm[2] = {1, 0};
    kl_gnode *n = node(b, "Transpose", in0, 1, t1);
    a_ints(b, n, "perm", perm, 2);
    node(b, "MatMul", in, 2, has_b ? t2 : L->name);
    if (has_b) node(b, "Add", in2, 2, L->name);
}

/* Conv, MaxPool, AveragePool: kernel, strides, symmetric pads. */
static void emit_window(gb *b, const tr_lspec *L, const char *x, int has_b, const char *wn, const char *bn) {
    const char *in[3] = {x, wn, bn};
    int64_t pads[4] = {L->p[0], L->p[1], L->p[0], L->p[1]};
    const char *op = L->type == TR_L_CONV2D ? "Conv" : L->type == TR_L_MAXPOOL2D ? "MaxPool" : "AveragePool";
    int nin = L->type != TR_L_CONV2D ? 1 : has_b ? 3 : 2; /* pools read x only */
    kl_gnode *n = node(b, op, in, nin, L->name);
    a_ints(b, n, "kernel_shape", L->k, 2);
    a_ints(b, n, "strides", L->s, 2);
    a_ints(b, n, "pads", pads, 4);
    if (L->type == TR_L_AVGPOOL2D) a_int(b, n, "count_include_pad", 1);
}

/* BatchNormalization: batch statistics when training (the updated running
 * stats are extra outputs), the running stats otherwise. */
static void emit_batchnorm(gb *b, const tr_lspec *L, const char *x, const char *wn, const char *bn) {
    char t1[96], t2[96], t3[96], t4[96];
    snprintf(t1, sizeof t1, "%s.running_mean", L->name);
    snprintf(t2, sizeof t2, "%s.running_var", L->name);
    const char *in[5] = {x, wn, bn, t1, t2};
    kl_gnode *n;
    if (b->train) {
        snprintf(t3, sizeof t3, "%s.running_mean_new", L->name);
        snprintf(t4, sizeof t4, "%s.running_var_new", L->name);
        const char *outs[3] = {L->name, t3, t4};
        char nm[160];
        node_name(b, "BatchNormalization", nm, sizeof nm);
        int k = kl_graph_add_node(b->g, "BatchNormalization", nm, in, 5, outs, 3);
        n = k < 0 ? NULL : &b->g->nodes[k];
        if (!n) b->oom = 1;
        a_int(b, n, "training_mode", 1);
        a_int(b, n, "_unbiased_var", 1); /* PyTorch's running_var (unbiased batch variance) */
        add_output(b, t3);
        add_output(b, t4);
    } else {
        n = node(b, "BatchNormalization", in, 5, L->name);
    }
    a_float(b, n, "epsilon", (float)L->eps);
    a_float(b, n, "momentum", (float)(1 - L->momentum));
}

/* Dropout: the seeded mask ai.keel.train::Dropout(x, seed) -> (y, mask)
 * when training, Identity otherwise. */
static void emit_dropout(gb *b, const tr_lspec *L, const char *x) {
    if (!(b->train && L->p_drop > 0)) {
        const char *in[1] = {x};
        node(b, "Identity", in, 1, L->name);
        return;
    }
    char t1[96], t2[96], nm[160];
    snprintf(t1, sizeof t1, "%s.seed", L->name);
    snprintf(t2, sizeof t2, "%s_mask", L->name);
    const char *in[2] = {x, t1}, *outs[2] = {L->name, t2};
    node_name(b, "Dropout", nm, sizeof nm);
    int k = kl_graph_add_node(b->g, "Dropout", nm, in, 2, outs, 2);
    kl_gnode *n = train_node(b, k < 0 ? NULL : &b->g->nodes[k]);
    if (!n) b->oom = 1;
    a_float(b, n, "ratio", (float)L->p_drop);
}

/* GELU in its erf form: 0.5 * x * (1 + erf(x / sqrt(2))). */
static void emit_gelu(gb *b, const tr_lspec *L, const char *x) {
    char t1[96], t2[96], t3[96], t4[96];
    b->need_gelu = 1;
    snprintf(t1, sizeof t1, "%s_div", L->name);
    snprintf(t2, sizeof t2, "%s_erf", L->name);
    snprintf(t3, sizeof t3, "%s_add", L->name);
    snprintf(t4, sizeof t4, "%s_mul", L->name);
    const char *a1[2] = {x, "gelu_sqrt2"}, *a2[1] = {t1}, *a3[2] = {t2, "gelu_one"}, *a4[2] = {x, t3},
               *a5[2] = {t4, "gelu_half"};
    node(b, "Div", a1, 2, t1);
    node(b, "Erf", a2, 1, t2);
    node(b, "Add", a3, 2, t3);
    node(b, "Mul", a4, 2, t4);
    node(b, "Mul", a5, 2, L->name);
}

/* An op with one input and an optional integer attribute. */
static void emit_unary(gb *b, const char *op, const char *x, const char *out, const char *attr, int64_t v) {
    const char *in[1] = {x};
    kl_gnode *n = node(b, op, in, 1, out);
    if (attr) a_int(b, n, attr, v);
}

/* Layer i's ops; its output value is b->oname[i] (the layer's name, or its
 * float16 round trip when training in fp16). */
static void emit_layer(gb *b, int i) {
    tr_model *m = b->m;
    tr_layer *l = &m->L[i];
    const tr_lspec *L = &l->sp;
    const char *x = l->in[0] < 0 ? "input" : b->oname[l->in[0]];
    b->layer = L->name;
    b->nn = 0;
    char wn[96], bn[96], t1[96], t2[96];
    snprintf(wn, sizeof wn, "%s.weight", L->name);
    snprintf(bn, sizeof bn, "%s.bias", L->name);
    int has_b = l->b_off >= 0;
    int r_in = l->in[0] < 0 ? m->spec->in_rank : m->L[l->in[0]].rank;
    switch (L->type) {
    case TR_L_LINEAR: emit_linear(b, L, x, r_in, has_b, wn, bn); break;
    case TR_L_CONV2D:
    case TR_L_MAXPOOL2D:
    case TR_L_AVGPOOL2D: emit_window(b, L, x, has_b, wn, bn); break;
    case TR_L_GAP:
        snprintf(t1, sizeof t1, "%s_gap", L->name);
        emit_unary(b, "GlobalAveragePool", x, t1, NULL, 0);
        emit_unary(b, "Flatten", t1, L->name, "axis", 1);
        break;
    case TR_L_FLATTEN: emit_unary(b, "Flatten", x, L->name, "axis", 1); break;
    case TR_L_BATCHNORM2D: emit_batchnorm(b, L, x, wn, bn); break;
    case TR_L_LAYERNORM: {
        const char *in[3] = {x, wn, bn};
        kl_gnode *n = node(b, "LayerNormalization", in, 3, L->name);
        a_int(b, n, "axis", -1);
        a_float(b, n, "epsilon", (float)L->eps);
        break;
    }
    case TR_L_EMBEDDING: {
        const char *in[2] = {wn, x};
        kl_gnode *n = node(b, "Gather", in, 2, L->name);
        a_int(b, n, "axis", 0);
        break;
    }
    case TR_L_DROPOUT: emit_dropout(b, L, x); break;
    case TR_L_RELU: emit_unary(b, "Relu", x, L->name, NULL, 0); break;
    case TR_L_SIGMOID: emit_unary(b, "Sigmoid", x, L->name, NULL, 0); break;
    case TR_L_TANH: emit_unary(b, "Tanh", x, L->name, NULL, 0); break;
    case TR_L_SOFTMAX: emit_unary(b, "Softmax", x, L->name, "axis", -1); break;
    case TR_L_GELU: emit_gelu(b, L, x); break;
    case TR_L_ADD: {
        const char *in[2] = {x, l->in[1] < 0 ? "input" : b->oname[l->in[1]]};
        node(b, "Add", in, 2, L->name);
        break;
    }
    default: break;
    }
    snprintf(b->oname[i], sizeof b->oname[i], "%s", L->name);
    if (m->fp16 && !b->params_init) { /* activations at float16 precision: Cast to f16 and back */
        snprintf(t1, sizeof t1, "%s_f16", L->name);
        snprintf(t2, sizeof t2, "%s_r16", L->name);
        emit_unary(b, "Cast", L->name, t1, "to", 10);
        emit_unary(b, "Cast", t1, t2, "to", 1);
        snprintf(b->oname[i], sizeof b->oname[i], "%s", t2);
    }
}

/* ---- stage 3: the loss ---------------------------------------------------- */

/* The loss (mean over the batch) on the flattened logits; scaled in fp16. */
static void emit_loss(gb *b) {
    tr_model *m = b->m;
    const tr_spec *s = m->spec;
    const tr_layer *last = &m->L[m->n - 1];
    const char *z = b->oname[m->n - 1];
    if (last->rank > 1) {
        emit_unary(b, "Flatten", z, "logits", "axis", 1);
        z = "logits";
    }
    if (s->loss == TR_LOSS_CE) {
        if (s->nclass_w) {
            int64_t K = s->nclass_w;
            add_const(b, "class_weight", 1, &K, s->class_w);
        }
        const char *in[3] = {z, "labels", "class_weight"};
        kl_gnode *n = train_node(b, node(b, "CrossEntropyLoss", in, s->nclass_w ? 3 : 2, "loss"));
        a_float(b, n, "label_smoothing", (float)s->label_smoothing);
    } else {
        const char *in[2] = {z, "targets"};
        train_node(b, node(b, s->loss == TR_LOSS_BCE ? "BCEWithLogitsLoss" : "MSELoss", in, 2, "loss"));
    }
    add_output(b, "loss");
    if (b->train && m->fp16) {
        const char *in[2] = {"loss", "loss_scale"};
        node(b, "Mul", in, 2, "loss_scaled");
    }
}

/* ---- stage 4: the output -------------------------------------------------- */

/* The output keeps the last layer's name; "output" is an Identity of it
 * with a free batch dimension N. */
static void emit_output(gb *b) {
    kl_graph *g = b->g;
    const tr_layer *last = &b->m->L[b->m->n - 1];
    const char *in[1] = {b->oname[b->m->n - 1]};
    const char *outs[1] = {"output"};
    int ni = kl_graph_add_node(g, "Identity", "output_identity", in, 1, outs, 1);
    int v = kl_graph_find_value(g, "output");
    int *no = realloc(g->outputs, sizeof(int) * (size_t)(g->n_outputs + 1));
    if (no) g->outputs = no;
    if (ni < 0 || v < 0 || !no) {
        b->oom = 1;
        return;
    }
    kl_value *val = &g->values[v];
    val->is_output = 1;
    val->dtype = KL_F32;
    val->rank = last->rank + 1;
    val->dims[0] = -1;
    val->dim_names[0] = strdup("N");
    for (int d = 0; d < last->rank; d++) val->dims[d + 1] = last->dims[d];
    g->outputs[g->n_outputs++] = v;
}

/* The build, stage by stage: graph_inputs; emit_layer for each layer; the
 * constants GELU layers share; emit_loss (training, eval with loss);
 * emit_output (eval, export); finalize (eval, export). */
int kl__train_graph_build(tr_model *m, int mode, int params_init, kl_graph **out, kl_err *e) {
    *out = NULL;
    kl_graph *g = NULL;
    int rc = kl_graph_new(&g, e);
    if (rc) return rc;
    gb B = {.g = g, .layer = "", .ft = m->f64 && !params_init ? KL_F64 : KL_F32, .m = m, .params_init = params_init};
    gb *b = &B;
    b->train = mode == TR_G_TRAIN;
    b->with_loss = b->train || mode == TR_G_EVAL_LOSS;
    g->opset = 17;
    g->name = strdup("keel_model");
    g->producer = strdup("keel 0.1");
    g->outputs = malloc(sizeof(int) * 2);
    b->oname = calloc((size_t)m->n + 1, sizeof *b->oname);
    if (!g->name || !g->producer || !g->outputs || !b->oname) b->oom = 1;
    if (!b->oom) graph_inputs(b, e);
    for (int i = 0; i < m->n && !b->oom; i++) emit_layer(b, i);
    b->layer = "";
    b->nn = 0;
    if (b->need_gelu && !b->oom) {
        float c[3] = {(float)M_SQRT2, 1.0f, 0.5f};
        add_const(b, "gelu_sqrt2", 0, NULL, &c[0]);
        add_const(b, "gelu_one", 0, NULL, &c[1]);
        add_const(b, "gelu_half", 0, NULL, &c[2]);
    }
    if (b->with_loss && !b->oom) emit_loss(b);
    if (!b->train && !b->oom) emit_output(b);
    free(b->oname);
    if (b->oom) { rc = kl_err_set(e, KL_ENOMEM, "out of memory building the model graph"); goto fail; }
    if (!b->train && (rc = kl_graph_finalize(g, e))) {
        kl_err_prefix(e, "model graph");
        goto fail;
    }
    *out = g;
    return KL_OK;
fail:
    kl_graph_free(g);
    return rc;
}

/* ================================================================ export */

int kl__train_export_onnx(tr_model *m, const char *path, kl_err *e) {
    kl_graph *g = NULL;
    int rc = kl__train_graph_build(m, TR_G_EVAL, 1, &g, e);
    if (!rc) rc = kl_onnx_save(g, path, e);
    kl_graph_free(g);
    return rc;
}

/* ================================================================ eval forward */


void kl__train_eval_free(tr_model *m) {
    for (int k = 0; k < 2; k++) {
        kl_plan_free(m->ev.plan[k]);
        kl_mem_free(m->ev.arena[k]);
        m->ev.plan[k] = NULL;
        m->ev.arena[k] = NULL;
    }
    kl_graph_free(m->ev.g);
    kl_mem_free(m->ev.ids);
    free(m->ev.in);
    memset(&m->ev, 0, sizeof m->ev);
}

const float *kl__train_model_eval(tr_model *m, const float *x, const int64_t *yi, const float *yf, int64_t Bn,
                               double *loss, kl_err *e) {
    tr_evalg *ev = &m->ev;
    const tr_spec *s = m->spec;
    if (!ev->g) {
        if (kl__train_graph_build(m, TR_G_EVAL_LOSS, 0, &ev->g, e)) return NULL;
        ev->n_in = ev->g->n_inputs;
        ev->in = calloc((size_t)ev->n_in, sizeof(kl_tensor));
        if (!ev->in) { kl_err_set(e, KL_ENOMEM, "out of memory"); return NULL; }
        tr_tensor_ref refs[TR_MAX_LAYERS * 4];
        int nt = kl__train_model_tensors(m, refs, TR_MAX_LAYERS * 4);
        KL_ASSERT(nt + 2 == ev->n_in);
        for (int i = 0; i < nt; i++) kl_tensor_view_init(&ev->in[i + 1], KL_F32, refs[i].rank, refs[i].dims, refs[i].data);
        if (s->in_int) {
            ev->ids = kl_mem_alloc_e((size_t)(m->B * m->in_numel) * 8 + 64, KL_TAG_WORKSPACE, e);
            if (!ev->ids) return NULL;
        }
        ev->out_v = kl_graph_find_value(ev->g, "output");
        ev->loss_v = kl_graph_find_value(ev->g, "loss");
    }
    /* one plan for the full batch, one for a shorter last batch */
    int k = Bn == m->B ? 0 : 1;
    if (!ev->plan[k] || ev->planB[k] != Bn) {
        kl_plan_free(ev->plan[k]);
        kl_mem_free(ev->arena[k]);
        ev->plan[k] = NULL;
        ev->arena[k] = NULL;
    }
    int64_t dims[4] = {Bn, s->in_dims[0], s->in_dims[1], s->in_dims[2]};
    void *xd = (void *)x;
    if (s->in_int) {
        for (int64_t i = 0; i < Bn * m->in_numel; i++) ev->ids[i] = (int64_t)x[i];
        xd = ev->ids;
    }
    kl_tensor_view_init(&ev->in[0], s->in_int ? KL_I64 : KL_F32, s->in_rank + 1, dims, xd);
    int64_t dt[2] = {Bn, m->out_numel};
    if (s->loss == TR_LOSS_CE) kl_tensor_view_init(&ev->in[ev->n_in - 1], KL_I64, 1, dt, (void *)yi);
    else kl_tensor_view_init(&ev->in[ev->n_in - 1], KL_F32, 2, dt, (void *)yf);
    const kl_tensor *ins[TR_MAX_LAYERS * 4 + 2];
    for (int i = 0; i < ev->n_in; i++) ins[i] = &ev->in[i];
    if (!ev->plan[k]) {
        if (kl_plan_new(ev->g, ins, (size_t)ev->n_in, &ev->plan[k], e)) return NULL;
        ev->planB[k] = Bn;
        if (kl_plan_arena_bytes(ev->plan[k]) > m->arena_bytes) { /* else the training step's arena serves */
            ev->arena[k] = kl_mem_alloc_e((size_t)kl_plan_arena_bytes(ev->plan[k]) + 64, KL_TAG_ACTIVATIONS, e);
            if (!ev->arena[k]) return NULL;
        }
    }
    float *y = m->out, lv = 0;
    kl_tensor to[2], *outs[2];
    for (int i = 0; i < ev->g->n_outputs && i < 2; i++) {
        if (ev->g->outputs[i] == ev->out_v) kl_tensor_view_init(&to[i], KL_F32, 2, dt, y);
        else kl_tensor_view_init(&to[i], KL_F32, 0, NULL, &lv);
        outs[i] = &to[i];
    }
    const kl_tensor *ov = kl_plan_value(ev->plan[k], ev->out_v);
    if (ov && ov->rank != 2) /* the output keeps the last layer's shape: view the rows with it */
        for (int i = 0; i < ev->g->n_outputs && i < 2; i++)
            if (ev->g->outputs[i] == ev->out_v) kl_tensor_view_init(&to[i], KL_F32, ov->rank, ov->dims, y);
    if (kl_plan_run_into(ev->plan[k], ev->g, ins, (size_t)ev->n_in, outs, (size_t)ev->g->n_outputs,
                         ev->arena[k] ? ev->arena[k] : m->arena, m->pool, e))
        return NULL;
    *loss = lv;
    return y;
}
