package eigh

import "metalcore/internal/core"

// launch is a GPU launch for one call: its blocks (a matrix each), threads
// a block and shared bytes.
type launch struct{ blocks, threads, shared int }

// blockSumScratch is the dialect's MC_BLOCK_SUM_SCRATCH.
const blockSumScratch = 33

// gpuLaunch is the launch for s, or an unsupported-layout error where the
// matrix, its eigenvectors and the rotations would pass most bytes of
// shared memory (eigh.cu's layout).
func gpuLaunch(s shapes, most int) (launch, error) {
	n, half := s.n, (s.n+1)/2
	mats := 1
	if s.vectors {
		mats = 2
	}
	shared := (mats*n*(n+1) + 2*half + blockSumScratch + n) * 4
	if shared > most {
		return launch{}, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; with their eigenvectors "+
			"they need %d bytes of the GPU's shared memory, and the kernel takes up to %d", n, n, shared, most)
	}
	// a thread for each (row, pair) of a rotation step, in whole warps, up to 512
	threads := min(max((n*half+31)/32*32, 32), 512)
	return launch{s.batch, threads, shared}, nil
}

func vectorsFlag(s shapes) int {
	if s.vectors {
		return 1
	}
	return 0
}

func upperFlag(s shapes) int {
	if s.upper {
		return 1
	}
	return 0
}
