list(APPEND RP_SOURCES
  src/model/blocks.c
  src/model/gemma3.c
  src/model/gpt_oss.c
  src/model/lfm2.c
  src/model/qwen3_5.c
  src/model/qwen3_moe.c
)
