/* The session API (include/keel/runtime.h): load an ONNX model into the graph
 * IR, optimise it, and run it with plans cached per input-shape signature.
 * Runs are thread-safe: the plan cache is guarded by a mutex, plans are
 * immutable, and every run takes its own arena from the plan's free list. */
#include "keel/runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "keel/graph.h"
#include "keel/onnx.h"

#define MAX_PLANS 32
#define MAX_FREE_ARENAS 4

typedef struct plan_entry {
    int64_t *sig;                 /* per input: rank, dims... */
    size_t sig_len;
    kl_plan *plan;
    void *free_arenas[MAX_FREE_ARENAS];
    int n_free;
    struct plan_entry *next;
} plan_entry;

struct kl_session {
    kl_graph *g;
    char *name;                   /* the model's file (or the name given), for run-time refusals */
    kl_pool *pool;                /* NULL = default pool */
    kl_value_info *ins, *outs;
    pthread_mutex_t mu;
    plan_entry *plans;
    int n_plans;
};

static void fill_info(const kl_value *v, kl_value_info *vi) {
    memset(vi, 0, sizeof *vi);
    vi->name = v->name;
    vi->dtype = v->dtype;
    vi->rank = v->rank;
    for (int d = 0; d < v->rank && d < KL_MAX_DIMS; d++) {
        vi->dims[d] = v->dim_names[d] ? -1 : v->dims[d];
        vi->dim_names[d] = v->dim_names[d];
    }
}

static int finish(kl_graph *g, const char *name, const kl_session_opts *o, kl_session **out, kl_err *e) {
    kl_session *s = calloc(1, sizeof *s);
    int rc;
    if (!s) { kl_graph_free(g); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    s->g = g;
    if (name && !(s->name = strdup(name))) {
        rc = kl_err_set(e, KL_ENOMEM, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    int level = o ? o->opt_level : 1;
    if ((rc = kl_graph_optimize(g, level, e))) goto fail;
    if (o && o->threads > 0 && (rc = kl_pool_new(o->threads, &s->pool, e))) goto fail;
    s->ins = calloc((size_t)g->n_inputs + 1, sizeof(kl_value_info));
    s->outs = calloc((size_t)g->n_outputs + 1, sizeof(kl_value_info));
    if (!s->ins || !s->outs) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < g->n_inputs; i++) fill_info(&g->values[g->inputs[i]], &s->ins[i]);
    for (int i = 0; i < g->n_outputs; i++) fill_info(&g->values[g->outputs[i]], &s->outs[i]);
    *out = s;
    return KL_OK;
fail:
    kl_session_free(s);
    return rc;
}

int kl_session_load(const char *path, const kl_session_opts *o, kl_session **out, kl_err *e) {
    *out = NULL;
    kl_graph *g;
    int rc = kl_onnx_load(path, &g, e);
    if (rc) return rc;
    return finish(g, path, o, out, e);
}

int kl_session_load_mem(const void *bytes, size_t len, const char *name, const kl_session_opts *o, kl_session **out,
                        kl_err *e) {
    *out = NULL;
    kl_graph *g;
    int rc = kl_onnx_load_mem(bytes, len, name, name ? "." : NULL, &g, e);
    if (rc) return rc;
    return finish(g, name, o, out, e);
}

void kl_session_free(kl_session *s) {
    if (!s) return;
    plan_entry *p = s->plans;
    while (p) {
        plan_entry *nx = p->next;
        for (int i = 0; i < p->n_free; i++) kl_mem_free(p->free_arenas[i]);
        kl_plan_free(p->plan);
        free(p->sig);
        free(p);
        p = nx;
    }
    if (s->pool) kl_pool_free(s->pool);
    pthread_mutex_destroy(&s->mu);
    free(s->ins);
    free(s->outs);
    free(s->name);
    kl_graph_free(s->g);
    free(s);
}

size_t kl_session_num_inputs(const kl_session *s) { return (size_t)s->g->n_inputs; }
size_t kl_session_num_outputs(const kl_session *s) { return (size_t)s->g->n_outputs; }
const kl_value_info *kl_session_input(const kl_session *s, size_t i) { return i < (size_t)s->g->n_inputs ? &s->ins[i] : NULL; }
const kl_value_info *kl_session_output(const kl_session *s, size_t i) { return i < (size_t)s->g->n_outputs ? &s->outs[i] : NULL; }
const struct kl_graph *kl_session_graph(const kl_session *s) { return s->g; }

int kl_session_input_index(const kl_session *s, const char *name) {
    for (int i = 0; i < s->g->n_inputs; i++)
        if (!strcmp(s->ins[i].name, name)) return i;
    return -1;
}
int kl_session_output_index(const kl_session *s, const char *name) {
    for (int i = 0; i < s->g->n_outputs; i++)
        if (!strcmp(s->outs[i].name, name)) return i;
    return -1;
}

static int check_inputs(kl_session *s, const kl_tensor *const *inputs, size_t n_in, kl_err *e) {
    if (n_in != (size_t)s->g->n_inputs)
        return kl_err_set(e, KL_EINVAL, "%zu inputs given, the model takes %d", n_in, s->g->n_inputs);
    for (size_t i = 0; i < n_in; i++) {
        const kl_value_info *vi = &s->ins[i];
        const kl_tensor *t = inputs[i];
        char a[128], b[128];
        if (!t) return kl_err_set(e, KL_EINVAL, "input '%s' is missing", vi->name);
        if (!kl_tensor_is_contiguous(t)) return kl_err_set(e, KL_EINVAL, "input '%s' is not contiguous", vi->name);
        if (vi->dtype != KL_DTYPE_COUNT && t->dtype != vi->dtype)
            return kl_err_set(e, KL_ETYPE, "input '%s': dtype %s, the model expects %s", vi->name, kl_dtype_name(t->dtype), kl_dtype_name(vi->dtype));
        if (vi->rank >= 0) {
            int bad = t->rank != vi->rank;
            for (int d = 0; !bad && d < vi->rank; d++) bad = vi->dims[d] >= 0 && t->dims[d] != vi->dims[d];
            if (bad) {
                kl_buf sb;
                kl_buf_init(&sb);
                kl_buf_puts(&sb, "[");
                for (int d = 0; d < vi->rank; d++) {
                    if (d) kl_buf_puts(&sb, ",");
                    if (vi->dims[d] >= 0) kl_buf_printf(&sb, "%lld", (long long)vi->dims[d]);
                    else kl_buf_puts(&sb, vi->dim_names[d] ? vi->dim_names[d] : "?");
                }
                kl_buf_puts(&sb, "]");
                snprintf(b, sizeof b, "%s", sb.data ? sb.data : "");
                kl_buf_free(&sb);
                return kl_err_set(e, KL_ESHAPE, "input '%s': shape %s, the model expects %s", vi->name, kl_shape_str(t->rank, t->dims, a, sizeof a), b);
            }
        }
    }
    return KL_OK;
}

/* Finds or builds the plan for the inputs' shapes (under the lock). */
static int get_plan(kl_session *s, const kl_tensor *const *inputs, size_t n_in, plan_entry **out, int *temp, kl_err *e) {
    size_t len = 0;
    int64_t sig[KL_MAX_DIMS * 64 + 64], *sigp = sig;
    for (size_t i = 0; i < n_in; i++) len += 1 + (size_t)inputs[i]->rank;
    if (len > KL_ARRAY_LEN(sig)) sigp = malloc(sizeof(int64_t) * len);
    if (!sigp) return kl_err_set(e, KL_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_in; i++) {
        sigp[k++] = inputs[i]->rank;
        for (int d = 0; d < inputs[i]->rank; d++) sigp[k++] = inputs[i]->dims[d];
    }
    int rc = KL_OK;
    *temp = 0;
    *out = NULL;
    for (plan_entry *p = s->plans; p; p = p->next)
        if (p->sig_len == len && !memcmp(p->sig, sigp, sizeof(int64_t) * len)) { *out = p; goto done; }
    plan_entry *pe = calloc(1, sizeof *pe);
    if (!pe) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    pe->sig = malloc(sizeof(int64_t) * (len + 1));
    if (!pe->sig) { free(pe); rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    memcpy(pe->sig, sigp, sizeof(int64_t) * len);
    pe->sig_len = len;
    if ((rc = kl_plan_new(s->g, inputs, n_in, &pe->plan, e))) { free(pe->sig); free(pe); goto done; }
    if (s->n_plans < MAX_PLANS) {
        pe->next = s->plans;
        s->plans = pe;
        s->n_plans++;
    } else {
        *temp = 1;
    }
    *out = pe;
done:
    if (sigp != sig) free(sigp);
    return rc;
}

static void free_entry(plan_entry *pe) {
    for (int i = 0; i < pe->n_free; i++) kl_mem_free(pe->free_arenas[i]);
    kl_plan_free(pe->plan);
    free(pe->sig);
    free(pe);
}

int kl_session_run(kl_session *s, const kl_tensor *const *inputs, size_t n_in, kl_tensor **outputs, size_t n_out,
                   kl_err *e) {
    for (size_t i = 0; i < n_out; i++) outputs[i] = NULL;
    int rc = check_inputs(s, inputs, n_in, e);
    if (rc) return rc;
    if (n_out > (size_t)s->g->n_outputs) return kl_err_set(e, KL_EINVAL, "%zu outputs asked, the model has %d", n_out, s->g->n_outputs);
    plan_entry *pe;
    int temp;
    void *arena = NULL;
    pthread_mutex_lock(&s->mu);
    rc = get_plan(s, inputs, n_in, &pe, &temp, e);
    if (!rc && !temp && pe->n_free > 0) arena = pe->free_arenas[--pe->n_free];
    pthread_mutex_unlock(&s->mu);
    if (rc == KL_EUNSUPPORTED && s->name) kl_err_prefix(e, "%s", s->name);
    if (rc) return rc;
    size_t ab = kl_plan_arena_bytes(pe->plan);
    if (!arena && !(arena = kl_mem_alloc_e(ab, KL_TAG_ACTIVATIONS, e))) {
        if (temp) free_entry(pe);
        return KL_ENOMEM;
    }
    kl_tensor *tmp[64], **outs = outputs;
    size_t no = (size_t)s->g->n_outputs;
    if (n_out < no) {
        outs = no <= 64 ? tmp : calloc(no, sizeof(kl_tensor *));
        if (!outs) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); goto done; }
    }
    rc = kl_plan_run(pe->plan, s->g, inputs, n_in, outs, no, arena, s->pool, e);
    /* a refusal met at run time (an op's input value it does not support)
     * names the model as one met at load time does */
    if (rc == KL_EUNSUPPORTED && s->name) kl_err_prefix(e, "%s", s->name);
    if (outs != outputs) {
        for (size_t i = 0; i < no; i++) {
            if (i < n_out) outputs[i] = outs[i];
            else kl_tensor_free(outs[i]);
        }
        if (outs != tmp) free(outs);
    }
done:
    if (temp) {
        kl_mem_free(arena);
        free_entry(pe);
    } else {
        pthread_mutex_lock(&s->mu);
        /* under ASan a run's arena is not kept for the next run, so that a
         * use after the run is reported (kl_mem_direct) */
        if (!KL_ASAN && pe->n_free < MAX_FREE_ARENAS) pe->free_arenas[pe->n_free++] = arena;
        else kl_mem_free(arena);
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

int kl_session_plan_bytes(kl_session *s, const kl_tensor *const *inputs, size_t n_in, uint64_t *bytes, kl_err *e) {
    *bytes = 0;
    int rc = check_inputs(s, inputs, n_in, e);
    if (rc) return rc;
    plan_entry *pe;
    int temp;
    pthread_mutex_lock(&s->mu);
    rc = get_plan(s, inputs, n_in, &pe, &temp, e);
    if (!rc) *bytes = kl_plan_arena_bytes(pe->plan);
    pthread_mutex_unlock(&s->mu);
    if (!rc && temp) free_entry(pe);
    return rc;
}
