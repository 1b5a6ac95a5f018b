//go:build linux && cgo

package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/internal/core"
	"metalcore/internal/diskcache"
)

func init() { core.RegisterBackend(core.DeviceCUDA, Available, CheckPointer) }

//go:embed prelude.cuh
var cudaPrelude string

// prelude is what every kernel program starts with: the CUDA prelude, then
// the dialect's shared helpers.
var prelude = cudaPrelude + "\n" + dialect.Helpers

var (
	openOnce sync.Once
	openErr  error
	nDevices int

	mu      sync.Mutex
	sources []string
	devices = map[int]*device{}
)

// device is one GPU and the kernels loaded on it so far.
type device struct {
	ctx context
	sms int
	// funcs maps a loaded kernel's name to it; the map is replaced, never
	// changed, so calls read it without a lock
	funcs   atomic.Pointer[map[string]function]
	loading sync.Mutex // held while kernels are compiled and loaded
	// resident caches Resident's answers by residentKey
	resident sync.Map
}

type residentKey struct {
	name    string
	threads int
}

// Register adds an op family's kernel source (called from init).
func Register(src string) {
	mu.Lock()
	defer mu.Unlock()
	sources = append(sources, src)
}

// Available reports why the backend cannot run (nil when it can): the
// driver (libcuda.so.1, or MC_CUDA_DRIVER) and NVRTC (MC_NVRTC, else
// libnvrtc.so.13, .12, libnvrtc.so) are opened at first use.
func Available() error {
	openOnce.Do(func() {
		driver := os.Getenv("MC_CUDA_DRIVER")
		if driver == "" {
			driver = "libcuda.so.1"
		}
		if openErr = open(driver, os.Getenv("MC_NVRTC")); openErr == nil {
			nDevices, openErr = deviceCount()
		}
	})
	return openErr
}

// Devices is the number of GPUs the driver sees.
func Devices() (int, error) {
	if err := Available(); err != nil {
		return 0, err
	}
	return nDevices, nil
}

func getDevice(dev int) (*device, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if dev < 0 || dev >= nDevices {
		return nil, fmt.Errorf("CUDA device %d does not exist (%d devices)", dev, nDevices)
	}
	mu.Lock()
	defer mu.Unlock()
	d := devices[dev]
	var err error
	if d == nil {
		d = &device{}
		if d.sms, err = smCount(dev); err != nil {
			return nil, err
		}
		if d.ctx, err = retainPrimary(dev); err != nil {
			return nil, err
		}
		d.funcs.Store(&map[string]function{})
		devices[dev] = d
	}
	return d, nil
}

// Prepare compiles (NVRTC programs in parallel) and loads every kernel for
// dev now, so that no later call compiles or loads a module (required
// before CUDA graph capture).
func Prepare(dev int) error {
	d, err := getDevice(dev)
	if err != nil {
		return err
	}
	return d.load(dev, allKernels())
}

// load compiles, or takes from the disk cache, the images of the kernels
// in names not loaded yet, and loads them.
func (d *device) load(dev int, names []string) error {
	d.loading.Lock()
	defer d.loading.Unlock()
	loaded := *d.funcs.Load()
	var missing []string
	for _, n := range names {
		if _, ok := loaded[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	major, minor, err := computeCapability(dev)
	if err != nil {
		return err
	}
	driver, nvrtc := versions()
	t := target{fmt.Sprintf("sm_%d%d", major, minor), fmt.Sprintf("compute_%d%d", major, minor), nvrtc, driver}
	cache := diskcache.Open(diskcache.Dir())
	if why := cache.Disabled(); why != "" {
		debugf("%s; compiling without the disk cache", why)
	}
	images, infos, err := buildImages(cache, nvrtcCompile, t, missing)
	if err != nil {
		return err
	}
	leave, err := d.ctx.enter(dev)
	if err != nil {
		return err
	}
	defer leave()
	next := make(map[string]function, len(loaded)+len(missing))
	for n, f := range loaded {
		next[n] = f
	}
	for i, name := range missing {
		m, err := load(images[i])
		if err != nil {
			return fmt.Errorf("kernel %s (%s): %w", name, infos[i].Format, err)
		}
		if next[name], err = m.function(name); err != nil {
			return err
		}
		debugf("CUDA device %d: %s", dev, infos[i])
	}
	d.funcs.Store(&next)
	return nil
}

// SMs is dev's multiprocessor count.
func SMs(dev int) (int, error) {
	d, err := getDevice(dev)
	if err != nil {
		return 0, err
	}
	return d.sms, nil
}

// Resident is how many blocks of kernel name, `threads` threads each
// (without dynamic shared memory), one multiprocessor of dev holds at once.
// Like Launch, it loads the kernel first unless stream is being captured.
func Resident(dev int, stream unsafe.Pointer, name string, threads int) (int, error) {
	d, f, err := kernel(dev, stream, name)
	if err != nil {
		return 0, err
	}
	key := residentKey{name, threads}
	if n, ok := d.resident.Load(key); ok {
		return n.(int), nil
	}
	leave, err := d.ctx.enter(dev)
	if err != nil {
		return 0, err
	}
	defer leave()
	n, err := f.resident(min(threads, f.maxThreads))
	if err == nil {
		d.resident.Store(key, n)
	}
	return n, err
}

// Wave is how many blocks of kernel name, `threads` threads each, the
// whole of dev holds at once (stream as for Resident).
func Wave(dev int, stream unsafe.Pointer, name string, threads int) (int, error) {
	n, err := Resident(dev, stream, name, threads)
	if err != nil {
		return 0, err
	}
	sms, err := SMs(dev)
	return max(1, n) * sms, err
}

// CheckPointer fails unless p is memory of CUDA device dev. The allocations
// it has found on a device are remembered (up to maxKnown of them), so a
// tensor in one of them, as a framework's caching allocator hands out,
// costs no driver query (three, about 0.8 µs each, otherwise): an optimizer
// step or a model's layers touch hundreds of the allocator's segments. A
// remembered allocation that its owner frees and the driver maps again for
// another device would still pass here: the check is there to catch host
// memory and another device's tensors, not memory used after its free.
func CheckPointer(p unsafe.Pointer, dev int) error {
	if known.holds(uintptr(p), dev) {
		return nil
	}
	ord, start, size, err := pointerRange(p)
	if err != nil {
		return fmt.Errorf("is not CUDA device memory")
	}
	if ord != dev {
		return fmt.Errorf("is memory of CUDA device %d, not %d", ord, dev)
	}
	known.add(allocation{start, start + size, dev})
	return nil
}

// allocation is device memory [start, end) of device dev.
type allocation struct {
	start, end uintptr
	dev        int
}

// allocations is the device allocations seen, sorted by address and
// disjoint: read without a lock (a lookup is a binary search of the
// current slice), replaced whole by add.
type allocations struct {
	mu     sync.Mutex // serializes add
	sorted atomic.Pointer[[]allocation]
}

// maxKnown bounds the allocations remembered; past it they are forgotten
// and found again.
const maxKnown = 4096

var known allocations

func (a *allocations) holds(p uintptr, dev int) bool {
	s := a.sorted.Load()
	if s == nil {
		return false
	}
	rs := *s
	lo, hi := 0, len(rs) // the first allocation ending past p
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rs[m].end <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(rs) && rs[lo].start <= p && rs[lo].dev == dev
}

// add remembers r, forgetting the allocations it overlaps (freed since:
// the driver has just answered for r's range), or every one when maxKnown
// are remembered.
func (a *allocations) add(r allocation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var old []allocation
	if s := a.sorted.Load(); s != nil && len(*s) < maxKnown {
		old = *s
	}
	next := make([]allocation, 0, len(old)+1)
	placed := false
	for _, o := range old {
		if o.end <= r.start || o.start >= r.end {
			if !placed && o.start >= r.end {
				next, placed = append(next, r), true
			}
			next = append(next, o)
		}
	}
	if !placed {
		next = append(next, r)
	}
	a.sorted.Store(&next)
}

// Launch runs kernel name on dev's stream (NULL: the legacy default stream)
// with grid blocks of block threads (fewer where the kernel's registers
// allow fewer: every kernel works with any whole number of warps); args are
// 8-byte slots made by Ptr, I64, I32 and F32. It never synchronizes. A kernel
// not yet loaded is compiled (or taken from the disk cache) and loaded
// first, unless the stream is being captured into a graph.
func Launch(dev int, stream unsafe.Pointer, name string, grid, block int, args ...uint64) error {
	return launchParams(dev, stream, name, grid, block, 0, args, len(args), false)
}

// LaunchShared is Launch with shared bytes of dynamic shared memory per
// block (MC_SHARED_DYNAMIC in the kernel).
func LaunchShared(dev int, stream unsafe.Pointer, name string, grid, block, shared int, args ...uint64) error {
	return launchParams(dev, stream, name, grid, block, shared, args, len(args), false)
}

// LaunchCooperative is Launch for a kernel whose blocks wait for each
// other: the driver runs it only if every block can be resident at once,
// and fails otherwise (where a plain launch could hang).
func LaunchCooperative(dev int, stream unsafe.Pointer, name string, grid, block int, args ...uint64) error {
	return launchParams(dev, stream, name, grid, block, 0, args, len(args), true)
}

// maxParams is driver.go's MC_MAX_PARAMS.
const maxParams = 32

// launchParams launches with nparams parameters read from args (each an
// 8-byte slot, or one struct spanning all of args).
func launchParams(dev int, stream unsafe.Pointer, name string, grid, block, shared int, args []uint64, nparams int, cooperative bool) error {
	d, f, err := kernel(dev, stream, name)
	if err != nil {
		return err
	}
	if err := f.takes(name, args, nparams); err != nil {
		return err
	}
	if grid == 0 {
		return nil
	}
	return d.ctx.launch(dev, f, grid, min(block, f.maxThreads), shared, stream, args, nparams, cooperative)
}

// takes checks args against the kernel's parameters as the driver reports
// them (where it can): as many as given, each fitting its 8-byte slot, or
// one struct exactly as long as the words.
func (f function) takes(name string, args []uint64, nparams int) error {
	if nparams > maxParams {
		return fmt.Errorf("kernel %s: %d parameters given, at most %d are passed", strings.Clone(name), nparams, maxParams)
	}
	if f.params < 0 {
		return nil
	}
	structBytes := 0
	if nparams == 1 && len(args) > 1 {
		structBytes = 8 * len(args)
	}
	if f.params != nparams || (structBytes > 0 && f.paramLargest != structBytes) || (structBytes == 0 && f.paramLargest > 8) {
		return fmt.Errorf("kernel %s takes %d parameters (largest %d bytes); the launch passes %d of %d bytes",
			strings.Clone(name), f.params, f.paramLargest, nparams, max(8, structBytes))
	}
	return nil
}

// kernel is dev and its kernel name, compiled and loaded first unless
// stream is being captured.
func kernel(dev int, stream unsafe.Pointer, name string) (*device, function, error) {
	d, err := getDevice(dev)
	if err != nil {
		return nil, function{}, err
	}
	if f, ok := (*d.funcs.Load())[name]; ok {
		return d, f, nil
	}
	if err := d.loadOutsideCapture(dev, stream, name); err != nil {
		return nil, function{}, err
	}
	return d, (*d.funcs.Load())[name], nil
}

// loadOutsideCapture loads kernel name, unless stream is being captured
// into a graph (compiling or loading a module there would break the
// capture).
func (d *device) loadOutsideCapture(dev int, stream unsafe.Pointer, name string) error {
	if _, ok := kernelSources()[name]; !ok {
		return fmt.Errorf("no kernel %s", strings.Clone(name)) // a copy: name itself stays on the caller's stack
	}
	leave, err := d.ctx.enter(dev)
	if err != nil {
		return err
	}
	capturing, err := isCapturing(stream)
	leave()
	if err != nil {
		return err
	}
	if capturing {
		return fmt.Errorf("kernel %s is not loaded and the stream is being captured: call mc_cuda_prepare(%d) before capture", strings.Clone(name), dev)
	}
	return d.load(dev, []string{strings.Clone(name)})
}

// LaunchStruct is Launch for a kernel whose one parameter is a struct of
// 8-byte words (multi-tensor metadata passed by value).
func LaunchStruct(dev int, stream unsafe.Pointer, name string, grid, block int, words []uint64) error {
	return launchParams(dev, stream, name, grid, block, 0, words, 1, false)
}

// Buffer is device memory for tests and benchmarks (the ops never allocate).
type Buffer struct {
	Ptr unsafe.Pointer
	n   int
}

// Alloc allocates n bytes on dev (test support).
func Alloc(dev, n int) (*Buffer, error) {
	d, err := getDevice(dev)
	if err != nil {
		return nil, err
	}
	leave, err := d.ctx.enter(dev)
	if err != nil {
		return nil, err
	}
	defer leave()
	p, err := memAlloc(n)
	return &Buffer{p, n}, err
}

// CopyIn, CopyOut, Free and Sync are synchronous test helpers on dev 0's
// primary context (made current by Alloc's device).
func (b *Buffer) CopyIn(src unsafe.Pointer) error {
	return withDevice(func() error { return copyHtoD(b.Ptr, src, b.n) })
}
func (b *Buffer) CopyOut(dst unsafe.Pointer) error {
	return withDevice(func() error { return copyDtoH(dst, b.Ptr, b.n) })
}
func (b *Buffer) Free() error { return withDevice(func() error { return memFree(b.Ptr) }) }

// Sync waits for all work on device 0.
func Sync() error { return withDevice(synchronize) }

func withDevice(f func() error) error {
	d, err := getDevice(0)
	if err != nil {
		return err
	}
	leave, err := d.ctx.enter(0)
	if err != nil {
		return err
	}
	defer leave()
	return f()
}
