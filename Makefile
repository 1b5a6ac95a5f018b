# metalcore: `make` builds build/libmetalcore.so, `make demo` runs the C demo
# host on it, `make test` runs every test, `make bench` writes bench/cpu.md and bench/qr.md.

GO      ?= go
CC      ?= gcc
# The AVX2/AVX-512 kernels use Go's experimental simd/archsimd package.
export GOEXPERIMENT := simd

LIB     := build/libmetalcore.so
SOURCES := $(shell find capi encoder internal ops include -type f -name '*.[goch]*' ! -name '*_test.go') go.mod go.sum capi/default.pgo
CFLAGS_TEST := -std=c99 -O1 -Wall -Wextra -Werror -Iinclude
# every package with tests in a pure-Go arm64 build (the c-shared entry point
# and the CUDA driver's tests need cgo)
ARM64_PKGS  = $(shell CGO_ENABLED=0 GOARCH=arm64 $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | sed 's|^metalcore/||' | grep -v '^capi$$')

.PHONY: test-python all demo test test-generated test-go test-race test-portable test-c test-header test-arm64 bench pgo fuzz gpu-binaries clean

all: $(LIB)

$(LIB): $(SOURCES)
	$(GO) build -buildmode=c-shared -o $@ ./capi

build/demo: examples/demo.c include/metalcore.h
	@mkdir -p build
	$(CC) $(CFLAGS_TEST) -O2 -o $@ $< -ldl -lm

demo: $(LIB) build/demo
	./build/demo $(LIB)

PYTHON ?= /usr/bin/python3

test: test-generated test-go test-portable test-race test-header test-c test-arm64 test-python
	@echo "make test: all passed"

# the AVX2 kernels are generated from the AVX-512 template: regenerate and
# fail when the committed file differs
test-generated:
	@mkdir -p build && cp encoder/cpu/simd/avx2/kernels.go build/avx2_kernels.go.committed
	$(GO) generate ./encoder/cpu/simd/avx512/
	@cmp -s encoder/cpu/simd/avx2/kernels.go build/avx2_kernels.go.committed || { echo "encoder/cpu/simd/avx2/kernels.go differs from what go generate writes from the avx512 template (now regenerated: commit it)"; exit 1; }

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

# The same suite built without the experiment: the portable-only build path.
test-portable:
	GOEXPERIMENT= $(GO) test -count=1 ./encoder/... ./ops/...

# checkptr (on with -race) rejects archsimd's own masked tail loads, which
# convert a short slice to a vector-sized array pointer; the hardware mask
# keeps them in bounds, so only that instrumentation is turned off.
test-race:
	$(GO) test -count=1 -race -gcflags=all=-d=checkptr=0 -run 'Concurrent|BadInputs|Fuzz|Forward' ./ops/...

test-header:
	$(CC) -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c include/metalcore.h
	g++ -std=c++11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c++ include/metalcore.h

build/abi_test: tests/c/abi_test.c include/metalcore.h
	@mkdir -p build
	$(CC) $(CFLAGS_TEST) -o $@ $< -ldl -lm -lpthread

build/static_tls.so: tests/c/static_tls.c
	@mkdir -p build
	$(CC) -shared -fPIC -O1 -o $@ $<

# twice: as the machine is, and with the driver "missing"; the second time
# loaded after a library that takes most of glibc's static TLS reserve
test-c: $(LIB) build/abi_test build/static_tls.so
	./build/abi_test $(LIB)
	MC_CUDA_DRIVER=/nonexistent/libcuda.so.1 ./build/abi_test $(LIB) build/static_tls.so

# the Python shim against the PyTorch this machine has (Debian's python3-torch)
test-python: $(LIB)
	$(PYTHON) -m pytest -q overrides/python/tests

# arm64: the pure-Go packages cross-compiled and run under qemu-user-static.
test-arm64:
	@command -v qemu-aarch64-static >/dev/null || { echo "test-arm64: qemu-aarch64-static missing (apt install qemu-user-static)"; exit 1; }
	@mkdir -p build/arm64
	@set -e; for p in $(ARM64_PKGS); do \
		n=$$(echo $$p | tr / _); \
		CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o build/arm64/$$n.test ./$$p; \
		echo "arm64 $$p"; (cd $$p && qemu-aarch64-static $(CURDIR)/build/arm64/$$n.test -test.count=1); \
	done

bench: $(LIB)
	$(GO) run -pgo=capi/default.pgo ./bench/cpu -out bench/cpu.md
	$(PYTHON) bench/qr_bench.py bench/qr.md

# What a GPU machine without Go needs to run tests/gpu/run.sh and
# bench/cuda_bench.py: the library, the C ABI test, the op suites compiled.
GPU_PKGS := encoder/cuda ops ops/norm ops/softmax ops/activation ops/adamw ops/qr
gpu-binaries: $(LIB) build/abi_test
	@mkdir -p build/gpu
	@set -e; for p in $(GPU_PKGS); do $(GO) test -c -o build/gpu/$$(echo $$p | tr / _).test ./$$p; done

# capi/default.pgo: a CPU profile of the benchmark, which go build uses for
# profile-guided optimization (it inlines the vector math helpers, e.g. exp,
# into their hot loops: Go's inliner alone leaves them calls). Regenerate it
# after changing the kernels (-trimpath: the profile holds no machine paths).
pgo:
	$(GO) run -trimpath ./bench/cpu -reps 3 -cpuprofile capi/default.pgo

fuzz:
	$(GO) test -run XXX -fuzz FuzzValidation -fuzztime 60s ./ops/

clean:
	rm -rf build
