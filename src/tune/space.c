/* Search spaces: parsing the YAML space file, validation (an empty or
 * contradictory space is an error naming the line), value formatting. */
#include <keel/tune.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kl_tune_space_free(kl_tune_space *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        kl_tune_param *p = &s->p[i];
        free(p->name);
        for (int c = 0; c < p->nchoices; c++) free(p->choices[c]);
        free(p->choices);
        free(p->cond_value);
    }
    free(s->p);
    free(s);
}

int kl_tune_space_find(const kl_tune_space *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->p[i].name, name)) return i;
    return -1;
}

const char *kl_tune_value_str(const kl_tune_param *p, kl_tune_value v, char *buf, size_t n) {
    if (!v.present) snprintf(buf, n, "-");
    else if (p->kind == KL_TUNE_CAT) snprintf(buf, n, "%s", p->choices[(int)v.v]);
    else if (p->kind == KL_TUNE_INT) snprintf(buf, n, "%lld", (long long)llround(v.v));
    else snprintf(buf, n, "%.6g", v.v);
    return buf;
}

int kl_tune_value_parse(const kl_tune_param *p, const char *text, kl_tune_value *out) {
    out->present = 1;
    if (p->kind == KL_TUNE_CAT) {
        for (int c = 0; c < p->nchoices; c++)
            if (!strcmp(p->choices[c], text)) { out->v = c; return KL_OK; }
        return KL_EINVAL;
    }
    double v;
    if (kl_parse_double(text, &v) || !(v >= p->low && v <= p->high)) return KL_EINVAL;
    out->v = p->kind == KL_TUNE_INT ? (double)llround(v) : v;
    return KL_OK;
}

static int parse_param(const kl_tune_space *s, const char *name, const kl_node *n, kl_tune_param *p, kl_err *e) {
    static const char *const keys[] = {"type", "low", "high", "log", "step", "choices", "when"};
    memset(p, 0, sizeof *p);
    p->cond = -1;
    p->name = strdup(name);
    if (!p->name) return kl_err_set(e, KL_ENOMEM, "out of memory");
    if (kl_node_kind_of(n) != KL_NODE_MAP)
        return kl_node_error(n, e, KL_EINVAL, "expected a mapping like {type: float, low: 0.001, high: 0.1, log: true}");
    int rc = kl_spec_check_keys(n, keys, KL_ARRAY_LEN(keys), e);
    if (rc) return rc;
    const char *type;
    const kl_node *tn;
    if ((rc = kl_spec_require(n, "type", &tn, e)) || (rc = kl_node_str(tn, &type, e))) return rc;
    if (!strcmp(type, "float")) p->kind = KL_TUNE_FLOAT;
    else if (!strcmp(type, "int")) p->kind = KL_TUNE_INT;
    else if (!strcmp(type, "categorical") || !strcmp(type, "cat")) p->kind = KL_TUNE_CAT;
    else return kl_node_error(tn, e, KL_EINVAL, "unknown type '%s' (expected float, int or categorical)", type);
    if (p->kind == KL_TUNE_CAT) {
        const kl_node *ch;
        if ((rc = kl_spec_require(n, "choices", &ch, e))) return rc;
        if (kl_node_kind_of(ch) != KL_NODE_SEQ || kl_node_len(ch) == 0)
            return kl_node_error(ch, e, KL_EINVAL, "choices must be a non-empty list");
        p->nchoices = (int)kl_node_len(ch);
        p->choices = calloc((size_t)p->nchoices, sizeof *p->choices);
        if (!p->choices) return kl_err_set(e, KL_ENOMEM, "out of memory");
        for (int c = 0; c < p->nchoices; c++) {
            const char *v;
            if ((rc = kl_node_str(kl_node_at(ch, (size_t)c), &v, e))) return rc;
            for (int d = 0; d < c; d++)
                if (!strcmp(p->choices[d], v))
                    return kl_node_error(kl_node_at(ch, (size_t)c), e, KL_EINVAL, "duplicate choice '%s'", v);
            if (!(p->choices[c] = strdup(v))) return kl_err_set(e, KL_ENOMEM, "out of memory");
        }
        p->low = 0;
        p->high = p->nchoices - 1;
    } else {
        const kl_node *lo, *hi;
        if ((rc = kl_spec_require(n, "low", &lo, e)) || (rc = kl_node_double(lo, &p->low, e))) return rc;
        if ((rc = kl_spec_require(n, "high", &hi, e)) || (rc = kl_node_double(hi, &p->high, e))) return rc;
        if ((rc = kl_spec_bool(n, "log", 0, &p->log, e))) return rc;
        if ((rc = kl_spec_double(n, "step", p->kind == KL_TUNE_INT ? 1 : 0, &p->step, e))) return rc;
        if (!isfinite(p->low) || !isfinite(p->high) || !(p->low < p->high))
            return kl_node_error(lo, e, KL_EINVAL, "low (%g) must be below high (%g)", p->low, p->high);
        if (p->log && p->low <= 0) return kl_node_error(lo, e, KL_EINVAL, "a log scale needs low > 0, got %g", p->low);
        if (p->kind == KL_TUNE_INT) {
            if (p->low != floor(p->low) || p->high != floor(p->high))
                return kl_node_error(lo, e, KL_EINVAL, "int bounds must be integers");
            if (p->step < 1 || p->step != floor(p->step))
                return kl_node_error(n, e, KL_EINVAL, "step must be a positive integer, got %g", p->step);
            if (p->log && p->step != 1) return kl_node_error(n, e, KL_EINVAL, "log and step > 1 cannot be combined");
        } else if (p->step < 0 || (p->step > 0 && p->log)) {
            return kl_node_error(n, e, KL_EINVAL, "a float step must be > 0 and cannot be combined with log");
        }
    }
    const kl_node *when = kl_node_get(n, "when");
    if (when) {
        if (kl_node_kind_of(when) != KL_NODE_MAP || kl_node_len(when) != 1)
            return kl_node_error(when, e, KL_EINVAL, "when: expected one condition like {optimizer: sgd}");
        const char *parent = kl_node_key_at(when, 0), *val;
        if ((rc = kl_node_str(kl_node_at(when, 0), &val, e))) return rc;
        int pi = kl_tune_space_find(s, parent);
        if (pi < 0)
            return kl_node_error(when, e, KL_EINVAL, "condition on '%s', which is not an earlier parameter", parent);
        kl_tune_value tmp;
        if (kl_tune_value_parse(&s->p[pi], val, &tmp))
            return kl_node_error(kl_node_at(when, 0), e, KL_EINVAL, "'%s' is never a value of %s, so %s would never be used",
                                 val, parent, name);
        p->cond = pi;
        if (!(p->cond_value = strdup(val))) return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    return KL_OK;
}

int kl_tune_space_parse(const kl_node *map, kl_tune_space **out, kl_err *e) {
    *out = NULL;
    if (kl_node_kind_of(map) != KL_NODE_MAP || kl_node_len(map) == 0)
        return kl_node_error(map, e, KL_EINVAL, "the search space is empty (expected a mapping of parameters)");
    kl_tune_space *s = calloc(1, sizeof *s);
    if (!s) return kl_err_set(e, KL_ENOMEM, "out of memory");
    s->p = calloc(kl_node_len(map), sizeof *s->p);
    if (!s->p) { free(s); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    for (size_t i = 0; i < kl_node_len(map); i++) {
        int rc = parse_param(s, kl_node_key_at(map, i), kl_node_at(map, i), &s->p[s->n], e);
        s->n++;
        if (rc) { kl_tune_space_free(s); return rc; }
    }
    int rc = kl_node_check_used(map, e); /* a key its type ignores, e.g. low/high on a categorical */
    if (rc) { kl_tune_space_free(s); return rc; }
    *out = s;
    return KL_OK;
}

int kl_tune_space_load(const char *path, kl_tune_space **out, kl_err *e) {
    kl_doc *d;
    *out = NULL;
    int rc = kl_doc_load_file(path, &d, e);
    if (rc) return rc;
    rc = kl_tune_space_parse(kl_doc_root(d), out, e);
    kl_doc_free(d);
    return rc;
}
