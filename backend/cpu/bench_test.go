package cpu

import (
	"testing"
)

// Per-primitive throughput on one L1-resident chunk, per implementation.
func BenchmarkPrimitives(b *testing.B) {
	x, y, out := make([]float32, Chunk), make([]float32, Chunk), make([]float32, Chunk)
	h := make([]uint16, Chunk)
	for i := range x {
		x[i], y[i] = float32(i%97)/50-1, float32(i%13)/7
	}
	for _, k := range tables {
		cases := map[string]func(){
			"SumSq":     func() { k.SumSq(x) },
			"ExpSum":    func() { k.ExpSum(out, x, 2) }, // at least every x
			"Normalize": func() { k.Normalize(out, x, y, nil, 0, 1.5) },
			"GeluErf":   func() { k.GeluErf(out, x) },
			"Silu":      func() { k.Silu(out, x) },
			"ToBF16":    func() { k.F32ToBF16(h, x) },
			"FromBF16":  func() { k.BF16ToF32(out, h) },
			"ToF16":     func() { k.F32ToF16(h, x) },
			"FromF16":   func() { k.F16ToF32(out, h) },
		}
		for name, f := range cases {
			b.Run(k.Name+"/"+name, func(b *testing.B) {
				b.SetBytes(Chunk * 4)
				for b.Loop() {
					f()
				}
			})
		}
	}
}

// QR's panel products in L2 on one thread, per implementation: 64
// reflectors over 256 rows of a 256-column chunk, as the blocked
// factorization runs them.
func BenchmarkPanelProducts(b *testing.B) {
	const rows, jb, cw = 256, 64, 256
	v, c, w := make([]float32, rows*jb), make([]float32, rows*cw), make([]float32, jb*cw)
	for i := range c {
		c[i] = float32(i%97)/50 - 1
	}
	for i := range v {
		v[i] = float32(i%13) / 7
	}
	for _, k := range tables {
		b.Run(k.Name+"/VtC", func(b *testing.B) {
			for b.Loop() {
				k.VtC(w, v, rows, jb, c, cw, rows, cw)
			}
			b.ReportMetric(2*rows*jb*cw*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(k.Name+"/AddVW", func(b *testing.B) {
			for b.Loop() {
				k.AddVW(c, cw, rows, cw, v, rows, jb, w)
			}
			b.ReportMetric(2*rows*jb*cw*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// Interleave and Deinterleave of one lanes group of 32 x 32 matrices in L2,
// per implementation with LaneMoves, against the eight-at-a-time loop they
// replace for the ISA's width.
func BenchmarkLaneMoves(b *testing.B) {
	const elems = 32 * 32
	for _, k := range tables {
		if k.Interleave == nil {
			continue
		}
		mats := make([][]float32, k.Lanes)
		for l := range mats {
			mats[l] = make([]float32, elems)
		}
		a := make([]float32, elems*k.Lanes)
		cases := map[string]func(){
			"Interleave":   func() { k.Interleave(a, mats, elems) },
			"Deinterleave": func() { k.Deinterleave(mats, a, elems) },
			"interleave8": func() {
				for g := 0; g < k.Lanes; g += 8 {
					Interleave8(a, k.Lanes, g, (*[8][]float32)(mats[g:g+8]), elems)
				}
			},
			"deinterleave8": func() {
				for g := 0; g < k.Lanes; g += 8 {
					deinterleave8((*[8][]float32)(mats[g:g+8]), a, k.Lanes, g, elems)
				}
			},
		}
		for name, f := range cases {
			b.Run(k.Name+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(a)) * 4)
				for b.Loop() {
					f()
				}
			})
		}
	}
}
