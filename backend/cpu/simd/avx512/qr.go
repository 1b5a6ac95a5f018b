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

// vtc is simd.Table.VtC: panelRows rows of w at a time, each pass of the
// kernel streaming C's rows once.
func vtc(w, v []float32, ldv, jb int, c []float32, ld, rows, cw int) {
	if rows == 0 || cw == 0 {
		return
	}
	checkTiles(jb, cw)
	_, _, _ = w[jb*cw-1], v[(jb-1)*ldv+rows-1], c[(rows-1)*ld+cw-1] // the kernel's extents
	for p := 0; p < jb; p += panelRows {
		panelTiles(&w[p*cw], cw, &v[p*ldv], ldv, 1, &c[0], ld, rows, cw/(2*W))
	}
}

// addVW is simd.Table.AddVW: panelRows rows of C at a time, each kept in
// registers over all of w's rows.
func addVW(c []float32, ld, rows, cw int, v []float32, ldv, jb int, w []float32) {
	if rows == 0 || cw == 0 {
		return
	}
	checkTiles(rows, cw)
	_, _, _ = c[(rows-1)*ld+cw-1], v[(jb-1)*ldv+rows-1], w[jb*cw-1] // the kernel's extents
	for r := 0; r < rows; r += panelRows {
		panelTiles(&c[r*ld], ld, &v[r], 1, ldv, &w[0], cw, jb, cw/(2*W))
	}
}

// checkTiles panics unless the kernel's tiles cover rows x cols exactly:
// it writes whole tiles, so a partial one would reach past the slices.
func checkTiles(rows, cols int) {
	if rows%panelRows != 0 || cols%(2*W) != 0 {
		panic("simd: panel products on partial tiles")
	}
}

// panelTiles is the register-blocked multiply-add under both products
// (panel_amd64.s, written by gen_panel.go): for tiles tiles of 2W columns,
// acc[r][x] += sum over kk < k of a[r*ai + kk*ak] * b[kk*bk + x] for the
// panelRows rows r; strides in floats, the next tile 2W floats further in
// acc and b.
//
//go:noescape
func panelTiles(acc *float32, accStride int, a *float32, ai, ak int, b *float32, bk, k, tiles int)

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
