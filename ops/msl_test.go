package ops_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/metal"
)

// clangMSL type-checks an MSL program on this machine: clang-14 in
// C++-for-OpenCL mode against tests/metal's stand-in <metal_stdlib>, where
// MSL's address spaces are OpenCL's (make deps installs clang-14).
func clangMSL(t *testing.T, clang, src string) (string, error) {
	path := filepath.Join(t.TempDir(), "k.metal")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	out, err := exec.Command(clang, "-x", "clcpp", "-cl-no-stdinc", "-fsyntax-only", "-Wno-unknown-attributes",
		"-I", "../tests/metal", path).CombinedOutput()
	return string(out), err
}

// Every op family's kernels, as the Metal backend's MSL programs hold them
// (the Metal prelude, the dialect's helpers, the family's source, the
// entries written from its declaration lines), type-check as MSL; and the
// check bites: a device pointer passed where the thread's own array is
// expected, and a threadgroup array outside a kernel, are errors.
func TestKernelSourcesAsMSL(t *testing.T) {
	clang, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skip("clang-14 is not installed (make deps installs it)")
	}
	files, err := filepath.Glob("*/*.cu")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		prog, kernels, err := metal.Program(string(src))
		require.NoError(t, err, f)
		require.NotEmpty(t, kernels, f)
		out, err := clangMSL(t, clang, prog)
		require.NoError(t, err, "%s as MSL:\n%s", f, out)
	}
	for planted, want := range map[string]string{
		"mc_fetch<F32>(p, 4, false, 0, p);":  "address space",
		"threadgroup float t[4]; t[0] = *p;": "cannot be declared in local address space",
	} {
		prog, _, err := metal.Program("MC_DEVICE void planted(MC_GLOBAL float* p) { " + planted + " }\n")
		require.NoError(t, err)
		out, err := clangMSL(t, clang, prog)
		require.Error(t, err, planted)
		require.Contains(t, out, want, planted)
	}
}
