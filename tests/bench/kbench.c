/* tests/bench/kbench.c - matmul microbenchmark (bf16, MLX 4/8-bit, Q4_0, Q8_0) against the
 * bandwidth probe.
 *
 * Not a test: `build/kbench [reps] [n_prefill] [threads] [dp] [dtype]` times rp_op_matmul on
 * Llama-3.2-1B shapes (dtype bf16 by default; mlx4, mlx8 (group 64, bf16 scales), q4_0 or q8_0:
 * random codes, through rp_backend_weight like a model load, so the backend's repacked copy is
 * what decode reads) for one token (decode: GB/s of weights read, as a ratio to
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

static rp_dtype parse_dtype(const char *s)
{
    if (!strcmp(s, "mlx4"))
        return RP_DT_MLX4;
    if (!strcmp(s, "mlx8"))
        return RP_DT_MLX8;
    if (!strcmp(s, "q4_0"))
        return RP_DT_Q4_0;
    if (!strcmp(s, "q8_0"))
        return RP_DT_Q8_0;
    return RP_DT_BF16;
}

/* bytes of one matrix of dtype dt (codes, plus MLX scales and biases) */
static size_t mat_bytes(rp_dtype dt, long rows, long cols)
{
    size_t b = (size_t)rows * rp_dtype_row_bytes(dt, cols);
    if (dt == RP_DT_MLX4 || dt == RP_DT_MLX8)
        b += 2 * (size_t)rows * (size_t)(cols / 64) * 2;
    return b;
}

typedef struct shape {
    const char *name;
    long rows, cols;
} shape;

static void sort_doubles(double *v, int n)
{
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (v[b] < v[a]) {
                double tmp = v[a];
                v[a] = v[b];
                v[b] = tmp;
            }
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* random weights: bf16 values of about +-0.05, else random bytes (codes) */
static void fill_random(rp_dtype dt, uint8_t *w, size_t bytes, uint32_t *s)
{
    if (dt == RP_DT_BF16)
        for (size_t i = 0; i < bytes / 2; i++) {
            *s = *s * 1664525u + 1013904223u;
            ((uint16_t *)w)[i] = rp_f32_to_bf16(((float)(*s >> 8) / 16777216.0f - 0.5f) * 0.1f);
        }
    else
        for (size_t i = 0; i < bytes; i++) {
            *s = *s * 1664525u + 1013904223u;
            w[i] = (uint8_t)(*s >> 24);
        }
}

/* A rows x cols matrix of dt at w (mat_bytes of it, random) as the backend's weight: sane
 * scales written in first (Q4_0 / Q8_0 block scales, MLX scales and biases); 1 on failure. */
static int make_weight(rp_backend *be, rp_dtype dt, long rows, long cols, uint8_t *w,
                       rp_tensor *out)
{
    size_t nb = (size_t)rows * rp_dtype_row_bytes(dt, cols);
    rp_tensor src = {.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = w, .n_bytes = nb};
    if (dt == RP_DT_Q4_0 || dt == RP_DT_Q8_0) { /* sane f16 block scales */
        size_t bb = dt == RP_DT_Q4_0 ? 18 : 34;
        for (size_t k = 0; k < nb; k += bb) {
            uint16_t h = rp_f32_to_f16(0.001f);
            memcpy(w + k, &h, 2);
        }
    }
    if (dt == RP_DT_MLX4 || dt == RP_DT_MLX8) {
        size_t ng = (size_t)rows * (size_t)(cols / 64);
        uint16_t *sc = (uint16_t *)(w + nb);
        for (size_t k = 0; k < 2 * ng; k++)
            sc[k] = rp_f32_to_bf16(k < ng ? 0.001f : -0.01f);
        src.scales = sc;
        src.biases = sc + ng;
        src.scale_dtype = RP_DT_BF16;
        src.group_size = 64;
    }
    rp_err err = {0};
    if (rp_backend_weight(be, &src, out, &err)) {
        fprintf(stderr, "kbench: %s\n", err.msg);
        return 1;
    }
    return 0;
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
    /* about 1 GB of weights (8 layers of bf16) so nothing stays in cache */
    rp_dtype dt = parse_dtype(argc > 5 ? argv[5] : "bf16");
    size_t layer_bytes = 0;
    for (int i = 0; i < 7; i++)
        layer_bytes += mat_bytes(dt, layer[i].rows, layer[i].cols);
    int n_copies = (int)(((size_t)n_layer * 2 * 8 + layer_bytes - 1) / layer_bytes);
    size_t bytes = layer_bytes * (size_t)n_copies;
    uint8_t *w = rp_alloc_aligned(bytes, RP_TAG_MISC);
    /* decode's fused gate/up writes 2 x 8192 outputs: at least two tokens' room */
    size_t n_io = 8192 * (size_t)(n_prefill > 2 ? n_prefill : 2);
    float *x = rp_alloc_aligned(sizeof(float) * n_io, RP_TAG_MISC);
    float *y = rp_alloc_aligned(sizeof(float) * n_io, RP_TAG_MISC);
    rp_tensor(*t)[7] = rp_alloc(sizeof(rp_tensor[7]) * (size_t)n_copies);
    if (!w || !x || !y || !t) {
        fprintf(stderr, "kbench: out of memory\n");
        return 1;
    }
    uint32_t s = 1;
    fill_random(dt, w, bytes, &s);
    for (size_t i = 0; i < n_io; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    size_t off = 0;
    for (int c = 0; c < n_copies; c++)
        for (int i = 0; i < 7; i++) {
            if (make_weight(be, dt, layer[i].rows, layer[i].cols, w + off, &t[c][i]))
                return 1;
            off += mat_bytes(dt, layer[i].rows, layer[i].cols);
        }
    /* lm_head (128256 x 2048): a fifth of a 1B model's bytes a token, one matrix alone */
    const long head_rows = 128256, head_cols = 2048;
    size_t head_bytes = mat_bytes(dt, head_rows, head_cols);
    uint8_t *wh = rp_alloc_aligned(head_bytes, RP_TAG_MISC);
    float *yh = rp_alloc_aligned(sizeof(float) * (size_t)head_rows, RP_TAG_MISC);
    rp_tensor head;
    if (!wh || !yh) {
        fprintf(stderr, "kbench: out of memory\n");
        return 1;
    }
    fill_random(dt, wh, head_bytes, &s);
    if (make_weight(be, dt, head_rows, head_cols, wh, &head))
        return 1;
    printf("%s: %d layers' matrices, %.2f GB\n", rp_dtype_name(dt), n_copies, (double)bytes / 1e9);
    double best_bw = 0, best_mv = 0, best_fused = 0, rat[64], hrat[64];
    if (reps > 64)
        reps = 64;
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
        rat[r] = (double)bytes / sec / 1e9 / bw;
        t0 = rp_now_ns();
        rp_op_matmul(be, &head, x, 1, yh);
        double hsec = (double)(rp_now_ns() - t0) * 1e-9;
        hrat[r] = (double)head_bytes / hsec / 1e9 / bw;
        printf("rep %d: probe %.2f GB/s, matvec %.2f GB/s, fused %.2f GB/s, lm_head %.2f GB/s\n",
               r, bw, mv, (double)bytes / sec / 1e9, (double)head_bytes / hsec / 1e9);
    }
    if (strchr(mode, 'd')) {
        sort_doubles(rat, reps);
        sort_doubles(hrat, reps);
    }
    printf("decode: probe %.2f GB/s, matvec %.2f GB/s = %.3f of the probe, fused %.2f = %.3f "
           "(median of the reps' fused / probe ratios %.3f)\n",
           best_bw, best_mv, best_mv / best_bw, best_fused, best_fused / best_bw,
           strchr(mode, 'd') && reps > 0 ? rat[reps / 2] : 0.0);
    if (strchr(mode, 'd') && reps > 0)
        printf("lm_head %ldx%ld alone: median %.3f of the probe\n", head_rows, head_cols,
               hrat[reps / 2]);
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
    rp_free(t);
    rp_free_aligned(w);
    rp_free_aligned(wh);
    rp_free_aligned(yh);
    rp_free_aligned(x);
    rp_free_aligned(y);
    rp_backend_free(be);
    return 0;
}
