//go:build goexperiment.simd && amd64

package avx512

import (
	"math"
	"simd/archsimd"

	"metalcore/backend/cpu/simd"
)

// eighLanes is simd.Table.EighLanes: cyclic Jacobi rotations on W
// symmetric matrices at once (their upper triangles), the same pair (p, q) in every lane and each
// lane's rotation its own: none where its a_pq is zero or negligible beside
// both diagonal entries (then a_pq is set to zero), a_pq / (a_qq - a_pp)
// where that difference dwarfs a_pq. A sweep takes every pair in row
// order; the sweeps end once no lane's rotation in one had a tangent above
// simd.EighStopTan.
func eighLanes(a []float32, n int, v []float32, maxSweeps int, info []int32) {
	info = info[:W]
	row := n * W
	if n == 0 {
		clear(info)
		return
	}
	_ = a[n*row-1]
	if v != nil {
		clear(v[:n*row])
		for i := range n {
			store(splat(1), v, i*row+i*W)
		}
	}
	absBits, signBit := splatI(0x7fffffff), splatI(math.MinInt32)
	abs := func(x vf) vf { return asF(asI(x).And(absBits)) }
	one, half, hundred, stopTan := splat(1), splat(0.5), splat(100), splat(simd.EighStopTan)
	all := lanes(W).ToBits()
	var rotated uint64 // the lanes that rotated in this sweep
	for range maxSweeps {
		rotated = 0
		for p := 0; p < n-1; p++ {
			for q := p + 1; q < n; q++ {
				pq, pp, qq := p*row+q*W, p*row+p*W, q*row+q*W
				apq, app, aqq := load(a, pq), load(a, pp), load(a, qq)
				g := hundred.Mul(abs(apq))
				skip := abs(app).Add(g).Equal(abs(app)).And(abs(aqq).Add(g).Equal(abs(aqq))).Or(apq.Equal(zero()))
				if skip.ToBits() == all {
					store(zero(), a, pq)
					continue
				}
				h := aqq.Sub(app)
				theta := half.Mul(h).Div(apq)
				t := one.Div(abs(theta).Add(theta.MulAdd(theta, one).Sqrt()))
				t = asF(asI(t).Or(asI(theta).And(signBit)))
				t = apq.Div(h).Merge(t, abs(h).Add(g).Equal(abs(h)))
				t = zero().Merge(t, skip)
				rotated |= uint64(all &^ abs(t).LessEqual(stopTan).ToBits()) // NaN counts
				c := one.Div(t.MulAdd(t, one).Sqrt())
				s := t.Mul(c)
				// the upper triangle's (j, p) and (j, q), each from the
				// triangle's side: the other one is never read
				for j := 0; j < p*W; j += W {
					rotate(a, j*n+p*W, j*n+q*W, c, s)
				}
				for j := (p + 1) * W; j < q*W; j += W {
					rotate(a, p*row+j, j*n+q*W, c, s)
				}
				for j := (q + 1) * W; j < row; j += W {
					rotate(a, p*row+j, q*row+j, c, s)
				}
				if v != nil {
					for r := 0; r < row; r += W {
						rotate(v, r*n+p*W, r*n+q*W, c, s)
					}
				}
				tapq := t.Mul(apq) // the 2 x 2 block directly
				store(app.Sub(tapq), a, pp)
				store(aqq.Add(tapq), a, qq)
				store(zero(), a, pq)
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

// rot is simd.Table.Rot.
func rot(x, y []float32, c, s float32) {
	cv, sv := splat(c), splat(s)
	y = y[:len(x)]
	n := full(len(x))
	for i := 0; i < n; i += W {
		a, b := turn(load(x, i), load(y, i), cv, sv)
		store(a, x, i)
		store(b, y, i)
	}
	if n < len(x) {
		a, b := turn(loadPart(x[n:]), loadPart(y[n:]), cv, sv)
		storePart(a, x[n:])
		storePart(b, y[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// turn is the rotation (c x - s y, s x + c y).
func turn(x, y, c, s vf) (vf, vf) { return c.Mul(x).Sub(s.Mul(y)), s.MulAdd(x, c.Mul(y)) }

// symMV is simd.Table.SymMV: row j of the triangle adds its dot product
// with x to y[j] and itself times x[j] to y's later elements, one pass.
func symMV(a []float32, ld, n int, x, y []float32) {
	for j := range n {
		row, xs, ys := a[j*ld+j+1:j*ld+n], x[j+1:n], y[j+1:n]
		xj := broadcastAt(x, j)
		var acc vf
		m := full(len(row))
		for c := 0; c < m; c += W {
			r := load(row, c)
			acc = r.MulAdd(load(xs, c), acc)
			store(r.MulAdd(xj, load(ys, c)), ys, c)
		}
		if m < len(row) {
			r := loadPart(row[m:])
			acc = r.MulAdd(loadPart(xs[m:]), acc)
			storePart(r.MulAdd(xj, loadPart(ys[m:])), ys[m:])
		}
		dot := hsum(acc) // the vector section's end, before scalar float code
		y[j] += a[j*ld+j]*x[j] + dot
	}
}

// symRank2 is simd.Table.SymRank2, a row of the triangle at a time.
func symRank2(a []float32, ld, n int, x, y []float32) {
	for j := range n {
		row, xs, ys := a[j*ld+j:j*ld+n], x[j:n], y[j:n]
		xj, yj := broadcastAt(x, j), broadcastAt(y, j)
		m := full(len(row))
		for c := 0; c < m; c += W {
			store(load(row, c).Sub(load(ys, c).MulAdd(xj, load(xs, c).Mul(yj))), row, c)
		}
		if m < len(row) {
			storePart(loadPart(row[m:]).Sub(loadPart(ys[m:]).MulAdd(xj, loadPart(xs[m:]).Mul(yj))), row[m:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// rotate sets (x, y) = (c x - s y, s x + c y) for the vectors at s[i:] and s[j:].
func rotate(m []float32, i, j int, c, s vf) {
	x, y := turn(load(m, i), load(m, j), c, s)
	store(x, m, i)
	store(y, m, j)
}
