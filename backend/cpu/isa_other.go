//go:build !(goexperiment.simd && amd64)

package cpu

import "metalcore/backend/cpu/simd"

// Without GOEXPERIMENT=simd on amd64 (and on every other architecture) only
// the portable implementation exists.
func isaTables() []*simd.Table { return nil }
