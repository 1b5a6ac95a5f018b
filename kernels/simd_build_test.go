//go:build goexperiment.simd && amd64

package kernels

// simdBuild: the vector kernels are built in.
const simdBuild = true
