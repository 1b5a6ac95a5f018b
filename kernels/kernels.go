// Package kernels is metalcore for Go programs: the CPU kernels the C ABI
// runs on CPU tensors, over Go slices, with no cgo and no second Go runtime
// (linking libmetalcore.so into a Go program would bring one).
//
// Matrices are row-major: rows*cols elements, the ops reducing over each
// row's cols. bfloat16 data is []uint16 (the upper half of a float32's
// bits); arithmetic is float32 throughout. Outputs may be the same slice as
// their matching input (in place); otherwise slices must not overlap. Every
// call checks its arguments before it writes anything, and a failure is an
// error naming the function and the argument.
//
// What it has: the forward ops (RMSNorm, LayerNorm, softmax, GELU, SiLU) in
// float32 and bfloat16, AdamW without AMSGrad, and QR. What it lacks, which
// the C ABI has: the backward ops, float16, RMSNorm fused with a residual
// add, AMSGrad and maximize, scaled and capturable AdamW.
//
// Built with GOEXPERIMENT=simd on amd64 the kernels use AVX-512 or AVX2.
// Without it (and on arm64) they are the portable Go ones: the same results
// within float32 rounding, but 15–20 times slower on amd64. ISA says which
// this program runs; MC_CPU_ISA forces one.
//
// The module is "metalcore"; use it from another module through a replace
// directive (require metalcore v0.0.0; replace metalcore => ../metalcore) or
// a go.work file.
package kernels

import (
	"fmt"
	"runtime"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
	"metalcore/ops/activation"
	"metalcore/ops/adamw"
	"metalcore/ops/norm"
	"metalcore/ops/qr"
	"metalcore/ops/softmax"
)

// ISA is the instruction set the kernels run on: "avx512", "avx2" or
// "portable" (the latter where the program was built without
// GOEXPERIMENT=simd, or the CPU has neither).
func ISA() string { return cpu.K().Name }

// element is what a slice may hold: float32, or bfloat16 bits as uint16.
type element interface{ float32 | uint16 }

// arg is one slice argument of a call: its descriptor, checked against the
// slice's length.
type arg struct {
	name  string
	t     *core.Tensor
	have  int
	shape []int64
}

// describe is the descriptor of s as a tensor of the given shape.
func describe[T element](name string, s []T, shape ...int64) arg {
	var zero T
	code, bits := uint8(2), uint8(32) // float32
	if unsafe.Sizeof(zero) == 2 {
		code, bits = 4, 16 // bfloat16
	}
	t := &core.Tensor{Data: unsafe.Pointer(unsafe.SliceData(s)), DeviceType: core.DeviceCPU, NDim: int32(len(shape)),
		Code: code, Bits: bits, Lanes: 1, Shape: unsafe.SliceData(shape)}
	return arg{name, t, len(s), shape}
}

// optional is describe, or no tensor (NULL) for a nil slice.
func optional[T element](name string, s []T, shape ...int64) arg {
	if s == nil {
		return arg{name: name}
	}
	return describe(name, s, shape...)
}

// call checks every slice holds exactly its shape's elements, runs op, and
// keeps the slices alive until it returns.
func call(fn string, op func() error, args ...arg) error {
	for _, a := range args {
		if a.t == nil {
			continue
		}
		want := int64(1)
		for _, d := range a.shape {
			if d < 0 || (d > 0 && want > (1<<62)/d) {
				return fmt.Errorf("kernels.%s: %s has shape %v", fn, a.name, a.shape)
			}
			want *= d
		}
		if int64(a.have) != want {
			return fmt.Errorf("kernels.%s: %s has %d elements, its shape %v needs %d", fn, a.name, a.have, a.shape, want)
		}
	}
	err := op()
	runtime.KeepAlive(args)
	if err != nil {
		return fmt.Errorf("kernels.%s: %w", fn, err)
	}
	return nil
}

func dims(rows, cols int) []int64 { return []int64{int64(rows), int64(cols)} }

// RMSNorm sets y = x / sqrt(mean(x^2) + eps) * weight row by row (weight
// may be nil: no scaling).
func RMSNorm(y, x, weight []float32, rows, cols int, eps float32) error {
	return rmsNorm("RMSNorm", y, x, weight, rows, cols, eps)
}

// RMSNormBF16 is RMSNorm on bfloat16 data.
func RMSNormBF16(y, x, weight []uint16, rows, cols int, eps float32) error {
	return rmsNorm("RMSNormBF16", y, x, weight, rows, cols, eps)
}

func rmsNorm[T element](fn string, y, x, weight []T, rows, cols int, eps float32) error {
	xa, wa, ya := describe("x", x, dims(rows, cols)...), optional("weight", weight, int64(cols)), describe("y", y, dims(rows, cols)...)
	return call(fn, func() error { return norm.RMSNormFwd(xa.t, wa.t, eps, ya.t, nil, nil) }, xa, wa, ya)
}

// LayerNorm sets y = (x - mean) / sqrt(var + eps) * weight + bias row by
// row (weight and bias may be nil).
func LayerNorm(y, x, weight, bias []float32, rows, cols int, eps float32) error {
	return layerNorm("LayerNorm", y, x, weight, bias, rows, cols, eps)
}

// LayerNormBF16 is LayerNorm on bfloat16 data.
func LayerNormBF16(y, x, weight, bias []uint16, rows, cols int, eps float32) error {
	return layerNorm("LayerNormBF16", y, x, weight, bias, rows, cols, eps)
}

func layerNorm[T element](fn string, y, x, weight, bias []T, rows, cols int, eps float32) error {
	xa, ya := describe("x", x, dims(rows, cols)...), describe("y", y, dims(rows, cols)...)
	wa, ba := optional("weight", weight, int64(cols)), optional("bias", bias, int64(cols))
	return call(fn, func() error { return norm.LayerNormFwd(xa.t, wa.t, ba.t, eps, ya.t, nil, nil, nil) }, xa, wa, ba, ya)
}

// Softmax sets each row of y to the softmax of x's row.
func Softmax(y, x []float32, rows, cols int) error { return softmaxRows("Softmax", y, x, rows, cols) }

// SoftmaxBF16 is Softmax on bfloat16 data.
func SoftmaxBF16(y, x []uint16, rows, cols int) error {
	return softmaxRows("SoftmaxBF16", y, x, rows, cols)
}

func softmaxRows[T element](fn string, y, x []T, rows, cols int) error {
	xa, ya := describe("x", x, dims(rows, cols)...), describe("y", y, dims(rows, cols)...)
	return call(fn, func() error { return softmax.Fwd(xa.t, ya.t, nil) }, xa, ya)
}

// Approximation is GELU's form.
type Approximation int32

const (
	Erf  Approximation = activation.GeluErf  // x * Phi(x)
	Tanh Approximation = activation.GeluTanh // PyTorch's approximate="tanh"
)

// GELU sets y = gelu(x) elementwise (len(y) == len(x)).
func GELU(y, x []float32, a Approximation) error { return gelu("GELU", y, x, a) }

// GELUBF16 is GELU on bfloat16 data.
func GELUBF16(y, x []uint16, a Approximation) error { return gelu("GELUBF16", y, x, a) }

func gelu[T element](fn string, y, x []T, a Approximation) error {
	xa, ya := describe("x", x, int64(len(x))), describe("y", y, int64(len(x)))
	return call(fn, func() error { return activation.GeluFwd(xa.t, int32(a), ya.t, nil) }, xa, ya)
}

// SiLU sets y = x * sigmoid(x) elementwise.
func SiLU(y, x []float32) error { return silu("SiLU", y, x) }

// SiLUBF16 is SiLU on bfloat16 data.
func SiLUBF16(y, x []uint16) error { return silu("SiLUBF16", y, x) }

func silu[T element](fn string, y, x []T) error {
	xa, ya := describe("x", x, int64(len(x))), describe("y", y, int64(len(x)))
	return call(fn, func() error { return activation.SiluFwd(xa.t, ya.t, nil) }, xa, ya)
}

// AdamWConfig is torch.optim.AdamW's hyper-parameters; Step is the step
// being taken (1 on the first call).
type AdamWConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Step                               int64
	Maximize                           bool
}

// AdamW takes one torch.optim.AdamW step on every parameter: params[i]
// with gradient grads[i] and float32 moments expAvgs[i], expAvgSqs[i], all
// of one length per i (all or nothing: nothing is updated on an error).
func AdamW(cfg AdamWConfig, params, grads, expAvgs, expAvgSqs [][]float32) error {
	return adamW("AdamW", cfg, params, grads, expAvgs, expAvgSqs)
}

// AdamWBF16 is AdamW with bfloat16 parameters and gradients (the moments
// stay float32).
func AdamWBF16(cfg AdamWConfig, params, grads [][]uint16, expAvgs, expAvgSqs [][]float32) error {
	return adamW("AdamWBF16", cfg, params, grads, expAvgs, expAvgSqs)
}

func adamW[T element](fn string, cfg AdamWConfig, params, grads [][]T, expAvgs, expAvgSqs [][]float32) error {
	n := len(params)
	if len(grads) != n || len(expAvgs) != n || len(expAvgSqs) != n {
		return fmt.Errorf("kernels.%s: %d params, %d grads, %d exp_avgs, %d exp_avg_sqs (one of each per parameter)",
			fn, n, len(grads), len(expAvgs), len(expAvgSqs))
	}
	var args []arg
	lists := make([][]*core.Tensor, 4)
	for i := range n {
		size := int64(len(params[i]))
		for k, a := range []arg{describe(fmt.Sprintf("params[%d]", i), params[i], size), describe(fmt.Sprintf("grads[%d]", i), grads[i], size),
			describe(fmt.Sprintf("exp_avgs[%d]", i), expAvgs[i], size), describe(fmt.Sprintf("exp_avg_sqs[%d]", i), expAvgSqs[i], size)} {
			args = append(args, a)
			lists[k] = append(lists[k], a.t)
		}
	}
	c := adamw.Config{LR: cfg.LR, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay, Step: cfg.Step}
	if cfg.Maximize {
		c.Maximize = 1
	}
	first := func(l []*core.Tensor) unsafe.Pointer {
		if len(l) == 0 {
			return nil
		}
		return unsafe.Pointer(&l[0])
	}
	l := adamw.Lists{N: int64(n), Params: first(lists[0]), Grads: first(lists[1]), ExpAvgs: first(lists[2]), ExpAvgSqs: first(lists[3])}
	err := call(fn, func() error { return adamw.Step(&c, l, nil) }, args...)
	runtime.KeepAlive(lists)
	return err
}

// QRMode says which factors QR computes, as torch.linalg.qr's mode.
type QRMode int32

const (
	Reduced  QRMode = qr.Reduced  // q is m x k, r is k x n (k = min(m, n))
	Complete QRMode = qr.Complete // q is m x m, r is m x n
	ROnly    QRMode = qr.ROnly    // r only (q nil), k x n
)

// QR factors each of batch m x n matrices of a: a = q r, q with orthonormal
// columns, r upper triangular (LAPACK's signs). q and r hold batch matrices
// shaped as the mode says; q is nil in ROnly mode.
func QR(q, r, a []float32, batch, m, n int, mode QRMode) error {
	k := min(m, n)
	qc, rr := k, k
	if mode == Complete {
		qc, rr = m, m
	}
	b := int64(batch)
	aa, ra := describe("a", a, b, int64(m), int64(n)), describe("r", r, b, int64(rr), int64(n))
	qa := optional("q", q, b, int64(m), int64(qc))
	return call("QR", func() error { return qr.QR(aa.t, int32(mode), qa.t, ra.t, nil, nil) }, aa, qa, ra)
}
