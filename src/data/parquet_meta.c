/* Parquet reader, part 1: mapping the file, parsing and validating the
 * Thrift footer (schema tree, row groups, column chunks, statistics), the
 * mapping of Parquet types onto kl_col_type, and the metadata accessors. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/parquet_read_int.h"

static const char *ptype_name(int t) {
    static const char *n[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? n[t] : "?";
}

/* ==================================================================
 * Thrift structs of the footer
 * ================================================================== */

static void parse_stats(kl__tr *r, pq_stats *s) {
    int16_t last = 0, id; int t;
    const uint8_t *mn = NULL, *mx = NULL, *omn = NULL, *omx = NULL;
    uint32_t nmn = 0, nmx = 0, nomn = 0, nomx = 0;
    while (kl__tr_field(r, &last, &t, &id)) {
        if (id == 1 && t == TT_BINARY) kl__tr_bin(r, &omx, &nomx);
        else if (id == 2 && t == TT_BINARY) kl__tr_bin(r, &omn, &nomn);
        else if (id == 3 && t == TT_I64) {
            s->null_count = kl__tr_int(r);
            s->has_null_count = 1;
        } else if (id == 5 && t == TT_BINARY) kl__tr_bin(r, &mx, &nmx);
        else if (id == 6 && t == TT_BINARY) kl__tr_bin(r, &mn, &nmn);
        else kl__tr_skip(r, t);
    }
    if (mn && mx) { s->min = mn; s->nmin = nmn; s->max = mx; s->nmax = nmx; s->has_minmax = 1; }
    else if (omn && omx) { s->min = omn; s->nmin = nomn; s->max = omx; s->nmax = nomx; s->has_minmax = 1; s->legacy = 1; }
}

static void parse_logical(kl__tr *r, pq_schema_el *el) {
    int16_t last = 0, id; int t;
    while (kl__tr_field(r, &last, &t, &id)) {
        if (t != TT_STRUCT) {
            kl__tr_skip(r, t);
            continue;
        }
        /* known: STRING ENUM DECIMAL DATE TIME TIMESTAMP INTEGER JSON UUID FLOAT16;
         * others (MAP, LIST, UNKNOWN, BSON, future types) fall back to the converted type */
        if (id == 1 || id == 4 || id == 5 || id == 6 || id == 7 || id == 8 || id == 10 || id == 12 || id == 14 || id == 15)
            el->logical = id;
        else if (id == 2) el->group_kind = G_MAP;
        else if (id == 3) el->group_kind = G_LIST;
        int16_t l2 = 0, i2; int t2;
        while (kl__tr_field(r, &l2, &t2, &i2)) {
            if (id == 5 && i2 == 1 && t2 == TT_I32) el->scale = (int)kl__tr_int(r);
            else if (id == 5 && i2 == 2 && t2 == TT_I32) el->precision = (int)kl__tr_int(r);
            else if ((id == 7 || id == 8) && i2 == 1) {
                el->utc = kl__tr_bool_field(t2);
                if (t2 != TT_TRUE && t2 != TT_FALSE) kl__tr_skip(r, t2);
            } else if ((id == 7 || id == 8) && i2 == 2 && t2 == TT_STRUCT) {
                int16_t l3 = 0, i3; int t3;
                while (kl__tr_field(r, &l3, &t3, &i3)) {
                    el->unit = i3;
                    kl__tr_skip(r, t3);
                }
            } else if (id == 10 && i2 == 1 && t2 == TT_BYTE) {
                if (r->p < r->end) el->bit_width = (int8_t)*r->p++; else r->err = 1;
            } else if (id == 10 && i2 == 2) {
                el->is_signed = kl__tr_bool_field(t2);
                if (t2 != TT_TRUE && t2 != TT_FALSE) kl__tr_skip(r, t2);
            } else kl__tr_skip(r, t2);
        }
    }
}

static void parse_schema_el(kl__tr *r, pq_schema_el *el) {
    int16_t last = 0, id; int t;
    el->ptype = -1; el->conv = -1; el->rep = REP_REQUIRED;
    while (kl__tr_field(r, &last, &t, &id)) {
        switch (id) {
        case 1:
            if (t == TT_I32) {
                el->ptype = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 2:
            if (t == TT_I32) {
                el->type_length = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 3:
            if (t == TT_I32) {
                el->rep = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 4:
            if (t == TT_BINARY) {
                kl__tr_bin(r, &el->name, &el->name_len);
                continue;
            }
            break;
        case 5:
            if (t == TT_I32) {
                el->num_children = (int)kl__tr_int(r);
                el->has_children = 1;
                continue;
            }
            break;
        case 6:
            if (t == TT_I32) {
                el->conv = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 7:
            if (t == TT_I32) {
                el->scale = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 8:
            if (t == TT_I32) {
                el->precision = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 10: if (t == TT_STRUCT) { parse_logical(r, el); continue; } break;
        }
        kl__tr_skip(r, t);
    }
}

static void parse_col_meta(kl__tr *r, pq_chunk *c) {
    int16_t last = 0, id; int t;
    while (kl__tr_field(r, &last, &t, &id)) {
        switch (id) {
        case 1:
            if (t == TT_I32) {
                c->ptype = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 4:
            if (t == TT_I32) {
                c->codec = (int)kl__tr_int(r);
                continue;
            }
            break;
        case 5:
            if (t == TT_I64) {
                c->num_values = kl__tr_int(r);
                continue;
            }
            break;
        case 6:
            if (t == TT_I64) {
                c->total_uncompressed = kl__tr_int(r);
                continue;
            }
            break;
        case 7:
            if (t == TT_I64) {
                c->total_compressed = kl__tr_int(r);
                continue;
            }
            break;
        case 9:
            if (t == TT_I64) {
                c->data_page_offset = kl__tr_int(r);
                continue;
            }
            break;
        case 11:
            if (t == TT_I64) {
                c->dict_page_offset = kl__tr_int(r);
                continue;
            }
            break;
        case 12: if (t == TT_STRUCT) { parse_stats(r, &c->stats); continue; } break;
        }
        kl__tr_skip(r, t);
    }
}

static void parse_chunk(kl__tr *r, pq_chunk *c) {
    int16_t last = 0, id; int t;
    c->dict_page_offset = -1;
    c->ci_off = c->oi_off = -1;
    c->ptype = -1;
    while (kl__tr_field(r, &last, &t, &id)) {
        switch (id) {
        case 1:
            if (t == TT_BINARY) {
                const uint8_t *d;
                uint32_t n;
                kl__tr_bin(r, &d, &n);
                c->external = n > 0;
                continue;
            }
            break;
        case 3: if (t == TT_STRUCT) { parse_col_meta(r, c); c->has_meta = 1; continue; } break;
        case 4:
            if (t == TT_I64) {
                c->oi_off = kl__tr_int(r);
                continue;
            }
            break;
        case 5:
            if (t == TT_I32) {
                c->oi_len = kl__tr_int(r);
                continue;
            }
            break;
        case 6:
            if (t == TT_I64) {
                c->ci_off = kl__tr_int(r);
                continue;
            }
            break;
        case 7:
            if (t == TT_I32) {
                c->ci_len = kl__tr_int(r);
                continue;
            }
            break;
        case 8: c->encrypted = 1; break;
        }
        kl__tr_skip(r, t);
    }
}

static int parse_rowgroup(kl__tr *r, pq_reader_t *R, pq_rowgroup *g, kl_err *e) {
    int16_t last = 0, id; int t;
    int got_cols = 0;
    while (kl__tr_field(r, &last, &t, &id)) {
        if (id == 1 && t == TT_LIST) {
            int et; uint32_t n;
            if (kl__tr_list(r, &et, &n) || et != TT_STRUCT) {
                r->err = 1;
                break;
            }
            if (n != R->nleaves)
                return kl_err_set(e, KL_EPARSE, "%s: a row group has %u column chunks, the schema has %zu leaf columns", R->name, n, R->nleaves);
            if (got_cols) return kl_err_set(e, KL_EPARSE, "%s: a row group lists its columns twice", R->name);
            g->cols = calloc(n ? n : 1, sizeof *g->cols);
            if (!g->cols) return kl_err_set(e, KL_ENOMEM, "out of memory");
            for (uint32_t i = 0; i < n && !r->err; i++) parse_chunk(r, &g->cols[i]);
            got_cols = 1;
        } else if (id == 3 && t == TT_I64) g->num_rows = kl__tr_int(r);
        else kl__tr_skip(r, t);
    }
    if (r->err) return kl_err_set(e, KL_EPARSE, "%s: corrupt footer (row group)", R->name);
    if (!got_cols) return kl_err_set(e, KL_EPARSE, "%s: a row group has no column chunks", R->name);
    if (g->num_rows < 0) return kl_err_set(e, KL_EPARSE, "%s: a row group has %lld rows", R->name, (long long)g->num_rows);
    return KL_OK;
}

/* ==================================================================
 * Schema tree → leaf columns
 * ================================================================== */

static void leaf_type(pq_leaf *L, const pq_schema_el *el) {
    int lt = el->logical, ct = el->conv;
    L->kind = 0;
    L->scale = el->scale;
    L->type_length = el->type_length;
    char *lg = L->logicalbuf;
    lg[0] = 0;
    int is_dec = lt == 5 || ct == CT_DECIMAL;
    int ts_unit = 0; /* 1 ms 2 us 3 ns */
    if (lt == 8) ts_unit = el->unit;
    else if (!lt && ct == CT_TIMESTAMP_MILLIS) ts_unit = 1;
    else if (!lt && ct == CT_TIMESTAMP_MICROS) ts_unit = 2;
    int time_unit = 0;
    if (lt == 7) time_unit = el->unit;
    else if (!lt && ct == CT_TIME_MILLIS) time_unit = 1;
    else if (!lt && ct == CT_TIME_MICROS) time_unit = 2;
    int is_str = lt == 1 || lt == 4 || lt == 12 || (!lt && (ct == CT_UTF8 || ct == CT_ENUM || ct == CT_JSON));
    int uns = (lt == 10 && !el->is_signed) || (!lt && ct >= CT_UINT_8 && ct <= CT_UINT_64);
    int bits = lt == 10 ? el->bit_width : (ct == CT_UINT_8 || ct == CT_INT_8) ? 8 : (ct == CT_UINT_16 || ct == CT_INT_16) ? 16 : (ct == CT_UINT_32 || ct == CT_INT_32) ? 32 : (ct == CT_UINT_64 || ct == CT_INT_64) ? 64 : 0;
    if (is_dec) snprintf(lg, sizeof L->logicalbuf, "DECIMAL(%d,%d)", el->precision, el->scale);
    switch (el->ptype) {
    case PT_BOOLEAN: L->type = KL_COL_BOOL; L->kind = K_BOOL; break;
    case PT_INT32:
        if (is_dec) { L->type = KL_COL_FLOAT64; L->kind = K_DEC32; }
        else if (lt == 6 || ct == CT_DATE) { L->type = KL_COL_DATE; L->kind = K_I32; strcpy(lg, "DATE"); }
        else if (time_unit) { L->type = KL_COL_INT64; L->kind = K_TIME32MS; strcpy(lg, "TIME(MILLIS)"); }
        else if (uns && bits == 32) { L->type = KL_COL_INT64; L->kind = K_U32; strcpy(lg, "UINT32"); L->unsigned_order = 1; }
        else { L->type = KL_COL_INT32; L->kind = K_I32; if (bits) snprintf(lg, sizeof L->logicalbuf, "%sINT%d", uns ? "U" : "", bits); L->unsigned_order = uns; }
        break;
    case PT_INT64:
        if (is_dec) { L->type = KL_COL_FLOAT64; L->kind = K_DEC64; }
        else if (ts_unit) {
            L->type = KL_COL_TIMESTAMP;
            L->kind = ts_unit == 1 ? K_TS_MS : ts_unit == 3 ? K_TS_NS : K_I64;
            snprintf(lg, sizeof L->logicalbuf, "TIMESTAMP(%s)", ts_unit == 1 ? "MILLIS" : ts_unit == 3 ? "NANOS" : "MICROS");
        } else if (time_unit) {
            L->type = KL_COL_INT64; L->kind = time_unit == 3 ? K_TS_NS : K_I64;
            snprintf(lg, sizeof L->logicalbuf, "TIME(%s)", time_unit == 3 ? "NANOS" : "MICROS");
        } else { L->type = KL_COL_INT64; L->kind = K_I64; if (bits) snprintf(lg, sizeof L->logicalbuf, "%sINT%d", uns ? "U" : "", bits); L->unsigned_order = uns; }
        break;
    case PT_INT96: L->type = KL_COL_TIMESTAMP; L->kind = K_INT96; strcpy(lg, "INT96 timestamp"); break;
    case PT_FLOAT: L->type = KL_COL_FLOAT32; L->kind = K_F32; break;
    case PT_DOUBLE: L->type = KL_COL_FLOAT64; L->kind = K_F64; break;
    case PT_BYTE_ARRAY:
        if (is_dec) { L->type = KL_COL_FLOAT64; L->kind = K_DECBIN; }
        else if (is_str) { L->type = KL_COL_STRING; L->kind = K_BYTES; strcpy(lg, lt == 4 || ct == CT_ENUM ? "ENUM" : lt == 12 || ct == CT_JSON ? "JSON" : "STRING"); }
        else { L->type = KL_COL_BINARY; L->kind = K_BYTES; }
        break;
    case PT_FLBA:
        if (is_dec) { L->type = KL_COL_FLOAT64; L->kind = K_DECBIN;
        } else if (lt == 15 && el->type_length == 2) {
            L->type = KL_COL_FLOAT32;
            L->kind = K_F16;
            strcpy(lg, "FLOAT16");
        } else if (!lt && ct == CT_INTERVAL && el->type_length == 12) {
            L->type = KL_COL_STRING;
            L->kind = K_INTERVAL;
            strcpy(lg, "INTERVAL");
        } else {
            L->type = KL_COL_BINARY;
            L->kind = K_BYTES;
            if (lt == 14) strcpy(lg, "UUID");
        }
        break;
    }
}

typedef struct { pq_reader_t *R; uint32_t at, n; kl_err *e; } walk;

static int add_leaf(walk *w, pq_schema_el *el, const char *path, int max_def, int max_rep, int field) {
    pq_reader_t *R = w->R;
    if (el->ptype < 0 || el->ptype > 7)
        return kl_err_set(w->e, KL_EPARSE, "%s: column %s: invalid physical type %d", R->name, path, el->ptype);
    if (el->ptype == PT_FLBA && (el->type_length <= 0 || el->type_length > (1 << 20)))
        return kl_err_set(w->e, KL_EPARSE, "%s: column %s: invalid FIXED_LEN_BYTE_ARRAY length %d", R->name, path,
                          el->type_length);
    if (R->nleaves >= R->capleaves) {
        size_t nc = R->capleaves ? R->capleaves * 2 : 16;
        pq_leaf *nl = realloc(R->leaves, nc * sizeof *nl);
        if (!nl) return kl_err_set(w->e, KL_ENOMEM, "out of memory");
        R->leaves = nl; R->capleaves = nc;
    }
    pq_leaf *L = &R->leaves[R->nleaves++];
    memset(L, 0, sizeof *L);
    L->name = strdup(path);
    if (!L->name) return kl_err_set(w->e, KL_ENOMEM, "out of memory");
    L->ptype = el->ptype;
    L->max_def = max_def;
    L->max_rep = max_rep;
    L->field = field;
    leaf_type(L, el);
    L->info.name = L->name;
    L->info.type = L->type;
    L->info.nullable = max_def > 0;
    L->info.physical = ptype_name(el->ptype);
    L->info.logical = L->logicalbuf;
    L->info.is_unsigned = L->kind == K_I64 && L->unsigned_order && L->ptype == PT_INT64;
    L->info.supported = field < 0;
    L->info.inner = field >= 0;
    L->info.why = "";
    if (field >= 0) {
        snprintf(L->whybuf, sizeof L->whybuf, "column %s is part of the nested column %s (select %s)", path,
                 R->fields[field].name, R->fields[field].name);
        L->info.why = L->whybuf;
    }
    return KL_OK;
}

/* One schema element and its subtree; field: the nested column it is part of (-1: none). */
static int walk_schema(walk *w, int depth, int max_def, int max_rep, int field, const char *prefix) {
    pq_reader_t *R = w->R;
    if (w->at >= w->n) return kl_err_set(w->e, KL_EPARSE, "%s: schema ends early (num_children too large)", R->name);
    if (depth > 64) return kl_err_set(w->e, KL_EPARSE, "%s: schema nested too deeply", R->name);
    uint32_t at = w->at++;
    pq_schema_el *el = &R->schema[at];
    char path[512];
    snprintf(path, sizeof path, "%s%s%.*s", prefix, *prefix ? "." : "", (int)el->name_len,
             el->name ? (const char *)el->name : "");
    if (el->rep == REP_OPTIONAL) max_def++;
    else if (el->rep == REP_REPEATED) {
        max_def++;
        max_rep++;
    } else if (el->rep != REP_REQUIRED)
        return kl_err_set(w->e, KL_EPARSE, "%s: column %s: invalid repetition type %d", R->name, path, el->rep);
    int group = el->has_children && el->num_children > 0;
    if (field < 0 && (group || el->rep == REP_REPEATED || (el->has_children && el->ptype < 0))) {
        /* a nested top-level column */
        pq_field *F = &R->fields[R->nfields];
        memset(F, 0, sizeof *F);
        if (!(F->name = strdup(path))) return kl_err_set(w->e, KL_ENOMEM, "out of memory");
        F->el = at;
        F->leaf0 = R->nleaves;
        field = (int)R->nfields++;
        F->info.name = F->name;
        F->info.type = KL_COL_STRING;
        F->info.nullable = el->rep == REP_OPTIONAL;
        F->info.supported = 1;
        F->info.nested = 1;
        F->info.why = "";
        F->info.physical = group ? "group" : ptype_name(el->ptype);
        F->info.logical = F->logicalbuf;
        snprintf(F->logicalbuf, sizeof F->logicalbuf, "%s",
                 el->rep == REP_REPEATED || el->group_kind == G_LIST || el->conv == CT_LIST          ? "LIST"
                     : el->group_kind == G_MAP || el->conv == CT_MAP || el->conv == CT_MAP_KEY_VALUE ? "MAP"
                                                                                                     : "STRUCT");
        R->top[R->ntop++] = (size_t)-1 - (size_t)field; /* numbered after all leaves: resolved at the end */
    }
    pq_node *N = &R->nodes[at];
    N->def = max_def;
    N->rep = max_rep;
    N->leaf = -1;
    N->first_leaf = (int)R->nleaves;
    if (el->has_children && el->num_children > 0) {
        if ((uint32_t)el->num_children > w->n)
            return kl_err_set(w->e, KL_EPARSE, "%s: group %s has %d children, the schema %u elements", R->name, path,
                              el->num_children, w->n);
        for (int i = 0; i < el->num_children; i++) {
            int rc = walk_schema(w, depth + 1, max_def, max_rep, field, path);
            if (rc) return rc;
        }
    } else if (el->has_children && el->ptype < 0) {
        /* an empty group: no leaves, no data */
        snprintf(R->fields[field].whybuf, sizeof R->fields[field].whybuf,
                 "column %s holds an empty group; empty groups are not supported", path);
        R->fields[field].info.supported = 0;
    } else {
        if (field < 0) R->top[R->ntop++] = R->nleaves;
        N->leaf = (int)R->nleaves;
        int rc = add_leaf(w, el, path, max_def, max_rep, field);
        if (rc) return rc;
        if (field >= 0 && max_rep > PQ_MAX_REP && R->fields[field].info.supported) {
            snprintf(R->fields[field].whybuf, sizeof R->fields[field].whybuf,
                     "column %s is nested %d lists deep; keel reads at most %d", R->fields[field].name, max_rep,
                     PQ_MAX_REP);
            R->fields[field].info.supported = 0;
        }
    }
    N->nleaves = (int)R->nleaves - N->first_leaf;
    N->end = w->at;
    if (field >= 0 && R->fields[field].el == at) R->fields[field].nleaf = R->nleaves - R->fields[field].leaf0;
    return KL_OK;
}

/* ==================================================================
 * Opening
 * ================================================================== */

static int parse_footer(pq_reader_t *R, kl_err *e) {
    const uint8_t *d = R->data;
    size_t len = R->len;
    if (len < 12) return kl_err_set(e, KL_EPARSE, "%s: not a Parquet file (%zu bytes)", R->name, len);
    if (memcmp(d + len - 4, "PARE", 4) == 0) return kl_err_set(e, KL_EUNSUPPORTED, "%s: encrypted Parquet files are not supported", R->name);
    if (memcmp(d, "PAR1", 4) != 0 || memcmp(d + len - 4, "PAR1", 4) != 0)
        return kl_err_set(e, KL_EPARSE, "%s: not a Parquet file (no PAR1 magic)", R->name);
    uint32_t flen;
    memcpy(&flen, d + len - 8, 4);
    if ((uint64_t)flen + 12 > len) return kl_err_set(e, KL_EPARSE, "%s: footer length %u exceeds the file (%zu bytes)", R->name, flen, len);
    R->footer_start = len - 8 - flen;
    kl__tr r = {d + R->footer_start, d + len - 8, 0, 0};
    int16_t last = 0, id; int t;
    int rc = KL_OK;
    int have_schema = 0;
    while (kl__tr_field(&r, &last, &t, &id)) {
        if (id == 2 && t == TT_LIST) {
            int et; uint32_t n;
            if (have_schema) return kl_err_set(e, KL_EPARSE, "%s: the footer has two schemas", R->name);
            if (kl__tr_list(&r, &et, &n) || et != TT_STRUCT || n == 0) {
                r.err = 1;
                break;
            }
            R->schema = calloc(n, sizeof *R->schema);
            if (!R->schema) return kl_err_set(e, KL_ENOMEM, "out of memory");
            R->nschema = n;
            for (uint32_t i = 0; i < n && !r.err; i++) parse_schema_el(&r, &R->schema[i]);
            if (r.err) break;
            /* root: its children are the top-level fields */
            walk w = {R, 1, n, e};
            pq_schema_el *root = &R->schema[0];
            if (root->num_children < 0 || (uint32_t)root->num_children > n)
                return kl_err_set(e, KL_EPARSE, "%s: the schema root has %d children", R->name, root->num_children);
            R->nodes = calloc(n, sizeof *R->nodes);
            R->fields = calloc((size_t)root->num_children + 1, sizeof *R->fields);
            R->top = calloc((size_t)root->num_children + 1, sizeof *R->top);
            if (!R->nodes || !R->fields || !R->top) return kl_err_set(e, KL_ENOMEM, "out of memory");
            for (int c = 0; c < root->num_children && rc == KL_OK; c++) rc = walk_schema(&w, 1, 0, 0, -1, "");
            if (rc) return rc;
            if (w.at != n) return kl_err_set(e, KL_EPARSE, "%s: schema has %u elements but the tree covers %u", R->name, n, w.at);
            for (size_t i = 0; i < R->ntop; i++) /* fields are numbered after all the leaves */
                if (R->top[i] > R->nleaves + R->nfields) R->top[i] = R->nleaves + ((size_t)-1 - R->top[i]);
            for (size_t i = 0; i < R->nleaves; i++) { /* leaves moved while growing */
                R->leaves[i].info.logical = R->leaves[i].logicalbuf;
                if (*R->leaves[i].whybuf) R->leaves[i].info.why = R->leaves[i].whybuf;
            }
            for (size_t f = 0; f < R->nfields; f++)
                if (!R->fields[f].info.supported) R->fields[f].info.why = R->fields[f].whybuf;
            have_schema = 1;
        } else if (id == 3 && t == TT_I64) {
            R->num_rows = kl__tr_int(&r);
        } else if (id == 4 && t == TT_LIST) {
            int et; uint32_t n;
            if (!have_schema) return kl_err_set(e, KL_EPARSE, "%s: row groups before the schema in the footer", R->name);
            if (R->rgs) return kl_err_set(e, KL_EPARSE, "%s: the footer lists row groups twice", R->name);
            if (kl__tr_list(&r, &et, &n) || et != TT_STRUCT) {
                r.err = 1;
                break;
            }
            R->rgs = calloc(n ? n : 1, sizeof *R->rgs);
            if (!R->rgs) return kl_err_set(e, KL_ENOMEM, "out of memory");
            R->nrg = n;
            for (uint32_t i = 0; i < n; i++)
                if ((rc = parse_rowgroup(&r, R, &R->rgs[i], e))) return rc;
        } else if (id == 5 && t == TT_LIST) {
            int et; uint32_t n;
            if (kl__tr_list(&r, &et, &n) || et != TT_STRUCT) {
                r.err = 1;
                break;
            }
            if (R->kv) return kl_err_set(e, KL_EPARSE, "%s: the footer lists key/value metadata twice", R->name);
            R->kv = calloc(2 * (size_t)n + 1, sizeof *R->kv);
            if (!R->kv) return kl_err_set(e, KL_ENOMEM, "out of memory");
            for (uint32_t i = 0; i < n && !r.err; i++) {
                int16_t l2 = 0, i2; int t2;
                char *k = NULL, *v = NULL;
                while (kl__tr_field(&r, &l2, &t2, &i2)) {
                    const uint8_t *s; uint32_t sn;
                    if ((i2 == 1 || i2 == 2) && t2 == TT_BINARY && !kl__tr_bin(&r, &s, &sn)) {
                        char **dst = i2 == 1 ? &k : &v;
                        free(*dst);
                        *dst = strndup((const char *)s, sn);
                    } else kl__tr_skip(&r, t2);
                }
                if (k) { R->kv[2 * R->nkv] = k; R->kv[2 * R->nkv + 1] = v ? v : strdup(""); R->nkv++; }
                else free(v);
            }
        } else if (id == 6 && t == TT_BINARY) {
            const uint8_t *s; uint32_t sn;
            if (!kl__tr_bin(&r, &s, &sn)) {
                free(R->created_by);
                R->created_by = strndup((const char *)s, sn);
            }
        } else kl__tr_skip(&r, t);
    }
    if (r.err) return kl_err_set(e, KL_EPARSE, "%s: corrupt or truncated footer (Thrift FileMetaData)", R->name);
    if (!have_schema) return kl_err_set(e, KL_EPARSE, "%s: the footer has no schema", R->name);
    if (R->num_rows < 0) return kl_err_set(e, KL_EPARSE, "%s: negative row count", R->name);
    /* readers size their buffers from num_rows and decode row group by row
     * group: the two counts must agree */
    int64_t sum = 0;
    for (size_t g = 0; g < R->nrg; g++) {
        if (R->rgs[g].num_rows > INT64_MAX - sum)
            return kl_err_set(e, KL_EPARSE, "%s: the row groups' row counts overflow", R->name);
        sum += R->rgs[g].num_rows;
    }
    if (sum != R->num_rows)
        return kl_err_set(e, KL_EPARSE, "%s: the footer says %lld rows, its %zu row groups hold %lld", R->name,
                          (long long)R->num_rows, R->nrg, (long long)sum);
    /* per chunk checks; a chunk keel cannot decode makes its column unreadable
     * (named with the reason by kl_pq_column, never left out silently) */
    for (size_t g = 0; g < R->nrg; g++)
        for (size_t c = 0; c < R->nleaves; c++) {
            pq_chunk *ch = &R->rgs[g].cols[c];
            pq_leaf *L = &R->leaves[c];
            if (ch->has_meta && ch->ptype != L->ptype)
                return kl_err_set(e, KL_EPARSE, "%s: column %s: chunk type %d differs from the schema type %d", R->name,
                                  L->name, ch->ptype, L->ptype);
            const char *why = ch->encrypted ? "encrypted columns are not supported"
                : ch->external              ? "column data in an external file is not supported"
                : ch->has_meta              ? kl__pq_codec_unsupported(ch->codec)
                                            : NULL;
            if (!why) continue;
            kl_pq_column_info *ci = L->field >= 0 ? &R->fields[L->field].info : &L->info;
            char *buf = L->field >= 0 ? R->fields[L->field].whybuf : L->whybuf;
            if (!ci->supported) continue;
            snprintf(buf, sizeof L->whybuf, "column %s (row group %zu): %s", L->name, g, why);
            ci->supported = 0;
            ci->why = buf;
        }
    return KL_OK;
}

static int reader_init(pq_reader_t *R, kl_err *e) {
    int rc = parse_footer(R, e);
    if (rc) return rc;
    return kl_pq_select((kl_pq_reader *)R, NULL, 0, e);
}

int kl_pq_open_mem(const void *data, size_t len, const char *name, kl_pq_reader **out, kl_err *e) {
    *out = NULL;
    pq_reader_t *R = calloc(1, sizeof *R);
    if (!R) return kl_err_set(e, KL_ENOMEM, "out of memory");
    R->data = data;
    R->len = len;
    R->name = strdup(name ? name : "<memory>");
    int rc = R->name ? reader_init(R, e) : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (rc) { kl_pq_close((kl_pq_reader *)R); return rc; }
    *out = (kl_pq_reader *)R;
    return KL_OK;
}

int kl_pq_open(const char *path, kl_pq_reader **out, kl_err *e) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: refused below, not waited on */
    if (fd < 0) return kl_err_set(e, errno == ENOENT ? KL_ENOTFOUND : -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int er = errno; close(fd); return kl_err_set(e, -er, "%s: %s", path, strerror(er)); }
    if (!S_ISREG(st.st_mode)) { close(fd); return kl_err_set(e, KL_EINVAL, "%s: not a regular file", path); }
    size_t len = (size_t)st.st_size;
    void *map = NULL;
    if (len > 0) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) { int er = errno; close(fd); return kl_err_set(e, -er, "%s: mmap: %s", path, strerror(er)); }
    }
    close(fd);
    pq_reader_t *R = calloc(1, sizeof *R);
    if (!R) { if (map) munmap(map, len); return kl_err_set(e, KL_ENOMEM, "out of memory"); }
    R->data = map ? map : (const uint8_t *)"";
    R->len = len;
    R->map = map;
    R->name = strdup(path);
    int rc = R->name ? reader_init(R, e) : kl_err_set(e, KL_ENOMEM, "out of memory");
    if (rc) { kl_pq_close((kl_pq_reader *)R); return rc; }
    *out = (kl_pq_reader *)R;
    return KL_OK;
}

void kl_pq_close(kl_pq_reader *r) {
    pq_reader_t *R = (pq_reader_t *)r;
    if (!R) return;
    kl__pq_read_free(R);
    for (size_t i = 0; i < R->nleaves; i++) free(R->leaves[i].name);
    free(R->leaves);
    for (size_t f = 0; f < R->nfields; f++) free(R->fields[f].name);
    free(R->fields);
    free(R->nodes);
    free(R->top);
    for (size_t g = 0; g < R->nrg; g++) free(R->rgs[g].cols);
    free(R->rgs);
    free(R->schema);
    for (size_t i = 0; i < 2 * R->nkv; i++) free(R->kv[i]);
    free(R->kv);
    free(R->created_by);
    if (R->map) munmap(R->map, R->len);
    free(R->name);
    free(R);
}

/* ==================================================================
 * Accessors
 * ================================================================== */

uint64_t kl_pq_num_rows(const kl_pq_reader *r) { return (uint64_t)((const pq_reader_t *)r)->num_rows; }
size_t kl_pq_num_row_groups(const kl_pq_reader *r) { return ((const pq_reader_t *)r)->nrg; }
uint64_t kl_pq_row_group_rows(const kl_pq_reader *r, size_t rg) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    return rg < R->nrg ? (uint64_t)R->rgs[rg].num_rows : 0;
}
size_t kl_pq_num_columns(const kl_pq_reader *r) { return ((const pq_reader_t *)r)->nleaves; }
size_t kl_pq_num_all_columns(const kl_pq_reader *r) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    return R->nleaves + R->nfields;
}
const kl_pq_column_info *kl__pq_colinfo(const pq_reader_t *R, size_t i) {
    if (i < R->nleaves) return &R->leaves[i].info;
    if (i - R->nleaves < R->nfields) return &R->fields[i - R->nleaves].info;
    return NULL;
}
const kl_pq_column_info *kl_pq_column(const kl_pq_reader *r, size_t i) {
    return kl__pq_colinfo((const pq_reader_t *)r, i);
}
size_t kl_pq_num_top(const kl_pq_reader *r) { return ((const pq_reader_t *)r)->ntop; }
size_t kl_pq_top(const kl_pq_reader *r, size_t i) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    return i < R->ntop ? R->top[i] : (size_t)-1;
}
int kl_pq_find_column(const kl_pq_reader *r, const char *name) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    int inner = -1;
    for (size_t i = 0; i < R->nleaves; i++)
        if (!strcmp(R->leaves[i].name, name)) {
            if (!R->leaves[i].info.inner) return (int)i;
            inner = (int)i;
        }
    for (size_t f = 0; f < R->nfields; f++) /* a repeated top-level leaf shares its field's name */
        if (!strcmp(R->fields[f].name, name)) return (int)(R->nleaves + f);
    return inner;
}
const char *kl_pq_created_by(const kl_pq_reader *r) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    return R->created_by ? R->created_by : "";
}
const char *kl_pq_kv(const kl_pq_reader *r, const char *key) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    for (size_t i = 0; i < R->nkv; i++)
        if (!strcmp(R->kv[2 * i], key)) return R->kv[2 * i + 1];
    return NULL;
}

/* Converts a plain-encoded statistic into a value of the leaf's keel type.
 * Returns 0 when the bytes do not fit the type. */
int kl__pq_stat_value(const pq_leaf *L, const uint8_t *b, uint32_t n, kl_pq_value *v) {
    memset(v, 0, sizeof *v);
    v->type = L->type;
    switch (L->kind) {
    case K_BOOL: if (n < 1) return 0; v->i = b[0] != 0; return 1;
    case K_I32: case K_U32: case K_TIME32MS: case K_DEC32: {
        if (n < 4) return 0;
        int32_t x; memcpy(&x, b, 4);
        if (L->kind == K_U32) v->i = (int64_t)(uint32_t)x;
        else if (L->kind == K_TIME32MS) v->i = (int64_t)x * 1000;
        else if (L->kind == K_DEC32) v->f = (double)x / pow(10, L->scale);
        else v->i = x;
        return 1;
    }
    case K_I64: case K_TS_MS: case K_TS_NS: case K_DEC64: {
        if (n < 8) return 0;
        int64_t x; memcpy(&x, b, 8);
        if (L->kind == K_TS_MS) v->i = (int64_t)((uint64_t)x * 1000u);
        else if (L->kind == K_TS_NS) v->i = x / 1000 - (x % 1000 < 0);
        else if (L->kind == K_DEC64) v->f = (double)x / pow(10, L->scale);
        else v->i = x;
        return 1;
    }
    case K_F32: { if (n < 4) return 0; float x; memcpy(&x, b, 4); v->f = x; return !isnan(x); }
    case K_F64: { if (n < 8) return 0; double x; memcpy(&x, b, 8); v->f = x; return !isnan(x); }
    case K_BYTES: v->s = (const char *)b; v->n = n; return 1;
    default: return 0; /* INT96, float16, binary decimals: no statistics */
    }
}

int kl_pq_stats(const kl_pq_reader *r, size_t rg, size_t col, kl_pq_col_stats *out, kl_err *e) {
    const pq_reader_t *R = (const pq_reader_t *)r;
    memset(out, 0, sizeof *out);
    if (col >= R->nleaves) return kl_err_set(e, KL_EINVAL, "%s: no column %zu", R->name, col);
    const pq_leaf *L = &R->leaves[col];
    size_t g0 = rg, g1 = rg + 1;
    if (rg == (size_t)-1) { g0 = 0; g1 = R->nrg; }
    else if (rg >= R->nrg) return kl_err_set(e, KL_EINVAL, "%s: no row group %zu", R->name, rg);
    int any = 0;
    out->has_null_count = 1;
    for (size_t g = g0; g < g1; g++) {
        const pq_chunk *c = &R->rgs[g].cols[col];
        out->num_values += (uint64_t)R->rgs[g].num_rows;
        if (!c->stats.has_null_count) out->has_null_count = 0;
        else out->null_count += (uint64_t)c->stats.null_count;
        kl_pq_value mn, mx;
        if (!c->stats.has_minmax || !kl__pq_stats_usable(R, L, &c->stats) ||
            !kl__pq_stat_value(L, c->stats.min, c->stats.nmin, &mn) ||
            !kl__pq_stat_value(L, c->stats.max, c->stats.nmax, &mx)) {
            if (c->stats.has_null_count && c->stats.null_count == R->rgs[g].num_rows) continue; /* all null */
            out->has_min_max = 0;
            any = -1;
            continue;
        }
        if (any == -1) continue;
        if (!any || kl__pq_value_cmp(L->type, &mn, &out->min) < 0) out->min = mn;
        if (!any || kl__pq_value_cmp(L->type, &mx, &out->max) > 0) out->max = mx;
        any = 1;
    }
    out->has_min_max = any == 1;
    if (g1 > g0 && !out->has_min_max && !out->has_null_count)
        return kl_err_set(e, KL_ENOTFOUND, "%s: column %s has no statistics", R->name, L->name);
    return KL_OK;
}

/* Whether min/max statistics of a chunk or page can be trusted for ordering. */
int kl__pq_stats_usable(const pq_reader_t *R, const pq_leaf *L, const pq_stats *s) {
    if (!s->has_minmax) return 0;
    if (L->unsigned_order || L->kind == K_DECBIN || L->kind == K_INT96 || L->kind == K_F16) return 0;
    /* legacy min/max of byte arrays used signed byte order */
    if (s->legacy && L->ptype == PT_BYTE_ARRAY) return 0;
    if (s->legacy && L->ptype == PT_FLBA) return 0;
    return 1;
}

int kl__pq_value_cmp(kl_col_type t, const kl_pq_value *a, const kl_pq_value *b) {
    if (t == KL_COL_STRING || t == KL_COL_BINARY) {
        int c = memcmp(a->s, b->s, KL_MIN(a->n, b->n));
        if (c) return c < 0 ? -1 : 1;
        return a->n < b->n ? -1 : a->n > b->n;
    }
    int af = a->type == KL_COL_FLOAT32 || a->type == KL_COL_FLOAT64;
    int bf = b->type == KL_COL_FLOAT32 || b->type == KL_COL_FLOAT64;
    if (af || bf) {
        double x = af ? a->f : (double)a->i, y = bf ? b->f : (double)b->i;
        return (x > y) - (x < y);
    }
    return (a->i > b->i) - (a->i < b->i);
}
