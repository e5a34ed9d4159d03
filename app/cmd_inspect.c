/* keel inspect: describes an ONNX model (placeholder, filled in below). */
#include "app.h"
int cmd_inspect(int argc, char **argv) { return 1; }
