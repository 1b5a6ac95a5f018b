package ops_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The GPU kernels are to be written in one dialect that CUDA and the Metal
// Shading Language both compile: C++14 without lambdas, `if constexpr`,
// if-with-initializer, `double`, inline PTX outside the prelude, or
// __launch_bounds__ with a minimum block count. dialectDebt is what the
// sources still hold of each, per file: a new use fails this test, and so
// does one removed without lowering its count here, so the table stays the
// exact list of what is left to port.
var dialectDebt = map[string]map[string]int{
	"activation/activation.cu": {"lambda": 7, "if constexpr": 1},
	"norm/norm.cu":             {"lambda": 12, "if constexpr": 4, "if with initializer": 3},
	"qr/qr.cu":                 {"lambda": 4, "if constexpr": 7, "if with initializer": 1, "double": 22, "launch bounds with blocks": 1},
	"softmax/softmax.cu":       {"lambda": 6, "if constexpr": 1},
	prelude:                    {"if constexpr": 1, "if with initializer": 1},
}

const prelude = "../encoder/cuda/prelude.cuh"

var dialectRules = map[string]*regexp.Regexp{
	"lambda":                    regexp.MustCompile(`\[[&=]?[^\]\[]*\]\s*\(`),
	"if constexpr":              regexp.MustCompile(`\bif\s+constexpr\b`),
	"if with initializer":       regexp.MustCompile(`\bif\s*\(\s*(?:const\s+)?(?:int|auto|float|unsigned|mc_i64)\s+\w+\s*=[^;{}]*;`),
	"double":                    regexp.MustCompile(`\bdouble\b`),
	"inline PTX":                regexp.MustCompile(`\basm\s*\(`),
	"launch bounds with blocks": regexp.MustCompile(`__launch_bounds__\(\s*\d+\s*,`),
}

var comments = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)

func TestKernelSourcesDialect(t *testing.T) {
	files, err := filepath.Glob("*/*.cu")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range append(files, prelude) {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		code := comments.ReplaceAllString(string(src), "")
		for rule, re := range dialectRules {
			if rule == "inline PTX" && f == prelude {
				continue // the prelude is where PTX belongs
			}
			got, want := len(re.FindAllStringIndex(code, -1)), dialectDebt[filepath.ToSlash(f)][rule]
			if got > want {
				t.Errorf("%s: %d uses of %s, at most %d: kernels are written in the dialect CUDA and MSL share", f, got, rule, want)
			} else if got < want {
				t.Errorf("%s: %d uses of %s left: lower its count in dialectDebt to %d", f, got, rule, got)
			}
		}
	}
}
