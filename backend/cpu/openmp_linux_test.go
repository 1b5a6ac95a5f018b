//go:build linux && cgo

package cpu

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The runtime is chosen once a process, so the pool's tests run again in a
// child that loads GNU's OpenMP runtime by name (Debian's libgomp1), its
// teams 4 threads strong (OMP_NUM_THREADS): there a team runs its threads
// at once, every call that splits takes one unless the library's thread
// count is below the team's, and Parallel, whose pieces it then runs,
// covers its ranges as it does on goroutines.
func TestParallelOnOpenMPTeam(t *testing.T) {
	if os.Getenv("MC_CPU_OPENMP") == "libgomp.so.1" { // the child
		defer SetThreads(SetThreads(3))
		require.Zero(t, teamSize(), "a team of 4 for a library of 3 threads")
		SetThreads(4)
		require.Equal(t, 4, teamSize(), "the runtime did not load")
		var running, alone atomic.Int32
		threads := make(chan int, 4)
		runTeam(4, func() { // (no t.FailNow on a team thread)
			threads <- syscall.Gettid()
			running.Add(1)
			for start := time.Now(); running.Load() < 4; time.Sleep(time.Microsecond) {
				if time.Since(start) > 10*time.Second {
					alone.Add(1)
					return
				}
			}
		})
		require.Zero(t, alone.Load(), "a team thread never ran beside the others")
		distinct := map[int]bool{<-threads: true, <-threads: true, <-threads: true, <-threads: true}
		require.Len(t, distinct, 4, "the team's threads")

		// calls of 2 and of 4 workers run on the same team threads (a
		// team's pool is its calling thread's; one of a smaller size would
		// end the surplus threads and the next make them anew)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var mu sync.Mutex
		seen := map[int]bool{}
		record := func(int, int, *Scratch) {
			mu.Lock()
			seen[syscall.Gettid()] = true
			mu.Unlock()
		}
		for range 100 {
			Parallel(4, 1, record)
			Parallel(4, 2, record)
		}
		require.LessOrEqual(t, len(seen), 4, "threads that ran the calls")
		// a call of 2 workers is cut into a piece for each of the team's
		// threads
		var pieces atomic.Int32
		Parallel(8, 4, func(int, int, *Scratch) { pieces.Add(1) })
		require.Equal(t, int32(4), pieces.Load(), "pieces of a 2-worker call on a 4-thread team")
		return
	}
	tests := "^(TestParallelOnOpenMPTeam|TestParallelCoversOnce|TestParallelConcurrentAndNested|TestParallelPanicThenAgain)$"
	cmd := exec.Command(os.Args[0], "-test.run", tests, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "MC_CPU_OPENMP=libgomp.so.1", "OMP_NUM_THREADS=4")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"TestParallelOnOpenMPTeam", "TestParallelCoversOnce", "TestParallelConcurrentAndNested",
		"TestParallelPanicThenAgain"} {
		require.True(t, strings.Contains(string(out), "--- PASS: "+name), "%s did not pass in the child:\n%s", name, out)
	}
}

// MC_CPU_OPENMP: "0" is goroutines, a name that loads nothing is reported
// and goroutines used.
func TestOpenMPSetting(t *testing.T) {
	var warn strings.Builder
	require.False(t, openMPFrom("0", &warn))
	require.Empty(t, warn.String())
	require.False(t, openMPFrom("libno-such-openmp.so", &warn))
	require.Contains(t, warn.String(), `MC_CPU_OPENMP="libno-such-openmp.so"`)
}
