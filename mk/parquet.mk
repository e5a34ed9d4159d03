# Parquet (src/data/parquet*.c): version stamp in created_by, and the
.DEFAULT_GOAL := all
# libFuzzer target of the reader (`make fuzz-parquet`, clang only).
$(BUILD)/obj/src/data/parquet_write.o: CFLAGS += -DKL_PQ_VERSION='"$(VERSION)"'

FUZZ_PQ = build/fuzz/parquet_fuzz
.PHONY: fuzz-parquet
fuzz-parquet: $(FUZZ_PQ)
$(FUZZ_PQ): fuzz/fuzz_parquet.c $(wildcard src/data/parquet*.c src/data/thrift.c src/data/column.c src/data/values.c src/core/*.c)
	@mkdir -p $(dir $@)
	clang -O1 -g -std=c11 -D_GNU_SOURCE -DKL_PQ_VERSION='"fuzz"' -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -Iinclude -Isrc $(PKG_CFLAGS) $^ -o $@ $(PKG_LIBS) -lm -ldl -pthread

# The Parquet test/benchmark driver (tests/integration/parquet_*.py, bench/parquet).
PQ_TOOL = $(BUILD)/parquet-tool
all: $(PQ_TOOL)
$(PQ_TOOL): $(BUILD)/obj/tests/integration/parquet_tool.o $(BUILD)/libkeel.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libkeel.a $(LDLIBS)

# Runs the reader fuzzer for FUZZ_SECONDS (default 600) on a corpus seeded
# with parquet-testing files and keel-written files.
FUZZ_SECONDS ?= 600
.PHONY: fuzz-parquet-run
fuzz-parquet-run: $(FUZZ_PQ) $(BUILD)/parquet-tool
	@bash fuzz/run_parquet.sh $(FUZZ_PQ) $(FUZZ_SECONDS) $(BUILD)
