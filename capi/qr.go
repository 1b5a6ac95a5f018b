package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/qr"
)

//export mcgo_qr_workspace_size
func mcgo_qr_workspace_size(a *C.mc_tensor, mode C.int32_t, bytes *C.int64_t) C.mc_status {
	return call("mc_qr_workspace_size", func() error {
		return workspaceSize(bytes, func() (int64, error) { return qr.WorkspaceSize(tensor(a), int32(mode)) })
	})
}

//export mcgo_qr
func mcgo_qr(a *C.mc_tensor, mode C.int32_t, q, r, workspace *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_qr", func() error {
		return qr.QR(tensor(a), int32(mode), tensor(q), tensor(r), tensor(workspace), encoder)
	})
}
