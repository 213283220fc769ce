# GGUF block types as MLX affine groups (for the CUDA backend's MLX kernels).
list(APPEND RP_SOURCES src/backend/quant_affine.c)
