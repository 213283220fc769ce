/* tests/gpu/gpu_check_gguf.c - GGUF weights on the GPU (rapid_gpu_check; cuda_backend.c
 * note 5: the affine types run as MLX 4/8-bit with group 32, Q6_K as f16).
 *
 * Kernel checks: random 1024 x 4096 matrices quantized by rp_quant_row to each type, uploaded
 * through rp_backend_weight and multiplied on the GPU (1 token: the matvec path; 8: the
 * tensor-core path), against a double-precision host product of the GGUF reference
 * dequantization (rp_quant_dequant_row) with the exact x. Tolerance, relative to each row's
 * sum |w x|: 1.05 * 2^-8. The 8-token path rounds x and each dequantized weight to bf16
 * (2^-9 each: at most 2^-8 of every product); the 1-token path's two-part int8 x is within
 * 1/64516 of each run's max, and the K types' f16 scale products within 2^-11, both far
 * below it. The worst ratio is printed with each line.
 *
 * Fixture checks: GGUF twins of the dense fixtures (tests/unit/model/gguf_writer.c, the
 * layout llama.cpp's converter writes, Q/K rows permuted for llama) in Q8_0 and Q4_0, and
 * for llama_gqa also Q4_1, Q5_0 and Q5_1 (gpt_oss: Q8_0, and MXFP4 experts, which the GPU
 * holds as bf16), on the GPU against the CPU's reference kernels on
 * the same file (gpu_quant_compare: prefill, decode and greedy tokens, the MLX tolerances).
 * The fixtures' rows are too short for the 256-element K types; the kernel checks cover them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/quant.h"
#include "base/alloc.h"
#include "gguf_writer.h"
#include "gpu_check.h"

static uint64_t g_rng = 0x6a09e667f3bcc909ull;
static float grand(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static void gguf_mm_check(rp_backend *be, rp_dtype dt, long rows, long cols, int n)
{
    rp_err err = {0};
    size_t rb = rp_dtype_row_bytes(dt, cols);
    uint8_t *wq = rp_alloc(rb * (size_t)rows);
    float *row = rp_alloc(sizeof(float) * (size_t)cols), *x = rp_alloc(sizeof(float) * (size_t)n * cols),
          *y = rp_alloc(sizeof(float) * (size_t)n * rows);
    for (long r = 0; r < rows; r++) {
        float amp = 0.02f + (float)(r % 7) * 0.3f; /* groups of several scales, some off centre */
        for (long c = 0; c < cols; c++)
            row[c] = amp * grand() + (r % 5 == 2 ? 0.5f * amp : 0.0f);
        rp_quant_row(dt, row, cols, wq + (size_t)r * rb);
    }
    for (long i = 0; i < (long)n * cols; i++)
        x[i] = grand();
    rp_tensor wt = {.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = wq,
                    .n_bytes = rb * (size_t)rows},
              xt = {.dtype = RP_DT_F32, .n_dims = 2, .shape = {n, cols}, .data = x,
                    .n_bytes = sizeof(float) * (size_t)n * cols},
              wd, xd;
    float *yd = NULL;
    double worst = INFINITY;
    if (rp_backend_weight(be, &wt, &wd, &err) == RP_OK &&
        rp_backend_weight(be, &xt, &xd, &err) == RP_OK &&
        (yd = rp_backend_buf_alloc(be, sizeof(float) * (size_t)n * rows, 0))) {
        rp_op_matmul(be, &wd, xd.data, n, yd);
        rp_backend_to_host(be, y, yd, sizeof(float) * (size_t)n * rows);
        worst = 0;
        for (long r = 0; r < rows; r++) {
            rp_quant_dequant_row(&wt, r, row);
            for (int t = 0; t < n; t++) {
                double ref = 0, mag = 0;
                for (long c = 0; c < cols; c++) {
                    ref += (double)row[c] * x[(long)t * cols + c];
                    mag += fabs((double)row[c] * x[(long)t * cols + c]);
                }
                double d = fabs(ref - y[(long)t * rows + r]) / (mag > 0 ? mag : 1);
                worst = d > worst || isnan(d) ? d : worst;
            }
        }
    } else {
        printf("      setup: %s\n", err.msg);
    }
    char what[96];
    snprintf(what, sizeof what, "%s %ldx%ld n=%d (rel. to sum|wx|)", rp_dtype_name(dt), rows,
             cols, n);
    double tol = 1.05 * 0x1p-8;
    gpu_check_report(worst <= tol, "gguf", what, worst, tol);
    rp_backend_buf_free(be, yd);
    rp_free(wq), rp_free(row), rp_free(x), rp_free(y);
}

void gpu_gguf_kernel_checks(rp_backend *be)
{
    const rp_dtype types[] = {RP_DT_Q4_0, RP_DT_Q4_1, RP_DT_Q8_0, RP_DT_Q5_0,
                              RP_DT_Q5_1, RP_DT_Q4_K, RP_DT_Q5_K, RP_DT_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        gguf_mm_check(be, types[i], 1024, 4096, 1);
        gguf_mm_check(be, types[i], 1024, 4096, 8);
    }
    gguf_mm_check(be, RP_DT_Q4_K, 4096, 14336, 1); /* the 8B down projection's shape */
}

void gpu_gguf_fixture(const char *name, float sensitivity)
{
    if (strcmp(name, "qwen3_5") == 0)
        return; /* its fixture's value heads are not whole blocks (gguf_families_test) */
    fixture f;
    if (fixture_load(name, &f)) {
        gpu_check_report(0, name, "fixture", 0, 0);
        return;
    }
    const rp_dtype all[] = {RP_DT_Q8_0, RP_DT_Q4_0, RP_DT_Q4_1, RP_DT_Q5_0, RP_DT_Q5_1},
                   oss[] = {RP_DT_Q8_0, RP_DT_MXFP4};
    int is_oss = strcmp(name, "gpt_oss") == 0, n = strcmp(name, "llama_gqa") == 0 ? 5 : 2;
    for (int i = 0; i < n; i++) {
        rp_dtype dt = is_oss ? oss[i] : all[i];
        char path[128], label[32];
        snprintf(path, sizeof path, "/tmp/rp_gpu_gguf_%d_%s.gguf", (int)getpid(), name);
        gguf_opts o = {.gemma_pattern = 1};
        snprintf(label, sizeof label, "gguf %s", rp_dtype_name(dt));
        if (gguf_write_ex(f.dir, dt, 0, path, &o)) {
            gpu_check_report(0, name, label, 0, 0);
            continue;
        }
        gpu_quant_compare(&f, name, path, label, sensitivity);
        unlink(path);
    }
    fixture_free(&f);
}
