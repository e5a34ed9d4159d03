/* Core pieces: errors, SHA-256 (known vectors and sha256sum), thread pool,
 * YAML documents and their error messages, config precedence, atomic files,
 * progress, suggestions. */
#include "../harness.h"

#include <cjson/cJSON.h>
#include <keel/core.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

KL_TEST(err_format) {
    kl_err e = {0};
    KT_EQ_INT(kl_err_setloc(&e, KL_EPARSE, "clicks.csv", 1042, 7, "'%s' is not a float64", "N/A"), KL_EPARSE);
    kl_err_field(&e, "column item_price");
    KT_EQ_STR(kl_err_what(&e), "clicks.csv:1042:7: column item_price: 'N/A' is not a float64");
    kl_err_prefix(&e, "ingest");
    KT_CONTAINS(kl_err_what(&e), "ingest: 'N/A'");
    KT_EQ_INT(kl_err_set(NULL, KL_EINVAL, "x"), KL_EINVAL);
    KT_EQ_STR(kl_strerror(-2), "No such file or directory");
    KT_EQ_STR(kl_strerror(KL_ECHECKSUM), "checksum mismatch");
}

KL_TEST(sha256_vectors) {
    char hex[65];
    kl_sha256_buf_hex("", 0, hex);
    KT_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    kl_sha256_buf_hex("abc", 3, hex);
    KT_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    kl_sha256 *h = kl_sha256_new();
    for (const char *p = m; *p; p++) kl_sha256_update(h, p, 1);
    uint8_t d[32];
    kl_sha256_final(h, d);
    kl_sha256_free(h);
    kl_sha256_hex(d, hex);
    KT_EQ_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

KL_TEST(sha256_file_matches_sha256sum) {
    const char *p = kt_path("data.bin");
    size_t n = 3 * 1000 * 1000 + 17;
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    kl_err e = {0};
    KT_OK(kl_write_file_atomic(p, buf, n, &e), &e);
    free(buf);
    char hex[65], cmd[1200], want[65] = {0};
    KT_OK(kl_sha256_file_hex(p, hex, &e), &e);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", p);
    FILE *f = popen(cmd, "r");
    KT_CHECK(f && fscanf(f, "%64s", want) == 1);
    pclose(f);
    KT_EQ_STR(hex, want);
    KT_CHECK(kl_sha256_file_hex(kt_path("missing"), hex, &e) < 0);
    KT_CONTAINS(kl_err_what(&e), "missing");
}

typedef struct { double *out; const double *in; _Atomic int calls; } sq_ctx;
static void sq(void *c, size_t b, size_t e, int chunk) {
    sq_ctx *s = c;
    for (size_t i = b; i < e; i++) s->out[i] = s->in[i] * s->in[i] + (double)chunk * 0;
    atomic_fetch_add(&s->calls, 1);
}

typedef struct { const double *in; double part[64]; } sum_ctx;
static void psum(void *c, size_t b, size_t e, int chunk) {
    sum_ctx *s = c;
    double acc = 0;
    for (size_t i = b; i < e; i++) acc += s->in[i];
    s->part[chunk] = acc;
}

static double pool_sum(kl_pool *p, const double *in, size_t n) {
    sum_ctx s = {.in = in};
    kl_pool_parallel_for(p, n, 1024, psum, &s);
    double t = 0;
    for (int c = 0; c < kl_pool_chunks(p, n, 1024); c++) t += s.part[c];
    return t;
}

KL_TEST(pool_parallel_for) {
    kl_err e = {0};
    kl_pool *p;
    KT_OK(kl_pool_new(4, &p, &e), &e);
    KT_EQ_INT(kl_pool_threads(p), 4);
    size_t n = 100003;
    double *in = malloc(n * sizeof *in), *out = calloc(n, sizeof *out);
    for (size_t i = 0; i < n; i++) in[i] = (double)i * 0.5;
    for (int rep = 0; rep < 200; rep++) {
        sq_ctx c = {out, in, 0};
        kl_pool_parallel_for(p, n, 1, sq, &c);
        KT_EQ_INT(atomic_load(&c.calls), 4);
    }
    for (size_t i = 0; i < n; i++) KT_CHECK(out[i] == in[i] * in[i]);
    /* static chunking: the same per-chunk partial sums at every run */
    double s1 = pool_sum(p, in, n);
    for (int rep = 0; rep < 50; rep++) KT_CHECK(pool_sum(p, in, n) == s1);
    kl_pool_parallel_for(p, 0, 1, sq, NULL);
    kl_pool_free(p);
    free(in);
    free(out);
}

typedef struct { kl_pool *p; double *in; size_t n; double result; } conc_arg;
static void *conc(void *a) {
    conc_arg *c = a;
    double r = 0;
    for (int i = 0; i < 100; i++) r = pool_sum(c->p, c->in, c->n);
    c->result = r;
    return NULL;
}

#include <pthread.h>
KL_TEST(pool_concurrent_callers) {
    kl_err e = {0};
    kl_pool *p;
    KT_OK(kl_pool_new(2, &p, &e), &e);
    size_t n = 50000;
    double *in = malloc(n * sizeof *in);
    for (size_t i = 0; i < n; i++) in[i] = 1.0 / (double)(i + 1);
    double want = pool_sum(p, in, n);
    pthread_t th[3];
    conc_arg a[3];
    for (int i = 0; i < 3; i++) { a[i] = (conc_arg){p, in, n, 0}; pthread_create(&th[i], NULL, conc, &a[i]); }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) KT_CHECK(a[i].result == want);
    kl_pool_free(p);
    free(in);
}

static const char *spec_yaml =
    "train:\n"
    "  epochs: ten\n"
    "  lr: 0.001\n"
    "  shuffle: yes\n"
    "layers:\n"
    "  - {type: linear, units: 128}\n"
    "  - type: relu\n"
    "name: \"quoted\"\n"
    "empty: ~\n";

KL_TEST(doc_yaml_typed_errors) {
    kl_err e = {0};
    kl_doc *d;
    KT_OK(kl_doc_load_str(spec_yaml, strlen(spec_yaml), "spec.yaml", &d, &e), &e);
    const kl_node *r = kl_doc_root(d);
    int64_t v;
    KT_CHECK(kl_node_int(kl_node_find(r, "train.epochs"), &v, &e) == KL_EINVAL);
    KT_EQ_STR(kl_err_what(&e), "spec.yaml:2:11: train.epochs: expected an integer, got \"ten\"");
    double lr;
    KT_OK(kl_spec_double(kl_node_get(r, "train"), "lr", 0, &lr, &e), &e);
    KT_NEAR(lr, 0.001, 0);
    int b;
    KT_OK(kl_spec_bool(kl_node_get(r, "train"), "shuffle", 0, &b, &e), &e);
    KT_EQ_INT(b, 1);
    KT_OK(kl_spec_int(kl_node_find(r, "layers.0"), "units", 0, &v, &e), &e);
    KT_EQ_INT(v, 128);
    KT_EQ_STR(kl_node_path(kl_node_find(r, "layers.1.type")), "layers.1.type");
    KT_EQ_INT(kl_node_line(kl_node_find(r, "layers.1.type")), 7);
    KT_EQ_INT(kl_node_kind_of(kl_node_get(r, "empty")), KL_NODE_NULL);
    KT_CHECK(kl_node_is_quoted(kl_node_get(r, "name")));
    KT_OK(kl_spec_int(kl_node_get(r, "train"), "missing", 5, &v, &e), &e);
    KT_EQ_INT(v, 5);
    static const char *const allowed[] = {"epochs", "lr", "shufle"};
    KT_CHECK(kl_spec_check_keys(kl_node_get(r, "train"), allowed, 3, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "unknown key 'shuffle' (did you mean 'shufle'?)");
    KT_CONTAINS(kl_err_what(&e), "spec.yaml:4:");
    const kl_node *req;
    KT_CHECK(kl_spec_require(kl_node_get(r, "train"), "batch", &req, &e) == KL_ENOTFOUND);
    KT_CONTAINS(kl_err_what(&e), "train.batch");
    kl_doc_free(d);
}

KL_TEST(doc_yaml_syntax_errors) {
    kl_err e = {0};
    kl_doc *d = NULL;
    const char *bad = "a: 1\nb: [1, 2\nc: 3\n";
    KT_CHECK(kl_doc_load_str(bad, strlen(bad), "bad.yaml", &d, &e) == KL_EPARSE);
    KT_CHECK(d == NULL);
    KT_CONTAINS(kl_err_what(&e), "bad.yaml:");
    const char *dup = "a: 1\na: 2\n";
    KT_CHECK(kl_doc_load_str(dup, strlen(dup), "dup.yaml", &d, &e) == KL_EPARSE);
    KT_CONTAINS(kl_err_what(&e), "duplicate key");
    const char *json = "{\"x\": [1, 2, {\"y\": \"z\"}]}";
    KT_OK(kl_doc_load_str(json, strlen(json), "j.json", &d, &e), &e);
    KT_EQ_STR(kl_node_scalar(kl_node_find(kl_doc_root(d), "x.2.y")), "z");
    kl_doc_free(d);
    KT_CHECK(kl_doc_load_file(kt_path("nope.yaml"), &d, &e) == KL_ENOTFOUND);
}

/* A key that no reader looked up is named with its position: accepted by the
 * allowed-keys check and then ignored is an error too (issue 23). */
KL_TEST(doc_unused_key_is_named) {
    kl_err e = {0};
    kl_doc *d = NULL;
    const char *y = "a: 1\nb: {c: 2, d: 3}\nlist:\n  - {x: 1, y: 2}\nskipped: {deep: 1}\n";
    KT_OK(kl_doc_load_str(y, strlen(y), "u.yaml", &d, &e), &e);
    const kl_node *r = kl_doc_root(d);
    KT_CHECK(kl_node_check_used(r, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'a'");
    KT_CONTAINS(kl_err_what(&e), "u.yaml:1");
    (void)kl_node_get(r, "a");
    (void)kl_node_find(r, "b.c");
    (void)kl_node_find(r, "list.0.x");
    KT_CHECK(kl_node_check_used(r, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'d'");
    KT_CONTAINS(kl_err_what(&e), "u.yaml:2");
    (void)kl_node_find(r, "b.d");
    KT_CHECK(kl_node_check_used(r, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'y'");
    (void)kl_node_find(r, "list.0.y");
    KT_CHECK(kl_node_check_used(r, &e) == KL_EINVAL); /* an unread subtree is named at its top */
    KT_CONTAINS(kl_err_what(&e), "'skipped'");
    (void)kl_node_get(r, "skipped");
    KT_CHECK(kl_node_check_used(r, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "'deep'");
    (void)kl_node_find(r, "skipped.deep");
    KT_OK(kl_node_check_used(r, &e), &e);
    kl_doc_free(d);
}

KL_TEST(parse_scalars) {
    int64_t i;
    double x;
    KT_CHECK(kl_parse_int64("12", &i) == 0 && i == 12);
    KT_CHECK(kl_parse_int64("-9223372036854775808", &i) == 0);
    KT_CHECK(kl_parse_int64("9223372036854775808", &i) == KL_ERANGE);
    KT_CHECK(kl_parse_int64("1.5", &i) == KL_EINVAL);
    KT_CHECK(kl_parse_int64(" 1", &i) == KL_EINVAL);
    KT_CHECK(kl_parse_double("1e-3", &x) == 0 && x == 1e-3);
    KT_CHECK(kl_parse_double("-inf", &x) == 0 && isinf(x) && x < 0);
    KT_CHECK(kl_parse_double("nan", &x) == 0 && isnan(x));
    KT_CHECK(kl_parse_double("0x10", &x) == KL_EINVAL);
    KT_CHECK(kl_parse_double("1.5 ", &x) == KL_EINVAL);
}

KL_TEST(config_precedence) {
    kl_config *c = kl_config_new();
    KT_OK(kl_config_define(c, "train.epochs", KL_CFG_INT, "10", NULL, "--epochs", "epochs"), &(kl_err){0});
    KT_OK(kl_config_define(c, "train.lr", KL_CFG_DOUBLE, "0.1", NULL, NULL, "lr"), &(kl_err){0});
    KT_OK(kl_config_define(c, "train.batch", KL_CFG_INT, "32", NULL, NULL, "batch"), &(kl_err){0});
    const char *y = "train:\n  epochs: 20\n  lr: 0.01\n  batch: 64\n  extra: hello\n";
    kl_err e = {0};
    kl_doc *d;
    KT_OK(kl_doc_load_str(y, strlen(y), "spec.yaml", &d, &e), &e);
    KT_OK(kl_config_load_doc(c, d, &e), &e);
    setenv("KEEL_TRAIN_EPOCHS", "30", 1);
    setenv("KEEL_TRAIN_LR", "0.5", 1);
    int rc = kl_config_load_env(c, &e);
    unsetenv("KEEL_TRAIN_LR");
    unsetenv("KEEL_TRAIN_EPOCHS");
    KT_OK(rc, &e);
    KT_OK(kl_config_set_flag(c, "--epochs", "40", &e), &e);
    int64_t v;
    KT_OK(kl_config_get_int(c, "train.epochs", &v, &e), &e);
    KT_EQ_INT(v, 40);
    KT_EQ_STR(kl_config_origin(c, "train.epochs"), "flag --epochs");
    KT_EQ_STR(kl_config_get(c, "train.lr"), "0.5");
    KT_EQ_STR(kl_config_origin(c, "train.lr"), "env KEEL_TRAIN_LR");
    KT_EQ_STR(kl_config_get(c, "train.batch"), "64");
    KT_EQ_STR(kl_config_origin(c, "train.batch"), "spec.yaml:4:10");
    KT_EQ_STR(kl_config_get(c, "train.extra"), "hello");
    KT_EQ_INT(kl_config_source(c, "train.extra"), KL_SRC_FILE);
    setenv("KEEL_TRAIN_BATCH", "many", 1);
    rc = kl_config_load_env(c, &e);
    unsetenv("KEEL_TRAIN_BATCH");
    KT_CHECK(rc == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "env KEEL_TRAIN_BATCH: train.batch: expected an integer, got \"many\"");
    const char *bad = "train:\n  epochs: ten\n";
    kl_doc *d2;
    KT_OK(kl_doc_load_str(bad, strlen(bad), "bad.yaml", &d2, &e), &e);
    KT_CHECK(kl_config_load_doc(c, d2, &e) == KL_EINVAL);
    KT_EQ_STR(kl_err_what(&e), "bad.yaml:2:11: train.epochs: expected an integer, got \"ten\"");
    kl_doc_free(d2);
    kl_doc_free(d);
    kl_config_free(c);
}

KL_TEST(atomic_write_leaves_nothing_on_abort) {
    kl_err e = {0};
    const char *p = kt_path("out.txt");
    KT_OK(kl_write_file_atomic(p, "one", 3, &e), &e);
    kl_afile *f;
    KT_OK(kl_afile_open(p, &f, &e), &e);
    KT_OK(kl_afile_write(f, "two-partial", 11, &e), &e);
    kl_afile_abort(f);
    char *s;
    size_t n;
    KT_OK(kl_read_file(p, &s, &n, &e), &e);
    KT_EQ_STR(s, "one");
    kl_mem_free(s);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", kt_tmpdir());
    FILE *pp = popen(cmd, "r");
    int files = 0;
    KT_CHECK(fscanf(pp, "%d", &files) == 1);
    pclose(pp);
    KT_EQ_INT(files, 1); /* no temp file left behind */
    KT_CHECK(kl_write_file_atomic("/nonexistent-dir/x", "a", 1, &e) < 0);
    KT_CONTAINS(kl_err_what(&e), "/nonexistent-dir/x");
}

KL_TEST(progress_render) {
    kl_progress_set_mode(0);
    kl_progress *p = kl_progress_new("ingest", 1000, "rows");
    kl_progress_update(p, 250);
    kl_progress_field(p, "loss", "%.3f", 0.25);
    char line[256];
    kl_progress_render(p, line, sizeof line);
    KT_CONTAINS(line, "ingest");
    KT_CONTAINS(line, "25.0%");
    KT_CONTAINS(line, "loss=0.250");
    kl_progress_finish(p);
    kl_progress_set_mode(-1);
}

KL_TEST(suggest_words) {
    const char *c[] = {"doctor", "config", "version", "serve"};
    KT_EQ_STR(kl_suggest("doctr", c, 4), "doctor");
    KT_EQ_STR(kl_suggest("serv", c, 4), "serve");
    KT_CHECK(kl_suggest("xyzzy", c, 4) == NULL);
    char b[32];
    KT_EQ_STR(kl_fmt_bytes(1536, b, sizeof b), "1.50 KiB");
}

KL_TEST(log_json_lines) {
    const char *p = kt_path("log.txt");
    FILE *f = fopen(p, "w+");
    KT_CHECK(f);
    kl_log_set_output(f);
    kl_log_set_format(KL_LOG_JSON);
    kl_log_level old = kl_log_get_level();
    kl_log_set_level(KL_LOG_INFO);
    kl_log(KL_LOG_DEBUG, "test", "hidden %d", 1);
    kl_log(KL_LOG_WARN, "test", "disk \"%s\" is %d%% full", "/data", 93);
    kl_log_field fl[] = {KL_LF_STR("model", "mlp"), KL_LF_INT("batch", 8), KL_LF_NUM("queue_ms", 0.25)};
    kl_log_fields(KL_LOG_INFO, "serve", "request", fl, 3);
    kl_log_set_output(NULL);
    kl_log_set_format(KL_LOG_AUTO);
    kl_log_set_level(old);
    fflush(f);
    rewind(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        void *j = NULL;
        kl_err e = {0};
        KT_OK(kl_json_parse(line, strlen(line), "log", &j, &e), &e);
        cJSON *o = j;
        const char *ts = cJSON_GetObjectItem(o, "ts")->valuestring;
        KT_CHECK(strlen(ts) == 27 && ts[10] == 'T' && ts[26] == 'Z');
        if (n == 1) {
            KT_EQ_STR(cJSON_GetObjectItem(o, "level")->valuestring, "warn");
            KT_EQ_STR(cJSON_GetObjectItem(o, "msg")->valuestring, "disk \"/data\" is 93% full");
        } else {
            KT_EQ_STR(cJSON_GetObjectItem(o, "model")->valuestring, "mlp");
            KT_EQ_INT(cJSON_GetObjectItem(o, "batch")->valueint, 8);
        }
        cJSON_Delete(o);
    }
    fclose(f);
    KT_EQ_INT(n, 2);
}

KL_TEST(doc_set_and_json_round_trip) {
    const char *y = "seed: 1\noptimizer: {type: adamw, lr: 0.003}\nlayers:\n  - {type: linear, out: 128}\n  - {type: relu}\nname: \"007\"\n";
    kl_err e = {0};
    kl_doc *d;
    KT_OK(kl_doc_load_str(y, strlen(y), "spec.yaml", &d, &e), &e);
    KT_OK(kl_doc_set(d, "optimizer.lr", "0.01", "--set", &e), &e);
    KT_OK(kl_doc_set(d, "layers.0.out", "256", "--set", &e), &e);
    KT_OK(kl_doc_set(d, "train.epochs", "5", "--set", &e), &e);
    KT_CHECK(kl_doc_set(d, "layers.7.out", "1", "--set", &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "not an item of the list layers");
    KT_CHECK(kl_doc_set(d, "seed.x", "1", "--set", &e) == KL_EINVAL);
    KT_CHECK(kl_doc_set(d, "layers", "1", "--set", &e) == KL_EINVAL);
    const kl_node *lr = kl_node_find(kl_doc_root(d), "optimizer.lr");
    KT_EQ_STR(kl_node_scalar(lr), "0.01");
    int64_t v;
    KT_CHECK(kl_node_int(lr, &v, &e) == KL_EINVAL);
    KT_CONTAINS(kl_err_what(&e), "--set: optimizer.lr: expected an integer");
    kl_buf b;
    kl_buf_init(&b);
    KT_OK(kl_doc_to_json(d, &b), &e);
    kl_doc *d2;
    KT_OK(kl_doc_load_str(b.data, b.len, "spec.json", &d2, &e), &e);
    KT_EQ_STR(kl_node_scalar(kl_node_find(kl_doc_root(d2), "layers.0.out")), "256");
    KT_EQ_STR(kl_node_scalar(kl_node_find(kl_doc_root(d2), "train.epochs")), "5");
    KT_EQ_STR(kl_node_scalar(kl_node_find(kl_doc_root(d2), "name")), "007");
    KT_CHECK(kl_node_is_quoted(kl_node_find(kl_doc_root(d2), "name")));
    KT_EQ_STR(kl_node_scalar(kl_node_find(kl_doc_root(d2), "layers.1.type")), "relu");
    kl_buf_free(&b);
    kl_doc_free(d2);
    kl_doc_free(d);
}

/* Aliases are shared nodes, but every walk of the tree (config show, to_json)
 * visits an aliased node once per alias: the loader refuses a document that
 * would expand beyond KL_DOC_MAX_NODES (billion laughs) and an alias inside
 * its own anchor; ordinary aliases still work. */
KL_TEST(doc_yaml_alias_expansion_capped) {
    kl_buf b;
    kl_buf_init(&b);
    kl_buf_puts(&b, "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (int i = 1; i <= 9; i++) {
        kl_buf_printf(&b, "a%d: &a%d [", i, i);
        for (int k = 0; k < 10; k++) kl_buf_printf(&b, "%s*a%d", k ? ", " : "", i - 1);
        kl_buf_puts(&b, "]\n");
    }
    kl_doc *d = NULL;
    kl_err e = {0};
    int64_t t0 = kl_time_mono_ns();
    int rc = kl_doc_load_str(b.data, b.len, "laughs.yaml", &d, &e);
    kl_buf_free(&b);
    KT_EQ_INT(rc, KL_ERANGE);
    KT_CHECK(d == NULL);
    KT_CONTAINS(e.msg, "1000000 nodes");
    KT_CONTAINS(kl_err_what(&e), "laughs.yaml:");
    KT_CHECK(kl_time_mono_ns() - t0 < 1000000000ll);
    const char *cyc = "a: &x [1, *x]\n";
    e = (kl_err){0};
    rc = kl_doc_load_str(cyc, strlen(cyc), "cycle.yaml", &d, &e);
    KT_CHECK(rc != KL_OK && d == NULL);
    const char *ok = "base: &b {lr: 0.1, epochs: 3}\nrun1: *b\nrun2: *b\n";
    KT_OK(kl_doc_load_str(ok, strlen(ok), "ok.yaml", &d, &e), &e);
    KT_EQ_STR(kl_node_scalar(kl_node_get(kl_node_get(kl_doc_root(d), "run2"), "lr")), "0.1");
    kl_doc_free(d);
}

/* every KEEL_* setting is read in one place (kl_settings_parse over an
 * environment); defaults when unset, the documented meanings when set */
KL_TEST(settings_parse_every_variable) {
    kl_settings s;
    char *none[] = {"PATH=/bin", NULL};
    kl_settings_parse(&s, none);
    KT_EQ_INT(s.threads, 0);
    KT_EQ_INT(s.avx512_allowed, 1);
    KT_EQ_INT(s.nchwc, 1);
    KT_EQ_INT(s.nchwc_pool_fuse, 1);
    KT_EQ_INT(s.wino_pack, 1);
    KT_EQ_INT(s.wino_use, -1);
    KT_EQ_INT(s.plan_split, 1);
    KT_EQ_INT(s.profile, 0);
    KT_EQ_INT(s.fetch_retries, 0);
    KT_CHECK(s.progress_interval_s == 10.0);
    KT_CHECK(s.doctor_root == NULL);
    KT_CHECK(s.feature_store == NULL);
    KT_EQ_STR(s.tmpdir, "/tmp");
    char *set[] = {"KEEL_THREADS=3", "KEEL_NO_AVX512=1", "KEEL_NO_NCHWC=yes", "KEEL_NCHWC_POOL_FUSE=0",
                   "KEEL_WINO=0", "KEEL_SPLIT=0", "KEEL_PROFILE=1", "KEEL_FETCH_RETRIES=0",
                   "KEEL_PROGRESS_INTERVAL=2.5", "KEEL_DOCTOR_ROOT=/tmp/r", "KEEL_FEATURE_STORE=redis://h:1/2",
                   "KEEL_THREADSX=9", "TMPDIR=/var/tmp/k", NULL};
    kl_settings_parse(&s, set);
    KT_EQ_INT(s.threads, 3);
    KT_EQ_INT(s.avx512_allowed, 0);
    KT_EQ_INT(s.nchwc, 0);
    KT_EQ_INT(s.nchwc_pool_fuse, 0);
    KT_EQ_INT(s.wino_pack, 0);
    KT_EQ_INT(s.wino_use, 0);
    KT_EQ_INT(s.plan_split, 0);
    KT_EQ_INT(s.profile, 1);
    KT_EQ_INT(s.fetch_retries, -1);
    KT_CHECK(s.progress_interval_s == 2.5);
    KT_CHECK(s.doctor_root && !strcmp(s.doctor_root, "/tmp/r"));
    KT_CHECK(s.feature_store && !strcmp(s.feature_store, "redis://h:1/2"));
    KT_EQ_STR(s.tmpdir, "/var/tmp/k");
    char *odd[] = {"KEEL_THREADS=5000", "KEEL_NO_AVX512=0", "KEEL_WINO=1", "KEEL_SPLIT=x", "KEEL_FETCH_RETRIES=4",
                   "KEEL_PROGRESS_INTERVAL=-1", "KEEL_DOCTOR_ROOT=", "TMPDIR=", NULL};
    kl_settings_parse(&s, odd);
    KT_EQ_INT(s.threads, 0); /* out of 1..1024: the online cores */
    KT_EQ_INT(s.avx512_allowed, 1);
    KT_EQ_INT(s.wino_pack, 1);
    KT_EQ_INT(s.wino_use, 1);
    KT_EQ_INT(s.plan_split, 1);
    KT_EQ_INT(s.fetch_retries, 4);
    KT_CHECK(s.progress_interval_s == 10.0);
    KT_CHECK(s.doctor_root == NULL);
    KT_EQ_STR(s.tmpdir, "/tmp"); /* empty: the default */
}

/* kl_rng_shuffle_i64 is the Fisher–Yates every seeded shuffle used before it
 * (one kl_rng_below per position from the back): same seed, same order; a
 * permutation; n = 0 and 1 untouched. */
KL_TEST(rng_shuffle_is_the_reference_fisher_yates) {
    enum { N = 1000 };
    int64_t a[N], b[N];
    for (int64_t i = 0; i < N; i++) a[i] = b[i] = i;
    kl_rng r1, r2;
    kl_rng_seed(&r1, 42);
    kl_rng_seed(&r2, 42);
    kl_rng_shuffle_i64(&r1, a, N);
    for (int64_t i = N - 1; i > 0; i--) {
        int64_t j = (int64_t)kl_rng_below(&r2, (uint64_t)i + 1), t = b[i];
        b[i] = b[j];
        b[j] = t;
    }
    int same = 1, moved = 0;
    long long sum = 0;
    for (int64_t i = 0; i < N; i++) same &= a[i] == b[i], moved += a[i] != i, sum += a[i];
    KT_CHECK(same);
    KT_CHECK(moved > N / 2);
    KT_EQ_INT(sum, (long long)N * (N - 1) / 2);
    int64_t one = 7;
    kl_rng_shuffle_i64(&r1, &one, 1);
    kl_rng_shuffle_i64(&r1, NULL, 0);
    KT_EQ_INT(one, 7);
}
