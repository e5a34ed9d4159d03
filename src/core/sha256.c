/* SHA-256 of buffers, streams and files through OpenSSL libcrypto (which
 * uses the SHA-NI instructions where the CPU has them). */
#include "core_int.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct kl_sha256 {
    EVP_MD_CTX *ctx;
};

kl_sha256 *kl_sha256_new(void) {
    kl_sha256 *h = malloc(sizeof *h);
    if (!h) return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        return NULL;
    }
    return h;
}

void kl_sha256_update(kl_sha256 *h, const void *data, size_t len) {
    if (len) EVP_DigestUpdate(h->ctx, data, len);
}

void kl_sha256_final(kl_sha256 *h, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_DigestFinal_ex(h->ctx, out, &n);
    EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL);
}

void kl_sha256_free(kl_sha256 *h) {
    if (!h) return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void kl_sha256_buf(const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

void kl_sha256_hex(const uint8_t d[32], char hex[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = 0;
}

void kl_sha256_buf_hex(const void *data, size_t len, char hex[65]) {
    uint8_t d[32];
    kl_sha256_buf(data, len, d);
    kl_sha256_hex(d, hex);
}

static int hash_fd(int fd, const char *name, uint8_t out[32], kl_err *e) {
    kl_sha256 *h = kl_sha256_new();
    if (!h) return kl_err_set(e, KL_ENOMEM, "sha256: out of memory");
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    if (!buf) { kl_sha256_free(h); return kl_err_set(e, KL_ENOMEM, "sha256: out of memory"); }
    int rc = KL_OK;
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = kl_err_set(e, -errno, "%s: read: %s", name, strerror(errno));
            break;
        }
        if (n == 0) break;
        kl_sha256_update(h, buf, (size_t)n);
    }
    if (rc == KL_OK) kl_sha256_final(h, out);
    free(buf);
    kl_sha256_free(h);
    return rc;
}

int kl_sha256_file(const char *path, uint8_t out[32], kl_err *e) {
    /* O_NONBLOCK: a FIFO is refused below instead of waited on */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = KL_OK;
    if (fstat(fd, &st) != 0) rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = kl_err_set(e, KL_EINVAL, "%s: not a regular file", path);
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    if (rc) { close(fd); return rc; }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    rc = hash_fd(fd, path, out, e);
    close(fd);
    return rc;
}

int kl_sha256_stream(FILE *f, uint8_t out[32], kl_err *e) {
    kl_sha256 *h = kl_sha256_new();
    if (!h) return kl_err_set(e, KL_ENOMEM, "sha256: out of memory");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) kl_sha256_update(h, buf, n);
    int rc = KL_OK;
    if (ferror(f)) rc = kl_err_set(e, KL_EPARSE, "sha256: read error on stream");
    else kl_sha256_final(h, out);
    kl_sha256_free(h);
    return rc;
}

int kl_sha256_file_hex(const char *path, char hex[65], kl_err *e) {
    uint8_t d[32];
    int rc = kl_sha256_file(path, d, e);
    if (rc == KL_OK) kl_sha256_hex(d, hex);
    return rc;
}
