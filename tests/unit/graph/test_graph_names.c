/* Tests of the graph's name index (src/graph/graph.c): every value is found
 * by its name among many (collisions in the open-addressing table), a name
 * added twice is one value, renames keep every other lookup true (removal
 * shifts the probe chains), and a duplicate output name is still refused
 * naming the node. */
#include "../harness.h"

#include "keel/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int scan(const kl_graph *g, const char *name) {
    for (int i = 0; i < g->n_values; i++)
        if (!strcmp(g->values[i].name, name)) return i;
    return -1;
}

KL_TEST(graph_name_index_collisions_and_renames) {
    kl_graph *g = NULL;
    KT_OK(kl_graph_new(&g, NULL), NULL);
    enum { N = 20000 };
    char nm[64];
    for (int i = 0; i < N; i++) {
        snprintf(nm, sizeof nm, i % 3 ? "t%d" : "layer.%d/out:0", i);
        KT_EQ_INT(kl_graph_value(g, nm), i);
    }
    KT_EQ_INT(g->n_values, N);
    KT_EQ_INT(kl_graph_value(g, "t1"), 1); /* again: the same value */
    KT_EQ_INT(kl_graph_value(g, ""), N);   /* the empty name is a name too */
    KT_EQ_INT(kl_graph_find_value(g, "t0"), -1);
    KT_EQ_INT(kl_graph_find_value(g, "t"), -1);
    /* rename every 7th value (removals inside probe chains), then check all */
    for (int i = 0; i < N; i += 7) {
        snprintf(nm, sizeof nm, "renamed_%d", i);
        KT_OK(kl_graph_value_rename(g, i, nm), NULL);
    }
    int bad = 0;
    for (int i = 0; i <= N; i++) {
        const char *name = g->values[i].name;
        if (kl_graph_find_value(g, name) != i || (i % 97 == 0 && scan(g, name) != i)) bad++;
        if (i < N && i % 7 == 0) {
            snprintf(nm, sizeof nm, i % 3 ? "t%d" : "layer.%d/out:0", i);
            if (kl_graph_find_value(g, nm) != -1) bad++; /* the old name is gone */
        }
    }
    KT_EQ_INT(bad, 0);
    /* a removed name can be taken again by a new value */
    KT_EQ_INT(kl_graph_value(g, "t7"), N + 1);
    KT_EQ_INT(kl_graph_find_value(g, "renamed_7"), 7);
    kl_graph_free(g);
}

KL_TEST(graph_duplicate_output_refused_naming_node) {
    kl_graph *g = NULL;
    KT_OK(kl_graph_new(&g, NULL), NULL);
    g->opset = 17;
    int x = kl_graph_value(g, "x");
    g->values[x].is_input = 1;
    g->inputs = malloc(sizeof(int));
    g->inputs[0] = x;
    g->n_inputs = 1;
    const char *in0[1] = {"x"}, *out0[1] = {"t"};
    KT_CHECK(kl_graph_add_node(g, "Relu", "first", in0, 1, out0, 1) >= 0);
    KT_CHECK(kl_graph_add_node(g, "Neg", "second", in0, 1, out0, 1) >= 0);
    int t = kl_graph_find_value(g, "t");
    g->values[t].is_output = 1;
    g->outputs = malloc(sizeof(int));
    g->outputs[0] = t;
    g->n_outputs = 1;
    kl_err e = {0};
    KT_EQ_INT(kl_graph_finalize(g, &e), KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "node 1 'second' (Neg)");
    KT_CONTAINS(kl_err_what(&e), "output 't' is already produced elsewhere");
    kl_graph_free(g);
}
