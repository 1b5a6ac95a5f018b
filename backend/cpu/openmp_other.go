//go:build !(linux && cgo)

package cpu

// Elsewhere than Linux with cgo the pieces always run on goroutines.
func onTeam(int, func()) bool { return false }
