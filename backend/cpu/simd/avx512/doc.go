// Package avx512 implements the simd primitives with 512-bit vectors. It is
// built only with GOEXPERIMENT=simd on amd64; every Go file but doc.go,
// width.go and gen_panel.go is the template that go generate (gen_avx2.sh)
// copies into the avx2 package; gen_panel.go writes both packages'
// panel_amd64.s, QR's panel-product kernel in assembly.
package avx512

//go:generate sh gen_avx2.sh
//go:generate go run gen_panel.go
