/* Temporary stubs of the Parquet API (replaced by parquet_write.c / parquet_read.c). */
#include <stdlib.h>
#include <string.h>
#include "keel/parquet.h"

const char *kl_pq_codec_name(kl_pq_codec c) {
    static const char *n[] = {"none", "snappy", "gzip", "zstd", "lz4_raw"};
    return (unsigned)c < 5 ? n[c] : "?";
}
int kl_pq_codec_parse(const char *s, kl_pq_codec *out) {
    if (!s) return KL_EINVAL;
    if (!strcmp(s, "uncompressed")) { *out = KL_PQ_UNCOMPRESSED; return KL_OK; }
    for (int i = 0; i < 5; i++) if (!strcmp(s, kl_pq_codec_name((kl_pq_codec)i))) { *out = (kl_pq_codec)i; return KL_OK; }
    return KL_EINVAL;
}
void kl_pq_write_opts_default(kl_pq_write_opts *o) {
    memset(o, 0, sizeof *o);
    o->codec = KL_PQ_ZSTD; o->zstd_level = 3; o->row_group_rows = 1 << 20;
    o->row_group_bytes = 128u << 20; o->page_bytes = 1 << 20; o->dictionary = 1; o->page_stats = 1;
}
void kl_pq_file_info_clear(kl_pq_file_info *info) { if (info) { for (size_t i = 0; i < info->ncols; i++) free(info->cols[i].name); free(info->cols); memset(info, 0, sizeof *info); } }
#define NI(e) kl_err_set(e, KL_EUNSUPPORTED, "parquet: not implemented yet")
int kl_pq_writer_open(const char *path, kl_column *const *s, size_t n, const kl_pq_write_opts *o, kl_pq_writer **out, kl_err *e) { *out = NULL; return NI(e); }
int kl_pq_writer_set_kv(kl_pq_writer *w, const char *k, const char *v, kl_err *e) { return NI(e); }
int kl_pq_writer_write(kl_pq_writer *w, kl_column *const *c, size_t n, kl_err *e) { return NI(e); }
int kl_pq_writer_close(kl_pq_writer *w, kl_pq_file_info *info, kl_err *e) { return NI(e); }
void kl_pq_writer_abort(kl_pq_writer *w) {}
int kl_pq_write_file(const char *p, kl_column *const *c, size_t n, const kl_pq_write_opts *o, kl_pq_file_info *i, kl_err *e) { return NI(e); }
int kl_pq_open(const char *path, kl_pq_reader **out, kl_err *e) { *out = NULL; return NI(e); }
int kl_pq_open_mem(const void *d, size_t l, const char *n, kl_pq_reader **out, kl_err *e) { *out = NULL; return NI(e); }
void kl_pq_close(kl_pq_reader *r) {}
uint64_t kl_pq_num_rows(const kl_pq_reader *r) { return 0; }
size_t kl_pq_num_row_groups(const kl_pq_reader *r) { return 0; }
uint64_t kl_pq_row_group_rows(const kl_pq_reader *r, size_t rg) { return 0; }
size_t kl_pq_num_columns(const kl_pq_reader *r) { return 0; }
const kl_pq_column_info *kl_pq_column(const kl_pq_reader *r, size_t i) { return NULL; }
int kl_pq_find_column(const kl_pq_reader *r, const char *name) { return -1; }
const char *kl_pq_created_by(const kl_pq_reader *r) { return ""; }
const char *kl_pq_kv(const kl_pq_reader *r, const char *key) { return NULL; }
int kl_pq_stats(const kl_pq_reader *r, size_t rg, size_t col, kl_pq_col_stats *out, kl_err *e) { return NI(e); }
int kl_pq_select(kl_pq_reader *r, const char *const *names, size_t n, kl_err *e) { return NI(e); }
size_t kl_pq_num_selected(const kl_pq_reader *r) { return 0; }
const kl_pq_column_info *kl_pq_selected(const kl_pq_reader *r, size_t i) { return NULL; }
int kl_pq_filter(kl_pq_reader *r, const char *c, kl_pq_op op, const kl_pq_value *v, size_t n, kl_err *e) { return NI(e); }
void kl_pq_filter_clear(kl_pq_reader *r) {}
void kl_pq_scan_stats_get(const kl_pq_reader *r, kl_pq_scan_stats *out) { memset(out, 0, sizeof *out); }
int kl_pq_read_batch(kl_pq_reader *r, size_t m, kl_column **cols, size_t *nrows, kl_err *e) { *nrows = 0; return NI(e); }
void kl_pq_rewind(kl_pq_reader *r) {}
int kl_pq_next_row(kl_pq_reader *r, kl_pq_value *row, kl_err *e) { return NI(e); }
int kl_pq_read_file(const char *p, const char *const *nm, size_t nn, kl_column ***cols, size_t *ncols, kl_err *e) { *cols = NULL; *ncols = 0; return NI(e); }
