package adamw

import (
	"encoding/binary"
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("adamw", kernels)
	step.Register(core.DeviceMetal, stepMetal)
}

// metalBatch is the batch Metal sets inline (setBytes, at most 4 KB:
// adamw.cu's ADAMW_MAX there).
var metalBatch = layoutFor(64)

// stepMetal encodes adamw_step once per batch of up to metalBatch.max
// tensors. The batch holds the tensors' GPU addresses, so every buffer it
// names is made resident for the dispatch (useResource); batches touch
// different tensors, so no barrier separates them.
func stepMetal(h *simd.AdamW, groups []group, _ int, scale, inf *core.View, dyn *dynamic, enc unsafe.Pointer) error {
	p, err := metal.NewPlan(enc)
	if err != nil {
		return err
	}
	l := metalBatch
	words := make([]uint64, l.words)
	tensor := func(g *group, k int) uint64 { return p.Address(g.ptr(k), g.off[k]) }
	view := func(v *core.View, at uint64) uint64 {
		if v == nil {
			return 0
		}
		return p.Address(v.Buffer, v.Offset+at)
	}
	for start := 0; start < len(groups); start += l.max {
		batch := groups[start:min(start+l.max, len(groups))]
		blocks := l.fill(words, batch, start, h, scale, inf, dyn, tensor, view)
		var used []metal.Resource
		for i := range batch {
			g := &batch[i]
			sizes := [5]int{g.dt.Size(), g.dt.Size(), 4, 4, 4}
			for k := range 5 {
				if buf := g.ptr(k); buf != nil {
					used = append(used, metal.Resource{Buffer: buf, Lo: g.off[k], Hi: g.off[k] + uint64(g.n*sizes[k]), Write: k != 0})
				}
			}
		}
		for _, v := range []*core.View{scale, inf} {
			used = appendRead(used, v)
		}
		if dyn != nil {
			used = appendRead(appendRead(used, dyn.steps), dyn.lr)
		}
		data := make([]byte, 0, 8*len(words))
		for _, w := range words {
			data = binary.LittleEndian.AppendUint64(data, w)
		}
		kernel := dialect.Kernel("adamw_step", batch[0].dt)
		p.DispatchWith(kernel, blocks, p.Threads(kernel, 256), 0, used, metal.Bytes(data))
	}
	return p.Encode()
}

// appendRead adds an optional view read through an address.
func appendRead(used []metal.Resource, v *core.View) []metal.Resource {
	if v == nil {
		return used
	}
	lo, hi := v.Extent()
	return append(used, metal.Resource{Buffer: v.Buffer, Lo: uint64(lo), Hi: uint64(hi)})
}
