package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/cholesky"
)

//export mcgo_cholesky
func mcgo_cholesky(a *C.mc_tensor, upper C.int32_t, l, info *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_cholesky", func() error {
		return cholesky.Cholesky(tensor(a), upper != 0, tensor(l), tensor(info), encoder)
	})
}
