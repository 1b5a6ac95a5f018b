package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/softmax"
)

//export mcgo_softmax_fwd
func mcgo_softmax_fwd(x, y *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_softmax_fwd", func() error { return softmax.Fwd(tensor(x), tensor(y), encoder) })
}

//export mcgo_softmax_bwd
func mcgo_softmax_bwd(dy, y, dx *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_softmax_bwd", func() error { return softmax.Bwd(tensor(dy), tensor(y), tensor(dx), encoder) })
}
