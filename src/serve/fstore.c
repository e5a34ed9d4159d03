/* Serving's side of the online feature store: which store a version's
 * window features read (--feature-store URL shared by every replica, else
 * the version's own features.db), config.yaml's on_store_error, the store
 * check of the readiness probe, and POST /v2/models/M/events (raw records
 * appended to the store without a prediction). The store itself is
 * src/feature's (kl_fstore); serve reaches Redis only through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve/serve_int.h"

/* The store of version v (features loaded): the server's --feature-store
 * when the features have windows, else DIR/features.db when present. A
 * server store that does not answer yet is opened all the same (readiness
 * says so; calls reconnect). */
int kl__sv_fstore_open(kl_server *s, sv_version *v, const sv_model_cfg *cfg, kl_err *e) {
    char p[1400];
    int rc = KL_OK;
    if (s->o.feature_store && kl_features_first_window(v->feat)) {
        rc = kl_fstore_open_lazy(v->feat, s->o.feature_store, &v->fstore, e);
    } else {
        snprintf(p, sizeof p, "%s/features.db", v->dir);
        if (kl_path_exists(p)) rc = kl_fstore_open(v->feat, p, &v->fstore, e);
    }
    if (!rc && v->fstore) kl_fstore_set_on_error(v->fstore, cfg->on_store_error_empty);
    return rc;
}

/* Readiness: every served version's store answers. The stores are pinged
 * outside the server lock (each ping is bounded by the store's timeouts). */
int kl__sv_fstore_ready(kl_server *s, char *reason, size_t n) {
    sv_version *vs[64];
    int nv = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->nmodels; i++)
        for (int j = 0; j < s->models[i]->nver && nv < 64; j++) {
            sv_version *v = s->models[i]->ver[j];
            if (v->fstore && kl_fstore_is_url(s->o.feature_store)) {
                kl__sv_version_ref(v);
                vs[nv++] = v;
            }
        }
    pthread_mutex_unlock(&s->lock);
    int ok = 1;
    for (int i = 0; i < nv; i++) {
        kl_err e = {0};
        if (ok && kl_fstore_ping(vs[i]->fstore, &e)) {
            ok = 0;
            if (reason)
                snprintf(reason, n, "model %s version %lld: feature store: %s", vs[i]->model->name,
                         (long long)vs[i]->version, kl_err_what(&e));
        }
        kl__sv_version_unref(vs[i]);
    }
    return ok;
}

/* The records of an events body: one JSON object, a list of them, or
 * {"instances": [...]} as :predict takes. */
static const cJSON *event_list(const cJSON *root, int *n, int *single) {
    *single = 0;
    if (cJSON_IsArray(root)) {
        *n = cJSON_GetArraySize(root);
        return root;
    }
    const cJSON *inst = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "instances") : NULL;
    if (cJSON_IsArray(inst)) {
        *n = cJSON_GetArraySize(inst);
        return inst;
    }
    *single = 1;
    *n = cJSON_IsObject(root) ? 1 : 0;
    return root;
}

/* Appends the records of body to v's store: every record is checked first
 * (a bad one appends nothing and is named: records[i]), then each is
 * appended in order (each record atomically). */
int kl__sv_events_append(sv_version *v, const char *body, size_t len, int *appended, kl_err *e) {
    *appended = 0;
    if (!v->feat || !v->fstore || !kl_features_first_window(v->feat))
        return kl_err_set(
            e, KL_EUNSUPPORTED,
            "model '%s' version %lld has no window features (or no online store): events have nowhere to go",
            v->model->name, (long long)v->version);
    kl_json_doc *d = NULL;
    int rc = kl_json_doc_parse(body, len, "request body", KL_JSON_KEEP_NUL, &d, e);
    if (rc) return rc;
    int n, single;
    const cJSON *list = event_list(kl_json_doc_root(d), &n, &single);
    if (n <= 0) {
        kl_json_doc_free(d);
        return kl_err_set(e, KL_EINVAL, "expected a record (JSON object), a list of records or {\"instances\": [...]}");
    }
    const cJSON *rec;
    int i = 0;
    if (single) rc = kl_fstore_check_record(v->fstore, list, e);
    else cJSON_ArrayForEach(rec, list) {
            if ((rc = kl_fstore_check_record(v->fstore, rec, e))) {
                kl_err_prefix(e, "records[%d]", i);
                break;
            }
            i++;
        }
    if (!rc && single) {
        if (!(rc = kl_fstore_append_record(v->fstore, list, e))) *appended = 1;
    } else if (!rc) {
        i = 0;
        cJSON_ArrayForEach(rec, list) {
            if ((rc = kl_fstore_append_record(v->fstore, rec, e))) {
                kl_err_prefix(e, "records[%d] (records before it were appended)", i);
                break;
            }
            (*appended)++;
            i++;
        }
    }
    kl_json_doc_free(d);
    return rc;
}

/* Errors of the version's store for /metrics (versions swapped out keep
 * counting in the model's total). */
uint64_t kl__sv_fstore_errors(const sv_model *m) {
    uint64_t n = m->fstore_errors_gone;
    for (int j = 0; j < m->nver; j++)
        if (m->ver[j]->fstore) n += kl_fstore_errors(m->ver[j]->fstore);
    return n;
}
