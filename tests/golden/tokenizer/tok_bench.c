/* tests/golden/tokenizer/tok_bench.c - tokenizer benchmark (not a test; see
 * scripts/bench-tokenizer.sh): load time and single-thread encode throughput.
 *   tok_bench TOKENIZER TEXT_FILE [CHUNK_BYTES]
 * Encodes the whole file in one call, and again in chunks of CHUNK_BYTES (cut at
 * newlines; default 4096) as a server sees prompts. Best of several runs.
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

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench TOKENIZER TEXT_FILE [CHUNK_BYTES]\n");
        return 2;
    }
    size_t chunk = argc > 3 ? (size_t)atol(argv[3]) : 4096;
    rp_err err;
    char *text;
    size_t len;
    if (rp_file_read(argv[2], &text, &len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    rp_tokenizer *tok = NULL;
    double best_load = 1e9;
    for (int r = 0; r < 5; r++) {
        if (tok)
            rp_tokenizer_free(tok);
        double t0 = now();
        if (rp_tokenizer_load(argv[1], &tok, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = now() - t0;
        if (dt < best_load)
            best_load = dt;
    }
    double best_whole = 1e9, best_chunk = 1e9;
    int n_tokens = 0;
    for (int r = 0; r < 3; r++) {
        int32_t *ids;
        int n;
        double t0 = now();
        if (rp_tokenizer_encode(tok, text, len, 0, &ids, &n, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = now() - t0;
        rp_free(ids);
        n_tokens = n;
        if (dt < best_whole)
            best_whole = dt;
        t0 = now();
        size_t pos = 0;
        while (pos < len) {
            size_t end = pos + chunk < len ? pos + chunk : len;
            while (end < len && text[end - 1] != '\n')
                end++;
            if (rp_tokenizer_encode(tok, text + pos, end - pos, 0, &ids, &n, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            rp_free(ids);
            pos = end;
        }
        dt = now() - t0;
        if (dt < best_chunk)
            best_chunk = dt;
    }
    printf("tokenizer %s\n  load: %.1f ms (best of 5)\n", argv[1], best_load * 1e3);
    printf("  text: %.2f MB, %d tokens (%.2f bytes/token)\n", (double)len / 1e6, n_tokens,
           (double)len / (n_tokens ? n_tokens : 1));
    printf("  encode, one call:        %.1f MB/s (%.2f M tokens/s)\n", (double)len / 1e6 / best_whole,
           n_tokens / 1e6 / best_whole);
    printf("  encode, %zu-byte chunks: %.1f MB/s\n", chunk, (double)len / 1e6 / best_chunk);
    rp_tokenizer_free(tok);
    rp_free(text);
    return 0;
}
