package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// Interleave and Deinterleave at every width the lanes kernels use (8 and
// 16: eight at a time) and another, for fewer matrices than lanes, and
// sizes around the block.
func TestInterleave(t *testing.T) {
	for _, lanes := range []int{4, 8, 16} {
		for _, elems := range []int{1, 63, 64, 200} {
			mats := numbered(lanes, elems)
			a := make([]float32, elems*lanes)
			Interleave(a, mats, elems)
			for e := range elems {
				for l := range lanes {
					require.Equal(t, float32(l*10000+e), a[e*lanes+l], "lanes %d elems %d", lanes, elems)
				}
			}
			for _, count := range []int{lanes, lanes - 3} {
				out := make([][]float32, count)
				for l := range out {
					out[l] = make([]float32, elems)
				}
				Deinterleave(out, a, elems, lanes)
				require.Equal(t, mats[:count], out, fmt.Sprintf("lanes %d elems %d count %d", lanes, elems, count))
			}
		}
	}
}

// Every ISA's block transposition moves each element where the definition
// puts it, for element counts around its block, into poisoned outputs.
func TestLaneMoves(t *testing.T) {
	tested := 0
	for _, k := range allTables(t) {
		if k.Interleave == nil {
			continue
		}
		tested++
		lanes := k.Lanes
		for _, elems := range []int{1, lanes - 1, lanes, lanes + 1, 3*lanes + 5, 1024} {
			mats := numbered(lanes, elems)
			a := make([]float32, elems*lanes)
			for i := range a {
				a[i] = float32(math.NaN())
			}
			k.Interleave(a, mats, elems)
			for e := range elems {
				for l := range lanes {
					require.Equal(t, float32(l*10000+e), a[e*lanes+l], "%s elems %d", k.Name, elems)
				}
			}
			out := make([][]float32, lanes)
			for l := range out {
				out[l] = make([]float32, elems)
				for e := range out[l] {
					out[l][e] = -1
				}
			}
			k.Deinterleave(out, a, elems)
			require.Equal(t, mats, out, "%s elems %d", k.Name, elems)
		}
	}
	if len(isaTables()) > 0 {
		require.Positive(t, tested, "an ISA table without LaneMoves")
	}
}

// QVLanes multiplies each lane's matrices as float64 does, to rounding,
// into a poisoned output, at shapes with one row, one column and an odd
// count of each.
func TestQVLanes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	tested := 0
	for _, k := range allTables(t) {
		if k.QVLanes == nil {
			continue
		}
		tested++
		lanes := k.Lanes
		for _, s := range [][2]int{{1, 1}, {5, 1}, {7, 7}, {33, 16}, {32, 32}} {
			rows, cols := s[0], s[1]
			q, v := make([]float32, rows*cols*lanes), make([]float32, cols*cols*lanes)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			y := make([]float32, rows*cols*lanes)
			for i := range y {
				y[i] = float32(math.NaN())
			}
			k.QVLanes(y, q, v, rows, cols)
			for l := range lanes {
				for i := range rows {
					for j := range cols {
						var want, size float64
						for c := range cols {
							p := float64(q[(i*cols+c)*lanes+l]) * float64(v[(j*cols+c)*lanes+l])
							want, size = want+p, size+math.Abs(p)
						}
						got := float64(y[(j*rows+i)*lanes+l])
						require.InDelta(t, want, got, 1e-6*size, "%s %dx%d lane %d (%d, %d)", k.Name, rows, cols, l, i, j)
					}
				}
			}
		}
	}
	if len(isaTables()) > 0 {
		require.Positive(t, tested, "an ISA table without QVLanes")
	}
}

// numbered is lanes matrices of elems elements, element e of matrix l
// being l*10000 + e.
func numbered(lanes, elems int) [][]float32 {
	mats := make([][]float32, lanes)
	for l := range mats {
		mats[l] = make([]float32, elems)
		for e := range mats[l] {
			mats[l][e] = float32(l*10000 + e)
		}
	}
	return mats
}
