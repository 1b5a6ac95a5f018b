package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/svd"
)

//export mcgo_svd
func mcgo_svd(a, u, s, vh, info *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_svd", func() error {
		return svd.SVD(tensor(a), tensor(u), tensor(s), tensor(vh), tensor(info), encoder)
	})
}
