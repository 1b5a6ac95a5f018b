// Package metal is the Metal backend's portable part: the MSL programs of
// the op families' kernels, written from the same sources the CUDA backend
// compiles. A kernel source declares each kernel on a line of its own
// (MC_INSTANTIATE..., MC_ENTRY...); on CUDA the prelude's macros turn those
// lines into entries, while MSL wants every parameter's buffer index and the
// thread indices as attributed parameters, which no macro can add to a
// parameter list, so here Program writes the entries from the lines.
package metal

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"metalcore/backend/dialect"
)

//go:embed prelude.metal
var prelude string

// Param is one kernel parameter: a buffer of device memory (Pointer), or a
// value in the argument table, bound at Index.
type Param struct {
	Name, Type string
	Pointer    bool
	Index      int
}

// Kernel is one kernel as its declaration line gives it.
type Kernel struct {
	Name   string
	Params []Param
	// MaxThreads is the largest threadgroup it may run (0: the device's).
	MaxThreads int
	// GroupFloats is the threadgroup memory the entry declares (floats), or
	// GroupStruct its type; Dynamic, the element type of the threadgroup
	// memory whose length the dispatch sets (at threadgroup index 0).
	GroupFloats string
	GroupStruct string
	Dynamic     string

	call string // the entry's body: what it calls with what
}

// Program is the MSL source of one op family: the Metal prelude, the
// dialect's shared helpers, the family's source and the entry of every
// kernel its declaration lines name.
func Program(src string) (string, []Kernel, error) {
	kernels, err := Kernels(src)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	b.WriteString(prelude + "\n" + dialect.Helpers + "\n" + src + "\n// The kernels' entries.\n")
	for _, k := range kernels {
		b.WriteString(k.entry())
	}
	return b.String(), kernels, nil
}

// BoundIndex is the buffer index of a kernel's mc_bound parameter: the
// bit mask of its pointer parameters given a tensor (the rest are bound to
// a stand-in buffer, since Metal's validation refuses a nil binding of an
// index the kernel declares, and the entry passes nullptr for them); -1
// for a kernel that takes no pointer.
func (k Kernel) BoundIndex() int {
	for _, p := range k.Params {
		if p.Pointer {
			return len(k.Params)
		}
	}
	return -1
}

// entry is k's MSL kernel function.
func (k Kernel) entry() string {
	var params, nulls []string
	for _, p := range k.Params {
		if p.Pointer {
			params = append(params, fmt.Sprintf("%s mc_p_%s [[buffer(%d)]]", p.Type, p.Name, p.Index))
			nulls = append(nulls, fmt.Sprintf("    %s %s = (mc_bound >> %d & 1u) ? mc_p_%s : nullptr;\n", p.Type, p.Name, p.Index, p.Name))
		} else {
			params = append(params, fmt.Sprintf("constant %s& %s [[buffer(%d)]]", p.Type, p.Name, p.Index))
		}
	}
	if k.BoundIndex() >= 0 {
		params = append(params, fmt.Sprintf("constant uint& mc_bound [[buffer(%d)]]", k.BoundIndex()))
	}
	if k.Dynamic != "" {
		params = append(params, "threadgroup "+k.Dynamic+"* mc_dynamic [[threadgroup(0)]]")
	}
	params = append(params, "uint mc_t [[thread_position_in_threadgroup]]", "uint mc_nt [[threads_per_threadgroup]]",
		"uint mc_b [[threadgroup_position_in_grid]]", "uint mc_nb [[threadgroups_per_grid]]")
	var b strings.Builder
	if k.MaxThreads > 0 {
		fmt.Fprintf(&b, "[[max_total_threads_per_threadgroup(%d)]] ", k.MaxThreads)
	}
	fmt.Fprintf(&b, "kernel void %s(%s) {\n    const mc_ids id = {mc_t, mc_nt, mc_b, mc_nb};\n", k.Name,
		strings.Join(params, ", "))
	b.WriteString(strings.Join(nulls, ""))
	if k.GroupFloats != "" {
		fmt.Fprintf(&b, "    threadgroup float mc_group[%s];\n", k.GroupFloats)
	}
	if k.GroupStruct != "" {
		fmt.Fprintf(&b, "    threadgroup %s mc_shared;\n", k.GroupStruct)
	}
	b.WriteString("    " + k.call + ";\n}\n")
	return b.String()
}

// Kernels lists the kernels src declares (dialect.Declarations), in order:
// a kernel per dtype for each MC_INSTANTIATE line (or _BOUNDS, _GROUP,
// _DYNAMIC), and one for each MC_ENTRY line (or _GROUP).
func Kernels(src string) ([]Kernel, error) {
	var kernels []Kernel
	for _, decl := range dialect.Declarations(src) {
		args := decl.Args
		want := map[string]int{"MC_INSTANTIATE": 3, "MC_INSTANTIATE_BOUNDS": 4, "MC_INSTANTIATE_GROUP": 5,
			"MC_INSTANTIATE_DYNAMIC": 5, "MC_ENTRY": 2, "MC_ENTRY_GROUP": 4}[decl.Macro]
		if want == 0 || len(args) != want {
			return nil, fmt.Errorf("metal: %s(%s): not a kernel declaration this program knows", decl.Macro,
				strings.Join(args, ", "))
		}
		name := decl.Name()
		k := Kernel{Name: name}
		var bounds, paramList, argList string
		var extra []string // what the callee takes after id, before the arguments
		switch decl.Macro {
		case "MC_INSTANTIATE":
			paramList, argList = args[1], args[2]
		case "MC_INSTANTIATE_BOUNDS":
			bounds, paramList, argList = args[1], args[2], args[3]
		case "MC_INSTANTIATE_GROUP":
			k.GroupFloats, bounds, paramList, argList = args[1], args[2], args[3], args[4]
			extra = []string{"mc_group"}
		case "MC_INSTANTIATE_DYNAMIC":
			k.Dynamic, bounds, paramList, argList = args[1], args[2], args[3], args[4]
			extra = []string{"mc_dynamic"}
		case "MC_ENTRY":
			paramList = args[1]
		case "MC_ENTRY_GROUP":
			k.GroupStruct, paramList, argList = args[1], args[2], args[3]
			extra = []string{"mc_shared"}
		}
		params, err := parseParams(name, paramList)
		if err != nil {
			return nil, err
		}
		k.Params = params
		if bounds != "" {
			inner, ok := strings.CutPrefix(bounds, "MC_BOUNDS(")
			threads, _, _ := strings.Cut(inner, ",")
			n, err := strconv.Atoi(strings.TrimSpace(threads))
			if !ok || err != nil {
				return nil, fmt.Errorf("metal: kernel %s: bounds %q are not MC_BOUNDS(threads, blocks)", name, bounds)
			}
			k.MaxThreads = n
		}
		var callArgs []string
		if argList == "" { // MC_ENTRY: the parameters, in order
			for _, p := range params {
				callArgs = append(callArgs, p.Name)
			}
		} else {
			callArgs = dialect.SplitTop(strings.TrimSuffix(strings.TrimPrefix(argList, "("), ")"))
		}
		callArgs = append(append([]string{"id"}, extra...), callArgs...)
		if !decl.PerDType() {
			k.call = name + "_impl(" + strings.Join(callArgs, ", ") + ")"
			kernels = append(kernels, k)
			continue
		}
		for i, kname := range decl.KernelNames() {
			kd := k
			kd.Name = kname
			kd.call = name + "<" + dialect.DTypes[i].Type + ">(" + strings.Join(callArgs, ", ") + ")"
			kernels = append(kernels, kd)
		}
	}
	return kernels, nil
}

// parseParams reads a parenthesized parameter list. A pointer must be to
// device memory (MC_GLOBAL): the buffers a dispatch binds.
func parseParams(kernel, list string) ([]Param, error) {
	inner, ok := strings.CutPrefix(strings.TrimSpace(list), "(")
	if !ok || !strings.HasSuffix(inner, ")") {
		return nil, fmt.Errorf("metal: kernel %s: parameters %q are not a parenthesized list", kernel, list)
	}
	var params []Param
	for i, p := range dialect.SplitTop(strings.TrimSuffix(inner, ")")) {
		cut := strings.LastIndexAny(p, " *&")
		if cut < 0 {
			return nil, fmt.Errorf("metal: kernel %s: parameter %q has no type", kernel, p)
		}
		typ, name := strings.TrimSpace(p[:cut+1]), strings.TrimSpace(p[cut+1:])
		param := Param{Name: name, Type: typ, Pointer: strings.Contains(typ, "*"), Index: i}
		if param.Pointer && !strings.HasPrefix(typ, "MC_GLOBAL ") {
			return nil, fmt.Errorf("metal: kernel %s: parameter %s is a pointer but not MC_GLOBAL", kernel, name)
		}
		if !param.Pointer {
			param.Type = strings.TrimPrefix(typ, "const ")
		}
		params = append(params, param)
	}
	return params, nil
}
