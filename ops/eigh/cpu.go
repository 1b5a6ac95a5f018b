package eigh

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
)

// The CPU kernel: batches of matrices a vector's width at a time, one per
// lane (EighLanes), where the ISA has it; otherwise one matrix per worker
// at a time (jacobi, the same rotations one matrix at a time). Either way
// each matrix is a full symmetric float32 copy in the worker's scratch.
func init() { decompose.Register(core.DeviceCPU, eighCPU) }

// maxLaneOrder bounds the matrices diagonalized a vector's width at a time
// (at 128, 2 MB of interleaved matrix and vectors with AVX-512).
const maxLaneOrder = 128

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
	if k := cpu.K(); k.EighLanes != nil && s.batch >= 2 && n <= maxLaneOrder {
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
		order := make([]int, n)
		for b := lo; b < hi; b++ {
			a, finite := io.load(b, sc.Buf(bufA, n*n))
			var v []float32
			if s.vectors {
				v = sc.Buf(bufV, n*n)
			}
			infos[b] = jacobi(a, n, v)
			infos[b] = io.store(b, a, v, finite, infos[b], order, sc)
		}
	})
	return nil
}

// matrixIO moves matrices between the tensors and float32 copies.
type matrixIO struct {
	s       shapes
	a, w, v cpu.Span
}

// load copies matrix b of a into m as float32, its upper triangle (what
// the rotations read) from the triangle s.upper names, and says whether
// every entry of that triangle is finite. The lower triangle is never read.
func (io matrixIO) load(b int, m []float32) ([]float32, bool) {
	n := io.s.n
	copy(m, io.a.At(b*n*n).Load(0, m))
	var zero float32
	for i := range n {
		if !io.s.upper {
			for j := i + 1; j < n; j++ {
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
		infos[first+l] = io.store(first+l, mats[l], vecs[l], finite[l], info[l], order, sc)
	}
}

// store writes matrix b's eigenvalues (m's diagonal) in ascending order
// (NaN last; ties in the diagonal's order) to w, and v's columns in that
// order to v, and returns its info: the rotations' (converged, 0, or not),
// or 1 where A was not finite, whose w and v are NaN.
func (io matrixIO) store(b int, m, v []float32, finite bool, info int32, order []int, sc *cpu.Scratch) int32 {
	n := io.s.n
	if !finite {
		info = 1
		cpu.Fill(m, float32(math.NaN()))
		if v != nil {
			cpu.Fill(v, float32(math.NaN()))
		}
	}
	for i := range n {
		order[i] = i
		for k := i; k > 0 && before(m[order[k]*(n+1)], m[order[k-1]*(n+1)]); k-- {
			order[k], order[k-1] = order[k-1], order[k]
		}
	}
	w := io.w.At(b*n).Out(0, sc.Buf(bufW, n))
	for k, i := range order {
		w[k] = m[i*(n+1)]
	}
	io.w.At(b*n).Store(0, w)
	if v == nil {
		return info
	}
	out := io.v.At(b*n*n).Out(0, sc.Buf(bufOut, n*n))
	for r := range n {
		for k, i := range order {
			out[r*n+k] = v[r*n+i]
		}
	}
	io.v.At(b*n*n).Store(0, out)
	return info
}

// before orders eigenvalues: ascending, NaN after every number.
func before(x, y float32) bool { return x < y || (y != y && x == x) }

// jacobi is EighLanes' rotations on one symmetric n x n matrix m (its
// upper triangle read and overwritten): its diagonal ends as the eigenvalues, v (nil for none) the eigenvectors in
// its columns. It returns 0, or 1 where m still rotated in sweep MaxSweeps.
func jacobi(m []float32, n int, v []float32) int32 {
	if v != nil {
		cpu.Eye(v, n, n, n)
	}
	abs := func(x float32) float32 { return float32(math.Abs(float64(x))) }
	for range MaxSweeps {
		rotated := false
		for p := 0; p < n-1; p++ {
			for q := p + 1; q < n; q++ {
				apq, app, aqq := m[p*n+q], m[p*n+p], m[q*n+q]
				g := 100 * abs(apq)
				if apq == 0 || (abs(app)+g == abs(app) && abs(aqq)+g == abs(aqq)) {
					m[p*n+q] = 0
					continue
				}
				rotated = true
				h := aqq - app
				var t float32
				if abs(h)+g == abs(h) {
					t = apq / h
				} else {
					theta := 0.5 * h / apq
					t = 1 / (abs(theta) + float32(math.Sqrt(float64(theta*theta+1))))
					if theta < 0 {
						t = -t
					}
				}
				c := 1 / float32(math.Sqrt(float64(t*t+1)))
				s := t * c
				for j := range p { // the upper triangle's (j, p) and (j, q)
					rotatePair(m, j*n+p, j*n+q, c, s)
				}
				for j := p + 1; j < q; j++ {
					rotatePair(m, p*n+j, j*n+q, c, s)
				}
				for j := q + 1; j < n; j++ {
					rotatePair(m, p*n+j, q*n+j, c, s)
				}
				if v != nil {
					for r := range n {
						rotatePair(v, r*n+p, r*n+q, c, s)
					}
				}
				m[p*n+p], m[q*n+q] = app-t*apq, aqq+t*apq
				m[p*n+q] = 0
			}
		}
		if !rotated {
			return 0
		}
	}
	return 1
}

func rotatePair(m []float32, i, j int, c, s float32) {
	x, y := m[i], m[j]
	m[i], m[j] = c*x-s*y, s*x+c*y
}
