package cholesky

import "metalcore/internal/core"

// gpuLaunch is a GPU launch's threads a block and shared bytes for order n
// (a block per matrix), or an unsupported-layout error past most.
func gpuLaunch(n, most int) (threads, shared int, err error) {
	if n > most {
		return 0, 0, core.Errorf(core.ErrUnsupportedLayout, "a's matrices are %d x %d; the GPU kernel takes up to "+
			"%d x %d", n, n, most, most)
	}
	threads = 32
	for threads < 512 && threads*threads < n*n*4 { // about 4 trailing entries a thread at step 0
		threads *= 2
	}
	return threads, max(n*(n+1)*4, 16), nil // some memory even at n = 0: the kernel declares it
}
