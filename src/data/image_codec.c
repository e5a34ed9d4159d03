/* Image decode and encode: JPEG through TurboJPEG (the 2.x tj* API that
 * Debian's libjpeg-turbo 2.1 ships; DCT-domain scaling for smaller targets),
 * PNG through libpng's simplified API. The pixel cap is checked on the header
 * before any pixel memory is allocated, so a 30000x30000 "bomb" costs
 * nothing. TurboJPEG handles are per thread (created on first use, destroyed
 * at thread exit). */
#include <keel/image.h>

#include <png.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

/* ================================================================== *
 * Per-thread TurboJPEG handles
 * ================================================================== */

static pthread_key_t tj_key[2];
static pthread_once_t tj_once = PTHREAD_ONCE_INIT;

static void tj_destroy(void *h) { if (h) tjDestroy((tjhandle)h); }
static void tj_keys(void) {
    pthread_key_create(&tj_key[0], tj_destroy);
    pthread_key_create(&tj_key[1], tj_destroy);
}

/* which 0: decompressor, 1: compressor */
static tjhandle tj_handle(int which) {
    pthread_once(&tj_once, tj_keys);
    tjhandle h = pthread_getspecific(tj_key[which]);
    if (!h) {
        h = which ? tjInitCompress() : tjInitDecompress();
        if (h) pthread_setspecific(tj_key[which], h);
    }
    return h;
}

/* ================================================================== *
 * Format sniffing and small helpers
 * ================================================================== */

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

kl_image_format kl_image_sniff(const void *bytes, size_t len) {
    const uint8_t *b = bytes;
    if (!b) return KL_IMAGE_UNKNOWN;
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return KL_IMAGE_JPEG;
    if (len >= 8 && memcmp(b, png_sig, 8) == 0) return KL_IMAGE_PNG;
    return KL_IMAGE_UNKNOWN;
}

const char *kl_image_format_name(kl_image_format f) {
    return f == KL_IMAGE_JPEG ? "jpeg" : f == KL_IMAGE_PNG ? "png" : "unknown";
}

static const char *nm(const char *what) { return what && *what ? what : "image"; }

static int not_image(const void *bytes, size_t len, const char *what, kl_err *e) {
    if (len == 0) return kl_err_set(e, KL_EPARSE, "%s: zero-size file (not an image)", nm(what));
    const uint8_t *b = bytes;
    if (len >= 2 && b[0] == 0xFF && b[1] == 0xD8)
        return kl_err_set(e, KL_EPARSE, "%s: truncated JPEG (%zu bytes)", nm(what), len);
    if (len < 8 && len > 0 && memcmp(b, png_sig, len) == 0)
        return kl_err_set(e, KL_EPARSE, "%s: truncated PNG (%zu bytes)", nm(what), len);
    return kl_err_set(e, KL_EPARSE, "%s: not a JPEG or PNG image (starts with %02x %02x %02x %02x)", nm(what),
                      b[0], len > 1 ? b[1] : 0, len > 2 ? b[2] : 0, len > 3 ? b[3] : 0);
}

static int check_cap(int w, int h, uint64_t max_pixels, const char *what, kl_err *e) {
    if (w <= 0 || h <= 0) return kl_err_set(e, KL_EPARSE, "%s: zero-size image (%dx%d)", nm(what), w, h);
    uint64_t cap = max_pixels ? max_pixels : KL_IMAGE_MAX_PIXELS_DEFAULT;
    uint64_t px = (uint64_t)w * (uint64_t)h;
    if (px > cap)
        return kl_err_set(e, KL_ERANGE, "%s: %dx%d = %.1f Mpx exceeds the pixel cap of %.1f Mpx (decompression bomb?)",
                          nm(what), w, h, (double)px / 1e6, (double)cap / 1e6);
    return KL_OK;
}

int kl_image_alloc(kl_image *img, int w, int h, int c, kl_err *e) {
    memset(img, 0, sizeof *img);
    if (w <= 0 || h <= 0 || (c != 1 && c != 3 && c != 4))
        return kl_err_set(e, KL_EINVAL, "image: bad size %dx%dx%d", w, h, c);
    size_t n = (size_t)w * (size_t)h * (size_t)c;
    img->px = kl_mem_alloc_e(n, KL_TAG_DATASET, e);
    if (!img->px) return KL_ENOMEM;
    img->w = w; img->h = h; img->c = c;
    return KL_OK;
}

void kl_image_release(kl_image *img) {
    if (!img) return;
    kl_mem_free(img->px);
    memset(img, 0, sizeof *img);
}

int kl_image_to_rgb(kl_image *img, kl_err *e) {
    if (img->c == 3) return KL_OK;
    if (img->c != 1) return kl_err_set(e, KL_EINVAL, "image: cannot convert %d channels to RGB", img->c);
    size_t n = (size_t)img->w * (size_t)img->h;
    uint8_t *p = kl_mem_alloc_e(n * 3, KL_TAG_DATASET, e);
    if (!p) return KL_ENOMEM;
    for (size_t i = 0; i < n; i++) p[3 * i] = p[3 * i + 1] = p[3 * i + 2] = img->px[i];
    kl_mem_free(img->px);
    img->px = p;
    img->c = 3;
    return KL_OK;
}

/* ================================================================== *
 * JPEG
 * ================================================================== */

int kl_image_scaled_size(int w, int h, int min_w, int min_h, int *sw, int *sh) {
    *sw = w; *sh = h;
    if (min_w <= 0 && min_h <= 0) return 8;
    /* TurboJPEG 2.x supports n/8 for n = 1..16; use those <= 1, smallest first */
    for (int num = 1; num < 8; num++) {
        int tw = (w * num + 7) / 8, th = (h * num + 7) / 8;
        if (tw >= min_w && th >= min_h) { *sw = tw; *sh = th; return num; }
    }
    return 8;
}

/* Walks the marker segments up to the first scan (SOS) and reads the frame (SOFn) size.
 * TurboJPEG 2.x accepts a tables-only stream as a header and may then report
 * a previous image's size, so the frame header must be seen here first. */
static int jpeg_sof(const uint8_t *b, size_t len, int *w, int *h) {
    size_t i = 2;
    int seen = 0;
    while (i + 4 <= len) {
        if (b[i] != 0xFF) return -1;
        while (i < len && b[i] == 0xFF) i++;
        if (i >= len) return -2;
        uint8_t m = b[i++];
        if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) continue;
        if (m == 0xD9) return -1;                 /* EOI before any image data */
        if (m == 0xDA) return seen ? 0 : -1;      /* the first scan: the header is complete */
        if (i + 2 > len) return -2;
        size_t seg = ((size_t)b[i] << 8) | b[i + 1];
        if (seg < 2) return -1;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && !seen) {
            if (i + 7 > len) return -2;
            *h = (b[i + 3] << 8) | b[i + 4];
            *w = (b[i + 5] << 8) | b[i + 6];
            seen = 1;
        }
        i += seg;
    }
    return -2;
}

static void tj_reset(int which) {
    pthread_once(&tj_once, tj_keys);
    tjhandle h = pthread_getspecific(tj_key[which]);
    if (h) { tjDestroy(h); pthread_setspecific(tj_key[which], NULL); }
}

static int jpeg_header(tjhandle tj, const void *bytes, size_t len, const char *what, int *w, int *h,
                       int *subsamp, int *cs, kl_err *e) {
    if (len > (size_t)0xFFFFFFFFul) return kl_err_set(e, KL_ERANGE, "%s: JPEG larger than 4 GiB", nm(what));
    int fw = 0, fh = 0, r = jpeg_sof(bytes, len, &fw, &fh);
    if (r == -2) return kl_err_set(e, KL_EPARSE, "%s: truncated JPEG (%zu bytes, ends inside the header)", nm(what), len);
    if (r) return kl_err_set(e, KL_EPARSE, "%s: bad JPEG header: no frame header (SOF) before the image data", nm(what));
    if (fw == 0 || fh == 0) return kl_err_set(e, KL_EPARSE, "%s: zero-size image (%dx%d)", nm(what), fw, fh);
    if (tjDecompressHeader3(tj, bytes, (unsigned long)len, w, h, subsamp, cs) != 0) {
        const char *m = tjGetErrorStr2(tj);
        int rc = kl_err_set(e, KL_EPARSE, "%s: bad JPEG header: %s", nm(what), m);
        tj_reset(0);
        return rc;
    }
    if (*w != fw || *h != fh) {
        tj_reset(0);
        return kl_err_set(e, KL_EPARSE, "%s: bad JPEG header: frame size %dx%d", nm(what), fw, fh);
    }
    return KL_OK;
}

static int jpeg_info(const void *bytes, size_t len, const char *what, int *w, int *h, int *c, kl_err *e) {
    tjhandle tj = tj_handle(0);
    if (!tj) return kl_err_set(e, KL_ENOMEM, "%s: cannot create a TurboJPEG decompressor", nm(what));
    int subsamp, cs;
    int rc = jpeg_header(tj, bytes, len, what, w, h, &subsamp, &cs, e);
    if (rc) return rc;
    *c = cs == TJCS_GRAY ? 1 : 3;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: CMYK JPEG is not supported", nm(what));
    return KL_OK;
}

static int jpeg_decode(const void *bytes, size_t len, const char *what, int min_w, int min_h, uint64_t max_pixels,
                       kl_image *out, kl_err *e) {
    tjhandle tj = tj_handle(0);
    if (!tj) return kl_err_set(e, KL_ENOMEM, "%s: cannot create a TurboJPEG decompressor", nm(what));
    int w, h, subsamp, cs;
    int rc = jpeg_header(tj, bytes, len, what, &w, &h, &subsamp, &cs, e);
    if (rc) return rc;
    if ((rc = check_cap(w, h, max_pixels, what, e))) return rc;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        return kl_err_set(e, KL_EUNSUPPORTED, "%s: CMYK JPEG is not supported", nm(what));
    int c = cs == TJCS_GRAY ? 1 : 3, sw, sh;
    kl_image_scaled_size(w, h, min_w, min_h, &sw, &sh);
    if ((rc = kl_image_alloc(out, sw, sh, c, e))) return rc;
    if (tjDecompress2(tj, bytes, (unsigned long)len, out->px, sw, sw * c, sh, c == 1 ? TJPF_GRAY : TJPF_RGB, 0) != 0) {
        char m[200];
        snprintf(m, sizeof m, "%s", tjGetErrorStr2(tj));
        /* warnings (TJERR_WARNING) decode the whole image; only a premature
         * end (a truncated file: the rest is filled with gray) is an error */
        if (tjGetErrorCode(tj) != TJERR_WARNING || strstr(m, "Premature end")) {
            kl_image_release(out);
            tj_reset(0);
            if (strstr(m, "Premature end") || strstr(m, "end of"))
                return kl_err_set(e, KL_EPARSE, "%s: truncated JPEG (%zu bytes): %s", nm(what), len, m);
            return kl_err_set(e, KL_EPARSE, "%s: corrupt JPEG: %s", nm(what), m);
        }
    }
    return KL_OK;
}

int kl_image_encode_jpeg(const kl_image *img, int quality, uint8_t **out, size_t *len, kl_err *e) {
    *out = NULL; *len = 0;
    if (!img || !img->px || img->w <= 0 || img->h <= 0 || (img->c != 1 && img->c != 3))
        return kl_err_set(e, KL_EINVAL, "encode jpeg: need a 1- or 3-channel image");
    if (quality < 1 || quality > 100) return kl_err_set(e, KL_EINVAL, "encode jpeg: quality %d not in 1..100", quality);
    tjhandle tj = tj_handle(1);
    if (!tj) return kl_err_set(e, KL_ENOMEM, "encode jpeg: cannot create a TurboJPEG compressor");
    int samp = img->c == 1 ? TJSAMP_GRAY : TJSAMP_420;
    unsigned long cap = tjBufSize(img->w, img->h, samp);
    if (cap == (unsigned long)-1) return kl_err_set(e, KL_EINVAL, "encode jpeg: %dx%d too large", img->w, img->h);
    unsigned char *buf = malloc(cap);
    if (!buf) return kl_err_set(e, KL_ENOMEM, "encode jpeg: out of memory (%lu bytes)", cap);
    unsigned long n = cap;
    if (tjCompress2(tj, img->px, img->w, img->w * img->c, img->h, img->c == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &n, samp,
                    quality, TJFLAG_NOREALLOC) != 0) {
        free(buf);
        return kl_err_set(e, KL_EINTERNAL, "encode jpeg: %s", tjGetErrorStr2(tj));
    }
    *out = buf;
    *len = n;
    return KL_OK;
}

/* ================================================================== *
 * PNG (libpng simplified API)
 * ================================================================== */

static int pngerr(png_image *pi, size_t len, const char *what, kl_err *e) {
    const char *m = pi->message[0] ? pi->message : "unknown error";
    int trunc = strstr(m, "Not enough") || strstr(m, "end of") || strstr(m, "EOF") || strstr(m, "truncat") ||
                strstr(m, "Read Error") || strstr(m, "read beyond");
    png_image_free(pi);
    if (trunc) return kl_err_set(e, KL_EPARSE, "%s: truncated PNG (%zu bytes): %s", nm(what), len, m);
    return kl_err_set(e, KL_EPARSE, "%s: corrupt PNG: %s", nm(what), m);
}

static int pngbegin(png_image *pi, const void *bytes, size_t len, const char *what, kl_err *e) {
    memset(pi, 0, sizeof *pi);
    pi->version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(pi, bytes, len)) return pngerr(pi, len, what, e);
    return KL_OK;
}

static int pnginfo(const void *bytes, size_t len, const char *what, int *w, int *h, int *c, kl_err *e) {
    png_image pi;
    int rc = pngbegin(&pi, bytes, len, what, e);
    if (rc) return rc;
    *w = (int)pi.width; *h = (int)pi.height;
    *c = (pi.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
    png_image_free(&pi);
    if ((int64_t)*w != (int64_t)pi.width || (int64_t)*h != (int64_t)pi.height || *w < 0 || *h < 0)
        return kl_err_set(e, KL_ERANGE, "%s: PNG size %ux%u out of range", nm(what), pi.width, pi.height);
    return KL_OK;
}

static int pngdecode(const void *bytes, size_t len, const char *what, uint64_t max_pixels, kl_image *out, kl_err *e) {
    png_image pi;
    int rc = pngbegin(&pi, bytes, len, what, e);
    if (rc) return rc;
    if (pi.width > 0x7FFFFFFFu || pi.height > 0x7FFFFFFFu) {
        png_image_free(&pi);
        return kl_err_set(e, KL_ERANGE, "%s: PNG size %ux%u out of range", nm(what), pi.width, pi.height);
    }
    if ((rc = check_cap((int)pi.width, (int)pi.height, max_pixels, what, e))) { png_image_free(&pi); return rc; }
    int color = (pi.format & PNG_FORMAT_FLAG_COLOR) != 0, alpha = (pi.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    int c = color ? 3 : 1, cin = c + alpha;
    pi.format = color ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB) : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
    if ((rc = kl_image_alloc(out, (int)pi.width, (int)pi.height, cin == 4 ? 4 : (cin == 2 ? 3 : cin), e))) {
        png_image_free(&pi);
        return rc;
    }
    /* (gray+alpha is read into a 3-byte-per-pixel block: room for 2) */
    if (!png_image_finish_read(&pi, NULL, out->px, (png_int_32)(pi.width * (unsigned)cin), NULL)) {
        kl_image_release(out);
        return pngerr(&pi, len, what, e);
    }
    if (alpha) { /* drop alpha in place, front to back (dst never passes src) */
        size_t n = (size_t)out->w * (size_t)out->h;
        uint8_t *p = out->px;
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < c; k++) p[i * (size_t)c + (size_t)k] = p[i * (size_t)cin + (size_t)k];
    }
    out->c = c;
    return KL_OK;
}

/* ================================================================== *
 * Public entry points
 * ================================================================== */

int kl_image_info(const void *bytes, size_t len, const char *what, int *w, int *h, int *c, kl_err *e) {
    int ww = 0, hh = 0, cc = 0, rc;
    switch (kl_image_sniff(bytes, len)) {
    case KL_IMAGE_JPEG: rc = jpeg_info(bytes, len, what, &ww, &hh, &cc, e); break;
    case KL_IMAGE_PNG: rc = pnginfo(bytes, len, what, &ww, &hh, &cc, e); break;
    default: rc = not_image(bytes, len, what, e); break;
    }
    if (rc == KL_OK && (ww <= 0 || hh <= 0)) rc = kl_err_set(e, KL_EPARSE, "%s: zero-size image (%dx%d)", nm(what), ww, hh);
    if (w) *w = rc ? 0 : ww;
    if (h) *h = rc ? 0 : hh;
    if (c) *c = rc ? 0 : cc;
    return rc;
}

int kl_image_decode(const void *bytes, size_t len, const char *what, int min_w, int min_h, uint64_t max_pixels,
                    kl_image *out, kl_err *e) {
    memset(out, 0, sizeof *out);
    int rc;
    switch (kl_image_sniff(bytes, len)) {
    case KL_IMAGE_JPEG: rc = jpeg_decode(bytes, len, what, min_w, min_h, max_pixels, out, e); break;
    case KL_IMAGE_PNG: rc = pngdecode(bytes, len, what, max_pixels, out, e); break;
    default: rc = not_image(bytes, len, what, e); break;
    }
    if (rc) kl_image_release(out);
    return rc;
}
