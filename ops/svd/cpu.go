package svd

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
	"metalcore/ops/internal/tridiag"
)

// The CPU kernel: batches of small matrices a vector's width at a time, one
// per lane, where the ISA has it: B = Q R (QRLanes), then the rotations on
// Rᵀ (SVDLanes: fewer sweeps than on B, and cols rows), whose columns give
// B's right vectors and V, times Q, its left ones (QVLanes); otherwise, and from
// minPreconditionedCols columns or past maxLaneFloats, one matrix per
// worker at a time, its B first multiplied by the eigenvectors of BᵀB
// (precondition), then the same rotations (jacobi). Either way each
// matrix's B is a float32 copy in the worker's scratch, column by column.
func init() { decompose.Register(core.DeviceCPU, svdCPU) }

// maxLaneFloats bounds the B and V of the matrices rotated a vector's width
// at a time (128 x 128 and its V: 2 MB interleaved with AVX-512).
const maxLaneFloats = 2 * 128 * 128

// minPreconditionedCols is the number of B's columns from which one matrix
// at a time, preconditioned, is faster than a vector's width of them by
// rotations alone (bench/linalg.md).
const minPreconditionedCols = 48

// Scratch buffer slots: a matrix as read, the B (a lanes group's, or one)
// and V (a lanes group's Q instead), the interleaved B and V (one matrix's
// BᵀB and B V0 instead), the finishing column norms and vector (a lanes
// group's taus of R before them), and the outputs' conversions.
const (
	bufRaw = iota
	bufB
	bufV
	bufLanes
	bufLanesV
	bufFinish
	bufS
	bufU
	bufVh
	bufGram    = bufLanes
	bufProduct = bufLanesV
	bufQ       = bufV
	bufTaus    = bufFinish
)

// tolerance is the rotations' threshold: a pair of B's columns whose
// product |x·y| is at most tolerance · ‖x‖ ‖y‖ counts as orthogonal
// (LAPACK's gesvj uses √rows times the unit roundoff).
func tolerance(rows int) float32 { return float32(math.Sqrt(float64(rows))) * 0x1p-24 }

// frozen is the squared norm at or below which a column of B, whose
// squared Frobenius norm is frobenius2 (which rotations keep), is rounding
// residue: its direction is noise. It is not rotated (with the others it
// never settles, and mixes its noise into every column it meets: the
// sweeps went on), and its vector is completed as a zero column's is.
func frozen(frobenius2, tol float32) float32 { return 4 * tol * tol * frobenius2 }

func svdCPU(s shapes, av, uv, sv, vv, iv *core.View, _ unsafe.Pointer) error {
	rows, cols := s.rows(), s.cols()
	infos := unsafe.Slice((*int32)(iv.Base), s.batch)
	io := matrixIO{s: s, a: cpu.TensorSpan(av), sv: cpu.TensorSpan(sv)}
	if s.vectors {
		io.u, io.vh = cpu.TensorSpan(uv), cpu.TensorSpan(vv)
	}
	if k := cpu.K(); k.SVDLanes != nil && s.batch >= 2 && cols < minPreconditionedCols &&
		rows*cols+cols*cols <= maxLaneFloats {
		lanes := k.Lanes
		cpu.Parallel((s.batch+lanes-1)/lanes, 1, func(lo, hi int, sc *cpu.Scratch) {
			for g := lo; g < hi; g++ {
				io.lanes(g*lanes, lanes, infos, sc)
			}
		})
		return nil
	}
	cpu.Parallel(s.batch, max(1, 4096/max(rows*cols*cols, 1)), func(lo, hi int, sc *cpu.Scratch) {
		t := tridiag.New(cols)
		for b := lo; b < hi; b++ {
			bm := sc.Buf(bufB, rows*cols)
			unit := io.load(b, bm, false, sc)
			v := sc.Buf(bufV, cols*cols)
			if unit != unit || !precondition(bm, rows, cols, v, t, sc) {
				cpu.Eye(v, cols, cols, cols)
			}
			info := jacobi(bm, rows, cols, v, sc.Buf(bufFinish, cols))
			infos[b] = io.store(b, bm, rows, v, true, unit, info, sc)
		}
	})
	return nil
}

// matrixIO moves matrices between the tensors and float32 copies.
type matrixIO struct {
	s            shapes
	a, u, sv, vh cpu.Span
}

// load copies matrix b of a into bm as B (by columns: column j at
// bm[j*rows:]; byRows: row i at bm[i*cols:]), times the power of two 2^-e
// that brings its largest magnitude into [0.5, 1) (exactly: a product, not a
// division), and returns 2^e: 0 for a zero matrix, NaN where an entry is not
// finite (bm then zero).
func (io matrixIO) load(b int, bm []float32, byRows bool, sc *cpu.Scratch) float32 {
	m, n := io.s.m, io.s.n
	src := io.a.At(b*m*n).Load(0, sc.Buf(bufRaw, m*n))
	bits := cpu.MaxMagnitude(src)
	if bits >= 0x7f800000 { // an entry not finite
		clear(bm)
		return float32(math.NaN())
	}
	amax := math.Float32frombits(bits)
	if amax == 0 {
		clear(bm)
		return 0
	}
	_, e := math.Frexp(float64(amax))
	scale := math.Ldexp(1, -e) // in float64: past float32's range for a subnormal amax
	// B is A (tall) or Aᵀ (wide): A's rows are B's rows by rows, or B's
	// columns by columns
	if (m >= n) == byRows {
		cpu.ScalePow2(bm[:len(src)], src, scale)
	} else {
		for i := range m {
			for j, x := range src[i*n : (i+1)*n] {
				bm[j*m+i] = float32(float64(x) * scale)
			}
		}
	}
	return float32(math.Ldexp(1, e))
}

// lanes decomposes matrices [first, first+lanes) together, one per vector
// lane (a batch's last group padded with zero matrices): B = Q R, then the
// rotations on X = Rᵀ (cols x cols), X V = U_x Σ, so that B = (Q V) Σ U_xᵀ.
func (io matrixIO) lanes(first, lanes int, infos []int32, sc *cpu.Scratch) {
	k := cpu.K()
	rows, cols, count := io.s.rows(), io.s.cols(), min(lanes, io.s.batch-first)
	rc, cc := rows*cols, cols*cols
	bs := sc.Buf(bufB, rc*lanes)
	var mats [cpu.MaxLanes][]float32
	var unit [cpu.MaxLanes]float32
	for l := range lanes {
		mats[l] = bs[l*rc : (l+1)*rc]
		if l < count {
			unit[l] = io.load(first+l, mats[l], true, sc)
		} else {
			clear(mats[l])
		}
	}
	w, q := sc.Buf(bufLanes, rc*lanes), sc.Buf(bufQ, rc*lanes)
	cpu.Interleave(w, mats[:lanes], rc)
	k.QRLanes(w, rows, cols, q, cols, sc.Buf(bufTaus, cols*lanes))
	// X by columns is R by rows: the first cols rows of w, the reflectors'
	// tails below R's diagonal cleared
	x := w[:cc*lanes]
	for j := range cols {
		clear(x[j*cols*lanes : (j*cols+j)*lanes])
	}
	v := sc.Buf(bufLanesV, cc*lanes)
	var info [cpu.MaxLanes]int32
	k.SVDLanes(x, cols, cols, v, tolerance(rows), MaxSweeps, info[:lanes])
	k.QVLanes(bs, q, v, rows, cols)       // B's left vectors, interleaved, in bs
	var lefts, xs [cpu.MaxLanes][]float32 // into q and v, free after the product
	for l := range count {
		lefts[l], xs[l] = q[l*rc:(l+1)*rc], v[l*cc:(l+1)*cc]
	}
	cpu.Deinterleave(lefts[:count], bs, rc, lanes)
	cpu.Deinterleave(xs[:count], x, cc, lanes)
	for l := range count {
		infos[first+l] = io.store(first+l, xs[l], cols, lefts[l], false, unit[l], info[l], sc)
	}
}

// store writes matrix b's singular values (the norms of bm's cols columns,
// each bmRows long, times load's power of two, in descending order, ties in
// column order) and, when wanted, its vectors: bm's normalized columns
// (completed where a norm is zero) are B's left vectors where bmLeft, and
// other's columns its right ones (V, cols long), else the other way round
// (other's columns rows long). It returns the info: the rotations'
// (converged, 0, or not), or 1 for a matrix that was not finite, whose
// outputs are NaN.
func (io matrixIO) store(b int, bm []float32, bmRows int, other []float32, bmLeft bool, unit float32, info int32,
	sc *cpu.Scratch) int32 {
	m, n, rows, cols := io.s.m, io.s.n, io.s.rows(), io.s.cols()
	k := cols
	fin := sc.Buf(bufFinish, 3*cols+bmRows)
	sigma, rank, byRank, x := fin[:cols], fin[cols:2*cols], fin[2*cols:3*cols], fin[3*cols:]
	table := cpu.K()
	for j := range cols {
		sigma[j] = float32(math.Sqrt(float64(table.SumSq(bm[j*bmRows : (j+1)*bmRows]))))
	}
	// each value's place, descending, ties in column order: the values
	// before it at least as large and those after it larger, each counted
	// by the sign of a difference of their bits (no branch; norms are
	// never negative, and their bits order as they do)
	for j, sj := range sigma {
		bj, r := int64(math.Float32bits(sj)), int64(0)
		for _, si := range sigma[:j] {
			r += (bj - int64(math.Float32bits(si)) - 1) >> 63
		}
		for _, si := range sigma[j+1:] {
			r += (bj - int64(math.Float32bits(si))) >> 63
		}
		rank[j] = float32(-r)
	}
	nan := float32(math.NaN())
	if unit != unit {
		info = 1
	}
	so := io.sv.At(b*k).Out(0, sc.Buf(bufS, k))
	for j := range cols {
		so[int(rank[j])] = float32(float64(sigma[j]) * float64(unit))
	}
	io.sv.At(b*k).Store(0, so)
	if !io.s.vectors {
		return info
	}
	var frobenius2 float32
	for _, sj := range sigma {
		frobenius2 += sj * sj
	}
	// at or below cut, residue: frozen's bound with a margin for the rounding
	// of ‖B‖² between here and the sweeps
	cut := float32(math.Sqrt(float64(1.25 * frozen(frobenius2, tolerance(rows)))))
	for j := range cols {
		if col := bm[j*bmRows : (j+1)*bmRows]; sigma[j] > cut {
			table.Normalize(col, col, nil, nil, 0, 1/sigma[j]) // col *= 1/σ
		}
	}
	complete(bm, bmRows, cols, sigma, cut, x)
	uo := io.u.At(b*m*k).Out(0, sc.Buf(bufU, m*k))
	vho := io.vh.At(b*k*n).Out(0, sc.Buf(bufVh, k*n))
	// U's columns are B's left vectors where A is tall, its right ones
	// where it is wide (B = Aᵀ); Vh's rows are the others
	uVecs, vVecs := bm, other
	if bmLeft != (m >= n) {
		uVecs, vVecs = other, bm
	}
	for j := range cols {
		r := int(rank[j])
		copy(vho[r*n:(r+1)*n], vVecs[j*n:(j+1)*n])
	}
	columnsInto(uo, uVecs, m, k, rank, byRank)
	if unit != unit {
		cpu.Fill(uo, nan)
		cpu.Fill(vho, nan)
	}
	io.u.At(b*m*k).Store(0, uo)
	io.vh.At(b*k*n).Store(0, vho)
	return info
}

// columnsInto writes vector j of vecs (m long each, one after another) as
// column rank[j] of the row-major m x k dst: eight columns at a time
// (cpu.Interleave8, no bounds check a float), the last k%8 one float at a
// time. byRank is k floats of scratch.
func columnsInto(dst, vecs []float32, m, k int, rank, byRank []float32) {
	for j, r := range rank[:k] {
		byRank[int(r)] = float32(j)
	}
	vec := func(r int) []float32 { j := int(byRank[r]); return vecs[j*m : (j+1)*m] }
	g := 0
	for ; g+8 <= k; g += 8 {
		var group [8][]float32
		for l := range group {
			group[l] = vec(g + l)
		}
		cpu.Interleave8(dst, k, g, &group, m)
	}
	for r := g; r < k; r++ {
		for i, x := range vec(r) {
			dst[i*k+r] = x
		}
	}
}

// complete replaces each column of bm (rows long, unit where its norm
// sigma passes cut) whose norm is at most cut (a zero or residue column)
// by a unit vector orthogonal
// to every column before it and every unit one: Gram-Schmidt, twice, from
// the unit vector e_i whose row i those columns fill least (its residual
// keeps at least 1/rows of its squared length). x is rows floats of
// scratch.
func complete(bm []float32, rows, cols int, sigma []float32, cut float32, x []float32) {
	k := cpu.K()
	kept := func(i, j int) bool { return i != j && (sigma[i] > cut || i < j) }
	for j := range cols {
		if sigma[j] > cut {
			continue
		}
		best, least := 0, float32(math.Inf(1))
		for e := range rows {
			var fill float32
			for i := range cols {
				if kept(i, j) {
					fill += bm[i*rows+e] * bm[i*rows+e]
				}
			}
			if fill < least {
				best, least = e, fill
			}
		}
		clear(x)
		x[best] = 1
		for range 2 {
			for i := range cols {
				if col := bm[i*rows : (i+1)*rows]; kept(i, j) {
					k.Axpy(x, col, -k.Dot(col, x))
				}
			}
		}
		norm := float32(math.Sqrt(float64(k.SumSq(x))))
		for e := range x {
			bm[j*rows+e] = x[e] / norm
		}
	}
}

// precondition multiplies B (rows x cols, column j at bm[j*rows:]) by V0,
// the eigenvectors of BᵀB, and sets v to V0 (column j at v[j*cols:]): the
// columns of B V0 are orthogonal but for V0's rounding, and the rotations
// then take two sweeps (the second rotating nothing past the tolerance)
// where B itself takes 7 to 11. It returns false, B and v untouched, where
// the eigendecomposition did not converge.
func precondition(bm []float32, rows, cols int, v []float32, t *tridiag.Solver, sc *cpu.Scratch) bool {
	k, g := cpu.K(), sc.Buf(bufGram, cols*cols)
	for p := range cols {
		x := bm[p*rows : (p+1)*rows]
		for q := p; q < cols; q++ {
			d := k.Dot(x, bm[q*rows:(q+1)*rows])
			g[p*cols+q], g[q*cols+p] = d, d
		}
	}
	if _, info := t.Decompose(g, true); info != 0 {
		return false
	}
	copy(v, g) // g's rows are V0's columns
	out := sc.Buf(bufProduct, rows*cols)
	clear(out)
	for j := range cols {
		col := out[j*rows : (j+1)*rows]
		for i, x := range g[j*cols : (j+1)*cols] {
			k.Axpy(col, bm[i*rows:(i+1)*rows], x)
		}
	}
	copy(bm, out)
	return true
}

// jacobi is SVDLanes' rotations on one matrix's B (rows x cols, column j at
// bm[j*rows:]), applied to v too (cols x cols, column j at v[j*cols:]: the
// identity or precondition's V0); norms is cols floats of scratch (the
// columns' squared norms, formed again after each rotation). It returns 0,
// or 1 where B still rotated by more than the tolerance and
// simd.SVDStopSin in sweep MaxSweeps.
func jacobi(bm []float32, rows, cols int, v []float32, norms []float32) int32 {
	k, tol := cpu.K(), tolerance(rows)
	stop := max(tol, simd.SVDStopSin)
	abs := func(x float32) float32 { return float32(math.Abs(float64(x))) }
	sqrt := func(x float32) float32 { return float32(math.Sqrt(float64(x))) }
	col := func(j int) []float32 { return bm[j*rows : (j+1)*rows] }
	var frobenius2 float64
	for j := range cols {
		norms[j] = k.SumSq(col(j))
		frobenius2 += float64(norms[j])
	}
	residue := frozen(float32(frobenius2), tol)
	for range MaxSweeps {
		rotated := false
		for p := 0; p < cols-1; p++ {
			x := col(p)
			for q := p + 1; q < cols; q++ {
				y := col(q)
				alpha, beta, gamma := norms[p], norms[q], k.Dot(x, y)
				if !(abs(gamma) > tol*sqrt(alpha)*sqrt(beta)) || alpha <= residue || beta <= residue {
					continue
				}
				zeta := 0.5 * (beta - alpha) / gamma
				t := 1 / (abs(zeta) + sqrt(zeta*zeta+1))
				if zeta < 0 {
					t = -t
				}
				if t == 0 {
					continue
				}
				c := 1 / sqrt(t*t+1)
				s := t * c
				tau := s / (1 + c)
				rotated = rotated || abs(s) > stop // smaller ones still rotate, and end the sweeps
				k.JacobiRot(x, y, s, tau)
				k.JacobiRot(v[p*cols:(p+1)*cols], v[q*cols:(q+1)*cols], s, tau)
				// from the new entries: alpha - t gamma cancels for nearly
				// parallel columns
				norms[p], norms[q] = k.SumSq(x), k.SumSq(y)
			}
		}
		if !rotated {
			return 0
		}
	}
	return 1
}
