//go:build !(linux && cgo)

package cpu

// Without cgo on Linux the pieces always run on goroutines.
func onTeam(int, func()) bool { return false }
