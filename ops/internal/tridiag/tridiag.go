// Package tridiag is the CPU's symmetric eigendecomposition of one float32
// matrix: Householder reduction to tridiagonal form, then implicit QL
// iterations with Wilkinson's shift on the tridiagonal (EISPACK's tred2
// and tql2, as JAMA writes them), the QL rotations applied to the
// reduction's orthogonal factor. ops/eigh decomposes with it; ops/svd
// preconditions one-sided Jacobi with the eigenvectors of BᵀB.
package tridiag

import (
	"math"

	"metalcore/backend/cpu"
)

// The method costs about 9n³ flops with the eigenvectors, where one Jacobi
// sweep costs about 6n³ and a matrix takes 6 to 10 sweeps. The algorithm's
// V is kept transposed (row j of w holds V's column j), so that its column
// loops run along contiguous rows.

// MaxQLIterations bounds the QL iterations per eigenvalue (LAPACK's
// ssteqr allows 30); past it the matrix is reported in info.
const MaxQLIterations = 30

// Solver is one worker's storage for the method at order n.
type Solver struct {
	n       int
	d, e, u []float32 // working vectors, each with 3 floats of padding (vector loads)
	dd      []float64 // the tridiagonal's diagonal, then the eigenvalues
	ee      []float64 // its off-diagonal
}

// New is a Solver for order n.
func New(n int) *Solver {
	vec := func() []float32 { return make([]float32, n, n+3) }
	return &Solver{n: n, d: vec(), e: vec(), u: vec(), dd: make([]float64, n), ee: make([]float64, n)}
}

// Decompose diagonalizes the symmetric n x n w (all of it read): it
// returns the eigenvalues, unordered, and 0, or 1 where the QL iterations
// did not converge. With vectors, w ends with the eigenvectors in its rows,
// in the eigenvalues' order; without, w is scratch.
func (t *Solver) Decompose(w []float32, vectors bool) ([]float64, int32) {
	n := t.n
	if n == 0 {
		return t.dd, 0
	}
	// w divided by the power of two above its largest magnitude (exactly),
	// so that the reduction's sums of a row's magnitudes and squares
	// neither overflow nor vanish; the eigenvalues are scaled back
	_, exp := math.Frexp(float64(math.Float32frombits(cpu.MaxMagnitude(w[:n*n]))))
	if exp != 0 {
		cpu.ScalePow2(w[:n*n], w[:n*n], math.Ldexp(1, -exp))
	}
	t.reduce(w)
	var info int32
	if vectors {
		t.accumulate(w)
		info = t.ql(w)
	} else {
		for i := range n {
			t.dd[i] = float64(w[i*n+i])
		}
		info = t.ql(nil)
	}
	for i, x := range t.dd {
		t.dd[i] = math.Ldexp(x, exp)
	}
	return t.dd, info
}

// reduce is tred2's reduction: Householder similarity transformations,
// last row first, leave the tridiagonal's diagonal in w's and its
// off-diagonal in t.ee[1:], the reflectors in w's rows below the diagonal
// and their scalars in t.d, for accumulate.
func (t *Solver) reduce(w []float32) {
	n, d, e, k := t.n, t.d, t.e, cpu.K()
	for j := range n {
		d[j] = w[j*n+n-1]
	}
	for i := n - 1; i > 0; i-- {
		var scale float32
		for _, x := range d[:i] {
			scale += float32(math.Abs(float64(x)))
		}
		if scale == 0 {
			t.ee[i] = float64(d[i-1])
			for j := range i {
				d[j] = w[j*n+i-1]
				w[j*n+i], w[i*n+j] = 0, 0
			}
			d[i] = 0
			continue
		}
		for j := range i {
			d[j] /= scale
		}
		h := k.SumSq(d[:i])
		f := d[i-1]
		g := float32(math.Sqrt(float64(h)))
		if f > 0 {
			g = -g
		}
		t.ee[i] = float64(scale * g)
		h -= f * g
		d[i-1] = f - g
		// e = A u / h - (uᵀ A u / 2h²) u, A the leading i x i block
		// (the upper triangle by rows), u = d (kept in row i for
		// accumulate); then A -= u eᵀ + e uᵀ.
		clear(e[:i])
		k.SymMV(w, n, i, d[:i], e[:i])
		copy(w[i*n:i*n+i], d[:i])
		for j := range i {
			e[j] /= h
		}
		k.Axpy(e[:i], d[:i], -k.Dot(e[:i], d[:i])/(h+h))
		k.SymRank2(w, n, i, d[:i], e[:i])
		for j := range i {
			d[j] = w[j*n+i-1]
			w[j*n+i] = 0
		}
		d[i] = h
	}
}

// accumulate is tred2's second half: the product of the reflectors into
// w, transposed (each reflector applied to w's transpose, where it is one
// left multiplication), the tridiagonal's diagonal into t.dd.
func (t *Solver) accumulate(w []float32) {
	n, u, k := t.n, t.u, cpu.K()
	transpose(w, n)
	for i := range n {
		t.dd[i] = float64(w[i*n+i])
	}
	for i := range n - 1 {
		w[i*n+i] = 1
		for r := range i + 1 { // the reflector, column i+1 above the diagonal
			u[r], w[r*n+i+1] = w[r*n+i+1], 0
		}
		if h := t.d[i+1]; h != 0 {
			k.Reflect(w, n, i+1, i+1, u[:i+1], 1/h, t.e)
		}
	}
	clear(w[(n-1)*n:])
	w[n*n-1] = 1
	transpose(w, n)
}

// transpose transposes the n x n m in place.
func transpose(m []float32, n int) {
	for i := range n {
		for j := range i {
			m[i*n+j], m[j*n+i] = m[j*n+i], m[i*n+j]
		}
	}
}

// ql is tql2's implicit QL iterations on the tridiagonal (t.dd, t.ee[1:]),
// each rotation applied to the rows of w (nil for none): t.dd ends with
// the eigenvalues, w with the eigenvectors in its rows. It returns 0, or
// 1 where an eigenvalue took more than MaxQLIterations iterations.
func (t *Solver) ql(w []float32) int32 {
	n, d, e, k := t.n, t.dd, t.ee, cpu.K()
	copy(e, e[1:])
	e[n-1] = 0
	const eps = 0x1p-24 // the rounding of the float32 data the tridiagonal came from
	var f, tst1 float64
	for l := range n {
		tst1 = max(tst1, math.Abs(d[l])+math.Abs(e[l]))
		m := l
		for m < n-1 && math.Abs(e[m]) > eps*tst1 {
			m++
		}
		for iter := 0; m > l; iter++ {
			if iter == MaxQLIterations {
				return 1
			}
			g := d[l]
			p := (d[l+1] - g) / (2 * e[l])
			// Hypotenuses as plain square roots: the tridiagonal came from
			// float32 values, whose squares float64 holds.
			r := math.Copysign(math.Sqrt(p*p+1), p)
			d[l] = e[l] / (p + r)
			d[l+1] = e[l] * (p + r)
			dl1 := d[l+1]
			h := g - d[l]
			for i := l + 2; i < n; i++ {
				d[i] -= h
			}
			f += h
			p = d[m]
			c, c2, c3 := 1.0, 1.0, 1.0
			el1 := e[l+1]
			var s, s2 float64
			for i := m - 1; i >= l; i-- {
				c3, c2, s2 = c2, c, s
				g = c * e[i]
				h = c * p
				r = math.Sqrt(p*p + e[i]*e[i])
				e[i+1] = s * r
				ri := 1 / r
				s, c = e[i]*ri, p*ri
				p = c*d[i] - s*g
				d[i+1] = h + s*(c*g+s*d[i])
				if w != nil {
					k.Rot(w[i*n:(i+1)*n], w[(i+1)*n:(i+2)*n], float32(c), float32(s))
				}
			}
			p = -s * s2 * c3 * el1 * e[l] / dl1
			e[l], d[l] = s*p, c*p
			if math.Abs(e[l]) <= eps*tst1 {
				break
			}
		}
		d[l] += f
		e[l] = 0
	}
	return 0
}
