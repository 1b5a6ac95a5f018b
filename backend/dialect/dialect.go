// Package dialect holds the GPU kernels' shared helpers (dialect.h: 16-byte
// vectors, warp and block reductions, the row readers) in the dialect that
// CUDA and the Metal Shading Language both compile. Each backend's runtime
// compiles a kernel as its own prelude, then Helpers, then the op family's
// source.
package dialect

import _ "embed"

// Helpers is dialect.h.
//
//go:embed dialect.h
var Helpers string
