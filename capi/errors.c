// The thread-local error message lives in C: the body of an exported Go
// function runs on the caller's thread, but Go code may move between threads
// elsewhere, so Go never keeps "this thread's" state itself. The buffer is
// malloc'ed per thread behind a pthread key rather than a __thread array:
// static TLS is scarce for libraries loaded late (glibc keeps about 1.5 KB
// for all of them), and this one must load into processes that have used it.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "metalcore.h"

enum { MC_ERROR_SIZE = 1024 };

static pthread_key_t mc_error_key;
static pthread_once_t mc_error_once = PTHREAD_ONCE_INIT;

static void mc_error_key_init(void) { pthread_key_create(&mc_error_key, free); }

static char* mc_error_buffer(int create) {
    pthread_once(&mc_error_once, mc_error_key_init);
    char* b = pthread_getspecific(mc_error_key);
    if (!b && create && (b = malloc(MC_ERROR_SIZE)) != NULL) {
        b[0] = 0;
        if (pthread_setspecific(mc_error_key, b) != 0) {
            free(b);
            b = NULL;
        }
    }
    return b;
}

__attribute__((visibility("hidden"))) void mc_set_error(const char* msg, size_t n) {
    char* b = mc_error_buffer(1);
    if (!b) return; /* out of memory: the status still says what failed */
    if (n >= MC_ERROR_SIZE) n = MC_ERROR_SIZE - 1;
    memcpy(b, msg, n);
    b[n] = 0;
}

const char* mc_last_error(void) {
    const char* b = mc_error_buffer(0);
    return b ? b : "";
}
