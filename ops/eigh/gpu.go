package eigh

import (
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// Up to warpOrder a warp per matrix (two up to order 16), up to
// warpsPerBlock warps a block; blockSumScratch is the dialect's
// MC_BLOCK_SUM_SCRATCH.
const (
	warpOrder       = 32
	warpsPerBlock   = 4
	blockSumScratch = 33
)

// rowStride is eigh.cu's eigh_ld: A's row stride in shared memory for a
// warp's kernel of players players, or the block's (players 0).
func rowStride(n, players int) int {
	switch players {
	case 32:
		return 38
	case 24:
		return 26
	case 16:
		return 22
	}
	return n + 1
}

// matrixBytes is the shared memory one matrix takes (eigh.cu's
// eigh_floats) with pairs pairs a step: A and, where V is in shared
// memory, V at n rows of ld floats each, each pair's rotation and indices,
// the ranks, the pairs of pairs and a reduction's scratch.
func matrixBytes(n, ld int, sharedV bool, pairs int) int {
	mats := 1
	if sharedV {
		mats = 2
	}
	return (mats*n*ld + 5*pairs + n + pairs*(pairs-1)/2 + blockSumScratch) * 4
}

// gpuLaunch is the launch for s, or an unsupported-layout error where one
// matrix would pass most bytes of shared memory.
func gpuLaunch(s shapes, most int) (dialect.Blocks, error) {
	n := s.n
	if n <= warpOrder { // V in each lane's registers: 16, 24 or 32 players (byes past n)
		kernel, players := "eigh_warp", 32
		switch {
		case n <= 16:
			kernel, players = "eigh_warp16", 16
		case n <= 24:
			kernel, players = "eigh_warp24", 24
		}
		per := matrixBytes(n, rowStride(n, players), false, players/2)
		perWarp := 32 / players // two matrices at 16 players
		warps := max(1, min(warpsPerBlock, most/(perWarp*per)))
		mats := warps * perWarp
		return dialect.Blocks{Kernel: kernel, Blocks: (s.batch + mats - 1) / mats, Threads: 32 * warps,
			Shared: mats * per}, nil
	}
	pairs := (n + 1) / 2
	per := matrixBytes(n, rowStride(n, 0), s.vectors, pairs)
	if per > most {
		return dialect.Blocks{}, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; with their eigenvectors "+
			"they need %d bytes of the GPU's shared memory, and the kernel takes up to %d", n, n, per, most)
	}
	// a thread for each 2 x 2 block between pairs and each (row of V, pair)
	// of a step, in whole warps, up to 512
	items := pairs * (pairs - 1) / 2
	if s.vectors {
		items += n * pairs
	}
	return dialect.Blocks{Kernel: "eigh", Blocks: s.batch, Threads: min((items+31)/32*32, 512), Shared: per, Loops: true}, nil
}
