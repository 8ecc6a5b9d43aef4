# Front door over CMake. `make run` builds and runs a shipped model, `make test`
# builds and passes the tests. Build folders: build/ (release), build-san/.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
, := ,
empty :=
# ninja's progress line with the seconds elapsed (a CUDA file compiles for minutes)
export NINJA_STATUS ?= [%f/%t %es]$(empty) $(empty)

.PHONY: all build configure run test sanitize bench clean

all: build

# Configure DIR when it has no build files yet: a fresh folder, or one whose
# configure failed (then its cache is removed, so the next make starts over
# instead of failing with "ninja: error: loading 'build.ninja'").
define configure
	@if [ ! -f $(1)/build.ninja ] && [ ! -f $(1)/Makefile ]; then \
	  echo "== configuring $(1)/ (cmake $(2))"; \
	  cmake -S . -B $(1) $(GEN) $(2) $(CMAKE_FLAGS) || { \
	    rm -f $(1)/CMakeCache.txt; \
	    echo "== configuring $(1)/ failed (see above); fix it and run make again"; exit 1; }; \
	fi
endef

configure:
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Release)

build: configure
	@echo "== building all targets in $(BUILD)/ (library, tinygml-run, tests, bench; the CUDA kernels take minutes the first time)"
	cmake --build $(BUILD) -j $(JOBS)

# Only what the demo runs: tinygml-run (and the example), not tests or bench.
run: configure
	@echo "== building tinygml-run and tinygml-example in $(BUILD)/ (the CUDA kernels take minutes the first time)"
	cmake --build $(BUILD) -j $(JOBS) --target tinygml-run tinygml-example
	@echo "== running the shipped models (models/README.md: the recall task)"
	./scripts/run.sh $(BUILD)

test: build
	@echo "== running the tests (ctest; GPU tests skip themselves without a CUDA device)"
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS); rc=$$?; cd - >/dev/null; \
	  ./scripts/test_summary.sh $(BUILD); exit $$rc

# ASan + UBSan on the CPU build (CUDA device code is not sanitized by these)
sanitize:
	$(call configure,build-san,-DCMAKE_BUILD_TYPE=Debug -DTG_SANITIZE=address$(,)undefined -DTG_CUDA=OFF -DTG_BUILD_BENCH=OFF)
	@echo "== building the ASan + UBSan build in build-san/"
	cmake --build build-san -j $(JOBS)
	@echo "== running the tests under ASan + UBSan"
	@cd build-san && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS); rc=$$?; cd - >/dev/null; \
	  ./scripts/test_summary.sh build-san; exit $$rc

bench: build
	./$(BUILD)/bench/tinygml-bench

clean:
	rm -rf $(BUILD) build-san build-gpu
