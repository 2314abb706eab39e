# 1bit — plain Makefile. `make help` lists the targets.

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c17 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -pthread -MMD -MP -Isrc -Iinclude
LDLIBS  += -lmicrohttpd -lcurl -ljansson -lpcre2-8 -lm -pthread
LDLIBS  += -lutf8proc -licuuc
BUILD   ?= build
# LEAN=0 builds without the lean4 weight type (docs/lean.md): such a build refuses lean4 files
# with a message that names the missing feature.
LEAN    ?= 1
ifeq ($(LEAN),0)
CFLAGS  += -DOB_NO_LEAN
endif

SRC_ALL  := $(shell find src -name '*.c' | sort)
SRC_LIB  := $(filter-out src/main.c,$(SRC_ALL))
OBJ_LIB  := $(SRC_LIB:%.c=$(BUILD)/obj/%.o)
OBJ_MAIN := $(BUILD)/obj/src/main.o
TEST_SRC := $(shell find tests/unit -name '*.c' | sort)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all test test-unit test-golden test-cuda e2e help clean deps fuzz test-asan

all: $(BUILD)/1bit

# CUDA=1 adds the CUDA backend (src/backend/cuda/*.cu, docs/cuda.md) for sm_80 and sm_90; plain
# `make` needs no nvcc. The setting is remembered in $(BUILD)/cuda.stamp so that switching it
# rebuilds the objects that depend on it (backend.o, the library, the programs).
CUDA      ?= 0
ifeq ($(MAKECMDGOALS),test-cuda)
CUDA      := 1
endif
CUDA_PATH ?= /usr/local/cuda
NVCC      ?= $(CUDA_PATH)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVFLAGS   ?= -O3
NVFLAGS   += -std=c++17 $(CUDA_ARCH) -Isrc -Iinclude -MMD -MP -Xcompiler -Wall,-Wno-unused-parameter,-Wno-unused-function,-Wno-unknown-pragmas
CUDA_STAMP := $(BUILD)/cuda.stamp
$(shell mkdir -p $(BUILD); echo $(CUDA) | cmp -s - $(CUDA_STAMP) 2>/dev/null || echo $(CUDA) > $(CUDA_STAMP))
ifeq ($(CUDA),1)
CFLAGS  += -DOB_CUDA
NVFLAGS += -DOB_CUDA
ifeq ($(LEAN),0)
NVFLAGS += -DOB_NO_LEAN
endif
SRC_CU  := $(shell find src/backend/cuda -name '*.cu' | sort)
OBJ_LIB += $(SRC_CU:%.cu=$(BUILD)/obj/%.o)
LDLIBS  += -L$(CUDA_PATH)/lib64 -Wl,-rpath,$(CUDA_PATH)/lib64 -lcublas -lcudart -lstdc++
endif
$(BUILD)/obj/src/backend/backend.o $(BUILD)/obj/tests/unit/test_cuda.o: $(CUDA_STAMP)

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c -o $@ $<

$(BUILD)/1bit: $(OBJ_MAIN) $(BUILD)/lib1bit.a
	$(CC) $(CFLAGS) -o $@ $(OBJ_MAIN) $(BUILD)/lib1bit.a $(LDLIBS)

$(BUILD)/lib1bit.a: $(OBJ_LIB) $(CUDA_STAMP)
	@rm -f $@
	ar rcs $@ $(OBJ_LIB)

# Microbenchmarks beside the binary (bench/kbench.c: CPU matmul kernels; bench/sample_bench.c:
# the scheduler's sampling, serial and on a thread pool).
$(BUILD)/kbench $(BUILD)/sample_bench: $(BUILD)/%: bench/%.c $(BUILD)/lib1bit.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/lib1bit.a $(LDLIBS)

# The default model, compiled into the binary (src/engine/embedded.c); EMBED_MODEL= leaves it out.
EMBED_MODEL ?= models/demo-tq2_0.gguf
ifneq ($(EMBED_MODEL),)
$(BUILD)/obj/src/engine/embedded.o $(BUILD)/fuzz/obj/src/engine/embedded.o: CFLAGS += -DOB_EMBED_MODEL_PATH='"$(EMBED_MODEL)"'
$(BUILD)/obj/src/engine/embedded.o $(BUILD)/fuzz/obj/src/engine/embedded.o: $(EMBED_MODEL)
endif

# `1bit serve --version` prints llama-server's 'version: N (commit)'.
$(BUILD)/obj/src/tools/serve.o: CFLAGS += -DOB_BUILD_NUMBER=$(shell git rev-list --count HEAD 2>/dev/null || echo 0) \
	-DOB_GIT_COMMIT='"$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)"'

# CPU kernels: each instruction set's file gets its own target flags; the portable code checks
# the CPU (kernels_common.c) before calling into them, so the binary still runs on any x86-64.
ifneq (,$(findstring x86_64,$(shell $(CC) -dumpmachine)))
$(BUILD)/obj/src/backend/cpu/kernels_avx2.o $(BUILD)/fuzz/obj/src/backend/cpu/kernels_avx2.o: CFLAGS += -mavx2 -mfma -mf16c -mbmi2
$(BUILD)/obj/src/backend/cpu/kernels_avxvnni.o $(BUILD)/fuzz/obj/src/backend/cpu/kernels_avxvnni.o: CFLAGS += -mavx2 -mfma -mf16c -mbmi2 -mavxvnni
$(BUILD)/obj/src/backend/cpu/kernels_avx512.o $(BUILD)/fuzz/obj/src/backend/cpu/kernels_avx512.o: CFLAGS += -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl \
	-mavx512dq -mavx512vnni
$(BUILD)/obj/src/backend/cpu/kernels_amx.o $(BUILD)/fuzz/obj/src/backend/cpu/kernels_amx.o: CFLAGS += -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl \
	-mavx512dq -mavx512vnni -mamx-tile -mamx-int8
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/test_unit: $(TEST_OBJ) $(BUILD)/lib1bit.a
	$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(BUILD)/lib1bit.a $(LDLIBS)

# CUDA kernels against the CPU reference and every architecture's golden test on the GPU
# (built with CUDA=1; prints a skip message and passes where no GPU is found).
test-cuda:
	$(MAKE) --no-print-directory CUDA=1 $(BUILD)/test_unit $(BUILD)/1bit
	./$(BUILD)/test_unit cuda_host cuda_kernels cuda_golden

# Every test: unit suites (incl. bad-file and golden suites) in one C runner, then the
# end-to-end tests (a real `1bit serve` driven by the official openai npm client).
test: $(BUILD)/1bit $(BUILD)/test_unit
	./$(BUILD)/test_unit
	$(MAKE) --no-print-directory e2e

# End-to-end tests only (installs tests/e2e/node_modules from package-lock.json when missing).
e2e: $(BUILD)/1bit
	@test -d tests/e2e/node_modules || npm ci --prefix tests/e2e --no-audit --no-fund
	cd tests/e2e && node --test --test-concurrency=1

# A subset of suites: make test-unit SUITES="gguf quant"
test-unit: $(BUILD)/test_unit
	./$(BUILD)/test_unit $(SUITES)

# The unit suites and the e2e tests under AddressSanitizer + UndefinedBehaviorSanitizer (leak
# detection on), built by $(CC) into build-asan/ (ASAN_BUILD). SUITES picks unit suites,
# E2E_FILES e2e files; ASAN_E2E=0 skips the e2e part. A server's leaks show when it exits on
# SIGTERM: the e2e helper fails a test whose server reported one (OB_E2E_SANITIZED).
# docs/reliability.md has the times.
ASAN_BUILD ?= build-asan
# -O2 as the normal build: the AVX2 kernels pass shuffle immediates that are constants only once
# inlined (gcc refuses them at -O1).
ASAN_CFLAGS := -O2 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
ASAN_E2E   ?= 1
# bench.test.mjs times two servers streaming side by side against its own 120 s limits: under
# ASan on 2 cores the --rounds test ran past them (0.1-2.5 tokens/s), so it is left out here.
ASAN_E2E_FILES ?= $(filter-out bench.test.mjs,$(notdir $(wildcard tests/e2e/*.test.mjs)))
test-asan:
	CFLAGS="$(ASAN_CFLAGS)" $(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) $(ASAN_BUILD)/1bit $(ASAN_BUILD)/test_unit
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		./$(ASAN_BUILD)/test_unit $(SUITES)
ifeq ($(ASAN_E2E),1)
	@test -d tests/e2e/node_modules || npm ci --prefix tests/e2e --no-audit --no-fund
	cd tests/e2e && OB_E2E_BIN=$(CURDIR)/$(ASAN_BUILD)/1bit OB_E2E_SANITIZED=1 \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		node --test --test-concurrency=1 $(or $(E2E_FILES),$(ASAN_E2E_FILES))
endif

# Fuzzing (clang + libFuzzer): `make fuzz` builds every harness tests/fuzz/NAME.c into
# $(BUILD)/fuzz/NAME against the modules in FUZZ_LIB_SRC, instrumented (fuzzer-no-link) with ASan
# and UBSan. The whole library is instrumented (the request harness reaches the server, the
# engine and the embedded demo model); a kernel file keeps its instruction-set flags (the -m
# options of its CFLAGS above). Each harness's header says how to run it; tests/fuzz/run.sh runs
# one with the standard options.
FUZZ_CC    ?= clang
FUZZ_FLAGS := -g -O1 -std=c17 -D_GNU_SOURCE -Isrc -Iinclude -pthread -fno-sanitize-recover=undefined -MMD -MP
FUZZ_BIN   := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/*.c))
FUZZ_LIB_SRC := $(SRC_LIB)
FUZZ_OBJ   := $(FUZZ_LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)

fuzz: $(FUZZ_BIN)

$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(filter -m% -D%,$(CFLAGS)) -fsanitize=fuzzer-no-link,address,undefined -c -o $@ $<

# The CPU backend uses a builtin clang 14 lacks (__builtin_cpu_supports("f16c")): it is built by
# $(CC) without instrumentation (no harness runs a forward pass).
$(BUILD)/fuzz/obj/src/backend/%.o: src/backend/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/fuzz/lib1bit.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/fuzz/lib1bit.a
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LDLIBS)

deps:
	./scripts/deps.sh

clean:
	rm -rf $(BUILD) tests/tmp

help:
	@echo "make            build $(BUILD)/1bit (CPU)"
	@echo "make CUDA=1     also the CUDA backend (nvcc, sm_80 + sm_90; --device cuda)"
	@echo "make test-cuda  CUDA kernels vs the CPU reference + golden tests on the GPU (skips without one)"
	@echo "make test       build and run every test (prints 'N passed, N failed')"
	@echo "make test-unit SUITES='gguf quant'   run some suites"
	@echo "make LEAN=0     build without the lean4 weight type (BUILD=build-nolean keeps it apart)"
	@echo "make e2e        end-to-end tests of 1bit serve (node --test, official openai client)"
	@echo "make fuzz       libFuzzer harnesses of tests/fuzz into $(BUILD)/fuzz/ (clang)"
	@echo "make test-asan  unit + e2e tests under ASan/UBSan (build-asan/; SUITES=, E2E_FILES=, ASAN_E2E=0)"
	@echo "make deps       install build dependencies from Debian (no-op when present)"
	@echo "make clean      remove $(BUILD)/"

-include $(OBJ_LIB:.o=.d) $(OBJ_MAIN:.o=.d) $(TEST_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d)
