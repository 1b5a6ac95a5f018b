package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/qr"
)

//export mc_qr_workspace_size
func mc_qr_workspace_size(a *C.mc_tensor, mode C.int32_t, bytes *C.int64_t) C.mc_status {
	return call("mc_qr_workspace_size", func() error {
		return workspaceSize(bytes, func() (int64, error) { return qr.WorkspaceSize(tensor(a), int32(mode)) })
	})
}

//export mc_qr
func mc_qr(a *C.mc_tensor, mode C.int32_t, q, r, workspace *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_qr", func() error {
		return qr.QR(tensor(a), int32(mode), tensor(q), tensor(r), tensor(workspace), encoder)
	})
}
