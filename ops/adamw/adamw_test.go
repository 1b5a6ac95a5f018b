package adamw

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// set is the tensor lists of one call and the float64 mirror the reference
// steps.
type set struct {
	p, g, m, v, x      []*tu.Tensor
	pp, gp, mp, vp, xp []*core.Tensor
	rp, rm, rv, rx     [][]float64
}

func newSet(t testing.TB, b tu.Backend, dt core.DType, sizes []int64, amsgrad bool) *set {
	s := &set{}
	rng := tu.RNG(t)
	for _, n := range sizes {
		sh := []int64{n}
		p := b.New(dt, sh)
		s.rp = append(s.rp, p.Rand(rng, 1))
		s.p = append(s.p, p)
		s.g = append(s.g, b.New(dt, sh))
		for _, st := range []*[]*tu.Tensor{&s.m, &s.v} {
			*st = append(*st, b.New(core.F32, sh).Set(make([]float64, n)))
		}
		s.rm, s.rv = append(s.rm, make([]float64, n)), append(s.rv, make([]float64, n))
		if amsgrad {
			s.x = append(s.x, b.New(core.F32, sh).Set(make([]float64, n)))
			s.rx = append(s.rx, make([]float64, n))
		}
	}
	ptrs := func(ts []*tu.Tensor) []*core.Tensor {
		out := make([]*core.Tensor, len(ts))
		for i, x := range ts {
			out[i] = x.Ptr()
		}
		return out
	}
	s.pp, s.gp, s.mp, s.vp, s.xp = ptrs(s.p), ptrs(s.g), ptrs(s.m), ptrs(s.v), ptrs(s.x)
	return s
}

func list(ts []*core.Tensor) unsafe.Pointer {
	if len(ts) == 0 {
		return nil
	}
	return unsafe.Pointer(&ts[0])
}

func (s *set) lists() Lists {
	return Lists{N: int64(len(s.pp)), Params: list(s.pp), Grads: list(s.gp), ExpAvgs: list(s.mp),
		ExpAvgSqs: list(s.vp), MaxExpAvgSqs: list(s.xp)}
}

func (s *set) bytes() [][]byte {
	var out [][]byte
	for _, ts := range [][]*tu.Tensor{s.p, s.g, s.m, s.v, s.x} {
		for _, x := range ts {
			out = append(out, x.Bytes())
		}
	}
	return out
}

var sizes = []int64{0, 1, 7, 33, 1000, 4099, 1}

// 50 steps against the float64 reference, which rounds the parameter to its
// dtype after each step as the stored parameter is (state stays float32 in
// the kernel, float64 in the reference).
func TestTrajectory(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			for _, cfg := range []Config{
				{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
				{LR: 3e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0},
				{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, AMSGrad: 1},
				{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Maximize: 1},
			} {
				what := fmt.Sprintf("%s %+v", dt, cfg)
				s := newSet(t, b, dt, sizes, cfg.AMSGrad != 0)
				rng := tu.RNG(t)
				for step := int64(1); step <= 50; step++ {
					cfg.Step = step
					for i := range s.p {
						gv := s.g[i].Rand(rng, 1)
						var x []float64
						if s.rx != nil {
							x = s.rx[i]
						}
						RefStep(&cfg, s.rp[i], gv, s.rm[i], s.rv[i], x)
						for j := range s.rp[i] {
							s.rp[i][j] = tu.Round(dt, s.rp[i][j])
						}
					}
					require.NoError(t, Step(&cfg, s.lists(), nil), what)
				}
				for i := range s.p {
					tol := 1e-4
					if dt != core.F32 {
						tol = 4 * tu.Tol(dt) // a rounding that differs once persists
					}
					tu.CloseScaled(t, what+" param", s.p[i].Values(), s.rp[i], tol, 1)
					tu.CloseScaled(t, what+" exp_avg", s.m[i].Values(), s.rm[i], 1e-3, 0.1)
					tu.CloseScaled(t, what+" exp_avg_sq", s.v[i].Values(), s.rv[i], 1e-3, 1e-3)
				}
			}
		}
	})
}

func TestHyperParameters(t *testing.T) {
	good := Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	s := newSet(t, tu.CPU, core.F32, []int64{5}, false)
	for _, c := range []func(*Config){
		func(c *Config) { c.LR = -1 }, func(c *Config) { c.LR = math.NaN() }, func(c *Config) { c.Beta1 = 1 },
		func(c *Config) { c.Beta2 = -0.1 }, func(c *Config) { c.Eps = -1e-8 }, func(c *Config) { c.WeightDecay = -1 },
		func(c *Config) { c.Step = 0 }, func(c *Config) { c.Eps = math.Inf(1) },
	} {
		cfg := good
		c(&cfg)
		before := s.bytes()
		err := Step(&cfg, s.lists(), nil)
		require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err), "%+v", cfg)
		require.Equal(t, before, s.bytes())
	}
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, Step(nil, s.lists(), nil)))
	require.NoError(t, Step(&good, Lists{}, nil)) // no tensors
}

// A bad tensor anywhere leaves every tensor untouched and is named.
func TestAllOrNothing(t *testing.T) {
	cfg := Config{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 1}
	for _, c := range []struct {
		name, mention string
		want          core.Status
		spoil         func(s *set)
	}{
		{"state not float32", "exp_avgs[3]", core.ErrUnsupportedDType, func(s *set) { s.mp[3] = tu.New(core.BF16, []int64{33}).Ptr() }},
		{"grad of another dtype", "grads[5]", core.ErrUnsupportedDType, func(s *set) { s.gp[5] = tu.New(core.BF16, []int64{4099}).Ptr() }},
		{"wrong shape", "exp_avg_sqs[4]", core.ErrInvalidArgument, func(s *set) { s.vp[4] = tu.New(core.F32, []int64{999}).Ptr() }},
		{"NULL tensor", "params[6]", core.ErrInvalidArgument, func(s *set) { s.pp[6] = nil }},
		{"non-contiguous", "params[4]", core.ErrUnsupportedLayout, func(s *set) {
			s.pp[4] = tu.New(core.F32, []int64{1000, 1}, tu.RowPad(1)).Ptr()
			s.gp[4], s.mp[4], s.vp[4] = tu.New(core.F32, []int64{1000, 1}).Ptr(), tu.New(core.F32, []int64{1000, 1}).Ptr(), tu.New(core.F32, []int64{1000, 1}).Ptr()
		}},
		{"aliasing", "overlaps", core.ErrInvalidArgument, func(s *set) { s.mp[2] = s.vp[2] }},
		{"CUDA tensor", "", core.ErrUnsupportedDevice, func(s *set) {
			x := *s.pp[1]
			x.DeviceType = core.DeviceCUDA
			s.pp[1] = &x
		}},
	} {
		s := newSet(t, tu.CPU, core.F32, sizes, false)
		for _, g := range s.g {
			g.Rand(tu.RNG(t), 1)
		}
		c.spoil(s)
		before := s.bytes()
		err := Step(&cfg, s.lists(), nil)
		if c.name == "CUDA tensor" && core.BackendAvailable(core.DeviceCUDA) {
			c.want = core.ErrInvalidArgument // CPU and CUDA mixed
		}
		require.Equal(t, c.want, tu.Status(t, err), "%s: %v", c.name, err)
		require.Contains(t, err.Error(), c.mention, c.name)
		require.Equal(t, before, s.bytes(), "%s: something was written", c.name)
	}
}

// noOverlap with lists in and out of address order, with and without an
// overlap between lists.
func TestNoOverlap(t *testing.T) {
	// two lists, params then grads per parameter: offsets and sizes in
	// float32 elements (size 0: an empty tensor, its extent [0, 0))
	for _, c := range []struct {
		name    string
		extents [][2]uintptr // p0, g0, p1, g1, p2, g2
		overlap bool
	}{
		{"in order", [][2]uintptr{{0, 10}, {100, 10}, {10, 10}, {110, 10}, {20, 10}, {120, 10}}, false},
		{"in order, grads[1] over params[2]", [][2]uintptr{{0, 10}, {100, 10}, {10, 10}, {25, 10}, {30, 10}, {120, 10}}, true},
		{"out of order", [][2]uintptr{{20, 10}, {100, 10}, {0, 10}, {120, 10}, {10, 10}, {110, 10}}, false},
		{"out of order, params[0] over grads[2]", [][2]uintptr{{105, 10}, {200, 10}, {0, 10}, {120, 10}, {10, 10}, {110, 10}}, true},
		{"empty tensors", [][2]uintptr{{20, 0}, {100, 10}, {0, 0}, {120, 10}, {0, 0}, {110, 10}}, false},
	} {
		es := make([]extent, len(c.extents))
		for i, e := range c.extents {
			es[i].at = i
			if e[1] > 0 {
				es[i].lo, es[i].hi = 4096+e[0]*4, 4096+(e[0]+e[1])*4
			}
		}
		name := func(at int) string { return []string{"params", "grads"}[at%2] + "[" + strconv.Itoa(at/2) + "]" }
		err := noOverlap(es, new(scratch), name, noCheck, true)
		if c.overlap {
			require.Error(t, err, c.name)
			require.Contains(t, err.Error(), "overlaps", c.name)
		} else {
			require.NoError(t, err, c.name)
			// again: passes from the remembered extents; then the same
			// buffer edited in place to overlap: caught
			require.NoError(t, noOverlap(es, new(scratch), name, noCheck, true), c.name)
			es[len(es)-1].lo, es[len(es)-1].hi = es[1].lo, es[1].hi+4
			require.Error(t, noOverlap(es, new(scratch), name, noCheck, true), c.name+", edited")
		}
	}
}

// A tensor count beyond MaxTensors is refused before the lists are read or
// anything is sized by it.
func TestTensorCountBound(t *testing.T) {
	cfg := Config{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	s := newSet(t, tu.CPU, core.F32, []int64{5}, false)
	for _, n := range []int64{MaxTensors + 1, 1 << 40, 1 << 62, -1} {
		l := s.lists()
		l.N = n
		err := Step(&cfg, l, nil)
		require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err), "n %d: %v", n, err)
		require.Contains(t, err.Error(), "n_tensors")
	}
}

// torchStep32 is PyTorch's float32 single-tensor AdamW step as its kernels
// compute it: each Python scalar rounded to float32 once, every product
// and quotient rounded before it is used (the conversions prevent fusing).
func torchStep32(c *Config, p, g, m, v []float32) {
	decay := float32(1 - c.LR*c.WeightDecay)
	omb1, b2, omb2 := float32(1-c.Beta1), float32(c.Beta2), float32(1-c.Beta2)
	stepSize := float32(c.LR / (1 - math.Pow(c.Beta1, float64(c.Step))))
	bc2Sqrt := float32(math.Sqrt(1 - math.Pow(c.Beta2, float64(c.Step))))
	eps := float32(c.Eps)
	for i := range p {
		p[i] = float32(p[i] * decay)
		m[i] += float32(omb1 * (g[i] - m[i]))
		v[i] = float32(v[i]*b2) + float32(float32(omb2*g[i])*g[i])
		denom := float32(float32(math.Sqrt(float64(v[i])))/bc2Sqrt) + eps
		p[i] += float32(float32(-stepSize*m[i]) / denom)
	}
}

// The float32 trajectory stays as close to the float64 one as PyTorch's
// own float32 step does (within 2x, on every backend): 25 steps, lr 1e-2,
// uniform params and gradients, error max |p - p64| / (1e-2 + |p64|).
func TestAccuracyAgainstPyTorch(t *testing.T) {
	sizes := []int64{1, 7, 1000, 4097, 33}
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, cfg := range []Config{
			{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
			{LR: 1e-2, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1},
		} {
			s := newSet(t, b, core.F32, sizes, false)
			rng := tu.RNG(t)
			torchP, torchM, torchV := make([][]float32, len(sizes)), make([][]float32, len(sizes)), make([][]float32, len(sizes))
			for i, n := range sizes {
				torchP[i], torchM[i], torchV[i] = make([]float32, n), make([]float32, n), make([]float32, n)
				for j, x := range s.rp[i] {
					torchP[i][j] = float32(x)
				}
			}
			for step := int64(1); step <= 25; step++ {
				cfg.Step = step
				for i := range s.p {
					gv := s.g[i].Rand(rng, 1)
					g32 := make([]float32, len(gv))
					for j, x := range gv {
						g32[j] = float32(x)
					}
					RefStep(&cfg, s.rp[i], gv, s.rm[i], s.rv[i], nil)
					torchStep32(&cfg, torchP[i], g32, torchM[i], torchV[i])
				}
				require.NoError(t, Step(&cfg, s.lists(), nil))
			}
			relErr := func(got []float64, want []float64) float64 {
				e := 0.0
				for j := range got {
					e = max(e, math.Abs(got[j]-want[j])/(1e-2+math.Abs(want[j])))
				}
				return e
			}
			var ours, torch float64
			for i := range sizes {
				ours = max(ours, relErr(s.p[i].Values(), s.rp[i]))
				tp := make([]float64, len(torchP[i]))
				for j, x := range torchP[i] {
					tp[j] = float64(x)
				}
				torch = max(torch, relErr(tp, s.rp[i]))
			}
			t.Logf("%+v: error %.2g, PyTorch's float32 step %.2g", cfg, ours, torch)
			require.Less(t, torch, 1e-5, "the emulated PyTorch step")
			require.LessOrEqual(t, ours, 2*torch, "%+v: error %.3g, PyTorch's float32 step %.3g", cfg, ours, torch)
		}
	})
}

func noCheck() error { return nil }

// Every tensor's memory is checked to belong to the call's device (a
// device backend's check; here a stand-in device that owns all memory but
// one tensor's), and a failure names the tensor and writes nothing.
func TestDeviceMemoryChecked(t *testing.T) {
	const fakeDevice = 77
	s := newSet(t, tu.CPU, core.F32, sizes, false)
	foreign := s.vp[4].Data
	core.RegisterBackend(fakeDevice, func() error { return nil }, func(p unsafe.Pointer, _ int) error {
		if p == foreign {
			return fmt.Errorf("is not memory of the test device")
		}
		return nil
	})
	for _, list := range [][]*core.Tensor{s.pp, s.gp, s.mp, s.vp} {
		for i, x := range list {
			c := *x
			c.DeviceType = fakeDevice
			list[i] = &c
		}
	}
	cfg := Config{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	before := s.bytes()
	err := Step(&cfg, s.lists(), nil)
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err), "%v", err)
	require.Contains(t, err.Error(), "exp_avg_sqs[4] data is not memory of the test device")
	require.Equal(t, before, s.bytes())
}

// With a grad scale, gradients scaled by it step as the unscaled ones do
// (a power of two: exactly); a nonzero found_inf skips the step, writing
// nothing; bad scaling tensors are refused with nothing written.
func TestScaledStep(t *testing.T) {
	cfg := Config{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 3}
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			plain, scaled := newSet(t, b, dt, sizes, false), newSet(t, b, dt, sizes, false)
			rng := tu.RNG(t)
			for i := range plain.p {
				scaled.p[i].Set(plain.p[i].Values())
				gv := plain.g[i].Rand(rng, 1)
				for j := range gv {
					gv[j] *= 1024
				}
				scaled.g[i].Set(gv)
			}
			scale := b.New(core.F32, []int64{1}).Set([]float64{1024})
			zero := b.New(core.F32, []int64{1}).Set([]float64{0})
			require.NoError(t, Step(&cfg, plain.lists(), nil))
			require.NoError(t, StepScaled(&cfg, scaled.lists(), Scaling{GradScale: scale.Ptr(), FoundInf: zero.Ptr()}, nil))
			for i := range plain.p {
				require.Equal(t, plain.p[i].Bytes(), scaled.p[i].Bytes(), "%s params[%d]", dt, i)
				require.Equal(t, plain.m[i].Bytes(), scaled.m[i].Bytes(), "%s exp_avgs[%d]", dt, i)
			}
			inf := b.New(core.F32, []int64{1}).Set([]float64{1})
			before := scaled.bytes()
			require.NoError(t, StepScaled(&cfg, scaled.lists(), Scaling{GradScale: scale.Ptr(), FoundInf: inf.Ptr()}, nil))
			require.Equal(t, before, scaled.bytes(), "%s: found_inf set, but something was written", dt)
			for name, bad := range map[string]Scaling{
				"float16 scale":     {GradScale: b.New(core.F16, []int64{1}).Ptr()},
				"two-element found": {FoundInf: b.New(core.F32, []int64{2}).Ptr()},
				"scale on the CPU":  {GradScale: cpuScalar()},
			} {
				if name == "scale on the CPU" && !b.GPU() {
					continue // CPU tensors are the call's device there
				}
				err := StepScaled(&cfg, scaled.lists(), bad, nil)
				require.Error(t, err, name)
				require.Equal(t, before, scaled.bytes(), name)
			}
		}
	})
}

func cpuScalar() *core.Tensor { return cpuVector(1) }

// cpuVector is a float32 CPU tensor of n ones, whatever device tu.New
// places tensors on.
func cpuVector(n int) *core.Tensor {
	shape := int64(n)
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return &core.Tensor{Data: unsafe.Pointer(&v[0]), DeviceType: core.DeviceCPU, NDim: 1, Code: 2, Bits: 32, Lanes: 1, Shape: &shape}
}

// A capturable step (step numbers, one per tensor, and lr read from
// tensors on the call's device) steps each tensor as Step does with that
// tensor's step number and lr, within float32's rounding of the scalars
// (formed in float32 there, float64 here); without an lr tensor the
// config's lr is used; found_inf skips it; bad step or lr tensors are
// refused with nothing written.
func TestCapturableStep(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			for _, withLR := range []bool{true, false} {
				cfg := Config{LR: 3e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
				lr := 1e-2
				if withLR {
					cfg.LR = 0.5 // must not be used
				} else {
					lr = cfg.LR
				}
				ref, got := newSet(t, b, dt, sizes, false), newSet(t, b, dt, sizes, false)
				rng := tu.RNG(t)
				steps := make([]float64, len(sizes))
				for i := range sizes {
					got.p[i].Set(ref.p[i].Values())
					got.g[i].Set(ref.g[i].Rand(rng, 1))
					for _, pair := range [][2]*tu.Tensor{{ref.m[i], got.m[i]}, {ref.v[i], got.v[i]}} {
						vals := pair[0].Rand(rng, 0.1)
						for j := range vals {
							vals[j] = math.Abs(vals[j]) // a second moment is never negative
						}
						pair[0].Set(vals)
						pair[1].Set(vals)
					}
					steps[i] = float64(1 + 3*(i%3)) // steps 1, 4, 7: tensors of one call may differ
					one := Config{LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay, Step: int64(steps[i])}
					l := Lists{N: 1, Params: list(ref.pp[i : i+1]), Grads: list(ref.gp[i : i+1]), ExpAvgs: list(ref.mp[i : i+1]),
						ExpAvgSqs: list(ref.vp[i : i+1])}
					require.NoError(t, Step(&one, l, nil))
				}
				stepT := b.New(core.F32, []int64{int64(len(sizes))}).Set(steps)
				cp := Capture{Steps: stepT.Ptr()}
				if withLR {
					cp.LR = b.New(core.F32, []int64{1}).Set([]float64{lr}).Ptr()
				}
				zero := b.New(core.F32, []int64{1}).Set([]float64{0})
				require.NoError(t, StepCapturable(&cfg, got.lists(), Scaling{FoundInf: zero.Ptr()}, cp, nil))
				for i := range sizes {
					what := fmt.Sprintf("%s lr tensor %v params[%d]", dt, withLR, i)
					tu.Close(t, what, got.p[i].Values(), ref.p[i].Values(), tu.Tol(dt))
					tu.Close(t, what+" exp_avg", got.m[i].Values(), ref.m[i].Values(), 1e-6)
					tu.Close(t, what+" exp_avg_sq", got.v[i].Values(), ref.v[i].Values(), 1e-6)
				}
				inf := b.New(core.F32, []int64{1}).Set([]float64{1})
				before := got.bytes()
				require.NoError(t, StepCapturable(&cfg, got.lists(), Scaling{FoundInf: inf.Ptr()}, cp, nil))
				require.Equal(t, before, got.bytes(), "found_inf set, but something was written")
				for name, bad := range map[string]struct {
					cp   Capture
					want core.Status
				}{
					"no steps":         {Capture{LR: cp.LR}, core.ErrInvalidArgument},
					"too few steps":    {Capture{Steps: b.New(core.F32, []int64{int64(len(sizes) - 1)}).Ptr()}, core.ErrInvalidArgument},
					"float16 steps":    {Capture{Steps: b.New(core.F16, []int64{int64(len(sizes))}).Ptr()}, core.ErrUnsupportedDType},
					"two-element lr":   {Capture{Steps: cp.Steps, LR: b.New(core.F32, []int64{2}).Ptr()}, core.ErrInvalidArgument},
					"strided steps":    {Capture{Steps: b.New(core.F32, []int64{int64(len(sizes)), 1}, tu.RowPad(1)).Ptr()}, core.ErrUnsupportedLayout},
					"steps on the CPU": {Capture{Steps: cpuVector(len(sizes))}, core.ErrInvalidArgument},
				} {
					if name == "steps on the CPU" && !b.GPU() {
						continue // CPU tensors are the call's device there
					}
					err := StepCapturable(&cfg, got.lists(), Scaling{}, bad.cp, nil)
					require.Error(t, err, name)
					require.Equal(t, bad.want, tu.Status(t, err), "%s: %v", name, err)
					require.Equal(t, before, got.bytes(), name)
				}
			}
		}
	})
}
