# src/api: the OpenAI and Anthropic adapters, the pipeline, the error table.
list(APPEND RP_SOURCES
  src/api/error.c
  src/api/request.c
  src/api/openai.c
  src/api/anthropic.c
  src/api/stopper.c
  src/api/pipeline.c
)
