package cpu

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// The pool is the Go scheduler itself: Parallel starts at most Threads()
// goroutines per call and waits for them, so idle workers cost nothing.
var threads atomic.Int32

func init() { threads.Store(int32(threadsFromEnv(os.Getenv("MC_NUM_THREADS"), os.Stderr))) }

// threadsFromEnv is the worker count MC_NUM_THREADS asks for, or all cores
// when it is unset; a value that is not a positive integer is reported on
// warn once and the default used.
func threadsFromEnv(v string, warn io.Writer) int {
	n := runtime.NumCPU()
	if v == "" {
		return n
	}
	if t, err := strconv.Atoi(v); err == nil && t > 0 {
		return t
	}
	fmt.Fprintf(warn, "metalcore: MC_NUM_THREADS=%q is not a positive integer; using %d threads\n", v, n)
	return n
}

// Threads is how many goroutines one call may use.
func Threads() int { return int(threads.Load()) }

// SetThreads changes Threads (benchmarks time one core with 1) and returns
// the previous value.
func SetThreads(n int) int { return int(threads.Swap(int32(max(n, 1)))) }

// Chunk is the number of elements elementwise kernels handle at once: small
// enough that a few float32 chunks per worker stay in L1.
const Chunk = 1024

// Scratch is one worker's float32 buffers, grown on demand and reused
// through a pool: row kernels keep a whole row of a 16-bit tensor in
// float32 so it is converted once.
type Scratch struct{ b [9][]float32 }

// Buf is buffer i with length n (its contents are garbage).
func (s *Scratch) Buf(i, n int) []float32 {
	if cap(s.b[i]) < n {
		s.b[i] = make([]float32, n)
	}
	return s.b[i][:n]
}

var scratchPool = sync.Pool{New: func() any { return new(Scratch) }}

// CallScratch is a Scratch for a whole call (its per-column vectors), apart
// from the workers'; release gives it back.
func CallScratch() (s *Scratch, release func()) {
	s = scratchPool.Get().(*Scratch)
	return s, func() { scratchPool.Put(s) }
}

// Parallel calls fn on disjoint pieces [lo, hi) covering [0, n), each piece
// at least grain long where n allows, and returns when all are done.
func Parallel(n, grain int, fn func(lo, hi int, s *Scratch)) {
	if n <= 0 {
		return
	}
	pieces := min(Threads(), (n+grain-1)/max(grain, 1))
	if pieces <= 1 {
		run(0, n, fn)
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < pieces; p++ {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			run(lo, hi, fn)
		}(p*n/pieces, (p+1)*n/pieces)
	}
	run(0, n/pieces, fn)
	wg.Wait()
}

func run(lo, hi int, fn func(lo, hi int, s *Scratch)) {
	s := scratchPool.Get().(*Scratch)
	defer scratchPool.Put(s)
	fn(lo, hi, s)
}

// RowGrain is how many rows of width cols one piece of Parallel takes at
// least, so that a piece is worth a goroutine.
func RowGrain(cols int) int { return max(1, 16384/max(cols, 1)) }
