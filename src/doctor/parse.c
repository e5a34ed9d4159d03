/* keel doctor: pure parsers of the texts the checks read (/proc/sys values,
 * sysfs choice lists, /proc/meminfo, /proc/cpuinfo, /proc/self/mountinfo,
 * the NVIDIA driver version, nvcc and nvidia-smi output), dotted version
 * comparison and the CUDA toolkit -> minimum driver table. No system access. */
#include "doctor_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------
 * Small text helpers
 * ------------------------------------------------------------------ */

static void copy_str(char *dst, size_t n, const char *src, size_t len) {
    if (n == 0) return;
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = 0;
}

/* Next line of *p as [start, end) without the newline; 0 at the end. */
static int next_line(const char **p, const char **start, size_t *len) {
    const char *s = *p;
    if (!s || !*s) return 0;
    const char *nl = strchr(s, '\n');
    *start = s;
    *len = nl ? (size_t)(nl - s) : strlen(s);
    *p = nl ? nl + 1 : s + *len;
    return 1;
}

/* 1 when the white-space separated words of [s, s+len) include word. */
static int has_word(const char *s, size_t len, const char *word) {
    size_t wl = strlen(word);
    size_t i = 0;
    while (i < len) {
        while (i < len && isspace((unsigned char)s[i])) i++;
        size_t b = i;
        while (i < len && !isspace((unsigned char)s[i])) i++;
        if (i - b == wl && memcmp(s + b, word, wl) == 0) return 1;
    }
    return 0;
}

int kl_doctor_parse_int(const char *text, int64_t *out) {
    if (!text) return KL_EINVAL;
    while (isspace((unsigned char)*text)) text++;
    if (!*text) return KL_EPARSE;
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (end == text || errno == ERANGE) return KL_EPARSE;
    if (*end && !isspace((unsigned char)*end)) return KL_EPARSE;
    *out = (int64_t)v;
    return KL_OK;
}

int kl_doctor_parse_selected(const char *text, char *out, size_t n) {
    if (!text) return KL_EINVAL;
    const char *a = strchr(text, '[');
    if (!a) return KL_EPARSE;
    const char *b = strchr(a + 1, ']');
    if (!b || b == a + 1) return KL_EPARSE;
    copy_str(out, n, a + 1, (size_t)(b - a - 1));
    return KL_OK;
}

int kl_doctor_parse_meminfo(const char *text, const char *key, uint64_t *bytes) {
    if (!text || !key) return KL_EINVAL;
    size_t kl = strlen(key);
    const char *p = text, *s;
    size_t len;
    while (next_line(&p, &s, &len)) {
        if (len <= kl || memcmp(s, key, kl) != 0 || s[kl] != ':') continue;
        const char *v = s + kl + 1;
        while (v < s + len && isspace((unsigned char)*v)) v++;
        if (v >= s + len || !isdigit((unsigned char)*v)) return KL_EPARSE;
        errno = 0;
        char *end;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno == ERANGE) return KL_EPARSE;
        while (end < s + len && *end == ' ') end++;
        uint64_t mul = 1;
        if (end + 1 < s + len && (end[0] == 'k' || end[0] == 'K') && end[1] == 'B') mul = 1024;
        *bytes = (uint64_t)x * mul;
        return KL_OK;
    }
    return KL_ENOTFOUND;
}

/* ------------------------------------------------------------------
 * /proc/cpuinfo
 * ------------------------------------------------------------------ */

/* Splits "key\t: value" into key (trimmed) and value; 0 when no colon. */
static int split_kv(const char *s, size_t len, const char **k, size_t *klen, const char **v, size_t *vlen) {
    const char *c = memchr(s, ':', len);
    if (!c) return 0;
    size_t kn = (size_t)(c - s);
    while (kn > 0 && isspace((unsigned char)s[kn - 1])) kn--;
    const char *vs = c + 1;
    const char *ve = s + len;
    while (vs < ve && isspace((unsigned char)*vs)) vs++;
    while (ve > vs && isspace((unsigned char)ve[-1])) ve--;
    *k = s;
    *klen = kn;
    *v = vs;
    *vlen = (size_t)(ve - vs);
    return 1;
}

static int key_is(const char *k, size_t klen, const char *name) {
    return klen == strlen(name) && memcmp(k, name, klen) == 0;
}

int kl_doctor_parse_cpuinfo(const char *text, kl_doctor_cpu *out) {
    if (!text || !out) return KL_EINVAL;
    memset(out, 0, sizeof *out);
    int have_flags = 0, have_features = 0;
    char part[64] = "", hardware[128] = "";
    const char *p = text, *s, *k, *v;
    size_t len, klen, vlen;
    while (next_line(&p, &s, &len)) {
        if (!split_kv(s, len, &k, &klen, &v, &vlen)) continue;
        if (key_is(k, klen, "processor")) {
            out->processors++;
        } else if (key_is(k, klen, "model name") && !out->model[0]) {
            copy_str(out->model, sizeof out->model, v, vlen);
        } else if (key_is(k, klen, "flags") && !have_flags) {
            have_flags = 1;
            out->x86 = 1;
            out->avx2 = has_word(v, vlen, "avx2");
            out->fma = has_word(v, vlen, "fma");
            out->avx512f = has_word(v, vlen, "avx512f");
            out->f16c = has_word(v, vlen, "f16c");
        } else if (key_is(k, klen, "Features") && !have_features) {
            have_features = 1;
            out->neon = has_word(v, vlen, "asimd") || has_word(v, vlen, "neon");
        } else if (key_is(k, klen, "CPU part") && !part[0]) {
            copy_str(part, sizeof part, v, vlen);
        } else if (key_is(k, klen, "Hardware") && !hardware[0]) {
            copy_str(hardware, sizeof hardware, v, vlen);
        }
    }
    if (!out->model[0]) {
        if (hardware[0])
            copy_str(out->model, sizeof out->model, hardware, strlen(hardware));
        else if (part[0])
            snprintf(out->model, sizeof out->model, "CPU part %s", part);
    }
    if (!out->processors && !have_flags && !have_features && !out->model[0]) return KL_EPARSE;
    return KL_OK;
}

/* ------------------------------------------------------------------
 * /proc/self/mountinfo
 * "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
 * ------------------------------------------------------------------ */

/* Copies a field, decoding the octal escapes mountinfo uses (\040 space). */
static void unescape(char *dst, size_t n, const char *src, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        if (src[i] == '\\' && i + 3 < len && src[i + 1] >= '0' && src[i + 1] <= '3' &&
            src[i + 2] >= '0' && src[i + 2] <= '7' && src[i + 3] >= '0' && src[i + 3] <= '7') {
            dst[o++] = (char)(((src[i + 1] - '0') << 6) | ((src[i + 2] - '0') << 3) | (src[i + 3] - '0'));
            i += 3;
        } else {
            dst[o++] = src[i];
        }
    }
    dst[o] = 0;
}

/* Splits a line into space-separated fields (at most max). */
static int split_fields(const char *s, size_t len, const char **f, size_t *fl, int max) {
    int n = 0;
    size_t i = 0;
    while (i < len && n < max) {
        while (i < len && s[i] == ' ') i++;
        if (i >= len) break;
        size_t b = i;
        while (i < len && s[i] != ' ') i++;
        f[n] = s + b;
        fl[n] = i - b;
        n++;
    }
    return n;
}

static int path_under(const char *path, const char *mnt) {
    size_t m = strlen(mnt);
    if (m == 1 && mnt[0] == '/') return path[0] == '/';
    if (strncmp(path, mnt, m) != 0) return 0;
    return path[m] == 0 || path[m] == '/';
}

int kl_doctor_find_mount(const char *mountinfo, const char *path, kl_doctor_mount *out) {
    if (!mountinfo || !path || !out) return KL_EINVAL;
    memset(out, 0, sizeof *out);
    size_t best = 0;
    int found = 0, parsed = 0;
    const char *p = mountinfo, *s;
    size_t len;
    while (next_line(&p, &s, &len)) {
        const char *f[64];
        size_t fl[64];
        int nf = split_fields(s, len, f, fl, 64);
        if (nf == 0) continue;
        int sep = -1;
        for (int i = 6; i < nf; i++)
            if (fl[i] == 1 && f[i][0] == '-') { sep = i; break; }
        if (nf < 6 || sep < 0 || sep + 2 >= nf) continue; /* malformed line: skip */
        parsed++;
        char mnt[512];
        unescape(mnt, sizeof mnt, f[4], fl[4]);
        if (!path_under(path, mnt)) continue;
        size_t ml = strlen(mnt);
        if (found && ml < best) continue;
        found = 1;
        best = ml;
        snprintf(out->mount_point, sizeof out->mount_point, "%s", mnt);
        unescape(out->root, sizeof out->root, f[3], fl[3]);
        copy_str(out->options, sizeof out->options, f[5], fl[5]);
        copy_str(out->fstype, sizeof out->fstype, f[sep + 1], fl[sep + 1]);
        unescape(out->source, sizeof out->source, f[sep + 2], fl[sep + 2]);
        out->super_options[0] = 0;
        if (sep + 3 < nf) copy_str(out->super_options, sizeof out->super_options, f[sep + 3], fl[sep + 3]);
    }
    if (found) return KL_OK;
    return parsed ? KL_ENOTFOUND : KL_EPARSE;
}

int kl_doctor_has_option(const char *options, const char *opt) {
    if (!options || !opt) return 0;
    size_t ol = strlen(opt);
    const char *p = options;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == ol && memcmp(p, opt, l) == 0) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------
 * NVIDIA driver, nvcc, nvidia-smi
 * ------------------------------------------------------------------ */

/* 1 when [s, s+len) is digits '.' digits ('.' digits)*. */
static int is_version(const char *s, size_t len) {
    int dots = 0;
    if (len == 0 || !isdigit((unsigned char)s[0]) || !isdigit((unsigned char)s[len - 1])) return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '.') {
            if (s[i - 1] == '.') return 0;
            dots++;
        } else if (!isdigit((unsigned char)s[i])) {
            return 0;
        }
    }
    return dots >= 1;
}

int kl_doctor_parse_nvidia_version(const char *text, char *out, size_t n) {
    if (!text) return KL_EINVAL;
    const char *p = text, *s;
    size_t len;
    while (next_line(&p, &s, &len)) {
        const char *m = NULL;
        for (size_t i = 0; i + 4 <= len; i++)
            if (memcmp(s + i, "NVRM", 4) == 0) { m = s + i; break; }
        if (!m) continue;
        const char *e = s + len;
        const char *q = m;
        while (q < e) {
            while (q < e && isspace((unsigned char)*q)) q++;
            const char *b = q;
            while (q < e && !isspace((unsigned char)*q)) q++;
            if (is_version(b, (size_t)(q - b))) {
                copy_str(out, n, b, (size_t)(q - b));
                return KL_OK;
            }
        }
    }
    return KL_EPARSE;
}

int kl_doctor_parse_nvcc_version(const char *text, char *out, size_t n) {
    if (!text) return KL_EINVAL;
    const char *r = strstr(text, "release ");
    if (!r) return KL_EPARSE;
    r += 8;
    const char *e = r;
    while (isdigit((unsigned char)*e) || *e == '.') e++;
    if (!is_version(r, (size_t)(e - r))) return KL_EPARSE;
    copy_str(out, n, r, (size_t)(e - r));
    return KL_OK;
}

/* "81559 MiB" -> bytes; 0 when not a number ("[N/A]"). */
static uint64_t parse_mib(const char *s, size_t len) {
    char tmp[64];
    copy_str(tmp, sizeof tmp, s, len);
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    if (end == tmp || errno || v < 0) return 0;
    while (*end == ' ') end++;
    double mul = 1024.0 * 1024.0;
    if (strncmp(end, "GiB", 3) == 0) mul = 1024.0 * 1024.0 * 1024.0;
    else if (strncmp(end, "KiB", 3) == 0) mul = 1024.0;
    else if (*end == 'B') mul = 1.0;
    return (uint64_t)(v * mul);
}

static void trim(const char **s, size_t *len) {
    while (*len && isspace((unsigned char)**s)) { (*s)++; (*len)--; }
    while (*len && isspace((unsigned char)(*s)[*len - 1])) (*len)--;
}

int kl_doctor_parse_nvsmi(const char *text, kl_doctor_gpu *gpus, int max, int *n) {
    if (!text || !n) return KL_EINVAL;
    *n = 0;
    const char *p = text, *s;
    size_t len;
    while (next_line(&p, &s, &len)) {
        trim(&s, &len);
        if (!len) continue;
        /* split at the last two commas: the name may contain commas */
        const char *c2 = NULL, *c1 = NULL;
        for (size_t i = len; i-- > 0;) {
            if (s[i] != ',') continue;
            if (!c2) c2 = s + i;
            else { c1 = s + i; break; }
        }
        if (!c1 || !c2) return KL_EPARSE;
        const char *name = s, *tot = c1 + 1, *used = c2 + 1;
        size_t nl = (size_t)(c1 - s), tl = (size_t)(c2 - tot), ul = (size_t)(s + len - used);
        trim(&name, &nl);
        trim(&tot, &tl);
        trim(&used, &ul);
        if (!tl || !isdigit((unsigned char)tot[0])) {
            if (!(tl && tot[0] == '[')) return KL_EPARSE; /* "[N/A]" is allowed */
        }
        if (*n < max && gpus) {
            kl_doctor_gpu *g = &gpus[*n];
            copy_str(g->name, sizeof g->name, name, nl);
            g->mem_total = parse_mib(tot, tl);
            g->mem_used = parse_mib(used, ul);
        }
        (*n)++;
    }
    if (*n > max) *n = max;
    return KL_OK;
}

/* ------------------------------------------------------------------
 * Versions and the CUDA table
 * ------------------------------------------------------------------ */

int kl_doctor_version_cmp(const char *a, const char *b) {
    while ((a && *a) || (b && *b)) {
        unsigned long x = 0, y = 0;
        if (a && *a) {
            char *e;
            x = strtoul(a, &e, 10);
            a = (*e == '.') ? e + 1 : (*e ? NULL : e);
        }
        if (b && *b) {
            char *e;
            y = strtoul(b, &e, 10);
            b = (*e == '.') ? e + 1 : (*e ? NULL : e);
        }
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

/* Minimum Linux x86_64 driver of each CUDA toolkit (GA release), from the
 * "CUDA Toolkit and Corresponding Driver Versions" table of NVIDIA's CUDA
 * toolkit release notes. Newest first. Keep docs/doctor.md in step. */
static const kl_doctor_cuda_req cuda_table[] = {
    {"13.0", "580.65.06"}, {"12.9", "575.51.03"}, {"12.8", "570.26"},
    {"12.6", "560.28.03"}, {"12.5", "555.42.02"}, {"12.4", "550.54.14"},
    {"12.3", "545.23.06"}, {"12.2", "535.54.03"}, {"12.1", "530.30.02"},
    {"12.0", "525.60.13"}, {"11.8", "520.61.05"}, {"11.7", "515.43.04"},
    {"11.6", "510.39.01"}, {"11.5", "495.29.05"}, {"11.4", "470.42.01"},
    {"11.3", "465.19.01"}, {"11.2", "460.27.03"}, {"11.1", "455.23"},
    {"11.0", "450.36.06"}, {"10.2", "440.33"},    {"10.1", "418.39"},
    {"10.0", "410.48"},    {"9.2", "396.26"},     {"9.1", "390.46"},
    {"9.0", "384.81"},
};

/* CUDA minor-version compatibility: any toolkit of a major runs (without
 * PTX JIT and some newer features) on drivers from this version on. */
static const struct { int major; const char *min_driver; } cuda_compat[] = {
    {13, "580.65.06"}, {12, "525.60.13"}, {11, "450.80.02"},
};

const kl_doctor_cuda_req *kl_doctor_cuda_table(size_t *n) {
    if (n) *n = KL_ARRAY_LEN(cuda_table);
    return cuda_table;
}

/* "12.4.131" -> major 12, minor 4. */
static int major_minor(const char *v, unsigned long *maj, unsigned long *min) {
    char *e;
    if (!v || !isdigit((unsigned char)*v)) return 0;
    *maj = strtoul(v, &e, 10);
    *min = 0;
    if (*e == '.') *min = strtoul(e + 1, &e, 10);
    return 1;
}

int kl_doctor_cuda_min_driver(const char *cuda, const char **min_driver) {
    unsigned long maj, min;
    if (!major_minor(cuda, &maj, &min)) return KL_EINVAL;
    for (size_t i = 0; i < KL_ARRAY_LEN(cuda_table); i++) {
        unsigned long tm = 0, tn = 0;
        major_minor(cuda_table[i].cuda, &tm, &tn);
        if (tm == maj && tn == min) {
            *min_driver = cuda_table[i].min_driver;
            return KL_OK;
        }
    }
    return KL_ENOTFOUND;
}

int kl_doctor_cuda_compat_driver(int major, const char **min_driver) {
    for (size_t i = 0; i < KL_ARRAY_LEN(cuda_compat); i++)
        if (cuda_compat[i].major == major) {
            *min_driver = cuda_compat[i].min_driver;
            return KL_OK;
        }
    return KL_ENOTFOUND;
}

int kl_doctor_driver_max_cuda(const char *driver, char *out, size_t n) {
    if (!driver || !is_version(driver, strlen(driver))) return KL_EINVAL;
    for (size_t i = 0; i < KL_ARRAY_LEN(cuda_table); i++)
        if (kl_doctor_version_cmp(driver, cuda_table[i].min_driver) >= 0) {
            snprintf(out, n, "%s", cuda_table[i].cuda);
            return KL_OK;
        }
    return KL_ENOTFOUND;
}

/* ------------------------------------------------------------------
 * MPI hostfile
 * ------------------------------------------------------------------ */

int kl_doctor_parse_hostfile(const char *text, char (*hosts)[256], int max, int *n) {
    const char *p = text, *ls;
    size_t len;
    int line = 0;
    *n = 0;
    while (next_line(&p, &ls, &len)) {
        line++;
        const char *h = memchr(ls, '#', len);
        size_t l = h ? (size_t)(h - ls) : len, i = 0;
        while (i < l && isspace((unsigned char)ls[i])) i++;
        if (i == l) continue;
        size_t b = i;
        while (i < l && !isspace((unsigned char)ls[i])) i++;
        for (size_t j = i; j < l;) { /* key=value words: slots, max_slots (whole numbers) */
            while (j < l && isspace((unsigned char)ls[j])) j++;
            size_t w = j;
            while (j < l && !isspace((unsigned char)ls[j])) j++;
            if (w == j) break;
            const char *eq = memchr(ls + w, '=', j - w);
            int ok = eq && eq + 1 < ls + j;
            for (const char *d = eq ? eq + 1 : ls + j; ok && d < ls + j; d++) ok = isdigit((unsigned char)*d) != 0;
            if (!ok) {
                *n = line;
                return KL_EPARSE;
            }
        }
        if (*n < max) copy_str(hosts[(*n)++], 256, ls + b, i - b);
    }
    return KL_OK;
}
