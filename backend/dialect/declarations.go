package dialect

import "strings"

// Declaration is one kernel declaration line of a kernel source: a line
// starting MC_INSTANTIATE... (a kernel per dtype) or MC_ENTRY... (a kernel
// of one type), up to its closing parenthesis, with its arguments split at
// top-level commas and the source's object-like macros among them expanded.
// Each backend turns these lines into its kernels' entries: the CUDA
// prelude's macros do it there, the Metal backend writes them.
type Declaration struct {
	Macro string
	Args  []string
}

// DTypes are the element types a per-dtype kernel is instantiated for: the
// kernel's name suffix and the prelude's type.
var DTypes = []struct{ Suffix, Type string }{{"f32", "F32"}, {"f16", "F16"}, {"bf16", "BF16"}}

// PerDType reports whether d declares a kernel per dtype.
func (d Declaration) PerDType() bool { return strings.HasPrefix(d.Macro, "MC_INSTANTIATE") }

// Name is the declared kernel's name (before any dtype suffix).
func (d Declaration) Name() string {
	if len(d.Args) == 0 {
		return ""
	}
	return d.Args[0]
}

// KernelNames are the kernels d declares: NAME_f32, NAME_f16, NAME_bf16, or
// NAME.
func (d Declaration) KernelNames() []string {
	if !d.PerDType() {
		return []string{d.Name()}
	}
	var names []string
	for _, t := range DTypes {
		names = append(names, d.Name()+"_"+t.Suffix)
	}
	return names
}

// Declarations are src's kernel declarations, in order.
func Declarations(src string) []Declaration {
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
	var decls []Declaration
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
		macro, rest, ok := strings.Cut(text, "(")
		if !ok || strings.ContainsAny(macro, " \t") {
			continue
		}
		// the invocation alone (an MC_ENTRY's body follows it)
		end, d := len(rest), 1
		for j, c := range rest {
			if c == '(' {
				d++
			} else if c == ')' {
				if d--; d == 0 {
					end = j
					break
				}
			}
		}
		args := SplitTop(rest[:end])
		for k := range args {
			args[k] = expand(args[k])
		}
		decls = append(decls, Declaration{Macro: macro, Args: args})
	}
	return decls
}

// depth is the parentheses text leaves open.
func depth(text string) int {
	return strings.Count(text, "(") - strings.Count(text, ")")
}

// SplitTop splits s at its commas outside parentheses and angle brackets,
// each part trimmed (nothing for an empty s).
func SplitTop(s string) []string {
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
