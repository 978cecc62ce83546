# Front door: `make` builds the release library, `make test` runs the whole test suite
# (installing what it needs first), `make bench` runs the benchmark suite.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_G := $(shell command -v ninja >/dev/null 2>&1 && echo -G Ninja)

.PHONY: all release debug secure tsan tsan-secure ubsan test test-release test-sanitizers deps bench install clean

all: release

# TARGET=shardmalloc builds only the shared library (what shardmalloc-run needs), not the tests
define configure
	@test -f $(BUILD)/$(1)/CMakeCache.txt || cmake -S . -B $(BUILD)/$(1) $(CMAKE_G) $(2) >/dev/null
	@cmake --build $(BUILD)/$(1) -j $(JOBS) $(if $(TARGET),--target $(TARGET))
endef

secure:
	$(call configure,secure,-DCMAKE_BUILD_TYPE=Release -DSM_SECURE=ON)

release:
	$(call configure,release,-DCMAKE_BUILD_TYPE=Release)
debug:
	$(call configure,debug,-DCMAKE_BUILD_TYPE=Debug)
tsan:
	$(call configure,tsan,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSM_SANITIZE=thread -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
tsan-secure:
	$(call configure,tsan-secure,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSM_SANITIZE=thread -DSM_SECURE=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
ubsan:
	$(call configure,ubsan,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSM_SANITIZE=undefined -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)

deps:
	@tools/install-deps

# The whole suite: release tests, then the sanitizer runs (TSan: stress tests, release and secure
# builds; UBSan: unit tests).
test: deps
	@$(MAKE) --no-print-directory release tsan tsan-secure ubsan
	@tools/run-tests $(BUILD)

bench: deps release
	@bench/run $(BENCH_ARGS)

install: release
	cmake --install $(BUILD)/release $(if $(PREFIX),--prefix $(PREFIX))

clean:
	rm -rf $(BUILD)
