//go:build linux && cgo

package cuda

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/diskcache"
)

// a family of this test's own: two kernels per dtype and one plain kernel,
// real source (the GPU benchmarks of this binary compile every family)
func init() {
	Register("template <class D> MC_DEVICE void test_fwd(MC_IDS, int n) {}\n" +
		"template <class D> MC_DEVICE void test_bwd(MC_IDS, int n) {}\n" +
		"MC_INSTANTIATE(test_fwd, (int n), (n))\nMC_INSTANTIATE(test_bwd, (int n), (n))\nMC_ENTRY(test_plain, (int n)) {}\n")
}

// fakeNVRTC stands in for NVRTC: it records what it compiled and returns an
// image naming the program's selected kernel and the architecture; arches
// it does not know fail, as NVRTC fails for a chip newer than itself.
type fakeNVRTC struct {
	mu      sync.Mutex
	calls   []string
	unknown string // an architecture this compiler does not know
}

func (f *fakeNVRTC) compile(src string, opts []string, cubin bool) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	arch := strings.TrimPrefix(opts[0], "--gpu-architecture=")
	sel := src[strings.Index(src, "MC_WANT_")+len("MC_WANT_"):]
	sel = sel[:strings.IndexByte(sel, ' ')]
	f.calls = append(f.calls, sel+" "+arch)
	if arch == f.unknown {
		return nil, fmt.Errorf("invalid value for --gpu-architecture")
	}
	return []byte(fmt.Sprintf("%s for %s cubin=%v", sel, arch, cubin)), nil
}

var sm90 = target{"sm_90", "compute_90", "13.0", "13000"}

func TestProgramsSelectOneKernel(t *testing.T) {
	progs := KernelPrograms()
	for _, name := range []string{"test_fwd_f32", "test_bwd_bf16", "test_plain"} {
		p, ok := progs[name]
		require.True(t, ok, name)
		require.True(t, strings.HasPrefix(p, "#define MC_SELECT\n#define MC_WANT_"+name+" MC_PROBE()\n"+prelude), name)
	}
	require.Contains(t, allKernels(), "test_plain")
}

// Kernels are compiled once as cubins for the exact architecture, then read
// back from the cache; a cache entry of another target is not used.
func TestBuildImagesCachesCubins(t *testing.T) {
	cache := diskcache.Open(t.TempDir())
	var nv fakeNVRTC
	names := []string{"test_fwd_f32", "test_fwd_bf16", "test_plain"}
	images, infos, err := buildImages(cache, nv.compile, sm90, names)
	require.NoError(t, err)
	require.Len(t, nv.calls, 3)
	for i, name := range names {
		require.Equal(t, name+" for sm_90 cubin=true", string(images[i]))
		require.Equal(t, "cubin sm_90", infos[i].Format)
		require.Equal(t, diskcache.Compiled, infos[i].From)
	}
	images, infos, err = buildImages(cache, nv.compile, sm90, names)
	require.NoError(t, err)
	require.Len(t, nv.calls, 3, "a second build compiles nothing")
	require.Equal(t, "test_plain for sm_90 cubin=true", string(images[2]))
	require.Equal(t, diskcache.Hit, infos[2].From)
	for _, other := range []target{{"sm_90", "compute_90", "13.1", "13000"}, {"sm_90", "compute_90", "13.0", "13010"},
		{"sm_100", "compute_100", "13.0", "13000"}} {
		_, infos, err = buildImages(cache, nv.compile, other, names[:1])
		require.NoError(t, err)
		require.Equal(t, diskcache.Compiled, infos[0].From, "%+v", other)
	}
	old := LibraryVersion
	LibraryVersion = "another"
	t.Cleanup(func() { LibraryVersion = old })
	_, infos, err = buildImages(cache, nv.compile, sm90, names[:1])
	require.NoError(t, err)
	require.Equal(t, diskcache.Compiled, infos[0].From)
}

// A GPU newer than NVRTC gets PTX for its compute architecture.
func TestBuildImagesFallsBackToPTX(t *testing.T) {
	nv := fakeNVRTC{unknown: "sm_90"}
	images, infos, err := buildImages(diskcache.Open(""), nv.compile, sm90, []string{"test_bwd_f16"})
	require.NoError(t, err)
	require.Equal(t, "test_bwd_f16 for compute_90 cubin=false", string(images[0]))
	require.Equal(t, "PTX compute_90", infos[0].Format)
	require.Equal(t, []string{"test_bwd_f16 sm_90", "test_bwd_f16 compute_90"}, nv.calls)
}

func TestBuildImagesReportsTheFirstFailure(t *testing.T) {
	fail := func(src string, opts []string, cubin bool) ([]byte, error) {
		return nil, fmt.Errorf("error in %s", opts[0])
	}
	_, _, err := buildImages(diskcache.Open(t.TempDir()), fail, sm90, []string{"test_fwd_f16", "test_plain"})
	require.ErrorContains(t, err, "compiling kernel test_fwd_f16: error in --gpu-architecture=sm_90")
	empty := func(string, []string, bool) ([]byte, error) { return nil, nil }
	_, _, err = buildImages(diskcache.Open(""), empty, sm90, []string{"test_plain"})
	require.ErrorContains(t, err, "empty image")
}

// A corrupt cache entry is compiled again, never loaded.
func TestBuildImagesRecompilesACorruptEntry(t *testing.T) {
	dir := t.TempDir()
	var nv fakeNVRTC
	_, _, err := buildImages(diskcache.Open(dir), nv.compile, sm90, []string{"test_fwd_f32"})
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	path := dir + "/" + entries[0].Name()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)-1] ^= 0xff
	require.NoError(t, os.WriteFile(path, b, 0o644))
	images, infos, err := buildImages(diskcache.Open(dir), nv.compile, sm90, []string{"test_fwd_f32"})
	require.NoError(t, err)
	require.Equal(t, diskcache.Compiled, infos[0].From)
	require.Equal(t, "test_fwd_f32 for sm_90 cubin=true", string(images[0]))
}
