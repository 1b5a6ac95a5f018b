//go:build goexperiment.simd && amd64

package avx512

import "simd/archsimd"

func axpy(dst, x []float32, s float32) {
	sv := splat(s)
	x = x[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(x, i).MulAdd(sv, load(dst, i)), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(x[n:]).MulAdd(sv, loadPart(dst[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// vtc is simd.Table.VtC on tiles of 4 rows of w by 2 vectors: per row of
// C, two loads and four broadcasts feed eight FMAs (an axpy per reflector
// entry fed one FMA from two loads and a store).
func vtc(w, v []float32, jb int, c []float32, ld, rows, cw int) {
	for p := 0; p < jb; p += 4 {
		for x := 0; x < cw; x += 2 * W {
			a0, a1, b0, b1 := zero(), zero(), zero(), zero()
			c0, c1, d0, d1 := zero(), zero(), zero(), zero()
			for r := range rows {
				x0, x1 := load(c, r*ld+x), load(c, r*ld+x+W)
				vp := r*jb + p
				va, vb, vc, vd := broadcastAt(v, vp), broadcastAt(v, vp+1), broadcastAt(v, vp+2), broadcastAt(v, vp+3)
				a0, a1 = x0.MulAdd(va, a0), x1.MulAdd(va, a1)
				b0, b1 = x0.MulAdd(vb, b0), x1.MulAdd(vb, b1)
				c0, c1 = x0.MulAdd(vc, c0), x1.MulAdd(vc, c1)
				d0, d1 = x0.MulAdd(vd, d0), x1.MulAdd(vd, d1)
			}
			o := p*cw + x
			store(a0, w, o)
			store(a1, w, o+W)
			store(b0, w, o+cw)
			store(b1, w, o+cw+W)
			store(c0, w, o+2*cw)
			store(c1, w, o+2*cw+W)
			store(d0, w, o+3*cw)
			store(d1, w, o+3*cw+W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// addVW is simd.Table.AddVW on tiles of 4 rows of C by 2 vectors, kept in
// registers over all of w's rows; the last rows % 4 one at a time.
func addVW(c []float32, ld, rows, cw int, v []float32, jb int, w []float32) {
	r := 0
	for ; r+4 <= rows; r += 4 {
		for x := 0; x < cw; x += 2 * W {
			i0, i1, i2, i3 := r*ld+x, (r+1)*ld+x, (r+2)*ld+x, (r+3)*ld+x
			a0, a1 := load(c, i0), load(c, i0+W)
			b0, b1 := load(c, i1), load(c, i1+W)
			c0, c1 := load(c, i2), load(c, i2+W)
			d0, d1 := load(c, i3), load(c, i3+W)
			for p := range jb {
				w0, w1 := load(w, p*cw+x), load(w, p*cw+x+W)
				vp := r*jb + p
				va, vb, vc, vd := broadcastAt(v, vp), broadcastAt(v, vp+jb), broadcastAt(v, vp+2*jb), broadcastAt(v, vp+3*jb)
				a0, a1 = w0.MulAdd(va, a0), w1.MulAdd(va, a1)
				b0, b1 = w0.MulAdd(vb, b0), w1.MulAdd(vb, b1)
				c0, c1 = w0.MulAdd(vc, c0), w1.MulAdd(vc, c1)
				d0, d1 = w0.MulAdd(vd, d0), w1.MulAdd(vd, d1)
			}
			store(a0, c, i0)
			store(a1, c, i0+W)
			store(b0, c, i1)
			store(b1, c, i1+W)
			store(c0, c, i2)
			store(c1, c, i2+W)
			store(d0, c, i3)
			store(d1, c, i3+W)
		}
	}
	for ; r < rows; r++ {
		for x := 0; x < cw; x += 2 * W {
			i := r*ld + x
			a0, a1 := load(c, i), load(c, i+W)
			for p := range jb {
				va := broadcastAt(v, r*jb+p)
				a0, a1 = load(w, p*cw+x).MulAdd(va, a0), load(w, p*cw+x+W).MulAdd(va, a1)
			}
			store(a0, c, i)
			store(a1, c, i+W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// reflect is simd.Portable.Reflect, vectorized two ways. Short blocks (up
// to reflectBlockRows rows) go by column blocks: w for four vectors of
// columns stays in registers while the rows stream past twice (w = v^T a,
// then a -= tau v w), so w is never stored. Taller ones stream whole rows
// with w in memory: a column block of a tall matrix is a strided walk
// (measured: 128x128 matrices 1.5x faster by blocks, 1024x1024 1.4x slower).
func reflect(a []float32, ld, rows, cols int, v []float32, tau float32, w []float32) {
	if rows > reflectBlockRows {
		reflectRows(a, ld, rows, cols, v, tau, w)
		return
	}
	nt := splat(-tau)
	n := full(cols)
	c := 0
	for ; c+4*W <= n; c += 4 * W {
		var w0, w1, w2, w3 vf
		for i := range rows {
			row, vi := a[i*ld+c:], broadcastAt(v, i)
			w0 = load(row, 0).MulAdd(vi, w0)
			w1 = load(row, W).MulAdd(vi, w1)
			w2 = load(row, 2*W).MulAdd(vi, w2)
			w3 = load(row, 3*W).MulAdd(vi, w3)
		}
		for i := range rows {
			row, s := a[i*ld+c:], broadcastAt(v, i).Mul(nt)
			store(w0.MulAdd(s, load(row, 0)), row, 0)
			store(w1.MulAdd(s, load(row, W)), row, W)
			store(w2.MulAdd(s, load(row, 2*W)), row, 2*W)
			store(w3.MulAdd(s, load(row, 3*W)), row, 3*W)
		}
	}
	for ; c < n; c += W {
		var w0 vf
		for i := range rows {
			w0 = load(a, i*ld+c).MulAdd(broadcastAt(v, i), w0)
		}
		for i := range rows {
			row := a[i*ld+c:]
			store(w0.MulAdd(broadcastAt(v, i).Mul(nt), load(row, 0)), row, 0)
		}
	}
	if c < cols {
		var w0 vf
		for i := range rows {
			w0 = loadPart(a[i*ld+c:i*ld+cols]).MulAdd(broadcastAt(v, i), w0)
		}
		for i := range rows {
			row := a[i*ld+c : i*ld+cols]
			storePart(w0.MulAdd(broadcastAt(v, i).Mul(nt), loadPart(row)), row)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// reflectBlockRows is the most rows reflect walks by column blocks.
const reflectBlockRows = 256

// reflectRows is reflect streaming whole rows, w (cols floats) in memory.
func reflectRows(a []float32, ld, rows, cols int, v []float32, tau float32, w []float32) {
	w = w[:cols]
	n := full(cols)
	for c := 0; c < cols; c += W {
		if c < n {
			store(zero(), w, c)
		} else {
			storePart(zero(), w[c:])
		}
	}
	for i := range rows {
		row, vi := a[i*ld:i*ld+cols], broadcastAt(v, i)
		c := 0
		for ; c < n; c += W {
			store(load(row, c).MulAdd(vi, load(w, c)), w, c)
		}
		if c < cols {
			storePart(loadPart(row[c:]).MulAdd(vi, loadPart(w[c:])), w[c:])
		}
	}
	nt := splat(-tau)
	for i := range rows {
		row, s := a[i*ld:i*ld+cols], broadcastAt(v, i).Mul(nt)
		c := 0
		for ; c < n; c += W {
			store(load(w, c).MulAdd(s, load(row, c)), row, c)
		}
		if c < cols {
			storePart(loadPart(w[c:]).MulAdd(s, loadPart(row[c:])), row[c:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// qrLanes is Householder QR of W matrices at once, lane l holding matrix l:
// a is m x n interleaved (element (i, j) of every matrix in the W floats at
// (i*n + j)*W), factored in place into R (upper triangle) and the reflector
// tails (below it); q, when not nil, receives Q (m x qCols, interleaved) for
// qCols = min(m, n) or m. Every step is the scalar algorithm (LAPACK's geqr2
// and org2r, its sign convention) on vectors, so there are no horizontal
// operations. scratch holds min(m, n)*W floats (the taus). Each reflector
// is built from its column divided by the column's largest magnitude (tau
// and the reflector do not depend on the scale; only beta is scaled back),
// so columns of 1e-30, 1e30, or of denormal rounding residue (whose
// reciprocal overflows float32) neither underflow nor overflow.
func qrLanes(a []float32, m, n int, q []float32, qCols int, scratch []float32) {
	k, rs := min(m, n), n*W // rs: one matrix row of a, interleaved
	one, absMask := splat(1), splatI(0x7fffffff)
	for j := range k {
		alpha := load(a, j*rs+j*W)
		mx := asF(asI(alpha).And(absMask))
		for i := j + 1; i < m; i++ {
			mx = mx.Max(asF(asI(load(a, i*rs+j*W)).And(absMask)))
		}
		safe := one.Merge(mx, mx.Equal(zero())) // a zero column divides by 1
		// x / safe as (x * pre) * inv: pre = 2^64 lifts a denormal maximum
		// (its reciprocal would overflow) exactly into the normal range
		pre := splat(0x1p64).Merge(one, mx.Less(splat(0x1p-64)))
		inv := one.Div(safe.Mul(pre))
		var ss vf
		for i := j + 1; i < m; i++ {
			x := load(a, i*rs+j*W).Mul(pre).Mul(inv)
			ss = x.MulAdd(x, ss)
		}
		an := alpha.Mul(pre).Mul(inv)
		sign := asI(alpha).And(splatI(-0x80000000))
		bn := asF(asI(an.MulAdd(an, ss).Sqrt()).Or(sign)).Mul(splat(-1)) // -copysign(norm, alpha), scaled
		keep := ss.Equal(zero())                                         // nothing below the diagonal: H = I
		tau := zero().Merge(bn.Sub(an).Div(bn), keep)
		div := one.Div(an.Sub(bn)) // the tail x / (alpha - beta), as x * pre * inv * div
		store(alpha.Merge(bn.Mul(safe), keep), a, j*rs+j*W)
		for i := j + 1; i < m; i++ {
			x := load(a, i*rs+j*W)
			store(x.Merge(x.Mul(pre).Mul(inv).Mul(div), keep), a, i*rs+j*W)
		}
		store(tau, scratch, j*W)
		reflectLanes(a, rs, j+1, n, a, rs, j, m, tau)
	}
	if q == nil {
		archsimd.ClearAVXUpperBits()
		return
	}
	qs := qCols * W
	for i := range m {
		for c := range qCols {
			if i == c {
				store(one, q, i*qs+c*W)
			} else {
				store(zero(), q, i*qs+c*W)
			}
		}
	}
	for j := k - 1; j >= 0; j-- {
		reflectLanes(q, qs, j, qCols, a, rs, j, m, load(scratch, j*W))
	}
	archsimd.ClearAVXUpperBits()
}

// reflectLanes applies reflector j of qrLanes (1 at row j, a's column j
// below it; rows of rs floats) to columns [from, to) of dst (rows of ds
// floats), rows j..m-1: x -= tau (v . x) v. Two columns a pass, so each
// reflector load serves both.
func reflectLanes(dst []float32, ds, from, to int, a []float32, rs, j, m int, tau vf) {
	c := from
	for ; c+1 < to; c += 2 {
		w0, w1 := load(dst, j*ds+c*W), load(dst, j*ds+(c+1)*W)
		for i := j + 1; i < m; i++ {
			v := load(a, i*rs+j*W)
			w0 = v.MulAdd(load(dst, i*ds+c*W), w0)
			w1 = v.MulAdd(load(dst, i*ds+(c+1)*W), w1)
		}
		t0, t1 := tau.Mul(w0), tau.Mul(w1)
		store(load(dst, j*ds+c*W).Sub(t0), dst, j*ds+c*W)
		store(load(dst, j*ds+(c+1)*W).Sub(t1), dst, j*ds+(c+1)*W)
		for i := j + 1; i < m; i++ {
			v := load(a, i*rs+j*W)
			store(load(dst, i*ds+c*W).Sub(v.Mul(t0)), dst, i*ds+c*W)
			store(load(dst, i*ds+(c+1)*W).Sub(v.Mul(t1)), dst, i*ds+(c+1)*W)
		}
	}
	if c < to {
		w := load(dst, j*ds+c*W)
		for i := j + 1; i < m; i++ {
			w = load(a, i*rs+j*W).MulAdd(load(dst, i*ds+c*W), w)
		}
		tw := tau.Mul(w)
		store(load(dst, j*ds+c*W).Sub(tw), dst, j*ds+c*W)
		for i := j + 1; i < m; i++ {
			store(load(dst, i*ds+c*W).Sub(load(a, i*rs+j*W).Mul(tw)), dst, i*ds+c*W)
		}
	}
}
