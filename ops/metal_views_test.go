package ops_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	"metalcore/ops/adamw"
)

// A Metal tensor's data is its id<MTLBuffer> and byte_offset is into that
// buffer (DLPack's convention), so two Metal views overlap only within one
// buffer: handles are objects whose addresses say nothing of the memory,
// and offsets in different buffers never collide. This holds for the
// pairwise check and for AdamW's sorted one. (The backend is faked as
// present; handles are any distinct pointers.)
func TestMetalViewsOverlapByBuffer(t *testing.T) {
	var owned []unsafe.Pointer // what the backend was asked about
	core.RegisterBackend(core.DeviceMetal, func() error { return nil }, func(p unsafe.Pointer, _ int) error {
		owned = append(owned, p)
		return nil
	})
	// handles outside Go's heap, as Objective-C objects are, 64 bytes apart
	bufA, bufB := unsafe.Add(nil, 0x10000), unsafe.Add(nil, 0x10040)
	bufC, bufD := unsafe.Add(nil, 0x10008), unsafe.Add(nil, 0x10048)
	shape := []int64{64} // 256 bytes of float32
	tensor := func(buf unsafe.Pointer, offset uint64) *core.Tensor {
		return &core.Tensor{Data: buf, DeviceType: core.DeviceMetal, NDim: 1, Code: 2, Bits: 32, Lanes: 1,
			Shape: &shape[0], ByteOffset: offset}
	}
	view := func(name string, buf unsafe.Pointer, offset uint64) *core.View {
		var v core.View
		require.NoError(t, core.Check(&v, name, tensor(buf, offset)))
		return &v
	}
	// the handles' addresses overlap by 192 bytes: not the tensors
	require.NoError(t, core.CheckOverlap([]*core.View{view("x", bufA, 0)}, []*core.View{view("y", bufB, 0)}))
	// one buffer: offsets 0 and 128 overlap, 0 and 256 do not
	err := core.CheckOverlap([]*core.View{view("x", bufA, 0)}, []*core.View{view("y", bufA, 128)})
	require.ErrorContains(t, err, "y partially overlaps x")
	require.NoError(t, core.CheckOverlap([]*core.View{view("x", bufA, 0)}, []*core.View{view("y", bufA, 256)}))
	x, y := view("x", bufA, 512), view("y", bufA, 512) // in place: one offset of one buffer
	require.NoError(t, core.CheckOverlap([]*core.View{x}, []*core.View{y}, core.Alias{Out: y, In: x}))
	require.ErrorContains(t, core.CheckOverlap([]*core.View{x}, []*core.View{y}), "y aliases x")
	err = core.CheckOverlap(nil, []*core.View{view("y", bufA, 0), view("z", bufA, 252)})
	require.ErrorContains(t, err, "z overlaps y")
	// alignment is the offset's
	var v core.View
	require.ErrorContains(t, core.Check(&v, "x", tensor(bufA, 2)), "not aligned to its 4-byte elements")
	// the backend is asked about the buffer, not handle + offset
	owned = nil
	require.NoError(t, core.CheckOwned(view("x", bufB, 512)))
	require.Equal(t, []unsafe.Pointer{bufB}, owned)

	// AdamW: one tensor at offset 0 of each of four buffers passes
	// validation (then finds no Metal runtime on this machine), asking the backend
	// about each buffer, every call; two overlapping in one buffer do not
	step := func(ts ...*core.Tensor) error {
		cfg := adamw.Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
		list := func(i int) unsafe.Pointer { return unsafe.Pointer(&ts[i]) }
		return adamw.Step(&cfg, adamw.Lists{N: 1, Params: list(0), Grads: list(1), ExpAvgs: list(2), ExpAvgSqs: list(3)}, fakeEncoder)
	}
	for range 2 {
		owned = nil
		err = step(tensor(bufA, 0), tensor(bufB, 0), tensor(bufC, 0), tensor(bufD, 0))
		require.Equal(t, core.ErrUnsupportedDevice, core.StatusOf(err), "%v", err)
		require.ElementsMatch(t, []unsafe.Pointer{bufA, bufB, bufC, bufD}, owned)
	}
	err = step(tensor(bufA, 0), tensor(bufB, 0), tensor(bufC, 0), tensor(bufC, 128))
	require.ErrorContains(t, err, "exp_avg_sqs[0] overlaps exp_avgs[0]")
	err = step(tensor(bufA, 0), tensor(bufB, 0), tensor(bufC, 0), tensor(bufC, 256)) // adjacent in one buffer
	require.Equal(t, core.ErrUnsupportedDevice, core.StatusOf(err), "%v", err)
}
