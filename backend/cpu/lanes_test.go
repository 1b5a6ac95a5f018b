package cpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Interleave and Deinterleave at every width the lanes kernels use (8 and
// 16: eight at a time) and another, for fewer matrices than lanes, and
// sizes around the block.
func TestInterleave(t *testing.T) {
	for _, lanes := range []int{4, 8, 16} {
		for _, elems := range []int{1, 63, 64, 200} {
			mats := make([][]float32, lanes)
			for l := range mats {
				mats[l] = make([]float32, elems)
				for e := range mats[l] {
					mats[l][e] = float32(l*1000 + e)
				}
			}
			a := make([]float32, elems*lanes)
			Interleave(a, mats, elems)
			for e := range elems {
				for l := range lanes {
					require.Equal(t, float32(l*1000+e), a[e*lanes+l], "lanes %d elems %d", lanes, elems)
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
