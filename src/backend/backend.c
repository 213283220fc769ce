/* backend/backend.c - dtype facts shared by every backend. */
#include "backend/backend.h"

const char *rp_dtype_name(rp_dtype dt)
{
    switch (dt) {
    case RP_DT_F32: return "f32";
    case RP_DT_F16: return "f16";
    case RP_DT_BF16: return "bf16";
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
    default: break;
    }
    return 0;
}
