/* keel bench (placeholder). */
#include "app.h"
int cmd_bench(int argc, char **argv) { return 1; }
