package simd

import "math"

// Portable is the pure-Go implementation: the fallback on every platform and
// the tail loop of the vector ones.
var Portable = portable()

func portable() (t Table) {
	t.Name = "portable"
	t.SumSq = sumSq
	t.Dot = func(a, b []float32) float32 { return reduce(a, b, func(a, b float32) float32 { return a * b }) }
	t.Max = func(x []float32) float32 {
		m := negInf
		for _, v := range x {
			if v > m || v != v {
				m = v
			}
		}
		return m
	}
	t.ExpSum = func(dst, x []float32, m float32) float32 {
		for i, v := range x {
			dst[i] = Exp32(v - m)
		}
		return sum(dst)
	}
	t.Add = func(dst, a, b []float32) {
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	}
	t.Mul = func(dst, a, b []float32) {
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	}
	t.Normalize = NormalizeScalar
	t.BF16Rows = BF16Rows{
		SumSq: func(x []uint16) float32 { return sumSq(widenAll(x)) },
		AddSumSq: func(dst, a, b []uint16) float32 {
			var q float32
			for i := range dst {
				dst[i] = F32ToBF16(BF16ToF32(a[i]) + BF16ToF32(b[i]))
				v := BF16ToF32(dst[i])
				q += v * v
			}
			return q
		},
		ShiftedSums: func(x []uint16, shift float32) (float32, float32) { return shiftedSums(widenAll(x), shift) },
		GradDots: func(dy, x []uint16, w []float32, shift float32) (float32, float32) {
			return sumDot(weighted(dy, w), widenAll(x), shift)
		},
		GradAcc: func(pw, pb []float32, dy, x []uint16, shift, scale float32) {
			for i := range pw {
				d := BF16ToF32(dy[i])
				pw[i] += d * scale * (BF16ToF32(x[i]) - shift)
				if pb != nil {
					pb[i] += d
				}
			}
		},
		NormGrad: func(dst, dy, x []uint16, w []float32, shift, c, d, s float32) {
			g := weighted(dy, w)
			for i, h := range x {
				dst[i] = F32ToBF16(s * (g[i] - c*(BF16ToF32(h)-shift) - d))
			}
		},
		Normalize: func(dst, x []uint16, w, b []float32, mean, rstd float32) {
			y := widenAll(x)
			NormalizeScalar(y, y, w, b, mean, rstd)
			for i, v := range y {
				dst[i] = F32ToBF16(v)
			}
		},
	}
	t.NormGrad = func(dst, g, x []float32, shift, c, d, s float32) {
		for i := range dst {
			dst[i] = s * (g[i] - c*(x[i]-shift) - d)
		}
	}
	t.SoftmaxGrad = func(dst, y, dy []float32, d float32) {
		for i := range dst {
			dst[i] = y[i] * (dy[i] - d)
		}
	}
	t.SumDot = sumDot
	t.ShiftedSums = shiftedSums
	t.MulSumDot = func(g, a, w, b []float32, shift float32) (float32, float32) {
		for i := range g {
			g[i] = a[i] * w[i]
		}
		return sumDot(g, b, shift)
	}
	t.AccMulSum = func(accAB, accA, a, b []float32, shift, scale float32) {
		for i := range accAB {
			accAB[i] += a[i] * scale * (b[i] - shift)
			accA[i] += a[i]
		}
	}
	t.FMAcc = func(acc, a, b []float32, s float32) {
		for i := range acc {
			acc[i] += a[i] * b[i] * s
		}
	}
	t.Rot = func(x, y []float32, c, s float32) {
		for i, a := range x {
			b := y[i]
			x[i], y[i] = c*a-s*b, s*a+c*b
		}
	}
	t.JacobiRot = func(x, y []float32, s, tau float32) {
		for i, a := range x {
			b := y[i]
			x[i], y[i] = a-s*(b+tau*a), b+s*(a-tau*b)
		}
	}
	t.SymMV = func(a []float32, ld, n int, x, y []float32) {
		for j := range n {
			row := a[j*ld : j*ld+n]
			y[j] += row[j] * x[j]
			for c := j + 1; c < n; c++ {
				y[j] += row[c] * x[c]
				y[c] += row[c] * x[j]
			}
		}
	}
	t.SymRank2 = func(a []float32, ld, n int, x, y []float32) {
		for j := range n {
			row := a[j*ld : j*ld+n]
			for c := j; c < n; c++ {
				row[c] -= x[j]*y[c] + y[j]*x[c]
			}
		}
	}
	t.Axpy = func(dst, x []float32, s float32) {
		for i, v := range x[:len(dst)] {
			dst[i] += s * v
		}
	}
	t.AdamW = adamW
	t.PanelRows = 1
	t.VtC = func(w, v []float32, ldv, jb int, c []float32, ld, rows, cw int) {
		for p := range jb {
			wp, vp := w[p*cw:(p+1)*cw], v[p*ldv:p*ldv+rows]
			for r, s := range vp {
				for x, cx := range c[r*ld : r*ld+cw] {
					wp[x] += s * cx
				}
			}
		}
	}
	t.AddVW = func(c []float32, ld, rows, cw int, v []float32, ldv, jb int, w []float32) {
		for r := range rows {
			row := c[r*ld : r*ld+cw]
			for p := range jb {
				s, wp := v[p*ldv+r], w[p*cw:(p+1)*cw]
				for x := range row {
					row[x] += s * wp[x]
				}
			}
		}
	}
	t.Reflect = reflect
	t.GeluErf = unary(GeluErf32)
	t.GeluTanh = unary(GeluTanh32)
	t.Silu = unary(Silu32)
	t.GeluErfGrad = binary(GeluErfGrad32)
	t.GeluTanhGrad = binary(GeluTanhGrad32)
	t.SiluGrad = binary(SiluGrad32)
	t.BF16ToF32 = widen(BF16ToF32)
	t.F16ToF32 = widen(F16ToF32)
	t.F32ToBF16 = narrow(F32ToBF16)
	t.F32ToF16 = narrow(F32ToF16)
	return t
}

var negInf = float32(math.Inf(-1))

// sumDot and shiftedSums accumulate in float64: one float32 running sum
// over a long row loses the low bits of every term (the vector kernels
// keep 32 partial sums).
func sumDot(a, b []float32, shift float32) (float32, float32) {
	var s, d float64
	for i, v := range a {
		s += float64(v)
		d += float64(v * (b[i] - shift))
	}
	return float32(s), float32(d)
}

func sumSq(x []float32) float32 { return reduce(x, x, func(a, b float32) float32 { return a * b }) }

func shiftedSums(x []float32, shift float32) (float32, float32) {
	var s, ss float64
	for _, v := range x {
		d := float64(v - shift)
		s += d
		ss += d * d
	}
	return float32(s), float32(ss)
}

func sum(x []float32) float32 { return reduce(x, x, func(a, _ float32) float32 { return a }) }

// reduce sums f(a[i], b[i]) in float64, as sumDot does.
func reduce(a, b []float32, f func(a, b float32) float32) float32 {
	var s float64
	for i := range a {
		s += float64(f(a[i], b[i]))
	}
	return float32(s)
}

// NormalizeScalar is dst = (x - mean) * rstd * w + b with optional w, b.
// widenAll is x widened into a new slice (the portable bfloat16 row
// passes: fallback code, not a fast path).
func widenAll(x []uint16) []float32 {
	y := make([]float32, len(x))
	for i, h := range x {
		y[i] = BF16ToF32(h)
	}
	return y
}

// weighted is dy * w widened (dy for a nil w), in a new slice.
func weighted(dy []uint16, w []float32) []float32 {
	g := widenAll(dy)
	if w != nil {
		for i := range g {
			g[i] *= w[i]
		}
	}
	return g
}

func NormalizeScalar(dst, x, w, b []float32, mean, rstd float32) {
	for i := range dst {
		v := (x[i] - mean) * rstd
		if w != nil {
			v *= w[i]
		}
		if b != nil {
			v += b[i]
		}
		dst[i] = v
	}
}

func unary(f func(float32) float32) func(dst, x []float32) {
	return func(dst, x []float32) {
		for i, v := range x {
			dst[i] = f(v)
		}
	}
}

func binary(f func(dy, x float32) float32) func(dst, dy, x []float32) {
	return func(dst, dy, x []float32) {
		for i, v := range x {
			dst[i] = f(dy[i], v)
		}
	}
}

func widen(f func(uint16) float32) func([]float32, []uint16) {
	return func(dst []float32, src []uint16) {
		for i, v := range src {
			dst[i] = f(v)
		}
	}
}

func narrow(f func(float32) uint16) func([]uint16, []float32) {
	return func(dst []uint16, src []float32) {
		for i, v := range src {
			dst[i] = f(v)
		}
	}
}

// adamW rounds every product and quotient to float32 before it is used
// (the conversions keep the compiler from fusing them), as PyTorch's
// kernels do.
func adamW(h *AdamW, p, g, m, v, vmax []float32) {
	for i := range p {
		gi := h.Sign * g[i]
		m[i] += float32(h.OneMinusBeta1 * (gi - m[i]))
		v[i] = float32(h.Beta2*v[i]) + float32(float32(h.OneMinusBeta2*gi)*gi)
		vi := v[i]
		if vmax != nil {
			vmax[i] = max(vmax[i], vi)
			vi = vmax[i]
		}
		denom := float32(math.Sqrt(float64(vi)))/h.BC2Sqrt + h.Eps
		p[i] = float32(p[i]*h.Decay) - float32(h.StepSize*m[i])/denom
	}
}

func reflect(a []float32, ld, rows, cols int, v []float32, tau float32, w []float32) {
	w = w[:cols]
	clear(w)
	for i := range rows {
		row, vi := a[i*ld:i*ld+cols], v[i]
		for c := range w {
			w[c] += vi * row[c]
		}
	}
	for i := range rows {
		row, s := a[i*ld:i*ld+cols], -tau*v[i]
		for c := range w {
			row[c] += s * w[c]
		}
	}
}
