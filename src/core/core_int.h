/* Private header of src/core: shared between the core's own files only. */
#ifndef KEEL_CORE_INT_H
#define KEEL_CORE_INT_H

#include <keel/core.h>
#include <pthread.h>

/* Log writer lock, shared with the progress display so that a log line and
 * a progress redraw never interleave on the terminal. */
void kl__log_lock(void);
void kl__log_unlock(void);
/* Progress line currently shown on the terminal (cleared before a log line
 * is written and redrawn after). Called with the log lock held. */
void kl__progress_clear_line(FILE *out);
void kl__progress_redraw_line(FILE *out);
FILE *kl__log_stream(void);
/* x as printf's "%.6g" writes it (the log line's number fields), without
 * printf; returns the length (< 32, no NUL). */
int kl__log_fmt_g6(char *out, double x);

#endif
