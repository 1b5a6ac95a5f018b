package main

// #include "metalcore.h"
import "C"

import (
	"unsafe"

	"metalcore/ops/adamw"
)

//export mcgo_adamw_step
func mcgo_adamw_step(cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return adamwStep("mc_adamw_step", cfg, n, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs, nil, nil, nil, encoder)
}

//export mcgo_adamw_step_scaled
func mcgo_adamw_step_scaled(cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, gradScale, foundInf *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	return adamwStep("mc_adamw_step_scaled", cfg, n, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs, gradScale, foundInf, nil, encoder)
}

//export mcgo_adamw_step_capturable
func mcgo_adamw_step_capturable(cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, gradScale, foundInf, steps, lr *C.mc_tensor, encoder unsafe.Pointer) C.mc_status {
	cp := &adamw.Capture{Steps: tensor(steps), LR: tensor(lr)}
	return adamwStep("mc_adamw_step_capturable", cfg, n, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs, gradScale, foundInf, cp, encoder)
}

// adamwStep is the step of fn; cp is nil but for a capturable step.
func adamwStep(fn string, cfg *C.mc_adamw_config, n C.int64_t, params, grads, expAvgs, expAvgSqs, maxExpAvgSqs **C.mc_tensor, gradScale, foundInf *C.mc_tensor, cp *adamw.Capture, encoder unsafe.Pointer) C.mc_status {
	return call(fn, func() error {
		var c *adamw.Config
		if cfg != nil {
			c = &adamw.Config{LR: float64(cfg.lr), Beta1: float64(cfg.beta1), Beta2: float64(cfg.beta2), Eps: float64(cfg.eps),
				WeightDecay: float64(cfg.weight_decay), Step: int64(cfg.step), AMSGrad: int32(cfg.amsgrad), Maximize: int32(cfg.maximize)}
		}
		l := adamw.Lists{N: int64(n), Params: unsafe.Pointer(params), Grads: unsafe.Pointer(grads),
			ExpAvgs: unsafe.Pointer(expAvgs), ExpAvgSqs: unsafe.Pointer(expAvgSqs), MaxExpAvgSqs: unsafe.Pointer(maxExpAvgSqs)}
		s := adamw.Scaling{GradScale: tensor(gradScale), FoundInf: tensor(foundInf)}
		if cp != nil {
			return adamw.StepCapturable(c, l, s, *cp, encoder)
		}
		return adamw.StepScaled(c, l, s, encoder)
	})
}
