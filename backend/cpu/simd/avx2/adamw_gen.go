// Code generated from ../avx512/adamw.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import (
	"simd/archsimd"

	"metalcore/backend/cpu/simd"
)

// adamW is simd.Portable.AdamW on W lanes (with a true division and square
// root: the step must match PyTorch's within rounding).
func adamW(h *simd.AdamW, p, g, m, v, vmax []float32) {
	sign, decay, b1, b2 := splat(h.Sign), splat(h.Decay), splat(h.OneMinusBeta1), splat(h.Beta2)
	nb2, lr, bc2, eps := splat(h.OneMinusBeta2), splat(h.StepSize), splat(h.BC2Sqrt), splat(h.Eps)
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	step := func(pv, gv, mv, vv, xv vf) (vf, vf, vf, vf) {
		gv = gv.Mul(sign)
		mv = gv.Sub(mv).MulAdd(b1, mv)
		vv = vv.Mul(b2).Add(gv.Mul(nb2).Mul(gv))
		use := vv
		if vmax != nil {
			xv = xv.Max(vv)
			use = xv
		}
		denom := use.Sqrt().Div(bc2).Add(eps)
		return pv.Mul(decay).Sub(lr.Mul(mv).Div(denom)), mv, vv, xv
	}
	n := full(len(p))
	for i := 0; i < n; i += W {
		xv := zero()
		if vmax != nil {
			xv = load(vmax, i)
		}
		pv, mv, vv, xv := step(load(p, i), load(g, i), load(m, i), load(v, i), xv)
		store(pv, p, i)
		store(mv, m, i)
		store(vv, v, i)
		if vmax != nil {
			store(xv, vmax, i)
		}
	}
	if n < len(p) {
		xv := zero()
		if vmax != nil {
			xv = loadPart(vmax[n:])
		}
		pv, mv, vv, xv := step(loadPart(p[n:]), loadPart(g[n:]), loadPart(m[n:]), loadPart(v[n:]), xv)
		storePart(pv, p[n:])
		storePart(mv, m[n:])
		storePart(vv, v[n:])
		if vmax != nil {
			storePart(xv, vmax[n:])
		}
	}
	archsimd.ClearAVXUpperBits()
}
