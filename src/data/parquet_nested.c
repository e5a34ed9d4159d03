/* Parquet reader, part 3: nested columns. The leaves of a top-level group
 * (or repeated field) are decoded with their repetition and definition
 * levels (parquet_read.c); this file assembles them into one JSON value per
 * record (Dremel record assembly): STRUCT → object, LIST (3-level, and the
 * legacy 2-level forms by the backward-compatibility rules of the Parquet
 * spec) → array, MAP → object keyed by the key's text, a bare repeated field
 * → array. Malformed levels give KL_EPARSE, never a read out of bounds:
 * every emission consumes at least one level entry of its first leaf, and
 * recursion is bounded by the schema depth (64). */
#include <stdlib.h>
#include <string.h>

#include "data/parquet_read_int.h"

typedef struct {
    const pq_reader_t *R;
    pq_levels *lv;
    size_t leaf0;
    size_t *pos;     /* cursor per leaf */
    kl_buf *b;
    int bad;
} asm_t;

static void emit_value(asm_t *A, uint32_t k);

static int first_def(asm_t *A, uint32_t k) {
    size_t l = (size_t)A->R->nodes[k].first_leaf - A->leaf0;
    if (A->pos[l] >= A->lv[l].n) { A->bad = 1; return -1; }
    return A->lv[l].def[A->pos[l]];
}

/* One level entry of every leaf of the subtree (a null or empty value there). */
static void consume(asm_t *A, uint32_t k) {
    const pq_node *N = &A->R->nodes[k];
    for (int j = 0; j < N->nleaves; j++) {
        size_t l = (size_t)N->first_leaf + (size_t)j - A->leaf0;
        if (A->pos[l] < A->lv[l].n) A->pos[l]++;
        else A->bad = 1;
    }
}

static uint32_t next_child(const pq_reader_t *R, uint32_t c) { return R->nodes[c].end; }

/* Repeated node r: its instances as an array (elem: the node each instance
 * is, r itself or its only child), or as an object when map (r: key_value). */
static void emit_kv(asm_t *A, uint32_t kv);
static void emit_repeated(asm_t *A, uint32_t r, uint32_t elem, int map) {
    const pq_node *N = &A->R->nodes[r];
    int d = first_def(A, r);
    if (d < 0) return;
    if (d < N->def) { kl_buf_puts(A->b, map ? "{}" : "[]"); consume(A, r); return; }
    kl_buf_puts(A->b, map ? "{" : "[");
    size_t l = (size_t)N->first_leaf - A->leaf0;
    for (int i = 0; !A->bad; i++) {
        if (i) kl_buf_puts(A->b, ",");
        if (map) emit_kv(A, r);
        else emit_value(A, elem);
        if (A->pos[l] >= A->lv[l].n || A->lv[l].rep[A->pos[l]] < N->rep) break;
    }
    kl_buf_puts(A->b, map ? "}" : "]");
}

static void emit_child(asm_t *A, uint32_t c) {
    if (A->R->schema[c].rep == REP_REPEATED) emit_repeated(A, c, c, 0);
    else emit_value(A, c);
}

static void emit_kv(asm_t *A, uint32_t kv) {
    const pq_reader_t *R = A->R;
    uint32_t key = kv + 1, end = R->nodes[kv].end;
    kl_buf *out = A->b, t;
    kl_buf_init(&t);
    A->b = &t;
    emit_value(A, key);
    A->b = out;
    if (t.len && t.data[0] == '"') kl_buf_append(out, t.data, t.len);
    else kl_buf_json_strn(out, t.data ? t.data : "", t.len);
    kl_buf_free(&t);
    kl_buf_puts(out, ":");
    uint32_t v = next_child(R, key);
    if (v < end) emit_child(A, v);
    else kl_buf_puts(out, "null");
    for (uint32_t c = v < end ? next_child(R, v) : end; c < end && !A->bad; c = next_child(R, c)) {
        kl_buf skip; /* further fields of a key_value group: consumed, not printed */
        kl_buf_init(&skip);
        A->b = &skip;
        emit_child(A, c);
        A->b = out;
        kl_buf_free(&skip);
    }
}

static int is_list(const pq_schema_el *el) { return el->group_kind == G_LIST || el->conv == CT_LIST; }
static int is_map(const pq_schema_el *el) {
    return el->group_kind == G_MAP || el->conv == CT_MAP || el->conv == CT_MAP_KEY_VALUE;
}

/* The element of a LIST group k whose only child is the repeated r. */
static uint32_t list_element(const pq_reader_t *R, uint32_t k, uint32_t r) {
    const pq_schema_el *g = &R->schema[k], *re = &R->schema[r];
    if (R->nodes[r].leaf >= 0) return r;          /* repeated primitive: 2-level */
    if (re->num_children != 1) return r;          /* repeated group of several fields: 2-level struct */
    if ((re->name_len == 5 && !memcmp(re->name, "array", 5)) ||
        (re->name_len == g->name_len + 6 && !memcmp(re->name, g->name, g->name_len) &&
         !memcmp(re->name + g->name_len, "_tuple", 6)))
        return r;                                 /* legacy names: the group is the element */
    return r + 1;                                 /* 3-level: the only child */
}

static void emit_value(asm_t *A, uint32_t k) {
    const pq_reader_t *R = A->R;
    const pq_schema_el *el = &R->schema[k];
    const pq_node *N = &R->nodes[k];
    if (el->rep == REP_OPTIONAL) {
        int d = first_def(A, k);
        if (d < 0) return;
        if (d < N->def) { kl_buf_puts(A->b, "null"); consume(A, k); return; }
    }
    if (N->leaf >= 0) {
        size_t l = (size_t)N->leaf - A->leaf0;
        if (A->pos[l] >= A->lv[l].n) { A->bad = 1; return; }
        kl_pq_format_value(A->b, A->lv[l].vals, A->pos[l], &R->leaves[N->leaf].info, 1);
        A->pos[l]++;
        return;
    }
    uint32_t c = k + 1;
    int one = el->num_children == 1 && R->schema[c].rep == REP_REPEATED;
    if (one && is_list(el)) { emit_repeated(A, c, list_element(R, k, c), 0); return; }
    if (one && is_map(el) && R->nodes[c].leaf < 0) { emit_repeated(A, c, c, 1); return; }
    kl_buf_puts(A->b, "{");
    for (int i = 0; c < N->end && !A->bad; c = next_child(R, c), i++) {
        if (i) kl_buf_puts(A->b, ",");
        kl_buf_json_strn(A->b, (const char *)R->schema[c].name, R->schema[c].name_len);
        kl_buf_puts(A->b, ":");
        emit_child(A, c);
    }
    kl_buf_puts(A->b, "}");
}

void kl__pq_levels_free(pq_levels *l) {
    kl_column_free(l->vals);
    kl_mem_free(l->def);
    kl_mem_free(l->rep);
    memset(l, 0, sizeof *l);
}

int kl__pq_assemble(const pq_reader_t *R, size_t f, pq_levels *lv, size_t rows, kl_column *out, kl_err *e) {
    const pq_field *F = &R->fields[f];
    size_t *pos = calloc(F->nleaf + 1, sizeof *pos);
    if (!pos) return kl_err_set(e, KL_ENOMEM, "out of memory");
    kl_buf b;
    kl_buf_init(&b);
    asm_t A = {R, lv, F->leaf0, pos, &b, 0};
    int rc = KL_OK;
    for (size_t r = 0; r < rows && !rc; r++) {
        for (size_t l = 0; l < F->nleaf; l++)
            if (pos[l] >= lv[l].n || lv[l].rep[pos[l]] != 0) {
                rc =
                    kl_err_set(e, KL_EPARSE, "%s: column %s: the levels of %s hold %zu records, the row group %zu rows",
                               R->name, F->name, R->leaves[F->leaf0 + l].name, r, rows);
                break;
            }
        if (rc) break;
        kl_buf_reset(&b);
        emit_child(&A, F->el);
        if (A.bad) {
            rc = kl_err_set(e, KL_EPARSE, "%s: column %s: inconsistent repetition/definition levels in record %zu",
                            R->name, F->name, r);
            break;
        }
        if (b.failed) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
        int null = b.len == 4 && !memcmp(b.data, "null", 4) && F->info.nullable;
        if ((null ? kl_column_push_null(out) : kl_column_push_str(out, b.data ? b.data : "", b.len)))
            rc = kl_err_set(e, KL_ENOMEM, "out of memory reading column %s", F->name);
    }
    for (size_t l = 0; l < F->nleaf && !rc; l++)
        if (pos[l] != lv[l].n)
            rc = kl_err_set(e, KL_EPARSE, "%s: column %s: %s has %zu level entries beyond the row group's %zu records",
                            R->name, F->name, R->leaves[F->leaf0 + l].name, lv[l].n - pos[l], rows);
    kl_buf_free(&b);
    free(pos);
    return rc;
}
