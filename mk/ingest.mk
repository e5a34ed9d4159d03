.DEFAULT_GOAL := all
# ingest: the keel version recorded in dataset manifests
$(BUILD)/obj/app/cmd_ingest.o: CFLAGS += -DKEEL_VERSION='"$(VERSION)"'

# libFuzzer target of the ingest parsers (`make fuzz-ingest`, clang only).
FUZZ_INGEST = build/fuzz/ingest_fuzz
.PHONY: fuzz-ingest
fuzz-ingest: $(FUZZ_INGEST)
$(FUZZ_INGEST): fuzz/fuzz_ingest.c src/data/csv.c src/data/values.c src/data/schema.c src/data/infer.c $(wildcard src/core/*.c)
	@mkdir -p $(dir $@)
	clang -O1 -g -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -Iinclude -Isrc $(PKG_CFLAGS) $^ -o $@ $(PKG_LIBS) -lm -ldl -pthread
