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

// dtypes are the element types a per-dtype kernel is instantiated for.
var dtypes = []struct{ suffix, typ string }{{"f32", "F32"}, {"f16", "F16"}, {"bf16", "BF16"}}

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

// entry is k's MSL kernel function.
func (k Kernel) entry() string {
	var params []string
	for _, p := range k.Params {
		if p.Pointer {
			params = append(params, fmt.Sprintf("%s %s [[buffer(%d)]]", p.Type, p.Name, p.Index))
		} else {
			params = append(params, fmt.Sprintf("constant %s& %s [[buffer(%d)]]", p.Type, p.Name, p.Index))
		}
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
	if k.GroupFloats != "" {
		fmt.Fprintf(&b, "    threadgroup float mc_group[%s];\n", k.GroupFloats)
	}
	if k.GroupStruct != "" {
		fmt.Fprintf(&b, "    threadgroup %s mc_shared;\n", k.GroupStruct)
	}
	b.WriteString("    " + k.call + ";\n}\n")
	return b.String()
}

// Kernels lists the kernels src declares, in order: a kernel per dtype for
// each MC_INSTANTIATE line (or _BOUNDS, _GROUP, _DYNAMIC), and one for each
// MC_ENTRY line (or _GROUP). Parameter and argument lists may be given by
// object-like macros of src.
func Kernels(src string) ([]Kernel, error) {
	macros := objectMacros(src)
	expand := func(s string) string {
		for range 8 { // macros naming macros
			m, ok := macros[strings.TrimSpace(s)]
			if !ok {
				break
			}
			s = m
		}
		return strings.TrimSpace(s)
	}
	var kernels []Kernel
	for _, line := range declarationLines(src) {
		macro, rest, _ := strings.Cut(line, "(")
		args := splitTop(rest[:len(rest)-1])
		for i := range args {
			args[i] = expand(args[i])
		}
		want := map[string]int{"MC_INSTANTIATE": 3, "MC_INSTANTIATE_BOUNDS": 4, "MC_INSTANTIATE_GROUP": 5,
			"MC_INSTANTIATE_DYNAMIC": 5, "MC_ENTRY": 2, "MC_ENTRY_GROUP": 4}[macro]
		if want == 0 || len(args) != want {
			return nil, fmt.Errorf("metal: %q: not a kernel declaration this program knows", line)
		}
		name := args[0]
		k := Kernel{Name: name}
		var bounds, paramList, argList string
		var extra []string // what the callee takes after id, before the arguments
		switch macro {
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
		if argList == "" { // MC_ENTRY: the parameters, in order
			for _, p := range params {
				argList += ", " + p.Name
			}
			argList = "(" + strings.TrimPrefix(argList, ", ") + ")"
		}
		callArgs := append(append([]string{"id"}, extra...), splitTop(strings.TrimSuffix(strings.TrimPrefix(argList, "("), ")"))...)
		if strings.HasPrefix(macro, "MC_ENTRY") {
			k.call = name + "_impl(" + strings.Join(callArgs, ", ") + ")"
			kernels = append(kernels, k)
			continue
		}
		for _, d := range dtypes {
			kd := k
			kd.Name = name + "_" + d.suffix
			kd.call = name + "<" + d.typ + ">(" + strings.Join(callArgs, ", ") + ")"
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
	for i, p := range splitTop(strings.TrimSuffix(inner, ")")) {
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

// declarationLines are src's kernel declarations, each joined onto one line:
// from a line starting MC_INSTANTIATE or MC_ENTRY to its closing parenthesis.
func declarationLines(src string) []string {
	var out []string
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "MC_INSTANTIATE") && !strings.HasPrefix(lines[i], "MC_ENTRY") {
			continue
		}
		text := lines[i]
		for depth(text) > 0 && i+1 < len(lines) {
			i++
			text += " " + strings.TrimSpace(lines[i])
		}
		// keep the invocation alone (an MC_ENTRY's body follows it)
		end, d := 0, 0
		for j, c := range text {
			if c == '(' {
				d++
			} else if c == ')' {
				if d--; d == 0 {
					end = j + 1
					break
				}
			}
		}
		out = append(out, text[:end])
	}
	return out
}

// depth is the parentheses text leaves open.
func depth(text string) int {
	return strings.Count(text, "(") - strings.Count(text, ")")
}

// splitTop splits s at its commas outside parentheses and angle brackets,
// each part trimmed (nothing for an empty s).
func splitTop(s string) []string {
	var parts []string
	d, start := 0, 0
	for i, c := range s {
		switch c {
		case '(', '<':
			d++
		case ')', '>':
			d--
		case ',':
			if d == 0 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" || len(parts) > 0 {
		parts = append(parts, last)
	}
	return parts
}

// objectMacros are src's object-like #defines (continuation lines joined,
// a trailing comment dropped).
func objectMacros(src string) map[string]string {
	macros := map[string]string{}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], "#define ")
		if !ok {
			continue
		}
		for strings.HasSuffix(rest, "\\") && i+1 < len(lines) {
			i++
			rest = strings.TrimSuffix(rest, "\\") + " " + strings.TrimSpace(lines[i])
		}
		name, body, _ := strings.Cut(rest, " ")
		if strings.Contains(name, "(") {
			continue // function-like
		}
		body, _, _ = strings.Cut(body, "//")
		macros[name] = strings.Join(strings.Fields(body), " ")
	}
	return macros
}
