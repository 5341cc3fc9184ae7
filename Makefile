# ferry - the two commands of the README, and a few helpers.
#   make demo   build, then run ferry's main job on this machine
#   make test   build (normal + address/undefined/leak sanitizers) and run the whole suite
# and for CI (.ci/run runs them all):
#   make test-min      a build without the optional libraries (libfabric, libpmix), unit tests
#   make test-tsan     the thread sanitizer over the tests that use threads (label threads)
#   make fuzz          the libFuzzer targets of tests/fuzz, each for FUZZ_TIME seconds
#   make fuzz-smoke    the same, each for FUZZ_SMOKE_TIME seconds
#   make format-check  every tracked C file against .clang-format
BUILD ?= build
ASAN  ?= build-asan
TSAN  ?= build-tsan
MIN   ?= build-min
REL   ?= build-bench
FUZZ  ?= build-fuzz
JOBS  ?= 2
CMAKE_FLAGS ?=
FUZZ_TIME ?= 600
FUZZ_SMOKE_TIME ?= 10

.PHONY: all deps build build-asan demo test test-normal test-asan install clean format \
        format-check build-min test-min build-release build-tsan test-tsan build-fuzz fuzz fuzz-smoke

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# The sanitizer build uses clang, so every `make test` checks both compilers' warnings.
$(ASAN)/CMakeCache.txt:
	CC=clang cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=ON $(CMAKE_FLAGS)

build-asan: deps $(ASAN)/CMakeCache.txt
	cmake --build $(ASAN) -j$(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test-normal: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 300

# LeakSanitizer is on: the harness's forked children leave through fytest_exit, which runs the
# leak check; tests/sanitizer proves a leak in a child is reported.
test-asan: build-asan
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(JOBS) --timeout 300 -LE nosan

test: test-normal test-asan
	@echo "ferry: all tests passed (normal and sanitizer builds)"

# The build targets of the tests with a label (a test is named as its program; script tests
# have no target of their own and are left out): $(call label_targets,DIR,LABEL)
label_targets = cd $(1) && cmake --build . --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p' \
  >.targets && ctest -N -L $(2) | sed -n 's/^ *Test *\#[0-9]*: //p' | grep -xFf .targets

# pkg-config looks in an empty directory only, so libfabric and libpmix are not found even
# where they are installed: the build must still work, without the ofi transport and the
# pmix bootstrap (the check after configuring proves they are off).
$(MIN)/CMakeCache.txt:
	mkdir -p $(MIN)/no-pkgconfig
	PKG_CONFIG_LIBDIR=$(abspath $(MIN))/no-pkgconfig PKG_CONFIG_PATH= \
	  cmake -S . -B $(MIN) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	! grep -E 'FERRY_(HAVE_PMIX|TL_OFI)' $(MIN)/gen/ferry_build.h

# the library, the tools and the unit tests (whose targets are named as their tests)
build-min: deps $(MIN)/CMakeCache.txt
	cmake --build $(MIN) -j$(JOBS) --target ferry ferry_static ferry_info ferry_perf ferryrun \
	  $$($(call label_targets,$(MIN),unit))

test-min: build-min
	cd $(MIN) && ctest --output-on-failure -j$(JOBS) --timeout 300 -L unit

# The optimized build bench/run.sh measures (gcc -O3 warns where -O2 does not: CI compiles it).
build-release: deps
	cmake -S . -B $(REL) -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build $(REL) -j$(JOBS) --target ferry ferry_perf ferryrun ferry_info

# The thread sanitizer (clang) over the tests that start threads of their own.
$(TSAN)/CMakeCache.txt:
	CC=clang cmake -S . -B $(TSAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_TSAN=ON $(CMAKE_FLAGS)

# only what the threads tests need (each test's target is named as the test)
build-tsan: deps $(TSAN)/CMakeCache.txt
	cmake --build $(TSAN) -j$(JOBS) --target $$($(call label_targets,$(TSAN),threads))

test-tsan: build-tsan
	cd $(TSAN) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -j$(JOBS) --timeout 300 -L threads

# libFuzzer (clang): every target in tests/fuzz, one after the other, FUZZ_TIME seconds each.
$(FUZZ)/CMakeCache.txt:
	CC=clang cmake -S . -B $(FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_FUZZ=ON $(CMAKE_FLAGS)

build-fuzz: deps $(FUZZ)/CMakeCache.txt
	cmake --build $(FUZZ) -j$(JOBS) --target fuzz_all

fuzz: build-fuzz
	rm -f $(FUZZ)/fuzz-summary.txt
	tests/fuzz/run.sh $(FUZZ) $(FUZZ_TIME)

fuzz-smoke: build-fuzz
	rm -f $(FUZZ)/fuzz-summary.txt
	tests/fuzz/run.sh $(FUZZ) $(FUZZ_SMOKE_TIME)

install: build
	cmake --install $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN) $(TSAN) $(MIN) $(FUZZ)
