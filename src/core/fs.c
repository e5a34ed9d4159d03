/* Files: atomic writes (temp + fsync + rename + fsync of the folder),
 * whole-file reads, mkdir -p, rm -rf. */
#include "core_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
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

int kl_read_file(const char *path, char **out, size_t *len, kl_err *e) {
    *out = NULL;
    if (len) *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kl_err_set(e, errno == ENOENT ? KL_ENOTFOUND : -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int rc = kl_err_set(e, -errno, "%s: %s", path, strerror(errno)); close(fd); return rc; }
    size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 65536, n = 0;
    char *buf = malloc(cap);
    if (!buf) { close(fd); return kl_err_set(e, KL_ENOMEM, "%s: out of memory", path); }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); close(fd); return kl_err_set(e, KL_ENOMEM, "%s: out of memory", path); }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int rc = kl_err_set(e, -errno, "%s: read: %s", path, strerror(errno));
            free(buf); close(fd);
            return rc;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return KL_OK;
}

int kl_copy_file(const char *src, const char *dst, kl_err *e) {
    char *buf = NULL;
    size_t len = 0;
    int rc = kl_read_file(src, &buf, &len, e);
    if (!rc) rc = kl_write_file_atomic(dst, buf, len, e);
    free(buf);
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
