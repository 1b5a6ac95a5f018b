package cpu

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
)

// MC_NUM_THREADS: a positive integer is taken, clamped to MaxThreads (with a
// warning) rather than wrapped to 32 bits; anything else is reported once and
// the default (all cores) used; unset is the default silently.
func TestThreadsFromEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
		warn bool
	}{{"", runtime.NumCPU(), false}, {"3", 3, false}, {"abc", runtime.NumCPU(), true}, {"0", runtime.NumCPU(), true},
		{"-2", runtime.NumCPU(), true}, {"1.5", runtime.NumCPU(), true}, {"4096", MaxThreads, false},
		{"4097", MaxThreads, true}, {"2147483648", MaxThreads, true}, {"4294967296", MaxThreads, true},
		{"4294967297", MaxThreads, true}, {"99999999999999999999999", MaxThreads, true}} {
		var w strings.Builder
		require.Equal(t, c.want, threadsFromEnv(c.v, &w), c.v)
		require.Equal(t, c.warn, strings.Contains(w.String(), "MC_NUM_THREADS"), "%q: %q", c.v, w.String())
	}
}

// SetThreads clamps to 1..MaxThreads.
func TestSetThreadsClamps(t *testing.T) {
	before := SetThreads(1 << 30)
	defer SetThreads(before)
	require.Equal(t, MaxThreads, Threads())
	SetThreads(-5)
	require.Equal(t, 1, Threads())
}

// Working memory the system will not give is a panic with an
// ErrOutOfMemory *core.Error (never Go's fatal out-of-memory error), carried
// from a worker to Parallel's caller; big buffers are mapped and given back.
func TestScratchOutOfMemoryIsAnError(t *testing.T) {
	defer SetThreads(SetThreads(4))
	var got any
	func() {
		defer func() { got = recover() }()
		Parallel(4, 1, func(lo, hi int, s *Scratch) {
			if lo > 0 {
				s.Buf(0, 1<<45) // 128 TiB
			}
		})
	}()
	e, ok := got.(*core.Error)
	require.True(t, ok, "panic %v", got)
	require.Equal(t, core.ErrOutOfMemory, e.Status)

	s, release := CallScratch()
	b := s.Buf(1, MappedBytes/4)
	b[0], b[len(b)-1] = 1, 2
	require.NotNil(t, s.mapped[1])
	release()
	require.Nil(t, s.mapped[1])
}

// Parallel covers [0, n) exactly once, in no more pieces than
// piecesPerWorker a thread and than n/grain rounded up (on a team, than
// one for each of its threads where n has them), at most threads of them
// running at once, at every thread count.
func TestParallelCoversOnce(t *testing.T) {
	defer SetThreads(SetThreads(1))
	for _, threads := range []int{1, 2, 3, 8, 64} {
		SetThreads(threads)
		for _, n := range []int{1, 2, 7, 100, 1000, 4097} {
			for _, grain := range []int{1, 3, 64, 5000} {
				seen := make([]atomic.Int32, n)
				var pieces, running, most atomic.Int32
				Parallel(n, grain, func(lo, hi int, _ *Scratch) {
					pieces.Add(1)
					now := running.Add(1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
					running.Add(-1)
				})
				for i := range seen {
					require.Equal(t, int32(1), seen[i].Load(), "threads %d n %d grain %d index %d", threads, n, grain, i)
				}
				what := fmt.Sprintf("threads %d n %d grain %d", threads, n, grain)
				grains := (n + grain - 1) / grain
				bound := min(piecesPerWorker*threads, grains)
				if team := teamSize(); team > 0 && min(threads, grains) >= 2 {
					bound = min(max(bound, team), n) // a piece for each of the team's threads
				}
				require.LessOrEqual(t, int(pieces.Load()), bound, what)
				require.LessOrEqual(t, int(most.Load()), threads, what)
				if threads == 1 {
					require.Equal(t, int32(1), pieces.Load(), what)
				}
			}
		}
	}
}

// Calls at once from several goroutines, and calls inside a piece, each
// cover their range exactly once.
func TestParallelConcurrentAndNested(t *testing.T) {
	defer SetThreads(SetThreads(4))
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := range 50 {
				n := 97 + 13*c + rep
				seen := make([]atomic.Int32, n*3)
				Parallel(n, 5, func(lo, hi int, _ *Scratch) {
					for i := lo; i < hi; i++ {
						Parallel(3, 1, func(a, b int, _ *Scratch) {
							for k := a; k < b; k++ {
								seen[3*i+k].Add(1)
							}
						})
					}
				})
				for i := range seen {
					if seen[i].Load() != 1 {
						t.Errorf("caller %d rep %d: index %d seen %d times", c, rep, i, seen[i].Load())
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// A panic in a piece reaches the caller, and the next call still runs
// every piece.
func TestParallelPanicThenAgain(t *testing.T) {
	defer SetThreads(SetThreads(4))
	require.PanicsWithValue(t, "piece 2", func() {
		Parallel(4, 1, func(lo, _ int, _ *Scratch) {
			if lo == 2 {
				panic("piece 2")
			}
		})
	})
	var count atomic.Int32
	Parallel(4, 1, func(lo, hi int, _ *Scratch) { count.Add(int32(hi - lo)) })
	require.Equal(t, int32(4), count.Load())
}
