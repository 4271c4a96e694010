# A thin wrapper over CMake (the source of truth). Targets:
#   make            optimized build in build/ (the binary is build/rapid)
#   make test       the whole suite: optimized gcc build (every tier), ASan/UBSan build
#                   (unit and e2e tiers) and clang build (unit tier); all with -Werror
#   make test-e2e   only the end-to-end suite (tests/e2e) against the optimized build
#   make install    installs the binary under PREFIX (default /usr/local)
#   make clean
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build test test-fast test-asan test-clang test-e2e e2e-deps install clean format

all: build

build:
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)

# The optimized build runs every tier; the sanitizer build runs the unit and e2e tiers.
test: test-fast test-asan test-clang

# The e2e suite's SDKs: npm ci when node_modules is missing or older than the lock file.
# Without npm the suite skips (fails under CI=true) and says why.
E2E_STAMP = tests/e2e/node_modules/.package-lock.json
e2e-deps: $(E2E_STAMP)
$(E2E_STAMP): tests/e2e/package.json tests/e2e/package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tests/e2e --no-audit --no-fund --loglevel=error; \
	else echo "make: npm not found; the e2e tests will skip (tools/setup.sh installs Node.js)"; fi

test-fast: e2e-deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRP_WERROR=ON $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)
	cd build && ctest --output-on-failure -j $(JOBS)

test-asan: e2e-deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DRP_SANITIZE=ON -DRP_WERROR=ON $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L 'unit|e2e'

test-e2e: e2e-deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRP_WERROR=ON $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS) --target rapid
	cd build && ctest --output-on-failure -L e2e

test-clang:
	CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DRP_WERROR=ON $(CMAKE_FLAGS)
	cmake --build build-clang -j $(JOBS)
	cd build-clang && ctest --output-on-failure -j $(JOBS) -L unit

install: build
	cmake --install build --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-clang

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
