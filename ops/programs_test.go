//go:build linux && cgo

package ops_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cuda"
	"metalcore/backend/metal"
	_ "metalcore/ops/adamw"
	_ "metalcore/ops/cholesky"
	_ "metalcore/ops/eigh"
	_ "metalcore/ops/loss"
	_ "metalcore/ops/qr"
	_ "metalcore/ops/rope"
	_ "metalcore/ops/solve"
	_ "metalcore/ops/svd"
)

// clangCUDA runs clang's CUDA front end (as make test-cuda-syntax does) on
// src with extra flags: NVRTC is not on this machine, clang-14 is (make deps).
func clangCUDA(t *testing.T, clang, src string, flags ...string) string {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.cu")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	args := append([]string{"-x", "cuda", "--cuda-gpu-arch=sm_80", "--cuda-device-only", "-nocudainc", "-nocudalib",
		"-std=c++14", "-include", "../tests/cuda/nvrtc_builtins.h"}, flags...)
	out, err := exec.Command(clang, append(args, path)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

var kernelDef = regexp.MustCompile(`extern "C" __attribute__\(\(global\)\) void (?:__attribute__\(\(launch_bounds\([^)]*\)\)\) )?(\w+)`)

// Every kernel's program, as the library compiles it, defines that kernel
// and no other; one program a family (a templated and a plain kernel of qr)
// passes the syntax check with every other kernel left out.
func TestKernelProgramsSelectOneKernel(t *testing.T) {
	clang, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skip("clang-14 is not installed (make deps installs it)")
	}
	progs := cuda.KernelPrograms()
	var names []string
	for name := range progs {
		names = append(names, name)
	}
	sort.Strings(names)
	require.GreaterOrEqual(t, len(names), 80)
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.NumCPU())
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			defs := kernelDef.FindAllStringSubmatch(clangCUDA(t, clang, progs[name], "-E", "-P"), -1)
			if len(defs) != 1 || defs[0][1] != name {
				t.Errorf("%s's program defines %v", name, defs)
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{"rmsnorm_bwd_bf16", "softmax_fwd_ahead_f16", "gelu_fwd_f32", "adamw_step_bf16",
		"qr_cols128_f16", "qr_vtw"} {
		require.Contains(t, progs, name)
		require.Empty(t, strings.TrimSpace(clangCUDA(t, clang, progs[name], "-fsyntax-only")), name)
	}
}

// The Metal programs name the same kernels as the CUDA ones, family by
// family: one declaration line serves both backends.
func TestMetalKernelsAreCUDAs(t *testing.T) {
	files, err := filepath.Glob("*/*.cu")
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		kernels, err := metal.Kernels(string(src))
		require.NoError(t, err, f)
		for _, k := range kernels {
			names = append(names, k.Name)
		}
	}
	var want []string
	for name := range cuda.KernelPrograms() {
		want = append(want, name)
	}
	require.ElementsMatch(t, want, names)
}
