package cpu

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"metalcore/internal/core"
)

// The pool is the host's OpenMP team where the process has an OpenMP
// runtime (openmp_linux.go), else the Go scheduler itself: Parallel starts
// at most Threads() goroutines per call and waits for them, so idle workers
// cost nothing.
var threads atomic.Int32

func init() { threads.Store(int32(threadsFromEnv(os.Getenv("MC_NUM_THREADS"), os.Stderr))) }

// MaxThreads bounds the thread count (MC_MAX_CPU_THREADS): larger requests
// are clamped, never wrapped to 32 bits.
const MaxThreads = 4096

// threadsFromEnv is the worker count MC_NUM_THREADS asks for, or all cores
// when it is unset; a value that is not a positive integer is reported on
// warn and the default used, and one above MaxThreads is clamped, saying so.
func threadsFromEnv(v string, warn io.Writer) int {
	n := min(runtime.NumCPU(), MaxThreads)
	if v == "" {
		return n
	}
	t, err := strconv.ParseUint(v, 10, 64)
	if err != nil && errors.Is(err, strconv.ErrRange) {
		t, err = MaxThreads+1, nil
	}
	if err == nil && t > MaxThreads {
		fmt.Fprintf(warn, "metalcore: MC_NUM_THREADS=%s is above %d; using %d threads\n", v, MaxThreads, MaxThreads)
		return MaxThreads
	}
	if err == nil && t > 0 {
		return int(t)
	}
	fmt.Fprintf(warn, "metalcore: MC_NUM_THREADS=%q is not a positive integer; using %d threads\n", v, n)
	return n
}

// Threads is how many goroutines one call may use.
func Threads() int { return int(threads.Load()) }

// SetThreads changes Threads (benchmarks time one core with 1) and returns
// the previous value.
// n is clamped to 1..MaxThreads.
func SetThreads(n int) int { return int(threads.Swap(int32(min(max(n, 1), MaxThreads)))) }

// Chunk is the number of elements elementwise kernels handle at once: small
// enough that a few float32 chunks per worker stay in L1.
const Chunk = 1024

// Scratch is one worker's float32 buffers, grown on demand and reused
// through a pool: row kernels keep a whole row of a 16-bit tensor in
// float32 so it is converted once.
//
// A buffer of MappedBytes or more (QR's working copies, very wide rows) is
// mapped from the operating system instead of taken from Go's heap, and
// unmapped when the run or call that asked for it ends: where memory runs
// out, Go's allocator aborts the process, while a failed mapping is a
// panic with an *core.Error of ErrOutOfMemory, which Parallel carries to
// the caller and the ABI returns as MC_ERR_OUT_OF_MEMORY.
type Scratch struct {
	b      [9][]float32
	mapped [9][]byte // the mapping behind b[i], when it has one
}

// MappedBytes is the size from which a scratch buffer is mapped.
const MappedBytes = 16 << 20

// Buf is buffer i with length n (its contents are garbage).
func (s *Scratch) Buf(i, n int) []float32 {
	if cap(s.b[i]) >= n {
		return s.b[i][:n]
	}
	s.unmap(i)
	if n < MappedBytes/4 {
		s.b[i] = make([]float32, n)
		return s.b[i]
	}
	m, err := mapMemory(4 * n)
	if err != nil {
		s.b[i] = nil
		panic(core.Errorf(core.ErrOutOfMemory, "cannot get %d bytes of working memory: %v", 4*n, err))
	}
	s.mapped[i], s.b[i] = m, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(m))), n)
	return s.b[i]
}

func (s *Scratch) unmap(i int) {
	if s.mapped[i] != nil {
		unmapMemory(s.mapped[i])
		s.mapped[i], s.b[i] = nil, nil
	}
}

// done gives back the mapped buffers (the heap ones stay for the next user).
func (s *Scratch) done() {
	for i := range s.mapped {
		s.unmap(i)
	}
	scratchPool.Put(s)
}

var scratchPool = sync.Pool{New: func() any { return new(Scratch) }}

// CallScratch is a Scratch for a whole call (its per-column vectors), apart
// from the workers'; release gives it back.
func CallScratch() (s *Scratch, release func()) {
	s = scratchPool.Get().(*Scratch)
	return s, s.done
}

// Parallel calls fn on disjoint pieces [lo, hi) covering [0, n), of about
// equal length, no more than n/grain rounded up and piecesPerWorker for
// each of the at most Threads() threads that run them (the caller one of
// them: an OpenMP team's, or goroutines; on a team, a piece for each of
// its threads at least, where n has them), and returns when all are done.
//
// The pieces are claimed, not assigned: each thread takes the next
// unclaimed piece until none is left, so the caller never waits for a
// goroutine that has not started. Under a host whose own threads keep the
// cores busy (OpenMP's spin after each of PyTorch's parallel ops), a woken
// goroutine can wait milliseconds for a core; the caller then does its
// pieces itself, and at worst the call costs what one thread costs. A team
// of the host's OpenMP runtime has no such wait: its threads are the ones
// spinning (it does join them all at the end, as the host's own ops do).
func Parallel(n, grain int, fn func(lo, hi int, s *Scratch)) {
	if n <= 0 {
		return
	}
	grains := (n + grain - 1) / max(grain, 1) // the most pieces there can be
	workers := min(Threads(), grains)
	if workers <= 1 {
		run(0, n, fn)
		return
	}
	pieces := min(piecesPerWorker*workers, grains)
	// a call of two workers or more runs on the host's team where it has
	// one, cut into a piece for each of its threads at least: they are
	// spinning after the host's last op, where a goroutine would wait for
	// a core they hold (bench/cpu-pool.md)
	team := teamSize()
	if team > 0 {
		pieces = min(max(pieces, team), n)
	}
	var (
		next   atomic.Int64 // the next piece to claim
		wg     sync.WaitGroup
		failed atomic.Pointer[any] // a worker's panic, raised again in the caller
	)
	wg.Add(pieces) // one Done per piece, whoever runs it
	claim := func() {
		s := scratchPool.Get().(*Scratch)
		defer s.done()
		for p := int(next.Add(1) - 1); p < pieces; p = int(next.Add(1) - 1) {
			func() {
				defer wg.Done()
				defer catch(&failed)
				fn(p*n/pieces, (p+1)*n/pieces, s)
			}()
		}
	}
	if team > 0 {
		runTeam(team, claim)
	} else {
		for range workers - 1 {
			go claim()
		}
		claim()
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		panic(*p)
	}
}

func catch(failed *atomic.Pointer[any]) {
	if p := recover(); p != nil {
		failed.CompareAndSwap(nil, &p)
	}
}

func run(lo, hi int, fn func(lo, hi int, s *Scratch)) {
	s := scratchPool.Get().(*Scratch)
	defer s.done()
	fn(lo, hi, s)
}

// RowGrain is how many rows of width cols one piece of Parallel takes at
// least, so that a piece is worth a goroutine.
func RowGrain(cols int) int { return max(1, GrainElements/max(cols, 1)) }

// GrainElements is the fewest elements a piece of Parallel takes over rows.
const GrainElements = 16384

// piecesPerWorker is how many pieces Parallel cuts for each goroutine it
// starts: a worker that starts late (a woken thread can take longer than
// the call) then takes a small piece, where with one piece each the
// caller, done with its own, waited for the late worker's whole half.
const piecesPerWorker = 4
