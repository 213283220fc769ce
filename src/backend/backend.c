/* backend/backend.c - dtype facts shared by every backend. */
#include "backend/backend.h"

#include "backend/quant.h"

const char *rp_dtype_name(rp_dtype dt)
{
    static const char *const names[RP_DT_COUNT] = {
        [RP_DT_F32] = "f32",   [RP_DT_F16] = "f16",   [RP_DT_BF16] = "bf16",
        [RP_DT_Q8_0] = "q8_0", [RP_DT_Q4_0] = "q4_0", [RP_DT_Q4_1] = "q4_1",
        [RP_DT_Q5_0] = "q5_0", [RP_DT_Q5_1] = "q5_1", [RP_DT_Q4_K] = "q4_k",
        [RP_DT_Q5_K] = "q5_k", [RP_DT_Q6_K] = "q6_k", [RP_DT_MLX4] = "mlx4",
        [RP_DT_MLX8] = "mlx8",
    };
    return (unsigned)dt < RP_DT_COUNT ? names[dt] : "?";
}

int rp_dtype_block(rp_dtype dt)
{
    switch (dt) {
    case RP_DT_F32:
    case RP_DT_F16:
    case RP_DT_BF16: return 1;
    case RP_DT_Q4_K:
    case RP_DT_Q5_K:
    case RP_DT_Q6_K: return 256;
    default: return 32;
    }
}

int rp_dtype_is_quant(rp_dtype dt) { return dt >= RP_DT_Q8_0 && dt < RP_DT_COUNT; }

size_t rp_dtype_row_bytes(rp_dtype dt, int64_t n)
{
    switch (dt) {
    case RP_DT_F32: return (size_t)n * 4;
    case RP_DT_F16:
    case RP_DT_BF16: return (size_t)n * 2;
    case RP_DT_MLX4: return (size_t)n / 2;
    case RP_DT_MLX8: return (size_t)n;
    default: break;
    }
    size_t bb = rp_quant_block_bytes(dt);
    return bb ? (size_t)(n / rp_dtype_block(dt)) * bb : 0;
}
