//go:build metalsim && cgo

package ops_test

import (
	"fmt"
	"math"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/backend/metal"
	"metalcore/internal/core"
	"metalcore/ops/activation"
	"metalcore/ops/adamw"
	"metalcore/ops/cholesky"
	"metalcore/ops/eigh"
	"metalcore/ops/loss"
	"metalcore/ops/norm"
	"metalcore/ops/qr"
	"metalcore/ops/rope"
	"metalcore/ops/softmax"
	"metalcore/ops/solve"
	"metalcore/ops/svd"
	tu "metalcore/tests/testutil"
)

// The op families on the Metal simulator (tests/metal/sim, a metalsim
// build): every op and dtype through its Metal plan and the real
// Objective-C layer, the MSL programs run on the CPU with every access
// checked, against the CPU backend on the same inputs. The test device
// moves a tensor's data with the host's own copy dispatches on the open
// encoder, concurrent unless said otherwise, so every call has a host
// dispatch before it and one after it there. Whatever the simulator finds
// (a validation failure, a race, an access out of bounds or to a buffer
// not made resident) fails the call's test.

func TestMain(m *testing.M) {
	if err := tu.MetalSim(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// simRun runs call once on the CPU and once on the simulated Metal device,
// each with fresh outputs (dtype and shape per outs) and the inputs'
// twins, and compares every output.
type simRun struct {
	t     *testing.T
	twins map[*tu.Tensor]*tu.Tensor
	// setup, when set, fills a run's fresh outputs before the call (an
	// in-place op's starting values)
	setup func(o []*tu.Tensor)
	// canon, when set, puts a run's output values in a canonical form before
	// they are compared (where the outputs are defined up to signs)
	canon func(vals [][]float64)
}

type out struct {
	dt    core.DType
	shape []int64
}

func newSimRun(t *testing.T) *simRun { return &simRun{t: t, twins: map[*tu.Tensor]*tu.Tensor{}} }

// in is a CPU tensor holding vals, with a Metal twin holding the same.
func (s *simRun) in(dt core.DType, shape []int64, vals []float64, opts ...tu.Option) *tu.Tensor {
	c := tu.CPU.New(dt, shape, opts...).Set(vals)
	s.twins[c] = tu.Metal.New(dt, shape, opts...).Set(vals)
	return c
}

func (s *simRun) rand(dt core.DType, shape []int64, scale float64, opts ...tu.Option) *tu.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	rng := tu.RNG(s.t)
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64() * scale
	}
	return s.in(dt, shape, v, opts...)
}

type simCall func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, enc unsafe.Pointer) error

func (s *simRun) check(what string, outs []out, tol float64, call simCall) {
	s.t.Helper()
	s.checkScaled(what, outs, tol, 1, call)
}

// checkScaled is check with the floor of tu.CloseScaled given: the scale of
// the terms an output comes from where that is not 1.
func (s *simRun) checkScaled(what string, outs []out, tol, floor float64, call simCall) {
	t := s.t
	t.Helper()
	var got [2][][]float64
	for run, b := range []tu.Backend{tu.CPU, tu.Metal} {
		on := func(x *tu.Tensor) *core.Tensor {
			if x == nil {
				return nil
			}
			if run == 1 {
				if tw, ok := s.twins[x]; ok {
					return tw.Ptr()
				}
			}
			return x.Ptr()
		}
		os := make([]*tu.Tensor, len(outs))
		for i, o := range outs {
			os[i] = b.New(o.dt, o.shape, tu.Offset(1))
		}
		if s.setup != nil {
			s.setup(os)
		}
		var err error
		if run == 0 {
			err = call(on, os, nil)
		} else {
			err = tu.MetalCall(func() error { return call(on, os, tu.MetalEncoder()) })
		}
		require.NoError(t, err, "%s on %s", what, b.Name)
		for _, o := range os {
			got[run] = append(got[run], o.Values())
		}
	}
	require.Empty(t, tu.MetalErrors(), "%s: what the simulator found", what)
	if s.canon != nil {
		s.canon(got[0])
		s.canon(got[1])
	}
	for i := range outs {
		g, w := got[1][i], got[0][i]
		for j := range g { // the same infinity, or NaN on both
			if g[j] == w[j] || math.IsNaN(g[j]) && math.IsNaN(w[j]) {
				g[j], w[j] = 0, 0
			}
		}
		tu.CloseScaled(t, fmt.Sprintf("%s output %d", what, i), g, w, tol, floor)
	}
}

func TestMetalSimOps(t *testing.T) {
	for _, dt := range tu.DTypes {
		// {67, 24}: many short rows, several a SIMD group (softmax's short-rows kernels)
		for _, sh := range [][]int64{{1, 1}, {3, 33}, {67, 24}, {4, 1031}, {2, 5000}} {
			rows, cols := sh[0], sh[1]
			t.Run(fmt.Sprintf("%s %v", dt, sh), func(t *testing.T) {
				s := newSimRun(t)
				tol := tu.Tol(dt)
				x, dy := s.rand(dt, sh, 1), s.rand(dt, sh, 1)
				w, b := s.rand(dt, []int64{cols}, 1), s.rand(dt, []int64{cols}, 1)
				res := s.rand(dt, sh, 1, tu.RowPad(3))
				y, stat, row := out{dt, sh}, out{core.F32, []int64{rows}}, out{dt, []int64{cols}}
				s.check("rmsnorm", []out{y, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.RMSNormFwd(on(x), on(w), 1e-6, o[0].Ptr(), o[1].Ptr(), e)
				})
				s.check("rmsnorm, no weight or rstd", []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.RMSNormFwd(on(x), nil, 1e-6, o[0].Ptr(), nil, e)
				})
				s.check("fused add", []out{y, y, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.FusedAddRMSNormFwd(on(x), on(res), on(w), 1e-6, o[0].Ptr(), o[1].Ptr(), o[2].Ptr(), e)
				})
				s.check("fused add, no rstd", []out{y, y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.FusedAddRMSNormFwd(on(x), on(res), on(w), 1e-6, o[0].Ptr(), o[1].Ptr(), nil, e)
				})
				s.check("layernorm", []out{y, stat, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.LayerNormFwd(on(x), on(w), on(b), 1e-5, o[0].Ptr(), o[1].Ptr(), o[2].Ptr(), e)
				})
				s.check("layernorm, no affine or stats", []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.LayerNormFwd(on(x), nil, nil, 1e-5, o[0].Ptr(), nil, nil, e)
				})
				// the statistics the backward takes, computed on the CPU
				mean, rstd := tu.New(core.F32, []int64{rows}), tu.New(core.F32, []int64{rows})
				require.NoError(t, norm.LayerNormFwd(x.Ptr(), w.Ptr(), b.Ptr(), 1e-5, tu.New(dt, sh).Ptr(), mean.Ptr(), rstd.Ptr(), nil))
				mean, rstd = s.in(core.F32, []int64{rows}, mean.Values()), s.in(core.F32, []int64{rows}, rstd.Values())
				ws := func(on func(*tu.Tensor) *core.Tensor, e unsafe.Pointer, layer bool) *core.Tensor {
					f := norm.RMSNormBwdWorkspace
					if layer {
						f = norm.LayerNormBwdWorkspace
					}
					n, err := f(on(x))
					require.NoError(t, err)
					if n == 0 {
						return nil
					}
					be := tu.CPU
					if e != nil {
						be = tu.Metal
					}
					return be.New(core.F32, []int64{n / 4}).Ptr()
				}
				s.check("layernorm backward", []out{y, row, row}, 4*tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.LayerNormBwd(on(dy), on(x), on(w), on(mean), on(rstd), o[0].Ptr(), o[1].Ptr(), o[2].Ptr(), ws(on, e, true), e)
				})
				s.check("layernorm backward, dx alone", []out{y}, 4*tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.LayerNormBwd(on(dy), on(x), on(w), on(mean), on(rstd), o[0].Ptr(), nil, nil, nil, e)
				})
				s.check("rmsnorm backward", []out{y, row}, 4*tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.RMSNormBwd(on(dy), on(x), on(w), on(rstd), o[0].Ptr(), o[1].Ptr(), ws(on, e, false), e)
				})
				s.check("rmsnorm backward, no weight", []out{y}, 4*tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return norm.RMSNormBwd(on(dy), on(x), nil, on(rstd), o[0].Ptr(), nil, nil, e)
				})
				s.check("softmax", []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return softmax.Fwd(on(x), o[0].Ptr(), e)
				})
				// the backward's y a softmax output, computed on the CPU: a row of
				// arbitrary values makes its dot product with dy a sum of large
				// terms that cancel, whose float32 rounding both backends carry
				probs := func(dt core.DType) *tu.Tensor {
					p := tu.New(dt, sh)
					require.NoError(t, softmax.Fwd(x.Ptr(), p.Ptr(), nil))
					return s.in(dt, sh, p.Values())
				}
				sy := probs(dt)
				s.checkScaled("softmax backward", []out{y}, 4*tol, tu.RMS(dy.Values())*tu.RMS(sy.Values()), func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return softmax.Bwd(on(dy), on(sy), o[0].Ptr(), e)
				})
				if dt != core.F32 { // the upcasting forward, and its gradient in the input's dtype
					s.check("softmax, float32 output", []out{{core.F32, sh}}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return softmax.Fwd(on(x), o[0].Ptr(), e)
					})
					dy32, y32 := s.rand(core.F32, sh, 1), probs(core.F32)
					s.checkScaled("softmax backward, float32 rows", []out{y}, 4*tol, tu.RMS(dy32.Values())*tu.RMS(y32.Values()), func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return softmax.Bwd(on(dy32), on(y32), o[0].Ptr(), e)
					})
				}
				for _, approx := range []int32{activation.GeluErf, activation.GeluTanh} {
					s.check(fmt.Sprintf("gelu %d", approx), []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return activation.GeluFwd(on(x), approx, o[0].Ptr(), e)
					})
					s.check(fmt.Sprintf("gelu %d backward", approx), []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return activation.GeluBwd(on(dy), on(x), approx, o[0].Ptr(), e)
					})
				}
				s.check("silu", []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return activation.SiluFwd(on(x), o[0].Ptr(), e)
				})
				s.check("silu backward", []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return activation.SiluBwd(on(dy), on(x), o[0].Ptr(), e)
				})
				for kind := int32(0); kind < 3; kind++ {
					s.check(fmt.Sprintf("glu %d", kind), []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return activation.GluFwd(on(x), on(dy), kind, o[0].Ptr(), e)
					})
					s.check(fmt.Sprintf("glu %d backward", kind), []out{y, y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return activation.GluBwd(on(dy), on(x), on(dy), kind, o[0].Ptr(), o[1].Ptr(), e)
					})
				}
				// cross-entropy: targets in range, one ignored, label smoothing,
				// a per-row scale
				tv := make([]float64, rows)
				for r := range tv {
					tv[r] = float64((int64(r) * 7919) % cols)
				}
				if rows > 1 {
					tv[1] = -100
				}
				target := s.in(core.I64, []int64{rows}, tv)
				scale := s.rand(core.F32, []int64{rows}, 1)
				s.check("cross-entropy", []out{stat, y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return loss.CrossEntropy(on(x), on(target), -100, 0.1, on(scale), o[0].Ptr(), o[1].Ptr(), e)
				})
				s.check("cross-entropy, loss alone", []out{stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return loss.CrossEntropy(on(x), on(target), -100, 0, nil, o[0].Ptr(), nil, e)
				})
				s.check("cross-entropy forward, with lse", []out{stat, stat}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return loss.CrossEntropyForward(on(x), on(target), -100, 0.1, o[0].Ptr(), o[1].Ptr(), e)
				})
				lse := s.rand(core.F32, []int64{rows}, 1) // any lse: the backward is a function of it
				s.check("cross-entropy backward from lse", []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return loss.CrossEntropyBackward(on(x), on(target), on(lse), -100, 0.1, on(scale), o[0].Ptr(), e)
				})
				// the gradient scale, in place on x's values: by 1 (nothing
				// written) and by another value
				xv := x.Values()
				s.setup = func(o []*tu.Tensor) { o[0].Set(xv) }
				for _, by := range []float64{1, -0.37} {
					factor := s.in(core.F32, []int64{1}, []float64{by})
					s.check(fmt.Sprintf("gradient scale %g", by), []out{y}, tol, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return loss.ScaleGradient(o[0].Ptr(), on(factor), e)
					})
				}
				s.setup = nil
			})
		}
	}
}

// Cross-entropy on vocabulary-wide rows, whose pieces past a thread's
// registers the kernel keeps in threadgroup memory for the gradient's pass.
func TestMetalSimWideCrossEntropy(t *testing.T) {
	for _, dt := range tu.DTypes {
		s := newSimRun(t)
		sh := []int64{2, 40000}
		x := s.rand(dt, sh, 1)
		target := s.in(core.I64, []int64{2}, []float64{39999, 17})
		s.check(fmt.Sprintf("wide cross-entropy %s", dt), []out{{core.F32, sh[:1]}, {dt, sh}}, tu.Tol(dt),
			func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
				return loss.CrossEntropy(on(x), on(target), -100, 0.1, nil, o[0].Ptr(), o[1].Ptr(), e)
			})
	}
}

func TestMetalSimRoPE(t *testing.T) {
	for _, dt := range tu.DTypes {
		// D 8: 16-bit halves element by element; D 16: every dtype in whole vectors
		for _, D := range []int64{8, 16} {
			s := newSimRun(t)
			const B, H, T = 2, 3, 5
			x := s.rand(dt, []int64{B, H, T, D}, 1)
			cos, sin := s.rand(dt, []int64{1, T, D}, 1), s.rand(dt, []int64{1, T, D}, 1)
			for _, backward := range []bool{false, true} {
				s.check(fmt.Sprintf("rope %s D %d backward %v", dt, D, backward), []out{{dt, []int64{B, H, T, D}}}, tu.Tol(dt),
					func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return rope.Rope(on(x), on(cos), on(sin), backward, o[0].Ptr(), e)
					})
			}
		}
	}
}

func TestMetalSimQR(t *testing.T) {
	for _, c := range []struct {
		batch, m, n int64
		mode        int32
	}{{5, 7, 4, qr.Reduced}, {3, 16, 16, qr.Complete}, {2, 40, 33, qr.ROnly}, {1, 150, 140, qr.Reduced}, {1, 300, 64, qr.Complete}} {
		s := newSimRun(t)
		a := s.rand(core.F32, []int64{c.batch, c.m, c.n}, 1)
		k := min(c.m, c.n)
		qc := k
		if c.mode == qr.Complete {
			qc = c.m
		}
		outs := []out{{core.F32, []int64{c.batch, qc, c.n}}}
		if c.mode != qr.ROnly {
			outs = []out{{core.F32, []int64{c.batch, c.m, qc}}, {core.F32, []int64{c.batch, qc, c.n}}}
		}
		s.check(fmt.Sprintf("qr %+v", c), outs, 1e-4, func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
			bytes, err := qr.WorkspaceSize(on(a), c.mode)
			if err != nil {
				return err
			}
			var ws *core.Tensor
			if bytes > 0 {
				be := tu.CPU
				if e != nil {
					be = tu.Metal
				}
				ws = be.New(core.F32, []int64{bytes / 4}).Ptr()
			}
			if c.mode == qr.ROnly {
				return qr.QR(on(a), c.mode, nil, o[0].Ptr(), ws, e)
			}
			return qr.QR(on(a), c.mode, o[0].Ptr(), o[1].Ptr(), ws, e)
		})
	}
}

// AdamW: 70 tensors of several sizes (two of Metal's 64-tensor inline
// tables), plain, AMSGrad, scaled and capturable; the tensors are reached
// through their GPU addresses, so each must be made resident.
func TestMetalSimAdamW(t *testing.T) {
	sizes := make([]int64, 70)
	for i := range sizes {
		sizes[i] = int64(1 + (i*37)%300)
	}
	for _, dt := range tu.DTypes {
		for _, variant := range []string{"plain", "amsgrad", "scaled", "capturable"} {
			t.Run(fmt.Sprintf("%s %s", dt, variant), func(t *testing.T) {
				s := newSimRun(t)
				var p, g, m, v, x []*tu.Tensor
				for _, n := range sizes {
					sh := []int64{n}
					p, g = append(p, s.rand(dt, sh, 1)), append(g, s.rand(dt, sh, 1))
					m = append(m, s.rand(core.F32, sh, 0.1))
					sq := make([]float64, n)
					for j := range sq {
						sq[j] = 0.01 * float64(1+j%5)
					}
					v, x = append(v, s.in(core.F32, sh, sq)), append(x, s.in(core.F32, sh, sq))
				}
				var outs []out
				for _, n := range sizes {
					outs = append(outs, out{dt, []int64{n}}, out{core.F32, []int64{n}}, out{core.F32, []int64{n}})
				}
				cfg := adamw.Config{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Step: 3}
				if variant == "amsgrad" {
					cfg.AMSGrad = 1
				}
				steps := make([]float64, len(sizes))
				for i := range steps {
					steps[i] = 3
				}
				gradScale, found := s.in(core.F32, []int64{1}, []float64{2}), s.in(core.F32, []int64{1}, []float64{0})
				stepT, lrT := s.in(core.F32, []int64{int64(len(sizes))}, steps), s.in(core.F32, []int64{1}, []float64{1e-2})
				s.setup = func(o []*tu.Tensor) { // the step updates in place
					for i := range sizes {
						for j, src := range []*tu.Tensor{p[i], m[i], v[i]} {
							o[3*i+j].Set(src.Values())
						}
					}
				}
				s.check("adamw "+variant, outs, tu.Tol(dt), func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					lists := make([][]*core.Tensor, 5)
					for i := range sizes {
						for j, k := range []int{0, 2, 3} {
							lists[k] = append(lists[k], o[3*i+j].Ptr())
						}
						lists[1] = append(lists[1], on(g[i]))
						lists[4] = append(lists[4], on(x[i]))
					}
					ptr := func(ts []*core.Tensor) unsafe.Pointer { return unsafe.Pointer(&ts[0]) }
					l := adamw.Lists{N: int64(len(sizes)), Params: ptr(lists[0]), Grads: ptr(lists[1]), ExpAvgs: ptr(lists[2]),
						ExpAvgSqs: ptr(lists[3])}
					if cfg.AMSGrad != 0 {
						l.MaxExpAvgSqs = ptr(lists[4])
					}
					switch variant {
					case "scaled":
						return adamw.StepScaled(&cfg, l, adamw.Scaling{GradScale: on(gradScale), FoundInf: on(found)}, e)
					case "capturable":
						return adamw.StepCapturable(&cfg, l, adamw.Scaling{FoundInf: on(found)}, adamw.Capture{Steps: on(stepT), LR: on(lrT)}, e)
					}
					return adamw.Step(&cfg, l, e)
				})
			})
		}
	}
}

// The simulator's checks, shown on defects planted one at a time: each
// must be reported.
func TestMetalSimCatchesPlantedDefects(t *testing.T) {
	defer tu.MetalConfig("plant_clear", 0)
	defer tu.MetalConfig("new_device", 1)
	found := func(t *testing.T, want string) {
		t.Helper()
		tu.MetalFlush()
		got := tu.MetalErrors()
		require.Contains(t, got, want, "the simulator must report the planted defect")
	}
	// an op's call on the current device, its outputs read back
	rows := func(t *testing.T, call func(x, w, dy, y, stat, dw, ws *tu.Tensor, enc unsafe.Pointer) error) {
		sh := []int64{4, 1031}
		rng := tu.RNG(t)
		x, dy, w := tu.Metal.New(core.F32, sh), tu.Metal.New(core.F32, sh), tu.Metal.New(core.F32, sh[1:])
		x.Rand(rng, 1)
		dy.Rand(rng, 1)
		w.Rand(rng, 1)
		y, stat, dw := tu.Metal.New(core.F32, sh), tu.Metal.New(core.F32, sh[:1]), tu.Metal.New(core.F32, sh[1:])
		n, err := norm.LayerNormBwdWorkspace(x.Ptr())
		require.NoError(t, err)
		ws := tu.Metal.New(core.F32, []int64{n / 4})
		require.NoError(t, tu.MetalCall(func() error { return call(x, w, dy, y, stat, dw, ws, tu.MetalEncoder()) }))
		y.Values()
		dw.Values()
	}
	rmsnorm := func(x, w, dy, y, stat, dw, ws *tu.Tensor, enc unsafe.Pointer) error {
		return norm.RMSNormFwd(x.Ptr(), w.Ptr(), 1e-6, y.Ptr(), stat.Ptr(), enc)
	}
	rmsnormBwd := func(x, w, dy, y, stat, dw, ws *tu.Tensor, enc unsafe.Pointer) error {
		require.NoError(t, norm.RMSNormFwd(x.Ptr(), w.Ptr(), 1e-6, tu.Metal.New(core.F32, x.Shape).Ptr(), stat.Ptr(), enc))
		return norm.RMSNormBwd(dy.Ptr(), x.Ptr(), w.Ptr(), stat.Ptr(), y.Ptr(), dw.Ptr(), ws.Ptr(), enc)
	}
	plant := func(from, to string) {
		tu.MetalFlush() // the open encoder is the old device's
		tu.MetalConfig("plant_clear", 0)
		tu.MetalPlant(from, to)
		tu.MetalConfig("new_device", 1)
	}
	t.Run("a barrier removed", func(t *testing.T) {
		plant("#define MC_BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)", "#define MC_BARRIER()")
		rows(t, rmsnorm)
		found(t, "race")
	})
	t.Run("a barrier's mem_flags weakened", func(t *testing.T) {
		plant("threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup)", "threadgroup_barrier(mem_flags::mem_threadgroup)")
		rng := tu.RNG(t)
		a := tu.Metal.New(core.F32, []int64{1, 150, 140})
		a.Rand(rng, 1)
		q, r := tu.Metal.New(core.F32, []int64{1, 150, 140}), tu.Metal.New(core.F32, []int64{1, 140, 140})
		n, err := qr.WorkspaceSize(a.Ptr(), qr.Reduced)
		require.NoError(t, err)
		ws := tu.Metal.New(core.F32, []int64{n / 4})
		require.NoError(t, tu.MetalCall(func() error { return qr.QR(a.Ptr(), qr.Reduced, q.Ptr(), r.Ptr(), ws.Ptr(), tu.MetalEncoder()) }))
		r.Values()
		found(t, "race")
	})
	t.Run("the plan's barriers dropped", func(t *testing.T) {
		tu.MetalFlush()
		tu.MetalConfig("plant_clear", 0)
		tu.MetalConfig("new_device", 1)
		tu.MetalConfig("ignore_barriers", 1)
		defer tu.MetalConfig("ignore_barriers", 0)
		rows(t, rmsnormBwd)
		found(t, "race")
	})
	// raw dispatches of silu_fwd_f32 (x, y, n, mc_bound) as a defective
	// caller might make them
	src, err := metal.Source("silu_fwd_f32")
	require.NoError(t, err)
	raw := func(t *testing.T, nilY bool, bytes []byte, length, threads int) {
		x, y := tu.Metal.New(core.F32, []int64{64}), tu.Metal.New(core.F32, []int64{64})
		n := tu.Metal.New(core.F32, []int64{2}).Set([]float64{float64(math.Float32frombits(64)), 0})
		mask := tu.Metal.New(core.F32, []int64{1}).Set([]float64{float64(math.Float32frombits(3))})
		bufs := []unsafe.Pointer{x.T.Data, y.T.Data, n.T.Data, mask.T.Data}
		if nilY {
			bufs[1] = nil
		}
		tu.MetalRaw(src, "silu_fwd_f32", bufs, bytes, 2, length, threads)
	}
	t.Run("a nil binding", func(t *testing.T) {
		raw(t, true, nil, 0, 64)
		found(t, "buffer 1 (mc_p_y) is not bound (nil)")
	})
	t.Run("setBytes over 4 KB", func(t *testing.T) {
		raw(t, false, make([]byte, 5000), 0, 64)
		found(t, "at most 4 KB inline")
	})
	t.Run("threadgroup memory not a multiple of 16", func(t *testing.T) {
		raw(t, false, nil, 100, 64)
		found(t, "not a multiple of 16")
	})
	t.Run("too many threads", func(t *testing.T) {
		raw(t, false, nil, 0, 2048)
		found(t, "the pipeline's maximum is 1024")
	})
}

// A device whose pipelines take fewer threads than the kernels ask for
// (Metal may give a pipeline less than 1024): every op still runs, on
// smaller threadgroups.
func TestMetalSimSmallThreadgroups(t *testing.T) {
	defer tu.MetalConfig("new_device", 1)
	defer tu.MetalConfig("max_threads", 1024)
	for _, most := range []int{256, 64} {
		t.Run(fmt.Sprint(most), func(t *testing.T) {
			tu.MetalFlush()
			tu.MetalConfig("max_threads", most)
			tu.MetalConfig("new_device", 1)
			TestMetalSimOps(t)
			TestMetalSimAdamW(t)
			if most >= 256 {
				TestMetalSimQR(t)
				return
			}
			// QR's kernels are written for their block sizes: refused,
			// with nothing encoded
			a := tu.Metal.New(core.F32, []int64{1, 150, 140})
			q, r := tu.Metal.New(core.F32, []int64{1, 150, 140}), tu.Metal.New(core.F32, []int64{1, 140, 140})
			n, err := qr.WorkspaceSize(a.Ptr(), qr.Reduced)
			require.NoError(t, err)
			ws := tu.Metal.New(core.F32, []int64{n / 4})
			before := r.Bytes()
			err = tu.MetalCall(func() error { return qr.QR(a.Ptr(), qr.Reduced, q.Ptr(), r.Ptr(), ws.Ptr(), tu.MetalEncoder()) })
			require.Equal(t, core.ErrUnsupportedDevice, core.StatusOf(err), "%v", err)
			require.Equal(t, before, r.Bytes())
		})
	}
}

// A device whose SIMD groups are not 32 threads wide is refused: every
// reduction is written for 32.
func TestMetalSimSIMDWidth(t *testing.T) {
	defer tu.MetalConfig("new_device", 1)
	defer tu.MetalConfig("simd_width", 32)
	tu.MetalFlush()
	tu.MetalConfig("simd_width", 64)
	tu.MetalConfig("new_device", 1)
	x, y := tu.Metal.New(core.F32, []int64{2, 40}), tu.Metal.New(core.F32, []int64{2, 40})
	err := tu.MetalCall(func() error { return softmax.Fwd(x.Ptr(), y.Ptr(), tu.MetalEncoder()) })
	require.ErrorContains(t, err, "SIMD groups of 64 threads")
	require.Equal(t, core.ErrUnsupportedDevice, core.StatusOf(err))
	tu.MetalFlush()
	require.Empty(t, tu.MetalErrors())
}

// Cholesky on the simulator: orders on both sides of a warp, up to the
// threadgroup memory's 64, lower and upper, batches of two.
func TestMetalSimCholesky(t *testing.T) {
	rng := tu.RNG(t)
	for _, dt := range tu.DTypes {
		for _, n := range []int{1, 5, 33, 64} {
			s := newSimRun(t)
			var vals []float64
			for range 2 { // B Bᵀ/n + I
				bm := make([]float64, n*n)
				for i := range bm {
					bm[i] = rng.NormFloat64()
				}
				for i := range n {
					for j := range n {
						v := 0.0
						for k := range n {
							v += bm[i*n+k] * bm[j*n+k]
						}
						if v /= float64(n); i == j {
							v++
						}
						vals = append(vals, v)
					}
				}
			}
			shape := []int64{2, int64(n), int64(n)}
			a := s.in(dt, shape, vals)
			for _, upper := range []bool{false, true} {
				s.check(fmt.Sprintf("cholesky %s n %d upper %v", dt, n, upper), []out{{dt, shape}, {core.I32, []int64{2}}},
					4*tu.Tol(dt), func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return cholesky.Cholesky(on(a), upper, o[0].Ptr(), o[1].Ptr(), e)
					})
			}
		}
	}
}

// Symmetric eigendecomposition, eigenvalues alone and with eigenvectors
// (compared with each column's sign fixed: its largest entry positive),
// from either triangle (the other poisoned with NaN), one matrix holding a
// NaN (info 1, NaN out).
func TestMetalSimEigh(t *testing.T) {
	rng := tu.RNG(t)
	for _, dt := range tu.DTypes {
		for _, n := range []int{1, 5, 16, 24, 32, 33, 48} {
			s := newSimRun(t)
			vals := make([]float64, 3*n*n)
			for m := range 3 {
				for i := range n {
					for j := range i + 1 {
						v := rng.NormFloat64()
						vals[m*n*n+i*n+j], vals[m*n*n+j*n+i] = v, v
					}
				}
			}
			vals[2*n*n+n*n-1] = math.NaN()
			shape, batch := []int64{3, int64(n), int64(n)}, []int64{3}
			s.canon = func(vals [][]float64) {
				if len(vals) < 3 {
					return
				}
				v := vals[1]
				for m := range 3 {
					for c := range n {
						big := 0.0
						for r := range n {
							if x := v[m*n*n+r*n+c]; math.Abs(x) > math.Abs(big) {
								big = x
							}
						}
						for r := range n {
							if big < 0 {
								v[m*n*n+r*n+c] = -v[m*n*n+r*n+c]
							}
						}
					}
				}
			}
			for _, upper := range []bool{false, true} {
				poisoned := append([]float64(nil), vals...)
				for m := range 3 {
					for i := range n {
						for j := range i {
							if upper {
								poisoned[m*n*n+i*n+j] = math.NaN()
							} else {
								poisoned[m*n*n+j*n+i] = math.NaN()
							}
						}
					}
				}
				a := s.in(dt, shape, poisoned)
				what := fmt.Sprintf("eigh %s n %d upper %v", dt, n, upper)
				s.check(what, []out{{dt, []int64{3, int64(n)}}, {dt, shape}, {core.I32, batch}}, 8*tu.Tol(dt),
					func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return eigh.Eigh(on(a), upper, o[0].Ptr(), o[1].Ptr(), o[2].Ptr(), e)
					})
				s.check(what+" eigenvalues alone", []out{{dt, []int64{3, int64(n)}}, {core.I32, batch}}, 8*tu.Tol(dt),
					func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
						return eigh.Eigh(on(a), upper, o[0].Ptr(), nil, o[1].Ptr(), e)
					})
			}
		}
	}
}

// Thin SVD of square, tall and wide matrices, values alone and with the
// vectors (compared with each pair's sign fixed: U's column's largest
// entry positive, Vh's row flipped with it), one matrix holding a NaN
// (info 1, NaN out).
func TestMetalSimSVD(t *testing.T) {
	rng := tu.RNG(t)
	for _, dt := range tu.DTypes {
		for _, mn := range [][2]int{{1, 1}, {5, 5}, {24, 24}, {30, 12}, {33, 33}, {40, 7}, {7, 40}, {48, 48}} {
			m, n := mn[0], mn[1]
			k := min(m, n)
			s := newSimRun(t)
			vals := make([]float64, 3*m*n)
			for i := range vals {
				vals[i] = rng.NormFloat64()
			}
			vals[2*m*n+m*n/2] = math.NaN()
			shape, batch := []int64{3, int64(m), int64(n)}, []int64{3}
			s.canon = func(vals [][]float64) {
				if len(vals) < 4 {
					return
				}
				u, vh := vals[0], vals[2]
				for b := range 3 {
					for c := range k {
						big := 0.0
						for r := range m {
							if x := u[b*m*k+r*k+c]; math.Abs(x) > math.Abs(big) {
								big = x
							}
						}
						if big < 0 {
							for r := range m {
								u[b*m*k+r*k+c] = -u[b*m*k+r*k+c]
							}
							for j := range n {
								vh[b*k*n+c*n+j] = -vh[b*k*n+c*n+j]
							}
						}
					}
				}
			}
			a := s.in(dt, shape, vals)
			what := fmt.Sprintf("svd %s %dx%d", dt, m, n)
			values := []int64{3, int64(k)}
			s.check(what, []out{{dt, []int64{3, int64(m), int64(k)}}, {dt, values}, {dt, []int64{3, int64(k), int64(n)}},
				{core.I32, batch}}, 8*tu.Tol(dt), func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
				return svd.SVD(on(a), o[0].Ptr(), o[1].Ptr(), o[2].Ptr(), o[3].Ptr(), e)
			})
			s.check(what+" values alone", []out{{dt, values}, {core.I32, batch}}, 8*tu.Tol(dt),
				func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return svd.SVD(on(a), nil, o[0].Ptr(), nil, o[1].Ptr(), e)
				})
		}
	}
}

// Solve through both kernels (a warp a system up to 32 with up to 8
// right-hand sides, a block otherwise),
// one of the systems singular (a zero column).
func TestMetalSimSolve(t *testing.T) {
	rng := tu.RNG(t)
	for _, dt := range tu.DTypes {
		for _, nk := range [][2]int{{1, 1}, {5, 3}, {32, 2}, {16, 12}, {33, 1}, {48, 4}} {
			n, k := nk[0], nk[1]
			s := newSimRun(t)
			av := make([]float64, 3*n*n)
			for i := range av {
				av[i] = rng.NormFloat64()
			}
			for m := range 3 {
				for i := range n {
					av[m*n*n+i*n+i] += 2 * math.Sqrt(float64(n))
					if m == 1 {
						av[m*n*n+i*n] = 0
					}
				}
			}
			bv := make([]float64, 3*n*k)
			for i := range bv {
				bv[i] = rng.NormFloat64()
			}
			a, b := s.in(dt, []int64{3, int64(n), int64(n)}, av), s.in(dt, []int64{3, int64(n), int64(k)}, bv)
			s.check(fmt.Sprintf("solve %s n %d k %d", dt, n, k), []out{{dt, []int64{3, int64(n), int64(k)}}, {core.I32, []int64{3}}},
				8*tu.Tol(dt), func(on func(*tu.Tensor) *core.Tensor, o []*tu.Tensor, e unsafe.Pointer) error {
					return solve.Solve(on(a), on(b), o[0].Ptr(), o[1].Ptr(), e)
				})
		}
	}
}
