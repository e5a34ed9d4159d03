/* The prediction log (`keel serve --log-predictions DIR`; docs/monitoring.md,
 * "Prediction log"): every answered inference request (v2 infer and
 * :predict) and every posted feedback label is appended to the Parquet
 * datasets DIR/<model>/predictions/ and DIR/<model>/labels/ (parts in
 * hour=YYYY-MM-DDTHH/ folders, one part never spanning a rotation period;
 * manifest.json by kl_dataset_manifest_write, so keel's readers verify it).
 *
 * Off the request path: a request only copies what it must into a queue
 * entry (the :predict body is handed over, not copied) and appends it to a
 * bounded queue under one short lock; a full queue drops the entry and
 * counts it (keel_prediction_log_dropped_total), never waits. One thread
 * turns entries into columns and writes a part (atomically: kl_pq_writer)
 * when its rotation period ends, when a version's layout changes, at least
 * every flush interval, and when the log closes (the SIGTERM drain). */
#include "serve_int.h"

#include <keel/data.h>
#include <keel/parquet.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==================================================================
 * Layouts and queue entries
 * ================================================================== */

enum { PL_PRED, PL_LABELS, PL_KINDS };
static const char *const kind_dir[PL_KINDS] = {"predictions", "labels"};

/* What a version's rows look like. Owned by the log (versions may be freed
 * while their entries wait): a private features.json copy for the raw inputs. */
struct sv_plog_schema {
    struct sv_plog_schema *next;
    char model[SV_NAME_MAX];
    int64_t version;
    char feature_hash[65]; /* "" without features.json */
    kl_features *feat;
    size_t nraw, raw[64]; /* the inputs logged as columns (not the label; at most 64) */
    size_t width;         /* feature slots */
    size_t nout;          /* the first output's values per row (0: not logged as columns) */
    size_t n_in;
    char in_name[SV_MAX_IO][SV_NAME_MAX];
};

typedef struct {
    sv_dtype dt;
    int64_t rows_dim, per; /* dims[0] and values per row */
    void *data;
} pl_tensor;

typedef struct pl_entry {
    struct pl_entry *next;
    int kind;
    const sv_plog_schema *sc;
    size_t bytes;      /* counted against the queue's byte bound */
    int64_t at_us;     /* wall clock: answered / received */
    double latency_ms; /* arrival to outputs (queue + compute; not the answer's encoding and send) */
    char rid[256];
    int predict;
    int64_t rows, version;
    char *body; /* :predict: the request body (handed over); labels: a copy */
    size_t body_len;
    float *feat; /* rows × width: the feature vectors, or NULL */
    float *outv; /* rows × nout, or NULL */
    int nin;     /* v2 infer: the input tensors (their rows go to `input`) */
    pl_tensor in[SV_MAX_IO];
} pl_entry;

/* The part being gathered of one dataset (a model's predictions or labels). */
typedef struct pl_set {
    struct pl_set *next;
    char model[SV_NAME_MAX];
    int kind;
    char dir[1400];
    kl_dataset_file *files;
    size_t nfiles, capfiles;
    uint64_t seq;
    int broken;               /* the folder could not be opened: its rows are dropped (counted) */
    const sv_plog_schema *sc; /* layout of the gathered rows */
    kl_column **cols;
    size_t ncols;
    int64_t period;   /* rotation period index of the gathered rows */
    int64_t first_ns; /* monotonic ns of the first gathered row */
} pl_set;

struct sv_plog {
    char dir[1024];
    size_t cap, cap_bytes;
    int64_t rotate_us, flush_ns;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pl_entry *head, *tail;
    size_t n, bytes;
    int stop;
    pthread_t thr;
    int have_thr;
    sv_plog_schema *schemas; /* lock */
    pl_set *sets;            /* the writer thread only */
    atomic_uint_fast64_t dropped, rows[PL_KINDS], parts, errors;
};

#define PL_PART_MAX_ROWS  1000000
#define PL_PART_MAX_BYTES (64u << 20)

static void entry_free(pl_entry *x) {
    if (!x) return;
    kl_mem_free(x->body);
    kl_mem_free(x->feat);
    kl_mem_free(x->outv);
    for (int i = 0; i < x->nin; i++) kl_mem_free(x->in[i].data);
    free(x);
}

/* ==================================================================
 * The request side
 * ================================================================== */

/* appends x, or drops it when the queue is full; never waits for the writer */
static void enqueue(sv_plog *p, pl_entry *x) {
    pthread_mutex_lock(&p->lock);
    int full = p->stop || p->n >= p->cap || p->bytes + x->bytes > p->cap_bytes;
    if (!full) {
        if (p->tail) p->tail->next = x;
        else p->head = x;
        p->tail = x;
        p->n++;
        p->bytes += x->bytes;
        if (p->n == p->cap / 2) pthread_cond_signal(&p->cond); /* else the writer looks every 100 ms */
    }
    pthread_mutex_unlock(&p->lock);
    if (full) {
        atomic_fetch_add(&p->dropped, 1);
        entry_free(x);
    }
}

static void *copy_of(const void *src, size_t n) {
    void *d = kl_mem_alloc(n ? n : 1, KL_TAG_REQUEST);
    if (d && n) memcpy(d, src, n);
    return d;
}

/* rows [row0, row0 + rows) of the first output as FP32 (other dtypes: none) */
static float *output_rows(const sv_plog_schema *sc, const sv_tensor *out, int64_t total, int64_t row0, int64_t rows) {
    if (!sc->nout || out->dtype != SV_FP32 || out->rank < 1 || out->dims[0] != total || total <= 0) return NULL;
    if ((size_t)(kl__sv_numel(out) / total) != sc->nout) return NULL;
    return copy_of((const float *)out->data + (size_t)row0 * sc->nout, (size_t)rows * sc->nout * sizeof(float));
}

/* one request's entry: its id, its feature vectors and outputs, its raw
 * record (:predict: the body, taken from r) or input tensors (v2 infer) */
static pl_entry *pred_entry(sv_req *r, const sv_plog_schema *sc, const sv_tensor *out, int64_t total, int64_t row0) {
    pl_entry *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->kind = PL_PRED;
    x->sc = sc;
    x->at_us = kl_time_now_us();
    x->latency_ms = r->t_recv ? (kl_time_mono_ns() - r->t_recv) / 1e6 : NAN;
    snprintf(x->rid, sizeof x->rid, "%s", r->has_id ? r->id : r->rid);
    x->predict = r->predict;
    x->rows = r->rows;
    x->bytes = sizeof *x;
    const sv_tensor *t = &r->in[0];
    if (sc->width && t->dtype == SV_FP32 && t->rank == 2 && (size_t)t->dims[1] == sc->width && t->dims[0] == r->rows) {
        x->feat = copy_of(t->data, t->nbytes);
        x->bytes += t->nbytes;
    }
    x->outv = output_rows(sc, out, total, row0, r->rows);
    x->bytes += x->outv ? (size_t)r->rows * sc->nout * sizeof(float) : 0;
    if (r->predict) {
        x->body = r->body; /* handed over: the request is done with it */
        x->body_len = r->body_len;
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        x->bytes += x->body_len;
    } else {
        for (size_t i = 0; i < r->n_in && i < sc->n_in; i++) {
            const sv_tensor *u = &r->in[i];
            pl_tensor *pt = &x->in[x->nin];
            if (u->dtype == SV_BYTES || u->rank < 1 || u->dims[0] != r->rows || r->rows <= 0) continue;
            pt->dt = u->dtype;
            pt->rows_dim = u->dims[0];
            pt->per = kl__sv_numel(u) / r->rows;
            if (!(pt->data = copy_of(u->data, u->nbytes))) continue;
            x->bytes += u->nbytes;
            x->nin++;
        }
    }
    return x;
}

void kl__sv_plog_batch(sv_plog *p, sv_req *const *rq, int n, const sv_tensor *out) {
    int64_t total = 0, row0 = 0;
    for (int k = 0; k < n; k++) total += rq[k]->rows;
    for (int k = 0; k < n; k++) {
        sv_req *r = rq[k];
        const sv_plog_schema *sc = r->ver->plog;
        if (sc && r->rows > 0) {
            pl_entry *x = pred_entry(r, sc, out, n == 1 ? r->rows : total, n == 1 ? 0 : row0);
            if (x) enqueue(p, x);
            else atomic_fetch_add(&p->dropped, 1);
        }
        row0 += r->rows;
    }
}

void kl__sv_plog_labels(sv_plog *p, const sv_version *v, const char *body, size_t len) {
    pl_entry *x = v->plog ? calloc(1, sizeof *x) : NULL;
    if (x && !(x->body = kl_mem_alloc(len + 1, KL_TAG_REQUEST))) {
        free(x);
        x = NULL;
    }
    if (!x) {
        if (v->plog) atomic_fetch_add(&p->dropped, 1);
        return;
    }
    memcpy(x->body, body, len);
    x->body[len] = 0;
    x->body_len = len;
    x->kind = PL_LABELS;
    x->sc = v->plog;
    x->version = v->version;
    x->at_us = kl_time_now_us();
    x->bytes = sizeof *x + len;
    enqueue(p, x);
}

/* ==================================================================
 * Layouts (at version load)
 * ================================================================== */

/* DIR/<model>/versions/<V>/: the version's profile.json, features.json and
 * meta.json, so that the log explains itself (`keel monitor report`, `keel
 * data join-log --features`) after the repository has moved on */
static void keep_version_files(const sv_plog *p, const sv_version *v) {
    static const char *const names[] = {"profile.json", "features.json", "meta.json"};
    char dir[1400], src[1400], dst[1500];
    snprintf(dir, sizeof dir, "%s/%s/versions/%lld", p->dir, v->model->name, (long long)v->version);
    kl_err e = {0};
    if (kl_mkdir_p(dir, &e)) {
        kl_log(KL_LOG_WARN, "serve", "prediction log: %s", kl_err_what(&e));
        return;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(src, sizeof src, "%s/%s", v->dir, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        char *text = NULL;
        size_t n = 0;
        if (!kl_path_exists(src)) continue;
        if (kl_read_file_max(src, (uint64_t)256 << 20, &text, &n, &e) || kl_write_file_atomic(dst, text, n, &e))
            kl_log(KL_LOG_WARN, "serve", "prediction log: keeping %s: %s", names[i], kl_err_what(&e));
        kl_mem_free(text);
        kl_err_clear(&e);
    }
    /* the thresholds it is monitored with (config.yaml's monitor:), for the report's drift table */
    const kl_monitor_cfg *g = &v->mcfg;
    char js[512];
    int n =
        snprintf(js, sizeof js,
                 "{\"thresholds\": {\"psi\": %.17g, \"js\": %.17g, \"p_value\": %.17g, \"min_samples\": %llu, "
                 "\"min_expected\": %.17g, \"null_delta\": %.17g, \"unknown_ratio\": %.17g, \"oob_ratio\": %.17g}}\n",
                 g->psi, g->js, g->p_value, (unsigned long long)g->min_samples, g->min_expected, g->null_delta,
                 g->unknown_ratio, g->oob_ratio);
    snprintf(dst, sizeof dst, "%s/monitor.json", dir);
    if (n > 0 && (size_t)n < sizeof js && kl_write_file_atomic(dst, js, (size_t)n, &e))
        kl_log(KL_LOG_WARN, "serve", "prediction log: %s", kl_err_what(&e));
}

/* a raw input's column would clash with one of the log's own */
static int clashes(const char *name) {
    static const char *const own[] = {"request_id",   "record",   "served_at",  "model", "model_version",
                                      "feature_hash", "endpoint", "latency_ms", "input", "output"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!strcmp(name, own[i])) return 1;
    return !strncmp(name, "feature.", 8) || !strncmp(name, "output[", 7);
}

/* v's layout, built without the log's lock (it reads features.json) */
static sv_plog_schema *schema_new(const sv_version *v) {
    sv_plog_schema *sc = calloc(1, sizeof *sc);
    if (!sc) return NULL;
    snprintf(sc->model, sizeof sc->model, "%s", v->model->name);
    sc->version = v->version;
    snprintf(sc->feature_hash, sizeof sc->feature_hash, "%s", v->feat ? kl_features_hash(v->feat) : "");
    char fp[1200];
    snprintf(fp, sizeof fp, "%s/features.json", v->dir);
    kl_err e = {0};
    if (v->feat && kl_features_load(fp, &sc->feat, &e))
        kl_log(KL_LOG_WARN, "serve", "prediction log of %s version %lld: %s (no raw inputs or feature columns)",
               sc->model, (long long)sc->version, kl_err_what(&e));
    const char *label = sc->feat ? kl_features_label(sc->feat) : NULL;
    for (size_t i = 0; sc->feat && i < kl_features_num_inputs(sc->feat) && sc->nraw < 64; i++) {
        const char *name = kl_features_input_name(sc->feat, i);
        if (label && !strcmp(label, name)) continue;
        if (clashes(name)) {
            kl_log(KL_LOG_WARN, "serve",
                   "prediction log of %s version %lld: raw input '%s' is not a column of its own "
                   "(a log column has that name; the record is in `input`)",
                   sc->model, (long long)sc->version, name);
            continue;
        }
        sc->raw[sc->nraw++] = i;
    }
    sc->width = sc->feat ? kl_features_width(sc->feat) : 0; /* the slot names come from the copy */
    int64_t per = 1;
    for (int d = 1; v->n_out && d < v->out[0].rank; d++) per = v->out[0].dims[d] > 0 ? per * v->out[0].dims[d] : -1;
    sc->nout = v->n_out && v->out[0].dtype == SV_FP32 && per > 0 && per <= 4096 ? (size_t)per : 0;
    sc->n_in = v->n_in;
    for (size_t i = 0; i < v->n_in; i++) snprintf(sc->in_name[i], SV_NAME_MAX, "%s", v->in[i].name);
    return sc;
}

const sv_plog_schema *kl__sv_plog_schema_of(sv_plog *p, const sv_version *v) {
    const char *fh = v->feat ? kl_features_hash(v->feat) : "";
    sv_plog_schema *made = schema_new(v);
    pthread_mutex_lock(&p->lock);
    sv_plog_schema *sc = p->schemas;
    while (sc && (sc->version != v->version || strcmp(sc->model, v->model->name) || strcmp(sc->feature_hash, fh)))
        sc = sc->next;
    if (!sc && made) { /* a version seen before (a reload) keeps its layout */
        made->next = p->schemas;
        p->schemas = sc = made;
        made = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    if (made) {
        kl_features_free(made->feat);
        free(made);
    } else if (sc) {
        keep_version_files(p, v);
    }
    return sc;
}

/* ==================================================================
 * The writer thread: entries → columns → parts
 * ================================================================== */

/* the prediction columns of layout sc (names as docs/monitoring.md lists them) */
static int pred_columns(const sv_plog_schema *sc, kl_column ***out, size_t *nout, kl_err *e) {
    static const struct {
        const char *name;
        kl_col_type t;
    } fixed[] = {{"request_id", KL_COL_STRING}, {"record", KL_COL_INT32},        {"served_at", KL_COL_TIMESTAMP},
                 {"model", KL_COL_STRING},      {"model_version", KL_COL_INT64}, {"feature_hash", KL_COL_STRING},
                 {"endpoint", KL_COL_STRING},   {"latency_ms", KL_COL_FLOAT64},  {"input", KL_COL_STRING}};
    size_t nf = sizeof fixed / sizeof fixed[0], n = nf + sc->nraw + sc->width + sc->nout;
    kl_column **c = calloc(n, sizeof *c);
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    char name[400];
    for (size_t i = 0; i < n && !rc; i++) {
        kl_col_type t = KL_COL_FLOAT32;
        if (i < nf) {
            snprintf(name, sizeof name, "%s", fixed[i].name);
            t = fixed[i].t;
        } else if (i < nf + sc->nraw) {
            size_t k = sc->raw[i - nf];
            snprintf(name, sizeof name, "%s", kl_features_input_name(sc->feat, k));
            t = kl_features_input_type(sc->feat, k);
        } else if (i < nf + sc->nraw + sc->width) {
            /* the slot names of features.json, as `keel features apply` names its columns */
            snprintf(name, sizeof name, "feature.%s", kl_features_slot_name(sc->feat, i - nf - sc->nraw));
        } else if (sc->nout == 1) snprintf(name, sizeof name, "output");
        else snprintf(name, sizeof name, "output[%zu]", i - nf - sc->nraw - sc->width);
        rc = kl_column_new(name, t, 1, 256, &c[i], e);
    }
    if (rc) {
        kl_features_free_columns(c, n);
        return rc;
    }
    *out = c;
    *nout = n;
    return KL_OK;
}

static int label_columns(kl_column ***out, size_t *nout, kl_err *e) {
    static const struct {
        const char *name;
        kl_col_type t;
    } fixed[] = {{"request_id", KL_COL_STRING},   {"received_at", KL_COL_TIMESTAMP}, {"model", KL_COL_STRING},
                 {"model_version", KL_COL_INT64}, {"label", KL_COL_FLOAT64},         {"label_text", KL_COL_STRING}};
    kl_column **c = calloc(6, sizeof *c);
    if (!c) return kl_err_set(e, KL_ENOMEM, "out of memory");
    int rc = KL_OK;
    for (size_t i = 0; i < 6 && !rc; i++) rc = kl_column_new(fixed[i].name, fixed[i].t, 1, 256, &c[i], e);
    if (rc) {
        kl_features_free_columns(c, 6);
        return rc;
    }
    *out = c;
    *nout = 6;
    return KL_OK;
}

static int push_str(kl_column *c, const char *s) {
    return s && *s ? kl_column_push_str(c, s, strlen(s)) : kl_column_push_null(c);
}

/* ---- the records' own text in a :predict body (the decoder accepted the
 * body: valid JSON; every step is still bounded by its length) ---- */

/* whitespace as the JSON readers skip it (cJSON: every byte up to 32) */
static int is_ws(char c) { return (unsigned char)c <= 32; }

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* the end of the JSON value starting at s[i] */
static size_t skip_value(const char *s, size_t n, size_t i) {
    int depth = 0;
    while (i < n) {
        char ch = s[i];
        if (ch == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
            i++;
        } else if (ch == '{' || ch == '[') {
            depth++;
            i++;
        } else if (ch == '}' || ch == ']') {
            if (!depth) return i;
            depth--;
            i++;
        } else if (!depth && (ch == ',' || is_ws(ch))) {
            return i;
        } else {
            i++;
        }
        if (!depth && (ch == '"' || ch == '}' || ch == ']')) return i < n ? i : n;
    }
    return n;
}

/* the text spans of the elements of the top-level "instances" array: 1 when
 * there are exactly rows of them (else the records are printed from the tree) */
int kl__sv_plog_record_spans(const char *s, size_t n, int64_t rows, size_t *off, size_t *len) {
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{') return 0;
    for (i++;;) {
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != '"') return 0;
        size_t k0 = i + 1, k1 = skip_value(s, n, i);
        i = skip_ws(s, n, k1);
        if (i >= n || s[i] != ':') return 0;
        i = skip_ws(s, n, i + 1);
        if (k1 - k0 == 10 && !memcmp(s + k0, "instances\"", 10) && i < n && s[i] == '[') {
            int64_t m = 0;
            for (i++;;) {
                i = skip_ws(s, n, i);
                if (i >= n) return 0;
                if (s[i] == ']') return m == rows;
                if (m >= rows) return 0;
                size_t e = skip_value(s, n, i);
                off[m] = i;
                len[m++] = e - i;
                i = skip_ws(s, n, e);
                if (i < n && s[i] == ',') i++;
            }
        }
        i = skip_ws(s, n, skip_value(s, n, i));
        if (i >= n || s[i] != ',') return 0;
        i++;
    }
}

/* the `input` column of one row: the :predict record's text, or {"input": row} of every v2 input */
static int push_input(kl_column *c, const pl_entry *x, const cJSON *rec, int64_t row, const size_t *off,
                      const size_t *len, kl_buf *b) {
    if (x->predict && off) return kl_column_push_str(c, x->body + off[row], len[row]);
    if (x->predict) {
        char *t = rec ? cJSON_PrintUnformatted(rec) : NULL;
        int rc = t ? kl_column_push_str(c, t, strlen(t)) : kl_column_push_null(c);
        cJSON_free(t);
        return rc;
    }
    kl_buf_reset(b);
    kl_buf_puts(b, "{");
    for (int i = 0; i < x->nin; i++) {
        const pl_tensor *t = &x->in[i];
        size_t es = kl__sv_dtype_size(t->dt);
        if (i) kl_buf_puts(b, ",");
        kl_buf_json_str(b, x->sc->in_name[i]);
        kl_buf_puts(b, ":");
        kl__sv_json_data(b, t->dt, (const char *)t->data + (size_t)(row * t->per) * es, t->per);
    }
    kl_buf_puts(b, "}");
    return b->failed ? KL_ENOMEM : kl_column_push_str(c, b->data, b->len);
}

static int pred_rows(pl_set *s, const pl_entry *x, kl_err *e) {
    const sv_plog_schema *sc = x->sc;
    const cJSON *inst = NULL;
    kl_json_doc *doc = NULL; /* the fast reader (one arena), as the decoder read it */
    if (x->predict && x->body && !kl_json_doc_parse(x->body, x->body_len, "request body", KL_JSON_KEEP_NUL, &doc, NULL))
        inst = cJSON_GetObjectItemCaseSensitive(kl_json_doc_root(doc), "instances");
    const cJSON *rec = inst ? inst->child : NULL;
    size_t *off = NULL, *len = NULL;
    if (inst && (off = malloc((size_t)x->rows * 2 * sizeof *off))) {
        len = off + x->rows;
        if (!kl__sv_plog_record_spans(x->body, x->body_len, x->rows, off, len)) {
            free(off);
            off = len = NULL;
        }
    }
    kl_column **c = s->cols;
    kl_buf b;
    kl_buf_init(&b);
    int rc = KL_OK;
    for (int64_t r = 0; r < x->rows && !rc; r++, rec = rec ? rec->next : NULL) {
        size_t k = 9;
        rc = kl_column_push_str(c[0], x->rid, strlen(x->rid)) || kl_column_push_i64(c[1], r) ||
            kl_column_push_i64(c[2], x->at_us) || push_str(c[3], sc->model) || kl_column_push_i64(c[4], sc->version) ||
            push_str(c[5], sc->feature_hash) || push_str(c[6], x->predict ? "predict" : "infer") ||
            (isfinite(x->latency_ms) ? kl_column_push_f64(c[7], x->latency_ms) : kl_column_push_null(c[7])) ||
            push_input(c[8], x, rec, r, off, len, &b);
        for (size_t i = 0; i < sc->nraw && !rc; i++, k++)
            rc = rec && cJSON_IsObject(rec) ? kl_features_input_append(sc->feat, sc->raw[i], rec, c[k]) == KL_ENOMEM
                                            : kl_column_push_null(c[k]);
        for (size_t i = 0; i < sc->width && !rc; i++, k++)
            rc = x->feat ? kl_column_push_f64(c[k], x->feat[(size_t)r * sc->width + i]) : kl_column_push_null(c[k]);
        for (size_t i = 0; i < sc->nout && !rc; i++, k++)
            rc = x->outv ? kl_column_push_f64(c[k], x->outv[(size_t)r * sc->nout + i]) : kl_column_push_null(c[k]);
    }
    kl_buf_free(&b);
    free(off);
    kl_json_doc_free(doc);
    return rc ? kl_err_set(e, KL_ENOMEM, "prediction log: out of memory") : KL_OK;
}

/* labels as POST .../feedback takes them: one {"id", "label"}, a list, or {"feedback": [...]} */
static int label_rows(pl_set *s, const pl_entry *x, kl_err *e) {
    void *doc = NULL;
    int rc = kl_json_parse_opts(x->body, x->body_len, "feedback body", 0, &doc, e);
    if (rc) return rc;
    const cJSON *root = doc, *list = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "feedback");
    const cJSON *it = cJSON_IsArray(list) ? list->child : root;
    kl_column **c = s->cols;
    for (; it && !rc; it = list ? it->next : NULL) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"),
                    *lab = cJSON_GetObjectItemCaseSensitive(it, "label");
        if (!cJSON_IsString(id) || !*id->valuestring || !lab || cJSON_IsNull(lab)) continue;
        int num = cJSON_IsNumber(lab) || cJSON_IsBool(lab);
        if (!num && !cJSON_IsString(lab)) continue;
        rc = push_str(c[0], id->valuestring) || kl_column_push_i64(c[1], x->at_us) || push_str(c[2], x->sc->model) ||
            kl_column_push_i64(c[3], x->version) ||
            (num ? kl_column_push_f64(c[4], cJSON_IsNumber(lab) ? lab->valuedouble : cJSON_IsTrue(lab))
                 : kl_column_push_null(c[4])) ||
            (num ? kl_column_push_null(c[5]) : kl_column_push_str(c[5], lab->valuestring, strlen(lab->valuestring)));
        if (!list) break;
    }
    cJSON_Delete(doc);
    return rc ? kl_err_set(e, KL_ENOMEM, "prediction log: out of memory") : KL_OK;
}

static size_t set_bytes(const pl_set *s) {
    size_t b = 0;
    for (size_t i = 0; i < s->ncols; i++) b += s->cols[i]->len * 8 + s->cols[i]->data_len;
    return b;
}

/* Part file name: hour=YYYY-MM-DDTHH/part-YYYYMMDDTHHMMSS-N.parquet (the period's start, UTC) */
static void part_name(const sv_plog *p, pl_set *s, char *rel, size_t n) {
    time_t t = (time_t)(s->period * p->rotate_us / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char hour[40], stamp[40], path[3000];
    strftime(hour, sizeof hour, "hour=%Y-%m-%dT%H", &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    do {
        snprintf(rel, n, "%s/part-%s-%06llu.parquet", hour, stamp, (unsigned long long)s->seq++);
        snprintf(path, sizeof path, "%s/%s", s->dir, rel);
    } while (kl_path_exists(path));
}

/* writes the gathered rows as a part and lists it in the manifest */
static int write_part(sv_plog *p, pl_set *s, kl_err *e) {
    size_t rows = s->ncols ? s->cols[0]->len : 0;
    int rc = KL_OK;
    char rel[600], path[2100], head[400];
    kl_pq_writer *w = NULL;
    if (!rows) goto done;
    part_name(p, s, rel, sizeof rel);
    snprintf(path, sizeof path, "%s/%s", s->dir, rel);
    *strrchr(path, '/') = 0;
    if ((rc = kl_mkdir_p(path, e))) goto done;
    snprintf(path, sizeof path, "%s/%s", s->dir, rel);
    kl_pq_write_opts wo;
    kl_pq_write_opts_default(&wo);
    if ((rc = kl_pq_writer_open(path, s->cols, s->ncols, &wo, &w, e))) goto done;
    if (s->kind == PL_PRED && s->sc->feature_hash[0] &&
        (rc = kl_pq_writer_set_kv(w, "keel.feature_hash", s->sc->feature_hash, e)))
        goto done;
    if ((rc = kl_pq_writer_write(w, s->cols, s->ncols, e))) goto done;
    rc = kl_pq_writer_close(w, NULL, e);
    w = NULL;
    if (rc) goto done;
    if (s->nfiles == s->capfiles) {
        size_t nc = s->capfiles ? 2 * s->capfiles : 64;
        kl_dataset_file *nf = realloc(s->files, nc * sizeof *nf);
        if (!nf) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            goto done;
        }
        s->files = nf;
        s->capfiles = nc;
    }
    if ((rc = kl_dataset_file_stat(s->dir, rel, rows, &s->files[s->nfiles], e))) goto done;
    s->nfiles++;
    kl_buf hb;
    kl_buf_init(&hb);
    kl_buf_puts(&hb, "\"model\": ");
    kl_buf_json_str(&hb, s->model);
    kl_buf_printf(&hb, ",\n  \"kind\": \"%s\"", kind_dir[s->kind]);
    snprintf(head, sizeof head, "%s", hb.data ? hb.data : "");
    kl_buf_free(&hb);
    rc = kl_dataset_manifest_write(s->dir, "keel-prediction-log-1", head, s->files, s->nfiles, e);
    if (!rc) {
        atomic_fetch_add(&p->parts, 1);
        atomic_fetch_add(&p->rows[s->kind], rows);
    }
done:
    kl_pq_writer_abort(w);
    kl_features_free_columns(s->cols, s->ncols);
    s->cols = NULL;
    s->ncols = 0;
    return rc;
}

static void part_out(sv_plog *p, pl_set *s) {
    kl_err e = {0};
    size_t rows = s->ncols ? s->cols[0]->len : 0;
    if (write_part(p, s, &e)) {
        atomic_fetch_add(&p->errors, 1);
        kl_log(KL_LOG_ERROR, "serve", "prediction log %s: %zu row(s) lost: %s", s->dir, rows, kl_err_what(&e));
    }
}

/* The dataset folder of model/kind: its listed parts, and parts a crash
 * left unlisted (written whole: the writer renames a finished file) added. */
static int set_open(sv_plog *p, pl_set *s, kl_err *e) {
    snprintf(s->dir, sizeof s->dir, "%s/%s/%s", p->dir, s->model, kind_dir[s->kind]);
    int rc = kl_mkdir_p(s->dir, e);
    if (!rc) rc = kl_dataset_manifest_files(s->dir, &s->files, &s->nfiles, e);
    if (rc) return rc;
    s->capfiles = s->nfiles;
    char **found = NULL;
    size_t nfound = 0;
    kl_err le = {0};
    if (kl_dataset_resolve_verify(s->dir, KL_VERIFY_NONE, &found, &nfound, NULL, &le)) nfound = 0;
    size_t dl = strlen(s->dir) + 1;
    for (size_t i = 0; i < nfound && !rc; i++) {
        const char *rel = found[i] + dl;
        size_t k = 0;
        while (k < s->nfiles && strcmp(s->files[k].path, rel)) k++;
        if (k < s->nfiles) continue;
        kl_pq_reader *r = NULL;
        if (kl_pq_open(found[i], &r, &le)) continue; /* not a whole Parquet file: left alone, not listed */
        uint64_t rows = kl_pq_num_rows(r);
        kl_pq_close(r);
        kl_dataset_file *nf = realloc(s->files, (s->nfiles + 1) * sizeof *nf);
        if (!nf) {
            rc = kl_err_set(e, KL_ENOMEM, "out of memory");
            break;
        }
        s->files = nf;
        s->capfiles = s->nfiles + 1;
        if (!kl_dataset_file_stat(s->dir, rel, rows, &s->files[s->nfiles], &le)) s->nfiles++;
    }
    for (size_t i = 0; i < nfound; i++) free(found[i]);
    free(found);
    s->seq = s->nfiles;
    return rc;
}

static pl_set *set_of(sv_plog *p, const char *model, int kind) {
    pl_set *s = p->sets;
    while (s && (s->kind != kind || strcmp(s->model, model))) s = s->next;
    if (s) return s;
    if (!(s = calloc(1, sizeof *s))) return NULL;
    snprintf(s->model, sizeof s->model, "%s", model);
    s->kind = kind;
    kl_err e = {0};
    if (set_open(p, s, &e)) {
        s->broken = 1;
        kl_log(KL_LOG_ERROR, "serve", "prediction log of model %s: %s (its %s are not logged)", model, kl_err_what(&e),
               kind_dir[kind]);
    }
    s->next = p->sets;
    p->sets = s;
    return s;
}

static void take(sv_plog *p, pl_entry *x) {
    pl_set *s = set_of(p, x->sc->model, x->kind);
    if (!s || s->broken) {
        atomic_fetch_add(&p->errors, 1);
        return;
    }
    int64_t period = x->at_us / p->rotate_us;
    if (s->cols && (period != s->period || (x->kind == PL_PRED && s->sc != x->sc))) part_out(p, s);
    kl_err e = {0};
    int rc = KL_OK;
    if (!s->cols) {
        rc = x->kind == PL_PRED ? pred_columns(x->sc, &s->cols, &s->ncols, &e) : label_columns(&s->cols, &s->ncols, &e);
        s->sc = x->sc;
        s->period = period;
        s->first_ns = kl_time_mono_ns();
    }
    if (!rc) rc = x->kind == PL_PRED ? pred_rows(s, x, &e) : label_rows(s, x, &e);
    if (rc == KL_ENOMEM) { /* a row half pushed: the gathered rows are lost (logged, counted) */
        kl_features_free_columns(s->cols, s->ncols);
        s->cols = NULL;
        s->ncols = 0;
    }
    if (rc) {
        atomic_fetch_add(&p->errors, 1);
        kl_log(KL_LOG_WARN, "serve", "prediction log of model %s: request %s not logged: %s", s->model, x->rid,
               kl_err_what(&e));
        return;
    }
    if (s->cols[0]->len >= PL_PART_MAX_ROWS || set_bytes(s) >= PL_PART_MAX_BYTES) part_out(p, s);
}

/* parts whose flush interval or rotation period is over (all of them: at close) */
static void flush_due(sv_plog *p, int all) {
    int64_t now = kl_time_mono_ns(), period = kl_time_now_us() / p->rotate_us;
    for (pl_set *s = p->sets; s; s = s->next)
        if (s->cols && (all || now - s->first_ns >= p->flush_ns || s->period != period)) part_out(p, s);
}

static void *writer_main(void *arg) {
    sv_plog *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (!p->head && !p->stop) {
            struct timespec ts;
            int64_t w = kl_time_mono_ns() + 100000000LL;
            ts.tv_sec = (time_t)(w / 1000000000);
            ts.tv_nsec = (long)(w % 1000000000);
            pthread_cond_timedwait(&p->cond, &p->lock, &ts);
        }
        pl_entry *list = p->head;
        int stop = p->stop;
        p->head = p->tail = NULL;
        p->n = p->bytes = 0;
        pthread_mutex_unlock(&p->lock);
        while (list) {
            pl_entry *x = list;
            list = x->next;
            take(p, x);
            entry_free(x);
        }
        flush_due(p, stop);
        pthread_mutex_lock(&p->lock);
        if (stop && !p->head) break;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ==================================================================
 * Open, close, counters
 * ================================================================== */

int kl__sv_plog_open(const kl_serve_opts *o, sv_plog **out, kl_err *e) {
    *out = NULL;
    sv_plog *p = calloc(1, sizeof *p);
    if (!p) return kl_err_set(e, KL_ENOMEM, "out of memory");
    snprintf(p->dir, sizeof p->dir, "%s", o->log_predictions);
    p->cap = o->log_queue > 0 ? (size_t)o->log_queue : 65536;
    p->cap_bytes = o->log_queue_bytes > 0 ? (size_t)o->log_queue_bytes : (size_t)256 << 20;
    p->rotate_us = (int64_t)((o->log_rotate_s > 0 ? o->log_rotate_s : 3600) * 1e6);
    p->flush_ns = (int64_t)((o->log_flush_s > 0 ? o->log_flush_s : 60) * 1e9);
    if (p->rotate_us < 1000000) p->rotate_us = 1000000;
    int rc = kl_mkdir_p(p->dir, e);
    if (rc) {
        kl_err_prefix(e, "--log-predictions");
        free(p);
        return rc;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&p->thr, NULL, writer_main, p)) {
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
        return kl_err_set(e, KL_ENOMEM, "prediction log: cannot start its thread");
    }
    p->have_thr = 1;
    kl_log(KL_LOG_INFO, "serve",
           "prediction log in %s (queue %zu entries / %zu MiB, parts every %.0f s, rotated every %.0f s)", p->dir,
           p->cap, p->cap_bytes >> 20, p->flush_ns / 1e9, p->rotate_us / 1e6);
    *out = p;
    return KL_OK;
}

void kl__sv_plog_close(sv_plog *p) {
    if (!p) return;
    if (p->have_thr) {
        pthread_mutex_lock(&p->lock);
        p->stop = 1;
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->thr, NULL);
    }
    kl_log(KL_LOG_INFO, "serve", "prediction log closed: %llu prediction row(s), %llu label row(s), %llu dropped",
           (unsigned long long)atomic_load(&p->rows[PL_PRED]), (unsigned long long)atomic_load(&p->rows[PL_LABELS]),
           (unsigned long long)atomic_load(&p->dropped));
    for (pl_set *s = p->sets, *n; s; s = n) {
        n = s->next;
        kl_features_free_columns(s->cols, s->ncols);
        kl_dataset_files_free(s->files, s->nfiles);
        free(s);
    }
    for (sv_plog_schema *sc = p->schemas, *n; sc; sc = n) {
        n = sc->next;
        kl_features_free(sc->feat);
        free(sc);
    }
    for (pl_entry *x = p->head, *n; x; x = n) {
        n = x->next;
        entry_free(x);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

void kl__sv_plog_metrics(const sv_plog *p, kl_buf *b) {
    kl__sv_metrics_head(b, "keel_prediction_log_dropped_total", "counter",
                    "Served requests and label posts the prediction log dropped (its queue was full)");
    kl_buf_printf(b, "keel_prediction_log_dropped_total %llu\n", (unsigned long long)atomic_load(&p->dropped));
    kl__sv_metrics_head(b, "keel_prediction_log_rows_total", "counter", "Rows the prediction log wrote, by dataset");
    for (int k = 0; k < PL_KINDS; k++)
        kl_buf_printf(b, "keel_prediction_log_rows_total{dataset=\"%s\"} %llu\n", kind_dir[k],
                      (unsigned long long)atomic_load(&p->rows[k]));
    kl__sv_metrics_head(b, "keel_prediction_log_parts_total", "counter", "Parquet parts the prediction log wrote");
    kl_buf_printf(b, "keel_prediction_log_parts_total %llu\n", (unsigned long long)atomic_load(&p->parts));
    kl__sv_metrics_head(b, "keel_prediction_log_errors_total", "counter",
                    "Rows or parts the prediction log could not write (each one logged)");
    kl_buf_printf(b, "keel_prediction_log_errors_total %llu\n", (unsigned long long)atomic_load(&p->errors));
}
