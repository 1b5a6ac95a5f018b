package ops_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The GPU kernels are written in one dialect that CUDA and the Metal Shading
// Language both compile: C++14 (the syntax check and NVRTC compile them as
// C++14) without lambdas, `if constexpr`, if-with-initializer or `double`,
// and with everything CUDA-specific — thread indices, shared memory,
// barriers, shuffles, atomics, PTX, launch bounds — behind the prelude's
// MC_* names.
var dialectRules = map[string]*regexp.Regexp{
	"a lambda":                   regexp.MustCompile(`\[[&=]?[^\]\[]*\]\s*\(`),
	"if constexpr":               regexp.MustCompile(`\bif\s+constexpr\b`),
	"an if with an initializer":  regexp.MustCompile(`\bif\s*\(\s*(?:const\s+)?(?:int|auto|float|unsigned|mc_i64)\s+\w+\s*=[^;{}]*;`),
	"double":                     regexp.MustCompile(`\bdouble\b`),
	"inline PTX":                 regexp.MustCompile(`\basm\b`),
	"a CUDA built-in":            regexp.MustCompile(`\b(?:threadIdx|blockIdx|blockDim|gridDim|warpSize|__syncthreads|__syncwarp|__shfl\w*|atomic[A-Z]\w*|__threadfence\w*|__shared__|__device__|__global__|__launch_bounds__|__align__|__forceinline__)\b`),
	"MC_SHARED outside an entry": regexp.MustCompile(`MC_DEVICE[^{;]*\{[^}]*MC_SHARED`),
}

var comments = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)

func TestKernelSourcesDialect(t *testing.T) {
	files, err := filepath.Glob("*/*.cu")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		code := comments.ReplaceAllString(string(src), "")
		for rule, re := range dialectRules {
			if at := re.FindStringIndex(code); at != nil {
				line := 1 + len(regexp.MustCompile("\n").FindAllStringIndex(code[:at[0]], -1))
				t.Errorf("%s:%d: %s (%q): kernels are written in the dialect CUDA and MSL share", f, line, rule, code[at[0]:at[1]])
			}
		}
	}
}

// The rules find what they are meant to find: each forbidden form, planted
// in an otherwise clean kernel, is caught by its rule.
func TestDialectRulesCatch(t *testing.T) {
	planted := map[string]string{
		"a lambda":                   "auto f = [&](float v) { return v; };",
		"if constexpr":               "if constexpr (ahead) x = 1;",
		"an if with an initializer":  "if (int s = k * 4; s < n) x = s;",
		"double":                     "double ss = 0;",
		"inline PTX":                 `asm("mov.u32 %0, 1;" : "=r"(x));`,
		"a CUDA built-in":            "int t = threadIdx.x;",
		"MC_SHARED outside an entry": "MC_DEVICE void f(int n) {\n    MC_SHARED float red[33];\n}",
	}
	for rule, code := range planted {
		require.Regexp(t, dialectRules[rule], code, rule)
		for other, re := range dialectRules {
			if other != rule && other != "a CUDA built-in" {
				require.NotRegexp(t, re, code, "%s also matched %s", code, other)
			}
		}
	}
}
