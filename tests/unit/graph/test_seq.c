/* Sequence and optional values and their ops beyond the node tests, against
 * hand-computed ONNX semantics: negative positions, inserting into an empty
 * sequence, SplitToSequence with a scalar split leaving a shorter last
 * piece and with keepdims 0, ConcatFromSequence back to the input and with
 * new_axis on a negative axis, Optional with and without a value, and the
 * errors (out-of-range positions, an empty optional, a byte tensor that is
 * no sequence, a corrupt value) naming the node, op and opset. */
#include "../harness.h"

#include "keel/graph.h"
#include "keel/tensor.h"

#include <stdlib.h>
#include <string.h>

static kl_graph *graph_new(void) {
    kl_graph *g;
    kl_graph_new(&g, NULL);
    g->opset = 17;
    return g;
}

static void io(kl_graph *g, const char *name, int out) {
    int v = kl_graph_value(g, name);
    int **list = out ? &g->outputs : &g->inputs, *n = out ? &g->n_outputs : &g->n_inputs;
    *list = realloc(*list, sizeof(int) * (size_t)(*n + 1));
    (*list)[(*n)++] = v;
    if (out) g->values[v].is_output = 1;
    else g->values[v].is_input = 1;
}

static void init_i64(kl_graph *g, const char *name, int64_t v) {
    kl_tensor *t;
    kl_tensor_new(KL_I64, 0, NULL, KL_TAG_PARAMS, &t, NULL);
    *(int64_t *)t->data = v;
    int x = kl_graph_value(g, name);
    g->values[x].init = t;
    g->values[x].dtype = KL_I64;
    g->values[x].rank = 0;
}

static int node(kl_graph *g, const char *op, const char *name, const char *ins, const char *outs) {
    const char *iv[8], *ov[4];
    char ib[256], ob[256];
    int ni = 0, no = 0;
    snprintf(ib, sizeof ib, "%s", ins);
    snprintf(ob, sizeof ob, "%s", outs);
    for (char *s = ib, *t; s && *ins; s = t) {
        t = strchr(s, ',');
        if (t) *t++ = 0;
        iv[ni++] = s;
    }
    for (char *s = ob, *t; s; s = t) {
        t = strchr(s, ',');
        if (t) *t++ = 0;
        ov[no++] = s;
    }
    return kl_graph_add_node(g, op, name, iv, ni, ov, no);
}
static void attr_i(kl_graph *g, int k, const char *name, int64_t v) {
    kl_gnode_attr_add(&g->nodes[k], name, KL_ATTR_INT)->i = v;
}

static int run(kl_graph *g, kl_tensor **x, int n_in, kl_tensor **outs, kl_err *e) {
    kl_plan *p = NULL;
    void *arena = NULL;
    int rc = kl_graph_finalize(g, e);
    if (!rc) rc = kl_plan_new(g, (const kl_tensor *const *)x, (size_t)n_in, &p, e);
    if (!rc) arena = kl_mem_alloc(kl_plan_arena_bytes(p) + 64, KL_TAG_ACTIVATIONS);
    if (!rc)
        rc = kl_plan_run(p, g, (const kl_tensor *const *)x, (size_t)n_in, outs, (size_t)g->n_outputs, arena, NULL, e);
    kl_mem_free(arena);
    kl_plan_free(p);
    return rc;
}

static kl_tensor *seqf(int64_t n, float base) {
    kl_tensor *t;
    kl_tensor_new(KL_F32, 1, &n, KL_TAG_OTHER, &t, NULL);
    for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = base + (float)i;
    return t;
}
static float at(const kl_tensor *t, int64_t i) { return ((const float *)t->data)[i]; }

/* Construct(a, b) -> Insert(c, -1) = [a, c, b] -> Erase(0) = [c, b];
 * At(-1) = b, Length = 2; SequenceEmpty -> Insert(a) at 0 = [a] */
KL_TEST(graph_seq_construct_insert_erase_at) {
    kl_err e = {0};
    kl_graph *g = graph_new();
    io(g, "a", 0);
    io(g, "b", 0);
    io(g, "c", 0);
    init_i64(g, "m1", -1);
    init_i64(g, "zero", 0);
    node(g, "SequenceConstruct", "mk", "a,b", "s0");
    node(g, "SequenceInsert", "ins", "s0,c,m1", "s1");
    node(g, "SequenceErase", "del", "s1,zero", "s2");
    node(g, "SequenceAt", "last", "s2,m1", "y");
    node(g, "SequenceLength", "len", "s2", "n");
    int k = node(g, "SequenceEmpty", "empty", "", "s3");
    attr_i(g, k, "dtype", 1);
    node(g, "SequenceInsert", "ins0", "s3,a", "s4");
    io(g, "y", 1);
    io(g, "n", 1);
    io(g, "s2", 1);
    io(g, "s4", 1);
    kl_tensor *in[3] = {seqf(2, 0), seqf(3, 10), seqf(1, 20)}, *o[4];
    KT_OK(run(g, in, 3, o, &e), &e);
    KT_EQ_INT(o[0]->dims[0], 3);
    KT_CHECK(at(o[0], 0) == 10 && at(o[0], 2) == 12);
    KT_EQ_INT(*(int64_t *)o[1]->data, 2);
    int kind;
    int64_t cnt;
    kl_tensor v;
    KT_OK(kl_seq_check(o[2], &kind, NULL, &cnt, &e), &e);
    KT_EQ_INT(kind, KL_VAL_SEQUENCE);
    KT_EQ_INT(cnt, 2);
    KT_OK(kl_seq_at(o[2], 0, &v, &e), &e);
    KT_CHECK(v.rank == 1 && v.dims[0] == 1 && at(&v, 0) == 20);
    KT_OK(kl_seq_check(o[3], NULL, NULL, &cnt, &e), &e);
    KT_EQ_INT(cnt, 1);
    for (int i = 0; i < 4; i++) kl_tensor_free(o[i]);
    /* position 2 of a sequence of 2: out of range, naming the node */
    ((int64_t *)g->values[kl_graph_find_value(g, "m1")].init->data)[0] = 2;
    KT_CHECK(run(g, in, 3, o, &e) == KL_ERANGE);
    KT_CONTAINS(kl_err_what(&e), "'last' (SequenceAt)");
    KT_CONTAINS(kl_err_what(&e), "opset 17");
    for (int i = 0; i < 3; i++) kl_tensor_free(in[i]);
    kl_graph_free(g);
}

/* X [2, 5] = 0..9: split 2 along -1 -> [2,2],[2,2],[2,1]; concat along 1
 * gives X; split without sizes along 0, keepdims 0 -> two [5]; stacked
 * (new_axis) along -1 -> [5, 2] = X^T */
KL_TEST(graph_seq_split_concat) {
    kl_err e = {0};
    kl_graph *g = graph_new();
    io(g, "X", 0);
    init_i64(g, "two", 2);
    int k = node(g, "SplitToSequence", "split", "X,two", "parts");
    attr_i(g, k, "axis", -1);
    k = node(g, "ConcatFromSequence", "cat", "parts", "Y");
    attr_i(g, k, "axis", 1);
    k = node(g, "SplitToSequence", "rows", "X", "rs");
    attr_i(g, k, "keepdims", 0);
    k = node(g, "ConcatFromSequence", "stack", "rs", "T");
    attr_i(g, k, "axis", -1);
    attr_i(g, k, "new_axis", 1);
    io(g, "parts", 1);
    io(g, "Y", 1);
    io(g, "T", 1);
    int64_t d[2] = {2, 5};
    kl_tensor *x, *o[3];
    kl_tensor_new(KL_F32, 2, d, KL_TAG_OTHER, &x, NULL);
    for (int i = 0; i < 10; i++) ((float *)x->data)[i] = (float)i;
    KT_OK(run(g, &x, 1, o, &e), &e);
    int64_t cnt;
    kl_tensor v;
    KT_OK(kl_seq_check(o[0], NULL, NULL, &cnt, &e), &e);
    KT_EQ_INT(cnt, 3);
    KT_OK(kl_seq_at(o[0], 2, &v, &e), &e);
    KT_CHECK(v.rank == 2 && v.dims[0] == 2 && v.dims[1] == 1 && at(&v, 0) == 4 && at(&v, 1) == 9);
    KT_CHECK(o[1]->rank == 2 && o[1]->dims[1] == 5 && !memcmp(o[1]->data, x->data, x->nbytes));
    KT_CHECK(o[2]->rank == 2 && o[2]->dims[0] == 5 && o[2]->dims[1] == 2);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 2; j++) KT_CHECK(at(o[2], i * 2 + j) == (float)(j * 5 + i));
    for (int i = 0; i < 3; i++) kl_tensor_free(o[i]);
    kl_tensor_free(x);
    kl_graph_free(g);
}

/* Optional(x): present, its element x; Optional(): empty; getting the
 * element of the empty one is an error naming the node */
KL_TEST(graph_optional_values) {
    kl_err e = {0};
    kl_graph *g = graph_new();
    io(g, "x", 0);
    node(g, "Optional", "some", "x", "o1");
    node(g, "Optional", "none", "", "o2");
    node(g, "OptionalHasElement", "has1", "o1", "h1");
    node(g, "OptionalHasElement", "has2", "o2", "h2");
    node(g, "OptionalGetElement", "get1", "o1", "y");
    io(g, "h1", 1);
    io(g, "h2", 1);
    io(g, "y", 1);
    kl_tensor *x = seqf(4, 1), *o[3];
    KT_OK(run(g, &x, 1, o, &e), &e);
    KT_CHECK(*(uint8_t *)o[0]->data == 1 && *(uint8_t *)o[1]->data == 0);
    KT_CHECK(o[2]->dims[0] == 4 && at(o[2], 3) == 4);
    for (int i = 0; i < 3; i++) kl_tensor_free(o[i]);
    kl_graph_free(g);
    g = graph_new();
    node(g, "Optional", "none", "", "o2");
    node(g, "OptionalGetElement", "get2", "o2", "y");
    io(g, "y", 1);
    KT_CHECK(run(g, NULL, 0, o, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'get2' (OptionalGetElement)");
    KT_CONTAINS(kl_err_what(&e), "empty");
    kl_graph_free(g);
    kl_tensor_free(x);
}

/* a byte tensor that is not a sequence, and a corrupt one, are refused */
KL_TEST(graph_seq_value_validation) {
    kl_err e = {0};
    kl_tensor *a = seqf(3, 0), *s;
    KT_OK(kl_seq_new(KL_VAL_SEQUENCE, KL_F32, (const kl_tensor *const *)&a, 1, &s, &e), &e);
    int64_t cnt;
    KT_OK(kl_seq_check(s, NULL, NULL, &cnt, &e), &e);
    KT_EQ_INT(cnt, 1);
    /* an entry claiming more bytes than the value holds */
    ((uint64_t *)((char *)s->data + 24))[10] = 1u << 30;
    KT_CHECK(kl_seq_check(s, NULL, NULL, &cnt, &e) == KL_EINVAL);
    kl_tensor_free(s);
    kl_graph *g = graph_new();
    io(g, "bytes", 0);
    node(g, "SequenceLength", "len", "bytes", "n");
    io(g, "n", 1);
    int64_t nb = 16;
    kl_tensor *b;
    kl_tensor_new(KL_U8, 1, &nb, KL_TAG_OTHER, &b, NULL);
    kl_tensor *o;
    KT_CHECK(run(g, &b, 1, &o, &e) != KL_OK);
    KT_CONTAINS(kl_err_what(&e), "'len' (SequenceLength)");
    KT_CONTAINS(kl_err_what(&e), "not a sequence");
    kl_tensor_free(b);
    kl_tensor_free(a);
    kl_graph_free(g);
}
