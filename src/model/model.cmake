list(APPEND RP_SOURCES
  src/model/config.c
  src/model/gguf_model.c
  src/model/llama.c
  src/model/mlx.c
  src/model/model.c
  src/model/quantize.c
  src/model/rope.c
  src/model/safetensors.c
)
