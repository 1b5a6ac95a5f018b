//go:build linux && cgo

package cpu

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*mc_gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
static mc_gomp_parallel_fn mc_gomp_parallel;
static int (*mc_omp_get_max_threads)(void);

extern void mcOpenMPClaim(uintptr_t);

static void mc_openmp_body(void *claim) { mcOpenMPClaim((uintptr_t)claim); }

// mc_gomp_of takes the runtime's entry points from handle h (the object
// and what it loaded), or closes h.
static int mc_gomp_of(void *h) {
	void *f = h ? dlsym(h, "GOMP_parallel") : 0, *n = f ? dlsym(h, "omp_get_max_threads") : 0;
	if (!n) {
		if (h) dlclose(h);
		return 0;
	}
	mc_gomp_parallel = (mc_gomp_parallel_fn)f; // h stays open: the runtime stays loaded
	mc_omp_get_max_threads = (int (*)(void))n;
	return 1;
}

// mc_find_gomp looks in each loaded object whose name contains part (any
// object, for an empty part).
static int mc_find_gomp(struct dl_phdr_info *info, size_t size, void *part) {
	if (!info->dlpi_name || !info->dlpi_name[0] || !strstr(info->dlpi_name, (const char *)part)) return 0;
	return mc_gomp_of(dlopen(info->dlpi_name, RTLD_NOLOAD | RTLD_LAZY));
}

// mc_openmp_find takes the entry point of an OpenMP runtime among the
// objects loaded already (GNU's, which LLVM's and Intel's runtimes also
// export): PyTorch's where it is loaded (a lookup through its CPU library
// finds the runtime that library was linked with, though another library's
// copy of a runtime loaded first), else the first; mc_openmp_open loads the
// one named.
static int mc_openmp_find(void) {
	return dl_iterate_phdr(mc_find_gomp, "libtorch_cpu") || dl_iterate_phdr(mc_find_gomp, "");
}
static int mc_openmp_open(const char *name) { return mc_gomp_of(dlopen(name, RTLD_NOW | RTLD_LOCAL)); }

// mc_openmp_team is the size of the calling thread's teams (the host's
// setting: PyTorch's torch.set_num_threads).
static int mc_openmp_team(void) { return mc_omp_get_max_threads(); }

static void mc_openmp_run(uintptr_t claim, unsigned threads) {
	mc_gomp_parallel(mc_openmp_body, (void *)claim, threads, 0);
}
*/
import "C"

import (
	"fmt"
	"io"
	"os"
	"runtime/cgo"
	"sync"
	"unsafe"
)

// A host that computes with OpenMP (PyTorch on the CPU) keeps its team's
// threads spinning for a while after each of its parallel ops. Goroutines
// woken for a call then wait for those cores, on a machine of few cores
// longer than many calls take (bench/cpu-pool.md), and while they run, the
// host's next op waits for them. So where the process has an OpenMP runtime, a
// call's pieces run on a team of that runtime's threads, the host's own,
// as its ops' do. MC_CPU_OPENMP chooses: unset, the runtime loaded in the
// process when the first call that splits runs (none: goroutines); "0",
// goroutines; otherwise the runtime library to load by that name.
var openMP = sync.OnceValue(func() bool { return openMPFrom(os.Getenv("MC_CPU_OPENMP"), os.Stderr) })

func openMPFrom(setting string, warn io.Writer) bool {
	switch setting {
	case "0":
		return false
	case "":
		return C.mc_openmp_find() != 0
	}
	name := C.CString(setting)
	defer C.free(unsafe.Pointer(name))
	if C.mc_openmp_open(name) == 0 {
		fmt.Fprintf(warn, "metalcore: MC_CPU_OPENMP=%q: no OpenMP runtime loads by that name; using goroutines\n", setting)
		return false
	}
	return true
}

// teamSize is the size of the team a call that splits runs on: the
// host's (the size its own parallel ops take, not the call's workers':
// after a smaller team GNU's runtime ends the pool's surplus threads, and
// the host's next op creates them again), or 0 for goroutines: no runtime,
// a library thread count below the team's, or a host at one thread, which
// runs its ops inline, and whose core a team's thread spinning after each
// call would only take from it.
func teamSize() int {
	if !openMP() {
		return 0
	}
	team := int(C.mc_openmp_team())
	if team < 2 || Threads() < team {
		return 0
	}
	return team
}

// runTeam runs claim on each thread of an OpenMP team of team threads,
// returning when all have.
func runTeam(team int, claim func()) {
	h := cgo.NewHandle(claim)
	defer h.Delete()
	C.mc_openmp_run(C.uintptr_t(h), C.unsigned(team))
}
