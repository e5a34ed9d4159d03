/* ONNX loader: protobuf (protobuf-c generated code) -> kl_graph. Handles
 * raw_data and typed data fields, external data files (relative to the model,
 * bounds-checked), initializers, Constant nodes' tensors, opset imports,
 * symbolic dimensions and subgraphs (GRAPH attributes of If/Loop/Scan,
 * bound to their node by kl_gnode_bind_subgraphs). Malformed input gives an error, never a crash. */
#include "keel/onnx.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keel/graph.h"
#include "onnx/onnx.pb-c.h"
#include "onnx/onnx_data.pb-c.h"

/* ================================================================== *
 * dtypes and tensors
 * ================================================================== */

int kl_onnx_dtype(int t, kl_dtype *out, kl_err *e) {
    if (kl_dtype_from_onnx(t, out) == KL_OK) return KL_OK;
    return kl_err_set(e, KL_EUNSUPPORTED, "unsupported tensor data type %s (%d)", kl_onnx_type_name(t), t);
}

/* Reads external data: location/offset/length relative to base_dir. */
static int read_external(const Onnx__TensorProto *tp, const char *base_dir, void *dst, size_t nbytes, kl_err *e) {
    const char *loc = NULL;
    int64_t off = 0, len = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        if (!kv->key || !kv->value) continue;
        if (!strcmp(kv->key, "location")) loc = kv->value;
        else if (!strcmp(kv->key, "offset")) off = strtoll(kv->value, NULL, 10);
        else if (!strcmp(kv->key, "length")) len = strtoll(kv->value, NULL, 10);
    }
    if (!loc || !*loc) return kl_err_set(e, KL_EPARSE, "external data without a location");
    if (!base_dir) return kl_err_set(e, KL_EUNSUPPORTED, "external data '%s' but the model was loaded from memory", loc);
    if (loc[0] == '/' || strstr(loc, "..")) return kl_err_set(e, KL_EPARSE, "external data location '%s' leaves the model folder", loc);
    if (off < 0) return kl_err_set(e, KL_EPARSE, "external data '%s': negative offset", loc);
    if (len >= 0 && (uint64_t)len != nbytes)
        return kl_err_set(e, KL_EPARSE, "external data '%s': length %lld, tensor needs %zu bytes", loc, (long long)len, nbytes);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", base_dir, loc);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: refused below, not waited on */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) { int er = errno; if (fd >= 0) close(fd); return kl_err_set(e, -er, "external data %s: %s", path, strerror(er)); }
    struct stat st;
    int rc = KL_OK;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        rc = kl_err_set(e, KL_EINVAL, "external data %s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)off > (uint64_t)st.st_size || (uint64_t)st.st_size - (uint64_t)off < nbytes) {
        rc = kl_err_set(e, KL_EPARSE, "external data %s: offset %lld + %zu bytes beyond the file end", path, (long long)off, nbytes);
        goto done;
    }
    if (fseeko(f, off, SEEK_SET) || fread(dst, 1, nbytes, f) != nbytes)
        rc = kl_err_set(e, KL_EPARSE, "external data %s: read failed", path);
done:
    fclose(f);
    return rc;
}

/* protobuf-c allocations go through the core allocator (tag params), so the
 * raw_data buffer protobuf-c unpacks each initializer into is a kl_mem block
 * that the tensor adopts: the weights are copied once (file -> unpacked
 * message; the file itself is mapped, not read). */
static void *pb_alloc(void *ad, size_t n) { return kl_mem_alloc(n ? n : 1, KL_TAG_PARAMS); }
static void pb_free(void *ad, void *p) { kl_mem_free(p); }
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

/* One unpack's allocator: it remembers whether the core allocator refused a
 * request (over --memory-limit or a tag budget), so that the failure is
 * reported as such and not as a corrupt file (protobuf-c returns NULL for
 * both). */
typedef struct {
    ProtobufCAllocator a;
    uint64_t got;      /* bytes handed out so far */
    uint64_t need;     /* got + the refused request */
    int refused;
    kl_err why;        /* the allocator's reason */
} pb_unpack;

static void *pb_alloc_tracked(void *ad, size_t n) {
    pb_unpack *u = ad;
    kl_err e = {0};
    void *p = kl_mem_alloc_e(n ? n : 1, KL_TAG_PARAMS, &e);
    if (p) u->got += n;
    else if (!u->refused) { u->refused = 1; u->need = u->got + n; u->why = e; }
    return p;
}

static void pb_unpack_init(pb_unpack *u) {
    memset(u, 0, sizeof *u);
    u->a = (ProtobufCAllocator){pb_alloc_tracked, pb_free, u};
}

/* The error of a failed unpack of len bytes of what (a model or a tensor);
 * name is the file (or NULL). */
static int pb_unpack_error(const pb_unpack *u, const char *name, const char *what, size_t len, kl_err *e) {
    char b1[32], b2[32], b3[32];
    if (!u->refused)
        return kl_err_set(e, KL_EPARSE, "%s%snot a valid ONNX %s (corrupt or truncated protobuf, %zu bytes)",
                          name ? name : "", name ? ": " : "", what, len);
    uint64_t limit = kl_mem_get_budget();
    char lim[64] = "out of memory";
    if (limit) snprintf(lim, sizeof lim, "memory limit %s reached", kl_fmt_bytes(limit, b1, sizeof b1));
    return kl_err_set(e, KL_ENOMEM, "%s while loading %s%s (needs at least %s for its %s of protobuf): %s", lim,
                      name ? "" : "an ONNX ", name ? name : what, kl_fmt_bytes(u->need, b2, sizeof b2),
                      kl_fmt_bytes(len, b3, sizeof b3), u->why.msg);
}

static int tensor_from_proto(Onnx__TensorProto *tp, const char *base_dir, kl_tensor **out, kl_err *e) {
    *out = NULL;
    kl_dtype dt;
    int rc;
    if (!tp->has_data_type) return kl_err_set(e, KL_EPARSE, "tensor '%s' has no data type", tp->name ? tp->name : "");
    if ((rc = kl_onnx_dtype(tp->data_type, &dt, e))) return rc;
    if (tp->n_dims > KL_MAX_DIMS) return kl_err_set(e, KL_EUNSUPPORTED, "tensor rank %zu > %d", tp->n_dims, KL_MAX_DIMS);
    int64_t dims[KL_MAX_DIMS];
    uint64_t numel = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0) return kl_err_set(e, KL_EPARSE, "negative dimension %lld", (long long)tp->dims[i]);
        dims[i] = tp->dims[i];
        if (dims[i] && numel > (UINT64_MAX >> 8) / (uint64_t)dims[i])
            return kl_err_set(e, KL_ERANGE, "tensor dimensions overflow");
        numel *= (uint64_t)dims[i];
    }
    size_t es = kl_dtype_size(dt);
    if (numel > ((uint64_t)1 << 40) / es) return kl_err_set(e, KL_ERANGE, "tensor of %llu elements is too large", (unsigned long long)numel);
    size_t nbytes = (size_t)numel * es;
    kl_tensor *t = NULL;
    int external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (!external && tp->has_raw_data && nbytes && tp->raw_data.len == nbytes) {
        /* adopt the unpacked buffer (allocated by pb_alloc) instead of copying it */
        if ((rc = kl_tensor_wrap(dt, (int)tp->n_dims, dims, tp->raw_data.data, &t, e))) return rc;
        t->owns = 1;
        t->tag = KL_TAG_PARAMS;
        tp->raw_data.data = NULL;
        tp->raw_data.len = 0;
        *out = t;
        return KL_OK;
    }
    if ((rc = kl_tensor_new_uninit(dt, (int)tp->n_dims, dims, KL_TAG_PARAMS, &t, e))) return rc;
    uint8_t *d = t->data;
    if (external) {
        if ((rc = read_external(tp, base_dir, d, nbytes, e))) goto fail;
    } else if (tp->has_raw_data) {
        if (tp->raw_data.len != nbytes) {
            rc = kl_err_set(e, KL_EPARSE, "raw_data has %zu bytes, shape needs %zu", tp->raw_data.len, nbytes);
            goto fail;
        }
        if (nbytes) memcpy(d, tp->raw_data.data, nbytes);
    } else {
        size_t n = 0;
        switch (dt) {
        case KL_F32: n = tp->n_float_data; break;
        case KL_F64: n = tp->n_double_data; break;
        case KL_I64: n = tp->n_int64_data; break;
        case KL_U32: case KL_U64: n = tp->n_uint64_data; break;
        default: n = tp->n_int32_data; break;
        }
        if (n != numel) {
            rc = kl_err_set(e, KL_EPARSE, "tensor has %zu typed values, shape needs %llu", n, (unsigned long long)numel);
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            switch (dt) {
            case KL_F32: ((float *)d)[i] = tp->float_data[i]; break;
            case KL_F64: ((double *)d)[i] = tp->double_data[i]; break;
            case KL_I64: ((int64_t *)d)[i] = tp->int64_data[i]; break;
            case KL_U32: ((uint32_t *)d)[i] = (uint32_t)tp->uint64_data[i]; break;
            case KL_U64: ((uint64_t *)d)[i] = tp->uint64_data[i]; break;
            case KL_I32: ((int32_t *)d)[i] = tp->int32_data[i]; break;
            case KL_I16: ((int16_t *)d)[i] = (int16_t)tp->int32_data[i]; break;
            case KL_U16: case KL_F16: case KL_BF16: ((uint16_t *)d)[i] = (uint16_t)tp->int32_data[i]; break;
            case KL_I8: ((int8_t *)d)[i] = (int8_t)tp->int32_data[i]; break;
            case KL_U8: ((uint8_t *)d)[i] = (uint8_t)tp->int32_data[i]; break;
            case KL_BOOL: ((uint8_t *)d)[i] = tp->int32_data[i] != 0; break;
            default: break;
            }
        }
    }
    *out = t;
    return KL_OK;
fail:
    kl_tensor_free(t);
    return rc;
}

int kl_onnx_tensor_load_mem(const void *buf, size_t len, kl_tensor **out, char **name, kl_err *e) {
    *out = NULL;
    if (name) *name = NULL;
    pb_unpack u;
    pb_unpack_init(&u);
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&u.a, len, buf);
    if (!tp) return pb_unpack_error(&u, NULL, "TensorProto", len, e);
    int rc = tensor_from_proto(tp, NULL, out, e);
    if (!rc && name && tp->name) *name = strdup(tp->name);
    onnx__tensor_proto__free_unpacked(tp, &pb_allocator);
    return rc;
}

int kl_onnx_tensor_load(const char *path, kl_tensor **out, char **name, kl_err *e) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    rc = kl_onnx_tensor_load_mem(buf, len, out, name, e);
    if (rc) kl_err_prefix(e, "%s", path);
    kl_mem_free(buf);
    return rc;
}

/* ---- sequence and optional values (test data files) ---- */

static int seq_from_proto(Onnx__SequenceProto *sp, kl_tensor **out, int depth, kl_err *e);

static int opt_from_proto(Onnx__OptionalProto *op, kl_tensor **out, int depth, kl_err *e) {
    kl_tensor *el = NULL;
    int rc = KL_OK;
    if (depth > 8) return kl_err_set(e, KL_EUNSUPPORTED, "values nested deeper than 8");
    if (op->tensor_value) rc = tensor_from_proto(op->tensor_value, NULL, &el, e);
    else if (op->sequence_value) rc = seq_from_proto(op->sequence_value, &el, depth + 1, e);
    else if (op->optional_value) return kl_err_set(e, KL_EUNSUPPORTED, "optional of an optional");
    if (!rc) rc = kl_seq_new(KL_VAL_OPTIONAL, KL_DTYPE_COUNT, (const kl_tensor *const *)&el, el ? 1 : 0, out, e);
    kl_tensor_free(el);
    return rc;
}

static int seq_from_proto(Onnx__SequenceProto *sp, kl_tensor **out, int depth, kl_err *e) {
    if (depth > 8) return kl_err_set(e, KL_EUNSUPPORTED, "values nested deeper than 8");
    if (sp->n_optional_values) return kl_err_set(e, KL_EUNSUPPORTED, "a sequence of optional values");
    size_t n = sp->n_tensor_values + sp->n_sequence_values;
    kl_tensor **el = calloc(n + 1, sizeof(kl_tensor *));
    if (!el) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    for (size_t i = 0; i < sp->n_tensor_values && !rc; i++)
        rc = tensor_from_proto(sp->tensor_values[i], NULL, &el[i], e);
    for (size_t i = 0; i < sp->n_sequence_values && !rc; i++)
        rc = seq_from_proto(sp->sequence_values[i], &el[sp->n_tensor_values + i], depth + 1, e);
    if (!rc) rc = kl_seq_new(KL_VAL_SEQUENCE, KL_DTYPE_COUNT, (const kl_tensor *const *)el, (int64_t)n, out, e);
    for (size_t i = 0; i < n; i++) kl_tensor_free(el[i]);
    free(el);
    return rc;
}

int kl_onnx_value_load(const char *path, int kind, kl_tensor **out, kl_err *e) {
    *out = NULL;
    if (kind == KL_VAL_TENSOR) return kl_onnx_tensor_load(path, out, NULL, e);
    char *buf = NULL;
    size_t len = 0;
    int rc = kl_read_file(path, &buf, &len, e);
    if (rc) return rc;
    pb_unpack u;
    pb_unpack_init(&u);
    if (kind == KL_VAL_SEQUENCE) {
        Onnx__SequenceProto *sp = onnx__sequence_proto__unpack(&u.a, len, (const uint8_t *)buf);
        rc = sp ? seq_from_proto(sp, out, 0, e) : pb_unpack_error(&u, path, "SequenceProto", len, e);
        if (sp) onnx__sequence_proto__free_unpacked(sp, &pb_allocator);
    } else {
        Onnx__OptionalProto *op = onnx__optional_proto__unpack(&u.a, len, (const uint8_t *)buf);
        rc = op ? opt_from_proto(op, out, 0, e) : pb_unpack_error(&u, path, "OptionalProto", len, e);
        if (op) onnx__optional_proto__free_unpacked(op, &pb_allocator);
    }
    if (rc) kl_err_prefix(e, "%s", path);
    kl_mem_free(buf);
    return rc;
}

int kl_onnx_tensor_read(const char *path, kl_tensor **out, kl_err *e) {
    size_t n = strlen(path);
    if (n >= 4 && !strcmp(path + n - 4, ".npy")) return kl_npy_load(path, out, e);
    return kl_onnx_tensor_load(path, out, NULL, e);
}

/* ================================================================== *
 * Graph
 * ================================================================== */

/* KL_VAL_* of a type: tensor, seq(tensor), optional(tensor or seq(tensor));
 * -1 for what keel does not carry (maps, sparse tensors, nested sequences) */
static int value_kind(const Onnx__TypeProto *tp) {
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: return tp->tensor_type ? KL_VAL_TENSOR : -1;
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        return tp->sequence_type && tp->sequence_type->elem_type &&
                value_kind(tp->sequence_type->elem_type) == KL_VAL_TENSOR
            ? KL_VAL_SEQUENCE
            : -1;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: {
        int k = tp->optional_type && tp->optional_type->elem_type ? value_kind(tp->optional_type->elem_type) : -1;
        return k == KL_VAL_TENSOR || k == KL_VAL_SEQUENCE ? KL_VAL_OPTIONAL : -1;
    }
    default: return -1;
    }
}

static int value_info(kl_graph *g, const Onnx__ValueInfoProto *vi, int *idx, kl_err *e) {
    if (!vi->name || !*vi->name) return kl_err_set(e, KL_EPARSE, "graph input/output without a name");
    int v = kl_graph_value(g, vi->name);
    if (v < 0) return kl_err_set(e, KL_ENOMEM, "out of memory");
    *idx = v;
    kl_value *val = &g->values[v];
    const Onnx__TypeProto *tp = vi->type;
    if (!tp) return KL_OK;
    int kind = value_kind(tp);
    if (kind < 0)
        return kl_err_set(e, KL_EUNSUPPORTED,
                          "value '%s': only tensors, sequences of tensors and optional tensors or sequences are "
                          "supported (maps and sparse tensors are not)",
                          vi->name);
    if (kind != KL_VAL_TENSOR) {
        /* carried as bytes (kl_seq_new): uint8, rank 1, any length */
        val->kind = kind;
        val->dtype = KL_U8;
        val->rank = 1;
        val->dims[0] = -1;
        return KL_OK;
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int rc;
    if (tt->has_elem_type && (rc = kl_onnx_dtype(tt->elem_type, &val->dtype, e))) {
        kl_err_prefix(e, "value '%s'", vi->name);
        return rc;
    }
    if (tt->shape) {
        if (tt->shape->n_dim > KL_MAX_DIMS)
            return kl_err_set(e, KL_EUNSUPPORTED, "value '%s': rank %zu > %d", vi->name, tt->shape->n_dim, KL_MAX_DIMS);
        val->rank = (int)tt->shape->n_dim;
        for (size_t i = 0; i < tt->shape->n_dim; i++) {
            const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
            val->dims[i] = -1;
            free(val->dim_names[i]);
            val->dim_names[i] = NULL;
            if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
                if (d->dim_value < 0) return kl_err_set(e, KL_EPARSE, "value '%s': negative dimension", vi->name);
                val->dims[i] = d->dim_value;
            } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param) {
                val->dim_names[i] = strdup(d->dim_param);
            }
        }
    }
    return KL_OK;
}

/* What loading a graph body needs: the model (opset imports), the folder
 * of external data, and the subgraph nesting depth (bounded: a hostile file
 * could nest graphs until the stack ends). */
typedef struct {
    const Onnx__ModelProto *m;
    const char *base_dir;
    int depth;
} load_ctx;

#define MAX_SUBGRAPH_DEPTH 32
#define PREFIX_DEPTH 4 /* subgraph levels named in a load error's path */

static int load_body(const Onnx__GraphProto *gp, const load_ctx *c, kl_graph *g, kl_err *e);

/* A GRAPH attribute: the subgraph as a keel graph (bound to its node and
 * finalized by kl_gnode_bind_subgraphs once the node's attributes are in). */
static int load_subgraph(const kl_gnode *n, const Onnx__AttributeProto *ap, const load_ctx *c, kl_graph **out,
                         kl_err *e) {
    *out = NULL;
    if (!ap->g) return kl_err_set(e, KL_EPARSE, "attribute '%s': GRAPH without a graph", ap->name);
    if (c->depth >= MAX_SUBGRAPH_DEPTH)
        return kl_err_set(e, KL_EUNSUPPORTED, "attribute '%s': subgraphs nested deeper than %d", ap->name,
                          MAX_SUBGRAPH_DEPTH);
    kl_graph *sub;
    int rc = kl_graph_new(&sub, e);
    if (rc) return rc;
    sub->opset = n->opset;
    sub->name = strdup(ap->g->name ? ap->g->name : "");
    load_ctx c2 = *c;
    c2.depth++;
    if ((rc = load_body(ap->g, &c2, sub, e))) {
        /* the path to the failing node, its first levels (a deep nest would
         * push the reason itself out of the message) */
        if (c->depth < PREFIX_DEPTH) kl_err_prefix(e, "subgraph '%s'", ap->name);
        kl_graph_free(sub);
        return rc;
    }
    *out = sub;
    return KL_OK;
}

static int load_attr(kl_gnode *n, const Onnx__AttributeProto *ap, const load_ctx *c, kl_err *e) {
    if (!ap->name) return kl_err_set(e, KL_EPARSE, "attribute without a name");
    kl_attr_type ty;
    switch (ap->has_type ? (int)ap->type : 0) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: ty = KL_ATTR_FLOAT; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: ty = KL_ATTR_INT; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: ty = KL_ATTR_STRING; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: ty = KL_ATTR_TENSOR; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: ty = KL_ATTR_FLOATS; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: ty = KL_ATTR_INTS; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: ty = KL_ATTR_STRINGS; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: ty = KL_ATTR_GRAPH; break;
    default: ty = KL_ATTR_OTHER; break;
    }
    if (ap->ref_attr_name && *ap->ref_attr_name)
        return kl_err_set(e, KL_EUNSUPPORTED, "attribute '%s' refers to a function attribute", ap->name);
    kl_attr *a = kl_gnode_attr_add(n, ap->name, ty);
    if (!a) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    switch (ty) {
    case KL_ATTR_FLOAT: a->f = ap->f; break;
    case KL_ATTR_INT: a->i = ap->i; break;
    case KL_ATTR_STRING:
        a->s = malloc(ap->s.len + 1);
        if (!a->s) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if (ap->s.len) memcpy(a->s, ap->s.data, ap->s.len);
        a->s[ap->s.len] = 0;
        break;
    case KL_ATTR_TENSOR:
        if (!ap->t) return kl_err_set(e, KL_EPARSE, "attribute '%s': TENSOR without a tensor", ap->name);
        if ((rc = tensor_from_proto(ap->t, NULL, &a->t, e))) kl_err_prefix(e, "attribute '%s'", ap->name);
        break;
    case KL_ATTR_GRAPH: rc = load_subgraph(n, ap, c, &a->g, e); break;
    case KL_ATTR_FLOATS:
        a->n = (int)ap->n_floats;
        a->floats = malloc(sizeof(float) * (ap->n_floats + 1));
        if (!a->floats) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if (ap->n_floats) memcpy(a->floats, ap->floats, sizeof(float) * ap->n_floats);
        break;
    case KL_ATTR_INTS:
        a->n = (int)ap->n_ints;
        a->ints = malloc(sizeof(int64_t) * (ap->n_ints + 1));
        if (!a->ints) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if (ap->n_ints) memcpy(a->ints, ap->ints, sizeof(int64_t) * ap->n_ints);
        break;
    case KL_ATTR_STRINGS:
        a->n = (int)ap->n_strings;
        a->strings = calloc(ap->n_strings + 1, sizeof(char *));
        if (!a->strings) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (size_t i = 0; i < ap->n_strings; i++) {
            a->strings[i] = malloc(ap->strings[i].len + 1);
            if (!a->strings[i]) return kl_err_set(e, KL_ENOMEM, "out of memory");
            if (ap->strings[i].len) memcpy(a->strings[i], ap->strings[i].data, ap->strings[i].len);
            a->strings[i][ap->strings[i].len] = 0;
        }
        break;
    default: break;
    }
    return rc;
}

/* The graph's initializers, inputs, nodes (their subgraphs bound), outputs
 * and value_info into g (not finalized). */
static int load_body(const Onnx__GraphProto *gp, const load_ctx *c, kl_graph *g, kl_err *e) {
    int rc = KL_OK;
    /* initializers */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !*tp->name) {
            rc = kl_err_set(e, KL_EPARSE, "initializer %zu has no name", i);
            return rc;
        }
        int v = kl_graph_value(g, tp->name);
        if (v < 0) return kl_err_set(e, KL_ENOMEM, "out of memory");
        if (g->values[v].init) {
            rc = kl_err_set(e, KL_EPARSE, "initializer '%s' defined twice", tp->name);
            return rc;
        }
        kl_tensor *t;
        if ((rc = tensor_from_proto(tp, c->base_dir, &t, e))) {
            kl_err_prefix(e, "initializer '%s'", tp->name);
            return rc;
        }
        kl_value *val = &g->values[v];
        val->init = t;
        val->dtype = t->dtype;
        val->rank = t->rank;
        for (int d = 0; d < t->rank; d++) val->dims[d] = t->dims[d];
    }
    if (gp->n_sparse_initializer) {
        rc = kl_err_set(e, KL_EUNSUPPORTED, "sparse initializers are not supported");
        return rc;
    }
    /* inputs (skipping those that are initializers: defaults) */
    g->inputs = calloc(gp->n_input + 1, sizeof(int));
    g->outputs = calloc(gp->n_output + 1, sizeof(int));
    if (!g->inputs || !g->outputs) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (size_t i = 0; i < gp->n_input; i++) {
        int v;
        if (gp->input[i]->name && kl_graph_find_value(g, gp->input[i]->name) >= 0 &&
            g->values[kl_graph_find_value(g, gp->input[i]->name)].init)
            continue; /* an initializer listed as input: treat as constant */
        if ((rc = value_info(g, gp->input[i], &v, e))) {
            kl_err_prefix(e, "graph input %zu", i);
            return rc;
        }
        if (g->values[v].is_input) {
            rc = kl_err_set(e, KL_EPARSE, "graph input '%s' listed twice", g->values[v].name);
            return rc;
        }
        g->values[v].is_input = 1;
        g->inputs[g->n_inputs++] = v;
    }
    /* nodes */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        const char *dom = np->domain ? np->domain : "";
        if (!np->op_type || !*np->op_type) {
            rc = kl_err_set(e, KL_EPARSE, "node %zu has no op_type", i);
            return rc;
        }
        if (g->opset == 0 && (!*dom || !strcmp(dom, "ai.onnx")))
            return kl_err_set(e, KL_EUNSUPPORTED, "node %zu (%s): model imports no default-domain (ai.onnx) opset", i,
                              np->op_type);
        for (size_t k = 0; k < np->n_input; k++)
            if (!np->input[k]) {
                rc = kl_err_set(e, KL_EPARSE, "node %zu: null input name", i);
                return rc;
            }
        for (size_t k = 0; k < np->n_output; k++)
            if (!np->output[k]) {
                rc = kl_err_set(e, KL_EPARSE, "node %zu: null output name", i);
                return rc;
            }
        int ni = kl_graph_add_node(g, np->op_type, np->name ? np->name : "", (const char *const *)np->input,
                                   (int)np->n_input, (const char *const *)np->output, (int)np->n_output);
        if (ni < 0) return kl_err_set(e, KL_ENOMEM, "out of memory");
        kl_gnode *n = &g->nodes[ni];
        n->index = (int)i;
        free(n->domain);
        n->domain = strdup(!strcmp(dom, "ai.onnx") ? "" : dom);
        n->opset = g->opset;
        if (*dom && strcmp(dom, "ai.onnx")) {
            n->opset = -1;
            for (size_t k = 0; k < c->m->n_opset_import; k++)
                if (c->m->opset_import[k]->domain && !strcmp(c->m->opset_import[k]->domain, dom))
                    n->opset = (int)c->m->opset_import[k]->version;
        }
        for (size_t k = 0; k < np->n_attribute; k++) {
            if ((rc = load_attr(n, np->attribute[k], c, e))) {
                char d[256];
                if (c->depth < PREFIX_DEPTH) kl_err_prefix(e, "%s", kl_gnode_desc(n, d, sizeof d));
                return rc;
            }
        }
        int subs = 0;
        for (int k = 0; k < n->n_attrs; k++) subs += n->attrs[k].type == KL_ATTR_GRAPH && n->attrs[k].g;
        if (subs && (rc = kl_gnode_bind_subgraphs(g, ni, e))) return rc;
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        int v;
        if ((rc = value_info(g, gp->output[i], &v, e))) {
            kl_err_prefix(e, "graph output %zu", i);
            return rc;
        }
        g->values[v].is_output = 1;
        g->outputs[g->n_outputs++] = v;
    }
    /* value_info: types of intermediates (informational; inference recomputes) */
    for (size_t i = 0; i < gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi = gp->value_info[i];
        if (!vi->name || kl_graph_find_value(g, vi->name) < 0) continue;
        int v;
        kl_err e2 = {0};
        (void)value_info(g, vi, &v, &e2);
    }
    return KL_OK;
}

static int build_graph(const Onnx__ModelProto *m, const char *name, const char *base_dir, kl_graph **out, kl_err *e) {
    kl_graph *g = NULL;
    int rc = kl_graph_new(&g, e);
    if (rc) return rc;
    const Onnx__GraphProto *gp = m->graph;
    if (!gp) {
        rc = kl_err_set(e, KL_EPARSE, "model has no graph");
        goto fail;
    }
    g->name = strdup(gp->name ? gp->name : "");
    if (m->producer_name) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s %s", m->producer_name, m->producer_version ? m->producer_version : "");
        g->producer = strdup(buf);
    }
    /* opsets */
    g->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *os = m->opset_import[i];
        const char *dom = os->domain ? os->domain : "";
        if (!*dom || !strcmp(dom, "ai.onnx")) { g->opset = (int)os->version; }
    }
    /* a model of other domains only (e.g. ai.onnx.preview.training): opset 0,
     * and a default-domain node is refused in load_body */
    if (g->opset < 0 && m->n_opset_import > 0) g->opset = 0;
    if (g->opset < 0) {
        rc = kl_err_set(e, KL_EUNSUPPORTED, "model imports no default-domain (ai.onnx) opset");
        goto fail;
    }
    if (g->opset != 0 && (g->opset < KL_ONNX_OPSET_MIN || g->opset > KL_ONNX_OPSET_MAX)) {
        rc = kl_err_set(e, KL_EUNSUPPORTED, "unsupported default-domain opset %d (supported: %d-%d)", g->opset,
                        KL_ONNX_OPSET_MIN, KL_ONNX_OPSET_MAX);
        goto fail;
    }
    load_ctx c = {m, base_dir, 0};
    if ((rc = load_body(gp, &c, g, e))) goto fail;
    if ((rc = kl_graph_finalize(g, e))) goto fail;
    *out = g;
    return KL_OK;
fail:
    kl_err_prefix(e, "%s", name ? name : "model");
    kl_graph_free(g);
    return rc;
}

int kl_onnx_load_mem(const void *buf, size_t len, const char *name, const char *base_dir, kl_graph **out, kl_err *e) {
    *out = NULL;
    pb_unpack u;
    pb_unpack_init(&u);
    Onnx__ModelProto *m = onnx__model_proto__unpack(&u.a, len, buf);
    if (!m) return pb_unpack_error(&u, name, "model", len, e);
    int rc = build_graph(m, name, base_dir, out, e);
    onnx__model_proto__free_unpacked(m, &pb_allocator);
    return rc;
}

int kl_onnx_load(const char *path, kl_graph **out, kl_err *e) {
    *out = NULL;
    char *buf = NULL;
    void *map = NULL;
    size_t len = 0;
    int rc, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait; kl_read_file refuses it */
    struct stat st;
    if (fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size > 0) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) map = NULL;
        else len = (size_t)st.st_size;
    }
    if (fd >= 0) close(fd);
    if (map) buf = map;
    else if ((rc = kl_read_file(path, &buf, &len, e))) return rc;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    rc = kl_onnx_load_mem(buf, len, path, dir, out, e);
    if (map) munmap(map, len);
    else kl_mem_free(buf);
    return rc;
}
