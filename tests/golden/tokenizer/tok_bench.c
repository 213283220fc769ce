/* tests/golden/tokenizer/tok_bench.c - tokenizer benchmark (not a test; see
 * scripts/bench-tokenizer.sh): load time and single-thread encode throughput.
 *   tok_bench TOKENIZER TEXT_FILE [CHUNK_BYTES [REPS]]
 * Each of REPS rounds (default 5) loads a fresh tokenizer (the load time), encodes the whole
 * file once with it (first pass: nothing cached yet, the honest figure), once more (warm:
 * the shared word cache is filled), and then in chunks of CHUNK_BYTES (cut at newlines;
 * default 4096) as a server sees prompts. Each figure is the best over the rounds, in wall
 * and thread CPU time: on a shared machine the CPU figure is the one that measures the code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/file.h"
#include "text/tokenizer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of this thread: on a shared machine wall time mostly measures the neighbours. */
static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct best {
    double wall, cpu;
} best;

static void keep(best *b, double wall, double c)
{
    if (wall < b->wall)
        b->wall = wall;
    if (c < b->cpu)
        b->cpu = c;
}

static int encode_once(const rp_tokenizer *tok, const char *text, size_t len, int *n_tokens,
                       best *b)
{
    rp_err err;
    int32_t *ids;
    int n;
    double t0 = now(), c0 = cpu();
    if (rp_tokenizer_encode(tok, text, len, 0, &ids, &n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    keep(b, now() - t0, cpu() - c0);
    rp_free(ids);
    *n_tokens = n;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench TOKENIZER TEXT_FILE [CHUNK_BYTES [REPS]]\n");
        return 2;
    }
    size_t chunk = argc > 3 ? (size_t)atol(argv[3]) : 4096;
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    if (reps < 1)
        reps = 1;
    rp_err err;
    char *text;
    size_t len;
    if (rp_file_read(argv[2], &text, &len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    best load = {1e9, 1e9}, cold = {1e9, 1e9}, warm = {1e9, 1e9}, chunked = {1e9, 1e9};
    int n_tokens = 0;
    for (int r = 0; r < reps; r++) {
        rp_tokenizer *tok = NULL;
        double t0 = now(), c0 = cpu();
        if (rp_tokenizer_load(argv[1], &tok, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        keep(&load, now() - t0, cpu() - c0);
        if (encode_once(tok, text, len, &n_tokens, &cold) ||
            encode_once(tok, text, len, &n_tokens, &warm))
            return 1;
        t0 = now();
        c0 = cpu();
        size_t pos = 0;
        while (pos < len) {
            size_t end = pos + chunk < len ? pos + chunk : len;
            while (end < len && text[end - 1] != '\n')
                end++;
            int32_t *ids;
            int n;
            if (rp_tokenizer_encode(tok, text + pos, end - pos, 0, &ids, &n, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            rp_free(ids);
            pos = end;
        }
        keep(&chunked, now() - t0, cpu() - c0);
        rp_tokenizer_free(tok);
    }
    double mb = (double)len / 1e6;
    printf("tokenizer %s\n  load: %.1f ms wall, %.1f ms CPU (best of %d)\n", argv[1],
           load.wall * 1e3, load.cpu * 1e3, reps);
    printf("  text: %.2f MB, %d tokens (%.2f bytes/token)\n", mb, n_tokens,
           (double)len / (n_tokens ? n_tokens : 1));
    printf("  encode, one call, first pass: %.1f MB/s wall, %.1f MB/s CPU (fresh tokenizer)\n",
           mb / cold.wall, mb / cold.cpu);
    printf("  encode, one call, warm:       %.1f MB/s wall, %.1f MB/s CPU (shared word cache)\n",
           mb / warm.wall, mb / warm.cpu);
    printf("  encode, %zu-byte chunks:     %.1f MB/s wall, %.1f MB/s CPU (warm)\n", chunk,
           mb / chunked.wall, mb / chunked.cpu);
    rp_free(text);
    return 0;
}
