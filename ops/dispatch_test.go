package ops_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	"metalcore/ops/adamw"
	"metalcore/ops/qr"
	tu "metalcore/tests/testutil"
)

// A device whose backend is available but which an op has no
// implementation for gets MC_ERR_UNSUPPORTED_DEVICE naming the op and the
// device, after validation, with nothing written: never another device's
// kernel run on its memory. ROCm (DLPack's 10) stands in, its backend
// faked as present, owning any pointer.
func TestOpsWithoutAnImplementationForTheDevice(t *testing.T) {
	const rocm = 10
	core.RegisterBackend(rocm, func() error { return nil }, func(unsafe.Pointer, int) error { return nil })
	onROCm := func(ts []*tu.Tensor) []*core.Tensor {
		ps := ptrs(ts)
		for _, p := range ps {
			if p != nil {
				p.DeviceType = rocm
			}
		}
		return ps
	}
	check := func(t *testing.T, err error) {
		require.Error(t, err)
		require.Equal(t, core.ErrUnsupportedDevice, core.StatusOf(err), "%v", err)
		require.Contains(t, err.Error(), "has no ")
		require.Contains(t, err.Error(), " device type 10 implementation")
	}
	for _, op := range specs() {
		t.Run(op.name, func(t *testing.T) {
			ts := build(op, core.F32)
			for _, x := range ts {
				x.Poison()
			}
			before := make([][]byte, len(ts))
			for i, x := range ts {
				before[i] = append([]byte(nil), x.Bytes()...)
			}
			check(t, op.call(onROCm(ts), nil))
			for i, x := range ts {
				require.Equal(t, before[i], x.Bytes(), "%s changed", op.args[i].name)
			}
		})
	}
	t.Run("qr", func(t *testing.T) {
		a, q, r := tu.New(core.F32, []int64{4, 3}), tu.New(core.F32, []int64{4, 3}), tu.New(core.F32, []int64{3, 3})
		q.Poison()
		before := append([]byte(nil), q.Bytes()...)
		ps := onROCm([]*tu.Tensor{a, q, r})
		_, err := qr.WorkspaceSize(ps[0], qr.Reduced)
		check(t, err)
		check(t, qr.QR(ps[0], qr.Reduced, ps[1], ps[2], nil, nil))
		require.Equal(t, before, q.Bytes())
	})
	t.Run("adamw", func(t *testing.T) {
		p, g, m, v := tu.New(core.F32, []int64{7}), tu.New(core.F32, []int64{7}), tu.New(core.F32, []int64{7}), tu.New(core.F32, []int64{7})
		p.Poison()
		before := append([]byte(nil), p.Bytes()...)
		ps := onROCm([]*tu.Tensor{p, g, m, v})
		cfg := adamw.Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
		list := func(i int) unsafe.Pointer { return unsafe.Pointer(&ps[i]) }
		check(t, adamw.Step(&cfg, adamw.Lists{N: 1, Params: list(0), Grads: list(1), ExpAvgs: list(2), ExpAvgSqs: list(3)}, nil))
		require.Equal(t, before, p.Bytes())
	})
}
