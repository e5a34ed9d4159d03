/* Test helper: ingest options for one source file, a schema file and an
 * output folder, everything else at its default (kl_ingest_opts_default). */
#ifndef KEEL_TEST_KT_INGEST_H
#define KEEL_TEST_KT_INGEST_H

#include <keel/data.h>

static inline void kt_ingest_opts(kl_ingest_opts *o, const char *const *src, const char *schema, const char *out) {
    kl_ingest_opts_default(o);
    o->sources = src;
    o->n_sources = 1;
    o->schema_path = schema;
    o->out_dir = out;
}

#endif
