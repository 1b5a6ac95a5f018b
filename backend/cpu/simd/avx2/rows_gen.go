// Code generated from ../avx512/rows.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import (
	"simd/archsimd"
)

func add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(a, i).Add(load(b, i)), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(a[n:]).Add(loadPart(b[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func mul(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(a, i).Mul(load(b, i)), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(a[n:]).Mul(loadPart(b[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// normalize has a loop per case of w and b (a branch per vector in one
// shared loop made the weight-only case 1.4x slower in L1); without w, b
// is loaded where present and zero otherwise.
func normalize(dst, x, w, b []float32, mean, rstd float32) {
	mv, rv := splat(mean), splat(rstd)
	x = x[:len(dst)]
	n := full(len(dst))
	switch {
	case w != nil && b != nil:
		w, b = w[:len(dst)], b[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x, i).Sub(mv).Mul(rv).MulAdd(load(w, i), load(b, i)), dst, i)
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv).MulAdd(loadPart(w[n:]), loadPart(b[n:])), dst[n:])
		}
	case w != nil:
		w = w[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x, i).Sub(mv).Mul(rv).Mul(load(w, i)), dst, i)
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv).Mul(loadPart(w[n:])), dst[n:])
		}
	case b != nil:
		b = b[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x, i).Sub(mv).MulAdd(rv, load(b, i)), dst, i)
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).MulAdd(rv, loadPart(b[n:])), dst[n:])
		}
	default: // no zero added: a -0 stays -0, as in NormalizeScalar
		for i := 0; i < n; i += W {
			store(load(x, i).Sub(mv).Mul(rv), dst, i)
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv), dst[n:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// normVec is (x - mean) * rstd * w + b, normalizeBF16's expression for
// every case (ones and zeros standing in for an absent w and b): a result
// may differ from normalize's in its last float32 bit, and so, rarely, in
// its bfloat16 rounding.
func normVec(x, mv, rv, w, b vf) vf { return x.Sub(mv).Mul(rv).MulAdd(w, b) }

// partOr is v's tail from n, or absent for a nil v.
func partOr(v []float32, n int, absent vf) vf {
	if v == nil {
		return absent
	}
	return loadPart(v[n:])
}

func normGrad(dst, g, x []float32, shift, c, d, s float32) {
	shv, cv, dv, sv := splat(shift), splat(-c), splat(d), splat(s)
	g, x = g[:len(dst)], x[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(x, i).Sub(shv).MulAdd(cv, load(g, i)).Sub(dv).Mul(sv), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(x[n:]).Sub(shv).MulAdd(cv, loadPart(g[n:])).Sub(dv).Mul(sv), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func softmaxGrad(dst, y, dy []float32, d float32) {
	dv := splat(d)
	y, dy = y[:len(dst)], dy[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(dy, i).Sub(dv).Mul(load(y, i)), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(dy[n:]).Sub(dv).Mul(loadPart(y[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func fmAcc(acc, a, b []float32, s float32) {
	sv := splat(s)
	a, b = a[:len(acc)], b[:len(acc)]
	n := full(len(acc))
	for i := 0; i < n; i += W {
		store(load(a, i).Mul(load(b, i)).MulAdd(sv, load(acc, i)), acc, i)
	}
	if n < len(acc) {
		storePart(loadPart(a[n:]).Mul(loadPart(b[n:])).MulAdd(sv, loadPart(acc[n:])), acc[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func accMulSum(accAB, accA, a, b []float32, shift, scale float32) {
	shv, scv := splat(shift), splat(scale)
	accA, a, b = accA[:len(accAB)], a[:len(accAB)], b[:len(accAB)]
	n := full(len(accAB))
	for i := 0; i < n; i += W {
		av := load(a, i)
		store(av.Mul(scv).MulAdd(load(b, i).Sub(shv), load(accAB, i)), accAB, i)
		store(load(accA, i).Add(av), accA, i)
	}
	if n < len(accAB) {
		av := loadPart(a[n:])
		storePart(av.Mul(scv).MulAdd(loadPart(b[n:]).Sub(shv), loadPart(accAB[n:])), accAB[n:])
		storePart(loadPart(accA[n:]).Add(av), accA[n:])
	}
	archsimd.ClearAVXUpperBits()
}
