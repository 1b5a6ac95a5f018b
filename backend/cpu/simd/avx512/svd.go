//go:build goexperiment.simd && amd64

package avx512

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
// ζ = (‖y‖² - ‖x‖²) / (2 x·y). A sweep takes every pair in row order; the
// sweeps end once no lane rotated in one by a sine above tol and
// simd.SVDStopSin (LAPACK sgesvj's stop, with quadratic convergence's:
// smaller rotations are still applied, but one that moves its columns by
// less than rounding would recur every sweep).
//
// The rotations are scaled (Rutishauser's, as in Veselić and Hari's
// one-sided Jacobi): within a sweep each column of B and of V is its
// stored entries times a scale d of its own, and a rotation by c and s = t c
// becomes x += -t (d_y/d_x) y, y += t (d_x/d_y) x with both scales times c:
// one multiply-add an entry where a plain rotation takes two. The scales
// are float32 pairs (1 - c kept exactly: a small angle's c rounds to 1,
// which would grow every norm by s² a rotation) and are multiplied into the
// columns once one falls below 2⁻²⁰, before they could underflow, and when
// the sweeps end. Each column's squared norm (of its stored entries) is
// formed from its entries at each sweep's start, and a rotation updates it
// from the old norms and x·y; where that would cancel (a norm falling below
// 1/16 of what it was: y nearly parallel to x) it is formed from the new
// entries instead.
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
	shrunk := splat(1.0 / 16)
	var norms [maxSVDCols * W]float32 // each column's stored entries' ‖x‖²
	var scales columnScales
	for j := range cols {
		store(one, scales.high[:], j*W)
	}
	frobenius2 := scales.fold(b, v, norms[:], rows, cols) // the norms at first
	residue := frobenius2.Mul(splat(4 * tol * tol))       // ops/svd's frozen
	var rotated uint64                                    // the lanes that rotated in this sweep
	var pending rotations                                 // V's rotations still to apply
	folded := true
	for range maxSweeps {
		rotated = 0
		for p := 0; p < cols-1; p++ {
			var next vf // x·y of this pair, where the rotation before formed it
			formed := false
			for q := p + 1; q < cols; q++ {
				xs, ys := b[p*col:(p+1)*col], b[q*col:(q+1)*col]
				g := next
				if !formed {
					g = rowDot(xs, ys, rows)
				}
				formed = false
				nx, ny := load(norms[:], p*W), load(norms[:], q*W)
				dx, dy := load(scales.high[:], p*W), load(scales.high[:], q*W)
				alpha, beta := dx.Mul(dx).Mul(nx), dy.Mul(dy).Mul(ny)
				// (x·y)² > tol² ‖x‖² ‖y‖², neither column residue (no square
				// root; residue's floor keeps the product clear of underflow;
				// the scales cancel in the first)
				turn := g.Mul(g).Greater(tol2.Mul(nx).Mul(ny)).And(alpha.Min(beta).Greater(residue))
				if turn.ToBits() == 0 {
					continue
				}
				zeta := half.Mul(beta.Sub(alpha)).Div(g.Mul(dx).Mul(dy))
				t := one.Div(abs(zeta).Add(zeta.MulAdd(zeta, one).Sqrt()))
				t = asF(asI(t).Or(asI(zeta).And(signBit)))
				t = t.Merge(zero(), turn)
				if lanes(W).ToBits()&^t.Equal(zero()).ToBits() == 0 {
					continue
				}
				r := t.MulAdd(t, one).Sqrt()                            // the sine is t / r
				rotated |= uint64(abs(t).Greater(stop.Mul(r)).ToBits()) // smaller ones still rotate, and end the sweeps
				inv := one.Div(dx.Mul(dy))
				mx, my := zero().Sub(t.Mul(dy)).Mul(dy.Mul(inv)), t.Mul(dx).Mul(dx.Mul(inv))
				// (V's rotations before this one, where add applies them, run
				// while its divisions and roots are on their way)
				pending.add(v, vcol, p, q, mx, my)
				// the new norms (a lane that does not turn keeps its columns):
				// ‖x + mx y‖² from the old ones and x·y, unless that cancels
				// (a norm falls below shrunk of what it was, where its
				// rounding error would pass 4 / shrunk ulps): from the new
				// entries then
				g2 := g.Add(g)
				ax := mx.MulAdd(g2, nx).Add(mx.Mul(mx).Mul(ny))
				ay := my.MulAdd(g2, ny).Add(my.Mul(my).Mul(nx))
				switch {
				case ax.Less(nx.Mul(shrunk)).Or(ay.Less(ny.Mul(shrunk))).ToBits() != 0:
					ax, ay = turnScaled(xs, ys, mx, my)
				case q+1 < cols: // and the next pair's product, x's new entries at hand
					next, formed = turnScaledDot(xs, ys, b[(q+1)*col:(q+2)*col], mx, my), true
				default:
					turnScaledV(xs, ys, mx, my)
				}
				store(ax, norms[:], p*W)
				store(ay, norms[:], q*W)
				// both scales times c = 1 - k, k = t² / (r (1 + r)) exactly
				k := t.Mul(t).Div(r.MulAdd(r, r))
				scales.shrink(p, k)
				scales.shrink(q, k)
			}
		}
		pending.flush(v, vcol)
		// the scales go into the columns once one could underflow, or
		// the sweeps end; the norms are formed anew from the entries each
		// sweep
		folded = rotated == 0 || scales.below(cols, 0x1p-20)
		if folded {
			scales.fold(b, v, norms[:], rows, cols)
		} else {
			columnNorms(b, norms[:], rows, cols)
		}
		if rotated == 0 {
			break
		}
	}
	if !folded {
		scales.fold(b, v, norms[:], rows, cols)
	}
	archsimd.ClearAVXUpperBits()
	for l := range info {
		info[l] = int32(rotated >> l & 1)
	}
}

// qvLanes is simd.Table.QVLanes: each entry of y the product of a row of q
// and a column of v, both contiguous.
func qvLanes(y, q, v []float32, rows, cols int) {
	col := cols * W
	for j := range cols {
		vj := v[j*col : (j+1)*col]
		for i := range rows {
			store(rowDot(q[i*col:(i+1)*col], vj, cols), y, (j*rows+i)*W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// maxSVDCols bounds svdLanes' columns (its norms and scales live on the
// stack).
const maxSVDCols = 256

// columnScales are svdLanes' scales of its columns, lane by lane: each
// high + low, a float32 pair (the low part within rounding of the high).
type columnScales struct{ high, low [maxSVDCols * W]float32 }

// shrink multiplies column j's scale by 1 - k.
func (d *columnScales) shrink(j int, k vf) {
	hi, lo := load(d.high[:], j*W), load(d.low[:], j*W)
	lo = zero().Sub(k).MulAdd(hi.Add(lo), lo)
	sum := hi.Add(lo) // Fast2Sum: |lo| is below |hi|
	store(sum, d.high[:], j*W)
	store(lo.Sub(sum.Sub(hi)), d.low[:], j*W)
}

// fold multiplies each of the first cols columns of b (rows entries) and of
// v (cols entries) by its scale, sets the scales to 1, writes each
// column's squared norm to norms and returns their sum.
func (d *columnScales) fold(b, v, norms []float32, rows, cols int) (frobenius2 vf) {
	col, vcol := rows*W, cols*W
	for j := range cols {
		hi, lo := load(d.high[:], j*W), load(d.low[:], j*W)
		scaleCol(v[j*vcol:(j+1)*vcol], hi, lo)
		sq := scaleCol(b[j*col:(j+1)*col], hi, lo)
		store(sq, norms, j*W)
		frobenius2 = frobenius2.Add(sq)
		store(splat(1), d.high[:], j*W)
		store(zero(), d.low[:], j*W)
	}
	return frobenius2
}

// below reports whether a scale of the first cols columns, in any lane,
// is below bound.
func (d *columnScales) below(cols int, bound float32) bool {
	m := load(d.high[:], 0)
	for j := 1; j < cols; j++ {
		m = m.Min(load(d.high[:], j*W))
	}
	return m.Less(splat(bound)).ToBits() != 0
}

// columnNorms writes the squared norm of each of the first cols columns of
// b (rows entries) to norms.
func columnNorms(b, norms []float32, rows, cols int) {
	col := rows * W
	for j := range cols {
		store(rowDot(b[j*col:(j+1)*col], b[j*col:(j+1)*col], rows), norms, j*W)
	}
}

// scaleCol multiplies x by hi + lo and returns its new squared norm.
func scaleCol(x []float32, hi, lo vf) (sq vf) {
	for i := 0; i+W <= len(x); i += W {
		e := load(x, i)
		e = e.MulAdd(hi, e.Mul(lo))
		store(e, x, i)
		sq = e.MulAdd(e, sq)
	}
	return sq
}

// turnScaled is svdLanes' scaled rotation of the columns x and y (x += mx
// y, y += my x with x's entries before it) and returns their new squared
// norms, lane by lane (len(x) a multiple of W). svdLanes' column loops
// (these, and rowDot for the columns' product) are functions of their own:
// inside it, their counters and slices spilled to the stack.
func turnScaled(x, y []float32, mx, my vf) (ax, ay vf) {
	y = y[:len(x)]
	var bx, by vf
	i := 0
	for ; i+2*W <= len(x); i += 2 * W {
		x0, y0, x1, y1 := load(x, i), load(y, i), load(x, i+W), load(y, i+W)
		x0, y0 = mx.MulAdd(y0, x0), my.MulAdd(x0, y0)
		x1, y1 = mx.MulAdd(y1, x1), my.MulAdd(x1, y1)
		store(x0, x, i)
		store(y0, y, i)
		store(x1, x, i+W)
		store(y1, y, i+W)
		ax, ay = x0.MulAdd(x0, ax), y0.MulAdd(y0, ay)
		bx, by = x1.MulAdd(x1, bx), y1.MulAdd(y1, by)
	}
	if i < len(x) {
		x0, y0 := load(x, i), load(y, i)
		x0, y0 = mx.MulAdd(y0, x0), my.MulAdd(x0, y0)
		store(x0, x, i)
		store(y0, y, i)
		ax, ay = x0.MulAdd(x0, ax), y0.MulAdd(y0, ay)
	}
	return ax.Add(bx), ay.Add(by)
}

// rotations are V's scaled rotations still to apply: columns p and q[j]
// by mx[j] and my[j], j in order, for the first n. They are applied in one
// pass over the entries, column p read and written once for all of them
// (the same operations in the same order as a pass each: V's stores, which
// bound a rotation, go from two columns a rotation to one more than the
// rotations).
type rotations struct {
	p, n   int
	q      [4]int
	mx, my [4]vf
}

// add appends the rotation of columns p and q, applying those before it
// first where they rotate another p or there are four.
func (r *rotations) add(v []float32, vcol, p, q int, mx, my vf) {
	if r.n == len(r.q) || r.n > 0 && r.p != p {
		r.flush(v, vcol)
	}
	r.p, r.q[r.n], r.mx[r.n], r.my[r.n] = p, q, mx, my
	r.n++
}

// flush applies the rotations to v's columns (vcol entries each).
func (r *rotations) flush(v []float32, vcol int) {
	x := v[r.p*vcol : (r.p+1)*vcol]
	y := func(j int) []float32 { return v[r.q[j]*vcol : (r.q[j]+1)*vcol] }
	if r.n == len(r.q) {
		turn4(x, y(0), y(1), y(2), y(3), r)
	} else {
		for j := range r.n {
			turnScaledV(x, y(j), r.mx[j], r.my[j])
		}
	}
	r.n = 0
}

// turn4 applies r's four rotations to x and y0..y3, a vector of entries at
// a time.
func turn4(x, y0, y1, y2, y3 []float32, r *rotations) {
	n := len(x)
	y0, y1, y2, y3 = y0[:n], y1[:n], y2[:n], y3[:n]
	mx0, mx1, mx2, mx3 := r.mx[0], r.mx[1], r.mx[2], r.mx[3]
	my0, my1, my2, my3 := r.my[0], r.my[1], r.my[2], r.my[3]
	for i := 0; i+W <= n; i += W {
		a := load(x, i)
		b := load(y0, i)
		a, b = mx0.MulAdd(b, a), my0.MulAdd(a, b)
		store(b, y0, i)
		b = load(y1, i)
		a, b = mx1.MulAdd(b, a), my1.MulAdd(a, b)
		store(b, y1, i)
		b = load(y2, i)
		a, b = mx2.MulAdd(b, a), my2.MulAdd(a, b)
		store(b, y2, i)
		b = load(y3, i)
		a, b = mx3.MulAdd(b, a), my3.MulAdd(a, b)
		store(b, y3, i)
		store(a, x, i)
	}
}

// turnScaledDot is turnScaledV of x and y, returning x's new entries' product
// with z (rowDot's sums).
func turnScaledDot(x, y, z []float32, mx, my vf) vf {
	var s0, s1, s2, s3 vf
	y, z = y[:len(x)], z[:len(x)]
	for len(x) >= 4*W {
		xb, yb, zb := (*block4)(x), (*block4)(y), (*block4)(z)
		x0, y0, x1, y1 := xb.at(0), yb.at(0), xb.at(1), yb.at(1)
		x2, y2, x3, y3 := xb.at(2), yb.at(2), xb.at(3), yb.at(3)
		x0, y0, x1, y1 = mx.MulAdd(y0, x0), my.MulAdd(x0, y0), mx.MulAdd(y1, x1), my.MulAdd(x1, y1)
		x2, y2, x3, y3 = mx.MulAdd(y2, x2), my.MulAdd(x2, y2), mx.MulAdd(y3, x3), my.MulAdd(x3, y3)
		xb.put(0, x0)
		yb.put(0, y0)
		xb.put(1, x1)
		yb.put(1, y1)
		xb.put(2, x2)
		yb.put(2, y2)
		xb.put(3, x3)
		yb.put(3, y3)
		s0, s1, s2, s3 = x0.MulAdd(zb.at(0), s0), x1.MulAdd(zb.at(1), s1), x2.MulAdd(zb.at(2), s2), x3.MulAdd(zb.at(3), s3)
		x, y, z = x[4*W:], y[4*W:], z[4*W:]
	}
	for len(x) >= W {
		x0, y0 := load(x, 0), load(y, 0)
		x0, y0 = mx.MulAdd(y0, x0), my.MulAdd(x0, y0)
		store(x0, x, 0)
		store(y0, y, 0)
		s0 = x0.MulAdd(load(z, 0), s0)
		x, y, z = x[W:], y[W:], z[W:]
	}
	return s0.Add(s1).Add(s2.Add(s3))
}

// turnScaledV is turnScaled without the norms (V's columns).
func turnScaledV(x, y []float32, mx, my vf) {
	y = y[:len(x)]
	for i := 0; i+W <= len(x); i += W {
		x0, y0 := load(x, i), load(y, i)
		store(mx.MulAdd(y0, x0), x, i)
		store(my.MulAdd(x0, y0), y, i)
	}
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
