// Package norm is the normalization family: RMSNorm (plain and fused with a
// residual add) and LayerNorm, forward and backward. It validates calls,
// and dispatches them to one implementation per device type (cpu.go,
// cuda.go); ref.go holds the float64 references the tests use.
package norm

import (
	"math"
	"unsafe"

	"metalcore/internal/core"
)

func checkEps(eps float32) error {
	if !(eps >= 0) || math.IsInf(float64(eps), 1) {
		return core.Errorf(core.ErrInvalidArgument, "eps is %g; it must be finite and >= 0", eps)
	}
	return nil
}

// rowInput registers the reduced input x and checks it has a last dimension.
func rowInput(c *core.Call, name string, t *core.Tensor) *core.View {
	x := c.In(name, t)
	c.Check(func() error { return core.WantRows(x) })
	return x
}

// The forward kernels per device type: rows of x normalized into y, with
// the optional weight w and bias b (LayerNorm), statistics mean (LayerNorm)
// and rstd saved where given.
type rowFwd func(x, w, b, y, mean, rstd *core.View, eps float32, enc unsafe.Pointer) error

// fusedFwd: ro = x + res, y = rmsnorm(ro) * w.
type fusedFwd func(x, res, w, y, ro, rstd *core.View, eps float32, enc unsafe.Pointer) error

var (
	rmsnormFwd         = core.NewDispatch[rowFwd]("rmsnorm forward")
	fusedAddRMSNormFwd = core.NewDispatch[fusedFwd]("fused add + rmsnorm forward")
	layernormFwd       = core.NewDispatch[rowFwd]("layernorm forward")
)

// RMSNormFwd: y = x / sqrt(mean(x^2) + eps) * weight, rstd saved per row.
func RMSNormFwd(x, weight *core.Tensor, eps float32, y, rstd *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := rowInput(c, "x", x)
	wv := c.OptIn("weight", weight)
	yv := c.Out("y", y)
	rv := c.OptOut("rstd", rstd)
	c.Check(func() error { return checkEps(eps) })
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.Check(func() error { return core.PerColumn(xv, wv) })
	c.Check(func() error { return core.RowStats(rv, xv) })
	c.AllowInPlace(yv, xv)
	f, err := core.Validated(c, enc, rmsnormFwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(xv, wv, nil, yv, nil, rv, eps, enc)
}

// FusedAddRMSNormFwd: residual_out = x + residual (rounded to the dtype),
// y = rmsnorm(residual_out) * weight. The statistics use the rounded sum,
// so the result equals the unfused add followed by RMSNorm.
func FusedAddRMSNormFwd(x, residual, weight *core.Tensor, eps float32, y, residualOut, rstd *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := rowInput(c, "x", x)
	resv := c.In("residual", residual)
	wv := c.OptIn("weight", weight)
	yv := c.Out("y", y)
	rov := c.Out("residual_out", residualOut)
	rv := c.OptOut("rstd", rstd)
	c.Check(func() error { return checkEps(eps) })
	c.Check(func() error { return core.LikeX(xv, resv, yv, rov) })
	c.Check(func() error { return core.PerColumn(xv, wv) })
	c.Check(func() error { return core.RowStats(rv, xv) })
	c.AllowInPlace(yv, xv)
	c.AllowInPlace(rov, resv)
	f, err := core.Validated(c, enc, fusedAddRMSNormFwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(xv, resv, wv, yv, rov, rv, eps, enc)
}

// LayerNormFwd: y = (x - mean) * rstd * weight + bias, mean and rstd saved.
func LayerNormFwd(x, weight, bias *core.Tensor, eps float32, y, mean, rstd *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := rowInput(c, "x", x)
	wv := c.OptIn("weight", weight)
	bv := c.OptIn("bias", bias)
	yv := c.Out("y", y)
	mv := c.OptOut("mean", mean)
	rv := c.OptOut("rstd", rstd)
	c.Check(func() error { return checkEps(eps) })
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.Check(func() error { return core.PerColumn(xv, wv, bv) })
	c.Check(func() error { return core.RowStats(mv, xv) })
	c.Check(func() error { return core.RowStats(rv, xv) })
	c.AllowInPlace(yv, xv)
	f, err := core.Validated(c, enc, layernormFwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(xv, wv, bv, yv, mv, rv, eps, enc)
}
