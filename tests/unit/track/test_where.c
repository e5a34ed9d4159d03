/* Unit tests of where the experiment store lives (kl_track_store_resolve):
 * the rules in order (given > KEEL_TRACKING > nearest keel-runs/ > per-user
 * default), the upward search and its ceiling, a read-only open that
 * creates nothing, and "not found" errors that name the store and the rule. */
#include "../harness.h"

#include <keel/track.h>
#include <stdlib.h>
#include <sys/stat.h>

static void mk(const char *p) { mkdir(p, 0755); }

KL_TEST(track_where_rules_in_order) {
    kl_err e = {0};
    kl_store_loc l;
    char root[4096], cwd[4300], runs[4300];
    snprintf(root, sizeof root, "%s", kt_path("w"));
    snprintf(cwd, sizeof cwd, "%s/a/b", root);
    snprintf(runs, sizeof runs, "%s/a/keel-runs", root);
    mk(root);
    snprintf(cwd, sizeof cwd, "%s/a", root);
    mk(cwd);
    snprintf(cwd, sizeof cwd, "%s/a/b", root);
    mk(cwd);
    /* nothing found: the per-user default, XDG first, then HOME */
    KT_OK(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, NULL, "/x/data", "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_USER);
    KT_EQ_STR(l.dir, "/x/data/keel/runs");
    KT_CONTAINS(l.how, "per-user default");
    KT_CONTAINS(l.how, cwd);
    KT_EQ_INT(l.exists, 0);
    KT_OK(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, NULL, "relative/data", "/home/u", &l, &e), &e);
    KT_EQ_STR(l.dir, "/home/u/.local/share/keel/runs"); /* a relative XDG_DATA_HOME is ignored (XDG spec) */
    KT_EQ_INT(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, NULL, NULL, NULL, &l, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "--tracking");
    /* a keel-runs/ folder in a parent wins over the default */
    mk(runs);
    KT_OK(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, NULL, "/x/data", "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_NEAREST);
    KT_EQ_STR(l.dir, runs);
    KT_CONTAINS(l.how, "nearest keel-runs/");
    /* ... unless the search may not go there (a ceiling: that folder and above) */
    char ceil[4400];
    snprintf(ceil, sizeof ceil, "/nowhere:%s/a/", root);
    KT_OK(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, ceil, "/x/data", "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_USER);
    snprintf(ceil, sizeof ceil, "%s/a/b", root);
    KT_OK(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, ceil, "/x/data", "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_USER);
    /* the nearest one: a keel-runs/ in the current folder itself */
    char own[4400];
    snprintf(own, sizeof own, "%s/keel-runs", cwd);
    mk(own);
    KT_OK(kl_track_store_resolve_in(NULL, NULL, NULL, cwd, NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_STR(l.dir, own);
    /* KEEL_TRACKING beats the search; the caller's folder beats both */
    KT_OK(kl_track_store_resolve_in(NULL, NULL, "/env/store", cwd, NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_ENV);
    KT_EQ_STR(l.dir, "/env/store");
    KT_EQ_STR(l.how, "KEEL_TRACKING");
    KT_OK(kl_track_store_resolve_in("/given", "--tracking", "/env/store", cwd, NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_GIVEN);
    KT_EQ_STR(l.dir, "/given");
    KT_EQ_STR(l.how, "--tracking");
    /* an empty value is no value */
    KT_OK(kl_track_store_resolve_in("", "--tracking", "", cwd, NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_NEAREST);
}

KL_TEST(track_where_readonly_open_creates_nothing) {
    kl_err e = {0};
    kl_store_loc l;
    char dir[4300];
    snprintf(dir, sizeof dir, "%s", kt_path("nostore"));
    KT_OK(kl_track_store_resolve_in(dir, "--tracking", NULL, "/", NULL, NULL, "/home/u", &l, &e), &e);
    kl_track *t = NULL;
    KT_EQ_INT(kl_track_open_loc(&l, 0, &t, &e), KL_ENOTFOUND);
    KT_CHECK(t == NULL);
    KT_CONTAINS(e.msg, dir);
    KT_CONTAINS(e.msg, "--tracking");
    KT_CHECK(!kl_path_exists(dir));
    /* created by a writer; then a reader opens it, and its "not found"
     * errors name the store and the rule */
    KT_OK(kl_track_open_loc(&l, 1, &t, &e), &e);
    kl_track_close(t);
    KT_OK(kl_track_store_resolve_in(dir, "--tracking", NULL, "/", NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_INT(l.exists, 1);
    KT_OK(kl_track_open_loc(&l, 0, &t, &e), &e);
    void *j = NULL;
    KT_EQ_INT(kl_track_run_json(t, 42, &j, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "run 42 not found");
    KT_CONTAINS(e.msg, dir);
    KT_CONTAINS(e.msg, "(--tracking)");
    char *name = NULL;
    int64_t v = 0;
    KT_EQ_INT(kl_registry_parse_ref(t, "ghost@champion", &name, &v, &e), KL_ENOTFOUND);
    KT_CONTAINS(e.msg, "model 'ghost' not found in the experiment store");
    KT_CONTAINS(e.msg, dir);
    KT_CONTAINS(kl_track_where(t), "(--tracking)");
    kl_track_close(t);
}

KL_TEST(track_where_server_url) {
    /* a PostgreSQL URL is a store as given (no folder rules, never made a
     * path), shown without its password; its existence is known on open */
    kl_err e = {0};
    kl_store_loc l;
    const char *u = "postgresql://ana:pw@db.internal:5432/keel?sslmode=require";
    KT_OK(kl_track_store_resolve_in(u, "--tracking", NULL, "/tmp", NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_STR(l.dir, u);
    KT_EQ_INT(l.rule, KL_STORE_GIVEN);
    KT_EQ_INT(l.exists, 1);
    KT_OK(kl_track_store_resolve_in(NULL, NULL, "postgres://db/keel", "/tmp", NULL, NULL, "/home/u", &l, &e), &e);
    KT_EQ_INT(l.rule, KL_STORE_ENV);
    KT_EQ_INT(kl_track_is_url(l.dir), 1);
    KT_EQ_INT(kl_track_is_url("/srv/keel-runs"), 0);
    KT_EQ_INT(kl_track_is_url("postgresql:/x"), 0);
    char shown[256];
    kl_track_redact(u, shown, sizeof shown);
    KT_EQ_STR(shown, "postgresql://ana:***@db.internal:5432/keel?sslmode=require");
    kl_track_redact("postgresql://ana@db/keel", shown, sizeof shown);
    KT_EQ_STR(shown, "postgresql://ana@db/keel");
    kl_track_redact("postgres://db:5432/x?password=a@b&sslmode=require", shown, sizeof shown);
    KT_EQ_STR(shown, "postgres://db:5432/x?password=***&sslmode=require");
}
