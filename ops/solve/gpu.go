package solve

import (
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// The warp kernel takes orders up to warpOrder (a row a lane) with up to
// warpRHS right-hand sides, in rows of warpLD floats (solve.cu's SOLVE_LD);
// warpsPerBlock systems a block. The block kernel holds [A | B] and the
// pivot's index in shared memory.
const (
	warpOrder     = 32
	warpRHS       = 8
	warpLD        = 41
	warpsPerBlock = 4
	blockThreads  = 256
)

// gpuLaunch is the launch for s, or an unsupported-layout error where the
// block kernel's shared memory would pass most bytes.
func gpuLaunch(s shapes, most int) (dialect.Blocks, error) {
	if s.n <= warpOrder && s.k <= warpRHS {
		kernel := "solve_warp"
		if s.n <= warpOrder/2 {
			kernel = "solve_warp16" // rows of 16 in registers: half the work a step
		}
		return dialect.Blocks{Kernel: kernel, Blocks: (s.batch + warpsPerBlock - 1) / warpsPerBlock,
			Threads: 32 * warpsPerBlock, Shared: warpsPerBlock * 32 * warpLD * 4}, nil
	}
	shared := (s.n*(s.n+s.k) + 4) * 4
	if shared > most {
		return dialect.Blocks{}, core.Errorf(core.ErrUnsupportedLayout, "a [.., %d, %d] with %d right-hand sides needs %d bytes "+
			"of the GPU's shared memory; the kernel takes up to %d", s.n, s.n, s.k, shared, most)
	}
	// the block kernel loops over its threads
	return dialect.Blocks{Kernel: "solve_block", Blocks: s.batch, Threads: blockThreads, Shared: shared, Loops: true}, nil
}
