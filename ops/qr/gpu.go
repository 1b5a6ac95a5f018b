package qr

import (
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// The GPU schedule of a factorization, shared by the CUDA and Metal
// backends: which kernels run in what order over which parts of the
// workspace. Each backend gives it a launcher and its device's facts
// (multiprocessors or cores, whether a panel's blocks may wait for each
// other, the most dynamic shared memory).

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

// device is what the schedule needs to know of a GPU.
type device struct {
	// sms is its multiprocessors (or cores): how many blocks fill it.
	sms int
	// waits reports whether blocks of one launch may wait for each other
	// (a cooperative launch on CUDA; never on Metal, where a panel runs one
	// block a matrix).
	waits bool
	// maxShared is the most dynamic shared memory a block may have.
	maxShared int
}

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

func layoutFor(s shapes, withQ bool, d device) gpuLayout {
	l := gpuLayout{panels: (s.k + panelWidth - 1) / panelWidth, ldw: s.n}
	b, m, n, qc := int64(s.batch), int64(s.m), int64(s.n), int64(s.qOut(withQ))
	l.ldw = max(s.n, s.qOut(withQ))
	// Panels: one block per matrix when the batch alone fills half the
	// GPU, else blocks of about panelRows rows, up to two per
	// multiprocessor over the batch (all of a group must be resident at
	// once). Measured on an H100: 100x512x512 9 ms with one block per
	// matrix, 13 ms with two.
	l.groups = 1
	if d.waits && s.batch < d.sms/2 {
		l.groups = max(1, min((s.m+panelRows-1)/panelRows, 2*d.sms/s.batch))
	}
	// V^T C: split over rows until the batch's blocks fill the GPU.
	l.splits = max(1, min(16, (4*d.sms+s.batch-1)/s.batch))
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

// colsKernel is the qr_cols kernel for s (one block a matrix, a thread a
// column, 32, 64 or 128 rows of a column in registers) and its dynamic
// shared memory (the reflectors, their taus and r's diagonal), or "" when
// the matrices are too large for it on d.
func (s shapes) colsKernel(withQ bool, d device) (string, int) {
	if max(s.m, s.n, s.qOut(withQ)) > smallMax {
		return "", 0
	}
	rows, name := 32, "qr_cols32"
	if s.m > 64 {
		rows, name = 128, "qr_cols128"
	} else if s.m > 32 {
		rows, name = 64, "qr_cols64"
	}
	shared := (rows + 2) * s.k * 4
	if shared > d.maxShared {
		return "", 0
	}
	return name, shared
}

// gpuWorkspaceBytes is what a call needs on d: nothing where qr_cols takes
// the matrices, the blocked path's work otherwise.
func gpuWorkspaceBytes(s shapes, mode int32, d device) int64 {
	if name, _ := s.colsKernel(mode != ROnly, d); s.batch == 0 || name != "" {
		return 0
	}
	return layoutFor(s, mode != ROnly, d).total * 4
}

// arg is one kernel argument: bytes [at, at+n) of a view (a whole view
// where n < 0; none where view is nil), or a scalar.
type arg struct {
	view  *core.View
	at, n int64
	value int64
	wide  bool // a 64-bit scalar
}

// none is a null buffer argument.
var none = arg{n: -1}

func whole(v *core.View) arg               { return arg{view: v, n: -1} }
func i32(v int) arg                        { return arg{value: int64(v)} }
func i64(v int64) arg                      { return arg{value: v, wide: true} }
func (a arg) isBuffer() bool               { return a.view != nil || a.n != 0 }
func part(ws *core.View, lo, hi int64) arg { return arg{view: ws, at: lo * 4, n: (hi - lo) * 4} }

// launcher puts one kernel on the device: grid blocks of block threads,
// shared bytes of dynamic shared memory; cooperative where its blocks wait
// for each other.
type launcher func(kernel string, grid, block, shared int, cooperative bool, args ...arg) error

// gpuQR runs the factorization on d through launch.
func gpuQR(s shapes, av, qv, rv, ws *core.View, d device, launch launcher) error {
	dt := av.DType
	if err := dialect.Fit32("a's batch and matrix sizes", s.batch, s.m, s.n, s.batch*s.m); err != nil {
		return err
	}
	withQ := qv != nil
	qc := s.qOut(withQ)
	m, n := i32(s.m), i32(s.n)
	q := none
	if withQ {
		q = whole(qv)
	}
	if name, shared := s.colsKernel(withQ, d); name != "" {
		threads := max(32, (max(s.n, qc)+31)/32*32)
		return launch(dialect.Kernel(name, dt), s.batch, threads, shared, false, whole(av), q, whole(rv), m, n, i32(qc),
			i32(s.rRows))
	}
	l := layoutFor(s, withQ, d)
	w, t, y, prod := part(ws, 0, l.qw), part(ws, l.t, l.y), part(ws, l.y, l.prod), part(ws, l.prod, l.part)
	pt, counters, qw := part(ws, l.part, l.counters), part(ws, l.counters, l.total), none
	if withQ {
		qw = part(ws, l.qw, l.t)
	}
	elems := s.batch * s.m * max(s.n, qc)
	spread := min((elems+255)/256, 8*d.sms)
	if err := launch(dialect.Kernel("qr_load", dt), spread, 256, 0, false, whole(av), w, qw, counters, i32(s.batch), m, n,
		i32(qc)); err != nil {
		return err
	}
	ldw := i32(l.ldw)
	// apply runs I - V op(T) V^T of the panel at k0 over columns c0.. of c.
	apply := func(c arg, cstride int64, k0, jb, c0, cols int, trans bool) error {
		if cols <= 0 {
			return nil
		}
		tr := 0
		if trans {
			tr = 1
		}
		tiles := (cols + 127) / 128 // qr_vtw's columns per block
		splits := max(1, min(l.splits, (4*d.sms+s.batch*tiles-1)/(s.batch*tiles), (s.m-k0+31)/32))
		k, j, c0a, nc := i32(k0), i32(jb), i32(c0), i32(cols)
		err := launch("qr_vtw", s.batch*splits*tiles, 256, 0, false, w, c, y, m, n, i64(cstride), k, j, c0a, nc,
			i32(splits), ldw)
		if err == nil {
			err = launch("qr_wsum", s.batch*((cols+31)/32), 256, 0, false, y, t, prod, k, j, c0a, nc, i32(splits),
				i32(l.panels), ldw, i32(tr))
		}
		if err != nil {
			return err
		}
		blocks := s.batch * ((s.m - k0 + 63) / 64) * ((cols + 63) / 64)
		return launch("qr_update", blocks, 256, 0, false, w, prod, c, m, n, i64(cstride), k, j, c0a, nc, ldw)
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
		err := launch(panel, s.batch*groups, panelThreads, 0, groups > 1, w, t, pt, counters, i32(arrivals), m, n,
			i32(k0), i32(jb), i32(l.panels), i32(groups))
		if err != nil {
			return err
		}
		if groups > 1 {
			arrivals += (jb + 1) * groups // qr_panel's exchanges: the scale, then one per column
		}
		if err := apply(w, mn, k0, jb, k0+jb, s.n-k0-jb, true); err != nil {
			return err
		}
	}
	if withQ {
		for p := l.panels - 1; p >= 0; p-- {
			k0 := p * panelWidth
			if err := apply(qw, int64(s.m)*int64(qc), k0, min(panelWidth, s.k-k0), k0, qc-k0, false); err != nil {
				return err
			}
		}
	}
	return launch(dialect.Kernel("qr_store", dt), spread, 256, 0, false, w, qw, q, whole(rv), i32(s.batch), m, n, i32(qc),
		i32(s.rRows))
}
