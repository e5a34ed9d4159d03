# keel — build, test and set-up. `make` builds build/libkeel.a and build/keel.
# Modules are discovered: src/<module>/*.c go into libkeel, app/*.c into keel,
# tests/unit/**/*.c into the one unit-test runner. Extra rules of a module
# (generated code, ...) live in mk/<module>.mk.

SHELL    := /bin/bash
comma    := ,
SANITIZE ?=
CC       ?= cc
ifeq ($(origin CC),default)
CC       := gcc
endif

ifeq ($(SANITIZE),)
BUILD    ?= build
SANFLAGS :=
else
BUILD    ?= build/san-$(subst $(comma),-,$(SANITIZE))
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

PKGS := openblas libcrypto yaml-0.1 libcjson libzstd snappy zlib liblz4 libbrotlidec libturbojpeg \
        libpng libcurl libmicrohttpd sqlite3 libpq libprotobuf-c ompi hiredis

# Kernels use AVX2/FMA/F16C when the build machine has them (keel doctor reports it).
ARCHFLAGS := $(shell grep -q ' avx2 ' /proc/cpuinfo 2>/dev/null && grep -q ' fma ' /proc/cpuinfo && echo -march=x86-64-v3)

OPT      ?= -O2
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation \
            -Iinclude -Isrc -I$(BUILD)/gen $(ARCHFLAGS) $(SANFLAGS) $(PKG_CFLAGS) -MMD -MP
ifneq ($(findstring clang,$(CC)),)
CFLAGS   += -Wno-unknown-warning-option
endif
LDFLAGS  += -pthread $(SANFLAGS)
LDLIBS   += -Wl,--as-needed $(PKG_LIBS) -lm -ldl
BUILD_INFO = -DKEEL_VERSION='"$(VERSION)"' -DKEEL_GIT_COMMIT='"$(GIT_COMMIT)"' \
             -DKEEL_CC='"$(shell $(CC) --version | head -1)"' -DKEEL_CFLAGS='"$(OPT) $(ARCHFLAGS) $(SANFLAGS)"'

LIB   = $(BUILD)/libkeel.a
KEEL  = $(BUILD)/keel
UNIT  = $(BUILD)/keel-unit
# keel with the test hooks compiled in (src/core/hooks.c with -DKEEL_TEST_HOOKS,
# linked ahead of the library): only the crash-consistency tests run it.
HOOKS = $(BUILD)/keel-hooks
HOOKS_OBJ = $(BUILD)/obj-hooks/src/core/hooks.o

GEN_SRCS   =
-include mk/*.mk

LIB_SRCS   = $(sort $(wildcard src/*/*.c src/*/*/*.c)) $(GEN_SRCS)
APP_SRCS   = $(sort $(wildcard app/*.c))
UNIT_SRCS  = $(sort $(wildcard tests/unit/*.c tests/unit/*/*.c))
LIB_OBJS   = $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS:$(BUILD)/%=%))
APP_OBJS   = $(patsubst %.c,$(BUILD)/obj/%.o,$(APP_SRCS))
UNIT_OBJS  = $(patsubst %.c,$(BUILD)/obj/%.o,$(UNIT_SRCS))

.PHONY: all deps test test-unit quickstart bench fuzz clean docs
all: $(LIB) $(KEEL) $(UNIT) $(HOOKS)

deps:
	@sh mk/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -Wno-error -c $< -o $@

$(BUILD)/obj/app/cmd_version.o: CFLAGS += $(BUILD_INFO)
$(BUILD)/obj/app/cmd_version.o: $(wildcard .git/HEAD .git/index)

$(LIB): $(LIB_OBJS)
	@rm -f $@
	@echo "  AR      $@"
	@ar rcs $@ $^

$(KEEL): $(APP_OBJS) $(LIB)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(APP_OBJS) $(LIB) $(LDLIBS)

$(HOOKS_OBJ): src/core/hooks.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (test hooks)"
	@$(CC) $(CFLAGS) -DKEEL_TEST_HOOKS -c $< -o $@

$(HOOKS): $(APP_OBJS) $(HOOKS_OBJ) $(LIB)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(APP_OBJS) $(HOOKS_OBJ) $(LIB) $(LDLIBS)

$(UNIT): $(UNIT_OBJS) $(LIB)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(UNIT_OBJS) $(LIB) $(LDLIBS)

# make test = deps + build + every test; ends with "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) bash tests/run.sh

# Unit tests only (CI runs these under the sanitizers).
test-unit: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(UNIT) $(KEEL) $(HOOKS)
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) KEEL_TEST_ONLY=unit bash tests/run.sh

# The main job. Until the pipeline lands it builds keel and runs `keel doctor`.
quickstart: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@bash tools/quickstart.sh $(BUILD)

# The command reference docs/commands.md, generated from every command's --help,
# and the README's tour, run for real (tests/integration/docs_commands.sh and
# docs_tour.sh fail when either is stale).
docs: $(KEEL)
	@bash tools/gen-command-docs.sh $(KEEL) docs/commands.md
	@/usr/bin/python3 tools/gen-tour.py $(KEEL) README.md

bench: deps
	@$(MAKE) --no-print-directory all OPT=-O3
	@BUILD=$(BUILD) bash bench/run.sh

fuzz: deps
	@bash tools/fuzz.sh

clean:
	rm -rf build

-include $(LIB_OBJS:.o=.d) $(APP_OBJS:.o=.d) $(UNIT_OBJS:.o=.d) $(HOOKS_OBJ:.o=.d)
