package cpu

import (
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// The caller never waits for a worker that has not started: with one P and
// the caller locked to its thread, no worker can run until the caller
// blocks, so the caller takes every piece itself. The runtime may still
// preempt the caller (it does under an emulator, where a call is slow), and
// a worker then takes the pieces left; so the test asks for one run in a few
// where the caller took them all. A version that assigns pieces to workers
// never gets one.
func TestParallelCallerTakesUnstartedPieces(t *testing.T) {
	defer SetThreads(SetThreads(4))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := syscall.Gettid()
	var runs [][]int
	for range 8 {
		var mu sync.Mutex
		var threads []int
		Parallel(4, 1, func(lo, hi int, _ *Scratch) {
			mu.Lock()
			threads = append(threads, syscall.Gettid())
			mu.Unlock()
		})
		if slices.Equal(threads, []int{caller, caller, caller, caller}) {
			return
		}
		runs = append(runs, threads)
	}
	t.Fatalf("caller thread %d; the pieces' threads in each run: %v", caller, runs)
}
