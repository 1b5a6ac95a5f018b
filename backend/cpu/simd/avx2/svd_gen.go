// Code generated from ../avx512/svd.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import (
	"math"
	"simd/archsimd"

	"metalcore/backend/cpu/simd"
)

// svdLanes is simd.Table.SVDLanes: one-sided Jacobi on W matrices at once,
// the same pair of columns (p, q) in every lane and each lane's rotation
// its own: none where its columns are orthogonal to tol, else the one that
// makes them orthogonal (ops/svd's tolerance says which are; a column
// frozen there is not rotated), t = sign(ζ) / (|ζ| + √(1 + ζ²)) with
// ζ = (‖y‖² - ‖x‖²) / (2 x·y), each column's ‖x‖² formed once and again
// from the new entries of each rotation of it (an update ‖x‖² - t x·y
// cancels where y was nearly parallel to x). A sweep takes every pair in row
// order; the sweeps end once no lane rotated in one by a sine above tol and
// simd.SVDStopSin (LAPACK sgesvj's stop, with quadratic convergence's:
// smaller rotations are still applied, but one that moves its columns by
// less than rounding would recur every sweep). Rotations are applied
// as x' = x - s (y + tau x), y' = y + s (x - tau y), tau = s / (1 + c):
// c x - s y with the cosine's distance from 1 kept exactly (a small
// angle's c rounds to 1, which would grow every norm by s² a rotation).
func svdLanes(b []float32, rows, cols int, v []float32, tol float32, maxSweeps int, info []int32) {
	info = info[:W]
	col, vcol := rows*W, cols*W
	if cols == 0 {
		clear(info)
		return
	}
	if cols > maxSVDCols {
		panic("svdLanes: more columns than maxSVDCols")
	}
	_ = b[cols*col-1]
	clear(v[:cols*vcol])
	for i := range cols {
		store(splat(1), v, i*vcol+i*W)
	}
	absBits, signBit := splatI(0x7fffffff), splatI(math.MinInt32)
	abs := func(x vf) vf { return asF(asI(x).And(absBits)) }
	one, half, stop, tol2 := splat(1), splat(0.5), splat(max(tol, simd.SVDStopSin)), splat(tol*tol)
	var norms [maxSVDCols * W]float32 // each column's ‖x‖²
	var frobenius2 vf
	for j := range cols {
		var sq vf
		for i := j * col; i < (j+1)*col; i += W {
			x := load(b, i)
			sq = x.MulAdd(x, sq)
		}
		store(sq, norms[:], j*W)
		frobenius2 = frobenius2.Add(sq)
	}
	residue := frobenius2.Mul(splat(4 * tol * tol)) // ops/svd's frozen
	var rotated uint64                              // the lanes that rotated in this sweep
	for range maxSweeps {
		rotated = 0
		for p := 0; p < cols-1; p++ {
			for q := p + 1; q < cols; q++ {
				xs, ys := b[p*col:(p+1)*col], b[q*col:(q+1)*col]
				gamma := rowDot(xs, ys, rows)
				alpha, beta := load(norms[:], p*W), load(norms[:], q*W)
				// (x·y)² > tol² ‖x‖² ‖y‖², neither column residue (no square
				// root; residue's floor keeps the product clear of underflow)
				turn := gamma.Mul(gamma).Greater(tol2.Mul(alpha).Mul(beta)).And(alpha.Min(beta).Greater(residue))
				if turn.ToBits() == 0 {
					continue
				}
				zeta := half.Mul(beta.Sub(alpha)).Div(gamma)
				t := one.Div(abs(zeta).Add(zeta.MulAdd(zeta, one).Sqrt()))
				t = asF(asI(t).Or(asI(zeta).And(signBit)))
				t = t.Merge(zero(), turn)
				if lanes(W).ToBits()&^t.Equal(zero()).ToBits() == 0 {
					continue
				}
				c := one.Div(t.MulAdd(t, one).Sqrt())
				s := t.Mul(c)
				rotated |= uint64(abs(s).Greater(stop).ToBits()) // smaller ones still rotate, and end the sweeps
				tau := s.Div(one.Add(c))
				ns, ntau := zero().Sub(s), zero().Sub(tau)
				// the new norms (a lane that does not turn keeps its columns)
				ax, ay := turnCols(xs, ys, s, ns, tau, ntau)
				store(ax, norms[:], p*W)
				store(ay, norms[:], q*W)
				turnCols(v[p*vcol:(p+1)*vcol], v[q*vcol:(q+1)*vcol], s, ns, tau, ntau)
			}
		}
		if rotated == 0 {
			break
		}
	}
	archsimd.ClearAVXUpperBits()
	for l := range info {
		info[l] = int32(rotated >> l & 1)
	}
}

// maxSVDCols bounds svdLanes' columns (its norms live on the stack).
const maxSVDCols = 256

// turnCols rotates the columns x and y in svdLanes' form (turnSmall) and
// returns their new squared norms, lane by lane (len(x) a multiple of W).
// svdLanes' column loops (this, and rowDot for the columns' product) are
// functions of their own: inside it, their counters and slices spilled to
// the stack.
func turnCols(x, y []float32, s, ns, tau, ntau vf) (ax, ay vf) {
	y = y[:len(x)]
	var bx, by vf
	i := 0
	for ; i+2*W <= len(x); i += 2 * W {
		x0, y0 := turnSmall(load(x, i), load(y, i), s, ns, tau, ntau)
		x1, y1 := turnSmall(load(x, i+W), load(y, i+W), s, ns, tau, ntau)
		store(x0, x, i)
		store(y0, y, i)
		store(x1, x, i+W)
		store(y1, y, i+W)
		ax, ay = x0.MulAdd(x0, ax), y0.MulAdd(y0, ay)
		bx, by = x1.MulAdd(x1, bx), y1.MulAdd(y1, by)
	}
	if i < len(x) {
		x0, y0 := turnSmall(load(x, i), load(y, i), s, ns, tau, ntau)
		store(x0, x, i)
		store(y0, y, i)
		ax, ay = x0.MulAdd(x0, ax), y0.MulAdd(y0, ay)
	}
	return ax.Add(bx), ay.Add(by)
}

// turnSmall is the rotation (c x - s y, s x + c y) from s and tau = s / (1
// + c) (ns, ntau: -s, -tau): x - s (y + tau x), y + s (x - tau y).
func turnSmall(x, y, s, ns, tau, ntau vf) (vf, vf) {
	return ns.MulAdd(tau.MulAdd(x, y), x), s.MulAdd(ntau.MulAdd(y, x), y)
}

// jacobiRot is simd.Table.JacobiRot: one matrix's columns in svdLanes' form.
func jacobiRot(x, y []float32, s, tau float32) {
	sv, nsv, tv, ntv := splat(s), splat(-s), splat(tau), splat(-tau)
	y = y[:len(x)]
	n := full(len(x))
	for i := 0; i < n; i += W {
		a, b := turnSmall(load(x, i), load(y, i), sv, nsv, tv, ntv)
		store(a, x, i)
		store(b, y, i)
	}
	if n < len(x) {
		a, b := turnSmall(loadPart(x[n:]), loadPart(y[n:]), sv, nsv, tv, ntv)
		storePart(a, x[n:])
		storePart(b, y[n:])
	}
	archsimd.ClearAVXUpperBits()
}
