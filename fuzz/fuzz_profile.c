/* libFuzzer target: profile.json (kl_profile_load_str), the file keel serve
 * reads beside a model version, and what the server does with a profile it
 * accepted: the live monitor built on it (outputs only: no features), a few
 * observations, the statistics and the /monitor JSON. */
#include <keel/profile.h>

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_err e = {0};
    kl_profile *p = NULL;
    if (kl_profile_load_str((const char *)data, size, "fuzz.json", &p, &e)) return 0;
    kl_buf b;
    kl_buf_init(&b);
    kl_profile_summary(p, &b);
    kl_monitor_cfg cfg;
    kl_monitor_cfg_default(&cfg);
    cfg.min_samples = 1;
    kl_monitor *m = NULL;
    if (kl_monitor_new(p, NULL, &cfg, &m, &e) == KL_OK) { /* takes p */
        float outs[4] = {0.5f, -3.0f, 1e30f, 0.0f / 0.0f};
        for (int i = 0; i < 4; i++) kl_monitor_outputs(m, outs, 4, 1000000000LL * (i + 1)); /* up to 4 outputs */
        kl_buf_reset(&b);
        kl_monitor_json(m, 5000000000LL, &b, &e);
        kl_monitor_free(m);
    }
    kl_buf_free(&b);
    return 0;
}
