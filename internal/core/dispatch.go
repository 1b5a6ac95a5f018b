package core

import (
	"fmt"
	"unsafe"
)

// Dispatch is one op's implementations, one per device type, registered by
// the op family's per-backend files (ops/<family>/cpu.go, cuda.go, ...).
// The op's entry point validates once, for every device, then calls the
// implementation for its tensors' device: a device with none is
// MC_ERR_UNSUPPORTED_DEVICE naming the op, never another device's code run
// on its memory.
type Dispatch[F any] struct {
	op    string
	impls [maxDeviceType + 1]F
	have  [maxDeviceType + 1]bool
}

// maxDeviceType bounds the DLPack device codes a Dispatch holds (Metal is 8).
const maxDeviceType = 15

// NewDispatch is an empty table for op (as messages name it, e.g.
// "rmsnorm forward").
func NewDispatch[F any](op string) *Dispatch[F] { return &Dispatch[F]{op: op} }

// Register sets deviceType's implementation (from an init function).
func (d *Dispatch[F]) Register(deviceType int32, f F) {
	if deviceType < 0 || deviceType > maxDeviceType || d.have[deviceType] {
		panic("core: " + d.op + ": device type registered twice or out of range")
	}
	d.impls[deviceType], d.have[deviceType] = f, true
}

// For is deviceType's implementation, or an unsupported-device error.
func (d *Dispatch[F]) For(deviceType int32) (F, error) {
	if deviceType >= 0 && deviceType <= maxDeviceType && d.have[deviceType] {
		return d.impls[deviceType], nil
	}
	var none F
	return none, Errorf(ErrUnsupportedDevice, "%s has no %s implementation", d.op, DeviceName(deviceType))
}

// DeviceName is a device type's name in messages.
func DeviceName(deviceType int32) string {
	if n, ok := deviceNames[deviceType]; ok {
		return n
	}
	return fmt.Sprintf("device type %d", deviceType)
}

// Validated finishes c's validation (Done) and returns d's implementation
// for the call's device.
func Validated[F any](c *Call, encoder unsafe.Pointer, d *Dispatch[F]) (F, error) {
	if err := c.Done(encoder); err != nil {
		var none F
		return none, err
	}
	return d.For(c.views[0].DeviceType)
}
