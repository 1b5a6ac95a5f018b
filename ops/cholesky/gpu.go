package cholesky

import "metalcore/internal/core"

// warpOrder is the largest order the warp kernel takes (a row a lane);
// warpsPerBlock its matrices a block.
const (
	warpOrder     = 32
	warpsPerBlock = 4
)

// launch is a GPU launch for one call: the kernel, its blocks, threads a
// block and shared bytes, and the kernels' upper argument.
type launch struct {
	kernel                         string
	blocks, threads, shared, upper int
}

// gpuLaunch is the launch for s, or an unsupported-layout error past order
// most. Up to warpOrder a warp per matrix (32 x 33 floats of shared memory
// each), above a block per matrix.
func gpuLaunch(s shapes, most int) (launch, error) {
	n := s.n
	if n > most {
		return launch{}, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; the GPU kernel "+
			"takes up to %d x %d", n, n, most, most)
	}
	l := launch{kernel: "cholesky_warp", blocks: (s.batch + warpsPerBlock - 1) / warpsPerBlock,
		threads: 32 * warpsPerBlock, shared: warpsPerBlock * 32 * 33 * 4}
	if n > warpOrder {
		// whole warps (the kernel's rows go a warp each), one for every 8 rows
		l = launch{kernel: "cholesky", blocks: s.batch, threads: 32 * min(n/8, 16), shared: n * (n + 1) * 4}
	}
	if s.upper {
		l.upper = 1
	}
	return l, nil
}
