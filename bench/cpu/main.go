// Command cpu measures the CPU backend: every op on large tensors, GB/s of
// bytes read and written, against a multi-threaded copy of the same bytes
// timed in the same run. It prints a markdown table and writes it to -out.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
	"metalcore/ops/activation"
	"metalcore/ops/adamw"
	"metalcore/ops/norm"
	"metalcore/ops/softmax"
	tu "metalcore/tests/testutil"
)

var (
	out     = flag.String("out", "", "write the markdown table here too")
	reps    = flag.Int("reps", 15, "timed repetitions per measurement (the median is reported)")
	fastest = flag.Bool("min", false, "report the fastest run instead of the median (for A/B comparisons on a noisy machine)")
	only    = flag.String("ops", "", "run only the ops whose name contains this (all when empty)")
	prof    = flag.String("cpuprofile", "", "write a CPU profile here (capi/default.pgo is one: see the Makefile's pgo target)")
)

var shapes = [][2]int64{{4096, 4096}, {16384, 1024}, {256, 65536}}

// op is one benchmark: how many tensor-sized reads+writes it makes and how
// to run it on fresh tensors.
type op struct {
	name    string
	tensors int
	setup   func(dt core.DType, shape []int64) func() error
}

func main() {
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
		defer pprof.StopCPUProfile()
	}
	var lines []string
	emit := func(s string) {
		fmt.Println(s)
		lines = append(lines, s)
	}
	emit("# CPU backend benchmark")
	emit("")
	emit(fmt.Sprintf("`make bench` on %s, %d threads, kernels: %s, %s. GB/s counts bytes read plus bytes written; "+
		"`copy` is a multi-threaded copy of a buffer of the same size in the same run (read + write); ratio = op / copy. "+
		"Median of %d runs. `in cache` is the op's arithmetic alone: its rate on one thread over a tensor of the "+
		"same width small enough to stay in cache (64K elements, 2 rows at least, each call repeated %d times), times "+
		"the thread count (perfect scaling; timed on all threads, a call this short would measure waking them); "+
		"`ceiling` = in cache / copy, the most the ratio could be if memory cost nothing.", cpuModel(), cpu.Threads(),
		cpu.K().Name, runtime.Version(), *reps, cachedRepeats))
	emit("")
	emit("| op | dtype | shape | time ms | GB/s | copy GB/s | ratio | in cache GB/s | ceiling |")
	emit("|---|---|---|---:|---:|---:|---:|---:|---:|")
	for _, o := range ops() {
		if !strings.Contains(o.name, *only) {
			continue
		}
		for _, dt := range tu.DTypes {
			for _, sh := range shapes {
				shape := []int64{sh[0], sh[1]}
				bytes := int64(o.tensors) * sh[0] * sh[1] * int64(dt.Size())
				run := o.setup(dt, shape)
				if err := run(); err != nil {
					fmt.Fprintln(os.Stderr, o.name, err)
					os.Exit(1)
				}
				t := median(run)
				c := copyTime(bytes / 2)
				gbs, cgbs := float64(bytes)/t/1e9, float64(bytes)/c/1e9
				cached := cachedGBs(o, dt, sh[1])
				emit(fmt.Sprintf("| %s | %s | %d×%d | %.2f | %.1f | %.1f | %.2f | %.1f | %.2f |", o.name, dt, sh[0], sh[1],
					t*1e3, gbs, cgbs, gbs/cgbs, cached, cached/cgbs))
			}
		}
	}
	emit("")
	emit("AdamW: bytes per parameter moved = param read+write, grad read, both moments read+write " +
		"(float32: 28 B; bfloat16 params: 22 B); `copy` moves the same bytes.")
	emit("")
	emit("| op | params dtype | parameters | tensors | time ms | GB/s | copy GB/s | ratio |")
	emit("|---|---|---:|---:|---:|---:|---:|---:|")
	for _, dt := range []core.DType{core.F32, core.BF16} {
		for _, tensors := range []int{1, 5000} {
			const total = 25_000_000
			run := adamwCase(dt, total, tensors)
			t := median(run)
			bytes := int64(total) * int64(3*dt.Size()+16)
			c := copyTime(bytes / 2)
			gbs, cgbs := float64(bytes)/t/1e9, float64(bytes)/c/1e9
			emit(fmt.Sprintf("| adamw step | %s | %d | %d | %.2f | %.1f | %.1f | %.2f |", dt, total, tensors, t*1e3, gbs, cgbs, gbs/cgbs))
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			return strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
		}
	}
	return runtime.GOARCH
}

func median(run func() error) float64 {
	ts := make([]float64, *reps)
	for i := range ts {
		t0 := time.Now()
		_ = run()
		ts[i] = time.Since(t0).Seconds()
	}
	sort.Float64s(ts)
	if *fastest {
		return ts[0]
	}
	return ts[len(ts)/2]
}

// cachedRepeats is how many calls one timing of cachedGBs makes.
const cachedRepeats = 50

// cachedGBs is o's rate on one thread over a tensor of width cols that
// stays in cache, times the thread count.
func cachedGBs(o op, dt core.DType, cols int64) float64 {
	threads := cpu.SetThreads(1)
	defer cpu.SetThreads(threads)
	rows := max(2, (1<<16)/cols)
	run := o.setup(dt, []int64{rows, cols})
	t := median(func() error {
		for range cachedRepeats {
			if err := run(); err != nil {
				return err
			}
		}
		return nil
	})
	return float64(int64(o.tensors)*rows*cols*int64(dt.Size())) * cachedRepeats / t / 1e9 * float64(threads)
}

// copyTime is the median time of a multi-threaded copy of n bytes.
func copyTime(n int64) float64 {
	src, dst := make([]float32, n/4), make([]float32, n/4)
	for i := range src {
		src[i] = float32(i)
	}
	return median(func() error {
		cpu.Parallel(len(src), 1<<16, func(lo, hi int, _ *cpu.Scratch) { copy(dst[lo:hi], src[lo:hi]) })
		return nil
	})
}

func filled(dt core.DType, shape []int64) *core.Tensor {
	t := tu.New(dt, shape)
	n := 1
	for _, s := range shape {
		n *= int(s)
	}
	p := unsafe.Slice((*byte)(t.T.Data), n*dt.Size())
	for i := range p { // small finite values in every dtype
		p[i] = byte(0x3c + i%3)
	}
	return t.Ptr()
}

func rowStat(shape []int64) *core.Tensor { return tu.New(core.F32, shape[:1]).Ptr() }

func ops() []op {
	col := func(shape []int64) []int64 { return shape[1:] }
	return []op{
		{"rmsnorm fwd", 2, func(dt core.DType, s []int64) func() error {
			x, w, y, r := filled(dt, s), filled(dt, col(s)), filled(dt, s), rowStat(s)
			return func() error { return norm.RMSNormFwd(x, w, 1e-5, y, r, nil) }
		}},
		{"fused add+rmsnorm fwd", 4, func(dt core.DType, s []int64) func() error {
			x, res, w, y, r := filled(dt, s), filled(dt, s), filled(dt, col(s)), filled(dt, s), rowStat(s)
			return func() error { return norm.FusedAddRMSNormFwd(x, res, w, 1e-5, y, res, r, nil) }
		}},
		{"layernorm fwd", 2, func(dt core.DType, s []int64) func() error {
			x, w, b, y, m, r := filled(dt, s), filled(dt, col(s)), filled(dt, col(s)), filled(dt, s), rowStat(s), rowStat(s)
			return func() error { return norm.LayerNormFwd(x, w, b, 1e-5, y, m, r, nil) }
		}},
		{"softmax fwd", 2, func(dt core.DType, s []int64) func() error {
			x, y := filled(dt, s), filled(dt, s)
			return func() error { return softmax.Fwd(x, y, nil) }
		}},
		{"gelu fwd (erf)", 2, func(dt core.DType, s []int64) func() error {
			x, y := filled(dt, s), filled(dt, s)
			return func() error { return activation.GeluFwd(x, 0, y, nil) }
		}},
		{"gelu fwd (tanh)", 2, func(dt core.DType, s []int64) func() error {
			x, y := filled(dt, s), filled(dt, s)
			return func() error { return activation.GeluFwd(x, 1, y, nil) }
		}},
		{"silu fwd", 2, func(dt core.DType, s []int64) func() error {
			x, y := filled(dt, s), filled(dt, s)
			return func() error { return activation.SiluFwd(x, y, nil) }
		}},
		{"rmsnorm bwd (+dweight)", 3, func(dt core.DType, s []int64) func() error {
			dy, x, w, r, dx, dw := filled(dt, s), filled(dt, s), filled(dt, col(s)), rowStat(s), filled(dt, s), filled(dt, col(s))
			n, _ := norm.RMSNormBwdWorkspace(x)
			ws := tu.New(core.F32, []int64{n / 4}).Ptr()
			return func() error { return norm.RMSNormBwd(dy, x, w, r, dx, dw, ws, nil) }
		}},
		{"layernorm bwd (+dweight, dbias)", 3, func(dt core.DType, s []int64) func() error {
			dy, x, w, m, r, dx := filled(dt, s), filled(dt, s), filled(dt, col(s)), rowStat(s), rowStat(s), filled(dt, s)
			dw, db := filled(dt, col(s)), filled(dt, col(s))
			n, _ := norm.LayerNormBwdWorkspace(x)
			ws := tu.New(core.F32, []int64{n / 4}).Ptr()
			return func() error { return norm.LayerNormBwd(dy, x, w, m, r, dx, dw, db, ws, nil) }
		}},
		{"softmax bwd", 3, func(dt core.DType, s []int64) func() error {
			dy, y, dx := filled(dt, s), filled(dt, s), filled(dt, s)
			return func() error { return softmax.Bwd(dy, y, dx, nil) }
		}},
		{"gelu bwd (erf)", 3, func(dt core.DType, s []int64) func() error {
			dy, x, dx := filled(dt, s), filled(dt, s), filled(dt, s)
			return func() error { return activation.GeluBwd(dy, x, 0, dx, nil) }
		}},
		{"silu bwd", 3, func(dt core.DType, s []int64) func() error {
			dy, x, dx := filled(dt, s), filled(dt, s), filled(dt, s)
			return func() error { return activation.SiluBwd(dy, x, dx, nil) }
		}},
	}
}

// adamwCase is one AdamW step over total parameters split into tensors of
// equal size.
func adamwCase(dt core.DType, total, tensors int) func() error {
	var lists [4][]*core.Tensor
	for i := range tensors {
		n := int64(total/tensors + min(1, total%tensors/(i+1)))
		lists[0] = append(lists[0], filled(dt, []int64{n}))
		lists[1] = append(lists[1], filled(dt, []int64{n}))
		lists[2] = append(lists[2], tu.New(core.F32, []int64{n}).Ptr())
		lists[3] = append(lists[3], tu.New(core.F32, []int64{n}).Ptr())
	}
	l := adamw.Lists{N: int64(tensors), Params: unsafe.Pointer(&lists[0][0]), Grads: unsafe.Pointer(&lists[1][0]),
		ExpAvgs: unsafe.Pointer(&lists[2][0]), ExpAvgSqs: unsafe.Pointer(&lists[3][0])}
	for _, ts := range lists[2:] {
		for _, t := range ts {
			clear(unsafe.Slice((*byte)(t.Data), *t.Shape*4))
		}
	}
	cfg := adamw.Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 1}
	return func() error { return adamw.Step(&cfg, l, nil) }
}
