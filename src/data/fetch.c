/* Resumable downloads with libcurl: the transfer goes to DEST.part and is
 * resumed with an HTTP Range request (If-Range with the remembered ETag) when
 * interrupted; the finished file is checked against Content-MD5 (when the
 * server sent one) and an expected sha256, then renamed into place. */
#include "data_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    FILE *f;
    char etag[256];
    char md5_b64[64];
    int write_failed;
} xfer;

static size_t on_data(char *p, size_t sz, size_t n, void *ud) {
    xfer *x = ud;
    size_t w = fwrite(p, sz, n, x->f);
    if (w != n) x->write_failed = errno ? errno : EIO;
    return w * sz;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t outn) {
    size_t k = strlen(name);
    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':') return;
    const char *v = line + k + 1;
    const char *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    snprintf(out, outn, "%.*s", (int)(end - v), v);
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    xfer *x = ud;
    size_t len = sz * n;
    if (len > 5 && !strncmp(p, "HTTP/", 5)) { x->md5_b64[0] = 0; } /* a new response (redirects) */
    header_value(p, len, "ETag", x->etag, sizeof x->etag);
    header_value(p, len, "Content-MD5", x->md5_b64, sizeof x->md5_b64);
    return len;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int md5_file_b64(const char *path, char *out, size_t outn) {
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_md5(), NULL);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(c, buf, n);
    fclose(f);
    unsigned char d[16];
    unsigned int dl = 0;
    EVP_DigestFinal_ex(c, d, &dl);
    EVP_MD_CTX_free(c);
    unsigned char b64[32];
    EVP_EncodeBlock(b64, d, 16);
    snprintf(out, outn, "%s", (char *)b64);
    return KL_OK;
}

int kl_fetch_url(const char *url, const char *dest, const kl_fetch_opts *o, char *sha256_hex, kl_err *e) {
    kl_fetch_opts def = {0};
    if (!o) o = &def;
    int retries = o->retries > 0 ? o->retries : o->retries < 0 ? 0 : 5;
    pthread_once(&curl_once, curl_init);
    char part[4200], etagp[4300];
    snprintf(part, sizeof part, "%s.part", dest);
    snprintf(etagp, sizeof etagp, "%s.part.etag", dest);
    char etag[256] = "", md5[64] = "";
    {
        char *t = NULL;
        size_t n;
        if (kl_read_file(etagp, &t, &n, NULL) == KL_OK) { snprintf(etag, sizeof etag, "%s", t); kl_mem_free(t); }
    }
    int rc = KL_OK;
    char cerr[CURL_ERROR_SIZE];
    for (int attempt = 0; attempt <= retries; attempt++) {
        struct stat st;
        long long have = stat(part, &st) == 0 ? (long long)st.st_size : 0;
        if (have == 0) etag[0] = 0;
        xfer x = {0};
        x.f = fopen(part, have ? "ab" : "wb");
        if (!x.f) return kl_err_set(e, -errno, "%s: %s", part, strerror(errno));
        CURL *c = curl_easy_init();
        if (!c) { fclose(x.f); return kl_err_set(e, KL_ENOMEM, "curl_easy_init failed"); }
        struct curl_slist *hdrs = NULL;
        char rng[64], ifr[300];
        if (have) {
            snprintf(rng, sizeof rng, "%lld-", have);
            curl_easy_setopt(c, CURLOPT_RANGE, rng);
            if (etag[0]) {
                snprintf(ifr, sizeof ifr, "If-Range: %s", etag);
                hdrs = curl_slist_append(hdrs, ifr);
            }
        }
        cerr[0] = 0;
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s > 0 ? o->connect_timeout_s : 30L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->low_speed_time_s > 0 ? o->low_speed_time_s : 60L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "keel");
        CURLcode cr = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(hdrs);
        curl_easy_cleanup(c);
        int ferr = fflush(x.f) ? errno : 0;
        if (fsync(fileno(x.f)) && !ferr) ferr = errno;
        fclose(x.f);
        if (x.write_failed || ferr) {
            int en = x.write_failed ? x.write_failed : ferr;
            return kl_err_set(e, -en, "%s: writing %s: %s", url, part, strerror(en));
        }
        if (x.etag[0]) {
            snprintf(etag, sizeof etag, "%s", x.etag);
            kl_write_file_atomic(etagp, etag, strlen(etag), NULL);
        }
        if (x.md5_b64[0]) snprintf(md5, sizeof md5, "%s", x.md5_b64);
        if (have && status == 200) {
            /* the server ignored the range (or the file changed): we appended a whole body; start over */
            unlink(part);
            unlink(etagp);
            etag[0] = 0;
            rc = kl_err_set(e, KL_EPARSE, "%s: server does not support resume (or the file changed); restarting", url);
            continue;
        }
        if (cr == CURLE_OK) { rc = KL_OK; break; }
        if (status == 416) { /* range not satisfiable: we already have everything? verify below */
            rc = KL_OK;
            break;
        }
        rc = kl_err_set(e, KL_ETIMEOUT, "%s: transfer failed (HTTP %ld): %s", url, status,
                        cerr[0] ? cerr : curl_easy_strerror(cr));
        if (status >= 400 && status < 500) break; /* not transient */
        kl_log(KL_LOG_WARN, "fetch", "%s: attempt %d failed (%s); resuming", url, attempt + 1, cerr[0] ? cerr : curl_easy_strerror(cr));
        if (attempt < retries) usleep(200000u << (attempt < 4 ? attempt : 4));
    }
    if (rc) {
        kl_err_prefix(e, "download incomplete, partial file kept for resume at %s", part);
        return rc;
    }
    /* transport checks */
    if (md5[0]) {
        char got[64];
        if ((rc = md5_file_b64(part, got, sizeof got))) return kl_err_set(e, rc, "%s: %s", part, strerror(-rc));
        if (strcmp(got, md5)) {
            unlink(part);
            unlink(etagp);
            return kl_err_set(e, KL_ECHECKSUM, "%s: Content-MD5 mismatch: server said %s, got %s (partial file removed)", url, md5, got);
        }
    }
    char hex[65];
    if ((rc = kl_sha256_file_hex(part, hex, e))) return rc;
    if (o->expected_sha256 && strcasecmp(o->expected_sha256, hex)) {
        unlink(part);
        unlink(etagp);
        return kl_err_set(e, KL_ECHECKSUM, "%s: sha256 mismatch: expected %s, got %s (download removed)", url, o->expected_sha256, hex);
    }
    if (rename(part, dest)) return kl_err_set(e, -errno, "rename %s: %s", part, strerror(errno));
    unlink(etagp);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", dest);
    char *sl = strrchr(dir, '/');
    if (sl) { *sl = 0; kl_fsync_dir(dir, NULL); }
    if (sha256_hex) memcpy(sha256_hex, hex, 65);
    return KL_OK;
}
