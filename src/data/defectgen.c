/* The defects generator: brushed-metal surfaces (streaked noise along a
 * brush direction, fine grain, mottling) under varying light (gradient,
 * vignette, brightness, tint), in three classes: good, scratch (thin
 * antialiased curved lines, bright or dark) and dent (soft dark blobs with a
 * highlight rim). All classes carry distractors (specks, faint broad smudges)
 * so that the task is learnable but not trivial. Image i is a pure function
 * of (seed, i, size): each has its own random stream. */
#include <keel/defectgen.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const class_names[KL_DEFECT_CLASSES] = {"good", "scratch", "dent"};

const char *kl_defect_class_name(int cls) {
    return cls >= 0 && cls < KL_DEFECT_CLASSES ? class_names[cls] : "?";
}
int kl_defectgen_class(int64_t i) { return (int)(i % KL_DEFECT_CLASSES); }

/* ================================================================== *
 * Random numbers: splitmix64 per image
 * ================================================================== */

typedef struct { uint64_t s; } rng;
static uint64_t next(rng *r) { return kl_splitmix64(&r->s); }
static float uni(rng *r) { return (float)((next(r) >> 40) * (1.0 / 16777216.0)); }         /* [0,1) */
static float range(rng *r, float lo, float hi) { return lo + (hi - lo) * uni(r); }

/* ================================================================== *
 * Drawing on a float surface
 * ================================================================== */

/* Adds amp * exp(-d²/2σ²) around (cx, cy). */
static void blob(float *f, int S, float cx, float cy, float sx, float sy, float amp) {
    int x0 = (int)floorf(cx - 3 * sx), x1 = (int)ceilf(cx + 3 * sx), y0 = (int)floorf(cy - 3 * sy), y1 = (int)ceilf(cy + 3 * sy);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > S - 1) x1 = S - 1;
    if (y1 > S - 1) y1 = S - 1;
    float ix = 1.f / (2 * sx * sx), iy = 1.f / (2 * sy * sy);
    for (int y = y0; y <= y1; y++) {
        float dy = (float)y - cy, ey = dy * dy * iy;
        for (int x = x0; x <= x1; x++) {
            float dx = (float)x - cx;
            f[(size_t)y * S + x] += amp * expf(-(dx * dx * ix + ey));
        }
    }
}

/* Max-combines a line of width w (antialiased edge) into mask. */
static void segment(float *mask, int S, float ax, float ay, float bx, float by, float w) {
    float pad = w / 2 + 1.5f;
    int x0 = (int)floorf(fminf(ax, bx) - pad), x1 = (int)ceilf(fmaxf(ax, bx) + pad);
    int y0 = (int)floorf(fminf(ay, by) - pad), y1 = (int)ceilf(fmaxf(ay, by) + pad);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > S - 1) x1 = S - 1;
    if (y1 > S - 1) y1 = S - 1;
    float vx = bx - ax, vy = by - ay, vv = vx * vx + vy * vy;
    if (vv < 1e-6f) vv = 1e-6f;
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) {
            float px = (float)x - ax, py = (float)y - ay;
            float t = (px * vx + py * vy) / vv;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            float dx = px - t * vx, dy = py - t * vy;
            float d = sqrtf(dx * dx + dy * dy);
            float v = 1.f - (d - w / 2);
            v = v > 1 ? 1 : v;
            if (v > mask[(size_t)y * S + x]) mask[(size_t)y * S + x] = v;
        }
}

/* ================================================================== *
 * One image
 * ================================================================== */

int kl_defectgen_render(uint64_t seed, int64_t i, int S, kl_image *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    if (S < 16 || S > 8192) return kl_err_set(e, KL_EINVAL, "defectgen: size %d not in 16..8192", S);
    rng r = {seed};
    rng q = {next(&r) ^ (uint64_t)i};
    r.s = next(&q); /* (seed, i) -> an independent stream */
    int cls = kl_defectgen_class(i);
    size_t np = (size_t)S * S;
    float *f = kl_mem_alloc_e(np * sizeof(float) * 2, KL_TAG_WORKSPACE, e);
    if (!f) return KL_ENOMEM;
    float *mask = f + np;
    float k = (float)S / 256.f; /* scale of features with the image size */

    /* --- brushed metal: streaks along the brush direction + grain --- */
    float base = range(&r, 105, 165), streak = range(&r, 5, 13), grain = range(&r, 2.5f, 6);
    int vertical = uni(&r) < 0.5f;
    int L = (int)(range(&r, 0.08f, 0.3f) * S) | 1;
    float *noise = mask; /* (scratch space before the mask is used) */
    for (int y = 0; y < S; y++) {
        for (int x = 0; x < S + L; x++) noise[x] = uni(&r) * 2 - 1;
        float acc = 0;
        for (int x = 0; x < L; x++) acc += noise[x];
        float row = (uni(&r) * 2 - 1) * streak * 0.6f; /* per-line offset: the brush marks */
        float inv = 1.7f / sqrtf((float)L);
        for (int x = 0; x < S; x++) {
            float v = base + row + streak * acc * inv + grain * (uni(&r) * 2 - 1);
            if (vertical) f[(size_t)x * S + y] = v;
            else f[(size_t)y * S + x] = v;
            acc += noise[x + L] - noise[x];
        }
    }
    /* mottling: a few broad waves */
    for (int w = 0; w < 3; w++) {
        float fx = range(&r, -3, 3) * 6.2832f / S, fy = range(&r, -3, 3) * 6.2832f / S, ph = range(&r, 0, 6.2832f);
        float a = range(&r, 1, 4);
        float *sx = mask, *cx = mask + S, *sy = mask + 2 * S, *cy = mask + 3 * S; /* separable: sin(u+v) */
        for (int t = 0; t < S; t++) {
            sx[t] = a * sinf(fx * t); cx[t] = a * cosf(fx * t);
            sy[t] = sinf(fy * t + ph); cy[t] = cosf(fy * t + ph);
        }
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) f[(size_t)y * S + x] += sx[x] * cy[y] + cx[x] * sy[y];
    }
    /* distractors in every class: specks and faint broad smudges */
    int nspeck = (int)(uni(&r) * 6);
    for (int s = 0; s < nspeck; s++)
        blob(f, S, range(&r, 0, S), range(&r, 0, S), range(&r, 0.5f, 1.3f) * k, range(&r, 0.5f, 1.3f) * k,
             range(&r, -25, 25));
    int nsmudge = (int)(uni(&r) * 3);
    for (int s = 0; s < nsmudge; s++)
        blob(f, S, range(&r, 0, S), range(&r, 0, S), range(&r, 0.12f, 0.25f) * S, range(&r, 0.12f, 0.25f) * S,
             range(&r, -10, 6));

    /* --- the defect --- */
    if (cls == KL_DEFECT_SCRATCH) {
        int ns = 1 + (int)(uni(&r) * 2.2f);
        for (int s = 0; s < ns; s++) {
            memset(mask, 0, np * sizeof(float));
            float len = range(&r, 0.3f, 0.85f) * S, ang = range(&r, 0, 3.14159f);
            float cx = range(&r, 0.2f, 0.8f) * S, cy = range(&r, 0.2f, 0.8f) * S;
            float ax = cx - cosf(ang) * len / 2, ay = cy - sinf(ang) * len / 2;
            float bx = cx + cosf(ang) * len / 2, by = cy + sinf(ang) * len / 2;
            float bend = range(&r, -0.12f, 0.12f) * len; /* quadratic bend across the line */
            float nx = -sinf(ang), ny = cosf(ang), w = range(&r, 1.0f, 2.4f) * k;
            float px = ax, py = ay;
            for (int t = 1; t <= 12; t++) {
                float u = t / 12.f, b = 4 * u * (1 - u) * bend;
                float qx = ax + (bx - ax) * u + nx * b, qy = ay + (by - ay) * u + ny * b;
                segment(mask, S, px, py, qx, qy, w);
                px = qx; py = qy;
            }
            float amp = uni(&r) < 0.7f ? range(&r, 35, 70) : -range(&r, 35, 60);
            for (size_t p = 0; p < np; p++)
                if (mask[p] > 0) f[p] += amp * mask[p];
        }
    } else if (cls == KL_DEFECT_DENT) {
        int nd = 1 + (int)(uni(&r) * 1.6f);
        for (int d = 0; d < nd; d++) {
            float cx = range(&r, 0.15f, 0.85f) * S, cy = range(&r, 0.15f, 0.85f) * S;
            float sx = range(&r, 0.04f, 0.09f) * S, sy = sx * range(&r, 0.7f, 1.3f);
            float depth = range(&r, 30, 60), la = range(&r, 0, 6.2832f);
            blob(f, S, cx, cy, sx, sy, -depth);
            blob(f, S, cx + cosf(la) * sx * 0.9f, cy + sinf(la) * sy * 0.9f, sx * 0.6f, sy * 0.6f, depth * 0.35f);
        }
    }

    /* --- light: gradient, vignette, brightness, tint --- */
    float ga = range(&r, -0.35f, 0.35f), gt = range(&r, 0, 6.2832f), gc = cosf(gt) / S, gs = sinf(gt) / S;
    float vb = range(&r, 0, 0.45f), vx = range(&r, 0.35f, 0.65f) * S, vy = range(&r, 0.35f, 0.65f) * S;
    float bright = range(&r, 0.75f, 1.2f), tr = 1 + range(&r, -0.05f, 0.06f), tb = 1 + range(&r, -0.05f, 0.07f);
    float iv = 1.f / ((float)S * S * 0.5f);
    int rc = kl_image_alloc(out, S, S, 3, e);
    if (rc) { kl_mem_free(f); return rc; }
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            float dx = x - vx, dy = y - vy;
            float light = bright * (1 + ga * ((x - S / 2) * gc + (y - S / 2) * gs)) * (1 - vb * (dx * dx + dy * dy) * iv);
            float v = f[(size_t)y * S + x] * light;
            float c[3] = {v * tr, v, v * tb};
            uint8_t *o = out->px + ((size_t)y * S + x) * 3;
            for (int q = 0; q < 3; q++) o[q] = (uint8_t)(c[q] < 0 ? 0 : c[q] > 255 ? 255 : (int)(c[q] + 0.5f));
        }
    kl_mem_free(f);
    return KL_OK;
}

/* ================================================================== *
 * Writing a data set
 * ================================================================== */

typedef struct {
    const kl_defectgen_opts *o;
    kl_progress *prog;
    pthread_mutex_t mu;
    int64_t err_at;          /* lowest failing index */
    kl_err err;
    uint64_t bytes;
    int digits;
} gen_ctx;

static void file_name(const gen_ctx *g, int64_t i, char *buf, size_t n) {
    snprintf(buf, n, "%s/%0*lld.jpg", kl_defect_class_name(kl_defectgen_class(i)), g->digits, (long long)i);
}

static int write_plain(const char *path, const void *data, size_t len, kl_err *e) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return kl_err_set(e, -errno, "%s: %s", tmp, strerror(errno));
    int ok = fwrite(data, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int rc = kl_err_set(e, -(errno ? errno : EIO), "%s: write: %s", path, strerror(errno ? errno : EIO));
        remove(tmp);
        return rc;
    }
    return KL_OK;
}

static void gen_range(void *ctx, size_t begin, size_t end, int chunk) {
    gen_ctx *g = ctx;
    uint64_t bytes = 0;
    for (size_t i = begin; i < end; i++) {
        kl_err e = {0};
        kl_image img;
        uint8_t *jpg = NULL;
        size_t len = 0;
        char rel[64], path[4096];
        int rc = kl_defectgen_render(g->o->seed, (int64_t)i, g->o->size, &img, &e);
        if (rc == KL_OK) rc = kl_image_encode_jpeg(&img, g->o->quality, &jpg, &len, &e);
        kl_image_release(&img);
        if (rc == KL_OK) {
            file_name(g, (int64_t)i, rel, sizeof rel);
            snprintf(path, sizeof path, "%s/%s", g->o->out_dir, rel);
            rc = write_plain(path, jpg, len, &e);
        }
        free(jpg);
        bytes += len;
        if (rc) {
            pthread_mutex_lock(&g->mu);
            if (g->err_at < 0 || (int64_t)i < g->err_at) { g->err_at = (int64_t)i; g->err = e; }
            pthread_mutex_unlock(&g->mu);
            break;
        }
        if (g->prog) kl_progress_add(g->prog, 1);
    }
    pthread_mutex_lock(&g->mu);
    g->bytes += bytes;
    pthread_mutex_unlock(&g->mu);
}

int kl_defectgen_write(const kl_defectgen_opts *o, kl_defectgen_result *res, kl_err *e) {
    memset(res, 0, sizeof *res);
    if (o->n < 0) return kl_err_set(e, KL_EINVAL, "defectgen: --n must be >= 0");
    if (o->quality < 1 || o->quality > 100) return kl_err_set(e, KL_EINVAL, "defectgen: quality %d not in 1..100", o->quality);
    if (o->size < 16 || o->size > 8192) return kl_err_set(e, KL_EINVAL, "defectgen: size %d not in 16..8192", o->size);
    int64_t t0 = kl_time_mono_ns();
    char path[4096];
    int rc = KL_OK;
    for (int c = 0; c < KL_DEFECT_CLASSES && rc == KL_OK; c++) {
        snprintf(path, sizeof path, "%s/%s", o->out_dir, class_names[c]);
        rc = kl_mkdir_p(path, e);
    }
    if (rc) return rc;
    gen_ctx g = {.o = o, .err_at = -1, .digits = 6};
    for (int64_t m = 1000000; m <= o->n - 1 && g.digits < 18; m *= 10) g.digits++;
    pthread_mutex_init(&g.mu, NULL);
    if (o->progress) g.prog = kl_progress_new("datagen defects", (uint64_t)o->n, "images");
    kl_pool_parallel_for(NULL, (size_t)o->n, 16, gen_range, &g);
    kl_progress_finish(g.prog);
    pthread_mutex_destroy(&g.mu);
    if (g.err_at >= 0) {
        *e = g.err;
        return g.err.code ? g.err.code : KL_EINTERNAL;
    }
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "path,label\n");
    for (int64_t i = 0; i < o->n; i++) {
        char rel[64];
        file_name(&g, i, rel, sizeof rel);
        kl_buf_printf(&b, "%s,%s\n", rel, kl_defect_class_name(kl_defectgen_class(i)));
    }
    snprintf(path, sizeof path, "%s/labels.csv", o->out_dir);
    rc = b.failed ? kl_err_set(e, KL_ENOMEM, "out of memory") : kl_write_file_atomic(path, b.data, b.len, e);
    kl_buf_free(&b);
    if (rc) return rc;
    res->written = o->n;
    res->bytes = g.bytes;
    res->seconds = (double)(kl_time_mono_ns() - t0) / 1e9;
    return KL_OK;
}
