package eigh

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
	"metalcore/ops/internal/tridiag"
)

// The CPU kernel: small matrices a vector's width at a time, one per lane
// (EighLanes, Jacobi rotations), where the ISA has it and the batch fills
// lanes; otherwise, and from order minTridiagonalOrder, one matrix per
// worker at a time by tridiagonal reduction and QL iterations
// (ops/internal/tridiag). Either way each matrix is a full symmetric float32
// copy in the worker's scratch.
func init() { decompose.Register(core.DeviceCPU, eighCPU) }

// minTridiagonalOrder is the order from which one matrix at a time by the
// tridiagonal method is faster than a vector's width of them by rotations
// (bench/linalg.md).
const minTridiagonalOrder = 32

// Scratch buffer slots: the matrices (a lanes group's, or one), their
// eigenvectors, the identity that pads a group, the interleaved matrices
// and eigenvectors, and the outputs' conversions.
const (
	bufA = iota
	bufV
	bufEye
	bufLanes
	bufLanesV
	bufW
	bufOut
)

func eighCPU(s shapes, av, wv, vv, iv *core.View, _ unsafe.Pointer) error {
	n, infos := s.n, unsafe.Slice((*int32)(iv.Base), s.batch)
	io := matrixIO{s: s, a: cpu.TensorSpan(av), w: cpu.TensorSpan(wv)}
	if s.vectors {
		io.v = cpu.TensorSpan(vv)
	}
	if k := cpu.K(); k.EighLanes != nil && s.batch >= 2 && n < minTridiagonalOrder {
		lanes := k.Lanes
		cpu.Parallel((s.batch+lanes-1)/lanes, 1, func(lo, hi int, sc *cpu.Scratch) {
			order := make([]int, n)
			for g := lo; g < hi; g++ {
				io.lanes(g*lanes, lanes, infos, order, sc)
			}
		})
		return nil
	}
	cpu.Parallel(s.batch, max(1, 4096/max(n*n*n, 1)), func(lo, hi int, sc *cpu.Scratch) {
		order, t, unset := make([]int, n), tridiag.New(n), make([]float64, n)
		for b := lo; b < hi; b++ {
			a, finite := io.load(b, sc.Buf(bufA, n*n))
			vals, info := unset, int32(0) // a matrix not finite: store writes NaN
			if finite {
				vals, info = t.Decompose(a, s.vectors)
			}
			var v []float32
			if s.vectors {
				v = a
			}
			infos[b] = io.store(b, func(i int) float32 { return float32(vals[i]) }, v, true, finite, info, order, sc)
		}
	})
	return nil
}

// matrixIO moves matrices between the tensors and float32 copies.
type matrixIO struct {
	s       shapes
	a, w, v cpu.Span
}

// load copies matrix b of a into m as float32, symmetric: both triangles
// from the one s.upper names (the rotations read the upper one, the
// tridiagonal method scans all), and says whether every entry of it is
// finite. A's other triangle is never read.
func (io matrixIO) load(b int, m []float32) ([]float32, bool) {
	n := io.s.n
	copy(m, io.a.At(b*n*n).Load(0, m))
	var zero float32
	for i := range n {
		for j := i + 1; j < n; j++ {
			if io.s.upper {
				m[j*n+i] = m[i*n+j]
			} else {
				m[i*n+j] = m[j*n+i]
			}
		}
		for _, x := range m[i*n+i : (i+1)*n] {
			zero += x * 0 // NaN once an entry is not finite
		}
	}
	return m, zero == 0
}

// lanes diagonalizes matrices [first, first+lanes) together, one per
// vector lane (a batch's last group padded with identity matrices).
func (io matrixIO) lanes(first, lanes int, infos []int32, order []int, sc *cpu.Scratch) {
	n, count := io.s.n, min(lanes, io.s.batch-first)
	nn := n * n
	bufs := sc.Buf(bufA, nn*lanes)
	var mats [cpu.MaxLanes][]float32
	var finite [cpu.MaxLanes]bool
	for l := range lanes {
		if l < count {
			mats[l], finite[l] = io.load(first+l, bufs[l*nn:(l+1)*nn])
			continue
		}
		mats[l] = cpu.Eye(sc.Buf(bufEye, nn), n, n, n)
	}
	a := sc.Buf(bufLanes, nn*lanes)
	cpu.Interleave(a, mats[:lanes], nn)
	var v []float32
	if io.s.vectors {
		v = sc.Buf(bufLanesV, nn*lanes)
	}
	var info [cpu.MaxLanes]int32
	cpu.K().EighLanes(a, n, v, MaxSweeps, info[:lanes])
	cpu.Deinterleave(mats[:count], a, nn, lanes)
	var vecs [cpu.MaxLanes][]float32
	if v != nil {
		vb := sc.Buf(bufV, nn*lanes)
		for l := range count {
			vecs[l] = vb[l*nn : (l+1)*nn]
		}
		cpu.Deinterleave(vecs[:count], v, nn, lanes)
	}
	for l := range count {
		m := mats[l]
		infos[first+l] = io.store(first+l, func(i int) float32 { return m[i*(n+1)] }, vecs[l], false, finite[l], info[l],
			order, sc)
	}
}

// store writes matrix b's eigenvalues (vals(i), i < n) in ascending order
// (NaN last; ties in their given order) to w, and the eigenvectors in v
// (each in a row of v with inRows, else in a column) in that order to v's
// columns, and returns its info: the method's (converged, 0, or not), or 1
// where A was not finite, whose w and v are NaN.
func (io matrixIO) store(b int, vals func(i int) float32, v []float32, inRows, finite bool, info int32, order []int,
	sc *cpu.Scratch) int32 {
	n := io.s.n
	w := io.w.At(b*n).Out(0, sc.Buf(bufW, n))
	for i := range n {
		w[i] = vals(i)
	}
	if !finite {
		info = 1
		cpu.Fill(w, float32(math.NaN()))
		if v != nil {
			cpu.Fill(v, float32(math.NaN()))
		}
	}
	for i := range n {
		order[i] = i
		for k := i; k > 0 && before(w[order[k]], w[order[k-1]]); k-- {
			order[k], order[k-1] = order[k-1], order[k]
		}
	}
	sorted := sc.Buf(bufOut, n)
	for k, i := range order {
		sorted[k] = w[i]
	}
	copy(w, sorted)
	io.w.At(b*n).Store(0, w)
	if v == nil {
		return info
	}
	out := io.v.At(b*n*n).Out(0, sc.Buf(bufOut, n*n))
	for r := range n {
		for k, i := range order {
			if inRows {
				out[r*n+k] = v[i*n+r]
			} else {
				out[r*n+k] = v[r*n+i]
			}
		}
	}
	io.v.At(b*n*n).Store(0, out)
	return info
}

// before orders eigenvalues: ascending, NaN after every number.
func before(x, y float32) bool { return x < y || (y != y && x == x) }
