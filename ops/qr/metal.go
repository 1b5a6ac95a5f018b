package qr

import (
	"strings"
	"unsafe"

	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("qr", kernels)
	factorize.Register(core.DeviceMetal, qrMetal)
	workspaceSize.Register(core.DeviceMetal, func(s shapes, mode int32, _ int) (int64, error) {
		return gpuWorkspaceBytes(s, mode, metalDevice), nil
	})
}

// metalDevice: Metal reports no core count, so the V^T C splits and the
// load's spread assume 32 cores (the largest Apple GPUs have more, the
// smallest 8); a panel runs one threadgroup a matrix (Metal promises no
// co-residency); dynamic threadgroup memory is Metal's 32 KB.
var metalDevice = device{sms: 32, waits: false, maxShared: metal.MaxGroupMemory}

// qrMetal encodes the factorization on the host's encoder.
func qrMetal(s shapes, av, qv, rv, ws *core.View, enc unsafe.Pointer) error {
	p, err := metal.NewPlan(enc)
	if err != nil {
		return err
	}
	err = gpuQR(s, av, qv, rv, ws, metalDevice, func(kernel string, grid, block, shared int, _ bool, args ...arg) error {
		margs := make([]metal.Arg, len(args))
		for i, a := range args {
			switch {
			case !a.isBuffer() && a.wide:
				margs[i] = metal.I64(a.value)
			case !a.isBuffer():
				margs[i] = metal.I32(int(a.value))
			case a.view == nil:
				margs[i] = metal.Buf(nil)
			case a.n < 0:
				margs[i] = metal.Buf(a.view)
			default:
				margs[i] = metal.BufAt(a.view, a.at, a.n)
			}
		}
		// the copies in and out loop over their threads; every other
		// kernel is written for its block size
		if most := p.Threads(kernel, block); most < block {
			if !strings.HasPrefix(kernel, "qr_load_") && !strings.HasPrefix(kernel, "qr_store_") {
				return core.Errorf(core.ErrUnsupportedDevice,
					"mc_qr: the device runs %s on at most %d threads a threadgroup; it needs %d", kernel, most, block)
			}
			block = most
		}
		p.DispatchWith(kernel, grid, block, shared, nil, margs...)
		return nil
	})
	if err != nil {
		return err
	}
	return p.Encode()
}
