// Package avx512 implements the simd primitives with 512-bit vectors. It is
// built only with GOEXPERIMENT=simd on amd64; kernels.go is the template
// that go generate copies into the avx2 package.
package avx512

//go:generate sh -c "sed -e 's/^package avx512$/package avx2/' -e '1s|^|// Code generated from ../avx512/kernels.go by go generate; DO NOT EDIT.\\n\\n|' kernels.go > ../avx2/kernels.go"
