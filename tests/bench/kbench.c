/* tests/bench/kbench.c - matmul microbenchmark for float weights against the bandwidth probe.
 *
 * Not a test: `build/kbench [reps] [n_prefill] [threads] [dp]` times rp_op_matmul on Llama-3.2-1B shapes (bf16
 * by default) for one token (decode: GB/s of weights read, as a ratio to
 * rp_backend_read_bandwidth measured alternately in the same process, best of reps) and for
 * 128 tokens (prefill: GFLOP/s, and the thread CPU seconds so a loaded machine shows).
 * Single-threaded caller; errors abort with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/half.h"

typedef struct shape {
    const char *name;
    long rows, cols;
} shape;

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    int n_prefill = argc > 2 ? atoi(argv[2]) : 128;
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    const char *mode = argc > 4 ? argv[4] : "dp"; /* d: decode, p: prefill */
    rp_backend *be = rp_backend_new(threads, 0);
    if (!be) {
        fprintf(stderr, "kbench: no backend\n");
        return 1;
    }
    /* one layer of Llama-3.2-1B (q, k, v, o, gate, up, down) in one buffer, then lm_head */
    shape layer[] = {{"q", 2048, 2048},   {"k", 512, 2048},    {"v", 512, 2048},
                     {"o", 2048, 2048},   {"gate", 8192, 2048}, {"up", 8192, 2048},
                     {"down", 2048, 8192}};
    long n_layer = 0;
    for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
        n_layer += layer[i].rows * layer[i].cols;
    /* 8 layers' worth (8 x 60.8M x 2 B = 970 MB) so nothing stays in cache */
    int n_copies = 8;
    size_t bytes = (size_t)n_layer * 2 * (size_t)n_copies;
    uint16_t *w = rp_alloc_aligned(bytes, RP_TAG_MISC);
    float *x = rp_alloc_aligned(sizeof(float) * 8192 * (size_t)n_prefill, RP_TAG_MISC);
    float *y = rp_alloc_aligned(sizeof(float) * 8192 * (size_t)n_prefill, RP_TAG_MISC);
    if (!w || !x || !y) {
        fprintf(stderr, "kbench: out of memory\n");
        return 1;
    }
    uint32_t s = 1;
    for (size_t i = 0; i < bytes / 2; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = rp_f32_to_bf16(((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f);
    }
    for (long i = 0; i < 8192L * n_prefill; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    rp_tensor t[8][7];
    size_t off = 0;
    for (int c = 0; c < n_copies; c++)
        for (int i = 0; i < 7; i++) {
            t[c][i] = (rp_tensor){.dtype = RP_DT_BF16, .n_dims = 2,
                                  .shape = {layer[i].rows, layer[i].cols},
                                  .data = w + off,
                                  .n_bytes = (size_t)layer[i].rows * layer[i].cols * 2};
            off += (size_t)layer[i].rows * layer[i].cols;
        }
    double best_bw = 0, best_mv = 0, best_fused = 0;
    for (int r = 0; r < reps && strchr(mode, 'd'); r++) {
        double bw = rp_backend_read_bandwidth(be, (size_t)1 << 30, 1);
        best_bw = bw > best_bw ? bw : best_bw;
        /* decode: every matrix of 8 layers, one call each */
        int64_t t0 = rp_now_ns();
        for (int c = 0; c < n_copies; c++)
            for (int i = 0; i < 7; i++)
                rp_op_matmul(be, &t[c][i], x, 1, y);
        double sec = (double)(rp_now_ns() - t0) * 1e-9, mv = (double)bytes / sec / 1e9;
        best_mv = mv > best_mv ? mv : best_mv;
        /* decode as the model calls it: q/k/v and gate/up fused */
        t0 = rp_now_ns();
        for (int c = 0; c < n_copies; c++) {
            const rp_tensor *qkv[3] = {&t[c][0], &t[c][1], &t[c][2]};
            float *yq[3] = {y, y + 2048, y + 2560};
            rp_op_matmul_n(be, 3, qkv, x, 1, yq);
            rp_op_matmul(be, &t[c][3], x, 1, y);
            const rp_tensor *gu[2] = {&t[c][4], &t[c][5]};
            float *yg[2] = {y, y + 8192};
            rp_op_matmul_n(be, 2, gu, x, 1, yg);
            rp_op_matmul(be, &t[c][6], x, 1, y);
        }
        sec = (double)(rp_now_ns() - t0) * 1e-9;
        best_fused = (double)bytes / sec / 1e9 > best_fused ? (double)bytes / sec / 1e9 : best_fused;
        printf("rep %d: probe %.2f GB/s, matvec %.2f GB/s, fused %.2f GB/s\n", r, bw, mv,
               (double)bytes / sec / 1e9);
    }
    printf("decode: probe %.2f GB/s, matvec %.2f GB/s = %.3f of the probe, fused %.2f = %.3f\n",
           best_bw, best_mv, best_mv / best_bw, best_fused, best_fused / best_bw);
    /* prefill: one layer's matrices x n_prefill tokens */
    double best_pf = 0, cpu_pf = 1e30;
    for (int r = 0; r < reps && strchr(mode, 'p'); r++) {
        int64_t t0 = rp_now_ns();
        double c0 = cpu_now();
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 7; i++)
                rp_op_matmul(be, &t[c][i], x, n_prefill, y);
        double sec = (double)(rp_now_ns() - t0) * 1e-9, cpu = cpu_now() - c0;
        double gf = 2.0 * (double)n_layer * 2 * n_prefill / sec / 1e9;
        best_pf = gf > best_pf ? gf : best_pf;
        cpu_pf = cpu < cpu_pf ? cpu : cpu_pf;
        printf("prefill rep %d: %.1f GFLOP/s wall, %.3f s wall, %.3f s cpu\n", r, gf, sec, cpu);
    }
    printf("prefill %d tok: best %.1f GFLOP/s wall; %.1f GFLOP/s per cpu-second; a 1.5B model "
           "would run at %.0f tok/s (wall) %.0f (per 2 full cores)\n",
           n_prefill, best_pf, 2.0 * (double)n_layer * 2 * n_prefill / cpu_pf / 1e9,
           best_pf * 1e9 / (2.0 * 1.236e9), /* lm_head is one token in prefill */
           2.0 * 2.0 * (double)n_layer * 2 * n_prefill / cpu_pf / (2.0 * 1.236e9));
    rp_free_aligned(w);
    rp_free_aligned(x);
    rp_free_aligned(y);
    rp_backend_free(be);
    return 0;
}
