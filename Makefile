# selroll — one plain Makefile. Every .c under the role folders, tools/ and common/ goes into
# build/libselroll.a, every .c under bench/ into build/libselroll_bench.a; bin/selroll is selroll.c
# linked against both; each tests/test_<module>.c
# becomes build/tests/test_<module>, linked with tests/harness.c.

PREFIX   ?= /usr/local
CC       ?= cc
SANITIZE ?=
PKGS     := libzmq msgpack hiredis libcurl libcjson libmicrohttpd
TEST_PKGS := cmocka

CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -fno-strict-aliasing -MMD -MP -I. $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -lm
TEST_CFLAGS := $(shell pkg-config --cflags $(TEST_PKGS) 2>/dev/null)
TEST_LIBS   := $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null)

# SANITIZE=address,undefined (or any -fsanitize= list) builds into build-san/ and
# build-san/selroll, so the plain build and bin/selroll stay as they are; UBSan errors abort.
# SANITIZE=undefined alone (what `make test-ubsan` uses) builds into build-ubsan/.
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -DSELROLL_SANITIZE
LDFLAGS += -fsanitize=$(SANITIZE)
ifneq ($(findstring undefined,$(SANITIZE)),)
CFLAGS  += -fno-sanitize-recover=undefined
endif
ifeq ($(SANITIZE),undefined)
B   := build-ubsan
else
B   := build-san
endif
BIN := $(B)/selroll
else
B   := build
BIN := bin/selroll
endif
# The rooms: common/ (shared by two or more roles), the roles, tools/ (commands that are no role).
ROOMS     := common coordinator actor gate env_worker env_worker/household policy trainer tools
LIB_SRCS  := $(sort $(foreach d,$(ROOMS),$(wildcard $(d)/*.c)))
LIB_OBJS  := $(LIB_SRCS:%.c=$(B)/%.o)
# bench/ is an archive of its own, linked into bin/selroll (and the tests of bench/) only.
BENCH_SRCS := $(sort $(wildcard bench/*.c))
BENCH_OBJS := $(BENCH_SRCS:%.c=$(B)/%.o)
# The dashboard page is built into the binary: scripts/embed.sh turns it into a C array.
LIB_OBJS  += $(B)/gen/dashboard_page.o
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(TEST_SRCS:tests/%.c=$(B)/tests/%)
HARNESS   := $(B)/tests/harness.o

.SECONDARY:
.PHONY: neural-weights run-neural
.PHONY: all deps deps-test test test-unit test-valgrind test-ubsan test-integration test-python run bench clean install format
.PHONY: fuzz fuzz-short fuzz-build

all: $(BIN) $(TEST_BINS)

deps:
	@bash scripts/deps.sh

deps-test:
	@bash scripts/deps.sh --test

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(TEST_CFLAGS) -c $< -o $@

$(B)/gen/dashboard_page.c: coordinator/web/dashboard.html scripts/embed.sh
	@mkdir -p $(dir $@)
	bash scripts/embed.sh dashboard_page $< > $@

$(B)/gen/dashboard_page.o: $(B)/gen/dashboard_page.c
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/libselroll.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(B)/libselroll_bench.a: $(BENCH_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(B)/selroll.o $(B)/libselroll_bench.a $(B)/libselroll.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/test_%: $(B)/tests/test_%.o $(HARNESS) $(B)/libselroll.a
	$(CC) $(LDFLAGS) -o $@ $^ $(TEST_LIBS) $(LDLIBS)

# The tests that include a bench/ header link its archive before the library.
BENCH_TEST_BINS := $(patsubst tests/%.c,$(B)/tests/%,$(shell grep -l '^\#include "bench/' $(TEST_SRCS)))
$(BENCH_TEST_BINS): $(B)/tests/%: $(B)/tests/%.o $(HARNESS) $(B)/libselroll_bench.a $(B)/libselroll.a
	$(CC) $(LDFLAGS) -o $@ $^ $(TEST_LIBS) $(LDLIBS)

# Unit tests: the include rules of the tree (tests/check_layers.sh), then every tests/test_*
# binary, each with a time limit. cmocka's own lines stay in the log.
test-unit: all
	@bash tests/check_layers.sh
	@bash tests/run_unit.sh $(TEST_BINS)

# The same unit tests under valgrind memcheck: any leak or error fails the run.
test-valgrind: all
	@SELROLL_VALGRIND=1 bash tests/run_unit.sh $(TEST_BINS)

# The same unit tests built with UndefinedBehaviorSanitizer (build-ubsan/): any report fails the
# test (-fno-sanitize-recover=undefined). The ASan + UBSan build is `make SANITIZE=address,undefined
# test-unit` (slower; not part of `make test`).
test-ubsan:
	@$(MAKE) --no-print-directory -j$$(nproc) SANITIZE=undefined test-unit

# Python tests: the package under python/ (pytest from Debian's python3-pytest, the Debian
# python3 that has python3-zmq, python3-msgpack and python3-torch). pytest's own lines stay in the log.
PYTHON ?= /usr/bin/python3
test-python: all
	@cd python && SELROLL_BIN=$(CURDIR)/$(BIN) PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -rs tests

# The neural agent's checkpoint (python/selroll/neural, docs/neural.md): behaviour cloning from the
# household expert in two stages, each in chunks of at most 18 minutes that resume its work directory
# (nice'd, one torch thread; about an hour of CPU in all). Stage 1: 12,000 train tasks with 25%
# admissible exploration steps, stopped at the first evaluation (every 383 steps) within 30-50%.
# Stage 2: from stage 1's weights, one epoch over 8,000 new train tasks with 20% admissible and 10%
# inadmissible exploration steps. A finished stage is copied, not redone.
NEURAL_WEIGHTS = python/selroll/neural/weights/household.pt
neural-weights: all
	@scripts/neural_pretrain.sh $(CURDIR)/build/neural/pretrain --out $(CURDIR)/build/neural/stage1.pt \
		--train-tasks 12000 --noise 0.25 --epochs 2 --d-model 128 --heads 4 --layers 4 --eval-steps 383
	@scripts/neural_pretrain.sh $(CURDIR)/build/neural/pretrain-bad --init $(CURDIR)/build/neural/stage1.pt \
		--out $(CURDIR)/$(NEURAL_WEIGHTS) --first-task 12000 --train-tasks 8000 --noise 0.2 --bad-noise 0.1 \
		--seed 2 --epochs 1 --lr 8e-4 --eval-steps 300 --target-min 0.99 --target-max 1.0

# Integration tests: real processes, real sockets, a private redis-server each.
test-integration: all
	@bash tests/run_integration.sh

test: deps-test
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-unit
	@$(MAKE) --no-print-directory test-valgrind
	@$(MAKE) --no-print-directory test-ubsan
	@$(MAKE) --no-print-directory fuzz-short
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory test-integration

# Fuzzing with libFuzzer (clang): each tests/fuzz/fuzz_<x>.c is linked with the library sources it
# reaches, all built with -fsanitize=fuzzer,address,undefined under build/fuzz/. `make fuzz` runs
# each target FUZZ_SECONDS and merges new finds into tests/fuzz/corpus/<target>/; `make fuzz-short`
# (part of `make test`) runs each FUZZ_SHORT_SECONDS on the committed corpus.
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 60
FUZZ_SHORT_SECONDS ?= 4
FUZZ_CFLAGS   := -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -MMD -MP -I. \
                 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                 $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
FUZZ_LIB_SRCS := common/proto.c common/proto_enc.c common/proto_scan.c common/proto_dec.c \
                 common/proto_dec_result.c common/sr_buf.c common/sr.c common/llm_client.c \
                 common/llm_client_json.c common/llm_client_lpscan.c common/llm_client_multi.c \
                 common/llm_client_fast.c common/llm_client_fast_tok.c \
                 common/llm_client_h1.c \
                 common/log.c common/clock.c env_worker/household/household.c \
                 env_worker/household/household_gen.c env_worker/household/household_step.c \
                 env_worker/household/household_text.c env_worker/household/household_data.c \
                 env_worker/household/expert.c \
                 common/pparse.c common/jsonw.c common/jsonscan.c common/http_srv.c \
                 common/http_srv_accept.c common/metrics.c
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(B)/fuzz/obj/%.o)
FUZZ_BINS     := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))

$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(filter %.c %.o,$^) -o $@ $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	@bash tests/fuzz/run.sh long $(FUZZ_SECONDS) $(FUZZ_BINS)

fuzz-short: fuzz-build
	@bash tests/fuzz/run.sh short $(FUZZ_SHORT_SECONDS) $(FUZZ_BINS)

run: deps
	@$(MAKE) --no-print-directory bin/selroll
	./bin/selroll run

# The neural agent learning by GRPO through selroll (docs/neural.md, "GRPO training"): 10
# iterations with the run's defaults, the committed checkpoint served and trained.
run-neural: bin/selroll
	./bin/selroll run --policy neural --iters 10 --http off --out build/run-neural

bench: bin/selroll
	./bin/selroll bench all

install: bin/selroll
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 bin/selroll $(DESTDIR)$(PREFIX)/bin/selroll

format:
	clang-format -i $(LIB_SRCS) $(BENCH_SRCS) $(foreach d,$(ROOMS) bench,$(wildcard $(d)/*.h)) $(wildcard tests/*.c tests/*.h) selroll.c

clean:
	rm -rf build build-san build-ubsan bin

-include $(shell find $(B) -name '*.d' 2>/dev/null)
