/* Unit tests of the time zones (src/data/tz.c): fixed offsets, a named zone's
 * offsets on both sides of its clock changes and after 2037 (footer rule),
 * skipped and repeated local times with each policy, and malformed TZif
 * files (every truncation, flipped bytes): an error naming the file, never a
 * crash. (tests/integration/ingest_tz.py cross-checks ~290k local times
 * against Python's zoneinfo.) */
#include "../harness.h"

#include <keel/core.h>
#include <keel/data.h>
#include <stdlib.h>
#include <string.h>

static int64_t civil(int y, int m, int d, int hh, int mi) { return kl_days_from_civil(y, (unsigned)m, (unsigned)d) * 86400 + hh * 3600 + mi * 60; }

KL_TEST(data_tz_fixed_and_names) {
    kl_tz *z = NULL;
    kl_err e = {0};
    KT_OK(kl_tz_load("UTC-8", &z, &e), &e);
    KT_CHECK(kl_tz_is_fixed(z));
    KT_EQ_INT(kl_tz_offset(z, 0), -8 * 3600);
    int64_t u;
    KT_EQ_INT(kl_tz_to_utc(z, 0, &u), KL_TZ_OK);
    KT_EQ_INT(u, 8 * 3600);
    kl_tz_free(z);
    KT_EQ_INT(kl_tz_load("../etc/passwd", &z, &e), KL_EINVAL);
    KT_CHECK(z == NULL);
    KT_EQ_INT(kl_tz_load("Mars/Olympus", &z, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "unknown zone");
}

KL_TEST(data_tz_berlin_transitions) {
    kl_tz *z = NULL;
    kl_err e = {0};
    KT_OK(kl_tz_load("Europe/Berlin", &z, &e), &e);
    KT_CHECK(!kl_tz_is_fixed(z));
    KT_EQ_INT(kl_tz_offset(z, civil(2023, 1, 15, 12, 0)), 3600);
    KT_EQ_INT(kl_tz_offset(z, civil(2023, 7, 15, 12, 0)), 7200);
    KT_EQ_INT(kl_tz_offset(z, civil(2077, 7, 15, 12, 0)), 7200);   /* footer rule */
    KT_EQ_INT(kl_tz_offset(z, civil(2077, 12, 15, 12, 0)), 3600);
    int64_t u;
    /* 2023-03-26 01:00Z clocks go 02:00 -> 03:00 local */
    KT_EQ_INT(kl_tz_to_utc(z, civil(2023, 3, 26, 2, 30), &u), KL_TZ_GAP);
    KT_EQ_INT(kl_tz_to_utc(z, civil(2023, 3, 26, 3, 0), &u), KL_TZ_OK);
    KT_EQ_INT(u, civil(2023, 3, 26, 1, 0));
    /* 2023-10-29 01:00Z clocks go 03:00 -> 02:00 local: 02:30 occurs twice */
    KT_EQ_INT(kl_tz_to_utc(z, civil(2023, 10, 29, 2, 30), &u), KL_TZ_AMBIGUOUS);
    kl_tz_set_ambiguous(z, KL_TZ_EARLIEST);
    KT_EQ_INT(kl_tz_to_utc(z, civil(2023, 10, 29, 2, 30), &u), KL_TZ_OK);
    KT_EQ_INT(u, civil(2023, 10, 29, 0, 30));
    kl_tz_set_ambiguous(z, KL_TZ_LATEST);
    KT_EQ_INT(kl_tz_to_utc(z, civil(2023, 10, 29, 2, 30), &u), KL_TZ_OK);
    KT_EQ_INT(u, civil(2023, 10, 29, 1, 30));
    /* timestamps: an explicit offset wins over the zone */
    int64_t us;
    KT_OK(kl_parse_timestamp("2023-07-01 12:00:00", 19, z, &us), NULL);
    KT_EQ_INT(us, civil(2023, 7, 1, 10, 0) * 1000000);
    KT_OK(kl_parse_timestamp("2023-07-01 12:00:00Z", 20, z, &us), NULL);
    KT_EQ_INT(us, civil(2023, 7, 1, 12, 0) * 1000000);
    KT_EQ_INT(kl_parse_timestamp("2023-03-26 02:30", 16, z, &us), KL_ENOTFOUND);
    kl_tz_free(z);
}

KL_TEST(data_tz_malformed_files) {
    char *buf = NULL;
    size_t len = 0;
    kl_err e = {0};
    KT_OK(kl_read_file("/usr/share/zoneinfo/Europe/Berlin", &buf, &len, &e), &e);
    const char *dir = kt_path("tzdir");
    char zdir[600], zpath[700];
    snprintf(zdir, sizeof zdir, "%s/Test", dir);
    KT_OK(kl_mkdir_p(zdir, &e), &e);
    snprintf(zpath, sizeof zpath, "%s/Zone", zdir);
    char *old = getenv("TZDIR") ? strdup(getenv("TZDIR")) : NULL;
    setenv("TZDIR", dir, 1);
    int errors = 0, named = 0;
    for (size_t cut = 0; cut < len; cut += (cut < 200 ? 1 : 7)) {   /* every truncation */
        KT_OK(kl_write_file_atomic(zpath, buf, cut, &e), &e);
        kl_tz *z = NULL;
        kl_err le = {0};
        if (kl_tz_load("Test/Zone", &z, &le)) {
            errors++;
            named += strstr(le.msg, zpath) != NULL;
        }
        kl_tz_free(z);
    }
    KT_CHECK(errors > 0);
    KT_EQ_INT(named, errors);
    uint64_t x = 12345;
    for (int it = 0; it < 400; it++) {   /* flipped bytes: an error or a usable zone, never a crash */
        char *c = malloc(len);
        memcpy(c, buf, len);
        for (int k = 0; k < 4; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            c[(x >> 33) % len] ^= (char)(1 + (x >> 20) % 255);
        }
        KT_OK(kl_write_file_atomic(zpath, c, len, &e), &e);
        free(c);
        kl_tz *z = NULL;
        kl_err le = {0};
        if (!kl_tz_load("Test/Zone", &z, &le)) {
            int64_t u;
            for (int64_t t = -4000000000LL; t < 5000000000LL; t += 123456789) {
                (void)kl_tz_offset(z, t);
                (void)kl_tz_to_utc(z, t, &u);
            }
        }
        kl_tz_free(z);
    }
    if (old) { setenv("TZDIR", old, 1); free(old); }
    else unsetenv("TZDIR");
    kl_mem_free(buf);
}
