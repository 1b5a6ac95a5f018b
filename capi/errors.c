// The thread-local error buffer lives in C: the body of an exported Go
// function runs on the caller's thread, but Go code may move between threads
// elsewhere, so Go never keeps "this thread's" state itself.
#include <string.h>
#include "metalcore.h"

static __thread char mc_err[1024];

__attribute__((visibility("hidden"))) void mc_set_error(const char* msg, size_t n) {
    if (n >= sizeof mc_err) n = sizeof mc_err - 1;
    memcpy(mc_err, msg, n);
    mc_err[n] = 0;
}

const char* mc_last_error(void) { return mc_err; }
