//go:build !unix

package cpu

// mapMemory takes Go's heap where there is no mmap.
func mapMemory(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapMemory([]byte) {}
