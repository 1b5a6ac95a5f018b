package svd

import (
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// blockSumScratch is the dialect's MC_BLOCK_SUM_SCRATCH; a block runs up to
// maxWarps warps, a pair of columns each.
const (
	blockSumScratch = 33
	maxWarps        = 16
)

// matrixBytes is the shared memory one matrix takes (svd.cu's svd_floats).
func matrixBytes(s shapes) int {
	rows, cols := s.rows(), s.cols()
	v := 0
	if s.vectors {
		v = cols * cols
	}
	return (rows*cols + v + 2*cols + rows + blockSumScratch) * 4
}

// gpuLaunch is the launch for s, or an unsupported-layout error where one
// matrix would pass most bytes of shared memory.
func gpuLaunch(s shapes, most int) (dialect.Blocks, error) {
	per := matrixBytes(s)
	if per > most {
		return dialect.Blocks{}, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; with what is "+
			"wanted of them they need %d bytes of the GPU's shared memory, and the kernel takes up to %d", s.m, s.n, per, most)
	}
	pairs := max(1, (s.cols()+1)/2)
	return dialect.Blocks{Kernel: "svd", Blocks: s.batch, Threads: 32 * min(pairs, maxWarps), Shared: per, Loops: true}, nil
}
