package main

import (
	"debug/elf"
	"debug/macho"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// declaredFunctions are the functions include/metalcore.h declares, sorted.
func declaredFunctions(t *testing.T) []string {
	header, err := os.ReadFile("../include/metalcore.h")
	require.NoError(t, err)
	var declared []string
	for _, m := range regexp.MustCompile(`(?m)^[A-Za-z_][A-Za-z0-9_ ]*[ *]\s*(mc_[a-z0-9_]+)\(`).FindAllSubmatch(header, -1) {
		declared = append(declared, string(m[1]))
	}
	sort.Strings(declared)
	require.NotEmpty(t, declared)
	return declared
}

// The functions include/metalcore.h declares and the symbols the built
// library exports, linked with capi/exports.map as the Makefile links it,
// must be the same set.
func TestHeaderMatchesExports(t *testing.T) {
	declared := declaredFunctions(t)

	lib := filepath.Join(t.TempDir(), "libmetalcore.so")
	exports, err := filepath.Abs("exports.map")
	require.NoError(t, err)
	build := exec.Command("go", "build", "-buildmode=c-shared", "-ldflags=-extldflags=-Wl,--version-script="+exports, "-o", lib, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := elf.Open(lib)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var exported []string
	for _, s := range syms { // every symbol the library defines: the Go runtime's and capi's own stay inside
		if s.Section != elf.SHN_UNDEF && s.Name != "" {
			exported = append(exported, s.Name)
		}
	}
	sort.Strings(exported)
	require.NotEmpty(t, declared)
	require.Equal(t, declared, exported)
}

// The macOS library (make darwin, cross-built for arm64) exports exactly the
// header's functions, and is a Mach-O arm64 dylib; MC_DARWIN_DYLIB names it.
func TestHeaderMatchesDarwinExports(t *testing.T) {
	path := os.Getenv("MC_DARWIN_DYLIB")
	if path == "" {
		t.Skip("MC_DARWIN_DYLIB is not set: make test-darwin builds the dylib and runs this test on it")
	}
	f, err := macho.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, macho.CpuArm64, f.Cpu)
	require.Equal(t, macho.TypeDylib, f.Type)
	// N_EXT without N_PEXT: a private external (C's hidden visibility, as
	// capi's mc_set_error) is not exported
	const external, privateExternal = 0x01, 0x10
	var exported []string
	for _, s := range f.Symtab.Syms {
		if s.Sect != 0 && s.Type&(external|privateExternal) == external && regexp.MustCompile(`^_mc_`).MatchString(s.Name) {
			exported = append(exported, s.Name[1:]) // Mach-O prefixes C names with _
		}
	}
	sort.Strings(exported)
	require.Equal(t, declaredFunctions(t), exported)
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Contains(t, libs, "/usr/lib/libSystem.B.dylib")
}
