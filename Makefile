# Conventional entry points over CMake. `make run` and `make test` are the
# two README commands; both install missing Debian packages first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: run test build deps test-deps sanitize clean

run: deps build
	$(BUILD)/host/cli/inferlab run --prompt "$(or $(PROMPT),Once upon a time)"

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

build:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
sanitize:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DILAB_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"

clean:
	rm -rf $(BUILD) build-asan
