package qr

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
)

// The CPU kernel: one matrix per worker, the reflector applications
// vectorized; batches of small matrices a vector's width at a time
// (QRLanes); those past blockedMin blocked (blocked.go). No workspace: each worker keeps its matrix in its
// own scratch.
func init() {
	factorize.Register(core.DeviceCPU, qrCPU)
	workspaceSize.Register(core.DeviceCPU, func(shapes, int32, int) (int64, error) { return 0, nil })
}

func qrCPU(s shapes, av, qv, rv, _ *core.View, _ unsafe.Pointer) error {
	if k := cpu.K(); k.QRLanes != nil && s.batch >= 2 && max(s.m, s.n) <= maxLaneSize {
		lanes := k.Lanes
		cpu.Parallel((s.batch+lanes-1)/lanes, 1, func(lo, hi int, sc *cpu.Scratch) {
			for g := lo; g < hi; g++ {
				factorLanes(s, g*lanes, lanes, av, qv, rv, sc)
			}
		})
		return nil
	}
	blocked := s.k > blockedMin
	cpu.Parallel(s.batch, 1, func(lo, hi int, sc *cpu.Scratch) {
		for b := lo; b < hi; b++ {
			if blocked {
				// one matrix at a time splits its updates across the workers
				factorBlocked(s, b, av, qv, rv, sc, s.batch < cpu.Threads())
			} else {
				factor(s, b, av, qv, rv, sc)
			}
		}
	})
	return nil
}

// maxLaneSize bounds the matrices factored a vector's width at a time: the
// interleaved copies (m*n*lanes floats) must stay in the worker's cache, and
// their column walks stride m*lanes floats (measured: 32 wide 3x faster than
// LAPACK through PyTorch, 128 wide slower than one matrix per worker).
const maxLaneSize = 64

// factorLanes factors matrices [first, first+lanes) together, one per
// vector lane (a batch's last group pads with zero matrices). Matrices move
// in and out of the interleaved layout a block of elements at a time, so the
// part of a being filled or read stays in L1 while every lane's matrix
// streams (measured: the element-by-element version spent a third of the
// 2000x32x32 time there).
func factorLanes(s shapes, first, lanes int, av, qv, rv *core.View, sc *cpu.Scratch) {
	m, n, qc := s.m, s.n, s.qCols
	size := max(m*n, m*qc, s.rRows*n)
	bufs := sc.Buf(bufW, size*lanes) // per lane: the converted input, then the outputs before rounding
	a := sc.Buf(bufA, m*n*lanes)
	count := min(lanes, s.batch-first)
	var mats [cpu.MaxLanes][]float32
	for l := range lanes {
		buf := bufs[l*size : l*size+m*n]
		if l < count {
			mats[l] = cpu.TensorSpan(av).At((first+l)*m*n).Load(0, buf)
		} else {
			clear(buf)
			mats[l] = buf
		}
	}
	cpu.Interleave(a, mats[:lanes], m*n)
	var q []float32
	if qv != nil {
		q = sc.Buf(bufQ, m*qc*lanes)
	}
	cpu.K().QRLanes(a, m, n, q, qc, sc.Buf(bufTau, s.k*lanes))
	rn := s.rRows * n
	rs := cpu.TensorSpan(rv)
	for l := range count {
		mats[l] = rs.At((first+l)*rn).Out(0, bufs[l*size:l*size+rn])
	}
	cpu.Deinterleave(mats[:count], a, rn, lanes) // r's rows are a's first rows
	for l := range count {
		r := mats[l]
		for i := range s.rRows {
			clear(r[i*n : i*n+min(i, n)]) // below the diagonal (all of rows past k)
		}
		rs.At((first+l)*rn).Store(0, r)
	}
	if qv == nil {
		return
	}
	qs := cpu.TensorSpan(qv)
	for l := range count {
		mats[l] = qs.At((first+l)*m*qc).Out(0, bufs[l*size:l*size+m*qc])
	}
	cpu.Deinterleave(mats[:count], q, m*qc, lanes)
	for l := range count {
		qs.At((first+l)*m*qc).Store(0, mats[l])
	}
}

// Scratch slots.
const (
	bufA = iota
	bufV
	bufW
	bufTau
	bufQ
	bufR
)

// factor computes matrix b: Householder vectors below the diagonal of a
// float32 copy (LAPACK's geqr2), then q by applying them backwards to the
// identity (org2r), then the outputs in the dtype.
func factor(s shapes, b int, av, qv, rv *core.View, sc *cpu.Scratch) {
	k := cpu.K()
	m, n := s.m, s.n
	a := sc.Buf(bufA, m*n)
	copy(a, cpu.TensorSpan(av).At(b*m*n).Load(0, a))
	v := sc.Buf(bufV, m+4) // padded for the vector broadcasts
	w := sc.Buf(bufW, max(m, n))
	tau := sc.Buf(bufTau, s.k)
	geqr2(a, m, n, 0, s.k, n, tau, v, w)
	storeR(s, b, a, n, rv, sc)
	if qv == nil {
		return
	}
	qc := s.qCols
	qm := cpu.Eye(sc.Buf(bufQ, m*qc), m, qc, qc)
	for j := s.k - 1; j >= 0; j-- {
		if tau[j] != 0 {
			column(a, m, n, j, v)
			k.Reflect(qm[j*qc+j:], qc, m-j, qc-j, v, tau[j], w)
		}
	}
	cpu.TensorSpan(qv).At(b*m*qc).Store(0, qm)
}

// geqr2 factors columns [j0, j1) of the row-major m x n matrix a one
// reflector at a time (LAPACK's geqr2), applying each to the columns after
// it up to end; tau[j] receives reflector j's tau. v and w are Reflect's
// scratch.
func geqr2(a []float32, m, n, j0, j1, end int, tau, v, w []float32) {
	k := cpu.K()
	for j := j0; j < j1; j++ {
		tau[j] = householder(a[j*n+j:], n, m-j)
		if tau[j] != 0 && j+1 < end {
			column(a, m, n, j, v)
			k.Reflect(a[j*n+j+1:], n, m-j, end-j-1, v, tau[j], w)
		}
	}
}

// storeR writes matrix b's r from the factored a (row stride lda; its
// upper triangle, zeros below) in r's dtype.
func storeR(s shapes, b int, a []float32, lda int, rv *core.View, sc *cpu.Scratch) {
	n := s.n
	rr := sc.Buf(bufR, s.rRows*n)
	clear(rr)
	for i := range min(s.rRows, s.k) {
		copy(rr[i*n+i:(i+1)*n], a[i*lda+i:i*lda+n])
	}
	cpu.TensorSpan(rv).At(b*s.rRows*n).Store(0, rr)
}

// householder makes the reflector that zeroes the column x[0], x[stride],
// ... (n entries) below its first (LAPACK's slarfg): it leaves beta in
// x[0], the vector's tail below it, and returns tau (0: the column is
// already zero, no reflection). The norm is taken in float64, so columns of
// 1e-30 or 1e30 neither underflow nor overflow.
func householder(x []float32, stride, n int) float32 {
	alpha := float64(x[0])
	var ss float64
	for i := 1; i < n; i++ {
		v := float64(x[i*stride])
		ss += v * v
	}
	if ss == 0 {
		return 0
	}
	beta := -math.Copysign(math.Hypot(alpha, math.Sqrt(ss)), alpha)
	scale := 1 / (alpha - beta)
	for i := 1; i < n; i++ {
		x[i*stride] = float32(float64(x[i*stride]) * scale)
	}
	x[0] = float32(beta)
	return float32((beta - alpha) / beta)
}

// column gathers reflector j (1, then the tail stored below the diagonal)
// into v.
func column(a []float32, m, n, j int, v []float32) {
	v[0] = 1
	for i := 1; i < m-j; i++ {
		v[i] = a[(j+i)*n+j]
	}
}
