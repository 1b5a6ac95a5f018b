package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/rope"
)

//export mcgo_rope
func mcgo_rope(x, cos, sin *C.mc_tensor, backward C.int32_t, y *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_rope", func() error {
		return rope.Rope(tensor(x), tensor(cos), tensor(sin), backward != 0, tensor(y), encoder)
	})
}
