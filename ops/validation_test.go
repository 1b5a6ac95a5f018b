// Package ops_test drives every op of every family through the same bad
// inputs: each failure must return the right status with a message naming
// the argument, and leave every output byte as it was.
package ops_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	"metalcore/ops/activation"
	"metalcore/ops/norm"
	"metalcore/ops/softmax"
	tu "metalcore/tests/testutil"
)

// Argument kinds: their shape (for x [rows, cols]) and dtype.
type kind int

const (
	kX    kind = iota // like x
	kCol              // [cols], x's dtype
	kRow              // [rows], float32
	kWork             // workspace, float32 [partials]
)

type arg struct {
	name     string
	kind     kind
	out, opt bool
}

type opSpec struct {
	name string
	args []arg
	call func(ts []*core.Tensor, enc unsafe.Pointer) error
}

const rows, cols = 3, 5

var (
	x     = arg{name: "x"}
	dy    = arg{name: "dy"}
	y     = arg{name: "y", out: true}
	dx    = arg{name: "dx", out: true}
	w     = arg{name: "weight", kind: kCol, opt: true}
	rstdO = arg{name: "rstd", kind: kRow, out: true, opt: true}
)

func specs() []opSpec {
	return []opSpec{
		{"rmsnorm_fwd", []arg{x, w, y, rstdO}, func(t []*core.Tensor, e unsafe.Pointer) error {
			return norm.RMSNormFwd(t[0], t[1], 1e-5, t[2], t[3], e)
		}},
		{"fused_add_rmsnorm_fwd", []arg{x, {name: "residual"}, w, y, {name: "residual_out", out: true}, rstdO},
			func(t []*core.Tensor, e unsafe.Pointer) error {
				return norm.FusedAddRMSNormFwd(t[0], t[1], t[2], 1e-5, t[3], t[4], t[5], e)
			}},
		{"rmsnorm_bwd", []arg{dy, x, w, {name: "rstd", kind: kRow}, dx, {name: "dweight", kind: kCol, out: true, opt: true},
			{name: "workspace", kind: kWork, out: true}}, func(t []*core.Tensor, e unsafe.Pointer) error {
			return norm.RMSNormBwd(t[0], t[1], t[2], t[3], t[4], t[5], t[6], e)
		}},
		{"layernorm_fwd", []arg{x, w, {name: "bias", kind: kCol, opt: true}, y, {name: "mean", kind: kRow, out: true, opt: true}, rstdO},
			func(t []*core.Tensor, e unsafe.Pointer) error {
				return norm.LayerNormFwd(t[0], t[1], t[2], 1e-5, t[3], t[4], t[5], e)
			}},
		{"layernorm_bwd", []arg{dy, x, w, {name: "mean", kind: kRow}, {name: "rstd", kind: kRow}, dx,
			{name: "dweight", kind: kCol, out: true, opt: true}, {name: "dbias", kind: kCol, out: true, opt: true},
			{name: "workspace", kind: kWork, out: true}}, func(t []*core.Tensor, e unsafe.Pointer) error {
			return norm.LayerNormBwd(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], e)
		}},
		{"softmax_fwd", []arg{x, y}, func(t []*core.Tensor, e unsafe.Pointer) error { return softmax.Fwd(t[0], t[1], e) }},
		{"softmax_bwd", []arg{dy, {name: "y"}, dx}, func(t []*core.Tensor, e unsafe.Pointer) error {
			return softmax.Bwd(t[0], t[1], t[2], e)
		}},
		{"gelu_fwd", []arg{x, y}, func(t []*core.Tensor, e unsafe.Pointer) error { return activation.GeluFwd(t[0], 1, t[1], e) }},
		{"gelu_bwd", []arg{dy, x, dx}, func(t []*core.Tensor, e unsafe.Pointer) error {
			return activation.GeluBwd(t[0], t[1], 0, t[2], e)
		}},
		{"silu_fwd", []arg{x, y}, func(t []*core.Tensor, e unsafe.Pointer) error { return activation.SiluFwd(t[0], t[1], e) }},
		{"silu_bwd", []arg{dy, x, dx}, func(t []*core.Tensor, e unsafe.Pointer) error {
			return activation.SiluBwd(t[0], t[1], t[2], e)
		}},
	}
}

// build makes valid tensors for every argument of op (dtype dt).
func build(op opSpec, dt core.DType) []*tu.Tensor {
	ts := make([]*tu.Tensor, len(op.args))
	for i, a := range op.args {
		switch a.kind {
		case kX:
			ts[i] = tu.New(dt, []int64{rows, cols})
		case kCol:
			ts[i] = tu.New(dt, []int64{cols})
		case kRow:
			ts[i] = tu.New(core.F32, []int64{rows})
		case kWork:
			ts[i] = tu.New(core.F32, []int64{2 * rows * cols})
		}
		if !a.out {
			vals := make([]float64, rows*cols)
			for j := range vals {
				vals[j] = 0.5 + float64(j%7)/7
			}
			ts[i].Set(vals[:len(ts[i].Values())])
		}
	}
	return ts
}

func ptrs(ts []*tu.Tensor) []*core.Tensor {
	ps := make([]*core.Tensor, len(ts))
	for i, t := range ts {
		if t != nil {
			ps[i] = t.Ptr()
		}
	}
	return ps
}

type mutation struct {
	name  string
	want  core.Status
	apply func(op opSpec, i int, ts []*tu.Tensor, ps []*core.Tensor) bool // false: not applicable
}

var huge = []int64{1 << 40, 1 << 40}

func mutations() []mutation {
	return []mutation{
		{"NULL", core.ErrInvalidArgument, func(op opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i] = nil
			return !op.args[i].opt
		}},
		{"float64", core.ErrUnsupportedDType, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].Code, ps[i].Bits = 2, 64
			return true
		}},
		{"other dtype", core.ErrUnsupportedDType, func(op opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			if ps[i].Code == 4 { // a 16-bit type other than the one the call uses
				ps[i].Code = 2
			} else {
				ps[i].Code, ps[i].Bits = 4, 16
			}
			return op.args[i].kind != kWork
		}},
		{"CUDA device", cudaMixStatus(), func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].DeviceType = core.DeviceCUDA
			return true
		}},
		{"unknown device", core.ErrUnsupportedDevice, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].DeviceType = 99
			return true
		}},
		{"other CPU device id", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].DeviceID = 1
			return true
		}},
		{"strided last dim", core.ErrUnsupportedLayout, func(_ opSpec, i int, ts []*tu.Tensor, ps []*core.Tensor) bool {
			st := make([]int64, len(ts[i].Shape))
			for d := range st {
				st[d] = 1
			}
			st[len(st)-1] = 2
			ps[i].Strides = &st[0]
			return true
		}},
		{"wrong shape", core.ErrInvalidArgument, func(op opSpec, i int, ts []*tu.Tensor, ps []*core.Tensor) bool {
			sh := append([]int64(nil), ts[i].Shape...)
			sh[len(sh)-1]-- // fewer elements: nothing is read past the allocation
			ps[i].Shape = &sh[0]
			return true
		}},
		{"ndim -1", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].NDim = -1
			return true
		}},
		{"ndim 99", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].NDim = 99
			return true
		}},
		{"NULL shape", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].Shape = nil
			return true
		}},
		{"NULL data", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].Data = nil
			return true
		}},
		{"size overflow", core.ErrInvalidArgument, func(op opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].NDim, ps[i].Shape = 2, &huge[0]
			return op.args[i].kind != kWork
		}},
		{"byte_offset wrapping around", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].ByteOffset = math.MaxUint64 - 4095 // data - 4096
			return true
		}},
		{"beyond user space", core.ErrInvalidArgument, func(_ opSpec, i int, _ []*tu.Tensor, ps []*core.Tensor) bool {
			ps[i].ByteOffset = 1 << 60
			return true
		}},
		{"stride spans overflowing together", core.ErrInvalidArgument, func(op opSpec, i int, ts []*tu.Tensor, ps []*core.Tensor) bool {
			// each dimension's span, (2-1) * (2^61 - 8), passes alone; their sum overflows
			shape := []int64{2, 2, 2, 2, 2, 2, ts[i].Shape[len(ts[i].Shape)-1]}
			strides := []int64{1<<61 - 8, 1<<61 - 8, 1<<61 - 8, 1<<61 - 8, 1<<61 - 8, 1<<61 - 8, 1}
			ps[i].NDim, ps[i].Shape, ps[i].Strides = 7, &shape[0], &strides[0]
			return op.args[i].kind != kWork
		}},
		{"negative size", core.ErrInvalidArgument, func(_ opSpec, i int, ts []*tu.Tensor, ps []*core.Tensor) bool {
			sh := append([]int64(nil), ts[i].Shape...)
			sh[0] = -3
			ps[i].Shape = &sh[0]
			return true
		}},
		{"partial overlap with an input", core.ErrInvalidArgument, func(op opSpec, i int, ts []*tu.Tensor, ps []*core.Tensor) bool {
			if !op.args[i].out {
				return false
			}
			for j, a := range op.args {
				if !a.out && a.kind == op.args[i].kind && ps[j] != nil {
					ps[i].Data = unsafe.Add(ps[j].Data, ts[j].DT.Size())
					ps[i].ByteOffset = ps[j].ByteOffset
					return true
				}
			}
			return false
		}},
	}
}

func TestBadInputs(t *testing.T) {
	for _, op := range specs() {
		for _, dt := range tu.DTypes {
			for i, a := range op.args {
				for _, m := range mutations() {
					ts := build(op, dt)
					ps := ptrs(ts)
					if !m.apply(op, i, ts, ps) {
						continue
					}
					want := m.want
					if a.kind == kWork && m.name == "wrong shape" {
						continue // a larger workspace is fine; a smaller one is tested below
					}
					if dt == core.F32 && m.name == "other dtype" &&
						((op.name == "softmax_fwd" && a.name == "x") || (op.name == "softmax_bwd" && a.name == "dx")) {
						continue // the upcast softmax and its gradient in x's dtype, valid (ops/softmax tests them)
					}
					checkFails(t, fmt.Sprintf("%s %s: %s %s", op.name, dt, a.name, m.name), op, ts, ps, nil, want, a.name)
				}
			}
			ts := build(op, dt)
			enc := unsafe.Pointer(&ts[0].Shape[0])
			checkFails(t, op.name+" with an encoder", op, ts, ptrs(ts), enc, core.ErrInvalidArgument, "encoder")
		}
	}
}

// checkFails runs op and requires status want, a message naming the
// argument, and every output unchanged.
func checkFails(t *testing.T, what string, op opSpec, ts []*tu.Tensor, ps []*core.Tensor, enc unsafe.Pointer, want core.Status, name string) {
	t.Helper()
	before := make([][]byte, len(ts))
	for j, tt := range ts {
		before[j] = tt.Bytes()
	}
	err := op.call(ps, enc)
	require.Equal(t, want, tu.Status(t, err), "%s: %v", what, err)
	require.Contains(t, err.Error(), name, what)
	for j, tt := range ts {
		require.Equal(t, before[j], tt.Bytes(), "%s: %s changed", what, op.args[j].name)
	}
}

// Special cases the generic mutations do not cover.
func TestBadInputsSpecific(t *testing.T) {
	get := func(name string) opSpec {
		for _, s := range specs() {
			if s.name == name {
				return s
			}
		}
		panic(name)
	}
	ts := build(get("rmsnorm_fwd"), core.F32)
	for _, eps := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		err := norm.RMSNormFwd(ts[0].Ptr(), ts[1].Ptr(), eps, ts[2].Ptr(), ts[3].Ptr(), nil)
		require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err))
		require.Contains(t, err.Error(), "eps")
	}
	// 0-d input to a row op
	x0 := tu.New(core.F32, nil)
	err := softmax.Fwd(x0.Ptr(), x0.Ptr(), nil)
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err))
	// bad GELU approximation
	g := build(get("gelu_fwd"), core.F32)
	err = activation.GeluFwd(g[0].Ptr(), 7, g[1].Ptr(), nil)
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err))
	require.Contains(t, err.Error(), "approximate")
	// an output aliasing an input it may not replace (y over weight)
	ts = build(get("rmsnorm_fwd"), core.F32)
	w1 := tu.New(core.F32, []int64{rows, cols})
	ts[2].T.Data, ts[2].T.ByteOffset = ts[0].T.Data, 0
	err = norm.RMSNormFwd(w1.Ptr(), ts[1].Ptr(), 1e-5, ts[2].Ptr(), nil, nil) // y aliases the old x, not the call's x: fine
	require.NoError(t, err)
	err = norm.RMSNormFwd(ts[0].Ptr(), ts[1].Ptr(), 1e-5, ts[0].Ptr(), ts[0].Ptr(), nil) // rstd over x
	require.Error(t, err)
	// dweight without weight; workspace too small
	b := get("rmsnorm_bwd")
	bt := build(b, core.F32)
	ps := ptrs(bt)
	ps[2] = nil
	checkFails(t, "dweight without weight", b, bt, ps, nil, core.ErrInvalidArgument, "dweight")
	bt = build(b, core.F32)
	ps = ptrs(bt)
	small := []int64{rows*cols - 1}
	ps[6].Shape = &small[0]
	checkFails(t, "small workspace", b, bt, ps, nil, core.ErrInvalidArgument, "workspace")
	bt = build(b, core.F32)
	ps = ptrs(bt)
	ps[6].Code, ps[6].Bits = 1, 8 // uint8 workspace of too few bytes
	checkFails(t, "small uint8 workspace", b, bt, ps, nil, core.ErrInvalidArgument, "workspace")
	// workspaces whose byte size overflows int64 (2^62 + 1 float32s is 4
	// bytes after wrapping)
	for _, n := range []int64{1<<62 + 256, 1<<62 + 1} {
		bt = build(b, core.F32)
		ps = ptrs(bt)
		ps[6].Shape = &n
		checkFails(t, fmt.Sprintf("workspace of %d floats", n), b, bt, ps, nil, core.ErrInvalidArgument, "overflows")
	}
	// outputs that overlap each other, and self-overlapping strides
	l := get("layernorm_fwd")
	lt := build(l, core.F32)
	lp := ptrs(lt)
	lp[5].Data = lp[4].Data
	checkFails(t, "rstd over mean", l, lt, lp, nil, core.ErrInvalidArgument, "overlaps")
	s := get("softmax_fwd")
	st := build(s, core.F32)
	sp := ptrs(st)
	zero := []int64{0, 1}
	sp[1].Strides = &zero[0]
	checkFails(t, "y with zero row stride", s, st, sp, nil, core.ErrInvalidArgument, "overlap")
}

// Empty tensors are valid and leave everything as it was.
func TestEmpty(t *testing.T) {
	for _, op := range specs() {
		ts := build(op, core.F32)
		for i, a := range op.args {
			if a.kind == kX || a.kind == kRow {
				ts[i] = tu.New(core.F32, []int64{0})
				if a.kind == kX {
					ts[i] = tu.New(core.F32, []int64{0, cols})
				}
			}
		}
		before := ts[len(ts)-1].Bytes()
		require.NoError(t, op.call(ptrs(ts), nil), op.name)
		require.Equal(t, before, ts[len(ts)-1].Bytes(), op.name)
		require.False(t, strings.Contains(op.name, " "))
	}
}

// cudaMixStatus is what one CUDA tensor among CPU ones gets: the backend is
// missing, or the devices disagree.
func cudaMixStatus() core.Status {
	if core.BackendAvailable(core.DeviceCUDA) {
		return core.ErrInvalidArgument
	}
	return core.ErrUnsupportedDevice
}
