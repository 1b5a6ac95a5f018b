package qr

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/internal/core"
)

//go:embed qr.cu
var kernels string

func init() {
	cuda.Register(kernels)
	factorize.Register(core.DeviceCUDA, qrCUDA)
	workspaceSize.Register(core.DeviceCUDA, cudaWorkspaceBytes)
}

// cudaDevice is dev's facts for the schedule: its multiprocessors, panels
// launched cooperatively, dynamic shared memory up to what qr_cols128
// takes (cuda.LaunchShared opts the kernel in past 48 KB).
func cudaDevice(dev int) (device, error) {
	sms, err := cuda.SMs(dev)
	return device{sms: sms, waits: true, maxShared: 1 << 20}, cuda.Backend(err)
}

func cudaWorkspaceBytes(s shapes, mode int32, dev int) (int64, error) {
	if name, _ := s.colsKernel(mode != ROnly, device{maxShared: 1 << 20}); s.batch == 0 || name != "" {
		return 0, nil
	}
	d, err := cudaDevice(dev)
	return gpuWorkspaceBytes(s, mode, d), err
}

// qrCUDA factors on the caller's stream.
func qrCUDA(s shapes, av, qv, rv, ws *core.View, enc unsafe.Pointer) error {
	dev := int(av.DeviceID)
	d, err := cudaDevice(dev)
	if err != nil {
		return err
	}
	var slots [16]uint64
	return cuda.Backend(gpuQR(s, av, qv, rv, ws, d, func(kernel string, grid, block, shared int, coop bool, args ...arg) error {
		words := slots[:0]
		for _, a := range args {
			switch {
			case !a.isBuffer() && a.wide:
				words = append(words, cuda.I64(a.value))
			case !a.isBuffer():
				words = append(words, cuda.I32(int(a.value)))
			case a.view == nil:
				words = append(words, 0)
			default:
				words = append(words, cuda.Ptr(unsafe.Add(a.view.Base, a.at)))
			}
		}
		if coop {
			return cuda.LaunchCooperative(dev, enc, kernel, grid, block, words...)
		}
		return cuda.LaunchShared(dev, enc, kernel, grid, block, shared, words...)
	}))
}
