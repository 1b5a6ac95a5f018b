package metal

import (
	"errors"
	"sort"
	"sync"
	"unsafe"

	"metalcore/internal/core"
)

// Runtime is what puts a plan on a device: on darwin the Objective-C layer
// (runtime_objc.go), in tests a recording fake or one that runs the
// commands through another backend.
type Runtime interface {
	// Available reports why Metal cannot run (nil when it can).
	Available() error
	// MaxThreads is the largest threadgroup kernel's pipeline takes on the
	// encoder's device (compiling the pipeline where it is not yet).
	MaxThreads(encoder unsafe.Pointer, kernel string) (int, error)
	// GPUAddress is a buffer's address as kernels see it.
	GPUAddress(buffer unsafe.Pointer) (uint64, error)
	// Encode checks every command against the device (each buffer's length
	// covers its binding and belongs to the encoder's device, the pipelines
	// compile) and only then encodes them: never ending the encoder,
	// committing or waiting.
	Encode(encoder unsafe.Pointer, commands []Command) error
	// Prepare compiles every kernel's pipeline for the device of an encoder
	// or an id<MTLDevice>.
	Prepare(encoderOrDevice unsafe.Pointer) error
}

var (
	runtimeMu sync.RWMutex
	runtime   Runtime
)

// Use makes r the runtime (darwin's init; tests); nil removes it.
func Use(r Runtime) {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	runtime = r
}

var errNoRuntime = errors.New("Metal runs on macOS only (this build has no Metal runtime)")

func current() (Runtime, error) {
	runtimeMu.RLock()
	defer runtimeMu.RUnlock()
	if runtime == nil {
		return nil, errNoRuntime
	}
	if err := runtime.Available(); err != nil {
		return nil, err
	}
	return runtime, nil
}

// Available reports why Metal tensors cannot be used (nil when they can).
func Available() error {
	_, err := current()
	return err
}

// Prepare compiles every pipeline for the device of encoderOrDevice.
func Prepare(encoderOrDevice unsafe.Pointer) error {
	rt, err := current()
	if err != nil {
		return core.Errorf(core.ErrUnsupportedDevice, "%v", err)
	}
	if encoderOrDevice == nil {
		return core.Errorf(core.ErrInvalidArgument, "mc_metal_prepare: encoder_or_device is NULL")
	}
	if err := rt.Prepare(encoderOrDevice); err != nil {
		return core.Errorf(core.ErrBackend, "%v", err)
	}
	return nil
}

func init() {
	// A Metal tensor's data is an id<MTLBuffer>: an object, which nothing
	// can safely ask about before it is used; the runtime checks each
	// buffer's length and device against the encoder before encoding.
	core.RegisterBackend(core.DeviceMetal, Available, func(unsafe.Pointer, int) error { return nil })
}

// Source is the MSL program (one op family's) that defines kernel.
func Source(kernel string) (string, error) {
	for _, f := range Families() {
		ks, err := Kernels(f.Source)
		if err != nil {
			return "", err
		}
		for _, k := range ks {
			if k.Name == kernel {
				prog, _, err := Program(f.Source)
				return prog, err
			}
		}
	}
	return "", errors.New("no Metal kernel " + kernel)
}

// AllKernels names every registered kernel, sorted.
func AllKernels() ([]string, error) {
	var names []string
	for _, f := range Families() {
		ks, err := Kernels(f.Source)
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			names = append(names, k.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}
