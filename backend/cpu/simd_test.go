package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cpu/simd"
)

func allTables(t *testing.T) []*simd.Table {
	require.Equal(t, "portable", tables[len(tables)-1].Name)
	return tables
}

func decodeHalf(h uint16) float64 {
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	v := math.Ldexp(m, -24) // subnormal
	if e > 0 {
		v = math.Ldexp(1+m/1024, e-15)
	}
	if e == 31 {
		v = math.Inf(1)
		if m != 0 {
			v = math.NaN()
		}
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// Every half and bfloat16 value widens exactly, in every implementation.
func TestWidenAllValues(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	for _, k := range allTables(t) {
		f16, bf16 := make([]float32, len(src)), make([]float32, len(src))
		k.F16ToF32(f16, src)
		k.BF16ToF32(bf16, src)
		for i, h := range src {
			want := decodeHalf(h)
			if math.IsNaN(want) {
				require.True(t, math.IsNaN(float64(f16[i])), "%s f16 %#04x", k.Name, h)
			} else {
				require.Equal(t, want, float64(f16[i]), "%s f16 %#04x", k.Name, h)
			}
			require.Equal(t, uint32(h)<<16, math.Float32bits(bf16[i]), "%s bf16 %#04x", k.Name, h)
		}
	}
}

// Narrowing rounds to the nearest representable value, ties to even, keeps
// NaN a NaN and overflows to infinity; every implementation agrees bit for
// bit with the scalar code, which is checked against exact decoding.
func TestNarrowRoundsToNearestEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
	var in []float32
	for h := range 1 << 16 { // every half and its neighbours and midpoints
		f := float32(decodeHalf(uint16(h)))
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		next := float32(decodeHalf(uint16(h + 1)))
		in = append(in, f, math.Nextafter32(f, 1e30), math.Nextafter32(f, -1e30), (f+next)/2)
	}
	for range 200000 {
		in = append(in, math.Float32frombits(rng.Uint32()))
	}
	in = append(in, float32(math.Inf(1)), float32(math.Inf(-1)), 65504, 65520, 65519.99, 1e-8, -1e-8, 0x1p-25, 0x1.8p-24)
	for _, k := range allTables(t) {
		f16, bf16 := make([]uint16, len(in)), make([]uint16, len(in))
		k.F32ToF16(f16, in)
		k.F32ToBF16(bf16, in)
		for i, f := range in {
			require.Equal(t, simd.F32ToF16(f), f16[i], "%s f16(%g)", k.Name, f)
			require.Equal(t, simd.F32ToBF16(f), bf16[i], "%s bf16(%g)", k.Name, f)
		}
	}
	for _, f := range in {
		checkNearest(t, float64(f), decodeHalf(simd.F32ToF16(f)), decodeHalf, simd.F32ToF16(f))
		bf := func(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }
		checkNearest(t, float64(f), bf(simd.F32ToBF16(f)), bf, simd.F32ToBF16(f))
	}
}

func checkNearest(t *testing.T, f, got float64, decode func(uint16) float64, h uint16) {
	if math.IsNaN(f) {
		require.True(t, math.IsNaN(got), "NaN narrowed to %v", got)
		return
	}
	if math.IsInf(got, 0) {
		lim := decode(h - 1) // the largest finite value of that sign
		require.True(t, math.Abs(f) >= math.Abs(lim)+(math.Abs(lim)-math.Abs(decode(h-2)))/2, "%g overflowed", f)
		return
	}
	for _, nb := range []uint16{h - 1, h + 1} {
		n := decode(nb)
		if math.IsNaN(n) || math.IsInf(n, 0) || math.Signbit(n) != math.Signbit(got) {
			continue
		}
		d, dn := math.Abs(f-got), math.Abs(f-n)
		require.True(t, d < dn || d == dn && h&1 == 0, "%g rounded to %g, %g is nearer or even", f, got, n)
	}
}

// Every primitive of every implementation against float64 on random data,
// over lengths that cover the vector body and every tail length.
func TestPrimitives(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 2))
	for _, k := range allTables(t) {
		for _, n := range []int{0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 100, 1024} {
			a, b, c, d := randv(rng, n), randv(rng, n), randv(rng, n), randv(rng, n)
			var sum, sumSq, dot, mx, expSum float64
			mx = math.Inf(-1)
			for i := range n {
				sum += float64(a[i])
				sumSq += float64(a[i]) * float64(a[i])
				dot += float64(a[i]) * float64(b[i])
				mx = math.Max(mx, float64(a[i]))
			}
			top := float32(0) // ExpSum's m: the maximum, as softmax passes it
			if n > 0 {
				top = float32(mx)
			}
			for i := range n {
				expSum += math.Exp(float64(a[i]) - float64(top))
			}
			near := func(what string, got, want float64) {
				require.InDelta(t, want, got, 1e-5*(1+math.Abs(want))+1e-6*float64(n), "%s %s n=%d", k.Name, what, n)
			}
			near("SumSq", float64(k.SumSq(a)), sumSq)
			near("Dot", float64(k.Dot(a, b)), dot)
			const shift = 0.375
			var dotShift float64
			for i := range n {
				dotShift += float64(a[i]) * (float64(b[i]) - shift)
			}
			s, dt := k.SumDot(a, b, shift)
			near("SumDot sum", float64(s), sum)
			near("SumDot dot", float64(dt), dotShift)
			g := make([]float32, n)
			s, dt = k.MulSumDot(g, a, c, b, shift)
			var gSum, gDot float64
			for i := range n {
				gi := float64(a[i]) * float64(c[i])
				gSum += gi
				gDot += gi * (float64(b[i]) - shift)
			}
			near("MulSumDot sum", float64(s), gSum)
			near("MulSumDot dot", float64(dt), gDot)
			var shSum, shSq float64
			for i := range n {
				d := float64(a[i]) - 0.75
				shSum += d
				shSq += d * d
			}
			s, dt = k.ShiftedSums(a, 0.75)
			near("ShiftedSums sum", float64(s), shSum)
			near("ShiftedSums sumSq", float64(dt), shSq)
			if n > 0 {
				require.Equal(t, float32(mx), k.Max(a), "%s Max n=%d", k.Name, n)
			}
			out := make([]float32, n)
			near("ExpSum", float64(k.ExpSum(out, a, top)), expSum)
			each := func(what string, got []float32, want func(i int) float64) {
				for i := range n {
					w := want(i)
					require.InDelta(t, w, float64(got[i]), 2e-6*(1+math.Abs(w)), "%s %s n=%d i=%d", k.Name, what, n, i)
				}
			}
			each("ExpSum", out, func(i int) float64 { return math.Exp(float64(a[i]) - float64(top)) })
			k.Add(out, a, b)
			each("Add", out, func(i int) float64 { return float64(a[i]) + float64(b[i]) })
			k.Mul(out, a, b)
			each("Mul", out, func(i int) float64 { return float64(a[i]) * float64(b[i]) })
			for _, wb := range [][2][]float32{{b, c}, {b, nil}, {nil, c}, {nil, nil}} {
				k.Normalize(out, a, wb[0], wb[1], 0.3, 1.7)
				each("Normalize", out, func(i int) float64 {
					v := (float64(a[i]) - 0.3) * 1.7
					if wb[0] != nil {
						v *= float64(b[i])
					}
					if wb[1] != nil {
						v += float64(c[i])
					}
					return v
				})
			}
			if n > 0 { // scaled with no weights (the SVD's columns), a -0 stays -0, in the vector loop and the tail
				z := append([]float32(nil), a...)
				z[0], z[n-1] = float32(math.Copysign(0, -1)), float32(math.Copysign(0, -1))
				k.Normalize(out, z, nil, nil, 0, 1.5)
				require.True(t, math.Signbit(float64(out[0])) && math.Signbit(float64(out[n-1])), "%s Normalize -0 n=%d", k.Name, n)
			}
			k.NormGrad(out, a, b, shift, 0.5, 0.25, 2)
			each("NormGrad", out, func(i int) float64 { return 2 * (float64(a[i]) - 0.5*(float64(b[i])-shift) - 0.25) })
			k.SoftmaxGrad(out, a, b, 0.5)
			each("SoftmaxGrad", out, func(i int) float64 { return float64(a[i]) * (float64(b[i]) - 0.5) })
			acc := append([]float32(nil), d...)
			k.FMAcc(acc, a, b, 3)
			each("FMAcc", acc, func(i int) float64 { return float64(d[i]) + float64(a[i])*float64(b[i])*3 })
			acc, acc2 := append(acc[:0], d...), append([]float32(nil), c...)
			k.AccMulSum(acc, acc2, a, b, shift, 1.5)
			each("AccMulSum a*b", acc, func(i int) float64 { return float64(d[i]) + float64(a[i])*1.5*(float64(b[i])-shift) })
			each("AccMulSum a", acc2, func(i int) float64 { return float64(c[i]) + float64(a[i]) })
			each("MulSumDot g", g, func(i int) float64 { return float64(a[i]) * float64(c[i]) })
			acc = append(acc[:0], d...)
			k.Axpy(acc, a, -1.5)
			each("Axpy", acc, func(i int) float64 { return float64(d[i]) - 1.5*float64(a[i]) })
			x, y := append([]float32(nil), a...), append([]float32(nil), b...)
			k.Rot(x, y, 0.6, -0.8)
			each("Rot x", x, func(i int) float64 { return 0.6*float64(a[i]) + 0.8*float64(b[i]) })
			each("Rot y", y, func(i int) float64 { return -0.8*float64(a[i]) + 0.6*float64(b[i]) })
			x, y = append(x[:0], a...), append(y[:0], b...)
			k.JacobiRot(x, y, 0.25, float32(0.25/(1+math.Sqrt(1-0.25*0.25))))
			cos := math.Sqrt(1 - 0.25*0.25)
			each("JacobiRot x", x, func(i int) float64 { return cos*float64(a[i]) - 0.25*float64(b[i]) })
			each("JacobiRot y", y, func(i int) float64 { return 0.25*float64(a[i]) + cos*float64(b[i]) })
			symmetricSteps(t, k, rng, n)
		}
	}
}

// symmetricSteps holds SymMV and SymRank2 on an n x n triangle at a row
// stride past n to float64, and checks that neither touches the lower
// triangle or the padding.
func symmetricSteps(t *testing.T, k *simd.Table, rng *rand.Rand, n int) {
	ld := n + 5
	a := randv(rng, n*ld)
	x, y := randv(rng, n+3)[:n], randv(rng, n+3)[:n]
	sym := func(i, j int) float64 { return float64(a[min(i, j)*ld+max(i, j)]) }
	want := make([]float64, n)
	for i := range n {
		want[i] = float64(y[i])
		for j := range n {
			want[i] += sym(i, j) * float64(x[j])
		}
	}
	got := append([]float32(nil), y...)
	k.SymMV(a, ld, n, x, got)
	for i := range n {
		require.InDelta(t, want[i], float64(got[i]), 1e-5*(1+float64(n)), "%s SymMV n=%d i=%d", k.Name, n, i)
	}
	before := append([]float32(nil), a...)
	k.SymRank2(a, ld, n, x, y)
	for i := range n {
		for j := range ld {
			w := float64(before[i*ld+j])
			if j >= i && j < n {
				w -= float64(x[i])*float64(y[j]) + float64(y[i])*float64(x[j])
			}
			require.InDelta(t, w, float64(a[i*ld+j]), 1e-5*(1+math.Abs(w)), "%s SymRank2 n=%d (%d, %d)", k.Name, n, i, j)
		}
	}
}

// The bfloat16 row passes against float64 on the widened row; Normalize's
// result is within 1.5 units in the last place of the float64 value (its
// float32 arithmetic may land on the other side of a rounding boundary), in
// every w/b case and in place.
func TestBF16Rows(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 3))
	bf := func(h uint16) float64 { return float64(simd.BF16ToF32(h)) }
	for _, k := range allTables(t) {
		for _, n := range []int{1, 3, 15, 16, 17, 31, 32, 33, 63, 100, 1024} {
			x := make([]uint16, n)
			for i, v := range randv(rng, n) {
				x[i] = simd.F32ToBF16(v + 10) // a mean away from 0, for the shift
			}
			var sq, sum, sumShifted float64
			shift := bf(x[0])
			for _, h := range x {
				sq += bf(h) * bf(h)
				sum += bf(h) - shift
				sumShifted += (bf(h) - shift) * (bf(h) - shift)
			}
			near := func(what string, got, want float64) {
				require.InDelta(t, want, got, 1e-5*(1+math.Abs(want))+1e-6*float64(n), "%s %s n=%d", k.Name, what, n)
			}
			near("SumSq", float64(k.BF16Rows.SumSq(x)), sq)
			y, sumXY := make([]uint16, n), make([]uint16, n)
			for i, v := range randv(rng, n) {
				y[i] = simd.F32ToBF16(v)
			}
			var sqXY float64
			for i := range x { // the float32 sum rounded to bfloat16 (exact in float64 before rounding)
				sumXY[i] = simd.F32ToBF16(float32(bf(x[i]) + bf(y[i])))
				sqXY += bf(sumXY[i]) * bf(sumXY[i])
			}
			for _, inPlace := range []bool{false, true} {
				dst, b := make([]uint16, n), y
				if inPlace {
					dst = append(dst[:0], y...)
					b = dst
				}
				near("AddSumSq", float64(k.BF16Rows.AddSumSq(dst, x, b)), sqXY)
				require.Equal(t, sumXY, dst, "%s AddSumSq sum n=%d in place=%v", k.Name, n, inPlace)
			}
			s, q := k.BF16Rows.ShiftedSums(x, float32(shift))
			near("ShiftedSums sum", float64(s), sum)
			near("ShiftedSums sumSq", float64(q), sumShifted)
			w, b := randv(rng, n), randv(rng, n)
			dy := make([]uint16, n)
			for i, v := range randv(rng, n) {
				dy[i] = simd.F32ToBF16(v)
			}
			for _, wt := range [][]float32{w, nil} {
				g := func(i int) float64 {
					if wt == nil {
						return bf(dy[i])
					}
					return bf(dy[i]) * float64(wt[i])
				}
				var gs, gd float64
				for i := range n {
					gs += g(i)
					gd += g(i) * (bf(x[i]) - shift)
				}
				s, d := k.BF16Rows.GradDots(dy, x, wt, float32(shift))
				near("GradDots sum", float64(s), gs)
				near("GradDots dot", float64(d), gd)
				for _, inPlace := range []bool{false, true} {
					dst := make([]uint16, n)
					if inPlace {
						dst = append(dst[:0], dy...)
					}
					k.BF16Rows.NormGrad(dst, map[bool][]uint16{false: dy, true: dst}[inPlace], x, wt, float32(shift), 0.5, 0.25, 2)
					for i := range n {
						want := 2 * (g(i) - 0.5*(bf(x[i])-shift) - 0.25)
						require.InDelta(t, want, bf(dst[i]), 1.5*math.Abs(want)/128+1e-4, "%s NormGrad n=%d i=%d w=%v in place=%v",
							k.Name, n, i, wt != nil, inPlace)
					}
				}
			}
			pw, pb := randv(rng, n), randv(rng, n)
			pw0, pb0 := append([]float32(nil), pw...), append([]float32(nil), pb...)
			k.BF16Rows.GradAcc(pw, pb, dy, x, float32(shift), 1.5)
			for i := range n {
				require.InDelta(t, float64(pw0[i])+bf(dy[i])*1.5*(bf(x[i])-shift), float64(pw[i]), 1e-5*(1+math.Abs(float64(pw[i]))), "%s GradAcc pw", k.Name)
				require.InDelta(t, float64(pb0[i])+bf(dy[i]), float64(pb[i]), 1e-5*(1+math.Abs(float64(pb[i]))), "%s GradAcc pb", k.Name)
			}
			k.BF16Rows.GradAcc(pw0, nil, dy, x, float32(shift), 1.5)
			require.Equal(t, pw, pw0, "%s GradAcc without pb", k.Name)
			for _, wb := range [][2][]float32{{w, b}, {w, nil}, {nil, b}, {nil, nil}} {
				for _, inPlace := range []bool{false, true} {
					dst := make([]uint16, n)
					if inPlace {
						dst = append(dst[:0], x...)
					}
					k.BF16Rows.Normalize(dst, map[bool][]uint16{false: x, true: dst}[inPlace], wb[0], wb[1], 10, 0.5)
					for i, h := range x {
						want := (bf(h) - 10) * 0.5
						if wb[0] != nil {
							want *= float64(wb[0][i])
						}
						terms := math.Abs(want) // what a bias may cancel down to near 0
						if wb[1] != nil {
							want += float64(wb[1][i])
							terms += math.Abs(float64(wb[1][i]))
						}
						// within 1.5 units of bfloat16's last place (2^-7 relative), plus the
						// float32 rounding of the terms (a fused or unfused multiply-add: arm64
						// fuses) where the bias cancels them
						require.InDelta(t, want, bf(dst[i]), 1.5*math.Abs(want)/128+2e-7*terms,
							"%s Normalize n=%d i=%d w=%v b=%v in place=%v", k.Name, n, i, wb[0] != nil, wb[1] != nil, inPlace)
					}
				}
			}
		}
	}
}

func randv(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * 2)
	}
	return v
}

func TestUseRejectsUnknown(t *testing.T) {
	require.Error(t, Use("sse9"))
	require.Equal(t, ISAs()[0], K().Name)
}

// Blocked QR's panel products, in every implementation, against float64:
// W += V^T C over a column chunk of C (leading dimensions past both V's
// columns and the chunk) for any
// row count, then C += V W for that count rounded up to the kernel's tile,
// widths of one tile to eight and jb of one tile row to 32.
func TestPanelProducts(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for _, k := range allTables(t) {
		tile, pr := 2*max(k.Lanes, 1), k.PanelRows
		for _, sh := range [][3]int{{1, 1, 1}, {7, 1, 2}, {33, 32, 3}, {130, 32, 8}, {3, 16, 1}} {
			jb, cw := (sh[1]+pr-1)/pr*pr, sh[2]*tile
			vtcRows, rows := sh[0], (sh[0]+pr-1)/pr*pr
			ld, ldv := cw+5, rows+3
			v, c := randv(rng, jb*ldv), randv(rng, rows*ld)
			w := randv(rng, jb*cw)
			want := make([]float64, jb*cw)
			for i, x := range w {
				want[i] = float64(x)
			}
			k.VtC(w, v, ldv, jb, c, ld, vtcRows, cw)
			for r := range vtcRows {
				for p := range jb {
					for x := range cw {
						want[p*cw+x] += float64(v[p*ldv+r]) * float64(c[r*ld+x])
					}
				}
			}
			for i, g := range w {
				require.InDelta(t, want[i], float64(g), 1e-5*float64(vtcRows+1), "%s VtC %v [%d]", k.Name, sh, i)
			}
			if pr > 1 { // a partial tile would reach past the slices: refused
				require.Panics(t, func() { k.VtC(w, v, ldv, jb-1, c, ld, vtcRows, cw) }, "%s VtC of jb %d", k.Name, jb-1)
				require.Panics(t, func() { k.AddVW(c, ld, rows-1, cw, v, ldv, jb, w) }, "%s AddVW of %d rows", k.Name, rows-1)
			}
			before := append([]float32(nil), c...)
			k.AddVW(c, ld, rows, cw, v, ldv, jb, w)
			for r := range rows {
				for x := range ld {
					i, wantC := r*ld+x, float64(before[r*ld+x])
					if x < cw {
						for p := range jb {
							wantC += float64(v[p*ldv+r]) * float64(w[p*cw+x])
						}
					}
					require.InDelta(t, wantC, float64(c[i]), 1e-4*float64(rows*jb)/8+1e-5, "%s AddVW %v [%d][%d]", k.Name, sh, r, x)
				}
			}
		}
	}
}
