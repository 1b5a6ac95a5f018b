package cpu

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// MC_NUM_THREADS: a positive integer is taken; anything else is reported
// once and the default (all cores) used; unset is the default silently.
func TestThreadsFromEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
		warn bool
	}{{"", runtime.NumCPU(), false}, {"3", 3, false}, {"abc", runtime.NumCPU(), true}, {"0", runtime.NumCPU(), true},
		{"-2", runtime.NumCPU(), true}, {"1.5", runtime.NumCPU(), true}} {
		var w strings.Builder
		require.Equal(t, c.want, threadsFromEnv(c.v, &w), c.v)
		require.Equal(t, c.warn, strings.Contains(w.String(), "MC_NUM_THREADS"), "%q: %q", c.v, w.String())
	}
}
