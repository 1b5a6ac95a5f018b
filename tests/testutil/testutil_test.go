package testutil

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// MC_REQUIRE_BACKENDS: a comma-separated list of known backends; anything
// else is an error, not silently no requirement.
func TestRequiredBackends(t *testing.T) {
	got, err := requiredBackends(" cpu, cuda ")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"cpu": true, "cuda": true}, got)
	got, err = requiredBackends("")
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = requiredBackends("cpu,metal,gpu")
	require.ErrorContains(t, err, `unknown backend "metal"`)
}
