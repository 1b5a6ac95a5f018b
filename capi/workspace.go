package main

// #include <stdint.h>
import "C"

import "metalcore/internal/core"

// workspaceSize stores what size returns in *bytes (a NULL bytes is an
// error; *bytes is left alone on failure).
func workspaceSize(bytes *C.int64_t, size func() (int64, error)) error {
	if bytes == nil {
		return core.Errorf(core.ErrInvalidArgument, "bytes is NULL")
	}
	n, err := size()
	if err != nil {
		return err
	}
	*bytes = C.int64_t(n)
	return nil
}
