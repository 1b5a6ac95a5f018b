#!/usr/bin/env bash
# Runs the GPU checks on a machine with an NVIDIA GPU, from binaries built
# elsewhere by `make gpu-binaries` (the GPU machine needs no Go): the
# conformance suite's CUDA runs, the C ABI test, and the checks against
# PyTorch (tests/gpu/cuda_test.py). Run from the repository root.
set -euo pipefail
# a CUDA backend that is missing or whose kernels do not compile fails the
# suites here instead of being skipped
export MC_REQUIRE_BACKENDS=cpu,cuda
status=0
# each suite runs in its package's directory, as go test runs it
# (build/gpu/ops_norm.test: ops/norm)
for t in build/gpu/*.test; do
	echo "== $t"
	pkg=$(basename "$t" .test | tr _ /)
	(cd "$pkg" && "$OLDPWD/$t" -test.run '/cuda' -test.count=1) || status=1
done
./build/abi_test build/libmetalcore.so || status=1
(cd tests/gpu && METALCORE_LIBRARY=../../build/libmetalcore.so python3 cuda_test.py) || status=1
python3 tests/gpu/cold_test.py || status=1
PYTHONPATH=overrides/python python3 -m pytest -q -p no:cacheprovider overrides/python/tests tests/gpu/test_hf_llama.py || status=1
PYTHONPATH=overrides/python python3 tests/gpu/dist_test.py || status=1
exit $status
