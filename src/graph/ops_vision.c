/* Vision operators: Resize (opsets 10-19, every mode and coordinate
 * transformation, antialias, axes, keep_aspect_ratio_policy) and Upsample
 * (opsets 7-10) on the resize kernels of src/tensor/resize*.c; the detection
 * ops NonMaxSuppression and RoiAlign; GridSample; MaxUnpool. f32. */
#include "graph/graph_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEED(t)                                       \
    do {                                              \
        if (!(t) || !(t)->data) return KL__NEED_DATA; \
    } while (0)

static int need_f32(kl_gnode *n, const kl_tensor *t, kl_err *e) {
    if (t->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: dtype %s is not supported (float32 only)", n->opset,
                             kl_dtype_name(t->dtype));
    return KL_OK;
}

/* ================================================================== *
 * Resize / Upsample: attributes
 * ================================================================== */

static const char *const RS_MODES[] = {"nearest", "linear", "cubic", NULL};
static const char *const RS_COORDS[] = {
    "half_pixel",           "align_corners",      "asymmetric",           "pytorch_half_pixel",
    "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric", NULL};
static const char *const RS_NEAREST[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};

static int str_index(const char *const *list, const char *s) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], s)) return i;
    return -1;
}

/* Resize-10 and Upsample: asymmetric coordinates, "simple" nearest */
static int rs_legacy(const kl_gnode *n) { return !strcmp(n->op_type, "Upsample") || n->opset < 11; }

static int rs_mode(const kl_gnode *n) {
    const char *m = kl_gnode_attr_str(n, "mode", "nearest");
    if (rs_legacy(n) && !strcmp(m, "bilinear")) return KL_RESIZE_LINEAR;
    int i = str_index(RS_MODES, m);
    return rs_legacy(n) && i == KL_RESIZE_CUBIC ? -1 : i;
}

static int resize_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    (void)g;
    const char *m = kl_gnode_attr_str(n, "mode", "nearest");
    if (rs_mode(n) < 0)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: %s mode '%s' is not supported (nearest, linear%s)",
                             n->opset, n->op_type, m, rs_legacy(n) ? "" : ", cubic");
    if (rs_legacy(n)) return KL_OK;
    const char *c = kl_gnode_attr_str(n, "coordinate_transformation_mode", "half_pixel");
    int ci = str_index(RS_COORDS, c);
    if (ci < 0 || (ci == KL_CT_HALF_PIXEL_SYMMETRIC && n->opset < 19))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: coordinate_transformation_mode '%s' is not supported",
                             n->opset, c);
    const char *nm = kl_gnode_attr_str(n, "nearest_mode", "round_prefer_floor");
    if (str_index(RS_NEAREST, nm) < 0)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: nearest_mode '%s' is not supported", n->opset, nm);
    const char *kp = kl_gnode_attr_str(n, "keep_aspect_ratio_policy", "stretch");
    if (strcmp(kp, "stretch") && strcmp(kp, "not_larger") && strcmp(kp, "not_smaller"))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: keep_aspect_ratio_policy '%s' is not supported",
                             n->opset, kp);
    if (n->opset < 18 &&
        (kl_gnode_attr(n, "antialias") || kl_gnode_attr(n, "axes") || kl_gnode_attr(n, "keep_aspect_ratio_policy")))
        return kl__fail_node(e, n, KL_EINVAL, "opset %d: antialias/axes/keep_aspect_ratio_policy need opset 18",
                             n->opset);
    return KL_OK;
}

/* ================================================================== *
 * Resize / Upsample: output size, scales, roi
 * ================================================================== */

typedef struct {
    int64_t od[KL_MAX_DIMS];
    float sc[KL_MAX_DIMS];
    int have_sc;
    int nax, axes[KL_MAX_DIMS]; /* the axes scales/sizes/roi name (all when no attribute) */
} rs_params;

static int rs_axes(kl_gnode *n, int rank, rs_params *p, kl_err *e) {
    const kl_attr *a = kl_gnode_attr(n, "axes");
    if (!a) {
        p->nax = rank;
        for (int i = 0; i < rank; i++) p->axes[i] = i;
        return KL_OK;
    }
    if (a->n < 1 || a->n > rank) return kl__fail_node(e, n, KL_EINVAL, "axes has %d entries for rank %d", a->n, rank);
    int seen[KL_MAX_DIMS] = {0};
    p->nax = a->n;
    for (int i = 0; i < a->n; i++) {
        int64_t ax;
        if (kl__norm_axis(a->ints[i], rank, &ax) || seen[ax]++)
            return kl__fail_node(e, n, KL_EINVAL, "axes[%d] = %lld is out of range or repeated", i,
                                 (long long)a->ints[i]);
        p->axes[i] = (int)ax;
    }
    return KL_OK;
}

/* sizes given: the output size, with keep_aspect_ratio_policy (the common
 * scale, output sizes rounded half to even as NumPy) */
static int rs_from_sizes(kl_gnode *n, const kl_tensor *x, const kl_tensor *sizes, rs_params *p, kl_err *e) {
    if (kl_tensor_numel(sizes) != p->nax) return kl__fail_node(e, n, KL_EINVAL, "sizes must have %d entries", p->nax);
    const char *kp = kl_gnode_attr_str(n, "keep_aspect_ratio_policy", "stretch");
    double common = !strcmp(kp, "not_larger") ? INFINITY : -INFINITY;
    for (int k = 0; k < p->nax; k++) {
        int64_t s = kl__int_at(sizes, k), in = x->dims[p->axes[k]];
        if (s < 0 || s > ((int64_t)1 << 40)) return kl__fail_node(e, n, KL_EINVAL, "sizes[%d] = %lld", k, (long long)s);
        p->od[p->axes[k]] = s;
        double r = in ? (double)s / (double)in : 1;
        common = !strcmp(kp, "not_larger") ? fmin(common, r) : fmax(common, r);
    }
    if (strcmp(kp, "stretch")) {
        for (int k = 0; k < p->nax; k++) {
            int a = p->axes[k];
            p->sc[a] = (float)common;
            p->od[a] = (int64_t)nearbyint(common * (double)x->dims[a]);
        }
        p->have_sc = 1;
    } else
        for (int k = 0; k < p->nax; k++) {
            int a = p->axes[k];
            p->sc[a] = x->dims[a] ? (float)p->od[a] / (float)x->dims[a] : 1.f;
        }
    return KL_OK;
}

static int rs_from_scales(kl_gnode *n, const kl_tensor *x, const float *s, int ns, rs_params *p, kl_err *e) {
    if (ns != p->nax) return kl__fail_node(e, n, KL_EINVAL, "scales must have %d entries", p->nax);
    for (int k = 0; k < ns; k++) {
        int a = p->axes[k];
        if (!(s[k] > 0) || !isfinite(s[k]) || (double)x->dims[a] * s[k] > (double)((int64_t)1 << 40))
            return kl__fail_node(e, n, KL_EINVAL, "scale %g must be positive and finite", (double)s[k]);
        p->sc[a] = s[k];
        p->od[a] = (int64_t)floor((double)x->dims[a] * (double)s[k]);
    }
    p->have_sc = 1;
    return KL_OK;
}

static int rs_params_of(kl_gnode *n, kl_tensor *const *in, int n_in, rs_params *p, kl_err *e) {
    const kl_tensor *x = in[0];
    int r = x->rank, rc;
    memset(p, 0, sizeof *p);
    for (int i = 0; i < r; i++) {
        p->od[i] = x->dims[i];
        p->sc[i] = 1.f;
    }
    if ((rc = rs_axes(n, r, p, e))) return rc;
    if (!strcmp(n->op_type, "Upsample") && n->opset < 9) {
        const kl_attr *a = kl_gnode_attr(n, "scales");
        if (!a || a->type != KL_ATTR_FLOATS) return kl__fail_node(e, n, KL_EINVAL, "needs the scales attribute");
        return rs_from_scales(n, x, a->floats, a->n, p, e);
    }
    const kl_tensor *scales = n_in > 2 ? in[2] : NULL, *sizes = n_in > 3 ? in[3] : NULL;
    if (rs_legacy(n)) scales = n_in > 1 ? in[1] : NULL, sizes = NULL;
    if (scales && !kl_tensor_numel(scales))
        scales = NULL; /* an empty input = absent (its shape is known when planning) */
    if (sizes && !kl_tensor_numel(sizes)) sizes = NULL;
    if (sizes) {
        NEED(sizes);
        return rs_from_sizes(n, x, sizes, p, e);
    }
    if (!scales) return kl__fail_node(e, n, KL_EINVAL, "needs scales or sizes");
    NEED(scales);
    float s[KL_MAX_DIMS];
    int64_t ns = kl_tensor_numel(scales);
    if (ns > KL_MAX_DIMS) return kl__fail_node(e, n, KL_EINVAL, "scales has %lld entries", (long long)ns);
    for (int64_t k = 0; k < ns; k++) s[k] = (float)kl__dbl_at(scales, k);
    return rs_from_scales(n, x, s, (int)ns, p, e);
}

/* the roi of tf_crop_and_resize as starts[rank], ends[rank] */
static int rs_roi(kl_gnode *n, kl_tensor *const *in, int n_in, const rs_params *p, int rank, float *roi, kl_err *e) {
    for (int i = 0; i < rank; i++) {
        roi[i] = 0;
        roi[rank + i] = 1;
    }
    const kl_tensor *t = n_in > 1 ? in[1] : NULL;
    if (!t || !kl_tensor_numel(t)) return kl__fail_node(e, n, KL_EINVAL, "tf_crop_and_resize needs roi");
    if (kl_tensor_numel(t) != 2 * p->nax) return kl__fail_node(e, n, KL_EINVAL, "roi must have %d entries", 2 * p->nax);
    for (int k = 0; k < p->nax; k++) {
        roi[p->axes[k]] = (float)kl__dbl_at(t, k);
        roi[rank + p->axes[k]] = (float)kl__dbl_at(t, p->nax + k);
    }
    return KL_OK;
}

static int resize_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_out, (void)ws;
    int rc;
    if ((rc = need_f32(n, in[0], e))) return rc;
    rs_params p;
    if ((rc = rs_params_of(n, in, n_in, &p, e))) return rc;
    kl__set_shape(&out[0], KL_F32, in[0]->rank, p.od);
    return KL_OK;
}

static int resize_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                      kl_err *e) {
    (void)n_out;
    int rc, rank = in[0]->rank;
    rs_params p;
    if ((rc = rs_params_of(n, in, n_in, &p, e))) return rc;
    kl_resize_opts o = {(kl_resize_mode)rs_mode(n), KL_CT_ASYMMETRIC, KL_NEAREST_SIMPLE, -0.75f, 0, 0.f, 0, NULL};
    float roi[2 * KL_MAX_DIMS];
    if (!rs_legacy(n)) {
        o.coord =
            (kl_resize_coord)str_index(RS_COORDS, kl_gnode_attr_str(n, "coordinate_transformation_mode", "half_pixel"));
        o.nearest =
            (kl_resize_nearest)str_index(RS_NEAREST, kl_gnode_attr_str(n, "nearest_mode", "round_prefer_floor"));
        o.cubic_a = kl_gnode_attr_float(n, "cubic_coeff_a", -0.75f);
        o.exclude_outside = (int)kl_gnode_attr_int(n, "exclude_outside", 0);
        o.extrapolation = kl_gnode_attr_float(n, "extrapolation_value", 0.f);
        o.antialias = (int)kl_gnode_attr_int(n, "antialias", 0);
        if (o.coord == KL_CT_TF_CROP_AND_RESIZE) {
            if ((rc = rs_roi(n, in, n_in, &p, rank, roi, e))) return rc;
            o.roi = roi;
        }
    }
    rc = kl_resize_ex_f32(rank, in[0]->dims, in[0]->data, p.od, p.have_sc ? p.sc : NULL, &o, out[0]->data, x->pool, e);
    return rc ? kl__fail_node(e, n, rc, "%s", kl_err_what(e)) : KL_OK;
}

/* ================================================================== *
 * NonMaxSuppression: per batch and class, greedy by descending score
 * (ties: lower box index first), boxes with IoU > iou_threshold against a
 * kept box suppressed, scores <= score_threshold skipped.
 * ================================================================== */

typedef struct {
    float y1, x1, y2, x2, area;
} nms_box;

static nms_box nms_box_at(const float *b, int center) {
    nms_box r;
    if (center) {
        float xc = b[0], yc = b[1], w = b[2], h = b[3];
        r.x1 = xc - w / 2, r.x2 = xc + w / 2, r.y1 = yc - h / 2, r.y2 = yc + h / 2;
    } else {
        r.y1 = fminf(b[0], b[2]), r.y2 = fmaxf(b[0], b[2]), r.x1 = fminf(b[1], b[3]), r.x2 = fmaxf(b[1], b[3]);
    }
    r.area = (r.x2 - r.x1) * (r.y2 - r.y1);
    return r;
}

/* The boxes kept so far, field by field: the test of a candidate against
 * all of them runs as straight loops over blocks of 16 (vectorised). A pair
 * suppresses when both overlaps and the union are positive and intersection
 * / union > the threshold (in [0, 1]; NaN boxes never suppress). */
typedef struct {
    float *y1, *x1, *y2, *x2, *area;
} nms_kept;

/* min/max as compares (vectorised; fminf/fmaxf are library calls): they
 * differ from fminf/fmaxf only for a NaN coordinate, whose box's area is
 * NaN, so the union is NaN and the pair does not suppress with either. */
#define NMS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NMS_MAX(a, b) ((a) > (b) ? (a) : (b))

static int nms_suppressed(const nms_box *p, const nms_kept *k, int64_t nk, float thr) {
    for (int64_t j0 = 0; j0 < nk; j0 += 16) {
        int64_t m = KL_MIN(16, nk - j0);
        int hit = 0;
        for (int64_t j = j0; j < j0 + m; j++) {
            float w = NMS_MIN(p->x2, k->x2[j]) - NMS_MAX(p->x1, k->x1[j]);
            float h = NMS_MIN(p->y2, k->y2[j]) - NMS_MAX(p->y1, k->y1[j]);
            float inter = w * h, uni = p->area + k->area[j] - inter;
            hit |= (w > 0) & (h > 0) & (uni > 0) & (inter / uni > thr); /* no branch: vectorised */
        }
        if (hit) return 1;
    }
    return 0;
}

typedef struct {
    float s;
    int64_t i;
} nms_cand;

static int nms_cmp(const void *a, const void *b) {
    const nms_cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

typedef struct {
    int64_t B, C, N, max_out;
    float iou, sthr;
    int has_sthr, center;
} nms_args;

static int nms_args_of(kl_gnode *n, kl_tensor *const *in, int n_in, nms_args *a, kl_err *e) {
    const kl_tensor *bx = in[0], *sc = in[1];
    if (bx->rank != 3 || bx->dims[2] != 4) return kl__fail_node(e, n, KL_ESHAPE, "boxes must be [batch, boxes, 4]");
    if (sc->rank != 3 || sc->dims[0] != bx->dims[0] || sc->dims[2] != bx->dims[1])
        return kl__fail_node(e, n, KL_ESHAPE, "scores must be [batch, classes, boxes] matching boxes");
    if (bx->dtype != KL_F32 || sc->dtype != KL_F32)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: boxes and scores must be float32", n->opset);
    a->B = bx->dims[0], a->N = bx->dims[1], a->C = sc->dims[1];
    a->center = (int)kl_gnode_attr_int(n, "center_point_box", 0);
    if (a->center != 0 && a->center != 1) return kl__fail_node(e, n, KL_EINVAL, "center_point_box must be 0 or 1");
    a->max_out = 0, a->iou = 0, a->sthr = 0, a->has_sthr = 0;
    for (int k = 2; k < n_in && k < 5; k++) {
        const kl_tensor *t = in[k];
        if (!t) continue;
        NEED(t);
        if (kl_tensor_numel(t) != 1) return kl__fail_node(e, n, KL_ESHAPE, "input %d must hold one value", k);
    }
    if (n_in > 2 && in[2]) a->max_out = kl__int_at(in[2], 0);
    if (n_in > 3 && in[3]) a->iou = (float)kl__dbl_at(in[3], 0);
    if (n_in > 4 && in[4]) a->sthr = (float)kl__dbl_at(in[4], 0), a->has_sthr = 1;
    if (a->max_out < 0) a->max_out = 0;
    if (a->iou < 0 || a->iou > 1)
        return kl__fail_node(e, n, KL_EINVAL, "iou_threshold %g is not in [0, 1]", (double)a->iou);
    NEED(bx);
    NEED(sc);
    return KL_OK;
}

/* Runs NMS; sel (NULL = count only) gets (batch, class, box) triples.
 * Returns the number selected, or a negative error. */
static int64_t nms_select(kl_gnode *n, const nms_args *a, const float *boxes, const float *scores, int64_t *sel,
                          kl_err *e) {
    size_t bytes = (size_t)a->N * (sizeof(nms_cand) + sizeof(nms_box) + sizeof(int64_t) + 5 * sizeof(float)) + 64;
    char *mem = kl_mem_alloc_e(bytes, KL_TAG_WORKSPACE, e);
    if (!mem) return kl__fail_node(e, n, KL_ENOMEM, "out of memory for %lld boxes", (long long)a->N);
    nms_cand *cand = (nms_cand *)mem; /* 16-byte entries, 8-byte indices, the kept boxes by field, the 20-byte boxes */
    int64_t *kept = (int64_t *)(cand + a->N), total = 0;
    nms_kept kb;
    kb.y1 = (float *)(kept + a->N), kb.x1 = kb.y1 + a->N, kb.y2 = kb.x1 + a->N;
    kb.x2 = kb.y2 + a->N, kb.area = kb.x2 + a->N;
    nms_box *bx = (nms_box *)(kb.area + a->N);
    for (int64_t b = 0; b < a->B; b++) {
        for (int64_t i = 0; i < a->N; i++) bx[i] = nms_box_at(boxes + (b * a->N + i) * 4, a->center);
        for (int64_t c = 0; c < a->C; c++) {
            const float *s = scores + (b * a->C + c) * a->N;
            int64_t nc = 0, nk = 0;
            for (int64_t i = 0; i < a->N; i++)
                if (!a->has_sthr || s[i] > a->sthr) cand[nc++] = (nms_cand){s[i], i};
            qsort(cand, (size_t)nc, sizeof *cand, nms_cmp);
            for (int64_t k = 0; k < nc && nk < a->max_out; k++) {
                const nms_box *p = &bx[cand[k].i];
                if (nms_suppressed(p, &kb, nk, a->iou)) continue;
                kb.y1[nk] = p->y1, kb.x1[nk] = p->x1, kb.y2[nk] = p->y2, kb.x2[nk] = p->x2, kb.area[nk] = p->area;
                kept[nk++] = cand[k].i;
                if (sel) sel[3 * total] = b, sel[3 * total + 1] = c, sel[3 * total + 2] = cand[k].i;
                total++;
            }
        }
    }
    kl_mem_free(mem);
    return total;
}

static int nms_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_out, (void)ws;
    nms_args a;
    int rc = nms_args_of(n, in, n_in, &a, e);
    if (rc) return rc;
    int64_t cnt = nms_select(n, &a, in[0]->data, in[1]->data, NULL, e);
    if (cnt < 0) return (int)cnt;
    int64_t d[2] = {cnt, 3};
    kl__set_shape(&out[0], KL_I64, 2, d);
    return KL_OK;
}

/* A static step (inputs known when planning) writes into the planned
 * output; a dynamic one (KL_OP_ALLOCS: an empty owned tensor) selects once
 * into room for every possible triple and hands over the [selected, 3]
 * result, instead of selecting for the shape and again for the values. */
static int nms_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    (void)n_out, (void)x;
    nms_args a;
    int rc = nms_args_of(n, in, n_in, &a, e);
    if (rc) return rc;
    if (!out[0]->owns) {
        int64_t cnt = nms_select(n, &a, in[0]->data, in[1]->data, out[0]->data, e);
        return cnt < 0 ? (int)cnt : KL_OK;
    }
    int64_t most = a.B * a.C * KL_MIN(a.N, a.max_out), d[2] = {most, 3};
    kl_tensor *all = NULL, *res = NULL;
    if ((rc = kl_tensor_new_uninit(KL_I64, 2, d, KL_TAG_WORKSPACE, &all, e))) return rc;
    int64_t cnt = nms_select(n, &a, in[0]->data, in[1]->data, all->data, e);
    d[0] = cnt < 0 ? 0 : cnt;
    if (cnt >= 0 && !(rc = kl_tensor_new_uninit(KL_I64, 2, d, KL_TAG_ACTIVATIONS, &res, e))) {
        memcpy(res->data, all->data, res->nbytes);
        kl__tensor_move(out[0], res);
    }
    kl_tensor_free(all);
    return cnt < 0 ? (int)cnt : rc;
}

/* ================================================================== *
 * RoiAlign (opsets 10, 16): bilinear samples on a grid per bin (ONNX /
 * ONNX Runtime semantics, max mode = the max of the weighted corners).
 * ================================================================== */

static int roi_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    (void)g;
    const char *m = kl_gnode_attr_str(n, "mode", "avg");
    const char *c = kl_gnode_attr_str(n, "coordinate_transformation_mode", "half_pixel");
    if (strcmp(m, "avg") && strcmp(m, "max"))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: mode '%s' (avg, max)", n->opset, m);
    if (strcmp(c, "half_pixel") && strcmp(c, "output_half_pixel"))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: coordinate_transformation_mode '%s'", n->opset, c);
    if (kl_gnode_attr_int(n, "output_height", 1) < 1 || kl_gnode_attr_int(n, "output_width", 1) < 1 ||
        kl_gnode_attr_int(n, "sampling_ratio", 0) < 0)
        return kl__fail_node(e, n, KL_EINVAL, "output_height/output_width must be >= 1, sampling_ratio >= 0");
    return KL_OK;
}

static int roi_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out, (void)ws;
    const kl_tensor *X = in[0], *R = in[1], *I = in[2];
    int rc;
    if ((rc = need_f32(n, X, e)) || (rc = need_f32(n, R, e))) return rc;
    if (X->rank != 4 || R->rank != 2 || R->dims[1] != 4 || I->rank != 1 || I->dims[0] != R->dims[0])
        return kl__fail_node(e, n, KL_ESHAPE, "X must be NCHW, rois [num_rois, 4], batch_indices [num_rois]");
    int64_t d[4] = {R->dims[0], X->dims[1], kl_gnode_attr_int(n, "output_height", 1),
                    kl_gnode_attr_int(n, "output_width", 1)};
    kl__set_shape(&out[0], KL_F32, 4, d);
    return KL_OK;
}

/* one bilinear sample at (y, x) of plane p (H x W): 0 outside [-1, H] x [-1, W] */
static float roi_sample(const float *p, int64_t H, int64_t W, double y, double x, int mx) {
    if (y < -1.0 || y > (double)H || x < -1.0 || x > (double)W) return 0;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= H - 1) y1 = y0 = H - 1, y = (double)y0;
    else y1 = y0 + 1;
    if (x0 >= W - 1) x1 = x0 = W - 1, x = (double)x0;
    else x1 = x0 + 1;
    double ly = y - (double)y0, lx = x - (double)x0, hy = 1 - ly, hx = 1 - lx;
    double v1 = hy * hx * p[y0 * W + x0], v2 = hy * lx * p[y0 * W + x1], v3 = ly * hx * p[y1 * W + x0],
           v4 = ly * lx * p[y1 * W + x1];
    if (mx) return (float)fmax(fmax(v1, v2), fmax(v3, v4));
    return (float)(v1 + v2 + v3 + v4);
}

static int roi_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    (void)n_in, (void)n_out, (void)x;
    const kl_tensor *X = in[0], *R = in[1], *I = in[2];
    int64_t N = X->dims[0], C = X->dims[1], H = X->dims[2], W = X->dims[3], nr = R->dims[0];
    int64_t oh = out[0]->dims[2], ow = out[0]->dims[3], sr = kl_gnode_attr_int(n, "sampling_ratio", 0);
    double ss = kl_gnode_attr_float(n, "spatial_scale", 1.f);
    int mx = !strcmp(kl_gnode_attr_str(n, "mode", "avg"), "max");
    int half =
        n->opset >= 16 && !strcmp(kl_gnode_attr_str(n, "coordinate_transformation_mode", "half_pixel"), "half_pixel");
    double off = half ? 0.5 : 0;
    const float *rois = R->data;
    float *y = out[0]->data;
    for (int64_t r = 0; r < nr; r++) {
        int64_t b = kl__int_at(I, r);
        if (b < 0 || b >= N)
            return kl__fail_node(e, n, KL_ERANGE, "batch_indices[%lld] = %lld is out of range", (long long)r,
                                 (long long)b);
        double sw = rois[4 * r] * ss - off, sh = rois[4 * r + 1] * ss - off;
        double rw = rois[4 * r + 2] * ss - off - sw, rh = rois[4 * r + 3] * ss - off - sh;
        if (!half) rw = fmax(rw, 1.0), rh = fmax(rh, 1.0);
        double bh = rh / (double)oh, bw = rw / (double)ow;
        int64_t gh = sr > 0 ? sr : (int64_t)ceil(rh / (double)oh), gw = sr > 0 ? sr : (int64_t)ceil(rw / (double)ow);
        if (gh > 4096 || gw > 4096)
            return kl__fail_node(e, n, KL_ERANGE, "roi %lld needs a %lldx%lld sampling grid", (long long)r,
                                 (long long)gh, (long long)gw);
        double cnt = (double)KL_MAX(gh * gw, 1);
        for (int64_t c = 0; c < C; c++) {
            const float *p = (const float *)X->data + (b * C + c) * H * W;
            for (int64_t ph = 0; ph < oh; ph++)
                for (int64_t pw = 0; pw < ow; pw++) {
                    double acc = 0;
                    int first = 1;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double yy = sh + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double xx = sw + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                            double v = roi_sample(p, H, W, yy, xx, mx);
                            if (mx) acc = first ? v : fmax(acc, v), first = 0;
                            else acc += v;
                        }
                    }
                    y[((r * C + c) * oh + ph) * ow + pw] = (float)(mx ? acc : acc / cnt);
                }
        }
    }
    return KL_OK;
}

/* ================================================================== *
 * GridSample (opset 16): 4-D input, bilinear / nearest / bicubic, zeros /
 * border / reflection padding, align_corners (ONNX Runtime's semantics).
 * ================================================================== */

typedef struct {
    int mode, pad, align; /* mode 0 bilinear 1 nearest 2 bicubic; pad 0 zeros 1 border 2 reflection */
    int64_t H, W;
    float xmin, xmax, ymin, ymax;
} gs_ctx;

/* reflects v at the borders lo/hi until inside (ONNX Runtime's rule, in
 * double so that far-away coordinates do not overflow an int) */
static float gs_reflect(float v, float lo, float hi) {
    double range = (double)hi - lo;
    if (range <= 0) return lo;
    if (v >= lo && v <= hi) return v;
    double d = v < lo ? (double)lo - v : (double)v - hi, k = floor(d / range), r = d - k * range;
    int even = fmod(k, 2.0) == 0;
    if (v < lo) return (float)(even ? lo + r : hi - r);
    return (float)(even ? hi - r : lo + r);
}

static float gs_pixel(const gs_ctx *g, const float *p, int64_t r, int64_t c) {
    if (g->pad == 0) return r >= 0 && r < g->H && c >= 0 && c < g->W ? p[r * g->W + c] : 0.f;
    if (g->pad == 2) {
        c = (int64_t)gs_reflect((float)c, g->xmin, g->xmax);
        r = (int64_t)gs_reflect((float)r, g->ymin, g->ymax);
    }
    c = c < 0 ? 0 : c >= g->W ? g->W - 1 : c;
    r = r < 0 ? 0 : r >= g->H ? g->H - 1 : r;
    return p[r * g->W + c];
}

static void gs_cubic_coeffs(float t, float c[4]) {
    const float a = -0.75f;
    t = fabsf(t);
    c[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
    c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    c[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
    c[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
}

static float gs_sample(const gs_ctx *g, const float *p, float nx, float ny) {
    float x = g->align ? (nx + 1) / 2 * (float)(g->W - 1) : ((nx + 1) * (float)g->W - 1) / 2;
    float y = g->align ? (ny + 1) / 2 * (float)(g->H - 1) : ((ny + 1) * (float)g->H - 1) / 2;
    if (isnan(x) || isnan(y)) return NAN;
    if (g->mode == 1) x = nearbyintf(x), y = nearbyintf(y);
    if (x < g->xmin || x > g->xmax || y < g->ymin || y > g->ymax) {
        if (g->pad == 1) {
            x = fminf(fmaxf(x, 0.f), (float)(g->W - 1));
            y = fminf(fmaxf(y, 0.f), (float)(g->H - 1));
        } else if (g->pad == 2) {
            x = gs_reflect(x, g->xmin, g->xmax);
            y = gs_reflect(y, g->ymin, g->ymax);
        }
    }
    /* far outside (zeros padding, or an infinite coordinate) */
    if (!(fabsf(x) < 1e9f) || !(fabsf(y) < 1e9f)) return g->pad == 0 ? 0.f : NAN;
    if (g->mode == 1) return gs_pixel(g, p, (int64_t)y, (int64_t)x);
    int64_t x1 = (int64_t)floorf(x), y1 = (int64_t)floorf(y);
    if (g->mode == 0) {
        float dx1 = x - (float)x1, dx2 = (float)(x1 + 1) - x, dy1 = y - (float)y1, dy2 = (float)(y1 + 1) - y;
        return dy2 * (dx2 * gs_pixel(g, p, y1, x1) + dx1 * gs_pixel(g, p, y1, x1 + 1)) +
            dy1 * (dx2 * gs_pixel(g, p, y1 + 1, x1) + dx1 * gs_pixel(g, p, y1 + 1, x1 + 1));
    }
    float cx[4], cy[4], v[4];
    gs_cubic_coeffs(x - (float)x1, cx);
    gs_cubic_coeffs(y - (float)y1, cy);
    for (int i = 0; i < 4; i++) {
        v[i] = 0;
        for (int j = 0; j < 4; j++) v[i] += cx[j] * gs_pixel(g, p, y1 - 1 + i, x1 - 1 + j);
    }
    return cy[0] * v[0] + cy[1] * v[1] + cy[2] * v[2] + cy[3] * v[3];
}

static int gs_check(kl_gnode *n, const kl_graph *g, kl_err *e) {
    (void)g;
    const char *m = kl_gnode_attr_str(n, "mode", "bilinear"), *p = kl_gnode_attr_str(n, "padding_mode", "zeros");
    if (strcmp(m, "bilinear") && strcmp(m, "nearest") && strcmp(m, "bicubic"))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: mode '%s' (bilinear, nearest, bicubic)", n->opset, m);
    if (strcmp(p, "zeros") && strcmp(p, "border") && strcmp(p, "reflection"))
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: padding_mode '%s' (zeros, border, reflection)", n->opset,
                             p);
    return KL_OK;
}

static int gs_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_in, (void)n_out, (void)ws;
    const kl_tensor *X = in[0], *G = in[1];
    int rc;
    if ((rc = need_f32(n, X, e)) || (rc = need_f32(n, G, e))) return rc;
    if (X->rank != 4 || G->rank != 4 || G->dims[0] != X->dims[0] || G->dims[3] != 2)
        return kl__fail_node(e, n, KL_EUNSUPPORTED,
                             "opset %d: X must be [N, C, H, W] and grid [N, H_out, W_out, 2] (4-D only)", n->opset);
    int64_t d[4] = {X->dims[0], X->dims[1], G->dims[1], G->dims[2]};
    kl__set_shape(&out[0], KL_F32, 4, d);
    return KL_OK;
}

static int gs_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                  kl_err *e) {
    (void)n_in, (void)n_out, (void)x, (void)e;
    const kl_tensor *X = in[0], *G = in[1];
    const char *m = kl_gnode_attr_str(n, "mode", "bilinear"), *p = kl_gnode_attr_str(n, "padding_mode", "zeros");
    gs_ctx g = {!strcmp(m, "nearest")       ? 1
                    : !strcmp(m, "bicubic") ? 2
                                            : 0,
                !strcmp(p, "border")           ? 1
                    : !strcmp(p, "reflection") ? 2
                                               : 0,
                (int)kl_gnode_attr_int(n, "align_corners", 0),
                X->dims[2],
                X->dims[3],
                0,
                0,
                0,
                0};
    g.xmin = g.align ? 0.f : -0.5f, g.ymin = g.xmin;
    g.xmax = g.align ? (float)(g.W - 1) : (float)g.W - 0.5f;
    g.ymax = g.align ? (float)(g.H - 1) : (float)g.H - 0.5f;
    int64_t N = X->dims[0], C = X->dims[1], HW = G->dims[1] * G->dims[2];
    if (g.H == 0 || g.W == 0) {
        memset(out[0]->data, 0, (size_t)(N * C * HW) * sizeof(float));
        return KL_OK;
    }
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            const float *pl = (const float *)X->data + (b * C + c) * g.H * g.W;
            const float *gr = (const float *)G->data + b * HW * 2;
            float *y = (float *)out[0]->data + (b * C + c) * HW;
            for (int64_t k = 0; k < HW; k++) y[k] = gs_sample(&g, pl, gr[2 * k], gr[2 * k + 1]);
        }
    return KL_OK;
}

/* ================================================================== *
 * MaxUnpool (opsets 9, 11), as the ONNX reference: zeros, y.flat[I[i]] =
 * X[i] in the shape inferred from kernel_shape/strides/pads; an output_shape
 * input pads that at the end of each axis (ONNX Runtime and PyTorch index
 * output_shape directly instead; the node tests follow the reference).
 * ================================================================== */

static int unpool_inferred(kl_gnode *n, const kl_tensor *X, int64_t *d, kl_err *e) {
    int r = X->rank, sp = r - 2;
    const kl_attr *ks = kl_gnode_attr(n, "kernel_shape"), *st = kl_gnode_attr(n, "strides"),
                  *pd = kl_gnode_attr(n, "pads");
    if (!ks || ks->n != sp) return kl__fail_node(e, n, KL_EINVAL, "kernel_shape must have %d entries", sp);
    if ((st && st->n != sp) || (pd && pd->n != 2 * sp))
        return kl__fail_node(e, n, KL_EINVAL, "strides/pads have the wrong length");
    d[0] = X->dims[0], d[1] = X->dims[1];
    for (int i = 0; i < sp; i++) {
        int64_t s = st ? st->ints[i] : 1, p = pd ? pd->ints[i] + pd->ints[sp + i] : 0;
        d[i + 2] = (X->dims[i + 2] - 1) * s + ks->ints[i] - p;
        if (d[i + 2] < 0 || s < 1)
            return kl__fail_node(e, n, KL_EINVAL, "axis %d: inferred size %lld", i + 2, (long long)d[i + 2]);
    }
    return KL_OK;
}

static int unpool_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    (void)n_out, (void)ws;
    const kl_tensor *X = in[0], *I = in[1];
    int r = X->rank, rc;
    if (r < 3 || I->rank != r || memcmp(I->dims, X->dims, sizeof(int64_t) * (size_t)r))
        return kl__fail_node(e, n, KL_ESHAPE, "X must be [N, C, ...] and I the same shape");
    int64_t d[KL_MAX_DIMS], inf[KL_MAX_DIMS];
    if ((rc = unpool_inferred(n, X, inf, e))) return rc;
    memcpy(d, inf, sizeof d);
    if (n_in > 2 && in[2]) {
        NEED(in[2]);
        if (kl_tensor_numel(in[2]) != r) return kl__fail_node(e, n, KL_ESHAPE, "output_shape must have %d entries", r);
        for (int i = 0; i < r; i++) {
            d[i] = kl__int_at(in[2], i);
            if (d[i] < inf[i] || (i < 2 && d[i] != X->dims[i]))
                return kl__fail_node(e, n, KL_ESHAPE, "output_shape[%d] = %lld is smaller than the unpooled size %lld",
                                     i, (long long)d[i], (long long)inf[i]);
        }
    }
    kl__set_shape(&out[0], X->dtype, r, d);
    return KL_OK;
}

static int unpool_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                      kl_err *e) {
    (void)n_in, (void)n_out, (void)x;
    const kl_tensor *X = in[0];
    int r = X->rank, rc;
    size_t es = kl_dtype_size(X->dtype);
    int64_t inf[KL_MAX_DIMS], m = kl_tensor_numel(X), mi = 1, mo = kl_tensor_numel(out[0]), ost[KL_MAX_DIMS];
    if ((rc = unpool_inferred(n, X, inf, e))) return rc;
    for (int i = 0; i < r; i++) mi *= inf[i];
    kl_tensor_contiguous_strides(r, out[0]->dims, ost);
    memset(out[0]->data, 0, (size_t)mo * es);
    for (int64_t i = 0; i < m; i++) {
        int64_t k = kl__int_at(in[1], i), off = 0, rem = k;
        if (k < 0 || k >= mi)
            return kl__fail_node(e, n, KL_ERANGE, "index %lld is outside the unpooled tensor (%lld elements)",
                                 (long long)k, (long long)mi);
        for (int d = r - 1; d >= 0; d--) {
            off += (rem % inf[d]) * ost[d];
            rem /= inf[d];
        }
        memcpy((char *)out[0]->data + off * es, (const char *)X->data + i * es, es);
    }
    return KL_OK;
}

/* ================================================================== *
 * Registry
 * ================================================================== */

static const char *const a_resize[] = {"mode",
                                       "coordinate_transformation_mode",
                                       "nearest_mode",
                                       "cubic_coeff_a",
                                       "exclude_outside",
                                       "extrapolation_value",
                                       "antialias",
                                       "axes",
                                       "keep_aspect_ratio_policy",
                                       NULL};
static const char *const a_resize10[] = {"mode", NULL};
static const char *const a_upsample7[] = {"mode", "scales", NULL};
static const char *const a_nms[] = {"center_point_box", NULL};
static const char *const a_roi[] = {
    "mode", "output_height", "output_width", "sampling_ratio", "spatial_scale", "coordinate_transformation_mode", NULL};
static const char *const a_gs[] = {"mode", "padding_mode", "align_corners", NULL};
static const char *const a_unpool[] = {"kernel_shape", "pads", "strides", NULL};

const kl_op kl__ops_vision[] = {
    {"Resize", "", 10, 10, 2, 2, 1, 1, a_resize10, resize_check, resize_infer, resize_run, 0},
    {"Resize", "", 11, 19, 1, 4, 1, 1, a_resize, resize_check, resize_infer, resize_run, 0},
    {"Upsample", "", 7, 8, 1, 1, 1, 1, a_upsample7, resize_check, resize_infer, resize_run, 0},
    {"Upsample", "", 9, 10, 2, 2, 1, 1, a_resize10, resize_check, resize_infer, resize_run, 0},
    {"NonMaxSuppression", "", 10, 19, 2, 5, 1, 1, a_nms, NULL, nms_infer, nms_run, KL_OP_ALLOCS},
    {"RoiAlign", "", 10, 19, 3, 3, 1, 1, a_roi, roi_check, roi_infer, roi_run, 0},
    {"GridSample", "", 16, 19, 2, 2, 1, 1, a_gs, gs_check, gs_infer, gs_run, 0},
    {"MaxUnpool", "", 9, 19, 2, 3, 1, 1, a_unpool, NULL, unpool_infer, unpool_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
