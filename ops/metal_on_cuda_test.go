//go:build linux && cgo

package ops_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cuda"
	"metalcore/backend/metal"
	"metalcore/internal/core"
	"metalcore/ops/activation"
	"metalcore/ops/norm"
	"metalcore/ops/qr"
	"metalcore/ops/softmax"
	tu "metalcore/tests/testutil"
)

// cudaRuntime runs Metal plans through the CUDA backend: the same kernel
// sources, launched with each command's grid, threadgroup size, dynamic
// memory and bindings (a buffer handle is a device pointer, bound at its
// offset). So the numerics of the Metal schedules — a threadgroup a row,
// the fixed backward split, QR's one-threadgroup panels — are checked on a
// GPU this project has. AdamW's Metal batch (64 tensors) is not CUDA's
// kernel's layout, so AdamW is left to the planning tests.
type cudaRuntime struct{}

func (cudaRuntime) Available() error                               { return nil }
func (cudaRuntime) MaxThreads(unsafe.Pointer, string) (int, error) { return 1024, nil }
func (cudaRuntime) GPUAddress(b unsafe.Pointer) (uint64, error)    { return uint64(uintptr(b)), nil }
func (cudaRuntime) Prepare(unsafe.Pointer) error                   { return nil }
func (cudaRuntime) Encode(_ unsafe.Pointer, cmds []metal.Command) error {
	for _, c := range cmds {
		n := len(c.Buffers) + len(c.Values)
		for _, v := range c.Values {
			if v.Bound { // the Metal entry's mask: no parameter of the CUDA kernel
				n--
			}
		}
		words := make([]uint64, n)
		for _, b := range c.Buffers {
			if !b.Absent {
				words[b.Index] = uint64(uintptr(b.Buffer)) + b.Offset
			}
		}
		for _, v := range c.Values {
			if v.Bound {
				continue
			}
			switch len(v.Data) {
			case 4:
				words[v.Index] = uint64(binary.LittleEndian.Uint32(v.Data))
			case 8:
				words[v.Index] = binary.LittleEndian.Uint64(v.Data)
			default:
				return fmt.Errorf("%s: a %d-byte value", c.Kernel, len(v.Data))
			}
		}
		if err := cuda.LaunchShared(0, nil, c.Kernel, c.Groups, c.Threads, c.GroupMemory, words...); err != nil {
			return err
		}
	}
	return nil
}

// Every op but AdamW through its Metal plan, run on CUDA, against the same
// op on the CUDA backend, on the same inputs.
func TestMetalPlansOnCUDA(t *testing.T) {
	if n, err := cuda.Devices(); err != nil || n == 0 {
		t.Skipf("no CUDA device to run the Metal plans on: %v", err)
	}
	metal.Use(cudaRuntime{})
	t.Cleanup(func() { metal.Use(nil) })
	asMetal := func(x *tu.Tensor) *core.Tensor {
		if x == nil {
			return nil
		}
		m := x.T
		m.DeviceType = core.DeviceMetal
		return &m
	}
	asCUDA := func(x *tu.Tensor) *core.Tensor {
		if x == nil {
			return nil
		}
		return x.Ptr()
	}
	rng := tu.RNG(t)
	// both runs call once through the CUDA backend and once through the
	// Metal plans (fresh outputs of the given shapes each), then compare
	// every output.
	both := func(t *testing.T, what string, dt core.DType, outs [][]int64, tol float64,
		call func(on func(*tu.Tensor) *core.Tensor, out []*tu.Tensor, enc unsafe.Pointer) error) {
		var got [2][][]float64
		for run, on := range []func(*tu.Tensor) *core.Tensor{asCUDA, asMetal} {
			ts := make([]*tu.Tensor, len(outs))
			for i, sh := range outs {
				odt := dt
				if sh[0] < 0 { // a float32 output
					odt, sh = core.F32, sh[1:]
				}
				ts[i] = tu.CUDA.New(odt, sh, tu.Offset(1))
			}
			enc := unsafe.Pointer(nil)
			if run == 1 {
				enc = fakeEncoder
			}
			require.NoError(t, call(on, ts, enc), what)
			for _, o := range ts {
				got[run] = append(got[run], o.Values())
			}
		}
		for i := range outs {
			tu.CloseScaled(t, fmt.Sprintf("%s output %d", what, i), got[1][i], got[0][i], tol, 1)
		}
	}
	t.Run("cuda", func(t *testing.T) {
		for _, dt := range tu.DTypes {
			for _, sh := range [][]int64{{1, 1}, {3, 33}, {7, 4099}, {2, 70000}} {
				rows, cols := sh[0], sh[1]
				in := func(shape ...int64) *tu.Tensor {
					x := tu.CUDA.New(dt, shape, tu.Offset(1))
					x.Rand(rng, 1)
					return x
				}
				x, w, b, dy := in(sh...), in(cols), in(cols), in(sh...)
				name := fmt.Sprintf("%s %v", dt, sh)
				tol := tu.Tol(dt)
				stat := []int64{-1, rows}
				both(t, "rmsnorm "+name, dt, [][]int64{sh, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.RMSNormFwd(on(x), on(w), 1e-6, on(o[0]), on(o[1]), e)
				})
				both(t, "layernorm "+name, dt, [][]int64{sh, stat, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.LayerNormFwd(on(x), on(w), on(b), 1e-5, on(o[0]), on(o[1]), on(o[2]), e)
				})
				mean, rstd := tu.CUDA.New(core.F32, []int64{rows}), tu.CUDA.New(core.F32, []int64{rows})
				require.NoError(t, norm.LayerNormFwd(x.Ptr(), w.Ptr(), b.Ptr(), 1e-5, tu.CUDA.New(dt, sh).Ptr(), mean.Ptr(), rstd.Ptr(), nil))
				both(t, "layernorm backward "+name, dt, [][]int64{sh, {cols}, {cols}}, 4*tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					bytes, err := norm.LayerNormBwdWorkspace(on(x))
					if err != nil {
						return err
					}
					ws := tu.CUDA.New(core.F32, []int64{bytes / 4})
					return norm.LayerNormBwd(on(dy), on(x), on(w), on(mean), on(rstd), on(o[0]), on(o[1]), on(o[2]), on(ws), e)
				})
				both(t, "fused add "+name, dt, [][]int64{sh, sh, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.FusedAddRMSNormFwd(on(x), on(dy), on(w), 1e-6, on(o[0]), on(o[1]), on(o[2]), e)
				})
				both(t, "softmax "+name, dt, [][]int64{sh}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return softmax.Fwd(on(x), on(o[0]), e)
				})
				both(t, "softmax backward "+name, dt, [][]int64{sh}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return softmax.Bwd(on(dy), on(x), on(o[0]), e)
				})
				both(t, "gelu backward "+name, dt, [][]int64{sh}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return activation.GeluBwd(on(dy), on(x), activation.GeluTanh, on(o[0]), e)
				})
				both(t, "silu "+name, dt, [][]int64{sh}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return activation.SiluFwd(on(x), on(o[0]), e)
				})
			}
		}
		// QR: qr_cols on both; cols128 on CUDA against the blocked path on
		// Metal (its reflectors are over 32 KB); CUDA's panel groups
		// against Metal's one threadgroup a matrix
		for _, c := range []struct {
			batch, m, n int64
			mode        int32
		}{{5, 7, 4, qr.Reduced}, {2, 100, 100, qr.Reduced}, {1, 300, 200, qr.Complete}, {2, 600, 96, qr.Reduced}} {
			a := tu.CUDA.New(core.F32, []int64{c.batch, c.m, c.n})
			a.Rand(rng, 1)
			k := min(c.m, c.n)
			qc := k
			if c.mode == qr.Complete {
				qc = c.m
			}
			both(t, fmt.Sprintf("qr %+v", c), core.F32, [][]int64{{c.batch, c.m, qc}, {c.batch, qc, c.n}}, 1e-4,
				func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					bytes, err := qr.WorkspaceSize(on(a), c.mode)
					if err != nil {
						return err
					}
					var ws *tu.Tensor
					if bytes > 0 {
						ws = tu.CUDA.New(core.F32, []int64{bytes / 4})
					}
					return qr.QR(on(a), c.mode, on(o[0]), on(o[1]), on(ws), e)
				})
		}
	})
}
