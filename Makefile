# Front door over CMake. `make run` builds and runs a shipped model, `make test`
# builds and passes the tests. Build folders: build/ (release), build-san/.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build run test sanitize bench bench-cpu clean

all: build

build:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./scripts/run.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# ASan + UBSan on the CPU build (CUDA device code is not sanitized by these)
sanitize:
	@test -f build-san/CMakeCache.txt || cmake -S . -B build-san $(GEN) -DCMAKE_BUILD_TYPE=Debug \
	    -DTG_SANITIZE=address,undefined -DTG_CUDA=OFF -DTG_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-san -j $(JOBS)
	cd build-san && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

# GPU op rows when the CUDA bench was built, else the CPU rows (make bench-cpu)
bench: build
	@if [ -x ./$(BUILD)/bench/tinygml-bench ]; then ./$(BUILD)/bench/tinygml-bench; \
	else ./$(BUILD)/bench/tinygml-bench-cpu bench/results/cpu.json; fi

bench-cpu: build
	./$(BUILD)/bench/tinygml-bench-cpu bench/results/cpu.json

clean:
	rm -rf $(BUILD) build-san build-gpu
