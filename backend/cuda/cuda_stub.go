//go:build !(linux && cgo)

package cuda

import (
	"errors"
	"unsafe"
)

// Without cgo on Linux there is no CUDA backend; the API exists so the op
// families build everywhere.

var errNoCUDA = errors.New("this build has no CUDA backend (it needs Linux and cgo)")

func Register(string)                                                    {}
func KernelPrograms() map[string]string                                  { return nil }
func Available() error                                                   { return errNoCUDA }
func Devices() (int, error)                                              { return 0, errNoCUDA }
func Prepare(int) error                                                  { return errNoCUDA }
func SMs(int) (int, error)                                               { return 0, errNoCUDA }
func Resident(int, unsafe.Pointer, string, int) (int, error)             { return 0, errNoCUDA }
func Wave(int, unsafe.Pointer, string, int) (int, error)                 { return 0, errNoCUDA }
func CheckPointer(unsafe.Pointer, int) error                             { return errNoCUDA }
func Launch(int, unsafe.Pointer, string, int, int, ...uint64) error      { return errNoCUDA }
func LaunchStruct(int, unsafe.Pointer, string, int, int, []uint64) error { return errNoCUDA }
func LaunchCooperative(int, unsafe.Pointer, string, int, int, ...uint64) error {
	return errNoCUDA
}
func LaunchShared(int, unsafe.Pointer, string, int, int, int, ...uint64) error {
	return errNoCUDA
}

type Buffer struct{ Ptr unsafe.Pointer }

func Alloc(int, int) (*Buffer, error)        { return nil, errNoCUDA }
func (*Buffer) CopyIn(unsafe.Pointer) error  { return errNoCUDA }
func (*Buffer) CopyOut(unsafe.Pointer) error { return errNoCUDA }
func (*Buffer) Free() error                  { return errNoCUDA }
func Sync() error                            { return errNoCUDA }
