package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// The functions include/metalcore.h declares and the symbols the built
// library exports must be the same set.
func TestHeaderMatchesExports(t *testing.T) {
	header, err := os.ReadFile("../include/metalcore.h")
	require.NoError(t, err)
	var declared []string
	for _, m := range regexp.MustCompile(`(?m)^[A-Za-z_][A-Za-z0-9_ ]*[ *]\s*(mc_[a-z0-9_]+)\(`).FindAllSubmatch(header, -1) {
		declared = append(declared, string(m[1]))
	}
	sort.Strings(declared)

	lib := filepath.Join(t.TempDir(), "libmetalcore.so")
	build := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := elf.Open(lib)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var exported []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && regexp.MustCompile(`^mc_`).MatchString(s.Name) {
			exported = append(exported, s.Name)
		}
	}
	sort.Strings(exported)
	require.NotEmpty(t, declared)
	require.Equal(t, declared, exported)
}
