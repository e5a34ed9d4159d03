/* Sequence and optional operators on the values of seqval.c:
 * SequenceEmpty/Construct/Insert/Erase/At/Length, SplitToSequence,
 * ConcatFromSequence (opsets 11-17), Optional/OptionalHasElement/
 * OptionalGetElement (15-17) and SequenceMap (17, a body subgraph run per
 * element by the executor, kl__sub_run). Their results' sizes depend on the
 * data, so they run as dynamic steps that allocate their outputs
 * (KL_OP_ALLOCS). Positions may be negative (counted from the end). */
#include "graph/graph_int.h"

#include <stdlib.h>
#include <string.h>

static int need_data(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    return KL__NEED_DATA;
}

/* The elements of sequence value v as views (*out: n + 1 entries, caller frees). */
static int elements(const kl_gnode *n, const kl_tensor *v, int want_kind, kl_tensor **out, int64_t *cnt, kl_err *e) {
    int kind;
    *out = NULL;
    int rc = kl_seq_check(v, &kind, NULL, cnt, e);
    if (!rc && kind != want_kind)
        rc = kl_err_set(e, KL_ETYPE, "an %s where a %s is expected", kind == KL_VAL_OPTIONAL ? "optional" : "sequence",
                        want_kind == KL_VAL_OPTIONAL ? "optional" : "sequence");
    if (!rc && !(*out = calloc((size_t)*cnt + 1, sizeof(kl_tensor)))) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < *cnt; i++) rc = kl_seq_at(v, i, &(*out)[i], e);
    if (rc) {
        free(*out);
        *out = NULL;
        char d[300];
        kl_err_prefix(e, "%s: opset %d", kl_gnode_desc(n, d, sizeof d), n->opset);
    }
    return rc;
}

static kl_dtype elem_dtype(const kl_tensor *v) {
    kl_dtype dt = KL_DTYPE_COUNT;
    kl_seq_check(v, NULL, &dt, NULL, NULL);
    return dt;
}

/* A new sequence of the tensors ts[0..k) into out. */
static int emit(kl_tensor *out, int kind, kl_dtype elem, kl_tensor *const *ts, int64_t k, kl_err *e) {
    kl_tensor *res;
    const kl_tensor **c = calloc((size_t)k + 1, sizeof(kl_tensor *));
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int64_t i = 0; i < k; i++) c[i] = ts[i];
    int rc = kl_seq_new(kind, elem, c, k, &res, e);
    free(c);
    if (!rc) kl__tensor_move(out, res);
    return rc;
}

static int copy_out(kl_tensor *out, const kl_tensor *t, kl_err *e) {
    kl_tensor *res;
    int rc = kl_tensor_new_uninit(t->dtype, t->rank, t->dims, KL_TAG_ACTIVATIONS, &res, e);
    if (rc) return rc;
    if (res->nbytes) memcpy(res->data, t->data, res->nbytes);
    kl__tensor_move(out, res);
    return KL_OK;
}

/* position p of a sequence of n (p in [-n, n - 1 + extra]) */
static int position(const kl_gnode *n, const kl_tensor *p, int64_t cnt, int extra, int64_t def, int64_t *out,
                    kl_err *e) {
    int64_t v = def;
    if (p) {
        if (kl_tensor_numel(p) != 1 || kl_dtype_is_float(p->dtype))
            return kl__fail_node(e, n, KL_ETYPE, "opset %d: position must be an integer scalar", n->opset);
        v = kl__int_at(p, 0);
    }
    if (v < 0) v += cnt;
    if (v < 0 || v > cnt - 1 + extra)
        return kl__fail_node(e, n, KL_ERANGE, "opset %d: position %lld outside a sequence of %lld", n->opset,
                             (long long)(p ? kl__int_at(p, 0) : def), (long long)cnt);
    *out = v;
    return KL_OK;
}

static int same_dtype(const kl_gnode *n, kl_dtype a, kl_dtype b, kl_err *e) {
    if (a != KL_DTYPE_COUNT && b != KL_DTYPE_COUNT && a != b)
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: a %s tensor in a sequence of %s", n->opset, kl_dtype_name(b),
                             kl_dtype_name(a));
    return KL_OK;
}

/* ---- sequences ---- */

static int seq_empty_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                         kl_err *e) {
    kl_dtype dt = KL_F32;
    const kl_attr *a = kl_gnode_attr(n, "dtype");
    if (a && kl_dtype_from_onnx((int)a->i, &dt))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %s", n->opset, kl_onnx_type_name((int)a->i));
    return emit(out[0], KL_VAL_SEQUENCE, dt, NULL, 0, e);
}

static int seq_construct_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                             kl_err *e) {
    int m = n_in - n->n_implicit;
    for (int i = 1; i < m; i++) {
        int rc = same_dtype(n, in[0]->dtype, in[i]->dtype, e);
        if (rc) return rc;
    }
    return emit(out[0], KL_VAL_SEQUENCE, in[0]->dtype, in, m, e);
}

static int seq_insert_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                          kl_err *e) {
    kl_tensor *el;
    int64_t cnt, pos;
    int rc = elements(n, in[0], KL_VAL_SEQUENCE, &el, &cnt, e);
    if (rc) return rc;
    if (!(rc = same_dtype(n, elem_dtype(in[0]), in[1]->dtype, e)) &&
        !(rc = position(n, n_in > 2 ? in[2] : NULL, cnt, 1, cnt, &pos, e))) {
        kl_tensor **ts = calloc((size_t)cnt + 2, sizeof(kl_tensor *));
        if (!ts) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        for (int64_t i = 0, k = 0; ts && i <= cnt; i++) ts[i] = i == pos ? in[1] : &el[k++];
        if (ts) rc = emit(out[0], KL_VAL_SEQUENCE, in[1]->dtype, ts, cnt + 1, e);
        free(ts);
    }
    free(el);
    return rc;
}

static int seq_erase_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                         kl_err *e) {
    kl_tensor *el;
    int64_t cnt, pos;
    int rc = elements(n, in[0], KL_VAL_SEQUENCE, &el, &cnt, e);
    if (rc) return rc;
    if (!(rc = position(n, n_in > 1 ? in[1] : NULL, cnt, 0, -1, &pos, e))) {
        kl_tensor **ts = calloc((size_t)cnt + 1, sizeof(kl_tensor *));
        if (!ts) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        for (int64_t i = 0, k = 0; ts && i < cnt; i++)
            if (i != pos) ts[k++] = &el[i];
        if (ts) rc = emit(out[0], KL_VAL_SEQUENCE, elem_dtype(in[0]), ts, cnt - 1, e);
        free(ts);
    }
    free(el);
    return rc;
}

static int seq_at_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                      kl_err *e) {
    kl_tensor *el;
    int64_t cnt, pos;
    int rc = elements(n, in[0], KL_VAL_SEQUENCE, &el, &cnt, e);
    if (rc) return rc;
    if (!(rc = position(n, in[1], cnt, 0, 0, &pos, e))) rc = copy_out(out[0], &el[pos], e);
    free(el);
    return rc;
}

static int seq_length_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                          kl_err *e) {
    int64_t cnt;
    int kind;
    int rc = kl_seq_check(in[0], &kind, NULL, &cnt, e);
    if (!rc && kind != KL_VAL_SEQUENCE) rc = kl_err_set(e, KL_ETYPE, "an optional where a sequence is expected");
    if (rc) return kl__fail_node(e, n, rc, "opset %d: %s", n->opset, kl_err_what(e));
    kl_tensor *res;
    if ((rc = kl_tensor_new(KL_I64, 0, NULL, KL_TAG_ACTIVATIONS, &res, e))) return rc;
    *(int64_t *)res->data = cnt;
    kl__tensor_move(out[0], res);
    return KL_OK;
}

/* The piece [b, b + len) of x along axis (keep: the axis stays, else squeezed). */
static int piece(const kl_tensor *x, int axis, int64_t b, int64_t len, int keep, kl_tensor **out, kl_err *e) {
    int64_t dims[KL_MAX_DIMS], outer = 1, inner = 1;
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
        if (d < axis) outer *= x->dims[d];
        if (d > axis) inner *= x->dims[d];
        if (d != axis) dims[r++] = x->dims[d];
        else if (keep) dims[r++] = len;
    }
    int rc = kl_tensor_new_uninit(x->dtype, r, dims, KL_TAG_ACTIVATIONS, out, e);
    if (rc) return rc;
    size_t es = kl_dtype_size(x->dtype), row = (size_t)(len * inner) * es;
    for (int64_t o = 0; o < outer && row; o++)
        memcpy((char *)(*out)->data + (size_t)o * row,
               (const char *)x->data + ((size_t)(o * x->dims[axis] + b) * (size_t)inner) * es, row);
    return KL_OK;
}

static int split_to_seq_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                            kl_err *e) {
    const kl_tensor *X = in[0], *S = n_in > 1 ? in[1] : NULL;
    int64_t axis;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), X->rank, &axis) || X->rank < 1)
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: axis %lld out of range for rank %d", n->opset,
                             (long long)kl_gnode_attr_int(n, "axis", 0), X->rank);
    int64_t L = X->dims[axis], np = 0;
    int keep = 1;
    int64_t *lens = NULL;
    if (!S) { /* pieces of 1 */
        keep = kl_gnode_attr_int(n, "keepdims", 1) != 0;
        np = L;
    } else if (S->rank == 0) {
        int64_t c = kl__int_at(S, 0);
        if (c <= 0) return kl__fail_node(e, n, KL_EINVAL, "opset %d: split %lld must be > 0", n->opset, (long long)c);
        np = (L + c - 1) / c;
    } else {
        np = kl_tensor_numel(S);
    }
    lens = calloc((size_t)np + 1, sizeof(int64_t));
    kl_tensor **ts = calloc((size_t)np + 1, sizeof(kl_tensor *));
    int rc = lens && ts ? KL_OK : kl_err_set(e, KL_ENOMEM, "out of memory");
    int64_t sum = 0;
    for (int64_t i = 0; !rc && i < np; i++) {
        lens[i] = !S ? 1 : S->rank == 0 ? (i == np - 1 ? L - sum : kl__int_at(S, 0)) : kl__int_at(S, i);
        if (lens[i] < 0) rc = kl__fail_node(e, n, KL_EINVAL, "opset %d: negative split", n->opset);
        sum += lens[i];
    }
    if (!rc && sum != L)
        rc = kl__fail_node(e, n, KL_ESHAPE, "opset %d: splits sum to %lld, the axis has %lld", n->opset, (long long)sum,
                           (long long)L);
    for (int64_t i = 0, b = 0; !rc && i < np; b += lens[i], i++) rc = piece(X, (int)axis, b, lens[i], keep, &ts[i], e);
    if (!rc) rc = emit(out[0], KL_VAL_SEQUENCE, X->dtype, ts, np, e);
    for (int64_t i = 0; ts && i < np; i++) kl_tensor_free(ts[i]);
    free(ts);
    free(lens);
    return rc;
}

static int concat_from_seq_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out,
                               kl_exec *x, kl_err *e) {
    kl_tensor *el;
    int64_t cnt;
    int rc = elements(n, in[0], KL_VAL_SEQUENCE, &el, &cnt, e);
    if (rc) return rc;
    int new_axis = kl_gnode_attr_int(n, "new_axis", 0) != 0;
    if (cnt == 0) {
        free(el);
        return kl__fail_node(e, n, KL_ESHAPE, "opset %d: an empty sequence", n->opset);
    }
    const kl_tensor *f = &el[0];
    int r = f->rank + new_axis;
    int64_t axis;
    if (kl__norm_axis(kl_gnode_attr_int(n, "axis", 0), r, &axis) || r < 1 || r > KL_MAX_DIMS) {
        free(el);
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: axis %lld out of range", n->opset,
                             (long long)kl_gnode_attr_int(n, "axis", 0));
    }
    int64_t total = 0;
    for (int64_t i = 0; i < cnt && !rc; i++) {
        const kl_tensor *t = &el[i];
        int bad = t->dtype != f->dtype || t->rank != f->rank;
        for (int d = 0; !bad && d < f->rank; d++) bad = (new_axis || d != axis) && t->dims[d] != f->dims[d];
        if (bad)
            rc = kl__fail_node(e, n, KL_ESHAPE, "opset %d: element %lld does not match element 0", n->opset,
                               (long long)i);
        else total += new_axis ? 1 : t->dims[axis];
    }
    int64_t dims[KL_MAX_DIMS];
    for (int d = 0; d < r; d++) dims[d] = d == axis ? total : f->dims[new_axis && d > axis ? d - 1 : d];
    kl_tensor *res = NULL;
    if (!rc) rc = kl_tensor_new_uninit(f->dtype, r, dims, KL_TAG_ACTIVATIONS, &res, e);
    if (!rc) {
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < r; d++) {
            if (d < axis) outer *= dims[d];
            if (d > axis) inner *= dims[d];
        }
        size_t es = kl_dtype_size(f->dtype), at = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < cnt; i++) {
                int64_t len = new_axis ? 1 : el[i].dims[axis];
                size_t row = (size_t)(len * inner) * es;
                if (row) memcpy((char *)res->data + at, (const char *)el[i].data + (size_t)o * row, row);
                at += row;
            }
        kl__tensor_move(out[0], res);
    }
    free(el);
    return rc;
}

/* ---- optional values ---- */

static int optional_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                        kl_err *e) {
    int m = n_in - n->n_implicit;
    const kl_tensor *v = m > 0 ? in[0] : NULL;
    return emit(out[0], KL_VAL_OPTIONAL, v ? v->dtype : KL_DTYPE_COUNT, (kl_tensor *const *)&v, v ? 1 : 0, e);
}

/* the element count of an optional (a sequence or tensor given where an
 * optional is expected counts as present, as opset 18 allows) */
static int opt_count(const kl_tensor *v, int64_t *cnt, kl_tensor *el) {
    int kind;
    if (!v) {
        *cnt = 0;
        return KL_OK;
    }
    if (kl_seq_is_value(v) && kl_seq_check(v, &kind, NULL, cnt, NULL) == KL_OK && kind == KL_VAL_OPTIONAL) {
        if (*cnt && el) kl_seq_at(v, 0, el, NULL);
        return KL_OK;
    }
    *cnt = 1;
    if (el) *el = *v;
    return KL_OK;
}

static int opt_has_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                       kl_err *e) {
    int64_t cnt;
    opt_count(n_in - n->n_implicit > 0 ? in[0] : NULL, &cnt, NULL);
    kl_tensor *res;
    int rc = kl_tensor_new(KL_BOOL, 0, NULL, KL_TAG_ACTIVATIONS, &res, e);
    if (rc) return rc;
    *(uint8_t *)res->data = cnt > 0;
    kl__tensor_move(out[0], res);
    return KL_OK;
}

static int opt_get_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                       kl_err *e) {
    int64_t cnt;
    kl_tensor el;
    opt_count(in[0], &cnt, &el);
    if (!cnt) return kl__fail_node(e, n, KL_EINVAL, "opset %d: the optional input is empty", n->opset);
    return copy_out(out[0], &el, e);
}

/* ---- SequenceMap(input_sequence, additional...) body -> sequences ---- */

static int seq_map_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    const kl_attr *a = kl_gnode_attr(n, "body");
    const kl_graph *b = a && a->type == KL_ATTR_GRAPH ? a->g : NULL;
    if (!b) return kl__fail_node(e, n, KL_EPARSE, "opset %d: no body graph", n->opset);
    if (b->n_inputs - b->n_outer != n->n_in - n->n_implicit || b->n_outputs != n->n_out)
        return kl__fail_node(e, n, KL_EPARSE,
                             "opset %d: body takes %d inputs and gives %d outputs, the node has %d and %d", n->opset,
                             b->n_inputs - b->n_outer, b->n_outputs, n->n_in - n->n_implicit, n->n_out);
    return KL_OK;
}

static int seq_map_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                       kl_err *e) {
    kl_graph *b = kl_gnode_attr(n, "body")->g;
    int m = n_in - n->n_implicit, rc = KL_OK;
    int64_t len = -1;
    kl_tensor **el = calloc((size_t)m + 1, sizeof(kl_tensor *)),
              **bin = calloc((size_t)b->n_inputs + 1, sizeof(kl_tensor *));
    kl_tensor **bout = calloc((size_t)b->n_outputs + 1, sizeof(kl_tensor *));
    kl_tensor ***res = calloc((size_t)n_out + 1, sizeof(kl_tensor **));
    char *is_seq = calloc((size_t)m + 1, 1);
    if (!el || !bin || !bout || !res || !is_seq) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < m && !rc; k++) {
        is_seq[k] = k == 0 || kl_seq_is_value(in[k]);
        if (!is_seq[k]) continue;
        int64_t c;
        if ((rc = elements(n, in[k], KL_VAL_SEQUENCE, &el[k], &c, e))) break;
        if (len >= 0 && c != len)
            rc = kl__fail_node(e, n, KL_ESHAPE, "opset %d: sequences of %lld and %lld elements", n->opset,
                               (long long)len, (long long)c);
        len = c;
    }
    for (int k = 0; k < n_out && !rc; k++)
        if (!(res[k] = calloc((size_t)len + 1, sizeof(kl_tensor *)))) rc = kl_err_set(e, KL_ENOMEM, "out of memory");
    for (int j = 0; j < n->n_implicit; j++) bin[m + j] = in[m + j];
    kl__sub r;
    kl__sub_init(&r, b, x->pool);
    for (int64_t i = 0; i < len && !rc; i++) {
        for (int k = 0; k < m; k++) bin[k] = is_seq[k] ? &el[k][i] : in[k];
        if ((rc = kl__sub_run(&r, bin, bout, e))) {
            char d[300];
            kl_err_prefix(e, "%s body, element %lld", kl_gnode_desc(n, d, sizeof d), (long long)i);
            break;
        }
        for (int k = 0; k < n_out; k++) res[k][i] = bout[k];
    }
    kl__sub_free(&r);
    for (int k = 0; k < n_out && !rc; k++) {
        kl_dtype dt = len > 0 ? res[k][0]->dtype : b->values[b->outputs[k]].dtype;
        if (n->outputs[k] >= 0) rc = emit(out[k], KL_VAL_SEQUENCE, dt, res[k], len, e);
    }
done:
    for (int k = 0; res && k < n_out; k++) {
        for (int64_t i = 0; res[k] && i < len; i++) kl_tensor_free(res[k][i]);
        free(res[k]);
    }
    for (int k = 0; el && k < m; k++) free(el[k]);
    free(el);
    free(bin);
    free(bout);
    free(res);
    free(is_seq);
    return rc;
}

static const char *const a_none[] = {NULL};
static const char *const a_empty[] = {"dtype", NULL};
static const char *const a_split[] = {"axis", "keepdims", NULL};
static const char *const a_concat[] = {"axis", "new_axis", NULL};
static const char *const a_opt[] = {"type", NULL};
static const char *const a_map[] = {"body", NULL};

#define SOP(name, since, mi, ma, attrs, run) \
    { name, "", since, 17, mi, ma, 1, 1, attrs, NULL, need_data, run, KL_OP_ALLOCS }

const kl_op kl__ops_seq[] = {
    SOP("SequenceEmpty", 11, 0, 0, a_empty, seq_empty_run),
    SOP("SequenceConstruct", 11, 1, -1, a_none, seq_construct_run),
    SOP("SequenceInsert", 11, 2, 3, a_none, seq_insert_run),
    SOP("SequenceErase", 11, 1, 2, a_none, seq_erase_run),
    SOP("SequenceAt", 11, 2, 2, a_none, seq_at_run),
    SOP("SequenceLength", 11, 1, 1, a_none, seq_length_run),
    SOP("SplitToSequence", 11, 1, 2, a_split, split_to_seq_run),
    SOP("ConcatFromSequence", 11, 1, 1, a_concat, concat_from_seq_run),
    SOP("Optional", 15, 0, 1, a_opt, optional_run),
    SOP("OptionalHasElement", 15, 0, 1, a_none, opt_has_run),
    SOP("OptionalGetElement", 15, 1, 1, a_none, opt_get_run),
    {"SequenceMap", "", 17, 17, 1, -1, 1, -1, a_map, seq_map_check, need_data, seq_map_run,
     KL_OP_ALLOCS | KL_OP_SUBGRAPH},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
