package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/adamw"
)

//export mcgo_adamw_step
func mcgo_adamw_step(cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return adamwStep("mc_adamw_step", cfg, n, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs, nil, nil, encoder)
}

//export mcgo_adamw_step_scaled
func mcgo_adamw_step_scaled(cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, gradScale, foundInf *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return adamwStep("mc_adamw_step_scaled", cfg, n, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs, gradScale, foundInf, encoder)
}

func adamwStep(fn string, cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, gradScale, foundInf *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return call(fn, func() error {
		var c *adamw.Config
		if cfg != nil {
			c = &adamw.Config{LR: float64(cfg.lr), Beta1: float64(cfg.beta1), Beta2: float64(cfg.beta2), Eps: float64(cfg.eps),
				WeightDecay: float64(cfg.weight_decay), Step: int64(cfg.step), AMSGrad: int32(cfg.amsgrad), Maximize: int32(cfg.maximize)}
		}
		l := adamw.Lists{N: int64(n), Params: unsafe.Pointer(params), Grads: unsafe.Pointer(grads),
			ExpAvgs: unsafe.Pointer(expAvgs), ExpAvgSqs: unsafe.Pointer(expAvgSqs), MaxExpAvgSqs: unsafe.Pointer(maxExpAvgSqs)}
		return adamw.StepScaled(c, l, adamw.Scaling{GradScale: tensor(gradScale), FoundInf: tensor(foundInf)}, encoder)
	})
}
