/* A stand-in for a host's libraries that use initial-exec TLS (as Python's
 * and PyTorch's do): it takes most of the static TLS that glibc keeps for
 * libraries loaded after start-up, so the ABI test shows that metalcore
 * needs very little of it. */
__attribute__((tls_model("initial-exec"))) __thread char static_tls_block[1152];

char* static_tls_touch(int i) {
    static_tls_block[i % sizeof static_tls_block] = 1;
    return static_tls_block;
}
