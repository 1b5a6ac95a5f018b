package svd

import (
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// blockSumScratch is the dialect's MC_BLOCK_SUM_SCRATCH; the block kernel
// runs up to maxWarps warps, a pair of columns each; up to warpRows rows a
// warp per matrix, up to warpsPerBlock of them a block.
const (
	blockSumScratch = 33
	maxWarps        = 16
	warpRows        = 32
	warpsPerBlock   = 4
)

// matrixBytes is the shared memory one matrix takes (svd.cu's svd_floats),
// with V in it or not.
func matrixBytes(s shapes, sharedV bool) int {
	rows, cols := s.rows(), s.cols()
	v := 0
	if sharedV {
		v = cols * cols
	}
	return (rows*cols + v + 2*cols + rows + blockSumScratch) * 4
}

// gpuLaunch is the launch for s, or an unsupported-layout error where one
// matrix would pass most bytes of shared memory.
func gpuLaunch(s shapes, most int) (dialect.Blocks, error) {
	if s.rows() <= warpRows { // B's and V's columns in each lane's registers
		kernel := "svd_warp"
		if s.rows() <= 16 {
			kernel = "svd_warp16"
		}
		per := matrixBytes(s, false)
		warps := max(1, min(warpsPerBlock, most/per))
		return dialect.Blocks{Kernel: kernel, Blocks: (s.batch + warps - 1) / warps, Threads: 32 * warps,
			Shared: warps * per}, nil
	}
	per := matrixBytes(s, s.vectors)
	if per > most {
		return dialect.Blocks{}, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; with what is "+
			"wanted of them they need %d bytes of the GPU's shared memory, and the kernel takes up to %d", s.m, s.n, per, most)
	}
	pairs := max(1, (s.cols()+1)/2)
	return dialect.Blocks{Kernel: "svd", Blocks: s.batch, Threads: 32 * min(pairs, maxWarps), Shared: per, Loops: true}, nil
}
