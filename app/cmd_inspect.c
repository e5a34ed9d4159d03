/* keel inspect: describes an ONNX model: inputs and outputs with shapes
 * (symbolic names kept), opsets, the op histogram, the subgraphs of
 * If/Loop/Scan nodes (indented by nesting), parameter count and bytes, a FLOPs estimate and the planned activation memory for a batch
 * size (symbolic dimensions: first = --batch, others 1 or --dim NAME=V). */
#include "app.h"

#include <stdlib.h>
#include <string.h>

#include <keel/graph.h>
#include <keel/onnx.h>

static const app_opt opts[] = {
    {"batch", 'b', 1, "B", "batch size for the FLOPs and memory estimates (default 1)", 0},
    {"dim", 0, 1, "NAME=V", "value of a named symbolic dimension (default 1)", 1},
    {"json", 0, 0, NULL, "machine-readable output", 0},
};
static const app_cmd_spec spec = {
    "inspect",
    "keel inspect MODEL [--batch B] [--dim NAME=V] [--json]",
    "Describe an ONNX model: inputs, outputs, opsets, ops, subgraphs, parameters, FLOPs, planned memory.",
    "The op histogram is of the model as stored (the top-level graph; each\n"
    "subgraph of an If/Loop/Scan node is listed with its own, indented by nesting); FLOPs (2 per multiply-add for\n"
    "Conv/MatMul/Gemm, 1 per output element otherwise) and the planned activation\n"
    "memory are for the optimised graph keel runs.",
    opts,
    KL_ARRAY_LEN(opts),
    1,
    1};

typedef struct { char *op; int n; } hist_t;

static void shape_text(kl_buf *b, const kl_value *v, int json) {
    if (v->rank < 0) { kl_buf_puts(b, json ? "null" : "?"); return; }
    kl_buf_puts(b, "[");
    for (int d = 0; d < v->rank; d++) {
        if (d) kl_buf_puts(b, json ? "," : ", ");
        if (v->dim_names[d]) { if (json) kl_buf_json_str(b, v->dim_names[d]); else kl_buf_puts(b, v->dim_names[d]); }
        else if (v->dims[d] >= 0) kl_buf_printf(b, "%lld", (long long)v->dims[d]);
        else kl_buf_puts(b, json ? "null" : "?");
    }
    kl_buf_puts(b, "]");
}

static int cmp_hist(const void *a, const void *b) {
    const hist_t *x = a, *y = b;
    if (x->n != y->n) return y->n - x->n;
    return strcmp(x->op, y->op);
}

/* The subgraphs of g's nodes, depth-first: text lines indented by depth,
 * or JSON objects with their own "subgraphs". */
static void subgraphs_text(kl_buf *b, const kl_graph *g, int depth, int json) {
    int first = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kl_gnode *n = &g->nodes[i];
        for (int k = 0; k < n->n_attrs; k++) {
            const kl_graph *s = n->attrs[k].type == KL_ATTR_GRAPH ? n->attrs[k].g : NULL;
            if (!s) continue;
            char d[300];
            kl_gnode_desc(n, d, sizeof d);
            if (json) {
                kl_buf_puts(b, first ? "{\"node\":" : ",{\"node\":");
                kl_buf_json_str(b, d);
                kl_buf_puts(b, ",\"attribute\":");
                kl_buf_json_str(b, n->attrs[k].name);
                kl_buf_printf(b, ",\"nodes\":%d,\"inputs\":%d,\"outer_inputs\":%d,\"outputs\":%d,\"ops\":{", s->n_nodes,
                              s->n_inputs - s->n_outer, s->n_outer, s->n_outputs);
            } else {
                kl_buf_printf(b, "%*s%s %s: %d nodes, %d inputs (+%d outer), %d outputs;", 2 + 2 * depth, "", d,
                              n->attrs[k].name, s->n_nodes, s->n_inputs - s->n_outer, s->n_outer, s->n_outputs);
            }
            first = 0;
            /* op counts in first-seen order */
            for (int j = 0; j < s->n_nodes; j++) {
                int seen = 0, c = 0;
                for (int q = 0; q < j && !seen; q++) seen = !strcmp(s->nodes[q].op_type, s->nodes[j].op_type);
                if (seen) continue;
                for (int q = j; q < s->n_nodes; q++) c += !strcmp(s->nodes[q].op_type, s->nodes[j].op_type);
                if (json) {
                    kl_buf_puts(b, j ? "," : "");
                    kl_buf_json_str(b, s->nodes[j].op_type);
                    kl_buf_printf(b, ":%d", c);
                } else {
                    kl_buf_printf(b, " %s:%d", s->nodes[j].op_type, c);
                }
            }
            if (json) {
                kl_buf_puts(b, "},\"subgraphs\":[");
                subgraphs_text(b, s, depth + 1, 1);
                kl_buf_puts(b, "]}");
            } else {
                kl_buf_puts(b, "\n");
                subgraphs_text(b, s, depth + 1, 0);
            }
        }
    }
}

int cmd_inspect(int argc, char **argv) {
    app_args a;
    int rc = app_parse(&spec, argc, argv, &a);
    if (rc >= 0) return rc;
    int64_t batch;
    if ((rc = app_get_int(&a, &spec, "batch", 1, &batch)) >= 0) return rc;
    if (batch < 1) return app_usage_error(&spec, "--batch must be >= 1");
    int json = app_flag(&a, "json");
    kl_err e = {0};
    kl_graph *g = NULL;
    kl_plan *plan = NULL;
    kl_tensor **in = NULL;
    hist_t *hist = NULL;
    kl_buf b;
    kl_buf_init(&b);
    int ret = APP_EXIT_FAIL, nh = 0;
    if (kl_onnx_load(a.pos[0], &g, &e)) return app_fail(&e);
    /* histogram and parameters of the model as stored */
    hist = calloc((size_t)g->n_nodes + 1, sizeof(hist_t));
    for (int i = 0; i < g->n_nodes; i++) {
        int k;
        for (k = 0; k < nh; k++) if (!strcmp(hist[k].op, g->nodes[i].op_type)) break;
        if (k == nh) hist[nh++].op = strdup(g->nodes[i].op_type);
        hist[k].n++;
    }
    qsort(hist, (size_t)nh, sizeof(hist_t), cmp_hist);
    uint64_t params = 0, pbytes = 0;
    int n_init = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init) { n_init++; params += (uint64_t)kl_tensor_numel(g->values[v].init); pbytes += g->values[v].init->nbytes; }
    int nodes_stored = g->n_nodes;
    /* render the stored-model part now (names point into g, still valid after optimisation) */
    kl_buf io;
    kl_buf_init(&io);
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? g->n_outputs : g->n_inputs;
        const int *idx = pass ? g->outputs : g->inputs;
        if (json) kl_buf_puts(&io, pass ? ",\"outputs\":[" : "\"inputs\":[");
        else kl_buf_puts(&io, pass ? "outputs:\n" : "inputs:\n");
        for (int i = 0; i < n; i++) {
            const kl_value *v = &g->values[idx[i]];
            if (json) {
                kl_buf_puts(&io, i ? ",{\"name\":" : "{\"name\":");
                kl_buf_json_str(&io, v->name);
                kl_buf_printf(&io, ",\"dtype\":\"%s\",\"shape\":", v->dtype == KL_DTYPE_COUNT ? "unknown" : kl_dtype_name(v->dtype));
                shape_text(&io, v, 1);
                kl_buf_puts(&io, "}");
            } else {
                kl_buf_printf(&io, "  %-24s %-8s ", v->name, v->dtype == KL_DTYPE_COUNT ? "?" : kl_dtype_name(v->dtype));
                shape_text(&io, v, 0);
                kl_buf_puts(&io, "\n");
            }
        }
        if (json) kl_buf_puts(&io, "]");
    }
    kl_buf subs;
    kl_buf_init(&subs);
    subgraphs_text(&subs, g, 0, json);
    if (json) {
        kl_buf_puts(&io, ",\"subgraphs\":[");
        kl_buf_puts(&io, subs.data ? subs.data : "");
        kl_buf_puts(&io, "]");
    } else if (subs.len) {
        kl_buf_puts(&io, "subgraphs:\n");
        kl_buf_puts(&io, subs.data);
    }
    kl_buf_free(&subs);
    /* optimise, plan for the batch size, estimate FLOPs */
    if (kl_graph_optimize(g, 1, &e)) { ret = app_fail(&e); kl_buf_free(&io); goto done; }
    const char *dims[APP_MAX_VALUES];
    int nd = app_get_all(&a, "dim", dims, APP_MAX_VALUES);
    in = calloc((size_t)g->n_inputs + 1, sizeof(kl_tensor *));
    for (int i = 0; i < g->n_inputs; i++) {
        const kl_value *v = &g->values[g->inputs[i]];
        int64_t d[KL_MAX_DIMS];
        for (int k = 0; k < v->rank; k++) {
            d[k] = v->dim_names[k] || v->dims[k] < 0 ? (k == 0 ? batch : 1) : v->dims[k];
            for (int j = 0; j < nd && v->dim_names[k]; j++) {
                const char *eq = strchr(dims[j], '=');
                if (eq && (size_t)(eq - dims[j]) == strlen(v->dim_names[k]) && !strncmp(dims[j], v->dim_names[k], eq - dims[j])) d[k] = atoll(eq + 1);
            }
        }
        /* shape-only tensors: the planner never reads input data */
        in[i] = calloc(1, sizeof(kl_tensor));
        in[i]->dtype = v->dtype == KL_DTYPE_COUNT ? KL_F32 : v->dtype;
        in[i]->rank = v->rank < 0 ? 0 : v->rank;
        for (int k = 0; k < in[i]->rank; k++) in[i]->dims[k] = d[k];
    }
    double flops = 0;
    uint64_t act = 0, naive = 0;
    int planned = kl_plan_new(g, (const kl_tensor *const *)in, (size_t)g->n_inputs, &plan, &e) == KL_OK;
    char why[512] = "";
    if (!planned) snprintf(why, sizeof why, "%s", kl_err_what(&e));
    if (planned) {
        act = kl_plan_activation_bytes(plan);
        naive = kl_plan_naive_bytes(plan);
        for (int i = 0; i < g->n_nodes; i++) {
            const kl_gnode *n = &g->nodes[i];
            const kl_tensor *y = n->n_out > 0 && n->outputs[0] >= 0 ? kl_plan_value(plan, n->outputs[0]) : NULL;
            const kl_tensor *x0 = n->n_in > 0 && n->inputs[0] >= 0 ? kl_plan_value(plan, n->inputs[0]) : NULL;
            const kl_tensor *x1 = n->n_in > 1 && n->inputs[1] >= 0 ? kl_plan_value(plan, n->inputs[1]) : NULL;
            if (!y) continue;
            double out = (double)kl_tensor_numel(y);
            int blocked = !strcmp(n->op_type, "NchwcConv") && !strcmp(n->domain, "keel");
            if (blocked && x1 && y->rank == 5 && y->dims[1] > 0) /* (N, M/16, H, W, 16): count the M real channels */
                out = out / (double)(y->dims[1] * 16) * (double)x1->dims[0];
            if ((!strcmp(n->op_type, "Conv") || blocked) && x1) {
                double kprod = 1;
                for (int k = 1; k < x1->rank; k++) kprod *= (double)x1->dims[k];
                flops += 2 * out * kprod;
            } else if ((!strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "FusedMatMul")) && x0 && x0->rank > 0) {
                flops += 2 * out * (double)x0->dims[x0->rank - 1];
            } else if (!strcmp(n->op_type, "Gemm") && x0) {
                flops += 2 * out * (double)(kl_gnode_attr_int(n, "transA", 0) ? x0->dims[0] : x0->dims[x0->rank - 1]);
            } else {
                flops += out;
            }
        }
    }
    char b1[32], b2[32], b3[32];
    if (json) {
        kl_buf_puts(&b, "{\"model\":");
        kl_buf_json_str(&b, a.pos[0]);
        kl_buf_puts(&b, ",\"producer\":");
        kl_buf_json_str(&b, g->producer ? g->producer : "");
        kl_buf_printf(&b, ",\"opset\":%d,", g->opset);
        kl_buf_puts(&b, io.data ? io.data : "");
        kl_buf_printf(&b, ",\"nodes\":%d,\"nodes_optimized\":%d,\"ops\":{", nodes_stored, g->n_nodes);
        for (int i = 0; i < nh; i++) { kl_buf_puts(&b, i ? "," : ""); kl_buf_json_str(&b, hist[i].op); kl_buf_printf(&b, ":%d", hist[i].n); }
        kl_buf_printf(&b, "},\"initializers\":%d,\"params\":%llu,\"param_bytes\":%llu,\"batch\":%lld", n_init, (unsigned long long)params,
                      (unsigned long long)pbytes, (long long)batch);
        if (planned)
            kl_buf_printf(&b, ",\"flops\":%.0f,\"activation_bytes\":%llu,\"unplanned_activation_bytes\":%llu,\"dynamic\":%s}\n", flops,
                          (unsigned long long)act, (unsigned long long)naive, kl_plan_is_dynamic(plan) ? "true" : "false");
        else {
            kl_buf_puts(&b, ",\"flops\":null,\"activation_bytes\":null,\"plan_error\":");
            kl_buf_json_str(&b, why);
            kl_buf_puts(&b, "}\n");
        }
    } else {
        kl_buf_printf(&b, "model       %s\nproducer    %s\nopset       %d\n", a.pos[0], g->producer ? g->producer : "?", g->opset);
        kl_buf_puts(&b, io.data ? io.data : "");
        kl_buf_printf(&b, "nodes       %d (%d after optimisation)\nops        ", nodes_stored, g->n_nodes);
        for (int i = 0; i < nh; i++) kl_buf_printf(&b, " %s:%d", hist[i].op, hist[i].n);
        kl_buf_printf(&b, "\nparams      %llu in %d initializers (%s)\n", (unsigned long long)params, n_init, kl_fmt_bytes(pbytes, b1, sizeof b1));
        if (planned)
            kl_buf_printf(&b, "flops       %.3g per run at batch %lld\nactivations %s planned (%s without reuse)%s\n", flops, (long long)batch,
                          kl_fmt_bytes(act, b2, sizeof b2), kl_fmt_bytes(naive, b3, sizeof b3),
                          kl_plan_is_dynamic(plan) ? ", plus data-dependent parts at run time" : "");
        else
            kl_buf_printf(&b, "plan        not available: %s\n", why);
    }
    fputs(b.data ? b.data : "", stdout);
    kl_buf_free(&io);
    ret = APP_EXIT_OK;
done:
    if (in)
        for (int i = 0; i < g->n_inputs; i++) free(in[i]);
    free(in);
    if (hist)
        for (int i = 0; i < nh; i++) free(hist[i].op);
    free(hist);
    kl_buf_free(&b);
    kl_plan_free(plan);
    kl_graph_free(g);
    return ret;
}
