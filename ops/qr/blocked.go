package qr

import (
	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// Blocked Householder QR on the CPU (LAPACK's geqrf and orgqr in compact WY
// form) for matrices whose min(m, n) exceeds blockedMin: each panel of
// blockWidth columns is factored column by column, then applied to the
// trailing columns as two matrix products, W = V^T C and C -= V op(T) W,
// split across the workers by column chunks. Variables so that the tests
// can send small matrices through several panels.
var (
	blockedMin = 128
	blockWidth = 32
)

// maxBlockWidth bounds blockWidth (buildT's products live on the stack).
const maxBlockWidth = 64

// chunkCols is the columns a worker updates at a time: W (blockWidth rows of
// it) stays in L1.
const chunkCols = 256

// Scratch slots of the blocked path (after factor's).
const (
	bufPanelV = iota + bufR + 1 // the panel's reflectors, row-major with explicit 1s and 0s
	bufT                        // every panel's T
	bufPanel                    // W and op(T) W of one column chunk
)

// factorBlocked is factor for large matrices; inner says whether to split
// the trailing updates across the workers (the batch is not already).
func factorBlocked(s shapes, b int, av, qv, rv *core.View, sc *cpu.Scratch, inner bool) {
	m, n, nb := s.m, s.n, blockWidth
	a := sc.Buf(bufA, m*n)
	copy(a, cpu.TensorSpan(av).At(b*m*n).Load(0, a))
	v := sc.Buf(bufV, m+4)          // padded for the vector broadcasts
	pv := sc.Buf(bufPanelV, m*nb+4) // padded: VtC and AddVW broadcast from it
	w := sc.Buf(bufW, max(m, n))
	tau := sc.Buf(bufTau, s.k)
	panels := (s.k + nb - 1) / nb
	ts := sc.Buf(bufT, panels*nb*nb)
	for k0 := 0; k0 < s.k; k0 += nb {
		jb := min(nb, s.k-k0)
		geqr2(a, m, n, k0, k0+jb, k0+jb, tau, v, w) // the panel only
		vr := reflectors(a, m, n, k0, jb, pv)
		t := ts[k0/nb*nb*nb : (k0/nb+1)*nb*nb]
		buildT(t, vr, m-k0, jb, tau[k0:k0+jb])
		applyBlock(a[k0*n:], n, m-k0, k0+jb, n, vr, t, jb, true, inner, sc)
	}
	storeR(s, b, a, rv, sc)
	if qv == nil {
		return
	}
	qc := s.qCols
	qm := eye(sc.Buf(bufQ, m*qc), m, qc)
	for k0 := (panels - 1) * nb; k0 >= 0; k0 -= nb {
		jb := min(nb, s.k-k0)
		vr := reflectors(a, m, n, k0, jb, pv)
		applyBlock(qm[k0*qc:], qc, m-k0, k0, qc, vr, ts[k0/nb*nb*nb:], jb, false, inner, sc)
	}
	cpu.TensorSpan(qv).At(b*m*qc).Store(0, qm)
}

// reflectors copies the panel's reflectors (below the diagonal of columns
// k0.., the implicit 1 on it, 0 above) into buf as (m-k0) x jb row-major.
func reflectors(a []float32, m, n, k0, jb int, buf []float32) []float32 {
	vr := buf[:(m-k0)*jb]
	for r := range m - k0 {
		for p := range jb {
			x := float32(0)
			switch {
			case r == p:
				x = 1
			case r > p:
				x = a[(k0+r)*n+k0+p]
			}
			vr[r*jb+p] = x
		}
	}
	return vr
}

// buildT is LAPACK's slarft (forward, columnwise) into t (jb x jb of a
// blockWidth-wide array): T[j][j] = tau_j, T[0:j, j] = -tau_j T[0:j, 0:j]
// (V^T v_j), so that H_0 ... H_jb-1 = I - V T V^T.
func buildT(t, vr []float32, rows, jb int, tau []float32) {
	nb := blockWidth
	clear(t[:nb*nb])
	var z [maxBlockWidth]float64
	for j := range jb {
		for p := range j {
			var d float64
			for r := j; r < rows; r++ { // v_j is zero above row j
				d += float64(vr[r*jb+p]) * float64(vr[r*jb+j])
			}
			z[p] = d
		}
		for p := range j {
			var d float64
			for q := p; q < j; q++ {
				d += float64(t[p*nb+q]) * z[q]
			}
			t[p*nb+j] = float32(-float64(tau[j]) * d)
		}
		t[j*nb+j] = tau[j]
	}
}

// applyBlock applies I - V op(T) V^T (op(T) = T^T when trans: the
// factorization applies H^T; forming q applies H) to columns [c0, c1) of
// the rows x ld row-major block c: W = V^T C, W' = op(T) W, C -= V W', by
// chunks of columns, split across the workers when inner (else in sc).
func applyBlock(c []float32, ld, rows, c0, c1 int, vr, t []float32, jb int, trans, inner bool, sc *cpu.Scratch) {
	if c1 <= c0 {
		return
	}
	work := func(lo, hi int, sc *cpu.Scratch) {
		k := cpu.K()
		buf := sc.Buf(bufPanel, 2*jb*chunkCols)
		// the products' vector kernels take whole tiles: widths of two
		// vectors, jb a multiple of 4; the rest of a chunk goes by axpys
		tile := 2 * max(k.Lanes, 1)
		if jb%4 != 0 {
			tile = chunkCols + 1
		}
		for x0 := c0 + lo; x0 < c0+hi; x0 += chunkCols {
			cw := min(chunkCols, c0+hi-x0)
			fast := cw / tile * tile
			if fast > 0 {
				applyTiles(k, c[x0:], ld, rows, fast, vr, t, jb, trans, buf)
			}
			if fast < cw {
				applyAxpys(k, c[x0+fast:], ld, rows, cw-fast, vr, t, jb, trans, buf)
			}
		}
	}
	if inner {
		cpu.Parallel(c1-c0, chunkCols, work)
		return
	}
	work(0, c1-c0, sc)
}

// opT accumulates wt = -op(T) wv (cw-wide rows), the negation folded in so
// that C += V wt.
func opT(k *simd.Table, wt, wv, t []float32, jb, cw int, trans bool) {
	nb := blockWidth
	clear(wt)
	for p := range jb {
		for q := range jb {
			s := t[p*nb+q]
			if trans {
				s = t[q*nb+p]
			}
			if s != 0 {
				k.Axpy(wt[p*cw:(p+1)*cw], wv[q*cw:(q+1)*cw], -s)
			}
		}
	}
}

// applyTiles is applyBlock's work on cw columns of c with the vector
// kernels (cw a whole number of their tiles).
func applyTiles(k *simd.Table, c []float32, ld, rows, cw int, vr, t []float32, jb int, trans bool, buf []float32) {
	wv, wt := buf[:jb*cw], buf[jb*cw:2*jb*cw]
	vp := vr[:len(vr)+3] // the padding the kernels' broadcasts read past the last entry
	k.VtC(wv, vp, jb, c, ld, rows, cw)
	opT(k, wt, wv, t, jb, cw, trans)
	k.AddVW(c, ld, rows, cw, vp, jb, wt)
}

// applyAxpys is applyBlock's work on cw columns of c, an axpy per reflector
// entry.
func applyAxpys(k *simd.Table, c []float32, ld, rows, cw int, vr, t []float32, jb int, trans bool, buf []float32) {
	wv, wt := buf[:jb*cw], buf[jb*cw:2*jb*cw]
	clear(wv)
	for r := range rows {
		row := c[r*ld : r*ld+cw]
		for p, s := range vr[r*jb : (r+1)*jb] {
			if s != 0 {
				k.Axpy(wv[p*cw:(p+1)*cw], row, s)
			}
		}
	}
	opT(k, wt, wv, t, jb, cw, trans)
	for r := range rows {
		row := c[r*ld : r*ld+cw]
		for p, s := range vr[r*jb : (r+1)*jb] {
			if s != 0 {
				k.Axpy(row, wt[p*cw:(p+1)*cw], s)
			}
		}
	}
}
