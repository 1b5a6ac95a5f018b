//go:build unix

package cpu

import "golang.org/x/sys/unix"

// mapMemory maps n bytes of private anonymous memory: a failure is an
// error, where Go's heap would abort the process.
func mapMemory(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

func unmapMemory(b []byte) { _ = unix.Munmap(b) }
