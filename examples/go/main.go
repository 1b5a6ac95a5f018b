// A Go program outside metalcore's module using its Go API through a
// replace directive (see go.mod): no cgo, no shared library.
package main

import (
	"fmt"
	"os"

	"metalcore/kernels"
)

func main() {
	x := []float32{1, 2, 3, 4, 5, 6}
	y := make([]float32, len(x))
	if err := kernels.Softmax(y, x, 2, 3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := kernels.RMSNorm(y, y, nil, 2, 3, 1e-6); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("rms_norm(softmax(x)) = %.4f\n", y)
}
