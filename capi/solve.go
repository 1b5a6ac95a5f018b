package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/solve"
)

//export mcgo_solve
func mcgo_solve(a, b *C.mc_tensor, x, info *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_solve", func() error { return solve.Solve(tensor(a), tensor(b), tensor(x), tensor(info), encoder) })
}
