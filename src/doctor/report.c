/* keel doctor: the report (a list of checks) and its three renderings: an
 * aligned text table with details, JSON, and a reviewable fix script. */
#include "doctor_int.h"

#include <stdlib.h>
#include <string.h>

struct kl_doctor_report {
    kl_doctor_check *checks;
    size_t n, cap;
};

static const char *const status_names[KL_DOCTOR_NSTATUS] = {"pass", "warn", "fail", "info"};

const char *kl_doctor_status_name(kl_doctor_status s) {
    return (unsigned)s < KL_DOCTOR_NSTATUS ? status_names[s] : "unknown";
}

/* ==================================================================
 * The report
 * ================================================================== */

int kl_doctor_report_new(kl_doctor_report **out, kl_err *e) {
    kl_doctor_report *r = calloc(1, sizeof *r);
    *out = r;
    if (!r) return kl_err_set(e, KL_ENOMEM, "doctor: out of memory");
    return KL_OK;
}

int kl_doctor_report_add(kl_doctor_report *r, const kl_doctor_check *c, kl_err *e) {
    if (!r || !c) return kl_err_set(e, KL_EINVAL, "doctor: report and check are required");
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;
        kl_doctor_check *p = realloc(r->checks, cap * sizeof *p);
        if (!p) return kl_err_set(e, KL_ENOMEM, "doctor: out of memory");
        r->checks = p;
        r->cap = cap;
    }
    r->checks[r->n++] = *c;
    return KL_OK;
}

void kl_doctor_report_free(kl_doctor_report *r) {
    if (!r) return;
    free(r->checks);
    free(r);
}

size_t kl_doctor_report_count(const kl_doctor_report *r) { return r ? r->n : 0; }

const kl_doctor_check *kl_doctor_report_at(const kl_doctor_report *r, size_t i) {
    return r && i < r->n ? &r->checks[i] : NULL;
}

const kl_doctor_check *kl_doctor_report_find(const kl_doctor_report *r, const char *id) {
    for (size_t i = 0; r && id && i < r->n; i++)
        if (strcmp(r->checks[i].id, id) == 0) return &r->checks[i];
    return NULL;
}

void kl_doctor_report_counts(const kl_doctor_report *r, int counts[KL_DOCTOR_NSTATUS]) {
    for (int s = 0; s < KL_DOCTOR_NSTATUS; s++) counts[s] = 0;
    for (size_t i = 0; r && i < r->n; i++)
        if ((unsigned)r->checks[i].status < KL_DOCTOR_NSTATUS) counts[r->checks[i].status]++;
}

int kl_doctor_report_failed(const kl_doctor_report *r) {
    for (size_t i = 0; r && i < r->n; i++)
        if (r->checks[i].status == KL_DOCTOR_FAIL) return 1;
    return 0;
}

/* ==================================================================
 * Text
 * ================================================================== */

static const char *const status_labels[KL_DOCTOR_NSTATUS] = {"PASS", "WARN", "FAIL", "INFO"};
static const char *const status_colors[KL_DOCTOR_NSTATUS] = {"\033[32m", "\033[33m", "\033[1;31m",
                                                             "\033[36m"};
#define RESET "\033[0m"

static void put_status(kl_buf *b, kl_doctor_status s, int color) {
    const char *l = (unsigned)s < KL_DOCTOR_NSTATUS ? status_labels[s] : "????";
    if (color && (unsigned)s < KL_DOCTOR_NSTATUS) kl_buf_printf(b, "%s%s" RESET, status_colors[s], l);
    else kl_buf_puts(b, l);
}

static void pad(kl_buf *b, size_t n) {
    while (n--) kl_buf_append(b, " ", 1);
}

/* Appends text word-wrapped to width columns; lines after the first start
 * with indent spaces and prefix (e.g. "# "). Existing newlines are kept. */
static void wrap(kl_buf *b, const char *text, size_t first_col, size_t indent, const char *prefix,
                 size_t width) {
    size_t col = first_col;
    const char *p = text;
    int line_start = 1;
    while (*p) {
        if (*p == '\n') {
            kl_buf_puts(b, "\n");
            pad(b, indent);
            kl_buf_puts(b, prefix);
            col = indent + strlen(prefix);
            line_start = 1;
            p++;
            continue;
        }
        if (*p == ' ') { p++; continue; }
        size_t w = strcspn(p, " \n");
        if (!line_start && col + 1 + w > width) {
            kl_buf_puts(b, "\n");
            pad(b, indent);
            kl_buf_puts(b, prefix);
            col = indent + strlen(prefix);
            line_start = 1;
        }
        if (!line_start) {
            kl_buf_append(b, " ", 1);
            col++;
        }
        kl_buf_append(b, p, w);
        col += w;
        p += w;
        line_start = 0;
    }
}

/* Appends text with every line after the first indented (fix commands). */
static void indent_lines(kl_buf *b, const char *text, size_t indent) {
    for (const char *p = text; *p;) {
        size_t l = strcspn(p, "\n");
        kl_buf_append(b, p, l);
        p += l;
        if (*p == '\n') {
            p++;
            kl_buf_puts(b, "\n");
            pad(b, indent);
        }
    }
}

static void summary_line(const kl_doctor_report *r, kl_buf *b) {
    int c[KL_DOCTOR_NSTATUS];
    kl_doctor_report_counts(r, c);
    kl_buf_printf(b, "%zu checks: %d pass, %d warn, %d fail, %d info\n", kl_doctor_report_count(r),
                  c[KL_DOCTOR_PASS], c[KL_DOCTOR_WARN], c[KL_DOCTOR_FAIL], c[KL_DOCTOR_INFO]);
}

#define MAX_OBS_COL 52

int kl_doctor_format_text(const kl_doctor_report *r, int color, kl_buf *b) {
    size_t wid = strlen("CHECK"), wobs = strlen("OBSERVED");
    size_t n = kl_doctor_report_count(r);
    for (size_t i = 0; i < n; i++) {
        wid = KL_MAX(wid, strlen(r->checks[i].id));
        wobs = KL_MAX(wobs, strlen(r->checks[i].observed));
    }
    wobs = KL_MIN(wobs, (size_t)MAX_OBS_COL);
    /* Rows are indented so that no line starts with "PASS "/"FAIL " (the
     * test driver counts such lines). */
    kl_buf_printf(b, "  %-6s  %-*s  %-*s  %s\n", "STATUS", (int)wid, "CHECK", (int)wobs, "OBSERVED",
                  "RECOMMENDED");
    for (size_t i = 0; i < n; i++) {
        const kl_doctor_check *c = &r->checks[i];
        kl_buf_puts(b, "  ");
        put_status(b, c->status, color);
        kl_buf_printf(b, "    %-*s  ", (int)wid, c->id);
        size_t ol = strlen(c->observed);
        if (ol > wobs) kl_buf_printf(b, "%s\n  %*s", c->observed, (int)(6 + 2 + wid + 2 + wobs + 2), "");
        else kl_buf_printf(b, "%-*s  ", (int)wobs, c->observed);
        kl_buf_printf(b, "%s\n", c->recommended);
    }
    int header = 0;
    /* failures first, then warnings, then information */
    static const kl_doctor_status order[] = {KL_DOCTOR_FAIL, KL_DOCTOR_WARN, KL_DOCTOR_INFO};
    for (size_t k = 0; k < KL_ARRAY_LEN(order) * n; k++) {
        const kl_doctor_check *c = &r->checks[k % n];
        if (c->status != order[k / n]) continue;
        if (!header) {
            kl_buf_puts(b, "\nChecks that did not pass:\n");
            header = 1;
        }
        kl_buf_puts(b, "\n  ");
        put_status(b, c->status, color);
        kl_buf_printf(b, " %s: %s (recommended: %s)\n", c->id, c->observed, c->recommended);
        kl_buf_puts(b, "    why: ");
        wrap(b, c->why, 9, 9, "", 79);
        kl_buf_puts(b, "\n");
        if (c->fix[0]) {
            kl_buf_puts(b, "    fix: ");
            indent_lines(b, c->fix, 9);
            kl_buf_puts(b, "\n");
        }
    }
    kl_buf_puts(b, "\n");
    summary_line(r, b);
    return b->failed ? KL_ENOMEM : KL_OK;
}

/* ==================================================================
 * JSON
 * ================================================================== */

int kl_doctor_format_json(const kl_doctor_report *r, kl_buf *b) {
    size_t n = kl_doctor_report_count(r);
    kl_buf_puts(b, "{\"checks\":[");
    for (size_t i = 0; i < n; i++) {
        const kl_doctor_check *c = &r->checks[i];
        kl_buf_puts(b, i ? ",\n  {\"id\":" : "\n  {\"id\":");
        kl_buf_json_str(b, c->id);
        kl_buf_puts(b, ",\"status\":");
        kl_buf_json_str(b, kl_doctor_status_name(c->status));
        kl_buf_puts(b, ",\"observed\":");
        kl_buf_json_str(b, c->observed);
        kl_buf_puts(b, ",\"recommended\":");
        kl_buf_json_str(b, c->recommended);
        kl_buf_puts(b, ",\"why\":");
        kl_buf_json_str(b, c->why);
        kl_buf_puts(b, ",\"fix\":");
        kl_buf_json_str(b, c->fix);
        kl_buf_puts(b, "}");
    }
    int k[KL_DOCTOR_NSTATUS];
    kl_doctor_report_counts(r, k);
    kl_buf_printf(b, "%s],\n\"summary\":{\"pass\":%d,\"warn\":%d,\"fail\":%d,\"info\":%d}}\n", n ? "\n" : "",
                  k[KL_DOCTOR_PASS], k[KL_DOCTOR_WARN], k[KL_DOCTOR_FAIL], k[KL_DOCTOR_INFO]);
    return b->failed ? KL_ENOMEM : KL_OK;
}

/* ==================================================================
 * Fix script
 * ================================================================== */

/* Appends the lines of text, each prefixed with prefix. */
static void prefixed_lines(kl_buf *b, const char *text, const char *prefix) {
    for (const char *p = text; *p;) {
        size_t l = strcspn(p, "\n");
        kl_buf_puts(b, prefix);
        kl_buf_append(b, p, l);
        kl_buf_puts(b, "\n");
        p += l;
        if (*p == '\n') p++;
    }
}

/* The comment block of one check. */
static void script_block(kl_buf *b, const kl_doctor_check *c, int optional) {
    kl_buf_printf(b, "\n# ---- %s: %s%s\n", c->id, kl_doctor_status_name(c->status),
                  optional ? " (optional: uncomment to apply)" : "");
    kl_buf_puts(b, "# observed: ");
    wrap(b, c->observed, 12, 0, "#   ", 78);
    kl_buf_puts(b, "\n# recommended: ");
    wrap(b, c->recommended, 15, 0, "#   ", 78);
    kl_buf_puts(b, "\n# why: ");
    wrap(b, c->why, 7, 0, "#   ", 78);
    kl_buf_puts(b, "\n");
    if (!c->fix[0]) kl_buf_puts(b, "# (no command: see why)\n");
    else prefixed_lines(b, c->fix, optional ? "# " : "");
}

int kl_doctor_format_fix_script(const kl_doctor_report *r, kl_buf *b) {
    char ts[40];
    int k[KL_DOCTOR_NSTATUS];
    size_t n = kl_doctor_report_count(r);
    kl_doctor_report_counts(r, k);
    kl_time_rfc3339(kl_time_now_us(), ts, sizeof ts);
    kl_buf_printf(b,
                  "#!/bin/sh\n"
                  "# keel doctor fix script, generated %s.\n"
                  "# Review every line before running it: it changes kernel settings, limits\n"
                  "# and mounts, and most lines need root. keel doctor only printed it;\n"
                  "# nothing has been changed. Lines starting with '#' are advice for steps\n"
                  "# that need a person (hardware, containers, boot configuration).\n"
                  "#\n"
                  "# %zu checks: %d pass, %d warn, %d fail, %d info.\n",
                  ts, n, k[KL_DOCTOR_PASS], k[KL_DOCTOR_WARN], k[KL_DOCTOR_FAIL], k[KL_DOCTOR_INFO]);
    int any = 0;
    /* failures first, then warnings, then optional info items */
    static const kl_doctor_status order[] = {KL_DOCTOR_FAIL, KL_DOCTOR_WARN};
    for (size_t o = 0; o < KL_ARRAY_LEN(order); o++)
        for (size_t i = 0; i < n; i++)
            if (r->checks[i].status == order[o]) {
                script_block(b, &r->checks[i], 0);
                any = 1;
            }
    for (size_t i = 0; i < n; i++)
        if (r->checks[i].status == KL_DOCTOR_INFO && r->checks[i].fix[0]) script_block(b, &r->checks[i], 1);
    if (!any) kl_buf_puts(b, "\n# Nothing to fix: no check warned or failed.\n");
    kl_buf_puts(b, "\nexit 0\n");
    return b->failed ? KL_ENOMEM : KL_OK;
}
