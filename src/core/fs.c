/* Files: atomic writes (temp + fsync + rename + fsync of the folder),
 * whole-file reads (regular files only, size-capped, through the core
 * allocator), mkdir -p, rm -rf. */
#include "core_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct kl_afile {
    FILE *f;
    char *path, *tmp;
};

static void dir_of(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

int kl_fsync_dir(const char *dir, kl_err *e) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return kl_err_set(e, -errno, "%s: %s", dir, strerror(errno));
    int rc = KL_OK;
    if (fsync(fd) != 0 && errno != EINVAL) rc = kl_err_set(e, -errno, "fsync %s: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

int kl_afile_open(const char *path, kl_afile **out, kl_err *e) {
    *out = NULL;
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    kl_afile *a = calloc(1, sizeof *a);
    if (a) {
        a->path = strdup(path);
        a->tmp = malloc(strlen(dir) + strlen(base) + 16);
    }
    if (!a || !a->path || !a->tmp) {
        if (a) { free(a->path); free(a->tmp); free(a); }
        return kl_err_set(e, KL_ENOMEM, "out of memory");
    }
    /* hidden temp name in the same folder, so the rename is atomic */
    sprintf(a->tmp, "%s/.%s.tmp-XXXXXX", dir, base);
    int fd = mkostemp(a->tmp, O_CLOEXEC);
    if (fd < 0) {
        int rc = kl_err_set(e, -errno, "%s: cannot create a temporary file: %s", path, strerror(errno));
        free(a->path); free(a->tmp); free(a);
        return rc;
    }
    fchmod(fd, 0644);
    a->f = fdopen(fd, "wb");
    if (!a->f) {
        int rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
        close(fd); unlink(a->tmp);
        free(a->path); free(a->tmp); free(a);
        return rc;
    }
    *out = a;
    return KL_OK;
}

FILE *kl_afile_stream(kl_afile *a) { return a->f; }

int kl_afile_write(kl_afile *a, const void *data, size_t len, kl_err *e) {
    if (len && fwrite(data, 1, len, a->f) != len)
        return kl_err_set(e, -errno ? -errno : -EIO, "%s: write: %s", a->path, strerror(errno ? errno : EIO));
    return KL_OK;
}

void kl_afile_abort(kl_afile *a) {
    if (!a) return;
    if (a->f) fclose(a->f);
    unlink(a->tmp);
    free(a->path);
    free(a->tmp);
    free(a);
}

int kl_afile_commit(kl_afile *a, kl_err *e) {
    int rc = KL_OK;
    if (fflush(a->f) != 0 || ferror(a->f)) {
        rc = kl_err_set(e, errno ? -errno : -EIO, "%s: write: %s", a->path, strerror(errno ? errno : EIO));
    } else if (fsync(fileno(a->f)) != 0) {
        rc = kl_err_set(e, -errno, "%s: fsync: %s", a->path, strerror(errno));
    }
    if (fclose(a->f) != 0 && rc == KL_OK) rc = kl_err_set(e, -errno, "%s: close: %s", a->path, strerror(errno));
    a->f = NULL;
    if (rc == KL_OK && rename(a->tmp, a->path) != 0)
        rc = kl_err_set(e, -errno, "%s: rename: %s", a->path, strerror(errno));
    if (rc != KL_OK) {
        unlink(a->tmp);
    } else {
        char dir[4096];
        dir_of(a->path, dir, sizeof dir);
        rc = kl_fsync_dir(dir, e);
    }
    free(a->path);
    free(a->tmp);
    free(a);
    return rc;
}

int kl_write_file_atomic(const char *path, const void *data, size_t len, kl_err *e) {
    kl_afile *a;
    int rc = kl_afile_open(path, &a, e);
    if (rc) return rc;
    rc = kl_afile_write(a, data, len, e);
    if (rc) { kl_afile_abort(a); return rc; }
    return kl_afile_commit(a, e);
}

/* Reads fd whole into a block of the core allocator, refusing more than max
 * bytes; starts from the size fstat reported (a file can grow, /proc files
 * say 0) and reads at most max + 1 bytes to tell "exactly max" from more. */
static int read_fd(int fd, const char *path, size_t hint, uint64_t max, char **out, size_t *len, kl_err *e) {
    char b1[32];
    if (max > SIZE_MAX / 4) max = SIZE_MAX / 4;
    size_t limit = (size_t)max + 1, cap = hint < 4095 ? 4096 : hint + 1, n = 0;
    if (cap > limit) cap = limit;
    kl_err ae = {0};
    char *buf = kl_mem_alloc_e(cap + 1, KL_TAG_OTHER, &ae);
    if (!buf) return kl_err_set(e, KL_ENOMEM, "%s: %s", path, ae.msg);
    for (;;) {
        if (n == cap) {
            if (cap >= limit) break;
            size_t ncap = cap > limit / 2 ? limit : cap * 2;
            char *nb = kl_mem_alloc_e(ncap + 1, KL_TAG_OTHER, &ae);
            if (!nb) { kl_mem_free(buf); return kl_err_set(e, KL_ENOMEM, "%s: %s", path, ae.msg); }
            memcpy(nb, buf, n);
            kl_mem_free(buf);
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int rc = kl_err_set(e, -errno, "%s: read: %s", path, strerror(errno));
            kl_mem_free(buf);
            return rc;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (n > max) {
        kl_mem_free(buf);
        return kl_err_set(e, KL_ERANGE, "%s: larger than the %s limit of a whole-file read", path,
                          kl_fmt_bytes(max, b1, sizeof b1));
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return KL_OK;
}

int kl_read_file_max(const char *path, uint64_t max, char **out, size_t *len, kl_err *e) {
    *out = NULL;
    if (len) *len = 0;
    char b1[32], b2[32];
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before fstat refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return kl_err_set(e, errno == ENOENT ? KL_ENOTFOUND : -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = KL_OK;
    if (fstat(fd, &st) != 0) {
        rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = kl_err_set(e, KL_EINVAL, "%s: not a regular file (%s)", path,
                        S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO"
                        : S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device"
                        : S_ISSOCK(st.st_mode) ? "a socket" : "a special file");
    } else if ((uint64_t)st.st_size > max) {
        rc = kl_err_set(e, KL_ERANGE, "%s: %s is larger than the %s limit of a whole-file read", path,
                        kl_fmt_bytes((uint64_t)st.st_size, b1, sizeof b1), kl_fmt_bytes(max, b2, sizeof b2));
    } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    } else {
        rc = read_fd(fd, path, (size_t)st.st_size, max, out, len, e);
    }
    close(fd);
    return rc;
}

int kl_read_file(const char *path, char **out, size_t *len, kl_err *e) {
    return kl_read_file_max(path, KL_READ_FILE_MAX, out, len, e);
}

int kl_copy_file(const char *src, const char *dst, kl_err *e) {
    char *buf = NULL;
    size_t len = 0;
    int rc = kl_read_file(src, &buf, &len, e);
    if (!rc) rc = kl_write_file_atomic(dst, buf, len, e);
    kl_mem_free(buf);
    return rc;
}

int kl_mkdir_p(const char *path, kl_err *e) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return kl_err_set(e, KL_EINVAL, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return kl_err_set(e, -errno, "mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return kl_err_set(e, -errno, "mkdir %s: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) return kl_err_set(e, KL_EEXIST, "%s exists and is not a folder", buf);
    return KL_OK;
}

int kl_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int kl_rm_rf(const char *path, kl_err *e) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? KL_OK : kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return kl_err_set(e, -errno, "%s: %s", path, strerror(errno));
        struct dirent *de;
        int rc = KL_OK;
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            size_t n = strlen(path) + strlen(de->d_name) + 2;
            char *child = malloc(n);
            if (!child) { rc = kl_err_set(e, KL_ENOMEM, "out of memory"); break; }
            snprintf(child, n, "%s/%s", path, de->d_name);
            rc = kl_rm_rf(child, e);
            free(child);
            if (rc) break;
        }
        closedir(d);
        if (rc) return rc;
        if (rmdir(path) != 0) return kl_err_set(e, -errno, "rmdir %s: %s", path, strerror(errno));
        return KL_OK;
    }
    if (unlink(path) != 0) return kl_err_set(e, -errno, "unlink %s: %s", path, strerror(errno));
    return KL_OK;
}
