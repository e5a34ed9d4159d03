/* ONNX writer: kl_graph -> ModelProto (protobuf-c generated code), the
 * inverse of onnx_load.c. Initializers become TensorProtos with raw_data
 * (pointing at the tensor data: no copy unless a view must be made
 * contiguous), graph inputs and outputs get their value info (dtype, dims;
 * a symbolic or unknown dimension is written as dim_param), nodes keep their
 * names, domains and attributes, and every domain used gets an opset import.
 * Used by the trainer's export (the eval-mode forward graph) and by anything
 * else that builds or edits a graph. */
#include "keel/onnx.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"

/* ================================================================== *
 * Allocation: everything the ModelProto points at lives in one list of
 * blocks freed together.
 * ================================================================== */

typedef union blk { union blk *next; max_align_t align; } blk;
typedef struct { blk *head; int oom; } pool_t;

static void *palloc(pool_t *p, size_t n) {
    blk *b = calloc(1, sizeof(blk) + n);
    if (!b) { p->oom = 1; return NULL; }
    b->next = p->head;
    p->head = b;
    return b + 1;
}
static void pfree_all(pool_t *p) {
    while (p->head) {
        blk *n = p->head->next;
        free(p->head);
        p->head = n;
    }
}
static char *pstr(pool_t *p, const char *s) {
    size_t n = strlen(s ? s : "");
    char *d = palloc(p, n + 1);
    if (d && n) memcpy(d, s, n);
    return d;
}

static int onnx_type(kl_dtype t) {
    switch (t) {
    case KL_F32: return 1;
    case KL_U8: return 2;
    case KL_I8: return 3;
    case KL_U16: return 4;
    case KL_I16: return 5;
    case KL_I32: return 6;
    case KL_I64: return 7;
    case KL_BOOL: return 9;
    case KL_F16: return 10;
    case KL_F64: return 11;
    case KL_U32: return 12;
    case KL_U64: return 13;
    case KL_BF16: return 16;
    default: return 0;
    }
}

/* ================================================================== *
 * Messages
 * ================================================================== */

static int tensor_proto(pool_t *p, const char *name, const kl_tensor *t, kl_tensor **tmp, Onnx__TensorProto **out, kl_err *e) {
    *out = NULL;
    int ot = onnx_type(t->dtype);
    if (!ot) return kl_err_set(e, KL_EUNSUPPORTED, "tensor '%s': dtype %s has no ONNX type", name ? name : "", kl_dtype_name(t->dtype));
    Onnx__TensorProto *tp = palloc(p, sizeof *tp);
    int64_t *dims = palloc(p, sizeof(int64_t) * (size_t)(t->rank + 1));
    if (!tp || !dims) return kl_err_set(e, KL_ENOMEM, "out of memory");
    onnx__tensor_proto__init(tp);
    for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i];
    tp->n_dims = (size_t)t->rank;
    tp->dims = dims;
    tp->has_data_type = 1;
    tp->data_type = ot;
    if (name) tp->name = pstr(p, name);
    const kl_tensor *src = t;
    if (!kl_tensor_is_contiguous(t)) { /* a view: a contiguous copy, freed by the caller after packing */
        int rc = kl_tensor_contiguous(t, KL_TAG_OTHER, tmp, e);
        if (rc) return rc;
        src = *tmp;
    }
    size_t nb = (size_t)kl_tensor_numel(src) * kl_dtype_size(src->dtype);
    tp->has_raw_data = 1;
    tp->raw_data.len = nb;
    tp->raw_data.data = nb ? src->data : NULL;
    *out = tp;
    return KL_OK;
}

static int value_proto(pool_t *p, const kl_value *v, Onnx__ValueInfoProto **out, kl_err *e) {
    Onnx__ValueInfoProto *vi = palloc(p, sizeof *vi);
    if (!vi) return kl_err_set(e, KL_ENOMEM, "out of memory");
    onnx__value_info_proto__init(vi);
    vi->name = pstr(p, v->name);
    *out = vi;
    if (v->dtype == KL_DTYPE_COUNT && v->rank < 0) return KL_OK;
    Onnx__TypeProto *tp = palloc(p, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = palloc(p, sizeof *tt);
    if (!tp || !tt) return kl_err_set(e, KL_ENOMEM, "out of memory");
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    if (v->dtype != KL_DTYPE_COUNT) {
        tt->has_elem_type = 1;
        tt->elem_type = onnx_type(v->dtype);
        if (!tt->elem_type) return kl_err_set(e, KL_EUNSUPPORTED, "value '%s': dtype %s has no ONNX type", v->name, kl_dtype_name(v->dtype));
    }
    if (v->rank >= 0) {
        Onnx__TensorShapeProto *sh = palloc(p, sizeof *sh);
        Onnx__TensorShapeProto__Dimension **dims = palloc(p, sizeof(void *) * (size_t)(v->rank + 1));
        if (!sh || !dims) return kl_err_set(e, KL_ENOMEM, "out of memory");
        onnx__tensor_shape_proto__init(sh);
        for (int i = 0; i < v->rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = palloc(p, sizeof *d);
            if (!d) return kl_err_set(e, KL_ENOMEM, "out of memory");
            onnx__tensor_shape_proto__dimension__init(d);
            if (v->dim_names[i]) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = pstr(p, v->dim_names[i]);
            } else if (v->dims[i] >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = v->dims[i];
            } /* else: unknown, neither set */
            dims[i] = d;
        }
        sh->n_dim = (size_t)v->rank;
        sh->dim = dims;
        tt->shape = sh;
    }
    return KL_OK;
}

static int attr_proto(pool_t *p, const kl_gnode *n, const kl_attr *a, kl_tensor **tmp, Onnx__AttributeProto **out, kl_err *e) {
    Onnx__AttributeProto *ap = palloc(p, sizeof *ap);
    if (!ap) return kl_err_set(e, KL_ENOMEM, "out of memory");
    onnx__attribute_proto__init(ap);
    ap->name = pstr(p, a->name);
    ap->has_type = 1;
    switch (a->type) {
    case KL_ATTR_FLOAT: ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT; ap->has_f = 1; ap->f = a->f; break;
    case KL_ATTR_INT: ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT; ap->has_i = 1; ap->i = a->i; break;
    case KL_ATTR_STRING:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        ap->has_s = 1;
        ap->s.data = (uint8_t *)pstr(p, a->s);
        ap->s.len = strlen(a->s ? a->s : "");
        break;
    case KL_ATTR_TENSOR: {
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        int rc = tensor_proto(p, NULL, a->t, tmp, &ap->t, e);
        if (rc) return rc;
        break;
    }
    case KL_ATTR_FLOATS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        ap->n_floats = (size_t)a->n;
        ap->floats = a->floats;
        break;
    case KL_ATTR_INTS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        ap->n_ints = (size_t)a->n;
        ap->ints = a->ints;
        break;
    case KL_ATTR_STRINGS: {
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
        ProtobufCBinaryData *s = palloc(p, sizeof *s * (size_t)(a->n + 1));
        if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (int i = 0; i < a->n; i++) { s[i].data = (uint8_t *)a->strings[i]; s[i].len = strlen(a->strings[i]); }
        ap->n_strings = (size_t)a->n;
        ap->strings = s;
        break;
    }
    default: {
        char d[256];
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: attribute '%s' of this type (graph or other) cannot be written", kl_gnode_desc(n, d, sizeof d), a->name);
    }
    }
    if (p->oom) return kl_err_set(e, KL_ENOMEM, "out of memory");
    *out = ap;
    return KL_OK;
}

/* ================================================================== *
 * Model
 * ================================================================== */

int kl_onnx_save_mem(const kl_graph *g, void **buf, size_t *len, kl_err *e) {
    *buf = NULL;
    *len = 0;
    pool_t P = {0}, *p = &P;
    int rc = KL_OK, nv = g->n_values;
    kl_tensor **tmps = calloc((size_t)nv * 2 + (size_t)g->n_nodes * 8 + 8, sizeof(kl_tensor *)); /* contiguous copies of views */
    int ntmp = 0;
    int *used = calloc((size_t)nv + 1, sizeof(int));
    if (!tmps || !used) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    /* nodes */
    int nn = 0;
    for (int i = 0; i < g->n_nodes; i++) nn += !g->nodes[i].dead;
    graph.node = palloc(p, sizeof(void *) * (size_t)(nn + 1));
    const char **domains = palloc(p, sizeof(char *) * (size_t)(nn + 2));
    int *dom_ver = palloc(p, sizeof(int) * (size_t)(nn + 2));
    int ndom = 1;
    if (!graph.node || !domains || !dom_ver) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    domains[0] = "";
    dom_ver[0] = g->opset > 0 ? g->opset : KL_ONNX_OPSET_MAX;
    for (int i = 0; i < g->n_nodes; i++) {
        const kl_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        Onnx__NodeProto *np = palloc(p, sizeof *np);
        char **ins = palloc(p, sizeof(char *) * (size_t)(n->n_in + 1));
        char **outs = palloc(p, sizeof(char *) * (size_t)(n->n_out + 1));
        Onnx__AttributeProto **at = palloc(p, sizeof(void *) * (size_t)(n->n_attrs + 1));
        if (!np || !ins || !outs || !at) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        onnx__node_proto__init(np);
        for (int k = 0; k < n->n_in; k++) {
            ins[k] = n->inputs[k] >= 0 ? g->values[n->inputs[k]].name : "";
            if (n->inputs[k] >= 0) used[n->inputs[k]] = 1;
        }
        for (int k = 0; k < n->n_out; k++) outs[k] = n->outputs[k] >= 0 ? g->values[n->outputs[k]].name : "";
        np->n_input = (size_t)n->n_in; np->input = ins;
        np->n_output = (size_t)n->n_out; np->output = outs;
        np->name = n->name;
        np->op_type = n->op_type;
        if (n->domain && *n->domain) {
            np->domain = n->domain;
            int d = 1;
            while (d < ndom && strcmp(domains[d], n->domain)) d++;
            if (d == ndom) { domains[ndom] = n->domain; dom_ver[ndom] = n->opset > 0 ? n->opset : 1; ndom++; }
        }
        for (int k = 0; k < n->n_attrs; k++)
            if ((rc = attr_proto(p, n, &n->attrs[k], &tmps[ntmp], &at[k], e))) goto done;
            else if (tmps[ntmp]) ntmp++;
        np->n_attribute = (size_t)n->n_attrs;
        np->attribute = at;
        graph.node[graph.n_node++] = np;
    }
    for (int i = 0; i < g->n_outputs; i++) used[g->outputs[i]] = 1;
    /* initializers: the used values that carry data */
    graph.initializer = palloc(p, sizeof(void *) * (size_t)(nv + 1));
    graph.input = palloc(p, sizeof(void *) * (size_t)(g->n_inputs + 1));
    graph.output = palloc(p, sizeof(void *) * (size_t)(g->n_outputs + 1));
    if (!graph.initializer || !graph.input || !graph.output) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int v = 0; v < nv; v++) {
        const kl_value *val = &g->values[v];
        if (!val->init || !used[v] || val->is_input) continue;
        if ((rc = tensor_proto(p, val->name, val->init, &tmps[ntmp], &graph.initializer[graph.n_initializer], e))) goto done;
        if (tmps[ntmp]) ntmp++;
        graph.n_initializer++;
    }
    for (int i = 0; i < g->n_inputs; i++)
        if ((rc = value_proto(p, &g->values[g->inputs[i]], &graph.input[graph.n_input++], e))) goto done;
    for (int i = 0; i < g->n_outputs; i++)
        if ((rc = value_proto(p, &g->values[g->outputs[i]], &graph.output[graph.n_output++], e))) goto done;
    graph.name = g->name && *g->name ? g->name : "keel_graph";
    /* model */
    Onnx__OperatorSetIdProto **ops = palloc(p, sizeof(void *) * (size_t)(ndom + 1));
    if (!ops) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    for (int d = 0; d < ndom; d++) {
        ops[d] = palloc(p, sizeof **ops);
        if (!ops[d]) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
        onnx__operator_set_id_proto__init(ops[d]);
        ops[d]->domain = (char *)domains[d];
        ops[d]->has_version = 1;
        ops[d]->version = dom_ver[d];
    }
    model.has_ir_version = 1;
    model.ir_version = 8;
    model.n_opset_import = (size_t)ndom;
    model.opset_import = ops;
    char prod[256] = "keel", *ver = NULL;
    if (g->producer && *g->producer) {
        snprintf(prod, sizeof prod, "%s", g->producer);
        ver = strchr(prod, ' ');
        if (ver) *ver++ = 0;
    }
    model.producer_name = prod;
    model.producer_version = ver && *ver ? ver : NULL;
    model.graph = &graph;
    if (p->oom) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    size_t n = onnx__model_proto__get_packed_size(&model);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) { rc = kl_err_set(e, KL_ENOMEM, "out of memory (%zu bytes of ONNX)", n); goto done; }
    onnx__model_proto__pack(&model, b);
    *buf = b;
    *len = n;
done:
    if (tmps)
        for (int i = 0; i < ntmp; i++) kl_tensor_free(tmps[i]);
    free(tmps);
    free(used);
    pfree_all(p);
    return rc;
}

int kl_onnx_save(const kl_graph *g, const char *path, kl_err *e) {
    void *buf;
    size_t len;
    int rc = kl_onnx_save_mem(g, &buf, &len, e);
    if (rc) return rc;
    rc = kl_write_file_atomic(path, buf, len, e);
    free(buf);
    return rc;
}
