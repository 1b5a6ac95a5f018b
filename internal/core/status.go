// Package core holds what every op family and the C ABI share: the status
// codes, the error that carries them, and the tensor descriptor with its
// validation.
package core

import "fmt"

// Status mirrors mc_status in include/metalcore.h.
type Status int32

const (
	OK Status = iota
	ErrInvalidArgument
	ErrUnsupportedDType
	ErrUnsupportedDevice
	ErrUnsupportedLayout
	ErrBackend
	ErrInternal
	ErrOutOfMemory
)

// Error is a failed call: the status the ABI returns and the message
// mc_last_error reports (without the function name, which capi prepends).
type Error struct {
	Status Status
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Errorf builds an *Error with a formatted message.
func Errorf(s Status, format string, args ...any) *Error {
	return &Error{Status: s, Msg: fmt.Sprintf(format, args...)}
}

// StatusOf is the status an error maps to: OK for nil, ErrInternal for an
// error that is not an *Error.
func StatusOf(err error) Status {
	if err == nil {
		return OK
	}
	if e, ok := err.(*Error); ok {
		return e.Status
	}
	return ErrInternal
}
