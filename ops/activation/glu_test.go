package activation

import (
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// gluRefs are each kind's activation and its derivative times dy.
var gluRefs = [3]struct {
	name string
	act  func(x float64) float64
	grad func(dy, x float64) float64
}{
	SwiGLU:    {"swiglu", RefSilu, RefSiluGrad},
	GeGLU:     {"geglu", func(x float64) float64 { return RefGelu(x, GeluErf) }, func(dy, x float64) float64 { return RefGeluGrad(dy, x, GeluErf) }},
	GeGLUTanh: {"geglu tanh", func(x float64) float64 { return RefGelu(x, GeluTanh) }, func(dy, x float64) float64 { return RefGeluGrad(dy, x, GeluTanh) }},
}

// refusedStrided: a strided case is refused (the gated ops take contiguous
// tensors on every backend), with nothing to compare.
func refusedStrided(t *testing.T, c tu.Case, err error) bool {
	t.Helper()
	if c.NonContiguous() {
		require.Equal(t, core.ErrUnsupportedLayout, tu.Status(t, err), "%v: %v", c, err)
		return true
	}
	require.NoError(t, err, c)
	return false
}

func TestGatedForward(t *testing.T) {
	tu.Cases(t, shapes, func(t *testing.T, c tu.Case) {
		for kind, ref := range gluRefs {
			for _, into := range []string{"y", "gate", "up"} {
				if (into != "y") != c.InPlace {
					continue
				}
				rng := tu.RNG(t)
				g, u := c.New(c.Shape, 0), c.New(c.Shape, 0)
				gs, us := g.Rand(rng, 3), u.Rand(rng, 1)
				y := map[string]*tu.Tensor{"y": c.New(c.Shape, 0), "gate": g, "up": u}[into]
				if refusedStrided(t, c, GluFwd(g.Ptr(), u.Ptr(), int32(kind), y.Ptr(), nil)) {
					continue
				}
				want := make([]float64, len(gs))
				for i := range gs {
					want[i] = ref.act(gs[i]) * us[i]
				}
				tu.CloseScaled(t, ref.name+" into "+into+" "+c.String(), y.Values(), want, tol(c.DT), 1)
				require.True(t, y.PaddingPoisoned(), "%s %v: wrote outside y's elements", ref.name, c)
			}
		}
	})
}

func TestGatedBackward(t *testing.T) {
	tu.Cases(t, shapes, func(t *testing.T, c tu.Case) {
		for kind, ref := range gluRefs {
			rng := tu.RNG(t)
			dy, g, u := c.New(c.Shape, 0), c.New(c.Shape, 0), c.New(c.Shape, 0)
			dys, gs, us := dy.Rand(rng, 1), g.Rand(rng, 3), u.Rand(rng, 1)
			dg, du := c.New(c.Shape, 0), c.New(c.Shape, 0)
			if c.InPlace { // the gradients over their own inputs
				dg, du = g, u
			}
			if refusedStrided(t, c, GluBwd(dy.Ptr(), g.Ptr(), u.Ptr(), int32(kind), dg.Ptr(), du.Ptr(), nil)) {
				continue
			}
			wantG, wantU := make([]float64, len(gs)), make([]float64, len(gs))
			for i := range gs {
				wantG[i] = ref.grad(dys[i]*us[i], gs[i])
				wantU[i] = ref.act(gs[i]) * dys[i]
			}
			tu.CloseScaled(t, ref.name+" dgate "+c.String(), dg.Values(), wantG, tol(c.DT), 1)
			tu.CloseScaled(t, ref.name+" dup "+c.String(), du.Values(), wantU, tol(c.DT), 1)
		}
	})
}

func TestGatedRefusals(t *testing.T) {
	g, u, y := tu.New(core.F32, []int64{3, 8}), tu.New(core.F32, []int64{3, 8}), tu.New(core.F32, []int64{3, 8})
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, GluFwd(g.Ptr(), u.Ptr(), 3, y.Ptr(), nil)))
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, GluFwd(g.Ptr(), tu.New(core.F32, []int64{3, 7}).Ptr(), 0, y.Ptr(), nil)))
	require.Equal(t, core.ErrUnsupportedDType, tu.Status(t, GluFwd(g.Ptr(), tu.New(core.BF16, []int64{3, 8}).Ptr(), 0, y.Ptr(), nil)))
	dg := tu.New(core.F32, []int64{3, 8})
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, GluBwd(y.Ptr(), g.Ptr(), u.Ptr(), -1, dg.Ptr(), u.Ptr(), nil)))
	// dgate over up, or both gradients over one tensor: refused
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, GluBwd(y.Ptr(), g.Ptr(), u.Ptr(), 0, u.Ptr(), dg.Ptr(), nil)))
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, GluBwd(y.Ptr(), g.Ptr(), u.Ptr(), 0, dg.Ptr(), dg.Ptr(), nil)))
}
