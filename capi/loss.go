package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/loss"
)

//export mcgo_cross_entropy
func mcgo_cross_entropy(logits, target *C.mc_tensor, ignoreIndex C.int64_t, labelSmoothing C.float,
	scale, lossOut, dlogits *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_cross_entropy", func() error {
		return loss.CrossEntropy(tensor(logits), tensor(target), int64(ignoreIndex), float32(labelSmoothing),
			tensor(scale), tensor(lossOut), tensor(dlogits), encoder)
	})
}

//export mcgo_cross_entropy_fwd
func mcgo_cross_entropy_fwd(logits, target *C.mc_tensor, ignoreIndex C.int64_t, labelSmoothing C.float,
	lossOut, lse *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_cross_entropy_fwd", func() error {
		return loss.CrossEntropyForward(tensor(logits), tensor(target), int64(ignoreIndex), float32(labelSmoothing),
			tensor(lossOut), tensor(lse), encoder)
	})
}

//export mcgo_cross_entropy_bwd
func mcgo_cross_entropy_bwd(logits, target, lse *C.mc_tensor, ignoreIndex C.int64_t, labelSmoothing C.float,
	scale, dlogits *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_cross_entropy_bwd", func() error {
		return loss.CrossEntropyBackward(tensor(logits), tensor(target), tensor(lse), int64(ignoreIndex),
			float32(labelSmoothing), tensor(scale), tensor(dlogits), encoder)
	})
}

//export mcgo_loss_grad_scale
func mcgo_loss_grad_scale(grad, scale *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call("mc_loss_grad_scale", func() error { return loss.ScaleGradient(tensor(grad), tensor(scale), encoder) })
}
