// Package avx512 implements the simd primitives with 512-bit vectors. It is
// built only with GOEXPERIMENT=simd on amd64; every file but doc.go and
// width.go is the template that go generate (gen_avx2.sh) copies into the
// avx2 package.
package avx512

//go:generate sh gen_avx2.sh
