// Package simd declares the vector primitives the CPU kernels are built from
// and their portable Go implementation. Per-ISA implementations live in the
// subpackages (avx512, avx2); backend/cpu picks one at run time.
//
// Every primitive works on float32 slices; dst may be the same slice as an
// input (elementwise in place) but must not otherwise overlap one. The 16-bit
// conversions round to nearest even and keep NaN a NaN.
package simd

// Table is one implementation of every primitive, grouped by the families
// that use them; the groups are embedded, so a kernel names a primitive
// directly (k.SumSq, k.GeluErf).
type Table struct {
	Name string
	Reductions
	RowMath
	// BF16Rows are row passes that read (and Normalize writes) bfloat16
	// directly: widening is a shift and fuses into the pass, where a
	// float32 copy of the row would cost two more passes.
	BF16Rows BF16Rows
	Activations
	AdamWStep
	QRKernels
	LaneMoves
	CholeskyKernels
	SolveKernels
	EighKernels
	SVDKernels
	Conversions
}

// Reductions are the row reductions (the norms' and softmax's statistics).
type Reductions struct {
	SumSq func(x []float32) float32
	Max   func(x []float32) float32
	Dot   func(a, b []float32) float32
	// SumDot is the sum of a and its dot product with b - shift, in one
	// pass; MulSumDot stores g = a * w and returns SumDot(g, b, shift),
	// also in one pass.
	SumDot    func(a, b []float32, shift float32) (sum, dot float32)
	MulSumDot func(g, a, w, b []float32, shift float32) (sum, dot float32)
	// ShiftedSums is the sum and the sum of squares of x - shift, in one pass.
	ShiftedSums func(x []float32, shift float32) (sum, sumSq float32)
	// ExpSum stores dst = exp(x - m) and returns its sum; m is finite and
	// at least every x (a row's maximum), and x holds no NaN.
	ExpSum func(dst, x []float32, m float32) float32
}

// RowMath are the elementwise passes of the norms and softmax.
type RowMath struct {
	Add func(dst, a, b []float32) // dst = a + b
	Mul func(dst, a, b []float32) // dst = a * b
	// Normalize is dst = (x - mean) * rstd * w + b; w and b may be nil.
	Normalize func(dst, x, w, b []float32, mean, rstd float32)
	// NormGrad is dst = s * (g - c*(x - shift) - d), the input gradient
	// of both norms.
	NormGrad func(dst, g, x []float32, shift, c, d, s float32)
	// SoftmaxGrad is dst = y * (dy - d).
	SoftmaxGrad func(dst, y, dy []float32, d float32)
	// FMAcc is acc += a * b * s.
	FMAcc func(acc, a, b []float32, s float32)
	// AccMulSum is accAB += a * (b - shift) * scale and accA += a, in one
	// pass.
	AccMulSum func(accAB, accA, a, b []float32, shift, scale float32)
}

// Activations are GELU's two forms and SiLU, forward and backward.
type Activations struct {
	GeluErf      func(dst, x []float32)
	GeluTanh     func(dst, x []float32)
	Silu         func(dst, x []float32)
	GeluErfGrad  func(dst, dy, x []float32)
	GeluTanhGrad func(dst, dy, x []float32)
	SiluGrad     func(dst, dy, x []float32)
}

// AdamWStep is the optimizer's elementwise step.
type AdamWStep struct {
	// AdamW takes one AdamW step in place on param p with gradient g and
	// moments m, v (vmax: the running maximum of v under amsgrad, else nil).
	AdamW func(h *AdamW, p, g, m, v, vmax []float32)
}

// QRKernels are Householder QR's primitives.
type QRKernels struct {
	// Axpy is dst += s * x.
	Axpy func(dst, x []float32, s float32)
	// Reflect applies the Householder reflector I - tau*v*v^T from the left
	// to the rows x cols block at a (row stride ld): w = v^T a (w: cols
	// floats of scratch), then a -= tau * v * w. v must have 3 elements of
	// padding after its rows values (vector loads).
	Reflect func(a []float32, ld, rows, cols int, v []float32, tau float32, w []float32)
	// VtC and AddVW are blocked QR's two panel products over a column chunk:
	// VtC adds V^T C to w (jb x cw, row-major), AddVW adds V w to C; V is
	// rows x jb by columns (column p at v[p*ldv:]), C rows x cw at row
	// stride ld. cw must be a multiple of 2*Lanes (1 where Lanes is 0);
	// VtC's jb and AddVW's rows a multiple of PanelRows.
	VtC       func(w, v []float32, ldv, jb int, c []float32, ld, rows, cw int)
	AddVW     func(c []float32, ld, rows, cw int, v []float32, ldv, jb int, w []float32)
	PanelRows int
	// Lanes is the vector width (float32s per vector); QRLanes factors that
	// many matrices at once, one per lane. Nil in the portable table.
	Lanes   int
	QRLanes func(a []float32, m, n int, q []float32, qCols int, scratch []float32)
}

// LaneMoves put Lanes matrices into the interleaved form the lanes kernels
// work on (element e of matrix l at a[e*Lanes+l]) and take them out of it,
// eight matrices at a time by 8 x 8 blocks transposed in registers.
// len(mats) must be Lanes. Nil in the portable table.
type LaneMoves struct {
	// Interleave sets a[e*Lanes+l] = mats[l][e] for e < elems.
	Interleave func(a []float32, mats [][]float32, elems int)
	// Deinterleave sets mats[l][e] = a[e*Lanes+l] for e < elems.
	Deinterleave func(mats [][]float32, a []float32, elems int)
}

// CholeskyKernels are batched Cholesky's primitive.
type CholeskyKernels struct {
	// CholeskyLanes factors Lanes n x n matrices at once, one per lane, in
	// place: a interleaved (element e of matrix l at a[e*Lanes+l]), its
	// lower triangle read and overwritten by the factor. info[l] (Lanes of
	// them) gets LAPACK's info for lane l: 0, or the order of the first
	// leading minor that is not positive-definite (or is NaN); past it that
	// lane's factor is unspecified. Nil in the portable table.
	CholeskyLanes func(a []float32, n int, info []int32)
}

// SolveKernels are batched linear systems' primitive.
type SolveKernels struct {
	// SolveLanes solves Lanes systems A X = B at once, one per lane, in
	// place: a holds each system's n x n A and b its n x k B, interleaved
	// (element e of system l at a[e*Lanes+l]); afterwards b holds X and a
	// is overwritten. Gaussian elimination with partial pivoting: the
	// largest magnitude left in the column (NaN counting as the largest),
	// the first such row on ties. old holds (n + k)*Lanes floats of
	// scratch. info[l] (Lanes of them) gets 0, or j where lane l's j-th
	// pivot is zero; past it that lane's X is unspecified. Nil in the
	// portable table.
	SolveLanes func(a []float32, n int, b []float32, k int, old []float32, info []int32)
}

// EighKernels are batched symmetric eigendecomposition's primitive.
type EighKernels struct {
	// EighLanes diagonalizes Lanes symmetric n x n matrices at once, one
	// per lane, by Jacobi rotations, in place: a interleaved (element e of
	// matrix l at a[e*Lanes+l]), its upper triangle read and overwritten;
	// afterwards its diagonal holds the eigenvalues, unordered. v (nil for none, else
	// n*n*Lanes floats) gets the eigenvectors in its columns, in the
	// diagonal's order. At most maxSweeps sweeps; info[l] (Lanes of them)
	// is 0 where lane l converged, 1 where it still rotated in the last
	// sweep (a rotation whose tangent exceeds EighStopTan). Nil in the
	// portable table.
	EighLanes func(a []float32, n int, v []float32, maxSweeps int, info []int32)
	// Rot is the plane rotation (x, y) = (c x - s y, s x + c y) of two
	// rows: the QL iterations' update of the eigenvectors.
	Rot func(x, y []float32, c, s float32)
	// SymMV and SymRank2 are the tridiagonal reduction's steps on a
	// symmetric n x n A held as its upper triangle by rows at row stride ld
	// (row j from a[j*ld+j]; the lower triangle is neither read nor
	// written): SymMV is y += A x, SymRank2 is A -= x yᵀ + y xᵀ. x and y
	// need 3 elements of capacity past n (vector loads).
	SymMV    func(a []float32, ld, n int, x, y []float32)
	SymRank2 func(a []float32, ld, n int, x, y []float32)
}

// EighStopTan ends Jacobi sweeps (EighLanes, and the GPU kernels' same
// constant): a sweep whose rotations all had tangents at most 2⁻¹² is the
// last. Convergence is quadratic, so what it leaves off the diagonal is
// about its tangents squared, float32's rounding; the sweep that would
// then find nothing to rotate is not run (6 sweeps instead of 8 at 16²,
// 7 instead of 8 or 9 at 32², the same errors).
const EighStopTan = 0x1p-12

// SVDStopSin ends one-sided Jacobi sweeps (SVDLanes, ops/svd's one-matrix
// rotations and the GPU kernels' same constant), as EighStopTan ends
// eigh's: a sweep whose rotations all had sines at most 2⁻¹² is the last
// (convergence is quadratic: the next would rotate by about their squares,
// float32's rounding). Below it the tolerance's own stop still holds: no
// rotation by a sine above it ends the sweeps.
const SVDStopSin = 0x1p-12

// SVDKernels are batched singular value decomposition's primitives.
type SVDKernels struct {
	// SVDLanes rotates Lanes matrices' columns at once, one matrix per
	// lane, by one-sided Jacobi: b interleaved (element e of matrix l at
	// b[e*Lanes+l]), each rows x cols (rows >= cols) by columns (element i
	// of column j at e = j*rows+i), rotated in place until every pair of
	// columns x, y has |x·y| <= tol ‖x‖ ‖y‖; v (cols*cols*Lanes floats)
	// gets the product of the rotations, by columns likewise. At most
	// maxSweeps sweeps; info[l] (Lanes of them) is 0 where lane l
	// converged, 1 where it still rotated in the last sweep. Nil in the
	// portable table.
	SVDLanes func(b []float32, rows, cols int, v []float32, tol float32, maxSweeps int, info []int32)
	// QVLanes multiplies Lanes matrices at once, interleaved as SVDLanes'
	// are: y (rows x cols, by columns) = q (rows x cols, by rows: QRLanes'
	// Q) times v (cols x cols, by columns: SVDLanes' V). Nil in the
	// portable table.
	QVLanes func(y, q, v []float32, rows, cols int)
	// JacobiRot is one matrix's rotation of two columns as SVDLanes
	// rotates them: (x, y) = (c x - s y, s x + c y) formed as x - s (y +
	// tau x) and y + s (x - tau y), tau = s / (1 + c), which keeps a small
	// angle's rotation orthogonal where c rounds to 1.
	JacobiRot func(x, y []float32, s, tau float32)
}

// Conversions are the 16-bit formats to and from float32.
type Conversions struct {
	BF16ToF32 func(dst []float32, src []uint16)
	F16ToF32  func(dst []float32, src []uint16)
	F32ToBF16 func(dst []uint16, src []float32)
	F32ToF16  func(dst []uint16, src []float32)
}

// BF16Rows is SumSq, ShiftedSums and Normalize on bfloat16 rows, and
// AddSumSq: dst = a + b rounded to bfloat16, returning the sum of squares
// of what it stored.
type BF16Rows struct {
	SumSq       func(x []uint16) float32
	AddSumSq    func(dst, a, b []uint16) float32
	ShiftedSums func(x []uint16, shift float32) (sum, sumSq float32)
	Normalize   func(dst, x []uint16, w, b []float32, mean, rstd float32)
	// The norms' backward, g = dy * w (dy itself for a nil w) formed in
	// each pass: GradDots is the sum of g and its dot product with
	// x - shift; GradAcc is pw += dy * (x - shift) * scale and pb += dy
	// (pb may be nil); NormGrad is dst = s * (g - c*(x - shift) - d).
	GradDots func(dy, x []uint16, w []float32, shift float32) (sum, dot float32)
	GradAcc  func(pw, pb []float32, dy, x []uint16, shift, scale float32)
	NormGrad func(dst, dy, x []uint16, w []float32, shift, c, d, s float32)
}

// AdamW is one step's scalars, PyTorch's AdamW (torch.optim's
// single-tensor step, each scalar formed in float64 and rounded once, as
// Python's floats are when a float32 kernel takes them):
//
//	g = Sign*grad; p *= Decay; m += OneMinusBeta1*(g - m)
//	v = Beta2*v + (OneMinusBeta2*g)*g; vmax = max(vmax, v) (amsgrad)
//	p -= (StepSize*m) / (sqrt(v or vmax)/BC2Sqrt + Eps)
type AdamW struct {
	Sign, Decay, OneMinusBeta1, Beta2, OneMinusBeta2, StepSize, BC2Sqrt, Eps float32
}
