package cholesky

import (
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// warpOrder is the largest order the warp kernel takes (a row a lane);
// warpsPerBlock its matrices a block.
const (
	warpOrder     = 32
	warpsPerBlock = 4
)

// gpuLaunch is the launch for s, or an unsupported-layout error past order
// most. Up to warpOrder a warp per matrix (32 x 33 floats of shared memory
// each), above a block per matrix.
func gpuLaunch(s shapes, most int) (dialect.Blocks, error) {
	n := s.n
	if n > most {
		return dialect.Blocks{}, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; the GPU kernel "+
			"takes up to %d x %d", n, n, most, most)
	}
	if n > warpOrder {
		// whole warps (the kernel's rows go a warp each), one for every 8 rows; it loops over its warps
		return dialect.Blocks{Kernel: "cholesky", Blocks: s.batch, Threads: 32 * min(n/8, 16), Shared: n * (n + 1) * 4,
			Loops: true}, nil
	}
	return dialect.Blocks{Kernel: "cholesky_warp", Blocks: (s.batch + warpsPerBlock - 1) / warpsPerBlock,
		Threads: 32 * warpsPerBlock, Shared: warpsPerBlock * 32 * 33 * 4}, nil
}
