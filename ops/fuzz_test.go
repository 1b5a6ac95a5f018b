package ops_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
)

// FuzzValidation feeds every op descriptors built from fuzz bytes: ndim,
// shapes, strides (possibly negative or zero), dtypes, devices, NULLs, byte
// offsets, and tensors sharing one arena so overlaps happen. Whatever
// validation accepts runs for real, inside the arena. Nothing may panic,
// every status must be a known one, and every failure must say why.
func FuzzValidation(f *testing.F) {
	f.Add(uint8(0), []byte{2, 3, 5, 0, 0, 2, 0, 1, 5, 0})
	f.Add(uint8(1), []byte{2, 1, 7, 1, 2, 0, 3, 0, 0, 0, 9, 9, 9})
	f.Add(uint8(4), []byte{3, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add(uint8(7), []byte{1, 4, 0, 8, 0, 255, 255, 0, 0, 0})
	f.Add(uint8(9), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(2), []byte{4, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	arena := make([]float32, 1<<16)
	mid := unsafe.Pointer(&arena[len(arena)/2])
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		op := specs()[int(which)%len(specs())]
		next := func() int {
			if len(b) == 0 {
				return 0
			}
			v := int(b[0])
			b = b[1:]
			return v
		}
		ts := make([]*core.Tensor, len(op.args))
		for i := range op.args {
			flags := next()
			if flags&1 != 0 {
				continue // NULL
			}
			nd := next() % 5
			shape, strides := make([]int64, nd), make([]int64, nd)
			for d := range nd {
				shape[d] = int64(next() % 7)
				strides[d] = int64(next()%17) - 8
			}
			t := &core.Tensor{
				Data: unsafe.Add(mid, (next()%64-32)*2), DeviceType: core.DeviceCPU, NDim: int32(nd), Lanes: 1,
				Code: []uint8{2, 2, 4, 1, 2}[flags>>1%5], Bits: []uint8{32, 16, 16, 8, 64}[flags>>1%5],
				ByteOffset: uint64(next() % 8 * 2),
			}
			if flags&16 != 0 {
				t.DeviceType = int32(next() % 10)
			}
			if nd > 0 {
				t.Shape = &shape[0]
				if flags&32 == 0 {
					t.Strides = &strides[0]
				}
			}
			ts[i] = t
		}
		err := op.call(ts, nil)
		st := core.StatusOf(err)
		require.True(t, st >= core.OK && st <= core.ErrInternal, "status %d", st)
		require.NotEqual(t, core.ErrInternal, st, "%v", err)
		if err != nil {
			require.NotEmpty(t, err.Error())
		}
	})
}
