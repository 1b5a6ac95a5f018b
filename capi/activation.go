package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/activation"
)

//export mcgo_gelu_fwd
func mcgo_gelu_fwd(x *C.mc_tensor, approximate C.int32_t, y *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_gelu_fwd", func() error {
		return activation.GeluFwd(tensor(x), int32(approximate), tensor(y), encoder)
	})
}

//export mcgo_gelu_bwd
func mcgo_gelu_bwd(dy, x *C.mc_tensor, approximate C.int32_t, dx *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_gelu_bwd", func() error {
		return activation.GeluBwd(tensor(dy), tensor(x), int32(approximate), tensor(dx), encoder)
	})
}

//export mcgo_silu_fwd
func mcgo_silu_fwd(x, y *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_silu_fwd", func() error { return activation.SiluFwd(tensor(x), tensor(y), encoder) })
}

//export mcgo_silu_bwd
func mcgo_silu_bwd(dy, x, dx *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_silu_bwd", func() error { return activation.SiluBwd(tensor(dy), tensor(x), tensor(dx), encoder) })
}

//export mcgo_glu_fwd
func mcgo_glu_fwd(gate, up *C.mc_tensor, kind C.int32_t, y *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_glu_fwd", func() error { return activation.GluFwd(tensor(gate), tensor(up), int32(kind), tensor(y), encoder) })
}

//export mcgo_glu_bwd
func mcgo_glu_bwd(dy, gate, up *C.mc_tensor, kind C.int32_t, dgate, dup *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_glu_bwd", func() error {
		return activation.GluBwd(tensor(dy), tensor(gate), tensor(up), int32(kind), tensor(dgate), tensor(dup), encoder)
	})
}
