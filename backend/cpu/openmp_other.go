//go:build !(linux && cgo)

package cpu

// Elsewhere than Linux with cgo the pieces always run on goroutines.
func teamSize() int { return 0 }

// runTeam is never called there (teamSize is 0).
func runTeam(int, func()) {}
