package qr

import (
	"sync/atomic"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// Blocked Householder QR on the CPU (LAPACK's geqrf and orgqr in compact WY
// form) for matrices whose min(m, n) exceeds blockedMin. Each panel
// (cpuPanelWidth columns) is factored innerWidth columns at a time, those
// copied out by columns (contiguous) and factored there a reflector at a
// time (panelWork.factor); then the trailing columns take the panel's
// reflectors as three products on the simd panel kernels,
// W = V^T C, W' = -op(T) W, C += V W', column chunks split across the
// workers. q is formed the same way, panels applied backwards to the
// identity.
//
// The working copies are padded so that every product runs on whole
// kernel tiles: rows to a multiple of the kernel's PanelRows, the panel's
// width likewise (zero reflectors), and a row stride leaving room for the
// last column tile; the padding holds zeros, which every product keeps.
// Variables so that the tests can send small matrices through several
// panels.
var (
	blockedMin = 16
	blockWidth = 64
)

// cpuPanelWidth is the panel width for min(m, n) = k: an eighth of
// blockWidth up to midSize, where the panels' own factorization, one
// reflector at a time, is most of the work (bench/qr-tuning.md has the
// measurements).
func cpuPanelWidth(k int) int {
	if k <= midSize {
		return max(blockWidth/8, 1)
	}
	return blockWidth
}

// midSize is the largest min(m, n) of a mid-size matrix (a variable for
// the tests).
var midSize = 256

// chunkCols is the columns a worker updates at a time and rowBlock the rows
// of C one VtC call streams: W and W' (blockWidth x chunkCols each) and a
// rowBlock x chunkCols block of C stay in L2 while VtC passes over the
// block once per PanelRows reflectors.
const (
	chunkCols = 256
	rowBlock  = 256
)

// Scratch slots of the blocked path (after factor's).
const (
	bufPanels = iota + bufR + 1 // every panel's reflectors, by columns with explicit 1s and 0s
	bufT                        // every panel's T
	bufPanel                    // W and W' of one column chunk
)

// grid is a matrix's padded working layout.
type grid struct {
	rowTile, colTile int // the panel kernel's tile: rows, and columns (a multiple of)
}

func gridOf(k *simd.Table) grid { return grid{k.PanelRows, 2 * max(k.Lanes, 1)} }

func (g grid) rows(n int) int { return (n + g.rowTile - 1) / g.rowTile * g.rowTile }

// stride is the row stride of a working copy of n columns: room for the
// last tile of any column range, and whole cache lines.
func (g grid) stride(n int) int { return (n + g.colTile + 15) &^ 15 }

// factorBlocked is factor for large matrices; inner says whether to split
// the trailing updates across the workers (the batch is not already).
func factorBlocked(s shapes, b int, av, qv, rv *core.View, sc *cpu.Scratch, inner bool) {
	k := cpu.K()
	g := gridOf(k)
	m, n, nb := s.m, s.n, cpuPanelWidth(s.k)
	nbp := g.rows(nb)
	lda, height := g.stride(n), m+g.rowTile // the last panel's rows rounded up stay inside
	a := sc.Buf(bufA, height*lda)
	in := cpu.TensorSpan(av).At(b * m * n)
	for i := range m {
		row := a[i*lda : (i+1)*lda]
		copy(row, in.At(i*n).Load(0, row[:n]))
		clear(row[n:])
	}
	clear(a[m*lda:])
	panels := (s.k + nb - 1) / nb
	vs := sc.Buf(bufPanels, panels*nbp*g.rows(m))
	ts := sc.Buf(bufT, panels*nbp*nbp)
	tops := sc.Buf(bufW, nbp*nbp+innerT(g)) // this panel's -T^T; the next one's inner panels' T
	top := tops[:nbp*nbp]
	tau := sc.Buf(bufTau, s.k)
	pw := newPanelWork(k, g, nb, m, tops[nbp*nbp:], sc)
	// panel i: its reflectors v (nbp columns of g.rows(m - k0) floats) and T
	panel := func(k0 int) (v, t []float32, ldv int) {
		i := k0 / nb
		ldv = g.rows(m - k0)
		return vs[i*nbp*g.rows(m):][:nbp*ldv], ts[i*nbp*nbp : (i+1)*nbp*nbp], ldv
	}
	factor := func(k0 int, sc *cpu.Scratch) {
		v, t, ldv := panel(k0)
		jb := min(nb, s.k-k0)
		pw.factor(a[k0*lda+k0:], lda, m-k0, jb, v, ldv, nbp, tau[k0:k0+jb], t, sc)
	}
	factor(0, sc)
	for k0 := 0; k0 < s.k; k0 += nb {
		next := k0 + min(nb, s.k-k0) // the first column after this panel
		if next >= n {
			break
		}
		v, t, ldv := panel(k0)
		u := update{a[k0*lda:], lda, ldv, next, n, v, ldv, negOp(top, t, nbp, true), nbp, g}
		switch {
		case next >= s.k: // no next panel: the columns past k
			u.run(inner, sc)
		case inner && cpu.Threads() > 1:
			u.runAhead(min(nb, s.k-next), func(sc *cpu.Scratch) { factor(next, sc) })
		default:
			u.run(inner, sc)
			factor(next, sc)
		}
	}
	storeR(s, b, a, lda, rv, sc)
	if qv == nil {
		return
	}
	qc := s.qCols
	ldq := g.stride(qc)
	qm := cpu.Eye(sc.Buf(bufQ, height*ldq), m, qc, ldq)
	for k0 := (panels - 1) * nb; k0 >= 0; k0 -= nb {
		v, t, ldv := panel(k0)
		u := update{qm[k0*ldq:], ldq, ldv, k0, qc, v, ldv, negOp(top, t, nbp, false), nbp, g}
		u.run(inner, sc)
	}
	out := cpu.TensorSpan(qv).At(b * m * qc)
	for i := range m {
		out.At(i*qc).Store(0, qm[i*ldq:i*ldq+qc])
	}
}

// innerWidth is the width of the inner panels a wider panel is factored
// by (a variable for the tests).
var innerWidth = 8

// panelWork is the factorization of one panel at a time: the buffers it
// needs besides the panel's own (from the matrix's scratch, since the
// look-ahead factors a panel on whichever worker updated it).
type panelWork struct {
	k            *simd.Table
	g            grid
	ib           int       // inner panel width, a whole number of kernel tiles
	rowMajor     []float32 // a panel wider than ib, row-major with a padded stride
	gram         []float32 // V^T V of the panel (or of an inner one)
	subT, subTop []float32 // an inner panel's T and -T^T
}

// newPanelWork takes its buffers from sc, and the inner panels' T and -T^T
// from ts (2 ib^2 floats).
func newPanelWork(k *simd.Table, g grid, nb, m int, ts []float32, sc *cpu.Scratch) *panelWork {
	ib, nbp := g.rows(innerWidth), g.rows(nb)
	pw := &panelWork{k: k, g: g, ib: ib, gram: sc.Buf(bufR, nbp*g.stride(nbp))}
	if nb > ib {
		pw.rowMajor = sc.Buf(bufV, (m+2*g.rowTile)*g.stride(nb))
	}
	pw.subT, pw.subTop = ts[:ib*ib], ts[ib*ib:2*ib*ib]
	return pw
}

// innerT is the floats newPanelWork's ts needs.
func innerT(g grid) int { return 2 * g.rows(innerWidth) * g.rows(innerWidth) }

// factor factors the rows x jb panel at a (row stride lda; LAPACK's geqrf
// within it): R's part goes back to a, v is left holding the reflectors by
// columns (nbp columns of ldv floats: 1 on the diagonal, zeros above it and
// past rows and jb) and t their T (nbp x nbp). Up to ib columns are factored
// a reflector at a time (factorColumns); a wider panel ib columns at a time
// in a row-major copy, each inner panel's reflectors applied to the later
// columns on the panel kernels (sc's buffers), and its T built from V^T V
// on the same kernels.
func (pw *panelWork) factor(a []float32, lda, rows, jb int, v []float32, ldv, nbp int, tau, t []float32, sc *cpu.Scratch) {
	k, g := pw.k, pw.g
	clear(v[:nbp*ldv])
	if jb <= pw.ib {
		factorColumns(k, a, lda, rows, jb, v, ldv, tau)
		gramByDots(k, pw.gram, nbp, v, ldv, rows, jb)
		buildT(t, pw.gram, nbp, jb, nbp, tau)
		return
	}
	ldp, prows := g.stride(jb), g.rows(rows)
	p := pw.rowMajor[:prows*ldp]
	for r := range rows {
		row := p[r*ldp : (r+1)*ldp]
		copy(row, a[r*lda:r*lda+jb])
		clear(row[jb:])
	}
	clear(p[rows*ldp:])
	ib := pw.ib
	for s0 := 0; s0 < jb; s0 += ib {
		sb := min(ib, jb-s0)
		sv := v[s0*ldv+s0:]
		factorColumns(k, p[s0*ldp+s0:], ldp, rows-s0, sb, sv, ldv, tau[s0:s0+sb])
		if s0+sb < jb { // sb == ib: the inner panel's columns are exactly sv's first ib
			gramByDots(k, pw.gram, ib, sv, ldv, rows-s0, ib)
			buildT(pw.subT, pw.gram, ib, ib, ib, tau[s0:s0+ib])
			u := update{p[s0*ldp:], ldp, prows - s0, s0 + ib, jb, sv, ldv, negOp(pw.subTop, pw.subT, ib, true), ib, g}
			u.apply(0, u.tiles(), sc)
		}
	}
	// R's part back to a; p becomes V row-major for V^T V
	for r := range min(rows, jb) {
		copy(a[r*lda+r:r*lda+jb], p[r*ldp+r:r*ldp+jb])
	}
	for r := range rows {
		row := p[r*ldp : r*ldp+jb]
		for c := range row {
			row[c] = v[c*ldv+r]
		}
	}
	cw := (nbp + g.colTile - 1) / g.colTile * g.colTile
	clear(pw.gram[:nbp*cw])
	k.VtC(pw.gram[:nbp*cw], v, ldv, nbp, p, ldp, prows, cw)
	buildT(t, pw.gram, cw, jb, nbp, tau)
}

// factorColumns factors the rows x jb panel at a (row stride lda) one
// reflector at a time (LAPACK's geqr2) in v, where it is copied by columns
// (ldv floats apart, so that each reflector and the columns it updates are
// contiguous): R's part goes back to a, and v's columns are left holding
// the reflectors (1 on the diagonal, 0 above it; rows past the panel's are
// not touched).
func factorColumns(k *simd.Table, a []float32, lda, rows, jb int, v []float32, ldv int, tau []float32) {
	for p := range jb {
		col := v[p*ldv : p*ldv+rows]
		for r := range rows {
			col[r] = a[r*lda+p]
		}
	}
	for j := range jb {
		h := v[j*ldv+j : j*ldv+rows]
		tau[j] = householder(h, 1, rows-j)
		if tau[j] == 0 {
			continue
		}
		beta := h[0]
		h[0] = 1
		for c := j + 1; c < jb; c++ {
			x := v[c*ldv+j : c*ldv+rows]
			k.Axpy(x, h, -tau[j]*k.Dot(h, x))
		}
		h[0] = beta
	}
	for p := range jb {
		col := v[p*ldv : p*ldv+rows]
		for r := range min(p+1, rows) {
			a[r*lda+p] = col[r] // R's entries
			col[r] = 0
		}
		if p < rows {
			col[p] = 1
		}
	}
}

// gramByDots sets gram[p*ldg+j] = v_p . v_j for p < j < jb, the columns of
// v (ldv apart, rows long; v_j is zero above row j).
func gramByDots(k *simd.Table, gram []float32, ldg int, v []float32, ldv, rows, jb int) {
	for j := range jb {
		vj := v[j*ldv+j : j*ldv+rows]
		for p := range j {
			gram[p*ldg+j] = k.Dot(v[p*ldv+j:p*ldv+rows], vj)
		}
	}
}

// buildT is LAPACK's slarft (forward, columnwise) into t (nbp x nbp) from
// the reflectors' V^T V (gram, rows ldg apart; only p < j read):
// T[j][j] = tau_j, T[0:j, j] = -tau_j T[0:j, 0:j] (V^T v_j), so that
// H_0 ... H_jb-1 = I - V T V^T.
func buildT(t, gram []float32, ldg, jb, nbp int, tau []float32) {
	clear(t[:nbp*nbp])
	for j := range jb {
		for p := range j {
			var d float64
			for q := p; q < j; q++ {
				d += float64(t[p*nbp+q]) * float64(gram[q*ldg+j])
			}
			t[p*nbp+j] = float32(-float64(tau[j]) * d)
		}
		t[j*nbp+j] = tau[j]
	}
}

// negOp writes -op(T) by columns into top (op(T) = T^T when trans: the
// factorization applies H^T; forming q applies H) and returns it: column q
// of -T^T is -T's row q, so trans copies T's rows negated.
func negOp(top, t []float32, nbp int, trans bool) []float32 {
	for p := range nbp {
		for q := range nbp {
			if trans {
				top[p*nbp+q] = -t[p*nbp+q]
			} else {
				top[p*nbp+q] = -t[q*nbp+p]
			}
		}
	}
	return top
}

// update is one application of a panel's reflectors, I + V top V^T (top =
// -op(T) by columns), to columns [c0, c1) of the rows x ld row-major block
// c (rows a whole number of kernel tiles; V's columns ldv apart): W = V^T C,
// W' = top W, C += V W', by chunks of whole column tiles.
type update struct {
	c                []float32
	ld, rows, c0, c1 int
	v                []float32
	ldv              int
	top              []float32
	nbp              int
	g                grid
}

func (u *update) tiles() int { return (u.c1 - u.c0 + u.g.colTile - 1) / u.g.colTile }

// apply updates tiles [lo, hi), chunkCols columns at a time.
func (u *update) apply(lo, hi int, sc *cpu.Scratch) {
	k, nbp, ct := cpu.K(), u.nbp, u.g.colTile
	buf := sc.Buf(bufPanel, 2*nbp*chunkCols)
	for x0 := u.c0 + lo*ct; x0 < u.c0+hi*ct; x0 += chunkCols {
		cw := min(chunkCols, u.c0+hi*ct-x0)
		w, wt := buf[:nbp*cw], buf[nbp*cw:2*nbp*cw]
		clear(w)
		for r0 := 0; r0 < u.rows; r0 += rowBlock {
			k.VtC(w, u.v[r0:], u.ldv, nbp, u.c[r0*u.ld+x0:], u.ld, min(rowBlock, u.rows-r0), cw)
		}
		clear(wt)
		k.AddVW(wt, cw, nbp, cw, u.top, nbp, nbp, w)
		k.AddVW(u.c[x0:], u.ld, u.rows, cw, u.v, u.ldv, nbp, wt)
	}
}

// run applies the whole update, split across the workers when inner (else
// in sc).
func (u *update) run(inner bool, sc *cpu.Scratch) {
	if inner {
		cpu.Parallel(u.tiles(), chunkCols/u.g.colTile, u.apply)
		return
	}
	u.apply(0, u.tiles(), sc)
}

// runAhead is run with a look-ahead (LAPACK's): one worker updates the
// tiles holding the first width columns, the next panel, and factors it
// (then); meanwhile the others take the remaining columns a chunk at a time,
// and so does that worker once done, so that the panel's factorization, one
// reflector at a time, no longer leaves the other cores idle.
func (u *update) runAhead(width int, then func(sc *cpu.Scratch)) {
	ct, tiles := u.g.colTile, u.tiles()
	first := min((width+ct-1)/ct, tiles)
	per := chunkCols / ct
	chunks := (tiles - first + per - 1) / per
	var taken atomic.Int64
	cpu.Parallel(cpu.Threads(), 1, func(worker, _ int, sc *cpu.Scratch) {
		if worker == 0 {
			u.apply(0, first, sc)
			then(sc)
		}
		for i := int(taken.Add(1) - 1); i < chunks; i = int(taken.Add(1) - 1) {
			lo := first + i*per
			u.apply(lo, min(lo+per, tiles), sc)
		}
	})
}
