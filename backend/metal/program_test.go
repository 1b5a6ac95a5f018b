package metal

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A family's declaration lines, in every form the kernel sources use:
// parameter and argument lists given inline and by macros (naming macros),
// bounds, shared memory of each kind, and a kernel of one type with a body.
const family = `#define ROWS_PARAMS \
    (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL float* rstd, int cols)
#define ROWS_ARGS (x, xs, rstd, cols)
#define SCRATCH SCRATCH_FLOATS  // a comment
#define SCRATCH_FLOATS 33
template <class D> MC_DEVICE void rows(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs,
                                       MC_GLOBAL float* rstd, int cols) {}
MC_INSTANTIATE_GROUP(rows, SCRATCH, MC_BOUNDS(512, 1), ROWS_PARAMS, ROWS_ARGS)
MC_INSTANTIATE(scale, (MC_GLOBAL void* y, const float s), (y, s))
MC_INSTANTIATE_DYNAMIC(cols, float4, , (MC_GLOBAL const void* a,
                       int m), (a, m))
MC_ENTRY(plain, (MC_GLOBAL float* out, int n)) {
    MC_IDS_DECLARE;
}
MC_ENTRY_GROUP(panel, PanelShared, (MC_GLOBAL float* w, unsigned base), (w, base))
`

func TestKernelsFromDeclarations(t *testing.T) {
	ks, err := Kernels(family)
	require.NoError(t, err)
	var names []string
	for _, k := range ks {
		names = append(names, k.Name)
	}
	require.Equal(t, []string{"rows_f32", "rows_f16", "rows_bf16", "scale_f32", "scale_f16", "scale_bf16", "cols_f32",
		"cols_f16", "cols_bf16", "plain", "panel"}, names)

	rows := ks[2]
	require.Equal(t, []Param{{"x", "MC_GLOBAL const void*", true, 0}, {"xs", "mc_i64", false, 1},
		{"rstd", "MC_GLOBAL float*", true, 2}, {"cols", "int", false, 3}}, rows.Params)
	require.Equal(t, 512, rows.MaxThreads)
	require.Equal(t, "33", rows.GroupFloats)
	entry := rows.entry()
	for _, want := range []string{
		"[[max_total_threads_per_threadgroup(512)]] kernel void rows_bf16(",
		"MC_GLOBAL const void* mc_p_x [[buffer(0)]], constant mc_i64& xs [[buffer(1)]], MC_GLOBAL float* mc_p_rstd [[buffer(2)]], " +
			"constant int& cols [[buffer(3)]], constant uint& mc_bound [[buffer(4)]], uint mc_t [[thread_position_in_threadgroup]]",
		// a null pointer is a stand-in buffer and a clear bit of mc_bound
		"MC_GLOBAL const void* x = (mc_bound >> 0 & 1u) ? mc_p_x : nullptr;",
		"MC_GLOBAL float* rstd = (mc_bound >> 2 & 1u) ? mc_p_rstd : nullptr;",
		"threadgroup float mc_group[33];",
		"rows<BF16>(id, mc_group, x, xs, rstd, cols);",
	} {
		require.Contains(t, entry, want)
	}

	scale := ks[3].entry()
	require.Contains(t, scale, "constant float& s [[buffer(1)]]") // a const value is a constant reference
	require.Contains(t, scale, "scale<F32>(id, y, s);")
	require.NotContains(t, scale, "max_total_threads")

	cols := ks[8]
	require.Equal(t, "float4", cols.Dynamic)
	require.Contains(t, cols.entry(), "threadgroup float4* mc_dynamic [[threadgroup(0)]]")
	require.Contains(t, cols.entry(), "cols<BF16>(id, mc_dynamic, a, m);")

	require.Contains(t, ks[9].entry(), "plain_impl(id, out, n);")
	panel := ks[10].entry()
	require.Contains(t, panel, "threadgroup PanelShared mc_shared;")
	require.Contains(t, panel, "panel_impl(id, mc_shared, w, base);")
	require.Contains(t, panel, "constant unsigned& base [[buffer(1)]]")
}

func TestProgramHoldsEverything(t *testing.T) {
	src, ks, err := Program(family)
	require.NoError(t, err)
	require.Len(t, ks, 11)
	require.True(t, strings.HasPrefix(src, prelude))
	require.Less(t, strings.Index(src, "mc_row_load"), strings.Index(src, "MC_INSTANTIATE_GROUP(rows"))
	require.Equal(t, 11, strings.Count(src, "\nkernel void ")+strings.Count(src, "]] kernel void "))
}

func TestKernelsRefuse(t *testing.T) {
	for _, c := range []struct{ src, msg string }{
		{"MC_INSTANTIATE(f, (float* x), (x))\n", "parameter x is a pointer but not MC_GLOBAL"},
		{"MC_INSTANTIATE(f, (MC_GLOBAL float* x))\n", "not a kernel declaration"},
		{"MC_INSTANTIATE_SOMETHING(f, (int n), (n))\n", "not a kernel declaration"},
		{"MC_INSTANTIATE(f, UNDEFINED_PARAMS, (n))\n", "not a parenthesized list"},
		{"MC_INSTANTIATE_BOUNDS(f, __launch_bounds__(128), (int n), (n))\n", "not MC_BOUNDS(threads, blocks)"},
	} {
		_, err := Kernels(c.src)
		require.ErrorContains(t, err, c.msg, c.src)
	}
}
