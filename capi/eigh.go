package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/eigh"
)

//export mcgo_eigh
func mcgo_eigh(a *C.mc_tensor, upper C.int32_t, w, v, info *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_eigh", func() error {
		return eigh.Eigh(tensor(a), upper != 0, tensor(w), tensor(v), tensor(info), encoder)
	})
}
