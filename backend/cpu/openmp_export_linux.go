//go:build linux && cgo

package cpu

// #include <stdint.h>
import "C"

import "runtime/cgo"

// mcOpenMPClaim is each team thread's body: Parallel's claim loop, whose
// pieces recover their own panics (none may unwind into the runtime's C).
//
//export mcOpenMPClaim
func mcOpenMPClaim(claim C.uintptr_t) { cgo.Handle(claim).Value().(func())() }
