//go:build linux && cgo

package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"metalcore/backend/dialect"
	"metalcore/internal/diskcache"
)

// Each kernel is compiled as a program of its own: the prelude, its
// family's source and a selection (MC_SELECT, MC_WANT_<kernel>) that leaves
// every other kernel of the family out. A first call then waits for its one
// kernel, and mc_cuda_prepare compiles all of them in parallel.

// compileOptions follow the architecture option in every compile.
var compileOptions = []string{"--std=c++14", "-default-device"}

// target is what an image is compiled for: the device's architecture as a
// cubin (sm_XY) and, where this NVRTC does not know it, as PTX (compute_XY)
// for the driver to assemble, and the versions that change an image.
type target struct {
	sm, compute   string
	nvrtc, driver string
}

// compiler is NVRTC's compile (injected by tests): cubin for an sm_XY
// architecture, else PTX.
type compiler func(src string, opts []string, cubin bool) ([]byte, error)

// ImageInfo describes one kernel's image (MC_DEBUG prints it as it loads).
type ImageInfo struct {
	Kernel  string
	Format  string           // "cubin sm_90" or "PTX compute_90"
	From    diskcache.Source // compiled now, or read from the disk cache
	Seconds float64          // compiling or reading it
}

func (i ImageInfo) String() string {
	return fmt.Sprintf("%s: %s, %s in %.3f s", i.Kernel, i.Format, i.From, i.Seconds)
}

var (
	sourcesOnce sync.Once
	byKernel    map[string]string // kernel name -> its family's source
	kernelOrder []string
)

// kernelSources maps every registered kernel to its family's source.
func kernelSources() map[string]string {
	sourcesOnce.Do(func() {
		mu.Lock()
		defer mu.Unlock()
		byKernel = map[string]string{}
		for _, src := range sources {
			for _, name := range kernelNames(src) {
				byKernel[name] = src
				kernelOrder = append(kernelOrder, name)
			}
		}
	})
	return byKernel
}

// allKernels is every registered kernel, in registration order.
func allKernels() []string {
	kernelSources()
	return kernelOrder
}

// kernelNames lists the kernels declared in src (dialect.Declarations):
// those per dtype first, then those of one type.
func kernelNames(src string) []string {
	var perType, plain []string
	for _, d := range dialect.Declarations(src) {
		if d.PerDType() {
			perType = append(perType, d.KernelNames()...)
		} else {
			plain = append(plain, d.KernelNames()...)
		}
	}
	return append(perType, plain...)
}

// program is the source that compiles kernel name, of family src, alone.
func program(name, src string) string {
	return "#define MC_SELECT\n#define MC_WANT_" + name + " MC_PROBE()\n" + prelude + "\n" + src
}

// buildImage is kernel name's image for t: a cubin, else PTX, from the
// cache where it holds one, else compiled (and stored).
func buildImage(cache diskcache.Cache, compile compiler, t target, name string) ([]byte, ImageInfo, error) {
	src := program(name, kernelSources()[name])
	start := time.Now()
	var firstErr error
	for _, try := range []struct {
		arch, format string
		cubin        bool
	}{{t.sm, "cubin", true}, {t.compute, "PTX", false}} {
		opts := append([]string{"--gpu-architecture=" + try.arch}, compileOptions...)
		key := diskcache.NewKey(src, strings.Join(opts, " "), "nvrtc "+t.nvrtc, "driver "+t.driver, "metalcore "+LibraryVersion)
		image, from, err := cache.Build(key, func() ([]byte, error) { return compile(src, opts, try.cubin) })
		if err == nil && len(image) == 0 {
			err = fmt.Errorf("NVRTC returned an empty image")
		}
		if err == nil {
			return image, ImageInfo{name, try.format + " " + try.arch, from, time.Since(start).Seconds()}, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, ImageInfo{}, fmt.Errorf("compiling kernel %s: %w", name, firstErr)
}

// buildImages builds the images of names in parallel, at most one NVRTC
// program per core at once; the first failure (in names' order) is returned.
func buildImages(cache diskcache.Cache, compile compiler, t target, names []string) ([][]byte, []ImageInfo, error) {
	images, infos, errs := make([][]byte, len(names)), make([]ImageInfo, len(names)), make([]error, len(names))
	slots := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			images[i], infos[i], errs[i] = buildImage(cache, compile, t, name)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return images, infos, nil
}

// debugf writes a line to standard error when MC_DEBUG is set.
func debugf(format string, args ...any) {
	if os.Getenv("MC_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "metalcore: "+format+"\n", args...)
	}
}

// KernelPrograms is every registered kernel's program as the library
// compiles it (tests and the compile-time benchmark read them).
func KernelPrograms() map[string]string {
	out := map[string]string{}
	for name, src := range kernelSources() {
		out[name] = program(name, src)
	}
	return out
}
