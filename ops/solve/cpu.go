package solve

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// The CPU kernel: batches of systems a vector's width at a time, one per
// lane (SolveLanes), where the ISA has it; otherwise one system per worker
// at a time. Either way each system is its augmented matrix [A | B] as
// float32 rows in the worker's scratch, eliminated in place.
func init() { solve.Register(core.DeviceCPU, solveCPU) }

// maxLaneOrder bounds the systems solved a vector's width at a time (at
// 128, about 1 MB of interleaved matrices with AVX-512).
const maxLaneOrder = 128

// Scratch buffer slots: the augmented matrices (the lanes path: A and B
// where 16-bit or padding), one row's conversions, the interleaved A and B,
// and the row a lanes kernel exchanges.
const (
	bufW = iota
	bufRow
	bufLanes
	bufLanesB
	bufOld
)

func solveCPU(s shapes, av, bv, xv, iv *core.View, _ unsafe.Pointer) error {
	n, m := s.n, s.n+s.k
	infos := unsafe.Slice((*int32)(iv.Base), s.batch)
	io := systemIO{s, cpu.TensorSpan(av), cpu.TensorSpan(bv), cpu.TensorSpan(xv)}
	if t := cpu.K(); t.SolveLanes != nil && s.batch >= 2 && n <= maxLaneOrder {
		lanes := t.Lanes
		cpu.Parallel((s.batch+lanes-1)/lanes, 1, func(lo, hi int, sc *cpu.Scratch) {
			for g := lo; g < hi; g++ {
				io.solveLanes(g*lanes, lanes, infos, sc)
			}
		})
		return nil
	}
	cpu.Parallel(s.batch, max(1, 4096/max(n*n*m, 1)), func(lo, hi int, sc *cpu.Scratch) {
		t, w, row := cpu.K(), sc.Buf(bufW, n*m), sc.Buf(bufRow, max(n, s.k))
		for b := lo; b < hi; b++ {
			io.load(b, w, row)
			infos[b] = int32(eliminate(t, w, n, m))
			io.store(b, w, row, infos[b])
		}
	})
	return nil
}

// systemIO moves systems between the tensors and augmented float32
// matrices.
type systemIO struct {
	s          shapes
	as, bs, xs cpu.Span
}

// load writes system b's [A | B] into w (n rows of n + k), converting 16-bit
// data through row.
func (io systemIO) load(b int, w, row []float32) {
	n, k, m := io.s.n, io.s.k, io.s.n+io.s.k
	for i := range n {
		copy(w[i*m:i*m+n], io.as.At((b*n+i)*n).Load(0, row[:n]))
		copy(w[i*m+n:(i+1)*m], io.bs.At((b*n+i)*k).Load(0, row[:k]))
	}
}

// store writes the last k columns of w as system b's X, or NaN where info
// says A was singular.
func (io systemIO) store(b int, w, row []float32, info int32) {
	n, k, m := io.s.n, io.s.k, io.s.n+io.s.k
	for i := range n {
		out := io.xs.At((b*n + i) * k)
		o := out.Out(0, row[:k])
		if info != 0 {
			cpu.Fill(o, float32(math.NaN()))
		} else {
			copy(o, w[i*m+n:(i+1)*m])
		}
		out.Store(0, o)
	}
}

// solveLanes solves systems [first, first+lanes) together, one per vector
// lane (a batch's last group pads with identity systems): A and B are
// interleaved straight from a and b (converted where 16-bit), X
// deinterleaved straight into x.
func (io systemIO) solveLanes(first, lanes int, infos []int32, sc *cpu.Scratch) {
	n, k, count := io.s.n, io.s.k, min(lanes, io.s.batch-first)
	nn, nk := n*n, n*k
	bufs := sc.Buf(bufW, (nn+nk)*lanes)
	var as, bs [cpu.MaxLanes][]float32
	for l := range lanes {
		abuf, bbuf := bufs[l*(nn+nk):l*(nn+nk)+nn], bufs[l*(nn+nk)+nn:(l+1)*(nn+nk)]
		if l < count {
			as[l], bs[l] = io.as.At((first+l)*nn).Load(0, abuf), io.bs.At((first+l)*nk).Load(0, bbuf)
			continue
		}
		clear(bbuf)
		as[l], bs[l] = cpu.Eye(abuf, n, n, n), bbuf
	}
	a, b := sc.Buf(bufLanes, nn*lanes), sc.Buf(bufLanesB, nk*lanes)
	cpu.Interleave(a, as[:lanes], nn)
	cpu.Interleave(b, bs[:lanes], nk)
	var info [cpu.MaxLanes]int32
	cpu.K().SolveLanes(a, n, b, k, sc.Buf(bufOld, (n+k)*lanes), info[:lanes])
	for l := range count { // x may be b: every B was read above
		bs[l] = io.xs.At((first+l)*nk).Out(0, bufs[l*(nn+nk)+nn:(l+1)*(nn+nk)])
	}
	cpu.Deinterleave(bs[:count], b, nk, lanes)
	for l := range count {
		infos[first+l] = info[l]
		if info[l] != 0 {
			cpu.Fill(bs[l], float32(math.NaN()))
		}
		io.xs.At((first+l)*nk).Store(0, bs[l])
	}
}

// eliminate solves in place the n x m augmented matrix w = [A | B] (rows of
// m = n + k): after it, w's last k columns hold X. It returns LAPACK's
// info: 0, or j where the j-th pivot (the largest magnitude left in its
// column) is zero.
func eliminate(t *simd.Table, w []float32, n, m int) int {
	for j := range n {
		p, best := j, magnitude(w[j*m+j])
		for i := j + 1; i < n; i++ {
			if v := magnitude(w[i*m+j]); v > best {
				p, best = i, v
			}
		}
		if best == 0 {
			return j + 1
		}
		if p != j {
			rj, rp := w[j*m+j:(j+1)*m], w[p*m+j:(p+1)*m]
			for c := range rj {
				rj[c], rp[c] = rp[c], rj[c]
			}
		}
		inv, pivot := 1/w[j*m+j], w[j*m+j+1:(j+1)*m]
		for i := j + 1; i < n; i++ {
			t.Axpy(w[i*m+j+1:(i+1)*m], pivot, -w[i*m+j]*inv)
		}
	}
	for i := n - 1; i >= 0; i-- {
		x, inv := w[i*m+n:(i+1)*m], 1/w[i*m+i]
		for c := range x {
			x[c] *= inv
		}
		for r := range i {
			t.Axpy(w[r*m+n:(r+1)*m], x, -w[r*m+i])
		}
	}
	return 0
}

// magnitude is |v|, NaN counting as the largest (so that it reaches the
// solution, as the vector kernels pick it).
func magnitude(v float32) float32 {
	if v != v {
		return float32(math.Inf(1))
	}
	return math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
}
