/* libFuzzer target: the prediction log's reading of a :predict body
 * (src/serve/predlog.c, kl__sv_plog_record_spans). The input is a request body;
 * when it is JSON the decoder accepts (kl_json_doc_parse), the spans of
 * its top-level "instances" elements must be found when their count is
 * given, each span must parse to a value equal to its element, and any
 * other count must be refused; whatever the input, no read goes past it. */
#include "serve/serve_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    size_t off[64], len[64];
    for (int64_t rows = 0; rows < 4; rows++)
        kl__sv_plog_record_spans(s, size, rows, off, len); /* bounded on anything */
    kl_json_doc *d = NULL;
    if (kl_json_doc_parse(s, size, "body", KL_JSON_KEEP_NUL, &d, NULL)) return 0;
    const cJSON *doc = kl_json_doc_root(d);
    const cJSON *inst = cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, "instances") : NULL;
    int n = cJSON_IsArray(inst) ? cJSON_GetArraySize(inst) : -1;
    int dup = 0; /* a second "instances" member: the first one is the decoder's, and the skipper's */
    for (const cJSON *c = cJSON_IsObject(doc) ? doc->child : NULL; c; c = c->next)
        dup += c->string && !strcmp(c->string, "instances");
    if (n >= 0 && n <= 64 && dup == 1) {
        if (!kl__sv_plog_record_spans(s, size, n, off, len)) abort();
        const cJSON *el = inst->child;
        for (int i = 0; i < n; i++, el = el->next) {
            void *v = NULL;
            if (kl_json_parse_opts(s + off[i], len[i], "span", KL_JSON_KEEP_NUL, &v, NULL)) abort();
            char *a = cJSON_PrintUnformatted(v), *b = cJSON_PrintUnformatted(el); /* duplicate keys kept, in order */
            if (!a || !b || strcmp(a, b)) abort();
            cJSON_free(a);
            cJSON_free(b);
            cJSON_Delete(v);
        }
        if (kl__sv_plog_record_spans(s, size, n + 1, off, len)) abort();
    }
    kl_json_doc_free(d);
    return 0;
}
