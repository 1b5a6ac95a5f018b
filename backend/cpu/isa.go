// Package cpu is the CPU backend's machinery: which implementation of the
// simd primitives runs (chosen once at start-up from the CPU's features,
// forcible for tests and benchmarks), the worker pool, per-worker scratch,
// and typed access to tensor memory in float32 chunks.
package cpu

import (
	"fmt"
	"os"
	"sync/atomic"

	"metalcore/backend/cpu/simd"
)

// tables lists the implementations this machine can run, best first; the
// portable one is always last. Each adds up long rows block by block.
var tables = blocked(append(isaTables(), &simd.Portable))

func blocked(ts []*simd.Table) []*simd.Table {
	for i, t := range ts {
		b := simd.Blocked(*t)
		ts[i] = &b
	}
	return ts
}

var active atomic.Pointer[simd.Table]

func init() {
	active.Store(tables[0])
	if name := os.Getenv("MC_CPU_ISA"); name != "" {
		if err := Use(name); err != nil {
			fmt.Fprintf(os.Stderr, "metalcore: MC_CPU_ISA: %v; using %s\n", err, tables[0].Name)
		}
	}
}

// K is the active primitive table.
func K() *simd.Table { return active.Load() }

// ISAs names the implementations this machine can run, best first.
func ISAs() []string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name
	}
	return names
}

// Use makes the named implementation active ("portable" always exists).
func Use(name string) error {
	for _, t := range tables {
		if t.Name == name {
			active.Store(t)
			return nil
		}
	}
	return fmt.Errorf("instruction set %q is not available here (have %v)", name, ISAs())
}
