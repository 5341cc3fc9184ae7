# ferry - the two commands of the README, and a few helpers.
#   make demo   build, then run ferry's main job on this machine
#   make test   build (normal + address/undefined sanitizers) and run the whole suite
BUILD ?= build
ASAN  ?= build-asan
JOBS  ?= 2
CMAKE_FLAGS ?=

.PHONY: all deps build build-asan demo test test-normal test-asan install clean format

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

install: build
	cmake --install $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN)
