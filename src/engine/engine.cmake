list(APPEND RP_SOURCES
  src/engine/engine.c
  src/engine/sampler.c
)
