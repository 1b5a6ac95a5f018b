package kernels_test

import (
	"fmt"
	"math"

	"metalcore/kernels"
)

func ExampleRMSNorm() {
	x := []float32{1, 2, 3, 4, -1, 0, 1, 0}
	w := []float32{1, 1, 2, 2}
	y := make([]float32, len(x))
	if err := kernels.RMSNorm(y, x, w, 2, 4, 1e-6); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f\n", y)
	// Output: [0.3651 0.7303 2.1909 2.9212 -1.4142 0.0000 2.8284 0.0000]
}

func ExampleSoftmax() {
	x := []float32{0, 1, 2, 10, 10, 10}
	y := make([]float32, len(x))
	if err := kernels.Softmax(y, x, 2, 3); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f\n", y)
	// Output: [0.0900 0.2447 0.6652 0.3333 0.3333 0.3333]
}

func ExampleGELU() {
	x := []float32{-3, -1, 0, 1, 3}
	y := make([]float32, len(x))
	if err := kernels.GELU(y, x, kernels.Tanh); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f\n", y)
	// Output: [-0.0036 -0.1588 0.0000 0.8412 2.9964]
}

// Bad arguments are errors naming the function and the argument; nothing
// is written.
func ExampleSiLU_error() {
	y := []float32{7, 7}
	err := kernels.SiLU(y, []float32{1, 2, 3})
	fmt.Println(err, y)
	// Output: kernels.SiLU: y has 2 elements, its shape [3] needs 3 [7 7]
}

func ExampleAdamW() {
	params := [][]float32{{1, -1}, {0.5}}
	grads := [][]float32{{0.1, -0.2}, {0.3}}
	m := [][]float32{make([]float32, 2), make([]float32, 1)}
	v := [][]float32{make([]float32, 2), make([]float32, 1)}
	cfg := kernels.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 1}
	if err := kernels.AdamW(cfg, params, grads, m, v); err != nil {
		panic(err)
	}
	fmt.Printf("%.5f\n", params)
	// Output: [[0.98990 -0.98990] [0.48995]]
}

func ExampleQR() {
	a := []float32{3, 1, 4, 2} // one 2x2 matrix
	q, r := make([]float32, 4), make([]float32, 4)
	if err := kernels.QR(q, r, a, 1, 2, 2, kernels.Reduced); err != nil {
		panic(err)
	}
	// q r = a, to float32 rounding
	worst := 0.0
	for i := range 2 {
		for j := range 2 {
			worst = max(worst, math.Abs(float64(q[2*i]*r[j]+q[2*i+1]*r[2+j]-a[2*i+j])))
		}
	}
	fmt.Println(worst < 1e-5)
	fmt.Printf("%.1f\n", r) // LAPACK's signs: r's diagonal may be negative
	// Output:
	// true
	// [-5.0 -2.2 0.0 0.4]
}
