package cholesky

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
)

// The CPU kernel: batches of matrices a vector's width at a time, one per
// lane (CholeskyLanes), where the ISA has it and they are small enough for
// the interleaved copies to stay in cache; otherwise one matrix per worker
// at a time, row by row (Cholesky–Banachiewicz: each entry one dot product
// of two rows' prefixes, both contiguous). float32 in the worker's scratch.
func init() { factor.Register(core.DeviceCPU, choleskyCPU) }

// maxLaneOrder bounds the matrices factored a vector's width at a time (n²
// floats a lane: at 128, 1 MB of interleaved matrices with AVX-512, still
// 2.3x faster than one matrix per worker).
const maxLaneOrder = 128

// Scratch buffer slots: the matrices being factored (a's float32 copies,
// where 16-bit), the identity that pads a batch's last group, the
// interleaved matrices.
const (
	bufW = iota
	bufEye
	bufLanes
)

func choleskyCPU(s shapes, av, lv, iv *core.View, _ unsafe.Pointer) error {
	n, infos := s.n, unsafe.Slice((*int32)(iv.Base), s.batch)
	if k := cpu.K(); k.CholeskyLanes != nil && s.batch >= 2 && n <= maxLaneOrder {
		lanes := k.Lanes
		cpu.Parallel((s.batch+lanes-1)/lanes, 1, func(lo, hi int, sc *cpu.Scratch) {
			for g := lo; g < hi; g++ {
				factorLanes(s, g*lanes, lanes, av, lv, infos, sc)
			}
		})
		return nil
	}
	cpu.Parallel(s.batch, max(1, 4096/max(n*n*n, 1)), func(lo, hi int, sc *cpu.Scratch) {
		for b := lo; b < hi; b++ {
			w := load(s, av, b, sc.Buf(bufW, n*n))
			infos[b] = int32(factorLower(w, n))
			store(s, lv, b, w)
		}
	})
	return nil
}

// factorLanes factors matrices [first, first+lanes) together, one per
// vector lane (a batch's last group pads with identity matrices): they are
// interleaved straight from a (converted where 16-bit) and deinterleaved
// straight into l, the triangles swapped and cleared in the interleaved
// form.
func factorLanes(s shapes, first, lanes int, av, lv *core.View, infos []int32, sc *cpu.Scratch) {
	n, count := s.n, min(lanes, s.batch-first)
	nn := n * n
	bufs := sc.Buf(bufW, nn*lanes)
	var mats [cpu.MaxLanes][]float32
	for l := range lanes {
		if l < count {
			mats[l] = cpu.TensorSpan(av).At((first+l)*nn).Load(0, bufs[l*nn:(l+1)*nn])
			continue
		}
		mats[l] = cpu.Eye(sc.Buf(bufEye, nn), n, n, n)
	}
	a := sc.Buf(bufLanes, nn*lanes)
	cpu.Interleave(a, mats[:lanes], nn)
	if s.upper {
		transposeLanes(a, n, lanes)
	}
	var info [cpu.MaxLanes]int32
	cpu.K().CholeskyLanes(a, n, info[:lanes])
	for i := range n {
		clear(a[(i*n+i+1)*lanes : (i+1)*n*lanes])
	}
	if s.upper {
		transposeLanes(a, n, lanes)
	}
	ls := cpu.TensorSpan(lv)
	for l := range count {
		mats[l] = ls.At((first+l)*nn).Out(0, bufs[l*nn:(l+1)*nn])
	}
	cpu.Deinterleave(mats[:count], a, nn, lanes)
	for l := range count {
		ls.At((first+l)*nn).Store(0, mats[l])
		infos[first+l] = info[l]
	}
}

// transposeLanes transposes every matrix of the interleaved n x n a.
func transposeLanes(a []float32, n, lanes int) {
	var t [cpu.MaxLanes]float32
	for i := range n {
		for j := range i {
			x, y := a[(i*n+j)*lanes:(i*n+j+1)*lanes], a[(j*n+i)*lanes:(j*n+i+1)*lanes]
			copy(t[:], x)
			copy(x, y)
			copy(y, t[:lanes])
		}
	}
}

// load copies matrix b of a into w as float32 (a 16-bit one is converted
// into w itself, a float32 one copied from a), its upper triangle
// transposed into the lower one where s.upper.
func load(s shapes, av *core.View, b int, w []float32) []float32 {
	n := s.n
	copy(w, cpu.TensorSpan(av).At(b*n*n).Load(0, w))
	if s.upper {
		transpose(w, n)
	}
	return w
}

// store writes the lower factor w as matrix b of l (transposed where
// s.upper).
func store(s shapes, lv *core.View, b int, w []float32) {
	if s.upper {
		transpose(w, s.n)
	}
	cpu.TensorSpan(lv).At(b*s.n*s.n).Store(0, w)
}

// factorLower overwrites the lower triangle of the n x n matrix w with its
// Cholesky factor and zeroes the upper one; it returns LAPACK's info.
func factorLower(w []float32, n int) int {
	info := 0
	for i := 0; i < n && info == 0; i++ {
		ri := w[i*n : i*n+i+1]
		for j := range i {
			rj := w[j*n : j*n+j]
			ri[j] = (ri[j] - dot(ri[:j], rj)) / w[j*n+j]
		}
		d := ri[i] - dot(ri[:i], ri[:i])
		if !(d > 0) { // not positive, or NaN
			info = i + 1
			break
		}
		ri[i] = float32(math.Sqrt(float64(d)))
	}
	for i := range n {
		clear(w[i*n+i+1 : i*n+n])
	}
	return info
}

// dot is Σ a[k]·b[k] over four running sums.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(a); k += 4 {
		s0 += a[k] * b[k]
		s1 += a[k+1] * b[k+1]
		s2 += a[k+2] * b[k+2]
		s3 += a[k+3] * b[k+3]
	}
	for ; k < len(a); k++ {
		s0 += a[k] * b[k]
	}
	return (s0 + s1) + (s2 + s3)
}

// transpose transposes the n x n matrix w in place.
func transpose(w []float32, n int) {
	for i := range n {
		for j := range i {
			w[i*n+j], w[j*n+i] = w[j*n+i], w[i*n+j]
		}
	}
}
