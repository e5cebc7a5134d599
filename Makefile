# Conventional entry points over CMake. `make run` and `make test` are the
# two README commands; both install missing Debian packages first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: run test build deps test-deps sanitize fuzz clean

run: deps build
	$(BUILD)/host/cli/inferlab run --prompt "$(or $(PROMPT),Once upon a time)"

# Fails when a test fails, when no test ran, or when a test skipped that
# tests/skip-allowlist.txt does not allow.
test: test-deps build
	scripts/run-tests.sh $(BUILD) $(JOBS)

build:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer;
# SANITIZE_FLAGS adds CMake flags (CI: the compiler, -DILAB_INDEP_PLUGINS=OFF).
SANITIZE_FLAGS ?=
sanitize:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DILAB_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(SANITIZE_FLAGS)"

# Every libFuzzer target (clang) built and run briefly over its seed corpus
# (docs/fuzzing.md); scripts/fuzz.sh is the long run.
fuzz:
	@scripts/install-deps.sh --fuzz
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DILAB_FUZZ=ON
	cmake --build build-fuzz --target fuzz_targets -j$(JOBS)
	cd build-fuzz && ctest --output-on-failure -L fuzz -j$(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
