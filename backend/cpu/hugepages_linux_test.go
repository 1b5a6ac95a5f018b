package cpu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHugePagesAsked(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		setting, mode string
		want          bool
	}{
		{"", "always [madvise] never\n", true},
		{"1", "always [madvise] never\n", true},
		{"0", "always [madvise] never\n", false},
		{"", "[always] madvise never\n", false},
		{"", "always madvise [never]\n", false},
		{"", "", false},
	} {
		path := filepath.Join(dir, "enabled")
		if err := os.WriteFile(path, []byte(c.mode), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := hugePagesAsked(c.setting, path); got != c.want {
			t.Errorf("MC_CPU_HUGEPAGES=%q, THP %q: asked %v, want %v", c.setting, c.mode, got, c.want)
		}
	}
	missing := filepath.Join(dir, "missing")
	if !hugePagesAsked("", missing) {
		t.Error("no THP setting to read: not asked, want asked")
	}
	if hugePagesAsked("0", missing) {
		t.Error("MC_CPU_HUGEPAGES=0, no THP setting to read: asked, want not")
	}
}
