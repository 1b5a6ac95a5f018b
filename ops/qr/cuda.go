package qr

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/internal/core"
)

//go:embed qr.cu
var kernels string

func init() {
	cuda.Register(kernels)
	factorize.Register(core.DeviceCUDA, qrCUDA)
	workspaceSize.Register(core.DeviceCUDA, cudaWorkspaceBytes)
}

const (
	// smallMax bounds the matrices qr_cols factors a block each (rows,
	// columns and q's columns: a thread a column).
	smallMax = 128
	// panelWidth is qr.cu's QR_NB: the columns of one blocked step.
	panelWidth = 32
	// panelRows is about the rows each block of a panel group owns
	// (measured on an H100 for 4096x4096 and 8192x1024: 256 beats 128, 512
	// and 1024).
	panelRows = 256
	// panelThreads is qr_panel's block size (any register count allows
	// it: 256 threads of 255 registers fit a multiprocessor).
	panelThreads = 256
)

// gpuLayout is where the blocked path keeps its work in the workspace, in
// floats: the matrices (column-major), q being formed, each panel's T, the
// split products V^T C and their sum W, the panel groups' exchange slots
// and barrier counters.
type gpuLayout struct {
	w, qw, t, y, prod, part, counters, total int64
	panels, ldw, groups, splits              int
}

// qrSlot is qr.cu's QR_SLOT (floats per block and column).
const qrSlot = 2*panelWidth + 2

func layoutFor(s shapes, withQ bool, sms int) gpuLayout {
	l := gpuLayout{panels: (s.k + panelWidth - 1) / panelWidth, ldw: s.n}
	b, m, n, qc := int64(s.batch), int64(s.m), int64(s.n), int64(s.qOut(withQ))
	l.ldw = max(s.n, s.qOut(withQ))
	// Panels: one block per matrix when the batch alone fills half the
	// GPU, else blocks of about panelRows rows, up to two per
	// multiprocessor over the batch (all of a group must be resident at
	// once). Measured on an H100: 100x512x512 9 ms with one block per
	// matrix, 13 ms with two.
	l.groups = 1
	if s.batch < sms/2 {
		l.groups = max(1, min((s.m+panelRows-1)/panelRows, 2*sms/s.batch))
	}
	// V^T C: split over rows until the batch's blocks fill the GPU.
	l.splits = max(1, min(16, (4*sms+s.batch-1)/s.batch))
	l.qw = b * m * n
	l.t = l.qw + b*m*qc
	l.y = l.t + b*int64(l.panels)*panelWidth*panelWidth
	l.prod = l.y + b*int64(l.splits)*panelWidth*int64(l.ldw)
	l.part = l.prod + b*panelWidth*int64(l.ldw)
	l.counters = l.part + b*2*int64(l.groups)*qrSlot
	l.total = l.counters + b
	return l
}

// qOut is the columns of the q the call writes (0 without q).
func (s shapes) qOut(withQ bool) int {
	if withQ {
		return s.qCols
	}
	return 0
}

// small reports whether qr_cols takes these matrices.
func (s shapes) small(withQ bool) bool { return max(s.m, s.n, s.qOut(withQ)) <= smallMax }

// cudaWorkspaceBytes is what a CUDA call on dev needs: nothing for small
// matrices, the blocked path's work otherwise.
func cudaWorkspaceBytes(s shapes, mode int32, dev int) (int64, error) {
	if s.batch == 0 || s.small(mode != ROnly) {
		return 0, nil
	}
	sms, err := cuda.SMs(dev)
	return layoutFor(s, mode != ROnly, sms).total * 4, cuda.Backend(err)
}

// qrCUDA factors on the caller's stream.
func qrCUDA(s shapes, av, qv, rv, ws *core.View, enc unsafe.Pointer) error {
	dev, dt := int(av.DeviceID), av.DType
	if err := cuda.Fit32("a's batch and matrix sizes", s.batch, s.m, s.n, s.batch*s.m); err != nil {
		return err
	}
	withQ := qv != nil
	qc := s.qOut(withQ)
	launch := func(name string, grid, block int, args ...uint64) error {
		return cuda.Launch(dev, enc, name, grid, block, args...)
	}
	m, n := cuda.I32(s.m), cuda.I32(s.n)
	if s.small(withQ) {
		// qr_cols keeps 32, 64 or 128 rows of a column in registers
		rows, name := 32, "qr_cols32"
		if s.m > 64 {
			rows, name = 128, "qr_cols128"
		} else if s.m > 32 {
			rows, name = 64, "qr_cols64"
		}
		shared := (rows + 2) * s.k * 4 // the reflectors, their taus and r's diagonal
		threads := max(32, (max(s.n, qc)+31)/32*32)
		name = cuda.Kernel(name, dt)
		return cuda.Backend(cuda.LaunchShared(dev, enc, name, s.batch, threads, shared,
			cuda.Ptr(av.Base), cuda.View(qv), cuda.Ptr(rv.Base), m, n, cuda.I32(qc), cuda.I32(s.rRows)))
	}
	sms, err := cuda.SMs(dev)
	if err != nil {
		return cuda.Backend(err)
	}
	l := layoutFor(s, withQ, sms)
	at := func(off int64) uint64 { return cuda.Ptr(unsafe.Add(ws.Base, off*4)) }
	w, qw, t, y, prod, part, counters := at(0), at(l.qw), at(l.t), at(l.y), at(l.prod), at(l.part), at(l.counters)
	if !withQ {
		qw = 0
	}
	elems := s.batch * s.m * max(s.n, qc)
	spread := min((elems+255)/256, 8*sms)
	if err := launch(cuda.Kernel("qr_load", dt), spread, 256, cuda.Ptr(av.Base), w, qw, counters, cuda.I32(s.batch), m, n, cuda.I32(qc)); err != nil {
		return cuda.Backend(err)
	}
	ldw := cuda.I32(l.ldw)
	// apply runs I - V op(T) V^T of the panel at k0 over columns c0.. of c.
	apply := func(c uint64, cstride int64, k0, jb, c0, cols int, trans bool) error {
		if cols <= 0 {
			return nil
		}
		tr := 0
		if trans {
			tr = 1
		}
		tiles := (cols + 127) / 128 // qr_vtw's columns per block
		splits := max(1, min(l.splits, (4*sms+s.batch*tiles-1)/(s.batch*tiles), (s.m-k0+31)/32))
		span := []uint64{cuda.I32(k0), cuda.I32(jb), cuda.I32(c0), cuda.I32(cols)}
		err := launch("qr_vtw", s.batch*splits*tiles, 256, append([]uint64{w, c, y, m, n, cuda.I64(cstride)},
			append(span, cuda.I32(splits), ldw)...)...)
		if err == nil {
			err = launch("qr_wsum", s.batch*((cols+31)/32), 256, append([]uint64{y, t, prod}, append(span, cuda.I32(splits),
				cuda.I32(l.panels), ldw, cuda.I32(tr))...)...)
		}
		if err != nil {
			return err
		}
		blocks := s.batch * ((s.m - k0 + 63) / 64) * ((cols + 63) / 64)
		return launch("qr_update", blocks, 256, append([]uint64{w, prod, c, m, n, cuda.I64(cstride)}, append(span, ldw)...)...)
	}
	mn := int64(s.m) * int64(s.n)
	arrivals := 0
	for k0 := 0; k0 < s.k; k0 += panelWidth {
		jb := min(panelWidth, s.k-k0)
		groups := max(1, min(l.groups, (s.m-k0+panelRows-1)/panelRows))
		panel := "qr_panel"
		if (s.m-k0+groups-1)/groups <= panelThreads {
			panel = "qr_panel_reg" // a row a thread at most: rows in registers
		}
		// a group's blocks wait for each other: launched cooperatively, the
		// launch fails rather than hangs should they not all fit at once
		launchPanel := cuda.Launch
		if groups > 1 {
			launchPanel = cuda.LaunchCooperative
		}
		err := launchPanel(dev, enc, panel, s.batch*groups, panelThreads, w, t, part, counters, cuda.I32(arrivals), m, n,
			cuda.I32(k0), cuda.I32(jb), cuda.I32(l.panels), cuda.I32(groups))
		if err != nil {
			return cuda.Backend(err)
		}
		if groups > 1 {
			arrivals += (jb + 1) * groups // qr_panel's exchanges: the scale, then one per column
		}
		if err := apply(w, mn, k0, jb, k0+jb, s.n-k0-jb, true); err != nil {
			return cuda.Backend(err)
		}
	}
	if withQ {
		for p := l.panels - 1; p >= 0; p-- {
			k0 := p * panelWidth
			if err := apply(qw, int64(s.m)*int64(qc), k0, min(panelWidth, s.k-k0), k0, qc-k0, false); err != nil {
				return cuda.Backend(err)
			}
		}
	}
	return cuda.Backend(launch(cuda.Kernel("qr_store", dt), spread, 256, w, qw, cuda.View(qv), cuda.Ptr(rv.Base),
		cuda.I32(s.batch), m, n, cuda.I32(qc), cuda.I32(s.rRows)))
}
