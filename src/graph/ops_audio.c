/* Audio front-end ops of opset 17: DFT, STFT (both on the shared FFT of
 * src/tensor/fft.c, computed in double precision), the HannWindow,
 * HammingWindow and BlackmanWindow generators and MelWeightMatrix (the
 * triangular mel filter bank of the ONNX reference). Complex values are a
 * trailing dimension of 2 (real, imaginary); a trailing 1 is a real signal.
 * Lengths given as input values (dft_length, frame_length, window sizes)
 * make those shapes data-dependent: infer reads them when they are known. */
#include "graph/graph_int.h"

#include <math.h>
#include <string.h>

#define NEED(t)                                       \
    do {                                              \
        if (!(t) || !(t)->data) return KL__NEED_DATA; \
    } while (0)

/* A length given as a one-element integer tensor, in [lo, hi]. */
static int length_input(const kl_gnode *n, const kl_tensor *t, const char *what, int64_t lo, int64_t hi, int64_t *out,
                        kl_err *e) {
    if (!kl_dtype_is_int(t->dtype) || kl_tensor_numel(t) != 1)
        return kl__fail_node(e, n, KL_ESHAPE, "%s must be one integer (got %s, %lld values)", what,
                             kl_dtype_name(t->dtype), (long long)kl_tensor_numel(t));
    *out = kl__int_at(t, 0);
    if (*out < lo || *out > hi)
        return kl__fail_node(e, n, KL_ERANGE, "%s = %lld is outside %lld..%lld", what, (long long)*out, (long long)lo,
                             (long long)hi);
    return KL_OK;
}

static int float_signal(const kl_gnode *n, const kl_tensor *x, kl_err *e) {
    if (x->dtype != KL_F32 && x->dtype != KL_F64)
        return kl__fail_node(e, n, KL_ETYPE, "opset %d: dtype %s (float32, float64)", n->opset,
                             kl_dtype_name(x->dtype));
    if (x->rank < 2 || (x->dims[x->rank - 1] != 1 && x->dims[x->rank - 1] != 2))
        return kl__fail_node(e, n, KL_ESHAPE, "input must end in a dimension of 1 (real) or 2 (complex), rank >= 2");
    return KL_OK;
}

/* A plan of length len and its buffers: the signal (len complex) and scratch. */
typedef struct {
    kl_fft *f;
    double *buf, *scratch;
} fft_job;

static int job_new(const kl_gnode *n, int64_t len, fft_job *j, kl_err *e) {
    memset(j, 0, sizeof *j);
    int rc = kl_fft_new(len, &j->f, e);
    if (rc) return kl__fail_node(e, n, rc, "FFT of length %lld: %s", (long long)len, e ? e->msg : "");
    j->buf = kl_mem_alloc_e(sizeof(double) * (2 * (size_t)len + kl_fft_scratch_doubles(j->f)), KL_TAG_WORKSPACE, e);
    if (!j->buf) {
        kl_fft_free(j->f);
        return e ? e->code : KL_ENOMEM;
    }
    j->scratch = j->buf + 2 * len;
    return KL_OK;
}

static void job_free(fft_job *j) {
    kl_mem_free(j->buf);
    kl_fft_free(j->f);
}

/* ================================================================== *
 * DFT (opset 17): along axis (not the trailing complex one), dft_length
 * zero-pads or truncates the signal, inverse divides by the length,
 * onesided keeps bins 0..n/2.
 * ================================================================== */

typedef struct {
    int64_t outer, len, inner, n, bins, axis;
    int complex_in, inverse;
} dft_geom;

static int dft_params(kl_gnode *n, kl_tensor *const *in, int n_in, dft_geom *g, kl_err *e) {
    const kl_tensor *x = in[0];
    int rc = float_signal(n, x, e);
    if (rc) return rc;
    int r = x->rank;
    int64_t axis = kl_gnode_attr_int(n, "axis", 1);
    if (axis < 0) axis += r; /* -2 is the last signal axis */
    if (axis < 0 || axis > r - 2)
        return kl__fail_node(e, n, KL_EINVAL, "axis %lld is not a signal axis of a rank-%d input",
                             (long long)kl_gnode_attr_int(n, "axis", 1), r);
    memset(g, 0, sizeof *g);
    g->axis = axis;
    g->outer = g->inner = 1;
    for (int i = 0; i < axis; i++) g->outer *= x->dims[i];
    for (int i = (int)axis + 1; i < r - 1; i++) g->inner *= x->dims[i];
    g->len = x->dims[axis];
    g->complex_in = x->dims[r - 1] == 2;
    g->inverse = kl_gnode_attr_int(n, "inverse", 0) != 0;
    g->n = g->len;
    if (n_in > 1 && in[1]) {
        NEED(in[1]);
        if ((rc = length_input(n, in[1], "dft_length", 1, KL_FFT_MAX_N, &g->n, e))) return rc;
    } else if (g->n < 1) return kl__fail_node(e, n, KL_ESHAPE, "an empty signal axis and no dft_length");
    int onesided = kl_gnode_attr_int(n, "onesided", 0) != 0;
    if (onesided && g->inverse)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: onesided=1 with inverse=1 (a one-sided spectrum in)",
                             n->opset);
    g->bins = onesided ? g->n / 2 + 1 : g->n;
    return KL_OK;
}

static int dft_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    dft_geom g;
    int rc = dft_params(n, in, n_in, &g, e);
    if (rc) return rc;
    int64_t d[KL_MAX_DIMS];
    memcpy(d, in[0]->dims, sizeof(int64_t) * (size_t)in[0]->rank);
    d[g.axis] = g.bins;
    d[in[0]->rank - 1] = 2;
    kl__set_shape(&out[0], in[0]->dtype, in[0]->rank, d);
    return KL_OK;
}

static double get_d(const kl_tensor *t, int64_t i) {
    return t->dtype == KL_F32 ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
}
static void set_d(kl_tensor *t, int64_t i, double v) {
    if (t->dtype == KL_F32) ((float *)t->data)[i] = (float)v;
    else ((double *)t->data)[i] = v;
}

static int dft_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    dft_geom g;
    fft_job j;
    int rc = dft_params(n, in, n_in, &g, e);
    if (rc) return rc;
    if (!g.outer || !g.inner) return KL_OK;
    if ((rc = job_new(n, g.n, &j, e))) return rc;
    int64_t C = g.complex_in ? 2 : 1, take = KL_MIN(g.len, g.n);
    double s = g.inverse ? 1.0 / (double)g.n : 1.0;
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t i = 0; i < g.inner; i++) {
            memset(j.buf, 0, sizeof(double) * 2 * (size_t)g.n);
            for (int64_t k = 0; k < take; k++) {
                int64_t at = ((o * g.len + k) * g.inner + i) * C;
                j.buf[2 * k] = get_d(in[0], at);
                if (C == 2) j.buf[2 * k + 1] = get_d(in[0], at + 1);
            }
            kl_fft_run(j.f, g.inverse, j.buf, j.scratch);
            for (int64_t k = 0; k < g.bins; k++) {
                int64_t at = ((o * g.bins + k) * g.inner + i) * 2;
                set_d(out[0], at, j.buf[2 * k] * s);
                set_d(out[0], at + 1, j.buf[2 * k + 1] * s);
            }
        }
    job_free(&j);
    return KL_OK;
}

/* ================================================================== *
 * STFT (opset 17): signal [batch, length, 1|2], frame_step, an optional
 * window (its length is the frame length) and/or frame_length; output
 * [batch, frames, bins, 2], frames = (length - frame_length) / step + 1.
 * ================================================================== */

typedef struct {
    int64_t batch, len, step, fl, frames, bins;
    int complex_in;
} stft_geom;

static int stft_params(kl_gnode *n, kl_tensor *const *in, int n_in, stft_geom *g, kl_err *e) {
    const kl_tensor *x = in[0], *w = n_in > 2 ? in[2] : NULL, *fl = n_in > 3 ? in[3] : NULL;
    int rc = float_signal(n, x, e);
    if (rc) return rc;
    if (x->rank != 3) return kl__fail_node(e, n, KL_ESHAPE, "signal must be [batch, length, 1 or 2], rank %d", x->rank);
    memset(g, 0, sizeof *g);
    g->batch = x->dims[0], g->len = x->dims[1], g->complex_in = x->dims[2] == 2;
    NEED(in[1]);
    if ((rc = length_input(n, in[1], "frame_step", 1, INT64_MAX, &g->step, e))) return rc;
    g->fl = -1;
    if (w) {
        if (w->rank != 1 || w->dtype != x->dtype)
            return kl__fail_node(e, n, KL_ESHAPE, "window must be 1-D %s", kl_dtype_name(x->dtype));
        g->fl = w->dims[0];
    }
    if (fl) {
        int64_t v;
        NEED(fl);
        if ((rc = length_input(n, fl, "frame_length", 1, KL_FFT_MAX_N, &v, e))) return rc;
        if (g->fl >= 0 && v != g->fl)
            return kl__fail_node(e, n, KL_ESHAPE, "frame_length %lld differs from the window's length %lld",
                                 (long long)v, (long long)g->fl);
        g->fl = v;
    }
    if (g->fl < 1 || g->fl > KL_FFT_MAX_N)
        return kl__fail_node(e, n, KL_ESHAPE, "no frame length (a window or frame_length of 1..%lld is needed)",
                             (long long)KL_FFT_MAX_N);
    if (g->fl > g->len)
        return kl__fail_node(e, n, KL_ESHAPE, "frame length %lld exceeds the signal length %lld", (long long)g->fl,
                             (long long)g->len);
    g->frames = (g->len - g->fl) / g->step + 1;
    g->bins = kl_gnode_attr_int(n, "onesided", 1) ? g->fl / 2 + 1 : g->fl;
    return KL_OK;
}

static int stft_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    stft_geom g;
    int rc = stft_params(n, in, n_in, &g, e);
    if (rc) return rc;
    int64_t d[4] = {g.batch, g.frames, g.bins, 2};
    kl__set_shape(&out[0], in[0]->dtype, 4, d);
    return KL_OK;
}

static int stft_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                    kl_err *e) {
    stft_geom g;
    fft_job j;
    int rc = stft_params(n, in, n_in, &g, e);
    if (rc) return rc;
    if (!g.batch) return KL_OK;
    const kl_tensor *w = n_in > 2 ? in[2] : NULL;
    if ((rc = job_new(n, g.fl, &j, e))) return rc;
    int64_t C = g.complex_in ? 2 : 1;
    for (int64_t b = 0; b < g.batch; b++)
        for (int64_t f = 0; f < g.frames; f++) {
            for (int64_t k = 0; k < g.fl; k++) {
                int64_t at = (b * g.len + f * g.step + k) * C;
                double wk = w ? get_d(w, k) : 1.0;
                j.buf[2 * k] = get_d(in[0], at) * wk;
                j.buf[2 * k + 1] = C == 2 ? get_d(in[0], at + 1) * wk : 0.0;
            }
            kl_fft_run(j.f, 0, j.buf, j.scratch);
            for (int64_t k = 0; k < g.bins; k++) {
                int64_t at = ((b * g.frames + f) * g.bins + k) * 2;
                set_d(out[0], at, j.buf[2 * k]);
                set_d(out[0], at + 1, j.buf[2 * k + 1]);
            }
        }
    job_free(&j);
    return KL_OK;
}

/* ================================================================== *
 * Windows: w[k] = sum_t a_t cos(2 pi t k / N), N = size (periodic) or
 * size - 1 (symmetric); a symmetric window of size 1 is [1] (NumPy, torch).
 * Output dtype from output_datatype (default float).
 * ================================================================== */

#define WINDOW_MAX ((int64_t)1 << 31)

static int out_dtype(kl_gnode *n, kl_dtype *dt, kl_err *e) {
    int64_t t = kl_gnode_attr_int(n, "output_datatype", 1);
    if (kl_dtype_from_onnx((int)t, dt) || *dt == KL_BOOL)
        return kl__fail_node(e, n, KL_EUNSUPPORTED, "opset %d: output_datatype %lld is not a supported numeric type",
                             n->opset, (long long)t);
    return KL_OK;
}

static int window_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_dtype dt;
    int64_t size;
    int rc = out_dtype(n, &dt, e);
    if (rc) return rc;
    NEED(in[0]);
    if ((rc = length_input(n, in[0], "size", 0, WINDOW_MAX, &size, e))) return rc;
    kl__set_shape(&out[0], dt, 1, &size);
    return KL_OK;
}

static int window_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                      kl_err *e) {
    double a[3] = {0.5, -0.5, 0}; /* Hann */
    if (!strcmp(n->op_type, "HammingWindow")) a[0] = 25.0 / 46.0, a[1] = -(21.0 / 46.0);
    else if (!strcmp(n->op_type, "BlackmanWindow")) a[0] = 0.42, a[1] = -0.5, a[2] = 0.08;
    int64_t size = out[0]->dims[0], N = kl_gnode_attr_int(n, "periodic", 1) ? size : size - 1;
    for (int64_t k = 0; k < size; k++) {
        double t = N ? 2.0 * M_PI * (double)k / (double)N : 0;
        kl__set_dbl(out[0], k, N ? a[0] + a[1] * cos(t) + a[2] * cos(2 * t) : 1.0);
    }
    return KL_OK;
}

/* ================================================================== *
 * MelWeightMatrix: [dft_length/2 + 1, num_mel_bins], triangles between
 * num_mel_bins + 2 points equally spaced on the mel scale (2595 log10(1 +
 * f/700)) from lower_edge_hertz to upper_edge_hertz, each point at FFT bin
 * floor((dft_length + 1) f / sample_rate), as the ONNX reference computes
 * them (spacing (high - low) / (num_mel_bins + 2)). Rows past the spectrum
 * (an edge above the Nyquist frequency) are left out.
 * ================================================================== */

typedef struct {
    int64_t mels, dft, rate;
    double lo, hi;
} mel_params;

static int mel_read(kl_gnode *n, kl_tensor *const *in, mel_params *p, kl_err *e) {
    int rc;
    for (int i = 0; i < 5; i++) NEED(in[i]);
    if ((rc = length_input(n, in[0], "num_mel_bins", 1, 1 << 20, &p->mels, e)) ||
        (rc = length_input(n, in[1], "dft_length", 1, 1 << 24, &p->dft, e)) ||
        (rc = length_input(n, in[2], "sample_rate", 1, INT32_MAX, &p->rate, e)))
        return rc;
    for (int i = 3; i < 5; i++)
        if (!kl_dtype_is_float(in[i]->dtype) || kl_tensor_numel(in[i]) != 1)
            return kl__fail_node(e, n, KL_ESHAPE, "%s must be one float",
                                 i == 3 ? "lower_edge_hertz" : "upper_edge_hertz");
    p->lo = kl__dbl_at(in[3], 0), p->hi = kl__dbl_at(in[4], 0);
    if (!(p->lo >= 0) || !(p->hi >= p->lo) || !isfinite(p->hi))
        return kl__fail_node(e, n, KL_EINVAL, "edges %g..%g Hz (need 0 <= lower <= upper, finite)", p->lo, p->hi);
    if ((p->dft / 2 + 1) * p->mels > ((int64_t)1 << 28))
        return kl__fail_node(e, n, KL_ERANGE, "a %lld x %lld matrix is too large", (long long)(p->dft / 2 + 1),
                             (long long)p->mels);
    return KL_OK;
}

static int mel_infer(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *out, int n_out, size_t *ws, kl_err *e) {
    kl_dtype dt;
    mel_params p;
    int rc = out_dtype(n, &dt, e);
    if (rc || (rc = mel_read(n, in, &p, e))) return rc;
    int64_t d[2] = {p.dft / 2 + 1, p.mels};
    kl__set_shape(&out[0], dt, 2, d);
    return KL_OK;
}

static int64_t mel_point(const mel_params *p, int64_t i) {
    double lo = 2595.0 * log10(1.0 + p->lo / 700.0), hi = 2595.0 * log10(1.0 + p->hi / 700.0);
    double mel = (double)i * ((hi - lo) / (double)(p->mels + 2)) + lo;
    double hz = 700.0 * (pow(10.0, mel / 2595.0) - 1.0);
    return (int64_t)floor((double)(p->dft + 1) * hz / (double)p->rate);
}

static int mel_run(kl_gnode *n, kl_tensor *const *in, int n_in, kl_tensor *const *out, int n_out, kl_exec *x,
                   kl_err *e) {
    mel_params p;
    int rc = mel_read(n, in, &p, e);
    if (rc) return rc;
    int64_t rows = p.dft / 2 + 1, M = p.mels;
    memset(out[0]->data, 0, out[0]->nbytes);
    for (int64_t i = 0; i < M; i++) {
        int64_t l = mel_point(&p, i), c = mel_point(&p, i + 1), h = mel_point(&p, i + 2);
        if (c == l) {
            if (c < rows) kl__set_dbl(out[0], c * M + i, 1.0);
        } else
            for (int64_t j = l; j <= c && j < rows; j++)
                kl__set_dbl(out[0], j * M + i, (double)(j - l) / (double)(c - l));
        for (int64_t j = c; j < h && j < rows; j++) kl__set_dbl(out[0], j * M + i, (double)(h - j) / (double)(h - c));
    }
    return KL_OK;
}

static const char *const a_dft[] = {"axis", "inverse", "onesided", NULL};
static const char *const a_stft[] = {"onesided", NULL};
static const char *const a_window[] = {"output_datatype", "periodic", NULL};
static const char *const a_mel[] = {"output_datatype", NULL};

const kl_op kl__ops_audio[] = {
    {"DFT", "", 17, 19, 1, 2, 1, 1, a_dft, NULL, dft_infer, dft_run, 0},
    {"STFT", "", 17, 19, 2, 4, 1, 1, a_stft, NULL, stft_infer, stft_run, 0},
    {"HannWindow", "", 17, 19, 1, 1, 1, 1, a_window, NULL, window_infer, window_run, 0},
    {"HammingWindow", "", 17, 19, 1, 1, 1, 1, a_window, NULL, window_infer, window_run, 0},
    {"BlackmanWindow", "", 17, 19, 1, 1, 1, 1, a_window, NULL, window_infer, window_run, 0},
    {"MelWeightMatrix", "", 17, 19, 5, 5, 1, 1, a_mel, NULL, mel_infer, mel_run, 0},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0},
};
