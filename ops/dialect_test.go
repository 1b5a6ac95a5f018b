package ops_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The GPU kernels are written in one dialect that CUDA and the Metal Shading
// Language both compile: C++14 (the syntax check and NVRTC compile them as
// C++14) without lambdas, `if constexpr`, if-with-initializer or `double`,
// an address space on every pointer and reference, and everything
// CUDA-specific — thread indices, barriers, shuffles, atomics, PTX, launch
// bounds — behind the prelude's MC_* names. Shared memory is declared by a
// kernel's declaration line (MC_INSTANTIATE_GROUP, _DYNAMIC,
// MC_ENTRY_GROUP), which the prelude turns into the entry.
var dialectRules = map[string]*regexp.Regexp{
	"a lambda":                  regexp.MustCompile(`\[[&=]?[^\]\[]*\]\s*\(`),
	"if constexpr":              regexp.MustCompile(`\bif\s+constexpr\b`),
	"an if with an initializer": regexp.MustCompile(`\bif\s*\(\s*(?:const\s+)?(?:int|auto|float|unsigned|mc_i64)\s+\w+\s*=[^;{}]*;`),
	"double":                    regexp.MustCompile(`\bdouble\b`),
	"long long (MSL has none: mc_i64, mc_u64)": regexp.MustCompile(`\blong\s+long\b`),
	"inline PTX":                           regexp.MustCompile(`\basm\b`),
	"a CUDA built-in":                      regexp.MustCompile(`\b(?:threadIdx|blockIdx|blockDim|gridDim|warpSize|__syncthreads|__syncwarp|__shfl\w*|atomic[A-Z]\w*|__threadfence\w*|__shared__|__device__|__global__|__launch_bounds__|__align__|__forceinline__)\b`),
	"MC_SHARED in a kernel source":         regexp.MustCompile(`\bMC_SHARED\b`),
	"two address spaces in one declarator": regexp.MustCompile(`\bMC_(?:GLOBAL|GROUP|THREAD|CONSTANT)\b[^,;(){}=]*\bMC_(?:GLOBAL|GROUP|THREAD|CONSTANT)\b`),
}

var comments = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)

// A pointer or reference declarator (or cast) of a kernel type, and the
// address space MSL requires on it, which must stand in the same
// declaration: MC_GLOBAL, MC_GROUP, MC_THREAD or MC_CONSTANT.
var (
	declarator = regexp.MustCompile(`(?:\b(?:float|int|unsigned|uint2|uint4|float4|void|mc_u16|mc_i64|mc_u64|mc_ids|T|F|V|` +
		`AdamWScalars|AdamWBatch|NormGradTerms|QrPanelShared)\b|::T\b|>)\s*(?:const\s*)?[*&]+|\(\s*&\s*\w+\s*\)\s*\[`)
	addressSpace = regexp.MustCompile(`\bMC_(?:GLOBAL|GROUP|THREAD|CONSTANT)\b`)
)

// unqualified lists the lines of code's pointer and reference declarators
// with no address space in their declaration (which starts after the last
// ; { } ( or a comma outside template brackets).
func unqualified(code string) []int {
	var lines []int
	for _, at := range declarator.FindAllStringIndex(code, -1) {
		start, depth := at[0], 0
		if code[start] == '>' { // the declarator's own template brackets
			depth = 1
		}
	scan:
		for ; start > 0; start-- {
			switch code[start-1] {
			case '>':
				depth++
			case '<':
				depth--
			case ';', '{', '}', '(':
				break scan
			case ',':
				if depth <= 0 {
					break scan
				}
			}
		}
		if !addressSpace.MatchString(code[start:at[1]]) {
			lines = append(lines, 1+strings.Count(code[:at[0]], "\n"))
		}
	}
	return lines
}

func TestKernelSourcesDialect(t *testing.T) {
	files, err := filepath.Glob("*/*.cu")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range append(files, "../backend/dialect/dialect.h") {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		code := comments.ReplaceAllString(string(src), "")
		for _, line := range unqualified(code) {
			t.Errorf("%s:%d: a pointer or reference with no address space (MC_GLOBAL, MC_GROUP, MC_THREAD, MC_CONSTANT): MSL requires one", f, line)
		}
		for rule, re := range dialectRules {
			if at := re.FindStringIndex(code); at != nil {
				line := 1 + len(regexp.MustCompile("\n").FindAllStringIndex(code[:at[0]], -1))
				t.Errorf("%s:%d: %s (%q): kernels are written in the dialect CUDA and MSL share", f, line, rule, code[at[0]:at[1]])
			}
		}
	}
}

// The address-space check finds declarators without one, and takes those
// with one, template arguments and expressions as they are.
func TestUnqualifiedDeclarators(t *testing.T) {
	require.Equal(t, []int{1, 2, 3, 4, 5}, unqualified("void f(const float* x,\n float& s,\n"+
		"  T* p);\nfloat (&a)[4] = b;\nRow<D, C>& r = q;\n"))
	require.Empty(t, unqualified("void f(MC_GLOBAL const float* x, MC_THREAD float& s, MC_GROUP T* p);\n"+
		"MC_THREAD float (&a)[4] = b;\nMC_THREAD Row<D, C>& r = q;\nint y = a * b && c;\n"+
		"x = *(MC_GLOBAL const uint4*)(p + s);\n"))
}

// The rules find what they are meant to find: each forbidden form, planted
// in an otherwise clean kernel, is caught by its rule.
func TestDialectRulesCatch(t *testing.T) {
	planted := map[string]string{
		"a lambda":                             "auto f = [&](float v) { return v; };",
		"if constexpr":                         "if constexpr (ahead) x = 1;",
		"an if with an initializer":            "if (int s = k * 4; s < n) x = s;",
		"double":                               "double ss = 0;",
		"inline PTX":                           `asm("mov.u32 %0, 1;" : "=r"(x));`,
		"a CUDA built-in":                      "int t = threadIdx.x;",
		"MC_SHARED in a kernel source":         "MC_DEVICE void f(int n) {\n    MC_SHARED float red[33];\n}",
		"two address spaces in one declarator": "MC_GLOBAL typename D::MC_GLOBAL T* y;",
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
