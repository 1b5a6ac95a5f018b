//go:build !(goexperiment.simd && amd64)

package kernels

// simdBuild: only the portable kernels are built.
const simdBuild = false
