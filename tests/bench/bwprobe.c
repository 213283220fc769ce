/* tests/bench/bwprobe.c - rapid's read-bandwidth probe on its own, for peer benchmarks.
 *
 * Not a test: `build/bwprobe [threads] [reps]` prints the GB/s (1e9 bytes/s) of
 * rp_backend_read_bandwidth over a 1 GiB buffer, best of reps (3), with a CPU backend of
 * `threads` pool threads (0: the default): the same call `rapid bench` makes after each decode
 * window, so scripts/bench-llamacpp.sh can set llama.cpp's decode against the same probe.
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 0, reps = argc > 2 ? atoi(argv[2]) : 3;
    rp_backend *be = rp_backend_new(threads, 0);
    if (!be) {
        fprintf(stderr, "bwprobe: no backend\n");
        return 1;
    }
    printf("%.2f\n", rp_backend_read_bandwidth(be, (size_t)1 << 30, reps > 0 ? reps : 3));
    rp_backend_free(be);
    return 0;
}
