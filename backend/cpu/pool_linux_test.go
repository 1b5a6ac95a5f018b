package cpu

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The caller never waits for a worker that has not started: with one P and
// the caller locked to its thread, no worker can run until the caller
// blocks, so the caller takes every piece itself.
func TestParallelCallerTakesUnstartedPieces(t *testing.T) {
	defer SetThreads(SetThreads(4))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := syscall.Gettid()
	var mu sync.Mutex
	var threads []int
	Parallel(4, 1, func(lo, hi int, _ *Scratch) {
		mu.Lock()
		threads = append(threads, syscall.Gettid())
		mu.Unlock()
	})
	require.Equal(t, []int{caller, caller, caller, caller}, threads)
}
