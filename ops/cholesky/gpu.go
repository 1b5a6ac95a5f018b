package cholesky

import "metalcore/internal/core"

// warpOrder is the largest order the warp kernel takes (a row a lane);
// warpsPerBlock its matrices a block.
const (
	warpOrder     = 32
	warpsPerBlock = 4
)

// gpuLaunch is a GPU launch for s: the kernel, its blocks, threads a block
// and shared bytes, or an unsupported-layout error past order most. Up to
// warpOrder a warp per matrix, above a block per matrix.
func gpuLaunch(s shapes, most int) (kernel string, blocks, threads, shared int, err error) {
	n := s.n
	if n > most {
		return "", 0, 0, 0, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; the GPU kernel "+
			"takes up to %d x %d", n, n, most, most)
	}
	if n <= warpOrder {
		return "cholesky_warp", (s.batch + warpsPerBlock - 1) / warpsPerBlock, 32 * warpsPerBlock,
			warpsPerBlock * 32 * 33 * 4, nil
	}
	// whole warps (the kernel's rows go a warp each), one for every 8 rows
	return "cholesky", s.batch, 32 * min(n/8, 16), n * (n + 1) * 4, nil
}
