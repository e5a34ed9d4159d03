/* Resize (every mode, coordinate transformation, antialias, axes,
 * keep_aspect_ratio_policy, exclude_outside, tf_crop_and_resize), Upsample,
 * NonMaxSuppression, RoiAlign, GridSample and MaxUnpool run as graphs
 * against references written from the ONNX reference semantics: Resize as
 * the reference's non-separable n-d interpolation (neighbours picked by
 * distance in the edge-padded array, coefficients per axis), odd sizes,
 * size-1 and empty axes, negative axes; NMS against a brute-force greedy
 * selection in both box formats; RoiAlign on images where bilinear sampling
 * is exact (affine); GridSample on identity grids and out-of-range points. */
#include "../harness.h"
#include "kt_graph.h"

#include <math.h>

/* ---- Resize reference ---- */

typedef struct {
    const char *mode, *coord, *nearest;
    double a;
    int exclude, antialias;
    double extrap;
} rref_opts;

static double rref_cubic(double x, double a) {
    x = fabs(x);
    if (x <= 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
    if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
    return 0;
}

/* 1-D: the taps (index into the input, coefficient) of output index o;
 * returns the tap count, -1 = extrapolate */
static int rref_taps(const rref_opts *o, int64_t in, int64_t on, double sc, double len, double r0, double r1,
                     int64_t xo, int64_t *idx, double *w) {
    double x = (double)xo, xr;
    const char *c = o->coord;
    if (!strcmp(c, "align_corners")) xr = len == 1 ? 0 : x * (double)(in - 1) / (len - 1);
    else if (!strcmp(c, "asymmetric")) xr = x / sc;
    else if (!strcmp(c, "pytorch_half_pixel")) xr = len > 1 ? (x + 0.5) / sc - 0.5 : 0;
    else if (!strcmp(c, "tf_half_pixel_for_nn")) xr = (x + 0.5) / sc;
    else if (!strcmp(c, "half_pixel_symmetric")) xr = (double)in / 2 * (1 - (double)on / len) + (x + 0.5) / sc - 0.5;
    else if (!strcmp(c, "tf_crop_and_resize")) {
        xr = len > 1 ? x * (r1 - r0) * (double)(in - 1) / (len - 1) : (r1 - r0) * (double)(in - 1) / 2;
        xr += r0 * (double)(in - 1);
        if (xr < 0 || xr > (double)(in - 1)) return -1;
    } else xr = (x + 0.5) / sc - 0.5;
    double ratio = xr == floor(xr) ? 1 : xr - floor(xr);
    double coef[64];
    int n;
    if (!strcmp(o->mode, "nearest")) {
        n = 2;
        int hi;
        if (ratio == 1) hi = 1;
        else if (!strcmp(o->nearest, "round_prefer_ceil")) hi = ratio >= 0.5;
        else if (!strcmp(o->nearest, "floor")) hi = 0;
        else if (!strcmp(o->nearest, "ceil")) hi = 1;
        else hi = ratio > 0.5;
        coef[0] = !hi, coef[1] = hi;
    } else {
        double s = o->antialias && sc < 1 ? sc : 1, rad = !strcmp(o->mode, "cubic") ? 2 : 1;
        int start = (int)floor(-rad / s) + 1;
        n = 2 - 2 * start;
        for (int i = 0; i < n; i++) {
            double arg = s * ((double)(start + i) - ratio);
            coef[i] = rad == 2 ? rref_cubic(arg, o->a) : fmax(0, 1 - fabs(arg));
        }
        if (o->antialias) {
            double sum = 0;
            for (int i = 0; i < n; i++) sum += coef[i];
            for (int i = 0; i < n; i++) coef[i] /= sum;
        }
    }
    /* the n indices of the edge-padded array nearest to x (smaller first on ties) */
    int64_t pad = (n + 1) / 2, plen = in + 2 * pad, chosen[64];
    double xp = xr + (double)pad;
    int used[4096] = {0};
    for (int k = 0; k < n; k++) {
        int64_t best = -1;
        for (int64_t i = 0; i < plen; i++)
            if (!used[i] && (best < 0 || fabs(xp - (double)i) < fabs(xp - (double)best))) best = i;
        used[best] = 1;
        chosen[k] = best;
    }
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && chosen[b] < chosen[b - 1]; b--) {
            int64_t t = chosen[b];
            chosen[b] = chosen[b - 1];
            chosen[b - 1] = t;
        }
    double sum = 0;
    for (int k = 0; k < n; k++) {
        int64_t i = chosen[k] - pad;
        if (o->exclude && (i < 0 || i >= in)) coef[k] = 0;
        sum += coef[k];
        idx[k] = i < 0 ? 0 : i >= in ? in - 1 : i;
        w[k] = coef[k];
    }
    if (o->exclude)
        for (int k = 0; k < n; k++) w[k] /= sum;
    return n;
}

/* y (out dims od) = the reference resize of x; sc[i] <= 0: no scales (sizes) */
static void rref_resize(const rref_opts *o, int rank, const int64_t *dims, const float *x, const int64_t *od,
                        const double *sc, const double *roi, double *y) {
    int64_t idx[KL_MAX_DIMS][64 * 64];
    double w[KL_MAX_DIMS][64 * 64];
    int nt[KL_MAX_DIMS][64];
    int64_t tot = 1, st[KL_MAX_DIMS];
    for (int i = 0; i < rank; i++) tot *= od[i];
    kl_tensor_contiguous_strides(rank, dims, st);
    for (int i = 0; i < rank; i++)
        for (int64_t j = 0; j < od[i]; j++) {
            double s = sc[i] > 0 ? sc[i] : (double)od[i] / (double)dims[i],
                   len = sc[i] > 0 ? (double)dims[i] * sc[i] : (double)od[i];
            nt[i][j] = rref_taps(o, dims[i], od[i], s, len, roi ? roi[i] : 0, roi ? roi[rank + i] : 1, j,
                                 idx[i] + j * 64, w[i] + j * 64);
        }
    for (int64_t e = 0; e < tot; e++) {
        int64_t c[KL_MAX_DIMS], rem = e;
        for (int i = rank - 1; i >= 0; i--) {
            c[i] = rem % od[i];
            rem /= od[i];
        }
        int ext = 0;
        for (int i = 0; i < rank; i++) ext |= nt[i][c[i]] < 0;
        if (ext) {
            y[e] = o->extrap;
            continue;
        }
        /* tensor product of the taps */
        int t[KL_MAX_DIMS] = {0};
        double acc = 0;
        for (;;) {
            double wt = 1;
            int64_t off = 0;
            for (int i = 0; i < rank; i++) {
                wt *= w[i][c[i] * 64 + t[i]];
                off += idx[i][c[i] * 64 + t[i]] * st[i];
            }
            acc += wt * x[off];
            int i = rank - 1;
            while (i >= 0 && ++t[i] == nt[i][c[i]]) t[i--] = 0;
            if (i < 0) break;
        }
        y[e] = acc;
    }
}

/* builds Resize (opset) with the options, scales or sizes over axes (naxes
 * == 0: all), runs it on x and compares with the reference */
typedef struct {
    int rank;
    int64_t dims[4];
    int naxes;
    int64_t axes[4];
    int use_sizes;
    double scales[4];
    int64_t sizes[4];
    const char *keep;
    double roi[8];
} rcase;

static void resize_case(const rref_opts *o, const rcase *rc, int opset, int *fails) {
    kl_err e = {0};
    kl_graph *g = ktg_new(opset);
    ktg_io(g, "x", 0);
    int na = rc->naxes ? rc->naxes : rc->rank;
    int64_t one = na, two = 2 * na;
    float sc[4], roi[8];
    for (int i = 0; i < na; i++) sc[i] = (float)rc->scales[i];
    for (int i = 0; i < 2 * na; i++) roi[i] = (float)rc->roi[i];
    kl_tensor *ts = rc->use_sizes ? ktg_tensor(KL_I64, 1, &one, rc->sizes) : ktg_tensor(KL_F32, 1, &one, sc);
    kl_tensor *tr = ktg_tensor(KL_F32, 1, &two, roi);
    ktg_init(g, "roi", tr);
    ktg_init(g, rc->use_sizes ? "sizes" : "scales", ts);
    int k = ktg_node(g, "Resize", rc->use_sizes ? "x,roi,,sizes" : "x,roi,scales", "y");
    ktg_attr_s(g, k, "mode", o->mode);
    ktg_attr_s(g, k, "coordinate_transformation_mode", o->coord);
    ktg_attr_s(g, k, "nearest_mode", o->nearest);
    ktg_attr_f(g, k, "cubic_coeff_a", (float)o->a);
    ktg_attr_i(g, k, "exclude_outside", o->exclude);
    ktg_attr_f(g, k, "extrapolation_value", (float)o->extrap);
    if (opset >= 18) ktg_attr_i(g, k, "antialias", o->antialias);
    if (rc->naxes) ktg_attr_ints(g, k, "axes", rc->naxes, rc->axes);
    if (rc->keep) ktg_attr_s(g, k, "keep_aspect_ratio_policy", rc->keep);
    ktg_io(g, "y", 1);
    kl_tensor *x = ktg_tensor(KL_F32, rc->rank, rc->dims, NULL), *y = NULL;
    int64_t n = kl_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) ((float *)x->data)[i] = (float)(ktg_rand() * 4 - 2);
    int rcode = ktg_run(g, &x, 1, &y, &e);
    if (rcode) {
        kt_fail(__FILE__, __LINE__, "Resize %s/%s: %s", o->mode, o->coord, kl_err_what(&e));
        ++*fails;
    } else {
        /* the reference's output size and per-axis scales */
        int64_t od[4];
        double scl[4], rroi[8];
        for (int i = 0; i < rc->rank; i++) od[i] = rc->dims[i], scl[i] = -1, rroi[i] = 0, rroi[rc->rank + i] = 1;
        double common = rc->keep && !strcmp(rc->keep, "not_larger") ? INFINITY : -INFINITY;
        for (int j = 0; j < na; j++) {
            int a = rc->naxes ? (int)((rc->axes[j] + rc->rank) % rc->rank) : j;
            rroi[a] = roi[j], rroi[rc->rank + a] = roi[na + j]; /* the float values the node gets */
            if (rc->use_sizes) {
                od[a] = rc->sizes[j];
                double r = (double)rc->sizes[j] / (double)rc->dims[a];
                common = rc->keep && !strcmp(rc->keep, "not_larger") ? fmin(common, r) : fmax(common, r);
            } else od[a] = (int64_t)floor((double)rc->dims[a] * (double)sc[j]), scl[a] = sc[j];
        }
        if (rc->use_sizes && rc->keep && strcmp(rc->keep, "stretch"))
            for (int j = 0; j < na; j++) {
                int a = rc->naxes ? (int)((rc->axes[j] + rc->rank) % rc->rank) : j;
                scl[a] = (float)common;
                od[a] = (int64_t)nearbyint(common * (double)rc->dims[a]);
            }
        int ok = y->rank == rc->rank;
        for (int i = 0; ok && i < rc->rank; i++) ok = y->dims[i] == od[i];
        if (!ok) {
            kt_fail(__FILE__, __LINE__, "Resize %s/%s: output shape differs", o->mode, o->coord);
            ++*fails;
        } else {
            int64_t m = kl_tensor_numel(y);
            double *want = malloc(sizeof(double) * (size_t)(m + 1));
            rref_resize(o, rc->rank, rc->dims, x->data, od, scl, rroi, want);
            for (int64_t i = 0; i < m; i++) {
                double got = ((float *)y->data)[i];
                if (!(fabs(got - want[i]) <= 1e-4 * fmax(1, fabs(want[i])))) {
                    kt_fail(__FILE__, __LINE__,
                            "Resize %s/%s/%s a=%g excl=%d aa=%d: element %lld = %.7g, expected %.7g", o->mode, o->coord,
                            o->nearest, o->a, o->exclude, o->antialias, (long long)i, got, want[i]);
                    ++*fails;
                    break;
                }
            }
            free(want);
        }
    }
    kl_tensor_free(x);
    kl_tensor_free(y);
    kl_tensor_free(ts);
    kl_tensor_free(tr);
    kl_graph_free(g);
}

static const char *const COORDS[] = {"half_pixel",          "align_corners",        "asymmetric",
                                     "pytorch_half_pixel",  "tf_half_pixel_for_nn", "tf_crop_and_resize",
                                     "half_pixel_symmetric"};
static const char *const NEARS[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

/* every mode x coordinate mode on odd up/down scales of a 2-D and a 4-D input */
KL_TEST(graph_resize_modes_reference) {
    int fails = 0;
    const rcase cases[] = {
        {2, {5, 7}, 0, {0}, 0, {0.6, 1.7}, {0}, NULL, {0.1, 0.2, 0.9, 0.7}},
        {2, {4, 3}, 0, {0}, 1, {0}, {9, 2}, NULL, {-0.2, 0.0, 1.2, 0.8}},
        {4, {1, 2, 3, 6}, 0, {0}, 0, {1, 1, 2.5, 0.5}, {0}, NULL, {0, 0, 0.25, 0.1, 1, 1, 0.75, 0.9}},
        {2, {1, 6}, 0, {0}, 1, {0}, {3, 1}, NULL, {0, 0.3, 1, 0.6}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int m = 0; m < 3; m++)
            for (size_t ct = 0; ct < sizeof COORDS / sizeof *COORDS; ct++)
                for (int nm = 0; nm < (m == 0 ? 4 : 1); nm++) {
                    if (ct == 4 && m != 0) continue; /* tf_half_pixel_for_nn: nearest only (as ORT) */
                    rref_opts o = {
                        m == 0 ? "nearest" : m == 1 ? "linear" : "cubic", COORDS[ct], NEARS[nm], -0.75, 0, 0, -3.5};
                    resize_case(&o, &cases[c], 19, &fails);
                    if (fails > 3) return;
                }
}

/* cubic_coeff_a, exclude_outside, antialias (linear and cubic, down and up) */
KL_TEST(graph_resize_cubic_antialias_reference) {
    int fails = 0;
    const rcase cases[] = {
        {2, {9, 11}, 0, {0}, 0, {0.3, 0.55}, {0}, NULL, {0}},
        {3, {2, 8, 5}, 0, {0}, 0, {1, 0.45, 1.6}, {0}, NULL, {0}},
        {2, {6, 6}, 0, {0}, 1, {0}, {2, 3}, NULL, {0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int m = 1; m < 3; m++)
            for (int ex = 0; ex < 2; ex++)
                for (int aa = 0; aa < 2; aa++)
                    for (int ct = 0; ct < 4; ct++) {
                        rref_opts o = {m == 1 ? "linear" : "cubic",
                                       COORDS[ct],
                                       "round_prefer_floor",
                                       m == 2 && ex ? -0.5 : -0.75,
                                       ex,
                                       aa,
                                       0};
                        resize_case(&o, &cases[c], 18, &fails);
                        if (fails > 3) return;
                    }
}

/* axes (negative too) and keep_aspect_ratio_policy */
KL_TEST(graph_resize_axes_keep_aspect) {
    int fails = 0;
    const rcase cases[] = {
        {4, {1, 2, 5, 4}, 2, {-2, -1}, 0, {1.5, 0.5}, {0}, NULL, {0.1, 0.0, 0.9, 1.0}},
        {4, {1, 2, 5, 4}, 2, {2, 3}, 1, {0}, {7, 7}, "not_larger", {0}},
        {4, {1, 2, 5, 4}, 2, {3, 2}, 1, {0}, {3, 9}, "not_smaller", {0}},
        {3, {3, 1, 4}, 1, {1}, 1, {0}, {4}, "stretch", {0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int m = 0; m < 3; m++) {
            rref_opts o = {m == 0       ? "nearest"
                               : m == 1 ? "linear"
                                        : "cubic",
                           c == 0 ? "tf_crop_and_resize" : "half_pixel",
                           "round_prefer_floor",
                           -0.75,
                           0,
                           0,
                           1.25};
            resize_case(&o, &cases[c], 18, &fails);
            if (fails > 3) return;
        }
}

/* the general kernel and the fast one agree where both apply (linear with
 * exclude_outside = edge padding), and empty outputs/inputs are handled */
KL_TEST(graph_resize_fast_equals_general_and_empty) {
    kl_err e = {0};
    int64_t d[3] = {3, 17, 13}, od[3] = {3, 29, 6};
    float *x = malloc(sizeof(float) * 3 * 17 * 13), *y1 = malloc(sizeof(float) * 3 * 29 * 6),
          *y2 = malloc(sizeof(float) * 3 * 29 * 6);
    for (int i = 0; i < 3 * 17 * 13; i++) x[i] = (float)ktg_rand();
    kl_resize_opts a = {KL_RESIZE_LINEAR, KL_CT_HALF_PIXEL, KL_NEAREST_ROUND_PREFER_FLOOR, -0.75f, 0, 0, 0, NULL},
                   b = a;
    b.exclude_outside = 1;
    KT_OK(kl_resize_ex_f32(3, d, x, od, NULL, &a, y1, NULL, &e), &e);
    KT_OK(kl_resize_ex_f32(3, d, x, od, NULL, &b, y2, NULL, &e), &e);
    for (int i = 0; i < 3 * 29 * 6; i++) KT_NEAR(y2[i], y1[i], 1e-5);
    int64_t z[3] = {3, 0, 6};
    KT_OK(kl_resize_ex_f32(3, d, x, z, NULL, &b, y2, NULL, &e), &e);
    int64_t dz[3] = {3, 0, 13};
    KT_CHECK(kl_resize_ex_f32(3, dz, x, od, NULL, &b, y2, NULL, &e) == KL_ESHAPE);
    free(x), free(y1), free(y2);
}

/* Upsample-9 nearest/linear and Resize-10 (asymmetric coordinates) */
KL_TEST(graph_upsample_and_resize10) {
    kl_err e = {0};
    for (int op = 0; op < 2; op++)
        for (int m = 0; m < 2; m++) {
            kl_graph *g = ktg_new(op ? 10 : 9);
            ktg_io(g, "x", 0);
            float sc[4] = {1, 1, 2, 3};
            int64_t four = 4, dims[4] = {1, 1, 2, 2};
            kl_tensor *ts = ktg_tensor(KL_F32, 1, &four, sc);
            ktg_init(g, "s", ts);
            int k = ktg_node(g, op ? "Resize" : "Upsample", "x,s", "y");
            ktg_attr_s(g, k, "mode", m ? "linear" : "nearest");
            ktg_io(g, "y", 1);
            float xv[4] = {1, 2, 3, 4};
            kl_tensor *x = ktg_tensor(KL_F32, 4, dims, xv), *y = NULL;
            KT_OK(ktg_run(g, &x, 1, &y, &e), &e);
            KT_EQ_INT(y->dims[2], 4);
            KT_EQ_INT(y->dims[3], 6);
            const float *v = y->data;
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 6; j++) {
                    double yy = i / 2.0, xx = j / 3.0, want;
                    if (!m) want = xv[(int)yy * 2 + (int)xx];
                    else {
                        int y0 = (int)yy, x0 = (int)xx, y1 = y0 + 1 > 1 ? 1 : y0 + 1, x1 = x0 + 1 > 1 ? 1 : x0 + 1;
                        double ly = yy - y0, lx = xx - x0;
                        want = (1 - ly) * ((1 - lx) * xv[y0 * 2 + x0] + lx * xv[y0 * 2 + x1]) +
                            ly * ((1 - lx) * xv[y1 * 2 + x0] + lx * xv[y1 * 2 + x1]);
                    }
                    KT_NEAR(v[i * 6 + j], want, 1e-6);
                }
            kl_tensor_free(x), kl_tensor_free(y), kl_tensor_free(ts);
            kl_graph_free(g);
        }
}

/* unsupported attribute values name the node, op and opset */
KL_TEST(graph_resize_errors_name_node) {
    kl_err e = {0};
    kl_graph *g = ktg_new(13);
    ktg_io(g, "x", 0);
    int k = ktg_node(g, "Resize", "x,,s", "y");
    ktg_attr_s(g, k, "mode", "lanczos");
    ktg_io(g, "y", 1);
    KT_CHECK(kl_graph_finalize(g, &e) == KL_EUNSUPPORTED);
    KT_CONTAINS(kl_err_what(&e), "Resize");
    KT_CONTAINS(kl_err_what(&e), "opset 13");
    KT_CONTAINS(kl_err_what(&e), "lanczos");
    kl_graph_free(g);
    g = ktg_new(17);
    ktg_io(g, "x", 0);
    k = ktg_node(g, "Resize", "x,,s", "y");
    ktg_attr_i(g, k, "antialias", 1);
    ktg_io(g, "y", 1);
    KT_CHECK(kl_graph_finalize(g, &e) != KL_OK);
    KT_CONTAINS(kl_err_what(&e), "opset 18");
    kl_graph_free(g);
}

/* ---- NonMaxSuppression ---- */

static double nref_iou(const float *a, const float *b, int center) {
    double ay1, ax1, ay2, ax2, by1, bx1, by2, bx2;
    if (center) {
        ax1 = a[0] - a[2] / 2.0, ax2 = a[0] + a[2] / 2.0, ay1 = a[1] - a[3] / 2.0, ay2 = a[1] + a[3] / 2.0;
        bx1 = b[0] - b[2] / 2.0, bx2 = b[0] + b[2] / 2.0, by1 = b[1] - b[3] / 2.0, by2 = b[1] + b[3] / 2.0;
    } else {
        ay1 = fmin(a[0], a[2]), ay2 = fmax(a[0], a[2]), ax1 = fmin(a[1], a[3]), ax2 = fmax(a[1], a[3]);
        by1 = fmin(b[0], b[2]), by2 = fmax(b[0], b[2]), bx1 = fmin(b[1], b[3]), bx2 = fmax(b[1], b[3]);
    }
    double w = fmin(ax2, bx2) - fmax(ax1, bx1), h = fmin(ay2, by2) - fmax(ay1, by1);
    if (w <= 0 || h <= 0) return 0;
    double i = w * h;
    return i / ((ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - i);
}

KL_TEST(graph_nms_reference) {
    kl_err e = {0};
    for (int center = 0; center < 2; center++)
        for (int trial = 0; trial < 6; trial++) {
            int64_t B = 1 + trial % 2, C = 1 + trial % 3, N = trial == 5 ? 0 : 40 + trial,
                    maxo = trial == 4 ? 0 : 3 + trial;
            float iou = 0.3f + 0.1f * (float)trial, sthr = trial == 3 ? -1e9f : 0.3f;
            int64_t db[3] = {B, N, 4}, ds[3] = {B, C, N}, one = 1;
            kl_tensor *bx = ktg_tensor(KL_F32, 3, db, NULL), *sc = ktg_tensor(KL_F32, 3, ds, NULL);
            for (int64_t i = 0; i < B * N; i++) {
                float *b = (float *)bx->data + 4 * i, u = (float)ktg_rand() * 10, v = (float)ktg_rand() * 10,
                      w = (float)ktg_rand() * 4 + 0.5f, h = (float)ktg_rand() * 4 + 0.5f;
                if (center) b[0] = u, b[1] = v, b[2] = w, b[3] = h;
                else if (i % 2) b[0] = v, b[1] = u, b[2] = v + h, b[3] = u + w;
                else b[0] = v + h, b[1] = u + w, b[2] = v, b[3] = u; /* flipped corners */
            }
            for (int64_t i = 0; i < B * C * N; i++)
                ((float *)sc->data)[i] = (float)(int)(ktg_rand() * 20) / 20.f; /* ties */
            kl_tensor *tm = ktg_tensor(KL_I64, 1, &one, &maxo), *ti = ktg_tensor(KL_F32, 1, &one, &iou),
                      *tt = ktg_tensor(KL_F32, 1, &one, &sthr);
            kl_graph *g = ktg_new(11);
            ktg_io(g, "b", 0);
            ktg_io(g, "s", 0);
            ktg_init(g, "m", tm), ktg_init(g, "i", ti), ktg_init(g, "t", tt);
            int k = ktg_node(g, "NonMaxSuppression", "b,s,m,i,t", "y");
            ktg_attr_i(g, k, "center_point_box", center);
            ktg_io(g, "y", 1);
            kl_tensor *in[2] = {bx, sc}, *y = NULL;
            KT_OK(ktg_run(g, in, 2, &y, &e), &e);
            /* brute force: repeatedly take the best remaining unsuppressed box */
            int64_t want[4096], nw = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t c = 0; c < C; c++) {
                    int done[64] = {0};
                    int64_t kept[64], nk = 0;
                    const float *s = (const float *)sc->data + (b * C + c) * N;
                    while (nk < maxo) {
                        int64_t best = -1;
                        for (int64_t i = 0; i < N; i++)
                            if (!done[i] && s[i] > sthr && (best < 0 || s[i] > s[best])) best = i;
                        if (best < 0) break;
                        done[best] = 1;
                        int ok = 1;
                        for (int64_t j = 0; j < nk; j++)
                            if (nref_iou((const float *)bx->data + (b * N + best) * 4,
                                         (const float *)bx->data + (b * N + kept[j]) * 4, center) > iou + 1e-6)
                                ok = 0;
                        if (!ok) continue;
                        kept[nk++] = best;
                        want[3 * nw] = b, want[3 * nw + 1] = c, want[3 * nw + 2] = best, nw++;
                    }
                }
            KT_EQ_INT(y->rank, 2);
            KT_EQ_INT(y->dims[1], 3);
            KT_EQ_INT(y->dims[0], nw);
            for (int64_t i = 0; i < 3 * nw; i++) KT_EQ_INT(((int64_t *)y->data)[i], want[i]);
            kl_tensor_free(y), kl_tensor_free(bx), kl_tensor_free(sc), kl_tensor_free(tm), kl_tensor_free(ti),
                kl_tensor_free(tt);
            kl_graph_free(g);
        }
}

/* ---- RoiAlign: an affine image makes bilinear sampling exact ---- */

KL_TEST(graph_roialign_affine) {
    kl_err e = {0};
    for (int half = 0; half < 2; half++)
        for (int mx = 0; mx < 2; mx++) {
            int64_t dx[4] = {2, 3, 10, 12}, dr[2] = {3, 4}, di = 3;
            kl_tensor *X = ktg_tensor(KL_F32, 4, dx, NULL);
            float *xv = X->data;
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++)
                    for (int y = 0; y < 10; y++)
                        for (int x = 0; x < 12; x++)
                            xv[((b * 3 + c) * 10 + y) * 12 + x] = mx ? 1.0f + c : (float)(b + c) + 0.5f * x + 0.25f * y;
            float rv[12] = {1, 1, 7, 6, 0.5f, 2, 9.5f, 8, 2, 2, 4, 3};
            int64_t iv[3] = {0, 1, 1};
            kl_tensor *R = ktg_tensor(KL_F32, 2, dr, rv), *I = ktg_tensor(KL_I64, 1, &di, iv);
            kl_graph *g = ktg_new(16);
            ktg_io(g, "x", 0), ktg_io(g, "r", 0), ktg_io(g, "i", 0);
            int k = ktg_node(g, "RoiAlign", "x,r,i", "y");
            ktg_attr_i(g, k, "output_height", 3), ktg_attr_i(g, k, "output_width", 2),
                ktg_attr_i(g, k, "sampling_ratio", 2);
            ktg_attr_s(g, k, "coordinate_transformation_mode", half ? "half_pixel" : "output_half_pixel");
            ktg_attr_s(g, k, "mode", mx ? "max" : "avg");
            ktg_io(g, "y", 1);
            kl_tensor *in[3] = {X, R, I}, *Y = NULL;
            KT_OK(ktg_run(g, in, 3, &Y, &e), &e);
            KT_EQ_INT(Y->dims[0], 3);
            KT_EQ_INT(Y->dims[1], 3);
            KT_EQ_INT(Y->dims[2], 3);
            KT_EQ_INT(Y->dims[3], 2);
            for (int r = 0; r < 3; r++) {
                double off = half ? 0.5 : 0, x0 = rv[4 * r] - off, y0 = rv[4 * r + 1] - off,
                       w = rv[4 * r + 2] - off - x0, h = rv[4 * r + 3] - off - y0;
                if (!half) w = fmax(w, 1), h = fmax(h, 1);
                for (int c = 0; c < 3; c++)
                    for (int ph = 0; ph < 3; ph++)
                        for (int pw = 0; pw < 2; pw++) {
                            double cy = y0 + (ph + 0.5) * h / 3, cx = x0 + (pw + 0.5) * w / 2;
                            /* max mode on a constant image: the largest corner weight times the value */
                            double want = mx ? 0 : (double)(iv[r] + c) + 0.5 * cx + 0.25 * cy;
                            if (mx) {
                                for (int sy = 0; sy < 2; sy++)
                                    for (int sx = 0; sx < 2; sx++) {
                                        double yy = y0 + ph * h / 3 + (sy + 0.5) * h / 6,
                                               xx = x0 + pw * w / 2 + (sx + 0.5) * w / 4;
                                        double ly = yy - floor(yy), lx = xx - floor(xx);
                                        double m = fmax(fmax((1 - ly) * (1 - lx), (1 - ly) * lx),
                                                        fmax(ly * (1 - lx), ly * lx));
                                        want = fmax(want, m * (1.0 + c));
                                    }
                            }
                            float got = ((float *)Y->data)[((r * 3 + c) * 3 + ph) * 2 + pw];
                            KT_CHECKF(fabs(got - want) < 1e-4,
                                      "roi %d c %d bin (%d,%d) half=%d max=%d: %g, expected %g", r, c, ph, pw, half, mx,
                                      got, want);
                        }
            }
            kl_tensor_free(X), kl_tensor_free(R), kl_tensor_free(I), kl_tensor_free(Y);
            kl_graph_free(g);
        }
}

/* ---- GridSample ---- */

static kl_tensor *gs_run1(const char *mode, const char *pad, int align, kl_tensor *X, kl_tensor *G, kl_err *e) {
    kl_graph *g = ktg_new(16);
    ktg_io(g, "x", 0), ktg_io(g, "g", 0);
    int k = ktg_node(g, "GridSample", "x,g", "y");
    ktg_attr_s(g, k, "mode", mode), ktg_attr_s(g, k, "padding_mode", pad), ktg_attr_i(g, k, "align_corners", align);
    ktg_io(g, "y", 1);
    kl_tensor *in[2] = {X, G}, *Y = NULL;
    int rc = ktg_run(g, in, 2, &Y, e);
    kl_graph_free(g);
    return rc ? NULL : Y;
}

KL_TEST(graph_gridsample_identity_and_padding) {
    kl_err e = {0};
    const char *modes[] = {"bilinear", "nearest", "bicubic"}, *pads[] = {"zeros", "border", "reflection"};
    int64_t dx[4] = {2, 3, 5, 7}, dg[4] = {2, 5, 7, 2};
    kl_tensor *X = ktg_tensor(KL_F32, 4, dx, NULL), *G = ktg_tensor(KL_F32, 4, dg, NULL);
    for (int i = 0; i < 2 * 3 * 5 * 7; i++) ((float *)X->data)[i] = (float)(ktg_rand() * 2 - 1);
    for (int align = 0; align < 2; align++) {
        /* the identity grid: pixel centres */
        for (int b = 0; b < 2; b++)
            for (int y = 0; y < 5; y++)
                for (int x = 0; x < 7; x++) {
                    float *p = (float *)G->data + ((b * 5 + y) * 7 + x) * 2;
                    p[0] = align ? -1 + 2.f * x / 6 : (2.f * x + 1) / 7 - 1;
                    p[1] = align ? -1 + 2.f * y / 4 : (2.f * y + 1) / 5 - 1;
                }
        for (int m = 0; m < 3; m++)
            for (int pd = 0; pd < 3; pd++) {
                kl_tensor *Y = gs_run1(modes[m], pads[pd], align, X, G, &e);
                KT_CHECKF(Y != NULL, "%s", kl_err_what(&e));
                for (int i = 0; i < 2 * 3 * 5 * 7; i++) {
                    if (m == 2 && pd == 0) {
                        /* bicubic with zero padding mixes in zeros next to the border */
                        int x = i % 7, y = (i / 7) % 5;
                        if (x == 0 || x == 6 || y == 0 || y == 4) continue;
                    }
                    KT_CHECKF(fabs(((float *)Y->data)[i] - ((float *)X->data)[i]) < 1e-5, "%s %s align=%d: element %d",
                              modes[m], pads[pd], align, i);
                }
                kl_tensor_free(Y);
            }
    }
    /* far outside: zeros -> 0; border -> the corner pixel; reflection stays inside */
    for (int i = 0; i < 2 * 5 * 7; i++) ((float *)G->data)[2 * i] = 5.f, ((float *)G->data)[2 * i + 1] = -7.f;
    for (int pd = 0; pd < 3; pd++) {
        kl_tensor *Y = gs_run1("bilinear", pads[pd], 0, X, G, &e);
        KT_CHECKF(Y != NULL, "%s", kl_err_what(&e));
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++) {
                float got = ((float *)Y->data)[(b * 3 + c) * 35], corner = ((float *)X->data)[(b * 3 + c) * 35 + 6];
                if (pd == 0) KT_NEAR(got, 0, 0);
                if (pd == 1) KT_NEAR(got, corner, 1e-6);
                if (pd == 2) KT_CHECK(isfinite(got) && fabs(got) <= 1.0f + 1e-6f);
            }
        kl_tensor_free(Y);
    }
    /* hostile coordinates: huge, infinite, NaN (no overflow; NaN in, NaN out) */
    const float hostile[4] = {3e30f, -INFINITY, NAN, 1e12f};
    for (int pd = 0; pd < 3; pd++)
        for (int m = 0; m < 3; m++) {
            for (int i = 0; i < 2 * 5 * 7; i++) {
                ((float *)G->data)[2 * i] = hostile[i % 4];
                ((float *)G->data)[2 * i + 1] = i % 3 ? 0.f : hostile[(i + 1) % 4];
            }
            kl_tensor *Y = gs_run1(modes[m], pads[pd], 1, X, G, &e);
            KT_CHECKF(Y != NULL, "%s", kl_err_what(&e));
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 35; k++) {
                        int gi = b * 35 + k;
                        float gx = hostile[gi % 4], gy = gi % 3 ? 0.f : hostile[(gi + 1) % 4];
                        float got = ((float *)Y->data)[(b * 3 + c) * 35 + k];
                        if (isnan(gx) || isnan(gy)) KT_CHECK(isnan(got));
                        else if (pd == 0) KT_NEAR(got, 0, 0);
                    }
            kl_tensor_free(Y);
        }
    kl_tensor_free(X), kl_tensor_free(G);
}

/* ---- MaxUnpool after MaxPool: the maxima back in place, zeros elsewhere ---- */

KL_TEST(graph_maxunpool_inverts_maxpool) {
    kl_err e = {0};
    for (int shaped = 0; shaped < 2; shaped++) {
        kl_graph *g = ktg_new(11);
        ktg_io(g, "x", 0);
        int64_t ks[2] = {2, 2}, st[2] = {2, 2}, dx[4] = {2, 3, 6, 4}, four = 4, os[4] = {2, 3, 7, 5};
        int k = ktg_node(g, "MaxPool", "x", "p,i");
        ktg_attr_ints(g, k, "kernel_shape", 2, ks), ktg_attr_ints(g, k, "strides", 2, st);
        kl_tensor *tos = ktg_tensor(KL_I64, 1, &four, os);
        ktg_init(g, "os", tos);
        k = ktg_node(g, "MaxUnpool", shaped ? "p,i,os" : "p,i", "y");
        ktg_attr_ints(g, k, "kernel_shape", 2, ks), ktg_attr_ints(g, k, "strides", 2, st);
        ktg_io(g, "y", 1);
        kl_tensor *X = ktg_tensor(KL_F32, 4, dx, NULL), *Y = NULL;
        for (int i = 0; i < 2 * 3 * 6 * 4; i++) ((float *)X->data)[i] = (float)i * 0.37f - (float)((i * 7919) % 23);
        KT_OK(ktg_run(g, &X, 1, &Y, &e), &e);
        KT_EQ_INT(Y->dims[2], shaped ? 7 : 6);
        KT_EQ_INT(Y->dims[3], shaped ? 5 : 4);
        const float *xv = X->data, *yv = Y->data;
        int64_t W = Y->dims[3], H = Y->dims[2];
        for (int bc = 0; bc < 6; bc++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    float got = yv[(bc * H + y) * W + x], want = 0;
                    if (y < 6 && x < 4) {
                        int by = y / 2 * 2, bx = x / 2 * 2;
                        float m = -INFINITY;
                        for (int u = 0; u < 2; u++)
                            for (int v = 0; v < 2; v++) m = fmaxf(m, xv[(bc * 6 + by + u) * 4 + bx + v]);
                        float self = xv[(bc * 6 + y) * 4 + x];
                        want = self == m ? m : 0;
                    }
                    KT_NEAR(got, want, 0);
                }
        kl_tensor_free(X), kl_tensor_free(Y), kl_tensor_free(tos);
        kl_graph_free(g);
    }
}

/* ---- TopK at detector sizes: the bounded-heap path against a full sort ---- */

static int topk_ref_cmp_desc(const void *a, const void *b) {
    const float *x = a, *y = b;
    return *x > *y ? -1 : *x < *y ? 1 : 0;
}

KL_TEST(graph_topk_large_matches_sort) {
    kl_err e = {0};
    const int64_t Ds[] = {20000, 37, 5}, ks[] = {300, 37, 0};
    for (int c = 0; c < 3; c++)
        for (int largest = 0; largest < 2; largest++) {
            int64_t D = Ds[c], K = ks[c], d[2] = {2, D}, one = 1;
            kl_graph *g = ktg_new(11);
            ktg_io(g, "x", 0);
            kl_tensor *tk = ktg_tensor(KL_I64, 1, &one, &K);
            ktg_init(g, "k", tk);
            int n = ktg_node(g, "TopK", "x,k", "v,i");
            ktg_attr_i(g, n, "axis", -1), ktg_attr_i(g, n, "largest", largest);
            ktg_io(g, "v", 1), ktg_io(g, "i", 1);
            kl_tensor *x = ktg_tensor(KL_F32, 2, d, NULL), *o[2] = {0};
            for (int64_t i = 0; i < 2 * D; i++) ((float *)x->data)[i] = (float)(int)(ktg_rand() * 5000); /* ties */
            KT_OK(ktg_run(g, &x, 1, o, &e), &e);
            float *ref = malloc(sizeof(float) * (size_t)D);
            for (int r = 0; r < 2; r++) {
                const float *xr = (const float *)x->data + r * D;
                for (int64_t i = 0; i < D; i++) ref[i] = largest ? xr[i] : -xr[i];
                qsort(ref, (size_t)D, sizeof(float), topk_ref_cmp_desc);
                for (int64_t t = 0; t < K; t++) {
                    float v = ((float *)o[0]->data)[r * K + t];
                    int64_t ix = ((int64_t *)o[1]->data)[r * K + t];
                    KT_NEAR(v, largest ? ref[t] : -ref[t], 0);
                    KT_NEAR(xr[ix], v, 0);
                    if (t > 0 && ((float *)o[0]->data)[r * K + t - 1] == v) /* ties: lower index first */
                        KT_CHECK(((int64_t *)o[1]->data)[r * K + t - 1] < ix);
                }
            }
            free(ref);
            kl_tensor_free(x), kl_tensor_free(o[0]), kl_tensor_free(o[1]), kl_tensor_free(tk);
            kl_graph_free(g);
        }
}
