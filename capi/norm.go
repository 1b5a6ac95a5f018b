package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/norm"
)

//export mcgo_rmsnorm_fwd
func mcgo_rmsnorm_fwd(x, weight *C.mc_tensor, eps C.float, y, rstd *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_rmsnorm_fwd", func() error {
		return norm.RMSNormFwd(tensor(x), tensor(weight), float32(eps), tensor(y), tensor(rstd), encoder)
	})
}

//export mcgo_rmsnorm_bwd_workspace_size
func mcgo_rmsnorm_bwd_workspace_size(x *C.mc_tensor, bytes *C.int64_t) C.mc_status {
	return call("mc_rmsnorm_bwd_workspace_size", func() error {
		return workspaceSize(bytes, func() (int64, error) { return norm.RMSNormBwdWorkspace(tensor(x)) })
	})
}

//export mcgo_rmsnorm_bwd
func mcgo_rmsnorm_bwd(dy, x, weight, rstd, dx, dweight, workspace *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_rmsnorm_bwd", func() error {
		return norm.RMSNormBwd(tensor(dy), tensor(x), tensor(weight), tensor(rstd), tensor(dx), tensor(dweight),
			tensor(workspace), encoder)
	})
}

//export mcgo_fused_add_rmsnorm_fwd
func mcgo_fused_add_rmsnorm_fwd(x, residual, weight *C.mc_tensor, eps C.float, y, residualOut, rstd *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_fused_add_rmsnorm_fwd", func() error {
		return norm.FusedAddRMSNormFwd(tensor(x), tensor(residual), tensor(weight), float32(eps), tensor(y),
			tensor(residualOut), tensor(rstd), encoder)
	})
}

//export mcgo_layernorm_fwd
func mcgo_layernorm_fwd(x, weight, bias *C.mc_tensor, eps C.float, y, mean, rstd *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_layernorm_fwd", func() error {
		return norm.LayerNormFwd(tensor(x), tensor(weight), tensor(bias), float32(eps), tensor(y), tensor(mean),
			tensor(rstd), encoder)
	})
}

//export mcgo_layernorm_bwd_workspace_size
func mcgo_layernorm_bwd_workspace_size(x *C.mc_tensor, bytes *C.int64_t) C.mc_status {
	return call("mc_layernorm_bwd_workspace_size", func() error {
		return workspaceSize(bytes, func() (int64, error) { return norm.LayerNormBwdWorkspace(tensor(x)) })
	})
}

//export mcgo_layernorm_bwd
func mcgo_layernorm_bwd(dy, x, weight, mean, rstd, dx, dweight, dbias, workspace *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_layernorm_bwd", func() error {
		return norm.LayerNormBwd(tensor(dy), tensor(x), tensor(weight), tensor(mean), tensor(rstd), tensor(dx),
			tensor(dweight), tensor(dbias), tensor(workspace), encoder)
	})
}
