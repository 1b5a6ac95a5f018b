#!/bin/sh
# Writes the avx2 package's kernels from this package's template files: each
# file but doc.go and width.go, renamed into package avx2. Run by go generate.
set -e
rm -f ../avx2/*_gen.go
for f in *.go; do
	case "$f" in doc.go | width.go | gen_panel.go) continue ;; esac
	out="../avx2/${f%.go}_gen.go"
	{
		printf '// Code generated from ../avx512/%s by go generate; DO NOT EDIT.\n\n' "$f"
		sed -e 's/^package avx512$/package avx2/' "$f"
	} >"$out"
done
