/* Private declarations shared by the ingest files of src/data/ (csv, schema,
 * values, ingest, dataset, fetch). */
#ifndef KEEL_DATA_INT_H
#define KEEL_DATA_INT_H

#include <keel/core.h>
#include <keel/data.h>

/* Fills a kl_err-like message buffer. */
#define KL__MSG(buf, n, ...) do { if (buf) snprintf((buf), (n), __VA_ARGS__); } while (0)

/* Canonical JSON of a schema into b (fields in order, sorted keys). */
int kl__schema_canonical(const kl_schema *s, kl_buf *b);

#endif
