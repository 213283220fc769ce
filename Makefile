# rapid: the front door. CMake does the building; these targets are what people type.
#
#   make          build build/rapid (release, with CUDA when nvcc is present and CUDA != 0)
#   make run      install missing Debian packages, build, serve the embedded default model
#   make test     install what the tests need, build release + ASan/UBSan, run every test
#   make fuzz     build the libFuzzer targets with clang and run each for FUZZ_SECONDS
#   make gpu-test on a machine with an NVIDIA GPU: build with CUDA, run the GPU tests
#                 (scripts/gpu-test.sh) and the 8B-shaped benchmark (scripts/bench-gpu.sh)
#   make clean

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CUDA       ?= auto
CMAKE_FLAGS ?=

.PHONY: all build build-asan deps test-deps run test test-unit fuzz gpu-test clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DRP_CUDA=$(CUDA) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DRP_SANITIZE=ON -DRP_CUDA=OFF $(CMAKE_FLAGS)

build-asan: $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)

deps:
	scripts/install-deps.sh

test-deps: deps
	scripts/test-setup.sh

run: deps build
	scripts/run-default.sh $(BUILD)/rapid

test: test-deps build build-asan
	scripts/run-tests.sh $(BUILD) $(ASAN_BUILD)

test-unit: build build-asan
	scripts/run-tests.sh --unit-only $(BUILD) $(ASAN_BUILD)

fuzz: deps
	scripts/fuzz.sh $(FUZZ_SECONDS)

gpu-test: build
	scripts/gpu-test.sh $(BUILD) && scripts/bench-gpu.sh $(BUILD)/rapid

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
