/* backend/backend.c - dtype facts shared by every backend. */
#include "backend/backend.h"

const float rp_fp4_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

const char *rp_dtype_name(rp_dtype dt)
{
    switch (dt) {
    case RP_DT_F32: return "f32";
    case RP_DT_F16: return "f16";
    case RP_DT_BF16: return "bf16";
    case RP_DT_MXFP4: return "mxfp4";
    default: break;
    }
    return "?";
}

size_t rp_dtype_row_bytes(rp_dtype dt, int64_t n)
{
    switch (dt) {
    case RP_DT_F32: return (size_t)n * 4;
    case RP_DT_F16:
    case RP_DT_BF16: return (size_t)n * 2;
    case RP_DT_MXFP4: return (size_t)(n / 32) * 17;
    default: break;
    }
    return 0;
}
