/* ONNX export (opset 17) of a model's eval-mode forward graph. Each layer
 * maps to the ONNX op its forward kernel implements (Gemm, Conv, MaxPool,
 * AveragePool, GlobalAveragePool+Flatten, BatchNormalization,
 * LayerNormalization, Relu/Sigmoid/Tanh, Erf-form GELU, Softmax, Gather, Add).
 * The protobuf is written by a minimal encoder (field tags and varints of
 * onnx.proto's ModelProto/GraphProto/NodeProto/TensorProto/ValueInfoProto):
 * the graph helper's generated onnx.pb-c.h did not exist when this was
 * written; switch to it (or to the graph exporter) when it lands. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_int.h"

/* ---------------------------------------------------------- protobuf */

static void pb_varint(kl_buf *b, uint64_t v) {
    uint8_t t[10];
    int n = 0;
    do { t[n] = (uint8_t)(v & 0x7f); v >>= 7; if (v) t[n] |= 0x80; n++; } while (v);
    kl_buf_append(b, t, (size_t)n);
}
static void pb_key(kl_buf *b, int field, int wt) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wt); }
static void pb_int(kl_buf *b, int field, int64_t v) { pb_key(b, field, 0); pb_varint(b, (uint64_t)v); }
static void pb_bytes(kl_buf *b, int field, const void *d, size_t n) { pb_key(b, field, 2); pb_varint(b, n); kl_buf_append(b, d, n); }
static void pb_str(kl_buf *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }
static void pb_msg(kl_buf *b, int field, kl_buf *m) { pb_bytes(b, field, m->data ? m->data : "", m->len); kl_buf_free(m); }
static void pb_float(kl_buf *b, int field, float f) { pb_key(b, field, 5); kl_buf_append(b, &f, 4); }

/* ----------------------------------------------------------- builders */

typedef struct {
    kl_buf nodes, inits;
    int nn;
} gctx;

/* attribute: kind 'i' int, 'f' float, 'I' ints */
typedef struct { const char *name; char kind; int64_t i; float f; const int64_t *ints; int nints; } attr;

static void node(gctx *g, const char *op, const char *const *in, int nin, const char *out, const attr *a, int na) {
    kl_buf n;
    kl_buf_init(&n);
    for (int i = 0; i < nin; i++) pb_str(&n, 1, in[i]);
    pb_str(&n, 2, out);
    char nm[160];
    snprintf(nm, sizeof nm, "%s_%d", op, g->nn++);
    pb_str(&n, 3, nm);
    pb_str(&n, 4, op);
    for (int k = 0; k < na; k++) {
        kl_buf at;
        kl_buf_init(&at);
        pb_str(&at, 1, a[k].name);
        if (a[k].kind == 'f') { pb_float(&at, 2, a[k].f); pb_int(&at, 20, 1); }
        else if (a[k].kind == 'i') { pb_int(&at, 3, a[k].i); pb_int(&at, 20, 2); }
        else { for (int j = 0; j < a[k].nints; j++) pb_int(&at, 8, a[k].ints[j]); pb_int(&at, 20, 7); }
        pb_msg(&n, 5, &at);
    }
    pb_msg(&g->nodes, 1, &n);
}

static void init_f32(gctx *g, const char *name, int rank, const int64_t *dims, const float *data) {
    kl_buf t;
    kl_buf_init(&t);
    int64_t cnt = 1;
    for (int i = 0; i < rank; i++) { pb_int(&t, 1, dims[i]); cnt *= dims[i]; }
    pb_int(&t, 2, 1);
    pb_str(&t, 8, name);
    pb_bytes(&t, 9, data, (size_t)cnt * 4);
    pb_msg(&g->inits, 5, &t);
}

static void value_info(kl_buf *graph, int field, const char *name, int elem, int rank, const int64_t *dims) {
    kl_buf vi, tp, tt, sh;
    kl_buf_init(&vi); kl_buf_init(&tp); kl_buf_init(&tt); kl_buf_init(&sh);
    for (int i = 0; i <= rank; i++) {
        kl_buf d;
        kl_buf_init(&d);
        if (i == 0) pb_str(&d, 2, "N");
        else pb_int(&d, 1, dims[i - 1]);
        pb_msg(&sh, 1, &d);
    }
    pb_int(&tt, 1, elem);
    pb_msg(&tt, 2, &sh);
    pb_msg(&tp, 1, &tt);
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &tp);
    pb_msg(graph, field, &vi);
}

int tr_export_onnx(tr_model *m, const char *path, kl_err *e) {
    gctx g;
    memset(&g, 0, sizeof g);
    kl_buf_init(&g.nodes);
    kl_buf_init(&g.inits);
    int need_gelu = 0, rc;
    float *tmp = NULL;
    for (int i = 0; i < m->n; i++) {
        tr_layer *l = &m->L[i];
        const tr_lspec *L = &l->sp;
        const char *x = l->in[0] < 0 ? "input" : m->L[l->in[0]].sp.name;
        char wn[96], bn[96], t1[96], t2[96], t3[96];
        snprintf(wn, sizeof wn, "%s.weight", L->name);
        snprintf(bn, sizeof bn, "%s.bias", L->name);
        const float *w = l->w_off >= 0 ? m->params + l->w_off : NULL, *b = l->b_off >= 0 ? m->params + l->b_off : NULL;
        int r_in = l->in[0] < 0 ? m->spec->in_rank : m->L[l->in[0]].rank;
        switch (L->type) {
        case TR_L_LINEAR: {
            int64_t I = l->w_n / L->out;
            if (r_in == 1) {
                int64_t d[2] = {L->out, I};
                init_f32(&g, wn, 2, d, w);
                if (b) { init_f32(&g, bn, 1, &L->out, b); }
                const char *in[3] = {x, wn, bn};
                attr a[] = {{"transB", 'i', 1, 0, NULL, 0}};
                node(&g, "Gemm", in, b ? 3 : 2, L->name, a, 1);
            } else {
                int64_t d[2] = {I, L->out};
                free(tmp);
                tmp = malloc((size_t)(I * L->out) * 4);
                if (!tmp) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
                for (int64_t o = 0; o < L->out; o++)
                    for (int64_t k = 0; k < I; k++) tmp[k * L->out + o] = w[o * I + k];
                snprintf(t1, sizeof t1, "%s.weight_t", L->name);
                init_f32(&g, t1, 2, d, tmp);
                const char *in[2] = {x, t1};
                snprintf(t2, sizeof t2, "%s_mm", L->name);
                node(&g, "MatMul", in, 2, b ? t2 : L->name, NULL, 0);
                if (b) {
                    init_f32(&g, bn, 1, &L->out, b);
                    const char *in2[2] = {t2, bn};
                    node(&g, "Add", in2, 2, L->name, NULL, 0);
                }
            }
            break;
        }
        case TR_L_CONV2D: {
            int64_t d[4] = {L->out, l->cv.C, L->k[0], L->k[1]};
            init_f32(&g, wn, 4, d, w);
            if (b) init_f32(&g, bn, 1, &L->out, b);
            const char *in[3] = {x, wn, bn};
            int64_t pads[4] = {L->p[0], L->p[1], L->p[0], L->p[1]};
            attr a[] = {{"kernel_shape", 'I', 0, 0, L->k, 2}, {"strides", 'I', 0, 0, L->s, 2}, {"pads", 'I', 0, 0, pads, 4}};
            node(&g, "Conv", in, b ? 3 : 2, L->name, a, 3);
            break;
        }
        case TR_L_MAXPOOL2D: case TR_L_AVGPOOL2D: {
            int64_t pads[4] = {L->p[0], L->p[1], L->p[0], L->p[1]};
            attr a[] = {{"kernel_shape", 'I', 0, 0, L->k, 2}, {"strides", 'I', 0, 0, L->s, 2}, {"pads", 'I', 0, 0, pads, 4},
                        {"count_include_pad", 'i', 1, 0, NULL, 0}};
            const char *in[1] = {x};
            node(&g, L->type == TR_L_MAXPOOL2D ? "MaxPool" : "AveragePool", in, 1, L->name, a, L->type == TR_L_MAXPOOL2D ? 3 : 4);
            break;
        }
        case TR_L_GAP: {
            snprintf(t1, sizeof t1, "%s_gap", L->name);
            const char *in[1] = {x}, *in2[1] = {t1};
            node(&g, "GlobalAveragePool", in, 1, t1, NULL, 0);
            attr a[] = {{"axis", 'i', 1, 0, NULL, 0}};
            node(&g, "Flatten", in2, 1, L->name, a, 1);
            break;
        }
        case TR_L_FLATTEN: {
            const char *in[1] = {x};
            attr a[] = {{"axis", 'i', 1, 0, NULL, 0}};
            node(&g, "Flatten", in, 1, L->name, a, 1);
            break;
        }
        case TR_L_BATCHNORM2D: {
            int64_t C = l->dims[0];
            char mn[96], vn[96];
            snprintf(mn, sizeof mn, "%s.running_mean", L->name);
            snprintf(vn, sizeof vn, "%s.running_var", L->name);
            init_f32(&g, wn, 1, &C, w); init_f32(&g, bn, 1, &C, b);
            init_f32(&g, mn, 1, &C, m->bufs + l->buf_off); init_f32(&g, vn, 1, &C, m->bufs + l->buf_off + C);
            const char *in[5] = {x, wn, bn, mn, vn};
            attr a[] = {{"epsilon", 'f', 0, (float)L->eps, NULL, 0}, {"momentum", 'f', 0, (float)(1 - L->momentum), NULL, 0}};
            node(&g, "BatchNormalization", in, 5, L->name, a, 2);
            break;
        }
        case TR_L_LAYERNORM: {
            int64_t D = l->w_n;
            init_f32(&g, wn, 1, &D, w); init_f32(&g, bn, 1, &D, b);
            const char *in[3] = {x, wn, bn};
            attr a[] = {{"axis", 'i', -1, 0, NULL, 0}, {"epsilon", 'f', 0, (float)L->eps, NULL, 0}};
            node(&g, "LayerNormalization", in, 3, L->name, a, 2);
            break;
        }
        case TR_L_EMBEDDING: {
            int64_t d[2] = {L->num, L->out};
            init_f32(&g, wn, 2, d, w);
            const char *in[2] = {wn, x};
            attr a[] = {{"axis", 'i', 0, 0, NULL, 0}};
            node(&g, "Gather", in, 2, L->name, a, 1);
            break;
        }
        case TR_L_DROPOUT: { const char *in[1] = {x}; node(&g, "Identity", in, 1, L->name, NULL, 0); break; }
        case TR_L_RELU: { const char *in[1] = {x}; node(&g, "Relu", in, 1, L->name, NULL, 0); break; }
        case TR_L_SIGMOID: { const char *in[1] = {x}; node(&g, "Sigmoid", in, 1, L->name, NULL, 0); break; }
        case TR_L_TANH: { const char *in[1] = {x}; node(&g, "Tanh", in, 1, L->name, NULL, 0); break; }
        case TR_L_SOFTMAX: {
            const char *in[1] = {x};
            attr a[] = {{"axis", 'i', -1, 0, NULL, 0}};
            node(&g, "Softmax", in, 1, L->name, a, 1);
            break;
        }
        case TR_L_GELU: { /* 0.5 * x * (1 + erf(x / sqrt(2))) */
            need_gelu = 1;
            snprintf(t1, sizeof t1, "%s_div", L->name);
            snprintf(t2, sizeof t2, "%s_erf", L->name);
            snprintf(t3, sizeof t3, "%s_add", L->name);
            const char *a1[2] = {x, "gelu_sqrt2"}, *a2[1] = {t1}, *a3[2] = {t2, "gelu_one"};
            node(&g, "Div", a1, 2, t1, NULL, 0);
            node(&g, "Erf", a2, 1, t2, NULL, 0);
            node(&g, "Add", a3, 2, t3, NULL, 0);
            char t4[96];
            snprintf(t4, sizeof t4, "%s_mul", L->name);
            const char *a4[2] = {x, t3}, *a5[2] = {t4, "gelu_half"};
            node(&g, "Mul", a4, 2, t4, NULL, 0);
            node(&g, "Mul", a5, 2, L->name, NULL, 0);
            break;
        }
        case TR_L_ADD: {
            const char *in[2] = {x, l->in[1] < 0 ? "input" : m->L[l->in[1]].sp.name};
            node(&g, "Add", in, 2, L->name, NULL, 0);
            break;
        }
        default: break;
        }
    }
    if (need_gelu) {
        float c[3] = {(float)M_SQRT2, 1.0f, 0.5f};
        init_f32(&g, "gelu_sqrt2", 0, NULL, &c[0]);
        init_f32(&g, "gelu_one", 0, NULL, &c[1]);
        init_f32(&g, "gelu_half", 0, NULL, &c[2]);
    }
    kl_buf graph, model, op;
    kl_buf_init(&graph); kl_buf_init(&model); kl_buf_init(&op);
    kl_buf_append(&graph, g.nodes.data ? g.nodes.data : "", g.nodes.len);
    pb_str(&graph, 2, "keel_model");
    kl_buf_append(&graph, g.inits.data ? g.inits.data : "", g.inits.len);
    value_info(&graph, 11, "input", m->spec->in_int ? 7 : 1, m->spec->in_rank, m->spec->in_dims);
    tr_layer *last = &m->L[m->n - 1];
    /* the output keeps the last layer's name; an "output" alias via Identity */
    {
        const char *in[1] = {last->sp.name};
        kl_buf n;
        kl_buf_init(&n);
        pb_str(&n, 1, in[0]); pb_str(&n, 2, "output"); pb_str(&n, 3, "output_identity"); pb_str(&n, 4, "Identity");
        pb_msg(&graph, 1, &n);
    }
    value_info(&graph, 12, "output", 1, last->rank, last->dims);
    pb_int(&model, 1, 8);
    pb_str(&model, 2, "keel");
    pb_str(&model, 3, "0.1");
    pb_msg(&model, 7, &graph);
    pb_int(&op, 2, 17);
    pb_msg(&model, 8, &op);
    if (model.failed || g.nodes.failed || g.inits.failed) rc = kl_err_set(e, KL_ENOMEM, "out of memory writing %s", path);
    else rc = kl_write_file_atomic(path, model.data, model.len, e);
    kl_buf_free(&model);
fail:
    free(tmp);
    kl_buf_free(&g.nodes);
    kl_buf_free(&g.inits);
    return rc;
}
