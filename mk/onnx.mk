# ONNX protobuf: C code generated at build time by protoc-c from Debian's
# onnx.proto (libonnx-dev). Output in $(BUILD)/gen/onnx/; the loader includes
# "onnx/onnx.pb-c.h" (with -I$(BUILD)/gen).
# (included before the Makefile defines `all`: keep it the default goal)
.DEFAULT_GOAL := all
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
ONNX_GEN_C  = $(BUILD)/gen/onnx/onnx.pb-c.c
ONNX_GEN_H  = $(BUILD)/gen/onnx/onnx.pb-c.h
GEN_SRCS   += $(ONNX_GEN_C)

$(ONNX_GEN_C) $(ONNX_GEN_H) &: $(ONNX_PROTO)
	@mkdir -p $(BUILD)/gen/onnx
	@echo "  PROTOC  $<"
	@cp $< $(BUILD)/gen/onnx/onnx.proto
	@cd $(BUILD)/gen/onnx && protoc-c --c_out=. onnx.proto

# SequenceProto / OptionalProto (keel's subset of onnx-data.proto, which
# imports onnx.proto): sequence and optional values in test data files.
ONNX_DATA_GEN_C = $(BUILD)/gen/onnx/onnx_data.pb-c.c
ONNX_DATA_GEN_H = $(BUILD)/gen/onnx/onnx_data.pb-c.h
GEN_SRCS       += $(ONNX_DATA_GEN_C)
$(ONNX_DATA_GEN_C) $(ONNX_DATA_GEN_H) &: src/onnx/onnx_data.proto $(ONNX_GEN_H)
	@echo "  PROTOC  $<"
	@cp $< $(BUILD)/gen/onnx/onnx_data.proto
	@cd $(BUILD)/gen/onnx && protoc-c --c_out=. onnx_data.proto

# Everything in src/onnx and src/graph may include the generated header.
$(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard src/onnx/*.c src/graph/*.c tests/unit/onnx/*.c tests/onnx/*.c)): $(ONNX_GEN_H) $(ONNX_DATA_GEN_H)

# The ONNX backend node-test runner (tests/integration/onnx_node.sh runs it).
ONNX_TEST = $(BUILD)/keel-onnx-test
all: $(ONNX_TEST)
$(ONNX_TEST): $(BUILD)/obj/tests/onnx/node_runner.o $(BUILD)/libkeel.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libkeel.a $(LDLIBS)
-include $(BUILD)/obj/tests/onnx/node_runner.d
